//! The log writer of one shard, on that shard's glommio executor.
//!
//! Each [`Writer::append`] encodes one batch straight into a DMA buffer and
//! issues one aligned O_DIRECT write; [`Writer::sync`] issues one
//! `fdatasync` for everything appended since the last sync (group commit).
//! Both are `async`: a runtime keeps the writer in a task of its own, fed by
//! a channel of sealed batches, so that the next epoch executes while this
//! one's write and flush are in flight, and reports the returned durable
//! epoch to the engine (`Shard::log_durable`).
//!
//! Segments are prepared ahead, in a background task on the same executor:
//! created under a spare name, preallocated and (with
//! [`Options::zero_fill`]) written with zeros once, so that later appends
//! overwrite written blocks and their `fdatasync` flushes data only, with
//! no journal commit for extent conversion (measured here: p50 ~0.25 ms
//! against 2–4 ms on `fallocate`d blocks). When the current segment is full
//! the spare is renamed into place, gets its header, and the directory is
//! synced: a few ms once per segment instead of a 64 MiB write. A writer
//! that opens (a restart) starts the same way with the spare its
//! predecessor left, if it is whole, so recovery does not wait for that
//! write either.
//!
//! Invariants: epochs appended are strictly increasing and belong to the
//! writer's shard (asserted: a violation is an engine bug that would make
//! the log unreplayable); records never straddle segments; a segment's name
//! and directory entry are durable before any record in it is reported
//! durable, and its header is synced with (at the latest) its first record.

use super::format::{RECORD_HEADER_BYTES, RecordHeader, SegmentHeader, align_up, body_len, encode_record};
use super::{ALIGNMENT_MAX, ALIGNMENT_MIN, FsyncMode, Options, RECORD_BYTES_MAX, Tail, glommio_error, segments};
use crate::dir::DataDir;
use crate::error::{Error, Result};
use crate::fsutil;
use glommio::io::{Directory, DmaFile, OpenOptions};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use styx_engine::{Batch, Epoch, ShardId};

/// Counters of one writer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub records: u64,
    /// Bytes of records written, padding included.
    pub record_bytes: u64,
    /// Every byte written: records, segment headers, zero-filling.
    pub bytes: u64,
    pub fdatasyncs: u64,
    pub segments: u64,
    /// Writes of records: one per [`Writer::append_all`] call that fits
    /// its segment (more when it rolls or exceeds [`GROUP_BYTES_MAX`]).
    pub writes: u64,
}

/// The most bytes of records one write carries (a longer group is split).
pub const GROUP_BYTES_MAX: u64 = 4 << 20;

struct Open {
    file: DmaFile,
    path: PathBuf,
    alignment: u64,
    capacity: u64,
    /// Where the next record goes.
    offset: u64,
}

/// Appends one shard's batches to its log.
pub struct Writer {
    wal_dir: PathBuf,
    shard: ShardId,
    options: Options,
    segment: Open,
    /// The last epoch appended (or the epoch the writer was opened after).
    last_epoch: Epoch,
    /// The last epoch known durable.
    synced_epoch: Epoch,
    unsynced: bool,
    stats: Stats,
    /// The next segment, being prepared in the background.
    spare: Option<glommio::Task<Result<Prepared>>>,
}

/// A segment file created, preallocated and possibly zero-filled, without
/// its header yet.
struct Prepared {
    file: DmaFile,
    path: PathBuf,
    alignment: u64,
    capacity: u64,
    /// Counters of the preparation, added to the writer's when adopted.
    stats: Stats,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("shard", &self.shard)
            .field("segment", &self.segment.path)
            .field("offset", &self.segment.offset)
            .field("last_epoch", &self.last_epoch)
            .field("synced_epoch", &self.synced_epoch)
            .finish()
    }
}

impl Writer {
    /// Opens the log of `tail`'s shard for appending epochs after
    /// `tail.last_epoch()`, right after [`super::recover`]. Starts a new
    /// segment. Segments left empty by a crash beyond that epoch are
    /// removed; one that holds records is refused ([`Error::LogAhead`]).
    pub async fn open(dir: &DataDir, tail: &Tail, options: Options) -> Result<Writer> {
        let shard = tail.shard();
        let after = tail.last_epoch();
        super::check_options(&options);
        let wal_dir = dir.wal_dir();
        let mut removed = false;
        for seg in segments(&wal_dir, shard)? {
            if seg.first_epoch <= after {
                if options.fsync == FsyncMode::Epoch {
                    // Recovery read its records, and what runs next builds
                    // on them: the last writer may have died with some
                    // written but not synced (a process crash leaves them
                    // in the page cache), so they are made durable before
                    // anything is written after them (a power loss must not
                    // take them and keep later epochs).
                    std::fs::File::open(&seg.path)
                        .and_then(|f| f.sync_data())
                        .map_err(Error::io("fdatasync", &seg.path))?;
                }
                continue;
            }
            if has_records(&seg.path)? {
                return Err(Error::LogAhead {
                    shard,
                    path: seg.path,
                    epoch: seg.first_epoch,
                    after,
                });
            }
            fsutil::remove(&seg.path)?;
            removed = true;
        }
        if removed && options.fsync == FsyncMode::Epoch {
            fsutil::sync_dir(&wal_dir)?;
        }
        let spare = spare_path(&wal_dir, shard);
        // The last writer's spare starts the log if it is whole: preparing
        // a segment writes 64 MiB of zeros, and a restart should not wait
        // for that before serving.
        let reused = match spare.exists() {
            true => reuse_spare(spare, options).await?,
            false => None,
        };
        let mut stats = Stats::default();
        let first = match reused {
            Some(spare) => spare,
            None => prepare(wal_dir.join(super::segment_name(shard, after + 1)), 0, options).await?,
        };
        let segment = install(first, &wal_dir, shard, after + 1, &options, &mut stats).await?;
        let mut w = Writer {
            wal_dir,
            shard,
            options,
            segment,
            last_epoch: after,
            synced_epoch: after,
            unsynced: false,
            stats,
            spare: None,
        };
        w.prepare_spare();
        Ok(w)
    }

    /// Writes `batch` as one record (one aligned write). Not durable until
    /// [`Writer::sync`] returns an epoch `>= batch.epoch`.
    ///
    /// # Panics
    /// If `batch` is of another shard or not after the last epoch appended.
    pub async fn append(&mut self, batch: &Batch) -> Result<()> {
        self.append_all(std::slice::from_ref(batch)).await
    }

    /// Writes `batches` (consecutive epochs, in order) as one record each,
    /// in as few writes as the segments allow: every record that fits the
    /// current segment goes out in one aligned write of at most
    /// [`GROUP_BYTES_MAX`] (a record stays aligned on its own, so the
    /// format is the same as one write per record). This is the group
    /// commit: a log that fell behind catches up with one write and one
    /// `fdatasync` for everything queued, instead of one write per epoch.
    ///
    /// # Panics
    /// As [`Writer::append`], for any of `batches`.
    pub async fn append_all(&mut self, batches: &[Batch]) -> Result<()> {
        let mut next = 0;
        while next < batches.len() {
            let alignment = self.segment.alignment;
            let room = self.segment.capacity - self.segment.offset;
            let (mut end, mut disk_total, mut prev) = (next, 0u64, self.last_epoch);
            while end < batches.len() {
                let batch = &batches[end];
                assert_eq!(
                    batch.shard, self.shard,
                    "batch of shard {} on the log of shard {}",
                    batch.shard, self.shard
                );
                assert!(
                    batch.epoch > prev,
                    "epoch {} appended after epoch {}",
                    batch.epoch,
                    prev
                );
                let len = RECORD_HEADER_BYTES as u64 + body_len(batch);
                if len > RECORD_BYTES_MAX {
                    return Err(Error::RecordTooLarge {
                        bytes: len,
                        max: RECORD_BYTES_MAX,
                    });
                }
                let disk = align_up(len, alignment);
                if disk_total + disk > room || (end > next && disk_total + disk > GROUP_BYTES_MAX) {
                    break;
                }
                disk_total += disk;
                prev = batch.epoch;
                end += 1;
            }
            if end == next {
                // Not even the first fits: a new segment with room for it.
                let batch = &batches[next];
                self.roll(batch.epoch, RECORD_HEADER_BYTES as u64 + body_len(batch))
                    .await?;
                continue;
            }
            let seg = &mut self.segment;
            assert!(seg.offset.is_multiple_of(alignment) && seg.offset + disk_total <= seg.capacity);
            let mut buf = seg.file.alloc_dma_buffer(disk_total as usize);
            let bytes = buf.as_bytes_mut();
            let mut at = 0usize;
            let mut prev = self.last_epoch;
            for batch in &batches[next..end] {
                let body = body_len(batch);
                let len = (RECORD_HEADER_BYTES as u64 + body) as usize;
                let disk = align_up(len as u64, alignment) as usize;
                encode_record(batch, prev, self.synced_epoch, body, &mut bytes[at..at + len]);
                bytes[at + len..at + disk].fill(0);
                at += disk;
                prev = batch.epoch;
            }
            let written = seg
                .file
                .write_at(buf, seg.offset)
                .await
                .map_err(glommio_error("write", &seg.path))?;
            if written as u64 != disk_total {
                return Err(Error::Io {
                    op: "write",
                    path: seg.path.clone(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::WriteZero,
                        format!("short write: {written} of {disk_total} bytes at offset {}", seg.offset),
                    ),
                });
            }
            seg.offset += disk_total;
            self.last_epoch = prev;
            self.unsynced = true;
            self.stats.records += (end - next) as u64;
            self.stats.record_bytes += disk_total;
            self.stats.bytes += disk_total;
            self.stats.writes += 1;
            next = end;
        }
        Ok(())
    }

    /// Makes every appended record durable (one `fdatasync`, or none with
    /// [`FsyncMode::None`]) and returns the last durable epoch. A failure is
    /// fatal: stop and recover, do not retry.
    pub async fn sync(&mut self) -> Result<Epoch> {
        if self.unsynced {
            if self.options.fsync == FsyncMode::Epoch {
                let seg = &self.segment;
                seg.file
                    .fdatasync()
                    .await
                    .map_err(glommio_error("fdatasync", &seg.path))?;
                self.stats.fdatasyncs += 1;
            }
            self.synced_epoch = self.last_epoch;
            self.unsynced = false;
        }
        Ok(self.synced_epoch)
    }

    /// Syncs and closes the current segment.
    pub async fn close(mut self) -> Result<Epoch> {
        let epoch = self.sync().await?;
        // Cancel the spare's preparation; the next writer removes the file.
        drop(self.spare.take());
        let path = self.segment.path.clone();
        self.segment.file.close().await.map_err(glommio_error("close", &path))?;
        Ok(epoch)
    }

    pub fn shard(&self) -> ShardId {
        self.shard
    }

    /// The last epoch appended.
    pub fn last_epoch(&self) -> Epoch {
        self.last_epoch
    }

    /// The last epoch made durable.
    pub fn synced_epoch(&self) -> Epoch {
        self.synced_epoch
    }

    /// The segment being written.
    pub fn segment_path(&self) -> &Path {
        &self.segment.path
    }

    /// The O_DIRECT alignment of the current segment's device.
    pub fn alignment(&self) -> u64 {
        self.segment.alignment
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Closes the full segment (after making its records durable) and
    /// starts one named `epoch` with room for a record of `len` bytes: the
    /// spare when it is big enough.
    async fn roll(&mut self, epoch: Epoch, len: u64) -> Result<()> {
        if self.unsynced && self.options.fsync == FsyncMode::Epoch {
            let seg = &self.segment;
            seg.file
                .fdatasync()
                .await
                .map_err(glommio_error("fdatasync", &seg.path))?;
            self.stats.fdatasyncs += 1;
            self.synced_epoch = self.last_epoch;
            self.unsynced = false;
        }
        let path = self.wal_dir.join(super::segment_name(self.shard, epoch));
        let prepared = match self.spare.take() {
            Some(task) => {
                let spare = task.await?;
                if spare.capacity >= spare.alignment + len {
                    spare
                } else {
                    // Too small for this record: it gets a segment of its own.
                    spare
                        .file
                        .remove()
                        .await
                        .map_err(glommio_error("remove", &spare.path))?;
                    spare.file.close().await.map_err(glommio_error("close", &spare.path))?;
                    prepare(path, len, self.options).await?
                }
            }
            None => prepare(path, len, self.options).await?,
        };
        let next = install(
            prepared,
            &self.wal_dir,
            self.shard,
            epoch,
            &self.options,
            &mut self.stats,
        )
        .await?;
        let old = std::mem::replace(&mut self.segment, next);
        old.file.close().await.map_err(glommio_error("close", &old.path))?;
        self.prepare_spare();
        Ok(())
    }

    /// Starts preparing the next segment in the background.
    fn prepare_spare(&mut self) {
        assert!(self.spare.is_none());
        let path = spare_path(&self.wal_dir, self.shard);
        self.spare = Some(glommio::spawn_local(prepare(path, 0, self.options)));
    }
}

/// The name a segment is prepared under before it is used.
fn spare_path(wal_dir: &Path, shard: ShardId) -> PathBuf {
    wal_dir.join(format!("wal-{shard:04}-spare.tmp"))
}

/// Creates and preallocates a segment file at `path` with room for a
/// record of `record_len` bytes, zero-filled if the options say so (and
/// then synced, so that the extent conversions are committed before the
/// segment takes records).
async fn prepare(path: PathBuf, record_len: u64, options: Options) -> Result<Prepared> {
    let mut stats = Stats::default();
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .dma_open(&path)
        .await
        .map_err(glommio_error("create", &path))?;
    let alignment = file.alignment();
    assert!(
        (ALIGNMENT_MIN..=ALIGNMENT_MAX).contains(&alignment) && alignment.is_power_of_two(),
        "O_DIRECT alignment {alignment} of {}",
        path.display()
    );
    let capacity = align_up(options.segment_bytes.max(alignment + record_len), alignment);
    file.pre_allocate(capacity, false)
        .await
        .map_err(glommio_error("preallocate", &path))?;
    if options.zero_fill {
        zero_fill(&file, &path, capacity, &mut stats).await?;
        if options.fsync == FsyncMode::Epoch {
            file.fdatasync().await.map_err(glommio_error("fdatasync", &path))?;
            stats.fdatasyncs += 1;
        }
    }
    Ok(Prepared {
        file,
        path,
        alignment,
        capacity,
        stats,
    })
}

/// The spare segment a previous writer left at `path`, if it has the full
/// length `options` give a segment; otherwise it is removed. A spare only
/// ever holds zeros: it is created, preallocated and zero-filled under its
/// name, and gets a header only once renamed into place, so one of the full
/// length reads as zeros whether or not its preparation finished (blocks
/// the zero fill did not reach are preallocated, unwritten: they read as
/// zeros too, and only cost their first sync an extent conversion).
async fn reuse_spare(path: PathBuf, options: Options) -> Result<Option<Prepared>> {
    let file = OpenOptions::new()
        .write(true)
        .dma_open(&path)
        .await
        .map_err(glommio_error("open", &path))?;
    let alignment = file.alignment();
    let capacity = align_up(options.segment_bytes.max(alignment), alignment);
    let len = file.file_size().await.map_err(glommio_error("stat", &path))?;
    if !(ALIGNMENT_MIN..=ALIGNMENT_MAX).contains(&alignment) || !alignment.is_power_of_two() || len != capacity {
        file.close().await.map_err(glommio_error("close", &path))?;
        fsutil::remove(&path)?;
        return Ok(None);
    }
    Ok(Some(Prepared {
        file,
        path,
        alignment,
        capacity,
        stats: Stats::default(),
    }))
}

/// Makes a prepared file the segment of `first_epoch`: renames it into
/// place (a spare), writes its header, and in [`FsyncMode::Epoch`] syncs
/// the header and the directory entry.
async fn install(
    prepared: Prepared,
    wal_dir: &Path,
    shard: ShardId,
    first_epoch: Epoch,
    options: &Options,
    stats: &mut Stats,
) -> Result<Open> {
    let Prepared {
        file,
        path: prepared_path,
        alignment,
        capacity,
        stats: prepared_stats,
    } = prepared;
    stats.bytes += prepared_stats.bytes;
    stats.fdatasyncs += prepared_stats.fdatasyncs;
    let path = wal_dir.join(super::segment_name(shard, first_epoch));
    if prepared_path != path {
        file.rename(&path)
            .await
            .map_err(glommio_error("rename", &prepared_path))?;
    }
    let header = SegmentHeader {
        shard,
        alignment: alignment as u32,
        first_epoch,
        capacity,
    };
    let mut buf = file.alloc_dma_buffer(alignment as usize);
    let bytes = buf.as_bytes_mut();
    bytes.fill(0);
    bytes[..super::SEGMENT_HEADER_BYTES].copy_from_slice(&header.encode());
    let written = file.write_at(buf, 0).await.map_err(glommio_error("write", &path))?;
    assert_eq!(written as u64, alignment, "short write of a segment header");
    if options.fsync == FsyncMode::Epoch {
        file.fdatasync().await.map_err(glommio_error("fdatasync", &path))?;
        let d = Directory::open(wal_dir)
            .await
            .map_err(glommio_error("open directory", wal_dir))?;
        d.sync().await.map_err(glommio_error("fsync directory", wal_dir))?;
        d.close().await.map_err(glommio_error("close directory", wal_dir))?;
        stats.fdatasyncs += 2;
    }
    stats.segments += 1;
    stats.bytes += alignment;
    Ok(Open {
        file,
        path,
        alignment,
        capacity,
        offset: alignment,
    })
}

/// Writes zeros over `[0, to)`: blocks that were written once need no
/// extent conversion (a journal commit) when a record overwrites them, so
/// the `fdatasync` after an append flushes data only.
async fn zero_fill(file: &DmaFile, path: &Path, to: u64, stats: &mut Stats) -> Result<()> {
    const ZERO_FILL_BYTES: u64 = 1 << 20;
    let mut buf = file.alloc_dma_buffer(ZERO_FILL_BYTES as usize);
    buf.as_bytes_mut().fill(0);
    let buf = std::rc::Rc::new(buf);
    let mut at = 0;
    while at < to {
        let n = ZERO_FILL_BYTES.min(to - at);
        let written = if n == ZERO_FILL_BYTES {
            file.write_rc_at(buf.clone(), at).await
        } else {
            let mut tail = file.alloc_dma_buffer(n as usize);
            tail.as_bytes_mut().fill(0);
            file.write_at(tail, at).await
        }
        .map_err(glommio_error("write", path))?;
        assert_eq!(written as u64, n, "short write while zero-filling");
        at += n;
        stats.bytes += n;
    }
    Ok(())
}

/// Whether a segment holds anything at its first record position.
fn has_records(path: &Path) -> Result<bool> {
    let mut head = Vec::new();
    File::open(path)
        .and_then(|f| {
            f.take(ALIGNMENT_MAX + RECORD_HEADER_BYTES as u64)
                .read_to_end(&mut head)
        })
        .map_err(Error::io("read", path))?;
    let Ok(header) = SegmentHeader::decode(&head) else {
        // Uninitialised or foreign: nothing was appended after a valid
        // header; recovery reports anything else.
        return Ok(head.len() > ALIGNMENT_MIN as usize && head[ALIGNMENT_MIN as usize..].iter().any(|b| *b != 0));
    };
    let at = header.alignment as usize;
    let slot = head.get(at..).unwrap_or(&[]);
    Ok(!matches!(
        RecordHeader::check(&slot[..slot.len().min(RECORD_HEADER_BYTES)]),
        super::HeaderCheck::Zero
    ))
}
