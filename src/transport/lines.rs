//! Byte streams ↔ protocol sessions: frames in through the line codec,
//! lines out with a newline each, written in batches: every line queued when
//! the writer wakes goes out in one write.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::protocol::codec::LineDecoder;
use crate::session::InputSender;
use crate::session::OutboxReceiver;

/// Bytes read from a stream at a time.
const CHUNK: usize = 64 * 1024;

/// Bytes of queued lines gathered into one write. Lines taken from the
/// outbox no longer count toward its byte bound, so this also bounds what the
/// writer holds beyond it (plus one line).
pub(crate) const WRITE_BATCH: usize = 64 * 1024;

/// Reads `reader` to its end, pushing frames into `input` (waiting while the
/// session is at its in-flight bound). Returns when the stream ends, fails,
/// or the session stops taking input.
pub(crate) async fn read_frames<R: AsyncRead + Unpin>(mut reader: R, limit: usize, input: InputSender) {
    let mut decoder = LineDecoder::new(limit);
    let mut chunk = vec![0u8; CHUNK];
    let mut frames = Vec::new();
    loop {
        let n = match reader.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        decoder.feed(&chunk[..n], &mut frames);
        for frame in frames.drain(..) {
            if input.send(frame).await.is_err() {
                return;
            }
        }
    }
    if let Some(frame) = decoder.finish() {
        let _ = input.send(frame).await;
    }
}

/// Writes every line of `output` to `writer`, one per `\n`; returns when the
/// outbox is closed and drained, or the stream fails. The lines queued when
/// the writer wakes (up to [`WRITE_BATCH`] bytes) go out in one write: one
/// system call, and with `TCP_NODELAY` one segment train, per batch.
pub(crate) async fn write_lines<W: AsyncWrite + Unpin>(
    mut writer: W,
    mut output: OutboxReceiver,
) -> std::io::Result<()> {
    let mut batch = Vec::new();
    while let Some(line) = output.recv().await {
        gather(&mut batch, line, &mut output);
        writer.write_all(&batch).await?;
        recycle(&mut batch);
    }
    writer.flush().await?;
    writer.shutdown().await
}

/// Appends `line` and then every line queued now, each with its `\n`, to
/// `batch` until it holds [`WRITE_BATCH`] bytes.
pub(crate) fn gather(batch: &mut Vec<u8>, line: String, output: &mut OutboxReceiver) {
    batch.extend_from_slice(line.as_bytes());
    batch.push(b'\n');
    while batch.len() < WRITE_BATCH {
        let Ok(line) = output.try_recv() else { break };
        batch.extend_from_slice(line.as_bytes());
        batch.push(b'\n');
    }
}

/// Empties a written batch; a buffer grown by a huge line is given back.
pub(crate) fn recycle(batch: &mut Vec<u8>) {
    batch.clear();
    if batch.capacity() > 2 * WRITE_BATCH {
        batch.shrink_to(WRITE_BATCH);
    }
}

/// Lets a writer task flush what is left for up to `grace` (none: abort it
/// at once), then aborts it so a client that does not read cannot hold the
/// connection open.
pub(crate) async fn finish_writer(
    writer: tokio::task::JoinHandle<std::io::Result<()>>,
    grace: Option<std::time::Duration>,
) {
    let abort = writer.abort_handle();
    match grace {
        Some(grace) => {
            if tokio::time::timeout(grace, writer).await.is_err() {
                abort.abort();
            }
        }
        None => abort.abort(),
    }
}
