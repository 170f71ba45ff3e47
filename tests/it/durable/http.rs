//! An HTTP session across restarts: the same `X-Session-Id`, SSE ids
//! without a gap over a reconnect with `Last-Event-ID` and restarts, and
//! every `/send` answered 200 taking effect once, whatever the kill point;
//! frames after a restart numbered past every served one.

use super::{seed, text, trace, Backing, Node, CONFIG};
use crate::e2e_support::{http_with_headers, SseStream, PATIENCE};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// `POST /send` of `lines`; asserts 200.
pub(super) fn send_lines(addr: &str, session: &str, lines: &[Value]) {
    let body: Vec<String> = lines.iter().map(Value::to_string).collect();
    let (status, _, reply) = http_with_headers(addr, "POST", "/send", &[("X-Session-Id", session)], &body.join("\n"));
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply, json!({ "ok": true }));
}

/// Everything an HTTP client read from its streams: `(id, message)` in order.
#[derive(Default)]
pub(super) struct SseLog {
    pub(super) events: Vec<(u64, Value)>,
}

impl SseLog {
    /// Reads the next event of `stream` (it must have an id) into the log.
    fn read(&mut self, stream: &mut SseStream) -> Value {
        let (name, data) = stream.next_event().expect("an event before the stream ends");
        trace(&format!("sse {}: {data}", stream.last_id));
        assert_eq!(name, None, "an unexpected named event: {data}");
        self.events.push((stream.last_id, data.clone()));
        data
    }

    /// Reads until a message for which `wanted` holds.
    fn read_until(&mut self, stream: &mut SseStream, what: &str, wanted: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            assert!(Instant::now() < deadline, "no SSE message {what}");
            let data = self.read(stream);
            if wanted(&data) {
                return data;
            }
        }
    }

    /// The reply to `req_id`: already read (replies come in any order), or
    /// read now.
    pub(super) fn reply(&mut self, stream: &mut SseStream, req_id: &str) -> Value {
        if let Some(reply) = self.replies(req_id).first() {
            return (*reply).clone();
        }
        self.read_until(stream, req_id, |data| data["req_id"] == req_id)
    }

    pub(super) fn replies(&self, req_id: &str) -> Vec<&Value> {
        self.events.iter().map(|(_, data)| data).filter(|data| data["req_id"] == req_id).collect()
    }

    fn progress(&self, sub: &str) -> Vec<String> {
        self.events
            .iter()
            .map(|(_, data)| data)
            .filter(|data| data["subagent_id"] == sub && data["event"] == "progress")
            .map(|data| text(&data["content"]["message"]))
            .collect()
    }
}

fn event_of<'a>(sub: &'a str, event: &'a str) -> impl Fn(&Value) -> bool + 'a {
    move |data| data["subagent_id"] == sub && data["event"] == event && data.get("req_id").is_none()
}

/// Test 3 on `backing`: the same `X-Session-Id` after a restart, SSE ids
/// without a gap over a reconnect with `Last-Event-ID` and the restart, and
/// a `/send` answered right before SIGKILL taking effect once.
fn http_session_survives_a_restart(backing: Backing) {
    let started = Instant::now();
    let kind = backing.kind();
    let mut node = Node::start(backing, CONFIG);
    let addr = node.http().to_owned();
    let (status, _, ready) = http_with_headers(&addr, "GET", "/ready", &[], "");
    assert_eq!((status, &ready), (200, &json!({ "ready": true, "store": kind })));
    let (status, headers, body) = http_with_headers(&addr, "POST", "/session", &[], "");
    assert_eq!(status, 200, "{body}");
    let session = text(&body["session_id"]);
    assert_eq!(headers.get("x-session-id"), Some(&session), "the id in a header too: {headers:?}");

    let mut log = SseLog::default();
    let mut stream = SseStream::open(&addr, &session);
    send_lines(
        &addr,
        &session,
        &[
            json!({ "type": "handshake/req", "id": "h", "agent_id": "web", "agent_caps": ["multi_agent"] }),
            json!({ "type": "SUBAGENT_SPAWN_REQ", "id": "s1", "agent": { "name": "steady", "model": "m" } }),
            json!({ "type": "SUBAGENT_SPAWN_REQ", "id": "s2", "agent": { "name": "idle", "model": "m" } }),
        ],
    );
    assert_eq!(log.reply(&mut stream, "h")["ok"], true);
    let steady = text(&log.reply(&mut stream, "s1")["subagent_id"]);
    let idle = text(&log.reply(&mut stream, "s2")["subagent_id"]);
    let mut script: Vec<Value> =
        (0..6).flat_map(|n| [json!({ "progress": format!("s{n}") }), json!({ "sleep_ms": 300 })]).collect();
    script.push(json!({ "return": { "worker": "steady", "steps": 6 } }));
    let task = json!({ "name": "steady", "instruction": "i", "metadata": { "script": script } });
    send_lines(
        &addr,
        &session,
        &[json!({ "type": "SUBAGENT_DELEGATE_REQ", "id": "d1", "subagent_id": steady, "task": task })],
    );
    log.read_until(&mut stream, "s1 of steady", |d| {
        event_of(&steady, "progress")(d) && d["content"]["message"] == "s1"
    });

    // A reconnect with Last-Event-ID gets what came after that event again,
    // same ids, same lines, then what was produced meanwhile.
    drop(stream);
    node.server.wait_streams(0);
    let middle = log.events.len() / 2;
    let (middle_id, _) = log.events[middle - 1].clone();
    let mut stream = SseStream::open_after(&addr, &session, Some(middle_id));
    let mut again = SseLog::default();
    for _ in middle..log.events.len() {
        again.read(&mut stream);
    }
    assert_eq!(again.events[..], log.events[middle..], "the replay after id {middle_id}");
    log.read_until(&mut stream, "s2 of steady", |d| {
        event_of(&steady, "progress")(d) && d["content"]["message"] == "s2"
    });

    // A /send answered 200 right before SIGKILL: its requests take effect
    // after the restart (once).
    let idle_task = json!({ "name": "idle", "instruction": "i", "metadata": { "script": [{ "progress": "p" }, { "return": { "idle": true } }] } });
    send_lines(
        &addr,
        &session,
        &[
            json!({ "type": "SUBAGENT_SPAWN_REQ", "id": "s3", "agent": { "name": "late", "model": "m" } }),
            json!({ "type": "SUBAGENT_DELEGATE_REQ", "id": "d2", "subagent_id": idle, "task": idle_task }),
        ],
    );
    node.kill9();
    // Whatever the old stream still delivers counts as read.
    drain_stream(&mut log, &mut stream);
    let last_before = log.events.last().unwrap().0;

    node.restart();
    let addr = node.http().to_owned();
    let mut stream = SseStream::open_after(&addr, &session, Some(last_before));
    assert_eq!(stream.status, 200, "the same X-Session-Id works after the restart");
    log.read_until(&mut stream, "`steady` resumed", |d| {
        event_of(&steady, "resumed")(d) && d["content"]["attempt"] == 2
    });
    log.read_until(&mut stream, "`steady` completed", event_of(&steady, "completed"));
    send_lines(
        &addr,
        &session,
        &[
            json!({ "type": "SUBAGENT_AWAIT_REQ", "id": "a1", "subagent_id": steady }),
            json!({ "type": "SUBAGENT_AWAIT_REQ", "id": "a2", "subagent_id": idle }),
            json!({ "type": "SUBAGENT_LIST_REQ", "id": "l1" }),
        ],
    );
    let a1 = log.reply(&mut stream, "a1");
    let a2 = log.reply(&mut stream, "a2");
    let list = log.reply(&mut stream, "l1");
    assert_eq!(
        (&a1["status"], &a1["result"]),
        (&json!("COMPLETED"), &json!({ "worker": "steady", "steps": 6 })),
        "{a1}"
    );
    assert_eq!(
        (&a2["status"], &a2["result"]),
        (&json!("COMPLETED"), &json!({ "idle": true })),
        "the delegate sent before the kill: {a2}"
    );
    let mut names: Vec<String> = list["subagents"].as_array().unwrap().iter().map(|row| text(&row["name"])).collect();
    names.sort();
    assert_eq!(names, ["idle", "late", "steady"], "the spawn sent before the kill happened, once: {list}");
    // Each request was answered once, across the restart.
    for req in ["h", "s1", "s2", "d1", "s3", "d2", "a1", "a2", "l1"] {
        assert_eq!(log.replies(req).len(), 1, "replies to {req}: {:?}", log.replies(req));
    }
    // The SSE ids ran on without a gap or a repeat, and no step of `steady`
    // was lost or repeated.
    let ids: Vec<u64> = log.events.iter().map(|(id, _)| *id).collect();
    let expected: Vec<u64> = (ids[0]..ids[0] + ids.len() as u64).collect();
    assert_eq!(ids, expected, "SSE ids across reconnect and restart");
    assert_eq!(log.progress(&steady), (0..6).map(|n| format!("s{n}")).collect::<Vec<_>>());
    eprintln!("http across a restart ({kind}): {:?}", started.elapsed());
}

#[test]
fn durable_sqlite_http_session_survives_a_restart_with_sse_replay_and_sends_taking_effect() {
    http_session_survives_a_restart(Backing::sqlite());
}

#[test]
fn durable_postgres_http_session_survives_a_restart_with_sse_replay_and_sends_taking_effect() {
    http_session_survives_a_restart(Backing::postgres());
}

/// Reads what a killed host's stream still delivers, to its end.
pub(super) fn drain_stream(log: &mut SseLog, stream: &mut SseStream) {
    while let Some((name, data)) = stream.next_event() {
        assert_eq!(name, None, "{data}");
        trace(&format!("sse {}: {data}", stream.last_id));
        log.events.push((stream.last_id, data));
    }
}

/// A frame's number keys what it did (a spawn served again after a restart
/// answers with the subagent it made): after a restart with every earlier
/// frame served, new frames are still numbered past them, so a new spawn
/// replayed after a second crash makes its own subagent instead of
/// answering an old frame's.
#[test]
fn durable_frames_after_a_restart_are_numbered_past_every_served_one() {
    frames_numbered_past_served_ones(Backing::sqlite());
}

#[test]
fn durable_postgres_frames_after_a_restart_are_numbered_past_every_served_one() {
    frames_numbered_past_served_ones(Backing::postgres());
}

fn frames_numbered_past_served_ones(backing: Backing) {
    // One request at a time: a frame behind a long await stays unserved.
    let config = format!("{CONFIG}max_inflight_requests = 1\n");
    let mut node = Node::start(backing, &config);
    let (_, _, body) = http_with_headers(node.http(), "POST", "/session", &[], "");
    let session = text(&body["session_id"]);
    let mut log = SseLog::default();
    let mut stream = SseStream::open(node.http(), &session);
    let hs = json!({ "type": "handshake/req", "id": "h", "agent_id": "web", "agent_caps": ["multi_agent"] });
    let spawn =
        |name: &str| json!({ "type": "SUBAGENT_SPAWN_REQ", "id": name, "agent": { "name": name, "model": "m" } });
    send_lines(node.http(), &session, &[hs, spawn("first"), spawn("sleeper")]);
    let first = text(&log.reply(&mut stream, "first")["subagent_id"]);
    let sleeper = text(&log.reply(&mut stream, "sleeper")["subagent_id"]);
    let task =
        json!({ "name": "t", "instruction": "i", "metadata": { "script": [{ "sleep_ms": 1500 }, { "return": {} }] } });
    send_lines(
        node.http(),
        &session,
        &[json!({ "type": "SUBAGENT_DELEGATE_REQ", "id": "d", "subagent_id": sleeper, "task": task })],
    );
    log.reply(&mut stream, "d");
    // Every frame served; a restart.
    node.kill9();
    drain_stream(&mut log, &mut stream);
    node.restart();
    // Two frames: the await holds the one request slot, so the spawn (which
    // the first restart numbered as "first" was) is journaled, not served,
    // when the host dies again.
    let wait = json!({ "type": "SUBAGENT_AWAIT_REQ", "id": "w", "subagent_id": sleeper });
    send_lines(node.http(), &session, &[wait, spawn("second")]);
    node.kill9();
    node.restart();
    let last = log.events.last().map_or(0, |(id, _)| *id);
    let mut stream = SseStream::open_after(node.http(), &session, Some(last));
    let second = text(&log.reply(&mut stream, "second")["subagent_id"]);
    assert_ne!(second, first, "the replayed spawn made a subagent of its own");
    send_lines(node.http(), &session, &[json!({ "type": "SUBAGENT_LIST_REQ", "id": "l" })]);
    let listed = log.reply(&mut stream, "l");
    let mut names: Vec<String> = listed["subagents"].as_array().unwrap().iter().map(|row| text(&row["name"])).collect();
    names.sort();
    assert_eq!(names, ["first", "second", "sleeper"], "{listed}");
}

/// `/send` journals its frames and answers 200 once they are committed; a
/// restart serves the frames whose replies were not committed. Each request
/// must take effect once: killed at random points right after the 200, with
/// every change committed on its own (`batch_max = 1`, as a busy store may
/// split a request's changes over commits), no spawn may happen twice.
#[test]
fn durable_http_sends_answered_200_take_effect_once_whatever_the_kill_point() {
    let seed = seed();
    eprintln!("http kill points: seed {seed} (replay with DURABLE_SEED={seed})");
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut node = Node::start(Backing::sqlite(), &format!("{CONFIG}[store]\nbatch_max = 1\n"));
    let addr = node.http().to_owned();
    let (_, _, body) = http_with_headers(&addr, "POST", "/session", &[], "");
    let session = text(&body["session_id"]);
    let mut log = SseLog::default();
    let mut stream = SseStream::open(&addr, &session);
    let hs = json!({ "type": "handshake/req", "id": "h", "agent_id": "web", "agent_caps": ["multi_agent"] });
    send_lines(&addr, &session, &[hs]);
    assert_eq!(log.reply(&mut stream, "h")["ok"], true);
    let rounds = 30;
    for round in 0..rounds {
        let spawn = json!({ "type": "SUBAGENT_SPAWN_REQ", "id": format!("s{round}"), "agent": { "name": format!("x{round}"), "model": "m" } });
        send_lines(node.http(), &session, &[spawn]);
        std::thread::sleep(Duration::from_micros(rng.u64(0..=6_000)));
        node.kill9();
        drain_stream(&mut log, &mut stream);
        node.restart();
        let last = log.events.last().map_or(0, |(id, _)| *id);
        stream = SseStream::open_after(node.http(), &session, Some(last));
        send_lines(node.http(), &session, &[json!({ "type": "SUBAGENT_LIST_REQ", "id": format!("l{round}") })]);
        let list = log.reply(&mut stream, &format!("l{round}"));
        let mut names: Vec<String> =
            list["subagents"].as_array().unwrap().iter().map(|row| text(&row["name"])).collect();
        names.sort();
        let mut expected: Vec<String> = (0..=round).map(|n| format!("x{n}")).collect();
        expected.sort();
        assert_eq!(names, expected, "after kill {round} (seed {seed}): every spawn answered 200 happened, once");
    }
    // Read on to the last spawn's reply: the loop stops reading at the
    // last list's reply, and nothing orders the two (earlier rounds' are
    // read by the next round's drain).
    log.reply(&mut stream, &format!("s{}", rounds - 1));
    for round in 0..rounds {
        let req = format!("s{round}");
        assert_eq!(log.replies(&req).len(), 1, "replies to {req} (seed {seed}): {:?}", log.replies(&req));
    }
    let ids: Vec<u64> = log.events.iter().map(|(id, _)| *id).collect();
    let expected: Vec<u64> = (ids[0]..ids[0] + ids.len() as u64).collect();
    assert_eq!(ids, expected, "SSE ids across {rounds} restarts");
}
