//! The protocol session without sockets: NDJSON lines in, NDJSON lines out,
//! through the real decoder, session, dispatcher and encoder.

use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use subagent_host::config::Limits;
use subagent_host::protocol::codec::{Frame, LineDecoder};
use subagent_host::server::{Auth, ConnectionEnd, InputSender, OutboxReceiver, Service, SHUTTING_DOWN};
use subagent_host::{Host, HostConfig, Tree};
use tokio::task::JoinHandle;

/// Generous bound on waiting for one reply, so a bug fails instead of hanging.
const PATIENCE: Duration = Duration::from_secs(30);
const LIMIT: usize = 4096;

fn limits() -> Limits {
    Limits { max_line_bytes: LIMIT, ..Limits::default() }
}

pub(crate) fn service(limits: Limits, auth: Auth) -> Arc<Service> {
    Service::new(Host::new(HostConfig { limits, ..Default::default() }), auth)
}

/// One client of one in-process session.
pub(crate) struct Client {
    input: Option<InputSender>,
    output: OutboxReceiver,
    decoder: LineDecoder,
    handle: Tree,
    run: JoinHandle<ConnectionEnd>,
    // Lines received while looking for another reply.
    pending: VecDeque<Value>,
}

impl Client {
    pub(crate) fn open(service: &Arc<Service>) -> Self {
        let opened = service.open().expect("session opens");
        let handle = opened.connection.tree();
        let run = actix_rt::spawn(opened.connection.run());
        Self {
            input: Some(opened.input),
            output: opened.output,
            decoder: LineDecoder::new(service.limits().max_line_bytes),
            handle,
            run,
            pending: VecDeque::new(),
        }
    }

    pub(crate) async fn raw(&mut self, bytes: &[u8]) {
        let mut frames = Vec::new();
        self.decoder.feed(bytes, &mut frames);
        for frame in frames {
            self.input.as_ref().expect("input open").send(frame).await.expect("session reads");
        }
    }

    pub(crate) async fn send(&mut self, message: Value) {
        self.raw(format!("{message}\n").as_bytes()).await;
    }

    pub(crate) async fn next(&mut self) -> Value {
        if let Some(value) = self.pending.pop_front() {
            return value;
        }
        self.next_line().await.expect("a line")
    }

    pub(crate) async fn next_line(&mut self) -> Option<Value> {
        let line = tokio::time::timeout(PATIENCE, self.output.recv()).await.expect("a line in time")?;
        Some(crate::contract::checked(&line))
    }

    /// The reply carrying `req_id`; other lines are kept for later.
    pub(crate) async fn reply(&mut self, req_id: &str) -> Value {
        if let Some(at) = self.pending.iter().position(|v| v["req_id"] == req_id) {
            return self.pending.remove(at).expect("present");
        }
        loop {
            let value = self.next_line().await.expect("reply before the end");
            if value["req_id"] == req_id {
                return value;
            }
            self.pending.push_back(value);
        }
    }

    pub(crate) async fn request(&mut self, mut message: Value, id: &str) -> Value {
        message["id"] = json!(id);
        self.send(message).await;
        self.reply(id).await
    }

    pub(crate) async fn handshake(&mut self, caps: &[&str]) -> Value {
        self.request(
            json!({ "type": "handshake/req", "agent_id": "parent", "agent_caps": caps, "auth_token": "" }),
            "hs",
        )
        .await
    }

    async fn spawn(&mut self, id: &str) -> String {
        let reply =
            self.request(json!({ "type": "SUBAGENT_SPAWN_REQ", "agent": { "name": "w", "model": "m" } }), id).await;
        assert_eq!(reply["type"], "SUBAGENT_SPAWN_RESP", "{reply}");
        reply["subagent_id"].as_str().expect("id").to_owned()
    }

    async fn delegate(&mut self, sub: &str, script: Value, id: &str) -> Value {
        let task = json!({ "name": "t", "instruction": "do it", "metadata": { "script": script } });
        self.request(json!({ "type": "SUBAGENT_DELEGATE_REQ", "subagent_id": sub, "task": task }), id).await
    }

    /// Spawns a subagent and keeps it RUNNING (a 600 s nap); returns its id.
    async fn busy(&mut self) -> String {
        let sub = self.spawn("s1").await;
        let reply = self.delegate(&sub, json!([{ "sleep_ms": 600_000 }]), "d1").await;
        assert_eq!(reply["accepted"], true, "{reply}");
        sub
    }

    /// Ends the input and returns how the session ended.
    async fn close_input(&mut self) -> ConnectionEnd {
        self.input.take();
        (&mut self.run).await.expect("session task")
    }
}

/// A fresh service with `limits` and `auth`, and one client of it.
fn opened(limits: Limits, auth: Auth) -> (Arc<Service>, Client) {
    let service = service(limits, auth);
    let client = Client::open(&service);
    (service, client)
}

/// [`opened`] with open auth, handshaken for `multi_agent`.
async fn handshaken(limits: Limits) -> (Arc<Service>, Client) {
    let (service, mut client) = opened(limits, Auth::open());
    assert_eq!(client.handshake(&["multi_agent"]).await["ok"], true);
    (service, client)
}

fn assert_error(reply: &Value, code: &str, req_id: &str) {
    assert_eq!(reply["type"], "error", "{reply}");
    assert_eq!(reply["code"], code, "{reply}");
    assert_eq!(reply["req_id"], req_id, "{reply}");
    assert!(reply["message"].as_str().is_some_and(|m| !m.is_empty()), "{reply}");
    assert!(reply["detail"].is_object(), "{reply}");
    assert!(reply["retryable"].is_boolean(), "{reply}");
    assert!(reply["capability_name"].is_string(), "{reply}");
}

#[actix_rt::test]
async fn a_battery_of_bad_lines_gets_typed_errors_and_the_session_goes_on() {
    let (_service, mut client) = handshaken(limits()).await;
    let oversized = format!("{{\"type\":\"ping\",\"id\":\"big\",\"pad\":\"{}\"}}\n", "x".repeat(LIMIT * 3));
    let cases: Vec<(Vec<u8>, &str, &str)> = vec![
        (b"garbage\n".to_vec(), "parse_error", ""),
        (b"[1,2,3]\n".to_vec(), "invalid_message", ""),
        (b"\"just a string\"\n".to_vec(), "invalid_message", ""),
        (b"{\"id\":\"m1\"}\n".to_vec(), "invalid_message", "m1"),
        (b"{\"type\":5,\"id\":\"m2\"}\n".to_vec(), "invalid_message", "m2"),
        (b"{\"type\":\"ping\",\"id\":\"t1\"\n".to_vec(), "parse_error", ""),
        (b"{\"type\":\"ping\",\"id\":\"\xff\xfe\"}\n".to_vec(), "parse_error", ""),
        (oversized.into_bytes(), "invalid_message", ""),
        (
            br#"{"type":"SUBAGENT_SPAWN_REQ","id":"w1","agent":{"name":1,"model":"m"}}"#.to_vec(),
            "schema_violation",
            "w1",
        ),
        (
            br#"{"type":"SUBAGENT_SPAWN_REQ","id":"e1","agent":{"name":"n","model":"m","memory_scope":"x"}}"#.to_vec(),
            "schema_violation",
            "e1",
        ),
        (
            br#"{"type":"SUBAGENT_DELEGATE_REQ","id":"d1","subagent_id":"sub_00000001"}"#.to_vec(),
            "schema_violation",
            "d1",
        ),
        (br#"{"type":"NOT_A_TYPE","id":"u1"}"#.to_vec(), "unknown_type", "u1"),
        (br#"{"type":"ping","id":"v1","a2e":"2.0"}"#.to_vec(), "version_mismatch", "v1"),
        (br#"{"type":"ping","id":"v2","version":"0.9"}"#.to_vec(), "version_mismatch", "v2"),
        (br#"{"type":"SUBAGENT_AWAIT_REQ","id":"b1","subagent_id":"not-an-id"}"#.to_vec(), "unknown_subagent", "b1"),
        (br#"{"type":"SUBAGENT_AWAIT_REQ","id":"b2","subagent_id":"sub_00000000"}"#.to_vec(), "unknown_subagent", "b2"),
    ];
    for (mut line, code, req_id) in cases {
        if !line.ends_with(b"\n") {
            line.push(b'\n');
        }
        client.raw(&line).await;
        let reply = client.next().await;
        assert_error(&reply, code, req_id);
        // And the session still answers.
        let pong = client.request(json!({ "type": "ping" }), "alive").await;
        assert_eq!(pong["type"], "pong", "after {code}: {pong}");
    }
}

#[actix_rt::test]
async fn schema_errors_name_the_field_and_subagent_errors_name_the_capability() {
    let (_service, mut client) = handshaken(limits()).await;
    let reply = client
        .request(
            json!({ "type": "SUBAGENT_SPAWN_REQ", "agent": { "name": "n", "model": "m", "memory_scope": "x" } }),
            "s",
        )
        .await;
    assert_error(&reply, "schema_violation", "s");
    assert_eq!(reply["detail"]["field"], "agent.memory_scope");
    assert!(reply["message"].as_str().unwrap().contains("agent.memory_scope"));
    let reply = client.request(json!({ "type": "SUBAGENT_CANCEL_REQ", "subagent_id": "sub_12345678" }), "c").await;
    assert_error(&reply, "unknown_subagent", "c");
    assert_eq!(reply["capability_name"], "multi_agent");
    assert_eq!(reply["retryable"], false);
    let oversized = format!("{{\"pad\":\"{}\"}}\n", "y".repeat(LIMIT));
    client.raw(oversized.as_bytes()).await;
    let reply = client.next().await;
    assert_error(&reply, "invalid_message", "");
    assert_eq!(reply["detail"]["max_line_bytes"], LIMIT);
}

#[actix_rt::test]
async fn every_reply_carries_the_envelope_and_the_request_id() {
    let (_service, mut client) = opened(limits(), Auth::open());
    let reply = client.handshake(&["multi_agent"]).await;
    for reply in [reply, client.request(json!({ "type": "ping", "a2e": "1.0" }), "p1").await] {
        assert_eq!(reply["a2e"], "1.0");
        assert!(reply["ts"].as_f64().is_some_and(|ts| ts > 1.0e9), "{reply}");
        let id = reply["id"].as_str().expect("id");
        assert!(id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
    }
    client.send(json!({ "type": "ping" })).await;
    let pong = client.next().await;
    assert_eq!(pong["type"], "pong");
    assert_eq!(pong["req_id"], "", "a request without id is answered with an empty req_id");
    assert!(pong["uptime_seconds"].as_f64().is_some());
}

#[actix_rt::test]
async fn requests_before_the_handshake_are_unauthorized() {
    let (_service, mut client) = opened(limits(), Auth::open());
    assert_error(&client.request(json!({ "type": "ping" }), "p").await, "unauthorized", "p");
    let spawn = json!({ "type": "SUBAGENT_SPAWN_REQ", "agent": { "name": "n", "model": "m" } });
    assert_error(&client.request(spawn, "s").await, "unauthorized", "s");
    assert_eq!(client.handshake(&["multi_agent"]).await["ok"], true);
    assert_eq!(client.request(json!({ "type": "ping" }), "p2").await["type"], "pong");
}

#[actix_rt::test]
async fn the_alias_subagents_is_accepted_under_the_canonical_name_with_limits() {
    let (_service, mut client) = opened(limits(), Auth::open());
    let reply = client.handshake(&["subagents", "memory"]).await;
    assert_eq!(reply["type"], "handshake/resp");
    assert_eq!(reply["ok"], true);
    assert!(reply["session_id"].as_str().is_some_and(|s| !s.is_empty()));
    let caps = reply["accepted_caps"].as_array().expect("list");
    assert_eq!(caps.len(), 1, "{reply}");
    assert_eq!(caps[0]["capability"], "multi_agent");
    assert_eq!(caps[0]["enabled"], true);
    let meta = &caps[0]["metadata"];
    assert_eq!(meta["max_depth"], 3);
    assert_eq!(meta["max_subagents_per_session"], 64);
    assert_eq!(meta["default_timeout_seconds"], 600);
    assert_eq!(meta["default_max_steps"], 40);
    assert!(meta["mailbox_capacity"].is_u64() && meta["cancel_grace_ms"].is_u64());
}

#[actix_rt::test]
async fn a_handshake_without_the_capability_leaves_subagent_requests_unauthorized() {
    let (_service, mut client) = opened(limits(), Auth::open());
    // `memory` is a capability this host does not serve.
    let reply = client.handshake(&["memory"]).await;
    assert_eq!(reply["ok"], true);
    assert_eq!(reply["accepted_caps"], json!([]));
    let reply = client.request(json!({ "type": "SUBAGENT_LIST_REQ" }), "l").await;
    assert_error(&reply, "unauthorized", "l");
    assert!(reply["message"].as_str().unwrap().contains("multi_agent"), "{reply}");
    assert_eq!(client.request(json!({ "type": "ping" }), "p").await["type"], "pong");
}

#[actix_rt::test]
async fn a_wrong_token_fails_the_handshake_and_the_right_one_passes() {
    let (_service, mut client) = opened(limits(), Auth::with_tokens(["s3cret".to_owned(), "other".to_owned()]));
    let hs = |token: &str| json!({ "type": "handshake/req", "agent_id": "a", "agent_caps": ["multi_agent"], "auth_token": token });
    let reply = client.request(hs("wrong"), "h1").await;
    assert_eq!(reply["type"], "handshake/resp");
    assert_eq!(reply["ok"], false);
    assert_eq!(reply["reason"], "auth_failed");
    assert_error(&client.request(json!({ "type": "SUBAGENT_LIST_REQ" }), "l1").await, "unauthorized", "l1");
    let reply = client.request(hs("s3cre"), "h2").await;
    assert_eq!(reply["reason"], "auth_failed", "a prefix is not the token");
    let reply = client.request(hs("s3cret"), "h3").await;
    assert_eq!(reply["ok"], true);
    assert_eq!(client.request(json!({ "type": "SUBAGENT_LIST_REQ" }), "l2").await["type"], "SUBAGENT_LIST_RESP");
}

#[actix_rt::test]
async fn spawn_delegate_await_cancel_terminate_and_merge_round_trip() {
    let (_service, mut client) = handshaken(limits()).await;
    let sub = client.spawn("s1").await;
    let reply = client.delegate(&sub, json!([{ "return": { "answer": 42 } }]), "d1").await;
    assert_eq!(reply["type"], "SUBAGENT_DELEGATE_RESP", "{reply}");
    assert_eq!(reply["accepted"], true);
    let reply = client.request(json!({ "type": "SUBAGENT_AWAIT_REQ", "subagent_id": sub }), "a1").await;
    assert_eq!(reply["type"], "SUBAGENT_AWAIT_RESP", "{reply}");
    assert_eq!(reply["status"], "COMPLETED");
    assert_eq!(reply["result"]["answer"], 42);
    let reply = client.request(json!({ "type": "SUBAGENT_MERGE_REQ", "subagent_ids": [sub] }), "m1").await;
    assert_eq!(reply["type"], "SUBAGENT_MERGE_RESP", "{reply}");
    assert!(reply["merged_result"].is_object());
    let reply =
        client.request(json!({ "type": "SUBAGENT_MERGE_REQ", "subagent_ids": [sub], "strategy": "nope" }), "m2").await;
    assert_error(&reply, "unknown_strategy", "m2");

    client.delegate(&sub, json!([{ "sleep_ms": 600_000 }]), "d2").await;
    let reply = client.request(json!({ "type": "SUBAGENT_CANCEL_REQ", "subagent_id": sub }), "c1").await;
    assert_eq!(reply["type"], "SUBAGENT_EVENT", "{reply}");
    assert_eq!(reply["event"], "cancelled");
    assert_eq!(reply["subagent_id"], sub);
    assert_eq!(reply["content"]["stopped"], json!([sub]));
    let reply = client.request(json!({ "type": "SUBAGENT_TERMINATE_REQ", "subagent_id": sub }), "t1").await;
    assert_eq!(reply["type"], "SUBAGENT_EVENT", "{reply}");
    assert_eq!(reply["event"], "terminated");
    assert_eq!(reply["content"]["stopped"], json!([sub]));
    let reply = client.request(json!({ "type": "SUBAGENT_AWAIT_REQ", "subagent_id": sub }), "a2").await;
    assert_eq!(reply["status"], "TERMINATED");
}

#[actix_rt::test]
async fn events_are_pushed_without_req_id() {
    let (_service, mut client) = handshaken(limits()).await;
    let sub = client.spawn("s1").await;
    let spawned = loop {
        let line = client.next().await;
        if line["type"] == "SUBAGENT_EVENT" && line["event"] == "spawned" {
            break line;
        }
    };
    assert_eq!(spawned["subagent_id"], sub);
    assert!(spawned.get("req_id").is_none(), "{spawned}");
    assert_eq!(spawned["a2e"], "1.0");
}

#[actix_rt::test]
async fn a_pending_await_does_not_hold_up_later_requests() {
    let (_service, mut client) = handshaken(limits()).await;
    let sub = client.busy().await;
    client.send(json!({ "type": "SUBAGENT_AWAIT_REQ", "id": "a1", "subagent_id": sub })).await;
    // Served while the await is pending:
    assert_eq!(client.request(json!({ "type": "SUBAGENT_LIST_REQ" }), "l1").await["type"], "SUBAGENT_LIST_RESP");
    assert_eq!(client.request(json!({ "type": "ping" }), "p1").await["type"], "pong");
    assert!(client.pending.iter().all(|v| v["req_id"] != "a1"), "the await is still pending");
    let reply = client.request(json!({ "type": "SUBAGENT_TERMINATE_REQ", "subagent_id": sub }), "t1").await;
    assert_eq!(reply["event"], "terminated");
    assert_eq!(client.reply("a1").await["status"], "TERMINATED");
}

#[actix_rt::test]
async fn at_the_inflight_bound_the_session_stops_reading() {
    // On the paused clock (the session lives on this thread): no real waiting.
    tokio::time::pause();
    let (_service, mut client) = handshaken(Limits { max_inflight_requests: 2, ..limits() }).await;
    let sub = client.spawn("s1").await;
    client.delegate(&sub, json!([{ "sleep_ms": 200 }]), "d1").await;
    for id in ["a1", "a2"] {
        client.send(json!({ "type": "SUBAGENT_AWAIT_REQ", "id": id, "subagent_id": sub })).await;
    }
    client.send(json!({ "type": "ping", "id": "p1" })).await;
    // The ping is read only once an await has finished, so it cannot be first.
    let first = loop {
        let line = client.next().await;
        if ["a1", "a2", "p1"].iter().any(|id| line["req_id"] == *id) {
            break line;
        }
    };
    assert_eq!(first["type"], "SUBAGENT_AWAIT_RESP", "{first}");
    assert_eq!(client.reply("p1").await["type"], "pong");
}

#[actix_rt::test]
async fn two_sessions_cannot_touch_each_others_subagents() {
    let service = service(limits(), Auth::open());
    let mut alice = Client::open(&service);
    let mut bob = Client::open(&service);
    alice.handshake(&["multi_agent"]).await;
    bob.handshake(&["multi_agent"]).await;
    let sub = alice.spawn("s1").await;
    alice.delegate(&sub, json!([{ "sleep_ms": 600_000 }]), "d0").await;
    let task = json!({ "name": "t", "instruction": "i" });
    let message = json!({ "type": "note", "content": "hi" });
    let attempts = [
        json!({ "type": "SUBAGENT_AWAIT_REQ", "subagent_id": sub }),
        json!({ "type": "SUBAGENT_DELEGATE_REQ", "subagent_id": sub, "task": task }),
        json!({ "type": "SUBAGENT_MESSAGE_REQ", "from_subagent_id": "parent", "to_subagent_id": sub, "message": message }),
        json!({ "type": "SUBAGENT_CANCEL_REQ", "subagent_id": sub }),
        json!({ "type": "SUBAGENT_TERMINATE_REQ", "subagent_id": sub }),
    ];
    for (n, attempt) in attempts.into_iter().enumerate() {
        let id = format!("x{n}");
        let reply = bob.request(attempt.clone(), &id).await;
        assert_error(&reply, "unknown_subagent", &id);
        assert_eq!(reply["capability_name"], "multi_agent");
    }
    let list = bob.request(json!({ "type": "SUBAGENT_LIST_REQ" }), "l").await;
    assert_eq!(list["subagents"], json!([]));
    // Alice's subagent was never touched.
    let list = alice.request(json!({ "type": "SUBAGENT_LIST_REQ" }), "l").await;
    assert_eq!(list["subagents"][0]["status"], "RUNNING", "{list}");
}

#[actix_rt::test]
async fn shutdown_answers_then_ends_the_session() {
    let (service, mut client) = handshaken(limits()).await;
    let sub = client.busy().await;
    client.send(json!({ "type": "SUBAGENT_AWAIT_REQ", "id": "a1", "subagent_id": sub })).await;
    let reply = client.request(json!({ "type": "shutdown", "timeout": 0 }), "sd").await;
    assert_eq!(reply["type"], "shutdown/resp", "{reply}");
    assert_eq!(reply["ok"], true);
    // The pending await was answered before the shutdown reply.
    assert_eq!(client.reply("a1").await["status"], "TERMINATED");
    while client.next_line().await.is_some() {}
    assert_eq!((&mut client.run).await.unwrap(), ConnectionEnd::Shutdown);
    assert!(!client.handle.is_open());
    assert_eq!(service.sessions(), 0);
}

#[actix_rt::test]
async fn closing_the_input_terminates_the_tree() {
    let (_service, mut client) = handshaken(limits()).await;
    client.busy().await;
    assert_eq!(client.handle.stats().tasks(), 1);
    assert_eq!(client.close_input().await, ConnectionEnd::InputClosed);
    assert_eq!(client.handle.stats().tasks(), 0);
    assert!(!client.handle.is_open());
}

#[actix_rt::test]
async fn a_client_that_does_not_read_stops_being_read_and_is_closed_as_stalled() {
    let (_service, mut client) = opened(Limits { outbox_capacity: 4, client_stall_ms: 300, ..limits() }, Auth::open());
    client.send(json!({ "type": "handshake/req", "agent_caps": ["multi_agent"] })).await;
    client.send(json!({ "type": "SUBAGENT_SPAWN_REQ", "agent": { "name": "n", "model": "m" } })).await;
    // Never read; keep sending until the session ends (it stops reading
    // once its outbox is half full, then closes the stalled client).
    for _ in 0..64 {
        let Some(input) = client.input.as_ref() else { break };
        if input.send(Frame::Line(br#"{"type":"ping"}"#.to_vec())).await.is_err() {
            break;
        }
    }
    let end = (&mut client.run).await.unwrap();
    assert_eq!(end, ConnectionEnd::SlowClient);
    assert!(!client.handle.is_open());
    assert_eq!(client.handle.stats().tasks(), 0);
    // What was queued is bounded by the outbox capacity.
    let mut queued = 0;
    while client.output.try_recv().is_ok() {
        queued += 1;
    }
    assert!(queued <= 4, "{queued} lines queued");
}

#[actix_rt::test]
async fn a_client_that_sends_far_more_than_its_outbox_holds_before_reading_gets_every_reply() {
    let (_service, mut client) = handshaken(Limits { outbox_capacity: 8, ..limits() }).await;
    let input = client.input.clone().expect("input open");
    // 25 times the outbox's lines, sent before the client reads any reply:
    // the session stops reading while its outbox is half full, and the
    // sender waits, as a TCP client's writes would block.
    let sending = actix_rt::spawn(async move {
        for n in 0..200 {
            let line = format!(r#"{{"type":"ping","id":"p{n}"}}"#).into_bytes();
            input.send(Frame::Line(line)).await.expect("the session is still open");
        }
    });
    // On the paused clock, this sleep ends only once no task can go on: the
    // session has stopped reading and the sender waits, or it finished.
    tokio::time::pause();
    tokio::time::sleep(Duration::from_millis(200)).await;
    tokio::time::resume();
    assert!(!sending.is_finished(), "the sender was pushed back");
    for n in 0..200 {
        let reply = client.next().await;
        assert_eq!((reply["type"].as_str(), reply["req_id"].as_str()), (Some("pong"), Some(format!("p{n}").as_str())));
    }
    sending.await.expect("every ping was taken");
    assert!(client.handle.is_open(), "the session goes on");
}

#[actix_rt::test]
async fn max_sessions_is_enforced_and_a_closed_session_frees_its_slot() {
    let service = service(Limits { max_sessions: 1, ..limits() }, Auth::open());
    let mut first = Client::open(&service);
    assert_eq!(first.handshake(&["multi_agent"]).await["ok"], true, "a session counts once handshaken");
    let refused = service.open().expect_err("second session refused");
    assert!(refused.message.contains("max_sessions"), "{refused}");
    first.close_input().await;
    assert_eq!(service.sessions(), 0);
    let _again = Client::open(&service);
    assert_eq!(service.sessions(), 1);
}

#[actix_rt::test]
async fn requests_after_shutdown_are_refused_with_invalid_state_while_it_drains() {
    let (service, mut client) = handshaken(limits()).await;
    let sub = client.busy().await;
    // The running task keeps the drain going while later requests arrive.
    client.send(json!({ "type": "shutdown", "id": "sd", "timeout": 600 })).await;
    let reply = client.request(json!({ "type": "ping" }), "p1").await;
    assert_error(&reply, "invalid_state", "p1");
    assert_eq!(reply["message"], SHUTTING_DOWN);
    let reply = client.request(json!({ "type": "SUBAGENT_LIST_REQ" }), "l1").await;
    assert_error(&reply, "invalid_state", "l1");
    client.raw(b"garbage\n").await;
    let bad = loop {
        let line = client.next().await;
        if line["type"] == "error" {
            break line;
        }
    };
    assert_error(&bad, "parse_error", "");
    // A signal cuts the drain short; the shutdown is answered last.
    service.shutdown();
    let reply = client.reply("sd").await;
    assert_eq!(reply["type"], "shutdown/resp", "{reply}");
    assert_eq!(reply["stopped"], json!([sub]));
    assert_eq!((&mut client.run).await.unwrap(), ConnectionEnd::Shutdown);
}

#[actix_rt::test]
async fn a_handshake_in_another_version_gets_handshake_resp_version_mismatch() {
    let (_service, mut client) = opened(limits(), Auth::open());
    for (field, id) in [("version", "h1"), ("a2e", "h2")] {
        let mut hs =
            json!({ "type": "handshake/req", "agent_id": "a", "agent_caps": ["multi_agent"], "auth_token": "" });
        hs[field] = json!("2.0");
        let reply = client.request(hs, id).await;
        assert_eq!(reply["type"], "handshake/resp", "{reply}");
        assert_eq!(reply["req_id"], id);
        assert_eq!(reply["ok"], false);
        assert_eq!(reply["reason"], "version_mismatch");
        assert_eq!(reply["accepted_caps"], json!([]));
    }
    // No session was granted; other requests in another version stay `error`s.
    assert_error(&client.request(json!({ "type": "ping" }), "p").await, "unauthorized", "p");
    assert_error(&client.request(json!({ "type": "ping", "a2e": "2.0" }), "v").await, "version_mismatch", "v");
    assert_eq!(client.handshake(&["multi_agent"]).await["ok"], true);
}

#[actix_rt::test]
async fn max_parallel_reports_the_configured_hint_not_the_inflight_bound() {
    let mut client = Client::open(&service(limits(), Auth::open()));
    assert_eq!(client.handshake(&["multi_agent"]).await["max_parallel"], 4);
    let mut client = Client::open(&service(Limits { max_parallel: 16, ..limits() }, Auth::open()));
    assert_eq!(client.handshake(&["multi_agent"]).await["max_parallel"], 16);
    // With a running cap, the real figure.
    let capped = Limits { max_parallel: 16, max_running_per_session: 3, ..limits() };
    let mut client = Client::open(&service(capped, Auth::open()));
    assert_eq!(client.handshake(&["multi_agent"]).await["max_parallel"], 3);
}

#[actix_rt::test]
async fn byte_bounds_refuse_an_oversized_config_task_and_message_naming_the_limit_and_the_session_goes_on() {
    let limits = Limits {
        max_line_bytes: 1 << 20,
        max_config_bytes: 1024,
        max_task_bytes: 2048,
        max_message_bytes: 512,
        ..Limits::default()
    };
    let (_service, mut client) = handshaken(limits).await;
    let big = "x".repeat(4096);
    let cases = [
        (json!({ "type": "SUBAGENT_SPAWN_REQ", "agent": { "name": big, "model": "m" } }), "max_config_bytes"),
        (json!({ "type": "multi_agent/spawn", "name": "n", "metadata": { "pad": big } }), "max_config_bytes"),
    ];
    for (n, (request, limit)) in cases.into_iter().enumerate() {
        let reply = client.request(request, &format!("c{n}")).await;
        assert_error(&reply, "invalid_message", &format!("c{n}"));
        assert_eq!(reply["detail"]["limit"], limit, "{reply}");
        assert!(reply["message"].as_str().unwrap().contains(limit), "{reply}");
    }
    // Just under the bound is fine.
    let sub = client.spawn("ok").await;
    let task = json!({ "name": "t", "instruction": big });
    let reply =
        client.request(json!({ "type": "SUBAGENT_DELEGATE_REQ", "subagent_id": sub, "task": task }), "t1").await;
    assert_error(&reply, "invalid_message", "t1");
    assert_eq!(reply["detail"]["limit"], "max_task_bytes");
    assert_eq!(reply["detail"]["max_task_bytes"], 2048);
    let reply = client
        .request(
            json!({ "type": "multi_agent/delegate", "subagent_id": sub, "task_name": "t", "instruction": big }),
            "t2",
        )
        .await;
    assert_eq!(reply["detail"]["limit"], "max_task_bytes", "{reply}");
    let message = json!({ "type": "SUBAGENT_MESSAGE_REQ", "from_subagent_id": sub, "to_subagent_id": sub,
                          "message": { "type": "note", "content": big } });
    let reply = client.request(message, "m1").await;
    assert_eq!(reply["detail"]["limit"], "max_message_bytes", "{reply}");
    // Nothing was lost: the subagent is there, READY, and takes a small task.
    let reply = client.delegate(&sub, json!([{ "return": { "ok": true } }]), "d").await;
    assert_eq!(reply["accepted"], true, "{reply}");
}

/// How a session's run ended, waiting at most [`PATIENCE`].
async fn ended(client: &mut Client) -> ConnectionEnd {
    tokio::time::timeout(PATIENCE, &mut client.run).await.expect("the session ends").expect("session task")
}

#[actix_rt::test]
async fn a_session_without_a_successful_handshake_is_closed_at_the_handshake_deadline() {
    // On the paused clock (the session lives on this thread): no real waiting.
    tokio::time::pause();
    let service = service(Limits { handshake_timeout_ms: 200, ..limits() }, Auth::open());
    // Opened first, so its deadline passes first: it handshakes in time.
    let mut early = Client::open(&service);
    assert_eq!(early.handshake(&["multi_agent"]).await["ok"], true);
    let mut silent = Client::open(&service);
    let started = tokio::time::Instant::now();
    assert_eq!(ended(&mut silent).await, ConnectionEnd::Unauthenticated);
    assert!(started.elapsed() >= Duration::from_millis(150), "not before the deadline");
    let reason = silent.next().await;
    assert_error(&reason, "unauthorized", "");
    assert_eq!(reason["detail"]["limit"], "handshake_timeout_ms", "{reason}");
    assert!(silent.next_line().await.is_none(), "then the output ends");
    assert!(!silent.handle.is_open());
    // The handshaken session is past its deadline and still served.
    assert_eq!(early.request(json!({ "type": "ping" }), "p").await["type"], "pong");
    assert_eq!(service.sessions(), 1);
}

#[actix_rt::test]
async fn a_failed_handshake_does_not_stop_the_deadline() {
    // On the paused clock (the session lives on this thread): no real waiting.
    tokio::time::pause();
    let limits = Limits { handshake_timeout_ms: 200, ..limits() };
    let (_service, mut client) = opened(limits, Auth::with_tokens(["s3cret".to_owned()]));
    let hs = json!({ "type": "handshake/req", "agent_caps": ["multi_agent"], "auth_token": "wrong" });
    assert_eq!(client.request(hs, "h1").await["reason"], "auth_failed");
    assert_eq!(ended(&mut client).await, ConnectionEnd::Unauthenticated);
}

#[actix_rt::test]
async fn the_third_failed_handshake_ends_the_session() {
    let (service, mut client) = opened(limits(), Auth::with_tokens(["s3cret".to_owned()]));
    let hs = |token: &str| json!({ "type": "handshake/req", "agent_caps": ["multi_agent"], "auth_token": token });
    assert_eq!(client.request(hs("wrong1"), "h1").await["reason"], "auth_failed");
    // A handshake in another version is a failed one too.
    let mut other_version = hs("s3cret");
    other_version["a2e"] = json!("2.0");
    assert_eq!(client.request(other_version, "h2").await["reason"], "version_mismatch");
    assert_eq!(client.request(hs("wrong3"), "h3").await["reason"], "auth_failed", "its refusal is still sent");
    assert_eq!(ended(&mut client).await, ConnectionEnd::Unauthenticated);
    assert!(client.next_line().await.is_none(), "nothing after the last refusal");
    assert_eq!(service.sessions(), 0);
}

#[actix_rt::test]
async fn unauthenticated_sessions_have_their_own_cap_and_never_take_a_max_sessions_slot() {
    let limits = Limits { max_sessions: 2, max_unauthenticated_sessions: 3, ..limits() };
    let service = service(limits, Auth::with_tokens(["s3cret".to_owned()]));
    let hs =
        json!({ "type": "handshake/req", "agent_id": "parent", "agent_caps": ["multi_agent"], "auth_token": "s3cret" });
    let mut silent: Vec<Client> = (0..3).map(|_| Client::open(&service)).collect();
    assert_eq!(service.unauthenticated_sessions(), 3);
    let refused = service.open().expect_err("past max_unauthenticated_sessions");
    assert_eq!(refused.detail.as_ref().unwrap()["limit"], "max_unauthenticated_sessions", "{refused}");
    // Three silent sessions are open, yet both max_sessions slots go to
    // clients that pass auth: each leaves the unauthenticated pool.
    let mut first = silent.pop().unwrap();
    assert_eq!(first.request(hs.clone(), "h").await["ok"], true);
    let mut second = Client::open(&service);
    assert_eq!(second.request(hs.clone(), "h").await["ok"], true);
    assert_eq!((service.sessions(), service.unauthenticated_sessions()), (4, 2));
    // With every max_sessions slot taken, a good handshake is refused (and
    // the session may retry later); new sessions are refused at once.
    let mut third = silent.pop().unwrap();
    let reply = third.request(hs.clone(), "h").await;
    assert_error(&reply, "runtime_error", "h");
    assert_eq!(reply["detail"]["limit"], "max_sessions", "{reply}");
    assert_eq!(reply["retryable"], true);
    assert_error(&third.request(json!({ "type": "ping" }), "p").await, "unauthorized", "p");
    assert!(service.open().expect_err("max_sessions taken").message.contains("max_sessions"));
    // A slot freed by an authenticated session goes to the waiting one.
    first.close_input().await;
    assert_eq!(third.request(hs, "h2").await["ok"], true);
    assert_eq!(third.request(json!({ "type": "ping" }), "p2").await["type"], "pong");
    assert_eq!((service.sessions(), service.unauthenticated_sessions()), (3, 1));
    drop(silent);
}

#[actix_rt::test]
async fn from_subagent_id_must_be_a_subagent_of_this_session_or_the_client_itself() {
    let service = service(limits(), Auth::open());
    let mut alice = Client::open(&service);
    let mut bob = Client::open(&service);
    alice.handshake(&["multi_agent"]).await; // agent_id "parent"
    bob.handshake(&["multi_agent"]).await;
    let target = alice.spawn("s1").await;
    let sibling = alice.spawn("s2").await;
    let foreign = bob.spawn("s3").await;
    let message = |from: &str| {
        json!({ "type": "SUBAGENT_MESSAGE_REQ", "from_subagent_id": from, "to_subagent_id": target,
                "message": { "type": "note", "content": from } })
    };
    assert_eq!(alice.request(message("parent"), "m1").await["delivered"], true, "the client's own agent_id");
    assert_eq!(alice.request(message(&sibling), "m2").await["delivered"], true, "a subagent of the session");
    for (n, from) in [foreign.as_str(), "", "mallory", "sub_00000000"].into_iter().enumerate() {
        let id = format!("bad{n}");
        let reply = alice.request(message(from), &id).await;
        assert_error(&reply, "unknown_subagent", &id);
        assert_eq!(reply["detail"]["field"], "from_subagent_id", "{reply}");
        assert_eq!(reply["detail"]["subagent_id"], from, "{reply}");
    }
    // A terminated subagent is still a subagent of the session (retained).
    alice.request(json!({ "type": "SUBAGENT_TERMINATE_REQ", "subagent_id": sibling }), "t").await;
    assert_eq!(alice.request(message(&sibling), "m3").await["delivered"], true);
    // Only the accepted senders reached the mailbox.
    let wait = json!({ "wait_message": { "timeout_ms": 5_000 } });
    let script = json!([wait, wait, wait]);
    alice.delegate(&target, script, "d").await;
    let done = alice.request(json!({ "type": "SUBAGENT_AWAIT_REQ", "subagent_id": target }), "a").await;
    let senders: Vec<&str> =
        done["result"]["messages"].as_array().unwrap().iter().map(|m| m["from"].as_str().unwrap()).collect();
    assert_eq!(senders, ["parent", sibling.as_str(), sibling.as_str()], "{done}");
}

#[actix_rt::test]
async fn a_request_whose_id_is_not_a_string_gets_invalid_message_naming_id() {
    let (_service, mut client) = handshaken(limits()).await;
    for id in [json!(7), json!({ "a": 1 }), json!(["x"]), json!(true)] {
        client.send(json!({ "type": "SUBAGENT_LIST_REQ", "id": id })).await;
        let reply = client.next().await;
        assert_error(&reply, "invalid_message", "");
        assert_eq!(reply["detail"]["field"], "id", "{reply}");
    }
    // A null id is an absent one: served, answered with req_id "".
    client.send(json!({ "type": "ping", "id": null })).await;
    let pong = client.next().await;
    assert_eq!((pong["type"].as_str(), pong["req_id"].as_str()), (Some("pong"), Some("")), "{pong}");
}

#[actix_rt::test]
async fn a_client_gone_away_is_an_input_close_not_a_slow_client() {
    let service = service(limits(), Auth::open());
    let opened = service.open().expect("opens");
    drop(opened.output);
    let run = actix_rt::spawn(opened.connection.run());
    let handshake = json!({ "type": "handshake/req", "agent_caps": ["multi_agent"] });
    opened.input.send(Frame::Line(handshake.to_string().into_bytes())).await.expect("read");
    let end = tokio::time::timeout(PATIENCE, run).await.expect("ends").expect("session task");
    assert_eq!(end, ConnectionEnd::InputClosed);
}
