//! Every frame survives encode → decode, and the frames that come out of a
//! stream do not depend on how the stream was cut into chunks.

mod common;

use common::*;
use std::collections::HashSet;
use styx_engine::rng::Rng;
use styx_net::{FRAME_LEN_MAX, FrameType, encode, encoded_len};

#[test]
fn every_frame_type_roundtrips() {
    let samples = samples();
    let types: HashSet<FrameType> = samples.iter().map(|f| f.body.frame_type()).collect();
    assert_eq!(types.len(), FrameType::ALL.len(), "a frame type has no sample");
    for frame in samples {
        let bytes = encode_one(&frame);
        assert_eq!(bytes.len(), encoded_len(&frame));
        assert_eq!(bytes[5], frame.body.frame_type() as u8);
        let decoded = decode_whole(&bytes, FRAME_LEN_MAX);
        assert_eq!(decoded.results, [Ok(frame.clone())]);
        assert_eq!(decoded.end, Ok(()));
    }
}

#[test]
fn encode_appends_and_leaves_the_output_alone_on_error() {
    let mut out = vec![0xaa];
    let frame = frame(1, styx_net::Body::Ping { data: 3 });
    assert_eq!(encode(&frame, &mut out), Ok(18));
    assert_eq!(out.len(), 19);
    let bad = request(2, styx_engine::Address::Partition(1), styx_engine::Payload::EMPTY);
    let styx_net::Body::Request(mut r) = bad.body else {
        unreachable!()
    };
    r.operator = "x".repeat(styx_net::NAME_LEN_MAX + 1);
    let bad = common::frame(2, styx_net::Body::Request(r));
    assert!(encode(&bad, &mut out).is_err());
    assert_eq!(out.len(), 19);
}

/// The small samples: streams of the big ones would make byte-by-byte slow.
fn small_samples() -> Vec<styx_net::Frame> {
    samples().into_iter().filter(|f| encoded_len(f) < 4096).collect()
}

#[test]
fn byte_by_byte_gives_the_same_frames() {
    let frames = small_samples();
    let bytes = encode_all(&frames);
    let whole = decode_whole(&bytes, FRAME_LEN_MAX);
    assert_eq!(whole.results, frames.iter().cloned().map(Ok).collect::<Vec<_>>());
    assert_eq!(decode_chunked(&bytes, FRAME_LEN_MAX, || 1), whole);
}

#[test]
fn every_split_point_gives_the_same_frames() {
    let frames = small_samples();
    let bytes = encode_all(&frames[..6]);
    let whole = decode_whole(&bytes, FRAME_LEN_MAX);
    for split in 1..bytes.len() {
        let mut sizes = [split, usize::MAX].into_iter();
        assert_eq!(
            decode_chunked(&bytes, FRAME_LEN_MAX, || sizes.next().unwrap()),
            whole,
            "split at {split}"
        );
    }
}

#[test]
fn random_chunks_give_the_same_frames() {
    for seed in 0..200 {
        let mut rng = Rng::new(seed);
        let n = 1 + rng.below(60) as usize;
        let mut frames: Vec<_> = (0..n).map(|_| random_frame(&mut rng)).collect();
        if seed % 10 == 0 {
            frames.extend(samples());
        }
        let bytes = encode_all(&frames);
        let whole = decode_whole(&bytes, FRAME_LEN_MAX);
        assert_eq!(
            whole.results,
            frames.iter().cloned().map(Ok).collect::<Vec<_>>(),
            "seed {seed}"
        );
        for bound in [3, 17, 200, 5000] {
            let chunked = decode_chunked(&bytes, FRAME_LEN_MAX, || 1 + rng.below(bound) as usize);
            assert_eq!(chunked, whole, "seed {seed}, chunks up to {bound}");
        }
        // Re-encoding what was decoded gives the stream back: the encoding is canonical.
        let again: Vec<_> = whole.results.into_iter().map(Result::unwrap).collect();
        assert_eq!(encode_all(&again), bytes);
    }
}
