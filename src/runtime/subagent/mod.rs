//! `SubagentActor`: one subagent. It runs at most one task at a time, keeps
//! its mailbox, answers awaits when the task ends, and stops its own task on
//! cancel and itself on terminate. The tree it sits in is the supervisor's:
//! a subtree is stopped by the supervisor's one stop routine.
//!
//! An actor lives while its subagent has work: once a task ends with nothing
//! left to do, it says so in its report, and the supervisor may put it to
//! sleep (`Sleep`), its record standing in for it. It counts the messages it
//! handles, so that the supervisor can tell none is still on the way.
//!
//! - `running`: starting a task inside the actor and recording how it ended.

mod running;

use running::RunningTask;

use actix::prelude::*;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use super::budget::{self, WallBudget};
use super::memory::{held_now, InboxMessage, Mailbox, Memory};
use super::messages::*;
use super::supervisor::{AwaitReply, Supervisor};
use super::task::AgentAdapter;
use super::usage::UsageMeter;
use super::{HostContext, TreeStats};
use crate::error::{ErrorCode, HostError};
use crate::event::{EventDetail, EventKind};
use crate::ids::SubagentId;
use crate::metrics::{metrics, TaskOutcome};
use crate::protocol::wire::*;
use crate::store::{Change, Held, SessionLog};

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
    // Where its state changes are recorded.
    pub log: Arc<SessionLog>,
    // Whose memory `memory` is (itself, or a `shared` ancestor).
    pub memory_owner: SubagentId,
    // Tasks it ran before (a restored subagent): task numbers go on from here.
    pub tasks_started: u64,
    // Messages already in its mailbox (a restored subagent's undelivered ones).
    pub inbox: Vec<InboxMessage>,
    // Its status, last result and error so far (a restored subagent has had
    // tasks before its actor started).
    pub status: SubagentStatus,
    pub result: Option<RawObject>,
    pub error: Option<Arc<str>>,
    // Its token counts (the record's meter).
    pub usage: Arc<UsageMeter>,
    // The wall-clock budget its tasks are held to.
    pub wall: Option<Arc<WallBudget>>,
    // The task it last ran (an actor woken after sleeping).
    pub last_task: Option<Arc<TaskDefinition>>,
    // The record's newest task's number, which this actor has seen.
    pub ticket: Ticket,
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
    result: Option<RawObject>,
    error: Option<Arc<str>>,
    task: Option<RunningTask>,
    // The task it runs or last ran (the operator's view shows it).
    last_task: Option<Arc<TaskDefinition>>,
    generation: u64,
    awaiters: Vec<AwaitReply>,
    // Set when terminate starts; the actor takes no new work after it.
    terminating: bool,
    // Messages handled from the supervisor (see `Idle`).
    handled: u64,
    // Set when it stops to sleep (not terminated: its record stands in).
    asleep: bool,
    // The newest task of its record it has seen; its reports carry it.
    ticket: Ticket,
    log: Arc<SessionLog>,
    memory_owner: SubagentId,
    usage: Arc<UsageMeter>,
    wall: Option<Arc<WallBudget>>,
    _alive: AliveGuard,
}

impl SubagentActor {
    pub(crate) fn new(seed: SubagentSeed) -> Self {
        seed.stats.live_actors.fetch_add(1, Ordering::AcqRel);
        let limits = &seed.host.limits;
        let mailbox = Arc::new(Mailbox::with_bounds(limits.mailbox_capacity, limits.mailbox_max_bytes));
        for message in seed.inbox {
            // Within the same bounds as when they were stored.
            let _ = mailbox.push(message);
        }
        mailbox.take_changed();
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
            status: seed.status,
            result: seed.result,
            error: seed.error,
            task: None,
            last_task: seed.last_task,
            generation: seed.tasks_started,
            awaiters: Vec::new(),
            terminating: false,
            handled: 0,
            asleep: false,
            ticket: seed.ticket,
            log: seed.log,
            memory_owner: seed.memory_owner,
            usage: seed.usage,
            wall: seed.wall,
        }
    }

    /// Records how its task ended, with its memory and mailbox as they are
    /// now, before anyone is told.
    fn record_task_end(&self) {
        log::debug!(
            "session {} subagent {} ({}): task ended {}{}",
            self.log.id(),
            self.id,
            self.config.name,
            self.status.as_str(),
            self.error.as_deref().map(|error| format!(": {error}")).unwrap_or_default()
        );
        self.log.record(|session| Change::TaskEnded {
            session,
            id: self.id,
            status: self.status,
            result: self.result.clone(),
            error: self.error.clone(),
            held: held_now(self.memory_owner, &self.memory, &self.mailbox),
            usage: self.usage.own(),
        });
    }

    /// The status as it is now: a running task may be waiting (its flag is
    /// set from the task, on this actor's thread).
    fn current_status(&self) -> SubagentStatus {
        match &self.task {
            Some(task) if task.shared.waiting.get() && self.status.is_busy() => SubagentStatus::Waiting,
            _ => self.status,
        }
    }

    fn record(&self) -> AwaitResponse {
        AwaitResponse {
            subagent_id: self.id,
            status: self.current_status(),
            result: self.result.clone(),
            error: self.error.clone(),
            usage: self.usage.own(),
            subtree_usage: self.usage.subtree(),
            budget_remaining: budget::remaining(self.id, &self.usage, self.wall.as_deref()),
        }
    }

    fn report(&self, kind: EventKind, detail: EventDetail) {
        self.report_with(kind, detail, None);
    }

    fn report_with(&self, kind: EventKind, detail: EventDetail, idle: Option<Idle>) {
        let terminal = !self.status.is_busy() && self.status != SubagentStatus::Ready;
        self.supervisor.do_send(Report {
            id: self.id,
            kind,
            status: self.current_status(),
            result: if terminal { self.result.clone() } else { None },
            error: if terminal { self.error.clone() } else { None },
            detail,
            idle,
            ticket: self.ticket,
        });
    }

    /// Whether it has nothing to do: no task, no await waiting on one, no
    /// undelivered message, and not being stopped.
    fn is_idle(&self) -> bool {
        self.task.is_none() && !self.terminating && self.awaiters.is_empty() && self.mailbox.is_empty()
    }

    /// Reports a task's end, offering to sleep when it is idle and
    /// `may_sleep`, then answers the awaits on it.
    ///
    /// The report goes first: whoever an answer wakes (a client on another
    /// thread, say) may delegate at once, and the supervisor, which answers
    /// a delegate from its record, must have seen the end by then.
    fn report_task_end(&mut self, kind: EventKind, may_sleep: bool) {
        let awaiters = std::mem::take(&mut self.awaiters);
        // Idle once these are answered, just below.
        let idle = (may_sleep && self.is_idle()).then(|| Idle {
            handled: self.handled,
            tasks_started: self.generation,
            last_task: self.last_task.clone(),
        });
        self.report_with(kind, EventDetail::None, idle);
        self.answer(awaiters);
    }

    fn answer_awaiters(&mut self) {
        let awaiters = std::mem::take(&mut self.awaiters);
        self.answer(awaiters);
    }

    fn answer(&self, awaiters: Vec<AwaitReply>) {
        if awaiters.is_empty() {
            return;
        }
        let record = self.record();
        for awaiter in awaiters {
            awaiter.send(Ok(record.clone()));
        }
    }

    fn finish_terminated(&mut self) {
        self.status = SubagentStatus::Terminated;
        self.error = Some("terminated".into());
        self.log.record(|session| Change::TaskEnded {
            session,
            id: self.id,
            status: SubagentStatus::Terminated,
            result: self.result.clone(),
            error: self.error.clone(),
            held: Held::default(),
            usage: self.usage.own(),
        });
        self.answer_awaiters();
        self.report(EventKind::Terminated, EventDetail::None);
    }
}

impl Actor for SubagentActor {
    type Context = Context<Self>;

    // (Its mailbox is made unbounded before it starts: `Supervisor::start_with_inbox`.)

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        if !self.terminating && !self.asleep {
            // Stopped without being told to (a handler panicked): still tell
            // everyone the truth. The supervisor stops its descendants.
            log::warn!("{} stopped unexpectedly", self.id);
            if let Some(task) = self.task.take() {
                task.abort.abort();
                metrics().task_ended(TaskOutcome::Terminated, task.started.elapsed());
                task.trace_end(self.usage.own(), Some("terminated"));
            }
            self.terminating = true;
            self.finish_terminated();
        }
    }
}

impl Handler<RunTask> for SubagentActor {
    type Result = ();

    fn handle(&mut self, msg: RunTask, ctx: &mut Self::Context) {
        self.handled += 1;
        self.ticket = msg.ticket;
        if self.terminating {
            return msg.reply.send(DelegateResponse { accepted: false, status: SubagentStatus::Terminated });
        }
        if self.task.is_some() {
            return msg.reply.send(DelegateResponse { accepted: false, status: self.current_status() });
        }
        if let Some(resume) = &msg.resume {
            self.adapter.after_restart(resume.checkpoint.as_ref());
        }
        if msg.resume.is_some() && !self.adapter.resumes() {
            // Its adapter cannot pick up where it was: fail it, retryably.
            self.status = SubagentStatus::Failed;
            self.result = None;
            self.error = Some("host_restarted".into());
            self.record_task_end();
            self.report(EventKind::Failed, EventDetail::None);
            return msg.reply.send(DelegateResponse { accepted: false, status: SubagentStatus::Failed });
        }
        self.start_task(msg.task, msg.deadline_cap, msg.parent_span, msg.resume, ctx);
        msg.reply.send(DelegateResponse { accepted: true, status: SubagentStatus::Running });
    }
}

impl Handler<Sleep> for SubagentActor {
    type Result = ();

    fn handle(&mut self, _msg: Sleep, ctx: &mut Self::Context) {
        // The supervisor sends it only when nothing else it sent is on the
        // way, so the actor is still as idle as it reported.
        if !self.is_idle() {
            log::error!("{} was put to sleep while it had work; it stays awake", self.id);
            return;
        }
        self.asleep = true;
        ctx.stop();
    }
}

impl Handler<CurrentTask> for SubagentActor {
    type Result = Option<Arc<TaskDefinition>>;

    fn handle(&mut self, _msg: CurrentTask, _ctx: &mut Self::Context) -> Self::Result {
        self.handled += 1;
        self.last_task.clone()
    }
}

impl Handler<AwaitTask<Supervisor>> for SubagentActor {
    type Result = ();

    fn handle(&mut self, msg: AwaitTask<Supervisor>, _ctx: &mut Self::Context) {
        self.handled += 1;
        let reply = msg.0;
        if self.task.is_none() && !self.terminating {
            return reply.send(Ok(self.record()));
        }
        if self.awaiters.len() >= self.host.limits.max_awaiters_per_subagent {
            metrics().bound_rejected("max_awaiters_per_subagent");
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
        self.handled += 1;
        if self.terminating {
            return Err(HostError::new(ErrorCode::InvalidState, format!("{} is terminated", self.id)));
        }
        let detail = EventDetail::Message { from: msg.from.clone(), kind: msg.payload.kind.clone() };
        if self.mailbox.push(InboxMessage { from: msg.from, payload: msg.payload }).is_err() {
            metrics().bound_rejected("mailbox_capacity");
            return Err(HostError::new(ErrorCode::MailboxFull, format!("the mailbox of {} is full", self.id))
                .with_detail(serde_json::json!({
                    "capacity": self.host.limits.mailbox_capacity,
                    "mailbox_max_bytes": self.host.limits.mailbox_max_bytes,
                })));
        }
        // A message from a journaled frame is stored with the frame marked
        // served, in one change: both are committed, or neither is.
        if self.mailbox.take_changed() || msg.frame.is_some() {
            let served = msg.frame;
            self.log.record(|session| Change::Mailbox {
                session,
                id: self.id,
                messages: self.mailbox.snapshot(),
                served,
            });
        }
        self.report(EventKind::MessageReceived, detail);
        Ok(())
    }
}

impl Handler<CancelQueued> for SubagentActor {
    type Result = ();

    fn handle(&mut self, msg: CancelQueued, _ctx: &mut Self::Context) {
        self.handled += 1;
        if self.task.is_some() || self.terminating {
            return;
        }
        // Its report is about that task.
        self.ticket = msg.0;
        self.status = SubagentStatus::Cancelled;
        self.result = None;
        self.error = Some("cancelled".into());
        self.record_task_end();
        // No sleep offered, as for a cancelled running task (`settle`).
        self.report_task_end(EventKind::Cancelled, false);
    }
}

impl Handler<CancelTask> for SubagentActor {
    type Result = ();

    fn handle(&mut self, msg: CancelTask, _ctx: &mut Self::Context) {
        self.handled += 1;
        let Some(task) = self.task.as_mut() else {
            return msg.0.send(false);
        };
        task.cancel_requested = true;
        task.cancel.cancel();
        // Answered once the task has ended (`settle`).
        task.cancel_replies.push(msg.0);
    }
}

impl Handler<AbortCancelled> for SubagentActor {
    type Result = ();

    fn handle(&mut self, msg: AbortCancelled, _ctx: &mut Self::Context) {
        self.handled += 1;
        // The task that cancel told, not a newer one that a later cancel may be winding up.
        let told = self.task.as_ref().filter(|task| task.cancel_requested && task.ticket == msg.0);
        if let Some(task) = told {
            log::debug!("{} ignored cancel for {:?}; stopping its task", self.id, self.host.limits.cancel_grace());
            // The task's future ends on its next poll, and `settle` answers the cancel.
            task.abort.abort();
        }
    }
}

impl Handler<StopActor> for SubagentActor {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, _msg: StopActor, _ctx: &mut Self::Context) -> Self::Result {
        self.handled += 1;
        if self.terminating {
            return Box::pin(actix::fut::ready(()));
        }
        self.terminating = true;
        let own = self.task.as_mut().map(|task| {
            task.cancel.cancel();
            task.abort.abort();
            metrics().task_ended(TaskOutcome::Terminated, task.started.elapsed());
            task.trace_end(self.usage.own(), Some("terminated"));
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
