//! Feeds arbitrary bytes, cut into arbitrary chunks, to the decoder.
//!
//! The first 8 bytes of the input seed the chunk sizes and pick the frame
//! limit; the rest is the stream. Checked on every input:
//! - nothing panics;
//! - the decoder never holds more than its frame limit;
//! - the results are the same whole and in chunks (a fatal error restarts a
//!   fresh decoder at the byte after it, as a new connection would);
//! - every frame that decodes encodes again, and a stream that is exactly one
//!   frame re-encodes to itself (the encoding is canonical).

#![no_main]

use libfuzzer_sys::fuzz_target;
use styx_net::{Decoder, Error, FRAME_LEN_MAX, FRAME_LEN_MAX_FLOOR, Frame, encode};

/// xorshift64*: enough to spread chunk sizes, and no dependency.
struct Chunks(u64);

impl Chunks {
    fn next(&mut self) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let r = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d);
        // Mostly small chunks, sometimes large ones.
        1 + (r % if r & 0x100 == 0 { 16 } else { 4096 }) as usize
    }
}

fn decode(stream: &[u8], frame_len_max: usize, mut next_chunk: impl FnMut() -> usize) -> Vec<Result<Frame, Error>> {
    let mut decoder = Decoder::new(frame_len_max);
    let mut results = Vec::new();
    let mut rest = stream;
    while !rest.is_empty() {
        let n = next_chunk().clamp(1, rest.len());
        let mut input = &rest[..n];
        rest = &rest[n..];
        while let Some(result) = decoder.decode(&mut input) {
            assert!(decoder.buffer_capacity() <= frame_len_max);
            let fatal = result.as_ref().is_err_and(Error::is_fatal);
            results.push(result);
            if fatal {
                assert!(decoder.has_failed());
                decoder = Decoder::new(frame_len_max);
            }
        }
        assert!(decoder.buffer_capacity() <= frame_len_max);
    }
    if let Err(e) = decoder.finish() {
        results.push(Err(e));
    }
    results
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let (seed, stream) = data.split_at(8);
    let seed = u64::from_le_bytes(seed.try_into().unwrap());
    let frame_len_max = if seed & 1 == 0 {
        FRAME_LEN_MAX_FLOOR
    } else {
        FRAME_LEN_MAX
    };

    let whole = decode(stream, frame_len_max, || usize::MAX);
    let mut chunks = Chunks(seed | 1);
    let chunked = decode(stream, frame_len_max, || chunks.next());
    assert_eq!(whole, chunked);

    for frame in whole.iter().flatten() {
        let mut bytes = Vec::new();
        encode(frame, &mut bytes).expect("a decoded frame encodes");
    }
    if let [Ok(frame)] = &whole[..] {
        let mut bytes = Vec::new();
        encode(frame, &mut bytes).unwrap();
        assert_eq!(bytes, stream);
    }
});
