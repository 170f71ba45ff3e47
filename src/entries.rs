//! What a subagent's memory and mailbox hold, as plain data: the runtime
//! keeps them (`runtime::memory`), the store writes and reads them back. They
//! live below both, so the store knows no actors.

use serde_json::value::RawValue;
use serde_json::Value;

use crate::protocol::encode::approx_len;
use crate::protocol::text::escaped_bytes;
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
