//! The statements' building blocks: bound values ([`Arg`]), statements
//! ([`Op`]), parameter spelling per engine ([`Dialect`]), and the multi-row
//! `INSERT`, `UPDATE … FROM (VALUES …)` and `DELETE` shapes. On SQLite they
//! are cut into chunks of a few sizes so that their text takes few shapes;
//! on PostgreSQL each column travels as one array (`unnest`), so a table's
//! statement has one text, prepared once by the connection.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use super::fold::Key;

/// One bound value. Texts borrow from the batch where they can: a batch's
/// session ids, results and lines are bound as they are, not copied.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Arg<'a> {
    Text(Cow<'a, str>),
    OptText(Option<Cow<'a, str>>),
    Int(i64),
    OptInt(Option<i64>),
    /// A column of texts (PostgreSQL's `text[]`, one per row).
    Texts(Vec<Option<String>>),
    /// A column of counts (PostgreSQL's `bigint[]`, one per row).
    Ints(Vec<Option<i64>>),
}

#[cfg(test)]
impl Arg<'_> {
    /// The value with its texts copied, for a test to keep.
    pub(super) fn into_owned(self) -> Arg<'static> {
        match self {
            Arg::Text(text) => Arg::Text(Cow::Owned(text.into_owned())),
            Arg::OptText(text) => Arg::OptText(text.map(|text| Cow::Owned(text.into_owned()))),
            Arg::Int(n) => Arg::Int(n),
            Arg::OptInt(n) => Arg::OptInt(n),
            Arg::Texts(values) => Arg::Texts(values),
            Arg::Ints(values) => Arg::Ints(values),
        }
    }
}

#[cfg(test)]
impl Op<'_> {
    /// The statement with its values copied, for a test to keep.
    pub(super) fn into_owned(self) -> Op<'static> {
        Op { sql: self.sql, args: self.args.into_iter().map(Arg::into_owned).collect() }
    }
}

/// One statement with its values.
#[derive(Debug)]
pub(crate) struct Op<'a> {
    pub(crate) sql: String,
    pub(crate) args: Vec<Arg<'a>>,
}

/// Most rows per multi-row statement: well under SQLite's 32 766 parameters.
const CHUNK: usize = 256;

/// The sizes `len` rows are cut into: powers of two (at most [`CHUNK`]),
/// largest first, so that a statement's text takes one of a few shapes and
/// both engines find it in their prepared-statement cache instead of
/// parsing a new one for every batch size.
pub(super) fn chunk_sizes(mut len: usize) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        if len == 0 {
            return None;
        }
        let size = if len >= CHUNK { CHUNK } else { 1 << len.ilog2() };
        len -= size;
        Some(size)
    })
}

/// How a statement numbers its parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
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
    let mut out = String::with_capacity(count * 5);
    push_placeholders(&mut out, dialect, first, count);
    out
}

// Appends parameters `first ..` (`count` of them) to `out`, written in
// place: a batch's statements spell thousands of them at every commit, on
// the writer's thread, and a string for each was most of the text's cost.
fn push_placeholders(out: &mut String, dialect: Dialect, first: usize, count: usize) {
    for n in first..first + count {
        if n > first {
            out.push_str(", ");
        }
        match dialect {
            Dialect::Sqlite => out.push('?'),
            Dialect::Postgres => {
                // Writing to a `String` cannot fail.
                let _ = write!(out, "${n}");
            }
        }
    }
}

/// `($1, $2), ($3, $4), …` for `rows` rows of `width` values.
fn values(dialect: Dialect, rows: usize, width: usize) -> String {
    let mut out = String::with_capacity(rows * (width * 5 + 4));
    for row in 0..rows {
        if row > 0 {
            out.push_str(", ");
        }
        out.push('(');
        push_placeholders(&mut out, dialect, 1 + row * width, width);
        out.push(')');
    }
    out
}

/// `rows` turned into columns, each one array parameter (PostgreSQL), with
/// its `unnest` argument list (`$1::text[], $2::bigint[], …`): a statement
/// then has one text whatever the number of rows, so it is prepared once
/// and its plan kept, where a `VALUES` list of N rows was a new text for
/// each N, parsed and planned again at every commit (most of the server's
/// work per batch).
fn columns<'a>(rows: Vec<Vec<Arg<'a>>>) -> (String, Vec<Arg<'a>>) {
    let width = rows.first().map_or(0, Vec::len);
    let mut columns: Vec<Arg<'a>> = rows
        .first()
        .into_iter()
        .flatten()
        .map(|arg| match arg {
            Arg::Int(_) | Arg::OptInt(_) => Arg::Ints(Vec::with_capacity(rows.len())),
            _ => Arg::Texts(Vec::with_capacity(rows.len())),
        })
        .collect();
    for row in rows {
        for (column, arg) in columns.iter_mut().zip(row) {
            match (column, arg) {
                (Arg::Ints(values), Arg::Int(n)) => values.push(Some(n)),
                (Arg::Ints(values), Arg::OptInt(n)) => values.push(n),
                (Arg::Texts(values), Arg::Text(text)) => values.push(Some(text.into_owned())),
                (Arg::Texts(values), Arg::OptText(text)) => values.push(text.map(Cow::into_owned)),
                // A column is one kind in every row; anything else is no value.
                (Arg::Ints(values), _) => values.push(None),
                (Arg::Texts(values), _) => values.push(None),
                _ => {}
            }
        }
    }
    let list = columns
        .iter()
        .enumerate()
        .map(|(index, column)| match column {
            Arg::Ints(_) => format!("${}::bigint[]", index + 1),
            _ => format!("${}::text[]", index + 1),
        })
        .collect::<Vec<_>>()
        .join(", ");
    debug_assert_eq!(columns.len(), width);
    (list, columns)
}

// Multi-row `INSERT INTO table (cols) VALUES … ON CONFLICT on_conflict`
// (SQLite), or `SELECT * FROM unnest(<one array per column>)` (PostgreSQL).
pub(super) fn insert<'a>(
    dialect: Dialect,
    ops: &mut Vec<Op<'a>>,
    table: &str,
    rows: Vec<Vec<Arg<'a>>>,
    on_conflict: &str,
) {
    insert_rows(dialect, ops, table, rows, &format!(" ON CONFLICT {on_conflict}"));
}

// [`insert`] of rows no stored row can share a key with: no `ON CONFLICT`,
// so the server does not probe the key before each insert (a speculative
// insertion on PostgreSQL); a row that is there after all fails the batch.
pub(super) fn insert_new<'a>(dialect: Dialect, ops: &mut Vec<Op<'a>>, table: &str, rows: Vec<Vec<Arg<'a>>>) {
    insert_rows(dialect, ops, table, rows, "");
}

fn insert_rows<'a>(dialect: Dialect, ops: &mut Vec<Op<'a>>, table: &str, rows: Vec<Vec<Arg<'a>>>, conflict: &str) {
    if dialect == Dialect::Postgres && !rows.is_empty() {
        let (list, args) = columns(rows);
        ops.push(Op { sql: format!("INSERT INTO {table} SELECT * FROM unnest({list}){conflict}"), args });
        return;
    }
    let width = rows.first().map_or(0, Vec::len);
    per_chunk(dialect, ops, rows, width, |values| format!("INSERT INTO {table} VALUES {values}{conflict}"));
}

// Multi-row `UPDATE table SET set FROM (VALUES …) AS v WHERE matches`, or
// on PostgreSQL `FROM unnest(…) AS v(column1, column2, …)`.
pub(super) fn update_from<'a>(
    dialect: Dialect,
    ops: &mut Vec<Op<'a>>,
    table: &str,
    set: &str,
    matches: &str,
    width: usize,
    rows: Vec<Vec<Arg<'a>>>,
) {
    if dialect == Dialect::Postgres && !rows.is_empty() {
        let (list, args) = columns(rows);
        let names = (1..=width).map(|n| format!("column{n}")).collect::<Vec<_>>().join(", ");
        ops.push(Op {
            sql: format!("UPDATE {table} SET {set} FROM unnest({list}) AS v({names}) WHERE {matches}"),
            args,
        });
        return;
    }
    per_chunk(dialect, ops, rows, width, |values| {
        format!("UPDATE {table} SET {set} FROM (VALUES {values}) AS v WHERE {matches}")
    });
}

// One statement per chunk of `rows` (of `width` values each, cut by
// `chunk_sizes`), its text made by `sql` from the chunk's `VALUES` list;
// each row's values move into its chunk's statement.
fn per_chunk<'a>(
    dialect: Dialect,
    ops: &mut Vec<Op<'a>>,
    rows: Vec<Vec<Arg<'a>>>,
    width: usize,
    sql: impl Fn(&str) -> String,
) {
    let mut rows = rows.into_iter();
    for size in chunk_sizes(rows.len()) {
        ops.push(Op { sql: sql(&values(dialect, size, width)), args: rows.by_ref().take(size).flatten().collect() });
    }
}

/// `DELETE FROM table WHERE session_id = $1 AND column IN (values)`: on
/// PostgreSQL `= ANY($2)`, one text whatever the number of values.
pub(super) fn delete_in<'a>(
    dialect: Dialect,
    ops: &mut Vec<Op<'a>>,
    table: &str,
    column: &str,
    session: Cow<'a, str>,
    values: &[Arg<'a>],
) {
    if values.is_empty() {
        return;
    }
    if dialect == Dialect::Postgres {
        let rows: Vec<Vec<Arg<'a>>> = values.iter().map(|value| vec![value.clone()]).collect();
        let (_, mut array) = columns(rows);
        let array = array.pop().unwrap_or(Arg::Texts(Vec::new()));
        let cast = if matches!(array, Arg::Ints(_)) { "bigint[]" } else { "text[]" };
        ops.push(Op {
            sql: format!("DELETE FROM {table} WHERE session_id = $1 AND {column} = ANY($2::{cast})"),
            args: vec![Arg::Text(session), array],
        });
        return;
    }
    let mut values = values.iter();
    for size in chunk_sizes(values.len()) {
        let mut args = vec![Arg::Text(session.clone())];
        args.extend(values.by_ref().take(size).cloned());
        ops.push(Op {
            sql: format!(
                "DELETE FROM {table} WHERE session_id = {} AND {column} IN ({})",
                first(dialect),
                placeholders(dialect, 2, size)
            ),
            args,
        });
    }
}

// `DELETE FROM table WHERE session_id = $1 AND id_column IN (…)`, per session.
// (The keys are often made for the call: the session ids are copied.)
pub(super) fn deletes(dialect: Dialect, ops: &mut Vec<Op<'_>>, table: &str, id_column: &str, keys: &[Key]) {
    let mut by_session: HashMap<&Arc<str>, Vec<Arg<'_>>> = HashMap::new();
    for (session, id) in keys {
        by_session.entry(session).or_default().push(Arg::Text(id.to_string().into()));
    }
    for (session, ids) in by_session {
        delete_in(dialect, ops, table, id_column, session.to_string().into(), &ids);
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
pub(crate) fn end_session<'a>(dialect: Dialect, session: &'a str, ops: &mut Vec<Op<'a>>) {
    let p = first(dialect);
    for table in [
        "subagents",
        "tasks",
        "checkpoint_parts",
        "mailboxes",
        "journal",
        "inbound",
        "retired_tasks",
        "task_history",
        "session_servers",
    ] {
        ops.push(Op {
            sql: format!("DELETE FROM {table} WHERE session_id = {p}"),
            args: vec![Arg::Text(session.into())],
        });
    }
    ops.push(Op { sql: format!("DELETE FROM sessions WHERE id = {p}"), args: vec![Arg::Text(session.into())] });
}

/// A session's lease goes (it expired: no node serves it).
pub(crate) fn drop_lease<'a>(dialect: Dialect, session: &'a str, ops: &mut Vec<Op<'a>>) {
    let p = first(dialect);
    ops.push(Op { sql: format!("DELETE FROM leases WHERE session_id = {p}"), args: vec![Arg::Text(session.into())] });
}

#[cfg(test)]
mod tests {
    use super::{placeholders, values, Dialect};

    #[test]
    fn values_spell_each_rows_parameters_in_order_in_either_dialect() {
        assert_eq!(values(Dialect::Sqlite, 2, 3), "(?, ?, ?), (?, ?, ?)");
        assert_eq!(values(Dialect::Postgres, 2, 2), "($1, $2), ($3, $4)");
        assert_eq!(placeholders(Dialect::Postgres, 9, 3), "$9, $10, $11");
        assert_eq!(placeholders(Dialect::Sqlite, 1, 1), "?");
        assert_eq!(placeholders(Dialect::Sqlite, 1, 0), "");
    }
}
