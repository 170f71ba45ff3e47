//! Command programs calling MCP tools: the socket named by
//! `SUBAGENTD_TOOLS`, speaking JSON-RPC lines with MCP's `tools/list` and
//! `tools/call`, offers what the subagent's scope allows and calls through
//! the same path as a model's (events, refusals as `isError` results).

use crate::common::TreeOps;
use crate::mcp_tools::npm_server;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use subagent_host::adapter::command::{CommandAdapter, CommandConfig};
use subagent_host::adapter::openai::ToolPolicy;
use subagent_host::config::FileConfig;
use subagent_host::protocol::wire::*;
use subagent_host::ToolHost;
use subagent_host::{AdapterRouter, Host, HostConfig};
use subagent_host::{EventDetail, EventKind};
use tokio::sync::mpsc;

/// A program that lists its tools, reads the file its instruction names,
/// tries to write beside it, and sends a method the endpoint does not
/// serve; it prints every answer.
const PROGRAM: &str = r#"
import json, os, socket, sys
request = json.load(sys.stdin)
if "SUBAGENTD_TOOLS" not in os.environ:
    print(json.dumps({"summary": "no tools"}))
    sys.exit(0)
conn = socket.socket(socket.AF_UNIX)
conn.connect(os.environ["SUBAGENTD_TOOLS"])
lines = conn.makefile("rw")
def rpc(id, method, params=None):
    lines.write(json.dumps({"jsonrpc": "2.0", "id": id, "method": method, "params": params or {}}) + "\n")
    lines.flush()
    return json.loads(lines.readline())
path = request["task"]["instruction"]
listed = [tool["name"] for tool in rpc(1, "tools/list")["result"]["tools"]]
read = rpc(2, "tools/call", {"name": "fs__read_text_file", "arguments": {"path": path}})["result"]
write = rpc(3, "tools/call", {"name": "fs__write_file", "arguments": {"path": path + ".w", "content": "x"}})["result"]
bad = rpc(4, "tools/call", {"name": "fs__read_text_file", "arguments": {"path": 7}})["result"]
unknown = rpc(5, "resources/list")
print(json.dumps({"summary": "done", "listed": listed, "read": read, "write": write, "bad": bad, "unknown": unknown}))
"#;

fn adapter(tools: &Arc<ToolHost>) -> Arc<CommandAdapter> {
    let config =
        CommandConfig { program: "python3".into(), args: vec!["-c".into(), PROGRAM.into()], rerun_on_restart: false };
    Arc::new(CommandAdapter::new(config).expect("adapter").with_tools(tools.clone(), ToolPolicy::default()))
}

/// The task's outcome, and its tool events: kind and, once ended, outcome.
async fn run_program(
    tools: &Arc<ToolHost>,
    scope: ToolScope,
    path: &str,
) -> (AwaitResponse, Vec<(EventKind, Option<&'static str>)>) {
    let router = AdapterRouter::default().route("cmd-*", adapter(tools)).expect("route");
    let host = Host::new(HostConfig { router, ..Default::default() });
    let (sink, mut events) = mpsc::unbounded_channel();
    let session = host.open_tree(Arc::new(sink));
    let mut config = SubagentConfig::new("reader", "cmd-read");
    config.tool_scope = scope;
    let request = SpawnRequest { agent: config, parent_agent_id: None, root_agent_id: None };
    let id = session.spawn(request).await.expect("spawn").subagent_id;
    assert!(session.delegate(id, TaskDefinition::new("read", path)).await.expect("delegate").accepted);
    let done = tokio::time::timeout(Duration::from_secs(60), session.await_result(id)).await.expect("ends").unwrap();
    let mut kinds = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let EventDetail::Tool(detail) = &event.detail {
            kinds.push((event.kind, detail.ended.as_ref().map(|ended| ended.outcome)));
        }
    }
    (done, kinds)
}

fn scratch() -> std::path::PathBuf {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let dir = std::env::temp_dir().join(format!("subagentd-mcp-cmd-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn filesystem(dir: &std::path::Path) -> Arc<ToolHost> {
    let config = format!(
        "[[mcp_servers]]\nname = \"fs\"\ntransport = \"stdio\"\ncommand = \"node\"\nargs = [\"{}\", \"{}\"]\n",
        npm_server("server-filesystem"),
        dir.display()
    );
    let tools = Arc::new(ToolHost::new(FileConfig::parse(&config).expect("config").mcp_servers));
    tools.start();
    tools
}

fn text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

#[actix_rt::test]
async fn a_restricted_program_reads_through_the_socket_and_is_refused_a_write() {
    let dir = scratch();
    let file = dir.join("notes.txt");
    std::fs::write(&file, "words for a program").unwrap();
    let tools = filesystem(&dir);
    let (done, kinds) = run_program(&tools, ToolScope::Restricted, &file.display().to_string()).await;
    assert_eq!(done.status, SubagentStatus::Completed, "{:?}", done.error);
    let result = done.result.expect("result").to_object();
    let listed: Vec<&str> = result["listed"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(listed.contains(&"fs__read_text_file"), "{listed:?}");
    assert!(!listed.contains(&"fs__write_file"), "restricted: read-only tools only: {listed:?}");
    assert_eq!(result["read"]["isError"], false, "{}", result["read"]);
    assert!(text(&result["read"]).contains("words for a program"), "{}", result["read"]);
    assert_eq!(result["write"]["isError"], true);
    assert!(text(&result["write"]).contains("not available to this agent"), "{}", result["write"]);
    assert_eq!(result["bad"]["isError"], true, "bad arguments are an error result: {}", result["bad"]);
    assert_eq!(result["unknown"]["error"]["code"], -32601, "{}", result["unknown"]);
    assert!(!dir.join("notes.txt.w").exists());
    // The read, then the call refused by the schema check; the forbidden
    // write and the unknown method reached no tool.
    let expected = [
        (EventKind::ToolCall, None),
        (EventKind::ToolResult, Some("ok")),
        (EventKind::ToolCall, None),
        (EventKind::ToolResult, Some("refused")),
    ];
    assert_eq!(kinds, expected);
    std::fs::remove_dir_all(&dir).ok();
}

#[actix_rt::test]
async fn a_shared_program_writes_and_a_host_without_servers_gives_no_socket() {
    let dir = scratch();
    let file = dir.join("notes.txt");
    std::fs::write(&file, "more words").unwrap();
    let tools = filesystem(&dir);
    let (done, _) = run_program(&tools, ToolScope::Shared, &file.display().to_string()).await;
    let result = done.result.expect("result").to_object();
    assert_eq!(result["write"]["isError"], false, "{}", result["write"]);
    assert_eq!(std::fs::read_to_string(dir.join("notes.txt.w")).unwrap(), "x");

    let (done, _) = run_program(&Arc::new(ToolHost::default()), ToolScope::Shared, "/nowhere").await;
    assert_eq!(done.result.expect("result").to_object()["summary"], "no tools");
    std::fs::remove_dir_all(&dir).ok();
}

#[actix_rt::test]
async fn a_task_waiting_for_its_mcp_server_to_start_says_so() {
    let dir = scratch();
    let file = dir.join("notes.txt");
    std::fs::write(&file, "slow start").unwrap();
    // A server that takes a second to start: the task's first step waits.
    let config = format!(
        "[[mcp_servers]]\nname = \"fs\"\ntransport = \"stdio\"\ncommand = \"sh\"\nargs = [\"-c\", \"sleep 1; exec node {} {}\"]\n",
        npm_server("server-filesystem"),
        dir.display()
    );
    let tools = Arc::new(ToolHost::new(FileConfig::parse(&config).expect("config").mcp_servers));
    tools.start();
    let router = AdapterRouter::default().route("cmd-*", adapter(&tools)).expect("route");
    let host = Host::new(HostConfig { router, ..Default::default() });
    let (sink, mut events) = mpsc::unbounded_channel();
    let session = host.open_tree(Arc::new(sink));
    let mut agent = SubagentConfig::new("reader", "cmd-read");
    agent.tool_scope = ToolScope::Restricted;
    let id = session
        .spawn(SpawnRequest { agent, parent_agent_id: None, root_agent_id: None })
        .await
        .expect("spawn")
        .subagent_id;
    assert!(session.delegate(id, TaskDefinition::new("read", file.display().to_string())).await.unwrap().accepted);
    let done = tokio::time::timeout(Duration::from_secs(60), session.await_result(id)).await.expect("ends").unwrap();
    assert_eq!(done.status, SubagentStatus::Completed, "{:?}", done.error);
    let mut said = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let EventDetail::Progress(text) = &event.detail {
            said.push(text.clone());
        }
    }
    assert!(said.iter().any(|text| text == "waiting for MCP server fs to start"), "no word of the wait: {said:?}");
    std::fs::remove_dir_all(&dir).ok();
}
