//! One group commit: the batch goes to the store, retried with backoff
//! while the store fails, and its journaled lines are released; and
//! [`CommitStats`], the figures the commits keep.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::commit_gate::CommitGate;
use super::writer_settings::WriterSettings;
use crate::metrics::metrics;
use crate::store::backend::{CommitError, Store};
use crate::store::change::Change;
use crate::store::cluster::Cluster;

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

// Commits `batch` (retrying with backoff while the store fails: what a
// client was told must not be lost), then releases the lines it journaled
// once the store says the commit is durable.
// On a cluster node, the changes of sessions it no longer owns are dropped,
// and a batch the store fences is retried without the sessions it names.
pub(super) async fn commit(
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
        let (gate, seq) = match change {
            Change::Line { seq, gate: Some(gate), .. } => (gate, seq),
            // Every line of an ended session waits for its end.
            Change::SessionEnded { gate: Some(gate), .. } => (gate, u64::MAX),
            _ => continue,
        };
        let entry = released.entry(Arc::as_ptr(&gate)).or_insert((gate, 0));
        entry.1 = entry.1.max(seq);
    }
    if released.is_empty() {
        return;
    }
    let released: Vec<(Arc<CommitGate>, u64)> = released.into_values().collect();
    store.after_durable(Box::new(move || {
        for (gate, seq) in released {
            gate.advance(seq);
        }
    }));
}
