//! Serving one subagent request (either namespace) against the session's
//! tree: its face decodes it into an operation, the operations table runs
//! it, and the face encodes the outcome as exactly one reply line.

use super::mcp_namespace;
use super::multi_agent_namespace;
use super::reply::{ListSize, Replies, Reply};
use super::subagent_namespace;
use super::tool_namespace;
use crate::error::HostError;
use crate::ops::{Caller, FrameKey, InputBounds};
use crate::outbox::Outbox;
use crate::protocol::request::Request;
use crate::runtime::Tree;

/// Serves a subagent request of either namespace (`SUBAGENT_*`,
/// `multi_agent/*`), or a `tool/*` request, and returns its reply.
pub(crate) async fn serve(
    tree: Tree,
    outbox: &Outbox,
    lists: &ListSize,
    req_id: String,
    request: Request,
    frame: Option<FrameKey>,
    input: (InputBounds, usize),
) -> Reply {
    let replies = Replies { outbox, lists, req_id: &req_id };
    // The byte bounds, checked on the operation decoded from a line of
    // `line_len` bytes: a refusal is the request's reply.
    let (bounds, line_len) = input;
    let checked = |operation: crate::ops::Operation| match operation.check_input(&bounds, Some(line_len)) {
        Ok(()) => Ok(operation),
        Err(err) => {
            log::warn!("session {}: request {req_id:?} refused: {}", tree.session_id(), err.message);
            Err(err)
        }
    };
    let caller = Caller::Client { tree: &tree, frame };
    if request.is_tool() {
        return tool_namespace::serve(&tree, &replies, request).await;
    }
    if request.is_mcp() {
        return mcp_namespace::serve(&tree, &replies, request).await;
    }
    if request.is_multi_agent() {
        let outcome = match multi_agent_namespace::decode(request).and_then(checked) {
            Ok(operation) => operation.run(caller).await,
            Err(err) => Err(err),
        };
        return multi_agent_namespace::encode(&replies, outcome).await;
    }
    if request.is_session() {
        return replies.error(&HostError::runtime("session request reached the subagent dispatcher"));
    }
    let outcome = match subagent_namespace::decode(request).and_then(checked) {
        Ok(operation) => operation.run(caller).await,
        Err(err) => Err(err),
    };
    subagent_namespace::encode(&replies, outcome).await
}
