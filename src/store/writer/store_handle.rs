//! [`StoreHandle`]: the runtime's side of the store writer, cheap to clone;
//! with the memory store it has no thread and recording costs nothing. It
//! talks to the writer thread through [`Command`]s on one channel.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

use super::commit::CommitStats;
use crate::store::backend::StoreError;
use crate::store::change::{Change, FaceQuery, StoredSession};
use crate::store::cluster::{Acquire, Acquired, Cluster, SessionOwner};

/// What the writer thread is asked to do.
pub(super) enum Command {
    Change(Change),
    Load(Arc<str>, oneshot::Sender<Result<Option<StoredSession>, StoreError>>),
    Query(FaceQuery, oneshot::Sender<Result<Vec<String>, StoreError>>),
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

/// What every clone of a [`StoreHandle`] shares.
#[derive(Debug)]
pub(super) struct HandleInner {
    pub(super) kind: &'static str,
    // `None` for the memory store: nothing is recorded.
    pub(super) tx: Option<mpsc::UnboundedSender<Command>>,
    // Set at shutdown: nothing more is recorded (sessions closing because
    // the process stops must stay resumable).
    pub(super) frozen: AtomicBool,
    pub(super) stats: Arc<CommitStats>,
    // How often an open session is touched (a tenth of the expiry time).
    pub(super) touch_every: Duration,
    // Several hosts (PostgreSQL): this node's side of session ownership.
    pub(super) cluster: Option<Arc<Cluster>>,
}

/// The runtime's handle on the store writer.
#[derive(Debug, Clone)]
pub struct StoreHandle {
    pub(super) inner: Arc<HandleInner>,
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

    /// Reads what the faces keep beside a session's tree, once everything
    /// recorded before is committed (nothing, for the memory store).
    pub async fn query(&self, query: FaceQuery) -> Result<Vec<String>, StoreError> {
        let Some(tx) = &self.inner.tx else { return Ok(Vec::new()) };
        let (reply, answer) = oneshot::channel();
        tx.send(Command::Query(query, reply)).map_err(|_| StoreError("the store writer stopped".into()))?;
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

    /// Whether the store answers now (and, on a cluster node, its lease is
    /// renewed).
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
    /// a cluster node, the last renewal of its lease.
    pub fn is_healthy(&self) -> bool {
        self.unhealthy().is_none()
    }

    // Why new sessions cannot be kept now, if they cannot.
    fn unhealthy(&self) -> Option<&'static str> {
        if self.inner.stats.failing.load(Ordering::Acquire) {
            return Some("the last commit failed");
        }
        if self.inner.cluster.as_ref().is_some_and(|cluster| !cluster.is_healthy()) {
            return Some("the node's lease could not be renewed");
        }
        None
    }

    /// The process is stopping: commits what was recorded, then records
    /// nothing more, so that sessions closed by the stop stay stored. A
    /// cluster node then hands every session back at once, so other nodes
    /// take them without waiting for its lease to lapse.
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
