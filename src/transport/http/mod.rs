//! HTTP + SSE (actix-web), as the A2E SDK's HTTP transport expects:
//!
//! - `POST /session` → `{"session_id": "..."}`. The session is
//!   unauthenticated until its handshake succeeds (see
//!   [`crate::session::PoolSlot`]): 503 when
//!   `max_unauthenticated_sessions` such sessions are open, or `max_sessions`
//!   authenticated ones. A client may send `Authorization: Bearer <token>`:
//!   with a valid token the session takes a `max_sessions` slot at once and
//!   unauthenticated sessions can never crowd it out (a wrong token is 401).
//! - `POST /send` with header `X-Session-Id`, body one or more NDJSON lines →
//!   `{"ok": true}` at once; the replies go to the stream. 400 without the
//!   header, 404 for an unknown, expired or ended session. It never waits
//!   for the session: the session's input queue holds
//!   `max(max_inflight_requests, 64)` lines, and when it is full (the
//!   session is at its `max_inflight_requests` bound and that many more
//!   lines wait behind) it answers 429 with
//!   `{"ok": false, "error": "busy", "accepted": N}` and `Retry-After: 1`:
//!   the first N lines of the body were taken (and will be answered), the
//!   rest were not.
//! - `GET /stream` with header `X-Session-Id` → `text/event-stream`, each
//!   message as `data: <json>\n\n`. Messages produced while no stream is
//!   attached wait in the session's bounded outbox and are sent on attach; a
//!   new stream for the same session replaces the previous one, which ends
//!   with one last event, `event: closed` with `data:` an A2E `error`
//!   (`code` `invalid_state`, `detail.reason` `stream_replaced`), so an SSE
//!   client that ignores `event:` lines sees it as a message too.
//! - `GET /health` → `{"status": "ok", "sessions": N, "streams": M, …}`;
//!   `GET /ready` → 200 while the node can serve, 503 while its store is out
//!   of reach (or does not answer within 500 ms) or it shuts down; it
//!   answers within that deadline whatever the store does.
//! - `GET /metrics` → the Prometheus metrics ([`metrics`]).
//! - `GET /ui` and `/admin/*` → the operator's live view and its API
//!   ([`admin`]).
//! - `POST /session`, `/send` and `/stream` name the session in an
//!   `X-Session-Id` response header (a router learns where it is served),
//!   and on a cluster node the node in `X-Subagentd-Node`. A request naming
//!   a session that another node took is served by taking it back from the
//!   store (see `crate::store` and its cluster module); a `/send` line that
//!   arrives just as its session moves away is refused with 503 to be sent
//!   again.
//!
//! SSE has no acknowledgements: a message written into a connection that
//! died before the host noticed is lost. A client closing its connection is
//! noticed at once (half-closed connections are not kept), so a client that
//! reconnects after its old stream is gone loses nothing.
//!
//! A session with no request and no attached stream for
//! `limits.session_idle_seconds` is closed and forgotten. A session that has
//! ended (`shutdown`) is forgotten once a stream has delivered its last
//! lines, or `[server] final_flush_ms` after it ended with no stream
//! attached; until then it still counts toward `max_sessions`. Requests sent
//! while it drains after `shutdown` are answered on the stream with
//! `invalid_state`; once it has ended, `/send` answers 404. See
//! `sessions.rs` for the lifecycle.
//!
//! Bounds on connections: a request body (`/send`, `/session`) must arrive
//! in full within `limits.http_body_timeout_ms`, else the request is
//! answered 408 (`{"ok": false, "error": "body_timeout", "accepted": N}`,
//! N lines of a `/send` body were taken) and the connection closed; the
//! server holds at most `limits.max_connections` connections (split evenly
//! over its workers) and stops accepting at that bound.

use actix_web::body::{BodySize, BoxBody, MessageBody};
use actix_web::dev::Server;
use actix_web::http::header;
use actix_web::http::StatusCode;
use actix_web::web::{self, Bytes};
use actix_web::{App, HttpRequest, HttpResponse, HttpServer};
use futures_util::StreamExt;
use serde_json::json;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::mpsc::error::TrySendError;
use tokio_util::sync::CancellationToken;

use super::lines::WRITE_BATCH;
use crate::error::{ErrorCode, HostError};
use crate::protocol::codec::{Frame, LineDecoder};
use crate::session::error_line;
use crate::session::service::INPUT_QUEUE;
use crate::session::OutboxReceiver;

pub mod admin;
mod adopt;
pub mod metrics;
mod sessions;
mod ui;

pub use adopt::adopt_orphans;
pub use sessions::HttpSessions;
use sessions::{lock, HttpEntry, ReaderHold};

/// The header naming the session of `/send` and `/stream`.
pub const SESSION_HEADER: &str = "X-Session-Id";

/// The header naming the node that answered, on a cluster node (for
/// operators, and for tests that check where sessions went).
pub const NODE_HEADER: &str = "X-Subagentd-Node";

// A 200 naming the session (a router learns where it is served) and, on a
// cluster node, the node.
fn ok_for(sessions: &HttpSessions, id: &str) -> actix_web::HttpResponseBuilder {
    let mut response = HttpResponse::Ok();
    response.insert_header((SESSION_HEADER, id));
    if let Some(node) = sessions.service.store().node_id() {
        response.insert_header((NODE_HEADER, node));
    }
    response
}

fn error(status: StatusCode, message: &str) -> HttpResponse {
    HttpResponse::build(status).json(json!({ "ok": false, "error": message }))
}

async fn lookup(
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

// A response body that holds the unread request body until it has been
// sent: actix then closes the connection after the response. (A dropped
// chunked request body is drained instead, for as long as the client keeps
// trickling it.)
struct HoldingRequestBody {
    // The response's own body.
    inner: BoxBody,
    // The request body not read to its end.
    _unread: web::Payload,
}

impl MessageBody for HoldingRequestBody {
    type Error = <BoxBody as MessageBody>::Error;

    fn size(&self) -> BodySize {
        self.inner.size()
    }

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, Self::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_next(cx)
    }
}

// Answers a request whose body was not read to its end (refused early, or
// cut off at the body timeout) and closes its connection.
fn closing(response: HttpResponse, unread: web::Payload) -> HttpResponse {
    response
        .map_body(|head, inner| {
            head.set_connection_type(actix_web::http::ConnectionType::Close);
            HoldingRequestBody { inner, _unread: unread }
        })
        .map_into_boxed_body()
}

// The 408 for a body that did not arrive within `http_body_timeout_ms`.
fn body_timeout(sessions: &HttpSessions, req: &HttpRequest, accepted: usize) -> HttpResponse {
    let ms = sessions.service.limits().http_body_timeout_ms;
    crate::metrics::metrics().bound_rejected("http_body_timeout_ms");
    let session = req.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()).unwrap_or("-");
    log::warn!(
        "http {} {} from {} (session {session}): body not received within http_body_timeout_ms ({ms} ms); answered 408",
        req.method(),
        req.path(),
        peer(req)
    );
    HttpResponse::build(StatusCode::REQUEST_TIMEOUT).json(json!({
        "ok": false,
        "error": "body_timeout",
        "message": format!("the request body did not arrive within http_body_timeout_ms ({ms} ms)"),
        "accepted": accepted,
    }))
}

// The token of an `Authorization: Bearer <token>` header.
pub(super) fn bearer(req: &HttpRequest) -> Option<&str> {
    let value = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

async fn create(req: HttpRequest, mut body: web::Payload, sessions: web::Data<HttpSessions>) -> HttpResponse {
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
    // Stored at once: any node can serve its first `/send`.
    let principal = bearer(&req).and_then(|token| sessions.service.auth().principal(Some(token)));
    let stored = match opened {
        Ok(opened) => sessions.service.store_new_session(&opened, principal).await.map(|()| opened),
        Err(err) => Err(err),
    };
    match stored {
        Ok(mut opened) => {
            opened.session = opened.session.with_peer(peer(&req)).with_transport("http");
            let id = sessions.clone().into_inner().insert(opened);
            // The id in a header too, for routers that hash on it (HAProxy).
            ok_for(&sessions, &id).json(json!({ "session_id": id }))
        }
        Err(err) => {
            log::warn!("http POST /session from {} refused: {}", peer(&req), err.message);
            HttpResponse::build(StatusCode::SERVICE_UNAVAILABLE)
                .insert_header((header::RETRY_AFTER, "1"))
                .json(json!({ "ok": false, "error": err.message, "retryable": true }))
        }
    }
}

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

async fn send(req: HttpRequest, mut body: web::Payload, sessions: web::Data<HttpSessions>) -> HttpResponse {
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

// One attached stream: counts itself in `streams` while it lives.
struct Attached {
    // The session's id (to forget it once its last line is delivered).
    id: String,
    // The session streamed.
    session: Arc<HttpEntry>,
    // The registry.
    sessions: web::Data<HttpSessions>,
    // Fires when a newer stream replaces this one.
    token: CancellationToken,
    // The outbox's receiving side, once this stream holds it.
    guard: Option<tokio::sync::OwnedMutexGuard<OutboxReceiver>>,
    // The last event (`closed`) was sent: the stream ends.
    closed: bool,
    // Lines a reconnect with `Last-Event-ID` missed, sent first.
    replay: Vec<(u64, String)>,
    // Counts this stream as the session's reader while it lives.
    _reader: ReaderHold,
}

impl Attached {
    // The end of a replaced stream: it lets go of the outbox at once (the
    // new stream takes over), sends one `closed` event, then ends.
    fn replaced(mut self) -> Option<(Result<Bytes, Infallible>, Attached)> {
        self.guard = None;
        if self.closed {
            return None;
        }
        self.closed = true;
        let err = HostError::new(
            ErrorCode::InvalidState,
            "this stream was replaced by a newer GET /stream of the same session; it ends here",
        )
        .with_detail(json!({ "reason": "stream_replaced" }));
        let mut chunk = b"event: closed\n".to_vec();
        push_event(&mut chunk, 0, &error_line(&err, ""));
        Some((Ok(Bytes::from(chunk)), self))
    }
}

async fn next_event(mut attached: Attached) -> Option<(Result<Bytes, Infallible>, Attached)> {
    if attached.token.is_cancelled() {
        return attached.replaced();
    }
    if attached.guard.is_none() {
        let output = attached.session.output.clone();
        tokio::select! {
            _ = attached.token.cancelled() => return attached.replaced(),
            guard = output.lock_owned() => attached.guard = Some(guard),
        }
    }
    if !attached.replay.is_empty() {
        // (Once this stream holds the outbox: no other stream writes now.)
        let mut chunk = Vec::new();
        for (seq, line) in attached.replay.drain(..) {
            push_event(&mut chunk, seq, &line);
        }
        return Some((Ok(Bytes::from(chunk)), attached));
    }
    let guard = attached.guard.as_mut()?;
    let line = tokio::select! {
        biased;
        _ = attached.token.cancelled() => return attached.replaced(),
        line = guard.recv_numbered() => line,
    };
    match line {
        Some((seq, line)) => {
            // Every line queued now goes out in one chunk (one write), and
            // is kept for a reconnect that missed it.
            let mut chunk = Vec::with_capacity(line.len() + 16);
            let mut recent = lock(&attached.session.recent);
            push_event(&mut chunk, seq, &line);
            recent.push(seq, line);
            while chunk.len() < WRITE_BATCH {
                let Ok((seq, line)) = guard.try_recv_numbered() else { break };
                push_event(&mut chunk, seq, &line);
                recent.push(seq, line);
            }
            drop(recent);
            Some((Ok(Bytes::from(chunk)), attached))
        }
        None => {
            // The session ended and everything was delivered: forget it.
            attached.sessions.remove_entry(&attached.id, &attached.session);
            None
        }
    }
}

// One SSE event: `data: <json>\n\n` (a line never holds a newline).
fn push_event(chunk: &mut Vec<u8>, seq: u64, line: &str) {
    if seq > 0 {
        // The SSE id is the line's number in the session's journal: a
        // reconnect sends it back as `Last-Event-ID`.
        chunk.extend_from_slice(b"id: ");
        chunk.extend_from_slice(seq.to_string().as_bytes());
        chunk.push(b'\n');
    }
    chunk.extend_from_slice(b"data: ");
    chunk.extend_from_slice(line.as_bytes());
    chunk.extend_from_slice(b"\n\n");
}

async fn stream(req: HttpRequest, sessions: web::Data<HttpSessions>) -> HttpResponse {
    let (id, session) = match lookup(&req, &sessions).await {
        Ok(found) => found,
        Err(response) => return *response,
    };
    // A reconnect names the last event it got: what came after it and is
    // still kept is sent again first.
    let last_event =
        req.headers().get("Last-Event-ID").and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse().ok());
    let replay = match last_event {
        Some(seq) => lock(&session.recent).after(seq),
        None => Vec::new(),
    };
    let token = CancellationToken::new();
    {
        let mut current = lock(&session.stream_token);
        current.cancel();
        *current = token.clone();
    }
    let reader = ReaderHold::new(session.clone());
    let mut response = ok_for(&sessions, &id);
    let attached = Attached { id, session, sessions, token, guard: None, closed: false, replay, _reader: reader };
    response
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .streaming(futures_util::stream::unfold(attached, next_event))
}

/// `GET /ready`: 200 while the node can serve (its store answers and, on
/// a cluster node, its leases are renewed), else 503; 503 too once it shuts
/// down, so a router sends nothing more its way.
async fn ready(sessions: web::Data<HttpSessions>) -> HttpResponse {
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

async fn health(sessions: web::Data<HttpSessions>) -> HttpResponse {
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

/// Builds the HTTP server on an already bound listener; run the returned
/// [`Server`] (a future) and stop it through its handle.
pub fn server(
    listener: std::net::TcpListener,
    sessions: Arc<HttpSessions>,
    admin: Arc<admin::AdminApi>,
    workers: usize,
) -> std::io::Result<Server> {
    listener.set_nonblocking(true)?;
    let workers = workers.max(1);
    // actix bounds connections per worker: split `max_connections` evenly.
    let per_worker = sessions.service.limits().max_connections.div_ceil(workers).max(1);
    let data = web::Data::from(sessions);
    let admin = web::Data::from(admin);
    let server = HttpServer::new(move || {
        App::new()
            .configure(|cfg| admin::routes(cfg, admin.clone()))
            .app_data(data.clone())
            .route("/session", web::post().to(create))
            .route("/send", web::post().to(send))
            .route("/stream", web::get().to(stream))
            .route("/health", web::get().to(health))
            .route("/ready", web::get().to(ready))
            .route("/metrics", web::get().to(metrics::scrape))
    })
    .workers(workers)
    .max_connections(per_worker)
    .disable_signals()
    // A client closing its side ends its stream at once, so the outbox is
    // not drained into a dead connection.
    .h1_allow_half_closed(false)
    .shutdown_timeout(1)
    .listen(listener)?
    .run();
    Ok(server)
}
