//! A person in the loop, end to end with the real binary over TCP: a
//! three-level tree of fake-model agents whose leaf asks to delete a file
//! through the MCP filesystem server (denied, the file stays; approved, it
//! is gone), and a pending approval across a SIGKILL and restart on SQLite
//! (announced again with the same id, answered after the restart, never
//! asked again once answered).
//!
//! The filesystem server has no delete tool: deleting is `move_file` into
//! a trash directory, which its annotations mark `destructiveHint: true`.

use crate::e2e_support::{LineClient, Server};
use crate::fake_openai::*;
use crate::mcp_tools::{npm_server, tool_texts};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

fn scratch(what: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let dir = std::env::temp_dir().join(format!("subagentd-{what}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Root and middle agents spawn the next level down and await it; the leaf
/// moves `target` into `trash` and answers with what the tool said.
fn tree_model(target: &Path, trash: &Path) -> FakeServer {
    let (from, to) = (target.display().to_string(), trash.display().to_string());
    FakeServer::start(move |body, _| {
        let system = system_prompt(body);
        let texts = tool_texts(body);
        let child = if system.starts_with("AGENT:root") {
            Some("mid")
        } else if system.starts_with("AGENT:mid") {
            Some("leaf")
        } else {
            None
        };
        match (child, texts.len()) {
            (Some(child), 0) => call_tools(
                None,
                &[(
                    "spawn_subagent",
                    json!({ "name": child, "instruction": "clean up", "system_prompt": format!("AGENT:{child}"), "tool_scope": "shared", "memory_scope": "isolated" }),
                )],
            ),
            (Some(_), 1) => {
                let spawned: Value = serde_json::from_str(&texts[0]).unwrap_or(Value::Null);
                call_tools(None, &[("await_subagent", json!({ "subagent_id": spawned["subagent_id"] }))])
            }
            (Some(_), _) => {
                let awaited: Value = serde_json::from_str(&texts[1]).unwrap_or(Value::Null);
                answer(awaited["result"]["summary"].as_str().unwrap_or("?"))
            }
            (None, 0) => call_tools(None, &[("fs__move_file", json!({ "source": from, "destination": to }))]),
            (None, _) => answer(&texts[0]),
        }
    })
}

/// The fake model's route, the filesystem server over `files`, and the
/// rule that every destructive call of it waits for a person.
fn filesystem_config(model: &FakeServer, files: &Path) -> String {
    format!(
        "[[routes]]\nmodel = \"fake-*\"\nadapter = \"openai\"\nbase_url = \"{}\"\n\n\
         [[mcp_servers]]\nname = \"fs\"\ntransport = \"stdio\"\ncommand = \"node\"\nargs = [\"{}\", \"{}\"]\n\n\
         [[tools.approval]]\nserver = \"fs\"\nrequire = \"destructive\"\n",
        model.base_url,
        npm_server("server-filesystem"),
        files.display()
    )
}

fn handshaken(addr: &str) -> (LineClient, String) {
    let mut client = LineClient::connect(addr);
    client.send(&json!({"type": "handshake/req", "id": "h", "agent_id": "client", "agent_caps": ["multi_agent"]}));
    let reply = client.reply("h");
    assert_eq!(reply["ok"], true, "{reply}");
    (client, reply["session_id"].as_str().unwrap().to_owned())
}

/// The next unsolicited `kind` event.
fn event_of(client: &mut LineClient, kind: &str) -> Value {
    loop {
        let line = client.next().expect("an event before EOF");
        if line["type"] == "SUBAGENT_EVENT" && line["event"] == kind && line.get("req_id").is_none() {
            return line;
        }
    }
}

/// Runs the three-level tree once, answers its leaf's approval with
/// `decision`, and returns the root's summary.
fn run_tree(client: &mut LineClient, round: &str, decision: &str) -> String {
    let agent = json!({"name": "root", "model": "fake-root", "system_prompt": "AGENT:root", "tool_scope": "shared", "capabilities": ["multi_agent"]});
    client.send(&json!({"type": "SUBAGENT_SPAWN_REQ", "id": format!("s{round}"), "agent": agent}));
    let root = client.reply(&format!("s{round}"))["subagent_id"].as_str().unwrap().to_owned();
    let task = json!({"name": "tidy", "instruction": "delete the old notes"});
    client
        .send(&json!({"type": "SUBAGENT_DELEGATE_REQ", "id": format!("d{round}"), "subagent_id": root, "task": task}));
    assert_eq!(client.reply(&format!("d{round}"))["accepted"], true);

    let asked = event_of(client, "approval_requested");
    let content = &asked["content"];
    let path = content["path"].as_array().unwrap();
    assert_eq!(path.len(), 3, "root, mid, leaf: {asked}");
    assert_eq!(path[0], root.as_str());
    assert_eq!(path[2], asked["subagent_id"]);
    assert_eq!(content["depth"], 2, "{asked}");
    assert_eq!((content["tool"].as_str(), content["server"].as_str()), (Some("fs__move_file"), Some("fs")));
    assert!(content["reason"].as_str().unwrap().contains("destroy"), "{asked}");
    // The tree shows who waits: the leaf for a person, its ancestors on it.
    client.send(&json!({"type": "SUBAGENT_LIST_REQ", "id": format!("l{round}")}));
    let list = client.reply(&format!("l{round}"));
    let leaf = list["subagents"].as_array().unwrap().iter().find(|row| row["subagent_id"] == path[2]).unwrap().clone();
    assert_eq!((leaf["status"].as_str(), leaf["waiting_for"].as_str()), (Some("WAITING"), Some("approval")));

    let approval = content["approval_id"].clone();
    let answer = json!({"type": "SUBAGENT_APPROVAL_REQ", "id": format!("a{round}"), "approval_id": approval, "decision": decision, "note": "keep it"});
    client.send(&answer);
    let reply = client.reply(&format!("a{round}"));
    assert_eq!((reply["decision"].as_str(), reply["accepted"].as_bool()), (Some(decision), Some(true)), "{reply}");

    client.send(&json!({"type": "SUBAGENT_AWAIT_REQ", "id": format!("w{round}"), "subagent_id": root}));
    let done = client.reply(&format!("w{round}"));
    assert_eq!(done["status"], "COMPLETED", "{done}");
    done["result"]["summary"].as_str().unwrap().to_owned()
}

#[test]
fn a_leafs_delete_through_the_filesystem_server_waits_for_a_person_three_levels_down() {
    let files = scratch("people-files");
    let target = files.join("notes.txt");
    std::fs::create_dir_all(files.join("trash")).unwrap();
    let trash = files.join("trash/notes.txt");
    std::fs::write(&target, "old notes").unwrap();
    let model = tree_model(&target, &trash);
    let config = filesystem_config(&model, &files);
    let mut server = Server::start(&["--tcp", "127.0.0.1:0"], Some(&config));
    let (mut client, _) = handshaken(server.tcp.as_deref().unwrap());

    let denied = run_tree(&mut client, "1", "deny");
    assert_eq!(denied, "{\"error\":\"denied by a person: keep it\"}");
    assert!(target.exists() && !trash.exists(), "denied: the file is still there");

    let approved = run_tree(&mut client, "2", "approve");
    assert!(approved.contains("Successfully moved"), "{approved}");
    assert!(!target.exists() && trash.exists(), "approved: the file is gone");
    server.terminate();
    std::fs::remove_dir_all(&files).ok();
}

#[test]
fn a_pending_approval_survives_a_crash_with_its_id_and_is_never_asked_again_once_answered() {
    let data = scratch("people-data");
    let config = "[[tools.approval]]\ntool = \"deploy\"\n";
    let args =
        |data: &Path| vec!["--tcp".to_owned(), "127.0.0.1:0".into(), "--data-dir".into(), data.display().to_string()];
    let start = |data: &Path| {
        let args = args(data);
        Server::start(&args.iter().map(String::as_str).collect::<Vec<_>>(), Some(config))
    };
    let mut server = start(&data);
    let (mut client, session) = handshaken(server.tcp.as_deref().unwrap());
    client.send(&json!({"type": "SUBAGENT_SPAWN_REQ", "id": "s", "agent": {"name": "deployer", "model": "m"}}));
    let sub = client.reply("s")["subagent_id"].as_str().unwrap().to_owned();
    let script = json!([{ "call_tool": { "tool": "deploy", "arguments": { "env": "prod" } } }, { "sleep_ms": 3_000 }]);
    let task = json!({"name": "ship", "instruction": "ship it", "metadata": {"script": script}});
    client.send(&json!({"type": "SUBAGENT_DELEGATE_REQ", "id": "d", "subagent_id": sub, "task": task}));
    assert_eq!(client.reply("d")["accepted"], true);
    let asked = event_of(&mut client, "approval_requested");
    let approval = asked["content"]["approval_id"].as_str().unwrap().to_owned();
    let expires_at = asked["content"]["expires_at"].clone();
    drop(client);
    server.kill9();

    // Restarted: the task resumes without its client and asks again, with
    // the same id and expiry; the returning client hears of it.
    let mut server = start(&data);
    let mut client = LineClient::connect(server.tcp.as_deref().unwrap());
    client.send(&json!({"type": "handshake/req", "id": "h", "agent_id": "client", "agent_caps": ["multi_agent"], "resume_session_id": session}));
    // The handshake's reply and the announcement, in either order.
    let (mut resumed, mut again) = (None, None);
    while resumed.is_none() || again.is_none() {
        let line = client.next().expect("lines before EOF");
        if line["req_id"] == "h" {
            resumed = Some(line);
        } else if line["event"] == "approval_requested" && line.get("req_id").is_none() {
            again = Some(line);
        }
    }
    let (resumed, again) = (resumed.unwrap(), again.unwrap());
    assert_eq!(resumed["ok"], true, "{resumed}");
    assert_eq!(again["content"]["approval_id"], approval.as_str(), "{again}");
    assert_eq!(again["content"]["expires_at"], expires_at, "{again}");
    client.send(&json!({"type": "SUBAGENT_APPROVAL_REQ", "id": "a", "approval_id": approval, "decision": "approve"}));
    // Answered and committed (the reply follows the commit), and the task
    // back to RUNNING, into the sleep that follows the call: killed there,
    // it is not asked again. The reply and the event come in either order.
    let (mut reply, mut running) = (None, false);
    while reply.is_none() || !running {
        let line = client.next().expect("lines before EOF");
        if line["req_id"] == "a" {
            reply = Some(line);
        } else if line["event"] == "status_changed"
            && line["subagent_id"] == sub.as_str()
            && line.get("req_id").is_none()
        {
            running = line["content"]["status"] == "RUNNING";
        }
    }
    let reply = reply.unwrap();
    assert_eq!((reply["decision"].as_str(), reply["accepted"].as_bool()), (Some("approve"), Some(true)), "{reply}");
    drop(client);
    server.kill9();

    let mut server = start(&data);
    let mut client = LineClient::connect(server.tcp.as_deref().unwrap());
    client.send(&json!({"type": "handshake/req", "id": "h", "agent_id": "client", "agent_caps": ["multi_agent"], "resume_session_id": session}));
    assert_eq!(client.reply("h")["ok"], true);
    client.send(&json!({"type": "SUBAGENT_AWAIT_REQ", "id": "w", "subagent_id": sub}));
    let mut asked_again = false;
    let done = loop {
        let line = client.next().expect("the await's reply");
        asked_again |= line["event"] == "approval_requested" && line.get("req_id").is_none();
        if line["req_id"] == "w" {
            break line;
        }
    };
    assert!(!asked_again, "an answered approval was asked again");
    assert_eq!(done["status"], "COMPLETED", "{done}");
    assert_eq!(done["result"]["calls"], json!([{ "tool": "deploy", "made": true, "approved": true }]), "{done}");
    server.terminate();
    std::fs::remove_dir_all(&data).ok();
}

#[test]
fn the_admin_api_lists_pending_questions_across_sessions_and_answers_them_under_its_rules() {
    let config = "[limits]\napproval_timeout_ms = 60000\n";
    let mut server = Server::start(&["--tcp", "127.0.0.1:0", "--http", "127.0.0.1:0"], Some(config));
    let http = server.http.clone().unwrap();
    let (mut client, session) = handshaken(server.tcp.as_deref().unwrap());
    client.send(&json!({"type": "SUBAGENT_SPAWN_REQ", "id": "s", "agent": {"name": "asker", "model": "m"}}));
    let sub = client.reply("s")["subagent_id"].as_str().unwrap().to_owned();
    // The operator's stream hears of it too.
    let mut stream = crate::e2e_support::SseStream::open_admin(&http, "/admin/stream", "");
    let script = json!([{ "ask_user": { "question": "Which region?", "choices": ["eu", "us"] } }]);
    let task = json!({"name": "ask", "instruction": "ask", "metadata": {"script": script}});
    client.send(&json!({"type": "SUBAGENT_DELEGATE_REQ", "id": "d", "subagent_id": sub, "task": task}));
    let request = event_of(&mut client, "input_requested")["content"]["request_id"].as_str().unwrap().to_owned();
    let streamed = loop {
        let (name, data) = stream.next_event().expect("the admin stream goes on");
        if name.as_deref() == Some("subagent") && data["event"]["event"] == "input_requested" {
            break data;
        }
    };
    assert_eq!(
        (streamed["session"].as_str(), streamed["event"]["content"]["request_id"].as_str()),
        (Some(session.as_str()), Some(request.as_str()))
    );

    let (status, listed) = crate::e2e_support::http(&http, "GET", "/admin/approvals", &[], "");
    assert_eq!(status, 200, "{listed}");
    let pending = listed["pending"].as_array().unwrap();
    assert_eq!(pending.len(), 1, "{listed}");
    let row = &pending[0];
    assert_eq!((row["id"].as_str(), row["kind"].as_str()), (Some(request.as_str()), Some("question")));
    assert_eq!((row["session_id"].as_str(), row["question"].as_str()), (Some(session.as_str()), Some("Which region?")));
    assert_eq!(row["path"], json!([sub]));
    let left = row["left_seconds"].as_f64().unwrap();
    assert!(left > 50.0 && left <= 60.0, "{row}");

    let answer = |headers: &[(&str, &str)], id: &str, body: &str| {
        crate::e2e_support::http(&http, "POST", &format!("/admin/approvals/{id}"), headers, body)
    };
    let confirm = [("X-Subagentd-Confirm", "yes"), ("Content-Type", "application/json")];
    assert_eq!(answer(&[], &request, r#"{"answer": "eu"}"#).0, 400, "unconfirmed");
    assert_eq!(answer(&confirm, &request, r#"{"decision": "maybe"}"#).0, 400, "not an answer");
    assert_eq!(answer(&confirm, "nope", r#"{"answer": "eu"}"#).1["code"], "unknown_approval");
    assert_eq!(answer(&confirm, &request, r#"{"decision": "approve"}"#).1["code"], "invalid_state");
    let (status, given) = answer(&confirm, &request, r#"{"answer": "eu"}"#);
    assert_eq!((status, given["accepted"].as_bool()), (200, Some(true)), "{given}");
    let (status, repeated) = answer(&confirm, &request, r#"{"answer": "eu"}"#);
    assert_eq!((status, repeated["accepted"].as_bool()), (200, Some(true)), "the same answer again: {repeated}");
    let (status, other) = answer(&confirm, &request, r#"{"answer": "us"}"#);
    assert_eq!((status, other["code"].as_str()), (409, Some("invalid_state")), "{other}");

    client.send(&json!({"type": "SUBAGENT_AWAIT_REQ", "id": "w", "subagent_id": sub}));
    let done = client.reply("w");
    assert_eq!(done["result"]["answers"], json!(["eu"]), "{done}");
    assert_eq!(crate::e2e_support::http(&http, "GET", "/admin/approvals", &[], "").1["pending"], json!([]));
    server.terminate();
}

#[test]
fn a_models_call_pending_approval_survives_a_crash_and_is_made_once_approved_after_it() {
    let data = scratch("people-model-data");
    let files = scratch("people-model-files");
    std::fs::create_dir_all(files.join("trash")).unwrap();
    let (target, trash) = (files.join("old.txt"), files.join("trash/old.txt"));
    std::fs::write(&target, "old").unwrap();
    let model = tree_model(&target, &trash);
    let config = filesystem_config(&model, &files);
    let data_arg = data.display().to_string();
    let args = ["--tcp", "127.0.0.1:0", "--data-dir", data_arg.as_str()];
    let mut server = Server::start(&args, Some(&config));
    let (mut client, session) = handshaken(server.tcp.as_deref().unwrap());
    // A leaf on its own: the model asks to move the file at once.
    let agent = json!({"name": "leaf", "model": "fake-leaf", "system_prompt": "AGENT:leaf", "tool_scope": "shared"});
    client.send(&json!({"type": "SUBAGENT_SPAWN_REQ", "id": "s", "agent": agent}));
    let sub = client.reply("s")["subagent_id"].as_str().unwrap().to_owned();
    let task = json!({"name": "tidy", "instruction": "delete the old file"});
    client.send(&json!({"type": "SUBAGENT_DELEGATE_REQ", "id": "d", "subagent_id": sub, "task": task}));
    let approval = event_of(&mut client, "approval_requested")["content"]["approval_id"].as_str().unwrap().to_owned();
    drop(client);
    server.kill9();
    assert!(target.exists(), "not made before its approval");

    let mut server = Server::start(&args, Some(&config));
    let mut client = LineClient::connect(server.tcp.as_deref().unwrap());
    client.send(&json!({"type": "handshake/req", "id": "h", "agent_id": "client", "agent_caps": ["multi_agent"], "resume_session_id": session}));
    let again = event_of(&mut client, "approval_requested");
    assert_eq!(again["content"]["approval_id"], approval.as_str(), "the same id after the crash: {again}");
    client.send(&json!({"type": "SUBAGENT_APPROVAL_REQ", "id": "a", "approval_id": approval, "decision": "approve"}));
    let reply = client.reply("a");
    assert_eq!(reply["accepted"], true, "{reply}");
    client.send(&json!({"type": "SUBAGENT_AWAIT_REQ", "id": "w", "subagent_id": sub}));
    let done = client.reply("w");
    assert_eq!(done["status"], "COMPLETED", "{done}");
    assert!(done["result"]["summary"].as_str().unwrap().contains("Successfully moved"), "{done}");
    assert!(!target.exists() && trash.exists(), "made once approved");
    server.terminate();
    std::fs::remove_dir_all(&data).ok();
    std::fs::remove_dir_all(&files).ok();
}
