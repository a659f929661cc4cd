//! Hostile input: millions of random bytes, plausible garbage and mutations
//! of valid frames. The decoder must never panic, must give the same results
//! however the stream is cut, and must never allocate beyond its frame limit.
//!
//! Allocations are measured by a counting allocator around each call into
//! the decoder (this test binary only). All of it replays from the seeds.

mod common;

use common::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use styx_engine::rng::Rng;
use styx_net::{Decoder, FRAME_LEN_MAX, FRAME_LEN_MAX_FLOOR, FrameType, VERSION, encode};

/// Counts the allocations of the thread that asked, while it asks.
struct Counting;

thread_local! {
    static TRACKING: Cell<bool> = const { Cell::new(false) };
    /// Bytes allocated minus freed since tracking started, and its peak.
    static LIVE: Cell<i64> = const { Cell::new(0) };
    static PEAK: Cell<i64> = const { Cell::new(0) };
    /// The largest single allocation or reallocation.
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(delta: i64, size: usize) {
    // `try_with`: the allocator may run while the thread's locals are torn down.
    let _ = TRACKING.try_with(|t| {
        if t.get() {
            LIVE.with(|l| {
                l.set(l.get() + delta);
                PEAK.with(|p| p.set(p.get().max(l.get())));
            });
            LARGEST.with(|m| m.set(m.get().max(size)));
        }
    });
}

// SAFETY: every call is passed unchanged to the system allocator; the
// bookkeeping only touches thread-locals that need no allocation.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size() as i64, layout.size());
        // SAFETY: the caller's guarantees for `alloc` hold for `System.alloc`.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note(-(layout.size() as i64), 0);
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size as i64 - layout.size() as i64, new_size);
        // SAFETY: `ptr` was allocated by `System` with `layout`; the caller
        // guarantees `new_size` is valid for it.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// What the decoder allocated across the calls of one stream.
#[derive(Debug, Default)]
struct Measure {
    largest: usize,
    peak_per_call: i64,
}

/// Decodes `bytes` in chunks sized by `next_chunk`, starting a fresh decoder
/// after each fatal error, and measures every call. Returns the results and
/// the measure.
fn decode_measured(
    bytes: &[u8],
    frame_len_max: usize,
    mut next_chunk: impl FnMut() -> usize,
) -> (Vec<Result<styx_net::Frame, styx_net::Error>>, Measure) {
    let mut decoder = Decoder::new(frame_len_max);
    let mut results = Vec::new();
    let mut measure = Measure::default();
    let mut rest = bytes;
    while !rest.is_empty() {
        let n = next_chunk().clamp(1, rest.len());
        let mut input = &rest[..n];
        rest = &rest[n..];
        loop {
            LIVE.with(|l| l.set(0));
            PEAK.with(|p| p.set(0));
            LARGEST.with(|m| m.set(0));
            TRACKING.with(|t| t.set(true));
            let result = decoder.decode(&mut input);
            TRACKING.with(|t| t.set(false));
            measure.largest = measure.largest.max(LARGEST.with(Cell::get));
            measure.peak_per_call = measure.peak_per_call.max(PEAK.with(Cell::get));
            assert!(decoder.buffer_capacity() <= frame_len_max);
            let Some(result) = result else { break };
            let fatal = result.as_ref().is_err_and(|e| e.is_fatal());
            results.push(result);
            if fatal {
                // Go on from the byte after the fault, as if a new
                // connection had started there: every offset of the stream
                // gets tried as the start of a frame.
                let mut rest = input;
                assert_eq!(decoder.decode(&mut rest), None);
                assert!(rest.is_empty(), "a failed decoder discards its input");
                decoder = Decoder::new(frame_len_max);
            }
        }
    }
    (results, measure)
}

fn check_bounds(measure: &Measure, frame_len_max: usize, what: &str) {
    // One buffer of at most a frame; the frame parsed from it copies at most
    // its own bytes.
    assert!(
        measure.largest <= frame_len_max,
        "{what}: an allocation of {} bytes, limit {frame_len_max}",
        measure.largest
    );
    assert!(
        measure.peak_per_call <= 2 * frame_len_max as i64,
        "{what}: {} bytes live in one call, limit {frame_len_max}",
        measure.peak_per_call
    );
}

/// Random bytes in random chunks, byte by byte for a prefix; results agree.
fn hammer(bytes: &[u8], seed: u64, what: &str) -> (usize, usize) {
    let (mut ok, mut results) = (0, 0);
    for frame_len_max in [FRAME_LEN_MAX_FLOOR, FRAME_LEN_MAX] {
        let mut rng = Rng::new(seed);
        let (whole, m) = decode_measured(bytes, frame_len_max, || usize::MAX);
        check_bounds(&m, frame_len_max, what);
        let (chunked, m) = decode_measured(bytes, frame_len_max, || 1 + rng.below(3000) as usize);
        check_bounds(&m, frame_len_max, what);
        assert_eq!(chunked, whole, "{what}");
        ok += whole.iter().filter(|r| r.is_ok()).count();
        results += whole.len();
    }
    (ok, results)
}

#[test]
fn millions_of_random_bytes() {
    let mut rng = Rng::new(0x5717_0001);
    let bytes: Vec<u8> = (0..4 << 20).map(|_| rng.next_u64() as u8).collect();
    let (_, results) = hammer(&bytes, 1, "random bytes");
    // Each fatal error costs 4 or 5 bytes: the decoder restarted about a million times.
    assert!(results > 1 << 20, "{results} results");
    // Byte by byte over a prefix: every prologue check on partial input.
    let mut rng = Rng::new(2);
    let (_, m) = decode_measured(&bytes[..1 << 18], FRAME_LEN_MAX_FLOOR, || 1 + rng.below(2) as usize);
    check_bounds(&m, FRAME_LEN_MAX_FLOOR, "byte by byte");
}

/// Garbage that passes the prologue: small lengths, the right version, a
/// known or random type, random body bytes with small numbers among them
/// (so that inner lengths sometimes fit).
fn plausible_garbage(rng: &mut Rng, frames: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..frames {
        let body_len_max = if rng.chance(0.5) { 200 } else { 12 };
        let body_len = rng.below(body_len_max) as usize;
        out.extend_from_slice(&(6 + body_len as u32).to_le_bytes());
        out.push(if rng.chance(0.999) {
            VERSION
        } else {
            rng.next_u64() as u8
        });
        out.push(if rng.chance(0.9) {
            FrameType::ALL[rng.below(FrameType::ALL.len() as u64) as usize] as u8
        } else {
            rng.next_u64() as u8
        });
        out.extend_from_slice(&(rng.next_u64() as u32).to_le_bytes());
        let mut i = 0;
        while i < body_len {
            if rng.chance(0.2) && i + 4 <= body_len {
                out.extend_from_slice(&(rng.below(24) as u32).to_le_bytes());
                i += 4;
            } else {
                out.push(if rng.chance(0.5) {
                    rng.below(3) as u8
                } else {
                    rng.next_u64() as u8
                });
                i += 1;
            }
        }
    }
    out
}

#[test]
fn plausible_garbage_decodes_to_errors_or_frames_without_panic() {
    let mut rng = Rng::new(0x5717_0002);
    let mut decoded = 0;
    for round in 0..40 {
        let bytes = plausible_garbage(&mut rng, 2000);
        decoded += hammer(&bytes, round, "plausible garbage").0;
    }
    eprintln!("plausible garbage: {decoded} frames decoded");
    assert!(
        decoded > 100,
        "the garbage never decoded: it tests only the error paths"
    );
}

/// One random change to a valid encoding.
fn mutate(rng: &mut Rng, bytes: &mut Vec<u8>) {
    let at = rng.below(bytes.len() as u64 + 1) as usize;
    match rng.below(7) {
        0 if at < bytes.len() => bytes[at] ^= 1 << rng.below(8),
        1 if at < bytes.len() => bytes[at] = rng.next_u64() as u8,
        2 if at + 4 <= bytes.len() => {
            let v = [0u32, 1, 5, 0xff, 0xffff, u32::MAX, rng.next_u64() as u32][rng.below(7) as usize];
            bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
        }
        3 => bytes.truncate(at),
        4 => bytes.insert(at, rng.next_u64() as u8),
        5 if at < bytes.len() => {
            bytes.remove(at);
        }
        _ => {
            // Keep the length prefix true to the new size, so the body is what is wrong.
            if bytes.len() >= 4 {
                let len = (bytes.len() - 4) as u32;
                bytes[..4].copy_from_slice(&len.to_le_bytes());
            }
        }
    }
}

#[test]
fn mutations_of_valid_frames() {
    let mut rng = Rng::new(0x5717_0003);
    let mut valid: Vec<_> = samples()
        .into_iter()
        .filter(|f| styx_net::encoded_len(f) < 8192)
        .collect();
    let (mut decoded, mut refused) = (0, 0);
    for round in 0..60_000u64 {
        if valid.len() < 200 {
            valid.push(random_frame(&mut rng));
        }
        let original = &valid[rng.below(valid.len() as u64) as usize];
        let mut bytes = encode_one(original);
        for _ in 0..1 + rng.below(3) {
            mutate(&mut rng, &mut bytes);
        }
        let whole = decode_whole(&bytes, FRAME_LEN_MAX);
        let mut chunk_rng = Rng::new(round);
        assert_eq!(
            decode_chunked(&bytes, FRAME_LEN_MAX, || 1 + chunk_rng.below(12) as usize),
            whole,
            "round {round}"
        );
        // A mutant that still decodes, alone and whole, re-encodes to itself:
        // no two encodings mean the same frame.
        if let ([Ok(frame)], Ok(())) = (&whole.results[..], &whole.end) {
            let mut again = Vec::new();
            encode(frame, &mut again).unwrap();
            assert_eq!(again, bytes, "round {round}: {frame:?}");
            decoded += 1;
        } else {
            refused += 1;
        }
        if round % 64 == 0 {
            let (_, m) = decode_measured(&bytes, FRAME_LEN_MAX_FLOOR, || 1 + chunk_rng.below(8) as usize);
            check_bounds(&m, FRAME_LEN_MAX_FLOOR, "mutant");
        }
    }
    assert!(
        decoded > 1000 && refused > 10_000,
        "decoded {decoded}, refused {refused}"
    );
}

#[test]
fn a_huge_announced_frame_costs_only_what_arrives() {
    let mut bytes = ((FRAME_LEN_MAX - 4) as u32).to_le_bytes().to_vec();
    bytes.extend_from_slice(&[VERSION, FrameType::Request as u8, 1, 0, 0, 0]);
    bytes.resize(1000, 0);
    let mut decoder = Decoder::new(FRAME_LEN_MAX);
    LIVE.with(|l| l.set(0));
    PEAK.with(|p| p.set(0));
    TRACKING.with(|t| t.set(true));
    for chunk in bytes.chunks(10) {
        let mut input = chunk;
        assert_eq!(decoder.decode(&mut input), None);
    }
    TRACKING.with(|t| t.set(false));
    let peak = PEAK.with(Cell::get);
    assert!(peak <= 2048, "{peak} bytes held for 1000 received");
    assert_eq!(decoder.buffered(), 1000);
}
