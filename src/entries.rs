//! What a subagent's memory and mailbox hold, as plain data: the runtime
//! keeps them (`runtime::memory`), the store writes and reads them back. They
//! live below both, so the store knows no actors.

use serde_json::value::RawValue;
use serde_json::Value;

use crate::protocol::encode::approx_len;
use crate::protocol::wire::SubagentMessagePayload;

/// One memory entry.
#[derive(Debug, Clone)]
pub enum MemoryEntry {
    /// A chat line with text content, `{"content": "…", "role": "…"}`, kept
    /// as its two strings: the common entry costs no encoding at all.
    Said {
        /// Who said it (`user`, `assistant`, …).
        role: &'static str,
        /// What was said.
        content: Box<str>,
    },
    /// Any other entry, as its encoded JSON text.
    Encoded(Box<RawValue>),
}

impl MemoryEntry {
    /// Bytes it takes as encoded JSON (a chat line: exact unless it holds
    /// control characters, counted as two bytes each).
    pub(crate) fn bytes(&self) -> usize {
        match self {
            // `{"content":"` … `","role":"` … `"}`, and a backslash per escape.
            Self::Said { role, content } => content.len() + escaped_bytes(content) + role.len() + 24,
            Self::Encoded(text) => text.get().len(),
        }
    }

    /// The entry as a value.
    pub fn to_value(&self) -> Value {
        match self {
            Self::Said { role, content } => serde_json::json!({ "content": &**content, "role": role }),
            // It was encoded from a value, so it parses back.
            Self::Encoded(text) => serde_json::from_str(text.get()).unwrap_or(Value::Null),
        }
    }
}

impl serde::Serialize for MemoryEntry {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        match self {
            Self::Said { role, content } => {
                let mut line = serializer.serialize_struct("Said", 2)?;
                line.serialize_field("content", content)?;
                line.serialize_field("role", role)?;
                line.end()
            }
            Self::Encoded(text) => text.serialize(serializer),
        }
    }
}

/// How many bytes of `text` JSON writes escaped: control characters, `"`
/// and `\`. Looked for eight at a time: every chat line is counted as it is
/// kept, and a byte-wise count (vectorized by the compiler four bytes at a
/// time) was most of the cost of keeping one.
fn escaped_bytes(text: &str) -> usize {
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

/// A message waiting in a subagent's mailbox.
#[derive(Debug, Clone, PartialEq)]
pub struct InboxMessage {
    /// Who sent it (a subagent id, or the client agent's id).
    pub from: String,
    /// What was sent.
    pub payload: SubagentMessagePayload,
}

impl InboxMessage {
    // What it counts toward the mailbox's byte bound.
    pub(crate) fn size(&self) -> usize {
        self.from.len() + self.payload.kind.len() + approx_len(&self.payload.content) + 24
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chat_line_counts_its_escaped_bytes_wherever_they_are() {
        for content in
            ["", "plain", "do the unit of work", "a \"quoted\" word", "tab\there", "0123456\\89abcdef\"", "é ✓ \u{7f}"]
        {
            let line = MemoryEntry::Said { role: "user", content: content.into() };
            assert_eq!(line.bytes(), serde_json::to_string(&line).unwrap().len(), "{content:?}");
        }
    }
}
