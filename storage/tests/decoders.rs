//! Every decoder of bytes read from disk — log records, log segments,
//! snapshot files, manifests — fed seeded random mutations of valid
//! encodings, with and without their checksums repaired (so that the
//! parsing behind the checksums is reached): each returns a value or an
//! error, never panics. The fuzz targets in `storage/fuzz` do the same
//! without a bound (`cargo +nightly fuzz run …`); this test runs in CI.
//!
//! A mutation that panics is written to `target/tmp/styx-storage/decoders/`
//! and named in the failure: feed it to the fuzz target to replay it.

mod common;

use common::{batch, fresh_dir};
use std::panic::{AssertUnwindSafe, catch_unwind};
use styx_engine::Batch;
use styx_engine::rng::Rng;
use styx_storage::fuzz::{self, SHARD};
use styx_storage::snapshot::{Catalog, FileWriter, Kind, Manifest};
use styx_storage::{DataDir, wal};

/// Mutations per decoder.
const MUTATIONS: usize = 3_000;

/// Values a length or an epoch field likes to break on.
const EDGES: [u64; 8] = [0, 1, 0x7f, 0xff, 0xffff, 0x7fff_ffff, u32::MAX as u64, u64::MAX];

/// `bytes` with one to four random changes: bit flips, random or edge
/// bytes and words, cuts, random tails, copied ranges.
fn mutate(rng: &mut Rng, bytes: &[u8]) -> Vec<u8> {
    let mut b = bytes.to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = b.len() as u64;
        match rng.below(7) {
            0 if len > 0 => {
                let at = rng.below(len) as usize;
                b[at] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let at = rng.below(len) as usize;
                b[at] = rng.below(256) as u8;
            }
            2 if len >= 8 => {
                let at = rng.below(len - 7) as usize;
                let v = EDGES[rng.below(EDGES.len() as u64) as usize];
                if rng.chance(0.5) {
                    b[at..at + 4].copy_from_slice(&(v as u32).to_le_bytes());
                } else {
                    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
                }
            }
            3 if len > 0 => b.truncate(rng.below(len) as usize),
            4 => {
                let n = rng.below(600);
                b.extend((0..n).map(|_| rng.below(256) as u8));
            }
            5 if len > 2 => {
                let from = rng.below(len) as usize;
                let to = rng.below(len) as usize;
                let n = (rng.below(64) as usize).min(b.len() - from).min(b.len() - to);
                b.copy_within(from..from + n, to);
            }
            _ if len > 0 => {
                // A run of zeros (an unwritten block, a hole).
                let at = rng.below(len) as usize;
                let n = (rng.below(1_024) as usize).min(b.len() - at);
                b[at..at + n].fill(0);
            }
            _ => b.push(rng.below(256) as u8),
        }
    }
    b
}

/// Feeds `decode` [`MUTATIONS`] mutations of the `valid` encodings, most
/// with their checksums repaired by `repair`.
fn mutations(name: &str, seed: u64, valid: &[Vec<u8>], repair: fn(&mut [u8]), decode: impl Fn(&[u8]) -> bool) {
    let mut rng = Rng::new(seed);
    let mut accepted = 0;
    for i in 0..MUTATIONS {
        let mut b = mutate(&mut rng, &valid[i % valid.len()]);
        if rng.chance(0.7) {
            repair(&mut b);
        }
        match catch_unwind(AssertUnwindSafe(|| decode(&b))) {
            Ok(ok) => accepted += usize::from(ok),
            Err(_) => {
                let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("styx-storage/decoders");
                std::fs::create_dir_all(&dir).unwrap();
                let path = dir.join(format!("{name}-{i}.bin"));
                std::fs::write(&path, &b).unwrap();
                panic!(
                    "{name}: mutation {i} panicked; its input is {} (replay: cd storage/fuzz && cargo +nightly fuzz run {name} {})",
                    path.display(),
                    path.display()
                );
            }
        }
    }
    // The valid encodings themselves decode.
    for v in valid {
        assert!(decode(v), "{name}: a valid encoding is refused");
    }
    println!("{name}: {MUTATIONS} mutations, {accepted} decoded as valid");
}

fn batches(seed: u64, epochs: std::ops::RangeInclusive<u64>) -> Vec<Batch> {
    let mut rng = Rng::new(seed);
    epochs
        .map(|e| {
            let (txns, args) = (rng.below(6) as usize, 1 + rng.below(40) as usize);
            batch(&mut rng, SHARD, e, txns, args)
        })
        .collect()
}

fn record(b: &Batch) -> Vec<u8> {
    let body = wal::body_len(b);
    let mut out = vec![0u8; wal::RECORD_HEADER_BYTES + body as usize];
    wal::encode_record(b, b.epoch - 1, b.epoch - 1, body, &mut out);
    out
}

fn record_samples() -> Vec<Vec<u8>> {
    batches(1, 1..=12).iter().map(record).collect()
}

fn segment_samples() -> Vec<Vec<u8>> {
    (0..6)
        .map(|seed| {
            let from = 1 + seed;
            fuzz::encode_segment(
                &batches(seed, from..=from + seed % 4 + 1),
                [512, 4096][seed as usize % 2],
            )
        })
        .collect()
}

#[test]
fn log_records_decode_or_fail() {
    let valid = record_samples();
    // A record's checksums are its header's and its body's: repair both.
    let repair = |b: &mut [u8]| {
        let mut segment = vec![0u8; 512];
        segment.extend_from_slice(b);
        fuzz::repair_segment(&mut segment);
        b.copy_from_slice(&segment[512..]);
    };
    mutations("wal_record", 1, &valid, repair, |b| {
        assert_eq!(fuzz::wal_record(b).is_ok(), wal::decode_record(b).is_ok());
        let Ok(Some((h, batch))) = wal::decode_record(b) else {
            return false;
        };
        if h.prev_epoch < batch.epoch && h.synced_epoch <= h.prev_epoch {
            // What decodes encodes back to the same bytes.
            let mut again = vec![0u8; h.record_len() as usize];
            wal::encode_record(&batch, h.prev_epoch, h.synced_epoch, wal::body_len(&batch), &mut again);
            assert_eq!(&b[..again.len()], &again[..], "the encoding is canonical");
        }
        true
    });
}

#[test]
fn log_segments_read_or_fail() {
    let valid = segment_samples();
    mutations("wal_segment", 2, &valid, fuzz::repair_segment, |b| {
        let first = if b.len() >= 24 {
            u64::from_le_bytes(b[16..24].try_into().unwrap()).max(1)
        } else {
            1
        };
        let read = fuzz::wal_log(first - 1, vec![(first, b.to_vec())]);
        // A second segment after it, the same bytes again: chains break.
        let _ = fuzz::wal_log(0, vec![(first, b.to_vec()), (first.saturating_add(100), b.to_vec())]);
        matches!(read, Ok((_, None)))
    });
}

/// Valid snapshot files and the manifest that lists them, written to disk
/// by the real writers.
fn snapshot_samples(name: &str) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let dir = DataDir::open(fresh_dir(name)).unwrap();
    let mut rng = Rng::new(3);
    let mut files = Vec::new();
    let mut bytes = Vec::new();
    for (shard, kind) in [(0u16, Kind::Base), (1, Kind::Delta)] {
        let mut w = FileWriter::create(&dir, kind, shard, 4, 0, b"the engine's metadata").unwrap();
        let n = 1 + rng.below(60);
        for k in 0..n {
            let key = (k * 7).to_be_bytes();
            let value = if kind == Kind::Delta && rng.chance(0.3) {
                None
            } else {
                Some(vec![rng.below(256) as u8; rng.below(50) as usize])
            };
            w.push(1, &key, value.as_deref()).unwrap();
        }
        let f = w.finish().unwrap();
        bytes.push(std::fs::read(dir.snapshot_dir().join(f.name())).unwrap());
        files.push(f);
    }
    let mut catalog = Catalog::open(&dir).unwrap();
    let m = Manifest::snapshot(None, 4, files).unwrap();
    catalog.commit(m).unwrap();
    let manifests = std::fs::read_dir(dir.snapshot_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("manifest-"))
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    (bytes, manifests)
}

#[test]
fn snapshot_files_read_or_fail() {
    let (files, _) = snapshot_samples("decoders-files");
    mutations("snapshot_file", 4, &files, fuzz::repair_snapshot_file, |b| {
        fuzz::snapshot_file(b.to_vec()).is_ok()
    });
}

#[test]
fn manifests_decode_or_fail() {
    let (_, manifests) = snapshot_samples("decoders-manifests");
    assert_eq!(manifests.len(), 1);
    mutations("manifest", 5, &manifests, fuzz::repair_manifest, |b| {
        matches!(fuzz::manifest(b), Ok(Some(_)))
    });
}

/// Writes the valid encodings as seed inputs of the fuzz targets, flag
/// byte 1 (repair checksums) first, into `storage/fuzz/seeds/<target>/`.
#[test]
#[ignore = "writes the fuzz targets' seed inputs"]
fn write_fuzz_seeds() {
    let (files, manifests) = snapshot_samples("decoders-seeds");
    for (target, samples) in [
        ("wal_record", record_samples()),
        ("wal_segment", segment_samples()),
        ("snapshot_file", files),
        ("manifest", manifests),
    ] {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fuzz/seeds")
            .join(target);
        std::fs::create_dir_all(&dir).unwrap();
        for (i, s) in samples.iter().enumerate() {
            let mut input = vec![1u8];
            input.extend_from_slice(s);
            std::fs::write(dir.join(format!("valid-{i}")), input).unwrap();
        }
    }
}
