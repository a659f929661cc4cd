//! Phase 2: the fallback transactions re-run under tid-ordered locks.
//!
//! Every lock queue was built at the decision, from the entities each
//! fallback transaction touched in phase 1 (and, for a partition it
//! scanned, every fallback transaction that wrote into that partition). An
//! invocation runs once its transaction heads its entity's queue (and its
//! partition's, when that one is queued); otherwise it parks on the queue
//! until a `Finish` releases it. An invocation of an entity outside its
//! transaction's recorded set drifts: it fails at once, and the
//! transaction is discarded here and re-run in phase 3.
//!
//! Invariants: a transaction waits only for smaller tids, so there is no
//! deadlock; the coordinator sends `Finish` to every participant of both
//! executions, after the root replied, so a participant applies or discards
//! a transaction only once none of its invocations runs; `Done2` is sent
//! after every `Finish` of the sender (same links, FIFO), so with every
//! `Done2` in, phase 2 is over everywhere. An epoch in which no
//! transaction falls back on any shard skips this phase and its barrier
//! (see `phase1`'s decision).

use super::txn::Status;
use super::{Shard, Stage};
use crate::abort::Abort;
use crate::config::Outcome;
use crate::ctx::NO_INDEX;
use crate::ids::{Address, ShardId, ShardSet, Tid};
use crate::message::{Invoke, Message, Phase, Reply};

/// Phase 2's parked invocations and its `Done2` barrier.
pub(super) struct Fallback {
    /// Invocations waiting for a lock; a queue's `waiting` holds indices
    /// here. Emptied at the end of the epoch.
    pub(super) parked: Vec<Option<Invoke>>,
    /// `Done2`s heard this epoch.
    pub(super) done2: usize,
}

impl Fallback {
    pub(super) fn new() -> Fallback {
        Fallback {
            parked: Vec::new(),
            done2: 0,
        }
    }
}

impl Shard {
    /// Runs a phase-2 invocation if its transaction holds the entity (and
    /// the partition, when it is queued there), parks it otherwise, and
    /// fails it as drift when the entity is outside its recorded set.
    pub(super) fn admit_fallback(&mut self, inv: Invoke) {
        enum Admit {
            Run { slot: u32, access: u32 },
            Park(u32),
            Drift,
        }
        let admit = {
            let mut guard = self.exec.st.borrow_mut();
            let st = &mut *guard;
            let partition = inv.partition;
            let op = inv.function.op;
            let pseudo = st.store.partition(op, partition).pseudo;
            let slot = match &inv.address {
                Address::Entity(key) => st.store.find(op, partition, key, inv.hash),
                Address::Partition(_) => Some(pseudo),
            };
            let txn = st.tables.txn(inv.tid);
            let ordinal = slot.and_then(|s| st.tables.touched_ordinal(&st.store, s));
            match (slot, txn, ordinal) {
                (Some(slot), Some(txn), Some(ordinal)) => {
                    let q = st.tables.touched[ordinal as usize].queue;
                    if q == NO_INDEX || !st.tables.in_queue(q, inv.tid) {
                        Admit::Drift
                    } else {
                        let pq = match (&inv.address, st.tables.touched_ordinal(&st.store, pseudo)) {
                            (Address::Entity(_), Some(p)) => {
                                let pq = st.tables.touched[p as usize].queue;
                                (pq != NO_INDEX && st.tables.in_queue(pq, inv.tid)).then_some(pq)
                            }
                            _ => None,
                        };
                        if !st.tables.holds(q, inv.tid) {
                            Admit::Park(q)
                        } else if let Some(pq) = pq.filter(|pq| !st.tables.holds(*pq, inv.tid)) {
                            Admit::Park(pq)
                        } else {
                            let access = st.tables.access(Phase::Fallback, txn, ordinal, pseudo);
                            Admit::Run { slot, access }
                        }
                    }
                }
                _ => Admit::Drift,
            }
        };
        match admit {
            Admit::Run { slot, access } => self.start_task(inv, slot, access),
            Admit::Park(q) => {
                let index = self.fallback.parked.len() as u32;
                self.fallback.parked.push(Some(inv));
                self.exec.st.borrow_mut().tables.queues[q as usize].waiting.push(index);
            }
            Admit::Drift => {
                let reply = Reply {
                    parent: inv.parent,
                    result: Err(Abort::drift()),
                    tree_abort: Some(Abort::drift()),
                    participants: ShardSet::one(self.exec.id),
                };
                self.send_reply(reply);
            }
        }
    }

    /// The phase-2 re-execution of transaction `index` finished: record its
    /// outcome (or its drift) and tell every participant to apply or
    /// discard its writes.
    pub(super) fn root_done2(&mut self, index: u32, reply: Reply) {
        let epoch = self.m.epoch;
        let c = &mut self.m.coords[index as usize];
        let participants = c.participants.union(reply.participants);
        let tid = c.tid;
        let commit = match reply.tree_abort {
            Some(a) if a.is_drift() => {
                c.status = Status::Serial;
                self.m.stats.serialized += 1;
                false
            }
            Some(a) => {
                c.status = Status::Finished(Outcome::Aborted(a));
                self.m.stats.aborted += 1;
                if let Some(r) = &mut self.m.record {
                    r.fallback.push(tid);
                }
                false
            }
            None => {
                let value = reply.result.expect("no abort, so a result");
                c.status = Status::Finished(Outcome::Committed(value));
                self.m.stats.committed += 1;
                if let Some(r) = &mut self.m.record {
                    r.fallback.push(tid);
                }
                true
            }
        };
        {
            let mut st = self.exec.st.borrow_mut();
            for to in participants.iter() {
                self.exec.route(
                    &mut st,
                    to,
                    Message::Finish {
                        epoch,
                        tid,
                        commit,
                        serial: false,
                    },
                );
            }
        }
        self.m.running -= 1;
        if self.m.running == 0 {
            self.send_done2();
        }
    }

    /// A transaction finished (phase 2, or phase 3 with `serial`): apply or
    /// discard its writes here; in phase 2, release its locks and run the
    /// parked invocations of the new holders.
    pub(super) fn on_finish(&mut self, tid: Tid, commit: bool, serial: bool) {
        if serial {
            self.finish_serial(tid, commit);
            return;
        }
        let wake: Vec<u32> = {
            let mut guard = self.exec.st.borrow_mut();
            let st = &mut *guard;
            let Some(txn) = st.tables.txn(tid) else {
                return;
            };
            if commit {
                st.tables.apply(&mut st.store, Phase::Fallback, txn);
            }
            st.tables.txns[txn as usize].finished = true;
            let mut wake = Vec::new();
            for q in st.tables.queues_of(&st.store, txn) {
                // Advance the head past finished holders.
                let _ = st.tables.holds(q, Tid::MAX);
                let queue = &mut st.tables.queues[q as usize];
                if let Some(&holder) = queue.tids.get(queue.head) {
                    let parked = &self.fallback.parked;
                    let mut keep = Vec::new();
                    for p in queue.waiting.drain(..) {
                        let inv = parked[p as usize].as_ref().expect("parked invocation");
                        if inv.tid == holder {
                            wake.push(p);
                        } else {
                            keep.push(p);
                        }
                    }
                    queue.waiting = keep;
                }
            }
            wake
        };
        for p in wake {
            let inv = self.fallback.parked[p as usize].take().expect("parked invocation");
            self.admit_fallback(inv);
        }
    }

    pub(super) fn send_done2(&mut self) {
        assert_eq!(self.m.stage, Stage::Exec2);
        self.m.stage = Stage::Wait2;
        let drifted: Vec<(Tid, ShardId)> = self
            .m
            .coords
            .iter()
            .filter(|c| matches!(c.status, Status::Serial))
            .map(|c| (c.tid, self.exec.id))
            .collect();
        self.exec.broadcast(Message::Done2 {
            epoch: self.m.epoch,
            drifted,
        });
    }

    pub(super) fn on_done2(&mut self, drifted: Vec<(Tid, ShardId)>) {
        self.fallback.done2 += 1;
        self.serial.queue.extend(drifted);
        if self.fallback.done2 == self.exec.n_shards as usize {
            assert_eq!(self.m.stage, Stage::Wait2);
            if self.serial.queue.is_empty() {
                self.end_epoch();
            } else {
                self.begin_serial();
            }
        }
    }
}
