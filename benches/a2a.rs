//! A task through the A2A front door against the same work through the A2E
//! HTTP transport, in one run, on one `subagentd` (memory store, the
//! scripted agent, which completes at once):
//!
//! - `a2a/send_message`: one blocking JSON-RPC `SendMessage` on a kept-alive
//!   connection, until its reply (the task `COMPLETED`, with its artifact);
//!   each in the same context, so each is a root subagent of one session.
//! - `a2a/a2e_send`: an A2E client on one HTTP session doing the same
//!   spawn, delegate and await: `POST /send` with the spawn, its reply read
//!   from `GET /stream`, then one `POST /send` with the delegate and the
//!   await, until the await's reply.
//!
//! `cargo bench --bench a2a`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use serde_json::{json, Value};

#[path = "support/http_client.rs"]
mod http_client;

use http_client::{start_host, A2eSession, Connection};

fn send_message(connection: &mut Connection, n: u64) {
    let body = json!({ "jsonrpc": "2.0", "id": n, "method": "SendMessage", "params": { "message": {
        "messageId": format!("m{n}"), "contextId": "bench", "role": "ROLE_USER", "parts": [{ "text": "go" }] } } });
    let reply: Value =
        serde_json::from_str(&connection.post("/a2a", "A2A-Version: 1.0\r\n", &body.to_string())).unwrap();
    assert_eq!(reply["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{reply}");
}

fn a2a(c: &mut Criterion) {
    let host = start_host();
    let mut group = c.benchmark_group("a2a");
    group.throughput(Throughput::Elements(1));
    let mut connection = Connection::open(&host.addr);
    let mut n = 0;
    group.bench_function("send_message", |b| {
        b.iter(|| {
            n += 1;
            send_message(&mut connection, n);
        })
    });
    let mut session = A2eSession::open(&host.addr);
    group.bench_function("a2e_send", |b| {
        b.iter(|| {
            n += 1;
            session.cycle(n);
        })
    });
    group.finish();
}

criterion_group!(benches, a2a);
criterion_main!(benches);
