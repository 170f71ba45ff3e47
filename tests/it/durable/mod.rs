//! Restarts of the real binary on a durable store: SQLite in a temp data
//! dir per test, or PostgreSQL (a database per test, created over
//! `DATABASE_URL` and dropped after; the `postgres` tests fail, saying how
//! to start a server, when it is unset or unreachable).
//!
//! A TCP client drives scripted workloads (multi-step tasks, tasks that
//! spawn children and await them, tasks waiting on their mailbox), the
//! server is killed (SIGKILL, or SIGTERM) in the middle, restarted on the
//! same store, and the client resumes with `resume_session_id`. After every
//! restart ([`driver::Driver::check_restored`]):
//!
//! - everything the client was told still holds: a subagent whose spawn was
//!   answered (or that an event named) is listed; a terminal status told by
//!   an event or an await is the listed status, and an await answers the
//!   same status, result and error again;
//! - every request that was answered took effect: a delegated subagent is
//!   not `READY`, a delivered message reaches its subagent's result (or,
//!   delivered after its task stopped waiting, is still in its mailbox);
//! - no spawn happened twice: every name (one spawn request, or one spawn
//!   step of a task) is listed at most once;
//! - every task that was running resumes: a `resumed` event with an attempt
//!   of at least 2, higher than the last one seen for it, and it completes
//!   with the result its script defines;
//! - a step whose progress event the client saw never runs again (its
//!   checkpoint is recorded before the event is queued).
//!
//! The crash loops kill at random delays from a seeded RNG (the seed is
//! printed; `DURABLE_SEED=N` replays one) and restart with random group
//! commit settings. The HTTP tests check that SSE ids run on without a gap
//! across a reconnect with `Last-Event-ID` and restarts, and that a `/send`
//! answered 200 right before SIGKILL takes effect, once; the kill loop does
//! that many times over (`SUBAGENTD_KILL_LOOP_KILLS`, and
//! `examples/sqlite_kill_loop` for 1,000 kills), counting what is missing.
//! `DURABLE_TRACE=1` prints every line the tests read.
//!
//! Layout: this module holds what every test shares (a temp dir, the store
//! a test's servers share, a restartable node, a TCP connection read by a
//! thread, the seeds); then, by what they do:
//!
//! - `workload`, `driver`: the scripted workload and the client that runs
//!   it and checks, after each restart, what it was told;
//! - `kill`: SIGKILL in the middle of a workload, of a waiting task's
//!   message, of a session opened with a token;
//! - `crash_loop`: many kills at random delays;
//! - `http`: an HTTP session across restarts (SSE replay, `/send` frames);
//! - `kill_loop`: the SIGKILL loop over `/send`;
//! - `process`: SIGTERM, and one process per data directory;
//! - `adapter_tasks`: a command task and a model-driven task at a crash.

mod adapter_tasks;
mod crash_loop;
mod driver;
mod http;
mod kill;
mod kill_loop;
mod process;
mod workload;

use crate::e2e_support::*;
use crate::test_database::TestDatabase;
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

/// Statuses a task ends in.
const TERMINAL: [&str; 4] = ["COMPLETED", "FAILED", "CANCELLED", "TERMINATED"];

/// Config for every test: room for the crash loop's subagents.
const CONFIG: &str = "[limits]\nmax_subagents_per_session = 256\n";

// ---------------------------------------------------------------------------
// Where the state lives.

fn unique() -> u64 {
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// A directory in the temp dir, removed on drop (also when the test fails).
struct TempDir(PathBuf);

impl TempDir {
    fn new(what: &str) -> Self {
        let path = std::env::temp_dir().join(format!("subagentd-{what}-{}-{}", std::process::id(), unique()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create a temp dir");
        Self(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // A failed test's store is evidence: kept, and named.
        if std::thread::panicking() {
            eprintln!("the failed test's store is kept in {}", self.0.display());
            return;
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The store a test's servers share across restarts.
enum Backing {
    Sqlite(TempDir),
    Postgres(TestDatabase),
}

impl Backing {
    fn sqlite() -> Self {
        Self::Sqlite(TempDir::new("durable"))
    }

    fn postgres() -> Self {
        Self::Postgres(TestDatabase::create())
    }

    fn args(&self) -> Vec<String> {
        match self {
            Self::Sqlite(dir) => vec!["--data-dir".into(), dir.path().display().to_string()],
            Self::Postgres(db) => vec!["--store".into(), db.url.clone()],
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Self::Sqlite(_) => "sqlite",
            Self::Postgres(_) => "postgres",
        }
    }
}

/// A `subagentd` (TCP and HTTP) on a durable store, restartable on it.
struct Node {
    server: Server,
    config: String,
    // Dropped after the server (fields drop in order): the store outlives it.
    backing: Backing,
}

impl Node {
    fn start(backing: Backing, config: &str) -> Self {
        let server = Self::launch(&backing, config);
        Self { server, config: config.to_owned(), backing }
    }

    fn launch(backing: &Backing, config: &str) -> Server {
        let mut args: Vec<String> = ["--tcp", "127.0.0.1:0", "--http", "127.0.0.1:0"].map(String::from).into();
        args.extend(backing.args());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        // At `info` (unless the test run names a filter): a test may wait
        // for a session's end, which is logged there.
        Server::start_with(Some("export RUST_LOG=\"${RUST_LOG:-info}\""), &args, Some(config))
    }

    fn tcp(&self) -> &str {
        self.server.tcp.as_deref().expect("tcp address")
    }

    fn http(&self) -> &str {
        self.server.http.as_deref().expect("http address")
    }

    /// SIGKILL: a crash.
    fn kill9(&mut self) {
        let status = self.server.kill9();
        assert!(!status.success(), "killed, not exited: {status:?}");
    }

    /// Starts a new process on the same store (the old one must be gone).
    fn restart(&mut self) {
        self.server = Self::launch(&self.backing, &self.config);
    }

    /// [`Node::restart`] with another config.
    fn restart_with(&mut self, config: &str) {
        self.config = config.to_owned();
        self.restart();
    }
}

// ---------------------------------------------------------------------------
// A TCP connection read by a thread: waits have deadlines, and every line
// the host sent before it was killed can still be read afterwards.

struct Conn {
    writer: TcpStream,
    lines: mpsc::Receiver<String>,
}

enum Next {
    Line(Value),
    Idle,
    Closed,
}

impl Conn {
    fn connect(addr: &str) -> Self {
        let stream = TcpStream::connect(addr).expect("connect tcp");
        let _ = stream.set_nodelay(true);
        let mut reader = BufReader::new(stream.try_clone().expect("clone the stream"));
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                // A line cut off by a kill was never sent whole: never told.
                Ok(_) if line.ends_with('\n') => {
                    if tx.send(line).is_err() {
                        return;
                    }
                }
                _ => return,
            }
        });
        Self { writer: stream, lines }
    }

    /// Sends one line; `false` when the host is gone.
    fn send(&mut self, message: &Value) -> bool {
        writeln!(self.writer, "{message}").is_ok()
    }

    fn next(&self, wait: Duration) -> Next {
        match self.lines.recv_timeout(wait) {
            Ok(line) => Next::Line(crate::contract::checked(&line)),
            Err(RecvTimeoutError::Timeout) => Next::Idle,
            Err(RecvTimeoutError::Disconnected) => Next::Closed,
        }
    }
}

impl Conn {
    /// The reply to `req_id`, skipping other lines.
    fn reply(&self, req_id: &str) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next(left) {
                Next::Line(line) if line["req_id"] == req_id => return line,
                Next::Line(_) => {}
                Next::Idle => panic!("no reply to {req_id}"),
                Next::Closed => panic!("the connection closed before the reply to {req_id}"),
            }
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        // Ends the reader thread too.
        let _ = self.writer.shutdown(Shutdown::Both);
    }
}

/// With `DURABLE_TRACE` set, every line the tests read goes to stderr.
fn trace(line: &str) {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *ON.get_or_init(|| std::env::var_os("DURABLE_TRACE").is_some()) {
        eprintln!("{line}");
    }
}

fn text(value: &Value) -> String {
    value.as_str().map_or_else(|| value.to_string(), str::to_owned)
}

// ---------------------------------------------------------------------------
// Seeds and store settings of the loops.

/// The seed of a crash loop: `DURABLE_SEED`, else a random one.
fn seed() -> u64 {
    match std::env::var("DURABLE_SEED") {
        Ok(text) => text.trim().parse().expect("DURABLE_SEED is a u64"),
        Err(_) => fastrand::u64(..),
    }
}

/// [`CONFIG`] with random group commit settings: a commit delay widens the
/// window between a change and its commit (a line released early would be
/// seen), and small batches split what is recorded together.
fn random_store_config(rng: &mut fastrand::Rng) -> String {
    let delay = [0, 0, 2, 10, 25][rng.usize(0..5)];
    let batch = [1024, 1024, 1, 2, 5][rng.usize(0..5)];
    format!("{CONFIG}[store]\ncommit_delay_ms = {delay}\nbatch_max = {batch}\n")
}

// ---------------------------------------------------------------------------
// The SIGKILL loop's test (its loop is in `kill_loop`).

/// Every spawn a `/send` answered 200 for exists exactly once after a
/// SIGKILL at any point after the 200, over many kills
/// (`SUBAGENTD_KILL_LOOP_KILLS`, else [`kill_loop::KILL_LOOP_KILLS`]).
///
/// Here, not in `kill_loop`: `examples/sqlite_kill_loop` runs it by this
/// exact name.
#[test]
fn durable_sqlite_kill_loop_every_spawn_answered_200_exists_once() {
    let kills = match std::env::var("SUBAGENTD_KILL_LOOP_KILLS") {
        Ok(text) => text.trim().parse().expect("SUBAGENTD_KILL_LOOP_KILLS is a count"),
        Err(_) => kill_loop::KILL_LOOP_KILLS,
    };
    let count = kill_loop::sqlite_kill_loop(kills);
    assert_eq!(count.kills, kills);
    assert_eq!(
        (count.missing, count.duplicated, count.replies_not_once),
        (0, 0, 0),
        "every spawn answered 200 exists once, answered once: {count:?}"
    );
}
