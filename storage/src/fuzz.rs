//! Every decoder of bytes this crate reads from disk, over bytes in memory,
//! and the checksum repairs that let mutated bytes past the CRCs: the
//! entry points of the fuzz targets (`storage/fuzz`) and of the mutation
//! test (`tests/decoders.rs`).
//!
//! Damaged input must come back as an error (or, where recovery treats it
//! so, as a torn tail or an incomplete commit), never as a panic. Nearly
//! every random change fails a checksum first, so a fuzzer or a mutation
//! test that wants to reach the parsing behind the checksum (the record
//! body, the rkyv archives, the chains) repairs the checksums after
//! mutating: [`repair_segment`], [`repair_snapshot_file`],
//! [`repair_manifest`].

use crate::crc::crc32c;
use crate::error::Result;
use crate::snapshot::{FileReader, Manifest};
use crate::wal::{self, ALIGNMENT_MAX, ALIGNMENT_MIN, RECORD_HEADER_BYTES, SegmentHeader, Truncation};
use std::path::Path;
use styx_engine::{Batch, Epoch, ShardId};

/// The shard fuzzed logs belong to.
pub const SHARD: ShardId = 1;
/// Entries one decoded snapshot file may hand out here (a bound on the
/// fuzzer's memory, far above what a small input holds).
const ENTRIES_MAX: usize = 1 << 20;

/// One record at the start of `bytes` ([`wal::decode_record`]).
pub fn wal_record(bytes: &[u8]) -> std::result::Result<Option<Batch>, String> {
    wal::decode_record(bytes).map(|r| r.map(|(_, b)| b))
}

/// A shard's log of `segments` (first epoch, bytes; oldest first) read as
/// recovery reads it after epoch `after`: the batches, and a torn tail.
pub fn wal_log(after: Epoch, segments: Vec<(Epoch, Vec<u8>)>) -> Result<(Vec<Batch>, Option<Truncation>)> {
    let mut reader = wal::Reader::from_memory(SHARD, after, segments);
    let mut batches = Vec::new();
    for b in reader.by_ref() {
        batches.push(b?);
    }
    Ok((batches, reader.truncation().cloned()))
}

/// Every entry of a snapshot file, read and checked to its footer.
#[allow(clippy::type_complexity)]
pub fn snapshot_file(bytes: Vec<u8>) -> Result<Vec<(u16, Vec<u8>, Option<Vec<u8>>)>> {
    let mut r = FileReader::from_bytes(Path::new("fuzz.delta"), bytes)?;
    let mut out = Vec::new();
    while let Some(e) = r.peek() {
        if out.len() < ENTRIES_MAX {
            out.push((e.op, e.key.to_vec(), e.value.map(<[u8]>::to_vec)));
        }
        r.advance()?;
    }
    assert!(r.footer().is_some(), "the entries end at the footer");
    Ok(out)
}

/// A manifest file's bytes: `Ok(None)` for a commit cut short.
pub fn manifest(bytes: &[u8]) -> Result<Option<Manifest>> {
    crate::snapshot::decode_manifest(Path::new("manifest"), bytes)
}

/// A segment of `batches` (consecutive epochs, shard [`SHARD`]) as the
/// writer lays it out, records at multiples of `alignment`, each saying
/// the one before it was durable.
pub fn encode_segment(batches: &[Batch], alignment: u32) -> Vec<u8> {
    let align = u64::from(alignment);
    let first_epoch = batches.first().map_or(1, |b| b.epoch);
    let header = SegmentHeader {
        shard: SHARD,
        alignment,
        first_epoch,
        capacity: 0,
    };
    let mut out = vec![0u8; alignment as usize];
    out[..wal::SEGMENT_HEADER_BYTES].copy_from_slice(&header.encode());
    let mut prev = first_epoch - 1;
    for b in batches {
        assert_eq!(b.shard, SHARD);
        let body = wal::body_len(b);
        let len = RECORD_HEADER_BYTES as u64 + body;
        let at = out.len();
        out.resize(at + len.div_ceil(align) as usize * alignment as usize, 0);
        wal::encode_record(b, prev, prev, body, &mut out[at..]);
        prev = b.epoch;
    }
    out
}

/// Makes the checksums of a segment's header and of every record found at
/// its alignment hold again.
pub fn repair_segment(bytes: &mut [u8]) {
    if bytes.len() < wal::SEGMENT_HEADER_BYTES {
        return;
    }
    put_crc(bytes, 60, 0..60);
    let declared = u64::from(u32_at(bytes, 12));
    let align = if (ALIGNMENT_MIN..=ALIGNMENT_MAX).contains(&declared) && declared.is_power_of_two() {
        declared as usize
    } else {
        ALIGNMENT_MIN as usize
    };
    let mut pos = align;
    while pos + RECORD_HEADER_BYTES <= bytes.len() {
        if bytes[pos..pos + 4] != wal::RECORD_MAGIC {
            pos += align;
            continue;
        }
        let body = u32_at(bytes, pos + 32) as usize;
        let end = pos + RECORD_HEADER_BYTES + body;
        if end <= bytes.len() {
            put_crc(bytes, pos + 36, pos + RECORD_HEADER_BYTES..end);
        }
        put_crc(bytes, pos + 44, pos..pos + 44);
        pos += (RECORD_HEADER_BYTES + body).div_ceil(align).max(1) * align;
    }
}

/// Makes a snapshot file's header, metadata, chunk and footer checksums
/// hold again (the metadata length cut to the file's).
pub fn repair_snapshot_file(bytes: &mut [u8]) {
    const HEADER: usize = 64;
    if bytes.len() < HEADER {
        return;
    }
    let meta_len = u64_at(bytes, 32).min((bytes.len() - HEADER) as u64) as usize;
    bytes[32..40].copy_from_slice(&(meta_len as u64).to_le_bytes());
    put_crc(bytes, 40, HEADER..HEADER + meta_len);
    put_crc(bytes, 60, 0..60);
    let mut pos = HEADER + meta_len;
    while pos + 16 <= bytes.len() {
        if &bytes[pos..pos + 8] == b"STYXEND\0" {
            if pos + 32 <= bytes.len() {
                put_crc(bytes, pos + 24, 0..pos);
                put_crc(bytes, pos + 28, pos..pos + 28);
            }
            return;
        }
        if &bytes[pos..pos + 4] != b"CHNK" {
            return;
        }
        let body = u32_at(bytes, pos + 4) as usize;
        let end = pos + 16 + body;
        if end > bytes.len() {
            return;
        }
        put_crc(bytes, pos + 12, pos + 16..end);
        pos = end;
    }
}

/// Makes a manifest's body length and checksums hold again. A declared
/// length beyond 4 GiB is kept (under a header checksum that holds), so
/// that the length check meets absurd values too.
pub fn repair_manifest(bytes: &mut [u8]) {
    const HEADER: usize = 64;
    if bytes.len() < HEADER {
        return;
    }
    if u64_at(bytes, 32) <= u64::from(u32::MAX) {
        let body = (bytes.len() - HEADER) as u64;
        bytes[32..40].copy_from_slice(&body.to_le_bytes());
    }
    put_crc(bytes, 40, HEADER..bytes.len());
    put_crc(bytes, 60, 0..60);
}

/// Writes the CRC32C of `bytes[over]` at `at`.
fn put_crc(bytes: &mut [u8], at: usize, over: std::ops::Range<usize>) {
    let crc = crc32c(&bytes[over]);
    bytes[at..at + 4].copy_from_slice(&crc.to_le_bytes());
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
