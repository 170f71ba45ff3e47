//! A tool call's way past a person: the approval a call may need
//! (`[[tools.approval]]`, `metadata.approval`) before it is made, and the
//! `ask_user` tool, for every adapter whose tasks call tools.

use serde::Deserialize;
use serde_json::{json, Value};

use crate::runtime::people::{Ask, CallSubject, Given, PersonLedger};
use crate::runtime::task::TaskContext;

/// What a call may do, as far as people go.
pub(crate) enum Passage {
    /// No approval is needed: make the call.
    Free,
    /// A person approved it: make the call. `decided_before`: the approval
    /// was recorded before a restart, so the call may have been made
    /// already (treat it as resumed).
    Approved {
        /// See above.
        decided_before: bool,
    },
    /// Do not: answer the model with this.
    Refused(Value),
}

/// Asks the task's person to approve `subject`'s call `call_id` with
/// `arguments` when the rules want it; `Go` at once when they do not.
pub(crate) async fn approve(
    ctx: &TaskContext,
    subject: CallSubject<'_>,
    call_id: &str,
    arguments: &Value,
    ledger: &mut PersonLedger,
    persist: impl AsyncFnMut(&PersonLedger),
) -> Passage {
    let Some(reason) = ctx.host.approvals.reason(&ctx.config.metadata, &subject) else {
        return Passage::Free;
    };
    let decided_before = ledger.decided(call_id).is_some();
    let ask = Ask::Approval {
        tool: subject.qualified.to_owned(),
        server: subject.server.map(str::to_owned),
        arguments: arguments.clone(),
        reason,
    };
    match ctx.ask_person(call_id, ask, ledger, persist).await {
        Given::Approve { .. } => Passage::Approved { decided_before },
        Given::Deny { note } if note.trim().is_empty() => Passage::Refused(json!({ "error": "denied by a person" })),
        Given::Deny { note } => Passage::Refused(json!({ "error": format!("denied by a person: {note}") })),
        Given::Timeout => Passage::Refused(json!({ "error": timeout_text(ctx, "approval") })),
        Given::Cancelled | Given::Answer { .. } => Passage::Refused(json!({ "error": "cancelled" })),
    }
}

fn timeout_text(ctx: &TaskContext, what: &str) -> String {
    let seconds = ctx.host.limits.approval_timeout().as_secs();
    format!("denied: no {what} from a person within {seconds} s (timeout)")
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AskUserArgs {
    question: String,
    #[serde(default)]
    choices: Vec<String>,
}

/// Most choices an `ask_user` call may offer, and the longest question.
const MAX_CHOICES: usize = 32;
const MAX_QUESTION_BYTES: usize = 16 << 10;

/// Carries out `ask_user` call `call_id`: the person's answer as the tool's
/// result, or `{"error": …}`.
pub(crate) async fn ask_user(
    ctx: &TaskContext,
    call_id: &str,
    arguments: &str,
    ledger: &mut PersonLedger,
    persist: impl AsyncFnMut(&PersonLedger),
) -> Value {
    let text = if arguments.trim().is_empty() { "{}" } else { arguments };
    let args: AskUserArgs = match serde_json::from_str(text) {
        Ok(args) => args,
        Err(err) => return json!({ "error": format!("bad arguments for ask_user: {err}") }),
    };
    if args.question.trim().is_empty() || args.question.len() > MAX_QUESTION_BYTES {
        return json!({ "error": format!("ask_user needs a question of 1 to {MAX_QUESTION_BYTES} bytes") });
    }
    if args.choices.len() > MAX_CHOICES {
        return json!({ "error": format!("ask_user offers at most {MAX_CHOICES} choices") });
    }
    let ask = Ask::Question { question: args.question, choices: args.choices };
    match ctx.ask_person(call_id, ask, ledger, persist).await {
        Given::Answer { text } => Value::String(text),
        Given::Timeout => json!({ "error": timeout_text(ctx, "answer") }),
        _ => json!({ "error": "cancelled" }),
    }
}
