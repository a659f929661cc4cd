//! Small blocking file-system helpers shared by the formats.
//!
//! A file that must appear whole (a manifest, the VERSION file) is written
//! under a temporary name, synced, renamed into place, and its directory is
//! synced: after a crash the name either does not exist or holds the whole
//! content. Renaming alone is not enough: without the file's `fsync` the
//! name may survive with no data, without the directory's the rename itself
//! may be lost.

use crate::error::{Error, Result};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Makes the directory entries of `dir` (creations, renames, removals)
/// durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    let d = File::open(dir).map_err(Error::io("open directory", dir))?;
    d.sync_all().map_err(Error::io("fsync directory", dir))
}

/// Writes `bytes` to `path` so that a crash leaves either the old state or
/// the whole new file: temporary name, fsync, rename, fsync of the directory.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = temp_path(path);
    {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(Error::io("create", &tmp))?;
        f.write_all(bytes).map_err(Error::io("write", &tmp))?;
        f.sync_all().map_err(Error::io("fsync", &tmp))?;
    }
    fs::rename(&tmp, path).map_err(Error::io("rename into place", path))?;
    sync_dir(parent(path))
}

/// `name.tmp` beside `path`.
pub(crate) fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().expect("a file name").to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

pub(crate) fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// The names of the entries of `dir` (an absent directory has none).
pub fn list(dir: &Path) -> Result<Vec<String>> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("list", dir)(e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(Error::io("list", dir))?;
        if let Some(name) = entry.file_name().to_str() {
            names.push(name.to_owned());
        }
    }
    names.sort();
    Ok(names)
}

pub(crate) fn remove(path: &Path) -> Result<()> {
    fs::remove_file(path).map_err(Error::io("remove", path))
}
