//! The actor messages between the session handle, the supervisor and the
//! subagent actors. Requests from clients arrive at the supervisor; the
//! supervisor routes them to the target `SubagentActor` by one index lookup.

use actix::prelude::*;
use std::sync::{Arc, Weak};

use crate::error::HostError;
use crate::event::{EventDetail, EventKind};
use crate::ids::SubagentId;
use crate::protocol::wire::*;
use crate::runtime::supervisor::waits::WaitToken;

/// The mailbox capacity that never makes a sender wait: actix's largest
/// (`usize::MAX >> 2`; a larger one overflows its sender count, which a debug
/// build catches as a panic).
pub(crate) const UNBOUNDED_MAILBOX: usize = usize::MAX >> 2;

// ---- client requests, handled by the supervisor -------------------------------

/// Spawn a subagent.
#[derive(Message)]
#[rtype(result = "Result<SpawnResponse, HostError>")]
pub(crate) struct Spawn(pub SpawnRequest);

/// Spawn a child for a running task under an idempotency key: when the
/// parent already has a child spawned with that key (the task was resumed
/// after a restart and runs the same step again), that child is the
/// answer, with `true`.
#[derive(Message)]
#[rtype(result = "Result<(SpawnResponse, bool), HostError>")]
pub(crate) struct SpawnKeyed {
    pub request: SpawnRequest,
    pub key: Arc<str>,
    // Look for the key among all the session's subagents, not only the
    // parent's children (a client's request replayed after a restart).
    pub anywhere: bool,
}

/// Delegate a task. `deadline_cap` is the delegating task's own deadline when
/// a subagent's task delegates to its child, so deadlines flow down the tree.
#[derive(Message)]
#[rtype(result = "Result<DelegateResponse, HostError>")]
pub(crate) struct Delegate {
    pub id: SubagentId,
    pub task: TaskDefinition,
    pub deadline_cap: Option<crate::runtime::clock::DeadlineCap>,
    // The span of the task that delegates it (its task's span's parent).
    pub parent_span: Option<tracing::Span>,
}

/// The subagent's queued task (its [`Ticket`]) was cancelled before it
/// started: it ends `CANCELLED` (unless a task runs, or it is being
/// terminated).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct CancelQueued(pub Ticket);

/// The number of tasks the supervisor has recorded for a subagent (queued
/// or started), the newest task's own number. A task's start is recorded
/// before its actor hears of it, so a report its actor sent before that
/// describes a state the record has moved past: every report carries the
/// ticket of the newest task its actor had seen, and the supervisor keeps
/// the record as it is for a report with an older one (its event still goes
/// out).
pub(crate) type Ticket = u64;

/// A task recorded token usage: listed rows must be built again.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct UsageChanged;

/// Wait for a subagent's task to end.
#[derive(Message)]
#[rtype(result = "Result<AwaitResponse, HostError>")]
pub(crate) struct Await(pub SubagentId);

/// A task is about to wait for subagents (an await, a merge): refused with
/// `invalid_state` when the wait could never end (see the supervisor's
/// `waits`), else recorded until [`EndWait`].
#[derive(Message)]
#[rtype(result = "Result<WaitToken, HostError>")]
pub(crate) struct BeginWait {
    /// The waiting task's subagent.
    pub waiter: SubagentId,
    /// What it waits for.
    pub targets: Vec<SubagentId>,
}

/// A wait recorded by [`BeginWait`] ended.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct EndWait(pub WaitToken);

/// Put a message in a subagent's mailbox.
#[derive(Message)]
#[rtype(result = "Result<MessageResponse, HostError>")]
pub(crate) struct SendMessage {
    pub from: String,
    pub to: SubagentId,
    pub payload: SubagentMessagePayload,
    // The journaled request frame it came in, if any: marked served in the
    // same change that stores the message, so a replay never delivers it
    // twice.
    pub frame: Option<u64>,
}

/// List the session's subagents.
#[derive(Message)]
#[rtype(result = "ListResponse")]
pub(crate) struct List;

/// Cancel a subagent's task and its descendants' tasks.
#[derive(Message)]
#[rtype(result = "Result<Vec<SubagentId>, HostError>")]
pub(crate) struct Cancel(pub SubagentId);

/// Terminate a subagent and its subtree.
#[derive(Message)]
#[rtype(result = "Result<Vec<SubagentId>, HostError>")]
pub(crate) struct Terminate(pub SubagentId);

/// Merge results.
#[derive(Message)]
#[rtype(result = "Result<MergeResponse, HostError>")]
pub(crate) struct Merge(pub MergeRequest);

/// The ids of a subagent's children, oldest first.
#[derive(Message)]
#[rtype(result = "Result<Vec<SubagentId>, HostError>")]
pub(crate) struct ChildrenOf(pub SubagentId);

/// Terminate every subagent of the session and stop the supervisor. Replies
/// with every id that was stopped once all their actors are gone.
#[derive(Message)]
#[rtype(result = "Vec<SubagentId>")]
pub(crate) struct Close;

/// Counted status of the session: (busy subagent ids).
#[derive(Message)]
#[rtype(result = "Vec<SubagentId>")]
pub(crate) struct BusyIds;

/// A subagent's ancestors and itself, root first (empty when unknown).
#[derive(Message)]
#[rtype(result = "Vec<SubagentId>")]
pub(crate) struct PathOf(pub SubagentId);

// ---- reports from subagent actors to the supervisor ---------------------------

/// A subagent's status changed, or something worth an event happened to it.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Report {
    pub id: SubagentId,
    pub kind: EventKind,
    pub status: SubagentStatus,
    // Its event's error and payload (the supervisor tells it, `Life::told`).
    pub error: Option<Arc<str>>,
    pub detail: EventDetail,
    // Set when its task ended and it has nothing left to do: it may be put
    // to sleep.
    pub idle: Option<Idle>,
    // The newest task its actor had seen when it sent this.
    pub ticket: Ticket,
}

/// `M` with its own reply channel, sent without waiting for its answer
/// (`Tree::ask`): the caller holds only the channel's receiving end, where
/// a `send` future holds room for the message and a timeout as well, and
/// is moved whole at every `.await` on the way.
pub(crate) struct Asked<M: Message>(pub M, pub tokio::sync::oneshot::Sender<M::Result>);

impl<M: Message> Message for Asked<M> {
    type Result = ();
}

/// An idle actor's offer to sleep, made again after it answered an await
/// from its own record: that await was on its way when its task's end was
/// reported, so the offer made then could not be taken (the supervisor
/// takes one only when nothing it sent is on the way). Carries no event.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct OfferSleep {
    pub id: SubagentId,
    pub idle: Idle,
    // Which actor offers: the record's may be a newer one by the time the
    // offer arrives.
    pub gone: crate::runtime::gone::GoneSignal,
}

/// What an actor that reports itself idle hands back, so that its record
/// can stand in for it until its next task or message.
pub(crate) struct Idle {
    // Messages from the supervisor it has handled: the supervisor puts it
    // to sleep only if it sent no more than these.
    pub handled: u64,
    // The task it last ran (the operator's view).
    pub last_task: Option<Arc<TaskDefinition>>,
}

// ---- supervisor (or a parent) to a subagent actor ----------------------------

/// Start a task on this subagent; the answer goes straight to the client's
/// reply channel (no forwarding task in the supervisor).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct RunTask {
    pub task: Arc<TaskDefinition>,
    pub deadline_cap: Option<crate::runtime::clock::DeadlineCap>,
    // The task's span, opened as its start was recorded (`task_starts`); a
    // resumed task's opens as it resumes.
    pub span: Option<tracing::Span>,
    pub reply: DelegateReply,
    // Set when the task ran before the host restarted: it resumes.
    pub resume: Option<Resume>,
    // This task's number in its subagent's record.
    pub ticket: Ticket,
}

/// Stop: the subagent's task ended and it is idle; its record stands in for
/// it, and the next task or message starts a new actor. Sent only once the
/// supervisor knows nothing else it sent is still on the way.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Sleep;

/// The task a subagent runs or last ran (the operator's view).
#[derive(Message)]
#[rtype(result = "Option<Arc<TaskDefinition>>")]
pub(crate) struct CurrentTask;

/// Rebuild a fresh supervisor's tree from a stored session; answers how
/// many tasks resume.
#[derive(Message)]
#[rtype(result = "Result<usize, HostError>")]
pub(crate) struct Restore(pub Vec<crate::store::StoredSubagent>);

/// Where a task that was running before a restart picks up.
#[derive(Debug, Clone)]
pub(crate) struct Resume {
    pub attempt: u32,
    pub checkpoint: Option<crate::store::Checkpoint>,
}

/// Answer `reply` when the current task ends (at once when there is none).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct AwaitTask(pub AwaitReply);

/// A delegate's reply channel, carried to the subagent actor. Dropped
/// unanswered (the actor stopped before handling it), it answers "not
/// accepted, TERMINATED".
pub(crate) struct DelegateReply(pub Option<tokio::sync::oneshot::Sender<Result<DelegateResponse, HostError>>>);

impl DelegateReply {
    pub(crate) fn send(mut self, answer: DelegateResponse) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(Ok(answer));
        }
    }
}

impl Drop for DelegateReply {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(Ok(DelegateResponse { accepted: false, status: SubagentStatus::Terminated }));
        }
    }
}

/// An await's reply channel, carried to the subagent actor and kept there
/// until the task ends. Dropped unanswered (the actor stopped before handling
/// it), it asks the supervisor to answer from its record, which the actor's
/// final report reached first.
pub(crate) struct AwaitReply {
    pub tx: Option<tokio::sync::oneshot::Sender<Result<AwaitResponse, HostError>>>,
    pub id: SubagentId,
    /// The supervisor's answers from its records, while it lives (it holds
    /// the one strong count): named by the message it takes, not by its
    /// type, so that these messages stand apart from the actors that send
    /// them.
    pub supervisor: Weak<Recipient<AnswerFromRecord>>,
}

impl AwaitReply {
    pub(crate) fn send(mut self, answer: Result<AwaitResponse, HostError>) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(answer);
        }
    }
}

impl Drop for AwaitReply {
    fn drop(&mut self) {
        let Some(tx) = self.tx.take() else { return };
        match self.supervisor.upgrade() {
            Some(supervisor) => supervisor.do_send(AnswerFromRecord { id: self.id, tx }),
            None => {
                let _ = tx.send(Err(HostError::runtime("the session is closed")));
            }
        }
    }
}

/// Answer an await from the supervisor's record (its actor has gone).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct AnswerFromRecord {
    pub id: SubagentId,
    pub tx: tokio::sync::oneshot::Sender<Result<AwaitResponse, HostError>>,
}

/// Queue a mailbox message.
#[derive(Message)]
#[rtype(result = "Result<(), HostError>")]
pub(crate) struct Deliver {
    pub from: String,
    pub payload: SubagentMessagePayload,
    // See `SendMessage::frame`.
    pub frame: Option<u64>,
}

/// Cancel this subagent's own task: its signal fires, and `0` answers
/// whether there was one once it has ended. The canceller keeps the grace
/// period (one timer for a whole subtree, not one per actor) and stops what
/// is still running past it (`AbortCancelled`).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct CancelTask(pub CancelReply);

/// Where the actors of one cancel answer: how many have yet to, and whose
/// task it stopped, by their place in the cancel's list. One shared tally,
/// not a reply channel per actor joined into one future: that join was a
/// seventh of a large cancel's work.
pub(crate) struct CancelAnswers {
    tally: std::sync::Mutex<Tally>,
    // Woken once the last actor has answered.
    all_in: tokio::sync::Notify,
}

struct Tally {
    waiting: usize,
    stopped: Vec<bool>,
}

impl CancelAnswers {
    /// A tally for `count` actors.
    pub(crate) fn new(count: usize) -> Arc<Self> {
        let tally = Tally { waiting: count, stopped: vec![false; count] };
        Arc::new(Self { tally: std::sync::Mutex::new(tally), all_in: tokio::sync::Notify::new() })
    }

    /// The reply of the actor at place `at` in the list.
    pub(crate) fn reply(self: &Arc<Self>, at: usize) -> CancelReply {
        CancelReply { answers: Some(Arc::clone(self)), at }
    }

    /// Resolves once every actor has answered, with whether each one's task
    /// was stopped, in list order.
    pub(crate) async fn all_answered(&self) -> Vec<bool> {
        loop {
            {
                let mut tally = self.lock();
                if tally.waiting == 0 {
                    return std::mem::take(&mut tally.stopped);
                }
            }
            // (`notify_one` keeps its wake for a waiter still on its way here.)
            self.all_in.notified().await;
        }
    }

    fn answer(&self, at: usize, stopped: bool) {
        let mut tally = self.lock();
        if let Some(place) = tally.stopped.get_mut(at) {
            *place = stopped;
        }
        tally.waiting = tally.waiting.saturating_sub(1);
        if tally.waiting == 0 {
            self.all_in.notify_one();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tally> {
        // Nothing panics while holding it; a poisoned tally is still whole.
        self.tally.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// One actor's answer to a cancel, kept by the actor until the cancelled
/// task has ended. Dropped unanswered (the actor stopped first), it answers
/// that it stopped nothing.
pub(crate) struct CancelReply {
    answers: Option<Arc<CancelAnswers>>,
    at: usize,
}

impl CancelReply {
    /// Answers whether a task was cancelled.
    pub(crate) fn send(mut self, cancelled: bool) {
        if let Some(answers) = self.answers.take() {
            answers.answer(self.at, cancelled);
        }
    }
}

impl Drop for CancelReply {
    fn drop(&mut self) {
        if let Some(answers) = self.answers.take() {
            answers.answer(self.at, false);
        }
    }
}

/// The cancel grace period is over: the task with this ticket, if its cancel
/// is still pending, is stopped at once (a task started since is left alone,
/// even when a later cancel is winding it up: that cancel has its own grace).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct AbortCancelled(pub Ticket);

/// Terminate this subagent: its task is dropped at once, awaiters get
/// `TERMINATED`, and the actor stops. Replies once the task is gone; the
/// actor is dropped right after.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct StopActor;
