//! Soak benchmark: a random workload against a real `subagentd` over TCP and
//! HTTP+SSE for N minutes, printing requests served, errors by code, and the
//! server's RSS (`VmRSS` of `/proc/PID/status`) at the start, after warm-up,
//! in the middle and at the end, with a verdict on whether RSS stays flat
//! after warm-up: the median and the floor of the per-second samples in the
//! last tenth of the run (at most 60 s) within 10 % of those in the same
//! span after warm-up. Results go to BENCHMARKS.md ("Faults: chaos and soak").
//!
//! Run: `cargo build --release && cargo run --release --example soak -- --minutes 10`
//!
//! Options:
//!
//! - `--minutes N` (default 10; fractions allowed), `--connections K`
//!   (default 8: clients at once, half over TCP, half over HTTP),
//!   `--seed S`, `--warmup-seconds W` (default: a tenth of the run, at most 60).
//! - By default it starts `subagentd serve --tcp 127.0.0.1:0 --http
//!   127.0.0.1:0` itself (the binary next to this example's directory, or
//!   `--server PATH`), reads the addresses from its stderr, and stops it with
//!   SIGTERM at the end. `--addr-tcp ADDR` and/or `--addr-http ADDR` use a
//!   running server instead (`--pid PID` to read its RSS).
//!
//! Each client opens a session, runs 50 to 400 random requests one at a
//! time (spawn top level or nested, delegate short or long scripted tasks,
//! await, list, message, cancel, terminate, merge, ping, and bad lines:
//! garbage, an unknown type, a schema violation, an unknown subagent, now
//! and then a line over 1 MiB), then ends it (`shutdown`, or over TCP just
//! hanging up) and opens the next. Every request must get its reply within
//! 60 s; one that does not is counted as lost and its session dropped.
//! Depends on std, serde_json and fastrand only.

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a reply may take before the request counts as lost.
const PATIENCE: Duration = Duration::from_secs(60);
/// A long task sleeps this long: it ends by cancel, terminate or session end.
const LONG_MS: u64 = 60_000;
/// Over the server's default `max_line_bytes` (1 MiB).
const OVERSIZED: usize = (1 << 20) + 64;

struct Args {
    minutes: f64,
    connections: usize,
    seed: u64,
    warmup: Option<Duration>,
    server: Option<String>,
    addr_tcp: Option<String>,
    addr_http: Option<String>,
    pid: Option<u32>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        minutes: 10.0,
        connections: 8,
        seed: fastrand::u64(..),
        warmup: None,
        server: None,
        addr_tcp: None,
        addr_http: None,
        pid: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        let bad = |what: &str| format!("{flag}: not {what}");
        match flag.as_str() {
            "--minutes" => args.minutes = value()?.parse().map_err(|_| bad("a number"))?,
            "--connections" => args.connections = value()?.parse().map_err(|_| bad("a count"))?,
            "--seed" => args.seed = value()?.parse().map_err(|_| bad("an integer"))?,
            "--warmup-seconds" => {
                args.warmup = Some(Duration::from_secs_f64(value()?.parse().map_err(|_| bad("a number"))?))
            }
            "--server" => args.server = Some(value()?),
            "--addr-tcp" => args.addr_tcp = Some(value()?),
            "--addr-http" => args.addr_http = Some(value()?),
            "--pid" => args.pid = Some(value()?.parse().map_err(|_| bad("a pid"))?),
            "--help" | "-h" => return Err(String::new()),
            other => return Err(format!("unknown option {other}")),
        }
    }
    if args.connections == 0 || args.minutes <= 0.0 {
        return Err("--connections and --minutes must be positive".into());
    }
    Ok(args)
}

/// Counters shared by every client.
#[derive(Default)]
struct Stats {
    requests: AtomicU64,
    replies: AtomicU64,
    events: AtomicU64,
    lost: AtomicU64,
    unexpected: AtomicU64,
    sessions_tcp: AtomicU64,
    sessions_http: AtomicU64,
    session_failures: AtomicU64,
    errors: Mutex<BTreeMap<String, u64>>,
    // Reply latency, microseconds, in power-of-two buckets.
    latency: Mutex<Vec<u64>>,
}

impl Stats {
    fn error(&self, code: &str) {
        *self.errors.lock().unwrap().entry(code.to_owned()).or_default() += 1;
    }

    fn latency(&self, took: Duration) {
        let micros = took.as_micros().max(1) as u64;
        let bucket = 63 - micros.leading_zeros() as usize;
        let mut buckets = self.latency.lock().unwrap();
        if buckets.len() <= bucket {
            buckets.resize(bucket + 1, 0);
        }
        buckets[bucket] += 1;
    }

    /// The bucket upper bound under which `q` of the replies came.
    fn percentile(&self, q: f64) -> Duration {
        let buckets = self.latency.lock().unwrap().clone();
        let total: u64 = buckets.iter().sum();
        let mut seen = 0;
        for (i, count) in buckets.iter().enumerate() {
            seen += count;
            if total > 0 && seen as f64 >= q * total as f64 {
                return Duration::from_micros(2u64 << i);
            }
        }
        Duration::ZERO
    }
}

/// One transport's view of a session: send a line, read the next message.
trait Conn {
    fn send(&mut self, line: &str) -> std::io::Result<()>;
    /// The next message, `None` when the session's output ended.
    fn next(&mut self) -> std::io::Result<Option<Value>>;
}

struct TcpConn {
    writer: TcpStream,
    reader: BufReader<TcpStream>,
}

impl TcpConn {
    fn open(addr: &str) -> std::io::Result<Self> {
        let stream = TcpStream::connect(addr)?;
        stream.set_read_timeout(Some(PATIENCE))?;
        stream.set_nodelay(true)?;
        Ok(Self { writer: stream.try_clone()?, reader: BufReader::new(stream) })
    }
}

impl Conn for TcpConn {
    fn send(&mut self, line: &str) -> std::io::Result<()> {
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        self.writer.write_all(&bytes)
    }

    fn next(&mut self) -> std::io::Result<Option<Value>> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Ok(None);
        }
        serde_json::from_str(&line).map(Some).map_err(std::io::Error::other)
    }
}

/// A keep-alive HTTP/1.1 connection for `POST`s.
struct HttpClient {
    addr: String,
    stream: Option<(TcpStream, BufReader<TcpStream>)>,
}

impl HttpClient {
    fn new(addr: &str) -> Self {
        Self { addr: addr.to_owned(), stream: None }
    }

    fn connect(&mut self) -> std::io::Result<&mut (TcpStream, BufReader<TcpStream>)> {
        if self.stream.is_none() {
            let stream = TcpStream::connect(&self.addr)?;
            stream.set_read_timeout(Some(PATIENCE))?;
            stream.set_nodelay(true)?;
            self.stream = Some((stream.try_clone()?, BufReader::new(stream)));
        }
        Ok(self.stream.as_mut().expect("just connected"))
    }

    /// One request; reconnects once when the kept-alive connection is gone.
    fn request(
        &mut self,
        method: &str,
        path: &str,
        session: Option<&str>,
        body: &str,
    ) -> std::io::Result<(u16, String)> {
        match self.try_request(method, path, session, body) {
            Ok(answer) => Ok(answer),
            Err(_) => {
                self.stream = None;
                self.try_request(method, path, session, body)
            }
        }
    }

    fn try_request(
        &mut self,
        method: &str,
        path: &str,
        session: Option<&str>,
        body: &str,
    ) -> std::io::Result<(u16, String)> {
        let addr = self.addr.clone();
        let (writer, reader) = self.connect()?;
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n",
            body.len()
        );
        if let Some(session) = session {
            head.push_str(&format!("X-Session-Id: {session}\r\n"));
        }
        head.push_str("\r\n");
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(body.as_bytes());
        writer.write_all(&bytes)?;
        let (status, length, close) = read_head(reader)?;
        let mut body = vec![0; length.unwrap_or(0)];
        reader.read_exact(&mut body)?;
        if close {
            self.stream = None;
        }
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    }
}

/// Reads a response head: status, `Content-Length`, `Connection: close`.
fn read_head(reader: &mut BufReader<TcpStream>) -> std::io::Result<(u16, Option<usize>, bool)> {
    let (mut status, mut length, mut close) = (0, None, false);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "connection closed"));
        }
        let line = line.trim_end();
        if line.is_empty() {
            return Ok((status, length, close));
        }
        if let Some(rest) = line.strip_prefix("HTTP/1.1 ") {
            status = rest.get(..3).and_then(|s| s.parse().ok()).unwrap_or(0);
        } else if let Some((name, value)) = line.split_once(':') {
            match name.to_ascii_lowercase().as_str() {
                "content-length" => length = value.trim().parse().ok(),
                "connection" => close = value.trim().eq_ignore_ascii_case("close"),
                _ => {}
            }
        }
    }
}

/// An HTTP session: `POST /send` for requests, `GET /stream` (SSE) for replies.
struct HttpConn {
    client: HttpClient,
    session: String,
    stream: BufReader<TcpStream>,
    chunked: bool,
    buffer: Vec<u8>,
}

impl HttpConn {
    fn open(addr: &str) -> std::io::Result<Self> {
        let mut client = HttpClient::new(addr);
        let (status, body) = client.request("POST", "/session", None, "")?;
        if status != 200 {
            return Err(std::io::Error::other(format!("POST /session: {status} {body}")));
        }
        let body: Value = serde_json::from_str(&body).map_err(std::io::Error::other)?;
        let session = body["session_id"].as_str().ok_or_else(|| std::io::Error::other("no session_id"))?.to_owned();
        let mut stream = TcpStream::connect(addr)?;
        stream.set_read_timeout(Some(PATIENCE))?;
        write!(
            stream,
            "GET /stream HTTP/1.1\r\nHost: {addr}\r\nX-Session-Id: {session}\r\nAccept: text/event-stream\r\n\r\n"
        )?;
        let mut stream = BufReader::new(stream);
        let mut chunked = false;
        loop {
            let mut line = String::new();
            if stream.read_line(&mut line)? == 0 {
                return Err(std::io::Error::other("stream closed before its head"));
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("transfer-encoding") && value.to_ascii_lowercase().contains("chunked") {
                    chunked = true;
                }
            }
        }
        Ok(Self { client, session, stream, chunked, buffer: Vec::new() })
    }

    /// Reads more of the stream into the buffer; false at its end.
    fn fill(&mut self) -> std::io::Result<bool> {
        if !self.chunked {
            let read = self.stream.read_until(b'\n', &mut self.buffer)?;
            return Ok(read > 0);
        }
        let mut size = String::new();
        if self.stream.read_line(&mut size)? == 0 {
            return Ok(false);
        }
        let size = usize::from_str_radix(size.trim(), 16).map_err(std::io::Error::other)?;
        if size == 0 {
            return Ok(false);
        }
        let mut chunk = vec![0; size + 2];
        self.stream.read_exact(&mut chunk)?;
        self.buffer.extend_from_slice(&chunk[..size]);
        Ok(true)
    }
}

impl Conn for HttpConn {
    fn send(&mut self, line: &str) -> std::io::Result<()> {
        let (status, body) = self.client.request("POST", "/send", Some(&self.session), line)?;
        match status {
            200 => Ok(()),
            _ => Err(std::io::Error::other(format!("POST /send: {status} {body}"))),
        }
    }

    fn next(&mut self) -> std::io::Result<Option<Value>> {
        loop {
            if let Some(end) = self.buffer.windows(2).position(|w| w == b"\n\n") {
                let event: Vec<u8> = self.buffer.drain(..end + 2).collect();
                let text = std::str::from_utf8(&event).map_err(std::io::Error::other)?;
                let data = text.strip_prefix("data: ").unwrap_or(text).trim_end();
                return serde_json::from_str(data).map(Some).map_err(std::io::Error::other);
            }
            if !self.fill()? {
                return Ok(None);
            }
        }
    }
}

/// What this client knows of one of its subagents.
struct Sub {
    id: String,
    // A long task may be running: never await or merge it.
    long: bool,
    // Terminated: requests naming it get refusals.
    gone: bool,
}

/// One client session's state and random source.
struct Client<'a> {
    conn: Box<dyn Conn>,
    stats: &'a Stats,
    rng: fastrand::Rng,
    subs: Vec<Sub>,
    next_req: u64,
}

enum Failure {
    // The reply never came, or the connection broke.
    Lost(String),
}

impl Client<'_> {
    /// Sends `message` with a fresh id and waits for the reply to it.
    fn call(&mut self, mut message: Value) -> Result<Value, Failure> {
        self.next_req += 1;
        let id = format!("r{}", self.next_req);
        message["id"] = json!(id);
        self.raw(&message.to_string(), &id)
    }

    /// Sends `line` as is and waits for the reply with `req_id` (`""` for a
    /// line the host cannot read an id from), counting the events between.
    fn raw(&mut self, line: &str, req_id: &str) -> Result<Value, Failure> {
        let started = Instant::now();
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        self.conn.send(line).map_err(|err| Failure::Lost(format!("send: {err}")))?;
        loop {
            let message = match self.conn.next() {
                Ok(Some(message)) => message,
                Ok(None) => return Err(Failure::Lost("the session's output ended".into())),
                Err(err) => return Err(Failure::Lost(format!("read: {err}"))),
            };
            if message["req_id"].as_str() == Some(req_id) {
                self.stats.replies.fetch_add(1, Ordering::Relaxed);
                self.stats.latency(started.elapsed());
                if message["type"] == "error" {
                    self.stats.error(message["code"].as_str().unwrap_or("?"));
                }
                return Ok(message);
            }
            if message.get("req_id").is_some() && message["type"] != "SUBAGENT_EVENT" {
                self.stats.unexpected.fetch_add(1, Ordering::Relaxed);
            } else {
                self.stats.events.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn pick(&mut self, usable: impl Fn(&Sub) -> bool) -> Option<usize> {
        let candidates: Vec<usize> = (0..self.subs.len()).filter(|&i| usable(&self.subs[i])).collect();
        (!candidates.is_empty()).then(|| candidates[self.rng.usize(..candidates.len())])
    }

    fn id_of(&self, sub: usize) -> String {
        self.subs[sub].id.clone()
    }

    fn short_script(&mut self) -> Value {
        let mut steps = Vec::new();
        for _ in 0..self.rng.usize(0..4) {
            steps.push(match self.rng.u8(0..5) {
                0 => json!({ "sleep_ms": self.rng.u64(0..20) }),
                1 => json!({ "progress": "working" }),
                2 => json!({ "wait_message": { "timeout_ms": self.rng.u64(0..5) } }),
                3 => json!({ "spawn": { "agent": { "name": "scripted-child", "model": "m" },
                                        "task": { "name": "c", "instruction": "child work" } } }),
                _ => json!({ "return": { "answer": self.rng.u8(0..3) } }),
            });
        }
        if self.rng.u8(0..10) == 0 {
            steps.push(json!({ "fail": "planned failure" }));
        }
        json!(steps)
    }

    /// Runs one random request.
    fn step(&mut self) -> Result<(), Failure> {
        match self.rng.u8(0..100) {
            0..=14 => {
                let parent = match self.rng.bool() {
                    true => self.pick(|s| !s.gone).map(|s| self.id_of(s)),
                    false => None,
                };
                let name = format!("w{}", self.rng.u16(..));
                let mut request = json!({ "type": "SUBAGENT_SPAWN_REQ", "agent": { "name": name, "model": "soak" } });
                if let Some(parent) = parent {
                    request["parent_agent_id"] = json!(parent);
                }
                let reply = self.call(request)?;
                if let Some(id) = reply["subagent_id"].as_str() {
                    self.subs.push(Sub { id: id.to_owned(), long: false, gone: false });
                }
            }
            15..=38 => {
                let Some(sub) = self.pick(|s| !s.gone) else { return Ok(()) };
                let long = self.rng.u8(0..6) == 0;
                let script = if long { json!([{ "sleep_ms": LONG_MS }]) } else { self.short_script() };
                let task = json!({ "name": "t", "instruction": "soak", "metadata": { "script": script } });
                let id = self.id_of(sub);
                let reply = self.call(json!({ "type": "SUBAGENT_DELEGATE_REQ", "subagent_id": id, "task": task }))?;
                if reply["accepted"] == true {
                    self.subs[sub].long = long;
                }
            }
            39..=53 => {
                let Some(sub) = self.pick(|s| !s.long) else { return Ok(()) };
                let id = self.id_of(sub);
                self.call(json!({ "type": "SUBAGENT_AWAIT_REQ", "subagent_id": id }))?;
            }
            54..=61 => {
                self.call(json!({ "type": "SUBAGENT_LIST_REQ" }))?;
            }
            62..=69 => {
                let Some(sub) = self.pick(|_| true) else { return Ok(()) };
                let to = self.id_of(sub);
                let message = json!({ "type": "note", "content": { "n": self.next_req } });
                self.call(json!({ "type": "SUBAGENT_MESSAGE_REQ", "from_subagent_id": "soak-client",
                                  "to_subagent_id": to, "message": message }))?;
            }
            70..=75 => {
                let Some(sub) = self.pick(|_| true) else { return Ok(()) };
                let id = self.id_of(sub);
                self.call(json!({ "type": "SUBAGENT_CANCEL_REQ", "subagent_id": id }))?;
                self.subs[sub].long = false;
            }
            76..=81 => {
                let Some(sub) = self.pick(|s| !s.gone) else { return Ok(()) };
                let id = self.id_of(sub);
                self.call(json!({ "type": "SUBAGENT_TERMINATE_REQ", "subagent_id": id }))?;
                self.subs[sub].long = false;
                self.subs[sub].gone = true;
            }
            82..=84 => {
                let picks: Vec<usize> = (0..3).filter_map(|_| self.pick(|s| !s.long)).collect();
                let picks: Vec<String> = picks.into_iter().map(|s| self.id_of(s)).collect();
                if picks.is_empty() {
                    return Ok(());
                }
                let strategy = if self.rng.bool() { "voting" } else { "hierarchical_summary" };
                self.call(json!({ "type": "SUBAGENT_MERGE_REQ", "subagent_ids": picks, "strategy": strategy }))?;
            }
            85..=89 => {
                self.call(json!({ "type": "ping" }))?;
            }
            _ => self.bad_line()?,
        }
        Ok(())
    }

    /// A line the host must refuse with a typed error, the session going on.
    fn bad_line(&mut self) -> Result<(), Failure> {
        match self.rng.u16(0..1000) {
            0 => {
                let line = format!("{{\"type\":\"ping\",\"pad\":\"{}\"}}", "x".repeat(OVERSIZED));
                self.raw(&line, "")?;
            }
            1..=249 => {
                self.raw("this is not json", "")?;
            }
            250..=499 => {
                self.call(json!({ "type": "SUBAGENT_TELEPORT_REQ" }))?;
            }
            500..=749 => {
                self.call(json!({ "type": "SUBAGENT_SPAWN_REQ", "agent": { "name": 7, "model": "m" } }))?;
            }
            _ => {
                self.call(json!({ "type": "SUBAGENT_AWAIT_REQ", "subagent_id": "sub_ffffffff" }))?;
            }
        }
        Ok(())
    }
}

/// One client thread: sessions one after another until `stop`.
fn client_loop(tcp: Option<String>, http: Option<String>, seed: u64, stats: Arc<Stats>, stop: Arc<AtomicBool>) {
    let mut rng = fastrand::Rng::with_seed(seed);
    while !stop.load(Ordering::Relaxed) {
        let over_http = match (&tcp, &http) {
            (Some(_), Some(_)) => rng.bool(),
            (None, Some(_)) => true,
            _ => false,
        };
        let conn: std::io::Result<Box<dyn Conn>> = if over_http {
            HttpConn::open(http.as_deref().expect("http")).map(|c| Box::new(c) as Box<dyn Conn>)
        } else {
            TcpConn::open(tcp.as_deref().expect("tcp")).map(|c| Box::new(c) as Box<dyn Conn>)
        };
        let conn = match conn {
            Ok(conn) => conn,
            Err(err) => {
                eprintln!("soak: cannot open a session: {err}");
                stats.session_failures.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
        };
        let counter = if over_http { &stats.sessions_http } else { &stats.sessions_tcp };
        counter.fetch_add(1, Ordering::Relaxed);
        let mut client =
            Client { conn, stats: &stats, rng: fastrand::Rng::with_seed(rng.u64(..)), subs: Vec::new(), next_req: 0 };
        if let Err(Failure::Lost(why)) = run_session(&mut client, over_http, &stop) {
            stats.lost.fetch_add(1, Ordering::Relaxed);
            eprintln!("soak: lost a reply ({why}); session dropped");
        }
    }
}

fn run_session(client: &mut Client<'_>, over_http: bool, stop: &AtomicBool) -> Result<(), Failure> {
    let reply = client.call(json!({ "type": "handshake/req", "agent_id": "soak", "agent_caps": ["multi_agent"],
                                    "auth_token": "", "a2e": "1.0" }))?;
    if reply["ok"] != true {
        return Err(Failure::Lost(format!("handshake refused: {reply}")));
    }
    let steps = client.rng.usize(50..=400);
    for _ in 0..steps {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        client.step()?;
    }
    // HTTP sessions end by `shutdown` (else they would wait for the idle
    // timeout); TCP ones by `shutdown` or by hanging up.
    if over_http || client.rng.bool() {
        let reply = client.call(json!({ "type": "shutdown", "timeout": 0 }))?;
        if reply["type"] != "shutdown/resp" {
            client.stats.unexpected.fetch_add(1, Ordering::Relaxed);
        }
    }
    Ok(())
}

/// Resident set size of `pid` in KiB.
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn open_fds(pid: u32) -> Option<usize> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count())
}

fn server_binary(explicit: Option<String>) -> String {
    explicit.unwrap_or_else(|| {
        // target/release/examples/soak → target/release/subagentd
        let exe = std::env::current_exe().expect("current exe");
        let dir = exe.parent().and_then(|p| p.parent()).expect("target dir");
        dir.join("subagentd").to_string_lossy().into_owned()
    })
}

/// Starts `subagentd` on ephemeral ports; returns it, its addresses and its
/// stderr lines (kept draining so it never blocks).
fn start_server(path: &str) -> Result<(Child, String, String, mpsc::Receiver<String>), String> {
    let mut child = Command::new(path)
        .args(["serve", "--store", "memory", "--tcp", "127.0.0.1:0", "--http", "127.0.0.1:0"])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| format!("cannot start {path}: {err} (build it first: cargo build --release)"))?;
    let stderr = child.stderr.take().expect("piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    let (mut tcp, mut http) = (None, None);
    let deadline = Instant::now() + Duration::from_secs(30);
    while tcp.is_none() || http.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx.recv_timeout(left).map_err(|_| "subagentd did not report its addresses".to_owned())?;
        if let Some(addr) = line.strip_prefix("subagentd: tcp listening on ") {
            tcp = Some(addr.to_owned());
        } else if let Some(addr) = line.strip_prefix("subagentd: http listening on ") {
            http = Some(addr.to_owned());
        }
    }
    Ok((child, tcp.expect("tcp"), http.expect("http"), rx))
}

fn health_sessions(addr: &str) -> Option<u64> {
    let (status, body) = HttpClient::new(addr).request("GET", "/health", None, "").ok()?;
    (status == 200).then_some(())?;
    serde_json::from_str::<Value>(&body).ok()?["sessions"].as_u64()
}

/// The lowest, median and highest of `values`.
fn spread(values: &[u64]) -> Option<(u64, u64, u64)> {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    Some((*sorted.first()?, sorted[sorted.len() / 2], *sorted.last()?))
}

fn mib(kib: Option<u64>) -> String {
    kib.map_or_else(|| "n/a".to_owned(), |k| format!("{:.1} MiB", k as f64 / 1024.0))
}

fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            if !message.is_empty() {
                eprintln!("soak: {message}");
            }
            eprintln!("usage: soak [--minutes N] [--connections K] [--seed S] [--warmup-seconds W] [--server PATH] [--addr-tcp ADDR] [--addr-http ADDR] [--pid PID]");
            std::process::exit(2);
        }
    };
    let (mut server, tcp, http, server_log, pid) = if args.addr_tcp.is_some() || args.addr_http.is_some() {
        (None, args.addr_tcp.clone(), args.addr_http.clone(), None, args.pid)
    } else {
        let path = server_binary(args.server.clone());
        match start_server(&path) {
            Ok((child, tcp, http, log)) => {
                let pid = child.id();
                (Some(child), Some(tcp), Some(http), Some(log), Some(pid))
            }
            Err(err) => {
                eprintln!("soak: {err}");
                std::process::exit(1);
            }
        }
    };
    let total = Duration::from_secs_f64(args.minutes * 60.0);
    let warmup = args.warmup.unwrap_or_else(|| (total / 10).min(Duration::from_secs(60)));
    println!(
        "soak: {:.1} min, {} clients (tcp {}, http {}), seed {}, warm-up {:.0} s, server pid {}",
        args.minutes,
        args.connections,
        tcp.as_deref().unwrap_or("-"),
        http.as_deref().unwrap_or("-"),
        args.seed,
        warmup.as_secs_f64(),
        pid.map_or_else(|| "n/a".into(), |p| p.to_string()),
    );
    let read_rss = || pid.and_then(rss_kib);
    let start_rss = read_rss();
    println!(
        "{:>8}  {:>10}  {:>8}  {:>11}  {:>18}  {:>5}  point",
        "elapsed", "requests", "req/s", "rss", "min/median/max MiB", "fds"
    );
    // One table line: instant RSS, and the lowest, median and highest of
    // the per-second samples since the previous line.
    let report = |elapsed: Duration, requests: u64, last: &mut (Duration, u64), window: &[u64], point: &str| {
        let rate = (requests - last.1) as f64 / (elapsed - last.0).as_secs_f64().max(1e-9);
        *last = (elapsed, requests);
        let fds = pid.and_then(open_fds).map_or_else(|| "n/a".into(), |n| n.to_string());
        let rss = read_rss();
        let range = match spread(window) {
            Some((low, median, high)) => {
                format!("{:.1}/{:.1}/{:.1}", low as f64 / 1024.0, median as f64 / 1024.0, high as f64 / 1024.0)
            }
            None => "-".into(),
        };
        println!(
            "{:>7.0}s  {:>10}  {:>8.0}  {:>11}  {:>18}  {:>5}  {point}",
            elapsed.as_secs_f64(),
            requests,
            rate,
            mib(rss),
            range,
            fds
        );
        rss
    };
    let mut last = (Duration::ZERO, 0);
    report(Duration::ZERO, 0, &mut last, &[], "start");

    let stats = Arc::new(Stats::default());
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut seeds = fastrand::Rng::with_seed(args.seed);
    let clients: Vec<_> = (0..args.connections)
        .map(|i| {
            // Half the clients prefer TCP, half HTTP; each mixes when both exist.
            let (tcp, http) = match (&tcp, &http, i % 2) {
                (Some(t), Some(_), 0) => (Some(t.clone()), None),
                (Some(_), Some(h), _) => (None, Some(h.clone())),
                _ => (tcp.clone(), http.clone()),
            };
            let (stats, stop, seed) = (stats.clone(), stop.clone(), seeds.u64(..));
            std::thread::spawn(move || client_loop(tcp, http, seed, stats, stop))
        })
        .collect();

    // Samples RSS every second; prints a line every minute and at the points.
    let middle = total / 2;
    let (mut warm_rss, mut middle_rss, mut end_rss) = (None, None, None);
    let mut samples: Vec<(Duration, u64)> = Vec::new();
    let mut since_line = 0;
    let mut next_minute = Duration::from_secs(60);
    loop {
        let left = total.saturating_sub(started.elapsed());
        std::thread::sleep(left.clamp(Duration::from_millis(50), Duration::from_secs(1)));
        let elapsed = started.elapsed();
        samples.extend(read_rss().map(|rss| (elapsed, rss)));
        let requests = stats.requests.load(Ordering::Relaxed);
        let window: Vec<u64> = samples[since_line..].iter().map(|(_, rss)| *rss).collect();
        let point = if warm_rss.is_none() && elapsed >= warmup {
            Some("after warm-up")
        } else if middle_rss.is_none() && elapsed >= middle {
            Some("middle")
        } else if elapsed >= total {
            Some("end")
        } else if elapsed >= next_minute {
            Some("")
        } else {
            None
        };
        if let Some(point) = point {
            let rss = report(elapsed, requests, &mut last, &window, point);
            since_line = samples.len();
            match point {
                "after warm-up" => warm_rss = rss,
                "middle" => middle_rss = rss,
                "end" => end_rss = rss,
                _ => {}
            }
        }
        while next_minute <= elapsed {
            next_minute += Duration::from_secs(60);
        }
        if elapsed >= total {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let stopping = Instant::now();
    for client in clients {
        let _ = client.join();
    }
    let joined = stopping.elapsed();
    let elapsed = started.elapsed();
    // Every client has ended its session: the server should hold none.
    let mut idle_sessions = None;
    if let Some(http) = &http {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            idle_sessions = health_sessions(http);
            if idle_sessions == Some(0) || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let emptied = stopping.elapsed();
    let drained_rss = report(started.elapsed(), stats.requests.load(Ordering::Relaxed), &mut last, &[], "clients gone");

    let requests = stats.requests.load(Ordering::Relaxed);
    let replies = stats.replies.load(Ordering::Relaxed);
    println!();
    println!(
        "requests {requests}, replies {replies}, {:.0} req/s; lost {}, unexpected replies {}, events {}",
        replies as f64 / elapsed.as_secs_f64(),
        stats.lost.load(Ordering::Relaxed),
        stats.unexpected.load(Ordering::Relaxed),
        stats.events.load(Ordering::Relaxed),
    );
    println!(
        "sessions: tcp {}, http {}, failed to open {}; clients done in {:.1} s; open on the server {:.1} s after the stop: {}",
        stats.sessions_tcp.load(Ordering::Relaxed),
        stats.sessions_http.load(Ordering::Relaxed),
        stats.session_failures.load(Ordering::Relaxed),
        joined.as_secs_f64(),
        emptied.as_secs_f64(),
        idle_sessions.map_or_else(|| "n/a".into(), |n| n.to_string()),
    );
    println!(
        "latency (bucket bound): p50 <= {:?}, p99 <= {:?}, p99.9 <= {:?}",
        stats.percentile(0.5),
        stats.percentile(0.99),
        stats.percentile(0.999)
    );
    let errors = stats.errors.lock().unwrap().clone();
    let total_errors: u64 = errors.values().sum();
    let listed: Vec<String> = errors.iter().map(|(code, n)| format!("{code} {n}")).collect();
    println!("errors by code ({total_errors}): {}", listed.join(", "));
    println!(
        "rss: start {}, after warm-up {}, middle {}, end {}, clients gone {}",
        mib(start_rss),
        mib(warm_rss),
        mib(middle_rss),
        mib(end_rss),
        mib(drained_rss)
    );
    // Flat means no trend. Single samples swing by a fifth either way with
    // the sessions, tasks and lines alive at that second, so one peak says
    // little: compare the median and the floor (the lowest sample, which a
    // leak raises) of the last window with those of the first window after
    // warm-up; the peaks are printed too.
    let window = (total / 10).clamp(Duration::from_secs(5), Duration::from_secs(60));
    let within = |from: Duration, to: Duration| -> Vec<u64> {
        samples.iter().filter(|(t, _)| *t >= from && *t <= to).map(|(_, rss)| *rss).collect()
    };
    let first = spread(&within(warmup, warmup + window));
    let final_window = spread(&within(total.saturating_sub(window), total + window));
    let highest = within(warmup, total + window).into_iter().max();
    if let (Some(first), Some(last), Some(highest)) = (first, final_window, highest) {
        let pct = |now: u64, then: u64| (now as f64 / then as f64 - 1.0) * 100.0;
        let flat = last.1 as f64 <= first.1 as f64 * 1.10 && last.0 as f64 <= first.0 as f64 * 1.10;
        let show = |(low, median, high): (u64, u64, u64)| {
            format!("floor {}, median {}, peak {}", mib(Some(low)), mib(Some(median)), mib(Some(high)))
        };
        println!("rss, first {:.0} s after warm-up: {}", window.as_secs_f64(), show(first));
        println!(
            "rss, last {:.0} s: {} (median {:+.1} %, floor {:+.1} %, peak {:+.1} %); highest after warm-up {}",
            window.as_secs_f64(),
            show(last),
            pct(last.1, first.1),
            pct(last.0, first.0),
            pct(last.2, first.2),
            mib(Some(highest)),
        );
        println!(
            "verdict: {}",
            if flat {
                "FLAT after warm-up (median and floor within 10 %)"
            } else {
                "NOT FLAT after warm-up (median or floor grew more than 10 %)"
            }
        );
    }
    if let Some(child) = server.as_mut() {
        let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
        let status = child.wait().map(|s| s.to_string()).unwrap_or_else(|err| err.to_string());
        println!("server stopped by SIGTERM: {status}");
        if let Some(log) = server_log {
            // Log lines grouped by their text without the timestamp.
            let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
            for line in log.try_iter() {
                let text = match line.split_once("Z ") {
                    Some((stamp, rest)) if stamp.starts_with('[') => rest.to_owned(),
                    _ => line,
                };
                *kinds.entry(text).or_default() += 1;
            }
            println!("server stderr: {} line(s)", kinds.values().sum::<u64>());
            for (text, count) in kinds.iter().take(10) {
                println!("  {count} x {text}");
            }
        }
    }
}
