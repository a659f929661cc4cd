//! Each kind of malformed input gives its own error, fatal ones stop the
//! decoder and recoverable ones do not.

mod common;

use common::*;
use styx_engine::{Address, KEY_LEN_MAX, Key, PAYLOAD_LEN_MAX, Payload};
use styx_net::{Body, Decoder, Error, ErrorCode, FRAME_LEN_MAX, FRAME_LEN_MAX_FLOOR, FrameType, NAME_LEN_MAX, encode};

fn ping(corr: u32) -> Vec<u8> {
    encode_one(&frame(corr, Body::Ping { data: 1 }))
}

/// Decodes `bad` followed by a valid PING, whole and byte by byte (which
/// must agree), and returns the first result and whether the PING came out.
fn decode_then_ping(bad: &[u8]) -> (Error, bool) {
    let mut bytes = bad.to_vec();
    bytes.extend_from_slice(&ping(99));
    let whole = decode_whole(&bytes, FRAME_LEN_MAX);
    assert_eq!(decode_chunked(&bytes, FRAME_LEN_MAX, || 1), whole);
    let error = whole.results[0].clone().expect_err("the bad frame decoded");
    let ping_came_out = whole.results.last() == Some(&Ok(frame(99, Body::Ping { data: 1 })));
    assert_eq!(error.is_fatal(), !ping_came_out, "{error}");
    (error, ping_came_out)
}

fn recoverable(bad: &[u8]) -> Error {
    let (error, ping) = decode_then_ping(bad);
    assert!(ping, "the connection should go on after {error}");
    error
}

fn fatal(bad: &[u8]) -> Error {
    let (error, ping) = decode_then_ping(bad);
    assert!(!ping, "the decoder went on after {error}");
    error
}

#[test]
fn truncated_frame() {
    let bytes = ping(1);
    for cut in 1..bytes.len() {
        let decoded = decode_whole(&bytes[..cut], FRAME_LEN_MAX);
        assert_eq!(decoded.results, []);
        assert_eq!(decoded.end, Err(Error::Truncated { buffered: cut }));
        assert_eq!(decoded.end.unwrap_err().code(), ErrorCode::TRUNCATED);
    }
    assert_eq!(decode_whole(&bytes, FRAME_LEN_MAX).end, Ok(()));
}

#[test]
fn wrong_version() {
    let mut bytes = ping(1);
    bytes[4] = 2;
    assert_eq!(fatal(&bytes), Error::BadVersion { got: 2, expected: 1 });
    bytes[4] = 0;
    assert_eq!(fatal(&bytes).code(), ErrorCode::BAD_VERSION);
}

#[test]
fn oversized_length() {
    let mut bytes = ping(1);
    bytes[..4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(
        fatal(&bytes),
        Error::FrameTooLarge {
            len: u64::from(u32::MAX) + 4,
            max: FRAME_LEN_MAX
        }
    );
    // One byte over the limit, for a decoder with a lower limit.
    let mut bytes = ping(1);
    bytes[..4].copy_from_slice(&(FRAME_LEN_MAX_FLOOR as u32 - 3).to_le_bytes());
    let mut decoder = Decoder::new(FRAME_LEN_MAX_FLOOR);
    let mut input = &bytes[..];
    assert_eq!(
        decoder.decode(&mut input),
        Some(Err(Error::FrameTooLarge {
            len: FRAME_LEN_MAX_FLOOR as u64 + 1,
            max: FRAME_LEN_MAX_FLOOR
        }))
    );
    assert!(decoder.has_failed());
    assert_eq!(decoder.decode(&mut &ping(2)[..]), None);
}

#[test]
fn length_below_the_header() {
    for len in 0..6u32 {
        let mut bytes = len.to_le_bytes().to_vec();
        bytes.extend_from_slice(&[1; 6]);
        assert_eq!(fatal(&bytes), Error::BadLength { len, min: 6 });
    }
}

#[test]
fn unknown_frame_type() {
    for t in [0x00u8, 0x08, 0x12, 0x80, 0x88, 0x93, 0xfe] {
        assert!(FrameType::from_u8(t).is_none());
        let bytes = Raw::default().u64(1).frame(t, 5);
        assert_eq!(recoverable(&bytes), Error::UnknownFrameType { corr: 5, frame_type: t });
    }
}

#[test]
fn bad_utf8_in_names() {
    let target = Raw::default().u8(0).sized(b"k").sized(b"");
    let bad_operator = request_head(b"acc\xffunt", b"deposit").raw(&target.0).frame(REQUEST, 6);
    assert_eq!(
        recoverable(&bad_operator),
        Error::BadUtf8 {
            corr: 6,
            field: "operator"
        }
    );
    let bad_function = request_head(b"account", b"\xc3").raw(&target.0).frame(REQUEST, 6);
    assert_eq!(
        recoverable(&bad_function),
        Error::BadUtf8 {
            corr: 6,
            field: "function"
        }
    );
    let bad_get = Raw::default()
        .sized(b"\xed\xa0\x80")
        .sized(b"k")
        .frame(FrameType::Get as u8, 7);
    assert_eq!(recoverable(&bad_get).code(), ErrorCode::BAD_UTF8);
    let bad_message = Raw::default()
        .u64(1)
        .u8(1)
        .sized(b"\x80")
        .frame(FrameType::Aborted as u8, 8);
    assert_eq!(recoverable(&bad_message).code(), ErrorCode::BAD_UTF8);
}

#[test]
fn trailing_bytes_inside_a_frame() {
    let bytes = Raw::default().u64(1).u8(0).frame(FrameType::Ping as u8, 3);
    assert_eq!(recoverable(&bytes), Error::TrailingBytes { corr: 3, extra: 1 });
    let bytes = Raw::default().u8(0).frame(FrameType::Status as u8, 4);
    assert_eq!(recoverable(&bytes), Error::TrailingBytes { corr: 4, extra: 1 });
    let mut request = encode_one(&request(5, Address::Partition(1), Payload::EMPTY));
    request.extend_from_slice(&[0, 0]);
    let len = u32::from_le_bytes(request[..4].try_into().unwrap()) + 2;
    request[..4].copy_from_slice(&len.to_le_bytes());
    assert_eq!(recoverable(&request), Error::TrailingBytes { corr: 5, extra: 2 });
}

#[test]
fn inner_lengths_exceeding_the_frame() {
    // The operator's length says 1000, 7 bytes follow.
    let bytes = Raw::default()
        .u64(42)
        .u64(7)
        .u64(7)
        .u32(1000)
        .raw(b"account")
        .frame(REQUEST, 9);
    assert_eq!(
        recoverable(&bytes),
        Error::FieldOverrun {
            corr: 9,
            field: "operator",
            needed: 1000,
            left: 7
        }
    );
    // A hostile inner length is refused the same way, allocating nothing.
    let bytes = request_head(b"a", b"f").u8(0).u32(u32::MAX).frame(REQUEST, 9);
    assert_eq!(
        recoverable(&bytes),
        Error::FieldOverrun {
            corr: 9,
            field: "key",
            needed: u64::from(u32::MAX),
            left: 0
        }
    );
    let bytes = request_head(b"a", b"f").u8(1).u32(3).u32(2).raw(b"x").frame(REQUEST, 9);
    assert_eq!(recoverable(&bytes).code(), ErrorCode::FIELD_OVERRUN);
    // Fixed fields cut short: a PING with half its data, a REQUEST without its target.
    let bytes = Raw::default().u32(1).frame(FrameType::Ping as u8, 2);
    assert_eq!(
        recoverable(&bytes),
        Error::FieldOverrun {
            corr: 2,
            field: "data",
            needed: 8,
            left: 4
        }
    );
    let bytes = request_head(b"a", b"f").frame(REQUEST, 9);
    assert_eq!(recoverable(&bytes).code(), ErrorCode::FIELD_OVERRUN);
    let bytes = Raw::default().frame(FrameType::Committed as u8, 9);
    assert_eq!(recoverable(&bytes).code(), ErrorCode::FIELD_OVERRUN);
}

#[test]
fn tags_without_meaning() {
    let bytes = request_head(b"a", b"f").u8(2).u32(0).sized(b"").frame(REQUEST, 1);
    assert_eq!(
        recoverable(&bytes),
        Error::BadTag {
            corr: 1,
            field: "target kind",
            value: 2
        }
    );
    // 0 and 10 are no abort kind; 7 (Rejected) and 9 (Drift) never travel.
    for kind in [0u8, 7, 9, 10, 255] {
        let bytes = Raw::default()
            .u64(1)
            .u8(kind)
            .sized(b"no")
            .frame(FrameType::Aborted as u8, 1);
        assert_eq!(
            recoverable(&bytes),
            Error::BadTag {
                corr: 1,
                field: "abort kind",
                value: kind.into()
            }
        );
    }
    let bytes = Raw::default().u8(2).frame(FrameType::State as u8, 1);
    assert_eq!(recoverable(&bytes).code(), ErrorCode::BAD_TAG);
}

#[test]
fn fields_over_their_caps() {
    let long = vec![b'a'; NAME_LEN_MAX + 1];
    let bytes = request_head(&long, b"f").u8(1).u32(0).sized(b"").frame(REQUEST, 1);
    assert_eq!(
        recoverable(&bytes),
        Error::FieldTooLong {
            corr: 1,
            field: "operator",
            len: NAME_LEN_MAX + 1,
            max: NAME_LEN_MAX
        }
    );
    let key = vec![0; KEY_LEN_MAX + 1];
    let bytes = Raw::default()
        .sized(b"account")
        .sized(&key)
        .frame(FrameType::Get as u8, 1);
    assert_eq!(recoverable(&bytes).code(), ErrorCode::FIELD_TOO_LONG);
    let bytes = Raw::default()
        .u16(1)
        .sized(&[b'm'; 1025])
        .frame(FrameType::Error as u8, 1);
    assert_eq!(recoverable(&bytes).code(), ErrorCode::FIELD_TOO_LONG);
}

#[test]
fn arguments_too_large() {
    let args = vec![0; PAYLOAD_LEN_MAX + 1];
    let bytes = request_head(b"account", b"deposit")
        .u8(1)
        .u32(0)
        .sized(&args)
        .frame(REQUEST, 3);
    assert!(bytes.len() <= FRAME_LEN_MAX);
    assert_eq!(
        recoverable(&bytes),
        Error::ArgsTooLarge {
            corr: 3,
            len: PAYLOAD_LEN_MAX + 1,
            max: PAYLOAD_LEN_MAX
        }
    );
    assert_eq!(
        Error::ArgsTooLarge {
            corr: 3,
            len: 0,
            max: 0
        }
        .code(),
        ErrorCode::ARGS_TOO_LARGE
    );
}

#[test]
fn the_encoder_refuses_what_the_decoder_refuses() {
    let mut out = Vec::new();
    let big = request(
        3,
        Address::Partition(0),
        Payload::from_vec(vec![0; PAYLOAD_LEN_MAX + 1]),
    );
    assert_eq!(
        encode(&big, &mut out),
        Err(Error::ArgsTooLarge {
            corr: 3,
            len: PAYLOAD_LEN_MAX + 1,
            max: PAYLOAD_LEN_MAX
        })
    );
    let long = frame(
        4,
        Body::Get {
            operator: "o".repeat(NAME_LEN_MAX + 1),
            key: Key::from(1u64),
        },
    );
    assert_eq!(encode(&long, &mut out).unwrap_err().code(), ErrorCode::FIELD_TOO_LONG);
    let rejected = frame(
        5,
        Body::Aborted {
            tid: 1,
            abort: styx_engine::Abort::with_kind(styx_engine::AbortKind::Rejected, "full"),
        },
    );
    assert_eq!(encode(&rejected, &mut out).unwrap_err().code(), ErrorCode::BAD_TAG);
    for moved in [vec![(4, 0), (2, 1)], vec![(3, 0), (3, 1)]] {
        let unordered = frame(
            6,
            Body::PlacementReply(styx_net::Placement {
                version: 1,
                moved: vec![moved],
            }),
        );
        assert_eq!(encode(&unordered, &mut out).unwrap_err().code(), ErrorCode::BAD_TAG);
    }
    assert!(out.is_empty());
}

#[test]
fn errors_become_frames_for_the_peer() {
    let error = recoverable(&Raw::default().frame(0x42, 17));
    let reply = error.to_frame();
    assert_eq!(reply.corr, 17);
    let Body::Error { code, message } = &reply.body else {
        panic!("{reply:?}")
    };
    assert_eq!(*code, ErrorCode::UNKNOWN_FRAME_TYPE);
    assert!(message.contains("0x42"), "{message}");
    encode(&reply, &mut Vec::new()).unwrap();
}

#[test]
fn maps_that_place_nothing() {
    let map_reply = FrameType::MapReply as u8;
    // One node holding shards 0..2 of an engine of 3: a shard with no node.
    let gap = Raw::default()
        .u16(0)
        .u16(3)
        .u16(1)
        .u16(0)
        .u16(2)
        .sized(b"127.0.0.1:7000")
        .u16(0)
        .frame(map_reply, 1);
    assert_eq!(
        recoverable(&gap),
        Error::BadTag {
            corr: 1,
            field: "map",
            value: 3
        }
    );
    // The answering node is not in the list.
    let stranger = Raw::default()
        .u16(1)
        .u16(1)
        .u16(1)
        .u16(0)
        .u16(1)
        .sized(b"a:1")
        .u16(0)
        .frame(map_reply, 2);
    assert_eq!(recoverable(&stranger).code(), ErrorCode::BAD_TAG);
    // An operator without partitions places no key.
    let empty = Raw::default()
        .u16(0)
        .u16(1)
        .u16(1)
        .u16(0)
        .u16(1)
        .sized(b"a:1")
        .u16(1)
        .sized(b"account")
        .u32(0)
        .frame(map_reply, 3);
    assert_eq!(recoverable(&empty).code(), ErrorCode::BAD_TAG);
    // More nodes than an engine has shards, refused before reading them.
    let many = Raw::default().u16(0).u16(1).u16(u16::MAX).frame(map_reply, 4);
    assert_eq!(
        recoverable(&many),
        Error::FieldTooLong {
            corr: 4,
            field: "nodes",
            len: usize::from(u16::MAX),
            max: styx_net::MAP_NODES_MAX
        }
    );
}

#[test]
fn placements_out_of_order_or_too_long() {
    let reply = FrameType::PlacementReply as u8;
    // Partitions must come in order, each once: a client binary-searches them.
    for (a, b) in [(3u32, 3u32), (4, 2)] {
        let bad = Raw::default()
            .u64(1)
            .u16(1)
            .u32(2)
            .u32(a)
            .u16(0)
            .u32(b)
            .u16(1)
            .frame(reply, 1);
        assert_eq!(
            recoverable(&bad),
            Error::BadTag {
                corr: 1,
                field: "partition",
                value: u64::from(b)
            }
        );
    }
    // A count past the cap is refused before anything is read for it.
    let many = Raw::default().u64(1).u16(1).u32(u32::MAX).frame(reply, 2);
    assert_eq!(recoverable(&many).code(), ErrorCode::FIELD_TOO_LONG);
    // A count the frame cannot hold is a truncated field, not an allocation.
    let short = Raw::default().u64(1).u16(1).u32(60_000).u32(0).u16(0).frame(reply, 3);
    assert_eq!(recoverable(&short).code(), ErrorCode::FIELD_OVERRUN);
}

#[test]
fn layouts_too_long_or_cut_short() {
    let reply = FrameType::LayoutReply as u8;
    // A count past the cap is refused before anything is read for it.
    let many = Raw::default()
        .u64(1)
        .u16(styx_net::LAYOUT_SHARDS_MAX as u16 + 1)
        .frame(reply, 1);
    assert_eq!(recoverable(&many).code(), ErrorCode::FIELD_TOO_LONG);
    // A count the frame cannot hold is a truncated field, not an allocation.
    let short = Raw::default().u64(1).u16(60).u16(0).frame(reply, 2);
    assert_eq!(recoverable(&short).code(), ErrorCode::FIELD_OVERRUN);
    // The encoder refuses what the decoder would.
    let too_long = styx_net::Frame {
        corr: 3,
        body: Body::LayoutReply(styx_net::Layout {
            version: 0,
            node_of: vec![0; styx_net::LAYOUT_SHARDS_MAX + 1],
        }),
    };
    assert_eq!(
        encode(&too_long, &mut Vec::new()).unwrap_err().code(),
        ErrorCode::FIELD_TOO_LONG
    );
}

#[test]
fn members_too_long_cut_short_or_out_of_order() {
    let reply = FrameType::MembersReply as u8;
    let many = Raw::default()
        .u64(1)
        .u16(styx_net::MEMBERS_LEFT_MAX as u16 + 1)
        .frame(reply, 1);
    assert_eq!(recoverable(&many).code(), ErrorCode::FIELD_TOO_LONG);
    let short = Raw::default().u64(1).u16(3).u16(0).frame(reply, 2);
    assert_eq!(recoverable(&short).code(), ErrorCode::FIELD_OVERRUN);
    // Each node once, ascending: a repeat or a step back is malformed.
    for left in [[2u16, 2], [3, 1]] {
        let raw = Raw::default().u64(1).u16(2).u16(left[0]).u16(left[1]).frame(reply, 3);
        assert_eq!(recoverable(&raw).code(), ErrorCode::BAD_TAG, "{left:?}");
    }
    let ok = Raw::default().u64(9).u16(2).u16(1).u16(4).frame(reply, 4);
    assert_eq!(
        decode_whole(&ok, styx_net::FRAME_LEN_MAX).results,
        [Ok(styx_net::Frame {
            corr: 4,
            body: Body::MembersReply(styx_net::Members {
                version: 9,
                left: vec![1, 4]
            })
        })]
    );
    let unordered = styx_net::Frame {
        corr: 5,
        body: Body::MembersReply(styx_net::Members {
            version: 0,
            left: vec![3, 1],
        }),
    };
    assert_eq!(
        encode(&unordered, &mut Vec::new()).unwrap_err().code(),
        ErrorCode::BAD_TAG
    );
    let too_long = styx_net::Frame {
        corr: 5,
        body: Body::MembersReply(styx_net::Members {
            version: 0,
            left: (0..=styx_net::MEMBERS_LEFT_MAX as u16).collect(),
        }),
    };
    assert_eq!(
        encode(&too_long, &mut Vec::new()).unwrap_err().code(),
        ErrorCode::FIELD_TOO_LONG
    );
}

/// A map of two nodes (`a:1` then `b:1`) of `first` and `second` shards,
/// numbered in order.
fn two_nodes(first: u16, second: u16, operators: Vec<styx_net::MapOperator>) -> styx_net::Map {
    let node = |first_shard, shards, client: &str| styx_net::MapNode {
        first_shard,
        shards,
        client: client.into(),
    };
    styx_net::Map {
        node: 0,
        shards: first + second,
        nodes: vec![node(0, first, "a:1"), node(first, second, "b:1")],
        operators,
        placed: None,
    }
}

#[test]
fn a_layout_places_shards_on_the_nodes_it_names() {
    let map = two_nodes(2, 2, vec![]);
    assert_eq!(map.layout().node_of, [0, 0, 1, 1]);
    assert_eq!(map.shards_of_node(1), [2, 3]);
    let layout = styx_net::Layout {
        version: 0,
        node_of: vec![0, 1, 0, 1],
    };
    let placed = map.clone().with_layout(&layout).unwrap();
    assert_eq!(placed.layout(), layout, "what a server with this map answers LAYOUT");
    assert_eq!(placed.node_of_shard(1), Some(1));
    assert_eq!(placed.node_of_shard(2), Some(0));
    assert_eq!(placed.node_of_shard(4), None);
    assert_eq!(placed.shards_of_node(0), [0, 2]);
    assert_eq!(placed.shards_of_node(1), [1, 3]);
    // A layout of another cluster does not fit.
    let err = map
        .clone()
        .with_layout(&styx_net::Layout {
            version: 0,
            node_of: vec![0, 1, 0],
        })
        .unwrap_err();
    assert!(err.contains("3 shards for a map of 4"), "{err}");
    let err = map
        .with_layout(&styx_net::Layout {
            version: 0,
            node_of: vec![0, 1, 2, 1],
        })
        .unwrap_err();
    assert!(err.contains("shard 2 on node 2, of 2 nodes"), "{err}");
}

#[test]
fn a_placement_places_keys_like_the_engine_after_moves() {
    use styx_engine::{App, Move, PartitionMap, Shard};
    let mut app = App::new("placement");
    let op = app.operator("account", 12);
    let map = styx_net::Map::single(
        3,
        "a:1".into(),
        vec![styx_net::MapOperator {
            name: "account".into(),
            partitions: 12,
        }],
    );
    let placement = styx_net::Placement {
        version: 2,
        moved: vec![vec![(1, 0), (5, 0), (9, 2)]],
    };
    let mut engine = PartitionMap::new(&app, 3);
    let mv = |partition, to| Move {
        op,
        partition,
        to,
        share: None,
    };
    engine.apply(&mut [(1, mv(1, 0)), (2, mv(5, 0)), (3, mv(9, 2))]);
    for k in 0..1_000u64 {
        let key = Key::from(k);
        let partition = key.partition(12);
        assert_eq!(
            placement.shard_of(&map, "account", &key),
            Some(engine.owner(op, partition)),
            "key {k}"
        );
        if ![1, 5, 9].contains(&partition) {
            assert_eq!(map.shard_of("account", &key), Some(Shard::owner(&app, 3, op, &key)));
        }
    }
    assert_eq!(placement.shard_of(&map, "hotel", &Key::from(1u64)), None);
}

#[test]
fn a_map_places_keys_like_the_engine() {
    use styx_engine::{App, Shard};
    let mut app = App::new("placement");
    let op = app.operator("account", 12);
    let map = two_nodes(
        2,
        3,
        vec![styx_net::MapOperator {
            name: "account".into(),
            partitions: 12,
        }],
    );
    for k in 0..1_000u64 {
        let key = Key::from(k);
        let shard = map.shard_of("account", &key).unwrap();
        assert_eq!(shard, Shard::owner(&app, 5, op, &key), "key {k}");
        assert_eq!(map.node_of_shard(shard), Some(usize::from(shard >= 2)));
    }
    assert_eq!(map.shard_of("hotel", &Key::from(1u64)), None);
}
