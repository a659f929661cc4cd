//! The engine's side of snapshot files: its `(OpId, Key, Option<Value>)`
//! entries in, `(OpId, Key, Value)` out, without a copy per entry on the way
//! in (a value's bytes go from the engine's buffer into the chunk).

use super::file::FileWriter;
use super::merge::{Loaded, load};
use super::{FileRef, Kind, Manifest};
use crate::dir::DataDir;
use crate::error::Result;
use std::path::Path;
use styx_engine::{Epoch, Key, OpId, ShardId, Value};

/// Writes the delta of `shard` at `epoch` from the engine's snapshot entries
/// (the `entries` of every `SnapshotChunk` of that snapshot, in any order;
/// each key at most once) and its `meta` (the last chunk's). Sorts
/// `entries`. `parent_epoch` is the epoch of the shard's previous snapshot
/// (0 for the first). Blocking: run it on a helper thread.
pub fn write_entities(
    dir: &DataDir,
    shard: ShardId,
    epoch: Epoch,
    parent_epoch: Epoch,
    meta: &[u8],
    entries: &mut [(OpId, Key, Option<Value>)],
) -> Result<FileRef> {
    entries.sort_unstable_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    let mut w = FileWriter::create(dir, Kind::Delta, shard, epoch, parent_epoch, meta)?;
    for (op, key, value) in entries.iter() {
        match value {
            Some(v) => v.with_aligned(|bytes| w.push(op.0, key.as_bytes(), Some(bytes)))?,
            None => w.push(op.0, key.as_bytes(), None)?,
        }
    }
    w.finish()
}

/// [`load`] into the engine's types: `f(op, key, value)` for every live
/// entity of `shard` (feed them to `Shard::load_snapshot_entity`, then
/// `Shard::restore(&loaded.meta)`).
pub fn load_entities(
    snapshot_dir: &Path,
    manifest: &Manifest,
    shard: ShardId,
    mut f: impl FnMut(OpId, Key, Value),
) -> Result<Loaded> {
    load(snapshot_dir, manifest, shard, |op, key, value| {
        f(OpId(op), Key::from_bytes(key), Value::from_bytes(value));
        Ok(())
    })
}
