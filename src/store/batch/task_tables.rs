//! The statements of the `tasks` table: task inserts, updates (checkpoints,
//! attempts) and deletes; and of `checkpoint_parts`, the items a task's
//! checkpoints appended to a list of its state.

use std::collections::HashMap;

use super::columns::{int, json, key_args};
use super::fold::{Key, PartsOp, TaskOp};
use super::statement::{deletes, insert, update_from, Arg, Dialect, Op};

/// The task rows of the batch: the deletes, then the inserts (a task queued
/// or started), then the updates (an attempt, a checkpoint's head).
pub(super) fn task_ops<'a>(dialect: Dialect, ops: &mut Vec<Op<'a>>, tasks: &'a HashMap<Key, TaskOp<'_>>) {
    let mut deleted = Vec::new();
    let mut inserted = Vec::new();
    let mut updated = Vec::new();
    for ((session, id), op) in tasks {
        match op {
            TaskOp::Delete => deleted.push((session.clone(), *id)),
            TaskOp::Insert { task, task_no, attempt, step, checkpoint, .. } => inserted.push(key_args(
                session,
                *id,
                [
                    Arg::Text(json(&***task).into()),
                    int(*task_no),
                    int(u64::from(*attempt)),
                    int(*step),
                    Arg::OptText(checkpoint.map(|head| json(head.state).into())),
                    Arg::OptText(checkpoint.and_then(|head| head.appended_to).map(Into::into)),
                ],
            )),
            TaskOp::Update { attempt, checkpoint } => updated.push(key_args(
                session,
                *id,
                [
                    Arg::OptInt(attempt.map(i64::from)),
                    Arg::OptInt(checkpoint.map(|(step, _)| i64::from(step))),
                    Arg::OptText(checkpoint.map(|(_, head)| json(head.state).into())),
                    Arg::OptText(checkpoint.and_then(|(_, head)| head.appended_to).map(Into::into)),
                ],
            )),
        }
    }
    deletes(dialect, ops, "tasks", "subagent_id", &deleted);
    insert(
        dialect,
        ops,
        "tasks (session_id, subagent_id, task, task_no, attempt, step, checkpoint, appended_to)",
        inserted,
        "(session_id, subagent_id) DO UPDATE SET task = excluded.task, task_no = excluded.task_no, \
         attempt = excluded.attempt, step = excluded.step, checkpoint = excluded.checkpoint, \
         appended_to = excluded.appended_to",
    );
    update_from(
        dialect,
        ops,
        "tasks",
        "attempt = COALESCE(v.column3, tasks.attempt), step = COALESCE(v.column4, tasks.step), \
         checkpoint = CASE WHEN v.column4 IS NULL THEN tasks.checkpoint ELSE v.column5 END, \
         appended_to = CASE WHEN v.column4 IS NULL THEN tasks.appended_to ELSE v.column6 END",
        "tasks.session_id = v.column1 AND tasks.subagent_id = v.column2",
        6,
        updated,
    );
}

/// The statements of `checkpoint_parts`: the deletes first (a list started
/// over, a task ended), then one insert row per run of appended items,
/// keyed by the index of its first item in the list.
pub(super) fn checkpoint_parts<'a>(dialect: Dialect, ops: &mut Vec<Op<'a>>, parts: &'a HashMap<Key, PartsOp<'_>>) {
    let reset: Vec<Key> = parts.iter().filter(|(_, op)| op.reset).map(|(key, _)| key.clone()).collect();
    deletes(dialect, ops, "checkpoint_parts", "subagent_id", &reset);
    let rows: Vec<Vec<Arg<'a>>> = parts
        .iter()
        .flat_map(|((session, id), op)| {
            op.runs
                .iter()
                .filter(|(_, items)| !items.is_empty())
                .map(|(from, items)| key_args(session, *id, [int(*from), Arg::Text(json(items).into())]))
        })
        .collect();
    // A run stored again (a batch retried after its commit's outcome was
    // lost) holds the same items.
    insert(
        dialect,
        ops,
        "checkpoint_parts (session_id, subagent_id, seq, items)",
        rows,
        "(session_id, subagent_id, seq) DO UPDATE SET items = excluded.items",
    );
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::ids::SubagentId;
    use crate::store::batch::compile::testing::{appended, compiled, ended, started};
    use crate::store::batch::statement::{Arg, Dialect};
    use crate::store::change::{Change, Held};

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
}
