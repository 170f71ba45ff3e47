//! Front ends of the service, bytes and connections only; each connection
//! or HTTP session is one protocol session with its own subagent tree.
//!
//! - [`stdio`]: one session on stdin/stdout.
//! - [`tcp`]: NDJSON over TCP, one session per connection.
//! - [`http`]: A2E over HTTP + SSE (actix-web), and the HTTP plumbing the
//!   faces' routes share.
//! - [`lines`]: reading frames from and writing lines to byte streams.

pub(crate) mod http;
pub(crate) mod lines;
pub(crate) mod stdio;
pub(crate) mod tcp;
