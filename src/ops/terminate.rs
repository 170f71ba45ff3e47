//! `terminate`: forced. The subagent's task is dropped at once, its
//! descendants are terminated, its actor stops; it stays listed,
//! `TERMINATED`, with its last result. The answer lists every subagent
//! stopped, once their actors are gone. A task may terminate only its own
//! children.

use crate::error::{ErrorCode, HostError};
use crate::ids::SubagentId;
use crate::runtime::messages as msg;
use crate::runtime::task::TaskContext;
use crate::runtime::Tree;

impl Tree {
    /// `SUBAGENT_TERMINATE_REQ`: replies with every subagent stopped, once all
    /// their actors are gone.
    pub(crate) async fn terminate(&self, id: SubagentId) -> Result<Vec<SubagentId>, HostError> {
        self.supervisor().send(msg::Terminate(id)).await?
    }
}

impl TaskContext {
    /// Terminates `id`, a child of this subagent, with its subtree;
    /// `invalid_state` for any other subagent.
    pub async fn terminate(&self, id: SubagentId) -> Result<Vec<SubagentId>, HostError> {
        self.own_child(id).await?;
        self.supervisor.send(msg::Terminate(id)).await?
    }

    /// `Ok` when `id` is a child of this subagent: a task stops only what it
    /// made, never its parent's or a sibling's work.
    pub(super) async fn own_child(&self, id: SubagentId) -> Result<(), HostError> {
        if self.children().await?.contains(&id) {
            return Ok(());
        }
        Err(HostError::new(ErrorCode::InvalidState, format!("{id} is not a child of {}", self.subagent_id)))
    }
}
