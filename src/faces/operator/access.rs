//! Who may use the operator's API and page, and the answers refusing the
//! rest: apart from the routes (`routes.rs`, `people.rs`, `ui.rs` all ask
//! here), so that none of them imports another.
//!
//! Access: with `[admin] tokens`, every route needs `Authorization: Bearer`
//! with one of them (the page's own files excepted: they hold no data, and
//! the page asks for the token). Without them, the routes answer only a
//! loopback peer naming a loopback host (so a page on another site that a
//! DNS name rebinds to 127.0.0.1 is refused), and not at all when `[auth]`
//! has tokens. An `[auth]` token grants nothing here, and an admin token
//! nothing on the protocol's endpoints.

use actix_web::http::{header, StatusCode};
use actix_web::{HttpRequest, HttpResponse};
use serde_json::json;
use std::sync::Arc;

use crate::session::{Auth, Service};
use crate::transport::http::request_info::bearer;

/// The header a cancel or terminate must carry (see the module docs).
pub(crate) const CONFIRM_HEADER: &str = "X-Subagentd-Confirm";

/// What the admin routes run with.
#[derive(Debug)]
pub(crate) struct AdminApi {
    pub(super) service: Arc<Service>,
    tokens: Auth,
}

impl AdminApi {
    /// The API over `service`'s sessions, open to holders of `tokens`.
    pub(crate) fn new(service: Arc<Service>, tokens: Auth) -> Arc<Self> {
        Arc::new(Self { service, tokens })
    }
}

pub(super) fn refuse(status: StatusCode, message: &str) -> HttpResponse {
    HttpResponse::build(status).json(json!({ "ok": false, "error": message }))
}

// Whether the request came from this machine and names it: a loopback peer,
// and a `Host` that is a loopback address or `localhost`.
fn is_local(req: &HttpRequest) -> bool {
    let peer = req.peer_addr().is_some_and(|addr| addr.ip().is_loopback());
    let host = req.headers().get(header::HOST).and_then(|value| value.to_str().ok()).unwrap_or("");
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(name, _port)| name),
    };
    let named_local =
        name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    peer && named_local
}

/// The answer refusing `req` the API, or `None` when it may use it.
pub(super) fn refusal(req: &HttpRequest, api: &AdminApi, page: bool) -> Option<HttpResponse> {
    if api.tokens.is_enabled() {
        if page {
            return None;
        }
        return match bearer(req) {
            Some(token) if api.tokens.check(Some(token)) => None,
            given => {
                crate::metrics::metrics().auth_failed("admin");
                let peer = crate::transport::http::request_info::peer(req);
                let why = if given.is_some() { "refused" } else { "missing" };
                log::warn!("admin {} {} from {peer}: bearer token {why}", req.method(), req.path());
                Some(
                    HttpResponse::build(StatusCode::UNAUTHORIZED)
                        .insert_header((header::WWW_AUTHENTICATE, "Bearer realm=\"subagentd admin\""))
                        .json(json!({ "ok": false, "error": "an [admin] token is required (Authorization: Bearer)" })),
                )
            }
        };
    }
    if api.service.auth().is_enabled() {
        return Some(refuse(
            StatusCode::FORBIDDEN,
            "the admin API is off: [auth] tokens are set and [admin] tokens are not",
        ));
    }
    if !is_local(req) {
        return Some(refuse(StatusCode::FORBIDDEN, "without [admin] tokens the admin API answers on loopback only"));
    }
    None
}

/// The answer refusing `req` the page's own files, or `None` when they may
/// be served.
pub(super) fn page_refusal(req: &HttpRequest, api: &AdminApi) -> Option<HttpResponse> {
    refusal(req, api, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::test::TestRequest;

    fn request(peer: &str, host: &str) -> HttpRequest {
        TestRequest::default().peer_addr(peer.parse().unwrap()).insert_header((header::HOST, host)).to_http_request()
    }

    #[test]
    fn local_means_a_loopback_peer_naming_a_loopback_host() {
        assert!(is_local(&request("127.0.0.1:5000", "127.0.0.1:8080")));
        assert!(is_local(&request("127.0.0.1:5000", "localhost:8080")));
        assert!(is_local(&request("127.0.0.1:5000", "LOCALHOST")));
        assert!(is_local(&request("[::1]:5000", "[::1]:8080")));
        assert!(!is_local(&request("192.0.2.7:5000", "127.0.0.1:8080")), "a remote peer");
        assert!(!is_local(&request("127.0.0.1:5000", "rebound.example:8080")), "a name rebound to loopback");
        assert!(!is_local(&request("127.0.0.1:5000", "192.0.2.1:8080")));
        assert!(!is_local(&request("127.0.0.1:5000", "")));
    }
}
