//! The live view's cost (issue 16): the TCP cycle of one session while
//! another session runs 1 000 subagents, each reporting progress once a
//! second, with the operator's page closed and open on that busy session
//! (headless Chromium through `tests/browser/watch.mjs`, on the same two
//! cores as the host and the client).
//!
//! Needs what the browser test needs (Node.js, Chromium, `npm ci --prefix
//! tests/browser`); without them the group says so and is left out.
//!
//! `cargo bench --bench wire -- live_view`

use criterion::{Criterion, Throughput};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use super::{blocking_session, start_service, tcp_client, timed, Settle, Tail};

/// Subagents in the watched session.
const BUSY_SUBAGENTS: usize = 1000;

fn browser_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser")
}

/// A session of `n` subagents, each running a task that reports progress
/// once a second for ten minutes; a thread reads (and drops) its lines.
/// Returns its id and the connection, which keeps it open.
fn busy_session(addr: SocketAddr, n: usize) -> (String, TcpStream) {
    let (session, stream, mut reader, mut writer) = blocking_session(addr);
    let mut line = String::new();
    let step = r#"{"progress":"working"},{"sleep_ms":1000}"#;
    let script = vec![step; 600].join(",");
    for i in 0..n {
        writeln!(
            writer,
            r#"{{"type":"SUBAGENT_SPAWN_REQ","id":"s{i}","agent":{{"name":"worker-{i}","model":"m","max_steps":2000,"timeout_seconds":3600}}}}"#
        )
        .expect("write");
    }
    writer.flush().expect("flush");
    let mut ids = Vec::with_capacity(n);
    while ids.len() < n {
        line.clear();
        reader.read_line(&mut line).expect("read");
        let reply: serde_json::Value = serde_json::from_str(&line).expect("json");
        if reply["type"] == "SUBAGENT_SPAWN_RESP" {
            ids.push(reply["subagent_id"].as_str().expect("id").to_owned());
        }
    }
    for (i, id) in ids.iter().enumerate() {
        writeln!(
            writer,
            r#"{{"type":"SUBAGENT_DELEGATE_REQ","id":"d{i}","subagent_id":"{id}","task":{{"name":"long","instruction":"work","metadata":{{"script":[{script}]}}}}}}"#
        )
        .expect("write");
    }
    writer.flush().expect("flush");
    std::thread::spawn(move || {
        while reader.read_line(&mut line).is_ok_and(|read| read > 0) {
            line.clear();
        }
    });
    (session, stream)
}

/// The page in headless Chromium, open or closed (the tab on
/// `about:blank`), until dropped.
struct Page {
    child: Child,
    commands: ChildStdin,
    answers: mpsc::Receiver<String>,
    // The longest gaps between the page's frames it reported.
    frames: Arc<Mutex<Vec<u64>>>,
}

impl Page {
    fn open(http: SocketAddr, session: &str) -> Self {
        let mut child = Command::new("node")
            .arg(browser_dir().join("watch.mjs"))
            .args([&format!("http://{http}"), session])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start node");
        let commands = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, answers) = mpsc::channel();
        let frames = Arc::new(Mutex::new(Vec::new()));
        let seen = frames.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                match line.strip_prefix("FRAME ") {
                    Some(ms) => seen.lock().unwrap().push(ms.parse().unwrap_or(0)),
                    None => {
                        let _ = tx.send(line);
                    }
                }
            }
        });
        let page = Self { child, commands, answers, frames };
        page.expect("OPEN");
        page
    }

    fn expect(&self, what: &str) {
        let said = self.answers.recv_timeout(Duration::from_secs(60)).unwrap_or_default();
        assert_eq!(said, what, "the page script");
    }

    /// Opens (`true`) or closes the page.
    fn set(&mut self, open: bool) {
        writeln!(self.commands, "{}", if open { "open" } else { "close" }).expect("write");
        self.expect(if open { "OPEN" } else { "CLOSED" });
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// `live_view/{page_closed,page_open}`: one cycle of another session,
/// with criterion; then the same alternated, closed and open, round after
/// round in one run (the machine's speed drifts more than the effect), with
/// the medians and their ratio printed.
pub(crate) fn live_view(c: &mut Criterion) {
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    if !Path::new(&chromium).exists() || !browser_dir().join("node_modules/playwright-core").exists() {
        eprintln!("live_view: left out (needs {chromium} and `npm ci --prefix tests/browser`)");
        return;
    }
    let system = actix_rt::System::new();
    let service = start_service();
    let (session, _busy) = busy_session(service.tcp, BUSY_SUBAGENTS);
    let settle = Settle::Health(service.http);
    let mut page = Page::open(service.http, &session);
    page.set(false);
    let mut group = c.benchmark_group("live_view");
    group.throughput(Throughput::Elements(1));
    let tail = Tail::default();
    group.bench_function("page_closed", |b| {
        b.iter_custom(|iters| tail.record(iters, system.block_on(timed(iters, 1, settle, || tcp_client(service.tcp)))))
    });
    tail.report("live_view/page_closed");
    page.set(true);
    group.bench_function("page_open", |b| {
        b.iter_custom(|iters| tail.record(iters, system.block_on(timed(iters, 1, settle, || tcp_client(service.tcp)))))
    });
    tail.report("live_view/page_open");
    group.finish();

    // Not a criterion bench: run it only when the filter names this group.
    if !std::env::args().skip(1).any(|arg| "live_view/alternated".contains(arg.as_str()) && !arg.starts_with('-')) {
        return;
    }
    const ROUNDS: usize = 8;
    const CYCLES: u64 = 30_000;
    let (mut closed, mut open) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        for state in [false, true] {
            page.set(state);
            std::thread::sleep(Duration::from_secs(1));
            let took = system.block_on(timed(CYCLES, 1, settle, || tcp_client(service.tcp)));
            let rate = CYCLES as f64 / took.as_secs_f64();
            if state {
                open.push(rate)
            } else {
                closed.push(rate)
            }
        }
    }
    let (closed, open) = (median(&mut closed), median(&mut open));
    let mut frames = std::mem::take(&mut *page.frames.lock().unwrap());
    frames.sort_unstable();
    eprintln!(
        "live_view alternated ({ROUNDS} rounds of {CYCLES} cycles each way): page closed {closed:.0} cycles/s, \
         open {open:.0} cycles/s: {:+.1} %; the page's longest frame gap per 5 s: median {} ms, worst {} ms",
        (open / closed - 1.0) * 100.0,
        frames.get(frames.len() / 2).copied().unwrap_or(0),
        frames.last().copied().unwrap_or(0)
    );
}
