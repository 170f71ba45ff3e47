//! The real binary over TCP: closing a connection ends its session, a
//! client that never reads is disconnected, `max_sessions` holds, SIGTERM
//! exits 0, and start-up refuses unsafe binds and bad config.

mod e2e_support;

use e2e_support::*;
use serde_json::json;
use std::io::{Read, Write};
use std::process::Stdio;

fn handshake(client: &mut LineClient) {
    client.send(&json!({ "type": "handshake/req", "id": "h", "agent_id": "a", "agent_caps": ["multi_agent"], "auth_token": "" }));
    assert_eq!(client.reply("h")["ok"], true);
}

fn start_sleeper(client: &mut LineClient) -> String {
    client.send(&json!({ "type": "SUBAGENT_SPAWN_REQ", "id": "s", "agent": { "name": "n", "model": "m" } }));
    let sub = client.reply("s")["subagent_id"].as_str().unwrap().to_owned();
    let task = json!({ "name": "t", "instruction": "i", "metadata": { "script": [{ "sleep_ms": 600_000 }] } });
    client.send(&json!({ "type": "SUBAGENT_DELEGATE_REQ", "id": "d", "subagent_id": sub, "task": task }));
    assert_eq!(client.reply("d")["status"], "RUNNING");
    sub
}

#[test]
fn closing_the_connection_closes_the_session_and_its_tree() {
    let server = Server::start(&["--tcp", "127.0.0.1:0", "--http", "127.0.0.1:0"], None);
    let mut client = LineClient::connect(server.tcp.as_deref().unwrap());
    handshake(&mut client);
    start_sleeper(&mut client);
    assert_eq!(server.sessions(), 1);
    drop(client);
    // The session (and with it the running subagent) is gone.
    server.wait_sessions(0);
}

#[test]
fn a_client_that_never_reads_is_disconnected() {
    let config = "[limits]\noutbox_capacity = 8\n";
    let server = Server::start(&["--tcp", "127.0.0.1:0", "--http", "127.0.0.1:0"], Some(config));
    let mut client = LineClient::connect(server.tcp.as_deref().unwrap());
    handshake(&mut client);
    start_sleeper(&mut client);
    // Flood pings and never read a reply: the host must cut us off rather
    // than buffer without bound.
    let ping = format!("{}\n", json!({ "type": "ping" })).repeat(1_000);
    let mut disconnected = false;
    for _ in 0..20_000 {
        if client.writer.write_all(ping.as_bytes()).is_err() {
            disconnected = true;
            break;
        }
    }
    assert!(disconnected, "the host kept accepting from a client that never reads");
    server.wait_sessions(0);
}

#[test]
fn max_sessions_refuses_the_next_connection_with_an_error() {
    let server = Server::start(&["--tcp", "127.0.0.1:0"], Some("[limits]\nmax_sessions = 1\n"));
    let addr = server.tcp.as_deref().unwrap();
    let mut first = LineClient::connect(addr);
    handshake(&mut first);
    let mut second = LineClient::connect(addr);
    let refusal = second.next().expect("an error line");
    assert_eq!(refusal["type"], "error");
    assert!(refusal["message"].as_str().unwrap().contains("max_sessions"), "{refusal}");
    assert!(second.next().is_none(), "then the connection is closed");
    // The first session is unaffected.
    first.send(&json!({ "type": "ping", "id": "p" }));
    assert_eq!(first.reply("p")["type"], "pong");
}

#[test]
fn sigterm_closes_every_session_and_exits_0() {
    let mut server = Server::start(&["--tcp", "127.0.0.1:0", "--http", "127.0.0.1:0"], None);
    let mut client = LineClient::connect(server.tcp.as_deref().unwrap());
    handshake(&mut client);
    start_sleeper(&mut client);
    let status = server.terminate();
    assert!(status.success(), "exit status {status:?}");
    // The session was closed: its subagent's termination, then EOF.
    let mut terminated = false;
    while let Some(line) = client.next() {
        terminated |= line["event"] == "terminated";
    }
    assert!(terminated, "the running subagent was terminated");
}

fn start_fails(args: &[&str], config: Option<&str>) -> String {
    let config = config.map(tempfile_lite::TempFile::with);
    let mut child = command(args, config.as_ref())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start");
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    let status = wait(&mut child);
    assert!(!status.success(), "start-up must fail: {args:?}");
    err
}

#[test]
fn a_non_loopback_bind_without_tokens_is_refused_unless_insecure() {
    let err = start_fails(&["--tcp", "0.0.0.0:0"], None);
    assert!(err.contains("not a loopback address") && err.contains("--insecure"), "{err}");
    let err = start_fails(&["--http", "0.0.0.0:0"], None);
    assert!(err.contains("--insecure"), "{err}");
    let mut server = Server::start(&["--tcp", "0.0.0.0:0", "--insecure"], None);
    assert!(server.terminate().success());
    let mut server = Server::start(&["--tcp", "0.0.0.0:0"], Some("[auth]\ntokens = [\"t0ken\"]\n"));
    assert!(server.terminate().success());
}

#[test]
fn a_bad_config_stops_start_up_naming_the_key() {
    let err = start_fails(&["--tcp", "127.0.0.1:0"], Some("[limits]\nmax_depht = 3\n"));
    assert!(err.contains("max_depht"), "{err}");
    let err = start_fails(&["--tcp", "127.0.0.1:0"], Some("[limits]\nmax_depth = \"three\"\n"));
    assert!(err.contains("max_depth"), "{err}");
    let err = start_fails(&["--tcp", "127.0.0.1:0"], Some("[[routes]]\nmodel = \"*\"\nadapter = \"telepathy\"\n"));
    assert!(err.contains("telepathy"), "{err}");
    let err = start_fails(&["--tcp", "127.0.0.1:0"], Some("[bogus]\nx = 1\n"));
    assert!(err.contains("bogus"), "{err}");
    let err = start_fails(&["--tcp", "127.0.0.1:0"], Some("[auth]\ntoken_env = \"SUBAGENTD_SURELY_UNSET_VAR\"\n"));
    assert!(err.contains("SUBAGENTD_SURELY_UNSET_VAR"), "{err}");
}
