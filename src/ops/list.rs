//! `list`: every subagent of the session, by id (the same shared rows until
//! something changes); and a subagent's children, oldest first.

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
