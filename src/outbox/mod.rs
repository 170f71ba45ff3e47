//! A session's bounded outbox: every line for its client goes through here.
//!
//! The outbox counts bytes from a line's push (or its reservation, below)
//! until the transport takes it to write ([`OutboxReceiver`]), against
//! `limits.outbox_max_bytes`, and lines against `limits.outbox_capacity`.
//!
//! - **Replies that can be large** (lists, awaits, merges) *reserve* their
//!   bytes before they are built ([`Outbox::reserve`]): when the outbox is
//!   full the request waits, still holding its in-flight permit, so a client
//!   that does not read soon stops being read from, and what the host holds
//!   for it stays near the bound however many large requests it sends. A
//!   single reservation larger than the bound is granted when nothing else
//!   is queued, so one large reply never blocks a client that keeps up.
//! - **Everything else** (events, small replies) is pushed at once: pushing
//!   never blocks, since events come from the session's actor thread. Past
//!   twice the byte bound, or the line capacity, the client is not keeping up
//!   with its own tree: the session is marked *overflowed* and closed.
//! - **A stalled client**, one whose outbox is full and that has taken
//!   nothing for `limits.client_stall_ms`, is closed the same way: a client
//!   is judged by time without progress, never by the size of one reply.
//!
//! Every line gets its session's next sequence number (SSE `id:`). When the
//! session is kept in a durable store, each line is also journaled, and the
//! receiver releases it to the transport only once that journal entry is
//! committed ([`CommitGate`]): the changes the line reports were recorded
//! before it, so they are committed too.
//!
//! Lines pushed after overflow are dropped; the transport closes the
//! connection without waiting for the client. When the transport has stopped
//! taking lines altogether (its writer ended: the client went away), the
//! next push marks the outbox overflowed too, so the session ends, but also
//! *gone* ([`Outbox::client_gone`]): an ordinary disconnect, not a slow
//! client. The session logs which it was.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;

mod ends;
#[cfg(test)]
mod tests;

use crate::metrics::metrics;
use crate::store::{CommitGate, LineMark, SessionLog};
pub use ends::OutboxReceiver;
pub(crate) use ends::OutboxSink;

/// What the outbox and its receiver share.
#[derive(Debug)]
pub(crate) struct Shared {
    // Bytes queued plus bytes reserved, not yet taken by the receiver.
    pub(crate) used: AtomicUsize,
    // Wakes reservations waiting for room (a line was taken, a reservation
    // was given back, or the receiver went away).
    pub(crate) room: Notify,
    // When the client last made progress (took a line, or the outbox was
    // empty), as milliseconds since `epoch()`.
    pub(crate) progress_ms: AtomicU64,
    // The receiver was dropped: nothing will ever be taken again.
    pub(crate) receiver_gone: AtomicBool,
    // Reservations waiting for room now.
    pub(crate) waiting: AtomicUsize,
    // Releases journaled lines once committed.
    pub(crate) gate: Arc<CommitGate>,
}

impl Shared {
    pub(crate) fn mark_progress(&self) {
        self.progress_ms.store(now_ms(), Ordering::Release);
    }

    pub(crate) fn release(&self, bytes: usize) {
        if bytes > 0 {
            self.used.fetch_sub(bytes, Ordering::AcqRel);
            metrics().outbox_shrank(bytes);
            self.room.notify_waiters();
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // What the transport never took leaves the process-wide count too.
        metrics().outbox_shrank(*self.used.get_mut());
    }
}

/// A process-wide base for the progress clock (an `Instant` does not fit an
/// atomic).
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

pub(crate) fn now_ms() -> u64 {
    u64::try_from(epoch().elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// One queued line: its sequence number, and the line number the commit
/// gate must reach before it goes out (see [`SessionLog::record_line`]).
#[derive(Debug)]
pub(crate) struct Queued {
    pub(crate) seq: u64,
    pub(crate) waits_for: Option<u64>,
    pub(crate) line: String,
}

/// What pushing takes the lock for: the channel, and the session log that
/// numbers (and journals) the lines.
#[derive(Debug)]
struct Sending {
    // `None` once the session has ended, so the receiver sees the end.
    tx: Option<mpsc::Sender<Queued>>,
    log: Option<Arc<SessionLog>>,
    // This outbox's last line that waits on a commit, for `log`.
    mark: LineMark,
}

/// The sending side of a session's outbox.
#[derive(Debug)]
pub(crate) struct Outbox {
    sending: Mutex<Sending>,
    shared: Arc<Shared>,
    // The byte bound (`limits.outbox_max_bytes`).
    max_bytes: usize,
    // Fires when the client cannot keep up: the session is to be closed.
    overflowed: CancellationToken,
    // Fires when the session is ending and nobody may wait for room any more.
    ending: CancellationToken,
}

/// Bytes set aside for one reply that is about to be built; given back when
/// dropped, or turned into the line's own count by [`Outbox::push_reserved`].
#[derive(Debug)]
pub(crate) struct Reservation {
    shared: Option<Arc<Shared>>,
    pub(crate) bytes: usize,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.take() {
            shared.release(self.bytes);
        }
    }
}

impl Outbox {
    /// An outbox holding up to `capacity` lines and `max_bytes` bytes, and
    /// its receiving side.
    pub(crate) fn new(capacity: usize, max_bytes: usize) -> (Arc<Self>, OutboxReceiver) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let shared = Arc::new(Shared {
            used: AtomicUsize::new(0),
            room: Notify::new(),
            progress_ms: AtomicU64::new(now_ms()),
            receiver_gone: AtomicBool::new(false),
            waiting: AtomicUsize::new(0),
            gate: Arc::default(),
        });
        let outbox = Self {
            sending: Mutex::new(Sending { tx: Some(tx), log: None, mark: LineMark::default() }),
            shared: shared.clone(),
            max_bytes: max_bytes.max(1),
            overflowed: CancellationToken::new(),
            ending: CancellationToken::new(),
        };
        (Arc::new(outbox), OutboxReceiver::new(rx, shared))
    }

    /// Numbers the lines from now on with `log`'s sequence, and journals them
    /// while it records (a resumed session swaps in its stored log).
    pub(crate) fn attach_log(&self, log: Arc<SessionLog>) {
        let mut guard = self.lock();
        guard.log = Some(log);
        guard.mark = LineMark::default();
    }

    fn lock(&self) -> MutexGuard<'_, Sending> {
        self.sending.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    // Takes `bytes` when they fit (or the outbox is empty).
    fn try_reserve(&self, bytes: usize) -> bool {
        let max = self.max_bytes;
        let reserved = self
            .shared
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                (used == 0 || used.saturating_add(bytes) <= max).then(|| used.saturating_add(bytes))
            })
            .is_ok();
        if reserved {
            metrics().outbox_grew(bytes);
        }
        reserved
    }

    /// Sets `bytes` aside for a reply about to be built, waiting while the
    /// outbox is full. Returns at once (with nothing reserved) when the
    /// session is overflowed or ending, or the client is gone: the reply is
    /// then pushed, or dropped, as any other line.
    pub(crate) async fn reserve(&self, bytes: usize) -> Reservation {
        loop {
            let room = self.shared.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            if self.try_reserve(bytes) {
                return Reservation { shared: Some(self.shared.clone()), bytes };
            }
            if self.overflowed.is_cancelled()
                || self.ending.is_cancelled()
                || self.shared.receiver_gone.load(Ordering::Acquire)
            {
                return Reservation { shared: None, bytes: 0 };
            }
            let _waiting = Waiting::new(&self.shared.waiting);
            tokio::select! {
                _ = room => {}
                _ = self.overflowed.cancelled() => {}
                _ = self.ending.cancelled() => {}
            }
        }
    }

    /// Waits while the client has fallen behind: the outbox holds its byte
    /// bound, or half its line capacity. The session reads no request
    /// meanwhile, so a client that sends without reading is pushed back
    /// (TCP and stdio: its writes block; HTTP: `/send` answers 429 once the
    /// input queue is full) instead of filling the outbox with small
    /// replies until it overflows. Waiting counts toward the stall rule, as
    /// a reservation waiting for room does. Returns at once when the session
    /// is overflowed or ending, or the client is gone.
    pub(crate) async fn room_for_input(&self) {
        loop {
            let room = self.shared.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            if !self.behind()
                || self.overflowed.is_cancelled()
                || self.ending.is_cancelled()
                || self.shared.receiver_gone.load(Ordering::Acquire)
            {
                return;
            }
            let _waiting = Waiting::new(&self.shared.waiting);
            tokio::select! {
                _ = room => {}
                _ = self.overflowed.cancelled() => {}
                _ = self.ending.cancelled() => {}
            }
        }
    }

    // Whether the outbox holds its byte bound or half its line capacity.
    fn behind(&self) -> bool {
        if self.queued_bytes() >= self.max_bytes {
            return true;
        }
        let guard = self.lock();
        guard.tx.as_ref().is_some_and(|tx| tx.capacity() < tx.max_capacity() / 2)
    }

    /// Queues a line built under `reservation`: the line's length replaces
    /// the bytes reserved for it.
    // The tests' own (the crate's callers name what they answer: `push_reply`).
    #[cfg(test)]
    pub(crate) fn push_reserved(&self, line: String, reservation: Reservation) {
        self.queue(line, Some(reservation), None);
    }

    /// Queues the reply to the journaled request frame `answers` (when it
    /// was one): the frame is marked served in the same commit as the reply,
    /// so a restart replays exactly the frames whose reply was never
    /// committed.
    pub(crate) fn push_reply(&self, line: String, reservation: Option<Reservation>, answers: Option<u64>) {
        self.queue(line, reservation, answers);
    }

    /// Ends `log`'s session for good in the store (see [`SessionLog::end`]):
    /// under the lock lines are numbered under, so each line is either
    /// recorded before the end or waits for it to be committed.
    pub(crate) fn end_session(&self, log: &SessionLog) {
        let _guard = self.lock();
        log.end(Some(self.shared.gate.clone()));
    }

    /// Queues one line at once; past the hard bounds (twice the byte bound,
    /// or the line capacity) marks the session overflowed and drops it.
    pub(crate) fn push(&self, line: String) {
        self.queue(line, None, None);
    }

    fn queue(&self, line: String, mut reservation: Option<Reservation>, answers: Option<u64>) {
        let mut guard = self.lock();
        let Sending { tx, log, mark } = &mut *guard;
        let Some(tx) = tx.as_ref() else { return };
        if self.overflowed.is_cancelled() {
            return;
        }
        // Numbered (and journaled) under the lock: in the order sent.
        let (seq, waits_for) = match log {
            // The session stays stored but is no longer served from here (the
            // host stops, or another node took it): a line now would report
            // what was not recorded, so it goes nowhere.
            Some(log) if log.is_detached() => return,
            Some(log) => {
                let seq = log.next_seq();
                // Gated only when recorded: a line recorded is committed
                // (the host may stop in between, and then records nothing).
                let waits_for = log.record_line(seq, &line, &self.shared.gate, answers, mark);
                (seq, waits_for)
            }
            None => (0, None),
        };
        let len = line.len();
        let before = self.shared.used.fetch_add(len, Ordering::AcqRel);
        // The reservation's bytes are the line's now.
        let reserved = reservation.as_mut().and_then(|r| r.shared.take().map(|_| r.bytes)).unwrap_or(0);
        if reserved > 0 {
            self.shared.used.fetch_sub(reserved, Ordering::AcqRel);
        }
        // One update of the process-wide count, by the difference.
        if len >= reserved {
            metrics().outbox_grew(len - reserved);
        } else {
            metrics().outbox_shrank(reserved - len);
        }
        if before == reserved {
            // Nothing of the client's was waiting: it is keeping up.
            self.shared.mark_progress();
        }
        let within = reservation.is_some() || before == 0 || before.saturating_add(len) <= 2 * self.max_bytes;
        if !within || tx.try_send(Queued { seq, waits_for, line }).is_err() {
            // Past the bounds or the line capacity (a slow client), or the
            // client is gone (`client_gone` tells which): the session ends.
            self.shared.release(len);
            self.overflowed.cancel();
        }
    }

    /// Whether the client went away (the transport stopped taking lines)
    /// rather than fell behind.
    pub(crate) fn client_gone(&self) -> bool {
        self.shared.receiver_gone.load(Ordering::Acquire)
    }

    /// Bytes queued or reserved, not yet taken by the transport.
    pub(crate) fn queued_bytes(&self) -> usize {
        self.shared.used.load(Ordering::Acquire)
    }

    /// True when the outbox is full (or a reply, or the session's input,
    /// waits for room) and the client has taken nothing for `stall`.
    pub(crate) fn stalled(&self, stall: Duration) -> bool {
        let full = self.queued_bytes() >= self.max_bytes || self.shared.waiting.load(Ordering::Acquire) > 0;
        if !full {
            return false;
        }
        let idle_ms = now_ms().saturating_sub(self.shared.progress_ms.load(Ordering::Acquire));
        u128::from(idle_ms) >= stall.as_millis()
    }

    /// Fires when the outbox overflowed, or its client stalled.
    pub(crate) fn overflowed(&self) -> &CancellationToken {
        &self.overflowed
    }

    /// Watches for a stalled client until the outbox is closed, checking a
    /// few times per `stall`; a stall marks the outbox overflowed.
    pub(crate) async fn watch_stall(self: Arc<Self>, stall: Duration) {
        let tick = (stall / 4).max(Duration::from_millis(10));
        loop {
            tokio::select! {
                _ = tokio::time::sleep(tick) => {}
                _ = self.overflowed.cancelled() => return,
                _ = self.ending.cancelled() => return,
            }
            if self.stalled(stall) {
                // The session logs it, with its id.
                self.overflowed.cancel();
                return;
            }
        }
    }

    /// The session is ending: reservations stop waiting for room.
    pub(crate) fn stop_waiting(&self) {
        self.ending.cancel();
    }

    /// Ends the outbox: the receiver gets what is queued, then the end.
    pub(crate) fn close(&self) {
        self.ending.cancel();
        self.lock().tx.take();
    }
}

/// Counts a wait for room in the outbox (see [`Outbox::stalled`]) while it
/// lasts, also when its future is dropped.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(waiting: &'a AtomicUsize) -> Self {
        waiting.fetch_add(1, Ordering::AcqRel);
        Self(waiting)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}
