//! Exactly-once for clients: a request carries a client id and a sequence
//! number; retries — on any shard, while the first attempt runs, after it
//! finished, or after a crash and recovery — get the first attempt's outcome
//! and never apply twice. Acknowledged seqs are forgotten, not re-run.

mod common;

use common::*;
use std::collections::{BTreeMap, HashMap};
use styx_engine::rng::Rng;
use styx_engine::sim::{Sim, test_config};
use styx_engine::{AbortKind, ClientSeq, Key, OpId, Outcome, Request, Tid, Value};

const ACCOUNTS: u64 = 20;
const START: i64 = 3;

fn with_client(mut r: Request, client: u64, seq: u64, ack: u64) -> Request {
    r.client = Some(ClientSeq { client, seq, ack });
    r
}

struct Run {
    sim: Sim,
    /// (client, seq) -> (debtor, creditor)
    sent: BTreeMap<(u64, u64), (u64, u64)>,
    /// token -> (client, seq)
    tokens: HashMap<u64, (u64, u64)>,
    next_token: u64,
}

impl Run {
    fn submit(&mut self, rng: &mut Rng, client: u64, seq: u64, ack: u64) {
        let app = self.sim.shard(0).app().clone();
        let (d, c) = self.sent[&(client, seq)];
        let shard = rng.below(u64::from(self.sim.n_shards())) as u16;
        let token = self.next_token;
        self.next_token += 1;
        self.tokens.insert(token, (client, seq));
        self.sim
            .submit(shard, token, with_client(transfer(&app, d, c, 1), client, seq, ack))
            .unwrap();
    }
}

#[test]
fn retries_on_any_shard_apply_once_and_return_the_first_outcome() {
    swarm(seeds(0..10), |seed| {
        let mut rng = Rng::new(seed);
        let shards = 1 + (seed % 3) as u16;
        let app = bank(8);
        let mut config = test_config(30);
        config.snapshot_interval_us = 400;
        config.epoch_gather_us = 30;
        let mut run = Run {
            sim: Sim::new(app.clone(), config.clone(), shards, seed),
            sent: BTreeMap::new(),
            tokens: HashMap::new(),
            next_token: 0,
        };
        let initial: Vec<(OpId, Key, Value)> = (0..ACCOUNTS)
            .map(|k| {
                (
                    OpId(0),
                    Key::from(k),
                    Value::encode(&START, &mut Default::default()).unwrap(),
                )
            })
            .collect();
        for (op, k, v) in &initial {
            run.sim.load(*op, k, Some(v.clone()));
        }
        let clients = 5u64;
        let mut next_seq = vec![1u64; clients as usize];
        for _ in 0..400 {
            let client = rng.below(clients);
            if rng.chance(0.6) || next_seq[client as usize] == 1 {
                // A new request.
                let seq = next_seq[client as usize];
                next_seq[client as usize] += 1;
                let d = rng.below(ACCOUNTS);
                let c = (d + 1 + rng.below(ACCOUNTS - 1)) % ACCOUNTS;
                run.sent.insert((client, seq), (d, c));
                run.submit(&mut rng, client, seq, 0);
            } else {
                // A retry of an earlier one, maybe still in flight.
                let seq = 1 + rng.below(next_seq[client as usize] - 1);
                run.submit(&mut rng, client, seq, 0);
            }
            for _ in 0..rng.below(30) {
                run.sim.step();
            }
        }
        run.sim.run();
        let replies = run.sim.take_replies();
        assert_eq!(
            replies.len() as u64,
            run.next_token,
            "seed {seed}: every attempt is answered"
        );
        // All attempts of one request got the same outcome and tid.
        let mut first: BTreeMap<(u64, u64), (Tid, Outcome)> = BTreeMap::new();
        for r in &replies {
            let key = run.tokens[&r.token];
            let got = (r.tid, r.outcome.clone());
            let want = first.entry(key).or_insert_with(|| got.clone());
            assert_eq!(*want, got, "seed {seed}: attempts of {key:?} disagree");
        }
        // Each committed request applied exactly once.
        let mut expected: BTreeMap<u64, i64> = (0..ACCOUNTS).map(|k| (k, START)).collect();
        for (key, (_, outcome)) in &first {
            if matches!(outcome, Outcome::Committed(_)) {
                let (d, c) = run.sent[key];
                *expected.get_mut(&d).unwrap() -= 1;
                *expected.get_mut(&c).unwrap() += 1;
            }
        }
        let state = run.sim.state();
        for k in 0..ACCOUNTS {
            let got = state.get(&(OpId(0), Key::from(k))).map(balance_of).unwrap_or(0);
            assert_eq!(got, expected[&k], "seed {seed}: account {k}");
        }

        // Recovery from the last complete snapshot plus the log: every
        // retry still gets the original outcome and changes nothing.
        let chunks = run.sim.take_snapshots();
        let last_epoch = chunks.iter().filter(|c| c.last).map(|c| c.epoch).max().unwrap();
        let mut rec = Sim::new(app.clone(), config.clone(), shards, seed + 1000);
        for shard in 0..shards {
            let mut entities: BTreeMap<(OpId, Key), Value> = BTreeMap::new();
            let mut meta = Vec::new();
            for c in chunks.iter().filter(|c| c.shard == shard && c.epoch <= last_epoch) {
                for (op, k, v) in &c.entries {
                    match v {
                        Some(v) => entities.insert((*op, k.clone()), v.clone()),
                        None => entities.remove(&(*op, k.clone())),
                    };
                }
                if c.last && c.epoch == last_epoch {
                    meta = c.meta.clone();
                }
            }
            let s = rec.shard_mut(shard);
            for ((op, k), v) in entities {
                s.load_snapshot_entity(op, &k, v);
            }
            s.restore(&meta).unwrap();
        }
        rec.replay(run.sim.logs().into_iter().filter(|b| b.epoch > last_epoch).collect());
        rec.run();
        assert!(rec.state() == state, "seed {seed}: recovery reproduces the state");
        rec.take_replies();
        let mut rec_run = Run {
            sim: rec,
            sent: run.sent.clone(),
            tokens: HashMap::new(),
            next_token: 0,
        };
        for (client, seq) in run.sent.keys().copied().collect::<Vec<_>>() {
            rec_run.submit(&mut rng, client, seq, 0);
        }
        rec_run.sim.run();
        for r in rec_run.sim.take_replies() {
            let key = rec_run.tokens[&r.token];
            assert_eq!(
                (r.tid, r.outcome),
                first[&key],
                "seed {seed}: retry of {key:?} after recovery"
            );
        }
        assert!(
            rec_run.sim.state() == state,
            "seed {seed}: retries after recovery applied nothing"
        );
    });
}

#[test]
fn acknowledged_requests_are_forgotten_not_rerun() {
    swarm(seeds(5..6), |seed| {
        let app = bank(8);
        let mut sim = Sim::new(app.clone(), test_config(10), 2, seed);
        for k in 0..ACCOUNTS {
            sim.load(
                OpId(0),
                &Key::from(k),
                Some(Value::encode(&100i64, &mut Default::default()).unwrap()),
            );
        }
        for seq in 1..=5 {
            sim.submit(0, seq, with_client(transfer(&app, 1, 2, 1), 77, seq, seq))
                .unwrap();
            sim.run();
        }
        let replies = sim.take_replies();
        assert!(replies.iter().all(|r| matches!(r.outcome, Outcome::Committed(_))));
        // Seq 5 acknowledged everything below it: seq 2 is forgotten, seq 5 is
        // still answered from the table.
        sim.submit(1, 100, with_client(transfer(&app, 1, 2, 1), 77, 2, 5))
            .unwrap();
        sim.submit(1, 101, with_client(transfer(&app, 1, 2, 1), 77, 5, 5))
            .unwrap();
        sim.run();
        let replies = sim.take_replies();
        let forgotten = replies.iter().find(|r| r.token == 100).unwrap();
        assert!(matches!(&forgotten.outcome, Outcome::Aborted(a) if a.kind() == AbortKind::Forgotten));
        let again = replies.iter().find(|r| r.token == 101).unwrap();
        assert!(matches!(again.outcome, Outcome::Committed(_)));
        let state = sim.state();
        assert_eq!(
            state[&(OpId(0), Key::from(1u64))].decode::<i64>().unwrap(),
            95,
            "five transfers, once each"
        );
    });
}

/// After a crash a retry can reach its client's home shard while that
/// shard still replays the log (a peer that finished replaying first took
/// the retry and forwarded it). The home shard must hold it until replay
/// has rebuilt the client table, then answer the logged outcome — never
/// run it a second time.
#[test]
fn a_retry_forwarded_to_a_shard_still_replaying_gets_the_logged_outcome() {
    const RETRY: u64 = 1_000_000;
    retries_while_a_shard_replays(|seq, _| RETRY + seq);
}

/// A driver numbers the requests it submits from its own counter, which
/// knows nothing of tids. The outcomes of replayed transactions must never
/// be taken for answers to live requests: a retry submitted (on a shard
/// done replaying) under a token equal to the tid of another logged
/// transaction gets its own outcome, once, and nothing else answers it.
#[test]
fn a_live_token_equal_to_a_replayed_tid_gets_its_own_answer() {
    retries_while_a_shard_replays(|seq, first| {
        // The tid of the next logged request (wrapping): a mix-up shows.
        let other = seq % first.len() as u64 + 1;
        first[&other].0
    });
}

/// Runs logged transfers of one client, recovers from the log, and once
/// the client's home shard is the only one still replaying, retries every
/// request on the other shard under `token(seq, first outcomes)`: each
/// token gets exactly the first outcome of its seq, once, and nothing ran
/// twice.
fn retries_while_a_shard_replays(token: impl Fn(u64, &BTreeMap<u64, (Tid, Outcome)>) -> u64) {
    const CLIENT: u64 = 77;
    const SEQS: u64 = 30;
    let app = bank(16);
    let initial: Vec<(Key, Value)> = (0..ACCOUNTS)
        .map(|k| (Key::from(k), Value::encode(&100i64, &mut Default::default()).unwrap()))
        .collect();
    let home = styx_engine::client_home(CLIENT, 2);
    let other = 1 - home;
    let mut windows = 0;
    let seeds = seeds(0..40);
    let all = seeds.len() >= 40;
    swarm(seeds, |seed| {
        let mut live = Sim::new(app.clone(), test_config(8), 2, seed);
        for (k, v) in &initial {
            live.load(OpId(0), k, Some(v.clone()));
        }
        let mut rng = Rng::new(seed);
        let mut sent = BTreeMap::new();
        for seq in 1..=SEQS {
            let d = rng.below(ACCOUNTS);
            let c = (d + 1 + rng.below(ACCOUNTS - 1)) % ACCOUNTS;
            sent.insert(seq, (d, c));
            let shard = rng.below(2) as u16;
            live.submit(shard, seq, with_client(transfer(&app, d, c, 1), CLIENT, seq, 0))
                .unwrap();
        }
        live.run();
        let first: BTreeMap<u64, (Tid, Outcome)> = live
            .take_replies()
            .into_iter()
            .map(|r| (r.token, (r.tid, r.outcome)))
            .collect();
        assert_eq!(first.len() as u64, SEQS);

        let mut rec = Sim::new(app.clone(), test_config(8), 2, seed ^ 0x5eed);
        for (k, v) in &initial {
            rec.load(OpId(0), k, Some(v.clone()));
        }
        rec.replay(live.logs());
        let mut window = false;
        loop {
            if !rec.shard(other).is_replaying() && rec.shard(home).is_replaying() {
                window = true;
                break;
            }
            if !rec.step() {
                break;
            }
        }
        if !window {
            return;
        }
        windows += 1;
        let mut expect = BTreeMap::new();
        for (seq, (d, c)) in &sent {
            let t = token(*seq, &first);
            expect.insert(t, first[seq].clone());
            rec.submit(other, t, with_client(transfer(&app, *d, *c, 1), CLIENT, *seq, 0))
                .unwrap();
        }
        rec.run();
        let mut answered: BTreeMap<u64, (Tid, Outcome)> = BTreeMap::new();
        for r in rec.take_replies() {
            let again = answered.insert(r.token, (r.tid, r.outcome));
            assert!(again.is_none(), "seed {seed}: token {} answered twice", r.token);
        }
        assert_eq!(answered, expect, "seed {seed}: every retry gets the logged outcome");
        assert_eq!(rec.state(), live.state(), "seed {seed}: nothing ran twice");
    });
    if all {
        assert!(windows > 0, "no seed let a retry reach a shard still replaying");
    }
}
