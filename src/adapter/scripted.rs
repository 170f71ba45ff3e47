//! The built-in scripted adapter: deterministic, no network, no keys.
//!
//! With no script it answers as the reference host does:
//! `{"summary": "Completed task: <name>", "instruction": …}`. With a script in
//! `task.metadata.script` it runs the steps of the contract in DESIGN.md, each
//! one step toward `max_steps`. A malformed script fails its task only.
//! With `task.metadata.output_schema`, the result is checked as a model's
//! answer is: a `return` that does not match gets one repair (the script's
//! next `return`), then the task fails `output_schema_violation`.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

use super::output_schema::{violation, OutputSchema, SCHEMA_VIOLATION};
use super::person_gate;
use super::pricing::{call_usage, Pricing};
use crate::ids::SubagentId;
use crate::protocol::text::push_string;
use crate::protocol::wire::{JsonObject, RawObject, SubagentConfig, SubagentMessagePayload, TaskDefinition, Usage};
use crate::runtime::people::{CallSubject, PersonLedger};
use crate::runtime::task::{AdapterRouter, AgentAdapter, TaskContext, TaskError, TaskFuture};

/// The scripted adapter (the default route).
#[derive(Debug, Default, Clone)]
pub struct ScriptedAdapter {
    // The route's price, which its `use_tokens` steps' tokens cost: a
    // scripted route can stand in for a priced model.
    pricing: Option<Arc<Pricing>>,
}

impl ScriptedAdapter {
    /// A scripted adapter whose `use_tokens` steps cost what `pricing` says.
    pub fn priced(pricing: Pricing) -> Self {
        Self { pricing: Some(Arc::new(pricing)) }
    }
}

/// One step of a script: an object with exactly one key.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum Step {
    SleepMs(u64),
    Progress(String),
    Fail(String),
    Return(Value),
    Send(SendStep),
    WaitMessage(WaitStep),
    Spawn(Box<SpawnStep>),
    AwaitChildren(NoArgs),
    UseTokens(TokensStep),
    AskUser(AskUserStep),
    CallTool(CallToolStep),
}

/// `{"ask_user": {"question": TEXT, "choices": [..]}}`: asks the session's
/// person (event `input_requested`); the answer goes into the result's
/// `answers`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AskUserStep {
    question: String,
    #[serde(default)]
    choices: Vec<String>,
}

/// `{"call_tool": {"tool": NAME, "server": NAME, "arguments": {..}}}`: a
/// pretend call of an unannotated tool, which the approval rules see as
/// any call (event `approval_requested` when one covers it); whether it
/// was made goes into the result's `calls`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CallToolStep {
    tool: String,
    #[serde(default)]
    server: Option<String>,
    #[serde(default)]
    arguments: Value,
}

/// `{"use_tokens": {"input_tokens": N, "output_tokens": M,
/// "cached_input_tokens": C}}`: spends tokens as a model call would (usage,
/// budgets and metrics see them, and a priced route's cost: `C` of the
/// input tokens at its cached price).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokensStep {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    cached_input_tokens: u64,
}

#[derive(Debug, Deserialize)]
struct SendStep {
    to: String,
    content: Value,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WaitStep {
    #[serde(default)]
    timeout_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct SpawnStep {
    agent: SubagentConfig,
    task: TaskDefinition,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

/// Parses `metadata.script`; `Ok(None)` when there is none.
fn parse_script(metadata: &JsonObject) -> Result<Option<Vec<Step>>, TaskError> {
    let Some(script) = metadata.get("script") else {
        return Ok(None);
    };
    serde_path_to_error::deserialize(script)
        .map(Some)
        .map_err(|err| TaskError(format!("malformed script at `script.{}`: {}", err.path(), err.inner())))
}

/// The result of a task without a script, and what a script's steps add
/// to: `{"instruction": …, "summary": "Completed task: <name>"}`. Fields
/// are in key order, as a `Value` object writes them.
#[derive(Serialize)]
struct DefaultResult<'a> {
    instruction: &'a str,
    summary: String,
}

impl<'a> DefaultResult<'a> {
    fn of(ctx: &'a TaskContext) -> Self {
        const DONE: &str = "Completed task: ";
        // Made to its exact length, so the memory keeps it without a copy.
        let mut summary = String::with_capacity(DONE.len() + ctx.task.name.len());
        summary.push_str(DONE);
        summary.push_str(&ctx.task.name);
        Self { instruction: &ctx.task.instruction, summary }
    }

    /// The result's text, as serde writes this struct (its keys are
    /// constants, its strings escaped as serde escapes them), without
    /// going through serde's serializer: the default task is the one every
    /// benchmark runs, and serde's byte-by-byte escaping was most of its
    /// result's cost.
    fn to_raw(&self) -> RawObject {
        const KEYS: usize = r#"{"instruction":"","summary":""}"#.len();
        let mut text = String::with_capacity(KEYS + self.instruction.len() + self.summary.len());
        text.push_str(r#"{"instruction":"#);
        push_string(&mut text, self.instruction);
        text.push_str(r#","summary":"#);
        push_string(&mut text, &self.summary);
        text.push('}');
        RawObject::from_host_text(text)
    }
}

impl AgentAdapter for ScriptedAdapter {
    fn name(&self) -> &str {
        "scripted"
    }

    fn resumes(&self) -> bool {
        true
    }

    fn run(&self, ctx: TaskContext) -> TaskFuture {
        if ctx.resume_point().is_none() && !ctx.task.metadata.contains_key("script") {
            // The default task never waits: it ends on its first poll, as
            // it would below (the script is polled first), without the
            // script's future (kilobytes, moved whole as the task starts)
            // or the cancel branch it would never take.
            return Box::pin(async move { run_default(&ctx) });
        }
        let pricing = self.pricing.clone();
        Box::pin(async move {
            tokio::select! {
                // The script first: most steps never wait, and then the
                // cancel token is never polled (nor its waiter registered).
                biased;
                outcome = run_script(&ctx, pricing.as_deref()) => outcome,
                _ = ctx.cancel.cancelled() => Err(TaskError::new("cancelled")),
            }
        })
    }
}

/// What a script has gathered so far: its checkpoint state.
#[derive(Debug, Default, serde::Serialize, Deserialize)]
struct Gathered {
    messages: Vec<Value>,
    children: Option<JsonObject>,
    // Tokens its `use_tokens` steps spent: a resumed script counts them again.
    #[serde(default)]
    tokens: Usage,
    // What its `ask_user` and `call_tool` steps were answered, and what the
    // step in progress asked its person.
    #[serde(default)]
    answers: Vec<Value>,
    #[serde(default)]
    calls: Vec<Value>,
    #[serde(default)]
    person: PersonLedger,
}

/// A first run of a task without a script.
fn run_default(ctx: &TaskContext) -> Result<RawObject, TaskError> {
    ctx.memory.say("user", &ctx.task.instruction);
    let schema = OutputSchema::of(&ctx.task)?;
    finish_default(ctx, schema.as_ref())
}

/// The one step of a task without a script: its default result, checked
/// against its output schema.
fn finish_default(ctx: &TaskContext, schema: Option<&OutputSchema>) -> Result<RawObject, TaskError> {
    ctx.step()?;
    let result = DefaultResult::of(ctx);
    if let Some(schema) = schema {
        let value = serde_json::to_value(&result).unwrap_or(Value::Null);
        schema.check_value(&value).map_err(|errors| violation(&errors))?;
    }
    // Written straight from the struct, with no `Value` tree between.
    let encoded = result.to_raw();
    ctx.memory.say_string("assistant", result.summary);
    Ok(encoded)
}

async fn run_script(ctx: &TaskContext, pricing: Option<&Pricing>) -> Result<RawObject, TaskError> {
    // A resumed script goes on after its last completed step, with what it
    // had gathered; its memory was stored with that checkpoint.
    let (first, gathered) = match ctx.resume_point() {
        Some(checkpoint) => {
            let gathered: Gathered = serde_json::from_value(checkpoint.state.clone()).unwrap_or_default();
            ctx.record_usage(gathered.tokens)?;
            (checkpoint.step as usize, gathered)
        }
        None => {
            ctx.memory.say("user", &ctx.task.instruction);
            (0, Gathered::default())
        }
    };
    let schema = OutputSchema::of(&ctx.task)?;
    let Some(steps) = parse_script(&ctx.task.metadata)? else {
        // A resumed task without a script.
        return finish_default(ctx, schema.as_ref());
    };
    // With a schema, a `return` that does not match is the one wrong answer
    // a task may give: the script goes on (its next `return` is the repair);
    // a second one, or none after it, fails the task.
    let mut rejected: Option<Vec<String>> = None;
    let Gathered { mut messages, mut children, mut tokens, mut answers, mut calls, mut person } = gathered;
    let mut returned: Option<JsonObject> = None;
    for (index, step) in steps.into_iter().enumerate().skip(first) {
        ctx.step()?;
        // How a step that asks a person checkpoints what it asked (a closure
        // of references: nothing is built unless it is called).
        let keep = async |ledger: &PersonLedger| {
            let state = json!({ "messages": messages, "children": children, "tokens": tokens,
                "answers": answers, "calls": calls, "person": ledger });
            keep_step(ctx, index, state).await;
        };
        match step {
            Step::SleepMs(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
            Step::Progress(text) => ctx.progress(text),
            Step::Fail(text) => return Err(TaskError(text)),
            Step::Return(value) => {
                if let Some(Err(errors)) = schema.as_ref().map(|schema| schema.check_value(&value)) {
                    if rejected.is_some() {
                        return Err(violation(&errors));
                    }
                    ctx.progress(format!("{SCHEMA_VIOLATION}: {}; repairing", errors.join("; ")));
                    rejected = Some(errors);
                    continue;
                }
                rejected = None;
                returned = Some(match value {
                    Value::Object(object) => object,
                    other => {
                        let mut object = JsonObject::new();
                        object.insert("value".into(), other);
                        object
                    }
                });
                break;
            }
            Step::Send(send) => {
                let to = if send.to == "parent" {
                    ctx.parent_id.ok_or_else(|| {
                        TaskError(format!("step {index}: `parent` named, but this subagent is top level"))
                    })?
                } else {
                    SubagentId::parse(&send.to)
                        .ok_or_else(|| TaskError(format!("step {index}: `{}` is not a subagent id", send.to)))?
                };
                ctx.message(to, SubagentMessagePayload { kind: "message".into(), content: send.content })
                    .await
                    .map_err(|err| TaskError(format!("step {index}: send failed: {err}")))?;
            }
            Step::WaitMessage(wait) => {
                if let Some(message) = ctx.next_message(wait.timeout_ms.map(Duration::from_millis)).await {
                    messages.push(json!({
                        "from": message.from,
                        "type": message.payload.kind,
                        "content": message.payload.content,
                    }));
                }
            }
            Step::Spawn(spawn) => {
                // Keyed by the step: a resumed script does not spawn it twice.
                let key = ctx.idempotency_key(&format!("step{index}"));
                ctx.spawn_once(spawn.agent, Some(spawn.task), Some(key))
                    .await
                    .map_err(|err| TaskError(format!("step {index}: spawn failed: {err}")))?;
            }
            Step::UseTokens(spent) => {
                let spent = call_usage(pricing, spent.input_tokens, spent.cached_input_tokens, spent.output_tokens);
                tokens.input_tokens = tokens.input_tokens.saturating_add(spent.input_tokens);
                tokens.output_tokens = tokens.output_tokens.saturating_add(spent.output_tokens);
                tokens.cost_usd = match (tokens.cost_usd, spent.cost_usd) {
                    (Some(before), Some(now)) => Some(before.saturating_add(now)),
                    (before, now) => before.or(now),
                };
                ctx.record_usage(spent)?;
            }
            Step::AskUser(ask) => {
                let arguments = json!({ "question": ask.question, "choices": ask.choices }).to_string();
                let call_id = format!("step{index}");
                // Boxed: its state would otherwise grow every script's future
                // (moved whole at each task's start) for a step few scripts have.
                let answer = Box::pin(person_gate::ask_user(ctx, &call_id, &arguments, &mut person, keep)).await;
                person.forget(&call_id);
                if ctx.cancel.is_cancelled() {
                    return Err(TaskError::new("cancelled"));
                }
                answers.push(answer);
            }
            Step::CallTool(call) => {
                let call_id = format!("step{index}");
                let qualified = match &call.server {
                    Some(server) => crate::tools::qualified_name(server, &call.tool),
                    None => call.tool.clone(),
                };
                // A pretend call still shows in the trace, as a real one would.
                let _span = crate::runtime::trace::execute_tool(ctx.span(), &qualified, &call_id);
                let subject = CallSubject {
                    tool: &call.tool,
                    qualified: &qualified,
                    server: call.server.as_deref(),
                    hints: crate::tools::Hints::default(),
                };
                let passage =
                    Box::pin(person_gate::approve(ctx, subject, &call_id, &call.arguments, &mut person, keep)).await;
                person.forget(&call_id);
                if ctx.cancel.is_cancelled() {
                    return Err(TaskError::new("cancelled"));
                }
                let outcome = match passage {
                    person_gate::Passage::Free => json!({ "tool": qualified, "made": true }),
                    person_gate::Passage::Approved { .. } => {
                        json!({ "tool": qualified, "made": true, "approved": true })
                    }
                    person_gate::Passage::Refused(answer) => {
                        json!({ "tool": qualified, "made": false, "answer": answer })
                    }
                };
                calls.push(outcome);
            }
            Step::AwaitChildren(NoArgs {}) => {
                let mut results = children.take().unwrap_or_default();
                for child in ctx.children().await? {
                    let answer = ctx.await_result(child).await?;
                    results.insert(child.to_string(), serde_json::to_value(&answer).unwrap_or(Value::Null));
                }
                children = Some(results);
            }
        }
        if ctx.is_durable() {
            let state = Gathered { messages, children, tokens, answers, calls, person };
            let step = u32::try_from(index + 1).unwrap_or(u32::MAX);
            ctx.checkpoint(step, serde_json::to_value(&state).unwrap_or(Value::Null));
            Gathered { messages, children, tokens, answers, calls, person } = state;
        }
    }
    if let Some(errors) = rejected {
        return Err(violation(&errors));
    }
    // (Encoded and read back: this path is not the benchmarks' one.)
    let mut result = returned.unwrap_or_else(|| RawObject::encode(&DefaultResult::of(ctx)).to_object());
    if !messages.is_empty() {
        result.entry("messages").or_insert(Value::Array(messages));
    }
    if let Some(children) = children {
        result.entry("children").or_insert(Value::Object(children));
    }
    if !answers.is_empty() {
        result.entry("answers").or_insert(Value::Array(answers));
    }
    if !calls.is_empty() {
        result.entry("calls").or_insert(Value::Array(calls));
    }
    match result.get("summary") {
        Some(Value::String(summary)) => ctx.memory.say("assistant", summary),
        Some(summary) => ctx.memory.push(json!({ "role": "assistant", "content": summary })),
        None => {}
    }
    Ok(RawObject::from(result))
}

/// Checkpoints a step in progress (`index` steps done before it) with
/// `state`, and waits until it is committed: what its person was asked
/// must survive a crash.
async fn keep_step(ctx: &TaskContext, index: usize, state: Value) {
    if ctx.is_durable() {
        ctx.checkpoint(u32::try_from(index).unwrap_or(u32::MAX), state);
        ctx.flush_checkpoints().await;
    }
}

impl Default for AdapterRouter {
    /// Every model served by the scripted adapter: the host's default table.
    fn default() -> Self {
        Self::new(Arc::new(ScriptedAdapter::default()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_result_is_written_as_serde_writes_it() {
        for (instruction, name) in [("do the unit of work", "unit"), ("a \"quoted\"\ttab \\ é", "n\u{1}"), ("", "")] {
            let result = DefaultResult { instruction, summary: format!("Completed task: {name}") };
            assert_eq!(result.to_raw().text(), RawObject::encode(&result).text());
        }
    }
}
