//! Several hosts: `subagentd` nodes on one PostgreSQL database (a fresh one
//! per run, over `DATABASE_URL`) behind a real HAProxy running the shipped
//! `deploy/haproxy.cfg` (its addresses moved to free ports, and a fourth
//! node declared for the scenario that adds one). Every scenario asserts
//! what a client sees through HAProxy:
//!
//! - **spread**: new sessions land on every node, and each serves its own;
//! - **fencing**: a node paused (SIGSTOP) past its lease loses its session
//!   to another node; once resumed (SIGCONT) its stale task end is refused
//!   by the store, and the client, reloading the session from the store on
//!   a third node, sees the cancel it asked the new owner for;
//! - **failover**: the owner of an HTTP session and of a TCP session is
//!   SIGKILLed while tasks run; the client's next requests are served by
//!   another node with the same session id, every finished result is still
//!   there, running tasks resume from their checkpoints, no child is
//!   spawned twice, and the SSE stream resumed with `Last-Event-ID` misses
//!   no event (its ids run on without a gap);
//! - **a node added** while sessions are open: they go on where they are,
//!   and new sessions reach the new node;
//! - **HAProxy restarted** (its stick table lost): sessions hashed to
//!   another node are handed off by their live owner, with nothing lost;
//! - **a node shut down** (SIGTERM) hands its sessions off at once;
//! - **a node cut off from PostgreSQL** answers 503 on `/ready` and takes no
//!   new sessions until the store is back (a relay the test cuts).
//!
//! HAProxy must be installed (`.ci/run` installs Debian's `haproxy`).

use crate::common::{eventually_blocking, poll_until_blocking};
use crate::e2e_support::*;
use crate::test_database::TestDatabase;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The lease: long enough that a node handing off (or dead) is visibly
/// faster than one whose lease must lapse.
pub(crate) const LEASE_MS: u64 = 4000;

const CONFIG: &str = "[cluster]\nlease_ms = 4000\n[limits]\nmax_subagents_per_session = 256\n";

/// A free port below the ephemeral range, which other tests' client
/// sockets (and port-0 listeners) take from: a port picked there could be
/// taken again before its node binds it.
pub(crate) fn free_port() -> u16 {
    loop {
        let port = fastrand::u16(20_000..32_000);
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

// ---------------------------------------------------------------------------
// The nodes and HAProxy.

pub(crate) struct Slot {
    id: String,
    http: u16,
    tcp: u16,
    server: Option<Server>,
}

pub(crate) struct Cluster {
    slots: Vec<Slot>,
    pub(crate) haproxy: Haproxy,
    // Dropped last: the nodes and HAProxy go first.
    db: TestDatabase,
}

impl Cluster {
    /// `running` nodes started, of `declared` in HAProxy's config.
    pub(crate) fn start(running: usize, declared: usize) -> Self {
        let db = TestDatabase::create();
        let slots: Vec<Slot> = (1..=declared)
            .map(|n| Slot { id: format!("n{n}"), http: free_port(), tcp: free_port(), server: None })
            .collect();
        let haproxy = Haproxy::start(&slots_config(&slots_ports(&slots)));
        let mut cluster = Self { slots, haproxy, db };
        for index in 0..running {
            cluster.start_node(index);
        }
        cluster
    }

    pub(crate) fn start_node(&mut self, index: usize) {
        let slot = &mut self.slots[index];
        let (http, tcp) = (format!("127.0.0.1:{}", slot.http), format!("127.0.0.1:{}", slot.tcp));
        let args = ["--http", &http, "--tcp", &tcp, "--store", &self.db.url, "--node-id", &slot.id];
        slot.server = Some(Server::start(&args, Some(CONFIG)));
        let name = slot.id.clone();
        self.haproxy.wait_status(&name, "UP");
    }

    pub(crate) fn index_of(&self, node: &str) -> usize {
        self.slots.iter().position(|slot| slot.id == node).unwrap_or_else(|| panic!("no node {node}"))
    }

    fn server(&self, node: &str) -> &Server {
        self.slots[self.index_of(node)].server.as_ref().expect("the node runs")
    }

    pub(crate) fn kill9(&mut self, node: &str) {
        let index = self.index_of(node);
        self.slots[index].server.as_mut().expect("the node runs").kill9();
        self.slots[index].server = None;
    }

    /// `GET /health` of a node, directly (to find a TCP session's node).
    fn health(&self, node: &str) -> Value {
        let slot = &self.slots[self.index_of(node)];
        http(&format!("127.0.0.1:{}", slot.http), "GET", "/health", &[], "").1
    }

    pub(crate) fn running(&self) -> Vec<String> {
        self.slots.iter().filter(|slot| slot.server.is_some()).map(|slot| slot.id.clone()).collect()
    }
}

fn slots_ports(slots: &[Slot]) -> Vec<(u16, u16)> {
    slots.iter().map(|slot| (slot.http, slot.tcp)).collect()
}

/// The shipped config with its addresses moved to the test's ports, and a
/// server line per declared node beyond the three it lists.
pub(crate) fn slots_config(nodes: &[(u16, u16)]) -> (String, [u16; 3]) {
    let shipped = include_str!("../../deploy/haproxy.cfg");
    let fronts = [free_port(), free_port(), free_port()];
    let mut config = shipped
        .replace("127.0.0.1:8080", &format!("127.0.0.1:{}", fronts[0]))
        .replace("127.0.0.1:7700", &format!("127.0.0.1:{}", fronts[1]))
        .replace("127.0.0.1:8404", &format!("127.0.0.1:{}", fronts[2]));
    let mut http_lines = String::new();
    let mut tcp_lines = String::new();
    for (index, (http, tcp)) in nodes.iter().enumerate() {
        let n = index + 1;
        let shipped_http = format!("server n{n} 127.0.0.1:808{n} check");
        let shipped_tcp = format!("server n{n} 127.0.0.1:770{n} check port 808{n}");
        let http_line = format!("server n{n} 127.0.0.1:{http} check");
        let tcp_line = format!("server n{n} 127.0.0.1:{tcp} check port {http}");
        if config.contains(&shipped_http) {
            config = config.replace(&shipped_http, &http_line).replace(&shipped_tcp, &tcp_line);
        } else {
            http_lines.push_str(&format!("    {http_line}\n"));
            tcp_lines.push_str(&format!("    {tcp_line}\n"));
        }
    }
    // Nodes beyond the shipped three go after the last server line of each backend.
    let last_http = format!("server n3 127.0.0.1:{} check\n", nodes[2].0);
    let last_tcp = format!("server n3 127.0.0.1:{} check port {}\n", nodes[2].1, nodes[2].0);
    config = config.replace(&last_http, &format!("{last_http}{http_lines}"));
    config = config.replace(&last_tcp, &format!("{last_tcp}{tcp_lines}"));
    (config, fronts)
}

pub(crate) struct Haproxy {
    pub(crate) child: Child,
    stderr: std::sync::mpsc::Receiver<String>,
    pub(crate) config: tempfile_lite::TempFile,
    pub(crate) http: String,
    pub(crate) tcp: String,
    stats: String,
}

impl Haproxy {
    pub(crate) fn start((config, fronts): &(String, [u16; 3])) -> Self {
        let config = tempfile_lite::TempFile::with(config);
        let (child, stderr) = Self::spawn(&config);
        let [http, tcp, stats] = fronts.map(|port| format!("127.0.0.1:{port}"));
        let haproxy = Self { child, stderr, config, http, tcp, stats };
        haproxy.wait_listening();
        haproxy
    }

    fn spawn(config: &tempfile_lite::TempFile) -> (Child, std::sync::mpsc::Receiver<String>) {
        let mut child = Command::new("haproxy")
            .arg("-db")
            .arg("-f")
            .arg(&config.0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|err| {
                panic!("cannot start haproxy ({err}): install it (`apt-get install -y haproxy`; .ci/run does)")
            });
        let stderr = drain_stderr(&mut child);
        (child, stderr)
    }

    fn wait_listening(&self) {
        let listening = poll_until_blocking(PATIENCE, || {
            (TcpStream::connect(&self.stats).is_ok() && TcpStream::connect(&self.http).is_ok()).then_some(())
        });
        if listening.is_err() {
            let said: Vec<String> = self.stderr.try_iter().collect();
            panic!("HAProxy never listened; it said: {said:#?}");
        }
    }

    /// Stops HAProxy and starts it again on the same config: its stick
    /// table starts empty.
    fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        (self.child, self.stderr) = Self::spawn(&self.config);
        self.wait_listening();
    }

    /// The status (`UP`, `DOWN` …) of `server` in the HTTP backend.
    pub(crate) fn status(&self, server: &str) -> String {
        let (_, body) = http(&self.stats, "GET", "/stats;csv", &[], "");
        let csv = body.as_str().unwrap_or_default().to_owned();
        csv.lines()
            .map(|line| line.split(',').collect::<Vec<_>>())
            .find(|fields| fields.len() > 17 && fields[0] == "subagentd_http" && fields[1] == server)
            .map(|fields| fields[17].to_owned())
            .unwrap_or_default()
    }

    fn wait_status(&self, server: &str, wanted: &str) {
        eventually_blocking(&format!("HAProxy sees {server} {wanted}"), PATIENCE, || {
            let status = self.status(server);
            status.starts_with(wanted).then_some(()).ok_or(status)
        })
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------
// An HTTP client through HAProxy, as the SDK's: POST /send, one SSE stream,
// reconnecting with `Last-Event-ID` whenever it ends.

struct HttpSession {
    front: String,
    id: String,
    stream: Option<SseStream>,
    // The last SSE id read: the next must follow it without a gap.
    last_id: u64,
    // Every message read, in order.
    seen: Vec<Value>,
    // The node that answered the last `/send`.
    node: String,
    reconnects: u32,
    n: u64,
}

impl HttpSession {
    fn open(front: &str) -> Self {
        let (id, node) = eventually_blocking("POST /session succeeds", PATIENCE, || {
            let (status, headers, body) = http_with_headers(front, "POST", "/session", &[], "");
            if status != 200 {
                return Err(format!("{status} {body}"));
            }
            let id = body["session_id"].as_str().expect("session_id").to_owned();
            assert_eq!(headers.get("x-session-id"), Some(&id), "POST /session names the id in a header");
            Ok((id, headers.get("x-subagentd-node").cloned().unwrap_or_default()))
        });
        let mut session =
            Self { front: front.to_owned(), id, stream: None, last_id: 0, seen: Vec::new(), node, reconnects: 0, n: 0 };
        let reply =
            session.request(json!({ "type": "handshake/req", "agent_id": "client", "agent_caps": ["multi_agent"] }));
        assert_eq!(reply["ok"], true, "{reply}");
        assert_eq!(reply["session_id"], session.id.as_str());
        session
    }

    /// Posts one line, retrying while no node can take it yet (a node
    /// died and HAProxy or the cluster has not caught up).
    fn post(&mut self, line: &Value) {
        let node = eventually_blocking("POST /send succeeds", PATIENCE, || {
            let headers = [("X-Session-Id", self.id.as_str()), ("Content-Type", "application/x-ndjson")];
            let (status, got, body) = http_with_headers(&self.front, "POST", "/send", &headers, &line.to_string());
            if status != 200 {
                return Err(format!("{status} {body}"));
            }
            assert_eq!(got.get("x-session-id"), Some(&self.id), "the same session id, wherever it is served");
            Ok(got.get("x-subagentd-node").cloned().unwrap_or_default())
        });
        self.node = node;
    }

    fn request(&mut self, mut message: Value) -> Value {
        self.n += 1;
        let req_id = format!("r{}", self.n);
        message["id"] = json!(req_id);
        // The stream first: a reply is never missed.
        self.ensure_stream();
        self.post(&message);
        self.until(&format!("the reply to {message}"), |m| m["req_id"] == req_id.as_str())
    }

    fn ensure_stream(&mut self) {
        if self.stream.is_some() {
            return;
        }
        let after = (self.last_id > 0).then_some(self.last_id);
        let stream = eventually_blocking("GET /stream succeeds", PATIENCE, || {
            let stream = SseStream::open_after(&self.front, &self.id, after);
            match stream.status {
                200 => Ok(stream),
                status => Err(status),
            }
        });
        self.stream = Some(stream);
    }

    /// Drops the stream (as a client whose connection went quiet does).
    fn drop_stream(&mut self) {
        self.stream = None;
    }

    /// The next message, reconnecting when the stream ends.
    fn next(&mut self) -> Value {
        loop {
            self.ensure_stream();
            let stream = self.stream.as_mut().expect("a stream");
            match stream.next() {
                Some(message) => {
                    let id = stream.last_id;
                    if self.last_id > 0 {
                        assert_eq!(id, self.last_id + 1, "SSE ids run on without a gap: {id} after {}", self.last_id);
                    }
                    self.last_id = id;
                    self.seen.push(message.clone());
                    return message;
                }
                None => {
                    self.stream = None;
                    self.reconnects += 1;
                }
            }
        }
    }

    fn until(&mut self, what: &str, wanted: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            assert!(Instant::now() < deadline, "never saw {what}");
            let message = self.next();
            if wanted(&message) {
                return message;
            }
        }
    }

    fn spawn(&mut self, name: &str) -> String {
        let reply =
            self.request(json!({ "type": "SUBAGENT_SPAWN_REQ", "agent": { "name": name, "model": "scripted" } }));
        reply["subagent_id"].as_str().unwrap_or_else(|| panic!("spawn {name}: {reply}")).to_owned()
    }

    fn delegate(&mut self, id: &str, script: Value) {
        let task = json!({ "name": "t", "instruction": "run", "metadata": { "script": script } });
        let reply = self.request(json!({ "type": "SUBAGENT_DELEGATE_REQ", "subagent_id": id, "task": task }));
        assert_eq!(reply["accepted"], true, "{reply}");
    }

    fn await_result(&mut self, id: &str) -> Value {
        self.request(json!({ "type": "SUBAGENT_AWAIT_REQ", "subagent_id": id }))
    }

    /// The listed subagents by name.
    fn list(&mut self) -> BTreeMap<String, Vec<Value>> {
        let reply = self.request(json!({ "type": "SUBAGENT_LIST_REQ" }));
        let mut by_name: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for row in reply["subagents"].as_array().unwrap_or_else(|| panic!("a list: {reply}")) {
            by_name.entry(row["name"].as_str().unwrap_or_default().to_owned()).or_default().push(row.clone());
        }
        by_name
    }

    /// The progress messages seen for subagent `id`, in order.
    fn progress_of(&self, id: &str) -> Vec<String> {
        self.seen
            .iter()
            .filter(|m| m["type"] == "SUBAGENT_EVENT" && m["event"] == "progress" && m["subagent_id"] == id)
            .map(|m| m["content"]["message"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    fn events_of(&self, id: &str, kind: &str) -> Vec<Value> {
        self.seen
            .iter()
            .filter(|m| m["type"] == "SUBAGENT_EVENT" && m["event"] == kind && m["subagent_id"] == id)
            .cloned()
            .collect()
    }
}

/// A script of `steps` progress steps `s0 …`, each followed by a sleep.
fn steps(steps: usize, sleep_ms: u64, result: Value) -> Value {
    let mut script: Vec<Value> =
        (0..steps).flat_map(|n| [json!({ "progress": format!("s{n}") }), json!({ "sleep_ms": sleep_ms })]).collect();
    script.push(json!({ "return": result }));
    Value::Array(script)
}

// ---------------------------------------------------------------------------
// A TCP client through HAProxy.

struct TcpSession {
    lines: LineClient,
    id: String,
}

impl TcpSession {
    fn connect(front: &str, resume: Option<&str>) -> Result<Self, Value> {
        let mut lines = LineClient::connect(front);
        let mut handshake =
            json!({ "type": "handshake/req", "id": "h", "agent_id": "tcp-client", "agent_caps": ["multi_agent"] });
        if let Some(id) = resume {
            handshake["resume_session_id"] = json!(id);
        }
        lines.send(&handshake);
        let mut reply = Value::Null;
        while let Some(line) = lines.next() {
            if line["req_id"] == "h" {
                reply = line;
                break;
            }
        }
        match reply["ok"] == true {
            true => Ok(Self { id: reply["session_id"].as_str().expect("session_id").to_owned(), lines }),
            false => Err(reply),
        }
    }

    /// Resumes `id` through HAProxy, retrying until a node takes it.
    fn resume(front: &str, id: &str) -> Self {
        eventually_blocking(&format!("a node resumes {id}"), PATIENCE, || Self::connect(front, Some(id)))
    }

    fn request(&mut self, req_id: &str, mut message: Value) -> Value {
        message["id"] = json!(req_id);
        self.lines.send(&message);
        self.lines.reply(req_id)
    }
}

// ---------------------------------------------------------------------------

/// Everything, on one cluster, in order (each scenario leaves the cluster
/// with every declared node but the fourth running).
#[test]
fn cluster_behind_haproxy() {
    let started = Instant::now();
    let mut cluster = Cluster::start(3, 4);
    let front = cluster.haproxy.http.clone();

    // Spread: twelve sessions over three nodes, each working.
    let mut sessions: Vec<HttpSession> = (0..12).map(|_| HttpSession::open(&front)).collect();
    let mut per_node: HashMap<String, usize> = HashMap::new();
    for (index, session) in sessions.iter_mut().enumerate() {
        let id = session.spawn(&format!("kept{index}"));
        session.delegate(&id, json!([{ "return": { "index": index } }]));
        let answer = session.await_result(&id);
        assert_eq!((&answer["status"], &answer["result"]["index"]), (&json!("COMPLETED"), &json!(index)), "{answer}");
        *per_node.entry(session.node.clone()).or_default() += 1;
    }
    assert_eq!(per_node.len(), 3, "sessions land on every node: {per_node:?}");
    for node in ["n1", "n2", "n3"] {
        let owned = cluster.health(node)["owned_sessions"].as_u64().unwrap_or(0);
        assert_eq!(owned as usize, per_node[node], "{node} owns the sessions it serves");
    }
    eprintln!("cluster: spread {per_node:?} ({:?})", started.elapsed());

    fencing(&mut cluster, &front);
    busiest_node_killed(&mut cluster, &front);
    failover(&mut cluster, &front);
    tcp_failover(&mut cluster);
    add_a_node(&mut cluster, &front, &mut sessions);
    haproxy_restart(&mut cluster, &mut sessions);
    shutdown_hands_off(&mut cluster, &front);
    let took = started.elapsed();
    eprintln!("cluster: all scenarios in {took:?}");
    assert!(took < Duration::from_secs(300), "the cluster test stays under 5 minutes");
}

/// A paused owner loses its session after its lease, and its writes once it
/// wakes are refused.
fn fencing(cluster: &mut Cluster, front: &str) {
    let mut session = HttpSession::open(front);
    let sleeper = session.spawn("sleeper");
    session.delegate(&sleeper, json!([{ "sleep_ms": 3000 }, { "return": { "by": "the paused node" } }]));
    let paused = session.node.clone();
    cluster.server(&paused).signal("STOP");
    let stopped = Instant::now();
    // A client whose stream went quiet reconnects; HAProxy first takes the
    // paused node out.
    cluster.haproxy.wait_status(&paused, "DOWN");
    session.drop_stream();
    let cancel = session.request(json!({ "type": "SUBAGENT_CANCEL_REQ", "subagent_id": sleeper }));
    assert_ne!(session.node, paused, "another node serves the session");
    let taken = stopped.elapsed();
    assert_eq!(cancel["event"], "cancelled", "{cancel}");
    let answer = session.await_result(&sleeper);
    assert_eq!(answer["status"], "CANCELLED", "{answer}");
    let new_owner = session.node.clone();
    eprintln!("cluster: a paused owner's session served by {new_owner} after {taken:?} (lease {LEASE_MS} ms)");
    assert!(taken >= Duration::from_millis(LEASE_MS / 2), "a live (paused) owner is waited for until its lease lapses");

    // The paused node wakes: its task's sleep is over, it completes, and the
    // store refuses the write.
    cluster.server(&paused).signal("CONT");
    cluster.server(&paused).wait_stderr("the paused node's refused write", |line| {
        line.contains(&session.id) && line.contains("no longer this node's")
    });
    // Reload the session from the store: its owner dies, a third node takes it.
    cluster.kill9(&new_owner);
    let answer = session.await_result(&sleeper);
    assert_eq!(answer["status"], "CANCELLED", "the stale node's completion never reached the store: {answer}");
    assert!(answer["result"].get("by").is_none(), "{answer}");
    let index = cluster.index_of(&new_owner);
    cluster.start_node(index);
    cluster.haproxy.wait_status(&paused, "UP");
}

/// The sessions `node` serves now, by its operator's list.
fn served_by(cluster: &Cluster, node: &str) -> Vec<String> {
    let slot = &cluster.slots[cluster.index_of(node)];
    let (_, body) = http(&format!("127.0.0.1:{}", slot.http), "GET", "/admin/sessions", &[], "");
    let rows = body["sessions"].as_array().cloned().unwrap_or_default();
    rows.iter().filter_map(|row| row["session_id"].as_str().map(str::to_owned)).collect()
}

/// Whether a running node serves session `id` and its operator's list
/// counts one COMPLETED subagent in it (the session's runner).
fn completed_where_served(cluster: &Cluster, id: &str) -> bool {
    cluster.running().iter().any(|node| {
        let slot = &cluster.slots[cluster.index_of(node)];
        let (_, body) = http(&format!("127.0.0.1:{}", slot.http), "GET", "/admin/sessions", &[], "");
        let rows = body["sessions"].as_array().cloned().unwrap_or_default();
        rows.iter().any(|row| row["session_id"] == id && row["subagents"]["COMPLETED"] == 1)
    })
}

/// Twelve sessions with a stream attached and a task running each; the
/// busiest node is SIGKILLed. Half its clients retry `/send` and reconnect
/// `/stream` at once, and each is answered within the lease and 2 s of the
/// kill; the other half do not come back, and their sessions are adopted by
/// the survivors within the same bound, their tasks finishing before their
/// clients return.
fn busiest_node_killed(cluster: &mut Cluster, front: &str) {
    let mut sessions: Vec<HttpSession> = (0..12).map(|_| HttpSession::open(front)).collect();
    let mut runners = Vec::new();
    for session in &mut sessions {
        let id = session.spawn("runner");
        session.delegate(&id, steps(10, 300, json!({ "ran": true })));
        runners.push(id);
    }
    let mut per_node: HashMap<String, usize> = HashMap::new();
    for session in &sessions {
        *per_node.entry(session.node.clone()).or_default() += 1;
    }
    let busiest = per_node.iter().max_by_key(|(_, n)| **n).map(|(node, _)| node.clone()).expect("a node");
    let victims: Vec<usize> = (0..sessions.len()).filter(|&i| sessions[i].node == busiest).collect();
    let (racing, waiting) = victims.split_at(victims.len() / 2);
    let waiting_ids: Vec<String> = waiting.iter().map(|&i| sessions[i].id.clone()).collect();
    cluster.kill9(&busiest);
    let killed = Instant::now();
    let bound = Duration::from_millis(LEASE_MS + 2000);

    let (took, adopted) = std::thread::scope(|scope| {
        // Half the clients come back at once, all together.
        let mut handles = Vec::new();
        for (index, (session, runner)) in sessions.iter_mut().zip(&runners).enumerate() {
            if !racing.contains(&index) {
                continue;
            }
            handles.push(scope.spawn(move || {
                session.drop_stream();
                let listed = session.list();
                let took = killed.elapsed();
                assert_eq!(listed["runner"].len(), 1, "{listed:?}");
                let answer = session.await_result(runner);
                assert_eq!(
                    (&answer["status"], &answer["result"]["ran"]),
                    (&json!("COMPLETED"), &json!(true)),
                    "{answer}"
                );
                took
            }));
        }
        // The others' sessions are adopted with no client asking.
        let what = format!("a dead node's sessions are adopted within {bound:?}");
        let holders = eventually_blocking(&what, bound.saturating_sub(killed.elapsed()), || {
            let mut holders: HashMap<String, usize> = HashMap::new();
            let mut adopted = 0;
            for node in cluster.running() {
                let served = served_by(cluster, &node);
                let held = waiting_ids.iter().filter(|id| served.contains(id)).count();
                adopted += held;
                *holders.entry(node).or_default() += held;
            }
            (adopted == waiting_ids.len()).then_some(holders.clone()).ok_or(format!("{holders:?}"))
        });
        let adopted = (killed.elapsed(), holders);
        let took: Vec<Duration> = handles.into_iter().map(|handle| handle.join().expect("a client")).collect();
        (took, adopted)
    });
    let worst = took.iter().max().copied().unwrap_or_default();
    eprintln!(
        "cluster: SIGKILL of {busiest} ({} sessions): {} clients back at once, all served within {worst:?}; \
         {} left alone adopted in {:?} by {:?}",
        victims.len(),
        racing.len(),
        waiting.len(),
        adopted.0,
        adopted.1
    );
    assert!(worst < bound, "every client answered within {bound:?} of the kill: {took:?}");
    // The adopted sessions' tasks finish before their clients come back:
    // the operator's list of the node serving each counts its runner done.
    eventually_blocking("the adopted sessions' tasks complete", PATIENCE, || {
        let done = waiting_ids.iter().filter(|id| completed_where_served(cluster, id)).count();
        (done == waiting_ids.len()).then_some(()).ok_or(format!("{done} of {} completed", waiting_ids.len()))
    });
    let back = now_seconds();
    for &index in waiting {
        let runner = runners[index].clone();
        let session = &mut sessions[index];
        session.drop_stream();
        let answer = session.await_result(&runner);
        assert_eq!((&answer["status"], &answer["result"]["ran"]), (&json!("COMPLETED"), &json!(true)), "{answer}");
        let completed = session.events_of(&runner, "completed");
        let done_at = completed.iter().filter_map(|event| event["ts"].as_f64()).fold(f64::MAX, f64::min);
        assert!(done_at < back, "{runner} finished before its client came back: {completed:?}");
    }
    let index = cluster.index_of(&busiest);
    cluster.start_node(index);
}

fn now_seconds() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs_f64()
}

/// The owner of a running session is SIGKILLed.
fn failover(cluster: &mut Cluster, front: &str) {
    let mut session = HttpSession::open(front);
    let done = session.spawn("done");
    session.delegate(&done, json!([{ "return": { "done": 1 } }]));
    let before = session.await_result(&done);
    assert_eq!(before["status"], "COMPLETED");
    let long = session.spawn("long");
    session.delegate(&long, steps(8, 250, json!({ "long": "finished" })));
    let parent = session.spawn("parent");
    let child = json!({ "agent": { "name": "child", "model": "scripted" },
        "task": { "name": "c", "instruction": "c", "metadata": { "script": [{ "sleep_ms": 1500 }, { "return": { "child": 1 } }] } } });
    session.delegate(&parent, json!([{ "spawn": child }, { "await_children": {} }, { "return": { "parent": "ok" } }]));
    session.until("two progress steps of `long`", |m| {
        m["event"] == "progress" && m["subagent_id"] == long.as_str() && m["content"]["message"] == "s2"
    });
    let owner = session.node.clone();
    let id = session.id.clone();
    cluster.kill9(&owner);
    let killed = Instant::now();
    // The SDK's client posts while its stream reconnects: both reach the
    // new owner together, and neither is refused.
    let (racing_front, racing_id) = (front.to_owned(), id.clone());
    let racing = std::thread::spawn(move || {
        let line = json!({ "type": "SUBAGENT_LIST_REQ", "id": "during-failover" }).to_string();
        http_with_headers(&racing_front, "POST", "/send", &[("X-Session-Id", racing_id.as_str())], &line)
    });
    let reply = session.until("the list posted during the failover", |m| m["req_id"] == "during-failover");
    let takeover = killed.elapsed();
    let (status, headers, body) = racing.join().expect("the racing request");
    assert_eq!(status, 200, "a request racing the stream's reconnect is served: {body}");
    session.node = headers.get("x-subagentd-node").cloned().unwrap_or_default();
    assert_eq!(reply["subagents"].as_array().map(Vec::len), Some(4), "{reply}");
    let listed = session.list();
    assert_ne!(session.node, owner);
    assert_eq!(session.id, id);
    eprintln!("cluster: takeover after SIGKILL of {owner}: first reply from {} in {takeover:?}", session.node);
    assert!(takeover < Duration::from_millis(LEASE_MS + 3000), "served within the lease and a small bound");
    assert!(session.reconnects >= 1, "the stream was resumed with Last-Event-ID");

    // Every finished result is there; nothing was spawned twice.
    let again = session.await_result(&done);
    assert_eq!((&again["status"], &again["result"]), (&before["status"], &before["result"]));
    for name in ["done", "long", "parent", "child"] {
        assert_eq!(listed.get(name).map(Vec::len), Some(1), "{name} listed once: {listed:?}");
    }
    // The running tasks resume and finish.
    let answer = session.await_result(&long);
    assert_eq!(answer["result"]["long"], "finished", "{answer}");
    let answer = session.await_result(&parent);
    assert_eq!(answer["result"]["parent"], "ok", "{answer}");
    assert_eq!(answer["result"]["children"].as_object().map(|c| c.len()), Some(1), "one child: {answer}");
    let resumed = session.events_of(&long, "resumed");
    assert!(resumed.iter().any(|e| e["content"]["attempt"].as_u64() >= Some(2)), "`long` resumed: {resumed:?}");
    let all: Vec<String> = (0..8).map(|n| format!("s{n}")).collect();
    assert_eq!(session.progress_of(&long), all, "every step seen once, in order, across the failover");

    let index = cluster.index_of(&owner);
    cluster.start_node(index);
}

/// The node of a TCP session is SIGKILLed: the client reconnects through
/// HAProxy and resumes.
fn tcp_failover(cluster: &mut Cluster) {
    let tcp_front = cluster.haproxy.tcp.clone();
    let counts = |cluster: &Cluster| -> HashMap<String, u64> {
        cluster
            .running()
            .into_iter()
            .map(|n| (n.clone(), cluster.health(&n)["sessions"].as_u64().unwrap_or(0)))
            .collect()
    };
    let before = counts(cluster);
    let mut session = TcpSession::connect(&tcp_front, None).expect("handshake through HAProxy");
    let after = counts(cluster);
    let owner = after.iter().find(|(node, n)| **n > before[*node]).map(|(node, _)| node.clone()).expect("its node");
    let spawned = session
        .request("s", json!({ "type": "SUBAGENT_SPAWN_REQ", "agent": { "name": "steady", "model": "scripted" } }));
    let steady = spawned["subagent_id"].as_str().expect("id").to_owned();
    let task =
        json!({ "name": "t", "instruction": "i", "metadata": { "script": steps(4, 300, json!({ "tcp": "done" })) } });
    session.request("d", json!({ "type": "SUBAGENT_DELEGATE_REQ", "subagent_id": steady, "task": task }));
    std::thread::sleep(Duration::from_millis(400));
    let id = session.id.clone();
    cluster.kill9(&owner);
    let killed = Instant::now();
    drop(session);
    let mut session = TcpSession::resume(&tcp_front, &id);
    eprintln!("cluster: TCP session resumed through HAProxy {:?} after SIGKILL of {owner}", killed.elapsed());
    assert_eq!(session.id, id);
    let answer = session.request("a", json!({ "type": "SUBAGENT_AWAIT_REQ", "subagent_id": steady }));
    assert_eq!((&answer["status"], &answer["result"]["tcp"]), (&json!("COMPLETED"), &json!("done")), "{answer}");
    let index = cluster.index_of(&owner);
    cluster.start_node(index);
}

/// A fourth node joins while sessions are open.
fn add_a_node(cluster: &mut Cluster, front: &str, sessions: &mut Vec<HttpSession>) {
    cluster.start_node(3);
    for (index, session) in sessions.iter_mut().enumerate() {
        let listed = session.list();
        let kept = &listed[&format!("kept{index}")];
        assert_eq!(kept[0]["status"], "COMPLETED", "{kept:?}");
    }
    let mut reached = Vec::new();
    for _ in 0..8 {
        let mut session = HttpSession::open(front);
        let id = session.spawn("fresh");
        session.delegate(&id, json!([{ "return": { "fresh": true } }]));
        assert_eq!(session.await_result(&id)["status"], "COMPLETED");
        reached.push(session.node.clone());
        sessions.push(session);
    }
    assert!(reached.iter().any(|node| node == "n4"), "new sessions reach the new node: {reached:?}");
}

/// HAProxy restarts with an empty stick table: sessions whose hash names
/// another node are handed off to it by their live owner.
fn haproxy_restart(cluster: &mut Cluster, sessions: &mut [HttpSession]) {
    let before: Vec<String> = sessions.iter().map(|s| s.node.clone()).collect();
    for session in sessions.iter_mut() {
        session.drop_stream();
    }
    cluster.haproxy.restart();
    for node in cluster.running() {
        cluster.haproxy.wait_status(&node, "UP");
    }
    let mut moved = 0;
    for (index, session) in sessions.iter_mut().enumerate() {
        let listed = session.list();
        assert_eq!(listed.values().map(Vec::len).sum::<usize>(), 1, "{listed:?}");
        let (name, rows) = listed.iter().next().expect("one subagent");
        assert_eq!(rows[0]["status"], "COMPLETED", "{name}: {rows:?}");
        if session.node != before[index] {
            moved += 1;
        }
    }
    eprintln!("cluster: after HAProxy's restart {moved} of {} sessions were handed off", sessions.len());
    assert!(moved > 0, "some sessions hash to another node than their own");
}

/// SIGTERM: the node hands its sessions off at once.
fn shutdown_hands_off(cluster: &mut Cluster, front: &str) {
    let mut session = HttpSession::open(front);
    let steady = session.spawn("steady");
    session.delegate(&steady, steps(6, 200, json!({ "steady": "done" })));
    session.until("a progress step", |m| m["event"] == "progress");
    let owner = session.node.clone();
    let index = cluster.index_of(&owner);
    let stopped = Instant::now();
    let status = cluster.slots[index].server.as_mut().expect("runs").terminate();
    assert!(status.success(), "SIGTERM exits 0");
    cluster.slots[index].server = None;
    let listed = session.list();
    let taken = stopped.elapsed();
    eprintln!("cluster: SIGTERM of {owner}: served by {} after {taken:?}", session.node);
    assert_ne!(session.node, owner);
    assert!(taken < Duration::from_millis(LEASE_MS), "handed off, not left to lapse: {taken:?}");
    assert_eq!(listed["steady"].len(), 1);
    let answer = session.await_result(&steady);
    assert_eq!(answer["result"]["steady"], "done", "{answer}");
}

/// A TCP relay to PostgreSQL that the test can cut (every connection
/// through it dropped, new ones refused at once), stall (nothing goes
/// through, nothing fails: a store that hangs) and mend.
struct StoreLink {
    port: u16,
    down: Arc<AtomicBool>,
    stalled: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
}

/// Copies `from` to `to` until either closes, holding every byte while
/// `stalled` is set.
fn relay_bytes(mut from: TcpStream, mut to: TcpStream, stalled: &AtomicBool) {
    use std::io::{Read, Write};
    let mut buffer = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        while stalled.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(10));
        }
        if to.write_all(&buffer[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
}

impl StoreLink {
    fn start() -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the relay");
        let port = listener.local_addr().expect("addr").port();
        let down = Arc::new(AtomicBool::new(false));
        let stalled = Arc::new(AtomicBool::new(false));
        let open: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (accept_down, accept_open, accept_stalled) = (down.clone(), open.clone(), stalled.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().map_while(Result::ok) {
                if accept_down.load(Ordering::Acquire) {
                    continue; // dropped at once: the connection fails
                }
                let Ok(server) = TcpStream::connect("127.0.0.1:5432") else { continue };
                let mut sockets = accept_open.lock().unwrap();
                for (from, to) in [(&client, &server), (&server, &client)] {
                    let (from, to) = (from.try_clone().unwrap(), to.try_clone().unwrap());
                    let stalled = accept_stalled.clone();
                    std::thread::spawn(move || relay_bytes(from, to, &stalled));
                }
                sockets.extend([client, server]);
            }
        });
        Self { port, down, stalled, open }
    }

    fn stall(&self, stalled: bool) {
        self.stalled.store(stalled, Ordering::Release);
    }

    fn cut(&self) {
        self.down.store(true, Ordering::Release);
        for socket in self.open.lock().unwrap().drain(..) {
            let _ = socket.shutdown(std::net::Shutdown::Both);
        }
    }

    fn mend(&self) {
        self.down.store(false, Ordering::Release);
    }
}

/// A node that cannot reach PostgreSQL says so on `/ready` (so HAProxy
/// takes it out) and takes no new sessions, until the store is back.
#[test]
fn a_node_cut_off_from_its_store_takes_no_new_sessions() {
    let db = TestDatabase::create();
    let link = StoreLink::start();
    let (_, name) = db.url.rsplit_once('/').expect("a database in the URL");
    let url = format!("postgres://postgres@127.0.0.1:{}/{name}", link.port);
    let server = Server::start(&["--http", "127.0.0.1:0", "--store", &url, "--node-id", "cut"], Some(CONFIG));
    let addr = server.http.clone().expect("http");
    let ready = || http(&addr, "GET", "/ready", &[], "");
    let wait_ready = |want: u16| {
        eventually_blocking(&format!("/ready answers {want}"), PATIENCE, || match ready() {
            (status, body) if status == want => Ok(body),
            (status, body) => Err(format!("{status} {body}")),
        })
    };
    wait_ready(200);
    link.cut();
    let body = wait_ready(503);
    assert_eq!(body["ready"], false, "{body}");
    server.wait_stderr("the node saying why", |line| line.contains("taking no new sessions"));
    let (status, body) = http(&addr, "POST", "/session", &[], "");
    assert_eq!(status, 503, "no new session while the store is out of reach: {body}");
    assert!(body["error"].as_str().unwrap_or_default().contains("cannot reach its store"), "{body}");
    link.mend();
    wait_ready(200);
    let (status, body) = http(&addr, "POST", "/session", &[], "");
    assert_eq!(status, 200, "new sessions again once the store is back: {body}");

    // A store that hangs rather than fails (the first seconds of an
    // outage): `/ready` answers 503 within its own deadline, and a new
    // session is refused, retryably, rather than handed out unstored.
    link.stall(true);
    let asked = Instant::now();
    let (status, body) = ready();
    let answered = asked.elapsed();
    assert_eq!(status, 503, "{body}");
    assert!(answered < Duration::from_millis(1500), "/ready answered in {answered:?}: {body}");
    let asked = Instant::now();
    let (status, headers, body) = http_with_headers(&addr, "POST", "/session", &[], "");
    assert_eq!(status, 503, "no session the store cannot keep: {body}");
    assert_eq!(headers.get("retry-after").map(String::as_str), Some("1"), "{headers:?}");
    assert_eq!(body["retryable"], true, "{body}");
    assert!(asked.elapsed() < Duration::from_secs(4), "refused within its deadline: {:?}", asked.elapsed());
    link.stall(false);
    wait_ready(200);
    let (status, body) = http(&addr, "POST", "/session", &[], "");
    assert_eq!(status, 200, "new sessions again once the store answers: {body}");
}
