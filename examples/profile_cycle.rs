//! A fixed workload for instruction-count profiling of the hot path under
//! callgrind (load-independent, unlike wall-clock benches):
//!
//! ```text
//! cargo build --release --example profile_cycle
//! valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*profile_cycle::hot*' \
//!     target/release/examples/profile_cycle session 20000
//! callgrind_annotate --inclusive=yes callgrind.out.<pid> | head -60
//! ```
//!
//! Modes: `raw` (start an actor, send, reply, stop), `session` (spawn →
//! delegate → await, the default scripted task), `fanout` (N subagents: all
//! spawned, then all delegated, then all awaited, each phase concurrent),
//! `fanout_chained` (one spawn-then-delegate future per subagent, then all
//! awaited), `rawfanout` (N raw actors, one request each), `rawfanout3` (N
//! raw actors, three phases of requests driven as `fanout` drives its
//! spawn, delegate and await, then a fourth that stops them: the same
//! driver cost per request, and each actor stopped inside the measured
//! region as a finished subagent's actor is put to sleep there, so the
//! ratio to it counts the host's work, not the driver's).
//! Divide the instruction count of `hot` by N for a per-cycle cost.

use actix::prelude::*;
use std::sync::Arc;
use subagent_host::config::Limits;
use subagent_host::protocol::wire::*;
use subagent_host::NullSink;
use subagent_host::{Host, HostConfig, Tree};

// The allocator subagentd ships with (src/main.rs), for the floor and the host alike.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "../benches/support/floor.rs"]
mod floor;
use floor::{all, Echo, Ping, Stop};

#[path = "../benches/support/tree_ops.rs"]
mod tree_ops;
use tree_ops::TreeOps;

fn spawn_request() -> SpawnRequest {
    SpawnRequest {
        agent: SubagentConfig::new("bench", "scripted"),
        parent_agent_id: Some("client_agent".to_owned()),
        root_agent_id: Some("client_agent".to_owned()),
    }
}

async fn cycle(session: &Tree) {
    let id = session.spawn(spawn_request()).await.expect("spawn").subagent_id;
    session.delegate(id, TaskDefinition::new("unit", "do the unit of work")).await.expect("delegate");
    session.await_result(id).await.expect("await");
}

/// The measured region (callgrind toggles collection on this function).
#[inline(never)]
fn hot(system: &actix_rt::SystemRunner, session: &Tree, mode: &str, n: usize) {
    system.block_on(async {
        match mode {
            "raw" => {
                for i in 0..n as u64 {
                    let addr = Echo.start();
                    addr.send(Ping(i)).await.expect("reply");
                    addr.send(Stop).await.expect("stop");
                }
            }
            "session" => {
                for _ in 0..n {
                    cycle(session).await;
                }
            }
            "rawfanout" => {
                let addrs: Vec<_> = (0..n).map(|_| Echo.start()).collect();
                all(addrs.iter().enumerate().map(|(i, a)| a.send(Ping(i as u64)))).await;
                for addr in &addrs {
                    addr.do_send(Stop);
                }
            }
            "rawfanout3" => {
                let addrs: Vec<_> = (0..n).map(|_| Echo.start()).collect();
                for _phase in 0..3 {
                    all(addrs.iter().enumerate().map(|(i, a)| a.send(Ping(i as u64)))).await;
                }
                all(addrs.iter().map(|a| a.send(Stop))).await;
            }
            "fanout" => {
                // Phases: spawn all, delegate all, await all (small futures).
                let spawned = all((0..n).map(|_| session.spawn(spawn_request()))).await;
                let ids: Vec<_> = spawned.into_iter().map(|r| r.expect("spawn").subagent_id).collect();
                let task = TaskDefinition::new("unit", "do the unit of work");
                all(ids.iter().map(|id| session.delegate(*id, task.clone()))).await;
                all(ids.iter().map(|id| session.await_result(*id))).await;
            }
            "fanout_chained" => {
                // Per subagent one future: spawn, then delegate.
                let ids = all((0..n).map(|_| async {
                    let id = session.spawn(spawn_request()).await.expect("spawn").subagent_id;
                    session.delegate(id, TaskDefinition::new("unit", "do the unit of work")).await.expect("delegate");
                    id
                }))
                .await;
                all(ids.iter().map(|id| session.await_result(*id))).await;
            }
            other => panic!("unknown mode {other}"),
        }
    });
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "session".to_owned());
    let n: usize = args.next().map_or(20_000, |v| v.parse().expect("N"));
    let system = actix_rt::System::new();
    let limits = Limits { max_subagents_per_session: n + 16, max_retained_records: n + 16, ..Default::default() };
    let host = Host::new(HostConfig { limits, ..Default::default() });
    let session = system.block_on(async {
        let session = host.open_tree(Arc::new(NullSink));
        // Warm up: first-use allocations stay out of the measured region.
        for _ in 0..8 {
            cycle(&session).await;
        }
        session
    });
    let start = std::time::Instant::now();
    hot(&system, &session, &mode, n);
    let elapsed = start.elapsed();
    eprintln!("{mode} n={n}: {:.3} µs each", elapsed.as_secs_f64() * 1e6 / n as f64);
    system.block_on(async {
        session.close().await;
    });
}
