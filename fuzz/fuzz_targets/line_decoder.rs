//! Fuzz target: `protocol::codec::LineDecoder` fed a byte stream in arbitrary
//! chunks, with an arbitrary (small) line limit.
//!
//! The frames must not depend on the chunking: they must equal what a plain
//! reference makes of the whole stream at once (split at `\n`; a line over
//! the limit, counted before a trailing `\r` is dropped, is one `TooLong`;
//! a blank line is dropped; a last line without `\n` comes from `finish`).
#![no_main]

use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use subagent_host::protocol::codec::{Frame, LineDecoder};

#[derive(Debug, Arbitrary)]
struct Input {
    // The line limit, small so that over-long lines are common.
    limit: u8,
    // Chunk lengths, used in turn (0 feeds an empty chunk, then one byte).
    cuts: Vec<u8>,
    // The stream.
    data: Vec<u8>,
}

fuzz_target!(|input: Input| check(input));

fn check(input: Input) {
    let limit = usize::from(input.limit);
    let mut decoder = LineDecoder::new(limit);
    let mut frames = Vec::new();
    let mut rest = &input.data[..];
    let mut cuts = input.cuts.iter().copied().cycle();
    while !rest.is_empty() {
        let len = if input.cuts.is_empty() { rest.len() } else { usize::from(cuts.next().unwrap_or(1)) };
        if len == 0 {
            decoder.feed(&[], &mut frames);
        }
        let (chunk, tail) = rest.split_at(len.clamp(1, rest.len()));
        decoder.feed(chunk, &mut frames);
        rest = tail;
    }
    frames.extend(decoder.finish());
    assert_eq!(frames, reference(limit, &input.data), "limit {limit}, cuts {:?}", input.cuts);
    // The decoder is ready for a new stream.
    assert_eq!(decoder.finish(), None);
}

fn reference(limit: usize, data: &[u8]) -> Vec<Frame> {
    let mut frames = Vec::new();
    let mut lines: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
    // `split` yields an empty tail after a final `\n` (or for empty data).
    if lines.last().is_some_and(|last| last.is_empty()) {
        lines.pop();
    }
    for line in lines {
        if line.len() > limit {
            frames.push(Frame::TooLong { limit });
            continue;
        }
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if !line.iter().all(u8::is_ascii_whitespace) {
            frames.push(Frame::Line(line.to_vec()));
        }
    }
    frames
}
