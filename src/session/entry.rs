//! One session in the HTTP registry ([`HttpEntry`]): its input, its outbox
//! receiver, its streams and the lines kept for `Last-Event-ID` replay
//! ([`Recent`]), and the hold a reading stream keeps on it ([`ReaderHold`]).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::input::InputSender;
use super::pool_slot::PoolSlot;
use crate::outbox::OutboxReceiver;
use crate::store::SessionLog;

/// Locks `mutex`, taking its value even when a holder panicked: every value
/// kept behind these locks stays whole between statements.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One HTTP session's transport state.
#[derive(Debug)]
pub(crate) struct HttpEntry {
    // Frames for the session loop.
    pub(crate) input: InputSender,
    // The outbox's receiving side; an attached stream holds the lock.
    pub(crate) output: Arc<tokio::sync::Mutex<OutboxReceiver>>,
    // Cancels the attached stream when a new one replaces it.
    pub(crate) stream_token: Mutex<CancellationToken>,
    // Streams attached now (a session with a stream is never idle).
    pub(crate) streams: AtomicUsize,
    // Woken when a stream detaches: the idle deadline or the final grace
    // starts again from then.
    pub(crate) detached: Notify,
    // Last request or stream activity, for idle expiry.
    pub(super) last_active: Mutex<Instant>,
    // Closes the session (idle expiry).
    pub(super) stop: CancellationToken,
    // The session's slot, given back when the entry is removed (and the
    // session has ended).
    pub(super) slot: Mutex<Option<PoolSlot>>,
    // Its log: `/send` journals request frames on it.
    pub(crate) log: Arc<SessionLog>,
    // The last lines written to a stream, for a reconnect with
    // `Last-Event-ID` (bounded by `[store] journal_retained` lines and
    // `outbox_max_bytes` bytes).
    pub(crate) recent: Mutex<Recent>,
    // Closed after this long with no request and no stream, in ms
    // (`session_idle_seconds`; a dropped TCP session's grace, once a TCP
    // client has been attached).
    pub(super) idle_ms: AtomicU64,
    // Whose it is: checked on every request that names it, and when a TCP
    // client resumes it.
    pub(crate) owner: Arc<super::owner::Owner>,
    // Its tree: the A2A face runs operations on it directly.
    pub(crate) tree: crate::runtime::Tree,
    // An A2A context's: idle, it is let go but stays stored (its tasks are
    // found again later), and it is never idle while a task runs.
    pub(crate) keep_stored: std::sync::atomic::AtomicBool,
    // A face's session: its events, typed, for the face (a client's
    // session has them as lines in its outbox).
    pub(super) events: Option<super::face_events::FaceEvents>,
    // Fires once the session has stopped being served here (it ended, or
    // moved to another node): its face stops listening to it.
    pub(crate) ended: CancellationToken,
}

/// The lines last written to a stream, oldest first, with their numbers.
#[derive(Debug, Default)]
pub(crate) struct Recent {
    lines: VecDeque<(u64, String)>,
    bytes: usize,
    max_lines: usize,
    max_bytes: usize,
}

impl Recent {
    pub(super) fn new(max_lines: usize, max_bytes: usize, lines: Vec<(u64, String)>) -> Self {
        let mut recent = Self { lines: VecDeque::new(), bytes: 0, max_lines, max_bytes };
        for (seq, line) in lines {
            recent.push(seq, line);
        }
        recent
    }

    /// Keeps a line written to a stream, forgetting the oldest past the bounds.
    pub(crate) fn push(&mut self, seq: u64, line: String) {
        self.bytes += line.len();
        self.lines.push_back((seq, line));
        while self.lines.len() > self.max_lines.max(1) || (self.bytes > self.max_bytes && self.lines.len() > 1) {
            let Some((_, old)) = self.lines.pop_front() else { break };
            self.bytes -= old.len();
        }
    }

    /// The kept lines numbered after `seq`.
    pub(crate) fn after(&self, seq: u64) -> Vec<(u64, String)> {
        self.lines.iter().filter(|(n, _)| *n > seq).cloned().collect()
    }
}

impl HttpEntry {
    /// Ends the session for good (a client's `DELETE /mcp`): it is closed,
    /// not kept stored.
    pub(crate) fn close(&self) {
        self.keep_stored.store(false, Ordering::Release);
        self.stop.cancel();
    }

    /// The typed events of a face's session from now on. A client's
    /// session has none: the receiver is closed at once.
    pub(crate) fn events(&self) -> tokio::sync::broadcast::Receiver<std::sync::Arc<crate::event::Event>> {
        match &self.events {
            Some(events) => events.subscribe(),
            None => tokio::sync::broadcast::channel(1).1,
        }
    }

    /// Whether it is closing (idle, or a client ended it).
    pub(crate) fn is_closing(&self) -> bool {
        self.stop.is_cancelled()
    }

    /// The token holder it belongs to.
    pub(crate) fn principal(&self) -> Option<String> {
        self.owner.principal()
    }

    /// Records activity: the idle deadline moves.
    pub(crate) fn touch(&self) {
        *lock(&self.last_active) = Instant::now();
    }

    pub(super) fn streams(&self) -> usize {
        self.streams.load(Ordering::Acquire)
    }

    pub(super) fn idle(&self) -> Duration {
        Duration::from_millis(self.idle_ms.load(Ordering::Acquire))
    }
}

/// A reader attached to a session (an SSE stream, a relaying TCP
/// connection): counted in `streams` while it lives; when it goes, the
/// idle deadline starts again.
#[derive(Debug)]
pub(crate) struct ReaderHold(Arc<HttpEntry>);

impl ReaderHold {
    pub(crate) fn new(entry: Arc<HttpEntry>) -> Self {
        entry.streams.fetch_add(1, Ordering::AcqRel);
        entry.touch();
        Self(entry)
    }
}

impl Drop for ReaderHold {
    fn drop(&mut self) {
        self.0.streams.fetch_sub(1, Ordering::AcqRel);
        self.0.touch();
        self.0.detached.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::Recent;

    #[test]
    fn recent_lines_are_bounded_by_count_and_bytes_and_replayed_after_an_id() {
        let mut recent = Recent::new(3, 1000, vec![(1, "a".into()), (2, "b".into())]);
        recent.push(3, "c".into());
        recent.push(4, "d".into());
        assert_eq!(recent.after(0).iter().map(|(seq, _)| *seq).collect::<Vec<_>>(), [2, 3, 4], "three lines kept");
        assert_eq!(recent.after(3), [(4, "d".to_owned())]);
        assert!(recent.after(4).is_empty());

        let mut small = Recent::new(100, 10, Vec::new());
        small.push(1, "123456".into());
        small.push(2, "7890ab".into());
        assert_eq!(small.after(0), [(2, "7890ab".to_owned())], "12 bytes do not fit in 10: the oldest goes");
        small.push(3, "a line longer than the byte bound".into());
        assert_eq!(small.after(0).len(), 1, "the newest line is kept even alone past the bound");
    }
}
