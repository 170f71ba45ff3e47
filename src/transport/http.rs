//! HTTP + SSE (actix-web), as the A2E SDK's HTTP transport expects:
//!
//! - `POST /session` → `{"session_id": "..."}` (503 at `max_sessions`).
//! - `POST /send` with header `X-Session-Id`, body one or more NDJSON lines →
//!   `{"ok": true}`; the replies go to the stream. 400 without the header,
//!   404 for an unknown (or expired) session.
//! - `GET /stream` with header `X-Session-Id` → `text/event-stream`, each
//!   message as `data: <json>\n\n`. Messages produced while no stream is
//!   attached wait in the session's bounded outbox and are sent on attach; a
//!   new stream for the same session replaces the previous one.
//! - `GET /health` → `{"status": "ok", "sessions": N, "streams": M}`.
//!
//! SSE has no acknowledgements: a message written into a connection that
//! died before the host noticed is lost. A client closing its connection is
//! noticed at once (half-closed connections are not kept), so a client that
//! reconnects after its old stream is gone loses nothing.
//!
//! A session with no request and no attached stream for
//! `limits.session_idle_seconds` is closed and forgotten.

use actix_web::dev::Server;
use actix_web::http::header;
use actix_web::web::{self, Bytes};
use actix_web::{App, HttpRequest, HttpResponse, HttpServer};
use futures_util::StreamExt;
use serde_json::json;
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::protocol::codec::{Frame, LineDecoder};
use crate::session::Service;

/// The header naming the session of `/send` and `/stream`.
pub const SESSION_HEADER: &str = "X-Session-Id";

/// The HTTP sessions of a service.
#[derive(Debug)]
pub struct HttpSessions {
    // Opens sessions and enforces `max_sessions`.
    service: Arc<Service>,
    // Live (and ended but undelivered) sessions by id.
    map: Mutex<HashMap<String, Arc<HttpSession>>>,
}

#[derive(Debug)]
struct HttpSession {
    // Frames for the session loop.
    input: mpsc::Sender<Frame>,
    // The outbox's receiving side; an attached stream holds the lock.
    output: Arc<tokio::sync::Mutex<mpsc::Receiver<String>>>,
    // Cancels the attached stream when a new one replaces it.
    stream_token: Mutex<CancellationToken>,
    // Streams attached now (a session with a stream is never idle).
    streams: AtomicUsize,
    // Last request or stream activity, for idle expiry.
    last_active: Mutex<Instant>,
    // Closes the session (idle expiry).
    stop: CancellationToken,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl HttpSession {
    fn touch(&self) {
        *lock(&self.last_active) = Instant::now();
    }
}

impl HttpSessions {
    /// The HTTP front of `service`.
    pub fn new(service: Arc<Service>) -> Arc<Self> {
        Arc::new(Self { service, map: Mutex::new(HashMap::new()) })
    }

    fn get(&self, id: &str) -> Option<Arc<HttpSession>> {
        lock(&self.map).get(id).cloned()
    }

    fn remove(&self, id: &str) {
        lock(&self.map).remove(id);
    }

    /// SSE streams attached now, over all sessions.
    pub fn streams(&self) -> usize {
        lock(&self.map).values().map(|session| session.streams.load(Ordering::Acquire)).sum()
    }

    /// Closes and forgets sessions idle for longer than `idle`.
    pub fn expire_idle(&self, idle: Duration) {
        let mut map = lock(&self.map);
        map.retain(|id, session| {
            let idle_now = session.streams.load(Ordering::Acquire) == 0 && lock(&session.last_active).elapsed() >= idle;
            if idle_now {
                log::debug!("http session {id} idle: closing");
                session.stop.cancel();
            }
            !idle_now
        });
    }

    /// Runs [`HttpSessions::expire_idle`] periodically until the service shuts down.
    pub async fn reap(self: Arc<Self>) {
        let idle = Duration::from_secs(self.service.limits().session_idle_seconds);
        let period = (idle / 4).clamp(Duration::from_secs(1), Duration::from_secs(30));
        let shutdown = self.service.shutdown_token().clone();
        let mut ticks = tokio::time::interval(period);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = ticks.tick() => self.expire_idle(idle),
            }
        }
    }
}

fn error(status: actix_web::http::StatusCode, message: &str) -> HttpResponse {
    HttpResponse::build(status).json(json!({ "ok": false, "error": message }))
}

fn lookup(req: &HttpRequest, sessions: &HttpSessions) -> Result<(String, Arc<HttpSession>), Box<HttpResponse>> {
    let Some(id) = req.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()) else {
        return Err(Box::new(error(actix_web::http::StatusCode::BAD_REQUEST, "missing X-Session-Id header")));
    };
    match sessions.get(id) {
        Some(session) => Ok((id.to_owned(), session)),
        None => Err(Box::new(error(actix_web::http::StatusCode::NOT_FOUND, "unknown session"))),
    }
}

async fn create(sessions: web::Data<HttpSessions>) -> HttpResponse {
    let opened = match sessions.service.open() {
        Ok(opened) => opened,
        Err(err) => return error(actix_web::http::StatusCode::SERVICE_UNAVAILABLE, &err.message),
    };
    let id = opened.session_id.clone();
    let entry = Arc::new(HttpSession {
        input: opened.input,
        output: Arc::new(tokio::sync::Mutex::new(opened.output)),
        stream_token: Mutex::new(CancellationToken::new()),
        streams: AtomicUsize::new(0),
        last_active: Mutex::new(Instant::now()),
        stop: opened.stop,
    });
    lock(&sessions.map).insert(id.clone(), entry.clone());
    let session = opened.session;
    actix_rt::spawn(async move {
        let end = session.run().await;
        log::debug!("http session ended: {end:?}");
        // Kept until its stream has delivered the last replies, or idle expiry.
        entry.touch();
    });
    HttpResponse::Ok().json(json!({ "session_id": id }))
}

async fn send(req: HttpRequest, mut body: web::Payload, sessions: web::Data<HttpSessions>) -> HttpResponse {
    let (_, session) = match lookup(&req, &sessions) {
        Ok(found) => found,
        Err(response) => return *response,
    };
    session.touch();
    let mut decoder = LineDecoder::new(sessions.service.limits().max_line_bytes);
    let mut frames = Vec::new();
    let mut closed = false;
    while let Some(chunk) = body.next().await {
        let Ok(chunk) = chunk else {
            return error(actix_web::http::StatusCode::BAD_REQUEST, "could not read the request body");
        };
        decoder.feed(&chunk, &mut frames);
        for frame in frames.drain(..) {
            closed |= !closed && session.input.send(frame).await.is_err();
        }
    }
    if let Some(frame) = decoder.finish() {
        closed |= !closed && session.input.send(frame).await.is_err();
    }
    session.touch();
    if closed {
        return error(actix_web::http::StatusCode::NOT_FOUND, "session has ended");
    }
    HttpResponse::Ok().json(json!({ "ok": true }))
}

// One attached stream: counts itself in `streams` while it lives.
struct Attached {
    id: String,
    session: Arc<HttpSession>,
    sessions: web::Data<HttpSessions>,
    token: CancellationToken,
    guard: Option<tokio::sync::OwnedMutexGuard<mpsc::Receiver<String>>>,
}

impl Drop for Attached {
    fn drop(&mut self) {
        self.session.streams.fetch_sub(1, Ordering::AcqRel);
        self.session.touch();
    }
}

async fn next_event(mut attached: Attached) -> Option<(Result<Bytes, Infallible>, Attached)> {
    if attached.guard.is_none() {
        let output = attached.session.output.clone();
        tokio::select! {
            _ = attached.token.cancelled() => return None,
            guard = output.lock_owned() => attached.guard = Some(guard),
        }
    }
    let guard = attached.guard.as_mut()?;
    let line = tokio::select! {
        biased;
        _ = attached.token.cancelled() => return None,
        line = guard.recv() => line,
    };
    match line {
        Some(line) => Some((Ok(Bytes::from(format!("data: {line}\n\n"))), attached)),
        None => {
            // The session ended and everything was delivered: forget it.
            attached.sessions.remove(&attached.id);
            None
        }
    }
}

async fn stream(req: HttpRequest, sessions: web::Data<HttpSessions>) -> HttpResponse {
    let (id, session) = match lookup(&req, &sessions) {
        Ok(found) => found,
        Err(response) => return *response,
    };
    let token = CancellationToken::new();
    {
        let mut current = lock(&session.stream_token);
        current.cancel();
        *current = token.clone();
    }
    session.streams.fetch_add(1, Ordering::AcqRel);
    session.touch();
    let attached = Attached { id, session, sessions, token, guard: None };
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .streaming(futures_util::stream::unfold(attached, next_event))
}

async fn health(sessions: web::Data<HttpSessions>) -> HttpResponse {
    HttpResponse::Ok().json(json!({
        "status": "ok",
        "sessions": sessions.service.sessions(),
        "streams": sessions.streams(),
    }))
}

/// Builds the HTTP server on an already bound listener; run the returned
/// [`Server`] (a future) and stop it through its handle.
pub fn server(listener: std::net::TcpListener, sessions: Arc<HttpSessions>, workers: usize) -> std::io::Result<Server> {
    listener.set_nonblocking(true)?;
    let data = web::Data::from(sessions);
    let server = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .route("/session", web::post().to(create))
            .route("/send", web::post().to(send))
            .route("/stream", web::get().to(stream))
            .route("/health", web::get().to(health))
    })
    .workers(workers.max(1))
    .disable_signals()
    // A client closing its side ends its stream at once, so the outbox is
    // not drained into a dead connection.
    .h1_allow_half_closed(false)
    .shutdown_timeout(1)
    .listen(listener)?
    .run();
    Ok(server)
}
