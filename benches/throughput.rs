//! In-process throughput of the subagent runtime through the public
//! [`Tree`] API, each figure measured next to a raw actix floor in the
//! same binary, on the same single-threaded `System`:
//!
//! | bench | what one element is | floor it is compared with |
//! |---|---|---|
//! | `cycle/session` | spawn → delegate (default scripted task) → await | `cycle/raw`: start an actor, send, reply, stop |
//! | `cycle/session_terminate` | the same, then terminate | `cycle/raw` |
//! | `fanout/session/N` | one of N subagents spawned + delegated concurrently, then all awaited | `fanout/raw/N`: one of N actors started, sent a message concurrently, all replies awaited |
//! | `list/session/10000` | one `list` of a session with 10k subagents | `list/raw/10000`: one reply carrying 10k rows from a raw actor |
//! | `cancel/{wide,deep}/10000` | cancel of a 10k-node tree of running (sleeping) tasks, request to reply | `fanout/raw/10000` (per node) |
//!
//! Run: `cargo bench --bench throughput` (filter: `cargo bench --bench
//! throughput -- fanout`). `benches/ratios.py` turns criterion's estimates into
//! the ratio table of BENCHMARKS.md.

use actix::prelude::*;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use futures_util::future::join_all;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use subagent_host::config::Limits;
use subagent_host::protocol::wire::*;
use subagent_host::NullSink;
use subagent_host::{Host, HostConfig, SubagentId, Tree};

// The allocator subagentd ships with (src/main.rs), for the floor and the host alike.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

// ---- the raw actix floor ------------------------------------------------------

#[path = "support/floor.rs"]
mod floor;
use floor::{all, Echo, Ping, Stop};

#[path = "support/tree_ops.rs"]
mod tree_ops;
use tree_ops::TreeOps;

/// A raw listing: a reply carrying `rows` small rows, the floor of `list`.
struct Rows(Vec<(u32, Arc<str>, u32)>);

impl Actor for Rows {
    type Context = Context<Self>;
}

#[derive(Message)]
#[rtype(result = "Vec<(u32, Arc<str>, u32)>")]
struct ListRows;

impl Handler<ListRows> for Rows {
    type Result = MessageResult<ListRows>;

    fn handle(&mut self, _msg: ListRows, _ctx: &mut Self::Context) -> Self::Result {
        let mut rows = self.0.clone();
        rows.sort_unstable_by_key(|row| row.0);
        MessageResult(rows)
    }
}

/// One raw cycle: start an actor, send it a message, get the reply, stop it.
async fn raw_cycle(i: u64) {
    let addr = Echo.start();
    let got = addr.send(Ping(i)).await.expect("raw reply");
    assert_eq!(got, i);
    addr.send(Stop).await.expect("raw stop");
}

/// Raw fan-out: start `n` actors, send each a message at once, await every
/// reply, then stop them all.
async fn raw_fanout(n: usize) {
    let addrs: Vec<_> = (0..n).map(|_| Echo.start()).collect();
    let replies = all(addrs.iter().enumerate().map(|(i, addr)| addr.send(Ping(i as u64)))).await;
    assert_eq!(replies.len(), n);
    for addr in &addrs {
        addr.do_send(Stop);
    }
}

// ---- the subagent runtime -----------------------------------------------------

fn bench_limits(subagents: usize) -> Limits {
    Limits {
        max_subagents_per_session: subagents,
        max_retained_records: subagents,
        max_depth: 64,
        // Cancelled sleepers wind up at once; the grace only bounds a stuck one.
        cancel_grace_ms: 10_000,
        ..Default::default()
    }
}

fn bench_host(subagents: usize) -> Host {
    Host::new(HostConfig { limits: bench_limits(subagents), ..Default::default() })
}

fn spawn_request(parent: Option<SubagentId>) -> SpawnRequest {
    SpawnRequest {
        agent: SubagentConfig::new("bench", "scripted"),
        parent_agent_id: Some(parent.map_or_else(|| "client_agent".to_owned(), |p| p.to_string())),
        root_agent_id: Some("client_agent".to_owned()),
    }
}

/// The unit of work: the scripted adapter's default task (no script).
fn unit_task() -> TaskDefinition {
    TaskDefinition::new("unit", "do the unit of work")
}

fn sleeping_task() -> TaskDefinition {
    let mut task = TaskDefinition::new("sleep", "sleep until cancelled");
    task.metadata.insert("script".into(), json!([{ "sleep_ms": 600_000 }]));
    task
}

/// One cycle: spawn → delegate → await the result.
async fn session_cycle(session: &Tree) -> SubagentId {
    let id = session.spawn(spawn_request(None)).await.expect("spawn").subagent_id;
    let accepted = session.delegate(id, unit_task()).await.expect("delegate");
    debug_assert!(accepted.accepted);
    let done = session.await_result(id).await.expect("await");
    debug_assert_eq!(done.status, SubagentStatus::Completed);
    id
}

/// Fan-out: spawn and delegate `n` subagents at once, then await them all.
async fn session_fanout(session: &Tree, n: usize) {
    let ids = all((0..n).map(|_| async {
        let id = session.spawn(spawn_request(None)).await.expect("spawn").subagent_id;
        session.delegate(id, unit_task()).await.expect("delegate");
        id
    }))
    .await;
    let done = all(ids.iter().map(|id| session.await_result(*id))).await;
    assert!(done.iter().all(|d| matches!(d, Ok(r) if r.status == SubagentStatus::Completed)));
}

/// Builds an `n`-node tree, breadth first, each node with up to `branching`
/// children; returns the ids, root first.
async fn build_tree(session: &Tree, n: usize, branching: usize) -> Vec<SubagentId> {
    let root = session.spawn(spawn_request(None)).await.expect("spawn root").subagent_id;
    let mut ids = vec![root];
    let mut parent_index = 0;
    while ids.len() < n {
        let parent = ids[parent_index];
        let count = branching.min(n - ids.len());
        let children = join_all((0..count).map(|_| session.spawn(spawn_request(Some(parent))))).await;
        ids.extend(children.into_iter().map(|c| c.expect("spawn child").subagent_id));
        parent_index += 1;
    }
    ids
}

async fn delegate_all(session: &Tree, ids: &[SubagentId], task: &TaskDefinition) {
    let replies = join_all(ids.iter().map(|id| session.delegate(*id, task.clone()))).await;
    assert!(replies.iter().all(|r| matches!(r, Ok(d) if d.accepted)));
}

// ---- criterion ----------------------------------------------------------------

/// Times `iters` sequential spawn → delegate → await cycles on a fresh
/// session, each followed by a terminate when `terminate` is set.
fn timed_cycles(system: &actix_rt::SystemRunner, iters: u64, terminate: bool) -> Duration {
    let host = bench_host(iters as usize + 1);
    system.block_on(async {
        let session = host.open_tree(Arc::new(NullSink));
        let start = Instant::now();
        for _ in 0..iters {
            let id = session_cycle(&session).await;
            if terminate {
                session.terminate(id).await.expect("terminate");
            }
        }
        let elapsed = start.elapsed();
        session.close().await;
        elapsed
    })
}

fn cycle(c: &mut Criterion) {
    let system = actix_rt::System::new();
    let mut group = c.benchmark_group("cycle");
    group.throughput(Throughput::Elements(1));
    group.bench_function("raw", |b| {
        b.iter_custom(|iters| {
            system.block_on(async {
                let start = Instant::now();
                for i in 0..iters {
                    raw_cycle(i).await;
                }
                start.elapsed()
            })
        })
    });
    group.bench_function("session", |b| b.iter_custom(|iters| timed_cycles(&system, iters, false)));
    group.bench_function("session_terminate", |b| b.iter_custom(|iters| timed_cycles(&system, iters, true)));
    group.finish();
}

fn fanout(c: &mut Criterion) {
    let system = actix_rt::System::new();
    let mut group = c.benchmark_group("fanout");
    group.sample_size(10);
    for n in [1_000usize, 10_000, 100_000] {
        group.throughput(Throughput::Elements(n as u64));
        if n == 100_000 {
            group.measurement_time(Duration::from_secs(30));
        }
        group.bench_with_input(BenchmarkId::new("raw", n), &n, |b, &n| {
            b.iter_custom(|iters| {
                system.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let start = Instant::now();
                        raw_fanout(n).await;
                        total += start.elapsed();
                        // Let the stopped actors drop before the next round.
                        actix_rt::task::yield_now().await;
                    }
                    total
                })
            })
        });
        group.bench_with_input(BenchmarkId::new("session", n), &n, |b, &n| {
            let host = bench_host(n);
            b.iter_custom(|iters| {
                system.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let session = host.open_tree(Arc::new(NullSink));
                        let start = Instant::now();
                        session_fanout(&session, n).await;
                        total += start.elapsed();
                        session.close().await;
                    }
                    total
                })
            })
        });
    }
    group.finish();
}

fn list(c: &mut Criterion) {
    const N: usize = 10_000;
    let system = actix_rt::System::new();
    let mut group = c.benchmark_group("list");
    group.throughput(Throughput::Elements(N as u64));
    let rows: Vec<(u32, Arc<str>, u32)> =
        (0..N as u32).map(|i| (i.wrapping_mul(2_654_435_761), Arc::from("bench"), 0)).collect();
    let raw = system.block_on(async { Rows(rows).start() });
    group.bench_function(BenchmarkId::new("raw", N), |b| {
        b.iter_custom(|iters| {
            system.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    let rows = raw.send(ListRows).await.expect("raw list");
                    assert_eq!(rows.len(), N);
                }
                start.elapsed()
            })
        })
    });
    let host = bench_host(N);
    // Half the subagents have finished a task (a result is kept), half are idle.
    let session = system.block_on(async {
        let session = host.open_tree(Arc::new(NullSink));
        let ids = join_all((0..N).map(|_| session.spawn(spawn_request(None)))).await;
        let ids: Vec<_> = ids.into_iter().map(|r| r.expect("spawn").subagent_id).collect();
        delegate_all(&session, &ids[..N / 2], &unit_task()).await;
        join_all(ids[..N / 2].iter().map(|id| session.await_result(*id))).await;
        session
    });
    group.bench_function(BenchmarkId::new("session", N), |b| {
        b.iter_custom(|iters| {
            system.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    let listed = session.list().await.expect("list");
                    assert_eq!(listed.subagents.len(), N);
                }
                start.elapsed()
            })
        })
    });
    system.block_on(async {
        session.close().await;
    });
    group.finish();
}

fn cancel(c: &mut Criterion) {
    const N: usize = 10_000;
    let system = actix_rt::System::new();
    let mut group = c.benchmark_group("cancel");
    group.sample_size(10);
    group.throughput(Throughput::Elements(N as u64));
    // wide: 1 + 100 + 9 899 nodes (3 levels); deep: branching 4, 8 levels.
    for (shape, branching) in [("wide", 100usize), ("deep", 4)] {
        let host = bench_host(N);
        let (session, ids) = system.block_on(async {
            let session = host.open_tree(Arc::new(NullSink));
            let ids = build_tree(&session, N, branching).await;
            (session, ids)
        });
        let task = sleeping_task();
        group.bench_function(BenchmarkId::new(shape, N), |b| {
            b.iter_custom(|iters| {
                system.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        delegate_all(&session, &ids, &task).await;
                        let start = Instant::now();
                        let stopped = session.cancel(ids[0]).await.expect("cancel");
                        total += start.elapsed();
                        assert_eq!(stopped.len(), N, "every running task of the tree is stopped");
                    }
                    total
                })
            })
        });
        system.block_on(async {
            session.close().await;
        });
    }
    group.finish();
}

criterion_group!(benches, cycle, fanout, list, cancel);
criterion_main!(benches);
