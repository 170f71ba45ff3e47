//! `/mcp`: MCP streamable HTTP.
//!
//! - `POST` one JSON-RPC message. `initialize` opens a session and names
//!   it in `Mcp-Session-Id`, which every later request carries (400
//!   without it, 404 for a session that is gone). A notification or a
//!   response is taken with 202. A request is answered with JSON, but
//!   `tools/call` and `tasks/result`, which may run long and report
//!   progress, with an SSE stream: its messages, then the answer.
//! - `GET` (`Accept: text/event-stream`): the session's stream of messages
//!   that belong to no request (elicitations, resource updates); a newer
//!   one replaces it.
//! - `Last-Event-ID` on a `GET` resumes the stream it names (a request's
//!   or the session's) after that event: nothing written is lost to a
//!   dropped connection, and a call runs on whether or not its client is
//!   connected.
//! - `DELETE` ends the session and its tree.
//!
//! With `[auth]` tokens every request needs `Authorization: Bearer` (401
//! otherwise), and a session is only ever served to its token's holder.
//! Against DNS rebinding (403): without tokens, the `Host` must be a
//! loopback name or one of `[mcp.server] allowed_hosts`; an `Origin` must
//! be one of those too (or, with tokens, the host itself).

use actix_web::http::{header, StatusCode};
use actix_web::web::{self, Bytes};
use actix_web::{HttpRequest, HttpResponse};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

use super::face::McpFace;
use super::incoming::{self as jsonrpc, Incoming, RpcError};
use super::outlet::{Next, Outlet};
use super::session::{Asker, McpSession, VERSIONS};
use crate::transport::http::request_info::bearer;

/// The session header.
const SESSION_HEADER: &str = "Mcp-Session-Id";
/// The protocol version header.
const VERSION_HEADER: &str = "MCP-Protocol-Version";
/// A comment on a quiet stream, so that proxies keep it open.
const KEEPALIVE: Duration = Duration::from_secs(15);
/// How long a client that lost a stream waits before it resumes it (SSE `retry:`).
const RETRY_MS: u64 = 1000;
/// Chunks written ahead of a slow client.
const AHEAD: usize = 16;

/// Adds `/mcp` (nothing when `[mcp.server] enabled = false`).
pub(crate) fn routes(cfg: &mut web::ServiceConfig, face: &Arc<McpFace>) {
    if !face.config.enabled {
        return;
    }
    let body_limit = face.sessions.service.limits().max_line_bytes;
    cfg.service(
        web::resource("/mcp")
            .wrap(crate::transport::http::responses::node_header(&face.sessions))
            .app_data(web::Data::from(face.clone()))
            .app_data(web::PayloadConfig::new(body_limit))
            .route(web::post().to(post))
            .route(web::get().to(get))
            .route(web::delete().to(delete)),
    );
}

fn refuse(status: StatusCode, err: &RpcError) -> HttpResponse {
    HttpResponse::build(status).content_type("application/json").body(jsonrpc::failure(&Value::Null, err).to_string())
}

// A request refused before it reaches a session: the status, and why.
struct Refused(StatusCode, RpcError);

impl Refused {
    fn response(self) -> HttpResponse {
        let mut response = refuse(self.0, &self.1);
        if self.0 == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
        }
        response
    }
}

// Token, host and origin: who asks, or the refusal.
fn gate(req: &HttpRequest, face: &McpFace) -> Result<Asker, Refused> {
    let auth = face.sessions.service.auth();
    let token = bearer(req).map(str::to_owned);
    if !auth.check(token.as_deref()) {
        crate::metrics::metrics().auth_failed("mcp");
        return Err(Refused(StatusCode::UNAUTHORIZED, RpcError::invalid_request("a valid bearer token is required")));
    }
    let allowed = &face.config.allowed_hosts;
    let host = req.connection_info().host().to_owned();
    // Without tokens, a name an attacker's DNS points here must not pass.
    if !auth.is_enabled() && !host_allowed(&host, allowed) {
        return Err(Refused(
            StatusCode::FORBIDDEN,
            RpcError::invalid_request(format!("host {host} is not allowed ([mcp.server] allowed_hosts)")),
        ));
    }
    if let Some(origin) = header_text(req, "origin") {
        let authority = origin.split_once("://").map_or(origin, |(_, rest)| rest).trim_end_matches('/');
        let same = auth.is_enabled() && authority.eq_ignore_ascii_case(&host);
        if !same && !host_allowed(authority, allowed) {
            return Err(Refused(
                StatusCode::FORBIDDEN,
                RpcError::invalid_request(format!("origin {origin} is not allowed")),
            ));
        }
    }
    Ok(Asker { principal: auth.principal(token.as_deref()), peer: req.peer_addr().map(|addr| addr.ip()) })
}

// Whether `authority` (`name` or `name:port`) is a loopback name or one of
// `allowed` (a name alone allows it on any port).
fn host_allowed(authority: &str, allowed: &[String]) -> bool {
    let name = if authority.starts_with('[') {
        authority.split(']').next().map(|name| format!("{name}]")).unwrap_or_default()
    } else {
        authority.rsplit_once(':').map_or(authority, |(name, _)| name).to_owned()
    }
    .to_ascii_lowercase();
    matches!(name.as_str(), "localhost" | "127.0.0.1" | "[::1]")
        || allowed.iter().any(|entry| entry.eq_ignore_ascii_case(authority) || entry.eq_ignore_ascii_case(&name))
}

fn header_text<'a>(req: &'a HttpRequest, name: &str) -> Option<&'a str> {
    req.headers().get(name).and_then(|value| value.to_str().ok()).map(str::trim).filter(|text| !text.is_empty())
}

fn accepts(req: &HttpRequest, media: &str) -> bool {
    header_text(req, "accept").is_none_or(|accept| {
        accept.split(',').any(|part| {
            let part = part.split(';').next().unwrap_or("").trim();
            part == media || part == "*/*" || part.strip_suffix("/*").is_some_and(|kind| media.starts_with(kind))
        })
    })
}

// The session a request names, with the protocol version it says.
async fn named_session(req: &HttpRequest, face: &McpFace, asker: &Asker) -> Result<Arc<McpSession>, Refused> {
    let Some(id) = header_text(req, SESSION_HEADER) else {
        return Err(Refused(
            StatusCode::BAD_REQUEST,
            RpcError::invalid_request("Mcp-Session-Id is required (initialize first)"),
        ));
    };
    let version = header_text(req, VERSION_HEADER);
    if let Some(version) = version.filter(|version| !VERSIONS.contains(version)) {
        let message = format!("unsupported {VERSION_HEADER} {version}; supported: {}", VERSIONS.join(", "));
        return Err(Refused(StatusCode::BAD_REQUEST, RpcError::invalid_request(message)));
    }
    match face.session(id, asker, version).await {
        Ok(Some(session)) => Ok(session),
        Ok(None) => {
            Err(Refused(StatusCode::NOT_FOUND, RpcError::invalid_request(format!("no session {id}: initialize again"))))
        }
        Err(err) => Err(Refused(StatusCode::SERVICE_UNAVAILABLE, err)),
    }
}

async fn post(req: HttpRequest, body: Bytes, face: web::Data<McpFace>) -> HttpResponse {
    let face = face.into_inner();
    let asker = match gate(&req, &face) {
        Ok(asker) => asker,
        Err(refused) => return refused.response(),
    };
    let json_body = header_text(&req, "content-type")
        .is_some_and(|value| value.split(';').next().unwrap_or("").trim().eq_ignore_ascii_case("application/json"));
    if !json_body {
        return refuse(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            &RpcError::invalid_request("the body must be application/json"),
        );
    }
    if !accepts(&req, "application/json") && !accepts(&req, "text/event-stream") {
        return refuse(
            StatusCode::NOT_ACCEPTABLE,
            &RpcError::invalid_request("Accept must take application/json and text/event-stream"),
        );
    }
    let message = match serde_json::from_slice::<Value>(&body) {
        Ok(value) => jsonrpc::read(value),
        Err(err) => Err((Value::Null, RpcError::parse(format!("not JSON: {err}")))),
    };
    let message = match message {
        Ok(message) => message,
        Err((id, err)) => {
            return HttpResponse::BadRequest()
                .content_type("application/json")
                .body(jsonrpc::failure(&id, &err).to_string())
        }
    };
    if let Incoming::Request { id, method, params } = &message {
        if method == "initialize" && header_text(&req, SESSION_HEADER).is_none() {
            return match face.initialize(&asker, params, Outlet::new(0)).await {
                Ok((session, result)) => HttpResponse::Ok()
                    .content_type("application/json")
                    .insert_header((SESSION_HEADER, session.id.clone()))
                    .body(jsonrpc::success(id, result).to_string()),
                Err(err) if err.code == -32602 && err.data.is_none() => HttpResponse::BadRequest()
                    .content_type("application/json")
                    .body(jsonrpc::failure(id, &err).to_string()),
                // One caller at its bound: the others are still served.
                Err(err) if err.data.as_ref().is_some_and(|data| data["limit"] == "max_sessions_per_caller") => {
                    HttpResponse::TooManyRequests()
                        .content_type("application/json")
                        .insert_header((header::RETRY_AFTER, "1"))
                        .body(jsonrpc::failure(id, &err).to_string())
                }
                Err(err) => HttpResponse::ServiceUnavailable()
                    .content_type("application/json")
                    .body(jsonrpc::failure(id, &err).to_string()),
            };
        }
    }
    let session = match named_session(&req, &face, &asker).await {
        Ok(session) => session,
        Err(refused) => return refused.response(),
    };
    let (id, method, params) = match message {
        Incoming::Request { id, method, params } => (id, method, params),
        other => {
            face.take(&session, other);
            return HttpResponse::Accepted().finish();
        }
    };
    // A call that cannot start is answered at once.
    let bad_call = (method == "tools/call").then(|| super::calls::ToolCall::read(&params).err()).flatten();
    if let Some(err) = bad_call {
        return HttpResponse::Ok().content_type("application/json").body(jsonrpc::failure(&id, &err).to_string());
    }
    if !matches!(method.as_str(), "tools/call" | "tasks/result") {
        let outlet = session.general.clone();
        let cancel = session.begin(&id);
        return match face.answer(&session, &asker, &id, &method, params, &outlet, cancel).await {
            Some(answer) => HttpResponse::Ok().content_type("application/json").body(answer.to_string()),
            None => HttpResponse::Accepted().finish(),
        };
    }
    // Streamed: the call runs on its own, whether or not its client stays
    // connected; its stream keeps what it says for a reconnect.
    let outlet = session.new_stream();
    {
        let cancel = session.begin(&id);
        let (face, session, outlet) = (face.clone(), session.clone(), outlet.clone());
        actix_rt::spawn(async move {
            match face.answer(&session, &asker, &id, &method, params, &outlet, cancel).await {
                Some(answer) => outlet.finish_with(&answer),
                None => outlet.finish(),
            }
        });
    }
    sse(&session, outlet, 0, false)
}

async fn get(req: HttpRequest, face: web::Data<McpFace>) -> HttpResponse {
    let face = face.into_inner();
    let asker = match gate(&req, &face) {
        Ok(asker) => asker,
        Err(refused) => return refused.response(),
    };
    if !accepts(&req, "text/event-stream") || header_text(&req, "accept").is_none() {
        return refuse(StatusCode::NOT_ACCEPTABLE, &RpcError::invalid_request("Accept must take text/event-stream"));
    }
    let session = match named_session(&req, &face, &asker).await {
        Ok(session) => session,
        Err(refused) => return refused.response(),
    };
    let resumed = header_text(&req, "last-event-id").and_then(|last| {
        let (stream, number) = last.split_once('-')?;
        Some((stream.parse::<u64>().ok()?, number.parse::<u64>().ok()?))
    });
    match resumed.and_then(|(stream, after)| Some((session.stream(stream)?, after))) {
        Some((outlet, after)) => {
            let general = outlet.stream == 0;
            sse(&session, outlet, after, general)
        }
        None => {
            let after = session.general_read.load(std::sync::atomic::Ordering::Acquire);
            sse(&session, session.general.clone(), after, true)
        }
    }
}

async fn delete(req: HttpRequest, face: web::Data<McpFace>) -> HttpResponse {
    let face = face.into_inner();
    let asker = match gate(&req, &face) {
        Ok(asker) => asker,
        Err(refused) => return refused.response(),
    };
    match named_session(&req, &face, &asker).await {
        Ok(session) => {
            face.end_session(&session);
            HttpResponse::Ok().finish()
        }
        Err(refused) => refused.response(),
    }
}

// An SSE response carrying `outlet` after message `after`. The session's
// own stream (`general`) has one reader: a newer one ends this one.
fn sse(session: &Arc<McpSession>, outlet: Arc<Outlet>, after: u64, general: bool) -> HttpResponse {
    let (tx, rx) = mpsc::channel::<Bytes>(AHEAD);
    let session = session.clone();
    let replaced = general.then(|| session.take_general_reader());
    let priming = session.client().version.as_str() >= "2025-11-25";
    actix_rt::spawn(async move {
        let stream = outlet.stream;
        if priming && after == 0 && !general {
            // An event id before anything else: a client that loses the
            // connection now can still resume (2025-11-25).
            let primed = format!("id: {stream}-0\nretry: {RETRY_MS}\ndata: \n\n");
            if tx.send(Bytes::from(primed)).await.is_err() {
                return;
            }
        }
        let mut after = after;
        loop {
            let next = tokio::select! {
                next = outlet.next(after) => next,
                _ = tokio::time::sleep(KEEPALIVE) => {
                    if tx.send(Bytes::from_static(b": keepalive\n\n")).await.is_err() { return; }
                    continue;
                }
                _ = tx.closed() => return,
                _ = async { match &replaced { Some(token) => token.cancelled().await, None => std::future::pending().await } } => return,
                _ = session.closed.cancelled(), if general => return,
            };
            let messages = match next {
                Next::Messages(messages) => messages,
                Next::Finished | Next::Lost => return,
            };
            let mut chunk = String::new();
            for (number, message) in &messages {
                chunk.push_str(&format!("id: {stream}-{number}\ndata: {message}\n\n"));
                after = *number;
            }
            if tx.send(Bytes::from(chunk)).await.is_err() {
                return;
            }
            outlet.delivered(after);
            if general {
                session.general_read.fetch_max(after, std::sync::atomic::Ordering::AcqRel);
            }
        }
    });
    crate::transport::http::responses::sse_from(rx)
}

#[cfg(test)]
mod tests {
    use super::host_allowed;

    #[test]
    fn hosts_are_loopback_or_allowed() {
        let allowed = ["agents.example.com".to_owned(), "tools.example.com:8443".to_owned()];
        for host in [
            "localhost:3000",
            "127.0.0.1",
            "[::1]:9",
            "agents.example.com",
            "agents.example.com:443",
            "tools.example.com:8443",
        ] {
            assert!(host_allowed(host, &allowed), "{host}");
        }
        for host in ["evil.example", "localhost.evil.example", "tools.example.com:80", "127.0.0.1.evil.example:80", ""]
        {
            assert!(!host_allowed(host, &allowed), "{host}");
        }
    }
}
