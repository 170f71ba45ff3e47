//! A route's model settings against a fake model server: every key goes
//! out as set (and `max_tokens` even when not), a subagent's
//! `metadata.model_settings` overrides its route, a token budget caps
//! `max_tokens`, `request_timeout_ms` drops a call that hangs and names
//! itself, and a bad value stops start-up naming the route.

use crate::common::open;
use crate::common::TreeOps;
use crate::fake_openai::*;
use serde_json::json;
use std::time::{Duration, Instant};
use subagent_host::adapter::build_route;
use subagent_host::config::FileConfig;
use subagent_host::protocol::wire::*;
use subagent_host::{AdapterRouter, Host, HostConfig, Tree};

const GUARD: Duration = Duration::from_secs(30);

/// A host whose `fake-*` route is `[[routes]]` with `keys`.
fn host(server: &FakeServer, keys: &str) -> Host {
    let text =
        format!("[[routes]]\nmodel = \"fake-*\"\nadapter = \"openai\"\nbase_url = \"{}\"\n{keys}\n", server.base_url);
    let file = FileConfig::parse(&text).expect("config parses");
    let adapter = build_route(&file.routes[0]).expect("route builds");
    let router = AdapterRouter::default().route("fake-*", adapter).expect("route");
    Host::new(HostConfig { router, ..Default::default() })
}

async fn run(session: &Tree, agent: SubagentConfig) -> AwaitResponse {
    let request = SpawnRequest { agent, parent_agent_id: None, root_agent_id: None };
    let id = session.spawn(request).await.expect("spawn").subagent_id;
    assert!(session.delegate(id, TaskDefinition::new("t", "say hi")).await.expect("delegate").accepted);
    tokio::time::timeout(GUARD, session.await_result(id)).await.expect("task ends").expect("await")
}

#[actix_rt::test]
async fn every_route_setting_goes_out_and_a_subagent_overrides_its_route() {
    let server = FakeServer::start(|_, _| answer("hi"));
    let keys = "max_tokens = 256\ntemperature = 0.0\ntop_p = 0.5\nseed = 42\nstop = [\"END\"]\n\
                parallel_tool_calls = false\nextra_body = { cache_prompt = true, model = \"not-this\" }";
    let host = host(&server, keys);
    let (session, _events) = open(&host);
    assert_eq!(run(&session, SubagentConfig::new("a", "fake-model")).await.status, SubagentStatus::Completed);
    let mut own = SubagentConfig::new("b", "fake-model");
    own.metadata.insert("model_settings".into(), json!({ "max_tokens": 9, "temperature": 1.5, "stop": ["X"] }));
    assert_eq!(run(&session, own).await.status, SubagentStatus::Completed);

    let bodies: Vec<_> = server.requests().into_iter().map(|seen| seen.body).collect();
    let route = &bodies[0];
    assert_eq!(route["max_tokens"], 256);
    assert_eq!(route["temperature"], 0.0);
    assert_eq!(route["top_p"], 0.5);
    assert_eq!(route["seed"], 42);
    assert_eq!(route["stop"], json!(["END"]));
    assert_eq!(route["cache_prompt"], true, "extra_body merged");
    assert_eq!(route["model"], "fake-model", "the adapter's own fields win over extra_body");
    match route.get("tools") {
        Some(_) => assert_eq!(route["parallel_tool_calls"], false),
        None => assert!(route.get("parallel_tool_calls").is_none(), "sent only with tools"),
    }
    let own = &bodies[1];
    assert_eq!((own["max_tokens"].clone(), own["temperature"].clone()), (json!(9), json!(1.5)));
    assert_eq!((own["stop"].clone(), own["seed"].clone()), (json!(["X"]), json!(42)), "the rest from the route");

    let mut bad = SubagentConfig::new("c", "fake-model");
    bad.metadata.insert("model_settings".into(), json!({ "temperature": 9 }));
    let failed = run(&session, bad).await;
    assert_eq!(failed.status, SubagentStatus::Failed);
    assert!(failed.error.unwrap_or_default().contains("metadata.model_settings: temperature 9"));
}

#[actix_rt::test]
async fn max_tokens_defaults_to_4096_and_a_token_budget_caps_it() {
    let server = FakeServer::start(|_, _| answer("hi"));
    let host = host(&server, "");
    let (session, _events) = open(&host);
    run(&session, SubagentConfig::new("a", "fake-model")).await;
    let mut budgeted = SubagentConfig::new("b", "fake-model");
    budgeted.metadata.insert("budget".into(), json!({ "max_tokens": 300 }));
    run(&session, budgeted).await;
    let bodies: Vec<_> = server.requests().into_iter().map(|seen| seen.body).collect();
    assert_eq!(bodies[0]["max_tokens"], 4096, "a runaway model is bounded by default");
    assert_eq!(bodies[1]["max_tokens"], 300, "no more than the budget has left");
}

#[actix_rt::test]
async fn a_call_past_request_timeout_ms_is_dropped_retried_and_named() {
    let mut server = FakeServer::start(|_, _| Reply::Hang);
    let host = host(&server, "request_timeout_ms = 200\nretry = { max_attempts = 2, initial_ms = 10, max_ms = 10 }");
    let (session, _events) = open(&host);
    let started = Instant::now();
    let done = run(&session, SubagentConfig::new("a", "fake-model")).await;
    assert_eq!(done.status, SubagentStatus::Failed);
    let error = done.error.unwrap_or_default();
    assert!(error.contains("no reply within 200 ms (request_timeout_ms)"), "{error}");
    assert!(started.elapsed() < Duration::from_secs(5), "two tries of 200 ms: {:?}", started.elapsed());
    assert_eq!(server.requests().len(), 2, "retried like a transport error");
    assert!(server.hang_closed(Duration::from_secs(2)).await, "the dropped call's connection was closed");
}

#[test]
fn a_bad_setting_stops_start_up_naming_the_route_and_the_key() {
    for (keys, named) in [
        ("temperature = 2.5", "temperature 2.5"),
        ("top_p = 0.0", "top_p"),
        ("max_tokens = 0", "max_tokens"),
        ("request_timeout_ms = 0", "request_timeout_ms"),
        ("stop = [\"a\", \"b\", \"c\", \"d\", \"e\"]", "stop"),
    ] {
        let text = format!("[[routes]]\nmodel = \"gpt-*\"\nadapter = \"openai\"\nbase_url = \"http://x\"\n{keys}\n");
        let file = FileConfig::parse(&text).expect("parses");
        let error = build_route(&file.routes[0]).err().unwrap_or_default();
        assert!(error.starts_with("route `gpt-*`: ") && error.contains(named), "{keys}: {error}");
    }
    let scripted = FileConfig::parse("[[routes]]\nmodel = \"x\"\nadapter = \"scripted\"\nseed = 1\n").unwrap();
    assert!(build_route(&scripted.routes[0]).err().unwrap_or_default().contains("does not take `seed`"));
}
