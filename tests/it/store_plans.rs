//! The PostgreSQL store's statements find rows by key however large a
//! table has grown since its connections planned them.
//!
//! A connection keeps a statement's plan once it has run a few times. Made
//! while the `subagents` table was small, that plan scanned the whole table
//! (under a hash join) at every batch for ever after, unless fresh
//! statistics replaced it, which never happens with autovacuum off (as on
//! this project's test server). The store's connections price sequential
//! scans out, and the test counts them in the server's own statistics; and
//! most updates of a subagent's row stay on its page (HOT).

use serde_json::json;

use crate::e2e_support::*;
use crate::test_database::{pg_count, TestDatabase};

const CONFIG: &str = "[limits]\nmax_subagents_per_session = 100000\nmax_retained_records = 100000\n";

/// Subagents spawned, each given a task and awaited.
const SUBAGENTS: usize = 1_500;
/// Requests sent before their replies are read, so that they share commits.
const WINDOW: usize = 50;

#[test]
fn a_grown_subagents_table_is_never_scanned_whole_by_a_batch() {
    let db = TestDatabase::create();
    let mut server = Server::start(&["--store", &db.url, "--tcp", "127.0.0.1:0"], Some(CONFIG));
    let mut client = LineClient::connect(server.tcp.as_deref().expect("tcp address"));
    // A window's 100 requests share a few commits; on a machine whose
    // cores a real model's generation holds (the suite runs the tiers
    // together), a window has been seen to take longer than the usual
    // patience. What this test measures is the plans, not the speed.
    client.reader.get_ref().set_read_timeout(Some(PATIENCE * 4)).expect("set the read timeout");
    client.send(&json!({"type": "handshake/req", "id": "h", "a2e": "1.0", "agent_id": "plans", "agent_caps": ["multi_agent"], "auth_token": ""}));
    assert_eq!(client.reply("h")["ok"], true);
    for window in 0..SUBAGENTS / WINDOW {
        let ids: Vec<String> = (0..WINDOW).map(|n| format!("{window}-{n}")).collect();
        for id in &ids {
            client.send(
                &json!({"type": "SUBAGENT_SPAWN_REQ", "id": format!("s{id}"), "agent": {"name": "n", "model": "m"}}),
            );
        }
        let subagents: Vec<String> = ids
            .iter()
            .map(|id| {
                reply(&mut client, &mut server, &format!("s{id}"))["subagent_id"].as_str().expect("spawned").to_owned()
            })
            .collect();
        for (id, sub) in ids.iter().zip(&subagents) {
            let task = json!({"name": "unit", "instruction": "do it"});
            client.send(
                &json!({"type": "SUBAGENT_DELEGATE_REQ", "id": format!("d{id}"), "subagent_id": sub, "task": task}),
            );
            client.send(&json!({"type": "SUBAGENT_AWAIT_REQ", "id": format!("a{id}"), "subagent_id": sub}));
        }
        for id in &ids {
            assert_eq!(reply(&mut client, &mut server, &format!("a{id}"))["status"], "COMPLETED");
        }
    }
    // Its connections close with it: the server has their counts then.
    server.terminate();
    let count = |sql: &str| pg_count(&db.url, sql).expect("read the server's statistics");
    let updates = count("SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = 'subagents'");
    assert!(updates >= SUBAGENTS as i64, "the workload updated each subagent: {updates}");
    let scans = count("SELECT seq_scan FROM pg_stat_user_tables WHERE relname = 'subagents'");
    let read = count("SELECT seq_tup_read FROM pg_stat_user_tables WHERE relname = 'subagents'");
    // The migrations scan the table while it is empty (migration 9's
    // rewrite, migration 10's copy of the memories into it): three scans
    // reading nothing. A batch's would read a row per subagent.
    assert!(scans <= 3 && read < SUBAGENTS as i64, "{scans} whole-table scans reading {read} rows");
    // Half of each page is left for the updates of the rows on it: most
    // stay on their page (HOT), taking no new index entry.
    let hot = count("SELECT n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'subagents'");
    eprintln!("subagents: {hot} of {updates} updates HOT");
    assert!(hot * 10 >= updates * 7, "{hot} of {updates} updates HOT");
}

/// The reply `req_id`; when none comes, the failure shows what the server
/// logged (a store that cannot commit says why there).
fn reply(client: &mut LineClient, server: &mut Server, req_id: &str) -> serde_json::Value {
    loop {
        match client.next() {
            Some(line) if line["req_id"] == req_id => return line,
            Some(_) => {}
            None => {
                let logged = server.stop_and_collect_stderr();
                let tail = &logged[logged.len().saturating_sub(40)..];
                panic!(
                    "no reply {req_id} (connection ended or silent for {:?}); the server's last lines:\n{}",
                    PATIENCE * 4,
                    tail.join("\n")
                )
            }
        }
    }
}
