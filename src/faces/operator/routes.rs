//! The operator's page and API: `GET /ui` (the live view, `ui.rs`) and
//! under `/admin`:
//!
//! - `GET /admin/sessions`: every open session (id, transport, peer, agent,
//!   age) with its subagents counted by status.
//! - `GET /admin/sessions/{id}[?limit=N]`: the session and its tree, one
//!   row per subagent in tree order (parent before children, oldest
//!   first): name, model, status, depth, parent, tokens (own and subtree),
//!   remaining budget, how long its task has run, its last error. At most
//!   `limit` rows (default 10 000, at most 100 000); `truncated` says when
//!   more exist.
//! - `GET /admin/sessions/{id}/subagents/{sid}`: one subagent in detail:
//!   its row plus config, task, last result and children.
//! - `GET /admin/stream[?session=ID]`: SSE of every session's events (or one
//!   session's). `event: subagent`, `data: {"session", "event"}` where
//!   `event` is the `SUBAGENT_EVENT` exactly as the session's client gets
//!   it; `event: session`, `data: {"session", "state": "opened"|"closed",
//!   "summary"}` for every session; `event: resync` when the stream fell
//!   behind and missed some (reload the state). Events go out in batches,
//!   at most one every 100 ms. A comment line every 15 s keeps it alive. At
//!   most [`MAX_WATCHES`] streams at once (503 past it).
//! - `GET /admin/approvals` and `POST /admin/approvals/{id}`: the requests
//!   waiting for a person, across sessions, and answering one
//!   (`people.rs`).
//! - `POST /admin/sessions/{id}/subagents/{sid}/cancel` and `…/terminate`:
//!   as the protocol's cancel and terminate (the session's client sees the
//!   same events); `{"ok": true, "stopped": [ids]}`. Each needs the header
//!   `X-Subagentd-Confirm: yes`: the page sends it once the operator has
//!   confirmed, and a cross-site form cannot (it forces a CORS preflight,
//!   which is never answered).
//!
//! Who may use them (tokens, loopback): `access.rs`.

use actix_web::http::{header, StatusCode};
use actix_web::web::{self, Bytes};
use actix_web::{HttpRequest, HttpResponse};
use futures_util::future::join_all;
use serde::Deserialize;
use serde_json::json;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use super::access::{refusal, refuse, AdminApi, CONFIRM_HEADER};
use crate::admin::hub::MAX_WATCHES;
use crate::admin::{LiveSession, Next, Watch};
use crate::error::{ErrorCode, HostError};
use crate::ids::SubagentId;
use crate::ops::{Caller, Operation, Outcome};
use crate::transport::lines::WRITE_BATCH;

/// Rows a tree answer holds unless `limit` says otherwise.
const DEFAULT_ROWS: usize = 10_000;

/// Most rows a tree answer holds.
const MAX_ROWS: usize = 100_000;

/// How often an idle stream sends a comment (a dead connection is found).
const KEEPALIVE: Duration = Duration::from_secs(15);

/// How long a stream gathers events before it sends them: an operator does
/// not see 100 ms, and the page then wakes ten times a second, not once per
/// event.
const COALESCE: Duration = Duration::from_millis(100);

/// Adds the page and the API to an actix-web app.
pub(crate) fn routes(cfg: &mut web::ServiceConfig, api: web::Data<AdminApi>) {
    cfg.app_data(api)
        .route("/ui", web::get().to(super::ui::page))
        .route("/ui/", web::get().to(super::ui::page))
        .route("/ui/{file}", web::get().to(super::ui::asset))
        .route("/admin/sessions", web::get().to(sessions))
        .route("/admin/sessions/{id}", web::get().to(tree))
        .route("/admin/sessions/{id}/subagents/{sid}", web::get().to(subagent))
        .route("/admin/sessions/{id}/subagents/{sid}/{action}", web::post().to(act))
        .route("/admin/stream", web::get().to(stream))
        .route("/admin/approvals", web::get().to(super::people::pending))
        .route("/admin/approvals/{id}", web::post().to(super::people::answer));
}

// A session's summary with its subagents counted by status.
async fn summary(session: &LiveSession) -> serde_json::Value {
    let mut summary = session.summary();
    if let Ok(counts) = session.tree.status_counts().await {
        summary["subagents"] = json!(counts);
        summary["total"] = json!(counts.total());
    }
    summary
}

async fn sessions(req: HttpRequest, api: web::Data<AdminApi>) -> HttpResponse {
    if let Some(refused) = refusal(&req, &api, false) {
        return refused;
    }
    let listed = api.service.admin().sessions();
    // Each count asks one supervisor; they answer side by side.
    let summaries = tokio::task::unconstrained(join_all(listed.iter().map(|session| summary(session)))).await;
    // The host's MCP servers, for the page's header.
    let servers: Vec<_> = api
        .service
        .host()
        .tools()
        .states()
        .into_iter()
        .map(|(name, state, tools)| {
            let reason = match &state {
                crate::tools::ServerState::Failed(why) => Some(why.clone()),
                _ => None,
            };
            json!({ "name": name, "state": state.as_str(), "reason": reason, "tools": tools })
        })
        .collect();
    HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(json!({ "sessions": summaries, "mcp_servers": servers }))
}

fn unknown_session(id: &str) -> HttpResponse {
    refuse(StatusCode::NOT_FOUND, &format!("no open session {id}"))
}

// The HTTP answer for a failed request on a tree.
fn failed(err: &HostError) -> HttpResponse {
    let status = match err.code {
        ErrorCode::UnknownSubagent => StatusCode::NOT_FOUND,
        ErrorCode::InvalidState => StatusCode::CONFLICT,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    HttpResponse::build(status).json(json!({ "ok": false, "error": err.message, "code": err.code.as_str() }))
}

#[derive(Deserialize)]
struct TreeQuery {
    limit: Option<usize>,
}

async fn tree(
    req: HttpRequest,
    path: web::Path<String>,
    query: web::Query<TreeQuery>,
    api: web::Data<AdminApi>,
) -> HttpResponse {
    if let Some(refused) = refusal(&req, &api, false) {
        return refused;
    }
    let Some(session) = api.service.admin().session(&path) else { return unknown_session(&path) };
    let limit = query.limit.unwrap_or(DEFAULT_ROWS).min(MAX_ROWS);
    let (rows, total) = match session.tree.inspect(limit).await {
        Ok(found) => found,
        Err(err) => return failed(&err),
    };
    HttpResponse::Ok().insert_header((header::CACHE_CONTROL, "no-store")).json(json!({
        "session": summary(&session).await,
        "subagents": rows,
        "truncated": total > limit,
    }))
}

// The session and subagent a path names, or the answer refusing it.
fn target(api: &AdminApi, id: &str, sid: &str) -> Result<(Arc<LiveSession>, SubagentId), Box<HttpResponse>> {
    let Some(session) = api.service.admin().session(id) else { return Err(Box::new(unknown_session(id))) };
    match SubagentId::parse(sid) {
        Some(sid) => Ok((session, sid)),
        None => Err(Box::new(failed(&HostError::unknown_subagent(sid)))),
    }
}

async fn subagent(req: HttpRequest, path: web::Path<(String, String)>, api: web::Data<AdminApi>) -> HttpResponse {
    if let Some(refused) = refusal(&req, &api, false) {
        return refused;
    }
    let (session, sid) = match target(&api, &path.0, &path.1) {
        Ok(found) => found,
        Err(refused) => return *refused,
    };
    match session.tree.inspect_one(sid).await {
        Ok(detail) => HttpResponse::Ok().insert_header((header::CACHE_CONTROL, "no-store")).json(detail),
        Err(err) => failed(&err),
    }
}

async fn act(req: HttpRequest, path: web::Path<(String, String, String)>, api: web::Data<AdminApi>) -> HttpResponse {
    if let Some(refused) = refusal(&req, &api, false) {
        return refused;
    }
    let (id, sid, action) = path.into_inner();
    if action != "cancel" && action != "terminate" {
        return refuse(StatusCode::NOT_FOUND, "the actions are cancel and terminate");
    }
    let confirmed = req.headers().get(CONFIRM_HEADER).and_then(|value| value.to_str().ok());
    if !confirmed.is_some_and(|value| value.eq_ignore_ascii_case("yes")) {
        return refuse(StatusCode::BAD_REQUEST, &format!("{action} needs the header {CONFIRM_HEADER}: yes"));
    }
    let (session, target_id) = match target(&api, &id, &sid) {
        Ok(found) => found,
        Err(refused) => return *refused,
    };
    log::info!("admin: {action} {sid} in session {id}, asked by {}", crate::transport::http::request_info::peer(&req));
    let operation = match action.as_str() {
        "cancel" => Operation::Cancel { target: target_id },
        _ => Operation::Terminate { target: target_id },
    };
    let operator = Caller::Operator { desk: session.tree.desk(), tree: Some(&session.tree) };
    match operation.run(operator).await {
        Ok(Outcome::Cancelled { stopped, .. } | Outcome::Terminated { stopped, .. }) => {
            HttpResponse::Ok().json(json!({ "ok": true, "action": action, "stopped": stopped }))
        }
        Ok(other) => failed(&HostError::runtime(format!("{action} answered {other:?}"))),
        Err(err) => failed(&err),
    }
}

#[derive(Deserialize)]
struct StreamQuery {
    session: Option<String>,
}

// One attached stream and what it still has to send first.
struct Streaming {
    watch: Watch,
    first: Option<Bytes>,
    shutdown: tokio_util::sync::CancellationToken,
}

async fn next_chunk(mut streaming: Streaming) -> Option<(Result<Bytes, Infallible>, Streaming)> {
    if let Some(first) = streaming.first.take() {
        return Some((Ok(first), streaming));
    }
    let next = tokio::select! {
        _ = streaming.shutdown.cancelled() => return None,
        next = tokio::time::timeout(KEEPALIVE, streaming.watch.next()) => next,
    };
    let mut next = match next {
        Err(_idle) => return Some((Ok(Bytes::from_static(b": keepalive\n\n")), streaming)),
        Ok(next) => next,
    };
    // What comes within COALESCE goes out in the same chunk (one write, one
    // wake-up of the page): a busy session's events trickle in one by one.
    tokio::time::sleep(COALESCE).await;
    let mut chunk = Vec::new();
    loop {
        match next {
            Next::Notice(notice) => {
                chunk.extend_from_slice(b"event: ");
                chunk.extend_from_slice(notice.kind.as_bytes());
                chunk.extend_from_slice(b"\ndata: ");
                chunk.extend_from_slice(notice.data.as_bytes());
                chunk.extend_from_slice(b"\n\n");
            }
            Next::Missed(missed) => {
                chunk.extend_from_slice(format!("event: resync\ndata: {{\"missed\":{missed}}}\n\n").as_bytes())
            }
            Next::Closed if chunk.is_empty() => return None,
            Next::Closed => break,
        }
        if chunk.len() >= WRITE_BATCH {
            break;
        }
        match streaming.watch.try_next() {
            Some(queued) => next = queued,
            None => break,
        }
    }
    Some((Ok(Bytes::from(chunk)), streaming))
}

async fn stream(req: HttpRequest, query: web::Query<StreamQuery>, api: web::Data<AdminApi>) -> HttpResponse {
    if let Some(refused) = refusal(&req, &api, false) {
        return refused;
    }
    let session = query.into_inner().session.filter(|id| !id.is_empty()).map(Arc::<str>::from);
    let Some(watch) = api.service.admin().hub().watch(session) else {
        crate::metrics::metrics().bound_rejected("admin_streams");
        return HttpResponse::build(StatusCode::SERVICE_UNAVAILABLE)
            .insert_header((header::RETRY_AFTER, "5"))
            .json(json!({ "ok": false, "error": format!("{MAX_WATCHES} admin streams are open; try again later") }));
    };
    // The first chunk goes out at once: the client knows it is attached.
    let first = Some(Bytes::from_static(b"retry: 2000\n: attached\n\n"));
    let shutdown = api.service.shutdown_token().clone();
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .streaming(futures_util::stream::unfold(Streaming { watch, first, shutdown }, next_chunk))
}
