//! The real binary exports its spans over OTLP/HTTP when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set: a stand-in collector on loopback
//! receives `POST /v1/traces` (protobuf) holding the tree's `invoke_agent`
//! spans, flushed at SIGTERM at the latest. (The span tree's shape is
//! checked in-process by `tests/traces.rs`.)

use crate::e2e_support::*;
use serde_json::json;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::Duration;

/// One request the stand-in collector received.
struct Export {
    path: String,
    content_type: String,
    body: Vec<u8>,
}

/// Accepts OTLP/HTTP posts on loopback, answering each 200.
fn collector() -> (String, mpsc::Receiver<Export>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().unwrap().to_string();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream);
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).is_err() {
                continue;
            }
            let path = request_line.split_whitespace().nth(1).unwrap_or("").to_owned();
            let (mut length, mut content_type) = (0, String::new());
            loop {
                let mut header = String::new();
                if reader.read_line(&mut header).unwrap_or(0) == 0 || header.trim().is_empty() {
                    break;
                }
                let (name, value) = header.split_once(':').unwrap_or((&header, ""));
                match name.trim().to_ascii_lowercase().as_str() {
                    "content-length" => length = value.trim().parse().unwrap_or(0),
                    "content-type" => content_type = value.trim().to_owned(),
                    _ => {}
                }
            }
            let mut body = vec![0; length];
            if reader.read_exact(&mut body).is_err() {
                continue;
            }
            let _ = reader.get_mut().write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            let _ = tx.send(Export { path, content_type, body });
        }
    });
    (addr, rx)
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|window| window == needle.as_bytes())
}

#[test]
fn the_binary_exports_the_tree_spans_to_the_otlp_endpoint() {
    let (addr, exports) = collector();
    let prelude = format!("export OTEL_EXPORTER_OTLP_ENDPOINT=http://{addr} OTEL_SERVICE_NAME=subagentd-e2e");
    let mut server = Server::start_with(Some(&prelude), &["--tcp", "127.0.0.1:0"], None);
    let mut client = LineClient::connect(server.tcp.as_deref().unwrap());
    client.send(&json!({ "type": "handshake/req", "id": "h", "agent_id": "a", "agent_caps": ["multi_agent"], "auth_token": "" }));
    assert_eq!(client.reply("h")["ok"], true);
    client.send(&json!({ "type": "SUBAGENT_SPAWN_REQ", "id": "s", "agent": { "name": "planner", "model": "m" } }));
    let planner = client.reply("s")["subagent_id"].as_str().unwrap().to_owned();
    let kid = json!({ "agent": { "name": "reader", "model": "m" }, "task": { "name": "k", "instruction": "k" } });
    let task = json!({ "name": "t", "instruction": "i", "metadata": { "script": [{ "spawn": kid }, { "await_children": {} }] } });
    client.send(&json!({ "type": "SUBAGENT_DELEGATE_REQ", "id": "d", "subagent_id": planner, "task": task }));
    assert_eq!(client.reply("d")["accepted"], true);
    client.send(&json!({ "type": "SUBAGENT_AWAIT_REQ", "id": "a", "subagent_id": planner }));
    assert_eq!(client.reply("a")["status"], "COMPLETED");
    assert!(server.terminate().success(), "SIGTERM exits 0");

    let mut received = Vec::new();
    while let Ok(export) = exports.recv_timeout(Duration::from_secs(5)) {
        assert_eq!(export.path, "/v1/traces");
        assert_eq!(export.content_type, "application/x-protobuf");
        received.extend(export.body);
        if contains(&received, "invoke_agent planner") && contains(&received, "invoke_agent reader") {
            break;
        }
    }
    for expected in ["invoke_agent planner", "invoke_agent reader", "gen_ai.agent.id", &planner, "subagentd-e2e"] {
        assert!(contains(&received, expected), "the export holds {expected}");
    }
}
