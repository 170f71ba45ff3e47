//! The MCP front door driven by what others wrote: the official `mcp`
//! Python client (`tests/mcp_client/client_checks.py`, in the venv
//! `.ci/run` makes at `tests/mcp_client/.venv` from
//! `tests/mcp_client/requirements.txt`) against the real binary, over
//! stdio (`subagentd mcp`) and streamable HTTP (`/mcp`): a three-level
//! tree through `run_subagent` with its progress, resources and
//! subscriptions; a running tree cancelled from the client; a question
//! answered by elicitation; MCP tasks made, cancelled, and answered after
//! the server is killed and restarted in the middle.

use crate::e2e_support::Server;
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};

fn python() -> PathBuf {
    let venv: PathBuf = [env!("CARGO_MANIFEST_DIR"), "tests/mcp_client/.venv/bin/python"].iter().collect();
    assert!(
        venv.exists(),
        "{} is missing: make it with `python3 -m venv tests/mcp_client/.venv && tests/mcp_client/.venv/bin/pip install -r tests/mcp_client/requirements.txt` (as .ci/run does)",
        venv.display()
    );
    venv
}

fn script() -> PathBuf {
    [env!("CARGO_MANIFEST_DIR"), "tests/mcp_client/client_checks.py"].iter().collect()
}

fn client(args: &[&str]) -> Command {
    let mut command = Command::new(python());
    // The experimental tasks API warns on every use.
    command.arg("-W").arg("ignore").arg(script()).args(args);
    command
}

/// Runs one check: its last line of JSON.
fn check(args: &[&str]) -> Value {
    let output = client(args).output().expect("run the mcp client");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "client_checks {args:?} failed: {stderr}\n{stdout}");
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|err| panic!("client_checks {args:?} printed {stdout}: {err}"))
}

/// The tested binary's path, for the client to start it.
fn binary() -> String {
    crate::e2e_support::binary().display().to_string()
}

// A fresh directory for a test's store.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("subagentd-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn http_server() -> (Server, String) {
    let server = Server::start(&["--http", "127.0.0.1:0", "--store", "memory"], None);
    let url = format!("http://{}/mcp", server.http.as_deref().unwrap());
    (server, url)
}

#[test]
fn over_stdio_the_client_runs_a_tree_watches_it_and_answers_a_question() {
    let tree = check(&["tree", "stdio", &binary()]);
    assert!(tree["progress"].as_u64().unwrap() >= 6, "{tree}");
    assert!(tree["updates"].as_u64().unwrap() >= 1, "{tree}");
    let elicited = check(&["elicit", "stdio", &binary()]);
    assert_eq!(elicited["asked"].as_array().map(Vec::len), Some(1), "{elicited}");
}

#[test]
fn over_stdio_a_cancelled_call_cancels_its_tree_and_tasks_run_and_cancel() {
    let cancelled = check(&["cancel", "stdio", &binary()]);
    assert_eq!(cancelled["retired"], "CANCELLED", "the cancelled call's root, retired: {cancelled}");
    let cancelled = check(&["task-cancel", "stdio", &binary()]);
    assert!(cancelled["task_id"].as_str().is_some_and(|id| id.contains("-sub_")), "{cancelled}");
}

#[test]
fn over_stdio_a_task_is_answered_by_the_next_server_after_a_sigkill() {
    let dir = scratch("mcp-restart-stdio");
    let store = format!("--store=sqlite:{}", dir.join("store.db").display());
    let restarted = check(&["restart-stdio", "stdio", &binary(), &store]);
    assert!(restarted["task_id"].is_string(), "{restarted}");
}

#[test]
fn over_stdio_a_task_outlives_its_client_leaving_and_the_next_server_answers_it() {
    let dir = scratch("mcp-resume-stdio");
    let store = format!("--store=sqlite:{}", dir.join("store.db").display());
    let resumed = check(&["resume-stdio", "stdio", &binary(), &store]);
    assert!(resumed["task_id"].is_string(), "{resumed}");
}

#[test]
fn over_http_the_client_runs_a_tree_cancels_one_and_answers_a_question() {
    let (_server, url) = http_server();
    let tree = check(&["tree", "http", &url]);
    assert!(tree["progress"].as_u64().unwrap() >= 6, "{tree}");
    assert_eq!(check(&["cancel", "http", &url])["retired"], "CANCELLED");
    let elicited = check(&["elicit", "http", &url]);
    assert_eq!(elicited["asked"].as_array().map(Vec::len), Some(1), "{elicited}");
    check(&["task-cancel", "http", &url]);
}

#[test]
fn over_http_a_session_goes_on_through_a_restart_and_its_task_is_answered() {
    let dir = scratch("mcp-restart-http");
    let store = format!("sqlite:{}", dir.join("store.db").display());
    let mut server = Server::start(&["--http", "127.0.0.1:0", "--store", &store], None);
    let addr = server.http.clone().unwrap();
    let mut child = client(&["restart-http", "http", &format!("http://{addr}/mcp")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the mcp client");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let started: Value = serde_json::from_str(&lines.next().expect("the task started").unwrap()).unwrap();
    let task_id = started["task_id"].as_str().expect("a task id").to_owned();
    // Killed with the task running; back on the same address.
    server.kill9();
    let _restarted = Server::start(&["--http", &addr, "--store", &store], None);
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let finished: Value = serde_json::from_str(&lines.next().expect("the task finished").unwrap()).unwrap();
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "{stderr}");
    assert_eq!(finished["finished"], task_id.as_str());
}
