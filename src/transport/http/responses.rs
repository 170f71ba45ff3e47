//! The answers every route shares: a 200 naming the session (and node),
//! the JSON error, the 408 for a body that came too late, sent on a
//! connection that closes once the unread request body is dropped, and the
//! SSE stream a face's writer task feeds.

use actix_web::body::{BodySize, BoxBody, MessageBody};
use actix_web::http::StatusCode;
use actix_web::web::{self, Bytes};
use actix_web::{HttpRequest, HttpResponse};
use serde_json::json;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::request_info::peer;
use crate::session::HttpSessions;

/// An SSE response carrying what a writer task sends on `chunks` (each
/// chunk whole events), ending when the writer drops its side; not cached,
/// and not buffered by a proxy.
pub(crate) fn sse_from(chunks: tokio::sync::mpsc::Receiver<Bytes>) -> HttpResponse {
    let body = futures_util::stream::unfold(chunks, |mut chunks| async move {
        chunks.recv().await.map(|chunk| (Ok::<_, std::convert::Infallible>(chunk), chunks))
    });
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((actix_web::http::header::CACHE_CONTROL, "no-store"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(body)
}

/// The header naming the session of `/send` and `/stream`.
pub(crate) const SESSION_HEADER: &str = "X-Session-Id";

/// The header naming the node that answered, on a cluster node (for
/// operators, and for tests that check where sessions went).
pub(crate) const NODE_HEADER: &str = "X-Subagentd-Node";

// A 200 naming the session (a router learns where it is served) and, on a
// cluster node, the node.
pub(super) fn ok_for(sessions: &HttpSessions, id: &str) -> actix_web::HttpResponseBuilder {
    let mut response = HttpResponse::Ok();
    response.insert_header((SESSION_HEADER, id));
    if let Some(node) = sessions.service.store().node_id() {
        response.insert_header((NODE_HEADER, node));
    }
    response
}

/// Names the node that answered on every response of a face's routes (on
/// a cluster node; nothing otherwise).
pub(crate) fn node_header(sessions: &HttpSessions) -> actix_web::middleware::DefaultHeaders {
    let headers = actix_web::middleware::DefaultHeaders::new();
    match sessions.service.store().node_id() {
        Some(node) => headers.add((NODE_HEADER, node)),
        None => headers,
    }
}

pub(super) fn error(status: StatusCode, message: &str) -> HttpResponse {
    HttpResponse::build(status).json(json!({ "ok": false, "error": message }))
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
pub(super) fn closing(response: HttpResponse, unread: web::Payload) -> HttpResponse {
    response
        .map_body(|head, inner| {
            head.set_connection_type(actix_web::http::ConnectionType::Close);
            HoldingRequestBody { inner, _unread: unread }
        })
        .map_into_boxed_body()
}

// The 408 for a body that did not arrive within `http_body_timeout_ms`.
pub(super) fn body_timeout(sessions: &HttpSessions, req: &HttpRequest, accepted: usize) -> HttpResponse {
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
