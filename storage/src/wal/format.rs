//! The log's bytes: segment headers and records (see the table in
//! [`crate::wal`]). Pure functions, no I/O, so the reader, the writer, the
//! inspector and the tests share one definition.

use crate::FORMAT_VERSION;
use crate::crc::crc32c;
use styx_engine::{
    Address, Batch, ClientSeq, Epoch, FnId, KEY_LEN_MAX, Key, OpId, PAYLOAD_LEN_MAX, Payload, Request, ShardId,
};

pub const SEGMENT_MAGIC: [u8; 8] = *b"STYXWAL\0";
pub const RECORD_MAGIC: [u8; 4] = *b"STXR";
/// Bytes of a segment header in use; the header occupies the segment's
/// whole first alignment unit.
pub const SEGMENT_HEADER_BYTES: usize = 64;
pub const RECORD_HEADER_BYTES: usize = 48;
/// The smallest and largest O_DIRECT alignment a segment may declare.
pub const ALIGNMENT_MIN: u64 = 512;
pub const ALIGNMENT_MAX: u64 = 64 << 10;
/// A record (header and body, before padding) is at most this long: the
/// reader holds a whole segment in memory and the writer a whole record.
pub const RECORD_BYTES_MAX: u64 = 1 << 30;
/// The body bytes of one transaction: tid, function, address tag, args
/// length, client tag (an entity key's length or a partition number, and a
/// client's three numbers, come on top).
const TXN_BYTES_MIN: usize = 8 + 2 + 2 + 1 + 4 + 1;
const CLIENT_NONE: u8 = 0;
const CLIENT_PRESENT: u8 = 1;
const BODY_FIXED_BYTES: usize = 8 + 8 + 4;

const ADDRESS_ENTITY: u8 = 0;
const ADDRESS_PARTITION: u8 = 1;

const _: () = assert!(SEGMENT_HEADER_BYTES as u64 <= ALIGNMENT_MIN);
const _: () = assert!(RECORD_HEADER_BYTES as u64 <= ALIGNMENT_MIN);
const _: () = assert!(ALIGNMENT_MIN.is_power_of_two() && ALIGNMENT_MAX.is_power_of_two());
const _: () = assert!(RECORD_BYTES_MAX <= u32::MAX as u64);
const _: () = assert!(KEY_LEN_MAX <= u16::MAX as usize);

/// The first block of a segment file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    pub shard: ShardId,
    /// Records start at multiples of this (the O_DIRECT alignment of the
    /// device the segment was written on).
    pub alignment: u32,
    /// No record in this segment is older; every record in earlier segments is.
    pub first_epoch: Epoch,
    /// The preallocated length when the segment was created.
    pub capacity: u64,
}

/// Why a segment header could not be used.
#[derive(Debug, PartialEq, Eq)]
pub enum SegmentHeaderError {
    /// Shorter than a header, or all zeros: created but never initialised.
    Uninitialised,
    Magic(Vec<u8>),
    Version(u16),
    Checksum,
    /// The checksum holds but a field is out of range.
    Invalid(String),
}

impl SegmentHeader {
    pub fn encode(&self) -> [u8; SEGMENT_HEADER_BYTES] {
        let mut b = [0u8; SEGMENT_HEADER_BYTES];
        b[0..8].copy_from_slice(&SEGMENT_MAGIC);
        b[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[10..12].copy_from_slice(&self.shard.to_le_bytes());
        b[12..16].copy_from_slice(&self.alignment.to_le_bytes());
        b[16..24].copy_from_slice(&self.first_epoch.to_le_bytes());
        b[24..32].copy_from_slice(&self.capacity.to_le_bytes());
        let crc = crc32c(&b[..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Checks in this order: initialised, magic, version, checksum, fields.
    /// Magic and version come before the checksum so that a file of another
    /// kind or version is named as such, not reported as damaged.
    pub fn decode(b: &[u8]) -> Result<SegmentHeader, SegmentHeaderError> {
        if b.len() < SEGMENT_HEADER_BYTES || b[..SEGMENT_HEADER_BYTES].iter().all(|x| *x == 0) {
            return Err(SegmentHeaderError::Uninitialised);
        }
        if b[0..8] != SEGMENT_MAGIC {
            return Err(SegmentHeaderError::Magic(b[0..8].to_vec()));
        }
        let version = u16_at(b, 8);
        if version != FORMAT_VERSION {
            return Err(SegmentHeaderError::Version(version));
        }
        if crc32c(&b[..60]) != u32_at(b, 60) {
            return Err(SegmentHeaderError::Checksum);
        }
        if b[32..60].iter().any(|x| *x != 0) {
            return Err(SegmentHeaderError::Invalid("its reserved bytes are not zero".into()));
        }
        let h = SegmentHeader {
            shard: u16_at(b, 10),
            alignment: u32_at(b, 12),
            first_epoch: u64_at(b, 16),
            capacity: u64_at(b, 24),
        };
        let align = u64::from(h.alignment);
        if !(ALIGNMENT_MIN..=ALIGNMENT_MAX).contains(&align) || !align.is_power_of_two() {
            return Err(SegmentHeaderError::Invalid(format!(
                "alignment {align} is not a power of two in 512..=65536"
            )));
        }
        if h.first_epoch == 0 {
            return Err(SegmentHeaderError::Invalid("first epoch 0 (epochs start at 1)".into()));
        }
        Ok(h)
    }
}

/// The fixed part of a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    pub shard: ShardId,
    pub epoch: Epoch,
    /// The epoch of the record written before this one by this shard's log
    /// (0: none). Chains records across segments, so a lost record or
    /// segment is detected, not skipped.
    pub prev_epoch: Epoch,
    /// The highest epoch the writer had made durable when it wrote this
    /// record. A damaged record at epoch `e` followed by a record that says
    /// `synced_epoch >= e` is corruption (it was acknowledged durable); one
    /// followed only by records with smaller `synced_epoch` is a torn tail
    /// of unsynced writes the device reordered.
    pub synced_epoch: Epoch,
    pub body_len: u32,
    pub body_crc: u32,
}

/// What sits at a record position.
#[derive(Debug, PartialEq, Eq)]
pub enum HeaderCheck {
    /// All zeros: the unwritten rest of a preallocated segment.
    Zero,
    /// A damaged or partly written header.
    Invalid(&'static str),
    /// The checksum holds but the version is another one: refuse.
    Version(u16),
    Valid(RecordHeader),
}

impl RecordHeader {
    pub fn encode(&self) -> [u8; RECORD_HEADER_BYTES] {
        let mut b = [0u8; RECORD_HEADER_BYTES];
        b[0..4].copy_from_slice(&RECORD_MAGIC);
        b[4..6].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[6..8].copy_from_slice(&self.shard.to_le_bytes());
        b[8..16].copy_from_slice(&self.epoch.to_le_bytes());
        b[16..24].copy_from_slice(&self.prev_epoch.to_le_bytes());
        b[24..32].copy_from_slice(&self.synced_epoch.to_le_bytes());
        b[32..36].copy_from_slice(&self.body_len.to_le_bytes());
        b[36..40].copy_from_slice(&self.body_crc.to_le_bytes());
        let crc = crc32c(&b[..44]);
        b[44..48].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Checks the checksum first: a torn header is damage, whatever its
    /// magic or version bytes say. Only an intact header of another version
    /// is refused as such.
    pub fn check(b: &[u8]) -> HeaderCheck {
        if b.len() < RECORD_HEADER_BYTES {
            return if b.iter().all(|x| *x == 0) {
                HeaderCheck::Zero
            } else {
                HeaderCheck::Invalid("the record header is cut short")
            };
        }
        let b = &b[..RECORD_HEADER_BYTES];
        if b.iter().all(|x| *x == 0) {
            return HeaderCheck::Zero;
        }
        if crc32c(&b[..44]) != u32_at(b, 44) {
            return HeaderCheck::Invalid("the record header checksum does not match");
        }
        if b[0..4] != RECORD_MAGIC {
            return HeaderCheck::Invalid("the record header has a valid checksum but no record magic");
        }
        if b[40..44] != [0; 4] {
            // Every writer of this version writes zeros there.
            return HeaderCheck::Invalid("the record header has a valid checksum but its reserved bytes are not zero");
        }
        let version = u16_at(b, 4);
        if version != FORMAT_VERSION {
            return HeaderCheck::Version(version);
        }
        HeaderCheck::Valid(RecordHeader {
            shard: u16_at(b, 6),
            epoch: u64_at(b, 8),
            prev_epoch: u64_at(b, 16),
            synced_epoch: u64_at(b, 24),
            body_len: u32_at(b, 32),
            body_crc: u32_at(b, 36),
        })
    }

    /// Header and body, before padding.
    pub fn record_len(&self) -> u64 {
        RECORD_HEADER_BYTES as u64 + u64::from(self.body_len)
    }
}

/// The body length of `batch`'s record.
pub fn body_len(batch: &Batch) -> u64 {
    let mut n = BODY_FIXED_BYTES as u64;
    for (_, r) in &batch.txns {
        n += TXN_BYTES_MIN as u64 + r.args.len() as u64;
        n += match &r.address {
            Address::Entity(k) => 2 + k.as_bytes().len() as u64,
            Address::Partition(_) => 4,
        };
        if r.client.is_some() {
            n += 24;
        }
    }
    n
}

/// Writes `batch`'s record (header, then body) into the front of `out`,
/// which must hold at least `RECORD_HEADER_BYTES + body_len` bytes; the
/// rest of `out` (the padding) is left as it is.
pub fn encode_record(batch: &Batch, prev_epoch: Epoch, synced_epoch: Epoch, body_len: u64, out: &mut [u8]) {
    assert!(body_len + RECORD_HEADER_BYTES as u64 <= RECORD_BYTES_MAX);
    assert!(batch.epoch > prev_epoch, "epoch {} after {prev_epoch}", batch.epoch);
    assert!(synced_epoch <= prev_epoch);
    let end = RECORD_HEADER_BYTES + body_len as usize;
    let body = &mut out[RECORD_HEADER_BYTES..end];
    let mut w = Cursor { buf: body, pos: 0 };
    w.put(&batch.lc.to_le_bytes());
    w.put(&batch.now_us.to_le_bytes());
    w.put(
        &u32::try_from(batch.txns.len())
            .expect("fewer than 2^32 transactions")
            .to_le_bytes(),
    );
    for (tid, r) in &batch.txns {
        w.put(&tid.to_le_bytes());
        w.put(&r.function.op.0.to_le_bytes());
        w.put(&r.function.index.to_le_bytes());
        match &r.address {
            Address::Entity(k) => {
                let key = k.as_bytes();
                w.put(&[ADDRESS_ENTITY]);
                w.put(&(key.len() as u16).to_le_bytes());
                w.put(key);
            }
            Address::Partition(p) => {
                w.put(&[ADDRESS_PARTITION]);
                w.put(&p.to_le_bytes());
            }
        }
        let args = r.args.as_bytes();
        w.put(&(args.len() as u32).to_le_bytes());
        w.put(args);
        match r.client {
            None => w.put(&[CLIENT_NONE]),
            Some(c) => {
                w.put(&[CLIENT_PRESENT]);
                w.put(&c.client.to_le_bytes());
                w.put(&c.seq.to_le_bytes());
                w.put(&c.ack.to_le_bytes());
            }
        }
    }
    assert_eq!(w.pos as u64, body_len, "body_len disagrees with the encoder");
    let body_crc = crc32c(&out[RECORD_HEADER_BYTES..end]);
    let header = RecordHeader {
        shard: batch.shard,
        epoch: batch.epoch,
        prev_epoch,
        synced_epoch,
        body_len: body_len as u32,
        body_crc,
    };
    out[..RECORD_HEADER_BYTES].copy_from_slice(&header.encode());
}

/// Decodes a body whose checksum held. An error here means the writer and
/// the reader disagree on the format: it is reported as corruption.
pub fn decode_body(header: &RecordHeader, body: &[u8]) -> Result<Batch, String> {
    let mut r = Reader { buf: body, pos: 0 };
    let lc = r.u64()?;
    let now_us = r.u64()?;
    let n = r.u32()? as usize;
    if n > body.len() / TXN_BYTES_MIN {
        return Err(format!("{n} transactions cannot fit in {} bytes", body.len()));
    }
    let mut txns = Vec::with_capacity(n);
    for i in 0..n {
        let tid = r.u64()?;
        let op = r.u16()?;
        let index = r.u16()?;
        let address = match r.u8()? {
            ADDRESS_ENTITY => {
                let len = r.u16()? as usize;
                if len > KEY_LEN_MAX {
                    return Err(format!("transaction {i}: key of {len} bytes exceeds {KEY_LEN_MAX}"));
                }
                Address::Entity(Key::from_bytes(r.take(len)?))
            }
            ADDRESS_PARTITION => Address::Partition(r.u32()?),
            tag => return Err(format!("transaction {i}: address tag {tag} has no meaning")),
        };
        let len = r.u32()? as usize;
        if len > PAYLOAD_LEN_MAX {
            return Err(format!(
                "transaction {i}: arguments of {len} bytes exceed {PAYLOAD_LEN_MAX}"
            ));
        }
        let args = Payload::from_bytes(r.take(len)?);
        let client = match r.u8()? {
            CLIENT_NONE => None,
            CLIENT_PRESENT => Some(ClientSeq {
                client: r.u64()?,
                seq: r.u64()?,
                ack: r.u64()?,
            }),
            tag => return Err(format!("transaction {i}: client tag {tag} has no meaning")),
        };
        txns.push((
            tid,
            Request {
                function: FnId { op: OpId(op), index },
                address,
                args,
                client,
            },
        ));
    }
    if r.pos != body.len() {
        return Err(format!(
            "{} bytes left over after the last transaction",
            body.len() - r.pos
        ));
    }
    Ok(Batch {
        epoch: header.epoch,
        shard: header.shard,
        lc,
        now_us,
        txns,
    })
}

/// Decodes the record at the start of `bytes` as the reader checks one:
/// header and its checksum, length, body checksum, body. `Ok(None)`: zeros,
/// no record. For fuzzing and tests (the reader decides between a torn
/// tail and corruption around the same checks).
pub fn decode_record(bytes: &[u8]) -> Result<Option<(RecordHeader, Batch)>, String> {
    let header = match RecordHeader::check(bytes) {
        HeaderCheck::Zero => return Ok(None),
        HeaderCheck::Invalid(why) => return Err(why.into()),
        HeaderCheck::Version(v) => return Err(format!("a record of format version {v}")),
        HeaderCheck::Valid(h) => h,
    };
    if header.record_len() > RECORD_BYTES_MAX {
        return Err(format!("a record of {} bytes exceeds the limit", header.record_len()));
    }
    let Some(body) = bytes.get(RECORD_HEADER_BYTES..header.record_len() as usize) else {
        return Err("the record is cut off".into());
    };
    if crc32c(body) != header.body_crc {
        return Err("the record body checksum does not match".into());
    }
    decode_body(&header, body).map(|b| Some((header, b)))
}

pub fn align_up(n: u64, align: u64) -> u64 {
    assert!(align.is_power_of_two());
    (n + align - 1) & !(align - 1)
}

struct Cursor<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl Cursor<'_> {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        self.buf[self.pos..self.pos + bytes.len()].copy_from_slice(bytes);
        self.pos += bytes.len();
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.buf.len() - self.pos < n {
            return Err(format!("the body ends {} bytes early", n - (self.buf.len() - self.pos)));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, String> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
}

pub(crate) fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().expect("2 bytes"))
}

pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch() -> Batch {
        Batch {
            epoch: 7,
            shard: 3,
            lc: 99,
            now_us: 1_700_000_000_000_000,
            txns: vec![
                (
                    993,
                    Request {
                        function: FnId { op: OpId(2), index: 5 },
                        address: Address::Entity(Key::from(42u64)),
                        args: Payload::from_bytes(b"hello"),
                        client: Some(ClientSeq {
                            client: 0xfeed,
                            seq: 12,
                            ack: 9,
                        }),
                    },
                ),
                (
                    1003,
                    Request {
                        function: FnId { op: OpId(0), index: 1 },
                        address: Address::Partition(17),
                        args: Payload::EMPTY,
                        client: None,
                    },
                ),
                (
                    1013,
                    Request {
                        function: FnId { op: OpId(1), index: 0 },
                        address: Address::Entity(Key::from_bytes(&[7u8; 300])),
                        args: Payload::from_vec(vec![1u8; 5000]),
                        client: None,
                    },
                ),
            ],
        }
    }

    #[test]
    fn record_roundtrips() {
        let b = batch();
        let body = body_len(&b);
        let mut out = vec![0u8; RECORD_HEADER_BYTES + body as usize];
        encode_record(&b, 5, 4, body, &mut out);
        let HeaderCheck::Valid(h) = RecordHeader::check(&out) else {
            panic!("header not valid")
        };
        assert_eq!((h.epoch, h.prev_epoch, h.synced_epoch, h.shard), (7, 5, 4, 3));
        assert_eq!(h.record_len(), out.len() as u64);
        let body = &out[RECORD_HEADER_BYTES..];
        assert_eq!(crc32c(body), h.body_crc);
        assert_eq!(decode_body(&h, body).unwrap(), b);
    }

    #[test]
    fn layout_is_pinned() {
        // One transaction, entity key 0x0102, args "x": the documented table.
        let b = Batch {
            epoch: 1,
            shard: 0,
            lc: 2,
            now_us: 3,
            txns: vec![(
                4,
                Request {
                    function: FnId { op: OpId(5), index: 6 },
                    address: Address::Entity(Key::from_bytes(&[1, 2])),
                    args: Payload::from_bytes(b"x"),
                    client: None,
                },
            )],
        };
        let n = body_len(&b);
        let mut out = vec![0u8; RECORD_HEADER_BYTES + n as usize];
        encode_record(&b, 0, 0, n, &mut out);
        let body = &out[RECORD_HEADER_BYTES..];
        #[rustfmt::skip]
        let expected: Vec<u8> = [
            &2u64.to_le_bytes()[..], &3u64.to_le_bytes(), &1u32.to_le_bytes(),
            &4u64.to_le_bytes(), &5u16.to_le_bytes(), &6u16.to_le_bytes(),
            &[0], &2u16.to_le_bytes(), &[1, 2], &1u32.to_le_bytes(), b"x", &[0],
        ].concat();
        assert_eq!(body, &expected[..]);
        assert_eq!(&out[0..4], b"STXR");
    }

    #[test]
    fn damaged_headers_are_invalid_not_misread() {
        let b = batch();
        let n = body_len(&b);
        let mut out = vec![0u8; RECORD_HEADER_BYTES + n as usize];
        encode_record(&b, 5, 4, n, &mut out);
        for i in 0..RECORD_HEADER_BYTES {
            let mut h = out[..RECORD_HEADER_BYTES].to_vec();
            h[i] ^= 0x10;
            assert!(matches!(RecordHeader::check(&h), HeaderCheck::Invalid(_)), "byte {i}");
        }
        assert_eq!(RecordHeader::check(&[0u8; RECORD_HEADER_BYTES]), HeaderCheck::Zero);
        // Reserved bytes that are not zero, under a checksum that holds:
        // not a record this version wrote.
        let mut h = out[..RECORD_HEADER_BYTES].to_vec();
        h[42] = 4;
        let crc = crc32c(&h[..44]);
        h[44..48].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(RecordHeader::check(&h), HeaderCheck::Invalid(_)));
    }

    #[test]
    fn segment_header_checks_magic_then_version() {
        let h = SegmentHeader {
            shard: 1,
            alignment: 512,
            first_epoch: 9,
            capacity: 1 << 20,
        };
        let mut b = h.encode();
        assert_eq!(SegmentHeader::decode(&b), Ok(h));
        b[8] = 2;
        assert_eq!(SegmentHeader::decode(&b), Err(SegmentHeaderError::Version(2)));
        b[0] = b'X';
        assert!(matches!(SegmentHeader::decode(&b), Err(SegmentHeaderError::Magic(_))));
        assert_eq!(
            SegmentHeader::decode(&[0u8; 64]),
            Err(SegmentHeaderError::Uninitialised)
        );
    }
}
