//! A node's own tasks on the store writer's runtime: its presence lock, the
//! renewal of its lease (and heartbeat: one row, whatever its number of
//! sessions), the check of which sessions it still holds when some may have
//! been taken behind its back, and the notifications it listens to (handoff
//! requests, releases).

use sqlx::postgres::{PgConnection, PgListener, PgPool};
use sqlx::{ConnectOptions, Connection};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::ownership::Cluster;
use super::queries::{self, CHANNEL};

/// Hands a session's lease back once everything recorded of it is
/// committed (the writer does it in order with the changes).
pub(crate) type Release = Arc<dyn Fn(String) + Send + Sync>;

/// Joins the cluster: takes the node's presence lock (refused when a live
/// process already runs as this node), then starts renewing and listening.
pub(crate) async fn start(pool: PgPool, cluster: Arc<Cluster>, release: Release) -> Result<(), String> {
    let node = cluster.node_id().to_owned();
    let mut presence = presence(&pool, &node).await?;
    let started_ms = crate::store::clock::now_ms();
    // What an earlier process of this node held is released first: this
    // process owns nothing yet, and its presence lock says no other live
    // process runs as this node. Else those sessions would stay leased to
    // a node that does not serve them, and no one could take them.
    let register = async {
        let released = queries::leave(&pool, &node).await?;
        if released > 0 {
            log::info!("cluster: node {node} released {released} sessions its previous process held");
        }
        queries::renew(&pool, &cluster.settings, started_ms).await
    };
    register.await.map_err(|err| format!("cluster: cannot register node {node}: {err}"))?;
    let mut listener = PgListener::connect_with(&pool).await.map_err(|err| format!("cluster: cannot listen: {err}"))?;
    listener.listen(CHANNEL).await.map_err(|err| format!("cluster: cannot listen: {err}"))?;
    log::info!("cluster: node {node} joined (lease {} ms)", cluster.lease_ms());
    let renewing = cluster.clone();
    let renew_pool = pool.clone();
    tokio::spawn(async move {
        let every = (renewing.settings.lease / 3).max(Duration::from_millis(50));
        // Its first tick one period on: registering renewed the lease just
        // now (an interval's first tick is at once: a second renewal for
        // nothing, run whenever the spawned task first gets the thread).
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut ticks: u32 = 0;
        loop {
            tick.tick().await;
            ticks = ticks.wrapping_add(1);
            let (conn, reconnected) = keep_present(&renew_pool, &renewing, presence).await;
            presence = conn;
            let routine_check = ticks.is_multiple_of(CHECK_HELD_EVERY);
            if !renew(&renew_pool, &renewing, started_ms, reconnected || routine_check).await {
                // The node left; its presence lock goes with the connection.
                return;
            }
        }
    });
    tokio::spawn(listen(listener, cluster, release));
    Ok(())
}

// A connection of its own holding the node's presence lock.
async fn presence(pool: &PgPool, node: &str) -> Result<PgConnection, String> {
    let mut conn = pool
        .connect_options()
        .as_ref()
        .clone()
        .application_name(&format!("subagentd {node}"))
        .connect()
        .await
        .map_err(|err| format!("cluster: cannot connect: {err}"))?;
    match queries::take_presence(&mut conn, node).await {
        Ok(true) => Ok(conn),
        Ok(false) => Err(format!(
            "cluster: node id {node} is in use by another live subagentd (give each node its own --node-id)"
        )),
        Err(err) => Err(format!("cluster: cannot take the presence lock: {err}")),
    }
}

/// Every this many renewals, a node reads which sessions it still holds
/// even when nothing says it may have lost one: a read, never a write, as
/// a last line behind the checks after a lapse or a lost presence lock.
/// Fencing needs none of them (a lost session's next commit is refused);
/// they let a node stop serving a session it lost before it writes again.
const CHECK_HELD_EVERY: u32 = 10;

// Checks the presence connection, and takes a new one when it broke;
// says whether it did (other nodes may have taken this node's sessions
// meanwhile, believing it dead).
async fn keep_present(pool: &PgPool, cluster: &Cluster, mut conn: PgConnection) -> (PgConnection, bool) {
    if conn.ping().await.is_ok() {
        return (conn, false);
    }
    log::warn!("cluster: the presence connection broke; taking a new one");
    match presence(pool, cluster.node_id()).await {
        Ok(fresh) => (fresh, true),
        Err(err) => {
            log::error!("{err}");
            (conn, true)
        }
    }
}

// Renews the node's lease, then, when some of its sessions may have been
// taken (the lease had lapsed, the last renewal failed, the presence lock
// was lost, or `check` asks), reads which it still holds and gives up the
// others. Returns `false` once the node has left (nothing more is renewed).
async fn renew(pool: &PgPool, cluster: &Cluster, started_ms: i64, check: bool) -> bool {
    let left = cluster.renewing.lock().await;
    if *left {
        return false;
    }
    let before = cluster.leased();
    let renewed = async {
        let lapsed = queries::renew(pool, &cluster.settings, started_ms).await?;
        let was_healthy = cluster.healthy.load(Ordering::Acquire);
        if lapsed || check || !was_healthy {
            Ok::<_, sqlx::Error>(Some(queries::held(pool, cluster.node_id()).await?))
        } else {
            Ok(None)
        }
    };
    match renewed.await {
        Ok(held) => {
            if !cluster.healthy.swap(true, Ordering::AcqRel) {
                log::warn!("cluster: the node's lease is renewed again; taking new sessions");
            }
            let lost = held.map(|held| cluster.not_held(&before, &held)).unwrap_or_default();
            if !lost.is_empty() {
                cluster.lose(&lost, "its lease was taken over");
            }
        }
        Err(err) => {
            if cluster.healthy.swap(false, Ordering::AcqRel) {
                log::error!("cluster: renewing the node's lease failed ({err}); taking no new sessions until it works");
            }
        }
    }
    true
}

// Serves handoff requests for this node's sessions, and wakes those
// waiting for a release.
async fn listen(mut listener: PgListener, cluster: Arc<Cluster>, release: Release) {
    loop {
        let message = match listener.recv().await {
            Ok(message) => message,
            Err(err) => {
                log::warn!("cluster: listening failed ({err}); reconnecting");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let mut words = message.payload().split(' ');
        match (words.next(), words.next(), words.next(), words.next()) {
            (Some("handoff"), Some(id), Some(owner), Some(to)) if owner == cluster.node_id() && cluster.holds(id) => {
                log::info!("cluster: node {to} asks for session {id}: handing it off");
                cluster.give_up(id, &format!("handed off to node {to}"));
                release(id.to_owned());
            }
            (Some("released"), Some(id), None, None) => cluster.was_released(id),
            _ => {}
        }
    }
}
