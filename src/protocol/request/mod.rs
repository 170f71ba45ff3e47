//! The requests a client may send, decoded from a line.
//!
//! The usual line is decoded straight from its text: a borrowed envelope
//! (`type`, `id`, `a2e`, `version`; every other field skipped), then the
//! typed body of that `type` from the same text. Anything that path does not
//! accept as is (bad JSON, a missing or odd envelope field, another version,
//! a bad body field, an unknown type) goes through the slower path below,
//! which builds a `Value` only to word the error exactly.
//!
//! Slow path, first pass: the line must be UTF-8 (`parse_error`), JSON (`parse_error`),
//! an object with a string `type` (`invalid_message`), and carry version
//! `1.0` in `a2e` or `version` when it names one (`version_mismatch`). Second
//! pass: the object becomes the typed body of its `type` through
//! `serde_path_to_error`, so a bad field is a `schema_violation` naming its
//! path (`agent.memory_scope`). A type the host does not serve is
//! `unknown_type`.
//!
//! - `kinds`: [`Request`], every request the host serves.
//! - `body`: a request's typed body from its `type` ([`body`]).
//! - `decode`: a line into an [`Incoming`] request ([`decode_line`]), fast
//!   path and slow.

mod body;
mod decode;
mod kinds;

pub use body::body;
pub use decode::{decode_line, DecodeError, Incoming, PROTOCOL_VERSION};
pub use kinds::{HandshakeRequest, Request, ShutdownRequest};
