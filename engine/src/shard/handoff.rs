//! A shard leaving its node: everything it is, as plain data, and the
//! shard rebuilt from it on the node it goes to.
//!
//! A handover of shard `s` decided at the end of epoch S (see `layout`)
//! makes `s` *depart*: it finishes S's end (replies released or held, the
//! partitions' retiring shares deleted), then starts nothing more — neither
//! S + 1 nor a snapshot of S — and waits for its driver, who takes its
//! [`Handoff`] and builds the shard on the new node with
//! [`Shard::take_over`]. That one starts S + 1 (and the snapshot of S when
//! one was due, written whole: the new node holds no earlier file of the
//! shard). Messages of S + 1 that peers sent meanwhile wait in the links.
//!
//! What crosses: the entities (the live ones), the machine state a
//! snapshot carries (epoch, sequencer counter, client table, partition map,
//! layout), and what lives between epochs — requests waiting to be
//! sequenced, replies held until their epoch is durable (with the client
//! tokens of the old node: its driver still answers them), how far every
//! log is durable, messages of S + 1 that arrived early, the replay still
//! to run, counters. What does not: tombstones and slots kept for a
//! snapshot (none is running: a snapshot before S finished first, the one
//! of S is the new node's), partition copies (a handover waits until no
//! partition is being copied: `layout`).
//!
//! Invariants: a departing shard is idle and has no task; it never starts
//! an epoch; `take_over` of its hand-off is the same shard, state for state
//! (the simulator swaps every handed shard for its rebuilt self and its
//! runs stay serializable, exactly-once and recoverable).

use super::clients::Clients;
use super::release::{Release, ReplyTo};
use super::{Shard, Stage, Stats};
use crate::app::App;
use crate::config::{Batch, Config, Request};
use crate::ids::{Epoch, OpId, ShardId};
use crate::key::Key;
use crate::layout::Layout;
use crate::message::Message;
use crate::partition_map::{MapMeta, PartitionMap};
use crate::value::Value;
use std::collections::VecDeque;
use std::sync::Arc;

/// A departed shard, as plain data: what [`Shard::take_over`] rebuilds.
pub struct Handoff {
    id: ShardId,
    n_shards: u16,
    epoch: Epoch,
    now_us: u64,
    lc: u64,
    last_start_us: u64,
    epoch_cap: usize,
    pending: VecDeque<(ReplyTo, Request)>,
    replay: Option<VecDeque<Batch>>,
    /// The client table whole: outcomes, and the duplicates waiting for a
    /// request in flight (their answers are due from the new node).
    clients: Clients,
    map: MapMeta,
    layout: Layout,
    held: VecDeque<(Epoch, Vec<Release>)>,
    durable_local: Epoch,
    durable_peers: Vec<Epoch>,
    deferred: VecDeque<(ShardId, Message)>,
    entities: Vec<(OpId, Key, Value)>,
    stats: Stats,
    partition_invocations: Vec<Vec<u64>>,
    snapshot_last_us: u64,
    /// A snapshot of `epoch` was due: the new node takes it.
    snapshot_due: bool,
}

impl Handoff {
    /// The shard handed off.
    pub fn shard(&self) -> ShardId {
        self.id
    }

    /// The epoch it departed at the end of.
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// How many entities it carries.
    pub fn entities(&self) -> usize {
        self.entities.len()
    }
}

impl Shard {
    /// Whether this shard was handed to another node at the end of its
    /// last epoch and waits for its driver to [`hand_off`](Shard::hand_off).
    pub fn is_departing(&self) -> bool {
        self.departing.is_some()
    }

    /// Everything this departing shard is, for [`Shard::take_over`] on its
    /// new node; the shard is spent. Drain its outputs first and after (a
    /// snapshot it was copying is finished here and emits its chunks).
    ///
    /// # Panics
    /// If the shard is not departing.
    pub fn hand_off(&mut self) -> Handoff {
        let snapshot_due = self
            .departing
            .take()
            .expect("hand_off of a shard that is not departing");
        assert_eq!(self.m.stage, Stage::Idle, "a departing shard is between epochs");
        assert!(self.tasks.all_finished(), "a departing shard has no task");
        assert!(
            !self.moves.is_waiting() && !self.exec.map.borrow().is_copying(),
            "a shard departs between partition copies"
        );
        // A snapshot of an earlier epoch still being copied is this node's
        // file: finish it here.
        while self.snap.is_running() {
            self.snapshot_step(usize::MAX);
        }
        self.finish_retiring();
        let mut entities = Vec::with_capacity(self.entity_count());
        self.for_each_entity(|op, key, value| entities.push((op, key.clone(), value.clone())));
        Handoff {
            id: self.exec.id,
            n_shards: self.exec.n_shards,
            epoch: self.m.epoch,
            now_us: self.m.now_us,
            lc: self.seq.lc,
            last_start_us: self.seq.last_start_us,
            epoch_cap: self.seq.epoch_cap,
            pending: std::mem::take(&mut self.seq.pending),
            replay: self.seq.replay.take(),
            clients: std::mem::replace(&mut self.clients, Clients::new()),
            map: self.exec.map.borrow().to_meta(),
            layout: self.layout.clone(),
            held: std::mem::take(&mut self.gate.held),
            durable_local: self.gate.durable_local,
            durable_peers: self.gate.durable_peers.clone(),
            deferred: std::mem::take(&mut self.m.deferred),
            entities,
            stats: self.m.stats,
            partition_invocations: self.m.partition_invocations.clone(),
            snapshot_last_us: self.snap.last_us,
            snapshot_due,
        }
    }

    /// The shard `handoff` describes, on its new node: it goes on with the
    /// epoch after the one it departed at (and first takes the snapshot
    /// that was due, whole).
    pub fn take_over(app: Arc<App>, config: Config, h: Handoff) -> Result<Shard, crate::DecodeError> {
        let mut shard = Shard::new(app.clone(), config, h.id, h.n_shards);
        let map = PartitionMap::from_meta(&app, h.n_shards, &h.map).map_err(crate::DecodeError::Invalid)?;
        if h.layout.n_shards() != h.n_shards {
            return Err(crate::DecodeError::Invalid(format!(
                "a layout of {} shards for {}",
                h.layout.n_shards(),
                h.n_shards
            )));
        }
        shard.install_map(map)?;
        for (op, key, value) in &h.entities {
            // Marked for the next snapshot: the first one here is whole.
            shard.load(*op, key, Some(value.clone()));
        }
        shard.layout = h.layout;
        shard.clients = h.clients;
        shard.m.epoch = h.epoch;
        shard.m.now_us = h.now_us;
        shard.m.deferred = h.deferred;
        shard.m.stats = h.stats;
        shard.m.partition_invocations = h.partition_invocations;
        shard.seq.lc = h.lc;
        shard.seq.last_start_us = h.last_start_us;
        shard.seq.epoch_cap = h.epoch_cap;
        shard.seq.pending = h.pending;
        shard.seq.replay = h.replay;
        shard.gate.held = h.held;
        shard.gate.durable_local = h.durable_local;
        shard.gate.durable_peers = h.durable_peers;
        shard.snap.last_us = h.snapshot_last_us;
        // Every entity is marked: the first snapshot here is whole.
        shard.snap.next_is_base = shard.config.snapshot_interval_us > 0;
        if h.snapshot_due {
            shard.begin_snapshot(h.epoch);
        }
        shard.go_on(h.epoch, false);
        Ok(shard)
    }
}
