//! The chaos test's cluster and its faults: three nodes (ids and ports kept
//! across restarts) behind HAProxy on the test's own PostgreSQL, and the
//! seeded schedule of faults (`kill -9`, SIGSTOP then SIGCONT, SIGTERM and
//! a restart, `pg_ctl restart -m immediate`), one every 3–6 s.

use super::io::try_http;
use super::postgres::Postgres;
use super::{Shared, CONFIG, IO_TIMEOUT, LOG_LEVEL, PATIENCE};
use crate::cluster::{free_port, slots_config, Haproxy};
use crate::common::{eventually_blocking, poll_until_blocking};
use crate::e2e_support::Server;
use fastrand::Rng;
use std::time::{Duration, Instant};

/// A node: its id and ports stay across restarts.
struct Node {
    pub(super) id: String,
    pub(super) http: u16,
    pub(super) tcp: u16,
    pub(super) server: Option<Server>,
    /// Every stderr line read from every run of the node.
    pub(super) log: Vec<String>,
    /// Every process the node has had.
    pub(super) pids: Vec<u32>,
}

impl Node {
    pub(super) fn start(&mut self, url: &str) {
        let (http, tcp) = (format!("127.0.0.1:{}", self.http), format!("127.0.0.1:{}", self.tcp));
        let args = ["--http", &http, "--tcp", &tcp, "--store", url, "--node-id", &self.id];
        let server = Server::start_with(Some(LOG_LEVEL), &args, Some(CONFIG));
        self.pids.push(server.pid());
        self.log.push(format!("--- {} started (pid {})", self.id, server.pid()));
        self.server = Some(server);
    }

    pub(super) fn drain(&mut self) {
        if let Some(server) = &self.server {
            self.log.extend(server.stderr.try_iter());
        }
    }

    pub(super) fn running(&mut self) -> &mut Server {
        self.server.as_mut().expect("the node runs")
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Kill9,
    Stop,
    Restart,
    PgRestart,
}

pub(super) const KINDS: [Kind; 4] = [Kind::Kill9, Kind::Stop, Kind::Restart, Kind::PgRestart];

impl Kind {
    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::Kill9 => "kill9",
            Kind::Stop => "stop",
            Kind::Restart => "restart",
            Kind::PgRestart => "pg_restart",
        }
    }
}

/// One fault injected.
pub(super) struct Fault {
    pub(super) kind: Kind,
    /// Its target (none for PostgreSQL).
    pub(super) node: Option<String>,
    pub(super) at: Instant,
    /// From the fault until its target was back (UP in HAProxy).
    pub(super) took: Duration,
}

/// Everything the test started; dropped in this order: the nodes, HAProxy,
/// PostgreSQL. A panic prints the seed and the nodes' logs.
pub(super) struct Chaos {
    pub(super) seed: u64,
    nodes: Vec<Node>,
    pub(super) haproxy: Haproxy,
    pub(super) pg: Postgres,
    /// Oddities that are not invariants (a SIGTERM that did not exit 0).
    pub(super) notes: Vec<String>,
    /// What went wrong with the nodes themselves (a SIGTERM never obeyed).
    pub(super) failures: Vec<String>,
}

impl Chaos {
    pub(super) fn start(seed: u64) -> Self {
        let pg = Postgres::start(seed);
        let nodes: Vec<Node> = (1..=3)
            .map(|n| Node {
                id: format!("n{n}"),
                http: free_port(),
                tcp: free_port(),
                server: None,
                log: Vec::new(),
                pids: Vec::new(),
            })
            .collect();
        let ports: Vec<(u16, u16)> = nodes.iter().map(|node| (node.http, node.tcp)).collect();
        let haproxy = Haproxy::start(&slots_config(&ports));
        let mut chaos = Self { seed, nodes, haproxy, pg, notes: Vec::new(), failures: Vec::new() };
        let url = chaos.pg.url.clone();
        for node in &mut chaos.nodes {
            node.start(&url);
        }
        chaos.wait_all_up();
        chaos
    }

    /// Waits until node `index` answers `/ready` with 200, and HAProxy's
    /// health checks see it UP.
    fn wait_up(&mut self, index: usize) {
        let (seed, id) = (self.seed, self.nodes[index].id.clone());
        let addr = format!("127.0.0.1:{}", self.nodes[index].http);
        eventually_blocking(&format!("seed {seed}: {id} answers /ready with 200"), PATIENCE, || {
            match try_http(&addr, "GET", "/ready", None, "", IO_TIMEOUT) {
                Ok((200, _)) => Ok(()),
                other => {
                    self.drain_logs();
                    Err(format!("{other:?}"))
                }
            }
        });
        eventually_blocking(&format!("seed {seed}: HAProxy sees {id} UP"), PATIENCE, || {
            let status = self.haproxy.status(&id);
            if status.starts_with("UP") {
                return Ok(());
            }
            self.drain_logs();
            Err(status)
        });
    }

    pub(super) fn wait_all_up(&mut self) {
        for index in 0..self.nodes.len() {
            self.wait_up(index);
        }
    }

    fn drain_logs(&mut self) {
        for node in &mut self.nodes {
            node.drain();
        }
    }

    /// Injects one fault and waits until its target is back.
    fn inject(&mut self, kind: Kind, index: usize, hold_ms: u64) {
        let url = self.pg.url.clone();
        let node = &mut self.nodes[index];
        node.drain();
        match kind {
            Kind::Kill9 => {
                node.running().kill9();
                node.drain();
                node.server = None;
                std::thread::sleep(Duration::from_millis(200 + hold_ms / 2));
                node.start(&url);
            }
            Kind::Stop => {
                node.running().signal("STOP");
                std::thread::sleep(Duration::from_millis(1000 + hold_ms));
                node.running().signal("CONT");
            }
            Kind::Restart => {
                let id = node.id.clone();
                let server = node.running();
                server.signal("TERM");
                let status = poll_until_blocking(PATIENCE, || server.child.try_wait().expect("wait for subagentd"));
                match status {
                    Ok(status) if !status.success() => {
                        self.notes.push(format!("{id} stopped with SIGTERM exited {status}"));
                    }
                    Ok(_) => {}
                    Err(_) => {
                        let threads = threads_of(server.pid());
                        self.failures.push(format!(
                            "{id} did not exit within {PATIENCE:?} of SIGTERM (killed then); its threads: {threads}"
                        ));
                        server.kill9();
                    }
                }
                node.drain();
                node.server = None;
                node.start(&url);
            }
            Kind::PgRestart => {
                let seed = self.seed;
                self.pg.restart().unwrap_or_else(|err| panic!("seed {seed}: restarting PostgreSQL: {err}"));
            }
        }
        self.wait_all_up();
        self.drain_logs();
    }

    /// The last lines of each node's log, and its warnings and errors (a
    /// line repeated at once shown once, with its count); the whole logs go
    /// to files.
    pub(super) fn dump_logs(&mut self) {
        self.drain_logs();
        for node in &self.nodes {
            let warnings: Vec<&String> =
                node.log.iter().filter(|line| line.contains(" WARN ") || line.contains(" ERROR ")).collect();
            let warnings = squeeze(&warnings);
            eprintln!("chaos: ---- node {}: warnings and errors (the last 60) ----", node.id);
            for line in &warnings[warnings.len().saturating_sub(60)..] {
                eprintln!("  {line}");
            }
            let all: Vec<&String> = node.log.iter().collect();
            let all = squeeze(&all);
            eprintln!("chaos: ---- node {}: the last 60 of {} log lines ----", node.id, node.log.len());
            for line in &all[all.len().saturating_sub(60)..] {
                eprintln!("  {line}");
            }
            let path = std::env::temp_dir().join(format!("subagentd-chaos-{}-{}.log", self.seed, node.id));
            if std::fs::write(&path, node.log.join("\n")).is_ok() {
                eprintln!("chaos: ---- node {}: its whole log is in {} ----", node.id, path.display());
            }
        }
    }

    /// Every node's last 40 log lines naming one of `sessions`.
    pub(super) fn dump_lines_about<'a>(&mut self, sessions: impl Iterator<Item = &'a str> + Clone) {
        self.drain_logs();
        for node in &self.nodes {
            let about: Vec<&String> =
                node.log.iter().filter(|line| sessions.clone().any(|session| line.contains(session))).collect();
            eprintln!(
                "chaos: ---- node {}: its last 40 of {} lines about the failing sessions ----",
                node.id,
                about.len()
            );
            for line in &about[about.len().saturating_sub(40)..] {
                eprintln!("  {line}");
            }
        }
    }

    /// What must be gone after teardown: every process started, and strings
    /// naming this run in a command line (the nodes' addresses, PostgreSQL's
    /// data dir, HAProxy's config).
    pub(super) fn trace(&self) -> (Vec<u32>, Vec<String>) {
        let mut pids: Vec<u32> = self.nodes.iter().flat_map(|node| node.pids.iter().copied()).collect();
        pids.extend(&self.pg.pids);
        pids.push(self.haproxy.child.id());
        let mut markers: Vec<String> = self
            .nodes
            .iter()
            .flat_map(|node| [format!("127.0.0.1:{}", node.http), format!("127.0.0.1:{}", node.tcp)])
            .collect();
        markers.push(self.pg.data.display().to_string());
        markers.push(self.haproxy.config.0.display().to_string());
        (pids, markers)
    }
}

impl Drop for Chaos {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.dump_logs();
            eprintln!(
                "chaos: FAILED with seed {seed}; replay: SUBAGENTD_CHAOS_SEED={seed} cargo test --release --test it chaos -- --nocapture",
                seed = self.seed
            );
        }
    }
}

/// `lines` with each run of lines saying the same (after their timestamp)
/// shown once, with how many there were.
fn squeeze(lines: &[&String]) -> Vec<String> {
    let said = |line: &str| line.split_once("] ").map_or(line, |(_, text)| text).to_owned();
    let mut out: Vec<(String, String, usize)> = Vec::new();
    for line in lines {
        match out.last_mut() {
            Some((_, text, n)) if *text == said(line) => *n += 1,
            _ => out.push(((*line).clone(), said(line), 1)),
        }
    }
    out.into_iter().map(|(line, _, n)| if n > 1 { format!("{line} (×{n}, at once)") } else { line }).collect()
}

/// Each thread of process `pid`: its name, state and where it waits.
fn threads_of(pid: u32) -> String {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten();
    let threads: Vec<String> = tasks
        .map(|task| {
            let read = |file: &str| std::fs::read_to_string(task.path().join(file)).unwrap_or_default();
            let stat = read("stat");
            let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()).unwrap_or("?");
            format!("{} {state} {}", read("comm").trim(), read("wchan").trim())
        })
        .collect();
    threads.join(", ")
}

/// Sleeps until `until`; false when the run was aborted meanwhile.
fn pause_until(until: Instant, shared: &Shared) -> bool {
    while Instant::now() < until {
        if shared.aborted() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50).min(until.saturating_duration_since(Instant::now())));
    }
    !shared.aborted()
}

/// The seeded schedule: a fault every 3–6 s until `until`, the first four
/// one of each kind.
pub(super) fn run_faults(
    chaos: &mut Chaos,
    shared: &Shared,
    rng: &mut Rng,
    started: Instant,
    until: Instant,
) -> Vec<Fault> {
    let mut first = KINDS;
    rng.shuffle(&mut first);
    let mut faults = Vec::new();
    loop {
        // Drawn whatever happens next, so a replay draws the same schedule.
        let pause = Duration::from_millis(rng.u64(3000..=6000));
        let drawn = KINDS[rng.usize(..KINDS.len())];
        let index = rng.usize(..chaos.nodes.len());
        let hold_ms = rng.u64(0..=3000);
        let kind = first.get(faults.len()).copied().unwrap_or(drawn);
        let next = Instant::now() + pause;
        if next >= until {
            pause_until(until, shared);
            break;
        }
        if !pause_until(next, shared) {
            break;
        }
        let at = Instant::now();
        chaos.inject(kind, index, hold_ms);
        let node = (kind != Kind::PgRestart).then(|| chaos.nodes[index].id.clone());
        let fault = Fault { kind, node, at, took: at.elapsed() };
        eprintln!(
            "chaos: fault {} at {:.1} s: {} {} (back after {} ms)",
            faults.len() + 1,
            at.duration_since(started).as_secs_f64(),
            kind.name(),
            fault.node.as_deref().unwrap_or("postgres"),
            fault.took.as_millis()
        );
        faults.push(fault);
    }
    faults
}
