//! [`McpFace`]: the MCP face of a host, what every file of the face works
//! on (defined apart from `mod.rs`, which routes its methods, so that its
//! files import it from here with no circle through the map).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::session::McpSession;
use crate::config::McpFaceConfig;
use crate::faces::hosted::Contexts;
use crate::session::HttpSessions;

/// The MCP face of a host.
#[derive(Debug)]
pub(crate) struct McpFace {
    // The HTTP sessions its sessions are, and the service they belong to.
    pub(super) sessions: Arc<HttpSessions>,
    // `[mcp.server]`.
    pub(super) config: McpFaceConfig,
    // The host sessions served here now.
    pub(super) contexts: Contexts,
    // The MCP sessions served here now, by id.
    pub(super) live: Mutex<HashMap<String, Arc<McpSession>>>,
}

impl McpFace {
    /// The face of `sessions`, as `config` describes it.
    pub(crate) fn new(sessions: Arc<HttpSessions>, config: McpFaceConfig) -> Arc<Self> {
        Arc::new(Self { sessions, config, contexts: Contexts::default(), live: Mutex::default() })
    }
}
