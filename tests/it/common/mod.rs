//! Helpers shared by the actor-level tests: a host with chosen limits, a
//! session whose events land in a channel, and scripted tasks.
#![allow(dead_code)]

use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use subagent_host::config::Limits;
use subagent_host::event::Event;
use subagent_host::protocol::wire::*;
use subagent_host::{Host, HostConfig, SubagentId, Tree};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

/// A host with these limits and every other setting at its default.
pub fn host_with(limits: Limits) -> Host {
    Host::new(HostConfig { limits, ..Default::default() })
}

/// A session plus the receiving end of its events.
pub fn open(host: &Host) -> (Tree, UnboundedReceiver<Event>) {
    let (tx, rx) = unbounded_channel();
    (host.open_tree(Arc::new(tx)), rx)
}

/// Spawns a top-level subagent (or a child of `parent`).
pub async fn spawn(session: &Tree, name: &str, parent: Option<SubagentId>) -> SubagentId {
    try_spawn(session, name, parent).await.expect("spawn")
}

/// Spawns, returning the error if any.
pub async fn try_spawn(
    session: &Tree,
    name: &str,
    parent: Option<SubagentId>,
) -> Result<SubagentId, subagent_host::HostError> {
    let request = SpawnRequest {
        agent: SubagentConfig::new(name, "scripted-test"),
        parent_agent_id: Some(parent.map(|p| p.to_string()).unwrap_or_else(|| "client_agent".into())),
        root_agent_id: Some("client_agent".into()),
    };
    session.spawn(request).await.map(|r| r.subagent_id)
}

/// A task running `script` (the scripted adapter's contract).
pub fn script_task(name: &str, script: Value) -> TaskDefinition {
    let mut task = TaskDefinition::new(name, format!("instruction of {name}"));
    task.metadata.insert("script".into(), script);
    task
}

/// A task that sleeps for `ms` and then completes.
pub fn sleeping_task(ms: u64) -> TaskDefinition {
    script_task("sleep", json!([{ "sleep_ms": ms }, { "return": { "slept": ms } }]))
}

/// Delegates and asserts it was accepted.
pub async fn delegate(session: &Tree, id: SubagentId, task: TaskDefinition) {
    let reply = session.delegate(id, task).await.expect("delegate");
    assert!(reply.accepted, "delegate to {id} refused: {reply:?}");
    assert_eq!(reply.status, SubagentStatus::Running);
}

/// The status of `id` in a fresh listing.
pub async fn listed_status(session: &Tree, id: SubagentId) -> Option<SubagentStatus> {
    let list = session.list().await.expect("list");
    list.subagents.iter().find(|info| info.subagent_id == id).map(|info| info.status)
}

/// Waits (bounded) until `id` is listed with `status`.
pub async fn wait_for_status(session: &Tree, id: SubagentId, status: SubagentStatus) {
    for _ in 0..500 {
        if listed_status(session, id).await == Some(status) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{id} never reached {status:?}; now {:?}", listed_status(session, id).await);
}

/// Every event received so far.
pub fn drain_events(rx: &mut UnboundedReceiver<Event>) -> Vec<Event> {
    let mut events = Vec::new();
    while let Ok(event) = rx.try_recv() {
        events.push(event);
    }
    events
}

/// Limits for tests: deep trees allowed, short grace.
pub fn test_limits() -> Limits {
    Limits { max_depth: 6, cancel_grace_ms: 200, ..Limits::default() }
}
