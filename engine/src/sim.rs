//! The simulator: every shard in one thread, messages delivered in an order
//! drawn from a seed.
//!
//! Links between shards stay FIFO (the protocol relies on it), but which
//! link delivers next, how much of a batch it delivers, when the clock moves
//! and when a log write becomes durable are all drawn from the seed. A
//! failing seed therefore replays the same run exactly: print it, rerun it.
//!
//! **The disk.** The sim keeps a journal of what a production driver would
//! have put on disk, in order ([`DiskEvent`]): each shard's log is a
//! sequence of per-epoch batch writes, each followed by its fsync; a
//! snapshot is one delta file per shard (its chunks, in order), then a
//! manifest, written as soon as every shard's file is complete and every
//! shard's log is durable through the snapshot's epoch (the runtime's
//! committer rule). A shard hears that its log is durable
//! ([`Shard::log_durable`]) only right after the `LogSync` event, so every
//! reply is released after the fsyncs it waits for: a crash test cuts the
//! journal at any event and knows exactly what survived and which replies
//! had left ([`Sim::take_replies_at`]). [`Disks`] turns the journal into
//! what each node's disk holds and restarts a fresh sim from it through
//! [`crate::recovery`], the functions the runtime recovers with.
//!
//! **Nodes.** By default every shard runs on one node. [`Sim::set_nodes`]
//! splits the shards into nodes, numbered as a cluster numbers them (node 0
//! owns the first shards, node 1 the next ones, …). A link between shards
//! of different nodes is remote: each batch sent on it becomes deliverable
//! only after a delay drawn from the seed, and stays behind the batches sent
//! before it (TCP is FIFO; the protocol relies on it). Each node commits its
//! own manifest ([`DiskEvent::NodeManifest`]) once its own shards' files are
//! complete and its own shards' logs durable through the snapshot's epoch; a
//! snapshot is usable once every node committed it. [`Sim::crash_node`]
//! stops one node: its shards do nothing more, the others run on (they have
//! not noticed yet). A sim of one node draws exactly the random numbers it
//! drew before nodes existed, so old seeds replay the same runs.

use crate::abort::Abort;
use crate::app::App;
use crate::config::{Batch, Config, Durability, Reply, Request, SnapshotChunk, Token};
use crate::history::EpochRecord;
use crate::ids::{Epoch, OpId, ShardId};
use crate::key::Key;
use crate::layout::{Layout, Switched};
use crate::message::Message;
use crate::rng::Rng;
use crate::shard::{Outputs, Shard};
use crate::value::Value;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

mod disk;
pub mod swarm;

pub use disk::{Disks, Restart};

/// Steps without progress after which a run is declared stuck.
pub const STUCK_STEPS_MAX: u64 = 1_000_000;

/// One event of the simulated disk (see the module comment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskEvent {
    /// `shard`'s batch of `epoch` appended to its log on `node` (the one
    /// that ran the shard in that epoch), not yet durable: a crash before
    /// the next event loses it (or tears it, which the WAL detects and
    /// truncates: the same).
    LogWrite { node: u16, shard: ShardId, epoch: Epoch },
    /// `shard`'s log on `node` fsynced: durable through `epoch`.
    LogSync { node: u16, shard: ShardId, epoch: Epoch },
    /// A chunk of `shard`'s snapshot at `epoch` written to its delta file
    /// on `node` (the one that runs the shard after the epoch); `index`
    /// counts every chunk the sim emitted, in the order
    /// [`Sim::take_snapshots`] returns them. The file is complete at `last`.
    Chunk {
        node: u16,
        shard: ShardId,
        epoch: Epoch,
        index: usize,
        last: bool,
    },
    /// The manifest of the snapshot at `epoch` committed: recovery starts
    /// from it and replays only the logged epochs after it. Only in a sim of
    /// one node.
    Manifest { epoch: Epoch },
    /// In a sim of several nodes, `node` committed its own manifest of the
    /// snapshot at `epoch`: its shards' files are complete and its shards'
    /// logs durable through `epoch`. The snapshot is complete once every
    /// node committed it; until then recovery rolls back to an older one.
    NodeManifest { node: u16, epoch: Epoch },
}

/// Bound of the delay drawn for a batch on a remote link, by default.
pub const REMOTE_DELAY_US_MAX: u64 = 200;
/// A remote batch is held up this many times longer with chance
/// [`REMOTE_STALL_CHANCE`] (a retransmission, a full socket buffer).
const REMOTE_STALL_FACTOR: u64 = 10;
const REMOTE_STALL_CHANCE: f64 = 0.05;

/// A batch on a link, deliverable from `deliverable_us` on.
struct Flight {
    deliverable_us: u64,
    batch: Vec<Message>,
}

/// A simulated engine.
pub struct Sim {
    app: Arc<App>,
    config: Config,
    shards: Vec<Shard>,
    /// Shards rebuilt from their hand-off so far.
    handoffs: u64,
    /// Whether the sim rebuilds a departing shard itself (the default) or
    /// leaves it to the caller ([`Sim::replace_shard`]).
    auto_hand_over: bool,
    last_handoff: Vec<u8>,
    /// `links[from * n + to]`: batches in flight, oldest first.
    links: Vec<VecDeque<Flight>>,
    /// Which node runs each shard now (see [`Sim::set_nodes`]; it follows
    /// the engine's handovers).
    layout: Layout,
    /// The layouts the run went through: `(e, layout)` holds from epoch
    /// `e` on, until the next entry's.
    layouts: Vec<(Epoch, Layout)>,
    /// Every handover followed, in version order.
    switched: Vec<Switched>,
    /// Per shard, the node it runs on now: the layout's once it departed
    /// and was rebuilt there (the layout switches at the first shard's
    /// report; the handed shard may still be ending the epoch on its old
    /// node).
    at: Vec<u16>,
    /// Per shard, false once its node crashed ([`Sim::crash_node`]).
    alive: Vec<bool>,
    /// Per node, false once it crashed.
    node_alive: Vec<bool>,
    /// See [`Sim::set_remote_delay_us_max`].
    remote_delay_us_max: u64,
    rng: Rng,
    seed: u64,
    now_us: u64,
    /// Replies released, each with the number of disk events before it.
    replies: Vec<(usize, Reply)>,
    /// Outcomes of replayed transactions (token = tid), apart from replies.
    replayed: Vec<Reply>,
    history: Vec<EpochRecord>,
    logs: Vec<Vec<Batch>>,
    snapshots: Vec<SnapshotChunk>,
    /// Log batches sealed but not yet written and synced: `(shard, epoch)`.
    unsynced: Vec<(ShardId, Epoch)>,
    /// Per shard, the first epoch of its log lost in a node's crash: no
    /// later batch of it becomes durable (its log would have a hole).
    lost_from: Vec<Option<Epoch>>,
    disk: Vec<DiskEvent>,
    /// Snapshot chunks emitted so far (the next chunk's index).
    chunks_emitted: usize,
    /// Per shard, the epoch through which its log is synced.
    synced: Vec<Epoch>,
    /// Snapshots not yet committed by every node: epoch -> per node, how
    /// many of the shards it runs after the epoch completed their file.
    snapshot_files: BTreeMap<Epoch, Vec<u16>>,
    /// Per node, the newest snapshot whose manifest it committed.
    manifested: Vec<Epoch>,
    /// See [`Sim::set_fsync_busy`].
    fsync_busy: f64,
    out: Outputs,
    steps: u64,
}

impl Sim {
    pub fn new(app: Arc<App>, config: Config, n_shards: u16, seed: u64) -> Sim {
        let shards = (0..n_shards)
            .map(|i| Shard::new(app.clone(), config.clone(), i, n_shards))
            .collect();
        let n = n_shards as usize;
        Sim {
            app,
            config,
            shards,
            handoffs: 0,
            auto_hand_over: true,
            last_handoff: Vec::new(),
            links: (0..n * n).map(|_| VecDeque::new()).collect(),
            layout: Layout::single(n_shards),
            layouts: vec![(0, Layout::single(n_shards))],
            switched: Vec::new(),
            at: vec![0; n],
            alive: vec![true; n],
            node_alive: vec![true],
            remote_delay_us_max: REMOTE_DELAY_US_MAX,
            rng: Rng::new(seed),
            seed,
            now_us: 1_700_000_000_000_000,
            replies: Vec::new(),
            replayed: Vec::new(),
            history: Vec::new(),
            logs: vec![Vec::new(); n],
            snapshots: Vec::new(),
            unsynced: Vec::new(),
            lost_from: vec![None; n],
            disk: Vec::new(),
            chunks_emitted: 0,
            synced: vec![0; n],
            snapshot_files: BTreeMap::new(),
            manifested: vec![0],
            fsync_busy: 0.0,
            out: Outputs::default(),
            steps: 0,
        }
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    pub fn n_shards(&self) -> u16 {
        self.shards.len() as u16
    }

    pub fn shard(&self, i: ShardId) -> &Shard {
        &self.shards[i as usize]
    }

    pub fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }

    /// Splits the shards into nodes: `shards[i]` shards on node `i`, in
    /// order (the first ones on node 0). Call it before anything runs.
    pub fn set_nodes(&mut self, shards: &[u16]) {
        assert!(!shards.is_empty() && shards.iter().all(|s| *s > 0), "nodes {shards:?}");
        assert_eq!(
            shards.iter().map(|s| usize::from(*s)).sum::<usize>(),
            self.shards.len(),
            "nodes {shards:?} for {} shards",
            self.shards.len()
        );
        assert!(
            self.steps == 0 && self.disk.is_empty() && self.links.iter().all(VecDeque::is_empty),
            "set_nodes after the run started"
        );
        self.set_layout(Layout::contiguous(shards));
    }

    /// Sets which node runs each shard (a node may run none: a spare that
    /// shards can be handed over to). Call it before anything runs.
    pub fn set_layout(&mut self, layout: Layout) {
        assert_eq!(layout.n_shards(), self.n_shards(), "a layout of other shards");
        assert!(
            self.steps == 0 && self.disk.is_empty() && self.links.iter().all(VecDeque::is_empty),
            "set_layout after the run started"
        );
        for shard in &mut self.shards {
            shard.set_layout(layout.clone());
        }
        let nodes = usize::from(layout.nodes());
        self.at = (0..layout.n_shards()).map(|s| layout.node_of(s)).collect();
        self.layouts = vec![(0, layout.clone())];
        self.layout = layout;
        self.node_alive = vec![true; nodes];
        self.manifested = vec![0; nodes];
    }

    /// After shards were restored from a snapshot (before anything ran):
    /// takes their layout, the snapshot's, as the driver's.
    pub fn adopt_restored_layout(&mut self) {
        assert!(
            self.steps == 0 && self.disk.is_empty(),
            "adopt_restored_layout after the run started"
        );
        let layout = self.shards[0].layout().placed();
        assert!(
            self.shards.iter().all(|s| s.layout().placed() == layout),
            "shards restored different layouts"
        );
        assert_eq!(layout.nodes(), self.layout.nodes(), "a restored layout of other nodes");
        self.switched.clear();
        self.at = (0..layout.n_shards()).map(|s| layout.node_of(s)).collect();
        self.layouts = vec![(0, layout.clone())];
        self.layout = layout;
    }

    /// Which node runs each shard now.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The shards handed over so far, in the order the engine decided.
    pub fn handovers(&self) -> &[Switched] {
        &self.switched
    }

    /// The layout during `epoch`.
    fn layout_at(&self, epoch: Epoch) -> &Layout {
        let at = self.layouts.partition_point(|(e, _)| *e <= epoch);
        &self.layouts[at - 1].1
    }

    /// How many nodes the shards run on.
    pub fn n_nodes(&self) -> u16 {
        self.layout.nodes()
    }

    /// The node that runs `shard`.
    pub fn node_of(&self, shard: ShardId) -> u16 {
        self.at[shard as usize]
    }

    /// The shards `node` runs now (a shard handed to it once it left its
    /// old node).
    pub fn shards_of(&self, node: u16) -> Vec<ShardId> {
        (0..self.n_shards()).filter(|s| self.at[*s as usize] == node).collect()
    }

    /// The simulated clock (µs since the Unix epoch).
    pub fn now_us(&self) -> u64 {
        self.now_us
    }

    /// Moves the clock forward to `now_us` (a restarted cluster does not
    /// go back in time).
    pub fn advance_clock_us(&mut self, now_us: u64) {
        assert!(now_us >= self.now_us, "the clock goes back to {now_us}");
        self.now_us = now_us;
    }

    /// Batches on links, sent and not yet delivered.
    pub fn in_flight(&self) -> usize {
        self.links.iter().map(VecDeque::len).sum()
    }

    /// Whether `shard`'s node has not crashed.
    pub fn is_alive(&self, shard: ShardId) -> bool {
        self.alive[shard as usize]
    }

    /// Bounds the delay of a batch on a remote link (µs; see
    /// [`REMOTE_DELAY_US_MAX`]).
    pub fn set_remote_delay_us_max(&mut self, delay_us_max: u64) {
        self.remote_delay_us_max = delay_us_max;
    }

    /// Crashes `node` now: its shards stop for good (no step, no delivery,
    /// no fsync; the log writes they queued are lost), batches sent to them
    /// are dropped, and of the batches they sent a prefix drawn from the
    /// seed per link still arrives (what the kernel had sent before the
    /// connection broke). The other nodes run on as if nothing happened:
    /// they have not detected the failure yet.
    pub fn crash_node(&mut self, node: u16) {
        assert!(node < self.n_nodes(), "node {node} of {}", self.n_nodes());
        let n = self.shards.len();
        self.node_alive[usize::from(node)] = false;
        for s in self.shards_of(node) {
            self.alive[s as usize] = false;
        }
        // Log writes queued on the node are lost, and with them every later
        // one of the same shard (a shard handed away from the node): a
        // shard's log becomes durable in epoch order whichever node writes
        // it, so they could never be synced.
        let mut lost: Vec<Option<Epoch>> = vec![None; n];
        for &(s, e) in &self.unsynced {
            if self.layout_at(e).node_of(s) == node {
                let first = &mut lost[s as usize];
                *first = Some(first.map_or(e, |f| f.min(e)));
            }
        }
        self.unsynced
            .retain(|(s, e)| lost[*s as usize].is_none_or(|first| *e < first));
        for (s, first) in lost.into_iter().enumerate() {
            if let Some(first) = first {
                let f = &mut self.lost_from[s];
                *f = Some(f.map_or(first, |f| f.min(first)));
            }
        }
        for from in 0..n {
            for to in 0..n {
                let link = &mut self.links[from * n + to];
                if !self.alive[to] {
                    link.clear();
                } else if !self.alive[from] && !link.is_empty() {
                    let kept = self.rng.below(link.len() as u64 + 1) as usize;
                    link.truncate(kept);
                }
            }
        }
    }

    /// `shard` departed its node: it is rebuilt from its hand-off, as the
    /// node it goes to would (the old one is dropped: nothing it did not
    /// hand off survives).
    fn hand_over(&mut self, shard: ShardId) {
        let to = self.layout.node_of(shard);
        if to == self.at[shard as usize] && self.node_alive[usize::from(to)] && self.seed & 4 != 0 {
            // It stopped at a change of the layout (`pause_at_handover`)
            // but keeps its node: it goes on in place, as a runtime that
            // keeps its staying shards does (on half the seeds; the others
            // rebuild it from its hand-off, as a runtime that rebuilds
            // every shard would).
            self.stay_in_place(shard);
            return;
        }
        let handoff = self.shards[shard as usize].hand_off();
        // The chunks of a snapshot it finished on the node it left.
        self.collect(shard);
        if !self.node_alive[usize::from(to)] {
            // Handed to a crashed node: it never starts there.
            self.stop_shard(shard);
            return;
        }
        self.at[shard as usize] = to;
        // Through bytes, as between two nodes.
        let bytes = handoff.encode();
        let handoff = crate::Handoff::decode(&bytes, &self.app)
            .unwrap_or_else(|e| panic!("shard {shard}'s hand-off does not decode: {e}"));
        self.last_handoff = bytes;
        let taken = Shard::take_over(self.app.clone(), self.config.clone(), handoff)
            .unwrap_or_else(|e| panic!("shard {shard}'s hand-off: {e}"));
        self.shards[shard as usize] = taken;
        self.handoffs += 1;
        self.collect(shard);
    }

    /// Leaves departing shards to the caller, who takes their hand-off
    /// (`shard_mut(s).hand_off()`) and puts the rebuilt shard in with
    /// [`Sim::replace_shard`] (a benchmark timing the steps).
    pub fn set_auto_hand_over(&mut self, auto: bool) {
        self.auto_hand_over = auto;
    }

    /// Lets departing shard `shard`, which keeps its node, go on in place
    /// ([`Shard::stay`]) instead of being rebuilt from its hand-off.
    ///
    /// # Panics
    /// If the shard is not departing or changes nodes.
    pub fn stay_in_place(&mut self, shard: ShardId) {
        assert_eq!(
            self.layout.node_of(shard),
            self.at[shard as usize],
            "shard {shard} changes nodes: it goes on from its hand-off"
        );
        self.shards[shard as usize].stay();
        self.collect(shard);
    }

    /// Puts `taken` (rebuilt by [`Shard::take_over`] from the hand-off of
    /// the shard with its id, which departed) in that shard's place.
    pub fn replace_shard(&mut self, taken: Shard) {
        let id = taken.id();
        assert!(
            !self.shards[id as usize].is_departing(),
            "replace_shard before the shard's hand_off"
        );
        self.collect(id);
        self.shards[id as usize] = taken;
        self.at[id as usize] = self.layout.node_of(id);
        self.handoffs += 1;
        self.collect(id);
    }

    /// How many shards were rebuilt from their hand-off.
    pub fn handoffs(&self) -> u64 {
        self.handoffs
    }

    /// The bytes of the last hand-off (empty before one).
    pub fn last_handoff(&self) -> &[u8] {
        &self.last_handoff
    }

    /// Stops `shard` as a crash of its node does (its queued log writes
    /// stay: they are on the node it left).
    fn stop_shard(&mut self, shard: ShardId) {
        let n = self.shards.len();
        self.alive[shard as usize] = false;
        for from in 0..n {
            self.links[from * n + shard as usize].clear();
        }
    }

    /// Loads an entity on the shard that owns it (by the map now: every
    /// shard holds the same map between epochs).
    pub fn load(&mut self, op: OpId, key: &Key, value: Option<Value>) {
        let owner = self.shards[0].owner_now(op, key);
        self.shards[owner as usize].load(op, key, value);
    }

    /// Submits a request on `shard`.
    pub fn submit(&mut self, shard: ShardId, token: Token, request: Request) -> Result<(), Abort> {
        assert!(self.alive[shard as usize], "submit on crashed shard {shard}");
        self.shards[shard as usize].tick(self.now_us);
        let r = self.shards[shard as usize].submit(token, request);
        self.collect(shard);
        r
    }

    /// Queues logged batches for replay on their shards.
    pub fn replay(&mut self, batches: Vec<Batch>) {
        let mut per_shard: Vec<Vec<Batch>> = vec![Vec::new(); self.shards.len()];
        for b in batches {
            per_shard[b.shard as usize].push(b);
        }
        for (i, mut bs) in per_shard.into_iter().enumerate() {
            bs.sort_by_key(|b| b.epoch);
            self.shards[i].replay(bs);
            self.collect(i as ShardId);
        }
    }

    fn collect(&mut self, shard: ShardId) {
        let n = self.shards.len();
        self.shards[shard as usize].drain(&mut self.out);
        // First: a snapshot's chunks below go to the disk of the node that
        // runs the shard after the switch.
        for s in std::mem::take(&mut self.out.handovers) {
            self.follow(s);
        }
        for (to, msgs) in self.out.messages.iter_mut().enumerate() {
            if msgs.is_empty() {
                continue;
            }
            assert_ne!(to, shard as usize, "a shard sent itself a message over a link");
            if !self.alive[to] {
                // The peer's node crashed: nothing arrives there.
                msgs.clear();
                continue;
            }
            let deliverable_us = if self.at[shard as usize] == self.at[to] {
                0
            } else {
                let mut delay_us = self.rng.below(self.remote_delay_us_max + 1);
                if self.rng.chance(REMOTE_STALL_CHANCE) {
                    delay_us *= REMOTE_STALL_FACTOR;
                }
                self.now_us + delay_us
            };
            self.links[shard as usize * n + to].push_back(Flight {
                deliverable_us,
                batch: std::mem::take(msgs),
            });
        }
        let at = self.disk.len();
        self.replies.extend(self.out.replies.drain(..).map(|r| (at, r)));
        self.replayed.append(&mut self.out.replayed);
        self.history.append(&mut self.out.history);
        for c in &self.out.snapshots {
            // The file is on the node that runs the shard after the
            // snapshot's epoch (the layout switches before it begins).
            let node = self.layout_at(c.epoch + 1).node_of(c.shard);
            self.disk.push(DiskEvent::Chunk {
                node,
                shard: c.shard,
                epoch: c.epoch,
                index: self.chunks_emitted,
                last: c.last,
            });
            self.chunks_emitted += 1;
            if c.last {
                let node = usize::from(node);
                let nodes = usize::from(self.n_nodes());
                self.snapshot_files.entry(c.epoch).or_insert_with(|| vec![0; nodes])[node] += 1;
            }
        }
        // Kept as copies; the buffers go back to the shard, as a runtime's
        // writer gives them back, so every later snapshot here fills one
        // that held an earlier one's entities.
        for mut c in self.out.snapshots.drain(..) {
            let buffer = std::mem::take(&mut c.entries);
            c.entries = buffer.clone();
            self.snapshots.push(c);
            self.shards[shard as usize].recycle_snapshot_buffer(buffer);
        }
        for b in self.out.log.drain(..) {
            if self.lost_from[b.shard as usize].is_none_or(|first| b.epoch < first) {
                self.unsynced.push((b.shard, b.epoch));
            }
            self.logs[shard as usize].push(b);
        }
        self.commit_manifests();
        // Last: every output of the departing shard is taken above.
        if self.auto_hand_over && self.alive[shard as usize] && self.shards[shard as usize].is_departing() {
            self.hand_over(shard);
        }
    }

    /// A shard reported a handover: the first report of each switches the
    /// layout (links and disks follow it); the others must agree.
    fn follow(&mut self, s: Switched) {
        if s.version <= self.layout.version() {
            // Versions before those followed here came with a snapshot.
            let first = self.layout.version() - self.switched.len() as u64;
            if s.version > first {
                assert_eq!(
                    self.switched[(s.version - first) as usize - 1],
                    s,
                    "shards decided different handovers"
                );
            }
            return;
        }
        self.layout.follow(&s);
        self.switched.push(s);
        let first = s.epoch + 1;
        if self.layouts.last().is_some_and(|(e, _)| *e == first) {
            self.layouts.pop();
        }
        self.layouts.push((first, self.layout.clone()));
    }

    /// Writes, per live node, the manifest of every snapshot whose files
    /// are all complete on the node and whose epoch every log of the node
    /// holds durably, oldest first. The node's shards are those it runs
    /// after the snapshot's epoch (a node running none commits at once).
    fn commit_manifests(&mut self) {
        if self.snapshot_files.is_empty() {
            return;
        }
        let nodes = self.n_nodes();
        let epochs: Vec<Epoch> = self.snapshot_files.keys().copied().collect();
        for node in 0..nodes {
            let i = usize::from(node);
            if !self.node_alive[i] {
                continue;
            }
            for &epoch in &epochs {
                if self.manifested[i] >= epoch {
                    continue;
                }
                let shards: Vec<ShardId> = self.layout_at(epoch + 1).shards_of(node).collect();
                let complete = self.snapshot_files[&epoch][i];
                assert!(
                    usize::from(complete) <= shards.len(),
                    "snapshot {epoch} completed {complete} times on node {node}"
                );
                let logged = shards.iter().all(|s| self.synced[*s as usize] >= epoch);
                if usize::from(complete) < shards.len() || !logged {
                    // Oldest first: the newer ones wait for this one.
                    break;
                }
                self.manifested[i] = epoch;
                self.disk.push(if nodes == 1 {
                    DiskEvent::Manifest { epoch }
                } else {
                    DiskEvent::NodeManifest { node, epoch }
                });
            }
        }
        let manifested = &self.manifested;
        self.snapshot_files.retain(|e, _| manifested.iter().any(|m| m < e));
    }

    /// Does one thing chosen by the seed; false when nothing is left to do.
    pub fn step(&mut self) -> bool {
        self.steps += 1;
        self.now_us += self.rng.below(20);
        let n = self.shards.len();
        let now_us = self.now_us;
        let busy: Vec<usize> = (0..self.links.len())
            .filter(|i| self.links[*i].front().is_some_and(|f| f.deliverable_us <= now_us))
            .collect();
        let working: Vec<usize> = (0..n)
            .filter(|i| self.alive[*i] && self.shards[*i].has_work())
            .collect();
        let choices = busy.len() + self.unsynced.len() + working.len();
        if choices == 0 {
            // Nothing to do now: let time pass so gathering shards start
            // and remote batches arrive.
            let next_us = self
                .links
                .iter()
                .filter_map(|l| l.front())
                .map(|f| f.deliverable_us)
                .min();
            let quiet = (0..n).all(|i| !self.alive[i] || self.shards[i].is_quiet());
            if quiet && next_us.is_none() {
                return false;
            }
            self.now_us += 1_000;
            if let Some(next_us) = next_us {
                self.now_us = self.now_us.min(next_us.max(now_us + 1));
            }
            for i in 0..n {
                if self.alive[i] {
                    self.shards[i].tick(self.now_us);
                    self.collect(i as ShardId);
                }
            }
            return true;
        }
        let pick = self.rng.below(choices as u64) as usize;
        if pick < busy.len() {
            let link = busy[pick];
            let (from, to) = (link / n, link % n);
            let head = &mut self.links[link].front_mut().expect("busy link").batch;
            let batch = if head.len() > 1 && self.rng.chance(0.25) {
                // Deliver a prefix: the rest stays first in line.
                let cut = 1 + self.rng.below(head.len() as u64 - 1) as usize;
                let rest = head.split_off(cut);
                std::mem::replace(head, rest)
            } else {
                self.links[link].pop_front().expect("busy link").batch
            };
            self.shards[to].receive(from as ShardId, batch);
            self.collect(to as ShardId);
        } else if pick >= busy.len() + self.unsynced.len() {
            let shard = working[pick - busy.len() - self.unsynced.len()];
            self.shards[shard].step();
            self.collect(shard as ShardId);
        } else if self.fsync_busy > 0.0 && self.rng.chance(self.fsync_busy) {
            // The disk is still busy: the log write waits.
        } else {
            // Log writes become durable in order per shard.
            let i = pick - busy.len();
            let (shard, _) = self.unsynced[i];
            let first = self.unsynced.iter().position(|(s, _)| *s == shard).expect("entry");
            let (shard, epoch) = self.unsynced.remove(first);
            assert!(
                epoch > self.synced[shard as usize],
                "log batches of shard {shard} out of order"
            );
            let node = self.layout_at(epoch).node_of(shard);
            self.disk.push(DiskEvent::LogWrite { node, shard, epoch });
            self.disk.push(DiskEvent::LogSync { node, shard, epoch });
            self.synced[shard as usize] = epoch;
            self.commit_manifests();
            // Only now, after the fsync, may the shard count the epoch
            // durable (unless it was stopped: handed to a crashed node).
            if self.alive[shard as usize] {
                self.shards[shard as usize].log_durable(epoch);
                self.collect(shard);
            }
        }
        if self.rng.chance(0.01) {
            let i = self.rng.below(n as u64) as usize;
            if self.alive[i] {
                self.shards[i].tick(self.now_us);
                self.collect(i as ShardId);
            }
        }
        true
    }

    /// Runs until nothing is in flight, pending or held.
    ///
    /// # Panics
    /// If the run makes no progress for [`STUCK_STEPS_MAX`] steps.
    pub fn run(&mut self) {
        let start = self.steps;
        while self.step() {
            assert!(
                self.steps - start < STUCK_STEPS_MAX,
                "simulation stuck (seed {}):\n{}",
                self.seed,
                self.shards.iter().map(Shard::describe).collect::<Vec<_>>().join("\n")
            );
        }
    }

    /// Outcomes of the transactions replayed from the log so far, taken
    /// (each `token` is its tid): what recovery computed, which no client
    /// is answered.
    pub fn take_replayed(&mut self) -> Vec<Reply> {
        std::mem::take(&mut self.replayed)
    }

    /// Replies to submitted requests released so far, taken.
    pub fn take_replies(&mut self) -> Vec<Reply> {
        self.replies.drain(..).map(|(_, r)| r).collect()
    }

    /// Replies released so far, taken, each with the number of disk events
    /// that happened before its release: a crash after `k` events happens
    /// after every reply whose count is at most `k` left.
    pub fn take_replies_at(&mut self) -> Vec<(usize, Reply)> {
        std::mem::take(&mut self.replies)
    }

    /// Makes the simulated disk slow: a step that would write and fsync a
    /// log batch does nothing with chance `p`, so epochs end and peers run
    /// ahead while logs lag (replies then wait longer for durability, and
    /// crashes find the shards' logs at different epochs). The default, 0,
    /// draws nothing extra from the seed.
    pub fn set_fsync_busy(&mut self, p: f64) {
        assert!((0.0..1.0).contains(&p), "fsync busy chance {p}");
        self.fsync_busy = p;
    }

    /// The disk's journal so far (see [`DiskEvent`]).
    pub fn disk_events(&self) -> &[DiskEvent] {
        &self.disk
    }

    /// Epoch records released so far, taken (with `Config::record_history`).
    pub fn take_history(&mut self) -> Vec<EpochRecord> {
        std::mem::take(&mut self.history)
    }

    /// Snapshot chunks emitted so far, taken.
    pub fn take_snapshots(&mut self) -> Vec<SnapshotChunk> {
        std::mem::take(&mut self.snapshots)
    }

    /// Mutable access to a shard (to restore it before a run).
    pub fn shard_mut(&mut self, i: ShardId) -> &mut Shard {
        &mut self.shards[i as usize]
    }

    /// Every batch `shard` emitted for its log, in epoch order.
    pub fn log(&self, shard: ShardId) -> &[Batch] {
        &self.logs[shard as usize]
    }

    /// Every batch each shard emitted for the log, in order.
    pub fn logs(&self) -> Vec<Batch> {
        self.logs.iter().flatten().cloned().collect()
    }

    /// The whole state, sorted.
    pub fn state(&self) -> BTreeMap<(OpId, Key), Value> {
        let mut out = BTreeMap::new();
        for s in &self.shards {
            s.for_each_entity(|op, k, v| {
                out.insert((op, k.clone()), v.clone());
            });
        }
        out
    }

    pub fn stats(&self) -> crate::shard::Stats {
        let mut total = crate::shard::Stats::default();
        for s in &self.shards {
            let st = s.stats();
            total.epochs = total.epochs.max(st.epochs);
            total.committed += st.committed;
            total.aborted += st.aborted;
            total.reexecuted += st.reexecuted;
            total.serialized += st.serialized;
            total.invocations += st.invocations;
            assert_eq!(
                st.without_phase2,
                self.shards[0].stats().without_phase2,
                "every shard skips the same phases 2"
            );
            total.without_phase2 = st.without_phase2;
        }
        total
    }
}

/// A convenience: a config suited to the simulator (durable log, history).
pub fn test_config(epoch_txns_max: usize) -> Config {
    Config {
        epoch_txns_max,
        // Tests choose their epochs' shape.
        epoch_txns_adaptive: false,
        durability: Durability::Log,
        record_history: true,
        ..Config::default()
    }
}
