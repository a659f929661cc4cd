//! The example daemon serves its own functions over TCP, transactionally.

#[path = "../../../tools/tests/common/mod.rs"]
mod common;

use common::*;
use std::path::Path;
use styx_engine::{Key, Outcome, Payload};

#[test]
fn the_guest_book_daemon_serves_its_functions() {
    let dir = data_dir("hello");
    let d = Daemon::start(Path::new(env!("CARGO_BIN_EXE_hello-daemon")), &dir, &["--shards", "2"]);
    let mut c = d.connect();
    for (seq, name) in ["ada", "grace", "ada"].iter().enumerate() {
        let f = c.call(
            9,
            seq as u64 + 1,
            "book",
            "sign",
            Key::from("lobby"),
            Payload::encode(*name),
        );
        let (_, o) = outcome(&f);
        assert_eq!(o, Outcome::Committed(Payload::encode(&(seq as u64 + 1))));
    }
    let f = c.call(0, 0, "book", "entries", Key::from("lobby"), Payload::EMPTY);
    let Outcome::Committed(p) = outcome(&f).1 else {
        panic!("{f:?}")
    };
    assert_eq!(
        p.decode::<Vec<String>>().unwrap(),
        ["ada (visit 1)", "grace (visit 1)", "ada (visit 2)"]
    );
    // An abort rolls back the whole transaction.
    let f = c.call(0, 0, "book", "sign", Key::from("lobby"), Payload::encode(""));
    assert!(matches!(outcome(&f).1, Outcome::Aborted(_)));
}
