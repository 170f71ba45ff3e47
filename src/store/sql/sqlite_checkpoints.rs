//! [`Checkpointer`]: copies SQLite's WAL back into the database file on a
//! thread of its own, so that the store writer never stalls on a checkpoint.
//!
//! Left to SQLite, the connection whose commit takes the WAL past 1 000
//! pages runs the checkpoint inside that commit: it reads every page
//! back, writes it into the database file and syncs the file. On the store
//! writer, that was a stall of several milliseconds every few dozen
//! commits, with every session's replies waiting behind it. Here the
//! commits connection never checkpoints by itself; this thread does,
//! `PASSIVE` (it waits for no one and blocks no one), on its own
//! connection, every [`COMMITS_PER_CHECKPOINT`] commits.
//!
//! A passive checkpoint running beside the writer may never find the WAL
//! wholly copied, and SQLite starts the WAL over only when it is. So
//! [`Checkpointer::committed`] tells the writer when the WAL has outgrown
//! [`WAL_PAGES_LIMIT`]; the writer then checkpoints between two of its own
//! commits, where nothing is written behind it, and the WAL starts over.

use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::Connection;

use super::signalled::Signalled;

/// Commits between two checkpoints. At the bench's 30–40 WAL pages a
/// commit, about SQLite's own 1 000-page interval.
const COMMITS_PER_CHECKPOINT: u64 = 32;

/// WAL pages past which the writer checkpoints by itself (64 MiB of 4 KiB
/// pages).
const WAL_PAGES_LIMIT: i64 = 16_384;

#[derive(Debug, Default)]
struct State {
    commits: u64,
    stopping: bool,
    // The pages the WAL held at the last checkpoint.
    wal_pages: i64,
}

/// The checkpoint thread of one SQLite store.
#[derive(Debug)]
pub(super) struct Checkpointer {
    shared: Arc<Signalled<State>>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Starts checkpointing the store at `path` on its own connection, with
    /// the commits' `synchronous` setting (which syncs a checkpoint's
    /// writes either way).
    pub(super) fn start(path: &Path, full_sync: bool) -> Result<Self, String> {
        let failed =
            |err: rusqlite::Error| format!("cannot open the SQLite store {} for checkpoints: {err}", path.display());
        let connection = Connection::open(path).map_err(failed)?;
        connection.busy_timeout(Duration::from_secs(5)).map_err(failed)?;
        connection.pragma_update(None, "synchronous", if full_sync { "FULL" } else { "NORMAL" }).map_err(failed)?;
        let shared = Arc::new(Signalled::<State>::default());
        let theirs = shared.clone();
        let thread = std::thread::Builder::new()
            .name("sqlite-checkpoint".into())
            .spawn(move || run(&connection, &theirs))
            .map_err(|err| format!("cannot start the SQLite checkpoint thread: {err}"))?;
        Ok(Self { shared, thread: Some(thread) })
    }

    /// A commit happened. Returns whether the WAL has outgrown
    /// [`WAL_PAGES_LIMIT`], so that the writer should checkpoint now.
    pub(super) fn committed(&self) -> bool {
        let mut state = self.shared.lock();
        state.commits += 1;
        if state.commits.is_multiple_of(COMMITS_PER_CHECKPOINT) {
            self.shared.notify();
        }
        if state.wal_pages > WAL_PAGES_LIMIT {
            // Once: the writer's checkpoint starts the WAL over.
            state.wal_pages = 0;
            return true;
        }
        false
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.shared.lock().stopping = true;
        self.shared.notify();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

// The thread: a passive checkpoint every `COMMITS_PER_CHECKPOINT` commits.
fn run(connection: &Connection, shared: &Signalled<State>) {
    let mut done = 0;
    loop {
        {
            let state = shared
                .wait_while(shared.lock(), |state| !state.stopping && state.commits < done + COMMITS_PER_CHECKPOINT);
            if state.stopping {
                return;
            }
            done = state.commits;
        }
        match checkpoint(connection) {
            Ok(wal_pages) => shared.lock().wal_pages = wal_pages,
            Err(err) => log::warn!("store: an SQLite checkpoint failed (the next one retries): {err}"),
        }
    }
}

/// Runs a passive checkpoint on `connection`; returns the pages the WAL
/// holds (SQLite's `log` column).
pub(super) fn checkpoint(connection: &Connection) -> Result<i64, rusqlite::Error> {
    connection.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| row.get(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn the_thread_copies_the_wal_into_the_database_file_every_few_commits() {
        let dir = std::env::temp_dir().join(format!("subagentd-checkpoints-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("state.sqlite3");
        let writer = Connection::open(&path).expect("open");
        let mode: String = writer.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0)).expect("wal");
        assert_eq!(mode, "wal");
        writer.pragma_update(None, "wal_autocheckpoint", 0).expect("no checkpoints of its own");
        writer.execute_batch("CREATE TABLE t (n INTEGER, text TEXT)").expect("table");
        let checkpointer = Checkpointer::start(&path, true).expect("start");
        let file_size = || std::fs::metadata(&path).map(|meta| meta.len()).unwrap_or(0);
        let before = file_size();
        for n in 0..COMMITS_PER_CHECKPOINT {
            writer.execute("INSERT INTO t VALUES (?1, ?2)", rusqlite::params![n, "x".repeat(4000)]).expect("insert");
            assert!(!checkpointer.committed(), "the WAL is far below its limit");
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while file_size() < before + 32 * 4000 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(file_size() >= before + 32 * 4000, "the rows reached the database file: {} bytes", file_size());
        drop(checkpointer);
        std::fs::remove_dir_all(dir).ok();
    }
}
