//! An epoch's life on this shard: when it starts, what it seals, how it
//! ends; how large the next one is; recovery's replay of logged epochs.
//!
//! Live, an epoch starts once requests are pending and either the gather
//! time passed or the cap is reached; it seals up to `epoch_cap` of them,
//! numbering each `lc * n + sid` (distinct across shards, increasing per
//! shard), and hands the sealed batch to the log. Replaying, it runs the
//! logged batch of the epoch instead (or nothing, for an epoch this shard's
//! log lost), so the same tids run the same requests again.
//!
//! Invariants: one epoch at a time, and no task outlives it; epochs are
//! numbered consecutively on every shard; every coordinated transaction is
//! `Finished` at the end. A shard with requests waiting starts the next
//! epoch at once; one without waits to hear of it from a peer, or for its
//! own requests (started at once with nothing sealed, it would leave out
//! the requests its clients send on the replies just released: closed-loop
//! clients then split into two cohorts that alternate epochs, each half
//! the size — YCSB-T at 1M accounts on 2 shards ran 1.4× slower so).
//!
//! The epoch's end is where the other jobs meet (outcomes into the client
//! table, reclaiming deleted entities, holding replies, the snapshot vote),
//! so it lives here and calls into them in a fixed order: that order is
//! part of the deterministic state.

use super::release::{Release, ReplyTo};
use super::txn::{Coordinated, Status};
use super::{Shard, Stage};
use crate::config::{Batch, Durability, Outcome, Request};
use crate::history::EpochRecord;
use crate::ids::Epoch;
use crate::ids::{ShardSet, Tid};
use crate::interval::SnapshotInterval;
use crate::message::Phase;
use crate::partition_map::Move;
use std::collections::VecDeque;

/// What feeds epochs: live requests or logged batches.
pub(super) struct Sequencer {
    /// The sequencer counter: tids of this shard are `lc * n + sid`.
    pub(super) lc: u64,
    pub(super) last_start_us: u64,
    /// How many pending requests the next epoch seals (see
    /// `Config::epoch_txns_adaptive`).
    pub(super) epoch_cap: usize,
    /// `stats.reexecuted` when the current epoch started.
    pub(super) reexecuted_at_start: u64,
    pub(super) pending: VecDeque<(ReplyTo, Request)>,
    /// Logged batches still to run (recovery); `None` once live.
    pub(super) replay: Option<VecDeque<Batch>>,
}

impl Sequencer {
    pub(super) fn new(epoch_cap: usize) -> Sequencer {
        Sequencer {
            lc: 0,
            last_start_us: 0,
            epoch_cap,
            reexecuted_at_start: 0,
            pending: VecDeque::new(),
            replay: None,
        }
    }
}

impl Shard {
    /// Whether the shard is still replaying logged epochs (recovery): it
    /// takes no requests until it has caught up.
    pub fn is_replaying(&self) -> bool {
        self.seq.replay.is_some()
    }

    /// Requests waiting to be sequenced.
    pub fn pending(&self) -> usize {
        self.seq.pending.len()
    }

    /// How many pending requests the next epoch seals.
    pub fn epoch_size(&self) -> usize {
        self.seq.epoch_cap
    }

    /// Queues logged batches to run instead of live requests (recovery,
    /// replay tests). Batches must be for increasing epochs after the
    /// current one; an epoch without a batch for this shard runs empty here.
    pub fn replay(&mut self, batches: impl IntoIterator<Item = Batch>) {
        let queue = self.seq.replay.get_or_insert_with(VecDeque::new);
        for b in batches {
            assert_eq!(
                b.shard, self.exec.id,
                "batch of shard {} replayed on {}",
                b.shard, self.exec.id
            );
            assert!(queue.back().is_none_or(|last| last.epoch < b.epoch));
            assert!(b.epoch > self.m.epoch);
            queue.push_back(b);
        }
        if queue.is_empty() {
            self.end_replay();
        }
        self.maybe_start();
        self.run_local();
    }

    /// Recovery replayed every logged epoch: serve live from here on. Every
    /// shard replayed the same epochs from its log, so they are durable
    /// everywhere.
    fn end_replay(&mut self) {
        self.seq.replay = None;
        let epoch = self.m.epoch;
        self.gate.durable_local = self.gate.durable_local.max(epoch);
        for d in &mut self.gate.durable_peers {
            *d = (*d).max(epoch);
        }
        // A peer that had nothing to replay went live before us: tell it.
        self.announce_durable(epoch);
        for (to, request) in std::mem::take(&mut self.clients.submitted_in_replay) {
            if let Err(abort) = self.accept(to, request) {
                self.emit(Release {
                    to,
                    tid: 0,
                    outcome: Outcome::Aborted(abort),
                });
            }
        }
    }

    pub(super) fn can_start(&self) -> bool {
        if self.m.stage != Stage::Idle || self.moves.is_waiting() || self.departing.is_some() {
            return false;
        }
        match &self.seq.replay {
            Some(q) => !q.is_empty(),
            None => {
                // A move under way needs epochs to copy in, load or not;
                // a handover waiting for it, one to end after it.
                (!self.seq.pending.is_empty() || self.exec.map.borrow().is_moving() || !self.layout.queued().is_empty())
                    && (self.m.epoch == 0
                        || self.m.now_us >= self.seq.last_start_us.saturating_add(self.config.epoch_gather_us)
                        || self.seq.pending.len() >= self.seq.epoch_cap)
            }
        }
    }

    pub(super) fn maybe_start(&mut self) {
        if self.can_start() {
            self.start_epoch();
        }
    }

    pub(super) fn start_epoch(&mut self) {
        assert_eq!(self.m.stage, Stage::Idle);
        assert!(self.tasks.all_finished(), "tasks left over from the last epoch");
        let epoch = self.m.epoch + 1;
        self.m.epoch = epoch;
        self.m.stage = Stage::Exec1;
        self.seq.last_start_us = self.m.now_us;
        self.seq.reexecuted_at_start = self.m.stats.reexecuted;
        {
            let mut guard = self.exec.st.borrow_mut();
            let st = &mut *guard;
            st.tables.reset(&mut st.store);
            st.phase = Phase::Optimistic;
            st.epoch = epoch;
        }
        let n = u64::from(self.exec.n_shards);
        let sid = u64::from(self.exec.id) + 1;
        // Reuse last epoch's (drained) vector: it has the capacity.
        let mut coords = std::mem::take(&mut self.m.coords);
        assert!(coords.is_empty());
        let (now_us, sealed): (u64, Vec<(Tid, ReplyTo, Request)>) = match &mut self.seq.replay {
            Some(queue) => match queue.front() {
                Some(b) if b.epoch == epoch => {
                    let b = queue.pop_front().expect("front");
                    self.seq.lc = self.seq.lc.max(b.lc);
                    let mut txns = Vec::with_capacity(b.txns.len());
                    for (tid, r) in b.txns {
                        match SnapshotInterval::of(&r) {
                            // The live run's interval from this epoch on.
                            Some(i) => self.snap.interval_us = Some(i.expect("a logged interval was checked").0),
                            None => txns.push((tid, ReplyTo::Replayed, r)),
                        }
                    }
                    (b.now_us, txns)
                }
                // An epoch without a batch here runs empty, as one a log
                // lost: logged at 0, so it never votes for a snapshot (the
                // live clock would make the vote depend on when replay ran).
                _ => (0, Vec::new()),
            },
            None => {
                let take = self.seq.pending.len().min(self.seq.epoch_cap);
                // The interval this run votes by, first in its first logged
                // batch (`crate::interval`): not a transaction (nothing
                // runs or answers it), only logged, with a tid of its own.
                let mut interval = None;
                if self.config.durability == Durability::Log && !self.snap.interval_logged {
                    self.snap.interval_logged = true;
                    self.snap.interval_us = Some(self.config.snapshot_interval_us);
                    self.seq.lc += 1;
                    let request = SnapshotInterval(self.config.snapshot_interval_us).request();
                    interval = Some((self.seq.lc * n + sid, request));
                }
                let mut sealed = Vec::with_capacity(take);
                for (to, request) in self.seq.pending.drain(..take) {
                    self.seq.lc += 1;
                    sealed.push((self.seq.lc * n + sid, to, request));
                }
                if self.config.durability == Durability::Log {
                    let mut txns = Vec::with_capacity(sealed.len() + 1);
                    txns.extend(interval);
                    txns.extend(sealed.iter().map(|(tid, _, r)| (*tid, r.clone())));
                    self.outputs.log.push(Batch {
                        epoch,
                        shard: self.exec.id,
                        lc: self.seq.lc,
                        now_us: self.m.now_us,
                        txns,
                    });
                }
                (self.m.now_us, sealed)
            }
        };
        self.m.epoch_now_us = now_us;
        for (tid, reply_to, request) in sealed {
            coords.push(Coordinated {
                tid,
                reply_to,
                request,
                now_us,
                participants: ShardSet::EMPTY,
                status: Status::Running,
            });
        }
        if self.config.durability == Durability::None || self.seq.replay.is_some() {
            self.gate.durable_local = epoch;
        }
        if self.config.record_history {
            self.m.record = Some(EpochRecord {
                epoch,
                shard: self.exec.id,
                ..EpochRecord::default()
            });
        }
        self.m.running = coords.len();
        for (index, c) in coords.iter_mut().enumerate() {
            c.participants = ShardSet::EMPTY;
            // A move or handover was checked when submitted; it runs
            // nothing, and the decision commits it like a phase-1
            // transaction without accesses.
            let control = if let Some(m) = Move::of(&c.request) {
                self.seal_move(c.tid, m.expect("a sequenced move was checked"));
                true
            } else if let Some(h) = crate::layout::Handover::of(&c.request) {
                self.seal_handover(c.tid, h.expect("a sequenced handover was checked"));
                true
            } else {
                false
            };
            if control {
                c.status = Status::Ran {
                    result: Ok(Shard::move_result()),
                    abort: None,
                };
                self.m.running -= 1;
                continue;
            }
            c.status = Status::Running;
            self.dispatch_root(c, index as u32, epoch, Phase::Optimistic, 0);
        }
        self.m.coords = coords;
        if self.m.running == 0 {
            self.send_done1();
        }
        self.redeliver();
    }

    /// Sizes the next epoch by this one: `sealed` transactions of which
    /// `fallen_back` fell back to phase 2. Only the cut depends on it, and
    /// cuts are logged, so replay never needs it.
    fn adapt_epoch_size(&mut self, sealed: usize, fallen_back: u64) {
        use crate::config::{EPOCH_FALLBACK_HIGH_PCT, EPOCH_FALLBACK_LOW_PCT, EPOCH_TXNS_MIN};
        if !self.config.epoch_txns_adaptive || sealed == 0 {
            return;
        }
        let max = self.config.epoch_txns_max;
        let pct = fallen_back * 100 / sealed as u64;
        if pct > EPOCH_FALLBACK_HIGH_PCT {
            self.seq.epoch_cap = (sealed * 3 / 4).clamp(EPOCH_TXNS_MIN.min(max), max);
        } else if pct < EPOCH_FALLBACK_LOW_PCT && sealed >= self.seq.epoch_cap {
            self.seq.epoch_cap = (self.seq.epoch_cap + self.seq.epoch_cap / 4 + 1).min(max);
        }
    }

    pub(super) fn end_epoch(&mut self) {
        assert!(self.tasks.all_finished(), "tasks alive at the end of an epoch");
        let epoch = self.m.epoch;
        if self.seq.replay.is_none() {
            self.adapt_epoch_size(
                self.m.coords.len(),
                self.m.stats.reexecuted - self.seq.reexecuted_at_start,
            );
        }
        let mut replies = Vec::with_capacity(self.m.coords.len());
        let mut recorded: Vec<(Tid, crate::ClientSeq, Outcome)> = Vec::new();
        for c in self.m.coords.drain(..) {
            match c.status {
                Status::Finished(outcome) => {
                    if let Some(client) = c.request.client {
                        recorded.push((c.tid, client, outcome.clone()));
                    }
                    replies.push(Release {
                        to: c.reply_to,
                        tid: c.tid,
                        outcome,
                    });
                }
                _ => panic!("transaction {} unfinished at the end of epoch {epoch}", c.tid),
            }
        }
        self.clients.record(epoch, recorded, &mut replies);
        if let Some(record) = self.m.record.take() {
            self.outputs.history.push(record);
        }
        self.serial.queue.clear();
        self.serial.index = 0;
        if self.seq.replay.as_ref().is_some_and(VecDeque::is_empty) {
            self.end_replay();
        }
        {
            let mut guard = self.exec.st.borrow_mut();
            let st = &mut *guard;
            for t in &st.tables.touched {
                if let Some(key) = &t.key
                    && st.store.entries[t.slot as usize].value.is_none()
                {
                    st.store.reclaim(t.op, t.partition, key);
                }
            }
            for slot in self.snap.reclaim_later.drain(..) {
                st.store.reclaim_slot(slot);
            }
        }
        self.fallback.parked.clear();
        if !replies.is_empty() {
            self.gate.held.push_back((epoch, replies));
        }
        self.seq.lc = self.seq.lc.max(self.check.lc_max);
        let snapshot = std::mem::take(&mut self.snap.vote);
        // The map switches here, before the snapshot: a snapshot after this
        // epoch holds the new map and every entity where it says. None is
        // taken while a copy is under way (it is only in memory: see
        // `moves`); every shard holds the same map, so all skip alike, and
        // the vote comes again every epoch. Meanwhile no move starts (the
        // vote holds them in the queue, which the snapshot keeps) until
        // the copies under way switch and the snapshot is taken, so moves
        // one after the other cannot starve snapshots.
        // The layout too: a snapshot after this epoch holds the nodes that
        // run its shards from the next epoch on. A shard handed to another
        // node departs here: it takes no snapshot and starts nothing more.
        let leaving = self.switch_nodes(epoch);
        let ready = self.switch_partitions(epoch, snapshot);
        let snapshot = snapshot && !self.exec.map.borrow().is_copying();
        if leaving {
            assert!(ready, "a shard departs between partition copies");
            self.departing = Some(snapshot);
        } else if ready && snapshot {
            self.snapshot_or_mark(epoch);
        }
        self.check.done1 = 0;
        self.check.flags_in = 0;
        self.fallback.done2 = 0;
        self.check.aborted.clear();
        self.m.stage = Stage::Idle;
        self.m.stats.epochs += 1;
        self.release_replies();
        if leaving {
            return;
        }
        if !ready {
            self.hold_boundary(epoch, snapshot);
            return;
        }
        self.go_on(epoch, false);
    }

    /// The end of `epoch` after the partitions that moved are in place:
    /// the snapshot after it if `snapshot`, then the next epoch.
    pub(super) fn go_on(&mut self, epoch: Epoch, snapshot: bool) {
        assert_eq!(self.m.stage, Stage::Idle);
        if snapshot {
            self.snapshot_or_mark(epoch);
        }
        self.maybe_start();
        if self.m.stage == Stage::Idle {
            // A peer that finished first may already have sent messages
            // of the next epoch: they start it here.
            self.redeliver();
        }
    }
}
