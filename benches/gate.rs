//! A provider gate's cost per model call when no limit is hit (issue 31):
//! what every call through a route with `provider = "…"` pays before and
//! after its HTTP request.
//!
//! | bench | what one iteration does |
//! |---|---|
//! | `gate/try_acquire+finished` | takes a permit and gives it back with the reply's usage (the fast path `acquire` tries first) |
//! | `gate/acquire+finished` | the same through the async `acquire`, polled on a current-thread runtime (as a task does) |
//! | `gate/try_acquire+finished/4-threads` | four threads taking permits of one gate at once (each iteration is one call on each; two cores) |
//!
//! The gate has every limit set (`max_concurrent`, `requests_per_minute`,
//! `tokens_per_minute`), none close to being hit, so each call checks and
//! charges them all.
//!
//! Run: `cargo bench --bench gate`. With `GATE_PROFILE_CALLS=N` set it
//! takes N permits on the fast path and exits, for an instruction count:
//! `valgrind --tool=callgrind` at N and at 0, the difference over N.

use criterion::{criterion_group, Criterion, Throughput};
use std::sync::Arc;
use std::time::{Duration, Instant};
use subagent_host::adapter::provider::Gate;
use subagent_host::config::ProviderConfig;

// The allocator subagentd ships with (src/main.rs).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn gate() -> Arc<Gate> {
    Gate::new(&ProviderConfig {
        name: "bench".into(),
        max_concurrent: Some(1_000),
        requests_per_minute: Some(u32::MAX),
        tokens_per_minute: Some(u64::MAX / 4),
        estimated_tokens: Some(1_000),
        price: None,
    })
}

fn benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("gate");
    group.throughput(Throughput::Elements(1));
    let one = gate();
    group.bench_function("try_acquire+finished", |b| {
        b.iter(|| one.try_acquire(Some(1_000)).expect("no limit is hit").finished(700))
    });
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("runtime");
    let session: Arc<str> = "bench".into();
    group.bench_function("acquire+finished", |b| {
        b.iter_custom(|iterations| {
            runtime.block_on(async {
                let started = Instant::now();
                for _ in 0..iterations {
                    one.acquire(&session, Some(1_000), |_| {}).await.finished(700);
                }
                started.elapsed()
            })
        })
    });
    group.bench_function("try_acquire+finished/4-threads", |b| {
        b.iter_custom(|iterations| {
            let started = Instant::now();
            std::thread::scope(|scope| {
                for _ in 0..4 {
                    scope.spawn(|| {
                        for _ in 0..iterations {
                            one.try_acquire(Some(1_000)).expect("no limit is hit").finished(700);
                        }
                    });
                }
            });
            started.elapsed()
        })
    });
    group.finish();
}

fn profile(calls: u64) {
    let gate = gate();
    for _ in 0..calls {
        gate.try_acquire(Some(1_000)).expect("no limit is hit").finished(700);
    }
}

criterion_group! {
    name = gate_benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = benches
}

fn main() {
    if let Some(calls) = std::env::var("GATE_PROFILE_CALLS").ok().and_then(|n| n.parse().ok()) {
        return profile(calls);
    }
    gate_benches();
    Criterion::default().configure_from_args().final_summary();
}
