//! The statements of what the faces keep beside the tree: `retired_tasks`
//! (trimmed to the newest the session keeps), `task_history` (follow-up
//! messages) and `session_servers` (registered MCP servers).

use super::columns::{int, key_args};
use super::fold::Folded;
use super::statement::{insert, param, Arg, Dialect, Op};

/// What the faces keep beside the tree: retired tasks (trimmed to the newest
/// the session keeps), follow-up messages and registered MCP servers.
pub(super) fn face_records<'f>(folded: &'f Folded<'_>, dialect: Dialect, ops: &mut Vec<Op<'f>>) {
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
