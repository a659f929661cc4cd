//! YCSB-T transfers: money is conserved, every balance is exact, and no
//! concurrency-induced abort reaches a client, under uniform and Zipf 0.99
//! creditor choice.

mod common;

use common::*;
use std::collections::HashMap;
use styx_engine::rng::{Rng, Zipf};
use styx_engine::sim::{Sim, test_config};
use styx_engine::{AbortKind, Key, OpId, Outcome, Value};

fn run(seed: u64, shards: u16, accounts: u64, zipf: Option<f64>, txns: u64) {
    let app = bank(16);
    let mut config = test_config(200);
    // Let bursts gather into one epoch (a single shard finishes an epoch
    // within the submit call otherwise, and would see no contention).
    config.epoch_gather_us = 200;
    let limits = config.limits;
    let mut sim = Sim::new(app.clone(), config, shards, seed);
    let mut rng = Rng::new(seed);
    // Small start balances so that "insufficient credit" aborts happen too.
    let start: i64 = 5;
    let initial: Vec<(OpId, Key, Value)> = (0..accounts)
        .map(|k| {
            (
                OpId(0),
                Key::from(k),
                Value::encode(&start, &mut Default::default()).unwrap(),
            )
        })
        .collect();
    for (op, k, v) in &initial {
        sim.load(*op, k, Some(v.clone()));
    }
    let creditors = zipf.map(|theta| Zipf::new(accounts, theta));
    let mut sent = HashMap::new();
    let mut token = 0;
    while token < txns {
        for _ in 0..(1 + rng.below(100)).min(txns - token) {
            let debtor = rng.below(accounts);
            let mut creditor = match &creditors {
                Some(z) => z.sample(&mut rng),
                None => rng.below(accounts),
            };
            if creditor == debtor {
                creditor = (creditor + 1) % accounts;
            }
            let amount = 1 + rng.below(3) as i64;
            sim.submit(
                rng.below(u64::from(shards)) as u16,
                token,
                transfer(&app, debtor, creditor, amount),
            )
            .unwrap();
            sent.insert(token, (debtor, creditor, amount));
            token += 1;
        }
        for _ in 0..rng.below(200) {
            sim.step();
        }
    }
    sim.run();
    let replies = sim.take_replies();
    assert_eq!(replies.len() as u64, txns, "every request is answered once");
    let mut expected: HashMap<u64, i64> = (0..accounts).map(|k| (k, start)).collect();
    let mut insufficient = 0;
    for r in &replies {
        let (debtor, creditor, amount) = sent[&r.token];
        match &r.outcome {
            Outcome::Committed(_) => {
                *expected.get_mut(&debtor).unwrap() -= amount;
                *expected.get_mut(&creditor).unwrap() += amount;
            }
            Outcome::Aborted(a) => {
                // Only the program's own decision may abort a transfer.
                assert_eq!(a.kind(), AbortKind::User, "{a:?}");
                assert_eq!(a.message(), "insufficient credit");
                insufficient += 1;
            }
        }
    }
    let state = sim.state();
    let mut total = 0;
    for k in 0..accounts {
        let got = state.get(&(OpId(0), Key::from(k))).map(balance_of).unwrap_or(0);
        assert_eq!(got, expected[&k], "balance of account {k}");
        assert!(got >= 0, "account {k} overdrawn");
        total += got;
    }
    assert_eq!(total, start * accounts as i64, "money is conserved");
    assert!(insufficient > 0, "the workload exercises logic aborts");
    // And the whole run equals serial execution in the engine's order.
    let history = sim.take_history();
    check_run(&app, limits, &initial, &sim.logs(), &history, &replies, &state);
    let stats = sim.stats();
    if zipf.is_some() {
        assert!(stats.reexecuted > 0, "contention sends transactions to phase 2");
        assert!(
            stats.without_phase2 < stats.epochs,
            "an epoch with a fallback runs phase 2"
        );
    }
}

/// An epoch where no transaction falls back ends at its flags, on every
/// shard (no phase 2, no `Done2`); one where a transaction falls back runs
/// phase 2 everywhere, and both leave the exact balances.
#[test]
fn an_epoch_without_fallbacks_ends_at_its_flags() {
    let app = bank(16);
    let mut config = test_config(200);
    config.epoch_gather_us = 200;
    let shards = 2;
    let mut sim = Sim::new(app.clone(), config, shards, 1);
    for (op, k, v) in accounts(4, 100) {
        sim.load(op, &k, Some(v));
    }
    // Disjoint transfers in one epoch: no conflict.
    sim.submit(0, 0, transfer(&app, 0, 1, 10)).unwrap();
    sim.submit(1, 1, transfer(&app, 2, 3, 10)).unwrap();
    sim.run();
    let first = sim.stats();
    assert_eq!(first.reexecuted, 0);
    assert!(first.epochs >= 1);
    assert_eq!(first.without_phase2, first.epochs, "{first:?}");
    // Two transfers from one account in one epoch: the later one reads what
    // the earlier one writes, so it falls back.
    sim.submit(0, 2, transfer(&app, 0, 2, 10)).unwrap();
    sim.submit(1, 3, transfer(&app, 0, 3, 10)).unwrap();
    sim.run();
    let second = sim.stats();
    assert!(second.reexecuted > 0, "{second:?}");
    assert!(
        second.epochs - first.epochs > second.without_phase2 - first.without_phase2,
        "{second:?}"
    );
    let replies = sim.take_replies();
    assert_eq!(replies.len(), 4);
    assert!(replies.iter().all(|r| matches!(r.outcome, Outcome::Committed(_))));
    let state = sim.state();
    let balance = |k: u64| state.get(&(OpId(0), Key::from(k))).map(balance_of).unwrap();
    assert_eq!([balance(0), balance(1), balance(2), balance(3)], [70, 110, 100, 120]);
}

#[test]
fn uniform_transfers_conserve_money_with_exact_balances() {
    swarm(seeds(0..6), |seed| run(seed, 1 + (seed % 4) as u16, 200, None, 3_000));
}

#[test]
fn zipf_099_transfers_conserve_money_with_exact_balances() {
    swarm(seeds(10..16), |seed| {
        run(seed, 1 + (seed % 4) as u16, 200, Some(0.99), 3_000)
    });
}

#[test]
fn hot_spot_on_few_accounts() {
    swarm(seeds(20..24), |seed| run(seed, 2, 4, None, 1_000));
}
