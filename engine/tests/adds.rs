//! `Ctx::add`: adds to one entity commute, so transactions that only add
//! to a counter in the same epoch all commit in phase 1, while one that
//! reads or puts it still conflicts; the results match serial execution.

mod common;

use common::*;
use std::sync::Arc;
use styx_engine::sim::{Sim, test_config};
use styx_engine::{Address, App, Key, OpId, Outcome, Payload, Request, Value};

/// `counter.add(d)` adds `d`; `counter.bump(d)` reads and puts (the same
/// effect, as a read-modify-write); `counter.add_then_get(d)` adds and
/// reads its own sum; `counter.put(v)` puts.
fn counters() -> Arc<App> {
    let mut app = App::new("counters");
    let counter = app.operator("counter", 4);
    app.function(counter, "add", |ctx, d: i64| async move { ctx.add(d) });
    app.function(counter, "bump", |ctx, d: i64| async move {
        let v = ctx.get::<i64>()?.unwrap_or(0);
        ctx.put(&(v + d))
    });
    app.function(counter, "add_then_get", |ctx, d: i64| async move {
        ctx.add(d)?;
        ctx.add(1)?;
        Ok(ctx.get::<i64>()?.unwrap_or(i64::MIN))
    });
    app.function(counter, "put", |ctx, v: i64| async move { ctx.put(&v) });
    app.function(counter, "put_text", |ctx, (): ()| async move {
        ctx.put(&"not a number".to_string())
    });
    Arc::new(app)
}

fn request(app: &App, function: &str, key: u64, arg: i64) -> Request {
    Request {
        function: app.resolve("counter", function).unwrap(),
        address: Address::Entity(Key::from(key)),
        args: Payload::encode(&arg),
        client: None,
    }
}

fn counter_of(sim: &Sim, key: u64) -> Option<i64> {
    sim.state()
        .get(&(OpId(0), Key::from(key)))
        .map(|v| v.decode::<i64>().unwrap())
}

/// `n` requests of `function` on one key submitted in one burst on every
/// shard, so they share an epoch; returns the run's re-executions.
fn burst(shards: u16, function: &str, n: u64) -> (Sim, u64) {
    let app = counters();
    let mut config = test_config(1_000);
    config.epoch_gather_us = 1_000;
    let mut sim = Sim::new(app.clone(), config, shards, 7);
    sim.load(
        OpId(0),
        &Key::from(1u64),
        Some(Value::encode(&100i64, &mut Default::default()).unwrap()),
    );
    for token in 0..n {
        sim.submit(
            (token % u64::from(shards)) as u16,
            token,
            request(&app, function, 1, 1 + token as i64 % 3),
        )
        .unwrap();
    }
    sim.run();
    let replies = sim.take_replies();
    assert_eq!(replies.len() as u64, n);
    for r in &replies {
        assert!(matches!(r.outcome, Outcome::Committed(_)), "{:?}", r.outcome);
    }
    let reexecuted = sim.stats().reexecuted;
    (sim, reexecuted)
}

#[test]
fn adds_to_one_counter_in_one_epoch_all_commit_without_running_again() {
    for shards in [1, 3] {
        let expected = 100 + (0..300).map(|t| 1 + t % 3).sum::<i64>();
        let (sim, reexecuted) = burst(shards, "add", 300);
        assert_eq!(counter_of(&sim, 1), Some(expected), "{shards} shards");
        assert_eq!(reexecuted, 0, "adds never conflict with each other ({shards} shards)");
        // The same increments as a read and a put: all but one per epoch
        // conflict and run again (what `add` is for).
        let (sim, reexecuted) = burst(shards, "bump", 300);
        assert_eq!(counter_of(&sim, 1), Some(expected), "{shards} shards");
        assert!(
            reexecuted > 100,
            "{reexecuted} re-executed read-modify-writes ({shards} shards)"
        );
    }
}

#[test]
fn an_add_reads_its_own_sum_and_conflicts_with_puts() {
    let app = counters();
    let mut config = test_config(1_000);
    config.epoch_gather_us = 1_000;
    let limits = config.limits;
    let mut sim = Sim::new(app.clone(), config, 2, 11);
    let initial = vec![(
        OpId(0),
        Key::from(1u64),
        Value::encode(&10i64, &mut Default::default()).unwrap(),
    )];
    sim.load(initial[0].0, &initial[0].1, Some(initial[0].2.clone()));
    // One epoch mixing adds, puts, reads-after-adds on the same counter and
    // adds on a missing one: the oracle replays the serial order.
    for round in 0..40i64 {
        let (function, key, arg) = match round % 5 {
            0 | 1 => ("add", 1, round),
            2 => ("add_then_get", 1, round),
            3 => ("put", 1, round * 1000),
            _ => ("add", 2, round),
        };
        sim.submit((round % 2) as u16, round as u64, request(&app, function, key, arg))
            .unwrap();
    }
    let checked = run_and_check(&mut sim, &app, limits, &initial);
    assert_eq!(checked.committed, 40);
    // Adds to a counter nobody had start from 0.
    assert_eq!(counter_of(&sim, 2), Some((0..40).filter(|r| r % 5 == 4).sum()));
}

#[test]
fn an_add_to_a_state_that_is_not_a_number_is_a_clear_abort() {
    let app = counters();
    let mut sim = Sim::new(app.clone(), test_config(100), 1, 3);
    let text = Request {
        function: app.resolve("counter", "put_text").unwrap(),
        address: Address::Entity(Key::from(5u64)),
        args: Payload::encode(&()),
        client: None,
    };
    sim.submit(0, 0, text).unwrap();
    sim.run();
    sim.submit(0, 1, request(&app, "add", 5, 1)).unwrap();
    sim.run();
    let replies = sim.take_replies();
    let Outcome::Aborted(a) = &replies.iter().find(|r| r.token == 1).unwrap().outcome else {
        panic!("an add to a string committed");
    };
    assert!(a.message().contains("an add needs an i64"), "{a:?}");
    // Nothing was written: the state is still the string.
    let state = sim.state();
    let v = &state[&(OpId(0), Key::from(5u64))];
    assert_eq!(v.decode::<String>().unwrap(), "not a number");
}
