//! `GET /metrics`: the Prometheus metrics, on the HTTP listener and, with
//! `--metrics ADDR`, on a listener of their own (for a service that serves
//! TCP or stdio only).

use actix_web::dev::Server;
use actix_web::http::header;
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};

use crate::metrics::{content_type, metrics};

/// The metrics in the format the scraper asks for: OpenMetrics when its
/// `Accept` names it (Prometheus does), else the classic text format 0.0.4.
pub(crate) async fn scrape(req: HttpRequest) -> HttpResponse {
    let accept = req.headers().get(header::ACCEPT).and_then(|value| value.to_str().ok()).unwrap_or("");
    let openmetrics = accept.contains("application/openmetrics-text");
    HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, content_type(openmetrics)))
        .body(metrics().render(openmetrics))
}

/// A server answering `GET /metrics` only, on an already bound listener:
/// one worker (a scrape every few seconds needs no more).
pub fn server(listener: std::net::TcpListener) -> std::io::Result<Server> {
    listener.set_nonblocking(true)?;
    Ok(HttpServer::new(|| App::new().route("/metrics", web::get().to(scrape)))
        .workers(1)
        .disable_signals()
        .shutdown_timeout(1)
        .listen(listener)?
        .run())
}
