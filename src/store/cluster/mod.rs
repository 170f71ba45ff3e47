//! Several hosts: which node owns each session (PostgreSQL stores only).
//!
//! A session's tree lives in one process; what spreads over nodes is whole
//! sessions. PostgreSQL holds who owns each (`leases`: node, epoch, lease
//! expiry) and which nodes are up (`nodes`); nothing else plays broker.
//!
//! - **Fencing.** Every batch the writer commits names the epoch this node
//!   holds for each session in it, and passes `subagentd_fence` in the same
//!   statement. A node that lost a session (it was paused or cut off past
//!   its lease, and another node took over) can never write to it again: its
//!   batch is refused, the lost sessions' changes are dropped, and the node
//!   stops serving them ([`SessionOwner::give_up`]) without telling their
//!   clients anything (the new owner does).
//! - **Leases.** A node renews the leases of all its sessions in one
//!   statement every third of `lease`, which is also its heartbeat.
//! - **Takeover.** A node asked for a session it does not own takes it when
//!   its lease lapsed, or at once when the owner is dead: every node holds an
//!   advisory lock on a connection of its own, which PostgreSQL frees the
//!   moment that process dies. Otherwise it asks the owner to hand the
//!   session off (`NOTIFY subagentd, 'handoff …'`); the owner stops serving
//!   it, commits what it recorded, releases the lease and says so
//!   (`'released …'`). A node that is shut down releases all of its leases.
//!
//! - `sql`: the statements.
//! - `node`: the node's own tasks (presence lock, renewal, notifications).

mod node;
mod sql;

use sqlx::postgres::PgPool;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

use super::{Change, StoreError};
use sql::Attempt;

pub(super) use node::{start, Release};
pub(super) use sql::{bind_fence, fenced_sessions, FENCE_CTE, FENCE_PARAMS};

/// A node of a cluster (`--node-id`, `[cluster]`).
#[derive(Debug, Clone)]
pub struct ClusterSettings {
    /// This node's id (`--node-id`; a fresh one per start by default).
    pub node_id: String,
    /// How long a session's ownership lasts unless renewed.
    pub lease: Duration,
    /// The addresses this node serves, for the `nodes` table.
    pub http_addr: Option<String>,
    /// The NDJSON TCP address.
    pub tcp_addr: Option<String>,
}

impl ClusterSettings {
    /// A node with a fresh id and the default lease (5 s).
    pub fn fresh() -> Self {
        Self {
            node_id: format!("node-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]),
            lease: Duration::from_millis(5000),
            http_addr: None,
            tcp_addr: None,
        }
    }
}

/// What serves sessions in this process (the service): the cluster tells
/// it when it must stop serving one.
pub trait SessionOwner: Send + Sync {
    /// Stop serving `id` at once and record nothing more of it: another
    /// node has it, or asked for it (`reason` says which, for the log).
    /// Returns whether it was being served here.
    fn give_up(&self, id: &str, reason: &str) -> bool;
}

/// How asking for a session went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquired {
    /// This node owns it now.
    Owned,
    /// The store has no such session.
    Unknown,
    /// Another live node owns it and did not hand it off in time.
    Busy {
        /// The owner.
        owner: String,
    },
}

/// How a node asks for a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquire {
    /// A client asked for it here: a live owner is asked to hand it off.
    Handoff,
    /// Adopting it (it has work and no client): taken only when no live
    /// node serves it, so survivors never pull sessions from each other.
    IfOrphaned,
}

/// What one commit must prove: for each session in the batch, the epoch this
/// node holds (0: opened here, its lease is written by this commit), and
/// whether the session ends with it.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Fence {
    /// This node.
    pub node: String,
    /// The sessions.
    pub ids: Vec<String>,
    /// Their epochs.
    pub epochs: Vec<i64>,
    /// Whether each ends in this batch (its lease goes with it).
    pub ends: Vec<bool>,
    /// The lease a new session starts with, in ms.
    pub lease_ms: i64,
}

/// The cluster side of a node's store writer.
#[derive(Debug)]
pub(super) struct Cluster {
    settings: ClusterSettings,
    // Sessions this node owns, with their epoch (0: opened here, not
    // committed yet).
    owned: Mutex<HashMap<Arc<str>, i64>>,
    // Requesters waiting for an owner to release a session.
    released: Mutex<HashMap<String, Arc<Notify>>>,
    // The service, told when it must stop serving a session.
    owner: OnceLock<Weak<dyn SessionOwner>>,
    // Whether the last renewal succeeded (else the node takes no new sessions).
    healthy: AtomicBool,
    // Held by a renewal while it runs, and by the node's leaving: a renewal
    // never runs after the node left (it would take its leases back).
    renewing: tokio::sync::Mutex<bool>,
}

impl std::fmt::Debug for dyn SessionOwner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionOwner")
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Cluster {
    pub(super) fn new(settings: ClusterSettings) -> Self {
        Self {
            settings,
            owned: Mutex::default(),
            released: Mutex::default(),
            owner: OnceLock::new(),
            healthy: AtomicBool::new(true),
            renewing: tokio::sync::Mutex::new(false),
        }
    }

    pub(super) fn node_id(&self) -> &str {
        &self.settings.node_id
    }

    pub(super) fn lease(&self) -> Duration {
        self.settings.lease
    }

    pub(super) fn lease_ms(&self) -> i64 {
        i64::try_from(self.settings.lease.as_millis()).unwrap_or(i64::MAX)
    }

    pub(super) fn set_owner(&self, owner: Weak<dyn SessionOwner>) {
        let _ = self.owner.set(owner);
    }

    pub(super) fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Acquire)
    }

    /// Sessions owned now.
    pub(super) fn owned_count(&self) -> usize {
        lock(&self.owned).len()
    }

    /// The fence for `batch`, after dropping the changes of every session
    /// this node does not own (lost or handed off: nothing more of it may
    /// be written). A session opened here is owned from its first change.
    pub(super) fn fence(&self, batch: &mut Vec<Change>) -> Fence {
        let mut owned = lock(&self.owned);
        let mut index: HashMap<Arc<str>, usize> = HashMap::new();
        let mut fence = Fence { node: self.settings.node_id.clone(), lease_ms: self.lease_ms(), ..Fence::default() };
        batch.retain(|change| {
            let session = change.session();
            if let Some(&at) = index.get(session) {
                fence.ends[at] |= matches!(change, Change::SessionEnded { .. });
                return true;
            }
            let epoch = match (owned.get(session), change) {
                (Some(&epoch), _) => epoch,
                (None, Change::SessionOpened(_)) => {
                    owned.insert(session.clone(), 0);
                    0
                }
                (None, _) => return false,
            };
            index.insert(session.clone(), fence.ids.len());
            fence.ids.push(session.to_string());
            fence.epochs.push(epoch);
            fence.ends.push(matches!(change, Change::SessionEnded { .. }));
            true
        });
        fence
    }

    /// `fence` was committed: sessions opened here hold epoch 1, ended ones
    /// are no longer owned.
    pub(super) fn committed(&self, fence: &Fence) {
        let mut owned = lock(&self.owned);
        for ((id, epoch), ends) in fence.ids.iter().zip(&fence.epochs).zip(&fence.ends) {
            if *ends {
                owned.remove(id.as_str());
            } else if *epoch == 0 {
                if let Some(held) = owned.get_mut(id.as_str()) {
                    *held = (*held).max(1);
                }
            }
        }
    }

    /// These sessions are no longer this node's: it forgets them and stops
    /// serving them.
    pub(super) fn lose(&self, ids: &[String], reason: &str) {
        {
            let mut owned = lock(&self.owned);
            for id in ids {
                owned.remove(id.as_str());
            }
        }
        for id in ids {
            log::warn!("cluster: session {id} is no longer this node's ({reason}); it stops being served here");
            self.give_up(id, reason);
        }
    }

    fn give_up(&self, id: &str, reason: &str) -> bool {
        match self.owner.get().and_then(Weak::upgrade) {
            Some(owner) => owner.give_up(id, reason),
            None => false,
        }
    }

    /// Takes `id` for this node (see [`crate::store::StoreHandle::acquire`]):
    /// at once when it is free, its lease lapsed or its owner died; else it
    /// asks the owner to hand it off and waits for the release (or the
    /// lease's end), for at most the lease time and a second.
    pub(super) async fn acquire(&self, pool: &PgPool, id: &str, mode: Acquire) -> Result<Acquired, StoreError> {
        let waiter = self.waiter(id);
        let outcome = self.try_acquire(pool, id, &waiter, mode).await;
        self.stop_waiting(id);
        outcome.map_err(|err| StoreError(format!("taking session {id}: {err}")))
    }

    /// Stored sessions with a running task that no live node serves (see
    /// [`crate::store::StoreHandle::orphaned_sessions`]).
    /// Also says how many nodes are alive to share them.
    pub(super) async fn orphaned(&self, pool: &PgPool, limit: i64) -> Result<(Vec<String>, usize), StoreError> {
        let found = async {
            let ids = sql::orphaned(pool, self.node_id(), self.lease_ms(), limit).await?;
            let nodes = if ids.is_empty() { 1 } else { sql::live_nodes(pool, self.lease_ms()).await? };
            Ok::<_, sqlx::Error>((ids, nodes))
        };
        found.await.map_err(|err| StoreError(format!("finding orphaned sessions: {err}")))
    }

    async fn try_acquire(
        &self,
        pool: &PgPool,
        id: &str,
        released: &Notify,
        mode: Acquire,
    ) -> Result<Acquired, sqlx::Error> {
        let deadline = Instant::now() + self.settings.lease + Duration::from_secs(1);
        let mut asked: Option<String> = None;
        loop {
            let notified = released.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (owner, wait_ms) = match sql::acquire(pool, self, id).await? {
                Attempt::Owned(epoch) => {
                    self.owns(id, epoch);
                    log::info!("cluster: node {} owns session {id} at epoch {epoch}", self.node_id());
                    return Ok(Acquired::Owned);
                }
                Attempt::Unknown => return Ok(Acquired::Unknown),
                Attempt::Raced => (String::new(), 10),
                // Adopting takes only what no live node serves.
                Attempt::Held { owner, .. } if mode == Acquire::IfOrphaned => return Ok(Acquired::Busy { owner }),
                Attempt::Held { owner, wait_ms } => (owner, wait_ms),
            };
            if !owner.is_empty() && asked.as_deref() != Some(owner.as_str()) {
                sql::ask_handoff(pool, self, id, &owner).await?;
                asked = Some(owner.clone());
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(Acquired::Busy { owner });
            }
            let pause = Duration::from_millis(u64::try_from(wait_ms.clamp(10, 250)).unwrap_or(250));
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep(pause.min(deadline - now)) => {}
            }
        }
    }

    /// Hands the lease of `id` back (handed off, or not served here after
    /// all), telling every node.
    pub(super) async fn release(&self, pool: &PgPool, id: &str) {
        let Some(epoch) = self.disown(id) else { return };
        match sql::release(pool, self.node_id(), id, epoch).await {
            Ok(true) => log::info!("cluster: released session {id}"),
            Ok(false) => log::warn!("cluster: session {id} was no longer this node's to release"),
            Err(err) => log::warn!("cluster: releasing session {id} failed ({err}); its lease will lapse"),
        }
    }

    /// The node shuts down: every lease goes back, and the node leaves the list.
    pub(super) async fn leave(&self, pool: &PgPool) {
        let mut left = self.renewing.lock().await;
        *left = true;
        lock(&self.owned).clear();
        match sql::leave(pool, self.node_id()).await {
            Ok(n) => log::info!("cluster: node {} left, releasing {n} sessions", self.node_id()),
            Err(err) => log::warn!("cluster: leaving failed ({err}); its leases will lapse"),
        }
    }

    fn owns(&self, id: &str, epoch: i64) {
        lock(&self.owned).insert(id.into(), epoch);
    }

    fn disown(&self, id: &str) -> Option<i64> {
        lock(&self.owned).remove(id)
    }

    // Whether this node holds a committed lease on `id`.
    fn holds(&self, id: &str) -> bool {
        lock(&self.owned).get(id).is_some_and(|epoch| *epoch > 0)
    }

    // The sessions owned with a committed lease, and their epochs.
    fn leased(&self) -> HashMap<Arc<str>, i64> {
        lock(&self.owned).iter().filter(|(_, epoch)| **epoch > 0).map(|(id, epoch)| (id.clone(), *epoch)).collect()
    }

    // Of the sessions leased before a renewal, those it did not renew at
    // the same epoch (and that are still held at it).
    fn unrenewed(&self, before: &HashMap<Arc<str>, i64>, renewed: &HashSet<(String, i64)>) -> Vec<String> {
        let owned = lock(&self.owned);
        before
            .iter()
            .filter(|(id, epoch)| owned.get(*id) == Some(epoch) && !renewed.contains(&(id.to_string(), **epoch)))
            .map(|(id, _)| id.to_string())
            .collect()
    }

    fn waiter(&self, id: &str) -> Arc<Notify> {
        lock(&self.released).entry(id.to_owned()).or_default().clone()
    }

    fn stop_waiting(&self, id: &str) {
        lock(&self.released).remove(id);
    }

    fn was_released(&self, id: &str) {
        if let Some(waiter) = lock(&self.released).get(id) {
            waiter.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::SessionRow;

    fn opened(id: &str) -> Change {
        Change::SessionOpened(SessionRow {
            id: id.into(),
            agent_id: "a".into(),
            capabilities: Vec::new(),
            principal: None,
            transport: "tcp".into(),
            handshaken: true,
        })
    }

    #[test]
    fn a_batch_keeps_only_owned_sessions_and_names_their_epochs() {
        let cluster = Cluster::new(ClusterSettings { node_id: "n1".into(), ..ClusterSettings::fresh() });
        cluster.owns("taken", 7);
        let mut batch = vec![
            opened("new"),
            Change::Touched { session: "taken".into() },
            Change::Touched { session: "lost".into() },
            Change::SessionEnded { session: "taken".into() },
            Change::Touched { session: "new".into() },
        ];
        let fence = cluster.fence(&mut batch);
        assert_eq!(batch.len(), 4, "the change of a session not owned is dropped");
        assert_eq!(fence.node, "n1");
        assert_eq!(fence.ids, ["new", "taken"]);
        assert_eq!(fence.epochs, [0, 7]);
        assert_eq!(fence.ends, [false, true]);
        cluster.committed(&fence);
        assert_eq!(cluster.leased().get("new"), Some(&1), "a new session holds epoch 1 once committed");
        assert!(!cluster.leased().contains_key("taken"), "an ended session is no longer owned");
    }

    #[test]
    fn a_renewal_loses_only_sessions_it_did_not_renew_at_their_epoch() {
        let cluster = Cluster::new(ClusterSettings::fresh());
        cluster.owns("kept", 2);
        cluster.owns("taken", 3);
        cluster.owns("pending", 0);
        let before = cluster.leased();
        cluster.owns("acquired-meanwhile", 1);
        let renewed: HashSet<(String, i64)> = [("kept".to_owned(), 2)].into();
        assert_eq!(cluster.unrenewed(&before, &renewed), ["taken"]);
    }
}
