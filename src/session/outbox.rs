//! A session's bounded outbox: every line for its client goes through here.
//!
//! Pushing never blocks (events are pushed from the session's actor thread).
//! The outbox is bounded twice: by `limits.outbox_capacity` lines and by
//! `limits.outbox_max_bytes` bytes. A line's bytes count from its push until
//! the transport takes it to write ([`OutboxReceiver`]), so a client that
//! does not read cannot make the host hold more than the byte bound however
//! large each reply is. When the client does not read and either bound is
//! reached, the session is marked *overflowed*: it is closed and its subagent
//! tree terminated, as Redis does past its output buffer limit. Lines pushed
//! after that are dropped; the transport closes the connection without
//! waiting for the client. When the transport has stopped taking lines
//! altogether (its writer failed: the client went away), the outbox is
//! marked overflowed too, so the session ends, but also *gone*
//! ([`Outbox::client_gone`]): that is an ordinary disconnect, not a slow
//! client.
//!
//! A single line longer than the byte bound is still queued when nothing else
//! is, so one large reply never ends a session whose client keeps up.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::event::{Event, EventSink};
use crate::protocol::encode;

/// The sending side of a session's outbox.
#[derive(Debug)]
pub struct Outbox {
    // `None` once the session has ended, so the receiver sees the end.
    tx: Mutex<Option<mpsc::Sender<String>>>,
    // Bytes pushed and not yet taken by the receiver (shared with it).
    queued: Arc<AtomicUsize>,
    // The byte bound (`limits.outbox_max_bytes`).
    max_bytes: usize,
    // Fires when a line could not be queued: the client is too slow, or
    // gone.
    overflowed: CancellationToken,
    // Set when the receiving side was dropped (the transport's writer ended):
    // the client is gone, not slow.
    gone: AtomicBool,
}

/// The receiving side of a session's outbox: the transport's writer takes
/// lines from it, which releases their bytes from the byte bound.
#[derive(Debug)]
pub struct OutboxReceiver {
    // The lines, in order.
    rx: mpsc::Receiver<String>,
    // Bytes queued, released as lines are taken.
    queued: Arc<AtomicUsize>,
}

impl Outbox {
    /// An outbox holding up to `capacity` lines and `max_bytes` bytes, and
    /// its receiving side.
    pub fn new(capacity: usize, max_bytes: usize) -> (Arc<Self>, OutboxReceiver) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let queued = Arc::new(AtomicUsize::new(0));
        let outbox = Self {
            tx: Mutex::new(Some(tx)),
            queued: queued.clone(),
            max_bytes: max_bytes.max(1),
            overflowed: CancellationToken::new(),
            gone: AtomicBool::new(false),
        };
        (Arc::new(outbox), OutboxReceiver { rx, queued })
    }

    /// Queues one line; on overflow (lines or bytes), or when the receiving
    /// side is gone, marks the session for closing and drops the line.
    pub fn push(&self, line: String) {
        let guard = self.tx.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let Some(tx) = guard.as_ref() else { return };
        if self.overflowed.is_cancelled() {
            return;
        }
        let len = line.len();
        let before = self.queued.fetch_add(len, Ordering::AcqRel);
        let fits = before == 0 || before.saturating_add(len) <= self.max_bytes;
        let sent = match fits {
            true => tx.try_send(line),
            false => Err(mpsc::error::TrySendError::Full(line)),
        };
        if let Err(err) = sent {
            self.queued.fetch_sub(len, Ordering::AcqRel);
            if let mpsc::error::TrySendError::Closed(_) = err {
                self.gone.store(true, Ordering::Release);
            }
            self.overflowed.cancel();
        }
    }

    /// Whether the outbox overflowed only because its receiving side was
    /// dropped (the client went away) rather than filled up.
    pub fn client_gone(&self) -> bool {
        self.gone.load(Ordering::Acquire)
    }

    /// Bytes queued and not yet taken by the transport.
    pub fn queued_bytes(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    /// Fires when the outbox overflowed (see [`Outbox::client_gone`] for
    /// why).
    pub fn overflowed(&self) -> &CancellationToken {
        &self.overflowed
    }

    /// Ends the outbox: the receiver gets what is queued, then the end.
    pub fn close(&self) {
        self.tx.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take();
    }
}

impl OutboxReceiver {
    fn taken(&self, line: String) -> String {
        self.queued.fetch_sub(line.len(), Ordering::AcqRel);
        line
    }

    /// The next line; `None` once the session has ended and all was taken.
    pub async fn recv(&mut self) -> Option<String> {
        let line = self.rx.recv().await?;
        Some(self.taken(line))
    }

    /// The next line if one is queued now.
    pub fn try_recv(&mut self) -> Result<String, mpsc::error::TryRecvError> {
        let line = self.rx.try_recv()?;
        Ok(self.taken(line))
    }

    /// [`OutboxReceiver::recv`] for a plain thread (stdio's writer).
    pub fn blocking_recv(&mut self) -> Option<String> {
        let line = self.rx.blocking_recv()?;
        Some(self.taken(line))
    }
}

/// The session's [`EventSink`]: events become `SUBAGENT_EVENT` lines.
#[derive(Debug, Clone)]
pub struct OutboxSink(pub Arc<Outbox>);

impl EventSink for OutboxSink {
    fn emit(&self, event: Event) {
        self.0.push(encode::event(&event));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_byte_bound_overflows_and_taking_a_line_releases_its_bytes() {
        let (outbox, mut rx) = Outbox::new(100, 10);
        outbox.push("123456".into());
        outbox.push("7890".into());
        assert_eq!(outbox.queued_bytes(), 10);
        assert_eq!(rx.try_recv().unwrap(), "123456");
        assert_eq!(outbox.queued_bytes(), 4);
        outbox.push("abcdef".into());
        assert!(!outbox.overflowed().is_cancelled(), "taking released the bytes");
        outbox.push("x".into());
        assert!(outbox.overflowed().is_cancelled(), "11 bytes do not fit in 10");
        assert_eq!(outbox.queued_bytes(), 10);
    }

    #[test]
    fn a_dropped_receiver_is_a_client_gone_not_a_full_outbox() {
        let (outbox, rx) = Outbox::new(100, 100);
        outbox.push("a".into());
        assert!(!outbox.client_gone());
        drop(rx);
        outbox.push("b".into());
        assert!(outbox.overflowed().is_cancelled(), "the session ends");
        assert!(outbox.client_gone(), "because the client is gone");

        let (outbox, _rx) = Outbox::new(1, 100);
        outbox.push("a".into());
        outbox.push("b".into());
        assert!(outbox.overflowed().is_cancelled());
        assert!(!outbox.client_gone(), "a full outbox is a slow client");
    }

    #[test]
    fn one_line_longer_than_the_bound_fits_an_empty_outbox() {
        let (outbox, mut rx) = Outbox::new(100, 4);
        outbox.push("a long line".into());
        assert!(!outbox.overflowed().is_cancelled());
        assert_eq!(rx.try_recv().unwrap(), "a long line");
        assert_eq!(outbox.queued_bytes(), 0);
    }
}
