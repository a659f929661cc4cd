//! Descriptions of logs and snapshots for humans and tools
//! (`styx inspect log|snapshot DIR`).
//!
//! Inspection reads everything and verifies every checksum, but changes
//! nothing: a torn tail is reported, not cut; damage is reported in the
//! report (`problem`) rather than as an error, so that a broken directory can
//! still be described. Only a path that is neither a data directory nor a
//! file of ours is an error.

use crate::dir::{SNAPSHOT_DIR, WAL_DIR};
use crate::error::{Error, Result};
use crate::snapshot::{self, FileReader, Kind, Manifest};
use crate::wal::{self, RecordInfo, Truncation};
use crate::{FORMAT_VERSION, fsutil};
use std::fmt;
use std::path::{Path, PathBuf};
use styx_engine::{Epoch, ShardId};

/// One log segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentReport {
    pub path: PathBuf,
    pub first_epoch: Epoch,
    pub file_bytes: u64,
    /// From the segment header (`None`: unreadable).
    pub alignment: Option<u32>,
    pub capacity: Option<u64>,
    pub records: u64,
    pub txns: u64,
    /// Bytes up to the end of the last valid record (padding included).
    pub used_bytes: u64,
    /// Epochs of the first and last valid record.
    pub epochs: Option<(Epoch, Epoch)>,
}

/// One shard's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardLog {
    pub shard: ShardId,
    /// Records up to this epoch are covered by the latest snapshot (0: no
    /// snapshot known).
    pub snapshot_epoch: Epoch,
    pub segments: Vec<SegmentReport>,
    pub records: Vec<RecordInfo>,
    /// A torn tail that recovery would cut.
    pub truncation: Option<Truncation>,
    /// Damage that recovery would refuse.
    pub problem: Option<String>,
}

impl ShardLog {
    pub fn txns(&self) -> u64 {
        self.segments.iter().map(|s| s.txns).sum()
    }

    pub fn epochs(&self) -> Option<(Epoch, Epoch)> {
        Some((self.records.first()?.header.epoch, self.records.last()?.header.epoch))
    }
}

/// The logs of a data directory, a log directory, or one segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogReport {
    pub path: PathBuf,
    pub shards: Vec<ShardLog>,
}

impl LogReport {
    /// Whether every checksum held and nothing needs cutting.
    pub fn is_clean(&self) -> bool {
        self.shards
            .iter()
            .all(|s| s.problem.is_none() && s.truncation.is_none())
    }
}

/// Describes the log at `path`: a data directory, its `wal/` directory, or
/// one segment file.
pub fn log(path: &Path) -> Result<LogReport> {
    let (wal_dir, only, snapshot_dir) = if path.is_file() {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if wal::parse_segment_name(name).is_none() {
            return Err(Error::Magic {
                path: path.to_path_buf(),
                what: "log segment (by name: wal-SSSS-EEEEEEEEEEEEEEEEEEEE.log)",
                found: Vec::new(),
            });
        }
        let dir = fsutil::parent(path).to_path_buf();
        let snap = dir.parent().map(|p| p.join(SNAPSHOT_DIR));
        (dir, Some(path.to_path_buf()), snap)
    } else if path.join(WAL_DIR).is_dir() {
        (path.join(WAL_DIR), None, Some(path.join(SNAPSHOT_DIR)))
    } else {
        (path.to_path_buf(), None, path.parent().map(|p| p.join(SNAPSHOT_DIR)))
    };
    let manifest = match snapshot_dir {
        Some(d) if d.is_dir() => snapshot::latest(&d).ok().and_then(|l| l.manifest),
        _ => None,
    };
    let mut shards = Vec::new();
    let ids = match &only {
        Some(p) => {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            vec![wal::parse_segment_name(name).expect("checked").0]
        }
        None => wal::shards(&wal_dir)?,
    };
    for shard in ids {
        let snapshot_epoch = manifest
            .as_ref()
            .and_then(|m| m.shard(shard))
            .map_or(0, |s| s.log_after);
        shards.push(shard_log(&wal_dir, shard, snapshot_epoch, only.as_deref())?);
    }
    Ok(LogReport {
        path: path.to_path_buf(),
        shards,
    })
}

fn shard_log(wal_dir: &Path, shard: ShardId, snapshot_epoch: Epoch, only: Option<&Path>) -> Result<ShardLog> {
    let mut reader = wal::Reader::for_inspection(wal_dir, shard, snapshot_epoch, only)?;
    let mut problem = None;
    for b in reader.by_ref() {
        if let Err(e) = b {
            problem = Some(e.to_string());
            break;
        }
    }
    let records = reader.take_records();
    let truncation = reader.truncation().cloned();
    let mut segments = Vec::new();
    for (i, seg) in reader.segment_list().iter().enumerate() {
        let file_bytes = std::fs::metadata(&seg.path).map(|m| m.len()).unwrap_or(0);
        let head = read_head(&seg.path);
        let header = wal::SegmentHeader::decode(&head).ok();
        let mine: Vec<&RecordInfo> = records.iter().filter(|r| r.segment == i).collect();
        let align = header.map_or(wal::ALIGNMENT_MIN, |h| u64::from(h.alignment));
        segments.push(SegmentReport {
            path: seg.path.clone(),
            first_epoch: seg.first_epoch,
            file_bytes,
            alignment: header.map(|h| h.alignment),
            capacity: header.map(|h| h.capacity),
            records: mine.len() as u64,
            txns: mine.iter().map(|r| u64::from(r.txns)).sum(),
            used_bytes: mine
                .last()
                .map_or(align, |r| wal::align_up(r.offset + r.header.record_len(), align)),
            epochs: mine
                .first()
                .zip(mine.last())
                .map(|(a, b)| (a.header.epoch, b.header.epoch)),
        });
    }
    Ok(ShardLog {
        shard,
        snapshot_epoch,
        segments,
        records,
        truncation,
        problem,
    })
}

fn read_head(path: &Path) -> Vec<u8> {
    use std::io::Read;
    let mut head = Vec::new();
    if let Ok(f) = std::fs::File::open(path) {
        let _ = f.take(wal::SEGMENT_HEADER_BYTES as u64).read_to_end(&mut head);
    }
    head
}

impl fmt::Display for LogReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "log at {} (format version {FORMAT_VERSION})", self.path.display())?;
        if self.shards.is_empty() {
            writeln!(f, "  no segments")?;
        }
        for s in &self.shards {
            write!(
                f,
                "shard {}: {} records, {} transactions",
                s.shard,
                s.records.len(),
                s.txns()
            )?;
            if let Some((a, b)) = s.epochs() {
                write!(f, ", epochs {a}..={b}")?;
            }
            if s.snapshot_epoch > 0 {
                write!(f, " (snapshot covers ..={})", s.snapshot_epoch)?;
            }
            writeln!(f)?;
            for seg in &s.segments {
                let name = seg.path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
                write!(
                    f,
                    "  {name}: {} records, {} transactions, {} of {} bytes used",
                    seg.records, seg.txns, seg.used_bytes, seg.file_bytes
                )?;
                if let Some((a, b)) = seg.epochs {
                    write!(f, ", epochs {a}..={b}")?;
                }
                match seg.alignment {
                    Some(al) => write!(f, ", alignment {al}")?,
                    None => write!(f, ", header unreadable")?,
                }
                writeln!(f)?;
            }
            match (&s.problem, &s.truncation) {
                (Some(p), _) => writeln!(f, "  DAMAGED: {p}")?,
                (None, Some(t)) => writeln!(f, "  recovery will cut a {t}")?,
                (None, None) => writeln!(f, "  all checksums verified")?,
            }
        }
        Ok(())
    }
}

/// One snapshot file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileReport {
    pub path: PathBuf,
    pub kind: Option<Kind>,
    pub shard: Option<ShardId>,
    pub epoch: Option<Epoch>,
    pub parent_epoch: Option<Epoch>,
    pub bytes: u64,
    pub meta_bytes: u64,
    pub chunks: u64,
    pub entries: u64,
    pub tombstones: u64,
    /// Listed by the latest complete manifest.
    pub listed: bool,
    /// A temporary file (a write that did not finish).
    pub temporary: bool,
    pub problem: Option<String>,
}

/// One manifest file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestReport {
    pub path: PathBuf,
    pub generation: u64,
    /// Complete and the latest.
    pub latest: bool,
    /// Why it was skipped (incomplete) or refused.
    pub problem: Option<String>,
}

/// The snapshots of a data directory, a snapshot directory, or one file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotReport {
    pub path: PathBuf,
    /// The latest complete snapshot.
    pub latest: Option<Manifest>,
    pub manifests: Vec<ManifestReport>,
    pub files: Vec<FileReport>,
    /// A problem with the directory as a whole (a manifest refused).
    pub problem: Option<String>,
}

impl SnapshotReport {
    /// Whether the latest snapshot is complete and every file it lists is
    /// intact.
    pub fn is_clean(&self) -> bool {
        self.problem.is_none() && self.files.iter().filter(|f| f.listed).all(|f| f.problem.is_none())
    }
}

/// Describes the snapshots at `path`: a data directory, its `snapshot/`
/// directory, or one snapshot file.
pub fn snapshot(path: &Path) -> Result<SnapshotReport> {
    if path.is_file() {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let tmp = snapshot::parse_file_name(name).is_some_and(|p| p.3);
        return Ok(SnapshotReport {
            path: path.to_path_buf(),
            latest: None,
            manifests: Vec::new(),
            files: vec![file_report(path, None, tmp)],
            problem: None,
        });
    }
    let dir = if path.join(SNAPSHOT_DIR).is_dir() {
        path.join(SNAPSHOT_DIR)
    } else {
        path.to_path_buf()
    };
    let (latest, problem) = match snapshot::latest(&dir) {
        Ok(l) => (l, None),
        Err(e) => (snapshot::Latest::default(), Some(e.to_string())),
    };
    let mut manifests = Vec::new();
    let mut files = Vec::new();
    for name in fsutil::list(&dir)? {
        let p = dir.join(&name);
        if let Some(g) = snapshot::parse_manifest_name(&name) {
            let is_latest = latest.path.as_deref() == Some(p.as_path());
            let problem = latest
                .ignored
                .iter()
                .find(|i| i.path == p)
                .map(|i| format!("incomplete, skipped: {}", i.reason))
                .or_else(|| {
                    let older = latest.manifest.as_ref().is_some_and(|m| g < m.generation);
                    (!is_latest && !older).then(|| "not read".to_string())
                });
            manifests.push(ManifestReport {
                path: p,
                generation: g,
                latest: is_latest,
                problem,
            });
        } else if let Some((shard, epoch, kind, tmp)) = snapshot::parse_file_name(&name) {
            let listed = latest.manifest.as_ref().and_then(|m| {
                m.shard(shard)?
                    .files
                    .iter()
                    .find(|f| !tmp && f.epoch == epoch && f.kind == kind)
                    .copied()
            });
            let mut report = file_report(&p, listed.as_ref(), tmp);
            report.listed = listed.is_some();
            files.push(report);
        }
    }
    Ok(SnapshotReport {
        path: path.to_path_buf(),
        latest: latest.manifest,
        manifests,
        files,
        problem,
    })
}

fn file_report(path: &Path, listed: Option<&snapshot::FileRef>, temporary: bool) -> FileReport {
    let mut report = FileReport {
        path: path.to_path_buf(),
        kind: None,
        shard: None,
        epoch: None,
        parent_epoch: None,
        bytes: std::fs::metadata(path).map(|m| m.len()).unwrap_or(0),
        meta_bytes: 0,
        chunks: 0,
        entries: 0,
        tombstones: 0,
        listed: false,
        temporary,
        problem: None,
    };
    let mut reader = match FileReader::open(path) {
        Ok(r) => r,
        Err(e) => {
            report.problem = Some(e.to_string());
            return report;
        }
    };
    let h = *reader.header();
    report.kind = Some(h.kind);
    report.shard = Some(h.shard);
    report.epoch = Some(h.epoch);
    report.parent_epoch = Some(h.parent_epoch);
    report.meta_bytes = h.meta_len;
    let result = reader.skip_to_end().and_then(|()| match listed {
        Some(r) => reader.check_ref(r),
        None => Ok(()),
    });
    let (chunks, tombstones) = reader.counts();
    report.chunks = chunks;
    report.tombstones = tombstones;
    report.entries = reader.footer().map_or(0, |f| f.entries);
    if let Err(e) = result {
        report.problem = Some(e.to_string());
    }
    report
}

impl fmt::Display for SnapshotReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "snapshots at {} (format version {FORMAT_VERSION})",
            self.path.display()
        )?;
        match &self.latest {
            Some(m) => {
                writeln!(
                    f,
                    "latest complete snapshot: epoch {}, generation {}, {} shards",
                    m.epoch,
                    m.generation,
                    m.shards.len()
                )?;
                for s in &m.shards {
                    let chain: Vec<String> = s
                        .files
                        .iter()
                        .map(|x| format!("{}@{}", if x.kind == Kind::Base { "base" } else { "delta" }, x.epoch))
                        .collect();
                    let entries: u64 = s.files.iter().map(|x| x.entries).sum();
                    writeln!(
                        f,
                        "  shard {}: chain {} ({} entries in all), replay the log after epoch {}",
                        s.shard,
                        chain.join(" + "),
                        entries,
                        s.log_after
                    )?;
                }
            }
            None if self.manifests.is_empty() && self.files.len() == 1 => {}
            None => writeln!(f, "no complete snapshot")?,
        }
        if let Some(p) = &self.problem {
            writeln!(f, "DAMAGED: {p}")?;
        }
        for m in &self.manifests {
            let name = m.path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
            match (&m.problem, m.latest) {
                (Some(p), _) => writeln!(f, "  {name}: {p}")?,
                (None, true) => writeln!(f, "  {name}: latest")?,
                (None, false) => writeln!(f, "  {name}: older")?,
            }
        }
        for x in &self.files {
            let name = x.path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
            write!(f, "  {name}: {} bytes", x.bytes)?;
            if x.kind.is_some() {
                write!(
                    f,
                    ", {} entries ({} tombstones) in {} chunks, {} bytes of metadata, parent epoch {}",
                    x.entries,
                    x.tombstones,
                    x.chunks,
                    x.meta_bytes,
                    x.parent_epoch.unwrap_or(0)
                )?;
            }
            if x.listed {
                write!(f, ", listed")?;
            } else if x.temporary {
                write!(f, ", unfinished write")?;
            } else if self.latest.is_some() {
                write!(f, ", not listed")?;
            }
            match &x.problem {
                Some(p) => writeln!(f, "\n    DAMAGED: {p}")?,
                None => writeln!(f, ", checksums verified")?,
            }
        }
        Ok(())
    }
}
