//! The end of phase 1: the `Done1` and `Flags` barriers, and the decision.
//!
//! When its roots are all done a shard broadcasts `Done1` with the tids it
//! coordinates that aborted by their own logic. With every `Done1` in, the
//! logic-aborted set is complete, so each shard computes reservations and
//! its share of the conflict flags for the entities it owns, and broadcasts
//! them. With every `Flags` in, each shard ORs them and applies the commit
//! rule: phase-1 winners commit, the rest fall back to phase 2, whose lock
//! queues are built here, before any phase-2 invocation arrives.
//!
//! Invariants: flags are ORed across shards *before* the rule is applied
//! (per-shard verdicts ORed would commit a transaction with RAW on one
//! shard and WAR on another); every shard decides on the same merged flags,
//! so every shard reaches the same verdict for every transaction without a
//! coordinator. The smallest tid not aborted by its logic always commits
//! here (no smaller tid reserves against it), which guarantees progress.

use super::txn::Status;
use super::{Shard, Stage};
use crate::config::Outcome;
use crate::ids::Tid;
use crate::message::{Message, Phase, Reply, flags};
use crate::partition_map::Move;
use crate::store::{TidMap, new_tid_map};

/// Phase 1's barriers, and what they gather for the decision.
pub(super) struct Check {
    /// `Done1`s heard this epoch.
    pub(super) done1: usize,
    /// `Flags` heard this epoch.
    pub(super) flags_in: usize,
    /// Every shard's logic-aborted tids.
    pub(super) aborted: Vec<Tid>,
    /// Every shard's flags, ORed by tid (emptied by the decision).
    pub(super) merged: TidMap<u8>,
    /// The largest sequencer counter any shard reported: the next epoch's
    /// tids of every shard exceed this epoch's.
    pub(super) lc_max: u64,
}

impl Check {
    pub(super) fn new() -> Check {
        Check {
            done1: 0,
            flags_in: 0,
            aborted: Vec::new(),
            merged: new_tid_map(),
            lc_max: 0,
        }
    }
}

impl Shard {
    /// Phase 1 of transaction `index` finished.
    pub(super) fn root_done1(&mut self, index: u32, reply: Reply) {
        let c = &mut self.m.coords[index as usize];
        c.participants = reply.participants;
        c.status = Status::Ran {
            result: reply.result,
            abort: reply.tree_abort,
        };
        assert!(
            !matches!(&c.status, Status::Ran { abort: Some(a), .. } if a.is_drift()),
            "drift in phase 1"
        );
        self.m.running -= 1;
        if self.m.running == 0 {
            self.send_done1();
        }
    }

    pub(super) fn send_done1(&mut self) {
        assert_eq!(self.m.stage, Stage::Exec1);
        self.m.stage = Stage::Wait1;
        let aborted: Vec<Tid> = self
            .m
            .coords
            .iter()
            .filter_map(|c| match &c.status {
                Status::Ran { abort: Some(_), .. } => Some(c.tid),
                _ => None,
            })
            .collect();
        let switches = self.copies_sent();
        self.exec.broadcast(Message::Done1 {
            epoch: self.m.epoch,
            lc: self.seq.lc,
            aborted,
            moves: std::mem::take(&mut self.moves.sealed),
            switches,
            handovers: std::mem::take(&mut self.moves.handovers_sealed),
        });
    }

    pub(super) fn on_done1(
        &mut self,
        lc: u64,
        aborted: Vec<Tid>,
        moves: Vec<(Tid, Move)>,
        switches: Vec<(crate::OpId, u32)>,
        handovers: Vec<(Tid, crate::layout::Handover)>,
    ) {
        self.check.done1 += 1;
        self.check.lc_max = self.check.lc_max.max(lc);
        self.check.aborted.extend(aborted);
        for (tid, m) in moves {
            // Its coordinator checked it: a bad one is a broken peer.
            let m = m
                .check(&self.exec.app, self.exec.n_shards)
                .unwrap_or_else(|e| panic!("move of tid {tid} from a peer: {e}"));
            self.moves.decided.push((tid, m));
        }
        self.moves.switches.extend(switches);
        for (tid, h) in handovers {
            let h = h
                .check(self.exec.n_shards, self.layout.nodes())
                .unwrap_or_else(|e| panic!("handover of tid {tid} from a peer: {e}"));
            self.moves.handovers_decided.push((tid, h));
        }
        self.check_done1();
    }

    fn check_done1(&mut self) {
        if self.m.stage != Stage::Wait1 || self.check.done1 < self.exec.n_shards as usize {
            return;
        }
        let flags = {
            let mut guard = self.exec.st.borrow_mut();
            let st = &mut *guard;
            for tid in &self.check.aborted {
                if let Some(t) = st.tables.txn(*tid) {
                    st.tables.txns[t as usize].aborted = true;
                }
            }
            st.tables.conflict_flags(&st.store)
        };
        self.m.stage = Stage::Check;
        // By the epoch's logged time and the logged interval, in replay too
        // (where the snapshot is not taken but counted): the vote holds
        // queued moves, so it must fall at the same epochs live and in
        // replay.
        let interval_us = self.snap.interval_us.unwrap_or(self.config.snapshot_interval_us);
        let snapshot = snapshot_due(self.m.epoch_now_us, self.snap.last_us, interval_us);
        self.exec.broadcast(Message::Flags {
            epoch: self.m.epoch,
            flags,
            snapshot,
        });
    }

    pub(super) fn on_flags(&mut self, flags: Vec<(Tid, u8)>, snapshot: bool) {
        for (tid, f) in flags {
            *self.check.merged.entry(tid).or_insert(0) |= f;
        }
        self.snap.vote |= snapshot;
        self.check.flags_in += 1;
        if self.check.flags_in == self.exec.n_shards as usize {
            assert_eq!(self.m.stage, Stage::Check);
            self.decide();
        }
    }

    /// Whether any transaction of the epoch, on any shard, falls back to
    /// phase 2: one whose merged flags fail the rule and that did not abort
    /// by its own logic. Every shard holds the same merged flags and the
    /// same aborted set (every `Done1`'s), so every shard answers alike.
    fn any_fallback(&mut self) -> bool {
        let aborted = &mut self.check.aborted;
        let mut sorted = false;
        for (tid, f) in self.check.merged.iter() {
            if flags::commits(*f) {
                continue;
            }
            if !sorted {
                aborted.sort_unstable();
                sorted = true;
            }
            if aborted.binary_search(tid).is_err() {
                return true;
            }
        }
        false
    }

    /// All flags are in: commit phase-1 winners, queue the rest. When no
    /// transaction falls back anywhere (and no partition moves, whose
    /// deltas are ordered after `Done2`), every shard knows it from the
    /// same flags and ends the epoch here: phase 2 and its `Done2` barrier
    /// would do nothing but make every shard wait for the slowest one once
    /// more (no phase 2 means no drifted transactions, so no phase 3).
    fn decide(&mut self) {
        let skip_phase2 = !self.any_fallback() && self.moves.decided.is_empty() && !self.exec.map.borrow().is_moving();
        let mut merged = std::mem::take(&mut self.check.merged);
        let verdict = |tid: Tid| flags::commits(merged.get(&tid).copied().unwrap_or(0));
        {
            let mut guard = self.exec.st.borrow_mut();
            let st = &mut *guard;
            for t in 0..st.tables.txns.len() {
                let txn = &mut st.tables.txns[t];
                if txn.aborted {
                    continue;
                }
                if verdict(txn.tid) {
                    txn.committed = true;
                }
            }
            if let Some(record) = &mut self.m.record {
                record.edges = crate::history::phase1_edges(&st.tables, &st.store);
            }
            for t in 0..st.tables.txns.len() {
                if st.tables.txns[t].committed {
                    st.tables.apply(&mut st.store, Phase::Optimistic, t as u32);
                }
            }
            st.tables.build_queues(&st.store, |t| !t.aborted && !t.committed);
            st.phase = Phase::Fallback;
        }
        self.m.stage = Stage::Exec2;
        self.m.running = 0;
        let epoch = self.m.epoch;
        for index in 0..self.m.coords.len() {
            let c = &mut self.m.coords[index];
            let Status::Ran { result, abort } = std::mem::replace(&mut c.status, Status::Fallback) else {
                panic!("transaction {} not finished after phase 1", c.tid);
            };
            if let Some(abort) = abort {
                c.status = Status::Finished(Outcome::Aborted(abort));
                self.m.stats.aborted += 1;
                if let Some(r) = &mut self.m.record {
                    r.aborted1.push(c.tid);
                }
            } else if verdict(c.tid) {
                let value = result.expect("a transaction without abort has a result");
                c.status = Status::Finished(Outcome::Committed(value));
                self.m.stats.committed += 1;
                if let Some(r) = &mut self.m.record {
                    r.committed1.push(c.tid);
                }
            } else {
                self.m.stats.reexecuted += 1;
                self.m.running += 1;
                let c = &self.m.coords[index];
                self.dispatch_root(c, index as u32, epoch, Phase::Fallback, 0);
            }
        }
        // Keep the map's capacity for the next epoch.
        merged.clear();
        self.check.merged = merged;
        if skip_phase2 {
            assert_eq!(self.m.running, 0, "a transaction fell back in an epoch without phase 2");
            self.m.stats.without_phase2 += 1;
            self.end_epoch();
            return;
        }
        if self.m.running == 0 {
            self.send_done2();
        }
        self.redeliver();
    }
}

/// Whether a shard votes for a snapshot in an epoch logged at `now_us`,
/// the last one agreed at `last_us`: once `interval_us` has passed — or
/// the time went back (a restart on a clock behind the logged times: it
/// would otherwise not vote until the clock caught up, and the log would
/// grow meanwhile). An epoch logged at 0 is one a log lost, replayed
/// empty: it never votes. Every input is logged, so replay votes alike.
pub(super) fn snapshot_due(now_us: u64, last_us: u64, interval_us: u64) -> bool {
    interval_us > 0 && now_us != 0 && (now_us < last_us || now_us >= last_us.saturating_add(interval_us))
}
