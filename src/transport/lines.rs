//! Byte streams ↔ protocol sessions: frames in through the line codec,
//! lines out with a newline each, flushed whenever the outbox runs dry.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::mpsc;

use crate::protocol::codec::{Frame, LineDecoder};
use crate::session::OutboxReceiver;

/// Bytes read from a stream at a time.
const CHUNK: usize = 64 * 1024;

/// Reads `reader` to its end, pushing frames into `input` (waiting while the
/// session is at its in-flight bound). Returns when the stream ends, fails,
/// or the session stops taking input.
pub async fn read_frames<R: AsyncRead + Unpin>(mut reader: R, limit: usize, input: mpsc::Sender<Frame>) {
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
/// outbox is closed and drained, or the stream fails.
pub async fn write_lines<W: AsyncWrite + Unpin>(writer: W, mut output: OutboxReceiver) -> std::io::Result<()> {
    let mut writer = BufWriter::new(writer);
    while let Some(line) = output.recv().await {
        writer.write_all(line.as_bytes()).await?;
        writer.write_all(b"\n").await?;
        while let Ok(line) = output.try_recv() {
            writer.write_all(line.as_bytes()).await?;
            writer.write_all(b"\n").await?;
        }
        writer.flush().await?;
    }
    writer.flush().await?;
    writer.shutdown().await
}

/// Lets a writer task flush what is left for up to `grace` (none: abort it
/// at once), then aborts it so a client that does not read cannot hold the
/// connection open.
pub async fn finish_writer(writer: tokio::task::JoinHandle<std::io::Result<()>>, grace: Option<std::time::Duration>) {
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
