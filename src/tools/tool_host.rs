//! [`ToolHost`]: every MCP server of the host. Servers of `scope = "host"`
//! start with it and are shared by all sessions; those of
//! `scope = "session"` start for a session on its first use and stop when
//! the session is gone. A session may also register servers of its own
//! (`mcp/server/register`), within the host's `[mcp]` policy; they stop
//! when it unregisters them or ends.

use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use super::connection::{McpServer, ServerState};
use crate::config::{McpClientConfig, McpScope, McpServerConfig, McpTransportKind};

/// What shows that a session still lives: a weak handle to something the
/// session holds for its whole life (its log). When it no longer upgrades,
/// the session's own servers are stopped.
pub(crate) type SessionAlive = Weak<dyn Any + Send + Sync>;

struct SessionServers {
    alive: SessionAlive,
    // Its servers of `scope = "session"`, once started.
    configured: Option<Vec<Arc<McpServer>>>,
    // The servers it registered, by id.
    registered: Vec<(Arc<str>, Arc<McpServer>)>,
}

/// One server as `mcp/server/list` shows it to a session.
#[derive(Debug, Clone)]
pub struct ListedServer {
    /// Its id: a configured server's name, or the id a registration got.
    pub id: Arc<str>,
    /// Its entry.
    pub config: McpServerConfig,
    /// Its connection; `None` for a session-scoped server not started yet.
    pub server: Option<Arc<McpServer>>,
    /// Whether the session registered it.
    pub registered: bool,
}

/// Every MCP server of the host (see the module docs).
#[derive(Default)]
pub struct ToolHost {
    configs: Vec<McpServerConfig>,
    // Where the connections run (the runtime that started the host).
    runtime: OnceLock<tokio::runtime::Handle>,
    shared: OnceLock<Vec<Arc<McpServer>>>,
    sessions: Mutex<HashMap<Arc<str>, SessionServers>>,
    // What clients may register.
    clients: McpClientConfig,
    // Whether any session ever registered a server (until then a lookup
    // needs no lock when every configured server is host-scoped).
    any_registered: AtomicBool,
}

impl std::fmt::Debug for ToolHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.configs.iter().map(|config| config.name.as_str()).collect();
        f.debug_struct("ToolHost").field("servers", &names).finish()
    }
}

impl ToolHost {
    /// A host with the servers of `configs` (checked by the config), not
    /// yet started.
    pub fn new(configs: Vec<McpServerConfig>) -> Self {
        Self { configs, ..Self::default() }
    }

    /// The same host, letting clients register servers as `clients` says.
    pub fn with_client_policy(mut self, clients: McpClientConfig) -> Self {
        self.clients = clients;
        self
    }

    /// Whether no server is configured.
    pub fn is_empty(&self) -> bool {
        self.configs.is_empty()
    }

    /// Starts the host-scoped servers on the current tokio runtime (once;
    /// later calls do nothing). Called by `server::run`; a tool lookup
    /// starts them too, on its own runtime, when nobody did.
    pub fn start(self: &Arc<Self>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let runtime = self.runtime.get_or_init(|| runtime);
        self.shared.get_or_init(|| {
            // Sessions' own servers (configured or registered) stop
            // with them.
            runtime.spawn(sweep_every(Arc::downgrade(self)));
            self.configs
                .iter()
                .filter(|config| config.scope == McpScope::Host)
                .map(|config| McpServer::start(config.clone(), runtime))
                .collect()
        });
    }

    /// Each host-scoped server's name, state and how many tools it lists
    /// (what the live view shows).
    pub fn states(&self) -> Vec<(Arc<str>, ServerState, usize)> {
        self.shared_servers()
            .iter()
            .map(|server| (server.name().clone(), server.state(), server.tools().len()))
            .collect()
    }

    /// The host-scoped servers (empty until started).
    pub fn shared_servers(&self) -> &[Arc<McpServer>] {
        self.shared.get().map(Vec::as_slice).unwrap_or_default()
    }

    /// Every server session `session` may call: the host's, then its own
    /// of `scope = "session"` (started now if this is its first use), then
    /// those it registered. Sessions found gone on the way have their
    /// servers stopped.
    pub fn servers_for(
        self: &Arc<Self>,
        session: &Arc<str>,
        alive: impl FnOnce() -> SessionAlive,
    ) -> Vec<Arc<McpServer>> {
        self.start();
        let mut servers = self.shared_servers().to_vec();
        let session_scoped = self.configs.iter().any(|config| config.scope == McpScope::Session);
        if !session_scoped && !self.any_registered.load(Ordering::Acquire) {
            return servers;
        }
        let Some(runtime) = self.runtime.get() else { return servers };
        let mut sessions = self.lock_sessions();
        let own = own_servers(&mut sessions, session, alive);
        let configured = own.configured.get_or_insert_with(|| {
            self.configs
                .iter()
                .filter(|config| config.scope == McpScope::Session)
                .map(|config| McpServer::start(config.clone(), runtime))
                .collect()
        });
        servers.extend(configured.iter().cloned());
        servers.extend(own.registered.iter().map(|(_, server)| server.clone()));
        servers
    }

    /// Every server session `session` sees, started or not, in the order
    /// [`ToolHost::servers_for`] gives them.
    pub fn listing(self: &Arc<Self>, session: &Arc<str>) -> Vec<ListedServer> {
        self.start();
        let listed = |server: &Arc<McpServer>, registered: bool, id: Option<&Arc<str>>| ListedServer {
            id: id.cloned().unwrap_or_else(|| server.name().clone()),
            config: server.config().clone(),
            server: Some(server.clone()),
            registered,
        };
        let mut servers: Vec<ListedServer> =
            self.shared_servers().iter().map(|server| listed(server, false, None)).collect();
        let sessions = self.lock_sessions();
        let own = sessions.get(session).filter(|own| own.alive.strong_count() > 0);
        match own.and_then(|own| own.configured.as_ref()) {
            Some(configured) => servers.extend(configured.iter().map(|server| listed(server, false, None))),
            None => {
                servers.extend(self.configs.iter().filter(|config| config.scope == McpScope::Session).map(|config| {
                    ListedServer {
                        id: config.name.as_str().into(),
                        config: config.clone(),
                        server: None,
                        registered: false,
                    }
                }))
            }
        }
        if let Some(own) = own {
            servers.extend(own.registered.iter().map(|(id, server)| listed(server, true, Some(id))));
        }
        servers
    }

    /// Registers `config` as a server of session `session` only, under
    /// `id` (a fresh one when `None`), and starts connecting to it. Refused
    /// (with why) when the host's `[mcp]` policy does not allow it, the id
    /// or name is taken, or the session has as many as it may.
    pub fn register(
        self: &Arc<Self>,
        session: &Arc<str>,
        alive: impl FnOnce() -> SessionAlive,
        id: Option<&str>,
        mut config: McpServerConfig,
    ) -> Result<(Arc<str>, Arc<McpServer>), String> {
        config.check()?;
        match config.transport {
            McpTransportKind::Stdio if !self.clients.allow_client_stdio => {
                return Err("this host does not let clients start programs: stdio registration needs `[mcp] \
                            allow_client_stdio = true`"
                    .into())
            }
            McpTransportKind::Http => {
                // Matched and connected to in its normal form: what passes
                // the policy is what is reached.
                let url = crate::config::normalize_url(config.url.as_deref().unwrap_or_default())?;
                if !self.clients.allows_url(&url) {
                    return Err(format!("the url `{url}` is not allowed by `[mcp] allowed_urls`"));
                }
                if let Some(name) = config.headers.keys().find(|name| {
                    crate::config::FORBIDDEN_CLIENT_HEADERS.contains(&name.trim().to_ascii_lowercase().as_str())
                }) {
                    return Err(format!("the header `{name}` is the connection's own: a registration may not set it"));
                }
                config.url = Some(url);
            }
            McpTransportKind::Stdio => {}
        }
        if self.configs.iter().any(|configured| configured.name == config.name) {
            return Err(format!("the name `{}` is taken by a server of the host", config.name));
        }
        self.start();
        let Some(runtime) = self.runtime.get() else {
            return Err("the host's MCP runtime is not running".into());
        };
        let mut sessions = self.lock_sessions();
        let own = own_servers(&mut sessions, session, alive);
        if own.registered.len() >= self.clients.max_client_servers {
            return Err(format!(
                "this session has registered {} servers, as many as `[mcp] max_client_servers` allows",
                own.registered.len()
            ));
        }
        if own.registered.iter().any(|(_, server)| server.config().name == config.name) {
            return Err(format!("the name `{}` is taken by a server this session registered", config.name));
        }
        let id: Arc<str> = match id {
            Some(id) if own.registered.iter().any(|(taken, _)| **taken == *id) => {
                return Err(format!("the server id `{id}` is taken"))
            }
            Some(id) => id.into(),
            None => uuid::Uuid::new_v4().simple().to_string()[..8].into(),
        };
        let server = McpServer::start(config, runtime);
        own.registered.push((id.clone(), server.clone()));
        self.any_registered.store(true, Ordering::Release);
        Ok((id, server))
    }

    /// Stops and forgets server `id` that session `session` registered;
    /// whether there was one.
    pub fn unregister(&self, session: &Arc<str>, id: &str) -> bool {
        let mut sessions = self.lock_sessions();
        let Some(own) = sessions.get_mut(session) else { return false };
        let before = own.registered.len();
        own.registered.retain(|(registered, _)| **registered != *id);
        own.registered.len() < before
    }

    fn lock_sessions(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, SessionServers>> {
        self.sessions.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Stops the servers of sessions that are gone; returns how many
    /// sessions still have servers of their own.
    pub fn sweep(&self) -> usize {
        let mut sessions = self.lock_sessions();
        sessions.retain(|_, own| own.alive.strong_count() > 0);
        sessions.len()
    }
}

// Session `session`'s own servers, made empty on its first use; sessions
// found gone on the way are dropped, which stops their servers.
fn own_servers<'a>(
    sessions: &'a mut HashMap<Arc<str>, SessionServers>,
    session: &Arc<str>,
    alive: impl FnOnce() -> SessionAlive,
) -> &'a mut SessionServers {
    sessions.retain(|_, own| own.alive.strong_count() > 0);
    sessions.entry(session.clone()).or_insert_with(|| SessionServers {
        alive: alive(),
        configured: None,
        registered: Vec::new(),
    })
}

// Stops the servers of ended sessions every few seconds, for as long as
// the host lives.
async fn sweep_every(host: Weak<ToolHost>) {
    loop {
        tokio::time::sleep(std::time::Duration::from_secs(5)).await;
        match host.upgrade() {
            Some(host) => drop(host.sweep()),
            None => return,
        }
    }
}
