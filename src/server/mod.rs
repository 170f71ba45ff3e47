//! The service as a library call: [`run`] serves the protocol on the
//! listeners it is given until a shutdown future resolves (or, over stdio,
//! until stdin ends), then closes every session and returns.
//!
//! `subagentd` is this plus argument parsing; tests start it in-process on
//! port 0. It must run inside an actix system (`actix_rt::System`, or an
//! `#[actix_rt::test]`).
//!
//! - `http`: the HTTP server and its routing table, mounting A2E over HTTP
//!   (`crate::transport::http`) and every face's routes (`crate::faces`).
//! - `metrics_listener`: `--metrics ADDR`, the metrics (and, without an
//!   HTTP listener, the operator's page and API) on a listener of their own.
//! - [`logging`] (feature `cli`): the binary's non-blocking stderr logger.
//! - [`telemetry`] (feature `otlp`): the OTLP span exporter.
//!
//! It re-exports the protocol session service it runs on ([`Service`] and
//! what driving a session takes), for callers that serve sessions
//! themselves.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{FileConfig, Limits};
use crate::faces::mcp_server::{serve_stdio, McpFace};
use crate::faces::operator::AdminApi;
use crate::runtime::task::AdapterRouter;
use crate::runtime::{Host, HostConfig};
use crate::session::{adopt_orphans, HttpSessions};
use crate::store::StoreHandle;
use crate::tools::ToolHost;
use crate::transport::{stdio, tcp};

mod http;
#[cfg(feature = "cli")]
pub mod logging;
mod metrics_listener;
#[cfg(feature = "otlp")]
pub mod telemetry;

// The protocol session service the server runs, for a caller that serves
// sessions itself (a test, a fuzz target, an embedder with its own
// transport): open one on a `Service` and drive its input and output.
pub use crate::session::{Auth, ConnectionEnd, InputSender, OutboxReceiver, Service, SHUTTING_DOWN};

/// Where sessions' actor trees live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workers {
    /// One arbiter (thread) per CPU.
    PerCpu,
    /// This many arbiters.
    Count(usize),
    /// The calling arbiter: every tree on the caller's thread (tests, and a
    /// paused tokio clock that must reach the sessions).
    InPlace,
}

/// What a server runs with, built from the config file by
/// [`Settings::from_file`] or by hand.
#[derive(Debug)]
pub struct Settings {
    /// Bounds on what clients can make the host hold.
    pub limits: Limits,
    /// Which adapter runs which model.
    pub router: AdapterRouter,
    /// The accepted handshake tokens.
    pub auth: Auth,
    /// The tokens of the operator's page and API (`[admin] tokens`).
    pub admin_tokens: Auth,
    /// Where the sessions' trees live.
    pub workers: Workers,
    /// HTTP worker threads (0: one per CPU).
    pub http_workers: usize,
    /// How long a closing TCP/stdio session may take to flush its last lines.
    pub final_flush: Duration,
    /// Where sessions are kept (opened by the caller: see [`crate::store::open`]).
    pub store: StoreHandle,
    /// Lines kept per HTTP session for `Last-Event-ID` replay.
    pub journal_retained: usize,
    /// Stored sessions loaded at once when their work resumes without their
    /// clients (`[store] resume_concurrency`).
    pub resume_concurrency: usize,
    /// The MCP servers of `[[mcp_servers]]` (the openai routes of `router`
    /// offer their tools); started by [`run`].
    pub tools: Arc<ToolHost>,
    /// Which tool calls wait for a person's approval (`[[tools.approval]]`).
    pub approvals: crate::ApprovalPolicy,
    /// The A2A front door (`[a2a]`), on the HTTP listener.
    pub a2a: crate::config::A2aConfig,
    /// The MCP front door (`[mcp.server]`): `/mcp` on the HTTP listener,
    /// and what [`Listeners::mcp_stdio`] serves.
    pub mcp: crate::config::McpFaceConfig,
    /// The HTTP listener's `Host` and `Origin` checks (`[http]`).
    pub http: crate::config::HttpConfig,
}

impl Settings {
    /// The settings a config file describes: its limits, its routes (the
    /// scripted adapter for every other model), its tokens, its `[server]`.
    pub fn from_file(file: &FileConfig) -> Result<Self, String> {
        let workers = match file.server.workers {
            0 => Workers::PerCpu,
            n => Workers::Count(n),
        };
        let tools = Arc::new(ToolHost::new(file.mcp_servers.clone()).with_client_policy(file.mcp.clone()));
        Ok(Self {
            limits: file.limits.clone(),
            router: crate::adapter::router_with_tools(file, &tools)?,
            auth: Auth::with_tokens(file.auth_tokens()?),
            admin_tokens: Auth::with_tokens(file.admin_tokens()?),
            workers,
            http_workers: file.server.http_workers,
            final_flush: Duration::from_millis(file.server.final_flush_ms),
            store: StoreHandle::memory(),
            journal_retained: usize::try_from(file.store.journal_retained).unwrap_or(usize::MAX),
            resume_concurrency: file.store.resume_concurrency,
            tools,
            approvals: crate::ApprovalPolicy::new(&file.tools.approval)
                .map_err(|err| format!("invalid config: {err}"))?,
            a2a: file.a2a.clone(),
            mcp: file.mcp.server.clone(),
            http: file.http.clone(),
        })
    }
}

/// What to serve on: bound (and listening) sockets, or stdin/stdout.
#[derive(Debug, Default)]
pub struct Listeners {
    /// NDJSON over TCP, one session per connection.
    pub tcp: Option<std::net::TcpListener>,
    /// HTTP + SSE.
    pub http: Option<std::net::TcpListener>,
    /// One session on stdin/stdout (alone: not with `tcp` or `http`).
    pub stdio: bool,
    /// One MCP session on stdin/stdout (`subagentd mcp`; alone, as `stdio`).
    pub mcp_stdio: bool,
    /// `GET /metrics` alone (`--metrics`), beside any of the others.
    pub metrics: Option<std::net::TcpListener>,
}

fn threads(configured: usize) -> usize {
    if configured > 0 {
        configured
    } else {
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2)
    }
}

/// Serves until `shutdown` resolves (or stdin ends, over stdio); then stops
/// accepting, closes every session (each tree is terminated) and returns.
pub async fn run(
    settings: Settings,
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + 'static,
) -> Result<(), String> {
    let on_stdio = listeners.stdio || listeners.mcp_stdio;
    if on_stdio && (listeners.tcp.is_some() || listeners.http.is_some() || (listeners.stdio && listeners.mcp_stdio)) {
        return Err("stdio cannot be combined with tcp or http".into());
    }
    let workers: Vec<actix_rt::Arbiter> = match settings.workers {
        Workers::PerCpu => (0..threads(0)).map(|_| actix_rt::Arbiter::new()).collect(),
        Workers::Count(n) => (0..n.max(1)).map(|_| actix_rt::Arbiter::new()).collect(),
        Workers::InPlace => Vec::new(),
    };
    // MCP servers connect while the rest starts; their tools are offered once ready.
    settings.tools.start();
    let handles = workers.iter().map(|worker| worker.handle()).collect();
    let config = HostConfig {
        limits: settings.limits,
        router: settings.router,
        tools: settings.tools.clone(),
        approvals: settings.approvals,
        ..Default::default()
    };
    let store = settings.store.clone();
    let service = Service::with_store(Host::with_workers(config, handles), settings.auth, settings.store);
    let admin = AdminApi::new(service.clone(), settings.admin_tokens);
    let metrics_server = match listeners.metrics {
        Some(listener) => {
            // The operator's page goes where HTTP is served: here when
            // nothing else serves it.
            let page = listeners.http.is_none().then(|| admin.clone());
            let server = metrics_listener::server(listener, page).map_err(|err| format!("metrics: {err}"))?;
            let handle = server.handle();
            actix_rt::spawn(server);
            Some(handle)
        }
        None => None,
    };
    let served = if listeners.stdio {
        let on_shutdown = service.clone();
        actix_rt::spawn(async move {
            shutdown.await;
            stop_sessions(&on_shutdown).await;
        });
        stdio::serve(service, settings.final_flush).await.map(drop).map_err(|err| format!("stdio: {err}"))
    } else if listeners.mcp_stdio {
        serve_mcp_stdio(
            service,
            settings.mcp,
            settings.final_flush,
            settings.journal_retained,
            settings.resume_concurrency,
            shutdown,
        )
        .await
    } else {
        let http = HttpSettings {
            workers: settings.http_workers,
            journal_retained: settings.journal_retained,
            resume_concurrency: settings.resume_concurrency,
            admin,
            a2a: settings.a2a,
            mcp: settings.mcp,
            http: settings.http,
        };
        serve_network(service, listeners.tcp, listeners.http, http, settings.final_flush, shutdown).await
    };
    if let Some(handle) = metrics_server {
        handle.stop(false).await;
    }
    for worker in workers {
        worker.stop();
    }
    // Everything recorded is committed before the process goes.
    store.flush().await;
    served
}

// The host stops (a signal): what was recorded is committed, then nothing
// more is, so the sessions closing now stay stored, resumable after a
// restart with every completed step; then every session closes.
async fn stop_sessions(service: &Service) {
    service.store().freeze().await;
    service.shutdown();
}

// What the HTTP listener runs with.
struct HttpSettings {
    workers: usize,
    journal_retained: usize,
    resume_concurrency: usize,
    admin: Arc<AdminApi>,
    a2a: crate::config::A2aConfig,
    mcp: crate::config::McpFaceConfig,
    http: crate::config::HttpConfig,
}

// `subagentd mcp`: one MCP session on stdin/stdout, its sessions in an
// HTTP registry (stored, restored) as every other face's; with a durable
// store, stored sessions resume here as on any node.
async fn serve_mcp_stdio(
    service: Arc<Service>,
    config: crate::config::McpFaceConfig,
    final_flush: Duration,
    journal_retained: usize,
    resume_concurrency: usize,
    shutdown: impl Future<Output = ()> + 'static,
) -> Result<(), String> {
    let sessions = HttpSessions::with_replay(service.clone(), final_flush, journal_retained);
    let attach: std::sync::Weak<dyn crate::session::Attach> = Arc::downgrade(&sessions) as _;
    service.set_attach(attach);
    if service.store().is_durable() {
        let parked = service.park_with();
        actix_rt::spawn(adopt_orphans(sessions.clone(), resume_concurrency, parked));
    }
    let face = McpFace::new(sessions, config);
    let served = tokio::select! {
        served = serve_stdio(face) => served.map_err(|err| format!("mcp stdio: {err}")),
        _ = shutdown => Ok(()),
    };
    stop_sessions(&service).await;
    service.wait_idle().await;
    served
}

async fn serve_network(
    service: Arc<Service>,
    tcp: Option<std::net::TcpListener>,
    http: Option<std::net::TcpListener>,
    settings: HttpSettings,
    final_flush: Duration,
    shutdown: impl Future<Output = ()>,
) -> Result<(), String> {
    // Stored sessions are served here whether or not their clients come
    // back: the HTTP registry holds them (over HTTP or not), and the
    // adopter brings them in.
    let sessions = HttpSessions::with_replay(service.clone(), final_flush, settings.journal_retained);
    let attach: std::sync::Weak<dyn crate::session::Attach> = Arc::downgrade(&sessions) as _;
    service.set_attach(attach);
    if service.store().is_durable() {
        let parked = service.park_with();
        actix_rt::spawn(adopt_orphans(sessions.clone(), settings.resume_concurrency, parked));
    }
    if let Some(listener) = tcp {
        let addr = listener.local_addr().map_err(|err| err.to_string())?;
        listener.set_nonblocking(true).map_err(|err| format!("tcp {addr}: {err}"))?;
        let listener = tokio::net::TcpListener::from_std(listener).map_err(|err| format!("tcp {addr}: {err}"))?;
        actix_rt::spawn(tcp::serve(listener, service.clone(), final_flush));
    }
    let mut http_handle = None;
    if let Some(listener) = http {
        let addr = listener.local_addr().map_err(|err| err.to_string())?;
        listener.set_nonblocking(true).map_err(|err| format!("http {addr}: {err}"))?;
        let server = http::server(
            listener,
            sessions,
            settings.admin,
            settings.a2a,
            settings.mcp,
            &settings.http,
            threads(settings.workers),
        )
        .map_err(|err| format!("http {addr}: {err}"))?;
        http_handle = Some(server.handle());
        actix_rt::spawn(server);
    }
    shutdown.await;
    log::info!("shutting down: closing every session");
    stop_sessions(&service).await;
    service.wait_idle().await;
    if let Some(handle) = http_handle {
        handle.stop(false).await;
    }
    Ok(())
}
