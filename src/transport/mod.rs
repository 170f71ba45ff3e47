//! Front ends of the service; each connection or HTTP session is one
//! protocol session with its own subagent tree.
//!
//! - [`stdio`]: one session on stdin/stdout.
//! - [`tcp`]: NDJSON over TCP, one session per connection.
//! - [`http`]: HTTP + SSE (actix-web).
//! - [`lines`]: reading frames from and writing lines to byte streams.

pub(crate) mod http;
pub(crate) mod lines;
pub(crate) mod stdio;
pub(crate) mod tcp;
