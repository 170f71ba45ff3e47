//! `await`: a subagent's task's outcome, when it ends (at once when none
//! runs, with the last result). A task that awaits is `WAITING` meanwhile.
//! A task's wait that could never end (for itself, an ancestor, or around a
//! cycle of waits) is refused at once with `invalid_state`: see [`WaitGuard`].

use crate::error::HostError;
use crate::ids::SubagentId;
use crate::protocol::wire::*;
use crate::runtime::messages as msg;
use crate::runtime::supervisor::WaitToken;
use crate::runtime::task::TaskContext;
use crate::runtime::tree_link::TreeLink;
use crate::runtime::Tree;

impl Tree {
    /// `SUBAGENT_AWAIT_REQ`: replies when the task ends (at once when none
    /// runs). A client is no task, so its waits close no cycle.
    pub(crate) async fn await_result(&self, id: SubagentId) -> Result<AwaitResponse, HostError> {
        self.ask(msg::Await(id)).await?
    }
}

impl TaskContext {
    /// Waits for a subagent's task to end (`WAITING` meanwhile); refused
    /// with `invalid_state` when the wait could never end.
    pub async fn await_result(&self, id: SubagentId) -> Result<AwaitResponse, HostError> {
        let _wait = self.begin_wait(vec![id]).await?;
        self.set_waiting(true);
        let reply = self.supervisor.send(msg::Await(id)).await;
        self.set_waiting(false);
        reply?
    }

    /// Records that this task waits for `targets` in the session's wait-for
    /// graph until the guard is dropped, or refuses a wait that would close
    /// a cycle (`invalid_state`, `detail.cycle`).
    pub(crate) async fn begin_wait(&self, targets: Vec<SubagentId>) -> Result<WaitGuard, HostError> {
        let token = self.supervisor.send(msg::BeginWait { waiter: self.subagent_id, targets }).await??;
        Ok(WaitGuard { supervisor: self.supervisor.clone(), token })
    }
}

/// A task's wait in progress, taken out of the wait-for graph when dropped:
/// when the wait ends, and also when the task stops while waiting.
pub(crate) struct WaitGuard {
    supervisor: TreeLink,
    token: WaitToken,
}

impl Drop for WaitGuard {
    fn drop(&mut self) {
        self.supervisor.do_send(msg::EndWait(self.token));
    }
}
