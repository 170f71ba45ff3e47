//! [`GoneSignal`]: fires once an actor has been dropped, for whoever waits
//! for it to be gone (a terminate, a close, the actors falling asleep).
//!
//! Every subagent actor carries one, and almost no one ever waits on it:
//! a `CancellationToken` (a node of a tree of tokens behind a lock, locked
//! again by every clone, drop and check) cost a spawn → delegate → await
//! cycle a few hundred instructions for a one-shot flag. This is a flag
//! and a `Notify`: clones and checks are atomics, and only firing touches
//! the `Notify`. It also carries the mark its supervisor leaves when it
//! puts the actor to sleep by letting go of it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::Notify;

#[derive(Debug, Default)]
struct Inner {
    // Set once, when the actor is dropped.
    fired: AtomicBool,
    // Wakes the waiters registered before it fired.
    fired_now: Notify,
    // Set by the supervisor as it lets go of the actor to put it to sleep:
    // the actor stopping then falls asleep, it does not stop unasked.
    asleep: AtomicBool,
}

/// A one-shot signal shared by clones; it names its methods as
/// `CancellationToken` does, which it stands in for.
#[derive(Debug, Clone, Default)]
pub(crate) struct GoneSignal(Arc<Inner>);

impl GoneSignal {
    /// A signal not fired yet.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Fires it (again: a no-op), waking every waiter.
    pub(crate) fn cancel(&self) {
        if !self.0.fired.swap(true, Ordering::AcqRel) {
            self.0.fired_now.notify_waiters();
        }
    }

    /// Marks the actor as put to sleep by its supervisor letting go of it.
    pub(crate) fn mark_asleep(&self) {
        self.0.asleep.store(true, Ordering::Release);
    }

    /// Whether the actor was put to sleep by its supervisor letting go of it.
    pub(crate) fn is_asleep(&self) -> bool {
        self.0.asleep.load(Ordering::Acquire)
    }

    /// Whether `other` is this signal (a clone of it), not another actor's.
    pub(crate) fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Whether it has fired.
    pub(crate) fn is_cancelled(&self) -> bool {
        self.0.fired.load(Ordering::Acquire)
    }

    /// Resolves once it has fired (at once if it has).
    pub(crate) async fn cancelled(&self) {
        if self.is_cancelled() {
            return;
        }
        let notified = self.0.fired_now.notified();
        tokio::pin!(notified);
        // Registered, then checked again: a firing in between wakes it
        // (`notify_waiters` wakes only waiters registered before it).
        notified.as_mut().enable();
        if self.is_cancelled() {
            return;
        }
        notified.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waiters_before_and_after_the_firing_all_resolve() {
        let gone = GoneSignal::new();
        let early = tokio::spawn({
            let gone = gone.clone();
            async move { gone.cancelled().await }
        });
        tokio::task::yield_now().await;
        assert!(!gone.is_cancelled());
        gone.clone().cancel();
        early.await.unwrap();
        gone.cancelled().await;
        assert!(gone.is_cancelled());
        gone.cancel();
    }
}
