//! Structured output in the tool-calling loop: a task's
//! `metadata.output_schema` goes to the model as `response_format` (routes
//! with `structured_output = true`) or as an instruction in the prompt, and
//! the final answer is checked against it. A wrong answer gets one repair
//! round, its validation errors shown to the model; a second wrong answer
//! fails the task with an `output_schema_violation` error listing them.

use serde_json::{json, Value};

use crate::adapter::output_schema::{as_result, violation, OutputSchema};
use crate::protocol::wire::JsonObject;
use crate::runtime::task::TaskError;

/// What the schema adds to a fresh conversation: the instruction, as a
/// system message after the first, unless the route sends it as
/// `response_format`.
pub(super) fn prompt_message(schema: &OutputSchema, structured_output: bool) -> Option<Value> {
    (!structured_output).then(|| json!({ "role": "system", "content": schema.prompt() }))
}

/// Puts `response_format` on a request of a route with `structured_output`.
pub(super) fn shape_request(body: &mut Value, schema: &OutputSchema, structured_output: bool) {
    if structured_output {
        body["response_format"] = schema.response_format();
    }
}

/// How a final answer went against the schema.
#[derive(Debug)]
pub(super) enum Checked {
    /// Valid: the task's result.
    Valid(JsonObject),
    /// Invalid, first time: tell the model this and call it again.
    Repair(Value),
}

/// Checks a final answer; `repaired` says whether the repair round was
/// spent (and is set when this answer spends it).
pub(super) fn check(schema: &OutputSchema, text: &str, repaired: &mut bool) -> Result<Checked, TaskError> {
    match schema.check(text) {
        Ok(value) => Ok(Checked::Valid(as_result(value))),
        Err(errors) if *repaired => Err(violation(&errors)),
        Err(errors) => {
            *repaired = true;
            let listed: Vec<String> = errors.iter().map(|error| format!("- {error}")).collect();
            let text = format!(
                "Your answer is not valid against the required JSON Schema:\n{}\nAnswer again with only one \
                 JSON value that is valid against it.",
                listed.join("\n")
            );
            Ok(Checked::Repair(json!({ "role": "user", "content": text })))
        }
    }
}
