//! The crash loop: kills at random delays from a seeded RNG, each followed
//! by a restart with random group commit settings, a resume and the
//! invariants ([`super::driver::Driver::check_restored`]); then every task
//! must complete as scripted.

use super::driver::Driver;
use super::workload::Kind;
use super::{random_store_config, seed, Backing, Node};
use std::time::{Duration, Instant};

/// `iterations` kills at random delays, each followed by a restart, a
/// resume and the invariants; then every task must complete as scripted.
fn crash_loop(backing: Backing, iterations: usize) {
    let seed = seed();
    let kind = backing.kind();
    eprintln!("crash loop ({kind}, {iterations} kills): seed {seed} (replay with DURABLE_SEED={seed})");
    let mut rng = fastrand::Rng::with_seed(seed);
    let started = Instant::now();
    let mut node = Node::start(backing, &random_store_config(&mut rng));
    let mut driver = Driver::connect(node.tcp(), "looper");
    let mut delays = Vec::new();
    let mut restore_kills = 0;
    for round in 0..iterations {
        // New work: one or two workers of random kinds.
        for n in 0..rng.usize(1..=2) {
            let kind = match rng.u8(0..3) {
                0 => Kind::Steps { steps: rng.usize(2..=5), sleep_ms: rng.u64(50..=250) },
                1 => Kind::Nested { sleep_ms: rng.u64(100..=300) },
                _ => Kind::Mailbox { messages: 2, timeout_ms: 2_000 },
            };
            driver.add_worker(&format!("w{round}.{n}"), kind);
        }
        // Now and then right after the resume, while restored tasks start.
        let delay = Duration::from_millis(if rng.u8(0..4) == 0 { rng.u64(0..=30) } else { rng.u64(0..=600) });
        delays.push(delay);
        driver.pump_for(delay);
        node.kill9();
        driver.drain_dead();
        node.restart_with(&random_store_config(&mut rng));
        if rng.u8(0..5) == 0 {
            // Killed again while the session is being restored.
            restore_kills += 1;
            driver.start_resume(node.tcp());
            driver.pump_for(Duration::from_millis(rng.u64(0..=20)));
            node.kill9();
            driver.drain_dead();
            node.restart_with(&random_store_config(&mut rng));
        }
        driver.reconnect(node.tcp());
        driver.check_restored();
        driver.carry_on();
    }
    driver.finish(Duration::from_secs(60));
    let subagents = driver.subs.len();
    assert!(
        driver.resumes_seen >= iterations / 2,
        "only {} tasks resumed over {iterations} kills",
        driver.resumes_seen
    );
    eprintln!(
        "crash loop ({kind}, seed {seed}): {iterations} kills at {:?} ms and {restore_kills} while restoring, \
         {subagents} subagents, {} resumes, in {:?}",
        delays.iter().map(Duration::as_millis).collect::<Vec<_>>(),
        driver.resumes_seen,
        started.elapsed()
    );
}

#[test]
fn durable_sqlite_crash_loop() {
    crash_loop(Backing::sqlite(), 40);
}

#[test]
fn durable_postgres_crash_loop() {
    crash_loop(Backing::postgres(), 20);
}
