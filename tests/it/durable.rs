//! Restarts of the real binary on a durable store: SQLite in a temp data
//! dir per test, or PostgreSQL (a database per test, created over
//! `DATABASE_URL` and dropped after; the `postgres` tests fail, saying how
//! to start a server, when it is unset or unreachable).
//!
//! A TCP client drives scripted workloads (multi-step tasks, tasks that
//! spawn children and await them, tasks waiting on their mailbox), the
//! server is killed (SIGKILL, or SIGTERM) in the middle, restarted on the
//! same store, and the client resumes with `resume_session_id`. After every
//! restart ([`Driver::check_restored`]):
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

use crate::common::eventually_blocking;
use crate::e2e_support::*;
use crate::fake_openai::{answer, call_tools, messages as fake_messages, FakeServer, Reply};
use crate::test_database::TestDatabase;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Stdio;
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

// ---------------------------------------------------------------------------
// The workload and what the client was told about it.

/// What a top-level worker's task does.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// `steps` progress steps, each followed by a sleep of `sleep_ms`; then
    /// returns `{"worker", "steps"}`.
    Steps { steps: usize, sleep_ms: u64 },
    /// Spawns two children (each sleeps `sleep_ms` twice around a progress
    /// step, then returns `{"child": name}`), awaits them, returns
    /// `{"worker"}` (plus the `children` the scripted adapter adds).
    Nested { sleep_ms: u64 },
    /// Waits for `messages` messages (each wait up to `timeout_ms`), then
    /// returns `{"worker"}` (plus the `messages` it got); the client sends
    /// them once its delegate is answered.
    Mailbox { messages: usize, timeout_ms: u64 },
}

/// Where a request stands: sent, answered, or (unanswered before a kill)
/// seen to have taken effect after the restart.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    NotSent,
    Sent,
    Answered,
    Effective,
}

#[derive(Debug)]
struct Message {
    content: String,
    acked: bool,
}

#[derive(Debug)]
struct Worker {
    name: String,
    kind: Kind,
    id: Option<String>,
    spawn: Phase,
    delegate: Phase,
    messages: Vec<Message>,
    // Whether its messages may be sent now (test 1 holds one back).
    messages_allowed: usize,
    // What a second task found still waiting in its mailbox at the end
    // (see `Driver::drain_mailboxes`).
    drained: Option<Vec<String>>,
}

impl Worker {
    fn new(name: String, kind: Kind) -> Self {
        let messages_allowed = match kind {
            Kind::Mailbox { messages, .. } => messages,
            _ => 0,
        };
        Self {
            name,
            kind,
            id: None,
            spawn: Phase::NotSent,
            delegate: Phase::NotSent,
            messages: Vec::new(),
            messages_allowed,
            drained: None,
        }
    }

    fn child_names(&self) -> Vec<String> {
        match self.kind {
            Kind::Nested { .. } => (0..2).map(|n| format!("{}.c{n}", self.name)).collect(),
            _ => Vec::new(),
        }
    }

    fn script(&self) -> Value {
        let name = &self.name;
        match self.kind {
            Kind::Steps { steps, sleep_ms } => {
                let mut script: Vec<Value> = (0..steps)
                    .flat_map(|n| [json!({ "progress": format!("s{n}") }), json!({ "sleep_ms": sleep_ms })])
                    .collect();
                script.push(json!({ "return": { "worker": name, "steps": steps } }));
                Value::Array(script)
            }
            Kind::Nested { sleep_ms } => {
                let mut script = vec![json!({ "progress": "start" })];
                for child in self.child_names() {
                    let steps = json!([
                        { "sleep_ms": sleep_ms },
                        { "progress": "half" },
                        { "sleep_ms": sleep_ms },
                        { "return": { "child": child } },
                    ]);
                    script.push(json!({ "spawn": {
                        "agent": { "name": child, "model": "m" },
                        "task": { "name": child, "instruction": "be a child", "metadata": { "script": steps } },
                    } }));
                }
                script.push(json!({ "await_children": {} }));
                script.push(json!({ "return": { "worker": name } }));
                Value::Array(script)
            }
            Kind::Mailbox { messages, timeout_ms } => {
                let mut script = vec![json!({ "wait_message": { "timeout_ms": timeout_ms } }); messages];
                script.push(json!({ "return": { "worker": name } }));
                Value::Array(script)
            }
        }
    }
}

/// What the client knows of one subagent (a worker or a child).
#[derive(Debug, Default)]
struct Sub {
    name: Option<String>,
    // The parent subagent of a child.
    parent: Option<String>,
    // The terminal status an event or an await told.
    told_status: Option<String>,
    // The last terminal await answer: status, result, error.
    told_answer: Option<Value>,
    // `resumed` attempts, in order.
    attempts: Vec<u32>,
    // Progress messages with the epoch (restarts so far) they came in.
    progress: Vec<(u32, String)>,
}

/// What a request id was for.
#[derive(Debug, Clone)]
enum Pending {
    Handshake,
    Spawn(usize),
    Delegate(usize),
    Await(String),
    Message(usize, usize),
    List,
    // A worker's second task, which takes what its mailbox still holds.
    Drain(usize),
    DrainAwait(usize),
}

/// A client session and its model of what it was told.
struct Driver {
    conn: Conn,
    agent_id: String,
    session_id: String,
    next_req: u64,
    pending: HashMap<String, Pending>,
    workers: Vec<Worker>,
    subs: BTreeMap<String, Sub>,
    // Restarts so far.
    epoch: u32,
    // Since the last restart: `resumed` attempts and `delegated` events.
    resumed_now: BTreeMap<String, u32>,
    delegated_now: BTreeSet<String>,
    // Answers kept for whoever asked.
    handshake: Option<Value>,
    lists: HashMap<String, Vec<Value>>,
    // `resumed` events over the client's whole life.
    resumes_seen: usize,
    // When set (a graceful stop): lines reporting a task's end are kept
    // here instead of being taken as told.
    held_at_stop: Option<Vec<Value>>,
    // The ids of the events read: events produced while no client was
    // attached are replayed at least once across crashes, and a copy (same
    // message, same id) is not a step run again.
    events_seen: BTreeSet<String>,
}

/// Whether `line` tells the client a task ended: an event, or an await's answer.
fn reports_an_end(line: &Value) -> bool {
    let event = line["type"] == "SUBAGENT_EVENT"
        && line.get("req_id").is_none()
        && ["completed", "failed", "timeout", "cancelled", "terminated"]
            .contains(&line["event"].as_str().unwrap_or(""));
    let answer = line["type"] == "SUBAGENT_AWAIT_RESP" && TERMINAL.contains(&line["status"].as_str().unwrap_or(""));
    event || answer
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

impl Driver {
    /// Connects and handshakes a new session.
    fn connect(addr: &str, agent_id: &str) -> Self {
        let mut driver = Self {
            conn: Conn::connect(addr),
            agent_id: agent_id.to_owned(),
            session_id: String::new(),
            next_req: 0,
            pending: HashMap::new(),
            workers: Vec::new(),
            subs: BTreeMap::new(),
            epoch: 0,
            resumed_now: BTreeMap::new(),
            delegated_now: BTreeSet::new(),
            handshake: None,
            lists: HashMap::new(),
            resumes_seen: 0,
            events_seen: BTreeSet::new(),
            held_at_stop: None,
        };
        let hs = driver.handshake(None);
        assert_eq!(hs["ok"], true, "{hs}");
        driver.session_id = text(&hs["session_id"]);
        assert!(!driver.session_id.is_empty());
        driver
    }

    fn handshake(&mut self, resume: Option<&str>) -> Value {
        let mut req = json!({ "type": "handshake/req", "agent_id": self.agent_id, "agent_caps": ["multi_agent"] });
        if let Some(resume) = resume {
            req["resume_session_id"] = json!(resume);
        }
        self.handshake = None;
        self.request(Pending::Handshake, req);
        self.until("the handshake is answered", PATIENCE, |d| d.handshake.is_some());
        self.handshake.take().unwrap()
    }

    /// After a restart: a new connection that sends the resuming handshake
    /// (its answer is not waited for). Requests not answered before the kill
    /// are forgotten (their effect is checked against the restored state).
    fn start_resume(&mut self, addr: &str) {
        self.pending.clear();
        self.epoch += 1;
        self.resumed_now.clear();
        self.delegated_now.clear();
        self.conn = Conn::connect(addr);
        self.handshake = None;
        let req = json!({ "type": "handshake/req", "agent_id": self.agent_id, "agent_caps": ["multi_agent"], "resume_session_id": self.session_id });
        self.request(Pending::Handshake, req);
    }

    /// After a restart: a new connection resuming the session.
    fn reconnect(&mut self, addr: &str) {
        self.start_resume(addr);
        self.until("the resuming handshake is answered", PATIENCE, |d| d.handshake.is_some());
        let session = self.session_id.clone();
        let hs = self.handshake.take().unwrap();
        assert_eq!(hs["ok"], true, "resuming {session} after restart {}: {hs}", self.epoch);
        assert_eq!(hs["session_id"], session.as_str(), "the resumed session keeps its id: {hs}");
    }

    fn request(&mut self, purpose: Pending, mut body: Value) -> String {
        self.next_req += 1;
        let id = format!("r{}", self.next_req);
        body["id"] = json!(id);
        self.pending.insert(id.clone(), purpose);
        // A failed write leaves the request unanswered, as a kill does.
        self.conn.send(&body);
        id
    }

    fn add_worker(&mut self, name: &str, kind: Kind) -> usize {
        self.workers.push(Worker::new(name.to_owned(), kind));
        let w = self.workers.len() - 1;
        self.spawn(w);
        w
    }

    fn spawn(&mut self, w: usize) {
        self.workers[w].spawn = Phase::Sent;
        let agent = json!({ "name": self.workers[w].name, "model": "m" });
        self.request(Pending::Spawn(w), json!({ "type": "SUBAGENT_SPAWN_REQ", "agent": agent }));
    }

    fn delegate(&mut self, w: usize) {
        let worker = &mut self.workers[w];
        worker.delegate = Phase::Sent;
        let id = worker.id.clone().expect("a spawned worker");
        let task = json!({ "name": worker.name, "instruction": "work", "metadata": { "script": worker.script() } });
        self.request(Pending::Delegate(w), json!({ "type": "SUBAGENT_DELEGATE_REQ", "subagent_id": id, "task": task }));
    }

    fn await_sub(&mut self, id: &str) -> String {
        self.request(Pending::Await(id.to_owned()), json!({ "type": "SUBAGENT_AWAIT_REQ", "subagent_id": id }))
    }

    /// Sends the messages a mailbox worker may get now and has not been sent.
    fn send_messages(&mut self, w: usize) {
        let Kind::Mailbox { messages, .. } = self.workers[w].kind else { return };
        let allowed = self.workers[w].messages_allowed.min(messages);
        while self.workers[w].messages.len() < allowed {
            let n = self.workers[w].messages.len();
            let content = format!("{}-m{n}", self.workers[w].name);
            self.workers[w].messages.push(Message { content: content.clone(), acked: false });
            let req = json!({
                "type": "SUBAGENT_MESSAGE_REQ",
                "from_subagent_id": self.agent_id,
                "to_subagent_id": self.workers[w].id,
                "message": { "type": "note", "content": content },
            });
            self.request(Pending::Message(w, n), req);
        }
    }

    fn list(&mut self) -> Vec<Value> {
        let req = self.request(Pending::List, json!({ "type": "SUBAGENT_LIST_REQ" }));
        self.until("the list is answered", PATIENCE, |d| d.lists.contains_key(&req));
        self.lists.remove(&req).unwrap()
    }

    fn worker_of(&self, id: &str) -> Option<usize> {
        self.workers.iter().position(|w| w.id.as_deref() == Some(id))
    }

    fn sub(&mut self, id: &str) -> &mut Sub {
        self.subs.entry(id.to_owned()).or_default()
    }

    // --- reading -----------------------------------------------------------

    fn on_line(&mut self, line: Value) {
        trace(&format!("tcp (epoch {}): {line}", self.epoch));
        if let Some(held) = self.held_at_stop.as_mut() {
            if reports_an_end(&line) {
                held.push(line);
                return;
            }
        }
        if line["type"] == "SUBAGENT_EVENT" && line.get("req_id").is_none() {
            if !self.events_seen.insert(text(&line["id"])) {
                return;
            }
            return self.on_event(&line);
        }
        let req_id = text(&line["req_id"]);
        let Some(purpose) = self.pending.remove(&req_id) else {
            panic!("a line for no request of this connection: {line}");
        };
        if line["type"] == "error" {
            panic!("request {req_id} ({purpose:?}) failed: {line}");
        }
        match purpose {
            Pending::Handshake => self.handshake = Some(line),
            Pending::List => {
                let rows = line["subagents"].as_array().expect("subagents").clone();
                self.lists.insert(req_id, rows);
            }
            Pending::Spawn(w) => {
                assert_eq!(line["status"], "READY", "{line}");
                let id = text(&line["subagent_id"]);
                let name = self.workers[w].name.clone();
                self.sub(&id).name = Some(name);
                let worker = &mut self.workers[w];
                worker.id = Some(id);
                worker.spawn = Phase::Answered;
                // A client goes on at once: delegate, then messages and an await.
                self.delegate(w);
            }
            Pending::Delegate(w) => {
                let name = &self.workers[w].name;
                assert_eq!(
                    (&line["accepted"], &line["status"]),
                    (&json!(true), &json!("RUNNING")),
                    "delegate to {name}: {line}"
                );
                self.workers[w].delegate = Phase::Answered;
                self.send_messages(w);
                let id = self.workers[w].id.clone().unwrap();
                self.await_sub(&id);
            }
            Pending::Drain(w) => {
                assert_eq!(line["accepted"], true, "the drain of {}: {line}", self.workers[w].name);
                let id = self.workers[w].id.clone().unwrap();
                self.request(Pending::DrainAwait(w), json!({ "type": "SUBAGENT_AWAIT_REQ", "subagent_id": id }));
            }
            Pending::DrainAwait(w) => {
                assert_eq!(line["status"], "COMPLETED", "the drain of {}: {line}", self.workers[w].name);
                let taken = line["result"]["messages"].as_array().cloned().unwrap_or_default();
                let left: Vec<String> = taken.iter().map(|m| text(&m["content"])).collect();
                eprintln!(
                    "{}: delivered after its task stopped waiting, left in its mailbox: {left:?}",
                    self.workers[w].name
                );
                self.workers[w].drained = Some(left);
            }
            Pending::Message(w, n) => {
                assert_eq!(line["delivered"], true, "{line}");
                self.workers[w].messages[n].acked = true;
            }
            Pending::Await(id) => {
                // Only delegated subagents are awaited: an await waits for
                // the task to end.
                let status = text(&line["status"]);
                if !TERMINAL.contains(&status.as_str()) {
                    panic!("{id}: an await answered before the task ended: {line}\n{}", self.describe());
                }
                let answer = json!({ "status": line["status"], "result": line["result"], "error": line["error"] });
                let sub = self.sub(&id);
                if let Some(told) = &sub.told_status {
                    assert_eq!(&status, told, "{id}: an await answers another end than the client was told: {line}");
                }
                if let Some(told) = &sub.told_answer {
                    assert_eq!(&answer, told, "{id}: an await answers otherwise than before: {line}");
                }
                sub.told_status = Some(status);
                sub.told_answer = Some(answer);
            }
        }
    }

    fn on_event(&mut self, event: &Value) {
        let id = text(&event["subagent_id"]);
        let content = &event["content"];
        let kind = text(&event["event"]);
        let epoch = self.epoch;
        let sub = self.subs.entry(id.clone()).or_default();
        if content["depth"].as_u64().is_some_and(|depth| depth > 0) {
            sub.parent = content["parent_agent_id"].as_str().map(str::to_owned);
        }
        match kind.as_str() {
            "resumed" => {
                let attempt = content["attempt"].as_u64().expect("attempt") as u32;
                assert!(attempt >= 2, "{id}: a resumed task's attempt is at least 2: {event}");
                if let Some(status) = &sub.told_status {
                    panic!("{id} resumed after the client was told its task ended {status}: {event}");
                }
                if let Some(last) = sub.attempts.last() {
                    assert!(attempt > *last, "{id}: attempt {attempt} after attempt {last}: {event}");
                }
                sub.attempts.push(attempt);
                self.resumed_now.insert(id, attempt);
                self.resumes_seen += 1;
            }
            "delegated" => {
                self.delegated_now.insert(id);
            }
            "progress" => {
                // A step is checkpointed before its progress line is even
                // queued: one the client saw never runs again.
                let message = text(&content["message"]);
                if let Some((seen, _)) = sub.progress.iter().find(|(_, m)| *m == message) {
                    panic!("{id}: step `{message}` ran again after a restart (first seen in epoch {seen}): {event}");
                }
                sub.progress.push((epoch, message));
            }
            "completed" | "failed" | "timeout" | "cancelled" | "terminated" => {
                sub.told_status = Some(text(&content["status"]));
            }
            _ => {}
        }
    }

    /// Reads lines until `done` holds; fails past `limit`.
    fn until(&mut self, what: &str, limit: Duration, mut done: impl FnMut(&Self) -> bool) {
        let deadline = Instant::now() + limit;
        while !done(self) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "timed out waiting until {what}\n{}", self.describe());
            match self.conn.next(left.min(Duration::from_millis(200))) {
                Next::Line(line) => self.on_line(line),
                Next::Idle => {}
                Next::Closed => panic!("the connection closed while waiting until {what}"),
            }
        }
    }

    /// Reads lines for `span` (a delay before a kill).
    fn pump_for(&mut self, span: Duration) {
        let deadline = Instant::now() + span;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            match self.conn.next(left) {
                Next::Line(line) => self.on_line(line),
                Next::Idle => return,
                Next::Closed => panic!("the connection closed while the host ran"),
            }
        }
    }

    /// After a kill: reads what the host sent before it died, to the end.
    fn drain_dead(&mut self) {
        loop {
            match self.conn.next(PATIENCE) {
                Next::Line(line) => self.on_line(line),
                Next::Closed => return,
                Next::Idle => panic!("the connection of a dead host never closed"),
            }
        }
    }

    fn describe(&self) -> String {
        let workers: Vec<String> = self
            .workers
            .iter()
            .map(|w| format!("  {} {:?} id={:?} spawn={:?} delegate={:?}", w.name, w.kind, w.id, w.spawn, w.delegate))
            .collect();
        let subs: Vec<String> = self
            .subs
            .iter()
            .map(|(id, s)| format!("  {id} {:?} told={:?} attempts={:?}", s.name, s.told_status, s.attempts))
            .collect();
        format!(
            "epoch {}; pending {:?}\nworkers:\n{}\nsubagents:\n{}",
            self.epoch,
            self.pending,
            workers.join("\n"),
            subs.join("\n")
        )
    }

    // --- the invariants ----------------------------------------------------

    /// Right after a resume: checks what the restored session lists against
    /// what the client was told, waits for every task that was running to
    /// resume, and checks that awaits answer what they answered before.
    /// Returns the list.
    fn check_restored(&mut self) -> Vec<Value> {
        // A list is a snapshot taken while its request is in flight: what
        // was told before it was asked must be in it, as told; what events
        // tell meanwhile (a restored task that ends at once, a child its
        // resumed parent spawns) may come before the reply and not be in it.
        let told_before: HashMap<String, Option<String>> =
            self.subs.iter().map(|(id, sub)| (id.clone(), sub.told_status.clone())).collect();
        let list = self.list();
        let epoch = self.epoch;
        let mut by_name: HashMap<String, Vec<&Value>> = HashMap::new();
        let mut by_id: HashMap<String, &Value> = HashMap::new();
        for row in &list {
            by_name.entry(text(&row["name"])).or_default().push(row);
            by_id.insert(text(&row["subagent_id"]), row);
        }
        // Every spawn request and every spawn step names its subagent uniquely.
        for (name, rows) in &by_name {
            assert_eq!(rows.len(), 1, "after restart {epoch}: `{name}` was spawned {} times: {rows:#?}", rows.len());
        }
        // Everything an answer or an event named before the list was asked
        // is still there, as told.
        for (id, sub) in &self.subs {
            let Some(told_before) = told_before.get(id) else {
                continue;
            };
            let row = by_id.get(id).unwrap_or_else(|| panic!("after restart {epoch}: {id} ({:?}) is gone", sub.name));
            if let Some(told) = told_before {
                assert_eq!(
                    &text(&row["status"]),
                    told,
                    "after restart {epoch}: {id} ({:?}) was told {told}: {row}",
                    sub.name
                );
            }
        }
        for w in 0..self.workers.len() {
            let name = self.workers[w].name.clone();
            let Some(row) = by_name.get(&name).map(|rows| rows[0]) else {
                // Never spawned: only a spawn nobody answered may be missing.
                assert_ne!(self.workers[w].spawn, Phase::Answered, "after restart {epoch}: {name} is gone");
                self.workers[w].spawn = Phase::NotSent;
                self.workers[w].delegate = Phase::NotSent;
                continue;
            };
            let id = text(&row["subagent_id"]);
            assert_eq!(row["depth"], 0, "{row}");
            if let Some(known) = &self.workers[w].id {
                assert_eq!(known, &id, "after restart {epoch}: {name} has another id: {row}");
            }
            if self.workers[w].spawn == Phase::Sent {
                // Its spawn took effect, unanswered.
                self.workers[w].spawn = Phase::Effective;
                self.workers[w].id = Some(id.clone());
                self.sub(&id).name = Some(name.clone());
            }
            let status = text(&row["status"]);
            match self.workers[w].delegate {
                Phase::Answered | Phase::Effective => {
                    assert_ne!(status, "READY", "after restart {epoch}: the delegate to {name} was answered: {row}")
                }
                Phase::Sent if status == "READY" => self.workers[w].delegate = Phase::NotSent,
                Phase::Sent => self.workers[w].delegate = Phase::Effective,
                Phase::NotSent => {
                    assert_eq!(status, "READY", "after restart {epoch}: {name} was never delegated: {row}")
                }
            }
        }
        // Children: under a nested worker, one per spawn step.
        for row in list.iter().filter(|row| row["depth"] != 0) {
            let id = text(&row["subagent_id"]);
            let name = text(&row["name"]);
            let parent = text(&row["parent_agent_id"]);
            let w = self.worker_of(&parent).unwrap_or_else(|| panic!("child {id} of an unknown parent: {row}"));
            assert!(self.workers[w].child_names().contains(&name), "after restart {epoch}: unexpected child: {row}");
            let sub = self.sub(&id);
            sub.name = Some(name);
            sub.parent = Some(parent);
        }
        // Every task that was running resumes; a child may instead have been
        // delegated just now by its resumed parent (its spawn step re-run).
        let running: Vec<(String, bool)> = list
            .iter()
            .filter(|row| row["status"] == "RUNNING" || row["status"] == "WAITING")
            .map(|row| (text(&row["subagent_id"]), row["depth"] != 0))
            .collect();
        self.until("every task that was running resumed", PATIENCE, |d| {
            running.iter().all(|(id, child)| d.resumed_now.contains_key(id) || (*child && d.delegated_now.contains(id)))
        });
        // Awaits answer again what they answered before the kill.
        let told: Vec<String> =
            self.subs.iter().filter(|(_, sub)| sub.told_answer.is_some()).map(|(id, _)| id.clone()).collect();
        let asked: Vec<String> = told.iter().map(|id| self.await_sub(id)).collect();
        self.until("the awaits of ended tasks are answered", PATIENCE, |d| {
            asked.iter().all(|req| !d.pending.contains_key(req))
        });
        list
    }

    /// After a restart: what a client does about requests it got no answer
    /// to: spawns that did not happen and delegates that did not take effect
    /// are sent again, messages never (a message is sent once), and every
    /// running task is awaited again.
    fn carry_on(&mut self) {
        for w in 0..self.workers.len() {
            match (self.workers[w].spawn, self.workers[w].delegate) {
                (Phase::NotSent, _) => self.spawn(w),
                (_, Phase::NotSent) => self.delegate(w),
                (_, _) => {
                    self.send_messages(w);
                    let id = self.workers[w].id.clone().unwrap();
                    if self.subs.get(&id).is_none_or(|sub| sub.told_answer.is_none()) {
                        self.await_sub(&id);
                    }
                }
            }
        }
    }

    /// Waits until every worker's task has ended and been awaited, then
    /// checks each result against its script, and the children.
    fn finish(&mut self, limit: Duration) {
        self.until("every worker's task ended", limit, |d| {
            d.workers
                .iter()
                .all(|w| w.id.as_ref().is_some_and(|id| d.subs.get(id).is_some_and(|sub| sub.told_answer.is_some())))
        });
        let list = self.list();
        let children: Vec<String> =
            list.iter().filter(|row| row["depth"] != 0).map(|row| text(&row["subagent_id"])).collect();
        let asked: Vec<String> = children.iter().map(|id| self.await_sub(id)).collect();
        self.until("the children are awaited", PATIENCE, |d| asked.iter().all(|req| !d.pending.contains_key(req)));
        self.drain_mailboxes();
        for w in 0..self.workers.len() {
            self.check_result(w, &list);
        }
    }

    /// A mailbox worker's waits time out (2 s each in the crash loop): a
    /// message delivered after its task stopped waiting is not in its
    /// result, and stays in its mailbox, stored, for its next task. That is
    /// no loss, and a loaded machine makes it happen: the client sends its
    /// messages once it has read the delegate's answer, or after a restart
    /// once the resumed session is checked, and a busy host or client can
    /// spend the task's 2 s before that (seen under CPU starvation: a
    /// result with `m0` only, `m1` acknowledged and left in the stored
    /// mailbox). So for a worker whose result lacks a message that was
    /// acknowledged, a second task takes what its mailbox still holds; a
    /// delivered message must be in one of the two.
    fn drain_mailboxes(&mut self) {
        let mut draining = Vec::new();
        for w in 0..self.workers.len() {
            let worker = &self.workers[w];
            let Kind::Mailbox { messages, .. } = worker.kind else { continue };
            let id = worker.id.clone().expect("spawned");
            let result = &self.subs[&id].told_answer.as_ref().expect("awaited")["result"]["messages"];
            let got: Vec<String> = result.as_array().into_iter().flatten().map(|m| text(&m["content"])).collect();
            if worker.messages.iter().all(|m| !m.acked || got.contains(&m.content)) {
                continue;
            }
            let script: Vec<Value> = (0..messages)
                .map(|_| json!({ "wait_message": { "timeout_ms": 0 } }))
                .chain([json!({ "return": { "drained": true } })])
                .collect();
            let task = json!({ "name": "drain", "instruction": "drain", "metadata": { "script": script } });
            self.request(
                Pending::Drain(w),
                json!({ "type": "SUBAGENT_DELEGATE_REQ", "subagent_id": id, "task": task }),
            );
            draining.push(w);
        }
        self.until("the mailboxes are drained", PATIENCE, |d| draining.iter().all(|w| d.workers[*w].drained.is_some()));
    }

    fn check_result(&self, w: usize, list: &[Value]) {
        let worker = &self.workers[w];
        let id = worker.id.as_deref().unwrap();
        let answer = self.subs[id].told_answer.as_ref().unwrap();
        let name = &worker.name;
        assert_eq!(answer["status"], "COMPLETED", "{name} ({id}): {answer}");
        let result = &answer["result"];
        match worker.kind {
            Kind::Steps { steps, .. } => {
                assert_eq!(result, &json!({ "worker": name, "steps": steps }), "{name} ({id})");
            }
            Kind::Nested { .. } => {
                assert_eq!(result["worker"], name.as_str(), "{name} ({id}): {result}");
                let listed: BTreeMap<String, String> = list
                    .iter()
                    .filter(|row| row["parent_agent_id"] == id)
                    .map(|row| (text(&row["subagent_id"]), text(&row["name"])))
                    .collect();
                let names: BTreeSet<String> = listed.values().cloned().collect();
                let expected: BTreeSet<String> = worker.child_names().into_iter().collect();
                assert_eq!(names, expected, "{name} ({id}): one child per spawn step: {listed:?}");
                let reported = result["children"].as_object().unwrap_or_else(|| panic!("{name}: children: {result}"));
                let reported_ids: BTreeSet<&String> = reported.keys().collect();
                assert_eq!(reported_ids, listed.keys().collect(), "{name} ({id}): the children it awaited: {result}");
                for (child, child_name) in &listed {
                    let awaited = &reported[child];
                    assert_eq!(awaited["status"], "COMPLETED", "{name}: child {child}: {awaited}");
                    assert_eq!(awaited["result"], json!({ "child": child_name }), "{name}: child {child}: {awaited}");
                    let told = self.subs[child].told_answer.as_ref().expect("awaited child");
                    assert_eq!(told["result"], json!({ "child": child_name }), "{name}: child {child}: {told}");
                }
            }
            Kind::Mailbox { .. } => {
                assert_eq!(result["worker"], name.as_str(), "{name} ({id}): {result}");
                let got: Vec<String> = result["messages"]
                    .as_array()
                    .map(|messages| messages.iter().map(|m| text(&m["content"])).collect())
                    .unwrap_or_default();
                // With what a second task found left in its mailbox (see
                // `drain_mailboxes`): each message taken once, none lost.
                let left = worker.drained.clone().unwrap_or_default();
                let taken: Vec<&str> = got.iter().chain(&left).map(String::as_str).collect();
                let sent: BTreeSet<&str> = worker.messages.iter().map(|m| m.content.as_str()).collect();
                let unique: BTreeSet<&str> = taken.iter().copied().collect();
                assert_eq!(
                    unique.len(),
                    taken.len(),
                    "{name} ({id}): a message was taken twice: {result}, left {left:?}"
                );
                assert!(unique.is_subset(&sent), "{name} ({id}): got messages never sent: {result}, left {left:?}");
                for message in worker.messages.iter().filter(|m| m.acked) {
                    assert!(
                        unique.contains(message.content.as_str()),
                        "{name} ({id}): delivered {message:?} is lost: {result}, left in its mailbox {left:?}"
                    );
                }
            }
        }
    }

    /// The progress messages of subagent `id`, with their epochs.
    fn progress_of(&self, id: &str) -> Vec<(u32, String)> {
        self.subs.get(id).map(|sub| sub.progress.clone()).unwrap_or_default()
    }

    fn id_of(&self, w: usize) -> String {
        self.workers[w].id.clone().expect("spawned")
    }
}

// ---------------------------------------------------------------------------
// 1. SIGKILL in the middle of a workload.

/// The scenario of test 1 on `backing`: results told before the kill hold,
/// running tasks resume from their checkpoints and complete, no child is
/// spawned twice, answered requests took effect; then a closed connection
/// leaves the session resumable for `tcp_resume_grace_ms`, after which it
/// ends for good.
fn kill_in_the_middle_of_a_workload(backing: Backing) {
    let started = Instant::now();
    let mut node = Node::start(backing, &format!("{CONFIG}tcp_resume_grace_ms = 1500\n"));
    let mut driver = Driver::connect(node.tcp(), "tester");
    let quick = driver.add_worker("quick", Kind::Steps { steps: 1, sleep_ms: 0 });
    let short = driver.add_worker("short", Kind::Steps { steps: 3, sleep_ms: 50 });
    let long = driver.add_worker("long", Kind::Steps { steps: 6, sleep_ms: 300 });
    let nested = driver.add_worker("nested", Kind::Nested { sleep_ms: 1_500 });
    let mailbox = driver.add_worker("mailbox", Kind::Mailbox { messages: 2, timeout_ms: 60_000 });
    // One message before the kill, the other after.
    driver.workers[mailbox].messages_allowed = 1;
    let told = |d: &Driver, w: usize| d.workers[w].id.as_ref().is_some_and(|id| d.subs[id].told_status.is_some());
    driver.until("the quick tasks are reported and the rest runs", PATIENCE, |d| {
        let quick_awaited = d.workers[quick].id.as_ref().is_some_and(|id| d.subs[id].told_answer.is_some());
        let children_running = d.delegated_now.iter().filter(|id| d.subs[*id].parent.is_some()).count() == 2;
        let message_delivered = d.workers[mailbox].messages.first().is_some_and(|m| m.acked);
        let long_started = d.workers[long].id.as_ref().is_some_and(|id| !d.subs[id].progress.is_empty());
        quick_awaited && told(d, short) && children_running && message_delivered && long_started
    });
    // Kill right after one of `long`'s progress events: its next step
    // sleeps 300 ms, so the kill lands in the middle of that step.
    let long_id = driver.id_of(long);
    let seen = driver.progress_of(&long_id).len();
    driver.until("the next progress of `long`", PATIENCE, |d| d.progress_of(&long_id).len() > seen);
    node.kill9();
    driver.drain_dead();
    let before: Vec<String> = driver.progress_of(&long_id).into_iter().map(|(_, message)| message).collect();
    assert!(driver.subs[&long_id].told_status.is_none(), "`long` ended before the kill: {before:?}");

    node.restart();
    driver.reconnect(node.tcp());
    driver.check_restored();
    // Exactly the tasks that were running resumed, each on its second run.
    let mut expected: BTreeMap<String, u32> = [long, nested, mailbox].iter().map(|w| (driver.id_of(*w), 2)).collect();
    for (id, sub) in &driver.subs {
        if sub.parent.is_some() {
            expected.insert(id.clone(), 2);
        }
    }
    assert_eq!(expected.len(), 5, "{}", driver.describe());
    assert_eq!(driver.resumed_now, expected, "the tasks running at the kill resumed, once each");
    // The second message goes to the resumed mailbox task.
    driver.workers[mailbox].messages_allowed = 2;
    driver.carry_on();
    driver.finish(PATIENCE);
    // Nothing else resumed meanwhile.
    assert_eq!(driver.resumed_now, expected);
    // `long` went on after its last completed step: no step ran twice, none was skipped.
    let after: Vec<String> =
        driver.progress_of(&long_id).into_iter().filter(|(epoch, _)| *epoch == 1).map(|(_, m)| m).collect();
    let all: Vec<String> = (0..6).map(|n| format!("s{n}")).collect();
    assert_eq!(after, all[before.len()..].to_vec(), "`long`'s steps after the restart (before it: {before:?})");
    let mailbox_result = &driver.subs[&driver.id_of(mailbox)].told_answer.as_ref().unwrap()["result"];
    let contents: Vec<&Value> = mailbox_result["messages"].as_array().unwrap().iter().map(|m| &m["content"]).collect();
    assert_eq!(contents, [&json!("mailbox-m0"), &json!("mailbox-m1")], "{mailbox_result}");

    // Closing the connection ends the session for good: it cannot be resumed.
    let driver_subagents = driver.subs.len();
    let session = driver.session_id.clone();
    drop(driver);
    // Within its grace the session is resumed, whole.
    let mut other = LineClient::connect(node.tcp());
    let hs = json!({ "type": "handshake/req", "id": "h", "agent_id": "tester", "agent_caps": ["multi_agent"], "resume_session_id": session });
    let resumed = eventually_blocking("the session is no longer in use", PATIENCE, || {
        other.send(&hs);
        let reply = other.reply("h");
        (reply["reason"] != "session_in_use").then_some(reply)
    });
    assert_eq!(resumed["ok"], true, "a dropped connection's session is resumable within its grace: {resumed}");
    other.send(&json!({ "type": "SUBAGENT_LIST_REQ", "id": "l" }));
    let listed = other.reply("l");
    assert_eq!(listed["subagents"].as_array().map(Vec::len), Some(driver_subagents), "{listed}");
    // Past its grace it ends for good. Waiting for no open session is not
    // enough: when `other` resumed the session itself (before the host had
    // adopted it), its drop parks the session again, and between that
    // connection's end and the adoption no session is open, though the
    // session is resumable. Its end for good is the adopted session's
    // expiry, logged after the end is recorded.
    drop(other);
    let ended = format!("session {} ended: transport=http", session.as_str());
    node.server.wait_stderr("the session's expiry", |line| line.contains(&ended) && line.contains("end=Stopped"));
    node.server.wait_sessions(0);
    let mut other = LineClient::connect(node.tcp());
    other.send(&hs);
    let refused = other.reply("h");
    assert_eq!((&refused["ok"], &refused["reason"]), (&json!(false), &json!("unknown_session")), "{refused}");
    eprintln!("kill in the middle of a workload ({}): {:?}", node.backing.kind(), started.elapsed());
}

#[test]
fn durable_sqlite_kill_in_the_middle_of_a_workload() {
    kill_in_the_middle_of_a_workload(Backing::sqlite());
}

#[test]
fn durable_postgres_kill_in_the_middle_of_a_workload() {
    kill_in_the_middle_of_a_workload(Backing::postgres());
}

/// A result the client was told is reported again after a restart, also for
/// a subagent that has an unread message in its mailbox (a message sent to
/// it after its task ended): found by the crash loop, where a mailbox
/// snapshot committed behind its checkpoint leaves such a message.
#[test]
fn durable_a_finished_subagent_with_an_unread_message_reports_its_result_after_a_restart() {
    let mut node = Node::start(Backing::sqlite(), CONFIG);
    let mut client = LineClient::connect(node.tcp());
    let hs = json!({ "type": "handshake/req", "id": "h", "agent_id": "c", "agent_caps": ["multi_agent"] });
    client.send(&hs);
    let session = text(&client.reply("h")["session_id"]);
    client.send(&json!({ "type": "SUBAGENT_SPAWN_REQ", "id": "s", "agent": { "name": "done", "model": "m" } }));
    let id = text(&client.reply("s")["subagent_id"]);
    let task = json!({ "name": "t", "instruction": "i", "metadata": { "script": [{ "return": { "x": 1 } }] } });
    client.send(&json!({ "type": "SUBAGENT_DELEGATE_REQ", "id": "d", "subagent_id": id, "task": task }));
    assert_eq!(client.reply("d")["accepted"], true);
    client.send(&json!({ "type": "SUBAGENT_AWAIT_REQ", "id": "a", "subagent_id": id }));
    let told = client.reply("a");
    assert_eq!((&told["status"], &told["result"]), (&json!("COMPLETED"), &json!({ "x": 1 })), "{told}");
    let message = json!({ "type": "note", "content": "too late" });
    client.send(&json!({ "type": "SUBAGENT_MESSAGE_REQ", "id": "m", "from_subagent_id": "c", "to_subagent_id": id, "message": message }));
    assert_eq!(client.reply("m")["delivered"], true);
    node.kill9();
    node.restart();
    let mut client = LineClient::connect(node.tcp());
    client.send(&json!({ "type": "handshake/req", "id": "h", "agent_id": "c", "agent_caps": ["multi_agent"], "resume_session_id": session }));
    assert_eq!(client.reply("h")["ok"], true);
    client.send(&json!({ "type": "SUBAGENT_LIST_REQ", "id": "l" }));
    let list = client.reply("l");
    assert_eq!(list["subagents"][0]["status"], "COMPLETED", "{list}");
    client.send(&json!({ "type": "SUBAGENT_AWAIT_REQ", "id": "a", "subagent_id": id }));
    let again = client.reply("a");
    let fields = |v: &Value| json!({ "status": v["status"], "result": v["result"], "error": v["error"] });
    assert_eq!(fields(&again), fields(&told), "the await told before the kill, answered after the restart: {again}");
}

/// A message delivered to a waiting task is taken once, whatever the kill
/// point: the task's checkpoint (holding the message) and its mailbox
/// snapshot (no longer holding it) must not be committed apart. Every change
/// is committed on its own here (`batch_max = 1`).
#[test]
fn durable_a_delivered_message_is_taken_once_whatever_the_kill_point() {
    let seed = seed();
    eprintln!("message kill points: seed {seed} (replay with DURABLE_SEED={seed})");
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut node = Node::start(Backing::sqlite(), &format!("{CONFIG}[store]\nbatch_max = 1\n"));
    let mut conn = Conn::connect(node.tcp());
    let hs = |resume: Option<&str>| {
        let mut req = json!({ "type": "handshake/req", "id": "h", "agent_id": "c", "agent_caps": ["multi_agent"] });
        if let Some(resume) = resume {
            req["resume_session_id"] = json!(resume);
        }
        req
    };
    conn.send(&hs(None));
    let session = text(&conn.reply("h")["session_id"]);
    // Takes one message (a second wait would take a duplicate), returns.
    let script = json!([{ "wait_message": { "timeout_ms": 1_000 } }, { "wait_message": { "timeout_ms": 100 } }, { "return": {} }]);
    for round in 0..12 {
        conn.send(
            &json!({ "type": "SUBAGENT_SPAWN_REQ", "id": "s", "agent": { "name": format!("m{round}"), "model": "m" } }),
        );
        let id = text(&conn.reply("s")["subagent_id"]);
        let task = json!({ "name": "t", "instruction": "i", "metadata": { "script": script } });
        conn.send(&json!({ "type": "SUBAGENT_DELEGATE_REQ", "id": "d", "subagent_id": id, "task": task }));
        assert_eq!(conn.reply("d")["accepted"], true);
        let message = json!({ "type": "note", "content": format!("hello {round}") });
        conn.send(&json!({ "type": "SUBAGENT_MESSAGE_REQ", "id": "m", "from_subagent_id": "c", "to_subagent_id": id, "message": message }));
        std::thread::sleep(Duration::from_micros(rng.u64(0..=6_000)));
        node.kill9();
        node.restart();
        conn = Conn::connect(node.tcp());
        conn.send(&hs(Some(&session)));
        assert_eq!(conn.reply("h")["ok"], true);
        conn.send(&json!({ "type": "SUBAGENT_AWAIT_REQ", "id": "a", "subagent_id": id }));
        let done = conn.reply("a");
        assert_eq!(done["status"], "COMPLETED", "round {round} (seed {seed}): {done}");
        let got: Vec<String> = done["result"]["messages"]
            .as_array()
            .map(|messages| messages.iter().map(|m| text(&m["content"])).collect())
            .unwrap_or_default();
        assert!(got.len() <= 1, "round {round} (seed {seed}): the message was taken {} times: {done}", got.len());
    }
}

/// A stored session resumes only under the auth that opened it; an id the
/// store does not have is `unknown_session`.
#[test]
fn durable_a_session_resumes_only_with_the_token_that_opened_it() {
    let config = format!("{CONFIG}[auth]\ntokens = [\"token-a\", \"token-b\"]\n");
    let mut node = Node::start(Backing::sqlite(), &config);
    let mut client = LineClient::connect(node.tcp());
    let hs = |id: &str, token: &str, resume: Option<&str>| {
        let mut req = json!({ "type": "handshake/req", "id": id, "agent_id": "a", "agent_caps": ["multi_agent"], "auth_token": token });
        if let Some(resume) = resume {
            req["resume_session_id"] = json!(resume);
        }
        req
    };
    client.send(&hs("h", "token-a", None));
    let session = text(&client.reply("h")["session_id"]);
    client.send(&json!({ "type": "SUBAGENT_SPAWN_REQ", "id": "s", "agent": { "name": "kept", "model": "m" } }));
    let kept = text(&client.reply("s")["subagent_id"]);
    node.kill9();
    node.restart();
    let mut client = LineClient::connect(node.tcp());
    for (req, token, resume, reason) in
        [("h1", "token-b", session.as_str(), "auth_failed"), ("h2", "token-a", "no-such-session", "unknown_session")]
    {
        client.send(&hs(req, token, Some(resume)));
        let refused = client.reply(req);
        assert_eq!((&refused["ok"], &refused["reason"]), (&json!(false), &json!(reason)), "{refused}");
    }
    client.send(&hs("h3", "token-a", Some(&session)));
    let resumed = client.reply("h3");
    assert_eq!((&resumed["ok"], &resumed["session_id"]), (&json!(true), &json!(session)), "{resumed}");
    client.send(&json!({ "type": "SUBAGENT_LIST_REQ", "id": "l" }));
    let list = client.reply("l");
    let ids: Vec<&Value> = list["subagents"].as_array().unwrap().iter().map(|row| &row["subagent_id"]).collect();
    assert_eq!(ids, [&json!(kept)], "{list}");
}

// ---------------------------------------------------------------------------
// 2. The crash loop.

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

// ---------------------------------------------------------------------------
// 3. HTTP across a restart.

/// `POST /send` of `lines`; asserts 200.
fn send_lines(addr: &str, session: &str, lines: &[Value]) {
    let body: Vec<String> = lines.iter().map(Value::to_string).collect();
    let (status, _, reply) = http_with_headers(addr, "POST", "/send", &[("X-Session-Id", session)], &body.join("\n"));
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply, json!({ "ok": true }));
}

/// Everything an HTTP client read from its streams: `(id, message)` in order.
#[derive(Default)]
struct SseLog {
    events: Vec<(u64, Value)>,
}

impl SseLog {
    /// Reads the next event of `stream` (it must have an id) into the log.
    fn read(&mut self, stream: &mut SseStream) -> Value {
        let (name, data) = stream.next_event().expect("an event before the stream ends");
        trace(&format!("sse {}: {data}", stream.last_id));
        assert_eq!(name, None, "an unexpected named event: {data}");
        self.events.push((stream.last_id, data.clone()));
        data
    }

    /// Reads until a message for which `wanted` holds.
    fn read_until(&mut self, stream: &mut SseStream, what: &str, wanted: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            assert!(Instant::now() < deadline, "no SSE message {what}");
            let data = self.read(stream);
            if wanted(&data) {
                return data;
            }
        }
    }

    /// The reply to `req_id`: already read (replies come in any order), or
    /// read now.
    fn reply(&mut self, stream: &mut SseStream, req_id: &str) -> Value {
        if let Some(reply) = self.replies(req_id).first() {
            return (*reply).clone();
        }
        self.read_until(stream, req_id, |data| data["req_id"] == req_id)
    }

    fn replies(&self, req_id: &str) -> Vec<&Value> {
        self.events.iter().map(|(_, data)| data).filter(|data| data["req_id"] == req_id).collect()
    }

    fn progress(&self, sub: &str) -> Vec<String> {
        self.events
            .iter()
            .map(|(_, data)| data)
            .filter(|data| data["subagent_id"] == sub && data["event"] == "progress")
            .map(|data| text(&data["content"]["message"]))
            .collect()
    }
}

fn event_of<'a>(sub: &'a str, event: &'a str) -> impl Fn(&Value) -> bool + 'a {
    move |data| data["subagent_id"] == sub && data["event"] == event && data.get("req_id").is_none()
}

/// Test 3 on `backing`: the same `X-Session-Id` after a restart, SSE ids
/// without a gap over a reconnect with `Last-Event-ID` and the restart, and
/// a `/send` answered right before SIGKILL taking effect once.
fn http_session_survives_a_restart(backing: Backing) {
    let started = Instant::now();
    let kind = backing.kind();
    let mut node = Node::start(backing, CONFIG);
    let addr = node.http().to_owned();
    let (status, _, ready) = http_with_headers(&addr, "GET", "/ready", &[], "");
    assert_eq!((status, &ready), (200, &json!({ "ready": true, "store": kind })));
    let (status, headers, body) = http_with_headers(&addr, "POST", "/session", &[], "");
    assert_eq!(status, 200, "{body}");
    let session = text(&body["session_id"]);
    assert_eq!(headers.get("x-session-id"), Some(&session), "the id in a header too: {headers:?}");

    let mut log = SseLog::default();
    let mut stream = SseStream::open(&addr, &session);
    send_lines(
        &addr,
        &session,
        &[
            json!({ "type": "handshake/req", "id": "h", "agent_id": "web", "agent_caps": ["multi_agent"] }),
            json!({ "type": "SUBAGENT_SPAWN_REQ", "id": "s1", "agent": { "name": "steady", "model": "m" } }),
            json!({ "type": "SUBAGENT_SPAWN_REQ", "id": "s2", "agent": { "name": "idle", "model": "m" } }),
        ],
    );
    assert_eq!(log.reply(&mut stream, "h")["ok"], true);
    let steady = text(&log.reply(&mut stream, "s1")["subagent_id"]);
    let idle = text(&log.reply(&mut stream, "s2")["subagent_id"]);
    let mut script: Vec<Value> =
        (0..6).flat_map(|n| [json!({ "progress": format!("s{n}") }), json!({ "sleep_ms": 300 })]).collect();
    script.push(json!({ "return": { "worker": "steady", "steps": 6 } }));
    let task = json!({ "name": "steady", "instruction": "i", "metadata": { "script": script } });
    send_lines(
        &addr,
        &session,
        &[json!({ "type": "SUBAGENT_DELEGATE_REQ", "id": "d1", "subagent_id": steady, "task": task })],
    );
    log.read_until(&mut stream, "s1 of steady", |d| {
        event_of(&steady, "progress")(d) && d["content"]["message"] == "s1"
    });

    // A reconnect with Last-Event-ID gets what came after that event again,
    // same ids, same lines, then what was produced meanwhile.
    drop(stream);
    node.server.wait_streams(0);
    let middle = log.events.len() / 2;
    let (middle_id, _) = log.events[middle - 1].clone();
    let mut stream = SseStream::open_after(&addr, &session, Some(middle_id));
    let mut again = SseLog::default();
    for _ in middle..log.events.len() {
        again.read(&mut stream);
    }
    assert_eq!(again.events[..], log.events[middle..], "the replay after id {middle_id}");
    log.read_until(&mut stream, "s2 of steady", |d| {
        event_of(&steady, "progress")(d) && d["content"]["message"] == "s2"
    });

    // A /send answered 200 right before SIGKILL: its requests take effect
    // after the restart (once).
    let idle_task = json!({ "name": "idle", "instruction": "i", "metadata": { "script": [{ "progress": "p" }, { "return": { "idle": true } }] } });
    send_lines(
        &addr,
        &session,
        &[
            json!({ "type": "SUBAGENT_SPAWN_REQ", "id": "s3", "agent": { "name": "late", "model": "m" } }),
            json!({ "type": "SUBAGENT_DELEGATE_REQ", "id": "d2", "subagent_id": idle, "task": idle_task }),
        ],
    );
    node.kill9();
    // Whatever the old stream still delivers counts as read.
    drain_stream(&mut log, &mut stream);
    let last_before = log.events.last().unwrap().0;

    node.restart();
    let addr = node.http().to_owned();
    let mut stream = SseStream::open_after(&addr, &session, Some(last_before));
    assert_eq!(stream.status, 200, "the same X-Session-Id works after the restart");
    log.read_until(&mut stream, "`steady` resumed", |d| {
        event_of(&steady, "resumed")(d) && d["content"]["attempt"] == 2
    });
    log.read_until(&mut stream, "`steady` completed", event_of(&steady, "completed"));
    send_lines(
        &addr,
        &session,
        &[
            json!({ "type": "SUBAGENT_AWAIT_REQ", "id": "a1", "subagent_id": steady }),
            json!({ "type": "SUBAGENT_AWAIT_REQ", "id": "a2", "subagent_id": idle }),
            json!({ "type": "SUBAGENT_LIST_REQ", "id": "l1" }),
        ],
    );
    let a1 = log.reply(&mut stream, "a1");
    let a2 = log.reply(&mut stream, "a2");
    let list = log.reply(&mut stream, "l1");
    assert_eq!(
        (&a1["status"], &a1["result"]),
        (&json!("COMPLETED"), &json!({ "worker": "steady", "steps": 6 })),
        "{a1}"
    );
    assert_eq!(
        (&a2["status"], &a2["result"]),
        (&json!("COMPLETED"), &json!({ "idle": true })),
        "the delegate sent before the kill: {a2}"
    );
    let mut names: Vec<String> = list["subagents"].as_array().unwrap().iter().map(|row| text(&row["name"])).collect();
    names.sort();
    assert_eq!(names, ["idle", "late", "steady"], "the spawn sent before the kill happened, once: {list}");
    // Each request was answered once, across the restart.
    for req in ["h", "s1", "s2", "d1", "s3", "d2", "a1", "a2", "l1"] {
        assert_eq!(log.replies(req).len(), 1, "replies to {req}: {:?}", log.replies(req));
    }
    // The SSE ids ran on without a gap or a repeat, and no step of `steady`
    // was lost or repeated.
    let ids: Vec<u64> = log.events.iter().map(|(id, _)| *id).collect();
    let expected: Vec<u64> = (ids[0]..ids[0] + ids.len() as u64).collect();
    assert_eq!(ids, expected, "SSE ids across reconnect and restart");
    assert_eq!(log.progress(&steady), (0..6).map(|n| format!("s{n}")).collect::<Vec<_>>());
    eprintln!("http across a restart ({kind}): {:?}", started.elapsed());
}

#[test]
fn durable_sqlite_http_session_survives_a_restart_with_sse_replay_and_sends_taking_effect() {
    http_session_survives_a_restart(Backing::sqlite());
}

#[test]
fn durable_postgres_http_session_survives_a_restart_with_sse_replay_and_sends_taking_effect() {
    http_session_survives_a_restart(Backing::postgres());
}

/// Reads what a killed host's stream still delivers, to its end.
fn drain_stream(log: &mut SseLog, stream: &mut SseStream) {
    while let Some((name, data)) = stream.next_event() {
        assert_eq!(name, None, "{data}");
        trace(&format!("sse {}: {data}", stream.last_id));
        log.events.push((stream.last_id, data));
    }
}

/// A frame's number keys what it did (a spawn served again after a restart
/// answers with the subagent it made): after a restart with every earlier
/// frame served, new frames are still numbered past them, so a new spawn
/// replayed after a second crash makes its own subagent instead of
/// answering an old frame's.
#[test]
fn durable_frames_after_a_restart_are_numbered_past_every_served_one() {
    frames_numbered_past_served_ones(Backing::sqlite());
}

#[test]
fn durable_postgres_frames_after_a_restart_are_numbered_past_every_served_one() {
    frames_numbered_past_served_ones(Backing::postgres());
}

fn frames_numbered_past_served_ones(backing: Backing) {
    // One request at a time: a frame behind a long await stays unserved.
    let config = format!("{CONFIG}max_inflight_requests = 1\n");
    let mut node = Node::start(backing, &config);
    let (_, _, body) = http_with_headers(node.http(), "POST", "/session", &[], "");
    let session = text(&body["session_id"]);
    let mut log = SseLog::default();
    let mut stream = SseStream::open(node.http(), &session);
    let hs = json!({ "type": "handshake/req", "id": "h", "agent_id": "web", "agent_caps": ["multi_agent"] });
    let spawn =
        |name: &str| json!({ "type": "SUBAGENT_SPAWN_REQ", "id": name, "agent": { "name": name, "model": "m" } });
    send_lines(node.http(), &session, &[hs, spawn("first"), spawn("sleeper")]);
    let first = text(&log.reply(&mut stream, "first")["subagent_id"]);
    let sleeper = text(&log.reply(&mut stream, "sleeper")["subagent_id"]);
    let task =
        json!({ "name": "t", "instruction": "i", "metadata": { "script": [{ "sleep_ms": 1500 }, { "return": {} }] } });
    send_lines(
        node.http(),
        &session,
        &[json!({ "type": "SUBAGENT_DELEGATE_REQ", "id": "d", "subagent_id": sleeper, "task": task })],
    );
    log.reply(&mut stream, "d");
    // Every frame served; a restart.
    node.kill9();
    drain_stream(&mut log, &mut stream);
    node.restart();
    // Two frames: the await holds the one request slot, so the spawn (which
    // the first restart numbered as "first" was) is journaled, not served,
    // when the host dies again.
    let wait = json!({ "type": "SUBAGENT_AWAIT_REQ", "id": "w", "subagent_id": sleeper });
    send_lines(node.http(), &session, &[wait, spawn("second")]);
    node.kill9();
    node.restart();
    let last = log.events.last().map_or(0, |(id, _)| *id);
    let mut stream = SseStream::open_after(node.http(), &session, Some(last));
    let second = text(&log.reply(&mut stream, "second")["subagent_id"]);
    assert_ne!(second, first, "the replayed spawn made a subagent of its own");
    send_lines(node.http(), &session, &[json!({ "type": "SUBAGENT_LIST_REQ", "id": "l" })]);
    let listed = log.reply(&mut stream, "l");
    let mut names: Vec<String> = listed["subagents"].as_array().unwrap().iter().map(|row| text(&row["name"])).collect();
    names.sort();
    assert_eq!(names, ["first", "second", "sleeper"], "{listed}");
}

/// `/send` journals its frames and answers 200 once they are committed; a
/// restart serves the frames whose replies were not committed. Each request
/// must take effect once: killed at random points right after the 200, with
/// every change committed on its own (`batch_max = 1`, as a busy store may
/// split a request's changes over commits), no spawn may happen twice.
#[test]
fn durable_http_sends_answered_200_take_effect_once_whatever_the_kill_point() {
    let seed = seed();
    eprintln!("http kill points: seed {seed} (replay with DURABLE_SEED={seed})");
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut node = Node::start(Backing::sqlite(), &format!("{CONFIG}[store]\nbatch_max = 1\n"));
    let addr = node.http().to_owned();
    let (_, _, body) = http_with_headers(&addr, "POST", "/session", &[], "");
    let session = text(&body["session_id"]);
    let mut log = SseLog::default();
    let mut stream = SseStream::open(&addr, &session);
    let hs = json!({ "type": "handshake/req", "id": "h", "agent_id": "web", "agent_caps": ["multi_agent"] });
    send_lines(&addr, &session, &[hs]);
    assert_eq!(log.reply(&mut stream, "h")["ok"], true);
    let rounds = 30;
    for round in 0..rounds {
        let spawn = json!({ "type": "SUBAGENT_SPAWN_REQ", "id": format!("s{round}"), "agent": { "name": format!("x{round}"), "model": "m" } });
        send_lines(node.http(), &session, &[spawn]);
        std::thread::sleep(Duration::from_micros(rng.u64(0..=6_000)));
        node.kill9();
        drain_stream(&mut log, &mut stream);
        node.restart();
        let last = log.events.last().map_or(0, |(id, _)| *id);
        stream = SseStream::open_after(node.http(), &session, Some(last));
        send_lines(node.http(), &session, &[json!({ "type": "SUBAGENT_LIST_REQ", "id": format!("l{round}") })]);
        let list = log.reply(&mut stream, &format!("l{round}"));
        let mut names: Vec<String> =
            list["subagents"].as_array().unwrap().iter().map(|row| text(&row["name"])).collect();
        names.sort();
        let mut expected: Vec<String> = (0..=round).map(|n| format!("x{n}")).collect();
        expected.sort();
        assert_eq!(names, expected, "after kill {round} (seed {seed}): every spawn answered 200 happened, once");
    }
    // Read on to the last spawn's reply: the loop stops reading at the
    // last list's reply, and nothing orders the two (earlier rounds' are
    // read by the next round's drain).
    log.reply(&mut stream, &format!("s{}", rounds - 1));
    for round in 0..rounds {
        let req = format!("s{round}");
        assert_eq!(log.replies(&req).len(), 1, "replies to {req} (seed {seed}): {:?}", log.replies(&req));
    }
    let ids: Vec<u64> = log.events.iter().map(|(id, _)| *id).collect();
    let expected: Vec<u64> = (ids[0]..ids[0] + ids.len() as u64).collect();
    assert_eq!(ids, expected, "SSE ids across {rounds} restarts");
}

// ---------------------------------------------------------------------------
// 4. SIGTERM.

/// A graceful stop (SIGTERM) while tasks run, a restart, a resume: returns
/// what the client read after the signal that reported a task's end (held
/// aside, not taken as told), once every task has completed as scripted.
fn stop_with_sigterm_and_resume() -> Vec<Value> {
    let mut node = Node::start(Backing::sqlite(), CONFIG);
    let mut driver = Driver::connect(node.tcp(), "tester");
    let long = driver.add_worker("long", Kind::Steps { steps: 6, sleep_ms: 300 });
    let nested = driver.add_worker("nested", Kind::Nested { sleep_ms: 1_000 });
    driver.until("the children run and `long` made progress", PATIENCE, |d| {
        let children = d.delegated_now.iter().filter(|id| d.subs[*id].parent.is_some()).count();
        let long_started = d.workers[long].id.as_ref().is_some_and(|id| !d.subs[id].progress.is_empty());
        children == 2 && long_started
    });
    // Stop right after one of `long`'s progress events (its next step sleeps).
    let long_id = driver.id_of(long);
    let seen = driver.progress_of(&long_id).len();
    driver.until("the next progress of `long`", PATIENCE, |d| d.progress_of(&long_id).len() > seen);
    driver.held_at_stop = Some(Vec::new());
    let status = node.server.terminate();
    assert!(status.success(), "SIGTERM exits 0: {status:?}");
    driver.drain_dead();
    let held = driver.held_at_stop.take().unwrap();
    let before: Vec<String> = driver.progress_of(&long_id).into_iter().map(|(_, m)| m).collect();

    node.restart();
    driver.reconnect(node.tcp());
    driver.check_restored();
    let mut expected: BTreeMap<String, u32> = [long, nested].iter().map(|w| (driver.id_of(*w), 2)).collect();
    for (id, sub) in &driver.subs {
        if sub.parent.is_some() {
            expected.insert(id.clone(), 2);
        }
    }
    assert_eq!(expected.len(), 4, "{}", driver.describe());
    assert_eq!(driver.resumed_now, expected, "every running task resumed");
    driver.carry_on();
    driver.finish(PATIENCE);
    // `long` went on after its last completed step: none lost, none repeated.
    let after: Vec<String> =
        driver.progress_of(&long_id).into_iter().filter(|(epoch, _)| *epoch == 1).map(|(_, m)| m).collect();
    let all: Vec<String> = (0..6).map(|n| format!("s{n}")).collect();
    assert_eq!(after, all[before.len()..].to_vec(), "`long`'s steps after the restart (before it: {before:?})");
    held
}

#[test]
fn durable_sigterm_keeps_the_session_resumable_and_running_tasks_resume_without_losing_a_step() {
    stop_with_sigterm_and_resume();
}

/// What a client is told must hold after a restart: a graceful stop that
/// keeps tasks to resume them must not tell the client they ended (a
/// `terminated` event, an await answered `TERMINATED`).
#[test]
fn durable_sigterm_tells_the_client_no_task_ended_that_then_resumes() {
    let held = stop_with_sigterm_and_resume();
    assert!(
        held.is_empty(),
        "at SIGTERM the client was told {} tasks ended, which then resumed and completed after the restart:\n{}",
        held.len(),
        held.iter().map(Value::to_string).collect::<Vec<_>>().join("\n")
    );
}

// ---------------------------------------------------------------------------
// 5. A command-adapter task at a restart.

/// Processes the test started outside the server (a killed server's
/// command tasks live on), killed on drop.
struct Orphans(Vec<PathBuf>);

impl Drop for Orphans {
    fn drop(&mut self) {
        for file in &self.0 {
            for pid in std::fs::read_to_string(file).unwrap_or_default().split_whitespace() {
                let _ = std::process::Command::new("kill").args(["-KILL", pid]).stderr(Stdio::null()).status();
            }
        }
    }
}

#[test]
fn durable_a_command_task_running_at_a_crash_fails_host_restarted_or_reruns() {
    let dir = TempDir::new("command");
    let (fail_pids, rerun_pids, marker) =
        (dir.path().join("fail.pids"), dir.path().join("rerun.pids"), dir.path().join("ran"));
    let _orphans = Orphans(vec![fail_pids.clone(), rerun_pids.clone()]);
    let fail = format!("echo $$ >> {}; exec sleep 60", fail_pids.display());
    let rerun = format!(
        "echo $$ >> {pids}; if [ -e {marker} ]; then echo '{{\"rerun\": true}}'; else touch {marker}; exec sleep 60; fi",
        pids = rerun_pids.display(),
        marker = marker.display()
    );
    let config = format!(
        "{CONFIG}\n[[routes]]\nmodel = \"cmd-fail\"\nadapter = \"command\"\nprogram = \"sh\"\nargs = [\"-c\", {}]\n\n\
         [[routes]]\nmodel = \"cmd-rerun\"\nadapter = \"command\"\nprogram = \"sh\"\nargs = [\"-c\", {}]\non_restart = \"rerun\"\n",
        json!(fail),
        json!(rerun)
    );
    let mut node = Node::start(Backing::sqlite(), &config);
    let mut client = LineClient::connect(node.tcp());
    client.send(&json!({ "type": "handshake/req", "id": "h", "agent_id": "c", "agent_caps": ["multi_agent"] }));
    let session = text(&client.reply("h")["session_id"]);
    let mut ids = Vec::new();
    for model in ["cmd-fail", "cmd-rerun"] {
        client.send(&json!({ "type": "SUBAGENT_SPAWN_REQ", "id": "s", "agent": { "name": model, "model": model } }));
        let id = text(&client.reply("s")["subagent_id"]);
        let task = json!({ "name": model, "instruction": "i" });
        client.send(&json!({ "type": "SUBAGENT_DELEGATE_REQ", "id": "d", "subagent_id": id, "task": task }));
        assert_eq!(client.reply("d")["status"], "RUNNING");
        ids.push(id);
    }
    // Both programs run (each wrote its pid): the crash finds them running.
    eventually_blocking("the command tasks start", PATIENCE, || {
        (fail_pids.exists() && rerun_pids.exists()).then_some(())
    });
    // The crash must come after both programs' pid checkpoints are
    // committed: a program can write its pid before its host has recorded
    // it, and a crash in between leaves nothing to find it by.
    eventually_blocking("the command tasks' pids are checkpointed", PATIENCE, || {
        match checkpointed_programs(&node.backing) {
            n if n >= 2 => Ok(()),
            n => Err(n),
        }
    });
    node.kill9();
    node.restart();
    let mut client = LineClient::connect(node.tcp());
    let hs = json!({ "type": "handshake/req", "id": "h2", "agent_id": "c", "agent_caps": ["multi_agent"], "resume_session_id": session });
    client.send(&hs);
    let mut events = Vec::new();
    loop {
        let line = client.next().expect("a line");
        if line["req_id"] == "h2" {
            assert_eq!(line["ok"], true, "{line}");
            break;
        }
        events.push(line);
    }
    for (n, id) in ids.iter().enumerate() {
        client.send(&json!({ "type": "SUBAGENT_AWAIT_REQ", "id": format!("a{n}"), "subagent_id": id }));
    }
    let mut answers = HashMap::new();
    while answers.len() < 2 {
        let line = client.next().expect("a line");
        match line["req_id"].as_str() {
            Some(req @ ("a0" | "a1")) => {
                answers.insert(req.to_owned(), line);
            }
            _ => events.push(line),
        }
    }
    let failed = &answers["a0"];
    assert_eq!((&failed["status"], &failed["error"]), (&json!("FAILED"), &json!("host_restarted")), "{failed}");
    let failed_event = events.iter().find(|e| e["subagent_id"] == ids[0].as_str() && e["event"] == "failed");
    let failed_event = failed_event.unwrap_or_else(|| panic!("no `failed` event for {}: {events:#?}", ids[0]));
    assert_eq!(failed_event["content"]["error"], "host_restarted", "{failed_event}");
    assert!(!events.iter().any(|e| e["subagent_id"] == ids[0].as_str() && e["event"] == "resumed"), "{events:#?}");
    let rerun = &answers["a1"];
    assert_eq!((&rerun["status"], &rerun["result"]), (&json!("COMPLETED"), &json!({ "rerun": true })), "{rerun}");
    let resumed = events.iter().find(|e| e["subagent_id"] == ids[1].as_str() && e["event"] == "resumed");
    assert_eq!(resumed.map(|e| &e["content"]["attempt"]), Some(&json!(2)), "{events:#?}");
    // The failed one is not run again: its program started once.
    let starts = std::fs::read_to_string(&fail_pids).unwrap();
    assert_eq!(starts.lines().count(), 1, "the failed task's program ran again: {starts}");
    // The programs the killed host left running were taken down, for the
    // failed task and for the rerun alike.
    for file in [&fail_pids, &rerun_pids] {
        let first = std::fs::read_to_string(file).unwrap();
        let pid = first.lines().next().expect("a pid").trim().to_owned();
        eventually_blocking(&format!("process {pid} of the previous host is gone"), PATIENCE, || {
            (!Path::new(&format!("/proc/{pid}")).exists()).then_some(())
        });
    }
}

/// How many running tasks of the SQLite store `backing` have a command's
/// process checkpointed (read from the store file, beside the host).
fn checkpointed_programs(backing: &Backing) -> i64 {
    use sqlx::{Connection, Row};
    let Backing::Sqlite(dir) = backing else { panic!("a SQLite store") };
    let url = format!("sqlite://{}?mode=ro", dir.path().join("subagentd.sqlite3").display());
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        let Ok(mut conn) = sqlx::SqliteConnection::connect(&url).await else { return 0 };
        let query = "SELECT count(*) FROM tasks WHERE checkpoint LIKE '%\"pgid\"%'";
        sqlx::query(query).fetch_one(&mut conn).await.map_or(0, |row| row.get::<i64, _>(0))
    })
}

// ---------------------------------------------------------------------------
// 6. A model-driven task's conversation across a crash.

/// The checkpoint parts `backing` holds, as (seq, number of items) per row
/// in order (read beside the host; none before its schema exists).
fn stored_parts(backing: &Backing) -> Vec<(i64, usize)> {
    use sqlx::Connection;
    const SQL: &str = "SELECT seq, items FROM checkpoint_parts ORDER BY subagent_id, seq";
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let rows: Vec<(i64, String)> = runtime.block_on(async {
        match backing {
            Backing::Sqlite(dir) => {
                let url = format!("sqlite://{}?mode=ro", dir.path().join("subagentd.sqlite3").display());
                let Ok(mut conn) = sqlx::SqliteConnection::connect(&url).await else { return Vec::new() };
                sqlx::query_as(SQL).fetch_all(&mut conn).await.unwrap_or_default()
            }
            Backing::Postgres(db) => {
                let Ok(mut conn) = sqlx::PgConnection::connect(&db.url).await else { return Vec::new() };
                sqlx::query_as(SQL).fetch_all(&mut conn).await.unwrap_or_default()
            }
        }
    });
    rows.into_iter()
        .map(|(seq, items)| (seq, serde_json::from_str::<Vec<Value>>(&items).expect("a part's items").len()))
        .collect()
}

/// A model-driven task checkpoints the messages each step adds (parts, not
/// the whole conversation again); killed mid-task, the host resumes it with
/// its whole conversation put back together from them: the model is asked
/// again with exactly the messages it was asked with before the crash, and
/// the task goes on to its end, where its parts are deleted.
fn a_model_task_resumes_with_its_whole_conversation(backing: Backing) {
    // Tool calls before the reply in flight at the crash.
    const CALLS: usize = 5;
    let hang = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let model = {
        let hang = hang.clone();
        FakeServer::start(move |body, _| {
            let answered = fake_messages(body).iter().filter(|m| m["role"] == "tool").count();
            if answered < CALLS {
                call_tools(Some(&format!("step {answered}")), &[("list_subagents", json!({}))])
            } else if hang.swap(false, Ordering::SeqCst) {
                Reply::Hang
            } else {
                answer(&format!("done after {answered} calls"))
            }
        })
    };
    let config =
        format!("{CONFIG}\n[[routes]]\nmodel = \"fake-*\"\nadapter = \"openai\"\nbase_url = \"{}\"\n", model.base_url);
    let mut node = Node::start(backing, &config);
    let mut client = LineClient::connect(node.tcp());
    client.send(&json!({ "type": "handshake/req", "id": "h", "agent_id": "c", "agent_caps": ["multi_agent"] }));
    let session = text(&client.reply("h")["session_id"]);
    let agent = json!({ "name": "talker", "model": "fake-steps", "memory_scope": "isolated" });
    client.send(&json!({ "type": "SUBAGENT_SPAWN_REQ", "id": "s", "agent": agent }));
    let id = text(&client.reply("s")["subagent_id"]);
    let task = json!({ "name": "talk", "instruction": "call the tool until told to stop" });
    client.send(&json!({ "type": "SUBAGENT_DELEGATE_REQ", "id": "d", "subagent_id": id, "task": task }));
    assert_eq!(client.reply("d")["accepted"], true);

    // The reply in flight: the model was asked with CALLS tool answers.
    let in_flight = |seen: &crate::fake_openai::Seen| {
        fake_messages(&seen.body).iter().filter(|m| m["role"] == "tool").count() == CALLS
    };
    let asked = eventually_blocking("the model is asked after the last tool answer", PATIENCE, || {
        model.requests().iter().position(in_flight)
    });
    let before = fake_messages(&model.requests()[asked].body);
    assert_eq!(before.len(), 2 + 2 * CALLS, "system, user, and a call and its answer per step: {before:#?}");
    // Crash once the checkpoint of the last tool answer is committed.
    let parts = eventually_blocking("the conversation is checkpointed", PATIENCE, || {
        let parts = stored_parts(&node.backing);
        (parts.iter().map(|(_, items)| items).sum::<usize>() == before.len()).then_some(parts)
    });
    assert!(parts.len() >= 2, "the conversation is stored in parts, as steps added them: {parts:?}");
    assert!(parts.iter().all(|(_, items)| *items < before.len()), "no part holds it whole: {parts:?}");
    let mut next = 0;
    for (seq, items) in &parts {
        assert_eq!(*seq, next, "each part starts where the one before ended: {parts:?}");
        next += i64::try_from(*items).expect("items");
    }
    node.kill9();

    node.restart();
    let after = eventually_blocking("the resumed task asks the model again", PATIENCE, || {
        model.requests().get(asked + 1).map(|seen| fake_messages(&seen.body))
    });
    assert_eq!(after, before, "the resumed task's conversation is the one before the crash, whole");

    let mut client = LineClient::connect(node.tcp());
    let hs = json!({ "type": "handshake/req", "id": "h2", "agent_id": "c", "agent_caps": ["multi_agent"], "resume_session_id": session });
    client.send(&hs);
    assert_eq!(client.reply("h2")["ok"], true);
    client.send(&json!({ "type": "SUBAGENT_AWAIT_REQ", "id": "a", "subagent_id": id }));
    let done = client.reply("a");
    assert_eq!(done["status"], "COMPLETED", "{done}");
    assert_eq!(done["result"]["summary"], format!("done after {CALLS} calls"), "{done}");
    assert_eq!(done["result"]["steps"], CALLS + 1, "no step lost or repeated: {done}");
    // Its parts went with its task.
    eventually_blocking("the ended task's parts are deleted", PATIENCE, || {
        stored_parts(&node.backing).is_empty().then_some(())
    });
}

#[test]
fn durable_sqlite_a_model_task_resumes_with_its_whole_conversation_from_its_checkpoint_parts() {
    a_model_task_resumes_with_its_whole_conversation(Backing::sqlite());
}

#[test]
fn durable_postgres_a_model_task_resumes_with_its_whole_conversation_from_its_checkpoint_parts() {
    a_model_task_resumes_with_its_whole_conversation(Backing::postgres());
}

// ---------------------------------------------------------------------------
// 7. One process per data directory.

#[test]
fn durable_a_second_process_on_the_same_data_dir_is_refused_naming_the_first() {
    let dir = TempDir::new("lock");
    let data_dir = dir.path().display().to_string();
    let args = ["--tcp", "127.0.0.1:0", "--data-dir", data_dir.as_str()];
    let mut first = Server::start(&args, None);
    let mut second =
        command(&args, None).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("start");
    let status = wait(&mut second);
    let mut err = String::new();
    second.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("pid {}", first.pid())), "the message names the first process: {err}");
    assert!(err.contains(&data_dir), "and the directory: {err}");
    // A crash leaves no stale lock: the next process starts.
    first.kill9();
    let mut third = Server::start(&args, None);
    assert!(third.terminate().success());
}

// ---------------------------------------------------------------------------
// 8. The SIGKILL loop.

/// Kills in CI's run of [`durable_sqlite_kill_loop_every_spawn_answered_200_exists_once`];
/// `SUBAGENTD_KILL_LOOP_KILLS` asks for more (`examples/sqlite_kill_loop`
/// runs 1,000).
const KILL_LOOP_KILLS: usize = 150;

/// Kills per session: each restart restores the whole session, so the
/// loop starts a new one now and then to keep a restart's load small.
const KILLS_PER_SESSION: usize = 50;

/// What a kill loop counted.
#[derive(Debug, Default)]
struct KillLoopCount {
    kills: usize,
    // Spawn requests whose `/send` was answered 200.
    acknowledged: usize,
    // Acknowledged spawns a list after a restart did not name (each
    // counted once).
    missing: usize,
    // Acknowledged spawns listed more than once.
    duplicated: usize,
    // Spawn requests answered other than once over their session's life.
    replies_not_once: usize,
}

/// One session of the kill loop: `kills` rounds of a `/send` of one or two
/// spawns answered 200, a SIGKILL at once or a few milliseconds later
/// (while the spawns are served and their changes committed), a restart
/// with random group commit settings, and a list: every spawn acknowledged
/// so far must be listed exactly once. Counts into `count` rather than
/// stopping at the first miss, so a run reports how many.
fn kill_loop_session(node: &mut Node, rng: &mut fastrand::Rng, kills: usize, tag: usize, count: &mut KillLoopCount) {
    let (status, _, body) = http_with_headers(node.http(), "POST", "/session", &[], "");
    assert_eq!(status, 200, "{body}");
    let session = text(&body["session_id"]);
    let mut log = SseLog::default();
    let mut stream = SseStream::open(node.http(), &session);
    let hs = json!({ "type": "handshake/req", "id": "h", "agent_id": "web", "agent_caps": ["multi_agent"] });
    send_lines(node.http(), &session, &[hs]);
    assert_eq!(log.reply(&mut stream, "h")["ok"], true);
    let mut acknowledged: Vec<String> = Vec::new();
    let mut missed: BTreeSet<String> = BTreeSet::new();
    for round in 0..kills {
        let names: Vec<String> = (0..rng.usize(1..=2)).map(|n| format!("k{tag}.{round}.{n}")).collect();
        let spawns: Vec<Value> = names
            .iter()
            .map(|name| json!({ "type": "SUBAGENT_SPAWN_REQ", "id": name, "agent": { "name": name, "model": "m" } }))
            .collect();
        // Asserts the 200: from here on the spawns are acknowledged.
        send_lines(node.http(), &session, &spawns);
        acknowledged.extend(names);
        count.acknowledged += spawns.len();
        if rng.u8(0..4) != 0 {
            std::thread::sleep(Duration::from_micros(rng.u64(0..=6_000)));
        }
        node.kill9();
        count.kills += 1;
        drain_stream(&mut log, &mut stream);
        node.restart_with(&random_store_config(rng));
        let last = log.events.last().map_or(0, |(id, _)| *id);
        stream = SseStream::open_after(node.http(), &session, Some(last));
        assert_eq!(stream.status, 200, "session {session} after kill {}", count.kills);
        let list_id = format!("l{tag}.{round}");
        send_lines(node.http(), &session, &[json!({ "type": "SUBAGENT_LIST_REQ", "id": list_id })]);
        let list = log.reply(&mut stream, &list_id);
        let mut listed: HashMap<String, usize> = HashMap::new();
        for row in list["subagents"].as_array().unwrap_or_else(|| panic!("a list: {list}")) {
            *listed.entry(text(&row["name"])).or_default() += 1;
        }
        for name in &acknowledged {
            match listed.get(name).copied().unwrap_or(0) {
                0 if missed.insert(name.clone()) => {
                    count.missing += 1;
                    eprintln!("kill loop: after kill {}: {name} (answered 200) is not listed: {list}", count.kills);
                }
                0 | 1 => {}
                n => {
                    count.duplicated += 1;
                    eprintln!("kill loop: after kill {}: {name} is listed {n} times: {list}", count.kills);
                }
            }
        }
        if count.kills.is_multiple_of(100) {
            eprintln!(
                "kill loop: {} kills, {} spawns answered 200, {} missing, {} duplicated",
                count.kills, count.acknowledged, count.missing, count.duplicated
            );
        }
    }
    // Every spawn is answered once over the session's life (the SSE stream
    // replays across restarts): read on to the last spawn's reply.
    for name in acknowledged.iter().rev().take(2) {
        if !missed.contains(name) {
            log.reply(&mut stream, name);
        }
    }
    for name in &acknowledged {
        let replies = log.replies(name).len();
        if replies != 1 && !missed.contains(name) {
            count.replies_not_once += 1;
            eprintln!("kill loop: {name} was answered {replies} times: {:?}", log.replies(name));
        }
    }
}

/// `kills` SIGKILLs of the host on one SQLite store (see [`kill_loop_session`]).
fn sqlite_kill_loop(kills: usize) -> KillLoopCount {
    let seed = seed();
    eprintln!("kill loop (sqlite, {kills} kills): seed {seed} (replay with DURABLE_SEED={seed})");
    let mut rng = fastrand::Rng::with_seed(seed);
    let started = Instant::now();
    // (A session holds at most two spawns a kill: within `CONFIG`'s room.)
    let mut node = Node::start(Backing::sqlite(), &random_store_config(&mut rng));
    let mut count = KillLoopCount::default();
    let mut tag = 0;
    while count.kills < kills {
        let these = KILLS_PER_SESSION.min(kills - count.kills);
        kill_loop_session(&mut node, &mut rng, these, tag, &mut count);
        tag += 1;
    }
    eprintln!(
        "kill loop (sqlite, seed {seed}): {} kills, {} spawns answered 200, {} missing, {} duplicated, \
         {} answered other than once, in {:.1} s",
        count.kills,
        count.acknowledged,
        count.missing,
        count.duplicated,
        count.replies_not_once,
        started.elapsed().as_secs_f64()
    );
    count
}

/// Every spawn a `/send` answered 200 for exists exactly once after a
/// SIGKILL at any point after the 200, over many kills
/// (`SUBAGENTD_KILL_LOOP_KILLS`, else [`KILL_LOOP_KILLS`]).
#[test]
fn durable_sqlite_kill_loop_every_spawn_answered_200_exists_once() {
    let kills = match std::env::var("SUBAGENTD_KILL_LOOP_KILLS") {
        Ok(text) => text.trim().parse().expect("SUBAGENTD_KILL_LOOP_KILLS is a count"),
        Err(_) => KILL_LOOP_KILLS,
    };
    let count = sqlite_kill_loop(kills);
    assert_eq!(count.kills, kills);
    assert_eq!(
        (count.missing, count.duplicated, count.replies_not_once),
        (0, 0, 0),
        "every spawn answered 200 exists once, answered once: {count:?}"
    );
}
