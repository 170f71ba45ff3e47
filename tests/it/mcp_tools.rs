//! Subagents calling tools of real MCP servers (`@modelcontextprotocol/
//! server-everything` and `server-filesystem` from npm, pinned in
//! `tests/mcp/package-lock.json`; `npm ci --prefix tests/mcp` installs
//! them) over stdio and streamable HTTP, through the openai adapter and a
//! fake model: tools offered by scope, calls checked, bounded, cancelled,
//! observed, and a crashed server restarted.

use crate::common::eventually;
use crate::common::TreeOps;
use crate::fake_openai::*;
use serde_json::{json, Value};
use std::future::ready;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use subagent_host::adapter::openai::{OpenAiAdapter, OpenAiConfig, RetryPolicy};
use subagent_host::config::{FileConfig, McpServerConfig};
use subagent_host::protocol::wire::*;
use subagent_host::AdapterRouter;
use subagent_host::{Event, EventDetail, EventKind};
use subagent_host::{Host, HostConfig, SubagentId, Tree};
use subagent_host::{ServerState, ToolHost};
use tokio::sync::mpsc;

const GUARD: Duration = Duration::from_secs(60);

/// The entry point of an npm MCP server package under `tests/mcp`.
pub(crate) fn npm_server(package: &str) -> String {
    let path: PathBuf =
        [env!("CARGO_MANIFEST_DIR"), "tests/mcp/node_modules/@modelcontextprotocol", package, "dist/index.js"]
            .iter()
            .collect();
    assert!(path.exists(), "{} is missing: run `npm ci --prefix tests/mcp`", path.display());
    path.display().to_string()
}

/// `[[mcp_servers]]` entries parsed as the config file has them.
fn servers(toml: &str) -> Vec<McpServerConfig> {
    FileConfig::parse(toml).expect("config").mcp_servers
}

fn everything(name: &str) -> String {
    format!(
        "[[mcp_servers]]\nname = \"{name}\"\ntransport = \"stdio\"\ncommand = \"node\"\nargs = [\"{}\", \"stdio\"]\n",
        npm_server("server-everything")
    )
}

fn tool_host(configs: Vec<McpServerConfig>) -> Arc<ToolHost> {
    let host = Arc::new(ToolHost::new(configs));
    host.start();
    host
}

fn host_with(server: &FakeServer, tools: &Arc<ToolHost>, policy: Option<&[&str]>) -> Host {
    let mut config = OpenAiConfig::new(server.base_url.clone());
    config.retry = RetryPolicy {
        max_retries: 1,
        base_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(10),
        ..RetryPolicy::default()
    };
    config.tools = tools.clone();
    if let Some(globs) = policy {
        config.policy = subagent_host::adapter::openai::ToolPolicy::globs(globs).expect("globs");
    }
    let adapter = Arc::new(OpenAiAdapter::new(config).expect("adapter"));
    let router = AdapterRouter::default().route("fake-*", adapter).expect("route");
    Host::new(HostConfig { router, ..Default::default() })
}

fn agent(system: &str, scope: ToolScope) -> SubagentConfig {
    let mut config = SubagentConfig::new(system.trim_start_matches("AGENT:"), "fake-model");
    config.system_prompt = Some(system.to_owned());
    config.tool_scope = scope;
    config
}

async fn run(session: &Tree, config: SubagentConfig, instruction: &str) -> (SubagentId, AwaitResponse) {
    let request = SpawnRequest { agent: config, parent_agent_id: None, root_agent_id: None };
    let id = session.spawn(request).await.expect("spawn").subagent_id;
    assert!(session.delegate(id, TaskDefinition::new("task", instruction)).await.expect("delegate").accepted);
    let done = tokio::time::timeout(GUARD, session.await_result(id)).await.expect("task ends").expect("await");
    (id, done)
}

/// The raw texts of a request's tool messages.
pub(crate) fn tool_texts(body: &Value) -> Vec<String> {
    messages(body).iter().filter(|m| m["role"] == "tool").map(|m| m["content"].as_str().unwrap_or("").into()).collect()
}

/// Calls `calls` at the first step, then answers with the tool messages' texts.
fn one_round(calls: Vec<(&'static str, Value)>) -> FakeServer {
    FakeServer::start(move |body, _| {
        let texts = tool_texts(body);
        if texts.is_empty() {
            call_tools(None, &calls.iter().map(|(name, args)| (*name, args.clone())).collect::<Vec<_>>())
        } else {
            answer(&texts.join(" | "))
        }
    })
}

fn summary(done: &AwaitResponse) -> String {
    assert_eq!(done.status, SubagentStatus::Completed, "{:?}", done.error);
    done.result.as_ref().expect("result").to_object()["summary"].as_str().unwrap_or_default().to_owned()
}

fn tool_events(events: &mut mpsc::UnboundedReceiver<Event>) -> Vec<(EventKind, Value)> {
    let mut seen = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let EventDetail::Tool(detail) = &event.detail {
            let ended = detail.ended.as_ref().map(|ended| json!({"outcome": ended.outcome, "bytes": ended.bytes}));
            seen.push((event.kind, json!({"tool": detail.tool, "server": detail.server, "ended": ended})));
        }
    }
    seen
}

#[actix_rt::test]
async fn a_model_calls_a_stdio_servers_tool_and_answers_from_its_result() {
    let tools = tool_host(servers(&everything("every")));
    let model = one_round(vec![("every__echo", json!({"message": "hello tools"}))]);
    let host = host_with(&model, &tools, None);
    let (sink, mut events) = mpsc::unbounded_channel();
    let session = host.open_tree(Arc::new(sink));
    let (_, done) = run(&session, agent("AGENT:root", ToolScope::Shared), "echo something").await;

    assert_eq!(summary(&done), "Echo: hello tools");
    let first = &model.requests()[0].body;
    let offered = offered_tools(first);
    assert!(offered.contains(&"every__echo".to_owned()), "{offered:?}");
    assert!(offered.contains(&"every__get-sum".to_owned()), "{offered:?}");
    let echo = first["tools"].as_array().unwrap().iter().find(|t| t["function"]["name"] == "every__echo").unwrap();
    assert_eq!(echo["function"]["parameters"]["properties"]["message"]["type"], "string", "{echo}");
    let seen = tool_events(&mut events);
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0], (EventKind::ToolCall, json!({"tool": "echo", "server": "every", "ended": null})));
    assert_eq!(seen[1].0, EventKind::ToolResult);
    assert_eq!(seen[1].1["ended"], json!({"outcome": "ok", "bytes": "Echo: hello tools".len()}));
}

#[actix_rt::test]
async fn bad_arguments_unknown_tools_and_tool_errors_go_back_to_the_model_and_the_task_completes() {
    let tools = tool_host(servers(&everything("every")));
    let model = one_round(vec![
        ("every__get-sum", json!({"a": "one", "b": 2})),
        ("every__no-such-tool", json!({})),
        ("every__get-sum", json!({"a": 40, "b": 2})),
    ]);
    let host = host_with(&model, &tools, None);
    let (sink, mut events) = mpsc::unbounded_channel();
    let session = host.open_tree(Arc::new(sink));
    let (_, done) = run(&session, agent("AGENT:root", ToolScope::Shared), "add").await;

    let texts = tool_texts(&model.requests()[1].body);
    assert_eq!(texts.len(), 3);
    assert!(texts[0].contains("bad arguments for every__get-sum") && texts[0].contains("/a"), "{}", texts[0]);
    assert!(texts[1].contains("not available to this agent"), "{}", texts[1]);
    assert!(texts[2].contains("42"), "{}", texts[2]);
    assert!(summary(&done).contains("42"));
    let outcomes: Vec<Value> = tool_events(&mut events)
        .into_iter()
        .filter(|(kind, _)| *kind == EventKind::ToolResult)
        .map(|(_, e)| e["ended"]["outcome"].clone())
        .collect();
    assert_eq!(outcomes, vec![json!("refused"), json!("ok")]);
}

#[actix_rt::test]
async fn a_restricted_leaf_reads_through_the_filesystem_server_and_is_refused_a_write_tool() {
    let dir = std::env::temp_dir().join(format!("subagentd-mcp-fs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("notes.txt"), "the file's words").unwrap();
    let dir_text = dir.display().to_string();
    let config = format!(
        "[[mcp_servers]]\nname = \"fs\"\ntransport = \"stdio\"\ncommand = \"node\"\nargs = [\"{}\", \"{dir_text}\"]\n",
        npm_server("server-filesystem")
    );
    let tools = tool_host(servers(&config));
    let file = dir.join("notes.txt").display().to_string();
    let written = dir.join("written.txt").display().to_string();
    let model = FakeServer::start(move |body, _| {
        let system = system_prompt(body);
        let texts = tool_texts(body);
        if system.starts_with("AGENT:leaf") {
            return if texts.is_empty() {
                call_tools(
                    None,
                    &[
                        ("fs__read_text_file", json!({"path": file})),
                        ("fs__write_file", json!({"path": written, "content": "x"})),
                    ],
                )
            } else {
                answer(&texts.join(" | "))
            };
        }
        if texts.is_empty() {
            call_tools(
                None,
                &[(
                    "spawn_subagent",
                    json!({"name": "leaf", "instruction": "read", "system_prompt": "AGENT:leaf", "tool_scope": "restricted"}),
                )],
            )
        } else if texts.len() == 1 {
            let spawned: Value = serde_json::from_str(&texts[0]).unwrap();
            call_tools(None, &[("await_subagent", json!({"subagent_id": spawned["subagent_id"]}))])
        } else {
            let awaited: Value = serde_json::from_str(&texts[1]).unwrap();
            answer(awaited["result"]["summary"].as_str().unwrap_or("?"))
        }
    });
    let host = host_with(&model, &tools, None);
    let session = host.open_tree(Arc::new(subagent_host::NullSink));
    let mut root = agent("AGENT:root", ToolScope::Shared);
    root.capabilities = vec!["multi_agent".into()];
    let (_, done) = run(&session, root, "delegate a read").await;

    let said = summary(&done);
    assert!(said.contains("the file's words"), "{said}");
    assert!(said.contains("tool `fs__write_file` is not available to this agent"), "{said}");
    assert!(!dir.join("written.txt").exists());
    let requests = model.requests();
    let root_offer =
        offered_tools(&requests.iter().find(|s| system_prompt(&s.body).starts_with("AGENT:root")).unwrap().body);
    let leaf_offer =
        offered_tools(&requests.iter().find(|s| system_prompt(&s.body).starts_with("AGENT:leaf")).unwrap().body);
    assert!(root_offer.contains(&"fs__write_file".to_owned()), "{root_offer:?}");
    assert!(leaf_offer.contains(&"fs__read_text_file".to_owned()), "{leaf_offer:?}");
    assert!(!leaf_offer.iter().any(|tool| tool == "fs__write_file" || tool == "fs__move_file"), "{leaf_offer:?}");
    std::fs::remove_dir_all(&dir).ok();
}

#[actix_rt::test]
async fn isolated_gets_only_the_named_tools_and_host_globs_decide_restricted() {
    let tools = tool_host(servers(&everything("every")));
    let model = one_round(vec![("every__echo", json!({"message": "x"}))]);
    let host = host_with(&model, &tools, Some(&["every__get-*", "list_subagents"]));
    let session = host.open_tree(Arc::new(subagent_host::NullSink));
    let mut isolated = agent("AGENT:iso", ToolScope::Isolated);
    isolated.metadata.insert("tools".into(), json!(["every__echo"]));
    run(&session, isolated, "go").await;
    run(&session, agent("AGENT:res", ToolScope::Restricted), "go").await;

    let requests = model.requests();
    let offer =
        |who: &str| offered_tools(&requests.iter().find(|s| system_prompt(&s.body).starts_with(who)).unwrap().body);
    assert_eq!(offer("AGENT:iso"), vec!["every__echo".to_owned()]);
    let restricted = offer("AGENT:res");
    assert!(restricted.contains(&"list_subagents".to_owned()), "{restricted:?}");
    assert!(restricted.contains(&"every__get-sum".to_owned()), "{restricted:?}");
    assert!(!restricted.iter().any(|tool| tool == "every__echo" || tool == "delegate_task"), "{restricted:?}");
}

#[actix_rt::test]
async fn a_call_past_its_timeout_answers_the_model_and_a_cancel_stops_a_call_at_once() {
    let config = format!("{}call_timeout_ms = 300\n", everything("every"));
    let tools = tool_host(servers(&config));
    let model = one_round(vec![("every__trigger-long-running-operation", json!({"duration": 20, "steps": 4}))]);
    let host = host_with(&model, &tools, None);
    let session = host.open_tree(Arc::new(subagent_host::NullSink));
    let (_, done) = run(&session, agent("AGENT:slow", ToolScope::Shared), "wait").await;
    assert!(summary(&done).contains("did not answer within 300 ms"), "{}", summary(&done));

    // No timeout that matters: the cancel must stop it.
    let tools = tool_host(servers(&everything("every")));
    let host = host_with(&model, &tools, None);
    let (sink, mut events) = mpsc::unbounded_channel();
    let session = host.open_tree(Arc::new(sink));
    let request =
        SpawnRequest { agent: agent("AGENT:slow", ToolScope::Shared), parent_agent_id: None, root_agent_id: None };
    let id = session.spawn(request).await.unwrap().subagent_id;
    session.delegate(id, TaskDefinition::new("task", "wait")).await.unwrap();
    // Its `tool_call` event says it is under way.
    eventually("the call is made", GUARD, || {
        ready(
            std::iter::from_fn(|| events.try_recv().ok()).any(|event| event.kind == EventKind::ToolCall).then_some(()),
        )
    })
    .await;
    let started = std::time::Instant::now();
    session.cancel(id).await.expect("cancel");
    let done = tokio::time::timeout(GUARD, session.await_result(id)).await.unwrap().unwrap();
    assert_eq!(done.status, SubagentStatus::Cancelled);
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}

#[actix_rt::test]
async fn a_streamable_http_server_serves_the_same_tools() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    // Killed when the test ends, passed or failed.
    let _node = KillOnDrop(
        std::process::Command::new("node")
            .args([npm_server("server-everything").as_str(), "streamableHttp"])
            .env("PORT", port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("node"),
    );
    let config =
        format!("[[mcp_servers]]\nname = \"web\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:{port}/mcp\"\n");
    let tools = tool_host(servers(&config));
    // Until node listens, connecting fails and is tried again with backoff.
    let server = tools.shared_servers()[0].clone();
    eventually("the http server is ready", GUARD, || ready((server.state() == ServerState::Ready).then_some(()))).await;
    let model = one_round(vec![("web__echo", json!({"message": "over http"}))]);
    let host = host_with(&model, &tools, None);
    let session = host.open_tree(Arc::new(subagent_host::NullSink));
    let (_, done) = run(&session, agent("AGENT:web", ToolScope::Shared), "echo").await;
    assert_eq!(summary(&done), "Echo: over http");
}

/// A child process killed (and reaped) on drop.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[actix_rt::test]
async fn a_crashed_stdio_server_is_restarted_and_serves_again() {
    let pid_file = std::env::temp_dir().join(format!("subagentd-mcp-pid-{}", std::process::id()));
    let config = format!(
        "[[mcp_servers]]\nname = \"every\"\ntransport = \"stdio\"\ncommand = \"sh\"\nargs = [\"-c\", \"echo $$ > {}; exec node {} stdio\"]\n",
        pid_file.display(),
        npm_server("server-everything")
    );
    let tools = tool_host(servers(&config));
    let server = tools.shared_servers()[0].clone();
    eventually("the server is ready", GUARD, || ready((server.state() == ServerState::Ready).then_some(()))).await;
    let first = std::fs::read_to_string(&pid_file).unwrap().trim().to_owned();
    std::process::Command::new("kill").args(["-9", &first]).status().unwrap();
    eventually("the crash is seen", GUARD, || ready((server.state() != ServerState::Ready).then_some(()))).await;
    eventually("it is ready again", GUARD, || {
        let again = server.state() == ServerState::Ready && std::fs::read_to_string(&pid_file).unwrap().trim() != first;
        ready(again.then_some(()))
    })
    .await;
    let model = one_round(vec![("every__echo", json!({"message": "again"}))]);
    let host = host_with(&model, &tools, None);
    let session = host.open_tree(Arc::new(subagent_host::NullSink));
    let (_, done) = run(&session, agent("AGENT:again", ToolScope::Shared), "echo").await;
    assert_eq!(summary(&done), "Echo: again");
    std::fs::remove_file(&pid_file).ok();
}

#[test]
fn a2e_clients_list_and_call_the_same_tools_over_tool_namespace() {
    let config = everything("every");
    let server = crate::e2e_support::InProcess::start(&["--tcp", "127.0.0.1:0"], Some(&config));
    let mut client = crate::e2e_support::LineClient::connect(server.tcp.as_deref().unwrap());
    client.send(&json!({"type": "handshake/req", "id": "h", "agent_id": "a", "agent_caps": ["tools"]}));
    let handshake = client.reply("h");
    assert_eq!(handshake["accepted_caps"][0]["capability"], "tools", "{handshake}");
    // Without `multi_agent`, the subagent requests are refused; tool/* are served.
    client.send(&json!({"type": "multi_agent/list", "id": "l"}));
    assert_eq!(client.reply("l")["code"], "unauthorized");

    client.send(&json!({"type": "tool/list/req", "id": "t", "filter_kind": "", "filter_tags": []}));
    let listed = client.reply("t");
    assert_eq!(listed["type"], "tool/list/resp");
    let tools = listed["tools"].as_array().unwrap();
    let echo = tools.iter().find(|tool| tool["name"] == "every__echo").expect("every__echo is listed");
    assert_eq!(echo["toolkit"], "every");
    assert_eq!(echo["idempotent"], true);
    assert!(echo["tags"].as_array().unwrap().contains(&json!("read_only")), "{echo}");
    let message = echo["input_parameters"].as_array().unwrap().iter().find(|p| p["name"] == "message").unwrap();
    assert_eq!((message["type"].as_str(), message["required"].as_bool()), (Some("string"), Some(true)));
    client.send(&json!({"type": "tool/list/req", "id": "t2", "filter_tags": ["destructive"]}));
    let destructive = client.reply("t2");
    assert!(destructive["tools"].as_array().unwrap().iter().all(|tool| tool["name"] != "every__echo"));

    client.send(&json!({"type": "tool/call/req", "id": "c", "tool_name": "every__echo", "arguments": {"message": "via A2E"}, "streaming": true, "correlation_id": "turn-1"}));
    let event = client.next().expect("a tool/event");
    assert_eq!((event["type"].as_str(), event["req_id"].as_str()), (Some("tool/event"), Some("c")), "{event}");
    let called = client.reply("c");
    assert_eq!(called["type"], "tool/call/resp");
    assert_eq!(called["data"]["success"], true, "{called}");
    assert_eq!(called["data"]["data"], "Echo: via A2E");

    client.send(
        &json!({"type": "tool/call/req", "id": "bad", "tool_name": "every__get-sum", "arguments": {"a": "x", "b": 1}}),
    );
    let refused = client.reply("bad");
    assert_eq!(
        (refused["data"]["success"].as_bool(), refused["data"]["error_code"].as_str()),
        (Some(false), Some("invalid_arguments"))
    );
    client.send(&json!({"type": "tool/call/req", "id": "none", "tool_name": "every__nope", "arguments": {}}));
    assert_eq!(client.reply("none")["data"]["error_code"], "unknown_tool");
    server.shutdown().expect("clean shutdown");
}

#[test]
fn the_admin_api_behind_the_live_view_shows_each_servers_state() {
    let config = format!(
        "{}\n[[mcp_servers]]\nname = \"broken\"\ntransport = \"stdio\"\ncommand = \"/nonexistent/mcp-server\"\n",
        everything("every")
    );
    let server = crate::e2e_support::InProcess::start(&["--http", "127.0.0.1:0"], Some(&config));
    let addr = server.http.clone().unwrap();
    let servers =
        |addr: &str| crate::e2e_support::http(addr, "GET", "/admin/sessions", &[], "").1["mcp_servers"].clone();
    crate::common::eventually_blocking("both servers settle", GUARD, || {
        let listed = servers(&addr);
        let state = |name: &str| listed.as_array()?.iter().find(|s| s["name"] == name).map(|s| s["state"].clone());
        (state("every") == Some(json!("ready")) && state("broken") == Some(json!("failed"))).then_some(listed)
    });
    let listed = servers(&addr);
    let every = listed.as_array().unwrap().iter().find(|s| s["name"] == "every").unwrap();
    assert!(every["tools"].as_u64().unwrap() > 5, "{every}");
    let broken = listed.as_array().unwrap().iter().find(|s| s["name"] == "broken").unwrap();
    assert!(broken["reason"].as_str().unwrap().contains("cannot start `/nonexistent/mcp-server`"), "{broken}");
    server.shutdown().expect("clean shutdown");
}

#[test]
fn each_servers_readiness_and_failure_are_logged_at_the_default_level() {
    let config = format!(
        "{}\n[[mcp_servers]]\nname = \"broken\"\ntransport = \"stdio\"\ncommand = \"/nonexistent/mcp-server\"\n",
        everything("every")
    );
    // No RUST_LOG: the binary's default filter.
    let server = crate::e2e_support::Server::start(&["--http", "127.0.0.1:0"], Some(&config));
    let (ready, failed) = (std::cell::Cell::new(false), std::cell::Cell::new(false));
    server.wait_stderr("every's readiness and broken's failure, with why", |line| {
        ready.set(ready.get() || line.contains("mcp server every: ready"));
        failed.set(
            failed.get() || (line.contains("mcp server broken: failed") && line.contains("/nonexistent/mcp-server")),
        );
        ready.get() && failed.get()
    });
}

#[actix_rt::test]
async fn max_tool_calls_is_a_budget_and_a_spent_one_ends_the_task() {
    let tools = tool_host(servers(&everything("every")));
    let model = one_round(vec![("every__echo", json!({"message": "one"})), ("every__echo", json!({"message": "two"}))]);
    let host = host_with(&model, &tools, None);
    let session = host.open_tree(Arc::new(subagent_host::NullSink));
    let mut capped = agent("AGENT:capped", ToolScope::Shared);
    capped.metadata.insert("budget".into(), json!({"max_tool_calls": 1}));
    let (_, done) = run(&session, capped, "echo twice").await;
    assert_eq!(done.status, SubagentStatus::Failed);
    let error = done.error.unwrap_or_default();
    assert!(error.starts_with("budget_exceeded: max_tool_calls of sub_") && error.ends_with("(1) is spent"), "{error}");
    assert_eq!(model.requests().len(), 1, "no model call after the budget is spent");
}
