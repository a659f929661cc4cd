//! The engine's replies and final state equal serial execution in its
//! serial order, for random programs with sync and async calls, fan-out,
//! cycles across entities, scans, logic aborts and panics, on 1–4 shards.

mod common;

use common::*;
use styx_engine::rng::Rng;
use styx_engine::sim::{Sim, test_config};
use styx_engine::{Key, OpId, Value};

fn value(v: i64) -> Value {
    Value::encode(&v, &mut Default::default()).unwrap()
}

fn run_seed(seed: u64, txns: u64) -> (Checked, styx_engine::Stats) {
    let mut rng = Rng::new(seed);
    let shards = 1 + rng.below(4) as u16;
    let app = programs();
    let mut config = test_config(1 + rng.below(24) as usize);
    config.epoch_gather_us = [0, 0, 50, 500][rng.below(4) as usize];
    config.step_messages_max = [1, 2, 7, 64][rng.below(4) as usize];
    // Snapshots copy entities while later epochs run: the oracle must hold
    // with them too.
    config.snapshot_interval_us = [0, 100, 1_000][rng.below(3) as usize];
    let limits = config.limits;
    let mut sim = Sim::new(app.clone(), config, shards, seed);
    let generator = ProgramGen {
        keys: 8 + rng.below(40),
        depth_max: 1 + rng.below(4) as u32,
        abort_rate: 0.3,
        panic_rate: 0.15,
        scan_rate: 0.1,
    };
    let node = OpId(0);
    let initial: Vec<(OpId, Key, Value)> = (0..generator.keys)
        .filter(|_| rng.chance(0.7))
        .map(|k| (node, Key::from(k), value(k as i64 * 10)))
        .collect();
    for (op, k, v) in &initial {
        sim.load(*op, k, Some(v.clone()));
    }
    // Bursts of submissions between bursts of steps: epochs of varied size.
    let mut token = 0;
    while token < txns {
        for _ in 0..(1 + rng.below(30)).min(txns - token) {
            let (root, prog) = generator.transaction(&mut rng);
            let shard = rng.below(u64::from(shards)) as u16;
            sim.submit(shard, token, program_request(&app, root, &prog)).unwrap();
            token += 1;
        }
        for _ in 0..rng.below(60) {
            sim.step();
        }
    }
    let checked = run_and_check(&mut sim, &app, limits, &initial);
    (checked, sim.stats())
}

#[test]
fn random_programs_match_serial_execution() {
    let mut totals = Checked::default();
    let mut reexecuted = 0;
    let mut serialized = 0;
    let seeds = seeds(0..120);
    let all = seeds.len() >= 120;
    swarm(seeds, |seed| {
        let (c, stats) = run_seed(seed, 150);
        totals.committed += c.committed;
        totals.aborted += c.aborted;
        totals.epochs += c.epochs;
        reexecuted += stats.reexecuted;
        serialized += stats.serialized;
    });
    println!("{totals:?} reexecuted {reexecuted} serialized {serialized}");
    if all {
        // Phases 2 and 3 must be exercised, not only phase 1.
        assert!(reexecuted > 1_000, "{reexecuted}");
        assert!(serialized > 10, "{serialized}");
        // The generator must actually exercise both outcomes and many epochs.
        assert!(totals.committed > 5_000, "{totals:?}");
        assert!(totals.aborted > 1_000, "{totals:?}");
        assert!(totals.epochs > 1_000, "{totals:?}");
    }
}

#[test]
fn heavy_contention_on_few_keys_matches_serial_execution() {
    swarm(seeds(1000..1030), |seed| {
        let mut rng = Rng::new(seed);
        let shards = 2 + rng.below(3) as u16;
        let app = programs();
        let config = test_config(64);
        let limits = config.limits;
        let mut sim = Sim::new(app.clone(), config, shards, seed);
        let generator = ProgramGen {
            keys: 8,
            depth_max: 2,
            abort_rate: 0.1,
            panic_rate: 0.0,
            scan_rate: 0.05,
        };
        for token in 0..300 {
            let (root, prog) = generator.transaction(&mut rng);
            sim.submit(
                rng.below(u64::from(shards)) as u16,
                token,
                program_request(&app, root, &prog),
            )
            .unwrap();
        }
        let c = run_and_check(&mut sim, &app, limits, &[]);
        assert_eq!(c.committed + c.aborted, 300);
    });
}
