//! One protocol session per connection (or HTTP session): handshake and
//! auth, dispatch of decoded requests, and the bounded outbox.
//!
//! A [`Connection`] reads `Frame`s from its input channel and answers
//! every request with exactly one final reply on its outbox. Requests run
//! concurrently (a pending await never holds up later requests), at most
//! `limits.max_inflight_requests` at once: at the bound the session stops
//! reading its input, which pushes back on the transport.
//!
//! Until its first successful handshake a session is *unauthenticated*: it
//! holds no `max_sessions` slot (see [`PoolSlot`]), it is closed when
//! `limits.handshake_timeout_ms` pass first, and after
//! `limits.max_failed_handshakes` failed handshakes. Every failed handshake
//! is logged at WARN with the session id and the peer (never the token).
//!
//! - `connection`: [`Connection`], one session's loop: frames in, one reply
//!   per request out, its end.
//! - `frames`: serving one frame: the handshake, the session requests, and
//!   the subagent requests handed to `dispatch`.
//! - `service`: the process-wide [`Service`] that opens sessions and
//!   counts them in their pools; `stored_sessions`: claiming, restoring and
//!   keeping stored sessions; `parking`: sessions served without a client.
//! - `dispatch`: a subagent request through its face (`face_subagent`,
//!   `face_multi_agent`) and the operations table; `reply`: its reply line
//!   and the outbox room it takes.
//! - `auth`: token checking; `owner`: whose a session is, and the
//!   caller it counts against (`max_sessions_per_caller`).
//! - `outbox`: the bounded outbox and the slow-client rule.
//! - `handshake`: the handshake's answer; `resume`, `relay`: resuming a
//!   stored session.
//! - `drain`: the end of a `shutdown` (or stdio EOF): tasks may finish while
//!   later requests are refused with `invalid_state`.

mod attach;
mod auth;
mod connection;
mod dispatch;
mod drain;
mod face_mcp;
mod face_multi_agent;
mod face_subagent;
mod face_tools;
mod frames;
mod handshake;
mod input;
mod outbox;
mod outbox_ends;
#[cfg(test)]
mod outbox_tests;
mod owner;
mod parking;
mod relay;
mod reply;
mod resume;
mod service;
mod stored_sessions;

pub use attach::{Attach, Attachment};
pub use auth::Auth;
pub use connection::{Connection, ConnectionEnd};
pub use drain::SHUTTING_DOWN;
pub use handshake::{CAPABILITY, CAPABILITY_ALIAS};
pub use input::{InputReceiver, InputSender};
pub use outbox::{Outbox, Reservation};
pub use outbox_ends::{OutboxReceiver, OutboxSink};
pub use owner::{caller_key, Owner, Refusal};
pub(crate) use reply::error_line;
pub use service::{is_caller_limit, OpenedConnection, Parked, PoolSlot, Service, INPUT_QUEUE};
pub use stored_sessions::{face_of, is_in_use, NEW_SESSION_DEADLINE};
