//! Snapshots: files, manifests, loading, compaction, garbage collection.

mod common;

use common::fresh_dir;
use std::collections::BTreeMap;
use std::fs;
use styx_engine::rng::Rng;
use styx_engine::{Epoch, ShardId};
use styx_storage::snapshot::{self, Catalog, Entry, FileReader, FileRef, Kind, Manifest};
use styx_storage::{DataDir, Error, inspect};

type State = BTreeMap<(u16, Vec<u8>), Vec<u8>>;
type Delta = BTreeMap<(u16, Vec<u8>), Option<Vec<u8>>>;

fn key(rng: &mut Rng, space: u64) -> (u16, Vec<u8>) {
    let n = rng.below(space);
    ((n % 3) as u16, format!("key-{n}").into_bytes())
}

/// A random delta against `state` (which it updates): puts and deletes.
fn random_delta(rng: &mut Rng, state: &mut State, changes: usize, space: u64) -> Delta {
    let mut d = Delta::new();
    for _ in 0..changes {
        let k = key(rng, space);
        if rng.chance(0.25) {
            state.remove(&k);
            d.insert(k, None);
        } else {
            let len = if rng.chance(0.01) {
                40_000
            } else {
                rng.below(64) as usize
            };
            let v: Vec<u8> = (0..len).map(|_| rng.below(256) as u8).collect();
            state.insert(k.clone(), v.clone());
            d.insert(k, Some(v));
        }
    }
    d
}

fn write(dir: &DataDir, shard: ShardId, epoch: Epoch, parent: Epoch, meta: &[u8], d: &Delta) -> FileRef {
    let mut entries: Vec<Entry<'_>> = d
        .iter()
        .map(|((op, k), v)| Entry {
            op: *op,
            key: k,
            value: v.as_deref(),
        })
        .collect();
    // Any order is accepted.
    entries.reverse();
    snapshot::write_delta(dir, shard, epoch, parent, meta, &mut entries).unwrap()
}

fn load(dir: &DataDir, m: &Manifest, shard: ShardId) -> (snapshot::Loaded, State) {
    let (loaded, entries) = snapshot::load_vec(&dir.snapshot_dir(), m, shard).unwrap();
    let state = entries.into_iter().map(|(op, k, v)| ((op, k), v)).collect();
    (loaded, state)
}

#[test]
fn a_snapshot_roundtrips() {
    let root = fresh_dir("snap-roundtrip");
    let dir = DataDir::open(&root).unwrap();
    let mut rng = Rng::new(1);
    let mut states = [State::new(), State::new()];
    // Enough entries for several chunks.
    let deltas: Vec<Delta> = states
        .iter_mut()
        .map(|s| random_delta(&mut rng, s, 30_000, 1_000_000))
        .collect();
    let files: Vec<FileRef> = (0..2)
        .map(|s| write(&dir, s, 10, 0, format!("meta of {s}").as_bytes(), &deltas[s as usize]))
        .collect();
    let mut catalog = Catalog::open(&dir).unwrap();
    assert!(catalog.latest().is_none());
    let m = catalog
        .commit(Manifest::snapshot(None, 10, files).unwrap())
        .unwrap()
        .clone();
    assert_eq!(m.generation, 1);

    let reopened = Catalog::open(&dir).unwrap();
    assert_eq!(reopened.latest(), Some(&m));
    for s in 0..2u16 {
        let (loaded, state) = load(&dir, &m, s);
        assert_eq!(state, states[s as usize]);
        assert_eq!(loaded.meta, format!("meta of {s}").into_bytes());
        assert_eq!((loaded.epoch, loaded.log_after), (10, 10));
        assert_eq!(loaded.entries, state.len() as u64);
    }
    let mut r = FileReader::open(&dir.snapshot_dir().join(m.shards[0].files[0].name())).unwrap();
    r.skip_to_end().unwrap();
    assert!(r.counts().0 > 1, "several chunks: {:?}", r.counts());
}

#[test]
fn compaction_equals_applying_the_deltas() {
    let root = fresh_dir("snap-compact");
    let dir = DataDir::open(&root).unwrap();
    let mut rng = Rng::new(2);
    let mut state = State::new();
    let mut catalog = Catalog::open(&dir).unwrap();
    let mut parent = 0;
    for epoch in [5, 9, 14, 20, 21] {
        let d = random_delta(&mut rng, &mut state, 3_000, 5_000);
        let f = write(&dir, 0, epoch, parent, format!("meta {epoch}").as_bytes(), &d);
        let next = Manifest::snapshot(catalog.latest(), epoch, vec![f]).unwrap();
        catalog.commit(next).unwrap();
        parent = epoch;
        let m = catalog.latest().unwrap().clone();
        let (loaded, got) = load(&dir, &m, 0);
        assert_eq!(got, state, "after epoch {epoch}");
        assert_eq!(loaded.meta, format!("meta {epoch}").into_bytes());
    }
    let m = catalog.latest().unwrap().clone();
    assert_eq!(m.shards[0].files.len(), 5);

    // A compaction taken from this manifest while a later snapshot commits.
    let base = snapshot::compact(&dir, &m, 0).unwrap().unwrap();
    assert_eq!((base.kind, base.epoch, base.parent_epoch), (Kind::Base, 21, 0));
    assert_eq!(base.entries, state.len() as u64);
    let d = random_delta(&mut rng, &mut state, 500, 5_000);
    let f = write(&dir, 0, 30, 21, b"meta 30", &d);
    catalog
        .commit(Manifest::snapshot(catalog.latest(), 30, vec![f]).unwrap())
        .unwrap();
    let compacted = catalog.latest().unwrap().compacted(base).unwrap();
    let m = catalog.commit(compacted).unwrap().clone();
    let chain: Vec<(Kind, Epoch)> = m.shards[0].files.iter().map(|f| (f.kind, f.epoch)).collect();
    assert_eq!(chain, [(Kind::Base, 21), (Kind::Delta, 30)]);
    let (loaded, got) = load(&dir, &m, 0);
    assert_eq!(got, state);
    assert_eq!(loaded.meta, b"meta 30");
    // The base holds the merged state, without tombstones.
    let mut r = FileReader::open(&dir.snapshot_dir().join(base.name())).unwrap();
    r.skip_to_end().unwrap();
    assert_eq!(r.counts().1, 0);

    // Garbage: the old chain, old manifests. A newer unlisted file (a
    // snapshot in progress) stays.
    let pending = write(&dir, 0, 40, 30, b"", &Delta::new());
    let removed = catalog.gc().unwrap();
    let names: Vec<String> = removed
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for e in [5, 9, 14, 20, 21] {
        assert!(names.contains(&snapshot::file_name(0, e, Kind::Delta)), "{names:?}");
    }
    assert!(
        names.iter().filter(|n| n.starts_with("manifest-")).count() == 6,
        "{names:?}"
    );
    assert!(dir.snapshot_dir().join(pending.name()).exists());
    assert!(dir.snapshot_dir().join(snapshot::manifest_name(m.generation)).exists());
    let (_, again) = load(&dir, &Catalog::open(&dir).unwrap().latest().unwrap().clone(), 0);
    assert_eq!(again, state);
    // A single-file chain is not compacted.
    let one = Manifest::snapshot(None, 50, vec![write(&dir, 1, 50, 0, b"", &Delta::new())]).unwrap();
    assert_eq!(snapshot::compact(&dir, &one, 1).unwrap(), None);
}

#[test]
fn an_incomplete_manifest_is_ignored() {
    let root = fresh_dir("snap-manifest");
    let dir = DataDir::open(&root).unwrap();
    let mut rng = Rng::new(3);
    let mut state = State::new();
    let mut catalog = Catalog::open(&dir).unwrap();
    let d = random_delta(&mut rng, &mut state, 100, 1000);
    let f = write(&dir, 0, 7, 0, b"seven", &d);
    catalog.commit(Manifest::snapshot(None, 7, vec![f]).unwrap()).unwrap();
    let good = catalog.latest().unwrap().clone();
    let mut later = state.clone();
    let d2 = random_delta(&mut rng, &mut later, 100, 1000);
    let f2 = write(&dir, 0, 8, 7, b"eight", &d2);
    catalog
        .commit(Manifest::snapshot(Some(&good), 8, vec![f2]).unwrap())
        .unwrap();
    let newest = dir.snapshot_dir().join(snapshot::manifest_name(2));
    let bytes = fs::read(&newest).unwrap();

    for (what, content) in [
        ("empty", Vec::new()),
        ("zeros", vec![0u8; bytes.len()]),
        ("half", bytes[..bytes.len() / 2].to_vec()),
        ("header only", bytes[..64].to_vec()),
        ("a byte of the body flipped", {
            let mut b = bytes.clone();
            let n = b.len();
            b[n - 3] ^= 0x40;
            b
        }),
    ] {
        fs::write(&newest, &content).unwrap();
        let catalog = Catalog::open(&dir).unwrap();
        assert_eq!(catalog.latest(), Some(&good), "{what}");
        assert_eq!(catalog.ignored().len(), 1, "{what}");
        let (loaded, got) = load(&dir, catalog.latest().unwrap(), 0);
        assert_eq!((got, loaded.meta), (state.clone(), b"seven".to_vec()), "{what}");
        // The next commit does not reuse the skipped generation.
        let latest = snapshot::latest(&dir.snapshot_dir()).unwrap();
        assert_eq!(latest.generation_max, 2);
    }
    // A temporary left by a crash during a commit is not a manifest.
    fs::write(&newest, &bytes).unwrap();
    fs::write(
        dir.snapshot_dir().join(format!("{}.tmp", snapshot::manifest_name(3))),
        b"",
    )
    .unwrap();
    let catalog = Catalog::open(&dir).unwrap();
    assert_eq!(catalog.latest().unwrap().epoch, 8);
    let removed = catalog.gc().unwrap();
    assert!(
        removed.iter().any(|p| p.to_string_lossy().ends_with(".tmp")),
        "{removed:?}"
    );
}

#[test]
fn damage_and_other_versions_are_refused() {
    let root = fresh_dir("snap-damage");
    let dir = DataDir::open(&root).unwrap();
    let mut rng = Rng::new(4);
    let mut state = State::new();
    let d = random_delta(&mut rng, &mut state, 2_000, 100_000);
    let f = write(&dir, 0, 3, 0, b"m", &d);
    let mut catalog = Catalog::open(&dir).unwrap();
    let m = catalog
        .commit(Manifest::snapshot(None, 3, vec![f]).unwrap())
        .unwrap()
        .clone();
    let path = dir.snapshot_dir().join(f.name());
    let original = fs::read(&path).unwrap();

    // Any byte flipped, anywhere: refused with the file named.
    let mut rng = Rng::new(5);
    for _ in 0..200 {
        let at = rng.below(original.len() as u64) as usize;
        let mut bad = original.clone();
        bad[at] ^= 1 << rng.below(8);
        fs::write(&path, &bad).unwrap();
        let err = snapshot::load_vec(&dir.snapshot_dir(), &m, 0).unwrap_err();
        assert!(
            matches!(err, Error::Corrupt { .. } | Error::Magic { .. } | Error::Version { .. }),
            "byte {at}: {err}"
        );
        assert!(err.to_string().contains(&path.display().to_string()), "{err}");
    }
    // Cut short.
    fs::write(&path, &original[..original.len() - 10]).unwrap();
    assert!(matches!(
        snapshot::load_vec(&dir.snapshot_dir(), &m, 0).unwrap_err(),
        Error::Corrupt { .. }
    ));
    // Another version (header checksum recomputed).
    let mut v2 = original.clone();
    v2[8..10].copy_from_slice(&2u16.to_le_bytes());
    let crc = crc32c::crc32c(&v2[..60]);
    v2[60..64].copy_from_slice(&crc.to_le_bytes());
    fs::write(&path, &v2).unwrap();
    let err = snapshot::load_vec(&dir.snapshot_dir(), &m, 0).unwrap_err();
    assert!(matches!(err, Error::Version { found: 2, .. }), "{err}");
    // Another magic.
    fs::write(&path, b"not a snapshot at all, just some text ".repeat(10)).unwrap();
    let err = snapshot::load_vec(&dir.snapshot_dir(), &m, 0).unwrap_err();
    assert!(matches!(err, Error::Magic { .. }), "{err}");
    // Missing.
    fs::remove_file(&path).unwrap();
    let err = snapshot::load_vec(&dir.snapshot_dir(), &m, 0).unwrap_err();
    assert!(matches!(err, Error::Missing { .. }), "{err}");
    fs::write(&path, &original).unwrap();
    assert_eq!(load(&dir, &m, 0).1, state);

    // A manifest of another version is refused, not skipped.
    let mpath = dir.snapshot_dir().join(snapshot::manifest_name(m.generation));
    let mut mbytes = fs::read(&mpath).unwrap();
    mbytes[8..10].copy_from_slice(&9u16.to_le_bytes());
    fs::write(&mpath, &mbytes).unwrap();
    let err = Catalog::open(&dir).unwrap_err();
    assert!(matches!(err, Error::Version { found: 9, .. }), "{err}");
    mbytes[0] = b'x';
    fs::write(&mpath, &mbytes).unwrap();
    assert!(matches!(Catalog::open(&dir).unwrap_err(), Error::Magic { .. }));
}

#[test]
fn a_delta_against_an_uncommitted_snapshot_is_refused() {
    let root = fresh_dir("snap-parent");
    let dir = DataDir::open(&root).unwrap();
    let mut catalog = Catalog::open(&dir).unwrap();
    let f = write(&dir, 0, 3, 0, b"", &Delta::new());
    catalog.commit(Manifest::snapshot(None, 3, vec![f]).unwrap()).unwrap();
    // Epoch 5's delta was written but its manifest never committed; epoch
    // 8's delta was taken against 5.
    let _lost = write(&dir, 0, 5, 3, b"", &Delta::new());
    let f8 = write(&dir, 0, 8, 5, b"", &Delta::new());
    let err = Manifest::snapshot(catalog.latest(), 8, vec![f8]).unwrap_err();
    assert!(
        err.to_string()
            .contains("every change since the last committed snapshot"),
        "{err}"
    );
}

#[test]
fn inspect_describes_snapshots() {
    let root = fresh_dir("snap-inspect");
    let dir = DataDir::open(&root).unwrap();
    let mut rng = Rng::new(6);
    let mut state = State::new();
    let mut catalog = Catalog::open(&dir).unwrap();
    let d = random_delta(&mut rng, &mut state, 500, 1000);
    let f = write(&dir, 0, 4, 0, b"meta", &d);
    catalog.commit(Manifest::snapshot(None, 4, vec![f]).unwrap()).unwrap();
    let report = inspect::snapshot(dir.root()).unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.files.len(), 1);
    assert_eq!(report.files[0].entries, f.entries);
    let text = report.to_string();
    assert!(text.contains("latest complete snapshot: epoch 4"), "{text}");
    assert!(text.contains("checksums verified"), "{text}");

    let path = dir.snapshot_dir().join(f.name());
    let mut bad = fs::read(&path).unwrap();
    let n = bad.len();
    bad[n / 2] ^= 0x80;
    fs::write(&path, &bad).unwrap();
    let report = inspect::snapshot(dir.root()).unwrap();
    assert!(!report.is_clean());
    assert!(report.to_string().contains("DAMAGED"), "{report}");
    let one = inspect::snapshot(&path).unwrap();
    assert!(one.files[0].problem.is_some());
}

#[test]
fn engine_entities_roundtrip() {
    use styx_engine::{Key, OpId, Scratch, Value};
    let root = fresh_dir("snap-entities");
    let dir = DataDir::open(&root).unwrap();
    let mut scratch = Scratch::default();
    let mut entries: Vec<(OpId, Key, Option<Value>)> = Vec::new();
    for i in 0..1000u64 {
        let value = match i % 3 {
            0 => Some(Value::encode(&(i as i64 * -3), &mut scratch).unwrap()),
            1 => Some(Value::encode(&"x".repeat(i as usize % 100), &mut scratch).unwrap()),
            _ => None,
        };
        entries.push((OpId((i % 4) as u16), Key::from(i * 7), value));
    }
    let f = snapshot::write_entities(&dir, 2, 6, 0, b"engine meta", &mut entries).unwrap();
    let mut catalog = Catalog::open(&dir).unwrap();
    let m = catalog
        .commit(Manifest::snapshot(None, 6, vec![f]).unwrap())
        .unwrap()
        .clone();
    let mut got = Vec::new();
    let loaded =
        snapshot::load_entities(&dir.snapshot_dir(), &m, 2, |op, key, value| got.push((op, key, value))).unwrap();
    assert_eq!(loaded.meta, b"engine meta");
    let mut want: Vec<(OpId, Key, Value)> = entries.into_iter().filter_map(|(op, k, v)| Some((op, k, v?))).collect();
    want.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    assert_eq!(got, want);
    assert_eq!(got[0].2.decode::<i64>().unwrap(), 0);
}

/// Whatever the damage to a snapshot file, loading returns the exact state
/// or an error; it never panics.
#[test]
fn random_damage_loads_exactly_or_fails() {
    let root = fresh_dir("snap-random-damage");
    let dir = DataDir::open(&root).unwrap();
    let mut rng = Rng::new(7);
    let mut state = State::new();
    let d = random_delta(&mut rng, &mut state, 3_000, 10_000);
    let f = write(&dir, 0, 2, 0, b"meta", &d);
    let mut catalog = Catalog::open(&dir).unwrap();
    let m = catalog
        .commit(Manifest::snapshot(None, 2, vec![f]).unwrap())
        .unwrap()
        .clone();
    let path = dir.snapshot_dir().join(f.name());
    let original = fs::read(&path).unwrap();
    let mut errors = 0;
    for _ in 0..200 {
        let mut bad = original.clone();
        let at = rng.below(bad.len() as u64) as usize;
        let n = 1 + rng.below(64) as usize;
        for b in &mut bad[at..(at + n).min(original.len())] {
            *b = rng.below(256) as u8;
        }
        fs::write(&path, &bad).unwrap();
        match snapshot::load_vec(&dir.snapshot_dir(), &m, 0) {
            Ok((_, entries)) => {
                let got: State = entries.into_iter().map(|(op, k, v)| ((op, k), v)).collect();
                assert_eq!(got, state);
                assert_eq!(bad, original, "damage went unnoticed");
            }
            Err(_) => errors += 1,
        }
    }
    assert!(errors > 150, "{errors}");
}

#[test]
fn a_cluster_node_keeps_snapshots_to_roll_back_to() {
    let root = fresh_dir("snap-rollback");
    let dir = DataDir::open(&root).unwrap();
    let mut rng = Rng::new(7);
    let mut states = [State::new()];
    let mut catalog = Catalog::open(&dir).unwrap();
    let mut after = BTreeMap::new();
    let mut parent = 0;
    for epoch in [5, 9, 14] {
        let d = random_delta(&mut rng, &mut states[0], 200, 1_000);
        let f = write(&dir, 0, epoch, parent, b"m", &d);
        let m = Manifest::snapshot(catalog.latest(), epoch, vec![f]).unwrap();
        catalog.commit(m).unwrap();
        // The cluster completed only epoch 5 so far: 9 and 14 stay.
        catalog.gc_keeping(5).unwrap();
        after.insert(epoch, states[0].clone());
        parent = epoch;
    }
    assert_eq!(catalog.epochs().unwrap(), [5, 9, 14]);
    // Recovery agreed on 9 (another node never completed 14).
    catalog.roll_back_to(Some(9)).unwrap();
    assert_eq!(catalog.latest().unwrap().epoch, 9);
    assert_eq!(Catalog::open(&dir).unwrap().epochs().unwrap(), [5, 9]);
    let (_, state) = load(&dir, &catalog.latest().unwrap().clone(), 0);
    assert_eq!(state, after[&9]);
    // The next snapshot extends 9, and its generation is new.
    let d = random_delta(&mut rng, &mut states[0], 50, 1_000);
    let f = write(&dir, 0, 20, 9, b"m", &d);
    let m = catalog
        .commit(Manifest::snapshot(catalog.latest(), 20, vec![f]).unwrap())
        .unwrap()
        .clone();
    assert!(m.generation > 3, "generation {}", m.generation);
    // Once the cluster completed 20, everything older goes, files included.
    catalog.gc_keeping(20).unwrap();
    assert_eq!(catalog.epochs().unwrap(), [20]);
    let files: Vec<String> = fs::read_dir(dir.snapshot_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        files.iter().all(|f| !f.contains("000000000014")),
        "the file of the abandoned snapshot 14 is collected: {files:?}"
    );
    // Rolling back to nothing drops every manifest.
    catalog.roll_back_to(None).unwrap();
    assert!(catalog.latest().is_none());
    assert!(catalog.roll_back_to(Some(20)).is_err());
}
