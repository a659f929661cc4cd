//! Frames for tests: one of every type with its edge cases, random ones from
//! a seed, raw bytes for frames the encoder refuses to write, and decoding
//! a stream in given chunks.

#![allow(dead_code)]

use styx_engine::rng::Rng;
use styx_engine::{ABORT_MESSAGE_LEN_MAX, Abort, AbortKind, Address, KEY_LEN_MAX, Key, PAYLOAD_LEN_MAX, Payload};
use styx_net::{
    Body, Decoder, Error, ErrorCode, FRAME_LEN_MAX, Frame, FrameType, Layout, Map, MapNode, MapOperator, Members,
    NAME_LEN_MAX, PEER_NAME_LEN_MAX, Placement, Request, Status, VERSION, Welcome, encode,
};

pub fn frame(corr: u32, body: Body) -> Frame {
    Frame { corr, body }
}

pub fn request(corr: u32, target: Address, args: Payload) -> Frame {
    frame(
        corr,
        Body::Request(Request {
            client: 42,
            seq: 7,
            ack: 7,
            operator: "account".into(),
            function: "deposit".into(),
            target,
            args,
        }),
    )
}

/// At least one frame of every type, with the edge cases of each field.
pub fn samples() -> Vec<Frame> {
    let long_name = "n".repeat(NAME_LEN_MAX);
    vec![
        frame(
            1,
            Body::Hello {
                version_min: 1,
                version_max: 1,
                client: "styx-cli 0.1".into(),
            },
        ),
        frame(
            0,
            Body::Hello {
                version_min: 0,
                version_max: 255,
                client: "é".repeat(PEER_NAME_LEN_MAX / 2),
            },
        ),
        frame(
            1,
            Body::Welcome(Welcome {
                version: 1,
                frame_len_max: FRAME_LEN_MAX as u32,
                in_flight_max: 1024,
                payload_len_max: PAYLOAD_LEN_MAX as u32,
                server: "styx 0.1.0".into(),
            }),
        ),
        frame(2, Body::Ping { data: 0 }),
        frame(u32::MAX, Body::Ping { data: u64::MAX }),
        frame(
            2,
            Body::Pong {
                data: 0x0102_0304_0506_0708,
            },
        ),
        frame(3, Body::Status),
        frame(3, Body::StatusReply(Status::default())),
        frame(
            3,
            Body::StatusReply(Status {
                shards: 64,
                epoch: 123_456,
                uptime_ms: 9_000,
                committed: 1 << 40,
                aborted: 17,
                committed_per_s: 250_000,
                aborted_per_s: 3,
                epochs_per_s: 900,
                connections: 12,
                in_flight: u32::MAX,
            }),
        ),
        frame(3, Body::Map),
        frame(4, Body::Placement),
        frame(4, Body::PlacementReply(Placement::default())),
        frame(5, Body::Layout),
        frame(5, Body::LayoutReply(Layout::default())),
        frame(6, Body::Members),
        frame(6, Body::MembersReply(Members::default())),
        frame(
            6,
            Body::MembersReply(Members {
                version: u64::MAX,
                left: vec![0, 2, u16::MAX],
            }),
        ),
        frame(
            5,
            Body::LayoutReply(Layout {
                version: u64::MAX,
                node_of: vec![0, 2, 1, 0, u16::MAX],
            }),
        ),
        frame(
            4,
            Body::PlacementReply(Placement {
                version: u64::MAX,
                moved: vec![vec![], vec![(0, 1), (7, u16::MAX), (u32::MAX, 0)]],
            }),
        ),
        frame(
            3,
            Body::MapReply(Map::single(
                1,
                "127.0.0.1:7000".into(),
                vec![MapOperator {
                    name: "account".into(),
                    partitions: 64,
                }],
            )),
        ),
        frame(
            3,
            Body::MapReply(Map {
                node: 2,
                shards: 5,
                nodes: vec![
                    MapNode {
                        first_shard: 0,
                        shards: 2,
                        client: "10.0.0.1:7000".into(),
                    },
                    MapNode {
                        first_shard: 2,
                        shards: 1,
                        client: "[::1]:7000".into(),
                    },
                    MapNode {
                        first_shard: 3,
                        shards: 2,
                        client: "db-3.example:7000".into(),
                    },
                ],
                operators: vec![
                    MapOperator {
                        name: "a".into(),
                        partitions: 1,
                    },
                    MapOperator {
                        name: long_name.clone(),
                        partitions: u32::MAX,
                    },
                ],
                placed: None,
            }),
        ),
        request(4, Address::Entity(Key::from(5u64)), Payload::encode(&100i64)),
        request(5, Address::Entity(Key::from_bytes(&[])), Payload::EMPTY),
        request(6, Address::Partition(65_535), Payload::encode(&("x", 1u8))),
        frame(
            7,
            Body::Request(Request {
                client: 0,
                seq: u64::MAX,
                ack: 0,
                operator: long_name.clone(),
                function: String::new(),
                target: Address::Entity(Key::from_bytes(&[0xab; KEY_LEN_MAX])),
                args: Payload::from_vec(vec![0x5a; PAYLOAD_LEN_MAX]),
            }),
        ),
        frame(
            8,
            Body::Get {
                operator: "account".into(),
                key: Key::from(5u64),
            },
        ),
        frame(
            8,
            Body::Get {
                operator: long_name,
                key: Key::from_bytes(&[1; KEY_LEN_MAX]),
            },
        ),
        frame(
            9,
            Body::Committed {
                tid: 1025,
                result: Payload::encode(&100i64),
            },
        ),
        frame(
            9,
            Body::Committed {
                tid: 0,
                result: Payload::EMPTY,
            },
        ),
        frame(
            9,
            Body::Committed {
                tid: u64::MAX,
                result: Payload::from_vec(vec![1; PAYLOAD_LEN_MAX]),
            },
        ),
        frame(
            10,
            Body::Aborted {
                tid: 77,
                abort: Abort::new("insufficient credit"),
            },
        ),
        frame(
            10,
            Body::Aborted {
                tid: 78,
                abort: Abort::with_kind(AbortKind::Panic, "ü".repeat(ABORT_MESSAGE_LEN_MAX / 2)),
            },
        ),
        frame(
            10,
            Body::Aborted {
                tid: 79,
                abort: Abort::with_kind(AbortKind::Stalled, ""),
            },
        ),
        frame(11, Body::State { value: None }),
        frame(11, Body::State { value: Some(vec![]) }),
        frame(
            11,
            Body::State {
                value: Some(vec![9; 1000]),
            },
        ),
        frame(
            12,
            Body::Error {
                code: ErrorCode::UNKNOWN_FUNCTION,
                message: "operator \"account\" has no function \"x\"".into(),
            },
        ),
        frame(
            0,
            Body::Error {
                code: ErrorCode(0xbeef),
                message: String::new(),
            },
        ),
    ]
}

fn random_string(rng: &mut Rng, max: usize) -> String {
    let len = rng.below(max as u64 + 1) as usize;
    (0..len).map(|_| (b'a' + rng.below(26) as u8) as char).collect()
}

fn random_bytes(rng: &mut Rng, max: usize) -> Vec<u8> {
    let len = rng.below(max as u64 + 1) as usize;
    (0..len).map(|_| rng.next_u64() as u8).collect()
}

/// A random valid frame; payloads stay small so streams are many frames long.
pub fn random_frame(rng: &mut Rng) -> Frame {
    let corr = rng.next_u64() as u32;
    let abort_kinds = [
        AbortKind::User,
        AbortKind::Panic,
        AbortKind::UnknownFunction,
        AbortKind::BadArguments,
        AbortKind::Limit,
        AbortKind::State,
        AbortKind::Stalled,
        AbortKind::Concurrent,
    ];
    let body = match rng.below(18) {
        0 => Body::Hello {
            version_min: rng.next_u64() as u8,
            version_max: rng.next_u64() as u8,
            client: random_string(rng, PEER_NAME_LEN_MAX),
        },
        1 => Body::Welcome(Welcome {
            version: rng.next_u64() as u8,
            frame_len_max: rng.next_u64() as u32,
            in_flight_max: rng.next_u64() as u32,
            payload_len_max: rng.next_u64() as u32,
            server: random_string(rng, PEER_NAME_LEN_MAX),
        }),
        2 => Body::Ping { data: rng.next_u64() },
        3 => Body::Pong { data: rng.next_u64() },
        4 => Body::Status,
        5 => Body::StatusReply(Status {
            shards: rng.next_u64() as u16,
            epoch: rng.next_u64(),
            uptime_ms: rng.next_u64(),
            committed: rng.next_u64(),
            aborted: rng.next_u64(),
            committed_per_s: rng.next_u64(),
            aborted_per_s: rng.next_u64(),
            epochs_per_s: rng.next_u64(),
            connections: rng.next_u64() as u32,
            in_flight: rng.next_u64() as u32,
        }),
        6 => Body::Request(Request {
            client: rng.next_u64(),
            seq: rng.next_u64(),
            ack: rng.next_u64(),
            operator: random_string(rng, 24),
            function: random_string(rng, 24),
            target: if rng.chance(0.5) {
                Address::Entity(Key::from_bytes(&random_bytes(rng, 40)))
            } else {
                Address::Partition(rng.next_u64() as u32)
            },
            args: Payload::from_vec(random_bytes(rng, 64)),
        }),
        7 => Body::Get {
            operator: random_string(rng, 24),
            key: Key::from_bytes(&random_bytes(rng, 40)),
        },
        8 => Body::Committed {
            tid: rng.next_u64(),
            result: Payload::from_vec(random_bytes(rng, 64)),
        },
        9 => Body::Aborted {
            tid: rng.next_u64(),
            abort: Abort::with_kind(
                abort_kinds[rng.below(abort_kinds.len() as u64) as usize],
                random_string(rng, 80),
            ),
        },
        10 => Body::State {
            value: rng.chance(0.7).then(|| random_bytes(rng, 64)),
        },
        11 => Body::Map,
        12 => {
            // A consistent map: random node sizes tiling the shards.
            let mut nodes = Vec::new();
            let mut first = 0u16;
            for _ in 0..1 + rng.below(4) {
                let shards = 1 + rng.below(3) as u16;
                nodes.push(MapNode {
                    first_shard: first,
                    shards,
                    client: random_string(rng, 24),
                });
                first += shards;
            }
            Body::MapReply(Map {
                node: rng.below(nodes.len() as u64) as u16,
                shards: first,
                nodes,
                operators: (0..rng.below(4))
                    .map(|_| MapOperator {
                        name: random_string(rng, 24),
                        partitions: 1 + rng.below(1 << 20) as u32,
                    })
                    .collect(),
                placed: None,
            })
        }
        13 => Body::Layout,
        14 => Body::LayoutReply(Layout {
            version: rng.next_u64(),
            node_of: (0..rng.below(65)).map(|_| rng.below(8) as u16).collect(),
        }),
        15 => Body::Members,
        16 => Body::MembersReply(Members {
            version: rng.next_u64(),
            left: (0..64u16).filter(|_| rng.chance(0.2)).collect(),
        }),
        _ => Body::Error {
            code: ErrorCode(rng.next_u64() as u16),
            message: random_string(rng, 80),
        },
    };
    frame(corr, body)
}

pub fn encode_all(frames: &[Frame]) -> Vec<u8> {
    let mut out = Vec::new();
    for f in frames {
        encode(f, &mut out).unwrap();
    }
    out
}

pub fn encode_one(frame: &Frame) -> Vec<u8> {
    encode_all(std::slice::from_ref(frame))
}

/// What a decoder makes of a stream: every frame or error, then `finish`.
#[derive(Debug, PartialEq, Eq)]
pub struct Decoded {
    pub results: Vec<Result<Frame, Error>>,
    pub end: Result<(), Error>,
}

/// Decodes `bytes` in chunks whose sizes `next_chunk` picks (each at least 1).
pub fn decode_chunked(bytes: &[u8], frame_len_max: usize, mut next_chunk: impl FnMut() -> usize) -> Decoded {
    let mut decoder = Decoder::new(frame_len_max);
    let mut results = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let n = next_chunk().clamp(1, rest.len());
        let mut input = &rest[..n];
        rest = &rest[n..];
        while let Some(r) = decoder.decode(&mut input) {
            results.push(r);
        }
        assert!(input.is_empty(), "the decoder left input unread");
    }
    Decoded {
        results,
        end: decoder.finish(),
    }
}

pub fn decode_whole(bytes: &[u8], frame_len_max: usize) -> Decoded {
    decode_chunked(bytes, frame_len_max, || usize::MAX)
}

/// Builds frames byte by byte, for the ones the encoder will not write.
#[derive(Default)]
pub struct Raw(pub Vec<u8>);

impl Raw {
    pub fn u8(mut self, v: u8) -> Raw {
        self.0.push(v);
        self
    }
    pub fn u16(mut self, v: u16) -> Raw {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u32(mut self, v: u32) -> Raw {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(mut self, v: u64) -> Raw {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn raw(mut self, bytes: &[u8]) -> Raw {
        self.0.extend_from_slice(bytes);
        self
    }
    /// A `u32` length, then the bytes.
    pub fn sized(self, bytes: &[u8]) -> Raw {
        self.u32(bytes.len() as u32).raw(bytes)
    }
    /// The whole frame: a header with the right length, then this body.
    pub fn frame(self, frame_type: u8, corr: u32) -> Vec<u8> {
        let mut out = Vec::with_capacity(10 + self.0.len());
        out.extend_from_slice(&(6 + self.0.len() as u32).to_le_bytes());
        out.push(VERSION);
        out.push(frame_type);
        out.extend_from_slice(&corr.to_le_bytes());
        out.extend_from_slice(&self.0);
        out
    }
}

/// The body of a REQUEST up to its target, with these names.
pub fn request_head(operator: &[u8], function: &[u8]) -> Raw {
    Raw::default().u64(42).u64(7).u64(7).sized(operator).sized(function)
}

pub const REQUEST: u8 = FrameType::Request as u8;
