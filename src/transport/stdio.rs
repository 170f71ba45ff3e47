//! stdio: one session on stdin/stdout. Only protocol lines go to stdout.
//! EOF on stdin means shutdown: requests already read are answered, running
//! tasks get up to [`EOF_DRAIN`] to finish, then the tree is terminated and
//! the process exits 0. A `shutdown` request or a signal ends it too.
//!
//! stdin and stdout are served by two plain threads doing blocking I/O, so
//! a slow pipe never stalls the actor threads.

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

use super::lines::{gather, recycle};
use crate::protocol::codec::{Frame, LineDecoder};
use crate::session::{ConnectionEnd, OutboxReceiver, Service};

/// How long running tasks may finish after EOF on stdin (as `shutdown`'s default).
pub(crate) const EOF_DRAIN: Duration = Duration::from_secs(10);

/// Serves one session over stdin/stdout until it ends.
pub(crate) async fn serve(service: Arc<Service>, final_flush: Duration) -> std::io::Result<ConnectionEnd> {
    let opened = service.open().map_err(|err| std::io::Error::other(err.to_string()))?;
    let limit = service.limits().max_line_bytes;
    let input = opened.input;
    std::thread::Builder::new().name("stdin".into()).spawn(move || {
        read_stdin_frames(limit, |frame| input.blocking_send(frame).is_ok());
    })?;
    let (done_tx, done_rx) = oneshot::channel();
    let mut output = opened.output;
    std::thread::Builder::new().name("stdout".into()).spawn(move || {
        let _ = write_stdout(&mut output);
        let _ = done_tx.send(());
    })?;
    let end = opened.connection.with_peer("stdio").with_transport("stdio").drain_on_eof(EOF_DRAIN).run().await;
    if end != ConnectionEnd::SlowClient {
        let _ = tokio::time::timeout(final_flush, done_rx).await;
    }
    Ok(end)
}

/// Reads stdin to its end on this (plain) thread, handing each frame to
/// `take` until it says no more (its receiver is gone).
pub(crate) fn read_stdin_frames(limit: usize, mut take: impl FnMut(Frame) -> bool) {
    let mut stdin = std::io::stdin().lock();
    let mut decoder = LineDecoder::new(limit);
    let mut chunk = vec![0u8; 64 * 1024];
    let mut frames = Vec::new();
    loop {
        let n = match stdin.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        decoder.feed(&chunk[..n], &mut frames);
        for frame in frames.drain(..) {
            if !take(frame) {
                return;
            }
        }
    }
    if let Some(frame) = decoder.finish() {
        take(frame);
    }
}

fn write_stdout(output: &mut OutboxReceiver) -> std::io::Result<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut batch = Vec::new();
    while let Some(line) = output.blocking_recv() {
        gather(&mut batch, line, output);
        out.write_all(&batch)?;
        out.flush()?;
        recycle(&mut batch);
    }
    out.flush()
}
