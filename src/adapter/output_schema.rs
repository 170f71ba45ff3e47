//! Structured output: a task's `metadata.output_schema` (a JSON Schema),
//! compiled once per task and checked against what the task answers, with
//! the `jsonschema` crate (no remote `$ref`s are fetched).
//!
//! A reply that is not valid JSON, or does not match, gets its errors
//! listed ([`OutputSchema::check`]); a task that ends that way fails with
//! an error starting [`SCHEMA_VIOLATION`], a schema that does not compile
//! with one starting [`SCHEMA_INVALID`]. A valid answer is the parsed
//! object ([`as_result`]).

use serde_json::{json, Value};

use crate::protocol::wire::{JsonObject, TaskDefinition};
use crate::runtime::task::TaskError;

/// The task metadata key holding the schema.
pub const OUTPUT_SCHEMA_KEY: &str = "output_schema";
/// How a task error starts when the answer never matched the schema.
pub const SCHEMA_VIOLATION: &str = "output_schema_violation";
/// How a task error starts when `metadata.output_schema` is not a schema.
pub const SCHEMA_INVALID: &str = "output_schema_invalid";
/// Most validation errors listed (the rest are counted).
const MAX_LISTED: usize = 10;

/// A task's compiled output schema.
pub struct OutputSchema {
    // As the task gave it (sent to the model).
    schema: Value,
    validator: jsonschema::Validator,
}

impl std::fmt::Debug for OutputSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputSchema").field("schema", &self.schema).finish_non_exhaustive()
    }
}

impl OutputSchema {
    /// The task's schema: `None` without `metadata.output_schema`; an
    /// error starting [`SCHEMA_INVALID`] when it does not compile.
    pub fn of(task: &TaskDefinition) -> Result<Option<Self>, TaskError> {
        let Some(schema) = task.metadata.get(OUTPUT_SCHEMA_KEY) else { return Ok(None) };
        let validator = jsonschema::validator_for(schema)
            .map_err(|err| TaskError(format!("{SCHEMA_INVALID}: metadata.output_schema: {err}")))?;
        Ok(Some(Self { schema: schema.clone(), validator }))
    }

    /// The schema as the task gave it.
    pub fn schema(&self) -> &Value {
        &self.schema
    }

    /// Checks a value: `Err` lists what does not match (at most ten, then
    /// how many more), each as `path: message`.
    pub fn check_value(&self, value: &Value) -> Result<(), Vec<String>> {
        let mut errors: Vec<String> = Vec::new();
        let mut more = 0usize;
        for error in self.validator.iter_errors(value) {
            if errors.len() < MAX_LISTED {
                let path = error.instance_path().to_string();
                let path = if path.is_empty() { "/".to_owned() } else { path };
                errors.push(format!("{path}: {error}"));
            } else {
                more += 1;
            }
        }
        if more > 0 {
            errors.push(format!("… and {more} more"));
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }

    /// Checks a model's text answer: the parsed value when it is JSON that
    /// matches (a fenced ```json block is unwrapped first).
    pub fn check(&self, text: &str) -> Result<Value, Vec<String>> {
        let value: Value = serde_json::from_str(unfenced(text))
            .map_err(|err| vec![format!("the answer is not one JSON value: {err}")])?;
        self.check_value(&value).map(|()| value)
    }

    /// `response_format` for a route with `structured_output`.
    pub fn response_format(&self) -> Value {
        json!({
            "type": "json_schema",
            "json_schema": { "name": "task_output", "schema": self.schema, "strict": false },
        })
    }

    /// The instruction that asks for the schema in the prompt.
    pub fn prompt(&self) -> String {
        format!(
            "Your final answer (the reply in which you call no tool) must be exactly one JSON value, with \
             no other text, that is valid against this JSON Schema:\n{}",
            self.schema
        )
    }
}

/// The error a task ends with when its answer did not match.
pub fn violation(errors: &[String]) -> TaskError {
    TaskError(format!("{SCHEMA_VIOLATION}: the answer does not match metadata.output_schema: {}", errors.join("; ")))
}

/// The task result of a valid answer: the object itself, or `{"output": v}`
/// for a value that is not an object.
pub fn as_result(value: Value) -> JsonObject {
    match value {
        Value::Object(object) => object,
        other => JsonObject::from_iter([("output".to_owned(), other)]),
    }
}

/// The text inside a Markdown code fence, if the whole answer is one.
fn unfenced(text: &str) -> &str {
    let trimmed = text.trim();
    let Some(inner) = trimmed.strip_prefix("```").and_then(|rest| rest.strip_suffix("```")) else {
        return trimmed;
    };
    // Drop the info string (`json`) on the opening line.
    inner.split_once('\n').map_or(inner, |(_, body)| body).trim()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(schema: Value) -> TaskDefinition {
        let mut task = TaskDefinition::new("t", "i");
        task.metadata.insert(OUTPUT_SCHEMA_KEY.into(), schema);
        task
    }

    #[test]
    fn a_matching_answer_is_parsed_and_a_wrong_one_lists_its_errors() {
        let schema = json!({"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}});
        let schema = OutputSchema::of(&task(schema)).unwrap().unwrap();
        assert_eq!(schema.check("```json\n{\"n\": 3}\n```"), Ok(json!({"n": 3})));
        let errors = schema.check(r#"{"n": "three"}"#).unwrap_err();
        assert_eq!(errors.len(), 1);
        assert!(errors[0].starts_with("/n: "), "{errors:?}");
        assert!(schema.check("three").unwrap_err()[0].starts_with("the answer is not one JSON value"));
        assert_eq!(as_result(json!([1])), JsonObject::from_iter([("output".to_owned(), json!([1]))]));
    }

    #[test]
    fn a_schema_that_does_not_compile_fails_naming_it_and_none_is_none() {
        let error = OutputSchema::of(&task(json!({"type": 12}))).unwrap_err();
        assert!(error.0.starts_with(SCHEMA_INVALID), "{error}");
        assert!(OutputSchema::of(&TaskDefinition::new("t", "i")).unwrap().is_none());
        // A remote reference is not fetched.
        let remote = json!({"$ref": "http://127.0.0.1:9/schema.json"});
        assert!(OutputSchema::of(&task(remote)).is_err());
    }
}
