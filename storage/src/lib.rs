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
//!
//! # Recovery, in order
//!
//! 1. [`DataDir::open`] — lock, check the version.
//! 2. [`snapshot::Catalog::open`] — the latest complete manifest (epoch
//!    `E`); per shard [`snapshot::load`] the state and the metadata blob.
//! 3. Per shard [`wal::recover`]`(dir, shard, log_after)` — the batches to
//!    replay (epochs after `E`), a torn tail cut and reported.
//! 4. Per shard [`wal::Writer::open`]`(dir, &recovered.tail, options)`, then serve.
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
mod fsutil;
pub mod inspect;
pub mod snapshot;
pub mod wal;

pub use dir::DataDir;
pub use error::{Error, Result};

/// The version of every on-disk format of this crate. Bump it when any
/// layout changes; readers refuse other versions.
pub const FORMAT_VERSION: u16 = 1;
