//! What a request says: the session it names (live here, or restored from
//! the store) if the caller may use it, its peer, and its bearer token.

use actix_web::http::header;
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::json;
use std::sync::Arc;

use super::responses::{error, SESSION_HEADER};
use crate::session::HttpEntry;
use crate::session::HttpSessions;
use crate::session::Refusal;

pub(super) async fn lookup(
    req: &HttpRequest,
    sessions: &web::Data<HttpSessions>,
) -> Result<(String, Arc<HttpEntry>), Box<HttpResponse>> {
    let Some(id) = req.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()) else {
        return Err(Box::new(error(StatusCode::BAD_REQUEST, "missing X-Session-Id header")));
    };
    // Who asks: a bearer token must be valid before anything is looked up.
    let auth = sessions.service.auth();
    let token = bearer(req);
    if token.is_some() && !auth.check(token) {
        crate::metrics::metrics().auth_failed("http");
        log::warn!("http {} {} from {}: Authorization bearer token refused", req.method(), req.path(), peer(req));
        return Err(Box::new(unauthorized("invalid bearer token")));
    }
    let caller = Caller { auth_enabled: auth.is_enabled(), bearer: token.is_some(), principal: auth.principal(token) };
    if let Some(session) = sessions.get(id) {
        if !session.log.is_detached() {
            caller.may_use(id, &session)?;
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
        Ok(Some(session)) => {
            caller.may_use(id, &session)?;
            Ok((id.to_owned(), session))
        }
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

// Who names a session: whether tokens are configured, whether the request
// carries a (valid) bearer token, and its principal.
struct Caller {
    auth_enabled: bool,
    bearer: bool,
    principal: Option<String>,
}

impl Caller {
    // Whether this caller may use `session` (see `crate::session::Owner`):
    // a refusal touches nothing of it.
    fn may_use(&self, id: &str, session: &HttpEntry) -> Result<(), Box<HttpResponse>> {
        match session.owner.admits(self.auth_enabled, self.bearer, self.principal.as_deref()) {
            Ok(()) => Ok(()),
            Err(Refusal::Face(face)) => Err(Box::new(error(
                StatusCode::NOT_FOUND,
                &format!("session {id} is an {face} session: it is served on /{face} only, not on /send or /stream"),
            ))),
            Err(Refusal::NotYours) => {
                log::warn!("http session {id}: refused to another token's holder");
                Err(Box::new(error(StatusCode::NOT_FOUND, "unknown session")))
            }
            Err(Refusal::TokenRequired) => Err(Box::new(unauthorized(
                "this session was opened with a bearer token: every request for it must carry the same one",
            ))),
        }
    }
}

// A 401 that says how to authenticate.
fn unauthorized(message: &str) -> HttpResponse {
    let mut response = error(StatusCode::UNAUTHORIZED, message);
    response.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
    response
}

/// Whether `id` has the form of the ids this host makes (32 lowercase hex
/// digits).
fn is_session_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

pub(crate) fn peer(req: &HttpRequest) -> String {
    req.peer_addr().map_or_else(|| "an unknown peer".to_owned(), |addr| addr.to_string())
}

// The token of an `Authorization: Bearer <token>` header.
pub(crate) fn bearer(req: &HttpRequest) -> Option<&str> {
    let value = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}
