//! The A2A (Agent2Agent) v1.0 front door, one more face over the host's
//! operations:
//!
//! - `GET /.well-known/agent-card.json` (and the legacy
//!   `/.well-known/agent.json`): the agent card (`card`).
//! - `POST /a2a`: JSON-RPC 2.0 with the v1.0 methods `SendMessage`,
//!   `SendStreamingMessage`, `GetTask`, `ListTasks`, `CancelTask` and
//!   `SubscribeToTask` (`methods`; streams in `stream`, lists in `listing`).
//!
//! The face itself (`face`) is defined apart from this map and its routes,
//! so its files import it from where it is defined, with no circle through
//! this file. A context is a session (`../hosted/`), a task a root subagent made from
//! `[a2a] agent` (`tasks`), written as A2A's objects (`model`) over
//! JSON-RPC (`rpc`). The `[auth]` tokens and every `[limits]` bound apply:
//! a context takes a `max_sessions` place like any session, and its tasks
//! count against the session's limits.

mod card;
mod face;
mod listing;
mod methods;
mod model;
mod rpc;
mod stream;
mod tasks;
mod tck;

use actix_web::web;
use std::sync::Arc;

pub(crate) use face::A2aFace;

/// Adds the face's routes (none when `[a2a] enabled = false`).
pub(crate) fn routes(cfg: &mut web::ServiceConfig, face: &Arc<A2aFace>) {
    if !face.config.enabled {
        return;
    }
    // A request body as large as a protocol line may be.
    let body_limit = face.sessions.service.limits().max_line_bytes;
    cfg.app_data(web::Data::from(face.clone()));
    // (Also under `/a2a`, where clients that derive the card's URL from
    // the interface's look.)
    for path in ["/.well-known/agent-card.json", "/.well-known/agent.json", "/a2a/.well-known/agent-card.json"] {
        cfg.service(web::resource(path).route(web::get().to(card::get_card)).route(web::head().to(card::get_card)));
    }
    for path in ["/a2a", "/a2a/"] {
        cfg.service(
            web::resource(path)
                .wrap(crate::transport::http::responses::node_header(&face.sessions))
                .app_data(web::PayloadConfig::new(body_limit))
                .route(web::post().to(methods::rpc)),
        );
    }
}
