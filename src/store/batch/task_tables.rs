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
