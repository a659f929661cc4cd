//! The same epoch-structured input (epochs of transactions with their tids)
//! gives the same final state and the same replies whatever the number of
//! shards, the placement of transactions on sequencers, and the message
//! interleaving drawn from the simulation seed.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::sync::Arc;
use styx_engine::rng::Rng;
use styx_engine::sim::{Sim, test_config};
use styx_engine::{App, Batch, Key, OpId, Outcome, Request, Tid, Value};

/// Epochs of `(tid, request)`, tids increasing across epochs.
fn epochs(app: &App, seed: u64) -> Vec<Vec<(Tid, Request)>> {
    let mut rng = Rng::new(seed);
    let generator = ProgramGen {
        keys: 24,
        depth_max: 3,
        abort_rate: 0.3,
        panic_rate: 0.1,
        scan_rate: 0.1,
    };
    let mut tid = 100;
    (0..25)
        .map(|_| {
            (0..rng.below(40))
                .map(|_| {
                    tid += 1 + rng.below(3);
                    let (root, prog) = generator.transaction(&mut rng);
                    (tid, program_request(app, root, &prog))
                })
                .collect()
        })
        .collect()
}

type Result = (BTreeMap<(OpId, Key), Value>, BTreeMap<Tid, Outcome>);

fn run(
    app: &Arc<App>,
    input: &[Vec<(Tid, Request)>],
    initial: &[(OpId, Key, Value)],
    shards: u16,
    seed: u64,
) -> Result {
    let mut rng = Rng::new(seed ^ 0xabcdef);
    let mut sim = Sim::new(app.clone(), test_config(1_000), shards, seed);
    for (op, k, v) in initial {
        sim.load(*op, k, Some(v.clone()));
    }
    let mut batches = Vec::new();
    for (i, txns) in input.iter().enumerate() {
        let epoch = i as u64 + 1;
        let mut per_shard: Vec<Vec<(Tid, Request)>> = vec![Vec::new(); shards as usize];
        for (tid, r) in txns {
            // Any shard may have sequenced it: the outcome must not care.
            per_shard[rng.below(u64::from(shards)) as usize].push((*tid, r.clone()));
        }
        for (shard, txns) in per_shard.into_iter().enumerate() {
            batches.push(Batch {
                epoch,
                shard: shard as u16,
                lc: epoch * 1_000,
                now_us: 1_700_000_000_000_000 + epoch * 1_000,
                txns,
            });
        }
    }
    sim.replay(batches);
    sim.run();
    let replies = sim.take_replayed().into_iter().map(|r| (r.tid, r.outcome)).collect();
    (sim.state(), replies)
}

#[test]
fn same_input_same_result_on_1_2_4_shards_and_50_seeds() {
    let app = programs();
    // The seed makes the input; 50 simulator seeds run it on each shard count.
    swarm(seeds(0..3), |input_seed| {
        let input = epochs(&app, input_seed);
        let total: usize = input.iter().map(Vec::len).sum();
        let initial: Vec<(OpId, Key, Value)> = (0..24u64)
            .map(|k| {
                (
                    OpId(0),
                    Key::from(k),
                    Value::encode(&(k as i64), &mut Default::default()).unwrap(),
                )
            })
            .collect();
        let reference = run(&app, &input, &initial, 1, 0);
        assert_eq!(reference.1.len(), total, "every transaction answered");
        let committed = reference
            .1
            .values()
            .filter(|o| matches!(o, Outcome::Committed(_)))
            .count();
        assert!(
            committed > total / 3 && committed < total,
            "a mix of outcomes: {committed}/{total}"
        );
        for shards in [1, 2, 4] {
            for seed in 0..50 {
                let got = run(&app, &input, &initial, shards, seed);
                assert!(
                    got.1 == reference.1,
                    "replies differ: {shards} shards, simulator seed {seed}"
                );
                assert!(
                    got.0 == reference.0,
                    "state differs: {shards} shards, simulator seed {seed}"
                );
            }
        }
    });
}

#[test]
fn a_seed_replays_the_same_live_run() {
    // Live sequencing (not replay): the same seed, the same everything.
    let app = bank(8);
    let go = |seed: u64| {
        let mut sim = Sim::new(app.clone(), test_config(50), 3, seed);
        let mut rng = Rng::new(seed);
        for k in 0..50u64 {
            sim.load(
                OpId(0),
                &Key::from(k),
                Some(Value::encode(&10i64, &mut Default::default()).unwrap()),
            );
        }
        for token in 0..500 {
            let (d, c) = (rng.below(50), rng.below(50));
            sim.submit(
                rng.below(3) as u16,
                token,
                transfer(&app, d, (c + (c == d) as u64) % 50, 3),
            )
            .unwrap();
            if rng.chance(0.3) {
                sim.step();
            }
        }
        sim.run();
        (sim.state(), sim.take_replies(), sim.logs())
    };
    swarm(seeds(0..5), |seed| {
        let a = go(seed);
        let b = go(seed);
        assert!(a.0 == b.0 && a.1 == b.1 && a.2 == b.2, "seed {seed} did not replay");
    });
}

#[test]
fn replaying_the_log_reproduces_state_and_replies() {
    let app = bank(8);
    swarm(seeds(7..8), |seed| {
        let mut sim = Sim::new(app.clone(), test_config(40), 2, seed);
        let mut rng = Rng::new(seed);
        let initial: Vec<(OpId, Key, Value)> = (0..30u64)
            .map(|k| {
                (
                    OpId(0),
                    Key::from(k),
                    Value::encode(&4i64, &mut Default::default()).unwrap(),
                )
            })
            .collect();
        for (op, k, v) in &initial {
            sim.load(*op, k, Some(v.clone()));
        }
        for token in 0..800 {
            let (d, c) = (rng.below(30), rng.below(30));
            sim.submit(
                rng.below(2) as u16,
                token,
                transfer(&app, d, (c + (c == d) as u64) % 30, 2),
            )
            .unwrap();
            if rng.chance(0.2) {
                sim.step();
            }
        }
        sim.run();
        let live_state = sim.state();
        let live: BTreeMap<Tid, Outcome> = sim.take_replies().into_iter().map(|r| (r.tid, r.outcome)).collect();
        for (shards, offset) in [(2, 1), (2, 2), (1, 3), (4, 4)] {
            // Seed 7 (the default) replays with seeds 1 to 4.
            let replay_seed = (seed * 4 + offset).wrapping_sub(28);
            let mut replay = Sim::new(app.clone(), test_config(40), shards, replay_seed);
            for (op, k, v) in &initial {
                replay.load(*op, k, Some(v.clone()));
            }
            // Re-home each logged batch onto the replaying shards.
            let batches: Vec<Batch> = sim
                .logs()
                .into_iter()
                .map(|mut b| {
                    b.shard %= shards;
                    b
                })
                .fold(BTreeMap::<(u64, u16), Batch>::new(), |mut acc, b| {
                    acc.entry((b.epoch, b.shard))
                        .and_modify(|x| x.txns.extend(b.txns.clone()))
                        .or_insert(b);
                    acc
                })
                .into_values()
                .collect();
            replay.replay(batches);
            replay.run();
            let replayed: BTreeMap<Tid, Outcome> =
                replay.take_replayed().into_iter().map(|r| (r.tid, r.outcome)).collect();
            assert!(replayed == live, "replies differ on replay ({shards} shards)");
            assert!(
                replay.state() == live_state,
                "state differs on replay ({shards} shards)"
            );
        }
    });
}
