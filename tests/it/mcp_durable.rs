//! MCP tool calls across a crash (the real binary, SIGKILLed, restarted on
//! its SQLite store; its task resumes without its client): a finished call
//! is answered from the store and never made again; a call in flight at the
//! crash is made again only when its annotations say it is safe to repeat,
//! and otherwise the model is told it was interrupted.
//!
//! The server is `tests/mcp/slow_server.py`, a minimal MCP server that logs
//! every call and blocks on the first call of each tool, so the host can be
//! killed mid-call; the finished-call case uses the real filesystem server.

use crate::e2e_support::{LineClient, Server};
use crate::fake_openai::*;
use crate::mcp_tools::{npm_server, tool_texts};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

const GUARD: Duration = Duration::from_secs(60);

fn scratch(what: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let dir = std::env::temp_dir().join(format!("subagentd-{what}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    crate::common::eventually_blocking(what, GUARD, || condition().then_some(()));
}

/// Starts the host on `data` with `config`, opens a TCP session, and has a
/// `fake-mcp` subagent run one task; the host is left running.
fn start_task(data: &Path, config: &str) -> Server {
    let data = data.display().to_string();
    let server = Server::start(&["--tcp", "127.0.0.1:0", "--http", "127.0.0.1:0", "--data-dir", &data], Some(config));
    let mut client = LineClient::connect(server.tcp.as_deref().unwrap());
    client.send(&json!({"type": "handshake/req", "id": "h", "agent_id": "client", "agent_caps": ["multi_agent"]}));
    assert_eq!(client.reply("h")["type"], "handshake/resp");
    let agent = json!({"name": "caller", "model": "fake-mcp", "system_prompt": "AGENT:caller", "tool_scope": "shared", "capabilities": [], "memory_scope": "isolated"});
    client.send(&json!({"type": "SUBAGENT_SPAWN_REQ", "id": "s", "agent": agent}));
    let id = client.reply("s")["subagent_id"].clone();
    client.send(&json!({"type": "SUBAGENT_DELEGATE_REQ", "id": "d", "subagent_id": id, "task": {"name": "t", "instruction": "act"}}));
    assert_eq!(client.reply("d")["accepted"], true);
    // The client goes: the task goes on without it (and after the crash).
    drop(client);
    server
}

fn config(model: &FakeServer, servers: &str) -> String {
    format!("[[routes]]\nmodel = \"fake-*\"\nadapter = \"openai\"\nbase_url = \"{}\"\n\n{servers}", model.base_url)
}

/// A model that calls `tool` once, then answers with what the tool said.
/// Requests after the first with a tool answer hang while `hang` is set.
fn caller(tool: &'static str, arguments: Value, hang_on_answer: Arc<std::sync::atomic::AtomicBool>) -> FakeServer {
    FakeServer::start(move |body, _| {
        let texts = tool_texts(body);
        if texts.is_empty() {
            call_tools(None, &[(tool, arguments.clone())])
        } else if hang_on_answer.swap(false, std::sync::atomic::Ordering::SeqCst) {
            Reply::Hang
        } else {
            answer(&texts.join(" | "))
        }
    })
}

#[test]
fn a_finished_call_is_answered_from_the_store_after_a_crash_and_never_made_again() {
    let data = scratch("mcp-data");
    let files = scratch("mcp-files");
    std::fs::write(files.join("a.txt"), "moved words").unwrap();
    let (from, to) = (files.join("a.txt").display().to_string(), files.join("b.txt").display().to_string());
    let hang = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let model = caller("fs__move_file", json!({"source": from, "destination": to}), hang.clone());
    let servers = format!(
        "[[mcp_servers]]\nname = \"fs\"\ntransport = \"stdio\"\ncommand = \"node\"\nargs = [\"{}\", \"{}\"]\n",
        npm_server("server-filesystem"),
        files.display()
    );
    let config = config(&model, &servers);
    let mut server = start_task(&data, &config);
    // The model has the move's result (so it was checkpointed first): crash.
    wait_until("the model sees the move's result", || model.requests().len() == 2);
    let before = tool_texts(&model.requests()[1].body);
    assert!(before[0].contains("Successfully moved"), "{before:?}");
    server.kill9();

    let mut server = start_task_resumed(&data, &config);
    wait_until("the resumed task asks the model again", || model.requests().len() >= 3);
    let after = tool_texts(&model.requests()[2].body);
    // Made again, the move would have failed: the source is gone.
    assert_eq!(after, before, "the resumed task answers the call from its checkpoint");
    assert!(files.join("b.txt").exists() && !files.join("a.txt").exists());
    server.terminate();
    std::fs::remove_dir_all(&data).ok();
    std::fs::remove_dir_all(&files).ok();
}

/// Restarts the host on `data`: its stored task resumes without a client.
fn start_task_resumed(data: &Path, config: &str) -> Server {
    let data = data.display().to_string();
    Server::start(&["--tcp", "127.0.0.1:0", "--http", "127.0.0.1:0", "--data-dir", &data], Some(config))
}

fn slow_server(log: &Path) -> String {
    let script: PathBuf = [env!("CARGO_MANIFEST_DIR"), "tests/mcp/slow_server.py"].iter().collect();
    format!(
        "[[mcp_servers]]\nname = \"slow\"\ntransport = \"stdio\"\ncommand = \"sh\"\nargs = [\"-c\", \"LOG={} exec python3 {}\"]\n",
        log.display(),
        script.display()
    )
}

fn calls_logged(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log).unwrap_or_default().lines().map(str::to_owned).collect()
}

#[test]
fn a_call_in_flight_at_a_crash_is_made_again_only_when_safe_to_repeat() {
    for (tool, safe) in [("slow__write_once", false), ("slow__read_twice", true)] {
        let data = scratch("mcp-data");
        let log = scratch("mcp-log").join("calls");
        let model = caller(tool, json!({}), Arc::new(std::sync::atomic::AtomicBool::new(false)));
        let config = config(&model, &slow_server(&log));
        let mut server = start_task(&data, &config);
        wait_until("the call is under way", || calls_logged(&log).len() == 1);
        let killed = Instant::now();
        server.kill9();

        let mut server = start_task_resumed(&data, &config);
        // A safe call's request is not flushed before it is made: a host
        // killed before its next checkpoint resumes the task from the one
        // before, and the model asks for the call again. Either way the
        // first tool answer after the restart is the one to check.
        let answered = || model.requests().iter().skip(1).map(|seen| tool_texts(&seen.body)).find(|t| !t.is_empty());
        wait_until("the resumed task answers the model", || answered().is_some());
        let texts = answered().unwrap_or_default();
        assert_eq!(texts.len(), 1, "{texts:?}");
        let name = tool.trim_start_matches("slow__");
        if safe {
            assert_eq!(texts[0], format!("{name} done"), "a read-only call is made again");
            assert_eq!(calls_logged(&log), vec![name, name]);
        } else {
            assert!(texts[0].contains("interrupted by a host restart"), "{texts:?}");
            assert!(texts[0].contains("may or may not have taken effect"), "{texts:?}");
            assert_eq!(calls_logged(&log), vec![name], "the call with a side effect is not made again");
        }
        assert!(killed.elapsed() < GUARD);
        server.terminate();
        std::fs::remove_dir_all(&data).ok();
    }
}
