//! One snapshot file (base or delta): a streaming writer and a streaming,
//! validating reader (layout in [`crate::snapshot`]).
//!
//! The writer takes entries in `(op, key)` order and cuts them into chunks
//! of about [`CHUNK_BYTES_TARGET`]; the reader holds one chunk at a time,
//! validated (checksum, rkyv bytecheck, order, limits) when it is read, so
//! that a merge of many files needs one chunk of memory per file.
//!
//! Keys and values are handed out as slices of the validated chunk buffer:
//! the validation records where each entry's bytes lie, so no `unsafe`
//! unchecked access is needed afterwards.

use super::{CHUNK_BYTES_TARGET, CHUNK_ENTRIES_MAX, Entry, FileRef, Kind, META_BYTES_MAX, VALUE_BYTES_MAX, file_name};
use crate::FORMAT_VERSION;
use crate::crc::{crc32c, crc32c_append};
use crate::dir::DataDir;
use crate::error::{Error, Result};
use crate::fsutil;
use rkyv::rancor::BoxedError;
use rkyv::util::AlignedVec;
use rkyv::vec::ArchivedVec;
use std::fs::{File, OpenOptions};
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use styx_engine::{Epoch, KEY_LEN_MAX, ShardId};

pub(crate) const MAGIC: [u8; 8] = *b"STYXSNAP";
const CHUNK_MAGIC: [u8; 4] = *b"CHNK";
const FOOTER_MAGIC: [u8; 8] = *b"STYXEND\0";
pub(crate) const HEADER_BYTES: usize = 64;
const CHUNK_HEADER_BYTES: usize = 16;
const FOOTER_BYTES: usize = 32;
/// A chunk body read back is at most this long (one value of
/// [`VALUE_BYTES_MAX`] plus a target-sized chunk, with room to spare).
const CHUNK_BYTES_MAX: u64 = 2 * VALUE_BYTES_MAX as u64;
/// I/O buffer of readers and writers.
const IO_BUFFER_BYTES: usize = 1 << 20;

const _: () = assert!(CHUNK_BYTES_MAX < (1 << 31), "rkyv relative pointers are 32-bit");
const _: () = assert!(CHUNK_BYTES_TARGET as u64 <= CHUNK_BYTES_MAX);

/// The fixed fields of a snapshot file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub shard: ShardId,
    pub epoch: Epoch,
    pub parent_epoch: Epoch,
    pub meta_len: u64,
    pub meta_crc: u32,
}

impl Header {
    fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut b = [0u8; HEADER_BYTES];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[10] = self.kind.code();
        b[12..14].copy_from_slice(&self.shard.to_le_bytes());
        b[16..24].copy_from_slice(&self.epoch.to_le_bytes());
        b[24..32].copy_from_slice(&self.parent_epoch.to_le_bytes());
        b[32..40].copy_from_slice(&self.meta_len.to_le_bytes());
        b[40..44].copy_from_slice(&self.meta_crc.to_le_bytes());
        let crc = crc32c(&b[..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        b
    }

    fn decode(path: &Path, b: &[u8; HEADER_BYTES]) -> Result<Header> {
        if b[0..8] != MAGIC {
            return Err(Error::Magic {
                path: path.to_path_buf(),
                what: "snapshot file",
                found: b[0..8].to_vec(),
            });
        }
        let version = u16::from_le_bytes([b[8], b[9]]);
        if version != FORMAT_VERSION {
            return Err(Error::Version {
                path: path.to_path_buf(),
                what: "snapshot file",
                found: u32::from(version),
                expected: u32::from(FORMAT_VERSION),
            });
        }
        if crc32c(&b[..60]) != u32::from_le_bytes(b[60..64].try_into().expect("4")) {
            return Err(Error::corrupt(path, 0, "the header checksum does not match"));
        }
        let kind = Kind::from_code(b[10]).ok_or_else(|| Error::corrupt(path, 10, format!("kind {}", b[10])))?;
        let h = Header {
            kind,
            shard: u16::from_le_bytes([b[12], b[13]]),
            epoch: u64::from_le_bytes(b[16..24].try_into().expect("8")),
            parent_epoch: u64::from_le_bytes(b[24..32].try_into().expect("8")),
            meta_len: u64::from_le_bytes(b[32..40].try_into().expect("8")),
            meta_crc: u32::from_le_bytes(b[40..44].try_into().expect("4")),
        };
        if h.epoch == 0 || h.parent_epoch >= h.epoch || (h.kind == Kind::Base && h.parent_epoch != 0) {
            return Err(Error::corrupt(
                path,
                16,
                format!("{:?} of epoch {} with parent epoch {}", h.kind, h.epoch, h.parent_epoch),
            ));
        }
        if h.meta_len > META_BYTES_MAX {
            return Err(Error::corrupt(path, 32, format!("metadata of {} bytes", h.meta_len)));
        }
        Ok(h)
    }
}

struct Pending {
    op: u16,
    key: (usize, usize),
    value: Option<(usize, usize)>,
}

/// Writes one snapshot file, entries in strictly increasing `(op, key)`
/// order. The file appears under its final name only when
/// [`FileWriter::finish`] has made it durable.
pub struct FileWriter {
    dir: PathBuf,
    path: PathBuf,
    tmp: PathBuf,
    out: BufWriter<File>,
    header: Header,
    crc: u32,
    bytes: u64,
    arena: Vec<u8>,
    pending: Vec<Pending>,
    last: Option<(u16, Vec<u8>)>,
    chunks: u64,
    entries: u64,
}

impl std::fmt::Debug for FileWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileWriter")
            .field("path", &self.path)
            .field("entries", &self.entries)
            .finish()
    }
}

impl FileWriter {
    /// Starts `snap-<shard>-<epoch>.<kind>` in the snapshot directory.
    /// `parent_epoch` is the epoch of the shard's previous snapshot file that
    /// this one extends (0: none, the chain starts here; always 0 for a base).
    pub fn create(
        dir: &DataDir,
        kind: Kind,
        shard: ShardId,
        epoch: Epoch,
        parent_epoch: Epoch,
        meta: &[u8],
    ) -> Result<FileWriter> {
        assert!(
            epoch > parent_epoch,
            "snapshot at epoch {epoch} with parent {parent_epoch}"
        );
        assert!(kind == Kind::Delta || parent_epoch == 0, "a base has no parent");
        if meta.len() as u64 > META_BYTES_MAX {
            return Err(Error::Snapshot(format!(
                "the metadata of shard {shard} is {} bytes, over the limit of {META_BYTES_MAX}",
                meta.len()
            )));
        }
        let snapshot_dir = dir.snapshot_dir();
        let path = snapshot_dir.join(file_name(shard, epoch, kind));
        let tmp = fsutil::temp_path(&path);
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(Error::io("create", &tmp))?;
        let header = Header {
            kind,
            shard,
            epoch,
            parent_epoch,
            meta_len: meta.len() as u64,
            meta_crc: crc32c(meta),
        };
        let mut w = FileWriter {
            dir: snapshot_dir,
            path,
            tmp,
            out: BufWriter::with_capacity(IO_BUFFER_BYTES, file),
            header,
            crc: 0,
            bytes: 0,
            arena: Vec::new(),
            pending: Vec::new(),
            last: None,
            chunks: 0,
            entries: 0,
        };
        w.put(&header.encode())?;
        w.put(meta)?;
        Ok(w)
    }

    /// Adds an entry.
    ///
    /// # Panics
    /// If entries come out of order or repeat a key, if a base gets a
    /// tombstone, or if a key exceeds [`KEY_LEN_MAX`].
    pub fn push(&mut self, op: u16, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        assert!(key.len() <= KEY_LEN_MAX, "key of {} bytes", key.len());
        assert!(
            self.header.kind == Kind::Delta || value.is_some(),
            "a tombstone in a base"
        );
        if let Some((last_op, last_key)) = &self.last {
            assert!(
                (op, key) > (*last_op, last_key.as_slice()),
                "snapshot entries out of order: ({op}, {key:02x?}) after ({last_op}, {last_key:02x?})"
            );
        }
        if let Some(v) = value
            && v.len() > VALUE_BYTES_MAX
        {
            return Err(Error::Snapshot(format!(
                "a value of {} bytes (operator {op}) exceeds the limit of {VALUE_BYTES_MAX}",
                v.len()
            )));
        }
        let k = self.arena.len();
        self.arena.extend_from_slice(key);
        let value = value.map(|v| {
            let at = self.arena.len();
            self.arena.extend_from_slice(v);
            (at, v.len())
        });
        self.pending.push(Pending {
            op,
            key: (k, key.len()),
            value,
        });
        let last = self.last.get_or_insert_with(|| (0, Vec::new()));
        last.0 = op;
        last.1.clear();
        last.1.extend_from_slice(key);
        if self.arena.len() >= CHUNK_BYTES_TARGET || self.pending.len() >= CHUNK_ENTRIES_MAX {
            self.flush_chunk()?;
        }
        Ok(())
    }

    /// Writes the last chunk and the footer, syncs the file, renames it into
    /// place and syncs the directory.
    pub fn finish(mut self) -> Result<FileRef> {
        self.flush_chunk()?;
        let mut footer = [0u8; FOOTER_BYTES];
        footer[0..8].copy_from_slice(&FOOTER_MAGIC);
        footer[8..16].copy_from_slice(&self.chunks.to_le_bytes());
        footer[16..24].copy_from_slice(&self.entries.to_le_bytes());
        footer[24..28].copy_from_slice(&self.crc.to_le_bytes());
        let fcrc = crc32c(&footer[..28]);
        footer[28..32].copy_from_slice(&fcrc.to_le_bytes());
        let crc = self.crc;
        self.put(&footer)?;
        let file = self
            .out
            .into_inner()
            .map_err(|e| Error::io("write", &self.tmp)(e.into_error()))?;
        file.sync_all().map_err(Error::io("fsync", &self.tmp))?;
        drop(file);
        std::fs::rename(&self.tmp, &self.path).map_err(Error::io("rename into place", &self.path))?;
        fsutil::sync_dir(&self.dir)?;
        Ok(FileRef {
            shard: self.header.shard,
            kind: self.header.kind,
            epoch: self.header.epoch,
            parent_epoch: self.header.parent_epoch,
            bytes: self.bytes,
            entries: self.entries,
            crc,
        })
    }

    fn put(&mut self, bytes: &[u8]) -> Result<()> {
        self.out.write_all(bytes).map_err(Error::io("write", &self.tmp))?;
        self.crc = crc32c_append(self.crc, bytes);
        self.bytes += bytes.len() as u64;
        Ok(())
    }

    fn flush_chunk(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let arena = &self.arena;
        let entries: Vec<Entry<'_>> = self
            .pending
            .iter()
            .map(|p| Entry {
                op: p.op,
                key: &arena[p.key.0..p.key.0 + p.key.1],
                value: p.value.map(|(at, len)| &arena[at..at + len]),
            })
            .collect();
        let body = rkyv::to_bytes::<BoxedError>(&entries)
            .map_err(|e| Error::Snapshot(format!("cannot archive a chunk of {}: {e}", self.path.display())))?;
        assert!(body.len() as u64 <= CHUNK_BYTES_MAX);
        let n = entries.len();
        drop(entries);
        let mut head = [0u8; CHUNK_HEADER_BYTES];
        head[0..4].copy_from_slice(&CHUNK_MAGIC);
        head[4..8].copy_from_slice(&(body.len() as u32).to_le_bytes());
        head[8..12].copy_from_slice(&(n as u32).to_le_bytes());
        head[12..16].copy_from_slice(&crc32c(&body).to_le_bytes());
        self.put(&head)?;
        self.put(&body)?;
        self.chunks += 1;
        self.entries += n as u64;
        self.arena.clear();
        self.pending.clear();
        Ok(())
    }
}

/// Writes a delta file of `shard` at `epoch`, extending its snapshot at
/// `parent_epoch` (0 for the first), with `meta` and `entries` (any order;
/// each key at most once). Blocking; returns what the manifest will list.
pub fn write_delta(
    dir: &DataDir,
    shard: ShardId,
    epoch: Epoch,
    parent_epoch: Epoch,
    meta: &[u8],
    entries: &mut [Entry<'_>],
) -> Result<FileRef> {
    entries.sort_unstable_by(|a, b| (a.op, a.key).cmp(&(b.op, b.key)));
    let mut w = FileWriter::create(dir, Kind::Delta, shard, epoch, parent_epoch, meta)?;
    for e in entries.iter() {
        w.push(e.op, e.key, e.value)?;
    }
    w.finish()
}

/// Where one entry's bytes lie in its chunk buffer.
struct Item {
    op: u16,
    key: (u32, u32),
    value: Option<(u32, u32)>,
}

/// One validated chunk.
struct Chunk {
    bytes: AlignedVec,
    items: Vec<Item>,
}

/// What the footer of a fully read file says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footer {
    pub chunks: u64,
    pub entries: u64,
    pub crc: u32,
}

/// Reads a snapshot file entry by entry, validating as it goes.
pub struct FileReader {
    path: PathBuf,
    input: Box<dyn Read + Send>,
    len: u64,
    offset: u64,
    crc: u32,
    header: Header,
    meta: Vec<u8>,
    chunk: Chunk,
    at: usize,
    last: Option<(u16, Vec<u8>)>,
    chunks: u64,
    entries: u64,
    tombstones: u64,
    footer: Option<Footer>,
}

impl std::fmt::Debug for FileReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileReader")
            .field("path", &self.path)
            .field("header", &self.header)
            .field("offset", &self.offset)
            .finish()
    }
}

impl FileReader {
    /// Opens `path`, checks its header and metadata, and reads the first
    /// chunk.
    pub fn open(path: &Path) -> Result<FileReader> {
        let file = File::open(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::Missing {
                    path: path.to_path_buf(),
                    what: "snapshot file",
                }
            } else {
                Error::io("open", path)(e)
            }
        })?;
        let len = file.metadata().map_err(Error::io("stat", path))?.len();
        FileReader::start(path, Box::new(BufReader::with_capacity(IO_BUFFER_BYTES, file)), len)
    }

    /// Reads a snapshot file's bytes from memory (`path` names it in
    /// errors), as [`FileReader::open`] reads a file. For fuzzing and tests.
    pub fn from_bytes(path: &Path, bytes: Vec<u8>) -> Result<FileReader> {
        let len = bytes.len() as u64;
        FileReader::start(path, Box::new(std::io::Cursor::new(bytes)), len)
    }

    fn start(path: &Path, input: Box<dyn Read + Send>, len: u64) -> Result<FileReader> {
        let mut r = FileReader {
            path: path.to_path_buf(),
            input,
            len,
            offset: 0,
            crc: 0,
            header: Header {
                kind: Kind::Delta,
                shard: 0,
                epoch: 1,
                parent_epoch: 0,
                meta_len: 0,
                meta_crc: 0,
            },
            meta: Vec::new(),
            chunk: Chunk {
                bytes: AlignedVec::new(),
                items: Vec::new(),
            },
            at: 0,
            last: None,
            chunks: 0,
            entries: 0,
            tombstones: 0,
            footer: None,
        };
        let mut head = [0u8; HEADER_BYTES];
        if len < HEADER_BYTES as u64 {
            // Report a short file by what its first bytes are.
            let mut some = vec![0u8; len as usize];
            r.read(&mut some)?;
            if len >= 8 && some[0..8] != MAGIC {
                return Err(Error::Magic {
                    path: path.to_path_buf(),
                    what: "snapshot file",
                    found: some[0..8].to_vec(),
                });
            }
            return Err(Error::corrupt(path, len, "the file ends inside its header"));
        }
        r.read(&mut head)?;
        r.header = Header::decode(path, &head)?;
        if r.header.meta_len > len {
            return Err(Error::corrupt(path, 32, "the metadata runs past the end of the file"));
        }
        let mut meta = vec![0u8; r.header.meta_len as usize];
        r.read(&mut meta)?;
        if crc32c(&meta) != r.header.meta_crc {
            return Err(Error::corrupt(
                path,
                HEADER_BYTES as u64,
                "the metadata checksum does not match",
            ));
        }
        r.meta = meta;
        r.next_chunk()?;
        Ok(r)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn header(&self) -> &Header {
        &self.header
    }

    pub fn meta(&self) -> &[u8] {
        &self.meta
    }

    /// The file's length.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The footer, once every entry has been read (and the footer checked).
    pub fn footer(&self) -> Option<Footer> {
        self.footer
    }

    /// Chunks and tombstones read so far.
    pub fn counts(&self) -> (u64, u64) {
        (self.chunks, self.tombstones)
    }

    /// The current entry, or `None` at the end of the file.
    pub fn peek(&self) -> Option<Entry<'_>> {
        let item = self.chunk.items.get(self.at)?;
        let b = self.chunk.bytes.as_slice();
        let slice = |(at, len): (u32, u32)| &b[at as usize..(at + len) as usize];
        Some(Entry {
            op: item.op,
            key: slice(item.key),
            value: item.value.map(slice),
        })
    }

    /// Moves to the next entry.
    pub fn advance(&mut self) -> Result<()> {
        assert!(
            self.at < self.chunk.items.len(),
            "advance past the end of {}",
            self.path.display()
        );
        self.at += 1;
        if self.at == self.chunk.items.len() {
            self.next_chunk()?;
        }
        Ok(())
    }

    /// Reads every remaining entry (verification).
    pub fn skip_to_end(&mut self) -> Result<()> {
        while self.footer.is_none() {
            self.at = self.chunk.items.len();
            self.next_chunk()?;
        }
        Ok(())
    }

    fn read(&mut self, buf: &mut [u8]) -> Result<()> {
        match self.input.read_exact(buf) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(Error::corrupt(
                    &self.path,
                    self.offset,
                    "the file ends early (cut off?)",
                ));
            }
            Err(e) => return Err(Error::io("read", &self.path)(e)),
        }
        self.crc = crc32c_append(self.crc, buf);
        self.offset += buf.len() as u64;
        Ok(())
    }

    /// Loads the next chunk, or reads and checks the footer.
    fn next_chunk(&mut self) -> Result<()> {
        if let Some((op, key)) = self.chunk.items.last().map(|i| (i.op, i.key)) {
            let k = &self.chunk.bytes[key.0 as usize..(key.0 + key.1) as usize];
            let last = self.last.get_or_insert_with(|| (0, Vec::new()));
            last.0 = op;
            last.1.clear();
            last.1.extend_from_slice(k);
        }
        self.chunk.items.clear();
        self.at = 0;
        loop {
            let start = self.offset;
            let crc_before = self.crc;
            let mut head = [0u8; CHUNK_HEADER_BYTES];
            self.read(&mut head)?;
            if head[0..8] == FOOTER_MAGIC {
                let mut rest = [0u8; FOOTER_BYTES - CHUNK_HEADER_BYTES];
                self.read(&mut rest)?;
                let mut footer = [0u8; FOOTER_BYTES];
                footer[..CHUNK_HEADER_BYTES].copy_from_slice(&head);
                footer[CHUNK_HEADER_BYTES..].copy_from_slice(&rest);
                return self.check_footer(start, crc_before, &footer);
            }
            if head[0..4] != CHUNK_MAGIC {
                return Err(Error::corrupt(
                    &self.path,
                    start,
                    "neither a chunk nor the footer starts here",
                ));
            }
            let body_len = u64::from(u32::from_le_bytes(head[4..8].try_into().expect("4")));
            let n = u32::from_le_bytes(head[8..12].try_into().expect("4")) as usize;
            let body_crc = u32::from_le_bytes(head[12..16].try_into().expect("4"));
            if body_len > CHUNK_BYTES_MAX || body_len > self.len - self.offset || n > CHUNK_ENTRIES_MAX {
                return Err(Error::corrupt(
                    &self.path,
                    start,
                    format!("a chunk of {body_len} bytes and {n} entries"),
                ));
            }
            let mut bytes = AlignedVec::with_capacity(body_len as usize);
            bytes.resize(body_len as usize, 0);
            self.read(&mut bytes)?;
            if crc32c(&bytes) != body_crc {
                return Err(Error::corrupt(&self.path, start, "a chunk checksum does not match"));
            }
            self.chunk.bytes = bytes;
            self.index_chunk(start, n)?;
            self.chunks += 1;
            if !self.chunk.items.is_empty() {
                return Ok(());
            }
        }
    }

    /// Validates the chunk in `self.chunk.bytes` with rkyv once and records
    /// where each entry lies; checks order and limits.
    fn index_chunk(&mut self, start: u64, n: usize) -> Result<()> {
        let path = &self.path;
        let bytes = &self.chunk.bytes;
        let archived = rkyv::access::<ArchivedVec<super::ArchivedEntry<'static>>, BoxedError>(bytes)
            .map_err(|e| Error::corrupt(path, start, format!("a chunk is not a valid archive: {e}")))?;
        if archived.len() != n {
            return Err(Error::corrupt(
                path,
                start,
                format!("a chunk holds {} entries, its header says {n}", archived.len()),
            ));
        }
        let base = bytes.as_ptr() as usize;
        let place = |s: &[u8]| ((s.as_ptr() as usize - base) as u32, s.len() as u32);
        let mut prev: Option<(u16, &[u8])> = self.last.as_ref().map(|(op, k)| (*op, k.as_slice()));
        let items = &mut self.chunk.items;
        for (i, e) in archived.iter().enumerate() {
            let op = e.op.to_native();
            let key: &[u8] = &e.key;
            if key.len() > KEY_LEN_MAX {
                return Err(Error::corrupt(
                    path,
                    start,
                    format!("entry {i}: a key of {} bytes", key.len()),
                ));
            }
            if prev.is_some_and(|p| p >= (op, key)) {
                return Err(Error::corrupt(path, start, format!("entry {i} is out of key order")));
            }
            prev = Some((op, key));
            let value = e.value.as_ref().map(|v| place(v));
            if value.is_none() {
                if self.header.kind == Kind::Base {
                    return Err(Error::corrupt(path, start, format!("entry {i}: a tombstone in a base")));
                }
                self.tombstones += 1;
            }
            items.push(Item {
                op,
                key: place(key),
                value,
            });
        }
        self.entries += n as u64;
        Ok(())
    }

    fn check_footer(&mut self, start: u64, crc_before: u32, b: &[u8; FOOTER_BYTES]) -> Result<()> {
        let path = &self.path;
        if crc32c(&b[..28]) != u32::from_le_bytes(b[28..32].try_into().expect("4")) {
            return Err(Error::corrupt(path, start, "the footer checksum does not match"));
        }
        let footer = Footer {
            chunks: u64::from_le_bytes(b[8..16].try_into().expect("8")),
            entries: u64::from_le_bytes(b[16..24].try_into().expect("8")),
            crc: u32::from_le_bytes(b[24..28].try_into().expect("4")),
        };
        if footer.crc != crc_before {
            return Err(Error::corrupt(path, start, "the file checksum does not match"));
        }
        if footer.chunks != self.chunks || footer.entries != self.entries {
            return Err(Error::corrupt(
                path,
                start,
                format!(
                    "the footer counts {} chunks and {} entries, the file holds {} and {}",
                    footer.chunks, footer.entries, self.chunks, self.entries
                ),
            ));
        }
        if self.offset != self.len {
            return Err(Error::corrupt(
                path,
                self.offset,
                format!("{} bytes after the footer", self.len - self.offset),
            ));
        }
        self.footer = Some(footer);
        Ok(())
    }

    /// Checks that this file is the one `r` describes (after reading to the
    /// end).
    pub(crate) fn check_ref(&self, r: &FileRef) -> Result<()> {
        let h = &self.header;
        let footer = self.footer.expect("read to the end");
        let same = h.shard == r.shard
            && h.kind == r.kind
            && h.epoch == r.epoch
            && h.parent_epoch == r.parent_epoch
            && self.len == r.bytes
            && footer.entries == r.entries
            && footer.crc == r.crc;
        if !same {
            return Err(Error::corrupt(
                &self.path,
                0,
                format!(
                    "the file is not the one the manifest lists ({:?} shard {} epoch {} parent {}, {} bytes, {} entries, crc {:08x}; expected {r:?})",
                    h.kind, h.shard, h.epoch, h.parent_epoch, self.len, footer.entries, footer.crc
                ),
            ));
        }
        Ok(())
    }

    /// Checks the header against `r` before reading on (cheap, so that a
    /// wrong file is named before a long merge).
    pub(crate) fn check_header_ref(&self, r: &FileRef) -> Result<()> {
        let h = &self.header;
        if h.shard != r.shard
            || h.kind != r.kind
            || h.epoch != r.epoch
            || h.parent_epoch != r.parent_epoch
            || self.len != r.bytes
        {
            return Err(Error::corrupt(
                &self.path,
                0,
                format!(
                    "the file is not the one the manifest lists: {:?} shard {} epoch {} parent {}, {} bytes; expected {r:?}",
                    h.kind, h.shard, h.epoch, h.parent_epoch, self.len
                ),
            ));
        }
        Ok(())
    }
}
