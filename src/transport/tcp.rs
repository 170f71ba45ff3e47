//! TCP: NDJSON both ways, one session per connection. Closing the
//! connection closes the session and terminates its tree. A client that
//! does not read its replies overflows its outbox (line or byte bound) and
//! is disconnected.
//!
//! At most `limits.max_connections` connections are served at once: at the
//! bound the listener stops accepting (further clients wait in the listen
//! backlog) until one closes. A connection that cannot open a session (at
//! `max_unauthenticated_sessions`, or `max_sessions`) gets one `error` line
//! and is closed.

use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::lines::{finish_writer, read_frames, write_lines};
use crate::session::error_line;
use crate::session::{ConnectionEnd, Service};

/// First pause after a failed accept (out of file descriptors and the
/// like); it doubles on each failure in a row up to [`ACCEPT_BACKOFF_MAX`].
pub(crate) const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(100);
/// Longest pause between two accepts that fail.
pub(crate) const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// At most one accept-failure warning is logged per this period.
pub(crate) const ACCEPT_WARN_EVERY: Duration = Duration::from_secs(10);

/// Accepts connections until the service shuts down. When accepting fails
/// (e.g. `EMFILE`), waits before retrying (backing off from
/// [`ACCEPT_BACKOFF_MIN`] to [`ACCEPT_BACKOFF_MAX`]) and warns at most once
/// per [`ACCEPT_WARN_EVERY`], so the failure neither spins a core nor floods
/// stderr; the connections already open are served meanwhile. Accepts only
/// while fewer than `limits.max_connections` connections are open.
pub(crate) async fn serve(listener: TcpListener, service: Arc<Service>, final_flush: Duration) {
    let shutdown = service.shutdown_token().clone();
    let connections = Arc::new(Semaphore::new(service.limits().max_connections.clamp(1, Semaphore::MAX_PERMITS)));
    let mut backoff = ACCEPT_BACKOFF_MIN;
    let mut warned: Option<Instant> = None;
    let mut unreported = 0u64;
    loop {
        // A permit first: at the bound, wait for a connection to close.
        let permit = tokio::select! {
            _ = shutdown.cancelled() => break,
            permit = connections.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => {
                log::debug!("tcp connection from {peer}");
                backoff = ACCEPT_BACKOFF_MIN;
                actix_rt::spawn(connection(stream, peer, service.clone(), final_flush, permit));
            }
            Err(err) => {
                unreported += 1;
                if warned.is_none_or(|at| at.elapsed() >= ACCEPT_WARN_EVERY) {
                    log::warn!("tcp accept failed {unreported} time(s): {err}; retrying in {backoff:?}");
                    warned = Some(Instant::now());
                    unreported = 0;
                }
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
            }
        }
    }
}

// Serves one connection; `_permit` is its place under `max_connections`.
async fn connection(
    mut stream: TcpStream,
    peer: std::net::SocketAddr,
    service: Arc<Service>,
    final_flush: Duration,
    _permit: OwnedSemaphorePermit,
) {
    let _ = stream.set_nodelay(true);
    // (Its handshake counts it against its caller: `max_sessions_per_caller`.)
    let opened = match service.open() {
        Ok(opened) => opened,
        Err(err) => {
            log::warn!("tcp connection from {peer} refused: {}", err.message);
            let line = error_line(&err, "") + "\n";
            let _ = tokio::time::timeout(final_flush, stream.write_all(line.as_bytes())).await;
            return;
        }
    };
    let (read_half, write_half) = stream.into_split();
    let limit = service.limits().max_line_bytes;
    let reader = actix_rt::spawn(read_frames(read_half, limit, opened.input));
    let writer = actix_rt::spawn(write_lines(write_half, opened.output));
    let end = opened.connection.with_peer(peer.to_string()).run().await;
    reader.abort();
    // Do not wait for a client that does not read: drop the socket at once.
    let grace = (end != ConnectionEnd::SlowClient).then_some(final_flush);
    finish_writer(writer, grace).await;
}
