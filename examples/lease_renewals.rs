//! What a cluster node's lease renewals cost PostgreSQL while it holds many
//! open sessions: one node (the store writer with its cluster side, as
//! `subagentd serve --store postgres://… ` runs it) opens SESSIONS
//! sessions, then idles for SECONDS while it renews; PostgreSQL's own
//! counters (`pg_stat_user_tables`, `pg_current_wal_lsn`) say how many rows
//! of `leases` and `nodes` were written per second, and how much WAL.
//!
//! Run: `cargo run --release --example lease_renewals -- URL [SESSIONS]
//! [SECONDS] [LEASE_MS]`, URL being a PostgreSQL server's URL
//! (`postgres://postgres@127.0.0.1:5432/postgres`); a database of its own
//! is made there and dropped after. Defaults: 10 000 sessions, 20 s, a
//! 5 000 ms lease (renewed every third of it).

use sqlx::{Connection, PgConnection, Row};
use std::time::{Duration, Instant};
use subagent_host::store::{self, ClusterSettings, SessionLog, SessionRow, StoreUrl, WriterSettings};

/// Rows written (inserted, updated, deleted) so far in the two cluster
/// tables, and the WAL position in bytes.
#[derive(Debug, Clone, Copy)]
struct Counters {
    leases: i64,
    nodes: i64,
    wal: i64,
}

async fn counters(conn: &mut PgConnection) -> Counters {
    // Statistics reach the view when a backend's transaction ends (at most
    // once a second each, or within 10 s once idle): the measured span is
    // long enough that this blurs its ends by little.
    let _ = sqlx::query("SELECT pg_stat_clear_snapshot()").execute(&mut *conn).await;
    let row = sqlx::query(
        "SELECT \
         coalesce((SELECT n_tup_ins + n_tup_upd + n_tup_del FROM pg_stat_user_tables WHERE relname = 'leases'), 0), \
         coalesce((SELECT n_tup_ins + n_tup_upd + n_tup_del FROM pg_stat_user_tables WHERE relname = 'nodes'), 0), \
         (pg_current_wal_lsn() - '0/0'::pg_lsn)::BIGINT",
    )
    .fetch_one(&mut *conn)
    .await
    .expect("read PostgreSQL's counters");
    Counters { leases: row.get(0), nodes: row.get(1), wal: row.get(2) }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let base = args.next().expect("usage: lease_renewals URL [SESSIONS] [SECONDS] [LEASE_MS]");
    let sessions: usize = args.next().map_or(10_000, |n| n.parse().expect("SESSIONS"));
    let seconds: u64 = args.next().map_or(20, |n| n.parse().expect("SECONDS"));
    let lease_ms: u64 = args.next().map_or(5_000, |n| n.parse().expect("LEASE_MS"));
    let database = format!("subagentd_leases_{}", std::process::id());
    let (prefix, _) = base.rsplit_once('/').expect("a URL ending in /database");
    let url = format!("{prefix}/{database}");

    let system = actix_rt::System::new();
    system.block_on(async move {
        let mut admin = PgConnection::connect(&base).await.expect("connect to PostgreSQL");
        sqlx::query(&format!("CREATE DATABASE {database}")).execute(&mut admin).await.expect("create the database");

        let settings = ClusterSettings {
            node_id: "n1".into(),
            lease: Duration::from_millis(lease_ms),
            http_addr: None,
            tcp_addr: None,
        };
        let handle =
            store::open(&StoreUrl::parse(&url).expect("a store URL"), WriterSettings::default(), Some(settings))
                .expect("open the store");
        let opened = Instant::now();
        let logs: Vec<_> = (0..sessions)
            .map(|n| {
                let log = SessionLog::new(format!("s{n}"), handle.clone());
                log.open(SessionRow {
                    id: format!("s{n}").into(),
                    agent_id: "client".into(),
                    capabilities: vec!["multi_agent".into()],
                    principal: None,
                    transport: "tcp".into(),
                    handshaken: true,
                });
                log
            })
            .collect();
        handle.flush().await;
        assert_eq!(handle.owned_sessions(), sessions, "every session is owned by the node");
        println!("opened {sessions} sessions in {:?}", opened.elapsed());

        // The opening's own writes are counted out: a backend reports its
        // counters at most once a second, and an idle one within 10 s.
        tokio::time::sleep(Duration::from_millis(lease_ms / 3 + 11_000)).await;
        let mut probe = PgConnection::connect(&url).await.expect("connect to the node's database");
        let start = counters(&mut probe).await;
        let started = Instant::now();
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        let end = counters(&mut probe).await;
        let span = started.elapsed().as_secs_f64();
        let per_second = |delta: i64| delta as f64 / span;
        println!(
            "{sessions} open sessions, lease {lease_ms} ms, over {span:.1} s: \
             leases {:.1} row writes/s, nodes {:.1} row writes/s, WAL {:.0} bytes/s",
            per_second(end.leases - start.leases),
            per_second(end.nodes - start.nodes),
            per_second(end.wal - start.wal),
        );
        assert_eq!(handle.owned_sessions(), sessions, "no session was lost while renewing");

        drop(logs);
        handle.freeze().await;
        drop(probe);
        drop(handle);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let drop_it = format!("DROP DATABASE {database} WITH (FORCE)");
        sqlx::query(&drop_it).execute(&mut admin).await.expect("drop the database");
    });
}
