//! The process's store writer: one thread with its own tokio runtime that
//! owns the store, takes every session's changes from one channel, and
//! commits them in batches (group commit: whatever queued while the last
//! commit ran goes in the next, up to `batch_max` changes, after an
//! optional `commit_delay`). Loads run on the same thread, between batches,
//! so they see every change recorded before them.
//!
//! [`StoreHandle`] is the runtime's side: cheap to clone, and with the
//! memory store it has no thread and recording costs nothing.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc, oneshot, Notify};

use super::cluster::{self, Acquire, Acquired, Cluster, ClusterSettings, SessionOwner};
use super::sql::SqlStore;
use super::{Change, CommitError, SessionRow, Store, StoreError, StoreUrl, StoredSession};
use crate::metrics::metrics;

/// How the writer batches and retains.
#[derive(Debug, Clone)]
pub struct WriterSettings {
    /// Most changes in one transaction.
    pub batch_max: usize,
    /// How long a batch waits for more changes once its first arrived.
    pub commit_delay: Duration,
    /// Sessions untouched this long are deleted from the store.
    pub session_ttl: Duration,
    /// Journal lines kept per session (for SSE replay).
    pub journal_retained: u64,
    /// Connections to PostgreSQL.
    pub pool_size: u32,
    /// SQLite: sync every commit to disk (`synchronous = FULL`), or only at
    /// checkpoints (`NORMAL`, WAL mode: a process crash loses nothing).
    pub sqlite_full_sync: bool,
}

impl Default for WriterSettings {
    fn default() -> Self {
        Self {
            batch_max: 1024,
            commit_delay: Duration::ZERO,
            session_ttl: Duration::from_secs(24 * 3600),
            journal_retained: 1024,
            pool_size: 4,
            sqlite_full_sync: true,
        }
    }
}

/// Commit figures, for benches and `/health`.
#[derive(Debug, Default)]
pub struct CommitStats {
    /// Transactions committed.
    pub commits: AtomicU64,
    /// Changes committed.
    pub changes: AtomicU64,
    /// Commits that failed (each retried).
    pub failures: AtomicU64,
    /// Set while the last commit failed: the store is unreachable.
    pub failing: AtomicBool,
}

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

enum Command {
    Change(Change),
    Load(Arc<str>, oneshot::Sender<Result<Option<StoredSession>, StoreError>>),
    Flush(oneshot::Sender<()>),
    Ping(oneshot::Sender<Result<(), StoreError>>),
    // Several hosts: take a session for this node.
    Acquire(Arc<str>, Acquire, oneshot::Sender<Result<Acquired, StoreError>>),
    // Sessions with running tasks that no live node serves (at most so
    // many), and how many live nodes share them.
    Orphaned(i64, oneshot::Sender<Result<(Vec<String>, usize), StoreError>>),
    // Hand a session's lease back, after committing what came before.
    Release(String),
    // The node shuts down: every lease goes back.
    Leave(oneshot::Sender<()>),
}

#[derive(Debug)]
struct HandleInner {
    kind: &'static str,
    // `None` for the memory store: nothing is recorded.
    tx: Option<mpsc::UnboundedSender<Command>>,
    // Set at shutdown: nothing more is recorded (sessions closing because
    // the process stops must stay resumable).
    frozen: AtomicBool,
    stats: Arc<CommitStats>,
    // How often an open session is touched (a tenth of the expiry time).
    touch_every: Duration,
    // Several hosts (PostgreSQL): this node's side of session ownership.
    cluster: Option<Arc<Cluster>>,
}

/// The runtime's handle on the store writer.
#[derive(Debug, Clone)]
pub struct StoreHandle {
    inner: Arc<HandleInner>,
}

impl Default for StoreHandle {
    fn default() -> Self {
        Self::memory()
    }
}

impl StoreHandle {
    /// The memory store: records nothing, loads nothing.
    pub fn memory() -> Self {
        let inner = HandleInner {
            kind: "memory",
            tx: None,
            frozen: AtomicBool::new(false),
            stats: Arc::default(),
            touch_every: Duration::from_secs(3600),
            cluster: None,
        };
        Self { inner: Arc::new(inner) }
    }

    /// How often an open session should say it is still open.
    pub fn touch_every(&self) -> Duration {
        self.inner.touch_every
    }

    /// `memory`, `sqlite` or `postgres`.
    pub fn kind(&self) -> &'static str {
        self.inner.kind
    }

    /// Whether changes are kept (and lines wait for their commit).
    pub fn is_durable(&self) -> bool {
        self.inner.tx.is_some() && !self.inner.frozen.load(Ordering::Acquire)
    }

    /// Whether the host is stopping with its sessions kept (a durable store,
    /// frozen): sessions close without telling their clients anything ended.
    pub fn is_stopping(&self) -> bool {
        self.inner.tx.is_some() && self.inner.frozen.load(Ordering::Acquire)
    }

    /// Commit figures.
    pub fn stats(&self) -> &CommitStats {
        &self.inner.stats
    }

    /// Records a change (a channel send; never waits); `false` when it was
    /// not recorded (nothing is kept, or the host is stopping).
    pub fn record(&self, change: Change) -> bool {
        match &self.inner.tx {
            Some(tx) if !self.inner.frozen.load(Ordering::Acquire) => tx.send(Command::Change(change)).is_ok(),
            _ => false,
        }
    }

    /// Loads a stored session; `None` when it is not stored (or the store
    /// keeps nothing).
    pub async fn load(&self, session_id: &str) -> Result<Option<StoredSession>, StoreError> {
        let Some(tx) = &self.inner.tx else { return Ok(None) };
        let (reply, answer) = oneshot::channel();
        tx.send(Command::Load(session_id.into(), reply)).map_err(|_| StoreError("the store writer stopped".into()))?;
        answer.await.map_err(|_| StoreError("the store writer stopped".into()))?
    }

    /// Waits until everything recorded so far is committed.
    pub async fn flush(&self) {
        let Some(tx) = &self.inner.tx else { return };
        let (reply, done) = oneshot::channel();
        if tx.send(Command::Flush(reply)).is_ok() {
            let _ = done.await;
        }
    }

    /// Whether the store answers now (and, on a cluster node, its leases
    /// are renewed).
    pub async fn ping(&self) -> Result<(), StoreError> {
        let Some(tx) = &self.inner.tx else { return Ok(()) };
        if let Some(why) = self.unhealthy() {
            return Err(StoreError(why.into()));
        }
        let (reply, answer) = oneshot::channel();
        tx.send(Command::Ping(reply)).map_err(|_| StoreError("the store writer stopped".into()))?;
        answer.await.map_err(|_| StoreError("the store writer stopped".into()))?
    }

    /// Whether new sessions can be taken: the last commit succeeded and, on
    /// a cluster node, the last renewal of its leases.
    pub fn is_healthy(&self) -> bool {
        self.unhealthy().is_none()
    }

    // Why new sessions cannot be kept now, if they cannot.
    fn unhealthy(&self) -> Option<&'static str> {
        if self.inner.stats.failing.load(Ordering::Acquire) {
            return Some("the last commit failed");
        }
        if self.inner.cluster.as_ref().is_some_and(|cluster| !cluster.is_healthy()) {
            return Some("the leases could not be renewed");
        }
        None
    }

    /// The process is stopping: commits what was recorded, then records
    /// nothing more, so that sessions closed by the stop stay stored. A
    /// cluster node then hands every lease back at once, so other nodes take
    /// its sessions without waiting for the leases to lapse.
    pub async fn freeze(&self) {
        self.inner.frozen.store(true, Ordering::Release);
        self.flush().await;
        if let (Some(tx), Some(_)) = (&self.inner.tx, &self.inner.cluster) {
            let (reply, done) = oneshot::channel();
            if tx.send(Command::Leave(reply)).is_ok() {
                let _ = done.await;
            }
        }
    }

    /// A session's ownership lease, on a cluster node.
    pub fn lease(&self) -> Option<Duration> {
        self.inner.cluster.as_deref().map(Cluster::lease)
    }

    /// This node's id, on a cluster node.
    pub fn node_id(&self) -> Option<&str> {
        self.inner.cluster.as_deref().map(Cluster::node_id)
    }

    /// Sessions this node owns now (0 off a cluster).
    pub fn owned_sessions(&self) -> usize {
        self.inner.cluster.as_ref().map_or(0, |cluster| cluster.owned_count())
    }

    /// Tells the cluster what serves sessions here: it is told when it must
    /// stop serving one (taken over, or handed off to another node).
    pub fn set_session_owner(&self, owner: std::sync::Weak<dyn SessionOwner>) {
        if let Some(cluster) = &self.inner.cluster {
            cluster.set_owner(owner);
        }
    }

    /// Takes stored session `id` for this node before it is loaded. Off a
    /// cluster every session is this node's. On one, a session whose owner
    /// died or whose lease lapsed is taken at once; one a live node owns is
    /// asked of it (a handoff), waiting up to the lease time.
    pub async fn acquire(&self, id: &str) -> Result<Acquired, StoreError> {
        self.acquire_as(id, Acquire::Handoff).await
    }

    /// [`StoreHandle::acquire`], asking a live owner to hand the session off
    /// (`Acquire::Handoff`) or not (`Acquire::IfOrphaned`: `Busy` at once).
    pub async fn acquire_as(&self, id: &str, mode: Acquire) -> Result<Acquired, StoreError> {
        let (Some(tx), Some(_)) = (&self.inner.tx, &self.inner.cluster) else { return Ok(Acquired::Owned) };
        let (reply, answer) = oneshot::channel();
        tx.send(Command::Acquire(id.into(), mode, reply)).map_err(|_| StoreError("the store writer stopped".into()))?;
        answer.await.map_err(|_| StoreError("the store writer stopped".into()))?
    }

    /// Up to `limit` stored sessions that had a task running when last
    /// stored and that no live node serves: every such session after a
    /// restart; on a cluster node, those whose owner died or whose lease
    /// lapsed. (Empty for the memory store.) Also says how many live nodes
    /// share them (1 off a cluster).
    pub async fn orphaned_sessions(&self, limit: usize) -> Result<(Vec<String>, usize), StoreError> {
        let Some(tx) = &self.inner.tx else { return Ok((Vec::new(), 1)) };
        let (reply, answer) = oneshot::channel();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        tx.send(Command::Orphaned(limit, reply)).map_err(|_| StoreError("the store writer stopped".into()))?;
        answer.await.map_err(|_| StoreError("the store writer stopped".into()))?
    }

    /// Gives back a session taken by [`StoreHandle::acquire`] that will not
    /// be served here after all (once what was recorded of it is committed).
    pub fn release(&self, id: &str) {
        if let (Some(tx), Some(_)) = (&self.inner.tx, &self.inner.cluster) {
            let _ = tx.send(Command::Release(id.to_owned()));
        }
    }
}

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

/// Milliseconds since the Unix epoch.
pub(super) fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Opens the SQL store on a new writer thread; returns once it is connected
/// and migrated, or with the reason it could not be.
pub(super) fn start(
    url: StoreUrl,
    settings: WriterSettings,
    cluster: Option<ClusterSettings>,
) -> Result<StoreHandle, String> {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (tx, rx) = mpsc::unbounded_channel();
    let cluster = cluster.map(|settings| Arc::new(Cluster::new(settings)));
    let node = cluster.clone();
    let weak_tx = tx.downgrade();
    let stats = Arc::new(CommitStats::default());
    let writer_stats = stats.clone();
    let touch_every = (settings.session_ttl / 10).max(Duration::from_secs(1));
    std::thread::Builder::new()
        .name("store-writer".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => runtime,
                Err(err) => {
                    let _ = ready_tx.send(Err(format!("cannot start the store writer: {err}")));
                    return;
                }
            };
            runtime.block_on(async move {
                let store = match SqlStore::connect(&url, &settings).await {
                    Ok(store) => store,
                    Err(err) => {
                        let _ = ready_tx.send(Err(err));
                        return;
                    }
                };
                let node = match (node, store.pg_pool()) {
                    (Some(cluster), Some(pool)) => {
                        let release: cluster::Release = Arc::new(move |id| {
                            if let Some(tx) = weak_tx.upgrade() {
                                let _ = tx.send(Command::Release(id));
                            }
                        });
                        if let Err(err) = cluster::start(pool.clone(), cluster.clone(), release).await {
                            let _ = ready_tx.send(Err(err));
                            return;
                        }
                        Some((cluster, pool))
                    }
                    _ => None,
                };
                let _ = ready_tx.send(Ok(store.kind()));
                run(Arc::new(store), rx, settings, writer_stats, node).await;
            });
        })
        .map_err(|err| format!("cannot start the store writer thread: {err}"))?;
    let kind = ready_rx.recv().map_err(|_| "the store writer thread ended while starting".to_owned())??;
    let inner = HandleInner { kind, tx: Some(tx), frozen: AtomicBool::new(false), stats, touch_every, cluster };
    Ok(StoreHandle { inner: Arc::new(inner) })
}

/// A cluster node's ownership state and the pool its statements use.
type Node = (Arc<Cluster>, sqlx::PgPool);

// The writer loop: batches, commits (retrying until it succeeds), releases.
async fn run(
    store: Arc<dyn Store>,
    mut rx: mpsc::UnboundedReceiver<Command>,
    settings: WriterSettings,
    stats: Arc<CommitStats>,
    node: Option<Node>,
) {
    let cluster = node.as_ref().map(|(cluster, _)| &**cluster);
    let mut batch: Vec<Change> = Vec::new();
    let mut waiting: Vec<oneshot::Sender<()>> = Vec::new();
    let mut last_expiry = Instant::now();
    let expiry_every = (settings.session_ttl / 10).clamp(Duration::from_secs(1), Duration::from_secs(600));
    while let Some(first) = rx.recv().await {
        let mut next = Some(first);
        let deadline = tokio::time::Instant::now() + settings.commit_delay;
        loop {
            let command = match next.take() {
                Some(command) => command,
                None => match rx.try_recv() {
                    Ok(command) => command,
                    Err(_) if !settings.commit_delay.is_zero() && batch.len() < settings.batch_max => {
                        match tokio::time::timeout_at(deadline, rx.recv()).await {
                            Ok(Some(command)) => command,
                            _ => break,
                        }
                    }
                    Err(_) => break,
                },
            };
            match command {
                Command::Change(change) => batch.push(change),
                Command::Flush(done) => waiting.push(done),
                Command::Load(id, reply) => {
                    // A load sees every change recorded before it.
                    commit(&*store, &mut batch, &settings, &stats, cluster).await;
                    let _ = reply.send(store.load_session(&id).await);
                }
                Command::Ping(reply) => {
                    let _ = reply.send(store.ping().await);
                }
                Command::Orphaned(limit, reply) => {
                    // It sees every change recorded before it.
                    commit(&*store, &mut batch, &settings, &stats, cluster).await;
                    let orphaned = match &node {
                        Some((cluster, pool)) => cluster.orphaned(pool, limit).await,
                        None => store.resumable_sessions(limit).await.map(|ids| (ids, 1)),
                    };
                    let _ = reply.send(orphaned);
                }
                Command::Acquire(id, mode, reply) => {
                    // It sees every change recorded before it (the end of a
                    // session, say), and may wait for a handoff: the writer
                    // goes on meanwhile.
                    commit(&*store, &mut batch, &settings, &stats, cluster).await;
                    match &node {
                        Some((cluster, pool)) => {
                            let (cluster, pool) = (cluster.clone(), pool.clone());
                            tokio::spawn(async move {
                                let outcome = cluster.acquire(&pool, &id, mode).await;
                                // Its asker gave up meanwhile (a restore past
                                // its deadline): a session taken for no one
                                // would have its lease renewed forever and be
                                // served nowhere, so it goes back at once.
                                if let Err(Ok(Acquired::Owned)) = reply.send(outcome) {
                                    log::warn!(
                                        "cluster: session {id} was taken for a restore that gave up; releasing it"
                                    );
                                    cluster.release(&pool, &id).await;
                                }
                            });
                        }
                        None => {
                            let _ = reply.send(Ok(Acquired::Owned));
                        }
                    }
                }
                Command::Release(id) => {
                    // Everything recorded of it before is committed first.
                    commit(&*store, &mut batch, &settings, &stats, cluster).await;
                    if let Some((cluster, pool)) = &node {
                        cluster.release(pool, &id).await;
                    }
                }
                Command::Leave(done) => {
                    commit(&*store, &mut batch, &settings, &stats, cluster).await;
                    if let Some((cluster, pool)) = &node {
                        cluster.leave(pool).await;
                    }
                    let _ = done.send(());
                }
            }
            if batch.len() >= settings.batch_max {
                break;
            }
        }
        commit(&*store, &mut batch, &settings, &stats, cluster).await;
        for done in waiting.drain(..) {
            let _ = done.send(());
        }
        if last_expiry.elapsed() >= expiry_every {
            last_expiry = Instant::now();
            let before = now_ms() - i64::try_from(settings.session_ttl.as_millis()).unwrap_or(i64::MAX);
            match store.delete_expired(before).await {
                Ok(0) => {}
                Ok(n) => log::info!("store: deleted {n} expired sessions"),
                Err(err) => log::warn!("store: deleting expired sessions failed: {err}"),
            }
        }
    }
    commit(&*store, &mut batch, &settings, &stats, cluster).await;
}

// Commits `batch` (retrying with backoff while the store fails: what a
// client was told must not be lost), then releases the lines it journaled.
// On a cluster node, the changes of sessions it no longer owns are dropped,
// and a batch the store fences is retried without the sessions it names.
async fn commit(
    store: &dyn Store,
    batch: &mut Vec<Change>,
    settings: &WriterSettings,
    stats: &CommitStats,
    cluster: Option<&Cluster>,
) {
    let mut backoff = Duration::from_millis(10);
    let mut started = Instant::now();
    loop {
        let fence = cluster.map(|cluster| cluster.fence(batch));
        if batch.is_empty() {
            return;
        }
        match store.commit(batch, settings.journal_retained, fence.as_ref()).await {
            Ok(()) => {
                if let (Some(cluster), Some(fence)) = (cluster, &fence) {
                    cluster.committed(fence);
                }
                break;
            }
            Err(CommitError::Fenced(lost)) => match cluster {
                Some(cluster) => {
                    // Nothing more of them is written, not even an opening
                    // (which would claim them again, and be refused again,
                    // for ever).
                    batch.retain(|change| !lost.iter().any(|id| **id == **change.session()));
                    cluster.lose(&lost, "the store refused its write: another node owns it");
                }
                None => {
                    log::error!("store: a commit was fenced off a cluster; dropping {} changes", batch.len());
                    batch.clear();
                    return;
                }
            },
            Err(CommitError::Store(err)) => {
                stats.failures.fetch_add(1, Ordering::Relaxed);
                metrics().store_commit_failed();
                if !stats.failing.swap(true, Ordering::AcqRel) {
                    log::error!("store: commit of {} changes failed, retrying: {err}", batch.len());
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
                // The latency measured is the successful transaction's.
                started = Instant::now();
            }
        }
    }
    if stats.failing.swap(false, Ordering::AcqRel) {
        log::warn!("store: commits succeed again");
    }
    stats.commits.fetch_add(1, Ordering::Relaxed);
    stats.changes.fetch_add(batch.len() as u64, Ordering::Relaxed);
    metrics().store_committed(batch.len(), started.elapsed());
    let mut released: HashMap<*const CommitGate, (Arc<CommitGate>, u64)> = HashMap::new();
    for change in batch.drain(..) {
        if let Change::Line { seq, gate: Some(gate), .. } = change {
            let key = Arc::as_ptr(&gate);
            let entry = released.entry(key).or_insert((gate, 0));
            entry.1 = entry.1.max(seq);
        }
    }
    for (gate, seq) in released.into_values() {
        gate.advance(seq);
    }
}
