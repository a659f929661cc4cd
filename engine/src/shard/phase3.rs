//! Phase 3: the drifted transactions re-run serially, in tid order.
//!
//! A phase-2 re-execution that touched an entity outside its recorded set
//! is discarded; every `Done2` lists its sender's drifted tids, so with all
//! of them in every shard holds the same queue. Its transactions run one at
//! a time, with no locks (nothing else runs, so nothing can drift): the
//! coordinator of the current one starts it, and when its root replies
//! sends `Finish` to its participants and `Next` to every shard.
//!
//! Invariants: the queue is sorted by tid and identical on every shard;
//! `index` only moves forward, by one, on `Next`; an invocation of step `i`
//! runs only once `index == i` (the inbox defers it until then); each
//! participant applies a transaction's writes before it hears the `Next`
//! after it (same link, FIFO), so the next transaction sees them.
//!
//! Why not reschedule drifted transactions to the next epoch (the protocol
//! note): a TPC-C NewOrder's keys come from the district counter it reads,
//! so all but one NewOrder of a district drifted every epoch.

use super::txn::Status;
use super::{Shard, Stage};
use crate::config::Outcome;
use crate::ids::{ShardId, Tid};
use crate::message::{Message, Phase, Reply};

/// Phase 3's queue: every shard's drifted transactions, with coordinators.
pub(super) struct SerialRun {
    /// In tid order once phase 3 begins.
    pub(super) queue: Vec<(Tid, ShardId)>,
    /// The queue position allowed to run.
    pub(super) index: u32,
}

impl SerialRun {
    pub(super) fn new() -> SerialRun {
        SerialRun {
            queue: Vec::new(),
            index: 0,
        }
    }
}

impl Shard {
    /// Phase 3: every shard sorts the same drifted transactions by tid; the
    /// coordinator of the first runs it. There are no locks: one
    /// transaction runs at a time, so nothing can drift.
    pub(super) fn begin_serial(&mut self) {
        self.serial.queue.sort_unstable();
        self.m.stage = Stage::Exec3;
        self.serial.index = 0;
        {
            let mut st = self.exec.st.borrow_mut();
            st.phase = Phase::Serial;
            st.step = 0;
        }
        self.run_serial();
        self.redeliver();
    }

    /// Starts the queue's current transaction if this shard coordinates it.
    fn run_serial(&mut self) {
        let i = self.serial.index as usize;
        let Some(&(tid, coordinator)) = self.serial.queue.get(i) else {
            return;
        };
        if coordinator != self.exec.id {
            return;
        }
        let index = self
            .m
            .coords
            .iter()
            .position(|c| c.tid == tid)
            .expect("coordinated here");
        let c = &mut self.m.coords[index];
        assert!(matches!(c.status, Status::Serial), "{tid} is not waiting for phase 3");
        c.status = Status::SerialRunning;
        let c = &self.m.coords[index];
        self.dispatch_root(c, index as u32, self.m.epoch, Phase::Serial, i as u32);
    }

    pub(super) fn on_next(&mut self, index: u32) {
        assert_eq!(index, self.serial.index + 1, "phase-3 steps arrive in order");
        self.serial.index = index;
        self.exec.st.borrow_mut().step = index;
        if index as usize == self.serial.queue.len() {
            self.end_epoch();
        } else {
            self.run_serial();
            self.redeliver();
        }
    }

    /// The serial run of transaction `index` finished: record its outcome,
    /// have its participants apply or discard it, and pass the turn on.
    pub(super) fn root_done3(&mut self, index: u32, reply: Reply) {
        let epoch = self.m.epoch;
        let c = &mut self.m.coords[index as usize];
        assert!(
            reply.tree_abort.as_ref().is_none_or(|a| !a.is_drift()),
            "drift in phase 3"
        );
        let tid = c.tid;
        let commit = match reply.tree_abort {
            Some(a) => {
                c.status = Status::Finished(Outcome::Aborted(a));
                self.m.stats.aborted += 1;
                false
            }
            None => {
                let value = reply.result.expect("no abort, so a result");
                c.status = Status::Finished(Outcome::Committed(value));
                self.m.stats.committed += 1;
                true
            }
        };
        if let Some(r) = &mut self.m.record {
            r.serial.push(tid);
        }
        // Each participant applies the writes before it hears `Next`
        // (same links, FIFO), so the next transaction sees them.
        let next = self.serial.index + 1;
        let mut st = self.exec.st.borrow_mut();
        for to in reply.participants.iter() {
            self.exec.route(
                &mut st,
                to,
                Message::Finish {
                    epoch,
                    tid,
                    commit,
                    serial: true,
                },
            );
        }
        for to in 0..self.exec.n_shards {
            self.exec.route(&mut st, to, Message::Next { epoch, index: next });
        }
    }

    /// A phase-3 transaction finished: apply its writes here if it commits.
    pub(super) fn finish_serial(&mut self, tid: Tid, commit: bool) {
        let mut guard = self.exec.st.borrow_mut();
        let st = &mut *guard;
        let txn = st.tables.txn(tid).expect("a phase-3 participant ran the transaction");
        if commit {
            st.tables.apply(&mut st.store, Phase::Serial, txn);
        }
    }
}
