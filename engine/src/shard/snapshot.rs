//! Snapshots: the state after an epoch, copied out while later epochs run;
//! and a shard's restore from one.
//!
//! Every shard votes in `Flags`; if any wants a snapshot, all begin one
//! after the same epoch. The entities changed since the last snapshot are
//! copied a budgeted share per step (`SNAPSHOT_SLOTS_PER_STEP`), so an
//! epoch never pauses for a whole copy; the store saves the old value of an
//! entity written before it was copied (copy-on-write), so the snapshot is
//! exactly the state after its epoch. Chunks go to the driver as they fill;
//! the last one carries `meta`, the machine state a snapshot needs besides
//! the entities: its epoch, the sequencer counter, the client table and the
//! partition map (partitions move only at epoch ends, before the snapshot
//! after the epoch begins: see `moves`).
//!
//! Invariants: at most one snapshot is being copied (a new one first
//! finishes the previous); no transaction outlives its epoch, so `meta`
//! holds no pending work; a deleted entity's slot stays until its snapshot
//! is copied, and is reclaimed only at an epoch end, when no epoch table
//! points at it.

use super::clients::{ClientMeta, Clients};
use super::{Shard, Stage};
use crate::codec::Payload;
use crate::config::SnapshotChunk;
use crate::ids::{Epoch, OpId, ShardId};
use crate::key::{Key, partition_of};
use crate::layout::{Layout, LayoutMeta, LayoutMetaNoAbsent, LayoutMetaNoLeft, meta_of_no_absent, meta_of_no_left};
use crate::partition_map::{MapMeta, MapMetaNoShare, PartitionMap, meta_of_no_share};
use crate::value::Value;

/// Entities a step copies into the running snapshot: bounds the pause.
pub(super) const SNAPSHOT_SLOTS_PER_STEP: usize = 512;
/// Entities per snapshot chunk handed to the driver.
const SNAPSHOT_CHUNK_ENTRIES_MAX: usize = 16_384;
/// Emptied chunk buffers a shard keeps for its next snapshots
/// ([`Shard::recycle_snapshot_buffer`]): two, of a full chunk's 1–2 MiB.
const SPARE_CHUNKS_MAX: usize = 2;
/// A buffer larger than this many entities is not kept: a snapshot
/// finished at once (a new one due while it was copied, or a hand-off)
/// fills one chunk with all that was left, up to the whole shard.
const SPARE_CHUNK_ENTRIES_MAX: usize = 2 * SNAPSHOT_CHUNK_ENTRIES_MAX;

/// One entity in a snapshot chunk: operator, key, value (`None`: deleted).
type SnapshotEntry = (crate::OpId, Key, Option<Value>);
/// Version of the machine state in a snapshot's `meta`: 3 added the
/// partition map, 4 its queued moves, 5 the layout (shard → node), 6 the
/// logged time the snapshot was agreed at (the next vote counts from it),
/// 7 each queued move's pace, 8 the logged snapshot interval, 9 the nodes
/// that left, 10 the nodes absent (not yet joined).
const META_VERSION: u8 = 10;
/// The version before nodes could join: none was absent.
const META_VERSION_NO_ABSENT: u8 = 9;
/// The version before nodes could leave: none had.
const META_VERSION_NO_LEFT: u8 = 8;
/// The version before the logged interval: the restoring shard's
/// configured one until its log sets one.
const META_VERSION_NO_INTERVAL: u8 = 7;
/// The version before the queued moves' pace: they take the restoring
/// shard's settings (moves did not log their pace then).
const META_VERSION_NO_SHARE: u8 = 6;
/// The version before the vote's time: the next vote falls at once.
const META_VERSION_NO_VOTE_TIME: u8 = 5;
/// The version before the layout: the driver's layout holds (shards could
/// not change nodes then).
const META_VERSION_NO_LAYOUT: u8 = 4;
/// The version before the queued moves: none were queued.
const META_VERSION_NO_QUEUE: u8 = 3;
/// The version before the partition map: such a snapshot has the default
/// map (partitions could not move then).
const META_VERSION_DEFAULT_MAP: u8 = 2;

/// A snapshot's machine state: version, epoch, sequencer counter, client
/// table, partition map (its version, the partitions off the default, the
/// moves queued), layout (none before version 5), the snapshot's logged
/// time (0 before version 6), the logged snapshot interval (none before
/// version 8, or when no log had set one).
type Meta = (
    u8,
    Epoch,
    u64,
    Vec<ClientMeta>,
    MapMeta,
    Option<LayoutMeta>,
    u64,
    Option<u64>,
);

/// A snapshot being copied.
struct Snapshotting {
    epoch: Epoch,
    pending: Vec<u32>,
    cursor: usize,
    entries: Vec<SnapshotEntry>,
    meta: Vec<u8>,
    base: bool,
}

/// The snapshot being copied, the vote for the next one, and the slots a
/// finished one released.
pub(super) struct Snapshots {
    running: Option<Snapshotting>,
    /// The logged time of the epoch whose vote agreed on the last snapshot
    /// (taken, or counted in replay): the interval counts from it.
    pub(super) last_us: u64,
    /// Some shard voted for a snapshot after this epoch.
    pub(super) vote: bool,
    /// The interval this shard votes by, as its log last set it
    /// (`crate::interval`; `None`: no log set it, the configured one).
    pub(super) interval_us: Option<u64>,
    /// This shard logged its configured interval since it started (it
    /// does so in the first batch it logs).
    pub(super) interval_logged: bool,
    /// Slots of deleted entities a finished snapshot released, reclaimed at
    /// the next epoch end.
    pub(super) reclaim_later: Vec<u32>,
    /// The next snapshot holds every entity (`SnapshotChunk::base`): the
    /// shard was rebuilt from a hand-off, every entity marked.
    pub(super) next_is_base: bool,
    /// Chunk buffers the driver gave back, emptied: a chunk filled into
    /// one touches memory already mapped (a fresh 1 MiB buffer cost the
    /// shard's thread a page fault every 64 entities, and its free on the
    /// writer's thread handed the pages back to the system).
    spare: Vec<Vec<SnapshotEntry>>,
}

impl Snapshots {
    pub(super) fn new() -> Snapshots {
        Snapshots {
            running: None,
            last_us: 0,
            vote: false,
            interval_us: None,
            interval_logged: false,
            reclaim_later: Vec::new(),
            next_is_base: false,
            spare: Vec::new(),
        }
    }

    /// Whether a snapshot is being copied.
    pub(super) fn is_running(&self) -> bool {
        self.running.is_some()
    }
}

/// A whole snapshot of one shard at an epoch where it stopped for a
/// handover ([`Shard::checkpoint`], [`Handoff::checkpoint`](super::Handoff::checkpoint)): every live
/// entity, and the machine state [`Shard::restore`] takes.
#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint {
    pub shard: ShardId,
    pub epoch: Epoch,
    /// In no particular order.
    pub entities: Vec<(OpId, Key, Value)>,
    pub meta: Vec<u8>,
}

/// The machine state a snapshot carries, from its parts (a shard's, or a
/// hand-off's: the same bytes for the same shard).
pub(super) fn encode_meta_of(
    epoch: Epoch,
    lc: u64,
    clients: &Clients,
    map: MapMeta,
    layout: &Layout,
    voted_us: u64,
    interval_us: Option<u64>,
) -> Vec<u8> {
    Payload::encode(&(
        META_VERSION,
        epoch,
        lc,
        clients.to_meta(),
        map,
        layout.to_meta(),
        voted_us,
        interval_us,
    ))
    .as_bytes()
    .to_vec()
}

impl Shard {
    /// Starts a snapshot of the state after `epoch` (all shards start one at
    /// the same epoch: the vote rides on `Flags`). The entities changed since
    /// the last snapshot are copied a share per step; one written before it
    /// is copied gets its old value saved first (copy-on-write), so the
    /// snapshot is exactly the state after `epoch` while later epochs run.
    pub(super) fn begin_snapshot(&mut self, epoch: Epoch) {
        if self.snap.running.is_some() {
            // The previous one is still being copied: finish it now.
            while self.snap.running.is_some() {
                self.snapshot_step(usize::MAX);
            }
        }
        // Partitions that moved away reach the snapshot as tombstones.
        self.finish_retiring();
        let (pending, untracked) = {
            let store = &mut self.exec.st.borrow_mut().store;
            // A shard configured without snapshots tracked nothing: its
            // first one is whole.
            let untracked = store.start_tracking();
            (store.begin_snapshot(), untracked)
        };
        self.snap.last_us = self.m.epoch_now_us;
        self.snap.running = Some(Snapshotting {
            epoch,
            pending,
            cursor: 0,
            entries: self.snap.spare.pop().unwrap_or_default(),
            meta: self.encode_meta(epoch),
            base: std::mem::take(&mut self.snap.next_is_base) || untracked,
        });
        self.m.stats.snapshots += 1;
    }

    /// Gives back a chunk's buffer (`SnapshotChunk::entries`) once the
    /// driver took its entries out: the next snapshots fill it again (the
    /// larger ones are kept, at most [`SPARE_CHUNKS_MAX`], none beyond
    /// [`SPARE_CHUNK_ENTRIES_MAX`] entities).
    pub fn recycle_snapshot_buffer(&mut self, mut buffer: Vec<SnapshotEntry>) {
        buffer.clear();
        let spare = &mut self.snap.spare;
        if buffer.capacity() > SPARE_CHUNK_ENTRIES_MAX {
            return;
        }
        if spare.len() < SPARE_CHUNKS_MAX {
            spare.push(buffer);
        } else if let Some(smallest) = spare.iter_mut().min_by_key(|b| b.capacity())
            && smallest.capacity() < buffer.capacity()
        {
            *smallest = buffer;
        }
    }

    /// The snapshot agreed after `epoch`: taken live; in replay (the log
    /// already holds the input, and the run it replays took it) only
    /// counted, so that the next vote falls where it fell live.
    pub(super) fn snapshot_or_mark(&mut self, epoch: Epoch) {
        if self.seq.replay.is_some() {
            self.snap.last_us = self.m.epoch_now_us;
        } else {
            self.begin_snapshot(epoch);
        }
    }

    /// Copies up to `budget` pending entities of the running snapshot and
    /// emits full chunks; emits the last chunk when all are copied.
    pub(super) fn snapshot_step(&mut self, budget: usize) {
        let Some(snap) = &mut self.snap.running else {
            return;
        };
        let mut guard = self.exec.st.borrow_mut();
        let st = &mut *guard;
        st.store.take_saved(&mut snap.entries);
        let end = snap.cursor.saturating_add(budget).min(snap.pending.len());
        for &slot in &snap.pending[snap.cursor..end] {
            st.store.copy_pending(slot, &mut snap.entries);
        }
        snap.cursor = end;
        let done = snap.cursor == snap.pending.len();
        if done || snap.entries.len() >= SNAPSHOT_CHUNK_ENTRIES_MAX {
            let next = if done {
                Vec::new()
            } else {
                self.snap.spare.pop().unwrap_or_default()
            };
            let entries = std::mem::replace(&mut snap.entries, next);
            self.outputs.snapshots.push(SnapshotChunk {
                epoch: snap.epoch,
                shard: self.exec.id,
                entries,
                last: done,
                meta: if done {
                    std::mem::take(&mut snap.meta)
                } else {
                    Vec::new()
                },
                base: snap.base,
            });
        }
        if done {
            // Deleted entities kept for the snapshot can go, but not while an
            // epoch's tables may point at their slots: at the next epoch end.
            for &slot in &snap.pending {
                if st.store.entries[slot as usize].value.is_none() {
                    self.snap.reclaim_later.push(slot);
                }
            }
            self.snap.running = None;
        }
    }

    /// The machine state a snapshot must carry: its epoch, the sequencer
    /// counter, the client table and the partition map. (No transaction
    /// outlives its epoch.)
    fn encode_meta(&self, epoch: Epoch) -> Vec<u8> {
        let map = self.exec.map.borrow().to_meta();
        encode_meta_of(
            epoch,
            self.seq.lc,
            &self.clients,
            map,
            &self.layout,
            self.snap.last_us,
            self.snap.interval_us,
        )
    }

    /// A whole snapshot of this departing shard at the epoch it stopped
    /// at (`Config::pause_at_handover`), for its driver to write where
    /// the shard stays: its live entities ([`Shard::for_each_entity`]) and
    /// the machine state [`Shard::restore`] takes, as the snapshot of
    /// that epoch would carry it — the one [`Shard::stay`] then takes if
    /// one was due, or none. Reads the shard, changes nothing: a
    /// snapshot the engine did not vote for must not move the next vote
    /// (replay would not), nor the delta it tracks (a superset of the
    /// changes after this one, so a delta over this file is still right).
    /// [`Handoff::checkpoint`](super::Handoff::checkpoint) gives the same for a shard that leaves.
    ///
    /// # Panics
    /// If the shard is not departing, or still has batches to replay (a
    /// recovery never replays across a handover whose checkpoint a node
    /// committed: the runtime starts no epoch after one before every
    /// node has).
    pub fn checkpoint(&self) -> Checkpoint {
        let due = self.departing.expect("a checkpoint of a shard that is not departing");
        assert_eq!(self.m.stage, Stage::Idle, "a departing shard is between epochs");
        assert!(
            self.seq.replay.as_ref().is_none_or(|r| r.is_empty()),
            "a checkpoint of shard {} with batches left to replay",
            self.exec.id
        );
        let mut entities = Vec::with_capacity(self.entity_count());
        self.for_each_entity(|op, k, v| entities.push((op, k.clone(), v.clone())));
        let map = self.exec.map.borrow().to_meta();
        Checkpoint {
            shard: self.exec.id,
            epoch: self.m.epoch,
            entities,
            meta: encode_meta_of(
                self.m.epoch,
                self.seq.lc,
                &self.clients,
                map,
                &self.layout,
                // As `hand_off` counts it: the snapshot due now is taken.
                if due { self.m.epoch_now_us } else { self.snap.last_us },
                self.snap.interval_us,
            ),
        }
    }

    /// Decodes a snapshot's machine state, of this version or the eight
    /// before.
    fn decode_meta(meta: &[u8]) -> Result<Meta, crate::DecodeError> {
        type MetaNoLayout = (u8, Epoch, u64, Vec<ClientMeta>, MapMetaNoShare);
        type MetaNoQueue = (u8, Epoch, u64, Vec<ClientMeta>, (u64, Vec<(u16, u32, u16)>));
        let payload = Payload::from_bytes(meta);
        // The leading version byte says which layout follows.
        let version = *meta.first().ok_or(crate::DecodeError::Short { expected: 1 })?;
        match version {
            META_VERSION => payload
                .decode::<(u8, Epoch, u64, Vec<ClientMeta>, MapMeta, LayoutMeta, u64, Option<u64>)>()
                .map(|(v, epoch, lc, clients, map, layout, voted_us, interval_us)| {
                    (v, epoch, lc, clients, map, Some(layout), voted_us, interval_us)
                }),
            META_VERSION_NO_ABSENT => payload
                .decode::<(
                    u8,
                    Epoch,
                    u64,
                    Vec<ClientMeta>,
                    MapMeta,
                    LayoutMetaNoAbsent,
                    u64,
                    Option<u64>,
                )>()
                .map(|(v, epoch, lc, clients, map, layout, voted_us, interval_us)| {
                    (
                        v,
                        epoch,
                        lc,
                        clients,
                        map,
                        Some(meta_of_no_absent(layout)),
                        voted_us,
                        interval_us,
                    )
                }),
            META_VERSION_NO_LEFT => payload
                .decode::<(
                    u8,
                    Epoch,
                    u64,
                    Vec<ClientMeta>,
                    MapMeta,
                    LayoutMetaNoLeft,
                    u64,
                    Option<u64>,
                )>()
                .map(|(v, epoch, lc, clients, map, layout, voted_us, interval_us)| {
                    (
                        v,
                        epoch,
                        lc,
                        clients,
                        map,
                        Some(meta_of_no_left(layout)),
                        voted_us,
                        interval_us,
                    )
                }),
            META_VERSION_NO_INTERVAL => payload
                .decode::<(u8, Epoch, u64, Vec<ClientMeta>, MapMeta, LayoutMetaNoLeft, u64)>()
                .map(|(v, epoch, lc, clients, map, layout, voted_us)| {
                    (
                        v,
                        epoch,
                        lc,
                        clients,
                        map,
                        Some(meta_of_no_left(layout)),
                        voted_us,
                        None,
                    )
                }),
            META_VERSION_NO_SHARE => payload
                .decode::<(u8, Epoch, u64, Vec<ClientMeta>, MapMetaNoShare, LayoutMetaNoLeft, u64)>()
                .map(|(v, epoch, lc, clients, map, layout, voted_us)| {
                    (
                        v,
                        epoch,
                        lc,
                        clients,
                        meta_of_no_share(map),
                        Some(meta_of_no_left(layout)),
                        voted_us,
                        None,
                    )
                }),
            META_VERSION_NO_VOTE_TIME => payload
                .decode::<(u8, Epoch, u64, Vec<ClientMeta>, MapMetaNoShare, LayoutMetaNoLeft)>()
                .map(|(v, epoch, lc, clients, map, layout)| {
                    (
                        v,
                        epoch,
                        lc,
                        clients,
                        meta_of_no_share(map),
                        Some(meta_of_no_left(layout)),
                        0,
                        None,
                    )
                }),
            META_VERSION_NO_LAYOUT => payload
                .decode::<MetaNoLayout>()
                .map(|(v, epoch, lc, clients, map)| (v, epoch, lc, clients, meta_of_no_share(map), None, 0, None)),
            META_VERSION_NO_QUEUE => {
                payload
                    .decode::<MetaNoQueue>()
                    .map(|(v, epoch, lc, clients, (version, moved))| {
                        (v, epoch, lc, clients, (version, moved, Vec::new()), None, 0, None)
                    })
            }
            META_VERSION_DEFAULT_MAP => payload
                .decode::<(u8, Epoch, u64, Vec<ClientMeta>)>()
                .map(|(v, epoch, lc, clients)| (v, epoch, lc, clients, (0, Vec::new(), Vec::new()), None, 0, None)),
            v => Err(crate::DecodeError::Tag(v)),
        }
    }

    /// Restores the machine state of a snapshot (before any epoch ran here),
    /// after its entities were loaded with [`Shard::load_snapshot_entity`].
    /// Replay the logged epochs after it with [`Shard::replay`].
    pub fn restore(&mut self, meta: &[u8]) -> Result<Epoch, crate::DecodeError> {
        assert_eq!(self.m.epoch, 0, "restore into a shard that already ran");
        let (_, epoch, lc, clients, map, layout, voted_us, interval_us) = Shard::decode_meta(meta)?;
        let map =
            PartitionMap::from_meta(&self.exec.app, self.exec.n_shards, &map).map_err(crate::DecodeError::Invalid)?;
        if let Some(layout) = layout {
            self.layout = Layout::from_meta(self.exec.n_shards, &layout).map_err(crate::DecodeError::Invalid)?;
        }
        self.install_map(map)?;
        self.clients.restore(clients);
        self.snap.last_us = voted_us;
        self.snap.interval_us = interval_us;
        self.m.epoch = epoch;
        self.seq.lc = lc;
        // A snapshot is only complete once every shard's input through its
        // epoch is durable.
        self.gate.durable_local = epoch;
        for d in &mut self.gate.durable_peers {
            *d = epoch;
        }
        Ok(epoch)
    }

    /// Makes a snapshot's map this shard's: every partition it owns gets a
    /// table, and no partition it does not own may hold a loaded entity
    /// (a snapshot file of another map than its meta's is corrupt).
    pub(super) fn install_map(&mut self, map: PartitionMap) -> Result<(), crate::DecodeError> {
        let id = self.exec.id;
        let mut st = self.exec.st.borrow_mut();
        for (op, info) in self.exec.app.operators() {
            for p in 0..info.partitions() {
                if map.owner(op, p) == id {
                    st.store.ensure_partition(op, p);
                } else if st.store.has_partition(op, p) && !st.store.live_slots(op, p).is_empty() {
                    return Err(crate::DecodeError::Invalid(format!(
                        "shard {id}'s snapshot holds partition {p} of {}, which shard {} owns",
                        info.name(),
                        map.owner(op, p)
                    )));
                }
            }
        }
        *self.exec.map.borrow_mut() = map;
        Ok(())
    }

    /// Loads an entity from a snapshot: like [`Shard::load`], but the next
    /// snapshot need not include it. The partition need not be this
    /// shard's by the default rule (it may have moved here):
    /// [`Shard::restore`] checks the entities against the snapshot's map.
    pub fn load_snapshot_entity(&mut self, op: crate::OpId, key: &Key, value: Value) {
        assert_eq!(self.m.stage, Stage::Idle, "load while an epoch runs");
        let hash = key.hash64();
        let partition = partition_of(hash, self.exec.app.operator_info(op).partitions());
        self.exec
            .st
            .borrow_mut()
            .store
            .load_snapshot(op, partition, key, hash, value);
    }

    /// Loads a snapshot's entities in bulk: `load` calls its argument with
    /// each, as [`Shard::load_snapshot_entity`] takes them, and they are put
    /// into their partitions' tables once it returns, a partition at a time
    /// (the tables stay in cache: several times faster for millions of
    /// entities). Returns what `load` returns. As with
    /// [`Shard::load_snapshot_entity`], [`Shard::restore`] checks owners.
    pub fn load_snapshot_entities<R>(&mut self, load: impl FnOnce(&mut dyn FnMut(crate::OpId, Key, Value)) -> R) -> R {
        assert_eq!(self.m.stage, Stage::Idle, "load while an epoch runs");
        let app = &self.exec.app;
        let result = {
            let mut st = self.exec.st.borrow_mut();
            load(&mut |op, key, value| {
                let hash = key.hash64();
                let partition = partition_of(hash, app.operator_info(op).partitions());
                st.store.stage(op, partition, key, hash, value);
            })
        };
        self.exec.st.borrow_mut().store.index_staged();
        result
    }

    /// Makes room for about `entities` entities before a snapshot's are
    /// loaded (a hint, e.g. the entity count of the snapshot's largest
    /// file): the store then grows neither its slab nor its tables while
    /// loading. Loading more still works.
    pub fn reserve_entities(&mut self, entities: usize) {
        assert_eq!(self.m.stage, Stage::Idle, "reserve while an epoch runs");
        self.exec.st.borrow_mut().store.reserve(entities);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Snapshots of the eight versions before still restore: without a
    /// map (the default one), without queued moves (none queued), without
    /// a layout (the driver's holds), without the queued moves' pace
    /// (the restoring shard's settings), without the logged interval
    /// (the restoring shard's), without the nodes that left (none had) and
    /// without the nodes absent (none was).
    #[test]
    fn metas_of_earlier_versions_decode() {
        let clients: Vec<ClientMeta> = vec![(7, 3, 2, vec![])];
        let bytes = |p: Payload| p.as_bytes().to_vec();
        let v2 = bytes(Payload::encode(&(
            META_VERSION_DEFAULT_MAP,
            9u64,
            40u64,
            clients.clone(),
        )));
        assert_eq!(
            Shard::decode_meta(&v2).unwrap(),
            (2, 9, 40, clients.clone(), (0, vec![], vec![]), None, 0, None)
        );
        let moved = vec![(0u16, 1u32, 1u16)];
        let v3 = bytes(Payload::encode(&(
            META_VERSION_NO_QUEUE,
            9u64,
            40u64,
            clients.clone(),
            (2u64, moved.clone()),
        )));
        assert_eq!(
            Shard::decode_meta(&v3).unwrap(),
            (3, 9, 40, clients.clone(), (2, moved.clone(), vec![]), None, 0, None)
        );
        let old_map: MapMetaNoShare = (2, moved.clone(), vec![(5, 0, 2, 0)]);
        // Queued moves of a snapshot before their pace was logged: none.
        let map_read: MapMeta = (2, moved.clone(), vec![(5, 0, 2, 0, None)]);
        let v4 = bytes(Payload::encode(&(
            META_VERSION_NO_LAYOUT,
            9u64,
            40u64,
            clients.clone(),
            old_map.clone(),
        )));
        assert_eq!(
            Shard::decode_meta(&v4).unwrap(),
            (4, 9, 40, clients.clone(), map_read.clone(), None, 0, None)
        );
        let old_layout: LayoutMetaNoLeft = (3, 2, vec![1, 1, 0], vec![(17, 2, 0)]);
        // A layout of a snapshot before nodes could leave: none had.
        let layout: LayoutMeta = (3, 2, vec![1, 1, 0], vec![(17, 2, 0)], vec![], vec![]);
        let v5 = bytes(Payload::encode(&(
            META_VERSION_NO_VOTE_TIME,
            9u64,
            40u64,
            clients.clone(),
            old_map.clone(),
            old_layout.clone(),
        )));
        assert_eq!(
            Shard::decode_meta(&v5).unwrap(),
            (
                5,
                9,
                40,
                clients.clone(),
                map_read.clone(),
                Some(layout.clone()),
                0,
                None
            )
        );
        let v6 = bytes(Payload::encode(&(
            META_VERSION_NO_SHARE,
            9u64,
            40u64,
            clients.clone(),
            old_map,
            old_layout.clone(),
            1_234u64,
        )));
        assert_eq!(
            Shard::decode_meta(&v6).unwrap(),
            (6, 9, 40, clients.clone(), map_read, Some(layout.clone()), 1_234, None)
        );
        let map: MapMeta = (2, moved, vec![(5, 0, 2, 0, None), (6, 0, 3, 1, Some((64, 8, 50)))]);
        let v7 = bytes(Payload::encode(&(
            META_VERSION_NO_INTERVAL,
            9u64,
            40u64,
            clients.clone(),
            map.clone(),
            old_layout.clone(),
            1_234u64,
        )));
        assert_eq!(
            Shard::decode_meta(&v7).unwrap(),
            (
                7,
                9,
                40,
                clients.clone(),
                map.clone(),
                Some(layout.clone()),
                1_234,
                None
            )
        );
        let v8 = bytes(Payload::encode(&(
            META_VERSION_NO_LEFT,
            9u64,
            40u64,
            clients.clone(),
            map.clone(),
            old_layout,
            1_234u64,
            Some(250_000u64),
        )));
        assert_eq!(
            Shard::decode_meta(&v8).unwrap(),
            (
                8,
                9,
                40,
                clients.clone(),
                map.clone(),
                Some(layout),
                1_234,
                Some(250_000)
            )
        );
        let left_before: LayoutMetaNoAbsent = (4, 3, vec![1, 1, 0], vec![], vec![2]);
        let v9 = bytes(Payload::encode(&(
            META_VERSION_NO_ABSENT,
            9u64,
            40u64,
            clients.clone(),
            map.clone(),
            left_before,
            1_234u64,
            Some(250_000u64),
        )));
        // A layout of a snapshot before nodes could join: none absent.
        let left: LayoutMeta = (4, 3, vec![1, 1, 0], vec![], vec![2], vec![]);
        assert_eq!(
            Shard::decode_meta(&v9).unwrap(),
            (9, 9, 40, clients.clone(), map.clone(), Some(left), 1_234, Some(250_000))
        );
        let absent: LayoutMeta = (4, 4, vec![1, 1, 0], vec![], vec![2], vec![3]);
        let v10 = bytes(Payload::encode(&(
            META_VERSION,
            9u64,
            40u64,
            clients.clone(),
            map.clone(),
            absent.clone(),
            1_234u64,
            Some(250_000u64),
        )));
        assert_eq!(
            Shard::decode_meta(&v10).unwrap(),
            (META_VERSION, 9, 40, clients, map, Some(absent), 1_234, Some(250_000))
        );
        assert!(matches!(Shard::decode_meta(&[11]), Err(crate::DecodeError::Tag(11))));
        assert!(Shard::decode_meta(&[]).is_err());
        assert!(Shard::decode_meta(&v3[..v3.len() - 1]).is_err(), "a torn meta");
    }
}
