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

/// Several shards as tasks of one executor thread (and uneven blocks of
/// them over two): cross-shard transactions between shards of one thread
/// and of two keep every invariant, under contention too.
#[test]
fn shards_sharing_threads_keep_every_invariant() {
    for (shards, threads, zipf) in [(3, 1, None), (5, 2, Some(0.99))] {
        let p = Params {
            threads: Some(threads),
            ..params(shards, zipf, Load::Closed { in_flight: 200 })
        };
        let r = inproc::run(&p).unwrap();
        assert!(
            r.invariants_ok,
            "{shards} shards on {threads}: {:?}",
            r.invariant_errors
        );
        assert!(r.committed > 1_000, "{shards} shards on {threads}: {}", r.committed);
        assert_eq!(r.threads, Some(threads));
    }
}
