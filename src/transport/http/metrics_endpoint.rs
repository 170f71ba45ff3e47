//! `GET /metrics`: the Prometheus metrics, on the HTTP listener and on the
//! metrics listener of its own (`crate::server`'s `metrics_listener`).

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse};

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
