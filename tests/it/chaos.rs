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

use crate::cluster::{free_port, slots_config, Haproxy};
use crate::e2e_support::Server;
use crate::test_database::pg_execute;
use fastrand::Rng;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
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
// A PostgreSQL server of the test's own.

/// The `bin` directory of the newest PostgreSQL under /usr/lib/postgresql.
fn postgres_bin() -> PathBuf {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin).unwrap_or_else(|| {
        panic!("the chaos test starts its own PostgreSQL: no /usr/lib/postgresql/<version>/bin/initdb (apt-get install -y postgresql)")
    })
}

/// Runs `command`; its output when it fails.
fn run(command: &mut Command) -> Result<(), String> {
    let output = command.stdin(Stdio::null()).output().map_err(|err| format!("{command:?}: {err}"))?;
    match output.status.success() {
        true => Ok(()),
        false => Err(format!(
            "{command:?}: {}\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )),
    }
}

/// A PostgreSQL server in a scratch directory owned by `postgres`, on a free
/// port; stopped (immediate) and removed when dropped.
struct Postgres {
    bin: PathBuf,
    dir: PathBuf,
    data: PathBuf,
    options: String,
    /// The URL of the nodes' database.
    url: String,
    /// Every postmaster this server has had (one per restart).
    pids: Vec<u32>,
}

impl Postgres {
    fn start(seed: u64) -> Self {
        let bin = postgres_bin();
        let dir = std::env::temp_dir().join(format!("subagentd-chaos-pg-{:016x}", fastrand::u64(..)));
        std::fs::create_dir_all(&dir).expect("the PostgreSQL scratch dir");
        let data = dir.join("data");
        let port = free_port();
        let options = format!("-p {port} -k /tmp -c listen_addresses=127.0.0.1");
        let mut pg = Self { bin, dir, data, options, url: String::new(), pids: Vec::new() };
        run(Command::new("chown").arg("postgres:postgres").arg(&pg.dir))
            .unwrap_or_else(|err| panic!("seed {seed}: the scratch dir for PostgreSQL: {err}"));
        let data_dir = pg.data.display().to_string();
        let initdb = ["-D", &data_dir, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-locale", "--no-sync"];
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(pg.bin.join("initdb")).args(initdb).current_dir(&pg.dir);
        run(&mut command).unwrap_or_else(|err| panic!("seed {seed}: initdb: {err}"));
        if let Err(err) = pg.ctl("start", None) {
            panic!("seed {seed}: pg_ctl start: {err}\n{}", pg.log_tail());
        }
        let admin = format!("postgres://postgres@127.0.0.1:{port}/postgres");
        pg_execute(&admin, "CREATE DATABASE chaos").unwrap_or_else(|err| panic!("seed {seed}: CREATE DATABASE: {err}"));
        pg.url = format!("postgres://postgres@127.0.0.1:{port}/chaos");
        pg
    }

    /// Runs `program` of the PostgreSQL install as the `postgres` user (as
    /// initdb, which refuses root).
    fn as_postgres(&self, program: &str, args: &[&str]) -> Result<(), String> {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(self.bin.join(program)).args(args).current_dir(&self.dir);
        // The postmaster outlives pg_ctl: no pipe of ours may stay open in it.
        command.stdout(Stdio::null()).stderr(Stdio::null());
        let status = command.stdin(Stdio::null()).status().map_err(|err| format!("{command:?}: {err}"))?;
        match status.success() {
            true => Ok(()),
            false => Err(format!("{command:?}: {status}")),
        }
    }

    fn ctl(&mut self, action: &str, mode: Option<&str>) -> Result<(), String> {
        let data = self.data.display().to_string();
        let log = self.dir.join("postgres.log").display().to_string();
        let mut args = vec!["-D", data.as_str(), "-l", log.as_str(), "-w", "-t", "60", "-o", self.options.as_str()];
        if let Some(mode) = mode {
            args.extend(["-m", mode]);
        }
        args.push(action);
        self.as_postgres("pg_ctl", &args)?;
        if action != "stop" {
            let pid = std::fs::read_to_string(self.data.join("postmaster.pid")).ok();
            self.pids.extend(pid.and_then(|text| text.lines().next()?.trim().parse::<u32>().ok()));
        }
        Ok(())
    }

    /// `pg_ctl restart -m immediate` (a crash and its recovery), then waits
    /// until the nodes' database answers again.
    fn restart(&mut self) -> Result<(), String> {
        self.ctl("restart", Some("immediate")).map_err(|err| format!("{err}\n{}", self.log_tail()))?;
        let deadline = Instant::now() + PATIENCE;
        loop {
            match pg_execute(&self.url, "SELECT 1") {
                Ok(()) => return Ok(()),
                Err(err) if Instant::now() > deadline => return Err(format!("PostgreSQL never came back: {err}")),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("postgres.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if let Err(err) = self.ctl("stop", Some("immediate")) {
            eprintln!("chaos: stopping the test's PostgreSQL failed: {err}");
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

// ---------------------------------------------------------------------------
// The nodes, HAProxy, and the faults.

/// A node: its id and ports stay across restarts.
struct Node {
    id: String,
    http: u16,
    tcp: u16,
    server: Option<Server>,
    /// Every stderr line read from every run of the node.
    log: Vec<String>,
    /// Every process the node has had.
    pids: Vec<u32>,
}

impl Node {
    fn start(&mut self, url: &str) {
        let (http, tcp) = (format!("127.0.0.1:{}", self.http), format!("127.0.0.1:{}", self.tcp));
        let args = ["--http", &http, "--tcp", &tcp, "--store", url, "--node-id", &self.id];
        let server = Server::start_with(Some(LOG_LEVEL), &args, Some(CONFIG));
        self.pids.push(server.pid());
        self.log.push(format!("--- {} started (pid {})", self.id, server.pid()));
        self.server = Some(server);
    }

    fn drain(&mut self) {
        if let Some(server) = &self.server {
            self.log.extend(server.stderr.try_iter());
        }
    }

    fn running(&mut self) -> &mut Server {
        self.server.as_mut().expect("the node runs")
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Kill9,
    Stop,
    Restart,
    PgRestart,
}

const KINDS: [Kind; 4] = [Kind::Kill9, Kind::Stop, Kind::Restart, Kind::PgRestart];

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Kill9 => "kill9",
            Kind::Stop => "stop",
            Kind::Restart => "restart",
            Kind::PgRestart => "pg_restart",
        }
    }
}

/// One fault injected.
struct Fault {
    kind: Kind,
    /// Its target (none for PostgreSQL).
    node: Option<String>,
    at: Instant,
    /// From the fault until its target was back (UP in HAProxy).
    took: Duration,
}

/// Everything the test started; dropped in this order: the nodes, HAProxy,
/// PostgreSQL. A panic prints the seed and the nodes' logs.
struct Chaos {
    seed: u64,
    nodes: Vec<Node>,
    haproxy: Haproxy,
    pg: Postgres,
    /// Oddities that are not invariants (a SIGTERM that did not exit 0).
    notes: Vec<String>,
    /// What went wrong with the nodes themselves (a SIGTERM never obeyed).
    failures: Vec<String>,
}

impl Chaos {
    fn start(seed: u64) -> Self {
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
        let deadline = Instant::now() + PATIENCE;
        let id = self.nodes[index].id.clone();
        let addr = format!("127.0.0.1:{}", self.nodes[index].http);
        while !matches!(try_http(&addr, "GET", "/ready", None, "", IO_TIMEOUT), Ok((200, _))) {
            self.drain_logs();
            assert!(Instant::now() < deadline, "seed {}: {id} never answered /ready with 200", self.seed);
            std::thread::sleep(Duration::from_millis(50));
        }
        loop {
            let status = self.haproxy.status(&id);
            if status.starts_with("UP") {
                return;
            }
            self.drain_logs();
            assert!(Instant::now() < deadline, "seed {}: HAProxy never saw {id} UP (it says {status:?})", self.seed);
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn wait_all_up(&mut self) {
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
                let deadline = Instant::now() + PATIENCE;
                let status = loop {
                    if let Some(status) = server.child.try_wait().expect("wait for subagentd") {
                        break Some(status);
                    }
                    if Instant::now() > deadline {
                        break None;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                };
                match status {
                    Some(status) if !status.success() => {
                        self.notes.push(format!("{id} stopped with SIGTERM exited {status}"));
                    }
                    Some(_) => {}
                    None => {
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
    fn dump_logs(&mut self) {
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
    fn dump_lines_about<'a>(&mut self, sessions: impl Iterator<Item = &'a str> + Clone) {
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
    fn trace(&self) -> (Vec<u32>, Vec<String>) {
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
fn run_faults(chaos: &mut Chaos, shared: &Shared, rng: &mut Rng, started: Instant, until: Instant) -> Vec<Fault> {
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

// ---------------------------------------------------------------------------
// Sockets with bounded waits.

fn connect(addr: &str) -> std::io::Result<TcpStream> {
    let addr: SocketAddr = addr.parse().map_err(std::io::Error::other)?;
    let socket = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    socket.set_read_timeout(Some(POLL))?;
    socket.set_write_timeout(Some(IO_TIMEOUT))?;
    socket.set_nodelay(true)?;
    Ok(socket)
}

enum Got {
    Data,
    Nothing,
    End,
}

fn read_some(socket: &mut TcpStream, into: &mut Vec<u8>) -> Got {
    let mut buffer = [0u8; 16 * 1024];
    match socket.read(&mut buffer) {
        Ok(0) => Got::End,
        Ok(n) => {
            into.extend_from_slice(&buffer[..n]);
            Got::Data
        }
        Err(err) if matches!(err.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => Got::Nothing,
        Err(err) if err.kind() == std::io::ErrorKind::Interrupted => Got::Nothing,
        Err(_) => Got::End,
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|window| window == needle)
}

/// A chunked body, decoded (what can be).
fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    while let Some(end) = find(raw, b"\r\n") {
        let size = std::str::from_utf8(&raw[..end]).ok().and_then(|line| usize::from_str_radix(line.trim(), 16).ok());
        let Some(size) = size.filter(|size| *size > 0 && raw.len() >= end + 2 + size) else { break };
        body.extend_from_slice(&raw[end + 2..end + 2 + size]);
        raw = &raw[(end + 4 + size).min(raw.len())..];
    }
    body
}

/// One HTTP/1.1 exchange, each read and write bounded: the status and the
/// body.
fn try_http(
    addr: &str,
    method: &str,
    path: &str,
    session: Option<&str>,
    body: &str,
    wait: Duration,
) -> std::io::Result<(u16, String)> {
    let mut socket = connect(addr)?;
    socket.set_read_timeout(Some(wait))?;
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/x-ndjson\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(id) = session {
        request.push_str(&format!("X-Session-Id: {id}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    socket.write_all(request.as_bytes())?;
    let mut response = Vec::new();
    socket.read_to_end(&mut response)?;
    let end = find(&response, b"\r\n\r\n").ok_or_else(|| std::io::Error::other("no response head"))?;
    let head = String::from_utf8_lossy(&response[..end]).to_ascii_lowercase();
    let status = head.split(' ').nth(1).and_then(|code| code.parse().ok());
    let status = status.ok_or_else(|| std::io::Error::other("no status"))?;
    let raw = &response[end + 4..];
    let body = match head.contains("transfer-encoding: chunked") {
        true => dechunk(raw),
        false => raw.to_vec(),
    };
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

enum Next {
    /// A message: its SSE id when it has one, and its text.
    Message(Option<u64>, String),
    /// Nothing within the wait.
    Quiet,
    /// The stream or connection ended.
    End,
}

/// An SSE stream, read with bounded waits.
struct Sse {
    socket: TcpStream,
    raw: Vec<u8>,
    body: Vec<u8>,
    chunked: bool,
    ended: bool,
}

impl Sse {
    fn open(front: &str, session: &str, after: u64) -> Result<Self, String> {
        let mut socket = connect(front).map_err(|err| err.to_string())?;
        let resume = if after > 0 { format!("Last-Event-ID: {after}\r\n") } else { String::new() };
        let request =
            format!("GET /stream HTTP/1.1\r\nHost: {front}\r\nX-Session-Id: {session}\r\n{resume}Accept: text/event-stream\r\n\r\n");
        socket.write_all(request.as_bytes()).map_err(|err| err.to_string())?;
        let deadline = Instant::now() + IO_TIMEOUT;
        let mut raw = Vec::new();
        let end = loop {
            if let Some(end) = find(&raw, b"\r\n\r\n") {
                break end;
            }
            if Instant::now() > deadline {
                return Err("no response head".into());
            }
            if let Got::End = read_some(&mut socket, &mut raw) {
                return Err("closed before its response head".into());
            }
        };
        let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
        let status: u16 = head.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or(0);
        if status != 200 {
            return Err(format!("GET /stream: {status}"));
        }
        let chunked = head.contains("transfer-encoding: chunked");
        Ok(Self { socket, raw: raw[end + 4..].to_vec(), body: Vec::new(), chunked, ended: false })
    }

    fn decode(&mut self) {
        if !self.chunked {
            self.body.append(&mut self.raw);
            return;
        }
        while let Some(end) = find(&self.raw, b"\r\n") {
            let size =
                std::str::from_utf8(&self.raw[..end]).ok().and_then(|line| usize::from_str_radix(line.trim(), 16).ok());
            match size {
                Some(0) | None => {
                    self.ended = true;
                    return;
                }
                Some(size) if self.raw.len() >= end + 2 + size + 2 => {
                    self.body.extend_from_slice(&self.raw[end + 2..end + 2 + size]);
                    self.raw.drain(..end + 2 + size + 2);
                }
                Some(_) => return,
            }
        }
    }

    fn next(&mut self, wait: Duration) -> Next {
        let deadline = Instant::now() + wait;
        loop {
            self.decode();
            if let Some(end) = find(&self.body, b"\n\n") {
                let event: Vec<u8> = self.body.drain(..end + 2).collect();
                let text = String::from_utf8_lossy(&event);
                let (mut id, mut name, mut data) = (None, None, None);
                for line in text.lines() {
                    if let Some(value) = line.strip_prefix("id: ") {
                        id = value.trim().parse().ok();
                    } else if let Some(value) = line.strip_prefix("event: ") {
                        name = Some(value.to_owned());
                    } else if let Some(value) = line.strip_prefix("data: ") {
                        data = Some(value.to_owned());
                    }
                }
                if name.as_deref() == Some("closed") {
                    self.ended = true;
                    return Next::End;
                }
                if let Some(data) = data {
                    return Next::Message(id, data);
                }
                continue;
            }
            if self.ended {
                return Next::End;
            }
            if Instant::now() >= deadline {
                return Next::Quiet;
            }
            if let Got::End = read_some(&mut self.socket, &mut self.raw) {
                self.ended = true;
            }
        }
    }
}

/// An NDJSON connection, read with bounded waits.
struct Lines {
    socket: TcpStream,
    buffer: Vec<u8>,
    ended: bool,
}

impl Lines {
    fn connect(front: &str) -> std::io::Result<Self> {
        Ok(Self { socket: connect(front)?, buffer: Vec::new(), ended: false })
    }

    fn send(&mut self, message: &Value) -> std::io::Result<()> {
        let mut line = message.to_string();
        line.push('\n');
        self.socket.write_all(line.as_bytes())
    }

    fn next(&mut self, wait: Duration) -> Next {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(end) = find(&self.buffer, b"\n") {
                let line: Vec<u8> = self.buffer.drain(..end + 1).collect();
                return Next::Message(None, String::from_utf8_lossy(&line).trim_end().to_owned());
            }
            if self.ended {
                return Next::End;
            }
            if Instant::now() >= deadline {
                return Next::Quiet;
            }
            if let Got::End = read_some(&mut self.socket, &mut self.buffer) {
                self.ended = true;
            }
        }
    }
}

// ---------------------------------------------------------------------------
// The clients' transports: HTTP + SSE and NDJSON over TCP, behind one trait.

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

/// Parses a line the host sent (checking it against the SDK's contract)
/// and counts a pong to a pending ping as an answer.
fn accept_line(stats: &mut Stats, pings: &mut HashMap<String, Instant>, text: &str) -> Value {
    let message: Value = match serde_json::from_str(text) {
        Ok(message) => message,
        Err(err) => {
            stats.contract.push(format!("a line that is not JSON ({err}): {text}"));
            return Value::Null;
        }
    };
    if let Err(err) = crate::contract::check(&message) {
        stats.contract.push(format!("{err}: {text}"));
    }
    if message["type"] == "pong" {
        if let Some(sent) = message["req_id"].as_str().and_then(|id| pings.remove(id)) {
            stats.answered.push((sent, Instant::now()));
        }
    }
    message
}

fn retryable_error(reply: &Value) -> bool {
    reply["type"] == "error" && reply["retryable"] == true
}

trait Wire {
    /// Sends `message` until a node serves it and returns its reply. When
    /// `again` is false (a request that changes something), it is never
    /// sent twice: `None` when it may or may not have been served.
    fn request(&mut self, message: Value, again: bool, shared: &Shared) -> Result<Option<Value>, String>;
    /// Sends `message` and gives up on it at once.
    fn abandon(&mut self, message: Value, rng: &mut Rng);
    fn stats(&mut self) -> &mut Stats;
    fn session(&self) -> &str;
}

#[derive(PartialEq, Eq)]
enum Posted {
    Taken,
    /// Refused before anything was kept: HAProxy had no node, or a node
    /// answered `ok: false` (moved, busy, not restorable now).
    Refused,
    /// The node may have kept it.
    Unknown,
}

/// An HTTP session through HAProxy: `POST /send`, one SSE stream
/// reconnected with `Last-Event-ID` whenever it ends or goes quiet.
struct HttpWire {
    front: String,
    id: String,
    label: String,
    stream: Option<Sse>,
    last_id: u64,
    /// A hash of each line read lately, by SSE id (a replayed id must name
    /// the same line).
    lines: BTreeMap<u64, u64>,
    n: u64,
    pings: HashMap<String, Instant>,
    stats: Stats,
}

impl HttpWire {
    fn open(front: &str, label: &str, shared: &Shared) -> Result<Self, String> {
        let deadline = Instant::now() + PATIENCE;
        let id = loop {
            if let Ok((200, body)) = try_http(front, "POST", "/session", None, "", IO_TIMEOUT) {
                let body: Value = serde_json::from_str(&body).unwrap_or_default();
                if let Some(id) = body["session_id"].as_str() {
                    break id.to_owned();
                }
            }
            if Instant::now() > deadline {
                return Err(format!("{label}: POST /session kept failing"));
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let mut wire = Self {
            front: front.to_owned(),
            id,
            label: label.to_owned(),
            stream: None,
            last_id: 0,
            lines: BTreeMap::new(),
            n: 0,
            pings: HashMap::new(),
            stats: Stats::default(),
        };
        let hello = json!({ "type": "handshake/req", "agent_id": label, "agent_caps": ["multi_agent"] });
        match wire.request(hello, false, shared)? {
            Some(reply) if reply["ok"] == true => Ok(wire),
            other => Err(format!("{label}: handshake: {other:?}")),
        }
    }

    fn post(&mut self, message: &Value, wait: Duration) -> Posted {
        let Ok((status, body)) =
            try_http(&self.front, "POST", "/send", Some(self.id.as_str()), &message.to_string(), wait)
        else {
            return Posted::Unknown;
        };
        if status == 200 {
            return Posted::Taken;
        }
        if status == 404 {
            self.stats.not_found += 1;
        }
        if body.contains("No server is available") {
            return Posted::Refused;
        }
        match serde_json::from_str::<Value>(&body) {
            Ok(reply) if reply["ok"] == false && reply["accepted"].as_u64().unwrap_or(0) == 0 => Posted::Refused,
            _ => Posted::Unknown,
        }
    }

    fn ping(&mut self) {
        self.n += 1;
        let id = format!("{}-p{}", self.label, self.n);
        let sent = Instant::now();
        if self.post(&json!({ "type": "ping", "id": id }), PING_TIMEOUT) == Posted::Taken {
            self.pings.insert(id, sent);
        }
    }

    fn ensure_stream(&mut self) -> bool {
        if self.stream.is_none() {
            self.stream = Sse::open(&self.front, &self.id, self.last_id).ok();
        }
        self.stream.is_some()
    }

    /// The reply to `req_id`, `None` when it did not come by `until`.
    fn wait_reply(&mut self, req_id: &str, until: Instant, shared: &Shared) -> Option<Value> {
        let mut heard = Instant::now();
        let mut pinged = Instant::now();
        while Instant::now() < until && !shared.aborted() {
            if self.stream.is_none() {
                if !self.ensure_stream() {
                    std::thread::sleep(POLL);
                    continue;
                }
                heard = Instant::now();
            }
            if pinged.elapsed() >= PING_EVERY {
                self.ping();
                pinged = Instant::now();
            }
            let next = self.stream.as_mut().map_or(Next::End, |stream| stream.next(POLL));
            match next {
                Next::Message(id, text) => {
                    heard = Instant::now();
                    if let Some(id) = id {
                        let hash = {
                            use std::hash::{Hash, Hasher};
                            let mut hasher = std::collections::hash_map::DefaultHasher::new();
                            text.hash(&mut hasher);
                            hasher.finish()
                        };
                        if id <= self.last_id {
                            // Seen already: a replay must be the same line.
                            if self.lines.get(&id).is_some_and(|seen| *seen != hash) {
                                self.stats
                                    .reused
                                    .push(format!("SSE id {id} (last seen {}) now names {text}", self.last_id));
                                self.stats.event(format!("SSE id {id} reused for {text}"));
                            }
                            continue;
                        }
                        if self.last_id > 0 && id > self.last_id + 1 {
                            self.stats.gaps += 1;
                            self.stats.event(format!("SSE ids skipped from {} to {id}", self.last_id));
                        }
                        self.last_id = id;
                        self.lines.insert(id, hash);
                        while self.lines.len() > 4096 {
                            self.lines.pop_first();
                        }
                    }
                    let message = accept_line(&mut self.stats, &mut self.pings, &text);
                    if message["req_id"] == req_id {
                        return Some(message);
                    }
                }
                Next::Quiet if heard.elapsed() < QUIET => {}
                Next::Quiet | Next::End => {
                    self.stream = None;
                    self.stats.reconnect("the stream ended or went quiet");
                }
            }
        }
        None
    }
}

impl Wire for HttpWire {
    fn request(&mut self, mut message: Value, again: bool, shared: &Shared) -> Result<Option<Value>, String> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if shared.aborted() {
                return Err(ABORTED.into());
            }
            if Instant::now() > deadline {
                return Err(format!("{}: session {} never served {message} within {PATIENCE:?}", self.label, self.id));
            }
            // The stream first: a reply is never missed.
            if !self.ensure_stream() {
                std::thread::sleep(POLL);
                continue;
            }
            self.n += 1;
            let req_id = format!("{}-{}", self.label, self.n);
            message["id"] = json!(req_id);
            let sent = Instant::now();
            match self.post(&message, IO_TIMEOUT) {
                Posted::Taken => {}
                Posted::Refused => {
                    self.stats.refused += 1;
                    self.stats.event("a /send refused");
                    std::thread::sleep(POLL);
                    continue;
                }
                Posted::Unknown => {
                    self.stats.unknown += 1;
                    self.stats.event("a /send failed");
                    if again {
                        std::thread::sleep(POLL);
                        continue;
                    }
                    return Ok(None);
                }
            }
            match self.wait_reply(&req_id, (Instant::now() + REPLY_WAIT).min(deadline), shared) {
                Some(reply) if again && retryable_error(&reply) => std::thread::sleep(POLL),
                Some(reply) => {
                    if reply["type"] != "error" {
                        self.stats.answered.push((sent, Instant::now()));
                    }
                    return Ok(Some(reply));
                }
                None if shared.aborted() => return Err(ABORTED.into()),
                None => {
                    self.stats.lost += 1;
                    self.stats.event(format!("no reply to {message} (lost)"));
                    if !again {
                        return Ok(None);
                    }
                }
            }
        }
    }

    fn abandon(&mut self, mut message: Value, rng: &mut Rng) {
        self.n += 1;
        message["id"] = json!(format!("{}-x{}", self.label, self.n));
        let body = message.to_string();
        if let Ok(mut socket) = connect(&self.front) {
            let request = format!(
                "POST /send HTTP/1.1\r\nHost: {}\r\nX-Session-Id: {}\r\nContent-Length: {}\r\n\r\n{body}",
                self.front,
                self.id,
                body.len()
            );
            let _ = socket.write_all(request.as_bytes());
            std::thread::sleep(Duration::from_millis(rng.u64(1..=20)));
        }
        self.stats.abandoned += 1;
    }

    fn stats(&mut self) -> &mut Stats {
        &mut self.stats
    }

    fn session(&self) -> &str {
        &self.id
    }
}

enum Waited {
    Reply(Value),
    /// The connection ended.
    Dropped,
    /// No reply within the wait.
    Lost,
}

/// A TCP session through HAProxy, resumed with `resume_session_id` on a new
/// connection whenever its connection drops.
struct TcpWire {
    front: String,
    id: String,
    label: String,
    conn: Option<Lines>,
    n: u64,
    pings: HashMap<String, Instant>,
    stats: Stats,
}

impl TcpWire {
    fn open(front: &str, label: &str) -> Result<Self, String> {
        let mut wire = Self {
            front: front.to_owned(),
            id: String::new(),
            label: label.to_owned(),
            conn: None,
            n: 0,
            pings: HashMap::new(),
            stats: Stats::default(),
        };
        let deadline = Instant::now() + PATIENCE;
        loop {
            match wire.handshake(None) {
                Ok(id) => {
                    wire.id = id;
                    return Ok(wire);
                }
                Err(err) if Instant::now() > deadline => return Err(format!("{label}: no TCP session: {err}")),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// A new connection and its handshake, resuming `resume` when given:
    /// the session's id.
    fn handshake(&mut self, resume: Option<&str>) -> Result<String, String> {
        let mut lines = Lines::connect(&self.front).map_err(|err| err.to_string())?;
        self.n += 1;
        let req_id = format!("{}-h{}", self.label, self.n);
        let mut hello =
            json!({ "type": "handshake/req", "id": req_id, "agent_id": self.label, "agent_caps": ["multi_agent"] });
        if let Some(id) = resume {
            hello["resume_session_id"] = json!(id);
        }
        lines.send(&hello).map_err(|err| err.to_string())?;
        let until = Instant::now() + IO_TIMEOUT;
        loop {
            match lines.next(until.saturating_duration_since(Instant::now())) {
                Next::Message(_, text) => {
                    let reply = accept_line(&mut self.stats, &mut self.pings, &text);
                    if reply["req_id"] != req_id.as_str() {
                        continue;
                    }
                    let id = reply["session_id"].as_str().unwrap_or_default().to_owned();
                    if reply["ok"] == true && resume.is_none_or(|resumed| resumed == id) {
                        self.conn = Some(lines);
                        return Ok(id);
                    }
                    if reply["reason"] == "unknown_session" {
                        self.stats.not_found += 1;
                    }
                    return Err(format!("handshake: {reply}"));
                }
                Next::Quiet => return Err("no handshake reply".into()),
                Next::End => return Err("the connection closed before the handshake reply".into()),
            }
        }
    }

    fn wait_reply(&mut self, req_id: &str, until: Instant, shared: &Shared) -> Waited {
        let mut pinged = Instant::now();
        while Instant::now() < until && !shared.aborted() {
            if pinged.elapsed() >= PING_EVERY {
                pinged = Instant::now();
                self.n += 1;
                let id = format!("{}-p{}", self.label, self.n);
                let ping = json!({ "type": "ping", "id": id });
                if self.conn.as_mut().is_some_and(|conn| conn.send(&ping).is_ok()) {
                    self.pings.insert(id, pinged);
                }
            }
            let next = match self.conn.as_mut() {
                Some(conn) => conn.next(POLL),
                None => return Waited::Dropped,
            };
            match next {
                Next::Message(_, text) => {
                    let message = accept_line(&mut self.stats, &mut self.pings, &text);
                    if message["req_id"] == req_id {
                        return Waited::Reply(message);
                    }
                }
                Next::Quiet => {}
                Next::End => return Waited::Dropped,
            }
        }
        Waited::Lost
    }
}

impl Wire for TcpWire {
    fn request(&mut self, mut message: Value, again: bool, shared: &Shared) -> Result<Option<Value>, String> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if shared.aborted() {
                return Err(ABORTED.into());
            }
            if Instant::now() > deadline {
                return Err(format!("{}: session {} never served {message} within {PATIENCE:?}", self.label, self.id));
            }
            if self.conn.is_none() {
                self.pings.clear();
                let id = self.id.clone();
                if let Err(err) = self.handshake(Some(&id)) {
                    self.stats.event(format!("resume failed: {err}"));
                    std::thread::sleep(POLL);
                    continue;
                }
                self.stats.reconnect("resumed");
            }
            self.n += 1;
            let req_id = format!("{}-{}", self.label, self.n);
            message["id"] = json!(req_id);
            let sent = Instant::now();
            if self.conn.as_mut().is_none_or(|conn| conn.send(&message).is_err()) {
                self.conn = None;
                self.stats.unknown += 1;
                self.stats.event("a write failed");
                if again {
                    continue;
                }
                return Ok(None);
            }
            match self.wait_reply(&req_id, (Instant::now() + REPLY_WAIT).min(deadline), shared) {
                Waited::Reply(reply) if again && retryable_error(&reply) => std::thread::sleep(POLL),
                Waited::Reply(reply) => {
                    if reply["type"] != "error" {
                        self.stats.answered.push((sent, Instant::now()));
                    }
                    return Ok(Some(reply));
                }
                Waited::Dropped | Waited::Lost if shared.aborted() => return Err(ABORTED.into()),
                Waited::Dropped => {
                    self.conn = None;
                    self.stats.unknown += 1;
                    self.stats.event("the connection dropped");
                    if !again {
                        return Ok(None);
                    }
                }
                Waited::Lost => {
                    self.conn = None;
                    self.stats.lost += 1;
                    self.stats.event(format!("no reply to {message} (lost)"));
                    if !again {
                        return Ok(None);
                    }
                }
            }
        }
    }

    /// Writes `message` and drops the connection at once (the session is
    /// resumed by the next request).
    fn abandon(&mut self, mut message: Value, _rng: &mut Rng) {
        self.n += 1;
        message["id"] = json!(format!("{}-x{}", self.label, self.n));
        if let Some(mut conn) = self.conn.take() {
            let _ = conn.send(&message);
        }
        self.stats.abandoned += 1;
    }

    fn stats(&mut self) -> &mut Stats {
        &mut self.stats
    }

    fn session(&self) -> &str {
        &self.id
    }
}

// ---------------------------------------------------------------------------
// The workload and its checks.

/// A result a client was told.
struct Told {
    status: Value,
    result: Value,
}

enum Delegated {
    Accepted,
    /// May or may not have been served: the subagent is left alone.
    Unknown,
    Refused,
}

struct Client<W: Wire> {
    wire: W,
    label: String,
    rng: Rng,
    rounds: u64,
    /// Every result told, by subagent id (its status updated when the
    /// client terminates it).
    told: BTreeMap<String, Told>,
    /// Parents whose result (with their two children) was told.
    parents: BTreeSet<String>,
    /// Every subagent whose task a delegate accepted.
    accepted: BTreeSet<String>,
    /// Subagents whose delegate may or may not have been served.
    uncertain: BTreeSet<String>,
    /// Subagents not terminated, at most (the session's quota is 256).
    live: usize,
    /// Spawns sent (children and abandoned ones included).
    spawned: u64,
    notes: Vec<String>,
    violations: Vec<String>,
}

/// `steps` progress steps with short sleeps, then `{"token": token}`.
fn step_script(token: &str, rng: &mut Rng) -> Value {
    let mut script = Vec::new();
    for n in 0..rng.usize(2..=5) {
        script.push(json!({ "progress": format!("s{n}") }));
        script.push(json!({ "sleep_ms": rng.u64(50..=300) }));
    }
    script.push(json!({ "return": { "token": token } }));
    Value::Array(script)
}

/// A parent that spawns children `NAME-a` and `NAME-b`, awaits them and
/// returns `{"token": NAME}` (with `children` added by the adapter).
fn tree_script(name: &str, rng: &mut Rng) -> Value {
    let mut child = |suffix: &str| {
        let child_name = format!("{name}-{suffix}");
        let script =
            json!([{ "progress": "c" }, { "sleep_ms": rng.u64(100..=400) }, { "return": { "child": child_name } }]);
        let task = json!({ "name": "c", "instruction": "c", "metadata": { "script": script } });
        json!({ "spawn": { "agent": { "name": child_name, "model": "scripted" }, "task": task } })
    };
    let (a, b) = (child("a"), child("b"));
    json!([{ "progress": "p" }, a, b, { "await_children": {} }, { "return": { "token": name } }])
}

impl<W: Wire> Client<W> {
    fn new(wire: W, label: &str, seed: u64) -> Self {
        Self {
            wire,
            label: label.to_owned(),
            rng: Rng::with_seed(seed),
            rounds: 0,
            told: BTreeMap::new(),
            parents: BTreeSet::new(),
            accepted: BTreeSet::new(),
            uncertain: BTreeSet::new(),
            live: 0,
            spawned: 0,
            notes: Vec::new(),
            violations: Vec::new(),
        }
    }

    fn note(&mut self, what: String) {
        if self.notes.len() < 20 {
            self.notes.push(format!("{}: {what}", self.label));
        }
    }

    /// The new subagent's id; `None` when the spawn may or may not have
    /// been served, or failed.
    fn spawn(&mut self, name: &str, shared: &Shared) -> Result<Option<String>, String> {
        let spawn = json!({ "type": "SUBAGENT_SPAWN_REQ", "agent": { "name": name, "model": "scripted" } });
        let reply = self.wire.request(spawn, false, shared)?;
        self.live += 1;
        self.spawned += 1;
        let id = reply.as_ref().and_then(|reply| reply["subagent_id"].as_str().map(str::to_owned));
        if let (None, Some(reply)) = (&id, &reply) {
            self.note(format!("spawn {name}: {reply}"));
        }
        Ok(id)
    }

    fn delegate(&mut self, id: &str, script: Value, shared: &Shared) -> Result<Delegated, String> {
        let task = json!({ "name": "t", "instruction": "run", "metadata": { "script": script } });
        let delegate = json!({ "type": "SUBAGENT_DELEGATE_REQ", "subagent_id": id, "task": task });
        Ok(match self.wire.request(delegate, false, shared)? {
            None => Delegated::Unknown,
            Some(reply) if reply["accepted"] == true => Delegated::Accepted,
            Some(reply) if reply["type"] == "error" => {
                self.note(format!("delegate to {id}: {reply}"));
                Delegated::Unknown
            }
            Some(reply) => {
                self.note(format!("a delegate to a fresh subagent {id} was refused: {reply}"));
                Delegated::Refused
            }
        })
    }

    /// Awaits `id` until its status is one of `wanted` (or an error, or
    /// `within` passed): the last answer.
    fn await_until(&mut self, id: &str, wanted: &[&str], within: Duration, shared: &Shared) -> Result<Value, String> {
        let deadline = Instant::now() + within;
        loop {
            let ask = json!({ "type": "SUBAGENT_AWAIT_REQ", "subagent_id": id });
            let answer = self.wire.request(ask, true, shared)?.unwrap_or_default();
            let status = answer["status"].as_str().unwrap_or_default();
            if answer["type"] == "error" || wanted.contains(&status) || Instant::now() > deadline {
                return Ok(answer);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn terminate(&mut self, id: &str, shared: &Shared) -> Result<(), String> {
        let terminate = json!({ "type": "SUBAGENT_TERMINATE_REQ", "subagent_id": id });
        let reply = self.wire.request(terminate, true, shared)?.unwrap_or_default();
        if reply["event"] == "terminated" {
            if let Some(told) = self.told.get_mut(id) {
                told.status = json!("TERMINATED");
            }
            let stopped = if self.parents.contains(id) { 3 } else { 1 };
            self.live = self.live.saturating_sub(stopped);
        } else {
            self.note(format!("terminate {id}: {reply}"));
        }
        Ok(())
    }

    /// What a finished task should have returned; a parent with more than
    /// the two children its script spawns is a subagent spawned twice.
    fn check_outcome(&mut self, id: &str, name: &str, tree: bool, answer: &Value) {
        let result = &answer["result"];
        if answer["status"] != "COMPLETED" || result["token"] != name {
            self.note(format!("{id} ({name}) ended otherwise than its script says: {answer}"));
            return;
        }
        if !tree {
            return;
        }
        let children = result["children"].as_object().map_or(0, |children| children.len());
        let text = result["children"].to_string();
        for suffix in ["a", "b"] {
            let seen = text.matches(&format!("\"{name}-{suffix}\"")).count();
            if seen > 1 {
                self.violations.push(format!(
                    "{}: child {name}-{suffix} of {id} appears {seen} times in its result: {result}",
                    self.label
                ));
            }
        }
        if children > 2 {
            self.violations.push(format!(
                "{}: parent {id} ({name}) has {children} children, its script spawns two: {result}",
                self.label
            ));
        } else if children < 2 {
            self.note(format!("parent {id} ({name}) has {children} children: {result}"));
        }
    }

    /// Sends a request and gives up on it at once: a list, or a spawn under
    /// a name of its own (listed once at most).
    fn abandon(&mut self, round: u64) {
        let message = if self.rng.bool() {
            json!({ "type": "SUBAGENT_LIST_REQ" })
        } else {
            self.live += 1;
            self.spawned += 1;
            let name = format!("{}-r{round}x", self.label);
            json!({ "type": "SUBAGENT_SPAWN_REQ", "agent": { "name": name, "model": "scripted" } })
        };
        self.wire.abandon(message, &mut self.rng);
    }

    /// One round: a subagent (or a parent with two children) spawned, a
    /// task delegated and awaited, the subagent often terminated after.
    fn round(&mut self, shared: &Shared) -> Result<(), String> {
        self.rounds += 1;
        let round = self.rounds;
        let pick = self.rng.u32(0..100);
        if pick < 8 {
            self.abandon(round);
            return Ok(());
        }
        let tree = pick >= 72;
        let started = Instant::now();
        let mut attempt = 0;
        loop {
            if started.elapsed() > 2 * PATIENCE {
                return Err(format!("{}: round {round} got no task through in {:?}", self.label, 2 * PATIENCE));
            }
            attempt += 1;
            let name = format!("{}-r{round}{}{attempt}", self.label, if tree { "p" } else { "s" });
            let Some(id) = self.spawn(&name, shared)? else { continue };
            let script = if tree { tree_script(&name, &mut self.rng) } else { step_script(&name, &mut self.rng) };
            match self.delegate(&id, script, shared)? {
                Delegated::Accepted => {
                    self.accepted.insert(id.clone());
                }
                Delegated::Unknown => {
                    self.uncertain.insert(id);
                    continue;
                }
                Delegated::Refused => continue,
            }
            let answer = self.await_until(&id, &TERMINAL, PATIENCE, shared)?;
            if !TERMINAL.contains(&answer["status"].as_str().unwrap_or_default()) {
                return Err(format!("{}: the accepted task of {id} ({name}) never ended: {answer}", self.label));
            }
            self.check_outcome(&id, &name, tree, &answer);
            self.told.insert(id.clone(), Told { status: answer["status"].clone(), result: answer["result"].clone() });
            if tree {
                self.parents.insert(id.clone());
                self.live += 2;
                self.spawned += 2;
            }
            if self.rng.u32(0..100) < 70 || self.live > 150 {
                self.terminate(&id, shared)?;
            }
            return Ok(());
        }
    }

    fn list(&mut self, shared: &Shared) -> Result<Vec<Value>, String> {
        let reply = self.wire.request(json!({ "type": "SUBAGENT_LIST_REQ" }), true, shared)?.unwrap_or_default();
        reply["subagents"].as_array().cloned().ok_or_else(|| format!("not a list: {reply}"))
    }

    /// The invariants, on this session; false when it did not answer.
    fn verify(&mut self, shared: &Shared) -> bool {
        let (label, session) = (self.label.clone(), self.wire.session().to_owned());
        let rows = match self.list(shared) {
            Ok(rows) => rows,
            Err(err) => {
                self.violations.push(format!("{label}: session {session} never answered a list: {err}"));
                return false;
            }
        };
        // No subagent twice.
        let mut ids: BTreeMap<&str, usize> = BTreeMap::new();
        let mut names: BTreeMap<&str, usize> = BTreeMap::new();
        let mut children: BTreeMap<&str, usize> = BTreeMap::new();
        for row in &rows {
            *ids.entry(row["subagent_id"].as_str().unwrap_or_default()).or_default() += 1;
            *names.entry(row["name"].as_str().unwrap_or_default()).or_default() += 1;
            if let Some(parent) = row["parent_agent_id"].as_str() {
                *children.entry(parent).or_default() += 1;
            }
        }
        for (id, n) in ids.iter().filter(|(_, n)| **n > 1) {
            self.violations.push(format!("{label}: subagent {id} listed {n} times in session {session}"));
        }
        for (name, n) in names.iter().filter(|(_, n)| **n > 1) {
            self.violations.push(format!("{label}: {n} subagents named {name} (spawned once) in session {session}"));
        }
        for parent in &self.parents {
            let n = children.get(parent.as_str()).copied().unwrap_or(0);
            if n != 2 {
                self.violations
                    .push(format!("{label}: parent {parent} has {n} children listed, its script spawns two"));
            }
        }
        // Every result told is unchanged.
        let told: Vec<(String, Value, Value)> =
            self.told.iter().map(|(id, told)| (id.clone(), told.status.clone(), told.result.clone())).collect();
        for (id, status, result) in &told {
            match self.await_until(id, &TERMINAL, PATIENCE, shared) {
                Ok(answer) if answer["status"] == *status && answer["result"] == *result => {}
                Ok(answer) => self
                    .violations
                    .push(format!("{label}: the result of {id} changed: told {status} {result}, now {answer}")),
                Err(err) => {
                    self.violations.push(format!("{label}: session {session} stopped answering: {err}"));
                    return false;
                }
            }
        }
        // Every accepted task reached a terminal state; no task is left
        // running (a delegate that may have been served included).
        let mut pending: Vec<(String, bool)> =
            self.accepted.iter().filter(|id| !self.told.contains_key(*id)).map(|id| (id.clone(), true)).collect();
        pending.extend(self.uncertain.iter().map(|id| (id.clone(), false)));
        for (id, accepted) in pending {
            let wanted: &[&str] = if accepted { &TERMINAL } else { &SETTLED };
            match self.await_until(&id, wanted, PATIENCE, shared) {
                Ok(answer) if wanted.contains(&answer["status"].as_str().unwrap_or_default()) => {}
                Ok(answer) => self.violations.push(format!("{label}: the task of {id} never ended: {answer}")),
                Err(err) => {
                    self.violations.push(format!("{label}: session {session} stopped answering: {err}"));
                    return false;
                }
            }
        }
        match self.list(shared) {
            Ok(rows) => {
                for row in rows.iter().filter(|row| row["status"] == "RUNNING" || row["status"] == "WAITING") {
                    self.violations.push(format!("{label}: still running once every task was awaited: {row}"));
                }
                true
            }
            Err(err) => {
                self.violations.push(format!("{label}: session {session} stopped answering: {err}"));
                false
            }
        }
    }
}

/// What a client thread hands back.
struct Report {
    label: String,
    session: String,
    fatal: Option<String>,
    violations: Vec<String>,
    notes: Vec<String>,
    stats: Stats,
    /// Its session answered the final checks.
    checked: bool,
    rounds: u64,
    told: usize,
    uncertain: usize,
}

impl Report {
    fn failed(label: &str, fatal: String) -> Self {
        Self {
            label: label.to_owned(),
            session: String::new(),
            fatal: Some(fatal),
            violations: Vec::new(),
            notes: Vec::new(),
            stats: Stats::default(),
            checked: false,
            rounds: 0,
            told: 0,
            uncertain: 0,
        }
    }
}

fn drive<W: Wire>(mut client: Client<W>, shared: &Shared) -> Report {
    shared.ready.fetch_add(1, Ordering::AcqRel);
    let began = Instant::now();
    let mut fatal = None;
    while !shared.stop.load(Ordering::Acquire) && !shared.aborted() {
        // Spawns at the pace that keeps every record of the run.
        let pace = SPAWN_BUDGET * began.elapsed().as_millis() as u64 / (shared.seconds * 1000).max(1);
        if client.spawned >= SPAWN_SLACK + pace {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        if let Err(err) = client.round(shared) {
            fatal = Some(err);
            break;
        }
        std::thread::sleep(Duration::from_millis(client.rng.u64(50..=250)));
    }
    if fatal.as_deref().is_some_and(|fatal| fatal != ABORTED) {
        shared.abort.store(true, Ordering::Release);
    }
    let checked = fatal.is_none() && !shared.aborted() && client.verify(shared);
    Report {
        label: client.label.clone(),
        session: client.wire.session().to_owned(),
        fatal,
        violations: std::mem::take(&mut client.violations),
        notes: std::mem::take(&mut client.notes),
        rounds: client.rounds,
        told: client.told.len(),
        uncertain: client.uncertain.len(),
        stats: std::mem::take(client.wire.stats()),
        checked,
    }
}

fn run_client(index: usize, seed: u64, shared: &Shared) -> Report {
    let _abort = AbortOnPanic(&shared.abort);
    let opened = if index < HTTP_CLIENTS {
        let label = format!("h{index}");
        HttpWire::open(&shared.http, &label, shared).map(|wire| drive(Client::new(wire, &label, seed), shared))
    } else {
        let label = format!("t{index}");
        TcpWire::open(&shared.tcp, &label).map(|wire| drive(Client::new(wire, &label, seed), shared))
    };
    opened.unwrap_or_else(|err| {
        shared.abort.store(true, Ordering::Release);
        Report::failed(&format!("client {index}"), err)
    })
}

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
        let deadline = Instant::now() + PATIENCE;
        while shared.ready.load(Ordering::Acquire) < clients && !shared.aborted() {
            assert!(Instant::now() < deadline, "seed {}: the {clients} sessions never all opened", shared.seed);
            std::thread::sleep(Duration::from_millis(20));
        }
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
