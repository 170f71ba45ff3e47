//! The server over HTTP + SSE, run in process ([`InProcess`]): sessions, send, stream, health, 400/404,
//! replies kept until the stream attaches, reconnects, idle expiry, ended
//! sessions forgotten (and counted until then), 429 when busy. Hostile
//! clients: unauthenticated sessions (their cap, their deadline), trickling
//! bodies (408), `max_connections`, a second stream.

use crate::e2e_support::*;
use serde_json::json;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

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
    let server = InProcess::start(&["--http", "127.0.0.1:0"], None);
    let (status, body) = http(server.http.as_deref().unwrap(), "GET", "/health", &[], "");
    assert_eq!(status, 200);
    assert_eq!(body["status"], "ok");
}

#[test]
fn send_and_stream_need_a_known_session() {
    let server = InProcess::start(&["--http", "127.0.0.1:0"], None);
    let addr = server.http.as_deref().unwrap();
    assert_eq!(http(addr, "POST", "/send", &[], "{}").0, 400);
    assert_eq!(http(addr, "POST", "/send", &[("X-Session-Id", "nope")], "{}").0, 404);
    assert_eq!(http(addr, "GET", "/stream", &[], "").0, 400);
    assert_eq!(http(addr, "GET", "/stream", &[("X-Session-Id", "nope")], "").0, 404);
}

#[test]
fn replies_sent_before_the_stream_attaches_are_delivered_and_a_full_flow_works() {
    let server = InProcess::start(&["--http", "127.0.0.1:0"], None);
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
    let server = InProcess::start(&["--http", "127.0.0.1:0"], None);
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
    let server = InProcess::start(&["--http", "127.0.0.1:0"], Some("[limits]\nsession_idle_seconds = 1\n"));
    let addr = server.http.as_deref().unwrap();
    let session = new_session(addr);
    assert_eq!(server.sessions(), 1);
    server.wait_sessions(0);
    assert_eq!(http(addr, "POST", "/send", &[("X-Session-Id", &session)], "{}").0, 404);
}

#[test]
fn max_sessions_answers_503_once_that_many_sessions_have_handshaken() {
    let server = InProcess::start(&["--http", "127.0.0.1:0"], Some("[limits]\nmax_sessions = 1\n"));
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
    let server = InProcess::start(&["--http", "127.0.0.1:0"], Some(config));
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
    let server = InProcess::start(&["--http", "127.0.0.1:0"], Some(config));
    let addr = server.http.as_deref().unwrap();
    let session = new_session(addr);
    handshake_and_shutdown(addr, &session);
    // Once the session has ended, /send answers 404 (meanwhile it is taken
    // and refused on the stream).
    crate::common::eventually_blocking("the session ends", PATIENCE, || {
        let (status, body) = http(addr, "POST", "/send", &[("X-Session-Id", &session)], r#"{"type":"ping"}"#);
        assert!(status == 404 || status == 200, "{status} {body}");
        (status == 404).then_some(())
    });
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

/// A session (of a server with `max_inflight_requests = 1`) whose one
/// in-flight slot is held by an await on a task that runs for minutes: the
/// session stops reading, and what is sent next waits in its input queue.
fn session_with_its_one_slot_taken(addr: &str) -> (String, SseStream) {
    let session = new_session(addr);
    let mut stream = SseStream::open(addr, &session);
    send(addr, &session, &[json!({ "type": "handshake/req", "id": "h", "agent_caps": ["multi_agent"] })]);
    send(addr, &session, &[json!({ "type": "SUBAGENT_SPAWN_REQ", "id": "s", "agent": { "name": "n", "model": "m" } })]);
    let sub = stream.reply("s")["subagent_id"].as_str().unwrap().to_owned();
    let task = json!({ "name": "t", "instruction": "i", "metadata": { "script": [{ "sleep_ms": 600_000 }] } });
    send(addr, &session, &[json!({ "type": "SUBAGENT_DELEGATE_REQ", "id": "d", "subagent_id": sub, "task": task })]);
    assert_eq!(stream.reply("d")["status"], "RUNNING");
    send(addr, &session, &[json!({ "type": "SUBAGENT_AWAIT_REQ", "id": "a", "subagent_id": sub })]);
    (session, stream)
}

#[test]
fn send_answers_429_busy_at_once_when_the_session_is_at_its_inflight_bound() {
    let server = InProcess::start(&["--http", "127.0.0.1:0"], Some("[limits]\nmax_inflight_requests = 1\n"));
    let addr = server.http.as_deref().unwrap();
    let (session, _stream) = session_with_its_one_slot_taken(addr);
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

#[test]
fn send_answers_429_once_the_sessions_queued_input_passes_input_max_bytes() {
    let config = "[limits]\nmax_inflight_requests = 1\ninput_max_bytes = 65536\n";
    let server = InProcess::start(&["--http", "127.0.0.1:0"], Some(config));
    let addr = server.http.as_deref().unwrap();
    let (session, _stream) = session_with_its_one_slot_taken(addr);
    let headers = [("X-Session-Id", session.as_str()), ("Content-Type", "text/plain")];
    // Lines of 40 KB: the first fits the empty queue, the second does not.
    let big = json!({ "type": "ping", "pad": "x".repeat(40_000) }).to_string();
    let mut accepted = 0;
    let busy = loop {
        let (status, body) = http(addr, "POST", "/send", &headers, &big);
        if status == 429 {
            break body;
        }
        assert_eq!(status, 200, "{body}");
        accepted += 1;
        assert!(accepted < 10, "/send kept queueing 40 KB lines past 64 KiB");
    };
    assert_eq!(busy["error"], "busy", "{busy}");
    assert!(accepted <= 2, "{accepted} lines of 40 KB were queued under a 64 KiB bound");
}

fn handshake_with(addr: &str, session: &str, token: &str) -> serde_json::Value {
    handshake_as(addr, session, token, false)
}

// A handshake with `token`; with `bearer`, every request carries it too (a
// session opened with a bearer token is that token's alone).
fn handshake_as(addr: &str, session: &str, token: &str, bearer: bool) -> serde_json::Value {
    let authorization = format!("Bearer {token}");
    let header = if bearer { format!("Authorization: {authorization}\r\n") } else { String::new() };
    let mut stream = SseStream::open_with(addr, session, &header);
    let hs = json!({ "type": "handshake/req", "id": "h", "agent_caps": ["multi_agent"], "auth_token": token });
    let body = [hs, json!({ "type": "ping", "id": "p" })].map(|line| line.to_string()).join("\n");
    let mut headers = vec![("X-Session-Id", session)];
    if bearer {
        headers.push(("Authorization", authorization.as_str()));
    }
    assert_eq!(http(addr, "POST", "/send", &headers, &body).0, 200);
    let reply = stream.reply("h");
    if reply["ok"] == true {
        assert_eq!(stream.reply("p")["type"], "pong");
    }
    reply
}

#[test]
fn a_flood_of_unauthenticated_sessions_never_locks_out_an_authorised_client() {
    let config = "[limits]\nmax_sessions = 4\nmax_sessions_per_caller = 4\nmax_unauthenticated_sessions = 8\n[auth]\ntokens = [\"s3cret\"]\n";
    let server = InProcess::start(&["--http", "127.0.0.1:0"], Some(config));
    let addr = server.http.as_deref().unwrap();
    // An SDK client that opened its session before the flood.
    let early = new_session(addr);
    let mut statuses = std::collections::BTreeMap::new();
    for _ in 0..252 {
        let (status, body) = http(addr, "POST", "/session", &[], "");
        if status == 503 {
            assert!(body["error"].as_str().unwrap().contains("max_unauthenticated_sessions"), "{body}");
        }
        *statuses.entry(status).or_insert(0) += 1;
    }
    assert_eq!(statuses, [(200, 7), (503, 245)].into(), "the flood fills only the unauthenticated pool");
    assert_eq!(handshake_with(addr, &early, "s3cret")["ok"], true);
    // Clients presenting their token at POST /session get every other
    // max_sessions slot while the flood's sessions are still open.
    let bearer = [("Authorization", "Bearer s3cret")];
    for _ in 0..3 {
        let (status, body) = http(addr, "POST", "/session", &bearer, "");
        assert_eq!(status, 200, "{body}");
        assert_eq!(handshake_as(addr, body["session_id"].as_str().unwrap(), "s3cret", true)["ok"], true);
    }
    assert_eq!(server.sessions(), 7 + 4);
    let (status, body) = http(addr, "POST", "/session", &bearer, "");
    assert_eq!(status, 503, "max_sessions are all taken: {body}");
    assert!(body["error"].as_str().unwrap().contains("max_sessions"), "{body}");
    let (status, _) = http(addr, "POST", "/session", &[("Authorization", "Bearer guess")], "");
    assert_eq!(status, 401, "a wrong bearer token");
}

#[test]
fn an_http_session_without_a_handshake_expires_at_the_handshake_deadline() {
    let server = InProcess::start(&["--http", "127.0.0.1:0"], Some("[limits]\nhandshake_timeout_ms = 300\n"));
    let addr = server.http.as_deref().unwrap();
    let served = new_session(addr);
    let mut stream = SseStream::open(addr, &served);
    send(addr, &served, &[json!({ "type": "handshake/req", "id": "h", "agent_caps": ["multi_agent"] })]);
    assert_eq!(stream.reply("h")["ok"], true);
    let silent = new_session(addr);
    let started = Instant::now();
    server.wait_sessions(1);
    assert!(started.elapsed() < Duration::from_secs(10), "expired at the handshake deadline, not the idle time");
    assert_eq!(http(addr, "POST", "/send", &[("X-Session-Id", &silent)], "{}").0, 404);
    // The session that handshook lives on past the deadline.
    send(addr, &served, &[json!({ "type": "ping", "id": "p" })]);
    assert_eq!(stream.reply("p")["type"], "pong");
}

// Sends `path` with a chunked body that trickles one byte every 200 ms
// until the server closes the connection; returns the status, the JSON
// body, and how long the answer took. Fails unless the server also closes
// the connection.
fn trickle(addr: &str, path: &str, session: &str) -> (u16, serde_json::Value, Duration) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nX-Session-Id: {session}\r\nContent-Type: text/plain\r\n\
         Transfer-Encoding: chunked\r\n\r\n"
    )
    .unwrap();
    let started = Instant::now();
    let mut writer = stream.try_clone().unwrap();
    let trickler = std::thread::spawn(move || {
        for byte in b"{\"type\":\"ping\",\"id\":\"slow\"}".iter().cycle() {
            if writer.write_all(format!("1\r\n{}\r\n", *byte as char).as_bytes()).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    let mut response = Vec::new();
    let mut chunk = [0u8; 4096];
    let took = loop {
        let n = stream.read(&mut chunk).expect("an answer in time");
        assert!(n > 0, "closed without an answer");
        response.extend_from_slice(&chunk[..n]);
        if response.ends_with(b"}") {
            break started.elapsed();
        }
    };
    stream.read_to_end(&mut response).expect("then the server closes the connection");
    drop(stream);
    trickler.join().unwrap();
    let text = String::from_utf8(response).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("head and body");
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("status");
    (status, serde_json::from_str(body).expect("JSON body"), took)
}

#[test]
fn a_trickling_body_is_cut_off_with_408_at_the_body_timeout() {
    let server = InProcess::start(&["--http", "127.0.0.1:0"], Some("[limits]\nhttp_body_timeout_ms = 1000\n"));
    let addr = server.http.as_deref().unwrap();
    let session = new_session(addr);
    for path in ["/send", "/session"] {
        // Bytes keep coming, but the whole body never arrives in time.
        let (status, body, took) = trickle(addr, path, &session);
        assert_eq!(status, 408, "{path}: {body}");
        assert_eq!(body["error"], "body_timeout", "{path}: {body}");
        assert!(took >= Duration::from_millis(900) && took < Duration::from_secs(8), "{path}: answered after {took:?}");
    }
    assert_eq!(server.sessions(), 1, "the trickled POST /session opened none");
    // The server is still serving.
    let mut stream = SseStream::open(addr, &session);
    send(addr, &session, &[json!({ "type": "handshake/req", "id": "h", "agent_caps": ["multi_agent"] })]);
    assert_eq!(stream.reply("h")["ok"], true);
}

#[test]
fn the_http_server_stops_accepting_at_max_connections() {
    let config = "[limits]\nmax_connections = 2\n[server]\nhttp_workers = 1\n";
    let server = InProcess::start(&["--http", "127.0.0.1:0"], Some(config));
    let addr = server.http.as_deref().unwrap();
    let (one, two) = (new_session(addr), new_session(addr));
    let first = SseStream::open(addr, &one);
    let _second = SseStream::open(addr, &two);
    assert_eq!((first.status, _second.status), (200, 200));
    // Two connections are open: a third is not served meanwhile.
    let mut third = TcpStream::connect(addr).expect("connect");
    write!(third, "GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    third.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let mut byte = [0u8; 1];
    let waited = third.peek(&mut byte);
    assert!(
        matches!(&waited, Err(err) if matches!(err.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)),
        "served past max_connections: {waited:?}"
    );
    // One closes: the third is accepted and answered.
    drop(first);
    third.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut response = String::new();
    third.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
}

#[test]
fn a_second_stream_ends_the_first_with_a_closed_event_and_takes_the_messages() {
    let server = InProcess::start(&["--http", "127.0.0.1:0"], None);
    let addr = server.http.as_deref().unwrap();
    let session = new_session(addr);
    let mut first = SseStream::open(addr, &session);
    send(addr, &session, &[json!({ "type": "handshake/req", "id": "h", "agent_caps": ["multi_agent"] })]);
    assert_eq!(first.reply("h")["ok"], true);
    let mut second = SseStream::open(addr, &session);
    let (name, last) = first.next_event().expect("a last event on the replaced stream");
    assert_eq!(name.as_deref(), Some("closed"), "{last}");
    assert_eq!(last["type"], "error", "{last}");
    assert_eq!(last["code"], "invalid_state", "{last}");
    assert_eq!(last["detail"]["reason"], "stream_replaced", "{last}");
    assert!(first.next().is_none(), "then the replaced stream ends");
    send(addr, &session, &[json!({ "type": "ping", "id": "p" })]);
    assert_eq!(second.reply("p")["type"], "pong");
}
