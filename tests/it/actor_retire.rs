//! Retiring finished face tasks (actor level): a root marked as one face
//! task leaves the tree once its task has ended, frees its places, and is
//! answered from its record; the newest `retired_kept` stay answerable.

use crate::common::*;
use serde_json::json;
use std::time::Duration;
use subagent_host::config::Limits;
use subagent_host::protocol::wire::*;
use subagent_host::{ErrorCode, SubagentId, Tree, FACE_TASK};

/// Spawns a root marked as one face task.
async fn spawn_face_task(session: &Tree, name: &str) -> Result<SubagentId, subagent_host::HostError> {
    let mut agent = SubagentConfig::new(name, "scripted-test");
    agent.metadata.insert(FACE_TASK.into(), json!("test"));
    let request = SpawnRequest { agent, parent_agent_id: None, root_agent_id: None };
    session.spawn(request).await.map(|spawned| spawned.subagent_id)
}

#[actix_rt::test]
async fn finished_face_tasks_leave_the_tree_and_free_their_places() {
    let host = host_with(Limits { max_subagents_per_session: 2, retired_kept: 3, ..test_limits() });
    let (session, _events) = open(&host);
    session.retire_finished(Vec::new()).await;
    let mut ids = Vec::new();
    for n in 0..10 {
        let id = spawn_face_task(&session, &format!("task{n}")).await.expect("a place is free: the last task retired");
        delegate(&session, id, script_task("t", json!([{ "return": { "n": n } }]))).await;
        let done = session.await_result(id).await.expect("await");
        assert_eq!(done.status, SubagentStatus::Completed);
        assert_eq!(done.result.as_ref().map(|r| serde_json::Value::Object(r.to_object())), Some(json!({ "n": n })));
        ids.push(id);
    }
    // Retired a moment after their end: the tree empties.
    eventually("the tree holds no record", Duration::from_secs(5), || async {
        let (rows, total) = session.inspect(100).await.expect("inspect");
        if total == 0 {
            Ok(())
        } else {
            Err(format!("{rows:?}"))
        }
    })
    .await;
    // The newest three are answered from memory, as they ended.
    for (n, id) in ids.iter().enumerate().skip(7) {
        let again = session.await_result(*id).await.expect("a kept record answers");
        assert_eq!(again.status, SubagentStatus::Completed);
        assert_eq!(again.result.as_ref().map(|r| serde_json::Value::Object(r.to_object())), Some(json!({ "n": n })));
        let detail = session.inspect_one(*id).await.expect("inspect a retired task");
        assert_eq!(detail.view.status, SubagentStatus::Completed);
    }
    let listed = session.list().await.expect("list");
    let listed: Vec<SubagentId> = listed.subagents.iter().map(|row| row.subagent_id).collect();
    assert_eq!(listed.len(), 3, "the kept records are listed: {listed:?}");
    // Older ones are gone with the memory store.
    let gone = session.await_result(ids[0]).await.unwrap_err();
    assert_eq!(gone.code, ErrorCode::UnknownSubagent);
    assert!(!host.id_in_use(ids[0]), "a record no longer kept gives its id back");
    assert!(host.id_in_use(ids[9]), "a kept record holds its id: no new subagent takes it");
}

#[actix_rt::test]
async fn a_retired_task_takes_its_running_subtree_down_and_unmarked_roots_stay() {
    let host = host_with(Limits { max_subagents_per_session: 4, ..test_limits() });
    let (session, _events) = open(&host);
    session.retire_finished(Vec::new()).await;
    // An A2E-style root (no mark) stays in the tree after its task.
    let plain = spawn(&session, "plain", None).await;
    delegate(&session, plain, script_task("t", json!([{ "return": { "plain": true } }]))).await;
    session.await_result(plain).await.unwrap();
    // A face task that leaves a child sleeping behind.
    let root = spawn_face_task(&session, "root").await.unwrap();
    let leaf = json!([{ "sleep_ms": 60_000 }, { "return": {} }]);
    let spawn_child = json!({ "spawn": { "agent": { "name": "leaf", "model": "scripted-test" },
        "task": { "name": "t", "instruction": "i", "metadata": { "script": leaf } } } });
    delegate(&session, root, script_task("t", json!([spawn_child, { "return": { "left": "a child" } }]))).await;
    let done = session.await_result(root).await.unwrap();
    assert_eq!(done.status, SubagentStatus::Completed);
    eventually("only the plain root is left, and no actor runs", Duration::from_secs(5), || async {
        let (rows, total) = session.inspect(100).await.expect("inspect");
        let actors = session.stats().actors();
        if total == 1 && rows[0].subagent_id == plain && actors == 0 {
            Ok(())
        } else {
            Err(format!("{total} records, {actors} actors"))
        }
    })
    .await;
    assert_eq!(listed_status(&session, plain).await, Some(SubagentStatus::Completed));
    // Its places are free again: three more fit beside the plain root.
    for n in 0..3 {
        spawn(&session, &format!("more{n}"), None).await;
    }
    assert_eq!(try_spawn(&session, "full", None).await.unwrap_err().code, ErrorCode::QuotaExceeded);
}

#[actix_rt::test]
async fn without_retiring_a_marked_root_stays_as_before() {
    let host = host_with(Limits { max_subagents_per_session: 1, ..test_limits() });
    let (session, _events) = open(&host);
    let root = spawn_face_task(&session, "root").await.unwrap();
    delegate(&session, root, script_task("t", json!([{ "return": {} }]))).await;
    session.await_result(root).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(listed_status(&session, root).await, Some(SubagentStatus::Completed));
    let full = spawn_face_task(&session, "second").await.unwrap_err();
    assert_eq!(full.code, ErrorCode::QuotaExceeded, "an A2E session decides itself when its subagents go");
}
