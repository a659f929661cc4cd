//! Several nodes, one engine: the cluster's layout and its control plane.
//!
//! A cluster is a static list of nodes ([`Spec`]). Shards are numbered
//! across it: node 0 owns the first `shards` ids, node 1 the next, and so
//! on, and every shard runs the same epoch protocol with every other one —
//! a shard on another node is reached over TCP instead of an in-process
//! queue (`remote`), nothing else changes in the engine.
//!
//! The control plane is a TCP connection between every pair of nodes, on
//! plain threads so that a busy shard never delays it. It does three jobs:
//!
//! - **Join.** Before its shards start, a node says hello to every other
//!   node with what its disk holds: the snapshots it completed and the last
//!   epoch its logs reached. With every hello in, each node computes the
//!   same [`Plan`]: restore the newest snapshot that *every* node completed,
//!   replay every log up to the newest epoch *any* node logged (a shard
//!   whose log lacks an epoch replays it empty, as a single node does after
//!   a crash: no reply of such an epoch was released, since replies wait
//!   for every shard's log). The run's id mixes every node's incarnation
//!   and join round, so data links of different runs never connect.
//! - **Failure detection.** Heartbeats every `heartbeat`; a node silent for
//!   `failure_timeout`, or a connection that breaks, fails the run: every
//!   node stops its shards, re-reads its disk and joins again (the failed
//!   node once its supervisor restarted it). No acknowledged transaction is
//!   lost (it is in every log), none is duplicated (replay rebuilds the
//!   exactly-once table), clients retry the rest.
//! - **Snapshot completion.** A node commits its own manifest when its
//!   shards' files are written; a snapshot is complete for the cluster once
//!   every node committed it. Until then nodes keep the older snapshot and
//!   the logs after it: the cluster may still roll back to it.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use styx_engine::{Decode, Encode, Epoch, Layout, Payload, SHARDS_MAX, ShardId};

/// The join's survey and plan are the engine's recovery decision, shared
/// with the simulator that tests it.
pub use styx_engine::recovery::{Plan, Survey};

/// Nodes in a cluster at most.
pub const NODES_MAX: usize = SHARDS_MAX;
/// A control frame's payload is at most this long.
const CONTROL_FRAME_BYTES_MAX: usize = 1 << 20;
/// Snapshot epochs a hello lists at most.
const HELLO_SNAPSHOTS_MAX: usize = 1 << 12;
/// How often a node waiting for its peers tries to reach them again, at
/// most (it starts at `DIAL_RETRY_MIN` and doubles while nobody answers:
/// peers joining the next round after a handover are milliseconds apart,
/// a peer being restarted may take seconds), and how long a dial waits.
const DIAL_RETRY: Duration = Duration::from_millis(50);
const DIAL_RETRY_MIN: Duration = Duration::from_micros(200);
/// A connection accepted before the join is greeted if it is younger than
/// this (its peer waits `HELLO_TIMEOUT` for the answer), else dropped.
const EARLY_CONNECTION_KEPT: Duration = Duration::from_secs(1);
/// A connection that says nothing for this long during the join is dropped.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// A dial answered more than `HELLO_TIMEOUT` after it was accepted gets
/// this long for its hello (which a real peer sent as it connected: it is
/// read at once if it is there).
const ACCEPTED_HELLO_GRACE: Duration = Duration::from_millis(10);
/// A refused hello on the control port is logged at most this often.
const REFUSED_LOG_INTERVAL: Duration = Duration::from_secs(1);
/// How long a node that left, started again, tries to greet the others
/// (a node that restarted before it recorded the leave waits for its
/// hello) and waits for their greetings (running ones greet it every
/// `GONE_GREETING_EVERY`) before it stops.
const FAREWELL_WAIT: Duration = Duration::from_secs(10);
/// How often a node greets the nodes its record says left, whatever it
/// is doing: one killed before it recorded its own leave and started
/// again waits at its first join for the nodes below it to dial, and
/// nodes that run on dial no one else (`Control::greet_gone`).
const GONE_GREETING_EVERY: Duration = Duration::from_secs(1);
/// Each node gone is greeted again after twice the pause before, up to
/// this: a node long gone (its address maybe another program's now) is
/// said hello to once a minute, not every second.
const GONE_GREETING_MAX: Duration = Duration::from_secs(64);
/// Version of the control protocol (3: a hello carries the layout; 4:
/// `ENDED` carries the layout the shards stopped for, `FINISHED`; 5: a
/// hello carries the preload and the layout of each kept snapshot; 6: a
/// hello and `ENDED` carry the nodes gone from the cluster; 7: and the
/// nodes not joined yet, a hello the nodes its directory records joined).
const CONTROL_VERSION: u16 = 7;
const CONTROL_MAGIC: u64 = 0x5354_5958_4354_524c; // "STYXCTRL"

const HELLO: u8 = 1;
const HEARTBEAT: u8 = 2;
const COMMITTED: u8 = 3;
/// Every shard of the sender stopped at the end of the epoch (a handover).
const ENDED: u8 = 4;
/// A piece of a shard's hand-off: `[shard u16][last u8][bytes]`.
const HANDOFF: u8 = 5;
/// The sender sent every hand-off of the epoch.
const HANDED: u8 = 6;
/// The sender holds every hand-off sent to it: it writes nothing more on
/// this run's connections.
const RECEIVED: u8 = 7;
/// The sender's run ended without a failure (its shards finished): it
/// writes nothing more, and its connections closing is not a failure.
const FINISHED: u8 = 8;
/// A wait for a peer's FINISHED that is still heard from ends after this
/// at the most ([`RunState::waits_for`]): a link broken while its peer
/// runs on (a reset on the way) fails the run this late.
const FINISH_WAIT_MAX: Duration = Duration::from_secs(5);
/// Bytes of a hand-off in one control frame.
const HANDOFF_CHUNK_BYTES: usize = CONTROL_FRAME_BYTES_MAX - 16;
/// A hand-off is at most this long (its shard's entities and tables).
const HANDOFF_BYTES_MAX: usize = 16 << 30;

/// One node of a cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub id: u16,
    /// Where other nodes reach this one: the control plane on this port,
    /// the data links of shard `s` of the cluster, whenever this node runs
    /// it, on `port + 1 + s` (so a node reserves a port per shard of the
    /// cluster: any shard may be handed to it).
    pub peer: SocketAddr,
    /// Where clients reach it.
    pub client: SocketAddr,
    pub shards: u16,
}

/// A cluster: its nodes (ids `0..n` in order) and its failure detector.
#[derive(Clone, Debug)]
pub struct Spec {
    pub nodes: Vec<Node>,
    pub heartbeat: Duration,
    pub failure_timeout: Duration,
    /// The node of each shard, when the cluster file places them; `None`:
    /// numbered in order (node 0 runs the first `nodes[0].shards`, and so
    /// on). Either way `nodes[n].shards` counts node `n`'s.
    pub placement: Option<Vec<u16>>,
    /// The nodes listed that join later (`styx node add`), ascending: each
    /// starts with no shard, and no join waits for one until a record says
    /// it joined (docs/nodes.md, "Membership").
    pub absent: Vec<u16>,
}

impl Spec {
    /// A cluster of one node: the single-node daemon.
    pub fn single(shards: u16, client: SocketAddr) -> Spec {
        Spec {
            nodes: vec![Node {
                id: 0,
                peer: SocketAddr::from(([127, 0, 0, 1], 0)),
                client,
                shards,
            }],
            heartbeat: Duration::from_millis(100),
            failure_timeout: Duration::from_millis(500),
            placement: None,
            absent: Vec::new(),
        }
    }

    /// Checks the layout: ids in order, shards within bounds (a node may
    /// start with none: a spare, which joins the rounds and may be handed
    /// shards), addresses distinct, the failure timeout above the heartbeat.
    pub fn validate(&self) -> Result<(), String> {
        if self.nodes.is_empty() || self.nodes.len() > NODES_MAX {
            return Err(format!("{} nodes; between 1 and {NODES_MAX}", self.nodes.len()));
        }
        for (i, n) in self.nodes.iter().enumerate() {
            if usize::from(n.id) != i {
                return Err(format!(
                    "node ids must be 0, 1, 2, … in order; node {i} says id {}",
                    n.id
                ));
            }
        }
        let total: usize = self.nodes.iter().map(|n| usize::from(n.shards)).sum();
        if total == 0 {
            return Err("no node has shards".into());
        }
        if total > SHARDS_MAX {
            return Err(format!("{total} shards in the cluster; at most {SHARDS_MAX}"));
        }
        if self.nodes.len() > 1 {
            let total = total as u16;
            let mut ports: Vec<SocketAddr> = Vec::new();
            for n in &self.nodes {
                if n.peer.port().checked_add(total).is_none() {
                    return Err(format!(
                        "node {}'s peer port {} leaves no room for its data links (port + 1 + shard, {total} shards)",
                        n.id,
                        n.peer.port()
                    ));
                }
                for a in std::iter::once(n.client).chain((0..=total).map(|i| with_port_offset(n.peer, i))) {
                    if ports.contains(&a) {
                        return Err(format!("address {a} is used twice (node {}'s)", n.id));
                    }
                    ports.push(a);
                }
            }
        }
        if let Some(placement) = &self.placement {
            if placement.len() != total {
                return Err(format!(
                    "a placement of {} shards for nodes of {total}",
                    placement.len()
                ));
            }
            for n in &self.nodes {
                let placed = placement.iter().filter(|p| **p == n.id).count();
                if placed != usize::from(n.shards) {
                    return Err(format!("node {} has {} shards but is placed {placed}", n.id, n.shards));
                }
            }
            if let Some(p) = placement.iter().find(|p| usize::from(**p) >= self.nodes.len()) {
                return Err(format!("a shard placed on node {p}, of {} nodes", self.nodes.len()));
            }
        }
        if self.absent.windows(2).any(|w| w[0] >= w[1]) {
            return Err(format!("nodes joining later {:?}: ascending, each once", self.absent));
        }
        for a in &self.absent {
            match self.nodes.get(usize::from(*a)) {
                None => return Err(format!("node {a} joins later, of {} nodes", self.nodes.len())),
                Some(n) if n.shards > 0 => {
                    return Err(format!(
                        "node {a} joins later and runs {} shards: it starts with none",
                        n.shards
                    ));
                }
                Some(_) => {}
            }
        }
        if self.failure_timeout <= self.heartbeat {
            return Err(format!(
                "failure_timeout ({:?}) must exceed heartbeat ({:?})",
                self.failure_timeout, self.heartbeat
            ));
        }
        Ok(())
    }

    pub fn n_shards(&self) -> u16 {
        self.nodes.iter().map(|n| n.shards).sum()
    }

    /// The global shard ids of `node`, in increasing order (by
    /// [`Spec::layout`]).
    pub fn shards_of(&self, node: u16) -> Vec<ShardId> {
        self.layout().shards_of(node).collect()
    }

    /// The node that runs `shard` (by [`Spec::layout`]).
    pub fn node_of(&self, shard: ShardId) -> u16 {
        self.layout().node_of(shard)
    }

    /// The index of `node`'s first shard among the cluster's when they
    /// are numbered in order (the shards of the nodes before it): where its
    /// executors start among a shared machine's CPUs, whatever the placement.
    pub fn first_of(&self, node: u16) -> usize {
        self.nodes[..usize::from(node)]
            .iter()
            .map(|n| usize::from(n.shards))
            .sum()
    }

    /// The other nodes that share `node`'s machine, by their peer
    /// addresses: the same IP, or both local (loopback or unspecified;
    /// IPv4-mapped IPv6 as IPv4). A machine's several addresses are not
    /// known here: nodes on two of them count as two machines.
    pub fn neighbours(&self, node: u16) -> impl Iterator<Item = &Node> + '_ {
        let local = |ip: std::net::IpAddr| ip.is_loopback() || ip.is_unspecified();
        let mine = self.nodes[usize::from(node)].peer.ip().to_canonical();
        self.nodes.iter().filter(move |n| {
            let ip = n.peer.ip().to_canonical();
            n.id != node && (ip == mine || (local(ip) && local(mine)))
        })
    }

    /// The cluster file's layout: its placement, or node 0 running the
    /// first shards, and so on; the nodes that join later absent.
    pub fn layout(&self) -> Layout {
        match &self.placement {
            Some(p) => Layout::placed_on(self.nodes.len() as u16, p.clone()).expect("a validated placement"),
            None => Layout::contiguous(&self.nodes.iter().map(|n| n.shards).collect::<Vec<_>>()),
        }
        .with_absent(self.absent.clone())
        .expect("validated: nodes that join later run none")
    }

    /// Whether `node` is listed as joining later (it may have joined since:
    /// the records say).
    pub fn joins_later(&self, node: u16) -> bool {
        self.absent.binary_search(&node).is_ok()
    }

    /// The nodes listed as joining later that are members of `layout`.
    pub fn joined_in<'a>(&'a self, layout: &'a Layout) -> impl Iterator<Item = u16> + 'a {
        self.absent.iter().copied().filter(|n| layout.is_member(*n))
    }

    /// A hash of the layout every node must agree on.
    pub fn fingerprint(&self) -> u64 {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for n in &self.nodes {
            let text = format!("{}|{}|{}|{};", n.id, n.peer, n.client, n.shards);
            h = styx_engine::mix64(h ^ styx_engine::stable_hash(text.as_bytes()));
        }
        if let Some(p) = &self.placement {
            let text = format!("placed {p:?}");
            h = styx_engine::mix64(h ^ styx_engine::stable_hash(text.as_bytes()));
        }
        if !self.absent.is_empty() {
            let text = format!("absent {:?}", self.absent);
            h = styx_engine::mix64(h ^ styx_engine::stable_hash(text.as_bytes()));
        }
        h
    }
}

fn with_port_offset(a: SocketAddr, offset: u16) -> SocketAddr {
    let mut a = a;
    a.set_port(a.port().checked_add(offset).expect("port in range"));
    a
}

/// Checks that `layout` places the shards of `spec`: as many shards on as
/// many nodes. (Any node may run any shard: each reserves a data-link port
/// per shard of the cluster.)
pub fn check_layout(spec: &Spec, layout: &Layout) -> Result<(), String> {
    if layout.n_shards() != spec.n_shards() || usize::from(layout.nodes()) != spec.nodes.len() {
        return Err(format!(
            "a layout of {} shards on {} nodes for a cluster of {} on {}",
            layout.n_shards(),
            layout.nodes(),
            spec.n_shards(),
            spec.nodes.len()
        ));
    }
    Ok(())
}

/// Why a run of the cluster ended early.
#[derive(Debug, Default)]
pub struct Failure {
    failed: AtomicBool,
    reason: Mutex<Option<String>>,
}

impl Failure {
    /// Fails the run (the first reason is kept).
    pub fn fail(&self, reason: impl Into<String>) {
        let mut r = self.reason.lock().expect("failure lock");
        if r.is_none() {
            let reason = reason.into();
            tracing::warn!("cluster run failed: {reason}");
            *r = Some(reason);
        }
        self.failed.store(true, Ordering::SeqCst);
    }

    pub fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    pub fn reason(&self) -> Option<String> {
        self.reason.lock().expect("failure lock").clone()
    }
}

/// One run of a joined cluster, as its shards see it.
#[derive(Debug)]
pub struct Run {
    pub spec: Spec,
    pub node: u16,
    /// Which node runs each shard in this run: the layout every node
    /// joined with ([`Control::join`]).
    layout: Layout,
    /// The shards `layout` gives this node, in order.
    local: Vec<ShardId>,
    pub plan: Plan,
    /// Mixes every node's incarnation and join round: data links of
    /// another run are refused.
    pub id: u64,
    pub failure: Arc<Failure>,
    /// What the control connections brought in: commits, ends, hand-offs.
    state: Arc<RunState>,
    /// Control connections by peer node, to announce commits and ends on.
    peers: Vec<(u16, Arc<Mutex<Writer>>)>,
    /// This node left the cluster: it runs nothing more.
    gone: bool,
    /// It left, and every other node greeted it (each had recorded the
    /// leave): it may record its own.
    told: bool,
    /// The nodes gone from the cluster as the join learned them, to record.
    left: Vec<u16>,
    /// The nodes listed as joining later that joined, as the join learned
    /// them, to record.
    joined: Vec<u16>,
}

/// The writing side of a control connection. Every frame is written whole
/// under its lock (the heartbeat thread shares it: a heartbeat must never
/// land inside a long frame).
#[derive(Debug)]
struct Writer {
    stream: TcpStream,
    /// Nothing more is written (the run ended at a handover, or closed).
    closed: bool,
}

impl Writer {
    fn write(&mut self, frame: &[u8]) -> std::io::Result<()> {
        if self.closed {
            return Ok(());
        }
        self.stream.write_all(frame)
    }
}

/// What a run's control connections report, per node.
#[derive(Debug)]
struct RunState {
    /// The newest snapshot epoch each node committed (this run).
    committed: Vec<AtomicU64>,
    /// The epoch at whose end each node's shards all stopped for a
    /// handover (0: none yet).
    ended: Vec<AtomicU64>,
    /// Batches each shard sent each shard in this run, as of its stop
    /// (`from * n + to`; rows of this node's shards set by them, the
    /// others' by their node's `ENDED`).
    sent: Vec<AtomicU64>,
    n_shards: usize,
    /// The epoch whose hand-offs each node has all sent (0: none yet).
    handed: Vec<AtomicU64>,
    /// The epoch whose hand-offs each node has all received (0: none
    /// yet): it writes nothing more on this run's connections.
    received: Vec<AtomicU64>,
    /// Hand-offs coming in: pieces per (sending node, shard), then whole.
    incoming: Mutex<Incoming>,
    /// The layout the shards stopped for, as the first node that ended
    /// told it (every node's shards decide the same one).
    next_layout: Mutex<Option<Layout>>,
    /// Nodes whose run ended without a failure (`FINISHED`).
    finished: Vec<AtomicBool>,
    /// When each peer's last control frame came, in microseconds since
    /// `began`: a peer still heard is alive, finishing or not.
    heard: Vec<AtomicU64>,
    began: Instant,
    /// The nodes of this run (not those gone from the cluster): the
    /// others' entries above stay as they start.
    member: Vec<bool>,
    /// Signalled (under `next_layout`'s lock) when a node ends or
    /// finishes: a spare waits on it.
    changed: std::sync::Condvar,
}

#[derive(Debug, Default)]
struct Incoming {
    partial: BTreeMap<(u16, ShardId), Vec<u8>>,
    whole: Vec<Vec<u8>>,
}

impl RunState {
    /// A node's shards stopped at the end of `epoch` for `next` (`node`'s
    /// own, or as its `ENDED` said): every node's must agree.
    fn stopped_for(&self, node: usize, epoch: Epoch, next: Layout, failure: &Failure) {
        let mut known = self.next_layout.lock().expect("layout lock");
        match &*known {
            Some(k) if *k != next => {
                failure.fail(format!("nodes stopped for different layouts: {k:?} and {next:?}"));
            }
            Some(_) => {}
            None => *known = Some(next),
        }
        self.ended[node].store(epoch, Ordering::SeqCst);
        self.changed.notify_all();
    }

    /// Whether node `peer` says that its run finished (or this node's
    /// did, `me`), unless the run fails meanwhile, within the failure
    /// `timeout` or for as long as the peer is heard ([`RunState::waits_for`]).
    fn finished_soon(&self, peer: usize, me: usize, timeout: Duration, failure: &Failure) -> bool {
        let since = Instant::now();
        loop {
            if self.finished[peer].load(Ordering::SeqCst) || self.finished[me].load(Ordering::SeqCst) {
                return true;
            }
            if failure.is_failed() || !self.waits_for(peer, since, timeout) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Whether a wait since `since` for node `peer`'s FINISHED goes on:
    /// for the failure `timeout`, and beyond it while the peer is heard
    /// (a node finishing closes its data links as each shard stops, and
    /// says FINISHED only once all stopped and its logs closed: on a
    /// loaded machine that may take longer than the timeout, while its
    /// heartbeats go on), up to `FINISH_WAIT_MAX`.
    fn waits_for(&self, peer: usize, since: Instant, timeout: Duration) -> bool {
        let waited = since.elapsed();
        if waited < timeout {
            return true;
        }
        let heard = Duration::from_micros(self.heard[peer].load(Ordering::SeqCst));
        waited < FINISH_WAIT_MAX && self.began.elapsed().saturating_sub(heard) < timeout
    }

    /// Notes a control frame from node `peer` now.
    fn hear(&self, peer: usize) {
        self.heard[peer].store(self.began.elapsed().as_micros() as u64, Ordering::SeqCst);
    }

    fn new(nodes: usize, n_shards: usize, members: &BTreeSet<u16>) -> RunState {
        let zeros = |k: usize| (0..k).map(|_| AtomicU64::new(0)).collect();
        RunState {
            member: (0..nodes).map(|i| members.contains(&(i as u16))).collect(),
            committed: zeros(nodes),
            ended: zeros(nodes),
            sent: zeros(n_shards * n_shards),
            n_shards,
            handed: zeros(nodes),
            received: zeros(nodes),
            incoming: Mutex::new(Incoming::default()),
            next_layout: Mutex::new(None),
            finished: (0..nodes).map(|_| AtomicBool::new(false)).collect(),
            heard: zeros(nodes),
            began: Instant::now(),
            changed: std::sync::Condvar::new(),
        }
    }
}

impl Run {
    /// A run of one node: no peers, nothing to join.
    pub fn single(spec: Spec, plan: Plan) -> Run {
        let layout = spec.layout();
        let spec_shards = spec.n_shards();
        Run {
            local: layout.shards_of(0).collect(),
            layout,
            spec,
            node: 0,
            plan,
            id: 0,
            failure: Arc::new(Failure::default()),
            state: Arc::new(RunState::new(1, usize::from(spec_shards), &BTreeSet::from([0]))),
            peers: Vec::new(),
            gone: false,
            told: false,
            left: Vec::new(),
            joined: Vec::new(),
        }
    }

    /// Whether this node left the cluster (a leave of it was made at the
    /// handover before this run): it runs nothing more.
    pub fn has_left(&self) -> bool {
        self.gone
    }

    /// The nodes gone from the cluster, as this run's join learned them
    /// (each node's record, and the layout's), for this node to record:
    /// itself among them only once every other node greeted it after it
    /// left (so a record naming a node means every node's names it).
    pub fn left_nodes(&self) -> Vec<u16> {
        self.left
            .iter()
            .copied()
            .filter(|n| *n != self.node || self.told)
            .collect()
    }

    /// The nodes listed as joining later that joined, as the join learned
    /// them (records, and the layout's), for this node to record.
    pub fn joined_nodes(&self) -> &[u16] {
        &self.joined
    }

    /// Per member of this run, the value of its entry in `per_node`.
    fn of_members<'a, T>(&'a self, per_node: &'a [T]) -> impl Iterator<Item = &'a T> + 'a {
        per_node
            .iter()
            .zip(&self.state.member)
            .filter(|(_, m)| **m)
            .map(|(v, _)| v)
    }

    /// Where the shards run in this run.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// This node's shards, in order.
    pub fn local_shards(&self) -> &[ShardId] {
        &self.local
    }

    pub fn is_local(&self, shard: ShardId) -> bool {
        self.layout.node_of(shard) == self.node
    }

    /// Where `shard`'s data links are accepted in this run.
    pub fn link_addr(&self, shard: ShardId) -> SocketAddr {
        let node = self.layout.node_of(shard);
        with_port_offset(self.spec.nodes[usize::from(node)].peer, 1 + shard)
    }

    pub fn is_cluster(&self) -> bool {
        self.spec.nodes.len() > 1
    }

    /// This node committed the snapshot of `epoch`: tell the others.
    pub fn committed_locally(&self, epoch: Epoch) {
        self.state.committed[usize::from(self.node)].fetch_max(epoch, Ordering::SeqCst);
        self.tell_all(&control_frame(COMMITTED, &epoch));
    }

    /// Writes `frame` to every peer as this run's last (no heartbeat
    /// after it): written, and the writer closed, under one lock.
    fn tell_all_last(&self, frame: &[u8]) {
        for (_, w) in &self.peers {
            let mut w = w.lock().expect("writer lock");
            let _ = w.write(frame);
            w.closed = true;
        }
    }

    /// Writes `frame` to every peer (a broken connection fails the run
    /// through its reader).
    fn tell_all(&self, frame: &[u8]) {
        for (_, w) in &self.peers {
            let _ = w.lock().expect("writer lock").write(frame);
        }
    }

    /// The newest snapshot every node that runs shards in this run
    /// committed in it (0: none yet): what a spare, which writes no
    /// snapshot file, commits in its turn ([`Run::spare_round`]).
    pub fn running_committed(&self) -> Epoch {
        (0..self.layout.nodes())
            .filter(|n| self.layout.shards_of(*n).next().is_some())
            .map(|n| self.state.committed[usize::from(n)].load(Ordering::SeqCst))
            .min()
            .unwrap_or(0)
    }

    /// The newest snapshot every node committed: older ones and the logs
    /// before it are no longer needed by anyone.
    pub fn complete_epoch(&self) -> Epoch {
        self.of_members(&self.state.committed)
            .map(|c| c.load(Ordering::SeqCst))
            .min()
            .unwrap_or(0)
    }

    /// Local shard `shard` stopped for a handover having sent `sent[to]`
    /// batches to each shard in this run; it sends nothing more.
    pub fn stopped(&self, shard: ShardId, sent: &[u64]) {
        let n = self.state.n_shards;
        assert_eq!(sent.len(), n);
        for (to, count) in sent.iter().enumerate() {
            self.state.sent[usize::from(shard) * n + to].store(*count, Ordering::SeqCst);
        }
    }

    /// Every shard of this node stopped at the end of `epoch` for a
    /// handover ([`Run::stopped`]) to `next` (the layout from the next
    /// epoch on), its batches all written: tell the others, with how many
    /// batches each sent each shard. From here on a data link of this run
    /// closing is its end, not a failure.
    pub fn ended_locally(&self, epoch: Epoch, next: &Layout) {
        assert!(epoch > 0, "a handover ends an epoch after the first");
        let n = self.state.n_shards;
        let rows: Vec<(ShardId, Vec<u64>)> = self
            .local
            .iter()
            .map(|s| {
                let row = (0..n)
                    .map(|to| self.state.sent[usize::from(*s) * n + to].load(Ordering::SeqCst))
                    .collect();
                (*s, row)
            })
            .collect();
        self.state
            .stopped_for(usize::from(self.node), epoch, next.placed(), &self.failure);
        let next = (
            next.version(),
            next.nodes(),
            placement(next),
            next.left().to_vec(),
            next.absent().to_vec(),
        );
        self.tell_all(&control_frame(ENDED, &(epoch, rows, next)));
    }

    /// This node's run ended without a failure (its shards finished, no
    /// handover): tells the others, then writes nothing more — a spare
    /// waiting for a handover learns that the run is over, not failed.
    pub fn finish(&self) {
        if self.failure.is_failed() {
            return;
        }
        // From here a peer closing is the end of the run here too.
        self.state.finished[usize::from(self.node)].store(true, Ordering::SeqCst);
        self.tell_all_last(&control_frame(FINISHED, &()));
    }

    /// A spare's part of a round (this node runs no shard in it): waits
    /// until another node's shards stopped for a handover, says it ended
    /// the same epoch (it sent no batch) and returns [`Spare::Handover`]
    /// with that epoch and the layout from the next one on; or until every
    /// other node finished its run ([`Spare::Finished`]), the run failed
    /// ([`Spare::Failed`]) or `stop` was set ([`Spare::Stopped`]).
    /// `on_tick` runs every [`SPARE_TICK`] or so, with no lock held (a
    /// durable spare commits the snapshots the others did there); when it
    /// returns `Err` the run fails with that reason.
    pub fn spare_round(&self, stop: &AtomicBool, mut on_tick: impl FnMut() -> Result<(), String>) -> Spare {
        assert!(self.local.is_empty(), "a spare runs no shard");
        let me = usize::from(self.node);
        let mut known = self.state.next_layout.lock().expect("layout lock");
        loop {
            if let Some(next) = known.clone() {
                let epoch = self
                    .of_members(&self.state.ended)
                    .map(|e| e.load(Ordering::SeqCst))
                    .find(|e| *e != 0)
                    .expect("a layout comes with its epoch");
                drop(known);
                self.ended_locally(epoch, &next);
                return Spare::Handover(epoch, next);
            }
            // Woken by ENDED and FINISHED; a failure or a stop is seen
            // within a tick.
            if self.failure.is_failed() {
                return Spare::Failed(self.failure.reason().unwrap_or_default());
            }
            if stop.load(Ordering::SeqCst) {
                return Spare::Stopped;
            }
            // Every node that runs shards finished (other spares wait
            // like this one): over; the other spares learn it from this
            // one's FINISHED too, so its close fails none of them.
            if (0..self.layout.nodes())
                .filter(|n| usize::from(*n) != me && self.layout.shards_of(*n).next().is_some())
                .all(|n| self.state.finished[usize::from(n)].load(Ordering::SeqCst))
            {
                drop(known);
                self.finish();
                return Spare::Finished;
            }
            known = self
                .state
                .changed
                .wait_timeout(known, SPARE_TICK)
                .expect("layout lock")
                .0;
            // What arrived meanwhile is seen at the loop's top, the lock
            // taken again.
            drop(known);
            if let Err(why) = on_tick() {
                self.failure.fail(format!("node {me}: {why}"));
            }
            known = self.state.next_layout.lock().expect("layout lock");
        }
    }

    /// Whether node `node` said its run finished (`FINISHED`).
    pub fn has_finished(&self, node: u16) -> bool {
        self.state.finished[usize::from(node)].load(Ordering::SeqCst)
    }

    /// Whether a wait since `since` for node `node`'s FINISHED goes on: for
    /// the failure timeout, and while the node is heard beyond it.
    pub fn waits_for_finish(&self, node: u16, since: Instant) -> bool {
        self.state
            .waits_for(usize::from(node), since, self.spec.failure_timeout)
    }

    /// Whether this node's shards all stopped for a handover.
    pub fn is_ending(&self) -> bool {
        self.state.ended[usize::from(self.node)].load(Ordering::SeqCst) != 0
    }

    /// Whether every node's shards stopped at the end of `epoch`: nothing
    /// of it is in flight anywhere and nothing of the next exists. Nodes
    /// that stopped at different epochs fail the run (they cannot: every
    /// shard decides the same layout at the same epoch).
    pub fn all_ended(&self, epoch: Epoch) -> bool {
        let ended: Vec<Epoch> = self
            .of_members(&self.state.ended)
            .map(|e| e.load(Ordering::SeqCst))
            .collect();
        if ended.iter().all(|e| *e == epoch) {
            return true;
        }
        if ended.iter().all(|e| *e != 0) {
            self.failure
                .fail(format!("nodes stopped for a handover at different epochs: {ended:?}"));
        }
        false
    }

    /// Once every node ended ([`Run::all_ended`]): whether local shard
    /// `shard`, having received `received[from]` batches from each shard,
    /// holds every batch sent to it in this run (a request forwarded to
    /// its client's home, an answer, belong to no epoch and may still be
    /// on the way when every epoch message arrived).
    pub fn received_all(&self, shard: ShardId, received: &[u64]) -> bool {
        let n = self.state.n_shards;
        received
            .iter()
            .enumerate()
            .all(|(from, got)| *got >= self.state.sent[from * n + usize::from(shard)].load(Ordering::SeqCst))
    }

    /// After every node ended `epoch` ([`Run::all_ended`]): sends each
    /// hand-off in `outgoing` (`(node, shard, bytes)`) to the node that
    /// runs its shard next, then waits until every node sent its own
    /// (`HANDED`), tells every node it holds them (`RECEIVED`, its last
    /// frame on this run's connections), waits until every node does, and
    /// returns those sent to this node. The hand-offs cross the control
    /// connections in pieces; a node failing meanwhile, `timeout`
    /// passing, or `stop` being set (SIGTERM: a durable cluster makes the
    /// handover again from its logs) is an error (the run is in memory
    /// only: its shards are lost with it).
    pub fn hand_over(
        &self,
        epoch: Epoch,
        outgoing: Vec<(u16, ShardId, Vec<u8>)>,
        timeout: Duration,
        stop: &AtomicBool,
    ) -> Result<Vec<Vec<u8>>, String> {
        let mut mine = Vec::new();
        for (node, shard, bytes) in outgoing {
            if node == self.node {
                mine.push(bytes);
                continue;
            }
            let (_, writer) = self
                .peers
                .iter()
                .find(|(p, _)| *p == node)
                .ok_or_else(|| format!("shard {shard} handed to node {node}, which is not a peer"))?;
            let mut chunks = bytes.chunks(HANDOFF_CHUNK_BYTES).peekable();
            if chunks.peek().is_none() {
                return Err(format!("shard {shard}'s hand-off is empty"));
            }
            while let Some(chunk) = chunks.next() {
                let mut body = Vec::with_capacity(3 + chunk.len());
                body.extend_from_slice(&shard.to_le_bytes());
                body.push(u8::from(chunks.peek().is_none()));
                body.extend_from_slice(chunk);
                writer
                    .lock()
                    .expect("writer lock")
                    .write(&raw_control_frame(HANDOFF, &body))
                    .map_err(|e| format!("sending shard {shard}'s hand-off to node {node}: {e}"))?;
            }
        }
        let me = usize::from(self.node);
        self.state.handed[me].store(epoch, Ordering::SeqCst);
        self.tell_all(&control_frame(HANDED, &epoch));
        self.wait_all(&self.state.handed, epoch, timeout, stop, "the hand-offs")?;
        {
            let mut incoming = self.state.incoming.lock().expect("incoming lock");
            if let Some((node, shard)) = incoming.partial.keys().next() {
                return Err(format!("shard {shard}'s hand-off from node {node} arrived in part"));
            }
            mine.append(&mut incoming.whole);
        }
        // The last frame on each connection: written, and the writer
        // closed, under one lock (no heartbeat after it). A node closes
        // its connections only once every node said RECEIVED, so none
        // still reads what it needs when they close.
        self.state.received[me].store(epoch, Ordering::SeqCst);
        self.tell_all_last(&control_frame(RECEIVED, &epoch));
        // Every hand-off is here: a stop now would only make the cluster
        // recover to make the handover again.
        let finish = AtomicBool::new(false);
        self.wait_all(&self.state.received, epoch, timeout, &finish, "the nodes' receipts")?;
        Ok(mine)
    }

    /// Waits until every node reported `epoch` in `per_node` (not past
    /// `timeout`, nor once `stop` is set).
    fn wait_all(
        &self,
        per_node: &[AtomicU64],
        epoch: Epoch,
        timeout: Duration,
        stop: &AtomicBool,
        what: &str,
    ) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            let seen: Vec<Epoch> = self.of_members(per_node).map(|h| h.load(Ordering::SeqCst)).collect();
            if seen.iter().all(|h| *h == epoch) {
                return Ok(());
            }
            if self.failure.is_failed() {
                return Err(format!(
                    "the cluster failed during the handover at epoch {epoch}: {}",
                    self.failure.reason().unwrap_or_default()
                ));
            }
            if seen.iter().any(|h| *h != 0 && *h != epoch) {
                return Err(format!("nodes handed over at different epochs: {seen:?}"));
            }
            if Instant::now() > deadline {
                return Err(format!("{what} of epoch {epoch} did not arrive within {timeout:?}"));
            }
            if stop.load(Ordering::Relaxed) {
                return Err(format!("stopped while waiting for {what} of epoch {epoch}"));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Stops the control threads' connections (the run is over).
    pub fn close(&self) {
        for (_, w) in &self.peers {
            let mut w = w.lock().expect("writer lock");
            w.closed = true;
            let _ = w.stream.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        self.close();
    }
}

/// How a spare's round ended ([`Run::spare_round`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Spare {
    /// The other nodes' shards stopped at the end of this epoch for this
    /// layout: the spare takes part in the handover.
    Handover(Epoch, Layout),
    /// Every other node's run ended without a failure.
    Finished,
    Failed(String),
    Stopped,
}

/// How often a spare waiting for a handover looks at the run's failure
/// and its stop flag.
const SPARE_TICK: Duration = Duration::from_millis(10);

/// A node's control plane: its listener, and the joins it makes.
pub struct Control {
    spec: Spec,
    node: u16,
    incarnation: u64,
    round: u64,
    app_fingerprint: u64,
    /// Peers' connections, with when each was accepted.
    accepted: mpsc::Receiver<(Instant, TcpStream)>,
    /// Each peer's incarnation at the last join: a join after a handover
    /// that meets another one (the peer restarted) cannot go on (see
    /// `Refused`, [`Control::join_next`]).
    met: BTreeMap<u16, u64>,
    after_handover: bool,
    /// What the thread greeting the nodes gone says, and to whom.
    greeter: Arc<Mutex<Greeter>>,
    /// Refused hellos: when one was last logged, and how many since.
    refused: std::cell::Cell<(Option<Instant>, u64)>,
}

/// What a node says to the nodes gone from the cluster while it runs:
/// the hello of its last first join (a node started again greets with
/// the same cluster file and layout, and is at a first join itself),
/// carrying the record of nodes gone, which names them.
#[derive(Default)]
struct Greeter {
    hello: Option<Hello>,
    gone: BTreeSet<u16>,
    stop: bool,
}

impl Drop for Control {
    fn drop(&mut self) {
        self.greeter.lock().expect("greeter lock").stop = true;
    }
}

/// Why a peer's hello was not accepted.
enum Refused {
    /// It runs something else, or said something wrong: logged, and the
    /// join waits for it to be restarted right.
    Peer(String),
    /// A peer met at an earlier join restarted: it recovers from its disk
    /// and waits for a first join, while this node, past its first, holds
    /// state only in memory (or a later round's layout) — this node must
    /// restart too, for the cluster to recover together.
    Restarted(u16),
}

impl From<String> for Refused {
    fn from(e: String) -> Refused {
        Refused::Peer(e)
    }
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Control").field("node", &self.node).finish()
    }
}

/// The hello a node sends at the join.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Hello {
    fingerprint: u64,
    app: u64,
    node: u16,
    incarnation: u64,
    round: u64,
    survey: Survey,
    /// The layout this node was told to run: every node must be told the
    /// same, or shards would wait for peers where none listens.
    layout: Layout,
    /// The preload its data directory was made from.
    preload: Option<String>,
    /// The layout its directory gives each snapshot it keeps, as changes:
    /// `(e, l)`, ascending, says the snapshots from epoch `e` on (0: no
    /// snapshot) until the next change are placed by `l` (`None`: the
    /// directory cannot place them). Every node checks the plan's against
    /// its own before any shard runs.
    placed: Vec<(Epoch, Option<Layout>)>,
    /// The nodes it knows left the cluster (its directory's record).
    left: Vec<u16>,
    /// The nodes listed as joining later that it knows joined (its
    /// directory's record).
    joined: Vec<u16>,
}

/// What a node's data directory holds, as it joins: its survey, and what
/// the nodes check against each other before they recover from it.
#[derive(Clone, Debug, Default)]
pub struct Joining {
    pub survey: Survey,
    /// The preload the directory was made from (`preload::marker`), if any.
    pub preload: Option<String>,
    /// The nodes its directory records as gone from the cluster, this
    /// one perhaps among them (`Layout::left`, recorded as each leave was
    /// made): the join does not wait for them.
    pub left: Vec<u16>,
    /// The nodes listed as joining later that its directory records as
    /// joined, this one perhaps among them: the join waits for them.
    pub joined: Vec<u16>,
}

impl From<Survey> for Joining {
    fn from(survey: Survey) -> Joining {
        Joining {
            survey,
            preload: None,
            left: Vec::new(),
            joined: Vec::new(),
        }
    }
}

impl Control {
    /// Binds `node`'s control port (a clear error if it is taken) and
    /// starts accepting peers on it.
    pub fn start(spec: Spec, node: u16, app_fingerprint: u64) -> Result<Control, String> {
        spec.validate()?;
        if usize::from(node) >= spec.nodes.len() {
            return Err(format!("node id {node}: the cluster has nodes 0..{}", spec.nodes.len()));
        }
        let addr = spec.nodes[usize::from(node)].peer;
        let listener = TcpListener::bind(addr).map_err(|e| format!("cannot listen for peers on {addr}: {e}"))?;
        let (tx, accepted) = mpsc::sync_channel(NODES_MAX * 4);
        std::thread::Builder::new()
            .name("styx-control".into())
            .spawn(move || {
                for stream in listener.incoming() {
                    match stream {
                        Ok(s) => {
                            if tx.try_send((Instant::now(), s)).is_err() {
                                // A join that nobody runs, or a flood: drop it.
                            }
                        }
                        Err(e) => {
                            tracing::warn!("accepting a peer: {e}");
                            std::thread::sleep(DIAL_RETRY);
                        }
                    }
                }
            })
            .map_err(|e| format!("control thread: {e}"))?;
        let greeter = Arc::new(Mutex::new(Greeter::default()));
        {
            let (spec, greeter) = (spec.clone(), greeter.clone());
            std::thread::Builder::new()
                .name("styx-farewell".into())
                .spawn(move || greet_gone(&spec, node, &greeter))
                .map_err(|e| format!("farewell thread: {e}"))?;
        }
        let incarnation = styx_engine::mix64(
            std::process::id() as u64
                ^ std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64),
        );
        Ok(Control {
            spec,
            node,
            incarnation,
            round: 0,
            app_fingerprint,
            accepted,
            met: BTreeMap::new(),
            after_handover: false,
            greeter,
            refused: std::cell::Cell::new((None, 0)),
        })
    }

    /// This node's id in the cluster file.
    pub fn node(&self) -> u16 {
        self.node
    }

    /// The nodes listed as joining later that are members of `layout`.
    pub fn joined_in(&self, layout: &Layout) -> Vec<u16> {
        self.spec.joined_in(layout).collect()
    }

    /// Joins the cluster with what this node's disk holds and the layout
    /// it runs (the cluster file's numbering, [`Spec::layout`], or a
    /// placement given whole): waits until every other node said hello
    /// with the same cluster file, application and layout, then agrees on
    /// the plan. A peer that disagrees is refused and logged, and the join
    /// goes on waiting for it to be restarted right. Returns `None` if
    /// `stop` was set meanwhile.
    pub fn join(&mut self, survey: Survey, layout: &Layout, stop: &AtomicBool) -> Result<Option<Run>, String> {
        self.join_placed(survey.into(), layout, stop, |_| Ok(layout.clone()))
    }

    /// [`Control::join`] of the round after a handover, whose state lives
    /// on in memory (or in a layout past the cluster file's): a peer met
    /// at the last join that greets with another incarnation restarted,
    /// and recovers from its disk waiting for a first join with the
    /// layout it was given — this join fails instead of waiting for ever,
    /// so that this node restarts and the cluster recovers together. (A
    /// daemon's join after a failed run starts from its disk itself: any
    /// peer may have restarted then.)
    pub fn join_next(&mut self, layout: &Layout, stop: &AtomicBool) -> Result<Option<Run>, String> {
        self.after_handover = true;
        let joined = self.join(Survey::default(), layout, stop);
        self.after_handover = false;
        joined
    }

    /// [`Control::join`], the run placed by `place` of the plan agreed
    /// (a restart after handovers: the layout of the snapshot the plan
    /// restores, which every node derives from its own disk); the nodes
    /// greet each other with `layout`, the layout they were given, and
    /// with what their disks say, checked before the run starts: every
    /// node must place the plan's snapshot alike (directories that
    /// disagree — one copied from another node, or restored from another
    /// time — would run a shard twice or nowhere), and a preload must not
    /// be rolled back (a node started without it, its directory empty,
    /// would have the plan restore no snapshot) nor differ between nodes.
    /// Either is refused, on every node alike, with the nodes named.
    pub fn join_placed(
        &mut self,
        joining: Joining,
        layout: &Layout,
        stop: &AtomicBool,
        place: impl Fn(&Plan) -> Result<Layout, String>,
    ) -> Result<Option<Run>, String> {
        check_layout(&self.spec, layout)?;
        self.round += 1;
        let Joining {
            survey,
            preload,
            left,
            joined,
        } = joining;
        // The nodes gone from the cluster, as this node knows: its record,
        // the layout's, and (at a first join) every hello's.
        let mut learned: BTreeSet<u16> = left.iter().chain(layout.left()).copied().collect();
        // The nodes listed as joining later that joined, the same way (a
        // layout past the file's says so of those no longer absent).
        let mut joined: BTreeSet<u16> = joined
            .iter()
            .copied()
            .chain(self.spec.absent.iter().copied().filter(|n| !layout.is_absent(*n)))
            .collect();
        let placed = placements(&survey.snapshots, &place);
        let me = Hello {
            layout: layout.placed(),
            fingerprint: self.spec.fingerprint(),
            app: self.app_fingerprint,
            node: self.node,
            incarnation: self.incarnation,
            round: self.round,
            survey,
            preload,
            placed,
            left: learned.iter().copied().collect(),
            joined: joined.iter().copied().collect(),
        };
        if !self.after_handover {
            self.greeter.lock().expect("greeter lock").hello = Some(me.clone());
        }
        let n = self.spec.nodes.len();
        // After a handover the join waits for the nodes of the run before,
        // a node that left at that handover among them (it greets once
        // more: then it knows that every node recorded its leave before
        // it goes); at a first join, for every node no directory records
        // as gone — records grow only as leaves are made, so every
        // node learns the same from the hellos it waits for.
        // A node that joined at that handover is waited for too.
        let previous: Option<BTreeSet<u16>> = self.after_handover.then(|| {
            self.met
                .keys()
                .copied()
                .filter(|p| *p != self.node && !layout.has_left(*p))
                .chain(self.spec.joined_in(layout).filter(|p| *p != self.node))
                .collect()
        });
        // Nodes to greet once though not waited for: at a first join those
        // gone (one started again goes once every node greeted it), after
        // a handover those that left at it (the same, so that it records
        // its own leave only once every other node did).
        let courtesy = |id: u16, learned: &BTreeSet<u16>| match &previous {
            Some(_) => self.met.contains_key(&id) && layout.has_left(id),
            None => learned.contains(&id),
        };
        // Connections accepted before this join are greeted like the
        // others if recent: a peer that went on to the next round first
        // (a handover) dialed before this node got here, and waits for
        // its hello. Older ones are from an earlier join.
        let mut peers: BTreeMap<u16, (TcpStream, Hello)> = BTreeMap::new();
        // Every node whose hello this node has, counted or not: a node
        // that left says hello to every other, and goes.
        let mut greeted: BTreeSet<u16> = BTreeSet::new();
        let began = Instant::now();
        let mut last_log = Instant::now();
        let mut wait = DIAL_RETRY_MIN;
        // A node listed as joining later waits until the others' hellos
        // say it joined (their records, or the layout after its join).
        let is_member = |i: u16, learned: &BTreeSet<u16>, joined: &BTreeSet<u16>| {
            !learned.contains(&i) && (!self.spec.joins_later(i) || joined.contains(&i))
        };
        let mut last_unjoined_log: Option<Instant> = None;
        loop {
            let leaving = learned.contains(&self.node);
            let unjoined = !is_member(self.node, &learned, &joined) && !leaving;
            let waited: BTreeSet<u16> = match &previous {
                Some(p) => p.clone(),
                None => (0..n as u16)
                    .filter(|i| *i != self.node && is_member(*i, &learned, &joined))
                    .collect(),
            };
            if leaving && waited.is_subset(&greeted) {
                tracing::info!(
                    node = self.node,
                    "this node left the cluster: every other node greeted it"
                );
                return Ok(Some(self.farewell(layout, learned, true)));
            }
            if leaving && began.elapsed() > FAREWELL_WAIT {
                let missing: Vec<u16> = waited.difference(&greeted).copied().collect();
                tracing::warn!(
                    node = self.node,
                    ?missing,
                    "this node left the cluster; nodes it could not tell within {FAREWELL_WAIT:?} learn it from the others' records (or wait for it at their next start)"
                );
                return Ok(Some(self.farewell(layout, learned, false)));
            }
            // After a handover, a node that left at it is greeted before
            // the others go on (then it may record its own leave), for
            // as long as it would try: one that died holds up no one.
            let owed = match &previous {
                Some(_) => self
                    .met
                    .keys()
                    .filter(|p| **p != self.node && layout.has_left(**p))
                    .all(|p| greeted.contains(p)),
                None => true,
            };
            if !leaving
                && !unjoined
                && waited.iter().all(|p| peers.contains_key(p))
                && (owed || began.elapsed() > FAREWELL_WAIT)
            {
                break;
            }
            if unjoined && last_unjoined_log.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                tracing::info!(
                    node = self.node,
                    "this node joins the cluster later: waiting to be added (styx node add {})",
                    self.node
                );
                last_unjoined_log = Some(Instant::now());
            }
            if stop.load(Ordering::Relaxed) {
                return Ok(None);
            }
            let before = greeted.len();
            let mut met: Vec<(TcpStream, Hello, bool)> = Vec::new();
            // Dial the nodes above us; those below dial us (a dial waits
            // for the answer, so dials must not go round in a circle) —
            // the nodes we wait for, and at a first join those gone too,
            // once, to say hello: a node that left and was started again
            // goes once every node greeted it.
            for peer in self.spec.nodes.iter().filter(|p| {
                p.id > self.node
                    && !peers.contains_key(&p.id)
                    && match (leaving, waited.contains(&p.id)) {
                        (false, true) => true,
                        (true, true) => !greeted.contains(&p.id),
                        (_, false) => courtesy(p.id, &learned) && !greeted.contains(&p.id),
                    }
            }) {
                // Those who dialed us first: a dial of ours to a node that
                // runs on (the join of a node that left and does not know
                // it) waits `HELLO_TIMEOUT`, while the running nodes'
                // greetings wait for an answer.
                self.answer_dials(&me, began, &mut met)?;
                if let Ok(s) = TcpStream::connect_timeout(&peer.peer, DIAL_RETRY) {
                    match self.greet(s, &me, Some(peer.id), Instant::now() + HELLO_TIMEOUT) {
                        Ok((s, h)) => met.push((s, h, true)),
                        Err(Refused::Peer(e)) => tracing::warn!("joining node {}: {e}", peer.id),
                        Err(Refused::Restarted(p)) => return Err(restarted(p)),
                    }
                }
            }
            match self.accepted.recv_timeout(wait) {
                Ok((at, s)) => {
                    self.answer_dial(at, s, &me, began, &mut met)?;
                    self.answer_dials(&me, began, &mut met)?;
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return Err("the control listener stopped".into()),
            }
            for (s, h, dialed) in met {
                greeted.insert(h.node);
                if previous.is_none() {
                    learned.extend(h.left.iter().copied());
                    // (A node's word that nodes joined counts once it is a
                    // member itself: one not added says nothing of joins.)
                    if is_member(h.node, &learned, &joined) {
                        joined.extend(h.joined.iter().copied());
                    }
                    // A layout past the file's (a peer after the round
                    // change that made this node a member) says so too.
                    joined.extend(self.spec.joined_in(&h.layout));
                }
                let expected = match &previous {
                    Some(p) => p.contains(&h.node),
                    None => is_member(h.node, &learned, &joined),
                };
                if !expected {
                    // A node gone from the cluster saying goodbye (it has
                    // our hello, with our record): nothing more to say.
                    continue;
                }
                if !dialed && h.node > self.node {
                    // (Nodes greet one that left whatever their ids.)
                    if !learned.contains(&self.node) {
                        tracing::warn!("node {} dialed node {}: the lower id dials", h.node, self.node);
                    }
                    continue;
                }
                peers.insert(h.node, (s, h));
            }
            peers.retain(|p, _| is_member(*p, &learned, &joined) || previous.is_some());
            // A node listed as joining later keeps only the hellos that say
            // it joined (a record, or the layout after its join): those of
            // nodes at a first join while it waits to be added are no run
            // it joins, and a connection kept would stop it dialing them
            // again at the round change that adds it.
            if previous.is_none() && self.spec.joins_later(self.node) {
                let me = self.node;
                peers.retain(|_, (_, h)| h.joined.contains(&me) || h.layout.is_member(me));
            }
            wait = if greeted.len() > before {
                DIAL_RETRY_MIN
            } else {
                (wait * 2).min(DIAL_RETRY)
            };
            if last_log.elapsed() > Duration::from_secs(2) {
                let missing: Vec<u16> = waited
                    .iter()
                    .copied()
                    .filter(|i| !(peers.contains_key(i) || leaving && greeted.contains(i)))
                    .collect();
                if leaving {
                    tracing::info!(
                        ?missing,
                        "this node left the cluster; waiting to say so to the other nodes (once they run, they know: it may be stopped)"
                    );
                } else if !unjoined {
                    tracing::info!(?missing, "waiting for the cluster's other nodes");
                }
                last_log = Instant::now();
            }
        }
        // Every node must list the surveys in the same order.
        let mut hellos: Vec<&Hello> = peers.values().map(|(_, h)| h).chain(std::iter::once(&me)).collect();
        hellos.sort_by_key(|h| h.node);
        let parts: Vec<(u16, u64, u64)> = hellos.iter().map(|h| (h.node, h.incarnation, h.round)).collect();
        // The layout after the round change that made this node a member,
        // as the others greeted it (it was told only the file's).
        let adopted = match self.spec.joins_later(self.node) && !self.after_handover {
            true => peers.values().map(|(_, h)| &h.layout).find(|l| **l != me.layout),
            false => None,
        };
        if let Some(l) = adopted
            && peers.values().any(|(_, h)| h.layout != *l)
        {
            return Err(format!(
                "node {}: the nodes greeted it, joining, with different layouts: {:?}",
                self.node,
                peers
                    .values()
                    .map(|(_, h)| (h.node, h.layout.version(), placement(&h.layout)))
                    .collect::<Vec<_>>()
            ));
        }
        // After a handover, the nodes that joined at it greet with what
        // they were told (the file's layout): their disks hold nothing to
        // agree on (`check_peer`).
        let newcomers: BTreeSet<u16> = match self.after_handover {
            true => hellos
                .iter()
                .map(|h| h.node)
                .filter(|n| *n != self.node && self.spec.joins_later(*n) && !self.met.contains_key(n))
                .filter(|n| layout.is_member(*n))
                .collect(),
            false => BTreeSet::new(),
        };
        // At a first join from the disks, a node listed as joining later
        // whose directory holds nothing (it never ran) is no part of the
        // plan: it runs no shard at the snapshot the others restore
        // (checked below) and takes its layout from them. (One that ran and
        // lost its directory is refused there if it runs a shard then; a
        // shard it ran and handed away before that snapshot needs nothing
        // of its disk.) After a handover every survey is empty.
        let fresh: BTreeSet<u16> = match self.after_handover || adopted.is_some() {
            true => BTreeSet::new(),
            false => hellos
                .iter()
                .filter(|h| self.spec.joins_later(h.node) && h.survey == Survey::default())
                .map(|h| h.node)
                .collect(),
        };
        let counted: Vec<&Hello> = match hellos.iter().all(|h| fresh.contains(&h.node)) {
            true => hellos.clone(),
            false => hellos.iter().copied().filter(|h| !fresh.contains(&h.node)).collect(),
        };
        let surveys: Vec<Survey> = counted.iter().map(|h| h.survey.clone()).collect();
        let plan = Plan::of(&surveys)?;
        check_disks_agree(
            &plan,
            counted
                .iter()
                .copied()
                .filter(|h| !(newcomers.contains(&h.node) || adopted.is_some() && h.node == self.node)),
        )?;
        let placed = match (adopted, plan.snapshot) {
            (Some(l), _) => l.clone(),
            (None, Some(at)) if fresh.contains(&self.node) => counted
                .first()
                .and_then(|h| placed_at(&h.placed, at))
                .cloned()
                .ok_or_else(|| format!("no node places the snapshot of epoch {at}"))?,
            _ => place(&plan)?,
        };
        check_layout(&self.spec, &placed)?;
        if let Some(n) = fresh.iter().find(|n| placed.shards_of(**n).next().is_some()) {
            return Err(format!(
                "node {n} holds nothing (a node joining later that never ran), but the snapshot the cluster restores places shards {:?} on it: its data directory is lost; restore it",
                placed.shards_of(*n).collect::<Vec<_>>()
            ));
        }
        let id = parts.iter().fold(0x5255_4e49_4400_0000u64, |h, (node, inc, round)| {
            styx_engine::mix64(h ^ styx_engine::mix64(u64::from(*node) ^ inc.rotate_left(16) ^ round.rotate_left(40)))
        });
        let failure = Arc::new(Failure::default());
        // The nodes of this run: those that joined, but a node leaving at
        // the handover before (it joined to see every node's record).
        let members: BTreeSet<u16> = parts
            .iter()
            .map(|(node, _, _)| *node)
            .filter(|p| !placed.has_left(*p))
            .collect();
        let state = Arc::new(RunState::new(n, usize::from(self.spec.n_shards()), &members));
        let mut writers = Vec::with_capacity(peers.len());
        for (peer, (s, _)) in peers.into_iter().filter(|(p, _)| members.contains(p)) {
            let stream = s.try_clone().map_err(|e| format!("control connection: {e}"))?;
            // A peer that stops reading (stopped, cut off) fails the run
            // rather than block a writer holding the connection's lock.
            stream
                .set_write_timeout(Some(self.spec.failure_timeout))
                .map_err(|e| format!("control connection: {e}"))?;
            let writer = Arc::new(Mutex::new(Writer { stream, closed: false }));
            watch(
                usize::from(self.node),
                peer,
                s,
                writer.clone(),
                &self.spec,
                placed.clone(),
                failure.clone(),
                state.clone(),
            );
            writers.push((peer, writer));
        }
        self.met = parts
            .iter()
            .filter(|(node, _, _)| members.contains(node))
            .map(|(node, inc, _)| (*node, *inc))
            .collect();
        learned.extend(placed.left().iter().copied());
        let layout = placed;
        Ok(Some(Run {
            local: layout.shards_of(self.node).collect(),
            gone: layout.has_left(self.node),
            told: false,
            left: learned.into_iter().collect(),
            joined: joined.into_iter().collect(),
            layout,
            spec: self.spec.clone(),
            node: self.node,
            plan,
            id,
            failure,
            state,
            peers: writers,
        }))
    }

    /// The run of a node that left the cluster (`told`: every other node
    /// greeted it): nothing to run, no peer.
    fn farewell(&mut self, layout: &Layout, left: BTreeSet<u16>, told: bool) -> Run {
        self.met.clear();
        Run {
            local: Vec::new(),
            gone: true,
            told,
            left: left.into_iter().collect(),
            joined: Vec::new(),
            layout: layout.placed(),
            spec: self.spec.clone(),
            node: self.node,
            plan: Plan {
                snapshot: None,
                replay_to: 0,
            },
            id: 0,
            failure: Arc::new(Failure::default()),
            state: Arc::new(RunState::new(
                self.spec.nodes.len(),
                usize::from(self.spec.n_shards()),
                &BTreeSet::from([self.node]),
            )),
            peers: Vec::new(),
        }
    }

    /// Answers a peer's dial accepted `at` during the join that `began`
    /// (saying `me`): its hello joins `met`. A connection accepted before
    /// the join and older than `EARLY_CONNECTION_KEPT` is from an earlier
    /// one (its peer waits `HELLO_TIMEOUT`) and is dropped; one accepted
    /// during the join is answered however long a dial of ours held it.
    fn answer_dial(
        &self,
        at: Instant,
        s: TcpStream,
        me: &Hello,
        began: Instant,
        met: &mut Vec<(TcpStream, Hello, bool)>,
    ) -> Result<(), String> {
        if at < began && at.elapsed() > EARLY_CONNECTION_KEPT {
            return Ok(());
        }
        // A dialer says its hello as it connects: by `HELLO_TIMEOUT` after
        // the accept it has (or gave up), so a dial answered later gets
        // only a moment to show what it sent — a flood of connections
        // that say nothing costs the join that long in all, not each.
        let by = (at + HELLO_TIMEOUT).max(Instant::now() + ACCEPTED_HELLO_GRACE);
        match self.greet(s, me, None, by) {
            // A peer's dial answered after it gave up waiting (a dial of
            // ours held the join past its `HELLO_TIMEOUT`) is dropped: its
            // peer dials again. (A greeting of this node as gone is one
            // hello and a close, and counts.)
            Ok((s, h)) if !h.left.contains(&self.node) && hung_up(&s) => {
                tracing::debug!(peer = h.node, "a peer's dial answered after it hung up");
            }
            Ok((s, h)) => met.push((s, h, false)),
            Err(Refused::Peer(e)) => {
                // At most once a second: a flood of connections that are
                // no peer's would flood the log.
                let (logged, since) = self.refused.get();
                if logged.is_none_or(|t| t.elapsed() >= REFUSED_LOG_INTERVAL) {
                    tracing::warn!(refused_since_last = since, "a connection to the control port: {e}");
                    self.refused.set((Some(Instant::now()), 0));
                } else {
                    self.refused.set((logged, since + 1));
                }
            }
            Err(Refused::Restarted(p)) => return Err(restarted(p)),
        }
        Ok(())
    }

    /// [`Control::answer_dial`] of every dial accepted and not answered yet.
    fn answer_dials(&self, me: &Hello, began: Instant, met: &mut Vec<(TcpStream, Hello, bool)>) -> Result<(), String> {
        while let Ok((at, s)) = self.accepted.try_recv() {
            self.answer_dial(at, s, me, began, met)?;
        }
        Ok(())
    }

    /// After a join, once its record of nodes gone is on disk (a greeting
    /// tells a node that left that this node recorded it): the nodes this
    /// node greets as gone from now on.
    pub fn greet_as_gone(&self, gone: &[u16]) {
        self.greeter.lock().expect("greeter lock").gone = gone.iter().copied().collect();
    }

    /// Exchanges hellos on a fresh connection (`dialed`: the node we
    /// called) and checks that the peer runs the same cluster and app.
    /// The peer's hello must have come by `deadline` — one deadline for
    /// the whole exchange, not a timeout per read: a connection trickling
    /// a byte every few seconds must not hold the join.
    fn greet(
        &self,
        mut s: TcpStream,
        me: &Hello,
        dialed: Option<u16>,
        deadline: Instant,
    ) -> Result<(TcpStream, Hello), Refused> {
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        s.set_write_timeout(Some(HELLO_TIMEOUT)).map_err(|e| e.to_string())?;
        s.write_all(&raw_control_frame(HELLO, &encode_hello(me)))
            .map_err(|e| format!("sending hello: {e}"))?;
        let (tag, body) = read_control_frame(&mut By { s: &mut s, deadline })
            .map_err(|e| format!("no hello by its deadline: {e}"))?;
        if tag != HELLO {
            return Err(format!("expected a hello, got frame {tag}").into());
        }
        let h = decode_hello(&body)?;
        self.check_peer(me, &h, dialed)?;
        Ok((s, h))
    }

    /// Whether the peer that said `h` runs the same cluster, application
    /// and layout as this node (that said `me`), and is who we dialed.
    fn check_peer(&self, me: &Hello, h: &Hello, dialed: Option<u16>) -> Result<(), Refused> {
        if h.left.contains(&self.node) {
            // A node greeting this one as gone (`greet_gone`: with the
            // hello of its last first join, whatever its layout or
            // incarnation now): the same cluster and application is all
            // that counts.
            return Ok(self.check_same_cluster(me, h, dialed)?);
        }
        if self.after_handover
            && self.met.get(&h.node).is_some_and(|i| *i != h.incarnation)
            && h.fingerprint == me.fingerprint
        {
            return Err(Refused::Restarted(h.node));
        }
        // A node joining at the round change the others just made, which
        // never ran, greets with the cluster file's layout (all it knows)
        // and they with the layout after its join: each takes the other's
        // hello, and the joining node takes their layout.
        let joining = |n: u16| self.spec.joins_later(n) && h.survey == Survey::default();
        if self.after_handover && joining(h.node) && !self.met.contains_key(&h.node) && me.layout.is_member(h.node) {
            return Ok(self.check_same_cluster(me, h, dialed)?);
        }
        if !self.after_handover
            && self.spec.joins_later(self.node)
            && me.survey == Survey::default()
            && h.layout.is_member(self.node)
            && me.layout.is_absent(self.node)
        {
            return Ok(self.check_same_cluster(me, h, dialed)?);
        }
        Ok(self.check_hello(me, h, dialed)?)
    }

    fn check_hello(&self, me: &Hello, h: &Hello, dialed: Option<u16>) -> Result<(), String> {
        self.check_same_cluster(me, h, dialed)?;
        if h.layout != me.layout {
            return Err(format!(
                "node {} runs another layout (version {}, shards on nodes {:?}) than this node (version {}, {:?}): give every node the same",
                h.node,
                h.layout.version(),
                placement(&h.layout),
                me.layout.version(),
                placement(&me.layout)
            ));
        }
        Ok(())
    }

    /// Whether the peer that said `h` has this node's cluster file and
    /// application, and another id of it (the one we dialed, if we did).
    fn check_same_cluster(&self, me: &Hello, h: &Hello, dialed: Option<u16>) -> Result<(), String> {
        if h.fingerprint != me.fingerprint {
            return Err(format!(
                "node {} runs another cluster layout (check that every node has the same cluster file)",
                h.node
            ));
        }
        if h.app != me.app {
            return Err(format!(
                "node {} serves another application (operators, functions or partitions differ)",
                h.node
            ));
        }
        if usize::from(h.node) >= self.spec.nodes.len() || h.node == self.node {
            return Err(format!("a hello from node {}", h.node));
        }
        if let Some(d) = dialed
            && d != h.node
        {
            return Err(format!("dialed node {d}, node {} answered", h.node));
        }
        Ok(())
    }
}

/// The farewell thread of node `node`: says hello to each node the
/// greeter names gone (unless this node is one), [`GONE_GREETING_EVERY`]
/// after it is named, then after pauses doubling up to
/// [`GONE_GREETING_MAX`], and reads its answer, until the control plane is
/// dropped. The answer is not checked: a node that left takes the
/// hello's record and goes (it greets as at any first join, so it may
/// first wait `HELLO_TIMEOUT` on a dial of its own), anything else is
/// left alone.
fn greet_gone(spec: &Spec, node: u16, greeter: &Mutex<Greeter>) {
    // Per node gone: when it is greeted next, and the pause after that.
    let mut due: BTreeMap<u16, (Instant, Duration)> = BTreeMap::new();
    loop {
        std::thread::sleep(GONE_GREETING_EVERY);
        let (hello, gone) = {
            let g = greeter.lock().expect("greeter lock");
            if g.stop {
                return;
            }
            match &g.hello {
                Some(h) if !g.gone.is_empty() && !g.gone.contains(&node) => (h.clone(), g.gone.clone()),
                _ => continue,
            }
        };
        let hello = Hello {
            left: gone.iter().copied().collect(),
            ..hello
        };
        let frame = raw_control_frame(HELLO, &encode_hello(&hello));
        let now = Instant::now();
        for id in &gone {
            due.entry(*id).or_insert((now, GONE_GREETING_EVERY));
        }
        for peer in spec.nodes.iter().filter(|p| gone.contains(&p.id)) {
            let (next, pause) = due.get_mut(&peer.id).expect("due for every node gone");
            if *next > Instant::now() {
                continue;
            }
            *next = Instant::now() + *pause;
            *pause = (*pause * 2).min(GONE_GREETING_MAX);
            let Ok(mut s) = TcpStream::connect_timeout(&peer.peer, DIAL_RETRY) else {
                continue;
            };
            let said = s
                .set_write_timeout(Some(HELLO_TIMEOUT))
                .and_then(|()| s.set_read_timeout(Some(HELLO_TIMEOUT * 2 + DIAL_RETRY)))
                .and_then(|()| s.write_all(&frame));
            if said.is_ok() && matches!(read_control_frame(&mut s), Ok((HELLO, _))) {
                tracing::debug!(node, gone = peer.id, "greeted a node that left the cluster");
            }
        }
    }
}

/// Whether the peer of `s` closed it: an end of stream, or a reset (our
/// hello written to a socket its peer closed draws one).
fn hung_up(s: &TcpStream) -> bool {
    match without_waiting(s, |s| s.peek(&mut [0u8; 1])) {
        Ok(n) => n == 0,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock && e.kind() != std::io::ErrorKind::Interrupted,
    }
}

/// `f` on `s` in non-blocking mode (what has arrived, or `WouldBlock`).
fn without_waiting<T>(s: &TcpStream, f: impl FnOnce(&TcpStream) -> std::io::Result<T>) -> std::io::Result<T> {
    s.set_nonblocking(true)?;
    let done = f(s);
    s.set_nonblocking(false)?;
    done
}

fn restarted(node: u16) -> String {
    format!(
        "node {node} restarted while this node went on to a later round: the cluster recovers together from its disks, so restart this node too"
    )
}

/// Per peer: a thread that reads its frames (heartbeats, commit notices)
/// and fails the run when the peer goes silent or the connection breaks,
/// and one that sends our heartbeats.
#[allow(clippy::too_many_arguments)]
fn watch(
    me: usize,
    peer: u16,
    s: TcpStream,
    writer: Arc<Mutex<Writer>>,
    spec: &Spec,
    layout: Layout,
    failure: Arc<Failure>,
    state: Arc<RunState>,
) {
    let mut reader = s;
    // The peer's heartbeats begin once its own join ends, which may be a
    // while after this node's (it meets the others one by one, on a
    // loaded machine slowly): its first frame gets a join's timeout, the
    // next ones the failure timeout.
    let _ = reader.set_read_timeout(Some(spec.failure_timeout.max(HELLO_TIMEOUT)));
    let failure_timeout = spec.failure_timeout;
    let f = failure.clone();
    let beats = state.clone();
    std::thread::Builder::new()
        .name(format!("styx-watch-{peer}"))
        .spawn(move || {
            let p = usize::from(peer);
            let n = state.n_shards;
            let mut heard = false;
            while !f.is_failed() {
                let epoch = |body: &[u8]| Payload::from_bytes(body).decode::<Epoch>();
                let frame = read_control_frame(&mut reader);
                if frame.is_ok() {
                    state.hear(p);
                    if !heard {
                        heard = true;
                        let _ = reader.set_read_timeout(Some(failure_timeout));
                    }
                }
                match frame {
                    Ok((HEARTBEAT, _)) => {}
                    Ok((COMMITTED, body)) => match epoch(&body) {
                        Ok(e) => {
                            state.committed[p].fetch_max(e, Ordering::SeqCst);
                        }
                        Err(e) => f.fail(format!("node {peer} sent a bad commit notice: {e}")),
                    },
                    Ok((ENDED, body)) => {
                        match Payload::from_bytes(&body).decode::<(
                            Epoch,
                            Vec<(ShardId, Vec<u64>)>,
                            (u64, u16, Vec<u16>, Vec<u16>, Vec<u16>),
                        )>() {
                            // A row for each of the sender's shards, in order (a
                            // spare sends none), and a layout of this cluster
                            // past this run's.
                            Ok((e, rows, (version, nodes, node_of, left, absent)))
                                if e > 0
                                    && rows.iter().map(|(s, _)| *s).eq(layout.shards_of(peer))
                                    && rows.iter().all(|(_, row)| row.len() == n)
                                    && nodes == layout.nodes()
                                    && node_of.len() == n
                                    && version > layout.version()
                                    && let Ok(next) = Layout::placed_on(nodes, node_of.clone())
                                        .and_then(|l| l.with_version(version).with_left(left.clone()))
                                        .and_then(|l| l.with_absent(absent.clone())) =>
                            {
                                for (shard, row) in rows {
                                    for (to, count) in row.into_iter().enumerate() {
                                        state.sent[usize::from(shard) * n + to].store(count, Ordering::SeqCst);
                                    }
                                }
                                state.stopped_for(p, e, next, &f);
                            }
                            _ => f.fail(format!("node {peer} sent a bad end notice")),
                        }
                    }
                    Ok((HANDED, body)) => match epoch(&body) {
                        Ok(e) if e > 0 => state.handed[p].store(e, Ordering::SeqCst),
                        _ => f.fail(format!("node {peer} sent a bad hand-off notice")),
                    },
                    Ok((RECEIVED, body)) => match epoch(&body) {
                        Ok(e) if e > 0 => state.received[p].store(e, Ordering::SeqCst),
                        _ => f.fail(format!("node {peer} sent a bad receipt")),
                    },
                    Ok((HANDOFF, body)) if body.len() >= 3 => {
                        let shard = u16::from_le_bytes([body[0], body[1]]);
                        let mut incoming = state.incoming.lock().expect("incoming lock");
                        if usize::from(shard) >= n || incoming.whole.len() >= n {
                            f.fail(format!(
                                "node {peer} sent a hand-off of shard {shard} (of {n}) too many"
                            ));
                            break;
                        }
                        let piece = incoming.partial.entry((peer, shard)).or_default();
                        if piece.len() + body.len() - 3 > HANDOFF_BYTES_MAX {
                            f.fail(format!(
                                "node {peer} sent a hand-off of shard {shard} past {HANDOFF_BYTES_MAX} bytes"
                            ));
                            break;
                        }
                        piece.extend_from_slice(&body[3..]);
                        if body[2] != 0 {
                            let whole = incoming.partial.remove(&(peer, shard)).expect("the piece just added");
                            incoming.whole.push(whole);
                        }
                    }
                    Ok((FINISHED, _)) => {
                        let _known = state.next_layout.lock().expect("layout lock");
                        state.finished[p].store(true, Ordering::SeqCst);
                        state.changed.notify_all();
                    }
                    Ok((tag, _)) => f.fail(format!("node {peer} sent control frame {tag}")),
                    // A peer that holds every hand-off of a handover writes
                    // nothing more and closes its connections next: its
                    // end, not a failure.
                    Err(_) if state.received[p].load(Ordering::SeqCst) != 0 => break,
                    // Nor is a peer's close after its run, or this node's,
                    // finished.
                    Err(_) if state.finished[p].load(Ordering::SeqCst) || state.finished[me].load(Ordering::SeqCst) => {
                        break;
                    }
                    Err(e) => f.fail(format!("node {peer}: {e}")),
                }
            }
        })
        .expect("control thread");
    let heartbeat = spec.heartbeat;
    let frame = control_frame(HEARTBEAT, &());
    std::thread::Builder::new()
        .name(format!("styx-beat-{peer}"))
        .spawn(move || {
            while !failure.is_failed() {
                let wrote = {
                    let mut w = writer.lock().expect("writer lock");
                    // After its last frame (a handover's receipt) or the
                    // run's close, this node writes nothing more.
                    if w.closed {
                        break;
                    }
                    w.write(&frame)
                };
                if let Err(e) = wrote {
                    // A peer whose run finished closes its connections
                    // right after its FINISHED, which our reader may not
                    // have read yet: its end, not a failure. (Nor is a
                    // write after this run closed.)
                    if writer.lock().expect("writer lock").closed
                        || beats.finished_soon(usize::from(peer), me, failure_timeout, &failure)
                    {
                        break;
                    }
                    failure.fail(format!("node {peer}: {e}"));
                }
                std::thread::sleep(heartbeat);
            }
            // A failed run: let the peer see it at once.
            let w = writer.lock().expect("writer lock");
            if !w.closed {
                let _ = w.stream.shutdown(Shutdown::Both);
            }
        })
        .expect("control thread");
}

/// A control frame: payload length, its CRC-32C, a tag byte, the payload
/// (`body` in the engine's encoding).
fn control_frame<T: Encode + ?Sized>(tag: u8, body: &T) -> Vec<u8> {
    let body = Payload::encode(body);
    let body = body.as_bytes();
    raw_control_frame(tag, body)
}

fn raw_control_frame(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(9 + body.len());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c_append(crc32c::crc32c(&[tag]), body).to_le_bytes());
    out.push(tag);
    out.extend_from_slice(body);
    out
}

/// A connection read by a deadline: each read waits only for what is
/// left of it.
struct By<'a> {
    s: &'a mut TcpStream,
    deadline: Instant,
}

impl Read for By<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            // Past it: what has arrived, without waiting.
            return without_waiting(self.s, |mut s| s.read(buf)).map_err(|e| {
                if e.kind() == std::io::ErrorKind::WouldBlock {
                    std::io::ErrorKind::TimedOut.into()
                } else {
                    e
                }
            });
        }
        self.s.set_read_timeout(Some(left))?;
        self.s.read(buf)
    }
}

fn read_control_frame(s: &mut impl Read) -> Result<(u8, Vec<u8>), String> {
    let mut head = [0u8; 9];
    s.read_exact(&mut head).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => "silent past the failure timeout".to_string(),
        std::io::ErrorKind::UnexpectedEof => "connection closed".to_string(),
        _ => e.to_string(),
    })?;
    let len = u32::from_le_bytes(head[0..4].try_into().expect("4")) as usize;
    let crc = u32::from_le_bytes(head[4..8].try_into().expect("4"));
    if len > CONTROL_FRAME_BYTES_MAX {
        return Err(format!("a control frame of {len} bytes"));
    }
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).map_err(|e| e.to_string())?;
    if crc32c::crc32c_append(crc32c::crc32c(&[head[8]]), &body) != crc {
        return Err("a control frame fails its checksum".into());
    }
    Ok((head[8], body))
}

/// Each shard's node, in shard order.
fn placement(layout: &Layout) -> Vec<u16> {
    (0..layout.n_shards()).map(|s| layout.node_of(s)).collect()
}

/// The layout `place` gives no snapshot (epoch 0) and each of
/// `snapshots`, as the changes a hello carries (`Hello::placed`).
fn placements(snapshots: &[Epoch], place: &impl Fn(&Plan) -> Result<Layout, String>) -> Vec<(Epoch, Option<Layout>)> {
    let mut changes: Vec<(Epoch, Option<Layout>)> = Vec::new();
    for at in std::iter::once(None).chain(snapshots.iter().copied().map(Some)) {
        let plan = Plan {
            snapshot: at,
            replay_to: at.unwrap_or(0),
        };
        // Where shards run and the version: what a hello carries of it.
        let layout = place(&plan).ok().map(|l| {
            Layout::placed_on(l.nodes(), placement(&l))
                .expect("a layout's own placement")
                .with_version(l.version())
        });
        if changes.last().is_none_or(|(_, last)| *last != layout) {
            changes.push((at.unwrap_or(0), layout));
        }
    }
    changes
}

/// The layout a hello's `placed` gives the snapshot at `at` (0: none).
fn placed_at(placed: &[(Epoch, Option<Layout>)], at: Epoch) -> Option<&Layout> {
    placed
        .iter()
        .rev()
        .find(|(from, _)| *from <= at)
        .and_then(|(_, l)| l.as_ref())
}

/// Refuses a plan the nodes' disks (their hellos, every node once; a
/// node joining later that holds nothing left out) do not agree on: a
/// snapshot they place differently, a preload some hold and the plan
/// would roll back, preloads that differ. Every node sees every hello, so
/// every node refuses alike.
fn check_disks_agree<'a>(plan: &Plan, hellos: impl Iterator<Item = &'a Hello>) -> Result<(), String> {
    let mut all: Vec<&Hello> = hellos.collect();
    all.sort_by_key(|h| h.node);
    let at = plan.snapshot.unwrap_or(0);
    let snapshot = plan
        .snapshot
        .map_or("no snapshot (a start from the logs)".to_string(), |e| {
            format!("the snapshot of epoch {e}")
        });
    let layouts: Vec<(u16, Option<&Layout>)> = all.iter().map(|h| (h.node, placed_at(&h.placed, at))).collect();
    if let Some((node, _)) = layouts.iter().find(|(_, l)| l.is_none()) {
        return Err(format!(
            "node {node} cannot place {snapshot}, which the cluster restores (its log says why)"
        ));
    }
    if layouts.windows(2).any(|w| w[0].1 != w[1].1) {
        let each: Vec<String> = layouts
            .iter()
            .map(|(node, l)| {
                let l = l.expect("checked above");
                format!(
                    "node {node}: version {}, shards on nodes {:?}",
                    l.version(),
                    placement(l)
                )
            })
            .collect();
        return Err(format!(
            "the nodes' data directories place {snapshot}, which the cluster restores, differently ({}): one was copied from another node or restored from another time; refusing to start rather than run a shard twice or nowhere",
            each.join("; ")
        ));
    }
    let preloads: Vec<(u16, &str)> = all
        .iter()
        .filter_map(|h| h.preload.as_deref().map(|p| (h.node, p)))
        .collect();
    if let Some((a, b)) = preloads.windows(2).map(|w| (w[0], w[1])).find(|(a, b)| a.1 != b.1) {
        return Err(format!(
            "node {} was preloaded with {:?} and node {} with {:?}: a cluster holds one preload (start every node with the same --preload on an empty directory)",
            a.0, a.1, b.0, b.1
        ));
    }
    let holding: Vec<u16> = all
        .iter()
        .filter(|h| h.preload.is_some() && !h.survey.snapshots.is_empty())
        .map(|h| h.node)
        .collect();
    if plan.snapshot.is_none()
        && !holding.is_empty()
        && let Some((_, label)) = preloads.first()
    {
        let without: Vec<u16> = all
            .iter()
            .filter(|h| h.survey.snapshots.is_empty())
            .map(|h| h.node)
            .collect();
        return Err(format!(
            "nodes {holding:?} hold the preload {label:?} and nodes {without:?} hold no snapshot, so the cluster would start empty and drop the preload: start nodes {without:?} with the same --preload (their directories are still empty), or empty every node's directory to start afresh"
        ));
    }
    Ok(())
}

/// A layout on the wire: version, node count, each shard's node.
type WireLayout = (u64, u16, Vec<u16>);

fn encode_hello(h: &Hello) -> Vec<u8> {
    let placed: Vec<(Epoch, Option<WireLayout>)> = h
        .placed
        .iter()
        .map(|(e, l)| (*e, l.as_ref().map(|l| (l.version(), l.nodes(), placement(l)))))
        .collect();
    let fields = (
        (CONTROL_MAGIC, CONTROL_VERSION, h.fingerprint, h.app),
        (h.node, h.incarnation, h.round),
        (h.survey.snapshots.clone(), h.survey.log_epoch, h.survey.complete),
        (h.layout.version(), h.layout.nodes(), placement(&h.layout)),
        (h.preload.clone(), placed, h.left.clone(), h.layout.left().to_vec()),
        (h.joined.clone(), h.layout.absent().to_vec()),
    );
    Payload::encode(&fields).as_bytes().to_vec()
}

fn decode_hello(bytes: &[u8]) -> Result<Hello, String> {
    type Fields = (
        (u64, u16, u64, u64),
        (u16, u64, u64),
        (Vec<Epoch>, Epoch, Epoch),
        (u64, u16, Vec<u16>),
        (Option<String>, Vec<(Epoch, Option<WireLayout>)>, Vec<u16>, Vec<u16>),
        (Vec<u16>, Vec<u16>),
    );
    // The version first: a node of another version is named as such, not
    // as a malformed hello.
    let version = <(u64, u16)>::decode(&mut &bytes[..]).map_err(|e| format!("a malformed hello: {e}"))?;
    if version.0 != CONTROL_MAGIC {
        return Err("not a Styx node (bad magic)".into());
    }
    if version.1 != CONTROL_VERSION {
        return Err(format!(
            "control protocol version {}, this node speaks {CONTROL_VERSION} (run one build on every node)",
            version.1
        ));
    }
    let (
        (_, _, fingerprint, app),
        (node, incarnation, round),
        (snapshots, log_epoch, complete),
        (layout_version, nodes, node_of),
        (preload, placed, left, layout_left),
        (joined, layout_absent),
    ) = Fields::decode(&mut &bytes[..]).map_err(|e| format!("a malformed hello: {e}"))?;
    if snapshots.len() > HELLO_SNAPSHOTS_MAX || snapshots.windows(2).any(|w| w[0] >= w[1]) {
        return Err("a hello whose snapshot list is not ascending".into());
    }
    let layout = Layout::placed_on(nodes, node_of)
        .and_then(|l| l.with_version(layout_version).with_left(layout_left))
        .and_then(|l| l.with_absent(layout_absent))
        .map_err(|e| format!("a hello with a bad layout: {e}"))?;
    let ascending =
        |v: &[u16]| v.len() <= usize::from(nodes) && v.windows(2).all(|w| w[0] < w[1]) && v.iter().all(|n| *n < nodes);
    if !ascending(&left) {
        return Err("a hello whose nodes gone are not ascending nodes of its layout".into());
    }
    if !ascending(&joined) {
        return Err("a hello whose nodes joined are not ascending nodes of its layout".into());
    }
    if placed.len() > snapshots.len() + 1 || placed.windows(2).any(|w| w[0].0 >= w[1].0) {
        return Err("a hello whose snapshots' layouts are not ascending".into());
    }
    let placed = placed
        .into_iter()
        .map(|(e, l)| {
            let l = l
                .map(|(v, nodes, node_of)| Layout::placed_on(nodes, node_of).map(|l| l.with_version(v)))
                .transpose()
                .map_err(|e| format!("a hello with a bad snapshot layout: {e}"))?;
            Ok((e, l))
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Hello {
        fingerprint,
        app,
        node,
        incarnation,
        round,
        survey: Survey {
            snapshots,
            log_epoch,
            complete,
        },
        layout,
        preload,
        placed,
        left,
        joined,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cluster of nodes on loopback running `shards[i]` shards each, in
    /// the first block of 80 free ports from `from` (moved by the process
    /// id, in steps of 10): node `i`'s peer port at 5 `i` (its shards' data
    /// ports follow it), its client port at 60 + `i`. A port another test
    /// or process took would fail the test, not the code.
    fn loopback_spec(from: u16, shards: &[u16], heartbeat: Duration, failure_timeout: Duration) -> Spec {
        let from = from + (std::process::id() % 200) as u16 * 10;
        let base = (0..200u16)
            .map(|k| from + k * 10)
            .find(|b| (0..80).all(|i| std::net::TcpListener::bind(("127.0.0.1", b + i)).is_ok()))
            .expect("80 free ports");
        Spec {
            nodes: (0u16..)
                .zip(shards)
                .map(|(id, shards)| Node {
                    id,
                    peer: SocketAddr::from(([127, 0, 0, 1], base + id * 5)),
                    client: SocketAddr::from(([127, 0, 0, 1], base + 60 + id)),
                    shards: *shards,
                })
                .collect(),
            heartbeat,
            failure_timeout,
            placement: None,
            absent: Vec::new(),
        }
    }

    fn survey(snapshots: &[Epoch], log_epoch: Epoch) -> Survey {
        Survey {
            snapshots: snapshots.to_vec(),
            log_epoch,
            complete: 0,
        }
    }

    #[test]
    fn layouts_number_shards_across_nodes() {
        let node = |id, port, shards| Node {
            id,
            peer: SocketAddr::from(([127, 0, 0, 1], port)),
            client: SocketAddr::from(([127, 0, 0, 1], port + 100)),
            shards,
        };
        let spec = Spec {
            nodes: vec![node(0, 7000, 2), node(1, 7010, 1), node(2, 7020, 3)],
            heartbeat: Duration::from_millis(50),
            failure_timeout: Duration::from_millis(300),
            placement: None,
            absent: Vec::new(),
        };
        spec.validate().unwrap();
        assert_eq!(spec.n_shards(), 6);
        assert_eq!(spec.shards_of(1), [2]);
        assert_eq!(spec.node_of(5), 2);
        let run = Run::single(spec.clone(), Plan::of(&[survey(&[], 0)]).unwrap());
        // Shard s's links on its node's peer port + 1 + s.
        assert_eq!(run.link_addr(4).port(), 7025);
        assert_eq!(run.link_addr(2).port(), 7013);
        // Three loopback nodes share a machine; a node elsewhere shares
        // it with none, and nodes on one other IP share theirs.
        let ids = |spec: &Spec, node| spec.neighbours(node).map(|n| n.id).collect::<Vec<_>>();
        assert_eq!(ids(&spec, 1), [0, 2]);
        let mut apart = spec.clone();
        apart.nodes[2].peer = SocketAddr::from(([10, 0, 0, 2], 7020));
        assert_eq!(ids(&apart, 0), [1]);
        assert_eq!(ids(&apart, 2), [] as [u16; 0]);
        apart.nodes[1].peer = SocketAddr::from(([10, 0, 0, 2], 7010));
        assert_eq!(ids(&apart, 2), [1]);
        assert_eq!(ids(&apart, 0), [] as [u16; 0]);
        // An IPv4-mapped address is its IPv4 one.
        apart.nodes[0].peer = "[::ffff:10.0.0.2]:7000".parse().unwrap();
        assert_eq!(ids(&apart, 0), [1, 2]);
        let mut tight = spec.clone();
        tight.nodes[1].peer = SocketAddr::from(([127, 0, 0, 1], 7005));
        assert!(
            tight.validate().unwrap_err().contains("used twice"),
            "7005..7011 meets 7000..7006"
        );
        let mut clash = spec.clone();
        clash.nodes[1].peer = SocketAddr::from(([127, 0, 0, 1], 7001));
        assert!(clash.validate().unwrap_err().contains("used twice"));
        let mut order = spec.clone();
        order.nodes[2].id = 5;
        assert!(order.validate().is_err());
        assert_ne!(spec.fingerprint(), clash.fingerprint());
        // A spare (no shards at first) is a node of the cluster; a cluster
        // of spares is not.
        let mut spare = spec.clone();
        spare.nodes[1].shards = 0;
        spare.validate().unwrap();
        assert!(spare.shards_of(1).is_empty());
        assert_eq!(spare.layout().shards_of(1).count(), 0);
        for n in &mut spare.nodes {
            n.shards = 0;
        }
        assert_eq!(spare.validate().unwrap_err(), "no node has shards");
        // A placement: each shard's node, as many on each as it counts.
        let mut placed = spec.clone();
        placed.placement = Some(vec![2, 0, 1, 2, 0, 2]);
        placed.validate().unwrap();
        assert_eq!(placed.shards_of(0), [1, 4]);
        assert_eq!(placed.shards_of(2), [0, 3, 5]);
        assert_eq!(placed.node_of(3), 2);
        assert_eq!(placed.first_of(2), 3, "CPUs as if numbered in order");
        assert_eq!(placed.layout().node_of(0), 2);
        assert_eq!(
            Run::single(placed.clone(), Plan::of(&[survey(&[], 0)]).unwrap())
                .link_addr(0)
                .port(),
            7021
        );
        assert_ne!(placed.fingerprint(), spec.fingerprint());
        for (bad, says) in [
            (vec![2, 0, 1, 2, 0], "a placement of 5 shards for nodes of 6"),
            (vec![2, 0, 1, 2, 0, 0], "node 0 has 2 shards but is placed 3"),
            (vec![2, 0, 1, 2, 0, 3], "node 2 has 3 shards but is placed 2"),
        ] {
            let mut wrong = spec.clone();
            wrong.placement = Some(bad);
            assert_eq!(wrong.validate().unwrap_err(), says);
        }
    }

    #[test]
    fn hellos_round_trip_and_garbage_is_refused() {
        let h = Hello {
            fingerprint: 1,
            app: 2,
            node: 3,
            incarnation: 4,
            round: 5,
            survey: survey(&[1, 5], 9),
            layout: Layout::placed_on(2, vec![0, 1, 1, 0]).unwrap().with_version(7),
            preload: Some("ycsbt keys=10".into()),
            left: Vec::new(),
            joined: Vec::new(),
            placed: vec![(0, Some(Layout::placed_on(2, vec![0, 0, 1, 1]).unwrap())), (5, None)],
        };
        assert_eq!(decode_hello(&encode_hello(&h)).unwrap(), h);
        // A node joining later: the layout keeps it absent, the record
        // names one that joined.
        let mut joining = h.clone();
        joining.layout = Layout::placed_on(4, vec![0, 1, 1, 0])
            .unwrap()
            .with_absent(vec![3])
            .unwrap();
        joining.joined = vec![2];
        assert_eq!(decode_hello(&encode_hello(&joining)).unwrap(), joining);
        joining.joined = vec![2, 2];
        assert!(decode_hello(&encode_hello(&joining)).unwrap_err().contains("joined"));
        let bytes = encode_hello(&h);
        for cut in 0..bytes.len() {
            assert!(decode_hello(&bytes[..cut]).is_err());
        }
        let mut bad = h.clone();
        bad.survey.snapshots = vec![5, 1];
        assert!(decode_hello(&encode_hello(&bad)).is_err());
        let mut bad = h.clone();
        bad.placed.reverse();
        assert!(decode_hello(&encode_hello(&bad)).unwrap_err().contains("ascending"));
        // A layout placing a shard on a node it does not have.
        let raw = |node_of: Vec<u16>, layout_left: Vec<u16>, layout_absent: Vec<u16>| {
            let fields = (
                (CONTROL_MAGIC, CONTROL_VERSION, 1u64, 2u64),
                (3u16, 4u64, 5u64),
                (vec![1u64], 9u64, 0u64),
                (7u64, 2u16, node_of),
                (
                    None::<String>,
                    Vec::<(Epoch, Option<WireLayout>)>::new(),
                    Vec::<u16>::new(),
                    layout_left,
                ),
                (Vec::<u16>::new(), layout_absent),
            );
            Payload::encode(&fields).as_bytes().to_vec()
        };
        assert!(decode_hello(&raw(vec![0, 1, 1, 0], vec![], vec![])).is_ok());
        assert!(
            decode_hello(&raw(vec![0, 9, 1, 0], vec![], vec![]))
                .unwrap_err()
                .contains("layout")
        );
        // A layout where a node that left runs a shard.
        assert!(
            decode_hello(&raw(vec![0, 1, 1, 0], vec![1], vec![]))
                .unwrap_err()
                .contains("layout")
        );
        // A layout where a node not joined yet runs a shard.
        assert!(
            decode_hello(&raw(vec![0, 1, 1, 0], vec![], vec![1]))
                .unwrap_err()
                .contains("layout")
        );
        // Another build's hello is named as such.
        let mut other = encode_hello(&h);
        other[8] ^= 0xff;
        assert!(decode_hello(&other).unwrap_err().contains("control protocol version"));
    }

    fn hello(node: u16, snapshots: &[Epoch], preload: Option<&str>, placed: &[(Epoch, &[u16])]) -> Hello {
        Hello {
            fingerprint: 1,
            app: 2,
            node,
            incarnation: 3,
            round: 1,
            survey: survey(snapshots, 0),
            layout: Layout::placed_on(2, vec![0, 1]).unwrap(),
            preload: preload.map(str::to_string),
            left: Vec::new(),
            joined: Vec::new(),
            placed: placed
                .iter()
                .map(|(e, p)| (*e, Some(Layout::placed_on(2, p.to_vec()).unwrap().with_version(*e))))
                .collect(),
        }
    }

    #[test]
    fn the_nodes_disks_must_agree_on_the_plans_layout_and_preload() {
        let plan = |snapshot| Plan {
            snapshot,
            replay_to: 20,
        };
        let split: &[u16] = &[0, 1];
        let moved: &[u16] = &[1, 1];
        // Both place snapshot 10 alike (node 1 also keeps a later one).
        let a = hello(0, &[10], None, &[(0, split), (10, moved)]);
        let b = hello(1, &[10, 15], None, &[(0, split), (10, moved), (15, split)]);
        check_disks_agree(&plan(Some(10)), [&a, &b].into_iter()).unwrap();
        check_disks_agree(&plan(Some(10)), [&b, &a].into_iter()).unwrap();
        // Node 1's directory places it otherwise: both refuse, alike.
        let c = hello(1, &[10], None, &[(0, split)]);
        let refused = check_disks_agree(&plan(Some(10)), [&a, &c].into_iter()).unwrap_err();
        assert_eq!(
            check_disks_agree(&plan(Some(10)), [&c, &a].into_iter()).unwrap_err(),
            refused
        );
        assert!(
            refused.contains("place the snapshot of epoch 10")
                && refused.contains("node 1: version 0, shards on nodes [0, 1]"),
            "{refused}"
        );
        // A node that cannot place it (a layout of another shape) is named.
        let mut d = hello(1, &[10], None, &[]);
        d.placed = vec![(0, None)];
        assert!(
            check_disks_agree(&plan(Some(10)), [&a, &d].into_iter())
                .unwrap_err()
                .contains("node 1 cannot place")
        );

        // A preload the plan would drop: a node holds it, another nothing.
        let loaded = hello(0, &[1], Some("ycsbt keys=10"), &[(0, split)]);
        let empty = hello(1, &[], None, &[(0, split)]);
        let refused = check_disks_agree(&plan(None), [&empty, &loaded].into_iter()).unwrap_err();
        assert!(
            refused.contains("nodes [0] hold the preload \"ycsbt keys=10\" and nodes [1] hold no snapshot"),
            "{refused}"
        );
        assert_eq!(
            check_disks_agree(&plan(None), [&loaded, &empty].into_iter()).unwrap_err(),
            refused
        );
        // Preloaded alike, restored: fine; before any commit (a preload
        // cut short everywhere), nothing is dropped.
        let loaded_too = hello(1, &[1], Some("ycsbt keys=10"), &[(0, split)]);
        check_disks_agree(&plan(Some(1)), [&loaded, &loaded_too].into_iter()).unwrap();
        let cut_short = hello(1, &[], Some("ycsbt keys=10"), &[(0, split)]);
        check_disks_agree(
            &plan(None),
            [&cut_short, &hello(0, &[], Some("ycsbt keys=10"), &[(0, split)])].into_iter(),
        )
        .unwrap();
        // Two preloads in one cluster.
        let other = hello(1, &[1], Some("ycsbt keys=20"), &[(0, split)]);
        let refused = check_disks_agree(&plan(Some(1)), [&loaded, &other].into_iter()).unwrap_err();
        assert!(
            refused.contains("node 0 was preloaded with \"ycsbt keys=10\" and node 1 with \"ycsbt keys=20\""),
            "{refused}"
        );
    }

    #[test]
    fn nodes_join_agree_and_detect_a_silent_peer() {
        let spec = loopback_spec(
            17_300,
            &[1, 1, 1],
            Duration::from_millis(20),
            Duration::from_millis(200),
        );
        let stop = Arc::new(AtomicBool::new(false));
        let threads: Vec<_> = (0..3u16)
            .map(|i| {
                let spec = spec.clone();
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let layout = spec.layout();
                    let mut c = Control::start(spec, i, 42).unwrap();
                    let run = c
                        .join(survey(&[1, u64::from(i) + 2], 10 + u64::from(i)), &layout, &stop)
                        .unwrap()
                        .unwrap();
                    (c, run)
                })
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !threads.iter().all(|t| t.is_finished()) {
            if Instant::now() > deadline {
                stop.store(true, Ordering::Relaxed);
                panic!("the nodes did not join within 20 s");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut runs: Vec<(Control, Run)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let plan = runs[0].1.plan;
        assert_eq!(
            plan,
            Plan {
                snapshot: Some(1),
                replay_to: 12
            }
        );
        assert!(runs.iter().all(|(_, r)| r.plan == plan && r.id == runs[0].1.id));
        // Commits: complete once every node committed.
        for (_, r) in &runs[..2] {
            r.committed_locally(7);
        }
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(runs[0].1.complete_epoch(), 0);
        runs[2].1.committed_locally(7);
        let deadline = Instant::now() + Duration::from_secs(5);
        while !runs.iter().all(|(_, r)| r.complete_epoch() == 7) {
            assert!(Instant::now() < deadline, "a commit notice never arrived");
            std::thread::sleep(Duration::from_millis(5));
        }
        // Node 2 goes away: the others fail their run within the timeout.
        let (_, gone) = runs.pop().unwrap();
        gone.failure.fail("test: node 2 stops");
        drop(gone);
        let started = Instant::now();
        while !runs.iter().all(|(_, r)| r.failure.is_failed()) {
            assert!(started.elapsed() < Duration::from_secs(2), "failure not detected");
            std::thread::sleep(Duration::from_millis(5));
        }
        // The first to see node 2 gone names it; the other may see that
        // node's failure first (a failed node shuts its connections at
        // once), as happened on a loaded machine.
        let reasons: Vec<_> = runs.iter().map(|(_, r)| r.failure.reason().unwrap()).collect();
        assert!(reasons.iter().any(|r| r.contains("node 2")), "{reasons:?}");
    }

    /// Node 2 left: node 0's directory records it, node 1's does not (it
    /// learns it from node 0's hello), and node 2's own record says so.
    /// Nodes 0 and 1 join without waiting for it, each learning the
    /// record to keep; node 2 says hello to them and goes.
    #[test]
    fn a_join_leaves_out_a_node_a_record_says_left_and_it_says_goodbye() {
        let spec = loopback_spec(
            17_500,
            &[1, 1, 0],
            Duration::from_millis(20),
            Duration::from_millis(400),
        );
        let stop = Arc::new(AtomicBool::new(false));
        let threads: Vec<_> = (0..3u16)
            .map(|i| {
                let spec = spec.clone();
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let layout = spec.layout();
                    let mut c = Control::start(spec, i, 42).unwrap();
                    let joining = Joining {
                        survey: survey(&[1], 5),
                        preload: None,
                        left: if i == 1 { vec![] } else { vec![2] },
                        joined: Vec::new(),
                    };
                    let run = c
                        .join_placed(joining, &layout, &stop, |_| Ok(layout.clone()))
                        .unwrap()
                        .unwrap();
                    (c, run)
                })
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !threads.iter().all(|t| t.is_finished()) {
            if Instant::now() > deadline {
                stop.store(true, Ordering::Relaxed);
                panic!("the join did not end within 30 s");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let runs: Vec<(Control, Run)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        for (c, run) in &runs[..2] {
            assert!(!run.has_left(), "node {}", c.node());
            assert_eq!(run.left_nodes(), &[2], "node {} keeps the record", c.node());
            assert_eq!(run.peers.len(), 1, "node {} runs with the other only", c.node());
            assert_eq!(c.met.keys().copied().collect::<Vec<_>>(), vec![0, 1]);
        }
        assert_eq!(runs[0].1.id, runs[1].1.id);
        assert!(runs[2].1.has_left() && runs[2].1.peers.is_empty());
        // Commits complete among the members alone.
        runs[0].1.committed_locally(4);
        runs[1].1.committed_locally(4);
        let started = Instant::now();
        while runs[0].1.complete_epoch() != 4 {
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "no completion without node 2"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Node 2 was killed as it left, before it recorded its own leave:
    /// nodes 0 and 1 recorded it and run on without it. Started again
    /// with no record, node 2 waits at its first join for the nodes below
    /// it, which dial no one as they run: their farewell threads greet
    /// it, it learns it left and goes, told.
    #[test]
    fn running_nodes_greet_a_node_that_left_unaware_and_it_goes() {
        a_node_that_left_unaware_is_greeted(30_400, &[1, 1, 0], 2);
    }

    /// The same of node 1, between running nodes: its own dial of node 2,
    /// which runs on, holds it `HELLO_TIMEOUT` at each try, and the
    /// greetings that came meanwhile are still answered.
    #[test]
    fn a_node_that_left_unaware_below_a_running_node_is_greeted_too() {
        a_node_that_left_unaware_is_greeted(31_200, &[1, 0, 1], 1);
    }

    /// Every node but `gone` joins with a record naming it and runs on
    /// (holds its run); then `gone` starts with no record and must learn
    /// it left and go, told, within 20 s.
    fn a_node_that_left_unaware_is_greeted(ports: u16, shards: &[u16], gone: u16) {
        let spec = loopback_spec(ports, shards, Duration::from_millis(20), Duration::from_millis(400));
        let layout = spec.layout();
        let members: Vec<_> = (0..shards.len() as u16)
            .filter(|i| *i != gone)
            .map(|i| {
                let (spec, layout) = (spec.clone(), layout.clone());
                std::thread::spawn(move || {
                    let mut c = Control::start(spec, i, 42).unwrap();
                    let joining = Joining {
                        survey: survey(&[1], 5),
                        preload: None,
                        left: vec![gone],
                        joined: Vec::new(),
                    };
                    let stop = AtomicBool::new(false);
                    let run = c
                        .join_placed(joining, &layout, &stop, |_| Ok(layout.clone()))
                        .unwrap()
                        .unwrap();
                    // As `run_rounds` does once the record is on disk.
                    c.greet_as_gone(&run.left_nodes());
                    (c, run)
                })
            })
            .collect();
        let members: Vec<(Control, Run)> = members.into_iter().map(|t| t.join().unwrap()).collect();
        assert!(members.iter().all(|(_, r)| !r.has_left() && r.left_nodes() == [gone]));
        // The members run (no join); node `gone` starts again, unaware.
        let started = Instant::now();
        let stop = AtomicBool::new(false);
        let unaware = std::thread::spawn(move || {
            let mut c = Control::start(spec, gone, 42).unwrap();
            c.join_placed(survey(&[1], 5).into(), &layout, &stop, |_| Ok(layout.clone()))
                .map(|r| r.map(|r| (r.has_left(), r.told, r.left_nodes())))
        });
        while !unaware.is_finished() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "node {gone} still waits for nodes that run on"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(
            unaware.join().unwrap().unwrap(),
            Some((true, true, vec![gone])),
            "node {gone} learned it left, every other node greeted it"
        );
        drop(members);
    }

    #[test]
    fn nodes_told_different_layouts_do_not_join() {
        let spec = loopback_spec(19_300, &[2, 2], Duration::from_millis(20), Duration::from_millis(200));
        let alternate = Layout::placed_on(2, vec![0, 1, 0, 1]).unwrap();
        // A control plane on other ports (a listener lives as long as the
        // process) for the checks without a peer.
        let aside = Spec {
            nodes: spec
                .nodes
                .iter()
                .map(|n| Node {
                    peer: SocketAddr::from(([127, 0, 0, 1], n.peer.port() + 7)),
                    ..n.clone()
                })
                .collect(),
            ..spec.clone()
        };
        let mut c = Control::start(aside, 0, 42).unwrap();
        // A layout that does not fit the cluster file is refused at once.
        let stop = AtomicBool::new(false);
        let three = Layout::placed_on(3, vec![0, 1, 2, 0]).unwrap();
        assert!(c.join(survey(&[], 0), &three, &stop).unwrap_err().contains("3 nodes"));
        let crowded = Layout::placed_on(2, vec![0, 0, 0, 1]).unwrap();
        // Any node may run any shard: each reserves a port per shard.
        check_layout(&c.spec, &crowded).unwrap();
        // The refusal names both layouts.
        let hello = |layout: &Layout, node| Hello {
            fingerprint: spec.fingerprint(),
            app: 42,
            node,
            incarnation: 1,
            round: 1,
            survey: survey(&[], 0),
            layout: layout.clone(),
            preload: None,
            left: Vec::new(),
            joined: Vec::new(),
            placed: vec![(0, Some(layout.clone()))],
        };
        let mut me = hello(&spec.layout(), 0);
        me.fingerprint = c.spec.fingerprint();
        let mut them = hello(&alternate, 1);
        them.fingerprint = c.spec.fingerprint();
        let refused = c.check_hello(&me, &them, Some(1)).unwrap_err();
        assert!(
            refused.contains("[0, 1, 0, 1]") && refused.contains("[0, 0, 1, 1]"),
            "{refused}"
        );
        them.layout = spec.layout();
        c.check_hello(&me, &them, Some(1)).unwrap();
        drop(c);
        // Two nodes told different layouts wait for each other in vain;
        // told the same one, they join and run it. (Neither first layout is
        // the one they agree on: a node still in its first join must not
        // match the other's second.)
        let stop = Arc::new(AtomicBool::new(false));
        let threads: Vec<_> = [spec.layout(), Layout::placed_on(2, vec![1, 0, 0, 1]).unwrap()]
            .into_iter()
            .enumerate()
            .map(|(i, first)| {
                let (spec, stop, alternate) = (spec.clone(), stop.clone(), alternate.clone());
                std::thread::spawn(move || {
                    let mut c = Control::start(spec, i as u16, 42).unwrap();
                    let refused = c.join(survey(&[], 0), &first, &stop).unwrap();
                    let never = AtomicBool::new(false);
                    let run = c.join(survey(&[], 0), &alternate, &never).unwrap().unwrap();
                    (refused.is_none(), run.local_shards().to_vec(), run.layout().clone())
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(800));
        stop.store(true, Ordering::Relaxed);
        let deadline = Instant::now() + Duration::from_secs(20);
        while !threads.iter().all(|t| t.is_finished()) {
            assert!(Instant::now() < deadline, "the nodes did not join with the same layout");
            std::thread::sleep(Duration::from_millis(5));
        }
        let runs: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        for (i, (refused, local, layout)) in runs.iter().enumerate() {
            assert!(*refused, "node {i} joined a peer told another layout");
            assert_eq!(*local, [i as u16, i as u16 + 2]);
            assert_eq!(*layout, alternate);
        }
    }

    /// A peer met at an earlier join that greets with another incarnation
    /// (it restarted, and recovers from its disk) ends this node's join
    /// after a handover with an error instead of a wait for ever (it
    /// greets with its first layout, this node with the next round's); a
    /// plain join (a daemon's after a failed run) takes it.
    #[test]
    fn a_later_join_fails_when_a_peer_restarted() {
        let spec = loopback_spec(21_700, &[2, 2], Duration::from_millis(20), Duration::from_millis(200));
        let mut c = Control::start(spec.clone(), 0, 42).unwrap();
        // Node 1 as it was met at the last join, and as it answers now.
        c.met.insert(1, 7);
        c.round = 1;
        // A plain join (a daemon's after a failed run) takes it as it is.
        let h8 = Hello {
            fingerprint: spec.fingerprint(),
            app: 42,
            node: 1,
            incarnation: 8,
            round: 1,
            survey: survey(&[], 0),
            layout: spec.layout(),
            preload: None,
            left: Vec::new(),
            joined: Vec::new(),
            placed: vec![(0, Some(spec.layout()))],
        };
        let me0 = Hello { node: 0, ..h8.clone() };
        assert!(c.check_peer(&me0, &h8, Some(1)).is_ok());
        let listener = std::net::TcpListener::bind(spec.nodes[1].peer).unwrap();
        let fingerprint = spec.fingerprint();
        let first = spec.layout();
        let peer = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let (tag, _) = read_control_frame(&mut s).unwrap();
            assert_eq!(tag, HELLO);
            let h = Hello {
                fingerprint,
                app: 42,
                node: 1,
                incarnation: 8,
                round: 1,
                survey: survey(&[], 0),
                placed: vec![(0, Some(first.clone()))],
                layout: first,
                preload: None,
                left: Vec::new(),
                joined: Vec::new(),
            };
            s.write_all(&raw_control_frame(HELLO, &encode_hello(&h))).unwrap();
        });
        let next = Layout::placed_on(2, vec![0, 1, 1, 1]).unwrap().with_version(1);
        // Without the check the join would wait: stopped, it says `None`.
        let stop = Arc::new(AtomicBool::new(false));
        let stopper = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(10));
            stopper.store(true, Ordering::Relaxed);
        });
        let e = c.join_next(&next, &stop).unwrap_err();
        assert!(e.contains("node 1 restarted"), "{e}");
        peer.join().unwrap();
        // Met with the same incarnation, a peer told another layout is
        // only refused (the join waits for it).
        c.met.insert(1, 8);
        let h = Hello {
            fingerprint,
            app: 42,
            node: 1,
            incarnation: 8,
            round: 1,
            survey: survey(&[], 0),
            layout: spec.layout(),
            preload: None,
            left: Vec::new(),
            joined: Vec::new(),
            placed: vec![(0, Some(spec.layout()))],
        };
        let me = Hello {
            node: 0,
            layout: next,
            ..h.clone()
        };
        c.after_handover = true;
        assert!(matches!(c.check_peer(&me, &h, Some(1)), Err(Refused::Peer(_))));
    }

    /// A node listed as joining later (node 1 of shards 0, 1 | none | 2, 3)
    /// waits at its first join while the others run without it; a node
    /// above it (node 2) answers its dial at its own first join, with the
    /// file's layout; at the round change that adds node 1 (the others'
    /// join after a handover, the layout past its join) node 1 dials node
    /// 2 again and takes the others' layout, and the run has all three.
    #[test]
    fn a_node_joining_later_waits_and_joins_at_the_round_change_that_adds_it() {
        let mut spec = loopback_spec(20_500, &[2, 0, 2], Duration::from_millis(20), Duration::from_secs(2));
        spec.absent = vec![1];
        let mut next = spec.layout();
        let made = next.decide(3, &mut [(9, styx_engine::Handover::join(1))], false, true);
        assert_eq!(made.len(), 1);
        let stop = Arc::new(AtomicBool::new(false));
        let member = |node: u16| {
            let (spec, next, stop) = (spec.clone(), next.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut c = Control::start(spec.clone(), node, 42).unwrap();
                let first = c.join(survey(&[], 0), &spec.layout(), &stop).unwrap().unwrap();
                let without: Vec<u16> = first.peers.iter().map(|(p, _)| *p).collect();
                // The round ends (a handover's would) and the next begins.
                first.finish();
                drop(first);
                let run = c.join_next(&next, &stop).unwrap();
                (without, run)
            })
        };
        let joiner = {
            let (spec, stop) = (spec.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut c = Control::start(spec.clone(), 1, 42).unwrap();
                c.join(survey(&[], 0), &spec.layout(), &stop).unwrap()
            })
        };
        // Node 2 waits for node 0 at its first join, answering node 1's
        // dial meanwhile.
        let two = member(2);
        std::thread::sleep(Duration::from_millis(300));
        let zero = member(0);
        let stopper = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(20));
            stopper.store(true, Ordering::Relaxed);
        });
        let run1 = joiner.join().unwrap().expect("node 1 joined before the deadline");
        for (node, t) in [(0u16, zero), (2, two)] {
            let (without, run) = t.join().unwrap();
            assert_eq!(without, vec![2 - node], "node {node} ran without node 1 first");
            let run = run.expect("the join after the round change, before the deadline");
            let mut peers: Vec<u16> = run.peers.iter().map(|(p, _)| *p).collect();
            peers.sort_unstable();
            let mut want = vec![1, 2 - node];
            want.sort_unstable();
            assert_eq!(peers, want, "node {node}'s peers");
            assert_eq!(run.joined_nodes(), &[1]);
        }
        assert_eq!(run1.layout(), &next.placed(), "node 1 runs the layout past its join");
        assert_eq!(run1.joined_nodes(), &[1]);
        assert!(run1.local_shards().is_empty());
    }

    /// Node `node` of `spec` joining on a thread of its own (a first join).
    fn joining(spec: &Spec, node: u16) -> std::thread::JoinHandle<Run> {
        let (spec, layout) = (spec.clone(), spec.layout());
        std::thread::spawn(move || {
            let mut c = Control::start(spec, node, 42).unwrap();
            let stop = AtomicBool::new(false);
            c.join(survey(&[], 0), &layout, &stop).unwrap().unwrap()
        })
    }

    /// A connection to `addr` once something listens there.
    fn dial_when_listening(addr: SocketAddr) -> TcpStream {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match TcpStream::connect(addr) {
                Ok(s) => return s,
                Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => panic!("nothing listened on {addr}: {e}"),
            }
        }
    }

    /// A dial whose peer gave up before its hello was answered (the peer
    /// dials again) does not make a peer of the join: node 1 answers a
    /// hello from "node 0" whose socket closed, and goes on waiting until
    /// the real node 0 dials.
    #[test]
    fn a_dial_answered_after_its_peer_hung_up_is_no_peer() {
        let spec = loopback_spec(27_900, &[1, 1], Duration::from_millis(20), Duration::from_millis(400));
        let layout = spec.layout();
        // Node 1 listens; it joins (and answers) only once the dial below
        // hung up, as a node busy with a dial of its own would.
        let mut control = Control::start(spec.clone(), 1, 42).unwrap();
        // A hello as node 0's, sent and hung up on before any answer.
        let hello = Hello {
            fingerprint: spec.fingerprint(),
            app: 42,
            node: 0,
            incarnation: 1,
            round: 1,
            survey: survey(&[], 0),
            layout: layout.placed(),
            preload: None,
            placed: placements(&[], &|_| Ok(layout.clone())),
            left: Vec::new(),
            joined: Vec::new(),
        };
        let mut s = dial_when_listening(spec.nodes[1].peer);
        s.write_all(&raw_control_frame(HELLO, &encode_hello(&hello))).unwrap();
        drop(s);
        // (Within `EARLY_CONNECTION_KEPT`: the join answers it.)
        std::thread::sleep(Duration::from_millis(200));
        let one = {
            let layout = layout.clone();
            std::thread::spawn(move || {
                let stop = AtomicBool::new(false);
                control.join(survey(&[], 0), &layout, &stop).unwrap().unwrap()
            })
        };
        std::thread::sleep(Duration::from_millis(500));
        assert!(!one.is_finished(), "node 1 joined with a peer that hung up");
        let mut c = Control::start(spec, 0, 42).unwrap();
        let stop = AtomicBool::new(false);
        let zero = c.join(survey(&[], 0), &layout, &stop).unwrap().unwrap();
        let one = one.join().unwrap();
        assert_eq!(zero.id, one.id, "one run");
        assert!(!one.failure.is_failed() && !zero.failure.is_failed());
    }

    /// Connections to the control port that say nothing, or trickle a
    /// byte every second (a port scanner, a misdirected client), hold a
    /// join for about `HELLO_TIMEOUT` in all: a hello has one deadline,
    /// not a timeout per read, counted from the connection's accept.
    #[test]
    fn connections_that_say_nothing_or_trickle_do_not_hold_a_join() {
        let spec = loopback_spec(24_700, &[1, 1], Duration::from_millis(20), Duration::from_millis(400));
        let one = joining(&spec, 1);
        let mut s = dial_when_listening(spec.nodes[1].peer);
        // Forty that say nothing (5 s each, one after the other, before).
        let silent: Vec<TcpStream> = (0..40)
            .map(|_| TcpStream::connect(spec.nodes[1].peer).unwrap())
            .collect();
        // One with a header announcing 1 000 bytes, then a byte a second.
        let frame = raw_control_frame(HELLO, &[7u8; 1000]);
        s.write_all(&frame[..9]).unwrap();
        let trickled = Arc::new(AtomicBool::new(false));
        let trickling = {
            let done = trickled.clone();
            std::thread::spawn(move || {
                for b in &frame[9..] {
                    if done.load(Ordering::Relaxed) || s.write_all(&[*b]).is_err() {
                        return;
                    }
                    std::thread::sleep(Duration::from_secs(1));
                }
            })
        };
        std::thread::sleep(Duration::from_millis(200));
        let began = Instant::now();
        let zero = joining(&spec, 0);
        while !(zero.is_finished() && one.is_finished()) {
            assert!(
                began.elapsed() < Duration::from_secs(30),
                "the join waited on the connections for 30 s"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        eprintln!("joined {:?} after the other node began", began.elapsed());
        trickled.store(true, Ordering::Relaxed);
        drop(silent);
        let (zero, one) = (zero.join().unwrap(), one.join().unwrap());
        assert_eq!(zero.id, one.id, "one run");
        trickling.join().unwrap();
    }

    /// SIGTERM during a handover: a node whose peer never sends its
    /// hand-offs stops waiting once told to stop, not at the timeout.
    #[test]
    fn a_handover_stops_waiting_when_the_node_is_told_to_stop() {
        let spec = loopback_spec(27_100, &[1, 1], Duration::from_millis(5), Duration::from_secs(5));
        let threads: Vec<_> = (0..2u16)
            .map(|i| {
                let spec = spec.clone();
                std::thread::spawn(move || {
                    let mut c = Control::start(spec.clone(), i, 42).unwrap();
                    let stop = Arc::new(AtomicBool::new(false));
                    let run = c.join(survey(&[], 0), &spec.layout(), &stop).unwrap().unwrap();
                    if i == 1 {
                        // Alive (its heartbeats go on), handing nothing over.
                        std::thread::sleep(Duration::from_secs(2));
                        return None;
                    }
                    let signal = stop.clone();
                    std::thread::spawn(move || {
                        std::thread::sleep(Duration::from_millis(300));
                        signal.store(true, Ordering::Relaxed);
                    });
                    let began = Instant::now();
                    let e = run
                        .hand_over(7, Vec::new(), Duration::from_secs(60), &stop)
                        .unwrap_err();
                    Some((e, began.elapsed()))
                })
            })
            .collect();
        let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let (e, took) = results[0].clone().expect("node 0's handover");
        assert!(e.contains("stopped while waiting for the hand-offs of epoch 7"), "{e}");
        assert!(took < Duration::from_secs(5), "stopped after {took:?}");
    }

    /// A spare's rounds: it ends a handover with the node that has the
    /// shard (the layout from its `ENDED`), learns that a run finished
    /// rather than failed, and an `ENDED` missing a row of the sender's
    /// shards fails the run.
    #[test]
    fn a_spare_follows_handovers_and_ends() {
        let spec = loopback_spec(26_000, &[1, 0], Duration::from_millis(5), Duration::from_secs(2));
        let moved = Layout::placed_on(2, vec![1]).unwrap().with_version(1);
        let threads: Vec<_> = (0..2u16)
            .map(|i| {
                let (spec, moved) = (spec.clone(), moved.clone());
                std::thread::spawn(move || {
                    let mut c = Control::start(spec.clone(), i, 42).unwrap();
                    let stop = AtomicBool::new(false);
                    let join =
                        |c: &mut Control, layout: &Layout| c.join(survey(&[], 0), layout, &stop).unwrap().unwrap();
                    // Round 1: shard 0 goes from node 0 to node 1, a spare.
                    let run = join(&mut c, &spec.layout());
                    if i == 0 {
                        run.ended_locally(7, &moved);
                    } else {
                        assert_eq!(run.spare_round(&stop, || Ok(())), Spare::Handover(7, moved.clone()));
                    }
                    let deadline = Instant::now() + Duration::from_secs(10);
                    while !run.all_ended(7) {
                        assert!(Instant::now() < deadline, "node {i}: the spare never ended");
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    run.hand_over(7, Vec::new(), Duration::from_secs(10), &stop).unwrap();
                    drop(run);
                    // Round 2: node 0 is the spare; node 1's run finishes.
                    let run = join(&mut c, &moved);
                    if i == 1 {
                        run.finish();
                    } else {
                        assert_eq!(run.spare_round(&stop, || Ok(())), Spare::Finished);
                    }
                    drop(run);
                    // Round 3: node 1 says it ended without its shard's row.
                    let run = join(&mut c, &moved);
                    if i == 1 {
                        let next = (2u64, 2u16, vec![0u16], Vec::<u16>::new());
                        run.tell_all(&control_frame(ENDED, &(9u64, Vec::<(ShardId, Vec<u64>)>::new(), next)));
                        std::thread::sleep(Duration::from_millis(200));
                    } else {
                        match run.spare_round(&stop, || Ok(())) {
                            Spare::Failed(why) => assert!(why.contains("bad end notice"), "{why}"),
                            other => panic!("{other:?}"),
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }

    /// Two spares and a node running the shard: once it finishes, both
    /// spares end (neither waits for the other), and nobody's run failed
    /// (the spares closing after its FINISHED is not a failure to it).
    #[test]
    fn spares_end_when_the_node_with_shards_finishes() {
        let spec = loopback_spec(28_200, &[1, 0, 0], Duration::from_millis(5), Duration::from_secs(2));
        let threads: Vec<_> = (0..3u16)
            .map(|i| {
                let spec = spec.clone();
                std::thread::spawn(move || {
                    let mut c = Control::start(spec.clone(), i, 42).unwrap();
                    let stop = AtomicBool::new(false);
                    let run = c.join(survey(&[], 0), &spec.layout(), &stop).unwrap().unwrap();
                    if i == 0 {
                        run.finish();
                        // The spares close once they heard it.
                        std::thread::sleep(Duration::from_millis(300));
                    } else {
                        assert_eq!(run.spare_round(&stop, || Ok(())), Spare::Finished, "node {i}");
                    }
                    assert!(!run.failure.is_failed(), "node {i}: {:?}", run.failure.reason());
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }

    /// Hand-offs of many megabytes cross while heartbeats run every
    /// millisecond (a heartbeat written into a long frame would break its
    /// checksum), the node with less to send finishes first and closes
    /// (its peer must still get everything), and rounds follow each other.
    #[test]
    fn large_hand_offs_cross_between_heartbeats_and_rounds() {
        let spec = loopback_spec(23_300, &[1, 1], Duration::from_millis(1), Duration::from_secs(2));
        let blob = |shard: u16, len: usize| -> Vec<u8> {
            (0..len).map(|i| (i as u64 * 31 + u64::from(shard)) as u8).collect()
        };
        let threads: Vec<_> = (0..2u16)
            .map(|i| {
                let spec = spec.clone();
                std::thread::spawn(move || {
                    let mut c = Control::start(spec.clone(), i, 42).unwrap();
                    let stop = AtomicBool::new(false);
                    let mut got = Vec::new();
                    for round in 1..=3u64 {
                        let run = c.join(survey(&[], 0), &spec.layout(), &stop).unwrap().unwrap();
                        // Node 0 sends 24 MB as shard 1, node 1 sends 3 MB
                        // as shard 0; each keeps nothing.
                        let (to, shard, len) = if i == 0 { (1, 1, 24 << 20) } else { (0, 0, 3 << 20) };
                        let incoming = run
                            .hand_over(
                                round,
                                vec![(to, shard, blob(shard, len))],
                                Duration::from_secs(30),
                                &stop,
                            )
                            .unwrap_or_else(|e| panic!("node {i}, round {round}: {e}"));
                        assert!(!run.failure.is_failed(), "node {i}: {:?}", run.failure.reason());
                        got.push(incoming);
                    }
                    got
                })
            })
            .collect();
        for (i, t) in threads.into_iter().enumerate() {
            let got = t.join().unwrap();
            for incoming in got {
                let (shard, len) = if i == 0 { (0, 3 << 20) } else { (1, 24 << 20) };
                assert_eq!(incoming.len(), 1, "node {i}");
                assert!(incoming[0] == blob(shard, len), "node {i}: the hand-off arrived whole");
            }
        }
    }
}
