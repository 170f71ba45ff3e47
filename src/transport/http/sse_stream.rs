//! `GET /stream`: the session's lines as server-sent events, replaying what
//! a reconnect (`Last-Event-ID`) missed; a newer stream of the same session
//! replaces this one, which ends with one `closed` event.

use actix_web::http::header;
use actix_web::web::{self, Bytes};
use actix_web::{HttpRequest, HttpResponse};
use serde_json::json;
use std::convert::Infallible;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use super::request_info::lookup;
use super::responses::ok_for;
use crate::error::{ErrorCode, HostError};
use crate::session::error_line;
use crate::session::HttpSessions;
use crate::session::OutboxReceiver;
use crate::session::{lock, HttpEntry, ReaderHold};
use crate::transport::lines::WRITE_BATCH;

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

pub(crate) async fn stream(req: HttpRequest, sessions: web::Data<HttpSessions>) -> HttpResponse {
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
