//! The production runtime end to end: YCSB-T in-process on real executors
//! and the channel mesh, with the invariants checked at the end.

use std::time::Duration;
use styx_bench::inproc::{self, Load, Params};

fn params(shards: u16, zipf: Option<f64>, load: Load) -> Params {
    Params {
        shards,
        keys: 1_000,
        zipf,
        warmup: Duration::from_millis(200),
        duration: Duration::from_millis(800),
        load,
        epoch_txns_max: 100,
        serial: false,
        ..Params::default()
    }
}

#[test]
fn closed_loop_on_two_shards_keeps_every_invariant() {
    let r = inproc::run(&params(2, None, Load::Closed { in_flight: 500 })).unwrap();
    assert!(r.invariants_ok, "{:?}", r.invariant_errors);
    assert!(r.committed > 1_000, "{}", r.committed);
    assert!(r.latency_us.p50 > 0);
}

#[test]
fn zipf_contention_on_two_shards_keeps_every_invariant() {
    let r = inproc::run(&params(2, Some(0.99), Load::Closed { in_flight: 500 })).unwrap();
    assert!(r.invariants_ok, "{:?}", r.invariant_errors);
    assert!(r.reexecuted > 0, "contention reaches phase 2");
}

#[test]
fn open_loop_on_one_shard_measures_latency() {
    let r = inproc::run(&params(1, None, Load::Open { rate: 20_000.0 })).unwrap();
    assert!(r.invariants_ok, "{:?}", r.invariant_errors);
    // 20k/s for 0.8 s, within scheduling slack.
    assert!((12_000..=20_000).contains(&r.committed), "{}", r.committed);
}
