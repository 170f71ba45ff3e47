//! One batch of changes → a few statements. Changes to the same row within
//! the batch are folded first (a task started and ended in one batch is one
//! delete; a subagent spawned and run in one batch is one insert of its last
//! state), then every table gets multi-row statements: a batch costs about
//! a dozen statements however many sessions and changes it holds, which is
//! what makes group commit pay with sqlx (each statement is a round trip to
//! SQLite's worker thread, or to PostgreSQL).
//!
//! The SQL is the same for both engines but for how rows travel: `ON
//! CONFLICT` upserts and `UPDATE … FROM` (whose columns are named `column1`,
//! `column2`, …), over multi-row `VALUES` on SQLite and over `unnest` of one
//! array per column on PostgreSQL.
//!
//! - `fold`: the batch folded per row.
//! - `compile`: the folded batch into statements, table after table.
//! - `session_tables`: the statements of `sessions`, `journal` and `inbound`.
//! - `subagent_tables`: the statements of `subagents` and `mailboxes`.
//! - `task_tables`: the statements of `tasks` and `checkpoint_parts`.
//! - `face_tables`: the statements of what the faces keep.
//! - `statement`: values, statements, parameter spelling, multi-row shapes.
//! - `columns`: how values are stored in columns.
//! - `table_tests`: the tests of each table's statements.

mod columns;
mod compile;
mod face_tables;
mod fold;
mod session_tables;
mod statement;
mod subagent_tables;
#[cfg(test)]
mod table_tests;
mod task_tables;

pub(super) use columns::StoredMessage;
pub(super) use compile::{compile, fold};
pub(super) use statement::{drop_lease, end_session, Arg, Dialect, Op};
