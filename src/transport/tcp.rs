//! TCP: NDJSON both ways, one session per connection. Closing the
//! connection closes the session and terminates its tree. A client that
//! does not read its replies overflows its outbox and is disconnected.

use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use super::lines::{finish_writer, read_frames, write_lines};
use crate::protocol::encode;
use crate::session::{Service, SessionEnd};

/// Accepts connections until the service shuts down.
pub async fn serve(listener: TcpListener, service: Arc<Service>, final_flush: Duration) {
    let shutdown = service.shutdown_token().clone();
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => {
                log::debug!("tcp connection from {peer}");
                actix_rt::spawn(connection(stream, service.clone(), final_flush));
            }
            Err(err) => {
                // Out of file descriptors and the like: keep serving the rest.
                log::warn!("tcp accept failed: {err}");
                tokio::task::yield_now().await;
            }
        }
    }
}

async fn connection(mut stream: TcpStream, service: Arc<Service>, final_flush: Duration) {
    let _ = stream.set_nodelay(true);
    let opened = match service.open() {
        Ok(opened) => opened,
        Err(err) => {
            let line = encode::error(&err, "") + "\n";
            let _ = tokio::time::timeout(final_flush, stream.write_all(line.as_bytes())).await;
            return;
        }
    };
    let (read_half, write_half) = stream.into_split();
    let limit = service.limits().max_line_bytes;
    let reader = actix_rt::spawn(read_frames(read_half, limit, opened.input));
    let writer = actix_rt::spawn(write_lines(write_half, opened.output));
    let end = opened.session.run().await;
    reader.abort();
    // Do not wait for a client that does not read: drop the socket at once.
    let grace = (end != SessionEnd::SlowClient).then_some(final_flush);
    finish_writer(writer, grace).await;
}
