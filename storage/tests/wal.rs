//! The input log: round trips through the glommio writer, torn tails,
//! corruption, versions, segments.

mod common;

use common::{batch, fresh_dir, glommio};
use std::fs;
use std::path::{Path, PathBuf};
use styx_engine::rng::Rng;
use styx_engine::{Batch, Epoch};
use styx_storage::wal::{self, FsyncMode, Options, Reader, Writer};
use styx_storage::{DataDir, Error, inspect};

const SHARD: u16 = 3;

fn small() -> Options {
    Options {
        segment_bytes: 64 << 10,
        fsync: FsyncMode::Epoch,
        zero_fill: true,
    }
}

/// Recovers, then appends `batches` with a sync after each one (or only at
/// the end), and returns the directory.
fn write_log(dir: DataDir, batches: Vec<Batch>, options: Options, sync_each: bool) -> DataDir {
    glommio(move || async move {
        let shard = batches[0].shard;
        let rec = wal::recover(&dir, shard, 0).unwrap();
        let mut w = Writer::open(&dir, &rec.tail, options).await.unwrap();
        for b in &batches {
            w.append(b).await.unwrap();
            if sync_each {
                assert_eq!(w.sync().await.unwrap(), b.epoch);
            }
        }
        assert_eq!(w.close().await.unwrap(), batches.last().unwrap().epoch);
        dir
    })
}

fn batches(seed: u64, epochs: std::ops::RangeInclusive<Epoch>, txns: usize, args: usize) -> Vec<Batch> {
    let mut rng = Rng::new(seed);
    epochs.map(|e| batch(&mut rng, SHARD, e, txns, args)).collect()
}

fn read_all(wal_dir: &Path, after: Epoch) -> (Result<Vec<Batch>, Error>, Option<wal::Truncation>) {
    let mut r = Reader::open(wal_dir, SHARD, after).unwrap();
    let out: Result<Vec<Batch>, Error> = r.by_ref().collect();
    let t = r.truncation().cloned();
    (out, t)
}

fn only_segment(wal_dir: &Path) -> PathBuf {
    let segs = wal::segments(wal_dir, SHARD).unwrap();
    assert_eq!(segs.len(), 1, "{segs:?}");
    segs[0].path.clone()
}

fn records(path: &Path) -> Vec<wal::RecordInfo> {
    let report = inspect::log(path).unwrap();
    report.shards[0].records.clone()
}

#[test]
fn writer_appends_syncs_and_reads_back() {
    let root = fresh_dir("wal-roundtrip");
    let dir = DataDir::open(&root).unwrap();
    let mut rng = Rng::new(1);
    // Small and large batches; one larger than a segment gets its own.
    let mut all: Vec<Batch> = (1..=40)
        .map(|e| batch(&mut rng, SHARD, e, (e % 7) as usize * 20, 60))
        .collect();
    all.push(batch(&mut rng, SHARD, 41, 400, 300));
    all.push(batch(&mut rng, SHARD, 42, 0, 0));
    let dir = write_log(dir, all.clone(), small(), true);
    let segs = wal::segments(&dir.wal_dir(), SHARD).unwrap();
    assert!(segs.len() > 2, "rollover happened: {segs:?}");
    let (got, t) = read_all(&dir.wal_dir(), 0);
    assert_eq!(got.unwrap(), all);
    assert_eq!(t, None);
    // From a snapshot's epoch on.
    let (got, _) = read_all(&dir.wal_dir(), 30);
    assert_eq!(got.unwrap(), all[30..].to_vec());

    // Reopen after recovery: a new segment, the chain goes on.
    let more = batches(2, 43..=45, 5, 20);
    let dir = write_log(dir, more.clone(), small(), false);
    let (got, t) = read_all(&dir.wal_dir(), 0);
    assert_eq!(got.unwrap(), [all, more].concat());
    assert_eq!(t, None);
    assert!(inspect::log(dir.root()).unwrap().is_clean());
}

/// A log that fell behind writes everything queued at once: one write per
/// segment's worth, records still one per epoch, read back the same as one
/// append per epoch — across segment rolls and a record larger than a
/// segment.
#[test]
fn append_all_groups_queued_epochs_into_one_write() {
    let root = fresh_dir("wal-group");
    let dir = DataDir::open(&root).unwrap();
    let mut rng = Rng::new(7);
    let mut all: Vec<Batch> = (1..=30).map(|e| batch(&mut rng, SHARD, e, 3, 40)).collect();
    all.push(batch(&mut rng, SHARD, 31, 400, 300));
    all.extend((32..=60).map(|e| batch(&mut rng, SHARD, e, (e % 5) as usize * 10, 60)));
    let (written, dir) = {
        let all = all.clone();
        glommio(move || async move {
            let rec = wal::recover(&dir, SHARD, 0).unwrap();
            let mut w = Writer::open(&dir, &rec.tail, small()).await.unwrap();
            // The first 10 in one group: one write.
            let before = w.stats();
            w.append_all(&all[..10]).await.unwrap();
            assert_eq!(w.stats().writes - before.writes, 1, "ten small epochs in one write");
            assert_eq!(w.stats().records - before.records, 10);
            assert_eq!(w.last_epoch(), 10);
            assert_eq!(w.sync().await.unwrap(), 10);
            // The rest in one call: it rolls segments as it must.
            w.append_all(&all[10..]).await.unwrap();
            let stats = w.stats();
            assert_eq!(w.close().await.unwrap(), 60);
            (stats, dir)
        })
    };
    assert_eq!(written.records, 60);
    assert!(
        written.writes < 60 / 2,
        "grouped: {} writes for 60 records",
        written.writes
    );
    assert!(wal::segments(&dir.wal_dir(), SHARD).unwrap().len() > 2, "rolled over");
    let (got, t) = read_all(&dir.wal_dir(), 0);
    assert_eq!(got.unwrap(), all);
    assert!(t.is_none());
}

#[test]
fn records_are_aligned_and_the_alignment_comes_from_the_file() {
    let root = fresh_dir("wal-align");
    let dir = write_log(DataDir::open(&root).unwrap(), batches(3, 1..=3, 3, 10), small(), true);
    let path = only_segment(&dir.wal_dir());
    let head = fs::read(&path).unwrap();
    let header = wal::SegmentHeader::decode(&head).unwrap();
    assert!(header.alignment >= 512 && header.alignment.is_power_of_two());
    assert_eq!(header.capacity, 64 << 10);
    assert_eq!(fs::metadata(&path).unwrap().len(), 64 << 10, "preallocated");
    for r in records(&path) {
        assert_eq!(r.offset % u64::from(header.alignment), 0);
    }
}

#[test]
fn torn_tail_at_every_byte_of_the_last_record_is_truncated_and_reported() {
    let root = fresh_dir("wal-torn");
    let all = batches(4, 1..=5, 4, 30);
    let dir = write_log(DataDir::open(&root).unwrap(), all.clone(), small(), true);
    let wal_dir = dir.wal_dir();
    let path = only_segment(&wal_dir);
    let original = fs::read(&path).unwrap();
    let last = records(&path).last().unwrap().clone();
    assert_eq!(last.header.epoch, 5);
    let start = last.offset;
    let len = last.header.record_len();

    for k in 0..len {
        // A write cut short: the file ends inside the record.
        fs::write(&path, &original[..(start + k) as usize]).unwrap();
        let (got, t) = read_all(&wal_dir, 0);
        assert_eq!(got.unwrap(), all[..4].to_vec(), "cut at {k}");
        if k == 0 {
            assert_eq!(t, None);
        } else {
            let t = t.unwrap_or_else(|| panic!("cut at {k}: no truncation"));
            assert_eq!((t.path.as_path(), t.offset), (path.as_path(), start), "cut at {k}");
            assert_eq!(t.bytes_dropped, k);
        }

        // A write that reached the disk in part: the rest of the
        // preallocated segment is zeros.
        let mut torn = original.clone();
        torn[(start + k) as usize..(start + len) as usize].fill(0);
        fs::write(&path, &torn).unwrap();
        let (got, t) = read_all(&wal_dir, 0);
        if torn == original {
            assert_eq!((got.unwrap(), t), (all.clone(), None), "zeros from {k} changed nothing");
        } else if k == 0 {
            assert_eq!((got.unwrap(), t), (all[..4].to_vec(), None), "the record never started");
        } else {
            assert_eq!(got.unwrap(), all[..4].to_vec(), "zeros from {k}");
            let t = t.unwrap_or_else(|| panic!("zeros from {k}: no truncation"));
            assert_eq!((t.path.as_path(), t.offset), (path.as_path(), start), "zeros from {k}");
        }
    }

    // Recovery cuts the tail durably, and a writer goes on from epoch 4.
    let mut torn = original.clone();
    torn[(start + len / 2) as usize] ^= 0xff;
    fs::write(&path, &torn).unwrap();
    let rec = wal::recover(&dir, SHARD, 0).unwrap();
    assert_eq!(rec.batches, all[..4].to_vec());
    assert_eq!(rec.tail.last_epoch(), 4);
    let t = rec.tail.truncation().unwrap();
    assert!(t.to_string().contains("torn tail at byte"), "{t}");
    assert_eq!(fs::metadata(&path).unwrap().len(), start);
    let redo = [all[4].clone()];
    let dir = glommio(move || async move {
        let mut w = Writer::open(&dir, &rec.tail, small()).await.unwrap();
        w.append(&redo[0]).await.unwrap();
        w.sync().await.unwrap();
        w.close().await.unwrap();
        dir
    });
    let (got, t) = read_all(&dir.wal_dir(), 0);
    assert_eq!((got.unwrap(), t), (all, None));
}

#[test]
fn corruption_in_the_middle_is_an_error_naming_file_and_offset() {
    let root = fresh_dir("wal-corrupt");
    let all = batches(5, 1..=5, 4, 30);
    let dir = write_log(DataDir::open(&root).unwrap(), all.clone(), small(), true);
    let wal_dir = dir.wal_dir();
    let path = only_segment(&wal_dir);
    let original = fs::read(&path).unwrap();
    let middle = records(&path)[2].clone();
    for i in 0..middle.header.record_len() {
        let mut bad = original.clone();
        bad[(middle.offset + i) as usize] ^= 0x01;
        fs::write(&path, &bad).unwrap();
        let mut r = Reader::open(&wal_dir, SHARD, 0).unwrap();
        assert_eq!(r.next().unwrap().unwrap(), all[0]);
        assert_eq!(r.next().unwrap().unwrap(), all[1]);
        match r.next() {
            Some(Err(Error::Corrupt {
                path: p,
                offset,
                reason,
            })) => {
                assert_eq!(
                    (p.as_path(), offset),
                    (path.as_path(), middle.offset),
                    "byte {i}: {reason}"
                );
            }
            other => panic!("byte {i}: {other:?}"),
        }
        assert!(r.next().is_none());
        assert!(wal::recover(&dir, SHARD, 0).is_err());
    }
    // Recovery changed nothing.
    assert_eq!(fs::metadata(&path).unwrap().len(), original.len() as u64);
    let msg = {
        let mut bad = original.clone();
        bad[middle.offset as usize + 60] ^= 1;
        fs::write(&path, &bad).unwrap();
        wal::recover(&dir, SHARD, 0).unwrap_err().to_string()
    };
    assert!(
        msg.contains(&path.display().to_string()) && msg.contains(&format!("byte {}", middle.offset)),
        "{msg}"
    );
}

#[test]
fn unsynced_records_reordered_by_the_device_are_a_torn_tail() {
    let root = fresh_dir("wal-reorder");
    let all = batches(6, 1..=5, 4, 30);
    let dir = DataDir::open(&root).unwrap();
    let to_write = all.clone();
    let dir = glommio(move || async move {
        let rec = wal::recover(&dir, SHARD, 0).unwrap();
        let mut w = Writer::open(&dir, &rec.tail, small()).await.unwrap();
        for b in &to_write[..3] {
            w.append(b).await.unwrap();
            w.sync().await.unwrap();
        }
        // Group commit: two epochs, one fdatasync.
        w.append(&to_write[3]).await.unwrap();
        w.append(&to_write[4]).await.unwrap();
        assert_eq!(w.stats().records, 5);
        let fsyncs = w.stats().fdatasyncs;
        w.sync().await.unwrap();
        assert_eq!(w.stats().fdatasyncs, fsyncs + 1);
        w.close().await.unwrap();
        dir
    });
    let wal_dir = dir.wal_dir();
    let path = only_segment(&wal_dir);
    let recs = records(&path);
    // Epoch 4 did not reach the disk; epoch 5 did.
    let mut bad = fs::read(&path).unwrap();
    let r4 = &recs[3];
    bad[r4.offset as usize..(r4.offset + r4.header.record_len()) as usize].fill(0);
    fs::write(&path, &bad).unwrap();
    let (got, t) = read_all(&wal_dir, 0);
    assert_eq!(got.unwrap(), all[..3].to_vec());
    let t = t.unwrap();
    assert_eq!((t.offset, t.records_dropped), (r4.offset, 1));
}

#[test]
fn another_version_is_refused() {
    let root = fresh_dir("wal-version");
    let dir = write_log(DataDir::open(&root).unwrap(), batches(7, 1..=3, 2, 10), small(), true);
    let wal_dir = dir.wal_dir();
    let path = only_segment(&wal_dir);
    let original = fs::read(&path).unwrap();

    // Segment header of version 2 (checksum recomputed).
    let mut v2 = original.clone();
    v2[8..10].copy_from_slice(&2u16.to_le_bytes());
    let crc = crc32c::crc32c(&v2[..60]);
    v2[60..64].copy_from_slice(&crc.to_le_bytes());
    fs::write(&path, &v2).unwrap();
    let err = read_all(&wal_dir, 0).0.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Version {
                found: 2,
                expected: 1,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("format version 2"), "{err}");

    // A record of version 2 with an intact header.
    let at = records_at(&original)[1] as usize;
    let mut v2 = original.clone();
    v2[at + 4..at + 6].copy_from_slice(&2u16.to_le_bytes());
    let crc = crc32c::crc32c(&v2[at..at + 44]);
    v2[at + 44..at + 48].copy_from_slice(&crc.to_le_bytes());
    fs::write(&path, &v2).unwrap();
    let (got, _) = read_all(&wal_dir, 0);
    assert!(matches!(got.unwrap_err(), Error::Version { found: 2, .. }));
}

fn records_at(segment: &[u8]) -> Vec<u64> {
    let align = u64::from(wal::SegmentHeader::decode(segment).unwrap().alignment);
    (1..segment.len() as u64 / align)
        .map(|i| i * align)
        .filter(|at| segment[*at as usize..*at as usize + 4] == wal::RECORD_MAGIC)
        .collect()
}

#[test]
fn another_magic_is_refused() {
    let root = fresh_dir("wal-magic");
    let dir = write_log(DataDir::open(&root).unwrap(), batches(8, 1..=2, 2, 10), small(), true);
    let wal_dir = dir.wal_dir();
    let path = only_segment(&wal_dir);
    let mut bad = fs::read(&path).unwrap();
    bad[0] = b'X';
    fs::write(&path, &bad).unwrap();
    let err = read_all(&wal_dir, 0).0.unwrap_err();
    assert!(matches!(err, Error::Magic { .. }), "{err}");
    assert!(err.to_string().contains("not a Styx log segment"), "{err}");
    // Some other file under a segment's name.
    fs::write(&path, b"hello, I am a text file and not a log\n".repeat(100)).unwrap();
    assert!(matches!(read_all(&wal_dir, 0).0.unwrap_err(), Error::Magic { .. }));
}

#[test]
fn a_missing_segment_is_an_error_and_covered_ones_are_removed() {
    let root = fresh_dir("wal-segments");
    let all = batches(9, 1..=60, 30, 100);
    let dir = write_log(DataDir::open(&root).unwrap(), all.clone(), small(), true);
    let wal_dir = dir.wal_dir();
    let segs = wal::segments(&wal_dir, SHARD).unwrap();
    assert!(segs.len() >= 5, "{segs:?}");

    // A snapshot at the epoch before the third segment covers the first two.
    let covered = segs[2].first_epoch - 1;
    let removed = wal::remove_through(&dir, SHARD, covered).unwrap();
    assert_eq!(removed, vec![segs[0].path.clone(), segs[1].path.clone()]);
    let (got, t) = read_all(&wal_dir, covered);
    assert_eq!((got.unwrap(), t), (all[covered as usize..].to_vec(), None));
    // Without that snapshot, the log has lost its beginning.
    let err = read_all(&wal_dir, 0).0.unwrap_err();
    assert!(matches!(err, Error::Gap { .. }), "{err}");
    // Nothing removable at an epoch inside the first remaining segment.
    assert!(wal::remove_through(&dir, SHARD, covered + 1).unwrap().is_empty());

    // A segment lost in the middle.
    fs::remove_file(&segs[3].path).unwrap();
    let err = read_all(&wal_dir, covered).0.unwrap_err();
    match &err {
        Error::Corrupt { path, reason, .. } => {
            assert_eq!(path, &segs[4].path);
            assert!(reason.contains("records are missing"), "{reason}");
        }
        other => panic!("{other}"),
    }
}

#[test]
fn a_writer_refuses_to_write_over_records_it_did_not_recover() {
    let root = fresh_dir("wal-ahead");
    let dir = write_log(DataDir::open(&root).unwrap(), batches(10, 1..=3, 2, 10), small(), true);
    let stale = wal::recover(&dir, SHARD, 0).unwrap().tail;
    assert_eq!(stale.last_epoch(), 3);
    let dir = write_log(dir, batches(11, 4..=5, 2, 10), small(), true);
    let (err, dir) = glommio(move || async move {
        let err = Writer::open(&dir, &stale, small()).await.unwrap_err();
        (err, dir)
    });
    assert!(matches!(err, Error::LogAhead { epoch: 4, .. }), "{err}");
    // An empty segment left by a crash is replaced.
    let (got, _) = read_all(&dir.wal_dir(), 0);
    assert_eq!(got.unwrap().len(), 5);
    let rec = wal::recover(&dir, SHARD, 0).unwrap();
    let empty = dir.wal_dir().join(wal::segment_name(SHARD, 6));
    let dir = glommio(move || async move {
        // Created and never written: a crash right after opening.
        let w = Writer::open(&dir, &rec.tail, small()).await.unwrap();
        drop(w);
        let rec = wal::recover(&dir, SHARD, 0).unwrap();
        assert_eq!(rec.tail.truncation(), None);
        let mut w = Writer::open(&dir, &rec.tail, small()).await.unwrap();
        w.append(&batches(12, 6..=6, 1, 1)[0]).await.unwrap();
        w.close().await.unwrap();
        dir
    });
    assert!(empty.exists());
    assert_eq!(read_all(&dir.wal_dir(), 0).0.unwrap().len(), 6);
}

#[test]
fn fsync_none_writes_without_flushing() {
    let root = fresh_dir("wal-nofsync");
    let all = batches(13, 1..=10, 10, 20);
    let dir = DataDir::open(&root).unwrap();
    let to_write = all.clone();
    let (dir, stats) = glommio(move || async move {
        let rec = wal::recover(&dir, SHARD, 0).unwrap();
        let options = Options {
            segment_bytes: 64 << 10,
            fsync: FsyncMode::None,
            zero_fill: false,
        };
        let mut w = Writer::open(&dir, &rec.tail, options).await.unwrap();
        for b in &to_write {
            w.append(b).await.unwrap();
            assert_eq!(w.sync().await.unwrap(), b.epoch);
        }
        let stats = w.stats();
        w.close().await.unwrap();
        (dir, stats)
    });
    assert_eq!(stats.fdatasyncs, 0);
    assert_eq!(read_all(&dir.wal_dir(), 0).0.unwrap(), all);
}

/// The runtime's shape: a log task fed by a channel, reporting durable
/// epochs, while the executor goes on with other work.
#[test]
fn logging_overlaps_other_work() {
    use glommio::channels::local_channel;
    use std::cell::RefCell;
    use std::rc::Rc;
    let root = fresh_dir("wal-overlap");
    let all = batches(14, 1..=20, 50, 40);
    let dir = DataDir::open(&root).unwrap();
    let to_write = all.clone();
    let (dir, durable, worked, overlapped) = glommio(move || async move {
        let rec = wal::recover(&dir, SHARD, 0).unwrap();
        let writer = Writer::open(&dir, &rec.tail, small()).await.unwrap();
        let (tx, rx) = local_channel::new_bounded::<Batch>(4);
        let durable = Rc::new(RefCell::new(Vec::new()));
        let reported = durable.clone();
        let log = glommio::spawn_local(async move {
            let mut w = writer;
            while let Some(b) = rx.recv().await {
                w.append(&b).await.unwrap();
                let e = w.sync().await.unwrap();
                reported.borrow_mut().push(e);
            }
            w.close().await.unwrap();
        });
        let mut worked = 0u64;
        let mut overlapped = 0u64;
        for b in to_write {
            let epoch = b.epoch;
            tx.send(b).await.unwrap();
            // "Execute the epoch" while its log is written.
            for _ in 0..100 {
                worked += 1;
                if durable.borrow().last().is_none_or(|d| *d < epoch) {
                    overlapped += 1;
                }
                glommio::executor().yield_task_queue_now().await;
            }
        }
        drop(tx);
        log.await;
        let durable = durable.borrow().clone();
        (dir, durable, worked, overlapped)
    });
    assert_eq!(durable, (1..=20).collect::<Vec<Epoch>>());
    assert_eq!(worked, 2000);
    assert!(overlapped > 0, "work ran while the log was being written");
    assert_eq!(read_all(&dir.wal_dir(), 0).0.unwrap(), all);
}

/// Whatever the damage, the reader yields a prefix of what was written and
/// then ends, reports a torn tail, or fails: it never panics and never
/// yields a batch that was not written.
#[test]
fn random_damage_yields_a_prefix_or_an_error() {
    let root = fresh_dir("wal-random-damage");
    let all = batches(15, 1..=40, 20, 60);
    let dir = write_log(DataDir::open(&root).unwrap(), all.clone(), small(), true);
    let wal_dir = dir.wal_dir();
    let segs = wal::segments(&wal_dir, SHARD).unwrap();
    assert!(segs.len() >= 2);
    let originals: Vec<Vec<u8>> = segs.iter().map(|s| fs::read(&s.path).unwrap()).collect();
    let mut rng = Rng::new(16);
    let (mut prefixes, mut torn, mut errors) = (0, 0, 0);
    for _ in 0..300 {
        let i = rng.below(segs.len() as u64) as usize;
        let mut bad = originals[i].clone();
        let used = records_at(&originals[i]).last().copied().unwrap_or(512) as usize + 1024;
        match rng.below(3) {
            0 => {
                let at = rng.below(used as u64) as usize;
                bad[at] ^= 1 + rng.below(255) as u8;
            }
            1 => {
                let at = rng.below(used as u64) as usize;
                let n = 1 + rng.below(700) as usize;
                for b in &mut bad[at..(at + n).min(used)] {
                    *b = rng.below(256) as u8;
                }
            }
            _ => bad.truncate(rng.below(used as u64) as usize),
        }
        fs::write(&segs[i].path, &bad).unwrap();
        let mut r = Reader::open(&wal_dir, SHARD, 0).unwrap();
        let mut n = 0;
        let mut failed = false;
        for b in r.by_ref() {
            match b {
                Ok(b) => {
                    assert_eq!(b, all[n], "batch {n}");
                    n += 1;
                }
                Err(_) => failed = true,
            }
        }
        match (failed, r.truncation().is_some()) {
            (true, _) => errors += 1,
            (false, true) => torn += 1,
            (false, false) => prefixes += 1,
        }
        fs::write(&segs[i].path, &originals[i]).unwrap();
    }
    assert!(
        errors > 0 && torn + prefixes > 0,
        "{errors} errors, {torn} torn, {prefixes} clean"
    );
}

/// What a reader yields, with paths cut to file names (a reader from memory
/// knows only those).
type Outcome = (
    Vec<Batch>,
    Option<String>,
    Option<(String, u64, String, u64, u64, usize)>,
);

fn outcome(mut r: Reader, wal_dir: &Path) -> Outcome {
    let dir = format!("{}/", wal_dir.display());
    let mut batches = Vec::new();
    let mut error = None;
    for b in r.by_ref() {
        match b {
            Ok(b) => batches.push(b),
            Err(e) => error = Some(e.to_string().replace(&dir, "")),
        }
    }
    let t = r.truncation().map(|t| {
        let name = t.path.file_name().unwrap().to_string_lossy().into_owned();
        (
            name,
            t.offset,
            t.reason.clone(),
            t.bytes_dropped,
            t.records_dropped,
            t.files_removed.len(),
        )
    });
    (batches, error, t)
}

/// A segment is read up to its last chunk with data when the rest is zeros
/// (not allocated whole): what it yields (batches, torn tail, corruption)
/// is the same as reading every byte, with data after megabytes of zeros,
/// records across chunk boundaries and files cut anywhere.
#[test]
fn reading_the_used_part_of_a_segment_yields_what_reading_it_whole_does() {
    let root = fresh_dir("wal-used-part");
    let options = Options {
        segment_bytes: 4 << 20,
        fsync: FsyncMode::Epoch,
        zero_fill: true,
    };
    let all = batches(21, 1..=80, 40, 500);
    let dir = write_log(DataDir::open(&root).unwrap(), all.clone(), options, true);
    let wal_dir = dir.wal_dir();
    let path = only_segment(&wal_dir);
    let original = fs::read(&path).unwrap();
    let used = records_at(&original).last().copied().unwrap() as usize + 1024;
    assert!(
        used > 1 << 20 && original.len() == 4 << 20,
        "records span chunks, zeros follow"
    );
    let (whole, _, torn) = outcome(Reader::open(&wal_dir, SHARD, 0).unwrap(), &wal_dir);
    assert_eq!((whole.len(), torn), (all.len(), None));
    let mut rng = Rng::new(22);
    let (mut torn, mut errors) = (0, 0);
    for case in 0..120 {
        let mut bad = original.clone();
        match case % 4 {
            0 => {
                let at = rng.below(used as u64) as usize;
                bad[at] ^= 1 + rng.below(255) as u8;
            }
            // A byte in the zeros: near the records, or megabytes later.
            1 => {
                let at = used + rng.below((bad.len() - used) as u64) as usize;
                bad[at] = 1 + rng.below(255) as u8;
            }
            2 => bad.truncate(rng.below(bad.len() as u64) as usize),
            _ => {
                // A record's worth of zeros at a chunk boundary.
                let at = (1 << 20) - rng.below(4096) as usize;
                bad[at..at + 4096].fill(0);
            }
        }
        fs::write(&path, &bad).unwrap();
        let from_file = outcome(Reader::open(&wal_dir, SHARD, 0).unwrap(), &wal_dir);
        let segment = wal::segments(&wal_dir, SHARD).unwrap()[0].first_epoch;
        let from_memory = outcome(Reader::from_memory(SHARD, 0, vec![(segment, bad.clone())]), &wal_dir);
        assert!(from_file.0 == from_memory.0, "case {case}: other batches");
        assert_eq!(
            (&from_file.1, &from_file.2),
            (&from_memory.1, &from_memory.2),
            "case {case}"
        );
        assert!(
            from_file.0[..] == all[..from_file.0.len()],
            "case {case}: not a prefix of the log"
        );
        torn += usize::from(from_file.2.is_some());
        errors += usize::from(from_file.1.is_some());
    }
    fs::write(&path, &original).unwrap();
    assert!(torn > 0 && errors > 0, "{torn} torn, {errors} errors");
}
