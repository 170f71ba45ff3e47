//! NDJSON framing with a line limit: bytes in, [`Frame`]s out.
//!
//! The decoder is fed chunks as they arrive (a socket read, an HTTP body
//! chunk) and never holds more than `max_line_bytes` of one line: a longer
//! line is reported as [`Frame::TooLong`] and the rest of it is skipped as it
//! streams past, so a client cannot make the host buffer a huge line.

/// One unit of input for a protocol session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A complete line, without its `\n` (and without a trailing `\r`).
    Line(Vec<u8>),
    /// A complete line that was journaled in the store first (HTTP `/send`
    /// with a durable store) under `seq`: once served, its entry is removed.
    Journaled {
        /// Its inbound sequence number in the session.
        seq: u64,
        /// The line.
        line: Vec<u8>,
    },
    /// A line longer than the limit was skipped.
    TooLong {
        /// The limit in force, in bytes.
        limit: usize,
    },
}

/// Splits a byte stream into lines of at most `limit` bytes.
#[derive(Debug)]
pub struct LineDecoder {
    // Longest line accepted, in bytes (without the newline).
    limit: usize,
    // The start of the current line, never longer than `limit`.
    buf: Vec<u8>,
    // True while skipping the rest of an over-long line.
    discarding: bool,
}

impl LineDecoder {
    /// A decoder accepting lines of up to `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Self { limit, buf: Vec::new(), discarding: false }
    }

    /// Feeds one chunk; complete lines (and skipped over-long ones) are
    /// appended to `out` in order. Blank lines are dropped.
    pub fn feed(&mut self, mut chunk: &[u8], out: &mut Vec<Frame>) {
        while !chunk.is_empty() {
            match chunk.iter().position(|&b| b == b'\n') {
                Some(end) => {
                    let (head, rest) = chunk.split_at(end);
                    if self.discarding {
                        self.discarding = false;
                    } else if self.buf.len() + head.len() > self.limit {
                        self.buf.clear();
                        out.push(Frame::TooLong { limit: self.limit });
                    } else {
                        self.buf.extend_from_slice(head);
                        self.emit(out);
                    }
                    chunk = &rest[1..];
                }
                None => {
                    if !self.discarding {
                        if self.buf.len() + chunk.len() > self.limit {
                            self.buf.clear();
                            self.buf.shrink_to(4096);
                            self.discarding = true;
                            out.push(Frame::TooLong { limit: self.limit });
                        } else {
                            self.buf.extend_from_slice(chunk);
                        }
                    }
                    chunk = &[];
                }
            }
        }
    }

    /// Ends the input: a last line without a newline is returned.
    pub fn finish(&mut self) -> Option<Frame> {
        self.discarding = false;
        if self.buf.is_empty() {
            return None;
        }
        let mut out = Vec::with_capacity(1);
        self.emit(&mut out);
        out.pop()
    }

    fn emit(&mut self, out: &mut Vec<Frame>) {
        let mut line = std::mem::take(&mut self.buf);
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        if !line.iter().all(u8::is_ascii_whitespace) {
            out.push(Frame::Line(line));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(limit: usize, chunks: &[&[u8]]) -> Vec<Frame> {
        let mut decoder = LineDecoder::new(limit);
        let mut out = Vec::new();
        for chunk in chunks {
            decoder.feed(chunk, &mut out);
        }
        out.extend(decoder.finish());
        out
    }

    #[test]
    fn splits_lines_across_chunks() {
        let out = run(16, &[b"ab", b"c\nde\r\n\n", b"f"]);
        assert_eq!(out, vec![Frame::Line(b"abc".to_vec()), Frame::Line(b"de".to_vec()), Frame::Line(b"f".to_vec())]);
    }

    #[test]
    fn over_long_line_is_skipped_once_and_next_line_survives() {
        let out = run(4, &[b"12345", b"6789", b"\nok\n"]);
        assert_eq!(out, vec![Frame::TooLong { limit: 4 }, Frame::Line(b"ok".to_vec())]);
        let out = run(4, &[b"123456\nabcd\n"]);
        assert_eq!(out, vec![Frame::TooLong { limit: 4 }, Frame::Line(b"abcd".to_vec())]);
    }
}
