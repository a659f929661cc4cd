//! The serial order an epoch is equivalent to, for checking it.
//!
//! Without reordering an epoch equals its phase-1 commits in tid order, then
//! its phase-2 transactions in tid order. With Aria's reordering a phase-1
//! commit that read an entity's epoch-start value must come before the
//! committed writer of that entity, even when the writer has the smaller
//! tid; the commit rule guarantees these edges form no cycle (protocol §5).
//! Transactions that aborted by their own logic in phase 1 read the
//! epoch-start state, so they come first; the phase-3 transactions (serial
//! re-runs of drifted ones) come last, in tid order.
//!
//! Each shard records the edges for the entities it owns; merging every
//! shard's record of an epoch gives the whole order.

use crate::epoch::{Tables, Write};
use crate::ids::{Epoch, ShardId, Tid};
use crate::store::Store;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

/// What one shard saw of one epoch (recorded when `Config::record_history`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EpochRecord {
    pub epoch: Epoch,
    pub shard: ShardId,
    /// Coordinated here: committed in phase 1.
    pub committed1: Vec<Tid>,
    /// Coordinated here: aborted by their own logic in phase 1.
    pub aborted1: Vec<Tid>,
    /// Coordinated here: finished in phase 2 (committed or aborted).
    pub fallback: Vec<Tid>,
    /// Coordinated here: re-run serially in phase 3 (committed or aborted).
    pub serial: Vec<Tid>,
    /// `(reader, writer)`: among phase-1 commits, `reader` read the
    /// epoch-start value of an entity here that `writer` overwrote.
    pub edges: Vec<(Tid, Tid)>,
}

/// The reader-before-writer edges among this shard's phase-1 commits.
pub(crate) fn phase1_edges(tables: &Tables, store: &Store) -> Vec<(Tid, Tid)> {
    // Per touched record: committed readers and the committed writer.
    let mut readers: BTreeMap<u32, Vec<Tid>> = BTreeMap::new();
    let mut writers: BTreeMap<u32, Vec<Tid>> = BTreeMap::new();
    // Touched records whose phase-1 writers only added.
    let mut adders: BTreeSet<u32> = BTreeSet::new();
    // Per partition pseudo-record: committed writers of its entities.
    let mut member_writers: BTreeMap<u32, Vec<Tid>> = BTreeMap::new();
    for a in &tables.accesses[0] {
        let txn = &tables.txns[a.txn as usize];
        if !txn.committed {
            continue;
        }
        if a.read {
            readers.entry(a.touched).or_default().push(txn.tid);
        }
        if !matches!(a.write, Write::None) {
            let adds = matches!(a.write, Write::Add(_));
            let ws = writers.entry(a.touched).or_default();
            // Phase-1 commits write an entity once, or only add to it
            // (adds commute: no edge among them).
            assert!(
                ws.is_empty() || (adds && adders.contains(&a.touched)),
                "two phase-1 commits wrote one entity"
            );
            ws.push(txn.tid);
            if adds {
                adders.insert(a.touched);
            }
            if let Some(p) = tables.touched_ordinal(store, a.part_slot) {
                member_writers.entry(p).or_default().push(txn.tid);
            }
        }
    }
    let mut edges = Vec::new();
    for (touched, rs) in &readers {
        let writers: Vec<Tid> = match tables.touched[*touched as usize].key {
            Some(_) => writers.get(touched).cloned().unwrap_or_default(),
            None => member_writers.get(touched).cloned().unwrap_or_default(),
        };
        for r in rs {
            for w in &writers {
                if r != w {
                    edges.push((*r, *w));
                }
            }
        }
    }
    edges.sort_unstable();
    edges.dedup();
    edges
}

/// The serial order of one epoch from every shard's record of it.
///
/// # Panics
/// If the phase-1 edges have a cycle: the commit rule was broken.
pub fn serial_order<'a>(records: impl IntoIterator<Item = &'a EpochRecord>) -> Vec<Tid> {
    let mut aborted: BTreeSet<Tid> = BTreeSet::new();
    let mut committed: BTreeSet<Tid> = BTreeSet::new();
    let mut fallback: BTreeSet<Tid> = BTreeSet::new();
    let mut serial: BTreeSet<Tid> = BTreeSet::new();
    let mut edges: BTreeSet<(Tid, Tid)> = BTreeSet::new();
    for r in records {
        aborted.extend(&r.aborted1);
        committed.extend(&r.committed1);
        fallback.extend(&r.fallback);
        serial.extend(&r.serial);
        edges.extend(&r.edges);
    }
    let mut order: Vec<Tid> = aborted.into_iter().collect();
    // Kahn's algorithm, smallest tid first among the ready ones.
    let mut indegree: BTreeMap<Tid, usize> = committed.iter().map(|t| (*t, 0)).collect();
    let mut out: BTreeMap<Tid, Vec<Tid>> = BTreeMap::new();
    for (r, w) in &edges {
        assert!(
            committed.contains(r) && committed.contains(w),
            "edge {r}->{w} outside the commits"
        );
        *indegree.get_mut(w).expect("writer") += 1;
        out.entry(*r).or_default().push(*w);
    }
    let mut ready: BinaryHeap<Reverse<Tid>> = indegree
        .iter()
        .filter(|(_, d)| **d == 0)
        .map(|(t, _)| Reverse(*t))
        .collect();
    let mut placed = 0;
    while let Some(Reverse(t)) = ready.pop() {
        order.push(t);
        placed += 1;
        for w in out.get(&t).map(Vec::as_slice).unwrap_or(&[]) {
            let d = indegree.get_mut(w).expect("writer");
            *d -= 1;
            if *d == 0 {
                ready.push(Reverse(*w));
            }
        }
    }
    assert_eq!(placed, committed.len(), "phase-1 commits have a dependency cycle");
    order.extend(fallback);
    order.extend(serial);
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_come_before_writers_then_fallback() {
        let a = EpochRecord {
            committed1: vec![10, 20],
            aborted1: vec![30],
            fallback: vec![5],
            edges: vec![(20, 10)],
            ..EpochRecord::default()
        };
        let b = EpochRecord {
            committed1: vec![40],
            fallback: vec![1],
            ..EpochRecord::default()
        };
        assert_eq!(serial_order([&a, &b]), [30, 20, 10, 40, 1, 5]);
    }

    #[test]
    #[should_panic(expected = "cycle")]
    fn a_cycle_is_a_broken_invariant() {
        let a = EpochRecord {
            committed1: vec![1, 2],
            edges: vec![(1, 2), (2, 1)],
            ..EpochRecord::default()
        };
        serial_order([&a]);
    }
}
