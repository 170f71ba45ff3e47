//! JSON text written by hand, for the lines a host writes most: events.
//!
//! serde_json escapes every key and string byte by byte through a table, and
//! a subagent id went through the formatting machinery; an event's encoding
//! was most of what a TCP cycle cost the host. Here keys are constants
//! copied as they are, and a string is copied whole when nothing in it
//! needs an escape (else serde_json writes it), so the text is serde's, byte
//! for byte (`tests/it/wire_text.rs` holds the two to it).

use crate::ids::SubagentId;
use crate::protocol::wire::Usage;

/// JSON text being written into a line.
pub(crate) struct JsonText<'a>(pub(crate) &'a mut Vec<u8>);

impl JsonText<'_> {
    /// Bytes that are JSON text already: constant keys and punctuation.
    pub(crate) fn raw(&mut self, json: &[u8]) {
        self.0.extend_from_slice(json);
    }

    /// A string, escaped as serde_json escapes one: `"`, `\` and the
    /// control characters below U+0020, nothing else.
    pub(crate) fn string(&mut self, text: &str) {
        // One pass with no early exit (the compiler may vectorize it).
        let needs_escape =
            text.bytes().fold(false, |needs, byte| needs | (byte < 0x20) | (byte == b'"') | (byte == b'\\'));
        if !needs_escape {
            self.name(text);
        } else if serde_json::to_writer(&mut *self.0, text).is_err() {
            // (Writing into a `Vec` cannot fail.)
            self.0.extend_from_slice(b"\"\"");
        }
    }

    /// Any JSON value, as serde_json writes it.
    pub(crate) fn value(&mut self, value: &serde_json::Value) {
        if serde_json::to_writer(&mut *self.0, value).is_err() {
            self.0.extend_from_slice(b"null");
        }
    }

    /// A string the host itself names, that needs no escape (a status, an
    /// event kind, a message type), copied as it is.
    pub(crate) fn name(&mut self, text: &str) {
        self.0.reserve(text.len() + 2);
        self.0.push(b'"');
        self.0.extend_from_slice(text.as_bytes());
        self.0.push(b'"');
    }

    /// A string, or `null`.
    pub(crate) fn string_or_null(&mut self, text: Option<&str>) {
        match text {
            Some(text) => self.string(text),
            None => self.raw(b"null"),
        }
    }

    /// A whole number.
    pub(crate) fn number(&mut self, number: u64) {
        if serde_json::to_writer(&mut *self.0, &number).is_err() {
            self.0.push(b'0');
        }
    }

    /// A subagent id, `"sub_…"`.
    pub(crate) fn id(&mut self, id: SubagentId) {
        self.0.push(b'"');
        self.0.extend_from_slice(id.spelled().as_bytes());
        self.0.push(b'"');
    }

    /// Token counts, `{"input_tokens":…,"output_tokens":…}` as `Usage` serializes.
    pub(crate) fn usage(&mut self, usage: Usage) {
        self.raw(b"{\"input_tokens\":");
        self.number(usage.input_tokens);
        self.raw(b",\"output_tokens\":");
        self.number(usage.output_tokens);
        self.raw(b"}");
    }
}
