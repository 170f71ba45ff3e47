//! [`SqlStore`]: the SQL store on its pool, and its [`Store`] implementation.

use sqlx::postgres::PgPool;
use sqlx::sqlite::SqlitePool;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::cells::{read_row, Cell};
use super::execute::run_statements;
use super::sqlite_commits::SqliteCommits;
use crate::store::backend::{CommitError, CommitFuture, Store, StoreError, StoreFuture};
use crate::store::batch::{self, Op};
use crate::store::change::{Change, StoredSession};
use crate::store::cluster::{self, Fence};

/// The pool of either engine.
#[derive(Debug, Clone)]
pub(super) enum Pool {
    /// Loads run on sqlx's pool; batches commit on the writer thread's own
    /// connection.
    Sqlite(SqlitePool, Arc<SqliteCommits>),
    /// Loads and commits alike.
    Postgres(PgPool),
}

/// The SQL store.
#[derive(Debug, Clone)]
pub(crate) struct SqlStore {
    pub(super) pool: Pool,
    // Set while the last commit failed: its outcome may be unknown (a
    // connection lost after its `COMMIT` was sent), so the next batch,
    // which retries it, is compiled to find its rows stored already.
    pub(super) retrying: Arc<AtomicBool>,
}

// Rows are read one at a time as the engine yields them, each into its
// cells and then dropped: all of a large session's rows held at once (as
// `fetch_all` holds them, SQLite's values in C memory) would leave the
// process that much larger for good after a restart's load.
macro_rules! fetch_rows {
    ($pool:expr, $sql:expr, $key:expr, $shape:expr) => {{
        use futures_util::TryStreamExt;
        let mut rows = sqlx::query($sql).bind($key).fetch($pool);
        let mut read = Vec::new();
        while let Some(row) = rows.try_next().await? {
            read.push(read_row(&row, $shape)?);
        }
        read
    }};
}

impl SqlStore {
    pub(super) fn dialect(&self) -> batch::Dialect {
        match self.pool {
            Pool::Sqlite(..) => batch::Dialect::Sqlite,
            Pool::Postgres(_) => batch::Dialect::Postgres,
        }
    }

    pub(crate) fn kind(&self) -> &'static str {
        match self.pool {
            Pool::Sqlite(..) => "sqlite",
            Pool::Postgres(_) => "postgres",
        }
    }

    async fn run(&self, ops: &[Op<'_>], fence: Option<&Fence>) -> Result<(), CommitError> {
        match &self.pool {
            // Blocking, on the writer thread, which has nothing else to do
            // until the batch is committed.
            Pool::Sqlite(_, commits) => commits.run(ops).map_err(|err| CommitError::Store(err.into())),
            Pool::Postgres(pool) => {
                run_statements(pool, ops, fence).await.map_err(|err| match cluster::fenced_sessions(&err) {
                    Some(lost) => CommitError::Fenced(lost),
                    None => CommitError::Store(err.into()),
                })
            }
        }
    }

    /// The PostgreSQL pool (the cluster's statements use it too).
    pub(crate) fn pg_pool(&self) -> Option<PgPool> {
        match &self.pool {
            Pool::Postgres(pool) => Some(pool.clone()),
            Pool::Sqlite(..) => None,
        }
    }

    pub(super) async fn fetch(&self, sql: &'static str, key: &str, shape: &str) -> Result<Vec<Vec<Cell>>, StoreError> {
        Ok(match &self.pool {
            Pool::Sqlite(pool, _) => fetch_rows!(pool, sql, key, shape),
            Pool::Postgres(pool) => fetch_rows!(pool, sql, key, shape),
        })
    }

    /// Commits `batch` in one transaction, behind `fence` when given, and
    /// trims each session's journal to its newest `retained` lines.
    async fn commit_with_retention(
        &self,
        batch: &[Change],
        retained: u64,
        fence: Option<&Fence>,
    ) -> Result<(), CommitError> {
        if batch.is_empty() {
            return Ok(());
        }
        let folded = batch::fold(batch);
        let retried = self.retrying.load(Ordering::Acquire);
        let outcome = self.run(&batch::compile(&folded, retained, self.dialect(), retried), fence).await;
        match &outcome {
            Ok(()) => self.retrying.store(false, Ordering::Release),
            Err(CommitError::Store(_)) => self.retrying.store(true, Ordering::Release),
            // Refused as a whole: nothing of it was written.
            Err(CommitError::Fenced(_)) => {}
        }
        outcome
    }

    async fn delete_expired(&self, before_ms: i64) -> Result<u64, StoreError> {
        let expired = self.fetch_before(before_ms).await?;
        let mut ops = Vec::new();
        for session in &expired {
            batch::end_session(self.dialect(), session, &mut ops);
            batch::drop_lease(self.dialect(), session, &mut ops);
        }
        self.run(&ops, None).await.map_err(|err| match err {
            CommitError::Store(err) => err,
            CommitError::Fenced(_) => StoreError("expiry was fenced".into()),
        })?;
        Ok(expired.len() as u64)
    }

    /// Stored sessions with a task running when they were last stored (at
    /// most `limit`): after a restart they go on without their clients.
    async fn resumable_sessions(&self, limit: i64) -> Result<Vec<String>, StoreError> {
        const SQL: &str = "SELECT DISTINCT session_id FROM tasks LIMIT $1";
        let rows = match &self.pool {
            Pool::Sqlite(pool, _) => fetch_rows!(pool, SQL, limit, "t"),
            Pool::Postgres(pool) => fetch_rows!(pool, SQL, limit, "t"),
        };
        Ok(rows.into_iter().filter_map(|mut row| row[0].text()).collect())
    }

    async fn fetch_before(&self, before_ms: i64) -> Result<Vec<String>, StoreError> {
        const SQL: &str = "SELECT id FROM sessions WHERE touched_ms < $1";
        let rows = match &self.pool {
            Pool::Sqlite(pool, _) => fetch_rows!(pool, SQL, before_ms, "t"),
            Pool::Postgres(pool) => fetch_rows!(pool, SQL, before_ms, "t"),
        };
        Ok(rows.into_iter().filter_map(|mut row| row[0].text()).collect())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        match &self.pool {
            Pool::Sqlite(pool, _) => sqlx::query("SELECT 1").execute(pool).await.map(drop)?,
            Pool::Postgres(pool) => sqlx::query("SELECT 1").execute(pool).await.map(drop)?,
        }
        Ok(())
    }
}

impl Store for SqlStore {
    fn kind(&self) -> &'static str {
        SqlStore::kind(self)
    }

    fn commit<'a>(&'a self, batch: &'a [Change], journal_retained: u64, fence: Option<&'a Fence>) -> CommitFuture<'a> {
        Box::pin(self.commit_with_retention(batch, journal_retained, fence))
    }

    fn after_durable(&self, durable: Box<dyn FnOnce() + Send>) {
        match &self.pool {
            Pool::Sqlite(_, commits) => commits.after_sync(durable),
            // Committed with `synchronous_commit` on: durable already.
            Pool::Postgres(_) => durable(),
        }
    }

    fn load_session<'a>(&'a self, session_id: &'a str) -> StoreFuture<'a, Option<StoredSession>> {
        Box::pin(SqlStore::load_session(self, session_id))
    }

    fn delete_expired(&self, before_ms: i64) -> StoreFuture<'_, u64> {
        Box::pin(SqlStore::delete_expired(self, before_ms))
    }

    fn ping(&self) -> StoreFuture<'_, ()> {
        Box::pin(SqlStore::ping(self))
    }

    fn resumable_sessions(&self, limit: i64) -> StoreFuture<'_, Vec<String>> {
        Box::pin(SqlStore::resumable_sessions(self, limit))
    }

    fn query<'a>(&'a self, query: &'a crate::store::change::FaceQuery) -> StoreFuture<'a, Vec<String>> {
        Box::pin(SqlStore::face_query(self, query))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use super::super::temp_sqlite::TempSqlite;
    use super::SqlStore;
    use crate::ids::SubagentId;
    use crate::store::backend::{CommitError, Store};
    use crate::store::change::{Change, SessionRow, SubagentRow};
    use crate::store::url::StoreUrl;
    use crate::store::writer::writer_settings::WriterSettings;

    /// A spawn's row is a plain insert, which fails on a stored row; the
    /// failure makes the next commit a retry, whose upsert finds the row
    /// stored and commits (as after a commit that landed but whose answer
    /// was lost); a success ends the retrying.
    #[tokio::test]
    async fn a_batch_retried_after_a_failed_commit_finds_its_rows_stored_and_commits() {
        let file = TempSqlite::new("retry");
        let store =
            SqlStore::connect(&StoreUrl::Sqlite(file.path.clone()), &WriterSettings::default()).await.expect("open");
        let session: Arc<str> = "s".into();
        let row = SessionRow::handshaken_tcp(&session);
        let spawn = || Change::Subagent {
            session: session.clone(),
            id: SubagentId::parse("sub_00000001").expect("id"),
            row: SubagentRow::spawned(),
        };
        store.commit(&[Change::SessionOpened(row), spawn()], 1024, None).await.expect("the first commit");
        let again = [spawn()];
        let first_try = store.commit(&again, 1024, None).await;
        assert!(matches!(first_try, Err(CommitError::Store(_))), "a plain insert of a stored row fails");
        assert!(store.retrying.load(Ordering::Acquire));
        store.commit(&again, 1024, None).await.expect("the retry upserts");
        assert!(!store.retrying.load(Ordering::Acquire), "a success ends the retrying");
        let stored = store.load_session("s").await.expect("load").expect("stored");
        assert_eq!(stored.subagents.len(), 1);
    }
}
