//! Shared by the workload simulation tests: a driver that loads a
//! workload into the simulator and submits requests in bursts between
//! simulation steps, and the serial-oracle check (copied from the engine's
//! tests: a run must equal serial execution in the engine's order).

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use styx_engine::rng::Rng;
use styx_engine::sim::{Sim, test_config};
use styx_engine::{
    App, Batch, CallLimits, EpochRecord, Key, OpId, Outcome, Reply, Request, Serial, Tid, Value, serial_order,
};

/// The whole state of a run.
pub type State = BTreeMap<(OpId, Key), Value>;

/// The state a list of loaded entities makes.
pub fn state_of(initial: &[(OpId, Key, Value)]) -> State {
    initial.iter().map(|(op, k, v)| ((*op, k.clone()), v.clone())).collect()
}

/// A finished simulated run.
pub struct Run {
    pub sim: Sim,
    pub limits: CallLimits,
    /// The outcome of request `i` (its token) at index `i`.
    pub outcomes: Vec<Outcome>,
    pub replies: Vec<Reply>,
    pub state: State,
}

/// Loads `initial` into a simulator of `shards` shards, submits `requests`
/// in bursts of up to `burst_max` to random shards with random numbers of
/// steps in between, runs to the end, and requires exactly one reply per
/// request.
pub fn simulate(
    app: &Arc<App>,
    initial: &[(OpId, Key, Value)],
    requests: &[Request],
    shards: u16,
    seed: u64,
    epoch_txns_max: usize,
    burst_max: u64,
) -> Run {
    let mut config = test_config(epoch_txns_max);
    // Let bursts gather into one epoch, so that transactions contend.
    config.epoch_gather_us = 200;
    let limits = config.limits;
    let mut sim = Sim::new(app.clone(), config, shards, seed);
    for (op, k, v) in initial {
        sim.load(*op, k, Some(v.clone()));
    }
    let mut rng = Rng::new(seed ^ 0x5eed);
    let mut next = 0;
    while next < requests.len() {
        let burst = (1 + rng.below(burst_max)) as usize;
        for _ in 0..burst.min(requests.len() - next) {
            let shard = rng.below(u64::from(shards)) as u16;
            sim.submit(shard, next as u64, requests[next].clone())
                .unwrap_or_else(|e| panic!("request {next} refused: {e:?}"));
            next += 1;
        }
        for _ in 0..rng.below(300) {
            sim.step();
        }
    }
    sim.run();
    let replies = sim.take_replies();
    let mut outcomes: Vec<Option<Outcome>> = vec![None; requests.len()];
    for r in &replies {
        let slot = &mut outcomes[r.token as usize];
        assert!(slot.is_none(), "request {} answered twice (seed {seed})", r.token);
        *slot = Some(r.outcome.clone());
    }
    let outcomes: Vec<Outcome> = outcomes
        .into_iter()
        .enumerate()
        .map(|(i, o)| o.unwrap_or_else(|| panic!("request {i} never answered (seed {seed})")))
        .collect();
    let state = sim.state();
    Run {
        sim,
        limits,
        outcomes,
        replies,
        state,
    }
}

impl Run {
    /// Requires the run to equal serial execution in the engine's order.
    pub fn check_serial(&mut self, app: &Arc<App>, initial: &[(OpId, Key, Value)]) -> Checked {
        let history = self.sim.take_history();
        check_serial(
            app,
            self.limits,
            initial,
            &self.sim.logs(),
            &history,
            &self.replies,
            &self.state,
        )
    }
}

// ---------------------------------------------------------------------------
// The serial oracle, as in engine/tests/common/mod.rs.

/// What a checked run did.
#[derive(Debug, Default)]
pub struct Checked {
    pub committed: usize,
    pub aborted: usize,
    pub epochs: usize,
}

/// Checks a simulated run against serial execution: replays every epoch's
/// transactions in the engine's serial order on a fresh serial executor
/// loaded with `initial`, and requires the same reply for every transaction
/// and the same final state.
pub fn check_serial(
    app: &Arc<App>,
    limits: CallLimits,
    initial: &[(OpId, Key, Value)],
    logs: &[Batch],
    history: &[EpochRecord],
    replies: &[Reply],
    final_state: &BTreeMap<(OpId, Key), Value>,
) -> Checked {
    let mut serial = Serial::new(app.clone(), limits);
    for (op, k, v) in initial {
        serial.load(*op, k.clone(), Some(v.clone()));
    }
    let mut requests: HashMap<Tid, (u64, Request)> = HashMap::new();
    for b in logs {
        for (tid, r) in &b.txns {
            assert!(
                requests.insert(*tid, (b.now_us, r.clone())).is_none(),
                "tid {tid} logged twice"
            );
        }
    }
    let mut by_tid: HashMap<Tid, &Outcome> = HashMap::new();
    for r in replies {
        assert!(
            by_tid.insert(r.tid, &r.outcome).is_none(),
            "tid {} replied twice",
            r.tid
        );
        if let Outcome::Aborted(a) = &r.outcome {
            assert_ne!(
                a.kind(),
                styx_engine::AbortKind::Drift,
                "a concurrency abort reached a client"
            );
        }
    }
    let mut epochs: BTreeMap<u64, Vec<&EpochRecord>> = BTreeMap::new();
    for r in history {
        epochs.entry(r.epoch).or_default().push(r);
    }
    let mut checked = Checked::default();
    let mut seen = std::collections::HashSet::new();
    for (epoch, records) in &epochs {
        checked.epochs += 1;
        for tid in serial_order(records.iter().copied()) {
            assert!(seen.insert(tid), "tid {tid} ordered twice");
            let (now, request) = &requests[&tid];
            let expected = serial.execute(tid, *now, request);
            let got = by_tid.get(&tid).unwrap_or_else(|| panic!("no reply for tid {tid}"));
            assert_eq!(
                **got, expected,
                "reply of tid {tid} in epoch {epoch} differs from serial execution"
            );
            match expected {
                Outcome::Committed(_) => checked.committed += 1,
                Outcome::Aborted(_) => checked.aborted += 1,
            }
        }
    }
    assert_eq!(seen.len(), requests.len(), "some logged transactions never finished");
    assert_eq!(by_tid.len(), requests.len(), "replies for unlogged transactions");
    let expected = serial.snapshot();
    if expected != *final_state {
        let mut diffs = Vec::new();
        for (k, v) in &expected {
            if final_state.get(k) != Some(v) {
                diffs.push(format!("{k:?}: serial {v:?}, engine {:?}", final_state.get(k)));
            }
        }
        for (k, v) in final_state {
            if !expected.contains_key(k) {
                diffs.push(format!("{k:?}: serial none, engine {v:?}"));
            }
        }
        panic!("final state differs from serial execution:\n{}", diffs.join("\n"));
    }
    checked
}
