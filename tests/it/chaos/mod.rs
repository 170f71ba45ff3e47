//! Chaos, in the style of DBOS's crash tests and Jepsen's checkers: three
//! `subagentd` nodes behind a real HAProxy (the shipped `deploy/haproxy.cfg`)
//! on a PostgreSQL server the test starts itself (`initdb` on a free port,
//! run as the `postgres` user; never the machine's server), twenty client
//! sessions building trees (14 over HTTP + SSE, reconnecting their stream
//! with `Last-Event-ID`; 6 over NDJSON/TCP, resuming with
//! `resume_session_id`), and a seeded schedule of faults, one every 3–6 s:
//! `kill -9` of a node and its restart, SIGSTOP for 1–4 s then SIGCONT, a
//! graceful restart (SIGTERM), and `pg_ctl restart -m immediate`. The first
//! four faults are one of each kind, in seeded order; never more than one
//! node is down at a time. Clients abandon requests now and then (a `/send`
//! dropped a few milliseconds after it was written, a TCP connection
//! dropped right after a request).
//!
//! A client never sends a request that changes something twice: when it
//! cannot tell whether a spawn or a delegate was served (the node died under
//! it), it leaves that subagent alone (checked at the end all the same) and
//! starts over with a new one, each spawn under a name of its own.
//!
//! Checked at the end, once the faults stop and the cluster settles:
//!
//! - every session answers (a list within the patience);
//! - no subagent appears twice: no id listed twice, no name (each spawn has
//!   one) listed twice, every finished parent has exactly the two children
//!   its script spawns;
//! - every result a client was told is unchanged (awaited again: the same
//!   status and result);
//! - every task a delegate accepted reached a terminal state, and nothing is
//!   left running;
//! - no program of the test is left running after teardown.
//!
//! The recovery time of a fault is the time from the fault until every
//! client's next request was answered (clients ping while they wait, so a
//! session is probed every 500 ms).
//!
//! `SUBAGENTD_CHAOS_SECONDS` (default 45) is how long faults are injected
//! (the whole test takes about 15 s more); `SUBAGENTD_CHAOS_SEED` replays a
//! run's schedule (the seed is printed at the start and in every failure);
//! `SUBAGENTD_CHAOS_LOGS=1` prints the nodes' logs (and writes them whole
//! to files) and what the slowest session went through after each fault,
//! also when the run passes (a failing run prints them anyway). A longer
//! run: `cargo run --release --example chaos -- --minutes 10`.
//!
//! Layout: this module holds the settings, what every thread shares and
//! counts, and the test with its verdict; `postgres` (the test's own
//! server), `faults` (the nodes, HAProxy and the fault schedule), `io`
//! (sockets with bounded waits), `wire`, `http_wire` and `tcp_wire` (the
//! clients' transports), and `client` (the workload and its checks).

mod client;
mod faults;
mod http_wire;
mod io;
mod postgres;
mod tcp_wire;
mod wire;

use crate::common::eventually_blocking;
use client::{run_client, Report};
use fastrand::Rng;
use faults::{run_faults, Chaos, Fault, Kind, KINDS};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const CONFIG: &str = "[cluster]\nlease_ms = 2000\n[limits]\nmax_subagents_per_session = 256\n";
/// The nodes log at `info` (sessions taken, handed off, fenced): printed
/// when a run fails.
const LOG_LEVEL: &str = "export RUST_LOG=info,sqlx=warn";
const HTTP_CLIENTS: usize = 14;
const TCP_CLIENTS: usize = 6;
const DEFAULT_SECONDS: u64 = 45;
/// The longest one request may take to be served, faults or not: past it
/// the run fails.
const PATIENCE: Duration = Duration::from_secs(30);
/// How long a request that was taken waits for its reply before it counts
/// as lost (and is sent again when that is safe).
const REPLY_WAIT: Duration = Duration::from_secs(15);
/// An SSE stream silent this long while a reply is awaited is reconnected
/// (its node may be paused).
const QUIET: Duration = Duration::from_secs(2);
/// While a client waits for a reply it pings its session this often.
const PING_EVERY: Duration = Duration::from_millis(500);
/// The granularity of every socket read.
const POLL: Duration = Duration::from_millis(100);
/// The longest one HTTP exchange (or a stream's response head) may take.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest a ping's `/send` may take (one stuck on a paused node is
/// given up sooner than a request).
const PING_TIMEOUT: Duration = Duration::from_secs(1);
/// Subagents one session may spawn over the whole run, spread evenly over
/// it (past 1 024 terminated records the oldest are forgotten, by design),
/// and how far ahead of that pace a client may run.
const SPAWN_BUDGET: u64 = 850;
const SPAWN_SLACK: u64 = 60;
const TERMINAL: [&str; 4] = ["COMPLETED", "FAILED", "CANCELLED", "TERMINATED"];
/// Where a subagent whose delegate may not have been served may end up.
const SETTLED: [&str; 5] = ["READY", "COMPLETED", "FAILED", "CANCELLED", "TERMINATED"];
/// What a client reports when it stopped because another one failed.
const ABORTED: &str = "aborted: another part of the run failed";

// ---------------------------------------------------------------------------
// What all the threads share, and what a client counts.

/// What all the threads share.
struct Shared {
    seed: u64,
    /// How long faults are injected.
    seconds: u64,
    http: String,
    tcp: String,
    /// Set when the faults are over and the cluster settled: clients finish
    /// their round and check their session.
    stop: AtomicBool,
    /// Set when anything failed: everyone stops at once.
    abort: AtomicBool,
    /// Clients whose session is open.
    ready: AtomicUsize,
}

impl Shared {
    fn aborted(&self) -> bool {
        self.abort.load(Ordering::Acquire)
    }
}

/// Sets `abort` when the thread holding it panics.
struct AbortOnPanic<'a>(&'a AtomicBool);

impl Drop for AbortOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Release);
        }
    }
}

/// A client's counts.
#[derive(Default)]
struct Stats {
    /// When each request answered without an error was sent, and answered.
    answered: Vec<(Instant, Instant)>,
    /// Requests a node or HAProxy refused (never served): sent again.
    refused: u64,
    /// Requests that may or may not have been served (the node died under
    /// them).
    unknown: u64,
    /// Requests taken whose reply never came within [`REPLY_WAIT`].
    lost: u64,
    /// Streams or connections reopened.
    reconnects: u64,
    /// SSE ids that skipped (a line missed).
    gaps: u64,
    /// SSE ids read again naming another line than the first time.
    reused: Vec<String>,
    /// `404 unknown session` or `unknown_session` answers.
    not_found: u64,
    /// Requests abandoned on purpose.
    abandoned: u64,
    /// Lines that broke the SDK's wire contract.
    contract: Vec<String>,
    /// What went wrong when (the first few thousand), to explain a slow
    /// recovery.
    events: Vec<(Instant, String)>,
}

impl Stats {
    fn event(&mut self, what: impl Into<String>) {
        if self.events.len() < 5_000 {
            self.events.push((Instant::now(), what.into()));
        }
    }

    fn reconnect(&mut self, why: &str) {
        self.reconnects += 1;
        self.event(why);
    }
}

// ---------------------------------------------------------------------------
// The test and its verdict.

/// The processes (of `pids`, or any naming one of `markers`) still alive.
fn left_running(pids: &[u32], markers: &[String]) -> Vec<String> {
    let alive = |pid: &str| -> Option<String> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start().chars().next())?;
        if state == Some('Z') {
            return None;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        Some(String::from_utf8_lossy(&cmdline).replace('\0', " "))
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut found = Vec::new();
        let all: Vec<String> = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| entry.file_name().to_str().map(str::to_owned))
            .filter(|name| name.bytes().all(|b| b.is_ascii_digit()))
            .collect();
        for pid in &all {
            let Some(cmdline) = alive(pid) else { continue };
            let started = pid.parse::<u32>().is_ok_and(|pid| pids.contains(&pid));
            if markers.iter().any(|marker| cmdline.contains(marker.as_str())) {
                found.push(format!("pid {pid}{}: {cmdline}", if started { " (started by the test)" } else { "" }));
            }
        }
        if found.is_empty() || Instant::now() > deadline {
            return found;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// From `fault` until every client's next request was answered (a client
/// that sent nothing after it is left out).
fn recovery(fault: &Fault, reports: &[Report]) -> (Duration, String) {
    let next = |report: &Report| {
        let answered = report.stats.answered.iter().filter(|(sent, _)| *sent >= fault.at);
        let done = answered.map(|(_, done)| *done).min()?;
        Some((done.duration_since(fault.at), report.label.clone()))
    };
    reports.iter().filter_map(next).max().unwrap_or_default()
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|text| (*text).to_owned()))
        .unwrap_or_else(|| "a panic".to_owned())
}

#[test]
fn chaos_nodes_killed_paused_restarted_and_postgres_restarted_under_twenty_sessions_lose_nothing() {
    let seconds = std::env::var("SUBAGENTD_CHAOS_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(DEFAULT_SECONDS);
    let seed =
        std::env::var("SUBAGENTD_CHAOS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| fastrand::u64(..));
    eprintln!(
        "chaos: seed {seed}, {seconds} s of faults (replay: SUBAGENTD_CHAOS_SEED={seed} SUBAGENTD_CHAOS_SECONDS={seconds} cargo test --release --test it chaos -- --nocapture)"
    );
    let started = Instant::now();
    let mut rng = Rng::with_seed(seed);
    let mut chaos = Chaos::start(seed);
    eprintln!("chaos: PostgreSQL, 3 nodes and HAProxy up in {} ms", started.elapsed().as_millis());
    let shared = Shared {
        seed,
        seconds,
        http: chaos.haproxy.http.clone(),
        tcp: chaos.haproxy.tcp.clone(),
        stop: AtomicBool::new(false),
        abort: AtomicBool::new(false),
        ready: AtomicUsize::new(0),
    };
    let clients = HTTP_CLIENTS + TCP_CLIENTS;
    let client_seeds: Vec<u64> = (0..clients).map(|_| rng.u64(..)).collect();
    let (faults, reports, chaos_took) = std::thread::scope(|scope| {
        let shared = &shared;
        let handles: Vec<_> = client_seeds
            .iter()
            .enumerate()
            .map(|(index, &client_seed)| scope.spawn(move || run_client(index, client_seed, shared)))
            .collect();
        let _abort = AbortOnPanic(&shared.abort);
        eventually_blocking(&format!("seed {}: the {clients} sessions open", shared.seed), PATIENCE, || {
            let ready = shared.ready.load(Ordering::Acquire);
            (ready >= clients || shared.aborted()).then_some(()).ok_or(format!("{ready} open"))
        });
        let chaos_started = Instant::now();
        let faults = run_faults(&mut chaos, shared, &mut rng, started, chaos_started + Duration::from_secs(seconds));
        let chaos_took = chaos_started.elapsed();
        // Settle: every node UP, then the clients finish their round and check.
        chaos.wait_all_up();
        std::thread::sleep(Duration::from_secs(1));
        shared.stop.store(true, Ordering::Release);
        let reports: Vec<Report> = handles
            .into_iter()
            .map(|handle| {
                handle
                    .join()
                    .unwrap_or_else(|panic| Report::failed("a client", format!("panicked: {}", panic_text(&*panic))))
            })
            .collect();
        (faults, reports, chaos_took)
    });

    // The verdict.
    let mut failures: Vec<String> = chaos.failures.clone();
    for report in &reports {
        failures.extend(
            report.fatal.iter().filter(|fatal| *fatal != ABORTED).map(|fatal| format!("{}: {fatal}", report.label)),
        );
        failures.extend(report.violations.iter().cloned());
        failures.extend(report.stats.contract.iter().take(5).map(|line| format!("{}: {line}", report.label)));
    }
    let count = |kind: Kind| faults.iter().filter(|fault| fault.kind == kind).count();
    let recoveries: Vec<(Duration, String)> = faults.iter().map(|fault| recovery(fault, &reports)).collect();
    let worst = recoveries.iter().map(|(took, _)| *took).max().unwrap_or_default();
    for kind in KINDS {
        let shown: Vec<String> = faults
            .iter()
            .zip(&recoveries)
            .filter(|(fault, _)| fault.kind == kind)
            .map(|(_, (took, slowest))| format!("{} ({slowest})", took.as_millis()))
            .collect();
        eprintln!("chaos: recovery after {} in ms (slowest session): [{}]", kind.name(), shown.join(", "));
    }
    // What the slowest session went through after the fault it was slowest
    // at (after every fault, with SUBAGENTD_CHAOS_LOGS set).
    let verbose = std::env::var_os("SUBAGENTD_CHAOS_LOGS").is_some();
    let worst_fault = faults.iter().zip(&recoveries).max_by_key(|(_, (took, _))| *took);
    let explained: Vec<(&Fault, &(Duration, String))> =
        if verbose { faults.iter().zip(&recoveries).collect() } else { worst_fault.into_iter().collect() };
    for (fault, (took, slowest)) in explained {
        let report = reports.iter().find(|report| report.label == *slowest);
        let events = report.map(|report| report.stats.events.as_slice()).unwrap_or_default();
        let during: Vec<String> = events
            .iter()
            .filter(|(when, _)| *when >= fault.at && *when <= fault.at + *took)
            .map(|(when, what)| format!("+{} ms {what}", when.duration_since(fault.at).as_millis()))
            .collect();
        eprintln!(
            "chaos: the slowest session {} ms after {} {} was {slowest}: [{}]",
            took.as_millis(),
            fault.kind.name(),
            fault.node.as_deref().unwrap_or("postgres"),
            during.join("; ")
        );
    }
    for report in &reports {
        for (when, what) in report.stats.events.iter().filter(|(_, what)| what.contains("(lost)")) {
            let at = when.duration_since(started).as_secs_f64();
            eprintln!("chaos: {} (session {}) at {at:.1} s: {what}", report.label, report.session);
        }
    }
    for report in &reports {
        for reused in report.stats.reused.iter().take(5) {
            eprintln!("chaos: {}: {reused}", report.label);
        }
    }
    let total = |get: fn(&Stats) -> u64| reports.iter().map(|report| get(&report.stats)).sum::<u64>();
    eprintln!(
        "chaos: {} rounds, {} results told, {} subagents left alone (delegate not known served), requests: {} answered, {} refused, {} unknown, {} replies lost, {} reconnects, {} SSE gaps, {} SSE ids reused, {} not found, {} abandoned",
        reports.iter().map(|report| report.rounds).sum::<u64>(),
        reports.iter().map(|report| report.told).sum::<usize>(),
        reports.iter().map(|report| report.uncertain).sum::<usize>(),
        reports.iter().map(|report| report.stats.answered.len()).sum::<usize>(),
        total(|stats| stats.refused),
        total(|stats| stats.unknown),
        total(|stats| stats.lost),
        total(|stats| stats.reconnects),
        total(|stats| stats.gaps),
        reports.iter().map(|report| report.stats.reused.len()).sum::<usize>(),
        total(|stats| stats.not_found),
        total(|stats| stats.abandoned),
    );
    for note in reports.iter().flat_map(|report| report.notes.iter()).chain(&chaos.notes).take(30) {
        eprintln!("chaos: note: {note}");
    }
    if !failures.is_empty() || verbose {
        chaos.dump_logs();
    }
    if !failures.is_empty() {
        // Last, so that a shortened CI log still shows it: what the failing
        // sessions' clients saw, and every node's lines about them.
        let failing: Vec<&Report> =
            reports.iter().filter(|report| failures.iter().any(|failure| failure.contains(&report.session))).collect();
        for report in &failing {
            eprintln!("chaos: ---- {} (session {}): its client's last 40 events ----", report.label, report.session);
            for (when, what) in report.stats.events.iter().rev().take(40).rev() {
                eprintln!("  {:.2} s {what}", when.duration_since(started).as_secs_f64());
            }
        }
        chaos.dump_lines_about(failing.iter().map(|report| report.session.as_str()));
    }
    let (pids, markers) = chaos.trace();
    drop(chaos);
    for left in left_running(&pids, &markers) {
        failures.push(format!("left running after teardown: {left}"));
    }
    let checked = reports.iter().filter(|report| report.checked).count();
    eprintln!(
        "chaos: seed {seed}, {} s, faults {{kill9: {}, stop: {}, restart: {}, pg_restart: {}}}, sessions checked {checked}, worst recovery {} ms",
        chaos_took.as_secs(),
        count(Kind::Kill9),
        count(Kind::Stop),
        count(Kind::Restart),
        count(Kind::PgRestart),
        worst.as_millis()
    );
    let took = started.elapsed();
    eprintln!("chaos: the whole test took {:.1} s", took.as_secs_f64());
    assert!(
        failures.is_empty(),
        "seed {seed}: {} invariant(s) broken (replay: SUBAGENTD_CHAOS_SEED={seed} SUBAGENTD_CHAOS_SECONDS={seconds} cargo test --release --test it chaos -- --nocapture):\n{}",
        failures.len(),
        failures.iter().take(30).cloned().collect::<Vec<_>>().join("\n")
    );
    assert_eq!(checked, clients, "seed {seed}: every session was checked");
    if seconds >= 60 {
        for kind in KINDS {
            assert!(count(kind) >= 1, "seed {seed}: no {} fault in {seconds} s", kind.name());
        }
    }
    assert!(took < Duration::from_secs(seconds + 90), "seed {seed}: the test took {took:?}");
}
