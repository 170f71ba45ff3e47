//! `cancel`: graceful. The subagent's task (when one runs) and every running
//! descendant's get their cancellation signal and a grace period; each ends
//! `CANCELLED` and can take a new task. The answer lists what was stopped,
//! once those tasks have ended. A task may cancel only its own children's
//! subtrees.

use crate::error::HostError;
use crate::ids::SubagentId;
use crate::runtime::messages as msg;
use crate::runtime::task::TaskContext;
use crate::runtime::Tree;

impl Tree {
    /// `SUBAGENT_CANCEL_REQ`: replies with every subagent whose task was
    /// stopped, once all those tasks have ended.
    pub(crate) async fn cancel(&self, id: SubagentId) -> Result<Vec<SubagentId>, HostError> {
        self.supervisor().send(msg::Cancel(id)).await?
    }
}

impl TaskContext {
    /// Cancels the task of `id`, a child of this subagent, and its
    /// descendants'; `invalid_state` for any other subagent.
    pub async fn cancel(&self, id: SubagentId) -> Result<Vec<SubagentId>, HostError> {
        self.own_child(id).await?;
        self.supervisor.send(msg::Cancel(id)).await?
    }
}
