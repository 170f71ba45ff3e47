//! [`Signalled`]: a state behind a lock, with a condition variable to wait
//! on it, shared by the store writer and a SQLite helper thread (the
//! checkpoint thread, the WAL sync thread).

use std::sync::{Condvar, Mutex, MutexGuard};

/// A state behind a lock, and a condition variable to wait for it.
#[derive(Debug, Default)]
pub(super) struct Signalled<T> {
    state: Mutex<T>,
    changed: Condvar,
}

impl<T> Signalled<T> {
    /// Locks the state. A panic elsewhere while it was held (a release
    /// closure, say) leaves counters and lists as consistent as before, so
    /// a poisoned lock is used as it is.
    pub(super) fn lock(&self) -> MutexGuard<'_, T> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Waits, with the lock held by `guard`, while `waiting` holds.
    pub(super) fn wait_while<'a>(
        &self,
        guard: MutexGuard<'a, T>,
        waiting: impl FnMut(&mut T) -> bool,
    ) -> MutexGuard<'a, T> {
        self.changed.wait_while(guard, waiting).unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Wakes the thread waiting for the state.
    pub(super) fn notify(&self) {
        self.changed.notify_one();
    }
}
