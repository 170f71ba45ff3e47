//! The statements of a session's own rows: `sessions` (the row, and the
//! journal's top and request frames' high-water mark kept on it), `journal`
//! (lines kept for replay, deleted once delivered for good and trimmed to
//! the newest `retained`) and `inbound` (request frames handed over, deleted
//! once served).

use std::collections::HashMap;
use std::sync::Arc;

use super::columns::{int, json};
use super::fold::Folded;
use super::statement::{delete_in, insert, param, update_from, Arg, Dialect, Op};

/// Journal lines are trimmed to `retained` once per this many lines.
const TRIM_EVERY: u64 = 128;

/// The rows of sessions opened (or handshaken) in the batch, `now` their
/// time of change.
pub(super) fn session_rows<'f>(folded: &'f Folded<'_>, dialect: Dialect, now: i64, ops: &mut Vec<Op<'f>>) {
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
}

/// The journal lines of the batch.
pub(super) fn journal_lines<'f>(folded: &'f Folded<'_>, dialect: Dialect, ops: &mut Vec<Op<'f>>) {
    let lines: Vec<Vec<Arg>> = folded
        .journal
        .iter()
        .map(|(session, seq, line)| vec![Arg::Text((***session).into()), int(*seq), Arg::Text(line.as_str().into())])
        .collect();
    insert(dialect, ops, "journal (session_id, seq, line)", lines, "(session_id, seq) DO NOTHING");
}

/// The journal's top and the request frames' high-water mark of sessions
/// whose row the batch does not write whole, `now` their time of change.
pub(super) fn session_tops<'f>(folded: &'f Folded<'_>, dialect: Dialect, now: i64, ops: &mut Vec<Op<'f>>) {
    // Each row written once (a statement may change a row once): the next
    // line number past the journal's top, and the request frames'
    // high-water mark, of sessions `session_rows` does not write (0:
    // unchanged).
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
        ops,
        "sessions",
        "next_seq = CASE WHEN v.column2 > sessions.next_seq THEN v.column2 ELSE sessions.next_seq END, \
         touched_ms = v.column3, \
         last_inbound = CASE WHEN v.column4 > sessions.last_inbound THEN v.column4 ELSE sessions.last_inbound END",
        "sessions.id = v.column1",
        4,
        tops,
    );
}

/// The journal lines delivered for good, and those past the newest
/// `retained`: deleted.
pub(super) fn journal_trims<'f>(folded: &'f Folded<'_>, retained: u64, dialect: Dialect, ops: &mut Vec<Op<'f>>) {
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
}

/// The request frames handed over in the batch, and those served.
pub(super) fn inbound<'f>(folded: &'f Folded<'_>, dialect: Dialect, ops: &mut Vec<Op<'f>>) {
    let inbound: Vec<Vec<Arg>> = folded
        .inbound
        .iter()
        .map(|((session, seq), frame)| vec![Arg::Text((**session).into()), int(*seq), Arg::Text(frame.as_str().into())])
        .collect();
    insert(dialect, ops, "inbound (session_id, seq, frame)", inbound, "(session_id, seq) DO NOTHING");
    let mut served: HashMap<&Arc<str>, Vec<Arg>> = HashMap::new();
    for (session, seq) in &folded.served {
        served.entry(session).or_default().push(int(*seq));
    }
    for (session, seqs) in served {
        delete_in(dialect, ops, "inbound", "seq", (**session).into(), &seqs);
    }
}
