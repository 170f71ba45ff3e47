//! The tool-calling loop of one task: the conversation built (or resumed
//! from its checkpoint), each model call a step, each tool call carried out
//! and answered, until a reply calls no tool.

use serde_json::{json, Value};
use std::time::{Duration, Instant};

use super::checkpoint::{unanswered_calls, Checkpoints, Saved};
use super::client::{self, ChatClient, Usage};
use super::offer::{Offer, FIND_TOOLS};
use super::openai_config::OpenAiConfig;
use super::policy::allowed_tools;
use super::prompt::{budget_reminder, history, inbox_text, system_prompt, ToolKinds};
use super::request::EncodedMessages;
use super::stuck::{StuckDetector, Verdict};
use super::{schemas, structured, tool_calls};
use crate::adapter::output_schema::OutputSchema;
use crate::adapter::person_gate::{self, Passage};
use crate::adapter::pricing::{call_usage, resumed_usage};
use crate::adapter::provider::Throttle;
use crate::adapter::toolbox::Toolbox;
use crate::metrics::metrics;
use crate::protocol::wire::{CostUsd, JsonObject};
use crate::runtime::people::{CallSubject, PersonLedger};
use crate::runtime::task::{TaskContext, TaskError};
use crate::runtime::trace;
use crate::runtime::usage::Resource;

/// The tool-calling loop of one task.
pub(super) async fn conversation(
    config: &OpenAiConfig,
    tls: client::Tls,
    ctx: &TaskContext,
) -> Result<JsonObject, TaskError> {
    let api_key = match &config.api_key_env {
        Some(var) => match std::env::var(var) {
            Ok(key) if !key.is_empty() => Some(key),
            _ => return Err(TaskError(format!("the API key variable `{var}` (api_key_env) is not set"))),
        },
        None => None,
    };
    let route = config.route_model.as_deref().unwrap_or(&ctx.config.model);
    let client = ChatClient::new(&config.base_url, route, api_key, config.retry.clone(), tls)
        .gated(config.gate.clone(), ctx.session_key())
        .timed(config.settings.request_timeout);
    let sampling = config.settings.for_subagent(&ctx.config)?;
    // The last call's prompt: the next one's is at least as long, and both
    // count toward a token budget (see the `max_tokens` cap below).
    let mut last_prompt = 0u64;
    let schema = OutputSchema::of(&ctx.task)?;
    let mut repaired = false;
    let allowed = allowed_tools(&ctx.config, &config.policy);
    let orchestration_definitions = schemas::definitions(&allowed);
    let toolbox = Toolbox::for_task(&config.tools, ctx).await;
    let model = config.upstream_model.clone().unwrap_or_else(|| ctx.config.model.clone());

    let say = |message: Value, messages: &mut Vec<Value>| {
        ctx.memory.push(message.clone());
        messages.push(message);
    };
    let checkpoints = Checkpoints::default();
    let mut stuck = StuckDetector::new(ctx.host.limits.max_repeated_tool_calls);
    // The MCP tools `find_tools` found, offered from the next call on when
    // the task has more tools than `[tools] max_offered`.
    let mut found = std::collections::BTreeSet::new();
    let mut encoded = EncodedMessages::default();
    let save = |messages: &[Value], usage: Usage, person: &PersonLedger| checkpoints.save(ctx, messages, usage, person);
    let (mut messages, mut usage, mut person) = match ctx.resume_point() {
        // Its memory was stored with the checkpoint: nothing is said twice.
        Some(checkpoint) => {
            let saved: Saved = serde_json::from_value(checkpoint.state.clone())
                .map_err(|err| TaskError(format!("the checkpoint cannot be read: {err}")))?;
            // Its subagent's stored usage counts up to its last task's end:
            // what this task used up to its checkpoint counts again.
            let before = &saved.usage;
            let (input, cached, output) = (before.prompt_tokens, before.cached_tokens, before.completion_tokens);
            ctx.record_usage(resumed_usage(config.pricing.as_ref(), input, cached, output))?;
            (saved.messages, saved.usage, saved.person)
        }
        None => {
            let kinds = ToolKinds {
                orchestration: allowed.iter().any(|name| *name != schemas::ASK_USER),
                mcp: !Offer::now(ctx, config, &allowed, &toolbox).mcp().is_empty(),
                ask_user: allowed.contains(&schemas::ASK_USER),
            };
            let mut messages = vec![json!({ "role": "system", "content": system_prompt(ctx, kinds) })];
            messages.extend(
                schema.as_ref().and_then(|schema| structured::prompt_message(schema, config.structured_output)),
            );
            let offered = Offer::now(ctx, config, &allowed, &toolbox).names();
            messages.extend(history(&ctx.memory.values(), &offered));
            say(json!({ "role": "user", "content": ctx.task.instruction }), &mut messages);
            (messages, Usage::default(), PersonLedger::default())
        }
    };
    // The tool calls of a reply that was in flight when the host stopped.
    for call in unanswered_calls(&messages) {
        let offer = Offer::now(ctx, config, &allowed, &toolbox);
        let persist = async |ledger: &PersonLedger| keep(ctx, &checkpoints, &messages, usage, ledger).await;
        let output = traced_call(ctx, config, &offer.names(), &toolbox, &call, true, &mut person, persist).await;
        say(tool_message(&call.id, output), &mut messages);
        person.forget(&call.id);
        save(&messages, usage, &person);
    }
    loop {
        // A budget spent by a tool call (or a cancel) stops the task before
        // its next model call goes out.
        if ctx.cancel.is_cancelled() {
            return Err(TaskError::new("cancelled"));
        }
        for message in ctx.mailbox.drain() {
            say(json!({ "role": "user", "content": inbox_text(&message) }), &mut messages);
        }
        let step = ctx.step()?;
        // The request's fields; its messages are added as text, each
        // encoded once (see `request`).
        let mut body = json!({ "model": model });
        // What the model may call now: an MCP server's list may have changed.
        let offer = Offer::now(ctx, config, &allowed, &toolbox);
        let definitions = offer.definitions(&orchestration_definitions, &found);
        if !definitions.is_empty() {
            body["tools"] = Value::Array(definitions);
        }
        if let Some(schema) = &schema {
            structured::shape_request(&mut body, schema, config.structured_output);
        }
        // A budgeted task's reply may use at most what its budget has left:
        // the server stops there, streamed or not.
        let cap = ctx.usage.remaining(Resource::Tokens).map(|left| left.saturating_sub(last_prompt));
        // And a dollar budget, at the route's price, likewise.
        let cost_cap = config
            .pricing
            .as_ref()
            .zip(ctx.usage.remaining(Resource::Cost))
            .and_then(|(pricing, left)| pricing.output_cap(CostUsd::from_nanos(left), last_prompt));
        let cap = match (cap, cost_cap) {
            (Some(tokens), Some(dollars)) => Some(tokens.min(dollars)),
            (tokens, dollars) => tokens.or(dollars),
        };
        let with_tools = body.get("tools").is_some();
        config.settings.shape(&mut body, &sampling, cap, with_tools);
        let span = trace::chat(ctx.span(), "openai", &model);
        if config.record_content && !span.is_disabled() {
            span.record("gen_ai.input.messages", serde_json::to_string(&messages).unwrap_or_default());
        }
        if config.stream {
            body["stream"] = json!(true);
            body["stream_options"] = json!({ "include_usage": true });
        }
        let started = Instant::now();
        let mut streamed = StreamProgress::new(ctx, config.progress_every);
        let completion = {
            let mut on_text = |text: &str| streamed.push(text);
            let on_text: Option<&mut dyn FnMut(&str)> = if config.stream { Some(&mut on_text) } else { None };
            let on_throttle = |wait: Throttle| {
                if let Some(gate) = &config.gate {
                    ctx.throttled(gate.name(), wait.position, wait.estimated_wait);
                }
            };
            let reminder = (ctx.host.limits.remind_budget && step > 1).then(|| budget_reminder(ctx, step));
            match encoded.body(&body, &messages, reminder.as_ref()) {
                Ok(payload) => client.complete(&body, payload, |note| ctx.progress(note), on_throttle, on_text).await,
                Err(err) => Err(err),
            }
        };
        streamed.flush();
        metrics().model_call("openai", completion.is_ok(), started.elapsed());
        let completion = match completion {
            Ok(completion) => completion,
            Err(err) => {
                trace::chat_ended(&span, Err(&err.0));
                return Err(err);
            }
        };
        let call = &completion.usage;
        let used = call_usage(config.pricing.as_ref(), call.prompt_tokens, call.cached_tokens, call.completion_tokens);
        let about = &completion.about;
        let reply = trace::ChatReply {
            usage: used,
            model: about.model.as_deref(),
            id: about.id.as_deref(),
            finish_reasons: &about.finish_reasons,
        };
        trace::chat_ended(&span, Ok(reply));
        if config.record_content && !span.is_disabled() {
            span.record("gen_ai.output.messages", completion.assistant_message().to_string());
        }
        drop(span);
        metrics().tokens(config.route_model.as_deref().unwrap_or("unrouted"), used.input_tokens, used.output_tokens);
        ctx.record_usage(used)?;
        usage.add(completion.usage);
        last_prompt = completion.usage.prompt_tokens;
        say(completion.assistant_message(), &mut messages);
        save(&messages, usage, &person);
        if let (true, Some(schema)) = (completion.tool_calls.is_empty(), &schema) {
            let text = completion.content.as_deref().unwrap_or_default();
            match structured::check(schema, text, &mut repaired)? {
                structured::Checked::Valid(result) => return Ok(result),
                structured::Checked::Repair(message) => {
                    say(message, &mut messages);
                    save(&messages, usage, &person);
                    continue;
                }
            }
        }
        if completion.tool_calls.is_empty() {
            let mut result = JsonObject::new();
            result.insert("summary".into(), json!(completion.content.unwrap_or_default()));
            result.insert("steps".into(), json!(step));
            result.insert("usage".into(), usage.to_json());
            return Ok(result);
        }
        let names = offer.names();
        for call in &completion.tool_calls {
            let output = match stuck.judge(call) {
                Verdict::Go if call.name == FIND_TOOLS && offer.narrowed() => {
                    let output = offer.find(&call.arguments, &mut found);
                    stuck.made(call, &output);
                    output
                }
                Verdict::Go => {
                    ctx.progress(format!("step {step}: tool {}", call.name));
                    let persist = async |ledger: &PersonLedger| keep(ctx, &checkpoints, &messages, usage, ledger).await;
                    let output = traced_call(ctx, config, &names, &toolbox, call, false, &mut person, persist).await;
                    stuck.made(call, &output);
                    output
                }
                Verdict::Refuse { pattern, answer } => {
                    ctx.stuck(pattern, &call.name, false);
                    answer
                }
                Verdict::Stuck { pattern, error } => {
                    ctx.stuck(pattern, &call.name, true);
                    return Err(TaskError(error));
                }
            };
            say(tool_message(&call.id, output), &mut messages);
            person.forget(&call.id);
            save(&messages, usage, &person);
        }
        // An MCP call's result is committed before the model sees it, so a
        // task resumed after a crash answers it from the store.
        if completion.tool_calls.iter().any(|call| !schemas::TOOL_NAMES.contains(&call.name.as_str())) {
            ctx.flush_checkpoints().await;
        }
    }
}

/// A streamed reply's text as `progress` events: at most one per `every`,
/// each with the text that arrived since the one before, so a fast model
/// cannot flood the outbox.
struct StreamProgress<'a> {
    ctx: &'a TaskContext,
    every: Duration,
    pending: String,
    last: Option<Instant>,
}

impl<'a> StreamProgress<'a> {
    fn new(ctx: &'a TaskContext, every: Duration) -> Self {
        Self { ctx, every, pending: String::new(), last: None }
    }

    fn push(&mut self, text: &str) {
        self.pending.push_str(text);
        if self.last.is_none_or(|last| last.elapsed() >= self.every) {
            self.flush();
        }
    }

    /// Sends what has gathered, if anything.
    fn flush(&mut self) {
        if !self.pending.is_empty() {
            self.ctx.progress(std::mem::take(&mut self.pending));
            self.last = Some(Instant::now());
        }
    }
}

/// A tool message answering call `id`: a text answer as it is, JSON as text.
fn tool_message(id: &str, output: Value) -> Value {
    let content = match output {
        Value::String(text) => text,
        other => other.to_string(),
    };
    json!({ "role": "tool", "tool_call_id": id, "content": content })
}

/// Checkpoints the conversation with what its person was asked or
/// answered, and waits until that is committed.
async fn keep(ctx: &TaskContext, checkpoints: &Checkpoints, messages: &[Value], usage: Usage, person: &PersonLedger) {
    checkpoints.save(ctx, messages, usage, person);
    ctx.flush_checkpoints().await;
}

/// Carries out one tool call under its `execute_tool` span; `resumed`: it
/// was in flight when the host stopped. A call the approval rules cover
/// waits for a person first (`person`, `persist`: see `Toolbox::call`).
#[allow(clippy::too_many_arguments)]
async fn traced_call(
    ctx: &TaskContext,
    config: &OpenAiConfig,
    allowed: &[String],
    toolbox: &Toolbox,
    call: &client::ToolCall,
    resumed: bool,
    person: &mut PersonLedger,
    persist: impl AsyncFnMut(&PersonLedger),
) -> Value {
    let span = trace::execute_tool(ctx.span(), &call.name, &call.id);
    if config.record_content && !span.is_disabled() {
        span.record("gen_ai.tool.call.arguments", call.arguments.as_str());
    }
    let output = if !allowed.contains(&call.name) {
        json!({ "error": format!("tool `{}` is not available to this agent", call.name) })
    } else if call.name == schemas::ASK_USER {
        person_gate::ask_user(ctx, &call.id, &call.arguments, person, persist).await
    } else if schemas::TOOL_NAMES.contains(&call.name.as_str()) {
        let shown: Value = serde_json::from_str(&call.arguments).unwrap_or_else(|_| json!(call.arguments));
        let subject =
            CallSubject { tool: &call.name, qualified: &call.name, server: None, hints: schemas::hints(&call.name) };
        match person_gate::approve(ctx, subject, &call.id, &shown, person, persist).await {
            Passage::Refused(answer) => answer,
            Passage::Free | Passage::Approved { .. } => tool_calls::call(ctx, allowed, call).await,
        }
    } else {
        let text = if call.arguments.trim().is_empty() { "{}" } else { call.arguments.as_str() };
        let arguments = serde_json::from_str(text).map_err(|err| format!("not JSON: {err}"));
        toolbox.call(ctx, &call.id, &call.name, arguments, resumed, person, persist).await
    };
    if config.record_content && !span.is_disabled() {
        span.record("gen_ai.tool.call.result", output.to_string());
    }
    if let Some(error) = output.get("error").and_then(Value::as_str) {
        trace::tool_failed(&span, error);
    }
    output
}
