//! The statements of the `subagents` and `tasks` tables: whole rows,
//! status patches of rows not otherwise in the batch, and task inserts,
//! updates (checkpoints, attempts) and deletes.

use std::collections::HashMap;

use super::columns::{int, json, key_args, status_text};
use super::fold::{Key, Patch, TaskOp};
use super::statement::{deletes, insert, update_from, Arg, Dialect, Op};
use crate::store::SubagentRow;

pub(super) fn subagent_rows(dialect: Dialect, ops: &mut Vec<Op>, rows: &HashMap<Key, SubagentRow>) {
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

pub(super) fn subagent_patches(dialect: Dialect, ops: &mut Vec<Op>, patches: &HashMap<Key, Patch>) {
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

pub(super) fn task_ops(dialect: Dialect, ops: &mut Vec<Op>, tasks: &HashMap<Key, TaskOp<'_>>) {
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
