//! `docs/protocol.md` is the specification clients are written from: its
//! worked examples must be exactly what the encoder writes and the decoder
//! reads, offsets included, and its tables must name every code and type.

mod common;

use common::*;
use styx_engine::{Abort, Address, Key, PAYLOAD_LEN_MAX, Payload};
use styx_net::{Body, ErrorCode, FRAME_LEN_MAX, FrameType, Welcome};

const SPEC: &str = include_str!("../../docs/protocol.md");

/// The bytes of the example after `<!-- example: NAME -->`: each line is an
/// offset, hex bytes, then `#` and a comment. Offsets must count right.
fn example(name: &str) -> Vec<u8> {
    let marker = format!("<!-- example: {name} -->");
    let start = SPEC.find(&marker).unwrap_or_else(|| panic!("no example {name}"));
    let block = SPEC[start..].split("```text\n").nth(1).expect("a text block");
    let block = block.split("```").next().unwrap();
    let mut bytes = Vec::new();
    for line in block.lines().filter(|l| !l.trim().is_empty()) {
        let data = line.split('#').next().unwrap();
        let mut tokens = data.split_whitespace();
        let offset = usize::from_str_radix(tokens.next().unwrap(), 16).unwrap();
        assert_eq!(offset, bytes.len(), "example {name}: wrong offset on {line:?}");
        for t in tokens {
            assert_eq!(t.len(), 2, "example {name}: {t:?} on {line:?}");
            bytes.push(u8::from_str_radix(t, 16).unwrap());
        }
    }
    bytes
}

fn check(name: &str, frame: styx_net::Frame) {
    let bytes = example(name);
    assert_eq!(
        encode_one(&frame),
        bytes,
        "example {name} is not what the encoder writes"
    );
    assert_eq!(decode_whole(&bytes, FRAME_LEN_MAX).results, [Ok(frame)]);
    assert_eq!(decode_chunked(&bytes, FRAME_LEN_MAX, || 1).results.len(), 1);
}

#[test]
fn worked_examples_are_byte_exact() {
    check(
        "hello",
        frame(
            0,
            Body::Hello {
                version_min: 1,
                version_max: 1,
                client: "styx-cli".into(),
            },
        ),
    );
    check(
        "welcome",
        frame(
            0,
            Body::Welcome(Welcome {
                version: 1,
                frame_len_max: FRAME_LEN_MAX as u32,
                in_flight_max: 1024,
                payload_len_max: PAYLOAD_LEN_MAX as u32,
                server: "styx 0.1.0".into(),
            }),
        ),
    );
    check(
        "request",
        request(1, Address::Entity(Key::from(5u64)), Payload::encode(&100i64)),
    );
    check(
        "committed",
        frame(
            1,
            Body::Committed {
                tid: 1025,
                result: Payload::encode(&100i64),
            },
        ),
    );
    check(
        "aborted",
        frame(
            1,
            Body::Aborted {
                tid: 1025,
                abort: Abort::new("insufficient credit"),
            },
        ),
    );
}

#[test]
fn tables_name_every_code_and_type() {
    for code in ErrorCode::ALL {
        let row = format!("| `{:#06x}` | {}", code.0, code.name().unwrap());
        assert!(SPEC.contains(&row), "no row for {code} in the error table");
        let fatal = if code.is_fatal() { "yes" } else { "no " };
        let line = SPEC.lines().find(|l| l.starts_with(&row)).unwrap();
        assert!(
            line.contains(&format!("| {fatal} |")),
            "{code}: fatal should be {fatal}: {line}"
        );
    }
    for t in FrameType::ALL {
        let row = format!("| `{:#04x}` |", t as u8);
        assert!(SPEC.contains(&row), "no row for {t:?} in the type table");
    }
    for (name, value) in [
        ("FRAME_LEN_MAX", "1 052 672"),
        ("FRAME_LEN_MAX_FLOOR", "4 096"),
        ("PAYLOAD_LEN_MAX", "1 048 576"),
    ] {
        assert!(
            SPEC.contains(&format!("| `{name}` | {value}")),
            "{name} is not {value} in the spec"
        );
    }
    assert_eq!(styx_net::FRAME_LEN_MAX, 1_052_672);
    assert_eq!(styx_net::FRAME_LEN_MAX_FLOOR, 4_096);
    assert_eq!(PAYLOAD_LEN_MAX, 1_048_576);
}

/// The key hash as section 5 (MAP_REPLY) spells it, for clients in other
/// languages: it must be the engine's, or their requests land elsewhere.
#[test]
fn the_documented_key_hash_is_the_engines() {
    fn documented(bytes: &[u8]) -> u64 {
        let mut h: u64 = 0xcbf29ce484222325;
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x100000001b3);
        }
        let mut z = h;
        z ^= z >> 30;
        z = z.wrapping_mul(0xbf58476d1ce4e5b9);
        z ^= z >> 27;
        z = z.wrapping_mul(0x94d049bb133111eb);
        z ^ (z >> 31)
    }
    for text in [
        "cbf29ce484222325",
        "100000001b3",
        "bf58476d1ce4e5b9",
        "94d049bb133111eb",
    ] {
        assert!(SPEC.contains(text), "the spec no longer gives {text}");
    }
    for k in [0u64, 1, 42, u64::MAX] {
        let key = Key::from(k);
        assert_eq!(documented(key.as_bytes()), key.hash64(), "key {k}");
    }
    for bytes in [&b""[..], b"alice", &[0xff; 300]] {
        assert_eq!(documented(bytes), Key::from_bytes(bytes).hash64());
    }
}
