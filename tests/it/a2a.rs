//! The A2A front door, end to end with the real binary over HTTP: the agent
//! card, JSON-RPC's errors, tasks sent, streamed, listed, answered and
//! cancelled (a running three-level tree), bearer tokens, and a task that
//! survives a SIGKILL and restart on SQLite.

use crate::common::eventually_blocking;
use crate::e2e_support::{http_with_headers, Server};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

const V1: (&str, &str) = ("A2A-Version", "1.0");
const JSON: (&str, &str) = ("Content-Type", "application/json");

fn start(config: Option<&str>) -> Server {
    Server::start(&["--http", "127.0.0.1:0"], config)
}

fn addr(server: &Server) -> &str {
    server.http.as_deref().expect("an http address")
}

/// One JSON-RPC call with `headers`: the HTTP status and the response.
fn call_with(addr: &str, headers: &[(&str, &str)], body: &str) -> (u16, Value) {
    let (status, _, body) = http_with_headers(addr, "POST", "/a2a", headers, body);
    (status, body)
}

/// One JSON-RPC call of `method`: its result, or the error object.
fn rpc(addr: &str, method: &str, params: Value) -> Result<Value, Value> {
    let body = json!({ "jsonrpc": "2.0", "id": "r1", "method": method, "params": params }).to_string();
    let (status, reply) = call_with(addr, &[V1, JSON], &body);
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["id"], "r1", "{reply}");
    match reply.get("result") {
        Some(result) => Ok(result.clone()),
        None => Err(reply["error"].clone()),
    }
}

fn message(text: &str, script: Option<Value>) -> Value {
    let mut message = json!({ "messageId": format!("m-{text}"), "role": "ROLE_USER", "parts": [{ "text": text }] });
    if let Some(script) = script {
        message["metadata"] = json!({ "script": script });
    }
    message
}

/// A scripted step spawning `name` with `script` as its first task.
pub(crate) fn spawn_step(name: &str, script: Value) -> Value {
    json!({ "spawn": { "agent": { "name": name, "model": "scripted" },
        "task": { "name": "t", "instruction": "i", "metadata": { "script": script } } } })
}

/// A script whose root spawns a child that spawns a grandchild that
/// sleeps `leaf_ms`; each awaits its child.
pub(crate) fn three_levels(leaf_ms: u64) -> Value {
    let leaf = json!([{ "progress": "leaf working" }, { "sleep_ms": leaf_ms }, { "return": { "leaf": true } }]);
    let middle = json!([spawn_step("leaf", leaf), { "await_children": {} }, { "return": { "middle": true } }]);
    json!([{ "progress": "root working" }, spawn_step("middle", middle), { "await_children": {} }, { "return": { "answer": "done" } }])
}

/// How many subagents of `session` are `RUNNING` or `WAITING`, with the
/// admin API's row of it; `None` while no node here serves it.
pub(crate) fn busy_in(addr: &str, session: &str) -> Option<(u64, Value)> {
    let (_, _, listed) = http_with_headers(addr, "GET", "/admin/sessions", &[], "");
    let row = listed["sessions"].as_array()?.iter().find(|row| row["session_id"] == session)?.clone();
    let counts = &row["subagents"];
    Some((counts["RUNNING"].as_u64().unwrap_or(0) + counts["WAITING"].as_u64().unwrap_or(0), row))
}

fn state(task: &Value) -> &str {
    task["status"]["state"].as_str().unwrap_or_default()
}

/// `GetTask` until `wanted` says yes (or 20 s).
fn wait_task(addr: &str, id: &str, wanted: impl Fn(&Value) -> bool) -> Value {
    eventually_blocking(&format!("task {id} gets there"), Duration::from_secs(20), || {
        let task = rpc(addr, "GetTask", json!({ "id": id })).expect("GetTask");
        if wanted(&task) {
            Ok(task)
        } else {
            Err(task)
        }
    })
}

/// A streaming call, read to its end: each SSE `data:` line's JSON.
fn stream(addr: &str, method: &str, params: Value) -> Vec<Value> {
    let body = json!({ "jsonrpc": "2.0", "id": 7, "method": method, "params": params }).to_string();
    let mut socket = TcpStream::connect(addr).unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let request = format!(
        "POST /a2a HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nA2A-Version: 1.0\r\nAccept: text/event-stream\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    socket.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    socket.read_to_string(&mut response).unwrap();
    assert!(response.to_ascii_lowercase().contains("content-type: text/event-stream"), "{response}");
    response
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .map(|data| serde_json::from_str(data).unwrap())
        .collect()
}

#[test]
fn the_agent_card_names_the_json_rpc_interface_and_the_configured_skills() {
    let config = r#"
[a2a]
name = "tree-runner"
description = "Runs trees"
[[a2a.skills]]
id = "research"
name = "Research"
description = "Looks things up"
tags = ["search"]
examples = ["find X"]
"#;
    let server = start(Some(config));
    let addr = addr(&server);
    let (status, headers, card) = http_with_headers(addr, "GET", "/.well-known/agent-card.json", &[], "");
    assert_eq!(status, 200);
    assert_eq!(card["name"], "tree-runner");
    assert_eq!(card["supportedInterfaces"][0]["url"], format!("http://{addr}/a2a"));
    assert_eq!(card["supportedInterfaces"][0]["protocolBinding"], "JSONRPC");
    assert_eq!(card["supportedInterfaces"][0]["protocolVersion"], "1.0");
    assert_eq!(card["capabilities"]["streaming"], true);
    assert_eq!(card["skills"][0]["id"], "research");
    assert_eq!(card["skills"][0]["examples"], json!(["find X"]));
    assert!(card["defaultInputModes"].as_array().is_some_and(|modes| !modes.is_empty()));
    assert!(card["defaultOutputModes"].as_array().is_some_and(|modes| !modes.is_empty()));
    assert!(card.get("securitySchemes").is_none(), "no tokens, no scheme: {card}");
    assert!(headers["cache-control"].contains("max-age"), "{headers:?}");
    let etag = headers["etag"].clone();
    let (status, _, _) =
        http_with_headers(addr, "GET", "/.well-known/agent-card.json", &[("If-None-Match", &etag)], "");
    assert_eq!(status, 304, "a client revalidating gets Not Modified");
    let (status, _, legacy) = http_with_headers(addr, "GET", "/.well-known/agent.json", &[], "");
    assert_eq!((status, &legacy), (200, &card), "the legacy path answers the same card");
}

#[test]
fn malformed_requests_get_the_json_rpc_error_codes_with_http_200() {
    let server = start(None);
    let addr = addr(&server);
    let code = |headers: &[(&str, &str)], body: &str| {
        let (status, reply) = call_with(addr, headers, body);
        assert_eq!(status, 200, "{reply}");
        assert!(reply.get("result").is_none());
        reply["error"]["code"].as_i64().unwrap()
    };
    assert_eq!(code(&[V1, JSON], "{not json"), -32700);
    assert_eq!(code(&[V1, JSON], "[]"), -32600);
    assert_eq!(code(&[V1, JSON], r#"{"jsonrpc":"1.0","id":1,"method":"GetTask"}"#), -32600);
    assert_eq!(code(&[V1, JSON], r#"{"jsonrpc":"2.0","id":1}"#), -32600);
    assert_eq!(code(&[V1, JSON], r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{}}"#), -32601);
    assert_eq!(code(&[V1, JSON], r#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{}}"#), -32602);
    assert_eq!(
        code(&[V1, JSON], r#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"kind":"message"}}}"#),
        -32602
    );
    assert_eq!(code(&[V1, ("Content-Type", "text/plain")], "hello"), -32005);
    assert_eq!(
        code(&[("A2A-Version", "99.0"), JSON], r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x"}}"#),
        -32009
    );
    assert_eq!(
        code(&[V1, JSON], r#"{"jsonrpc":"2.0","id":1,"method":"CreateTaskPushNotificationConfig","params":{}}"#),
        -32003
    );
    let (_, reply) =
        call_with(addr, &[V1, JSON], r#"{"jsonrpc":"2.0","id":"g","method":"GetTask","params":{"id":"nope"}}"#);
    assert_eq!(reply["id"], "g");
    assert_eq!(reply["error"]["code"], -32001);
    assert_eq!(reply["error"]["data"][0]["reason"], "TASK_NOT_FOUND", "{reply}");
    assert_eq!(reply["error"]["data"][0]["@type"], "type.googleapis.com/google.rpc.ErrorInfo");
    // Without a version header the request is served (as 1.0) by default.
    let (_, reply) = call_with(addr, &[JSON], r#"{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}"#);
    assert_eq!(reply["result"]["totalSize"], 0, "{reply}");

    let strict = start(Some("[a2a]\nstrict_version = true\n"));
    let (_, reply) =
        call_with(addr_of(&strict), &[JSON], r#"{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}"#);
    assert_eq!(reply["error"]["code"], -32009, "no header reads as 0.3: {reply}");
}

fn addr_of(server: &Server) -> &str {
    addr(server)
}

#[test]
fn a_message_runs_as_a_task_whose_result_is_its_artifact() {
    let server = start(None);
    let addr = addr(&server);
    let script = json!([{ "progress": "thinking" }, { "return": { "answer": "forty-two" } }]);
    let sent = rpc(addr, "SendMessage", json!({ "message": message("question", Some(script)) })).unwrap();
    let task = &sent["task"];
    assert_eq!(state(task), "TASK_STATE_COMPLETED", "{sent}");
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], "forty-two");
    assert_eq!(task["artifacts"][0]["parts"][1]["data"]["answer"], "forty-two");
    assert_eq!(task["history"][0]["parts"][0]["text"], "question");
    assert_eq!(task["history"][0]["taskId"], task["id"]);
    let timestamp = task["status"]["timestamp"].as_str().unwrap();
    assert!(timestamp.ends_with('Z') && timestamp.len() >= 20, "{timestamp}");
    let context = task["contextId"].as_str().unwrap().to_owned();

    let id = task["id"].as_str().unwrap();
    let got = rpc(addr, "GetTask", json!({ "id": id, "historyLength": 0 })).unwrap();
    assert_eq!(state(&got), "TASK_STATE_COMPLETED");
    assert!(got.get("history").is_none(), "historyLength 0: no history: {got}");
    let got = rpc(addr, "GetTask", json!({ "id": id, "history_length": 1 })).unwrap();
    assert_eq!(got["history"].as_array().map(Vec::len), Some(1), "the proto spelling works too");

    // A second task of the same context; a task that has ended takes no more.
    let again = json!({ "message": { "messageId": "m2", "role": "ROLE_USER", "contextId": context, "parts": [{ "text": "more" }] } });
    let second = rpc(addr, "SendMessage", again).unwrap();
    assert_eq!(second["task"]["contextId"], context.as_str());
    let mut late = message("late", None);
    late["taskId"] = json!(id);
    assert_eq!(rpc(addr, "SendMessage", json!({ "message": late })).unwrap_err()["code"], -32004);
    assert_eq!(rpc(addr, "CancelTask", json!({ "id": id })).unwrap_err()["code"], -32002);

    // Listed, newest first, a page at a time.
    let page = rpc(addr, "ListTasks", json!({ "contextId": context, "pageSize": 1 })).unwrap();
    assert_eq!((page["totalSize"].as_u64(), page["tasks"].as_array().map(Vec::len)), (Some(2), Some(1)), "{page}");
    assert!(page["tasks"][0].get("artifacts").is_none(), "no artifacts unless asked");
    let token = page["nextPageToken"].as_str().unwrap();
    assert!(!token.is_empty());
    let rest = rpc(
        addr,
        "ListTasks",
        json!({ "contextId": context, "pageSize": 1, "pageToken": token, "includeArtifacts": true }),
    )
    .unwrap();
    assert_eq!(rest["nextPageToken"], "");
    assert!(rest["tasks"][0]["artifacts"].is_array());
    let ids: Vec<&Value> = [&page["tasks"][0]["id"], &rest["tasks"][0]["id"]].into();
    assert_eq!(ids, [&second["task"]["id"], &task["id"]], "the newest change first");
    for bad in [
        json!({ "pageSize": 0 }),
        json!({ "pageSize": 101 }),
        json!({ "pageToken": "x" }),
        json!({ "status": "DONE" }),
        json!({ "historyLength": -1 }),
    ] {
        assert_eq!(rpc(addr, "ListTasks", bad.clone()).unwrap_err()["code"], -32602, "{bad}");
    }
    let done = rpc(addr, "ListTasks", json!({ "status": "TASK_STATE_COMPLETED" })).unwrap();
    assert_eq!(done["totalSize"], 2);
}

#[test]
fn a_stream_shows_the_subtree_by_path_then_the_result_then_the_end() {
    let server = start(None);
    let addr = addr(&server);
    let events = stream(addr, "SendStreamingMessage", json!({ "message": message("tree", Some(three_levels(50))) }));
    assert!(events.iter().all(|event| event["id"] == 7 && event["jsonrpc"] == "2.0"), "{events:#?}");
    let results: Vec<&Value> = events.iter().map(|event| &event["result"]).collect();
    assert!(results[0].get("task").is_some(), "the task first: {results:#?}");
    let task_id = results[0]["task"]["id"].as_str().unwrap();
    let paths: Vec<usize> = results
        .iter()
        .filter_map(|result| result["statusUpdate"]["metadata"]["path"].as_array().map(Vec::len))
        .collect();
    assert!(paths.contains(&3), "the grandchild's events carry its path: {paths:?}");
    let progress: Vec<&str> = results
        .iter()
        .filter_map(|result| result["statusUpdate"]["status"]["message"]["parts"][0]["text"].as_str())
        .collect();
    assert!(progress.contains(&"leaf working") && progress.contains(&"root working"), "{progress:?}");
    let artifact = results.iter().position(|result| result.get("artifactUpdate").is_some()).expect("an artifact");
    assert_eq!(results[artifact]["artifactUpdate"]["artifact"]["parts"][0]["text"], "done");
    let last = results.last().unwrap();
    assert_eq!(last["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(artifact, results.len() - 2, "the result, then the final status, then the end");
    assert_eq!(last["statusUpdate"]["taskId"], task_id);
    // A task that has ended cannot be subscribed to: a plain error, no stream.
    let (status, reply) = call_with(
        addr,
        &[V1, JSON],
        &json!({ "jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": { "id": task_id } }).to_string(),
    );
    assert_eq!((status, reply["error"]["code"].as_i64()), (200, Some(-32004)), "{reply}");
}

#[test]
fn cancel_stops_a_running_three_level_tree_and_says_canceled() {
    let server = start(None);
    let addr = addr(&server);
    let started = rpc(
        addr,
        "SendMessage",
        json!({ "message": message("long", Some(three_levels(60_000))), "configuration": { "returnImmediately": true } }),
    )
    .unwrap();
    let id = started["task"]["id"].as_str().unwrap().to_owned();
    assert!(["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"].contains(&state(&started["task"])), "{started}");
    let session = id.split_once('-').unwrap().0.to_owned();
    eventually_blocking("the three levels run", Duration::from_secs(10), || match busy_in(addr, &session) {
        Some((3.., _)) => Ok(()),
        seen => Err(format!("{seen:?}")),
    });
    let cancelled = rpc(addr, "CancelTask", json!({ "id": id })).unwrap();
    assert_eq!(state(&cancelled), "TASK_STATE_CANCELED", "{cancelled}");
    let (busy, row) = busy_in(addr, &session).unwrap();
    assert_eq!(busy, 0, "nothing of the tree runs once CancelTask answered: {row}");
    // All three cancelled, or already retired (a finished task leaves the tree).
    assert!(row["subagents"]["CANCELLED"] == 3 || row["total"] == 0, "{row}");
    eventually_blocking("the cancelled task leaves the tree", Duration::from_secs(5), || {
        match busy_in(addr, &session) {
            Some((_, row)) if row["total"] == 0 => Ok(()),
            seen => Err(format!("{seen:?}")),
        }
    });
    assert_eq!(state(&wait_task(addr, &id, |_| true)), "TASK_STATE_CANCELED");
    assert_eq!(rpc(addr, "CancelTask", json!({ "id": id })).unwrap_err()["code"], -32002);
}

#[test]
fn a_question_makes_the_task_input_required_and_the_next_message_answers_it() {
    let server = start(None);
    let addr = addr(&server);
    let script = json!([{ "ask_user": { "question": "Which colour?", "choices": ["red", "blue"] } }, { "return": { "picked": true } }]);
    let asked = rpc(addr, "SendMessage", json!({ "message": message("paint", Some(script)) })).unwrap();
    let task = &asked["task"];
    assert_eq!(state(task), "TASK_STATE_INPUT_REQUIRED", "{asked}");
    let question = task["status"]["message"]["parts"][0]["text"].as_str().unwrap();
    assert!(question.contains("Which colour?") && question.contains("red"), "{question}");
    assert_eq!(task["status"]["message"]["role"], "ROLE_AGENT");
    let id = task["id"].as_str().unwrap();

    let mut answer = message("blue", None);
    answer["taskId"] = json!(id);
    let answered = rpc(addr, "SendMessage", json!({ "message": answer })).unwrap();
    let task = &answered["task"];
    assert_eq!(state(task), "TASK_STATE_COMPLETED", "{answered}");
    assert_eq!(task["artifacts"][0]["parts"][0]["data"]["answers"], json!(["blue"]), "{answered}");
    let texts: Vec<&str> =
        task["history"].as_array().unwrap().iter().filter_map(|m| m["parts"][0]["text"].as_str()).collect();
    assert_eq!(texts, ["paint", "blue"], "both messages, in order");

    let mut wrong = message("x", None);
    wrong["taskId"] = json!(id);
    wrong["contextId"] = json!("another-context");
    assert_eq!(rpc(addr, "SendMessage", json!({ "message": wrong })).unwrap_err()["code"], -32602);
}

#[test]
fn a_question_deep_in_the_tree_makes_the_task_input_required_in_get_and_stream() {
    let server = start(None);
    let addr = addr(&server);
    let leaf = json!([{ "ask_user": { "question": "Deep?" } }, { "return": { "leaf": true } }]);
    let middle = json!([spawn_step("leaf", leaf), { "await_children": {} }, { "return": { "middle": true } }]);
    let script = json!([spawn_step("middle", middle), { "await_children": {} }, { "return": { "answer": "done" } }]);
    let events = stream(addr, "SendStreamingMessage", json!({ "message": message("deep", Some(script)) }));
    let last = &events.last().unwrap()["result"]["statusUpdate"]["status"];
    assert_eq!(last["state"], "TASK_STATE_INPUT_REQUIRED", "the stream ends waiting for the person: {events:#?}");
    assert_eq!(last["message"]["parts"][0]["text"], "Deep?");
    let id = events[0]["result"]["task"]["id"].as_str().unwrap();
    assert_eq!(state(&rpc(addr, "GetTask", json!({ "id": id })).unwrap()), "TASK_STATE_INPUT_REQUIRED");
    let mut answer = message("yes", None);
    answer["taskId"] = json!(id);
    let done = rpc(addr, "SendMessage", json!({ "message": answer })).unwrap();
    assert_eq!(state(&done["task"]), "TASK_STATE_COMPLETED", "{done}");
}

#[test]
fn tokens_guard_the_door_and_one_callers_tasks_are_not_anothers() {
    let server = start(Some("[auth]\ntokens = [\"alpha\", \"beta\"]\n"));
    let addr = addr(&server);
    let (_, _, card) = http_with_headers(addr, "GET", "/.well-known/agent-card.json", &[], "");
    assert_eq!(card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"], "Bearer", "{card}");
    let send =
        json!({ "jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": { "message": message("hi", None) } })
            .to_string();
    let (status, _) = call_with(addr, &[V1, JSON], &send);
    assert_eq!(status, 401, "no token");
    let (status, _) = call_with(addr, &[V1, JSON, ("Authorization", "Bearer wrong")], &send);
    assert_eq!(status, 401, "a wrong token");
    let (status, reply) = call_with(addr, &[V1, JSON, ("Authorization", "Bearer alpha")], &send);
    assert_eq!(status, 200);
    let id = reply["result"]["task"]["id"].as_str().unwrap();
    let get = json!({ "jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": { "id": id } }).to_string();
    let (_, mine) = call_with(addr, &[V1, JSON, ("Authorization", "Bearer alpha")], &get);
    assert_eq!(mine["result"]["id"], id);
    let (_, theirs) = call_with(addr, &[V1, JSON, ("Authorization", "Bearer beta")], &get);
    assert_eq!(theirs["error"]["code"], -32001, "another caller's task is not found: {theirs}");
    let list = json!({ "jsonrpc": "2.0", "id": 3, "method": "ListTasks", "params": {} }).to_string();
    let (_, listed) = call_with(addr, &[V1, JSON, ("Authorization", "Bearer beta")], &list);
    assert_eq!(listed["result"]["totalSize"], 0, "{listed}");
}

#[test]
fn a_task_survives_a_kill_and_restart_and_is_found_again() {
    let dir = std::env::temp_dir().join(format!("subagentd-a2a-restart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let store = format!("sqlite:{}", dir.join("store.db").display());
    let args = ["--http", "127.0.0.1:0", "--store", store.as_str()];
    let mut first = Server::start(&args, None);
    let script = json!([{ "progress": "one" }, { "sleep_ms": 1500 }, { "return": { "answer": "survived" } }]);
    let started = rpc(
        addr(&first),
        "SendMessage",
        json!({ "message": message("durable", Some(script)), "configuration": { "returnImmediately": true } }),
    )
    .unwrap();
    let id = started["task"]["id"].as_str().unwrap().to_owned();
    let context = started["task"]["contextId"].as_str().unwrap().to_owned();
    first.kill9();
    let second = Server::start(&args, None);
    let addr = addr(&second);
    let done = wait_task(addr, &id, |task| state(task) == "TASK_STATE_COMPLETED");
    assert_eq!(done["artifacts"][0]["parts"][0]["text"], "survived");
    assert_eq!(done["contextId"], context.as_str());
    assert_eq!(done["history"][0]["parts"][0]["text"], "durable", "the message is kept with the task");
    let listed = rpc(addr, "ListTasks", json!({ "contextId": context })).unwrap();
    assert_eq!(listed["tasks"][0]["id"], id.as_str());
    drop(second);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_idle_context_is_let_go_but_its_tasks_stay_findable() {
    let dir = std::env::temp_dir().join(format!("subagentd-a2a-idle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let store = format!("sqlite:{}", dir.join("store.db").display());
    let config = "[limits]\nsession_idle_seconds = 1\n";
    let server = Server::start(&["--http", "127.0.0.1:0", "--store", store.as_str()], Some(config));
    let addr = addr(&server);
    // A task that outlasts the idle time is never let go while it runs.
    let script = json!([{ "sleep_ms": 2500 }, { "return": { "answer": "slow" } }]);
    let slow = rpc(addr, "SendMessage", json!({ "message": message("slow", Some(script)) })).unwrap();
    assert_eq!(state(&slow["task"]), "TASK_STATE_COMPLETED", "{slow}");
    let id = slow["task"]["id"].as_str().unwrap().to_owned();
    let served = |addr: &str| {
        let (_, _, listed) = http_with_headers(addr, "GET", "/admin/sessions", &[], "");
        listed["sessions"].as_array().map_or(0, Vec::len)
    };
    eventually_blocking("the idle context is let go", Duration::from_secs(10), || match served(addr) {
        0 => Ok(()),
        n => Err(format!("{n} sessions served")),
    });
    let again = wait_task(addr, &id, |_| true);
    assert_eq!(state(&again), "TASK_STATE_COMPLETED", "found again from the store: {again}");
    assert_eq!(again["artifacts"][0]["parts"][0]["text"], "slow");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn first_messages_of_one_new_context_at_once_make_one_session() {
    let server = start(None);
    let addr = addr(&server).to_owned();
    let sends: Vec<_> = (0..8)
        .map(|n| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let message = json!({ "messageId": format!("m{n}"), "role": "ROLE_USER", "contextId": "shared",
                    "parts": [{ "text": "at once" }] });
                rpc(&addr, "SendMessage", json!({ "message": message })).unwrap()
            })
        })
        .collect();
    let sessions: std::collections::BTreeSet<String> = sends
        .into_iter()
        .map(|send| send.join().unwrap()["task"]["id"].as_str().unwrap().split_once('-').unwrap().0.to_owned())
        .collect();
    assert_eq!(sessions.len(), 1, "every task in one session: {sessions:?}");
    let listed = rpc(&addr, "ListTasks", json!({ "contextId": "shared" })).unwrap();
    assert_eq!(listed["totalSize"], 8, "{listed}");
    let (_, _, admin) = http_with_headers(&addr, "GET", "/admin/sessions", &[], "");
    assert_eq!(admin["sessions"].as_array().map(Vec::len), Some(1), "{admin}");
}
