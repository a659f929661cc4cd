//! Epoch-aligned incremental snapshots: per shard a chain of files (a base,
//! then deltas), and manifests that make a snapshot complete.
//!
//! # Protocol
//!
//! At the end of epoch `E` each shard writes a delta file holding the keys
//! it changed since its previous snapshot (deleted keys as tombstones) and
//! an opaque metadata blob from the engine (sequencer counter, partition
//! map and layout, client dedup table), off the hot path
//! ([`write_entities`] for the engine's `SnapshotChunk` entries,
//! [`write_delta`] for raw bytes, or a streaming [`FileWriter`]; blocking
//! I/O: run it on a helper thread, e.g. glommio's `spawn_blocking`). When every shard's delta is durable, one
//! owner of the [`Catalog`] commits a manifest listing, per shard, its
//! chain of files and the log position to replay from. **A snapshot is
//! complete only when its manifest exists**; a crash before that leaves
//! files that nothing references (removed by [`Catalog::gc`]).
//!
//! Loading ([`load`]) reads the latest complete manifest and merges each
//! shard's chain, base first, later files winning, tombstones applied.
//! [`compact`] merges a chain into a new base (in the background), and
//! [`Manifest::compacted`] + [`Catalog::commit`] swap it in.
//!
//! Invariants, checked when written and when read:
//! - entries of a file are sorted by `(op, key)`, each key at most once, so
//!   merging is a streaming k-way merge with memory bounded by one chunk
//!   per file;
//! - a chain starts with a file whose parent epoch is 0, and each later
//!   file's parent epoch is the epoch of the file before it: a delta taken
//!   against a snapshot that never committed is refused at commit;
//! - a base holds no tombstones;
//! - every byte is covered by a CRC32C; rkyv archives are validated once,
//!   when their chunk is loaded.
//!
//! # Files (in `DIR/snapshot/`)
//!
//! `snap-<shard:4>-<epoch:20>.base` or `.delta`, written as `*.tmp`,
//! synced and renamed; `manifest-<generation:20>`, written the same way.
//!
//! Snapshot file, little-endian:
//!
//! | offset | bytes | field                                                 |
//! |-------:|------:|-------------------------------------------------------|
//! | 0      | 8     | magic `"STYXSNAP"`                                    |
//! | 8      | 2     | format version                                        |
//! | 10     | 1     | kind: 1 = base, 2 = delta                             |
//! | 11     | 1     | zero                                                  |
//! | 12     | 2     | shard                                                 |
//! | 14     | 2     | zero                                                  |
//! | 16     | 8     | epoch                                                 |
//! | 24     | 8     | parent epoch (0: the chain starts here)               |
//! | 32     | 8     | metadata length `m`                                   |
//! | 40     | 4     | CRC32C of the metadata                                |
//! | 44     | 16    | zero                                                  |
//! | 60     | 4     | CRC32C of bytes 0..60                                 |
//! | 64     | m     | metadata (opaque to this crate)                       |
//!
//! then chunks, each a 16-byte header — magic `"CHNK"`, body length,
//! entry count, CRC32C of the body (4 bytes each) — and a body: the rkyv
//! archive of a `Vec<Entry>` (`op: u16`, `key: Box<[u8]>`,
//! `value: Option<Box<[u8]>>`), chunks in key order; then a 32-byte footer:
//! magic `"STYXEND\0"`, chunk count (8), entry count (8), CRC32C of every
//! byte before the footer (4), CRC32C of the footer's first 28 bytes (4).
//!
//! Chunks exist because rkyv's relative pointers are 32-bit (an archive
//! must stay well below 2 GiB) and so that neither writing nor merging
//! holds a whole shard's state in one buffer.
//!
//! Manifest: a 64-byte header — magic `"STYXMANI"`, version (2), zero (6),
//! generation (8), epoch (8), body length (8), body CRC32C (4), zero (16),
//! header CRC32C (4) — then the rkyv archive of a [`Manifest`].

mod entities;
mod file;
mod manifest;
mod merge;

pub use entities::{load_entities, write_entities};
pub use file::{FileReader, FileWriter, Footer, Header, write_delta};
pub(crate) use manifest::parse_manifest_name;
pub use manifest::{
    Catalog, Ignored, Latest, Manifest, ShardSnapshot, complete_manifests, decode_manifest, latest, manifest_name,
};
pub use merge::{Loaded, compact, load, load_vec};

use styx_engine::{Epoch, ShardId};

/// Entries are cut into chunks of about this many bytes.
pub const CHUNK_BYTES_TARGET: usize = 1 << 20;
/// At most this many entries per chunk.
pub const CHUNK_ENTRIES_MAX: usize = 64 << 10;
/// A value longer than this is refused (one chunk must stay far below
/// rkyv's 2 GiB reach).
pub const VALUE_BYTES_MAX: usize = 256 << 20;
/// The metadata blob of one shard.
pub const META_BYTES_MAX: u64 = 1 << 30;
/// Files in one shard's chain; compact before reaching it.
pub const CHAIN_FILES_MAX: usize = 1024;
/// Shards in one manifest.
pub const MANIFEST_SHARDS_MAX: usize = styx_engine::SHARDS_MAX;
/// A manifest's body.
pub const MANIFEST_BYTES_MAX: u64 = 64 << 20;

/// Whether a file holds a whole state or changes to the one before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
#[rkyv(derive(Debug))]
pub enum Kind {
    /// The merged state of a chain (no tombstones).
    Base,
    /// Keys changed since the parent epoch; `None` values delete.
    Delta,
}

impl Kind {
    fn code(self) -> u8 {
        match self {
            Kind::Base => 1,
            Kind::Delta => 2,
        }
    }

    fn from_code(code: u8) -> Option<Kind> {
        match code {
            1 => Some(Kind::Base),
            2 => Some(Kind::Delta),
            _ => None,
        }
    }

    fn extension(self) -> &'static str {
        match self {
            Kind::Base => "base",
            Kind::Delta => "delta",
        }
    }
}

/// A finished snapshot file, as a manifest lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
#[rkyv(derive(Debug))]
pub struct FileRef {
    pub shard: ShardId,
    pub kind: Kind,
    pub epoch: Epoch,
    pub parent_epoch: Epoch,
    /// The file's length.
    pub bytes: u64,
    pub entries: u64,
    /// The CRC32C of every byte before the footer.
    pub crc: u32,
}

impl FileRef {
    pub fn name(&self) -> String {
        file_name(self.shard, self.epoch, self.kind)
    }
}

/// One entry of a snapshot file: a key's value, or its deletion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, rkyv::Archive, rkyv::Serialize)]
pub struct Entry<'a> {
    /// The operator ([`OpId`](styx_engine::OpId)).
    pub op: u16,
    #[rkyv(with = rkyv::with::InlineAsBox)]
    pub key: &'a [u8],
    /// The value's bytes (an rkyv archive of the engine's), `None` for a
    /// tombstone.
    #[rkyv(with = rkyv::with::Map<rkyv::with::InlineAsBox>)]
    pub value: Option<&'a [u8]>,
}

/// The file name of a snapshot file.
pub fn file_name(shard: ShardId, epoch: Epoch, kind: Kind) -> String {
    format!("snap-{shard:04}-{epoch:020}.{}", kind.extension())
}

/// Parses a snapshot file name (or its temporary name) into
/// `(shard, epoch, kind, temporary)`.
pub fn parse_file_name(name: &str) -> Option<(ShardId, Epoch, Kind, bool)> {
    let (name, tmp) = match name.strip_suffix(".tmp") {
        Some(n) => (n, true),
        None => (name, false),
    };
    let rest = name.strip_prefix("snap-")?;
    let (stem, ext) = rest.split_once('.')?;
    let kind = match ext {
        "base" => Kind::Base,
        "delta" => Kind::Delta,
        _ => return None,
    };
    let (shard, epoch) = stem.split_once('-')?;
    if shard.len() != 4 || epoch.len() != 20 {
        return None;
    }
    Some((shard.parse().ok()?, epoch.parse().ok()?, kind, tmp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_roundtrip() {
        let n = file_name(2, 40, Kind::Delta);
        assert_eq!(n, "snap-0002-00000000000000000040.delta");
        assert_eq!(parse_file_name(&n), Some((2, 40, Kind::Delta, false)));
        assert_eq!(parse_file_name(&format!("{n}.tmp")), Some((2, 40, Kind::Delta, true)));
        assert_eq!(parse_file_name("snap-2-40.delta"), None);
    }
}
