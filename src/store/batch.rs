//! One batch of changes → a few statements. Changes to the same row within
//! the batch are folded first (a task started and ended in one batch is one
//! delete; a subagent spawned and run in one batch is one insert of its last
//! state), then every table gets multi-row statements: a batch costs about
//! a dozen statements however many sessions and changes it holds, which is
//! what makes group commit pay with sqlx (each statement is a round trip to
//! SQLite's worker thread, or to PostgreSQL).
//!
//! The SQL is the same for both engines: multi-row `VALUES`, `ON CONFLICT`
//! upserts, and `UPDATE … FROM (VALUES …)` (whose columns both engines name
//! `column1`, `column2`, …).

use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

use super::writer::now_ms;
use super::{Change, Held, SessionRow, SubagentRow};
use crate::entries::{InboxMessage, MemoryEntry};
use crate::ids::SubagentId;
use crate::protocol::wire::{RawObject, SubagentStatus, TaskDefinition, Usage};

/// One bound value.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Arg {
    Text(String),
    OptText(Option<String>),
    Int(i64),
    OptInt(Option<i64>),
}

/// One statement with its values.
#[derive(Debug)]
pub(super) struct Op {
    pub(super) sql: String,
    pub(super) args: Vec<Arg>,
}

/// Most rows per multi-row statement: well under SQLite's 32 766 parameters.
const CHUNK: usize = 256;

/// Splits `rows` into chunks whose sizes are powers of two (at most
/// [`CHUNK`]): a statement's text then takes one of a few shapes, so both
/// engines find it in their prepared-statement cache instead of parsing a
/// new one for every batch size.
fn chunks<T>(mut rows: &[T]) -> impl Iterator<Item = &[T]> {
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

/// Journal lines are trimmed to `retained` once per this many lines.
const TRIM_EVERY: u64 = 128;

type Key = (Arc<str>, SubagentId);

/// A status change of a subagent not otherwise in the batch.
#[derive(Debug, Clone)]
struct Patch {
    status: SubagentStatus,
    result: Option<RawObject>,
    error: Option<Arc<str>>,
    tasks_started: Option<u64>,
    // Set when a task ended: its subagent's own tokens so far.
    usage: Option<Usage>,
}

/// What a task row becomes.
#[derive(Debug)]
enum TaskOp<'a> {
    Insert { task: &'a Arc<TaskDefinition>, task_no: u64, attempt: u32, step: u64, checkpoint: Option<&'a Value> },
    Update { attempt: Option<u32>, checkpoint: Option<(u32, &'a Value)> },
    Delete,
}

/// The batch, folded per row.
#[derive(Default)]
struct Folded<'a> {
    ended: Vec<Arc<str>>,
    sessions: Vec<&'a SessionRow>,
    forgotten: Vec<Key>,
    subagents: HashMap<Key, SubagentRow>,
    patches: HashMap<Key, Patch>,
    tasks: HashMap<Key, TaskOp<'a>>,
    memories: HashMap<Key, &'a Vec<MemoryEntry>>,
    mailboxes: HashMap<Key, &'a Vec<InboxMessage>>,
    journal: Vec<(&'a Arc<str>, u64, &'a String)>,
    // Per session: the lowest and highest journal seq of the batch.
    journaled: HashMap<Arc<str>, (u64, u64)>,
    inbound: HashMap<(Arc<str>, u64), &'a String>,
    served: Vec<(Arc<str>, u64)>,
    touched: Vec<Arc<str>>,
    // Per session: journal lines up to this number were delivered for good.
    delivered: HashMap<Arc<str>, u64>,
}

impl<'a> Folded<'a> {
    fn status(&mut self, key: Key, patch: Patch) {
        if let Some(row) = self.subagents.get_mut(&key) {
            row.status = patch.status;
            row.result = patch.result;
            row.error = patch.error;
            if let Some(started) = patch.tasks_started {
                row.tasks_started = started;
            }
            if let Some(usage) = patch.usage {
                row.usage = usage;
            }
            return;
        }
        let earlier = self.patches.get(&key);
        let tasks_started = patch.tasks_started.or(earlier.and_then(|p| p.tasks_started));
        let usage = patch.usage.or(earlier.and_then(|p| p.usage));
        self.patches.insert(key, Patch { tasks_started, usage, ..patch });
    }

    // What a subagent held at a checkpoint or its task's end.
    fn held(&mut self, session: &Arc<str>, id: SubagentId, held: &'a Held) {
        if let Some((owner, entries)) = &held.memory {
            self.memories.insert((session.clone(), *owner), entries);
        }
        if let Some(messages) = &held.mailbox {
            self.mailboxes.insert((session.clone(), id), messages);
        }
    }

    // A request frame was served.
    fn served(&mut self, session: &Arc<str>, seq: u64) {
        // Handed over and served within one batch: never written.
        if self.inbound.remove(&(session.clone(), seq)).is_none() {
            self.served.push((session.clone(), seq));
        }
    }

    // A session that ended: nothing of it recorded before matters.
    fn end(&mut self, session: &Arc<str>) {
        let mine = |key: &Key| key.0 != *session;
        self.sessions.retain(|row| row.id != *session);
        self.forgotten.retain(mine);
        self.subagents.retain(|key, _| mine(key));
        self.patches.retain(|key, _| mine(key));
        self.tasks.retain(|key, _| mine(key));
        self.memories.retain(|key, _| mine(key));
        self.mailboxes.retain(|key, _| mine(key));
        self.journal.retain(|(s, _, _)| *s != session);
        self.journaled.remove(session);
        self.inbound.retain(|(s, _), _| s != session);
        self.served.retain(|(s, _)| s != session);
        self.touched.retain(|s| s != session);
        self.delivered.remove(session);
        self.ended.push(session.clone());
    }

    fn add(&mut self, change: &'a Change) {
        match change {
            Change::SessionOpened(row) => {
                // Stored at creation and again at its handshake: the last one
                // wins (one statement may not touch a row twice).
                self.sessions.retain(|kept| kept.id != row.id);
                self.sessions.push(row);
            }
            Change::SessionEnded { session } => self.end(session),
            Change::Touched { session } => self.touched.push(session.clone()),
            Change::Subagent { session, id, row } => {
                let key = (session.clone(), *id);
                self.patches.remove(&key);
                self.subagents.insert(key, row.clone());
            }
            Change::SubagentForgotten { session, id } => {
                let key = (session.clone(), *id);
                self.subagents.remove(&key);
                self.patches.remove(&key);
                self.tasks.remove(&key);
                self.memories.remove(&key);
                self.mailboxes.remove(&key);
                self.forgotten.push(key);
            }
            Change::TaskQueued { session, id, task, position } => {
                // Attempt 0 marks it queued; `step` holds its place.
                let queued = TaskOp::Insert { task, task_no: 0, attempt: 0, step: *position, checkpoint: None };
                self.tasks.insert((session.clone(), *id), queued);
            }
            Change::TaskStarted { session, id, task, task_no, attempt } => {
                let key = (session.clone(), *id);
                let patch = Patch {
                    status: SubagentStatus::Running,
                    result: None,
                    error: None,
                    tasks_started: Some(*task_no),
                    usage: None,
                };
                self.status(key.clone(), patch);
                if *attempt > 1 {
                    // A resumed task keeps its checkpoint.
                    match self.tasks.get_mut(&key) {
                        Some(TaskOp::Insert { attempt: a, .. }) => *a = *attempt,
                        Some(TaskOp::Update { attempt: a, .. }) => *a = Some(*attempt),
                        _ => {
                            self.tasks.insert(key, TaskOp::Update { attempt: Some(*attempt), checkpoint: None });
                        }
                    }
                } else {
                    let insert = TaskOp::Insert { task, task_no: *task_no, attempt: 1, step: 0, checkpoint: None };
                    self.tasks.insert(key, insert);
                }
            }
            Change::Checkpoint { session, id, checkpoint, held } => {
                let key = (session.clone(), *id);
                self.held(session, *id, held);
                match self.tasks.get_mut(&key) {
                    Some(TaskOp::Insert { step, checkpoint: c, .. }) => {
                        *step = u64::from(checkpoint.step);
                        *c = Some(&checkpoint.state);
                    }
                    Some(TaskOp::Update { checkpoint: c, .. }) => *c = Some((checkpoint.step, &checkpoint.state)),
                    Some(TaskOp::Delete) => {}
                    None => {
                        let update =
                            TaskOp::Update { attempt: None, checkpoint: Some((checkpoint.step, &checkpoint.state)) };
                        self.tasks.insert(key, update);
                    }
                }
            }
            Change::TaskEnded { session, id, status, result, error, held, usage } => {
                let key = (session.clone(), *id);
                self.held(session, *id, held);
                let patch = Patch {
                    status: *status,
                    result: result.clone(),
                    error: error.clone(),
                    tasks_started: None,
                    usage: Some(*usage),
                };
                self.status(key.clone(), patch);
                self.tasks.insert(key, TaskOp::Delete);
            }
            Change::Mailbox { session, id, messages, served } => {
                self.mailboxes.insert((session.clone(), *id), messages);
                if let Some(frame) = served {
                    self.served(session, *frame);
                }
            }
            Change::Line { session, seq, line, answers, .. } => {
                if let Some(frame) = answers {
                    self.served(session, *frame);
                }
                // A line not kept (no transport can replay it) only gates.
                let Some(line) = line else { return };
                self.journal.push((session, *seq, line));
                let span = self.journaled.entry(session.clone()).or_insert((*seq, *seq));
                span.0 = span.0.min(*seq);
                span.1 = span.1.max(*seq);
            }
            Change::Inbound { session, seq, frame } => {
                self.inbound.insert((session.clone(), *seq), frame);
            }
            Change::InboundDone { session, seq } => self.served(session, *seq),
            Change::JournalDelivered { session, up_to } => {
                let delivered = self.delivered.entry(session.clone()).or_default();
                *delivered = (*delivered).max(*up_to);
            }
        }
    }
}

/// The statements `batch` comes to, keeping the newest `retained` journal
/// lines of each session it writes to.
pub(super) fn compile(batch: &[Change], retained: u64, dialect: Dialect) -> Vec<Op> {
    let mut folded = Folded::default();
    for change in batch {
        folded.add(change);
    }
    let mut ops = Vec::new();
    for session in &folded.ended {
        end_session(dialect, session, &mut ops);
    }
    deletes(dialect, &mut ops, "subagents", "id", &folded.forgotten);
    deletes(dialect, &mut ops, "tasks", "subagent_id", &folded.forgotten);
    deletes(dialect, &mut ops, "memories", "owner_id", &folded.forgotten);
    deletes(dialect, &mut ops, "mailboxes", "subagent_id", &folded.forgotten);
    let now = now_ms();
    for row in &folded.sessions {
        let p: Vec<String> = (1..=9).map(|n| param(dialect, n)).collect();
        // The row's next line number goes in the same statement as the row
        // (a statement may change a row once): the journal's top, if any.
        let next_seq = folded.journaled.get(&row.id).map_or(1, |(_, top)| top + 1);
        ops.push(Op {
            sql: format!(
                "INSERT INTO sessions (id, agent_id, capabilities, principal, transport, next_seq, created_ms, touched_ms, handshaken) \
                 VALUES ({}, {}, {}, {}, {}, {}, {}, {}, {}) \
                 ON CONFLICT (id) DO UPDATE SET agent_id = excluded.agent_id, capabilities = excluded.capabilities, \
                 principal = excluded.principal, touched_ms = excluded.touched_ms, handshaken = excluded.handshaken, \
                 next_seq = CASE WHEN excluded.next_seq > sessions.next_seq THEN excluded.next_seq ELSE sessions.next_seq END",
                p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8]
            ),
            args: vec![
                Arg::Text(row.id.to_string()),
                Arg::Text(row.agent_id.clone()),
                Arg::Text(json(&row.capabilities)),
                Arg::OptText(row.principal.clone()),
                Arg::Text(row.transport.clone()),
                int(next_seq),
                Arg::Int(now),
                Arg::Int(now),
                Arg::Int(i64::from(row.handshaken)),
            ],
        });
    }
    subagent_rows(dialect, &mut ops, &folded.subagents);
    subagent_patches(dialect, &mut ops, &folded.patches);
    task_ops(dialect, &mut ops, &folded.tasks);
    let memories: Vec<Vec<Arg>> = folded
        .memories
        .iter()
        .map(|((session, owner), entries)| key_args(session, *owner, [Arg::Text(json(entries))]))
        .collect();
    insert(
        dialect,
        &mut ops,
        "memories (session_id, owner_id, entries)",
        &memories,
        "(session_id, owner_id) DO UPDATE SET entries = excluded.entries",
    );
    let (empty, full): (Vec<_>, Vec<_>) = folded.mailboxes.iter().partition(|(_, messages)| messages.is_empty());
    let emptied: Vec<Key> = empty.into_iter().map(|(key, _)| key.clone()).collect();
    deletes(dialect, &mut ops, "mailboxes", "subagent_id", &emptied);
    let mailboxes: Vec<Vec<Arg>> = full
        .into_iter()
        .map(|((session, id), messages)| key_args(session, *id, [Arg::Text(mailbox_json(messages))]))
        .collect();
    insert(
        dialect,
        &mut ops,
        "mailboxes (session_id, subagent_id, messages)",
        &mailboxes,
        "(session_id, subagent_id) DO UPDATE SET messages = excluded.messages",
    );
    let lines: Vec<Vec<Arg>> = folded
        .journal
        .iter()
        .map(|(session, seq, line)| vec![Arg::Text(session.to_string()), int(*seq), Arg::Text((*line).clone())])
        .collect();
    insert(dialect, &mut ops, "journal (session_id, seq, line)", &lines, "(session_id, seq) DO NOTHING");
    let tops: Vec<Vec<Arg>> = folded
        .journaled
        .iter()
        .filter(|(session, _)| !folded.sessions.iter().any(|row| row.id == **session))
        .map(|(session, (_, top))| vec![Arg::Text(session.to_string()), int(top + 1), Arg::Int(now)])
        .collect();
    update_from(
        dialect,
        &mut ops,
        "sessions",
        "next_seq = v.column2, touched_ms = v.column3",
        "sessions.id = v.column1",
        3,
        &tops,
    );
    for (session, up_to) in &folded.delivered {
        ops.push(Op {
            sql: format!(
                "DELETE FROM journal WHERE session_id = {} AND seq <= {}",
                param(dialect, 1),
                param(dialect, 2)
            ),
            args: vec![Arg::Text(session.to_string()), int(*up_to)],
        });
    }
    for (session, (low, top)) in &folded.journaled {
        // Trimmed now and then, not at every batch.
        if *top > retained && top / TRIM_EVERY != low.saturating_sub(1) / TRIM_EVERY {
            ops.push(Op {
                sql: format!(
                    "DELETE FROM journal WHERE session_id = {} AND seq <= {}",
                    param(dialect, 1),
                    param(dialect, 2)
                ),
                args: vec![Arg::Text(session.to_string()), int(top - retained)],
            });
        }
    }
    let inbound: Vec<Vec<Arg>> = folded
        .inbound
        .iter()
        .map(|((session, seq), frame)| vec![Arg::Text(session.to_string()), int(*seq), Arg::Text((*frame).clone())])
        .collect();
    insert(dialect, &mut ops, "inbound (session_id, seq, frame)", &inbound, "(session_id, seq) DO NOTHING");
    let mut served: HashMap<&Arc<str>, Vec<u64>> = HashMap::new();
    for (session, seq) in &folded.served {
        served.entry(session).or_default().push(*seq);
    }
    for (session, seqs) in served {
        for chunk in chunks(&seqs) {
            let mut args = vec![Arg::Text(session.to_string())];
            args.extend(chunk.iter().map(|seq| int(*seq)));
            ops.push(Op {
                sql: format!(
                    "DELETE FROM inbound WHERE session_id = {} AND seq IN ({})",
                    first(dialect),
                    placeholders(dialect, 2, chunk.len())
                ),
                args,
            });
        }
    }
    ops
}

fn subagent_rows(dialect: Dialect, ops: &mut Vec<Op>, rows: &HashMap<Key, SubagentRow>) {
    let rows: Vec<Vec<Arg>> = rows
        .iter()
        .map(|((session, id), row)| {
            key_args(
                session,
                *id,
                [
                    int(row.ord),
                    Arg::OptText(row.parent.map(|p| p.to_string())),
                    Arg::OptText(row.parent_agent_id.as_deref().map(str::to_owned)),
                    Arg::OptText(row.root_agent_id.as_deref().map(str::to_owned)),
                    int(u64::from(row.depth)),
                    Arg::OptText(row.spawn_key.as_deref().map(str::to_owned)),
                    int(row.tasks_started),
                    Arg::Text(json(&*row.config)),
                    Arg::Text(status_text(row.status)),
                    Arg::OptText(row.result.as_ref().map(|result| result.text().to_owned())),
                    Arg::OptText(row.error.as_deref().map(str::to_owned)),
                    int(row.usage.input_tokens),
                    int(row.usage.output_tokens),
                ],
            )
        })
        .collect();
    insert(
        dialect,
        ops,
        "subagents (session_id, id, ord, parent_id, parent_agent_id, root_agent_id, depth, spawn_key, tasks_started, \
         config, status, result, error, usage_input, usage_output)",
        &rows,
        "(session_id, id) DO UPDATE SET status = excluded.status, result = excluded.result, error = excluded.error, \
         tasks_started = excluded.tasks_started, usage_input = excluded.usage_input, \
         usage_output = excluded.usage_output",
    );
}

fn subagent_patches(dialect: Dialect, ops: &mut Vec<Op>, patches: &HashMap<Key, Patch>) {
    let rows: Vec<Vec<Arg>> = patches
        .iter()
        .map(|((session, id), patch)| {
            key_args(
                session,
                *id,
                [
                    Arg::Text(status_text(patch.status)),
                    Arg::OptText(patch.result.as_ref().map(|result| result.text().to_owned())),
                    Arg::OptText(patch.error.as_deref().map(str::to_owned)),
                    Arg::OptInt(patch.tasks_started.map(|n| i64::try_from(n).unwrap_or(i64::MAX))),
                    Arg::OptInt(patch.usage.map(|u| i64::try_from(u.input_tokens).unwrap_or(i64::MAX))),
                    Arg::OptInt(patch.usage.map(|u| i64::try_from(u.output_tokens).unwrap_or(i64::MAX))),
                ],
            )
        })
        .collect();
    update_from(
        dialect,
        ops,
        "subagents",
        "status = v.column3, result = v.column4, error = v.column5, \
         tasks_started = COALESCE(v.column6, subagents.tasks_started), \
         usage_input = COALESCE(v.column7, subagents.usage_input), \
         usage_output = COALESCE(v.column8, subagents.usage_output)",
        "subagents.session_id = v.column1 AND subagents.id = v.column2",
        8,
        &rows,
    );
}

fn task_ops(dialect: Dialect, ops: &mut Vec<Op>, tasks: &HashMap<Key, TaskOp<'_>>) {
    let mut deleted = Vec::new();
    let mut inserted = Vec::new();
    let mut updated = Vec::new();
    for ((session, id), op) in tasks {
        match op {
            TaskOp::Delete => deleted.push((session.clone(), *id)),
            TaskOp::Insert { task, task_no, attempt, step, checkpoint } => inserted.push(key_args(
                session,
                *id,
                [
                    Arg::Text(json(&***task)),
                    int(*task_no),
                    int(u64::from(*attempt)),
                    int(*step),
                    Arg::OptText(checkpoint.map(json)),
                ],
            )),
            TaskOp::Update { attempt, checkpoint } => updated.push(key_args(
                session,
                *id,
                [
                    Arg::OptInt(attempt.map(i64::from)),
                    Arg::OptInt(checkpoint.map(|(step, _)| i64::from(step))),
                    Arg::OptText(checkpoint.map(|(_, state)| json(state))),
                ],
            )),
        }
    }
    deletes(dialect, ops, "tasks", "subagent_id", &deleted);
    insert(
        dialect,
        ops,
        "tasks (session_id, subagent_id, task, task_no, attempt, step, checkpoint)",
        &inserted,
        "(session_id, subagent_id) DO UPDATE SET task = excluded.task, task_no = excluded.task_no, \
         attempt = excluded.attempt, step = excluded.step, checkpoint = excluded.checkpoint",
    );
    update_from(
        dialect,
        ops,
        "tasks",
        "attempt = COALESCE(v.column3, tasks.attempt), step = COALESCE(v.column4, tasks.step), \
         checkpoint = CASE WHEN v.column4 IS NULL THEN tasks.checkpoint ELSE v.column5 END",
        "tasks.session_id = v.column1 AND tasks.subagent_id = v.column2",
        5,
        &updated,
    );
}

/// How a statement numbers its parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dialect {
    /// `?`: SQLite looks a numbered or named parameter up by a linear scan,
    /// at parse and at bind, so a statement of N of them costs N²; plain
    /// `?` costs nothing of the kind.
    Sqlite,
    /// `$1, $2, …`.
    Postgres,
}

/// Parameter `n` in the dialect's spelling. SQLite statements take each
/// parameter once and in order, so that a batch can run as one string.
fn param(dialect: Dialect, n: usize) -> String {
    match dialect {
        Dialect::Sqlite => "?".to_owned(),
        Dialect::Postgres => format!("${n}"),
    }
}

/// Parameters `first ..` (`count` of them) in the dialect's spelling.
fn placeholders(dialect: Dialect, first: usize, count: usize) -> String {
    (first..first + count).map(|n| param(dialect, n)).collect::<Vec<_>>().join(", ")
}

/// `($1, $2), ($3, $4), …` for `rows` rows of `width` values.
fn values(dialect: Dialect, rows: usize, width: usize) -> String {
    (0..rows).map(|row| format!("({})", placeholders(dialect, 1 + row * width, width))).collect::<Vec<_>>().join(", ")
}

// Multi-row `INSERT INTO table (cols) VALUES … ON CONFLICT on_conflict`.
fn insert(dialect: Dialect, ops: &mut Vec<Op>, table: &str, rows: &[Vec<Arg>], on_conflict: &str) {
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
fn update_from(
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
fn deletes(dialect: Dialect, ops: &mut Vec<Op>, table: &str, id_column: &str, keys: &[Key]) {
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
fn first(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Sqlite => "?",
        Dialect::Postgres => "$1",
    }
}

/// Every row of a session goes.
pub(super) fn end_session(dialect: Dialect, session: &str, ops: &mut Vec<Op>) {
    let p = first(dialect);
    for table in ["subagents", "tasks", "memories", "mailboxes", "journal", "inbound"] {
        ops.push(Op {
            sql: format!("DELETE FROM {table} WHERE session_id = {p}"),
            args: vec![Arg::Text(session.to_owned())],
        });
    }
    ops.push(Op { sql: format!("DELETE FROM sessions WHERE id = {p}"), args: vec![Arg::Text(session.to_owned())] });
}

/// A session's lease goes (it expired: no node serves it).
pub(super) fn drop_lease(dialect: Dialect, session: &str, ops: &mut Vec<Op>) {
    let p = first(dialect);
    ops.push(Op {
        sql: format!("DELETE FROM leases WHERE session_id = {p}"),
        args: vec![Arg::Text(session.to_owned())],
    });
}

fn key_args<const N: usize>(session: &str, id: SubagentId, rest: [Arg; N]) -> Vec<Arg> {
    let mut args = Vec::with_capacity(N + 2);
    args.push(Arg::Text(session.to_owned()));
    args.push(Arg::Text(id.to_string()));
    args.extend(rest);
    args
}

fn int(n: u64) -> Arg {
    Arg::Int(i64::try_from(n).unwrap_or(i64::MAX))
}

pub(super) fn json<T: serde::Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "null".into())
}

pub(super) fn status_text(status: SubagentStatus) -> String {
    status.as_str().to_owned()
}

/// A mailbox message as stored.
#[derive(serde::Serialize, serde::Deserialize)]
pub(super) struct StoredMessage {
    pub(super) from: String,
    pub(super) kind: String,
    pub(super) content: Value,
}

fn mailbox_json(messages: &[InboxMessage]) -> String {
    let stored: Vec<StoredMessage> = messages
        .iter()
        .map(|m| StoredMessage {
            from: m.from.clone(),
            kind: m.payload.kind.clone(),
            content: m.payload.content.clone(),
        })
        .collect();
    json(&stored)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::wire::{JsonObject, SubagentConfig};

    fn row() -> SubagentRow {
        SubagentRow {
            ord: 0,
            parent: None,
            parent_agent_id: None,
            root_agent_id: None,
            depth: 0,
            spawn_key: None,
            tasks_started: 0,
            config: Arc::new(SubagentConfig::new("n", "m")),
            status: SubagentStatus::Ready,
            result: None,
            error: None,
            usage: Usage::default(),
        }
    }

    #[test]
    fn a_spawn_run_and_end_in_one_batch_fold_to_one_insert_and_one_delete() {
        let session: Arc<str> = "s".into();
        let id = SubagentId::parse("sub_00000001").unwrap();
        let task = Arc::new(TaskDefinition::new("t", "i"));
        let mut result = JsonObject::new();
        result.insert("ok".into(), Value::Bool(true));
        let batch = vec![
            Change::Subagent { session: session.clone(), id, row: row() },
            Change::TaskStarted { session: session.clone(), id, task, task_no: 1, attempt: 1 },
            Change::TaskEnded {
                session: session.clone(),
                id,
                status: SubagentStatus::Completed,
                result: Some(RawObject::from(result)),
                error: None,
                held: Held::default(),
                usage: Usage { input_tokens: 123, output_tokens: 45 },
            },
        ];
        let ops = compile(&batch, 1024, Dialect::Postgres);
        assert_eq!(ops.len(), 2, "{ops:#?}");
        assert!(ops[0].sql.starts_with("INSERT INTO subagents"));
        assert!(ops[0].args.contains(&Arg::Text("COMPLETED".into())), "the last state is inserted");
        assert!(ops[0].args.contains(&Arg::Int(1)), "tasks_started");
        assert!(ops[0].args.contains(&Arg::Int(123)) && ops[0].args.contains(&Arg::Int(45)), "usage");
        assert!(ops[1].sql.starts_with("DELETE FROM tasks"));
    }

    #[test]
    fn changes_before_a_session_ends_are_dropped_and_its_rows_deleted() {
        let session: Arc<str> = "s".into();
        let id = SubagentId::parse("sub_00000001").unwrap();
        let batch = vec![
            Change::Subagent { session: session.clone(), id, row: row() },
            Change::Line { session: session.clone(), seq: 1, line: Some("x".into()), gate: None, answers: None },
            Change::SessionEnded { session: session.clone() },
        ];
        let ops = compile(&batch, 1024, Dialect::Postgres);
        assert!(ops.iter().all(|op| op.sql.starts_with("DELETE")), "{ops:#?}");
        assert_eq!(ops.len(), 7);
    }

    #[test]
    fn a_frame_handed_over_and_served_in_one_batch_is_never_written() {
        let session: Arc<str> = "s".into();
        let batch = vec![
            Change::Inbound { session: session.clone(), seq: 4, frame: "{}".into() },
            Change::InboundDone { session: session.clone(), seq: 4 },
            Change::InboundDone { session: session.clone(), seq: 3 },
        ];
        let ops = compile(&batch, 1024, Dialect::Postgres);
        assert_eq!(ops.len(), 1);
        assert_eq!(ops[0].args, vec![Arg::Text("s".into()), Arg::Int(3)]);

        // A reply names the frame it answers: served in the reply's commit.
        let batch = vec![
            Change::Inbound { session: session.clone(), seq: 5, frame: "{}".into() },
            Change::Line { session: session.clone(), seq: 9, line: Some("reply".into()), gate: None, answers: Some(5) },
            Change::Line {
                session: session.clone(),
                seq: 10,
                line: Some("reply".into()),
                gate: None,
                answers: Some(2),
            },
        ];
        let ops = compile(&batch, 1024, Dialect::Postgres);
        assert!(!ops.iter().any(|op| op.sql.starts_with("INSERT INTO inbound")), "{ops:#?}");
        let served: Vec<_> = ops.iter().filter(|op| op.sql.starts_with("DELETE FROM inbound")).collect();
        assert_eq!(served.len(), 1);
        assert_eq!(served[0].args, vec![Arg::Text("s".into()), Arg::Int(2)]);
    }

    #[test]
    fn a_session_stored_at_creation_and_at_its_handshake_in_one_batch_is_one_row() {
        let opened = |handshaken: bool| {
            Change::SessionOpened(SessionRow {
                id: "s".into(),
                agent_id: if handshaken { "client".into() } else { String::new() },
                capabilities: Vec::new(),
                principal: None,
                transport: "http".into(),
                handshaken,
            })
        };
        let ops = compile(&[opened(false), opened(true)], 1024, Dialect::Postgres);
        let inserts: Vec<_> = ops.iter().filter(|op| op.sql.starts_with("INSERT INTO sessions")).collect();
        assert_eq!(inserts.len(), 1, "{ops:#?}");
        assert_eq!(inserts[0].args.len(), 9, "one row: a statement may not touch a row twice");
        assert!(inserts[0].args.contains(&Arg::Text("client".into())), "the handshake's row wins");
        assert_eq!(inserts[0].args[8], Arg::Int(1), "handshaken");

        // Its lines' numbers go in the same statement, not a second update.
        let line = Change::Line { session: "s".into(), seq: 4, line: Some("x".into()), gate: None, answers: None };
        let ops = compile(&[opened(true), line], 1024, Dialect::Postgres);
        let touching: Vec<_> = ops.iter().filter(|op| op.sql.contains("sessions")).collect();
        assert_eq!(touching.len(), 1, "{ops:#?}");
        assert_eq!(touching[0].args[5], Arg::Int(5), "next_seq");
    }

    #[test]
    fn journal_lines_delivered_for_good_are_deleted_after_the_batch_inserts_them() {
        let session: Arc<str> = "s".into();
        let batch = vec![
            Change::Line { session: session.clone(), seq: 7, line: Some("x".into()), gate: None, answers: None },
            Change::JournalDelivered { session: session.clone(), up_to: 5 },
            Change::JournalDelivered { session: session.clone(), up_to: 7 },
        ];
        let ops = compile(&batch, 1024, Dialect::Postgres);
        let insert = ops.iter().position(|op| op.sql.starts_with("INSERT INTO journal")).expect("the line");
        let delete = ops.iter().position(|op| op.sql.starts_with("DELETE FROM journal")).expect("the delivery");
        assert!(insert < delete, "{ops:#?}");
        assert_eq!(ops[delete].args, vec![Arg::Text("s".into()), Arg::Int(7)], "the highest delivery only");
    }

    #[test]
    fn a_message_from_a_journaled_frame_is_stored_with_its_frame_served_in_one_commit() {
        let session: Arc<str> = "s".into();
        let id = SubagentId::parse("sub_00000001").unwrap();
        let message = InboxMessage {
            from: "client".into(),
            payload: crate::protocol::wire::SubagentMessagePayload { kind: "note".into(), content: Value::Null },
        };
        let batch = vec![
            Change::Inbound { session: session.clone(), seq: 3, frame: "{}".into() },
            Change::Mailbox { session: session.clone(), id, messages: vec![message], served: Some(3) },
        ];
        let ops = compile(&batch, 1024, Dialect::Postgres);
        assert!(ops.iter().any(|op| op.sql.starts_with("INSERT INTO mailboxes")), "{ops:#?}");
        assert!(!ops.iter().any(|op| op.sql.contains("inbound")), "handed over and served in one batch: {ops:#?}");
        // Its frame committed earlier: the one change stores the message and
        // marks the frame served, so a replay after a crash finds it done.
        let ops = compile(&batch[1..], 1024, Dialect::Postgres);
        let served = ops.iter().find(|op| op.sql.starts_with("DELETE FROM inbound")).expect("served");
        assert_eq!(served.args, vec![Arg::Text("s".into()), Arg::Int(3)]);
    }

    #[test]
    fn many_rows_share_one_statement_per_table() {
        let session: Arc<str> = "s".into();
        let batch: Vec<Change> = (1..=150)
            .map(|seq| Change::Line {
                session: session.clone(),
                seq,
                line: Some(format!("line {seq}")),
                gate: None,
                answers: None,
            })
            .collect();
        let ops = compile(&batch, 1024, Dialect::Postgres);
        // 150 = 128 + 16 + 4 + 2: four statement shapes, each cached.
        let sizes: Vec<usize> =
            ops.iter().filter(|op| op.sql.starts_with("INSERT")).map(|op| op.args.len() / 3).collect();
        assert_eq!(sizes, [128, 16, 4, 2]);
        assert_eq!(ops.len(), 5, "four inserts and one sessions update");
    }
}
