//! `GET /metrics`: the Prometheus metrics, on the HTTP listener and, with
//! `--metrics ADDR`, on a listener of their own (for a service that serves
//! TCP or stdio only; there it serves the operator's page and API too).

use actix_web::dev::Server;
use actix_web::http::header;
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use std::sync::Arc;

use super::admin_routes::AdminApi;
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
/// one worker (a scrape every few seconds needs no more). With `admin` (when
/// there is no HTTP listener), it serves the operator's page and API too.
pub(crate) fn server(listener: std::net::TcpListener, admin: Option<Arc<AdminApi>>) -> std::io::Result<Server> {
    listener.set_nonblocking(true)?;
    let admin = admin.map(web::Data::from);
    Ok(HttpServer::new(move || {
        let app = App::new().route("/metrics", web::get().to(scrape));
        match &admin {
            Some(admin) => app.configure(|cfg| super::admin_routes::routes(cfg, admin.clone())),
            None => app.configure(|_| {}),
        }
    })
    .workers(1)
    .disable_signals()
    .shutdown_timeout(1)
    .listen(listener)?
    .run())
}
