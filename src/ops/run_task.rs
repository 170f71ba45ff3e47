//! `run_task`: a hosted face's task in one step. A subagent is spawned for
//! the task and handed it; when the task is refused (or could not be handed
//! over) the subagent is terminated again, so none is left holding a place
//! for a task that never ran. The A2A face (each task) and the MCP face
//! (`run_subagent`) share it. A face that follows the task's events
//! subscribes to them before it runs this: the spawn's and the handover's
//! events are then its too (see `faces/mcp_server/session.rs`, which
//! follows a subtree whose root it learns from this answer).

use crate::error::HostError;
use crate::protocol::wire::*;
use crate::runtime::Tree;

impl Tree {
    /// Spawns a subagent (`request`, a client's) and hands it `task`; a
    /// refusal is the answer's `accepted: false`, and then, as when the
    /// handover fails, the subagent has been terminated again.
    pub(crate) async fn run_task(
        &self,
        request: SpawnRequest,
        task: TaskDefinition,
    ) -> Result<(SpawnResponse, DelegateResponse), HostError> {
        let spawned = self.spawn(request).await?;
        let target = spawned.subagent_id;
        let delegated = self.delegate(target, task).await;
        if !matches!(&delegated, Ok(reply) if reply.accepted) {
            // No task: its subagent is not left behind, holding a place.
            let _ = self.terminate(target).await;
        }
        Ok((spawned, delegated?))
    }
}
