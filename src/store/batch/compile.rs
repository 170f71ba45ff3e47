//! [`compile`]: a folded batch into its statements, table by table, in the
//! order the store runs them.

use std::collections::HashMap;
use std::sync::Arc;

use super::columns::{int, json, key_args, mailbox_json};
use super::fold::{Folded, Key};
use super::statement::{delete_in, deletes, end_session, insert, param, update_from, Arg, Dialect, Op};
use super::subagent_tables::{checkpoint_parts, memory_updates, subagent_patches, subagent_rows, task_ops};
use crate::store::writer::now_ms;
use crate::store::Change;

/// Journal lines are trimmed to `retained` once per this many lines.
const TRIM_EVERY: u64 = 128;

/// `batch` folded per row, for [`compile`].
pub(in crate::store) fn fold(batch: &[Change]) -> Folded<'_> {
    let mut folded = Folded::default();
    for change in batch {
        folded.add(change);
    }
    folded
}

/// The statements a folded batch comes to, keeping the newest `retained`
/// journal lines of each session it writes to. They bind the batch's texts
/// where they are (a statement's values borrow from `folded`). `retried`:
/// the batch follows a failed commit, whose outcome may be unknown, and
/// every statement must find what it would write already written.
pub(in crate::store) fn compile<'f>(
    folded: &'f Folded<'_>,
    retained: u64,
    dialect: Dialect,
    retried: bool,
) -> Vec<Op<'f>> {
    let mut ops = Vec::new();
    for session in &folded.ended {
        end_session(dialect, session, &mut ops);
    }
    deletes(dialect, &mut ops, "subagents", "id", &folded.forgotten);
    deletes(dialect, &mut ops, "tasks", "subagent_id", &folded.forgotten);
    deletes(dialect, &mut ops, "checkpoint_parts", "subagent_id", &folded.forgotten);
    deletes(dialect, &mut ops, "mailboxes", "subagent_id", &folded.forgotten);
    let now = now_ms();
    for row in &folded.sessions {
        let p: Vec<String> = (1..=10).map(|n| param(dialect, n)).collect();
        // The row's next line number goes in the same statement as the row
        // (a statement may change a row once): the journal's top, if any;
        // and so does its request frames' high-water mark.
        let next_seq = folded.journaled.get(&row.id).map_or(1, |(_, top)| top + 1);
        let last_inbound = folded.inbound_top.get(&row.id).copied().unwrap_or(0);
        ops.push(Op {
            sql: format!(
                "INSERT INTO sessions (id, agent_id, capabilities, principal, transport, next_seq, created_ms, touched_ms, handshaken, last_inbound) \
                 VALUES ({}, {}, {}, {}, {}, {}, {}, {}, {}, {}) \
                 ON CONFLICT (id) DO UPDATE SET agent_id = excluded.agent_id, capabilities = excluded.capabilities, \
                 principal = excluded.principal, touched_ms = excluded.touched_ms, handshaken = excluded.handshaken, \
                 next_seq = CASE WHEN excluded.next_seq > sessions.next_seq THEN excluded.next_seq ELSE sessions.next_seq END, \
                 last_inbound = CASE WHEN excluded.last_inbound > sessions.last_inbound THEN excluded.last_inbound ELSE sessions.last_inbound END",
                p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9]
            ),
            args: vec![
                Arg::Text((*row.id).into()),
                Arg::Text(row.agent_id.as_str().into()),
                Arg::Text(json(&row.capabilities).into()),
                Arg::OptText(row.principal.as_deref().map(Into::into)),
                Arg::Text(row.transport.as_str().into()),
                int(next_seq),
                Arg::Int(now),
                Arg::Int(now),
                Arg::Int(i64::from(row.handshaken)),
                int(last_inbound),
            ],
        });
    }
    subagent_rows(dialect, &mut ops, &folded.subagents, &folded.memories, retried);
    subagent_patches(dialect, &mut ops, &folded.patches, &folded.memories);
    memory_updates(dialect, &mut ops, &folded.memories, &folded.subagents, &folded.patches);
    task_ops(dialect, &mut ops, &folded.tasks);
    checkpoint_parts(dialect, &mut ops, &folded.parts);
    let (empty, full): (Vec<_>, Vec<_>) = folded.mailboxes.iter().partition(|(_, messages)| messages.is_empty());
    let emptied: Vec<Key> = empty.into_iter().map(|(key, _)| key.clone()).collect();
    deletes(dialect, &mut ops, "mailboxes", "subagent_id", &emptied);
    let mailboxes: Vec<Vec<Arg>> = full
        .into_iter()
        .map(|((session, id), messages)| key_args(session, *id, [Arg::Text(mailbox_json(messages).into())]))
        .collect();
    insert(
        dialect,
        &mut ops,
        "mailboxes (session_id, subagent_id, messages)",
        mailboxes,
        "(session_id, subagent_id) DO UPDATE SET messages = excluded.messages",
    );
    let lines: Vec<Vec<Arg>> = folded
        .journal
        .iter()
        .map(|(session, seq, line)| vec![Arg::Text((***session).into()), int(*seq), Arg::Text(line.as_str().into())])
        .collect();
    insert(dialect, &mut ops, "journal (session_id, seq, line)", lines, "(session_id, seq) DO NOTHING");
    // Each row written once (a statement may change a row once): the next
    // line number past the journal's top, and the request frames'
    // high-water mark, of sessions not inserted above (0: unchanged).
    let mut tops: HashMap<&Arc<str>, (u64, u64)> = HashMap::new();
    for (session, (_, top)) in &folded.journaled {
        tops.entry(session).or_default().0 = top + 1;
    }
    for (session, top) in &folded.inbound_top {
        tops.entry(session).or_default().1 = *top;
    }
    let tops: Vec<Vec<Arg>> = tops
        .into_iter()
        .filter(|(session, _)| !folded.sessions.iter().any(|row| row.id == **session))
        .map(|(session, (next_seq, inbound))| {
            vec![Arg::Text((**session).into()), int(next_seq), Arg::Int(now), int(inbound)]
        })
        .collect();
    update_from(
        dialect,
        &mut ops,
        "sessions",
        "next_seq = CASE WHEN v.column2 > sessions.next_seq THEN v.column2 ELSE sessions.next_seq END, \
         touched_ms = v.column3, \
         last_inbound = CASE WHEN v.column4 > sessions.last_inbound THEN v.column4 ELSE sessions.last_inbound END",
        "sessions.id = v.column1",
        4,
        tops,
    );
    for (session, up_to) in &folded.delivered {
        ops.push(Op {
            sql: format!(
                "DELETE FROM journal WHERE session_id = {} AND seq <= {}",
                param(dialect, 1),
                param(dialect, 2)
            ),
            args: vec![Arg::Text((**session).into()), int(*up_to)],
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
                args: vec![Arg::Text((**session).into()), int(top - retained)],
            });
        }
    }
    let inbound: Vec<Vec<Arg>> = folded
        .inbound
        .iter()
        .map(|((session, seq), frame)| vec![Arg::Text((**session).into()), int(*seq), Arg::Text(frame.as_str().into())])
        .collect();
    insert(dialect, &mut ops, "inbound (session_id, seq, frame)", inbound, "(session_id, seq) DO NOTHING");
    let mut served: HashMap<&Arc<str>, Vec<Arg>> = HashMap::new();
    for (session, seq) in &folded.served {
        served.entry(session).or_default().push(int(*seq));
    }
    for (session, seqs) in served {
        delete_in(dialect, &mut ops, "inbound", "seq", (**session).into(), &seqs);
    }
    face_records(folded, dialect, &mut ops);
    ops
}

// What the faces keep beside the tree: retired tasks (trimmed to the newest
// the session keeps), follow-up messages and registered MCP servers.
fn face_records<'f>(folded: &'f Folded<'_>, dialect: Dialect, ops: &mut Vec<Op<'f>>) {
    let retired: Vec<Vec<Arg>> = folded
        .retired
        .iter()
        .map(|((session, id), (ended_ms, record))| {
            key_args(session, *id, [Arg::Int(*ended_ms), Arg::Text(record.as_str().into())])
        })
        .collect();
    insert(
        dialect,
        ops,
        "retired_tasks (session_id, id, ended_ms, record)",
        retired,
        "(session_id, id) DO UPDATE SET ended_ms = excluded.ended_ms, record = excluded.record",
    );
    let histories: Vec<Vec<Arg>> = folded
        .histories
        .iter()
        .map(|((session, id), messages)| key_args(session, *id, [Arg::Text(messages.as_str().into())]))
        .collect();
    insert(
        dialect,
        ops,
        "task_history (session_id, subagent_id, messages)",
        histories,
        "(session_id, subagent_id) DO UPDATE SET messages = excluded.messages",
    );
    for ((session, name), spec) in &folded.servers {
        let (p1, p2, p3) = (param(dialect, 1), param(dialect, 2), param(dialect, 3));
        let key = vec![Arg::Text((**session).into()), Arg::Text((*name).into())];
        ops.push(match spec {
            Some(spec) => Op {
                sql: format!(
                    "INSERT INTO session_servers (session_id, name, spec) VALUES ({p1}, {p2}, {p3}) \
                     ON CONFLICT (session_id, name) DO UPDATE SET spec = excluded.spec"
                ),
                args: key.into_iter().chain([Arg::Text(spec.as_str().into())]).collect(),
            },
            None => {
                Op { sql: format!("DELETE FROM session_servers WHERE session_id = {p1} AND name = {p2}"), args: key }
            }
        });
    }
    for (session, keep) in &folded.retired_trims {
        // (SQLite takes each parameter once and in order: the session is
        // bound again where it is named again.)
        let p: Vec<String> = (1..=3).map(|n| param(dialect, n)).collect();
        let session = || Arg::Text((**session).into());
        // The newest `keep` stay: those that ended before the one at that
        // place go (none while fewer are kept: the bound is then NULL).
        ops.push(Op {
            sql: format!(
                "DELETE FROM retired_tasks WHERE session_id = {} AND ended_ms < (SELECT ended_ms FROM retired_tasks \
                 WHERE session_id = {} ORDER BY ended_ms DESC LIMIT 1 OFFSET {})",
                p[0], p[1], p[2]
            ),
            args: vec![session(), session(), int(*keep)],
        });
        ops.push(Op {
            sql: format!(
                "DELETE FROM task_history WHERE session_id = {} AND subagent_id NOT IN \
                 (SELECT id FROM retired_tasks WHERE session_id = {}) AND subagent_id NOT IN \
                 (SELECT id FROM subagents WHERE session_id = {})",
                p[0], p[1], p[2]
            ),
            args: vec![session(), session(), session()],
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entries::{InboxMessage, MemoryEntry};
    use crate::ids::SubagentId;
    use crate::protocol::wire::JsonObject;
    use crate::protocol::wire::{RawObject, SubagentStatus, TaskDefinition, Usage};
    use crate::store::{Held, SessionRow, SubagentRow};
    use serde_json::Value;

    // The statements `batch` comes to, owning their values.
    fn compiled(batch: &[Change], retained: u64, dialect: Dialect) -> Vec<Op<'static>> {
        compile(&fold(batch), retained, dialect, false).into_iter().map(Op::into_owned).collect()
    }

    fn row() -> SubagentRow {
        SubagentRow::spawned()
    }

    #[test]
    fn a_spawn_run_and_end_in_one_batch_fold_to_one_insert() {
        let session: Arc<str> = "s".into();
        let id = SubagentId::parse("sub_00000001").unwrap();
        let task = Arc::new(TaskDefinition::new("t", "i"));
        let mut result = JsonObject::new();
        result.insert("ok".into(), Value::Bool(true));
        let batch = vec![
            Change::Subagent { session: session.clone(), id, row: row() },
            Change::TaskStarted { session: session.clone(), id, task, task_no: 1, attempt: 1, fresh: true },
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
        let ops = compiled(&batch, 1024, Dialect::Sqlite);
        assert_eq!(ops.len(), 1, "a task started and ended in the batch writes nothing: {ops:#?}");
        assert!(ops[0].sql.starts_with("INSERT INTO subagents"));
        assert!(ops[0].args.contains(&Arg::Text("COMPLETED".into())), "the last state is inserted");
        assert!(ops[0].args.contains(&Arg::Int(1)), "tasks_started");
        assert!(ops[0].args.contains(&Arg::Int(123)) && ops[0].args.contains(&Arg::Int(45)), "usage");
    }

    /// A spawned subagent's row is a plain insert (no key probe), unless
    /// the batch retries a failed commit that may have landed: then it is
    /// an upsert, on either engine.
    #[test]
    fn a_spawn_is_a_plain_insert_and_an_upsert_when_its_batch_is_retried() {
        let session: Arc<str> = "s".into();
        let id = SubagentId::parse("sub_00000001").unwrap();
        let batch = vec![Change::Subagent { session, id, row: row() }];
        for dialect in [Dialect::Sqlite, Dialect::Postgres] {
            let folded = fold(&batch);
            let (first, retried) = (compile(&folded, 1024, dialect, false), compile(&folded, 1024, dialect, true));
            let insert = |ops: &[Op]| {
                ops.iter().find(|op| op.sql.starts_with("INSERT INTO subagents")).expect("the row").sql.clone()
            };
            assert!(!insert(&first).contains("ON CONFLICT"), "{}", insert(&first));
            assert!(insert(&retried).contains("ON CONFLICT (session_id, id) DO UPDATE"), "{}", insert(&retried));
            assert_eq!(first.len(), retried.len());
            assert_eq!(
                first.iter().map(|op| &op.args).collect::<Vec<_>>(),
                retried.iter().map(|op| &op.args).collect::<Vec<_>>()
            );
        }
    }

    fn ended(session: &Arc<str>, id: SubagentId, held: Held) -> Change {
        Change::TaskEnded {
            session: session.clone(),
            id,
            status: SubagentStatus::Completed,
            result: None,
            error: None,
            held,
            usage: Usage::default(),
        }
    }

    fn started(session: &Arc<str>, id: SubagentId, fresh: bool) -> Change {
        let task = Arc::new(TaskDefinition::new("t", "i"));
        Change::TaskStarted { session: session.clone(), id, task, task_no: 2, attempt: 1, fresh }
    }

    #[test]
    fn a_task_whose_row_may_be_stored_is_deleted_at_its_end_in_the_same_batch() {
        let session: Arc<str> = "s".into();
        let id = SubagentId::parse("sub_00000001").unwrap();
        let deletes = |batch: &[Change]| {
            compiled(batch, 1024, Dialect::Sqlite).iter().filter(|op| op.sql.starts_with("DELETE FROM tasks")).count()
        };
        assert_eq!(deletes(&[started(&session, id, true), ended(&session, id, Held::default())]), 0);
        // It waited in the queue: its row was stored then.
        assert_eq!(deletes(&[started(&session, id, false), ended(&session, id, Held::default())]), 1);
        // The task before it ended in the batch: its row may be stored.
        let batch =
            [ended(&session, id, Held::default()), started(&session, id, true), ended(&session, id, Held::default())];
        assert_eq!(deletes(&batch), 1);
    }

    #[test]
    fn a_memory_is_written_in_its_owner_s_row() {
        let session: Arc<str> = "s".into();
        let (child, owner) = (SubagentId::parse("sub_00000002").unwrap(), SubagentId::parse("sub_00000001").unwrap());
        let memory = |owner| Held {
            memory: Some((owner, vec![MemoryEntry::Said { role: "user", content: "hi".into() }])),
            mailbox: None,
        };
        // Its own memory, with its task's end: one update of its row.
        let ops = compiled(&[ended(&session, child, memory(child))], 1024, Dialect::Postgres);
        let rows: Vec<_> = ops.iter().filter(|op| op.sql.contains("subagents")).collect();
        assert_eq!(rows.len(), 1, "{ops:#?}");
        assert!(rows[0].sql.starts_with("UPDATE subagents") && rows[0].sql.contains("memory = COALESCE"), "{ops:#?}");
        let stored = Arg::Texts(vec![Some(r#"[{"content":"hi","role":"user"}]"#.into())]);
        assert_eq!(rows[0].args[8], stored, "{ops:#?}");
        // A shared memory's owner, not otherwise in the batch: its column alone.
        let ops = compiled(&[ended(&session, child, memory(owner))], 1024, Dialect::Sqlite);
        let memory_only: Vec<_> = ops.iter().filter(|op| op.sql.contains("SET memory = v.column3")).collect();
        assert_eq!(memory_only.len(), 1, "{ops:#?}");
        assert_eq!(memory_only[0].args[1], Arg::Text(owner.to_string().into()));
        // An owner spawned in the batch: in its insert.
        let batch = [
            Change::Subagent { session: session.clone(), id: owner, row: row() },
            ended(&session, child, memory(owner)),
        ];
        let ops = compiled(&batch, 1024, Dialect::Sqlite);
        let insert = ops.iter().find(|op| op.sql.starts_with("INSERT INTO subagents")).expect("insert");
        assert!(
            insert.args.iter().any(|arg| matches!(arg, Arg::OptText(Some(text)) if text.contains("hi"))),
            "{insert:#?}"
        );
        assert!(!ops.iter().any(|op| op.sql.contains("SET memory = v.column3")), "{ops:#?}");
    }

    #[test]
    fn changes_before_a_session_ends_are_dropped_and_its_rows_deleted() {
        let session: Arc<str> = "s".into();
        let id = SubagentId::parse("sub_00000001").unwrap();
        let batch = vec![
            Change::Subagent { session: session.clone(), id, row: row() },
            Change::Line { session: session.clone(), seq: 1, line: Some("x".into()), gate: None, answers: None },
            Change::SessionEnded { session: session.clone(), gate: None },
        ];
        let ops = compiled(&batch, 1024, Dialect::Sqlite);
        assert!(ops.iter().all(|op| op.sql.starts_with("DELETE")), "{ops:#?}");
        assert_eq!(ops.len(), 10, "nine tables of the session's rows, and its own row: {ops:#?}");
        assert!(ops.iter().any(|op| op.sql.starts_with("DELETE FROM checkpoint_parts")), "{ops:#?}");
        assert!(ops.iter().any(|op| op.sql.starts_with("DELETE FROM retired_tasks")), "{ops:#?}");
    }

    #[test]
    fn face_records_are_upserted_trimmed_and_dropped_with_their_session() {
        let (session, other): (Arc<str>, Arc<str>) = ("s".into(), "t".into());
        let id = SubagentId::parse("sub_00000001").unwrap();
        let batch = vec![
            Change::Retired { session: session.clone(), id, ended_ms: 5, record: "{}".into() },
            Change::TaskHistory { session: session.clone(), id, messages: "[]".into() },
            Change::SessionServer { session: session.clone(), name: "mine".into(), spec: Some("{}".into()) },
            Change::RetiredTrim { session: session.clone(), keep: 10 },
            Change::Retired { session: other.clone(), id, ended_ms: 6, record: "{}".into() },
            Change::SessionServer { session: other.clone(), name: "gone".into(), spec: None },
            Change::SessionEnded { session: other.clone(), gate: None },
        ];
        for dialect in [Dialect::Sqlite, Dialect::Postgres] {
            let ops = compiled(&batch, 1024, dialect);
            let with = |start: &str| ops.iter().filter(|op| op.sql.starts_with(start)).count();
            assert_eq!(with("INSERT INTO retired_tasks"), 1, "{ops:#?}");
            assert_eq!(with("INSERT INTO task_history"), 1, "{ops:#?}");
            assert_eq!(with("INSERT INTO session_servers"), 1, "{ops:#?}");
            // The ended session's own: only its rows' deletes.
            assert_eq!(with("DELETE FROM session_servers WHERE session_id = "), 1, "{ops:#?}");
            assert_eq!(with("DELETE FROM retired_tasks WHERE session_id = "), 2, "its end and the trim: {ops:#?}");
            let trim = ops.iter().find(|op| op.sql.contains("OFFSET")).expect("a trim");
            assert_eq!(trim.args.len(), 3, "{trim:#?}");
            assert!(ops.iter().all(|op| !op.args.iter().any(|arg| format!("{arg:?}").contains("gone"))), "{ops:#?}");
        }
    }

    #[test]
    fn changes_recorded_as_a_session_ends_do_not_outlive_its_rows() {
        let (session, other): (Arc<str>, Arc<str>) = ("s".into(), "t".into());
        let id = SubagentId::parse("sub_00000001").unwrap();
        let batch = vec![
            Change::SessionEnded { session: session.clone(), gate: None },
            // In flight on another thread as it ended.
            Change::Subagent { session: session.clone(), id, row: row() },
            Change::Line { session: session.clone(), seq: 2, line: Some("x".into()), gate: None, answers: None },
            Change::Subagent { session: other, id, row: row() },
        ];
        let ops = compiled(&batch, 1024, Dialect::Sqlite);
        let inserts: Vec<&Op> = ops.iter().filter(|op| op.sql.starts_with("INSERT")).collect();
        assert_eq!(inserts.len(), 1, "only the other session's row: {ops:#?}");
        assert!(inserts[0].args.contains(&Arg::Text("t".into())), "{inserts:#?}");
    }

    fn appended(session: &Arc<str>, id: SubagentId, step: u32, from: u64, items: &[&str]) -> Change {
        Change::Checkpoint {
            session: session.clone(),
            id,
            checkpoint: crate::store::Checkpoint { step, state: serde_json::json!({ "usage": step }) },
            appended: Some(crate::store::Appended {
                field: "messages",
                from,
                items: items.iter().map(|item| Value::String((*item).into())).collect(),
            }),
            held: Held::default(),
        }
    }

    #[test]
    fn checkpoints_in_one_batch_write_one_head_and_what_they_added_as_one_part() {
        // SQLite's layout, a row's values in order (PostgreSQL binds the
        // same rows as one array per column).
        let session: Arc<str> = "s".into();
        let id = SubagentId::parse("sub_00000001").unwrap();
        let batch = vec![appended(&session, id, 4, 7, &["a"]), appended(&session, id, 5, 8, &["b", "c"])];
        let ops = compiled(&batch, 1024, Dialect::Sqlite);
        assert_eq!(ops.len(), 2, "{ops:#?}");
        assert!(ops[0].sql.starts_with("UPDATE tasks"));
        assert_eq!(ops[0].args[3], Arg::OptInt(Some(5)), "the last step");
        assert_eq!(ops[0].args[4], Arg::OptText(Some(r#"{"usage":5}"#.into())), "the head, without the list");
        assert_eq!(ops[0].args[5], Arg::OptText(Some("messages".into())), "the field the parts make");
        assert!(ops[1].sql.starts_with("INSERT INTO checkpoint_parts"), "{ops:#?}");
        let row = vec![
            Arg::Text("s".into()),
            Arg::Text(id.to_string().into()),
            Arg::Int(7),
            Arg::Text(r#"["a","b","c"]"#.into()),
        ];
        assert_eq!(ops[1].args, row, "only what was added, from its place in the list");
    }

    #[test]
    fn a_run_s_first_checkpoint_replaces_the_stored_parts_in_the_same_commit() {
        let session: Arc<str> = "s".into();
        let id = SubagentId::parse("sub_00000001").unwrap();
        let batch = vec![appended(&session, id, 1, 3, &["old"]), appended(&session, id, 1, 0, &["x", "y"])];
        let ops = compiled(&batch, 1024, Dialect::Sqlite);
        let delete = ops.iter().position(|op| op.sql.starts_with("DELETE FROM checkpoint_parts")).expect("delete");
        let insert = ops.iter().position(|op| op.sql.starts_with("INSERT INTO checkpoint_parts")).expect("insert");
        assert!(delete < insert, "{ops:#?}");
        assert_eq!(
            ops[insert].args[2..],
            [Arg::Int(0), Arg::Text(r#"["x","y"]"#.into())],
            "the part before is dropped"
        );
    }

    #[test]
    fn a_task_s_end_or_its_subagent_forgotten_deletes_its_parts() {
        let session: Arc<str> = "s".into();
        let id = SubagentId::parse("sub_00000001").unwrap();
        let batch = [appended(&session, id, 2, 5, &["a"]), ended(&session, id, Held::default())];
        let ops = compiled(&batch, 1024, Dialect::Postgres);
        assert!(ops.iter().any(|op| op.sql.starts_with("DELETE FROM checkpoint_parts")), "{ops:#?}");
        assert!(!ops.iter().any(|op| op.sql.contains("INTO checkpoint_parts")), "nothing of it is written: {ops:#?}");
        assert!(!ops.iter().any(|op| op.sql.starts_with("UPDATE tasks")), "{ops:#?}");

        let forgotten = Change::SubagentForgotten { session: session.clone(), id };
        let ops = compiled(&[appended(&session, id, 2, 5, &["a"]), forgotten], 1024, Dialect::Postgres);
        assert!(ops.iter().any(|op| op.sql.starts_with("DELETE FROM checkpoint_parts")), "{ops:#?}");
        assert!(!ops.iter().any(|op| op.sql.contains("INTO checkpoint_parts")), "{ops:#?}");
    }

    #[test]
    fn a_frame_handed_over_and_served_in_one_batch_is_never_written() {
        let session: Arc<str> = "s".into();
        let batch = vec![
            Change::Inbound { session: session.clone(), seq: 4, frame: "{}".into() },
            Change::InboundDone { session: session.clone(), seq: 4 },
            Change::InboundDone { session: session.clone(), seq: 3 },
        ];
        let ops = compiled(&batch, 1024, Dialect::Sqlite);
        let inbound: Vec<_> =
            ops.iter().filter(|op| op.sql.contains("FROM inbound") || op.sql.contains("INTO inbound")).collect();
        assert_eq!(inbound.len(), 1, "{ops:#?}");
        assert_eq!(inbound[0].args, vec![Arg::Text("s".into()), Arg::Int(3)]);
        // Its number is kept on the session's row all the same: frames after
        // a restart are numbered past it.
        let row = ops.iter().find(|op| op.sql.starts_with("UPDATE sessions")).expect("the high-water mark");
        assert!(row.sql.contains("last_inbound"), "{row:#?}");
        assert_eq!(row.args[3], Arg::Int(4), "{row:#?}");

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
        let ops = compiled(&batch, 1024, Dialect::Sqlite);
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
        let ops = compiled(&[opened(false), opened(true)], 1024, Dialect::Sqlite);
        let inserts: Vec<_> = ops.iter().filter(|op| op.sql.starts_with("INSERT INTO sessions")).collect();
        assert_eq!(inserts.len(), 1, "{ops:#?}");
        assert_eq!(inserts[0].args.len(), 10, "one row: a statement may not touch a row twice");
        assert!(inserts[0].args.contains(&Arg::Text("client".into())), "the handshake's row wins");
        assert_eq!(inserts[0].args[8], Arg::Int(1), "handshaken");

        // Its lines' numbers go in the same statement, not a second update.
        let line = Change::Line { session: "s".into(), seq: 4, line: Some("x".into()), gate: None, answers: None };
        let ops = compiled(&[opened(true), line], 1024, Dialect::Sqlite);
        let touching: Vec<_> = ops.iter().filter(|op| op.sql.contains("sessions")).collect();
        assert_eq!(touching.len(), 1, "{ops:#?}");
        assert_eq!(touching[0].args[5], Arg::Int(5), "next_seq");

        // And so does its request frames' high-water mark.
        let frame = Change::Inbound { session: "s".into(), seq: 3, frame: "{}".into() };
        let ops = compiled(&[opened(true), frame], 1024, Dialect::Sqlite);
        let touching: Vec<_> = ops.iter().filter(|op| op.sql.contains("sessions")).collect();
        assert_eq!(touching.len(), 1, "{ops:#?}");
        assert_eq!(touching[0].args[9], Arg::Int(3), "last_inbound");
    }

    #[test]
    fn journal_lines_delivered_for_good_are_deleted_after_the_batch_inserts_them() {
        let session: Arc<str> = "s".into();
        let batch = vec![
            Change::Line { session: session.clone(), seq: 7, line: Some("x".into()), gate: None, answers: None },
            Change::JournalDelivered { session: session.clone(), up_to: 5 },
            Change::JournalDelivered { session: session.clone(), up_to: 7 },
        ];
        let ops = compiled(&batch, 1024, Dialect::Sqlite);
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
        let ops = compiled(&batch, 1024, Dialect::Sqlite);
        assert!(ops.iter().any(|op| op.sql.starts_with("INSERT INTO mailboxes")), "{ops:#?}");
        let inbound = |op: &&Op| op.sql.contains("FROM inbound") || op.sql.contains("INTO inbound");
        assert!(!ops.iter().any(|op| inbound(&op)), "handed over and served in one batch: {ops:#?}");
        // Its frame committed earlier: the one change stores the message and
        // marks the frame served, so a replay after a crash finds it done.
        let ops = compiled(&batch[1..], 1024, Dialect::Sqlite);
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
        let ops = compiled(&batch, 1024, Dialect::Sqlite);
        // SQLite: 150 = 128 + 16 + 4 + 2: four statement shapes.
        let sizes: Vec<usize> =
            ops.iter().filter(|op| op.sql.starts_with("INSERT")).map(|op| op.args.len() / 3).collect();
        assert_eq!(sizes, [128, 16, 4, 2]);
        assert_eq!(ops.len(), 5, "four inserts and one sessions update");
    }

    #[test]
    fn on_postgres_a_table_takes_one_statement_of_one_text_whatever_the_number_of_rows() {
        let session: Arc<str> = "s".into();
        let lines = |n: u64| -> Vec<Change> {
            (1..=n)
                .map(|seq| Change::Line {
                    session: session.clone(),
                    seq,
                    line: Some(format!("line {seq}")),
                    gate: None,
                    answers: (seq % 2 == 0).then_some(seq),
                })
                .collect()
        };
        let (many, few) =
            (compiled(&lines(150), 1024, Dialect::Postgres), compiled(&lines(3), 1024, Dialect::Postgres));
        let texts = |ops: &[Op]| ops.iter().map(|op| op.sql.clone()).collect::<Vec<_>>();
        assert_eq!(texts(&many), texts(&few), "prepared once, whatever the batch's size: {many:#?}");
        let insert = many.iter().find(|op| op.sql.starts_with("INSERT INTO journal")).expect("the lines");
        assert!(insert.sql.contains("unnest($1::text[], $2::bigint[], $3::text[])"), "{}", insert.sql);
        let Arg::Ints(seqs) = &insert.args[1] else { panic!("{:?}", insert.args[1]) };
        assert_eq!(seqs.len(), 150);
        assert_eq!(seqs[149], Some(150));
        assert_eq!(insert.args[2], Arg::Texts((1..=150).map(|seq| Some(format!("line {seq}"))).collect()));
        let served = many.iter().find(|op| op.sql.starts_with("DELETE FROM inbound")).expect("the frames served");
        assert!(served.sql.contains("seq = ANY($2::bigint[])"), "{}", served.sql);
        let Arg::Ints(frames) = &served.args[1] else { panic!("{:?}", served.args[1]) };
        let mut frames = frames.clone();
        frames.sort_unstable();
        assert_eq!(frames, (1..=75).map(|n| Some(n * 2)).collect::<Vec<_>>());
        let tops = many.iter().find(|op| op.sql.starts_with("UPDATE sessions")).expect("the journal's top");
        assert!(tops.sql.contains("AS v(column1, column2, column3, column4)"), "{}", tops.sql);
    }

    #[test]
    fn on_postgres_a_row_with_nulls_keeps_each_column_in_its_array() {
        let mut first = row();
        first.parent_agent_id = Some("p".into());
        let mut second = row();
        second.ord = 1;
        let batch = vec![
            Change::Subagent { session: "s".into(), id: SubagentId::parse("sub_00000001").unwrap(), row: first },
            Change::Subagent { session: "s".into(), id: SubagentId::parse("sub_00000002").unwrap(), row: second },
        ];
        let ops = compiled(&batch, 1024, Dialect::Postgres);
        assert_eq!(ops.len(), 1, "{ops:#?}");
        assert_eq!(ops[0].args.len(), 16, "one array per column");
        let Arg::Texts(parents) = &ops[0].args[4] else { panic!("{:?}", ops[0].args[4]) };
        let mut parents = parents.clone();
        parents.sort();
        assert_eq!(parents, [None, Some("p".to_owned())], "a null stays in its row");
    }
}
