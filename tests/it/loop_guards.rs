//! A loop no model can wedge, against a fake model: a model awaiting itself
//! is told why and goes on; a model repeating a call, failing the same way,
//! or alternating two calls is refused, then ended `stuck:` with events;
//! `remind_budget` adds its note only when configured.

use crate::common::open;
use crate::common::TreeOps;
use crate::fake_openai::*;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use subagent_host::adapter::openai::{OpenAiAdapter, OpenAiConfig};
use subagent_host::config::{Limits, RetryConfig};
use subagent_host::protocol::wire::*;
use subagent_host::{AdapterRouter, Host, HostConfig, SubagentId, Tree};
use subagent_host::{Event, EventDetail, EventKind};
use tokio::sync::mpsc::UnboundedReceiver;

const GUARD: Duration = Duration::from_secs(30);

fn host(server: &FakeServer, limits: Limits) -> Host {
    let mut config = OpenAiConfig::new(server.base_url.clone());
    config.retry = RetryConfig { max_attempts: 2, initial_ms: 10, max_ms: 20, ..Default::default() }.into();
    let adapter = Arc::new(OpenAiAdapter::new(config).expect("adapter"));
    let router = AdapterRouter::default().route("fake-*", adapter).expect("route");
    Host::new(HostConfig { router, limits, ..Default::default() })
}

/// Runs one top-level model task to its end.
async fn run(session: &Tree, instruction: &str) -> (SubagentId, AwaitResponse) {
    let mut agent = SubagentConfig::new("looper", "fake-model");
    agent.capabilities = vec!["multi_agent".into()];
    agent.max_steps = 30;
    let request = SpawnRequest { agent, parent_agent_id: None, root_agent_id: None };
    let id = session.spawn(request).await.expect("spawn").subagent_id;
    assert!(session.delegate(id, TaskDefinition::new("task", instruction)).await.expect("delegate").accepted);
    let done = tokio::time::timeout(GUARD, session.await_result(id)).await.expect("task ends").expect("await");
    (id, done)
}

/// The `stuck` events received: (pattern, tool, ended).
fn stuck_events(events: &mut UnboundedReceiver<Event>) -> Vec<(String, String, bool)> {
    let mut seen = Vec::new();
    while let Ok(event) = events.try_recv() {
        if event.kind == EventKind::Stuck {
            let EventDetail::Noted(fields) = &event.detail else { panic!("stuck without fields: {event:?}") };
            seen.push((
                fields["pattern"].as_str().unwrap().to_owned(),
                fields["tool"].as_str().unwrap().to_owned(),
                fields["ended"].as_bool().unwrap(),
            ));
        }
    }
    seen
}

/// What the model was told for each of its calls, oldest first.
fn last_outputs(server: &FakeServer) -> Vec<Value> {
    server.requests().last().map(|seen| tool_outputs(&seen.body)).unwrap_or_default()
}

#[actix_rt::test]
async fn a_model_awaiting_itself_is_told_why_at_once_and_goes_on_to_answer() {
    let server = FakeServer::start(|body, _| {
        if tool_outputs(body).is_empty() {
            let system = system_prompt(body);
            let own = system.split("Your subagent id is ").nth(1).unwrap_or_default()[..12].to_owned();
            call_tools(None, &[("await_subagent", json!({ "subagent_id": own }))])
        } else {
            answer("done without waiting")
        }
    });
    let host = host(&server, Limits::default());
    let (session, _events) = open(&host);
    let started = std::time::Instant::now();
    let (_, done) = run(&session, "wait for yourself").await;
    assert_eq!(done.status, SubagentStatus::Completed, "{done:?}");
    assert!(started.elapsed() < Duration::from_secs(5), "no wait for a timeout: {:?}", started.elapsed());
    let told = last_outputs(&server);
    let error = told[0]["error"].as_str().expect("the refusal as the tool's answer");
    assert!(
        error.contains("cannot wait for itself") && error.contains("Wait only for subagents you spawned"),
        "{error}"
    );
}

#[actix_rt::test]
async fn a_repeated_call_is_refused_then_the_task_ends_stuck_with_events() {
    let server = FakeServer::start(|_, _| call_tools(None, &[("list_subagents", json!({}))]));
    let host = host(&server, Limits::default());
    let (session, mut events) = open(&host);
    let (_, done) = run(&session, "loop").await;
    assert_eq!(done.status, SubagentStatus::Failed);
    let error = done.error.expect("an error");
    assert!(error.starts_with("stuck: `list_subagents`"), "{error}");
    // Three made, three refused, the seventh ends it.
    assert_eq!(server.requests().len(), 7);
    let told = last_outputs(&server);
    assert_eq!(told.len(), 6);
    assert!(told[..3].iter().all(|out| out.get("subagents").is_some()), "made: {told:?}");
    for out in &told[3..] {
        assert!(out["error"].as_str().unwrap().starts_with("repeated call: `list_subagents`"), "{out}");
    }
    let stuck = stuck_events(&mut events);
    let expected: Vec<(String, String, bool)> = [false, false, false, true]
        .into_iter()
        .map(|ended| ("repeated_call".to_owned(), "list_subagents".to_owned(), ended))
        .collect();
    assert_eq!(stuck, expected);
}

#[actix_rt::test]
async fn the_same_failure_with_other_arguments_and_two_alternating_calls_are_caught() {
    // Each call names another path; each fails the same way (no such tool).
    let server = FakeServer::start(|_, n| call_tools(None, &[("fs__read", json!({ "path": format!("/{n}") }))]));
    let host = host(&server, Limits { max_repeated_tool_calls: 2, ..Limits::default() });
    let (session, mut events) = open(&host);
    let (_, done) = run(&session, "fail").await;
    assert!(done.error.as_deref().unwrap_or_default().starts_with("stuck: `fs__read` failed the same way 2 times"));
    assert_eq!(stuck_events(&mut events).last(), Some(&("repeated_error".to_owned(), "fs__read".to_owned(), true)));

    let server = FakeServer::start(|_, n| {
        let tool = if n % 2 == 0 { "list_subagents" } else { "read_mailbox" };
        call_tools(None, &[(tool, json!({}))])
    });
    let host = self::host(&server, Limits { max_repeated_tool_calls: 2, ..Limits::default() });
    let (session, mut events) = open(&host);
    let (_, done) = run(&session, "alternate").await;
    assert!(done.error.as_deref().unwrap_or_default().starts_with("stuck: `list_subagents` and `read_mailbox`"));
    let patterns: Vec<String> = stuck_events(&mut events).into_iter().map(|(pattern, ..)| pattern).collect();
    assert_eq!(patterns, ["alternation"; 3]);
}

#[actix_rt::test]
async fn zero_disables_the_guard_and_the_step_limit_ends_the_loop_instead() {
    let server = FakeServer::start(|_, _| call_tools(None, &[("list_subagents", json!({}))]));
    let host = host(&server, Limits { max_repeated_tool_calls: 0, ..Limits::default() });
    let (session, mut events) = open(&host);
    let (_, done) = run(&session, "loop").await;
    assert!(done.error.as_deref().unwrap_or_default().starts_with("max_steps exceeded"), "{done:?}");
    assert!(stuck_events(&mut events).is_empty());
}

#[actix_rt::test]
async fn remind_budget_adds_one_note_from_the_second_call_only_when_configured() {
    for remind in [false, true] {
        let server = FakeServer::start(|body, _| match tool_outputs(body).len() {
            0 | 1 => call_tools(None, &[("list_subagents", json!({ "n": tool_outputs(body).len() }))]),
            _ => answer("done"),
        });
        let host = host(&server, Limits { remind_budget: remind, ..Limits::default() });
        let (session, _events) = open(&host);
        let (_, done) = run(&session, "three calls").await;
        assert_eq!(done.status, SubagentStatus::Completed);
        let notes: Vec<Vec<String>> = server
            .requests()
            .iter()
            .map(|seen| {
                messages(&seen.body)
                    .iter()
                    .skip(1)
                    .filter(|m| m["role"] == "system")
                    .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
                    .collect()
            })
            .collect();
        if !remind {
            assert!(notes.iter().all(Vec::is_empty), "{notes:?}");
            continue;
        }
        assert!(notes[0].is_empty(), "none before the first call");
        for (at, note) in notes.iter().enumerate().skip(1) {
            assert_eq!(note.len(), 1, "one note, never kept: {notes:?}");
            let step = at + 1;
            assert!(note[0].starts_with(&format!("Step {step} of at most 30: {} more", 30 - step)), "{note:?}");
            assert!(note[0].contains("Time left:"), "{note:?}");
        }
    }
}

#[actix_rt::test]
async fn past_max_offered_the_mcp_tools_wait_behind_find_tools_and_descriptions_are_cut() {
    use subagent_host::adapter::openai::OfferLimits;
    use subagent_host::config::FileConfig;
    use subagent_host::ToolHost;

    let dir = std::env::temp_dir().join(format!("subagentd-find-tools-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("notes.txt"), "found words").unwrap();
    let toml = format!(
        "[[mcp_servers]]\nname = \"fs\"\ntransport = \"stdio\"\ncommand = \"node\"\nargs = [\"{}\", \"{}\"]\n",
        crate::mcp_tools::npm_server("server-filesystem"),
        dir.display()
    );
    let tools = Arc::new(ToolHost::new(FileConfig::parse(&toml).unwrap().mcp_servers));
    tools.start();
    let file = dir.join("notes.txt").display().to_string();
    let server = FakeServer::start(move |body, _| match tool_outputs(body).len() {
        0 => call_tools(None, &[("find_tools", json!({ "query": "read a text file" }))]),
        1 => call_tools(None, &[("fs__read_text_file", json!({ "path": file }))]),
        _ => answer(&messages(body).iter().rev().find(|m| m["role"] == "tool").unwrap()["content"].to_string()),
    });
    let mut config = OpenAiConfig::new(server.base_url.clone());
    config.tools = tools.clone();
    config.offer = OfferLimits { max_offered: 5, max_description_chars: 30 };
    let router = AdapterRouter::default().route("fake-*", Arc::new(OpenAiAdapter::new(config).unwrap())).unwrap();
    let host = Host::new(HostConfig { router, ..Default::default() });
    let (session, _events) = open(&host);
    // Wait for the server's tool list before the task looks at it.
    let server_state = tools.shared_servers()[0].clone();
    crate::common::eventually("the filesystem server is ready", GUARD, || {
        std::future::ready((server_state.state() == subagent_host::ServerState::Ready).then_some(()))
    })
    .await;
    let mut agent = SubagentConfig::new("finder", "fake-model");
    agent.tool_scope = ToolScope::Shared;
    let request = SpawnRequest { agent, parent_agent_id: None, root_agent_id: None };
    let id = session.spawn(request).await.unwrap().subagent_id;
    assert!(session.delegate(id, TaskDefinition::new("t", "read notes")).await.unwrap().accepted);
    let done = tokio::time::timeout(GUARD, session.await_result(id)).await.unwrap().unwrap();
    assert_eq!(done.status, SubagentStatus::Completed, "{done:?}");

    let bodies: Vec<Value> = server.requests().into_iter().map(|seen| seen.body).collect();
    let first = offered_tools(&bodies[0]);
    assert!(first.contains(&"find_tools".to_owned()), "{first:?}");
    assert!(!first.iter().any(|name| name.starts_with("fs__")), "held back: {first:?}");
    let found = &tool_outputs(&bodies[1])[0]["tools"];
    assert_eq!(found[0]["name"], "fs__read_text_file", "the best match first: {found}");
    let second = offered_tools(&bodies[1]);
    assert!(second.contains(&"fs__read_text_file".to_owned()), "offered once found: {second:?}");
    assert!(second.iter().filter(|name| name.starts_with("fs__")).count() <= 8);
    for tool in bodies[1]["tools"].as_array().unwrap() {
        let name = tool["function"]["name"].as_str().unwrap();
        if name.starts_with("fs__") {
            let description = tool["function"]["description"].as_str().unwrap();
            assert!(description.chars().count() <= 31, "{name}: cut at 30 characters: {description}");
        }
    }
    let told: Vec<String> =
        messages(&bodies[2]).iter().filter(|m| m["role"] == "tool").map(|m| m["content"].to_string()).collect();
    assert!(told[1].contains("found words"), "the found tool was called: {told:?}");
}
