//! `merge`: waits until each named subagent's task has ended (each bounded
//! by its own timeout), then merges the `COMPLETED` results by the named
//! strategy (`unknown_strategy` for a name the host lacks) and reports the
//! others as not merged.

use crate::error::HostError;
use crate::ids::SubagentId;
use crate::protocol::wire::*;
use crate::runtime::messages as msg;
use crate::runtime::task::TaskContext;
use crate::runtime::Tree;

impl Tree {
    /// `SUBAGENT_MERGE_REQ`.
    pub(crate) async fn merge(&self, request: MergeRequest) -> Result<MergeResponse, HostError> {
        self.supervisor().send(msg::Merge(request)).await?
    }
}

impl TaskContext {
    /// Merges subagents' results (`WAITING` while they finish); refused with
    /// `invalid_state` when a source is this task's subagent, an ancestor,
    /// or waits for it.
    pub async fn merge(&self, request: MergeRequest) -> Result<MergeResponse, HostError> {
        let sources = request.subagent_ids.iter().filter_map(|text| SubagentId::parse(text)).collect();
        let _wait = self.begin_wait(sources).await?;
        self.set_waiting(true);
        let reply = self.supervisor.send(msg::Merge(request)).await;
        self.set_waiting(false);
        reply?
    }
}
