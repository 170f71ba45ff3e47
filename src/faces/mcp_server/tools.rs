//! The MCP face's tools: their names, descriptions, input and output
//! schemas and annotations (`tools/list`), and reading a call's arguments.
//! The schemas say everything a model needs: every field is described, and
//! each result is `structuredContent` matching the tool's `outputSchema`.

use serde_json::{json, Map, Value};

/// Spawns a subagent, hands it a task and waits for its result.
pub(super) const RUN_SUBAGENT: &str = "run_subagent";
/// Spawns a subagent, without a task, as its description says. (The
/// model's tool of this name spawns a child and hands it its task at once:
/// a model has no `run_subagent`. Here that is `run_subagent`, the shared
/// `run_task` operation, and the two steps stay apart for a client that
/// wants them so.)
pub(super) const SPAWN_SUBAGENT: &str = "spawn_subagent";
/// Hands a subagent a task (and by default waits for its result).
pub(super) const DELEGATE_TASK: &str = "delegate_task";
/// Waits for a subagent's task to end.
pub(super) const AWAIT_SUBAGENT: &str = "await_subagent";
/// Lists the session's subagents.
pub(super) const LIST_SUBAGENTS: &str = "list_subagents";
/// Puts a message in a subagent's mailbox.
pub(super) const SEND_MESSAGE: &str = "send_message";
/// Cancels a subagent's task and its descendants'.
pub(super) const CANCEL_SUBAGENT: &str = "cancel_subagent";
/// Terminates a subagent and its subtree.
pub(super) const TERMINATE_SUBAGENT: &str = "terminate_subagent";
/// Merges finished subagents' results.
pub(super) const MERGE_RESULTS: &str = "merge_results";

/// Every tool, in the order `tools/list` gives them.
pub(super) const TOOL_NAMES: [&str; 9] = [
    RUN_SUBAGENT,
    SPAWN_SUBAGENT,
    DELEGATE_TASK,
    AWAIT_SUBAGENT,
    LIST_SUBAGENTS,
    SEND_MESSAGE,
    CANCEL_SUBAGENT,
    TERMINATE_SUBAGENT,
    MERGE_RESULTS,
];

/// Whether a tool may run as an MCP task (`execution.taskSupport`).
pub(super) fn runs_as_task(name: &str) -> bool {
    matches!(name, RUN_SUBAGENT | DELEGATE_TASK)
}

fn id_field(what: &str) -> Value {
    json!({ "type": "string", "description": what })
}

// What a subagent is made of: the fields `run_subagent` and
// `spawn_subagent` share.
fn agent_fields() -> Map<String, Value> {
    let fields = json!({
        "name": { "type": "string", "description": "A short name for the subagent (default: the host's configured agent name)." },
        "model": { "type": "string", "description": "The model it runs (default: the host's configured agent model)." },
        "system_prompt": { "type": "string", "description": "Its system prompt." },
        "role": { "type": "string", "description": "Its role, in a few words." },
        "parent_id": id_field("Make it a child of this subagent (default: a new root)."),
        "capabilities": { "type": "array", "items": { "type": "string" }, "description": "Its capabilities; \"multi_agent\" lets its model spawn children of its own." },
        "max_steps": { "type": "integer", "minimum": 1, "description": "The most adapter steps one task may take." },
        "timeout_seconds": { "type": "integer", "minimum": 1, "description": "How long one task may run." },
        "agent_metadata": { "type": "object", "description": "The subagent's metadata, e.g. {\"budget\": {\"max_tokens\": 20000, \"max_wall_seconds\": 600}}." }
    });
    fields.as_object().cloned().unwrap_or_default()
}

// What a task is made of: the fields `run_subagent` and `delegate_task` share.
fn task_fields() -> Map<String, Value> {
    let fields = json!({
        "instruction": { "type": "string", "description": "The task, complete enough to do without asking." },
        "task_name": { "type": "string", "description": "A short name for the task (default \"task\")." },
        "success_criteria": { "type": "array", "items": { "type": "string" }, "description": "What a good result has." },
        "task_metadata": { "type": "object", "description": "The task's metadata (for the scripted agent, {\"script\": [...]})." }
    });
    fields.as_object().cloned().unwrap_or_default()
}

fn object(properties: Map<String, Value>, required: &[&str]) -> Value {
    json!({ "type": "object", "properties": properties, "required": required, "additionalProperties": false })
}

fn usage_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "input_tokens": { "type": "integer" },
            "output_tokens": { "type": "integer" },
            "cost_usd": { "type": "number", "description": "US dollars, at the routes' prices; absent when no call was priced." }
        }
    })
}

// A task's outcome, as `run_subagent`, `delegate_task` and
// `await_subagent` give it.
fn outcome_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "subagent_id": { "type": "string" },
            "status": { "type": "string", "description": "COMPLETED, FAILED, CANCELLED or TERMINATED (READY, RUNNING or WAITING for a delegate that does not wait)." },
            "result": { "type": ["object", "null"], "description": "What the task gave back (COMPLETED)." },
            "error": { "type": ["string", "null"], "description": "Why it did not complete." },
            "usage": usage_schema(),
            "subtree_usage": usage_schema()
        },
        "required": ["subagent_id", "status"]
    })
}

fn stopped_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "subagent_id": { "type": "string" },
            "stopped": { "type": "array", "items": { "type": "string" }, "description": "Every subagent stopped, the one named included." }
        },
        "required": ["subagent_id", "stopped"]
    })
}

struct Definition {
    title: &'static str,
    description: &'static str,
    input: Value,
    output: Value,
    read_only: bool,
    destructive: bool,
    idempotent: bool,
}

fn definition(name: &str) -> Option<Definition> {
    let wait = json!({ "type": "boolean", "description": "Wait for the task's result (default true); false answers at once and await_subagent waits later." });
    Some(match name {
        RUN_SUBAGENT => {
            let mut fields = agent_fields();
            fields.extend(task_fields());
            Definition {
                title: "Run a subagent",
                description: "Start a subagent on a task and wait for its result: spawn, delegate and await in one call. The subagent may spawn a tree of its own; progress notifications follow the whole tree, and cancelling the call cancels it.",
                input: object(fields, &["instruction"]),
                output: outcome_schema(),
                read_only: false,
                destructive: false,
                idempotent: false,
            }
        }
        SPAWN_SUBAGENT => Definition {
            title: "Spawn a subagent",
            description: "Create a subagent without a task (hand it one with delegate_task). Returns its subagent_id.",
            input: object(agent_fields(), &[]),
            output: json!({
                "type": "object",
                "properties": { "subagent_id": { "type": "string" }, "status": { "type": "string" } },
                "required": ["subagent_id", "status"]
            }),
            read_only: false,
            destructive: false,
            idempotent: false,
        },
        DELEGATE_TASK => {
            let mut fields = Map::new();
            fields.insert("subagent_id".into(), id_field("The subagent (not busy with another task)."));
            fields.extend(task_fields());
            fields.insert("wait".into(), wait);
            Definition {
                title: "Delegate a task",
                description: "Hand an existing subagent a new task and (by default) wait for its result.",
                input: object(fields, &["subagent_id", "instruction"]),
                output: outcome_schema(),
                read_only: false,
                destructive: false,
                idempotent: false,
            }
        }
        AWAIT_SUBAGENT => Definition {
            title: "Await a subagent",
            description: "Wait until a subagent's task ends; returns its status, result or error, and token usage.",
            input: object(Map::from_iter([("subagent_id".into(), id_field("The subagent."))]), &["subagent_id"]),
            output: outcome_schema(),
            read_only: true,
            destructive: false,
            idempotent: true,
        },
        LIST_SUBAGENTS => Definition {
            title: "List subagents",
            description: "List this session's subagents: id, name, status, parent, depth and usage.",
            input: object(Map::new(), &[]),
            output: json!({
                "type": "object",
                "properties": {
                    "subagents": { "type": "array", "items": {
                        "type": "object",
                        "properties": {
                            "subagent_id": { "type": "string" },
                            "name": { "type": "string" },
                            "status": { "type": "string" },
                            "parent_agent_id": { "type": ["string", "null"] },
                            "depth": { "type": "integer" }
                        }
                    } }
                },
                "required": ["subagents"]
            }),
            read_only: true,
            destructive: false,
            idempotent: true,
        },
        SEND_MESSAGE => Definition {
            title: "Send a message",
            description: "Put a message in a subagent's mailbox (its task reads it while it runs).",
            input: object(
                Map::from_iter([
                    ("to".into(), id_field("The subagent.")),
                    ("content".into(), json!({ "description": "Any JSON value." })),
                    ("type".into(), json!({ "type": "string", "description": "The message's type (default \"message\")." })),
                ]),
                &["to", "content"],
            ),
            output: json!({
                "type": "object",
                "properties": { "delivered": { "type": "boolean" }, "message_id": { "type": "string" } },
                "required": ["delivered"]
            }),
            read_only: false,
            destructive: false,
            idempotent: false,
        },
        CANCEL_SUBAGENT => Definition {
            title: "Cancel a subagent's task",
            description: "Cancel a subagent's running task and its descendants' tasks; the subagents stay and can be given new tasks.",
            input: object(Map::from_iter([("subagent_id".into(), id_field("The subagent."))]), &["subagent_id"]),
            output: stopped_schema(),
            read_only: false,
            destructive: false,
            idempotent: true,
        },
        TERMINATE_SUBAGENT => Definition {
            title: "Terminate a subagent",
            description: "Stop a subagent and its whole subtree for good; they take no more tasks.",
            input: object(Map::from_iter([("subagent_id".into(), id_field("The subagent."))]), &["subagent_id"]),
            output: stopped_schema(),
            read_only: false,
            destructive: true,
            idempotent: true,
        },
        MERGE_RESULTS => Definition {
            title: "Merge results",
            description: "Merge finished subagents' results into one object.",
            input: object(
                Map::from_iter([
                    ("subagent_ids".into(), json!({ "type": "array", "items": { "type": "string" }, "minItems": 1, "description": "The subagents whose results are merged." })),
                    ("strategy".into(), json!({ "type": "string", "enum": ["concat", "vote", "custom"], "description": "concat (default): every result by id; vote: the most common result; custom: the results as a list." })),
                ]),
                &["subagent_ids"],
            ),
            output: json!({
                "type": "object",
                "properties": { "merged_result": { "type": "object" } },
                "required": ["merged_result"]
            }),
            read_only: true,
            destructive: false,
            idempotent: true,
        },
        _ => return None,
    })
}

/// Whether `name` is one of the tools.
pub(super) fn is_tool(name: &str) -> bool {
    TOOL_NAMES.contains(&name)
}

/// The `tools` of `tools/list`.
pub(super) fn list() -> Vec<Value> {
    TOOL_NAMES
        .iter()
        .filter_map(|name| {
            let d = definition(name)?;
            let mut tool = json!({
                "name": name,
                "title": d.title,
                "description": d.description,
                "inputSchema": d.input,
                "outputSchema": d.output,
                "annotations": {
                    "title": d.title,
                    "readOnlyHint": d.read_only,
                    "destructiveHint": d.destructive,
                    "idempotentHint": d.idempotent,
                    "openWorldHint": false
                }
            });
            if runs_as_task(name) {
                tool["execution"] = json!({ "taskSupport": "optional" });
            }
            Some(tool)
        })
        .collect()
}

/// A call's arguments checked against the tool's input schema: `Err`
/// says what is wrong, in words a model can act on.
pub(super) fn check_arguments(name: &str, arguments: &Value) -> Result<(), String> {
    // Each schema compiled once, not per call.
    static VALIDATORS: std::sync::LazyLock<Vec<(&'static str, jsonschema::Validator)>> =
        std::sync::LazyLock::new(|| {
            TOOL_NAMES
                .iter()
                .filter_map(|name| Some((*name, jsonschema::validator_for(&definition(name)?.input).ok()?)))
                .collect()
        });
    let Some((_, validator)) = VALIDATORS.iter().find(|(tool, _)| *tool == name) else {
        return Err(format!("unknown tool {name}"));
    };
    let errors: Vec<String> =
        validator.iter_errors(arguments).take(4).map(|err| format!("{} {err}", err.instance_path())).collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!("invalid arguments for {name}: {}", errors.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_is_listed_with_schemas_and_annotations() {
        let tools = list();
        assert_eq!(tools.len(), TOOL_NAMES.len());
        for tool in &tools {
            assert_eq!(tool["inputSchema"]["type"], "object", "{tool}");
            assert_eq!(tool["outputSchema"]["type"], "object", "{tool}");
            jsonschema::validator_for(&tool["inputSchema"]).expect("a valid input schema");
            jsonschema::validator_for(&tool["outputSchema"]).expect("a valid output schema");
        }
        let by_name = |name: &str| tools.iter().find(|tool| tool["name"] == name).cloned().unwrap();
        assert_eq!(by_name(TERMINATE_SUBAGENT)["annotations"]["destructiveHint"], true);
        assert_eq!(by_name(LIST_SUBAGENTS)["annotations"]["readOnlyHint"], true);
        assert_eq!(by_name(RUN_SUBAGENT)["execution"]["taskSupport"], "optional");
        assert!(by_name(LIST_SUBAGENTS).get("execution").is_none());
    }

    #[test]
    fn arguments_are_checked_against_the_schema() {
        assert!(check_arguments(RUN_SUBAGENT, &json!({ "instruction": "go" })).is_ok());
        let missing = check_arguments(RUN_SUBAGENT, &json!({})).unwrap_err();
        assert!(missing.contains("instruction"), "{missing}");
        assert!(check_arguments(RUN_SUBAGENT, &json!({ "instruction": "go", "bogus": 1 })).is_err());
        assert!(check_arguments(AWAIT_SUBAGENT, &json!({ "subagent_id": 7 })).is_err());
        assert!(check_arguments("rm", &json!({})).is_err());
    }
}
