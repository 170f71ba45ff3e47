//! The [`Store`] trait every backend implements, its futures and its errors.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use super::change::{Change, FaceQuery, StoredSession};
use super::cluster::fence::Fence;

/// A boxed future of a store operation.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// Why a store operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreError(pub String);

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StoreError {}

/// Why a commit failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommitError {
    /// The store refused the batch: these sessions are no longer this
    /// node's (another node took them over). Nothing of the batch was kept.
    Fenced(Vec<String>),
    /// The store failed (the batch is retried).
    Store(StoreError),
}

/// A boxed future of a commit.
pub type CommitFuture<'a> = Pin<Box<dyn Future<Output = Result<(), CommitError>> + Send + 'a>>;

impl From<sqlx::Error> for StoreError {
    fn from(err: sqlx::Error) -> Self {
        Self(err.to_string())
    }
}

impl From<rusqlite::Error> for StoreError {
    fn from(err: rusqlite::Error) -> Self {
        Self(err.to_string())
    }
}

/// Where durable state lives: one trait, three implementations.
///
/// Writes come as batches of [`Change`]s, each batch one transaction; reads
/// load one whole session. Implementations run on the writer thread's
/// runtime, never on an actor's.
pub trait Store: Send + Sync + fmt::Debug + 'static {
    /// `memory`, `sqlite` or `postgres`.
    fn kind(&self) -> &'static str;

    /// Commits `batch` in one transaction, keeping the newest
    /// `journal_retained` journal lines of each session it touches. With a
    /// `fence` (several hosts), the batch is refused whole unless this node
    /// holds every session in it at the epoch the fence names.
    fn commit<'a>(&'a self, batch: &'a [Change], journal_retained: u64, fence: Option<&'a Fence>) -> CommitFuture<'a>;

    /// Runs `durable` once every commit that returned so far is durable.
    /// By default a commit is durable when it returns; a store that makes
    /// commits durable after they return (SQLite syncing its WAL on a
    /// thread of its own) runs it later, in commit order.
    fn after_durable(&self, durable: Box<dyn FnOnce() + Send>) {
        durable();
    }

    /// Loads a stored session, or `None` when the store has no such session.
    fn load_session<'a>(&'a self, session_id: &'a str) -> StoreFuture<'a, Option<StoredSession>>;

    /// Deletes sessions untouched since `before_ms` (ms since the epoch);
    /// returns how many.
    fn delete_expired(&self, before_ms: i64) -> StoreFuture<'_, u64>;

    /// Checks that the store answers.
    fn ping(&self) -> StoreFuture<'_, ()>;

    /// Up to `limit` stored sessions that had a task running when last
    /// stored (they resume without waiting for their clients).
    fn resumable_sessions(&self, limit: i64) -> StoreFuture<'_, Vec<String>>;

    /// Reads what the faces keep beside a session's tree. A store that
    /// keeps nothing has nothing.
    fn query<'a>(&'a self, query: &'a FaceQuery) -> StoreFuture<'a, Vec<String>> {
        let _ = query;
        Box::pin(async { Ok(Vec::new()) })
    }
}
