//! The attacker's probes of issue 49, each replayed as a test named after
//! its attack: sessions of the faces reached over A2E's routes, another
//! token's session, handshakes that never end, bounds skipped on a face,
//! DNS rebinding, one caller filling every slot, and the low ones
//! (registration URLs and headers, answers outside a question's choices,
//! A2A's limit code, internal type names). docs/security.md states the
//! model these check.

use crate::e2e_support::{http, http_with_headers, InProcess, LineClient, Server, SseStream};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const TOKENS: &str = "[auth]\ntokens = [\"alpha\", \"beta\"]\n";
const ALPHA: (&str, &str) = ("Authorization", "Bearer alpha");
const BETA: (&str, &str) = ("Authorization", "Bearer beta");
const JSON: (&str, &str) = ("Content-Type", "application/json");
const V1: (&str, &str) = ("A2A-Version", "1.0");
const ACCEPT: (&str, &str) = ("Accept", "application/json, text/event-stream");
const MCP_INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"probe","version":"1"}}}"#;

/// An A2A JSON-RPC call: the HTTP status and the reply.
fn a2a(addr: &str, headers: &[(&str, &str)], method: &str, params: Value) -> (u16, Value) {
    let body = json!({ "jsonrpc": "2.0", "id": "r", "method": method, "params": params }).to_string();
    let mut all = vec![V1, JSON];
    all.extend_from_slice(headers);
    http(addr, "POST", "/a2a", &all, &body)
}

/// A message whose task sleeps `ms` (the scripted agent).
fn sleeping_message(context: Option<&str>, ms: u64) -> Value {
    let mut message = json!({ "messageId": format!("m-{ms}-{}", uuid_like()), "role": "ROLE_USER",
        "parts": [{ "text": "work" }], "metadata": { "script": [{ "sleep_ms": ms }] } });
    if let Some(context) = context {
        message["contextId"] = json!(context);
    }
    message
}

// A fresh message id.
fn uuid_like() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u8(1);
    format!("{:x}", hasher.finish())
}

/// Starts an A2A task that sleeps `ms`; its task id.
fn start_a2a_task(addr: &str, headers: &[(&str, &str)], ms: u64) -> String {
    let params = json!({ "message": sleeping_message(None, ms), "configuration": { "returnImmediately": true } });
    let (status, reply) = a2a(addr, headers, "SendMessage", params);
    assert_eq!(status, 200, "{reply}");
    reply["result"]["task"]["id"].as_str().unwrap_or_else(|| panic!("a task: {reply}")).to_owned()
}

/// A new MCP session's id.
fn mcp_session(addr: &str, headers: &[(&str, &str)]) -> String {
    let mut all = vec![ACCEPT, JSON];
    all.extend_from_slice(headers);
    let (status, response_headers, body) = http_with_headers(addr, "POST", "/mcp", &all, MCP_INIT);
    assert_eq!(status, 200, "{body}");
    response_headers.get("mcp-session-id").expect("Mcp-Session-Id").clone()
}

/// `POST /mcp` of `body` in `session`.
fn mcp_post(addr: &str, session: &str, headers: &[(&str, &str)], body: &str) -> (u16, Value) {
    let mut all = vec![ACCEPT, JSON, ("Mcp-Session-Id", session)];
    all.extend_from_slice(headers);
    let (status, _, body) = http_with_headers(addr, "POST", "/mcp", &all, body);
    (status, body)
}

/// A tools/call's result (answered as JSON or as the last SSE message).
fn mcp_call(addr: &str, session: &str, headers: &[(&str, &str)], tool: &str, arguments: Value) -> Value {
    let body = json!({ "jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": { "name": tool, "arguments": arguments } });
    let (status, reply) = mcp_post(addr, session, headers, &body.to_string());
    assert_eq!(status, 200, "{reply}");
    match reply {
        Value::String(text) => text
            .lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .filter_map(|data| serde_json::from_str::<Value>(data).ok())
            .find(|message| message["id"] == 7)
            .unwrap_or_else(|| panic!("no answer in {text}")),
        reply => reply,
    }
}

/// `POST /session` with `headers`: the status and the session id.
fn new_session(addr: &str, headers: &[(&str, &str)]) -> (u16, Option<String>) {
    let (status, body) = http(addr, "POST", "/session", headers, "");
    (status, body["session_id"].as_str().map(str::to_owned))
}

/// `POST /send` of `lines` to `session` with `headers`.
fn send(addr: &str, session: &str, headers: &[(&str, &str)], lines: &[Value]) -> (u16, Value) {
    let body: String = lines.iter().map(|line| format!("{line}\n")).collect();
    let mut all = vec![("X-Session-Id", session)];
    all.extend_from_slice(headers);
    http(addr, "POST", "/send", &all, &body)
}

/// `GET /stream` of `session` with `headers`: its status (the stream is
/// closed at once).
fn stream_status(addr: &str, session: &str, headers: &[(&str, &str)]) -> u16 {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let extra: String = headers.iter().map(|(name, value)| format!("{name}: {value}\r\n")).collect();
    write!(stream, "GET /stream HTTP/1.1\r\nHost: {addr}\r\nX-Session-Id: {session}\r\n{extra}\r\n").unwrap();
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).unwrap();
    line[9..12].parse().unwrap()
}

/// The session id in an A2A task id (`<session>-<subagent>`).
fn session_of_task(task_id: &str) -> String {
    task_id.split('-').next().unwrap().to_owned()
}

fn task_state(addr: &str, headers: &[(&str, &str)], task: &str) -> String {
    let (_, reply) = a2a(addr, headers, "GetTask", json!({ "id": task }));
    reply["result"]["status"]["state"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn send_and_stream_without_a_token_cannot_reach_an_a2a_context_or_an_mcp_session() {
    let server = InProcess::start(&["--http", "127.0.0.1:0"], Some(TOKENS));
    let addr = server.http.as_deref().unwrap();
    let task = start_a2a_task(addr, &[ALPHA], 30_000);
    let session = session_of_task(&task);
    let sub = task.rsplit('-').next().unwrap();
    let terminate = json!({ "type": "SUBAGENT_TERMINATE_REQ", "id": "t", "subagent_id": sub });
    let spawn = json!({ "type": "SUBAGENT_SPAWN_REQ", "id": "s", "agent": { "name": "intruder", "model": "m" } });
    for headers in [&[][..], &[ALPHA][..], &[BETA][..]] {
        let (status, body) = send(addr, &session, headers, &[terminate.clone(), spawn.clone()]);
        assert_eq!(status, 404, "{body}");
        assert!(body["error"].as_str().unwrap().contains("a2a"), "a clear refusal: {body}");
        assert_eq!(stream_status(addr, &session, headers), 404);
    }
    assert_eq!(task_state(addr, &[ALPHA], &task), "TASK_STATE_WORKING", "the task is untouched");
    let listed = a2a(addr, &[ALPHA], "ListTasks", json!({})).1;
    assert_eq!(listed["result"]["tasks"].as_array().map(Vec::len), Some(1), "no intruder: {listed}");

    let mcp = mcp_session(addr, &[ALPHA]);
    let (status, body) = send(addr, &mcp, &[], &[spawn]);
    assert_eq!(status, 404, "{body}");
    assert!(body["error"].as_str().unwrap().contains("mcp"), "{body}");
    assert_eq!(stream_status(addr, &mcp, &[]), 404);
    let ping = json!({ "jsonrpc": "2.0", "id": 2, "method": "ping" }).to_string();
    assert_eq!(mcp_post(addr, &mcp, &[ALPHA], &ping).0, 200, "the MCP session goes on for its owner");
}

#[test]
fn another_tokens_request_takes_nothing_from_a_session() {
    let server = InProcess::start(&["--http", "127.0.0.1:0"], Some(TOKENS));
    let addr = server.http.as_deref().unwrap();
    let (status, session) = new_session(addr, &[ALPHA]);
    assert_eq!(status, 200);
    let session = session.unwrap();
    let hello = json!({ "type": "handshake/req", "id": "h", "agent_caps": ["multi_agent"], "auth_token": "alpha" });
    assert_eq!(send(addr, &session, &[ALPHA], &[hello]).0, 200);
    // Beta names it: refused, and it neither takes the stream's lines nor
    // sends any of its own.
    assert_eq!(stream_status(addr, &session, &[BETA]), 404);
    let list = json!({ "type": "SUBAGENT_LIST_REQ", "id": "l" });
    assert_eq!(send(addr, &session, &[BETA], std::slice::from_ref(&list)).0, 404);
    assert_eq!(send(addr, &session, &[("Authorization", "Bearer wrong")], std::slice::from_ref(&list)).0, 401);
    assert_eq!(send(addr, &session, &[], std::slice::from_ref(&list)).0, 401, "a bearer's session needs its bearer");
    let hijack = json!({ "type": "handshake/req", "id": "h2", "agent_caps": ["multi_agent"], "auth_token": "beta" });
    assert_eq!(send(addr, &session, &[ALPHA], &[hijack, json!({ "type": "ping", "id": "p" })]).0, 200);
    let mut own = TcpStream::connect(addr).unwrap();
    own.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        own,
        "GET /stream HTTP/1.1\r\nHost: {addr}\r\nX-Session-Id: {session}\r\nAuthorization: Bearer alpha\r\n\r\n"
    )
    .unwrap();
    let mut reader = BufReader::new(own);
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(seen.contains("\"req_id\":\"p\"")) && Instant::now() < deadline {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        seen.push_str(&line);
    }
    assert!(
        seen.contains("\"req_id\":\"h\"") && seen.contains("\"ok\":true"),
        "alpha's handshake reply waited for alpha: {seen}"
    );
    assert!(
        seen.contains("\"req_id\":\"h2\"") && seen.contains("auth_failed"),
        "beta's token cannot take it over: {seen}"
    );
    assert!(seen.contains("\"req_id\":\"p\""), "{seen}");
    assert_eq!(stream_status(addr, &session, &[]), 401, "a bearer's session's stream needs its bearer");
}

/// A TCP handshake resuming `id` with `token`: its reply, and how long it took.
fn resume_over_tcp(addr: &str, id: &str, token: &str) -> (Value, Duration) {
    let mut client = LineClient::connect(addr);
    let started = Instant::now();
    client.send(&json!({ "type": "handshake/req", "id": "r", "agent_caps": ["multi_agent"],
        "auth_token": token, "resume_session_id": id }));
    let reply = client.reply("r");
    (reply, started.elapsed())
}

#[test]
fn a_resume_naming_a_faces_session_is_refused_at_once_on_tcp_and_http() {
    let server = InProcess::start(&["--tcp", "127.0.0.1:0", "--http", "127.0.0.1:0"], Some(TOKENS));
    let (tcp, addr) = (server.tcp.as_deref().unwrap(), server.http.as_deref().unwrap());
    let a2a_session = session_of_task(&start_a2a_task(addr, &[ALPHA], 30_000));
    let mcp = mcp_session(addr, &[ALPHA]);
    for id in [&a2a_session, &mcp] {
        for token in ["alpha", "beta"] {
            let (reply, took) = resume_over_tcp(tcp, id, token);
            assert_eq!(reply["ok"], false, "{reply}");
            assert!(took < Duration::from_secs(1), "answered at once: {took:?}");
        }
        let (_, session) = new_session(addr, &[]);
        let session = session.unwrap();
        let mut stream = SseStream::open(addr, &session);
        let resume = json!({ "type": "handshake/req", "id": "r", "agent_caps": ["multi_agent"],
            "auth_token": "alpha", "resume_session_id": id });
        let started = Instant::now();
        assert_eq!(send(addr, &session, &[], &[resume]).0, 200);
        let reply = stream.reply("r");
        assert_eq!(reply["ok"], false, "{reply}");
        assert!(started.elapsed() < Duration::from_secs(1), "answered at once");
    }
}

// What `/proc` says of a process: its open fds and resident KiB.
fn fds_and_rss(pid: u32) -> (usize, u64) {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map(|dir| dir.count()).unwrap_or(0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .unwrap_or(0);
    (fds, rss)
}

#[test]
fn a_thousand_hostile_resumes_of_every_kind_hold_no_slot() {
    let config = format!("{TOKENS}[limits]\nmax_failed_handshakes = 1000\n");
    let mut server = Server::start(&["--tcp", "127.0.0.1:0", "--http", "127.0.0.1:0"], Some(&config));
    let (tcp, addr) = (server.tcp.clone().unwrap(), server.http.clone().unwrap());
    let a2a_session = session_of_task(&start_a2a_task(&addr, &[ALPHA], 60_000));
    let mcp = mcp_session(&addr, &[ALPHA]);
    let (_, own) = new_session(&addr, &[ALPHA]);
    let own = own.unwrap();
    let hello = json!({ "type": "handshake/req", "id": "h", "agent_caps": ["multi_agent"], "auth_token": "alpha" });
    assert_eq!(send(&addr, &own, &[ALPHA], &[hello]).0, 200);
    let unknown = "0123456789abcdef0123456789abcdef".to_owned();
    // Warm up, then the baseline.
    resume_over_tcp(&tcp, &unknown, "beta");
    let (fds_before, rss_before) = fds_and_rss(server.pid());
    let kinds = [("a2e of another caller", &own), ("a2a", &a2a_session), ("mcp", &mcp), ("unknown", &unknown)];
    for (kind, id) in kinds {
        // One connection makes every try (max_failed_handshakes allows it).
        let mut client = LineClient::connect(&tcp);
        let started = Instant::now();
        for n in 0..1000 {
            client.send(&json!({ "type": "handshake/req", "id": format!("r{n}"), "agent_caps": ["multi_agent"],
                "auth_token": "beta", "resume_session_id": id }));
            let reply = loop {
                let line = client.next().unwrap_or_else(|| {
                    panic!("{kind}: the connection ended at try {n}, after {:?}", started.elapsed())
                });
                if line["req_id"] == format!("r{n}") {
                    break line;
                }
            };
            assert_eq!(reply["ok"], false, "{kind}: {reply}");
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{kind}: 1000 refusals took {:?}", started.elapsed());
    }
    // A normal client is served at once.
    let mut client = LineClient::connect(&tcp);
    let started = Instant::now();
    client.send(&json!({ "type": "handshake/req", "id": "ok", "agent_caps": ["multi_agent"], "auth_token": "beta" }));
    assert_eq!(client.reply("ok")["ok"], true);
    assert!(started.elapsed() < Duration::from_millis(500), "served at once: {:?}", started.elapsed());
    drop(client);
    let (fds_after, rss_after) =
        crate::common::eventually_blocking("fds back to baseline", Duration::from_secs(10), || {
            let now = fds_and_rss(server.pid());
            (now.0 <= fds_before + 2).then_some(now)
        });
    assert!(fds_after <= fds_before + 2, "fds {fds_before} -> {fds_after}");
    assert!(rss_after < rss_before + 16 * 1024, "RSS {rss_before} KiB -> {rss_after} KiB");
    // The sessions named are still their owners'.
    let ping = json!({ "jsonrpc": "2.0", "id": 2, "method": "ping" }).to_string();
    assert_eq!(mcp_post(&addr, &mcp, &[ALPHA], &ping).0, 200);
    server.terminate();
}

#[test]
fn bounds_hold_on_every_face_at_the_a2e_limit_plus_one_byte() {
    let config =
        format!("{TOKENS}[limits]\nmax_config_bytes = 4096\nmax_task_bytes = 8192\nmax_message_bytes = 2048\n");
    let server = InProcess::start(&["--tcp", "127.0.0.1:0", "--http", "127.0.0.1:0"], Some(&config));
    let (tcp, addr) = (server.tcp.as_deref().unwrap(), server.http.as_deref().unwrap());
    // A2E: a system prompt of the limit plus one byte.
    let mut client = LineClient::connect(tcp);
    client.send(&json!({ "type": "handshake/req", "id": "h", "agent_caps": ["multi_agent"], "auth_token": "alpha" }));
    assert_eq!(client.reply("h")["ok"], true);
    client.send(&json!({ "type": "SUBAGENT_SPAWN_REQ", "id": "s", "agent": { "name": "big", "model": "m",
        "system_prompt": "p".repeat(4097) } }));
    let refused = client.reply("s");
    assert_eq!(
        (refused["code"].as_str(), refused["detail"]["limit"].as_str()),
        (Some("invalid_message"), Some("max_config_bytes"))
    );

    // MCP: spawn_subagent's and run_subagent's system prompt, and a task.
    let mcp = mcp_session(addr, &[ALPHA]);
    let prompt = "p".repeat(4097);
    let calls = [
        ("spawn_subagent", json!({ "name": "big", "system_prompt": prompt })),
        ("run_subagent", json!({ "name": "big", "instruction": "i", "system_prompt": prompt })),
    ];
    for (tool, arguments) in calls {
        let answer = mcp_call(addr, &mcp, &[ALPHA], tool, arguments);
        assert_eq!(answer["result"]["isError"], true, "{tool}: {answer}");
        assert!(answer.to_string().contains("max_config_bytes"), "{tool}: {answer}");
    }
    let answer =
        mcp_call(addr, &mcp, &[ALPHA], "run_subagent", json!({ "name": "long", "instruction": "t".repeat(8193) }));
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert!(answer.to_string().contains("max_task_bytes"), "{answer}");
    let listed = mcp_call(addr, &mcp, &[ALPHA], "list_subagents", json!({}));
    assert_eq!(listed["result"]["structuredContent"]["subagents"], json!([]), "nothing left behind: {listed}");

    // A2A: a message of the task limit plus one byte, and ids past 256 bytes.
    let mut message = sleeping_message(None, 10);
    message["parts"] = json!([{ "text": "t".repeat(8193) }]);
    let (_, reply) = a2a(addr, &[ALPHA], "SendMessage", json!({ "message": message }));
    assert_eq!(reply["error"]["code"], -32004, "{reply}");
    assert!(reply["error"]["message"].as_str().unwrap().contains("max_task_bytes"), "{reply}");
    let long_id = "c".repeat(257);
    for field in ["contextId", "messageId", "taskId"] {
        let mut message = sleeping_message(None, 10);
        message[field] = json!(long_id);
        let body = json!({ "jsonrpc": "2.0", "id": "r", "method": "SendMessage", "params": { "message": message } })
            .to_string();
        let (_, _, reply) = http_with_headers(addr, "POST", "/a2a", &[V1, JSON, ALPHA], &body);
        assert_eq!(reply["error"]["code"], -32602, "{field}: {reply}");
        assert!(reply.to_string().len() < 1024, "{field}: the id is not echoed: {} bytes", reply.to_string().len());
    }
    let (_, reply) = a2a(addr, &[ALPHA], "GetTask", json!({ "id": long_id }));
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
}

#[test]
fn a_rebinding_host_or_origin_is_refused_on_every_route() {
    let server = InProcess::start(&["--http", "127.0.0.1:0"], None);
    let addr = server.http.as_deref().unwrap();
    let evil = [("Host", "evil.example"), ("Origin", "http://evil.example")];
    let routes = [
        ("POST", "/session"),
        ("POST", "/send"),
        ("GET", "/stream"),
        ("POST", "/a2a"),
        ("POST", "/mcp"),
        ("GET", "/admin/sessions"),
        ("GET", "/ui"),
        ("GET", "/.well-known/agent-card.json"),
    ];
    for (method, path) in routes {
        let (status, body) = http(addr, method, path, &evil, "");
        assert_eq!(status, 403, "{method} {path}: {body}");
        let (status, _) = http(addr, method, path, &[("Origin", "http://evil.example")], "");
        assert_eq!(status, 403, "{method} {path} with an evil Origin only");
    }
    assert_eq!(http(addr, "GET", "/health", &evil, "").0, 200, "probes are not checked");
    assert_eq!(new_session(addr, &[("Origin", "http://localhost:3000")]).0, 200, "a loopback page");
    let (_, card) = http(addr, "GET", "/.well-known/agent-card.json", &[("X-Forwarded-Host", "evil.example")], "");
    let url = card["supportedInterfaces"][0]["url"].as_str().or(card["url"].as_str()).unwrap_or_default().to_owned();
    assert!(url.contains(addr) && !card.to_string().contains("evil"), "{card}");
    drop(server);

    let config =
        "[http]\nallowed_hosts = [\"agents.example.com\"]\nallowed_origins = [\"https://console.example.com\"]\n";
    let server = InProcess::start(&["--http", "127.0.0.1:0"], Some(config));
    let addr = server.http.as_deref().unwrap();
    let named = [("Host", "agents.example.com"), ("Origin", "https://console.example.com")];
    assert_eq!(new_session(addr, &named).0, 200);
    let (_, card) = http(addr, "GET", "/.well-known/agent-card.json", &[("Host", "agents.example.com")], "");
    assert!(card.to_string().contains("http://agents.example.com/a2a"), "the card names an allowed host: {card}");
    assert_eq!(new_session(addr, &[("Host", "agents.example.com"), ("Origin", "https://evil.example")]).0, 403);
}

/// A TCP client whose socket is bound to `source` (a loopback address of
/// its own: another caller, without tokens).
fn connect_from(addr: &str, source: &str) -> LineClient {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let local: std::net::SocketAddr = format!("{source}:0").parse().unwrap();
    socket.bind(&local.into()).unwrap();
    let remote: std::net::SocketAddr = addr.parse().unwrap();
    socket.connect(&remote.into()).unwrap();
    let stream: TcpStream = socket.into();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    LineClient { writer: stream.try_clone().unwrap(), reader: BufReader::new(stream) }
}

#[test]
fn one_caller_flooding_every_face_leaves_room_for_another() {
    // max_sessions 12: each token may hold 3.
    let config = format!("{TOKENS}[limits]\nmax_sessions = 12\n");
    let server = InProcess::start(&["--tcp", "127.0.0.1:0", "--http", "127.0.0.1:0"], Some(&config));
    let (tcp, addr) = (server.tcp.as_deref().unwrap(), server.http.as_deref().unwrap());
    // Alpha floods: three sessions, one per face, then every face refuses a fourth.
    assert_eq!(new_session(addr, &[ALPHA]).0, 200);
    start_a2a_task(addr, &[ALPHA], 30_000);
    mcp_session(addr, &[ALPHA]);
    let (status, body) = http(addr, "POST", "/session", &[ALPHA], "");
    assert_eq!(status, 429, "{body}");
    assert!(body["error"].as_str().unwrap().contains("max_sessions_per_caller"), "{body}");
    let (_, reply) = a2a(addr, &[ALPHA], "SendMessage", json!({ "message": sleeping_message(None, 10) }));
    assert_eq!(reply["error"]["code"], -32004, "{reply}");
    let (status, _, body) = http_with_headers(addr, "POST", "/mcp", &[ACCEPT, JSON, ALPHA], MCP_INIT);
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["data"]["limit"], "max_sessions_per_caller", "{body}");
    let mut client = LineClient::connect(tcp);
    client.send(&json!({ "type": "handshake/req", "id": "h", "agent_caps": ["multi_agent"], "auth_token": "alpha" }));
    let refused = client.reply("h");
    assert_eq!(refused["detail"]["limit"], "max_sessions_per_caller", "{refused}");
    // Beta is served on every face.
    assert_eq!(new_session(addr, &[BETA]).0, 200);
    start_a2a_task(addr, &[BETA], 10);
    let mut client = LineClient::connect(tcp);
    client.send(&json!({ "type": "handshake/req", "id": "h", "agent_caps": ["multi_agent"], "auth_token": "beta" }));
    assert_eq!(client.reply("h")["ok"], true);
    drop(server);

    // Without tokens a caller is its address.
    let server =
        InProcess::start(&["--tcp", "127.0.0.1:0", "--http", "127.0.0.1:0"], Some("[limits]\nmax_sessions = 8\n"));
    let tcp = server.tcp.as_deref().unwrap();
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut client = connect_from(tcp, "127.0.0.1");
        client.send(&json!({ "type": "handshake/req", "id": "h", "agent_caps": ["multi_agent"] }));
        assert_eq!(client.reply("h")["ok"], true);
        held.push(client);
    }
    let mut third = connect_from(tcp, "127.0.0.1");
    third.send(&json!({ "type": "handshake/req", "id": "h", "agent_caps": ["multi_agent"] }));
    let refusal = third.reply("h");
    assert_eq!(refusal["detail"]["limit"], "max_sessions_per_caller", "{refusal}");
    let mut other = connect_from(tcp, "127.0.0.2");
    other.send(&json!({ "type": "handshake/req", "id": "h", "agent_caps": ["multi_agent"] }));
    assert_eq!(other.reply("h")["ok"], true, "another address is another caller");
}

#[test]
fn a_registration_url_climbing_out_of_its_glob_or_setting_host_is_refused_naming_no_internal_type() {
    let config = "[mcp]\nallowed_urls = [\"http://127.0.0.1:9/mcp*\"]\n";
    let server = InProcess::start(&["--tcp", "127.0.0.1:0"], Some(config));
    let mut client = LineClient::connect(server.tcp.as_deref().unwrap());
    client.send(&json!({ "type": "handshake/req", "id": "h", "agent_caps": ["multi_agent", "mcp"] }));
    assert_eq!(client.reply("h")["ok"], true);
    let register = |client: &mut LineClient, id: &str, config: Value| {
        client
            .send(&json!({ "type": "mcp/server/register/req", "id": id, "name": format!("s{id}"), "config": config }));
        client.reply(id)
    };
    let climbed = register(&mut client, "1", json!({ "transport": "http", "url": "http://127.0.0.1:9/mcp/../../x" }));
    assert_eq!(climbed["ok"], false, "{climbed}");
    assert!(climbed["error"].as_str().unwrap().contains("allowed_urls"), "{climbed}");
    let host = register(
        &mut client,
        "2",
        json!({ "transport": "http", "url": "http://127.0.0.1:9/mcp", "headers": { "Host": "internal" } }),
    );
    assert_eq!(host["ok"], false, "{host}");
    assert!(host["error"].as_str().unwrap().contains("Host"), "{host}");
    // Allowed, but nothing listens there: the failure names no SDK type.
    let failed = register(&mut client, "3", json!({ "transport": "http", "url": "http://127.0.0.1:9/mcp" }));
    assert_eq!(failed["ok"], false, "{failed}");
    let error = failed["error"].as_str().unwrap();
    assert!(!error.contains("::") && !error.contains("rmcp"), "{error}");
}

#[test]
fn the_admin_api_refuses_an_answer_outside_a_questions_choices() {
    let server = InProcess::start(&["--tcp", "127.0.0.1:0", "--http", "127.0.0.1:0"], None);
    let (tcp, addr) = (server.tcp.as_deref().unwrap(), server.http.as_deref().unwrap());
    let mut client = LineClient::connect(tcp);
    client.send(&json!({ "type": "handshake/req", "id": "h", "agent_caps": ["multi_agent"] }));
    assert_eq!(client.reply("h")["ok"], true);
    client.send(&json!({ "type": "SUBAGENT_SPAWN_REQ", "id": "s", "agent": { "name": "asker", "model": "m" } }));
    let sub = client.reply("s")["subagent_id"].as_str().unwrap().to_owned();
    let script = json!([{ "ask_user": { "question": "Which?", "choices": ["a", "b"] } }]);
    let task = json!({ "name": "ask", "instruction": "ask", "metadata": { "script": script } });
    client.send(&json!({ "type": "SUBAGENT_DELEGATE_REQ", "id": "d", "subagent_id": sub, "task": task }));
    let request = loop {
        let line = client.next().expect("an event");
        if line["event"] == "input_requested" {
            break line["content"]["request_id"].as_str().unwrap().to_owned();
        }
    };
    let confirm = [("X-Subagentd-Confirm", "yes"), JSON];
    let path = format!("/admin/approvals/{request}");
    let (status, body) = http(addr, "POST", &path, &confirm, r#"{"answer": "zzz"}"#);
    assert_eq!((status, body["code"].as_str()), (400, Some("invalid_message")), "{body}");
    let (status, body) = http(addr, "POST", &path, &confirm, r#"{"answer": "b"}"#);
    assert_eq!((status, body["accepted"].as_bool()), (200, Some(true)), "{body}");
}

#[test]
fn a2a_reports_max_sessions_as_unsupported_operation() {
    let server = InProcess::start(&["--http", "127.0.0.1:0"], Some("[limits]\nmax_sessions = 1\n"));
    let addr = server.http.as_deref().unwrap();
    start_a2a_task(addr, &[], 30_000);
    let (_, reply) = a2a(addr, &[], "SendMessage", json!({ "message": sleeping_message(None, 10) }));
    assert_eq!(reply["error"]["code"], -32004, "{reply}");
    assert!(reply["error"]["message"].as_str().unwrap().contains("max_sessions"), "{reply}");
}
