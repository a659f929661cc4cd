//! `kill -9` in a loop under load: nothing acknowledged is lost, nothing
//! applies twice, money is conserved, and a restart reproduces the state.
//!
//! A client sends YCSB-T transfers with a client id and increasing seqs and
//! records every answer. Each cycle it sends a burst, reads a random part of
//! the answers, and the daemon is killed with requests in flight. After the
//! restart the client resends every unanswered request with its seq (each
//! either ran before the crash, and its recorded outcome comes back, or runs
//! now) and re-asks some answered ones (their first outcome must come back).
//!
//! With moves, each cycle also asks (on the same client, exactly-once) for
//! partitions to move while a copy spans tens of epochs, so the kill falls
//! in the middle of copies: after it, every shard's map agrees, each
//! partition is where its last committed move put it, and no entity of a
//! moved partition is lost or doubled.

mod common;
mod support;

use common::*;
use std::collections::BTreeMap;
use std::path::Path;
use styx_engine::rng::Rng;
use styx_engine::{Key, Outcome, Payload, Tid};
use styx_net::Body;
use support::*;

const CYCLES: usize = 20;
const BURST: u64 = 150;
const KEYS: u64 = 40;
const START: i64 = 100;
const CLIENT: u64 = 4242;

/// Accounts (after the first `KEYS`) that only sit in their partitions,
/// so that a partition's copy takes an epoch per entity for tens of epochs.
const BALLAST: u64 = 3_200;
/// Partitions of `account` (`styx_tools::apps::PARTITIONS`).
const PARTITIONS: u32 = styx_tools::apps::PARTITIONS;

/// A request of the exactly-once client `CLIENT`, numbered `seq`.
fn send(c: &mut Conn, seq: u64, r: Req) -> u32 {
    send_as(c, CLIENT, seq, r)
}

#[test]
fn kill_9_loop_under_load_loses_nothing_acknowledged_and_applies_nothing_twice() {
    kill_9_loop("crash", &["--shards", "2"], CYCLES, 0);
}

/// The same with three shards as tasks of one thread: their logs, snapshot
/// files and exactly-once tables share an executor, and every restart
/// recovers them one after another on it.
#[test]
fn kill_9_loop_with_shards_sharing_a_thread() {
    kill_9_loop(
        "crash-shared-thread",
        &["--shards", "3", "--threads", "1"],
        CYCLES / 2,
        0,
    );
}

/// The kill falls in the middle of partition moves: a copy sends one
/// entity per epoch (`--move-share-entities 1`) and epochs start at most
/// every millisecond, so a move of a partition of ~50 entities spans ~50
/// ms, and each cycle asks for two before its burst.
#[test]
fn kill_9_loop_while_partitions_move() {
    kill_9_loop(
        "crash-moving",
        &[
            "--shards",
            "3",
            "--move-share-entities",
            "1",
            "--epoch-gather-us",
            "1000",
        ],
        CYCLES / 2,
        2,
    );
}

/// `moves`: partitions asked to move at the start of each cycle.
fn kill_9_loop(name: &str, layout: &[&str], cycles: usize, moves: usize) {
    let dir = data_dir(name);
    let bin = Path::new(env!("CARGO_BIN_EXE_styxd"));
    let mut args = layout.to_vec();
    args.extend_from_slice(&["--snapshot-interval-ms", "150"]);
    let shards: u16 = layout[layout.iter().position(|a| *a == "--shards").expect("--shards") + 1]
        .parse()
        .expect("a shard count");
    let mut d = Daemon::start(bin, &dir, &args);
    // Load: one deposit per account, exactly-once client 1.
    {
        let mut c = d.connect();
        for k in 0..KEYS {
            let f = c.call(1, k + 1, "account", "deposit", Key::from(k), Payload::encode(&START));
            assert!(matches!(outcome(&f).1, Outcome::Committed(_)));
        }
        if moves > 0 {
            deposit_all(&mut c, KEYS..KEYS + BALLAST, START);
        }
    }
    let mut rng = Rng::new(7);
    let mut sent: BTreeMap<u64, Req> = BTreeMap::new();
    // Per kill with moves: PLACEMENT's version, the newest committed move.
    let mut kills: Vec<(u64, Option<Tid>)> = Vec::new();
    let mut answered: BTreeMap<u64, (Tid, Outcome)> = BTreeMap::new();
    let mut next_seq = 1;
    for cycle in 0..cycles {
        let mut c = d.connect();
        // Resend whatever is unanswered, then a new burst.
        let mut corr_seq = BTreeMap::new();
        let unanswered: Vec<u64> = sent.keys().filter(|s| !answered.contains_key(s)).copied().collect();
        for seq in unanswered {
            corr_seq.insert(send(&mut c, seq, sent[&seq]), seq);
        }
        for _ in 0..moves {
            let m = move_off_first_owner(&mut rng, shards);
            sent.insert(next_seq, m);
            corr_seq.insert(send(&mut c, next_seq, m), next_seq);
            next_seq += 1;
        }
        for _ in 0..BURST {
            let debtor = rng.below(KEYS);
            let t = Req::Transfer {
                debtor,
                creditor: (debtor + 1 + rng.below(KEYS - 1)) % KEYS,
                amount: 1 + rng.below(30) as i64,
            };
            sent.insert(next_seq, t);
            corr_seq.insert(send(&mut c, next_seq, t), next_seq);
            next_seq += 1;
        }
        // Re-ask a few answered ones: the first outcome must come back.
        let answered_seqs: Vec<u64> = answered.keys().copied().collect();
        for _ in 0..5.min(answered_seqs.len()) {
            let seq = answered_seqs[rng.below(answered_seqs.len() as u64) as usize];
            corr_seq.insert(send(&mut c, seq, sent[&seq]), seq);
        }
        // Read a random part of the answers, then crash.
        let read = rng.below(corr_seq.len() as u64 + 1);
        for _ in 0..read {
            let Some(f) = c.recv() else { break };
            let seq = corr_seq[&f.corr];
            let got = outcome(&f);
            if let Some(first) = answered.get(&seq) {
                assert_eq!(
                    *first, got,
                    "cycle {cycle}: seq {seq} answered differently the second time"
                );
            } else {
                answered.insert(seq, got);
            }
        }
        drop(c);
        if moves > 0 {
            // The map's version (a switch each) and the newest move known
            // committed: a kill in the middle of a copy, or before a queued
            // one, leaves a decided move unswitched (counted at the end).
            kills.push((placement(&d).0, newest_committed_move(&sent, &answered)));
        }
        d.kill9();
        d = d.restart();
    }
    // Resolve everything still unanswered.
    let mut c = d.connect();
    let unanswered: Vec<u64> = sent.keys().filter(|s| !answered.contains_key(s)).copied().collect();
    for seq in &unanswered {
        let f = {
            send(&mut c, *seq, sent[seq]);
            c.recv().expect("an answer")
        };
        answered.insert(*seq, outcome(&f));
    }
    assert_eq!(answered.len(), sent.len(), "every request has exactly one outcome");
    // Balances: start plus every committed transfer, once; partitions
    // where their last committed move (in serial order) put them.
    let history = History::of(&sent, &answered, KEYS, START, shards);
    let (expected, owner, switching) = (&history.balances, &history.owner, &history.switching);
    if moves > 0 {
        assert!(history.committed_moves > 0, "some moves committed");
        // Copies go on after the restart; once they all switched, every
        // shard's map (from the metrics, published every 100 ms) says what
        // the committed moves say, and so does PLACEMENT.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        // (A partition moved a → b → a looks settled before its last
        // switches: wait for the version too.)
        loop {
            let maps = partition_owners(&d, shards);
            if maps.iter().all(|m| m == owner) && placement(&d).0 == switching.len() as u64 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the shards' maps {maps:?} never became the committed moves' {owner:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let moved = history.moved();
        assert!(
            !moved.is_empty(),
            "the committed moves left partitions off the default rule"
        );
        assert_eq!(
            placement(&d),
            (switching.len() as u64, moved),
            "PLACEMENT after the moves: a switch per move that changed the map"
        );
        let mid_move = history.kills_mid_move(&kills);
        eprintln!("{mid_move} of {} kills with a decided move unswitched", kills.len());
        assert!(
            mid_move > 0,
            "no kill fell while a move was copied or queued: {kills:?}"
        );
    }
    let balances = |d: &Daemon| {
        let mut c = d.connect();
        (0..KEYS)
            .map(|k| {
                c.send(Body::Get {
                    operator: "account".into(),
                    key: Key::from(k),
                });
                let f = c.recv().unwrap();
                let Body::State { value } = f.body else { panic!("{f:?}") };
                (k, value.map_or(0, |v| i64::from_le_bytes(v.try_into().unwrap())))
            })
            .collect::<BTreeMap<u64, i64>>()
    };
    let got = balances(&d);
    if moves > 0 {
        // Nothing of the moved partitions was lost or doubled.
        assert_untouched(&mut d.connect(), KEYS..KEYS + BALLAST, START);
    }
    assert_eq!(
        got, *expected,
        "balances equal the acknowledged history, each transfer once"
    );
    assert_eq!(got.values().sum::<i64>(), START * KEYS as i64, "money is conserved");
    assert!(got.values().all(|b| *b >= 0));
    // The state is a pure function of snapshot + log: a clean restart agrees.
    assert!(d.terminate().success());
    let d = d.restart();
    assert_eq!(balances(&d,), got, "state after replay equals the state before");
}

/// Each shard's owner of every partition of `account`, from `d`'s metrics.
fn partition_owners(d: &Daemon, shards: u16) -> Vec<Vec<u16>> {
    let text = d.http_get("/metrics");
    let mut maps = vec![vec![u16::MAX; PARTITIONS as usize]; usize::from(shards)];
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("styx_partition_owner{shard=\"") else {
            continue;
        };
        let (shard, rest) = rest
            .split_once("\",operator=\"account\",partition=\"")
            .expect("a sample");
        let (partition, value) = rest.split_once("\"} ").expect("a sample");
        let (shard, partition): (usize, usize) = (shard.parse().unwrap(), partition.parse().unwrap());
        maps[shard][partition] = value.trim().parse().unwrap();
    }
    maps
}

/// What PLACEMENT says: the map's version, the partitions of `account`
/// off the default rule.
fn placement(d: &Daemon) -> (u64, Vec<(u32, u16)>) {
    let mut c = d.connect();
    c.send(Body::Placement);
    match c.recv().expect("an answer").body {
        Body::PlacementReply(p) => (p.version, p.moved.first().cloned().unwrap_or_default()),
        other => panic!("PLACEMENT answered {other:?}"),
    }
}
