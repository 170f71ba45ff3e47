//! What the model is told: the system prompt, mailbox messages, and the
//! subagent's memory as chat history a server accepts.

use serde_json::{json, Value};
use std::collections::HashSet;

use crate::runtime::memory::InboxMessage;
use crate::runtime::task::TaskContext;

/// The kinds of tools a task is offered, which the default prompt names.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct ToolKinds {
    /// Spawn, delegate, await, message, list.
    pub orchestration: bool,
    /// Tools of MCP servers.
    pub mcp: bool,
    /// `ask_user`.
    pub ask_user: bool,
}

/// The system prompt: the configured one (or a default), the role, the
/// success criteria, the subagent's id and, when it has tools, what kinds
/// it has. Nothing in it steers a model away from a tool it was given: a
/// small model told to "answer without calling a tool" writes its calls as
/// text instead (see docs/local-model.md).
pub(super) fn system_prompt(ctx: &TaskContext, tools: ToolKinds) -> String {
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
    let mut kinds = Vec::new();
    if tools.mcp {
        kinds.push("tools that reach files and services (from MCP servers)");
    }
    if tools.orchestration {
        kinds.push(
            "tools that spawn subagents, delegate tasks to them and await their results (await only subagents \
             you spawned, never yourself)",
        );
    }
    if tools.ask_user {
        kinds.push("ask_user, to ask a person a question");
    }
    if !kinds.is_empty() {
        text.push_str(&format!(
            "\n\nYou can call tools: {}. Call a tool whenever the task needs what it gives; its answer comes back \
             to you. When the task is done, reply with your final answer as plain text.",
            kinds.join("; ")
        ));
    }
    text
}

/// The note `[limits] remind_budget` adds before a model call after the
/// first: the steps left, and what the task's budget has left.
pub(super) fn budget_reminder(ctx: &TaskContext, step: u32) -> Value {
    use crate::runtime::usage::Resource;
    let steps_left = ctx.config.max_steps.saturating_sub(step);
    let mut text = format!("Step {step} of at most {}: {steps_left} more after this one.", ctx.config.max_steps);
    let budget =
        [(Resource::Tokens, "tokens"), (Resource::Steps, "steps in the tree"), (Resource::ToolCalls, "tool calls")];
    let mut left: Vec<String> = budget
        .iter()
        .filter_map(|(resource, name)| ctx.usage.remaining(*resource).map(|left| format!("{left} {name}")))
        .collect();
    // Dollars as people write them, not nanodollars.
    let dollars = ctx.usage.remaining(Resource::Cost).map(crate::protocol::wire::CostUsd::from_nanos);
    left.extend(dollars.map(|left| format!("${left} to spend")));
    if !left.is_empty() {
        text.push_str(&format!(" Budget left: {}.", left.join(", ")));
    }
    let seconds = ctx.deadline_now().saturating_duration_since(tokio::time::Instant::now()).as_secs();
    text.push_str(&format!(" Time left: {seconds} s. Answer before these run out."));
    json!({ "role": "system", "content": text })
}

/// A mailbox message as the model sees it.
pub(super) fn inbox_text(message: &InboxMessage) -> String {
    let content = match &message.payload.content {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    format!("Message from {} (type {}): {content}", message.from, message.payload.kind)
}

/// A mailbox message as `read_mailbox` returns it.
pub(super) fn inbox_json(message: &InboxMessage) -> Value {
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
/// a full memory drops its oldest entries), and only of tools this agent is
/// offered (`offered`): a parent's call of a tool the child lacks invites
/// the child to make it, which a server refuses. Anything else is left out.
pub(super) fn history(entries: &[Value], offered: &[String]) -> Vec<Value> {
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
                    let own = calls.iter().all(|call| {
                        let name = call.pointer("/function/name").and_then(Value::as_str).unwrap_or_default();
                        offered.iter().any(|tool| tool == name)
                    });
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
                    if !own {
                        // Neither the call nor its answers are shown.
                        for later in answers {
                            used[later] = true;
                        }
                    } else if ids.len() == calls.len() && answered.len() == ids.len() {
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
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": "n", "type": "function", "function": {"name": "spawn_subagent", "arguments": "{}"}}]}),
            json!({"role": "tool", "tool_call_id": "n", "content": "not offered here: call and answer left out"}),
            json!({"role": "user", "content": "interleaved child"}),
            json!({"role": "tool", "tool_call_id": "a", "content": "{}"}),
            json!({"role": "assistant", "content": "half", "tool_calls": [{"id": "b"}]}),
            json!({"role": "tool", "tool_call_id": "zzz", "content": "orphan"}),
            json!({"role": "assistant", "content": {"summary": 1}}),
            json!("not an object"),
            json!({"role": "weird", "content": "x"}),
        ];
        let out = history(&entries, &["list_subagents".to_owned()]);
        let roles: Vec<&str> = out.iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["user", "assistant", "tool", "user", "assistant", "assistant"]);
        assert_eq!(out[4]["content"], "half");
        assert!(out[4].get("tool_calls").is_none());
        assert_eq!(out[5]["content"], r#"{"summary":1}"#);
    }
}
