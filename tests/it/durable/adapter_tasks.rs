//! Adapters' tasks at a crash: a command task fails `host_restarted` or
//! reruns (and the killed host's programs are taken down), and a
//! model-driven task resumes with its whole conversation, put back
//! together from its checkpoint parts.

use super::{text, Backing, Node, TempDir, CONFIG};
use crate::common::eventually_blocking;
use crate::e2e_support::{LineClient, PATIENCE};
use crate::fake_openai::{answer, call_tools, messages as fake_messages, FakeServer, Reply};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::Ordering;

/// Processes the test started outside the server (a killed server's
/// command tasks live on), killed on drop.
struct Orphans(Vec<PathBuf>);

impl Drop for Orphans {
    fn drop(&mut self) {
        for file in &self.0 {
            for pid in std::fs::read_to_string(file).unwrap_or_default().split_whitespace() {
                let _ = std::process::Command::new("kill").args(["-KILL", pid]).stderr(Stdio::null()).status();
            }
        }
    }
}

#[test]
fn durable_a_command_task_running_at_a_crash_fails_host_restarted_or_reruns() {
    let dir = TempDir::new("command");
    let (fail_pids, rerun_pids, marker) =
        (dir.path().join("fail.pids"), dir.path().join("rerun.pids"), dir.path().join("ran"));
    let _orphans = Orphans(vec![fail_pids.clone(), rerun_pids.clone()]);
    let fail = format!("echo $$ >> {}; exec sleep 60", fail_pids.display());
    let rerun = format!(
        "echo $$ >> {pids}; if [ -e {marker} ]; then echo '{{\"rerun\": true}}'; else touch {marker}; exec sleep 60; fi",
        pids = rerun_pids.display(),
        marker = marker.display()
    );
    let config = format!(
        "{CONFIG}\n[[routes]]\nmodel = \"cmd-fail\"\nadapter = \"command\"\nprogram = \"sh\"\nargs = [\"-c\", {}]\n\n\
         [[routes]]\nmodel = \"cmd-rerun\"\nadapter = \"command\"\nprogram = \"sh\"\nargs = [\"-c\", {}]\non_restart = \"rerun\"\n",
        json!(fail),
        json!(rerun)
    );
    let mut node = Node::start(Backing::sqlite(), &config);
    let mut client = LineClient::connect(node.tcp());
    client.send(&json!({ "type": "handshake/req", "id": "h", "agent_id": "c", "agent_caps": ["multi_agent"] }));
    let session = text(&client.reply("h")["session_id"]);
    let mut ids = Vec::new();
    for model in ["cmd-fail", "cmd-rerun"] {
        client.send(&json!({ "type": "SUBAGENT_SPAWN_REQ", "id": "s", "agent": { "name": model, "model": model } }));
        let id = text(&client.reply("s")["subagent_id"]);
        let task = json!({ "name": model, "instruction": "i" });
        client.send(&json!({ "type": "SUBAGENT_DELEGATE_REQ", "id": "d", "subagent_id": id, "task": task }));
        assert_eq!(client.reply("d")["status"], "RUNNING");
        ids.push(id);
    }
    // Both programs run (each wrote its pid): the crash finds them running.
    eventually_blocking("the command tasks start", PATIENCE, || {
        (fail_pids.exists() && rerun_pids.exists()).then_some(())
    });
    // The crash must come after both programs' pid checkpoints are
    // committed: a program can write its pid before its host has recorded
    // it, and a crash in between leaves nothing to find it by.
    eventually_blocking("the command tasks' pids are checkpointed", PATIENCE, || {
        match checkpointed_programs(&node.backing) {
            n if n >= 2 => Ok(()),
            n => Err(n),
        }
    });
    node.kill9();
    node.restart();
    let mut client = LineClient::connect(node.tcp());
    let hs = json!({ "type": "handshake/req", "id": "h2", "agent_id": "c", "agent_caps": ["multi_agent"], "resume_session_id": session });
    client.send(&hs);
    let mut events = Vec::new();
    loop {
        let line = client.next().expect("a line");
        if line["req_id"] == "h2" {
            assert_eq!(line["ok"], true, "{line}");
            break;
        }
        events.push(line);
    }
    for (n, id) in ids.iter().enumerate() {
        client.send(&json!({ "type": "SUBAGENT_AWAIT_REQ", "id": format!("a{n}"), "subagent_id": id }));
    }
    let mut answers = HashMap::new();
    while answers.len() < 2 {
        let line = client.next().expect("a line");
        match line["req_id"].as_str() {
            Some(req @ ("a0" | "a1")) => {
                answers.insert(req.to_owned(), line);
            }
            _ => events.push(line),
        }
    }
    let failed = &answers["a0"];
    assert_eq!((&failed["status"], &failed["error"]), (&json!("FAILED"), &json!("host_restarted")), "{failed}");
    let failed_event = events.iter().find(|e| e["subagent_id"] == ids[0].as_str() && e["event"] == "failed");
    let failed_event = failed_event.unwrap_or_else(|| panic!("no `failed` event for {}: {events:#?}", ids[0]));
    assert_eq!(failed_event["content"]["error"], "host_restarted", "{failed_event}");
    assert!(!events.iter().any(|e| e["subagent_id"] == ids[0].as_str() && e["event"] == "resumed"), "{events:#?}");
    let rerun = &answers["a1"];
    assert_eq!((&rerun["status"], &rerun["result"]), (&json!("COMPLETED"), &json!({ "rerun": true })), "{rerun}");
    let resumed = events.iter().find(|e| e["subagent_id"] == ids[1].as_str() && e["event"] == "resumed");
    assert_eq!(resumed.map(|e| &e["content"]["attempt"]), Some(&json!(2)), "{events:#?}");
    // The failed one is not run again: its program started once.
    let starts = std::fs::read_to_string(&fail_pids).unwrap();
    assert_eq!(starts.lines().count(), 1, "the failed task's program ran again: {starts}");
    // The programs the killed host left running were taken down, for the
    // failed task and for the rerun alike.
    for file in [&fail_pids, &rerun_pids] {
        let first = std::fs::read_to_string(file).unwrap();
        let pid = first.lines().next().expect("a pid").trim().to_owned();
        eventually_blocking(&format!("process {pid} of the previous host is gone"), PATIENCE, || {
            (!Path::new(&format!("/proc/{pid}")).exists()).then_some(())
        });
    }
}

/// How many running tasks of the SQLite store `backing` have a command's
/// process checkpointed (read from the store file, beside the host).
fn checkpointed_programs(backing: &Backing) -> i64 {
    use sqlx::{Connection, Row};
    let Backing::Sqlite(dir) = backing else { panic!("a SQLite store") };
    let url = format!("sqlite://{}?mode=ro", dir.path().join("subagentd.sqlite3").display());
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        let Ok(mut conn) = sqlx::SqliteConnection::connect(&url).await else { return 0 };
        let query = "SELECT count(*) FROM tasks WHERE checkpoint LIKE '%\"pgid\"%'";
        sqlx::query(query).fetch_one(&mut conn).await.map_or(0, |row| row.get::<i64, _>(0))
    })
}

// ---------------------------------------------------------------------------
// A model-driven task's conversation across a crash.

/// The checkpoint parts `backing` holds, as (seq, number of items) per row
/// in order (read beside the host; none before its schema exists).
fn stored_parts(backing: &Backing) -> Vec<(i64, usize)> {
    use sqlx::Connection;
    const SQL: &str = "SELECT seq, items FROM checkpoint_parts ORDER BY subagent_id, seq";
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let rows: Vec<(i64, String)> = runtime.block_on(async {
        match backing {
            Backing::Sqlite(dir) => {
                let url = format!("sqlite://{}?mode=ro", dir.path().join("subagentd.sqlite3").display());
                let Ok(mut conn) = sqlx::SqliteConnection::connect(&url).await else { return Vec::new() };
                sqlx::query_as(SQL).fetch_all(&mut conn).await.unwrap_or_default()
            }
            Backing::Postgres(db) => {
                let Ok(mut conn) = sqlx::PgConnection::connect(&db.url).await else { return Vec::new() };
                sqlx::query_as(SQL).fetch_all(&mut conn).await.unwrap_or_default()
            }
        }
    });
    rows.into_iter()
        .map(|(seq, items)| (seq, serde_json::from_str::<Vec<Value>>(&items).expect("a part's items").len()))
        .collect()
}

/// A model-driven task checkpoints the messages each step adds (parts, not
/// the whole conversation again); killed mid-task, the host resumes it with
/// its whole conversation put back together from them: the model is asked
/// again with exactly the messages it was asked with before the crash, and
/// the task goes on to its end, where its parts are deleted.
fn a_model_task_resumes_with_its_whole_conversation(backing: Backing) {
    // Tool calls before the reply in flight at the crash.
    const CALLS: usize = 5;
    let hang = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let model = {
        let hang = hang.clone();
        FakeServer::start(move |body, _| {
            let answered = fake_messages(body).iter().filter(|m| m["role"] == "tool").count();
            if answered < CALLS {
                call_tools(Some(&format!("step {answered}")), &[("list_subagents", json!({}))])
            } else if hang.swap(false, Ordering::SeqCst) {
                Reply::Hang
            } else {
                answer(&format!("done after {answered} calls"))
            }
        })
    };
    let config =
        format!("{CONFIG}\n[[routes]]\nmodel = \"fake-*\"\nadapter = \"openai\"\nbase_url = \"{}\"\n", model.base_url);
    let mut node = Node::start(backing, &config);
    let mut client = LineClient::connect(node.tcp());
    client.send(&json!({ "type": "handshake/req", "id": "h", "agent_id": "c", "agent_caps": ["multi_agent"] }));
    let session = text(&client.reply("h")["session_id"]);
    let agent = json!({ "name": "talker", "model": "fake-steps", "memory_scope": "isolated" });
    client.send(&json!({ "type": "SUBAGENT_SPAWN_REQ", "id": "s", "agent": agent }));
    let id = text(&client.reply("s")["subagent_id"]);
    let task = json!({ "name": "talk", "instruction": "call the tool until told to stop" });
    client.send(&json!({ "type": "SUBAGENT_DELEGATE_REQ", "id": "d", "subagent_id": id, "task": task }));
    assert_eq!(client.reply("d")["accepted"], true);

    // The reply in flight: the model was asked with CALLS tool answers.
    let in_flight = |seen: &crate::fake_openai::Seen| {
        fake_messages(&seen.body).iter().filter(|m| m["role"] == "tool").count() == CALLS
    };
    let asked = eventually_blocking("the model is asked after the last tool answer", PATIENCE, || {
        model.requests().iter().position(in_flight)
    });
    let before = fake_messages(&model.requests()[asked].body);
    assert_eq!(before.len(), 2 + 2 * CALLS, "system, user, and a call and its answer per step: {before:#?}");
    // Crash once the checkpoint of the last tool answer is committed.
    let parts = eventually_blocking("the conversation is checkpointed", PATIENCE, || {
        let parts = stored_parts(&node.backing);
        (parts.iter().map(|(_, items)| items).sum::<usize>() == before.len()).then_some(parts)
    });
    assert!(parts.len() >= 2, "the conversation is stored in parts, as steps added them: {parts:?}");
    assert!(parts.iter().all(|(_, items)| *items < before.len()), "no part holds it whole: {parts:?}");
    let mut next = 0;
    for (seq, items) in &parts {
        assert_eq!(*seq, next, "each part starts where the one before ended: {parts:?}");
        next += i64::try_from(*items).expect("items");
    }
    node.kill9();

    node.restart();
    let after = eventually_blocking("the resumed task asks the model again", PATIENCE, || {
        model.requests().get(asked + 1).map(|seen| fake_messages(&seen.body))
    });
    assert_eq!(after, before, "the resumed task's conversation is the one before the crash, whole");

    let mut client = LineClient::connect(node.tcp());
    let hs = json!({ "type": "handshake/req", "id": "h2", "agent_id": "c", "agent_caps": ["multi_agent"], "resume_session_id": session });
    client.send(&hs);
    assert_eq!(client.reply("h2")["ok"], true);
    client.send(&json!({ "type": "SUBAGENT_AWAIT_REQ", "id": "a", "subagent_id": id }));
    let done = client.reply("a");
    assert_eq!(done["status"], "COMPLETED", "{done}");
    assert_eq!(done["result"]["summary"], format!("done after {CALLS} calls"), "{done}");
    assert_eq!(done["result"]["steps"], CALLS + 1, "no step lost or repeated: {done}");
    // Its parts went with its task.
    eventually_blocking("the ended task's parts are deleted", PATIENCE, || {
        stored_parts(&node.backing).is_empty().then_some(())
    });
}

#[test]
fn durable_sqlite_a_model_task_resumes_with_its_whole_conversation_from_its_checkpoint_parts() {
    a_model_task_resumes_with_its_whole_conversation(Backing::sqlite());
}

#[test]
fn durable_postgres_a_model_task_resumes_with_its_whole_conversation_from_its_checkpoint_parts() {
    a_model_task_resumes_with_its_whole_conversation(Backing::postgres());
}
