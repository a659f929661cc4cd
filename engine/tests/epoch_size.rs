//! Adaptive epoch sizing: contention shrinks epochs toward the floor, a
//! conflict-free stream grows them to the ceiling, and either way every
//! transfer is answered once and money is conserved.

mod common;

use common::*;
use styx_engine::rng::Rng;
use styx_engine::sim::{Sim, test_config};
use styx_engine::{EPOCH_TXNS_MIN, EPOCH_TXNS_START, Key, OpId, Outcome, Value};

/// Submits `txns` transfers at once over `accounts` accounts (creditor
/// `debtor + 1` when `disjoint`, so no two transactions share an account
/// if `accounts >= 2 * txns`), runs them, checks conservation; returns each
/// shard's final epoch size.
fn run(seed: u64, shards: u16, accounts: u64, txns: u64, max: usize, disjoint: bool) -> Vec<usize> {
    let app = bank(16);
    let mut config = test_config(max);
    config.epoch_txns_adaptive = true;
    // Let the submitted burst gather (a lone shard would run the first
    // request as an epoch of its own inside `submit`).
    config.epoch_gather_us = 100;
    let mut sim = Sim::new(app.clone(), config, shards, seed);
    let start = 1_000i64;
    for k in 0..accounts {
        sim.load(
            OpId(0),
            &Key::from(k),
            Some(Value::encode(&start, &mut Default::default()).unwrap()),
        );
    }
    let mut rng = Rng::new(seed);
    for token in 0..txns {
        let (debtor, creditor) = if disjoint {
            (2 * token, 2 * token + 1)
        } else {
            let d = rng.below(accounts);
            (d, (d + 1 + rng.below(accounts - 1)) % accounts)
        };
        let home = styx_engine::Shard::owner(&app, shards, OpId(0), &Key::from(debtor));
        sim.submit(home, token, transfer(&app, debtor, creditor, 1)).unwrap();
    }
    sim.run();
    let replies = sim.take_replies();
    assert_eq!(replies.len() as u64, txns, "every transfer is answered once");
    assert!(replies.iter().all(|r| matches!(r.outcome, Outcome::Committed(_))));
    let total: i64 = sim.state().values().map(balance_of).sum();
    assert_eq!(total, start * accounts as i64, "money is conserved");
    (0..shards).map(|s| sim.shard(s).epoch_size()).collect()
}

#[test]
fn contention_shrinks_epochs_to_the_floor() {
    swarm(seeds(7..8), |seed| {
        for shards in [1, 2] {
            let sizes = run(seed, shards, 8, 12_000, 10_000, false);
            assert!(sizes.iter().all(|s| *s == EPOCH_TXNS_MIN), "{shards} shards: {sizes:?}");
        }
    });
}

#[test]
fn a_conflict_free_stream_grows_epochs_to_the_ceiling() {
    let max = 4 * EPOCH_TXNS_START;
    swarm(seeds(7..8), |seed| {
        let sizes = run(seed, 2, 120_000, 60_000, max, true);
        assert!(sizes.iter().all(|s| *s == max), "{sizes:?}");
    });
}
