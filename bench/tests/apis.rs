//! TPC-C, movie review and travel written with typed entities are the same
//! applications as their closure versions: in the simulator, which is
//! deterministic, the same seed and the same requests end both in the same
//! outcomes (results and abort messages) and the same final state, byte
//! for byte; and each version keeps its workload's invariants and equals
//! serial execution.

mod common;

use common::*;
use std::sync::Arc;
use styx_bench::Api;
use styx_bench::deathstar::{movie, travel};
use styx_bench::tpcc::{self, Functions, Generator, Mix, Scale};
use styx_engine::{App, Key, OpId, Outcome, Request, Value};

/// One application, written both ways, and how to load, drive and check it.
/// A whole state as a workload loads it.
type Entities = Vec<(OpId, Key, Value)>;

struct Case<'a> {
    name: &'a str,
    app: &'a dyn Fn(Api) -> Arc<App>,
    load: &'a dyn Fn(&App) -> Entities,
    requests: &'a dyn Fn(&App) -> Vec<Request>,
    check: &'a dyn Fn(&App, &State) -> Vec<String>,
}

/// Runs `case` under both APIs on `shards` shards with `seed`; returns the
/// outcomes, after requiring them and the final states to be identical.
fn same_under_both_apis(case: &Case<'_>, shards: u16, seed: u64) -> Vec<Outcome> {
    let runs: Vec<(Entities, Run)> = [Api::Typed, Api::Closures]
        .into_iter()
        .map(|api| {
            let app = (case.app)(api);
            let initial = (case.load)(&app);
            let requests = (case.requests)(&app);
            let mut run = simulate(&app, &initial, &requests, shards, seed, 100, 80);
            let violations = (case.check)(&app, &run.state);
            assert!(
                violations.is_empty(),
                "{} ({api}), seed {seed}, {shards} shards:\n{}",
                case.name,
                violations.join("\n")
            );
            run.check_serial(&app, &initial);
            (initial, run)
        })
        .collect();
    let [(typed_initial, typed), (closures_initial, closures)] = &runs[..] else {
        unreachable!()
    };
    assert!(typed_initial == closures_initial, "{}: the loads differ", case.name);
    for (i, (t, c)) in typed.outcomes.iter().zip(&closures.outcomes).enumerate() {
        assert_eq!(t, c, "{}, seed {seed}: request {i} ended differently", case.name);
    }
    assert_eq!(typed.state.len(), closures.state.len(), "{}: entity counts", case.name);
    for ((key, t), (other, c)) in typed.state.iter().zip(&closures.state) {
        assert_eq!(key, other, "{}, seed {seed}: the entities differ", case.name);
        assert!(
            t.to_vec() == c.to_vec(),
            "{}, seed {seed}: {key:?} differs between the APIs",
            case.name
        );
    }
    typed.outcomes.clone()
}

fn committed(outcomes: &[Outcome]) -> usize {
    outcomes.iter().filter(|o| matches!(o, Outcome::Committed(_))).count()
}

#[test]
fn tpcc_typed_and_closures_end_in_the_same_state() {
    const PARTITIONS: u32 = 8;
    // Many rollbacks, remote lines and payments by name, on one hot
    // warehouse and on three.
    let mix = Mix {
        invalid_item: 10,
        remote_line: 20,
        remote_payment: 40,
        ..Mix::default()
    };
    const CASES: [(u16, u32); 3] = [(1, 1), (2, 1), (3, 3)];
    swarm(seeds(0..3), |seed| {
        let (shards, warehouses) = CASES[(seed % 3) as usize];
        let scale = Scale::small(warehouses);
        let case = Case {
            name: "tpcc",
            app: &|api| tpcc::app_with(PARTITIONS, api),
            load: &|app| tpcc::load(app, &scale, seed),
            requests: &|app| {
                let functions = Functions::of(app);
                let mut generator = Generator::new(functions, scale, seed);
                generator.mix = mix;
                (0..600).map(|_| generator.next_txn().request(&functions)).collect()
            },
            check: &tpcc::check,
        };
        let outcomes = same_under_both_apis(&case, shards, seed);
        let ok = committed(&outcomes);
        assert!(ok > 0 && ok < outcomes.len(), "commits and rollbacks: {ok}");
    });
}

#[test]
fn movie_typed_and_closures_end_in_the_same_state() {
    const PARTITIONS: u32 = 8;
    swarm(seeds(1..4), |seed| {
        let shards = 1 + ((seed + 2) % 3) as u16;
        // Few users and movies (hot review lists), some invalid reviews.
        let scale = movie::Scale { users: 20, movies: 10 };
        let case = Case {
            name: "movie",
            app: &|api| movie::app_with(PARTITIONS, api),
            load: &|app| movie::load(app, &scale, seed),
            requests: &|app| {
                let mut generator = movie::Generator::new(movie::Functions::of(app), scale, seed, 1_000);
                generator.invalid_percent = 5;
                (0..600).map(|_| generator.next()).collect()
            },
            check: &movie::check,
        };
        let outcomes = same_under_both_apis(&case, shards, seed);
        let ok = committed(&outcomes);
        assert!(ok > 0 && ok < outcomes.len(), "commits and aborts: {ok}");
    });
}

#[test]
fn travel_typed_and_closures_end_in_the_same_state() {
    const PARTITIONS: u32 = 8;
    // Small hotels and flights that fill up, with every action in the mix.
    let scale = travel::Scale {
        hotels: 6,
        flights: 4,
        users: 50,
        rooms_per_hotel: 12,
        seats_per_flight: 15,
    };
    let mix = travel::Mix {
        search: 2_000,
        recommend: 2_000,
        login: 1_000,
        reserve: 5_000,
    };
    swarm(seeds(1..4), |seed| {
        let shards = 1 + ((seed + 2) % 3) as u16;
        let geo_partitions = 1 + (seed % 3) as u32;
        let case = Case {
            name: "travel",
            app: &|api| travel::app_with(PARTITIONS, geo_partitions, api),
            load: &|app| travel::load(app, &scale, seed),
            requests: &|app| {
                let mut generator = travel::Generator::new(travel::Functions::of(app), scale, seed, 1);
                generator.mix = mix;
                generator.wrong_password_percent = 20;
                (0..500).map(|_| generator.next()).collect()
            },
            check: &travel::check,
        };
        let outcomes = same_under_both_apis(&case, shards, seed);
        let ok = committed(&outcomes);
        assert!(ok > 0 && ok < outcomes.len(), "commits and full reservations: {ok}");
    });
}
