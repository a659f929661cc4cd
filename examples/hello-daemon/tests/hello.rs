//! The example daemon serves its own functions over TCP, transactionally,
//! and prints its schema.

#[path = "../../../tools/tests/common/mod.rs"]
mod common;

use common::*;
use hello_daemon::{BookClient, BookRequest, GuestClient, GuestRequest};
use std::path::Path;
use styx_engine::{Decode, Outcome, TypedRequest};

/// Sends `request` as exactly-once client 9's request `seq` and returns its
/// outcome, the result decoded.
fn call<R: Decode>(c: &mut Conn, seq: u64, request: TypedRequest<R>) -> Result<R, String> {
    let f = c.call(
        9,
        seq,
        request.operator,
        request.function,
        request.key.clone(),
        request.args.clone(),
    );
    match outcome(&f).1 {
        Outcome::Committed(p) => Ok(request.decode(&p).expect("result type")),
        Outcome::Aborted(a) => Err(a.message().to_string()),
    }
}

#[test]
fn the_guest_book_daemon_serves_its_functions() {
    let dir = data_dir("hello");
    let d = Daemon::start(Path::new(env!("CARGO_BIN_EXE_hello-daemon")), &dir, &["--shards", "2"]);
    let mut c = d.connect();
    let lobby = BookRequest::new("lobby");
    for (seq, name) in ["ada", "grace", "ada"].iter().enumerate() {
        assert_eq!(
            call(&mut c, seq as u64 + 1, lobby.sign(name.to_string())),
            Ok(seq as u64 + 1)
        );
    }
    assert_eq!(
        call(&mut c, 4, lobby.entries()),
        Ok(vec![
            "ada (visit 1)".to_string(),
            "grace (visit 1)".to_string(),
            "ada (visit 2)".to_string()
        ])
    );
    // An abort rolls back the whole transaction.
    assert_eq!(
        call(&mut c, 5, lobby.sign(String::new())),
        Err("a name is 1 to 64 bytes".to_string())
    );
    assert_eq!(call(&mut c, 6, GuestRequest::new("grace").visit()), Ok(2));
}

#[test]
fn the_daemon_prints_its_schema() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hello-daemon"))
        .arg("--schema")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let schema = String::from_utf8(out.stdout).unwrap();
    assert!(schema.starts_with("app guestbook\n"), "{schema}");
    assert!(schema.contains("  sign(name: String) -> u64\n"), "{schema}");
    assert!(schema.contains("  visit() -> u64\n"), "{schema}");
}

#[test]
fn client_stubs_call_the_daemon_each_call_a_transaction() {
    let dir = data_dir("hello-stubs");
    let d = Daemon::start(Path::new(env!("CARGO_BIN_EXE_hello-daemon")), &dir, &["--shards", "2"]);
    let addr = d.addr.clone();
    glommio::LocalExecutorBuilder::default()
        .spawn(move || async move {
            let options = styx_net::client::Options::default();
            let client = styx_net::client::Client::connect(addr.as_str(), options).await.unwrap();
            let hall = BookClient::new(&client, "hall");
            assert_eq!(hall.sign("ada".into()).await.unwrap(), 1);
            assert_eq!(hall.sign("lin".into()).await.unwrap(), 2);
            // An abort is the client's Aborted error, and changes nothing.
            let err = hall.sign(String::new()).await.unwrap_err();
            assert!(err.to_string().contains("a name is 1 to 64 bytes"), "{err}");
            assert_eq!(
                hall.entries().await.unwrap(),
                vec!["ada (visit 1)".to_string(), "lin (visit 1)".to_string()]
            );
            assert_eq!(GuestClient::new(&client, "ada").visit().await.unwrap(), 2);
        })
        .unwrap()
        .join()
        .unwrap();
}
