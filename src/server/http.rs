//! [`server`]: the HTTP server and its routing table: A2E over HTTP
//! (`crate::transport::http`) and the faces' routes (`crate::faces`: A2A,
//! MCP, the operator's), every route behind the Host and Origin checks.

use actix_web::dev::Server;
use actix_web::{web, App, HttpServer};
use std::sync::Arc;

use crate::config::{A2aConfig, HttpConfig, McpFaceConfig};
use crate::faces::a2a::{self, A2aFace};
use crate::faces::mcp_server::{self as mcp, McpFace};
use crate::faces::operator::{self, AdminApi};
use crate::session::HttpSessions;
use crate::transport::http::host_check::{self, HostCheck};
use crate::transport::http::{create, health, ready, scrape, send, stream};

/// Builds the HTTP server on an already bound listener; run the returned
/// [`Server`] (a future) and stop it through its handle.
pub(crate) fn server(
    listener: std::net::TcpListener,
    sessions: Arc<HttpSessions>,
    admin: Arc<AdminApi>,
    a2a: A2aConfig,
    mcp: McpFaceConfig,
    http: &HttpConfig,
    workers: usize,
) -> std::io::Result<Server> {
    listener.set_nonblocking(true)?;
    let check = Arc::new(HostCheck::new(http, &mcp.allowed_hosts, listener.local_addr().ok()));
    let workers = workers.max(1);
    // actix bounds connections per worker: split `max_connections` evenly.
    let per_worker = sessions.service.limits().max_connections.div_ceil(workers).max(1);
    let a2a = A2aFace::new(sessions.clone(), a2a);
    let mcp = McpFace::new(sessions.clone(), mcp);
    let data = web::Data::from(sessions);
    let admin = web::Data::from(admin);
    let server = HttpServer::new(move || {
        let guarded = check.clone();
        App::new()
            .wrap_fn(move |req, service| host_check::guard(&guarded, req, service))
            .app_data(web::Data::from(check.clone()))
            .configure(|cfg| operator::routes(cfg, admin.clone()))
            .configure(|cfg| a2a::routes(cfg, &a2a))
            .configure(|cfg| mcp::routes(cfg, &mcp))
            .app_data(data.clone())
            .route("/session", web::post().to(create))
            .route("/send", web::post().to(send))
            .route("/stream", web::get().to(stream))
            .route("/health", web::get().to(health))
            .route("/ready", web::get().to(ready))
            .route("/metrics", web::get().to(scrape))
    })
    .workers(workers)
    .max_connections(per_worker)
    .disable_signals()
    // A client closing its side ends its stream at once, so the outbox is
    // not drained into a dead connection.
    .h1_allow_half_closed(false)
    // A response written in pieces (an SSE answer: its events, then the
    // body's end) goes out at once, not after the client's delayed ACK.
    .on_connect(|connection, _| {
        if let Some(socket) = connection.downcast_ref::<actix_web::rt::net::TcpStream>() {
            let _ = socket.set_nodelay(true);
        }
    })
    .shutdown_timeout(1)
    .listen(listener)?
    .run();
    Ok(server)
}
