//! Teardown at scale keeps its meaning (issue 15): a close past the
//! retention limit stops everyone and forgets nobody on the way, forgotten
//! top-level records leave close's order intact, a cancel takes exactly its
//! subtree's tasks out of the queue, and a merge's events share one list.

use crate::common::*;
use serde_json::json;
use std::sync::Arc;
use subagent_host::config::Limits;
use subagent_host::protocol::wire::*;
use subagent_host::SubagentId;
use subagent_host::{EventDetail, EventKind};

/// Spawns `n` top-level subagents and lets each finish a task.
async fn finished(session: &subagent_host::Tree, n: usize) -> Vec<SubagentId> {
    let mut ids = Vec::new();
    for i in 0..n {
        let id = spawn(session, &format!("f{i}"), None).await;
        delegate(session, id, script_task("t", json!([{ "return": { "i": i } }]))).await;
        ids.push(id);
    }
    for id in &ids {
        assert_eq!(session.await_result(*id).await.unwrap().status, SubagentStatus::Completed);
    }
    ids
}

#[actix_rt::test]
async fn closing_a_session_past_the_retention_limit_stops_everyone_and_forgets_no_one_on_the_way() {
    let host = host_with(Limits { max_retained_records: 2, ..test_limits() });
    let (session, mut events) = open(&host);
    let mut ids = finished(&session, 20).await;
    // A subtree too: a child and a grandchild of the first one.
    let child = spawn(&session, "child", Some(ids[0])).await;
    let grandchild = spawn(&session, "grandchild", Some(child)).await;
    ids.extend([child, grandchild]);
    let mut stopped = session.close().await;
    stopped.sort();
    ids.sort();
    assert_eq!(stopped, ids, "every subagent is stopped and listed once");
    assert_eq!((session.stats().tasks(), session.stats().actors()), (0, 0));
    assert!(ids.iter().all(|id| !host.id_in_use(*id)), "every id goes back to the host");
    let terminated = drain_events(&mut events).iter().filter(|e| e.kind == EventKind::Terminated).count();
    assert_eq!(terminated, ids.len(), "one terminated event each");
}

#[actix_rt::test]
async fn top_level_records_forgotten_before_a_close_leave_the_rest_stopped_newest_first() {
    let host = host_with(Limits { max_retained_records: 1, ..test_limits() });
    let (session, _events) = open(&host);
    let ids = finished(&session, 5).await;
    // Terminated in a different order than spawned: ids[3], then ids[0]
    // (which forgets ids[3]).
    assert_eq!(session.terminate(ids[3]).await.unwrap(), vec![ids[3]]);
    assert_eq!(session.terminate(ids[0]).await.unwrap(), vec![ids[0]]);
    let forgotten = session.await_result(ids[3]).await.unwrap_err();
    assert_eq!(forgotten.code, subagent_host::ErrorCode::UnknownSubagent);
    // Newest first, as OTP stops children in reverse start order; the
    // terminated ones are not stopped again.
    assert_eq!(session.close().await, vec![ids[4], ids[2], ids[1]]);
    assert_eq!(session.stats().actors(), 0);
}

#[actix_rt::test]
async fn cancelling_a_subtree_takes_exactly_its_queued_tasks_out_and_the_rest_start_in_order() {
    let gate = Gate::new();
    let host = gate.host(Limits { max_running_per_session: 1, ..test_limits() }, "gated");
    let (session, mut events) = open(&host);
    let blocker = spawn_model(&session, "blocker", "gated").await;
    delegate(&session, blocker, TaskDefinition::new("block", "hold the only slot")).await;
    let parent = spawn(&session, "parent", None).await;
    let (inside_a, inside_b) =
        (spawn(&session, "in_a", Some(parent)).await, spawn(&session, "in_b", Some(parent)).await);
    let (outside_a, outside_b) = (spawn(&session, "out_a", None).await, spawn(&session, "out_b", None).await);
    // Queued behind the blocker, the subtree's tasks between the others'.
    for id in [outside_a, inside_a, outside_b, inside_b] {
        let reply = session.delegate(id, script_task("q", json!([{ "return": {} }]))).await.unwrap();
        assert_eq!((reply.accepted, reply.status), (true, SubagentStatus::Ready), "{id} is queued");
    }
    assert_eq!(session.cancel(parent).await.unwrap(), vec![inside_a, inside_b], "the queued tasks, in tree order");
    gate.open();
    for (id, status) in [
        (blocker, SubagentStatus::Completed),
        (inside_a, SubagentStatus::Cancelled),
        (inside_b, SubagentStatus::Cancelled),
        (outside_a, SubagentStatus::Completed),
        (outside_b, SubagentStatus::Completed),
    ] {
        assert_eq!(session.await_result(id).await.unwrap().status, status, "{id}");
    }
    let started: Vec<_> =
        drain_events(&mut events).iter().filter(|e| e.kind == EventKind::Delegated).map(|e| e.subagent_id).collect();
    assert_eq!(started, vec![blocker, outside_a, outside_b], "the others start in the order they queued");
    session.close().await;
}

#[actix_rt::test]
async fn the_events_of_a_merge_name_every_source_from_one_shared_list() {
    let host = host_with(test_limits());
    let (session, mut events) = open(&host);
    let ids = finished(&session, 3).await;
    drain_events(&mut events);
    let request =
        MergeRequest { subagent_ids: ids.iter().map(|id| id.to_string()).collect(), strategy: "voting".into() };
    session.merge(request).await.unwrap();
    let lists: Vec<_> = drain_events(&mut events)
        .into_iter()
        .filter(|event| event.kind == EventKind::Merged)
        .map(|event| match event.detail {
            EventDetail::Merged { strategy, subagent_ids } => {
                assert_eq!(&*strategy, "voting");
                subagent_ids
            }
            other => panic!("a merged event with {other:?}"),
        })
        .collect();
    assert_eq!(lists.len(), 3, "one event per source");
    assert!(lists.iter().all(|list| **list == *ids), "each names every source, in request order");
    assert!(lists.iter().all(|list| Arc::ptr_eq(list, &lists[0])), "one list, not a copy per event");
    session.close().await;
}

#[actix_rt::test]
async fn a_parent_that_stays_keeps_its_other_children_in_order_as_terminated_ones_are_forgotten() {
    let host = host_with(Limits { max_retained_records: 2, ..test_limits() });
    let (session, _events) = open(&host);
    let parent = spawn(&session, "parent", None).await;
    let mut children = Vec::new();
    for i in 0..8 {
        children.push(spawn(&session, &format!("c{i}"), Some(parent)).await);
    }
    // Terminated from the middle and the ends, out of spawn order: past two
    // retained records the oldest terminated is forgotten.
    for &at in &[5, 0, 3, 7] {
        session.terminate(children[at]).await.unwrap();
    }
    let forgotten = [children[5], children[0]];
    let kept: Vec<_> = children.iter().copied().filter(|id| !forgotten.contains(id)).collect();
    assert_eq!(session.children(parent).await.unwrap(), kept, "the rest, oldest first");
    for id in forgotten {
        assert!(session.await_result(id).await.is_err(), "{id} is forgotten");
    }
    let listed: Vec<_> = session.list().await.unwrap().subagents.iter().map(|info| info.subagent_id).collect();
    assert_eq!(listed.len(), 1 + kept.len());
    // The parent still takes children, after the ones it kept.
    let late = spawn(&session, "late", Some(parent)).await;
    assert_eq!(session.children(parent).await.unwrap().last(), Some(&late));
    session.close().await;
}
