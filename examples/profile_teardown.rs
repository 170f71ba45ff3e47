//! A fixed teardown workload for instruction-count profiling under callgrind
//! (load-independent, unlike wall-clock benches): the session is built first,
//! then only the measured call runs inside `hot`:
//!
//! ```text
//! cargo build --release --example profile_teardown
//! valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*profile_teardown::hot*' \
//!     target/release/examples/profile_teardown close 10000
//! callgrind_annotate --inclusive=yes callgrind.out.<pid> | head -60
//! ```
//!
//! Modes (N subagents; every one has finished a task unless said otherwise):
//! `close` (N top level, then `close`), `drain` (`drain` of the same),
//! `drain_busy` (`drain` of N top level whose tasks all still sleep, for
//! the fourth argument in ms, default 2 000: longer than building the
//! session takes, under callgrind too; the wall time includes what is left
//! of the sleep),
//! `merge` (one `hierarchical_summary` merge of all N), `merge_voting`
//! (`voting`, every result different), `terminate_wide` (one parent, N − 1
//! children, terminate the parent), `terminate_deep` (a chain of N,
//! terminate its root), `cancel_wide` / `cancel_deep` (the same shapes, every
//! task running, cancel the root), `cancel_capped` (`cancel_wide` with
//! `max_running_per_session` = 100: all but 100 tasks wait in the queue).
//! Two more are not teardown but "linear everywhere" all the same:
//! `wake_deep` (a chain of N that never ran a task; the default task is
//! delegated to every member, waking each, and awaited) and
//! `forget_children` (one parent, N − 1 finished children, terminated one
//! by one: each is forgotten past `max_retained_records`, out of a parent
//! that stays).
//! A third argument sets `max_retained_records` (default: the shipped 1 024).
//! Divide the instruction count of `hot` by N for a per-subagent cost.

use std::sync::Arc;
use std::time::Instant;
use subagent_host::config::Limits;
use subagent_host::NullSink;
use subagent_host::{Host, HostConfig, SubagentId, Tree};

// The allocator subagentd ships with (src/main.rs).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "../benches/support/floor.rs"]
#[allow(dead_code)]
mod floor;
use floor::all;
#[path = "../benches/support/teardown.rs"]
mod teardown;
use teardown::*;

#[path = "../benches/support/tree_ops.rs"]
mod tree_ops;
use tree_ops::TreeOps;

/// The measured region (callgrind toggles collection on this function).
#[inline(never)]
fn hot(system: &actix_rt::SystemRunner, session: &Tree, mode: &str, ids: &[SubagentId]) -> usize {
    system.block_on(async {
        match mode {
            "close" => session.close().await.len(),
            "drain" | "drain_busy" => session.drain(std::time::Duration::from_secs(10)).await.len(),
            "merge" | "merge_voting" => {
                let strategy = if mode == "merge" { "hierarchical_summary" } else { "voting" };
                let merged = session.merge(merge_request(ids, strategy)).await.expect("merge");
                merged.merged_result.len()
            }
            "terminate_wide" | "terminate_deep" => {
                let stopped = session.terminate(ids[0]).await.expect("terminate").len();
                settled(session, ids[0]).await;
                stopped
            }
            "cancel_wide" | "cancel_deep" | "cancel_capped" => {
                let stopped = session.cancel(ids[0]).await.expect("cancel").len();
                settled(session, ids[0]).await;
                stopped
            }
            "wake_deep" => finish_all(session, ids.to_vec(), &unit_task()).await.len(),
            "forget_children" => {
                for child in &ids[1..] {
                    session.terminate(*child).await.expect("terminate");
                }
                settled(session, ids[0]).await;
                ids.len() - 1
            }
            other => panic!("unknown mode {other}"),
        }
    })
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "close".to_owned());
    let n: usize = args.next().map_or(10_000, |v| v.parse().expect("N"));
    let retained: usize = args.next().map_or(Limits::default().max_retained_records, |v| v.parse().expect("retained"));
    let sleep_ms: u64 = args.next().map_or(2_000, |v| v.parse().expect("sleep ms"));
    let system = actix_rt::System::new();
    let mut limits = teardown_limits(n, retained);
    if mode == "cancel_capped" {
        limits.max_running_per_session = 100;
    }
    let host = Host::new(HostConfig { limits, ..Default::default() });
    let (session, ids) = system.block_on(async {
        let session = host.open_tree(Arc::new(NullSink));
        let ids = match mode.as_str() {
            "close" | "drain" | "merge" => finished(&session, n, &unit_task()).await,
            "merge_voting" => finished_distinct(&session, n).await,
            "drain_busy" => {
                let spawned = all((0..n).map(|_| session.spawn(spawn_request(None)))).await;
                let ids = spawned.into_iter().map(|r| r.expect("spawn").subagent_id).collect();
                run_all(&session, ids, &sleeping_for(sleep_ms)).await
            }
            "terminate_wide" => finish_all(&session, wide(&session, n).await, &unit_task()).await,
            "terminate_deep" => finish_all(&session, chain(&session, n).await, &unit_task()).await,
            "cancel_wide" | "cancel_capped" => run_all(&session, wide(&session, n).await, &sleeping_task()).await,
            "cancel_deep" => run_all(&session, chain(&session, n).await, &sleeping_task()).await,
            "wake_deep" => chain(&session, n).await,
            "forget_children" => finish_all(&session, wide(&session, n).await, &unit_task()).await,
            other => panic!("unknown mode {other}"),
        };
        (session, ids)
    });
    let start = Instant::now();
    let count = hot(&system, &session, &mode, &ids);
    let elapsed = start.elapsed();
    eprintln!(
        "{mode} n={n} retained={retained}: {count} out, {:.3} ms, {:.3} µs each",
        elapsed.as_secs_f64() * 1e3,
        elapsed.as_secs_f64() * 1e6 / n as f64
    );
    system.block_on(async {
        session.close().await;
    });
}
