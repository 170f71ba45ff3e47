//! The one way tests start the host binary: `subagentd serve` with its
//! arguments, a config file (removed on drop) and its stderr read by a
//! thread ([`Server`], or [`command`] for a test that wires the process
//! itself), and `subagentd mcp` over stdio ([`McpStdio`]); each killed when
//! dropped. The binary is `SUBAGENTD_TEST_BIN` when set, else cargo's.

use serde_json::Value;
use std::io::{BufRead, BufReader, Lines, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Instant;

use super::{health_sessions, wait_health_sessions, wait_health_streams, PATIENCE};
use crate::common::eventually_blocking;

/// A running `subagentd`.
pub struct Server {
    pub child: Child,
    pub tcp: Option<String>,
    pub http: Option<String>,
    pub metrics: Option<String>,
    pub stderr: mpsc::Receiver<String>,
    _config: Option<tempfile_lite::TempFile>,
}

/// A config file that is removed on drop.
pub mod tempfile_lite {
    /// A file in the temp dir, removed on drop.
    pub struct TempFile(pub std::path::PathBuf);
    impl TempFile {
        pub fn with(text: &str) -> Self {
            let path =
                std::env::temp_dir().join(format!("subagentd-test-{}-{}.toml", std::process::id(), fastrand_name()));
            std::fs::write(&path, text).expect("write config");
            Self(path)
        }
    }
    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    fn fastrand_name() -> String {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        format!("{}-{:?}", N.fetch_add(1, Ordering::Relaxed), std::time::SystemTime::now())
            .replace(|c: char| !c.is_ascii_alphanumeric(), "")
    }
}

/// The binary under test: `SUBAGENTD_TEST_BIN` when set (a copy kept while
/// the tree is rebuilt, say), else the one cargo built.
pub fn binary() -> PathBuf {
    std::env::var_os("SUBAGENTD_TEST_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_subagentd").into()).into()
}

pub fn command(args: &[&str], config: Option<&tempfile_lite::TempFile>) -> Command {
    let mut cmd = Command::new(binary());
    cmd.arg("serve").args(args);
    memory_unless_named(&mut cmd, args);
    finish_command(cmd, config)
}

// Tests that do not name a store run on the memory store: the default
// (SQLite under ./subagentd-data) takes one process per directory.
fn memory_unless_named(cmd: &mut Command, args: &[&str]) {
    if !args.iter().any(|arg| *arg == "--store" || *arg == "--data-dir") {
        cmd.args(["--store", "memory"]);
    }
}

/// `subagentd serve ARGS` started by `bash -c "PRELUDE; exec subagentd …"`,
/// e.g. with `ulimit -n 40` as the prelude.
pub fn shell_command(prelude: &str, args: &[&str], config: Option<&tempfile_lite::TempFile>) -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg("-c").arg(format!("{prelude}; exec \"$0\" \"$@\"")).arg(binary());
    cmd.arg("serve").args(args);
    memory_unless_named(&mut cmd, args);
    finish_command(cmd, config)
}

fn finish_command(mut cmd: Command, config: Option<&tempfile_lite::TempFile>) -> Command {
    if let Some(config) = config {
        cmd.arg("--config").arg(&config.0);
    }
    // The test's own `RUST_LOG` is not the server's; `SUBAGENTD_TEST_RUST_LOG` is.
    match std::env::var_os("SUBAGENTD_TEST_RUST_LOG") {
        Some(filter) => cmd.env("RUST_LOG", filter),
        None => cmd.env_remove("RUST_LOG"),
    };
    cmd
}

/// Forwards every stderr line of `child` to a channel (and keeps draining).
pub fn drain_stderr(child: &mut Child) -> mpsc::Receiver<String> {
    let stderr = child.stderr.take().expect("stderr piped");
    let (tx, rx) = mpsc::channel();
    let pid = child.id();
    // `SUBAGENTD_TEST_STDERR=FILE` keeps every server's log (its filter:
    // `SUBAGENTD_TEST_RUST_LOG`).
    let mut copy = std::env::var_os("SUBAGENTD_TEST_STDERR")
        .and_then(|path| std::fs::OpenOptions::new().create(true).append(true).open(path).ok());
    std::thread::spawn(move || {
        // Read as bytes: a line that is not UTF-8 (a log line cut by the
        // pipe's buffer, say) is kept, lossily, rather than ending the drain.
        let mut reader = BufReader::new(stderr);
        let mut bytes = Vec::new();
        loop {
            bytes.clear();
            match reader.read_until(b'\n', &mut bytes) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let line = String::from_utf8_lossy(&bytes).trim_end_matches(['\n', '\r']).to_owned();
            if let Some(file) = copy.as_mut() {
                use std::io::Write;
                let _ = writeln!(file, "[{pid}] {line}");
            }
            if tx.send(line).is_err() {
                // Keep draining so the child never blocks on a full pipe.
                continue;
            }
        }
    });
    rx
}

impl Server {
    /// Starts `subagentd serve ARGS` (with a config when given) and waits
    /// for the addresses it reports.
    pub fn start(args: &[&str], config: Option<&str>) -> Self {
        Self::start_with(None, args, config)
    }

    /// [`Server::start`], run through `bash -c "PRELUDE; exec subagentd …"`
    /// when a prelude is given.
    pub fn start_with(prelude: Option<&str>, args: &[&str], config: Option<&str>) -> Self {
        let config = config.map(tempfile_lite::TempFile::with);
        let mut cmd = match prelude {
            Some(prelude) => shell_command(prelude, args, config.as_ref()),
            None => command(args, config.as_ref()),
        };
        let mut child =
            cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("start subagentd");
        let stderr = drain_stderr(&mut child);
        let want_tcp = args.contains(&"--tcp");
        let want_http = args.contains(&"--http");
        let want_metrics = args.contains(&"--metrics");
        let (mut tcp, mut http, mut metrics) = (None, None, None);
        let deadline = Instant::now() + PATIENCE;
        let mut said = Vec::new();
        while (want_tcp && tcp.is_none()) || (want_http && http.is_none()) || (want_metrics && metrics.is_none()) {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(line) = stderr.recv_timeout(left) else {
                panic!("subagentd {args:?} did not report its addresses; it said: {said:#?}")
            };
            said.push(line.clone());
            if let Some(addr) = line.strip_prefix("subagentd: tcp listening on ") {
                tcp = Some(addr.to_owned());
            }
            if let Some(addr) = line.strip_prefix("subagentd: http listening on ") {
                http = Some(addr.to_owned());
            }
            if let Some(addr) = line.strip_prefix("subagentd: metrics listening on ") {
                metrics = Some(addr.to_owned());
            }
        }
        Self { child, tcp, http, metrics, stderr, _config: config }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGKILL (no chance to clean up: a crash) and waits for the exit.
    pub fn kill9(&mut self) -> ExitStatus {
        // `Child::kill` is SIGKILL, sent at once (no `kill` process to start).
        self.child.kill().expect("SIGKILL subagentd");
        wait(&mut self.child)
    }

    /// Sends signal `name` (`STOP`, `CONT` …) without waiting.
    pub fn signal(&self, name: &str) {
        signal(&self.child, name);
    }

    /// Sends SIGTERM and waits for the exit.
    pub fn terminate(&mut self) -> ExitStatus {
        signal(&self.child, "TERM");
        wait(&mut self.child)
    }

    /// `GET /health`'s session count.
    pub fn sessions(&self) -> u64 {
        health_sessions(self.http.as_deref().expect("http"))
    }

    /// Waits until `/health` reports `n` attached streams.
    pub fn wait_streams(&self, n: u64) {
        wait_health_streams(self.http.as_deref().expect("http"), n)
    }

    /// Waits for a stderr line for which `wanted` holds, and returns it with
    /// every line read before it.
    pub fn wait_stderr(&self, what: &str, wanted: impl Fn(&str) -> bool) -> Vec<String> {
        let deadline = Instant::now() + PATIENCE;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.stderr.recv_timeout(left).unwrap_or_else(|_| panic!("no stderr line {what}: {seen:#?}"));
            let found = wanted(&line);
            seen.push(line);
            if found {
                return seen;
            }
        }
    }

    /// Stops the server (SIGTERM) and returns every stderr line not read yet.
    pub fn stop_and_collect_stderr(&mut self) -> Vec<String> {
        assert!(self.terminate().success());
        self.stderr.iter().collect()
    }

    /// Waits until `/health` reports `n` sessions.
    pub fn wait_sessions(&self, n: u64) {
        wait_health_sessions(self.http.as_deref().expect("http"), n)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends a signal with `kill`.
pub fn signal(child: &Child, name: &str) {
    let status = Command::new("kill").arg(format!("-{name}")).arg(child.id().to_string()).status().expect("run kill");
    assert!(status.success());
}

/// Waits for a child, failing the test if it does not exit in time.
pub fn wait(child: &mut Child) -> ExitStatus {
    eventually_blocking("subagentd exits", PATIENCE, || child.try_wait().expect("wait"))
}

/// `subagentd mcp` over stdio: its stdin to write JSON-RPC lines to, and
/// its stdout read line by line; its stderr goes nowhere. Killed when
/// dropped.
pub struct McpStdio {
    /// The process.
    pub child: Child,
    // `None` once closed (EOF: the session ends).
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
    // Kept for as long as the process may read it.
    _config: Option<tempfile_lite::TempFile>,
}

impl McpStdio {
    /// Starts `subagentd mcp`, with a config file of `config` when given.
    pub fn start(config: Option<&str>) -> Self {
        let config = config.map(tempfile_lite::TempFile::with);
        let mut cmd = Command::new(binary());
        cmd.arg("mcp");
        let mut cmd = finish_command(cmd, config.as_ref());
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start subagentd mcp");
        let stdin = child.stdin.take();
        let lines = BufReader::new(child.stdout.take().expect("stdout piped")).lines();
        Self { child, stdin, lines, _config: config }
    }

    /// Writes `line` (a JSON-RPC message, or anything to test a bad one)
    /// and its newline.
    pub fn send(&mut self, line: impl std::fmt::Display) {
        let stdin = self.stdin.as_mut().expect("stdin still open");
        writeln!(stdin, "{line}").expect("write to subagentd mcp");
    }

    /// The next line of stdout, which carries only JSON-RPC.
    pub fn next(&mut self) -> Value {
        let line = self.lines.next().expect("a line").expect("utf-8");
        serde_json::from_str(&line).unwrap_or_else(|err| panic!("stdout carries only JSON-RPC: {line:?}: {err}"))
    }

    /// The next message with `id`, skipping others (notifications, requests).
    pub fn answer(&mut self, id: impl Into<Value>) -> Value {
        let id = id.into();
        loop {
            let message = self.next();
            if message["id"] == id {
                return message;
            }
        }
    }

    /// Closes stdin (EOF) and waits for the process to exit.
    pub fn close(&mut self) -> ExitStatus {
        drop(self.stdin.take());
        wait(&mut self.child)
    }
}

impl Drop for McpStdio {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
