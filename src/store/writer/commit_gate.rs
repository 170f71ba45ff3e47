//! [`CommitGate`]: holds a session's journaled lines back until they are
//! committed, for async transports and for the stdio writer's plain thread.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use tokio::sync::Notify;

/// Releases a session's journaled lines once they are committed.
#[derive(Debug, Default)]
pub struct CommitGate {
    committed: AtomicU64,
    notify: Notify,
    // For the stdio writer, a plain thread.
    blocking: (Mutex<()>, Condvar),
}

impl CommitGate {
    /// Everything up to `seq` is committed.
    pub fn advance(&self, seq: u64) {
        self.committed.fetch_max(seq, Ordering::AcqRel);
        self.notify.notify_waiters();
        let _guard = self.blocking.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        self.blocking.1.notify_all();
    }

    /// Whether `seq` is committed.
    pub fn is_committed(&self, seq: u64) -> bool {
        self.committed.load(Ordering::Acquire) >= seq
    }

    /// Waits until `seq` is committed.
    pub async fn wait(&self, seq: u64) {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_committed(seq) {
                return;
            }
            notified.await;
        }
    }

    /// [`CommitGate::wait`] for a plain thread.
    pub fn wait_blocking(&self, seq: u64) {
        let mut guard = self.blocking.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        while !self.is_committed(seq) {
            guard = self.blocking.1.wait(guard).unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }
}
