//! Fuzz target: arbitrary NDJSON through a real in-process protocol session
//! (decoder, session, dispatcher, actor runtime, encoder), as
//! `tests/it/protocol.rs` drives one, on a paused clock so that scripted
//! sleeps, timeouts and shutdown grace periods pass at once.
//!
//! The input is split into frames by `LineDecoder`, after a valid handshake
//! (so that most lines reach the subagent requests; the input may send its
//! own handshakes, with a wrong token too). Every frame is queued before the
//! session runs, then the input ends. Checked:
//!
//! - no panic anywhere (libfuzzer-sys aborts on any panic, in any task);
//! - every output line is a JSON object with unique top-level keys, a string
//!   `type`, a 32-hex `id`, `a2e` "1.0" and a numeric `ts`;
//! - every request line with a non-empty `id` gets exactly one reply (a line
//!   with that `req_id`), none is answered twice, and no reply names an id
//!   no request carried; a client `error` message gets none;
//! - the session ends by input end or `shutdown`, with no actor and no task
//!   left, and its `max_sessions` slot released.
//!
//! Subagent ids come from a counter (`sub_00000001`, …), so seeds and the
//! dictionary can name the subagents they spawn.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU32, Ordering};
use subagent_host::config::Limits;
use subagent_host::protocol::codec::{Frame, LineDecoder};
use subagent_host::protocol::request::decode_line;
use subagent_host::server::{Auth, ConnectionEnd, Service};
use subagent_host::{Host, HostConfig};
use subagent_host::{IdRegistry, IdSource};

/// The token the session is opened with (the input may present others).
const TOKEN: &str = "fuzz-token";
const LINE_LIMIT: usize = 2048;

/// Ids `sub_00000001`, `sub_00000002`, … (the registry draws again on a taken one).
#[derive(Default)]
struct Counter(AtomicU32);

impl IdSource for Counter {
    fn next_candidate(&self) -> u32 {
        self.0.fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// Small bounds, so that the input meets them: depth, quota, mailbox,
/// awaiters, retained records, in-flight requests, line length.
fn limits() -> Limits {
    Limits {
        max_depth: 3,
        max_subagents_per_session: 8,
        max_line_bytes: LINE_LIMIT,
        mailbox_capacity: 4,
        cancel_grace_ms: 50,
        max_retained_records: 4,
        max_awaiters_per_subagent: 4,
        max_memory_entries: 8,
        max_inflight_requests: 16,
        ..Limits::default()
    }
}

fuzz_target!(|data: &[u8]| {
    let system = actix_rt::System::new();
    system.block_on(run(data));
});

async fn run(data: &[u8]) {
    tokio::time::pause();
    let config =
        HostConfig { limits: limits(), ids: IdRegistry::new(Box::new(Counter::default())), ..Default::default() };
    let service = Service::new(Host::new(config), Auth::with_tokens([TOKEN.to_owned()]));

    let handshake = format!(
        "{{\"type\":\"handshake/req\",\"id\":\"hs0\",\"agent_id\":\"fuzz\",\"agent_caps\":[\"multi_agent\"],\"auth_token\":\"{TOKEN}\"}}\n"
    );
    let mut decoder = LineDecoder::new(LINE_LIMIT);
    let mut frames = Vec::new();
    decoder.feed(handshake.as_bytes(), &mut frames);
    decoder.feed(data, &mut frames);
    frames.extend(decoder.finish());
    let expected = expected_replies(&frames);

    let opened = service.open_with_input(frames.len()).expect("a session opens");
    for frame in frames {
        opened.input.try_send(frame).expect("the input queue holds every frame");
    }
    drop(opened.input);
    let tree = opened.connection.tree();
    let mut output = opened.output;
    let reader = actix_rt::spawn(async move {
        let mut lines = Vec::new();
        while let Some(line) = output.recv().await {
            lines.push(line);
        }
        lines
    });
    let end = opened.connection.run().await;
    let lines = reader.await.expect("the reader ends with the session");

    assert!(matches!(end, ConnectionEnd::InputClosed | ConnectionEnd::Shutdown), "session ended {end:?}");
    let mut replies: HashMap<String, usize> = HashMap::new();
    for line in &lines {
        let value = checked(line);
        if let Some(req_id) = value.get("req_id").and_then(Value::as_str) {
            *replies.entry(req_id.to_owned()).or_default() += 1;
        }
    }
    for (id, count) in &expected {
        let got = replies.get(id).copied().unwrap_or(0);
        assert_eq!(got, *count, "request id {id:?}: {count} request(s), {got} reply(ies)\n{}", lines.join("\n"));
    }
    for (req_id, count) in &replies {
        if !req_id.is_empty() {
            assert!(expected.contains_key(req_id), "{count} reply(ies) to {req_id:?}, which no request carried");
        }
    }
    assert_eq!(tree.stats().actors(), 0, "an actor outlived its session");
    assert_eq!(tree.stats().tasks(), 0, "a task outlived its session");
    assert_eq!(service.sessions(), 0, "the session's slot was not released");
}

/// Replies each non-empty request id must get: one per line the decoder
/// reads that id from, none for a client `error` message. (The
/// `decode_line` target checks the decoder itself against a plain oracle.)
fn expected_replies(frames: &[Frame]) -> HashMap<String, usize> {
    let mut expected = HashMap::new();
    for frame in frames {
        let Frame::Line(line) = frame else { continue };
        let (id, replies) = match decode_line(line) {
            Ok(Some(incoming)) => (incoming.id, 1),
            Ok(None) => {
                match serde_json::from_slice::<Value>(line).ok().and_then(|v| v["id"].as_str().map(str::to_owned)) {
                    Some(id) => (id, 0),
                    None => continue,
                }
            }
            Err(bad) => (bad.req_id, 1),
        };
        if !id.is_empty() {
            *expected.entry(id).or_default() += replies;
        }
    }
    expected
}

/// Checks one output line's envelope; returns it parsed.
fn checked(line: &str) -> Value {
    assert!(!line.contains('\n'), "a line with a newline inside: {line:?}");
    let UniqueKeys = serde_json::from_str(line).unwrap_or_else(|err| panic!("{err}: {line}"));
    let value: Value = serde_json::from_str(line).expect("checked above");
    assert!(value["type"].is_string(), "no string type: {line}");
    let id = value["id"].as_str().unwrap_or_else(|| panic!("no string id: {line}"));
    assert!(id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()), "id {id:?}: {line}");
    assert_eq!(value["a2e"], "1.0", "{line}");
    assert!(value["ts"].is_number(), "{line}");
    value
}

/// A JSON object whose top-level keys are all different (serde_json's
/// `Value` would keep the last of two silently).
struct UniqueKeys;

impl<'de> serde::Deserialize<'de> for UniqueKeys {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = UniqueKeys;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<UniqueKeys, A::Error> {
                let mut seen = HashSet::new();
                while let Some(key) = map.next_key::<String>()? {
                    if !seen.insert(key.clone()) {
                        return Err(serde::de::Error::custom(format!("duplicate key `{key}`")));
                    }
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
                Ok(UniqueKeys)
            }
        }
        deserializer.deserialize_map(Visitor)
    }
}
