//! [`ToolHost`]: every MCP server of the host. Servers of `scope = "host"`
//! start with it and are shared by all sessions; those of
//! `scope = "session"` start for a session on its first use and stop when
//! the session is gone.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use super::connection::{McpServer, ServerState};
use crate::config::{McpScope, McpServerConfig};

/// What shows that a session still lives: a weak handle to something the
/// session holds for its whole life (its log). When it no longer upgrades,
/// the session's own servers are stopped.
pub type SessionAlive = Weak<dyn Any + Send + Sync>;

struct SessionServers {
    alive: SessionAlive,
    servers: Vec<Arc<McpServer>>,
}

/// Every MCP server of the host (see the module docs).
#[derive(Default)]
pub struct ToolHost {
    configs: Vec<McpServerConfig>,
    // Where the connections run (the runtime that started the host).
    runtime: OnceLock<tokio::runtime::Handle>,
    shared: OnceLock<Vec<Arc<McpServer>>>,
    sessions: Mutex<HashMap<Arc<str>, SessionServers>>,
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
            if self.configs.iter().any(|config| config.scope == McpScope::Session) {
                runtime.spawn(sweep_every(Arc::downgrade(self)));
            }
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
    /// (started now if this is its first use). Sessions found gone on the
    /// way have their servers stopped.
    pub fn servers_for(
        self: &Arc<Self>,
        session: &Arc<str>,
        alive: impl FnOnce() -> SessionAlive,
    ) -> Vec<Arc<McpServer>> {
        self.start();
        let mut servers = self.shared_servers().to_vec();
        if self.configs.iter().all(|config| config.scope == McpScope::Host) {
            return servers;
        }
        let Some(runtime) = self.runtime.get() else { return servers };
        let mut sessions = self.sessions.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        sessions.retain(|_, own| own.alive.strong_count() > 0);
        let own = sessions.entry(session.clone()).or_insert_with(|| SessionServers {
            alive: alive(),
            servers: self
                .configs
                .iter()
                .filter(|config| config.scope == McpScope::Session)
                .map(|config| McpServer::start(config.clone(), runtime))
                .collect(),
        });
        servers.extend(own.servers.iter().cloned());
        servers
    }

    /// Stops the servers of sessions that are gone; returns how many
    /// sessions still have servers of their own.
    pub fn sweep(&self) -> usize {
        let mut sessions = self.sessions.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        sessions.retain(|_, own| own.alive.strong_count() > 0);
        sessions.len()
    }
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
