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
//!
//! Layout: `nodes` (the nodes and HAProxy), `clients` (an HTTP and a TCP
//! session through HAProxy), `scenarios` (what [`cluster_behind_haproxy`]
//! runs, in order) and `store_link` (a relay to PostgreSQL a test can cut
//! and stall); the tests are here.

mod clients;
mod nodes;
mod scenarios;
mod store_link;

pub(crate) use nodes::{free_port, slots_config, Cluster, Haproxy, LEASE_MS};

use crate::common::eventually_blocking;
use crate::e2e_support::*;
use crate::test_database::TestDatabase;
use clients::HttpSession;
use nodes::CONFIG;
use serde_json::json;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use store_link::StoreLink;

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

    scenarios::fencing(&mut cluster, &front);
    scenarios::busiest_node_killed(&mut cluster, &front);
    scenarios::failover(&mut cluster, &front);
    scenarios::tcp_failover(&mut cluster);
    scenarios::add_a_node(&mut cluster, &front, &mut sessions);
    scenarios::haproxy_restart(&mut cluster, &mut sessions);
    scenarios::shutdown_hands_off(&mut cluster, &front);
    let took = started.elapsed();
    eprintln!("cluster: all scenarios in {took:?}");
    assert!(took < Duration::from_secs(300), "the cluster test stays under 5 minutes");
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
