//! The data directory: one per engine process.
//!
//! ```text
//! DIR/
//!   LOCK        flock'ed (exclusive) by the process using DIR; holds its pid
//!   VERSION     "styx data format 1\n": the format of everything below
//!   wal/        wal-<shard:4>-<first epoch:20>.log        (see `wal`)
//!   snapshot/   snap-<shard:4>-<epoch:20>.delta | .base   (see `snapshot`)
//!               manifest-<generation:20>
//! ```
//!
//! Numbers in names are zero-padded decimal, so names sort in numeric order.
//!
//! Invariants and reasons:
//! - One process at a time: two writers appending to the same log would
//!   interleave records and destroy it. The lock is `flock` on an open file
//!   description, so it is released when the process dies (no stale lock to
//!   clean up by hand) and a second open of the file in the same process is
//!   refused too.
//! - The VERSION file is written once, atomically, when the directory is
//!   created; a build that reads another version refuses to touch anything.
//! - A non-empty directory without VERSION is refused: pointing the engine
//!   at the wrong directory must not scribble into it.

use crate::FORMAT_VERSION;
use crate::error::{Error, Result};
use crate::fsutil;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

pub const LOCK_FILE: &str = "LOCK";
pub const VERSION_FILE: &str = "VERSION";
pub const WAL_DIR: &str = "wal";
pub const SNAPSHOT_DIR: &str = "snapshot";

/// The VERSION file's content is at most this long.
const VERSION_FILE_BYTES_MAX: u64 = 256;

/// An open, locked data directory. Dropping it releases the lock.
#[derive(Debug)]
pub struct DataDir {
    root: PathBuf,
    /// Holds the `flock`; closing the file releases it.
    _lock: File,
}

impl DataDir {
    /// Opens (creating it if needed) the data directory at `root` and locks
    /// it for this process.
    pub fn open(root: impl AsRef<Path>) -> Result<DataDir> {
        let root = root.as_ref().to_path_buf();
        fs::create_dir_all(&root).map_err(Error::io("create directory", &root))?;
        // Absolute from here on: glommio opens directories relative to no
        // working directory (a relative path fails with EBADF).
        let root = fs::canonicalize(&root).map_err(Error::io("resolve directory", &root))?;
        let version_path = root.join(VERSION_FILE);
        // Before creating anything in it: is this directory ours?
        if !version_path.exists() && !is_fresh(&root)? {
            return Err(Error::NotDataDir { dir: root });
        }

        let lock_path = root.join(LOCK_FILE);
        let mut lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(Error::io("open", &lock_path))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                let mut text = String::new();
                let pid = match lock.read_to_string(&mut text) {
                    Ok(_) => text.trim().parse().ok(),
                    Err(_) => None,
                };
                return Err(Error::Locked { dir: root, pid });
            }
            Err(fs::TryLockError::Error(e)) => return Err(Error::io("lock", &lock_path)(e)),
        }
        lock.set_len(0).map_err(Error::io("write", &lock_path))?;
        writeln!(lock, "{}", std::process::id()).map_err(Error::io("write", &lock_path))?;

        if version_path.exists() {
            let found = read_version(&version_path)?;
            if found != u32::from(FORMAT_VERSION) {
                return Err(Error::Version {
                    path: version_path,
                    what: "data directory",
                    found,
                    expected: u32::from(FORMAT_VERSION),
                });
            }
        } else {
            if !is_fresh(&root)? {
                return Err(Error::NotDataDir { dir: root });
            }
            fsutil::write_atomic(&version_path, version_text(u32::from(FORMAT_VERSION)).as_bytes())?;
        }

        for sub in [WAL_DIR, SNAPSHOT_DIR] {
            let p = root.join(sub);
            if !p.exists() {
                fs::create_dir(&p).map_err(Error::io("create directory", &p))?;
                fsutil::sync_dir(&root)?;
            }
        }
        Ok(DataDir { root, _lock: lock })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the shards' log segments live.
    pub fn wal_dir(&self) -> PathBuf {
        self.root.join(WAL_DIR)
    }

    /// Where snapshot files and manifests live.
    pub fn snapshot_dir(&self) -> PathBuf {
        self.root.join(SNAPSHOT_DIR)
    }
}

/// Whether `root` holds nothing but what an interrupted first open leaves
/// (the lock file, a temporary VERSION).
fn is_fresh(root: &Path) -> Result<bool> {
    Ok(fsutil::list(root)?
        .iter()
        .all(|n| n == LOCK_FILE || n == VERSION_FILE || *n == format!("{VERSION_FILE}.tmp")))
}

pub(crate) fn version_text(version: u32) -> String {
    format!("styx data format {version}\n")
}

/// Reads the version number from a VERSION file.
pub(crate) fn read_version(path: &Path) -> Result<u32> {
    let mut text = String::new();
    File::open(path)
        .and_then(|f| f.take(VERSION_FILE_BYTES_MAX).read_to_string(&mut text))
        .map_err(Error::io("read", path))?;
    text.trim()
        .strip_prefix("styx data format ")
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| Error::Magic {
            path: path.to_path_buf(),
            what: "VERSION file",
            found: text.bytes().take(16).collect(),
        })
}
