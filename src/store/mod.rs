//! Durable state: what a session's client was told survives a restart.
//!
//! A [`Store`] keeps sessions, subagent records, tasks with their
//! checkpoints, memories, undelivered mailbox messages, and each session's
//! outgoing journal. Three implementations: [`MemoryStore`] (nothing is
//! kept: today's behaviour, tests, benches), and SQLite and PostgreSQL
//! through one SQL store (`sql`).
//!
//! Nothing in the actor runtime waits on I/O. The supervisor and subagent
//! actors *record* each state change on their session's [`SessionLog`]
//! (a channel send), and one writer thread per process (`writer`) commits
//! the changes of every session in batches (group commit). Every line for
//! a client is recorded too, as a journal entry, after the changes it
//! reports; the transport releases a line only once its entry is committed
//! ([`CommitGate`]). So a reply or event that reports a change is never
//! seen before the change is durable.
//!
//! - `backend`: the [`Store`] trait, its futures and errors.
//! - `memory_store`: [`MemoryStore`], which keeps nothing.
//! - `url`: [`StoreUrl`], which store to open; `open`: opening it.
//! - `clock`: the wall clock in the store's milliseconds.
//! - `change`: the changes and the rows loaded back.
//! - `sql/`: the SQLite and PostgreSQL store, its migrations and queries.
//! - `batch/`: a batch of changes folded per row into a few multi-row statements.
//! - `writer/`: the writer thread, [`StoreHandle`], [`SessionLog`], [`CommitGate`].
//! - `cluster/`: several hosts, which node owns each session (PostgreSQL).
//! - `lock`: the data directory's lock file.
//!
//! Each file imports an item from the file that defines it, never through
//! this one or a folder's `mod.rs` (a re-export there is an import of that
//! file, which imports its children back: one import circle of the whole
//! store). So the folders make visible to `store` the files others read
//! (`writer::commit_gate`, `writer::writer_settings`, `cluster::fence`),
//! and what the folders share is `pub(crate)` inside private modules,
//! which no one outside `store` can name: `pub(in crate::store)` would say
//! the same, but its path names this file.

mod backend;
mod batch;
mod change;
mod clock;
mod cluster;
mod lock;
mod memory_store;
mod open;
mod sql;
mod url;
mod writer;

pub use backend::{CommitError, CommitFuture, Store, StoreError, StoreFuture};
pub use change::*;
pub use cluster::{Acquire, Acquired, ClusterSettings, Fence, SessionOwner};
pub use lock::DataDirLock;
pub use memory_store::MemoryStore;
pub use open::open;
pub use sql::sqlite_before_start;
pub use url::StoreUrl;
pub use writer::{CommitGate, CommitStats, LineMark, SessionLog, StoreHandle, WriterSettings};
