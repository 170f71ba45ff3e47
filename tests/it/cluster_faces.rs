//! Every face in a cluster, through the shipped HAProxy config: an A2A
//! context and an MCP session each stay on the node that serves them (at
//! most one handoff over 100 requests while no node fails), new ones are
//! balanced by load, and when the serving node is SIGKILLed the next
//! request is served by another within the lease and 2 s.

use crate::cluster::{Cluster, LEASE_MS};
use crate::common::eventually_blocking;
use crate::e2e_support::{http_with_headers, PATIENCE};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::{Duration, Instant};

const REQUESTS: usize = 100;

/// One request through HAProxy: the node that answered and the answer (a
/// JSON body, or the last JSON-RPC message of an SSE body).
fn post(front: &str, path: &str, headers: &[(&str, &str)], body: &Value) -> (u16, HashMap<String, String>, Value) {
    let (status, got, answer) = http_with_headers(front, "POST", path, headers, &body.to_string());
    let answer = match answer {
        Value::String(text) => text
            .lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .filter_map(|data| serde_json::from_str::<Value>(data).ok())
            .rfind(|message| message.get("result").is_some() || message.get("error").is_some())
            .unwrap_or(Value::Null),
        other => other,
    };
    (status, got, answer)
}

/// How many times the answering node changed.
fn moves(nodes: &[String]) -> usize {
    nodes.windows(2).filter(|pair| pair[0] != pair[1]).count()
}

const A2A: [(&str, &str); 2] = [("A2A-Version", "1.0"), ("Content-Type", "application/json")];

fn a2a_message(n: usize, context: &str) -> Value {
    json!({ "jsonrpc": "2.0", "id": n, "method": "SendMessage", "params": { "message": {
        "messageId": format!("m{n}"), "contextId": context, "role": "ROLE_USER", "parts": [{ "text": "hi" }],
        "metadata": { "script": [{ "return": { "answer": n } }] } } } })
}

/// Sends message `n` of `context`, retrying while no node can take it yet;
/// the node that answered.
fn a2a_send(front: &str, context: &str, n: usize) -> String {
    eventually_blocking("an A2A message is answered", PATIENCE, || {
        let (status, headers, answer) = post(front, "/a2a", &A2A, &a2a_message(n, context));
        match answer["result"]["task"]["status"]["state"].as_str() {
            Some("TASK_STATE_COMPLETED") if status == 200 => {
                Ok(headers.get("x-subagentd-node").cloned().unwrap_or_default())
            }
            _ => Err(format!("{status} {answer}")),
        }
    })
}

const MCP: [(&str, &str); 3] = [
    ("Accept", "application/json, text/event-stream"),
    ("Content-Type", "application/json"),
    ("MCP-Protocol-Version", "2025-11-25"),
];

fn mcp_headers(session: &str) -> Vec<(&str, &str)> {
    let mut headers = MCP.to_vec();
    headers.push(("Mcp-Session-Id", session));
    headers
}

/// A new MCP session through HAProxy: its id and node.
fn mcp_open(front: &str) -> (String, String) {
    let init = json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "t", "version": "1" } } });
    let (status, headers, answer) = post(front, "/mcp", &MCP, &init);
    assert_eq!(status, 200, "{answer}");
    let session = headers.get("mcp-session-id").cloned().expect("Mcp-Session-Id");
    let node = headers.get("x-subagentd-node").cloned().unwrap_or_default();
    let initialized = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
    let (status, _, _) = post(front, "/mcp", &mcp_headers(&session), &initialized);
    assert_eq!(status, 202);
    (session, node)
}

/// One `run_subagent` call, retrying while no node can take it; its node.
fn mcp_call(front: &str, session: &str, n: usize) -> String {
    let call = json!({ "jsonrpc": "2.0", "id": n, "method": "tools/call", "params": { "name": "run_subagent",
        "arguments": { "instruction": "go", "task_metadata": { "script": [{ "return": { "n": n } }] } } } });
    eventually_blocking("an MCP call is answered", PATIENCE, || {
        let (status, headers, answer) = post(front, "/mcp", &mcp_headers(session), &call);
        if status == 200 && answer["result"]["structuredContent"]["result"]["n"] == n {
            Ok(headers.get("x-subagentd-node").cloned().unwrap_or_default())
        } else {
            Err(format!("{status} {answer}"))
        }
    })
}

#[test]
fn every_face_behind_haproxy() {
    let mut cluster = Cluster::start(3, 4);
    let front = cluster.haproxy.http.clone();

    // New contexts and MCP sessions spread by load, a fresh node included.
    cluster.start_node(3);
    let mut first_nodes = Vec::new();
    for n in 0..8 {
        first_nodes.push(a2a_send(&front, &format!("spread-{n}"), 0));
    }
    for _ in 0..4 {
        first_nodes.push(mcp_open(&front).1);
    }
    eprintln!("cluster faces: new contexts and sessions went to {first_nodes:?}");
    for node in ["n1", "n2", "n3", "n4"] {
        assert!(first_nodes.iter().any(|n| n == node), "{node} took none of 12 new ones: {first_nodes:?}");
    }

    // 100 messages of one context, 100 calls of one session: one node each.
    let context = "one-context";
    let a2a_nodes: Vec<String> = (1..=REQUESTS).map(|n| a2a_send(&front, context, n)).collect();
    let (session, _) = mcp_open(&front);
    let mcp_nodes: Vec<String> = (1..=REQUESTS).map(|n| mcp_call(&front, &session, n)).collect();
    eprintln!(
        "cluster faces: {} A2A moves, {} MCP moves over {REQUESTS} requests each",
        moves(&a2a_nodes),
        moves(&mcp_nodes)
    );
    assert!(moves(&a2a_nodes) <= 1, "an A2A context moved more than once: {a2a_nodes:?}");
    assert!(moves(&mcp_nodes) <= 1, "an MCP session moved more than once: {mcp_nodes:?}");
    let last = |nodes: &[String]| nodes.last().cloned().unwrap_or_default();

    // A task of the context is found by its id through HAProxy.
    let get =
        json!({ "jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": { "contextId": context, "pageSize": 1 } });
    let (_, _, listed) = post(&front, "/a2a", &A2A, &get);
    let task_id = listed["result"]["tasks"][0]["id"].as_str().expect("a task").to_owned();
    let get = json!({ "jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": { "id": task_id } });
    let (_, headers, found) = post(&front, "/a2a", &A2A, &get);
    assert_eq!(found["result"]["status"]["state"], "TASK_STATE_COMPLETED", "{found}");
    assert_eq!(headers.get("x-subagentd-node"), Some(&last(&a2a_nodes)), "a task id reaches its context's node");

    // The node serving the context is killed: the next message is served
    // by another within the lease and 2 s.
    let a2a_owner = last(&a2a_nodes);
    cluster.kill9(&a2a_owner);
    let killed = Instant::now();
    let next = a2a_send(&front, context, REQUESTS + 1);
    let took = killed.elapsed();
    eprintln!("cluster faces: A2A context moved from {a2a_owner} to {next} in {took:?}");
    assert_ne!(next, a2a_owner);
    assert!(took < Duration::from_millis(LEASE_MS + 2000), "{took:?}");

    // The same for the MCP session (unless its node is gone already).
    let mcp_owner = last(&mcp_nodes);
    if cluster.running().contains(&mcp_owner) {
        cluster.kill9(&mcp_owner);
    }
    let killed = Instant::now();
    let next = mcp_call(&front, &session, REQUESTS + 1);
    let took = killed.elapsed();
    eprintln!("cluster faces: MCP session moved from {mcp_owner} to {next} in {took:?}");
    assert_ne!(next, mcp_owner);
    assert!(took < Duration::from_millis(LEASE_MS + 2000), "{took:?}");
}
