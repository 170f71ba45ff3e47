//! A2A tasks onto subagent trees: a task is a root subagent of its
//! context's session, made from `[a2a] agent`; its id is the session's and
//! the subagent's (`{session}-{subagent}`), so it is found again after a
//! restart or on another node. Every change goes through the operations
//! table, as a client's request does.

use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;

use super::face::A2aFace;
use super::model::{is_terminal, now, result_text, state_of, TaskSnapshot, UserMessage};
use super::rpc::RpcError;
use crate::event::Event;
pub(super) use crate::faces::hosted::Asker;
use crate::faces::hosted::Context;
use crate::ids::SubagentId;
use crate::ops::{Caller, InputBounds, Operation, Outcome};
use crate::protocol::wire::{SpawnRequest, SubagentMessagePayload, TaskDefinition};
use crate::runtime::inspect::SubagentDetail;
use crate::runtime::people::{AskKind, Given, PersonRequest};
use crate::session::face_open::FaceOpener;

/// A task found: its context's session, its root subagent, its context id.
#[derive(Debug, Clone)]
pub(super) struct Found {
    /// The session served here.
    pub(super) context: Arc<Context>,
    /// The root subagent.
    pub(super) subagent: SubagentId,
    /// Its A2A context.
    pub(super) context_id: String,
    /// Its A2A id.
    pub(super) task_id: String,
}

/// The A2A id of root subagent `subagent` of session `session`.
pub(super) fn task_id(session: &str, subagent: SubagentId) -> String {
    format!("{session}-{subagent}")
}

/// The session of a context: 32 hex digits of a SHA-256 of the caller and
/// the context id, so that another caller's context is never reached, and
/// no A2E session is.
pub(super) fn session_of(principal: Option<&str>, context_id: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("a2a\n{}\n{context_id}", principal.unwrap_or("")).as_bytes());
    digest.iter().take(16).map(|byte| format!("{byte:02x}")).collect()
}

impl A2aFace {
    /// Finds task `id` of `caller`: `TaskNotFound` for an id that is not an
    /// A2A task, or is another caller's.
    pub(super) async fn find(&self, id: &str, caller: &Asker) -> Result<Found, RpcError> {
        let not_found = || RpcError::task_not_found(id);
        let (session, subagent) = id.split_once('-').ok_or_else(not_found)?;
        let subagent = SubagentId::parse(subagent).ok_or_else(not_found)?;
        if session.len() != 32 || !session.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()) {
            return Err(not_found());
        }
        let context = self
            .contexts
            .open(&self.sessions, session, None)
            .await
            .map_err(|err| RpcError::internal(err.message))?
            .ok_or_else(not_found)?;
        let detail = context.tree().inspect_one(subagent).await.map_err(|_| not_found())?;
        let context_id = detail.config.metadata.get("a2a").and_then(|a2a| a2a["contextId"].as_str());
        match context_id {
            Some(context_id)
                if detail.view.depth == 0 && session_of(caller.principal.as_deref(), context_id) == session =>
            {
                Ok(Found { context, subagent, context_id: context_id.to_owned(), task_id: id.to_owned() })
            }
            _ => Err(not_found()),
        }
    }

    /// The task's state now.
    pub(super) async fn snapshot(&self, found: &Found) -> Result<TaskSnapshot, RpcError> {
        let tree = found.context.tree();
        let detail = tree.inspect_one(found.subagent).await.map_err(|_| RpcError::task_not_found(&found.task_id))?;
        let mut snapshot = snapshot_of(&detail, &found.task_id, &found.context_id, || pending_for(found));
        snapshot.history.extend(found.context.followups(found.subagent).await);
        Ok(snapshot)
    }

    /// A new task in the message's context (made when it is new): its root
    /// subagent spawned and delegated the message, committed; with the
    /// context's events from before the task started.
    pub(super) async fn start(
        &self,
        message: &UserMessage,
        caller: &Asker,
    ) -> Result<(Found, broadcast::Receiver<Arc<Event>>), RpcError> {
        // The task first: one over `max_task_bytes` is refused before a
        // context is opened or a subagent made for it.
        let mut metadata = message.metadata.clone();
        if self.config.tck_mode && !metadata.contains_key("script") {
            if let Some(script) = super::tck::script_for(&message.message_id) {
                metadata.insert("script".to_owned(), script);
            }
        }
        if !message.data.is_empty() {
            metadata.insert("a2a_data".to_owned(), Value::Array(message.data.clone()));
        }
        let task = TaskDefinition {
            name: "a2a".to_owned(),
            instruction: instruction(message),
            success_criteria: Vec::new(),
            metadata,
        };
        InputBounds::of(self.sessions.service.limits()).task(&task, None)?;
        let context_id = message.context_id.clone().unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let session = session_of(caller.principal.as_deref(), &context_id);
        let create = Some(FaceOpener { face: "a2a", principal: caller.principal.as_deref(), peer: caller.peer });
        let context = self
            .contexts
            .open(&self.sessions, &session, create)
            .await
            .map_err(RpcError::from)?
            .ok_or_else(|| RpcError::internal("the context's session could not be opened"))?;
        let events = context.events();
        let client = Caller::Client { tree: context.tree(), frame: None };
        let mut agent = self.config.agent.clone();
        // The record keeps the message (for `history`, its task id filled in
        // when read) with the subagent's config: stored, restored with it.
        let a2a = json!({ "contextId": context_id, "message": message.for_history("", &context_id) });
        agent.metadata.insert("a2a".to_owned(), a2a);
        // One task: it leaves the tree once it has ended.
        agent.metadata.insert(crate::runtime::FACE_TASK.to_owned(), json!("a2a"));
        let request = SpawnRequest { agent, parent_agent_id: None, root_agent_id: None };
        let started = match (Operation::RunTask { request, task }).run(client).await {
            Ok(Outcome::TaskRun { spawned, delegated }) if delegated.accepted => Ok(spawned.subagent_id),
            Ok(other) => Err(RpcError::internal(format!("the task was not accepted: {other:?}"))),
            Err(err) => Err(RpcError::from(err)),
        };
        context.commit().await;
        let subagent = started?;
        context.new_task(subagent);
        let found = Found { context, subagent, context_id, task_id: task_id(&session, subagent) };
        Ok((found, events))
    }

    /// A message to a task that goes on: the answer to what its person is
    /// asked, or else a message to its root's mailbox. `UnsupportedOperation`
    /// for a task that has ended.
    pub(super) async fn follow_up(&self, found: &Found, message: &UserMessage) -> Result<(), RpcError> {
        let snapshot = self.snapshot(found).await?;
        if is_terminal(snapshot.state) {
            return Err(RpcError::unsupported(format!(
                "task {} is {}: it takes no more messages",
                found.task_id, snapshot.state
            )));
        }
        let tree = found.context.tree();
        let client = Caller::Client { tree, frame: None };
        let operation = match pending_for(found) {
            Some(request) => Operation::Decide { id: request.id.to_string(), given: answer_of(&request, message)? },
            None => Operation::Message {
                from: "a2a".to_owned(),
                to: found.subagent,
                payload: SubagentMessagePayload {
                    kind: "a2a_message".to_owned(),
                    content: json!({ "text": message.text, "data": message.data }),
                },
            },
        };
        operation.check_input(&InputBounds::of(self.sessions.service.limits()), None)?;
        operation.run(client).await?;
        // Stored with what it did, before it is answered.
        found.context.add_followup(found.subagent, message.for_history(&found.task_id, &found.context_id)).await;
        found.context.commit().await;
        if self.config.tck_mode && !message.message_id.starts_with(super::tck::INPUT_REQUIRED) {
            // The kit's agent completes a task such a message follows up.
            for _ in 0..super::tck::ASKS {
                if is_terminal(self.settle(found, Duration::from_secs(5)).await?.state) {
                    break;
                }
                let Some(request) = pending_for(found) else { break };
                let answer = Given::Answer { text: message.text.clone() };
                (Operation::Decide { id: request.id.to_string(), given: answer })
                    .run(Caller::Client { tree, frame: None })
                    .await?;
            }
            found.context.commit().await;
        }
        Ok(())
    }

    /// Waits until the task has ended or waits for its person (or `limit`
    /// passed); its state then.
    pub(super) async fn settle(&self, found: &Found, limit: Duration) -> Result<TaskSnapshot, RpcError> {
        let deadline = tokio::time::Instant::now() + limit;
        let mut events = found.context.events();
        loop {
            let snapshot = self.snapshot(found).await?;
            if is_terminal(snapshot.state) || snapshot.state == "TASK_STATE_INPUT_REQUIRED" {
                // Committed before the client is told (events reach the
                // face before their commit).
                found.context.commit().await;
                return Ok(snapshot);
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(snapshot);
            }
            // Any event of the session may be this task's: read again then.
            tokio::select! {
                _ = found.context.next_event(&mut events) => {}
                _ = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// Cancels the task's subtree (committed); `TaskNotCancelable` once it
    /// has ended.
    pub(super) async fn cancel(&self, found: &Found) -> Result<TaskSnapshot, RpcError> {
        let snapshot = self.snapshot(found).await?;
        if is_terminal(snapshot.state) {
            return Err(RpcError::not_cancelable(format!("task {} is {}", found.task_id, snapshot.state)));
        }
        let tree = found.context.tree();
        (Operation::Cancel { target: found.subagent }).run(Caller::Client { tree, frame: None }).await?;
        found.context.commit().await;
        self.snapshot(found).await
    }
}

/// A task as its root's record shows it (its history: the first message
/// only); `pending` says what its person is asked, if anything (asked only
/// while the task goes on).
pub(super) fn snapshot_of(
    detail: &SubagentDetail,
    task_id: &str,
    context_id: &str,
    pending: impl FnOnce() -> Option<Arc<PersonRequest>>,
) -> TaskSnapshot {
    let view = &detail.view;
    let mut state = state_of(view.status, view.waiting_for);
    // A person asked anywhere in the task's tree: the task waits for
    // its client. (The root itself may be waiting on that child.)
    let pending = if is_terminal(state) { None } else { pending() };
    if pending.is_some() {
        state = "TASK_STATE_INPUT_REQUIRED";
    } else if state == "TASK_STATE_INPUT_REQUIRED" {
        // Answered a moment ago: the task is taking the answer in.
        state = "TASK_STATE_WORKING";
    }
    let result: Option<Value> = (state == "TASK_STATE_COMPLETED")
        .then(|| detail.result.as_ref().and_then(|raw| serde_json::from_str(raw.text()).ok()))
        .flatten();
    let status_text = match state {
        "TASK_STATE_INPUT_REQUIRED" => pending.map(|request| ask_text(&request)),
        "TASK_STATE_FAILED" | "TASK_STATE_CANCELED" => view.error.as_deref().map(str::to_owned),
        "TASK_STATE_COMPLETED" => result.as_ref().and_then(result_text).map(str::to_owned),
        _ => None,
    };
    let mut history = Vec::new();
    if let Some(first) = detail.config.metadata.get("a2a").map(|a2a| &a2a["message"]).filter(|m| m.is_object()) {
        let mut first = first.clone();
        first["taskId"] = json!(task_id);
        history.push(first);
    }
    TaskSnapshot {
        task_id: task_id.to_owned(),
        context_id: context_id.to_owned(),
        state,
        changed_at: view.task_ended_at.or(view.task_started_at).unwrap_or_else(now),
        status_text,
        result,
        history,
        subagent_id: view.subagent_id.to_string(),
        usage: view.subtree_usage,
    }
}

/// What the model is told: the text parts, then each data part as JSON.
fn instruction(message: &UserMessage) -> String {
    let mut text = message.text.clone();
    for data in &message.data {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&data.to_string());
    }
    text
}

/// The request of task `found`'s tree that waits for a person, if any.
pub(super) fn pending_for(found: &Found) -> Option<Arc<PersonRequest>> {
    let tree = found.context.tree();
    tree.desk()
        .pending(Some(tree.session_id()))
        .into_iter()
        .find(|request| request.path.first() == Some(&found.subagent))
}

/// What a person is asked, in words.
pub(super) fn ask_text(request: &PersonRequest) -> String {
    match request.kind {
        AskKind::Question if request.choices.is_empty() => request.question.clone().unwrap_or_default(),
        AskKind::Question => {
            format!("{} (choose one of: {})", request.question.as_deref().unwrap_or_default(), request.choices.join(", "))
        }
        AskKind::Approval => format!(
            "Approve the call of {}{}? {} Answer \"approve\" or \"deny\" (a data part {{\"decision\", \"note\"}} also works).",
            request.tool.as_deref().unwrap_or("a tool"),
            request.server.as_deref().map(|server| format!(" on {server}")).unwrap_or_default(),
            request.reason.as_deref().unwrap_or_default(),
        ),
    }
}

/// A message read as the answer to `request`: a question takes the text;
/// an approval a decision, in a data part `{"decision", "note"}` or as
/// the text's first word (`approve`/`yes`, `deny`/`no`).
fn answer_of(request: &PersonRequest, message: &UserMessage) -> Result<Given, RpcError> {
    if request.kind == AskKind::Question {
        return Ok(Given::Answer { text: message.text.clone() });
    }
    let data = message.data.iter().find_map(Value::as_object);
    let (decision, note) = match data {
        Some(data) => (
            data.get("decision").and_then(Value::as_str).unwrap_or_default().to_ascii_lowercase(),
            data.get("note").and_then(Value::as_str).unwrap_or_default().to_owned(),
        ),
        None => {
            let text = message.text.trim();
            let (word, rest) = text.split_once(char::is_whitespace).unwrap_or((text, ""));
            (word.trim_end_matches(|c: char| !c.is_alphanumeric()).to_ascii_lowercase(), rest.trim().to_owned())
        }
    };
    match decision.as_str() {
        "approve" | "approved" | "yes" | "y" | "ok" => Ok(Given::Approve { note }),
        "deny" | "denied" | "no" | "n" => Ok(Given::Deny { note }),
        _ => Err(RpcError::invalid_params(
            "this task waits for an approval: answer \"approve\" or \"deny\" (or a data part {\"decision\": …})",
        )),
    }
}

/// Reads a task list's `status` filter.
pub(super) fn status_filter(params: &Map<String, Value>) -> Result<Option<&'static str>, RpcError> {
    const STATES: [&str; 8] = [
        "TASK_STATE_SUBMITTED",
        "TASK_STATE_WORKING",
        "TASK_STATE_COMPLETED",
        "TASK_STATE_FAILED",
        "TASK_STATE_CANCELED",
        "TASK_STATE_INPUT_REQUIRED",
        "TASK_STATE_REJECTED",
        "TASK_STATE_AUTH_REQUIRED",
    ];
    match super::rpc::field(params, "status", "status") {
        None => Ok(None),
        Some(Value::String(state)) if state == "TASK_STATE_UNSPECIFIED" => Ok(None),
        Some(Value::String(state)) => STATES
            .iter()
            .find(|known| **known == state)
            .copied()
            .map(Some)
            .ok_or_else(|| RpcError::invalid_params(format!("`status` {state:?} is not a TaskState"))),
        Some(Value::Number(n)) => match n.as_u64() {
            Some(0) => Ok(None),
            Some(n @ 1..=8) => Ok(Some(STATES[usize::try_from(n).unwrap_or(1) - 1])),
            _ => Err(RpcError::invalid_params("`status` is not a TaskState")),
        },
        Some(_) => Err(RpcError::invalid_params("`status` must be a TaskState")),
    }
}

#[cfg(test)]
mod tests {
    use super::session_of;

    #[test]
    fn a_context_names_one_session_per_caller() {
        let a = session_of(None, "ctx");
        assert_eq!(a, session_of(None, "ctx"));
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_ne!(a, session_of(Some("alice"), "ctx"), "another caller's context is another session");
        assert_ne!(a, session_of(None, "ctx2"));
    }
}
