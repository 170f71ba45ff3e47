//! A session's input queue: frames from the transport, counted in bytes as
//! well as in frames, so that what a client has sent ahead of its session is
//! bounded by `limits.input_max_bytes` however long its lines are.
//!
//! TCP and stdio wait for room (`send`, `blocking_send`: they push back
//! through the socket or pipe, and their queue is a few frames). HTTP cannot
//! wait on a client (`try_send`): past either bound `/send` answers 429.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;

use crate::protocol::codec::Frame;

/// Bytes a frame holds (a skipped over-long line holds none).
fn size(frame: &Frame) -> usize {
    match frame {
        Frame::Line(line) | Frame::Journaled { line, .. } => line.len(),
        Frame::TooLong { .. } => 0,
    }
}

/// The transport's end of a session's input.
#[derive(Debug, Clone)]
pub struct InputSender {
    tx: mpsc::Sender<Frame>,
    // Bytes of frames queued and not yet taken by the session.
    queued: Arc<AtomicUsize>,
    max_bytes: usize,
}

/// The session's end of its input.
#[derive(Debug)]
pub(crate) struct InputReceiver {
    rx: mpsc::Receiver<Frame>,
    queued: Arc<AtomicUsize>,
}

/// An input queue of `frames` frames and `max_bytes` bytes.
pub(super) fn channel(frames: usize, max_bytes: usize) -> (InputSender, InputReceiver) {
    let (tx, rx) = mpsc::channel(frames.clamp(1, u32::MAX as usize >> 3));
    let queued = Arc::new(AtomicUsize::new(0));
    (InputSender { tx, queued: queued.clone(), max_bytes }, InputReceiver { rx, queued })
}

impl InputSender {
    /// Queues a frame, waiting while the queue is full (by frames); `Err`
    /// when the session has ended.
    pub async fn send(&self, frame: Frame) -> Result<(), Frame> {
        let bytes = size(&frame);
        self.queued.fetch_add(bytes, Ordering::AcqRel);
        self.tx.send(frame).await.map_err(|err| {
            self.queued.fetch_sub(bytes, Ordering::AcqRel);
            err.0
        })
    }

    /// [`InputSender::send`] for a plain thread (stdio's reader).
    pub fn blocking_send(&self, frame: Frame) -> Result<(), Frame> {
        let bytes = size(&frame);
        self.queued.fetch_add(bytes, Ordering::AcqRel);
        self.tx.blocking_send(frame).map_err(|err| {
            self.queued.fetch_sub(bytes, Ordering::AcqRel);
            err.0
        })
    }

    /// Queues a frame without waiting: `Full` past either bound (frames or
    /// bytes; a frame always fits an empty queue), `Closed` when the session
    /// has ended.
    pub fn try_send(&self, frame: Frame) -> Result<(), TrySendError<Frame>> {
        let bytes = size(&frame);
        let max = self.max_bytes;
        let fits = self.queued.fetch_update(Ordering::AcqRel, Ordering::Acquire, |queued| {
            (queued == 0 || queued.saturating_add(bytes) <= max).then(|| queued.saturating_add(bytes))
        });
        if fits.is_err() {
            return Err(TrySendError::Full(frame));
        }
        self.tx.try_send(frame).inspect_err(|_| {
            self.queued.fetch_sub(bytes, Ordering::AcqRel);
        })
    }
}

impl InputReceiver {
    fn taken(&self, frame: Frame) -> Frame {
        self.queued.fetch_sub(size(&frame), Ordering::AcqRel);
        frame
    }

    /// The next frame; `None` once every sender is gone.
    pub(crate) async fn recv(&mut self) -> Option<Frame> {
        let frame = self.rx.recv().await?;
        Some(self.taken(frame))
    }

    /// The next frame if one is queued now.
    pub(crate) fn try_recv(&mut self) -> Result<Frame, mpsc::error::TryRecvError> {
        let frame = self.rx.try_recv()?;
        Ok(self.taken(frame))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[actix_rt::test]
    async fn try_send_refuses_past_the_byte_bound_and_taking_a_frame_makes_room() {
        let (tx, mut rx) = channel(100, 10);
        tx.try_send(Frame::Line(vec![b'a'; 8])).expect("fits an empty queue");
        assert!(matches!(tx.try_send(Frame::Line(vec![b'b'; 8])), Err(TrySendError::Full(_))));
        assert!(tx.try_send(Frame::TooLong { limit: 1 }).is_ok(), "a skipped line holds nothing");
        assert_eq!(rx.recv().await, Some(Frame::Line(vec![b'a'; 8])));
        tx.try_send(Frame::Line(vec![b'b'; 8])).expect("room again");
    }
}
