//! `kill -9` in a loop under load: nothing acknowledged is lost, nothing
//! applies twice, money is conserved, and a restart reproduces the state.
//!
//! A client sends YCSB-T transfers with a client id and increasing seqs and
//! records every answer. Each cycle it sends a burst, reads a random part of
//! the answers, and the daemon is killed with requests in flight. After the
//! restart the client resends every unanswered request with its seq (each
//! either ran before the crash, and its recorded outcome comes back, or runs
//! now) and re-asks some answered ones (their first outcome must come back).

mod common;

use common::*;
use std::collections::BTreeMap;
use std::path::Path;
use styx_engine::rng::Rng;
use styx_engine::{Key, Outcome, Payload, Tid};
use styx_net::Body;

const CYCLES: usize = 20;
const BURST: u64 = 150;
const KEYS: u64 = 40;
const START: i64 = 100;
const CLIENT: u64 = 4242;

#[derive(Clone, Copy)]
struct Transfer {
    debtor: u64,
    creditor: u64,
    amount: i64,
}

fn send(c: &mut Conn, seq: u64, t: Transfer) -> u32 {
    c.send(request(
        CLIENT,
        seq,
        "account",
        "transfer",
        Key::from(t.debtor),
        Payload::encode(&(t.creditor, t.amount)),
    ))
}

#[test]
fn kill_9_loop_under_load_loses_nothing_acknowledged_and_applies_nothing_twice() {
    kill_9_loop("crash", &["--shards", "2"], CYCLES);
}

/// The same with three shards as tasks of one thread: their logs, snapshot
/// files and exactly-once tables share an executor, and every restart
/// recovers them one after another on it.
#[test]
fn kill_9_loop_with_shards_sharing_a_thread() {
    kill_9_loop("crash-shared-thread", &["--shards", "3", "--threads", "1"], CYCLES / 2);
}

fn kill_9_loop(name: &str, layout: &[&str], cycles: usize) {
    let dir = data_dir(name);
    let bin = Path::new(env!("CARGO_BIN_EXE_styxd"));
    let mut args = layout.to_vec();
    args.extend_from_slice(&["--snapshot-interval-ms", "150"]);
    let mut d = Daemon::start(bin, &dir, &args);
    // Load: one deposit per account, exactly-once client 1.
    {
        let mut c = d.connect();
        for k in 0..KEYS {
            let f = c.call(1, k + 1, "account", "deposit", Key::from(k), Payload::encode(&START));
            assert!(matches!(outcome(&f).1, Outcome::Committed(_)));
        }
    }
    let mut rng = Rng::new(7);
    let mut sent: BTreeMap<u64, Transfer> = BTreeMap::new();
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
        for _ in 0..BURST {
            let debtor = rng.below(KEYS);
            let t = Transfer {
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
    // Balances: start plus every committed transfer, once.
    let mut expected: BTreeMap<u64, i64> = (0..KEYS).map(|k| (k, START)).collect();
    for (seq, (_, o)) in &answered {
        if matches!(o, Outcome::Committed(_)) {
            let t = sent[seq];
            *expected.get_mut(&t.debtor).unwrap() -= t.amount;
            *expected.get_mut(&t.creditor).unwrap() += t.amount;
        }
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
    assert_eq!(
        got, expected,
        "balances equal the acknowledged history, each transfer once"
    );
    assert_eq!(got.values().sum::<i64>(), START * KEYS as i64, "money is conserved");
    assert!(got.values().all(|b| *b >= 0));
    // The state is a pure function of snapshot + log: a clean restart agrees.
    assert!(d.terminate().success());
    let d = d.restart();
    assert_eq!(balances(&d,), got, "state after replay equals the state before");
}
