//! `ListTasks`: the caller's tasks, of one context or of every context
//! they have, newest change first, a page at a time. A context served here
//! is read from its tree (finished tasks from their kept records); any
//! other, from the store (its root records and retired tasks), without
//! taking it over, so that any node lists every context of the caller.

use serde_json::{json, Map, Value};
use std::sync::Arc;

use super::face::A2aFace;
use super::model::TaskSnapshot;
use super::rpc::{bool_field, history_length, int_field, string_field, RpcError};
use super::tasks::{pending_for, session_of, snapshot_of, status_filter, task_id, Asker, Found};
use crate::faces::hosted::Context;
use crate::ids::SubagentId;
use crate::runtime::inspect::{SubagentDetail, SubagentView};
use crate::runtime::RetiredTask;
use crate::store::{FaceQuery, StoredSubagent};

/// Tasks one `ListTasks` looks at, at most.
const LIST_SCAN: usize = 10_000;
/// Contexts of one caller one `ListTasks` looks at, at most (those used
/// most recently).
const CONTEXTS_SCANNED: u32 = 256;
/// `ListTasks` pages: the default and the largest.
const PAGE_DEFAULT: i64 = 50;
const PAGE_MAX: i64 = 100;

/// A task listed, and where its follow-up messages are read from.
struct Listed {
    snapshot: TaskSnapshot,
    subagent: SubagentId,
    // Its context, when served here.
    context: Option<Arc<Context>>,
    session: String,
}

pub(super) async fn list(face: &Arc<A2aFace>, params: &Map<String, Value>, asker: &Asker) -> Result<Value, RpcError> {
    let page_size = int_field(params, "pageSize", "page_size")?.unwrap_or(PAGE_DEFAULT);
    if !(1..=PAGE_MAX).contains(&page_size) {
        return Err(RpcError::invalid_params(format!("`pageSize` must be between 1 and {PAGE_MAX}")));
    }
    let offset = match string_field(params, "pageToken", "page_token")?.filter(|token| !token.is_empty()) {
        None => 0,
        Some(token) => token
            .strip_prefix("after:")
            .and_then(|n| n.parse::<usize>().ok())
            .ok_or_else(|| RpcError::invalid_params("`pageToken` is not one this server gave"))?,
    };
    let status = status_filter(params)?;
    let history = history_length(params)?;
    let artifacts = bool_field(params, "includeArtifacts", "include_artifacts")?.unwrap_or(false);
    let after = match string_field(params, "statusTimestampAfter", "status_timestamp_after")? {
        None => None,
        Some(text) => Some(parse_timestamp(&text)?),
    };
    let sessions = match string_field(params, "contextId", "context_id")? {
        Some(context_id) => vec![session_of(asker.principal.as_deref(), &context_id)],
        None => caller_sessions(face, asker).await,
    };
    let mut listed = Vec::new();
    for session in sessions {
        match face.contexts.served_here(&face.sessions, &session) {
            Some(context) => served(asker, &session, context, &mut listed).await,
            None => stored(face, asker, &session, &mut listed).await,
        }
        if listed.len() >= LIST_SCAN {
            break;
        }
    }
    listed.retain(|task: &Listed| {
        let snapshot = &task.snapshot;
        status.is_none_or(|state| snapshot.state == state) && after.is_none_or(|after| snapshot.changed_at >= after)
    });
    listed.sort_by(|a, b| {
        b.snapshot
            .changed_at
            .total_cmp(&a.snapshot.changed_at)
            .then_with(|| a.snapshot.task_id.cmp(&b.snapshot.task_id))
    });
    let total = listed.len();
    let page_size = usize::try_from(page_size).unwrap_or(1);
    let mut tasks = Vec::new();
    for task in listed.into_iter().skip(offset).take(page_size) {
        let mut snapshot = task.snapshot;
        if history != Some(0) {
            snapshot.history.extend(followups(face, &task.session, task.context.as_deref(), task.subagent).await);
        }
        tasks.push(snapshot.to_json(history, artifacts));
    }
    let next = offset + tasks.len();
    Ok(json!({
        "tasks": tasks,
        "nextPageToken": if next < total { format!("after:{next}") } else { String::new() },
        "pageSize": page_size,
        "totalSize": total,
    }))
}

// Every context session of the caller: those served here, and those the
// store knows (most recently used first).
async fn caller_sessions(face: &A2aFace, asker: &Asker) -> Vec<String> {
    let mut sessions: Vec<String> = face.contexts.served().into_iter().map(|(id, _)| id).collect();
    let query = FaceQuery::Sessions {
        transport: "a2a".to_owned(),
        principal: asker.principal.clone(),
        limit: CONTEXTS_SCANNED,
    };
    match face.sessions.service.store().query(query).await {
        Ok(stored) => {
            for session in stored {
                if !sessions.contains(&session) {
                    sessions.push(session);
                }
            }
        }
        Err(err) => log::warn!("a2a: the caller's contexts could not be read from the store: {err}"),
    }
    sessions
}

// The tasks of a context served here: its roots and kept retired tasks.
async fn served(asker: &Asker, session: &str, context: Arc<Context>, listed: &mut Vec<Listed>) {
    let Ok(rows) = context.tree().list().await else { return };
    for row in rows.subagents.iter().filter(|row| row.depth == 0) {
        let Some(context_id) = context_id_of(&row.config.metadata) else { continue };
        if session_of(asker.principal.as_deref(), context_id) != session {
            continue;
        }
        let found = Found {
            context: context.clone(),
            subagent: row.subagent_id,
            context_id: context_id.to_owned(),
            task_id: task_id(session, row.subagent_id),
        };
        let Ok(detail) = context.tree().inspect_one(row.subagent_id).await else { continue };
        let snapshot = snapshot_of(&detail, &found.task_id, &found.context_id, || pending_for(&found));
        listed.push(Listed {
            snapshot,
            subagent: row.subagent_id,
            context: Some(context.clone()),
            session: session.to_owned(),
        });
        if listed.len() >= LIST_SCAN {
            return;
        }
    }
}

// The tasks of a context no node serves here, from the store: its roots'
// records as last stored, and its newest retired tasks.
async fn stored(face: &A2aFace, asker: &Asker, session: &str, listed: &mut Vec<Listed>) {
    let store = face.sessions.service.store();
    if !store.is_durable() {
        return;
    }
    let mut details: Vec<SubagentDetail> = match store.load(session).await {
        Ok(Some(stored)) => stored.subagents.iter().filter(|sub| sub.row.depth == 0).map(detail_of).collect(),
        Ok(None) => return,
        Err(err) => {
            log::warn!("a2a: context {session} could not be read from the store: {err}");
            return;
        }
    };
    let kept = u32::try_from(face.sessions.service.limits().retired_kept).unwrap_or(u32::MAX);
    if let Ok(rows) = store.query(FaceQuery::RetiredNewest { session: session.to_owned(), limit: kept }).await {
        details.extend(rows.iter().filter_map(|text| RetiredTask::parse(text)).map(|task| task.detail));
    }
    for detail in details {
        let Some(context_id) = context_id_of(&detail.config.metadata) else { continue };
        if session_of(asker.principal.as_deref(), context_id) != session {
            continue;
        }
        let subagent = detail.view.subagent_id;
        let snapshot = snapshot_of(&detail, &task_id(session, subagent), context_id, || None);
        listed.push(Listed { snapshot, subagent, context: None, session: session.to_owned() });
        if listed.len() >= LIST_SCAN {
            return;
        }
    }
}

// The messages that followed a listed task's first.
async fn followups(face: &A2aFace, session: &str, context: Option<&Context>, subagent: SubagentId) -> Vec<Value> {
    if let Some(context) = context {
        return context.followups(subagent).await;
    }
    let query = FaceQuery::History { session: session.to_owned(), id: subagent };
    match face.sessions.service.store().query(query).await {
        Ok(rows) => rows.first().and_then(|text| serde_json::from_str(text).ok()).unwrap_or_default(),
        Err(_) => Vec::new(),
    }
}

fn context_id_of(metadata: &Map<String, Value>) -> Option<&str> {
    metadata.get("a2a").and_then(|a2a| a2a["contextId"].as_str())
}

// A stored root as a record's detail (when it last changed is not stored).
fn detail_of(sub: &StoredSubagent) -> SubagentDetail {
    let row = &sub.row;
    SubagentDetail {
        view: SubagentView {
            subagent_id: sub.id,
            parent: row.parent,
            name: row.config.name.as_str().into(),
            model: row.config.model.as_str().into(),
            status: row.status,
            depth: row.depth,
            children: 0,
            usage: row.usage,
            subtree_usage: row.usage,
            budget_remaining: None,
            task_ms: None,
            task_started_at: None,
            task_ended_at: None,
            waiting_for: None,
            queued: false,
            tasks_started: row.tasks_started,
            error: row.error.clone(),
        },
        config: row.config.clone(),
        task: None,
        result: row.result.clone(),
        child_ids: Vec::new(),
    }
}

// An RFC 3339 timestamp, as Unix seconds.
fn parse_timestamp(text: &str) -> Result<f64, RpcError> {
    time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .map(|at| at.unix_timestamp_nanos() as f64 / 1e9)
        .map_err(|_| RpcError::invalid_params("`statusTimestampAfter` must be an RFC 3339 timestamp"))
}
