//! `subagentd`: serves the A2E subagents capability over stdio, TCP and/or
//! HTTP+SSE (`serve`), or one MCP session over stdio (`mcp`). The service is the library's `server::run`; this is argument
//! parsing, binding, start-up checks and signals.

use clap::{Args, Parser, Subcommand};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::process::ExitCode;

use subagent_host::config::{FileConfig, SqliteSync};
use subagent_host::server::logging::LogFormat;
use subagent_host::server::Auth;
use subagent_host::server::{self, Listeners, Settings};
use subagent_host::store::{self, ClusterSettings, DataDirLock, StoreUrl, WriterSettings};

// The allocator subagentd ships with: subagent churn is allocation heavy
// and mimalloc takes a fifth off the cost of a spawn → delegate → await
// cycle against glibc malloc (BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Default TCP address when `--tcp` is given without one.
const DEFAULT_TCP: &str = "127.0.0.1:7700";
/// Default HTTP address when `--http` is given without one.
const DEFAULT_HTTP: &str = "127.0.0.1:8080";

#[derive(Debug, Parser)]
#[command(name = "subagentd", version, about = "A host for the A2E subagents (multi_agent) capability")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the protocol over stdio, TCP and/or HTTP+SSE.
    Serve(ServeArgs),
    /// Serve one MCP session on stdin/stdout (JSON-RPC, one message per
    /// line; logs go to stderr): the host's tools for an MCP client's
    /// `mcpServers` entry. With [auth] tokens, SUBAGENTD_TOKEN holds one.
    Mcp(McpArgs),
}

#[derive(Debug, Args)]
struct McpArgs {
    /// TOML config file, as `serve` takes it ([mcp.server], [limits], [[routes]], …).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Where state is kept: `memory` (the default here: each MCP client
    /// starts its own process), `sqlite:PATH` (MCP tasks survive a restart),
    /// or `postgres://…`. Default: `[store] url` in --config, else memory.
    #[arg(long, value_name = "URL")]
    store: Option<String>,
    /// How log records are written to stderr (`RUST_LOG` picks which).
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormatArg,
}

impl From<McpArgs> for ServeArgs {
    fn from(args: McpArgs) -> Self {
        Self {
            stdio: false,
            mcp: true,
            tcp: None,
            http: None,
            config: args.config,
            insecure: false,
            store: args.store,
            data_dir: PathBuf::from("./subagentd-data"),
            node_id: None,
            log_format: args.log_format,
            metrics: None,
        }
    }
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// Serve one session on stdin/stdout (NDJSON; logs go to stderr). EOF on
    /// stdin ends the session and the process. Cannot be combined with
    /// --tcp or --http.
    #[arg(long, conflicts_with_all = ["tcp", "http"])]
    stdio: bool,
    /// Serve one MCP session on stdin/stdout instead (`subagentd mcp`).
    #[arg(skip)]
    mcp: bool,
    /// Serve NDJSON over TCP on HOST:PORT, one session per connection
    /// (default when omitted: 127.0.0.1:7700; a bare PORT means 127.0.0.1:PORT).
    #[arg(long, value_name = "HOST:PORT", num_args = 0..=1, default_missing_value = DEFAULT_TCP)]
    tcp: Option<String>,
    /// Serve HTTP+SSE on HOST:PORT: POST /session, POST /send, GET /stream,
    /// GET /health, GET /metrics, and the live view GET /ui with its API
    /// /admin/* (default when omitted: 127.0.0.1:8080; a bare PORT means
    /// 127.0.0.1:PORT).
    #[arg(long, value_name = "HOST:PORT", num_args = 0..=1, default_missing_value = DEFAULT_HTTP)]
    http: Option<String>,
    /// TOML config file ([limits], [auth], [admin], [[routes]], [server], …). Without it,
    /// built-in defaults apply and the scripted adapter serves every model.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Allow binding a non-loopback address with no auth tokens configured.
    #[arg(long)]
    insecure: bool,
    /// Where state is kept: `memory` (nothing survives a restart),
    /// `sqlite:PATH`, or `postgres://…`. Default: `[store] url` (or
    /// `url_env`) in --config; else SQLite under --data-dir, or memory with
    /// --stdio.
    #[arg(long, value_name = "URL")]
    store: Option<String>,
    /// Directory of the default SQLite store (created on first use; one
    /// subagentd per directory).
    #[arg(long, value_name = "DIR", default_value = "./subagentd-data")]
    data_dir: PathBuf,
    /// This node's id in a cluster of nodes sharing one PostgreSQL store
    /// (default: a fresh id at every start). Two live processes may not
    /// share one.
    #[arg(long, value_name = "ID")]
    node_id: Option<String>,
    /// How log records are written to stderr (`RUST_LOG` picks which):
    /// text, or one JSON object per line for log shippers.
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormatArg,
    /// Serve `GET /metrics` (Prometheus) on HOST:PORT of its own, for a
    /// service without --http (a bare PORT means 127.0.0.1:PORT); the live
    /// view (/ui, /admin/*) is served there too. With --http, both are
    /// there.
    #[arg(long, value_name = "HOST:PORT")]
    metrics: Option<String>,
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LogFormatArg {
    Text,
    Json,
}

fn main() -> ExitCode {
    let args = match Cli::parse().command {
        Command::Serve(args) => args,
        Command::Mcp(args) => args.into(),
    };
    subagent_host::server::logging::init(match args.log_format {
        LogFormatArg::Text => LogFormat::Text,
        LogFormatArg::Json => LogFormat::Json,
    });
    // SAFETY: no thread that may open SQLite exists yet (the logger's
    // only writes to stderr).
    let _ = unsafe { subagent_host::store::sqlite_before_start() };
    match serve(args) {
        Ok(()) => {
            // Threads blocked on stdin must not keep the process alive.
            std::process::exit(0);
        }
        Err(message) => {
            eprintln!("subagentd: {message}");
            ExitCode::from(2)
        }
    }
}

fn resolve(flag: &str, text: &str) -> Result<SocketAddr, String> {
    // A bare port is the loopback address on that port: the safe reading.
    if let Ok(port) = text.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    text.to_socket_addrs()
        .map_err(|err| format!("--{flag} {text}: expected HOST:PORT (e.g. 127.0.0.1:7700) or a bare PORT: {err}"))?
        .next()
        .ok_or_else(|| format!("--{flag} {text}: resolves to no address"))
}

// Binds (and listens on) `--flag text`; [`announce`] prints the address.
fn bind(flag: &str, text: &str, auth: &Auth, insecure: bool) -> Result<std::net::TcpListener, String> {
    let addr = resolve(flag, text)?;
    if !addr.ip().is_loopback() && !auth.is_enabled() && !insecure {
        return Err(format!(
            "refusing to serve --{flag} on {addr}: it is not a loopback address and no auth tokens are configured \
             (set [auth] tokens or token_env in --config, or pass --insecure)"
        ));
    }
    listen(addr).map_err(|err| format!("cannot bind --{flag} {addr}: {err}"))
}

/// Connections the kernel queues for a listener before it accepts them.
/// `std` listens with 128: a client opening a pool of connections at once
/// (an HTTP client with 200 requests in flight) overflowed it, and each
/// dropped SYN cost that connection the 1 s SYN retransmission.
const BACKLOG: i32 = 1024;

// A listener on `addr` with [`BACKLOG`] (and, as `std` does, SO_REUSEADDR).
fn listen(addr: std::net::SocketAddr) -> std::io::Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}

// Tests and scripts read the address (port 0 picks a free one) from here:
// printed only once the signal handlers are in place.
fn announce(flag: &str, listener: &Option<std::net::TcpListener>) {
    if let Some(addr) = bound(listener) {
        eprintln!("subagentd: {flag} listening on {addr}");
    }
}

// Where `listener` (if any) takes connections.
fn bound(listener: &Option<std::net::TcpListener>) -> Option<SocketAddr> {
    listener.as_ref().and_then(|listener| listener.local_addr().ok())
}

fn serve(args: ServeArgs) -> Result<(), String> {
    if !args.stdio && !args.mcp && args.tcp.is_none() && args.http.is_none() {
        return Err("nothing to serve: give --stdio, --tcp [HOST:PORT] and/or --http [HOST:PORT] (see --help)".into());
    }
    let file = match &args.config {
        Some(path) => FileConfig::load(path)?,
        None => FileConfig::default(),
    };
    let mut settings = Settings::from_file(&file)?;
    // Flushed when `serve` returns (the process exits right after).
    let _telemetry = subagent_host::server::telemetry::init_from_env()?;
    let url = match &args.store {
        Some(text) => StoreUrl::parse(text)?,
        None => match file.store.configured_url()? {
            Some(text) => StoreUrl::parse(&text)?,
            None if args.stdio || args.mcp => StoreUrl::Memory,
            None => StoreUrl::default_sqlite(&args.data_dir),
        },
    };
    // One process per SQLite store: the lock names the holder's pid.
    let _lock = match &url {
        StoreUrl::Sqlite(path) => {
            let dir = path.parent().filter(|dir| !dir.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
            Some(DataDirLock::acquire(dir)?)
        }
        _ => None,
    };
    let writer = WriterSettings {
        batch_max: file.store.batch_max.max(1),
        commit_delay: std::time::Duration::from_millis(file.store.commit_delay_ms),
        session_ttl: std::time::Duration::from_secs(file.store.session_ttl_seconds),
        journal_retained: file.store.journal_retained,
        pool_size: file.store.pool_size,
        sqlite_full_sync: file.store.sqlite_synchronous == SqliteSync::Full,
    };
    if args.node_id.is_some() && !matches!(url, StoreUrl::Postgres(_)) {
        return Err("--node-id names a node of a cluster, which needs a PostgreSQL store (--store postgres://…)".into());
    }
    // Bound before the store opens: a cluster node registers its addresses.
    let tcp = args.tcp.as_deref().map(|addr| bind("tcp", addr, &settings.auth, args.insecure)).transpose()?;
    let http = args.http.as_deref().map(|addr| bind("http", addr, &settings.auth, args.insecure)).transpose()?;
    let metrics =
        args.metrics.as_deref().map(|addr| bind("metrics", addr, &settings.auth, args.insecure)).transpose()?;
    let cluster = ClusterSettings {
        node_id: args.node_id.clone().unwrap_or_else(|| ClusterSettings::fresh().node_id),
        lease: std::time::Duration::from_millis(file.cluster.lease_ms.max(100)),
        http_addr: bound(&http).map(|addr| addr.to_string()),
        tcp_addr: bound(&tcp).map(|addr| addr.to_string()),
    };
    settings.store = store::open(&url, writer, Some(cluster))?;
    log::info!("store: {}", url.describe());
    actix_rt::System::new().block_on(async move {
        // Before any address is printed: a signal sent by whoever read it
        // must never meet the default (fatal) action.
        let stop_signal = signals().map_err(|err| format!("cannot install signal handlers: {err}"))?;
        // First, where its state lives (a newcomer's `./subagentd-data`);
        // a host on stdio, a child of its client, prints nothing unasked.
        if tcp.is_some() || http.is_some() {
            eprintln!("subagentd: state in {}", url.describe());
        }
        announce("tcp", &tcp);
        announce("http", &http);
        announce("metrics", &metrics);
        let listeners = Listeners { tcp, http, stdio: args.stdio, mcp_stdio: args.mcp, metrics };
        server::run(settings, listeners, stop_signal).await
    })
}

/// Resolves on the first SIGTERM or SIGINT. Installed before anything is
/// served, so an early signal is never the default (fatal) action.
fn signals() -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        log::info!("signal received");
    })
}
