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
//! §4): the smallest tid that read and that wrote each entity, and for a
//! partition the smallest tid that wrote any of its entities. The flags of a
//! transaction here are only this shard's share: they are ORed with the
//! other shards' before the commit rule is applied.

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
    pub min_write: Tid,
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
}

/// One transaction's use of one entity in one phase.
pub(crate) struct Access {
    pub txn: u32,
    pub touched: u32,
    /// The pseudo-entry slot of the entity's partition.
    pub part_slot: u32,
    /// Observed a value it had not written itself (a scan, for a pseudo-entity).
    pub read: bool,
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
    }

    pub fn txn(&self, tid: Tid) -> Option<u32> {
        self.index().get(&tid).copied()
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
        index
    }

    /// The touched record of `slot`, creating it on first touch this epoch.
    #[inline]
    pub fn touch(&mut self, store: &mut Store, slot: u32, op: OpId, partition: u32, key: Option<&Key>) -> u32 {
        let entry = &mut store.entries[slot as usize];
        if entry.generation == self.generation {
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
            min_member_write: TID_NONE,
            queue: NO_INDEX,
        });
        ordinal
    }

    /// The touched ordinal of `slot` if it was touched this epoch.
    pub fn touched_ordinal(&self, store: &Store, slot: u32) -> Option<u32> {
        let entry = &store.entries[slot as usize];
        (entry.generation == self.generation).then_some(entry.ordinal)
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
            if a.touched == touched {
                return at;
            }
            at = a.next;
        }
        let index = accesses.len() as u32;
        accesses.push(Access {
            txn,
            touched,
            part_slot,
            read: false,
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
        let generation = self.generation;
        let part_ordinal = |slot: u32| {
            let e = &store.entries[slot as usize];
            (e.generation == generation).then_some(e.ordinal)
        };
        for a in &self.accesses[Phase::Optimistic.index()] {
            let txn = &self.txns[a.txn as usize];
            if txn.aborted {
                continue;
            }
            let tid = txn.tid;
            let t = &mut self.touched[a.touched as usize];
            if a.read {
                t.min_read = t.min_read.min(tid);
            }
            if !matches!(a.write, Write::None) {
                t.min_write = t.min_write.min(tid);
                if let Some(p) = part_ordinal(a.part_slot) {
                    let pt = &mut self.touched[p as usize];
                    pt.min_member_write = pt.min_member_write.min(tid);
                }
            }
        }
        for a in &self.accesses[Phase::Optimistic.index()] {
            let txn = &self.txns[a.txn as usize];
            if txn.aborted {
                continue;
            }
            let tid = txn.tid;
            let t = &self.touched[a.touched as usize];
            let mut f = 0;
            if a.read && (t.min_write < tid || t.min_member_write < tid) {
                f |= flags::RAW;
            }
            if !matches!(a.write, Write::None) {
                if t.min_write < tid {
                    f |= flags::WAW;
                }
                if t.min_read < tid {
                    f |= flags::WAR;
                }
                if let Some(p) = part_ordinal(a.part_slot)
                    && self.touched[p as usize].min_read < tid
                {
                    f |= flags::WAR;
                }
            }
            self.txns[a.txn as usize].flags |= f;
        }
        self.txns
            .iter()
            .filter(|t| t.flags != 0)
            .map(|t| (t.tid, t.flags))
            .collect()
    }

    /// Applies the buffered writes of `txn`'s accesses in `phase`.
    pub fn apply(&mut self, store: &mut Store, phase: Phase, txn: u32) {
        let mut at = self.head(phase, txn);
        while at != NO_INDEX {
            let a = &mut self.accesses[phase.index()][at as usize];
            let slot = self.touched[a.touched as usize].slot;
            match std::mem::replace(&mut a.write, Write::None) {
                Write::None => {}
                Write::Put(v) => store.set(slot, Some(v)),
                Write::Delete => store.set(slot, None),
            }
            at = a.next;
        }
    }

    /// Builds the phase-2 lock queues of the fallback transactions
    /// (`fallback(txn)` is true): one per entity they touched, and one per
    /// partition they scanned, which also holds the fallback transactions
    /// that wrote into that partition.
    pub fn build_queues(&mut self, store: &Store, fallback: impl Fn(&TxnLocal) -> bool) {
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
        }
    }

    /// Whether `tid` holds `queue` now (advancing past finished holders).
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
        q.tids.get(q.head) == Some(&tid)
    }

    pub fn in_queue(&self, queue: u32, tid: Tid) -> bool {
        self.queues[queue as usize].tids.binary_search(&tid).is_ok()
    }

    /// The queues `txn` waits in or holds: those of the entities it touched
    /// in phase 1, and of the partitions it wrote into.
    pub fn queues_of(&self, store: &Store, txn: u32) -> Vec<u32> {
        let tid = self.txns[txn as usize].tid;
        let mut out = Vec::new();
        let mut at = self.head(Phase::Optimistic, txn);
        while at != NO_INDEX {
            let a = &self.accesses[Phase::Optimistic.index()][at as usize];
            let q = self.touched[a.touched as usize].queue;
            if q != NO_INDEX {
                out.push(q);
            }
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
