//! A PostgreSQL database of its own for one test: created over
//! `DATABASE_URL` (by default the machine's own server,
//! [`DEFAULT_DATABASE_URL`]), dropped (`WITH (FORCE)`) afterwards, also when
//! the test fails. With the server down, the test fails saying how to
//! start one: it never skips.

use futures_util::future::BoxFuture;
use std::time::Duration;
use subagent_host::store::StoreUrl;

/// The server the tests use when `DATABASE_URL` is not set: a local
/// PostgreSQL with trust auth on its standard port, as Debian's package
/// and `.ci/run` leave it.
pub(crate) const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

fn pg_help(problem: &str) -> String {
    format!(
        "{problem}\n\
         The PostgreSQL tests need a server they may CREATE DATABASE on, named by DATABASE_URL \
         (default {DEFAULT_DATABASE_URL}). Start one, e.g.\n  \
         docker run -d --rm -p 5432:5432 -e POSTGRES_HOST_AUTH_METHOD=trust postgres:16\n\
         (or a local cluster: pg_ctlcluster 15 main start), then run\n  \
         DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres cargo test --release"
    )
}

/// Runs one statement over a connection to `url`.
pub(crate) fn pg_execute(url: &str, sql: &str) -> Result<(), String> {
    use sqlx::Executor;
    let sql = sql.to_owned();
    with_connection(url, move |conn| {
        Box::pin(async move { conn.execute(sql.as_str()).await.map(drop).map_err(|err| err.to_string()) })
    })
}

/// The first column of the first row `sql` returns over a connection to
/// `url` (a count).
pub(crate) fn pg_count(url: &str, sql: &str) -> Result<i64, String> {
    use sqlx::Row;
    let sql = sql.to_owned();
    with_connection(url, move |conn| {
        Box::pin(async move {
            let row = sqlx::query(&sql).fetch_one(conn).await.map_err(|err| err.to_string())?;
            row.try_get::<i64, _>(0).map_err(|err| err.to_string())
        })
    })
}

/// Runs `work` on a connection to `url` (made within 10 s, closed after),
/// on a thread and runtime of its own: callers may be inside a runtime
/// already.
fn with_connection<T, F>(url: &str, work: F) -> Result<T, String>
where
    T: Send + 'static,
    F: for<'c> FnOnce(&'c mut sqlx::PgConnection) -> BoxFuture<'c, Result<T, String>> + Send + 'static,
{
    use sqlx::Connection;
    let url = url.to_owned();
    std::thread::spawn(move || {
        let runtime =
            tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|err| err.to_string())?;
        runtime.block_on(async {
            let mut conn = tokio::time::timeout(Duration::from_secs(10), sqlx::PgConnection::connect(&url))
                .await
                .map_err(|_| "timed out connecting".to_owned())?
                .map_err(|err| err.to_string())?;
            let done = work(&mut conn).await;
            let _ = conn.close().await;
            done
        })
    })
    .join()
    .unwrap_or_else(|_| Err("the SQL thread panicked".into()))
}

/// `url` with its password (if any) hidden, as the host's own logs show it.
fn redact(url: &str) -> String {
    StoreUrl::parse(url).map_or_else(|_| "(not a store URL)".to_owned(), |parsed| parsed.describe())
}

/// `url` naming database `name` instead of its own.
fn with_database(url: &str, name: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("DATABASE_URL is a URL");
    let (rest, query) = match rest.split_once('?') {
        Some((rest, query)) => (rest, Some(query)),
        None => (rest, None),
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let mut named = format!("{scheme}://{authority}/{name}");
    if let Some(query) = query {
        named.push('?');
        named.push_str(query);
    }
    named
}

/// A PostgreSQL database made for one test, dropped (`WITH (FORCE)`) when
/// this is dropped, also when the test fails.
pub(crate) struct TestDatabase {
    admin_url: String,
    name: String,
    /// The URL of the test's own database.
    pub(crate) url: String,
}

impl TestDatabase {
    /// Creates `subagentd_test_<random>` over `DATABASE_URL`; fails the test,
    /// saying how to start a server, when it is unset or unreachable.
    pub(crate) fn create() -> Self {
        let admin_url = std::env::var("DATABASE_URL")
            .ok()
            .filter(|url| !url.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_DATABASE_URL.to_owned());
        let name = format!("subagentd_test_{:016x}", fastrand::u64(..));
        if let Err(err) = pg_execute(&admin_url, &format!("CREATE DATABASE {name}")) {
            let shown = redact(&admin_url);
            panic!("{}", pg_help(&format!("Cannot create a database over DATABASE_URL={shown}: {err}")));
        }
        let url = with_database(&admin_url, &name);
        Self { admin_url, name, url }
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        if let Err(err) = pg_execute(&self.admin_url, &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name)) {
            eprintln!("could not drop the test database {}: {err}", self.name);
        }
    }
}
