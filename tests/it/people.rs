//! A person in the loop: approvals and questions, actor-level (the clocks
//! stop while a person is waited for) and over the protocol in both
//! namespaces (announce, answer, idempotence, timeout, cancel).

use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use subagent_host::config::{ApprovalRule, Limits, Require};
use subagent_host::server::{Auth, Service};
use subagent_host::wire::{SpawnRequest, SubagentConfig, SubagentStatus};
use subagent_host::{ApprovalPolicy, ErrorCode, Given, Host, HostConfig, SubagentId, Tree};
use subagent_host::{Event, EventDetail, EventKind};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::common::TreeOps;
use crate::common::{delegate, eventually, open, script_task, test_limits, wait_for_status};
use crate::protocol::Client;

/// Every call of the pretend tool `deploy` needs approval.
fn deploy_rule() -> ApprovalPolicy {
    ApprovalPolicy::new(&[ApprovalRule { tool: Some("deploy".into()), server: None, require: Require::Always }])
        .expect("a valid rule")
}

fn host(limits: Limits) -> Host {
    Host::new(HostConfig { limits, approvals: deploy_rule(), ..Default::default() })
}

async fn spawn_with(tree: &Tree, config: SubagentConfig, parent: Option<SubagentId>) -> SubagentId {
    let parent = parent.map(|id| id.to_string()).unwrap_or_else(|| "client".into());
    let request = SpawnRequest { agent: config, parent_agent_id: Some(parent), root_agent_id: Some("client".into()) };
    tree.spawn(request).await.expect("spawn").subagent_id
}

/// The next `kind` event's content fields (`approval_id` …), bounded.
async fn asked(events: &mut UnboundedReceiver<Event>, kind: EventKind) -> (SubagentId, serde_json::Map<String, Value>) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let event = tokio::time::timeout_at(deadline, events.recv()).await.expect("an event in time").expect("open");
        if event.kind == kind {
            let EventDetail::Asked(fields) = &event.detail else { panic!("{kind:?} without its fields: {event:?}") };
            return (event.subagent_id, (**fields).clone());
        }
    }
}

const DEPLOY: fn() -> Value = || json!([{ "call_tool": { "tool": "deploy", "arguments": { "env": "prod" } } }]);

#[actix_rt::test]
async fn a_task_waiting_for_approval_does_not_time_out_and_goes_on_when_approved() {
    // On the paused clock (the tree lives on this thread): the waits past
    // the timeouts below take no real time, and a sleep returns once every
    // timer due before its end has fired and the host has done with it.
    tokio::time::pause();
    let host = host(test_limits());
    let (tree, mut events) = open(&host);
    let config = SubagentConfig { timeout_seconds: 1, ..SubagentConfig::new("deployer", "scripted") };
    let id = spawn_with(&tree, config, None).await;
    delegate(&tree, id, script_task("deploy", DEPLOY())).await;
    let (from, fields) = asked(&mut events, EventKind::ApprovalRequested).await;
    assert_eq!(from, id);
    assert_eq!(fields["tool"], "deploy");
    assert_eq!(fields["arguments"], json!({ "env": "prod" }));
    assert_eq!(fields["path"], json!([id]));
    wait_for_status(&tree, id, SubagentStatus::Waiting).await;
    let list = tree.list().await.unwrap();
    let row = list.subagents.iter().find(|row| row.subagent_id == id).unwrap();
    assert_eq!(serde_json::to_value(row.waiting_for).unwrap(), "approval");
    // Past its 1 s timeout while the person thinks: its clock has stopped.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(crate::common::listed_status(&tree, id).await, Some(SubagentStatus::Waiting));
    let approval = fields["approval_id"].as_str().unwrap();
    let outcome = tree.desk().answer(approval, None, Given::Approve { note: String::new() }).await.unwrap();
    assert!(outcome.accepted);
    let done = tree.await_result(id).await.unwrap();
    assert_eq!(done.status, SubagentStatus::Completed, "{done:?}");
    let calls = done.result.unwrap().to_object()["calls"].clone();
    assert_eq!(calls, json!([{ "tool": "deploy", "made": true, "approved": true }]));
    assert!(tree.desk().is_empty());
}

#[actix_rt::test]
async fn the_clock_runs_again_after_the_answer_and_the_timeout_still_applies() {
    // On the paused clock, as above.
    tokio::time::pause();
    let host = host(test_limits());
    let (tree, mut events) = open(&host);
    let config = SubagentConfig { timeout_seconds: 1, ..SubagentConfig::new("deployer", "scripted") };
    let id = spawn_with(&tree, config, None).await;
    let script = json!([{ "call_tool": { "tool": "deploy" } }, { "sleep_ms": 1_500 }]);
    delegate(&tree, id, script_task("deploy", script)).await;
    let (_, fields) = asked(&mut events, EventKind::ApprovalRequested).await;
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let approval = fields["approval_id"].as_str().unwrap();
    tree.desk().answer(approval, None, Given::Approve { note: String::new() }).await.unwrap();
    let done = tree.await_result(id).await.unwrap();
    assert_eq!(done.status, SubagentStatus::Failed, "{done:?}");
    assert!(done.error.as_deref().unwrap().starts_with("timeout"), "{done:?}");
}

#[actix_rt::test]
async fn a_leaf_waiting_for_a_person_stops_its_ancestors_clocks_and_the_wall_budget() {
    // On the paused clock, as above.
    tokio::time::pause();
    let host = host(test_limits());
    let (tree, mut events) = open(&host);
    let mut root_config = SubagentConfig { timeout_seconds: 1, ..SubagentConfig::new("root", "scripted") };
    root_config.metadata.insert("budget".into(), json!({ "max_wall_seconds": 1 }));
    let root = spawn_with(&tree, root_config, None).await;
    let leaf = json!({ "name": "leaf", "model": "scripted", "timeout_seconds": 1 });
    let script = json!([
        { "spawn": { "agent": leaf, "task": { "name": "deploy", "instruction": "deploy", "metadata": { "script": DEPLOY() } } } },
        { "await_children": {} },
    ]);
    delegate(&tree, root, script_task("lead", script)).await;
    let (leaf_id, fields) = asked(&mut events, EventKind::ApprovalRequested).await;
    assert_eq!(fields["path"], json!([root, leaf_id]));
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let approval = fields["approval_id"].as_str().unwrap();
    tree.desk().answer(approval, None, Given::Approve { note: String::new() }).await.unwrap();
    let done = tree.await_result(root).await.unwrap();
    assert_eq!(done.status, SubagentStatus::Completed, "{done:?}");
    let children = done.result.unwrap().to_object()["children"].clone();
    assert_eq!(children[leaf_id.to_string()]["status"], "COMPLETED", "{children}");
}

#[actix_rt::test]
async fn a_subagents_own_rules_cover_its_subtree_and_cannot_drop_its_parents() {
    let host = Host::new(HostConfig { limits: test_limits(), ..Default::default() });
    let (tree, mut events) = open(&host);
    let mut parent = SubagentConfig::new("careful", "scripted");
    parent.metadata.insert("approval".into(), json!([{ "tool": "rm_*" }]));
    let parent = spawn_with(&tree, parent, None).await;
    let mut child = SubagentConfig::new("bold", "scripted");
    child.metadata.insert("approval".into(), json!([]));
    let child = spawn_with(&tree, child, Some(parent)).await;
    let rules = tree.inspect_one(child).await.unwrap();
    assert_eq!(rules.config.metadata["approval"], json!([{ "tool": "rm_*", "require": "always" }]));
    delegate(&tree, child, script_task("clean", json!([{ "call_tool": { "tool": "rm_tmp" } }]))).await;
    let (_, fields) = asked(&mut events, EventKind::ApprovalRequested).await;
    assert_eq!(fields["reason"].as_str().unwrap().split(':').next(), Some("metadata.approval[0]"));
    let approval = fields["approval_id"].as_str().unwrap();
    tree.desk().answer(approval, None, Given::Deny { note: "keep it".into() }).await.unwrap();
    let done = tree.await_result(child).await.unwrap();
    let calls = done.result.unwrap().to_object()["calls"].clone();
    assert_eq!(calls[0]["made"], false);
    assert_eq!(calls[0]["answer"]["error"], "denied by a person: keep it");
    // A malformed rule is refused at spawn.
    let mut bad = SubagentConfig::new("bad", "scripted");
    bad.metadata.insert("approval".into(), json!([{ "require": "sometimes" }]));
    let request = SpawnRequest { agent: bad, parent_agent_id: None, root_agent_id: None };
    assert_eq!(tree.spawn(request).await.unwrap_err().code, ErrorCode::SchemaViolation);
}

// ---- over the protocol ------------------------------------------------------

fn service(approval_timeout_ms: u64) -> Arc<Service> {
    let limits = Limits { approval_timeout_ms, ..Limits::default() };
    Service::new(host(limits), Auth::open())
}

/// The next unsolicited event of `kind`.
async fn event_of(client: &mut Client, kind: &str) -> Value {
    loop {
        let line = client.next().await;
        if line["type"] == "SUBAGENT_EVENT" && line["event"] == kind && line.get("req_id").is_none() {
            return line;
        }
    }
}

async fn spawned(client: &mut Client, namespace_spawn: Value, id: &str) -> String {
    let reply = client.request(namespace_spawn, id).await;
    reply["subagent_id"].as_str().unwrap_or_else(|| panic!("{reply}")).to_owned()
}

async fn delegated(client: &mut Client, sub: &str, script: Value, id: &str) {
    let task = json!({ "name": "t", "instruction": "go", "metadata": { "script": script } });
    let reply = client.request(json!({ "type": "SUBAGENT_DELEGATE_REQ", "subagent_id": sub, "task": task }), id).await;
    assert_eq!(reply["accepted"], true, "{reply}");
}

/// A handshaken client of `service`.
async fn handshaken(service: &Arc<Service>) -> Client {
    let mut client = Client::open(service);
    assert_eq!(client.handshake(&["multi_agent"]).await["ok"], true);
    client
}

/// A subagent (`SUBAGENT_SPAWN_REQ`) whose task waits for approval of its
/// `deploy` call: its id and the `approval_requested` event.
async fn waiting_to_deploy(client: &mut Client) -> (String, Value) {
    let spawn = json!({ "type": "SUBAGENT_SPAWN_REQ", "agent": { "name": "w", "model": "m" } });
    let sub = spawned(client, spawn, "s1").await;
    delegated(client, &sub, DEPLOY(), "d1").await;
    let event = event_of(client, "approval_requested").await;
    (sub, event)
}

#[actix_rt::test]
async fn subagent_namespace_announces_lists_and_answers_an_approval_once() {
    let service = service(600_000);
    let mut client = handshaken(&service).await;
    let (sub, event) = waiting_to_deploy(&mut client).await;
    let content = &event["content"];
    assert_eq!(event["subagent_id"], sub);
    assert_eq!(content["status"], "WAITING", "{event}");
    assert_eq!(content["path"], json!([sub]));
    assert_eq!(content["tool"], "deploy");
    assert_eq!(content["server"], Value::Null);
    assert_eq!(content["arguments"], json!({ "env": "prod" }));
    assert!(content["reason"].as_str().unwrap().starts_with("tools.approval[0]"), "{event}");
    let expires = content["expires_at"].as_f64().unwrap() - content["requested_at"].as_f64().unwrap();
    assert!((expires - 600.0).abs() < 1.0, "{event}");
    let approval = content["approval_id"].as_str().unwrap().to_owned();

    let list = client.request(json!({ "type": "SUBAGENT_LIST_REQ" }), "l1").await;
    let row = list["subagents"].as_array().unwrap().iter().find(|row| row["subagent_id"] == sub).unwrap().clone();
    assert_eq!((row["status"].as_str(), row["waiting_for"].as_str()), (Some("WAITING"), Some("approval")));

    let unknown = client
        .request(json!({ "type": "SUBAGENT_APPROVAL_REQ", "approval_id": "nope", "decision": "approve" }), "a0")
        .await;
    assert_eq!((unknown["type"].as_str(), unknown["code"].as_str()), (Some("error"), Some("unknown_approval")));
    let approve =
        json!({ "type": "SUBAGENT_APPROVAL_REQ", "approval_id": approval, "decision": "approve", "note": "ok" });
    let first = client.request(approve.clone(), "a1").await;
    assert_eq!(first["type"], "SUBAGENT_APPROVAL_RESP", "{first}");
    assert_eq!((first["decision"].as_str(), first["accepted"].as_bool()), (Some("approve"), Some(true)));
    let again = client.request(approve, "a2").await;
    assert_eq!((again["decision"].as_str(), again["accepted"].as_bool()), (Some("approve"), Some(true)));
    let deny = json!({ "type": "SUBAGENT_APPROVAL_REQ", "approval_id": approval, "decision": "deny" });
    let other = client.request(deny, "a3").await;
    assert_eq!((other["type"].as_str(), other["code"].as_str()), (Some("error"), Some("invalid_state")));

    let done = client.request(json!({ "type": "SUBAGENT_AWAIT_REQ", "subagent_id": sub }), "w1").await;
    assert_eq!(done["status"], "COMPLETED", "{done}");
    assert_eq!(done["result"]["calls"][0]["made"], true, "{done}");
}

#[actix_rt::test]
async fn multi_agent_namespace_answers_a_question_and_denies_a_call() {
    let service = service(600_000);
    let mut client = handshaken(&service).await;
    let spawn = json!({ "type": "multi_agent/spawn", "name": "asker" });
    let sub = spawned(&mut client, spawn, "s1").await;
    let script = json!([
        { "ask_user": { "question": "Which colour?", "choices": ["red", "blue"] } },
        { "call_tool": { "tool": "deploy" } },
    ]);
    delegated(&mut client, &sub, script, "d1").await;
    let event = event_of(&mut client, "input_requested").await;
    assert_eq!(event["content"]["question"], "Which colour?");
    assert_eq!(event["content"]["choices"], json!(["red", "blue"]));
    let request = event["content"]["request_id"].as_str().unwrap().to_owned();
    let list = client.request(json!({ "type": "multi_agent/list" }), "l1").await;
    assert_eq!(list["subagents"][0]["status"], "RUNNING", "{list}");
    assert_eq!(list["subagents"][0]["waiting_for"], "input", "{list}");
    // A question is not approved.
    let wrong = json!({ "type": "multi_agent/approve", "approval_id": request, "decision": "approve" });
    assert_eq!(client.request(wrong, "x1").await["code"], "invalid_state");
    let answer =
        client.request(json!({ "type": "multi_agent/answer", "request_id": request, "answer": "blue" }), "q1").await;
    assert_eq!(answer["type"], "multi_agent/answer/resp", "{answer}");
    assert_eq!((answer["request_id"].as_str(), answer["accepted"].as_bool()), (Some(request.as_str()), Some(true)));

    let event = event_of(&mut client, "approval_requested").await;
    let approval = event["content"]["approval_id"].as_str().unwrap().to_owned();
    let deny =
        json!({ "type": "multi_agent/approve", "approval_id": approval, "decision": "deny", "note": "not today" });
    let denied = client.request(deny, "a1").await;
    assert_eq!(denied["type"], "multi_agent/approve/resp", "{denied}");
    assert_eq!((denied["decision"].as_str(), denied["accepted"].as_bool()), (Some("deny"), Some(true)));

    let done = client.request(json!({ "type": "multi_agent/await", "subagent_id": sub }), "w1").await;
    assert_eq!(done["status"], "COMPLETED", "{done}");
    assert_eq!(done["result"]["answers"], json!(["blue"]), "{done}");
    assert_eq!(done["result"]["calls"][0]["made"], false, "{done}");
    assert_eq!(done["result"]["calls"][0]["answer"]["error"], "denied by a person: not today", "{done}");
}

#[actix_rt::test]
async fn an_unanswered_approval_is_denied_at_its_timeout_and_its_id_is_then_unknown() {
    let service = service(300);
    let mut client = handshaken(&service).await;
    let (sub, event) = waiting_to_deploy(&mut client).await;
    let approval = event["content"]["approval_id"].as_str().unwrap().to_owned();
    let done = client.request(json!({ "type": "SUBAGENT_AWAIT_REQ", "subagent_id": sub }), "w1").await;
    assert_eq!(done["result"]["calls"][0]["made"], false, "{done}");
    let answer = done["result"]["calls"][0]["answer"]["error"].as_str().unwrap();
    assert!(answer.contains("(timeout)"), "{answer}");
    let late = json!({ "type": "SUBAGENT_APPROVAL_REQ", "approval_id": approval, "decision": "approve" });
    assert_eq!(client.request(late, "a1").await["code"], "unknown_approval");
}

#[actix_rt::test]
async fn cancelling_or_terminating_a_waiting_task_answers_its_approval_as_cancelled() {
    let service = service(600_000);
    let mut client = handshaken(&service).await;
    let (sub, event) = waiting_to_deploy(&mut client).await;
    let approval = event["content"]["approval_id"].as_str().unwrap().to_owned();
    assert_eq!(service.host().desk().len(), 1);
    let cancelled = client.request(json!({ "type": "SUBAGENT_CANCEL_REQ", "subagent_id": sub }), "c1").await;
    assert_eq!(cancelled["event"], "cancelled", "{cancelled}");
    eventually("the approval leaves the desk", Duration::from_secs(5), || async {
        if service.host().desk().is_empty() {
            Ok(())
        } else {
            Err("still pending")
        }
    })
    .await;
    let late = json!({ "type": "SUBAGENT_APPROVAL_REQ", "approval_id": approval, "decision": "approve" });
    let reply = client.request(late, "a1").await;
    assert_eq!(reply["code"], "invalid_state", "{reply}");
    assert_eq!(reply["detail"]["decision"], "cancelled", "{reply}");
    // Terminate does the same for a task whose future it drops.
    delegated(&mut client, &sub, DEPLOY(), "d2").await;
    let event = event_of(&mut client, "approval_requested").await;
    let second = event["content"]["approval_id"].as_str().unwrap().to_owned();
    let terminated = client.request(json!({ "type": "SUBAGENT_TERMINATE_REQ", "subagent_id": sub }), "t1").await;
    assert_eq!(terminated["event"], "terminated", "{terminated}");
    assert!(service.host().desk().is_empty());
    let late = json!({ "type": "SUBAGENT_APPROVAL_REQ", "approval_id": second, "decision": "deny" });
    assert_eq!(client.request(late, "a2").await["detail"]["decision"], "cancelled");
    // Another session never sees it, nor may answer it.
    let mut other = handshaken(&service).await;
    let foreign = json!({ "type": "SUBAGENT_APPROVAL_REQ", "approval_id": approval, "decision": "approve" });
    assert_eq!(other.request(foreign, "f1").await["code"], "unknown_approval");
}
