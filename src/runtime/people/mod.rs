//! A person in the loop: tool calls that wait for a person's approval, and
//! questions a model asks its person (`ask_user`).
//!
//! - `policy`: which calls need approval (`[[tools.approval]]` and a
//!   subagent's `metadata.approval`, which its subtree inherits).
//! - `desk`: every request waiting for a person across the host's sessions,
//!   where answers (from the session's client, or the operator's page)
//!   find the task that waits.
//! - `ask`: the task's side: post a request, stop its clocks, wait for the
//!   answer, a timeout or a cancel, and keep what was asked and answered
//!   in its checkpoint so a restart neither loses nor repeats it.

mod ask;
pub(super) mod desk;
pub(super) mod policy;

pub(crate) use ask::{Ask, PersonLedger};
pub use desk::{AnswerOutcome, AskKind, Desk, Given, PersonRequest};
pub use policy::ApprovalPolicy;
pub use policy::CallSubject;
pub(crate) use policy::{has_rules, inherit_rules};
