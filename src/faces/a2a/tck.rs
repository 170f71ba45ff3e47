//! `[a2a] tck_mode`: the behaviour the A2A test kit expects of the system
//! it tests, chosen by a new message's `messageId` prefix and played by the
//! scripted agent. Off by default: for running the kit only.

use serde_json::{json, Value};

/// The answer of a `tck-message-response` message: a message, not a task.
pub(super) const MESSAGE_RESPONSE: &str = "tck-message-response";

/// A follow-up with this prefix leaves its task asking again; any other
/// answers every question left, so that the task completes.
pub(super) const INPUT_REQUIRED: &str = "tck-input-required";

/// How many times a `tck-input-required` task asks, at most.
pub(super) const ASKS: usize = 8;

/// The script a message whose id starts with one of the kit's prefixes
/// runs (longest prefixes first); `None`: the agent's own behaviour.
pub(super) fn script_for(message_id: &str) -> Option<Value> {
    let parts = |part: Value| json!([{ "return": { "parts": [part] } }]);
    let file = json!({ "raw": "dGNr", "filename": "output.txt", "mediaType": "text/plain" });
    let url = json!({ "url": "https://example.com/output.txt", "filename": "output.txt", "mediaType": "text/plain" });
    let table: [(&str, Value); 12] = [
        ("tck-stream-artifact-chunked", parts(json!({ "text": "chunk-1 chunk-2" }))),
        ("tck-stream-artifact-file", parts(file.clone())),
        ("tck-stream-artifact-text", parts(json!({ "text": "Generated text content" }))),
        ("tck-artifact-file-url", parts(url)),
        ("tck-artifact-file", parts(file)),
        ("tck-artifact-text", parts(json!({ "text": "Generated text content" }))),
        ("tck-artifact-data", parts(json!({ "data": { "key": "value", "count": 42 } }))),
        (MESSAGE_RESPONSE, json!([{ "return": { "text": "Direct message response" } }])),
        (INPUT_REQUIRED, {
            // Each question its own: one answered is never asked again.
            let mut steps: Vec<Value> =
                (1..=ASKS).map(|n| json!({ "ask_user": { "question": format!("Input required ({n})") } })).collect();
            steps.push(json!({ "return": { "text": "Hello from TCK" } }));
            Value::Array(steps)
        }),
        ("tck-reject-task", json!([{ "fail": "rejected by the test kit's request" }])),
        (
            "test-resubscribe-message-id",
            json!([{ "progress": "working" }, { "sleep_ms": 4000 }, { "return": { "text": "Hello from TCK" } }]),
        ),
        ("tck-", json!([{ "progress": "working" }, { "return": { "text": "Hello from TCK" } }])),
    ];
    table.into_iter().find(|(prefix, _)| message_id.starts_with(prefix)).map(|(_, script)| script)
}

#[cfg(test)]
mod tests {
    use super::script_for;

    #[test]
    fn the_longest_prefix_picks_the_script() {
        let url = script_for("tck-artifact-file-url-1234").unwrap();
        assert!(url.to_string().contains("example.com"), "{url}");
        let file = script_for("tck-artifact-file-1234").unwrap();
        assert!(file.to_string().contains("dGNr"), "{file}");
        assert!(script_for("tck-input-required-x").unwrap().to_string().contains("ask_user"));
        assert!(script_for("m-1").is_none(), "another id runs the agent as it is");
    }
}
