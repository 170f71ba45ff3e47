//! A subagent's memory (its conversation so far) and its mailbox.
//!
//! Both are shared between the actor and the task it runs, so they sit behind
//! a per-subagent lock; no lock is ever shared by two subagents unless their
//! memory scope says they share memory.

use serde_json::Value;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::Notify;

use crate::protocol::wire::SubagentMessagePayload;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking adapter can poison the lock mid-push; the queue is still
    // well-formed, so keep serving it rather than spreading the panic.
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A bounded list of memory entries (chat-style `{"role", "content"}` objects).
///
/// Cloning shares the same memory (`shared` scope); [`Memory::snapshot_copy`]
/// makes an independent copy (`snapshot` scope).
#[derive(Debug, Clone)]
pub struct Memory {
    inner: Arc<Mutex<VecDeque<Value>>>,
    // Oldest entries are dropped past this, so a long-lived subagent cannot
    // grow without bound.
    capacity: usize,
}

impl Memory {
    /// An empty memory that keeps at most `capacity` entries.
    pub fn new(capacity: usize) -> Self {
        Self { inner: Arc::new(Mutex::new(VecDeque::new())), capacity: capacity.max(1) }
    }

    /// Appends an entry, dropping the oldest when full.
    pub fn push(&self, entry: Value) {
        let mut entries = lock(&self.inner);
        if entries.len() == self.capacity {
            entries.pop_front();
        }
        entries.push_back(entry);
    }

    /// The entries, oldest first.
    pub fn entries(&self) -> Vec<Value> {
        lock(&self.inner).iter().cloned().collect()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        lock(&self.inner).len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// An independent copy of the memory as it is now.
    pub fn snapshot_copy(&self) -> Self {
        let entries = lock(&self.inner).clone();
        Self { inner: Arc::new(Mutex::new(entries)), capacity: self.capacity }
    }

    /// Whether two handles share the same memory.
    pub fn shares_with(&self, other: &Memory) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

/// A message waiting in a subagent's mailbox.
#[derive(Debug, Clone, PartialEq)]
pub struct InboxMessage {
    /// Who sent it (a subagent id, or the client agent's id).
    pub from: String,
    /// What was sent.
    pub payload: SubagentMessagePayload,
}

/// A bounded mailbox: pushes fail when full, one task reads at a time.
#[derive(Debug)]
pub struct Mailbox {
    queue: Mutex<VecDeque<InboxMessage>>,
    capacity: usize,
    // Wakes a task waiting in `recv`; a push with no waiter leaves a permit.
    arrived: Notify,
}

impl Mailbox {
    /// An empty mailbox holding at most `capacity` messages.
    pub fn new(capacity: usize) -> Self {
        Self { queue: Mutex::new(VecDeque::new()), capacity, arrived: Notify::new() }
    }

    /// Queues a message; gives it back when the mailbox is full.
    pub fn push(&self, message: InboxMessage) -> Result<(), InboxMessage> {
        {
            let mut queue = lock(&self.queue);
            if queue.len() >= self.capacity {
                return Err(message);
            }
            queue.push_back(message);
        }
        self.arrived.notify_one();
        Ok(())
    }

    /// Takes the oldest message, if any.
    pub fn try_recv(&self) -> Option<InboxMessage> {
        lock(&self.queue).pop_front()
    }

    /// Waits for the next message.
    pub async fn recv(&self) -> InboxMessage {
        loop {
            if let Some(message) = self.try_recv() {
                return message;
            }
            self.arrived.notified().await;
        }
    }

    /// Takes every queued message.
    pub fn drain(&self) -> Vec<InboxMessage> {
        lock(&self.queue).drain(..).collect()
    }

    /// Messages waiting.
    pub fn len(&self) -> usize {
        lock(&self.queue).len()
    }

    /// Whether no message is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
