//! The MCP front door at the wire, on the real binary: streamable HTTP's
//! sessions, status codes and headers, SSE streams resumed with
//! `Last-Event-ID`, tokens and origins, malformed input; `subagentd mcp`
//! over stdio; approvals put to a client that elicits, and left pending
//! (an MCP task `input_required`) for one that does not.

use crate::common::eventually_blocking;
use crate::e2e_support::{http_with_headers, McpStdio, Server};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
const ACCEPT: (&str, &str) = ("Accept", "application/json, text/event-stream");
const JSON: (&str, &str) = ("Content-Type", "application/json");

fn call(id: u64, tool: &str, arguments: Value) -> String {
    json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": { "name": tool, "arguments": arguments } })
        .to_string()
}

fn request(id: u64, method: &str, params: Value) -> String {
    json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }).to_string()
}

/// `POST /mcp` with the usual headers and `more`.
fn post(addr: &str, session: Option<&str>, more: &[(&str, &str)], body: &str) -> (u16, HashMap<String, String>, Value) {
    let mut headers = vec![ACCEPT, JSON];
    if let Some(session) = session {
        headers.push(("Mcp-Session-Id", session));
    }
    headers.extend_from_slice(more);
    http_with_headers(addr, "POST", "/mcp", &headers, body)
}

/// A new session's id.
fn initialize(addr: &str, more: &[(&str, &str)]) -> String {
    let (status, headers, body) = post(addr, None, more, INIT);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"]["protocolVersion"], "2025-11-25", "{body}");
    let id = headers.get("mcp-session-id").expect("Mcp-Session-Id").clone();
    let (status, _, _) = post(addr, Some(&id), more, r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    assert_eq!(status, 202);
    id
}

/// An SSE response read event by event: `(id, message)`.
struct Events {
    reader: BufReader<TcpStream>,
    status: u16,
    chunked: bool,
    buffer: String,
}

impl Events {
    fn open(addr: &str, method: &str, headers: &[(&str, &str)], body: &str) -> Self {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut head = format!("{method} /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\n", body.len());
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        stream.write_all(format!("{head}\r\n{body}").as_bytes()).unwrap();
        let mut reader = BufReader::new(stream);
        let (mut status, mut chunked) = (0, false);
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some(rest) = line.strip_prefix("HTTP/1.1 ") {
                status = rest[..3].parse().unwrap();
            } else if line.to_ascii_lowercase().starts_with("transfer-encoding: chunked") {
                chunked = true;
            }
        }
        Self { reader, status, chunked, buffer: String::new() }
    }

    /// The next event with data (`None` at the end); priming events
    /// (an id and no data) come back with `Value::Null`.
    fn next(&mut self) -> Option<(String, Value)> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let event: String = self.buffer.drain(..end + 2).collect();
                let id = event.lines().find_map(|line| line.strip_prefix("id: ")).map(str::to_owned);
                let data = event.lines().find_map(|line| line.strip_prefix("data:")).map(str::trim);
                match (id, data) {
                    (Some(id), Some("")) => return Some((id, Value::Null)),
                    (Some(id), Some(data)) => return Some((id, serde_json::from_str(data).expect("JSON data"))),
                    _ => continue, // a comment (keepalive)
                }
            }
            if !self.fill() {
                return None;
            }
        }
    }

    fn fill(&mut self) -> bool {
        if !self.chunked {
            let mut line = String::new();
            let read = self.reader.read_line(&mut line).unwrap_or(0);
            self.buffer.push_str(&line);
            return read > 0;
        }
        let mut size = String::new();
        if self.reader.read_line(&mut size).unwrap_or(0) == 0 {
            return false;
        }
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 {
            return false;
        }
        let mut chunk = vec![0; size + 2];
        self.reader.read_exact(&mut chunk).unwrap();
        self.buffer.push_str(std::str::from_utf8(&chunk[..size]).unwrap());
        true
    }
}

fn server() -> (Server, String) {
    let server = Server::start(&["--http", "127.0.0.1:0"], None);
    let addr = server.http.clone().unwrap();
    (server, addr)
}

#[test]
fn sessions_versions_and_every_refusal_have_their_status() {
    let (_server, addr) = server();
    let (status, headers, body) = post(&addr, None, &[], INIT);
    assert_eq!(status, 200);
    let session = headers["mcp-session-id"].clone();
    assert!(session.len() == 32 && session.bytes().all(|b| b.is_ascii_hexdigit()), "{session}");
    let capabilities = &body["result"]["capabilities"];
    assert_eq!(capabilities["resources"]["subscribe"], true, "{body}");
    assert!(capabilities["tasks"]["requests"]["tools"]["call"].is_object(), "{body}");
    assert_eq!(body["result"]["serverInfo"]["name"], "subagentd");
    // An older version is spoken; an unknown one is answered with ours.
    let older = INIT.replace("2025-11-25", "2025-03-26");
    assert_eq!(post(&addr, None, &[], &older).2["result"]["protocolVersion"], "2025-03-26");
    let unknown = INIT.replace("2025-11-25", "1999-01-01");
    assert_eq!(post(&addr, None, &[], &unknown).2["result"]["protocolVersion"], "2025-11-25");

    let ping = request(2, "ping", json!({}));
    assert_eq!(post(&addr, Some(&session), &[], &ping).2, json!({ "jsonrpc": "2.0", "id": 2, "result": {} }));
    let (status, _, body) = post(&addr, None, &[], &ping);
    assert_eq!((status, body["error"]["code"].as_i64()), (400, Some(-32600)), "no session: {body}");
    let (status, _, _) = post(&addr, Some("0123456789abcdef0123456789abcdef"), &[], &ping);
    assert_eq!(status, 404, "an unknown session");
    let (status, _, _) = post(&addr, Some(&session), &[("MCP-Protocol-Version", "1999-01-01")], &ping);
    assert_eq!(status, 400, "an unsupported version");
    let (status, _, _) = post(&addr, Some(&session), &[("MCP-Protocol-Version", "2025-11-25")], &ping);
    assert_eq!(status, 200);
    let answer = post(&addr, Some(&session), &[], &request(3, "prompts/list", json!({}))).2;
    assert_eq!(answer["error"]["code"], -32601, "{answer}");
    let answer = post(&addr, Some(&session), &[], &request(4, "tools/call", json!({ "name": "rm_rf" }))).2;
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    let answer = post(&addr, Some(&session), &[], &request(5, "initialize", json!({}))).2;
    assert_eq!(answer["error"]["code"], -32600, "initialized twice: {answer}");

    // Malformed input: a clear error, and the session goes on.
    for (body, code) in [("{not json", -32700), ("[]", -32600), (r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#, -32600)]
    {
        let (status, _, answer) = post(&addr, Some(&session), &[], body);
        assert_eq!((status, answer["error"]["code"].as_i64()), (400, Some(code)), "{body}: {answer}");
    }
    let (status, _, _) = http_with_headers(
        &addr,
        "POST",
        "/mcp",
        &[ACCEPT, ("Content-Type", "text/plain"), ("Mcp-Session-Id", &session)],
        &ping,
    );
    assert_eq!(status, 415);
    let (status, _, _) =
        http_with_headers(&addr, "GET", "/mcp", &[("Accept", "application/json"), ("Mcp-Session-Id", &session)], "");
    assert_eq!(status, 406);
    let big = format!(r#"{{"jsonrpc":"2.0","id":9,"method":"ping","params":{{"pad":"{}"}}}}"#, "x".repeat(2 << 20));
    assert_eq!(post(&addr, Some(&session), &[], &big).0, 413, "a body past max_line_bytes");
    assert_eq!(post(&addr, Some(&session), &[], &ping).0, 200, "still served");

    // DELETE ends it.
    let (status, _, _) = http_with_headers(&addr, "DELETE", "/mcp", &[("Mcp-Session-Id", &session)], "");
    assert_eq!(status, 200);
    assert_eq!(post(&addr, Some(&session), &[], &ping).0, 404, "ended");
}

#[test]
fn a_call_streams_its_progress_and_answer_and_a_dropped_stream_is_resumed() {
    let (_server, addr) = server();
    let session = initialize(&addr, &[]);
    let script = json!([{ "progress": "one" }, { "sleep_ms": 300 }, { "progress": "two" }, { "sleep_ms": 300 }, { "return": { "answer": 7 } }]);
    let body = json!({ "jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "run_subagent", "_meta": { "progressToken": "t" },
        "arguments": { "instruction": "count", "task_metadata": { "script": script } } } })
    .to_string();
    let mut events = Events::open(&addr, "POST", &[ACCEPT, JSON, ("Mcp-Session-Id", &session)], &body);
    assert_eq!(events.status, 200);
    let (priming, data) = events.next().expect("a priming event");
    assert!(priming.ends_with("-0") && data.is_null(), "{priming} {data}");
    let (first, progress) = events.next().expect("the first progress");
    assert_eq!(progress["method"], "notifications/progress", "{progress}");
    assert_eq!(progress["params"]["progressToken"], "t");
    // The connection drops; the call goes on, and a GET resumes its stream
    // after the last event seen: nothing lost, nothing twice.
    drop(events);
    let mut resumed = Events::open(
        &addr,
        "GET",
        &[("Accept", "text/event-stream"), ("Mcp-Session-Id", &session), ("Last-Event-ID", &first)],
        "",
    );
    assert_eq!(resumed.status, 200);
    let mut seen = vec![progress];
    let answer = loop {
        let (id, message) = resumed.next().expect("the rest of the stream");
        assert_ne!(id, first, "an event sent twice");
        if message.get("id") == Some(&json!(7)) {
            break message;
        }
        seen.push(message);
    };
    let numbers: Vec<u64> = seen.iter().map(|m| m["params"]["progress"].as_u64().unwrap()).collect();
    assert_eq!(numbers, (1..=numbers.len() as u64).collect::<Vec<_>>(), "progress counts up with none lost");
    let texts: Vec<&str> = seen.iter().filter_map(|m| m["params"]["message"].as_str()).collect();
    assert!(texts.iter().any(|t| t.ends_with("progress: two")), "{texts:?}");
    let outcome = &answer["result"]["structuredContent"];
    assert_eq!(
        (outcome["status"].as_str(), outcome["result"]["answer"].as_u64()),
        (Some("COMPLETED"), Some(7)),
        "{answer}"
    );
    assert!(resumed.next().is_none(), "the stream ends with its answer");
}

#[test]
fn tokens_and_origins_guard_every_method() {
    let config = "[auth]\ntokens = [\"alpha\", \"beta\"]\n";
    let server = Server::start(&["--http", "127.0.0.1:0"], Some(config));
    let addr = server.http.clone().unwrap();
    let (status, headers, _) = post(&addr, None, &[], INIT);
    assert_eq!(status, 401);
    assert_eq!(headers.get("www-authenticate").map(String::as_str), Some("Bearer"));
    let alpha = [("Authorization", "Bearer alpha")];
    let beta = [("Authorization", "Bearer beta")];
    let session = initialize(&addr, &alpha);
    let ping = request(2, "ping", json!({}));
    assert_eq!(post(&addr, Some(&session), &alpha, &ping).0, 200);
    assert_eq!(post(&addr, Some(&session), &beta, &ping).0, 404, "another token's session");
    assert_eq!(post(&addr, Some(&session), &[("Authorization", "Bearer nope")], &ping).0, 401);
    let evil = [("Authorization", "Bearer alpha"), ("Origin", "https://evil.example")];
    assert_eq!(post(&addr, Some(&session), &evil, &ping).0, 403, "DNS rebinding");
    let local = [("Authorization", "Bearer alpha"), ("Origin", "http://localhost:5173")];
    assert_eq!(post(&addr, Some(&session), &local, &ping).0, 200);
}

#[test]
fn without_elicitation_an_approval_waits_and_the_task_says_input_required() {
    let config = "[[tools.approval]]\ntool = \"deploy\"\nrequire = \"always\"\n";
    let server = Server::start(&["--http", "127.0.0.1:0"], Some(config));
    let addr = server.http.clone().unwrap();
    let session = initialize(&addr, &[]);
    let script = json!([{ "call_tool": { "tool": "deploy", "arguments": { "env": "prod" } } }, { "return": { "deployed": true } }]);
    let body = json!({ "jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "run_subagent", "task": { "ttl": 60000 },
        "arguments": { "instruction": "deploy", "task_metadata": { "script": script } } } })
    .to_string();
    let mut events = Events::open(&addr, "POST", &[ACCEPT, JSON, ("Mcp-Session-Id", &session)], &body);
    let created = loop {
        let (_, message) = events.next().expect("the task");
        if !message.is_null() {
            break message;
        }
    };
    let task = &created["result"]["task"];
    assert!(task["status"] == "working" || task["status"] == "input_required", "{created}");
    let task_id = task["taskId"].as_str().unwrap().to_owned();
    let get = request(4, "tasks/get", json!({ "taskId": task_id }));
    eventually_blocking("the task is input_required", Duration::from_secs(10), || {
        let got = post(&addr, Some(&session), &[], &get).2;
        (got["result"]["status"] == "input_required").then_some(()).ok_or(got)
    });
    // Another client (the operator) answers it.
    let (_, _, pending) = http_with_headers(&addr, "GET", "/admin/approvals", &[], "");
    let approval = pending["pending"][0]["id"].as_str().expect("a pending approval").to_owned();
    let decision = r#"{"decision":"approve"}"#;
    let (status, _, _) = http_with_headers(
        &addr,
        "POST",
        &format!("/admin/approvals/{approval}"),
        &[JSON, ("X-Subagentd-Confirm", "yes")],
        decision,
    );
    assert_eq!(status, 200);
    let result = request(5, "tasks/result", json!({ "taskId": task_id }));
    let mut answer = Events::open(&addr, "POST", &[ACCEPT, JSON, ("Mcp-Session-Id", &session)], &result);
    let done = loop {
        let (_, message) = answer.next().expect("the result");
        if message.get("id") == Some(&json!(5)) {
            break message;
        }
    };
    assert_eq!(done["result"]["structuredContent"]["status"], "COMPLETED", "{done}");
    assert_eq!(done["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], task_id.as_str());
    let listed = post(&addr, Some(&session), &[], &request(6, "tasks/list", json!({}))).2;
    assert_eq!(listed["result"]["tasks"][0]["status"], "completed", "{listed}");
    let again = post(&addr, Some(&session), &[], &request(7, "tasks/cancel", json!({ "taskId": task_id }))).2;
    assert_eq!(again["error"]["code"], -32602, "an ended task: {again}");
    let missing = post(&addr, Some(&session), &[], &request(8, "tasks/get", json!({ "taskId": "nope" }))).2;
    assert_eq!(missing["error"]["code"], -32602, "{missing}");
}

#[test]
fn over_stdio_bad_lines_are_answered_and_an_approval_is_elicited() {
    let config = "[[tools.approval]]\ntool = \"deploy\"\nrequire = \"always\"\n";
    let mut mcp = McpStdio::start(Some(config));
    mcp.send(request(0, "tools/list", json!({})));
    assert_eq!(mcp.next()["error"]["code"], -32600, "before initialize");
    mcp.send("{oops");
    let parse = mcp.next();
    assert_eq!((parse["error"]["code"].as_i64(), &parse["id"]), (Some(-32700), &Value::Null));
    let init = INIT.replace(r#""capabilities":{}"#, r#""capabilities":{"elicitation":{}}"#);
    mcp.send(init);
    assert_eq!(mcp.next()["result"]["protocolVersion"], "2025-11-25");
    mcp.send(call(2, "run_subagent", json!({})));
    let invalid = mcp.next();
    assert_eq!(invalid["result"]["isError"], true, "{invalid}");
    assert!(invalid["result"]["content"][0]["text"].as_str().unwrap().contains("instruction"), "{invalid}");

    let script =
        json!([{ "call_tool": { "tool": "deploy", "arguments": { "env": "prod" } } }, { "return": { "done": true } }]);
    mcp.send(call(3, "run_subagent", json!({ "instruction": "deploy", "task_metadata": { "script": script } })));
    let asked = mcp.next();
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    assert_eq!(asked["params"]["mode"], "form");
    assert!(asked["params"]["message"].as_str().unwrap().contains("deploy"), "{asked}");
    assert_eq!(asked["params"]["requestedSchema"]["properties"]["decision"]["enum"], json!(["approve", "deny"]));
    let answer = json!({ "jsonrpc": "2.0", "id": asked["id"], "result": { "action": "accept", "content": { "decision": "deny", "note": "not today" } } });
    mcp.send(answer);
    let done = mcp.next();
    let outcome = &done["result"]["structuredContent"];
    assert_eq!(outcome["status"], "COMPLETED", "{done}");
    assert_eq!(outcome["result"]["calls"][0]["made"], false, "denied: {done}");
    // EOF: the session ends and the process exits.
    let status = mcp.close();
    assert!(status.success(), "{status}");
}
