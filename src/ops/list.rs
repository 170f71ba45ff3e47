//! `list`: every subagent of the session, by id (the same shared rows until
//! something changes); and a subagent's children, oldest first. A row as
//! compact JSON ([`list_row`]) is written here once, for the faces that do
//! not send the whole `SubagentInfo` (the MCP face, the model's tools).

use serde_json::{json, Value};

use crate::error::HostError;
use crate::ids::SubagentId;
use crate::protocol::wire::*;
use crate::runtime::messages as msg;
use crate::runtime::task::TaskContext;
use crate::runtime::Tree;

impl Tree {
    /// `SUBAGENT_LIST_REQ`.
    pub(crate) async fn list(&self) -> Result<ListResponse, HostError> {
        Ok(self.supervisor().send(msg::List).await?)
    }

    /// A subagent's children, oldest first: terminated ones too, until their
    /// records are forgotten (`max_retained_records`), exactly as `list`
    /// shows them.
    pub async fn children(&self, id: SubagentId) -> Result<Vec<SubagentId>, HostError> {
        self.supervisor().send(msg::ChildrenOf(id)).await?
    }
}

impl TaskContext {
    /// Every subagent of the session.
    pub async fn list(&self) -> Result<ListResponse, HostError> {
        Ok(self.supervisor.send(msg::List).await?)
    }

    /// This subagent's children, oldest first.
    pub async fn children(&self) -> Result<Vec<SubagentId>, HostError> {
        self.supervisor.send(msg::ChildrenOf(self.subagent_id)).await?
    }
}

/// One subagent of a list as a compact JSON row: its id, name, status,
/// parent and depth; `with_usage` adds its own and its subtree's token
/// usage and what it waits for (the MCP face's rows; a model is shown the
/// short row).
pub(crate) fn list_row(info: &SubagentInfo, with_usage: bool) -> Value {
    let mut row = json!({
        "subagent_id": info.subagent_id,
        "name": info.name,
        "status": info.status,
        "parent_agent_id": info.parent_agent_id,
        "depth": info.depth,
    });
    if with_usage {
        row["usage"] = json!(info.usage);
        row["subtree_usage"] = json!(info.subtree_usage);
        row["waiting_for"] = json!(info.waiting_for);
    }
    row
}
