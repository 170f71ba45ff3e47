//! The ends of a session's outbox other than its sender: the transport's
//! writer ([`OutboxReceiver`], whose taking a line releases its bytes and
//! waits for its journal entry's commit), and the runtime's events
//! ([`OutboxSink`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::mpsc;

use super::{Outbox, Queued, Shared};
use crate::admin::Tap;
use crate::event::{Event, EventSink};

/// The receiving side of a session's outbox: the transport's writer takes
/// lines from it, which releases their bytes from the byte bound.
#[derive(Debug)]
pub struct OutboxReceiver {
    // The lines, in order.
    rx: mpsc::Receiver<Queued>,
    shared: Arc<Shared>,
    // A line taken from `rx` that waits for its commit.
    pending: Option<Queued>,
}

impl OutboxReceiver {
    pub(crate) fn new(rx: mpsc::Receiver<Queued>, shared: Arc<Shared>) -> Self {
        Self { rx, shared, pending: None }
    }

    fn taken(&self, line: String) -> String {
        self.shared.mark_progress();
        self.shared.release(line.len());
        line
    }

    /// The next line; `None` once the session has ended and all was taken.
    pub async fn recv(&mut self) -> Option<String> {
        self.recv_numbered().await.map(|(_, line)| line)
    }

    /// The next line with its sequence number (SSE `id:`). Cancel-safe: a
    /// line waiting for its commit stays first in line.
    pub async fn recv_numbered(&mut self) -> Option<(u64, String)> {
        if self.pending.is_none() {
            self.pending = Some(self.rx.recv().await?);
        }
        if let Some(line) = self.pending.as_ref().and_then(|queued| queued.waits_for) {
            self.shared.gate.wait(line).await;
        }
        let queued = self.pending.take()?;
        Some((queued.seq, self.taken(queued.line)))
    }

    /// The next line if one is queued (and committed) now.
    pub fn try_recv(&mut self) -> Result<String, mpsc::error::TryRecvError> {
        self.try_recv_numbered().map(|(_, line)| line)
    }

    /// [`OutboxReceiver::try_recv`] with the sequence number.
    pub fn try_recv_numbered(&mut self) -> Result<(u64, String), mpsc::error::TryRecvError> {
        if self.pending.is_none() {
            self.pending = Some(self.rx.try_recv()?);
        }
        match self.pending.take_if(|queued| queued.waits_for.is_none_or(|line| self.shared.gate.is_committed(line))) {
            Some(queued) => Ok((queued.seq, self.taken(queued.line))),
            None => Err(mpsc::error::TryRecvError::Empty),
        }
    }

    /// [`OutboxReceiver::recv`] for a plain thread (stdio's writer).
    pub fn blocking_recv(&mut self) -> Option<String> {
        let queued = match self.pending.take() {
            Some(queued) => queued,
            None => self.rx.blocking_recv()?,
        };
        if let Some(line) = queued.waits_for {
            self.shared.gate.wait_blocking(line);
        }
        Some(self.taken(queued.line))
    }
}

impl Drop for OutboxReceiver {
    fn drop(&mut self) {
        // Whoever waits for room would wait forever.
        self.shared.receiver_gone.store(true, Ordering::Release);
        self.shared.room.notify_waiters();
    }
}

/// The session's [`EventSink`]: events become `SUBAGENT_EVENT` lines, for
/// the client and, while an operator's stream watches the session, for the
/// admin hub.
#[derive(Debug, Clone)]
pub(crate) struct OutboxSink {
    outbox: Arc<Outbox>,
    tap: Tap,
}

impl OutboxSink {
    /// A sink into `outbox`, tapped by `tap`.
    pub(crate) fn new(outbox: Arc<Outbox>, tap: Tap) -> Self {
        Self { outbox, tap }
    }
}

impl EventSink for OutboxSink {
    fn emit(&self, event: Event) {
        let line = crate::event::line(&event);
        self.tap.event(&line);
        self.outbox.push(line);
    }
}
