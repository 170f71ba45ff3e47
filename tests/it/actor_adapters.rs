//! Adapters: routing by model glob, every step of the scripted adapter's
//! contract, memory scopes, and panics that fail only their own task.

use crate::common::*;
use serde_json::{json, Value};
use std::sync::Arc;
use subagent_host::adapter::ScriptedAdapter;
use subagent_host::protocol::wire::*;
use subagent_host::{AdapterRouter, AgentAdapter, TaskContext, TaskFuture};
use subagent_host::{EventDetail, EventKind};
use subagent_host::{Host, HostConfig, SubagentId, Tree};

/// Answers with its own name, to see which adapter the router picked.
struct Named(&'static str);

impl AgentAdapter for Named {
    fn name(&self) -> &str {
        self.0
    }

    fn run(&self, _ctx: TaskContext) -> TaskFuture {
        let name = self.0;
        Box::pin(async move {
            let mut result = JsonObject::new();
            result.insert("adapter".into(), json!(name));
            Ok(result.into())
        })
    }
}

/// Returns its memory as it was when the task started, then adds a line.
struct MemoryProbe;

impl AgentAdapter for MemoryProbe {
    fn name(&self) -> &str {
        "probe"
    }

    fn run(&self, ctx: TaskContext) -> TaskFuture {
        Box::pin(async move {
            let seen = ctx.memory.values();
            ctx.memory.push(json!({ "role": "user", "content": ctx.task.instruction }));
            let mut result = JsonObject::new();
            result.insert("memory".into(), Value::Array(seen));
            Ok(result.into())
        })
    }
}

/// Panics inside its task.
struct Panicky;

impl AgentAdapter for Panicky {
    fn name(&self) -> &str {
        "panicky"
    }

    fn run(&self, _ctx: TaskContext) -> TaskFuture {
        Box::pin(async { panic!("adapter bug") })
    }
}

fn host_with_router(router: AdapterRouter) -> Host {
    Host::new(HostConfig { limits: test_limits(), router, ..Default::default() })
}

async fn spawn_model(
    session: &Tree,
    name: &str,
    model: &str,
    parent: Option<SubagentId>,
    scope: MemoryScope,
) -> SubagentId {
    let request = SpawnRequest {
        agent: SubagentConfig { memory_scope: scope, ..SubagentConfig::new(name, model) },
        parent_agent_id: parent.map(|p| p.to_string()),
        root_agent_id: None,
    };
    session.spawn(request).await.unwrap().subagent_id
}

async fn run_to_end(session: &Tree, id: SubagentId, task: TaskDefinition) -> AwaitResponse {
    delegate(session, id, task).await;
    session.await_result(id).await.unwrap()
}

#[actix_rt::test]
async fn the_router_tries_model_globs_in_order_then_the_default() {
    let router = AdapterRouter::new(Arc::new(Named("default")))
        .route("gpt-4*", Arc::new(Named("first")))
        .unwrap()
        .route("gpt-*", Arc::new(Named("second")))
        .unwrap();
    assert_eq!(router.select("gpt-4o").name(), "first");
    assert_eq!(router.select("gpt-3.5").name(), "second");
    assert_eq!(router.select("llama3").name(), "default");
    assert!(AdapterRouter::default().route("[", Arc::new(ScriptedAdapter::default())).is_err());
    let host = host_with_router(router);
    let (session, _events) = open(&host);
    let id = spawn_model(&session, "a", "gpt-3.5", None, MemoryScope::Shared).await;
    let answer = run_to_end(&session, id, TaskDefinition::new("t", "x")).await;
    assert_eq!(answer.result.unwrap().to_object()["adapter"], json!("second"));
}

#[actix_rt::test]
async fn the_scripted_adapter_without_a_script_answers_like_the_reference_host() {
    let host = host_with(test_limits());
    let (session, _events) = open(&host);
    let id = spawn(&session, "plain", None).await;
    let answer = run_to_end(&session, id, TaskDefinition::new("research_topic", "Research X")).await;
    let result = answer.result.unwrap().to_object();
    assert_eq!(
        result,
        json!({ "summary": "Completed task: research_topic", "instruction": "Research X" })
            .as_object()
            .unwrap()
            .clone()
    );
}

#[actix_rt::test]
async fn script_progress_emits_a_progress_event_with_its_text() {
    let host = host_with(test_limits());
    let (session, mut events) = open(&host);
    let id = spawn(&session, "talker", None).await;
    run_to_end(&session, id, script_task("p", json!([{ "progress": "halfway" }]))).await;
    let progress: Vec<_> = drain_events(&mut events).into_iter().filter(|e| e.kind == EventKind::Progress).collect();
    assert_eq!(progress.len(), 1);
    assert_eq!(progress[0].detail, EventDetail::Progress("halfway".into()));
    let wire = serde_json::to_value(subagent_host::WireEvent(&progress[0])).unwrap();
    assert_eq!(wire["content"]["message"], json!("halfway"));
}

#[actix_rt::test]
async fn script_fail_ends_failed_with_its_text() {
    let host = host_with(test_limits());
    let (session, _events) = open(&host);
    let id = spawn(&session, "failer", None).await;
    let answer = run_to_end(&session, id, script_task("f", json!([{ "fail": "no data" }, { "return": {} }]))).await;
    assert_eq!((answer.status, answer.error.as_deref()), (SubagentStatus::Failed, Some("no data")));
}

#[actix_rt::test]
async fn script_return_of_a_non_object_is_wrapped_as_value() {
    let host = host_with(test_limits());
    let (session, _events) = open(&host);
    let id = spawn(&session, "returner", None).await;
    let answer =
        run_to_end(&session, id, script_task("r", json!([{ "return": [1, 2] }, { "fail": "not reached" }]))).await;
    assert_eq!(answer.status, SubagentStatus::Completed);
    assert_eq!(answer.result.unwrap().to_object()["value"], json!([1, 2]));
    let answer = run_to_end(&session, id, script_task("r2", json!([{ "return": { "a": 1 } }]))).await;
    assert_eq!(answer.result.unwrap().to_object()["a"], json!(1));
}

#[actix_rt::test]
async fn script_send_to_parent_reaches_a_parent_waiting_for_messages() {
    let host = host_with(test_limits());
    let (session, _events) = open(&host);
    let parent = spawn(&session, "parent", None).await;
    let child = spawn(&session, "child", Some(parent)).await;
    delegate(&session, parent, script_task("listen", json!([{ "wait_message": { "timeout_ms": 5000 } }]))).await;
    let child_answer = run_to_end(
        &session,
        child,
        script_task("tell", json!([{ "send": { "to": "parent", "content": "found it" } }])),
    )
    .await;
    assert_eq!(child_answer.status, SubagentStatus::Completed);
    let answer = session.await_result(parent).await.unwrap();
    let messages = answer.result.unwrap().to_object()["messages"].clone();
    assert_eq!(messages[0]["content"], json!("found it"));
    assert_eq!(messages[0]["from"], json!(child.to_string()));
}

#[actix_rt::test]
async fn script_send_by_id_and_wait_message_timeout_goes_on() {
    let host = host_with(test_limits());
    let (session, _events) = open(&host);
    let a = spawn(&session, "a", None).await;
    let b = spawn(&session, "b", None).await;
    let sent =
        run_to_end(&session, a, script_task("s", json!([{ "send": { "to": b.to_string(), "content": 7 } }]))).await;
    assert_eq!(sent.status, SubagentStatus::Completed);
    let script =
        json!([{ "wait_message": {} }, { "wait_message": { "timeout_ms": 20 } }, { "return": { "done": true } }]);
    let answer = run_to_end(&session, b, script_task("w", script)).await;
    let result = answer.result.unwrap().to_object();
    assert_eq!(result["done"], json!(true));
    assert_eq!(result["messages"].as_array().unwrap().len(), 1, "the timed-out wait adds nothing");
    // Sending to a subagent that does not exist fails the sender's task only.
    let bad =
        run_to_end(&session, a, script_task("s2", json!([{ "send": { "to": "sub_00000000", "content": 1 } }]))).await;
    assert_eq!(bad.status, SubagentStatus::Failed);
    assert!(bad.error.unwrap().contains("unknown_subagent"));
}

#[actix_rt::test]
async fn script_spawn_and_await_children_build_a_real_nested_tree() {
    let host = host_with(test_limits());
    let (session, _events) = open(&host);
    let root = spawn(&session, "root", None).await;
    let grandchild_task = json!({ "name": "leaf", "instruction": "leaf work", "metadata": { "script": [{ "return": { "answer": "leaf" } }] } });
    let child_script = json!([
        { "spawn": { "agent": { "name": "grandchild", "model": "scripted" }, "task": grandchild_task } },
        { "await_children": {} },
        { "return": { "answer": "child" } }
    ]);
    let script = json!([
        { "spawn": { "agent": { "name": "child1", "model": "scripted" }, "task": { "name": "c1", "instruction": "x", "metadata": { "script": child_script } } } },
        { "spawn": { "agent": { "name": "child2", "model": "scripted" }, "task": { "name": "c2", "instruction": "y" } } },
        { "await_children": {} }
    ]);
    let answer = run_to_end(&session, root, script_task("tree", script)).await;
    assert_eq!(answer.status, SubagentStatus::Completed, "{answer:?}");
    let children = answer.result.unwrap().to_object()["children"].as_object().unwrap().clone();
    assert_eq!(children.len(), 2);
    let list = session.list().await.unwrap().subagents;
    assert_eq!(list.len(), 4);
    let by_name = |name: &str| list.iter().find(|i| &*i.name == name).unwrap().clone();
    assert_eq!(by_name("child1").depth, 1);
    assert_eq!(by_name("child1").parent_agent_id.as_deref(), Some(root.to_string().as_str()));
    assert_eq!(by_name("grandchild").depth, 2);
    assert_eq!(
        by_name("grandchild").parent_agent_id.as_deref(),
        Some(by_name("child1").subagent_id.to_string().as_str())
    );
    let child1 = &children[&by_name("child1").subagent_id.to_string()];
    assert_eq!(child1["status"], json!("COMPLETED"));
    assert_eq!(child1["result"]["answer"], json!("child"));
    // Terminating the root takes all four down.
    assert_eq!(session.terminate(root).await.unwrap().len(), 4);
    assert_eq!(session.stats().actors(), 0);
}

#[actix_rt::test]
async fn a_spawn_step_past_max_depth_fails_that_task_only() {
    let host = host_with(subagent_host::config::Limits { max_depth: 1, ..test_limits() });
    let (session, _events) = open(&host);
    let root = spawn(&session, "root", None).await;
    let script =
        json!([{ "spawn": { "agent": { "name": "c", "model": "m" }, "task": { "name": "t", "instruction": "i" } } }]);
    let answer = run_to_end(&session, root, script_task("deep", script)).await;
    assert_eq!(answer.status, SubagentStatus::Failed);
    assert!(answer.error.unwrap().contains("depth_exceeded"));
}

#[actix_rt::test]
async fn a_malformed_script_fails_only_its_task_with_a_clear_error() {
    let host = host_with(test_limits());
    let (session, _events) = open(&host);
    let healthy = spawn(&session, "healthy", None).await;
    delegate(&session, healthy, sleeping_task(100)).await;
    let id = spawn(&session, "confused", None).await;
    for (script, needle) in [
        (json!([{ "dance": 1 }]), "dance"),
        (json!([{ "sleep_ms": "long" }]), "sleep_ms"),
        (json!([{ "sleep_ms": 1, "progress": "x" }]), "script"),
        (json!("not a list"), "script"),
    ] {
        let answer = run_to_end(&session, id, script_task("bad", script.clone())).await;
        assert_eq!(answer.status, SubagentStatus::Failed, "{script}");
        let error = answer.error.unwrap();
        assert!(error.starts_with("malformed script") && error.contains(needle), "{script}: {error}");
    }
    assert_eq!(session.await_result(healthy).await.unwrap().status, SubagentStatus::Completed);
}

#[actix_rt::test]
async fn an_adapter_that_panics_fails_its_own_task_and_the_session_goes_on() {
    let router = AdapterRouter::default().route("panicky", Arc::new(Panicky)).unwrap();
    let host = host_with_router(router);
    let (session, _events) = open(&host);
    let healthy = spawn(&session, "healthy", None).await;
    delegate(&session, healthy, sleeping_task(50)).await;
    let bad = spawn_model(&session, "bad", "panicky", None, MemoryScope::Shared).await;
    let answer = run_to_end(&session, bad, TaskDefinition::new("t", "x")).await;
    assert_eq!(answer.status, SubagentStatus::Failed);
    assert!(answer.error.unwrap().contains("adapter panicked: adapter bug"));
    assert_eq!(session.await_result(healthy).await.unwrap().status, SubagentStatus::Completed);
    // The panicked subagent takes new work.
    let again = run_to_end(&session, bad, TaskDefinition::new("t", "x")).await;
    assert_eq!(again.status, SubagentStatus::Failed);
    assert_eq!(session.stats().tasks(), 0);
    spawn(&session, "still_spawning", None).await;
}

#[actix_rt::test]
async fn memory_scopes_share_copy_or_isolate_the_parents_memory() {
    let router = AdapterRouter::default().route("probe", Arc::new(MemoryProbe)).unwrap();
    let host = host_with_router(router);
    let (session, _events) = open(&host);
    let parent = spawn_model(&session, "parent", "probe", None, MemoryScope::Shared).await;
    run_to_end(&session, parent, TaskDefinition::new("t", "parent said one")).await;
    let shared = spawn_model(&session, "shared", "probe", Some(parent), MemoryScope::Shared).await;
    let snapshot = spawn_model(&session, "snapshot", "probe", Some(parent), MemoryScope::Snapshot).await;
    let isolated = spawn_model(&session, "isolated", "probe", Some(parent), MemoryScope::Isolated).await;
    // The parent adds to its memory after the spawn.
    run_to_end(&session, parent, TaskDefinition::new("t", "parent said two")).await;
    let seen = |answer: AwaitResponse| -> Vec<String> {
        answer.result.unwrap().to_object()["memory"]
            .as_array()
            .unwrap()
            .iter()
            .map(|entry| entry["content"].as_str().unwrap().to_owned())
            .collect()
    };
    let shared_seen = seen(run_to_end(&session, shared, TaskDefinition::new("t", "shared child")).await);
    assert_eq!(shared_seen, vec!["parent said one", "parent said two"]);
    let snapshot_seen = seen(run_to_end(&session, snapshot, TaskDefinition::new("t", "snap child")).await);
    assert_eq!(snapshot_seen, vec!["parent said one"]);
    let isolated_seen = seen(run_to_end(&session, isolated, TaskDefinition::new("t", "iso child")).await);
    assert!(isolated_seen.is_empty());
    // The shared child wrote into the parent's memory; the snapshot did not.
    let parent_seen = seen(run_to_end(&session, parent, TaskDefinition::new("t", "three")).await);
    assert_eq!(parent_seen, vec!["parent said one", "parent said two", "shared child"]);
}
