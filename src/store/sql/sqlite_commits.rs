//! [`SqliteCommits`]: the connection SQLite batches are committed on, owned
//! by the writer thread and called on it, with its statements prepared once.
//!
//! Why not sqlx's pool, which serves loads: sqlx runs each SQLite
//! connection on a worker thread of its own, so every call is a hand-off
//! and a wake-up, and a batch ran as one multi-statement script that SQLite
//! parsed again at every commit (its statement cache keys whole scripts,
//! and no two batches spell the same one). Profiled on the TCP bench, that
//! parse was 30 % of the worker's time and the hand-offs another 10 %. Here
//! each statement is looked up in a cache by its text (statements take few
//! shapes: see `batch::statement::chunk_sizes`), bound and stepped, on the
//! writer's own thread.
//!
//! Both connections open the same file in WAL mode: the writer thread is
//! the only one that writes, and a load (on sqlx's connection) that follows
//! a commit sees it, as any later reader of the file does. A third
//! connection checkpoints the WAL, on a thread of its own
//! (`sqlite_checkpoints`).

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use rusqlite::{Connection, TransactionBehavior};

use super::sqlite_checkpoints::{checkpoint, Checkpointer};
use super::sqlite_wal_sync::{Durable, WalSync};
use crate::store::batch::{Arg, Op};

/// Prepared statements kept: a table's statement in each of its chunk
/// sizes (powers of two up to 256), for every statement a batch can hold.
const STATEMENT_CACHE: usize = 512;

/// The connection SQLite batches are committed on.
#[derive(Debug)]
pub(super) struct SqliteCommits {
    // Only the writer thread calls it; the lock is never contended, and
    // makes the store `Sync` as its trait asks.
    connection: Mutex<Connection>,
    // With `full_sync`: syncs the WAL after commits, off this thread.
    wal_sync: Option<WalSync>,
    checkpointer: Checkpointer,
}

impl SqliteCommits {
    /// Opens the store's file (already created and migrated) for commits,
    /// syncing every commit to disk when `full_sync`.
    pub(super) fn open(path: &Path, full_sync: bool) -> Result<Self, String> {
        let failed =
            |err: rusqlite::Error| format!("cannot open the SQLite store {} for commits: {err}", path.display());
        let connection = Connection::open(path).map_err(failed)?;
        connection.busy_timeout(Duration::from_secs(5)).map_err(failed)?;
        // `synchronous` is the connection's own setting, not the file's.
        // `NORMAL` either way: with `full_sync`, `WalSync` syncs each
        // commit before anything waiting for it is released.
        connection.pragma_update(None, "synchronous", "NORMAL").map_err(failed)?;
        let mode: String = connection.pragma_query_value(None, "journal_mode", |row| row.get(0)).map_err(failed)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(format!("the SQLite store {} is not in WAL mode ({mode})", path.display()));
        }
        // The checkpoint thread checkpoints, never a commit.
        connection.pragma_update(None, "wal_autocheckpoint", 0).map_err(failed)?;
        // A statement that may fail halfway keeps a journal of the pages it
        // changed, to undo them; past 64 KiB SQLite spilled it to a
        // temporary file, a write system call a page on every commit.
        connection.pragma_update(None, "temp_store", "MEMORY").map_err(failed)?;
        connection.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        let wal_sync = if full_sync { Some(WalSync::start(path)?) } else { None };
        let checkpointer = Checkpointer::start(path, full_sync)?;
        Ok(Self { connection: Mutex::new(connection), wal_sync, checkpointer })
    }

    /// Runs `ops` in one transaction: all of them, or none.
    pub(super) fn run(&self, ops: &[Op]) -> Result<(), rusqlite::Error> {
        if ops.is_empty() {
            return Ok(());
        }
        if let Some(failure) = self.wal_sync.as_ref().and_then(WalSync::failure) {
            // Nothing is acknowledged any more: the store is failing.
            return Err(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_IOERR),
                Some(failure),
            ));
        }
        let mut connection = self.connection.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // Immediate: it takes the write lock at once, so a statement never
        // meets a busy database halfway through the batch.
        let transaction = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
        for op in ops {
            let mut statement = transaction.prepare_cached(&op.sql)?;
            for (index, arg) in op.args.iter().enumerate() {
                bind(&mut statement, index + 1, arg)?;
            }
            statement.raw_execute()?;
        }
        // Dropped without a commit (an error above), it rolls back.
        transaction.commit()?;
        if self.checkpointer.committed() {
            // Between two commits nothing is written behind it: the WAL is
            // copied whole, and starts over at the next commit.
            if let Err(err) = checkpoint(&connection) {
                log::warn!("store: the writer's SQLite checkpoint failed: {err}");
            }
        }
        Ok(())
    }

    /// Runs `durable` once every commit so far is on disk: at once without
    /// `full_sync` (SQLite's `NORMAL`: on disk at the next checkpoint).
    pub(super) fn after_sync(&self, durable: Durable) {
        match &self.wal_sync {
            Some(wal_sync) => wal_sync.after_sync(durable),
            None => durable(),
        }
    }
}

/// Binds `arg` to parameter `index` (1-based).
fn bind(statement: &mut rusqlite::CachedStatement<'_>, index: usize, arg: &Arg) -> Result<(), rusqlite::Error> {
    match arg {
        Arg::Text(text) => statement.raw_bind_parameter(index, &**text),
        Arg::OptText(text) => statement.raw_bind_parameter(index, text.as_deref()),
        Arg::Int(n) => statement.raw_bind_parameter(index, n),
        Arg::OptInt(n) => statement.raw_bind_parameter(index, n),
        // No statement compiled for SQLite holds an array (PostgreSQL's
        // columns); a `NULL` keeps the parameters in place should one get here.
        Arg::Texts(_) | Arg::Ints(_) => statement.raw_bind_parameter(index, rusqlite::types::Null),
    }
}
