//! TPC-C NewOrder and Payment in the simulator, on 1, 2 and 3 shards: the
//! consistency conditions of clause 3.3.2 hold, every request is answered
//! once, NewOrders naming an unused item roll back without a trace, stock
//! counters match the committed order lines exactly, and the whole run
//! equals serial execution in the engine's order — also while every
//! table's partitions move between shards.

mod common;

use common::*;
use std::collections::BTreeMap;
use styx_bench::tpcc::schema::*;
use styx_bench::tpcc::{self, Functions, Generator, Mix, NewOrderReply, PaymentReply, Scale, Txn};
use styx_engine::rng::Rng;
use styx_engine::sim::Sim;
use styx_engine::{AbortKind, Key, Move, OpId, Outcome, ShardId, Value};

const PARTITIONS: u32 = 8;

fn run(seed: u64, shards: u16, scale: Scale, mix: Mix, requests: usize) {
    run_moving(seed, shards, scale, mix, requests, 0.0);
}

/// [`run`], with a share `move_chance` of the requests a move of a random
/// partition of a random table to a random shard, copied a few entities
/// an epoch or all at once, so NewOrders and Payments write into
/// partitions while they are copied and switched.
fn run_moving(seed: u64, shards: u16, scale: Scale, mix: Mix, requests: usize, move_chance: f64) {
    let app = tpcc::app(PARTITIONS);
    let functions = Functions::of(&app);
    let t = Tables::of(&app);
    let initial = tpcc::load(&app, &scale, seed);
    assert_eq!(
        tpcc::check(&app, &state_of(&initial)),
        Vec::<String>::new(),
        "the load is consistent"
    );

    let mut generator = Generator::new(functions, scale, seed);
    generator.mix = mix;
    let txns: Vec<Txn> = (0..requests).map(|_| generator.next_txn()).collect();
    // The requests: the transactions, with moves in between.
    let tables: Vec<OpId> = app.operators().map(|(op, _)| op).collect();
    let mut rng = Rng::new(seed ^ 0x6d6f7665);
    let mut reqs = Vec::with_capacity(requests);
    let mut txn_of = Vec::with_capacity(requests);
    for (i, txn) in txns.iter().enumerate() {
        while move_chance > 0.0 && rng.chance(move_chance) {
            let m = Move {
                op: tables[rng.below(tables.len() as u64) as usize],
                partition: rng.below(u64::from(PARTITIONS)) as u32,
                to: rng.below(u64::from(shards)) as ShardId,
                share: None,
            };
            reqs.push(m.request());
            txn_of.push(None);
        }
        reqs.push(txn.request(&functions));
        txn_of.push(Some(i));
    }
    let mut config = sim_config(100);
    config.move_share_entities = [3, 50, 4_096][(seed % 3) as usize];
    let mut run = simulate_with(&app, &initial, &reqs, shards, seed, config, 80);
    let moves = txn_of.iter().filter(|t| t.is_none()).count();
    for (i, outcome) in run.outcomes.iter().enumerate() {
        if txn_of[i].is_none() {
            assert!(matches!(outcome, Outcome::Committed(_)), "move {i}: {outcome:?}");
        }
    }
    if move_chance > 0.0 {
        assert!(moves > 0, "seed {seed}: no move");
        assert_placed(&run.sim, &format!("seed {seed}, {shards} shards"));
    }
    let outcomes: Vec<&Outcome> = run
        .outcomes
        .iter()
        .zip(&txn_of)
        .filter_map(|(o, t)| t.map(|_| o))
        .collect();

    // Replies: valid NewOrders and all Payments commit; the others roll back.
    let mut orders: BTreeMap<(u32, u8, u32), usize> = BTreeMap::new();
    let (mut rolled_back, mut payments) = (0, 0);
    for (i, (txn, outcome)) in txns.iter().zip(outcomes).enumerate() {
        match (txn, outcome) {
            (Txn::NewOrder(o), Outcome::Committed(p)) if !txn.names_unused_item(scale.items) => {
                let (o_id, total): NewOrderReply = p.decode().unwrap();
                assert!(total > 0);
                assert!(
                    orders.insert((o.w_id, o.d_id, o_id), i).is_none(),
                    "order id {o_id} given twice"
                );
            }
            (Txn::NewOrder(_), Outcome::Aborted(a)) if txn.names_unused_item(scale.items) => {
                assert_eq!((a.kind(), a.message()), (AbortKind::User, tpcc::ITEM_NOT_VALID));
                rolled_back += 1;
            }
            (Txn::Payment(p), Outcome::Committed(r)) => {
                let (c_id, _balance): PaymentReply = r.decode().unwrap();
                if let Some(c) = p.c_id {
                    assert_eq!(c, c_id);
                }
                payments += 1;
            }
            (txn, outcome) => panic!("request {i} (seed {seed}): {txn:?} ended {outcome:?}"),
        }
    }
    assert!(
        rolled_back > 0 && payments > 0,
        "the run exercises rollbacks and payments"
    );

    // The final state: the consistency conditions.
    let violations = tpcc::check(&app, &run.state);
    assert!(
        violations.is_empty(),
        "seed {seed}, {shards} shards:\n{}",
        violations.join("\n")
    );

    // Order ids: per district, exactly the committed NewOrders, in a row
    // after the loaded ones, each stored as requested.
    let first = scale.customers_per_district + 1;
    for w in 1..=scale.warehouses {
        for d in 1..=DISTRICTS {
            let next = get::<u32>(&run.state, t.district_next_o_id, district_key(w, d));
            let committed: Vec<u32> = orders.range((w, d, 0)..=(w, d, u32::MAX)).map(|(k, _)| k.2).collect();
            assert_eq!(
                committed,
                (first..next).collect::<Vec<_>>(),
                "order ids of district {w}/{d}"
            );
        }
    }
    let mut stock_expected: BTreeMap<(u32, u32), (u32, u32, u32)> = BTreeMap::new();
    for (&(w, d, o_id), &i) in &orders {
        let Txn::NewOrder(request) = &txns[i] else {
            unreachable!()
        };
        let order = get::<Order>(&run.state, t.order, order_key(w, d, o_id));
        assert_eq!(order.c_id, request.c_id);
        assert_eq!(usize::from(order.ol_cnt), request.lines.len());
        assert!(order.carrier_id.is_none());
        let lines = get::<Vec<OrderLine>>(&run.state, t.order_line, order_key(w, d, o_id));
        for (line, asked) in lines.iter().zip(&request.lines) {
            assert_eq!(
                (line.i_id, line.supply_w_id, line.quantity),
                (asked.i_id, asked.supply_w_id, asked.quantity)
            );
            let e = stock_expected.entry((asked.supply_w_id, asked.i_id)).or_default();
            e.0 += u32::from(asked.quantity);
            e.1 += 1;
            e.2 += u32::from(asked.supply_w_id != w);
        }
    }
    // Stock counters start at zero: they must equal what committed lines
    // took, and nothing of a rolled-back NewOrder.
    for ((op, key), value) in &run.state {
        if *op == t.stock {
            let (w, i) = parse_stock(key).unwrap();
            let s = value.decode::<Stock>().unwrap();
            let expected = stock_expected.get(&(w, i)).copied().unwrap_or_default();
            assert_eq!(
                (s.ytd, s.order_cnt, s.remote_cnt),
                expected,
                "stock of item {i} in warehouse {w}"
            );
        }
    }
    let history_rows = run
        .state
        .keys()
        .filter(|(op, k)| *op == t.history && parse_history(k).unwrap().2 == HISTORY_PAYMENT)
        .count();
    assert_eq!(history_rows, payments, "one HISTORY row per committed Payment");

    // And the run equals serial execution.
    let checked = run.check_serial(&app, &initial);
    assert_eq!(checked.committed + checked.aborted, requests + moves);
}

/// Every shard holds the same map, moved at least once, and every entity
/// lives on the shard it names.
fn assert_placed(sim: &Sim, at: &str) {
    let map = sim.shard(0).partition_map();
    assert!(map.version() > 0, "{at}: the map never changed");
    for s in 0..sim.n_shards() {
        let shard = sim.shard(s);
        assert_eq!(shard.partition_map(), map, "{at}: shard {s} holds another map");
        shard.for_each_entity(|op, key, _| {
            assert_eq!(shard.owner_now(op, key), s, "{at}: {key} of {op:?} on shard {s}");
        });
    }
}

fn encode<T: styx_engine::Store>(v: &T) -> Value {
    Value::encode(v, &mut Default::default()).unwrap()
}

fn get<T: styx_engine::Load>(state: &State, op: OpId, key: Key) -> T {
    state
        .get(&(op, key.clone()))
        .unwrap_or_else(|| panic!("no entity {key}"))
        .decode::<T>()
        .unwrap()
}

#[test]
fn the_full_scale_load_is_consistent() {
    let app = tpcc::app(PARTITIONS);
    let scale = Scale::spec(1);
    let initial = tpcc::load(&app, &scale, 1);
    assert_eq!(initial.len(), scale.entities());
    let t = Tables::of(&app);
    let count = |op: OpId| initial.iter().filter(|(o, _, _)| *o == op).count();
    assert_eq!(count(t.item), 100_000);
    assert_eq!(count(t.stock), 100_000);
    assert_eq!(count(t.customer), 30_000);
    assert_eq!(count(t.order), 30_000);
    assert_eq!(count(t.new_order), 9_000);
    assert_eq!(
        count(t.customer_by_name),
        10_000,
        "all 1 000 last names in every district"
    );
    assert_eq!(tpcc::check(&app, &state_of(&initial)), Vec::<String>::new());
}

#[test]
fn the_specified_mix_keeps_every_condition_on_one_to_three_shards() {
    // Seed index i runs seed 10 (i / 3) + 1 + i % 3 (1, 2, 3, 11, …) on as
    // many shards as its last digit says.
    swarm(seeds_of(0..6, |i| 10 * (i / 3) + 1 + i % 3), |seed| {
        let shards = 1 + ((seed % 10 + 2) % 3) as u16;
        run(seed, shards, Scale::small(2), Mix::default(), 1_000);
    });
}

#[test]
fn remote_lines_rollbacks_and_one_hot_warehouse() {
    // More remote lines and payments and rollbacks than TPC-C, on one
    // warehouse (everything contends) and on three.
    let mix = Mix {
        invalid_item: 10,
        remote_line: 20,
        remote_payment: 40,
        ..Mix::default()
    };
    // Seed 100 runs on one shard and one warehouse, 101 …
    const CASES: [(u16, u32); 4] = [(1, 1), (2, 1), (3, 3), (2, 3)];
    swarm(seeds(100..104), |seed| {
        let (shards, warehouses) = CASES[(seed % 4) as usize];
        run(seed, shards, Scale::small(warehouses), mix, 600);
    });
}

#[test]
fn payments_of_one_warehouse_add_to_w_ytd_without_running_again() {
    // One Payment per district of one warehouse, by customer id, all in
    // one epoch: each adds to the same W_YTD, and adds commute, so none
    // runs again (as a read and a write of W_YTD, nine of ten would).
    let app = tpcc::app(PARTITIONS);
    let functions = Functions::of(&app);
    let scale = Scale::small(1);
    let initial = tpcc::load(&app, &scale, 5);
    let requests: Vec<_> = (1..=DISTRICTS)
        .map(|d| {
            functions.payment_request(&tpcc::Payment {
                w_id: 1,
                d_id: d,
                c_w_id: 1,
                c_d_id: d,
                c_id: Some(u32::from(d)),
                c_last: String::new(),
                amount: 100 * Cents::from(d),
            })
        })
        .collect();
    for shards in [1, 2] {
        let run = simulate_with(&app, &initial, &requests, shards, 5, sim_config(100), 1_000);
        assert!(
            run.outcomes.iter().all(|o| matches!(o, Outcome::Committed(_))),
            "{:?}",
            run.outcomes
        );
        assert_eq!(run.sim.stats().reexecuted, 0, "{shards} shards");
        assert_eq!(tpcc::check(&app, &run.state), Vec::<String>::new());
        let t = Tables::of(&app);
        let loaded: Cents = get(&state_of(&initial), t.warehouse_ytd, warehouse_key(1));
        let ytd: Cents = get(&run.state, t.warehouse_ytd, warehouse_key(1));
        assert_eq!(ytd - loaded, (1..=10).map(|d| 100 * d).sum::<Cents>());
    }
}

#[test]
fn partitions_move_back_and_forth_while_orders_and_payments_run() {
    // Every table's partitions move between 2 or 3 shards, copied 3 or 50
    // entities an epoch or all at once (seed % 3), on one hot warehouse
    // and on two.
    swarm(seeds(200..206), |seed| {
        let shards = 2 + (seed / 3 % 2) as u16;
        let warehouses = 1 + (seed % 2) as u32;
        let mix = Mix {
            invalid_item: 5,
            remote_line: 10,
            remote_payment: 30,
            ..Mix::default()
        };
        run_moving(seed, shards, Scale::small(warehouses), mix, 600, 0.03);
    });
}

#[test]
fn the_checker_catches_each_broken_condition() {
    let app = tpcc::app(PARTITIONS);
    let t = Tables::of(&app);
    let scale = Scale::small(1);
    let consistent = state_of(&tpcc::load(&app, &scale, 3));
    let expect = |state: &State, conditions: &[&str]| {
        let violations = tpcc::check(&app, state);
        for c in conditions {
            assert!(
                violations.iter().any(|v| v.starts_with(c)),
                "expected a violation of {c}, got {violations:?}"
            );
        }
    };

    // A lost D_YTD update.
    let mut s = consistent.clone();
    let key = (t.district, district_key(1, 4));
    let mut d = s[&key].decode::<District>().unwrap();
    d.ytd += 1;
    s.insert(key, encode(&d));
    expect(&s, &["3.3.2.1", "3.3.2.9"]);

    // D_NEXT_O_ID ahead of the orders.
    let mut s = consistent.clone();
    let key = (t.district_next_o_id, district_key(1, 2));
    let next = s[&key].decode::<u32>().unwrap();
    s.insert(key, encode(&(next + 1)));
    expect(&s, &["3.3.2.2"]);

    // A hole in the NEW-ORDER rows.
    let mut s = consistent.clone();
    s.remove(&(t.new_order, order_key(1, 3, scale.first_new_order() + 1)));
    expect(&s, &["3.3.2.3", "3.3.2.5"]);

    // An ORDER-LINE row lost.
    let mut s = consistent.clone();
    let key = (t.order_line, order_key(1, 5, 7));
    let mut lines = s[&key].decode::<Vec<OrderLine>>().unwrap();
    lines.pop();
    s.insert(key, encode(&lines));
    expect(&s, &["3.3.2.4", "3.3.2.6"]);

    // A HISTORY row lost.
    let mut s = consistent.clone();
    s.remove(&(t.history, history_key(1, 6, HISTORY_LOADED, 9)));
    expect(&s, &["3.3.2.8", "3.3.2.9", "3.3.2.10"]);

    // A customer paid without paying.
    let mut s = consistent;
    let key = (t.customer, customer_key(1, 1, 1));
    let mut c = s[&key].decode::<Customer>().unwrap();
    c.balance -= 5;
    s.insert(key, encode(&c));
    expect(&s, &["3.3.2.10", "3.3.2.12"]);
}
