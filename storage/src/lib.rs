//! Durability for Styx: the input log (WAL), epoch-aligned incremental
//! snapshots, the data directory that holds them, and the reading side of
//! recovery.
//!
//! The engine core is sans-I/O: it hands the runtime a sealed [`Batch`]
//! per shard and epoch, and state changes at snapshot time. This crate
//! turns those into files and back:
//!
//! - [`dir`]: the data directory — lock, format version, layout.
//! - [`wal`]: per-shard segments of checksummed epoch records; a glommio
//!   [`wal::Writer`] (O_DIRECT, one `fdatasync` per epoch) and a blocking
//!   [`wal::Reader`] that truncates torn tails and refuses corruption.
//! - [`snapshot`]: per-shard base and delta files (rkyv chunks), manifests
//!   that make a snapshot complete, loading, compaction, garbage collection.
//! - [`inspect`]: structured, printable descriptions of logs and snapshots
//!   with every checksum verified (for `styx inspect`).
//! - [`fuzz`]: every decoder over bytes in memory, for the fuzz targets
//!   (`storage/fuzz`) and the mutation test.
//!
//! # Recovery, in order
//!
//! 1. [`DataDir::open`] — lock, check the version.
//! 2. [`snapshot::complete_manifests`] — the complete snapshots
//!    ([`snapshot::Manifest::for_recovery`]).
//! 3. Per shard [`wal::recover`]`(dir, shard, log_after)` — the batches
//!    after the oldest kept snapshot, a torn tail cut and reported
//!    ([`wal::Recovered::into_log`]).
//! 4. The engine's pure `styx_engine::recovery::start` decides which
//!    snapshot to restore, what each shard replays and which empty batches
//!    its log gets (the runtime's `durable` module; the simulator's crash
//!    tests run the same function).
//! 5. Per shard [`snapshot::load_entities`] the state and the metadata blob,
//!    [`wal::Writer::open`]`(dir, &tail, options)`, the empty batches
//!    appended, then serve.
//!
//! Every on-disk integer is little-endian; every byte is covered by a
//! CRC32C. One format version ([`FORMAT_VERSION`]) covers the directory;
//! each file repeats it so that a stray file is refused on its own.
//!
//! No `unsafe`: rkyv archives are validated once when read, and the
//! positions of their bytes recorded then, so later access needs no
//! unchecked casts.
//!
//! [`Batch`]: styx_engine::Batch

#![forbid(unsafe_code)]

mod crc;
pub mod dir;
mod error;
pub mod fsutil;
pub mod fuzz;
pub mod inspect;
pub mod snapshot;
pub mod wal;

pub use dir::DataDir;
pub use error::{Error, Result};

/// The version of every on-disk format of this crate. Bump it when any
/// layout changes; readers refuse other versions.
pub const FORMAT_VERSION: u16 = 1;
