//! Concurrency caps (`[limits] max_running_per_session`,
//! `max_running_per_parent`): a delegate past a cap is accepted and queued
//! (`READY`, event `queued`), queued tasks start in FIFO order as slots
//! free and never more run at once than the cap, cancel and terminate take
//! a queued task out of the queue, and a tree that awaits its own children
//! does not deadlock on its cap.

use crate::common::TreeOps;
use crate::common::{listed_status, sent};
use futures_util::FutureExt;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use subagent_host::config::Limits;
use subagent_host::protocol::wire::*;
use subagent_host::{Event, EventKind};
use subagent_host::{Host, HostConfig, SubagentId, Tree};
use tokio::sync::mpsc;

const GUARD: Duration = Duration::from_secs(30);

fn open(limits: Limits) -> (Tree, mpsc::UnboundedReceiver<Event>) {
    let host = Host::new(HostConfig { limits, ..Default::default() });
    let (tx, rx) = mpsc::unbounded_channel();
    (host.open_tree(Arc::new(tx)), rx)
}

fn task(script: Value) -> TaskDefinition {
    serde_json::from_value(json!({ "name": "t", "instruction": "i", "metadata": { "script": script } })).unwrap()
}

async fn spawn(tree: &Tree, name: &str) -> SubagentId {
    let request =
        SpawnRequest { agent: SubagentConfig::new(name, "scripted"), parent_agent_id: None, root_agent_id: None };
    tree.spawn(request).await.unwrap().subagent_id
}

async fn await_done(tree: &Tree, id: SubagentId) -> AwaitResponse {
    tokio::time::timeout(GUARD, tree.await_result(id)).await.expect("ends").unwrap()
}

fn drain(events: &mut mpsc::UnboundedReceiver<Event>) -> Vec<Event> {
    std::iter::from_fn(|| events.try_recv().ok()).collect()
}

/// The most tasks running at once, by the events (delegated … ended).
fn most_running(events: &[Event]) -> usize {
    let (mut running, mut most) = (0usize, 0usize);
    for event in events {
        if event.kind == EventKind::Delegated {
            running += 1;
            most = most.max(running);
        } else if event.kind.ends_task() {
            running = running.saturating_sub(1);
        }
    }
    most
}

#[actix_rt::test]
async fn past_the_session_cap_delegates_queue_and_start_in_fifo_order() {
    let (tree, mut events) = open(Limits { max_running_per_session: 2, ..Limits::default() });
    let mut ids = Vec::new();
    for n in 0..5 {
        ids.push(spawn(&tree, &format!("s{n}")).await);
    }
    let mut replies = Vec::new();
    for id in &ids {
        replies.push(tree.delegate(*id, task(json!([{ "sleep_ms": 60 }, { "return": {} }]))).await.unwrap());
    }
    let statuses: Vec<_> = replies.iter().map(|reply| (reply.accepted, reply.status)).collect();
    let (running, queued) = ((true, SubagentStatus::Running), (true, SubagentStatus::Ready));
    assert_eq!(statuses, vec![running, running, queued, queued, queued]);
    // A second delegate to a queued subagent is refused; its task stays queued.
    let again = tree.delegate(ids[4], task(json!([]))).await.unwrap();
    assert_eq!((again.accepted, again.status), (false, SubagentStatus::Ready));
    for id in &ids {
        assert_eq!(await_done(&tree, *id).await.status, SubagentStatus::Completed, "an await waits for a queued task");
    }
    let events = drain(&mut events);
    let queued: Vec<_> = events.iter().filter(|e| e.kind == EventKind::Queued).map(|e| e.subagent_id).collect();
    assert_eq!(queued, ids[2..].to_vec());
    assert!(events.iter().filter(|e| e.kind == EventKind::Queued).all(|e| e.status == SubagentStatus::Ready));
    let started: Vec<_> = events.iter().filter(|e| e.kind == EventKind::Delegated).map(|e| e.subagent_id).collect();
    assert_eq!(started, ids, "FIFO");
    assert_eq!(most_running(&events), 2, "never more than the cap at once");
}

#[actix_rt::test]
async fn cancel_and_terminate_take_a_queued_task_out_of_the_queue() {
    // On the paused clock (the tree lives on this thread): no real waiting.
    tokio::time::pause();
    let (tree, mut events) = open(Limits { max_running_per_session: 1, ..Limits::default() });
    let (a, b, c, d) =
        (spawn(&tree, "a").await, spawn(&tree, "b").await, spawn(&tree, "c").await, spawn(&tree, "d").await);
    assert!(tree.delegate(a, task(json!([{ "sleep_ms": 200 }, { "return": {} }]))).await.unwrap().accepted);
    for id in [b, c, d] {
        let reply = tree.delegate(id, task(json!([{ "return": {} }]))).await.unwrap();
        assert_eq!((reply.accepted, reply.status), (true, SubagentStatus::Ready));
    }
    // Both awaits are pending before the cancel and the terminate that follow.
    let waiting_on_b = sent(tree.await_result(b)).await;
    let waiting_on_c = sent(tree.await_result(c)).await;
    assert_eq!(tree.cancel(b).await.unwrap(), vec![b], "the queued task is what cancel stopped");
    let cancelled = tokio::time::timeout(GUARD, waiting_on_b).await.unwrap().unwrap();
    assert_eq!((cancelled.status, cancelled.error.as_deref()), (SubagentStatus::Cancelled, Some("cancelled")));
    tree.terminate(c).await.unwrap();
    let terminated = tokio::time::timeout(GUARD, waiting_on_c).await.unwrap().unwrap();
    assert_eq!(terminated.status, SubagentStatus::Terminated);
    assert_eq!(await_done(&tree, a).await.status, SubagentStatus::Completed, "the running one is untouched");
    assert_eq!(await_done(&tree, d).await.status, SubagentStatus::Completed, "d starts when a ends");
    let started: Vec<_> =
        drain(&mut events).iter().filter(|e| e.kind == EventKind::Delegated).map(|e| e.subagent_id).collect();
    assert_eq!(started, vec![a, d], "b and c never ran");
}

#[actix_rt::test]
async fn the_per_parent_cap_runs_children_one_by_one_and_awaiting_parents_do_not_deadlock() {
    let limits = Limits { max_running_per_session: 1, max_running_per_parent: 1, ..Limits::default() };
    let (tree, mut events) = open(limits);
    let child = |name: &str| {
        json!({ "spawn": { "agent": { "name": name, "model": "scripted" },
                                                "task": task(json!([{ "sleep_ms": 30 }, { "return": {} }])) } })
    };
    let parent = spawn(&tree, "parent").await;
    let script = json!([child("k1"), child("k2"), child("k3"), { "await_children": {} }, { "return": {} }]);
    assert!(tree.delegate(parent, task(script)).await.unwrap().accepted);
    let done = await_done(&tree, parent).await;
    assert_eq!(done.status, SubagentStatus::Completed, "{:?}", done.error);
    let events = drain(&mut events);
    let children: Vec<_> = events
        .iter()
        .filter(|e| e.depth == 1 && (e.kind == EventKind::Delegated || e.kind == EventKind::Completed))
        .map(|e| e.kind)
        .collect();
    assert_eq!(
        children,
        vec![
            EventKind::Delegated,
            EventKind::Completed,
            EventKind::Delegated,
            EventKind::Completed,
            EventKind::Delegated,
            EventKind::Completed
        ],
        "one child at a time"
    );
}

#[actix_rt::test]
async fn a_queued_task_cancelled_just_before_the_next_delegate_leaves_that_one_queued() {
    let (tree, mut events) = open(Limits { max_running_per_session: 1, ..Limits::default() });
    let (a, b) = (spawn(&tree, "a").await, spawn(&tree, "b").await);
    // (Sleeping, a holds its slot; a task waiting on its mailbox would give it up.)
    let script = json!([{ "sleep_ms": 60_000 }, { "return": {} }]);
    assert!(tree.delegate(a, task(script)).await.unwrap().accepted, "a holds the only slot");
    let first = tree.delegate(b, task(json!([{ "return": { "n": 1 } }]))).await.unwrap();
    assert_eq!((first.accepted, first.status), (true, SubagentStatus::Ready), "queued");
    // The cancel answers at once for a queued task; b's actor reports it
    // after the next delegate has queued a new task.
    assert_eq!(tree.cancel(b).await.unwrap(), vec![b]);
    let second = tree.delegate(b, task(json!([{ "return": { "n": 2 } }]))).await.unwrap();
    assert_eq!((second.accepted, second.status), (true, SubagentStatus::Ready), "queued again");
    // A message goes through b's actor after its cancel's report: once it is
    // answered, the report has reached the supervisor.
    let note = SubagentMessagePayload { kind: "note".into(), content: json!("x") };
    tree.message("client".into(), b, note).await.unwrap();
    assert_eq!(listed_status(&tree, b).await, Some(SubagentStatus::Ready), "the new task is queued, not cancelled");
    let third = tree.delegate(b, task(json!([{ "return": {} }]))).await.unwrap();
    assert_eq!((third.accepted, third.status), (false, SubagentStatus::Ready), "one task queued at a time");
    assert_eq!(tree.cancel(a).await.unwrap(), vec![a], "a's slot frees");
    let done = await_done(&tree, b).await;
    assert_eq!(done.status, SubagentStatus::Completed, "the queued task ran once a's slot freed");
    assert_eq!(done.result.map(|result| result.to_object()["n"].clone()), Some(json!(2)));
    let started: Vec<_> =
        drain(&mut events).iter().filter(|e| e.kind == EventKind::Delegated).map(|e| e.subagent_id).collect();
    assert_eq!(started, vec![a, b], "b's cancelled task never ran; its second did, once");
}

#[actix_rt::test]
async fn a_merge_waits_for_a_queued_task_not_the_one_before_it() {
    let (tree, _events) = open(Limits { max_running_per_session: 1, ..Limits::default() });
    let (a, b) = (spawn(&tree, "a").await, spawn(&tree, "b").await);
    assert!(tree.delegate(b, task(json!([{ "return": { "answer": "old" } }]))).await.unwrap().accepted);
    assert_eq!(await_done(&tree, b).await.status, SubagentStatus::Completed);
    assert!(tree.delegate(a, task(json!([{ "sleep_ms": 60_000 }, { "return": {} }]))).await.unwrap().accepted);
    let queued = tree.delegate(b, task(json!([{ "return": { "answer": "new" } }]))).await.unwrap();
    assert_eq!((queued.accepted, queued.status), (true, SubagentStatus::Ready));
    let request = MergeRequest { subagent_ids: vec![b.to_string()], strategy: "voting".into() };
    let mut merging = Box::pin(sent(tree.merge(request)).await);
    // A message through the supervisor and b's actor, answered after the
    // merge request reached both: whatever the merge could do at once is done.
    let note = SubagentMessagePayload { kind: "note".into(), content: json!("x") };
    tree.message("client".into(), b, note).await.unwrap();
    assert!((&mut merging).now_or_never().is_none(), "the merge waits while b's task is queued");
    assert_eq!(tree.cancel(a).await.unwrap(), vec![a], "a's slot frees and b's task starts");
    let merged = tokio::time::timeout(GUARD, merging).await.unwrap().unwrap().merged_result;
    assert_eq!(merged["winner"], json!("new"), "{merged:?}");
}
