//! Preloading: an initial state written as a fresh data directory's first
//! snapshot, before the engine starts.
//!
//! A benchmark against a daemon needs the workload's initial state (10 M
//! accounts, TPC-C's warehouses) in the engine. Sending it as transactions
//! is slow and goes through the log; instead the daemon writes it as a
//! complete snapshot — one base file per shard and a manifest — and then
//! recovers from it like from any snapshot. Once the manifest is committed
//! the state is durable: a crash right after start keeps it.
//!
//! The snapshot is taken "at the end of epoch [`PRELOAD_EPOCH`]", an epoch
//! that ran no transaction: snapshot files extend a parent epoch that must
//! be smaller, and a chain starts at parent 0, so epoch 0 cannot name one.
//! Each shard's metadata is that of a fresh shard which ran that empty
//! epoch (no sequencer progress, no clients); it is checked against
//! [`Shard::restore`] before anything is written, so a change of the
//! engine's metadata format fails here, loudly, not at the next recovery.
//!
//! Entities come from a loader that may emit them in any order. Snapshot
//! files need them sorted per shard, so the first pass streams them
//! straight into the files while every shard's entities arrive in order
//! (YCSB-T's accounts do: 10 M of them never sit in memory together); at
//! the first entity out of order it gives up, and a second pass gathers
//! each shard's entities, sorts and writes them.
//!
//! A marker file (`PRELOAD`, written first) names what was preloaded, so a
//! restart can tell a directory that holds this preload from one holding
//! something else.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use styx_engine::{App, Config, Epoch, Key, OpId, Payload, Shard, ShardId, Value};
use styx_storage::snapshot::{Catalog, FileRef, FileWriter, Kind, Manifest};
use styx_storage::{DataDir, Error};

/// The epoch a preloaded snapshot is taken at (see the module comment).
pub const PRELOAD_EPOCH: Epoch = 1;
/// The marker file in the data directory's root.
pub const MARKER_FILE: &str = "PRELOAD";
/// The version of the engine's snapshot metadata this module writes; a
/// mismatch with the engine is caught by [`fresh_meta`]'s check.
const META_VERSION: u8 = 2;

/// Calls its argument with every entity of an initial state.
pub type Loader<'a> = &'a dyn Fn(&mut dyn FnMut(OpId, Key, Value));

/// What a preload wrote.
#[derive(Clone, Copy, Debug)]
pub struct Preloaded {
    pub entities: u64,
    /// Bytes of the snapshot files.
    pub bytes: u64,
    /// Whether one streaming pass sufficed (else entities were sorted in memory).
    pub streamed: bool,
}

/// Whether `dir` holds no state yet: no complete snapshot and no log.
pub fn is_fresh(dir: &DataDir) -> Result<bool, Error> {
    let catalog = Catalog::open(dir)?;
    Ok(catalog.latest().is_none() && styx_storage::wal::shards(&dir.wal_dir())?.is_empty())
}

/// The label of the preload `dir` was made from, if any.
pub fn marker(dir: &DataDir) -> Result<Option<String>, Error> {
    let path = dir.root().join(MARKER_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(Some(text.trim_end().to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io("read", &path)(e)),
    }
}

/// The metadata of a shard that ran `epoch` empty epochs, checked by
/// restoring it into a scratch shard of `app`.
fn fresh_meta(app: &Arc<App>, shards: u16, epoch: Epoch) -> Result<Vec<u8>, Error> {
    // (version, epoch, sequencer counter, clients): see `Shard::restore`.
    let meta = Payload::encode(&(META_VERSION, epoch, 0u64, Vec::<()>::new()))
        .as_bytes()
        .to_vec();
    let mut scratch = Shard::new(app.clone(), Config::default(), 0, shards);
    match scratch.restore(&meta) {
        Ok(e) if e == epoch => Ok(meta),
        other => Err(Error::Snapshot(format!(
            "the engine no longer reads the preload's snapshot metadata ({other:?}): update runtime/src/preload.rs"
        ))),
    }
}

fn io(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.to_path_buf();
    move |source| Error::Io { op, path, source }
}

fn write_marker(dir: &DataDir, label: &str) -> Result<(), Error> {
    let path = dir.root().join(MARKER_FILE);
    let tmp = dir.root().join(format!("{MARKER_FILE}.tmp"));
    let mut f = std::fs::File::create(&tmp).map_err(io("create", &tmp))?;
    writeln!(f, "{label}").map_err(io("write", &tmp))?;
    f.sync_all().map_err(io("fsync", &tmp))?;
    std::fs::rename(&tmp, &path).map_err(io("rename", &tmp))?;
    sync_dir(dir.root())
}

fn sync_dir(path: &Path) -> Result<(), Error> {
    std::fs::File::open(path)
        .and_then(|d| d.sync_all())
        .map_err(io("fsync", path))
}

/// Writes the state `load` emits as the first snapshot of the fresh data
/// directory `dir`, for the shards `local` of an engine of `shards` shards
/// of `app` (all of them on a single node; a node's own in a cluster, where
/// every node preloads its part; a node of none commits an empty snapshot),
/// under the marker `label`. Blocking; run
/// it before the engine starts.
///
/// # Panics
/// If `dir` is not fresh ([`is_fresh`]): the caller decides what to do
/// with a directory that holds state.
pub fn write(
    dir: &DataDir,
    app: &Arc<App>,
    shards: u16,
    local: Vec<ShardId>,
    label: &str,
    load: Loader<'_>,
) -> Result<Preloaded, Error> {
    assert!(is_fresh(dir)?, "preload into a data directory that holds state");
    assert!(!label.contains('\n'), "a one-line label");
    assert!(
        local.windows(2).all(|w| w[0] < w[1]) && local.iter().all(|s| *s < shards),
        "shards {local:?} of {shards}"
    );
    write_marker(dir, label)?;
    if local.is_empty() {
        // A spare of a cluster: it holds no entity, but commits the
        // snapshot with the others (a manifest of no shard), or the
        // cluster's first plan would find no snapshot every node holds
        // and restore none.
        Catalog::open(dir)?.commit(Manifest::snapshot(None, PRELOAD_EPOCH, Vec::new())?)?;
        return Ok(Preloaded {
            entities: 0,
            bytes: 0,
            streamed: true,
        });
    }
    let meta = fresh_meta(app, shards, PRELOAD_EPOCH)?;
    let layout = Layout { shards, local };
    let (files, streamed) = match stream(dir, app, &layout, &meta, load)? {
        Some(files) => (files, true),
        None => (sorted(dir, app, &layout, &meta, load)?, false),
    };
    let preloaded = Preloaded {
        entities: files.iter().map(|f| f.entries).sum(),
        bytes: files.iter().map(|f| f.bytes).sum(),
        streamed,
    };
    let manifest = Manifest::snapshot(None, PRELOAD_EPOCH, files)?;
    Catalog::open(dir)?.commit(manifest)?;
    Ok(preloaded)
}

/// The engine's shard count, and the shards whose files this directory
/// holds (in increasing order).
struct Layout {
    shards: u16,
    local: Vec<ShardId>,
}

impl Layout {
    /// The index among the local files of the shard owning `key`, if local.
    fn file_of(&self, app: &App, op: OpId, key: &Key) -> Option<usize> {
        let s = Shard::owner(app, self.shards, op, key);
        self.local.binary_search(&s).ok()
    }
}

fn writers(dir: &DataDir, layout: &Layout, meta: &[u8]) -> Result<Vec<FileWriter>, Error> {
    layout
        .local
        .iter()
        .map(|&s| FileWriter::create(dir, Kind::Base, s, PRELOAD_EPOCH, 0, meta))
        .collect()
}

fn push(w: &mut FileWriter, op: OpId, key: &Key, value: &Value) -> Result<(), Error> {
    value.with_aligned(|bytes| w.push(op.0, key.as_bytes(), Some(bytes)))
}

/// One pass straight into the files; `None` if some shard's entities came
/// out of order (the files are then left unfinished, to be overwritten).
fn stream(
    dir: &DataDir,
    app: &Arc<App>,
    layout: &Layout,
    meta: &[u8],
    load: Loader<'_>,
) -> Result<Option<Vec<FileRef>>, Error> {
    let mut files = writers(dir, layout, meta)?;
    let mut last: Vec<Option<(OpId, Key)>> = vec![None; layout.local.len()];
    let mut failed: Option<Error> = None;
    let mut out_of_order = false;
    load(&mut |op, key, value| {
        if out_of_order || failed.is_some() {
            return;
        }
        let Some(s) = layout.file_of(app, op, &key) else {
            return;
        };
        if last[s].as_ref().is_some_and(|(o, k)| (*o, k) >= (op, &key)) {
            out_of_order = true;
            return;
        }
        if let Err(e) = push(&mut files[s], op, &key, &value) {
            failed = Some(e);
        }
        last[s] = Some((op, key));
    });
    if let Some(e) = failed {
        return Err(e);
    }
    if out_of_order {
        return Ok(None);
    }
    files
        .into_iter()
        .map(FileWriter::finish)
        .collect::<Result<_, _>>()
        .map(Some)
}

/// Gathers each shard's entities, sorts them and writes the files.
fn sorted(
    dir: &DataDir,
    app: &Arc<App>,
    layout: &Layout,
    meta: &[u8],
    load: Loader<'_>,
) -> Result<Vec<FileRef>, Error> {
    let mut per_shard: Vec<Vec<(OpId, Key, Value)>> = vec![Vec::new(); layout.local.len()];
    load(&mut |op, key, value| {
        if let Some(s) = layout.file_of(app, op, &key) {
            per_shard[s].push((op, key, value));
        }
    });
    let mut files = writers(dir, layout, meta)?;
    for (w, mut entities) in files.iter_mut().zip(per_shard) {
        entities.sort_unstable_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        if let Some(pair) = entities.windows(2).find(|p| (p[0].0, &p[0].1) == (p[1].0, &p[1].1)) {
            return Err(Error::Snapshot(format!(
                "the preload emits entity {:?} {} twice",
                pair[0].0, pair[0].1
            )));
        }
        for (op, key, value) in &entities {
            push(w, *op, key, value)?;
        }
    }
    files.into_iter().map(FileWriter::finish).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fresh_metadata_is_what_the_engine_restores() {
        let mut app = App::new("t");
        app.operator("x", 4);
        let app = Arc::new(app);
        let meta = fresh_meta(&app, 3, PRELOAD_EPOCH).expect("the engine reads it");
        let mut shard = Shard::new(app, Config::default(), 2, 3);
        assert_eq!(shard.restore(&meta).unwrap(), PRELOAD_EPOCH);
    }
}
