//! HTTP + SSE (actix-web), as the A2E SDK's HTTP transport expects:
//!
//! - `POST /session` → `{"session_id": "..."}`. The session is
//!   unauthenticated until its handshake succeeds (see
//!   [`crate::session::PoolSlot`]): 503 when
//!   `max_unauthenticated_sessions` such sessions are open, or `max_sessions`
//!   authenticated ones. A client may send `Authorization: Bearer <token>`:
//!   with a valid token the session takes a `max_sessions` slot at once and
//!   unauthenticated sessions can never crowd it out (a wrong token is 401).
//! - `POST /send` with header `X-Session-Id`, body one or more NDJSON lines →
//!   `{"ok": true}` at once; the replies go to the stream. 400 without the
//!   header, 404 for an unknown, expired or ended session. It never waits
//!   for the session: the session's input queue holds
//!   `max(max_inflight_requests, 64)` lines, and when it is full (the
//!   session is at its `max_inflight_requests` bound and that many more
//!   lines wait behind) it answers 429 with
//!   `{"ok": false, "error": "busy", "accepted": N}` and `Retry-After: 1`:
//!   the first N lines of the body were taken (and will be answered), the
//!   rest were not.
//! - `GET /stream` with header `X-Session-Id` → `text/event-stream`, each
//!   message as `data: <json>\n\n`. Messages produced while no stream is
//!   attached wait in the session's bounded outbox and are sent on attach; a
//!   new stream for the same session replaces the previous one, which ends
//!   with one last event, `event: closed` with `data:` an A2E `error`
//!   (`code` `invalid_state`, `detail.reason` `stream_replaced`), so an SSE
//!   client that ignores `event:` lines sees it as a message too.
//! - `GET /health` → `{"status": "ok", "sessions": N, "streams": M, …}`;
//!   `GET /ready` → 200 while the node can serve, 503 while its store is out
//!   of reach (or does not answer within 500 ms) or it shuts down; it
//!   answers within that deadline whatever the store does.
//! - `GET /metrics` → the Prometheus metrics (`metrics_endpoint`).
//! - `POST /session`, `/send` and `/stream` name the session in an
//!   `X-Session-Id` response header (a router learns where it is served),
//!   and on a cluster node the node in `X-Subagentd-Node`. A request naming
//!   a session that another node took is served by taking it back from the
//!   store (see `crate::store` and its cluster module); a `/send` line that
//!   arrives just as its session moves away is refused with 503 to be sent
//!   again.
//!
//! SSE has no acknowledgements: a message written into a connection that
//! died before the host noticed is lost. A client closing its connection is
//! noticed at once (half-closed connections are not kept), so a client that
//! reconnects after its old stream is gone loses nothing.
//!
//! A session with no request and no attached stream for
//! `limits.session_idle_seconds` is closed and forgotten. A session that has
//! ended (`shutdown`) is forgotten once a stream has delivered its last
//! lines, or `[server] final_flush_ms` after it ended with no stream
//! attached; until then it still counts toward `max_sessions`. Requests sent
//! while it drains after `shutdown` are answered on the stream with
//! `invalid_state`; once it has ended, `/send` answers 404. See
//! `crate::session`'s `registry` for the lifecycle.
//!
//! Bounds on connections: a request body (`/send`, `/session`) must arrive
//! in full within `limits.http_body_timeout_ms`, else the request is
//! answered 408 (`{"ok": false, "error": "body_timeout", "accepted": N}`,
//! N lines of a `/send` body were taken) and the connection closed; the
//! server holds at most `limits.max_connections` connections (split evenly
//! over its workers) and stops accepting at that bound.
//!
//! The faces served beside these routes (`/a2a`, `/mcp`, `/ui` and
//! `/admin/*`) live in `crate::faces`; the routing table that mounts them
//! all is `crate::server`'s `http`. This module keeps the bytes: the A2E
//! session routes and the plumbing every route shares.
//!
//! Files:
//!
//! - `create_session`, `send_lines`, `sse_stream`: `POST /session`,
//!   `POST /send`, `GET /stream`.
//! - `health`: `GET /health` and `GET /ready`; `metrics_endpoint`:
//!   `GET /metrics`.
//! - `request_info`: the session a request names (if its caller may use
//!   it), its peer and token.
//! - `host_check`: the `Host` and `Origin` checks before every route.
//! - `responses`: the answers every route shares.

mod create_session;
mod health;
pub(crate) mod host_check;
mod metrics_endpoint;
pub(crate) mod request_info;
pub(crate) mod responses;
mod send_lines;
mod sse_stream;

pub(crate) use create_session::create;
pub(crate) use health::{health, ready};
pub(crate) use metrics_endpoint::scrape;
pub(crate) use send_lines::send;
pub(crate) use sse_stream::stream;
