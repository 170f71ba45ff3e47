//! Reading what the faces keep beside a session's tree: retired tasks,
//! follow-up messages, a caller's face sessions, registered MCP servers.
//! Each read answers rows of one text column.

use futures_util::TryStreamExt;

use super::sql_store::{Pool, SqlStore};
use crate::store::backend::StoreError;
use crate::store::change::FaceQuery;

/// One bound value.
enum Bind {
    Text(String),
    Int(i64),
}

// Runs `sql` with `binds` on either engine; the first column of each row.
macro_rules! first_column {
    ($pool:expr, $sql:expr, $binds:expr) => {{
        let mut query = sqlx::query($sql);
        for bind in $binds {
            query = match bind {
                Bind::Text(text) => query.bind(text),
                Bind::Int(n) => query.bind(n),
            };
        }
        let mut rows = query.fetch($pool);
        let mut read = Vec::new();
        while let Some(row) = rows.try_next().await? {
            read.push(sqlx::Row::try_get::<String, _>(&row, 0)?);
        }
        read
    }};
}

impl SqlStore {
    pub(super) async fn face_query(&self, query: &FaceQuery) -> Result<Vec<String>, StoreError> {
        let (sql, binds): (&'static str, Vec<Bind>) = match query {
            FaceQuery::Retired { session, id } => (
                "SELECT record FROM retired_tasks WHERE session_id = $1 AND id = $2",
                vec![Bind::Text(session.clone()), Bind::Text(id.to_string())],
            ),
            FaceQuery::RetiredNewest { session, limit } => (
                "SELECT record FROM retired_tasks WHERE session_id = $1 ORDER BY ended_ms DESC LIMIT $2",
                vec![Bind::Text(session.clone()), Bind::Int(i64::from(*limit))],
            ),
            FaceQuery::History { session, id } => (
                "SELECT messages FROM task_history WHERE session_id = $1 AND subagent_id = $2",
                vec![Bind::Text(session.clone()), Bind::Text(id.to_string())],
            ),
            FaceQuery::Sessions { transport, principal, limit } => (
                // (No token: the sessions opened without one.)
                "SELECT id FROM sessions WHERE transport = $1 AND COALESCE(principal, '') = $2 \
                 ORDER BY touched_ms DESC LIMIT $3",
                vec![
                    Bind::Text(transport.clone()),
                    Bind::Text(principal.clone().unwrap_or_default()),
                    Bind::Int(i64::from(*limit)),
                ],
            ),
            FaceQuery::Servers { session } => (
                "SELECT spec FROM session_servers WHERE session_id = $1 ORDER BY name",
                vec![Bind::Text(session.clone())],
            ),
        };
        Ok(match &self.pool {
            Pool::Sqlite(pool, _) => first_column!(pool, sql, binds),
            Pool::Postgres(pool) => first_column!(pool, sql, binds),
        })
    }
}
