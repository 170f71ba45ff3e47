//! The host's own time per step of a durable model-driven task: a fake
//! model on loopback that answers at once, asking for one tool call
//! (`list_subagents`) per reply, for STEPS steps; every step is a model
//! call, a tool call and a checkpoint.
//!
//! Run: `cargo run --release --example durable_steps -- STORE [STEPS]`,
//! STORE being `memory`, `sqlite:PATH` or a `postgres://` URL (its
//! database is used as it is: give it one of its own). Prints the host's
//! time per step (from the model's reply going out to the next request
//! coming in) at p50, p90, p99 and the maximum, and the mean over the
//! first and the last hundred steps (a conversation grows each step), and
//! the commits and changes the store made.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use subagent_host::adapter::openai::{OpenAiAdapter, OpenAiConfig};
use subagent_host::config::Limits;
use subagent_host::protocol::wire::*;
use subagent_host::store::{self, SessionLog, SessionRow, StoreUrl, WriterSettings};
use subagent_host::NullSink;
use subagent_host::{AdapterRouter, Host, HostConfig};

#[path = "../benches/support/tree_ops.rs"]
mod tree_ops;
use tree_ops::TreeOps;

/// When each request arrived, and when its reply was written.
type Seen = Arc<Mutex<Vec<(Instant, Instant)>>>;

/// Serves one keep-alive connection: a tool call until the conversation
/// holds `steps - 1` tool answers, then a final answer.
fn serve(stream: TcpStream, steps: usize, seen: Seen) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut writer = stream;
    let _ = writer.set_nodelay(true);
    let mut call = 0u64;
    loop {
        let mut length = 0usize;
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let arrived = Instant::now();
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let answered = body.windows(13).filter(|window| window == b"\"role\":\"tool\"").count();
        call += 1;
        let reply = if answered + 1 < steps {
            format!(
                r#"{{"choices":[{{"index":0,"finish_reason":"tool_calls","message":{{"role":"assistant","content":null,"tool_calls":[{{"id":"call_{call}","type":"function","function":{{"name":"list_subagents","arguments":"{{}}"}}}}]}}}}],"usage":{{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}}}"#
            )
        } else {
            r#"{"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"done"}}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}"#.to_owned()
        };
        // One write (with no Nagle delay): the reply goes out whole at once.
        let response = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{reply}",
            reply.len()
        );
        if writer.write_all(response.as_bytes()).is_err() {
            return;
        }
        seen.lock().expect("seen").push((arrived, Instant::now()));
    }
}

fn percentile(sorted: &[Duration], at: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * at).round() as usize]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let store_arg = args.get(1).map_or("memory", String::as_str).to_owned();
    let steps: usize = args.get(2).map_or(1_000, |n| n.parse().expect("STEPS"));
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let base_url = format!("http://{}/v1", listener.local_addr().expect("addr"));
    let seen: Seen = Arc::default();
    {
        let seen = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let seen = seen.clone();
                std::thread::spawn(move || serve(stream, steps, seen));
            }
        });
    }
    let system = actix_rt::System::new();
    let took = system.block_on(async move {
        let url = StoreUrl::parse(&store_arg).expect("a store URL");
        let handle = store::open(&url, WriterSettings::default(), None).expect("open the store");
        let adapter = Arc::new(OpenAiAdapter::new(OpenAiConfig::new(base_url)).expect("adapter"));
        let router = AdapterRouter::default().route("fake", adapter).expect("route");
        let limits = Limits { max_result_bytes: 16 << 20, ..Limits::default() };
        let host = Host::new(HostConfig { router, limits, ..Default::default() });
        let id = format!("steps-{}", std::process::id());
        let log = SessionLog::new(id.as_str(), handle.clone());
        log.open(SessionRow {
            id: id.as_str().into(),
            agent_id: "bench".into(),
            capabilities: vec!["multi_agent".into()],
            principal: None,
            transport: "tcp".into(),
            handshaken: true,
        });
        let tree = host.open_logged_tree(Arc::new(NullSink), log);
        let mut agent = SubagentConfig::new("stepper", "fake");
        agent.max_steps = u32::try_from(steps + 1).expect("steps");
        agent.timeout_seconds = 3_600;
        agent.memory_scope = MemoryScope::Isolated;
        let request = SpawnRequest { agent, parent_agent_id: None, root_agent_id: None };
        let sub = tree.spawn(request).await.expect("spawn").subagent_id;
        let started = Instant::now();
        tree.delegate(sub, TaskDefinition::new("loop", "call the tool until told to stop")).await.expect("delegate");
        let done = tree.await_result(sub).await.expect("await");
        assert_eq!(done.status, SubagentStatus::Completed, "{:?}", done.error);
        let took = started.elapsed();
        tree.close().await;
        handle.flush().await;
        let stats = handle.stats();
        let commits = stats.commits.load(std::sync::atomic::Ordering::Relaxed);
        let changes = stats.changes.load(std::sync::atomic::Ordering::Relaxed);
        (took, commits, changes)
    });
    let (took, commits, changes) = took;
    let seen = seen.lock().expect("seen").clone();
    let mut host_time: Vec<Duration> = seen.windows(2).map(|pair| pair[1].0.duration_since(pair[0].1)).collect();
    let first: Duration = host_time.iter().take(100).sum::<Duration>() / 100.min(host_time.len()) as u32;
    let last: Duration = host_time.iter().rev().take(100).sum::<Duration>() / 100.min(host_time.len()) as u32;
    host_time.sort();
    println!(
        "{} steps in {:.2} s: host time per step p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms, max {:.3} ms; \
         mean of the first 100 {:.3} ms, of the last 100 {:.3} ms",
        seen.len(),
        took.as_secs_f64(),
        percentile(&host_time, 0.5).as_secs_f64() * 1e3,
        percentile(&host_time, 0.9).as_secs_f64() * 1e3,
        percentile(&host_time, 0.99).as_secs_f64() * 1e3,
        host_time.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
        first.as_secs_f64() * 1e3,
        last.as_secs_f64() * 1e3,
    );
    // What the store did for them (nothing for `memory`).
    println!("store: {commits} commits ({:.2} per step), {changes} changes", commits as f64 / seen.len().max(1) as f64);
}
