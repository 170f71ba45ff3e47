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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::store::batch::compile::testing::compiled;
    use crate::store::batch::statement::{Arg, Dialect, Op};
    use crate::store::change::{Change, SessionRow};

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
}
