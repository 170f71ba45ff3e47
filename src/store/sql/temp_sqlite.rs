//! [`TempSqlite`]: an SQLite file of a test's own, removed with its WAL
//! and shared-memory files when the test is done.

use std::path::PathBuf;

/// A fresh path for an SQLite file under the temporary directory; its
/// files go when it is dropped (declare it before the store that opens
/// it, so that the store closes first).
pub(super) struct TempSqlite {
    pub(super) path: PathBuf,
}

impl TempSqlite {
    /// A path no other test (or run) uses, named after `what`.
    pub(super) fn new(what: &str) -> Self {
        let name = format!("subagentd-{what}-{}-{}.sqlite3", std::process::id(), fastrand::u64(..));
        Self { path: std::env::temp_dir().join(name) }
    }
}

impl Drop for TempSqlite {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.path.display()));
        }
    }
}
