//! The subagent actor's state: what it is made from, what it holds, and
//! how it reports its status and a task's end to the supervisor.

use super::running::RunningTask;

use actix::prelude::*;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::event::{EventDetail, EventKind};
use crate::ids::SubagentId;
use crate::protocol::wire::*;
use crate::runtime::budget::{self, WallBudget};
use crate::runtime::gone::GoneSignal;
use crate::runtime::host_context::{HostContext, TreeStats};
use crate::runtime::lifecycle;
use crate::runtime::memory::{held_now, InboxMessage, Mailbox, Memory};
use crate::runtime::messages::*;
use crate::runtime::supervisor::root::{AwaitReply, Supervisor};
use crate::runtime::task::adapter::AgentAdapter;
use crate::runtime::usage::UsageMeter;
use crate::store::{Change, Held, SessionLog};

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
    pub supervisor: Arc<Addr<Supervisor>>,
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
    pub(super) id: SubagentId,
    pub(super) parent_id: Option<SubagentId>,
    pub(super) host: Arc<HostContext>,
    // Where status reports go; the supervisor outlives every subagent.
    pub(super) supervisor: Arc<Addr<Supervisor>>,
    pub(super) stats: Arc<TreeStats>,
    pub(super) config: Arc<SubagentConfig>,
    pub(super) adapter: Arc<dyn AgentAdapter>,
    pub(super) memory: Memory,
    pub(super) mailbox: Arc<Mailbox>,
    pub(super) status: SubagentStatus,
    // The last task's result and error, answered to awaits after it ends.
    pub(super) result: Option<RawObject>,
    pub(super) error: Option<Arc<str>>,
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
            status: seed.status,
            result: seed.result,
            error: seed.error,
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

    /// Records how its task ended, with its memory and mailbox as they are
    /// now, before anyone is told.
    pub(super) fn record_task_end(&self) {
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

    /// Moves its status on event `on` as the lifecycle table allows (the
    /// one check the supervisor's record makes too); a move it refuses
    /// leaves the status as it is, and is logged.
    #[inline]
    pub(super) fn apply(&mut self, on: EventKind, to: SubagentStatus) {
        match lifecycle::next(self.status, on, to) {
            Ok(status) => self.status = status,
            Err(refused) => lifecycle::refused(&self.id, refused),
        }
    }

    /// The status as it is now: a running task may be waiting (its flag is
    /// set from the task, on this actor's thread).
    pub(super) fn current_status(&self) -> SubagentStatus {
        match &self.task {
            Some(task) if task.shared.waiting.get() && self.status.is_busy() => SubagentStatus::Waiting,
            _ => self.status,
        }
    }

    pub(super) fn record(&self) -> AwaitResponse {
        AwaitResponse {
            subagent_id: self.id,
            status: self.current_status(),
            result: self.result.clone(),
            error: self.error.clone(),
            usage: self.usage.own(),
            subtree_usage: self.usage.subtree(),
            budget_remaining: budget::remaining(self.id, &self.usage, self.wall.as_deref()),
            waiting_for: match &self.task {
                Some(task) if task.shared.waiting.get() => task.shared.person.get(),
                _ => None,
            },
        }
    }

    pub(super) fn report(&self, kind: EventKind, detail: EventDetail) {
        self.report_with(kind, detail, None);
    }

    pub(super) fn report_with(&self, kind: EventKind, detail: EventDetail, idle: Option<Idle>) {
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
    pub(super) fn report_task_end(&mut self, kind: EventKind, may_sleep: bool) {
        let awaiters = std::mem::take(&mut self.awaiters);
        // Idle once these are answered, just below.
        let idle =
            (may_sleep && self.is_idle()).then(|| Idle { handled: self.handled, last_task: self.last_task.clone() });
        self.offered_sleep = idle.is_some();
        self.report_with(kind, EventDetail::None, idle);
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

    pub(super) fn finish_terminated(&mut self) {
        self.apply(EventKind::Terminated, SubagentStatus::Terminated);
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
