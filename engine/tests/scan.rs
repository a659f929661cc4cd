//! The built-in `__scan`: paging through a partition covers each of its
//! entities exactly once, in key order, with their state's bytes, and reads
//! like any transaction (it sees the writes committed before it).

mod common;

use common::*;
use std::collections::BTreeMap;
use styx_engine::sim::{Sim, test_config};
use styx_engine::{
    Address, CallLimits, Key, OpId, Outcome, Payload, Request, SCAN_FUNCTION, SCAN_LIMIT_MAX, Serial, Value,
};

type Page = (Vec<(Vec<u8>, Vec<u8>)>, bool);

/// Runs one `__scan` of `partition` and returns its page.
fn scan(sim: &mut Sim, token: u64, partition: u32, after: Option<Vec<u8>>, limit: u32) -> Page {
    let app = bank(PARTITIONS);
    let request = Request {
        function: app
            .resolve("account", SCAN_FUNCTION)
            .expect("every operator has __scan"),
        address: Address::Partition(partition),
        args: Payload::encode(&(after, limit)),
        client: None,
    };
    let shard = (token % u64::from(sim.n_shards())) as u16;
    sim.submit(shard, token, request).unwrap();
    sim.run();
    let replies = sim.take_replies();
    assert_eq!(replies.len(), 1);
    match &replies[0].outcome {
        Outcome::Committed(result) => result.decode::<Page>().expect("a page"),
        Outcome::Aborted(a) => panic!("__scan aborted: {a}"),
    }
}

/// Every entity of `partition`, page by page.
fn dump(sim: &mut Sim, token: &mut u64, partition: u32, limit: u32) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut all = Vec::new();
    let mut after = None;
    loop {
        *token += 1;
        let (page, more) = scan(sim, *token, partition, after.clone(), limit);
        assert!(page.len() <= limit.clamp(1, SCAN_LIMIT_MAX) as usize);
        if let Some(last) = page.last() {
            after = Some(last.0.clone());
        }
        assert!(!more || !page.is_empty(), "an empty page says more follow");
        all.extend(page);
        if !more {
            return all;
        }
    }
}

const PARTITIONS: u32 = 4;

fn loaded(shards: u16, accounts: u64, seed: u64) -> (Sim, BTreeMap<(OpId, Key), Value>) {
    let app = bank(PARTITIONS);
    let mut sim = Sim::new(app, test_config(100), shards, seed);
    for k in 0..accounts {
        let v = Value::encode(&(k as i64 * 3), &mut Default::default()).unwrap();
        sim.load(OpId(0), &Key::from(k), Some(v));
    }
    let state = sim.state();
    (sim, state)
}

#[test]
fn pages_cover_every_partition_exactly_once_in_key_order() {
    // Seed 1 pages on one shard 7 rows at a time, seed 2 …
    const CASES: [(u16, u32); 5] = [(1, 7), (2, 1), (3, 64), (2, 10_000), (2, 0)];
    swarm(seeds(1..6), |seed| {
        let (shards, limit) = CASES[((seed + 4) % 5) as usize];
        let accounts = 500;
        let (mut sim, state) = loaded(shards, accounts, seed);
        let mut token = 0;
        let mut seen = BTreeMap::new();
        for p in 0..PARTITIONS {
            let rows = dump(&mut sim, &mut token, p, limit);
            assert!(
                rows.windows(2).all(|w| w[0].0 < w[1].0),
                "partition {p}: keys not strictly increasing"
            );
            for (k, v) in rows {
                let key = Key::from_bytes(&k);
                assert_eq!(key.partition(PARTITIONS), p, "key {key} paged from the wrong partition");
                assert!(seen.insert(key, v).is_none(), "a key paged twice");
            }
        }
        assert_eq!(seen.len(), state.len(), "seed {seed}: every entity paged");
        for ((_, key), value) in &state {
            assert_eq!(seen[key], value.to_vec(), "the bytes of {key}");
        }
    });
}

#[test]
fn a_scan_sees_the_writes_committed_before_it() {
    swarm(seeds(9..10), |seed| {
        let (mut sim, _) = loaded(2, 50, seed);
        let app = bank(PARTITIONS);
        let request = Request {
            function: app.resolve("account", "deposit").unwrap(),
            address: Address::Entity(Key::from(1_000u64)),
            args: Payload::encode(&42i64),
            client: None,
        };
        sim.submit(0, 1, request).unwrap();
        sim.run();
        assert_eq!(sim.take_replies().len(), 1);
        let partition = Key::from(1_000u64).partition(PARTITIONS);
        let mut token = 10;
        let rows = dump(&mut sim, &mut token, partition, 3);
        let key = Key::from(1_000u64);
        let found = rows
            .iter()
            .find(|(k, _)| k.as_slice() == key.as_bytes())
            .expect("the new account");
        assert_eq!(Value::from_bytes(&found.1).decode::<i64>().unwrap(), 42);
    });
}

#[test]
fn every_operator_has_scan_as_a_partition_function() {
    let app = bank(PARTITIONS);
    let f = app.resolve("account", SCAN_FUNCTION).unwrap();
    assert_eq!(app.function_info(f).kind(), styx_engine::FnKind::Partition);
}

/// The serial executor (the oracle) pages a partition like the engine:
/// the same rows, page for page, with entities created after its first
/// scan included and deleted ones left out.
#[test]
fn the_serial_executor_pages_like_the_engine() {
    let app = bank(PARTITIONS);
    let (mut sim, state) = loaded(2, 300, 4);
    let mut serial = Serial::new(app.clone(), CallLimits::default());
    for ((op, key), value) in &state {
        serial.load(*op, key.clone(), Some(value.clone()));
    }
    let scan_fn = app.resolve("account", SCAN_FUNCTION).unwrap();
    let mut tid = 0;
    let mut serial_dump = |serial: &Serial, partition: u32, limit: u32| {
        let mut all = Vec::new();
        let mut after: Option<Vec<u8>> = None;
        loop {
            tid += 1;
            let request = Request {
                function: scan_fn,
                address: Address::Partition(partition),
                args: Payload::encode(&(after.clone(), limit)),
                client: None,
            };
            let (page, more) = match serial.execute(tid, 0, &request) {
                Outcome::Committed(r) => r.decode::<Page>().unwrap(),
                Outcome::Aborted(a) => panic!("__scan aborted: {a}"),
            };
            if let Some(last) = page.last() {
                after = Some(last.0.clone());
            }
            all.extend(page);
            if !more {
                return all;
            }
        }
    };
    let mut token = 0;
    for p in 0..PARTITIONS {
        assert_eq!(
            serial_dump(&serial, p, 7),
            dump(&mut sim, &mut token, p, 7),
            "partition {p}"
        );
    }
    // Entities created and deleted after the first scans.
    for k in [1_000u64, 1_001, 1_002] {
        let v = Value::encode(&(k as i64), &mut Default::default()).unwrap();
        serial.load(OpId(0), Key::from(k), Some(v.clone()));
        sim.load(OpId(0), &Key::from(k), Some(v));
    }
    serial.load(OpId(0), Key::from(5u64), None);
    sim.load(OpId(0), &Key::from(5u64), None);
    for p in 0..PARTITIONS {
        assert_eq!(
            serial_dump(&serial, p, 5),
            dump(&mut sim, &mut token, p, 5),
            "partition {p} after changes"
        );
    }
}

/// `Ctx::partition` names the partition that owns the entity, in the
/// engine and in the serial executor (which works it out only when asked).
#[test]
fn an_entity_function_knows_its_partition_in_the_engine_and_the_serial_executor() {
    const PARTS: u32 = 7;
    let mut app = styx_engine::App::new("where");
    let op = app.operator("thing", PARTS);
    app.function(op, "partition", |ctx, (): ()| async move {
        // Written first, so the serial executor also creates a slot for it.
        ctx.put(&1u64)?;
        Ok(ctx.partition())
    });
    let app = std::sync::Arc::new(app);
    let function = app.resolve("thing", "partition").unwrap();
    let serial = Serial::new(app.clone(), CallLimits::default());
    let mut sim = Sim::new(app.clone(), test_config(10), 3, 1);
    for k in 0..40u64 {
        let key = Key::from(k);
        let request = Request {
            function,
            address: Address::Entity(key.clone()),
            args: Payload::encode(&()),
            client: None,
        };
        sim.submit((k % 3) as u16, k + 1, request.clone()).unwrap();
        sim.run();
        let engine = match &sim.take_replies()[0].outcome {
            Outcome::Committed(p) => p.decode::<u32>().unwrap(),
            Outcome::Aborted(a) => panic!("{a}"),
        };
        let oracle = match serial.execute(k + 1, 0, &request) {
            Outcome::Committed(p) => p.decode::<u32>().unwrap(),
            Outcome::Aborted(a) => panic!("{a}"),
        };
        assert_eq!(engine, key.partition(PARTS), "key {k}");
        assert_eq!(oracle, key.partition(PARTS), "key {k}");
    }
}
