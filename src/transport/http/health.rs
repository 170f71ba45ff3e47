//! `GET /health` (the node's figures) and `GET /ready` (whether a router
//! should send it anything).

use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use serde_json::json;
use std::sync::atomic::Ordering;

use crate::session::HttpSessions;

/// `GET /ready`: 200 while the node can serve (its store answers and, on
/// a cluster node, its leases are renewed), else 503; 503 too once it shuts
/// down, so a router sends nothing more its way.
pub(crate) async fn ready(sessions: web::Data<HttpSessions>) -> HttpResponse {
    let store = sessions.service.store();
    if sessions.service.shutdown_token().is_cancelled() {
        return HttpResponse::build(StatusCode::SERVICE_UNAVAILABLE)
            .json(json!({ "ready": false, "store": store.kind(), "error": "shutting down" }));
    }
    // A store that hangs (the first seconds of an outage, before a
    // connection fails) is out of reach as far as a router is concerned.
    let error = match tokio::time::timeout(READY_DEADLINE, store.ping()).await {
        Ok(Ok(())) => return HttpResponse::Ok().json(json!({ "ready": true, "store": store.kind() })),
        Ok(Err(err)) => err.to_string(),
        Err(_) => format!("the store did not answer within {} ms", READY_DEADLINE.as_millis()),
    };
    HttpResponse::build(StatusCode::SERVICE_UNAVAILABLE)
        .json(json!({ "ready": false, "store": store.kind(), "error": error }))
}

/// How long `/ready` waits for the store before it answers 503.
const READY_DEADLINE: std::time::Duration = std::time::Duration::from_millis(500);

pub(crate) async fn health(sessions: web::Data<HttpSessions>) -> HttpResponse {
    let store = sessions.service.store();
    let stats = store.stats();
    HttpResponse::Ok().json(json!({
        "status": "ok",
        "sessions": sessions.service.sessions(),
        "streams": sessions.streams(),
        "store": {
            "kind": store.kind(),
            "commits": stats.commits.load(Ordering::Relaxed),
            "changes": stats.changes.load(Ordering::Relaxed),
            "failures": stats.failures.load(Ordering::Relaxed),
        },
        "node": store.node_id(),
        "owned_sessions": store.owned_sessions(),
    }))
}
