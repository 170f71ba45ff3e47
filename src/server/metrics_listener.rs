//! With `--metrics ADDR`, the metrics on a listener of their own (for a
//! service that serves TCP or stdio only; there it serves the operator's
//! page and API too).

use actix_web::dev::Server;
use actix_web::{web, App, HttpServer};
use std::sync::Arc;

use crate::faces::operator::{self, AdminApi};
use crate::transport::http::scrape;

/// A server answering `GET /metrics` only, on an already bound listener:
/// one worker (a scrape every few seconds needs no more). With `admin` (when
/// there is no HTTP listener), it serves the operator's page and API too.
pub(crate) fn server(listener: std::net::TcpListener, admin: Option<Arc<AdminApi>>) -> std::io::Result<Server> {
    listener.set_nonblocking(true)?;
    let admin = admin.map(web::Data::from);
    Ok(HttpServer::new(move || {
        let app = App::new().route("/metrics", web::get().to(scrape));
        match &admin {
            Some(admin) => app.configure(|cfg| operator::routes(cfg, admin.clone())),
            None => app.configure(|_| {}),
        }
    })
    .workers(1)
    .disable_signals()
    .shutdown_timeout(1)
    .listen(listener)?
    .run())
}
