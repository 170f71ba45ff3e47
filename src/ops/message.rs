//! `message`: put a message in a live subagent's bounded mailbox
//! (`mailbox_full` when full, `invalid_state` when it is terminated). A
//! client names its sender; a task sends as its own subagent.

use crate::error::HostError;
use crate::ids::SubagentId;
use crate::protocol::wire::*;
use crate::runtime::messages as msg;
use crate::runtime::task::TaskContext;
use crate::runtime::Tree;

impl Tree {
    /// `SUBAGENT_MESSAGE_REQ`. `from` names the sender: a subagent id must be
    /// one of this session's (live or retained), else `unknown_subagent`; any
    /// other text is taken as the client's own name.
    pub(crate) async fn message(
        &self,
        from: String,
        to: SubagentId,
        payload: SubagentMessagePayload,
    ) -> Result<MessageResponse, HostError> {
        self.supervisor().send(msg::SendMessage { from, to, payload, frame: None }).await?
    }

    /// [`Tree::message`] for a request that came in journaled frame `frame`
    /// (HTTP with a durable store): the message is stored together with the
    /// frame marked served, so a frame replayed after a crash delivers it
    /// once.
    pub(crate) async fn message_once(
        &self,
        from: String,
        to: SubagentId,
        payload: SubagentMessagePayload,
        frame: u64,
    ) -> Result<MessageResponse, HostError> {
        self.supervisor().send(msg::SendMessage { from, to, payload, frame: Some(frame) }).await?
    }
}

impl TaskContext {
    /// Sends a message from this subagent to another of the session.
    pub async fn message(&self, to: SubagentId, payload: SubagentMessagePayload) -> Result<MessageResponse, HostError> {
        self.supervisor.send(msg::SendMessage { from: self.subagent_id.to_string(), to, payload, frame: None }).await?
    }
}
