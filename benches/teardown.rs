//! Teardown in-process through the public [`Tree`] API (issue 15): each
//! figure is one request, timed from the call to its reply, on a session
//! built beforehand (not timed); criterion prints the cost per subagent
//! (`Throughput::Elements(N)`), which should not grow with N.
//!
//! | bench | the timed request | the session |
//! |---|---|---|
//! | `close/N` | `close` | N top-level subagents, each finished a task |
//! | `drain/N` | `drain` (nothing busy: it closes) | the same |
//! | `merge/{hierarchical_summary,voting}/10000` | one merge of all | 10k finished; for `voting` each answers differently |
//! | `terminate/{wide,deep}/10000` | terminate the root, then one request through the supervisor (`settled`) | 10k finished: one parent with 9 999 children, or a chain of 10k |
//! | `cancel/{wide,deep}/10000` | cancel the root, then `settled` | the same shapes, every task running |
//! | `stop_raw/N` (the floor of `close`) | ask N raw actix actors to stop, and wait until each is dropped | N actors, each has answered one message |
//!
//! The floor shows what the machine alone makes of N: stopping N actors
//! touches N actors' memory, and per actor that costs more once they no
//! longer fit in the caches, however linear the work.
//!
//! The session keeps the shipped `max_retained_records` (1 024), so most of
//! the records a teardown terminates are also forgotten on the way.
//!
//! Run: `cargo bench --bench teardown` (filter: `cargo bench --bench teardown
//! -- close`).

use actix::prelude::*;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use subagent_host::config::Limits;
use subagent_host::NullSink;
use subagent_host::{Host, HostConfig, SubagentId, Tree};
use tokio_util::sync::CancellationToken;

// The allocator subagentd ships with (src/main.rs).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "support/floor.rs"]
#[allow(dead_code)] // (its `Echo`: the floor here is `Held`, which says when it is dropped)
mod floor;
use floor::{all, Ping, Stop};
#[path = "support/teardown.rs"]
mod teardown;
use teardown::*;

#[path = "support/tree_ops.rs"]
mod tree_ops;
use tree_ops::TreeOps;

/// The floor's actor: answers a number, stops when asked, and says when it
/// has been dropped (as a subagent actor does, through its `gone` token).
struct Held(CancellationToken);

impl Actor for Held {
    type Context = Context<Self>;
}

impl Drop for Held {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

impl Handler<Ping> for Held {
    type Result = u64;

    fn handle(&mut self, msg: Ping, _ctx: &mut Self::Context) -> u64 {
        msg.0
    }
}

impl Handler<Stop> for Held {
    type Result = ();

    fn handle(&mut self, _msg: Stop, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

fn host(n: usize) -> Host {
    let limits = teardown_limits(n, Limits::default().max_retained_records);
    Host::new(HostConfig { limits, ..Default::default() })
}

/// Times `iters` runs of `measured` on a session each, built by `build`
/// (untimed); each session is closed afterwards (untimed).
fn timed<B, BF, M, MF>(system: &actix_rt::SystemRunner, host: &Host, iters: u64, build: B, measured: M) -> Duration
where
    B: Fn(Tree) -> BF,
    BF: Future<Output = (Tree, Vec<SubagentId>)>,
    M: Fn(Tree, Vec<SubagentId>) -> MF,
    MF: Future<Output = Tree>,
{
    system.block_on(async {
        let mut total = Duration::ZERO;
        for _ in 0..iters {
            let (session, ids) = build(host.open_tree(Arc::new(NullSink))).await;
            let start = Instant::now();
            let session = measured(session, ids).await;
            total += start.elapsed();
            session.close().await;
        }
        total
    })
}

async fn finished_session(session: Tree, n: usize) -> (Tree, Vec<SubagentId>) {
    let ids = finished(&session, n, &unit_task()).await;
    (session, ids)
}

/// How a session of finished subagents is torn down.
#[derive(Clone, Copy)]
enum Ending {
    /// `Tree::close`.
    Close,
    /// `Tree::drain` (nothing is busy: it closes).
    Drain,
}

impl Ending {
    async fn end(self, session: &Tree) -> Vec<SubagentId> {
        match self {
            Self::Close => session.close().await,
            Self::Drain => session.drain(Duration::from_secs(60)).await,
        }
    }
}

/// A group of few samples (each builds a large session first).
fn group<'a>(c: &'a mut Criterion, name: &str) -> criterion::BenchmarkGroup<'a, criterion::measurement::WallTime> {
    let mut group = c.benchmark_group(name);
    group.sample_size(10).sampling_mode(SamplingMode::Flat).measurement_time(Duration::from_secs(3));
    group
}

/// `ending` of a session of N finished subagents, for each N.
fn finished_teardown(c: &mut Criterion, name: &str, ending: Ending) {
    let system = actix_rt::System::new();
    let mut group = group(c, name);
    for n in [5_000usize, 20_000, 100_000] {
        let host = host(n);
        group.throughput(Throughput::Elements(n as u64));
        group.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter_custom(|iters| {
                timed(
                    &system,
                    &host,
                    iters,
                    |s| finished_session(s, n),
                    |s, _| async move {
                        assert_eq!(ending.end(&s).await.len(), n, "every subagent stopped");
                        s
                    },
                )
            })
        });
    }
    group.finish();
}

fn close(c: &mut Criterion) {
    finished_teardown(c, "close", Ending::Close);
}

fn stop_raw(c: &mut Criterion) {
    let system = actix_rt::System::new();
    let mut group = group(c, "stop_raw");
    for n in [5_000usize, 20_000, 100_000] {
        group.throughput(Throughput::Elements(n as u64));
        group.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter_custom(|iters| {
                system.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let gone: Vec<_> = (0..n).map(|_| CancellationToken::new()).collect();
                        let addrs: Vec<_> = gone.iter().map(|token| Held(token.clone()).start()).collect();
                        all(addrs.iter().enumerate().map(|(i, addr)| addr.send(Ping(i as u64)))).await;
                        let start = Instant::now();
                        all(addrs.iter().map(|addr| addr.send(Stop))).await;
                        all(gone.iter().map(|token| token.cancelled())).await;
                        total += start.elapsed();
                    }
                    total
                })
            })
        });
    }
    group.finish();
}

fn drain(c: &mut Criterion) {
    finished_teardown(c, "drain", Ending::Drain);
}

fn merge(c: &mut Criterion) {
    const N: usize = 10_000;
    let system = actix_rt::System::new();
    let mut group = group(c, "merge");
    group.throughput(Throughput::Elements(N as u64));
    let host = host(N);
    // A merge leaves its session as it was: one session per strategy serves every iteration.
    for strategy in ["hierarchical_summary", "voting"] {
        let (session, ids) = system.block_on(async {
            let session = host.open_tree(Arc::new(NullSink));
            let ids = match strategy {
                "voting" => finished_distinct(&session, N).await,
                _ => finished(&session, N, &unit_task()).await,
            };
            (session, ids)
        });
        let request = merge_request(&ids, strategy);
        group.bench_function(BenchmarkId::new(strategy, N), |b| {
            b.iter_custom(|iters| {
                system.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        session.merge(request.clone()).await.expect("merge");
                    }
                    start.elapsed()
                })
            })
        });
        system.block_on(async {
            session.close().await;
        });
    }
    group.finish();
}

/// The tree of `shape` (`wide` or `deep`) with `n` members; root first.
async fn tree(session: &Tree, shape: &str, n: usize) -> Vec<SubagentId> {
    match shape {
        "wide" => wide(session, n).await,
        _ => chain(session, n).await,
    }
}

fn terminate(c: &mut Criterion) {
    const N: usize = 10_000;
    let system = actix_rt::System::new();
    let mut group = group(c, "terminate");
    group.throughput(Throughput::Elements(N as u64));
    let host = host(N);
    for shape in ["wide", "deep"] {
        group.bench_function(BenchmarkId::new(shape, N), |b| {
            b.iter_custom(|iters| {
                let build = |s: Tree| async move {
                    let ids = finish_all(&s, tree(&s, shape, N).await, &unit_task()).await;
                    (s, ids)
                };
                timed(&system, &host, iters, build, |s, ids| async move {
                    assert_eq!(s.terminate(ids[0]).await.expect("terminate").len(), N, "every member stopped");
                    settled(&s, ids[0]).await;
                    s
                })
            })
        });
    }
    group.finish();
}

fn cancel(c: &mut Criterion) {
    const N: usize = 10_000;
    let system = actix_rt::System::new();
    let mut group = group(c, "cancel");
    group.throughput(Throughput::Elements(N as u64));
    let host = host(N);
    let task = sleeping_task();
    for shape in ["wide", "deep"] {
        // A cancel leaves the tree in place, idle: one tree serves every iteration.
        let (session, ids) = system.block_on(async {
            let session = host.open_tree(Arc::new(NullSink));
            let ids = tree(&session, shape, N).await;
            (session, ids)
        });
        group.bench_function(BenchmarkId::new(shape, N), |b| {
            b.iter_custom(|iters| {
                system.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        run_all(&session, ids.clone(), &task).await;
                        let start = Instant::now();
                        let stopped = session.cancel(ids[0]).await.expect("cancel");
                        settled(&session, ids[0]).await;
                        total += start.elapsed();
                        assert_eq!(stopped.len(), N, "every running task stopped");
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

criterion_group!(benches, close, stop_raw, drain, merge, terminate, cancel);
criterion_main!(benches);
