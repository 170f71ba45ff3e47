//! `subagentd`: serves the A2E subagents capability over stdio, TCP and/or
//! HTTP+SSE. The logic lives in the library; this is argument parsing,
//! start-up checks, and signal handling.

use clap::{Args, Parser, Subcommand};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use subagent_host::config::FileConfig;
use subagent_host::session::{Auth, Service};
use subagent_host::transport::{http, stdio, tcp};
use subagent_host::{Host, HostConfig};

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
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// Serve one session on stdin/stdout (NDJSON; logs go to stderr). EOF on
    /// stdin ends the session and the process. Cannot be combined with
    /// --tcp or --http.
    #[arg(long, conflicts_with_all = ["tcp", "http"])]
    stdio: bool,
    /// Serve NDJSON over TCP on HOST:PORT, one session per connection
    /// (default when omitted: 127.0.0.1:7700; a bare PORT means 127.0.0.1:PORT).
    #[arg(long, value_name = "HOST:PORT", num_args = 0..=1, default_missing_value = DEFAULT_TCP)]
    tcp: Option<String>,
    /// Serve HTTP+SSE on HOST:PORT: POST /session, POST /send, GET /stream,
    /// GET /health (default when omitted: 127.0.0.1:8080; a bare PORT means
    /// 127.0.0.1:PORT).
    #[arg(long, value_name = "HOST:PORT", num_args = 0..=1, default_missing_value = DEFAULT_HTTP)]
    http: Option<String>,
    /// TOML config file ([limits], [auth], [[routes]], [server]). Without it,
    /// built-in defaults apply and the scripted adapter serves every model.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Allow binding a non-loopback address with no auth tokens configured.
    #[arg(long)]
    insecure: bool,
}

fn main() -> ExitCode {
    subagent_host::logging::init();
    let Command::Serve(args) = Cli::parse().command;
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

fn bind(flag: &str, text: &str, auth: &Auth, insecure: bool) -> Result<std::net::TcpListener, String> {
    let addr = resolve(flag, text)?;
    if !addr.ip().is_loopback() && !auth.is_enabled() && !insecure {
        return Err(format!(
            "refusing to serve --{flag} on {addr}: it is not a loopback address and no auth tokens are configured \
             (set [auth] tokens or token_env in --config, or pass --insecure)"
        ));
    }
    let listener = std::net::TcpListener::bind(addr).map_err(|err| format!("cannot bind --{flag} {addr}: {err}"))?;
    listener.set_nonblocking(true).map_err(|err| format!("--{flag} {addr}: {err}"))?;
    Ok(listener)
}

fn threads(configured: usize) -> usize {
    if configured > 0 {
        configured
    } else {
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2)
    }
}

fn serve(args: ServeArgs) -> Result<(), String> {
    if !args.stdio && args.tcp.is_none() && args.http.is_none() {
        return Err("nothing to serve: give --stdio, --tcp [HOST:PORT] and/or --http [HOST:PORT] (see --help)".into());
    }
    let file = match &args.config {
        Some(path) => FileConfig::load(path)?,
        None => FileConfig::default(),
    };
    let router = subagent_host::adapter::router(&file)?;
    let auth = Auth::with_tokens(file.auth_tokens()?);
    let tcp_listener = args.tcp.as_deref().map(|addr| bind("tcp", addr, &auth, args.insecure)).transpose()?;
    let http_listener = args.http.as_deref().map(|addr| bind("http", addr, &auth, args.insecure)).transpose()?;
    let final_flush = Duration::from_millis(file.server.final_flush_ms);
    let system = actix_rt::System::new();
    system.block_on(async move {
        let stop_signal = signals().map_err(|err| format!("cannot install signal handlers: {err}"))?;
        let workers: Vec<actix_rt::Arbiter> =
            (0..threads(file.server.workers)).map(|_| actix_rt::Arbiter::new()).collect();
        let handles = workers.iter().map(|worker| worker.handle()).collect();
        let config = HostConfig { limits: file.limits.clone(), router, ..Default::default() };
        let service = Service::new(Host::with_workers(config, handles), auth);
        if args.stdio {
            let on_signal = service.clone();
            actix_rt::spawn(async move {
                stop_signal.await;
                on_signal.shutdown();
            });
            stdio::serve(service, final_flush).await.map_err(|err| format!("stdio: {err}"))?;
        } else {
            serve_network(service, tcp_listener, http_listener, file.server.http_workers, final_flush, stop_signal)
                .await?;
        }
        for worker in workers {
            worker.stop();
        }
        Ok(())
    })
}

async fn serve_network(
    service: Arc<Service>,
    tcp_listener: Option<std::net::TcpListener>,
    http_listener: Option<std::net::TcpListener>,
    http_workers: usize,
    final_flush: Duration,
    stop_signal: impl std::future::Future<Output = ()>,
) -> Result<(), String> {
    if let Some(listener) = tcp_listener {
        let addr = listener.local_addr().map_err(|err| err.to_string())?;
        let listener = tokio::net::TcpListener::from_std(listener).map_err(|err| format!("tcp {addr}: {err}"))?;
        actix_rt::spawn(tcp::serve(listener, service.clone(), final_flush));
        eprintln!("subagentd: tcp listening on {addr}");
    }
    let mut http_handle = None;
    if let Some(listener) = http_listener {
        let addr = listener.local_addr().map_err(|err| err.to_string())?;
        let sessions = http::HttpSessions::new(service.clone(), final_flush);
        let server = http::server(listener, sessions.clone(), threads(http_workers))
            .map_err(|err| format!("http {addr}: {err}"))?;
        http_handle = Some(server.handle());
        actix_rt::spawn(server);
        eprintln!("subagentd: http listening on {addr}");
    }
    stop_signal.await;
    log::info!("signal received: closing every session");
    service.shutdown();
    service.wait_idle().await;
    if let Some(handle) = http_handle {
        handle.stop(false).await;
    }
    Ok(())
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
    })
}
