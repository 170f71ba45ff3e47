//! Taking sessions: [`Acquire`] and [`Acquired`], the takeover of a session
//! whose lease lapsed or whose owner died, the handoff asked of a live
//! owner, orphaned sessions, and handing a lease back.

use sqlx::postgres::PgPool;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

use super::ownership::Cluster;
use super::queries::{self, Attempt};
use crate::store::backend::StoreError;

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

impl Cluster {
    /// Takes `id` for this node (see [`crate::store::StoreHandle::acquire`]):
    /// at once when it is free, its lease lapsed or its owner died; else it
    /// asks the owner to hand it off and waits for the release (or the
    /// lease's end), for at most the lease time and a second.
    pub(crate) async fn acquire(&self, pool: &PgPool, id: &str, mode: Acquire) -> Result<Acquired, StoreError> {
        let waiter = self.waiter(id);
        let outcome = self.try_acquire(pool, id, &waiter, mode).await;
        self.stop_waiting(id);
        outcome.map_err(|err| StoreError(format!("taking session {id}: {err}")))
    }

    /// Stored sessions with a running task that no live node serves (see
    /// [`crate::store::StoreHandle::orphaned_sessions`]).
    /// Also says how many nodes are alive to share them.
    pub(crate) async fn orphaned(&self, pool: &PgPool, limit: i64) -> Result<(Vec<String>, usize), StoreError> {
        let found = async {
            let ids = queries::orphaned(pool, self.node_id(), self.lease_ms(), limit).await?;
            let nodes = if ids.is_empty() { 1 } else { queries::live_nodes(pool, self.lease_ms()).await? };
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
            let (owner, wait_ms) = match queries::acquire(pool, &self.settings, id).await? {
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
                queries::ask_handoff(pool, &self.settings, id, &owner).await?;
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
    pub(crate) async fn release(&self, pool: &PgPool, id: &str) {
        let Some(epoch) = self.disown(id) else { return };
        match queries::release(pool, self.node_id(), id, epoch).await {
            Ok(true) => log::info!("cluster: released session {id}"),
            Ok(false) => log::warn!("cluster: session {id} was no longer this node's to release"),
            Err(err) => log::warn!("cluster: releasing session {id} failed ({err}); its lease will lapse"),
        }
    }
}
