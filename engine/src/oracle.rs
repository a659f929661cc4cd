//! The serial oracle: a run of the engine checked against serial execution.
//!
//! A run is correct when it equals running its logged transactions one
//! after another on [`Serial`], epoch by epoch, each epoch in the order the
//! engine reports ([`serial_order`] over the epoch's [`EpochRecord`]s):
//! every reply the same, the final state the same. The engine's tests, the
//! workload tests and the crash tests all check that; they share this
//! module so that the oracle is written once.
//!
//! [`Oracle`] is the building block (load a state, learn the log, run
//! epochs, read the state); [`check_run`] checks a whole simulated run.

use crate::abort::AbortKind;
use crate::app::App;
use crate::config::{Batch, Outcome, Reply, Request};
use crate::ctx::CallLimits;
use crate::history::{EpochRecord, serial_order};
use crate::ids::{Epoch, OpId, Tid};
use crate::key::Key;
use crate::serial::Serial;
use crate::value::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

/// A whole state, sorted: what [`crate::sim::Sim::state`] and
/// [`Serial::snapshot`] return.
pub type State = BTreeMap<(OpId, Key), Value>;

/// A logged transaction: its epoch, its batch's timestamp, its request.
pub type Logged = (Epoch, u64, Request);

/// Serial execution of logged transactions, epoch by epoch.
pub struct Oracle {
    serial: Serial,
    logged: HashMap<Tid, Logged>,
}

impl std::fmt::Debug for Oracle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Oracle").field("logged", &self.logged.len()).finish()
    }
}

impl Oracle {
    /// A serial executor of `app` holding `initial`.
    pub fn new(app: Arc<App>, limits: CallLimits, initial: impl IntoIterator<Item = (OpId, Key, Value)>) -> Oracle {
        let mut serial = Serial::new(app, limits);
        for (op, key, value) in initial {
            serial.load(op, key, Some(value));
        }
        Oracle {
            serial,
            logged: HashMap::new(),
        }
    }

    /// A serial executor holding `state`.
    pub fn from_state(app: Arc<App>, limits: CallLimits, state: &State) -> Oracle {
        Oracle::new(
            app,
            limits,
            state.iter().map(|((op, key), value)| (*op, key.clone(), value.clone())),
        )
    }

    /// Learns the transactions of logged batches (a shard's logged
    /// snapshot interval, `crate::interval`, is none).
    ///
    /// # Panics
    /// If a tid is logged twice.
    pub fn log<'a>(&mut self, batches: impl IntoIterator<Item = &'a Batch>) {
        for b in batches {
            for (tid, request) in b.transactions() {
                let twice = self.logged.insert(*tid, (b.epoch, b.now_us, request.clone()));
                assert!(twice.is_none(), "tid {tid} logged twice");
            }
        }
    }

    /// Every transaction learnt from the log.
    pub fn logged(&self) -> &HashMap<Tid, Logged> {
        &self.logged
    }

    /// Runs the transactions of `epoch` (the records of every shard) in the
    /// engine's serial order; returns each tid with its outcome, in order.
    ///
    /// # Panics
    /// If a transaction was not logged, or was logged in another epoch.
    pub fn run_epoch<'a>(
        &self,
        epoch: Epoch,
        records: impl IntoIterator<Item = &'a EpochRecord>,
    ) -> Vec<(Tid, Outcome)> {
        serial_order(records)
            .into_iter()
            .map(|tid| {
                let (logged_in, now_us, request) = self
                    .logged
                    .get(&tid)
                    .unwrap_or_else(|| panic!("tid {tid} ran in epoch {epoch} but was not logged"));
                assert_eq!(*logged_in, epoch, "tid {tid} ran outside its epoch");
                (tid, self.serial.execute(tid, *now_us, request))
            })
            .collect()
    }

    /// The state now.
    pub fn state(&self) -> State {
        self.serial.snapshot()
    }
}

/// Groups epoch records by epoch.
pub fn by_epoch<'a>(history: impl IntoIterator<Item = &'a EpochRecord>) -> BTreeMap<Epoch, Vec<&'a EpochRecord>> {
    let mut epochs: BTreeMap<Epoch, Vec<&EpochRecord>> = BTreeMap::new();
    for r in history {
        epochs.entry(r.epoch).or_default().push(r);
    }
    epochs
}

/// What a checked run did.
#[derive(Debug, Default)]
pub struct Checked {
    pub committed: usize,
    pub aborted: usize,
    pub epochs: usize,
}

/// Checks a simulated run against serial execution: replays every epoch's
/// transactions in the engine's serial order on a fresh serial executor
/// loaded with `initial`, and requires the same reply for every
/// transaction, one reply per logged transaction and no other, no
/// concurrency abort reaching a client, and the same final state.
///
/// # Panics
/// On the first difference, naming it.
pub fn check_run(
    app: &Arc<App>,
    limits: CallLimits,
    initial: &[(OpId, Key, Value)],
    logs: &[Batch],
    history: &[EpochRecord],
    replies: &[Reply],
    final_state: &State,
) -> Checked {
    let mut oracle = Oracle::new(app.clone(), limits, initial.iter().cloned());
    oracle.log(logs);
    let mut by_tid: HashMap<Tid, &Outcome> = HashMap::new();
    for r in replies {
        assert!(
            by_tid.insert(r.tid, &r.outcome).is_none(),
            "tid {} replied twice",
            r.tid
        );
        if let Outcome::Aborted(a) = &r.outcome {
            assert_ne!(a.kind(), AbortKind::Drift, "a concurrency abort reached a client");
        }
    }
    let mut checked = Checked::default();
    let mut seen = HashSet::new();
    for (epoch, records) in by_epoch(history) {
        checked.epochs += 1;
        for (tid, expected) in oracle.run_epoch(epoch, records) {
            assert!(seen.insert(tid), "tid {tid} ordered twice");
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
    assert_eq!(
        seen.len(),
        oracle.logged().len(),
        "some logged transactions never finished"
    );
    assert_eq!(by_tid.len(), oracle.logged().len(), "replies for unlogged transactions");
    let expected = oracle.state();
    if expected != *final_state {
        panic!(
            "final state differs from serial execution (expected: serial):\n{}",
            state_diff(&expected, final_state)
        );
    }
    checked
}

/// The entities where two states differ, one line each.
pub fn state_diff(expected: &State, got: &State) -> String {
    expected
        .keys()
        .chain(got.keys())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .filter(|key| expected.get(key) != got.get(key))
        .map(|key| format!("{key:?}: expected {:?}, got {:?}", expected.get(key), got.get(key)))
        .collect::<Vec<_>>()
        .join("\n")
}
