//! The cluster's statements (PostgreSQL; the functions they call are in
//! `migrations/0002_cluster.postgres.sql`).

use sqlx::postgres::{PgConnection, PgPool};
use sqlx::Row;
use std::collections::HashSet;

use super::cluster_settings::ClusterSettings;

/// The channel every node listens on.
pub(super) const CHANNEL: &str = "subagentd";

/// What `subagentd_acquire` answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Attempt {
    /// Owned now, at this epoch.
    Owned(i64),
    /// No such session.
    Unknown,
    /// Another node took it meanwhile: ask again.
    Raced,
    /// Another node owns it; its lease has this long left (ms).
    Held { owner: String, wait_ms: i64 },
}

pub(super) async fn acquire(pool: &PgPool, node: &ClusterSettings, id: &str) -> Result<Attempt, sqlx::Error> {
    let row = sqlx::query("SELECT epoch, owner, wait_ms FROM subagentd_acquire($1, $2, $3)")
        .bind(id)
        .bind(node.node_id.as_str())
        .bind(node.lease_ms())
        .fetch_one(pool)
        .await?;
    let epoch: i64 = row.try_get(0)?;
    let owner: Option<String> = row.try_get(1)?;
    let wait_ms: i64 = row.try_get(2)?;
    Ok(match owner {
        _ if epoch > 0 => Attempt::Owned(epoch),
        None => Attempt::Unknown,
        Some(owner) if owner.is_empty() => Attempt::Raced,
        Some(owner) => Attempt::Held { owner, wait_ms },
    })
}

/// Up to `limit` stored sessions with a running task that no live node
/// serves: never owned, released, their owner's node lease lapsed (or the
/// node left the list), or their owner dead (its presence lock is free,
/// taken and let go at once here; believed only once PostgreSQL has been up
/// for a lease, see migration 0005).
pub(super) async fn orphaned(pool: &PgPool, node: &str, lease_ms: i64, limit: i64) -> Result<Vec<String>, sqlx::Error> {
    let rows = sqlx::query(
        "SELECT DISTINCT t.session_id FROM tasks t LEFT JOIN leases l ON l.session_id = t.session_id \
         LEFT JOIN nodes n ON n.id = l.node_id \
         WHERE l.session_id IS NULL OR l.released OR coalesce(n.lease_until_ms, 0) <= subagentd_now_ms() \
         OR (l.node_id <> $1 AND subagentd_presence_settled($3) \
             AND pg_try_advisory_xact_lock(hashtext('subagentd node'), hashtext(l.node_id))) \
         LIMIT $2",
    )
    .bind(node)
    .bind(limit)
    .bind(lease_ms)
    .fetch_all(pool)
    .await?;
    rows.iter().map(|row| row.try_get::<String, _>(0)).collect()
}

/// How many nodes are alive: their presence lock is held (a dead node's is
/// free, and taken and let go at once here; right after a PostgreSQL
/// restart every listed node counts). At least 1 (this one).
pub(super) async fn live_nodes(pool: &PgPool, lease_ms: i64) -> Result<usize, sqlx::Error> {
    let row = sqlx::query(
        "SELECT count(*) FROM nodes WHERE NOT (subagentd_presence_settled($1) \
         AND pg_try_advisory_xact_lock(hashtext('subagentd node'), hashtext(id)))",
    )
    .bind(lease_ms)
    .fetch_one(pool)
    .await?;
    Ok(usize::try_from(row.try_get::<i64, _>(0)?).unwrap_or(1).max(1))
}

/// Asks `owner` to hand `id` off to this node.
pub(super) async fn ask_handoff(
    pool: &PgPool,
    node: &ClusterSettings,
    id: &str,
    owner: &str,
) -> Result<(), sqlx::Error> {
    let payload = format!("handoff {id} {owner} {}", node.node_id);
    sqlx::query("SELECT pg_notify($1, $2)").bind(CHANNEL).bind(payload).execute(pool).await.map(drop)
}

/// Gives up the lease of `id` held at `epoch` and tells every node.
pub(super) async fn release(pool: &PgPool, node: &str, id: &str, epoch: i64) -> Result<bool, sqlx::Error> {
    let rows = sqlx::query(
        "WITH released AS (UPDATE leases SET released = true \
         WHERE session_id = $1 AND node_id = $2 AND epoch = $3 RETURNING session_id) \
         SELECT pg_notify($4, 'released ' || session_id) FROM released",
    )
    .bind(id)
    .bind(node)
    .bind(epoch)
    .bind(CHANNEL)
    .fetch_all(pool)
    .await?;
    Ok(!rows.is_empty())
}

/// Gives up every lease of `node` (it shuts down), tells every node, and
/// takes the node off the list. Returns how many sessions it released.
pub(super) async fn leave(pool: &PgPool, node: &str) -> Result<usize, sqlx::Error> {
    let rows = sqlx::query(
        "WITH released AS (UPDATE leases SET released = true WHERE node_id = $1 RETURNING session_id), \
         gone AS (DELETE FROM nodes WHERE id = $1) \
         SELECT pg_notify($2, 'released ' || session_id) FROM released",
    )
    .bind(node)
    .bind(CHANNEL)
    .fetch_all(pool)
    .await?;
    Ok(rows.len())
}

/// Renews this node's lease and heartbeat: one row, whatever the number of
/// sessions it owns (each session's lease is its node's). Returns whether
/// the lease had lapsed before this renewal: other nodes may then have
/// taken some of its sessions, and [`held`] says which it still holds.
pub(super) async fn renew(pool: &PgPool, node: &ClusterSettings, started_ms: i64) -> Result<bool, sqlx::Error> {
    // Every part of one statement sees the snapshot from before it: `before`
    // reads the lease this statement replaces.
    let row = sqlx::query(
        "WITH before AS (SELECT lease_until_ms FROM nodes WHERE id = $1), \
         beat AS (INSERT INTO nodes (id, http_addr, tcp_addr, started_ms, heartbeat_ms, lease_until_ms) \
         VALUES ($1, $3, $4, $5, subagentd_now_ms(), subagentd_now_ms() + $2) ON CONFLICT (id) DO UPDATE SET \
         http_addr = excluded.http_addr, tcp_addr = excluded.tcp_addr, heartbeat_ms = excluded.heartbeat_ms, \
         lease_until_ms = excluded.lease_until_ms) \
         SELECT coalesce((SELECT lease_until_ms FROM before), 0) <= subagentd_now_ms()",
    )
    .bind(node.node_id.as_str())
    .bind(node.lease_ms())
    .bind(node.http_addr.as_deref())
    .bind(node.tcp_addr.as_deref())
    .bind(started_ms)
    .fetch_one(pool)
    .await?;
    row.try_get(0)
}

/// The sessions `node` holds now (not released), with their epochs: a
/// read, made only when some may have been taken behind its back.
pub(super) async fn held(pool: &PgPool, node: &str) -> Result<HashSet<(String, i64)>, sqlx::Error> {
    let rows = sqlx::query("SELECT session_id, epoch FROM leases WHERE node_id = $1 AND NOT released")
        .bind(node)
        .fetch_all(pool)
        .await?;
    rows.iter().map(|row| Ok((row.try_get::<String, _>(0)?, row.try_get::<i64, _>(1)?))).collect()
}

/// Takes this node's presence lock on `conn`: held while the node lives,
/// freed by PostgreSQL when its connection (so its process) goes. `false`
/// when another live process holds it (the same `--node-id` twice).
pub(super) async fn take_presence(conn: &mut PgConnection, node: &str) -> Result<bool, sqlx::Error> {
    let row = sqlx::query("SELECT pg_try_advisory_lock(hashtext('subagentd node'), hashtext($1))")
        .bind(node)
        .fetch_one(&mut *conn)
        .await?;
    row.try_get(0)
}
