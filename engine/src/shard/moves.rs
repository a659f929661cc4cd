//! Partition moves: a background copy to the new owner over several
//! epochs, then the switch of the map and the delta at one epoch's end.
//!
//! A move is a request (`partition_map::Move::request`): its coordinator
//! seals it into its batch like a transaction (so it is logged and replayed,
//! and answered exactly once), does not run it, and lists it in its `Done1`.
//! Every shard therefore knows every move of the epoch before the epoch
//! ends, and at the end decides them all, in tid order, on its map
//! (`PartitionMap::decide`: a partition already moving queues the move).
//! A move started at the end of epoch E then goes:
//!
//! - *Copy.* The old owner, still owning and serving the partition, lists
//!   its live slots at E's end and sends a share of them at the end of E
//!   and of each later epoch (`Install`, not `last`), in proportion to the
//!   logged time since its last share, at the move's logged pace
//!   (`MoveShare`, `Shard::move_elapsed_us`).
//!   It also records every key of the partition its epochs touch from E + 1
//!   on (a superset of those written or deleted). The new owner stages the
//!   entities in its slab, indexed apart from its partitions: nothing sees
//!   them (`Store::stage_incoming`).
//! - *Switch.* The end of the epoch in which the last share was sent makes
//!   the old owner announce the switch in its next `Done1`; at that epoch's
//!   end (S) every shard switches the map (`PartitionMap::switch`). The old
//!   owner sends the delta — the current value or deletion of every key it
//!   recorded — and retires the partition: it deletes the entities a share
//!   per epoch end from S on (ordinary writes, so a snapshot holds
//!   tombstones), all that are left at once before it takes a snapshot or
//!   installs the partition again. Nothing routes to a partition a shard
//!   does not own, so no transaction sees a retiring entity, and state
//!   dumps (`Shard::for_each_entity`) skip it. The new owner waits, before
//!   it snapshots or starts the next epoch (messages of S + 1 wait meanwhile), for the
//!   delta, then installs the staged copy with the delta over it. A key
//!   written after its share was taken is in the delta, so the installed
//!   partition is the old owner's state at S's end.
//!
//! So the pause at the switch is the delta and the table's adoption, not
//! the partition (deleting 100 000 entities at once stalled every shard's
//! next epoch for tens of milliseconds). Every step is a function of the
//! log: when the switch comes depends only on the partition's live
//! entities at E's end, on the old owner's batches' logged times and on
//! the pace logged with the move (`MoveShare`), so replay switches at the
//! same epoch whatever the replaying process is configured with. No
//! snapshot is taken while a move is under way (every shard holds the
//! same map, so all skip alike): the
//! staged copy and the recorded keys live only in memory, and recovery
//! from a snapshot before E replays the whole move.
//!
//! Invariants: shares of a copy arrive in the order sent (links are FIFO
//! and one shard sends them); a delta of epoch S arrives only after this
//! shard sent its `Done2` for S, and no message of S + 1 is handled before
//! it is installed; the shard never starts an epoch while a delta to it is
//! missing.

use super::Shard;
use super::exec::{Exec, ExecState};
use crate::codec::Payload;
use crate::ids::{Epoch, OpId, ShardId, Tid};
use crate::key::Key;
use crate::layout::Handover;
use crate::message::Message;
use crate::partition_map::{Move, MoveShare, Moving};
use crate::value::Value;

/// Entities in one `Install` message at most, and the key and value bytes
/// after which one stops (it holds at least one entity): bound a message,
/// and a remote link's frame, whatever a partition holds.
pub(super) const INSTALL_ENTITIES_MAX: usize = 4_096;
pub(super) const INSTALL_BYTES_MAX: usize = 1 << 20;

/// A partition this shard is copying away (it still owns it).
struct Outgoing {
    op: OpId,
    partition: u32,
    to: ShardId,
    /// The move's pace.
    share: MoveShare,
    /// Its live slots at the move's start, sent in this order.
    slots: Vec<u32>,
    /// How many of `slots` were sent.
    cursor: usize,
    /// Keys of the partition touched since the move started: the delta.
    touched: Vec<Key>,
    /// The switch was announced in a `Done1`.
    announced: bool,
}

/// A partition that moved away, deleted a share per epoch end.
struct Retiring {
    op: OpId,
    partition: u32,
    /// The move's pace.
    share: MoveShare,
    /// Its table's slots at the switch (tombstones among them are skipped).
    slots: Vec<u32>,
    /// How many of `slots` were deleted.
    cursor: usize,
}

impl Retiring {
    /// Deletes the entity at `slot` if it is still one of the partition's;
    /// returns whether it was.
    fn delete(&self, store: &mut crate::store::Store, slot: u32) -> bool {
        if store.entity_at(slot, self.op, self.partition).is_none() {
            return false;
        }
        store.set(slot, None);
        // Without snapshots no tombstone is kept: the slot is free at once.
        store.reclaim_slot(slot);
        true
    }
}

/// A delta's deletions for a partition coming here, kept until installed
/// (its entities are staged in the store as they arrive).
struct Incoming {
    op: OpId,
    partition: u32,
    deleted: Vec<Key>,
    /// The delta's last message arrived.
    complete: bool,
}

/// The rest of an epoch's end, held while deltas to this shard arrive.
#[derive(Clone, Copy)]
struct Held {
    epoch: Epoch,
    snapshot: bool,
}

/// Moves of the current epoch and copies in flight from and to this shard.
pub(super) struct Moves {
    /// Moves this shard sequenced this epoch, for its `Done1`.
    pub(super) sealed: Vec<(Tid, Move)>,
    /// Every shard's moves of this epoch (from the `Done1`s).
    pub(super) decided: Vec<(Tid, Move)>,
    /// Partitions whose copy every shard announced sent (from the
    /// `Done1`s): they switch at this epoch's end.
    pub(super) switches: Vec<(OpId, u32)>,
    /// Shard handovers this shard sequenced this epoch, for its `Done1`.
    pub(super) handovers_sealed: Vec<(Tid, Handover)>,
    /// Every shard's handovers of this epoch (from the `Done1`s).
    pub(super) handovers_decided: Vec<(Tid, Handover)>,
    outgoing: Vec<Outgoing>,
    incoming: Vec<Incoming>,
    retiring: Vec<Retiring>,
    /// Partitions switching to this shard at this boundary …
    expected: usize,
    held: Option<Held>,
    /// The logged time of the last epoch end that left a copy under way
    /// here (`None` when none was): the next share is in proportion to the
    /// time since.
    copy_us: Option<u64>,
    /// The same for a retirement, kept apart: replay finishes no
    /// retirement at the snapshots it does not take, so retirements run
    /// longer in replay, and a copy's shares (so its switch) must not
    /// depend on them.
    retire_us: Option<u64>,
}

impl Moves {
    pub(super) fn new() -> Moves {
        Moves {
            sealed: Vec::new(),
            decided: Vec::new(),
            switches: Vec::new(),
            handovers_sealed: Vec::new(),
            handovers_decided: Vec::new(),
            outgoing: Vec::new(),
            incoming: Vec::new(),
            retiring: Vec::new(),
            expected: 0,
            held: None,
            copy_us: None,
            retire_us: None,
        }
    }

    /// Whether the epoch's end waits for partitions moving here.
    pub(super) fn is_waiting(&self) -> bool {
        self.held.is_some()
    }

    /// For `Shard::describe`: copies out and in.
    pub(super) fn describe(&self) -> String {
        format!(
            "moves: {} out ({} of {} entities sent), {} in ({} complete, {} expected), {}",
            self.outgoing.len(),
            self.outgoing.iter().map(|o| o.cursor).sum::<usize>(),
            self.outgoing.iter().map(|o| o.slots.len()).sum::<usize>(),
            self.incoming.len(),
            self.incoming.iter().filter(|i| i.complete).count(),
            self.expected,
            if self.is_waiting() { "waiting" } else { "not waiting" }
        )
    }

    fn incoming(&mut self, op: OpId, partition: u32) -> &mut Incoming {
        let at = match self
            .incoming
            .iter()
            .position(|i| (i.op, i.partition) == (op, partition))
        {
            Some(at) => at,
            None => {
                self.incoming.push(Incoming {
                    op,
                    partition,
                    deleted: Vec::new(),
                    complete: false,
                });
                self.incoming.len() - 1
            }
        };
        &mut self.incoming[at]
    }
}

impl Shard {
    /// A move request sealed into this epoch: it runs nothing; its outcome
    /// is `()` and the copy starts at the epoch's end.
    pub(super) fn seal_move(&mut self, tid: Tid, m: Move) {
        self.moves.sealed.push((tid, m));
    }

    /// A handover request sealed into this epoch: like a move, it runs
    /// nothing; every shard decides it at the epoch's end.
    pub(super) fn seal_handover(&mut self, tid: Tid, h: Handover) {
        self.moves.handovers_sealed.push((tid, h));
    }

    /// At the end of `epoch`, before the partitions' switches: applies the
    /// epoch's handovers to the layout — unless a partition is being copied
    /// or waits to be, or moves were decided this epoch (a shard leaves
    /// between copies, so
    /// that what crosses is the shard alone: they wait in the layout's
    /// queue, the same on every shard) — and tells the driver which shards
    /// now run elsewhere. Returns whether this shard departs (with
    /// `Config::pause_at_handover`, every shard does when any moved).
    pub(super) fn switch_nodes(&mut self, epoch: Epoch) -> bool {
        if self.moves.handovers_decided.is_empty() && self.layout.queued().is_empty() {
            return false;
        }
        let hold = self.exec.map.borrow().is_moving() || !self.moves.decided.is_empty();
        let mut decided = std::mem::take(&mut self.moves.handovers_decided);
        let id = self.exec.id;
        let before = self.layout.node_of(id);
        let switched = self.layout.decide(epoch, &mut decided, hold, self.config.spare_nodes);
        let any = !switched.is_empty();
        self.outputs.handovers.extend(switched);
        // Handed away and back in one epoch is no departure (unless every
        // shard stops at a change of the layout).
        self.layout.node_of(id) != before || (any && self.config.pause_at_handover)
    }

    /// The outcome of every move.
    pub(super) fn move_result() -> Payload {
        Payload::encode(&())
    }

    /// For this shard's `Done1`: the partitions whose copy it has sent and
    /// not yet announced (they switch at this epoch's end).
    pub(super) fn copies_sent(&mut self) -> Vec<(OpId, u32)> {
        let mut out = Vec::new();
        for o in &mut self.moves.outgoing {
            if o.cursor == o.slots.len() && !o.announced {
                o.announced = true;
                out.push((o.op, o.partition));
            }
        }
        out
    }

    /// At the end of `epoch`: records the keys the epoch touched in
    /// partitions copying away, starts the moves that may start (none if
    /// `hold`, a snapshot is due, and a copy is under way), switches
    /// the partitions announced (the old owner sends the delta and deletes,
    /// the new one expects it), and sends every copy's next share. Returns
    /// whether the epoch's end may go on now (else the rest waits in
    /// `held` for the deltas: see [`Shard::hold_boundary`]).
    pub(super) fn switch_partitions(&mut self, epoch: Epoch, hold: bool) -> bool {
        if !self.exec.map.borrow().is_moving() && self.moves.decided.is_empty() {
            debug_assert!(self.moves.switches.is_empty());
            self.retire_share();
            self.moves.copy_us = None;
            return true;
        }
        self.record_touched();
        // Decided before the switches: a move of a partition switching now
        // queues and starts at the next epoch's end, from its new owner,
        // which has installed it by then.
        let mut decided = std::mem::take(&mut self.moves.decided);
        // A due snapshot waits for the copies under way; holding the queue
        // meanwhile bounds the wait by one copy. With none under way the
        // queue starts (and the snapshot waits for those): snapshots due
        // every epoch cannot starve moves either.
        let hold = hold && self.exec.map.borrow().is_copying();
        let started = self.exec.map.borrow_mut().decide(epoch, &mut decided, hold);
        let id = self.exec.id;
        for g in started.iter().filter(|g| g.from == id) {
            // The live ones only: how many shares a copy takes (so when it
            // switches) must be a function of the log, and tombstones are
            // not (they wait for snapshots, which replay does not take).
            let slots = self.exec.st.borrow().store.live_slots(g.op, g.partition);
            self.moves.outgoing.push(Outgoing {
                op: g.op,
                partition: g.partition,
                to: g.to,
                // A move logged before moves carried their pace: this
                // shard's settings, as then.
                share: g.share.unwrap_or_else(|| self.config.move_share()),
                slots,
                cursor: 0,
                touched: Vec::new(),
                announced: false,
            });
        }
        let mut switches = std::mem::take(&mut self.moves.switches);
        let switched = self.exec.map.borrow_mut().switch(&mut switches);
        for g in &switched {
            if g.from == id {
                self.send_delta(epoch, g);
            }
            if g.to == id {
                self.moves.expected += 1;
            }
        }
        let elapsed_us = self.move_elapsed_us(self.moves.copy_us);
        self.send_shares(epoch, elapsed_us);
        self.moves.copy_us = (!self.moves.outgoing.is_empty()).then_some(self.m.epoch_now_us);
        self.retire_share();
        self.try_install()
    }

    /// The logged time since the epoch end `since` (`None`: none) that
    /// sets each copy's share, and each retiring partition's deletes, at
    /// this epoch's end ([`MoveShare::entities`]): the move's `per_ms`
    /// for each millisecond of it, at least its `least` (the first share
    /// after none was under way on this shard, and those of epochs back to
    /// back: an idle shard's empty epochs follow each other within
    /// microseconds while a move is under way), at most its `most`. So a
    /// move takes about the same fraction of every epoch, short or long (a
    /// saturated shard's, a light load's, or one waiting on other nodes),
    /// where a fixed count weighed most on short epochs. The times are the
    /// batches' logged ones and the pace is logged with the move, so replay
    /// sends the same shares and switches at the same epoch (an epoch a log
    /// lost replays at time 0: the share at its end is the floor, the next
    /// epoch's the most, in this replay as in any later one).
    fn move_elapsed_us(&self, since: Option<u64>) -> u64 {
        since.map_or(0, |last| self.m.epoch_now_us.saturating_sub(last))
    }

    /// Deletes a share of the retiring partitions, timed by their own
    /// clock (see `Moves::retire_us`).
    fn retire_share(&mut self) {
        if self.moves.retiring.is_empty() {
            self.moves.retire_us = None;
            return;
        }
        // One budget for all (the largest pace's share): an epoch end
        // deletes no more with several partitions retiring than with one.
        let elapsed_us = self.move_elapsed_us(self.moves.retire_us);
        let budget = self.moves.retiring.iter().map(|r| r.share.entities(elapsed_us)).max();
        self.retire(budget.unwrap_or(0));
        self.moves.retire_us = (!self.moves.retiring.is_empty()).then_some(self.m.epoch_now_us);
    }

    /// Deletes up to `budget` entities of the partitions retiring here.
    fn retire(&mut self, mut budget: usize) {
        if self.moves.retiring.is_empty() {
            return;
        }
        let mut st = self.exec.st.borrow_mut();
        for r in &mut self.moves.retiring {
            while budget > 0 && r.cursor < r.slots.len() {
                budget -= usize::from(r.delete(&mut st.store, r.slots[r.cursor]));
                r.cursor += 1;
            }
        }
        self.moves.retiring.retain(|r| r.cursor < r.slots.len());
    }

    /// Deletes what is left of every retiring partition (before a snapshot:
    /// it must hold their tombstones).
    pub(super) fn finish_retiring(&mut self) {
        self.retire(usize::MAX);
        self.moves.retire_us = None;
    }

    /// Deletes what is left of `partition` of `op` if it is retiring here
    /// (before it is installed here again).
    fn finish_retiring_partition(&mut self, op: OpId, partition: u32) {
        let Some(at) = self
            .moves
            .retiring
            .iter()
            .position(|r| (r.op, r.partition) == (op, partition))
        else {
            return;
        };
        let r = self.moves.retiring.swap_remove(at);
        let mut st = self.exec.st.borrow_mut();
        for &slot in &r.slots[r.cursor..] {
            r.delete(&mut st.store, slot);
        }
    }

    /// Entities of partitions that moved away from this shard and are not
    /// deleted here yet (they go a share per epoch end; no transaction
    /// sees them).
    pub fn retiring_entities(&self) -> usize {
        let st = self.exec.st.borrow();
        self.moves
            .retiring
            .iter()
            .map(|r| {
                r.slots[r.cursor..]
                    .iter()
                    .filter(|&&slot| st.store.entity_at(slot, r.op, r.partition).is_some())
                    .count()
            })
            .sum()
    }

    /// Keys of the epoch's touched table in partitions copying away: they
    /// go again, with their value at the switch, in the delta.
    fn record_touched(&mut self) {
        if self.moves.outgoing.is_empty() {
            return;
        }
        let st = self.exec.st.borrow();
        for t in &st.tables.touched {
            let Some(key) = &t.key else { continue };
            if let Some(o) = self
                .moves
                .outgoing
                .iter_mut()
                .find(|o| (o.op, o.partition) == (t.op, t.partition))
            {
                o.touched.push(key.clone());
            }
        }
    }

    /// Sends each copy's next `share` slots (those still holding an entity
    /// of the partition: one deleted or reused since was touched, so the
    /// delta carries it).
    fn send_shares(&mut self, epoch: Epoch, elapsed_us: u64) {
        let mut guard = self.exec.st.borrow_mut();
        let st = &mut *guard;
        for o in &mut self.moves.outgoing {
            if o.cursor == o.slots.len() {
                continue;
            }
            let end = o.cursor.saturating_add(o.share.entities(elapsed_us)).min(o.slots.len());
            let mut out = Outbox::new(epoch, o.op, o.partition, o.to);
            for &slot in &o.slots[o.cursor..end] {
                if let Some((key, value)) = st.store.entity_at(slot, o.op, o.partition) {
                    out.entity(key.clone(), value.clone(), &self.exec, st);
                }
            }
            o.cursor = end;
            out.flush(false, &self.exec, st);
        }
    }

    /// At the switch of `g`, moving away from here: sends the delta (the
    /// current value, or the deletion, of every key touched during the
    /// copy; the last message marked) and retires the partition here.
    fn send_delta(&mut self, epoch: Epoch, g: &Moving) {
        let at = self
            .moves
            .outgoing
            .iter()
            .position(|o| (o.op, o.partition) == (g.op, g.partition))
            .expect("a partition switching away is being copied");
        let o = self.moves.outgoing.swap_remove(at);
        assert_eq!(o.cursor, o.slots.len(), "switch before the copy was sent");
        let mut touched = o.touched;
        touched.sort_unstable();
        touched.dedup();
        let mut guard = self.exec.st.borrow_mut();
        let st = &mut *guard;
        let mut out = Outbox::new(epoch, o.op, o.partition, o.to);
        for key in touched {
            let value = st
                .store
                .find(o.op, o.partition, &key, key.hash64())
                .and_then(|slot| st.store.entries[slot as usize].value.clone());
            match value {
                Some(value) => out.entity(key, value, &self.exec, st),
                None => out.deleted(key, &self.exec, st),
            }
        }
        out.flush(true, &self.exec, st);
        let slots = st.store.table_slots(o.op, o.partition);
        self.moves.retiring.push(Retiring {
            op: o.op,
            partition: o.partition,
            share: o.share,
            slots,
            cursor: 0,
        });
    }

    /// An `Install` arrived: a share of a copy is staged; a delta's
    /// deletions are kept, and its last message completes the partition,
    /// installed once every partition switching here at this boundary is.
    pub(super) fn on_install(
        &mut self,
        epoch: Epoch,
        op: OpId,
        partition: u32,
        entities: Vec<(Key, Value)>,
        deleted: Vec<Key>,
        last: bool,
    ) {
        assert!(
            epoch <= self.m.epoch,
            "partition {partition} of operator {} sent at the end of epoch {epoch}, arrived in {}",
            op.0,
            self.m.epoch
        );
        self.exec.st.borrow_mut().store.stage_incoming(op, partition, entities);
        let incoming = self.moves.incoming(op, partition);
        incoming.deleted.extend(deleted);
        if last {
            assert_eq!(epoch, self.m.epoch, "a delta of epoch {epoch} in {}", self.m.epoch);
            incoming.complete = true;
        }
        if self.moves.held.is_some() && self.try_install() {
            let held = self.moves.held.take().expect("held");
            assert_eq!(held.epoch, self.m.epoch);
            self.go_on(held.epoch, held.snapshot);
        }
    }

    /// Installs the partitions switching here if all are complete; returns
    /// whether nothing more is expected.
    fn try_install(&mut self) -> bool {
        let complete = self.moves.incoming.iter().filter(|i| i.complete).count();
        if complete < self.moves.expected {
            return false;
        }
        assert_eq!(
            complete, self.moves.expected,
            "more deltas arrived than partitions switched here"
        );
        // By partition: the same store whatever order the deltas came in.
        let (mut done, rest): (Vec<Incoming>, Vec<Incoming>) = std::mem::take(&mut self.moves.incoming)
            .into_iter()
            .partition(|i| i.complete);
        self.moves.incoming = rest;
        done.sort_by_key(|i| (i.op, i.partition));
        for i in &done {
            self.finish_retiring_partition(i.op, i.partition);
        }
        let mut guard = self.exec.st.borrow_mut();
        let st = &mut *guard;
        for i in done {
            st.store.install_incoming(i.op, i.partition);
            for key in i.deleted {
                if let Some(slot) = st.store.find(i.op, i.partition, &key, key.hash64()) {
                    st.store.set(slot, None);
                }
            }
        }
        self.moves.expected = 0;
        true
    }

    /// The epoch's end waits for partitions switching here.
    pub(super) fn hold_boundary(&mut self, epoch: Epoch, snapshot: bool) {
        assert!(self.moves.held.is_none());
        self.moves.held = Some(Held { epoch, snapshot });
    }
}

/// `Install` messages of one partition to one shard, cut at
/// [`INSTALL_ENTITIES_MAX`] items or about [`INSTALL_BYTES_MAX`] bytes.
struct Outbox {
    epoch: Epoch,
    op: OpId,
    partition: u32,
    to: ShardId,
    entities: Vec<(Key, Value)>,
    deleted: Vec<Key>,
    bytes: usize,
}

impl Outbox {
    fn new(epoch: Epoch, op: OpId, partition: u32, to: ShardId) -> Outbox {
        Outbox {
            epoch,
            op,
            partition,
            to,
            entities: Vec::new(),
            deleted: Vec::new(),
            bytes: 0,
        }
    }

    fn entity(&mut self, key: Key, value: Value, exec: &Exec, st: &mut ExecState) {
        self.bytes += key.as_bytes().len() + value.len();
        self.entities.push((key, value));
        self.cut(exec, st);
    }

    fn deleted(&mut self, key: Key, exec: &Exec, st: &mut ExecState) {
        self.bytes += key.as_bytes().len();
        self.deleted.push(key);
        self.cut(exec, st);
    }

    fn cut(&mut self, exec: &Exec, st: &mut ExecState) {
        if self.entities.len() + self.deleted.len() == INSTALL_ENTITIES_MAX || self.bytes >= INSTALL_BYTES_MAX {
            self.send(false, exec, st);
        }
    }

    /// Sends what is left: always when `last` (it ends the partition),
    /// else only if anything is.
    fn flush(mut self, last: bool, exec: &Exec, st: &mut ExecState) {
        if last || !(self.entities.is_empty() && self.deleted.is_empty()) {
            self.send(last, exec, st);
        }
    }

    fn send(&mut self, last: bool, exec: &Exec, st: &mut ExecState) {
        self.bytes = 0;
        let msg = Message::Install {
            epoch: self.epoch,
            op: self.op,
            partition: self.partition,
            entities: std::mem::take(&mut self.entities),
            deleted: std::mem::take(&mut self.deleted),
            last,
        };
        exec.route(st, self.to, msg);
    }
}
