//! Merging a shard's chain: loading a snapshot and compacting it.
//!
//! Every file of a chain is sorted by `(op, key)`, so the merged state is a
//! k-way merge: at each step the smallest key among the files' current
//! entries is taken from the newest file that holds it (later files win),
//! and a tombstone there drops the key. Memory: one chunk per file.
//! Compaction is the same merge written out as a base, so compacted and
//! uncompacted chains load identically by construction.

use super::file::{FileReader, FileWriter};
use super::{FileRef, Kind, Manifest};
use crate::dir::DataDir;
use crate::error::{Error, Result};
use std::path::Path;
use styx_engine::{Epoch, ShardId};

/// What loading a shard's snapshot returned besides its entries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loaded {
    pub shard: ShardId,
    /// The snapshot's epoch.
    pub epoch: Epoch,
    /// Replay the shard's log from the first record after this epoch.
    pub log_after: Epoch,
    /// The engine's metadata blob, from the chain's newest file.
    pub meta: Vec<u8>,
    /// Live entries handed out.
    pub entries: u64,
}

/// Loads `shard`'s state from the snapshot `manifest` describes (read it
/// with [`super::latest`] or [`super::Catalog`]): calls `f(op, key, value)`
/// for every live key, in `(op, key)` order, with every file verified
/// against the manifest. An error from `f` stops the load and is returned.
pub fn load(
    snapshot_dir: &Path,
    manifest: &Manifest,
    shard: ShardId,
    mut f: impl FnMut(u16, &[u8], &[u8]) -> Result<()>,
) -> Result<Loaded> {
    let s = manifest.shard(shard).ok_or_else(|| {
        Error::Snapshot(format!(
            "the snapshot of epoch {} has no shard {shard} (it lists {} shards): was the shard count changed?",
            manifest.epoch,
            manifest.shards.len()
        ))
    })?;
    let mut readers = open_chain(snapshot_dir, &s.files)?;
    let meta = readers.last().expect("a chain is not empty").meta().to_vec();
    let mut entries = 0u64;
    merge(&mut readers, |op, key, value| match value {
        Some(v) => {
            entries += 1;
            f(op, key, v)
        }
        None => Ok(()),
    })?;
    for (r, fr) in readers.iter().zip(&s.files) {
        r.check_ref(fr)?;
    }
    Ok(Loaded {
        shard,
        epoch: manifest.epoch,
        log_after: s.log_after,
        meta,
        entries,
    })
}

/// [`load`] into a vector of `(op, key, value)`.
#[allow(clippy::type_complexity)]
pub fn load_vec(
    snapshot_dir: &Path,
    manifest: &Manifest,
    shard: ShardId,
) -> Result<(Loaded, Vec<(u16, Vec<u8>, Vec<u8>)>)> {
    let mut out = Vec::new();
    let loaded = load(snapshot_dir, manifest, shard, |op, k, v| {
        out.push((op, k.to_vec(), v.to_vec()));
        Ok(())
    })?;
    Ok((loaded, out))
}

/// Merges `shard`'s chain in `manifest` into a new base at the chain's
/// newest epoch (metadata from the newest file, tombstones dropped).
/// Returns `None` when the chain is a single file (nothing to gain). Commit
/// the result with `catalog.commit(catalog.latest().compacted(base)?)`.
/// Blocking and long: run it on a helper thread.
pub fn compact(dir: &DataDir, manifest: &Manifest, shard: ShardId) -> Result<Option<FileRef>> {
    let s = manifest
        .shard(shard)
        .ok_or_else(|| Error::Snapshot(format!("no shard {shard} in the snapshot of epoch {}", manifest.epoch)))?;
    if s.files.len() < 2 {
        return Ok(None);
    }
    let newest = *s.files.last().expect("not empty");
    let mut readers = open_chain(&dir.snapshot_dir(), &s.files)?;
    let meta = readers.last().expect("not empty").meta().to_vec();
    let mut w = FileWriter::create(dir, Kind::Base, shard, newest.epoch, 0, &meta)?;
    merge(&mut readers, |op, key, value| match value {
        Some(v) => w.push(op, key, Some(v)),
        None => Ok(()),
    })?;
    for (r, fr) in readers.iter().zip(&s.files) {
        r.check_ref(fr)?;
    }
    w.finish().map(Some)
}

fn open_chain(snapshot_dir: &Path, files: &[FileRef]) -> Result<Vec<FileReader>> {
    files
        .iter()
        .map(|fr| {
            let r = FileReader::open(&snapshot_dir.join(fr.name()))?;
            r.check_header_ref(fr)?;
            Ok(r)
        })
        .collect()
}

/// The k-way merge: `emit(op, key, Some(value) | None)` once per distinct
/// key, newest file winning. Ends with every reader at its footer.
///
/// A chain is mostly its base, so after each full step (every file's
/// current entry compared) the file that held the smallest key, if it alone
/// held it, goes on emitting while its keys stay below every other file's
/// current key: one comparison per entry instead of two per file.
fn merge(readers: &mut [FileReader], mut emit: impl FnMut(u16, &[u8], Option<&[u8]>) -> Result<()>) -> Result<()> {
    let mut key = Vec::new();
    // The smallest current key of the files other than the one emitting.
    let mut bound: Vec<u8> = Vec::new();
    loop {
        // The smallest current key, the newest file holding it, and the
        // smallest current key of the other files (the bound of a run).
        let mut min: Option<(u16, &[u8], usize)> = None;
        let mut next: Option<(u16, &[u8])> = None;
        for (i, r) in readers.iter().enumerate() {
            if let Some(e) = r.peek() {
                match min {
                    Some((op, k, _)) if (e.op, e.key) > (op, k) => {
                        if next.is_none_or(|n| (e.op, e.key) < n) {
                            next = Some((e.op, e.key));
                        }
                    }
                    Some((op, k, _)) if (e.op, e.key) == (op, k) => min = Some((e.op, e.key, i)),
                    Some((op, k, _)) => {
                        next = Some((op, k));
                        min = Some((e.op, e.key, i));
                    }
                    None => min = Some((e.op, e.key, i)),
                }
            }
        }
        let Some((op, k, newest)) = min else {
            break;
        };
        let value = readers[newest].peek().expect("current").value;
        emit(op, k, value)?;
        key.clear();
        key.extend_from_slice(k);
        let bound_op = next.map(|(op, b)| {
            bound.clear();
            bound.extend_from_slice(b);
            op
        });
        let mut holders = 0;
        for r in readers.iter_mut() {
            if r.peek().is_some_and(|e| (e.op, e.key) == (op, key.as_slice())) {
                r.advance()?;
                holders += 1;
            }
        }
        if holders != 1 {
            continue;
        }
        // A run: the other files did not move, so every key of `newest`
        // below `bound` is in no other file.
        let r = &mut readers[newest];
        while let Some(e) = r.peek() {
            if bound_op.is_some_and(|b| (e.op, e.key) >= (b, bound.as_slice())) {
                break;
            }
            emit(e.op, e.key, e.value)?;
            r.advance()?;
        }
    }
    for r in readers.iter() {
        assert!(r.footer().is_some(), "merge ended before {}", r.path().display());
    }
    Ok(())
}
