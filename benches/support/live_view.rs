//! The live view's cost (issue 16): the TCP cycle of one session while
//! another session runs 1 000 subagents, each reporting progress once a
//! second, first with the operator's page closed, then with it open on that
//! busy session (headless Chromium through `tests/browser/watch.mjs`, on
//! the same two cores as the host and the client).
//!
//! Needs what the browser test needs (Node.js, Chromium, `npm ci --prefix
//! tests/browser`); without them the group says so and is left out.
//!
//! `live_view/page_closed_again` runs after the page is closed: the two
//! closed runs bracket the open one.
//!
//! `cargo bench --bench wire -- live_view`

use criterion::{Criterion, Throughput};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::{start_service, tcp_client, timed, Settle, Tail, HANDSHAKE};

/// Subagents in the watched session.
const BUSY_SUBAGENTS: usize = 1000;

fn browser_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser")
}

/// A session of `n` subagents, each running a task that reports progress
/// once a second for ten minutes; a thread reads (and drops) its lines.
/// Returns its id and the connection, which keeps it open.
fn busy_session(addr: SocketAddr, n: usize) -> (String, TcpStream) {
    let stream = TcpStream::connect(addr).expect("connect");
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut writer = std::io::BufWriter::new(stream.try_clone().expect("clone"));
    writeln!(writer, "{HANDSHAKE}").expect("write");
    writer.flush().expect("flush");
    let mut line = String::new();
    reader.read_line(&mut line).expect("handshake reply");
    let hello: serde_json::Value = serde_json::from_str(&line).expect("json");
    let session = hello["session_id"].as_str().expect("session id").to_owned();
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

/// The page, open in headless Chromium until dropped.
struct Page {
    child: Child,
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
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        assert_eq!(lines.next().and_then(Result::ok).as_deref(), Some("READY"), "the page did not open");
        // Its responsiveness reports, printed as they come.
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                eprintln!("live_view: longest gap between the page's frames in 5 s: {} ms", &line[6..]);
            }
        });
        Self { child }
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// `live_view/{page_closed,page_open}`: one cycle of another session.
pub(crate) fn live_view(c: &mut Criterion) {
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    if !Path::new(&chromium).exists() || !browser_dir().join("node_modules/playwright-core").exists() {
        eprintln!("live_view: left out (needs {chromium} and `npm ci --prefix tests/browser`)");
        return;
    }
    let system = actix_rt::System::new();
    let service = start_service();
    let (session, _busy) = busy_session(service.tcp, BUSY_SUBAGENTS);
    let mut group = c.benchmark_group("live_view");
    group.throughput(Throughput::Elements(1));
    let settle = Settle::Health(service.http);
    let tail = Tail::default();
    group.bench_function("page_closed", |b| {
        b.iter_custom(|iters| tail.record(iters, system.block_on(timed(iters, 1, settle, || tcp_client(service.tcp)))))
    });
    tail.report("live_view/page_closed");
    let page = Page::open(service.http, &session);
    group.bench_function("page_open", |b| {
        b.iter_custom(|iters| tail.record(iters, system.block_on(timed(iters, 1, settle, || tcp_client(service.tcp)))))
    });
    tail.report("live_view/page_open");
    drop(page);
    // Closed again: the two closed runs bracket the open one, so a change
    // of load on the machine during the group shows.
    group.bench_function("page_closed_again", |b| {
        b.iter_custom(|iters| tail.record(iters, system.block_on(timed(iters, 1, settle, || tcp_client(service.tcp)))))
    });
    tail.report("live_view/page_closed_again");
    group.finish();
}
