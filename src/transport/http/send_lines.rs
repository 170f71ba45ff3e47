//! `POST /send`: the body's NDJSON lines handed to the session without
//! waiting (journaled first with a durable store); 429 when its input queue
//! is full, 503 when the session moved to another node meanwhile.

use actix_web::http::header;
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use futures_util::StreamExt;
use serde_json::json;
use tokio::sync::mpsc::error::TrySendError;

use super::request_info::lookup;
use super::responses::{body_timeout, closing, error, ok_for};
use crate::protocol::codec::{Frame, LineDecoder};
use crate::session::HttpEntry;
use crate::session::HttpSessions;

// Hands one frame to the session without waiting: a full input queue (the
// session is at its in-flight bound) is 429, an ended session 404.
fn offer(session: &HttpEntry, frame: Frame, accepted: &mut usize) -> Result<(), Box<HttpResponse>> {
    // With a durable store the frame is journaled first: once `/send` says
    // 200, a restart replays whatever of it was not served.
    let frame = match frame {
        Frame::Line(line) => match session.log.journal_inbound(&line) {
            Some(seq) => Frame::Journaled { seq, line },
            None if session.log.is_detached() => return Err(Box::new(moved())),
            None => Frame::Line(line),
        },
        other => other,
    };
    match session.input.try_send(frame) {
        Ok(()) => {
            *accepted += 1;
            Ok(())
        }
        Err(TrySendError::Full(_)) => Err(Box::new({
            crate::metrics::metrics().bound_rejected("input_max_bytes");
            HttpResponse::build(StatusCode::TOO_MANY_REQUESTS)
                .insert_header((header::RETRY_AFTER, "1"))
                .json(json!({ "ok": false, "error": "busy", "accepted": *accepted }))
        })),
        Err(TrySendError::Closed(_)) => Err(Box::new(error(StatusCode::NOT_FOUND, "session has ended"))),
    }
}

// The 503 for a frame that reached a session just as it stopped being
// served here (another node took it): it was not kept, the client sends it
// again (and is routed to the session's new node).
fn moved() -> HttpResponse {
    HttpResponse::build(StatusCode::SERVICE_UNAVAILABLE).insert_header((header::RETRY_AFTER, "0")).json(
        json!({ "ok": false, "error": "session moved to another node while this request arrived; send it again" }),
    )
}

pub(crate) async fn send(req: HttpRequest, mut body: web::Payload, sessions: web::Data<HttpSessions>) -> HttpResponse {
    let mut ended = false;
    let response = take_lines(&req, &mut body, &mut ended, &sessions).await;
    if ended {
        response
    } else {
        closing(response, body)
    }
}

// Serves `/send`, reading `body` until it ends (then sets `ended`), the
// session refuses a line, or the body timeout.
async fn take_lines(
    req: &HttpRequest,
    body: &mut web::Payload,
    ended: &mut bool,
    sessions: &web::Data<HttpSessions>,
) -> HttpResponse {
    let (id, session) = match lookup(req, sessions).await {
        Ok(found) => found,
        Err(response) => return *response,
    };
    session.touch();
    let mut decoder = LineDecoder::new(sessions.service.limits().max_line_bytes);
    let mut frames = Vec::new();
    let mut accepted = 0;
    let deadline = tokio::time::sleep(sessions.service.limits().http_body_timeout());
    tokio::pin!(deadline);
    loop {
        let chunk = tokio::select! {
            _ = &mut deadline => return body_timeout(sessions, req, accepted),
            chunk = body.next() => chunk,
        };
        let Some(chunk) = chunk else {
            *ended = true;
            break;
        };
        let Ok(chunk) = chunk else {
            return error(StatusCode::BAD_REQUEST, "could not read the request body");
        };
        decoder.feed(&chunk, &mut frames);
        for frame in frames.drain(..) {
            if let Err(response) = offer(&session, frame, &mut accepted) {
                return *response;
            }
        }
    }
    if let Some(frame) = decoder.finish() {
        if let Err(response) = offer(&session, frame, &mut accepted) {
            return *response;
        }
    }
    session.touch();
    if session.log.is_recording() {
        // 200 only once the frames are committed.
        session.log.store().flush().await;
    }
    ok_for(sessions, &id).json(json!({ "ok": true }))
}
