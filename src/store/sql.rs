//! The SQL store, on SQLite (the embedded default) or PostgreSQL, with
//! sqlx. Both run the same migrations (`migrations/`, embedded in the
//! binary) and the same statements: plain `TEXT`/`BIGINT` columns and `$n`
//! placeholders, which both engines take. Each change becomes statements
//! ([`Op`]s) once; a batch runs them in one transaction.

use serde_json::Value;
use sqlx::migrate::{MigrateError, Migration, MigrationSource, MigrationType, Migrator};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{ColumnIndex, ConnectOptions, Connection, Decode, Row, Type};
use std::borrow::Cow;
use std::collections::HashMap;
use std::str::FromStr;
use std::time::Duration;

use super::batch::{self, Arg, Op};
use super::cluster::{self, Fence};
use super::writer::WriterSettings;
use super::{
    Change, Checkpoint, CommitError, CommitFuture, SessionRow, StoreError, StoreFuture, StoreUrl, StoredSession,
    StoredSubagent, StoredTask, SubagentRow,
};
use crate::entries::InboxMessage;
use crate::ids::SubagentId;
use crate::protocol::wire::SubagentMessagePayload;
use crate::protocol::wire::{SubagentStatus, Usage};

/// The migrations this build knows, oldest first, for either engine (the
/// cluster's tables exist on both; its functions only on PostgreSQL).
const MIGRATIONS: &[(i64, &str, &str, &str)] = &[
    (
        1,
        "initial",
        include_str!("../../migrations/0001_initial.sql"),
        include_str!("../../migrations/0001_initial.sql"),
    ),
    (
        2,
        "cluster",
        include_str!("../../migrations/0002_cluster.sqlite.sql"),
        include_str!("../../migrations/0002_cluster.postgres.sql"),
    ),
    (3, "usage", include_str!("../../migrations/0003_usage.sql"), include_str!("../../migrations/0003_usage.sql")),
    (
        4,
        "pending_sessions",
        include_str!("../../migrations/0004_pending_sessions.sql"),
        include_str!("../../migrations/0004_pending_sessions.sql"),
    ),
    (
        5,
        "presence_after_restart",
        include_str!("../../migrations/0005_presence_after_restart.sqlite.sql"),
        include_str!("../../migrations/0005_presence_after_restart.postgres.sql"),
    ),
];

/// The embedded migrations of one engine, as sqlx's migrator takes them.
#[derive(Debug)]
struct Embedded(batch::Dialect);

impl MigrationSource<'static> for Embedded {
    fn resolve(self) -> futures_util::future::BoxFuture<'static, Result<Vec<Migration>, sqlx::error::BoxDynError>> {
        Box::pin(async move {
            Ok(MIGRATIONS
                .iter()
                .map(|(version, description, sqlite, postgres)| {
                    let sql = match self.0 {
                        batch::Dialect::Sqlite => sqlite,
                        batch::Dialect::Postgres => postgres,
                    };
                    (version, description, sql)
                })
                .map(|(version, description, sql)| {
                    Migration::new(
                        *version,
                        Cow::Borrowed(description),
                        MigrationType::Simple,
                        Cow::Borrowed(sql),
                        false,
                    )
                })
                .collect())
        })
    }
}

#[derive(Debug, Clone)]
enum Pool {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// The SQL store.
#[derive(Debug, Clone)]
pub(super) struct SqlStore {
    pool: Pool,
}

/// One value read back.
#[derive(Debug)]
enum Cell {
    Text(Option<String>),
    Int(i64),
}

impl Cell {
    fn text(&mut self) -> Option<String> {
        match self {
            Self::Text(text) => text.take(),
            Self::Int(_) => None,
        }
    }

    fn int(&self) -> i64 {
        match self {
            Self::Int(n) => *n,
            Self::Text(_) => 0,
        }
    }
}

/// Most parameters in one PostgreSQL statement (the protocol allows 65 535).
const PG_MAX_PARAMS: usize = 30_000;

/// Runs a batch on PostgreSQL as few statements as it can: its statements
/// become the parts of one `WITH … SELECT 1` (data-modifying CTEs), so a
/// batch of any size is one round trip and one implicit transaction. The
/// batch is folded per row first, so no two parts touch the same row (they
/// all see the snapshot from before the statement). Past `PG_MAX_PARAMS`
/// parameters it takes several such statements in one transaction. The
/// first carries the `fence` (the node's epochs for the batch's sessions),
/// so the whole batch is refused when one of them is no longer this node's.
async fn run_statements(pool: &PgPool, ops: &[Op], fence: Option<&Fence>) -> Result<(), sqlx::Error> {
    let mut groups: Vec<&[Op]> = Vec::new();
    let (mut start, mut params) = (0, 0);
    for (index, op) in ops.iter().enumerate() {
        if index > start && params + op.args.len() > PG_MAX_PARAMS {
            groups.push(&ops[start..index]);
            (start, params) = (index, 0);
        }
        params += op.args.len();
    }
    if start < ops.len() {
        groups.push(&ops[start..]);
    }
    let statements: Vec<String> =
        groups.iter().enumerate().map(|(index, group)| combined(group, fence.is_some() && index == 0)).collect();
    let query = |index: usize| {
        let query = sqlx::query(&statements[index]);
        let query = match fence {
            Some(fence) if index == 0 => cluster::bind_fence(query, fence),
            _ => query,
        };
        bind_all(query, groups[index])
    };
    match groups.len() {
        0 => Ok(()),
        1 => query(0).execute(pool).await.map(drop),
        many => {
            let mut tx = pool.begin().await?;
            for index in 0..many {
                query(index).execute(&mut *tx).await?;
            }
            tx.commit().await
        }
    }
}

/// `query` with the values of `ops` bound, in order (either engine).
fn bind_all<'q, DB: sqlx::Database>(
    mut query: sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments<'q>>,
    ops: &'q [Op],
) -> sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments<'q>>
where
    &'q str: sqlx::Encode<'q, DB> + Type<DB>,
    Option<&'q str>: sqlx::Encode<'q, DB> + Type<DB>,
    i64: sqlx::Encode<'q, DB> + Type<DB>,
    Option<i64>: sqlx::Encode<'q, DB> + Type<DB>,
{
    for arg in ops.iter().flat_map(|op| &op.args) {
        query = match arg {
            Arg::Text(text) => query.bind(text.as_str()),
            Arg::OptText(text) => query.bind(text.as_deref()),
            Arg::Int(n) => query.bind(*n),
            Arg::OptInt(n) => query.bind(*n),
        };
    }
    query
}

/// One statement doing all of `ops` (each numbered `$1 …` on its own),
/// after the fence when `fenced` (its parameters come first).
fn combined(ops: &[Op], fenced: bool) -> String {
    match ops {
        [only] if !fenced => only.sql.clone(),
        _ => {
            let mut sql = String::from("WITH ");
            let mut offset = 0;
            if fenced {
                sql.push_str(cluster::FENCE_CTE);
                offset = cluster::FENCE_PARAMS;
            }
            for (index, op) in ops.iter().enumerate() {
                if index > 0 || fenced {
                    sql.push_str(", ");
                }
                sql.push_str(&format!("part{index} AS ({})", renumber(&op.sql, offset)));
                offset += op.args.len();
            }
            sql.push_str(if fenced { " SELECT ok FROM fence" } else { " SELECT 1" });
            sql
        }
    }
}

/// `sql` with every `$n` parameter moved up by `offset`.
fn renumber(sql: &str, offset: usize) -> String {
    let mut out = String::with_capacity(sql.len() + 16);
    let mut rest = sql;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let digits = rest[at + 1..].bytes().take_while(u8::is_ascii_digit).count();
        match rest[at + 1..at + 1 + digits].parse::<usize>() {
            Ok(n) => out.push_str(&format!("${}", n + offset)),
            Err(_) => out.push('$'),
        }
        rest = &rest[at + 1 + digits..];
    }
    out.push_str(rest);
    out
}

/// Runs a batch on SQLite as one script, `BEGIN; …; COMMIT`, in one call:
/// sqlx hands each call to SQLite's worker thread and waits for it, so one
/// call per statement would cost a thread round trip each. Every statement
/// takes its parameters as plain `?`, bound in order across the script.
async fn run_script(pool: &SqlitePool, ops: &[Op]) -> Result<(), sqlx::Error> {
    use sqlx::Executor;
    if ops.is_empty() {
        return Ok(());
    }
    let mut script = String::from("BEGIN;\n");
    for op in ops {
        script.push_str(&op.sql);
        script.push_str(";\n");
    }
    script.push_str("COMMIT;");
    let query = bind_all(sqlx::query(&script).persistent(false), ops);
    let mut conn = pool.acquire().await?;
    let outcome = conn.execute(query).await;
    if outcome.is_err() {
        // A statement failed inside the transaction: end it, keep nothing.
        let _ = conn.execute("ROLLBACK").await;
    }
    outcome.map(drop)
}

macro_rules! fetch_rows {
    ($pool:expr, $sql:expr, $key:expr, $shape:expr) => {{
        let rows = sqlx::query($sql).bind($key).fetch_all($pool).await?;
        rows.iter().map(|row| read_row(row, $shape)).collect::<Result<Vec<_>, StoreError>>()?
    }};
}

// Reads the columns of `row` as `shape` says: `t` text (maybe null), `i` integer.
fn read_row<R: Row>(row: &R, shape: &str) -> Result<Vec<Cell>, StoreError>
where
    usize: ColumnIndex<R>,
    for<'r> Option<String>: Decode<'r, R::Database>,
    String: Type<R::Database>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
{
    shape
        .chars()
        .enumerate()
        .map(|(index, kind)| match kind {
            'i' => row.try_get::<i64, _>(index).map(Cell::Int),
            _ => row.try_get::<Option<String>, _>(index).map(Cell::Text),
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(StoreError::from)
}

impl SqlStore {
    /// Connects to the store `url` names and brings its schema up to date.
    pub(super) async fn connect(url: &StoreUrl, settings: &WriterSettings) -> Result<Self, String> {
        let pool = match url {
            StoreUrl::Sqlite(path) => {
                if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir)
                        .map_err(|err| format!("cannot create the data directory {}: {err}", dir.display()))?;
                }
                let options = SqliteConnectOptions::new()
                    .filename(path)
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    // By default every commit reaches the disk before its
                    // lines are released.
                    .synchronous(match settings.sqlite_full_sync {
                        true => SqliteSynchronous::Full,
                        false => SqliteSynchronous::Normal,
                    })
                    .busy_timeout(Duration::from_secs(5))
                    // Batches are large: sqlx's per-statement log would format each one.
                    .log_statements(log::LevelFilter::Off)
                    .log_slow_statements(log::LevelFilter::Off, Duration::ZERO);
                let pool = SqlitePoolOptions::new()
                    .max_connections(1)
                    .connect_with(options)
                    .await
                    .map_err(|err| format!("cannot open the SQLite store {}: {err}", path.display()))?;
                Pool::Sqlite(pool)
            }
            StoreUrl::Postgres(text) => {
                let options = PgConnectOptions::from_str(text)
                    .map_err(|err| format!("bad PostgreSQL URL {}: {err}", url.describe()))?;
                // One connection first, for the server's own error (a pool
                // only says it timed out).
                let unreachable = |err: sqlx::Error| {
                    format!(
                        "cannot reach the PostgreSQL store {}: {err} (is the server running and the database created?)",
                        url.describe()
                    )
                };
                sqlx::PgConnection::connect_with(&options).await.map_err(unreachable)?.close().await.ok();
                let pool = PgPoolOptions::new()
                    .max_connections(settings.pool_size.max(1))
                    .acquire_timeout(Duration::from_secs(10))
                    .connect_with(options)
                    .await
                    .map_err(unreachable)?;
                Pool::Postgres(pool)
            }
            StoreUrl::Memory => return Err("the memory store has no SQL".into()),
        };
        let store = Self { pool };
        store.migrate().await.map_err(|err| format!("store {}: {err}", url.describe()))?;
        Ok(store)
    }

    async fn migrate(&self) -> Result<(), String> {
        let migrator = Migrator::new(Embedded(self.dialect())).await.map_err(|err| err.to_string())?;
        let latest = MIGRATIONS.last().map_or(0, |m| m.0);
        let outcome = match &self.pool {
            Pool::Sqlite(pool) => migrator.run(pool).await,
            Pool::Postgres(pool) => migrator.run(pool).await,
        };
        match outcome {
            Ok(()) => Ok(()),
            Err(MigrateError::VersionMissing(version)) => Err(format!(
                "its schema is at version {version}, newer than this subagentd knows (up to {latest}); \
                 run a newer subagentd, or point --store elsewhere"
            )),
            Err(err) => Err(format!("schema migration failed: {err}")),
        }
    }

    fn dialect(&self) -> batch::Dialect {
        match self.pool {
            Pool::Sqlite(_) => batch::Dialect::Sqlite,
            Pool::Postgres(_) => batch::Dialect::Postgres,
        }
    }

    pub(super) fn kind(&self) -> &'static str {
        match self.pool {
            Pool::Sqlite(_) => "sqlite",
            Pool::Postgres(_) => "postgres",
        }
    }

    async fn run(&self, ops: &[Op], fence: Option<&Fence>) -> Result<(), CommitError> {
        let outcome = match &self.pool {
            Pool::Sqlite(pool) => run_script(pool, ops).await,
            Pool::Postgres(pool) => run_statements(pool, ops, fence).await,
        };
        outcome.map_err(|err| match cluster::fenced_sessions(&err) {
            Some(lost) => CommitError::Fenced(lost),
            None => CommitError::Store(err.into()),
        })
    }

    /// The PostgreSQL pool (the cluster's statements use it too).
    pub(super) fn pg_pool(&self) -> Option<PgPool> {
        match &self.pool {
            Pool::Postgres(pool) => Some(pool.clone()),
            Pool::Sqlite(_) => None,
        }
    }

    async fn fetch(&self, sql: &'static str, key: &str, shape: &str) -> Result<Vec<Vec<Cell>>, StoreError> {
        Ok(match &self.pool {
            Pool::Sqlite(pool) => fetch_rows!(pool, sql, key, shape),
            Pool::Postgres(pool) => fetch_rows!(pool, sql, key, shape),
        })
    }

    /// Commits `batch` in one transaction, behind `fence` when given, and
    /// trims each session's journal to its newest `retained` lines.
    pub(super) async fn commit_with_retention(
        &self,
        batch: &[Change],
        retained: u64,
        fence: Option<&Fence>,
    ) -> Result<(), CommitError> {
        if batch.is_empty() {
            return Ok(());
        }
        self.run(&batch::compile(batch, retained, self.dialect()), fence).await
    }

    pub(super) async fn load_session(&self, id: &str) -> Result<Option<StoredSession>, StoreError> {
        let mut sessions = self
            .fetch(
                "SELECT agent_id, capabilities, principal, transport, next_seq, handshaken FROM sessions WHERE id = $1",
                id,
                "ttttii",
            )
            .await?;
        let Some(mut session) = sessions.pop() else { return Ok(None) };
        let capabilities: Vec<String> = parse_json(session[1].text())?;
        let row = SessionRow {
            id: id.into(),
            agent_id: session[0].text().unwrap_or_default(),
            capabilities,
            principal: session[2].text(),
            transport: session[3].text().unwrap_or_default(),
            handshaken: session[5].int() != 0,
        };
        let mut next_seq = u64::try_from(session[4].int()).unwrap_or(1).max(1);

        let mut tasks = HashMap::new();
        for mut task in self
            .fetch(
                "SELECT subagent_id, task, task_no, attempt, step, checkpoint FROM tasks WHERE session_id = $1",
                id,
                "ttiiit",
            )
            .await?
        {
            let subagent = parse_id(task[0].text())?;
            let checkpoint = match task[5].text() {
                Some(state) => Some(Checkpoint { step: to_u32(task[4].int()), state: parse_json(Some(state))? }),
                None => None,
            };
            tasks.insert(
                subagent,
                StoredTask {
                    task: parse_json(task[1].text())?,
                    task_no: u64::try_from(task[2].int()).unwrap_or(0),
                    attempt: to_u32(task[3].int()),
                    position: u64::try_from(task[4].int()).unwrap_or(0),
                    checkpoint,
                },
            );
        }
        let mut memories = HashMap::new();
        for mut memory in self.fetch("SELECT owner_id, entries FROM memories WHERE session_id = $1", id, "tt").await? {
            memories.insert(parse_id(memory[0].text())?, parse_json::<Vec<Value>>(memory[1].text())?);
        }
        let mut mailboxes = HashMap::new();
        for mut mailbox in
            self.fetch("SELECT subagent_id, messages FROM mailboxes WHERE session_id = $1", id, "tt").await?
        {
            let stored: Vec<batch::StoredMessage> = parse_json(mailbox[1].text())?;
            let messages = stored
                .into_iter()
                .map(|m| InboxMessage {
                    from: m.from,
                    payload: SubagentMessagePayload { kind: m.kind, content: m.content },
                })
                .collect::<Vec<_>>();
            mailboxes.insert(parse_id(mailbox[0].text())?, messages);
        }
        let mut subagents = Vec::new();
        for mut sub in self
            .fetch(
                "SELECT id, ord, parent_id, parent_agent_id, root_agent_id, depth, spawn_key, tasks_started, \
                 config, status, result, error, usage_input, usage_output FROM subagents \
                 WHERE session_id = $1 ORDER BY ord",
                id,
                "titttitittttii",
            )
            .await?
        {
            let subagent = parse_id(sub[0].text())?;
            let parent = match sub[2].text() {
                Some(text) => Some(parse_id(Some(text))?),
                None => None,
            };
            let status: SubagentStatus = serde_json::from_value(Value::String(sub[9].text().unwrap_or_default()))
                .map_err(|err| StoreError(format!("stored status: {err}")))?;
            let result = match sub[10].text() {
                Some(text) => Some(parse_json(Some(text))?),
                None => None,
            };
            let row = SubagentRow {
                ord: u64::try_from(sub[1].int()).unwrap_or(0),
                parent,
                parent_agent_id: sub[3].text().map(Into::into),
                root_agent_id: sub[4].text().map(Into::into),
                depth: to_u32(sub[5].int()),
                spawn_key: sub[6].text().map(Into::into),
                tasks_started: u64::try_from(sub[7].int()).unwrap_or(0),
                config: std::sync::Arc::new(parse_json(sub[8].text())?),
                status,
                result,
                error: sub[11].text().map(Into::into),
                usage: Usage {
                    input_tokens: u64::try_from(sub[12].int()).unwrap_or(0),
                    output_tokens: u64::try_from(sub[13].int()).unwrap_or(0),
                },
            };
            subagents.push(StoredSubagent {
                id: subagent,
                row,
                task: tasks.remove(&subagent),
                memory: memories.remove(&subagent),
                mailbox: mailboxes.remove(&subagent).unwrap_or_default(),
            });
        }
        let mut journal = Vec::new();
        for mut line in self.fetch("SELECT seq, line FROM journal WHERE session_id = $1 ORDER BY seq", id, "it").await?
        {
            let seq = u64::try_from(line[0].int()).unwrap_or(0);
            next_seq = next_seq.max(seq + 1);
            journal.push((seq, line[1].text().unwrap_or_default()));
        }
        let mut inbound = Vec::new();
        for mut frame in
            self.fetch("SELECT seq, frame FROM inbound WHERE session_id = $1 ORDER BY seq", id, "it").await?
        {
            inbound.push((u64::try_from(frame[0].int()).unwrap_or(0), frame[1].text().unwrap_or_default()));
        }
        let last_inbound = inbound.last().map_or(0, |(seq, _)| *seq);
        Ok(Some(StoredSession { row, subagents, next_seq, journal, inbound, last_inbound }))
    }

    pub(super) async fn delete_expired(&self, before_ms: i64) -> Result<u64, StoreError> {
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
    pub(super) async fn resumable_sessions(&self, limit: i64) -> Result<Vec<String>, StoreError> {
        const SQL: &str = "SELECT DISTINCT session_id FROM tasks LIMIT $1";
        let rows = match &self.pool {
            Pool::Sqlite(pool) => fetch_rows!(pool, SQL, limit, "t"),
            Pool::Postgres(pool) => fetch_rows!(pool, SQL, limit, "t"),
        };
        Ok(rows.into_iter().filter_map(|mut row| row[0].text()).collect())
    }

    async fn fetch_before(&self, before_ms: i64) -> Result<Vec<String>, StoreError> {
        const SQL: &str = "SELECT id FROM sessions WHERE touched_ms < $1";
        let rows = match &self.pool {
            Pool::Sqlite(pool) => fetch_rows!(pool, SQL, before_ms, "t"),
            Pool::Postgres(pool) => fetch_rows!(pool, SQL, before_ms, "t"),
        };
        Ok(rows.into_iter().filter_map(|mut row| row[0].text()).collect())
    }

    pub(super) async fn ping(&self) -> Result<(), StoreError> {
        match &self.pool {
            Pool::Sqlite(pool) => sqlx::query("SELECT 1").execute(pool).await.map(drop)?,
            Pool::Postgres(pool) => sqlx::query("SELECT 1").execute(pool).await.map(drop)?,
        }
        Ok(())
    }
}

impl super::Store for SqlStore {
    fn kind(&self) -> &'static str {
        SqlStore::kind(self)
    }

    fn commit<'a>(&'a self, batch: &'a [Change], journal_retained: u64, fence: Option<&'a Fence>) -> CommitFuture<'a> {
        Box::pin(self.commit_with_retention(batch, journal_retained, fence))
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
}

fn to_u32(n: i64) -> u32 {
    u32::try_from(n).unwrap_or(0)
}

fn parse_json<T: serde::de::DeserializeOwned>(text: Option<String>) -> Result<T, StoreError> {
    serde_json::from_str(text.as_deref().unwrap_or("null")).map_err(|err| StoreError(format!("stored JSON: {err}")))
}

fn parse_id(text: Option<String>) -> Result<SubagentId, StoreError> {
    let text = text.unwrap_or_default();
    SubagentId::parse(&text).ok_or_else(|| StoreError(format!("stored subagent id `{text}` is malformed")))
}

#[cfg(test)]
mod tests {
    use super::renumber;

    #[test]
    fn renumber_moves_every_parameter_and_nothing_else() {
        assert_eq!(
            renumber("UPDATE t SET a = $1 WHERE b = $2 AND c IN ($10)", 5),
            "UPDATE t SET a = $6 WHERE b = $7 AND c IN ($15)"
        );
        assert_eq!(renumber("SELECT 'x$' || $1", 2), "SELECT 'x$' || $3");
    }
}
