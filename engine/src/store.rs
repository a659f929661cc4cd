//! A shard's committed state: the partitions it owns, their entities.
//!
//! Entries live in one slab per shard and are found through a hash map per
//! partition. The slab index (`slot`) is stable while an entry exists, so the
//! epoch's access records point at entries without hashing the key again
//! when they commit. Each partition also has a pseudo-entry that stands for
//! the partition as a whole: scans are recorded as reads of it.
//!
//! Entries with no value (deleted, or created by a read of a missing key)
//! are removed at the end of the epoch that left them empty.

use crate::app::App;
use crate::ids::{OpId, ShardId, partition_owner};
use crate::key::Key;
use crate::value::Value;
use hashbrown::HashTable;
use std::collections::HashMap;

/// Hash maps of the core use fixed keys: iteration order never depends on a
/// random seed (it still never reaches output or state: scans sort).
pub(crate) type Map<K, V> = HashMap<K, V, ahash::RandomState>;

pub(crate) fn new_map<K, V>() -> Map<K, V> {
    HashMap::with_hasher(fixed_state())
}

/// The hash a partition's table uses for a key of stable hash `hash`.
#[inline]
fn table_hash(hash: u64) -> u64 {
    hash.rotate_right(32)
}

pub(crate) fn fixed_state() -> ahash::RandomState {
    ahash::RandomState::with_seeds(
        0x243f_6a88_85a3_08d3,
        0x1319_8a2e_0370_7344,
        0xa409_3822_299f_31d0,
        0x082e_fa98_ec4e_6c89,
    )
}

/// One entity's committed state and its place in the current epoch.
pub(crate) struct Entry {
    pub value: Option<Value>,
    /// The epoch tables' generation in which `ordinal` is valid.
    pub generation: u32,
    /// Index of this entry's record in the epoch's touched table.
    pub ordinal: u32,
}

/// A partition's index: `(key, slot)` found by the key's stable hash. The
/// table uses the hash's high half: the low bits chose the partition, so they
/// are nearly constant within it.
pub(crate) struct Partition {
    pub map: HashTable<(Key, u32)>,
    /// The pseudo-entry standing for the whole partition.
    pub pseudo: u32,
}

struct OperatorStore {
    partitions: Vec<Option<Partition>>,
}

pub(crate) struct Store {
    pub entries: Vec<Entry>,
    free: Vec<u32>,
    operators: Vec<OperatorStore>,
    live: usize,
}

/// Entries per shard are at most this many (slots are `u32`).
pub const ENTRIES_PER_SHARD_MAX: usize = u32::MAX as usize - 1;

impl Store {
    pub fn new(app: &App, shard: ShardId, n_shards: u16) -> Store {
        let mut store = Store {
            entries: Vec::new(),
            free: Vec::new(),
            operators: Vec::new(),
            live: 0,
        };
        for (_, op) in app.operators() {
            let mut partitions = Vec::with_capacity(op.partitions() as usize);
            for p in 0..op.partitions() {
                if partition_owner(p, n_shards) == shard {
                    let pseudo = store.allocate();
                    partitions.push(Some(Partition {
                        map: HashTable::new(),
                        pseudo,
                    }));
                } else {
                    partitions.push(None);
                }
            }
            store.operators.push(OperatorStore { partitions });
        }
        store
    }

    fn allocate(&mut self) -> u32 {
        let entry = Entry {
            value: None,
            generation: 0,
            ordinal: 0,
        };
        if let Some(slot) = self.free.pop() {
            self.entries[slot as usize] = entry;
            slot
        } else {
            assert!(self.entries.len() < ENTRIES_PER_SHARD_MAX, "shard entry slab is full");
            self.entries.push(entry);
            (self.entries.len() - 1) as u32
        }
    }

    pub fn partition(&self, op: OpId, partition: u32) -> &Partition {
        self.operators[op.0 as usize].partitions[partition as usize]
            .as_ref()
            .expect("partition is owned by this shard")
    }

    fn partition_mut(&mut self, op: OpId, partition: u32) -> &mut Partition {
        self.operators[op.0 as usize].partitions[partition as usize]
            .as_mut()
            .expect("partition is owned by this shard")
    }

    /// The slot of `key` (whose stable hash is `hash`), creating an empty
    /// entry if it has none.
    #[inline]
    pub fn slot(&mut self, op: OpId, partition: u32, key: &Key, hash: u64) -> u32 {
        debug_assert_eq!(hash, key.hash64());
        let h = table_hash(hash);
        if let Some(&(_, slot)) = self.partition(op, partition).map.find(h, |(k, _)| k == key) {
            return slot;
        }
        let slot = self.allocate();
        self.partition_mut(op, partition)
            .map
            .insert_unique(h, (key.clone(), slot), |(k, _)| table_hash(k.hash64()));
        slot
    }

    #[inline]
    pub fn find(&self, op: OpId, partition: u32, key: &Key, hash: u64) -> Option<u32> {
        self.partition(op, partition)
            .map
            .find(table_hash(hash), |(k, _)| k == key)
            .map(|(_, slot)| *slot)
    }

    /// Sets an entry's value, keeping the count of live entities.
    #[inline]
    pub fn set(&mut self, slot: u32, value: Option<Value>) {
        let entry = &mut self.entries[slot as usize];
        match (&entry.value, &value) {
            (None, Some(_)) => self.live += 1,
            (Some(_), None) => self.live -= 1,
            _ => {}
        }
        entry.value = value;
    }

    /// Removes `key` if its entry holds no value.
    pub fn reclaim(&mut self, op: OpId, partition: u32, key: &Key) {
        let h = table_hash(key.hash64());
        let entries = &self.entries;
        let part = self.operators[op.0 as usize].partitions[partition as usize]
            .as_mut()
            .expect("partition is owned by this shard");
        if let Ok(found) = part.map.find_entry(h, |(k, _)| k == key) {
            let slot = found.get().1;
            if entries[slot as usize].value.is_none() {
                found.remove();
                self.free.push(slot);
            }
        }
    }

    /// The entities of a partition with a value, in key order.
    pub fn scan(&self, op: OpId, partition: u32) -> Vec<(Key, u32)> {
        let mut out: Vec<(Key, u32)> = self
            .partition(op, partition)
            .map
            .iter()
            .filter(|(_, slot)| self.entries[*slot as usize].value.is_some())
            .map(|(k, s)| (k.clone(), *s))
            .collect();
        out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Every live entity of every owned partition: `(op, partition, key, value)`.
    pub fn iter(&self) -> impl Iterator<Item = (OpId, u32, &Key, &Value)> {
        self.operators.iter().enumerate().flat_map(move |(op, store)| {
            store.partitions.iter().enumerate().flat_map(move |(p, part)| {
                part.iter().flat_map(move |part| {
                    part.map.iter().filter_map(move |(k, slot)| {
                        self.entries[*slot as usize]
                            .value
                            .as_ref()
                            .map(|v| (OpId(op as u16), p as u32, k, v))
                    })
                })
            })
        })
    }

    /// Entities that hold a value.
    pub fn live(&self) -> usize {
        self.live
    }

    /// Writes a value directly, outside any transaction (loading, recovery).
    pub fn load(&mut self, op: OpId, partition: u32, key: &Key, value: Option<Value>) {
        let slot = self.slot(op, partition, key, key.hash64());
        self.set(slot, value);
        self.reclaim(op, partition, key);
    }

    /// Resets the generation stamp of every entry (the epoch tables wrapped).
    pub fn reset_generations(&mut self) {
        for e in &mut self.entries {
            e.generation = 0;
        }
    }
}
