//! The `Host` and `Origin` checks of every route of the HTTP listener
//! (`[http] allowed_hosts`, `allowed_origins`): a web page that a DNS name
//! rebinds to this host names that name in both, and is refused with 403
//! before any route runs. `/health`, `/ready` and `/metrics` are not
//! checked: probes and scrapers name the node however they reach it, and
//! those routes change nothing.
//!
//! - `Host`: one of `allowed_hosts` (a name allows it on any port, a
//!   `name:port` that port only). With none set, a loopback listener
//!   answers loopback names only (`localhost`, `127.0.0.1`, `[::1]`), and
//!   any other listener any name.
//! - `Origin` (sent by browsers): one of `allowed_origins`, or an origin
//!   whose host passes the `Host` rule above by name (not merely because
//!   any name passes), or, on a listener that takes any name, the
//!   request's own `Host` (the page this host serves).

use actix_web::body::BoxBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header;
use actix_web::HttpResponse;
use futures_util::future::{self, Either};
use serde_json::json;
use std::sync::Arc;

use crate::config::HttpConfig;

/// The paths served whatever the `Host` (see the module docs).
const UNCHECKED: [&str; 3] = ["/health", "/ready", "/metrics"];

/// The checks in force on one listener.
#[derive(Debug, Clone)]
pub(crate) struct HostCheck {
    // Names and authorities allowed (lowercase).
    hosts: Vec<String>,
    // Origins allowed (lowercase, no trailing slash).
    origins: Vec<String>,
    // No list: loopback names only (a loopback listener) or any name.
    loopback_default: bool,
}

impl HostCheck {
    /// The checks `config` (plus `[mcp.server] allowed_hosts`) sets for a
    /// listener on `local`.
    pub(crate) fn new(config: &HttpConfig, more_hosts: &[String], local: Option<std::net::SocketAddr>) -> Self {
        let hosts: Vec<String> =
            config.allowed_hosts.iter().chain(more_hosts).map(|host| host.trim().to_ascii_lowercase()).collect();
        let origins = config
            .allowed_origins
            .iter()
            .map(|origin| origin.trim().trim_end_matches('/').to_ascii_lowercase())
            .collect();
        let loopback_default = local.is_none_or(|addr| addr.ip().is_loopback());
        Self { hosts, origins, loopback_default }
    }

    /// Whether `authority` (`name` or `name:port`) is named by the list, or
    /// is a loopback name: a host the card may name.
    pub(crate) fn names(&self, authority: &str) -> bool {
        let authority = authority.trim().to_ascii_lowercase();
        let name = name_of(&authority);
        is_loopback_name(name) || self.hosts.iter().any(|allowed| *allowed == authority || allowed == name)
    }

    /// Whether a request's `Host` passes.
    pub(crate) fn host_allowed(&self, authority: &str) -> bool {
        self.names(authority) || (self.hosts.is_empty() && !self.loopback_default)
    }

    /// Whether a request's `Origin` passes, the request naming `host`.
    pub(crate) fn origin_allowed(&self, origin: &str, host: &str) -> bool {
        let origin = origin.trim().trim_end_matches('/').to_ascii_lowercase();
        if self.origins.contains(&origin) {
            return true;
        }
        let Some((_, authority)) = origin.split_once("://") else { return false };
        let any_host = self.hosts.is_empty() && !self.loopback_default;
        self.names(authority) || (any_host && authority.eq_ignore_ascii_case(host.trim()))
    }

    // Why `req` is refused, if it is.
    fn refusal(&self, req: &ServiceRequest) -> Option<String> {
        if UNCHECKED.contains(&req.path()) {
            return None;
        }
        let host = request_host(req.request());
        if !self.host_allowed(&host) {
            return Some(format!("host `{}` is not allowed ([http] allowed_hosts)", clip(&host)));
        }
        let origin = req.headers().get(header::ORIGIN)?;
        let allowed = origin.to_str().is_ok_and(|origin| self.origin_allowed(origin, &host));
        (!allowed).then(|| {
            let origin = String::from_utf8_lossy(origin.as_bytes()).into_owned();
            format!("origin `{}` is not allowed ([http] allowed_origins)", clip(&origin))
        })
    }
}

/// The `Host` a request names (the URI's authority for HTTP/2), never a
/// forwarding header: those are anyone's to set.
pub(crate) fn request_host(req: &actix_web::HttpRequest) -> String {
    req.headers()
        .get(header::HOST)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
        .or_else(|| req.uri().authority().map(|authority| authority.to_string()))
        .unwrap_or_default()
}

// The name of an authority, without its port (`[::1]` kept whole).
fn name_of(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority.split_inclusive(']').next().unwrap_or(authority);
    }
    authority.rsplit_once(':').map_or(authority, |(name, _)| name)
}

fn is_loopback_name(name: &str) -> bool {
    matches!(name, "localhost" | "127.0.0.1" | "[::1]")
}

// At most 256 bytes of what a client sent, for an error message.
fn clip(text: &str) -> &str {
    let mut end = text.len().min(256);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Runs `check` before every route of the app (`App::wrap_fn`).
pub(crate) fn guard<S>(
    check: &Arc<HostCheck>,
    req: ServiceRequest,
    service: &S,
) -> impl std::future::Future<Output = Result<ServiceResponse<BoxBody>, actix_web::Error>>
where
    S: actix_web::dev::Service<ServiceRequest, Response = ServiceResponse<BoxBody>, Error = actix_web::Error>,
{
    match check.refusal(&req) {
        None => Either::Left(service.call(req)),
        Some(why) => {
            crate::metrics::metrics().bound_rejected("http_allowed_hosts");
            log::warn!("http {} {} from {:?} refused: {why}", req.method(), req.path(), req.peer_addr());
            let response = HttpResponse::Forbidden().json(json!({ "ok": false, "error": why }));
            Either::Right(future::ready(Ok(req.into_response(response))))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(hosts: &[&str], origins: &[&str], local: &str) -> HostCheck {
        let config = HttpConfig {
            allowed_hosts: hosts.iter().map(|h| h.to_string()).collect(),
            allowed_origins: origins.iter().map(|o| o.to_string()).collect(),
        };
        HostCheck::new(&config, &[], Some(local.parse().unwrap()))
    }

    #[test]
    fn a_loopback_listener_answers_loopback_names_only_by_default() {
        let check = check(&[], &[], "127.0.0.1:8080");
        assert!(
            check.host_allowed("127.0.0.1:8080") && check.host_allowed("localhost") && check.host_allowed("[::1]:9")
        );
        assert!(!check.host_allowed("evil.example") && !check.host_allowed("evil.example:8080"));
        assert!(check.origin_allowed("http://localhost:5173", "127.0.0.1:8080"));
        assert!(!check.origin_allowed("http://evil.example", "evil.example"), "a rebinding page's own origin");
    }

    #[test]
    fn listed_names_and_origins_pass_and_others_do_not() {
        let check =
            check(&["agents.example.com", "other.example:8443"], &["https://console.example.com"], "0.0.0.0:80");
        assert!(check.host_allowed("agents.example.com:8080"), "a name allows any port");
        assert!(check.host_allowed("OTHER.example:8443") && !check.host_allowed("other.example:9"));
        assert!(!check.host_allowed("evil.example"));
        assert!(check.origin_allowed("https://console.example.com/", "agents.example.com"));
        assert!(!check.origin_allowed("https://evil.example", "agents.example.com"));
        assert!(!check.origin_allowed("null", "agents.example.com"));
    }

    #[test]
    fn an_open_listener_with_no_list_takes_any_host_and_only_its_own_origin() {
        let check = check(&[], &[], "0.0.0.0:80");
        assert!(check.host_allowed("10.0.0.5:8080"));
        assert!(!check.names("evil.example"), "the card never names a host merely because any passes");
        assert!(check.origin_allowed("http://10.0.0.5:8080", "10.0.0.5:8080"));
        assert!(!check.origin_allowed("http://evil.example", "10.0.0.5:8080"));
    }
}
