//! Over the wire: the spawn → delegate → await cycle against the real service
//! binary (`subagentd serve --tcp … --http …`, started by this bench with a
//! config that lifts the per-session quota), with pipelining clients.
//!
//! | bench | one element is | client |
//! |---|---|---|
//! | `wire_tcp/floor_1_session` | one cycle against an in-process fake host that answers each request with a canned reply (no actors, no events): socket + JSON + client cost | 1 connection, `WINDOW` cycles in flight |
//! | `wire_tcp/1_session` | one cycle over TCP NDJSON | 1 connection, `WINDOW` cycles in flight |
//! | `wire_tcp/8_sessions` | one cycle over TCP NDJSON | 8 connections, `WINDOW` cycles in flight on each |
//! | `wire_http/1_session` | one request (`/send`; a cycle is 3) with its reply read from `/stream` | 1 HTTP session, `HTTP_WINDOW` cycles in flight |
//!
//! A cycle sends `SUBAGENT_SPAWN_REQ`, then on its reply `SUBAGENT_DELEGATE_REQ`
//! and `SUBAGENT_AWAIT_REQ` (over TCP back to back: a session handles its
//! requests in order, so the await sees the delegated task; over HTTP the
//! await waits for the delegate's reply, as two POSTs may take two pooled
//! connections) and ends at the await reply,
//! which must say `COMPLETED`. The service's `SUBAGENT_EVENT`s (three per
//! cycle) are read and skipped. Each criterion sample runs on a fresh session;
//! the host, the client and criterion share the machine's cores.
//!
//! The durable stores (issue 11), one service per store in the same run:
//!
//! | bench | one element is |
//! |---|---|
//! | `wire_store/{memory,sqlite,sqlite_normal,postgres}_1_session` | one cycle over TCP, 1 connection, `WINDOW` in flight, on `--store memory`, an SQLite file (`synchronous` full, the default, and normal), a PostgreSQL database; after each, the commits per second and mean batch size (from `/health`) are printed |
//! | `restart/sqlite_10k_subagents` | one restart: `subagentd` started on an SQLite store holding a session of 10 000 subagents (killed with SIGKILL before), until a client resumed that session and listed all 10 000 |
//!
//! The live view (issue 16): `live_view/{page_closed,page_open}`, one cycle
//! of a session while another runs 1 000 busy subagents, with the operator's
//! page closed and open on that session (see `support/live_view.rs`).
//!
//! Several hosts (issue 12): `cluster/haproxy_{1,3}_nodes_8_sessions`, one
//! cycle through HAProxy to 1 or 3 nodes on one PostgreSQL database, and a
//! count of PostgreSQL's work per cycle (see `support/cluster.rs`).
//!
//! The PostgreSQL and cluster benches need `DATABASE_URL` (a server they
//! may create a database on, dropped afterwards); the cluster bench needs
//! `haproxy` on the PATH.
//!
//! Run: `cargo bench --bench wire` (the bench builds `subagentd` itself).

use actix_web::web::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use futures_util::StreamExt;
use serde::Deserialize;
use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io::Write;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::process::{Child, Command, Stdio};
use std::rc::Rc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

// The allocator subagentd ships with (src/main.rs), for the floor and the host alike.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Cycles kept in flight per TCP session.
const WINDOW: usize = 128;

/// Cycles (so `/send` requests) kept in flight per HTTP session. The service's
/// input queue holds max(`max_inflight_requests`, 64) frames (4096 by default),
/// so a window of 200 measures a pipelining client without 429s (any 429 is
/// still retried and counted).
const HTTP_WINDOW: usize = 200;

const HANDSHAKE: &str =
    r#"{"type":"handshake/req","id":"h1","a2e":"1.0","agent_id":"bench","agent_caps":["multi_agent"],"auth_token":""}"#;

/// The fields of a reply the client looks at.
#[derive(Deserialize)]
struct Reply<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    req_id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    subagent_id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    status: Option<Cow<'a, str>>,
    #[serde(default)]
    accepted: Option<bool>,
}

/// What a cycle needs back from a reply.
#[derive(Debug)]
struct Answer {
    kind: String,
    subagent_id: Option<String>,
    status: Option<String>,
    accepted: Option<bool>,
}

/// Requests waiting for their reply, by request id.
type Pending = Rc<RefCell<HashMap<u64, oneshot::Sender<Answer>>>>;

/// Routes one reply line to the request waiting for it; events are skipped.
fn dispatch(line: &str, pending: &Pending) {
    let reply: Reply<'_> = serde_json::from_str(line).unwrap_or_else(|err| panic!("bad reply {line}: {err}"));
    let Some(req_id) = reply.req_id.as_deref().filter(|id| !id.is_empty()) else {
        assert_eq!(reply.kind, "SUBAGENT_EVENT", "unsolicited {line}");
        return;
    };
    if reply.kind == "error" {
        panic!("error reply: {line}");
    }
    let key: u64 = req_id.parse().unwrap_or_else(|_| panic!("foreign req_id in {line}"));
    if let Some(waiter) = pending.borrow_mut().remove(&key) {
        let _ = waiter.send(Answer {
            kind: reply.kind.into_owned(),
            subagent_id: reply.subagent_id.map(Cow::into_owned),
            status: reply.status.map(Cow::into_owned),
            accepted: reply.accepted,
        });
    }
}

/// One pipelining client session: `send` writes a request and returns its
/// reply; the transport is TCP NDJSON or HTTP `/send` + `/stream`.
struct Client {
    next_id: Cell<u64>,
    // Cycles kept in flight.
    window: usize,
    // `/send` answers 429 (busy) that were retried.
    busy: Cell<u64>,
    pending: Pending,
    out: Out,
}

enum Out {
    /// Lines for the writer task (which batches them into few writes).
    Tcp(mpsc::UnboundedSender<String>),
    /// POST each request to `/send`.
    Http { client: awc::Client, url: String, session: String },
}

impl Client {
    async fn request(&self, body: impl FnOnce(u64) -> String) -> Answer {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        let (tx, rx) = oneshot::channel();
        self.pending.borrow_mut().insert(id, tx);
        let line = body(id);
        match &self.out {
            Out::Tcp(lines) => lines.send(line).expect("writer gone"),
            Out::Http { client, url, session } => loop {
                let response = client
                    .post(url.as_str())
                    .insert_header(("X-Session-Id", session.as_str()))
                    .insert_header(("Content-Type", "text/plain"))
                    .send_body(line.clone())
                    .await
                    .expect("POST /send");
                if response.status() == awc::http::StatusCode::TOO_MANY_REQUESTS {
                    // The session's input queue is full: nothing was taken.
                    // Back off briefly (not the advertised second: that
                    // would measure the sleep) and count it.
                    self.busy.set(self.busy.get() + 1);
                    actix_rt::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
                assert!(response.status().is_success(), "/send: {}", response.status());
                break;
            },
        }
        rx.await.expect("reply lost (connection closed?)")
    }

    /// spawn → delegate + await (pipelined over TCP) → COMPLETED.
    async fn cycle(&self) {
        let spawned = self
            .request(|id| format!(r#"{{"type":"SUBAGENT_SPAWN_REQ","id":"{id}","agent":{{"name":"n","model":"m"}}}}"#))
            .await;
        assert_eq!(spawned.kind, "SUBAGENT_SPAWN_RESP", "{spawned:?}");
        let sub = spawned.subagent_id.expect("subagent_id");
        let delegated = self.request(|id| {
            format!(
                r#"{{"type":"SUBAGENT_DELEGATE_REQ","id":"{id}","subagent_id":"{sub}","task":{{"name":"unit","instruction":"do the unit of work"}}}}"#
            )
        });
        let awaited =
            self.request(|id| format!(r#"{{"type":"SUBAGENT_AWAIT_REQ","id":"{id}","subagent_id":"{sub}"}}"#));
        let (delegated, awaited) = match self.out {
            // One connection keeps the two requests in order.
            Out::Tcp(_) => futures_util::future::join(delegated, awaited).await,
            // Two POSTs may take different pooled connections: the await goes
            // once the delegate has been answered.
            Out::Http { .. } => {
                let delegated = delegated.await;
                (delegated, awaited.await)
            }
        };
        assert_eq!(delegated.accepted, Some(true), "{delegated:?}");
        assert_eq!(awaited.status.as_deref(), Some("COMPLETED"), "{awaited:?}");
    }

    /// Runs `cycles` cycles with `WINDOW` in flight.
    async fn run(&self, cycles: u64) {
        let left = Cell::new(cycles);
        let worker = || async {
            while left.get() > 0 {
                left.set(left.get() - 1);
                self.cycle().await;
            }
        };
        futures_util::future::join_all((0..self.window).map(|_| worker())).await;
    }

    /// Ends the session with a `shutdown`: an HTTP session would otherwise
    /// live until its idle timeout, and a TCP one on a durable store stays
    /// resumable for a grace after its socket closes (sessions of many
    /// samples would pile up to `max_sessions`).
    async fn close(self) {
        if self.busy.get() > 0 {
            eprintln!("wire bench: {} `/send` answered 429 and were retried", self.busy.get());
        }
        if let Out::Tcp(tx) = &self.out {
            // Written before the socket closes (the writer sends what it
            // holds, then ends with the channel).
            let _ = tx.send(r#"{"type":"shutdown","id":"0","a2e":"1.0","timeout":0}"#.to_owned());
        }
        if let Out::Http { client, url, session } = &self.out {
            let _ = client
                .post(url.as_str())
                .insert_header(("X-Session-Id", session.as_str()))
                .insert_header(("Content-Type", "text/plain"))
                .send_body(r#"{"type":"shutdown","id":"0","a2e":"1.0","timeout":0}"#)
                .await;
        }
    }
}

/// Opens a TCP session (handshake done) with its reader and writer tasks.
async fn tcp_client(addr: SocketAddr) -> Client {
    let stream = TcpStream::connect(addr).await.expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    let (read, write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    let mut writer = BufWriter::new(write);
    writer.write_all(HANDSHAKE.as_bytes()).await.expect("write");
    writer.write_all(b"\n").await.expect("write");
    writer.flush().await.expect("flush");
    let hello = lines.next_line().await.expect("read").expect("handshake reply");
    assert!(hello.contains(r#""ok":true"#), "handshake refused: {hello}");
    let pending: Pending = Rc::default();
    let reader_pending = pending.clone();
    actix_rt::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            dispatch(&line, &reader_pending);
        }
    });
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    actix_rt::spawn(async move {
        while let Some(line) = rx.recv().await {
            let mut batch = line;
            batch.push('\n');
            while let Ok(more) = rx.try_recv() {
                batch.push_str(&more);
                batch.push('\n');
            }
            if writer.write_all(batch.as_bytes()).await.is_err() || writer.flush().await.is_err() {
                return;
            }
        }
    });
    Client { next_id: Cell::new(1), window: WINDOW, busy: Cell::new(0), pending, out: Out::Tcp(tx) }
}

/// The HTTP connection pool every sample's session uses, as one client
/// process (the SDK's) would: a pool per sample opened up to 200 fresh
/// connections at once, every sample.
fn http_pool() -> awc::Client {
    awc::Client::builder().connector(awc::Connector::new().limit(2 * WINDOW)).timeout(Duration::from_secs(30)).finish()
}

/// Opens an HTTP session on `client`'s pool, attaches its `/stream`, and handshakes.
async fn http_client(addr: SocketAddr, client: awc::Client) -> Client {
    let base = format!("http://{addr}");
    let mut opened = client.post(format!("{base}/session")).send().await.expect("POST /session");
    let body: serde_json::Value = opened.json().await.expect("session json");
    let session = body["session_id"].as_str().expect("session_id").to_owned();
    let mut stream = client
        .get(format!("{base}/stream"))
        .insert_header(("X-Session-Id", session.as_str()))
        .send()
        .await
        .expect("GET /stream");
    assert!(stream.status().is_success(), "/stream: {}", stream.status());
    let pending: Pending = Rc::default();
    let reader_pending = pending.clone();
    let (hello_tx, hello_rx) = oneshot::channel::<String>();
    actix_rt::spawn(async move {
        let mut hello = Some(hello_tx);
        let mut buffer: Vec<u8> = Vec::new();
        while let Some(Ok(chunk)) = stream.next().await {
            let chunk: Bytes = chunk;
            buffer.extend_from_slice(&chunk);
            let mut start = 0;
            while let Some(end) = buffer[start..].windows(2).position(|w| w == b"\n\n") {
                let frame = std::str::from_utf8(&buffer[start..start + end]).expect("utf-8 frame");
                for data in frame.lines().filter_map(|l| l.strip_prefix("data:")) {
                    let data = data.trim_start();
                    if data.contains(r#""type":"handshake/resp""#) {
                        if let Some(tx) = hello.take() {
                            let _ = tx.send(data.to_owned());
                        }
                    } else {
                        dispatch(data, &reader_pending);
                    }
                }
                start += end + 2;
            }
            buffer.drain(..start);
        }
    });
    let url = format!("{base}/send");
    let sent = client
        .post(url.as_str())
        .insert_header(("X-Session-Id", session.as_str()))
        .insert_header(("Content-Type", "text/plain"))
        .send_body(HANDSHAKE)
        .await
        .expect("POST handshake");
    assert!(sent.status().is_success());
    let hello = hello_rx.await.expect("handshake reply on the stream");
    assert!(hello.contains(r#""ok":true"#), "handshake refused: {hello}");
    Client {
        next_id: Cell::new(1),
        window: HTTP_WINDOW,
        busy: Cell::new(0),
        pending,
        out: Out::Http { client, url, session },
    }
}

// ---- the service under test, and the floor ------------------------------------

fn free_addr() -> SocketAddr {
    StdListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr")
}

/// `subagentd serve --tcp … --http …`, killed on drop.
struct Service {
    child: Child,
    tcp: SocketAddr,
    http: SocketAddr,
    _dir: TempDir,
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A directory removed on drop.
struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn start_service() -> Service {
    start_service_on("memory", "main")
}

/// `subagentd` on `store` (`memory`, `sqlite` for a file in its temp dir,
/// or a `postgres://` URL), its temp dir named by `tag`.
fn start_service_on(store: &str, tag: &str) -> Service {
    let dir = std::env::temp_dir().join(format!("subagentd-wire-bench-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let config = dir.join("bench.toml");
    let mut file = std::fs::File::create(&config).expect("config");
    // Every criterion sample opens a fresh session, so one session holds at
    // most one sample's cycles.
    writeln!(
        file,
        "[limits]\nmax_subagents_per_session = 1000000\nmax_retained_records = 1000000\nmax_sessions = 1024\nmax_sessions_per_caller = 1024"
    )
    .expect("write config");
    if store == "sqlite_normal" {
        writeln!(file, "[store]\nsqlite_synchronous = \"normal\"").expect("write config");
    }
    let store = match store {
        "sqlite" | "sqlite_normal" => format!("sqlite:{}", dir.join("state.sqlite3").display()),
        other => other.to_owned(),
    };
    let (tcp, http) = (free_addr(), free_addr());
    let child = Command::new(env!("CARGO_BIN_EXE_subagentd"))
        .args(["serve", "--store", &store, "--tcp", &tcp.to_string(), "--http", &http.to_string(), "--config"])
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("start subagentd");
    let service = Service { child, tcp, http, _dir: TempDir(dir) };
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(service.tcp).is_err() || std::net::TcpStream::connect(service.http).is_err() {
        assert!(Instant::now() < deadline, "subagentd did not start listening");
        std::thread::sleep(Duration::from_millis(20));
    }
    service
}

/// The floor: a host that answers each request at once with a canned reply
/// in the service's shape (full envelope, no actors, no events), on its own
/// thread.
fn start_fake_host() -> SocketAddr {
    let listener = StdListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        runtime.block_on(async move {
            listener.set_nonblocking(true).expect("nonblocking");
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            let local = tokio::task::LocalSet::new();
            local
                .run_until(async move {
                    while let Ok((stream, _)) = listener.accept().await {
                        tokio::task::spawn_local(fake_session(stream));
                    }
                })
                .await;
        });
    });
    addr
}

async fn fake_session(stream: TcpStream) {
    stream.set_nodelay(true).expect("nodelay");
    let (read, write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let mut writer = BufWriter::new(write);
    let mut line = String::new();
    let mut next = 0u64;
    loop {
        line.clear();
        if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
            return;
        }
        let request: serde_json::Value = serde_json::from_str(&line).expect("json");
        let id = request["id"].as_str().unwrap_or("");
        next += 1;
        let mut reply = serde_json::json!({
            "a2e": "1.0",
            "id": format!("{:032x}", next),
            "req_id": id,
            "ts": 1.0e9,
        });
        let body = match request["type"].as_str().unwrap_or("") {
            "handshake/req" => serde_json::json!({ "type": "handshake/resp", "ok": true, "session_id": "fake" }),
            "SUBAGENT_SPAWN_REQ" => {
                serde_json::json!({ "type": "SUBAGENT_SPAWN_RESP", "subagent_id": format!("sub_{:08x}", next), "status": "READY" })
            }
            "SUBAGENT_DELEGATE_REQ" => {
                serde_json::json!({ "type": "SUBAGENT_DELEGATE_RESP", "accepted": true, "status": "RUNNING" })
            }
            "SUBAGENT_AWAIT_REQ" => serde_json::json!({
                "type": "SUBAGENT_AWAIT_RESP",
                "subagent_id": request["subagent_id"],
                "status": "COMPLETED",
                "result": { "summary": "Completed task: unit", "instruction": "do the unit of work" },
                "error": null,
            }),
            other => panic!("fake host: unexpected {other}"),
        };
        reply.as_object_mut().expect("object").extend(body.as_object().expect("object").clone());
        let mut text = reply.to_string();
        text.push('\n');
        if writer.write_all(text.as_bytes()).await.is_err() {
            return;
        }
        // Flush only when no more input is already buffered (pipelining).
        if reader.buffer().is_empty() && writer.flush().await.is_err() {
            return;
        }
    }
}

// ---- criterion ----------------------------------------------------------------

/// How a sample waits for the host to tear its sessions down before the
/// next sample starts (a sample that overlaps the last one's teardown
/// measures both: the slowest samples were that, see BENCHMARKS.md).
#[derive(Debug, Clone, Copy)]
enum Settle {
    /// A fixed pause (a host without `/health`).
    Pause,
    /// Until the host's `/health` counts the sessions it had before.
    Health(SocketAddr),
}

/// The host's `GET /health`.
fn health(http: SocketAddr) -> serde_json::Value {
    use std::io::Read;
    let mut stream = std::net::TcpStream::connect(http).expect("connect http");
    write!(stream, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").expect("write");
    let mut text = String::new();
    stream.read_to_string(&mut text).expect("read");
    let body = &text[text.find("\r\n\r\n").expect("body") + 4..];
    serde_json::from_str(body).expect("health json")
}

/// Sessions the host at `http` has open now.
fn open_sessions(http: SocketAddr) -> u64 {
    health(http)["sessions"].as_u64().expect("sessions")
}

/// Time for `iters` cycles spread over `sessions` fresh sessions made by `open`.
async fn timed<F, Fut>(iters: u64, sessions: u64, settle: Settle, open: F) -> Duration
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Client>,
{
    let before = match settle {
        Settle::Health(http) => Some(open_sessions(http)),
        Settle::Pause => None,
    };
    let clients = futures_util::future::join_all((0..sessions).map(|_| open())).await;
    let share = iters.div_ceil(sessions);
    let start = Instant::now();
    futures_util::future::join_all(clients.iter().map(|client| client.run(share))).await;
    let elapsed = start.elapsed();
    futures_util::future::join_all(clients.into_iter().map(Client::close)).await;
    // Let the host tear the sessions down before the next sample.
    match (settle, before) {
        (Settle::Health(http), Some(before)) => {
            let deadline = Instant::now() + Duration::from_secs(30);
            while open_sessions(http) > before && Instant::now() < deadline {
                actix_rt::time::sleep(Duration::from_millis(1)).await;
            }
        }
        _ => actix_rt::time::sleep(Duration::from_millis(20 + share / 1000)).await,
    }
    // Report time for exactly `iters` cycles.
    elapsed.mul_f64(iters as f64 / (share * sessions) as f64)
}

/// The per-cycle time of every sample of one bench, for its tail: criterion
/// prints the mean and the slope, this the median and the 99th percentile.
#[derive(Default)]
struct Tail(RefCell<Vec<f64>>);

impl Tail {
    /// Records a sample of `iters` cycles that took `took`; returns `took`.
    fn record(&self, iters: u64, took: Duration) -> Duration {
        self.0.borrow_mut().push(took.as_secs_f64() * 1e6 / iters as f64);
        took
    }

    /// Prints the median and 99th percentile per cycle of the measured
    /// samples, and forgets them all. Criterion first warms up with 1, 2, 4, …
    /// cycles (latency, not throughput), then measures exactly `SAMPLES`
    /// samples: the last ones recorded.
    fn report(&self, name: &str) {
        const SAMPLES: usize = 100;
        let mut samples = std::mem::take(&mut *self.0.borrow_mut());
        if samples.len() < SAMPLES {
            return;
        }
        samples.drain(..samples.len() - SAMPLES);
        samples.sort_by(f64::total_cmp);
        let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
        let mean = samples.iter().sum::<f64>() / samples.len() as f64;
        eprintln!(
            "{name}: per cycle over its {} samples: p50 {:.2} µs, p99 {:.2} µs ({:.1}× p50), mean {:.2} µs",
            samples.len(),
            at(0.5),
            at(0.99),
            at(0.99) / at(0.5),
            mean
        );
    }
}

fn wire(c: &mut Criterion) {
    let system = actix_rt::System::new();
    let service = start_service();
    let fake = start_fake_host();

    let mut group = c.benchmark_group("wire_tcp");
    group.throughput(Throughput::Elements(1));
    let settle = Settle::Health(service.http);
    let tail = Tail::default();
    group.bench_function("floor_1_session", |b| {
        b.iter_custom(|iters| tail.record(iters, system.block_on(timed(iters, 1, Settle::Pause, || tcp_client(fake)))))
    });
    tail.report("wire_tcp/floor_1_session");
    group.bench_function("1_session", |b| {
        b.iter_custom(|iters| tail.record(iters, system.block_on(timed(iters, 1, settle, || tcp_client(service.tcp)))))
    });
    tail.report("wire_tcp/1_session");
    group.bench_function("8_sessions", |b| {
        b.iter_custom(|iters| tail.record(iters, system.block_on(timed(iters, 8, settle, || tcp_client(service.tcp)))))
    });
    tail.report("wire_tcp/8_sessions");
    group.finish();

    let mut group = c.benchmark_group("wire_http");
    // Three requests (/send) per cycle: the figure is requests per second.
    group.throughput(Throughput::Elements(3));
    group.bench_function("1_session", |b| {
        let pool = http_pool();
        b.iter_custom(|iters| system.block_on(timed(iters, 1, settle, || http_client(service.http, pool.clone()))))
    });
    group.finish();
}

// ---- durable stores -----------------------------------------------------------

/// A PostgreSQL database of the bench's own, dropped on drop.
struct BenchDatabase {
    admin: String,
    name: String,
    url: String,
}

impl BenchDatabase {
    fn create() -> Self {
        // The machine's own server unless `DATABASE_URL` names another.
        let admin =
            std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
        let name = format!("subagentd_bench_{}", std::process::id());
        run_sql(&admin, &format!("CREATE DATABASE {name}"));
        let base = admin.rsplit_once('/').map_or(admin.as_str(), |(base, _)| base);
        let url = format!("{base}/{name}");
        Self { admin, name, url }
    }
}

impl Drop for BenchDatabase {
    fn drop(&mut self) {
        run_sql(&self.admin, &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name));
    }
}

fn run_sql(url: &str, sql: &str) {
    use sqlx::{Connection, Executor};
    let (url, sql) = (url.to_owned(), sql.to_owned());
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        runtime.block_on(async {
            let mut conn = sqlx::PgConnection::connect(&url).await.expect("connect to DATABASE_URL");
            conn.execute(sql.as_str()).await.expect("sql");
        });
    })
    .join()
    .expect("sql thread");
}

/// `(commits, changes)` from the service's `/health`.
fn store_stats(http: SocketAddr) -> (u64, u64) {
    let health = health(http);
    (health["store"]["commits"].as_u64().unwrap_or(0), health["store"]["changes"].as_u64().unwrap_or(0))
}

fn stores(c: &mut Criterion) {
    let system = actix_rt::System::new();
    let database = BenchDatabase::create();
    let mut group = c.benchmark_group("wire_store");
    group.throughput(Throughput::Elements(1));
    let stores = [
        ("memory", "memory"),
        ("sqlite", "sqlite"),
        ("sqlite_normal", "sqlite_normal"),
        ("postgres", database.url.as_str()),
    ];
    for (name, store) in stores {
        let service = start_service_on(store, name);
        let before = store_stats(service.http);
        let measured = Cell::new(Duration::ZERO);
        group.bench_function(format!("{name}_1_session"), |b| {
            b.iter_custom(|iters| {
                let took = system.block_on(timed(iters, 1, Settle::Health(service.http), || tcp_client(service.tcp)));
                measured.set(measured.get() + took);
                took
            })
        });
        let after = store_stats(service.http);
        let (commits, changes) = (after.0 - before.0, after.1 - before.1);
        if commits > 0 {
            eprintln!(
                "wire_store/{name}: {commits} commits, {:.0} commits/s of measured time, mean batch {:.1} changes",
                commits as f64 / measured.get().as_secs_f64(),
                changes as f64 / commits as f64
            );
        }
    }
    group.finish();
}

/// A TCP session, handshaken, on a blocking socket: its id, the socket, and
/// a buffered reader and writer on it.
type BlockingSession =
    (String, std::net::TcpStream, std::io::BufReader<std::net::TcpStream>, std::io::BufWriter<std::net::TcpStream>);

fn blocking_session(addr: SocketAddr) -> BlockingSession {
    use std::io::BufRead;
    let stream = std::net::TcpStream::connect(addr).expect("connect");
    let mut reader = std::io::BufReader::new(stream.try_clone().expect("clone"));
    let mut writer = std::io::BufWriter::new(stream.try_clone().expect("clone"));
    writeln!(writer, "{HANDSHAKE}").expect("write");
    writer.flush().expect("flush");
    let mut line = String::new();
    reader.read_line(&mut line).expect("handshake reply");
    let hello: serde_json::Value = serde_json::from_str(&line).expect("json");
    let session = hello["session_id"].as_str().expect("session id").to_owned();
    (session, stream, reader, writer)
}

/// Spawns `n` subagents in one TCP session (pipelined), and returns the
/// session id with the connection still open.
fn fill_session(addr: SocketAddr, n: usize) -> (String, std::net::TcpStream) {
    use std::io::BufRead;
    let (session, stream, mut reader, mut writer) = blocking_session(addr);
    let mut line = String::new();
    for i in 0..n {
        writeln!(
            writer,
            r#"{{"type":"SUBAGENT_SPAWN_REQ","id":"s{i}","a2e":"1.0","agent":{{"name":"n{i}","model":"m"}}}}"#
        )
        .expect("write");
    }
    writer.flush().expect("flush");
    let mut replies = 0;
    while replies < n {
        line.clear();
        reader.read_line(&mut line).expect("read");
        if line.contains("SUBAGENT_SPAWN_RESP") {
            replies += 1;
        }
    }
    (session, stream)
}

/// Resumes `session` and lists it; returns how many subagents it has, and
/// the connection (closing it would end the session for good).
fn resume_and_list(addr: SocketAddr, session: &str) -> (usize, std::net::TcpStream) {
    use std::io::BufRead;
    let stream = std::net::TcpStream::connect(addr).expect("connect");
    let mut reader = std::io::BufReader::new(stream.try_clone().expect("clone"));
    let mut writer = stream.try_clone().expect("clone");
    writeln!(
        writer,
        r#"{{"type":"handshake/req","id":"h","a2e":"1.0","agent_id":"bench","agent_caps":["multi_agent"],"resume_session_id":"{session}"}}"#
    )
    .expect("write");
    writeln!(writer, r#"{{"type":"SUBAGENT_LIST_REQ","id":"l","a2e":"1.0"}}"#).expect("write");
    let mut line = String::new();
    loop {
        line.clear();
        reader.read_line(&mut line).expect("read");
        let reply: serde_json::Value = serde_json::from_str(&line).expect("json");
        if reply["type"] == "handshake/resp" {
            assert_eq!(reply["ok"], true, "resume refused: {line}");
        }
        if reply["req_id"] == "l" {
            return (reply["subagents"].as_array().map_or(0, Vec::len), stream);
        }
    }
}

fn restart(c: &mut Criterion) {
    const SUBAGENTS: usize = 10_000;
    let mut service = start_service_on("sqlite", "restart");
    let (session, connection) = fill_session(service.tcp, SUBAGENTS);
    // The session's connection is held until its server is killed.
    let mut held = Some(connection);
    let mut group = c.benchmark_group("restart");
    group.sample_size(10);
    group.bench_function("sqlite_10k_subagents", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                // A crash: the session stays stored.
                let _ = service.child.kill();
                let _ = service.child.wait();
                held = None;
                let start = Instant::now();
                let child = Command::new(env!("CARGO_BIN_EXE_subagentd"))
                    .args(["serve", "--store"])
                    .arg(format!("sqlite:{}", service._dir.0.join("state.sqlite3").display()))
                    .args(["--tcp", &service.tcp.to_string(), "--http", &service.http.to_string(), "--config"])
                    .arg(service._dir.0.join("bench.toml"))
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .spawn()
                    .expect("restart subagentd");
                service.child = child;
                while std::net::TcpStream::connect(service.tcp).is_err() {
                    std::thread::sleep(Duration::from_millis(1));
                }
                let (listed, connection) = resume_and_list(service.tcp, &session);
                total += start.elapsed();
                assert_eq!(listed, SUBAGENTS);
                held = Some(connection);
            }
            total
        })
    });
    group.finish();
    drop(held);
}

#[path = "support/cluster.rs"]
mod cluster;

#[path = "support/live_view.rs"]
mod live_view;

criterion_group!(benches, wire, stores, restart, cluster::cluster, live_view::live_view);
criterion_main!(benches);
