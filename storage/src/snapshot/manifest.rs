//! Manifests: what makes a snapshot complete, and the catalog that writes
//! them and collects garbage.
//!
//! A manifest is written last, atomically (temporary name, fsync, rename,
//! fsync of the directory), under a generation number one above every
//! manifest seen. The latest complete snapshot is the valid manifest of the
//! highest generation; a manifest that is empty, cut short or fails its
//! checksum is skipped (and reported in [`Latest::ignored`]), so a crash in
//! the middle of a commit falls back to the previous snapshot. One of
//! another format version is refused, not skipped.

use super::{CHAIN_FILES_MAX, FileRef, Kind, MANIFEST_BYTES_MAX, MANIFEST_SHARDS_MAX, parse_file_name};
use crate::FORMAT_VERSION;
use crate::crc::crc32c;
use crate::dir::DataDir;
use crate::error::{Error, Result};
use crate::fsutil;
use rkyv::rancor::BoxedError;
use rkyv::util::AlignedVec;
use std::io::Read;
use std::path::{Path, PathBuf};
use styx_engine::{Epoch, ShardId};

const MAGIC: [u8; 8] = *b"STYXMANI";
const HEADER_BYTES: usize = 64;

/// One shard's part of a snapshot.
#[derive(Clone, Debug, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct ShardSnapshot {
    pub shard: ShardId,
    /// Replay this shard's log from the first record after this epoch.
    pub log_after: Epoch,
    /// The chain: a file with parent epoch 0 (usually a base), then deltas,
    /// each extending the one before it.
    pub files: Vec<FileRef>,
}

/// A complete snapshot.
#[derive(Clone, Debug, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct Manifest {
    /// Set by [`Catalog::commit`]; orders manifests.
    pub generation: u64,
    /// The epoch at whose end the snapshot was taken.
    pub epoch: Epoch,
    /// Every shard, by shard id.
    pub shards: Vec<ShardSnapshot>,
}

impl Manifest {
    /// The manifest of a snapshot at `epoch` that extends `previous` (none:
    /// the first snapshot) with `files`, one per shard. A file with parent
    /// epoch 0 starts its shard's chain afresh; any other must extend the
    /// shard's latest file.
    pub fn snapshot(previous: Option<&Manifest>, epoch: Epoch, mut files: Vec<FileRef>) -> Result<Manifest> {
        files.sort_by_key(|f| f.shard);
        if files.windows(2).any(|w| w[0].shard == w[1].shard) {
            return Err(Error::Snapshot(format!("two files for one shard at epoch {epoch}")));
        }
        if let Some(p) = previous {
            if epoch <= p.epoch {
                return Err(Error::Snapshot(format!(
                    "a snapshot at epoch {epoch} after one at epoch {}",
                    p.epoch
                )));
            }
            let before: Vec<ShardId> = p.shards.iter().map(|s| s.shard).collect();
            let now: Vec<ShardId> = files.iter().map(|f| f.shard).collect();
            if before != now {
                return Err(Error::Snapshot(format!(
                    "the snapshot at epoch {epoch} has files for shards {now:?}, the previous one for {before:?}: every shard writes a delta (an empty one if nothing changed)"
                )));
            }
        }
        let mut shards = Vec::with_capacity(files.len());
        for f in files {
            if f.epoch != epoch {
                return Err(Error::Snapshot(format!(
                    "shard {}'s file is of epoch {}, the snapshot of epoch {epoch}",
                    f.shard, f.epoch
                )));
            }
            let mut chain = Vec::new();
            if f.parent_epoch != 0 {
                let prev = previous.and_then(|p| p.shard(f.shard));
                let last = prev.and_then(|s| s.files.last()).map_or(0, |l| l.epoch);
                if last != f.parent_epoch {
                    return Err(Error::Snapshot(format!(
                        "shard {}'s delta at epoch {epoch} holds the changes since epoch {}, but its latest committed snapshot is at epoch {last}: a delta must hold every change since the last committed snapshot (keep the changed keys until the manifest is committed)",
                        f.shard, f.parent_epoch
                    )));
                }
                chain.extend_from_slice(&prev.expect("checked").files);
            }
            chain.push(f);
            shards.push(ShardSnapshot {
                shard: f.shard,
                log_after: epoch,
                files: chain,
            });
        }
        let m = Manifest {
            generation: 0,
            epoch,
            shards,
        };
        m.check().map_err(Error::Snapshot)?;
        Ok(m)
    }

    /// This manifest with `base.shard`'s chain, up to and including the
    /// file of `base.epoch`, replaced by `base` (made by
    /// [`super::compact`], possibly from an older manifest: later deltas
    /// are kept).
    pub fn compacted(&self, base: FileRef) -> Result<Manifest> {
        assert!(base.kind == Kind::Base && base.parent_epoch == 0);
        let mut m = self.clone();
        let Some(s) = m.shards.iter_mut().find(|s| s.shard == base.shard) else {
            return Err(Error::Snapshot(format!(
                "compacted shard {} is not in the manifest",
                base.shard
            )));
        };
        let Some(i) = s.files.iter().position(|f| f.epoch == base.epoch) else {
            return Err(Error::Snapshot(format!(
                "shard {}'s chain no longer holds epoch {}: the compaction is stale, discard it",
                base.shard, base.epoch
            )));
        };
        s.files.splice(..=i, [base]);
        m.check().map_err(Error::Snapshot)?;
        Ok(m)
    }

    pub fn shard(&self, shard: ShardId) -> Option<&ShardSnapshot> {
        self.shards.iter().find(|s| s.shard == shard)
    }

    /// What recovery ([`styx_engine::recovery`]) needs of this snapshot:
    /// its epoch and where each shard's log resumes.
    pub fn for_recovery(&self) -> styx_engine::recovery::Snapshot {
        styx_engine::recovery::Snapshot {
            epoch: self.epoch,
            log_after: self.shards.iter().map(|s| (s.shard, s.log_after)).collect(),
        }
    }

    /// The manifest's invariants (see [`crate::snapshot`]).
    pub fn check(&self) -> Result<(), String> {
        if self.shards.len() > MANIFEST_SHARDS_MAX {
            return Err(format!("{} shards", self.shards.len()));
        }
        if self.shards.windows(2).any(|w| w[0].shard >= w[1].shard) {
            return Err("shards are not in order".into());
        }
        for s in &self.shards {
            let files = &s.files;
            if files.is_empty() || files.len() > CHAIN_FILES_MAX {
                return Err(format!(
                    "shard {} has a chain of {} files (1..={CHAIN_FILES_MAX}; compact it)",
                    s.shard,
                    files.len()
                ));
            }
            if files[0].parent_epoch != 0 {
                return Err(format!(
                    "shard {}'s chain starts with a delta of a missing parent",
                    s.shard
                ));
            }
            for (i, f) in files.iter().enumerate() {
                if f.shard != s.shard || f.epoch > self.epoch || f.epoch == 0 {
                    return Err(format!("shard {} lists {f:?}", s.shard));
                }
                if i > 0 && (f.kind != Kind::Delta || f.parent_epoch != files[i - 1].epoch) {
                    return Err(format!(
                        "shard {}'s file of epoch {} does not extend the one before it",
                        s.shard, f.epoch
                    ));
                }
            }
            if s.log_after > self.epoch {
                return Err(format!("shard {} replays after epoch {}", s.shard, s.log_after));
            }
        }
        Ok(())
    }

    fn encode(&self) -> Result<Vec<u8>> {
        let body = rkyv::to_bytes::<BoxedError>(self)
            .map_err(|e| Error::Snapshot(format!("cannot archive a manifest: {e}")))?;
        let mut out = vec![0u8; HEADER_BYTES];
        out[0..8].copy_from_slice(&MAGIC);
        out[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        out[16..24].copy_from_slice(&self.generation.to_le_bytes());
        out[24..32].copy_from_slice(&self.epoch.to_le_bytes());
        out[32..40].copy_from_slice(&(body.len() as u64).to_le_bytes());
        out[40..44].copy_from_slice(&crc32c(&body).to_le_bytes());
        let crc = crc32c(&out[..60]);
        out[60..64].copy_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&body);
        Ok(out)
    }
}

/// What reading a manifest file found.
enum ManifestRead {
    Complete(Manifest),
    /// Empty, cut short or failing a checksum: a commit that did not finish.
    Incomplete(String),
}

fn read_manifest(path: &Path) -> Result<ManifestRead> {
    let file = std::fs::File::open(path).map_err(Error::io("open", path))?;
    let len = file.metadata().map_err(Error::io("stat", path))?.len();
    if len > HEADER_BYTES as u64 + MANIFEST_BYTES_MAX {
        return Err(Error::corrupt(path, 0, format!("a manifest of {len} bytes")));
    }
    let mut buf = Vec::with_capacity(len as usize);
    file.take(len).read_to_end(&mut buf).map_err(Error::io("read", path))?;
    decode_read(path, &buf)
}

/// Decodes the bytes of the manifest file `path` (named in errors).
fn decode_read(path: &Path, buf: &[u8]) -> Result<ManifestRead> {
    if buf.len() as u64 > HEADER_BYTES as u64 + MANIFEST_BYTES_MAX {
        return Err(Error::corrupt(path, 0, format!("a manifest of {} bytes", buf.len())));
    }
    // rkyv reads the body in place: it must be aligned.
    let mut bytes = AlignedVec::<16>::with_capacity(buf.len());
    bytes.extend_from_slice(buf);
    if bytes.len() < HEADER_BYTES {
        return Ok(ManifestRead::Incomplete(format!(
            "{} bytes, shorter than a header",
            bytes.len()
        )));
    }
    let h = &bytes[..HEADER_BYTES];
    if h.iter().all(|b| *b == 0) {
        return Ok(ManifestRead::Incomplete("the header is zeros".into()));
    }
    if h[0..8] != MAGIC {
        return Err(Error::Magic {
            path: path.to_path_buf(),
            what: "manifest",
            found: h[0..8].to_vec(),
        });
    }
    let version = u16::from_le_bytes([h[8], h[9]]);
    if version != FORMAT_VERSION {
        return Err(Error::Version {
            path: path.to_path_buf(),
            what: "manifest",
            found: u32::from(version),
            expected: u32::from(FORMAT_VERSION),
        });
    }
    if crc32c(&h[..60]) != u32::from_le_bytes(h[60..64].try_into().expect("4")) {
        return Ok(ManifestRead::Incomplete("the header checksum does not match".into()));
    }
    let generation = u64::from_le_bytes(h[16..24].try_into().expect("8"));
    let epoch = u64::from_le_bytes(h[24..32].try_into().expect("8"));
    let body_len = u64::from_le_bytes(h[32..40].try_into().expect("8"));
    let body_crc = u32::from_le_bytes(h[40..44].try_into().expect("4"));
    // A damaged length may be near 2^64: compare without adding to it.
    if (bytes.len() - HEADER_BYTES) as u64 != body_len {
        return Ok(ManifestRead::Incomplete(format!(
            "{} bytes, the header announces a body of {body_len}",
            bytes.len()
        )));
    }
    let body = &bytes[HEADER_BYTES..];
    if crc32c(body) != body_crc {
        return Ok(ManifestRead::Incomplete("the body checksum does not match".into()));
    }
    // The checksum holds: from here on a problem is corruption, not a
    // commit cut short.
    let m = rkyv::from_bytes::<Manifest, BoxedError>(body)
        .map_err(|e| Error::corrupt(path, HEADER_BYTES as u64, format!("not a valid manifest archive: {e}")))?;
    if m.generation != generation || m.epoch != epoch {
        return Err(Error::corrupt(path, 16, "the header and the body disagree"));
    }
    if let Some(g) = parse_manifest_name(&path.file_name().unwrap_or_default().to_string_lossy())
        && g != generation
    {
        return Err(Error::corrupt(
            path,
            16,
            format!("generation {generation} in a file named for {g}"),
        ));
    }
    m.check()
        .map_err(|why| Error::corrupt(path, HEADER_BYTES as u64, why))?;
    Ok(ManifestRead::Complete(m))
}

/// Decodes the bytes of a manifest file named `path` (in errors; a name of
/// the form `manifest-<generation>` is checked against the header): the
/// manifest, `Ok(None)` for a commit a crash cut short (empty, cut off,
/// failing a checksum: recovery skips it), or an error for corruption.
/// For fuzzing and tests; recovery reads files with [`latest`] and
/// [`complete_manifests`].
pub fn decode_manifest(path: &Path, bytes: &[u8]) -> Result<Option<Manifest>> {
    Ok(match decode_read(path, bytes)? {
        ManifestRead::Complete(m) => Some(m),
        ManifestRead::Incomplete(_) => None,
    })
}

/// The file name of a manifest.
pub fn manifest_name(generation: u64) -> String {
    format!("manifest-{generation:020}")
}

pub(crate) fn parse_manifest_name(name: &str) -> Option<u64> {
    let g = name.strip_prefix("manifest-")?;
    (g.len() == 20).then(|| g.parse().ok())?
}

/// A manifest file that was skipped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ignored {
    pub path: PathBuf,
    pub reason: String,
}

/// The latest complete snapshot in a snapshot directory.
#[derive(Clone, Debug, Default)]
pub struct Latest {
    pub manifest: Option<Manifest>,
    pub path: Option<PathBuf>,
    /// Newer manifests that were incomplete, newest first.
    pub ignored: Vec<Ignored>,
    /// The highest generation of any manifest file, complete or not.
    pub generation_max: u64,
}

/// Finds the latest complete manifest in `snapshot_dir` (read-only).
pub fn latest(snapshot_dir: &Path) -> Result<Latest> {
    let mut gens: Vec<u64> = fsutil::list(snapshot_dir)?
        .iter()
        .filter_map(|n| parse_manifest_name(n))
        .collect();
    gens.sort_unstable_by(|a, b| b.cmp(a));
    let mut out = Latest {
        generation_max: gens.first().copied().unwrap_or(0),
        ..Latest::default()
    };
    for g in gens {
        let path = snapshot_dir.join(manifest_name(g));
        match read_manifest(&path)? {
            ManifestRead::Complete(m) => {
                out.manifest = Some(m);
                out.path = Some(path);
                break;
            }
            ManifestRead::Incomplete(reason) => out.ignored.push(Ignored { path, reason }),
        }
    }
    Ok(out)
}

/// The owner of a data directory's manifests: commits snapshots and
/// compactions, removes what no manifest needs. One per data directory,
/// used by one task at a time (the runtime's snapshot coordinator).
#[derive(Debug)]
pub struct Catalog {
    dir: PathBuf,
    latest: Latest,
}

impl Catalog {
    /// Reads the latest complete manifest of `dir`.
    pub fn open(dir: &DataDir) -> Result<Catalog> {
        let snapshot_dir = dir.snapshot_dir();
        let latest = latest(&snapshot_dir)?;
        Ok(Catalog {
            dir: snapshot_dir,
            latest,
        })
    }

    /// The latest complete snapshot, if any.
    pub fn latest(&self) -> Option<&Manifest> {
        self.latest.manifest.as_ref()
    }

    /// Manifests skipped when the catalog was opened (incomplete commits).
    pub fn ignored(&self) -> &[Ignored] {
        &self.latest.ignored
    }

    /// The snapshot directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Makes `manifest` the latest complete snapshot: checks it, checks
    /// that the files it lists exist with their lengths, gives it the next
    /// generation and writes it atomically.
    pub fn commit(&mut self, mut manifest: Manifest) -> Result<&Manifest> {
        manifest.check().map_err(Error::Snapshot)?;
        if let Some(prev) = self.latest()
            && manifest.epoch < prev.epoch
        {
            return Err(Error::Snapshot(format!(
                "a manifest of epoch {} after one of epoch {}",
                manifest.epoch, prev.epoch
            )));
        }
        for s in &manifest.shards {
            for f in &s.files {
                let path = self.dir.join(f.name());
                let meta = std::fs::metadata(&path).map_err(|e| {
                    if e.kind() == std::io::ErrorKind::NotFound {
                        Error::Missing {
                            path: path.clone(),
                            what: "snapshot file",
                        }
                    } else {
                        Error::io("stat", &path)(e)
                    }
                })?;
                if meta.len() != f.bytes {
                    return Err(Error::Snapshot(format!(
                        "{} is {} bytes, the manifest would list {}",
                        path.display(),
                        meta.len(),
                        f.bytes
                    )));
                }
            }
        }
        let generation = self.latest.generation_max + 1;
        manifest.generation = generation;
        let bytes = manifest.encode()?;
        let path = self.dir.join(manifest_name(generation));
        fsutil::write_atomic(&path, &bytes)?;
        self.latest.generation_max = generation;
        self.latest.manifest = Some(manifest);
        self.latest.path = Some(path);
        self.latest.ignored.clear();
        Ok(self.latest().expect("just committed"))
    }

    /// Removes what the latest manifest does not need (see
    /// [`Catalog::gc_keeping`]: here nothing older is kept).
    pub fn gc(&self) -> Result<Vec<PathBuf>> {
        self.gc_keeping(Epoch::MAX)
    }

    /// The epochs of the complete snapshots in the directory, oldest first.
    /// A node of a cluster keeps every snapshot the whole cluster may still
    /// roll back to; recovery picks the newest epoch all nodes have.
    pub fn epochs(&self) -> Result<Vec<Epoch>> {
        let mut epochs: Vec<Epoch> = complete_manifests(&self.dir)?.iter().map(|m| m.epoch).collect();
        epochs.dedup();
        Ok(epochs)
    }

    /// Makes the complete snapshot of `epoch` the latest (`None`: no
    /// snapshot) by removing every manifest newer than it: recovery of a
    /// cluster rolls every node back to the newest snapshot that all of
    /// them completed, and a newer one that only some completed must never
    /// be chosen later (its files are collected as garbage).
    pub fn roll_back_to(&mut self, epoch: Option<Epoch>) -> Result<()> {
        let manifests = complete_manifests(&self.dir)?;
        if let Some(e) = epoch
            && !manifests.iter().any(|m| m.epoch == e)
        {
            return Err(Error::Snapshot(format!(
                "no complete snapshot of epoch {e} in {}",
                self.dir.display()
            )));
        }
        let mut removed = false;
        for name in fsutil::list(&self.dir)? {
            let Some(g) = parse_manifest_name(&name) else {
                continue;
            };
            let keep = manifests
                .iter()
                .find(|m| m.generation == g)
                .is_some_and(|m| epoch.is_some_and(|e| m.epoch <= e));
            if !keep {
                fsutil::remove(&self.dir.join(&name))?;
                removed = true;
            }
        }
        if removed {
            fsutil::sync_dir(&self.dir)?;
        }
        let generation_max = self.latest.generation_max;
        self.latest = latest(&self.dir)?;
        // Generations only grow: a later commit must not reuse a removed one.
        self.latest.generation_max = self.latest.generation_max.max(generation_max);
        assert_eq!(
            self.latest().map(|m| m.epoch),
            epoch,
            "rolled back to the wrong snapshot"
        );
        Ok(())
    }

    /// Removes what no kept manifest needs: manifests older than both the
    /// latest and `keep_from` (the newest snapshot every node of a cluster
    /// completed: an older one may still be rolled back to), incomplete and
    /// temporary manifests (commits a crash interrupted), and each shard's
    /// snapshot files (finished or temporary) that no kept manifest lists
    /// and that are not newer than the start of the shard's latest chain.
    /// Newer unlisted files may belong to a snapshot or compaction in
    /// progress and are kept. Returns the removed paths. Nothing is removed
    /// while no manifest is complete.
    pub fn gc_keeping(&self, keep_from: Epoch) -> Result<Vec<PathBuf>> {
        let Some(m) = self.latest() else {
            return Ok(Vec::new());
        };
        let keep_from = keep_from.min(m.epoch);
        // The latest, and of each older epoch still kept its newest
        // generation (a compaction supersedes the manifest it rewrote).
        let mut kept: Vec<Manifest> = Vec::new();
        for k in complete_manifests(&self.dir)?.into_iter().rev() {
            let wanted = k.generation == m.generation
                || (k.epoch >= keep_from && k.epoch < m.epoch && !kept.iter().any(|x| x.epoch == k.epoch));
            if wanted {
                kept.push(k);
            }
        }
        let mut removed = Vec::new();
        for name in fsutil::list(&self.dir)? {
            let remove = if let Some(g) = parse_manifest_name(&name) {
                !kept.iter().any(|k| k.generation == g)
            } else if name.strip_suffix(".tmp").and_then(parse_manifest_name).is_some() {
                // Commits are synchronous in this catalog's owner: a
                // temporary manifest is a commit a crash interrupted.
                true
            } else if let Some((shard, epoch, kind, tmp)) = parse_file_name(&name) {
                match m.shard(shard) {
                    Some(s) => {
                        let listed = !tmp
                            && kept.iter().any(|k| {
                                k.shard(shard)
                                    .is_some_and(|ks| ks.files.iter().any(|f| f.epoch == epoch && f.kind == kind))
                            });
                        // A delta older than the latest snapshot that no
                        // kept manifest lists was abandoned (a snapshot a
                        // cluster rolled back from): snapshots in progress
                        // are newer, compactions write bases.
                        let abandoned = !tmp && kind == Kind::Delta && epoch < m.epoch;
                        !listed && (epoch <= s.files[0].epoch || abandoned)
                    }
                    None => false,
                }
            } else {
                false
            };
            if remove {
                let path = self.dir.join(&name);
                fsutil::remove(&path)?;
                removed.push(path);
            }
        }
        if !removed.is_empty() {
            fsutil::sync_dir(&self.dir)?;
        }
        Ok(removed)
    }
}

/// Every complete manifest in `snapshot_dir`, by generation (incomplete
/// ones skipped).
pub fn complete_manifests(snapshot_dir: &Path) -> Result<Vec<Manifest>> {
    let mut gens: Vec<u64> = fsutil::list(snapshot_dir)?
        .iter()
        .filter_map(|n| parse_manifest_name(n))
        .collect();
    gens.sort_unstable();
    let mut out = Vec::new();
    for g in gens {
        if let ManifestRead::Complete(m) = read_manifest(&snapshot_dir.join(manifest_name(g)))? {
            out.push(m);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(shard: ShardId, epoch: Epoch, parent: Epoch) -> FileRef {
        FileRef {
            shard,
            kind: Kind::Delta,
            epoch,
            parent_epoch: parent,
            bytes: 100,
            entries: 1,
            crc: 7,
        }
    }

    #[test]
    fn snapshots_extend_chains() {
        let m1 = Manifest::snapshot(None, 5, vec![file(1, 5, 0), file(0, 5, 0)]).unwrap();
        assert_eq!(m1.shards[0].shard, 0);
        let m2 = Manifest::snapshot(Some(&m1), 9, vec![file(0, 9, 5), file(1, 9, 5)]).unwrap();
        assert_eq!(m2.shard(1).unwrap().files.len(), 2);
        assert_eq!(m2.shard(1).unwrap().log_after, 9);
        // A delta against a snapshot that never committed.
        let err = Manifest::snapshot(Some(&m2), 12, vec![file(0, 12, 10), file(1, 12, 9)]).unwrap_err();
        assert!(
            err.to_string().contains("latest committed snapshot is at epoch 9"),
            "{err}"
        );
        // A shard missing.
        assert!(Manifest::snapshot(Some(&m2), 12, vec![file(0, 12, 9)]).is_err());
        // Compaction keeps later deltas.
        let m3 = Manifest::snapshot(Some(&m2), 12, vec![file(0, 12, 9), file(1, 12, 9)]).unwrap();
        let base = FileRef {
            kind: Kind::Base,
            parent_epoch: 0,
            ..file(0, 9, 0)
        };
        let c = m3.compacted(base).unwrap();
        let chain: Vec<Epoch> = c.shard(0).unwrap().files.iter().map(|f| f.epoch).collect();
        assert_eq!(chain, [9, 12]);
        assert_eq!(c.shard(0).unwrap().files[0].kind, Kind::Base);
    }

    #[test]
    fn an_absurd_body_length_is_an_incomplete_commit() {
        let m = Manifest::snapshot(None, 5, vec![file(0, 5, 0)]).unwrap();
        let mut bytes = m.encode().unwrap();
        assert_eq!(decode_manifest(Path::new("m"), &bytes).unwrap(), Some(m));
        // A length near 2^64 under a header checksum that holds (it
        // overflowed the length check).
        bytes[32..40].copy_from_slice(&u64::MAX.to_le_bytes());
        let crc = crc32c(&bytes[..60]);
        bytes[60..64].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(decode_manifest(Path::new("m"), &bytes).unwrap(), None);
    }

    #[test]
    fn manifest_names() {
        assert_eq!(parse_manifest_name(&manifest_name(42)), Some(42));
        assert_eq!(parse_manifest_name("manifest-42"), None);
        assert_eq!(parse_manifest_name(&format!("{}.tmp", manifest_name(42))), None);
    }
}
