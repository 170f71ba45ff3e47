//! The openai adapter against a fake chat-completions server on loopback:
//! nesting through tools, max_steps, retries, upstream errors, cancel and
//! terminate aborting the in-flight request, memory and tool scopes, the
//! mailbox, and the API key staying out of events and errors.

use crate::common::eventually;
use crate::common::TreeOps;
use crate::fake_openai::*;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use subagent_host::adapter::build_route;
use subagent_host::adapter::openai::{OpenAiAdapter, OpenAiConfig};
use subagent_host::config::Limits;
use subagent_host::config::{FileConfig, RetryConfig, RouteConfig};
use subagent_host::protocol::wire::*;
use subagent_host::AdapterRouter;
use subagent_host::{Event, NullSink};
use subagent_host::{Host, HostConfig, SubagentId, Tree};
use tokio::sync::mpsc;

/// Failure guard for anything that should finish promptly.
const GUARD: Duration = Duration::from_secs(30);

fn adapter(server: &FakeServer, api_key_env: Option<&str>) -> Arc<OpenAiAdapter> {
    let mut config = OpenAiConfig::new(server.base_url.clone());
    config.api_key_env = api_key_env.map(str::to_owned);
    config.retry = RetryConfig { max_attempts: 5, initial_ms: 10, max_ms: 50, ..Default::default() }.into();
    Arc::new(OpenAiAdapter::new(config).expect("adapter"))
}

fn host(server: &FakeServer, limits: Limits) -> Host {
    let router = AdapterRouter::default().route("fake-*", adapter(server, None)).expect("route");
    Host::new(HostConfig { router, limits, ..Default::default() })
}

fn agent(system: &str) -> SubagentConfig {
    let mut config = SubagentConfig::new(system.trim_start_matches("AGENT:"), "fake-model");
    config.system_prompt = Some(system.to_owned());
    config
}

async fn spawn(session: &Tree, config: SubagentConfig) -> SubagentId {
    let request = SpawnRequest { agent: config, parent_agent_id: None, root_agent_id: None };
    session.spawn(request).await.expect("spawn").subagent_id
}

/// Spawns a top-level subagent, delegates `instruction`, awaits the end.
async fn run(session: &Tree, config: SubagentConfig, instruction: &str) -> (SubagentId, AwaitResponse) {
    let id = spawn(session, config).await;
    let reply = session.delegate(id, TaskDefinition::new("task", instruction)).await.expect("delegate");
    assert!(reply.accepted);
    let done = tokio::time::timeout(GUARD, session.await_result(id)).await.expect("task ends").expect("await");
    (id, done)
}

fn requests_of(server: &FakeServer, system: &str) -> Vec<Value> {
    server.requests().into_iter().filter(|seen| system_prompt(&seen.body).starts_with(system)).map(|s| s.body).collect()
}

fn mentions(body: &Value, text: &str) -> bool {
    messages(body).iter().skip(1).any(|m| m.to_string().contains(text))
}

/// The boss spawns the listed children (name, memory scope) at step 1,
/// awaits them all at step 2 (saying `AFTER-MARKER`), answers at step 3.
fn boss_and_children(children: &'static [(&'static str, &'static str)]) -> FakeServer {
    FakeServer::start(move |body, _| {
        let system = system_prompt(body);
        if !system.starts_with("AGENT:boss") {
            let name = system.trim_start_matches("AGENT:").split_whitespace().next().unwrap_or("").to_owned();
            return answer(&format!("result of {name}"));
        }
        let outputs = tool_outputs(body);
        if outputs.is_empty() {
            let calls: Vec<(&str, Value)> = children
                .iter()
                .map(|(name, scope)| {
                    (
                        "spawn_subagent",
                        json!({
                            "name": name, "instruction": format!("work as {name}"),
                            "system_prompt": format!("AGENT:{name}"), "memory_scope": scope,
                        }),
                    )
                })
                .collect();
            call_tools(None, &calls)
        } else if outputs.len() == children.len() {
            let calls: Vec<(&str, Value)> =
                outputs.iter().map(|out| ("await_subagent", json!({ "subagent_id": out["subagent_id"] }))).collect();
            call_tools(Some("AFTER-MARKER"), &calls)
        } else {
            let results: Vec<String> = outputs[children.len()..]
                .iter()
                .map(|out| out["result"]["summary"].as_str().unwrap_or("?").to_owned())
                .collect();
            answer(&format!("combined: {}", results.join(" + ")))
        }
    })
}

#[actix_rt::test]
async fn a_model_spawns_two_children_awaits_both_and_answers_from_their_results() {
    let server = boss_and_children(&[("worker-a", "shared"), ("worker-b", "shared")]);
    let host = host(&server, Limits::default());
    let session = host.open_tree(Arc::new(NullSink));
    let mut boss = agent("AGENT:boss");
    boss.capabilities = vec!["multi_agent".into()];
    let (boss_id, done) = run(&session, boss, "split the work").await;

    assert_eq!(done.status, SubagentStatus::Completed, "{:?}", done.error);
    let result = done.result.expect("result").to_object();
    assert_eq!(result["summary"], "combined: result of worker-a + result of worker-b");
    assert_eq!(result["steps"], 3);
    assert_eq!(result["usage"], json!({"prompt_tokens": 30, "completion_tokens": 15, "total_tokens": 45}));

    let list = session.list().await.expect("list").subagents;
    let children: Vec<_> =
        list.iter().filter(|info| info.parent_agent_id.as_deref() == Some(&boss_id.to_string())).collect();
    assert_eq!(children.len(), 2);
    for child in children {
        assert_eq!(child.depth, 1);
        assert_eq!(child.status, SubagentStatus::Completed);
        assert!(child.name.starts_with("worker-"));
    }
}

#[actix_rt::test]
async fn memory_scopes_decide_what_a_child_sends_upstream() {
    let server = boss_and_children(&[
        ("child-shared", "shared"),
        ("child-snapshot", "snapshot"),
        ("child-isolated", "isolated"),
    ]);
    let host = host(&server, Limits::default());
    let session = host.open_tree(Arc::new(NullSink));
    let mut boss = agent("AGENT:boss");
    boss.capabilities = vec!["multi_agent".into()];
    let (_, done) = run(&session, boss, "PARENT-SECRET: plan the work").await;
    assert_eq!(done.status, SubagentStatus::Completed, "{:?}", done.error);

    let shared = requests_of(&server, "AGENT:child-shared");
    let snapshot = requests_of(&server, "AGENT:child-snapshot");
    let isolated = requests_of(&server, "AGENT:child-isolated");
    assert_eq!((shared.len(), snapshot.len(), isolated.len()), (1, 1, 1));
    assert!(mentions(&shared[0], "PARENT-SECRET"), "shared child sees the parent's conversation");
    assert!(mentions(&snapshot[0], "PARENT-SECRET"), "snapshot child sees the parent's conversation");
    assert!(!mentions(&snapshot[0], "AFTER-MARKER"), "snapshot child does not see what came after the spawn");
    assert!(!mentions(&isolated[0], "PARENT-SECRET"), "isolated child sees nothing of its parent");
    assert!(mentions(&isolated[0], "work as child-isolated"));
}

#[actix_rt::test]
async fn a_model_that_never_stops_calling_tools_fails_at_max_steps() {
    let server = FakeServer::start(|_, _| call_tools(None, &[("list_subagents", json!({}))]));
    let host = host(&server, Limits::default());
    let session = host.open_tree(Arc::new(NullSink));
    let mut config = agent("AGENT:looper");
    config.max_steps = 3;
    let (_, done) = run(&session, config, "loop forever").await;
    assert_eq!(done.status, SubagentStatus::Failed);
    assert!(done.error.as_deref().unwrap_or("").contains("max_steps"), "{:?}", done.error);
    assert_eq!(server.requests().len(), 3);
}

#[actix_rt::test]
async fn a_429_and_a_503_are_retried_then_the_task_completes() {
    let server = FakeServer::start(|_, index| match index {
        0 => Reply::Status { code: 429, retry_after: Some(0), body: json!({"error": {"message": "slow down"}}) },
        1 => Reply::Status { code: 503, retry_after: None, body: json!({"error": "overloaded"}) },
        _ => answer("fine"),
    });
    let host = host(&server, Limits::default());
    let session = host.open_tree(Arc::new(NullSink));
    let (_, done) = run(&session, agent("AGENT:patient"), "hello").await;
    assert_eq!(done.status, SubagentStatus::Completed, "{:?}", done.error);
    let result = done.result.expect("result").to_object();
    assert_eq!(result["summary"], "fine");
    assert_eq!(result["steps"], 1);
    assert_eq!(server.requests().len(), 3);
}

/// A server's `Retry-After` is waited out in both of its forms, although the
/// computed backoff (10 ms here) is far shorter. The fake server times the
/// requests it gets.
#[actix_rt::test]
async fn retry_after_is_honoured_as_seconds_and_as_an_http_date() {
    let server = FakeServer::start(|_, index| match index {
        0 => Reply::Status { code: 429, retry_after: Some(1), body: json!({"error": "slow down"}) },
        1 => {
            // Two seconds ahead, cut to whole seconds: at least one second from now.
            let at = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(2));
            Reply::RetryAfter { code: 503, header: at, body: json!({"error": "busy"}) }
        }
        _ => answer("fine"),
    });
    let host = host(&server, Limits::default());
    let session = host.open_tree(Arc::new(NullSink));
    let (_, done) = run(&session, agent("AGENT:patient"), "hello").await;
    assert_eq!(done.status, SubagentStatus::Completed, "{:?}", done.error);

    let seen = server.requests();
    assert_eq!(seen.len(), 3);
    let seconds_gap = seen[1].at - seen[0].at;
    let date_gap = seen[2].at - seen[1].at;
    assert!(seconds_gap >= Duration::from_secs(1), "Retry-After: 1 waited only {seconds_gap:?}");
    assert!(date_gap >= Duration::from_secs(1), "Retry-After: <date> waited only {date_gap:?}");
}

#[actix_rt::test]
async fn retries_are_bounded() {
    let server = FakeServer::start(|_, _| Reply::Status { code: 500, retry_after: None, body: json!({}) });
    let host = host(&server, Limits::default());
    let session = host.open_tree(Arc::new(NullSink));
    let (_, done) = run(&session, agent("AGENT:doomed"), "hello").await;
    assert_eq!(done.status, SubagentStatus::Failed);
    assert!(done.error.as_deref().unwrap_or("").contains("retries"), "{:?}", done.error);
    assert_eq!(server.requests().len(), 5, "one call and four retries");
}

/// A route to a server that is not running: the task's error names the
/// server's URL and the route, so the first failure a newcomer meets says
/// what to fix.
#[actix_rt::test]
async fn a_dead_model_server_fails_naming_its_url_and_its_route() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut config = OpenAiConfig::new(format!("http://127.0.0.1:{port}/v1"));
    config.route_model = Some("dead-*".into());
    config.retry = RetryConfig { max_attempts: 2, initial_ms: 10, max_ms: 10, ..Default::default() }.into();
    let adapter = Arc::new(OpenAiAdapter::new(config).expect("adapter"));
    let router = AdapterRouter::default().route("dead-*", adapter).expect("route");
    let host = Host::new(HostConfig { router, ..Default::default() });
    let session = host.open_tree(Arc::new(NullSink));
    let (_, done) = run(&session, SubagentConfig::new("doomed", "dead-model"), "hello").await;
    assert_eq!(done.status, SubagentStatus::Failed);
    let error = done.error.as_deref().unwrap_or("");
    assert!(error.contains(&format!("http://127.0.0.1:{port}/v1/chat/completions")), "names the URL: {error}");
    assert!(error.contains("route `dead-*`"), "names the route: {error}");
}

#[actix_rt::test]
async fn other_4xx_and_garbage_replies_fail_the_task_with_a_clear_error() {
    let server = FakeServer::start(|body, _| {
        if system_prompt(body).starts_with("AGENT:bad-request") {
            Reply::Status { code: 400, retry_after: None, body: json!({"error": {"message": "model `x` not found"}}) }
        } else if system_prompt(body).starts_with("AGENT:garbage") {
            Reply::Garbage
        } else {
            Reply::Json(json!({"choices": []}))
        }
    });
    let host = host(&server, Limits::default());
    let session = host.open_tree(Arc::new(NullSink));
    let (_, done) = run(&session, agent("AGENT:bad-request"), "hello").await;
    assert_eq!(done.status, SubagentStatus::Failed);
    let error = done.error.as_deref().unwrap_or("");
    assert!(error.contains("400") && error.contains("model `x` not found"), "{error}");
    let (_, done) = run(&session, agent("AGENT:garbage"), "hello").await;
    assert_eq!(done.status, SubagentStatus::Failed);
    assert!(done.error.as_deref().unwrap_or("").contains("not JSON"), "{:?}", done.error);
    let (_, done) = run(&session, agent("AGENT:empty"), "hello").await;
    assert_eq!(done.status, SubagentStatus::Failed);
    assert!(done.error.as_deref().unwrap_or("").contains("choices"), "{:?}", done.error);
    assert!(session.is_open());
}

#[actix_rt::test]
async fn cancel_closes_the_hanging_request_within_the_grace_period() {
    let mut server = FakeServer::start(|_, _| Reply::Hang);
    let host = host(&server, Limits { cancel_grace_ms: 200, ..Default::default() });
    let session = host.open_tree(Arc::new(NullSink));
    let id = spawn(&session, agent("AGENT:stuck")).await;
    session.delegate(id, TaskDefinition::new("task", "think hard")).await.expect("delegate");
    assert!(server.wait_for_requests(1, GUARD).await, "the request reached the server");

    let stopped = tokio::time::timeout(GUARD, session.cancel(id)).await.expect("cancel ends").expect("cancel");
    assert_eq!(stopped, vec![id]);
    assert!(server.hang_closed(GUARD).await, "the server saw the connection closed");
    let done = session.await_result(id).await.expect("await");
    assert_eq!(done.status, SubagentStatus::Cancelled);
    assert_eq!(session.stats().tasks(), 0);
}

#[actix_rt::test]
async fn terminate_drops_the_in_flight_request() {
    let mut server = FakeServer::start(|_, _| Reply::Hang);
    let host = host(&server, Limits::default());
    let session = host.open_tree(Arc::new(NullSink));
    let id = spawn(&session, agent("AGENT:stuck")).await;
    session.delegate(id, TaskDefinition::new("task", "think hard")).await.expect("delegate");
    assert!(server.wait_for_requests(1, GUARD).await);

    tokio::time::timeout(GUARD, session.terminate(id)).await.expect("terminate ends").expect("terminate");
    assert!(server.hang_closed(GUARD).await, "the server saw the connection closed");
    assert_eq!(session.await_result(id).await.expect("await").status, SubagentStatus::Terminated);
}

#[actix_rt::test]
async fn the_api_key_is_sent_but_never_appears_in_events_or_errors() {
    const VAR: &str = "SUBAGENT_HOST_TEST_OPENAI_KEY";
    const KEY: &str = "sk-fake-SECRET-4242";
    std::env::set_var(VAR, KEY);
    let server = FakeServer::start(|_, index| {
        let body = json!({"error": {"message": format!("Incorrect API key provided: {KEY}")}});
        let code = if index == 0 { 429 } else { 401 };
        Reply::Status { code, retry_after: Some(0), body }
    });
    let router = AdapterRouter::default().route("fake-*", adapter(&server, Some(VAR))).expect("route");
    let host = Host::new(HostConfig { router, ..Default::default() });
    let (sink, mut events) = mpsc::unbounded_channel::<Event>();
    let session = host.open_tree(Arc::new(sink));
    let (_, done) = run(&session, agent("AGENT:keyed"), "hello").await;

    assert_eq!(done.status, SubagentStatus::Failed);
    let error = done.error.as_deref().unwrap_or("");
    assert!(error.contains("401") && error.contains("[redacted]") && !error.contains(KEY), "{error}");
    let seen = server.requests();
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().all(|s| s.authorization.as_deref() == Some(&*format!("Bearer {KEY}"))));

    let mut count = 0;
    while let Ok(event) = events.try_recv() {
        count += 1;
        let wire = serde_json::to_string(&subagent_host::WireEvent(&event)).expect("wire");
        assert!(!wire.contains(KEY) && !format!("{event:?}").contains(KEY), "key leaked: {wire}");
    }
    assert!(count >= 3, "spawned, delegated, progress (retry), failed");
}

#[actix_rt::test]
async fn a_missing_key_variable_fails_the_task_without_calling_the_server() {
    let server = FakeServer::start(|_, _| answer("unreachable"));
    let router = AdapterRouter::default()
        .route("fake-*", adapter(&server, Some("SUBAGENT_HOST_TEST_UNSET_KEY")))
        .expect("route");
    let host = Host::new(HostConfig { router, ..Default::default() });
    let session = host.open_tree(Arc::new(NullSink));
    let (_, done) = run(&session, agent("AGENT:keyless"), "hello").await;
    assert_eq!(done.status, SubagentStatus::Failed);
    assert!(done.error.as_deref().unwrap_or("").contains("SUBAGENT_HOST_TEST_UNSET_KEY"));
    assert!(server.requests().is_empty());
}

#[actix_rt::test]
async fn tool_scope_and_capabilities_decide_the_offered_tools() {
    let server = FakeServer::start(|_, _| answer("ok"));
    let host = host(&server, Limits::default());
    let session = host.open_tree(Arc::new(NullSink));

    let mut multi = agent("AGENT:multi");
    multi.capabilities = vec!["multi_agent".into()];
    multi.tool_scope = ToolScope::Shared;
    let mut isolated = agent("AGENT:isolated");
    isolated.tool_scope = ToolScope::Isolated;
    isolated.metadata.insert("tools".into(), json!(["list_subagents", "spawn_subagent", "send_message"]));
    let mut bare = agent("AGENT:bare");
    bare.tool_scope = ToolScope::Isolated;
    for config in [agent("AGENT:restricted"), multi, isolated, bare] {
        let (_, done) = run(&session, config, "hello").await;
        assert_eq!(done.status, SubagentStatus::Completed);
    }

    let offered = |system: &str| offered_tools(&requests_of(&server, system)[0]);
    assert_eq!(
        offered("AGENT:restricted"),
        ["delegate_task", "await_subagent", "send_message", "read_mailbox", "list_subagents", "ask_user"]
    );
    assert_eq!(offered("AGENT:multi")[0], "spawn_subagent");
    assert_eq!(offered("AGENT:multi").len(), 7);
    assert_eq!(offered("AGENT:isolated"), ["send_message", "list_subagents"]);
    assert!(requests_of(&server, "AGENT:bare")[0].get("tools").is_none());
}

/// A boss that spawns the listed children (name, tool_scope, tools) at its
/// first step and answers at its second; every child answers at once.
fn spawning_boss(children: &'static [(&'static str, &'static str, &'static [&'static str])]) -> FakeServer {
    FakeServer::start(move |body, _| {
        if !system_prompt(body).starts_with("AGENT:boss") {
            return answer("child done");
        }
        if !tool_outputs(body).is_empty() {
            return answer("spawned them");
        }
        let calls: Vec<(&str, Value)> = children
            .iter()
            .map(|(name, scope, tools)| {
                let args = json!({
                    "name": name, "instruction": "work", "system_prompt": format!("AGENT:{name}"),
                    "tool_scope": scope, "tools": tools,
                });
                ("spawn_subagent", args)
            })
            .collect();
        call_tools(None, &calls)
    })
}

/// Runs `boss`, then waits until each of its `children` (system prompts)
/// called the model.
async fn run_boss(server: &FakeServer, session: &Tree, boss: SubagentConfig, children: &[&str]) {
    let (_, done) = run(session, boss, "spawn your children").await;
    assert_eq!(done.status, SubagentStatus::Completed, "{:?}", done.error);
    let outputs = tool_outputs(&requests_of(server, "AGENT:boss")[1]);
    assert!(outputs.iter().all(|out| out.get("subagent_id").is_some()), "{outputs:?}");
    eventually("every child called the model", GUARD, || {
        std::future::ready(children.iter().all(|child| !requests_of(server, child).is_empty()).then_some(()))
    })
    .await;
}

/// Regression: an `isolated` parent allowed only `spawn_subagent` could give
/// a `shared` child all six tools. A child's tools are always within its
/// parent's, whatever scope the model asks for.
#[actix_rt::test]
async fn a_model_spawned_child_never_gets_a_tool_its_parent_lacks() {
    let server = spawning_boss(&[
        ("kid-shared", "shared", &[]),
        ("kid-restricted", "restricted", &[]),
        ("kid-isolated", "isolated", &["spawn_subagent", "list_subagents"]),
    ]);
    let host = host(&server, Limits::default());
    let session = host.open_tree(Arc::new(NullSink));
    let mut boss = agent("AGENT:boss");
    boss.capabilities = vec!["multi_agent".into()];
    boss.tool_scope = ToolScope::Isolated;
    boss.metadata.insert("tools".into(), json!(["spawn_subagent"]));
    let kids = ["AGENT:kid-shared", "AGENT:kid-restricted", "AGENT:kid-isolated"];
    run_boss(&server, &session, boss, &kids).await;

    for system in ["AGENT:boss"].iter().chain(&kids) {
        assert_eq!(offered_tools(&requests_of(&server, system)[0]), ["spawn_subagent"], "{system}");
    }
}

/// `[policy] restricted_tools` of the config file reaches the adapter:
/// `restricted` is that allowlist ∩ the parent's tools, while `shared` is
/// the parent's tools (a top-level subagent's parent set is the allowlist).
#[actix_rt::test]
async fn restricted_is_the_policy_allowlist_and_shared_follows_the_parent() {
    let server = spawning_boss(&[("kid-shared", "shared", &[]), ("kid-restricted", "restricted", &[])]);
    let text = format!(
        "[policy]\nrestricted_tools = [\"spawn_subagent\", \"read_mailbox\", \"list_subagents\"]\n\n\
         [[routes]]\nmodel = \"fake-*\"\nadapter = \"openai\"\nbase_url = \"{}\"\n",
        server.base_url
    );
    let file = FileConfig::parse(&text).expect("config");
    let router = subagent_host::adapter::router(&file).expect("router");
    let host = Host::new(HostConfig { router, ..Default::default() });
    let session = host.open_tree(Arc::new(NullSink));

    let mut top = agent("AGENT:top-restricted");
    top.capabilities = vec!["multi_agent".into()];
    let mut top_shared = top.clone();
    top_shared.system_prompt = Some("AGENT:top-shared".into());
    top_shared.tool_scope = ToolScope::Shared;
    for config in [top, top_shared] {
        assert_eq!(run(&session, config, "hello").await.1.status, SubagentStatus::Completed);
    }
    let policy = ["spawn_subagent", "read_mailbox", "list_subagents"];
    assert_eq!(offered_tools(&requests_of(&server, "AGENT:top-restricted")[0]), policy);
    assert_eq!(offered_tools(&requests_of(&server, "AGENT:top-shared")[0]), policy);

    let mut boss = agent("AGENT:boss");
    boss.capabilities = vec!["multi_agent".into()];
    boss.tool_scope = ToolScope::Isolated;
    let boss_tools = ["spawn_subagent", "delegate_task", "send_message", "list_subagents"];
    boss.metadata.insert("tools".into(), json!(boss_tools));
    run_boss(&server, &session, boss, &["AGENT:kid-shared", "AGENT:kid-restricted"]).await;
    assert_eq!(offered_tools(&requests_of(&server, "AGENT:boss")[0]), boss_tools);
    assert_eq!(offered_tools(&requests_of(&server, "AGENT:kid-shared")[0]), boss_tools);
    assert_eq!(offered_tools(&requests_of(&server, "AGENT:kid-restricted")[0]), ["spawn_subagent", "list_subagents"]);

    let file = FileConfig::parse("[policy]\nrestricted_tools = [\"list_subagents\", \"rm_rf\"]\n").expect("parses");
    let error = subagent_host::adapter::router(&file).unwrap_err();
    assert!(error.contains("policy.restricted_tools") && error.contains("rm_rf"), "{error}");
}

#[actix_rt::test]
async fn mailbox_messages_reach_the_model() {
    let server = FakeServer::start(|_, index| match index {
        0 => call_tools(None, &[("read_mailbox", json!({"timeout_ms": 20_000}))]),
        _ => answer("read them"),
    });
    let host = host(&server, Limits::default());
    let session = host.open_tree(Arc::new(NullSink));
    let id = spawn(&session, agent("AGENT:reader")).await;
    let note = |text: &str| SubagentMessagePayload { kind: "note".into(), content: json!(text) };
    session.message("client".into(), id, note("hello-early")).await.expect("message");
    session.delegate(id, TaskDefinition::new("task", "read your mail")).await.expect("delegate");
    assert!(server.wait_for_requests(1, GUARD).await);
    session.message("client".into(), id, note("hello-late")).await.expect("message");
    let done = tokio::time::timeout(GUARD, session.await_result(id)).await.expect("ends").expect("await");
    assert_eq!(done.status, SubagentStatus::Completed, "{:?}", done.error);

    let seen = server.requests();
    assert!(mentions(&seen[0].body, "hello-early"), "queued message given before the first step");
    let outputs = tool_outputs(&seen[1].body);
    assert_eq!(outputs[0]["messages"][0]["content"], "hello-late");
    assert_eq!(outputs[0]["messages"][0]["from"], "client");
}

#[actix_rt::test]
async fn bad_tool_calls_are_answered_not_fatal() {
    let server = FakeServer::start(|_, index| match index {
        0 => call_tools(
            None,
            &[
                ("spawn_subagent", json!({"name": "x", "instruction": "y"})),
                ("await_subagent", json!({"subagent_id": 42})),
                ("send_message", json!({"to": "parent", "content": "hi"})),
                ("rm_rf", json!({})),
            ],
        ),
        _ => answer("recovered"),
    });
    let host = host(&server, Limits::default());
    let session = host.open_tree(Arc::new(NullSink));
    let (_, done) = run(&session, agent("AGENT:clumsy"), "try things").await;
    assert_eq!(done.status, SubagentStatus::Completed, "{:?}", done.error);
    let outputs = tool_outputs(&server.requests()[1].body);
    assert_eq!(outputs.len(), 4);
    assert!(outputs[0]["error"].as_str().unwrap_or("").contains("not available"), "no multi_agent: {}", outputs[0]);
    assert!(outputs[1]["error"].as_str().unwrap_or("").contains("bad arguments"), "{}", outputs[1]);
    assert!(outputs[2]["error"].as_str().unwrap_or("").contains("no parent"), "{}", outputs[2]);
    assert!(outputs[3]["error"].as_str().unwrap_or("").contains("not available"), "{}", outputs[3]);
}

/// The one route of a `[[routes]]` table with `model = "gpt-*"` and `keys`.
fn route(keys: &str) -> RouteConfig {
    let file = FileConfig::parse(&format!("[[routes]]\nmodel = \"gpt-*\"\n{keys}\n")).expect("config parses");
    file.routes.into_iter().next().expect("one route")
}

#[test]
fn build_route_makes_each_adapter_and_names_what_is_missing() {
    let error = |keys: &str| build_route(&route(keys)).err().unwrap_or_default();

    assert_eq!(error("adapter = \"openai\""), "route `gpt-*`: adapter openai needs base_url");
    assert_eq!(error("adapter = \"command\""), "route `gpt-*`: adapter command needs program");
    let unknown = FileConfig::parse("[[routes]]\nmodel = \"x\"\nadapter = \"llama\"\n").unwrap_err();
    assert!(unknown.contains("llama"), "{unknown}");
    assert!(error("adapter = \"scripted\"\nbase_url = \"http://x\"").contains("does not take `base_url`"));
    assert!(error("adapter = \"openai\"\nprogram = \"x\"").contains("does not take `program`"));
    assert!(error("adapter = \"openai\"\nbase_url = \"ftp://x\"").contains("http://"));
    if !cfg!(feature = "tls") {
        assert!(error("adapter = \"openai\"\nbase_url = \"https://api.example.com/v1\"").contains("tls"));
    }

    let openai = route(
        "adapter = \"openai\"\nbase_url = \"http://127.0.0.1:8080/v1\"\napi_key_env = \"OPENAI_API_KEY\"\nupstream_model = \"qwen2.5\"",
    );
    assert_eq!(build_route(&openai).expect("openai").name(), "openai");
    let command = route("adapter = \"command\"\nprogram = \"/bin/cat\"\nargs = [\"-u\"]");
    assert_eq!(build_route(&command).expect("command").name(), "command");
    assert_eq!(build_route(&route("adapter = \"scripted\"")).expect("scripted").name(), "scripted");
}

fn streaming_host(server: &FakeServer) -> Host {
    let mut config = OpenAiConfig::new(server.base_url.clone());
    config.stream = true;
    config.progress_every = Duration::from_millis(100);
    config.retry.max_retries = 0;
    let adapter = Arc::new(OpenAiAdapter::new(config).expect("adapter"));
    let router = AdapterRouter::default().route("fake-*", adapter).expect("route");
    Host::new(HostConfig { router, ..Default::default() })
}

fn progress_texts(events: &mut mpsc::UnboundedReceiver<Event>) -> Vec<(std::time::Instant, String)> {
    let mut texts = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let subagent_host::EventDetail::Progress(text) = event.detail {
            texts.push((std::time::Instant::now(), text));
        }
    }
    texts
}

#[actix_rt::test]
async fn a_streamed_reply_arrives_as_coalesced_progress_events_and_counts_its_usage() {
    let pieces: Vec<String> = (0..20).map(|n| format!("w{n} ")).collect();
    let served = pieces.clone();
    let server = FakeServer::start(move |_, _| {
        let pieces: Vec<&str> = served.iter().map(String::as_str).collect();
        stream_answer(&pieces, Duration::from_millis(20), 30, 20)
    });
    let host = streaming_host(&server);
    let (events_tx, mut events) = mpsc::unbounded_channel::<Event>();
    let session = host.open_tree(Arc::new(events_tx));
    // Progress events are timed as they come.
    let (id, done) = {
        let id = spawn(&session, agent("AGENT:talker")).await;
        assert!(session.delegate(id, TaskDefinition::new("t", "talk")).await.unwrap().accepted);
        let mut seen = Vec::new();
        let done = loop {
            tokio::select! {
                Some(event) = events.recv() => {
                    if let subagent_host::EventDetail::Progress(text) = &event.detail {
                        seen.push((std::time::Instant::now(), text.clone()));
                    }
                }
                done = session.await_result(id) => break done.unwrap(),
            }
        };
        seen.extend(progress_texts(&mut events));
        ((id, seen), done)
    };
    let (_id, seen) = id;
    assert_eq!(done.status, SubagentStatus::Completed, "{:?}", done.error);
    let whole: String = pieces.concat();
    assert_eq!(done.result.as_ref().unwrap().to_object()["summary"], whole.as_str());
    assert_eq!(seen.iter().map(|(_, text)| text.as_str()).collect::<String>(), whole, "every piece, in order, once");
    // About 400 ms of text in at most one event per 100 ms (and the rest at the end).
    assert!((2..=6).contains(&seen.len()), "{} progress events", seen.len());
    for pair in seen.windows(2).take(seen.len().saturating_sub(2)) {
        assert!(pair[1].0 - pair[0].0 >= Duration::from_millis(80), "coalesced: {:?}", pair[1].0 - pair[0].0);
    }
    assert_eq!(done.usage, Usage { input_tokens: 30, output_tokens: 20, cost_usd: None }, "usage from the last chunk");
    let body = &server.requests()[0].body;
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
}

#[actix_rt::test]
async fn a_fast_stream_cannot_flood_the_outbox() {
    let server = FakeServer::start(|_, _| {
        let pieces = vec!["x"; 2_000];
        stream_answer(&pieces, Duration::ZERO, 1, 1)
    });
    let host = streaming_host(&server);
    let (events_tx, mut events) = mpsc::unbounded_channel::<Event>();
    let session = host.open_tree(Arc::new(events_tx));
    let (_, done) = run(&session, agent("AGENT:fast"), "go").await;
    assert_eq!(done.status, SubagentStatus::Completed);
    let seen = progress_texts(&mut events);
    assert!(seen.len() <= 3, "2 000 pieces in {} progress events", seen.len());
    assert_eq!(seen.iter().map(|(_, text)| text.len()).sum::<usize>(), 2_000);
}

#[actix_rt::test]
async fn cancel_aborts_a_stream_at_once() {
    let mut server = FakeServer::start(|_, _| {
        let chunk = json!({ "choices": [{ "index": 0, "delta": { "content": "thinking" } }] });
        Reply::Stream { chunks: vec![chunk], gap: Duration::ZERO, then_hang: true }
    });
    let host = streaming_host(&server);
    let (events_tx, mut events) = mpsc::unbounded_channel::<Event>();
    let session = host.open_tree(Arc::new(events_tx));
    let id = spawn(&session, agent("AGENT:slow")).await;
    assert!(session.delegate(id, TaskDefinition::new("t", "think")).await.unwrap().accepted);
    // The first text arrives, then the stream stalls.
    let first_text = async {
        loop {
            match events.recv().await.expect("open") {
                Event { detail: subagent_host::EventDetail::Progress(text), .. } if text == "thinking" => break,
                _ => continue,
            }
        }
    };
    tokio::time::timeout(GUARD, first_text).await.expect("the first text in time");
    let cancelled_at = std::time::Instant::now();
    session.cancel(id).await.unwrap();
    assert!(server.hang_closed(Duration::from_secs(2)).await, "the stream's connection is closed");
    assert!(cancelled_at.elapsed() < Duration::from_secs(1), "at once, not after the grace period");
    assert_eq!(session.await_result(id).await.unwrap().status, SubagentStatus::Cancelled);
}

#[actix_rt::test]
async fn a_server_that_ignores_stream_is_read_as_one_reply() {
    let server = FakeServer::start(|_, _| answer("all at once"));
    let host = streaming_host(&server);
    let session = host.open_tree(Arc::new(NullSink));
    let (_, done) = run(&session, agent("AGENT:plain"), "go").await;
    assert_eq!(done.status, SubagentStatus::Completed, "{:?}", done.error);
    assert_eq!(done.result.unwrap().to_object()["summary"], "all at once");
}

/// HTTPS for real: a TLS fake model server with a certificate made now.
/// Trusted through the route's `ca_file`, the task completes over TLS;
/// without it the certificate is refused and the task fails saying so.
#[actix_rt::test]
async fn an_https_route_trusts_its_ca_file_and_refuses_an_unknown_certificate() {
    let (server, ca) = FakeServer::start_tls(|_, _| answer("over tls"));
    let toml = format!(
        "[[routes]]\nmodel = \"fake-*\"\nadapter = \"openai\"\nbase_url = \"{}\"\nca_file = \"{}\"\n",
        server.base_url,
        ca.0.display()
    );
    let file: FileConfig = toml::from_str(&toml).expect("config");
    let router = subagent_host::adapter::router(&file).expect("router");
    let host = Host::new(HostConfig { router, ..Default::default() });
    let session = host.open_tree(Arc::new(NullSink));
    let (_, done) = run(&session, agent("AGENT:secure"), "go").await;
    assert_eq!(done.status, SubagentStatus::Completed, "{:?}", done.error);
    assert_eq!(done.result.unwrap().to_object()["summary"], "over tls");
    assert_eq!(server.requests().len(), 1);

    // The same server, without the CA: the public roots do not know it.
    let mut config = OpenAiConfig::new(server.base_url.clone());
    config.retry.max_retries = 0;
    let adapter = Arc::new(OpenAiAdapter::new(config).expect("adapter"));
    let router = AdapterRouter::default().route("fake-*", adapter).expect("route");
    let host = Host::new(HostConfig { router, ..Default::default() });
    let session = host.open_tree(Arc::new(NullSink));
    let (_, refused) = run(&session, agent("AGENT:trusting"), "go").await;
    assert_eq!(refused.status, SubagentStatus::Failed);
    let error = refused.error.unwrap().to_lowercase();
    assert!(error.contains("certificate") || error.contains("tls"), "{error}");
    assert_eq!(server.requests().len(), 1, "nothing reached the server");

    // A CA file that is not one stops the route at start-up.
    let bad = tests_tempfile("not a certificate");
    let mut config = OpenAiConfig::new(server.base_url.clone());
    config.ca_file = Some(bad.0.clone());
    let err = OpenAiAdapter::new(config).unwrap_err();
    assert!(err.contains("ca_file") && err.contains("no PEM certificate"), "{err}");
}

fn tests_tempfile(text: &str) -> CaFile {
    let path = std::env::temp_dir().join(format!("subagentd-notca-{}.pem", std::process::id()));
    std::fs::write(&path, text).unwrap();
    CaFile(path)
}
