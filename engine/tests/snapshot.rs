//! Incremental snapshots: the state a snapshot records at epoch E, plus the
//! logged batches after E, rebuild exactly the live run's state and replies
//! on fresh shards (recovery equivalence), while the live run never paused.

mod common;

use common::*;
use std::collections::{BTreeMap, HashMap};
use styx_engine::rng::Rng;
use styx_engine::sim::{Sim, test_config};
use styx_engine::{Key, OpId, Outcome, SnapshotChunk, Tid, Value};

/// One shard's entities.
type ShardState = BTreeMap<(OpId, Key), Value>;

/// Per shard, the state of every complete snapshot epoch: entities (base
/// plus deltas applied in order) and the machine state.
type Snapshots = BTreeMap<u64, Vec<(ShardState, Vec<u8>)>>;

fn merge(chunks: &[SnapshotChunk], shards: u16) -> Snapshots {
    let mut state: Vec<BTreeMap<(OpId, Key), Value>> = vec![BTreeMap::new(); shards as usize];
    let mut metas: BTreeMap<u64, Vec<Option<Vec<u8>>>> = BTreeMap::new();
    // Per epoch, per shard: the state a snapshot of that epoch holds.
    let mut at: BTreeMap<u64, Vec<Option<ShardState>>> = BTreeMap::new();
    // A snapshot names each entity once (chunk buffers are reused: one
    // not emptied would carry an earlier snapshot's entities along).
    let mut named: HashMap<(u16, u64), std::collections::HashSet<(OpId, Key)>> = HashMap::new();
    for c in chunks {
        let s = &mut state[c.shard as usize];
        let seen = named.entry((c.shard, c.epoch)).or_default();
        for (op, k, _) in &c.entries {
            assert!(
                seen.insert((*op, k.clone())),
                "shard {} snapshot {}: {op:?} {k:?} twice",
                c.shard,
                c.epoch
            );
        }
        for (op, k, v) in &c.entries {
            match v {
                Some(v) => s.insert((*op, k.clone()), v.clone()),
                None => s.remove(&(*op, k.clone())),
            };
        }
        if c.last {
            metas.entry(c.epoch).or_insert_with(|| vec![None; shards as usize])[c.shard as usize] =
                Some(c.meta.clone());
            at.entry(c.epoch).or_insert_with(|| vec![None; shards as usize])[c.shard as usize] = Some(s.clone());
        }
    }
    let mut out = Snapshots::new();
    for (epoch, per) in at {
        let m = &metas[&epoch];
        if per.iter().all(Option::is_some) {
            out.insert(
                epoch,
                per.into_iter()
                    .zip(m)
                    .map(|(s, m)| (s.unwrap(), m.clone().unwrap()))
                    .collect(),
            );
        }
    }
    out
}

#[test]
fn snapshot_plus_log_replay_equals_the_live_run() {
    swarm(seeds(0..12), |seed| {
        let mut rng = Rng::new(seed);
        let shards = 1 + (seed % 3) as u16;
        let app = programs();
        let mut config = test_config(20);
        config.snapshot_interval_us = 300;
        config.epoch_gather_us = 50;
        config.step_messages_max = [1, 4, 64][(seed % 3) as usize];
        let mut sim = Sim::new(app.clone(), config.clone(), shards, seed);
        let generator = ProgramGen {
            keys: 30,
            depth_max: 2,
            abort_rate: 0.2,
            panic_rate: 0.0,
            scan_rate: 0.1,
        };
        let node = OpId(0);
        for k in 0..30u64 {
            sim.load(
                node,
                &Key::from(k),
                Some(Value::encode(&(k as i64), &mut Default::default()).unwrap()),
            );
        }
        let mut token = 0;
        while token < 600 {
            for _ in 0..(1 + rng.below(20)).min(600 - token) {
                let (root, prog) = generator.transaction(&mut rng);
                sim.submit(
                    rng.below(u64::from(shards)) as u16,
                    token,
                    program_request(&app, root, &prog),
                )
                .unwrap();
                token += 1;
            }
            for _ in 0..rng.below(80) {
                sim.step();
            }
        }
        sim.run();
        let live_state = sim.state();
        let live: HashMap<Tid, Outcome> = sim.take_replies().into_iter().map(|r| (r.tid, r.outcome)).collect();
        let snaps = merge(&sim.take_snapshots(), shards);
        assert!(snaps.len() >= 3, "seed {seed}: only {} snapshots", snaps.len());
        let logs = sim.logs();
        // Recover from every complete snapshot in turn.
        for (epoch, per_shard) in &snaps {
            let mut rec = Sim::new(app.clone(), config.clone(), shards, seed + 100);
            for (i, (entities, meta)) in per_shard.iter().enumerate() {
                let shard = rec.shard_mut(i as u16);
                for ((op, k), v) in entities {
                    shard.load_snapshot_entity(*op, k, v.clone());
                }
                assert_eq!(shard.restore(meta).unwrap(), *epoch);
            }
            let later: Vec<_> = logs.iter().filter(|b| b.epoch > *epoch).cloned().collect();
            let replayed_txns: usize = later.iter().map(|b| b.transactions().count()).sum();
            rec.replay(later);
            rec.run();
            assert!(
                rec.take_replies().is_empty(),
                "seed {seed}: recovery answered a request nobody sent"
            );
            let replayed = rec.take_replayed();
            assert_eq!(
                replayed.len(),
                replayed_txns,
                "seed {seed}: one outcome per replayed transaction"
            );
            for r in replayed {
                let logged_in = logs
                    .iter()
                    .find(|b| b.transactions().any(|(t, _)| *t == r.tid))
                    .map(|b| b.epoch);
                assert_eq!(
                    live.get(&r.tid),
                    Some(&r.outcome),
                    "seed {seed}: reply of {} (logged in epoch {logged_in:?}) after recovery from epoch {epoch}",
                    r.tid
                );
            }
            assert!(
                rec.state() == live_state,
                "seed {seed}: state differs after recovery from epoch {epoch}"
            );
        }
    });
}
