//! A damaged data directory stops `styxd` at start with an error that says
//! what and where; nothing is silently skipped. (The storage crate tests the
//! readers byte by byte; this checks the daemon surfaces it.)

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use styx_engine::{Key, Payload};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_styxd"))
}

/// A directory with a few epochs in shard 0's log (and no snapshot).
fn populated(name: &str) -> PathBuf {
    let dir = data_dir(name);
    let mut d = Daemon::start(bin(), &dir, &["--shards", "1", "--snapshot-interval-ms", "0"]);
    let mut c = d.connect();
    for k in 0..20u64 {
        c.call(1, k + 1, "account", "deposit", Key::from(k), Payload::encode(&10i64));
    }
    drop(c);
    assert!(d.terminate().success());
    dir
}

/// Starts styxd on `dir`, expecting it to stop; returns (exit success,
/// stderr). A daemon still running after 60 s started on what it should
/// have refused: it is killed and the test fails, instead of hanging.
fn start_fails(dir: &Path) -> (bool, String) {
    let mut child = Command::new(bin())
        .args([
            "--data-dir",
            dir.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--metrics",
            "off",
            "--shards",
            "1",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "styxd started and kept serving on {}: {}",
                dir.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn segment(dir: &Path) -> PathBuf {
    let mut segs: Vec<PathBuf> = std::fs::read_dir(dir.join("wal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    segs.sort();
    segs.remove(0)
}

#[test]
fn a_corrupt_record_in_the_middle_of_the_log_stops_start_up_naming_file_and_offset() {
    let dir = populated("corrupt-log");
    let seg = segment(&dir);
    let mut bytes = std::fs::read(&seg).unwrap();
    // Records are 512-aligned after the 512-byte segment header; damage the
    // body of the third record, with valid records after it.
    let at = 3 * 512 + 60;
    bytes[at] ^= 0x5a;
    std::fs::write(&seg, &bytes).unwrap();
    let (ok, err) = start_fails(&dir);
    assert!(!ok, "styxd started on a corrupt log");
    assert!(
        err.contains(seg.file_name().unwrap().to_str().unwrap()),
        "names the file: {err}"
    );
    assert!(
        err.contains(&format!("byte {}", 3 * 512)),
        "names the damaged record's offset: {err}"
    );
}

#[test]
fn a_data_directory_of_another_format_version_is_refused() {
    let dir = populated("version");
    std::fs::write(dir.join("VERSION"), "styx data format 99\n").unwrap();
    let (ok, err) = start_fails(&dir);
    assert!(!ok);
    assert!(err.contains("99") || err.to_lowercase().contains("version"), "{err}");
}

#[test]
fn a_second_daemon_on_the_same_directory_is_refused() {
    let dir = data_dir("locked");
    let _d = Daemon::start(bin(), &dir, &["--shards", "1"]);
    let (ok, err) = start_fails(&dir);
    assert!(!ok);
    assert!(err.to_lowercase().contains("lock") || err.contains("in use"), "{err}");
}

#[test]
fn a_corrupt_snapshot_file_stops_start_up() {
    let dir = data_dir("corrupt-snapshot");
    let mut d = Daemon::start(bin(), &dir, &["--shards", "1", "--snapshot-interval-ms", "20"]);
    let mut c = d.connect();
    for k in 0..50u64 {
        c.call(1, k + 1, "account", "deposit", Key::from(k), Payload::encode(&10i64));
    }
    // A snapshot every 20 ms: some after the deposits by now, and at
    // least one complete however late a loaded machine ran them.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while styx_storage::snapshot::complete_manifests(&dir.join("snapshot"))
        .unwrap()
        .is_empty()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no snapshot committed within 10 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    drop(c);
    assert!(d.terminate().success());
    // The newest file of the latest complete snapshot: files written after
    // it (a snapshot whose manifest the shutdown did not wait for) are
    // rightly ignored by recovery.
    let manifests = styx_storage::snapshot::complete_manifests(&dir.join("snapshot")).unwrap();
    let latest = manifests.last().expect("a snapshot was committed");
    let newest = latest.shards[0].files.last().expect("a file in the snapshot");
    let f = dir.join("snapshot").join(newest.name());
    let mut bytes = std::fs::read(&f).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&f, &bytes).unwrap();
    let (ok, err) = start_fails(&dir);
    assert!(!ok, "styxd started on a corrupt snapshot");
    assert!(
        err.contains(f.file_name().unwrap().to_str().unwrap()),
        "names the file: {err}"
    );
}

/// Balances of accounts `0..keys` read with GET (absent: 0).
fn balances(d: &Daemon, keys: u64) -> Vec<i64> {
    let mut c = d.connect();
    (0..keys)
        .map(|k| {
            c.send(styx_net::Body::Get {
                operator: "account".into(),
                key: Key::from(k),
            });
            match c.recv().unwrap().body {
                styx_net::Body::State { value } => value.map_or(0, |v| i64::from_le_bytes(v.try_into().unwrap())),
                other => panic!("{other:?}"),
            }
        })
        .collect()
}

/// A crash can leave one shard's log an epoch behind another's (one fsync
/// finished, the other did not). Recovery replays the missing epoch as
/// empty on that shard and logs it so, and the daemon serves on: nothing is
/// logged twice, and a later restart replays to the same state.
#[test]
fn logs_that_end_at_different_epochs_are_evened_out_and_the_daemon_serves_on() {
    let dir = data_dir("uneven-logs");
    let args = ["--shards", "2", "--snapshot-interval-ms", "0"];
    let mut d = Daemon::start(bin(), &dir, &args);
    let keys = 40;
    let mut c = d.connect();
    for k in 0..keys {
        c.call(1, k + 1, "account", "deposit", Key::from(k), Payload::encode(&10i64));
    }
    drop(c);
    d.kill9();
    // Cut shard 1's last record as a torn write would.
    let report = styx_storage::inspect::log(&dir).unwrap();
    let s1 = report.shards.iter().find(|s| s.shard == 1).expect("shard 1 logged");
    let s0_last = report.shards.iter().find(|s| s.shard == 0).unwrap().epochs().unwrap().1;
    let last = s1.records.last().expect("shard 1 has records");
    assert!(last.header.epoch >= s0_last, "shard 1 logged through the last epoch");
    let seg = &s1.segments[last.segment].path;
    let mut bytes = std::fs::read(seg).unwrap();
    bytes[last.offset as usize..].fill(0);
    std::fs::write(seg, &bytes).unwrap();

    let mut d = d.restart();
    let recovered = balances(&d, keys);
    // Work after recovery commits and is logged once.
    let mut c = d.connect();
    for k in 0..keys {
        let f = c.call(2, k + 1, "account", "deposit", Key::from(k), Payload::encode(&1i64));
        assert!(matches!(outcome(&f).1, styx_engine::Outcome::Committed(_)), "{f:?}");
    }
    drop(c);
    let expected: Vec<i64> = recovered.iter().map(|b| b + 1).collect();
    assert_eq!(balances(&d, keys), expected);
    assert!(d.terminate().success(), "a clean stop after recovery");
    let report = styx_storage::inspect::log(&dir).unwrap();
    assert!(report.is_clean(), "{report}");
    let d = d.restart();
    assert_eq!(
        balances(&d, keys),
        expected,
        "a second recovery replays to the same state"
    );
}
