//! Wire types against the spec (`subagents-capability.txt`): every wire
//! example decodes and re-encodes to an equal JSON value, defaults are the
//! spec's, and schema errors name the offending field.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use subagent_host::protocol::request::{body, decode_line, Request};
use subagent_host::protocol::wire::*;
use subagent_host::ErrorCode;

/// Decodes `example` (minus its `type`) as `T`, re-encodes it, and compares.
fn round_trip<T: Serialize + DeserializeOwned>(example: &str) {
    let mut value: Value = serde_json::from_str(example).expect("example is JSON");
    value.as_object_mut().expect("object").remove("type");
    let typed: T = serde_json::from_value(value.clone()).expect("decodes");
    let encoded = serde_json::to_value(&typed).expect("encodes");
    assert_eq!(encoded, value, "round trip of {example}");
}

#[test]
fn spawn_request_example_round_trips() {
    round_trip::<SpawnRequest>(
        r#"{"type":"SUBAGENT_SPAWN_REQ","agent":{"name":"researcher","role":"research","model":"claude-3.5-sonnet","system_prompt":"You are a research assistant","capabilities":["tools","memory"],"memory_scope":"isolated","tool_scope":"restricted","max_steps":40,"timeout_seconds":600,"metadata":{}},"parent_agent_id":"parent_1","root_agent_id":"parent_1"}"#,
    );
}

#[test]
fn spawn_response_example_round_trips() {
    round_trip::<SpawnResponse>(r#"{"type":"SUBAGENT_SPAWN_RESP","subagent_id":"sub_a1b2c3d4","status":"READY"}"#);
}

#[test]
fn delegate_request_example_round_trips() {
    round_trip::<DelegateRequest>(
        r#"{"type":"SUBAGENT_DELEGATE_REQ","subagent_id":"sub_a1b2c3d4","task":{"name":"research_topic","instruction":"Research the latest developments in quantum computing","success_criteria":["Include at least 3 recent papers","Provide a summary"],"metadata":{}}}"#,
    );
}

#[test]
fn delegate_response_example_round_trips() {
    round_trip::<DelegateResponse>(r#"{"type":"SUBAGENT_DELEGATE_RESP","accepted":true,"status":"RUNNING"}"#);
}

#[test]
fn await_request_example_round_trips() {
    round_trip::<AwaitRequest>(r#"{"type":"SUBAGENT_AWAIT_REQ","subagent_id":"sub_a1b2c3d4"}"#);
}

#[test]
fn await_response_example_round_trips_with_usage_alongside() {
    let example = r#"{"subagent_id":"sub_a1b2c3d4","status":"COMPLETED","result":{"summary":"Quantum computing advances in 2024 include...","papers":["paper1","paper2","paper3"]},"error":null}"#;
    let typed: AwaitResponse = serde_json::from_str(example).expect("decodes");
    let mut encoded = serde_json::to_value(&typed).expect("encodes");
    // The host's additions: zero when nothing was spent.
    let zero = json!({ "input_tokens": 0, "output_tokens": 0 });
    let fields = encoded.as_object_mut().expect("object");
    assert_eq!(fields.remove("usage"), Some(zero.clone()));
    assert_eq!(fields.remove("subtree_usage"), Some(zero));
    assert_eq!(encoded, serde_json::from_str::<Value>(example).unwrap(), "the spec's fields round trip");
    let spent: AwaitResponse = serde_json::from_value(json!({
        "subagent_id": "sub_a1b2c3d4", "status": "RUNNING",
        "usage": { "input_tokens": 7, "output_tokens": 2 },
        "subtree_usage": { "input_tokens": 70, "output_tokens": 20 },
    }))
    .expect("decodes with usage");
    assert_eq!(spent.usage, Usage { input_tokens: 7, output_tokens: 2, cost_usd: None });
    assert_eq!(spent.subtree_usage, Usage { input_tokens: 70, output_tokens: 20, cost_usd: None });
}

#[test]
fn merge_request_example_round_trips() {
    round_trip::<MergeRequest>(
        r#"{"type":"SUBAGENT_MERGE_REQ","subagent_ids":["sub_a1b2c3d4","sub_e5f6g7h8"],"strategy":"hierarchical_summary"}"#,
    );
}

#[test]
fn merge_response_example_round_trips() {
    round_trip::<MergeResponse>(
        r#"{"type":"SUBAGENT_MERGE_RESP","merged_result":{"summary":"Combined findings from researcher and coder agents..."}}"#,
    );
}

#[test]
fn every_example_request_decodes_through_the_envelope_to_its_variant() {
    let cases = [
        (r#"{"type":"SUBAGENT_SPAWN_REQ","id":"1","agent":{"name":"r","model":"m"}}"#, "spawn"),
        (
            r#"{"type":"SUBAGENT_DELEGATE_REQ","id":"1","subagent_id":"sub_a1b2c3d4","task":{"name":"t","instruction":"i"}}"#,
            "delegate",
        ),
        (r#"{"type":"SUBAGENT_AWAIT_REQ","id":"1","subagent_id":"sub_a1b2c3d4"}"#, "await"),
        (r#"{"type":"SUBAGENT_MERGE_REQ","id":"1","subagent_ids":[]}"#, "merge"),
    ];
    for (line, want) in cases {
        let Ok(Some(incoming)) = decode_line(line.as_bytes()) else { panic!("{line} did not decode") };
        assert_eq!(incoming.id, "1");
        let got = match incoming.request {
            Request::Spawn(_) => "spawn",
            Request::Delegate(_) => "delegate",
            Request::Await(_) => "await",
            Request::Merge(_) => "merge",
            other => panic!("unexpected {other:?}"),
        };
        assert_eq!(got, want);
    }
}

#[test]
fn subagent_config_defaults_are_the_specs() {
    let config: SubagentConfig = serde_json::from_value(json!({ "name": "n", "model": "m" })).unwrap();
    assert_eq!(config.max_steps, 40);
    assert_eq!(config.timeout_seconds, 600);
    assert_eq!(config.memory_scope, MemoryScope::Shared);
    assert_eq!(config.tool_scope, ToolScope::Restricted);
    assert_eq!(config.role, None);
    assert_eq!(config.system_prompt, None);
    assert!(config.capabilities.is_empty());
    assert!(config.metadata.is_empty());
    assert_eq!(config, SubagentConfig::new("n", "m"));
}

#[test]
fn merge_strategy_defaults_to_hierarchical_summary() {
    let merge: MergeRequest = serde_json::from_value(json!({ "subagent_ids": ["sub_a1b2c3d4"] })).unwrap();
    assert_eq!(merge.strategy, "hierarchical_summary");
}

#[test]
fn delegate_accepted_and_message_delivered_default_to_true() {
    let delegate: DelegateResponse = serde_json::from_value(json!({ "status": "RUNNING" })).unwrap();
    assert!(delegate.accepted);
    let message: MessageResponse = serde_json::from_value(json!({})).unwrap();
    assert!(message.delivered);
}

#[test]
fn task_and_event_defaults_are_empty() {
    let task: TaskDefinition = serde_json::from_value(json!({ "name": "t", "instruction": "i" })).unwrap();
    assert!(task.success_criteria.is_empty() && task.metadata.is_empty());
    let event: SubagentEvent =
        serde_json::from_value(json!({ "subagent_id": "sub_00000001", "event": "spawned" })).unwrap();
    assert!(event.content.is_empty());
}

#[test]
fn status_and_scope_spellings_are_the_specs() {
    let statuses = json!(["READY", "RUNNING", "WAITING", "COMPLETED", "FAILED", "CANCELLED", "TERMINATED"]);
    let decoded: Vec<SubagentStatus> = serde_json::from_value(statuses.clone()).unwrap();
    assert_eq!(serde_json::to_value(&decoded).unwrap(), statuses);
    let scopes = json!(["shared", "isolated", "snapshot"]);
    let decoded: Vec<MemoryScope> = serde_json::from_value(scopes.clone()).unwrap();
    assert_eq!(serde_json::to_value(&decoded).unwrap(), scopes);
    let tools = json!(["shared", "restricted", "isolated"]);
    let decoded: Vec<ToolScope> = serde_json::from_value(tools.clone()).unwrap();
    assert_eq!(serde_json::to_value(&decoded).unwrap(), tools);
}

fn schema_field<T: DeserializeOwned + std::fmt::Debug>(value: Value) -> String {
    let err = body::<T>(value).expect_err("must be rejected");
    assert_eq!(err.code, ErrorCode::SchemaViolation);
    let field = err.detail.as_ref().and_then(|d| d["field"].as_str()).expect("detail.field").to_owned();
    assert!(err.message.contains(&field), "message `{}` names `{field}`", err.message);
    field
}

#[test]
fn unknown_enum_value_names_its_path() {
    let field =
        schema_field::<SpawnRequest>(json!({ "agent": { "name": "n", "model": "m", "memory_scope": "global" } }));
    assert_eq!(field, "agent.memory_scope");
    let field = schema_field::<SpawnRequest>(json!({ "agent": { "name": "n", "model": "m", "tool_scope": "all" } }));
    assert_eq!(field, "agent.tool_scope");
}

#[test]
fn missing_field_names_its_path() {
    assert_eq!(schema_field::<SpawnRequest>(json!({ "agent": { "name": "n" } })), "agent.model");
    assert_eq!(schema_field::<SpawnRequest>(json!({})), "agent");
    assert_eq!(
        schema_field::<DelegateRequest>(json!({ "subagent_id": "sub_a1b2c3d4", "task": { "name": "t" } })),
        "task.instruction"
    );
}

#[test]
fn wrong_type_names_its_path() {
    let field = schema_field::<SpawnRequest>(json!({ "agent": { "name": "n", "model": "m", "max_steps": "forty" } }));
    assert_eq!(field, "agent.max_steps");
    assert_eq!(schema_field::<MergeRequest>(json!({ "subagent_ids": ["sub_a1b2c3d4", 7] })), "subagent_ids[1]");
    assert_eq!(schema_field::<AwaitRequest>(json!({ "subagent_id": 12 })), "subagent_id");
}

#[test]
fn a_subagent_id_is_spelled_sub_and_eight_lowercase_hex_digits_everywhere() {
    for raw in [0, 1, 0x0a1b_2c3d, 0xdead_beef, u32::MAX] {
        let id = subagent_host::SubagentId(raw);
        let expected = format!("sub_{raw:08x}");
        assert_eq!(id.spelled().as_str(), expected);
        assert_eq!(id.to_string(), expected);
        assert_eq!(serde_json::to_string(&id).unwrap(), format!("\"{expected}\""));
        assert_eq!(subagent_host::SubagentId::parse(&expected), Some(id));
    }
}
