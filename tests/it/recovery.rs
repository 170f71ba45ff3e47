//! Recovery that never stalls, and work that goes on without its client.
//!
//! - In process: two cluster nodes (`server::run`, each in an actix system
//!   of its own on a thread) on one PostgreSQL database, driven over HTTP.
//!   A restore whose client gives up after 5 ms runs to its end, and the
//!   session is served; a session made on one node is served by the other
//!   from its first `/send`; an A2A task started on one node is found,
//!   and its context served, on the other.
//! - The real binary on SQLite, killed (SIGKILL) and restarted: its running
//!   tasks go on before their clients come back, over HTTP and over TCP,
//!   and the returning client is given what happened meanwhile.

use serde_json::{json, Value};
use std::io::Write;
use std::time::Duration;
use subagent_host::config::Limits;
use subagent_host::server::Auth;
use subagent_host::server::{self, Listeners, Settings, Workers};
use subagent_host::store::{self, ClusterSettings, StoreUrl, WriterSettings};
use subagent_host::AdapterRouter;

use crate::common::eventually_blocking;
use crate::e2e_support::*;
use crate::test_database::TestDatabase;

/// The nodes' lease.
const LEASE: Duration = Duration::from_millis(2000);

/// A cluster node served in this process, on a thread and actix system of
/// its own; stopped (as by SIGTERM) when dropped.
struct Node {
    http: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Node {
    fn start(url: &str, id: &str) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind port 0");
        let http = listener.local_addr().expect("addr").to_string();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (url, id, addr) = (url.to_owned(), id.to_owned(), http.clone());
        let thread = std::thread::spawn(move || {
            actix_rt::System::new().block_on(async move {
                let cluster = ClusterSettings { node_id: id, lease: LEASE, http_addr: Some(addr), tcp_addr: None };
                let url = StoreUrl::parse(&url).expect("a store URL");
                let store = store::open(&url, WriterSettings::default(), Some(cluster)).expect("open the store");
                let settings = Settings {
                    limits: Limits::default(),
                    router: AdapterRouter::default(),
                    auth: Auth::open(),
                    admin_tokens: Auth::open(),
                    workers: Workers::InPlace,
                    http_workers: 1,
                    final_flush: Duration::from_millis(200),
                    store,
                    journal_retained: 1024,
                    resume_concurrency: 8,
                    tools: Default::default(),
                    approvals: Default::default(),
                    a2a: Default::default(),
                    mcp: Default::default(),
                    http: Default::default(),
                };
                let listeners = Listeners { http: Some(listener), ..Listeners::default() };
                server::run(settings, listeners, async move {
                    let _ = stopped.await;
                })
                .await
                .expect("serve");
            });
        });
        Self { http, stop: Some(stop), thread: Some(thread) }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn create_session(addr: &str) -> String {
    let (status, body) = http(addr, "POST", "/session", &[], "");
    assert_eq!(status, 200, "{body}");
    body["session_id"].as_str().expect("session_id").to_owned()
}

fn send(addr: &str, session: &str, line: &Value) -> (u16, Value) {
    http(addr, "POST", "/send", &[("X-Session-Id", session)], &line.to_string())
}

fn handshake() -> Value {
    json!({ "type": "handshake/req", "id": "h", "agent_id": "client", "agent_caps": ["multi_agent"] })
}

/// Sends `line` over HTTP until it is taken (200), failing after `within`;
/// returns how many times it was refused first.
fn send_until_taken(addr: &str, session: &str, line: &Value, within: Duration) -> u32 {
    let mut refused = 0;
    eventually_blocking(&format!("{addr} takes the session"), within, || match send(addr, session, line) {
        (200, _) => Ok(()),
        (status, body) => {
            refused += 1;
            Err(format!("{status} {body}"))
        }
    });
    refused
}

/// A `/send` whose client gives up `after` it sent it, before any answer.
fn abandoned_send(addr: &str, session: &str, line: &Value, after: Duration) {
    let body = line.to_string();
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    let request = format!(
        "POST /send HTTP/1.1\r\nHost: {addr}\r\nX-Session-Id: {session}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).expect("write");
    std::thread::sleep(after);
}

#[test]
fn a_restore_whose_client_gives_up_runs_to_its_end_and_the_session_is_served() {
    let db = TestDatabase::create();
    let n1 = Node::start(&db.url, "n1");
    let n2 = Node::start(&db.url, "n2");
    let session = create_session(&n1.http);
    let mut on_n1 = SseStream::open(&n1.http, &session);
    assert_eq!(send(&n1.http, &session, &handshake()).0, 200);
    assert_eq!(on_n1.reply("h")["ok"], true);
    let spawn = json!({ "type": "SUBAGENT_SPAWN_REQ", "id": "s", "agent": { "name": "w", "model": "scripted" } });
    assert_eq!(send(&n1.http, &session, &spawn).0, 200);
    let id = on_n1.reply("s")["subagent_id"].as_str().expect("id").to_owned();
    let script = json!([{ "sleep_ms": 1500 }, { "return": { "done": true } }]);
    let task = json!({ "name": "t", "instruction": "i", "metadata": { "script": script } });
    let delegate = json!({ "type": "SUBAGENT_DELEGATE_REQ", "id": "d", "subagent_id": id, "task": task });
    assert_eq!(send(&n1.http, &session, &delegate).0, 200);
    assert_eq!(on_n1.reply("d")["accepted"], true);

    // n2 is asked for the session by a client that gives up after 5 ms, in
    // the middle of the handoff from n1.
    let list = json!({ "type": "SUBAGENT_LIST_REQ", "id": "l0" });
    abandoned_send(&n2.http, &session, &list, Duration::from_millis(5));

    // The restore went on without it: n2 serves the session, at once or
    // within the lease, and every later request too.
    let within = LEASE + Duration::from_secs(2);
    let refused = send_until_taken(&n2.http, &session, &json!({ "type": "SUBAGENT_LIST_REQ", "id": "l1" }), within);
    eprintln!("recovery: n2 served the abandoned restore's session after {refused} refusals");
    for n in 0..20 {
        let (status, body) = send(&n2.http, &session, &json!({ "type": "SUBAGENT_LIST_REQ", "id": format!("m{n}") }));
        assert_eq!(status, 200, "a later /send to n2 is served: {body}");
    }
    let mut on_n2 = SseStream::open(&n2.http, &session);
    assert_eq!(on_n2.status, 200);
    let listed = on_n2.reply("l1");
    assert_eq!(listed["subagents"].as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!(send(&n2.http, &session, &json!({ "type": "SUBAGENT_AWAIT_REQ", "id": "a", "subagent_id": id })).0, 200);
    let answer = on_n2.reply("a");
    assert_eq!((&answer["status"], &answer["result"]["done"]), (&json!("COMPLETED"), &json!(true)), "{answer}");
}

#[test]
fn a_session_made_on_one_node_is_served_by_another_from_its_first_send() {
    let db = TestDatabase::create();
    let n1 = Node::start(&db.url, "n1");
    let n2 = Node::start(&db.url, "n2");
    let session = create_session(&n1.http);
    // No stick table, no handshake on n1: the first request goes to n2.
    let (status, body) = send(&n2.http, &session, &handshake());
    assert_eq!(status, 200, "the session id n1 handed out is served by n2: {body}");
    let mut on_n2 = SseStream::open(&n2.http, &session);
    let reply = on_n2.reply("h");
    assert_eq!((&reply["ok"], &reply["session_id"]), (&json!(true), &json!(session)), "{reply}");
    let spawn = json!({ "type": "SUBAGENT_SPAWN_REQ", "id": "s", "agent": { "name": "w", "model": "scripted" } });
    assert_eq!(send(&n2.http, &session, &spawn).0, 200);
    assert!(on_n2.reply("s")["subagent_id"].is_string());
    // Before its handshake, the session still needs one wherever it is served.
    let fresh = create_session(&n1.http);
    let (status, _) = send(&n2.http, &fresh, &json!({ "type": "SUBAGENT_LIST_REQ", "id": "early" }));
    assert_eq!(status, 200);
    let mut fresh_stream = SseStream::open(&n2.http, &fresh);
    let early = fresh_stream.reply("early");
    assert_eq!(early["type"], "error", "no request before the handshake, on any node: {early}");
}

/// One A2A JSON-RPC call to `addr`: its result (the error object else).
fn a2a(addr: &str, method: &str, params: Value) -> Result<Value, Value> {
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params }).to_string();
    let (status, reply) =
        http(addr, "POST", "/a2a", &[("A2A-Version", "1.0"), ("Content-Type", "application/json")], &body);
    assert_eq!(status, 200, "{reply}");
    reply.get("result").cloned().ok_or_else(|| reply["error"].clone())
}

#[test]
fn an_a2a_task_started_on_one_node_is_found_and_finished_from_another() {
    let db = TestDatabase::create();
    let n1 = Node::start(&db.url, "n1");
    let n2 = Node::start(&db.url, "n2");
    let script = json!([{ "progress": "one" }, { "sleep_ms": 1500 }, { "return": { "answer": "moved" } }]);
    let message = json!({ "messageId": "m1", "role": "ROLE_USER", "parts": [{ "text": "go" }], "metadata": { "script": script } });
    let started =
        a2a(&n1.http, "SendMessage", json!({ "message": message, "configuration": { "returnImmediately": true } }))
            .unwrap();
    let id = started["task"]["id"].as_str().unwrap().to_owned();
    let context = started["task"]["contextId"].as_str().unwrap().to_owned();
    // Asked on n2, which takes the context over from n1: the task goes on
    // there and ends.
    let done = eventually_blocking("the task finished, read on n2", Duration::from_secs(20), || {
        let task = a2a(&n2.http, "GetTask", json!({ "id": id })).ok()?;
        (task["status"]["state"] == "TASK_STATE_COMPLETED").then_some(task)
    });
    assert_eq!(done["artifacts"][0]["parts"][0]["text"], "moved", "{done}");
    // The context's next task, sent to n2, is of the same session.
    let next = json!({ "messageId": "m2", "role": "ROLE_USER", "contextId": context, "parts": [{ "text": "again" }] });
    let second = a2a(&n2.http, "SendMessage", json!({ "message": next })).unwrap();
    assert_eq!(second["task"]["id"].as_str().unwrap().split_once('-').unwrap().0, id.split_once('-').unwrap().0);
    let listed = a2a(&n2.http, "ListTasks", json!({ "contextId": context })).unwrap();
    assert_eq!(listed["totalSize"], 2, "{listed}");
}

/// The single-node host of the restart tests: TCP and HTTP on SQLite.
fn sqlite_host(dir: &std::path::Path, config: &str) -> Server {
    let dir = dir.display().to_string();
    Server::start(&["--tcp", "127.0.0.1:0", "--http", "127.0.0.1:0", "--data-dir", &dir], Some(config))
}

/// A scratch directory, removed on drop.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new(what: &str) -> Self {
        let path = std::env::temp_dir().join(format!("subagentd-{what}-{:016x}", fastrand::u64(..)));
        std::fs::create_dir_all(&path).expect("scratch dir");
        Self(path)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The A2E `ts` of a message, in seconds since the epoch.
fn ts(message: &Value) -> f64 {
    message["ts"].as_f64().expect("ts")
}

fn now_seconds() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs_f64()
}

/// Waits until the host's operator's list counts the one subagent of
/// `session` COMPLETED: its task ended with no client attached.
fn wait_completed(addr: &str, session: &str) {
    eventually_blocking("the task completes with no client", PATIENCE, || {
        let (_, body) = http(addr, "GET", "/admin/sessions", &[], "");
        let rows = body["sessions"].as_array().cloned().unwrap_or_default();
        let done = rows.iter().any(|row| row["session_id"] == session && row["subagents"]["COMPLETED"] == 1);
        done.then_some(()).ok_or(body)
    });
}

/// A task of `steps` progress steps 300 ms apart.
fn stepping_task(steps: usize) -> Value {
    let mut script: Vec<Value> =
        (0..steps).flat_map(|n| [json!({ "progress": format!("s{n}") }), json!({ "sleep_ms": 300 })]).collect();
    script.push(json!({ "return": { "steps": steps } }));
    json!({ "name": "t", "instruction": "i", "metadata": { "script": script } })
}

#[test]
fn a_restarted_host_finishes_an_http_sessions_task_before_its_client_returns() {
    let dir = Scratch::new("adopt-http");
    let mut host = sqlite_host(&dir.0, "");
    let addr = host.http.clone().expect("http");
    let session = create_session(&addr);
    let mut stream = SseStream::open(&addr, &session);
    assert_eq!(send(&addr, &session, &handshake()).0, 200);
    stream.reply("h");
    let spawn = json!({ "type": "SUBAGENT_SPAWN_REQ", "id": "s", "agent": { "name": "w", "model": "scripted" } });
    send(&addr, &session, &spawn);
    let id = stream.reply("s")["subagent_id"].as_str().expect("id").to_owned();
    let delegate = json!({ "type": "SUBAGENT_DELEGATE_REQ", "id": "d", "subagent_id": id, "task": stepping_task(6) });
    send(&addr, &session, &delegate);
    let mut last_seen = 0;
    loop {
        let message = stream.next().expect("a message");
        last_seen = stream.last_id.max(last_seen);
        if message["event"] == "progress" && message["content"]["message"] == "s1" {
            break;
        }
    }
    host.kill9();
    drop(stream);

    let mut host = sqlite_host(&dir.0, "");
    let addr = host.http.clone().expect("http");
    // No client: the session is served again at once, on its own.
    host.wait_sessions(1);
    wait_completed(&addr, &session);
    // Stamped as it reattaches (see the TCP twin below).
    let mut stream = SseStream::open_after(&addr, &session, Some(last_seen));
    let returned = now_seconds();
    assert_eq!(stream.status, 200);
    let mut resumed = None;
    let completed = loop {
        let message = stream.next().expect("the events produced meanwhile");
        if message["event"] == "resumed" {
            resumed = Some(message.clone());
        }
        if message["event"] == "completed" && message["subagent_id"] == id.as_str() {
            break message;
        }
    };
    let resumed = resumed.expect("a resumed event before the completion");
    assert!(ts(&resumed) < returned && ts(&completed) < returned, "the task went on before its client came back");
    assert_eq!(send(&addr, &session, &json!({ "type": "SUBAGENT_AWAIT_REQ", "id": "a", "subagent_id": id })).0, 200);
    let answer = stream.reply("a");
    assert_eq!((&answer["status"], &answer["result"]["steps"]), (&json!("COMPLETED"), &json!(6)), "{answer}");
    let _ = host.terminate();
}

#[test]
fn a_restarted_host_finishes_a_tcp_sessions_task_and_replays_its_events_on_resume() {
    let dir = Scratch::new("adopt-tcp");
    let mut host = sqlite_host(&dir.0, "");
    let mut client = LineClient::connect(host.tcp.as_deref().expect("tcp"));
    client.send(&handshake());
    let session = client.reply("h")["session_id"].as_str().expect("session_id").to_owned();
    client.send(&json!({ "type": "SUBAGENT_SPAWN_REQ", "id": "s", "agent": { "name": "w", "model": "scripted" } }));
    let id = client.reply("s")["subagent_id"].as_str().expect("id").to_owned();
    client.send(&json!({ "type": "SUBAGENT_DELEGATE_REQ", "id": "d", "subagent_id": id, "task": stepping_task(6) }));
    client.reply("d");
    while let Some(message) = client.next() {
        if message["event"] == "progress" && message["content"]["message"] == "s1" {
            break;
        }
    }
    host.kill9();
    drop(client);

    let mut host = sqlite_host(&dir.0, "");
    host.wait_sessions(1);
    wait_completed(host.http.as_deref().expect("http"), &session);
    let mut client = LineClient::connect(host.tcp.as_deref().expect("tcp"));
    // The client is back once it asks to resume: the operator's count may
    // read COMPLETED a moment before the completion's line is stamped (the
    // subagent's status moves as its task ends; its event is told as the
    // supervisor takes the actor's report).
    let returned = now_seconds();
    let mut resume = handshake();
    resume["resume_session_id"] = json!(session);
    client.send(&resume);
    let reply = client.reply("h");
    assert_eq!((&reply["ok"], &reply["session_id"]), (&json!(true), &json!(session)), "{reply}");
    // The events it produced meanwhile come after the handshake's reply, in
    // order, and no reply to a request of the dead connection among them.
    let mut events = Vec::new();
    let completed = loop {
        let message = client.next().expect("the events produced meanwhile");
        assert!(message.get("req_id").is_none_or(|id| id == "" || id.is_null()), "only events: {message}");
        events.push(message.clone());
        if message["event"] == "completed" {
            break message;
        }
    };
    assert!(ts(&completed) < returned, "the task went on before its client came back: {events:?}");
    let steps: Vec<&str> =
        events.iter().filter(|m| m["event"] == "progress").filter_map(|m| m["content"]["message"].as_str()).collect();
    assert_eq!(steps.last(), Some(&"s5"), "{events:?}");
    client.send(&json!({ "type": "SUBAGENT_AWAIT_REQ", "id": "a", "subagent_id": id }));
    let answer = client.reply("a");
    assert_eq!((&answer["status"], &answer["result"]["steps"]), (&json!("COMPLETED"), &json!(6)), "{answer}");
    // Resumed again later, nothing is replayed twice.
    drop(client);
    let mut client = LineClient::connect(host.tcp.as_deref().expect("tcp"));
    client.send(&resume);
    let reply = eventually_blocking("the session is no longer in use", PATIENCE, || {
        let reply = client.reply("h");
        if reply["reason"] != "session_in_use" {
            return Ok(reply);
        }
        client.send(&resume);
        Err(reply)
    });
    assert_eq!(reply["ok"], true, "{reply}");
    client.send(&json!({ "type": "SUBAGENT_LIST_REQ", "id": "l" }));
    loop {
        let message = client.next().expect("the list");
        assert_ne!(message["event"], "completed", "a line delivered once is not replayed: {message}");
        if message["req_id"] == "l" {
            break;
        }
    }
    let _ = host.terminate();
}

#[test]
fn a_task_queued_under_a_running_cap_runs_after_a_restart_in_its_place() {
    let dir = Scratch::new("queued");
    let config = "[limits]\nmax_running_per_session = 1\n";
    let mut host = sqlite_host(&dir.0, config);
    let mut client = LineClient::connect(host.tcp.as_deref().expect("tcp"));
    client.send(&handshake());
    let session = client.reply("h")["session_id"].as_str().expect("session_id").to_owned();
    let mut ids = Vec::new();
    for name in ["first", "second", "third"] {
        let spawn = json!({ "type": "SUBAGENT_SPAWN_REQ", "id": name, "agent": { "name": name, "model": "scripted" } });
        client.send(&spawn);
        ids.push(client.reply(name)["subagent_id"].as_str().expect("id").to_owned());
    }
    let long = json!({ "name": "t", "instruction": "i", "metadata": { "script": [{ "sleep_ms": 1500 }, { "return": { "n": 0 } }] } });
    client.send(&json!({ "type": "SUBAGENT_DELEGATE_REQ", "id": "d0", "subagent_id": ids[0], "task": long }));
    assert_eq!(client.reply("d0")["status"], "RUNNING");
    for (n, id) in ids.iter().enumerate().skip(1) {
        let task = json!({ "name": "t", "instruction": "i", "metadata": { "script": [{ "return": { "n": n } }] } });
        let req = format!("d{n}");
        client.send(&json!({ "type": "SUBAGENT_DELEGATE_REQ", "id": req, "subagent_id": id, "task": task }));
        let reply = client.reply(&req);
        assert_eq!((&reply["accepted"], &reply["status"]), (&json!(true), &json!("READY")), "queued: {reply}");
    }
    // The queue is committed once the delegates are answered (a reply waits
    // for the changes before it).
    host.kill9();
    drop(client);

    let mut host = sqlite_host(&dir.0, config);
    let mut client = LineClient::connect(host.tcp.as_deref().expect("tcp"));
    let mut resume = handshake();
    resume["resume_session_id"] = json!(session);
    client.send(&resume);
    assert_eq!(client.reply("h")["ok"], true);
    for (n, id) in ids.iter().enumerate() {
        client.send(&json!({ "type": "SUBAGENT_AWAIT_REQ", "id": format!("a{n}"), "subagent_id": id }));
    }
    // In their places: the resumed task ends first, then the queue, in order.
    let mut completed = Vec::new();
    let mut answered = 0;
    while answered < ids.len() {
        let message = client.next().expect("a line");
        if message["event"] == "completed" {
            completed.push(message["subagent_id"].as_str().unwrap_or_default().to_owned());
        }
        if let Some(n) = message["req_id"].as_str().and_then(|id| id.strip_prefix('a')) {
            let n: u64 = n.parse().expect("an await");
            assert_eq!((&message["status"], &message["result"]["n"]), (&json!("COMPLETED"), &json!(n)), "{message}");
            answered += 1;
        }
    }
    assert_eq!(completed, ids, "the queue kept its order across the restart");
    let _ = host.terminate();
}
