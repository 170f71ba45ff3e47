//! The spans of the agent tree, in the OpenTelemetry GenAI conventions.
//!
//! Each task is one `invoke_agent {name}` span. A task delegated by another
//! task (a child spawned by its parent's task) is a child of that task's
//! span, so a trace *is* the subagent tree; a task the client delegates
//! starts a trace of its own. Adapters add `chat {model}` spans for model
//! calls and `execute_tool {tool}` spans for tool calls under their task's
//! span ([`chat`], [`execute_tool`]). The attributes are those of the
//! conventions' `invoke_agent`, `chat` and `execute_tool` spans (listed in
//! docs/observability.md); the provider is `gen_ai.provider.name`, the name
//! that replaced `gen_ai.system` in the conventions' 1.37 release.
//!
//! Spans are `tracing` spans, exported by whatever subscriber the process
//! installs (the binary's OTLP exporter). With none installed, no span is
//! built: one atomic load, and no field (the `format!`ed names) evaluated.
//! (`tracing`'s own macros would evaluate them for its `log` bridge, which a
//! dependency turns on.)

use tracing::field::Empty;
use tracing::Span;

use crate::ids::SubagentId;
use crate::protocol::wire::{SubagentConfig, Usage};

/// Whether spans are exported at all (a subscriber is installed).
fn tracing_on() -> bool {
    tracing::dispatcher::has_been_set()
}

/// The span of one task of subagent `id` in session `session`; `parent` is
/// the span of the task that delegated it, if a task did.
/// `None` while no exporter is installed: a task then carries no span at all.
pub(crate) fn invoke_agent(
    parent: Option<&Span>,
    session: &str,
    id: SubagentId,
    config: &SubagentConfig,
) -> Option<Span> {
    if !tracing_on() {
        return None;
    }
    Some(tracing::info_span!(
        parent: parent.and_then(Span::id),
        "invoke_agent",
        otel.name = format!("invoke_agent {}", config.name),
        otel.kind = "internal",
        otel.status_code = Empty,
        gen_ai.operation.name = "invoke_agent",
        gen_ai.conversation.id = session,
        gen_ai.agent.id = %id,
        gen_ai.agent.name = %config.name,
        gen_ai.request.model = %config.model,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        error.type = Empty,
    ))
}

/// Records how a task ended on its span: the tokens it used, and its error.
pub(crate) fn task_ended(span: &Span, usage: Usage, error: Option<&str>) {
    if span.is_disabled() {
        return;
    }
    span.record("gen_ai.usage.input_tokens", count(usage.input_tokens));
    span.record("gen_ai.usage.output_tokens", count(usage.output_tokens));
    if let Some(error) = error {
        span.record("otel.status_code", "ERROR");
        span.record("error.type", error_type(error));
    }
}

// A token count as the conventions type it, an int: `tracing-opentelemetry`
// turns a `u64` field into a string, an `i64` into an int.
fn count(tokens: u64) -> i64 {
    i64::try_from(tokens).unwrap_or(i64::MAX)
}

// A short, low-cardinality error type: the error text up to its first `:`.
fn error_type(error: &str) -> &str {
    let head = error.split(':').next().unwrap_or(error).trim();
    if head.len() <= 64 {
        head
    } else {
        "error"
    }
}

/// The span of one model call of the task whose span is `task`, to a
/// `provider` (e.g. `openai`) for `model`. Record how it ended with
/// [`chat_ended`] once the reply (or the error) is in.
pub(crate) fn chat(task: &Span, provider: &str, model: &str) -> Span {
    if !tracing_on() {
        return Span::none();
    }
    tracing::info_span!(
        parent: task,
        "chat",
        otel.name = format!("chat {model}"),
        otel.kind = "client",
        otel.status_code = Empty,
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = provider,
        gen_ai.request.model = model,
        gen_ai.response.model = Empty,
        gen_ai.response.id = Empty,
        gen_ai.response.finish_reasons = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.input.messages = Empty,
        gen_ai.output.messages = Empty,
        error.type = Empty,
    )
}

/// What a model server answered, as a [`chat`] span records it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChatReply<'a> {
    /// The tokens the call used.
    pub usage: Usage,
    /// The model that answered, as the server names it (often a dated
    /// version of the requested one); `None` when the reply leaves it out.
    pub model: Option<&'a str>,
    /// The server's id of the reply, to find it in the provider's logs.
    pub id: Option<&'a str>,
    /// Why each choice stopped (`stop`, `tool_calls`, `length` …).
    pub finish_reasons: &'a [String],
}

/// Records how a model call ended on its [`chat`] span: what the server
/// answered, or the error (which also marks the span's status).
pub(crate) fn chat_ended(span: &Span, outcome: Result<ChatReply<'_>, &str>) {
    if span.is_disabled() {
        return;
    }
    match outcome {
        Ok(reply) => {
            span.record("gen_ai.usage.input_tokens", count(reply.usage.input_tokens));
            span.record("gen_ai.usage.output_tokens", count(reply.usage.output_tokens));
            if let Some(model) = reply.model {
                span.record("gen_ai.response.model", model);
            }
            if let Some(id) = reply.id {
                span.record("gen_ai.response.id", id);
            }
            if !reply.finish_reasons.is_empty() {
                record_strings(span, "gen_ai.response.finish_reasons", reply.finish_reasons);
            }
        }
        Err(error) => {
            span.record("otel.status_code", "ERROR");
            span.record("error.type", error_type(error));
        }
    }
}

/// Records a string array attribute. The conventions type
/// `gen_ai.response.finish_reasons` as `string[]`, which a `tracing` field
/// cannot hold: with the OTLP exporter built in, the array goes to the
/// OpenTelemetry span directly.
#[cfg(feature = "otlp")]
fn record_strings(span: &Span, key: &'static str, values: &[String]) {
    use opentelemetry::{Array, StringValue, Value};
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let values: Vec<StringValue> = values.iter().map(|value| value.clone().into()).collect();
    span.set_attribute(key, Value::Array(Array::String(values)));
}

/// Without the exporter (a library user's own subscriber) the array is a
/// field holding its JSON text, the closest a `tracing` field comes.
#[cfg(not(feature = "otlp"))]
fn record_strings(span: &Span, key: &'static str, values: &[String]) {
    span.record(key, serde_json::to_string(values).unwrap_or_default());
}

/// The span of one tool call (`call_id`) of the task whose span is `task`.
/// Every tool the host offers is a function the model asks for and the
/// host runs for it: `gen_ai.tool.type` is `function`.
pub(crate) fn execute_tool(task: &Span, tool: &str, call_id: &str) -> Span {
    if !tracing_on() {
        return Span::none();
    }
    tracing::info_span!(
        parent: task,
        "execute_tool",
        otel.name = format!("execute_tool {tool}"),
        otel.kind = "internal",
        otel.status_code = Empty,
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = tool,
        gen_ai.tool.call.id = call_id,
        gen_ai.tool.type = "function",
        gen_ai.tool.call.arguments = Empty,
        gen_ai.tool.call.result = Empty,
        error.type = Empty,
    )
}

/// Records a tool call's failure on its [`execute_tool`] span: the
/// model was answered with `{"error": …}`.
pub(crate) fn tool_failed(span: &Span, error: &str) {
    if span.is_disabled() {
        return;
    }
    span.record("otel.status_code", "ERROR");
    span.record("error.type", error_type(error));
}
