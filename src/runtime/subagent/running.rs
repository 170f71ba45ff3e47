//! Running one task inside its subagent's actor: starting it (deadline,
//! abort handle, panic guard) and recording how it ended.

use actix::prelude::*;
use futures_util::FutureExt;
use std::cell::Cell;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::actor::SubagentActor;
use crate::event::{EventDetail, EventKind};
use crate::protocol::wire::*;
use crate::runtime::clock::{self, DeadlineCap, DeadlineClock};
use crate::runtime::host_context::TreeStats;
use crate::runtime::messages::{CancelReply, Resume, Ticket};
use crate::runtime::task::context::TaskContext;
use crate::runtime::task::shared::{TaskCancel, TaskShared};
use crate::runtime::transition::{Journal, Move, TaskSinks};

/// Longest task timeout honoured; larger `timeout_seconds` are clamped so the
/// deadline arithmetic cannot overflow.
const MAX_TIMEOUT: Duration = Duration::from_secs(365 * 24 * 3600);

/// How a task ended, as seen from inside its tokio task.
pub(super) enum Outcome {
    Completed(RawObject),
    Failed(String),
    TimedOut,
    // Dropped at once by terminate, or past the cancel grace period.
    Aborted,
    // The adapter panicked; the text of the panic.
    Panicked(String),
}

/// The task currently running on a subagent.
pub(super) struct RunningTask {
    // Its number among its subagent's tasks: tells a stale completion (of an
    // earlier task) from the current one; `AbortCancelled` names it.
    pub(super) ticket: Ticket,
    // Fires once the task's future is gone and its outcome is recorded.
    // Made on first use: most tasks end without anyone waiting on them this way.
    pub(super) settled: Option<CancellationToken>,
    // Shared with the task: whether it waits (`WAITING`), why it overspent,
    // its cancel signal and its abort flag.
    pub(super) shared: Rc<TaskShared>,
    // Set by cancel: the task ends `CANCELLED` however the adapter winds up.
    pub(super) cancel_requested: bool,
    // The cancels waiting for it to end.
    pub(super) cancel_replies: Vec<CancelReply>,
    // For the timeout error text.
    pub(super) timeout_seconds: u64,
    // When it started (the task duration metric).
    pub(super) started: Instant,
    // Its `invoke_agent` span, and its subagent's own usage when it started
    // (the span reports what this task used).
    pub(super) span: Option<tracing::Span>,
    pub(super) usage_before: Usage,
    // Whether its deadline is a wall-clock budget's (running past it is
    // `budget_exceeded`, not `timeout`).
    pub(super) wall_deadline: bool,
}

impl RunningTask {
    /// Tells the task to stop (the graceful signal the adapter sees).
    pub(super) fn cancel(&self) {
        self.shared.cancel();
    }

    /// Has the task's future dropped at once (terminate, or a cancel past
    /// its grace period): it ends `Aborted` on its next poll, which comes
    /// before this actor's poll is over, as actix polls every future
    /// spawned in an actor's context each time it polls the actor (abort
    /// is called only from this actor's handlers, and from its `stopped`,
    /// where the future is dropped with the actor).
    pub(super) fn abort(&self) {
        self.shared.aborted.set(true);
    }

    /// Fires once the task has ended.
    pub(super) fn settled(&mut self) -> CancellationToken {
        self.settled.get_or_insert_with(CancellationToken::new).clone()
    }

    /// Tells whoever waits that the task has ended: the cancels of it (it
    /// was cancelled, whatever it ended as), and a stop.
    pub(super) fn fire_settled(&mut self) {
        // (Most tasks end uncancelled: no drain of an empty list then.)
        if !self.cancel_replies.is_empty() {
            for reply in self.cancel_replies.drain(..) {
                reply.send(true);
            }
        }
        if let Some(settled) = &self.settled {
            settled.cancel();
        }
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

impl SubagentActor {
    /// Starts `task`, whose start its record has recorded (`span`: its
    /// span, opened then), or which resumes after a restart (`resume`: its
    /// start is recorded here).
    pub(super) fn start_task(
        &mut self,
        task: Arc<TaskDefinition>,
        deadline_cap: Option<DeadlineCap>,
        span: Option<tracing::Span>,
        resume: Option<Resume>,
        ctx: &mut Context<Self>,
    ) {
        // The task's number is its ticket: the supervisor's one count of its
        // subagent's tasks (a resumed task keeps its own).
        let ticket = self.ticket;
        let attempt = resume.as_ref().map_or(1, |resume| resume.attempt);
        self.last_task = Some(task.clone());
        // A new task's start was recorded by the supervisor that sent it
        // (`Supervisor::task_starts`, which cleared the last outcome); a
        // resumed one's is recorded here.
        let span = match &resume {
            None => span,
            Some(_) => {
                self.life.clear_outcome();
                let to = Move { on: EventKind::Resumed, to: SubagentStatus::Running, ticket, error: None };
                let journal = Journal::Started { task: &task, attempt, fresh: false };
                let span = self.life.go_reported(to, journal, TaskSinks::Starts { parent: None, config: &self.config });
                self.report(EventKind::Resumed, None, EventDetail::Resumed { attempt });
                span
            }
        };
        let timeout_seconds = self.config.timeout_seconds;
        let started = Instant::now();
        let mut deadline = started + Duration::from_secs(timeout_seconds).min(MAX_TIMEOUT);
        let (cap, parent_clocks) = match deadline_cap {
            Some(cap) => (Some(cap.at), Some(cap.clocks)),
            None => (None, None),
        };
        if let Some(cap) = cap {
            deadline = deadline.min(cap);
        }
        let wall_now = self.wall.as_ref().map(|wall| wall.deadline());
        let wall_deadline = wall_now.is_some_and(|wall| wall < deadline);
        if let Some(wall) = wall_now.filter(|_| wall_deadline) {
            deadline = wall;
        }
        let shared = Rc::new(TaskShared {
            clock_parent: parent_clocks,
            wall_clock: self.wall.as_ref().map(|wall| wall.clock.clone()),
            ..TaskShared::default()
        });
        // The clock the deadline runs on: the wall budget's when it binds
        // (it is shared by the subtree and already moved on by its holds:
        // its base is what is left of it from here), else the task's own.
        let (deadline_base, deadline_clock) = match self.wall.as_ref().filter(|_| wall_deadline) {
            Some(wall) => (wall.base, DeadlineClock::Wall(wall.clock.clone())),
            None => (deadline, DeadlineClock::Own(shared.clone())),
        };
        let task_ctx = TaskContext {
            subagent_id: self.id,
            parent_id: self.parent_id,
            config: self.config.clone(),
            task,
            memory: self.memory.clone(),
            mailbox: self.mailbox.clone(),
            cancel: TaskCancel::of(&shared),
            deadline,
            host: self.host.clone(),
            shared: shared.clone(),
            steps: Cell::new(resume.as_ref().and_then(|r| r.checkpoint.as_ref()).map_or(0, |c| c.step)),
            supervisor: self.supervisor.clone(),
            log: self.log.clone(),
            memory_owner: self.memory_owner,
            attempt,
            resume_from: resume.and_then(|r| r.checkpoint),
            usage: self.usage.clone(),
            span: span.clone(),
            ticket: self.ticket,
            life: self.life.clone(),
        };
        let adapter = self.adapter.clone();
        let live = LiveTask::new(self.stats.clone());
        let aborting = shared.clone();
        // The task runs inside this actor's context (no tokio task of its own):
        // it is polled with the actor, dropped with it, and its outcome lands
        // in `settle` on this actor. The adapter's future is gone, and the
        // live count down, before `settle` runs: both are locals of the block,
        // dropped as it ends. Boxed as it is made: actix would box it too,
        // but only once wrapped, after moving its several hundred bytes into
        // each wrapper in turn.
        let run = Box::pin(async move {
            let _live = live;
            let timed = clock::run_until(deadline_base, deadline_clock, adapter.run(task_ctx));
            tokio::pin!(timed);
            // Ends at once once aborted (`RunningTask::abort`): a flag the
            // task shares already, where an `Abortable` made and dropped an
            // `Arc` and registered a waker on every poll.
            let guarded = std::future::poll_fn(|cx| {
                if aborting.aborted.get() {
                    return Poll::Ready(None);
                }
                timed.as_mut().poll(cx).map(Some)
            });
            match AssertUnwindSafe(guarded).catch_unwind().await {
                Ok(Some(Ok(Ok(result)))) => Outcome::Completed(result),
                Ok(Some(Ok(Err(err)))) => Outcome::Failed(err.0),
                Ok(Some(Err(_elapsed))) => Outcome::TimedOut,
                Ok(None) => Outcome::Aborted,
                Err(panic) => Outcome::Panicked(panic_text(panic)),
            }
        });
        self.task = Some(RunningTask {
            ticket,
            shared,
            settled: None,
            cancel_requested: false,
            cancel_replies: Vec::new(),
            timeout_seconds,
            started,
            span,
            usage_before: self.usage.own(),
            wall_deadline,
        });
        ctx.spawn(actix::fut::wrap_future(run).map(move |ended, act: &mut Self, _ctx| {
            act.settle(ticket, ended);
        }));
    }

    /// Records how task `ticket` ended; ignores a stale one.
    fn settle(&mut self, ticket: Ticket, ended: Outcome) {
        let Some(mut task) = self.task.take_if(|task| task.ticket == ticket) else {
            return;
        };
        if self.terminating {
            // Terminate records TERMINATED itself once the whole subtree is down.
            task.fire_settled();
            return;
        }
        let overspent = task.shared.overspent.borrow_mut().take();
        let (status, kind, result, error) = match ended {
            // Past a budget: whatever the adapter made of it.
            _ if overspent.is_some() => {
                (SubagentStatus::Failed, EventKind::BudgetExceeded, None, overspent.map(Arc::from))
            }
            Outcome::TimedOut if task.wall_deadline => {
                let text = self.wall.as_ref().map_or_else(|| "budget_exceeded".into(), |wall| wall.exceeded_text());
                (SubagentStatus::Failed, EventKind::BudgetExceeded, None, Some(text.into()))
            }
            outcome if task.cancel_requested => {
                let wound_up = match outcome {
                    // Kept only within the result bound, as any result.
                    Outcome::Completed(result) if result.len() <= self.host.limits.max_result_bytes => Some(result),
                    _ => None,
                };
                (SubagentStatus::Cancelled, EventKind::Cancelled, wound_up, Some("cancelled".into()))
            }
            Outcome::Completed(result) => {
                let (bytes, max) = (result.len(), self.host.limits.max_result_bytes);
                if bytes <= max {
                    (SubagentStatus::Completed, EventKind::Completed, Some(result), None)
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
        let sinks =
            TaskSinks::Ends { started: task.started, span: task.span.as_ref(), usage_before: task.usage_before };
        self.end_task(kind, status, ticket, (result, error.clone()), sinks);
        // A cancelled task's actor offers no sleep: this cancel waits to
        // answer until the actor has seen the task settle, and putting every
        // cancelled actor of a large subtree to sleep would add a third to
        // the cancel's own work (measured on a 10k tree). It keeps its actor
        // until its next task ends.
        self.report_task_end(kind, error, !task.cancel_requested);
        task.fire_settled();
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
