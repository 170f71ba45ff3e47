//! [`LiveSession`]: one open protocol session as the operator sees it.

use serde_json::json;
use std::sync::Arc;
use std::time::Instant;

use crate::runtime::Tree;

/// One open protocol session, as the operator sees it.
#[derive(Debug)]
pub struct LiveSession {
    /// The session's id.
    pub id: Arc<str>,
    /// `tcp`, `http` or `stdio`.
    pub transport: &'static str,
    /// Who the client is (a socket address, `stdio`).
    pub peer: String,
    /// The `agent_id` of its handshake.
    pub agent_id: String,
    /// When it was listed, for display (seconds since the Unix epoch).
    pub opened_at: f64,
    /// When it was listed, for its age.
    pub opened: Instant,
    /// Its actor tree.
    pub tree: Tree,
}

impl LiveSession {
    /// A session listed now.
    pub fn new(id: &str, transport: &'static str, peer: &str, agent_id: &str, tree: Tree) -> Self {
        Self {
            id: id.into(),
            transport,
            peer: peer.to_owned(),
            agent_id: agent_id.to_owned(),
            opened_at: crate::protocol::encode::now_ts(),
            opened: Instant::now(),
            tree,
        }
    }

    /// Its summary (without the counts by status, which ask its tree).
    pub fn summary(&self) -> serde_json::Value {
        json!({
            "session_id": &*self.id,
            "transport": self.transport,
            "peer": self.peer,
            "agent_id": self.agent_id,
            "opened_at": self.opened_at,
            "age_seconds": self.opened.elapsed().as_secs_f64(),
        })
    }
}
