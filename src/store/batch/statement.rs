//! The statements' building blocks: bound values ([`Arg`]), statements
//! ([`Op`]), parameter spelling per engine ([`Dialect`]), and the multi-row
//! `INSERT`, `UPDATE … FROM (VALUES …)` and `DELETE` shapes, cut into chunks
//! of a few sizes so that each engine caches their text.

use std::collections::HashMap;
use std::sync::Arc;

use super::fold::Key;
use crate::ids::SubagentId;

/// One bound value.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::store) enum Arg {
    Text(String),
    OptText(Option<String>),
    Int(i64),
    OptInt(Option<i64>),
}

/// One statement with its values.
#[derive(Debug)]
pub(in crate::store) struct Op {
    pub(in crate::store) sql: String,
    pub(in crate::store) args: Vec<Arg>,
}

/// Most rows per multi-row statement: well under SQLite's 32 766 parameters.
const CHUNK: usize = 256;

/// Splits `rows` into chunks whose sizes are powers of two (at most
/// [`CHUNK`]): a statement's text then takes one of a few shapes, so both
/// engines find it in their prepared-statement cache instead of parsing a
/// new one for every batch size.
pub(super) fn chunks<T>(mut rows: &[T]) -> impl Iterator<Item = &[T]> {
    std::iter::from_fn(move || {
        if rows.is_empty() {
            return None;
        }
        let size = if rows.len() >= CHUNK { CHUNK } else { 1 << rows.len().ilog2() };
        let (chunk, rest) = rows.split_at(size);
        rows = rest;
        Some(chunk)
    })
}

/// How a statement numbers its parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::store) enum Dialect {
    /// `?`: SQLite looks a numbered or named parameter up by a linear scan,
    /// at parse and at bind, so a statement of N of them costs N²; plain
    /// `?` costs nothing of the kind.
    Sqlite,
    /// `$1, $2, …`.
    Postgres,
}

/// Parameter `n` in the dialect's spelling. SQLite statements take each
/// parameter once and in order, so that a batch can run as one string.
pub(super) fn param(dialect: Dialect, n: usize) -> String {
    match dialect {
        Dialect::Sqlite => "?".to_owned(),
        Dialect::Postgres => format!("${n}"),
    }
}

/// Parameters `first ..` (`count` of them) in the dialect's spelling.
pub(super) fn placeholders(dialect: Dialect, first: usize, count: usize) -> String {
    (first..first + count).map(|n| param(dialect, n)).collect::<Vec<_>>().join(", ")
}

/// `($1, $2), ($3, $4), …` for `rows` rows of `width` values.
fn values(dialect: Dialect, rows: usize, width: usize) -> String {
    (0..rows).map(|row| format!("({})", placeholders(dialect, 1 + row * width, width))).collect::<Vec<_>>().join(", ")
}

// Multi-row `INSERT INTO table (cols) VALUES … ON CONFLICT on_conflict`.
pub(super) fn insert(dialect: Dialect, ops: &mut Vec<Op>, table: &str, rows: &[Vec<Arg>], on_conflict: &str) {
    for chunk in chunks(rows) {
        let width = chunk[0].len();
        ops.push(Op {
            sql: format!(
                "INSERT INTO {table} VALUES {} ON CONFLICT {on_conflict}",
                values(dialect, chunk.len(), width)
            ),
            args: chunk.iter().flatten().cloned().collect(),
        });
    }
}

// Multi-row `UPDATE table SET set FROM (VALUES …) AS v WHERE matches`.
pub(super) fn update_from(
    dialect: Dialect,
    ops: &mut Vec<Op>,
    table: &str,
    set: &str,
    matches: &str,
    width: usize,
    rows: &[Vec<Arg>],
) {
    for chunk in chunks(rows) {
        ops.push(Op {
            sql: format!(
                "UPDATE {table} SET {set} FROM (VALUES {}) AS v WHERE {matches}",
                values(dialect, chunk.len(), width)
            ),
            args: chunk.iter().flatten().cloned().collect(),
        });
    }
}

// `DELETE FROM table WHERE session_id = $1 AND id_column IN (…)`, per session.
pub(super) fn deletes(dialect: Dialect, ops: &mut Vec<Op>, table: &str, id_column: &str, keys: &[Key]) {
    let mut by_session: HashMap<&Arc<str>, Vec<SubagentId>> = HashMap::new();
    for (session, id) in keys {
        by_session.entry(session).or_default().push(*id);
    }
    for (session, ids) in by_session {
        for chunk in chunks(&ids) {
            let mut args = vec![Arg::Text(session.to_string())];
            args.extend(chunk.iter().map(|id| Arg::Text(id.to_string())));
            ops.push(Op {
                sql: format!(
                    "DELETE FROM {table} WHERE session_id = {} AND {id_column} IN ({})",
                    first(dialect),
                    placeholders(dialect, 2, chunk.len())
                ),
                args,
            });
        }
    }
}

/// The first parameter's spelling.
pub(super) fn first(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Sqlite => "?",
        Dialect::Postgres => "$1",
    }
}

/// Every row of a session goes.
pub(in crate::store) fn end_session(dialect: Dialect, session: &str, ops: &mut Vec<Op>) {
    let p = first(dialect);
    for table in ["subagents", "tasks", "checkpoint_parts", "memories", "mailboxes", "journal", "inbound"] {
        ops.push(Op {
            sql: format!("DELETE FROM {table} WHERE session_id = {p}"),
            args: vec![Arg::Text(session.to_owned())],
        });
    }
    ops.push(Op { sql: format!("DELETE FROM sessions WHERE id = {p}"), args: vec![Arg::Text(session.to_owned())] });
}

/// A session's lease goes (it expired: no node serves it).
pub(in crate::store) fn drop_lease(dialect: Dialect, session: &str, ops: &mut Vec<Op>) {
    let p = first(dialect);
    ops.push(Op {
        sql: format!("DELETE FROM leases WHERE session_id = {p}"),
        args: vec![Arg::Text(session.to_owned())],
    });
}
