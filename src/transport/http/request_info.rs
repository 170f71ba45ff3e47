//! What a request says: the session it names (live here, or restored from
//! the store), its peer, and its bearer token.

use actix_web::http::header;
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::json;
use std::sync::Arc;

use super::responses::{error, SESSION_HEADER};
use super::sessions::HttpEntry;
use super::HttpSessions;

pub(super) async fn lookup(
    req: &HttpRequest,
    sessions: &web::Data<HttpSessions>,
) -> Result<(String, Arc<HttpEntry>), Box<HttpResponse>> {
    let Some(id) = req.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()) else {
        return Err(Box::new(error(StatusCode::BAD_REQUEST, "missing X-Session-Id header")));
    };
    if let Some(session) = sessions.get(id) {
        if !session.log.is_detached() {
            return Ok((id.to_owned(), session));
        }
        // Another node took it (or asked for it): it is no longer served
        // here, but may be again, from the store.
        sessions.remove_entry(id, &session);
    }
    // Not live here: a stored session (after a restart) comes back. Only an
    // id of the host's own form is looked up, so made-up ids cost no read.
    if !is_session_id(id) {
        return Err(Box::new(error(StatusCode::NOT_FOUND, "unknown session")));
    }
    match sessions.clone().into_inner().restore(id).await {
        Ok(Some(session)) => Ok((id.to_owned(), session)),
        Ok(None) => Err(Box::new(error(StatusCode::NOT_FOUND, "unknown session"))),
        Err(err) => {
            log::warn!("http session {id}: restoring it from the store failed: {}", err.message);
            Err(Box::new(
                HttpResponse::build(StatusCode::SERVICE_UNAVAILABLE)
                    .insert_header((header::RETRY_AFTER, "1"))
                    .json(json!({ "ok": false, "error": err.message })),
            ))
        }
    }
}

/// Whether `id` has the form of the ids this host makes (32 lowercase hex
/// digits).
fn is_session_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

pub(super) fn peer(req: &HttpRequest) -> String {
    req.peer_addr().map_or_else(|| "an unknown peer".to_owned(), |addr| addr.to_string())
}

// The token of an `Authorization: Bearer <token>` header.
pub(super) fn bearer(req: &HttpRequest) -> Option<&str> {
    let value = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}
