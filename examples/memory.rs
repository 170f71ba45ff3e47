//! Memory per subagent: bytes per idle subagent and per finished subagent
//! kept for await/list, against a raw actix actor as the floor; and what a
//! durable store (SQLite) and a restart change about a finished subagent.
//!
//! Run: `cargo run --release --example memory [-- N [MODE...]]` (default
//! N = 100 000, every mode below in this order). Each measurement runs in its
//! own child process (the allocator does not give memory back, so one process
//! could not measure two things cleanly):
//!
//! - `raw`: N idle raw actors (the floor).
//! - `idle`: N subagents spawned and never delegated.
//! - `finished`: N subagents that each ran the default scripted task and keep
//!   its result for await/list (the memory store).
//! - `waiting`: N subagents whose tasks wait (`WAITING`) for a mailbox
//!   message; `approval`: N whose tasks wait for a person's approval of a
//!   tool call (pending on the host's desk). The difference is what a
//!   pending approval costs beyond a waiting task.
//! - `finished_durable`: `finished` on a session recorded in SQLite
//!   (`synchronous = full`, the default). Each window of requests waits for
//!   its commit, as a client waits for replies that are sent only once
//!   committed; everything is committed before the measurement.
//! - `reloaded`: the session `finished_durable` left in its SQLite file,
//!   loaded and restored into a fresh tree by a fresh process (a restart),
//!   as the service restores one (`StoreHandle::load`,
//!   `SessionLog::restored`, `Host::open_logged_tree`, `Tree::restore`).
//!   Compare with `finished_durable`: the same session before the restart.
//!   Its baseline is taken before the load, so its RSS holds what loading
//!   the whole session needed at once (see its peak). `reloaded` always runs
//!   after a `finished_durable` child of its own.
//!
//! For example `cargo run --release --example memory -- 10000 finished
//! finished_durable reloaded`. The SQLite file lives in a temporary directory,
//! removed at the end. A child runs as `memory MODE N [SQLITE_FILE]`.
//!
//! Three figures per line: RSS growth ÷ N (`VmRSS` of `/proc/self/status`,
//! what the machine pays, allocator slack included), live heap growth ÷ N (a
//! counting global allocator: what the code asks for) and the heap's peak
//! growth ÷ N on the way (what was needed at once: the allocator keeps much
//! of it in RSS). SQLite allocates in C (its page cache, the rows it hands
//! over), which shows in RSS only.

use actix::prelude::*;
use futures_util::future::join_all;
use mimalloc::MiMalloc;
use std::alloc::{GlobalAlloc, Layout};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Arc;
use subagent_host::config::{ApprovalRule, Limits, Require};
use subagent_host::protocol::wire::*;
use subagent_host::store::{self, SessionLog, SessionRow, StoreHandle, StoreUrl, WriterSettings};
use subagent_host::NullSink;
use subagent_host::{ApprovalPolicy, Host, HostConfig, SubagentId, Tree};

#[path = "../benches/support/tree_ops.rs"]
mod tree_ops;
use tree_ops::TreeOps;

/// The allocator subagentd ships with (mimalloc), counting live heap bytes.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

/// The most `LIVE` has been since the last baseline.
static PEAK: AtomicIsize = AtomicIsize::new(0);

/// Counts `grown` more bytes live.
fn grew(grown: isize) {
    let now = LIVE.fetch_add(grown, Ordering::Relaxed) + grown;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call is forwarded unchanged to mimalloc.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size() as isize);
        MiMalloc.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        MiMalloc.dealloc(ptr, layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        grew(layout.size() as isize);
        MiMalloc.alloc_zeroed(layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        grew(new_size as isize - layout.size() as isize);
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

/// The baseline of a measurement: RSS and live heap now (the peak starts
/// again from here).
fn baseline() -> (isize, isize) {
    let heap = heap();
    PEAK.store(heap, Ordering::Relaxed);
    (rss(), heap)
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
    let (rss1, heap1, peak) = (rss(), heap(), PEAK.load(Ordering::Relaxed));
    let each = |bytes: isize| bytes / n as isize;
    println!(
        "{what:<16} N={n:<7} rss/each={:>6} B  heap/each={:>6} B  peak/each={:>6} B  (rss {:+} KiB, heap {:+} KiB)",
        each(rss1 - rss0),
        each(heap1 - heap0),
        each(peak - heap0),
        (rss1 - rss0) / 1024,
        (heap1 - heap0) / 1024,
    );
}

/// The session `finished_durable` stores and `reloaded` restores.
const SESSION: &str = "memory-bench";

/// The SQLite store at `path`, `synchronous = full` (the default).
fn open_sqlite(path: &Path) -> StoreHandle {
    let url = StoreUrl::parse(&format!("sqlite:{}", path.display())).expect("a SQLite url");
    store::open(&url, WriterSettings::default(), None).expect("open the SQLite store")
}

/// A session of `store` recorded from its start, as a handshake stores one.
fn opened_log(id: &str, store: &StoreHandle) -> Arc<SessionLog> {
    let log = SessionLog::new(id, store.clone());
    log.open(SessionRow {
        id: id.into(),
        agent_id: "client_agent".into(),
        capabilities: vec!["multi_agent".into()],
        principal: None,
        transport: "tcp".into(),
        handshaken: true,
    });
    log
}

/// Runs one default scripted task on a fresh subagent of `tree`.
async fn run_one(tree: &Tree) {
    let id = tree.spawn(spawn_request()).await.expect("spawn").subagent_id;
    tree.delegate(id, TaskDefinition::new("warm", "warm up")).await.expect("delegate");
    tree.await_result(id).await.expect("await");
}

/// N subagents spawned in windows of [`WINDOW`], as a pipelining client sends
/// them; with `finish`, each runs the default scripted task to its end. N
/// requests in flight at once would measure the client's backlog (freed
/// afterwards, but kept in RSS by the allocator), not what a subagent costs
/// the host. On a durable `store`, each window waits for its changes to be
/// committed, as a client waits for its replies (each is sent only once what
/// it reports is committed): without that the writer's backlog grows with N.
async fn spawn_all(tree: &Tree, n: usize, finish: bool, store: &StoreHandle) -> Vec<SubagentId> {
    let mut ids = Vec::with_capacity(n);
    for start in (0..n).step_by(WINDOW) {
        let window = join_all((start..n.min(start + WINDOW)).map(|_| tree.spawn(spawn_request()))).await;
        let window: Vec<_> = window.into_iter().map(|r| r.expect("spawn").subagent_id).collect();
        if finish {
            let task = TaskDefinition::new("unit", "do the unit of work");
            join_all(window.iter().map(|id| tree.delegate(*id, task.clone()))).await;
            let done = join_all(window.iter().map(|id| tree.await_result(*id))).await;
            assert!(done.iter().all(|d| matches!(d, Ok(r) if r.status == SubagentStatus::Completed)));
        }
        store.flush().await;
        ids.extend(window);
    }
    // Let the last status reports reach the supervisor.
    tree.list().await.expect("list");
    ids
}

fn measure(mode: &str, n: usize, file: Option<&Path>) {
    let system = actix_rt::System::new();
    let limits = Limits { max_subagents_per_session: n, max_retained_records: n, ..Default::default() };
    // `deploy` needs approval (the `approval` mode's calls).
    let rule = ApprovalRule { tool: Some("deploy".into()), server: None, require: Require::Always };
    let approvals = ApprovalPolicy::new(&[rule]).expect("a valid rule");
    let host = Host::new(HostConfig { limits, approvals, ..Default::default() });
    match mode {
        "finished_durable" | "reloaded" => {
            // Without a file of the parent's, one of its own, removed after.
            let own = file.is_none().then(TempDir::new);
            let path = file.map_or_else(|| own.as_ref().expect("own dir").0.join("memory.sqlite3"), Path::to_path_buf);
            system.block_on(durable(mode, n, &host, &path));
            drop(own);
            return;
        }
        _ => {}
    }
    system.block_on(async {
        // Warm the runtime (timer wheel, thread-locals) before the baseline.
        let warm = host.open_tree(Arc::new(NullSink));
        run_one(&warm).await;
        let session = host.open_tree(Arc::new(NullSink));
        let base = baseline();
        match mode {
            "raw" => {
                let addrs: Vec<_> = (0..n).map(|_| Idle.start()).collect();
                join_all(addrs.iter().map(|a| a.send(Ping))).await;
                report("raw", n, base);
                drop(addrs);
            }
            "idle" | "finished" => {
                let ids = spawn_all(&session, n, mode == "finished", &StoreHandle::memory()).await;
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

/// `finished_durable` (N finished subagents recorded in the SQLite file
/// `path`, left there) and `reloaded` (that session restored from `path`).
async fn durable(mode: &str, n: usize, host: &Host, path: &Path) {
    let store = open_sqlite(path);
    // Warm the runtime, the writer and its statements before the baseline:
    // a recorded session with one finished subagent and, for `reloaded`, the
    // one the building process left, loaded and restored.
    let warm = host.open_logged_tree(Arc::new(NullSink), opened_log(&format!("warm-{mode}"), &store));
    run_one(&warm).await;
    if mode == "reloaded" {
        let stored = store.load("warm-finished_durable").await.expect("load").expect("the warm session is stored");
        let log = SessionLog::restored("warm-finished_durable", store.clone(), stored.next_seq);
        let restored = host.open_logged_tree(Arc::new(NullSink), log);
        restored.restore(stored.subagents).await.expect("restore the warm session");
        restored.list().await.expect("list");
        warm.list().await.expect("list");
    }
    store.flush().await;
    let base = baseline();
    let (session, ids) = match mode {
        "finished_durable" => {
            let session = host.open_logged_tree(Arc::new(NullSink), opened_log(SESSION, &store));
            let ids = spawn_all(&session, n, true, &store).await;
            (session, ids)
        }
        _ => {
            let stored = store.load(SESSION).await.expect("load").expect("the session is stored");
            assert_eq!(stored.subagents.len(), n, "the stored session has N subagents");
            let log = SessionLog::restored(SESSION, store.clone(), stored.next_seq);
            let session = host.open_logged_tree(Arc::new(NullSink), log);
            assert_eq!(session.restore(stored.subagents).await.expect("restore"), 0, "nothing was running");
            let list = session.list().await.expect("list").subagents;
            assert!(list.iter().all(|s| s.status == SubagentStatus::Completed));
            // The ids, kept as `finished` keeps them.
            let ids: Vec<_> = list.iter().map(|s| s.subagent_id).collect();
            assert_eq!(ids.len(), n);
            drop(list);
            (session, ids)
        }
    };
    // Everything recorded is committed: what stays is what a subagent keeps.
    store.flush().await;
    report(mode, n, base);
    drop(ids);
    // The "crash": the session stays stored as it is for `reloaded`.
    store.freeze().await;
    session.close().await;
    warm.close().await;
}

/// A temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        let path = std::env::temp_dir().join(format!("subagent-memory-{}", std::process::id()));
        std::fs::create_dir_all(&path).expect("temp dir");
        Self(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
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

/// Every mode, in the order a run without modes takes them.
const MODES: [&str; 7] = ["raw", "idle", "finished", "waiting", "approval", "finished_durable", "reloaded"];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // A child: `MODE N [SQLITE_FILE]`.
    if let Some(mode) = args.first().filter(|first| first.parse::<usize>().is_err()) {
        let n = args.get(1).expect("N").parse().expect("N");
        measure(mode, n, args.get(2).map(Path::new));
        return;
    }
    let n: usize = args.first().map_or(100_000, |v| v.parse().expect("N"));
    let mut modes: Vec<&str> = args.iter().skip(1).map(String::as_str).collect();
    if modes.is_empty() {
        modes = MODES.to_vec();
    }
    if let Some(unknown) = modes.iter().find(|mode| !MODES.contains(mode)) {
        panic!("unknown mode {unknown}; the modes are {MODES:?}");
    }
    let me = std::env::current_exe().expect("current exe");
    let dir = TempDir::new();
    let file = dir.0.join("memory.sqlite3");
    let run = |mode: &str, file: Option<&Path>| {
        let mut child = Command::new(&me);
        child.arg(mode).arg(n.to_string());
        child.args(file);
        let status = child.status().expect("child");
        assert!(status.success(), "{mode} failed");
    };
    let mut built = false;
    for mode in modes {
        match mode {
            // Builds the file `reloaded` restores (once).
            "finished_durable" if !built => {
                run(mode, Some(&file));
                built = true;
            }
            "reloaded" => {
                if !built {
                    run("finished_durable", Some(&file));
                    built = true;
                }
                run(mode, Some(&file));
            }
            _ => run(mode, None),
        }
    }
}
