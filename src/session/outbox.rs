//! A session's bounded outbox: every line for its client goes through here.
//!
//! Pushing never blocks (events are pushed from the session's actor thread).
//! When the client does not read and the outbox reaches
//! `limits.outbox_capacity`, the session is marked *overflowed*: it is closed
//! and its subagent tree terminated, as Redis does past its output buffer
//! limit. Lines pushed after that are dropped; the transport closes the
//! connection without waiting for the client.

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
    // Fires when a line did not fit: the client is too slow.
    overflowed: CancellationToken,
}

impl Outbox {
    /// An outbox holding up to `capacity` lines, and its receiving side.
    pub fn new(capacity: usize) -> (Arc<Self>, mpsc::Receiver<String>) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let outbox = Self { tx: Mutex::new(Some(tx)), overflowed: CancellationToken::new() };
        (Arc::new(outbox), rx)
    }

    /// Queues one line; on overflow marks the session for closing.
    pub fn push(&self, line: String) {
        let guard = self.tx.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(tx) = guard.as_ref() {
            if let Err(mpsc::error::TrySendError::Full(_)) = tx.try_send(line) {
                if !self.overflowed.is_cancelled() {
                    log::warn!("client not reading: outbox full, closing its session");
                }
                self.overflowed.cancel();
            }
        }
    }

    /// Fires when the outbox overflowed.
    pub fn overflowed(&self) -> &CancellationToken {
        &self.overflowed
    }

    /// Ends the outbox: the receiver gets what is queued, then the end.
    pub fn close(&self) {
        self.tx.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take();
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
