//! [`SessionLog`]: a session's side of the store, recording its changes
//! under its id and numbering its lines (and inbound frames) for the journal.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use super::store_handle::StoreHandle;
use crate::store::{Change, SessionRow};

/// A session's side of the store: records its changes under its id, and
/// numbers its lines for the journal.
#[derive(Debug)]
pub struct SessionLog {
    id: Arc<str>,
    store: StoreHandle,
    // Set once the session is stored (its first successful handshake);
    // before that nothing of it is recorded.
    stored: AtomicBool,
    next_seq: AtomicU64,
    // The next inbound request frame's number (HTTP `/send`).
    next_inbound: AtomicU64,
    // Whether its lines are journaled: its transport can replay them.
    keeps_lines: AtomicBool,
    // Set when this process stops serving it while it stays stored (another
    // node took it, or asked for it): nothing more of it is recorded.
    detached: AtomicBool,
}

impl SessionLog {
    /// A fresh session's log; nothing is recorded until [`SessionLog::open`].
    pub fn new(id: impl Into<Arc<str>>, store: StoreHandle) -> Arc<Self> {
        Arc::new(Self {
            id: id.into(),
            store,
            stored: AtomicBool::new(false),
            next_seq: AtomicU64::new(1),
            next_inbound: AtomicU64::new(1),
            keeps_lines: AtomicBool::new(false),
            detached: AtomicBool::new(false),
        })
    }

    /// A restored session's log: stored already, numbering from `next_seq`.
    pub fn restored(id: impl Into<Arc<str>>, store: StoreHandle, next_seq: u64) -> Arc<Self> {
        Arc::new(Self {
            id: id.into(),
            store,
            stored: AtomicBool::new(true),
            next_seq: AtomicU64::new(next_seq),
            next_inbound: AtomicU64::new(1),
            keeps_lines: AtomicBool::new(false),
            detached: AtomicBool::new(false),
        })
    }

    /// The session id.
    pub fn id(&self) -> &Arc<str> {
        &self.id
    }

    /// The store.
    pub fn store(&self) -> &StoreHandle {
        &self.store
    }

    /// Stores the session (its handshake succeeded): from now on its changes
    /// are recorded.
    pub fn open(&self, row: SessionRow) {
        self.keep_lines(row.transport == "http");
        if self.store.is_durable() {
            self.store.record(Change::SessionOpened(row));
            self.stored.store(true, Ordering::Release);
        }
    }

    /// Journals this session's lines from now on (`true`: its transport can
    /// replay them, HTTP's SSE), or only numbers and gates them.
    pub fn keep_lines(&self, keep: bool) {
        self.keeps_lines.store(keep, Ordering::Release);
    }

    /// Whether this session's lines are journaled.
    pub fn keeps_lines(&self) -> bool {
        self.keeps_lines.load(Ordering::Acquire)
    }

    /// Whether this session's changes are kept.
    pub fn is_recording(&self) -> bool {
        self.stored.load(Ordering::Acquire) && self.store.is_durable() && !self.detached.load(Ordering::Acquire)
    }

    /// This process stops serving the session but it stays stored (another
    /// node has it now): nothing more of it is recorded, and it closes
    /// without telling its client anything ended.
    pub fn detach(&self) {
        self.detached.store(true, Ordering::Release);
    }

    /// Whether the session closes while it stays stored: detached, or the
    /// host is stopping with its sessions kept.
    pub fn is_detached(&self) -> bool {
        self.detached.load(Ordering::Acquire) || self.store.is_stopping()
    }

    /// Records the change `make` builds, when this session is kept; `true`
    /// when it was recorded (and so will be committed).
    pub fn record(&self, make: impl FnOnce(Arc<str>) -> Change) -> bool {
        self.is_recording() && self.store.record(make(self.id.clone()))
    }

    /// Numbers inbound frames after `last` (a restored session's highest).
    pub fn resume_inbound_after(&self, last: u64) {
        self.next_inbound.fetch_max(last + 1, Ordering::AcqRel);
    }

    /// Journals a request frame handed over by the client, before it is
    /// served; returns its number, or `None` when nothing is kept. The frame
    /// is durable once [`StoreHandle::flush`] returns.
    pub fn journal_inbound(&self, frame: &[u8]) -> Option<u64> {
        if !self.is_recording() {
            return None;
        }
        let seq = self.next_inbound.fetch_add(1, Ordering::AcqRel);
        let frame = String::from_utf8_lossy(frame).into_owned();
        self.store.record(Change::Inbound { session: self.id.clone(), seq, frame });
        Some(seq)
    }

    /// The number the next line will get.
    pub fn peek_next_seq(&self) -> u64 {
        self.next_seq.load(Ordering::Acquire)
    }

    /// The next line's sequence number.
    pub fn next_seq(&self) -> u64 {
        self.next_seq.fetch_add(1, Ordering::AcqRel)
    }

    /// The session ended for good: its rows are deleted.
    pub fn end(&self) {
        self.record(|session| Change::SessionEnded { session });
        self.stored.store(false, Ordering::Release);
    }
}
