//! One protocol session per connection (or HTTP session): handshake and
//! auth, the session pools, the registry of HTTP-served sessions, and
//! resuming stored ones.
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
//! - `service`: the process-wide [`Service`], the state every session
//!   shares; `opening`: opening a session on it ([`OpenedConnection`]);
//!   `pool_slot`: a session's place in the service's pools, and counting
//!   callers; `stored_sessions`: claiming, restoring and
//!   keeping stored sessions; `parking`: sessions served without a client.
//! - `crate::faces::a2e` serves each subagent request (both namespaces,
//!   `tool/*`, `mcp/*`) through the operations table, with its reply line.
//! - `registry`: the sessions served over HTTP (A2E's `/session`, and the
//!   sessions the A2A and MCP faces host), their lifecycle; `adopt`:
//!   serving stored sessions that no client came back for.
//! - `face_open`: opening a session a face serves itself (A2A, MCP):
//!   handshaken by construction; `face_events`: its events, typed for the
//!   face.
//! - `auth`: token checking; `owner`: whose a session is, and the
//!   caller it counts against (`max_sessions_per_caller`).
//! - `crate::outbox`: the bounded outbox and the slow-client rule.
//! - `handshake`: the handshake's answer; `resume`, `relay`: resuming a
//!   stored session.
//! - `drain`: the end of a `shutdown` (or stdio EOF): tasks may finish while
//!   later requests are refused with `invalid_state`.

mod adopt;
mod attach;
mod auth;
mod connection;
mod drain;
mod entry;
mod face_events;
pub(crate) mod face_open;
mod frames;
mod handshake;
mod input;
mod opening;
mod owner;
mod parking;
mod pool_slot;
mod registry;
mod relay;
mod resume;
mod service;
mod stored_sessions;

pub(crate) use crate::faces::a2e::error_line;
pub use crate::outbox::OutboxReceiver;
pub(crate) use adopt::adopt_orphans;
pub(crate) use attach::Attach;
pub use auth::Auth;
pub use connection::ConnectionEnd;
pub use drain::SHUTTING_DOWN;
pub(crate) use entry::{lock, HttpEntry, ReaderHold};
pub use input::InputSender;
pub(crate) use owner::{caller_key, Refusal};
pub(crate) use pool_slot::is_caller_limit;
pub(crate) use registry::HttpSessions;
pub use service::Service;
pub(crate) use service::INPUT_QUEUE;
