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
//! - `compile`: the folded batch into statements.
//! - `subagent_tables`: the statements of the `subagents` and `tasks` tables.
//! - `statement`: values, statements, parameter spelling, multi-row shapes.
//! - `columns`: how values are stored in columns.

mod columns;
mod compile;
mod fold;
mod statement;
mod subagent_tables;

pub(super) use columns::StoredMessage;
pub(super) use compile::{compile, fold};
pub(super) use statement::{drop_lease, end_session, Arg, Dialect, Op};
