//! The sink count: a scripted tree that ends one way for every outcome, and
//! a check that each status change it went through reached each of its
//! sinks exactly once (and no other).

use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use super::tally::{self, Sink};
use crate::config::Limits;
use crate::event::{Event, EventKind};
use crate::ids::SubagentId;
use crate::protocol::wire::*;
use crate::runtime::{Host, HostConfig, Tree};
use crate::store::{SessionLog, StoreHandle, StoredSubagent, StoredTask, SubagentRow};

const GUARD: Duration = Duration::from_secs(20);

fn open(limits: Limits) -> (Tree, String, UnboundedReceiver<Event>) {
    let session = format!("sinks-{}", uuid::Uuid::new_v4().simple());
    let (events, seen) = unbounded_channel();
    let log = SessionLog::new(session.as_str(), StoreHandle::memory());
    let tree = Host::new(HostConfig { limits, ..Default::default() }).open_logged_tree(Arc::new(events), log);
    (tree, session, seen)
}

fn agent(name: &str, metadata: Value) -> SpawnRequest {
    let mut agent = SubagentConfig::new(name, "scripted");
    if let Value::Object(fields) = metadata {
        agent.metadata = fields;
    }
    SpawnRequest { agent, parent_agent_id: Some("client".into()), root_agent_id: None }
}

fn scripted(script: Value) -> TaskDefinition {
    let mut task = TaskDefinition::new("t", "do it");
    task.metadata.insert("script".into(), script);
    task
}

async fn spawn(tree: &Tree, request: SpawnRequest) -> SubagentId {
    tree.spawn(request).await.expect("spawn").subagent_id
}

async fn run(tree: &Tree, request: SpawnRequest, script: Value) -> SubagentId {
    let id = spawn(tree, request).await;
    tree.delegate(id, scripted(script)).await.expect("delegate");
    id
}

async fn ends(tree: &Tree, id: SubagentId) -> SubagentStatus {
    tokio::time::timeout(GUARD, tree.await_result(id)).await.expect("in time").expect("await").status
}

async fn until(tree: &Tree, id: SubagentId, status: SubagentStatus) {
    for _ in 0..2_000 {
        let listed = tree.list().await.expect("list");
        if listed.subagents.iter().any(|row| row.subagent_id == id && row.status == status) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{id} never reached {}", status.as_str());
}

/// The sinks each move reaches: every move reaches the gauges and the
/// event; a task's start, place in the queue and end reach the journal; a
/// task that runs reaches the task metrics and its span as it starts and
/// as it ends.
fn expected(kind: EventKind, ran: bool) -> &'static [Sink] {
    use Sink::*;
    match kind {
        EventKind::StatusChanged => &[Gauge, Event],
        EventKind::Queued => &[Gauge, Journal, Event],
        _ if !ran => &[Gauge, Journal, Event],
        _ => &[Gauge, Journal, TaskMetrics, Trace, Event],
    }
}

#[actix_rt::test]
async fn every_move_of_a_tree_of_every_outcome_reaches_each_of_its_sinks_once() {
    let limits = Limits { cancel_grace_ms: 200, ..Limits::default() };
    let (tree, session, mut events) = open(limits);
    let forever = json!([{"sleep_ms": 60_000}]);
    let completed = run(&tree, agent("completes", json!({})), json!([{"return": {"ok": true}}])).await;
    let failed = run(&tree, agent("fails", json!({})), json!([{"fail": "boom"}])).await;
    let mut slow = agent("times out", json!({}));
    slow.agent.timeout_seconds = 1;
    let timed_out = run(&tree, slow, forever.clone()).await;
    let spends = json!([{"use_tokens": {"input_tokens": 50, "output_tokens": 5}}, {"return": {}}]);
    let overspent = run(&tree, agent("overspends", json!({"budget": {"max_tokens": 10}})), spends).await;
    let cancelled = run(&tree, agent("is cancelled", json!({})), forever.clone()).await;
    let waits = run(&tree, agent("waits", json!({})), json!([{"wait_message": {}}, {"return": {}}])).await;
    let killed = run(&tree, agent("is terminated running", json!({})), forever.clone()).await;
    let dormant = spawn(&tree, agent("is terminated dormant", json!({}))).await;
    until(&tree, waits, SubagentStatus::Waiting).await;
    let note = SubagentMessagePayload { kind: "note".into(), content: json!("go on") };
    tree.message("client".into(), waits, note).await.expect("message");
    until(&tree, cancelled, SubagentStatus::Running).await;
    tree.cancel(cancelled).await.expect("cancel");
    tree.terminate(killed).await.expect("terminate running");
    tree.terminate(dormant).await.expect("terminate dormant");
    let outcomes = [
        (completed, SubagentStatus::Completed),
        (failed, SubagentStatus::Failed),
        (timed_out, SubagentStatus::Failed),
        (overspent, SubagentStatus::Failed),
        (cancelled, SubagentStatus::Cancelled),
        (waits, SubagentStatus::Completed),
        (killed, SubagentStatus::Terminated),
        (dormant, SubagentStatus::Terminated),
    ];
    for (id, status) in outcomes {
        assert_eq!(ends(&tree, id).await, status, "{id}");
    }

    // A queued task, cancelled before it ran: a session capped at one task.
    let capped = Limits { max_running_per_session: 1, cancel_grace_ms: 200, ..Limits::default() };
    let (queue_tree, queue_session, mut queue_events) = open(capped);
    let holder = run(&queue_tree, agent("holds the slot", json!({})), forever.clone()).await;
    let queued = run(&queue_tree, agent("waits in the queue", json!({})), json!([{"return": {}}])).await;
    queue_tree.cancel(queued).await.expect("cancel queued");
    assert_eq!(ends(&queue_tree, queued).await, SubagentStatus::Cancelled);
    queue_tree.terminate(holder).await.expect("terminate");

    // A task that resumes after a restart.
    let (restored_tree, restored_session, mut restored_events) = open(Limits::default());
    let resumed = SubagentId::parse("sub_00c0ffee").expect("an id");
    let config = Arc::new(SubagentConfig::new("resumes", "scripted"));
    let row = SubagentRow {
        ord: 0,
        parent: None,
        parent_agent_id: Some("client".into()),
        root_agent_id: Some("client".into()),
        depth: 0,
        spawn_key: None,
        tasks_started: 1,
        config,
        status: SubagentStatus::Running,
        result: None,
        error: None,
        usage: Usage::default(),
    };
    let task =
        StoredTask { task: scripted(json!([{"return": {}}])), task_no: 1, attempt: 1, position: 0, checkpoint: None };
    let stored = StoredSubagent { id: resumed, row, task: Some(task), memory: None, mailbox: Vec::new() };
    assert_eq!(restored_tree.restore(vec![stored]).await.expect("restore"), 1);
    assert_eq!(ends(&restored_tree, resumed).await, SubagentStatus::Completed);

    // Closing terminates the rest, idle: no task of theirs ends then.
    let mut covered = std::collections::BTreeSet::new();
    let (stopped_running, never_ran) = ([killed, holder], [queued]);
    for (session, events, tree) in [
        (session, &mut events, &tree),
        (queue_session, &mut queue_events, &queue_tree),
        (restored_session, &mut restored_events, &restored_tree),
    ] {
        tree.close().await;
        covered.extend(check(&session, events, &stopped_running, &never_ran));
    }
    let every = [
        EventKind::Delegated,
        EventKind::Queued,
        EventKind::StatusChanged,
        EventKind::Resumed,
        EventKind::Completed,
        EventKind::Failed,
        EventKind::Timeout,
        EventKind::BudgetExceeded,
        EventKind::Cancelled,
        EventKind::Terminated,
    ];
    for kind in every {
        assert!(covered.contains(kind.as_str()), "no `{}` move was seen: {covered:?}", kind.as_str());
    }
}

/// Checks each move of `session` against the sinks it reached; the kinds
/// of the moves seen. `stopped_running`: the subagents terminated while a
/// task ran; `never_ran`: those whose task was cancelled in the queue.
fn check(
    session: &str,
    events: &mut UnboundedReceiver<Event>,
    stopped_running: &[SubagentId],
    never_ran: &[SubagentId],
) -> Vec<&'static str> {
    let mut told: HashMap<(SubagentId, EventKind), usize> = HashMap::new();
    while let Ok(event) = events.try_recv() {
        *told.entry((event.subagent_id, event.kind)).or_default() += 1;
    }
    let mut reached: HashMap<(SubagentId, EventKind, Sink), usize> = HashMap::new();
    for (id, kind, sink) in tally::of(session) {
        *reached.entry((id, kind, sink)).or_default() += 1;
    }
    let mut kinds = Vec::new();
    for (&(id, kind), &times) in &told {
        if kind.is_note() || kind == EventKind::Spawned {
            continue;
        }
        // A queued task cancelled never ran; a subagent terminated idle or
        // dormant ends none.
        let ran_now = match kind {
            EventKind::Cancelled => !never_ran.contains(&id),
            EventKind::Terminated => stopped_running.contains(&id),
            _ => true,
        };
        let wanted = expected(kind, ran_now);
        for sink in [Sink::Gauge, Sink::Journal, Sink::TaskMetrics, Sink::Trace, Sink::Event] {
            let count = reached.get(&(id, kind, sink)).copied().unwrap_or(0);
            let want = if wanted.contains(&sink) { times } else { 0 };
            assert_eq!(count, want, "{id} `{}` told {times}×: {sink:?} reached {count}×", kind.as_str());
        }
        kinds.push(kind.as_str());
    }
    kinds
}
