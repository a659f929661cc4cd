//! Reading a shard's log back: recovery and inspection.
//!
//! Plain blocking I/O: recovery runs before the shard serves, one segment in
//! memory at a time. The rules for what ends the log and what is corruption
//! are in [`crate::wal`]; this module applies them:
//!
//! 1. A valid record continues the log when it chains to the last one read
//!    (its previous-epoch field names it), or when the gap it leaves is
//!    covered by the snapshot the replay starts from (`prev <= after`).
//! 2. At the first position that is not such a record (zeros followed by
//!    non-zero bytes, a cut-off or checksum-failing record, a chain break)
//!    every later position of the log is scanned for valid records. If one
//!    says an epoch after the last good record was already durable, the
//!    damage is corruption: [`Error::Corrupt`] with the file and offset.
//!    Otherwise the rest of the log is a torn tail: reported as a
//!    [`Truncation`] (applied by [`recover`]).
//! 3. Zeros up to the end of a segment end that segment cleanly.

use super::format::{HeaderCheck, RECORD_HEADER_BYTES, RecordHeader, SegmentHeader, SegmentHeaderError, decode_body};
use super::{ALIGNMENT_MIN, Segment, align_up, segments};
use crate::FORMAT_VERSION;
use crate::crc::crc32c;
use crate::dir::DataDir;
use crate::error::{Error, Result};
use crate::fsutil;
use std::fmt;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use styx_engine::{Batch, Epoch, ShardId};

/// A torn tail found at the end of a shard's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Truncation {
    /// The segment holding the first damaged position.
    pub path: PathBuf,
    /// The log is cut here (a record boundary; 0 removes the segment).
    pub offset: u64,
    /// What was found there.
    pub reason: String,
    /// Bytes of `path` at and after `offset` (preallocated zeros included).
    pub bytes_dropped: u64,
    /// Valid but unsynced records after the damage, dropped with it.
    pub records_dropped: u64,
    /// Later segments dropped whole.
    pub files_removed: Vec<PathBuf>,
}

impl fmt::Display for Truncation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "torn tail at byte {} of {}: {}; {} bytes",
            self.offset,
            self.path.display(),
            self.reason,
            self.bytes_dropped
        )?;
        if self.records_dropped > 0 {
            write!(f, " and {} unsynced later records", self.records_dropped)?;
        }
        if !self.files_removed.is_empty() {
            write!(f, " and {} later segments", self.files_removed.len())?;
        }
        f.write_str(" dropped")
    }
}

/// What a record position held, for inspection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordInfo {
    pub segment: usize,
    pub offset: u64,
    pub header: RecordHeader,
    pub txns: u32,
}

struct Current {
    index: usize,
    /// The segment's bytes, or the first of them when every byte after
    /// those is known to be zero (`len` says how many there are in all).
    bytes: Vec<u8>,
    /// The segment's length: a prefix `bytes` is padded with zeros on
    /// demand, so a record reaching past it reads as it would in the file.
    len: u64,
    alignment: u64,
    pos: u64,
}

impl Current {
    /// Makes `bytes[..upto]` readable (`upto <= len`).
    fn pad_to(&mut self, upto: u64) {
        debug_assert!(upto <= self.len);
        if upto as usize > self.bytes.len() {
            self.bytes.resize(upto as usize, 0);
        }
    }
}

/// Bytes read at a time by [`read_used`].
const READ_CHUNK: usize = 1 << 20;

/// A segment's bytes up to the last chunk of [`READ_CHUNK`] that holds a
/// nonzero byte, and the file's length, when the rest is all zeros (it is
/// checked through one reused buffer); else the whole file. A log segment
/// is preallocated, so most of a recent one is zeros: this reads it without
/// allocating (and faulting in) the whole segment for them.
fn read_used(path: &Path) -> std::io::Result<(Vec<u8>, u64)> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut bytes = Vec::new();
    // Chunks into `bytes` until one is all zeros (or the file ends).
    let mut len = loop {
        let start = bytes.len();
        let n = (&mut file).take(READ_CHUNK as u64).read_to_end(&mut bytes)?;
        if n == 0 {
            let len = bytes.len() as u64;
            return Ok((bytes, len));
        }
        if all_zero(&bytes[start..]) {
            bytes.truncate(start);
            break (start + n) as u64;
        }
    };
    // The rest, a chunk at a time through one buffer: all zeros?
    let mut chunk = Vec::with_capacity(READ_CHUNK);
    loop {
        chunk.clear();
        let n = (&mut file).take(READ_CHUNK as u64).read_to_end(&mut chunk)?;
        if n == 0 {
            return Ok((bytes, len));
        }
        if !all_zero(&chunk) {
            // Data after zeros: damage, examined on the whole file.
            let bytes = std::fs::read(path)?;
            let len = bytes.len() as u64;
            return Ok((bytes, len));
        }
        len += n as u64;
    }
}

/// Iterates a shard's batches with epochs after a given one, oldest first.
/// After the last batch, [`Reader::truncation`] tells whether a torn tail
/// was found.
pub struct Reader {
    shard: ShardId,
    after: Epoch,
    segments: Vec<Segment>,
    next: usize,
    current: Option<Current>,
    last: Option<Epoch>,
    truncation: Option<Truncation>,
    done: bool,
    /// Decode bodies of records `<= after` too (inspection).
    decode_all: bool,
    records: Vec<RecordInfo>,
    keep_records: bool,
    /// Accept any predecessor for the first record read (inspection).
    lenient_start: bool,
    /// The segments' bytes when reading from memory (fuzzing, tests).
    memory: Option<Vec<Vec<u8>>>,
}

impl fmt::Debug for Reader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reader")
            .field("shard", &self.shard)
            .field("after", &self.after)
            .field("last", &self.last)
            .finish()
    }
}

impl Reader {
    /// Reads `shard`'s log in `wal_dir`, yielding batches with epochs
    /// `> after` (those `<= after` are covered by the snapshot the replay
    /// starts from). Segments wholly `<= after` are not read.
    pub fn open(wal_dir: &Path, shard: ShardId, after: Epoch) -> Result<Reader> {
        let mut segs = segments(wal_dir, shard)?;
        // Segment k holds epochs below segment k+1's first epoch.
        let skip = segs
            .windows(2)
            .take_while(|pair| pair[1].first_epoch <= after.saturating_add(1))
            .count();
        segs.drain(..skip);
        Ok(Reader {
            shard,
            after,
            segments: segs,
            next: 0,
            current: None,
            last: None,
            truncation: None,
            done: false,
            decode_all: false,
            records: Vec::new(),
            keep_records: false,
            lenient_start: false,
            memory: None,
        })
    }

    /// Reads a log from memory as [`Reader::open`] reads `shard`'s segment
    /// files: `segments` are each segment's first epoch (its file name) and
    /// bytes, oldest first. For fuzzing and tests.
    pub fn from_memory(shard: ShardId, after: Epoch, segments: Vec<(Epoch, Vec<u8>)>) -> Reader {
        let (names, bytes): (Vec<Segment>, Vec<Vec<u8>>) = segments
            .into_iter()
            .map(|(first_epoch, bytes)| {
                let segment = Segment {
                    path: PathBuf::from(super::segment_name(shard, first_epoch)),
                    shard,
                    first_epoch,
                };
                (segment, bytes)
            })
            .unzip();
        assert!(
            names.windows(2).all(|w| w[0].first_epoch < w[1].first_epoch),
            "segments in order"
        );
        Reader {
            shard,
            after,
            segments: names,
            next: 0,
            current: None,
            last: None,
            truncation: None,
            done: false,
            decode_all: false,
            records: Vec::new(),
            keep_records: false,
            lenient_start: false,
            memory: Some(bytes),
        }
    }

    /// The bytes of segment `index`.
    fn read_segment(&self, index: usize) -> Result<Vec<u8>> {
        match &self.memory {
            Some(m) => Ok(m[index].clone()),
            None => {
                let path = &self.segments[index].path;
                std::fs::read(path).map_err(Error::io("read", path))
            }
        }
    }

    /// Reads every segment (or only `only`), decodes every record and keeps
    /// a [`RecordInfo`] per record. The first record read may follow any
    /// epoch (older segments may have been removed).
    pub(crate) fn for_inspection(wal_dir: &Path, shard: ShardId, after: Epoch, only: Option<&Path>) -> Result<Reader> {
        let mut r = Reader::open(wal_dir, shard, 0)?;
        if let Some(only) = only {
            r.segments.retain(|s| s.path == only);
        }
        r.after = after;
        r.decode_all = true;
        r.keep_records = true;
        r.lenient_start = true;
        Ok(r)
    }

    pub(crate) fn take_records(&mut self) -> Vec<RecordInfo> {
        std::mem::take(&mut self.records)
    }

    pub(crate) fn segment_list(&self) -> &[Segment] {
        &self.segments
    }

    /// The torn tail found, once the iterator has ended.
    pub fn truncation(&self) -> Option<&Truncation> {
        self.truncation.as_ref()
    }

    /// The last epoch of a valid record read (`None`: no record read).
    pub fn last_epoch(&self) -> Option<Epoch> {
        self.last
    }

    fn load(&mut self, index: usize) -> Result<Option<Current>> {
        let (bytes, len) = match &self.memory {
            Some(m) => (m[index].clone(), m[index].len() as u64),
            None => {
                let path = &self.segments[index].path;
                read_used(path).map_err(Error::io("read", path))?
            }
        };
        let seg = &self.segments[index];
        let header = match SegmentHeader::decode(&bytes) {
            Ok(h) => h,
            Err(SegmentHeaderError::Uninitialised) => return Ok(None),
            Err(SegmentHeaderError::Magic(found)) => {
                return Err(Error::Magic {
                    path: seg.path.clone(),
                    what: "log segment",
                    found,
                });
            }
            Err(SegmentHeaderError::Version(v)) => {
                return Err(Error::Version {
                    path: seg.path.clone(),
                    what: "log segment",
                    found: u32::from(v),
                    expected: u32::from(FORMAT_VERSION),
                });
            }
            Err(SegmentHeaderError::Checksum) => {
                return Err(Error::corrupt(
                    &seg.path,
                    0,
                    "the segment header checksum does not match",
                ));
            }
            Err(SegmentHeaderError::Invalid(why)) => return Err(Error::corrupt(&seg.path, 0, why)),
        };
        if header.shard != seg.shard || header.first_epoch != seg.first_epoch {
            return Err(Error::corrupt(
                &seg.path,
                0,
                format!(
                    "the header says shard {} from epoch {}, the file name shard {} from epoch {}",
                    header.shard, header.first_epoch, seg.shard, seg.first_epoch
                ),
            ));
        }
        let alignment = u64::from(header.alignment);
        Ok(Some(Current {
            index,
            bytes,
            len,
            alignment,
            pos: alignment,
        }))
    }

    fn step(&mut self) -> Result<Option<Batch>> {
        loop {
            if self.done {
                return Ok(None);
            }
            let Some(cur) = self.current.as_mut() else {
                if self.next == self.segments.len() {
                    self.done = true;
                    return Ok(None);
                }
                let index = self.next;
                self.next += 1;
                match self.load(index)? {
                    Some(c) => self.current = Some(c),
                    None => {
                        self.damaged(index, 0, 0, "the segment header was never written".into())?;
                    }
                }
                continue;
            };
            let index = cur.index;
            let pos = cur.pos;
            let len = cur.len;
            if pos >= len {
                self.current = None;
                continue;
            }
            cur.pad_to(len.min(pos + RECORD_HEADER_BYTES as u64));
            let slot = &cur.bytes[pos as usize..len.min(pos + RECORD_HEADER_BYTES as u64) as usize];
            let header = match RecordHeader::check(slot) {
                HeaderCheck::Zero => {
                    if all_zero(&cur.bytes[pos as usize..]) {
                        self.current = None;
                        continue;
                    }
                    let alignment = cur.alignment;
                    self.damaged(
                        index,
                        pos,
                        alignment,
                        "zeros where a record should start, data after them".into(),
                    )?;
                    continue;
                }
                HeaderCheck::Invalid(why) => {
                    let alignment = cur.alignment;
                    self.damaged(index, pos, alignment, why.into())?;
                    continue;
                }
                HeaderCheck::Version(v) => {
                    return Err(Error::Version {
                        path: self.segments[index].path.clone(),
                        what: "log record",
                        found: u32::from(v),
                        expected: u32::from(FORMAT_VERSION),
                    });
                }
                HeaderCheck::Valid(h) => h,
            };
            let path = &self.segments[index].path;
            let end = pos + header.record_len();
            if header.record_len() > super::RECORD_BYTES_MAX {
                return Err(Error::corrupt(
                    path,
                    pos,
                    format!("a record of {} bytes exceeds the limit", header.record_len()),
                ));
            }
            if end > len {
                let alignment = cur.alignment;
                self.damaged(
                    index,
                    pos,
                    alignment,
                    "the record is cut off by the end of the file".into(),
                )?;
                continue;
            }
            let cur = self.current.as_mut().expect("a segment is open");
            cur.pad_to(end);
            let body = &cur.bytes[(pos as usize + RECORD_HEADER_BYTES)..end as usize];
            if crc32c(body) != header.body_crc {
                let alignment = cur.alignment;
                self.damaged(index, pos, alignment, "the record body checksum does not match".into())?;
                continue;
            }
            // The header and body are intact: anything wrong now is not a
            // torn write but a contradiction, so an error.
            let first = self.segments[index].first_epoch;
            let limit = self.segments.get(index + 1).map(|s| s.first_epoch);
            if header.shard != self.shard {
                return Err(Error::corrupt(path, pos, format!("a record of shard {}", header.shard)));
            }
            if header.epoch < first || limit.is_some_and(|l| header.epoch >= l) {
                return Err(Error::corrupt(
                    path,
                    pos,
                    format!(
                        "a record of epoch {} in a segment for epochs {first}..{}",
                        header.epoch,
                        limit.map_or("".into(), |l| l.to_string())
                    ),
                ));
            }
            if header.prev_epoch >= header.epoch || header.synced_epoch > header.prev_epoch {
                return Err(Error::corrupt(
                    path,
                    pos,
                    format!(
                        "record of epoch {} names previous epoch {} and synced epoch {}",
                        header.epoch, header.prev_epoch, header.synced_epoch
                    ),
                ));
            }
            if let Some(last) = self.last
                && header.epoch <= last
            {
                return Err(Error::corrupt(
                    path,
                    pos,
                    format!("a record of epoch {} after epoch {last}", header.epoch),
                ));
            }
            let chained = self.last == Some(header.prev_epoch)
                || header.prev_epoch <= self.after
                || (self.lenient_start && self.last.is_none());
            if !chained {
                if self.last.is_none() {
                    return Err(Error::Gap {
                        shard: self.shard,
                        after: self.after,
                        epoch: header.epoch,
                        prev: header.prev_epoch,
                    });
                }
                let alignment = cur.alignment;
                let why = format!(
                    "records are missing: epoch {} follows epoch {} but names epoch {} as its predecessor",
                    header.epoch,
                    self.last.expect("some"),
                    header.prev_epoch
                );
                self.damaged(index, pos, alignment, why)?;
                continue;
            }
            let wanted = header.epoch > self.after || self.decode_all;
            let batch = if wanted {
                Some(decode_body(&header, body).map_err(|why| Error::corrupt(path, pos, why))?)
            } else {
                None
            };
            if self.keep_records {
                self.records.push(RecordInfo {
                    segment: index,
                    offset: pos,
                    header,
                    txns: batch.as_ref().map_or(0, |b| b.transactions().count() as u32),
                });
            }
            cur.pos = pos + align_up(header.record_len(), cur.alignment);
            self.last = Some(header.epoch);
            if header.epoch > self.after {
                return Ok(batch);
            }
        }
    }

    /// The log cannot continue at `pos` of segment `index`: decide between
    /// corruption (an error) and a torn tail (recorded; the iterator ends).
    fn damaged(&mut self, index: usize, pos: u64, alignment: u64, reason: String) -> Result<()> {
        let path = self.segments[index].path.clone();
        // The last epoch that may be lost: anything after the last good one.
        let good = self.last.unwrap_or(self.segments[index].first_epoch.saturating_sub(1));
        let mut later = 0u64;
        let mut bytes_dropped = 0;
        for i in index..self.segments.len() {
            let seg = &self.segments[i];
            let bytes = if i == index {
                match self.current.take() {
                    // The whole segment, not a prefix (reads it again).
                    Some(c) if c.index == i && c.bytes.len() as u64 == c.len => c.bytes,
                    _ => self.read_segment(i)?,
                }
            } else {
                self.read_segment(i)?
            };
            if i == index {
                bytes_dropped = (bytes.len() as u64).saturating_sub(pos);
            }
            let step = if alignment > 0 && i == index {
                alignment
            } else {
                ALIGNMENT_MIN
            };
            let start = if i == index { pos.max(step) } else { ALIGNMENT_MIN };
            for found in scan(&bytes, start, step) {
                if found.synced_epoch > good {
                    self.done = true;
                    return Err(Error::corrupt(
                        &path,
                        pos,
                        format!(
                            "{reason}; this is no torn tail: the record of epoch {} at byte {} of {} was written after epoch {} was durable",
                            found.epoch,
                            found.at,
                            seg.path.display(),
                            found.synced_epoch
                        ),
                    ));
                }
                later += 1;
            }
        }
        self.truncation = Some(Truncation {
            path,
            offset: pos,
            reason,
            bytes_dropped,
            records_dropped: later,
            files_removed: self.segments[index + 1..].iter().map(|s| s.path.clone()).collect(),
        });
        self.current = None;
        self.done = true;
        Ok(())
    }
}

impl Iterator for Reader {
    type Item = Result<Batch>;

    fn next(&mut self) -> Option<Result<Batch>> {
        match self.step() {
            Ok(Some(b)) => Some(Ok(b)),
            Ok(None) => None,
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// A valid record met while scanning past damage.
struct Found {
    at: u64,
    epoch: Epoch,
    synced_epoch: Epoch,
}

/// Valid records (header and body checksums hold) at multiples of `step`
/// from `start`, skipping over each one found. An intact header of another
/// version counts as data that claims to be durable: it is no torn write.
fn scan(bytes: &[u8], start: u64, step: u64) -> Vec<Found> {
    let mut out = Vec::new();
    let mut at = start;
    let len = bytes.len() as u64;
    while at + RECORD_HEADER_BYTES as u64 <= len {
        let slot = &bytes[at as usize..at as usize + RECORD_HEADER_BYTES];
        if slot[..4] == super::RECORD_MAGIC {
            match RecordHeader::check(slot) {
                HeaderCheck::Valid(h) => {
                    let end = at + h.record_len();
                    if end <= len && crc32c(&bytes[(at as usize + RECORD_HEADER_BYTES)..end as usize]) == h.body_crc {
                        out.push(Found {
                            at,
                            epoch: h.epoch,
                            synced_epoch: h.synced_epoch,
                        });
                        at = align_up(end, step);
                        continue;
                    }
                }
                HeaderCheck::Version(_) => out.push(Found {
                    at,
                    epoch: 0,
                    synced_epoch: Epoch::MAX,
                }),
                HeaderCheck::Zero | HeaderCheck::Invalid(_) => {}
            }
        }
        at += step;
    }
    out
}

/// A shard's log after recovery.
#[derive(Debug)]
pub struct Recovered {
    /// The batches to replay, epochs after the `after` given, oldest first.
    pub batches: Vec<Batch>,
    /// Where writing resumes; pass it to [`super::Writer::open`].
    pub tail: Tail,
}

impl Recovered {
    /// The log as recovery ([`styx_engine::recovery`]) reads it, and the
    /// tail to open the writer with.
    pub fn into_log(self) -> (styx_engine::recovery::Log, Tail) {
        let log = styx_engine::recovery::Log {
            shard: self.tail.shard,
            batches: self.batches,
            last_epoch: self.tail.last_epoch,
        };
        (log, self.tail)
    }
}

/// The end of a recovered log: only [`recover`] makes one, so a writer
/// opened with it never writes over a log that was not read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tail {
    shard: ShardId,
    last_epoch: Epoch,
    truncation: Option<Truncation>,
}

impl Tail {
    pub fn shard(&self) -> ShardId {
        self.shard
    }

    /// The larger of the `after` given to [`recover`] and the last epoch in
    /// the log: the writer appends epochs after it.
    pub fn last_epoch(&self) -> Epoch {
        self.last_epoch
    }

    /// The torn tail that recovery cut, if any (report it to the operator).
    pub fn truncation(&self) -> Option<&Truncation> {
        self.truncation.as_ref()
    }
}

/// Whether `bytes` are all zero (a segment's preallocated rest: 64 MiB
/// read at every start, so words at a time, not bytes).
fn all_zero(bytes: &[u8]) -> bool {
    let (words, rest) = bytes.as_chunks::<64>();
    words.iter().all(|w| {
        w.as_chunks::<8>()
            .0
            .iter()
            .fold(0u64, |acc, b| acc | u64::from_ne_bytes(*b))
            == 0
    }) && rest.iter().all(|b| *b == 0)
}

/// Reads `shard`'s log after epoch `after` (the snapshot's `log_after`, 0
/// without a snapshot), and removes a torn tail durably (cutting the
/// damaged segment, removing later ones), so that a writer can start.
/// Corruption is an error, and then nothing is changed.
pub fn recover(dir: &DataDir, shard: ShardId, after: Epoch) -> Result<Recovered> {
    let wal_dir = dir.wal_dir();
    let recovered = read(&wal_dir, shard, after)?;
    if let Some(t) = &recovered.tail.truncation {
        apply(&wal_dir, t)?;
    }
    Ok(recovered)
}

/// [`recover`] of several shards' logs, `(shard, after)` each, read at the
/// same time on a thread each (every log is read before any shard starts,
/// and a log is mostly a preallocated segment to check). Torn tails are cut
/// only once every log read without error: an error changes nothing.
pub fn recover_all(dir: &DataDir, shards: &[(ShardId, Epoch)]) -> Result<Vec<Recovered>> {
    let wal_dir = dir.wal_dir();
    let read: Vec<Result<Recovered>> = std::thread::scope(|scope| {
        let readers: Vec<_> = shards
            .iter()
            .map(|&(shard, after)| {
                let wal_dir = &wal_dir;
                std::thread::Builder::new()
                    .name(format!("log-read-{shard}"))
                    .spawn_scoped(scope, move || read(wal_dir, shard, after))
            })
            .collect();
        readers
            .into_iter()
            .zip(shards)
            .map(|(spawned, &(shard, after))| match spawned {
                Ok(handle) => handle.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                // No thread to be had: read it here.
                Err(_) => read(&wal_dir, shard, after),
            })
            .collect()
    });
    let recovered: Vec<Recovered> = read.into_iter().collect::<Result<_>>()?;
    for r in &recovered {
        if let Some(t) = &r.tail.truncation {
            apply(&wal_dir, t)?;
        }
    }
    Ok(recovered)
}

/// Reads `shard`'s log after `after`; the torn tail found is in the tail,
/// not cut yet.
fn read(wal_dir: &Path, shard: ShardId, after: Epoch) -> Result<Recovered> {
    let mut reader = Reader::open(wal_dir, shard, after)?;
    let mut batches = Vec::new();
    for b in reader.by_ref() {
        batches.push(b?);
    }
    let truncation = reader.truncation.take();
    Ok(Recovered {
        batches,
        tail: Tail {
            shard,
            last_epoch: reader.last.unwrap_or(0).max(after),
            truncation,
        },
    })
}

fn apply(wal_dir: &Path, t: &Truncation) -> Result<()> {
    for p in &t.files_removed {
        fsutil::remove(p)?;
    }
    if t.offset == 0 {
        fsutil::remove(&t.path)?;
    } else {
        let f = OpenOptions::new()
            .write(true)
            .open(&t.path)
            .map_err(Error::io("open", &t.path))?;
        f.set_len(t.offset).map_err(Error::io("truncate", &t.path))?;
        f.sync_all().map_err(Error::io("fsync", &t.path))?;
    }
    fsutil::sync_dir(wal_dir)
}

#[cfg(test)]
mod tests {
    #[test]
    fn all_zero_sees_any_byte_set() {
        let mut b = vec![0u8; 64 * 5 + 13];
        assert!(super::all_zero(&b));
        assert!(super::all_zero(&[]));
        for at in [0, 7, 63, 64, 200, 64 * 5, 64 * 5 + 12] {
            b[at] = 1;
            assert!(!super::all_zero(&b), "byte {at}");
            assert!(super::all_zero(&b[at + 1..]), "after byte {at}");
            b[at] = 0;
        }
    }
}
