//! Budgets that flow down the tree (`metadata.budget`, `[limits]
//! max_tokens_per_session`): a child's allowance is reserved from its
//! parent's remainder and what it does not use flows back; a spawn asking
//! for more than is left is refused naming the budget; spending past a
//! budget fails the task that crossed it (`budget_exceeded`) and cancels its
//! running descendants. Exact token arithmetic with the scripted adapter's
//! `use_tokens` and with the fake model.

use crate::common::eventually;
use crate::common::TreeOps;
use crate::fake_openai::*;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use subagent_host::adapter::openai::{OpenAiAdapter, OpenAiConfig};
use subagent_host::config::Limits;
use subagent_host::protocol::wire::*;
use subagent_host::AdapterRouter;
use subagent_host::{ErrorCode, Host, HostConfig, SubagentId, Tree};
use subagent_host::{Event, EventKind, NullSink};
use tokio::sync::mpsc;

const GUARD: Duration = Duration::from_secs(30);

fn agent(name: &str, budget: Option<Value>) -> SubagentConfig {
    let mut config = SubagentConfig::new(name, "scripted");
    if let Some(budget) = budget {
        config.metadata.insert("budget".into(), budget);
    }
    config
}

/// Spawns `config` under `parent` (shared with `cost.rs`, as are `task`,
/// `run` and `spend`).
pub(crate) async fn spawn(
    tree: &Tree,
    config: SubagentConfig,
    parent: Option<SubagentId>,
) -> Result<SubagentId, subagent_host::HostError> {
    let request = SpawnRequest { agent: config, parent_agent_id: parent.map(|p| p.to_string()), root_agent_id: None };
    tree.spawn(request).await.map(|spawned| spawned.subagent_id)
}

pub(crate) fn task(script: Value) -> TaskDefinition {
    serde_json::from_value(json!({ "name": "t", "instruction": "i", "metadata": { "script": script } })).unwrap()
}

pub(crate) async fn run(tree: &Tree, id: SubagentId, script: Value) -> AwaitResponse {
    assert!(tree.delegate(id, task(script)).await.expect("delegate").accepted);
    tokio::time::timeout(GUARD, tree.await_result(id)).await.expect("ends").expect("await")
}

pub(crate) fn spend(input_tokens: u64, output_tokens: u64) -> Value {
    json!({ "use_tokens": { "input_tokens": input_tokens, "output_tokens": output_tokens } })
}

fn remaining(tokens: u64) -> Option<Box<BudgetRemaining>> {
    Some(Box::new(BudgetRemaining {
        tokens: Some(tokens),
        steps: None,
        tool_calls: None,
        wall_seconds: None,
        cost_usd: None,
    }))
}

async fn row(tree: &Tree, id: SubagentId) -> SubagentInfo {
    tree.list().await.expect("list").subagents.iter().find(|row| row.subagent_id == id).expect("listed").clone()
}

#[actix_rt::test]
async fn allowances_are_reserved_refused_past_the_remainder_and_flow_back() {
    let host = Host::new(HostConfig::default());
    let tree = host.open_tree(Arc::new(NullSink));
    let parent = spawn(&tree, agent("parent", Some(json!({ "max_tokens": 10_000 }))), None).await.unwrap();
    let x = spawn(&tree, agent("x", Some(json!({ "max_tokens": 8_000 }))), Some(parent)).await.unwrap();
    assert_eq!(row(&tree, parent).await.budget_remaining, remaining(2_000), "x's 8 000 are reserved");

    let refused = spawn(&tree, agent("y", Some(json!({ "max_tokens": 3_000 }))), Some(parent)).await.unwrap_err();
    assert_eq!(refused.code, ErrorCode::QuotaExceeded);
    let detail = refused.detail.expect("detail");
    assert_eq!(detail, json!({ "budget": "max_tokens", "of": parent.to_string(), "limit": 10_000 }));
    assert!(refused.message.contains("max_tokens"), "{}", refused.message);

    let y = spawn(&tree, agent("y", Some(json!({ "max_tokens": 2_000 }))), Some(parent)).await.unwrap();
    assert_eq!(row(&tree, parent).await.budget_remaining, remaining(0));
    assert_eq!(row(&tree, x).await.budget_remaining, remaining(8_000));

    // x spends 5 000 of its 8 000 and ends: 3 000 flow back to the parent.
    let done = run(&tree, x, json!([spend(4_000, 1_000)])).await;
    assert_eq!(done.status, SubagentStatus::Completed);
    assert_eq!(done.budget_remaining, remaining(3_000), "x's own remainder");
    assert_eq!(row(&tree, parent).await.budget_remaining, remaining(3_000), "10 000 − 5 000 spent − y's 2 000");
    // The parent spends within what is left; y's reservation is untouched.
    let done = run(&tree, parent, json!([spend(2_500, 0)])).await;
    assert_eq!(done.status, SubagentStatus::Completed);
    assert_eq!(done.budget_remaining, remaining(500));
    assert_eq!(done.usage, Usage { input_tokens: 2_500, output_tokens: 0, cost_usd: None });
    assert_eq!(done.subtree_usage, Usage { input_tokens: 6_500, output_tokens: 1_000, cost_usd: None });
    assert_eq!(row(&tree, y).await.budget_remaining, remaining(2_000));
    // A budget with a key it does not know is refused as such.
    let bad = spawn(&tree, agent("z", Some(json!({ "max_tokenz": 1 }))), Some(parent)).await.unwrap_err();
    assert_eq!(bad.code, ErrorCode::SchemaViolation);
}

/// docs/lifecycle.md, "Budgets": the worked example, row by row.
#[actix_rt::test]
async fn the_worked_example_of_the_readme() {
    let host = Host::new(HostConfig::default());
    let tree = host.open_tree(Arc::new(NullSink));
    let parent = spawn(&tree, agent("parent", Some(json!({ "max_tokens": 10_000 }))), None).await.unwrap();
    let a = spawn(&tree, agent("a", Some(json!({ "max_tokens": 4_000 }))), Some(parent)).await.unwrap();
    let b = spawn(&tree, agent("b", None), Some(parent)).await.unwrap();
    let left = |tree: Tree, id: SubagentId| async move { row(&tree, id).await.budget_remaining.and_then(|r| r.tokens) };
    assert_eq!((left(tree.clone(), parent).await, left(tree.clone(), a).await), (Some(6_000), Some(4_000)));
    assert_eq!(left(tree.clone(), b).await, None, "b has no budget of its own");

    assert_eq!(run(&tree, parent, json!([spend(1_000, 0)])).await.status, SubagentStatus::Completed);
    assert_eq!(left(tree.clone(), parent).await, Some(5_000));
    // A spends 2 500 and waits (its task has not ended).
    assert!(tree.delegate(a, task(json!([spend(2_500, 0), { "wait_message": {} }]))).await.unwrap().accepted);
    eventually("a spends", GUARD, || async { (row(&tree, a).await.usage.input_tokens >= 2_500).then_some(()) }).await;
    assert_eq!((left(tree.clone(), parent).await, left(tree.clone(), a).await), (Some(5_000), Some(1_500)));
    assert_eq!(run(&tree, b, json!([spend(3_000, 0)])).await.status, SubagentStatus::Completed);
    assert_eq!(left(tree.clone(), parent).await, Some(2_000));
    // A's task ends: its unused 1 500 flow back.
    tree.message("client".into(), a, SubagentMessagePayload { kind: "go".into(), content: json!({}) }).await.unwrap();
    assert_eq!(
        tokio::time::timeout(GUARD, tree.await_result(a)).await.unwrap().unwrap().status,
        SubagentStatus::Completed
    );
    assert_eq!((left(tree.clone(), parent).await, left(tree.clone(), a).await), (Some(3_500), Some(1_500)));
    let c = spawn(&tree, agent("c", Some(json!({ "max_tokens": 5_000 }))), Some(parent)).await.unwrap_err();
    assert_eq!(c.code, ErrorCode::QuotaExceeded);
    let done = run(&tree, b, json!([spend(4_000, 0)])).await;
    assert_eq!(done.status, SubagentStatus::Failed);
    assert_eq!(
        done.error.as_deref(),
        Some(format!("budget_exceeded: max_tokens of {parent} (10000) is spent").as_str())
    );
    assert_eq!((left(tree.clone(), parent).await, left(tree.clone(), a).await), (Some(0), Some(1_500)));
}

/// A three-level scripted tree: the lead (10 000) spawns a planner
/// (4 000) whose leaf (1 500) overspends, and a worker with no budget of
/// its own that spends from the lead's remainder.
#[actix_rt::test]
async fn a_three_level_tree_whose_leaves_overspend() {
    let host = Host::new(HostConfig::default());
    let (events_tx, mut events) = mpsc::unbounded_channel::<Event>();
    let tree = host.open_tree(Arc::new(events_tx));
    let leaf = json!({ "agent": { "name": "leaf", "model": "scripted", "metadata": { "budget": { "max_tokens": 1_500 } } },
                       "task": task(json!([spend(1_000, 0), spend(900, 100), { "return": { "never": true } }])) });
    let planner = json!({ "agent": { "name": "planner", "model": "scripted", "metadata": { "budget": { "max_tokens": 4_000 } } },
                          "task": task(json!([{ "spawn": leaf }, { "await_children": {} }, spend(300, 200)])) });
    let worker = json!({ "agent": { "name": "worker", "model": "scripted" },
                         "task": task(json!([spend(2_000, 0)])) });
    let lead = spawn(&tree, agent("lead", Some(json!({ "max_tokens": 10_000 }))), None).await.unwrap();
    let done =
        run(&tree, lead, json!([spend(1_000, 0), { "spawn": planner }, { "spawn": worker }, { "await_children": {} }]))
            .await;
    assert_eq!(done.status, SubagentStatus::Completed, "{:?}", done.error);

    let list = tree.list().await.expect("list").subagents;
    let by_name = |name: &str| list.iter().find(|row| &*row.name == name).unwrap().clone();
    let (leaf, planner, worker) = (by_name("leaf"), by_name("planner"), by_name("worker"));
    let leaf_done = tree.await_result(leaf.subagent_id).await.unwrap();
    assert_eq!(leaf_done.status, SubagentStatus::Failed);
    assert_eq!(
        leaf_done.error.as_deref(),
        Some(format!("budget_exceeded: max_tokens of {} (1500) is spent", leaf.subagent_id).as_str())
    );
    // The crossing spend is counted: it was spent.
    assert_eq!(leaf.usage, Usage { input_tokens: 1_900, output_tokens: 100, cost_usd: None });
    assert_eq!(leaf.budget_remaining, remaining(0));
    assert_eq!(planner.status, SubagentStatus::Completed, "the leaf's overspend stopped the leaf only");
    assert_eq!(planner.subtree_usage, Usage { input_tokens: 2_200, output_tokens: 300, cost_usd: None });
    assert_eq!(planner.budget_remaining, remaining(4_000 - 2_500));
    assert_eq!(worker.usage, Usage { input_tokens: 2_000, output_tokens: 0, cost_usd: None });
    assert_eq!(worker.budget_remaining, None, "no budget of its own");
    // lead: 1 000 own + planner's 2 500 + worker's 2 000; the planner's
    // unused 1 500 flowed back when it ended.
    let lead_row = by_name("lead");
    assert_eq!(lead_row.subtree_usage, Usage { input_tokens: 5_200, output_tokens: 300, cost_usd: None });
    assert_eq!(lead_row.budget_remaining, remaining(10_000 - 5_500));

    let mut exceeded = Vec::new();
    while let Ok(event) = events.try_recv() {
        if event.kind == EventKind::BudgetExceeded {
            assert_eq!(event.status, SubagentStatus::Failed);
            exceeded.push(event.subagent_id);
        }
    }
    assert_eq!(exceeded, vec![leaf.subagent_id], "one budget_exceeded event, the leaf's");
}

#[actix_rt::test]
async fn overspending_cancels_the_tasks_running_descendants() {
    let host = Host::new(HostConfig::default());
    let tree = host.open_tree(Arc::new(NullSink));
    let sleeper =
        json!({ "agent": { "name": "sleeper", "model": "scripted" }, "task": task(json!([{ "sleep_ms": 60_000 }])) });
    let boss = spawn(&tree, agent("boss", Some(json!({ "max_tokens": 100 }))), None).await.unwrap();
    let done =
        run(&tree, boss, json!([{ "spawn": sleeper }, { "sleep_ms": 50 }, spend(150, 0), { "await_children": {} }]))
            .await;
    assert_eq!(done.status, SubagentStatus::Failed);
    assert!(done.error.as_deref().unwrap().starts_with("budget_exceeded: max_tokens of"), "{:?}", done.error);
    let sleeper = tree.list().await.unwrap().subagents.iter().find(|row| &*row.name == "sleeper").unwrap().subagent_id;
    let stopped = tokio::time::timeout(GUARD, tree.await_result(sleeper)).await.expect("cancelled in time").unwrap();
    assert_eq!(stopped.status, SubagentStatus::Cancelled);
}

#[actix_rt::test]
async fn steps_wall_time_and_the_session_budget_stop_a_task_too() {
    // On the paused clock (the tree lives on this thread): no real waiting.
    tokio::time::pause();
    let limits = Limits { max_tokens_per_session: 1_000, ..Limits::default() };
    let host = Host::new(HostConfig { limits, ..Default::default() });
    let tree = host.open_tree(Arc::new(NullSink));

    let stepper = spawn(&tree, agent("stepper", Some(json!({ "max_steps_total": 3 }))), None).await.unwrap();
    let done = run(
        &tree,
        stepper,
        json!([{ "progress": "1" }, { "progress": "2" }, { "progress": "3" }, { "progress": "4" }]),
    )
    .await;
    assert_eq!(
        done.error.as_deref(),
        Some(format!("budget_exceeded: max_steps_total of {stepper} (3) is spent").as_str())
    );
    assert_eq!(
        done.budget_remaining,
        Some(Box::new(BudgetRemaining {
            tokens: None,
            steps: Some(0),
            tool_calls: None,
            wall_seconds: None,
            cost_usd: None
        }))
    );

    let slow = spawn(&tree, agent("slow", Some(json!({ "max_wall_seconds": 1 }))), None).await.unwrap();
    let done = run(&tree, slow, json!([{ "sleep_ms": 30_000 }])).await;
    assert_eq!(done.status, SubagentStatus::Failed);
    assert_eq!(
        done.error.as_deref(),
        Some(format!("budget_exceeded: max_wall_seconds of {slow} (1) is spent").as_str())
    );
    let greedy = spawn(&tree, agent("greedy", Some(json!({ "max_wall_seconds": 2 }))), Some(slow)).await;
    assert!(greedy.is_err(), "a child cannot have more wall time than its parent has left");

    let refused = spawn(&tree, agent("big", Some(json!({ "max_tokens": 1_001 }))), None).await.unwrap_err();
    assert_eq!(refused.detail.unwrap()["of"], "session");
    let spender = spawn(&tree, agent("spender", None), None).await.unwrap();
    let done = run(&tree, spender, json!([spend(600, 0), spend(600, 0)])).await;
    assert_eq!(done.error.as_deref(), Some("budget_exceeded: max_tokens of session (1000) is spent"));
}

/// The fake model: each of the boss's calls costs 100 + 10 tokens, the
/// worker's one call 100 + 10. The boss's budget (250) covers its first
/// call and the worker's; its second call crosses it.
#[actix_rt::test]
async fn a_fake_model_tree_stops_where_its_budget_runs_out() {
    let server = FakeServer::start(|body, _| {
        let name = system_prompt(body).trim_start_matches("AGENT:").split_whitespace().next().unwrap_or("").to_owned();
        let outputs = tool_outputs(body);
        let reply = match (name.as_str(), outputs.len()) {
            ("boss", 0) => call_tools(
                None,
                &[("spawn_subagent", json!({ "name": "worker", "instruction": "w", "system_prompt": "AGENT:worker" }))],
            ),
            ("boss", 1) => call_tools(None, &[("await_subagent", json!({ "subagent_id": outputs[0]["subagent_id"] }))]),
            _ => answer("done"),
        };
        with_usage(reply, 100, 10)
    });
    let adapter = Arc::new(OpenAiAdapter::new(OpenAiConfig::new(server.base_url.clone())).expect("adapter"));
    let router = AdapterRouter::default().route("fake-*", adapter).expect("route");
    let host = Host::new(HostConfig { router, ..Default::default() });
    let tree = host.open_tree(Arc::new(NullSink));
    let mut boss = SubagentConfig::new("boss", "fake-model");
    boss.system_prompt = Some("AGENT:boss".into());
    boss.capabilities = vec!["multi_agent".into()];
    boss.metadata.insert("budget".into(), json!({ "max_tokens": 250 }));
    let boss = spawn(&tree, boss, None).await.unwrap();
    assert!(tree.delegate(boss, TaskDefinition::new("plan", "go")).await.unwrap().accepted);
    let done = tokio::time::timeout(GUARD, tree.await_result(boss)).await.expect("ends").unwrap();
    assert_eq!(done.status, SubagentStatus::Failed);
    assert_eq!(done.error.as_deref(), Some(format!("budget_exceeded: max_tokens of {boss} (250) is spent").as_str()));
    assert_eq!(done.usage, Usage { input_tokens: 200, output_tokens: 20, cost_usd: None }, "two calls of its own");
    assert_eq!(
        done.subtree_usage,
        Usage { input_tokens: 300, output_tokens: 30, cost_usd: None },
        "and the worker's one"
    );
    assert_eq!(done.budget_remaining, remaining(0));
    let boss_calls =
        server.requests().iter().filter(|seen| system_prompt(&seen.body).starts_with("AGENT:boss")).count();
    assert_eq!(boss_calls, 2, "no call after the budget ran out");
}
