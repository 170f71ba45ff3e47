//! The draining end of a session (`shutdown`, or EOF on stdio): running
//! tasks may finish for up to a grace period while the input is still read,
//! and every request found there is refused with `invalid_state` ("the
//! session is shutting down"), so that each request still gets exactly one
//! final reply.

use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

use super::connection::{finish, Connection};
use crate::error::{ErrorCode, HostError};
use crate::faces::a2e::error_line;
use crate::ids::SubagentId;
use crate::outbox::Outbox;
use crate::protocol::codec::Frame;
use crate::protocol::request::decode_line;

/// The message of the error answering a request that arrives while the
/// session drains.
pub const SHUTTING_DOWN: &str = "the session is shutting down";

/// The `invalid_message` error for a line over `max_line_bytes`.
pub(super) fn too_long(limit: usize) -> HostError {
    HostError::new(ErrorCode::InvalidMessage, format!("line longer than max_line_bytes ({limit} bytes); skipped"))
        .with_detail(json!({ "limit": "max_line_bytes", "max_line_bytes": limit }))
}

// Answers one frame read while draining: requests get `invalid_state`, bad
// lines their usual error, a client's own `error` nothing.
fn refuse(outbox: &Outbox, frame: Frame) {
    let reply = match frame {
        Frame::TooLong { limit } => error_line(&too_long(limit), ""),
        // (A journaled line stays journaled: a resumed session serves it.)
        Frame::Line(line) | Frame::Journaled { line, .. } => match decode_line(&line) {
            Ok(None) => return,
            Ok(Some(incoming)) => {
                let err = HostError::new(ErrorCode::InvalidState, SHUTTING_DOWN)
                    .with_detail(json!({ "reason": "shutting_down" }));
                error_line(&err, &incoming.id)
            }
            Err(bad) => error_line(&bad.error, &bad.req_id),
        },
    };
    outbox.push(reply);
}

impl Connection {
    /// Lets in-flight requests and running tasks finish for up to `grace`,
    /// refusing whatever the input brings meanwhile; a signal or a client
    /// that stops reading cuts it short. Returns what was stopped.
    pub(super) async fn drain(&mut self, grace: Duration, permits: &Arc<Semaphore>, bound: usize) -> Vec<SubagentId> {
        let tree = &self.tree;
        let input = &mut self.input;
        let outbox = &self.outbox;
        let overflowed = outbox.overflowed().clone();
        let deadline = tokio::time::Instant::now() + grace;
        let drained = async {
            // Requests already taken may start tasks: let them land first.
            let _ = tokio::time::timeout_at(deadline, finish(permits, bound)).await;
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            tree.drain(left).await
        };
        tokio::pin!(drained);
        let mut reading = true;
        let stopped = loop {
            tokio::select! {
                stopped = &mut drained => break stopped,
                _ = self.stop.cancelled() => break tree.close().await,
                _ = overflowed.cancelled() => break tree.close().await,
                frame = input.recv(), if reading => match frame {
                    Some(frame) => refuse(outbox, frame),
                    None => reading = false,
                },
            }
        };
        // What arrived meanwhile is answered too, before the session ends.
        while let Ok(frame) = input.try_recv() {
            refuse(outbox, frame);
        }
        stopped
    }
}
