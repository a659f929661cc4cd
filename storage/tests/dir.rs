//! The data directory: lock, version, layout.

mod common;

use common::fresh_dir;
use std::fs;
use styx_storage::{DataDir, Error};

#[test]
fn a_second_holder_is_refused_with_the_pid() {
    let root = fresh_dir("dir-lock");
    let first = DataDir::open(&root).unwrap();
    assert!(first.wal_dir().is_dir() && first.snapshot_dir().is_dir());
    // Another open file description in this process, as a second process
    // would have.
    let err = DataDir::open(&root).unwrap_err();
    match &err {
        Error::Locked { dir, pid } => {
            assert_eq!(dir, &root);
            assert_eq!(*pid, Some(std::process::id()));
        }
        other => panic!("{other}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains(&root.display().to_string()) && msg.contains("pid"),
        "{msg}"
    );
    drop(first);
    let again = DataDir::open(&root).unwrap();
    assert_eq!(again.root(), root.as_path());
}

#[test]
fn another_version_is_refused() {
    let root = fresh_dir("dir-version");
    drop(DataDir::open(&root).unwrap());
    assert_eq!(
        fs::read_to_string(root.join("VERSION")).unwrap(),
        "styx data format 1\n"
    );
    fs::write(root.join("VERSION"), "styx data format 7\n").unwrap();
    let err = DataDir::open(&root).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Version {
                found: 7,
                expected: 1,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("format version 7"), "{err}");
    fs::write(root.join("VERSION"), "something else").unwrap();
    assert!(matches!(DataDir::open(&root).unwrap_err(), Error::Magic { .. }));
}

#[test]
fn a_foreign_directory_is_refused() {
    let root = fresh_dir("dir-foreign");
    fs::write(root.join("notes.txt"), "my notes").unwrap();
    let err = DataDir::open(&root).unwrap_err();
    assert!(matches!(err, Error::NotDataDir { .. }), "{err}");
    assert_eq!(fs::read_to_string(root.join("notes.txt")).unwrap(), "my notes");
    assert!(!root.join("VERSION").exists() && !root.join("LOCK").exists());
}
