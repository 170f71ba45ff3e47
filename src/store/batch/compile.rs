//! [`compile`]: a folded batch into its statements, table by table, in the
//! order the store runs them.

use super::face_tables::face_records;
use super::fold::Folded;
use super::session_tables::{inbound, journal_lines, journal_trims, session_rows, session_tops};
use super::statement::{deletes, end_session, Dialect, Op};
use super::subagent_tables::{mailboxes, memory_updates, subagent_patches, subagent_rows};
use super::task_tables::{checkpoint_parts, task_ops};
use crate::store::change::Change;
use crate::store::clock::now_ms;

/// `batch` folded per row, for [`compile`].
pub(crate) fn fold(batch: &[Change]) -> Folded<'_> {
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
pub(crate) fn compile<'f>(folded: &'f Folded<'_>, retained: u64, dialect: Dialect, retried: bool) -> Vec<Op<'f>> {
    let mut ops = Vec::new();
    for session in &folded.ended {
        end_session(dialect, session, &mut ops);
    }
    deletes(dialect, &mut ops, "subagents", "id", &folded.forgotten);
    deletes(dialect, &mut ops, "tasks", "subagent_id", &folded.forgotten);
    deletes(dialect, &mut ops, "checkpoint_parts", "subagent_id", &folded.forgotten);
    deletes(dialect, &mut ops, "mailboxes", "subagent_id", &folded.forgotten);
    let now = now_ms();
    session_rows(folded, dialect, now, &mut ops);
    subagent_rows(dialect, &mut ops, &folded.subagents, &folded.memories, retried);
    subagent_patches(dialect, &mut ops, &folded.patches, &folded.memories);
    memory_updates(dialect, &mut ops, &folded.memories, &folded.subagents, &folded.patches);
    task_ops(dialect, &mut ops, &folded.tasks);
    checkpoint_parts(dialect, &mut ops, &folded.parts);
    mailboxes(dialect, &mut ops, &folded.mailboxes);
    journal_lines(folded, dialect, &mut ops);
    session_tops(folded, dialect, now, &mut ops);
    journal_trims(folded, retained, dialect, &mut ops);
    inbound(folded, dialect, &mut ops);
    face_records(folded, dialect, &mut ops);
    ops
}

/// Batches for the tests of every table's statements: a batch compiled,
/// and the changes they are made of.
#[cfg(test)]
pub(super) mod testing {
    use serde_json::Value;
    use std::sync::Arc;

    use super::{compile, fold};
    use crate::ids::SubagentId;
    use crate::protocol::wire::{SubagentStatus, TaskDefinition, Usage};
    use crate::store::batch::statement::{Dialect, Op};
    use crate::store::change::{Change, Held, SubagentRow};

    // The statements `batch` comes to, owning their values.
    pub(crate) fn compiled(batch: &[Change], retained: u64, dialect: Dialect) -> Vec<Op<'static>> {
        compile(&fold(batch), retained, dialect, false).into_iter().map(Op::into_owned).collect()
    }

    pub(crate) fn row() -> SubagentRow {
        SubagentRow::spawned()
    }

    pub(crate) fn ended(session: &Arc<str>, id: SubagentId, held: Held) -> Change {
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

    pub(crate) fn started(session: &Arc<str>, id: SubagentId, fresh: bool) -> Change {
        let task = Arc::new(TaskDefinition::new("t", "i"));
        Change::TaskStarted { session: session.clone(), id, task, task_no: 2, attempt: 1, fresh }
    }

    pub(crate) fn appended(session: &Arc<str>, id: SubagentId, step: u32, from: u64, items: &[&str]) -> Change {
        Change::Checkpoint {
            session: session.clone(),
            id,
            checkpoint: crate::store::change::Checkpoint { step, state: serde_json::json!({ "usage": step }) },
            appended: Some(crate::store::change::Appended {
                field: "messages",
                from,
                items: items.iter().map(|item| Value::String((*item).into())).collect(),
            }),
            held: Held::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::testing::{compiled, row};
    use crate::entries::InboxMessage;
    use crate::ids::SubagentId;
    use crate::protocol::wire::{JsonObject, RawObject, SubagentStatus, TaskDefinition, Usage};
    use crate::store::batch::statement::{Arg, Dialect, Op};
    use crate::store::change::{Change, Held};
    use serde_json::Value;

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
                usage: Usage {
                    input_tokens: 123,
                    output_tokens: 45,
                    cost_usd: Some(crate::protocol::wire::CostUsd::from_nanos(6_789)),
                },
            },
        ];
        let ops = compiled(&batch, 1024, Dialect::Sqlite);
        assert_eq!(ops.len(), 1, "a task started and ended in the batch writes nothing: {ops:#?}");
        assert!(ops[0].sql.starts_with("INSERT INTO subagents"));
        assert!(ops[0].args.contains(&Arg::Text("COMPLETED".into())), "the last state is inserted");
        assert!(ops[0].args.contains(&Arg::Int(1)), "tasks_started");
        assert!(ops[0].args.contains(&Arg::Int(123)) && ops[0].args.contains(&Arg::Int(45)), "usage");
        assert!(ops[0].args.contains(&Arg::OptInt(Some(6_789))), "cost, in nanodollars");
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
}
