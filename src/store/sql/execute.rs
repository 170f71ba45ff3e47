//! Running a compiled batch in one transaction on PostgreSQL: as few
//! `WITH … SELECT` statements as the parameter limit allows, the first
//! behind the node's fence. (SQLite's are in `sqlite_commits`.)

use sqlx::postgres::{PgArguments, PgPool};

use crate::store::batch::{Arg, Op};
use crate::store::cluster::{self, Fence};

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
pub(super) async fn run_statements(pool: &PgPool, ops: &[Op<'_>], fence: Option<&Fence>) -> Result<(), sqlx::Error> {
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

/// `query` with the values of `ops` bound, in order (array columns as
/// PostgreSQL's arrays, `unnest`'s arguments).
fn bind_all<'q>(
    mut query: sqlx::query::Query<'q, sqlx::Postgres, PgArguments>,
    ops: &'q [Op],
) -> sqlx::query::Query<'q, sqlx::Postgres, PgArguments> {
    for arg in ops.iter().flat_map(|op| &op.args) {
        query = match arg {
            Arg::Text(text) => query.bind(&**text),
            Arg::OptText(text) => query.bind(text.as_deref()),
            Arg::Int(n) => query.bind(*n),
            Arg::OptInt(n) => query.bind(*n),
            Arg::Texts(values) => query.bind(values.as_slice()),
            Arg::Ints(values) => query.bind(values.as_slice()),
        };
    }
    query
}

/// One statement doing all of `ops` (each numbered `$1 …` on its own),
/// after the fence when `fenced` (its parameters come first).
fn combined(ops: &[Op<'_>], fenced: bool) -> String {
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
