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

/// How many bytes of `text` JSON writes escaped: control characters, `"`
/// and `\`. Looked for eight at a time: every chat line is counted as it is
/// kept, and a byte-wise count (vectorized by the compiler four bytes at a
/// time) was most of the cost of keeping one.
pub(crate) fn escaped_bytes(text: &str) -> usize {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    // Whether a byte of `word` is below `n` (n <= 0x80): exact for the word
    // as a whole, which is all that is asked of it.
    let below = |word: u64, n: u8| word.wrapping_sub(ONES * u64::from(n)) & !word & HIGHS != 0;
    // A quote or a backslash is a zero byte once xored with it.
    let flagged = |word: u64| {
        below(word, 0x20) || below(word ^ (ONES * u64::from(b'"')), 1) || below(word ^ (ONES * u64::from(b'\\')), 1)
    };
    let mut chunks = text.as_bytes().chunks_exact(8);
    let mut count = 0;
    for chunk in &mut chunks {
        let word = u64::from_ne_bytes([chunk[0], chunk[1], chunk[2], chunk[3], chunk[4], chunk[5], chunk[6], chunk[7]]);
        if flagged(word) {
            count += count_escaped(chunk);
        }
    }
    // The last bytes, padded with spaces (never escaped) to a word.
    let rest = chunks.remainder();
    let mut last = [b' '; 8];
    last[..rest.len()].copy_from_slice(rest);
    if flagged(u64::from_ne_bytes(last)) {
        count += count_escaped(rest);
    }
    count
}

// Out of line and cold, so that the compiler keeps the loop above a loop of
// word tests: vectorized whole, it cost more than the byte-wise count.
#[cold]
#[inline(never)]
fn count_escaped(bytes: &[u8]) -> usize {
    bytes.iter().filter(|&&byte| byte < 0x20 || byte == b'"' || byte == b'\\').count()
}

/// Writes `text` into `out` as a JSON string, escaped as serde_json escapes
/// one (see [`JsonText::string`]), for text written into a `String`: a
/// result's. Looked through eight bytes at a time, as a chat line is
/// counted: its strings are short, where the byte-wise pass of
/// `JsonText::string` cost twice as much.
pub(crate) fn push_string(out: &mut String, text: &str) {
    if escaped_bytes(text) == 0 {
        out.reserve(text.len() + 2);
        out.push('"');
        out.push_str(text);
        out.push('"');
    } else {
        // (Serializing a `str` cannot fail.)
        out.push_str(&serde_json::to_string(text).unwrap_or_else(|_| "\"\"".to_owned()));
    }
}

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

    /// Token counts, `{"input_tokens":…,"output_tokens":…}` and the cost
    /// when there is one (`,"cost_usd":…`), as `Usage` serializes.
    pub(crate) fn usage(&mut self, usage: Usage) {
        self.raw(b"{\"input_tokens\":");
        self.number(usage.input_tokens);
        self.raw(b",\"output_tokens\":");
        self.number(usage.output_tokens);
        if let Some(cost) = usage.cost_usd {
            self.raw(b",\"cost_usd\":");
            if serde_json::to_writer(&mut *self.0, &cost).is_err() {
                self.0.push(b'0');
            }
        }
        self.raw(b"}");
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::push_string;
    use crate::protocol::raw::RawObject;

    // Here rather than in `raw`'s tests: `raw` would import this file, which
    // imports `wire`, which re-exports `raw` (an import circle of three).
    #[test]
    fn host_text_is_kept_as_written() {
        let mut line = String::from("{\"a\":");
        push_string(&mut line, "x\"y");
        line.push('}');
        let raw = RawObject::from_host_text(line);
        assert_eq!(raw.text(), r#"{"a":"x\"y"}"#);
        assert_eq!(raw, RawObject::from(json!({"a": "x\"y"}).as_object().cloned().unwrap()));
    }
}
