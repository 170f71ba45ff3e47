//! Several hosts (issue 12), for `benches/wire.rs`: nodes on one PostgreSQL
//! database behind HAProxy running the shipped `deploy/haproxy.cfg` (its
//! addresses moved to free ports, servers beyond `nodes` left out).
//!
//! | bench | one element is |
//! |---|---|
//! | `cluster/haproxy_{1,3}_nodes_8_sessions` | one cycle over TCP through HAProxy's NDJSON frontend, 8 connections (spread by `leastconn`), `WINDOW` cycles in flight on each |
//!
//! Before the groups, one plain run counts what PostgreSQL does per cycle
//! (one client, one cycle at a time, then `WINDOW` in flight): transactions
//! and rows written, from `pg_stat_database`, and the store's own commits
//! (from `/health`).

use super::*;

/// HAProxy on a generated config, killed on drop.
struct Haproxy {
    child: Child,
    tcp: SocketAddr,
    _dir: TempDir,
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The shipped config for `nodes`, with its frontends on free ports.
fn config(nodes: &[&Service]) -> (String, SocketAddr) {
    let (http_front, tcp_front, stats) = (free_addr(), free_addr(), free_addr());
    let mut config = include_str!("../../deploy/haproxy.cfg")
        .replace("127.0.0.1:8080", &http_front.to_string())
        .replace("127.0.0.1:7700", &tcp_front.to_string())
        .replace("127.0.0.1:8404", &stats.to_string());
    for n in 1..=3 {
        let http = format!("    server n{n} 127.0.0.1:808{n} check\n");
        let tcp = format!("    server n{n} 127.0.0.1:770{n} check port 808{n}\n");
        let (new_http, new_tcp) = match nodes.get(n - 1) {
            Some(node) => (
                format!("    server n{n} {} check\n", node.http),
                format!("    server n{n} {} check port {}\n", node.tcp, node.http.port()),
            ),
            None => (String::new(), String::new()),
        };
        config = config.replace(&http, &new_http).replace(&tcp, &new_tcp);
    }
    (config, tcp_front)
}

fn start_haproxy(nodes: &[&Service], tag: &str) -> Haproxy {
    let dir = std::env::temp_dir().join(format!("subagentd-haproxy-bench-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let (text, tcp) = config(nodes);
    let path = dir.join("haproxy.cfg");
    std::fs::write(&path, text).expect("write haproxy.cfg");
    let child = Command::new("haproxy")
        .arg("-db")
        .arg("-f")
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("start haproxy (apt-get install -y haproxy)");
    let haproxy = Haproxy { child, tcp, _dir: TempDir(dir) };
    // Up once a handshake through it is answered (its checks passed).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(stream) = std::net::TcpStream::connect(tcp) {
            use std::io::BufRead;
            let mut writer = stream.try_clone().expect("clone");
            let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
            let mut line = String::new();
            if writeln!(writer, "{HANDSHAKE}").is_ok()
                && std::io::BufReader::new(stream).read_line(&mut line).is_ok()
                && line.contains(r#""ok":true"#)
            {
                return haproxy;
            }
        }
        assert!(Instant::now() < deadline, "HAProxy never passed a handshake through");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `(transactions committed, rows inserted + updated + deleted)` of `database`.
fn pg_counters(admin: &str, database: &str) -> (i64, i64) {
    use sqlx::{Connection, Row};
    let (admin, database) = (admin.to_owned(), database.to_owned());
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        runtime.block_on(async {
            let mut conn = sqlx::PgConnection::connect(&admin).await.expect("connect to DATABASE_URL");
            let row = sqlx::query(
                "SELECT xact_commit, tup_inserted + tup_updated + tup_deleted FROM pg_stat_database WHERE datname = $1",
            )
            .bind(&database)
            .fetch_one(&mut conn)
            .await
            .expect("pg_stat_database");
            (row.get::<i64, _>(0), row.get::<i64, _>(1))
        })
    })
    .join()
    .expect("stats thread")
}

/// Prints what PostgreSQL does per spawn → delegate → await cycle on one
/// node, one cycle at a time and pipelined.
fn writes_per_cycle(system: &actix_rt::SystemRunner, database: &BenchDatabase, node: &Service) {
    const CYCLES: u64 = 2000;
    for (label, window) in [("one at a time", 1), ("pipelined", WINDOW)] {
        let before = (pg_counters(&database.admin, &database.name), store_stats(node.http));
        let client = system.block_on(async {
            let mut client = tcp_client(node.tcp).await;
            client.window = window;
            client.run(CYCLES).await;
            client
        });
        // A PostgreSQL backend publishes its counters at most once a second
        // while busy, and an idle one only after ten. (The session stays
        // open meanwhile: its end, which deletes its rows, is not counted.)
        std::thread::sleep(Duration::from_millis(11_000));
        let after = (pg_counters(&database.admin, &database.name), store_stats(node.http));
        system.block_on(client.close());
        let per = |n: i64| n as f64 / CYCLES as f64;
        eprintln!(
            "cluster: PostgreSQL per cycle ({label}): {:.2} transactions, {:.2} rows written; \
             the store's own commits {:.2} (mean batch {:.1} changes)",
            per(after.0 .0 - before.0 .0),
            per(after.0 .1 - before.0 .1),
            per((after.1 .0 - before.1 .0) as i64),
            (after.1 .1 - before.1 .1) as f64 / (after.1 .0 - before.1 .0).max(1) as f64,
        );
    }
}

pub(super) fn cluster(c: &mut Criterion) {
    let system = actix_rt::System::new();
    let database = BenchDatabase::create();
    let nodes: Vec<Service> = (1..=3).map(|n| start_service_on(&database.url, &format!("node{n}"))).collect();
    writes_per_cycle(&system, &database, &nodes[0]);
    let mut group = c.benchmark_group("cluster");
    group.throughput(Throughput::Elements(1));
    for count in [1, 3] {
        let members: Vec<&Service> = nodes.iter().take(count).collect();
        let haproxy = start_haproxy(&members, &format!("{count}"));
        group.bench_function(format!("haproxy_{count}_nodes_8_sessions"), |b| {
            b.iter_custom(|iters| system.block_on(timed(iters, 8, Settle::Pause, || tcp_client(haproxy.tcp))))
        });
    }
    group.finish();
}
