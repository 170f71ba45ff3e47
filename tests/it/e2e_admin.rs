//! The admin API (`/admin/*`) of the server, run in process
//! ([`InProcess`]): sessions, trees, one
//! subagent, the event stream, cancel and terminate, and who may use it
//! (loopback without tokens; `[admin] tokens` apart from `[auth]` ones).

use crate::common::eventually_blocking;
use serde_json::{json, Value};

use crate::e2e_support::{http, InProcess, LineClient, SseStream, PATIENCE};

/// A three-level scripted tree, as its client sees it.
pub(crate) struct Tree {
    pub planner: String,
    pub researcher: String,
    pub reader: String,
    pub writer: String,
}

fn spawn_step(name: &str, task: &str, script: Value) -> Value {
    json!({ "spawn": {
        "agent": { "name": name, "model": "scripted-sim" },
        "task": { "name": task, "instruction": format!("{task}, then report"), "metadata": { "script": script } },
    } })
}

/// Handshakes `client` as `agent`.
pub(crate) fn handshake(client: &mut LineClient, agent: &str, token: &str) {
    client.send(&json!({
        "type": "handshake/req", "id": "h", "agent_id": agent, "agent_caps": ["multi_agent"], "auth_token": token,
    }));
    assert_eq!(client.reply("h")["ok"], true);
}

/// The session's subagents by name, from a protocol list.
pub(crate) fn list(client: &mut LineClient) -> Vec<Value> {
    client.send(&json!({ "type": "SUBAGENT_LIST_REQ", "id": "l" }));
    client.reply("l")["subagents"].as_array().expect("a list").clone()
}

fn status_of(subagents: &[Value], name: &str) -> Option<String> {
    subagents.iter().find(|s| s["name"] == name).and_then(|s| s["status"].as_str()).map(str::to_owned)
}

fn id_of(subagents: &[Value], name: &str) -> String {
    subagents.iter().find(|s| s["name"] == name).and_then(|s| s["subagent_id"].as_str()).expect(name).to_owned()
}

/// Builds planner → researcher → reader (running), and planner → writer,
/// whose task fails; returns once the tree is in that state.
pub(crate) fn three_levels(client: &mut LineClient) -> Tree {
    client.send(
        &json!({ "type": "SUBAGENT_SPAWN_REQ", "id": "s", "agent": { "name": "planner", "model": "scripted-sim" } }),
    );
    let planner = client.reply("s")["subagent_id"].as_str().unwrap().to_owned();
    let reader = spawn_step("reader", "read the sources", json!([{ "sleep_ms": 600_000 }]));
    let researcher = spawn_step("researcher", "find sources", json!([reader, { "sleep_ms": 600_000 }]));
    let writer =
        spawn_step("writer", "write the report", json!([{ "fail": "source unreachable: https://example.invalid" }]));
    let task = json!({ "name": "plan", "instruction": "plan the report", "metadata": { "script": [researcher, writer, { "sleep_ms": 600_000 }] } });
    client.send(&json!({ "type": "SUBAGENT_DELEGATE_REQ", "id": "d", "subagent_id": planner, "task": task }));
    assert_eq!(client.reply("d")["accepted"], true);
    let subagents = eventually_blocking("the tree forms", PATIENCE, || {
        let subagents = list(client);
        let ready = status_of(&subagents, "reader").as_deref() == Some("RUNNING")
            && status_of(&subagents, "writer").as_deref() == Some("FAILED");
        if ready {
            Ok(subagents)
        } else {
            Err(format!("{subagents:#?}"))
        }
    });
    Tree {
        planner,
        researcher: id_of(&subagents, "researcher"),
        reader: id_of(&subagents, "reader"),
        writer: id_of(&subagents, "writer"),
    }
}

/// The id of the open session whose client handshook as `agent`, as the
/// admin API lists it (sent with `headers`).
pub(crate) fn session_of(addr: &str, agent: &str, headers: &[(&str, &str)]) -> String {
    eventually_blocking(&format!("the session of {agent} is listed"), PATIENCE, || {
        let (status, body) = http(addr, "GET", "/admin/sessions", headers, "");
        assert_eq!(status, 200, "{body}");
        let found = body["sessions"].as_array().unwrap().iter().find(|s| s["agent_id"] == agent).cloned();
        found.map(|session| session["session_id"].as_str().unwrap().to_owned()).ok_or(body)
    })
}

fn get(addr: &str, path: &str) -> (u16, Value) {
    http(addr, "GET", path, &[], "")
}

fn confirm_post(addr: &str, path: &str) -> (u16, Value) {
    http(addr, "POST", path, &[("X-Subagentd-Confirm", "yes")], "")
}

#[test]
fn the_admin_api_shows_sessions_trees_and_details_and_stops_subtrees() {
    let server = InProcess::start(&["--tcp", "127.0.0.1:0", "--http", "127.0.0.1:0"], None);
    let addr = server.http.clone().unwrap();
    let mut client = LineClient::connect(server.tcp.as_ref().unwrap());
    handshake(&mut client, "ops-a", "");
    let tree = three_levels(&mut client);
    let session = session_of(&addr, "ops-a", &[]);

    let (status, body) = get(&addr, "/admin/sessions");
    assert_eq!(status, 200, "{body}");
    let sessions = body["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 1, "{body}");
    let listed = &sessions[0];
    assert_eq!((listed["session_id"].as_str(), listed["transport"].as_str()), (Some(&*session), Some("tcp")));
    assert_eq!(listed["agent_id"], "ops-a");
    assert!(listed["age_seconds"].as_f64().unwrap() >= 0.0);
    assert_eq!(listed["subagents"]["RUNNING"], 3, "{listed}");
    assert_eq!(listed["subagents"]["FAILED"], 1, "{listed}");
    assert_eq!(listed["total"], 4);

    let (status, body) = get(&addr, &format!("/admin/sessions/{session}"));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["truncated"], false);
    let rows = body["subagents"].as_array().unwrap();
    let order: Vec<&str> = rows.iter().map(|row| row["name"].as_str().unwrap()).collect();
    assert_eq!(order, ["planner", "researcher", "reader", "writer"], "tree order: parent first, children oldest first");
    let row = |name: &str| rows.iter().find(|row| row["name"] == name).unwrap().clone();
    assert_eq!((row("reader")["depth"].as_u64(), row("reader")["parent"].as_str()), (Some(2), Some(&*tree.researcher)));
    assert_eq!(row("researcher")["parent"], tree.planner.as_str());
    assert_eq!(row("planner")["parent"], Value::Null);
    assert_eq!(row("planner")["children"], 2);
    assert_eq!(row("planner")["model"], "scripted-sim");
    assert_eq!(row("writer")["status"], "FAILED");
    assert_eq!(row("writer")["error"], "source unreachable: https://example.invalid");
    assert!(row("reader")["task_ms"].as_u64().is_some(), "a running task has a running time");
    assert_eq!(row("reader")["usage"], json!({ "input_tokens": 0, "output_tokens": 0 }));
    assert_eq!(get(&addr, &format!("/admin/sessions/{session}?limit=2")).1["truncated"], true);

    let (status, detail) = get(&addr, &format!("/admin/sessions/{session}/subagents/{}", tree.writer));
    assert_eq!(status, 200, "{detail}");
    assert_eq!(detail["task"]["name"], "write the report");
    assert_eq!(detail["config"]["name"], "writer");
    assert_eq!(detail["error"], "source unreachable: https://example.invalid");
    let (_, detail) = get(&addr, &format!("/admin/sessions/{session}/subagents/{}", tree.planner));
    assert_eq!(detail["child_ids"], json!([tree.researcher, tree.writer]));
    assert_eq!(get(&addr, &format!("/admin/sessions/{session}/subagents/sub_00000000")).0, 404);
    assert_eq!(get(&addr, &format!("/admin/sessions/{session}/subagents/nonsense")).0, 404);
    assert_eq!(get(&addr, "/admin/sessions/0123456789abcdef0123456789abcdef").0, 404);

    // No action without its confirmation header.
    let terminate = format!("/admin/sessions/{session}/subagents/{}/terminate", tree.researcher);
    let (status, body) = http(&addr, "POST", &terminate, &[], "");
    assert_eq!(status, 400, "{body}");
    assert_eq!(status_of(&list(&mut client), "researcher").as_deref(), Some("RUNNING"));
    let (status, body) = confirm_post(&addr, &terminate);
    assert_eq!(status, 200, "{body}");
    let mut stopped: Vec<&str> = body["stopped"].as_array().unwrap().iter().map(|id| id.as_str().unwrap()).collect();
    stopped.sort_unstable();
    let mut expected = vec![tree.researcher.as_str(), tree.reader.as_str()];
    expected.sort_unstable();
    assert_eq!(stopped, expected);
    // The session's own client sees it through the protocol.
    let subagents = list(&mut client);
    assert_eq!(status_of(&subagents, "researcher").as_deref(), Some("TERMINATED"));
    assert_eq!(status_of(&subagents, "reader").as_deref(), Some("TERMINATED"));
    assert_eq!(status_of(&subagents, "planner").as_deref(), Some("RUNNING"));

    let cancel = format!("/admin/sessions/{session}/subagents/{}/cancel", tree.planner);
    let (status, body) = confirm_post(&addr, &cancel);
    assert_eq!((status, body["stopped"].clone()), (200, json!([tree.planner])), "{body}");
    assert_eq!(status_of(&list(&mut client), "planner").as_deref(), Some("CANCELLED"));
    assert_eq!(confirm_post(&addr, &format!("/admin/sessions/{session}/subagents/{}/explode", tree.planner)).0, 404);

    // A session that ends leaves the list.
    drop(client);
    eventually_blocking("the ended session leaves the list", PATIENCE, || {
        let (_, body) = get(&addr, "/admin/sessions");
        body["sessions"].as_array().unwrap().is_empty().then_some(()).ok_or(body)
    });
}

#[test]
fn the_admin_stream_follows_a_session_and_announces_every_session() {
    let server = InProcess::start(&["--tcp", "127.0.0.1:0", "--http", "127.0.0.1:0"], None);
    let addr = server.http.clone().unwrap();
    let mut watched = LineClient::connect(server.tcp.as_ref().unwrap());
    handshake(&mut watched, "watched", "");
    let session = session_of(&addr, "watched", &[]);
    let mut stream = SseStream::open_admin(&addr, &format!("/admin/stream?session={session}"), "");
    assert_eq!((stream.status, stream.content_type.as_str()), (200, "text/event-stream"));

    // Another session: its opening is announced, its events are not sent.
    let mut other = LineClient::connect(server.tcp.as_ref().unwrap());
    handshake(&mut other, "other", "");
    let (name, notice) = stream.next_event().expect("a session notice");
    assert_eq!((name.as_deref(), notice["state"].as_str()), (Some("session"), Some("opened")), "{notice}");
    assert_eq!(notice["summary"]["agent_id"], "other");
    other.send(&json!({ "type": "SUBAGENT_SPAWN_REQ", "id": "s", "agent": { "name": "elsewhere", "model": "m" } }));
    other.reply("s");

    watched.send(&json!({ "type": "SUBAGENT_SPAWN_REQ", "id": "s", "agent": { "name": "here", "model": "m" } }));
    let id = watched.reply("s")["subagent_id"].as_str().unwrap().to_owned();
    let (name, data) = stream.next_event().expect("the spawned event");
    assert_eq!(name.as_deref(), Some("subagent"));
    assert_eq!(data["session"], session.as_str());
    assert_eq!(data["event"]["type"], "SUBAGENT_EVENT");
    assert_eq!((data["event"]["subagent_id"].as_str(), data["event"]["event"].as_str()), (Some(&*id), Some("spawned")));
    assert_eq!(data["event"]["content"]["status"], "READY");

    drop(other);
    let (name, notice) = stream.next_event().expect("the other session's end");
    assert_eq!((name.as_deref(), notice["state"].as_str()), (Some("session"), Some("closed")), "{notice}");

    // Unfiltered: every session's events.
    let mut all = SseStream::open_admin(&addr, "/admin/stream", "");
    watched.send(&json!({ "type": "SUBAGENT_TERMINATE_REQ", "id": "t", "subagent_id": id }));
    watched.reply("t");
    let (_, data) = all.next_event().expect("the terminated event");
    assert_eq!(
        (data["event"]["event"].as_str(), data["event"]["subagent_id"].as_str()),
        (Some("terminated"), Some(&*id))
    );
}

const AUTH_CONFIG: &str = r#"
[auth]
tokens = ["a2e-token"]

[admin]
tokens = ["admin-token"]
"#;

#[test]
fn admin_tokens_and_protocol_tokens_grant_nothing_on_each_others_side() {
    let server = InProcess::start(&["--tcp", "127.0.0.1:0", "--http", "127.0.0.1:0"], Some(AUTH_CONFIG));
    let addr = server.http.clone().unwrap();
    let admin = [("Authorization", "Bearer admin-token")];
    let a2e = [("Authorization", "Bearer a2e-token")];

    assert_eq!(get(&addr, "/admin/sessions").0, 401, "no token");
    assert_eq!(http(&addr, "GET", "/admin/sessions", &a2e, "").0, 401, "a protocol token is not an admin token");
    assert_eq!(http(&addr, "GET", "/admin/sessions", &[("Authorization", "Bearer nope")], "").0, 401);
    let (status, body) = http(&addr, "GET", "/admin/sessions", &admin, "");
    assert_eq!((status, body["sessions"].clone()), (200, json!([])));
    let stream = SseStream::open_admin(&addr, "/admin/stream", "");
    assert_eq!(stream.status, 401, "the stream needs the token too");
    let stream = SseStream::open_admin(&addr, "/admin/stream", "Authorization: Bearer admin-token\r\n");
    assert_eq!(stream.status, 200);
    // The page itself holds no data: it loads, then asks for the token.
    let (status, page) = http(&addr, "GET", "/ui", &[], "");
    assert_eq!(status, 200);
    assert!(page.as_str().unwrap().contains("token-dialog"));

    // An admin token opens no protocol session, over HTTP or TCP.
    assert_eq!(http(&addr, "POST", "/session", &admin, "").0, 401);
    let mut client = LineClient::connect(server.tcp.as_ref().unwrap());
    client.send(
        &json!({ "type": "handshake/req", "id": "h", "agent_caps": ["multi_agent"], "auth_token": "admin-token" }),
    );
    let reply = client.reply("h");
    assert_eq!((reply["ok"].as_bool(), reply["reason"].as_str()), (Some(false), Some("auth_failed")), "{reply}");
    // The protocol token does.
    handshake(&mut client, "with-a2e-token", "a2e-token");
    let session = session_of(&addr, "with-a2e-token", &admin);
    let (status, body) = http(&addr, "GET", &format!("/admin/sessions/{session}"), &admin, "");
    assert_eq!(status, 200, "{body}");
}

#[test]
fn without_admin_tokens_the_admin_api_is_off_when_auth_is_on_and_local_only_otherwise() {
    let server = InProcess::start(&["--http", "127.0.0.1:0"], Some("[auth]\ntokens = [\"a2e-token\"]\n"));
    let addr = server.http.clone().unwrap();
    assert_eq!(get(&addr, "/admin/sessions").0, 403);
    assert_eq!(http(&addr, "GET", "/admin/sessions", &[("Authorization", "Bearer a2e-token")], "").0, 403);
    assert_eq!(get(&addr, "/ui").0, 403);
    drop(server);

    let server = InProcess::start(&["--http", "127.0.0.1:0"], None);
    let addr = server.http.clone().unwrap();
    assert_eq!(get(&addr, "/admin/sessions").0, 200);
    // A page of another site whose name resolves to 127.0.0.1 names its own host.
    let (status, _) = http(&addr, "GET", "/admin/sessions", &[("Host", "attacker.example:8080")], "");
    assert_eq!(status, 403);
}

#[test]
fn the_page_is_served_on_the_metrics_listener_when_there_is_no_http_listener() {
    let server = InProcess::start(&["--tcp", "127.0.0.1:0", "--metrics", "127.0.0.1:0"], None);
    let metrics = server.metrics.clone().unwrap();
    let (status, page) = get(&metrics, "/ui");
    assert_eq!(status, 200);
    assert!(page.as_str().unwrap().contains("/ui/app.js"));
    assert_eq!(get(&metrics, "/ui/app.js").0, 200);
    assert_eq!(get(&metrics, "/ui/style.css").0, 200);
    assert_eq!(get(&metrics, "/ui/nothing.js").0, 404);
    assert_eq!(get(&metrics, "/admin/sessions").0, 200);

    let server = InProcess::start(&["--http", "127.0.0.1:0", "--metrics", "127.0.0.1:0"], None);
    assert_eq!(get(server.metrics.as_ref().unwrap(), "/ui").0, 404, "with an HTTP listener the page is there");
    assert_eq!(get(server.http.as_ref().unwrap(), "/ui").0, 200);
}
