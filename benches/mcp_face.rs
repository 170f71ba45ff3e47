//! `run_subagent` through the MCP front door against the same work through
//! the A2E HTTP transport, in one run (memory store, the scripted agent,
//! which completes at once):
//!
//! - `mcp_face/stdio`: one `tools/call` of `run_subagent` to `subagentd
//!   mcp` over its stdin, until its answer on stdout.
//! - `mcp_face/http`: the same `tools/call` as a `POST /mcp` on a
//!   kept-alive connection, its SSE answer read to the end.
//! - `mcp_face/a2e_send`: an A2E client on one HTTP session doing the same
//!   spawn, delegate and await over `POST /send` and `GET /stream`.
//!
//! Each call in one MCP session, so each is a root subagent of one session.
//! `cargo bench --bench mcp_face`.

#[path = "support/http_client.rs"]
mod http_client;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use http_client::{config_file, start_host, A2eSession, Connection};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

const INIT: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}"#;

fn call(n: u64) -> String {
    json!({ "jsonrpc": "2.0", "id": n, "method": "tools/call",
        "params": { "name": "run_subagent", "arguments": { "instruction": "go" } } })
    .to_string()
}

fn completed(answer: &Value) {
    assert_eq!(answer["result"]["structuredContent"]["status"], "COMPLETED", "{answer}");
}

/// `subagentd mcp`, its stdin and stdout.
struct McpStdio {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl Drop for McpStdio {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl McpStdio {
    fn start() -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_subagentd"))
            .args(["mcp", "--store", "memory", "--config"])
            .arg(config_file("mcp-stdio"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start subagentd mcp");
        let input = child.stdin.take().unwrap();
        let output = BufReader::new(child.stdout.take().unwrap());
        let mut stdio = Self { child, input, output };
        stdio.ask(INIT);
        stdio
    }

    fn ask(&mut self, line: &str) -> Value {
        writeln!(self.input, "{line}").unwrap();
        let mut answer = String::new();
        self.output.read_line(&mut answer).unwrap();
        serde_json::from_str(&answer).unwrap()
    }
}

fn mcp_face(c: &mut Criterion) {
    let host = start_host();
    let mut group = c.benchmark_group("mcp_face");
    group.throughput(Throughput::Elements(1));
    let mut n = 0;
    let mut stdio = McpStdio::start();
    group.bench_function("stdio", |b| {
        b.iter(|| {
            n += 1;
            completed(&stdio.ask(&call(n)));
        })
    });
    let mut connection = Connection::open(&host.addr);
    let session = {
        let reply = connection.post_with_headers("/mcp", "Accept: application/json, text/event-stream\r\n", INIT);
        reply.1
    };
    let headers = format!("Accept: application/json, text/event-stream\r\nMcp-Session-Id: {session}\r\n");
    group.bench_function("http", |b| {
        b.iter(|| {
            n += 1;
            let messages = connection.post_sse("/mcp", &headers, &call(n));
            completed(messages.last().expect("an answer"));
        })
    });
    let mut a2e = A2eSession::open(&host.addr);
    group.bench_function("a2e_send", |b| {
        b.iter(|| {
            n += 1;
            a2e.cycle(n);
        })
    });
    group.finish();
}

criterion_group!(benches, mcp_face);
criterion_main!(benches);
