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
//! With `Config::pause_at_handover` every shard stops so at a change of the
//! layout, those staying on their node too (they go on in place,
//! [`Shard::stay`], or are rebuilt there from their own hand-off): then no
//! shard starts S + 1 until its driver lets it, and a runtime can re-point
//! its links between nodes with nothing in flight.
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
//! (the simulator swaps every handed shard for its rebuilt self — a shard
//! that keeps its node stays in place on half the seeds — and its runs
//! stay serializable, exactly-once and recoverable); `stay` is the same
//! shard too, its snapshots incremental.

use super::clients::Clients;
use super::release::{Release, ReplyTo};
use super::{Shard, Stage, Stats};
use crate::app::App;
use crate::codec::{Decode, DecodeError, Encode, Writer};
use crate::config::{Batch, Config, Request};
use crate::ids::{Epoch, OpId, ShardId};
use crate::key::{Key, partition_of};
use crate::layout::Layout;
use crate::message::Message;
use crate::partition_map::{MapMeta, PartitionMap};
use crate::store::Store;
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
    /// The interval the shard's log set (`crate::interval`): it votes by it
    /// on the new node until its first batch there logs that node's.
    snapshot_interval_us: Option<u64>,
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

    /// Where the shards run from the next epoch on (its layout after the
    /// handover it stopped at).
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// A whole snapshot of the shard at the epoch it departed at, for the
    /// node it goes to: the same as [`Shard::checkpoint`] of the departing
    /// shard (the live entities, the machine state [`Shard::restore`]
    /// takes).
    ///
    /// # Panics
    /// If the shard still had batches to replay (see
    /// [`Shard::checkpoint`]).
    pub fn checkpoint(&self) -> super::snapshot::Checkpoint {
        assert!(
            self.replay.as_ref().is_none_or(|r| r.is_empty()),
            "a checkpoint of shard {} with batches left to replay",
            self.id
        );
        super::snapshot::Checkpoint {
            shard: self.id,
            epoch: self.epoch,
            entities: self.entities.clone(),
            meta: super::snapshot::encode_meta_of(
                self.epoch,
                self.lc,
                &self.clients,
                self.map.clone(),
                &self.layout,
                self.snapshot_last_us,
                self.snapshot_interval_us,
            ),
        }
    }
}

impl Shard {
    /// Whether this shard was handed to another node at the end of its
    /// last epoch and waits for its driver to [`hand_off`](Shard::hand_off).
    pub fn is_departing(&self) -> bool {
        self.departing.is_some()
    }

    /// This departing shard stays on its node (every shard stops at a
    /// change of the layout with `Config::pause_at_handover`, those that
    /// keep their node too): it goes on in place, from the epoch after the
    /// one it departed at, as [`Shard::take_over`] of its hand-off would —
    /// nothing is copied, its snapshots stay incremental (its node holds
    /// their files), a snapshot still being copied goes on.
    ///
    /// # Panics
    /// If the shard is not departing.
    pub fn stay(&mut self) {
        let snapshot_due = self.departing.take().expect("stay of a shard that is not departing");
        assert_eq!(self.m.stage, Stage::Idle, "a departing shard is between epochs");
        assert!(self.tasks.all_finished(), "a departing shard has no task");
        // The snapshot that was due at the departure, then the next epoch
        // (and what peers sent of it meanwhile, with the requests forwarded
        // here while it was stopped).
        let epoch = self.m.epoch;
        self.go_on(epoch, snapshot_due);
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
        // The shard is spent: its entities move out, none is cloned.
        let entities = {
            let map = self.exec.map.borrow();
            let empty = Store::new(&self.exec.app, self.exec.id, &map);
            let store = std::mem::replace(&mut self.exec.st.borrow_mut().store, empty);
            store.into_live(|op, partition| map.owner(op, partition) == self.exec.id)
        };
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
            // A snapshot due now is taken on the new node; the interval
            // counts from this epoch's time either way there.
            snapshot_last_us: if snapshot_due {
                self.m.epoch_now_us
            } else {
                self.snap.last_us
            },
            snapshot_due,
            snapshot_interval_us: self.snap.interval_us,
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
        // Only messages of the next epoch wait at a departing shard, and
        // requests forwarded to it as its clients' home (accepted here).
        if let Some((_, m)) = h.deferred.iter().find(|(_, m)| match m.stage() {
            Some((e, _)) => e != h.epoch + 1,
            None => !matches!(m, Message::Submit { .. }),
        }) {
            return Err(crate::DecodeError::Invalid(format!(
                "shard {}'s hand-off at epoch {} holds an early message of epoch {:?}",
                h.id,
                h.epoch,
                m.stage().map(|(e, _)| e)
            )));
        }
        let invalid = |what: String| crate::DecodeError::Invalid(format!("shard {}'s hand-off: {what}", h.id));
        // Moves and handovers against this cluster (`decode` checked them
        // against the largest one): a bad one would fail every shard.
        let forwarded = h.deferred.iter().filter_map(|(_, m)| match m {
            Message::Submit { request, .. } => Some(request),
            _ => None,
        });
        let requests = h
            .pending
            .iter()
            .chain(h.clients.submitted_in_replay.iter())
            .map(|(_, r)| r)
            .chain(h.replay.iter().flatten().flat_map(|b| b.transactions().map(|(_, r)| r)))
            .chain(forwarded.clone());
        for r in forwarded {
            Shard::validate(&app, r).map_err(|a| invalid(format!("a forwarded request: {}", a.message())))?;
        }
        for r in requests {
            if let Some(m) = crate::Move::of(r) {
                m.and_then(|m| m.check(&app, h.n_shards)).map_err(invalid)?;
            } else if let Some(x) = crate::Handover::of(r) {
                x.and_then(|x| x.check(h.n_shards, h.layout.nodes())).map_err(invalid)?;
            }
        }
        let mut last = h.epoch;
        for b in h.replay.iter().flatten() {
            if b.epoch > EPOCH_MAX || b.lc > LC_MAX {
                return Err(invalid(format!(
                    "a replayed batch of epoch {}, counter {}",
                    b.epoch, b.lc
                )));
            }
            if b.epoch <= last {
                return Err(invalid(format!("a replayed batch of epoch {} after {last}", b.epoch)));
            }
            last = b.epoch;
        }
        let mut last = 0;
        for (e, _) in &h.held {
            if *e <= last || *e > h.epoch {
                return Err(invalid(format!(
                    "replies held for epoch {e} after {last}, at {}",
                    h.epoch
                )));
            }
            last = *e;
        }
        if let Some(b) = h.replay.iter().flatten().find(|b| b.shard != h.id) {
            return Err(crate::DecodeError::Invalid(format!(
                "shard {}'s hand-off replays a batch of shard {}",
                h.id, b.shard
            )));
        }
        {
            // In bulk (`Store::stage`): moved, hashed once, a partition's
            // table filled at a time.
            let mut st = shard.exec.st.borrow_mut();
            let map = shard.exec.map.borrow();
            st.store.reserve(h.entities.len());
            for (op, key, value) in h.entities {
                let hash = key.hash64();
                let partition = partition_of(hash, app.operator_info(op).partitions());
                let owner = map.owner(op, partition);
                if owner != h.id {
                    return Err(crate::DecodeError::Invalid(format!(
                        "shard {}'s hand-off holds partition {partition} of {}, which shard {owner} owns",
                        h.id,
                        app.operator_info(op).name()
                    )));
                }
                st.store.stage(op, partition, key, hash, value);
            }
            st.store.index_staged();
            // Marked for the next snapshot: the first one here is whole.
            st.store.mark_all_dirty();
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
        // Every entity is marked: the first snapshot here is whole.
        shard.snap.next_is_base = shard.config.snapshot_interval_us > 0;
        shard.m.epoch_now_us = h.snapshot_last_us;
        // Before the snapshot due: its meta carries the interval in force.
        shard.snap.interval_us = h.snapshot_interval_us;
        if h.snapshot_due {
            shard.snapshot_or_mark(h.epoch);
        }
        shard.snap.last_us = h.snapshot_last_us;
        shard.go_on(h.epoch, false);
        Ok(shard)
    }
}

/// Epochs and logical counters a hand-off may name: far past any real run
/// (2^48 epochs are ~900 years at 10 000 a second, 2^56 transactions ~200
/// years at 10 M a second) and still room for the arithmetic done on them
/// (`lc · n + id` < 2^62 for every shard count).
const EPOCH_MAX: Epoch = 1 << 48;
const LC_MAX: u64 = 1 << 56;

/// Version of a hand-off's encoding (2: queued moves carry their pace, 3:
/// the logged snapshot interval).
/// Hand-offs cross between processes of one build, so only this one is
/// read.
const HANDOFF_VERSION: u8 = 3;

/// A count of items of at least `item_bytes` bytes each, checked against
/// the bytes left (a hostile count allocates nothing).
fn count(input: &mut &[u8], item_bytes: usize) -> Result<usize, DecodeError> {
    let n = u64::decode(input)?;
    if n > (input.len() / item_bytes.max(1)) as u64 {
        return Err(DecodeError::Invalid(format!("{n} items in {} bytes", input.len())));
    }
    Ok(n as usize)
}

/// A length and that many bytes, in one copy.
fn put_bytes(bytes: &[u8], w: &mut Writer) {
    (bytes.len() as u32).encode(w);
    w.put(bytes);
}

/// What [`put_bytes`] wrote, borrowed from the input.
fn take_bytes<'a>(input: &mut &'a [u8]) -> Result<&'a [u8], DecodeError> {
    let n = u32::decode(input)? as usize;
    if input.len() < n {
        return Err(DecodeError::Short {
            expected: n - input.len(),
        });
    }
    let (head, tail) = input.split_at(n);
    *input = tail;
    Ok(head)
}

fn shard_id(input: &mut &[u8], n_shards: u16) -> Result<ShardId, DecodeError> {
    let s = u16::decode(input)?;
    if s >= n_shards {
        return Err(DecodeError::Invalid(format!("shard {s} of {n_shards}")));
    }
    Ok(s)
}

impl ReplyTo {
    pub(super) fn encode_to(&self, w: &mut Writer) {
        match *self {
            ReplyTo::Local(token) => {
                0u8.encode(w);
                token.encode(w);
            }
            ReplyTo::Remote { shard, token } => {
                1u8.encode(w);
                shard.encode(w);
                token.encode(w);
            }
            ReplyTo::Replayed => 2u8.encode(w),
        }
    }

    pub(super) fn decode_from(input: &mut &[u8], n_shards: u16) -> Result<ReplyTo, DecodeError> {
        Ok(match u8::decode(input)? {
            0 => ReplyTo::Local(u64::decode(input)?),
            1 => ReplyTo::Remote {
                shard: shard_id(input, n_shards)?,
                token: u64::decode(input)?,
            },
            2 => ReplyTo::Replayed,
            t => return Err(DecodeError::Tag(t)),
        })
    }
}

/// A request waiting somewhere, checked against the application.
pub(super) fn decode_waiting(input: &mut &[u8], app: &App, n_shards: u16) -> Result<(ReplyTo, Request), DecodeError> {
    let to = ReplyTo::decode_from(input, n_shards)?;
    let request = Request::decode(input)?;
    Shard::validate(app, &request).map_err(|a| DecodeError::Invalid(a.to_string()))?;
    Ok((to, request))
}

fn encode_batch_of_log(b: &Batch, w: &mut Writer) {
    (b.epoch, b.shard, b.lc, b.now_us).encode(w);
    (b.txns.len() as u64).encode(w);
    for (tid, r) in &b.txns {
        tid.encode(w);
        r.encode(w);
    }
}

fn decode_batch_of_log(input: &mut &[u8], app: &App, n_shards: u16) -> Result<Batch, DecodeError> {
    let epoch = Epoch::decode(input)?;
    let shard = shard_id(input, n_shards)?;
    let lc = u64::decode(input)?;
    let now_us = u64::decode(input)?;
    let n = count(input, 13)?;
    let mut txns = Vec::with_capacity(n);
    for _ in 0..n {
        let tid = u64::decode(input)?;
        let r = Request::decode(input)?;
        Shard::validate_logged(app, &r).map_err(|a| DecodeError::Invalid(a.to_string()))?;
        txns.push((tid, r));
    }
    Ok(Batch {
        epoch,
        shard,
        lc,
        now_us,
        txns,
    })
}

impl Handoff {
    /// The hand-off as bytes, to send to the new node.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        // Most of it is the entities: one allocation for them all.
        let entity_bytes: usize = self
            .entities
            .iter()
            .map(|(_, k, v)| 10 + k.as_bytes().len() + v.len())
            .sum();
        w.reserve(entity_bytes + 4_096);
        HANDOFF_VERSION.encode(&mut w);
        (
            self.id,
            self.n_shards,
            self.epoch,
            self.now_us,
            self.lc,
            self.last_start_us,
        )
            .encode(&mut w);
        (self.epoch_cap as u64).encode(&mut w);
        (self.pending.len() as u64).encode(&mut w);
        for (to, r) in &self.pending {
            to.encode_to(&mut w);
            r.encode(&mut w);
        }
        match &self.replay {
            None => 0u8.encode(&mut w),
            Some(q) => {
                1u8.encode(&mut w);
                (q.len() as u64).encode(&mut w);
                for b in q {
                    encode_batch_of_log(b, &mut w);
                }
            }
        }
        self.clients.encode_to(&mut w);
        self.map.encode(&mut w);
        self.layout.to_meta().encode(&mut w);
        (self.held.len() as u64).encode(&mut w);
        for (epoch, releases) in &self.held {
            epoch.encode(&mut w);
            (releases.len() as u64).encode(&mut w);
            for r in releases {
                r.to.encode_to(&mut w);
                r.tid.encode(&mut w);
                r.outcome.encode(&mut w);
            }
        }
        self.durable_local.encode(&mut w);
        self.durable_peers.encode(&mut w);
        let from: Vec<ShardId> = self.deferred.iter().map(|(f, _)| *f).collect();
        let messages: Vec<Message> = self.deferred.iter().map(|(_, m)| m.clone()).collect();
        from.encode(&mut w);
        let mut batch = Vec::new();
        crate::wire::encode_batch(&messages, &mut batch);
        put_bytes(&batch, &mut w);
        (self.entities.len() as u64).encode(&mut w);
        for (op, key, value) in &self.entities {
            op.0.encode(&mut w);
            put_bytes(key.as_bytes(), &mut w);
            value.with_aligned(|b| put_bytes(b, &mut w));
        }
        let s = &self.stats;
        (
            s.epochs,
            s.committed,
            s.aborted,
            s.reexecuted,
            s.serialized,
            s.invocations,
            s.snapshots,
            s.without_phase2,
        )
            .encode(&mut w);
        self.partition_invocations.encode(&mut w);
        (self.snapshot_last_us, self.snapshot_due, self.snapshot_interval_us).encode(&mut w);
        w.into_vec()
    }

    /// A hand-off from its bytes, checked against `app`: every count
    /// against the bytes left, every shard id, request and tag; the map,
    /// layout and entities' placement are checked by [`Shard::take_over`].
    pub fn decode(bytes: &[u8], app: &App) -> Result<Handoff, DecodeError> {
        let input = &mut &bytes[..];
        let version = u8::decode(input)?;
        if version != HANDOFF_VERSION {
            return Err(DecodeError::Invalid(format!(
                "a hand-off of version {version}; this engine reads {HANDOFF_VERSION}"
            )));
        }
        let (id, n_shards) = <(u16, u16)>::decode(input)?;
        if n_shards == 0 || usize::from(n_shards) > crate::ids::SHARDS_MAX || id >= n_shards {
            return Err(DecodeError::Invalid(format!("shard {id} of {n_shards}")));
        }
        let (epoch, now_us, lc, last_start_us) = <(u64, u64, u64, u64)>::decode(input)?;
        // Counters that later arithmetic (`epoch + 1`, a tid `lc · n + id`)
        // must not overflow.
        if epoch > EPOCH_MAX || lc > LC_MAX {
            return Err(DecodeError::Invalid(format!(
                "epoch {epoch}, counter {lc}: past any real run"
            )));
        }
        let epoch_cap = u64::decode(input)?;
        if epoch_cap == 0 || epoch_cap > 1 << 32 {
            return Err(DecodeError::Invalid(format!("an epoch cap of {epoch_cap}")));
        }
        let n = count(input, 10)?;
        let mut pending = VecDeque::with_capacity(n);
        for _ in 0..n {
            pending.push_back(decode_waiting(input, app, n_shards)?);
        }
        let replay = match u8::decode(input)? {
            0 => None,
            1 => {
                // epoch, shard, lc, now_us, txn count: 34 bytes at least.
                let n = count(input, 34)?;
                if n == 0 {
                    // A replay ends at the epoch end that empties it, before
                    // any hand-off: a shard rebuilt replaying nothing would
                    // never start an epoch.
                    return Err(DecodeError::Invalid("a replay of no batch".into()));
                }
                let mut q = VecDeque::with_capacity(n);
                for _ in 0..n {
                    q.push_back(decode_batch_of_log(input, app, n_shards)?);
                }
                Some(q)
            }
            t => return Err(DecodeError::Tag(t)),
        };
        let clients = Clients::decode_from(input, app, n_shards)?;
        let map = MapMeta::decode(input)?;
        let layout =
            Layout::from_meta(n_shards, &<crate::layout::LayoutMeta>::decode(input)?).map_err(DecodeError::Invalid)?;
        let n = count(input, 16)?;
        let mut held = VecDeque::with_capacity(n);
        for _ in 0..n {
            let epoch = Epoch::decode(input)?;
            let k = count(input, 10)?;
            let mut releases = Vec::with_capacity(k);
            for _ in 0..k {
                releases.push(Release {
                    to: ReplyTo::decode_from(input, n_shards)?,
                    tid: u64::decode(input)?,
                    outcome: crate::config::Outcome::decode(input)?,
                });
            }
            held.push_back((epoch, releases));
        }
        let durable_local = Epoch::decode(input)?;
        let durable_peers = Vec::<Epoch>::decode(input)?;
        if durable_peers.len() != usize::from(n_shards) {
            return Err(DecodeError::Invalid(format!(
                "{} durability marks for {n_shards} shards",
                durable_peers.len()
            )));
        }
        let from = Vec::<u16>::decode(input)?;
        let batch = take_bytes(input)?;
        let messages = crate::wire::decode_batch(batch, n_shards).map_err(|e| DecodeError::Invalid(e.to_string()))?;
        if from.len() != messages.len() || from.iter().any(|f| *f >= n_shards) {
            return Err(DecodeError::Invalid("early messages and their senders differ".into()));
        }
        let deferred = from.into_iter().zip(messages).collect();
        let n = count(input, 10)?;
        let mut entities = Vec::with_capacity(n);
        for _ in 0..n {
            let op = u16::decode(input)?;
            if usize::from(op) >= app.operator_count() {
                return Err(DecodeError::Invalid(format!("no operator {op}")));
            }
            let key = take_bytes(input)?;
            if key.len() > crate::KEY_LEN_MAX {
                return Err(DecodeError::Invalid(format!("a key of {} bytes", key.len())));
            }
            let value = take_bytes(input)?;
            entities.push((OpId(op), Key::from_bytes(key), Value::from_bytes(value)));
        }
        let (epochs, committed, aborted, reexecuted, serialized, invocations, snapshots, without_phase2) =
            <(u64, u64, u64, u64, u64, u64, u64, u64)>::decode(input)?;
        let stats = Stats {
            epochs,
            committed,
            aborted,
            reexecuted,
            serialized,
            invocations,
            snapshots,
            without_phase2,
        };
        let partition_invocations = Vec::<Vec<u64>>::decode(input)?;
        let shape_ok = partition_invocations.len() == app.operator_count()
            && app
                .operators()
                .zip(&partition_invocations)
                .all(|((_, op), counts)| counts.len() == op.partitions() as usize);
        if !shape_ok {
            return Err(DecodeError::Invalid("partition counters of another application".into()));
        }
        let (snapshot_last_us, snapshot_due, snapshot_interval_us) = <(u64, bool, Option<u64>)>::decode(input)?;
        if !input.is_empty() {
            return Err(DecodeError::Trailing(input.len()));
        }
        Ok(Handoff {
            id,
            n_shards,
            epoch,
            now_us,
            lc,
            last_start_us,
            epoch_cap: epoch_cap as usize,
            pending,
            replay,
            clients,
            map,
            layout,
            held,
            durable_local,
            durable_peers,
            deferred,
            entities,
            stats,
            partition_invocations,
            snapshot_last_us,
            snapshot_due,
            snapshot_interval_us,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Handover;
    use crate::sim::{Sim, test_config};

    #[test]
    fn a_replay_of_no_batch_is_refused() {
        let mut app = App::new("handoff");
        let op = app.operator("account", 4);
        app.function(op, "touch", |ctx, (): ()| async move {
            ctx.put(&1i64)?;
            Ok(())
        });
        let app = Arc::new(app);
        let mut sim = Sim::new(app.clone(), test_config(8), 2, 1);
        sim.set_layout(Layout::contiguous(&[1, 1]));
        sim.submit(0, 0, Handover { shard: 1, node: 0 }.request()).unwrap();
        sim.run();
        assert_eq!(sim.handoffs(), 1);
        let mut h = Handoff::decode(sim.last_handoff(), &app).unwrap();
        assert!(h.replay.is_none());
        h.replay = Some(VecDeque::new());
        let e = Handoff::decode(&h.encode(), &app).map(|_| ()).unwrap_err();
        assert!(e.to_string().contains("no batch"), "{e}");
    }
}
