//! Frames to bytes.
//!
//! The encoder checks every field against the same caps the decoder
//! enforces before it writes anything, so a frame that encodes is one every
//! peer can decode, and a failed encode leaves the output untouched. Given
//! those caps a frame cannot outgrow [`FRAME_LEN_MAX`] (asserted at compile
//! time in `limits`); the encoder asserts it again on every frame, and that
//! the bytes written are the length it announced.

use crate::error::Error;
use crate::frame::{
    Body, Frame, LAYOUT_SHARDS_MAX, MAP_NODES_MAX, MAP_OPERATORS_MAX, MEMBERS_LEFT_MAX, PLACEMENT_MOVED_MAX, Request,
    TARGET_ENTITY, TARGET_PARTITION, VERSION, abort_kind_on_wire,
};
use crate::limits::{ERROR_MESSAGE_LEN_MAX, FRAME_LEN_MAX, HEADER_LEN, NAME_LEN_MAX, PEER_NAME_LEN_MAX, PREFIX_LEN};
use styx_engine::{ABORT_MESSAGE_LEN_MAX, Address, KEY_LEN_MAX, PAYLOAD_LEN_MAX};

/// Appends `frame` to `out` and returns the bytes written.
///
/// ```
/// use styx_net::{Body, Decoder, Frame, FRAME_LEN_MAX, encode};
///
/// let frame = Frame { corr: 7, body: Body::Ping { data: 42 } };
/// let mut bytes = Vec::new();
/// assert_eq!(encode(&frame, &mut bytes).unwrap(), 18);
/// let mut input = &bytes[..];
/// let mut decoder = Decoder::new(FRAME_LEN_MAX);
/// assert_eq!(decoder.decode(&mut input), Some(Ok(frame)));
/// ```
pub fn encode(frame: &Frame, out: &mut Vec<u8>) -> Result<usize, Error> {
    check(frame)?;
    let len = encoded_len(frame);
    assert!(len <= FRAME_LEN_MAX, "a checked frame of {len} bytes");
    out.reserve(len);
    let start = out.len();
    out.extend_from_slice(&((len - PREFIX_LEN) as u32).to_le_bytes());
    out.push(VERSION);
    out.push(frame.body.frame_type() as u8);
    out.extend_from_slice(&frame.corr.to_le_bytes());
    write_body(&frame.body, out);
    assert_eq!(
        out.len() - start,
        len,
        "encoded length of {:?}",
        frame.body.frame_type()
    );
    Ok(len)
}

/// The bytes `frame` takes on the wire, header included. A client compares
/// it with the server's `frame_len_max` before sending.
pub fn encoded_len(frame: &Frame) -> usize {
    HEADER_LEN + body_len(&frame.body)
}

fn body_len(body: &Body) -> usize {
    match body {
        Body::Hello { client, .. } => 2 + 4 + client.len(),
        Body::Welcome(w) => 1 + 12 + 4 + w.server.len(),
        Body::Ping { .. } | Body::Pong { .. } => 8,
        Body::Status => 0,
        Body::StatusReply(_) => 2 + 8 * 7 + 4 + 4,
        Body::Map => 0,
        Body::MapReply(m) => {
            let nodes: usize = m.nodes.iter().map(|n| 4 + 4 + n.client.len()).sum();
            let ops: usize = m.operators.iter().map(|o| 4 + o.name.len() + 4).sum();
            2 + 2 + 2 + nodes + 2 + ops
        }
        Body::Placement => 0,
        Body::PlacementReply(p) => 8 + 2 + p.moved.iter().map(|m| 4 + 6 * m.len()).sum::<usize>(),
        Body::Layout => 0,
        Body::LayoutReply(l) => 8 + 2 + 2 * l.node_of.len(),
        Body::Members => 0,
        Body::MembersReply(m) => 8 + 2 + 2 * m.left.len(),
        Body::Request(r) => {
            let target = match &r.target {
                Address::Entity(key) => 4 + key.as_bytes().len(),
                Address::Partition(_) => 4,
            };
            24 + 4 + r.operator.len() + 4 + r.function.len() + 1 + target + 4 + r.args.len()
        }
        Body::Get { operator, key } => 4 + operator.len() + 4 + key.as_bytes().len(),
        Body::Committed { result, .. } => 8 + 4 + result.len(),
        Body::Aborted { abort, .. } => 8 + 1 + 4 + abort.message().len(),
        Body::State { value } => 1 + value.as_ref().map_or(0, |v| 4 + v.len()),
        Body::Error { message, .. } => 2 + 4 + message.len(),
    }
}

/// Checks every field against its cap, with the error the decoder would give.
fn check(frame: &Frame) -> Result<(), Error> {
    let corr = frame.corr;
    let cap = |field: &'static str, len: usize, max: usize| {
        if len > max {
            Err(Error::FieldTooLong { corr, field, len, max })
        } else {
            Ok(())
        }
    };
    match &frame.body {
        Body::Hello { client, .. } => cap("client name", client.len(), PEER_NAME_LEN_MAX),
        Body::Welcome(w) => cap("server name", w.server.len(), PEER_NAME_LEN_MAX),
        Body::Ping { .. }
        | Body::Pong { .. }
        | Body::Status
        | Body::StatusReply(_)
        | Body::Map
        | Body::Placement
        | Body::Layout
        | Body::Members => Ok(()),
        Body::LayoutReply(l) => cap("layout shards", l.node_of.len(), LAYOUT_SHARDS_MAX),
        Body::MembersReply(m) => {
            cap("nodes left", m.left.len(), MEMBERS_LEFT_MAX)?;
            // Ascending, each once, as the decoder requires.
            match m.left.windows(2).find(|w| w[0] >= w[1]) {
                Some(w) => Err(Error::BadTag {
                    corr,
                    field: "node left (not ascending)",
                    value: u64::from(w[1]),
                }),
                None => Ok(()),
            }
        }
        Body::PlacementReply(p) => {
            cap("operators", p.moved.len(), MAP_OPERATORS_MAX)?;
            cap(
                "moved partitions",
                p.moved.iter().map(Vec::len).sum(),
                PLACEMENT_MOVED_MAX,
            )?;
            // In partition order, each once, as the decoder requires.
            for m in &p.moved {
                if let Some(w) = m.windows(2).find(|w| w[0].0 >= w[1].0) {
                    return Err(Error::BadTag {
                        corr,
                        field: "partition",
                        value: u64::from(w[1].0),
                    });
                }
            }
            Ok(())
        }
        Body::MapReply(m) => {
            cap("nodes", m.nodes.len(), MAP_NODES_MAX)?;
            cap("operators", m.operators.len(), MAP_OPERATORS_MAX)?;
            for n in &m.nodes {
                cap("node address", n.client.len(), NAME_LEN_MAX)?;
            }
            for o in &m.operators {
                cap("operator", o.name.len(), NAME_LEN_MAX)?;
            }
            Ok(())
        }
        Body::Request(Request {
            operator,
            function,
            target,
            args,
            ..
        }) => {
            cap("operator", operator.len(), NAME_LEN_MAX)?;
            cap("function", function.len(), NAME_LEN_MAX)?;
            if let Address::Entity(key) = target {
                cap("key", key.as_bytes().len(), KEY_LEN_MAX)?;
            }
            if args.len() > PAYLOAD_LEN_MAX {
                return Err(Error::ArgsTooLarge {
                    corr,
                    len: args.len(),
                    max: PAYLOAD_LEN_MAX,
                });
            }
            Ok(())
        }
        Body::Get { operator, key } => {
            cap("operator", operator.len(), NAME_LEN_MAX)?;
            cap("key", key.as_bytes().len(), KEY_LEN_MAX)
        }
        Body::Committed { result, .. } => cap("result", result.len(), PAYLOAD_LEN_MAX),
        Body::Aborted { abort, .. } => {
            if !abort_kind_on_wire(abort.kind()) {
                return Err(Error::BadTag {
                    corr,
                    field: "abort kind",
                    value: u64::from(abort.kind() as u8),
                });
            }
            cap("abort message", abort.message().len(), ABORT_MESSAGE_LEN_MAX)
        }
        Body::State { value } => cap("value", value.as_ref().map_or(0, Vec::len), PAYLOAD_LEN_MAX),
        Body::Error { message, .. } => cap("error message", message.len(), ERROR_MESSAGE_LEN_MAX),
    }
}

fn write_body(body: &Body, out: &mut Vec<u8>) {
    match body {
        Body::Hello {
            version_min,
            version_max,
            client,
        } => {
            out.push(*version_min);
            out.push(*version_max);
            put_bytes(out, client.as_bytes());
        }
        Body::Welcome(w) => {
            out.push(w.version);
            out.extend_from_slice(&w.frame_len_max.to_le_bytes());
            out.extend_from_slice(&w.in_flight_max.to_le_bytes());
            out.extend_from_slice(&w.payload_len_max.to_le_bytes());
            put_bytes(out, w.server.as_bytes());
        }
        Body::Ping { data } | Body::Pong { data } => out.extend_from_slice(&data.to_le_bytes()),
        Body::Status => {}
        Body::StatusReply(s) => {
            out.extend_from_slice(&s.shards.to_le_bytes());
            for n in [
                s.epoch,
                s.uptime_ms,
                s.committed,
                s.aborted,
                s.committed_per_s,
                s.aborted_per_s,
                s.epochs_per_s,
            ] {
                out.extend_from_slice(&n.to_le_bytes());
            }
            out.extend_from_slice(&s.connections.to_le_bytes());
            out.extend_from_slice(&s.in_flight.to_le_bytes());
        }
        Body::Map | Body::Placement | Body::Layout | Body::Members => {}
        Body::MembersReply(m) => {
            out.extend_from_slice(&m.version.to_le_bytes());
            out.extend_from_slice(&(m.left.len() as u16).to_le_bytes());
            for n in &m.left {
                out.extend_from_slice(&n.to_le_bytes());
            }
        }
        Body::LayoutReply(l) => {
            out.extend_from_slice(&l.version.to_le_bytes());
            out.extend_from_slice(&(l.node_of.len() as u16).to_le_bytes());
            for n in &l.node_of {
                out.extend_from_slice(&n.to_le_bytes());
            }
        }
        Body::PlacementReply(p) => {
            out.extend_from_slice(&p.version.to_le_bytes());
            out.extend_from_slice(&(p.moved.len() as u16).to_le_bytes());
            for m in &p.moved {
                out.extend_from_slice(&(m.len() as u32).to_le_bytes());
                for (partition, shard) in m {
                    out.extend_from_slice(&partition.to_le_bytes());
                    out.extend_from_slice(&shard.to_le_bytes());
                }
            }
        }
        Body::MapReply(m) => {
            out.extend_from_slice(&m.node.to_le_bytes());
            out.extend_from_slice(&m.shards.to_le_bytes());
            out.extend_from_slice(&(m.nodes.len() as u16).to_le_bytes());
            for n in &m.nodes {
                out.extend_from_slice(&n.first_shard.to_le_bytes());
                out.extend_from_slice(&n.shards.to_le_bytes());
                put_bytes(out, n.client.as_bytes());
            }
            out.extend_from_slice(&(m.operators.len() as u16).to_le_bytes());
            for o in &m.operators {
                put_bytes(out, o.name.as_bytes());
                out.extend_from_slice(&o.partitions.to_le_bytes());
            }
        }
        Body::Request(r) => {
            out.extend_from_slice(&r.client.to_le_bytes());
            out.extend_from_slice(&r.seq.to_le_bytes());
            out.extend_from_slice(&r.ack.to_le_bytes());
            put_bytes(out, r.operator.as_bytes());
            put_bytes(out, r.function.as_bytes());
            match &r.target {
                Address::Entity(key) => {
                    out.push(TARGET_ENTITY);
                    put_bytes(out, key.as_bytes());
                }
                Address::Partition(p) => {
                    out.push(TARGET_PARTITION);
                    out.extend_from_slice(&p.to_le_bytes());
                }
            }
            put_bytes(out, r.args.as_bytes());
        }
        Body::Get { operator, key } => {
            put_bytes(out, operator.as_bytes());
            put_bytes(out, key.as_bytes());
        }
        Body::Committed { tid, result } => {
            out.extend_from_slice(&tid.to_le_bytes());
            put_bytes(out, result.as_bytes());
        }
        Body::Aborted { tid, abort } => {
            out.extend_from_slice(&tid.to_le_bytes());
            out.push(abort.kind() as u8);
            put_bytes(out, abort.message().as_bytes());
        }
        Body::State { value } => match value {
            None => out.push(0),
            Some(v) => {
                out.push(1);
                put_bytes(out, v);
            }
        },
        Body::Error { code, message } => {
            out.extend_from_slice(&code.0.to_le_bytes());
            put_bytes(out, message.as_bytes());
        }
    }
}

/// A `u32` length, then the bytes: the codec's encoding of strings and byte vectors.
fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    let len = u32::try_from(bytes.len()).expect("checked against a cap below u32::MAX");
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(bytes);
}
