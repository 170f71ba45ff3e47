//! Opening the SQL store: SQLite (a file, WAL mode) or a PostgreSQL pool,
//! then its migrations.

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{ConnectOptions, Connection};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use super::migrations::{migrate_postgres, migrate_sqlite};
use super::sql_store::{Pool, SqlStore};
use super::sqlite_commits::SqliteCommits;
use crate::store::url::StoreUrl;
use crate::store::writer::writer_settings::WriterSettings;

impl SqlStore {
    /// Connects to the store `url` names and brings its schema up to date.
    pub(crate) async fn connect(url: &StoreUrl, settings: &WriterSettings) -> Result<Self, String> {
        let failed = |err: String| format!("store {}: {err}", url.describe());
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
                migrate_sqlite(&pool).await.map_err(failed)?;
                // Opened once the schema is up to date: it prepares
                // statements against it.
                let commits = Arc::new(SqliteCommits::open(path, settings.sqlite_full_sync)?);
                Pool::Sqlite(pool, commits)
            }
            StoreUrl::Postgres(text) => {
                let options = PgConnectOptions::from_str(text)
                    .map_err(|err| format!("bad PostgreSQL URL {}: {err}", url.describe()))?
                    // The server's notices (`relation … already exists, skipping`
                    // at every start) read like errors in a node's log.
                    //
                    // Every statement the store runs finds rows by key. A
                    // connection keeps each statement's plan once it has run
                    // a few times, and a plan made while a table was small
                    // scans the whole table (a sequential scan under a hash
                    // join costs less than a few index probes then); kept as
                    // the table grows, with no fresh statistics to replace it
                    // (autovacuum off, or between two analyzes), every batch
                    // then reads the whole table. Priced out, the planner
                    // probes the keys' indexes whatever the table's size.
                    .options([("client_min_messages", "warning"), ("enable_seqscan", "off")]);
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
                migrate_postgres(&pool).await.map_err(failed)?;
                Pool::Postgres(pool)
            }
            StoreUrl::Memory => return Err("the memory store has no SQL".into()),
        };
        Ok(Self { pool, retrying: Default::default() })
    }
}
