//! The real binary over HTTP + SSE: sessions, send, stream, health, 400/404,
//! replies kept until the stream attaches, reconnects, idle expiry, ended
//! sessions forgotten (and counted until then), 429 when busy.

use crate::e2e_support::*;
use serde_json::json;

fn new_session(addr: &str) -> String {
    let (status, body) = http(addr, "POST", "/session", &[], "");
    assert_eq!(status, 200, "{body}");
    body["session_id"].as_str().expect("session_id").to_owned()
}

fn send(addr: &str, session: &str, lines: &[serde_json::Value]) {
    let body: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    let (status, reply) =
        http(addr, "POST", "/send", &[("X-Session-Id", session), ("Content-Type", "text/plain")], &body.join("\n"));
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply, json!({ "ok": true }));
}

#[test]
fn health_answers_ok() {
    let server = Server::start(&["--http", "127.0.0.1:0"], None);
    let (status, body) = http(server.http.as_deref().unwrap(), "GET", "/health", &[], "");
    assert_eq!(status, 200);
    assert_eq!(body["status"], "ok");
}

#[test]
fn send_and_stream_need_a_known_session() {
    let server = Server::start(&["--http", "127.0.0.1:0"], None);
    let addr = server.http.as_deref().unwrap();
    assert_eq!(http(addr, "POST", "/send", &[], "{}").0, 400);
    assert_eq!(http(addr, "POST", "/send", &[("X-Session-Id", "nope")], "{}").0, 404);
    assert_eq!(http(addr, "GET", "/stream", &[], "").0, 400);
    assert_eq!(http(addr, "GET", "/stream", &[("X-Session-Id", "nope")], "").0, 404);
}

#[test]
fn replies_sent_before_the_stream_attaches_are_delivered_and_a_full_flow_works() {
    let server = Server::start(&["--http", "127.0.0.1:0"], None);
    let addr = server.http.as_deref().unwrap();
    let session = new_session(addr);
    // Handshake and ping before any stream exists (the SDK does this).
    send(
        addr,
        &session,
        &[
            json!({ "type": "handshake/req", "id": "h", "version": "1.0", "agent_id": "a", "agent_caps": ["subagents"], "auth_token": "" }),
            json!({ "type": "ping", "id": "p" }),
        ],
    );
    let mut stream = SseStream::open(addr, &session);
    assert_eq!(stream.status, 200);
    assert!(stream.content_type.starts_with("text/event-stream"), "{}", stream.content_type);
    let hs = stream.next().expect("handshake reply");
    assert_eq!(hs["type"], "handshake/resp");
    assert_eq!(hs["req_id"], "h");
    assert_eq!(hs["session_id"], session.as_str());
    assert_eq!(hs["accepted_caps"][0]["capability"], "multi_agent");
    assert_eq!(stream.next().expect("pong")["type"], "pong");

    send(addr, &session, &[json!({ "type": "SUBAGENT_SPAWN_REQ", "id": "s", "agent": { "name": "n", "model": "m" } })]);
    let sub = stream.reply("s")["subagent_id"].as_str().unwrap().to_owned();
    send(
        addr,
        &session,
        &[
            json!({ "type": "SUBAGENT_DELEGATE_REQ", "id": "d", "subagent_id": sub, "task": { "name": "t", "instruction": "i" } }),
            json!({ "type": "SUBAGENT_AWAIT_REQ", "id": "a", "subagent_id": sub }),
        ],
    );
    assert_eq!(stream.reply("d")["accepted"], true);
    let done = stream.reply("a");
    assert_eq!(done["status"], "COMPLETED", "{done}");
    assert_eq!(done["result"]["summary"], "Completed task: t");

    // A bad line gets its error on the stream; the session goes on.
    let (status, _) = http(addr, "POST", "/send", &[("X-Session-Id", &session)], "{\"type\":\"ping\",\"id\":\"x\"");
    assert_eq!(status, 200);
    // Its reply has `req_id` "" (no id could be read); the task's events
    // may still come before it (stream order is not guaranteed).
    assert_eq!(stream.reply("")["code"], "parse_error");
    send(addr, &session, &[json!({ "type": "shutdown", "id": "bye", "timeout": 0 })]);
    assert_eq!(stream.reply("bye")["type"], "shutdown/resp");
    assert!(stream.next().is_none(), "the stream ends with the session");
}

#[test]
fn a_reconnecting_stream_gets_what_was_produced_meanwhile() {
    let server = Server::start(&["--http", "127.0.0.1:0"], None);
    let addr = server.http.as_deref().unwrap();
    let session = new_session(addr);
    let mut first = SseStream::open(addr, &session);
    send(addr, &session, &[json!({ "type": "handshake/req", "id": "h", "agent_caps": ["multi_agent"] })]);
    assert_eq!(first.reply("h")["ok"], true);
    drop(first);
    // SSE has no acks: wait until the host has seen the old stream go.
    server.wait_streams(0);
    send(addr, &session, &[json!({ "type": "ping", "id": "p1" }), json!({ "type": "ping", "id": "p2" })]);
    let mut second = SseStream::open(addr, &session);
    assert_eq!(second.next().expect("p1")["req_id"], "p1");
    assert_eq!(second.next().expect("p2")["req_id"], "p2");
    // A third stream replaces the second without losing anything.
    let mut third = SseStream::open(addr, &session);
    send(addr, &session, &[json!({ "type": "ping", "id": "p3" })]);
    assert_eq!(third.reply("p3")["type"], "pong");
    assert_eq!(second.next_event().expect("a last event").0.as_deref(), Some("closed"));
    assert!(second.next().is_none(), "the replaced stream ends");
}

#[test]
fn an_idle_session_expires() {
    let server = Server::start(&["--http", "127.0.0.1:0"], Some("[limits]\nsession_idle_seconds = 1\n"));
    let addr = server.http.as_deref().unwrap();
    let session = new_session(addr);
    assert_eq!(server.sessions(), 1);
    server.wait_sessions(0);
    assert_eq!(http(addr, "POST", "/send", &[("X-Session-Id", &session)], "{}").0, 404);
}

#[test]
fn max_sessions_answers_503_once_that_many_sessions_have_handshaken() {
    let server = Server::start(&["--http", "127.0.0.1:0"], Some("[limits]\nmax_sessions = 1\n"));
    let addr = server.http.as_deref().unwrap();
    let first = new_session(addr);
    // Not handshaken yet: it holds no max_sessions slot.
    let second = new_session(addr);
    let mut stream = SseStream::open(addr, &first);
    send(addr, &first, &[json!({ "type": "handshake/req", "id": "h", "agent_caps": ["multi_agent"] })]);
    assert_eq!(stream.reply("h")["ok"], true);
    let (status, body) = http(addr, "POST", "/session", &[], "");
    assert_eq!(status, 503, "{body}");
    assert!(body["error"].as_str().unwrap().contains("max_sessions"), "{body}");
    // A session opened before the slots filled is refused at its handshake.
    let mut stream = SseStream::open(addr, &second);
    send(addr, &second, &[json!({ "type": "handshake/req", "id": "h2", "agent_caps": ["multi_agent"] })]);
    let refused = stream.reply("h2");
    assert_eq!(refused["code"], "runtime_error", "{refused}");
    assert_eq!(refused["detail"]["limit"], "max_sessions", "{refused}");
    assert_eq!(refused["retryable"], true, "{refused}");
}

fn handshake_and_shutdown(addr: &str, session: &str) {
    send(
        addr,
        session,
        &[
            json!({ "type": "handshake/req", "id": "h", "agent_caps": ["multi_agent"] }),
            json!({ "type": "shutdown", "id": "bye", "timeout": 0 }),
        ],
    );
}

#[test]
fn ended_sessions_are_forgotten_so_create_shutdown_loops_never_hit_503() {
    let config = "[limits]\nmax_sessions = 2\n[server]\nfinal_flush_ms = 200\n";
    let server = Server::start(&["--http", "127.0.0.1:0"], Some(config));
    let addr = server.http.as_deref().unwrap();
    for round in 0..6 {
        let session = new_session(addr);
        handshake_and_shutdown(addr, &session);
        if round % 2 == 0 {
            // A stream that takes the last line removes the session at once.
            let mut stream = SseStream::open(addr, &session);
            assert_eq!(stream.reply("bye")["type"], "shutdown/resp");
            assert!(stream.next().is_none(), "the stream ends with the session");
        }
        // Without a stream, it goes after final_flush_ms.
        server.wait_sessions(0);
        let headers = [("X-Session-Id", session.as_str())];
        assert_eq!(http(addr, "GET", "/stream", &headers, "").0, 404, "round {round}: the session is forgotten");
    }
}

#[test]
fn an_ended_session_counts_toward_max_sessions_until_its_last_lines_are_delivered() {
    let config = "[limits]\nmax_sessions = 1\n[server]\nfinal_flush_ms = 600000\n";
    let server = Server::start(&["--http", "127.0.0.1:0"], Some(config));
    let addr = server.http.as_deref().unwrap();
    let session = new_session(addr);
    handshake_and_shutdown(addr, &session);
    // Once the session has ended, /send answers 404 (meanwhile it is taken
    // and refused on the stream).
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let (status, body) = http(addr, "POST", "/send", &[("X-Session-Id", &session)], r#"{"type":"ping"}"#);
        if status == 404 {
            break;
        }
        assert_eq!(status, 200, "{body}");
        assert!(std::time::Instant::now() < deadline, "the session never ended");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // Ended with undelivered lines: still counted.
    assert_eq!(server.sessions(), 1);
    assert_eq!(http(addr, "POST", "/session", &[], "").0, 503);
    let mut stream = SseStream::open(addr, &session);
    assert_eq!(stream.reply("h")["ok"], true);
    assert_eq!(stream.reply("bye")["type"], "shutdown/resp");
    while let Some(message) = stream.next() {
        assert_eq!(message["code"], "invalid_state", "pings sent while it drained are refused: {message}");
    }
    server.wait_sessions(0);
    new_session(addr);
}

#[test]
fn send_answers_429_busy_at_once_when_the_session_is_at_its_inflight_bound() {
    let server = Server::start(&["--http", "127.0.0.1:0"], Some("[limits]\nmax_inflight_requests = 1\n"));
    let addr = server.http.as_deref().unwrap();
    let session = new_session(addr);
    let mut stream = SseStream::open(addr, &session);
    send(addr, &session, &[json!({ "type": "handshake/req", "id": "h", "agent_caps": ["multi_agent"] })]);
    send(addr, &session, &[json!({ "type": "SUBAGENT_SPAWN_REQ", "id": "s", "agent": { "name": "n", "model": "m" } })]);
    let sub = stream.reply("s")["subagent_id"].as_str().unwrap().to_owned();
    let task = json!({ "name": "t", "instruction": "i", "metadata": { "script": [{ "sleep_ms": 600_000 }] } });
    send(addr, &session, &[json!({ "type": "SUBAGENT_DELEGATE_REQ", "id": "d", "subagent_id": sub, "task": task })]);
    assert_eq!(stream.reply("d")["status"], "RUNNING");
    // The pending await is the one request in flight: the session stops
    // reading, its input queue fills, and then /send must not wait.
    send(addr, &session, &[json!({ "type": "SUBAGENT_AWAIT_REQ", "id": "a", "subagent_id": sub })]);
    let headers = [("X-Session-Id", session.as_str()), ("Content-Type", "text/plain")];
    let mut accepted = 0;
    let busy = loop {
        let (status, body) = http(addr, "POST", "/send", &headers, r#"{"type":"ping"}"#);
        if status == 429 {
            break body;
        }
        assert_eq!(status, 200, "{body}");
        accepted += 1;
        assert!(accepted < 1_000, "/send never reported busy");
    };
    assert_eq!(busy["ok"], false, "{busy}");
    assert_eq!(busy["error"], "busy", "{busy}");
    assert!(accepted > 0, "the queue took some pings first");
}
