//! The `styxd` binary end to end, over TCP.

mod common;
mod support;

use common::*;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};
use styx_engine::{AbortKind, Key, Outcome, Payload};
use styx_net::{Body, ErrorCode, Frame};
use support::*;

const START: i64 = 1_000;

fn styxd() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_styxd"))
}

/// Runs `styx repl` with `input` on stdin.
fn styx_repl(addr: &str, input: &str) -> (i32, String) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_styx"))
        .args(["repl", "--connect", addr])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("styx repl runs");
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let text = output_text(&out);
    (out.status.code().unwrap_or(-1), text)
}

fn balance_bytes(v: &[u8]) -> i64 {
    i64::from_le_bytes(v.try_into().expect("an i64 archive"))
}

/// Deposits `START` into accounts `0..keys` (exactly-once client 1).
fn load(d: &Daemon, keys: u64) {
    deposit_all(&mut d.connect(), 0..keys, START);
}

/// Every balance, read with GET.
fn balances(d: &Daemon, keys: u64) -> BTreeMap<u64, i64> {
    let mut c = d.connect();
    let mut out = BTreeMap::new();
    for k in 0..keys {
        c.send(Body::Get {
            operator: "account".into(),
            key: Key::from(k),
        });
    }
    for k in 0..keys {
        let f = c.recv().unwrap();
        let Body::State { value } = f.body else { panic!("{f:?}") };
        out.insert(k, value.map_or(0, |v| balance_bytes(&v)));
    }
    out
}

#[test]
fn ycsbt_over_tcp_from_several_connections_keeps_every_balance_exact() {
    let dir = data_dir("ycsbt");
    let d = Daemon::start(styxd(), &dir, &["--shards", "2", "--snapshot-interval-ms", "200"]);
    let keys = 100;
    load(&d, keys);
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let addr = d.addr.clone();
            std::thread::spawn(move || {
                let mut c = Conn::connect(&addr);
                let mut rng = styx_engine::rng::Rng::new(t);
                let mut deltas: BTreeMap<u64, i64> = BTreeMap::new();
                let mut sent = BTreeMap::new();
                let client = 100 + t;
                for round in 0..20u64 {
                    // A pipeline of 25 transfers, then their 25 answers.
                    for i in 0..25u64 {
                        let seq = round * 25 + i + 1;
                        let debtor = rng.below(keys);
                        let creditor = (debtor + 1 + rng.below(keys - 1)) % keys;
                        let amount = 1 + rng.below(300) as i64;
                        let corr = send_as(
                            &mut c,
                            client,
                            seq,
                            Req::Transfer {
                                debtor,
                                creditor,
                                amount,
                            },
                        );
                        sent.insert(corr, (debtor, creditor, amount));
                    }
                    for _ in 0..25 {
                        let f = c.recv().unwrap();
                        let (debtor, creditor, amount) = sent.remove(&f.corr).expect("answers a request");
                        match outcome(&f).1 {
                            Outcome::Committed(_) => {
                                *deltas.entry(debtor).or_default() -= amount;
                                *deltas.entry(creditor).or_default() += amount;
                            }
                            Outcome::Aborted(a) => {
                                assert_eq!(a.kind(), AbortKind::User);
                                assert_eq!(a.message(), "insufficient credit");
                            }
                        }
                    }
                }
                deltas
            })
        })
        .collect();
    let mut expected: BTreeMap<u64, i64> = (0..keys).map(|k| (k, START)).collect();
    for t in threads {
        for (k, d) in t.join().unwrap() {
            *expected.get_mut(&k).unwrap() += d;
        }
    }
    let got = balances(&d, keys);
    assert_eq!(got, expected, "every balance is its start plus the committed transfers");
    assert_eq!(got.values().sum::<i64>(), START * keys as i64, "money is conserved");
    assert!(got.values().all(|b| *b >= 0));
    let metrics = d.http_get("/metrics");
    assert!(metrics.contains("styx_log_syncs_total"), "{metrics}");
    assert!(d.http_get("/health").contains("ok"));

    // `styx verify` agrees, and notices money made out of thin air.
    let total = (START * keys as i64).to_string();
    let verify = [
        "verify",
        "ycsbt",
        "--connect",
        &d.addr,
        "--keys",
        "100",
        "--total",
        &total,
    ];
    let (code, out) = styx(&verify);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("ycsbt: consistent"), "{out}");
    let (code, out) = styx(&["call", "--connect", &d.addr, "account", "5", "deposit", "i64:1"]);
    assert_eq!(code, 0, "{out}");
    let (code, out) = styx(&verify);
    assert_eq!(code, 1, "a violated total fails verify: {out}");
    assert!(out.contains(&format!("expected {total}")), "{out}");
}

#[test]
fn the_cli_calls_reads_reports_and_runs_a_repl() {
    let dir = data_dir("cli");
    let d = Daemon::start(styxd(), &dir, &["--shards", "2"]);
    let a = d.addr.as_str();
    let (code, out) = styx(&["call", "--connect", a, "account", "1", "deposit", "i64:50"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("committed (tid "), "{out}");
    let (code, out) = styx(&["call", "--connect", a, "account", "1", "transfer", "u64:2", "i64:20"]);
    assert_eq!(code, 0, "{out}");
    let (code, out) = styx(&["call", "--connect", a, "account", "1", "balance", "--as", "i64"]);
    assert_eq!((code, out.trim_end().ends_with(": 30")), (0, true), "{out}");
    // An abort by the function's own logic has its own exit status.
    let (code, out) = styx(&["call", "--connect", a, "account", "1", "transfer", "u64:2", "i64:31"]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("insufficient credit"), "{out}");
    let (code, out) = styx(&["get", "--connect", a, "account", "2", "--as", "i64"]);
    assert_eq!((code, out.trim()), (0, "20"), "{out}");
    let (code, out) = styx(&["get", "--connect", a, "account", "999"]);
    assert_eq!((code, out.trim()), (0, "(absent)"), "{out}");
    // Bad input: clear errors, usage status 2, or the server's error.
    let (code, out) = styx(&["call", "--connect", a, "account", "1", "deposit", "int:5"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("unknown type"), "{out}");
    let (code, out) = styx(&["call", "--connect", a, "nope", "1", "deposit", "i64:5"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("nope"), "{out}");
    let (code, out) = styx(&["call", "--connect", a, "account", "1", "deposit", "str:x"]);
    assert_eq!(code, 1, "malformed arguments are an error: {out}");
    let metrics = d.metrics.clone().expect("a metrics address");
    let (code, out) = styx(&["status", "--connect", a, "--metrics", &metrics]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("shards      2"), "{out}");
    assert!(out.contains("durable epoch"), "{out}");
    let (code, out) = styx(&["status", "--connect", "127.0.0.1:1", "--timeout", "0.5"]);
    assert_eq!(code, 1, "{out}");

    // By the schema the daemon serves: plain arguments, results as JSON.
    let by_schema = |schema: &[&str], args: &[&str]| {
        let mut all = vec!["call", "--connect", a];
        all.extend(schema);
        all.extend(args);
        styx(&all)
    };
    let served = ["--metrics", metrics.as_str()];
    let (code, out) = by_schema(&served, &["account", "3", "deposit", "40"]);
    assert_eq!(code, 0, "{out}");
    let (code, out) = by_schema(&served, &["account", "3", "transfer", "4", "15"]);
    assert_eq!(code, 0, "{out}");
    let (code, out) = by_schema(&served, &["account", "3", "balance"]);
    assert_eq!((code, out.trim_end().ends_with(": 25")), (0, true), "{out}");
    let (code, out) = by_schema(&served, &["account", "3", "transfer", "4"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("transfer takes 2 arguments, got 1"), "{out}");
    let (code, out) = by_schema(&served, &["account", "3", "transfer", "4", "x"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("amount: expected i64"), "{out}");
    let (code, out) = by_schema(&served, &["account", "3", "tranfser", "4", "1"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("it has deposit, transfer, balance"), "{out}");
    // The schema saved from `styxd --schema json` does the same without
    // asking the daemon, and is the one it serves.
    let saved = std::process::Command::new(styxd())
        .args(["--app", "ycsbt", "--schema", "json"])
        .output()
        .unwrap();
    assert!(saved.status.success(), "{saved:?}");
    let file = dir.join("schema.json");
    std::fs::write(&file, &saved.stdout).unwrap();
    let parse = |text: &str| serde_json::from_str::<serde_json::Value>(text).unwrap();
    assert_eq!(
        parse(&String::from_utf8(saved.stdout).unwrap()),
        parse(d.http_get("/schema").split_once("\r\n\r\n").unwrap().1)
    );
    let from_file = ["--metrics", "127.0.0.1:1", "--schema", file.to_str().unwrap()];
    let (code, out) = by_schema(&from_file, &["account", "4", "balance"]);
    assert_eq!((code, out.trim_end().ends_with(": 15")), (0, true), "{out}");

    let (code, out) = styx_repl(
        a,
        "call account 7 deposit i64:5\nget account 7 --as i64\ncall account 7 transfer u64:8 \"i64:9\"\nstatus\nquit\n",
    );
    assert_eq!(code, 0, "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("committed"), "{out}");
    assert_eq!(lines[1], "5", "{out}");
    assert!(lines[2].contains("insufficient credit"), "{out}");
    assert!(lines[3].starts_with("shards 2 epoch"), "{out}");
    let (code, out) = styx_repl(a, "frobnicate\n");
    assert_eq!(code, 1, "a failed line fails a piped session: {out}");
    assert!(out.contains("unknown command"), "{out}");
}

#[test]
fn protocol_errors_get_their_codes_and_other_connections_keep_working() {
    let dir = data_dir("errors");
    let d = Daemon::start(styxd(), &dir, &["--shards", "2"]);
    load(&d, 4);
    let mut good = d.connect();
    let healthy = |c: &mut Conn| {
        let f = c.call(0, 0, "account", "balance", Key::from(1u64), Payload::EMPTY);
        assert!(matches!(outcome(&f).1, Outcome::Committed(_)), "{f:?}");
    };
    let error_code = |f: &Frame| match &f.body {
        Body::Error { code, .. } => *code,
        other => panic!("not an error: {other:?}"),
    };

    // Unknown operator, unknown function, malformed arguments: answered,
    // the connection stays.
    let mut c = d.connect();
    let f = c.call(0, 0, "nowhere", "x", Key::from(1u64), Payload::EMPTY);
    assert_eq!(error_code(&f), ErrorCode::UNKNOWN_OPERATOR);
    let f = c.call(0, 0, "account", "nope", Key::from(1u64), Payload::EMPTY);
    assert_eq!(error_code(&f), ErrorCode::UNKNOWN_FUNCTION);
    let f = c.call(
        0,
        0,
        "account",
        "transfer",
        Key::from(1u64),
        Payload::from_bytes(&[1, 2, 3]),
    );
    let (_, o) = outcome(&f);
    assert!(matches!(o, Outcome::Aborted(a) if a.kind() == AbortKind::BadArguments));
    healthy(&mut c);
    healthy(&mut good);

    // Wrong version: an error, then the connection closes.
    let mut c = d.connect();
    let mut bytes = Vec::new();
    styx_net::encode(
        &Frame {
            corr: 9,
            body: Body::Ping { data: 1 },
        },
        &mut bytes,
    )
    .unwrap();
    bytes[4] = 77;
    c.stream.write_all(&bytes).unwrap();
    assert_eq!(error_code(&c.recv().unwrap()), ErrorCode::BAD_VERSION);
    assert!(c.recv().is_none(), "closed after a framing error");
    healthy(&mut good);

    // Oversized frame: refused from its length prefix alone.
    let mut c = d.connect();
    c.stream.write_all(&(64u32 << 20).to_le_bytes()).unwrap();
    assert_eq!(error_code(&c.recv().unwrap()), ErrorCode::FRAME_TOO_LARGE);
    assert!(c.recv().is_none());
    healthy(&mut good);

    // Truncated frame, then the client goes away: nothing breaks.
    let mut c = d.connect();
    c.stream.write_all(&[40, 0, 0, 0, 1, 0x10, 1]).unwrap();
    drop(c);
    healthy(&mut good);

    // Random bytes: some error or a close, never a crash.
    let mut rng = styx_engine::rng::Rng::new(5);
    for _ in 0..20 {
        let mut c = d.connect();
        let junk: Vec<u8> = (0..rng.below(200) + 1).map(|_| rng.next_u64() as u8).collect();
        let _ = c.stream.write_all(&junk);
        let _ = c.stream.shutdown(std::net::Shutdown::Write);
        while c.recv().is_some() {}
    }
    healthy(&mut good);
    // No HELLO first: refused.
    let mut raw = std::net::TcpStream::connect(&d.addr).unwrap();
    let mut bytes = Vec::new();
    styx_net::encode(
        &Frame {
            corr: 1,
            body: Body::Status,
        },
        &mut bytes,
    )
    .unwrap();
    raw.write_all(&bytes).unwrap();
    healthy(&mut good);
}

#[test]
fn a_stalled_client_does_not_stall_the_others() {
    let dir = data_dir("stall");
    let d = Daemon::start(styxd(), &dir, &["--shards", "2", "--in-flight-max", "64"]);
    load(&d, 10);
    // This client sends far more than it reads and never reads.
    let mut stalled = d.connect();
    for i in 0..5_000u64 {
        stalled.send(request(0, 0, "account", "balance", Key::from(i % 10), Payload::EMPTY));
    }
    let mut good = d.connect();
    let begin = Instant::now();
    for _ in 0..200 {
        let f = good.call(0, 0, "account", "balance", Key::from(3u64), Payload::EMPTY);
        assert!(matches!(outcome(&f).1, Outcome::Committed(_)));
    }
    assert!(
        begin.elapsed() < Duration::from_secs(10),
        "the healthy client was held up"
    );
}

/// A shard with an epoch open polls for its peers' messages before it
/// parks (`--idle-poll-us`). While it polls, its sockets and its log must
/// still be served: a loop that only yielded kept glommio's ring unpolled
/// until the poll budget ran out or the executor preempted it (100 ms), so
/// every durable call waited that long for its log sync to be noticed.
#[test]
fn a_shard_polling_for_its_peers_still_serves_its_sockets_and_log() {
    let dir = data_dir("poll_io");
    // Poll for up to 10 s: without I/O between polls, each call would
    // wait ≥ 100 ms (glommio's preemption tick) for its log sync.
    let d = Daemon::start(
        styxd(),
        &dir,
        &["--shards", "2", "--idle-poll-us", "10000000", "--fsync", "epoch"],
    );
    load(&d, 10);
    let mut c = d.connect();
    let begin = Instant::now();
    for i in 0..60u64 {
        let f = c.call(0, 0, "account", "balance", Key::from(i % 10), Payload::EMPTY);
        assert!(matches!(outcome(&f).1, Outcome::Committed(_)));
    }
    let took = begin.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "60 durable calls one after another took {took:?}: a polling shard left its I/O waiting"
    );
}

#[test]
fn a_client_that_disconnects_mid_pipeline_loses_nothing_acknowledged() {
    let dir = data_dir("disconnect");
    let d = Daemon::start(styxd(), &dir, &["--shards", "2"]);
    let keys = 10;
    load(&d, keys);
    let transfer = |seq: u64| {
        let debtor = seq % keys;
        request(
            77,
            seq,
            "account",
            "transfer",
            Key::from(debtor),
            Payload::encode(&((debtor + 1) % keys, 1i64)),
        )
    };
    let mut c = d.connect();
    for seq in 1..=100 {
        c.send(transfer(seq));
    }
    let mut first = BTreeMap::new();
    for _ in 0..50 {
        let f = c.recv().unwrap();
        first.insert(f.corr, outcome(&f));
    }
    drop(c);
    // The same requests again on a new connection: the 50 answered ones
    // return their first outcome, the rest run (or ran) once.
    let mut c = d.connect();
    let mut all = BTreeMap::new();
    for seq in 1..=100 {
        let corr = c.send(transfer(seq));
        assert_eq!(corr, seq as u32 + 1, "corr = seq + 1 on this connection");
    }
    for _ in 0..100 {
        let f = c.recv().unwrap();
        all.insert(f.corr - 1, outcome(&f));
    }
    for (corr, o) in &first {
        // The first connection's corr 2..=101 carried seqs 1..=100 too.
        assert_eq!(
            all[&(*corr - 1)],
            *o,
            "retry of seq {} returned another outcome",
            corr - 1
        );
    }
    let applied = all.values().filter(|(_, o)| matches!(o, Outcome::Committed(_))).count() as i64;
    assert_eq!(applied, 100, "every transfer of 1 from a 1000 balance commits");
    let got = balances(&d, keys);
    assert_eq!(got.values().sum::<i64>(), START * keys as i64);
    // Each account sent and received 10 transfers of 1: unchanged. Had any
    // applied twice, some would differ.
    assert!(got.values().all(|b| *b == START), "{got:?}");
}

/// A client that sends its requests and then half-closes (shuts down its
/// writing side) still reads every answer: the server writes the answers
/// of the requests at the engine before it closes the connection. And a
/// fatal frame after requests closes the session only after their answers.
#[test]
fn a_client_that_half_closes_still_gets_every_answer() {
    let dir = data_dir("half-close");
    let d = Daemon::start(styxd(), &dir, &["--shards", "2"]);
    let keys = 10;
    load(&d, keys);
    let deposit = |k: u64| request(0, 0, "account", "deposit", Key::from(k), Payload::encode(&1i64));
    let mut c = d.connect();
    let sent: Vec<u32> = (0..200).map(|i| c.send(deposit(i % keys))).collect();
    c.stream.shutdown(std::net::Shutdown::Write).unwrap();
    let mut answered = Vec::new();
    while let Some(f) = c.recv() {
        assert!(matches!(outcome(&f).1, Outcome::Committed(_)), "{f:?}");
        answered.push(f.corr);
    }
    answered.sort_unstable();
    assert_eq!(answered, sent, "every request answered before the close");
    // A corr reused while its request is at the engine is fatal, and the
    // first request's answer still goes out before the close.
    let mut c = d.connect();
    let mut pipeline = Vec::new();
    for corr in [500, 501, 500] {
        styx_net::encode(
            &Frame {
                corr,
                body: deposit(u64::from(corr) % keys),
            },
            &mut pipeline,
        )
        .unwrap();
    }
    c.stream.write_all(&pipeline).unwrap();
    let mut got = Vec::new();
    while let Some(f) = c.recv() {
        got.push((f.corr, matches!(f.body, Body::Committed { .. })));
    }
    got.sort_unstable();
    assert!(got.contains(&(500, true)) && got.contains(&(501, true)), "{got:?}");
    assert_eq!(got.len(), 3, "the two answers and the DUPLICATE_CORR error: {got:?}");
    let total: i64 = balances(&d, keys).values().sum();
    assert_eq!(total, START * keys as i64 + 202);
}

#[test]
fn graceful_shutdown_leaves_a_directory_that_restarts_with_the_same_state() {
    let dir = data_dir("restart");
    // Copies of one entity per epoch: every move takes a copy epoch per entity.
    let mut d = Daemon::start(
        styxd(),
        &dir,
        &[
            "--shards",
            "2",
            "--snapshot-interval-ms",
            "100",
            "--move-share-entities",
            "1",
        ],
    );
    let keys = 30;
    load(&d, keys);
    let mut c = d.connect();
    for seq in 1..=300u64 {
        // Never to itself: a self-transfer is A → A, which a typed
        // `&mut self` method refuses (REENTRANT).
        let debtor = seq % keys;
        let creditor = (debtor + 1 + (seq * 7) % (keys - 1)) % keys;
        c.send(request(
            5,
            seq,
            "account",
            "transfer",
            Key::from(debtor),
            Payload::encode(&(creditor, 3i64)),
        ));
    }
    for _ in 0..300 {
        let f = c.recv().unwrap();
        assert!(matches!(outcome(&f).1, Outcome::Committed(_)), "{f:?}");
    }

    let before = balances(&d, keys);
    assert_eq!(before.values().sum::<i64>(), START * keys as i64, "money is conserved");
    let status = d.terminate();
    assert!(status.success(), "styxd exits cleanly on SIGTERM: {status}");
    let d2 = d.restart();
    assert_eq!(balances(&d2, keys), before);
    // And a retry of an old request still returns its recorded outcome.
    let mut c = d2.connect();
    let f = c.call(
        5,
        300,
        "account",
        "transfer",
        Key::from(0u64),
        Payload::encode(&(1u64, 3i64)),
    );
    assert!(matches!(outcome(&f).1, Outcome::Committed(_)));
    assert_eq!(balances(&d2, keys), before, "the retry applied nothing");
}

/// Runs `styx rebalance` against `d`, waiting for the switch on its
/// metrics address.
fn rebalance(d: &Daemon, operator: &str, partition: u32, shard: u16) -> (i32, String) {
    styx(&[
        "rebalance",
        "--connect",
        &d.addr,
        "--metrics",
        d.metrics.as_deref().expect("a metrics address"),
        operator,
        &partition.to_string(),
        &shard.to_string(),
    ])
}

/// What PLACEMENT answers on `d`: the map's version and the partitions of
/// `account` (the only operator) off the default rule.
fn placement(d: &Daemon) -> (u64, Vec<(u32, u16)>) {
    let mut c = Conn::connect(&d.addr);
    c.send(Body::Placement);
    match c.recv().expect("an answer").body {
        Body::PlacementReply(p) => {
            assert_eq!(p.moved.len(), 1, "one operator: {p:?}");
            (p.version, p.moved[0].clone())
        }
        other => panic!("PLACEMENT answered {other:?}"),
    }
}

/// Every shard's owner of `partition` of `account`, from `d`'s metrics.
fn owners(d: &Daemon, partition: u32) -> Vec<u16> {
    let text = d.http_get("/metrics");
    let prefix = "styx_partition_owner{shard=\"";
    let needle = format!("\",operator=\"account\",partition=\"{partition}\"}} ");
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.split_once(&needle))
        .map(|(_, v)| v.trim().parse().unwrap())
        .collect()
}

#[test]
fn a_move_share_of_zero_entities_is_refused_at_start() {
    let dir = data_dir("move_share_zero");
    // A refused start: the output names the flag at fault.
    let refused = |shares: &[&str], flag: &str| {
        let out = std::process::Command::new(styxd())
            .args(["--data-dir", dir.to_str().unwrap(), "--listen", "127.0.0.1:0"])
            .args(shares)
            .output()
            .unwrap();
        let text = output_text(&out);
        assert!(!out.status.success(), "{shares:?} must be refused: {text}");
        assert!(text.contains(flag), "the error names {flag}: {text}");
    };
    refused(&["--move-share-entities", "0"], "--move-share-entities");
    // The least share is at most the most, and never 0.
    for (most, least) in [("100", "200"), ("100", "0")] {
        refused(
            &["--move-share-entities", most, "--move-share-min-entities", least],
            "--move-share-min-entities",
        );
    }
}

#[test]
fn rebalance_moves_partitions_while_transfers_run_and_survives_restarts() {
    let dir = data_dir("rebalance");
    let mut d = Daemon::start(styxd(), &dir, &["--shards", "2", "--snapshot-interval-ms", "100"]);
    let keys = 30;
    load(&d, keys);
    let transfers = |addr: String, client: u64| {
        std::thread::spawn(move || {
            let mut c = Conn::connect(&addr);
            for seq in 1..=300u64 {
                // Never to itself: a typed `&mut self` method called back
                // by its own callee aborts (`Reentrant`, engine/src/ctx.rs).
                let debtor = (seq * 13) % keys;
                let creditor = (debtor + 1 + seq % (keys - 1)) % keys;
                c.send(request(
                    client,
                    seq,
                    "account",
                    "transfer",
                    Key::from(debtor),
                    Payload::encode(&(creditor, 2i64)),
                ));
            }
            for _ in 0..300 {
                let f = c.recv().unwrap();
                assert!(f.body.outcome().is_some(), "{f:?}");
            }
        })
    };
    // Every partition of the first 16 moves to the other shard and back
    // while transfers run.
    let running = transfers(d.addr.clone(), 7);
    assert_eq!(placement(&d), (0, vec![]), "nothing moved yet");
    for round in 0..2u16 {
        for p in 0..16u32 {
            let to = ((p as u16) + 1 + round) % 2;
            let (code, out) = rebalance(&d, "account", p, to);
            assert_eq!(code, 0, "{out}");
            assert!(
                out.contains("moved partition") && out.contains("switched within"),
                "{out}"
            );
            // It returned once every shard's map says so.
            assert_eq!(owners(&d, p), vec![to, to], "{out}");
        }
        // PLACEMENT names every partition off the default rule (p % 2):
        // all 16 after the first round, none after the second (back home),
        // the version one more per move (each switched in its own epoch).
        let moved: Vec<(u32, u16)> = if round == 0 {
            (0..16u32).map(|p| (p, ((p + 1) % 2) as u16)).collect()
        } else {
            vec![]
        };
        assert_eq!(placement(&d), (16 * u64::from(round + 1), moved), "round {round}");
    }
    running.join().unwrap();
    let before = balances(&d, keys);
    assert_eq!(before.values().sum::<i64>(), keys as i64 * START, "{before:?}");

    // Bad moves are refused with a reason, and change nothing.
    let (code, out) = rebalance(&d, "account", 0, 5);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("no shard 5 (there are 2)"), "{out}");
    let (code, out) = rebalance(&d, "account", 64, 0);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("partition 64"), "{out}");
    let (code, out) = rebalance(&d, "nothing", 0, 0);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("nothing"), "{out}");
    assert_eq!(balances(&d, keys), before);
    // --no-wait answers once the move is decided; the switch follows.
    let (code, out) = styx(&["rebalance", "--connect", &d.addr, "--no-wait", "account", "20", "1"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("switches once copied"), "{out}");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while owners(&d, 20) != vec![1, 1] {
        assert!(std::time::Instant::now() < deadline, "partition 20 never switched");
        std::thread::sleep(Duration::from_millis(20));
    }

    assert_eq!(placement(&d), (33, vec![(20, 1)]));

    // The moved map survives a clean restart, then moves and a kill -9.
    assert!(d.terminate().success());
    let mut d = d.restart();
    assert_eq!(balances(&d, keys), before, "after a restart");
    assert_eq!(placement(&d), (33, vec![(20, 1)]), "after a restart");
    let running = transfers(d.addr.clone(), 8);
    for p in 0..8u32 {
        let (code, out) = rebalance(&d, "account", p, (p % 2) as u16);
        assert_eq!(code, 0, "{out}");
    }
    running.join().unwrap();
    let after = balances(&d, keys);
    d.kill9();
    let d = d.restart();
    assert_eq!(balances(&d, keys), after, "after kill -9");
    assert_eq!(after.values().sum::<i64>(), keys as i64 * START);

    // A move may name its own pace (the CLI sends it; that the engine
    // logs and keeps it is engine/tests/handovers.rs's to check); a pace
    // that never ends is refused before anything is sent, and by the
    // server.
    let metrics = d.metrics.clone().expect("a metrics address");
    let paced = |extra: &[&str], partition: &str, to: &str| {
        let mut args = vec!["rebalance", "--connect", &d.addr, "--metrics", &metrics];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["account", partition, to]);
        styx(&args)
    };
    let (code, out) = paced(&["--share-per-ms", "5000", "--share-min-entities", "64"], "21", "0");
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("switched within"), "{out}");
    assert_eq!(owners(&d, 21), vec![0, 0]);
    let (code, out) = paced(&["--share-entities", "8", "--share-min-entities", "64"], "21", "1");
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("above its most"), "{out}");
    let (code, out) = paced(&["--share-entities", "8"], "21", "1");
    assert_eq!(code, 0, "{out}: the least share's default moves out of the way");
    assert_eq!(owners(&d, 21), vec![1, 1]);
    let (code, out) = paced(&["--share-entities", "0"], "21", "0");
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("never ends"), "{out}");
    let mut c = d.connect();
    c.send(Body::Request(styx_net::Request {
        client: 0,
        seq: 0,
        ack: 0,
        operator: "account".into(),
        function: styx_engine::MOVE_FUNCTION.into(),
        target: styx_engine::Address::Partition(21),
        args: Payload::encode(&(1u16, (0u32, 0u32, 1u32))),
    }));
    let f = c.recv().unwrap();
    match f.body.outcome() {
        Some((_, Outcome::Aborted(a))) => assert!(a.message().contains("never ends"), "{a:?}"),
        other => panic!("a move that never ends answered {other:?}"),
    }
    assert_eq!(owners(&d, 21), vec![1, 1], "the refused move moved nothing");
    assert_eq!(balances(&d, keys), after);
}

/// Each shard logs the snapshot interval it votes by and each move its
/// pace: a daemon killed (kill -9) while slow moves are under way recovers
/// under other settings — no snapshots and fast moves, then snapshots
/// every second — with every balance, and the moves it had decided finish.
#[test]
fn a_daemon_killed_mid_move_recovers_under_other_snapshot_and_move_settings() {
    let dir = data_dir("other-settings");
    let slow = [
        "--shards",
        "2",
        "--snapshot-interval-ms",
        "20",
        "--move-share-entities",
        "2",
        "--move-share-min-entities",
        "1",
        "--move-share-per-ms",
        "1",
    ];
    let mut d = Daemon::start(styxd(), &dir, &slow);
    let keys = 600;
    load(&d, keys);
    // Every partition of the first 8 to the other shard: at 1 entity a
    // millisecond (~9 each), the last still copying or queued at the kill.
    let targets: Vec<(u32, u16)> = (0..8u32).map(|p| (p, ((p + 1) % 2) as u16)).collect();
    for (p, to) in &targets {
        let (code, out) = styx(&[
            "rebalance",
            "--connect",
            &d.addr,
            "--no-wait",
            "account",
            &p.to_string(),
            &to.to_string(),
        ]);
        assert_eq!(code, 0, "{out}");
    }
    let mut c = d.connect();
    for seq in 1..=200u64 {
        let debtor = (seq * 7) % keys;
        let creditor = (debtor + 1 + seq % (keys - 1)) % keys;
        c.send(request(
            3,
            seq,
            "account",
            "transfer",
            Key::from(debtor),
            Payload::encode(&(creditor, 1i64)),
        ));
    }
    for _ in 0..200 {
        assert!(c.recv().unwrap().body.outcome().is_some());
    }
    let before = balances(&d, keys);
    assert_eq!(before.values().sum::<i64>(), keys as i64 * START);
    d.kill9();
    let fast = [
        "--shards",
        "2",
        "--snapshot-interval-ms",
        "0",
        "--move-share-entities",
        "4096",
    ];
    let mut d = Daemon::start(styxd(), &dir, &fast);
    assert_eq!(balances(&d, keys), before, "after kill -9, recovered without snapshots");
    let deadline = Instant::now() + Duration::from_secs(20);
    while targets.iter().any(|(p, to)| owners(&d, *p) != vec![*to, *to]) {
        assert!(Instant::now() < deadline, "the decided moves never all switched");
        std::thread::sleep(Duration::from_millis(20));
    }
    d.kill9();
    let d = Daemon::start(styxd(), &dir, &["--shards", "2", "--snapshot-interval-ms", "1000"]);
    assert_eq!(balances(&d, keys), before, "after a second kill -9");
    assert_eq!(placement(&d), (8, targets), "the map after the moves");
}

/// `styx rebalance --auto` moves load off the shard that carries it, by
/// the per-partition counts the daemon publishes on its metrics address.
#[test]
fn rebalance_auto_moves_load_off_the_busy_shard() {
    let dir = data_dir("rebalance-auto");
    let d = Daemon::start(styxd(), &dir, &["--shards", "2"]);
    let keys = 40;
    load(&d, keys);
    // Transfers among the accounts shard 0 owns (by the default map) only.
    let partitions = styx_tools::apps::PARTITIONS;
    let hot: Vec<u64> = (0..keys)
        .filter(|k| styx_engine::partition_owner(Key::from(*k).partition(partitions), 2) == 0)
        .collect();
    assert!(hot.len() >= 4, "{hot:?}");
    let mut c = d.connect();
    let n = 400u64;
    for seq in 0..n {
        let i = (seq as usize) % hot.len();
        let creditor = hot[(i + 1 + (seq as usize) % (hot.len() - 1)) % hot.len()];
        c.send(request(
            9,
            seq + 1,
            "account",
            "transfer",
            Key::from(hot[i]),
            Payload::encode(&(creditor, 1i64)),
        ));
    }
    for _ in 0..n {
        let f = c.recv().unwrap();
        assert!(matches!(outcome(&f).1, Outcome::Committed(_)), "{f:?}");
    }
    let before = balances(&d, keys);
    // The counts are published every 100 ms.
    std::thread::sleep(Duration::from_millis(1000));
    let metrics = d.metrics.clone().expect("a metrics address");
    let auto = |extra: &[&str]| {
        let mut args = vec![
            "rebalance",
            "--connect",
            &d.addr,
            "--metrics",
            &metrics,
            "account",
            "--auto",
            "--window-s",
            "0",
        ];
        args.extend_from_slice(extra);
        styx(&args)
    };
    let (code, out) = auto(&["--dry-run"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("would move partition") && out.contains("to shard 1"),
        "{out}"
    );
    assert!(!out.contains("moved partition"), "{out}");
    let (code, out) = auto(&[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("moved partition") && out.contains("to shard 1"), "{out}");
    // Counted since the start, the load now sits on both shards: nothing
    // more to move.
    std::thread::sleep(Duration::from_millis(1000));
    let (code, out) = auto(&["--dry-run"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(": 0 moves"), "{out}");
    assert_eq!(balances(&d, keys), before);
    let (code, out) = styx(&[
        "rebalance",
        "--connect",
        &d.addr,
        "--metrics",
        &metrics,
        "nothing",
        "--auto",
        "--window-s",
        "0",
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("no partitions of \"nothing\""), "{out}");
}

/// Linux's scheduling policy of a thread that runs only when nothing else
/// would.
const SCHED_IDLE: i64 = 5;

/// A thread's (name, scheduling policy) from `/proc/PID/task/TID/stat`.
fn thread_policy(pid: u32, tid: u64) -> Option<(String, i64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    let (head, rest) = stat.rsplit_once(')')?;
    let name = head.split_once('(')?.1.to_string();
    // After the name: state (field 3) … policy (field 41).
    let policy = rest.split_whitespace().nth(38)?.parse().ok()?;
    Some((name, policy))
}

/// Snapshot files are sorted and encoded on a thread of their own
/// (`snapshot-SHARD`, one for the whole run: no thread starts per file) in
/// the `SCHED_IDLE` class (`Program::on_background`), so that work runs on
/// what the shards leave idle; the shard's own thread keeps the default
/// class, and so does the committer (one thread too).
#[test]
fn snapshot_files_are_written_below_the_shards_priority() {
    let dir = data_dir("background-nice");
    let d = Daemon::start(styxd(), &dir, &["--shards", "1", "--snapshot-interval-ms", "20"]);
    let pid = d.child.id();
    let threads = || -> Vec<(u64, String, i64)> {
        let mut threads: Vec<_> = std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u64>().ok())
            .filter_map(|tid| thread_policy(pid, tid).map(|(name, policy)| (tid, name, policy)))
            .collect();
        threads.sort();
        threads
    };
    // The writer lowers itself before its first file: watch for it in its
    // class while the state changes (each snapshot then has entities).
    let mut c = d.connect();
    let mut deposit = |seq: u64| {
        c.call(
            1,
            seq,
            "account",
            "deposit",
            Key::from(seq % 50),
            Payload::encode(&1i64),
        );
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seq = 0;
    let writer = loop {
        seq += 1;
        deposit(seq);
        let all = threads();
        if let Some(w) = all
            .iter()
            .find(|(_, name, policy)| name == "snapshot-0" && *policy == SCHED_IDLE)
        {
            break (w.clone(), all);
        }
        assert!(
            Instant::now() < deadline,
            "no snapshot writer in SCHED_IDLE seen in 30 s: {all:?}"
        );
    };
    let (writer, all) = writer;
    // Not pinned to the shard's core (it inherited that from the shard's
    // thread): the process's CPUs, where idle time may be.
    let cpus = |task: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/task/{task}/status"))
            .ok()?
            .lines()
            .find(|l| l.starts_with("Cpus_allowed_list:"))
            .map(|l| l.split_whitespace().last().unwrap_or("").to_string())
    };
    let (main, theirs) = (cpus(&pid.to_string()), cpus(&writer.0.to_string()));
    assert!(main.is_some(), "{all:?}");
    assert_eq!(theirs, main, "the writer's CPUs against the process's");
    let shard = all
        .iter()
        .find(|(_, name, _)| name.starts_with("shards-"))
        .unwrap_or_else(|| panic!("no shard thread: {all:?}"));
    assert_eq!(shard.2, 0, "the shard runs in the default class: {all:?}");
    // Nothing else was lowered (the `committer` thread commits; a chain's
    // merge runs on a thread of its own, `compact-SHARD`, lowered too).
    assert!(
        all.iter()
            .all(|(_, name, policy)| *policy == 0 || name == "snapshot-0" || name == "compact-0"),
        "{all:?}"
    );
    // The snapshots commit, and /metrics says which is the newest; five
    // more commit while the same writer and committer go on.
    let committed = || {
        let metrics = d.http_get("/metrics");
        metrics
            .lines()
            .find(|l| l.starts_with("styx_snapshot_epoch{"))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no styx_snapshot_epoch:\n{metrics}"))
    };
    let committer = all
        .iter()
        .find(|(_, name, _)| name == "committer")
        .unwrap_or_else(|| panic!("no committer thread: {all:?}"))
        .0;
    let mut epochs = std::collections::BTreeSet::new();
    while epochs.iter().filter(|e| **e > 0).count() < 6 {
        seq += 1;
        deposit(seq);
        epochs.insert(committed());
        let now = threads();
        let named = |n: &str| -> Vec<u64> { now.iter().filter(|t| t.1 == n).map(|t| t.0).collect() };
        assert_eq!(named("snapshot-0"), [writer.0], "one writer for the run: {now:?}");
        assert_eq!(named("committer"), [committer], "one committer for the run: {now:?}");
        assert!(
            Instant::now() < deadline,
            "six snapshots not committed in 30 s: {epochs:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A shard's chain of snapshot files is merged into one base file once it
/// grows past eight files (on a thread of its own, while the shard runs
/// on), and a restart from the merged chain holds every deposit.
#[test]
fn long_snapshot_chains_are_merged_and_restart_from_them() {
    let dir = data_dir("compaction");
    let mut d = Daemon::start(styxd(), &dir, &["--shards", "1", "--snapshot-interval-ms", "10"]);
    let mut c = d.connect();
    let accounts = 40u64;
    let mut deposits = vec![0i64; accounts as usize];
    let mut seq = 0;
    // Each snapshot is a delta of the accounts changed since the last:
    // deposits go on until 24 manifests were committed (a merge commits
    // one too), so a chain passed eight files at least twice.
    let generation = || -> u64 {
        std::fs::read_dir(dir.join("snapshot"))
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok()?.file_name().to_str()?.strip_prefix("manifest-")?.parse().ok())
                    .max()
                    .unwrap_or(0)
            })
            .unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while generation() < 24 {
        assert!(Instant::now() < deadline, "24 snapshots not committed in 60 s");
        seq += 1;
        let k = seq % accounts;
        let f = c.call(
            1,
            seq,
            "account",
            "deposit",
            Key::from(k),
            Payload::encode(&(k as i64 + 1)),
        );
        assert!(matches!(outcome(&f).1, Outcome::Committed(_)), "{f:?}");
        deposits[k as usize] += k as i64 + 1;
    }
    drop(c);
    assert!(d.terminate().success());
    let (code, out) = styx(&["inspect", "snapshot", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    // Two dozen manifests were committed, yet the newest one's chain is
    // short: it starts from a merged base.
    let generation: u64 = out
        .lines()
        .find_map(|l| l.split(", generation ").nth(1))
        .and_then(|g| g.split(',').next()?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no generation:\n{out}"));
    assert!(generation >= 24, "only {generation} manifests committed:\n{out}");
    let chain = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("shard 0: chain "))
        .unwrap_or_else(|| panic!("no chain for shard 0:\n{out}"));
    let files = chain.split(" (").next().unwrap().split(" + ").count();
    assert!(
        files <= 9,
        "a chain of {files} files after {generation} snapshots: {chain}"
    );
    // A restart reads the merged chain, then the log after it.
    let d = d.restart();
    let mut c = d.connect();
    for k in 0..accounts {
        c.send(Body::Get {
            operator: "account".into(),
            key: Key::from(k),
        });
        let f = c.recv().unwrap();
        let Body::State { value } = f.body else { panic!("{f:?}") };
        let balance = value.map_or(0, |v| i64::from_le_bytes(v.try_into().unwrap()));
        assert_eq!(
            balance, deposits[k as usize],
            "account {k} after a restart from a merged chain"
        );
    }
}
