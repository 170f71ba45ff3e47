//! What a person is asked, as an MCP elicitation (`elicitation/create`),
//! and the client's answer read back as a decision.

use serde_json::{json, Map, Value};

use crate::runtime::people::{AskKind, Given, PersonRequest};

// The `elicitation/create` params for a person's request.
pub(super) fn elicitation(request: &PersonRequest) -> Value {
    match request.kind {
        AskKind::Approval => {
            let tool = request.tool.as_deref().unwrap_or("a tool");
            let server = request.server.as_deref().map(|server| format!(" on {server}")).unwrap_or_default();
            let arguments = request.arguments.as_ref().map(|args| format!(" with {args}")).unwrap_or_default();
            let reason = request.reason.as_deref().map(|reason| format!(" ({reason})")).unwrap_or_default();
            json!({
                "message": format!("Subagent {} asks to call {tool}{server}{arguments}{reason}. Approve?", request.subagent_id),
                "requestedSchema": {
                    "type": "object",
                    "properties": {
                        "decision": { "type": "string", "title": "Decision", "enum": ["approve", "deny"] },
                        "note": { "type": "string", "title": "Note", "description": "Why (the subagent sees it)." }
                    },
                    "required": ["decision"]
                }
            })
        }
        AskKind::Question => {
            let mut answer = json!({ "type": "string", "title": "Answer" });
            if !request.choices.is_empty() {
                answer["enum"] = json!(request.choices);
            }
            json!({
                "message": format!("Subagent {} asks: {}", request.subagent_id, request.question.as_deref().unwrap_or_default()),
                "requestedSchema": { "type": "object", "properties": { "answer": answer }, "required": ["answer"] }
            })
        }
    }
}

// What the client's `ElicitResult` answers: `None` when it gave no answer
// (cancelled, or a shape we cannot read).
pub(super) fn given_of(request: &PersonRequest, result: &Value) -> Option<Given> {
    let content = result["content"].as_object().cloned().unwrap_or_else(Map::new);
    let text = |key: &str| content.get(key).and_then(Value::as_str).map(str::to_owned);
    match (result["action"].as_str()?, request.kind) {
        ("accept", AskKind::Approval) => {
            let note = text("note").unwrap_or_default();
            match text("decision")?.to_ascii_lowercase().as_str() {
                "approve" | "yes" => Some(Given::Approve { note }),
                "deny" | "no" => Some(Given::Deny { note }),
                _ => None,
            }
        }
        ("decline", AskKind::Approval) => Some(Given::Deny { note: "declined by the MCP client".to_owned() }),
        ("accept", AskKind::Question) => Some(Given::Answer { text: text("answer")? }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::SubagentId;

    fn request(kind: AskKind) -> PersonRequest {
        PersonRequest {
            id: "apr_1".into(),
            kind,
            session_id: "s".into(),
            subagent_id: SubagentId(1),
            path: Vec::new(),
            tool: Some("fs__move_file".into()),
            server: Some("fs".into()),
            arguments: None,
            reason: None,
            question: Some("Which?".into()),
            choices: vec!["a".into(), "b".into()],
            requested_at: 0.0,
            expires_at: 0.0,
        }
    }

    #[test]
    fn elicited_answers_become_decisions() {
        let approval = request(AskKind::Approval);
        let accept = json!({ "action": "accept", "content": { "decision": "approve", "note": "ok" } });
        assert!(matches!(given_of(&approval, &accept), Some(Given::Approve { note }) if note == "ok"));
        assert!(matches!(given_of(&approval, &json!({ "action": "decline" })), Some(Given::Deny { .. })));
        assert!(given_of(&approval, &json!({ "action": "cancel" })).is_none());
        let question = request(AskKind::Question);
        let answer = json!({ "action": "accept", "content": { "answer": "b" } });
        assert!(matches!(given_of(&question, &answer), Some(Given::Answer { text }) if text == "b"));
        assert!(given_of(&question, &json!({ "action": "decline" })).is_none());
        assert_eq!(elicitation(&question)["requestedSchema"]["properties"]["answer"]["enum"], json!(["a", "b"]));
    }
}
