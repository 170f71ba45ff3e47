//! What a running task and its subagent's actor share ([`TaskShared`]),
//! and the task's cancel signal read from it ([`TaskCancel`]). Apart from
//! the [`TaskContext`](super::context::TaskContext), which names the
//! supervisor: the clocks and the actor reach this without reaching the
//! actors (no import circle through `task/context.rs`).

use std::cell::{Cell, OnceCell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::protocol::wire::WaitingFor;
use crate::runtime::clock::{PauseClock, TaskClocks};

/// What a running task and its subagent's actor share.
#[derive(Debug, Default)]
pub(crate) struct TaskShared {
    /// Set while the task waits (`WAITING`).
    pub waiting: Cell<bool>,
    /// Set while it waits for a person: for what.
    pub person: Cell<Option<WaitingFor>>,
    /// Set when the task spent past a budget: the error it ends with.
    pub overspent: RefCell<Option<String>>,
    /// Its clocks, stopped while it (or a task below it) waits for a
    /// person: made on first use (a person asked, or a child's deadline
    /// capped), so a task that does neither pays nothing for them.
    pub clocks: OnceCell<Arc<TaskClocks>>,
    /// What its clocks link to: the clocks of the task that delegated it,
    /// and its wall-clock budget's.
    pub clock_parent: Option<Arc<TaskClocks>>,
    pub wall_clock: Option<Arc<PauseClock>>,
    /// Set once the task is told to stop (cancel, terminate, a budget
    /// spent): what [`TaskCancel`] reads.
    pub cancelled: Cell<bool>,
    /// What a wait on [`TaskCancel`] registers with: made on first use, so
    /// that a task nobody waits on to stop pays nothing for it.
    pub cancel_token: OnceCell<CancellationToken>,
    /// Set when the task's future is to be dropped at once (terminate, a
    /// cancel past its grace period): it ends `Aborted` on its next poll.
    pub aborted: Cell<bool>,
}

impl TaskShared {
    /// Its clocks (made now if need be).
    pub(crate) fn clocks(&self) -> &Arc<TaskClocks> {
        self.clocks.get_or_init(|| {
            Arc::new(TaskClocks {
                own: PauseClock::default(),
                wall: self.wall_clock.clone(),
                parent: self.clock_parent.clone(),
            })
        })
    }

    /// Tells the task to stop (again: a no-op).
    pub(crate) fn cancel(&self) {
        self.cancelled.set(true);
        if let Some(token) = self.cancel_token.get() {
            token.cancel();
        }
    }

    /// The token a wait on the cancel signal registers with (made now,
    /// cancelled already if the signal has fired).
    fn cancel_token(&self) -> &CancellationToken {
        self.cancel_token.get_or_init(|| {
            let token = CancellationToken::new();
            if self.cancelled.get() {
                token.cancel();
            }
            token
        })
    }

    /// How long its own clock has been held (zero while it has none).
    pub(crate) fn own_held_for(&self) -> (std::time::Duration, bool) {
        self.clocks.get().map_or((std::time::Duration::ZERO, false), |clocks| clocks.own.held_for())
    }
}

/// A running task's cancel signal ([`TaskContext::cancel`](super::context::TaskContext::cancel)): it fires on
/// cancel (graceful: wind up within the grace period), on terminate, and
/// when the task spends past a budget. Its methods are named as
/// `CancellationToken`'s; [`TaskCancel::token`] is one, for code that
/// takes a token (or runs on another thread).
///
/// A flag until something waits on it: a `CancellationToken` (a node of a
/// tree of tokens behind a lock) made for every task cost each task's start
/// and end a few hundred instructions, and most tasks end without anyone
/// waiting for a cancel.
#[derive(Debug, Clone)]
pub struct TaskCancel(Rc<TaskShared>);

impl TaskCancel {
    /// The cancel signal of the task that shares `shared` with its actor.
    pub(crate) fn of(shared: &Rc<TaskShared>) -> Self {
        Self(shared.clone())
    }

    /// Whether it has fired.
    pub fn is_cancelled(&self) -> bool {
        self.0.cancelled.get() || self.0.cancel_token.get().is_some_and(CancellationToken::is_cancelled)
    }

    /// Fires it (again: a no-op).
    pub fn cancel(&self) {
        self.0.cancel();
    }

    /// Resolves once it has fired (at once if it has).
    pub fn cancelled(&self) -> WaitForCancellationFuture<'_> {
        self.0.cancel_token().cancelled()
    }

    /// The signal as a `CancellationToken` (made on first use): cancelling
    /// either fires both.
    pub fn token(&self) -> &CancellationToken {
        self.0.cancel_token()
    }
}
