//! The tests of each table's statements, through the whole of a batch
//! (folded and compiled, `compile::testing`). Apart from the table files:
//! there they would import `compile`, which imports them (an import circle
//! of every table file and `compile`).

// The statements of `sessions`, `journal` and `inbound` (`session_tables`).
mod session {
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

// The statements of `subagents` and `mailboxes` (`subagent_tables`).
mod subagent {
    use std::sync::Arc;

    use crate::entries::MemoryEntry;
    use crate::ids::SubagentId;
    use crate::store::batch::compile::testing::{compiled, ended, row};
    use crate::store::batch::compile::{compile, fold};
    use crate::store::batch::statement::{Arg, Dialect, Op};
    use crate::store::change::{Change, Held};

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
        assert_eq!(rows[0].args[9], stored, "{ops:#?}");
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
        assert_eq!(ops[0].args.len(), 17, "one array per column");
        let Arg::Texts(parents) = &ops[0].args[4] else { panic!("{:?}", ops[0].args[4]) };
        let mut parents = parents.clone();
        parents.sort();
        assert_eq!(parents, [None, Some("p".to_owned())], "a null stays in its row");
    }
}

// The statements of `tasks` and `checkpoint_parts` (`task_tables`).
mod task {
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

// The statements of what the faces keep (`face_tables`).
mod face {
    use std::sync::Arc;

    use crate::ids::SubagentId;
    use crate::store::batch::compile::testing::compiled;
    use crate::store::batch::statement::Dialect;
    use crate::store::change::Change;

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
}
