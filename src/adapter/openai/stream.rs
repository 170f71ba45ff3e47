//! Reading a streamed chat-completions reply (`stream: true`): server-sent
//! events, each `data: {chunk}`, ended by `data: [DONE]`. Text deltas are
//! handed on as they arrive; tool calls arrive in pieces (by `index`, the
//! arguments as string fragments) and are put together; the usage comes in
//! the last chunk (`stream_options.include_usage`).

use serde_json::Value;

use super::client::{Completion, ReplyInfo, ToolCall, Usage};
use crate::runtime::task::TaskError;

/// A stream's reply being put together.
#[derive(Debug, Default)]
pub(crate) struct StreamedReply {
    // Bytes of the line not yet ended.
    pending: Vec<u8>,
    content: Option<String>,
    // By index: id, name, arguments so far.
    calls: Vec<(String, String, String)>,
    usage: Usage,
    // The reply's model, id and finish reason, from whichever chunks carry them.
    about: ReplyInfo,
    done: bool,
}

impl StreamedReply {
    /// Takes the next bytes of the body; `on_text` hears each text delta.
    pub(crate) fn feed(&mut self, bytes: &[u8], on_text: &mut dyn FnMut(&str)) -> Result<(), TaskError> {
        self.pending.extend_from_slice(bytes);
        while let Some(end) = self.pending.iter().position(|byte| *byte == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let Some(data) = line.trim_end().strip_prefix("data:") else { continue };
            let data = data.trim();
            if data == "[DONE]" {
                self.done = true;
                continue;
            }
            let chunk: Value = serde_json::from_str(data)
                .map_err(|err| TaskError(format!("model server streamed a chunk that is not JSON: {err}")))?;
            self.add(&chunk, on_text);
        }
        Ok(())
    }

    fn add(&mut self, chunk: &Value, on_text: &mut dyn FnMut(&str)) {
        if let Some(usage) = chunk.get("usage").filter(|usage| usage.is_object()) {
            self.usage = Usage::read(usage);
        }
        self.about.read(chunk);
        // The chunk that ends the choice says why; usually the last with a delta.
        if let Some(reason) = chunk.pointer("/choices/0/finish_reason").and_then(Value::as_str) {
            self.about.finish_reasons = vec![reason.to_owned()];
        }
        let Some(delta) = chunk.pointer("/choices/0/delta") else { return };
        if let Some(text) = delta.get("content").and_then(Value::as_str).filter(|text| !text.is_empty()) {
            self.content.get_or_insert_with(String::new).push_str(text);
            on_text(text);
        }
        let Some(Value::Array(calls)) = delta.get("tool_calls") else { return };
        for (position, call) in calls.iter().enumerate() {
            let index = call.get("index").and_then(Value::as_u64).map_or(position, |index| index as usize);
            // Bounded: an index past what a reply can hold is ignored.
            if index >= 128 {
                continue;
            }
            if self.calls.len() <= index {
                self.calls.resize_with(index + 1, Default::default);
            }
            let (id, name, arguments) = &mut self.calls[index];
            if let Some(text) = call.get("id").and_then(Value::as_str) {
                id.push_str(text);
            }
            if let Some(text) = call.pointer("/function/name").and_then(Value::as_str) {
                name.push_str(text);
            }
            if let Some(text) = call.pointer("/function/arguments").and_then(Value::as_str) {
                arguments.push_str(text);
            }
        }
    }

    /// The whole reply, once the stream has ended.
    pub(crate) fn finish(self) -> Result<Completion, TaskError> {
        if !self.done && self.content.is_none() && self.calls.is_empty() {
            return Err(TaskError::new("model server's stream ended before any reply"));
        }
        let mut tool_calls = Vec::with_capacity(self.calls.len());
        for (index, (id, name, arguments)) in self.calls.into_iter().enumerate() {
            if name.is_empty() {
                return Err(TaskError(format!("model server's stream: tool call {index} has no function name")));
            }
            let id = if id.is_empty() { format!("call_{index}") } else { id };
            let arguments = if arguments.is_empty() { "{}".to_owned() } else { arguments };
            tool_calls.push(ToolCall { id, name, arguments });
        }
        Ok(Completion { content: self.content, tool_calls, usage: self.usage, about: self.about })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_are_handed_on_and_tool_calls_put_together_from_any_cut() {
        let body = concat!(
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hel\"}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"}}]}\n\n",
            ": a comment line\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_a\",\"type\":\"function\",\"function\":{\"name\":\"spawn_subagent\",\"arguments\":\"{\\\"na\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"me\\\":1}\"}}]}}]}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3,\"total_tokens\":10}}\n\n",
            "data: [DONE]\n\n",
        );
        // Fed in 7-byte pieces: lines cut anywhere are put back together.
        let mut reply = StreamedReply::default();
        let mut heard = Vec::new();
        for piece in body.as_bytes().chunks(7) {
            reply.feed(piece, &mut |text| heard.push(text.to_owned())).unwrap();
        }
        assert_eq!(heard, vec!["Hel", "lo"]);
        let completion = reply.finish().unwrap();
        assert_eq!(completion.content.as_deref(), Some("Hello"));
        assert_eq!(completion.tool_calls.len(), 1);
        assert_eq!(completion.tool_calls[0].id, "call_a");
        assert_eq!(completion.tool_calls[0].arguments, "{\"name\":1}");
        assert_eq!(completion.usage.total_tokens, 10);
    }

    #[test]
    fn the_model_id_and_finish_reason_come_from_whichever_chunks_carry_them() {
        let body = concat!(
            "data: {\"id\":\"r1\",\"model\":\"m-2026\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}\n",
            "data: {\"id\":\"r1\",\"model\":\"m-2026\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n",
            "data: [DONE]\n",
        );
        let mut reply = StreamedReply::default();
        reply.feed(body.as_bytes(), &mut |_| {}).unwrap();
        let about = reply.finish().unwrap().about;
        assert_eq!((about.model.as_deref(), about.id.as_deref()), (Some("m-2026"), Some("r1")));
        assert_eq!(about.finish_reasons, ["length"]);
    }

    #[test]
    fn a_bad_chunk_or_an_empty_stream_is_an_error_not_a_panic() {
        let mut reply = StreamedReply::default();
        assert!(reply.feed(b"data: {not json\n", &mut |_| {}).is_err());
        assert!(StreamedReply::default().finish().is_err());
    }
}
