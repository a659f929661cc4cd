//! Bytes to frames: an incremental decoder, sans I/O.
//!
//! The caller reads from its socket however it likes and hands the decoder
//! each chunk; the decoder yields frames as they complete. A chunk may hold
//! part of a frame, or several, split anywhere: the frames (and errors) that
//! come out do not depend on how the stream was cut.
//!
//! Invariants:
//! - The decoder holds at most one frame's bytes, and only of frames whose
//!   length prefix passed the limit: a hostile prefix is refused after its
//!   4 bytes, before anything is allocated for it. The buffer grows with the
//!   bytes that actually arrive (doubling, capped at the announced length),
//!   so a peer that announces a 1 MiB frame and sends 10 bytes costs 64.
//! - A frame that sits whole in the chunk is parsed in place, not copied.
//! - Fatal errors (bad length, too large, bad version) are returned once, at
//!   the same stream offset however the stream was cut; the decoder then
//!   discards all input, as the connection must close. Errors inside a
//!   well-framed frame are returned with its correlation id, and decoding
//!   goes on with the next frame.
//! - Nothing panics, whatever the input: every read is bounds-checked
//!   against the frame, every length against the bytes left and its cap.

use crate::error::{Error, ErrorCode};
use crate::frame::{
    Body, Frame, FrameType, LAYOUT_SHARDS_MAX, Layout, MAP_NODES_MAX, MAP_OPERATORS_MAX, MEMBERS_LEFT_MAX, Map,
    MapNode, MapOperator, Members, PLACEMENT_MOVED_MAX, Placement, Request, Status, TARGET_ENTITY, TARGET_PARTITION,
    VERSION, Welcome, abort_kind_on_wire,
};
use crate::limits::{
    BUFFER_RETAINED_MAX, ERROR_MESSAGE_LEN_MAX, FRAME_LEN_MAX, FRAME_LEN_MAX_FLOOR, HEADER_LEN, NAME_LEN_MAX,
    PEER_NAME_LEN_MAX, PREFIX_LEN,
};
use styx_engine::{ABORT_MESSAGE_LEN_MAX, Abort, AbortKind, Address, KEY_LEN_MAX, Key, PAYLOAD_LEN_MAX, Payload};

/// The length prefix and the version byte: enough to accept or refuse a frame.
const PROLOGUE_LEN: usize = PREFIX_LEN + 1;

/// An incremental frame decoder for one connection.
#[derive(Debug)]
pub struct Decoder {
    frame_len_max: usize,
    /// The bytes of the frame being assembled, from its length prefix on.
    buf: Vec<u8>,
    /// The whole length of that frame, once its prefix is in; 0 before.
    frame_len: usize,
    /// A fatal error was returned: discard everything.
    failed: bool,
}

impl Decoder {
    /// A decoder that refuses frames longer than `frame_len_max` bytes,
    /// header included.
    ///
    /// # Panics
    /// If `frame_len_max` is outside `FRAME_LEN_MAX_FLOOR..=FRAME_LEN_MAX`
    /// (see [`Limits::validate`](crate::Limits::validate)).
    pub fn new(frame_len_max: usize) -> Decoder {
        assert!(
            (FRAME_LEN_MAX_FLOOR..=FRAME_LEN_MAX).contains(&frame_len_max),
            "frame_len_max {frame_len_max} outside {FRAME_LEN_MAX_FLOOR}..={FRAME_LEN_MAX}"
        );
        Decoder {
            frame_len_max,
            buf: Vec::new(),
            frame_len: 0,
            failed: false,
        }
    }

    /// Takes bytes from the front of `input` until one frame (or error) is
    /// complete, and returns it; `None` once `input` is used up with no frame
    /// complete. A fatal error leaves `input` just past the byte that
    /// revealed it, wherever the chunks were cut; from then on the decoder
    /// discards all input, as the connection must close. Call it again while
    /// it returns `Some`:
    ///
    /// ```
    /// # use styx_net::{Decoder, FRAME_LEN_MAX};
    /// # let chunk: &[u8] = &[];
    /// let mut decoder = Decoder::new(FRAME_LEN_MAX);
    /// let mut input = chunk;
    /// while let Some(result) = decoder.decode(&mut input) {
    ///     match result {
    ///         Ok(frame) => { /* serve it */ }
    ///         Err(e) if e.is_fatal() => { /* send e.to_frame(), close */ break }
    ///         Err(e) => { /* send e.to_frame(), go on */ }
    ///     }
    /// }
    /// ```
    pub fn decode(&mut self, input: &mut &[u8]) -> Option<Result<Frame, Error>> {
        if self.failed {
            *input = &[];
            return None;
        }
        if self.buf.is_empty() && input.len() >= PROLOGUE_LEN {
            match self.prologue(&input[..PROLOGUE_LEN]) {
                Err(e) => {
                    // Consume what the slow path would have: the length
                    // prefix, and the version byte if that was at fault.
                    let seen = if matches!(e, Error::BadVersion { .. }) {
                        PROLOGUE_LEN
                    } else {
                        PREFIX_LEN
                    };
                    *input = &input[seen..];
                    return Some(self.fail(e));
                }
                Ok(len) if input.len() >= len => {
                    let (frame, rest) = input.split_at(len);
                    *input = rest;
                    return Some(parse(frame));
                }
                Ok(_) => {}
            }
        }
        while !input.is_empty() {
            let want = if self.buf.len() < PREFIX_LEN {
                PREFIX_LEN
            } else if self.buf.len() < PROLOGUE_LEN {
                PROLOGUE_LEN
            } else {
                self.frame_len
            };
            let n = (want - self.buf.len()).min(input.len());
            self.append(&input[..n]);
            *input = &input[n..];
            if self.buf.len() == PREFIX_LEN || self.buf.len() == PROLOGUE_LEN {
                match self.prologue(&self.buf) {
                    Err(e) => return Some(self.fail(e)),
                    Ok(len) => self.frame_len = len,
                }
            }
            if self.buf.len() >= PROLOGUE_LEN && self.buf.len() == self.frame_len {
                let result = parse(&self.buf);
                self.reset();
                return Some(result);
            }
        }
        None
    }

    /// Tells the decoder the stream ended: an error if it ended inside a frame.
    pub fn finish(&self) -> Result<(), Error> {
        if self.failed || self.buf.is_empty() {
            Ok(())
        } else {
            Err(Error::Truncated {
                buffered: self.buf.len(),
            })
        }
    }

    /// Bytes of an incomplete frame held.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The capacity of the decoder's buffer: at most `frame_len_max`.
    pub fn buffer_capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// Whether a fatal error was returned (the connection must close).
    pub fn has_failed(&self) -> bool {
        self.failed
    }

    /// Checks as much of the prologue as `bytes` holds (4 or 5 bytes) and
    /// returns the frame's whole length.
    fn prologue(&self, bytes: &[u8]) -> Result<usize, Error> {
        let len = u32::from_le_bytes(bytes[..PREFIX_LEN].try_into().expect("4 bytes"));
        if (len as usize) < HEADER_LEN - PREFIX_LEN {
            return Err(Error::BadLength {
                len,
                min: HEADER_LEN - PREFIX_LEN,
            });
        }
        let frame_len = u64::from(len) + PREFIX_LEN as u64;
        if frame_len > self.frame_len_max as u64 {
            return Err(Error::FrameTooLarge {
                len: frame_len,
                max: self.frame_len_max,
            });
        }
        if let Some(&version) = bytes.get(PREFIX_LEN)
            && version != VERSION
        {
            return Err(Error::BadVersion {
                got: version,
                expected: VERSION,
            });
        }
        Ok(frame_len as usize)
    }

    fn fail(&mut self, e: Error) -> Result<Frame, Error> {
        assert!(e.is_fatal());
        self.failed = true;
        self.buf = Vec::new();
        self.frame_len = 0;
        Err(e)
    }

    fn reset(&mut self) {
        self.buf.clear();
        self.frame_len = 0;
        if self.buf.capacity() > BUFFER_RETAINED_MAX {
            self.buf = Vec::new();
        }
    }

    /// Appends bytes that arrived, growing the buffer at most to the frame's
    /// length (or the prologue's, before the length is known).
    fn append(&mut self, bytes: &[u8]) {
        let need = self.buf.len() + bytes.len();
        if need > self.buf.capacity() {
            let bound = if self.frame_len == 0 {
                PROLOGUE_LEN
            } else {
                self.frame_len
            };
            let target = (self.buf.capacity() * 2).max(64).min(bound).max(need);
            self.buf.reserve_exact(target - self.buf.len());
        }
        self.buf.extend_from_slice(bytes);
        assert!(self.buf.len() <= self.frame_len_max.max(PROLOGUE_LEN));
    }
}

/// Parses one whole frame whose prologue was checked.
fn parse(frame: &[u8]) -> Result<Frame, Error> {
    assert!(frame.len() >= HEADER_LEN);
    let frame_type = frame[PREFIX_LEN + 1];
    let corr = u32::from_le_bytes(frame[PREFIX_LEN + 2..HEADER_LEN].try_into().expect("4 bytes"));
    let Some(frame_type) = FrameType::from_u8(frame_type) else {
        return Err(Error::UnknownFrameType { corr, frame_type });
    };
    let mut r = Reader {
        bytes: &frame[HEADER_LEN..],
        corr,
    };
    let body = match frame_type {
        FrameType::Hello => Body::Hello {
            version_min: r.u8("version_min")?,
            version_max: r.u8("version_max")?,
            client: r.text("client name", PEER_NAME_LEN_MAX)?.to_string(),
        },
        FrameType::Welcome => Body::Welcome(Welcome {
            version: r.u8("version")?,
            frame_len_max: r.u32("frame_len_max")?,
            in_flight_max: r.u32("in_flight_max")?,
            payload_len_max: r.u32("payload_len_max")?,
            server: r.text("server name", PEER_NAME_LEN_MAX)?.to_string(),
        }),
        FrameType::Ping => Body::Ping { data: r.u64("data")? },
        FrameType::Pong => Body::Pong { data: r.u64("data")? },
        FrameType::Status => Body::Status,
        FrameType::StatusReply => Body::StatusReply(Status {
            shards: r.u16("shards")?,
            epoch: r.u64("epoch")?,
            uptime_ms: r.u64("uptime_ms")?,
            committed: r.u64("committed")?,
            aborted: r.u64("aborted")?,
            committed_per_s: r.u64("committed_per_s")?,
            aborted_per_s: r.u64("aborted_per_s")?,
            epochs_per_s: r.u64("epochs_per_s")?,
            connections: r.u32("connections")?,
            in_flight: r.u32("in_flight")?,
        }),
        FrameType::Map => Body::Map,
        FrameType::MapReply => {
            let node = r.u16("node")?;
            let shards = r.u16("shards")?;
            let count = r.count("nodes", MAP_NODES_MAX)?;
            // Each entry takes at least 8 bytes: no more room than the frame can fill.
            let mut nodes = Vec::with_capacity(count.min(r.bytes.len() / 8));
            for _ in 0..count {
                nodes.push(MapNode {
                    first_shard: r.u16("first_shard")?,
                    shards: r.u16("node shards")?,
                    client: r.text("node address", NAME_LEN_MAX)?.to_string(),
                });
            }
            let count = r.count("operators", MAP_OPERATORS_MAX)?;
            let mut operators = Vec::with_capacity(count.min(r.bytes.len() / 8));
            for _ in 0..count {
                operators.push(MapOperator {
                    name: r.text("operator", NAME_LEN_MAX)?.to_string(),
                    partitions: r.u32("partitions")?,
                });
            }
            let map = Map {
                node,
                shards,
                nodes,
                operators,
                placed: None,
            };
            if !map.is_consistent() {
                // Ranges that do not tile the shards cannot place anything.
                return Err(r.bad_tag("map", u64::from(shards)));
            }
            Body::MapReply(map)
        }
        FrameType::Placement => Body::Placement,
        FrameType::Layout => Body::Layout,
        FrameType::Members => Body::Members,
        FrameType::MembersReply => {
            let version = r.u64("version")?;
            let count = r.count("nodes left", MEMBERS_LEFT_MAX)?;
            let mut left: Vec<u16> = Vec::with_capacity(count.min(r.bytes.len() / 2));
            for _ in 0..count {
                let node = r.u16("node")?;
                // Ascending, each once: a list a client can search.
                if left.last().is_some_and(|l| *l >= node) {
                    return Err(r.bad_tag("node left (not ascending)", u64::from(node)));
                }
                left.push(node);
            }
            Body::MembersReply(Members { version, left })
        }
        FrameType::LayoutReply => {
            let version = r.u64("version")?;
            let count = r.count("layout shards", LAYOUT_SHARDS_MAX)?;
            // Each entry takes 2 bytes: no more room than the frame can fill.
            let mut node_of = Vec::with_capacity(count.min(r.bytes.len() / 2));
            for _ in 0..count {
                node_of.push(r.u16("node")?);
            }
            Body::LayoutReply(Layout { version, node_of })
        }
        FrameType::PlacementReply => {
            let version = r.u64("version")?;
            let count = r.count("operators", MAP_OPERATORS_MAX)?;
            let mut moved = Vec::with_capacity(count.min(r.bytes.len() / 4));
            let mut total = 0usize;
            for _ in 0..count {
                let n = r.u32("moved partitions")? as usize;
                total = total.saturating_add(n);
                if total > PLACEMENT_MOVED_MAX {
                    return Err(Error::FieldTooLong {
                        corr: r.corr,
                        field: "moved partitions",
                        len: total,
                        max: PLACEMENT_MOVED_MAX,
                    });
                }
                // Each entry takes 6 bytes: no more room than the frame can fill.
                let mut op = Vec::with_capacity(n.min(r.bytes.len() / 6));
                for _ in 0..n {
                    let partition = r.u32("partition")?;
                    let shard = r.u16("shard")?;
                    // In partition order, each once: a client looks them up.
                    if op.last().is_some_and(|(p, _)| *p >= partition) {
                        return Err(r.bad_tag("partition", u64::from(partition)));
                    }
                    op.push((partition, shard));
                }
                moved.push(op);
            }
            Body::PlacementReply(Placement { version, moved })
        }
        FrameType::Request => Body::Request(Request {
            client: r.u64("client")?,
            seq: r.u64("seq")?,
            ack: r.u64("ack")?,
            operator: r.text("operator", NAME_LEN_MAX)?.to_string(),
            function: r.text("function", NAME_LEN_MAX)?.to_string(),
            target: match r.u8("target kind")? {
                TARGET_ENTITY => Address::Entity(Key::from_bytes(r.bytes("key", KEY_LEN_MAX)?)),
                TARGET_PARTITION => Address::Partition(r.u32("partition")?),
                tag => return Err(r.bad_tag("target kind", tag.into())),
            },
            args: Payload::from_bytes(r.args()?),
        }),
        FrameType::Get => Body::Get {
            operator: r.text("operator", NAME_LEN_MAX)?.to_string(),
            key: Key::from_bytes(r.bytes("key", KEY_LEN_MAX)?),
        },
        FrameType::Committed => Body::Committed {
            tid: r.u64("tid")?,
            result: Payload::from_bytes(r.bytes("result", PAYLOAD_LEN_MAX)?),
        },
        FrameType::Aborted => {
            let tid = r.u64("tid")?;
            let code = r.u8("abort kind")?;
            let kind = AbortKind::from_u8(code)
                .filter(|k| abort_kind_on_wire(*k))
                .ok_or_else(|| r.bad_tag("abort kind", code.into()))?;
            let message = r.text("abort message", ABORT_MESSAGE_LEN_MAX)?;
            Body::Aborted {
                tid,
                abort: Abort::with_kind(kind, message),
            }
        }
        FrameType::State => Body::State {
            value: match r.u8("value tag")? {
                0 => None,
                1 => Some(r.bytes("value", PAYLOAD_LEN_MAX)?.to_vec()),
                tag => return Err(r.bad_tag("value tag", tag.into())),
            },
        },
        FrameType::Error => Body::Error {
            code: ErrorCode(r.u16("error code")?),
            message: r.text("error message", ERROR_MESSAGE_LEN_MAX)?.to_string(),
        },
    };
    r.finish()?;
    Ok(Frame { corr, body })
}

/// Reads the fields of one frame's body, every read checked against its end.
struct Reader<'a> {
    bytes: &'a [u8],
    corr: u32,
}

impl<'a> Reader<'a> {
    fn take(&mut self, field: &'static str, n: usize) -> Result<&'a [u8], Error> {
        if self.bytes.len() < n {
            return Err(Error::FieldOverrun {
                corr: self.corr,
                field,
                needed: n as u64,
                left: self.bytes.len(),
            });
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], Error> {
        Ok(self.take(field, N)?.try_into().expect("N bytes"))
    }

    fn u8(&mut self, field: &'static str) -> Result<u8, Error> {
        Ok(self.array::<1>(field)?[0])
    }

    fn u16(&mut self, field: &'static str) -> Result<u16, Error> {
        Ok(u16::from_le_bytes(self.array(field)?))
    }

    /// A `u16` count of list items, at most `max`.
    fn count(&mut self, field: &'static str, max: usize) -> Result<usize, Error> {
        let n = usize::from(self.u16(field)?);
        if n > max {
            return Err(Error::FieldTooLong {
                corr: self.corr,
                field,
                len: n,
                max,
            });
        }
        Ok(n)
    }

    fn u32(&mut self, field: &'static str) -> Result<u32, Error> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    fn u64(&mut self, field: &'static str) -> Result<u64, Error> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    /// A `u32` length and that many bytes. The length is checked against the
    /// bytes left before its cap (by the callers): a length past the frame is
    /// malformed whatever the cap, and is refused without allocating.
    fn sized(&mut self, field: &'static str) -> Result<&'a [u8], Error> {
        let len = self.u32(field)?;
        self.take(field, len as usize)
    }

    fn bytes(&mut self, field: &'static str, max: usize) -> Result<&'a [u8], Error> {
        let bytes = self.sized(field)?;
        if bytes.len() > max {
            return Err(Error::FieldTooLong {
                corr: self.corr,
                field,
                len: bytes.len(),
                max,
            });
        }
        Ok(bytes)
    }

    fn args(&mut self) -> Result<&'a [u8], Error> {
        let bytes = self.sized("args")?;
        if bytes.len() > PAYLOAD_LEN_MAX {
            return Err(Error::ArgsTooLarge {
                corr: self.corr,
                len: bytes.len(),
                max: PAYLOAD_LEN_MAX,
            });
        }
        Ok(bytes)
    }

    fn text(&mut self, field: &'static str, max: usize) -> Result<&'a str, Error> {
        let bytes = self.bytes(field, max)?;
        std::str::from_utf8(bytes).map_err(|_| Error::BadUtf8 { corr: self.corr, field })
    }

    fn bad_tag(&self, field: &'static str, value: u64) -> Error {
        Error::BadTag {
            corr: self.corr,
            field,
            value,
        }
    }

    fn finish(self) -> Result<(), Error> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(Error::TrailingBytes {
                corr: self.corr,
                extra: self.bytes.len(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode;

    fn ping(corr: u32) -> Vec<u8> {
        let mut out = Vec::new();
        encode(
            &Frame {
                corr,
                body: Body::Ping { data: u64::from(corr) },
            },
            &mut out,
        )
        .unwrap();
        out
    }

    #[test]
    fn a_hostile_prefix_is_refused_after_four_bytes() {
        let mut d = Decoder::new(FRAME_LEN_MAX);
        let mut input: &[u8] = &[0xff, 0xff, 0xff];
        assert_eq!(d.decode(&mut input), None);
        let mut input: &[u8] = &[0xff];
        assert!(matches!(d.decode(&mut input), Some(Err(Error::FrameTooLarge { .. }))));
        assert!(d.buffer_capacity() <= PROLOGUE_LEN);
        assert!(d.has_failed());
        let bytes = ping(1);
        let mut input = &bytes[..];
        assert_eq!(d.decode(&mut input), None, "a failed decoder discards input");
        assert!(input.is_empty());
    }

    #[test]
    fn the_buffer_grows_with_the_bytes_that_arrive() {
        let mut d = Decoder::new(FRAME_LEN_MAX);
        // A REQUEST announcing the largest frame, of which 100 bytes arrive.
        let mut bytes = ((FRAME_LEN_MAX - PREFIX_LEN) as u32).to_le_bytes().to_vec();
        bytes.extend_from_slice(&[VERSION, FrameType::Request as u8]);
        bytes.resize(100, 0);
        for b in &bytes {
            let mut input = std::slice::from_ref(b);
            assert_eq!(d.decode(&mut input), None);
        }
        assert_eq!(d.buffered(), 100);
        assert!(d.buffer_capacity() <= 128, "{}", d.buffer_capacity());
        assert_eq!(d.finish(), Err(Error::Truncated { buffered: 100 }));
    }

    #[test]
    fn large_buffers_are_released_between_frames() {
        let mut d = Decoder::new(FRAME_LEN_MAX);
        let frame = Frame {
            corr: 1,
            body: Body::Committed {
                tid: 1,
                result: Payload::from_vec(vec![7; BUFFER_RETAINED_MAX * 2]),
            },
        };
        let mut bytes = Vec::new();
        encode(&frame, &mut bytes).unwrap();
        let (a, b) = bytes.split_at(bytes.len() / 2);
        let (mut a, mut b) = (a, b);
        assert_eq!(d.decode(&mut a), None);
        assert!(d.buffer_capacity() <= bytes.len());
        assert_eq!(d.decode(&mut b), Some(Ok(frame)));
        assert_eq!(d.buffer_capacity(), 0);
    }
}
