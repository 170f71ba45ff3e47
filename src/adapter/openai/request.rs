//! A chat-completions request's body, with the conversation's messages
//! encoded once each: the API wants the whole conversation at every call,
//! but a message never changes once said, so a step encodes only the
//! messages said since the call before and copies the rest as text.

use serde_json::Value;

use crate::runtime::task::TaskError;

/// The messages of one conversation as JSON text (`m1,m2,…`), as far as
/// they have been encoded.
#[derive(Debug, Default)]
pub(super) struct EncodedMessages {
    // The encoded messages, comma-separated, without the brackets.
    text: Vec<u8>,
    // How many messages `text` holds: the conversation's first `count`.
    count: usize,
}

impl EncodedMessages {
    /// The body of a request: `fields` (an object: model, tools …) with
    /// `messages`, the conversation so far, which must begin with the
    /// messages of the calls before (messages are only ever added), and
    /// `note` after them: said in this request only, never kept.
    pub(super) fn body(
        &mut self,
        fields: &Value,
        messages: &[Value],
        note: Option<&Value>,
    ) -> Result<Vec<u8>, TaskError> {
        let encode = |err: serde_json::Error| TaskError(format!("cannot encode the request: {err}"));
        if messages.len() < self.count {
            // A conversation that lost messages (none does) is encoded anew.
            *self = Self::default();
        }
        for message in &messages[self.count..] {
            if self.count > 0 {
                self.text.push(b',');
            }
            serde_json::to_writer(&mut self.text, message).map_err(encode)?;
            self.count += 1;
        }
        let mut body = serde_json::to_vec(fields).map_err(encode)?;
        if body.pop() != Some(b'}') {
            return Err(TaskError("cannot encode the request: its fields are not an object".into()));
        }
        body.reserve(self.text.len() + 16);
        if body.len() > 1 {
            body.push(b',');
        }
        body.extend_from_slice(b"\"messages\":[");
        body.extend_from_slice(&self.text);
        if let Some(note) = note {
            if self.count > 0 {
                body.push(b',');
            }
            serde_json::to_writer(&mut body, note).map_err(encode)?;
        }
        body.extend_from_slice(b"]}");
        Ok(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_body_is_its_fields_with_the_whole_conversation_however_it_grew() {
        let mut encoded = EncodedMessages::default();
        let fields = json!({ "model": "m", "tools": [{ "type": "function" }] });
        let mut messages = vec![json!({ "role": "system", "content": "s \"q\"" })];
        for n in 0..4 {
            let body: Value =
                serde_json::from_slice(&encoded.body(&fields, &messages, None).expect("body")).expect("JSON");
            assert_eq!(body, json!({ "model": "m", "tools": [{ "type": "function" }], "messages": messages }));
            let note = json!({ "role": "system", "content": "left: 3 steps" });
            let body: Value =
                serde_json::from_slice(&encoded.body(&fields, &messages, Some(&note)).expect("body")).expect("JSON");
            assert_eq!(body["messages"].as_array().unwrap().last(), Some(&note), "the note comes last");
            messages.push(json!({ "role": "user", "content": n }));
            messages.push(json!({ "role": "assistant", "content": null }));
        }
        let body: Value =
            serde_json::from_slice(&encoded.body(&json!({}), &messages[..1], None).expect("body")).expect("JSON");
        assert_eq!(body, json!({ "messages": [messages[0]] }), "fewer messages: encoded anew");
        assert!(encoded.body(&json!([]), &messages, None).is_err(), "fields must be an object");
    }
}
