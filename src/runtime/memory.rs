//! A subagent's memory (its conversation so far) and its mailbox.
//!
//! Both are shared between the actor and the task it runs, so they sit behind
//! a per-subagent lock; no lock is ever shared by two subagents unless their
//! memory scope says they share memory.

use serde_json::Value;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::Notify;

pub(crate) use crate::entries::{InboxMessage, MemoryEntry};
use crate::ids::SubagentId;
use crate::store::Held;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking adapter can poison the lock mid-push; the queue is still
    // well-formed, so keep serving it rather than spreading the panic.
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A bounded list of memory entries (chat-style `{"role", "content"}` objects).
///
/// A memory is mostly kept and written out (to the store, to a command
/// adapter), rarely read, so its entries are kept compact ([`MemoryEntry`]):
/// a `Value` object would cost a B-tree node of over 600 bytes each.
///
/// Cloning shares the same memory (`shared` scope); [`Memory::snapshot_copy`]
/// makes an independent copy (`snapshot` scope).
#[derive(Debug, Clone)]
pub struct Memory {
    inner: Arc<Mutex<Entries>>,
    // Oldest entries are dropped past either bound, so a long-lived subagent
    // cannot grow without bound.
    capacity: usize,
    max_bytes: usize,
}

/// The entries, and the sum of their encoded sizes.
#[derive(Debug, Clone, Default)]
struct Entries {
    list: VecDeque<MemoryEntry>,
    bytes: usize,
}

impl Memory {
    /// An empty memory that keeps at most `capacity` entries.
    pub fn new(capacity: usize) -> Self {
        Self::with_bounds(capacity, usize::MAX)
    }

    /// An empty memory that keeps at most `capacity` entries and `max_bytes`
    /// bytes of them (as encoded JSON).
    pub fn with_bounds(capacity: usize, max_bytes: usize) -> Self {
        Self { inner: Arc::default(), capacity: capacity.max(1), max_bytes }
    }

    /// Appends an entry, dropping the oldest ones to stay within the bounds.
    /// An entry larger than the whole byte bound is not kept.
    pub fn push(&self, entry: impl serde::Serialize) {
        // Encoding a `Value` or a plain struct into a string cannot fail.
        if let Ok(encoded) = serde_json::value::to_raw_value(&entry) {
            self.push_entry(MemoryEntry::Encoded(encoded));
        }
    }

    /// Appends the chat line `{"content": content, "role": role}`, as
    /// [`Memory::push`] does.
    pub fn say(&self, role: &'static str, content: &str) {
        self.push_entry(MemoryEntry::Said { role, content: content.into() });
    }

    /// [`Memory::say`] of a string the caller made and has no more use
    /// for: it is kept as it is, not copied.
    pub(crate) fn say_string(&self, role: &'static str, content: String) {
        self.push_entry(MemoryEntry::Said { role, content: content.into_boxed_str() });
    }

    fn push_entry(&self, entry: MemoryEntry) {
        let size = entry.bytes();
        if size > self.max_bytes {
            return;
        }
        let mut entries = lock(&self.inner);
        while entries.list.len() >= self.capacity || entries.bytes + size > self.max_bytes {
            let Some(dropped) = entries.list.pop_front() else { break };
            entries.bytes -= dropped.bytes();
        }
        entries.list.push_back(entry);
        entries.bytes += size;
    }

    /// The entries as kept, oldest first.
    pub fn entries(&self) -> Vec<MemoryEntry> {
        lock(&self.inner).list.iter().cloned().collect()
    }

    /// The entries parsed, oldest first, for an adapter that reads them.
    pub fn values(&self) -> Vec<Value> {
        lock(&self.inner).list.iter().map(MemoryEntry::to_value).collect()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        lock(&self.inner).list.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the entries take, as encoded JSON.
    pub fn bytes(&self) -> usize {
        lock(&self.inner).bytes
    }

    /// An independent copy of the memory as it is now.
    pub fn snapshot_copy(&self) -> Self {
        let entries = lock(&self.inner).clone();
        Self { inner: Arc::new(Mutex::new(entries)), capacity: self.capacity, max_bytes: self.max_bytes }
    }
}

/// A bounded mailbox: pushes fail when full, one task reads at a time.
#[derive(Debug)]
pub struct Mailbox {
    queue: Mutex<Queue>,
    capacity: usize,
    max_bytes: usize,
    // Wakes a task waiting in `recv`; a push with no waiter leaves a permit.
    arrived: Notify,
    // Set by every push and take: the stored copy is out of date.
    changed: AtomicBool,
}

/// The queued messages with their sizes, and the sum of those.
#[derive(Debug, Default)]
struct Queue {
    list: VecDeque<(InboxMessage, usize)>,
    bytes: usize,
}

impl Queue {
    fn pop(&mut self) -> Option<InboxMessage> {
        let (message, size) = self.list.pop_front()?;
        self.bytes -= size;
        Some(message)
    }
}

impl Mailbox {
    /// An empty mailbox holding at most `capacity` messages.
    pub fn new(capacity: usize) -> Self {
        Self::with_bounds(capacity, usize::MAX)
    }

    /// An empty mailbox holding at most `capacity` messages and `max_bytes`
    /// bytes of them (sender id plus encoded payload).
    pub fn with_bounds(capacity: usize, max_bytes: usize) -> Self {
        Self { queue: Mutex::default(), capacity, max_bytes, arrived: Notify::new(), changed: AtomicBool::new(false) }
    }

    /// Queues a message; gives it back when the mailbox is full (by count or
    /// by bytes).
    pub fn push(&self, message: InboxMessage) -> Result<(), InboxMessage> {
        let size = message.size();
        {
            let mut queue = lock(&self.queue);
            if queue.list.len() >= self.capacity || queue.bytes.saturating_add(size) > self.max_bytes {
                return Err(message);
            }
            queue.list.push_back((message, size));
            queue.bytes += size;
        }
        self.changed.store(true, Ordering::Release);
        self.arrived.notify_one();
        Ok(())
    }

    /// Takes the oldest message, if any.
    pub fn try_recv(&self) -> Option<InboxMessage> {
        let message = lock(&self.queue).pop()?;
        self.changed.store(true, Ordering::Release);
        Some(message)
    }

    /// Whether messages arrived or were taken since the last call (the
    /// stored copy needs writing).
    pub fn take_changed(&self) -> bool {
        self.changed.swap(false, Ordering::AcqRel)
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

    /// A copy of the queued messages, oldest first (for the store).
    pub fn snapshot(&self) -> Vec<InboxMessage> {
        lock(&self.queue).list.iter().map(|(message, _)| message.clone()).collect()
    }

    /// Takes every queued message.
    pub fn drain(&self) -> Vec<InboxMessage> {
        self.changed.store(true, Ordering::Release);
        let mut queue = lock(&self.queue);
        queue.bytes = 0;
        queue.list.drain(..).map(|(message, _)| message).collect()
    }

    /// Messages waiting.
    pub fn len(&self) -> usize {
        lock(&self.queue).list.len()
    }

    /// Whether no message is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a subagent holds now, for the change that records a checkpoint or a
/// task's end: the memory it uses (under its owner) and, when they changed,
/// its undelivered messages. One change carries them, so they are committed
/// together with the step they belong to.
pub(crate) fn held_now(memory_owner: SubagentId, memory: &Memory, mailbox: &Mailbox) -> Held {
    Held { memory: Some((memory_owner, memory.entries())), mailbox: mailbox.take_changed().then(|| mailbox.snapshot()) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::wire::SubagentMessagePayload;
    use serde_json::json;

    #[test]
    fn memory_drops_its_oldest_entries_past_its_byte_bound() {
        let memory = Memory::with_bounds(100, 50);
        for n in 0..10 {
            memory.push(json!(format!("entry {n:02}")));
        }
        assert!(memory.bytes() <= 50, "{} bytes", memory.bytes());
        assert_eq!(memory.values().last(), Some(&json!("entry 09")));
        assert_eq!(
            memory.values().first(),
            Some(&json!("entry 05")),
            "five entries of 10 bytes fit; oldest dropped first"
        );
        memory.push(json!("x".repeat(60)));
        assert_eq!(memory.values().last(), Some(&json!("entry 09")), "an entry over the whole bound is not kept");
    }

    #[test]
    fn a_chat_line_is_written_and_read_as_the_object_it_stands_for() {
        let memory = Memory::new(10);
        memory.say("user", "say \"hi\"");
        memory.push(json!({"role": "tool", "content": [1]}));
        let written = serde_json::to_string(&memory.entries()).unwrap();
        assert_eq!(written, r#"[{"content":"say \"hi\"","role":"user"},{"content":[1],"role":"tool"}]"#);
        assert_eq!(
            memory.values(),
            vec![json!({"role": "user", "content": "say \"hi\""}), json!({"role": "tool", "content": [1]})]
        );
        assert_eq!(memory.bytes(), written.len() - "[,]".len(), "bytes counted for {written}");
    }

    #[test]
    fn the_mailbox_counts_bytes_and_taking_messages_frees_them() {
        let mailbox = Mailbox::with_bounds(10, 40);
        let message = || InboxMessage {
            from: "a".into(),
            payload: SubagentMessagePayload { kind: "t".into(), content: json!("0123456789") },
        };
        assert!(mailbox.push(message()).is_ok());
        assert!(mailbox.push(message()).is_err(), "two do not fit in 40 bytes");
        assert!(mailbox.try_recv().is_some());
        assert!(mailbox.push(message()).is_ok(), "taken: room again");
        assert_eq!(mailbox.drain().len(), 1);
        assert!(mailbox.push(message()).is_ok(), "drained: room again");
    }
}
