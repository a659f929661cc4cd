//! Messages between shards as bytes, for links that leave the process.
//!
//! Shards on one node hand each other `Vec<Message>` batches in memory; a
//! shard on another node gets the same batch encoded here, in the engine's
//! argument encoding (`codec`: little-endian integers, `u32`-length
//! strings, tag bytes). Encoding is a pure function of the batch and
//! decoding checks everything a corrupt or hostile frame could break — tag
//! values, shard ids below the cluster's shard count, key and payload
//! lengths, counts against the bytes left — and returns an error instead of
//! panicking. The framing around a batch (length, checksum, link identity)
//! belongs to the runtime; this module only knows messages.

use crate::abort::{Abort, AbortKind};
use crate::codec::{Decode, DecodeError, Encode, Payload, Writer};
use crate::config::{Outcome, Request};
use crate::ids::{Address, Epoch, FnId, OpId, ShardId, ShardSet, Tid};
use crate::key::{KEY_LEN_MAX, Key};
use crate::layout::Handover;
use crate::message::{Invoke, Message, Parent, Phase, Reply};
use crate::partition_map::{Move, MoveShare};
use crate::value::Value;

/// A count of items of at least `item_bytes` bytes each, checked against
/// the bytes left.
fn counted(input: &mut &[u8], item_bytes: usize) -> Result<usize, WireError> {
    let count = u32::decode(input)? as usize;
    if count > input.len() / item_bytes {
        return Err(WireError::Invalid(format!("{count} items in {} bytes", input.len())));
    }
    Ok(count)
}

/// An `Install`'s entities: a count, then each key and value.
fn entities(input: &mut &[u8]) -> Result<Vec<(Key, Value)>, WireError> {
    // Each takes at least a key length and a value length: 6 bytes.
    let count = counted(input, 6)?;
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let key = key(input)?;
        let value = Vec::<u8>::decode(input)?;
        out.push((key, Value::from_bytes(&value)));
    }
    Ok(out)
}

/// An `Install`'s deleted keys: a count, then each key.
fn keys(input: &mut &[u8]) -> Result<Vec<Key>, WireError> {
    // Each takes at least a key length: 2 bytes.
    let count = counted(input, 2)?;
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        out.push(key(input)?);
    }
    Ok(out)
}

/// A `Done1`'s switches: a count, then `(op, partition)` each.
fn switches(input: &mut &[u8]) -> Result<Vec<(OpId, u32)>, WireError> {
    // Each takes 6 bytes: a count past that is a lie.
    let count = counted(input, 6)?;
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        out.push((OpId(u16::decode(input)?), u32::decode(input)?));
    }
    Ok(out)
}

/// Messages in one encoded batch at most: a batch is what one shard step
/// produced for one peer, bounded by the epoch size times the fan-out.
pub const BATCH_MESSAGES_MAX: usize = 1 << 22;

/// Why an encoded batch was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireError {
    /// The bytes do not decode.
    Decode(DecodeError),
    /// A value decoded but is out of range.
    Invalid(String),
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::Decode(e) => write!(f, "malformed message batch: {e}"),
            WireError::Invalid(why) => write!(f, "invalid message batch: {why}"),
        }
    }
}

impl std::error::Error for WireError {}

impl From<DecodeError> for WireError {
    fn from(e: DecodeError) -> WireError {
        WireError::Decode(e)
    }
}

const INVOKE: u8 = 1;
const REPLY: u8 = 2;
const DONE1: u8 = 3;
const FLAGS: u8 = 4;
const FINISH: u8 = 5;
const DONE2: u8 = 6;
const NEXT: u8 = 7;
const SUBMIT: u8 = 8;
const REPLIED: u8 = 9;
const DURABLE: u8 = 10;
const INSTALL: u8 = 11;

/// Appends the encoding of `batch` to `out`.
pub fn encode_batch(batch: &[Message], out: &mut Vec<u8>) {
    assert!(batch.len() <= BATCH_MESSAGES_MAX, "a batch of {} messages", batch.len());
    let mut w = Writer::new();
    (batch.len() as u32).encode(&mut w);
    for m in batch {
        encode_message(m, &mut w);
    }
    out.extend_from_slice(w.finish().as_bytes());
}

/// Decodes a batch from a cluster of `n_shards` shards; the bytes must hold
/// exactly one batch.
pub fn decode_batch(mut input: &[u8], n_shards: u16) -> Result<Vec<Message>, WireError> {
    let input = &mut input;
    let count = u32::decode(input)? as usize;
    // Every message takes at least two bytes: a count past that is a lie.
    if count > BATCH_MESSAGES_MAX || count > input.len() / 2 + 1 {
        return Err(WireError::Invalid(format!("{count} messages in {} bytes", input.len())));
    }
    let mut batch = Vec::with_capacity(count);
    let d = Decoder { n_shards };
    for _ in 0..count {
        batch.push(d.message(input)?);
    }
    if !input.is_empty() {
        return Err(DecodeError::Trailing(input.len()).into());
    }
    Ok(batch)
}

fn encode_message(m: &Message, w: &mut Writer) {
    match m {
        Message::Invoke(inv) => {
            INVOKE.encode(w);
            inv.epoch.encode(w);
            (inv.phase as u8).encode(w);
            inv.tid.encode(w);
            inv.now_us.encode(w);
            encode_function(inv.function, w);
            encode_address(&inv.address, w);
            inv.partition.encode(w);
            inv.hash.encode(w);
            inv.args.encode(w);
            inv.seed.encode(w);
            inv.depth.encode(w);
            encode_parent(inv.parent, w);
            inv.step.encode(w);
        }
        Message::Reply(r) => {
            REPLY.encode(w);
            encode_parent(r.parent, w);
            match &r.result {
                Ok(p) => {
                    0u8.encode(w);
                    p.encode(w);
                }
                Err(a) => {
                    1u8.encode(w);
                    encode_abort(a, w);
                }
            }
            match &r.tree_abort {
                None => 0u8.encode(w),
                Some(a) => {
                    1u8.encode(w);
                    encode_abort(a, w);
                }
            }
            r.participants.bits().encode(w);
        }
        Message::Done1 {
            epoch,
            lc,
            aborted,
            moves,
            switches,
            handovers,
        } => {
            DONE1.encode(w);
            epoch.encode(w);
            lc.encode(w);
            aborted.encode(w);
            (moves.len() as u32).encode(w);
            for (tid, m) in moves {
                tid.encode(w);
                m.op.0.encode(w);
                m.partition.encode(w);
                m.to.encode(w);
                m.share.map(MoveShare::to_tuple).encode(w);
            }
            (switches.len() as u32).encode(w);
            for (op, partition) in switches {
                op.0.encode(w);
                partition.encode(w);
            }
            (handovers.len() as u32).encode(w);
            for (tid, h) in handovers {
                tid.encode(w);
                h.shard.encode(w);
                h.node.encode(w);
            }
        }
        Message::Flags { epoch, flags, snapshot } => {
            FLAGS.encode(w);
            epoch.encode(w);
            flags.encode(w);
            snapshot.encode(w);
        }
        Message::Finish {
            epoch,
            tid,
            commit,
            serial,
        } => {
            FINISH.encode(w);
            epoch.encode(w);
            tid.encode(w);
            commit.encode(w);
            serial.encode(w);
        }
        Message::Done2 { epoch, drifted } => {
            DONE2.encode(w);
            epoch.encode(w);
            drifted.encode(w);
        }
        Message::Next { epoch, index } => {
            NEXT.encode(w);
            epoch.encode(w);
            index.encode(w);
        }
        Message::Submit { origin, token, request } => {
            SUBMIT.encode(w);
            origin.encode(w);
            token.encode(w);
            request.encode(w);
        }
        Message::Replied { token, tid, outcome } => {
            REPLIED.encode(w);
            token.encode(w);
            tid.encode(w);
            outcome.encode(w);
        }
        Message::Durable { epoch } => {
            DURABLE.encode(w);
            epoch.encode(w);
        }
        Message::Install {
            epoch,
            op,
            partition,
            entities,
            deleted,
            last,
        } => {
            INSTALL.encode(w);
            epoch.encode(w);
            op.0.encode(w);
            partition.encode(w);
            (entities.len() as u32).encode(w);
            for (key, value) in entities {
                (key.as_bytes().len() as u16).encode(w);
                w.put(key.as_bytes());
                value.to_vec().encode(w);
            }
            (deleted.len() as u32).encode(w);
            for key in deleted {
                (key.as_bytes().len() as u16).encode(w);
                w.put(key.as_bytes());
            }
            last.encode(w);
        }
    }
}

fn encode_function(f: FnId, w: &mut Writer) {
    f.op.0.encode(w);
    f.index.encode(w);
}

fn encode_address(a: &Address, w: &mut Writer) {
    match a {
        Address::Entity(k) => {
            0u8.encode(w);
            (k.as_bytes().len() as u16).encode(w);
            w.put(k.as_bytes());
        }
        Address::Partition(p) => {
            1u8.encode(w);
            p.encode(w);
        }
    }
}

fn encode_parent(p: Parent, w: &mut Writer) {
    match p {
        Parent::Root { coordinator, index } => {
            0u8.encode(w);
            coordinator.encode(w);
            index.encode(w);
        }
        Parent::Call { shard, task, child } => {
            1u8.encode(w);
            shard.encode(w);
            task.encode(w);
            child.encode(w);
        }
    }
}

fn encode_abort(a: &Abort, w: &mut Writer) {
    (a.kind() as u8).encode(w);
    a.message().encode(w);
}

struct Decoder {
    n_shards: u16,
}

impl Decoder {
    fn shard(&self, input: &mut &[u8]) -> Result<ShardId, WireError> {
        self.check_shard(u16::decode(input)?)
    }

    fn check_shard(&self, s: ShardId) -> Result<ShardId, WireError> {
        if s >= self.n_shards {
            return Err(WireError::Invalid(format!(
                "shard {s} in a cluster of {} shards",
                self.n_shards
            )));
        }
        Ok(s)
    }

    fn message(&self, input: &mut &[u8]) -> Result<Message, WireError> {
        Ok(match u8::decode(input)? {
            INVOKE => {
                let epoch = Epoch::decode(input)?;
                let phase = match u8::decode(input)? {
                    1 => Phase::Optimistic,
                    2 => Phase::Fallback,
                    3 => Phase::Serial,
                    t => return Err(DecodeError::Tag(t).into()),
                };
                Message::Invoke(Invoke {
                    epoch,
                    phase,
                    tid: Tid::decode(input)?,
                    now_us: u64::decode(input)?,
                    function: function(input)?,
                    address: address(input)?,
                    partition: u32::decode(input)?,
                    hash: u64::decode(input)?,
                    args: <Payload as Decode>::decode(input)?,
                    seed: u64::decode(input)?,
                    depth: u16::decode(input)?,
                    parent: self.parent(input)?,
                    step: u32::decode(input)?,
                })
            }
            REPLY => {
                let parent = self.parent(input)?;
                let result = match u8::decode(input)? {
                    0 => Ok(<Payload as Decode>::decode(input)?),
                    1 => Err(abort(input)?),
                    t => return Err(DecodeError::Tag(t).into()),
                };
                let tree_abort = match u8::decode(input)? {
                    0 => None,
                    1 => Some(abort(input)?),
                    t => return Err(DecodeError::Tag(t).into()),
                };
                let bits = u64::decode(input)?;
                if self.n_shards < 64 && bits >> self.n_shards != 0 {
                    return Err(WireError::Invalid(format!(
                        "participants {bits:#x} in a cluster of {} shards",
                        self.n_shards
                    )));
                }
                Message::Reply(Reply {
                    parent,
                    result,
                    tree_abort,
                    participants: ShardSet::from_bits(bits),
                })
            }
            DONE1 => Message::Done1 {
                epoch: Epoch::decode(input)?,
                lc: u64::decode(input)?,
                aborted: Vec::<Tid>::decode(input)?,
                moves: self.moves(input)?,
                switches: switches(input)?,
                handovers: self.handovers(input)?,
            },
            FLAGS => Message::Flags {
                epoch: Epoch::decode(input)?,
                flags: Vec::<(Tid, u8)>::decode(input)?,
                snapshot: bool::decode(input)?,
            },
            FINISH => Message::Finish {
                epoch: Epoch::decode(input)?,
                tid: Tid::decode(input)?,
                commit: bool::decode(input)?,
                serial: bool::decode(input)?,
            },
            DONE2 => {
                let epoch = Epoch::decode(input)?;
                let drifted = Vec::<(Tid, ShardId)>::decode(input)?;
                if let Some((_, s)) = drifted.iter().find(|(_, s)| *s >= self.n_shards) {
                    return Err(WireError::Invalid(format!("drifted on shard {s}")));
                }
                Message::Done2 { epoch, drifted }
            }
            NEXT => Message::Next {
                epoch: Epoch::decode(input)?,
                index: u32::decode(input)?,
            },
            SUBMIT => Message::Submit {
                origin: self.shard(input)?,
                token: u64::decode(input)?,
                request: Request::decode(input)?,
            },
            REPLIED => Message::Replied {
                token: u64::decode(input)?,
                tid: Tid::decode(input)?,
                outcome: Outcome::decode(input)?,
            },
            DURABLE => Message::Durable {
                epoch: Epoch::decode(input)?,
            },
            INSTALL => Message::Install {
                epoch: Epoch::decode(input)?,
                op: OpId(u16::decode(input)?),
                partition: u32::decode(input)?,
                entities: entities(input)?,
                deleted: keys(input)?,
                last: bool::decode(input)?,
            },
            t => return Err(DecodeError::Tag(t).into()),
        })
    }

    /// A `Done1`'s moves: a count, then `(tid, op, partition, to, share)`
    /// each (the share an option of `(most, least, per_ms)`).
    fn moves(&self, input: &mut &[u8]) -> Result<Vec<(Tid, Move)>, WireError> {
        // Each move takes at least 17 bytes: a count past that is a lie.
        let count = counted(input, 17)?;
        let mut moves = Vec::with_capacity(count);
        for _ in 0..count {
            let tid = Tid::decode(input)?;
            let op = OpId(u16::decode(input)?);
            let partition = u32::decode(input)?;
            let to = self.shard(input)?;
            let share = Option::<(u32, u32, u32)>::decode(input)?
                .map(|share| MoveShare::of_tuple(share).check())
                .transpose()
                .map_err(WireError::Invalid)?;
            moves.push((
                tid,
                Move {
                    op,
                    partition,
                    to,
                    share,
                },
            ));
        }
        Ok(moves)
    }

    /// A `Done1`'s handovers: a count, then `(tid, shard, node)` each (the
    /// node is checked against the layout by the shard that decides it).
    fn handovers(&self, input: &mut &[u8]) -> Result<Vec<(Tid, Handover)>, WireError> {
        // Each takes 12 bytes: a count past that is a lie.
        let count = counted(input, 12)?;
        let mut out = Vec::with_capacity(count);
        for _ in 0..count {
            let tid = Tid::decode(input)?;
            // A leave or join names no shard (`LEAVE`, `JOIN`); any
            // other, one of ours.
            let shard = match ShardId::decode(input)? {
                s @ (crate::layout::LEAVE | crate::layout::JOIN) => s,
                s => self.check_shard(s)?,
            };
            let node = u16::decode(input)?;
            out.push((tid, Handover { shard, node }));
        }
        Ok(out)
    }

    fn parent(&self, input: &mut &[u8]) -> Result<Parent, WireError> {
        Ok(match u8::decode(input)? {
            0 => Parent::Root {
                coordinator: self.shard(input)?,
                index: u32::decode(input)?,
            },
            1 => Parent::Call {
                shard: self.shard(input)?,
                task: u32::decode(input)?,
                child: u32::decode(input)?,
            },
            t => return Err(DecodeError::Tag(t).into()),
        })
    }
}

fn function(input: &mut &[u8]) -> Result<FnId, WireError> {
    Ok(FnId {
        op: OpId(u16::decode(input)?),
        index: u16::decode(input)?,
    })
}

/// A key: its length (`u16`) and bytes.
fn key(input: &mut &[u8]) -> Result<Key, WireError> {
    let len = u16::decode(input)? as usize;
    if len > KEY_LEN_MAX {
        return Err(WireError::Invalid(format!("a key of {len} bytes")));
    }
    if input.len() < len {
        return Err(DecodeError::Short {
            expected: len - input.len(),
        }
        .into());
    }
    let (key, rest) = input.split_at(len);
    *input = rest;
    Ok(Key::from_bytes(key))
}

fn address(input: &mut &[u8]) -> Result<Address, WireError> {
    Ok(match u8::decode(input)? {
        0 => Address::Entity(key(input)?),
        1 => Address::Partition(u32::decode(input)?),
        t => return Err(DecodeError::Tag(t).into()),
    })
}

fn abort(input: &mut &[u8]) -> Result<Abort, WireError> {
    let kind = u8::decode(input)?;
    let kind = AbortKind::from_u8(kind).ok_or(DecodeError::Tag(kind))?;
    Ok(Abort::with_kind(kind, String::decode(input)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ClientSeq;

    fn every_kind() -> Vec<Message> {
        let request = Request {
            function: FnId { op: OpId(1), index: 3 },
            address: Address::Entity(Key::from(42u64)),
            args: Payload::encode(&(7u64, -3i64)),
            client: Some(ClientSeq {
                client: 9,
                seq: 4,
                ack: 2,
            }),
        };
        vec![
            Message::Invoke(Invoke {
                epoch: 5,
                phase: Phase::Fallback,
                tid: 77,
                now_us: 1_700_000_000_000_000,
                function: request.function,
                address: Address::Entity(Key::from_bytes(&[1u8; 300])),
                partition: 12,
                hash: u64::MAX - 1,
                args: Payload::from_bytes(&[9u8; 100]),
                seed: 3,
                depth: 2,
                parent: Parent::Call {
                    shard: 1,
                    task: 8,
                    child: 0,
                },
                step: 4,
            }),
            Message::Reply(Reply {
                parent: Parent::Root {
                    coordinator: 2,
                    index: 6,
                },
                result: Err(Abort::new("insufficient credit")),
                tree_abort: Some(Abort::drift()),
                participants: ShardSet::from_bits(0b101),
            }),
            Message::Reply(Reply {
                parent: Parent::Root {
                    coordinator: 0,
                    index: 1,
                },
                result: Ok(Payload::encode(&5i64)),
                tree_abort: None,
                participants: ShardSet::one(1),
            }),
            Message::Done1 {
                epoch: 5,
                lc: 99,
                aborted: vec![3, 8],
                moves: vec![
                    (
                        19,
                        Move {
                            op: OpId(1),
                            partition: 7,
                            to: 2,
                            share: None,
                        },
                    ),
                    (
                        20,
                        Move {
                            op: OpId(0),
                            partition: 3,
                            to: 1,
                            share: Some(MoveShare {
                                most: 1_024,
                                least: 16,
                                per_ms: 100,
                            }),
                        },
                    ),
                ],
                switches: vec![(OpId(1), 4), (OpId(0), 9)],
                handovers: vec![
                    (23, Handover { shard: 1, node: 3 }),
                    (24, Handover::leave(2)),
                    (25, Handover::join(4)),
                ],
            },
            Message::Flags {
                epoch: 5,
                flags: vec![(3, 1), (9, 6)],
                snapshot: true,
            },
            Message::Finish {
                epoch: 5,
                tid: 3,
                commit: true,
                serial: false,
            },
            Message::Done2 {
                epoch: 5,
                drifted: vec![(11, 2)],
            },
            Message::Next { epoch: 5, index: 2 },
            Message::Submit {
                origin: 2,
                token: 12,
                request,
            },
            Message::Replied {
                token: 12,
                tid: 77,
                outcome: Outcome::Committed(Payload::encode(&1u8)),
            },
            Message::Durable { epoch: 4 },
            Message::Install {
                epoch: 5,
                op: OpId(0),
                partition: 3,
                entities: vec![(Key::from(7u64), Value::from_bytes(&[1, 2, 3]))],
                deleted: vec![Key::from(8u64), Key::from("gone")],
                last: true,
            },
        ]
    }

    fn encoded(batch: &[Message]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_batch(batch, &mut out);
        out
    }

    #[test]
    fn every_message_round_trips() {
        let batch = every_kind();
        let back = decode_batch(&encoded(&batch), 3).expect("decodes");
        assert_eq!(format!("{batch:?}"), format!("{back:?}"));
        assert!(decode_batch(&encoded(&[]), 3).unwrap().is_empty());
    }

    #[test]
    fn shard_ids_past_the_cluster_are_refused() {
        let bytes = encoded(&every_kind());
        let err = decode_batch(&bytes, 2).unwrap_err();
        assert!(matches!(err, WireError::Invalid(_)), "{err}");
    }

    #[test]
    fn every_truncation_and_flipped_tag_is_an_error_not_a_panic() {
        let bytes = encoded(&every_kind());
        for cut in 0..bytes.len() {
            assert!(decode_batch(&bytes[..cut], 3).is_err(), "cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode_batch(&longer, 3).is_err());
        // Every single-byte corruption either decodes to something or is
        // refused; none panics.
        for i in 0..bytes.len() {
            for x in [0x01u8, 0x80, 0xff] {
                let mut b = bytes.clone();
                b[i] ^= x;
                let _ = decode_batch(&b, 3);
            }
        }
    }

    #[test]
    fn a_move_whose_share_never_ends_is_refused() {
        let stuck = MoveShare {
            most: 0,
            least: 0,
            per_ms: 1,
        };
        let done1 = Message::Done1 {
            epoch: 1,
            lc: 0,
            aborted: vec![],
            moves: vec![(
                1,
                Move {
                    op: OpId(0),
                    partition: 0,
                    to: 1,
                    share: Some(stuck),
                },
            )],
            switches: vec![],
            handovers: vec![],
        };
        let err = decode_batch(&encoded(&[done1]), 3).unwrap_err();
        assert!(
            matches!(&err, WireError::Invalid(why) if why.contains("never ends")),
            "{err}"
        );
    }

    #[test]
    fn a_huge_count_is_refused_before_allocating() {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(decode_batch(&bytes, 3), Err(WireError::Invalid(_))));
    }
}
