//! Lifecycle events: what the supervisor tells the session as things happen.
//!
//! Events are typed and cheap to build (ids are `Copy`, strings are shared
//! `Arc<str>`); they become `SUBAGENT_EVENT` JSON only when a sink wants wire
//! form, so an in-process user that ignores events pays almost nothing.
//!
//! - `event_kind`: [`EventKind`], what happened.
//! - `lifecycle_event`: [`Event`] and its payloads ([`EventDetail`],
//!   [`ToolDetail`], [`ToolEnded`], [`TaskUsage`]).
//! - `event_sink`: [`EventSink`], where events go; [`NullSink`].
//! - `wire_event`: [`WireEvent`], an event's wire body, and
//!   [`MERGED_IDS_ON_THE_WIRE`].
//! - `lines`: the `SUBAGENT_EVENT` lines ([`line`], [`stopped_reply`]).

mod event_kind;
mod event_sink;
mod lifecycle_event;
mod lines;
mod wire_event;

pub use event_kind::EventKind;
pub use event_sink::{EventSink, NullSink};
pub use lifecycle_event::{Event, EventDetail, TaskUsage, ToolDetail, ToolEnded};
pub use lines::line;
pub(crate) use lines::stopped_reply;
pub use wire_event::{WireEvent, MERGED_IDS_ON_THE_WIRE};
