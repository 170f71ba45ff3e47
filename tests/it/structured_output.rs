//! Structured output (issue 31, item 4): a task's `metadata.output_schema`
//! sent as `response_format` (a route with `structured_output = true`) or
//! in the prompt; the answer checked, one repair round with the errors
//! shown to the model, then `FAILED` with an `output_schema_violation`
//! error listing them. The openai adapter against the fake server, and the
//! scripted adapter, which checks the schema the same way.

use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use subagent_host::config::FileConfig;
use subagent_host::protocol::wire::*;
use subagent_host::NullSink;
use subagent_host::{Host, HostConfig, Tree};

use crate::common::TreeOps;
use crate::fake_openai::*;

const GUARD: Duration = Duration::from_secs(30);

fn schema() -> Value {
    json!({
        "type": "object",
        "required": ["city", "population"],
        "properties": { "city": { "type": "string" }, "population": { "type": "integer", "minimum": 0 } },
        "additionalProperties": false,
    })
}

fn host(server: &FakeServer, structured: bool) -> Host {
    let text = format!(
        "[[routes]]\nmodel = \"fake-*\"\nadapter = \"openai\"\nbase_url = \"{}\"\nstructured_output = {structured}\n",
        server.base_url
    );
    let router = subagent_host::adapter::router(&FileConfig::parse(&text).expect("config")).expect("router");
    Host::new(HostConfig { router, ..Default::default() })
}

async fn run(session: &Tree, model: &str, metadata: Value) -> AwaitResponse {
    let request = SpawnRequest { agent: SubagentConfig::new("s", model), parent_agent_id: None, root_agent_id: None };
    let id = session.spawn(request).await.expect("spawn").subagent_id;
    let mut task = TaskDefinition::new("task", "the biggest city");
    task.metadata = metadata.as_object().cloned().unwrap_or_default();
    assert!(session.delegate(id, task).await.expect("delegate").accepted);
    tokio::time::timeout(GUARD, session.await_result(id)).await.expect("ends").expect("await")
}

/// A server answering `answers` in turn.
fn answering(answers: &'static [&'static str]) -> FakeServer {
    FakeServer::start(move |_, index| answer(answers[index.min(answers.len() - 1)]))
}

#[actix_rt::test]
async fn a_valid_answer_is_the_parsed_object_and_the_schema_goes_as_response_format() {
    let server = answering(&[r#"{"city": "Tokyo", "population": 37400068}"#]);
    let session = host(&server, true).open_tree(Arc::new(NullSink));
    let done = run(&session, "fake-m", json!({ "output_schema": schema() })).await;
    assert_eq!(done.status, SubagentStatus::Completed, "{:?}", done.error);
    assert_eq!(Value::Object(done.result.unwrap().to_object()), json!({"city": "Tokyo", "population": 37400068}));
    let body = &server.requests()[0].body;
    assert_eq!(
        body["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "task_output", "schema": schema(), "strict": false}})
    );
    assert_eq!(messages(body).iter().filter(|m| m["role"] == "system").count(), 1, "not in the prompt too");
}

#[actix_rt::test]
async fn an_invalid_answer_gets_one_repair_round_showing_the_errors_and_its_fix_is_the_result() {
    let server = answering(&[
        r#"{"city": "Tokyo", "population": "37 million"}"#,
        r#"{"city": "Tokyo", "population": 37400068}"#,
    ]);
    // A route without structured_output: the schema goes in the prompt.
    let session = host(&server, false).open_tree(Arc::new(NullSink));
    let done = run(&session, "fake-m", json!({ "output_schema": schema() })).await;
    assert_eq!(done.status, SubagentStatus::Completed, "{:?}", done.error);
    assert_eq!(Value::Object(done.result.unwrap().to_object()), json!({"city": "Tokyo", "population": 37400068}));
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "one repair round");
    let first = &requests[0].body;
    assert!(first.get("response_format").is_none());
    assert!(
        messages(first)[1]["content"].as_str().unwrap().contains(&schema().to_string()),
        "the schema in the prompt"
    );
    let repair = messages(&requests[1].body).last().cloned().unwrap();
    assert_eq!(repair["role"], "user");
    assert_eq!(
        repair["content"],
        "Your answer is not valid against the required JSON Schema:\n- /population: \"37 million\" is not of type \
         \"integer\"\nAnswer again with only one JSON value that is valid against it."
    );
}

#[actix_rt::test]
async fn a_second_invalid_answer_fails_the_task_with_a_typed_error_listing_the_errors() {
    let server = answering(&["Tokyo, about 37 million", r#"{"city": 7, "country": "JP"}"#]);
    let session = host(&server, true).open_tree(Arc::new(NullSink));
    let done = run(&session, "fake-m", json!({ "output_schema": schema() })).await;
    assert_eq!(done.status, SubagentStatus::Failed);
    assert_eq!(
        done.error.as_deref().unwrap(),
        "output_schema_violation: the answer does not match metadata.output_schema: /: \"population\" is a \
         required property; /city: 7 is not of type \"string\"; /: Additional properties are not allowed \
         ('country' was unexpected)"
    );
    assert_eq!(server.requests().len(), 2);
    // A schema that is not one fails before any call.
    let done = run(&session, "fake-m", json!({ "output_schema": { "type": "nope" } })).await;
    assert_eq!(done.status, SubagentStatus::Failed);
    assert!(done.error.unwrap().starts_with("output_schema_invalid: metadata.output_schema: "));
    assert_eq!(server.requests().len(), 2);
}

/// The scripted adapter checks the schema too: a matching `return` is the
/// result; a wrong one is repaired by the script's next `return`; a second
/// wrong one (or none after it) fails the task as a model's would.
#[actix_rt::test]
async fn the_scripted_adapter_checks_output_schema_valid_repaired_and_failed() {
    let host = Host::new(HostConfig::default());
    let session = host.open_tree(Arc::new(NullSink));
    let good = json!({"return": {"city": "Lagos", "population": 15_000_000}});
    let bad = json!({"return": {"city": "Lagos"}});
    let script = |steps: Vec<Value>| json!({ "output_schema": schema(), "script": steps });

    let valid = run(&session, "scripted", script(vec![good.clone()])).await;
    assert_eq!(valid.status, SubagentStatus::Completed, "{:?}", valid.error);
    assert_eq!(Value::Object(valid.result.unwrap().to_object()), good["return"]);

    let repaired = run(&session, "scripted", script(vec![bad.clone(), good.clone()])).await;
    assert_eq!(repaired.status, SubagentStatus::Completed, "{:?}", repaired.error);
    assert_eq!(Value::Object(repaired.result.unwrap().to_object()), good["return"]);

    let failed = run(&session, "scripted", script(vec![bad.clone(), bad.clone()])).await;
    assert_eq!(failed.status, SubagentStatus::Failed);
    let expected = "output_schema_violation: the answer does not match metadata.output_schema: /: \"population\" \
                    is a required property";
    assert_eq!(failed.error.as_deref(), Some(expected));
    let unrepaired = run(&session, "scripted", script(vec![bad])).await;
    assert_eq!(unrepaired.error.as_deref(), Some(expected));
    // Without a script the default result is checked.
    let default = run(&session, "scripted", json!({ "output_schema": schema() })).await;
    assert_eq!(default.status, SubagentStatus::Failed);
    assert!(default.error.unwrap().starts_with("output_schema_violation"));
}
