//! `POST /session`: opens a session (authorized at once with a valid bearer
//! token, and then that token's alone), counted against its caller
//! (`max_sessions_per_caller`: 429 past it), stores it, and answers its id.

use actix_web::http::header;
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use futures_util::StreamExt;
use serde_json::json;

use super::request_info::{bearer, peer};
use super::responses::{body_timeout, closing, error, ok_for};
use crate::session::HttpSessions;
use crate::session::{caller_key, is_caller_limit, INPUT_QUEUE};

pub(crate) async fn create(
    req: HttpRequest,
    mut body: web::Payload,
    sessions: web::Data<HttpSessions>,
) -> HttpResponse {
    // The body is not used, but it must arrive in time like any other.
    let deadline = tokio::time::sleep(sessions.service.limits().http_body_timeout());
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            _ = &mut deadline => return closing(body_timeout(&sessions, &req, 0), body),
            chunk = body.next() => match chunk {
                None => break,
                Some(Ok(_)) => {}
                Some(Err(_)) => return error(StatusCode::BAD_REQUEST, "could not read the request body"),
            },
        }
    }
    let authorized = match bearer(&req) {
        None => false,
        Some(token) if sessions.service.auth().check(Some(token)) => true,
        Some(_) => {
            crate::metrics::metrics().auth_failed("http");
            log::warn!("http POST /session from {}: Authorization bearer token refused", peer(&req));
            return error(StatusCode::UNAUTHORIZED, "invalid bearer token");
        }
    };
    // `/send` never waits, so the input queue holds what the session may
    // have in flight: a client pipelining below `max_inflight_requests` is
    // not told it is busy while the session catches up.
    let queue = sessions.service.limits().max_inflight_requests.max(INPUT_QUEUE);
    let opened = match authorized {
        true => sessions.service.open_authorized_with_input(queue),
        false => sessions.service.open_with_input(queue),
    };
    let principal = bearer(&req).and_then(|token| sessions.service.auth().principal(Some(token)));
    // A bearer's session is its holder's alone, and counts against them at
    // once (else from its handshake, against its token or address).
    let opened = opened.and_then(|opened| {
        if authorized {
            let slot = opened.connection.slot();
            slot.charge(caller_key(principal.as_deref(), None))?;
            slot.owner().opened_by_bearer(principal.clone());
        }
        Ok(opened)
    });
    // Stored at once: any node can serve its first `/send`.
    let stored = match opened {
        Ok(opened) => sessions.service.store_new_session(&opened, principal, "http").await.map(|()| opened),
        Err(err) => Err(err),
    };
    match stored {
        Ok(mut opened) => {
            opened.connection = opened.connection.with_peer(peer(&req)).with_transport("http");
            let id = sessions.clone().into_inner().insert(opened);
            // The id in a header too, for routers that hash on it (HAProxy).
            ok_for(&sessions, &id).json(json!({ "session_id": id }))
        }
        Err(err) if is_caller_limit(&err) => {
            log::warn!("http POST /session from {} refused: {}", peer(&req), err.message);
            HttpResponse::build(StatusCode::TOO_MANY_REQUESTS)
                .insert_header((header::RETRY_AFTER, "1"))
                .json(json!({ "ok": false, "error": err.message, "retryable": true }))
        }
        Err(err) => {
            log::warn!("http POST /session from {} refused: {}", peer(&req), err.message);
            HttpResponse::build(StatusCode::SERVICE_UNAVAILABLE)
                .insert_header((header::RETRY_AFTER, "1"))
                .json(json!({ "ok": false, "error": err.message, "retryable": true }))
        }
    }
}
