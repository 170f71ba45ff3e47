//! Trees stop for real: cancel and terminate reach every level, and their
//! replies come only once every task (cancel) or actor (terminate) of the
//! subtree is gone.

use crate::common::*;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use subagent_host::config::Limits;
use subagent_host::protocol::wire::*;
use subagent_host::{AdapterRouter, AgentAdapter, TaskContext, TaskFuture};
use subagent_host::{Host, HostConfig, SubagentId, Tree};

/// Builds a chain root → … four levels deep, each running a long task.
async fn four_level_tree(session: &subagent_host::Tree) -> Vec<SubagentId> {
    let mut ids = Vec::new();
    let mut parent = None;
    for level in 0..4 {
        let id = spawn(session, &format!("level{level}"), parent).await;
        delegate(session, id, sleeping_task(60_000)).await;
        ids.push(id);
        parent = Some(id);
    }
    // And a second branch under the root, also running.
    let side = spawn(session, "side", Some(ids[0])).await;
    delegate(session, side, sleeping_task(60_000)).await;
    ids.push(side);
    ids
}

#[actix_rt::test]
async fn cancel_at_the_root_of_a_four_level_tree_cancels_every_descendant_before_replying() {
    let host = host_with(test_limits());
    let (session, _events) = open(&host);
    let ids = four_level_tree(&session).await;
    assert_eq!(session.stats().tasks(), 5);
    let mut stopped = session.cancel(ids[0]).await.unwrap();
    // Nothing of the subtree is still running when the reply comes.
    assert_eq!(session.stats().tasks(), 0);
    stopped.sort();
    let mut expected = ids.clone();
    expected.sort();
    assert_eq!(stopped, expected, "the reply lists every subagent it stopped");
    for id in &ids {
        assert_eq!(session.await_result(*id).await.unwrap().status, SubagentStatus::Cancelled);
    }
    // Cancel keeps the actors (a cancelled task's actor does not sleep).
    assert_eq!(session.stats().actors(), 5);
}

#[actix_rt::test]
async fn terminate_at_the_root_of_a_four_level_tree_stops_every_actor_before_replying() {
    let host = host_with(test_limits());
    let (session, _events) = open(&host);
    let bystander = spawn(&session, "bystander", None).await;
    // A message it has not read keeps the bystander's actor awake, idle.
    let payload = SubagentMessagePayload { kind: "note".into(), content: json!(1) };
    session.message("client".into(), bystander, payload).await.unwrap();
    let ids = four_level_tree(&session).await;
    assert_eq!(session.stats().actors(), 6);
    let mut stopped = session.terminate(ids[0]).await.unwrap();
    assert_eq!(session.stats().tasks(), 0);
    // Only the bystander's actor is left.
    assert_eq!(session.stats().actors(), 1);
    stopped.sort();
    let mut expected = ids.clone();
    expected.sort();
    assert_eq!(stopped, expected);
    for id in &ids {
        assert_eq!(listed_status(&session, *id).await, Some(SubagentStatus::Terminated));
    }
    assert_eq!(listed_status(&session, bystander).await, Some(SubagentStatus::Ready));
}

#[actix_rt::test]
async fn terminate_in_the_middle_of_a_tree_leaves_the_ancestors_running() {
    let host = host_with(test_limits());
    let (session, _events) = open(&host);
    let ids = four_level_tree(&session).await;
    let mut stopped = session.terminate(ids[2]).await.unwrap();
    stopped.sort();
    let mut expected = vec![ids[2], ids[3]];
    expected.sort();
    assert_eq!(stopped, expected);
    assert_eq!(session.stats().tasks(), 3);
    assert_eq!(listed_status(&session, ids[1]).await, Some(SubagentStatus::Running));
    // Cancelling the root now reaches what is left and skips the dead branch.
    let stopped = session.cancel(ids[0]).await.unwrap();
    assert_eq!(stopped.len(), 3);
    assert_eq!(session.stats().tasks(), 0);
}

/// An adapter that never looks at its cancellation signal.
struct Stubborn;

impl AgentAdapter for Stubborn {
    fn name(&self) -> &str {
        "stubborn"
    }

    fn run(&self, _ctx: TaskContext) -> TaskFuture {
        Box::pin(async {
            std::future::pending::<()>().await;
            Ok(JsonObject::new().into())
        })
    }
}

#[actix_rt::test]
async fn an_adapter_that_ignores_cancel_is_stopped_once_the_grace_period_passes() {
    // On the paused clock (the tree lives on this thread): no real waiting.
    tokio::time::pause();
    let router = AdapterRouter::default().route("stubborn", Arc::new(Stubborn)).unwrap();
    let host = Host::new(HostConfig { limits: test_limits(), router, ..Default::default() });
    let (session, _events) = open(&host);
    let request =
        SpawnRequest { agent: SubagentConfig::new("mule", "stubborn"), parent_agent_id: None, root_agent_id: None };
    let id = session.spawn(request).await.unwrap().subagent_id;
    delegate(&session, id, TaskDefinition::new("forever", "never ends")).await;
    let started = tokio::time::Instant::now();
    let stopped = session.cancel(id).await.unwrap();
    let waited = started.elapsed();
    assert_eq!(stopped, vec![id]);
    assert_eq!(session.stats().tasks(), 0);
    // It was given the whole grace period (200 ms in test_limits), no less.
    assert!(waited >= Duration::from_millis(200), "stopped after {waited:?}");
    assert_eq!(session.await_result(id).await.unwrap().status, SubagentStatus::Cancelled);
}

#[actix_rt::test]
async fn the_grace_period_stops_only_tasks_still_cancelled_not_one_started_since() {
    // On the paused clock (the tree lives on this thread): no real waiting.
    tokio::time::pause();
    let router = AdapterRouter::default().route("stubborn", Arc::new(Stubborn)).unwrap();
    let host = Host::new(HostConfig { limits: test_limits(), router, ..Default::default() });
    let (session, _events) = open(&host);
    let request = SpawnRequest {
        agent: SubagentConfig::new("mule", "stubborn"),
        parent_agent_id: Some("client".into()),
        root_agent_id: None,
    };
    let mule = session.spawn(request).await.unwrap().subagent_id;
    // A scripted child winds up at once; its stubborn parent holds the cancel
    // for the whole grace period.
    let quick = spawn(&session, "quick", Some(mule)).await;
    delegate(&session, mule, TaskDefinition::new("forever", "never ends")).await;
    delegate(&session, quick, sleeping_task(600_000)).await;
    let cancelling = sent(session.cancel(mule)).await;
    wait_for_status(&session, quick, SubagentStatus::Cancelled).await;
    // A new task on the child, inside the cancel's grace period.
    delegate(&session, quick, sleeping_task(600_000)).await;
    let mut stopped = cancelling.await.unwrap();
    stopped.sort();
    let mut expected = vec![mule, quick];
    expected.sort();
    assert_eq!(stopped, expected);
    assert_eq!(session.await_result(mule).await.unwrap().status, SubagentStatus::Cancelled);
    // The grace period's end stopped the stubborn task, not the new one.
    assert_eq!(listed_status(&session, quick).await, Some(SubagentStatus::Running));
    assert_eq!(session.stats().tasks(), 1);
    session.close().await;
}

#[actix_rt::test]
async fn closing_a_session_terminates_every_tree_and_answers_pending_awaits() {
    let host = host_with(test_limits());
    let (session, _events) = open(&host);
    let ids = four_level_tree(&session).await;
    // Pending at the leaf before the close arrives.
    let pending = sent(session.await_result(ids[3])).await;
    let stopped = session.close().await;
    assert_eq!(stopped.len(), 5);
    assert_eq!((session.stats().tasks(), session.stats().actors()), (0, 0));
    let answer = pending.await.unwrap();
    assert_eq!(answer.status, SubagentStatus::Terminated);
    assert!(!ids.iter().any(|id| host.id_in_use(*id)), "a closed session holds no ids");
}

#[actix_rt::test]
async fn a_busy_leaf_under_idle_ancestors_is_reached_by_cancel_and_terminate_of_the_top() {
    let host = host_with(test_limits());
    let (session, _events) = open(&host);
    let top = spawn(&session, "idle_top", None).await;
    let middle = spawn(&session, "idle_middle", Some(top)).await;
    let leaf = spawn(&session, "busy_leaf", Some(middle)).await;
    assert_eq!(session.stats().actors(), 0, "idle subagents are records, not actors");
    delegate(&session, leaf, sleeping_task(60_000)).await;
    assert_eq!(session.stats().actors(), 1, "only the busy leaf runs an actor: the tree is the supervisor's records");
    assert_eq!(session.cancel(top).await.unwrap(), vec![leaf]);
    assert_eq!(session.stats().tasks(), 0);
    let mut stopped = session.terminate(top).await.unwrap();
    stopped.sort();
    let mut expected = vec![top, middle, leaf];
    expected.sort();
    assert_eq!(stopped, expected);
    assert_eq!(session.stats().actors(), 0);
}

#[actix_rt::test]
async fn terminating_a_never_used_subtree_retires_every_member() {
    let host = host_with(test_limits());
    let (session, mut events) = open(&host);
    let top = spawn(&session, "idle_top", None).await;
    let child = spawn(&session, "idle_child", Some(top)).await;
    let busy = spawn(&session, "busy_sibling", Some(top)).await;
    delegate(&session, busy, sleeping_task(60_000)).await;
    let idle_top2 = spawn(&session, "idle_top2", None).await;
    let idle_child2 = spawn(&session, "idle_child2", Some(idle_top2)).await;
    // A subtree with no actor at all.
    let mut stopped = session.terminate(idle_top2).await.unwrap();
    stopped.sort();
    let mut expected = vec![idle_top2, idle_child2];
    expected.sort();
    assert_eq!(stopped, expected);
    // A subtree mixing a running member and an idle one.
    let mut stopped = session.terminate(top).await.unwrap();
    stopped.sort();
    let mut expected = vec![top, child, busy];
    expected.sort();
    assert_eq!(stopped, expected);
    assert_eq!((session.stats().tasks(), session.stats().actors()), (0, 0));
    for id in [top, child, busy, idle_top2, idle_child2] {
        assert_eq!(session.await_result(id).await.unwrap().status, SubagentStatus::Terminated);
    }
    let terminated =
        drain_events(&mut events).into_iter().filter(|e| e.kind == subagent_host::EventKind::Terminated).count();
    assert_eq!(terminated, 5, "one terminated event each");
    // They no longer count toward the quota and take no work.
    let refused = session.delegate(child, TaskDefinition::new("late", "x")).await.unwrap();
    assert_eq!(refused, DelegateResponse { accepted: false, status: SubagentStatus::Terminated });
}

/// Ids of the rows `list` shows under `parent`.
async fn listed_children(session: &Tree, parent: SubagentId) -> Vec<SubagentId> {
    let list = session.list().await.unwrap().subagents;
    let parent = parent.to_string();
    let mut ids: Vec<_> =
        list.iter().filter(|info| info.parent_agent_id.as_deref() == Some(&*parent)).map(|i| i.subagent_id).collect();
    ids.sort();
    ids
}

#[actix_rt::test]
async fn children_terminated_under_a_live_parent_leave_its_child_list_as_list_shows_it() {
    // A parent that runs for the whole test, so its actor stays live.
    let host = host_with(Limits { max_retained_records: 50, ..test_limits() });
    let (session, _events) = open(&host);
    let parent = spawn(&session, "parent", None).await;
    delegate(&session, parent, sleeping_task(600_000)).await;
    for round in 0..300 {
        let child = spawn(&session, &format!("child{round}"), Some(parent)).await;
        delegate(&session, child, sleeping_task(600_000)).await;
        assert_eq!(session.terminate(child).await.unwrap(), vec![child]);
        assert_eq!(session.stats().actors(), 1, "round {round}: only the parent's actor is left");
    }
    let mut children = session.children(parent).await.unwrap();
    children.sort();
    assert_eq!(children.len(), 50, "forgotten records leave the child list");
    assert_eq!(children, listed_children(&session, parent).await);
    assert_eq!(session.stats().tasks(), 1);
    session.close().await;
    assert_eq!((session.stats().tasks(), session.stats().actors()), (0, 0));
}

#[actix_rt::test]
async fn a_child_cannot_be_spawned_under_a_parent_being_terminated() {
    let host = host_with(test_limits());
    let (session, _events) = open(&host);
    let parent = spawn(&session, "parent", None).await;
    delegate(&session, parent, sleeping_task(600_000)).await;
    let stopping = session.terminate(parent);
    let late = session.spawn(SpawnRequest {
        agent: SubagentConfig::new("late", "m"),
        parent_agent_id: Some(parent.to_string()),
        root_agent_id: None,
    });
    let (stopped, late) = futures_util::future::join(stopping, late).await;
    assert_eq!(stopped.unwrap(), vec![parent]);
    assert_eq!(late.unwrap_err().code, subagent_host::ErrorCode::InvalidState);
    assert_eq!(session.stats().actors(), 0);
}

/// A task named `slow` winds up for 700 ms once cancelled, then completes
/// with `{"wound_up": true}`; any other task ends at once when cancelled.
struct SlowWindUp;

impl AgentAdapter for SlowWindUp {
    fn name(&self) -> &str {
        "slow-wind-up"
    }

    fn run(&self, ctx: TaskContext) -> TaskFuture {
        Box::pin(async move {
            ctx.cancel.cancelled().await;
            if ctx.task.name != "slow" {
                return Err(subagent_host::TaskError::new("cancelled"));
            }
            tokio::time::sleep(Duration::from_millis(700)).await;
            let mut result = JsonObject::new();
            result.insert("wound_up".into(), json!(true));
            Ok(result.into())
        })
    }
}

#[actix_rt::test]
async fn the_end_of_one_cancels_grace_does_not_cut_short_a_later_cancels_grace() {
    // On the paused clock (the tree lives on this thread) the graces, the
    // wind-up and the moment of the second cancel are exact: no timing luck.
    tokio::time::pause();
    let router = AdapterRouter::default()
        .route("stubborn", Arc::new(Stubborn))
        .unwrap()
        .route("slow", Arc::new(SlowWindUp))
        .unwrap();
    let limits = Limits { cancel_grace_ms: 1000, ..test_limits() };
    let host = Host::new(HostConfig { limits, router, ..Default::default() });
    let (session, _events) = open(&host);
    let mule = spawn_model(&session, "mule", "stubborn").await;
    let child = SpawnRequest {
        agent: SubagentConfig::new("child", "slow"),
        parent_agent_id: Some(mule.to_string()),
        root_agent_id: None,
    };
    let child = session.spawn(child).await.unwrap().subagent_id;
    delegate(&session, mule, TaskDefinition::new("forever", "never ends")).await;
    delegate(&session, child, TaskDefinition::new("quick", "ends when cancelled")).await;
    // The first cancel's grace runs 1 s, held by the stubborn parent; the
    // child's task ends at once.
    let first = sent(session.cancel(mule)).await;
    let first_cancelled_at = tokio::time::Instant::now();
    wait_for_status(&session, child, SubagentStatus::Cancelled).await;
    // A new task on the child, cancelled half-way through the first grace:
    // it winds up 700 ms later, after the first grace ends, inside its own.
    delegate(&session, child, TaskDefinition::new("slow", "winds up slowly")).await;
    tokio::time::sleep_until(first_cancelled_at + Duration::from_millis(500)).await;
    let second = session.cancel(child).await.unwrap();
    assert_eq!(second, vec![child]);
    let answer = session.await_result(child).await.unwrap();
    assert_eq!(answer.status, SubagentStatus::Cancelled);
    assert_eq!(
        answer.result.map(|result| result.to_object()),
        Some(serde_json::from_value(json!({ "wound_up": true })).unwrap()),
        "the task had its own cancel's grace to wind up in, and kept what it wound up with"
    );
    let mut stopped = first.await.unwrap();
    stopped.sort();
    let mut expected = vec![mule, child];
    expected.sort();
    assert_eq!(stopped, expected);
    session.close().await;
}
