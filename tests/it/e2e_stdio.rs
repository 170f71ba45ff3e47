//! The real binary over stdio: only protocol lines on stdout (even at
//! `RUST_LOG=trace`), EOF on stdin → exit 0, SIGTERM and SIGINT terminate
//! a running tree and exit 0, a silent client is closed at the handshake
//! deadline.

use crate::e2e_support::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::Stdio;

#[test]
fn stdio_at_trace_level_writes_only_protocol_lines_and_exits_0_on_eof() {
    let mut child = command(&["--stdio"], None)
        .env("RUST_LOG", "trace")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start");
    let stderr = drain_stderr(&mut child);
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut request = |message: Value| writeln!(stdin, "{message}").unwrap();
    request(
        json!({ "type": "handshake/req", "id": "h", "agent_id": "a", "agent_caps": ["subagents"], "auth_token": "" }),
    );
    request(json!({ "type": "SUBAGENT_SPAWN_REQ", "id": "s", "agent": { "name": "n", "model": "m" } }));
    let mut spawned = None;
    let mut line = String::new();
    while spawned.is_none() {
        line.clear();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "stdout ended early");
        let value: Value = crate::contract::checked(&line);
        if value["req_id"] == "s" {
            spawned = value["subagent_id"].as_str().map(str::to_owned);
        }
    }
    let sub = spawned.unwrap();
    request(
        json!({ "type": "SUBAGENT_DELEGATE_REQ", "id": "d", "subagent_id": sub, "task": { "name": "t", "instruction": "i" } }),
    );
    request(json!({ "type": "SUBAGENT_AWAIT_REQ", "id": "a", "subagent_id": sub }));
    request(json!({ "type": "ping", "id": "p" }));
    drop(stdin);
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let status = wait(&mut child);
    assert!(status.success(), "exit status {status:?}");
    let mut await_status = None;
    for line in rest.lines() {
        let value: Value = crate::contract::checked(line);
        assert_eq!(value["a2e"], "1.0", "{line}");
        assert!(value["type"].is_string(), "{line}");
        if value["req_id"] == "a" {
            await_status = value["status"].as_str().map(str::to_owned);
        }
    }
    assert_eq!(await_status.as_deref(), Some("COMPLETED"), "requests read before EOF are answered");
    // The trace logs went to stderr, not stdout. The process has exited, so
    // its stderr is closed: all of it is read (`iter` ends when the drain
    // does), where what had been forwarded so far could be nothing yet.
    assert!(stderr.iter().count() > 0, "trace logging produced stderr output");
}

#[test]
fn stdio_logs_nothing_per_request_by_default() {
    let mut child = command(&["--stdio"], None)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start");
    let mut stdin = child.stdin.take().unwrap();
    for n in 0..50 {
        writeln!(stdin, "{}", json!({ "type": "ping", "id": n })).unwrap();
    }
    writeln!(stdin, "not json").unwrap();
    drop(stdin);
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(wait(&mut child).success());
    assert_eq!(out.lines().count(), 51, "one reply per line");
    assert_eq!(err, "", "nothing logged at the default level");
}

/// Starts a stdio host with a running task, sends `signal`, and checks the
/// tree was terminated and the exit status is 0.
fn a_signal_terminates_the_running_tree_and_exits_0(signal_name: &str) {
    let mut child = command(&["--stdio"], None)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start");
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut reply = |message: Value| {
        writeln!(stdin, "{message}").unwrap();
        loop {
            let mut line = String::new();
            assert!(stdout.read_line(&mut line).unwrap() > 0, "stdout ended early");
            let value: Value = crate::contract::checked(&line);
            if value["req_id"] == message["id"] {
                return value;
            }
        }
    };
    assert_eq!(reply(json!({ "type": "handshake/req", "id": "h", "agent_caps": ["multi_agent"] }))["ok"], true);
    let spawned = reply(json!({ "type": "SUBAGENT_SPAWN_REQ", "id": "s", "agent": { "name": "n", "model": "m" } }));
    let sub = spawned["subagent_id"].as_str().unwrap().to_owned();
    let task = json!({ "name": "t", "instruction": "i", "metadata": { "script": [{ "sleep_ms": 600_000 }] } });
    let delegated = reply(json!({ "type": "SUBAGENT_DELEGATE_REQ", "id": "d", "subagent_id": sub, "task": task }));
    assert_eq!(delegated["status"], "RUNNING");
    signal(&child, signal_name);
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let status = wait(&mut child);
    assert!(status.success(), "exit status {status:?}");
    let terminated = rest.lines().any(|line| {
        let value: Value = crate::contract::checked(line);
        value["event"] == "terminated" && value["subagent_id"] == sub.as_str()
    });
    assert!(terminated, "the running subagent was terminated: {rest}");
    drop(stdin);
}

#[test]
fn stdio_sigterm_terminates_the_running_tree_and_exits_0() {
    a_signal_terminates_the_running_tree_and_exits_0("TERM");
}

#[test]
fn stdio_sigint_terminates_the_running_tree_and_exits_0() {
    a_signal_terminates_the_running_tree_and_exits_0("INT");
}

#[test]
fn a_silent_stdio_session_ends_at_the_handshake_deadline() {
    let config = tempfile_lite::TempFile::with("[limits]\nhandshake_timeout_ms = 300\n");
    let mut child = command(&["--stdio"], Some(&config))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start");
    // (Its WARN may be cut short by the exit: the TCP test checks the log.)
    let _stderr = drain_stderr(&mut child);
    // stdin stays open and silent.
    let _stdin = child.stdin.take().unwrap();
    let mut stdout = String::new();
    child.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
    let status = wait(&mut child);
    assert!(status.success(), "exit status {status:?}");
    let lines: Vec<Value> = stdout.lines().map(|line| serde_json::from_str(line).expect("JSON")).collect();
    assert_eq!(lines.len(), 1, "{stdout}");
    assert_eq!(lines[0]["code"], "unauthorized", "{stdout}");
    assert_eq!(lines[0]["detail"]["limit"], "handshake_timeout_ms", "{stdout}");
}
