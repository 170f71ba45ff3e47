//! Memory per subagent: bytes per idle subagent and per finished subagent
//! kept for await/list, against a raw actix actor as the floor.
//!
//! Run: `cargo run --release --example memory [-- N]` (default N = 100 000).
//! Each measurement runs in its own child process (the allocator does not give
//! memory back, so one process could not measure two things cleanly):
//!
//! - `raw`: N idle raw actors (the floor).
//! - `idle`: N subagents spawned and never delegated.
//! - `finished`: N subagents that each ran the default scripted task and keep
//!   its result for await/list.
//! - `waiting`: N subagents whose tasks wait (`WAITING`) for a mailbox
//!   message; `approval`: N whose tasks wait for a person's approval of a
//!   tool call (pending on the host's desk). The difference is what a
//!   pending approval costs beyond a waiting task.
//!
//! Two figures per line: RSS growth ÷ N (`VmRSS` of `/proc/self/status`, what
//! the machine pays, allocator slack included) and live heap growth ÷ N (a
//! counting global allocator: what the code asks for).

use actix::prelude::*;
use futures_util::future::join_all;
use mimalloc::MiMalloc;
use std::alloc::{GlobalAlloc, Layout};
use std::process::Command;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Arc;
use subagent_host::config::{ApprovalRule, Limits, Require};
use subagent_host::event::NullSink;
use subagent_host::protocol::wire::*;
use subagent_host::{ApprovalPolicy, Host, HostConfig};

/// The allocator subagentd ships with (mimalloc), counting live heap bytes.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded unchanged to mimalloc.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        MiMalloc.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        MiMalloc.dealloc(ptr, layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        MiMalloc.alloc_zeroed(layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        MiMalloc.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Resident set size in bytes.
fn rss() -> isize {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS");
    let kb: isize = line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("VmRSS value");
    kb * 1024
}

fn heap() -> isize {
    LIVE.load(Ordering::Relaxed)
}

struct Idle;

impl Actor for Idle {
    type Context = Context<Self>;
}

#[derive(Message)]
#[rtype(result = "()")]
struct Ping;

impl Handler<Ping> for Idle {
    type Result = ();

    fn handle(&mut self, _msg: Ping, _ctx: &mut Self::Context) {}
}

fn report(what: &str, n: usize, (rss0, heap0): (isize, isize)) {
    let (rss1, heap1) = (rss(), heap());
    println!(
        "{what:<9} N={n:<7} rss/each={:>6} B  heap/each={:>6} B  (rss {:+} KiB, heap {:+} KiB)",
        (rss1 - rss0) / n as isize,
        (heap1 - heap0) / n as isize,
        (rss1 - rss0) / 1024,
        (heap1 - heap0) / 1024,
    );
}

fn measure(mode: &str, n: usize) {
    let system = actix_rt::System::new();
    let limits = Limits { max_subagents_per_session: n, max_retained_records: n, ..Default::default() };
    // `deploy` needs approval (the `approval` mode's calls).
    let rule = ApprovalRule { tool: Some("deploy".into()), server: None, require: Require::Always };
    let approvals = ApprovalPolicy::new(&[rule]).expect("a valid rule");
    let host = Host::new(HostConfig { limits, approvals, ..Default::default() });
    system.block_on(async {
        // Warm the runtime (timer wheel, thread-locals) before the baseline.
        let warm = host.open_tree(Arc::new(NullSink));
        let warm_id = warm.spawn(spawn_request()).await.expect("spawn").subagent_id;
        warm.delegate(warm_id, TaskDefinition::new("warm", "warm up")).await.expect("delegate");
        warm.await_result(warm_id).await.expect("await");
        let session = host.open_tree(Arc::new(NullSink));
        let base = (rss(), heap());
        match mode {
            "raw" => {
                let addrs: Vec<_> = (0..n).map(|_| Idle.start()).collect();
                join_all(addrs.iter().map(|a| a.send(Ping))).await;
                report("raw", n, base);
                drop(addrs);
            }
            "idle" | "finished" => {
                // Requests go in windows of WINDOW, as a pipelining client sends
                // them: N requests in flight at once would measure the client's
                // backlog (freed afterwards, but kept in RSS by the allocator),
                // not what a subagent costs the host.
                let mut ids = Vec::with_capacity(n);
                for start in (0..n).step_by(WINDOW) {
                    let window = join_all((start..n.min(start + WINDOW)).map(|_| session.spawn(spawn_request()))).await;
                    let window: Vec<_> = window.into_iter().map(|r| r.expect("spawn").subagent_id).collect();
                    if mode == "finished" {
                        let task = TaskDefinition::new("unit", "do the unit of work");
                        join_all(window.iter().map(|id| session.delegate(*id, task.clone()))).await;
                        let done = join_all(window.iter().map(|id| session.await_result(*id))).await;
                        assert!(done.iter().all(|d| matches!(d, Ok(r) if r.status == SubagentStatus::Completed)));
                    }
                    ids.extend(window);
                }
                // Let the last status reports reach the supervisor.
                session.list().await.expect("list");
                report(mode, n, base);
                drop(ids);
            }
            "waiting" | "approval" => {
                let script = match mode {
                    "waiting" => serde_json::json!([{ "wait_message": { "timeout_ms": 600_000 } }]),
                    _ => serde_json::json!([{ "call_tool": { "tool": "deploy", "arguments": { "env": "prod" } } }]),
                };
                let mut task = TaskDefinition::new("unit", "wait");
                task.metadata.insert("script".into(), script);
                let mut ids = Vec::with_capacity(n);
                for start in (0..n).step_by(WINDOW) {
                    let window = join_all((start..n.min(start + WINDOW)).map(|_| session.spawn(spawn_request()))).await;
                    let window: Vec<_> = window.into_iter().map(|r| r.expect("spawn").subagent_id).collect();
                    join_all(window.iter().map(|id| session.delegate(*id, task.clone()))).await;
                    ids.extend(window);
                }
                // Every task has reached its wait (and every approval the desk).
                loop {
                    let waiting = session.status_counts().await.expect("counts").get(SubagentStatus::Waiting);
                    if waiting == n && (mode == "waiting" || host.desk().len() == n) {
                        break;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                report(mode, n, base);
                drop(ids);
            }
            other => panic!("unknown mode {other}"),
        }
        session.close().await;
    });
}

/// Requests in flight at once while spawning.
const WINDOW: usize = 1_000;

fn spawn_request() -> SpawnRequest {
    SpawnRequest {
        agent: SubagentConfig::new("bench", "scripted"),
        parent_agent_id: Some("client_agent".to_owned()),
        root_agent_id: Some("client_agent".to_owned()),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 3 {
        let n = args[2].parse().expect("N");
        measure(&args[1], n);
        return;
    }
    let n: usize = args.get(1).map_or(100_000, |v| v.parse().expect("N"));
    let me = std::env::current_exe().expect("current exe");
    for mode in ["raw", "idle", "finished", "waiting", "approval"] {
        let status = Command::new(&me).arg(mode).arg(n.to_string()).status().expect("child");
        assert!(status.success(), "{mode} failed");
    }
}
