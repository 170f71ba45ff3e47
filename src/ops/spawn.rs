//! `spawn`: a new subagent, `READY`, under the parent the request names (a
//! client's) or under the asking task's own subagent (a task's, which may
//! hand it a first task at once). Depth and quota are checked first.

use std::sync::Arc;

use crate::error::{ErrorCode, HostError};
use crate::protocol::wire::*;
use crate::runtime::messages as msg;
use crate::runtime::task::TaskContext;
use crate::runtime::Tree;

impl Tree {
    /// `SUBAGENT_SPAWN_REQ`.
    pub(crate) async fn spawn(&self, request: SpawnRequest) -> Result<SpawnResponse, HostError> {
        self.ask(msg::Spawn(request)).await?
    }

    /// `SUBAGENT_SPAWN_REQ` for a request journaled under `key`: when
    /// `replayed` (served again after a restart) and a subagent was already
    /// spawned for it, that one is the answer, not a second.
    pub(crate) async fn spawn_once(
        &self,
        request: SpawnRequest,
        key: Arc<str>,
        replayed: bool,
    ) -> Result<SpawnResponse, HostError> {
        let keyed = msg::SpawnKeyed { request, key, anywhere: replayed };
        Ok(self.supervisor().send(keyed).await??.0)
    }
}

impl TaskContext {
    /// Spawns a child of this subagent; with a task, delegates it at once.
    pub async fn spawn(&self, agent: SubagentConfig, task: Option<TaskDefinition>) -> Result<SpawnResponse, HostError> {
        self.spawn_once(agent, task, None).await
    }

    /// [`TaskContext::spawn`] under an idempotency key (see
    /// [`TaskContext::idempotency_key`]): when this subagent already has a
    /// child spawned under `key`, that child is the answer, and it is given
    /// `task` only if it has not had one yet. The answer's status is the
    /// child's after its task was handed over.
    pub async fn spawn_once(
        &self,
        agent: SubagentConfig,
        task: Option<TaskDefinition>,
        key: Option<Arc<str>>,
    ) -> Result<SpawnResponse, HostError> {
        let request = SpawnRequest { agent, parent_agent_id: Some(self.subagent_id.to_string()), root_agent_id: None };
        let (mut spawned, existed) = match key {
            Some(key) => self.supervisor.send(msg::SpawnKeyed { request, key, anywhere: false }).await??,
            None => (self.supervisor.send(msg::Spawn(request)).await??, false),
        };
        if existed && spawned.status != SubagentStatus::Ready {
            // Spawned and delegated before the restart.
            return Ok(spawned);
        }
        if let Some(task) = task {
            let reply = self.delegate(spawned.subagent_id, task).await?;
            if !reply.accepted {
                return Err(HostError::new(
                    ErrorCode::InvalidState,
                    format!("child {} did not accept its task ({:?})", spawned.subagent_id, reply.status),
                ));
            }
            spawned.status = SubagentStatus::Running;
        }
        Ok(spawned)
    }
}
