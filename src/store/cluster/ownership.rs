//! What this node owns: the [`Cluster`] state (sessions held with their
//! epochs, requesters waiting for a release, health), and the
//! [`SessionOwner`] it tells when a session is no longer its to serve.

use sqlx::postgres::PgPool;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;
use tokio::sync::Notify;

use super::cluster_settings::ClusterSettings;
use super::queries;

/// What serves sessions in this process (the service): the cluster tells
/// it when it must stop serving one.
pub trait SessionOwner: Send + Sync {
    /// Stop serving `id` at once and record nothing more of it: another
    /// node has it, or asked for it (`reason` says which, for the log).
    /// Returns whether it was being served here.
    fn give_up(&self, id: &str, reason: &str) -> bool;
}

/// The cluster side of a node's store writer.
#[derive(Debug)]
pub(crate) struct Cluster {
    pub(super) settings: ClusterSettings,
    // Sessions this node owns, with their epoch (0: opened here, not
    // committed yet).
    pub(super) owned: Mutex<HashMap<Arc<str>, i64>>,
    // Requesters waiting for an owner to release a session.
    released: Mutex<HashMap<String, Arc<Notify>>>,
    // The service, told when it must stop serving a session.
    owner: OnceLock<Weak<dyn SessionOwner>>,
    // Whether the last renewal succeeded (else the node takes no new sessions).
    pub(super) healthy: AtomicBool,
    // Held by a renewal while it runs, and by the node's leaving: a renewal
    // never runs after the node left (it would list the node again).
    pub(super) renewing: tokio::sync::Mutex<bool>,
}

impl std::fmt::Debug for dyn SessionOwner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionOwner")
    }
}

pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Cluster {
    pub(crate) fn new(settings: ClusterSettings) -> Self {
        Self {
            settings,
            owned: Mutex::default(),
            released: Mutex::default(),
            owner: OnceLock::new(),
            healthy: AtomicBool::new(true),
            renewing: tokio::sync::Mutex::new(false),
        }
    }

    pub(crate) fn node_id(&self) -> &str {
        &self.settings.node_id
    }

    pub(crate) fn lease(&self) -> Duration {
        self.settings.lease
    }

    pub(crate) fn lease_ms(&self) -> i64 {
        self.settings.lease_ms()
    }

    pub(crate) fn set_owner(&self, owner: Weak<dyn SessionOwner>) {
        let _ = self.owner.set(owner);
    }

    pub(crate) fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Acquire)
    }

    /// Sessions owned now.
    pub(crate) fn owned_count(&self) -> usize {
        lock(&self.owned).len()
    }

    /// These sessions are no longer this node's: it forgets them and stops
    /// serving them.
    pub(crate) fn lose(&self, ids: &[String], reason: &str) {
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

    pub(super) fn give_up(&self, id: &str, reason: &str) -> bool {
        match self.owner.get().and_then(Weak::upgrade) {
            Some(owner) => owner.give_up(id, reason),
            None => false,
        }
    }

    /// The node shuts down: every lease goes back, and the node leaves the list.
    pub(crate) async fn leave(&self, pool: &PgPool) {
        let mut left = self.renewing.lock().await;
        *left = true;
        lock(&self.owned).clear();
        match queries::leave(pool, self.node_id()).await {
            Ok(n) => log::info!("cluster: node {} left, releasing {n} sessions", self.node_id()),
            Err(err) => log::warn!("cluster: leaving failed ({err}); its leases will lapse"),
        }
    }

    pub(super) fn owns(&self, id: &str, epoch: i64) {
        lock(&self.owned).insert(id.into(), epoch);
    }

    pub(super) fn disown(&self, id: &str) -> Option<i64> {
        lock(&self.owned).remove(id)
    }

    // Whether this node holds a committed lease on `id`.
    pub(super) fn holds(&self, id: &str) -> bool {
        lock(&self.owned).get(id).is_some_and(|epoch| *epoch > 0)
    }

    // The sessions owned with a committed lease, and their epochs.
    pub(super) fn leased(&self) -> HashMap<Arc<str>, i64> {
        lock(&self.owned).iter().filter(|(_, epoch)| **epoch > 0).map(|(id, epoch)| (id.clone(), *epoch)).collect()
    }

    // Of the sessions leased before a check, those the store no longer says
    // this node holds at the same epoch (and that are still owned at it
    // here: not released or lost meanwhile).
    pub(super) fn not_held(&self, before: &HashMap<Arc<str>, i64>, held: &HashSet<(String, i64)>) -> Vec<String> {
        let owned = lock(&self.owned);
        before
            .iter()
            .filter(|(id, epoch)| owned.get(*id) == Some(epoch) && !held.contains(&(id.to_string(), **epoch)))
            .map(|(id, _)| id.to_string())
            .collect()
    }

    pub(super) fn waiter(&self, id: &str) -> Arc<Notify> {
        lock(&self.released).entry(id.to_owned()).or_default().clone()
    }

    pub(super) fn stop_waiting(&self, id: &str) {
        lock(&self.released).remove(id);
    }

    pub(super) fn was_released(&self, id: &str) {
        if let Some(waiter) = lock(&self.released).get(id) {
            waiter.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_check_loses_only_sessions_no_longer_held_at_their_epoch() {
        let cluster = Cluster::new(ClusterSettings::fresh());
        cluster.owns("kept", 2);
        cluster.owns("taken", 3);
        cluster.owns("pending", 0);
        let before = cluster.leased();
        cluster.owns("acquired-meanwhile", 1);
        let held: HashSet<(String, i64)> = [("kept".to_owned(), 2)].into();
        assert_eq!(cluster.not_held(&before, &held), ["taken"]);
    }
}
