//! Token usage as data: a three-level tree of openai-adapter subagents
//! against the fake model, each agent's calls reporting their own token
//! counts. Every subagent's `usage` (its own calls) and `subtree_usage` (its
//! descendants' too) must match the fake's numbers exactly, in the await
//! reply, the list rows and the `completed` events.

use crate::common::TreeOps;
use crate::fake_openai::*;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use subagent_host::adapter::openai::{OpenAiAdapter, OpenAiConfig};
use subagent_host::protocol::wire::*;
use subagent_host::AdapterRouter;
use subagent_host::{Event, EventKind};
use subagent_host::{Host, HostConfig};
use tokio::sync::mpsc;

const GUARD: Duration = Duration::from_secs(30);

/// Who spawns whom.
const TREE: &[(&str, &[&str])] =
    &[("boss", &["lead-a", "lead-b"]), ("lead-a", &["worker-a"]), ("lead-b", &["worker-b"])];

/// The tokens each of an agent's calls reports: (prompt, completion).
fn tokens_per_call(name: &str) -> (u64, u64) {
    match name {
        "boss" => (100, 10),
        "lead-a" => (200, 20),
        "lead-b" => (300, 30),
        "worker-a" => (1000, 1),
        "worker-b" => (2000, 2),
        other => panic!("unknown agent {other}"),
    }
}

fn children_of(name: &str) -> &'static [&'static str] {
    TREE.iter().find(|(parent, _)| *parent == name).map_or(&[], |(_, children)| children)
}

/// A parent spawns its children (call 1), awaits them (call 2) and answers
/// (call 3); a leaf answers at once (call 1).
fn model() -> FakeServer {
    FakeServer::start(|body, _| {
        let name = system_prompt(body).trim_start_matches("AGENT:").split_whitespace().next().unwrap_or("").to_owned();
        let (prompt, completion) = tokens_per_call(&name);
        let children = children_of(&name);
        let outputs = tool_outputs(body);
        let reply = if children.is_empty() || outputs.len() == 2 * children.len() {
            answer(&format!("done by {name}"))
        } else if outputs.is_empty() {
            let calls: Vec<(&str, Value)> = children
                .iter()
                .map(|child| {
                    let args =
                        json!({ "name": child, "instruction": "work", "system_prompt": format!("AGENT:{child}") });
                    ("spawn_subagent", args)
                })
                .collect();
            call_tools(None, &calls)
        } else {
            let calls: Vec<(&str, Value)> =
                outputs.iter().map(|out| ("await_subagent", json!({ "subagent_id": out["subagent_id"] }))).collect();
            call_tools(None, &calls)
        };
        with_usage(reply, prompt, completion)
    })
}

fn usage(input_tokens: u64, output_tokens: u64) -> Usage {
    Usage { input_tokens, output_tokens, cost_usd: None }
}

/// What the fake's numbers make each agent's (own, subtree) usage.
fn expected() -> HashMap<&'static str, (Usage, Usage)> {
    fn own(name: &str) -> Usage {
        let calls = if children_of(name).is_empty() { 1 } else { 3 };
        let (prompt, completion) = tokens_per_call(name);
        usage(prompt * calls, completion * calls)
    }
    fn subtree(name: &str) -> Usage {
        children_of(name).iter().map(|child| subtree(child)).fold(own(name), |sum, part| {
            usage(sum.input_tokens + part.input_tokens, sum.output_tokens + part.output_tokens)
        })
    }
    ["boss", "lead-a", "lead-b", "worker-a", "worker-b"]
        .into_iter()
        .map(|name| (name, (own(name), subtree(name))))
        .collect()
}

#[actix_rt::test]
async fn every_subagent_reports_its_own_and_its_subtrees_tokens_exactly() {
    let server = model();
    let adapter = Arc::new(OpenAiAdapter::new(OpenAiConfig::new(server.base_url.clone())).expect("adapter"));
    let router = AdapterRouter::default().route("fake-*", adapter).expect("route");
    let host = Host::new(HostConfig { router, ..Default::default() });
    let (events_tx, mut events) = mpsc::unbounded_channel::<Event>();
    let session = host.open_tree(Arc::new(events_tx));

    let mut boss = SubagentConfig::new("boss", "fake-model");
    boss.system_prompt = Some("AGENT:boss".into());
    boss.capabilities = vec!["multi_agent".into()];
    let request = SpawnRequest { agent: boss, parent_agent_id: None, root_agent_id: None };
    let boss_id = session.spawn(request).await.expect("spawn").subagent_id;
    assert!(session.delegate(boss_id, TaskDefinition::new("plan", "split the work")).await.expect("delegate").accepted);
    let done = tokio::time::timeout(GUARD, session.await_result(boss_id)).await.expect("ends").expect("await");
    assert_eq!(done.status, SubagentStatus::Completed, "{:?}", done.error);

    let expected = expected();
    // Sanity of the arithmetic itself: 3×100 + 3×200 + 3×300 + 1000 + 2000.
    assert_eq!(expected["boss"].1, usage(4800, 183));
    assert_eq!((done.usage, done.subtree_usage), expected["boss"], "the boss's await reply");

    let list = session.list().await.expect("list").subagents;
    assert_eq!(list.len(), 5);
    let mut names = HashMap::new();
    for row in list.iter() {
        assert_eq!(row.status, SubagentStatus::Completed, "{}", row.name);
        assert_eq!((row.usage, row.subtree_usage), expected[&*row.name], "the list row of {}", row.name);
        names.insert(row.subagent_id, row.name.clone());
        let awaited = session.await_result(row.subagent_id).await.expect("await");
        assert_eq!((awaited.usage, awaited.subtree_usage), expected[&*row.name], "the await reply of {}", row.name);
    }

    let mut completed = 0;
    while let Ok(event) = events.try_recv() {
        if event.kind != EventKind::Completed {
            assert!(event.usage.is_none() || event.kind.ends_task(), "{:?} carries no usage", event.kind);
            continue;
        }
        let usage = event.usage.expect("a completed event carries usage");
        let name = &names[&event.subagent_id];
        assert_eq!((usage.own, usage.subtree), expected[&**name], "the completed event of {name}");
        completed += 1;
    }
    assert_eq!(completed, 5);
}
