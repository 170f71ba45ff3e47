//! One transition for every sink. A subagent's status is kept once, in its
//! [`Life`], which the supervisor's record of it and its actor share (both
//! run on the session's arbiter thread, so a `Cell` holds it). Every change
//! of it goes through [`Life::go`]: it checks the lifecycle table
//! ([`lifecycle::next`]) and takes the change to every sink, in this one
//! place:
//!
//! | sink | what reaches it |
//! |---|---|
//! | gauges | `subagentd_subagents{status}` moves from the old status to the new |
//! | journal | the task's place in the queue, its start, or its end ([`Journal`]) |
//! | task metrics | a task started, or one ended and how long it ran ([`TaskSinks`]) |
//! | trace | the task's `invoke_agent` span opens, or records how it ended |
//! | event | the session's event sink: at once for a move the supervisor makes; for one its actor or task makes, as the supervisor takes its report ([`Life::go_reported`], [`Life::told`]) |
//!
//! A move about an older task than the subagent's newest (its ticket) is
//! stale: what it says happened still reaches the journal, the task's
//! metrics and span, and the event, but the status stays the newer task's.
//! A refused move (a bug: the table has no such move) leaves the status and
//! the gauges as they are and is counted ([`lifecycle::refusals`]); the rest
//! still says what happened. Events that move nothing (progress, a message,
//! a merge …) go to the event sink alone, through [`Life::tell`].

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use tokio::time::Instant;

use tracing::Span;

use crate::event::{Event, EventDetail, EventKind, EventSink, TaskUsage};
use crate::ids::SubagentId;
use crate::metrics::{metrics, TaskOutcome};
use crate::protocol::wire::{RawObject, SubagentConfig, SubagentStatus, TaskDefinition, Usage};
use crate::runtime::lifecycle;
use crate::runtime::memory::{held_now, Mailbox, Memory};
use crate::runtime::messages::Ticket;
use crate::runtime::people::desk::AskKind;
use crate::runtime::trace;
use crate::runtime::usage::UsageMeter;
use crate::store::{Change, Held, SessionLog};

/// The sinks of one session: its events and its journal.
pub(crate) struct SessionSinks {
    /// Where the session's events go.
    pub(crate) events: Arc<dyn EventSink>,
    /// Whether `events` takes any: none is built for a sink that takes none.
    pub(crate) takes: bool,
    /// The session's journal.
    pub(crate) log: Arc<SessionLog>,
}

impl SessionSinks {
    /// The sinks of a session whose events go to `events` and changes to `log`.
    pub(crate) fn new(events: Arc<dyn EventSink>, log: Arc<SessionLog>) -> Rc<Self> {
        Rc::new(Self { takes: events.takes_events(), events, log })
    }
}

/// One subagent's status, and who it is to the sinks. Its record and its
/// actor hold the same one.
pub(crate) struct Life {
    id: SubagentId,
    status: Cell<SubagentStatus>,
    // Its newest task's number (`Ticket`), drawn by the record: a move
    // about an older task leaves the status as it is.
    ticket: Cell<Ticket>,
    // What its last task ended with (a result, an error), and what its
    // `WAITING` task waits for when it is a person: kept here once, so that
    // its record, its actor and whoever an event wakes read the same.
    outcome: RefCell<(Option<RawObject>, Option<Arc<str>>)>,
    waiting_for: Cell<Option<AskKind>>,
    // Set while its subtree retires (a finished face task leaving the
    // tree): its last moves are journaled, but no event tells of them.
    quiet: Cell<bool>,
    /// Its parent (a subagent id, or the client agent's for a top-level one).
    pub(crate) parent_agent_id: Option<Arc<str>>,
    /// The root agent of its tree.
    pub(crate) root_agent_id: Option<Arc<str>>,
    /// Its depth in the tree.
    pub(crate) depth: u32,
    /// Its token counts, linked to its parent's.
    pub(crate) usage: Arc<UsageMeter>,
    sinks: Rc<SessionSinks>,
}

/// Who a new [`Life`] is: the fields its events carry.
pub(crate) struct Identity {
    /// Its parent agent.
    pub(crate) parent_agent_id: Option<Arc<str>>,
    /// Its tree's root agent.
    pub(crate) root_agent_id: Option<Arc<str>>,
    /// Its depth.
    pub(crate) depth: u32,
    /// Its token counts.
    pub(crate) usage: Arc<UsageMeter>,
}

/// A status change asked for: event `on`, which reports status `to`, about
/// the task numbered `ticket`.
pub(crate) struct Move {
    /// The event.
    pub(crate) on: EventKind,
    /// The status it reports.
    pub(crate) to: SubagentStatus,
    /// The task it is about (`TERMINATED` is never stale).
    pub(crate) ticket: Ticket,
    /// The error its event carries.
    pub(crate) error: Option<Arc<str>>,
}

/// What the journal stores of a move. Read only when the session is kept
/// (nothing is cloned or read for one that is not).
pub(crate) enum Journal<'a> {
    /// Nothing (a task going from running to waiting and back).
    Nothing,
    /// A task waits in the queue, at `position`.
    Queued { task: &'a Arc<TaskDefinition>, position: u64 },
    /// A task starts: attempt `attempt`; `fresh` when no row of it is stored
    /// yet (see `Change::TaskStarted`).
    Started { task: &'a Arc<TaskDefinition>, attempt: u32, fresh: bool },
    /// A task ended with `result` (kept as its outcome, with the move's
    /// error, unless the move is stale). `held`: whose memory it holds, the memory
    /// and its mailbox, read as the end is stored (none: it holds nothing
    /// any more, as a terminated subagent).
    Ended { result: Option<RawObject>, held: Option<(SubagentId, &'a Memory, &'a Mailbox)> },
}

/// What the task metrics and the trace take of a move.
pub(crate) enum TaskSinks<'a> {
    /// No task starts or ends with it (it was queued, never ran, or ran
    /// before a restart).
    Untouched,
    /// A task starts: counted, and its span opens under `parent`.
    Starts { parent: Option<&'a Span>, config: &'a SubagentConfig },
    /// The task that started at `started` ends: counted with how long it
    /// ran; its span records what it used since `usage_before`.
    Ends { started: Instant, span: Option<&'a Span>, usage_before: Usage },
}

impl Life {
    /// Subagent `id`'s life, at `status` with tasks up to `ticket` drawn,
    /// its moves going to `sinks`. Counted in the gauges.
    pub(crate) fn new(
        id: SubagentId,
        status: SubagentStatus,
        ticket: Ticket,
        who: Identity,
        sinks: Rc<SessionSinks>,
    ) -> Rc<Self> {
        metrics().subagent_added(status);
        Rc::new(Self {
            id,
            status: Cell::new(status),
            ticket: Cell::new(ticket),
            outcome: RefCell::new((None, None)),
            waiting_for: Cell::new(None),
            quiet: Cell::new(false),
            parent_agent_id: who.parent_agent_id,
            root_agent_id: who.root_agent_id,
            depth: who.depth,
            usage: who.usage,
            sinks,
        })
    }

    /// Its status now.
    #[inline]
    pub(crate) fn status(&self) -> SubagentStatus {
        self.status.get()
    }

    /// Its newest task's number.
    #[inline]
    pub(crate) fn ticket(&self) -> Ticket {
        self.ticket.get()
    }

    /// Draws the number of a new task, queued or starting now.
    pub(crate) fn new_ticket(&self) -> Ticket {
        let next = self.ticket.get() + 1;
        self.ticket.set(next);
        next
    }

    /// Its last task's result.
    pub(crate) fn result(&self) -> Option<RawObject> {
        self.outcome.borrow().0.clone()
    }

    /// Its last task's error.
    pub(crate) fn error(&self) -> Option<Arc<str>> {
        self.outcome.borrow().1.clone()
    }

    /// Sets what its last task ended with (a restored record has it from
    /// the store).
    pub(crate) fn set_outcome(&self, result: Option<RawObject>, error: Option<Arc<str>>) {
        *self.outcome.borrow_mut() = (result, error);
    }

    /// Forgets what its last task ended with: a task starts. (Most starts
    /// are a new subagent's first, with nothing to forget.)
    #[inline]
    pub(crate) fn clear_outcome(&self) {
        let mut outcome = self.outcome.borrow_mut();
        if outcome.0.is_some() || outcome.1.is_some() {
            *outcome = (None, None);
        }
    }

    /// What its task waits for, while it is `WAITING` for a person.
    pub(crate) fn waiting_for(&self) -> Option<AskKind> {
        self.waiting_for.get().filter(|_| self.status.get() == SubagentStatus::Waiting)
    }

    /// Its task waits for a person now (`kind`), as its event tells.
    pub(crate) fn wait_for(&self, kind: AskKind) {
        self.waiting_for.set(Some(kind));
    }

    /// Its subtree retires: no event tells of it from now on.
    pub(crate) fn hush(&self) {
        self.quiet.set(true);
    }

    /// Whether its subtree retires (see [`Life::hush`]).
    pub(crate) fn is_hushed(&self) -> bool {
        self.quiet.get()
    }

    /// The one transition: moves the status as the lifecycle table allows
    /// and takes the move to every sink (the module's table). The span of
    /// a task that starts. Inlined: each caller's journal and task sinks are
    /// known where it calls, and what does not apply is not built. (A
    /// move's event carries no payload but a resumed task's attempt, read
    /// from its journal entry.)
    #[inline(always)]
    pub(crate) fn go(&self, mv: Move, journal: Journal<'_>, task: TaskSinks<'_>) -> Option<Span> {
        self.go_telling(mv, journal, task, true)
    }

    /// [`Life::go`] for a move its actor or task makes: its event is told
    /// by the supervisor as it takes the actor's report ([`Life::told`]),
    /// in the order of the reports, as a task's notes are. So the event
    /// comes after what the task records right after it (a step's
    /// checkpoint), and its line waits for that change's commit: a client
    /// never sees a step that a restart would do again.
    #[inline(always)]
    pub(crate) fn go_reported(&self, mv: Move, journal: Journal<'_>, task: TaskSinks<'_>) -> Option<Span> {
        self.go_telling(mv, journal, task, false)
    }

    #[inline(always)]
    fn go_telling(&self, mv: Move, journal: Journal<'_>, task: TaskSinks<'_>, tell_now: bool) -> Option<Span> {
        let Move { on, to, ticket, error } = mv;
        let attempt = match journal {
            Journal::Started { attempt, .. } if on == EventKind::Resumed => Some(attempt),
            _ => None,
        };
        let from = self.status.get();
        let stale = ticket < self.ticket.get() && on != EventKind::Terminated;
        let moved = !stale
            && match lifecycle::next(from, on, to) {
                Ok(status) => {
                    metrics().subagent_moved(from, status);
                    self.status.set(status);
                    if status != SubagentStatus::Waiting {
                        self.waiting_for.set(None);
                    }
                    tally::reached(self, on, tally::Sink::Gauge);
                    true
                }
                Err(refused) => {
                    lifecycle::refused(&self.id, refused);
                    false
                }
            };
        // A stale or refused move's own status is what the journal says
        // that task ended as; the record stays the newer task's.
        let ended_as = if moved { self.status.get() } else { to };
        let ended = self.journal(on, ticket, ended_as, &error, journal);
        // What it ended with is its record's before anyone is told.
        if let (Some(result), false) = (ended, stale) {
            *self.outcome.borrow_mut() = (result, error.clone());
        }
        let span = self.task_sinks(on, error.as_deref(), task);
        if tell_now && self.sinks.takes && !self.quiet.get() {
            let detail = attempt.map_or(EventDetail::None, |attempt| EventDetail::Resumed { attempt });
            self.emit(on, self.status.get(), error, detail);
        }
        span
    }

    /// Emits the event of a move its actor reported (`status`: the status
    /// it moved to; `None` for a note, which moves nothing).
    #[inline(always)]
    pub(crate) fn told(
        &self,
        kind: EventKind,
        status: Option<SubagentStatus>,
        error: Option<Arc<str>>,
        detail: EventDetail,
    ) {
        if self.sinks.takes && !self.quiet.get() {
            self.emit(kind, status.unwrap_or(self.status.get()), error, detail);
        }
    }

    /// Emits event `kind`, which moves nothing (or has moved already).
    /// Inlined: for a sink that takes no events, nothing is made or moved.
    #[inline(always)]
    pub(crate) fn tell(&self, kind: EventKind, error: Option<Arc<str>>, detail: EventDetail) {
        if self.sinks.takes && !self.quiet.get() {
            self.emit(kind, self.status.get(), error, detail);
        }
    }

    #[inline(never)]
    fn emit(&self, kind: EventKind, status: SubagentStatus, error: Option<Arc<str>>, detail: EventDetail) {
        self.sinks.events.emit(Event {
            subagent_id: self.id,
            kind,
            status,
            parent_agent_id: self.parent_agent_id.clone(),
            root_agent_id: self.root_agent_id.clone(),
            depth: self.depth,
            error,
            detail,
            usage: kind.ends_task().then(|| TaskUsage { own: self.usage.own(), subtree: self.usage.subtree() }),
        });
        tally::reached(self, kind, tally::Sink::Event);
    }

    // The journal's part of a move; a task's end gives back its result.
    #[inline(always)]
    fn journal(
        &self,
        on: EventKind,
        task_no: Ticket,
        status: SubagentStatus,
        error: &Option<Arc<str>>,
        journal: Journal,
    ) -> Option<Option<RawObject>> {
        let id = self.id;
        let mut ended = None;
        match journal {
            Journal::Nothing => return None,
            Journal::Queued { task, position } => {
                self.sinks.log.record(|session| Change::TaskQueued { session, id, task: task.clone(), position });
            }
            Journal::Started { task, attempt, fresh } => {
                self.sinks.log.record(|session| Change::TaskStarted {
                    session,
                    id,
                    task: task.clone(),
                    task_no,
                    attempt,
                    fresh,
                });
            }
            Journal::Ended { result, held } => {
                self.sinks.log.record(|session| Change::TaskEnded {
                    session,
                    id,
                    status,
                    result: result.clone(),
                    error: error.clone(),
                    held: held.map_or_else(Held::default, |(owner, memory, mailbox)| held_now(owner, memory, mailbox)),
                    usage: self.usage.own(),
                });
                ended = Some(result);
            }
        }
        tally::reached(self, on, tally::Sink::Journal);
        ended
    }

    // The task metrics' and the trace's part of a move: the span of a task
    // that starts.
    #[inline(always)]
    fn task_sinks(&self, on: EventKind, error: Option<&str>, task: TaskSinks<'_>) -> Option<Span> {
        match task {
            TaskSinks::Untouched => None,
            TaskSinks::Starts { parent, config } => {
                metrics().task_started();
                tally::reached(self, on, tally::Sink::TaskMetrics);
                let span = trace::invoke_agent(parent, self.sinks.log.id(), self.id, config);
                tally::reached(self, on, tally::Sink::Trace);
                span
            }
            TaskSinks::Ends { started, span, usage_before } => {
                metrics().task_ended(outcome_of(on), started.elapsed());
                tally::reached(self, on, tally::Sink::TaskMetrics);
                if let Some(span) = span {
                    let now = self.usage.own();
                    let used = Usage {
                        input_tokens: now.input_tokens.saturating_sub(usage_before.input_tokens),
                        output_tokens: now.output_tokens.saturating_sub(usage_before.output_tokens),
                        ..Usage::default()
                    };
                    trace::task_ended(span, used, error);
                }
                tally::reached(self, on, tally::Sink::Trace);
                None
            }
        }
    }
}

impl Drop for Life {
    fn drop(&mut self) {
        metrics().subagent_removed(self.status.get());
    }
}

/// How a task that ended on event `on` is counted.
fn outcome_of(on: EventKind) -> TaskOutcome {
    match on {
        EventKind::Completed => TaskOutcome::Completed,
        EventKind::Cancelled => TaskOutcome::Cancelled,
        EventKind::Timeout => TaskOutcome::Timeout,
        EventKind::Terminated => TaskOutcome::Terminated,
        _ => TaskOutcome::Failed,
    }
}

pub(crate) mod tally;

#[cfg(test)]
mod tests;
