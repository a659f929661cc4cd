//! The input log: each shard's epoch batches, appended and made durable
//! once per epoch (group commit), read back at recovery.
//!
//! Replaying the batches of an epoch on every shard reproduces its state and
//! replies, so this log is the only thing that must be durable before a
//! reply leaves. Snapshots only shorten the replay.
//!
//! # Files
//!
//! Each shard has its own sequence of segment files in `DIR/wal/`, named
//! `wal-<shard:4>-<first epoch:20>.log`. A segment is preallocated
//! (`fallocate`, [`SEGMENT_BYTES_DEFAULT`], and by default written with
//! zeros once, see [`Options::zero_fill`]) so that appends neither grow the
//! file nor convert extents; its unwritten rest reads as zeros. The writer
//! prepares the next segment in the background as `wal-<shard:4>-spare.tmp`
//! (never read; a writer that opens starts its first segment with the one
//! its predecessor left, if whole, instead of writing a new one). A record
//! that does not fit starts a new segment named after its epoch. Every record of a segment has
//! an epoch at least its first epoch and below the next segment's, so the
//! names alone tell which segments a snapshot covers
//! ([`remove_through`]).
//!
//! # Segment header (the segment's first alignment unit; little-endian)
//!
//! | offset | bytes | field                                                  |
//! |-------:|------:|--------------------------------------------------------|
//! | 0      | 8     | magic `"STYXWAL\0"`                                    |
//! | 8      | 2     | format version ([`crate::FORMAT_VERSION`])             |
//! | 10     | 2     | shard                                                  |
//! | 12     | 4     | alignment: records start at multiples of it            |
//! | 16     | 8     | first epoch (equals the one in the file name)          |
//! | 24     | 8     | capacity: preallocated bytes at creation               |
//! | 32     | 28    | zero                                                   |
//! | 60     | 4     | CRC32C of bytes 0..60                                  |
//!
//! # Record (at a multiple of the alignment; zero-padded to the next one)
//!
//! | offset | bytes | field                                                  |
//! |-------:|------:|--------------------------------------------------------|
//! | 0      | 4     | magic `"STXR"`                                         |
//! | 4      | 2     | format version                                         |
//! | 6      | 2     | shard                                                  |
//! | 8      | 8     | epoch                                                  |
//! | 16     | 8     | previous epoch: the record written before this one (0: none) |
//! | 24     | 8     | synced epoch: the highest epoch durable when written   |
//! | 32     | 4     | body length in bytes                                   |
//! | 36     | 4     | CRC32C of the body                                     |
//! | 40     | 4     | zero                                                   |
//! | 44     | 4     | CRC32C of bytes 0..44                                  |
//! | 48     | n     | body                                                   |
//!
//! Body:
//!
//! | bytes | field                                                         |
//! |------:|---------------------------------------------------------------|
//! | 8     | `lc`: the sequencer counter after sealing                     |
//! | 8     | `now_us`: the epoch's timestamp                               |
//! | 4     | number of entries (the transactions, and first in a shard's   |
//! |       | first batch of a run its snapshot interval), then each one:   |
//! | 8     | tid                                                           |
//! | 2     | operator ([`OpId`](styx_engine::OpId))                        |
//! | 2     | function index                                                |
//! | 1     | address: 0 = entity, 1 = partition                            |
//! | 2 + k | entity: key length, key bytes ‖ partition: 4-byte number      |
//! | 4 + a | argument length, argument bytes                               |
//! | 1     | client: 0 = none, 1 = present (exactly-once), then:           |
//! | 24    | client id, request seq, acknowledged-below seq (u64 each)     |
//!
//! # Recovery rules
//!
//! Reading stops at the first position that does not hold a valid record
//! (zeros, a cut-off or checksum-failing record, a chain break). What comes
//! after it decides:
//!
//! - nothing, or only zeros: the log ends here; a damaged record there is a
//!   torn tail, truncated and reported ([`Truncation`]);
//! - valid records, none of which says (in its synced-epoch field) that an
//!   epoch at or after the damaged spot was already durable: unsynced
//!   writes that the device reordered; also a torn tail, truncated with them;
//! - a valid record that says the damaged spot was durable: corruption, an
//!   error naming the file and byte offset. Never skipped.
//!
//! A record whose header checksum holds but whose version differs is
//! refused, as is a segment header of another version or magic.
//!
//! # Writing
//!
//! [`Writer`] runs on the shard's glommio executor: O_DIRECT writes of whole
//! aligned records (one write per epoch), `fdatasync` in [`Writer::sync`].
//! Its methods are `async`: while a write or sync is in flight the executor
//! runs other tasks, so the log of one epoch overlaps the execution of the
//! next. A writer always starts a new segment; it never appends to a segment
//! written before a crash.

mod format;
mod reader;
mod writer;

pub use format::{
    ALIGNMENT_MAX, ALIGNMENT_MIN, RECORD_BYTES_MAX, RECORD_HEADER_BYTES, RECORD_MAGIC, RecordHeader,
    SEGMENT_HEADER_BYTES, SEGMENT_MAGIC, SegmentHeader, body_len, decode_record, encode_record,
};
pub(crate) use format::{HeaderCheck, align_up};
pub use reader::{Reader, RecordInfo, Recovered, Tail, Truncation, recover, recover_all};
pub use writer::{Stats, Writer};

use crate::dir::DataDir;
use crate::error::{Error, Result};
use crate::fsutil;
use std::path::{Path, PathBuf};
use styx_engine::{Epoch, ShardId};

/// Preallocated size of a segment.
pub const SEGMENT_BYTES_DEFAULT: u64 = 64 << 20;
/// Segments smaller than this are refused (tests use small ones to
/// exercise rollover; production wants large ones).
pub const SEGMENT_BYTES_MIN: u64 = 4 << 10;

/// When the log is made durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsyncMode {
    /// `fdatasync` once per [`Writer::sync`] (once per epoch): replies are
    /// released only for input that survives a power failure.
    Epoch,
    /// Never `fdatasync`. Unsafe: a crash of the machine loses acknowledged
    /// input. For experiments that measure everything but the disk flush.
    None,
}

/// The writer's settings.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Preallocated bytes per segment (a larger record gets a segment of
    /// its own size).
    pub segment_bytes: u64,
    pub fsync: FsyncMode,
    /// Write zeros over a new segment (in the background, before it is
    /// used) instead of leaving `fallocate`'s unwritten extents: each later
    /// append then overwrites written blocks and its `fdatasync` needs no
    /// journal commit for the extent conversion. About 10× lower sync
    /// latency on ext4 here; costs one extra write of each segment.
    pub zero_fill: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            segment_bytes: SEGMENT_BYTES_DEFAULT,
            fsync: FsyncMode::Epoch,
            zero_fill: true,
        }
    }
}

/// One segment file, as named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    pub path: PathBuf,
    pub shard: ShardId,
    pub first_epoch: Epoch,
}

/// The file name of a segment.
pub fn segment_name(shard: ShardId, first_epoch: Epoch) -> String {
    format!("wal-{shard:04}-{first_epoch:020}.log")
}

/// Parses a segment file name into `(shard, first epoch)`.
pub fn parse_segment_name(name: &str) -> Option<(ShardId, Epoch)> {
    let rest = name.strip_prefix("wal-")?.strip_suffix(".log")?;
    let (shard, epoch) = rest.split_once('-')?;
    if shard.len() != 4 || epoch.len() != 20 {
        return None;
    }
    Some((shard.parse().ok()?, epoch.parse().ok()?))
}

/// The segments of `shard` in `wal_dir`, oldest first.
pub fn segments(wal_dir: &Path, shard: ShardId) -> Result<Vec<Segment>> {
    let mut out: Vec<Segment> = fsutil::list(wal_dir)?
        .into_iter()
        .filter_map(|name| {
            let (s, first_epoch) = parse_segment_name(&name)?;
            (s == shard).then(|| Segment {
                path: wal_dir.join(&name),
                shard,
                first_epoch,
            })
        })
        .collect();
    out.sort_by_key(|s| s.first_epoch);
    Ok(out)
}

/// The shards that have segments in `wal_dir`.
pub fn shards(wal_dir: &Path) -> Result<Vec<ShardId>> {
    let mut out: Vec<ShardId> = fsutil::list(wal_dir)?
        .iter()
        .filter_map(|n| parse_segment_name(n).map(|(s, _)| s))
        .collect();
    out.dedup();
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// Removes `shard`'s segments whose records all have epochs `<= epoch`
/// (covered by a complete snapshot at `epoch`). The newest segment is always
/// kept: the writer may be appending to it. Returns the removed paths.
pub fn remove_through(dir: &DataDir, shard: ShardId, epoch: Epoch) -> Result<Vec<PathBuf>> {
    let wal_dir = dir.wal_dir();
    let segs = segments(&wal_dir, shard)?;
    let mut removed = Vec::new();
    for pair in segs.windows(2) {
        // Every record of pair[0] is older than pair[1]'s first epoch.
        if pair[1].first_epoch > epoch.saturating_add(1) {
            break;
        }
        fsutil::remove(&pair[0].path)?;
        removed.push(pair[0].path.clone());
    }
    if !removed.is_empty() {
        fsutil::sync_dir(&wal_dir)?;
    }
    Ok(removed)
}

pub(crate) fn check_options(options: &Options) {
    assert!(
        options.segment_bytes >= SEGMENT_BYTES_MIN,
        "segment_bytes {} below {SEGMENT_BYTES_MIN}",
        options.segment_bytes
    );
}

pub(crate) fn glommio_error(op: &'static str, path: &Path) -> impl FnOnce(glommio::GlommioError<()>) -> Error {
    let path = path.to_path_buf();
    move |e| Error::Io {
        op,
        path,
        source: std::io::Error::from(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_names_roundtrip_and_sort() {
        let a = segment_name(3, 9);
        let b = segment_name(3, 10);
        assert_eq!(a, "wal-0003-00000000000000000009.log");
        assert!(a < b);
        assert_eq!(parse_segment_name(&b), Some((3, 10)));
        assert_eq!(parse_segment_name("wal-3-10.log"), None);
        assert_eq!(parse_segment_name("wal-0003-00000000000000000009.log.tmp"), None);
    }
}
