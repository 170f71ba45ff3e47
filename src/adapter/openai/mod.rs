//! The OpenAI-compatible chat-completions adapter: a tool-calling loop in
//! which each model call is one step and the tools are the orchestration
//! verbs of the subagents capability.
//!
//! A task's conversation is: a system prompt (the config's `system_prompt`,
//! its `role` and the task's success criteria), the subagent's memory (so a
//! `shared` or `snapshot` child sees its parent's conversation and an
//! `isolated` one does not), then the task's instruction. Each step first
//! hands the model any mailbox messages that arrived, then calls
//! `POST {base_url}/chat/completions`; tool calls are carried out and
//! answered, and a reply without tool calls ends the task with
//! `{"summary", "steps", "usage"}`. Everything said is appended to memory.
//!
//! - `client`: the HTTP call, retries (429, 5xx) and reply parsing.
//! - [`schemas`]: the tools a model may be offered, their names and JSON
//!   schemas.
//! - [`policy`]: which of them a subagent may call: the host's
//!   [`ToolPolicy`] and the `tool_scope` filter.
//! - `dispatch`: carrying out one tool call against the runtime.
//!
//! After every model reply and every tool answer the task checkpoints its
//! conversation (when the session is stored). A task resumed after a
//! restart goes on from there: the tool calls of the reply in flight that
//! were not answered are carried out (a `spawn_subagent` keyed by its call
//! id, so no child is spawned twice), and only then is the model called
//! again.
//!
//! Cancellation races every call: a cancel stops the task at once, and
//! dropping the task's future (terminate, timeout) drops the in-flight
//! request, which closes its connection. Without the `tls` cargo feature only
//! `http://` endpoints work.

mod client;
mod dispatch;
pub mod policy;
pub mod schemas;
mod stream;
#[cfg(feature = "tls")]
mod tls;

use serde_json::{json, Value};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::metrics::metrics;
use crate::protocol::wire::{JsonObject, RawObject, Usage as TokenUsage};
use crate::runtime::memory::InboxMessage;
use crate::runtime::task::{AgentAdapter, TaskContext, TaskError, TaskFuture};
use crate::runtime::trace;
use client::{ChatClient, Usage};

pub use client::RetryPolicy;
pub use policy::{allowed_tools, ToolPolicy};
pub use schemas::{tool_schema, TOOL_NAMES};

/// Where the adapter sends its calls, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenAiConfig {
    /// The API root, e.g. `http://127.0.0.1:8080/v1`; `/chat/completions` is appended.
    pub base_url: String,
    /// The environment variable holding the API key (read at each task, sent
    /// as a bearer token, never logged); `None` sends no key (local servers).
    pub api_key_env: Option<String>,
    /// The model name sent upstream; `None` sends the subagent's own `model`.
    pub upstream_model: Option<String>,
    /// Retries of 429, 5xx and transport errors.
    pub retry: RetryPolicy,
    /// Which tools the `restricted` scope (and a top-level subagent) may call.
    pub policy: ToolPolicy,
    /// The `model` of the config route this adapter serves, as written (a
    /// glob stays a glob): the `model` label of its token metrics, so the
    /// label takes only configured values. `None`: `unrouted`.
    pub route_model: Option<String>,
    /// Whether its spans record message content and tool arguments and
    /// results (`[telemetry] record_content`).
    pub record_content: bool,
    /// Ask for streamed replies and forward their text as `progress` events.
    pub stream: bool,
    /// With `stream`: at most one `progress` event per this long.
    pub progress_every: Duration,
    /// PEM certificates trusted besides the public roots (an https
    /// `base_url` behind a private CA); needs the `tls` feature.
    pub ca_file: Option<std::path::PathBuf>,
}

impl OpenAiConfig {
    /// A config for `base_url` with no key, the subagent's model name, and
    /// the default retry and tool policies.
    pub fn new(base_url: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            api_key_env: None,
            upstream_model: None,
            retry: RetryPolicy::default(),
            policy: ToolPolicy::default(),
            route_model: None,
            record_content: false,
            stream: false,
            progress_every: Duration::from_millis(100),
            ca_file: None,
        }
    }
}

/// Runs tasks against an OpenAI-compatible chat-completions server.
#[derive(Debug, Clone)]
pub struct OpenAiAdapter {
    config: Arc<OpenAiConfig>,
    // The TLS client config of a route with `ca_file`.
    #[cfg(feature = "tls")]
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl OpenAiAdapter {
    /// An adapter for `config`; fails when the base URL is not `http(s)://`,
    /// or is `https://` in a build without the `tls` feature.
    pub fn new(config: OpenAiConfig) -> Result<Self, String> {
        let url = config.base_url.as_str();
        if url.starts_with("https://") {
            if !cfg!(feature = "tls") {
                return Err(format!(
                    "base_url `{url}` is https, but this build has no TLS (rebuild with `--features tls`)"
                ));
            }
        } else if !url.starts_with("http://") {
            return Err(format!("base_url `{url}` must start with http:// or https://"));
        }
        #[cfg(feature = "tls")]
        let tls = config.ca_file.as_deref().map(tls::with_extra_ca).transpose()?;
        #[cfg(not(feature = "tls"))]
        if config.ca_file.is_some() {
            return Err("ca_file needs TLS, which this build has not (rebuild with `--features tls`)".into());
        }
        Ok(Self {
            config: Arc::new(config),
            #[cfg(feature = "tls")]
            tls,
        })
    }

    // The TLS client config its calls use (`None`: awc's, the public roots).
    fn tls(&self) -> client::Tls {
        #[cfg(feature = "tls")]
        return self.tls.clone();
        #[cfg(not(feature = "tls"))]
        return None;
    }

    /// The config in use.
    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }
}

impl AgentAdapter for OpenAiAdapter {
    fn name(&self) -> &str {
        "openai"
    }

    fn resumes(&self) -> bool {
        true
    }

    fn run(&self, ctx: TaskContext) -> TaskFuture {
        let (config, tls) = (self.config.clone(), self.tls());
        Box::pin(async move {
            let cancel = ctx.cancel.clone();
            tokio::select! {
                biased;
                _ = cancel.cancelled() => Err(TaskError::new("cancelled")),
                outcome = conversation(&config, tls, &ctx) => outcome.map(RawObject::from),
            }
        })
    }
}

/// The tool-calling loop of one task.
async fn conversation(config: &OpenAiConfig, tls: client::Tls, ctx: &TaskContext) -> Result<JsonObject, TaskError> {
    let api_key = match &config.api_key_env {
        Some(var) => match std::env::var(var) {
            Ok(key) if !key.is_empty() => Some(key),
            _ => return Err(TaskError(format!("the API key variable `{var}` (api_key_env) is not set"))),
        },
        None => None,
    };
    let client = ChatClient::new(&config.base_url, api_key, config.retry.clone(), tls);
    let allowed = allowed_tools(&ctx.config, &config.policy);
    let tool_definitions = Value::Array(schemas::definitions(&allowed));
    let model = config.upstream_model.clone().unwrap_or_else(|| ctx.config.model.clone());

    let say = |message: Value, messages: &mut Vec<Value>| {
        ctx.memory.push(message.clone());
        messages.push(message);
    };
    let (mut messages, mut usage) = match ctx.resume_point() {
        // Its memory was stored with the checkpoint: nothing is said twice.
        Some(checkpoint) => {
            let saved: Saved = serde_json::from_value(checkpoint.state.clone())
                .map_err(|err| TaskError(format!("the checkpoint cannot be read: {err}")))?;
            // Its subagent's stored usage counts up to its last task's end:
            // what this task used up to its checkpoint counts again.
            ctx.record_usage(TokenUsage {
                input_tokens: saved.usage.prompt_tokens,
                output_tokens: saved.usage.completion_tokens,
            })?;
            (saved.messages, saved.usage)
        }
        None => {
            let mut messages = vec![json!({ "role": "system", "content": system_prompt(ctx, !allowed.is_empty()) })];
            messages.extend(history(&ctx.memory.values()));
            say(json!({ "role": "user", "content": ctx.task.instruction }), &mut messages);
            (messages, Usage::default())
        }
    };
    // The tool calls of a reply that was in flight when the host stopped.
    for call in unanswered_calls(&messages) {
        let output = traced_call(ctx, config, &allowed, &call).await;
        say(json!({ "role": "tool", "tool_call_id": call.id, "content": output.to_string() }), &mut messages);
        save(ctx, &messages, usage);
    }
    loop {
        for message in ctx.mailbox.drain() {
            say(json!({ "role": "user", "content": inbox_text(&message) }), &mut messages);
        }
        let step = ctx.step()?;
        let mut body = json!({ "model": model, "messages": messages });
        if !allowed.is_empty() {
            body["tools"] = tool_definitions.clone();
        }
        let span = trace::chat(ctx.span(), "openai", &model);
        if config.record_content && !span.is_disabled() {
            span.record("gen_ai.input.messages", body["messages"].to_string());
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
            client.complete(&body, |note| ctx.progress(note), on_text).await
        };
        streamed.flush();
        metrics().model_call("openai", completion.is_ok(), started.elapsed());
        let completion = match completion {
            Ok(completion) => completion,
            Err(err) => {
                trace::chat_usage(&span, Err(&err.0));
                return Err(err);
            }
        };
        let used = TokenUsage {
            input_tokens: completion.usage.prompt_tokens,
            output_tokens: completion.usage.completion_tokens,
        };
        trace::chat_usage(&span, Ok(used));
        if config.record_content && !span.is_disabled() {
            span.record("gen_ai.output.messages", completion.assistant_message().to_string());
        }
        drop(span);
        metrics().tokens(config.route_model.as_deref().unwrap_or("unrouted"), used.input_tokens, used.output_tokens);
        ctx.record_usage(used)?;
        usage.add(completion.usage);
        say(completion.assistant_message(), &mut messages);
        save(ctx, &messages, usage);
        if completion.tool_calls.is_empty() {
            let mut result = JsonObject::new();
            result.insert("summary".into(), json!(completion.content.unwrap_or_default()));
            result.insert("steps".into(), json!(step));
            result.insert("usage".into(), usage.to_json());
            return Ok(result);
        }
        for call in &completion.tool_calls {
            ctx.progress(format!("step {step}: tool {}", call.name));
            let output = traced_call(ctx, config, &allowed, call).await;
            say(json!({ "role": "tool", "tool_call_id": call.id, "content": output.to_string() }), &mut messages);
            save(ctx, &messages, usage);
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

/// Carries out one tool call under its `execute_tool` span.
async fn traced_call(ctx: &TaskContext, config: &OpenAiConfig, allowed: &[&str], call: &client::ToolCall) -> Value {
    let span = trace::execute_tool(ctx.span(), &call.name, &call.id);
    if config.record_content && !span.is_disabled() {
        span.record("gen_ai.tool.call.arguments", call.arguments.as_str());
    }
    let output = dispatch::call(ctx, allowed, call).await;
    if config.record_content && !span.is_disabled() {
        span.record("gen_ai.tool.call.result", output.to_string());
    }
    output
}

/// A conversation's checkpoint.
#[derive(serde::Serialize, serde::Deserialize)]
struct Saved {
    messages: Vec<Value>,
    usage: Usage,
}

/// Checkpoints the conversation so far (when the session is stored).
fn save(ctx: &TaskContext, messages: &[Value], usage: Usage) {
    if ctx.is_durable() {
        let state = json!({ "messages": messages, "usage": usage });
        ctx.checkpoint(ctx.steps_taken(), state);
    }
}

/// The tool calls of the last assistant reply that no tool message answers.
fn unanswered_calls(messages: &[Value]) -> Vec<client::ToolCall> {
    let Some(last) = messages.iter().rposition(|m| m.get("role").and_then(Value::as_str) == Some("assistant")) else {
        return Vec::new();
    };
    let answered: HashSet<&str> = messages[last + 1..]
        .iter()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("tool"))
        .filter_map(|m| m.get("tool_call_id").and_then(Value::as_str))
        .collect();
    let calls = messages[last].get("tool_calls").and_then(Value::as_array).cloned().unwrap_or_default();
    calls
        .iter()
        .filter_map(|call| {
            let id = call.get("id")?.as_str()?;
            let function = call.get("function")?;
            Some(client::ToolCall {
                id: id.to_owned(),
                name: function.get("name")?.as_str()?.to_owned(),
                arguments: function.get("arguments").and_then(Value::as_str).unwrap_or("{}").to_owned(),
            })
        })
        .filter(|call| !answered.contains(call.id.as_str()))
        .collect()
}

/// The system prompt: the configured one (or a default), the role, the
/// success criteria.
fn system_prompt(ctx: &TaskContext, has_tools: bool) -> String {
    let mut text =
        ctx.config.system_prompt.clone().unwrap_or_else(|| {
            format!("You are `{}`, an agent that carries out the task it is given.", ctx.config.name)
        });
    if let Some(role) = &ctx.config.role {
        text.push_str(&format!("\n\nYour role: {role}"));
    }
    if !ctx.task.success_criteria.is_empty() {
        text.push_str("\n\nThe task is done when:");
        for criterion in &ctx.task.success_criteria {
            text.push_str(&format!("\n- {criterion}"));
        }
    }
    text.push_str(&format!("\n\nYour subagent id is {}.", ctx.subagent_id));
    if has_tools {
        text.push_str(" Use the tools to work with other subagents; when you are done, answer without calling a tool.");
    }
    text
}

/// A mailbox message as the model sees it.
fn inbox_text(message: &InboxMessage) -> String {
    let content = match &message.payload.content {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    format!("Message from {} (type {}): {content}", message.from, message.payload.kind)
}

/// A mailbox message as `read_mailbox` returns it.
pub(crate) fn inbox_json(message: &InboxMessage) -> Value {
    json!({ "from": message.from, "type": message.payload.kind, "content": message.payload.content })
}

fn text_of(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        None | Some(Value::Null) => String::new(),
        Some(other) => other.to_string(),
    }
}

/// Memory entries as chat messages a server accepts: plain user/assistant
/// text, and assistant tool calls only together with the answer to every one
/// of them (a `shared` memory may hold a parent's call still in progress, and
/// a full memory drops its oldest entries). Anything else is left out.
fn history(entries: &[Value]) -> Vec<Value> {
    let mut out = Vec::new();
    let mut used = vec![false; entries.len()];
    for index in 0..entries.len() {
        if used[index] {
            continue;
        }
        let entry = &entries[index];
        let content = text_of(entry.get("content"));
        match entry.get("role").and_then(Value::as_str) {
            Some("assistant") => {
                let calls = entry.get("tool_calls").and_then(Value::as_array).filter(|calls| !calls.is_empty());
                if let Some(calls) = calls {
                    let ids: Vec<&str> =
                        calls.iter().filter_map(|call| call.get("id").and_then(Value::as_str)).collect();
                    let mut answers = Vec::new();
                    let mut answered = HashSet::new();
                    for (later, candidate) in entries.iter().enumerate().skip(index + 1) {
                        let is_tool = candidate.get("role").and_then(Value::as_str) == Some("tool");
                        let id = candidate.get("tool_call_id").and_then(Value::as_str);
                        if let (true, Some(id)) = (is_tool, id) {
                            if ids.contains(&id) && answered.insert(id) {
                                answers.push(later);
                            }
                        }
                    }
                    if ids.len() == calls.len() && answered.len() == ids.len() {
                        out.push(json!({ "role": "assistant", "content": entry.get("content").cloned().unwrap_or(Value::Null), "tool_calls": calls }));
                        for later in answers {
                            used[later] = true;
                            let answer = &entries[later];
                            out.push(json!({
                                "role": "tool",
                                "tool_call_id": answer.get("tool_call_id").cloned().unwrap_or(Value::Null),
                                "content": text_of(answer.get("content")),
                            }));
                        }
                        continue;
                    }
                }
                if !content.is_empty() {
                    out.push(json!({ "role": "assistant", "content": content }));
                }
            }
            // Another agent's system prompt is context here, not an instruction.
            Some("user") | Some("system") if !content.is_empty() => {
                out.push(json!({ "role": "user", "content": content }));
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_keeps_complete_tool_groups_and_drops_the_rest() {
        let entries = vec![
            json!({"role": "user", "content": "do it"}),
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": "a", "type": "function", "function": {"name": "list_subagents", "arguments": "{}"}}]}),
            json!({"role": "user", "content": "interleaved child"}),
            json!({"role": "tool", "tool_call_id": "a", "content": "{}"}),
            json!({"role": "assistant", "content": "half", "tool_calls": [{"id": "b"}]}),
            json!({"role": "tool", "tool_call_id": "zzz", "content": "orphan"}),
            json!({"role": "assistant", "content": {"summary": 1}}),
            json!("not an object"),
            json!({"role": "weird", "content": "x"}),
        ];
        let out = history(&entries);
        let roles: Vec<&str> = out.iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["user", "assistant", "tool", "user", "assistant", "assistant"]);
        assert_eq!(out[4]["content"], "half");
        assert!(out[4].get("tool_calls").is_none());
        assert_eq!(out[5]["content"], r#"{"summary":1}"#);
    }
}
