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
