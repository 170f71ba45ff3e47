//! [`SessionLog`]: a session's side of the store, recording its changes
//! under its id and numbering its lines (and inbound frames) for the journal.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use super::commit_gate::CommitGate;
use super::store_handle::StoreHandle;
use crate::store::change::{Change, SessionRow};

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
    // Set once it ends for good: nothing more of it is recorded. (`stored`
    // then says whether the end was: its lines wait for it.)
    ended: AtomicBool,
    // Changes recorded, lines aside (see `LineMark`); counted once sent.
    changes: AtomicU64,
}

/// What an outbox knows of its last line that waits on a commit: the line
/// it waits on, and how many of the session's changes had been recorded
/// before it. A line finding no change recorded since waits on that same
/// commit, and records nothing: most replies follow the event their change
/// made (`SUBAGENT_EVENT delegated`, then the delegate's reply), and the
/// store need not write one more change for each. Kept per outbox: another
/// outbox's lines wait on its own gate.
#[derive(Debug, Default, Clone, Copy)]
pub struct LineMark {
    changes: u64,
    // The line waited on (0: none yet).
    line: u64,
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
            ended: AtomicBool::new(false),
            changes: AtomicU64::new(0),
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
            ended: AtomicBool::new(false),
            changes: AtomicU64::new(0),
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
            self.counted(self.store.record(Change::SessionOpened(row)));
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
        self.stored.load(Ordering::Acquire)
            && self.store.is_durable()
            && !self.detached.load(Ordering::Acquire)
            && !self.ended.load(Ordering::Acquire)
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
        self.counted(self.send(make))
    }

    fn send(&self, make: impl FnOnce(Arc<str>) -> Change) -> bool {
        self.is_recording() && self.store.record(make(self.id.clone()))
    }

    // Counts a change once it is sent (a line that reads the count after
    // this finds the change ahead of it in the writer's queue).
    fn counted(&self, recorded: bool) -> bool {
        if recorded {
            self.changes.fetch_add(1, Ordering::Release);
        }
        recorded
    }

    /// Records line `seq` for the client: `gate` releases it once every
    /// change recorded before it is committed. It is journaled (`line`)
    /// when its transport can replay it, and a reply names the journaled
    /// request frame it `answers`. Returns the line number `gate` must
    /// reach before the line goes out: its own, or with no change recorded
    /// since `mark`'s line (and nothing to journal), that line's; `None`
    /// when it may go out at once (the session is not kept).
    ///
    /// After the session's end, a line writes nothing (no journal, no frame
    /// is kept any more) and waits for the end (see [`SessionLog::end`]).
    pub fn record_line(
        &self,
        seq: u64,
        line: &str,
        gate: &Arc<CommitGate>,
        answers: Option<u64>,
        mark: &mut LineMark,
    ) -> Option<u64> {
        if self.ended.load(Ordering::Acquire) {
            return self.stored.load(Ordering::Acquire).then_some(seq);
        }
        // Read before the line is sent: every change counted in it is ahead
        // of the line in the writer's queue.
        let changes = self.changes.load(Ordering::Acquire);
        let keeps_lines = self.keeps_lines();
        if mark.line > 0 && mark.changes == changes && !keeps_lines && answers.is_none() {
            return self.is_recording().then_some(mark.line);
        }
        let recorded = self.send(|session| Change::Line {
            session,
            seq,
            line: keeps_lines.then(|| line.to_owned()),
            gate: Some(gate.clone()),
            answers,
        });
        if !recorded {
            return None;
        }
        *mark = LineMark { changes, line: seq };
        Some(seq)
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
        self.counted(self.store.record(Change::Inbound { session: self.id.clone(), seq, frame }));
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

    /// The session ends for good: its rows are deleted. Recorded before the
    /// session is torn down: what the teardown changes (every subagent
    /// terminated) would be deleted with it, so nothing more of it is
    /// written; and every line from now on (the teardown's events, a
    /// shutdown's reply) waits on `gate`, its client's, until the end is
    /// committed (without a gate, they go out at once). A crash before that
    /// leaves the session stored and its client told nothing of the end;
    /// after, the session is gone, as its client is told.
    pub fn end(&self, gate: Option<Arc<CommitGate>>) {
        let kept = self.is_recording();
        // Nothing of it is recorded from here on (a change in flight on
        // another thread that lands after the end is dropped by the batch
        // that holds both: see `batch::fold`).
        if self.ended.swap(true, Ordering::AcqRel) {
            return;
        }
        // Without a gate to release them, its lines cannot wait for the end.
        let holds_lines = gate.is_some();
        let recorded = kept && self.counted(self.store.record(Change::SessionEnded { session: self.id.clone(), gate }));
        self.stored.store(recorded && holds_lines, Ordering::Release);
    }
}
