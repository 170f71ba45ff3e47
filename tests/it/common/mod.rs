//! Helpers shared by the actor-level tests: a host with chosen limits, a
//! session whose events land in a channel, scripted tasks, and ways to order
//! things without sleeping (requests sent now, tasks held behind a gate).
#![allow(dead_code)]

use futures_util::future::maybe_done;
use serde_json::{json, Value};
use std::future::{poll_fn, Future};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};
use subagent_host::config::Limits;
use subagent_host::protocol::wire::*;
use subagent_host::Event;
use subagent_host::{AdapterRouter, AgentAdapter, TaskContext, TaskError, TaskFuture};
use subagent_host::{Host, HostConfig, SubagentId, Tree};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use tokio::sync::watch;

#[path = "../../../benches/support/tree_ops.rs"]
mod tree_ops;
pub use tree_ops::TreeOps;

/// A stored session's row as a handshaken TCP client opens it.
pub fn session_row(id: &str) -> subagent_host::store::SessionRow {
    subagent_host::store::SessionRow {
        id: id.into(),
        agent_id: "client".into(),
        capabilities: vec!["multi_agent".into()],
        principal: None,
        transport: "tcp".into(),
        handshaken: true,
    }
}

/// How often [`eventually`] and [`eventually_blocking`] probe.
pub const POLL: Duration = Duration::from_millis(10);

/// What a probe of [`eventually`] answers: the value waited for, or not yet
/// (`None`, or `Err` with the state seen, for the failure message).
pub trait Probed {
    /// The value waited for.
    type Value;
    /// The value, or what was seen instead.
    fn into_result(self) -> Result<Self::Value, String>;
}

impl<T> Probed for Option<T> {
    type Value = T;
    fn into_result(self) -> Result<T, String> {
        self.ok_or_else(|| "nothing yet".to_owned())
    }
}

impl<T, E: std::fmt::Display> Probed for Result<T, E> {
    type Value = T;
    fn into_result(self) -> Result<T, String> {
        self.map_err(|seen| seen.to_string())
    }
}

/// Probes every [`POLL`] until `probe` answers a value, for at most
/// `deadline` of real time; then `Err` with the last state seen.
///
/// The pause between probes is tokio's: on a paused clock it takes no real
/// time and lets the clock run to the next timer, so a probe waiting for a
/// timeout sees it fire at once.
pub async fn poll_until<P: Probed, Fut: Future<Output = P>>(
    deadline: Duration,
    mut probe: impl FnMut() -> Fut,
) -> Result<P::Value, String> {
    let end = Instant::now() + deadline;
    loop {
        match probe().await.into_result() {
            Ok(value) => return Ok(value),
            Err(seen) if Instant::now() >= end => return Err(seen),
            Err(_) => tokio::time::sleep(POLL).await,
        }
    }
}

/// Waits until `probe` answers a value (see [`poll_until`]); panics naming
/// `what` and the last state seen if it does not within `deadline`.
pub async fn eventually<P: Probed, Fut: Future<Output = P>>(
    what: &str,
    deadline: Duration,
    probe: impl FnMut() -> Fut,
) -> P::Value {
    match poll_until(deadline, probe).await {
        Ok(value) => value,
        Err(seen) => panic!("not within {deadline:?}: {what} (last seen: {seen})"),
    }
}

/// [`poll_until`] for tests that block a thread: the thread sleeps
/// between probes.
pub fn poll_until_blocking<P: Probed>(deadline: Duration, mut probe: impl FnMut() -> P) -> Result<P::Value, String> {
    let end = Instant::now() + deadline;
    loop {
        match probe().into_result() {
            Ok(value) => return Ok(value),
            Err(seen) if Instant::now() >= end => return Err(seen),
            Err(_) => std::thread::sleep(POLL),
        }
    }
}

/// [`eventually`] for tests that block a thread (see [`poll_until_blocking`]).
pub fn eventually_blocking<P: Probed>(what: &str, deadline: Duration, probe: impl FnMut() -> P) -> P::Value {
    match poll_until_blocking(deadline, probe) {
        Ok(value) => value,
        Err(seen) => panic!("not within {deadline:?}: {what} (last seen: {seen})"),
    }
}

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
    eventually(&format!("{id} is {status:?}"), Duration::from_secs(5), || async {
        match listed_status(session, id).await {
            Some(now) if now == status => Ok(()),
            now => Err(format!("{now:?}")),
        }
    })
    .await
}

/// The session's live actors once they reach `expected`, or after two
/// seconds whatever they are: an actor put to sleep stops a moment after its
/// task's end is answered.
pub async fn actors_settled(session: &Tree, expected: usize) -> usize {
    let settled = poll_until(Duration::from_secs(2), || async { (session.stats().actors() == expected).then_some(()) });
    let _ = settled.await;
    session.stats().actors()
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

/// Makes the call in `request` now, and gives back its answer to await later.
///
/// A [`Tree`] request puts its message in the supervisor's mailbox when first
/// polled. Mailboxes are FIFO and the supervisor forwards to a subagent in the
/// order it handles, so whatever the test asks after this returns reaches the
/// subagent after this request: an await made with `sent` is pending at the
/// subagent before a cancel that follows it. Where a test used to spawn the
/// request and sleep "long enough" for it to arrive, this orders it by
/// construction.
pub async fn sent<F: Future>(request: F) -> impl Future<Output = F::Output> {
    let mut request = Box::pin(maybe_done(request));
    poll_fn(|cx| {
        let _ = request.as_mut().poll(cx);
        Poll::Ready(())
    })
    .await;
    async move {
        request.as_mut().await;
        request.as_mut().take_output().expect("a request answers once")
    }
}

/// An adapter whose tasks stay RUNNING until the test opens the gate, then
/// complete with `{"released": <task name>}` (a cancel still stops them).
///
/// It holds a window open for as long as the test needs it, where a task
/// sleeping a fixed time would close it early on a loaded machine.
#[derive(Debug, Clone)]
pub struct Gate {
    // Shared with every task it runs; `true` once opened, for good.
    open: Arc<watch::Sender<bool>>,
}

impl Gate {
    /// A closed gate.
    pub fn new() -> Self {
        Self { open: Arc::new(watch::Sender::new(false)) }
    }

    /// Lets every task behind the gate, running or to come, complete.
    pub fn open(&self) {
        self.open.send_replace(true);
    }

    /// A host with `limits` whose models matching `model_glob` run behind
    /// this gate (the rest are scripted).
    pub fn host(&self, limits: Limits, model_glob: &str) -> Host {
        let router = AdapterRouter::default().route(model_glob, Arc::new(self.clone())).unwrap();
        Host::new(HostConfig { limits, router, ..Default::default() })
    }
}

impl AgentAdapter for Gate {
    fn name(&self) -> &str {
        "gate"
    }

    fn run(&self, ctx: TaskContext) -> TaskFuture {
        let mut open = self.open.subscribe();
        Box::pin(async move {
            tokio::select! {
                _ = ctx.cancel.cancelled() => Err(TaskError::new("cancelled")),
                _ = open.wait_for(|open| *open) => {
                    let mut result = JsonObject::new();
                    result.insert("released".into(), json!(ctx.task.name));
                    Ok(result.into())
                }
            }
        })
    }
}

/// Spawns a top-level subagent of `model`.
pub async fn spawn_model(session: &Tree, name: &str, model: &str) -> SubagentId {
    let request = SpawnRequest { agent: SubagentConfig::new(name, model), parent_agent_id: None, root_agent_id: None };
    session.spawn(request).await.expect("spawn").subagent_id
}
