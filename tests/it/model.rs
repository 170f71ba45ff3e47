//! Model-based test of the actor runtime: random sequences of spawn (top
//! level or child), delegate, await, cancel, terminate and message, run both
//! against a [`Tree`] and against [`Model`], a plain reference of the
//! lifecycle table in `DESIGN.md` ("Lifecycle semantics"). After every step
//! the two must agree on each reply (errors by code, delegate acceptance,
//! await records, the stopped-id sets of cancel and terminate), on every
//! listed status, depth and parent, on the live actor and task counts, and
//! on what pending awaits received. Closing the session must stop exactly
//! what the model says is not yet terminated and leave no actor and no task.
//!
//! Statuses are kept free of timing: a task either ends by itself and is
//! awaited within its step (return, fail, a short sleep), or sleeps "for
//! ever" (600 s) until a cancel, terminate or the close stops it.
//!
//! `PROPTEST_CASES` sets the number of cases (default 256, of up to 40 steps;
//! well under a second in release mode).

use crate::common::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::Poll;
use std::time::Duration;
use subagent_host::config::Limits;
use subagent_host::protocol::wire::*;
use subagent_host::EventKind;
use subagent_host::{lifecycle, IdRegistry, IdSource};
use subagent_host::{ErrorCode, Host, HostConfig, HostError, SubagentId, Tree};
use tokio::task::JoinHandle;

const MAX_DEPTH: u32 = 3;
const QUOTA: usize = 6;
const MAILBOX: usize = 2;
/// An id the session never hands out (ids count up from 1).
const STRANGER: SubagentId = SubagentId(0xffff_ffff);
/// Bounds a wait that must end at once, so a bug fails instead of hanging.
const PROMPT: Duration = Duration::from_secs(10);

fn limits() -> Limits {
    Limits {
        max_depth: MAX_DEPTH,
        max_subagents_per_session: QUOTA,
        mailbox_capacity: MAILBOX,
        cancel_grace_ms: 200,
        ..Limits::default()
    }
}

/// Ids `sub_00000001`, `sub_00000002`, …: a stranger id can never collide.
#[derive(Default)]
struct Counter(AtomicU32);

impl IdSource for Counter {
    fn next_candidate(&self) -> u32 {
        self.0.fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// A task's script, by how it ends.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Work {
    /// `return` at once.
    Return,
    /// `fail` at once.
    Fail,
    /// Sleeps a few ms, then returns.
    Short,
    /// Sleeps 600 s: runs until stopped.
    Forever,
}

/// One step. A `usize` picks a subagent spawned so far (see
/// [`Model::pick`]; with none yet, the step is skipped).
#[derive(Debug, Clone)]
enum Op {
    Spawn {
        parent: Option<usize>,
    },
    Delegate {
        target: usize,
        work: Work,
    },
    Await {
        target: usize,
    },
    Cancel {
        target: usize,
    },
    Terminate {
        target: usize,
    },
    Message {
        target: usize,
    },
    /// A request naming an id the session does not have.
    Stranger {
        request: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let work = prop_oneof![
        2 => Just(Work::Return),
        1 => Just(Work::Fail),
        1 => Just(Work::Short),
        3 => Just(Work::Forever),
    ];
    prop_oneof![
        5 => proptest::option::weighted(0.6, 0..64usize).prop_map(|parent| Op::Spawn { parent }),
        5 => (0..64usize, work).prop_map(|(target, work)| Op::Delegate { target, work }),
        2 => (0..64usize).prop_map(|target| Op::Await { target }),
        2 => (0..64usize).prop_map(|target| Op::Cancel { target }),
        1 => (0..64usize).prop_map(|target| Op::Terminate { target }),
        2 => (0..64usize).prop_map(|target| Op::Message { target }),
        1 => (0..5u8).prop_map(|request| Op::Stranger { request }),
    ]
}

/// What an await answers: status, result, error.
type Record = (SubagentStatus, Option<Value>, Option<String>);

/// The reference model's view of one subagent.
#[derive(Debug, Clone)]
struct Node {
    parent: Option<usize>,
    depth: u32,
    status: SubagentStatus,
    result: Option<Value>,
    error: Option<String>,
    // Whether it has an actor: started by its first task or message, put to
    // sleep when a task ends by itself leaving nothing to do (no mail; a
    // cancelled task's actor stays), gone once terminated.
    awake: bool,
    // Messages in its mailbox (these tasks never read it).
    mailbox: usize,
}

impl Node {
    fn record(&self) -> Record {
        (self.status, self.result.clone(), self.error.clone())
    }
}

/// The lifecycle table of `DESIGN.md`, with no actors, no time, no tasks.
#[derive(Debug, Default)]
struct Model {
    nodes: Vec<Node>,
}

impl Model {
    /// The subagent a step's `index` names: three times in four one not
    /// terminated (when there is one), else any.
    fn pick(&self, index: usize) -> Option<usize> {
        let live: Vec<usize> =
            (0..self.nodes.len()).filter(|&i| self.nodes[i].status != SubagentStatus::Terminated).collect();
        if !index.is_multiple_of(4) && !live.is_empty() {
            return Some(live[index / 4 % live.len()]);
        }
        (!self.nodes.is_empty()).then(|| index % self.nodes.len())
    }

    /// `index` and every descendant of it.
    fn subtree(&self, index: usize) -> Vec<usize> {
        let mut out = vec![index];
        let mut at = 0;
        while at < out.len() {
            let parent = out[at];
            out.extend((0..self.nodes.len()).filter(|&i| self.nodes[i].parent == Some(parent)));
            at += 1;
        }
        out
    }

    fn live(&self) -> usize {
        self.nodes.iter().filter(|n| n.status != SubagentStatus::Terminated).count()
    }

    /// spawn: a terminated parent is `invalid_state`; then depth, then quota.
    fn spawn(&mut self, parent: Option<usize>) -> Result<usize, ErrorCode> {
        let depth = match parent {
            Some(p) if self.nodes[p].status == SubagentStatus::Terminated => return Err(ErrorCode::InvalidState),
            Some(p) => self.nodes[p].depth + 1,
            None => 0,
        };
        if depth >= MAX_DEPTH {
            return Err(ErrorCode::DepthExceeded);
        }
        if self.live() >= QUOTA {
            return Err(ErrorCode::QuotaExceeded);
        }
        self.nodes.push(Node {
            parent,
            depth,
            status: SubagentStatus::Ready,
            result: None,
            error: None,
            awake: false,
            mailbox: 0,
        });
        Ok(self.nodes.len() - 1)
    }

    /// Starts the actor of `index` (only its own: the tree is the
    /// supervisor's records, so ancestors stay records until used).
    fn wake(&mut self, index: usize) {
        self.nodes[index].awake = true;
    }

    /// delegate: refused while running or once terminated; else `RUNNING`.
    fn delegate(&mut self, index: usize) -> DelegateResponse {
        let status = self.nodes[index].status;
        if matches!(status, SubagentStatus::Running | SubagentStatus::Waiting | SubagentStatus::Terminated) {
            return DelegateResponse { accepted: false, status };
        }
        self.wake(index);
        let node = &mut self.nodes[index];
        node.status = SubagentStatus::Running;
        node.result = None;
        node.error = None;
        DelegateResponse { accepted: true, status: SubagentStatus::Running }
    }

    /// How an accepted task of `work` (other than `Forever`) ends.
    fn finish(&mut self, index: usize, work: Work, result: Value) {
        let node = &mut self.nodes[index];
        match work {
            Work::Fail => {
                node.status = SubagentStatus::Failed;
                node.error = Some(result["fail"].as_str().expect("fail text").to_owned());
            }
            _ => {
                node.status = SubagentStatus::Completed;
                node.result = Some(result);
            }
        }
        if node.mailbox == 0 {
            node.awake = false;
        }
    }

    /// cancel: every running task of the subtree ends `CANCELLED`; other
    /// statuses stay. Returns what was stopped.
    fn cancel(&mut self, index: usize) -> BTreeSet<usize> {
        let stopped: BTreeSet<usize> =
            self.subtree(index).into_iter().filter(|&i| self.nodes[i].status == SubagentStatus::Running).collect();
        for &i in &stopped {
            let node = &mut self.nodes[i];
            node.status = SubagentStatus::Cancelled;
            node.result = None;
            node.error = Some("cancelled".into());
        }
        stopped
    }

    /// terminate: every subagent of the subtree not yet terminated is, and
    /// keeps its last result. Returns what was stopped.
    fn terminate(&mut self, index: usize) -> BTreeSet<usize> {
        if self.nodes[index].status == SubagentStatus::Terminated {
            return BTreeSet::new();
        }
        let stopped: BTreeSet<usize> =
            self.subtree(index).into_iter().filter(|&i| self.nodes[i].status != SubagentStatus::Terminated).collect();
        for &i in &stopped {
            let node = &mut self.nodes[i];
            node.status = SubagentStatus::Terminated;
            node.error = Some("terminated".into());
            node.awake = false;
        }
        stopped
    }

    /// message: refused once terminated; the target's actor starts (even
    /// when its mailbox then turns out full).
    fn message(&mut self, index: usize) -> Result<(), ErrorCode> {
        if self.nodes[index].status == SubagentStatus::Terminated {
            return Err(ErrorCode::InvalidState);
        }
        self.wake(index);
        let node = &mut self.nodes[index];
        if node.mailbox >= MAILBOX {
            return Err(ErrorCode::MailboxFull);
        }
        node.mailbox += 1;
        Ok(())
    }

    fn actors(&self) -> usize {
        self.nodes.iter().filter(|n| n.awake).count()
    }

    fn tasks(&self) -> usize {
        self.nodes.iter().filter(|n| n.status == SubagentStatus::Running).count()
    }
}

/// An await sent while its task runs: once the model stops that task, it
/// must have answered with the model's record.
struct Pending {
    index: usize,
    handle: JoinHandle<Result<AwaitResponse, HostError>>,
}

/// The runtime side of a case: the session and the ids it handed out, in
/// the model's order.
struct Real {
    session: Tree,
    ids: Vec<SubagentId>,
    pending: Vec<Pending>,
}

fn task_for(work: Work, step: usize) -> (TaskDefinition, Value) {
    match work {
        Work::Return => (script_task("return", json!([{ "return": { "step": step } }])), json!({ "step": step })),
        Work::Fail => {
            let text = format!("failed at step {step}");
            (script_task("fail", json!([{ "fail": text }])), json!({ "fail": text }))
        }
        Work::Short => (script_task("short", json!([{ "sleep_ms": 3 }, { "return": step }])), json!({ "value": step })),
        Work::Forever => (sleeping_task(600_000), Value::Null),
    }
}

fn record_of(answer: &AwaitResponse) -> Record {
    let result = answer.result.as_ref().map(|r| Value::Object(r.to_object()));
    (answer.status, result, answer.error.as_deref().map(str::to_owned))
}

fn code<T: std::fmt::Debug>(result: Result<T, HostError>) -> Result<T, ErrorCode> {
    result.map_err(|err| err.code)
}

/// Sends an await now (its first poll queues the request at the
/// supervisor, so a later cancel or terminate finds it registered) and
/// leaves the reply to a task.
async fn send_await(session: &Tree, id: SubagentId) -> JoinHandle<Result<AwaitResponse, HostError>> {
    let session = session.clone();
    let mut reply = Box::pin(async move { session.await_result(id).await });
    let early = std::future::poll_fn(|cx| Poll::Ready(reply.as_mut().poll(cx).map(|_| ()).is_ready())).await;
    assert!(!early, "an await on a running task answered at once");
    actix_rt::spawn(reply)
}

macro_rules! check_eq {
    ($left:expr, $right:expr, $($what:tt)+) => {{
        let (left, right) = (&$left, &$right);
        if left != right {
            let what = format!($($what)+);
            return Err(TestCaseError::fail(format!("{what}: runtime {left:?}, model {right:?}")));
        }
    }};
}

impl Real {
    fn set(&self, indices: &BTreeSet<usize>) -> BTreeSet<SubagentId> {
        indices.iter().map(|&i| self.ids[i]).collect()
    }

    /// Runs one step on both sides and compares the replies.
    async fn step(&mut self, model: &mut Model, op: &Op, step: usize) -> Result<(), TestCaseError> {
        let session = self.session.clone();
        match *op {
            Op::Spawn { parent } => {
                let parent = parent.and_then(|p| model.pick(p));
                let real = code(try_spawn(&session, "m", parent.map(|p| self.ids[p])).await);
                let expected = model.spawn(parent);
                check_eq!(real.is_ok(), expected.is_ok(), "step {step} {op:?}: spawn ok ({real:?})");
                match (real, expected) {
                    (Ok(id), Ok(_)) => self.ids.push(id),
                    (real, expected) => check_eq!(real.err(), expected.err(), "step {step} {op:?}: spawn error"),
                }
            }
            Op::Delegate { target, work } => {
                let Some(i) = model.pick(target) else { return Ok(()) };
                let (task, result) = task_for(work, step);
                let reply = code(session.delegate(self.ids[i], task).await);
                let expected = model.delegate(i);
                check_eq!(reply, Ok(expected.clone()), "step {step} {op:?}: delegate reply");
                if expected.accepted && work != Work::Forever {
                    let answer = code(session.await_result(self.ids[i]).await);
                    model.finish(i, work, result);
                    check_eq!(answer.map(|a| record_of(&a)), Ok(model.nodes[i].record()), "step {step} {op:?}: await");
                }
            }
            Op::Await { target } => {
                let Some(i) = model.pick(target) else { return Ok(()) };
                if model.nodes[i].status == SubagentStatus::Running {
                    let handle = send_await(&session, self.ids[i]).await;
                    self.pending.push(Pending { index: i, handle });
                } else {
                    let answer = code(session.await_result(self.ids[i]).await);
                    check_eq!(answer.map(|a| record_of(&a)), Ok(model.nodes[i].record()), "step {step} {op:?}");
                }
            }
            Op::Cancel { target } => {
                let Some(i) = model.pick(target) else { return Ok(()) };
                let stopped = code(session.cancel(self.ids[i]).await).map(BTreeSet::from_iter);
                let expected = model.cancel(i);
                check_eq!(stopped, Ok(self.set(&expected)), "step {step} {op:?}: cancel stopped");
            }
            Op::Terminate { target } => {
                let Some(i) = model.pick(target) else { return Ok(()) };
                let stopped = code(session.terminate(self.ids[i]).await).map(BTreeSet::from_iter);
                let expected = model.terminate(i);
                check_eq!(stopped, Ok(self.set(&expected)), "step {step} {op:?}: terminate stopped");
            }
            Op::Message { target } => {
                let Some(i) = model.pick(target) else { return Ok(()) };
                let payload = SubagentMessagePayload { kind: "note".into(), content: json!(step) };
                let reply = code(session.message("client_agent".into(), self.ids[i], payload).await);
                let expected = model.message(i);
                check_eq!(reply.map(|r| r.delivered), expected.map(|()| true), "step {step} {op:?}: message");
            }
            Op::Stranger { request } => {
                let err = match request {
                    0 => code(session.delegate(STRANGER, TaskDefinition::new("t", "x")).await).err(),
                    1 => code(session.await_result(STRANGER).await).err(),
                    2 => code(session.cancel(STRANGER).await).err(),
                    3 => code(session.terminate(STRANGER).await).err(),
                    _ => {
                        let payload = SubagentMessagePayload { kind: "note".into(), content: json!(step) };
                        code(session.message("client_agent".into(), STRANGER, payload).await).err()
                    }
                };
                check_eq!(err, Some(ErrorCode::UnknownSubagent), "step {step} {op:?}");
            }
        }
        Ok(())
    }

    /// Compares the listing, the live counts and the pending awaits.
    async fn compare(&mut self, model: &Model, step: usize) -> Result<(), TestCaseError> {
        let list = self.session.list().await.map_err(|err| TestCaseError::fail(format!("list: {err}")))?;
        let mut real: Vec<_> = list
            .subagents
            .iter()
            .map(|info| (info.subagent_id, info.status, info.depth, info.parent_agent_id.as_deref().map(str::to_owned)))
            .collect();
        real.sort_by_key(|row| row.0);
        let mut expected: Vec<_> = model
            .nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
                let parent = node.parent.map_or_else(|| "client_agent".to_owned(), |p| self.ids[p].to_string());
                (self.ids[i], node.status, node.depth, Some(parent))
            })
            .collect();
        expected.sort_by_key(|row| row.0);
        check_eq!(real, expected, "after step {step}: list");
        check_eq!(
            actors_settled(&self.session, model.actors()).await,
            model.actors(),
            "after step {step}: live actors"
        );
        check_eq!(self.session.stats().tasks(), model.tasks(), "after step {step}: live tasks");
        self.settle_pending(model, step).await
    }

    /// Checks every pending await whose task the model has stopped.
    async fn settle_pending(&mut self, model: &Model, step: usize) -> Result<(), TestCaseError> {
        let mut still = Vec::new();
        for pending in std::mem::take(&mut self.pending) {
            let node = &model.nodes[pending.index];
            if node.status == SubagentStatus::Running {
                check_eq!(pending.handle.is_finished(), false, "after step {step}: an await on a running task");
                still.push(pending);
                continue;
            }
            let expected = node.record();
            let answer = tokio::time::timeout(PROMPT, pending.handle)
                .await
                .map_err(|_| TestCaseError::fail(format!("after step {step}: a pending await never answered")))?
                .map_err(|err| TestCaseError::fail(format!("await task: {err}")))?;
            check_eq!(code(answer).map(|a| record_of(&a)), Ok(expected), "after step {step}: pending await");
        }
        self.pending = still;
        Ok(())
    }
}

async fn run_case(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let config =
        HostConfig { limits: limits(), ids: IdRegistry::new(Box::new(Counter::default())), ..Default::default() };
    let host = Host::new(config);
    let (session, _events) = open(&host);
    let mut real = Real { session: session.clone(), ids: Vec::new(), pending: Vec::new() };
    let mut model = Model::default();
    for (step, op) in ops.iter().enumerate() {
        real.step(&mut model, op, step).await?;
        real.compare(&model, step).await?;
    }
    // Close: everything not yet terminated is stopped, and nothing is left.
    let stopped: BTreeSet<SubagentId> = session.close().await.into_iter().collect();
    let all = model.nodes.len();
    let expected = model.terminate_all(all);
    check_eq!(stopped, real.set(&expected), "close stopped");
    check_eq!(session.stats().actors(), 0, "live actors after close");
    check_eq!(session.stats().tasks(), 0, "live tasks after close");
    check_eq!(session.is_open(), false, "supervisor after close");
    real.settle_pending(&model, ops.len()).await
}

impl Model {
    /// What closing the session stops: every subagent not yet terminated.
    fn terminate_all(&mut self, count: usize) -> BTreeSet<usize> {
        let stopped =
            (0..count).filter(|&i| self.nodes[i].status != SubagentStatus::Terminated).collect::<BTreeSet<_>>();
        for &i in &stopped {
            let node = &mut self.nodes[i];
            node.status = SubagentStatus::Terminated;
            node.error = Some("terminated".into());
            node.awake = false;
        }
        stopped
    }
}

#[test]
fn random_lifecycle_sequences_match_the_reference_model_and_leave_nothing_behind_on_close() {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(256);
    let config = Config { cases, failure_persistence: None, ..Config::default() };
    let mut runner = TestRunner::new(config);
    let outcome =
        runner.run(&proptest::collection::vec(op(), 1..=40), |ops| actix_rt::System::new().block_on(run_case(ops)));
    if let Err(failure) = outcome {
        panic!("{failure}");
    }
    // Every status change of every case went through the one transition
    // function, and it refused none (a refusal is a report it does not know).
    assert_eq!(lifecycle::refusals(), 0, "status changes the lifecycle table refused (see the error log)");
}

/// The lifecycle table of `DESIGN.md`, written out here independently, for
/// every status, event and asked-for status, against the one function the
/// runtime moves statuses through.
#[test]
fn the_transition_function_is_the_lifecycle_table() {
    use SubagentStatus::*;
    let idle = |s: SubagentStatus| matches!(s, Ready | Completed | Failed | Cancelled);
    let busy = |s: SubagentStatus| matches!(s, Running | Waiting);
    let expected = |from: SubagentStatus, on: EventKind, to: SubagentStatus| -> Option<SubagentStatus> {
        let moved = match on {
            EventKind::Spawned => from == Ready && to == Ready,
            // delegate: accepted on READY and finished subagents, RUNNING.
            EventKind::Delegated => idle(from) && to == Running,
            // past the running caps it waits, READY, for a slot.
            EventKind::Queued => idle(from) && to == Ready,
            // WAITING while it waits on a child or its mailbox; RUNNING after.
            EventKind::StatusChanged => (from == Running && to == Waiting) || (from == Waiting && to == Running),
            EventKind::Resumed => busy(from) && to == Running,
            EventKind::Completed => busy(from) && to == Completed,
            // a timeout and a spent budget end the task FAILED.
            EventKind::Failed | EventKind::Timeout | EventKind::BudgetExceeded => busy(from) && to == Failed,
            // a running task, or one queued (READY), is cancelled.
            EventKind::Cancelled => (busy(from) || from == Ready) && to == Cancelled,
            // terminate: any, TERMINATED.
            EventKind::Terminated => to == Terminated,
            // not a move: nothing changes, and nothing leaves TERMINATED.
            EventKind::Progress
            | EventKind::Throttled
            | EventKind::MessageReceived
            | EventKind::Merged
            | EventKind::ToolCall
            | EventKind::ToolResult
            | EventKind::ApprovalRequested
            | EventKind::InputRequested
            | EventKind::Stuck => {
                return (from != Terminated || to == Terminated).then_some(from);
            }
        };
        moved.then_some(to)
    };
    let mut checked = 0;
    for from in SubagentStatus::ALL {
        for on in EventKind::ALL {
            for to in SubagentStatus::ALL {
                let got = lifecycle::next(from, on, to).ok();
                assert_eq!(got, expected(from, on, to), "{from:?} on {on:?} asking {to:?}");
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 7 * EventKind::ALL.len() * 7);
    // Nothing leaves TERMINATED but to TERMINATED.
    for on in EventKind::ALL {
        for to in SubagentStatus::ALL {
            if let Ok(next) = lifecycle::next(Terminated, on, to) {
                assert_eq!(next, Terminated, "left TERMINATED on {on:?}");
            }
        }
    }
}

/// Spawn-child → delegate → terminate, many times under one live parent: the
/// parent's children (as its own `await_children` step sees them) and the
/// live actors must stay what `list` shows, not grow with each round. (The
/// supervisor's records are the only child list; `actor_tree` checks
/// `Tree::children` against the listing directly.)
#[actix_rt::test]
async fn many_terminated_children_under_one_live_parent_leave_its_child_count_equal_to_the_listing() {
    const ROUNDS: usize = 300;
    const RETAINED: usize = 8;
    let limits = Limits { max_retained_records: RETAINED, ..limits() };
    let host = Host::new(HostConfig { limits, ..Default::default() });
    let (session, _events) = open(&host);
    let parent = spawn(&session, "parent", None).await;
    // A finished task leaves the parent's actor asleep: its record stands in.
    delegate(&session, parent, script_task("first", json!([{ "return": {} }]))).await;
    session.await_result(parent).await.expect("await");
    for round in 0..ROUNDS {
        let child = spawn(&session, "child", Some(parent)).await;
        let work = if round % 2 == 0 { Work::Return } else { Work::Forever };
        delegate(&session, child, task_for(work, round).0).await;
        if work == Work::Return {
            session.await_result(child).await.expect("await");
        }
        assert_eq!(session.terminate(child).await.expect("terminate"), vec![child]);
        assert_eq!(actors_settled(&session, 0).await, 0, "round {round}: no actor is left awake");
    }
    let list = session.list().await.expect("list");
    let parent_text = parent.to_string();
    let listed: BTreeSet<String> = list
        .subagents
        .iter()
        .filter(|info| info.parent_agent_id.as_deref() == Some(parent_text.as_str()))
        .map(|info| info.subagent_id.to_string())
        .collect();
    assert_eq!(listed.len(), RETAINED, "the listing keeps the newest terminated records");
    delegate(&session, parent, script_task("count", json!([{ "await_children": {} }]))).await;
    let answer = session.await_result(parent).await.expect("await");
    assert_eq!(answer.status, SubagentStatus::Completed, "{answer:?}");
    let children = answer.result.as_ref().map(RawObject::to_object);
    let children = children.as_ref().and_then(|r| r.get("children")).and_then(Value::as_object);
    let seen: BTreeSet<String> = children.map(|c| c.keys().cloned().collect()).unwrap_or_default();
    assert_eq!(seen, listed, "the parent's children are what the listing shows");
    assert_eq!(actors_settled(&session, 0).await, 0);
    session.close().await;
    assert_eq!((session.stats().actors(), session.stats().tasks()), (0, 0));
}
