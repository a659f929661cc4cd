//! One shard: a deterministic state machine that runs the epoch protocol.
//!
//! The shard takes inputs (client requests, batches of peer messages, ticks,
//! "log durable") and produces outputs (peer messages, log batches,
//! replies). It has no thread, clock, disk or socket: a driver moves its
//! messages (the production runtime over a channel mesh, the simulator in
//! one thread in a seeded order), which is what makes every run replayable.
//!
//! An epoch, seen from one shard (protocol.md §2–§5):
//!
//! 1. **Seal**: take pending requests, assign tids `lc * n + sid`; start the
//!    roots of its transactions.
//! 2. **Phase 1**: run invocations against the epoch-start state, buffering
//!    writes and recording accesses. Each invocation replies to its parent
//!    once its body returned and all its children replied, so a root's reply
//!    means its whole call graph finished (exact, one message per call).
//!    When all its roots are done a shard broadcasts `Done1` with its
//!    logic-aborted tids.
//! 3. **Check**: with every `Done1` in, each shard computes reservations and
//!    flags for the entities it owns and broadcasts them (`Flags`); with all
//!    flags in, every shard applies the same rule to the ORed flags: commit
//!    phase-1 winners, build tid-ordered lock queues for the rest. If
//!    nothing falls back on any shard (every shard sees that in the same
//!    flags), the epoch ends here: no phase 2, no `Done2`.
//! 4. **Phase 2**: coordinators re-run their fallback roots; an invocation
//!    runs once its transaction heads its entity's queue. When a root is
//!    done its coordinator sends `Finish` (apply or discard, release) to every
//!    participant. A re-execution that leaves its recorded set is discarded.
//! 5. **Phase 3**: with every `Done2` in (each lists its drifted tids), the
//!    drifted transactions run one at a time in tid order, with no locks
//!    (nothing else runs), each passing `Next` on when it is finished. The
//!    protocol note reschedules them to the next epoch instead; running them
//!    here keeps their priority and determinism, and a hot counter whose
//!    value decides the keys written (TPC-C's D_NEXT_O_ID) no longer limits
//!    commits to one per district per epoch.
//! 6. **End**: after phase 3 the epoch is over; its replies leave once its
//!    input is durable on every shard.
//!
//! # Layout
//!
//! `Shard` is one struct whose methods live in the submodule of their job.
//! Each submodule defines the sub-struct of state its job keeps (`Check`
//! in `phase1`, `Gate` in `release`, …); hand-overs write into a
//! neighbour's (`Done2` fills the phase-3 queue and the snapshot vote, the
//! epoch's end resets them all). What every job reads (epoch, stage,
//! clock, the coordinated transactions, counters) stays in `Machine` here.
//! Sub-structs are held by value: a field of a field is an offset, so the
//! grouping costs nothing on the hot path.
//!
//! - `exec`: the host functions run against (store, epoch tables, outbox).
//! - `task`: invocations: admission, start, poll, completion, replies.
//! - `txn`: the transactions this shard coordinates, and their status.
//! - `lifecycle`: an epoch's cut, seal, start and end; its size; replay.
//! - `inbox`: which messages are handled now, which wait for a later stage.
//! - `phase1`: the `Done1` and `Flags` barriers and the commit decision.
//! - `phase2`: admission through lock queues, `Finish`, `Done2`.
//! - `phase3`: the serial run of drifted transactions.
//! - `clients`: the exactly-once client table.
//! - `snapshot`: copying the state out while epochs run; restoring it.
//! - `moves`: partition moves: the map switch at an epoch's end and the
//!   transfer of a moved partition's entities to its new owner.
//! - `release`: replies held until their epoch is durable everywhere.

mod clients;
mod exec;
mod handoff;
mod inbox;
mod lifecycle;
mod moves;
mod phase1;
mod phase2;
mod phase3;
mod release;
mod snapshot;
mod task;
mod txn;

pub use clients::{CLIENTS_MAX, OUTCOMES_PER_CLIENT_MAX, client_home};
pub use handoff::Handoff;
pub use snapshot::Checkpoint;

use crate::abort::Abort;
use crate::app::{App, FnKind};
use crate::config::{Batch, Config, Reply as ClientReply, Request, SnapshotChunk, Token};
use crate::epoch::Tables;
use crate::history::EpochRecord;
use crate::ids::{Address, Epoch, SHARDS_MAX, ShardId, partition_owner};
use crate::key::Key;
use crate::layout::{Handover, Layout, NODES_MAX};
use crate::message::{Message, Phase};
use crate::partition_map::{Move, PartitionMap};
use crate::store::Store;
use crate::value::Value;
use clients::Clients;
use exec::{Exec, ExecState};
use phase1::Check;
use phase2::Fallback;
use phase3::SerialRun;
use release::{Gate, ReplyTo};
use snapshot::Snapshots;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;
use task::Tasks;
use txn::Coordinated;

/// Where the shard is in the current epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    /// Between epochs.
    Idle,
    /// Phase 1 running; this shard's roots are not all done.
    Exec1,
    /// Sent `Done1`; waiting for every shard's.
    Wait1,
    /// Sent `Flags`; waiting for every shard's.
    Check,
    /// Phase 2 running; this shard's fallback roots are not all done.
    Exec2,
    /// Sent `Done2`; waiting for every shard's.
    Wait2,
    /// Phase 3: drifted transactions re-run one at a time.
    Exec3,
}

impl Stage {
    /// Every stage in order: `stage as usize` is its index here, so a
    /// driver keeping a figure per stage sizes its table by this.
    pub const ALL: [Stage; 7] = [
        Stage::Idle,
        Stage::Exec1,
        Stage::Wait1,
        Stage::Check,
        Stage::Exec2,
        Stage::Wait2,
        Stage::Exec3,
    ];

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Idle => "idle",
            Stage::Exec1 => "exec1",
            Stage::Wait1 => "wait1",
            Stage::Check => "check",
            Stage::Exec2 => "exec2",
            Stage::Wait2 => "wait2",
            Stage::Exec3 => "exec3",
        }
    }

    /// The stage in which `phase`'s invocations run: a message of that
    /// phase waits while the shard is at an earlier stage.
    fn running(phase: Phase) -> Stage {
        match phase {
            Phase::Optimistic => Stage::Exec1,
            Phase::Fallback => Stage::Exec2,
            Phase::Serial => Stage::Exec3,
        }
    }
}

// `Stage::ALL` is in declaration order (a stage indexes it by its number).
const _: () = {
    let mut i = 0;
    while i < Stage::ALL.len() {
        assert!(Stage::ALL[i] as usize == i);
        i += 1;
    }
};

/// Counters a driver can report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub epochs: u64,
    /// Transactions coordinated here that committed.
    pub committed: u64,
    /// ... that aborted by their own logic.
    pub aborted: u64,
    /// ... that needed the phase-2 re-execution.
    pub reexecuted: u64,
    /// ... whose re-execution left its recorded set and ran in phase 3.
    pub serialized: u64,
    /// Invocations run here (both phases).
    pub invocations: u64,
    /// Snapshots begun.
    pub snapshots: u64,
    /// Epochs that ended at their flags: no transaction fell back on any
    /// shard, so no phase 2 and no `Done2` barrier (the same count on
    /// every shard).
    pub without_phase2: u64,
}

/// Everything a shard wants the driver to do.
#[derive(Default)]
pub struct Outputs {
    /// Message batches per destination shard (the shard's own slot stays empty).
    pub messages: Vec<Vec<Message>>,
    /// Answers to the requests submitted here (`token` is the submit's).
    pub replies: Vec<ClientReply>,
    /// Outcomes of transactions replayed from the log (`token` is the tid).
    /// No client waits for them — their connections died with the crash,
    /// and a retry is answered from the client table — so a driver only
    /// checks or drops them; kept apart from `replies`, a replayed tid can
    /// never be taken for a live request's token.
    pub replayed: Vec<ClientReply>,
    pub log: Vec<Batch>,
    pub history: Vec<EpochRecord>,
    pub snapshots: Vec<SnapshotChunk>,
    /// Shards handed to another node at an epoch's end, in the order
    /// decided (every shard reports the same ones; see `layout`).
    pub handovers: Vec<crate::layout::Switched>,
}

impl Outputs {
    pub fn is_empty(&self) -> bool {
        self.messages.iter().all(Vec::is_empty)
            && self.replies.is_empty()
            && self.replayed.is_empty()
            && self.log.is_empty()
    }
}

/// What every job of the epoch machine reads: where the epoch is, the
/// shard's clock, the transactions it coordinates.
struct Machine {
    epoch: Epoch,
    stage: Stage,
    /// The shard's clock: the largest `tick` so far.
    now_us: u64,
    /// This epoch's transactions sequenced here; a root's `Parent::Root`
    /// index points into it.
    coords: Vec<Coordinated>,
    /// Roots of the current phase not yet done here.
    running: usize,
    /// Messages of a later stage than ours, in arrival order.
    deferred: VecDeque<(ShardId, Message)>,
    stats: Stats,
    /// Invocations run here per operator and partition (both phases):
    /// the load a rebalance evens out (`balance::plan`).
    partition_invocations: Vec<Vec<u64>>,
    record: Option<EpochRecord>,
    /// The epoch's time as logged (its batch's `now_us` here, live or
    /// replayed): what snapshot votes read, so that they, and the moves
    /// and handovers they hold, are a function of the log.
    epoch_now_us: u64,
}

/// One shard of the engine.
pub struct Shard {
    exec: Rc<Exec>,
    config: Config,
    m: Machine,
    /// The sequencer: pending requests, replay queue, epoch size.
    seq: lifecycle::Sequencer,
    /// Phase 1's barriers and the decision's inputs.
    check: Check,
    /// Phase 2's parked invocations and `Done2` barrier.
    fallback: Fallback,
    /// Phase 3's queue.
    serial: SerialRun,
    clients: Clients,
    gate: Gate,
    snap: Snapshots,
    moves: moves::Moves,
    /// Which node runs each shard (see `layout`).
    layout: Layout,
    /// Handed to another node at the end of the last epoch (`handoff`):
    /// whether a snapshot of that epoch was due.
    departing: Option<bool>,
    tasks: Tasks,
    outputs: Outputs,
    /// Emptied message batches, to carry outgoing ones.
    spare: Vec<Vec<Message>>,
}

/// Emptied batches a shard keeps for reuse.
const SPARE_BATCHES_MAX: usize = 64;

impl Shard {
    /// A shard with empty state, before epoch 1.
    pub fn new(app: Arc<App>, config: Config, id: ShardId, n_shards: u16) -> Shard {
        assert!(n_shards >= 1 && n_shards as usize <= SHARDS_MAX, "{n_shards} shards");
        assert!(id < n_shards);
        assert!(config.epoch_txns_max >= 1);
        assert!(config.step_messages_max >= 1);
        let map = PartitionMap::new(&app, n_shards);
        let mut store = Store::new(&app, id, &map);
        store.set_snapshots(config.snapshot_interval_us > 0);
        let tasks = Tasks::new(&app);
        let partition_invocations = app
            .operators()
            .map(|(_, op)| vec![0; op.partitions() as usize])
            .collect();
        let epoch_cap = if config.epoch_txns_adaptive {
            config.epoch_txns_max.min(crate::config::EPOCH_TXNS_START)
        } else {
            config.epoch_txns_max
        };
        let exec = Rc::new(Exec {
            limits: config.limits,
            app,
            id,
            n_shards,
            map: RefCell::new(map),
            st: RefCell::new(ExecState {
                store,
                tables: Tables::new(),
                phase: Phase::Optimistic,
                epoch: 0,
                local: VecDeque::new(),
                local_warmed: 0,
                outbox: (0..n_shards).map(|_| Vec::new()).collect(),
                step: 0,
                scan_slots: Vec::new(),
            }),
            scan_rows: RefCell::new(Vec::new()),
        });
        Shard {
            exec,
            config,
            m: Machine {
                epoch: 0,
                stage: Stage::Idle,
                now_us: 0,
                coords: Vec::new(),
                running: 0,
                deferred: VecDeque::new(),
                stats: Stats::default(),
                partition_invocations,
                record: None,
                epoch_now_us: 0,
            },
            seq: lifecycle::Sequencer::new(epoch_cap),
            check: Check::new(),
            fallback: Fallback::new(),
            serial: SerialRun::new(),
            clients: Clients::new(),
            gate: Gate::new(n_shards),
            snap: Snapshots::new(),
            moves: moves::Moves::new(),
            layout: Layout::single(n_shards),
            departing: None,
            tasks,
            outputs: Outputs::default(),
            spare: Vec::new(),
        }
    }

    pub fn id(&self) -> ShardId {
        self.exec.id
    }

    pub fn n_shards(&self) -> u16 {
        self.exec.n_shards
    }

    pub fn app(&self) -> &Arc<App> {
        &self.exec.app
    }

    pub fn epoch(&self) -> Epoch {
        self.m.epoch
    }

    pub fn stage(&self) -> Stage {
        self.m.stage
    }

    pub fn stats(&self) -> Stats {
        self.m.stats
    }

    /// Invocations of `op`'s functions run on this shard so far, per
    /// partition (a partition this shard never owned counts 0): the load
    /// `balance::plan` evens out.
    pub fn partition_invocations(&self, op: crate::OpId) -> &[u64] {
        &self.m.partition_invocations[op.0 as usize]
    }

    /// A one-line account of the shard's machine, for diagnosing a stuck run.
    pub fn describe(&self) -> String {
        format!(
            "shard {} epoch {} {:?}: {} roots running, {} tasks live, {} deferred, {} pending, serial {}/{}, {} parked, done1 {} flags {} done2 {}, held {:?}, replay {:?}, durable {} {:?}, {}",
            self.exec.id,
            self.m.epoch,
            self.m.stage,
            self.m.running,
            self.tasks.live(),
            self.m.deferred.len(),
            self.seq.pending.len(),
            self.serial.index,
            self.serial.queue.len(),
            self.fallback.parked.iter().filter(|p| p.is_some()).count(),
            self.check.done1,
            self.check.flags_in,
            self.fallback.done2,
            self.gate.held.iter().map(|(e, r)| (*e, r.len())).collect::<Vec<_>>(),
            self.seq.replay.as_ref().map(VecDeque::len),
            self.gate.durable_local,
            self.gate.durable_peers,
            self.moves.describe(),
        )
    }

    /// Whether nothing is running, waiting or held here.
    pub fn is_quiet(&self) -> bool {
        self.m.stage == Stage::Idle
            && !self.has_work()
            && self.outputs.snapshots.is_empty()
            && self.seq.pending.is_empty()
            && self.gate.held.is_empty()
            && self.seq.replay.as_ref().is_none_or(VecDeque::is_empty)
            && !self.moves.is_waiting()
            && !self.exec.map.borrow().is_moving()
            && self.layout.queued().is_empty()
            && self.departing.is_none()
    }

    /// Sets which node runs each shard, before anything ran here (the
    /// default is one node running every shard). A snapshot restored later
    /// brings its own layout.
    pub fn set_layout(&mut self, layout: Layout) {
        assert_eq!(self.m.epoch, 0, "set_layout after the shard ran");
        assert_eq!(layout.n_shards(), self.exec.n_shards, "a layout of other shards");
        self.layout = layout;
    }

    /// Which node runs each shard, as of the last epoch's end.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Checks an entry of this shard's log before it is replayed: as
    /// [`Shard::validate_logged`], and a move or handover against the
    /// shard and node counts.
    pub fn check_logged(&self, request: &Request) -> Result<(), Abort> {
        Shard::validate_logged(&self.exec.app, request)?;
        self.check_counts(request)
    }

    /// A move or handover (already validated) against this cluster's shard
    /// and node counts; any other request passes.
    fn check_counts(&self, request: &Request) -> Result<(), Abort> {
        if let Some(Ok(m)) = Move::of(request) {
            m.check(&self.exec.app, self.exec.n_shards).map_err(Abort::unknown)?;
        }
        if let Some(Ok(h)) = Handover::of(request) {
            h.check(self.exec.n_shards, self.layout.nodes())
                .map_err(Abort::unknown)?;
        }
        Ok(())
    }

    /// Checks an entry of a logged batch: a request as [`Shard::validate`]
    /// checks it, or a shard's logged snapshot interval (`crate::interval`).
    pub fn validate_logged(app: &App, request: &Request) -> Result<(), Abort> {
        match crate::interval::SnapshotInterval::of(request) {
            Some(i) => i.map(|_| ()).map_err(Abort::unknown),
            None => Shard::validate(app, request),
        }
    }

    /// Checks a request before it is accepted: the function exists, runs on
    /// that kind of address, and the partition is in range (a shard's
    /// logged snapshot interval is none).
    pub fn validate(app: &App, request: &Request) -> Result<(), Abort> {
        let f = request.function;
        if f.op.0 as usize >= app.operator_count() {
            return Err(Abort::unknown(format!("no operator {}", f.op.0)));
        }
        if let Some(m) = Move::of(request) {
            // The shard count is checked where it is known (`submit`).
            let m = m.map_err(Abort::unknown)?;
            return m.check(app, SHARDS_MAX as u16).map(|_| ()).map_err(Abort::unknown);
        }
        if crate::interval::SnapshotInterval::of(request).is_some() {
            // Only in a log, put there by the shard itself: never a request
            // to run (`Shard::validate_logged`).
            return Err(Abort::unknown(
                "a snapshot interval is logged by a shard itself, not sent as a request",
            ));
        }
        if let Some(h) = Handover::of(request) {
            // The shard and node counts are checked where known (`submit`).
            let h = h.map_err(Abort::unknown)?;
            return h
                .check(SHARDS_MAX as u16, NODES_MAX as u16)
                .map(|_| ())
                .map_err(Abort::unknown);
        }
        let op = app.operator_info(f.op);
        if f.index as usize >= op.functions().count() {
            return Err(Abort::unknown(format!("no function {} on {}", f.index, op.name())));
        }
        match (&request.address, app.function_info(f).kind()) {
            (Address::Entity(_), FnKind::Entity) => Ok(()),
            (Address::Partition(p), FnKind::Partition) if *p < op.partitions() => Ok(()),
            (Address::Partition(p), FnKind::Partition) => Err(Abort::unknown(format!(
                "{} has {} partitions, not {}",
                op.name(),
                op.partitions(),
                p + 1
            ))),
            (_, kind) => Err(Abort::unknown(format!("{} is a {kind:?} function", app.describe(f)))),
        }
    }

    /// Accepts a client request for sequencing. Refused (with a `Rejected`
    /// abort, nothing run) when too many are waiting. A request with a
    /// client id is sequenced by that client's home shard, which keeps its
    /// outcomes: a retry gets the first attempt's outcome and never runs
    /// twice; a retry of a forgotten seq gets a `Forgotten` abort.
    pub fn submit(&mut self, token: Token, mut request: Request) -> Result<(), Abort> {
        Shard::validate(&self.exec.app, &request)?;
        self.check_counts(&request)?;
        // A move's pace is logged with it: one naming none gets this shard's.
        request = Move::with_default_share(request, self.config.move_share());
        assert!(self.seq.replay.is_none(), "submit while replaying");
        if let Some(c) = request.client {
            let home = client_home(c.client, self.exec.n_shards);
            if home != self.exec.id {
                let origin = self.exec.id;
                let mut st = self.exec.st.borrow_mut();
                self.exec
                    .route(&mut st, home, Message::Submit { origin, token, request });
                return Ok(());
            }
        }
        self.accept(ReplyTo::Local(token), request)?;
        self.run_local();
        Ok(())
    }

    /// Without `Config::spare_nodes` (a runtime that runs no node without
    /// shards): refuses a handover that would
    /// leave a node with none, by the layout after those already queued.
    /// (Two handovers sequenced in one epoch can still do it together.)
    /// A handover or leave against the layout as this shard holds it now
    /// (checked where it is accepted, once known to be no retry):
    /// one the decision would skip is refused with a reason rather than
    /// answered as if made (the decision, at the epoch's end, still skips
    /// what the layout then refuses).
    pub(super) fn check_handover_now(&self, h: Handover) -> Result<(), Abort> {
        if self.layout.has_left(h.node) {
            return Err(Abort::unknown(format!("node {} left the cluster", h.node)));
        }
        // Handovers waiting (a partition move under way) apply first.
        let queued = self.layout.queued();
        if queued.iter().any(|(_, q)| q.is_leave() && q.node == h.node) {
            return Err(Abort::unknown(format!(
                "node {} is leaving the cluster (its leave waits for a partition move)",
                h.node
            )));
        }
        if h.is_leave() && queued.iter().any(|(_, q)| !q.is_membership() && q.node == h.node) {
            return Err(Abort::unknown(format!(
                "a handover to node {} waits for a partition move: it would run a shard",
                h.node
            )));
        }
        if h.is_join() || self.layout.is_absent(h.node) {
            return self.check_join_now(h);
        }
        if !h.is_leave() {
            return match self.config.spare_nodes {
                true => Ok(()),
                false => self.check_leaves_no_node_empty(h),
            };
        }
        if !self.config.spare_nodes {
            return Err(Abort::unknown(
                "a node leaves only a cluster that runs spare nodes (this runtime does not)",
            ));
        }
        let runs: Vec<ShardId> = self.layout.shards_of(h.node).collect();
        if !runs.is_empty() {
            return Err(Abort::unknown(format!(
                "node {} runs shards {runs:?}: hand them away first (styx node drain {})",
                h.node, h.node
            )));
        }
        Ok(())
    }

    /// A join, or a handover or leave naming a node not yet joined.
    fn check_join_now(&self, h: Handover) -> Result<(), Abort> {
        if !self.config.spare_nodes {
            return Err(Abort::unknown(
                "a node joins only a cluster that runs spare nodes (this runtime does not)",
            ));
        }
        let absent = self.layout.is_absent(h.node);
        let joining = self
            .layout
            .queued()
            .iter()
            .any(|(_, q)| q.is_join() && q.node == h.node);
        match (h.is_join(), h.is_leave()) {
            (true, _) if absent => Ok(()),
            (true, _) => Err(Abort::unknown(format!("node {} is a member already", h.node))),
            // Queued behind its join (a partition move under way), it
            // applies after it.
            (false, false) if joining => Ok(()),
            (false, false) => Err(Abort::unknown(format!(
                "node {} has not joined the cluster: add it first (styx node add {})",
                h.node, h.node
            ))),
            (false, true) => Err(Abort::unknown(format!(
                "node {} has not joined the cluster: it cannot leave",
                h.node
            ))),
        }
    }

    fn check_leaves_no_node_empty(&self, h: Handover) -> Result<(), Abort> {
        let mut node_of: Vec<u16> = (0..self.exec.n_shards).map(|s| self.layout.node_of(s)).collect();
        for (_, q) in self.layout.queued().iter().filter(|(_, q)| !q.is_membership()) {
            node_of[usize::from(q.shard)] = q.node;
        }
        let from = node_of[usize::from(h.shard)];
        node_of[usize::from(h.shard)] = h.node;
        if from != h.node && !node_of.contains(&from) {
            return Err(Abort::unknown(format!(
                "handing shard {} to node {} would leave node {from} without shards, which this runtime does not run",
                h.shard, h.node
            )));
        }
        Ok(())
    }

    /// Advances the shard's clock (µs since the Unix epoch).
    pub fn tick(&mut self, now_us: u64) {
        self.m.now_us = self.m.now_us.max(now_us);
        self.maybe_start();
        self.run_local();
    }

    /// Handles a batch of messages from shard `from`. The emptied vector is
    /// kept to carry a later outgoing batch: batches cross between shards in
    /// both directions, so their allocations circulate instead of regrowing.
    pub fn receive(&mut self, from: ShardId, mut batch: Vec<Message>) {
        inbox::warm(&self.exec.st.borrow().store, batch.iter());
        for msg in batch.drain(..) {
            self.handle(from, msg);
        }
        if self.spare.len() < SPARE_BATCHES_MAX && batch.capacity() > 0 {
            self.spare.push(batch);
        }
        self.run_local();
    }

    /// Moves everything the shard produced into `out`. The driver must have
    /// taken the previous batches out of `out.messages`.
    pub fn drain(&mut self, out: &mut Outputs) {
        let n = self.exec.n_shards as usize;
        if out.messages.len() != n {
            out.messages = (0..n).map(|_| Vec::new()).collect();
        }
        {
            let mut st = self.exec.st.borrow_mut();
            for (to, msgs) in st.outbox.iter_mut().enumerate() {
                if msgs.is_empty() {
                    continue;
                }
                let fresh = self.spare.pop().unwrap_or_default();
                let full = std::mem::replace(msgs, fresh);
                let old = std::mem::replace(&mut out.messages[to], full);
                assert!(old.is_empty(), "the driver left a batch for shard {to} undelivered");
                if old.capacity() > 0 && self.spare.len() < SPARE_BATCHES_MAX {
                    self.spare.push(old);
                }
            }
        }
        std::mem::swap(&mut out.replies, &mut self.outputs.replies);
        std::mem::swap(&mut out.replayed, &mut self.outputs.replayed);
        std::mem::swap(&mut out.log, &mut self.outputs.log);
        std::mem::swap(&mut out.history, &mut self.outputs.history);
        std::mem::swap(&mut out.snapshots, &mut self.outputs.snapshots);
        out.handovers.append(&mut self.outputs.handovers);
    }

    /// Whether a snapshot's copy is under way (each [`Shard::step`] copies
    /// a share of it).
    pub fn is_snapshotting(&self) -> bool {
        self.snap.is_running()
    }

    /// The snapshot interval this shard votes by (µs; 0: none): the one its
    /// log set last (restored with a snapshot, replayed, or logged by this
    /// run at its first batch), else the configured one (`crate::interval`).
    pub fn snapshot_interval_us(&self) -> u64 {
        self.snap.interval_us.unwrap_or(self.config.snapshot_interval_us)
    }

    /// Whether local work is waiting for [`Shard::step`].
    pub fn has_work(&self) -> bool {
        !self.exec.st.borrow().local.is_empty() || self.snap.is_running() || self.can_start()
    }

    /// Handles the next share of local work (see `Config::step_messages_max`)
    /// and of the running snapshot's copying.
    pub fn step(&mut self) {
        self.maybe_start();
        self.run_local();
        self.snapshot_step(snapshot::SNAPSHOT_SLOTS_PER_STEP);
    }

    /// Every live entity's `(operator, key, value)` on this shard.
    pub fn for_each_entity(&self, mut f: impl FnMut(crate::OpId, &Key, &Value)) {
        let st = self.exec.st.borrow();
        let map = self.exec.map.borrow();
        for (op, partition, key, value) in st.store.iter() {
            // Not a partition that moved away and is still being deleted.
            if map.owner(op, partition) == self.exec.id {
                f(op, key, value);
            }
        }
    }

    /// The number of live entities on this shard.
    pub fn entity_count(&self) -> usize {
        self.exec.st.borrow().store.live() - self.retiring_entities()
    }

    /// Sets an entity's state outside any transaction (bulk loading before
    /// the first epoch, recovery). The key must belong to this shard.
    pub fn load(&mut self, op: crate::OpId, key: &Key, value: Option<Value>) {
        assert_eq!(self.m.stage, Stage::Idle, "load while an epoch runs");
        let partitions = self.exec.app.operator_info(op).partitions();
        let partition = key.partition(partitions);
        assert_eq!(
            self.exec.map.borrow().owner(op, partition),
            self.exec.id,
            "key {key} loaded on the wrong shard"
        );
        self.exec.st.borrow_mut().store.load(op, partition, key, value, true);
    }

    /// The shard that owns entity `key` of `op` by the default rule (before
    /// any partition moved: preloading, a client's first guess).
    pub fn owner(app: &App, n_shards: u16, op: crate::OpId, key: &Key) -> ShardId {
        partition_owner(key.partition(app.operator_info(op).partitions()), n_shards)
    }

    /// The partition map now (owners change at the end of the epoch in
    /// which a move's copy completes; the moves under way are in it too).
    pub fn partition_map(&self) -> PartitionMap {
        self.exec.map.borrow().clone()
    }

    /// The partition map's version now (one more at every epoch where
    /// moves switched): cheap, to tell whether the map changed.
    pub fn partition_map_version(&self) -> u64 {
        self.exec.map.borrow().version()
    }

    /// The shard that owns entity `key` of `op` by the map now.
    pub fn owner_now(&self, op: crate::OpId, key: &Key) -> ShardId {
        let partition = key.partition(self.exec.app.operator_info(op).partitions());
        self.exec.map.borrow().owner(op, partition)
    }
}
