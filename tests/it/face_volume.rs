//! Faces that never fill up, end to end with the real binary: 10,000 A2A
//! messages in one context and 10,000 MCP `run_subagent` calls in one
//! session all complete (finished tasks leave the tree), and the first
//! task is still found after the last (from the store).

use crate::e2e_support::{McpStdio, Server};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;

const MESSAGES: usize = 10_000;

/// One HTTP/1.1 connection kept alive for many requests (10,000 requests
/// on as many connections would leave as many sockets in TIME_WAIT).
struct KeepAlive {
    reader: BufReader<TcpStream>,
    addr: String,
}

impl KeepAlive {
    fn connect(addr: &str) -> Self {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_nodelay(true).unwrap();
        Self { reader: BufReader::new(stream), addr: addr.to_owned() }
    }

    /// `POST path` with a JSON body: the status and the JSON answer.
    fn post(&mut self, path: &str, body: &Value) -> (u16, Value) {
        let body = body.to_string();
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nA2A-Version: 1.0\r\n\
             Content-Length: {}\r\n\r\n{body}",
            self.addr,
            body.len()
        );
        self.reader.get_mut().write_all(request.as_bytes()).expect("write");
        let mut status_line = String::new();
        self.reader.read_line(&mut status_line).expect("status line");
        let status: u16 = status_line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).expect("a status");
        let mut length = 0;
        loop {
            let mut line = String::new();
            self.reader.read_line(&mut line).expect("header");
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().expect("a length");
                }
            }
        }
        let mut body = vec![0; length];
        self.reader.read_exact(&mut body).expect("body");
        (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
    }

    /// One A2A JSON-RPC call: its result (the test fails on an error).
    fn a2a(&mut self, method: &str, params: Value) -> Value {
        let (status, reply) =
            self.post("/a2a", &json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params }));
        assert_eq!(status, 200, "{reply}");
        reply.get("result").cloned().unwrap_or_else(|| panic!("{method} failed: {reply}"))
    }
}

fn message(n: usize, context: &str) -> Value {
    json!({
        "messageId": format!("m{n}"),
        "contextId": context,
        "role": "ROLE_USER",
        "parts": [{ "text": format!("message {n}") }],
        "metadata": { "script": [{ "return": { "answer": format!("answer {n}") } }] },
    })
}

/// The resident set of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .unwrap_or(0)
}

/// RSS read every 1000 tasks grows by less than 8 MiB from the 2,000th
/// task to the last: past the kept records (1000 at most), a finished task
/// holds nothing.
fn assert_flat(rss: &[u64]) {
    let (Some(early), Some(last)) = (rss.get(1), rss.last()) else { panic!("too few readings: {rss:?}") };
    assert!(last.saturating_sub(*early) < 8 << 10, "RSS grew from {early} to {last} KiB: {rss:?}");
}

#[test]
fn ten_thousand_a2a_messages_in_one_context_all_complete_and_the_first_is_found_after() {
    let dir = std::env::temp_dir().join(format!("subagentd-a2a-volume-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let store = format!("sqlite:{}", dir.join("store.db").display());
    // Fewer kept in memory than sent: the first is found in the store.
    let config = "[limits]\nretired_kept = 100\nmax_subagents_per_session = 64\n";
    let server = Server::start(&["--http", "127.0.0.1:0", "--store", store.as_str()], Some(config));
    let addr = server.http.clone().expect("an http address");
    let mut client = KeepAlive::connect(&addr);
    let context = "volume-context";
    let mut first = None;
    let mut rss = Vec::new();
    for n in 1..=MESSAGES {
        let sent = client.a2a("SendMessage", json!({ "message": message(n, context) }));
        let task = &sent["task"];
        assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "message {n}: {sent}");
        assert_eq!(task["artifacts"][0]["parts"][0]["text"], format!("answer {n}"), "message {n}");
        if n == 1 {
            first = task["id"].as_str().map(str::to_owned);
        }
        if n % 1000 == 0 {
            rss.push(rss_kib(server.pid()));
        }
    }
    eprintln!("a2a volume: RSS (KiB) every 1000 messages: {rss:?}");
    assert_flat(&rss);
    let first = first.expect("the first task's id");
    let found = client.a2a("GetTask", json!({ "id": first }));
    assert_eq!(found["status"]["state"], "TASK_STATE_COMPLETED", "{found}");
    assert_eq!(found["artifacts"][0]["parts"][0]["text"], "answer 1");
    assert_eq!(found["history"][0]["parts"][0]["text"], "message 1", "its message is kept with it");
    // The context's page of tasks is the newest, each as it ended.
    let listed = client.a2a("ListTasks", json!({ "contextId": context, "pageSize": 10 }));
    assert_eq!(listed["tasks"].as_array().map(Vec::len), Some(10), "{listed}");
    assert!(listed["tasks"].as_array().unwrap().iter().all(|t| t["status"]["state"] == "TASK_STATE_COMPLETED"));
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ten_thousand_mcp_run_subagent_calls_in_one_stdio_session_all_complete() {
    let mut mcp = McpStdio::start(None);
    mcp.send(json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "t", "version": "1" } } }));
    assert!(mcp.answer(0)["result"].is_object());
    mcp.send(json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
    let mut last = String::new();
    let mut rss = Vec::new();
    let pid = mcp.child.id();
    for n in 1..=MESSAGES as u64 {
        mcp.send(json!({ "jsonrpc": "2.0", "id": n, "method": "tools/call", "params": { "name": "run_subagent",
            "arguments": { "instruction": format!("call {n}"),
                "task_metadata": { "script": [{ "return": { "n": n } }] } } } }));
        let reply = mcp.answer(n);
        let result = &reply["result"];
        assert_eq!(result["isError"], false, "call {n}: {reply}");
        assert_eq!(result["structuredContent"]["status"], "COMPLETED", "call {n}: {reply}");
        assert_eq!(result["structuredContent"]["result"]["n"], n);
        last = result["structuredContent"]["subagent_id"].as_str().unwrap_or_default().to_owned();
        if n % 1000 == 0 {
            rss.push(rss_kib(pid));
        }
    }
    eprintln!("mcp volume: RSS (KiB) every 1000 calls: {rss:?}");
    assert_flat(&rss);
    // The last call's subagent is still answered, as it ended.
    let id = MESSAGES as u64 + 1;
    mcp.send(json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": { "name": "await_subagent",
        "arguments": { "subagent_id": last } } }));
    let awaited = mcp.answer(id);
    assert_eq!(awaited["result"]["structuredContent"]["status"], "COMPLETED", "{awaited}");
    assert_eq!(awaited["result"]["structuredContent"]["result"]["n"], MESSAGES as u64);
    // The list holds the kept records (the default 1000), not 10,000.
    mcp.send(json!({ "jsonrpc": "2.0", "id": id + 1, "method": "tools/call", "params": { "name": "list_subagents",
        "arguments": {} } }));
    let listed = mcp.answer(id + 1);
    let rows = listed["result"]["structuredContent"]["subagents"].as_array().map_or(0, Vec::len);
    assert!((1..=1000).contains(&rows), "{rows} rows");
    mcp.close();
}
