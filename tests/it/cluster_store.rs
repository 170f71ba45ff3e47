//! Session ownership on PostgreSQL, in-process: the store writers of
//! several nodes on one database. A node that lost a session without
//! knowing (another took it while it was paused) has its next write refused
//! whole and is told to stop serving the session; a node that asks for a
//! session a live node holds gets it once that node hands it off.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use subagent_host::protocol::wire::{SpawnRequest, SubagentConfig};
use subagent_host::store::{
    self, Acquired, ClusterSettings, SessionLog, SessionOwner, StoreHandle, StoreUrl, WriterSettings,
};
use subagent_host::NullSink;
use subagent_host::{Host, HostConfig};

use crate::common::TreeOps;
use crate::common::{eventually, session_row};
use crate::test_database::{pg_execute, TestDatabase};

/// The lease of the nodes whose renewals the test watches (every 166 ms).
const SHORT_LEASE: Duration = Duration::from_millis(500);

/// What a node was told to stop serving, and why.
#[derive(Default)]
struct GivenUp(Mutex<Vec<(String, String)>>);

impl SessionOwner for GivenUp {
    fn give_up(&self, id: &str, reason: &str) -> bool {
        self.0.lock().unwrap().push((id.to_owned(), reason.to_owned()));
        true
    }
}

impl GivenUp {
    fn reasons(&self, id: &str) -> Vec<String> {
        self.0.lock().unwrap().iter().filter(|(s, _)| s == id).map(|(_, reason)| reason.clone()).collect()
    }
}

/// A node of the test cluster renews its leases every third of `lease`.
fn node(url: &str, id: &str, lease: Duration) -> (StoreHandle, Arc<GivenUp>) {
    let settings = ClusterSettings { node_id: id.into(), lease, http_addr: None, tcp_addr: None };
    let url = StoreUrl::parse(url).expect("a store URL");
    let handle = store::open(&url, WriterSettings::default(), Some(settings)).expect("open the store");
    let given_up = Arc::new(GivenUp::default());
    let owner: Weak<dyn SessionOwner> = Arc::downgrade(&given_up) as Weak<dyn SessionOwner>;
    handle.set_session_owner(owner);
    (handle, given_up)
}

fn spawn_request(name: &str) -> SpawnRequest {
    SpawnRequest { agent: SubagentConfig::new(name, "scripted"), parent_agent_id: None, root_agent_id: None }
}

async fn stored_names(handle: &StoreHandle, id: &str) -> Vec<String> {
    let stored = handle.load(id).await.expect("load").expect("the session is stored");
    stored.subagents.iter().map(|s| s.row.config.name.clone()).collect()
}

#[actix_rt::test]
async fn a_stale_owner_is_fenced_and_a_live_owner_hands_off() {
    let db = TestDatabase::create();
    // a's lease is long: its renewals (the first at start, the next 20 s
    // later) cannot find the moved lease before its next write does, so it
    // is the write's fence that tells a, not a renewal racing it.
    let (a, given_up_by_a) = node(&db.url, "a", Duration::from_secs(60));
    let log = SessionLog::new("s1", a.clone());
    log.open(session_row("s1"));
    let host = Host::new(HostConfig::default());
    let tree = host.open_logged_tree(Arc::new(NullSink), log);
    tree.spawn(spawn_request("kept")).await.expect("spawn");
    a.flush().await;
    assert_eq!(a.owned_sessions(), 1);

    // Another node takes the session behind a's back, as when a was paused
    // past its lease; a does not know yet.
    pg_execute(&db.url, "UPDATE leases SET node_id = 'gone', epoch = epoch + 1 WHERE session_id = 's1'")
        .expect("move the lease");
    tree.spawn(spawn_request("lost")).await.expect("spawn");
    a.flush().await;
    let reasons = given_up_by_a.reasons("s1");
    // Its write refused, or (on a loaded machine) its renewal, due every
    // 166 ms, finding the lease taken first: either way a learns it.
    assert!(
        reasons.iter().any(|r| r.contains("refused its write") || r.contains("lease was taken over")),
        "a was told it lost s1: {reasons:?}"
    );
    assert_eq!(a.owned_sessions(), 0);

    // b takes it at once: its holder `gone` has no presence lock (no live
    // process), so no lease need lapse. The refused spawn is not stored.
    let (b, given_up_by_b) = node(&db.url, "b", SHORT_LEASE);
    assert_eq!(b.acquire("s1").await.expect("acquire"), Acquired::Owned);
    assert_eq!(stored_names(&b, "s1").await, ["kept"], "a's write after it lost the session was refused whole");
    tree.spawn(spawn_request("after")).await.expect("spawn");
    a.flush().await;
    assert_eq!(stored_names(&b, "s1").await, ["kept"], "a writes nothing more of a session it no longer owns");

    // c asks for it while b is alive: b hands it off (told to stop serving
    // it), releases it, and c owns it well within the lease.
    let (c, _) = node(&db.url, "c", SHORT_LEASE);
    let asked = std::time::Instant::now();
    assert_eq!(c.acquire("s1").await.expect("acquire"), Acquired::Owned);
    assert!(asked.elapsed() < Duration::from_millis(500), "a handoff, not a lapse: {:?}", asked.elapsed());
    let reasons = given_up_by_b.reasons("s1");
    assert_eq!(reasons, ["handed off to node c"]);
    assert_eq!((b.owned_sessions(), c.owned_sessions()), (0, 1));
    // An unknown session is not taken.
    assert_eq!(c.acquire("nope").await.expect("acquire"), Acquired::Unknown);

    // c shuts down: its leases go back and it leaves the node list, and no
    // renewal (every 166 ms here) takes either back afterwards.
    c.freeze().await;
    // b renews on the same period: once its heartbeat is a lease (three
    // renewal periods) past c's leaving, c would have renewed twice by now.
    pg_execute(&db.url, "CREATE TABLE c_left AS SELECT subagentd_now_ms() AS at_ms").expect("mark c's leaving");
    let b_renewed = format!(
        "DO $$ BEGIN IF (SELECT heartbeat_ms FROM nodes WHERE id = 'b') < (SELECT at_ms FROM c_left) + {} \
         THEN RAISE EXCEPTION 'b has not renewed a lease past c leaving yet'; END IF; END $$",
        SHORT_LEASE.as_millis()
    );
    eventually("b renews a lease past c leaving", Duration::from_secs(10), || {
        std::future::ready(pg_execute(&db.url, &b_renewed))
    })
    .await;
    let check = "DO $$ BEGIN \
        IF NOT (SELECT released FROM leases WHERE session_id = 's1') THEN RAISE EXCEPTION 'lease taken back after leaving'; END IF; \
        IF EXISTS (SELECT 1 FROM nodes WHERE id = 'c') THEN RAISE EXCEPTION 'node listed after leaving'; END IF; \
        END $$";
    pg_execute(&db.url, check).expect("c's lease stays released and c stays gone");
    tree.close().await;
}

/// A node renews its own lease, one row, and never its sessions' rows:
/// renewals cost PostgreSQL the same whatever the node's number of sessions.
#[actix_rt::test]
async fn a_node_renews_one_row_whatever_its_number_of_sessions() {
    let db = TestDatabase::create();
    let (a, _) = node(&db.url, "a", SHORT_LEASE);
    let logs: Vec<_> = (0..200)
        .map(|n| {
            let log = SessionLog::new(format!("s{n}"), a.clone());
            log.open(session_row(&format!("s{n}")));
            log
        })
        .collect();
    a.flush().await;
    assert_eq!(a.owned_sessions(), 200);
    // Each lease row's version (`xmin` changes with every update of a row),
    // and the time: several renewals (every 166 ms) later, the node's row
    // has moved on and not one session's row has been written.
    pg_execute(
        &db.url,
        "CREATE TABLE before AS SELECT session_id, xmin::text AS version, subagentd_now_ms() AS at_ms FROM leases",
    )
    .expect("mark the lease rows");
    let renewed_since = format!(
        "DO $$ BEGIN IF (SELECT lease_until_ms FROM nodes WHERE id = 'a') < (SELECT max(at_ms) FROM before) + {} \
         THEN RAISE EXCEPTION 'a has not renewed three times yet'; END IF; END $$",
        SHORT_LEASE.as_millis() * 2
    );
    eventually("a renews its lease", Duration::from_secs(10), || {
        std::future::ready(pg_execute(&db.url, &renewed_since))
    })
    .await;
    let untouched = "DO $$ BEGIN \
        IF (SELECT count(*) FROM before) <> 200 THEN RAISE EXCEPTION 'every session has a lease row'; END IF; \
        IF EXISTS (SELECT 1 FROM leases l JOIN before b USING (session_id) WHERE l.xmin::text <> b.version) \
        THEN RAISE EXCEPTION 'a session''s lease row was written by a renewal'; END IF; END $$";
    pg_execute(&db.url, untouched).expect("no session's row is renewed");
    assert_eq!(a.owned_sessions(), 200, "every session is still the node's");
    drop(logs);
}

/// Every session of a node whose lease lapsed may be taken at once, and
/// the node (alive, but paused past its lease) has its next write of one
/// refused: per-session fencing behind a per-node lease.
#[actix_rt::test]
async fn a_lapsed_node_lease_frees_all_its_sessions_and_fencing_stops_its_writes() {
    let db = TestDatabase::create();
    // a's lease is long (renewed every 20 s): the test lapses it by hand,
    // as a pause past it would, before a can renew it again.
    let (a, given_up_by_a) = node(&db.url, "a", Duration::from_secs(60));
    let host = Host::new(HostConfig::default());
    let trees: Vec<_> = ["s1", "s2"]
        .iter()
        .map(|id| {
            let log = SessionLog::new(*id, a.clone());
            log.open(session_row(id));
            host.open_logged_tree(Arc::new(NullSink), log)
        })
        .collect();
    for tree in &trees {
        tree.spawn(spawn_request("kept")).await.expect("spawn");
    }
    a.flush().await;
    assert_eq!(a.owned_sessions(), 2);

    pg_execute(&db.url, "UPDATE nodes SET lease_until_ms = 0 WHERE id = 'a'").expect("lapse a's lease");
    // b takes both at once: a is alive (its presence lock is held), so only
    // the lapsed node lease lets it, without asking a for a handoff.
    let (b, _) = node(&db.url, "b", SHORT_LEASE);
    let asked = std::time::Instant::now();
    assert_eq!(b.acquire("s1").await.expect("acquire"), Acquired::Owned);
    assert_eq!(b.acquire("s2").await.expect("acquire"), Acquired::Owned);
    assert!(asked.elapsed() < Duration::from_secs(2), "taken at once: {:?}", asked.elapsed());
    // a may notice the takeover on its own check ("its lease was taken
    // over") before the next line: only a handoff would be wrong here.
    let reasons = given_up_by_a.reasons("s1");
    assert!(!reasons.iter().any(|r| r.contains("handed off")), "no handoff was asked of a: {reasons:?}");

    trees[0].spawn(spawn_request("lost")).await.expect("spawn");
    a.flush().await;
    assert!(
        given_up_by_a.reasons("s1").iter().any(|r| r.contains("refused its write")),
        "a's write was refused: {:?}",
        given_up_by_a.reasons("s1")
    );
    assert_eq!(stored_names(&b, "s1").await, ["kept"], "a's write after the takeover was refused whole");
    for tree in trees {
        tree.close().await;
    }
}

/// A node that comes back under its id after dying (its old process held
/// sessions) holds none of them: they are released at its start, so any
/// node takes them at once rather than asking a node that does not serve
/// them for a handoff it would never give.
#[actix_rt::test]
async fn a_node_restarted_under_its_id_releases_what_its_previous_process_held() {
    let db = TestDatabase::create();
    let (a, _) = node(&db.url, "a", Duration::from_secs(60));
    let log = SessionLog::new("s1", a.clone());
    log.open(session_row("s1"));
    a.flush().await;
    assert_eq!(a.owned_sessions(), 1);
    // The process dies: its writer and connections go, its lease rows stay.
    drop(log);
    drop(a);
    let gone = "DO $$ BEGIN IF (SELECT count(*) FROM pg_stat_activity WHERE application_name = 'subagentd a') > 0 \
        THEN RAISE EXCEPTION 'a''s presence connection is still open'; END IF; END $$";
    eventually("a's old process is gone", Duration::from_secs(10), || std::future::ready(pg_execute(&db.url, gone)))
        .await;

    let (a_again, _) = node(&db.url, "a", Duration::from_secs(60));
    assert_eq!(a_again.owned_sessions(), 0);
    pg_execute(
        &db.url,
        "DO $$ BEGIN IF NOT (SELECT released FROM leases WHERE session_id = 's1') \
         THEN RAISE EXCEPTION 's1 is still leased to a'; END IF; END $$",
    )
    .expect("the old process's lease is released");
    let (b, _) = node(&db.url, "b", SHORT_LEASE);
    let asked = std::time::Instant::now();
    assert_eq!(b.acquire("s1").await.expect("acquire"), Acquired::Owned);
    assert!(asked.elapsed() < Duration::from_secs(2), "taken at once, not after a lease: {:?}", asked.elapsed());
}
