//! Partition moves: the map switch at an epoch's end and the transfer of a
//! moved partition's entities (stop-and-copy at the boundary).
//!
//! A move is a request (`partition_map::Move::request`): its coordinator
//! seals it into its batch like a transaction (so it is logged and replayed,
//! and answered exactly once), does not run it, and lists it in its `Done1`.
//! Every shard therefore knows every move of the epoch before the epoch
//! ends, and at the end applies them all, in tid order, to its map. Then:
//!
//! - the old owner sends the partition's entities (`Install`, in chunks)
//!   and deletes them from its store: the deletes are ordinary writes, so
//!   a snapshot being copied saves the old values first, and the next
//!   snapshot of this shard holds tombstones — its chain can never bring
//!   the entities back;
//! - the new owner waits, before it snapshots or starts the next epoch,
//!   until every partition coming to it is complete, then installs them in
//!   (operator, partition) order: ordinary writes again, so its next
//!   snapshot holds them. Messages of the next epoch wait meanwhile.
//!
//! So the switch is at the epoch boundary on every shard: no invocation of
//! the next epoch runs before the moved partition is in place, every one
//! of this epoch ran at the old owner, and a snapshot after the epoch has
//! both the new map and the entities where it says (recovery restores the
//! map from the snapshot and replays later moves from the log).
//!
//! Invariants: installs of an epoch arrive only after this shard sent its
//! `Done2` for it (the old owner sends them once the epoch ended there), and
//! none of a later epoch arrive before this shard started it; the shard
//! never starts an epoch while a transfer to it is incomplete.

use super::Shard;
use crate::codec::Payload;
use crate::ids::{Epoch, OpId, Tid};
use crate::key::Key;
use crate::message::Message;
use crate::partition_map::Move;
use crate::value::Value;

/// Entities in one `Install` message at most, and the key and value bytes
/// after which one stops (it holds at least one entity): bound a message,
/// and a remote link's frame, whatever a partition holds.
pub(super) const INSTALL_ENTITIES_MAX: usize = 4_096;
pub(super) const INSTALL_BYTES_MAX: usize = 1 << 20;

/// One `Install` message's content.
struct Chunk {
    op: OpId,
    partition: u32,
    entities: Vec<(Key, Value)>,
}

/// The rest of an epoch's end, held while transfers to this shard arrive.
#[derive(Clone, Copy)]
struct Held {
    epoch: Epoch,
    snapshot: bool,
    any_pending: bool,
}

/// Moves of the current epoch and transfers in flight to this shard.
pub(super) struct Moves {
    /// Moves this shard sequenced this epoch, for its `Done1`.
    pub(super) sealed: Vec<(Tid, Move)>,
    /// Every shard's moves of this epoch (from the `Done1`s).
    pub(super) decided: Vec<(Tid, Move)>,
    /// Partitions coming to this shard at this boundary …
    expected: usize,
    /// … and how many of them arrived whole.
    complete: usize,
    /// Their chunks, in arrival order (FIFO per sender).
    arrived: Vec<Chunk>,
    held: Option<Held>,
}

impl Moves {
    pub(super) fn new() -> Moves {
        Moves {
            sealed: Vec::new(),
            decided: Vec::new(),
            expected: 0,
            complete: 0,
            arrived: Vec::new(),
            held: None,
        }
    }

    /// Whether the epoch's end waits for partitions moving here.
    pub(super) fn is_waiting(&self) -> bool {
        self.held.is_some()
    }

    /// For `Shard::describe`: transfers coming in.
    pub(super) fn describe(&self) -> String {
        format!(
            "moves: {} partitions in of {} ({} chunks), {}",
            self.complete,
            self.expected,
            self.arrived.len(),
            if self.is_waiting() { "waiting" } else { "not waiting" }
        )
    }
}

impl Shard {
    /// A move request sealed into this epoch: it runs nothing; its outcome
    /// is `()` and the switch happens at the epoch's end.
    pub(super) fn seal_move(&mut self, tid: Tid, m: Move) {
        self.moves.sealed.push((tid, m));
    }

    /// The outcome of every move.
    pub(super) fn move_result() -> Payload {
        Payload::encode(&())
    }

    /// At the end of `epoch`: applies the epoch's moves to the map, sends
    /// away the partitions that left, and installs those that came if all
    /// are here. Returns whether the epoch's end may go on now (else the
    /// rest waits in `held` for the installs: see [`Shard::hold_boundary`]).
    pub(super) fn switch_partitions(&mut self, epoch: Epoch) -> bool {
        if self.moves.decided.is_empty() {
            return true;
        }
        let mut decided = std::mem::take(&mut self.moves.decided);
        let transfers = self.exec.map.borrow_mut().apply(&mut decided);
        let id = self.exec.id;
        for &(op, partition, from, to) in &transfers {
            if from == id {
                self.send_partition(epoch, op, partition, to);
            }
            if to == id {
                self.moves.expected += 1;
            }
        }
        self.try_install()
    }

    /// Sends the entities of a partition that moved to `to`, in chunks of
    /// at most [`INSTALL_ENTITIES_MAX`] entities and about
    /// [`INSTALL_BYTES_MAX`] bytes, the last marked (one, empty, for an
    /// empty partition), and deletes them here (tombstones until a snapshot
    /// copied them).
    fn send_partition(&mut self, epoch: Epoch, op: OpId, partition: u32, to: crate::ShardId) {
        let mut guard = self.exec.st.borrow_mut();
        let st = &mut *guard;
        let rows = st.store.scan(op, partition);
        let mut entities = Vec::new();
        let mut bytes = 0;
        for (i, (key, slot)) in rows.iter().enumerate() {
            let value = st.store.entries[*slot as usize].value.clone();
            let value = value.expect("a scan returns live entities");
            bytes += key.as_bytes().len() + value.len();
            entities.push((key.clone(), value));
            let last = i + 1 == rows.len();
            if last || entities.len() == INSTALL_ENTITIES_MAX || bytes >= INSTALL_BYTES_MAX {
                let chunk = std::mem::take(&mut entities);
                bytes = 0;
                let msg = Message::Install {
                    epoch,
                    op,
                    partition,
                    entities: chunk,
                    last,
                };
                self.exec.route(st, to, msg);
            }
        }
        if rows.is_empty() {
            let msg = Message::Install {
                epoch,
                op,
                partition,
                entities: Vec::new(),
                last: true,
            };
            self.exec.route(st, to, msg);
        }
        for (_, slot) in rows {
            st.store.set(slot, None);
        }
    }

    /// An `Install` chunk arrived: kept until every partition coming here
    /// at this boundary is whole, then installed.
    pub(super) fn on_install(
        &mut self,
        epoch: Epoch,
        op: OpId,
        partition: u32,
        entities: Vec<(Key, Value)>,
        last: bool,
    ) {
        assert_eq!(
            epoch, self.m.epoch,
            "partition {partition} of operator {} moved at the end of epoch {epoch}, arrived in {}",
            op.0, self.m.epoch
        );
        self.moves.arrived.push(Chunk {
            op,
            partition,
            entities,
        });
        if last {
            self.moves.complete += 1;
        }
        if self.moves.held.is_some() && self.try_install() {
            let held = self.moves.held.take().expect("held");
            assert_eq!(held.epoch, self.m.epoch);
            self.go_on(held.epoch, held.snapshot, held.any_pending);
        }
    }

    /// Installs the partitions moving here if all are whole; returns whether
    /// nothing more is expected.
    fn try_install(&mut self) -> bool {
        if self.moves.complete < self.moves.expected {
            return false;
        }
        assert_eq!(
            self.moves.complete, self.moves.expected,
            "more partitions arrived than moved here"
        );
        // By partition, each one's chunks in the order sent: the same
        // store whatever order the senders' links delivered in.
        let mut arrived = std::mem::take(&mut self.moves.arrived);
        arrived.sort_by_key(|c| (c.op, c.partition));
        let mut guard = self.exec.st.borrow_mut();
        let st = &mut *guard;
        for chunk in arrived {
            st.store.ensure_partition(chunk.op, chunk.partition);
            for (key, value) in chunk.entities {
                let slot = st.store.slot(chunk.op, chunk.partition, &key, key.hash64());
                st.store.set(slot, Some(value));
            }
        }
        self.moves.expected = 0;
        self.moves.complete = 0;
        true
    }

    /// The epoch's end waits for partitions moving here.
    pub(super) fn hold_boundary(&mut self, epoch: Epoch, snapshot: bool, any_pending: bool) {
        assert!(self.moves.held.is_none());
        self.moves.held = Some(Held {
            epoch,
            snapshot,
            any_pending,
        });
    }
}
