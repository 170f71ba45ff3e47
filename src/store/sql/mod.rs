//! The SQL store, on SQLite (the embedded default) or PostgreSQL, with
//! sqlx. Both run the same migrations (`migrations/`, embedded in the
//! binary) and the same statements: plain `TEXT`/`BIGINT` columns and `$n`
//! placeholders, which both engines take. Each change becomes statements
//! (`Op`s) once; a batch runs them in one transaction.
//!
//! - `sql_store`: [`SqlStore`] on its pool, and its `Store` implementation.
//! - `connect`: opening SQLite or PostgreSQL.
//! - `migrations`: the embedded migrations and running them.
//! - `execute`: running a compiled batch in one transaction on PostgreSQL.
//! - `sqlite_commits`: the connection SQLite's batches are committed on.
//! - `sqlite_checkpoints`: the thread that checkpoints SQLite's WAL.
//! - `sqlite_wal_sync`: the thread that syncs SQLite's commits to disk.
//! - `sqlite_process`: SQLite's process-wide settings.
//! - `signalled`: the lock and condition variable those two threads wait on.
//! - `load_session`: loading one stored session whole.
//! - `face_queries`: reading what the faces keep beside a session's tree.
//! - `cells`: reading stored columns back.
//! - `temp_sqlite`: a test's own SQLite file.

mod cells;
mod connect;
mod execute;
mod face_queries;
mod load_session;
mod migrations;
mod signalled;
mod sql_store;
mod sqlite_checkpoints;
mod sqlite_commits;
mod sqlite_process;
mod sqlite_wal_sync;
#[cfg(test)]
mod temp_sqlite;

pub(super) use sql_store::SqlStore;
pub use sqlite_process::sqlite_before_start;
