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
//! - `change`: the changes and the rows loaded back.
//! - `sql`: the SQLite and PostgreSQL store, its migrations and queries.
//! - `batch`: a batch of changes folded per row into a few multi-row statements.
//! - `writer`: the writer thread, [`StoreHandle`], [`SessionLog`], [`CommitGate`].
//! - `lock`: the data directory's lock file.

mod batch;
mod change;
mod cluster;
mod lock;
mod sql;
mod writer;

use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;

pub use change::*;
pub use cluster::{Acquire, Acquired, ClusterSettings, Fence, SessionOwner};
pub use lock::DataDirLock;
pub use writer::{CommitGate, CommitStats, SessionLog, StoreHandle};

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
}

/// The store that keeps nothing: sessions end with the process.
#[derive(Debug, Default, Clone, Copy)]
pub struct MemoryStore;

impl Store for MemoryStore {
    fn kind(&self) -> &'static str {
        "memory"
    }

    fn commit<'a>(&'a self, _batch: &'a [Change], _retained: u64, _fence: Option<&'a Fence>) -> CommitFuture<'a> {
        Box::pin(async { Ok(()) })
    }

    fn load_session<'a>(&'a self, _session_id: &'a str) -> StoreFuture<'a, Option<StoredSession>> {
        Box::pin(async { Ok(None) })
    }

    fn delete_expired(&self, _before_ms: i64) -> StoreFuture<'_, u64> {
        Box::pin(async { Ok(0) })
    }

    fn ping(&self) -> StoreFuture<'_, ()> {
        Box::pin(async { Ok(()) })
    }

    fn resumable_sessions(&self, _limit: i64) -> StoreFuture<'_, Vec<String>> {
        Box::pin(async { Ok(Vec::new()) })
    }
}

/// Which store to open, from `--store` or `[store]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// Keep nothing.
    Memory,
    /// An SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL URL (`postgres://…` or `postgresql://…`).
    Postgres(String),
}

impl StoreUrl {
    /// Parses `memory`, `sqlite:PATH` (or `sqlite://PATH`) or `postgres://…`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text == "memory" {
            return Ok(Self::Memory);
        }
        if let Some(path) = text.strip_prefix("sqlite://").or_else(|| text.strip_prefix("sqlite:")) {
            if path.is_empty() {
                return Err("store `sqlite:` needs a file path (sqlite:PATH)".into());
            }
            return Ok(Self::Sqlite(PathBuf::from(path)));
        }
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            return Ok(Self::Postgres(text.to_owned()));
        }
        Err(format!("unknown store `{}`: expected memory, sqlite:PATH or postgres://…", redact(text)))
    }

    /// The default SQLite file under `data_dir`.
    pub fn default_sqlite(data_dir: &Path) -> Self {
        Self::Sqlite(data_dir.join("subagentd.sqlite3"))
    }

    /// For logs: the kind and where, with any password hidden.
    pub fn describe(&self) -> String {
        match self {
            Self::Memory => "memory (nothing kept across restarts)".into(),
            Self::Sqlite(path) => format!("sqlite:{}", path.display()),
            Self::Postgres(url) => redact(url),
        }
    }
}

/// A URL with its password (between `:` and `@` of the authority) hidden.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((user_info, host)) => match user_info.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:***@{host}{path}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// Opens the store `url` names: connects, runs the migrations, and starts
/// the writer thread. A store that cannot be reached, or whose schema is
/// newer than this build knows, is an error naming why.
///
/// A PostgreSQL store makes this process a node of a cluster (`cluster`,
/// or a fresh node id and the default lease): it joins before this returns.
pub fn open(
    url: &StoreUrl,
    settings: writer::WriterSettings,
    cluster: Option<ClusterSettings>,
) -> Result<StoreHandle, String> {
    match url {
        StoreUrl::Memory => Ok(StoreHandle::memory()),
        StoreUrl::Sqlite(_) => writer::start(url.clone(), settings, None),
        StoreUrl::Postgres(_) => {
            writer::start(url.clone(), settings, Some(cluster.unwrap_or_else(ClusterSettings::fresh)))
        }
    }
}

pub use writer::WriterSettings;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_and_passwords_never_show() {
        assert_eq!(StoreUrl::parse("memory").unwrap(), StoreUrl::Memory);
        assert_eq!(StoreUrl::parse("sqlite:/tmp/x.db").unwrap(), StoreUrl::Sqlite("/tmp/x.db".into()));
        assert_eq!(StoreUrl::parse("sqlite:///tmp/x.db").unwrap(), StoreUrl::Sqlite("/tmp/x.db".into()));
        let pg = StoreUrl::parse("postgres://me:secret@db:5432/test").unwrap();
        assert_eq!(pg.describe(), "postgres://me:***@db:5432/test");
        assert!(StoreUrl::parse("mysql://x").unwrap_err().contains("unknown store"));
        assert!(!StoreUrl::parse("redis://u:pw@h").unwrap_err().contains("pw"));
        assert!(StoreUrl::parse("sqlite:").is_err());
    }
}
