//! [`Desk`]: every request that waits for a person, across the host's
//! sessions. A task posts one and waits; an answer (from the session's
//! client, or the operator's page) is handed to the task, which records it
//! in its checkpoint before the answer is acknowledged.
//!
//! Answers are idempotent: the decision given for a request is kept (a
//! bounded number of them) after it leaves the desk, so the same answer
//! again is accepted, and a different one is `invalid_state`.

use serde::Serialize;
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{oneshot, Notify};

use crate::error::{ErrorCode, HostError};
use crate::ids::SubagentId;
use crate::protocol::wire::WaitingFor;

/// Answers kept after their request left the desk (for idempotent repeats).
const ANSWERS_KEPT: usize = 4096;

/// How long an answer waits for the task to record it.
const RECORD_WAIT: Duration = Duration::from_secs(10);

/// What a person is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AskKind {
    /// To approve or deny a tool call.
    Approval,
    /// To answer a model's question (`ask_user`).
    Question,
}

impl AskKind {
    /// `waiting_for` of a subagent waiting on it.
    pub fn waiting_for(self) -> WaitingFor {
        match self {
            Self::Approval => WaitingFor::Approval,
            Self::Question => WaitingFor::Input,
        }
    }
}

/// A request waiting for a person: what the event announcing it, the
/// operator's page and the desk's listings show.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PersonRequest {
    /// Its id (`approval_id` or `request_id` on the wire).
    pub id: Arc<str>,
    /// An approval or a question.
    pub kind: AskKind,
    /// The session of the subagent that asks.
    pub session_id: Arc<str>,
    /// The subagent that asks.
    pub subagent_id: SubagentId,
    /// Its ancestors and itself, root first.
    pub path: Vec<SubagentId>,
    /// An approval's tool (as the model calls it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// An approval's MCP server (`None` for the host's own tools).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// An approval's call arguments.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    /// Why approval is needed (the rule that matched).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A question's text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
    /// A question's choices (empty: free text).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub choices: Vec<String>,
    /// When it was asked (Unix seconds).
    pub requested_at: f64,
    /// When it is denied for want of an answer (Unix seconds).
    pub expires_at: f64,
}

/// A person's answer, or how a request ended without one.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "given", rename_all = "snake_case")]
pub enum Given {
    /// The call may be made.
    Approve {
        /// The person's note.
        note: String,
    },
    /// The call is refused.
    Deny {
        /// The person's note.
        note: String,
    },
    /// A question's answer.
    Answer {
        /// Its text.
        text: String,
    },
    /// No answer came in time (`approval_timeout_ms`).
    Timeout,
    /// The task was cancelled or terminated while it waited.
    Cancelled,
}

impl Given {
    /// The decision's wire name.
    pub fn decision(&self) -> &'static str {
        match self {
            Self::Approve { .. } => "approve",
            Self::Deny { .. } => "deny",
            Self::Answer { .. } => "answer",
            Self::Timeout => "timeout",
            Self::Cancelled => "cancelled",
        }
    }

    // What is kept of it once its request left the desk: its decision,
    // and for an answer a digest of its text (notes and texts are not
    // kept: thousands of kept answers stay small whatever their size).
    fn kept(&self) -> Kept {
        let digest = match self {
            Self::Answer { text } => {
                use std::hash::{Hash, Hasher};
                let mut hasher = std::collections::hash_map::DefaultHasher::new();
                text.hash(&mut hasher);
                Some(hasher.finish())
            }
            _ => None,
        };
        Kept { decision: self.decision(), digest }
    }
}

/// An answer handed to the waiting task, with the channel on which it
/// says the answer is recorded.
#[derive(Debug)]
pub(crate) struct Delivered {
    pub given: Given,
    pub recorded: oneshot::Sender<()>,
}

/// What answering a request did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnswerOutcome {
    /// The decision in force (the first one, for a repeat).
    pub decision: &'static str,
    /// Whether the answer reached the task (or, for a repeat, did before).
    pub accepted: bool,
}

struct Waiting {
    request: Arc<PersonRequest>,
    reply: oneshot::Sender<Delivered>,
    again: Arc<Notify>,
}

/// What an answer is remembered by: the same answer again (notes aside)
/// has the same `Kept`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Kept {
    decision: &'static str,
    digest: Option<u64>,
}

struct Answered {
    session: Arc<str>,
    kept: Kept,
}

#[derive(Default)]
struct Inner {
    waiting: HashMap<Arc<str>, Waiting>,
    answered: HashMap<Arc<str>, Answered>,
    answered_order: VecDeque<Arc<str>>,
}

impl Inner {
    fn remember(&mut self, id: Arc<str>, session: Arc<str>, given: Given) {
        if self.answered.insert(id.clone(), Answered { session, kept: given.kept() }).is_none() {
            self.answered_order.push_back(id);
        }
        while self.answered_order.len() > ANSWERS_KEPT {
            if let Some(oldest) = self.answered_order.pop_front() {
                self.answered.remove(&oldest);
            }
        }
    }
}

/// Every request waiting for a person; see the module docs.
#[derive(Default)]
pub struct Desk {
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for Desk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Desk").field("waiting", &self.lock().waiting.len()).finish()
    }
}

/// A posted request, as its task holds it: the answer arrives on
/// `answer`; `again` fires when it should be announced again.
pub(crate) struct Posted {
    pub answer: oneshot::Receiver<Delivered>,
    pub again: Arc<Notify>,
}

fn unknown(id: &str) -> HostError {
    HostError::new(ErrorCode::UnknownApproval, format!("no pending approval or question `{id}`"))
        .with_detail(serde_json::json!({ "approval_id": id }))
}

impl Desk {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Posts `request` (again, after a restart: the same id).
    pub(crate) fn post(&self, request: Arc<PersonRequest>) -> Posted {
        let (reply, answer) = oneshot::channel();
        let again = Arc::new(Notify::new());
        let id = request.id.clone();
        let mut inner = self.lock();
        inner.answered.remove(&id);
        inner.waiting.insert(id, Waiting { request, reply, again: again.clone() });
        Posted { answer, again }
    }

    /// Takes request `id` off the desk without an answer (`Timeout`,
    /// `Cancelled`): a later answer finds it `unknown_approval` (timed out)
    /// or `invalid_state` (cancelled).
    pub(crate) fn withdraw(&self, id: &str, how: Given) {
        let mut inner = self.lock();
        if let Some(waiting) = inner.waiting.remove(id) {
            let session = waiting.request.session_id.clone();
            inner.remember(waiting.request.id.clone(), session, how);
        }
    }

    /// The requests waiting, oldest first; of session `session` only when
    /// given.
    pub fn pending(&self, session: Option<&str>) -> Vec<Arc<PersonRequest>> {
        let inner = self.lock();
        let mut listed: Vec<Arc<PersonRequest>> = inner
            .waiting
            .values()
            .filter(|waiting| session.is_none_or(|session| *waiting.request.session_id == *session))
            .map(|waiting| waiting.request.clone())
            .collect();
        listed.sort_by(|a, b| a.requested_at.total_cmp(&b.requested_at).then_with(|| a.id.cmp(&b.id)));
        listed
    }

    /// How many requests wait.
    pub fn len(&self) -> usize {
        self.lock().waiting.len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Has every request of `session` announced again (a client came back).
    pub fn announce_again(&self, session: &str) {
        let inner = self.lock();
        for waiting in inner.waiting.values().filter(|waiting| *waiting.request.session_id == *session) {
            waiting.again.notify_one();
        }
    }

    /// Answers request `id` with `given`; `session`: the answering client's
    /// session (`None`: the operator, who may answer any). Waits until the
    /// task has recorded the answer.
    ///
    /// `unknown_approval` for an id this session does not have, or one that
    /// timed out; `invalid_state` for another decision than the one already
    /// given, or for an answer of the wrong kind; `invalid_message` for an
    /// answer that is not one of a question's choices (it stays open).
    pub async fn answer(&self, id: &str, session: Option<&str>, given: Given) -> Result<AnswerOutcome, HostError> {
        let mine = |of: &str| session.is_none_or(|session| session == of);
        let (reply, decision) = {
            let mut inner = self.lock();
            if let Some(waiting) = inner.waiting.get(id).filter(|waiting| mine(&waiting.request.session_id)) {
                let fits = match waiting.request.kind {
                    AskKind::Approval => matches!(given, Given::Approve { .. } | Given::Deny { .. }),
                    AskKind::Question => matches!(given, Given::Answer { .. }),
                };
                if !fits {
                    let wanted = match waiting.request.kind {
                        AskKind::Approval => "an approval wants `approve` or `deny`",
                        AskKind::Question => "a question wants an answer",
                    };
                    return Err(HostError::new(ErrorCode::InvalidState, format!("`{id}`: {wanted}")));
                }
                let choices = &waiting.request.choices;
                if let Given::Answer { text } = &given {
                    if !choices.is_empty() && !choices.iter().any(|choice| choice == text) {
                        // The question stays open for an answer it offered.
                        let err = HostError::new(
                            ErrorCode::InvalidMessage,
                            format!("`{id}`: the answer must be one of the question's choices: {}", choices.join(", ")),
                        )
                        .with_detail(serde_json::json!({ "request_id": id, "choices": choices }));
                        return Err(err);
                    }
                }
                let waiting = inner.waiting.remove(id).expect("found above");
                let decision = given.decision();
                inner.remember(waiting.request.id.clone(), waiting.request.session_id.clone(), given.clone());
                (waiting.reply, decision)
            } else {
                return match inner.answered.get(id).filter(|answered| mine(&answered.session)) {
                    None => Err(unknown(id)),
                    Some(answered) if answered.kept == Given::Timeout.kept() => Err(unknown(id)),
                    Some(answered) if answered.kept == given.kept() => {
                        Ok(AnswerOutcome { decision: answered.kept.decision, accepted: true })
                    }
                    Some(answered) => Err(HostError::new(
                        ErrorCode::InvalidState,
                        format!("`{id}` was answered already: {}", answered.kept.decision),
                    )
                    .with_detail(serde_json::json!({ "approval_id": id, "decision": answered.kept.decision }))),
                };
            }
        };
        let (recorded, is_recorded) = oneshot::channel();
        let accepted = reply.send(Delivered { given, recorded }).is_ok()
            && matches!(tokio::time::timeout(RECORD_WAIT, is_recorded).await, Ok(Ok(())));
        Ok(AnswerOutcome { decision, accepted })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(id: &str, session: &str, kind: AskKind) -> Arc<PersonRequest> {
        Arc::new(PersonRequest {
            id: id.into(),
            kind,
            session_id: session.into(),
            subagent_id: SubagentId(1),
            path: Vec::new(),
            tool: None,
            server: None,
            arguments: None,
            reason: None,
            question: None,
            choices: Vec::new(),
            requested_at: 0.0,
            expires_at: 0.0,
        })
    }

    // A task that records whatever it is given.
    fn record(posted: Posted) -> tokio::task::JoinHandle<Given> {
        tokio::spawn(async move {
            let delivered = posted.answer.await.expect("an answer");
            let _ = delivered.recorded.send(());
            delivered.given
        })
    }

    #[tokio::test]
    async fn the_same_answer_twice_is_idempotent_and_another_is_invalid_state() {
        let desk = Desk::default();
        let task = record(desk.post(request("a1", "s1", AskKind::Approval)));
        let approve = Given::Approve { note: String::new() };
        let first = desk.answer("a1", Some("s1"), approve.clone()).await.unwrap();
        assert_eq!(first, AnswerOutcome { decision: "approve", accepted: true });
        assert_eq!(task.await.unwrap(), approve);
        let again = desk.answer("a1", Some("s1"), Given::Approve { note: "sure".into() }).await.unwrap();
        assert_eq!(again, AnswerOutcome { decision: "approve", accepted: true });
        let other = desk.answer("a1", None, Given::Deny { note: String::new() }).await.unwrap_err();
        assert_eq!(other.code, ErrorCode::InvalidState);
        assert!(desk.is_empty());
    }

    #[tokio::test]
    async fn another_sessions_or_an_expired_id_is_unknown_approval() {
        let desk = Desk::default();
        let _posted = desk.post(request("a1", "s1", AskKind::Approval));
        let deny = Given::Deny { note: String::new() };
        assert_eq!(desk.answer("a1", Some("s2"), deny.clone()).await.unwrap_err().code, ErrorCode::UnknownApproval);
        assert_eq!(desk.answer("zz", None, deny.clone()).await.unwrap_err().code, ErrorCode::UnknownApproval);
        desk.withdraw("a1", Given::Timeout);
        assert_eq!(desk.answer("a1", Some("s1"), deny.clone()).await.unwrap_err().code, ErrorCode::UnknownApproval);
        let _posted = desk.post(request("a2", "s1", AskKind::Approval));
        desk.withdraw("a2", Given::Cancelled);
        assert_eq!(desk.answer("a2", Some("s1"), deny).await.unwrap_err().code, ErrorCode::InvalidState);
    }

    #[tokio::test]
    async fn a_question_wants_an_answer_and_an_approval_a_decision() {
        let desk = Desk::default();
        let _question = desk.post(request("q1", "s1", AskKind::Question));
        let err = desk.answer("q1", None, Given::Approve { note: String::new() }).await.unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidState);
        assert_eq!(desk.pending(Some("s1")).len(), 1);
        assert!(desk.pending(Some("s2")).is_empty());
    }

    #[tokio::test]
    async fn an_answer_outside_a_questions_choices_is_refused_and_the_question_stays_open() {
        let desk = Desk::default();
        let mut question = (*request("q1", "s1", AskKind::Question)).clone();
        question.choices = vec!["a".into(), "b".into()];
        let task = record(desk.post(Arc::new(question)));
        let err = desk.answer("q1", None, Given::Answer { text: "zzz".into() }).await.unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidMessage);
        assert_eq!(desk.pending(Some("s1")).len(), 1, "still waiting");
        let outcome = desk.answer("q1", None, Given::Answer { text: "b".into() }).await.unwrap();
        assert!(outcome.accepted);
        assert_eq!(task.await.unwrap(), Given::Answer { text: "b".into() });
    }

    #[tokio::test]
    async fn an_answer_the_task_never_takes_is_not_accepted() {
        let desk = Desk::default();
        drop(desk.post(request("a1", "s1", AskKind::Approval)));
        let outcome = desk.answer("a1", None, Given::Approve { note: String::new() }).await.unwrap();
        assert!(!outcome.accepted);
    }
}
