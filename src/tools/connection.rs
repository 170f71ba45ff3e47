//! [`McpServer`]: one MCP server's connection, kept up for as long as the
//! value lives.
//!
//! A supervising task connects (starting the program, for stdio), lists
//! the tools, follows `notifications/tools/list_changed`, and when the
//! connection ends (a crash, a closed stream) connects again after a
//! backoff that doubles from half a second to 30 s and resets once a
//! connection is ready. Each change of state is logged and shown in the
//! `mcp_server_state` metric. Dropping the [`McpServer`] stops the task and
//! the program.

use rmcp::model::ClientConfig;
use rmcp::service::{NotificationContext, Peer, RoleClient, ServiceExt};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::catalog::McpTool;
use crate::config::{McpServerConfig, McpTransportKind};
use crate::metrics::metrics;

/// First wait before connecting again; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// Longest wait before connecting again.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How long connecting (and the MCP handshake) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Where a server's connection stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerState {
    /// Starting or connecting, or waiting to try again.
    Connecting,
    /// Connected, with its tools listed.
    Ready,
    /// The last attempt failed, for this reason; another follows.
    Failed(String),
}

impl ServerState {
    /// `connecting`, `ready` or `failed`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Connecting => "connecting",
            Self::Ready => "ready",
            Self::Failed(_) => "failed",
        }
    }
}

// What the supervising task and the handle share.
struct Shared {
    config: McpServerConfig,
    name: Arc<str>,
    state: watch::Sender<ServerState>,
    tools: RwLock<Arc<Vec<McpTool>>>,
    peer: RwLock<Option<Peer<RoleClient>>>,
    // Who answered the last handshake, and when (for `mcp/server/list`).
    met: RwLock<Option<Met>>,
}

/// What the server said of itself at its last handshake.
#[derive(Debug, Clone, PartialEq)]
pub struct Met {
    /// The MCP protocol version agreed.
    pub protocol_version: String,
    /// The server's own name and version.
    pub server_name: String,
    /// Its version.
    pub server_version: String,
    /// When the connection became ready, in seconds since the Unix epoch.
    pub connected_at: f64,
}

impl Shared {
    fn set_state(&self, state: ServerState) {
        let state = match state {
            // The full text goes to the log; what a client reads names no
            // type of the MCP SDK.
            ServerState::Failed(why) => {
                log::warn!("mcp server {}: failed: {why}", self.name);
                ServerState::Failed(plain(&why))
            }
            other => {
                log::info!("mcp server {}: {}", self.name, other.as_str());
                other
            }
        };
        metrics().mcp_server_state(&self.name, state.as_str());
        self.state.send_replace(state);
    }

    async fn relist(&self, peer: &Peer<RoleClient>) -> Result<(), String> {
        let listed = peer.list_all_tools().await.map_err(|err| format!("tools/list failed: {err}"))?;
        let allowed: Vec<glob::Pattern> =
            self.config.tool_allow_list.iter().filter_map(|glob| glob::Pattern::new(glob).ok()).collect();
        let tools: Vec<McpTool> = listed
            .iter()
            .filter(|tool| allowed.is_empty() || allowed.iter().any(|glob| glob.matches(&tool.name)))
            .filter_map(|tool| McpTool::from_listed(&self.name, tool))
            .collect();
        log::info!("mcp server {}: {} tools", self.name, tools.len());
        *self.tools.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(tools);
        Ok(())
    }
}

/// One MCP server's connection (see the module docs).
pub struct McpServer {
    shared: Arc<Shared>,
    stop: CancellationToken,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer").field("name", &self.shared.name).field("state", &self.state()).finish()
    }
}

impl Drop for McpServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl McpServer {
    /// Starts keeping a connection to the server `config` describes, on
    /// `runtime` (which must outlive it).
    pub fn start(config: McpServerConfig, runtime: &tokio::runtime::Handle) -> Arc<Self> {
        let name: Arc<str> = config.name.as_str().into();
        let (state, _) = watch::channel(ServerState::Connecting);
        let shared = Arc::new(Shared {
            config,
            name,
            state,
            tools: RwLock::new(Arc::new(Vec::new())),
            peer: RwLock::new(None),
            met: RwLock::new(None),
        });
        metrics().mcp_server_state(&shared.name, "connecting");
        let stop = CancellationToken::new();
        runtime.spawn(supervise(shared.clone(), stop.clone()));
        Arc::new(Self { shared, stop })
    }

    /// Its name.
    pub fn name(&self) -> &Arc<str> {
        &self.shared.name
    }

    /// Its config entry.
    pub fn config(&self) -> &McpServerConfig {
        &self.shared.config
    }

    /// Where its connection stands now.
    pub fn state(&self) -> ServerState {
        self.shared.state.borrow().clone()
    }

    /// Its tools as last listed (empty until it is first ready).
    pub fn tools(&self) -> Arc<Vec<McpTool>> {
        self.shared.tools.read().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// What the server said of itself when it was last ready.
    pub fn met(&self) -> Option<Met> {
        self.shared.met.read().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// Waits up to `wait` for the server's state to settle (ready or
    /// failed), then answers it.
    pub async fn settled(&self, wait: Duration) -> ServerState {
        let mut state = self.shared.state.subscribe();
        drop(tokio::time::timeout(wait, state.wait_for(|state| *state != ServerState::Connecting)).await);
        self.state()
    }

    /// Waits up to `wait` for the server to be ready; its tools then, or
    /// why not.
    pub async fn ready_tools(&self, wait: Duration) -> Result<Arc<Vec<McpTool>>, String> {
        self.ready_peer(wait).await.map(|_| self.tools())
    }

    /// The connection to call through, waiting up to `wait` while it
    /// connects; a server whose last attempt failed answers at once.
    pub(super) async fn ready_peer(&self, wait: Duration) -> Result<Peer<RoleClient>, String> {
        let mut state = self.shared.state.subscribe();
        let settled = tokio::time::timeout(wait, state.wait_for(|state| *state != ServerState::Connecting)).await;
        drop(settled);
        match self.state() {
            ServerState::Ready => {}
            ServerState::Failed(why) => {
                return Err(format!("MCP server `{}` is not available: {why}", self.shared.name))
            }
            ServerState::Connecting => return Err(format!("MCP server `{}` is still connecting", self.shared.name)),
        }
        self.shared
            .peer
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
            .ok_or_else(|| format!("MCP server `{}` is reconnecting", self.shared.name))
    }
}

// Hears the server's notifications: a changed tool list is listed again.
struct Listener {
    shared: std::sync::Weak<Shared>,
}

impl rmcp::ClientHandler for Listener {
    async fn on_tool_list_changed(&self, context: NotificationContext<RoleClient>) {
        if let Some(shared) = self.shared.upgrade() {
            log::info!("mcp server {}: its tool list changed", shared.name);
            if let Err(why) = shared.relist(&context.peer).await {
                log::warn!("mcp server {}: {why}", shared.name);
            }
        }
    }

    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::default();
        info.client_info.name = "subagentd".into();
        info.client_info.version = env!("CARGO_PKG_VERSION").into();
        // The host speaks the initialize handshake: it offers the latest
        // version that has one (rmcp's LATEST is the stateless draft).
        info.protocol_version = rmcp::model::ProtocolVersion::LATEST_WITH_INITIALIZE;
        info
    }
}

// Connects, serves, and connects again, until `stop`.
async fn supervise(shared: Arc<Shared>, stop: CancellationToken) {
    let mut backoff = FIRST_BACKOFF;
    loop {
        shared.set_state(ServerState::Connecting);
        let attempt = tokio::select! {
            _ = stop.cancelled() => return,
            attempt = tokio::time::timeout(CONNECT_TIMEOUT, connect(&shared, stop.child_token())) => attempt,
        };
        match attempt.unwrap_or_else(|_| Err(format!("no answer within {} s", CONNECT_TIMEOUT.as_secs()))) {
            Ok(service) => {
                let peer = service.peer().clone();
                match shared.relist(&peer).await {
                    Ok(()) => {
                        backoff = FIRST_BACKOFF;
                        *shared.met.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(met(&peer));
                        *shared.peer.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(peer);
                        shared.set_state(ServerState::Ready);
                        let quit = service.waiting().await;
                        *shared.peer.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
                        if stop.is_cancelled() {
                            return;
                        }
                        shared.set_state(ServerState::Failed(format!("the connection ended ({})", quit_reason(&quit))));
                    }
                    Err(why) => {
                        drop(service);
                        shared.set_state(ServerState::Failed(why));
                    }
                }
            }
            Err(why) => shared.set_state(ServerState::Failed(why)),
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// An error's text without the Rust type names an SDK error carries
/// (`Transport [rmcp::transport::…] error: …`): bracketed parts and words
/// that name a path (`a::b`) go, the rest stays.
pub(crate) fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut depth = 0usize;
    let mut bracketed = String::new();
    for c in text.chars() {
        match c {
            '[' | '<' => {
                if depth == 0 {
                    bracketed.clear();
                }
                depth += 1;
                bracketed.push(c);
            }
            ']' | '>' if depth > 0 => {
                depth -= 1;
                bracketed.push(c);
                if depth == 0 && !bracketed.contains("::") {
                    out.push_str(&bracketed);
                }
            }
            c if depth > 0 => bracketed.push(c),
            c => out.push(c),
        }
    }
    if depth > 0 && !bracketed.contains("::") {
        out.push_str(&bracketed);
    }
    let words: Vec<&str> = out.split_whitespace().filter(|word| !word.contains("::")).collect();
    words.join(" ").replace(" :", ":")
}

fn met(peer: &Peer<RoleClient>) -> Met {
    let info = peer.peer_info();
    let connected_at =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|at| at.as_secs_f64()).unwrap_or(0.0);
    Met {
        protocol_version: info.as_ref().map(|info| info.protocol_version.to_string()).unwrap_or_default(),
        server_name: info
            .as_ref()
            .and_then(|info| info.server_info.as_ref())
            .map(|me| me.name.clone())
            .unwrap_or_default(),
        server_version: info
            .as_ref()
            .and_then(|info| info.server_info.as_ref())
            .map(|me| me.version.clone())
            .unwrap_or_default(),
        connected_at,
    }
}

type Running = rmcp::service::RunningService<RoleClient, Listener>;

// Why a connection ended, in words.
fn quit_reason(quit: &Result<rmcp::service::QuitReason, tokio::task::JoinError>) -> &'static str {
    match quit {
        Ok(rmcp::service::QuitReason::Cancelled) => "cancelled",
        Ok(rmcp::service::QuitReason::Closed) => "closed by the server",
        Ok(_) => "ended",
        Err(_) => "its task failed",
    }
}

async fn connect(shared: &Arc<Shared>, stop: CancellationToken) -> Result<Running, String> {
    let config = &shared.config;
    let listener = Listener { shared: Arc::downgrade(shared) };
    match config.transport {
        McpTransportKind::Stdio => {
            let command = config.command.as_deref().unwrap_or_default();
            let mut program = tokio::process::Command::new(command);
            program.args(&config.args).env_clear().kill_on_drop(true);
            // A program is found on the host's PATH and gets nothing else
            // of the host's environment but what `env` names.
            for var in std::iter::once("PATH").chain(config.env.iter().map(String::as_str)) {
                if let Ok(value) = std::env::var(var) {
                    program.env(var, value);
                }
            }
            program.envs(&config.env_values);
            if let Some(cwd) = &config.cwd {
                program.current_dir(cwd);
            }
            // A host killed outright takes its servers along.
            crate::child_process::die_with_host(&mut program);
            let (transport, stderr) = TokioChildProcess::builder(program)
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|err| format!("cannot start `{command}`: {err}"))?;
            if let Some(stderr) = stderr {
                tokio::spawn(forward_stderr(shared.name.clone(), stderr));
            }
            listener.serve_with_ct(transport, stop).await.map_err(|err| format!("MCP handshake failed: {err}"))
        }
        McpTransportKind::Http => {
            let url = config.url.as_deref().unwrap_or_default();
            let mut headers = HashMap::new();
            for (header, var) in &config.headers_env {
                let value = std::env::var(var)
                    .map_err(|_| format!("headers_env: the variable `{var}` for header `{header}` is not set"))?;
                let name = http::HeaderName::try_from(header.as_str())
                    .map_err(|_| format!("headers_env: `{header}` is not a header name"))?;
                let value = http::HeaderValue::try_from(value)
                    .map_err(|_| format!("headers_env: the value of `{var}` is not a header value"))?;
                headers.insert(name, value);
            }
            for (header, value) in &config.headers {
                let name = http::HeaderName::try_from(header.as_str())
                    .map_err(|_| format!("headers: `{header}` is not a header name"))?;
                let value = http::HeaderValue::try_from(value.as_str())
                    .map_err(|_| format!("headers: the value of `{header}` is not a header value"))?;
                headers.insert(name, value);
            }
            let mut transport_config =
                rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(url);
            transport_config.custom_headers = headers;
            let transport = StreamableHttpClientTransport::from_config(transport_config);
            listener.serve_with_ct(transport, stop).await.map_err(|err| format!("cannot connect to {url}: {err}"))
        }
    }
}

// A stdio server's stderr, line by line, into the host's log at debug.
async fn forward_stderr(name: Arc<str>, stderr: tokio::process::ChildStderr) {
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        log::debug!("mcp server {name}: {line}");
    }
}

#[cfg(test)]
mod plain_tests {
    use super::plain;

    #[test]
    fn sdk_type_names_are_taken_out_of_an_error() {
        let text = "cannot connect to http://h/mcp: Transport [rmcp::transport::worker::WorkerTransport<rmcp::transport::streamable_http_client::StreamableHttpClientWorker<reqwest::Client>>] error: Client error: error sending request";
        let plain = plain(text);
        assert!(!plain.contains("::") && !plain.contains("rmcp"), "{plain}");
        assert!(plain.starts_with("cannot connect to http://h/mcp: Transport error: Client error"), "{plain}");
        assert_eq!(super::plain("no answer within 30 s [a list]"), "no answer within 30 s [a list]");
    }
}
