//! The crate's one error type.
//!
//! Operating errors (a disk full, a directory in use, a file damaged in the
//! middle) are values with messages that name the file and say what to do.
//! Broken invariants of the caller (appending epochs out of order, a shard's
//! batch handed to another shard's log) are asserts: they are bugs, and
//! writing on after one would corrupt the data we exist to protect.

use std::io;
use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A system call failed. A failed `fsync`/`fdatasync` lands here too and
    /// is fatal for the process: stop and recover, never retry (the kernel
    /// may have dropped the dirty pages it could not write).
    #[error("cannot {op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error(
        "data directory {dir} is in use by another process{}: stop that process, or point this one at another directory",
        match .pid { Some(pid) => format!(" (pid {pid})"), None => String::new() }
    )]
    Locked { dir: PathBuf, pid: Option<u32> },

    #[error(
        "{dir} is not empty and has no VERSION file, so it is not a Styx data directory: pass an empty or new directory"
    )]
    NotDataDir { dir: PathBuf },

    #[error(
        "{path}: {what} of format version {found}, but this build reads version {expected}: run a Styx build of version {found}, or restore a data directory written by this one"
    )]
    Version {
        path: PathBuf,
        what: &'static str,
        found: u32,
        expected: u32,
    },

    #[error("{path}: not a Styx {what} (its magic bytes are {found:02x?}): is this the right file or directory?")]
    Magic {
        path: PathBuf,
        what: &'static str,
        found: Vec<u8>,
    },

    /// Damage that is not a torn tail: valid data follows it, or a checksum
    /// holds but the content contradicts itself. Never skipped silently.
    #[error(
        "{path} is damaged at byte {offset}: {reason}. Data after this point cannot be trusted; restore the directory from a backup or replica (`styx inspect` describes the damage)"
    )]
    Corrupt { path: PathBuf, offset: u64, reason: String },

    #[error(
        "the log of shard {shard} is missing epochs after {after}: its next record is epoch {epoch}, whose predecessor was epoch {prev}. Log segments were removed before a snapshot covered them; restore them or a later snapshot"
    )]
    Gap {
        shard: u16,
        after: u64,
        epoch: u64,
        prev: u64,
    },

    #[error(
        "a log record of {bytes} bytes exceeds the limit of {max} bytes: lower the epoch size (epoch_txns_max) or the request payload sizes"
    )]
    RecordTooLarge { bytes: u64, max: u64 },

    #[error(
        "the log of shard {shard} already holds epoch {epoch} at {path}, after epoch {after} where writing should resume: run recovery (wal::recover) before opening a writer"
    )]
    LogAhead {
        shard: u16,
        path: PathBuf,
        epoch: u64,
        after: u64,
    },

    /// A snapshot file or manifest does not fit where it is used.
    #[error("snapshot: {0}")]
    Snapshot(String),

    #[error("{path}: {what} is missing: the snapshot that lists it cannot be loaded; restore the file from a backup")]
    Missing { path: PathBuf, what: &'static str },
}

impl Error {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { op, path, source }
    }

    pub(crate) fn corrupt(path: impl Into<PathBuf>, offset: u64, reason: impl Into<String>) -> Error {
        Error::Corrupt {
            path: path.into(),
            offset,
            reason: reason.into(),
        }
    }
}
