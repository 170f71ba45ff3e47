//! The subagent actor's state: what it is made from, what it holds, and
//! how it reports its status and a task's end to the supervisor.

use super::running::RunningTask;

use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::event::{EventDetail, EventKind};
use crate::ids::SubagentId;
use crate::protocol::wire::*;
use crate::runtime::budget::{self, WallBudget};
use crate::runtime::gone::GoneSignal;
use crate::runtime::host_context::{HostContext, TreeStats};
use crate::runtime::memory::{InboxMessage, Mailbox, Memory};
use crate::runtime::messages::*;
use crate::runtime::task::adapter::AgentAdapter;
use crate::runtime::transition::{Journal, Life, Move, TaskSinks};
use crate::runtime::tree_link::TreeLink;
use crate::runtime::usage::UsageMeter;
use crate::store::SessionLog;

/// Counts this actor as live until it is dropped, then fires `gone`.
struct AliveGuard {
    stats: Arc<TreeStats>,
    gone: GoneSignal,
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
    pub supervisor: TreeLink,
    pub stats: Arc<TreeStats>,
    pub config: Arc<SubagentConfig>,
    pub adapter: Arc<dyn AgentAdapter>,
    pub memory: Memory,
    pub gone: GoneSignal,
    // Where its state changes are recorded.
    pub log: Arc<SessionLog>,
    // Whose memory `memory` is (itself, or a `shared` ancestor).
    pub memory_owner: SubagentId,
    // Messages already in its mailbox (a restored subagent's undelivered ones).
    pub inbox: Vec<InboxMessage>,
    // Its status (its record's, shared), last result and error so far (a
    // restored subagent has had tasks before its actor started).
    pub life: Rc<Life>,
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
    pub(super) id: SubagentId,
    pub(super) parent_id: Option<SubagentId>,
    pub(super) host: Arc<HostContext>,
    // Where status reports go; the supervisor outlives every subagent.
    pub(super) supervisor: TreeLink,
    pub(super) stats: Arc<TreeStats>,
    pub(super) config: Arc<SubagentConfig>,
    pub(super) adapter: Arc<dyn AgentAdapter>,
    pub(super) memory: Memory,
    pub(super) mailbox: Arc<Mailbox>,
    // Its status, kept once (its record holds the same): every change of it
    // is `Life::go`.
    pub(super) life: Rc<Life>,
    pub(super) task: Option<RunningTask>,
    // The task it runs or last ran (the operator's view shows it).
    pub(super) last_task: Option<Arc<TaskDefinition>>,
    pub(super) awaiters: Vec<AwaitReply>,
    // Set when terminate starts; the actor takes no new work after it.
    pub(super) terminating: bool,
    // Messages handled from the supervisor (see `Idle`).
    pub(super) handled: u64,
    // Set when it stops to sleep (not terminated: its record stands in).
    pub(super) asleep: bool,
    // Set when its last task's end offered to sleep: an await answered
    // from its record after that offers again (`OfferSleep`).
    pub(super) offered_sleep: bool,
    // The newest task of its record it has seen; its reports carry it.
    pub(super) ticket: Ticket,
    pub(super) log: Arc<SessionLog>,
    pub(super) memory_owner: SubagentId,
    pub(super) usage: Arc<UsageMeter>,
    pub(super) wall: Option<Arc<WallBudget>>,
    // Its count among the live actors, and what tells it is gone.
    alive: AliveGuard,
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
            alive: AliveGuard { stats: seed.stats.clone(), gone: seed.gone },
            host: seed.host,
            supervisor: seed.supervisor,
            stats: seed.stats,
            config: seed.config,
            adapter: seed.adapter,
            memory: seed.memory,
            mailbox,
            life: seed.life,
            task: None,
            last_task: seed.last_task,
            awaiters: Vec::new(),
            terminating: false,
            handled: 0,
            asleep: false,
            offered_sleep: false,
            ticket: seed.ticket,
            log: seed.log,
            memory_owner: seed.memory_owner,
            usage: seed.usage,
            wall: seed.wall,
        }
    }

    /// Moves its status as task `ticket` ended, on event `on` to `to`, with
    /// `error`: journaled with `result` and its memory and mailbox as they
    /// are now, before anyone is told (`Life::go`). `task`: the task's
    /// metrics and span, when one ran.
    pub(super) fn end_task(
        &self,
        on: EventKind,
        to: SubagentStatus,
        ticket: Ticket,
        outcome: (Option<RawObject>, Option<Arc<str>>),
        task: TaskSinks<'_>,
    ) {
        let (result, error) = outcome;
        log::debug!(
            "session {} subagent {} ({}): task ended {}{}",
            self.log.id(),
            self.id,
            self.config.name,
            to.as_str(),
            error.as_deref().map(|error| format!(": {error}")).unwrap_or_default()
        );
        let held = Some((self.memory_owner, &self.memory, &*self.mailbox));
        let to = Move { on, to, ticket, error };
        self.life.go_reported(to, Journal::Ended { result, held }, task);
    }

    /// The status as it is now: a running task may be waiting (its flag is
    /// set from the task, on this actor's thread).
    pub(super) fn current_status(&self) -> SubagentStatus {
        let status = self.life.status();
        match &self.task {
            Some(task) if task.shared.waiting.get() && status.is_busy() => SubagentStatus::Waiting,
            _ => status,
        }
    }

    pub(super) fn record(&self) -> AwaitResponse {
        AwaitResponse {
            subagent_id: self.id,
            status: self.current_status(),
            result: self.life.result(),
            error: self.life.error(),
            usage: self.usage.own(),
            subtree_usage: self.usage.subtree(),
            budget_remaining: budget::remaining(self.id, &self.usage, self.wall.as_deref()),
            waiting_for: match &self.task {
                Some(task) if task.shared.waiting.get() => task.shared.person.get(),
                _ => None,
            },
        }
    }

    /// Tells the supervisor what moved (`Life::go_reported`) or happened,
    /// with the event's `error` and `detail`: it tells the event, and its
    /// record's running slot, budget and sleep follow.
    pub(super) fn report(&self, kind: EventKind, error: Option<Arc<str>>, detail: EventDetail) {
        self.report_with(kind, error, detail, None);
    }

    pub(super) fn report_with(
        &self,
        kind: EventKind,
        error: Option<Arc<str>>,
        detail: EventDetail,
        idle: Option<Idle>,
    ) {
        let status = self.current_status();
        self.supervisor.do_send(Report { id: self.id, kind, status, error, detail, idle, ticket: self.ticket });
    }

    /// Whether it has nothing to do: no task, no await waiting on one, no
    /// undelivered message, and not being stopped.
    pub(super) fn is_idle(&self) -> bool {
        self.task.is_none() && !self.terminating && self.awaiters.is_empty() && self.mailbox.is_empty()
    }

    /// Whether it stops because it was put to sleep (by `Sleep`, or by its
    /// supervisor letting go of its only address).
    pub(super) fn falls_asleep(&self) -> bool {
        if self.asleep {
            return true;
        }
        let let_go = self.alive.gone.is_asleep();
        // It lets go only when nothing it sent is on the way, so the actor
        // is still as idle as it reported.
        if let_go && !self.is_idle() {
            log::error!("{} was put to sleep while it had work", self.id);
        }
        let_go
    }

    /// Reports a task's end, offering to sleep when it is idle and
    /// `may_sleep`, then answers the awaits on it.
    ///
    /// The report goes first: whoever an answer wakes (a client on another
    /// thread, say) may delegate at once, and the supervisor, which answers
    /// a delegate from its record, must have seen the end by then.
    pub(super) fn report_task_end(&mut self, kind: EventKind, error: Option<Arc<str>>, may_sleep: bool) {
        let awaiters = std::mem::take(&mut self.awaiters);
        // Idle once these are answered, just below.
        let idle =
            (may_sleep && self.is_idle()).then(|| Idle { handled: self.handled, last_task: self.last_task.clone() });
        self.offered_sleep = idle.is_some();
        self.report_with(kind, error, EventDetail::None, idle);
        self.answer(awaiters);
    }

    /// Offers to sleep again (see `offered_sleep`), when it is idle.
    pub(super) fn offer_sleep_again(&self) {
        if self.offered_sleep && self.is_idle() {
            let idle = Idle { handled: self.handled, last_task: self.last_task.clone() };
            self.supervisor.do_send(OfferSleep { id: self.id, idle, gone: self.alive.gone.clone() });
        }
    }

    pub(super) fn answer_awaiters(&mut self) {
        let awaiters = std::mem::take(&mut self.awaiters);
        self.answer(awaiters);
    }

    pub(super) fn answer(&self, awaiters: Vec<AwaitReply>) {
        if awaiters.is_empty() {
            return;
        }
        let record = self.record();
        for awaiter in awaiters {
            awaiter.send(Ok(record.clone()));
        }
    }

    /// Ends as `TERMINATED`, once its task (`ended`: its metrics and span,
    /// if one ran) is gone: journaled, told, its awaits answered.
    pub(super) fn finish_terminated(&mut self, ended: Option<EndedTask>) {
        let error: Arc<str> = Arc::from("terminated");
        // A member of a retiring subtree (a finished face task leaving the
        // tree) stops without a move: its record, shared, is answered as it
        // ended until it goes with the subtree's records (and from the
        // retired task after).
        if self.life.is_hushed() {
            self.answer_awaiters();
            return self.report(EventKind::Terminated, Some(error), EventDetail::None);
        }
        let task = match &ended {
            Some(ended) => ended.sinks(),
            None => TaskSinks::Untouched,
        };
        let to = Move {
            on: EventKind::Terminated,
            to: SubagentStatus::Terminated,
            ticket: self.ticket,
            error: Some(error.clone()),
        };
        self.life.go_reported(to, Journal::Ended { result: self.life.result(), held: None }, task);
        self.answer_awaiters();
        self.report(EventKind::Terminated, Some(error), EventDetail::None);
    }
}

/// What a stopped task leaves for its end's metrics and span: taken as it
/// is stopped, used once it is gone.
pub(crate) struct EndedTask {
    started: tokio::time::Instant,
    span: Option<tracing::Span>,
    usage_before: Usage,
}

impl EndedTask {
    /// What `task` leaves.
    pub(super) fn of(task: &RunningTask) -> Self {
        Self { started: task.started, span: task.span.clone(), usage_before: task.usage_before }
    }

    fn sinks(&self) -> TaskSinks<'_> {
        TaskSinks::Ends { started: self.started, span: self.span.as_ref(), usage_before: self.usage_before }
    }
}
