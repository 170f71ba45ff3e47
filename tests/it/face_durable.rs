//! What a face was told is kept, through a SIGKILL (SQLite): an A2A task's
//! follow-up messages stay in its `history`; `ListTasks` without a
//! `contextId` lists every context of the caller from the store; and the
//! MCP servers a session registered (`mcp/server/register`) come back
//! with it.

use crate::common::eventually_blocking;
use crate::e2e_support::{http_with_headers, LineClient, Server};
use crate::mcp_tools::npm_server;
use serde_json::{json, Value};
use std::time::Duration;

/// A SQLite store in a directory of its own, removed on drop.
struct Dir(std::path::PathBuf);

impl Dir {
    fn new(what: &str) -> Self {
        let path = std::env::temp_dir().join(format!("subagentd-{what}-{}-{}", std::process::id(), fastrand::u32(..)));
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }

    fn store(&self) -> String {
        format!("sqlite:{}", self.0.join("store.db").display())
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn a2a(addr: &str, method: &str, params: Value) -> Value {
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params }).to_string();
    let headers = [("A2A-Version", "1.0"), ("Content-Type", "application/json")];
    let (status, _, reply) = http_with_headers(addr, "POST", "/a2a", &headers, &body);
    assert_eq!(status, 200, "{reply}");
    reply.get("result").cloned().unwrap_or_else(|| panic!("{method}: {reply}"))
}

fn texts(task: &Value) -> Vec<String> {
    task["history"].as_array().map_or_else(Vec::new, |history| {
        history.iter().filter_map(|m| m["parts"][0]["text"].as_str().map(str::to_owned)).collect()
    })
}

#[test]
fn an_a2a_tasks_follow_up_messages_stay_in_its_history_through_a_kill() {
    let dir = Dir::new("a2a-history");
    let store = dir.store();
    let args = ["--http", "127.0.0.1:0", "--store", store.as_str()];
    let mut first = Server::start(&args, None);
    let addr = first.http.clone().unwrap();
    let script = json!([{ "ask_user": { "question": "Which colour?" } }, { "sleep_ms": 1500 },
        { "return": { "done": true } }]);
    let message = json!({ "messageId": "m1", "role": "ROLE_USER", "parts": [{ "text": "paint" }],
        "metadata": { "script": script } });
    let asked = a2a(&addr, "SendMessage", json!({ "message": message }));
    let id = asked["task"]["id"].as_str().unwrap().to_owned();
    assert_eq!(asked["task"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{asked}");
    let answer = json!({ "messageId": "m2", "taskId": id, "role": "ROLE_USER", "parts": [{ "text": "blue" }] });
    let again = a2a(&addr, "SendMessage", json!({ "message": answer, "configuration": { "returnImmediately": true } }));
    assert_eq!(texts(&again["task"]), ["paint", "blue"]);
    // Killed while the task goes on (it sleeps): the answer is stored.
    first.kill9();
    let second = Server::start(&args, None);
    let addr = second.http.clone().unwrap();
    let found = a2a(&addr, "GetTask", json!({ "id": id }));
    assert_eq!(texts(&found), ["paint", "blue"], "the answer survived the kill: {found}");
    // The task resumes and ends; retired, it keeps its whole history.
    let done = eventually_blocking("the resumed task completes", Duration::from_secs(20), || {
        let task = a2a(&addr, "GetTask", json!({ "id": id }));
        if task["status"]["state"] == "TASK_STATE_COMPLETED" {
            Ok(task)
        } else {
            Err(task)
        }
    });
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED", "{done}");
    assert_eq!(texts(&done), ["paint", "blue"]);
}

#[test]
fn list_tasks_without_a_context_lists_every_context_of_the_caller_through_a_kill() {
    let dir = Dir::new("a2a-list");
    let store = dir.store();
    let args = ["--http", "127.0.0.1:0", "--store", store.as_str()];
    let mut first = Server::start(&args, None);
    let addr = first.http.clone().unwrap();
    let mut ids = Vec::new();
    for context in ["ctx-a", "ctx-b", "ctx-c"] {
        let message = json!({ "messageId": format!("m-{context}"), "contextId": context, "role": "ROLE_USER",
            "parts": [{ "text": context }], "metadata": { "script": [{ "return": { "answer": context } }] } });
        let sent = a2a(&addr, "SendMessage", json!({ "message": message }));
        assert_eq!(sent["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{sent}");
        ids.push(sent["task"]["id"].as_str().unwrap().to_owned());
    }
    first.kill9();
    let second = Server::start(&args, None);
    let addr = second.http.clone().unwrap();
    // No context is served by the new process: the list comes from the store.
    let listed = a2a(&addr, "ListTasks", json!({}));
    let mut listed_ids: Vec<String> =
        listed["tasks"].as_array().unwrap().iter().map(|task| task["id"].as_str().unwrap().to_owned()).collect();
    listed_ids.sort();
    ids.sort();
    assert_eq!(listed_ids, ids, "{listed}");
    let contexts: Vec<&str> =
        listed["tasks"].as_array().unwrap().iter().filter_map(|t| t["contextId"].as_str()).collect();
    assert_eq!(contexts.len(), 3);
    assert!(listed["tasks"].as_array().unwrap().iter().all(|t| t["status"]["state"] == "TASK_STATE_COMPLETED"));
    assert_eq!(listed["totalSize"], 3);
}

#[test]
fn a_sessions_registered_mcp_server_comes_back_through_a_kill() {
    let dir = Dir::new("mcp-servers");
    let store = dir.store();
    let config = "[mcp]\nallow_client_stdio = true\n";
    let args = ["--tcp", "127.0.0.1:0", "--http", "127.0.0.1:0", "--store", store.as_str()];
    let mut first = Server::start(&args, Some(config));
    let mut client = LineClient::connect(first.tcp.as_deref().unwrap());
    let caps = ["multi_agent", "mcp", "tools"];
    client.send(&json!({ "type": "handshake/req", "id": "h", "agent_id": "a", "agent_caps": caps }));
    let handshake = client.reply("h");
    assert_eq!(handshake["ok"], true, "{handshake}");
    let session = handshake["session_id"].as_str().unwrap().to_owned();
    let secret = "s3cret-value";
    client.send(&json!({ "type": "mcp/server/register/req", "id": "r", "config": {
        "server_id": "mine", "name": "mine", "transport": "stdio",
        "cmd": ["node", npm_server("server-everything"), "stdio"], "env": { "SECRET_FOR_TEST": secret } } }));
    let registered = client.reply("r");
    assert_eq!(registered["ok"], true, "{registered}");
    first.kill9();
    drop(client);
    let mut second = Server::start(&args, Some(config));
    let mut client = LineClient::connect(second.tcp.as_deref().unwrap());
    client.send(&json!({ "type": "handshake/req", "id": "h", "agent_id": "a", "agent_caps": caps,
        "resume_session_id": session }));
    let resumed = client.reply("h");
    assert_eq!(resumed["ok"], true, "{resumed}");
    // Registered again as it was, and it connects.
    let listed = eventually_blocking("the registered server is ready again", Duration::from_secs(30), || {
        client.send(&json!({ "type": "mcp/server/list/req", "id": "l" }));
        let listed = client.reply("l");
        if listed["servers"][0]["status"] == "ready" {
            Ok(listed)
        } else {
            Err(listed)
        }
    });
    assert_eq!(listed["servers"][0]["server_id"], "mine", "{listed}");
    assert_eq!(listed["servers"][0]["status"], "ready", "{listed}");
    client.send(&json!({ "type": "tool/list/req", "id": "t" }));
    let tools = client.reply("t");
    assert!(tools["tools"].as_array().unwrap().iter().any(|tool| tool["name"] == "mine__echo"), "{tools}");
    // Its secret is never written to the log.
    let stderr = second.stop_and_collect_stderr();
    assert!(!stderr.iter().any(|line| line.contains(secret)), "a secret was logged");
}
