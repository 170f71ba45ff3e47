//! Sessions to tear down, shared by `benches/teardown.rs` and
//! `examples/profile_teardown.rs`: N finished subagents, a wide tree, a
//! chain, and trees whose tasks all run.

use serde_json::json;
use subagent_host::config::Limits;
use subagent_host::protocol::wire::*;
use subagent_host::{SubagentId, Tree};

use super::floor::all;
use crate::tree_ops::TreeOps;

/// Limits for a session of `n` subagents keeping `retained` terminated
/// records, with room for a chain of `n` (the deep shapes).
pub fn teardown_limits(n: usize, retained: usize) -> Limits {
    Limits {
        max_subagents_per_session: n + 16,
        max_retained_records: retained,
        max_depth: n as u32 + 1,
        // Cancelled sleepers wind up at once; the grace only bounds a stuck one.
        cancel_grace_ms: 10_000,
        ..Default::default()
    }
}

/// A spawn under `parent` (top level: under the client's agent).
pub fn spawn_request(parent: Option<SubagentId>) -> SpawnRequest {
    SpawnRequest {
        agent: SubagentConfig::new("bench", "scripted"),
        parent_agent_id: Some(parent.map_or_else(|| "client_agent".to_owned(), |p| p.to_string())),
        root_agent_id: Some("client_agent".to_owned()),
    }
}

/// The scripted adapter's default task: it finishes at once.
pub fn unit_task() -> TaskDefinition {
    TaskDefinition::new("unit", "do the unit of work")
}

/// A task that runs until it is cancelled.
pub fn sleeping_task() -> TaskDefinition {
    sleeping_for(600_000)
}

/// A task that sleeps for `ms`, then completes.
pub fn sleeping_for(ms: u64) -> TaskDefinition {
    let mut task = TaskDefinition::new("sleep", "sleep, then complete");
    task.metadata.insert("script".into(), json!([{ "sleep_ms": ms }]));
    task
}

/// A merge of `ids` with `strategy`.
pub fn merge_request(ids: &[SubagentId], strategy: &str) -> MergeRequest {
    MergeRequest { subagent_ids: ids.iter().map(|id| id.to_string()).collect(), strategy: strategy.into() }
}

/// Returns once the supervisor has handled what the members of a stopped
/// or cancelled tree reported on the way (their ends): a stop's reply comes
/// once the members are gone, when their reports may still wait in the
/// supervisor's mailbox. One request through that mailbox, after them.
pub async fn settled(session: &Tree, any: SubagentId) {
    // (The answer does not matter: `any` may be forgotten by now.)
    let _ = session.await_result(any).await;
}

/// `n` top-level subagents, each of which has finished `task`.
pub async fn finished(session: &Tree, n: usize, task: &TaskDefinition) -> Vec<SubagentId> {
    let spawned = all((0..n).map(|_| session.spawn(spawn_request(None)))).await;
    let ids = spawned.into_iter().map(|r| r.expect("spawn").subagent_id).collect();
    finish_all(session, ids, task).await
}

/// `n` top-level subagents, each of which has returned a different answer
/// (every vote of a `voting` merge is its own candidate).
pub async fn finished_distinct(session: &Tree, n: usize) -> Vec<SubagentId> {
    let spawned = all((0..n).map(|_| session.spawn(spawn_request(None)))).await;
    let ids: Vec<_> = spawned.into_iter().map(|r| r.expect("spawn").subagent_id).collect();
    all(ids.iter().enumerate().map(|(i, id)| {
        let mut task = TaskDefinition::new("vote", "answer");
        task.metadata.insert("script".into(), json!([{ "return": { "answer": i } }]));
        session.delegate(*id, task)
    }))
    .await;
    all(ids.iter().map(|id| session.await_result(*id))).await;
    ids
}

/// Delegates `task` to every one of `ids` and waits until each has finished.
pub async fn finish_all(session: &Tree, ids: Vec<SubagentId>, task: &TaskDefinition) -> Vec<SubagentId> {
    let accepted = all(ids.iter().map(|id| session.delegate(*id, task.clone()))).await;
    assert!(accepted.iter().all(|r| matches!(r, Ok(d) if d.accepted)), "every task accepted");
    let done = all(ids.iter().map(|id| session.await_result(*id))).await;
    assert!(done.iter().all(|r| matches!(r, Ok(d) if d.status == SubagentStatus::Completed)));
    ids
}

/// Delegates `task` to every one of `ids`, and waits for nothing more.
pub async fn run_all(session: &Tree, ids: Vec<SubagentId>, task: &TaskDefinition) -> Vec<SubagentId> {
    let accepted = all(ids.iter().map(|id| session.delegate(*id, task.clone()))).await;
    assert!(accepted.iter().all(|r| matches!(r, Ok(d) if d.accepted)), "every task accepted");
    ids
}

/// One parent with `n - 1` children; the parent first.
pub async fn wide(session: &Tree, n: usize) -> Vec<SubagentId> {
    let root = session.spawn(spawn_request(None)).await.expect("spawn root").subagent_id;
    let children = all((1..n).map(|_| session.spawn(spawn_request(Some(root))))).await;
    std::iter::once(root).chain(children.into_iter().map(|c| c.expect("spawn child").subagent_id)).collect()
}

/// A chain of `n` subagents, each the parent of the next; the root first.
pub async fn chain(session: &Tree, n: usize) -> Vec<SubagentId> {
    let mut ids = Vec::with_capacity(n);
    let mut parent = None;
    for _ in 0..n {
        let id = session.spawn(spawn_request(parent)).await.expect("spawn").subagent_id;
        ids.push(id);
        parent = Some(id);
    }
    ids
}
