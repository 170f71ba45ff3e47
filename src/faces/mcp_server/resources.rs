//! Resources: `subagent://{session}/{id}` is a subagent of the session, as
//! JSON (status, result or error, usage, parent, children, what it waits
//! for). `resources/subscribe` on one sends
//! `notifications/resources/updated` whenever it or a child has an event,
//! so a client watches a tree without polling.

use serde_json::{json, Map, Value};
use std::sync::Arc;

use super::incoming::RpcError;
use super::session::McpSession;
use crate::ids::SubagentId;

const MIME: &str = "application/json";

/// A subagent's URI.
pub(super) fn uri_of(session: &str, subagent: SubagentId) -> String {
    format!("subagent://{session}/{subagent}")
}

// The subagent a URI of this session names.
fn subagent_of(session: &McpSession, params: &Map<String, Value>) -> Result<(String, SubagentId), RpcError> {
    let uri = params.get("uri").and_then(Value::as_str).ok_or_else(|| RpcError::invalid_params("no `uri`"))?;
    let not_found = || RpcError::resource_not_found(uri);
    let rest = uri.strip_prefix("subagent://").ok_or_else(not_found)?;
    let (owner, id) = rest.split_once('/').ok_or_else(not_found)?;
    if owner != session.id {
        return Err(not_found());
    }
    Ok((uri.to_owned(), SubagentId::parse(id).ok_or_else(not_found)?))
}

/// `resources/list`: every subagent of the session.
pub(super) async fn list(session: &Arc<McpSession>) -> Result<Value, RpcError> {
    let listed = session.tree().list().await.map_err(|err| RpcError::from_host(&err))?;
    let resources: Vec<Value> = listed
        .subagents
        .iter()
        .map(|row| {
            json!({
                "uri": uri_of(&session.id, row.subagent_id),
                "name": format!("{} ({})", row.name, row.subagent_id),
                "description": format!("Subagent {} at depth {}: {}", row.subagent_id, row.depth, row.status.as_str()),
                "mimeType": MIME,
            })
        })
        .collect();
    Ok(json!({ "resources": resources }))
}

/// `resources/templates/list`.
pub(super) fn templates(session: &McpSession) -> Value {
    json!({ "resourceTemplates": [{
        "uriTemplate": format!("subagent://{}/{{subagent_id}}", session.id),
        "name": "subagent",
        "title": "A subagent of this session",
        "description": "Status, result or error, usage, parent and children of one subagent.",
        "mimeType": MIME,
    }] })
}

/// `resources/read`.
pub(super) async fn read(session: &Arc<McpSession>, params: &Map<String, Value>) -> Result<Value, RpcError> {
    let (uri, subagent) = subagent_of(session, params)?;
    let detail = session.tree().inspect_one(subagent).await.map_err(|_| RpcError::resource_not_found(&uri))?;
    let view = &detail.view;
    let result: Option<Value> = detail.result.as_ref().and_then(|raw| serde_json::from_str(raw.text()).ok());
    let body = json!({
        "subagent_id": subagent.to_string(),
        "name": view.name,
        "model": view.model,
        "status": view.status,
        "parent_agent_id": view.parent.map(|parent| parent.to_string()),
        "depth": view.depth,
        "children": detail.child_ids.iter().map(|id| uri_of(&session.id, *id)).collect::<Vec<_>>(),
        "task": detail.task.as_ref().map(|task| json!({ "name": task.name, "instruction": task.instruction })),
        "result": result,
        "error": view.error,
        "usage": view.usage,
        "subtree_usage": view.subtree_usage,
        "waiting_for": view.waiting_for,
    });
    Ok(json!({ "contents": [{ "uri": uri, "mimeType": MIME, "text": body.to_string() }] }))
}

/// `resources/subscribe` (with `on`) and `resources/unsubscribe`.
pub(super) async fn subscribe(
    session: &Arc<McpSession>,
    params: &Map<String, Value>,
    on: bool,
) -> Result<Value, RpcError> {
    let (uri, subagent) = subagent_of(session, params)?;
    if on {
        session.tree().inspect_one(subagent).await.map_err(|_| RpcError::resource_not_found(&uri))?;
    }
    session.subscribe(subagent, on);
    Ok(json!({}))
}
