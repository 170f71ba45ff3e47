//! `SubagentActor`: one subagent. It runs at most one task at a time, keeps
//! its mailbox, answers awaits when the task ends, and stops its own task on
//! cancel and itself on terminate. The tree it sits in is the supervisor's:
//! a subtree is stopped by the supervisor's one stop routine.

use actix::prelude::*;
use futures_util::future::{AbortHandle, Abortable};
use futures_util::FutureExt;
use std::cell::Cell;
use std::panic::AssertUnwindSafe;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::memory::{InboxMessage, Mailbox, Memory};
use super::messages::*;
use super::supervisor::Supervisor;
use super::task::{AgentAdapter, TaskContext};
use super::{HostContext, TreeStats};
use crate::error::{ErrorCode, HostError};
use crate::event::{EventDetail, EventKind};
use crate::ids::SubagentId;
use crate::protocol::encode::encoded_len;
use crate::protocol::wire::*;

/// Longest task timeout honoured; larger `timeout_seconds` are clamped so the
/// deadline arithmetic cannot overflow.
const MAX_TIMEOUT: Duration = Duration::from_secs(365 * 24 * 3600);

/// How a task ended, as seen from inside its tokio task.
enum Outcome {
    Completed(JsonObject),
    Failed(String),
    TimedOut,
    // Dropped at once by terminate, or past the cancel grace period.
    Aborted,
    // The adapter panicked; the text of the panic.
    Panicked(String),
}

/// The task currently running on a subagent.
struct RunningTask {
    // Tells stale completions (of an earlier task) from the current one.
    generation: u64,
    // The graceful signal the adapter sees.
    cancel: CancellationToken,
    // Drops the task's future at once (terminate, or cancel past the grace period).
    abort: AbortHandle,
    // Fires once the task's future is gone and its outcome is recorded.
    // Made on first use: most tasks end without anyone waiting on them this way.
    settled: Option<CancellationToken>,
    // Set by the task while it waits on a child or its mailbox (`WAITING`).
    waiting: Rc<Cell<bool>>,
    // Set by cancel: the task ends `CANCELLED` however the adapter winds up.
    cancel_requested: bool,
    // For the timeout error text.
    timeout_seconds: u64,
}

impl RunningTask {
    /// Fires once the task has ended.
    fn settled(&mut self) -> CancellationToken {
        self.settled.get_or_insert_with(CancellationToken::new).clone()
    }

    fn fire_settled(&self) {
        if let Some(settled) = &self.settled {
            settled.cancel();
        }
    }
}

/// Counts this actor as live until it is dropped, then fires `gone`.
struct AliveGuard {
    stats: Arc<TreeStats>,
    gone: CancellationToken,
}

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.stats.live_actors.fetch_sub(1, Ordering::AcqRel);
        self.gone.cancel();
    }
}

/// Counts a task as live while its future exists.
struct LiveTask(Arc<TreeStats>);

impl LiveTask {
    fn new(stats: Arc<TreeStats>) -> Self {
        stats.live_tasks.fetch_add(1, Ordering::AcqRel);
        Self(stats)
    }
}

impl Drop for LiveTask {
    fn drop(&mut self) {
        self.0.live_tasks.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What the supervisor hands a new subagent actor.
pub(crate) struct SubagentSeed {
    pub id: SubagentId,
    pub parent_id: Option<SubagentId>,
    pub host: Arc<HostContext>,
    pub supervisor: Arc<Addr<Supervisor>>,
    pub stats: Arc<TreeStats>,
    pub config: Arc<SubagentConfig>,
    pub adapter: Arc<dyn AgentAdapter>,
    pub memory: Memory,
    pub gone: CancellationToken,
}

/// One subagent of a session's tree.
pub(crate) struct SubagentActor {
    id: SubagentId,
    parent_id: Option<SubagentId>,
    host: Arc<HostContext>,
    // Where status reports go; the supervisor outlives every subagent.
    supervisor: Arc<Addr<Supervisor>>,
    stats: Arc<TreeStats>,
    config: Arc<SubagentConfig>,
    adapter: Arc<dyn AgentAdapter>,
    memory: Memory,
    mailbox: Arc<Mailbox>,
    status: SubagentStatus,
    // The last task's result and error, answered to awaits after it ends.
    result: Option<Arc<JsonObject>>,
    error: Option<Arc<str>>,
    task: Option<RunningTask>,
    generation: u64,
    awaiters: Vec<AwaitReply>,
    // Set when terminate starts; the actor takes no new work after it.
    terminating: bool,
    _alive: AliveGuard,
}

impl SubagentActor {
    pub(crate) fn new(seed: SubagentSeed) -> Self {
        seed.stats.live_actors.fetch_add(1, Ordering::AcqRel);
        let limits = &seed.host.limits;
        let mailbox = Arc::new(Mailbox::with_bounds(limits.mailbox_capacity, limits.mailbox_max_bytes));
        Self {
            id: seed.id,
            parent_id: seed.parent_id,
            _alive: AliveGuard { stats: seed.stats.clone(), gone: seed.gone },
            host: seed.host,
            supervisor: seed.supervisor,
            stats: seed.stats,
            config: seed.config,
            adapter: seed.adapter,
            memory: seed.memory,
            mailbox,
            status: SubagentStatus::Ready,
            result: None,
            error: None,
            task: None,
            generation: 0,
            awaiters: Vec::new(),
            terminating: false,
        }
    }

    /// The status as it is now: a running task may be waiting (its flag is
    /// set from the task, on this actor's thread).
    fn current_status(&self) -> SubagentStatus {
        match &self.task {
            Some(task) if task.waiting.get() && self.status.is_busy() => SubagentStatus::Waiting,
            _ => self.status,
        }
    }

    fn record(&self) -> AwaitResponse {
        AwaitResponse {
            subagent_id: self.id,
            status: self.current_status(),
            result: self.result.clone(),
            error: self.error.clone(),
        }
    }

    fn report(&self, kind: EventKind, detail: EventDetail) {
        let terminal = !self.status.is_busy() && self.status != SubagentStatus::Ready;
        self.supervisor.do_send(Report {
            id: self.id,
            kind,
            status: self.current_status(),
            result: if terminal { self.result.clone() } else { None },
            error: if terminal { self.error.clone() } else { None },
            detail,
        });
    }

    fn start_task(&mut self, task: TaskDefinition, deadline_cap: Option<Instant>, ctx: &mut Context<Self>) {
        self.generation += 1;
        let generation = self.generation;
        let timeout_seconds = self.config.timeout_seconds;
        let mut deadline = Instant::now() + Duration::from_secs(timeout_seconds).min(MAX_TIMEOUT);
        if let Some(cap) = deadline_cap {
            deadline = deadline.min(cap);
        }
        let cancel = CancellationToken::new();
        let waiting = Rc::new(Cell::new(false));
        let task_ctx = TaskContext {
            subagent_id: self.id,
            parent_id: self.parent_id,
            config: self.config.clone(),
            task: Arc::new(task),
            memory: self.memory.clone(),
            mailbox: self.mailbox.clone(),
            cancel: cancel.clone(),
            deadline,
            waiting: waiting.clone(),
            steps: Cell::new(0),
            supervisor: self.supervisor.clone(),
        };
        let adapter = self.adapter.clone();
        let live = LiveTask::new(self.stats.clone());
        let (abort, abort_registration) = AbortHandle::new_pair();
        // The task runs inside this actor's context (no tokio task of its own):
        // it is polled with the actor, dropped with it, and its outcome lands
        // in `settle` on this actor. The adapter's future is gone, and the
        // live count down, before `settle` runs: the `.await` below consumes
        // it and `_live` ends with the block.
        let run = async move {
            let _live = live;
            let guarded = Abortable::new(tokio::time::timeout_at(deadline, adapter.run(task_ctx)), abort_registration);
            match AssertUnwindSafe(guarded).catch_unwind().await {
                Ok(Ok(Ok(Ok(result)))) => Outcome::Completed(result),
                Ok(Ok(Ok(Err(err)))) => Outcome::Failed(err.0),
                Ok(Ok(Err(_elapsed))) => Outcome::TimedOut,
                Ok(Err(_aborted)) => Outcome::Aborted,
                Err(panic) => Outcome::Panicked(panic_text(panic)),
            }
        };
        self.task = Some(RunningTask {
            generation,
            cancel,
            abort,
            waiting,
            settled: None,
            cancel_requested: false,
            timeout_seconds,
        });
        ctx.spawn(actix::fut::wrap_future(run).map(move |ended, act: &mut Self, _ctx| {
            act.settle(generation, ended);
        }));
        self.status = SubagentStatus::Running;
        self.result = None;
        self.error = None;
        self.report(EventKind::Delegated, EventDetail::None);
    }

    /// Records how task `generation` ended; ignores a stale one.
    fn settle(&mut self, generation: u64, ended: Outcome) {
        let Some(task) = self.task.take_if(|task| task.generation == generation) else {
            return;
        };
        if self.terminating {
            // Terminate records TERMINATED itself once the whole subtree is down.
            task.fire_settled();
            return;
        }
        let (status, kind, result, error) = match ended {
            outcome if task.cancel_requested => {
                let wound_up = match outcome {
                    // Kept only within the result bound, as any result.
                    Outcome::Completed(result) if encoded_len(&result) <= self.host.limits.max_result_bytes => {
                        Some(Arc::new(result))
                    }
                    _ => None,
                };
                (SubagentStatus::Cancelled, EventKind::Cancelled, wound_up, Some("cancelled".into()))
            }
            Outcome::Completed(result) => {
                let bytes = encoded_len(&result);
                let max = self.host.limits.max_result_bytes;
                if bytes <= max {
                    (SubagentStatus::Completed, EventKind::Completed, Some(Arc::new(result)), None)
                } else {
                    let text = format!("the result is {bytes} bytes, over max_result_bytes ({max} bytes)");
                    (SubagentStatus::Failed, EventKind::Failed, None, Some(text.into()))
                }
            }
            Outcome::Failed(text) => (SubagentStatus::Failed, EventKind::Failed, None, Some(text.into())),
            Outcome::TimedOut => {
                let text = format!(
                    "timeout: the task ran past its deadline (timeout_seconds = {}, or its parent's deadline)",
                    task.timeout_seconds
                );
                (SubagentStatus::Failed, EventKind::Timeout, None, Some(text.into()))
            }
            Outcome::Panicked(text) => {
                let text = format!("adapter panicked: {text}");
                log::warn!("{}: {text}", self.id);
                (SubagentStatus::Failed, EventKind::Failed, None, Some(text.into()))
            }
            Outcome::Aborted => (SubagentStatus::Failed, EventKind::Failed, None, Some("the task was aborted".into())),
        };
        self.status = status;
        self.result = result;
        self.error = error;
        self.answer_awaiters();
        self.report(kind, EventDetail::None);
        task.fire_settled();
    }

    fn answer_awaiters(&mut self) {
        if self.awaiters.is_empty() {
            return;
        }
        let record = self.record();
        for awaiter in self.awaiters.drain(..) {
            awaiter.send(Ok(record.clone()));
        }
    }

    fn finish_terminated(&mut self) {
        self.status = SubagentStatus::Terminated;
        self.error = Some("terminated".into());
        self.answer_awaiters();
        self.report(EventKind::Terminated, EventDetail::None);
    }
}

fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "unknown panic payload".to_owned()
    }
}

impl Actor for SubagentActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // Requests are bounded per session before they reach actors; a bounded
        // actor mailbox would instead make `send` hold messages back and
        // reorder them.
        ctx.set_mailbox_capacity(usize::MAX);
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        if !self.terminating {
            // Stopped without being told to (a handler panicked): still tell
            // everyone the truth. The supervisor stops its descendants.
            log::warn!("{} stopped unexpectedly", self.id);
            if let Some(task) = self.task.take() {
                task.abort.abort();
            }
            self.terminating = true;
            self.finish_terminated();
        }
    }
}

impl Handler<RunTask> for SubagentActor {
    type Result = ();

    fn handle(&mut self, msg: RunTask, ctx: &mut Self::Context) {
        if self.terminating {
            return msg.reply.send(DelegateResponse { accepted: false, status: SubagentStatus::Terminated });
        }
        if self.task.is_some() {
            return msg.reply.send(DelegateResponse { accepted: false, status: self.current_status() });
        }
        self.start_task(msg.task, msg.deadline_cap, ctx);
        msg.reply.send(DelegateResponse { accepted: true, status: SubagentStatus::Running });
    }
}

impl Handler<AwaitTask> for SubagentActor {
    type Result = ();

    fn handle(&mut self, msg: AwaitTask, _ctx: &mut Self::Context) {
        let reply = msg.0;
        if self.task.is_none() && !self.terminating {
            return reply.send(Ok(self.record()));
        }
        if self.awaiters.len() >= self.host.limits.max_awaiters_per_subagent {
            return reply.send(Err(HostError::new(
                ErrorCode::QuotaExceeded,
                format!("{} already has {} pending awaits", self.id, self.awaiters.len()),
            )));
        }
        self.awaiters.push(reply);
    }
}

impl Handler<Deliver> for SubagentActor {
    type Result = Result<(), HostError>;

    fn handle(&mut self, msg: Deliver, _ctx: &mut Self::Context) -> Self::Result {
        if self.terminating {
            return Err(HostError::new(ErrorCode::InvalidState, format!("{} is terminated", self.id)));
        }
        let detail = EventDetail::Message { from: msg.from.clone(), kind: msg.payload.kind.clone() };
        if self.mailbox.push(InboxMessage { from: msg.from, payload: msg.payload }).is_err() {
            return Err(HostError::new(ErrorCode::MailboxFull, format!("the mailbox of {} is full", self.id))
                .with_detail(serde_json::json!({
                    "capacity": self.host.limits.mailbox_capacity,
                    "mailbox_max_bytes": self.host.limits.mailbox_max_bytes,
                })));
        }
        self.report(EventKind::MessageReceived, detail);
        Ok(())
    }
}

impl Handler<CancelTask> for SubagentActor {
    type Result = ResponseActFuture<Self, bool>;

    fn handle(&mut self, _msg: CancelTask, _ctx: &mut Self::Context) -> Self::Result {
        let Some(task) = self.task.as_mut() else {
            return Box::pin(actix::fut::ready(false));
        };
        task.cancel_requested = true;
        task.cancel.cancel();
        let (settled, abort) = (task.settled(), task.abort.clone());
        let grace = self.host.limits.cancel_grace();
        let id = self.id;
        Box::pin(actix::fut::wrap_future(async move {
            if tokio::time::timeout(grace, settled.cancelled()).await.is_err() {
                log::debug!("{id} ignored cancel for {grace:?}; stopping its task");
                abort.abort();
                settled.cancelled().await;
            }
            true
        }))
    }
}

impl Handler<StopActor> for SubagentActor {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, _msg: StopActor, _ctx: &mut Self::Context) -> Self::Result {
        if self.terminating {
            return Box::pin(actix::fut::ready(()));
        }
        self.terminating = true;
        let own = self.task.as_mut().map(|task| {
            task.cancel.cancel();
            task.abort.abort();
            task.settled()
        });
        Box::pin(
            actix::fut::wrap_future(async move {
                if let Some(settled) = own {
                    settled.cancelled().await;
                }
            })
            .map(|(), act: &mut Self, ctx| {
                act.task = None;
                act.finish_terminated();
                ctx.stop();
            }),
        )
    }
}
