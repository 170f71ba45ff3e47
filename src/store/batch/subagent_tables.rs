//! The statements of the `subagents` table: whole rows, status patches of
//! rows not otherwise in the batch, and memories (kept in their owner's
//! row: with its row or patch when the batch has one, else on their own);
//! and of `mailboxes`, a subagent's undelivered messages.

use std::collections::HashMap;

use super::columns::{int, json, key_args, mailbox_json, status_text};
use super::fold::{Key, Memories, Patch};
use super::statement::{deletes, insert, insert_new, update_from, Arg, Dialect, Op};
use crate::entries::InboxMessage;
use crate::protocol::wire::Usage;
use crate::store::change::SubagentRow;

// The cost column of a row: its nanodollars, NULL when nothing priced was
// spent (a patch's NULL keeps the stored cost, which only ever grows).
fn cost<'a>(usage: Usage) -> Arg<'a> {
    Arg::OptInt(usage.cost_usd.map(|cost| i64::try_from(cost.nanos()).unwrap_or(i64::MAX)))
}

// The memory column of `key`'s row: its memory when the batch has one
// (NULL keeps the stored one).
fn memory_of<'a>(memories: &Memories<'_>, key: &Key) -> Arg<'a> {
    Arg::OptText(memories.get(key).map(|entries| json(entries).into()))
}

/// The rows of subagents spawned in the batch. Nothing of a new subagent
/// is stored before its spawn, so they are plain inserts; but a batch
/// retried after a failure may have been committed already (a connection
/// lost after its `COMMIT` was sent), so with `retried` they are upserts
/// that find their rows stored and write the same values again.
pub(super) fn subagent_rows<'a>(
    dialect: Dialect,
    ops: &mut Vec<Op<'a>>,
    rows: &'a HashMap<Key, SubagentRow>,
    memories: &Memories<'_>,
    retried: bool,
) {
    let rows: Vec<Vec<Arg<'a>>> = rows
        .iter()
        .map(|(key, row)| {
            let (session, id) = key;
            key_args(
                session,
                *id,
                [
                    int(row.ord),
                    Arg::OptText(row.parent.map(|p| p.to_string().into())),
                    Arg::OptText(row.parent_agent_id.as_deref().map(Into::into)),
                    Arg::OptText(row.root_agent_id.as_deref().map(Into::into)),
                    int(u64::from(row.depth)),
                    Arg::OptText(row.spawn_key.as_deref().map(Into::into)),
                    int(row.tasks_started),
                    Arg::Text(json(&*row.config).into()),
                    status_text(row.status),
                    Arg::OptText(row.result.as_ref().map(|result| result.text().into())),
                    Arg::OptText(row.error.as_deref().map(Into::into)),
                    int(row.usage.input_tokens),
                    int(row.usage.output_tokens),
                    cost(row.usage),
                    memory_of(memories, key),
                ],
            )
        })
        .collect();
    const TABLE: &str = "subagents (session_id, id, ord, parent_id, parent_agent_id, root_agent_id, depth, spawn_key, \
                         tasks_started, config, status, result, error, usage_input, usage_output, usage_cost, \
                         memory)";
    if !retried {
        insert_new(dialect, ops, TABLE, rows);
        return;
    }
    insert(
        dialect,
        ops,
        TABLE,
        rows,
        "(session_id, id) DO UPDATE SET status = excluded.status, result = excluded.result, error = excluded.error, \
         tasks_started = excluded.tasks_started, usage_input = excluded.usage_input, \
         usage_output = excluded.usage_output, usage_cost = excluded.usage_cost, \
         memory = COALESCE(excluded.memory, subagents.memory)",
    );
}

pub(super) fn subagent_patches<'a>(
    dialect: Dialect,
    ops: &mut Vec<Op<'a>>,
    patches: &'a HashMap<Key, Patch>,
    memories: &Memories<'_>,
) {
    let rows: Vec<Vec<Arg<'a>>> = patches
        .iter()
        .map(|(key, patch)| {
            let (session, id) = key;
            key_args(
                session,
                *id,
                [
                    status_text(patch.status),
                    Arg::OptText(patch.result.as_ref().map(|result| result.text().into())),
                    Arg::OptText(patch.error.as_deref().map(Into::into)),
                    Arg::OptInt(patch.tasks_started.map(|n| i64::try_from(n).unwrap_or(i64::MAX))),
                    Arg::OptInt(patch.usage.map(|u| i64::try_from(u.input_tokens).unwrap_or(i64::MAX))),
                    Arg::OptInt(patch.usage.map(|u| i64::try_from(u.output_tokens).unwrap_or(i64::MAX))),
                    patch.usage.map_or(Arg::OptInt(None), cost),
                    memory_of(memories, key),
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
         usage_output = COALESCE(v.column8, subagents.usage_output), \
         usage_cost = COALESCE(v.column9, subagents.usage_cost), \
         memory = COALESCE(v.column10, subagents.memory)",
        "subagents.session_id = v.column1 AND subagents.id = v.column2",
        10,
        rows,
    );
}

/// The memories whose owner's row the batch does not otherwise write (a
/// shared memory's owner, whose child's task ended): an update of that
/// column alone. An owner whose row is gone (forgotten) takes none.
pub(super) fn memory_updates<'a>(
    dialect: Dialect,
    ops: &mut Vec<Op<'a>>,
    memories: &'a Memories<'_>,
    rows: &HashMap<Key, SubagentRow>,
    patches: &HashMap<Key, Patch>,
) {
    let rows: Vec<Vec<Arg<'a>>> = memories
        .iter()
        .filter(|(key, _)| !rows.contains_key(*key) && !patches.contains_key(*key))
        .map(|((session, owner), entries)| key_args(session, *owner, [Arg::Text(json(entries).into())]))
        .collect();
    update_from(
        dialect,
        ops,
        "subagents",
        "memory = v.column3",
        "subagents.session_id = v.column1 AND subagents.id = v.column2",
        3,
        rows,
    );
}

/// The mailboxes written in the batch: an emptied one deleted, the others
/// stored whole.
pub(super) fn mailboxes<'a>(dialect: Dialect, ops: &mut Vec<Op<'a>>, mailboxes: &'a HashMap<Key, &Vec<InboxMessage>>) {
    let (empty, full): (Vec<_>, Vec<_>) = mailboxes.iter().partition(|(_, messages)| messages.is_empty());
    let emptied: Vec<Key> = empty.into_iter().map(|(key, _)| key.clone()).collect();
    deletes(dialect, ops, "mailboxes", "subagent_id", &emptied);
    let rows: Vec<Vec<Arg>> = full
        .into_iter()
        .map(|((session, id), messages)| key_args(session, *id, [Arg::Text(mailbox_json(messages).into())]))
        .collect();
    insert(
        dialect,
        ops,
        "mailboxes (session_id, subagent_id, messages)",
        rows,
        "(session_id, subagent_id) DO UPDATE SET messages = excluded.messages",
    );
}
