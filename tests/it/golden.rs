//! Golden wire examples for both namespaces: request line in, reply line
//! out, through the real decoder, session, runtime and encoder.
//!
//! Each file under `tests/it/golden/` alternates `> request` lines with the
//! `< reply` expected for them. Requests are sent one at a time, each after
//! the previous reply, so the files read as a conversation. A reply is
//! compared whole, after dropping the two fields that differ every run
//! (`id`, `ts`) and masking `session_id` and `uptime_seconds`. Subagent ids come from a counter
//! (`sub_00000001`, …). Unsolicited `SUBAGENT_EVENT`s are not compared.
//!
//! `GOLDEN_BLESS=1` rewrites the files with the replies the host gives now;
//! read the diff before committing it.

use serde_json::{json, Value};
use std::sync::atomic::{AtomicU32, Ordering};
use subagent_host::config::Limits;
use subagent_host::server::{Auth, Service};
use subagent_host::{Host, HostConfig};
use subagent_host::{IdRegistry, IdSource};

use crate::protocol::Client;

/// Ids `1, 2, 3, …`: every run names its subagents the same.
#[derive(Default)]
struct Counter(AtomicU32);

impl IdSource for Counter {
    fn next_candidate(&self) -> u32 {
        self.0.fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// What is compared of a reply: all but `id` and `ts`, `session_id` masked.
fn normalized(mut reply: Value) -> Value {
    let object = reply.as_object_mut().expect("a reply is an object");
    object.remove("id");
    object.remove("ts");
    if object.contains_key("session_id") {
        object.insert("session_id".into(), json!("<session>"));
    }
    if object.get("uptime_seconds").is_some_and(Value::is_f64) {
        object.insert("uptime_seconds".into(), json!("<seconds>"));
    }
    reply
}

async fn run(file: &str) {
    let path = format!("{}/tests/it/golden/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).expect("golden file");
    let config = HostConfig {
        limits: Limits::default(),
        ids: IdRegistry::new(Box::new(Counter::default())),
        ..Default::default()
    };
    let service = Service::new(Host::new(config), Auth::open());
    let mut client = Client::open(&service);
    let mut lines = text.lines().filter(|line| !line.trim().is_empty() && !line.starts_with('#'));
    let mut replies = 0;
    let bless = std::env::var_os("GOLDEN_BLESS").is_some();
    let mut blessed = String::new();
    while let Some(request) = lines.next() {
        let request = request.strip_prefix("> ").unwrap_or_else(|| panic!("{file}: expected `> request`: {request}"));
        let expected = lines.next().unwrap_or_else(|| panic!("{file}: no `<` reply after {request}"));
        let expected = expected.strip_prefix("< ").unwrap_or_else(|| panic!("{file}: expected `< reply`: {expected}"));
        let request: Value = serde_json::from_str(request).expect("request is JSON");
        let expected: Value = serde_json::from_str(expected).expect("reply is JSON");
        client.send(request.clone()).await;
        let req_id = request["id"].as_str().expect("golden requests have an id");
        let actual = normalized(client.reply(req_id).await);
        if bless {
            blessed.push_str(&format!("> {request}\n< {actual}\n\n"));
        } else {
            assert_eq!(actual, expected, "{file}: reply to {request}");
        }
        replies += 1;
    }
    assert!(replies > 0, "{file} holds examples");
    if bless {
        let comments: String =
            text.lines().take_while(|line| line.starts_with('#')).map(|line| format!("{line}\n")).collect();
        std::fs::write(&path, comments + &blessed).expect("bless the golden file");
    }
}

#[actix_rt::test]
async fn golden_multi_agent_namespace() {
    run("multi_agent.ndjson").await;
}

#[actix_rt::test]
async fn golden_subagent_namespace() {
    run("subagents.ndjson").await;
}

#[actix_rt::test]
async fn golden_both_namespaces_in_one_session() {
    run("mixed.ndjson").await;
}
