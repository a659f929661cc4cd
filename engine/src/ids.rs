//! Identifiers: transactions, epochs, shards, operators and functions.

use crate::key::Key;
use std::fmt;

/// A transaction id. The global serial order of an epoch is derived from tid
/// order: `tid = lc * n_seq + sid` with `sid` in `1..=n_seq`, so tids of
/// different sequencers never collide and interleave fairly.
pub type Tid = u64;

/// An epoch number. Epoch 0 is never run: the first epoch is 1.
pub type Epoch = u64;

/// A shard's index, `0..n_shards`. Its sequencer id is `index + 1`.
pub type ShardId = u16;

/// The most shards one engine runs (a [`ShardSet`] is one `u64`).
pub const SHARDS_MAX: usize = 64;

/// An operator: an entity type, by its index in the application.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(pub u16);

/// A function of an operator, by index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FnId {
    pub op: OpId,
    pub index: u16,
}

/// Where a function runs: on one entity, or on a whole partition.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Address {
    Entity(Key),
    Partition(u32),
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Entity(k) => write!(f, "{k}"),
            Address::Partition(p) => write!(f, "partition {p}"),
        }
    }
}

/// A set of shards, one bit each.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ShardSet(u64);

impl ShardSet {
    pub const EMPTY: ShardSet = ShardSet(0);

    pub fn one(shard: ShardId) -> ShardSet {
        assert!((shard as usize) < SHARDS_MAX);
        ShardSet(1 << shard)
    }

    pub fn insert(&mut self, shard: ShardId) {
        assert!((shard as usize) < SHARDS_MAX);
        self.0 |= 1 << shard;
    }

    pub fn union(self, other: ShardSet) -> ShardSet {
        ShardSet(self.0 | other.0)
    }

    pub fn contains(self, shard: ShardId) -> bool {
        self.0 & (1 << shard) != 0
    }

    pub fn iter(self) -> impl Iterator<Item = ShardId> {
        let mut bits = self.0;
        std::iter::from_fn(move || {
            if bits == 0 {
                return None;
            }
            let shard = bits.trailing_zeros() as ShardId;
            bits &= bits - 1;
            Some(shard)
        })
    }

    pub fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn bits(self) -> u64 {
        self.0
    }

    pub fn from_bits(bits: u64) -> ShardSet {
        ShardSet(bits)
    }
}

impl fmt::Debug for ShardSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

/// The shard that owns `partition` among `n_shards`.
#[inline]
pub fn partition_owner(partition: u32, n_shards: u16) -> ShardId {
    (partition % u32::from(n_shards)) as ShardId
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_set_iterates_in_order() {
        let mut s = ShardSet::EMPTY;
        for x in [5, 0, 63, 5] {
            s.insert(x);
        }
        assert_eq!(s.iter().collect::<Vec<_>>(), [0, 5, 63]);
        assert_eq!(s.len(), 3);
        assert!(s.contains(63) && !s.contains(1));
    }
}
