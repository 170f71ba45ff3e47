//! The asking task's side: post a request on the host's desk, announce it
//! to the session (`approval_requested`, `input_requested`), stop the
//! task's clocks, and wait for the answer, `approval_timeout_ms`, or a
//! cancel.
//!
//! Durability: the request is kept in the task's checkpoint before it is
//! announced ([`PersonLedger`]), and an answer is recorded there before the
//! person is told it was accepted. A task resumed after a restart posts the
//! same request again (same id, same expiry), and never asks again what was
//! answered.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

use super::desk::{AskKind, Desk, Given, PersonRequest};
use crate::event::{EventDetail, EventKind};
use crate::protocol::encode::now_ts;
use crate::protocol::wire::JsonObject;
use crate::runtime::task::context::TaskContext;

/// What a task asks its person.
#[derive(Debug, Clone)]
pub(crate) enum Ask {
    /// To approve a tool call.
    Approval {
        /// The tool, as the model calls it.
        tool: String,
        /// Its MCP server (`None`: one of the host's own tools).
        server: Option<String>,
        /// The call's arguments.
        arguments: Value,
        /// The rule that asks for approval.
        reason: String,
    },
    /// A question (`ask_user`).
    Question {
        /// Its text.
        question: String,
        /// Its choices (empty: free text).
        choices: Vec<String>,
    },
}

/// A request in flight, as the task's checkpoint keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Asked {
    call_id: String,
    id: String,
    requested_at: f64,
    expires_at: f64,
}

/// An answer the task recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Decided {
    call_id: String,
    #[serde(flatten)]
    given: Given,
}

/// What a task asked and was answered, kept in its checkpoint (the
/// adapter's state holds it) so that a restart neither loses a question
/// nor asks one again.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct PersonLedger {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    asked: Option<Asked>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    decided: Vec<Decided>,
}

impl PersonLedger {
    /// The answer recorded for tool call `call_id`, if one was.
    pub(crate) fn decided(&self, call_id: &str) -> Option<&Given> {
        self.decided.iter().find(|decided| decided.call_id == call_id).map(|decided| &decided.given)
    }

    /// Forgets the answer for call `call_id` (its tool message is in the
    /// conversation now, which is what a resumed task goes by).
    pub(crate) fn forget(&mut self, call_id: &str) {
        self.decided.retain(|decided| decided.call_id != call_id);
    }
}

// Takes a request off the desk if the wait ends any other way than by its
// answer (the task's future dropped by terminate, say).
struct OnDesk<'a> {
    desk: &'a Desk,
    id: Arc<str>,
}

impl Drop for OnDesk<'_> {
    fn drop(&mut self) {
        self.desk.withdraw(&self.id, Given::Cancelled);
    }
}

impl TaskContext {
    /// Asks this task's person `ask` for tool call `call_id`, and waits
    /// for the answer; `persist` records `ledger` in the task's checkpoint
    /// (and commits it). An answer recorded before (a resumed task) is
    /// given back at once.
    pub(crate) async fn ask_person(
        &self,
        call_id: &str,
        ask: Ask,
        ledger: &mut PersonLedger,
        mut persist: impl AsyncFnMut(&PersonLedger),
    ) -> Given {
        if let Some(given) = ledger.decided(call_id) {
            return given.clone();
        }
        let asked = match ledger.asked.take().filter(|asked| asked.call_id == call_id) {
            Some(asked) => asked,
            None => {
                let now = now_ts();
                let timeout = self.host.limits.approval_timeout().as_secs_f64();
                Asked {
                    call_id: call_id.to_owned(),
                    id: uuid::Uuid::new_v4().simple().to_string(),
                    requested_at: now,
                    expires_at: now + timeout,
                }
            }
        };
        ledger.asked = Some(asked.clone());
        // Kept before anyone hears of it: a crash from here on asks again
        // with the same id.
        persist(ledger).await;
        let path = self.supervisor.send(crate::runtime::messages::PathOf(self.subagent_id)).await.unwrap_or_default();
        let request = Arc::new(self.person_request(&asked, ask, path));
        let desk = &self.host.desk;
        let posted = desk.post(request.clone());
        let on_desk = OnDesk { desk, id: request.id.clone() };
        self.shared.person.set(Some(request.kind.waiting_for()));
        self.set_waiting(true);
        self.announce(&request);
        let holds = self.shared.clocks().hold_all();
        let left = Duration::try_from_secs_f64(asked.expires_at - now_ts()).unwrap_or_default();
        let expiry = tokio::time::sleep(left);
        tokio::pin!(expiry);
        let mut answer = posted.answer;
        let (given, recorded) = loop {
            tokio::select! {
                biased;
                _ = self.cancel.cancelled() => break (Given::Cancelled, None),
                delivered = &mut answer => match delivered {
                    Ok(delivered) => break (delivered.given, Some(delivered.recorded)),
                    Err(_) => break (Given::Cancelled, None),
                },
                _ = &mut expiry => {
                    desk.withdraw(&request.id, Given::Timeout);
                    break (Given::Timeout, None);
                }
                _ = posted.again.notified() => self.announce(&request),
            }
        };
        drop(holds);
        self.shared.person.set(None);
        // Off the desk now (answered, timed out) or taken off here (cancelled).
        drop(on_desk);
        if given == Given::Cancelled {
            return given;
        }
        ledger.asked = None;
        ledger.decided.push(Decided { call_id: call_id.to_owned(), given: given.clone() });
        persist(ledger).await;
        if let Some(recorded) = recorded {
            let _ = recorded.send(());
        }
        self.set_waiting(false);
        given
    }

    fn person_request(&self, asked: &Asked, ask: Ask, path: Vec<crate::ids::SubagentId>) -> PersonRequest {
        let mut request = PersonRequest {
            id: asked.id.as_str().into(),
            kind: AskKind::Approval,
            session_id: self.session_id().clone(),
            subagent_id: self.subagent_id,
            path,
            tool: None,
            server: None,
            arguments: None,
            reason: None,
            question: None,
            choices: Vec::new(),
            requested_at: asked.requested_at,
            expires_at: asked.expires_at,
        };
        match ask {
            Ask::Approval { tool, server, arguments, reason } => {
                request.tool = Some(tool);
                request.server = server;
                request.arguments = Some(shown_arguments(arguments));
                request.reason = Some(reason);
            }
            Ask::Question { question, choices } => {
                request.kind = AskKind::Question;
                request.question = Some(question);
                request.choices = choices;
            }
        }
        request
    }

    // Built for each announcement, not kept: a request may wait for hours.
    fn announce(&self, request: &PersonRequest) {
        let (kind, fields) = announcement(request);
        self.note(kind, EventDetail::Asked(fields));
    }
}

/// Arguments longer than this (as JSON) are shown cut, in events and on
/// the desk: a person reads the start, and every announcement stays
/// bounded whatever a model wrote. The call itself gets them whole.
const SHOWN_ARGUMENTS_BYTES: usize = 16 << 10;

/// `arguments` as a person is shown them: whole, or past
/// [`SHOWN_ARGUMENTS_BYTES`] `{"truncated": true, "bytes": N, "preview": the
/// start of their JSON text}`.
fn shown_arguments(arguments: Value) -> Value {
    let text = arguments.to_string();
    if text.len() <= SHOWN_ARGUMENTS_BYTES {
        return arguments;
    }
    let mut end = SHOWN_ARGUMENTS_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    json!({ "truncated": true, "bytes": text.len(), "preview": &text[..end] })
}

/// The event announcing `request`, and its content fields.
fn announcement(request: &PersonRequest) -> (EventKind, Arc<JsonObject>) {
    let path: Vec<Value> = request.path.iter().map(|id| json!(id)).collect();
    let (kind, fields) = match request.kind {
        AskKind::Approval => (
            EventKind::ApprovalRequested,
            json!({
                "approval_id": &*request.id,
                "subagent_id": request.subagent_id,
                "path": path,
                "tool": request.tool,
                "server": request.server,
                "arguments": request.arguments,
                "reason": request.reason,
                "requested_at": request.requested_at,
                "expires_at": request.expires_at,
            }),
        ),
        AskKind::Question => (
            EventKind::InputRequested,
            json!({
                "request_id": &*request.id,
                "subagent_id": request.subagent_id,
                "path": path,
                "question": request.question,
                "choices": request.choices,
                "requested_at": request.requested_at,
                "expires_at": request.expires_at,
            }),
        ),
    };
    (kind, Arc::new(fields.as_object().cloned().unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_arguments_are_shown_cut_on_a_character_boundary() {
        let short = json!({ "path": "/tmp/a" });
        assert_eq!(shown_arguments(short.clone()), short);
        let long = json!({ "content": "é".repeat(SHOWN_ARGUMENTS_BYTES) });
        let shown = shown_arguments(long.clone());
        assert_eq!(shown["truncated"], true);
        assert_eq!(shown["bytes"], long.to_string().len());
        let preview = shown["preview"].as_str().unwrap();
        assert!(preview.len() <= SHOWN_ARGUMENTS_BYTES && preview.starts_with("{\"content\":\"éé"));
    }
}
