//! The cluster tests' nodes and HAProxy: `subagentd` nodes on one
//! PostgreSQL database (a fresh one per run), restartable on their ports,
//! behind a real HAProxy running the shipped `deploy/haproxy.cfg` with its
//! addresses moved to free ports.

use crate::common::{eventually_blocking, poll_until_blocking};
use crate::e2e_support::*;
use crate::test_database::TestDatabase;
use serde_json::Value;
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

/// The lease: long enough that a node handing off (or dead) is visibly
/// faster than one whose lease must lapse.
pub(crate) const LEASE_MS: u64 = 4000;

pub(super) const CONFIG: &str = "[cluster]\nlease_ms = 4000\n[limits]\nmax_subagents_per_session = 256\n";

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
    pub(super) http: u16,
    tcp: u16,
    pub(super) server: Option<Server>,
}

pub(crate) struct Cluster {
    pub(super) slots: Vec<Slot>,
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

    pub(super) fn server(&self, node: &str) -> &Server {
        self.slots[self.index_of(node)].server.as_ref().expect("the node runs")
    }

    pub(crate) fn kill9(&mut self, node: &str) {
        let index = self.index_of(node);
        self.slots[index].server.as_mut().expect("the node runs").kill9();
        self.slots[index].server = None;
    }

    /// `GET /health` of a node, directly (to find a TCP session's node).
    pub(super) fn health(&self, node: &str) -> Value {
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
    let shipped = include_str!("../../../deploy/haproxy.cfg");
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

    pub(super) fn spawn(config: &tempfile_lite::TempFile) -> (Child, std::sync::mpsc::Receiver<String>) {
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
    pub(super) fn restart(&mut self) {
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

    pub(super) fn wait_status(&self, server: &str, wanted: &str) {
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
