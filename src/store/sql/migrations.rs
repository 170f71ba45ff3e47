//! The schema: the migrations this build knows (embedded from
//! `migrations/`, one text per engine where they differ), and bringing a
//! store up to date with them.

use sqlx::migrate::{MigrateError, Migration, MigrationSource, MigrationType, Migrator};
use std::borrow::Cow;

use sqlx::postgres::PgPool;
use sqlx::sqlite::SqlitePool;

use crate::store::batch;

/// The migrations this build knows, oldest first, for either engine (the
/// cluster's tables exist on both; its functions only on PostgreSQL).
const MIGRATIONS: &[(i64, &str, &str, &str)] = &[
    (
        1,
        "initial",
        include_str!("../../../migrations/0001_initial.sql"),
        include_str!("../../../migrations/0001_initial.sql"),
    ),
    (
        2,
        "cluster",
        include_str!("../../../migrations/0002_cluster.sqlite.sql"),
        include_str!("../../../migrations/0002_cluster.postgres.sql"),
    ),
    (
        3,
        "usage",
        include_str!("../../../migrations/0003_usage.sql"),
        include_str!("../../../migrations/0003_usage.sql"),
    ),
    (
        4,
        "pending_sessions",
        include_str!("../../../migrations/0004_pending_sessions.sql"),
        include_str!("../../../migrations/0004_pending_sessions.sql"),
    ),
    (
        5,
        "presence_after_restart",
        include_str!("../../../migrations/0005_presence_after_restart.sqlite.sql"),
        include_str!("../../../migrations/0005_presence_after_restart.postgres.sql"),
    ),
    (
        6,
        "inbound_high_water",
        include_str!("../../../migrations/0006_inbound_high_water.sql"),
        include_str!("../../../migrations/0006_inbound_high_water.sql"),
    ),
    (
        7,
        "node_leases",
        include_str!("../../../migrations/0007_node_leases.sqlite.sql"),
        include_str!("../../../migrations/0007_node_leases.postgres.sql"),
    ),
    (
        8,
        "checkpoint_parts",
        include_str!("../../../migrations/0008_checkpoint_parts.sql"),
        include_str!("../../../migrations/0008_checkpoint_parts.sql"),
    ),
    (
        9,
        "postgres_tuning",
        include_str!("../../../migrations/0009_postgres_tuning.sqlite.sql"),
        include_str!("../../../migrations/0009_postgres_tuning.postgres.sql"),
    ),
    (
        10,
        "memory_in_row",
        include_str!("../../../migrations/0010_memory_in_row.sql"),
        include_str!("../../../migrations/0010_memory_in_row.sql"),
    ),
    (
        11,
        "subagents_by_key",
        include_str!("../../../migrations/0011_subagents_by_key.sqlite.sql"),
        include_str!("../../../migrations/0011_subagents_by_key.postgres.sql"),
    ),
    (
        12,
        "room_for_updates",
        include_str!("../../../migrations/0012_room_for_updates.sqlite.sql"),
        include_str!("../../../migrations/0012_room_for_updates.postgres.sql"),
    ),
    (
        13,
        "face_records",
        include_str!("../../../migrations/0013_face_records.sql"),
        include_str!("../../../migrations/0013_face_records.sql"),
    ),
    (14, "cost", include_str!("../../../migrations/0014_cost.sql"), include_str!("../../../migrations/0014_cost.sql")),
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

/// Brings the SQLite database behind `pool` up to date.
pub(super) async fn migrate_sqlite(pool: &SqlitePool) -> Result<(), String> {
    outcome(migrator(batch::Dialect::Sqlite).await?.run(pool).await)
}

/// Brings the PostgreSQL database behind `pool` up to date.
pub(super) async fn migrate_postgres(pool: &PgPool) -> Result<(), String> {
    outcome(migrator(batch::Dialect::Postgres).await?.run(pool).await)
}

async fn migrator(dialect: batch::Dialect) -> Result<Migrator, String> {
    Migrator::new(Embedded(dialect)).await.map_err(|err| err.to_string())
}

// A migration's outcome, in words a user can act on.
fn outcome(outcome: Result<(), MigrateError>) -> Result<(), String> {
    let latest = MIGRATIONS.last().map_or(0, |m| m.0);
    match outcome {
        Ok(()) => Ok(()),
        Err(MigrateError::VersionMissing(version)) => Err(format!(
            "its schema is at version {version}, newer than this subagentd knows (up to {latest}); \
             run a newer subagentd, or point --store elsewhere"
        )),
        Err(err) => Err(format!("schema migration failed: {err}")),
    }
}

#[cfg(test)]
mod tests {
    use super::super::temp_sqlite::TempSqlite;
    use super::{Embedded, MIGRATIONS};
    use sqlx::migrate::{MigrationSource, Migrator};
    use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
    use sqlx::Row;

    use crate::store::batch::Dialect;

    /// A SQLite store made by a build that knew migrations up to 10 keeps
    /// every subagent row, column for column, when migration 11 moves the
    /// table into its key's B-tree; the table then has no rowid.
    #[tokio::test]
    async fn sqlite_subagents_keep_every_row_when_moved_into_their_keys_tree() {
        let file = TempSqlite::new("migrations");
        let options = SqliteConnectOptions::new().filename(&file.path).create_if_missing(true);
        let pool = SqlitePoolOptions::new().max_connections(1).connect_with(options).await.expect("open");
        let mut older = Migrator::new(Embedded(Dialect::Sqlite)).await.expect("migrations");
        let all = Embedded(Dialect::Sqlite).resolve().await.expect("migrations");
        older.migrations = all.into_iter().filter(|migration| migration.version <= 10).collect::<Vec<_>>().into();
        older.run(&pool).await.expect("migrate to 10");
        for n in 0..3i64 {
            sqlx::query(
                "INSERT INTO subagents (session_id, id, ord, parent_id, depth, tasks_started, config, status, \
                 result, usage_input, usage_output, memory) VALUES ('s', ?, ?, ?, 1, 2, '{}', 'COMPLETED', '{\"r\":1}', 7, 8, '[]')",
            )
            .bind(format!("sub_{n:08x}"))
            .bind(n)
            .bind(if n > 0 { Some("sub_00000000") } else { None })
            .execute(&pool)
            .await
            .expect("insert");
        }
        super::migrate_sqlite(&pool).await.expect("migrate to the latest");
        let latest: i64 =
            sqlx::query("SELECT MAX(version) FROM _sqlx_migrations").fetch_one(&pool).await.expect("version").get(0);
        assert_eq!(latest, MIGRATIONS.last().expect("migrations").0);
        let rows = sqlx::query(
            "SELECT id, ord, parent_id, depth, tasks_started, status, result, usage_input, usage_output, memory \
             FROM subagents ORDER BY ord",
        )
        .fetch_all(&pool)
        .await
        .expect("rows");
        assert_eq!(rows.len(), 3);
        for (n, row) in rows.iter().enumerate() {
            assert_eq!(row.get::<String, _>(0), format!("sub_{n:08x}"));
            assert_eq!(row.get::<i64, _>(1), n as i64);
            assert_eq!(row.get::<Option<String>, _>(2).is_some(), n > 0);
            assert_eq!((row.get::<i64, _>(3), row.get::<i64, _>(4)), (1, 2));
            assert_eq!(row.get::<String, _>(5), "COMPLETED");
            assert_eq!(row.get::<String, _>(6), "{\"r\":1}");
            assert_eq!((row.get::<i64, _>(7), row.get::<i64, _>(8)), (7, 8));
            assert_eq!(row.get::<String, _>(9), "[]");
        }
        let without_rowid = sqlx::query("SELECT rowid FROM subagents").fetch_all(&pool).await;
        assert!(without_rowid.is_err(), "the table keeps its rows in its key's tree, with no rowid");
        pool.close().await;
    }
}
