//! What a shard records about the current epoch, and the conflict check.
//!
//! Every invocation that runs on an entity leaves one access record per
//! (transaction, entity): whether it read the epoch-start value, and the
//! write it buffered. Entities touched in the epoch get a `Touched` record
//! (found from the entry by a generation-stamped ordinal) that carries the
//! reservations and, in phase 2, the lock queue.
//!
//! Reservations are computed after phase 1, once the logic-aborted
//! transactions are known, because their accesses must not count (protocol
//! §4): the smallest tid that read and that wrote each entity (and that put
//! or deleted it: adds commute, so an add conflicts only with those), and
//! for a partition the smallest tid that wrote any of its entities. The flags of a
//! transaction here are only this shard's share: they are ORed with the
//! other shards' before the commit rule is applied.
//!
//! Invariants, asserted in release builds (each check costs a comparison
//! or two on data at hand, or runs once per epoch): the tables are empty
//! after a reset and the generation is never 0; the txn index and the
//! touched ordinals agree with the tables they point into; an access list
//! holds one transaction's accesses; reservations are computed once per
//! epoch, before the decision, and one that flags a transaction is a
//! smaller tid counted in this epoch; flags go only to transactions that
//! did not abort by their logic; phase 2 touches only queued entities;
//! after phase 1 only fallback transactions are applied, in phase 2 once;
//! lock queues are built once, in strictly increasing tid order, and a
//! transaction waits only behind smaller tids.

use crate::ctx::NO_INDEX;
use crate::ids::{OpId, Tid};
use crate::key::Key;
use crate::message::{Phase, flags};
use crate::store::{Store, TidMap, new_tid_map};
use crate::value::Value;

const TID_NONE: Tid = Tid::MAX;

/// An entity (or a partition's pseudo-entity) touched in this epoch.
pub(crate) struct Touched {
    pub slot: u32,
    pub op: OpId,
    pub partition: u32,
    /// `None` for a partition's pseudo-entity.
    pub key: Option<Key>,
    pub min_read: Tid,
    /// The smallest tid that wrote it, adds included.
    pub min_write: Tid,
    /// The smallest tid that put or deleted it (adds excluded: adds of one
    /// entity commute, so they conflict only with puts and deletes).
    pub min_put: Tid,
    /// For a pseudo-entity: the smallest tid that wrote an entity of the partition.
    pub min_member_write: Tid,
    /// Index of the phase-2 lock queue, or `NO_INDEX`.
    pub queue: u32,
}

/// A buffered write.
pub(crate) enum Write {
    None,
    Put(Value),
    Delete,
    /// A sum to add to the entity's `i64` state when applied, without
    /// having read it (`Ctx::add`): checked to be an `i64` or absent when
    /// buffered, and only a put or delete could change that, which
    /// conflicts with the add.
    Add(i64),
}

/// One transaction's use of one entity in one phase.
pub(crate) struct Access {
    pub txn: u32,
    pub touched: u32,
    /// The pseudo-entry slot of the entity's partition.
    pub part_slot: u32,
    /// Observed a value it had not written itself (a scan, for a pseudo-entity).
    pub read: bool,
    /// Writes of the entity by the transaction in this phase, all its
    /// invocations together (the re-entrant write-back check).
    pub writes: u32,
    pub write: Write,
    /// Next access of the same transaction in the same phase.
    pub next: u32,
}

/// A transaction's state at this shard in this epoch.
pub(crate) struct TxnLocal {
    pub tid: Tid,
    /// Per phase, the head of its list of accesses (`NO_INDEX` if none).
    pub heads: [u32; Phase::COUNT],
    /// This shard's conflict flags for it.
    pub flags: u8,
    /// Aborted by its own logic in phase 1.
    pub aborted: bool,
    /// Committed in phase 1.
    pub committed: bool,
    /// Phase 2 has finished it (applied or discarded).
    pub finished: bool,
}

/// A phase-2 lock queue: the fallback transactions that touched an entity,
/// in tid order. The head (skipping finished ones) holds the lock.
pub(crate) struct LockQueue {
    pub tids: Vec<Tid>,
    pub head: usize,
    /// Invocations waiting for the lock, by task index.
    pub waiting: Vec<u32>,
}

#[derive(Default)]
pub(crate) struct Tables {
    pub generation: u32,
    pub touched: Vec<Touched>,
    /// Per phase, by `Phase::index`.
    pub accesses: [Vec<Access>; Phase::COUNT],
    pub txns: Vec<TxnLocal>,
    pub txn_index: Option<TidMap<u32>>,
    pub queues: Vec<LockQueue>,
}

impl Tables {
    pub fn new() -> Tables {
        Tables {
            generation: 1,
            txn_index: Some(new_tid_map()),
            ..Tables::default()
        }
    }

    fn index(&self) -> &TidMap<u32> {
        self.txn_index.as_ref().expect("txn index")
    }

    /// Starts a new epoch's tables.
    pub fn reset(&mut self, store: &mut Store) {
        self.touched.clear();
        for accesses in &mut self.accesses {
            accesses.clear();
        }
        self.txns.clear();
        self.txn_index.as_mut().expect("txn index").clear();
        self.queues.clear();
        if self.generation == u32::MAX {
            store.reset_generations();
            self.generation = 0;
        }
        self.generation += 1;
        // Entries start at generation 0: a table at 0 would claim every
        // entry never touched as touched.
        assert_ne!(self.generation, 0);
        assert!(
            self.touched.is_empty() && self.txns.is_empty() && self.index().is_empty() && self.queues.is_empty(),
            "epoch tables not empty after a reset"
        );
    }

    pub fn txn(&self, tid: Tid) -> Option<u32> {
        let txn = self.index().get(&tid).copied();
        if let Some(t) = txn {
            assert!(self.txns[t as usize].tid == tid, "txn index out of step with the table");
        }
        txn
    }

    pub fn txn_or_insert(&mut self, tid: Tid) -> u32 {
        let next = self.txns.len() as u32;
        let index = *self.txn_index.as_mut().expect("txn index").entry(tid).or_insert(next);
        if index == next {
            self.txns.push(TxnLocal {
                tid,
                heads: [NO_INDEX; Phase::COUNT],
                flags: 0,
                aborted: false,
                committed: false,
                finished: false,
            });
        }
        assert!(
            self.txns[index as usize].tid == tid,
            "txn index out of step with the table"
        );
        index
    }

    /// The touched record of `slot`, creating it on first touch this epoch.
    #[inline]
    pub fn touch(&mut self, store: &mut Store, slot: u32, op: OpId, partition: u32, key: Option<&Key>) -> u32 {
        let entry = &mut store.entries[slot as usize];
        if entry.generation == self.generation {
            assert!(
                self.touched[entry.ordinal as usize].slot == slot,
                "touched ordinal of another entry"
            );
            return entry.ordinal;
        }
        let ordinal = self.touched.len() as u32;
        entry.generation = self.generation;
        entry.ordinal = ordinal;
        self.touched.push(Touched {
            slot,
            op,
            partition,
            key: key.cloned(),
            min_read: TID_NONE,
            min_write: TID_NONE,
            min_put: TID_NONE,
            min_member_write: TID_NONE,
            queue: NO_INDEX,
        });
        ordinal
    }

    /// The touched ordinal of `slot` if it was touched this epoch.
    pub fn touched_ordinal(&self, store: &Store, slot: u32) -> Option<u32> {
        let entry = &store.entries[slot as usize];
        let ordinal = (entry.generation == self.generation).then_some(entry.ordinal);
        assert!(
            ordinal.is_none_or(|o| self.touched[o as usize].slot == slot),
            "touched ordinal of another entry"
        );
        ordinal
    }

    /// The head of `txn`'s access list in `phase`.
    #[inline]
    pub fn head(&self, phase: Phase, txn: u32) -> u32 {
        self.txns[txn as usize].heads[phase.index()]
    }

    /// The access of transaction `txn` to touched record `touched` in
    /// `phase`, created if absent.
    pub fn access(&mut self, phase: Phase, txn: u32, touched: u32, part_slot: u32) -> u32 {
        let head = self.head(phase, txn);
        let accesses = &mut self.accesses[phase.index()];
        let mut at = head;
        while at != NO_INDEX {
            let a = &accesses[at as usize];
            assert!(a.txn == txn, "an access list mixes transactions");
            if a.touched == touched {
                return at;
            }
            at = a.next;
        }
        // Phase 2 runs only inside the recorded set: every entity it
        // touches has a lock queue.
        assert!(
            phase != Phase::Fallback || self.touched[touched as usize].queue != NO_INDEX,
            "phase-2 access to an entity without a lock queue"
        );
        let index = accesses.len() as u32;
        accesses.push(Access {
            txn,
            touched,
            part_slot,
            read: false,
            writes: 0,
            write: Write::None,
            next: head,
        });
        self.txns[txn as usize].heads[phase.index()] = index;
        index
    }

    /// Computes reservations from phase-1 accesses (skipping logic-aborted
    /// transactions), then this shard's flags for every transaction.
    /// Returns the transactions with a flag set.
    pub fn conflict_flags(&mut self, store: &Store) -> Vec<(Tid, u8)> {
        // Once per epoch, before the decision and the queues it builds.
        assert!(self.queues.is_empty(), "conflict flags after the lock queues");
        let generation = self.generation;
        let part_ordinal = |slot: u32| {
            let e = &store.entries[slot as usize];
            (e.generation == generation).then_some(e.ordinal)
        };
        // The smallest tid whose accesses count: no reservation is smaller.
        let mut tid_min = TID_NONE;
        for a in &self.accesses[Phase::Optimistic.index()] {
            let txn = &self.txns[a.txn as usize];
            if txn.aborted {
                continue;
            }
            let tid = txn.tid;
            tid_min = tid_min.min(tid);
            let t = &mut self.touched[a.touched as usize];
            if a.read {
                t.min_read = t.min_read.min(tid);
            }
            if !matches!(a.write, Write::None) {
                t.min_write = t.min_write.min(tid);
                if !matches!(a.write, Write::Add(_)) {
                    t.min_put = t.min_put.min(tid);
                }
                if let Some(p) = part_ordinal(a.part_slot) {
                    let pt = &mut self.touched[p as usize];
                    pt.min_member_write = pt.min_member_write.min(tid);
                }
            }
        }
        // A reservation that flags `tid` is a smaller tid counted in this
        // epoch, never one left from an earlier epoch (tids only grow).
        let reserved = |holder: Tid, tid: Tid| tid_min <= holder && holder < tid;
        for a in &self.accesses[Phase::Optimistic.index()] {
            let txn = &self.txns[a.txn as usize];
            if txn.aborted {
                continue;
            }
            let tid = txn.tid;
            let t = &self.touched[a.touched as usize];
            let mut f = 0;
            if a.read && (t.min_write < tid || t.min_member_write < tid) {
                assert!(
                    reserved(t.min_write.min(t.min_member_write), tid),
                    "RAW of {tid} against a tid not of this epoch"
                );
                f |= flags::RAW;
            }
            if !matches!(a.write, Write::None) {
                // An add conflicts with an earlier put or delete; a put or
                // delete with any earlier write, adds included.
                let min_write = match a.write {
                    Write::Add(_) => t.min_put,
                    _ => t.min_write,
                };
                if min_write < tid {
                    assert!(reserved(min_write, tid), "WAW of {tid} against a tid not of this epoch");
                    f |= flags::WAW;
                }
                if t.min_read < tid {
                    assert!(
                        reserved(t.min_read, tid),
                        "WAR of {tid} against a tid not of this epoch"
                    );
                    f |= flags::WAR;
                }
                if let Some(p) = part_ordinal(a.part_slot)
                    && self.touched[p as usize].min_read < tid
                {
                    assert!(
                        reserved(self.touched[p as usize].min_read, tid),
                        "WAR of {tid} against a scan not of this epoch"
                    );
                    f |= flags::WAR;
                }
            }
            self.txns[a.txn as usize].flags |= f;
        }
        self.txns
            .iter()
            .filter(|t| t.flags != 0)
            .map(|t| {
                // Flagged before the decision, and only for accesses that count.
                assert!(!t.committed && !t.aborted, "flags for {}, decided or aborted", t.tid);
                (t.tid, t.flags)
            })
            .collect()
    }

    /// Applies the buffered writes of `txn`'s accesses in `phase`.
    pub fn apply(&mut self, store: &mut Store, phase: Phase, txn: u32) {
        // Phase 1 applies its winners (the caller's test); a `Finish` only a
        // fallback transaction, and in phase 2 only once.
        if phase != Phase::Optimistic {
            let t = &self.txns[txn as usize];
            assert!(!t.committed && !t.aborted, "applying {} after phase 1", t.tid);
            assert!(phase == Phase::Serial || !t.finished, "applying {} twice", t.tid);
        }
        let mut at = self.head(phase, txn);
        while at != NO_INDEX {
            let a = &mut self.accesses[phase.index()][at as usize];
            let slot = self.touched[a.touched as usize].slot;
            match std::mem::replace(&mut a.write, Write::None) {
                Write::None => {}
                Write::Put(v) => store.set(slot, Some(v)),
                Write::Delete => store.set(slot, None),
                Write::Add(d) => {
                    // Checked when buffered; only a put or delete, which
                    // conflicts with the add, could have changed the type.
                    let v = Value::added(store.entries[slot as usize].value.as_ref(), d)
                        .expect("an add applies to an i64 or nothing");
                    store.set(slot, Some(v));
                }
            }
            at = a.next;
        }
    }

    /// Builds the phase-2 lock queues of the fallback transactions
    /// (`fallback(txn)` is true): one per entity they touched, and one per
    /// partition they scanned, which also holds the fallback transactions
    /// that wrote into that partition.
    pub fn build_queues(&mut self, store: &Store, fallback: impl Fn(&TxnLocal) -> bool) {
        assert!(self.queues.is_empty(), "lock queues built twice in an epoch");
        let generation = self.generation;
        let mut scanned_partition = false;
        for a in &self.accesses[Phase::Optimistic.index()] {
            let txn = &self.txns[a.txn as usize];
            if !fallback(txn) {
                continue;
            }
            let tid = txn.tid;
            let t = &mut self.touched[a.touched as usize];
            if t.queue == NO_INDEX {
                t.queue = self.queues.len() as u32;
                self.queues.push(LockQueue {
                    tids: Vec::new(),
                    head: 0,
                    waiting: Vec::new(),
                });
            }
            self.queues[t.queue as usize].tids.push(tid);
            scanned_partition |= t.key.is_none() && a.read;
        }
        if scanned_partition {
            for a in &self.accesses[Phase::Optimistic.index()] {
                let txn = &self.txns[a.txn as usize];
                if !fallback(txn) || matches!(a.write, Write::None) {
                    continue;
                }
                let e = &store.entries[a.part_slot as usize];
                if e.generation != generation {
                    continue;
                }
                let q = self.touched[e.ordinal as usize].queue;
                if q != NO_INDEX {
                    self.queues[q as usize].tids.push(txn.tid);
                }
            }
        }
        for q in &mut self.queues {
            q.tids.sort_unstable();
            q.tids.dedup();
            // `holds` and `in_queue` rely on strict tid order: a transaction
            // waits only behind smaller tids, so there is no deadlock.
            assert!(
                q.head == 0 && !q.tids.is_empty() && q.tids.windows(2).all(|w| w[0] < w[1]),
                "lock queue out of tid order"
            );
        }
    }

    /// Whether `tid` holds `queue` now (advancing past finished holders).
    /// `tid` is one of the queue's unfinished transactions, or `Tid::MAX`
    /// to only advance the head.
    pub fn holds(&mut self, queue: u32, tid: Tid) -> bool {
        let index = self.txn_index.as_ref().expect("txn index");
        let q = &mut self.queues[queue as usize];
        while q.head < q.tids.len() {
            let holder = q.tids[q.head];
            let finished = index.get(&holder).is_some_and(|&t| self.txns[t as usize].finished);
            if !finished {
                break;
            }
            q.head += 1;
        }
        let holder = q.tids.get(q.head).copied();
        // An unfinished transaction of the queue is at or after its head:
        // it waits only for smaller tids.
        assert!(
            tid == TID_NONE || holder.is_some_and(|h| h <= tid),
            "{tid} waits in a queue held by {holder:?}"
        );
        holder == Some(tid)
    }

    pub fn in_queue(&self, queue: u32, tid: Tid) -> bool {
        self.queues[queue as usize].tids.binary_search(&tid).is_ok()
    }

    /// The queues `txn` waits in or holds: those of the entities it touched
    /// in phase 1, and of the partitions it wrote into.
    pub fn queues_of(&self, store: &Store, txn: u32) -> Vec<u32> {
        let t = &self.txns[txn as usize];
        assert!(!t.committed && !t.aborted, "{} is not a phase-2 transaction", t.tid);
        let tid = t.tid;
        let mut out = Vec::new();
        let mut at = self.head(Phase::Optimistic, txn);
        while at != NO_INDEX {
            let a = &self.accesses[Phase::Optimistic.index()][at as usize];
            let q = self.touched[a.touched as usize].queue;
            // Every entity a phase-2 transaction touched in phase 1 queues it.
            assert!(
                q != NO_INDEX && self.in_queue(q, tid),
                "{tid} missing from the lock queue of an entity it touched"
            );
            out.push(q);
            if let Some(p) = self.touched_ordinal(store, a.part_slot) {
                let pq = self.touched[p as usize].queue;
                if pq != NO_INDEX && self.in_queue(pq, tid) {
                    out.push(pq);
                }
            }
            at = a.next;
        }
        out.sort_unstable();
        out.dedup();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tables with transactions `tids` and one lock queue holding `queue`.
    fn with_queue(tids: &[Tid], queue: &[Tid]) -> Tables {
        let mut tables = Tables::new();
        for &tid in tids {
            tables.txn_or_insert(tid);
        }
        tables.queues.push(LockQueue {
            tids: queue.to_vec(),
            head: 0,
            waiting: Vec::new(),
        });
        tables
    }

    #[test]
    fn a_lock_passes_to_the_next_tid_when_its_holder_finishes() {
        let mut tables = with_queue(&[5, 9], &[5, 9]);
        assert!(tables.holds(0, 5));
        assert!(!tables.holds(0, 9));
        tables.txns[0].finished = true;
        assert!(tables.holds(0, 9));
    }

    #[test]
    #[should_panic(expected = "waits in a queue held by")]
    fn waiting_behind_a_larger_tid_is_a_broken_invariant() {
        let mut tables = with_queue(&[5, 9], &[9]);
        tables.holds(0, 5);
    }
}
