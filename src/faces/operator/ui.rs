//! The live view's files (`GET /ui`, `/ui/*.js`, `/ui/style.css`),
//! compiled into the binary: no CDN, no front-end build. Plain HTML, CSS
//! and a few classic scripts loaded in order (`common.js`, `host.js`,
//! `tree.js`, `detail.js`, `people.js`, then `app.js`, which starts the page). They read
//! the admin API (`routes.rs`) and its SSE stream. Served under a
//! content security policy that allows nothing but this host.

use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};

use super::access::{page_refusal, AdminApi};

const INDEX: &str = include_str!("ui/index.html");
/// The scripts, by file name, in the order the page loads them.
const SCRIPTS: [(&str, &str); 6] = [
    ("common.js", include_str!("ui/common.js")),
    ("host.js", include_str!("ui/host.js")),
    ("tree.js", include_str!("ui/tree.js")),
    ("detail.js", include_str!("ui/detail.js")),
    ("people.js", include_str!("ui/people.js")),
    ("app.js", include_str!("ui/app.js")),
];
const STYLE: &str = include_str!("ui/style.css");

/// What the page may load and talk to: this host only.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                      img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

fn file(content_type: &'static str, body: &'static str) -> HttpResponse {
    HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, content_type))
        .insert_header((header::CONTENT_SECURITY_POLICY, POLICY))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .body(body)
}

/// `GET /ui`: the page.
pub(super) async fn page(req: HttpRequest, api: web::Data<AdminApi>) -> HttpResponse {
    if let Some(refused) = page_refusal(&req, &api) {
        return refused;
    }
    file("text/html; charset=utf-8", INDEX)
}

/// `GET /ui/{file}`: its scripts and style sheet.
pub(super) async fn asset(req: HttpRequest, path: web::Path<String>, api: web::Data<AdminApi>) -> HttpResponse {
    if let Some(refused) = page_refusal(&req, &api) {
        return refused;
    }
    if let Some((_, script)) = SCRIPTS.iter().find(|(name, _)| *name == path.as_str()) {
        return file("text/javascript; charset=utf-8", script);
    }
    match path.as_str() {
        "style.css" => file("text/css; charset=utf-8", STYLE),
        _ => HttpResponse::NotFound().finish(),
    }
}
