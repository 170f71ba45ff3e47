//! The `Supervisor`: one per session, the root of the session's tree and
//! the single owner of its structure.
//!
//! It keeps the record of every subagent (`record`): where its actor is, its
//! parent and children, and the status mirrored from its reports, so that
//! routing a request costs one lookup and a list costs no message. It
//! enforces depth and quota at spawn (`placement`), stops subtrees with one
//! routine (`stop`), and emits each event to the session's sink: one place
//! for events.
//!
//! - `record`: the per-subagent record and the shared-string cache.
//! - `placement`: where a new subagent goes and what it gets.
//! - `stop`: terminating and cancelling subtrees, retiring records.
//! - `forward`: delegate and await replies that skip the supervisor.
//! - `queue`: the concurrency caps, and the tasks waiting for a slot.
//! - `root`: the actor's state and the routines the others share; the
//!   parts of that state the other files keep are apart from them
//!   (`dozing`, `retired`, and the queued task in `root` itself), so that
//!   `root` imports no file that imports it back.
//! - `handlers`: the message handlers, each naming the method that does its
//!   work; `requests`: the operations; `reports`: what actors report, and
//!   the close.
//! - `restore`: rebuilding a stored session's tree.
//! - `inspection`: the operator's view (admin API) read from the records.
//! - `sleep`: stopping the actors of subagents left with nothing to do;
//!   `dozing`: those told to sleep that may not have stopped yet.
//! - `waits`: the wait-for graph that refuses a wait which could never end.
//! - `retire`: finished face tasks leave the tree, answered from their
//!   record; `retired`: those records ([`RetiredTask`]).
//!
//! The rest of `runtime` names `Supervisor` by its file (`root`, visible
//! to `runtime`), and the messages name `waits::WaitToken` so: a path
//! through this file's re-exports is an import of this file, which
//! re-exports `root`, and would tie its importers into one import circle
//! with the whole supervisor.

mod dozing;
mod forward;
mod handlers;
mod inspection;
mod placement;
mod queue;
mod record;
mod reports;
mod requests;
mod restore;
mod retire;
mod retired;
pub(super) mod root;
mod sleep;
mod stop;
pub(super) mod waits;

pub(crate) use inspection::{CountStatuses, InspectOne, InspectTree};
pub(crate) use retire::RetireFinished;
pub use retire::FACE_TASK;
pub use retired::RetiredTask;
pub(crate) use waits::WaitToken;
