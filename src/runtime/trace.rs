//! The spans of the agent tree, in the OpenTelemetry GenAI conventions.
//!
//! Each task is one `invoke_agent {name}` span. A task delegated by another
//! task (a child spawned by its parent's task) is a child of that task's
//! span, so a trace *is* the subagent tree; a task the client delegates
//! starts a trace of its own. Adapters add `chat {model}` spans for model
//! calls and `execute_tool {tool}` spans for tool calls under their task's
//! span ([`chat`], [`execute_tool`]).
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
    span.record("gen_ai.usage.input_tokens", usage.input_tokens);
    span.record("gen_ai.usage.output_tokens", usage.output_tokens);
    if let Some(error) = error {
        span.record("otel.status_code", "ERROR");
        span.record("error.type", error_type(error));
    }
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
/// `provider` (e.g. `openai`) for `model`. Record its usage with
/// [`chat_usage`] once the reply is in.
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
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.input.messages = Empty,
        gen_ai.output.messages = Empty,
        error.type = Empty,
    )
}

/// Records a model call's tokens, or its error, on its [`chat`] span.
pub(crate) fn chat_usage(span: &Span, outcome: Result<Usage, &str>) {
    if span.is_disabled() {
        return;
    }
    match outcome {
        Ok(usage) => {
            span.record("gen_ai.usage.input_tokens", usage.input_tokens);
            span.record("gen_ai.usage.output_tokens", usage.output_tokens);
        }
        Err(error) => {
            span.record("otel.status_code", "ERROR");
            span.record("error.type", error_type(error));
        }
    }
}

/// The span of one tool call (`call_id`) of the task whose span is `task`.
pub(crate) fn execute_tool(task: &Span, tool: &str, call_id: &str) -> Span {
    if !tracing_on() {
        return Span::none();
    }
    tracing::info_span!(
        parent: task,
        "execute_tool",
        otel.name = format!("execute_tool {tool}"),
        otel.kind = "internal",
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = tool,
        gen_ai.tool.call.id = call_id,
        gen_ai.tool.call.arguments = Empty,
        gen_ai.tool.call.result = Empty,
    )
}
