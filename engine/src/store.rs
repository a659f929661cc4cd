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
use crate::ids::{OpId, ShardId};
use crate::key::Key;
use crate::partition_map::PartitionMap;
use crate::value::Value;
use hashbrown::HashTable;
use std::collections::HashMap;

/// Hash maps of the core use fixed keys: iteration order never depends on a
/// random seed (it still never reaches output or state: scans sort).
pub(crate) type Map<K, V> = HashMap<K, V, ahash::RandomState>;

pub(crate) fn new_map<K, V>() -> Map<K, V> {
    HashMap::with_hasher(fixed_state())
}

/// Maps keyed by transaction id, looked up on every invocation: tids are
/// distinct integers, so one multiply hashes them (ahash's portable
/// fallback costs several times more). Deterministic like `Map`.
pub(crate) type TidMap<V> = HashMap<crate::ids::Tid, V, std::hash::BuildHasherDefault<TidHasher>>;

pub(crate) fn new_tid_map<V>() -> TidMap<V> {
    HashMap::default()
}

/// A multiplicative hash of one `u64` (Fibonacci hashing), folded so that
/// both the table's index bits (low) and its tag bits (high) vary.
#[derive(Default)]
pub(crate) struct TidHasher(u64);

impl std::hash::Hasher for TidHasher {
    #[inline]
    fn write_u64(&mut self, n: u64) {
        let h = (self.0 ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = h ^ (h >> 29);
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(b));
        }
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
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

/// One entity: its key, committed state and place in the current epoch.
/// One cache line: a lookup that finds the slot brings the whole entry in.
#[repr(C, align(64))]
pub(crate) struct Entry {
    /// `None` only for a partition's pseudo-entry.
    pub key: Option<Key>,
    pub value: Option<Value>,
    /// The epoch tables' generation in which `ordinal` is valid.
    pub generation: u32,
    /// Index of this entry's record in the epoch's touched table.
    pub ordinal: u32,
}

const _: () = assert!(std::mem::size_of::<Entry>() == 64);

mod partition {
    use hashbrown::HashTable;

    /// A partition's index: slots found by their key's stable hash, keys
    /// compared in the slab (4 bytes a bucket: at 1M keys the index is ~10 MB
    /// instead of ~66 MB with keys in the buckets). The table uses the hash's
    /// high half: the low bits chose the partition, so they are nearly
    /// constant within it.
    pub(crate) struct Partition {
        /// Changed only through [`Partition::map_mut`] (this module keeps
        /// it private), which drops `order`.
        map: HashTable<u32>,
        /// The pseudo-entry standing for the whole partition.
        pub pseudo: u32,
        /// The table's slots in key order, made by a scan and kept until a
        /// key comes or goes (a value's change leaves it valid: scans skip
        /// entries without one), so the pages of a dump each find their
        /// place in it instead of sorting the partition again. 4 bytes an
        /// entity, only for partitions scanned since their last insert or
        /// removal.
        order: Option<Vec<u32>>,
    }

    impl Partition {
        pub fn new(map: HashTable<u32>, pseudo: u32) -> Partition {
            Partition {
                map,
                pseudo,
                order: None,
            }
        }

        #[inline]
        pub fn map(&self) -> &HashTable<u32> {
            &self.map
        }

        /// The table, to change: the key order is made again at the next
        /// scan.
        #[inline]
        pub fn map_mut(&mut self) -> &mut HashTable<u32> {
            self.order = None;
            &mut self.map
        }

        /// The table's slots sorted by their key bytes (`key` reads a
        /// slot's key in the slab), made now if no scan made it since the
        /// last change. The sort compares the keys' first 8 bytes as one
        /// big-endian number, zero-padded (an order that agrees with the
        /// bytes' wherever it is strict), held beside the slot, and reads
        /// the keys in the slab only on a tie, not in the sort's random
        /// order for every comparison.
        pub fn order<'a>(&mut self, key: impl Fn(u32) -> &'a [u8]) -> &[u32] {
            let map = &self.map;
            self.order.get_or_insert_with(|| {
                let prefix = |k: &[u8]| {
                    let mut b = [0u8; 8];
                    let n = k.len().min(8);
                    b[..n].copy_from_slice(&k[..n]);
                    u64::from_be_bytes(b)
                };
                let mut keyed: Vec<(u64, u32)> = map.iter().map(|s| (prefix(key(*s)), *s)).collect();
                keyed.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| key(a.1).cmp(key(b.1))));
                keyed.into_iter().map(|(_, s)| s).collect()
            })
        }
    }
}
pub(crate) use partition::Partition;

struct OperatorStore {
    partitions: Vec<Option<Partition>>,
}

pub(crate) struct Store {
    pub entries: Vec<Entry>,
    /// Per slot, beside `entries` (which is exactly one cache line): the
    /// operator and the snapshot marks.
    meta: Vec<SlotMeta>,
    free: Vec<u32>,
    operators: Vec<OperatorStore>,
    live: usize,
    /// Slots changed since the last snapshot began (each marked `DIRTY`).
    dirty: Vec<u32>,
    /// Whether snapshots are taken: without them nothing is marked dirty,
    /// and a deleted entity's slot is reclaimed at once instead of kept as
    /// a tombstone for a snapshot that never comes.
    snapshots: bool,
    /// Old values of `PENDING` slots saved before being overwritten: the
    /// running snapshot's copy-on-write.
    saved: Vec<(OpId, Key, Option<Value>)>,
    /// Entities loaded in bulk ([`Store::stage`]) but not yet in their
    /// partition's table: the first of their slots (they run to the end
    /// of the slab) and, per slot, its partition's number across operators
    /// and its key's stable hash.
    staged: Option<(u32, Vec<u32>, Vec<u64>)>,
    /// Partitions being copied here by moves under way, each indexed by a
    /// table of its own: their entries are in the slab but in no owned
    /// partition's table, not live and not dirty, so nothing sees them
    /// until [`Store::install_incoming`].
    incoming: Vec<(OpId, u32, HashTable<u32>)>,
}

#[derive(Clone, Copy, Default)]
struct SlotMeta {
    op: u16,
    marks: u8,
}

/// Changed since the last snapshot began.
const DIRTY: u8 = 1;
/// Part of the running snapshot and not copied yet.
const PENDING: u8 = 2;

/// Entries per shard are at most this many (slots are `u32`).
pub const ENTRIES_PER_SHARD_MAX: usize = u32::MAX as usize - 1;

impl Store {
    pub fn new(app: &App, shard: ShardId, map: &PartitionMap) -> Store {
        let mut store = Store {
            entries: Vec::new(),
            meta: Vec::new(),
            free: Vec::new(),
            operators: Vec::new(),
            live: 0,
            dirty: Vec::new(),
            snapshots: true,
            saved: Vec::new(),
            staged: None,
            incoming: Vec::new(),
        };
        for (op_id, op) in app.operators() {
            let partitions = (0..op.partitions()).map(|_| None).collect();
            store.operators.push(OperatorStore { partitions });
            for p in map.owned(op_id, shard) {
                store.ensure_partition(op_id, p);
            }
        }
        store
    }

    /// Whether snapshots are taken (`Config::snapshot_interval_us` > 0);
    /// without, changes are not tracked for them. Set before any change.
    pub fn set_snapshots(&mut self, on: bool) {
        assert!(self.dirty.is_empty(), "snapshots switched after changes were tracked");
        self.snapshots = on;
    }

    /// Gives this shard a table for `partition` of `op` if it has none (a
    /// partition it owns from the start, or one moved or restored here). A
    /// partition moved away keeps its table: its entities' tombstones stay
    /// in it until a snapshot copied them.
    pub fn ensure_partition(&mut self, op: OpId, partition: u32) {
        if self.operators[op.0 as usize].partitions[partition as usize].is_some() {
            return;
        }
        let pseudo = self.allocate(op, None);
        self.operators[op.0 as usize].partitions[partition as usize] = Some(Partition::new(HashTable::new(), pseudo));
    }

    /// Whether this shard has a table for `partition` of `op`.
    pub fn has_partition(&self, op: OpId, partition: u32) -> bool {
        self.operators[op.0 as usize].partitions[partition as usize].is_some()
    }

    fn allocate(&mut self, op: OpId, key: Option<Key>) -> u32 {
        let entry = Entry {
            key,
            value: None,
            generation: 0,
            ordinal: 0,
        };
        let meta = SlotMeta { op: op.0, marks: 0 };
        if let Some(slot) = self.free.pop() {
            self.entries[slot as usize] = entry;
            self.meta[slot as usize] = meta;
            slot
        } else {
            assert!(self.entries.len() < ENTRIES_PER_SHARD_MAX, "shard entry slab is full");
            self.entries.push(entry);
            self.meta.push(meta);
            (self.entries.len() - 1) as u32
        }
    }

    pub fn partition(&self, op: OpId, partition: u32) -> &Partition {
        self.operators[op.0 as usize].partitions[partition as usize]
            .as_ref()
            .expect("partition is owned by this shard")
    }

    /// The slot of `key` (whose stable hash is `hash`), creating an empty
    /// entry if it has none.
    #[inline]
    pub fn slot(&mut self, op: OpId, partition: u32, key: &Key, hash: u64) -> u32 {
        debug_assert_eq!(hash, key.hash64());
        if let Some(slot) = self.find(op, partition, key, hash) {
            return slot;
        }
        let slot = self.allocate(op, Some(key.clone()));
        let entries = &self.entries;
        let part = self.operators[op.0 as usize].partitions[partition as usize]
            .as_mut()
            .expect("partition is owned by this shard");
        part.map_mut().insert_unique(table_hash(hash), slot, |s| {
            table_hash(entries[*s as usize].key.as_ref().expect("entity entry").hash64())
        });
        slot
    }

    #[inline]
    pub fn find(&self, op: OpId, partition: u32, key: &Key, hash: u64) -> Option<u32> {
        self.find_in(self.partition(op, partition), key, hash)
    }

    /// The slot of `key` in `part`'s table.
    #[inline]
    fn find_in(&self, part: &Partition, key: &Key, hash: u64) -> Option<u32> {
        let entries = &self.entries;
        part.map()
            .find(table_hash(hash), |s| entries[*s as usize].key.as_ref() == Some(key))
            .copied()
    }

    /// The first slot whose table tag matches `hash` in `partition` of
    /// `op` (the key's slot unless a rare tag collision), if the partition
    /// is owned here. Half of warming a lookup: it loads the table's
    /// control bytes and bucket but not the entry, so a batch's probes
    /// overlap and its entries are touched after ([`Store::touch`]),
    /// instead of each at the end of its own chain of three dependent
    /// misses (control bytes, bucket, entry). Called for a batch of
    /// invocations before any of them runs.
    #[inline]
    pub fn probe(&self, op: OpId, partition: u32, hash: u64) -> Option<u32> {
        let part = self
            .operators
            .get(op.0 as usize)
            .and_then(|o| o.partitions.get(partition as usize))?
            .as_ref()?;
        part.map().iter_hash(table_hash(hash)).next().copied()
    }

    /// Touches the entry at `slot` and the bytes of its value, and returns
    /// a byte of them; nothing changes.
    #[inline]
    pub fn touch(&self, slot: u32) -> u8 {
        self.entries
            .get(slot as usize)
            .and_then(|e| e.value.as_ref())
            .map_or(0, Value::touch)
    }

    /// Sets an entry's value, keeping the count of live entities and the
    /// snapshot marks: the old value of a slot the running snapshot has not
    /// copied yet is saved first, and the slot becomes dirty for the next.
    #[inline]
    pub fn set(&mut self, slot: u32, value: Option<Value>) {
        let meta = &mut self.meta[slot as usize];
        let entry = &mut self.entries[slot as usize];
        if meta.marks & PENDING != 0 {
            meta.marks &= !PENDING;
            let key = entry.key.clone().expect("only entities are snapshotted");
            self.saved.push((OpId(meta.op), key, entry.value.clone()));
        }
        if self.snapshots && meta.marks & DIRTY == 0 {
            meta.marks |= DIRTY;
            self.dirty.push(slot);
        }
        match (&entry.value, &value) {
            (None, Some(_)) => self.live += 1,
            (Some(_), None) => self.live -= 1,
            _ => {}
        }
        entry.value = value;
    }

    /// Marks every dirty slot as part of a new snapshot and returns them; the
    /// caller copies them with [`Store::copy_pending`] (or `set` saves them
    /// first). Slots stay allocated until copied, so deletes reach the
    /// snapshot as tombstones.
    pub fn begin_snapshot(&mut self) -> Vec<u32> {
        let pending = std::mem::take(&mut self.dirty);
        for slot in &pending {
            let m = &mut self.meta[*slot as usize];
            debug_assert!(m.marks & DIRTY != 0);
            m.marks = (m.marks & !DIRTY) | PENDING;
        }
        pending
    }

    /// Copies `slot` into `out` if the running snapshot still needs it.
    pub fn copy_pending(&mut self, slot: u32, out: &mut Vec<(OpId, Key, Option<Value>)>) {
        let meta = &mut self.meta[slot as usize];
        if meta.marks & PENDING == 0 {
            return;
        }
        meta.marks &= !PENDING;
        let entry = &self.entries[slot as usize];
        let key = entry.key.clone().expect("only entities are snapshotted");
        out.push((OpId(meta.op), key, entry.value.clone()));
    }

    /// Old values saved by copy-on-write since the last call.
    pub fn take_saved(&mut self, out: &mut Vec<(OpId, Key, Option<Value>)>) {
        out.append(&mut self.saved);
    }

    /// Whether a slot's tombstone must wait for a snapshot before its slot
    /// is reclaimed.
    fn marked(&self, slot: u32) -> bool {
        self.meta[slot as usize].marks != 0
    }

    /// Removes `key` if its entry holds no value.
    pub fn reclaim(&mut self, op: OpId, partition: u32, key: &Key) {
        let h = table_hash(key.hash64());
        let entries = &self.entries;
        let part = self.operators[op.0 as usize].partitions[partition as usize]
            .as_mut()
            .expect("partition is owned by this shard");
        if let Ok(found) = part
            .map_mut()
            .find_entry(h, |s| entries[*s as usize].key.as_ref() == Some(key))
        {
            let slot = *found.get();
            if entries[slot as usize].value.is_none() && self.meta[slot as usize].marks == 0 {
                found.remove();
                self.entries[slot as usize].key = None;
                self.free.push(slot);
            }
        }
    }

    /// The slots of a partition's table, tombstones included, in the
    /// table's order (not a stable order: see [`Store::entity_at`]). It
    /// reads only the table, not the entries, so 100 000 slots cost a copy
    /// of 400 KB, not 100 000 cache misses.
    pub fn table_slots(&self, op: OpId, partition: u32) -> Vec<u32> {
        self.partition(op, partition).map().iter().copied().collect()
    }

    /// The slots of a partition's entities that hold a value, in the
    /// table's order (not a stable order: see [`Store::entity_at`]).
    pub fn live_slots(&self, op: OpId, partition: u32) -> Vec<u32> {
        self.partition(op, partition)
            .map()
            .iter()
            .copied()
            .filter(|slot| self.entries[*slot as usize].value.is_some())
            .collect()
    }

    /// The entity at `slot` if it is one of `partition` of `op` and holds a
    /// value (a slot taken earlier may since have been freed and reused).
    pub fn entity_at(&self, slot: u32, op: OpId, partition: u32) -> Option<(&Key, &Value)> {
        let e = self.entries.get(slot as usize)?;
        if self.meta[slot as usize].op != op.0 {
            return None;
        }
        let partitions = self.operators[op.0 as usize].partitions.len() as u32;
        match (&e.key, &e.value) {
            (Some(k), Some(v)) if k.partition(partitions) == partition => Some((k, v)),
            _ => None,
        }
    }

    /// Adds entities to the incoming copy of `partition` of `op` (a move
    /// to this shard under way): in the slab, invisible until installed. A
    /// key staged again takes the later value.
    pub fn stage_incoming(&mut self, op: OpId, partition: u32, entities: Vec<(Key, Value)>) {
        if entities.is_empty() {
            return;
        }
        let at = match self.incoming.iter().position(|(o, p, _)| (*o, *p) == (op, partition)) {
            Some(at) => at,
            None => {
                self.incoming.push((op, partition, HashTable::new()));
                self.incoming.len() - 1
            }
        };
        let mut table = std::mem::take(&mut self.incoming[at].2);
        for (key, value) in entities {
            let hash = key.hash64();
            let entries = &self.entries;
            let found = table
                .find(table_hash(hash), |s| entries[*s as usize].key.as_ref() == Some(&key))
                .copied();
            let slot = match found {
                Some(slot) => slot,
                None => {
                    let slot = self.allocate(op, Some(key));
                    let entries = &self.entries;
                    table.insert_unique(table_hash(hash), slot, |s| {
                        table_hash(entries[*s as usize].key.as_ref().expect("entity entry").hash64())
                    });
                    slot
                }
            };
            self.entries[slot as usize].value = Some(value);
        }
        self.incoming[at].2 = table;
    }

    /// Makes the incoming copy of `partition` of `op` part of the store
    /// (its move switched): live, and dirty for the next snapshot. With no
    /// table for the partition here, or an empty one, the copy's table
    /// becomes it whole; otherwise (the partition was here before and its
    /// tombstones wait for a snapshot) its entities go in one by one.
    pub fn install_incoming(&mut self, op: OpId, partition: u32) {
        let Some(at) = self.incoming.iter().position(|(o, p, _)| (*o, *p) == (op, partition)) else {
            self.ensure_partition(op, partition);
            return;
        };
        let (_, _, table) = self.incoming.swap_remove(at);
        let here = self.operators[op.0 as usize].partitions[partition as usize]
            .as_ref()
            .map(|p| (p.map().len(), p.pseudo));
        if let Some((0, pseudo)) = here {
            // Here before, its tombstones all reclaimed: adopt the copy's
            // table under the old pseudo-entry.
            self.adopt(op, partition, table, pseudo);
            return;
        }
        if here.is_some() {
            for slot in table {
                let key = self.entries[slot as usize].key.take().expect("an incoming entity");
                let value = self.entries[slot as usize].value.take();
                self.free.push(slot);
                let to = self.slot(op, partition, &key, key.hash64());
                self.set(to, value);
            }
            return;
        }
        let pseudo = self.allocate(op, None);
        self.adopt(op, partition, table, pseudo);
    }

    /// Makes `table`'s entries, staged and invisible, the partition's: live
    /// and dirty for the next snapshot.
    fn adopt(&mut self, op: OpId, partition: u32, table: HashTable<u32>, pseudo: u32) {
        if self.snapshots {
            for &slot in &table {
                let m = &mut self.meta[slot as usize];
                debug_assert_eq!(m.marks, 0);
                m.marks = DIRTY;
                self.dirty.push(slot);
            }
        }
        self.live += table.len();
        self.operators[op.0 as usize].partitions[partition as usize] = Some(Partition::new(table, pseudo));
    }

    /// [`Store::scan_into`] into a new vector.
    #[cfg(test)]
    pub fn scan(&mut self, op: OpId, partition: u32, after: Option<&[u8]>, at_most: usize) -> Vec<u32> {
        let mut slots = Vec::new();
        self.scan_into(op, partition, after, at_most, &mut slots);
        slots
    }

    /// The slots of a partition's entities with a value, in key order: the
    /// first `at_most` whose key bytes sort after `after` (all of them with
    /// `None`, `usize::MAX`). The partition is sorted once and the order
    /// kept until a key comes or goes, so a page costs a binary search and
    /// the page, not a sort of the partition. Into `slots` (cleared first),
    /// so a caller that keeps the vector scans without allocating.
    pub fn scan_into(&mut self, op: OpId, partition: u32, after: Option<&[u8]>, at_most: usize, slots: &mut Vec<u32>) {
        slots.clear();
        let entries = &self.entries;
        let key = |slot: u32| entries[slot as usize].key.as_ref().expect("entity entry").as_bytes();
        let part = self.operators[op.0 as usize].partitions[partition as usize]
            .as_mut()
            .expect("partition is owned by this shard");
        let order = part.order(key);
        let start = after.map_or(0, |a| order.partition_point(|s| key(*s) <= a));
        slots.extend(
            order[start..]
                .iter()
                .copied()
                .filter(|slot| entries[*slot as usize].value.is_some())
                .take(at_most),
        );
    }

    /// Every live entity of every owned partition: `(op, partition, key, value)`.
    pub fn iter(&self) -> impl Iterator<Item = (OpId, u32, &Key, &Value)> {
        self.operators.iter().enumerate().flat_map(move |(op, store)| {
            store.partitions.iter().enumerate().flat_map(move |(p, part)| {
                part.iter().flat_map(move |part| {
                    part.map().iter().filter_map(move |slot| {
                        let e = &self.entries[*slot as usize];
                        match (&e.key, &e.value) {
                            (Some(k), Some(v)) => Some((OpId(op as u16), p as u32, k, v)),
                            _ => None,
                        }
                    })
                })
            })
        })
    }

    /// Every entity of the partitions `keep` says yes to, moved out (the
    /// store is consumed: nothing is cloned), a partition after another.
    pub fn into_live(mut self, mut keep: impl FnMut(OpId, u32) -> bool) -> Vec<(OpId, Key, Value)> {
        let mut out = Vec::with_capacity(self.live);
        let entries = &mut self.entries;
        for (op, store) in self.operators.iter().enumerate() {
            for (p, part) in store.partitions.iter().enumerate() {
                let Some(part) = part else { continue };
                if !keep(OpId(op as u16), p as u32) {
                    continue;
                }
                for slot in part.map().iter() {
                    let e = &mut entries[*slot as usize];
                    if let (Some(_), Some(_)) = (&e.key, &e.value) {
                        let (key, value) = (e.key.take(), e.value.take());
                        out.push((OpId(op as u16), key.expect("checked"), value.expect("checked")));
                    }
                }
            }
        }
        out
    }

    /// Starts tracking changes for snapshots if this store did not (its
    /// shard is configured without snapshots, yet the shards agreed on one:
    /// a peer configured otherwise voted, or a snapshot was due when the
    /// shard was handed here), marking every entity; returns whether it did
    /// — the snapshot must then hold them all (a base), as nothing before
    /// it was tracked.
    pub fn start_tracking(&mut self) -> bool {
        if self.snapshots {
            return false;
        }
        self.snapshots = true;
        self.mark_all_dirty();
        true
    }

    /// Marks every entity changed since the last snapshot (none was taken
    /// here): the next snapshot holds them all.
    pub fn mark_all_dirty(&mut self) {
        if !self.snapshots {
            return;
        }
        for (slot, (e, m)) in self.entries.iter().zip(self.meta.iter_mut()).enumerate() {
            if e.value.is_some() && m.marks & DIRTY == 0 {
                m.marks |= DIRTY;
                self.dirty.push(slot as u32);
            }
        }
    }

    /// Entities that hold a value.
    pub fn live(&self) -> usize {
        self.live
    }

    /// Writes a value directly, outside any transaction (loading, recovery).
    /// `dirty`: whether the next snapshot must include it (false when it
    /// comes from a snapshot already).
    pub fn load(&mut self, op: OpId, partition: u32, key: &Key, value: Option<Value>, dirty: bool) {
        let slot = self.slot(op, partition, key, key.hash64());
        if dirty {
            self.set(slot, value);
        } else {
            assert_eq!(self.meta[slot as usize].marks & PENDING, 0, "load during a snapshot");
            let entry = &mut self.entries[slot as usize];
            match (&entry.value, &value) {
                (None, Some(_)) => self.live += 1,
                (Some(_), None) => self.live -= 1,
                _ => {}
            }
            entry.value = value;
        }
        if self.entries[slot as usize].value.is_none() {
            self.reclaim(op, partition, key);
        }
    }

    /// [`Store::load`] of a snapshot's entity (a value, not dirty) whose
    /// stable hash `hash` the caller computed: one probe of the partition's
    /// table finds the key or the place to insert it. Restoring millions of
    /// entities is recovery's main cost, so this skips what `load` does for
    /// the general case (a second lookup to reclaim an empty entry, hashing
    /// the key three times).
    #[inline]
    pub fn load_snapshot(&mut self, op: OpId, partition: u32, key: &Key, hash: u64, value: Value) {
        debug_assert_eq!(hash, key.hash64());
        self.ensure_partition(op, partition);
        let entries = &self.entries;
        let part = self.operators[op.0 as usize].partitions[partition as usize]
            .as_mut()
            .expect("partition is owned by this shard");
        let found = part.map_mut().entry(
            table_hash(hash),
            |s| entries[*s as usize].key.as_ref() == Some(key),
            |s| table_hash(entries[*s as usize].key.as_ref().expect("entity entry").hash64()),
        );
        let slot = match found {
            hashbrown::hash_table::Entry::Occupied(o) => *o.get(),
            hashbrown::hash_table::Entry::Vacant(v) => {
                // `allocate` without the free list: nothing was freed yet
                // when loading, but keep it correct if something was.
                let slot = match self.free.pop() {
                    Some(slot) => slot,
                    None => {
                        assert!(self.entries.len() < ENTRIES_PER_SHARD_MAX, "shard entry slab is full");
                        self.entries.len() as u32
                    }
                };
                v.insert(slot);
                let entry = Entry {
                    key: Some(key.clone()),
                    value: None,
                    generation: 0,
                    ordinal: 0,
                };
                let meta = SlotMeta { op: op.0, marks: 0 };
                if (slot as usize) < self.entries.len() {
                    self.entries[slot as usize] = entry;
                    self.meta[slot as usize] = meta;
                } else {
                    self.entries.push(entry);
                    self.meta.push(meta);
                }
                slot
            }
        };
        assert_eq!(self.meta[slot as usize].marks & PENDING, 0, "load during a snapshot");
        let entry = &mut self.entries[slot as usize];
        if entry.value.is_none() {
            self.live += 1;
        }
        entry.value = Some(value);
    }

    /// Appends a snapshot's entity (a value, not dirty) to the slab without
    /// indexing it: [`Store::index_staged`] then fills each partition's
    /// table in one go. Inserted one by one, in key order, millions of
    /// entities hit every partition's table at random, a cache and TLB miss
    /// each; a partition at a time, its table stays in cache.
    /// `hash` is the key's stable hash (the caller has it: it chose the
    /// partition), kept so that indexing reads neither the key nor the slab
    /// unless a table's probe meets a likely equal key.
    pub fn stage(&mut self, op: OpId, partition: u32, key: Key, hash: u64, value: Value) {
        debug_assert_eq!(hash, key.hash64());
        let first = self.entries.len() as u32;
        let group = self.groups_before(op) + partition;
        let (_, groups, hashes) = self.staged.get_or_insert_with(|| (first, Vec::new(), Vec::new()));
        groups.push(group);
        hashes.push(hash);
        assert!(self.entries.len() < ENTRIES_PER_SHARD_MAX, "shard entry slab is full");
        self.entries.push(Entry {
            key: Some(key),
            value: Some(value),
            generation: 0,
            ordinal: 0,
        });
        self.meta.push(SlotMeta { op: op.0, marks: 0 });
        self.live += 1;
    }

    /// Partitions of the operators before `op` (a partition's number across
    /// operators is this plus its own).
    fn groups_before(&self, op: OpId) -> u32 {
        self.operators[..op.0 as usize]
            .iter()
            .map(|o| o.partitions.len() as u32)
            .sum()
    }

    /// Puts the staged entities into their partitions' tables, a partition
    /// at a time (slots in the order they were staged, so that of a key
    /// staged twice, or already present, the last value wins, as with
    /// [`Store::load_snapshot`]).
    pub fn index_staged(&mut self) {
        let Some((first, groups, hashes)) = self.staged.take() else {
            return;
        };
        assert_eq!(
            first as usize + groups.len(),
            self.entries.len(),
            "entities appended while staging"
        );
        // A counting sort of the staged slots by partition (stable).
        let total = self.groups_before(OpId(self.operators.len() as u16)) as usize;
        // A snapshot taken after a move may hold partitions this shard did
        // not own by the default rule: give them tables (after the check
        // above: a table's pseudo-entry may go at the end of the slab).
        let mut present = vec![false; total];
        for g in &groups {
            present[*g as usize] = true;
        }
        let mut group = 0;
        for op in 0..self.operators.len() {
            for p in 0..self.operators[op].partitions.len() as u32 {
                if present[group] {
                    self.ensure_partition(OpId(op as u16), p);
                }
                group += 1;
            }
        }
        let mut start = vec![0u32; total + 1];
        for g in &groups {
            start[*g as usize + 1] += 1;
        }
        for i in 0..total {
            start[i + 1] += start[i];
        }
        // Each group's slots with their hashes, a group after another (its
        // end is then in `start`).
        let mut order = vec![(0u64, 0u32); groups.len()];
        for (i, g) in groups.iter().enumerate() {
            let at = &mut start[*g as usize];
            order[*at as usize] = (hashes[i], first + i as u32);
            *at += 1;
        }
        drop((groups, hashes));
        let (mut group, mut begin) = (0, 0);
        for op in 0..self.operators.len() {
            for partition in 0..self.operators[op].partitions.len() {
                let end = start[group] as usize;
                for &(hash, slot) in &order[begin..end] {
                    let entries = &self.entries;
                    let part = self.operators[op].partitions[partition]
                        .as_mut()
                        .expect("partition is owned by this shard");
                    let found = part.map_mut().entry(
                        table_hash(hash),
                        |s| entries[*s as usize].key == entries[slot as usize].key,
                        |s| table_hash(entries[*s as usize].key.as_ref().expect("entity entry").hash64()),
                    );
                    match found {
                        hashbrown::hash_table::Entry::Vacant(v) => {
                            v.insert(slot);
                        }
                        hashbrown::hash_table::Entry::Occupied(o) => {
                            // The key was there already: its slot takes the
                            // value, this one is freed.
                            let old = *o.get();
                            assert_eq!(self.meta[old as usize].marks & PENDING, 0, "load during a snapshot");
                            let value = self.entries[slot as usize].value.take();
                            self.entries[slot as usize].key = None;
                            self.free.push(slot);
                            if self.entries[old as usize].value.is_some() {
                                self.live -= 1;
                            }
                            self.entries[old as usize].value = value;
                        }
                    }
                }
                (group, begin) = (group + 1, end);
            }
        }
    }

    /// Makes room for about `entities` more entities, spread evenly over
    /// the owned partitions, so that loading a snapshot neither regrows the
    /// slab (copying it) nor rehashes the partitions' tables (which hashes
    /// every key again, in random slab order). A hint: more still fit.
    pub fn reserve(&mut self, entities: usize) {
        let owned: usize = self
            .operators
            .iter()
            .map(|o| o.partitions.iter().filter(|p| p.is_some()).count())
            .sum();
        if entities == 0 || owned == 0 {
            return;
        }
        self.entries.reserve(entities);
        self.meta.reserve(entities);
        let per_partition = entities.div_ceil(owned);
        let entries = &self.entries;
        for part in self
            .operators
            .iter_mut()
            .flat_map(|o| o.partitions.iter_mut().flatten())
        {
            part.map_mut().reserve(per_partition, |s| {
                table_hash(entries[*s as usize].key.as_ref().expect("entity entry").hash64())
            });
        }
    }

    /// Removes the entry at `slot` if it is empty and no snapshot needs it.
    pub fn reclaim_slot(&mut self, slot: u32) {
        let (op, key) = {
            let e = &self.entries[slot as usize];
            match (&e.key, &e.value) {
                (Some(k), None) if !self.marked(slot) => (OpId(self.meta[slot as usize].op), k.clone()),
                _ => return,
            }
        };
        let partitions = self.operators[op.0 as usize].partitions.len() as u32;
        self.reclaim(op, key.partition(partitions), &key);
    }

    /// Resets the generation stamp of every entry (the epoch tables wrapped).
    pub fn reset_generations(&mut self) {
        for e in &mut self.entries {
            e.generation = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// A bounded scan is the same page as sorting the whole partition,
    /// dropping keys up to `after` and taking `at_most`; deleted entities
    /// (tombstones) never show, and keys added or removed after a scan
    /// (which keeps the partition's key order) show in the next.
    #[test]
    fn a_bounded_scan_is_a_page_of_the_sorted_partition() {
        let mut app = App::new("t");
        let op = app.operator("a", 1);
        let map = PartitionMap::new(&app, 1);
        let mut store = Store::new(&app, 0, &map);
        let mut rng = Rng::new(7);
        let mut live = std::collections::BTreeSet::new();
        for round in 0..4 {
            // Keys of 1..=9 bytes from a small alphabet: shared prefixes,
            // keys that are prefixes of others, ties in the first 8 bytes.
            for _ in 0..300 {
                let len = 1 + rng.below(if round % 2 == 0 { 4 } else { 9 }) as usize;
                let key: Vec<u8> = (0..len).map(|_| rng.below(3) as u8).collect();
                let value = (rng.below(4) > 0).then(|| Value::from_bytes(&key));
                match &value {
                    Some(_) => live.insert(key.clone()),
                    None => live.remove(&key),
                };
                store.load(op, 0, &Key::from_bytes(&key), value, round % 2 == 0);
            }
            let sorted: Vec<Vec<u8>> = live.iter().cloned().collect();
            let mut afters: Vec<Option<Vec<u8>>> = vec![None, Some(vec![]), Some(vec![9])];
            afters.extend(sorted.iter().step_by(7).map(|k| Some(k.clone())));
            afters.push(Some(vec![1, 2, 2, 2, 2, 2, 2, 2, 2, 2]));
            for after in &afters {
                for at_most in [0, 1, 2, 5, 64, usize::MAX] {
                    let expected: Vec<Vec<u8>> = sorted
                        .iter()
                        .filter(|k| after.as_ref().is_none_or(|a| k.as_slice() > a.as_slice()))
                        .take(at_most)
                        .cloned()
                        .collect();
                    let slots = store.scan(op, 0, after.as_deref(), at_most);
                    let got: Vec<Vec<u8>> = slots
                        .into_iter()
                        .map(|s| store.entries[s as usize].key.as_ref().unwrap().as_bytes().to_vec())
                        .collect();
                    assert_eq!(got, expected, "round {round}, after {after:?}, at most {at_most}");
                }
            }
        }
    }

    /// Without snapshots a deleted entity's slot is reclaimed at once and
    /// reused (entities created and deleted forever do not grow the slab);
    /// with them it stays a tombstone until a snapshot copied it.
    #[test]
    fn deleted_slots_are_kept_only_for_snapshots() {
        let mut app = App::new("t");
        let op = app.operator("a", 1);
        let map = PartitionMap::new(&app, 1);
        for snapshots in [false, true] {
            let mut store = Store::new(&app, 0, &map);
            store.set_snapshots(snapshots);
            for i in 0..1_000u64 {
                let key = Key::from(i);
                let slot = store.slot(op, 0, &key, key.hash64());
                store.set(slot, Some(Value::from_bytes(b"v")));
                store.set(slot, None);
                store.reclaim_slot(slot);
            }
            assert_eq!(store.live(), 0);
            let slots = store.entries.len() - store.free.len();
            if snapshots {
                assert!(slots >= 1_000, "{slots} slots hold 1 000 tombstones");
                assert_eq!(
                    store.begin_snapshot().len(),
                    1_000,
                    "every tombstone reaches the snapshot"
                );
            } else {
                assert!(slots <= 2, "{slots} slots in use after 1 000 entities came and went");
                assert!(store.begin_snapshot().is_empty(), "nothing tracked");
            }
        }
    }

    /// Warming reads what a lookup would find and changes nothing: a
    /// missing key, an operator or a partition not owned here are no entry.
    #[test]
    fn warming_touches_an_entry_without_changing_the_store() {
        let mut app = App::new("t");
        let op = app.operator("a", 2);
        let map = PartitionMap::new(&app, 2);
        let mut store = Store::new(&app, 0, &map);
        let owned = (0..2)
            .find(|p| map.owner(op, *p) == 0)
            .expect("shard 0 owns a partition");
        let key = Key::from(7u64);
        let mut heap = [0u8; 100];
        (heap[0], heap[64]) = (9, 4);
        let slot = store.slot(op, owned, &key, key.hash64());
        store.set(slot, Some(Value::from_bytes(&heap)));
        let (entries, live) = (store.entries.len(), store.live);
        assert_eq!(store.probe(op, owned, key.hash64()), Some(slot));
        assert_eq!(store.touch(slot), 9 ^ 4);
        let other = Key::from(8u64);
        assert_eq!(store.probe(op, owned, other.hash64()), None);
        assert_eq!(store.probe(OpId(5), owned, key.hash64()), None);
        assert_eq!(store.probe(op, 99, key.hash64()), None);
        assert_eq!(store.touch(slot + 100), 0);
        if let Some(not_owned) = (0..2).find(|p| map.owner(op, *p) != 0) {
            assert_eq!(store.probe(op, not_owned, key.hash64()), None);
        }
        assert_eq!((store.entries.len(), store.live), (entries, live));
        assert!(store.find(op, owned, &other, other.hash64()).is_none());
    }
}
