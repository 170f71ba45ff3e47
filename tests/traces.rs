//! Traces shaped like the agent tree: with the span exporter installed (an
//! in-memory one here; OTLP in the binary), a nested scripted tree and a
//! tree of fake-model subagents each come out as one trace whose
//! `invoke_agent` spans mirror the subagent tree, with `chat` and
//! `execute_tool` spans under the task that made them, the GenAI
//! attributes, and message content only when the config turns it on.
//!
//! Its own test binary: the exporter is the process-wide subscriber.

// The fake model server waits with the integration tests' `eventually`.
#[path = "it/common/mod.rs"]
mod common;
#[path = "it/fake_openai/mod.rs"]
mod fake_openai;

use common::TreeOps;
use fake_openai::*;
use opentelemetry::trace::SpanId;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use subagent_host::adapter::openai::{OpenAiAdapter, OpenAiConfig};
use subagent_host::protocol::wire::*;
use subagent_host::store::{SessionLog, StoreHandle};
use subagent_host::AdapterRouter;
use subagent_host::NullSink;
use subagent_host::{Host, HostConfig, SubagentId, Tree};
use tokio::sync::Mutex;

const GUARD: Duration = Duration::from_secs(30);

/// The in-memory exporter behind the process-wide subscriber.
fn exporter() -> &'static InMemorySpanExporter {
    static EXPORTER: OnceLock<InMemorySpanExporter> = OnceLock::new();
    EXPORTER.get_or_init(|| {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
        subagent_host::server::telemetry::install(&provider).expect("install the exporter");
        // Kept for the life of the process.
        std::mem::forget(provider);
        exporter
    })
}

// The tests share one exporter: one at a time.
static SERIAL: Mutex<()> = Mutex::const_new(());

fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| kv.value.to_string())
}

/// The finished spans of session `session` (its `invoke_agent` spans and
/// everything under them), once there are `invocations` of those.
async fn spans_of(session: &str, invocations: usize) -> Vec<SpanData> {
    let deadline = Instant::now() + GUARD;
    loop {
        let spans = exporter().get_finished_spans().expect("spans");
        let ours: Vec<&SpanData> =
            spans.iter().filter(|s| attribute(s, "gen_ai.conversation.id").as_deref() == Some(session)).collect();
        if ours.len() >= invocations {
            let traces: Vec<_> = ours.iter().map(|s| s.span_context.trace_id()).collect();
            return spans.into_iter().filter(|s| traces.contains(&s.span_context.trace_id())).collect();
        }
        assert!(Instant::now() < deadline, "{} of {invocations} invoke_agent spans of {session}", ours.len());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Checks that the `invoke_agent` spans of `spans` are the subagent tree
/// `tree` lists: one per subagent (one task each), named after it, child of
/// its parent subagent's span; returns each subagent's span id.
fn assert_mirrors(spans: &[SpanData], tree: &[SubagentInfo]) -> HashMap<SubagentId, SpanId> {
    let invocations: Vec<&SpanData> =
        spans.iter().filter(|s| attribute(s, "gen_ai.operation.name").as_deref() == Some("invoke_agent")).collect();
    assert_eq!(invocations.len(), tree.len(), "one invoke_agent span per task");
    let mut span_of = HashMap::new();
    for row in tree {
        let id = row.subagent_id.to_string();
        let span = invocations
            .iter()
            .find(|s| attribute(s, "gen_ai.agent.id").as_deref() == Some(id.as_str()))
            .unwrap_or_else(|| panic!("no invoke_agent span for {id}"));
        assert_eq!(span.name, format!("invoke_agent {}", row.name));
        assert_eq!(attribute(span, "gen_ai.agent.name").as_deref(), Some(&*row.name));
        assert_eq!(attribute(span, "gen_ai.request.model").as_deref(), Some(row.config.model.as_str()));
        span_of.insert(row.subagent_id, span.span_context.span_id());
    }
    let trace = invocations[0].span_context.trace_id();
    for row in tree {
        let span = invocations.iter().find(|s| s.span_context.span_id() == span_of[&row.subagent_id]).unwrap();
        assert_eq!(span.span_context.trace_id(), trace, "one trace for the whole tree");
        match row.depth {
            0 => assert_eq!(span.parent_span_id, SpanId::INVALID, "{} is a root", row.name),
            _ => {
                let parent = SubagentId::parse(row.parent_agent_id.as_deref().unwrap()).unwrap();
                assert_eq!(span.parent_span_id, span_of[&parent], "{}'s span is under its parent's", row.name);
            }
        }
    }
    span_of
}

fn session(host: &Host, id: &str) -> Tree {
    host.open_logged_tree(Arc::new(NullSink), SessionLog::new(id, StoreHandle::memory()))
}

async fn run(tree: &Tree, agent: SubagentConfig, task: TaskDefinition) -> SubagentId {
    let request = SpawnRequest { agent, parent_agent_id: None, root_agent_id: None };
    let id = tree.spawn(request).await.expect("spawn").subagent_id;
    assert!(tree.delegate(id, task).await.expect("delegate").accepted);
    let done = tokio::time::timeout(GUARD, tree.await_result(id)).await.expect("ends").expect("await");
    assert_eq!(done.status, SubagentStatus::Completed, "{:?}", done.error);
    id
}

fn scripted_task(script: Value) -> Value {
    json!({ "name": "t", "instruction": "i", "metadata": { "script": script } })
}

#[actix_rt::test]
async fn a_nested_scripted_tree_is_one_trace_of_invoke_agent_spans() {
    let _serial = SERIAL.lock().await;
    exporter();
    let host = Host::new(HostConfig::default());
    let tree = session(&host, "trace-scripted");
    let reader =
        json!({ "agent": { "name": "reader", "model": "m" }, "task": scripted_task(json!([{ "return": {} }])) });
    let researcher_script = json!([{ "spawn": reader }, { "await_children": {} }]);
    let researcher =
        json!({ "agent": { "name": "researcher", "model": "m" }, "task": scripted_task(researcher_script) });
    let writer =
        json!({ "agent": { "name": "writer", "model": "m" }, "task": scripted_task(json!([{ "fail": "no ink" }])) });
    let planner_script = json!([{ "spawn": researcher }, { "spawn": writer }, { "await_children": {} }]);
    let task: TaskDefinition = serde_json::from_value(scripted_task(planner_script)).unwrap();
    run(&tree, SubagentConfig::new("planner", "m"), task).await;

    let spans = spans_of("trace-scripted", 4).await;
    let list = tree.list().await.expect("list").subagents;
    let span_of = assert_mirrors(&spans, &list);
    let writer = list.iter().find(|row| &*row.name == "writer").unwrap();
    let writer_span = spans.iter().find(|s| s.span_context.span_id() == span_of[&writer.subagent_id]).unwrap();
    assert_eq!(attribute(writer_span, "error.type").as_deref(), Some("no ink"), "a failed task says why");
    assert!(matches!(writer_span.status, opentelemetry::trace::Status::Error { .. }));
}

/// The boss spawns two workers, awaits them, answers; each call reports
/// its own tokens.
fn boss_and_workers() -> FakeServer {
    FakeServer::start(|body, _| {
        let name = system_prompt(body).trim_start_matches("AGENT:").split_whitespace().next().unwrap_or("").to_owned();
        if name != "boss" {
            return with_usage(answer(&format!("done by {name}")), 50, 5);
        }
        let outputs = tool_outputs(body);
        let reply = match outputs.len() {
            0 => call_tools(
                None,
                &[
                    (
                        "spawn_subagent",
                        json!({ "name": "worker-a", "instruction": "a", "system_prompt": "AGENT:worker-a" }),
                    ),
                    (
                        "spawn_subagent",
                        json!({ "name": "worker-b", "instruction": "b", "system_prompt": "AGENT:worker-b" }),
                    ),
                ],
            ),
            2 => {
                let calls: Vec<(&str, Value)> = outputs
                    .iter()
                    .map(|out| ("await_subagent", json!({ "subagent_id": out["subagent_id"] })))
                    .collect();
                call_tools(None, &calls)
            }
            _ => answer("combined"),
        };
        with_usage(reply, 100, 10)
    })
}

async fn fake_model_tree(
    session_id: &str,
    record_content: bool,
) -> (Vec<SpanData>, Vec<SubagentInfo>, HashMap<SubagentId, SpanId>) {
    let server = boss_and_workers();
    let mut config = OpenAiConfig::new(server.base_url.clone());
    config.record_content = record_content;
    let adapter = Arc::new(OpenAiAdapter::new(config).expect("adapter"));
    let router = AdapterRouter::default().route("fake-*", adapter).expect("route");
    let host = Host::new(HostConfig { router, ..Default::default() });
    let tree = session(&host, session_id);
    let mut boss = SubagentConfig::new("boss", "fake-model");
    boss.system_prompt = Some("AGENT:boss".into());
    boss.capabilities = vec!["multi_agent".into()];
    run(&tree, boss, TaskDefinition::new("plan", "split the work")).await;
    let spans = spans_of(session_id, 3).await;
    let list = tree.list().await.expect("list").subagents.to_vec();
    let span_of = assert_mirrors(&spans, &list);
    (spans, list, span_of)
}

#[actix_rt::test]
async fn a_fake_model_tree_has_chat_and_tool_spans_under_each_task_and_no_content() {
    let _serial = SERIAL.lock().await;
    exporter();
    let (spans, list, span_of) = fake_model_tree("trace-model", false).await;
    let boss = list.iter().find(|row| &*row.name == "boss").unwrap();
    let under = |id: SubagentId, operation: &str| -> Vec<&SpanData> {
        spans
            .iter()
            .filter(|s| s.parent_span_id == span_of[&id])
            .filter(|s| attribute(s, "gen_ai.operation.name").as_deref() == Some(operation))
            .collect()
    };
    let chats = under(boss.subagent_id, "chat");
    assert_eq!(chats.len(), 3, "the boss called the model three times");
    for chat in &chats {
        assert_eq!(chat.name, "chat fake-model");
        assert_eq!(attribute(chat, "gen_ai.request.model").as_deref(), Some("fake-model"));
        assert_eq!(attribute(chat, "gen_ai.usage.input_tokens").as_deref(), Some("100"));
        assert_eq!(attribute(chat, "gen_ai.usage.output_tokens").as_deref(), Some("10"));
        assert_eq!(attribute(chat, "gen_ai.input.messages"), None, "content is off by default");
        assert_eq!(attribute(chat, "gen_ai.output.messages"), None);
    }
    let tools: Vec<String> = under(boss.subagent_id, "execute_tool").iter().map(|s| s.name.to_string()).collect();
    assert_eq!(tools.iter().filter(|name| *name == "execute_tool spawn_subagent").count(), 2, "{tools:?}");
    assert_eq!(tools.iter().filter(|name| *name == "execute_tool await_subagent").count(), 2, "{tools:?}");
    for tool in under(boss.subagent_id, "execute_tool") {
        assert_eq!(attribute(tool, "gen_ai.tool.call.arguments"), None, "content is off by default");
    }
    let boss_span = spans.iter().find(|s| s.span_context.span_id() == span_of[&boss.subagent_id]).unwrap();
    assert_eq!(attribute(boss_span, "gen_ai.usage.input_tokens").as_deref(), Some("300"), "the task's own tokens");
    assert_eq!(attribute(boss_span, "gen_ai.usage.output_tokens").as_deref(), Some("30"));
    for worker in list.iter().filter(|row| row.depth == 1) {
        let chats = under(worker.subagent_id, "chat");
        assert_eq!(chats.len(), 1, "{} called the model once", worker.name);
        assert_eq!(attribute(chats[0], "gen_ai.usage.input_tokens").as_deref(), Some("50"));
    }
}

#[actix_rt::test]
async fn message_content_is_recorded_when_the_config_turns_it_on() {
    let _serial = SERIAL.lock().await;
    exporter();
    let (spans, _, _) = fake_model_tree("trace-content", true).await;
    let chat = spans.iter().find(|s| attribute(s, "gen_ai.operation.name").as_deref() == Some("chat")).unwrap();
    assert!(attribute(chat, "gen_ai.input.messages").is_some_and(|text| text.contains("split the work")));
    assert!(attribute(chat, "gen_ai.output.messages").is_some_and(|text| text.contains("spawn_subagent")));
    let tool = spans.iter().find(|s| s.name == "execute_tool spawn_subagent").unwrap();
    assert!(attribute(tool, "gen_ai.tool.call.arguments").is_some_and(|text| text.contains("worker-")));
    assert!(attribute(tool, "gen_ai.tool.call.result").is_some_and(|text| text.contains("subagent_id")));
}

#[actix_rt::test]
async fn a_failed_model_call_marks_its_chat_span_and_its_task_as_errors() {
    let _serial = SERIAL.lock().await;
    exporter();
    let server = FakeServer::start(|_, _| Reply::Status {
        code: 400,
        retry_after: None,
        body: json!({ "error": { "message": "no such model" } }),
    });
    let adapter = Arc::new(OpenAiAdapter::new(OpenAiConfig::new(server.base_url.clone())).expect("adapter"));
    let router = AdapterRouter::default().route("fake-*", adapter).expect("route");
    let host = Host::new(HostConfig { router, ..Default::default() });
    let tree = session(&host, "trace-failed-call");
    let request =
        SpawnRequest { agent: SubagentConfig::new("lost", "fake-model"), parent_agent_id: None, root_agent_id: None };
    let id = tree.spawn(request).await.expect("spawn").subagent_id;
    assert!(tree.delegate(id, TaskDefinition::new("t", "i")).await.expect("delegate").accepted);
    let done = tokio::time::timeout(GUARD, tree.await_result(id)).await.expect("ends").expect("await");
    assert_eq!(done.status, SubagentStatus::Failed);

    let spans = spans_of("trace-failed-call", 1).await;
    let chat = spans.iter().find(|s| s.name == "chat fake-model").expect("the call's span");
    assert!(matches!(chat.status, opentelemetry::trace::Status::Error { .. }), "{:?}", chat.status);
    assert!(attribute(chat, "error.type").is_some_and(|kind| !kind.is_empty()));
    assert_eq!(attribute(chat, "gen_ai.response.model"), None, "no reply, no response model");
    let task = spans.iter().find(|s| s.name == "invoke_agent lost").unwrap();
    assert_eq!(chat.parent_span_id, task.span_context.span_id());
    assert!(matches!(task.status, opentelemetry::trace::Status::Error { .. }));
}
