//! The writer thread: [`start`] opens the SQL store (and joins the cluster)
//! on a thread with its own runtime, and `run` is its loop, which batches
//! the commands of every session, commits, loads and expires.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

use super::commit::{commit, CommitStats};
use super::store_handle::{Command, HandleInner, StoreHandle};
use super::writer_settings::WriterSettings;
use crate::store::backend::Store;
use crate::store::change::Change;
use crate::store::clock::now_ms;
use crate::store::cluster::{self, Acquired, Cluster, ClusterSettings};
use crate::store::sql::SqlStore;
use crate::store::url::StoreUrl;

/// Opens the SQL store on a new writer thread; returns once it is connected
/// and migrated, or with the reason it could not be.
pub(crate) fn start(
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
                Command::Query(query, reply) => {
                    // A read sees every change recorded before it.
                    commit(&*store, &mut batch, &settings, &stats, cluster).await;
                    let _ = reply.send(store.query(&query).await);
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
                                // would stay this node's as long as it lives
                                // and be served nowhere, so it goes back at
                                // once.
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
        if !waiting.is_empty() {
            let flushed = std::mem::take(&mut waiting);
            store.after_durable(Box::new(move || {
                for done in flushed {
                    let _ = done.send(());
                }
            }));
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
