//! [`WriterSettings`]: how the store writer batches and retains.

use std::time::Duration;

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
