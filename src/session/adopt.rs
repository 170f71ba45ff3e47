//! Work goes on without its client. A host that starts, or that outlives
//! another node of its cluster, takes every stored session that had a task
//! running and that no live node serves, and serves it here as a session
//! waiting for its client: its tasks resume at once, its events are
//! journaled for the client's return (SSE `Last-Event-ID`, or the replay
//! after a TCP `resume_session_id`), and `session_idle_seconds` counts from
//! now.
//!
//! - On a single node (SQLite), once at start.
//! - On a cluster node, at start and then every quarter of the lease
//!   (between 250 ms and 2 s), so a dead node's sessions are adopted by the
//!   survivors within the lease and a little more. Each survivor takes its
//!   share (the orphans over the live nodes, rounded up), picked at random,
//!   only when no live node serves them ([`Acquire::IfOrphaned`]): survivors
//!   never pull sessions from each other, and the work spreads over them.
//! - A TCP session whose connection dropped is adopted at once (see
//!   [`Service::park`](super::service::Service::park)), for `tcp_resume_grace_ms`.
//!
//! At most `[store] resume_concurrency` sessions are loaded at a time.

use futures_util::StreamExt;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

use super::registry::HttpSessions;
use super::service::Parked;
use super::stored_sessions::is_in_use;
use crate::store::Acquire;

/// Most sessions one scan of the store lists.
const SCAN_LIMIT: usize = 10_000;

/// Adopts orphaned sessions until the service shuts down (see the module
/// docs); `parked` brings the TCP sessions whose connection dropped.
pub(crate) async fn adopt_orphans(
    sessions: Arc<HttpSessions>,
    concurrency: usize,
    mut parked: mpsc::UnboundedReceiver<Parked>,
) {
    let service = sessions.service.clone();
    let store = service.store().clone();
    let shutdown = service.shutdown_token().clone();
    let every = store.lease().map(|lease| (lease / 4).clamp(Duration::from_millis(250), Duration::from_secs(2)));
    let mut next_scan = Some(tokio::time::Instant::now());
    loop {
        let scan = async {
            match next_scan {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            dropped = parked.recv() => match dropped {
                Some(Parked { id, grace }) => {
                    let sessions = sessions.clone();
                    actix_rt::spawn(async move { adopt(&sessions, id, Some(grace)).await });
                }
                None => return,
            },
            _ = scan => {
                scan_once(&sessions, concurrency).await;
                next_scan = every.map(|every| {
                    // Jittered, so survivors do not all scan at once.
                    let jitter = every.mul_f64(fastrand::f64() * 0.5);
                    tokio::time::Instant::now() + every + jitter
                });
            }
        }
    }
}

// Lists the orphaned sessions and adopts them, `concurrency` at a time.
async fn scan_once(sessions: &Arc<HttpSessions>, concurrency: usize) {
    let service = &sessions.service;
    let (mut orphans, nodes) = match service.store().orphaned_sessions(SCAN_LIMIT).await {
        Ok(found) => found,
        Err(err) => {
            log::warn!("adopting sessions: the store could not list them: {err}");
            return;
        }
    };
    orphans.retain(|id| !service.is_served(id));
    if orphans.is_empty() {
        return;
    }
    // This node's share; the others take theirs at their own scans, and
    // what is left over at the next.
    let found = orphans.len();
    fastrand::shuffle(&mut orphans);
    orphans.truncate(found.div_ceil(nodes));
    log::info!("adopting {} of {found} stored sessions with running tasks and no live node", orphans.len());
    futures_util::stream::iter(orphans).for_each_concurrent(concurrency.max(1), |id| adopt(sessions, id, None)).await;
}

// Serves stored session `id` here without its client, closing it after
// `idle` (`session_idle_seconds` when `None`) with no client.
async fn adopt(sessions: &Arc<HttpSessions>, id: String, idle: Option<Duration>) {
    match sessions.restore_as(&id, Acquire::IfOrphaned, idle).await {
        Ok(Some(_)) => log::info!("session {id} adopted: its tasks go on without its client"),
        Ok(None) => log::debug!("session {id} ended before it could be adopted"),
        Err(err) if is_in_use(&err) => log::debug!("session {id}: another node serves it now"),
        Err(err) => log::warn!("session {id} could not be adopted: {}", err.message),
    }
}
