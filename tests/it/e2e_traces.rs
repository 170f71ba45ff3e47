//! The real binary exports its spans over OTLP/HTTP when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set: a stand-in collector on loopback
//! receives `POST /v1/traces` (protobuf) holding the tree's `invoke_agent`
//! spans, flushed at SIGTERM at the latest. A three-level tree of
//! fake-model subagents arrives, decoded from that protobuf, as one trace
//! nested like the tree with the GenAI attributes a trace tool reads. (More
//! shapes are checked in-process by `tests/traces.rs`.)

use crate::e2e_support::*;
use crate::fake_openai::{answer, call_tools, system_prompt, tool_outputs, FakeServer, Reply};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue};
use opentelemetry_proto::tonic::trace::v1::{span::SpanKind, status::StatusCode, Span};
use prost::Message;
use serde_json::{json, Value};
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

/// The model the fake server says answered: a dated version of the one
/// asked for, as hosted APIs do.
const ANSWERED_BY: &str = "fake-model-2026-01-01";

/// The boss spawns a lead and the lead a leaf, each awaiting its child
/// (two tool calls each); the leaf answers. Every reply names its model.
fn three_levels() -> FakeServer {
    FakeServer::start(|body, _| {
        let name = system_prompt(body).trim_start_matches("AGENT:").split_whitespace().next().unwrap_or("").to_owned();
        let child = match name.as_str() {
            "boss" => Some("lead"),
            "lead" => Some("leaf"),
            _ => None,
        };
        let outputs = tool_outputs(body);
        let reply = match (child, outputs.len()) {
            (Some(child), 0) => {
                let spawn = json!({ "name": child, "instruction": "go", "system_prompt": format!("AGENT:{child}") });
                call_tools(None, &[("spawn_subagent", spawn)])
            }
            (Some(_), 1) => {
                call_tools(None, &[("await_subagent", json!({ "subagent_id": outputs[0]["subagent_id"] }))])
            }
            _ => answer(&format!("done by {name}")),
        };
        match reply {
            Reply::Json(mut body) => {
                body["model"] = json!(ANSWERED_BY);
                Reply::Json(body)
            }
            other => other,
        }
    })
}

/// A span attribute's value, if the span has it.
fn attribute<'a>(span: &'a Span, key: &str) -> Option<&'a any_value::Value> {
    span.attributes.iter().find(|kv| kv.key == key)?.value.as_ref()?.value.as_ref()
}

fn text<'a>(span: &'a Span, key: &str) -> Option<&'a str> {
    match attribute(span, key)? {
        any_value::Value::StringValue(text) => Some(text),
        _ => None,
    }
}

fn int(span: &Span, key: &str) -> Option<i64> {
    match attribute(span, key)? {
        any_value::Value::IntValue(value) => Some(*value),
        _ => None,
    }
}

/// A `string[]` attribute (the OTLP array of strings).
fn strings(span: &Span, key: &str) -> Option<Vec<String>> {
    let any_value::Value::ArrayValue(array) = attribute(span, key)? else { return None };
    let text = |value: &AnyValue| match &value.value {
        Some(any_value::Value::StringValue(text)) => Some(text.clone()),
        _ => None,
    };
    array.values.iter().map(text).collect()
}

#[test]
fn a_three_level_tree_with_tool_calls_arrives_over_otlp_as_one_nested_trace() {
    let model = three_levels();
    let (addr, exports) = collector();
    let prelude = format!("export OTEL_EXPORTER_OTLP_ENDPOINT=http://{addr}");
    let config = format!("[[routes]]\nmodel = \"fake-*\"\nadapter = \"openai\"\nbase_url = \"{}\"\n", model.base_url);
    let mut server = Server::start_with(Some(&prelude), &["--tcp", "127.0.0.1:0"], Some(&config));
    let mut client = LineClient::connect(server.tcp.as_deref().unwrap());
    client.send(&json!({ "type": "handshake/req", "id": "h", "agent_id": "a", "agent_caps": ["multi_agent"], "auth_token": "" }));
    assert_eq!(client.reply("h")["ok"], true);
    let boss = json!({ "name": "boss", "model": "fake-model", "system_prompt": "AGENT:boss", "capabilities": ["multi_agent"] });
    client.send(&json!({ "type": "SUBAGENT_SPAWN_REQ", "id": "s", "agent": boss }));
    let boss_id = client.reply("s")["subagent_id"].as_str().unwrap().to_owned();
    let task = json!({ "name": "plan", "instruction": "split the work" });
    client.send(&json!({ "type": "SUBAGENT_DELEGATE_REQ", "id": "d", "subagent_id": boss_id, "task": task }));
    assert_eq!(client.reply("d")["accepted"], true);
    client.send(&json!({ "type": "SUBAGENT_AWAIT_REQ", "id": "a", "subagent_id": boss_id }));
    let done: Value = client.reply("a");
    assert_eq!(done["status"], "COMPLETED", "{done}");
    assert!(server.terminate().success(), "SIGTERM exits 0");

    // Every span the binary exported, decoded.
    let mut spans: Vec<Span> = Vec::new();
    let invocations = |spans: &[Span]| spans.iter().filter(|s| s.name.starts_with("invoke_agent ")).count();
    while invocations(&spans) < 3 {
        let export = exports.recv_timeout(Duration::from_secs(10)).expect("the three invoke_agent spans arrive");
        let request = ExportTraceServiceRequest::decode(export.body.as_slice()).expect("OTLP protobuf");
        let decoded = request.resource_spans.into_iter().flat_map(|r| r.scope_spans).flat_map(|s| s.spans);
        spans.extend(decoded);
    }

    let trace = &spans[0].trace_id;
    assert!(spans.iter().all(|span| &span.trace_id == trace), "the whole tree is one trace");
    let agent = |name: &str| -> &Span {
        spans.iter().find(|s| s.name == format!("invoke_agent {name}")).unwrap_or_else(|| panic!("{name}'s span"))
    };
    let (boss, lead, leaf) = (agent("boss"), agent("lead"), agent("leaf"));
    assert!(boss.parent_span_id.is_empty(), "the client's task is the trace's root");
    assert_eq!(lead.parent_span_id, boss.span_id, "lead's invoke_agent is under boss's");
    assert_eq!(leaf.parent_span_id, lead.span_id, "leaf's invoke_agent is under lead's");
    assert_eq!(text(boss, "gen_ai.agent.id"), Some(boss_id.as_str()));
    for (span, name) in [(boss, "boss"), (lead, "lead"), (leaf, "leaf")] {
        assert_eq!(text(span, "gen_ai.operation.name"), Some("invoke_agent"));
        assert_eq!(text(span, "gen_ai.agent.name"), Some(name));
        assert!(text(span, "gen_ai.agent.id").is_some_and(|id| id.starts_with("sub_")), "{name}'s agent id");
    }

    let under = |parent: &Span, operation: &str| -> Vec<&Span> {
        let mut found: Vec<&Span> = spans
            .iter()
            .filter(|s| s.parent_span_id == parent.span_id && text(s, "gen_ai.operation.name") == Some(operation))
            .collect();
        found.sort_by_key(|s| s.start_time_unix_nano);
        found
    };
    for (parent, calls) in [(boss, 3), (lead, 3), (leaf, 1)] {
        assert_eq!(int(parent, "gen_ai.usage.input_tokens"), Some(10 * calls), "{}'s own tokens", parent.name);
        assert_eq!(int(parent, "gen_ai.usage.output_tokens"), Some(5 * calls));
        let chats = under(parent, "chat");
        assert_eq!(chats.len() as i64, calls, "{}'s model calls", parent.name);
        for (index, chat) in chats.iter().enumerate() {
            assert_eq!(chat.name, "chat fake-model");
            assert_eq!(chat.kind, SpanKind::Client as i32);
            assert_eq!(text(chat, "gen_ai.provider.name"), Some("openai"));
            assert_eq!(text(chat, "gen_ai.request.model"), Some("fake-model"));
            assert_eq!(text(chat, "gen_ai.response.model"), Some(ANSWERED_BY));
            assert_eq!(int(chat, "gen_ai.usage.input_tokens"), Some(10), "token counts are ints");
            assert_eq!(int(chat, "gen_ai.usage.output_tokens"), Some(5));
            let last = index as i64 + 1 == calls;
            let reason = if last { "stop" } else { "tool_calls" };
            assert_eq!(strings(chat, "gen_ai.response.finish_reasons"), Some(vec![reason.to_owned()]));
        }
    }
    for parent in [boss, lead] {
        let tools = under(parent, "execute_tool");
        let names: Vec<&str> = tools.iter().filter_map(|s| text(s, "gen_ai.tool.name")).collect();
        assert_eq!(names, ["spawn_subagent", "await_subagent"], "{}'s tool calls, in order", parent.name);
        for tool in tools {
            assert_eq!(tool.name, format!("execute_tool {}", text(tool, "gen_ai.tool.name").unwrap()));
            assert_eq!(text(tool, "gen_ai.tool.type"), Some("function"));
            assert!(text(tool, "gen_ai.tool.call.id").is_some_and(|id| id.starts_with("call_")));
            assert_ne!(tool.status.as_ref().map(|s| s.code), Some(StatusCode::Error as i32));
        }
    }
    assert!(under(leaf, "execute_tool").is_empty(), "the leaf only answered");
}
