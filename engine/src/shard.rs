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
//!    phase-1 winners, build tid-ordered lock queues for the rest.
//! 4. **Phase 2**: coordinators re-run their fallback roots; an invocation
//!    runs once its transaction heads its entity's queue. When a root is
//!    done its coordinator sends `Finish` (apply or discard, release) to every
//!    participant. A re-execution that leaves its recorded set is discarded.
//! 6. **Phase 3**: with every `Done2` in (each lists its drifted tids), the
//!    drifted transactions run one at a time in tid order, with no locks
//!    (nothing else runs), each passing `Next` on when it is finished. The
//!    protocol note reschedules them to the next epoch instead; running them
//!    here keeps their priority and determinism, and a hot counter whose
//!    value decides the keys written (TPC-C's D_NEXT_O_ID) no longer limits
//!    commits to one per district per epoch.
//! 5. **End**: after phase 3 the epoch is over; its replies leave once its
//!    input is durable on every shard.

use crate::abort::Abort;
use crate::app::{App, FnKind};
use crate::config::{Batch, Config, Durability, Outcome, Reply as ClientReply, Request, SnapshotChunk, Token};
use crate::ctx::{CallLimits, Ctx, Frame, Host, NO_INDEX, root_seed};
use crate::epoch::{Tables, Write};
use crate::history::EpochRecord;
use crate::ids::{Address, Epoch, FnId, SHARDS_MAX, ShardId, ShardSet, Tid, partition_owner};
use crate::key::Key;
use crate::key::partition_of;
use crate::message::{Invoke, Message, Parent, Phase, Reply, flags};
use crate::store::{Map, Store, TidMap, new_map, new_tid_map};
use crate::value::Value;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

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
}

/// Everything a shard wants the driver to do.
#[derive(Default)]
pub struct Outputs {
    /// Message batches per destination shard (the shard's own slot stays empty).
    pub messages: Vec<Vec<Message>>,
    pub replies: Vec<ClientReply>,
    pub log: Vec<Batch>,
    pub history: Vec<EpochRecord>,
    pub snapshots: Vec<SnapshotChunk>,
}

impl Outputs {
    pub fn is_empty(&self) -> bool {
        self.messages.iter().all(Vec::is_empty) && self.replies.is_empty() && self.log.is_empty()
    }
}

// ---------------------------------------------------------------------------
// The host: what running functions see of the shard.

struct ExecState {
    store: Store,
    tables: Tables,
    phase: Phase,
    epoch: Epoch,
    local: VecDeque<Message>,
    outbox: Vec<Vec<Message>>,
    /// In phase 3, the serial queue position of the running transaction.
    step: u32,
}

struct Exec {
    app: Arc<App>,
    limits: CallLimits,
    id: ShardId,
    n_shards: u16,
    st: RefCell<ExecState>,
}

impl Exec {
    fn phase_index(phase: Phase) -> usize {
        match phase {
            Phase::Optimistic => 0,
            Phase::Fallback => 1,
            Phase::Serial => 2,
        }
    }

    /// The partition, owner and key hash of an address.
    #[inline]
    fn locate(&self, function: FnId, address: &Address) -> (u32, ShardId, u64) {
        let (partition, hash) = match address {
            Address::Entity(key) => {
                let hash = key.hash64();
                (
                    partition_of(hash, self.app.operator_info(function.op).partitions()),
                    hash,
                )
            }
            Address::Partition(p) => (*p, 0),
        };
        (partition, partition_owner(partition, self.n_shards), hash)
    }

    fn route(&self, st: &mut ExecState, to: ShardId, msg: Message) {
        if to == self.id {
            st.local.push_back(msg);
        } else {
            st.outbox[to as usize].push(msg);
        }
    }
}

impl Host for Exec {
    fn app(&self) -> &App {
        &self.app
    }

    fn limits(&self) -> CallLimits {
        self.limits
    }

    fn read(&self, frame: &Frame, f: &mut dyn FnMut(Option<&Value>)) -> Result<(), Abort> {
        let mut guard = self.st.borrow_mut();
        let st = &mut *guard;
        let phase = Exec::phase_index(st.phase);
        let a = &mut st.tables.accesses[phase][frame.access.get() as usize];
        match &a.write {
            Write::Put(v) => f(Some(v)),
            Write::Delete => f(None),
            Write::None => {
                a.read = true;
                let slot = st.tables.touched[a.touched as usize].slot;
                f(st.store.entries[slot as usize].value.as_ref());
            }
        }
        Ok(())
    }

    fn write(&self, frame: &Frame, value: Option<Value>) -> Result<(), Abort> {
        let mut guard = self.st.borrow_mut();
        let st = &mut *guard;
        let phase = Exec::phase_index(st.phase);
        let index = frame.access.get() as usize;
        if st.phase == Phase::Fallback {
            // A write into a partition that a fallback transaction scans must
            // be ordered against that scan: only writers recorded in phase 1
            // are in the partition's queue.
            let part_slot = st.tables.accesses[phase][index].part_slot;
            if let Some(p) = st.tables.touched_ordinal(&st.store, part_slot) {
                let q = st.tables.touched[p as usize].queue;
                if q != NO_INDEX && !st.tables.in_queue(q, frame.tid) {
                    frame.force(Abort::drift());
                    return Err(Abort::drift());
                }
            }
        }
        st.tables.accesses[phase][index].write = match value {
            Some(v) => Write::Put(v),
            None => Write::Delete,
        };
        Ok(())
    }

    fn call(&self, frame: &Frame, child: u32, function: FnId, address: Address, args: Payload, _sync: bool) {
        let (partition, owner, hash) = self.locate(function, &address);
        let mut st = self.st.borrow_mut();
        let msg = Message::Invoke(Invoke {
            epoch: st.epoch,
            phase: st.phase,
            tid: frame.tid,
            now_us: frame.now_us,
            function,
            address,
            partition,
            hash,
            args,
            seed: frame.child_seed(child),
            depth: frame.depth + 1,
            parent: Parent::Call {
                shard: self.id,
                task: frame.task.get(),
                child,
            },
            step: st.step,
        });
        self.route(&mut st, owner, msg);
    }

    fn scan(&self, frame: &Frame, f: &mut dyn FnMut(&Key, &Value)) -> Result<(), Abort> {
        let rows: Vec<(Key, Value)> = {
            let mut guard = self.st.borrow_mut();
            let st = &mut *guard;
            let phase = Exec::phase_index(st.phase);
            let op = frame.function.op;
            st.tables.accesses[phase][frame.access.get() as usize].read = true;
            let mut rows: Vec<(Key, Option<Value>)> = st
                .store
                .scan(op, frame.partition)
                .into_iter()
                .map(|(k, slot)| (k, st.store.entries[slot as usize].value.clone()))
                .collect();
            // Read your own writes: overlay this transaction's buffered
            // writes to entities of the partition.
            if let Some(txn) = st.tables.txn(frame.tid) {
                let mut at = st.tables.head(phase, txn);
                while at != NO_INDEX {
                    let a = &st.tables.accesses[phase][at as usize];
                    let t = &st.tables.touched[a.touched as usize];
                    if let (Some(key), true) = (&t.key, t.op == op && t.partition == frame.partition) {
                        let new = match &a.write {
                            Write::None => None,
                            Write::Put(v) => Some(Some(v.clone())),
                            Write::Delete => Some(None),
                        };
                        if let Some(new) = new {
                            match rows.binary_search_by(|r| r.0.cmp(key)) {
                                Ok(i) => rows[i].1 = new,
                                Err(i) => rows.insert(i, (key.clone(), new)),
                            }
                        }
                    }
                    at = a.next;
                }
            }
            rows.into_iter().filter_map(|(k, v)| v.map(|v| (k, v))).collect()
        };
        for (k, v) in &rows {
            f(k, v);
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Invocations.

struct Task {
    frame: Rc<Frame>,
    /// The body, while it runs (taken from and given back to `runners`).
    runner: Option<Box<dyn crate::app::Runner>>,
    parent: Parent,
    body: Option<Result<Payload, Abort>>,
    replies: u32,
    /// The lowest-numbered child's tree abort.
    child_abort: Option<(u32, Abort)>,
    participants: ShardSet,
}

use crate::codec::Payload;

/// A transaction coordinated (sequenced) by this shard.
struct Coordinated {
    tid: Tid,
    reply_to: ReplyTo,
    request: Request,
    now_us: u64,
    /// Shards its phase-1 execution touched.
    participants: ShardSet,
    status: Status,
}

enum Status {
    Running,
    /// Phase 1 finished: its root's result and the transaction's abort.
    Ran {
        result: Result<Payload, Abort>,
        abort: Option<Abort>,
    },
    Fallback,
    /// Left its recorded set in phase 2: waits for phase 3.
    Serial,
    /// Running in phase 3.
    SerialRunning,
    Finished(Outcome),
}

/// Where a transaction's reply goes: a request submitted here, or one a
/// peer forwarded because this shard is its client's home.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReplyTo {
    Local(Token),
    Remote { shard: ShardId, token: Token },
}

/// A reply waiting for its epoch's input to be durable everywhere.
struct Release {
    to: ReplyTo,
    tid: Tid,
    outcome: Outcome,
}

/// What the engine remembers of one client (exactly-once). Part of the
/// state: rebuilt by replaying the log, carried in snapshots.
#[derive(Default)]
struct ClientState {
    /// Outcomes by seq: `(tid, epoch, outcome)`.
    outcomes: std::collections::BTreeMap<u64, (Tid, Epoch, Outcome)>,
    /// Seqs below this are forgotten: a retry is refused, never re-run.
    forgotten_below: u64,
    /// The last epoch that recorded an outcome (for eviction).
    last_epoch: Epoch,
    /// Seqs submitted and not finished: duplicates wait here. Not state:
    /// only requests still in flight, which a crash loses with their reply.
    waiting: std::collections::BTreeMap<u64, Vec<ReplyTo>>,
}

/// Clients whose outcomes a shard keeps; past it, the least recently used
/// client is forgotten (its retries would run again: size this above the
/// number of live clients).
pub const CLIENTS_MAX: usize = 1 << 20;
/// Outcomes kept per client; older ones are forgotten even unacknowledged.
pub const OUTCOMES_PER_CLIENT_MAX: usize = 4096;

/// The shard that sequences and deduplicates `client`'s requests.
pub fn client_home(client: u64, n_shards: u16) -> ShardId {
    (crate::bytes::mix64(client) % u64::from(n_shards)) as ShardId
}

/// The epoch machine's bookkeeping.
struct Machine {
    epoch: Epoch,
    stage: Stage,
    lc: u64,
    lc_max: u64,
    now_us: u64,
    last_start_us: u64,
    /// How many pending requests the next epoch seals (see
    /// `Config::epoch_txns_adaptive`).
    epoch_cap: usize,
    /// `stats.reexecuted` when the current epoch started.
    reexecuted_at_start: u64,
    pending: VecDeque<(ReplyTo, Request)>,
    replay: Option<VecDeque<Batch>>,
    coords: Vec<Coordinated>,
    running: usize,
    done1: usize,
    flags_in: usize,
    done2: usize,
    aborted: Vec<Tid>,
    merged: TidMap<u8>,
    any_pending: bool,
    /// Phase 3: the drifted transactions of every shard, in tid order.
    serial_queue: Vec<(Tid, ShardId)>,
    /// Phase 3: the queue position allowed to run.
    serial_index: u32,
    deferred: VecDeque<(ShardId, Message)>,
    /// Requests peers forwarded while this shard still replayed: admitted
    /// once replay ends, when the client table holds every logged outcome
    /// (admitted earlier, a retry of a request being replayed would miss
    /// its outcome and run a second time).
    submitted_in_replay: Vec<(ReplyTo, Request)>,
    held: VecDeque<(Epoch, Vec<Release>)>,
    clients: Map<u64, ClientState>,
    durable_local: Epoch,
    durable_peers: Vec<Epoch>,
    parked: Vec<Option<Invoke>>,
    stats: Stats,
    record: Option<EpochRecord>,
    last_snapshot_us: u64,
    any_snapshot: bool,
    snapshot: Option<Snapshotting>,
    /// Slots of deleted entities a finished snapshot released, reclaimed at
    /// the next epoch end.
    reclaim_later: Vec<u32>,
}

/// A snapshot being copied.
struct Snapshotting {
    epoch: Epoch,
    pending: Vec<u32>,
    cursor: usize,
    entries: Vec<(crate::OpId, Key, Option<Value>)>,
    meta: Vec<u8>,
}

/// Entities a step copies into the running snapshot: bounds the pause.
const SNAPSHOT_SLOTS_PER_STEP: usize = 512;
/// Entities per snapshot chunk handed to the driver.
const SNAPSHOT_CHUNK_ENTRIES_MAX: usize = 16_384;
/// Version of the machine state in a snapshot's `meta`.
const META_VERSION: u8 = 2;

/// A client in a snapshot: id, forgotten-below, last epoch, outcomes.
type ClientMeta = (u64, u64, Epoch, Vec<(u64, Tid, Epoch, Outcome)>);

/// One shard of the engine.
pub struct Shard {
    exec: Rc<Exec>,
    config: Config,
    tasks: Vec<Option<Task>>,
    free_tasks: Vec<u32>,
    m: Machine,
    outputs: Outputs,
    /// Emptied message batches, to carry outgoing ones.
    spare: Vec<Vec<Message>>,
    /// Frames of finished invocations, to run new ones.
    frames: Vec<Rc<Frame>>,
    runners: crate::app::Runners,
}

/// Emptied batches a shard keeps for reuse.
const SPARE_BATCHES_MAX: usize = 64;
/// Finished frames a shard keeps for reuse.
const SPARE_FRAMES_MAX: usize = 4096;

impl Shard {
    /// A shard with empty state, before epoch 1.
    pub fn new(app: Arc<App>, config: Config, id: ShardId, n_shards: u16) -> Shard {
        assert!(n_shards >= 1 && n_shards as usize <= SHARDS_MAX, "{n_shards} shards");
        assert!(id < n_shards);
        assert!(config.epoch_txns_max >= 1);
        assert!(config.step_messages_max >= 1);
        let store = Store::new(&app, id, n_shards);
        let runners = crate::app::Runners::new(&app);
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
            st: RefCell::new(ExecState {
                store,
                tables: Tables::new(),
                phase: Phase::Optimistic,
                epoch: 0,
                local: VecDeque::new(),
                outbox: (0..n_shards).map(|_| Vec::new()).collect(),
                step: 0,
            }),
        });
        Shard {
            exec,
            config,
            tasks: Vec::new(),
            free_tasks: Vec::new(),
            m: Machine {
                epoch: 0,
                stage: Stage::Idle,
                lc: 0,
                lc_max: 0,
                now_us: 0,
                last_start_us: 0,
                epoch_cap,
                reexecuted_at_start: 0,
                pending: VecDeque::new(),
                replay: None,
                coords: Vec::new(),
                running: 0,
                done1: 0,
                flags_in: 0,
                done2: 0,
                aborted: Vec::new(),
                merged: new_tid_map(),
                any_pending: false,
                serial_queue: Vec::new(),
                serial_index: 0,
                deferred: VecDeque::new(),
                submitted_in_replay: Vec::new(),
                held: VecDeque::new(),
                clients: new_map(),
                durable_local: 0,
                durable_peers: vec![0; n_shards as usize],
                parked: Vec::new(),
                stats: Stats::default(),
                record: None,
                last_snapshot_us: 0,
                any_snapshot: false,
                snapshot: None,
                reclaim_later: Vec::new(),
            },
            outputs: Outputs::default(),
            spare: Vec::new(),
            frames: Vec::new(),
            runners,
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

    /// A one-line account of the shard's machine, for diagnosing a stuck run.
    pub fn describe(&self) -> String {
        let live = self.tasks.iter().filter(|t| t.is_some()).count();
        format!(
            "shard {} epoch {} {:?}: {} roots running, {} tasks live, {} deferred, {} pending, serial {}/{}, {} parked, done1 {} flags {} done2 {}, held {:?}, replay {:?}, durable {} {:?}",
            self.exec.id,
            self.m.epoch,
            self.m.stage,
            self.m.running,
            live,
            self.m.deferred.len(),
            self.m.pending.len(),
            self.m.serial_index,
            self.m.serial_queue.len(),
            self.m.parked.iter().filter(|p| p.is_some()).count(),
            self.m.done1,
            self.m.flags_in,
            self.m.done2,
            self.m.held.iter().map(|(e, r)| (*e, r.len())).collect::<Vec<_>>(),
            self.m.replay.as_ref().map(VecDeque::len),
            self.m.durable_local,
            self.m.durable_peers,
        )
    }

    /// Whether the shard is still replaying logged epochs (recovery): it
    /// takes no requests until it has caught up.
    pub fn is_replaying(&self) -> bool {
        self.m.replay.is_some()
    }

    /// Requests waiting to be sequenced.
    pub fn pending(&self) -> usize {
        self.m.pending.len()
    }

    /// Whether nothing is running, waiting or held here.
    pub fn is_quiet(&self) -> bool {
        self.m.stage == Stage::Idle
            && !self.has_work()
            && self.outputs.snapshots.is_empty()
            && self.m.pending.is_empty()
            && self.m.held.is_empty()
            && self.m.replay.as_ref().is_none_or(VecDeque::is_empty)
    }

    /// Checks a request before it is accepted: the function exists, runs on
    /// that kind of address, and the partition is in range.
    pub fn validate(app: &App, request: &Request) -> Result<(), Abort> {
        let f = request.function;
        if f.op.0 as usize >= app.operator_count() {
            return Err(Abort::unknown(format!("no operator {}", f.op.0)));
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
    pub fn submit(&mut self, token: Token, request: Request) -> Result<(), Abort> {
        Shard::validate(&self.exec.app, &request)?;
        assert!(self.m.replay.is_none(), "submit while replaying");
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

    fn accept(&mut self, to: ReplyTo, request: Request) -> Result<(), Abort> {
        if self.m.pending.len() >= self.config.pending_txns_max {
            return Err(Abort::with_kind(
                crate::AbortKind::Rejected,
                format!("shard {} has {} requests waiting", self.id(), self.m.pending.len()),
            ));
        }
        if let Some(c) = request.client {
            let state = self.m.clients.entry(c.client).or_default();
            if let Some((tid, epoch, outcome)) = state.outcomes.get(&c.seq) {
                let release = Release {
                    to,
                    tid: *tid,
                    outcome: outcome.clone(),
                };
                let epoch = *epoch;
                self.release_after(epoch, release);
                return Ok(());
            }
            if c.seq < state.forgotten_below {
                let abort = Abort::with_kind(
                    crate::AbortKind::Forgotten,
                    format!(
                        "request {} of client {} is forgotten (acknowledged or too old)",
                        c.seq, c.client
                    ),
                );
                self.release_after(
                    0,
                    Release {
                        to,
                        tid: 0,
                        outcome: Outcome::Aborted(abort),
                    },
                );
                return Ok(());
            }
            if let Some(waiting) = state.waiting.get_mut(&c.seq) {
                waiting.push(to);
                return Ok(());
            }
            state.waiting.insert(c.seq, Vec::new());
        }
        // The epoch starts at the next `step` or `tick`, not here: a driver
        // submits everything that arrived, then the epoch seals it all (one
        // epoch per request would pay the barriers for each).
        self.m.pending.push_back((to, request));
        Ok(())
    }

    /// Sends `release` once `epoch`'s input is durable everywhere.
    fn release_after(&mut self, epoch: Epoch, release: Release) {
        if epoch <= self.durable_everywhere() {
            self.emit(release);
            return;
        }
        match self.m.held.iter_mut().find(|(e, _)| *e == epoch) {
            Some((_, list)) => list.push(release),
            None => {
                let at = self
                    .m
                    .held
                    .iter()
                    .position(|(e, _)| *e > epoch)
                    .unwrap_or(self.m.held.len());
                self.m.held.insert(at, (epoch, vec![release]));
            }
        }
    }

    fn emit(&mut self, r: Release) {
        match r.to {
            ReplyTo::Local(token) => self.outputs.replies.push(ClientReply {
                token,
                tid: r.tid,
                outcome: r.outcome,
            }),
            ReplyTo::Remote { shard, token } => {
                let mut st = self.exec.st.borrow_mut();
                self.exec.route(
                    &mut st,
                    shard,
                    Message::Replied {
                        token,
                        tid: r.tid,
                        outcome: r.outcome,
                    },
                );
            }
        }
    }

    /// Queues logged batches to run instead of live requests (recovery,
    /// replay tests). Batches must be for consecutive epochs after the
    /// current one; an epoch without a batch for this shard runs empty here.
    pub fn replay(&mut self, batches: impl IntoIterator<Item = Batch>) {
        let queue = self.m.replay.get_or_insert_with(VecDeque::new);
        for b in batches {
            assert_eq!(
                b.shard, self.exec.id,
                "batch of shard {} replayed on {}",
                b.shard, self.exec.id
            );
            assert!(queue.back().is_none_or(|last| last.epoch < b.epoch));
            assert!(b.epoch > self.m.epoch);
            queue.push_back(b);
        }
        if queue.is_empty() {
            self.end_replay();
        }
        self.maybe_start();
        self.run_local();
    }

    /// Recovery replayed every logged epoch: serve live from here on. Every
    /// shard replayed the same epochs from its log, so they are durable
    /// everywhere.
    fn end_replay(&mut self) {
        self.m.replay = None;
        let epoch = self.m.epoch;
        self.m.durable_local = self.m.durable_local.max(epoch);
        for d in &mut self.m.durable_peers {
            *d = (*d).max(epoch);
        }
        // A peer that had nothing to replay went live before us: tell it.
        {
            let mut st = self.exec.st.borrow_mut();
            for peer in 0..self.exec.n_shards {
                if peer != self.exec.id {
                    self.exec.route(&mut st, peer, Message::Durable { epoch });
                }
            }
        }
        for (to, request) in std::mem::take(&mut self.m.submitted_in_replay) {
            if let Err(abort) = self.accept(to, request) {
                self.emit(Release {
                    to,
                    tid: 0,
                    outcome: Outcome::Aborted(abort),
                });
            }
        }
    }

    /// Advances the shard's clock (µs since the Unix epoch).
    pub fn tick(&mut self, now_us: u64) {
        self.m.now_us = self.m.now_us.max(now_us);
        self.maybe_start();
        self.run_local();
    }

    /// The driver made this shard's log durable through `epoch`.
    pub fn log_durable(&mut self, epoch: Epoch) {
        assert_eq!(self.config.durability, Durability::Log);
        if epoch <= self.m.durable_local {
            return;
        }
        self.m.durable_local = epoch;
        {
            let mut st = self.exec.st.borrow_mut();
            for peer in 0..self.exec.n_shards {
                if peer != self.exec.id {
                    self.exec.route(&mut st, peer, Message::Durable { epoch });
                }
            }
        }
        self.release_replies();
    }

    /// Handles a batch of messages from shard `from`. The emptied vector is
    /// kept to carry a later outgoing batch: batches cross between shards in
    /// both directions, so their allocations circulate instead of regrowing.
    pub fn receive(&mut self, from: ShardId, mut batch: Vec<Message>) {
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
        std::mem::swap(&mut out.log, &mut self.outputs.log);
        std::mem::swap(&mut out.history, &mut self.outputs.history);
        std::mem::swap(&mut out.snapshots, &mut self.outputs.snapshots);
    }

    /// Every live entity's `(operator, key, value)` on this shard.
    pub fn for_each_entity(&self, mut f: impl FnMut(crate::OpId, &Key, &Value)) {
        let st = self.exec.st.borrow();
        for (op, _, key, value) in st.store.iter() {
            f(op, key, value);
        }
    }

    /// The number of live entities on this shard.
    pub fn entity_count(&self) -> usize {
        self.exec.st.borrow().store.live()
    }

    /// Sets an entity's state outside any transaction (bulk loading before
    /// the first epoch, recovery). The key must belong to this shard.
    pub fn load(&mut self, op: crate::OpId, key: &Key, value: Option<Value>) {
        assert_eq!(self.m.stage, Stage::Idle, "load while an epoch runs");
        let partitions = self.exec.app.operator_info(op).partitions();
        let partition = key.partition(partitions);
        assert_eq!(
            partition_owner(partition, self.exec.n_shards),
            self.exec.id,
            "key {key} loaded on the wrong shard"
        );
        self.exec.st.borrow_mut().store.load(op, partition, key, value, true);
    }

    /// The shard that owns entity `key` of `op`.
    pub fn owner(app: &App, n_shards: u16, op: crate::OpId, key: &Key) -> ShardId {
        partition_owner(key.partition(app.operator_info(op).partitions()), n_shards)
    }

    // -----------------------------------------------------------------------
    // The epoch machine.

    fn can_start(&self) -> bool {
        if self.m.stage != Stage::Idle {
            return false;
        }
        match &self.m.replay {
            Some(q) => !q.is_empty(),
            None => {
                !self.m.pending.is_empty()
                    && (self.m.epoch == 0
                        || self.m.now_us >= self.m.last_start_us.saturating_add(self.config.epoch_gather_us)
                        || self.m.pending.len() >= self.m.epoch_cap)
            }
        }
    }

    fn maybe_start(&mut self) {
        if self.can_start() {
            self.start_epoch();
        }
    }

    fn start_epoch(&mut self) {
        assert_eq!(self.m.stage, Stage::Idle);
        assert!(
            self.tasks.iter().all(Option::is_none),
            "tasks left over from the last epoch"
        );
        let epoch = self.m.epoch + 1;
        self.m.epoch = epoch;
        self.m.stage = Stage::Exec1;
        self.m.last_start_us = self.m.now_us;
        self.m.reexecuted_at_start = self.m.stats.reexecuted;
        {
            let mut guard = self.exec.st.borrow_mut();
            let st = &mut *guard;
            st.tables.reset(&mut st.store);
            st.phase = Phase::Optimistic;
            st.epoch = epoch;
        }
        let n = u64::from(self.exec.n_shards);
        let sid = u64::from(self.exec.id) + 1;
        // Reuse last epoch's (drained) vector: it has the capacity.
        let mut coords = std::mem::take(&mut self.m.coords);
        assert!(coords.is_empty());
        let (now_us, sealed): (u64, Vec<(Tid, ReplyTo, Request)>) = match &mut self.m.replay {
            Some(queue) => match queue.front() {
                Some(b) if b.epoch == epoch => {
                    let b = queue.pop_front().expect("front");
                    self.m.lc = self.m.lc.max(b.lc);
                    (
                        b.now_us,
                        b.txns
                            .into_iter()
                            .map(|(tid, r)| (tid, ReplyTo::Local(tid), r))
                            .collect(),
                    )
                }
                _ => (self.m.now_us, Vec::new()),
            },
            None => {
                let take = self.m.pending.len().min(self.m.epoch_cap);
                let mut sealed = Vec::with_capacity(take);
                for (to, request) in self.m.pending.drain(..take) {
                    self.m.lc += 1;
                    sealed.push((self.m.lc * n + sid, to, request));
                }
                if self.config.durability == Durability::Log {
                    self.outputs.log.push(Batch {
                        epoch,
                        shard: self.exec.id,
                        lc: self.m.lc,
                        now_us: self.m.now_us,
                        txns: sealed.iter().map(|(tid, _, r)| (*tid, r.clone())).collect(),
                    });
                }
                (self.m.now_us, sealed)
            }
        };
        for (tid, reply_to, request) in sealed {
            coords.push(Coordinated {
                tid,
                reply_to,
                request,
                now_us,
                participants: ShardSet::EMPTY,
                status: Status::Running,
            });
        }
        if self.config.durability == Durability::None || self.m.replay.is_some() {
            self.m.durable_local = epoch;
        }
        if self.config.record_history {
            self.m.record = Some(EpochRecord {
                epoch,
                shard: self.exec.id,
                ..EpochRecord::default()
            });
        }
        self.m.running = coords.len();
        for (index, c) in coords.iter_mut().enumerate() {
            c.participants = ShardSet::EMPTY;
            c.status = Status::Running;
            self.dispatch_root(c, index as u32, epoch, Phase::Optimistic, 0);
        }
        self.m.coords = coords;
        if self.m.running == 0 {
            self.send_done1();
        }
        self.redeliver();
    }

    fn dispatch_root(&self, c: &Coordinated, index: u32, epoch: Epoch, phase: Phase, step: u32) {
        let (partition, owner, hash) = self.exec.locate(c.request.function, &c.request.address);
        let msg = Message::Invoke(Invoke {
            epoch,
            phase,
            tid: c.tid,
            now_us: c.now_us,
            function: c.request.function,
            address: c.request.address.clone(),
            partition,
            hash,
            args: c.request.args.clone(),
            seed: root_seed(c.tid),
            depth: 0,
            parent: Parent::Root {
                coordinator: self.exec.id,
                index,
            },
            step,
        });
        let mut st = self.exec.st.borrow_mut();
        self.exec.route(&mut st, owner, msg);
    }

    fn broadcast(&mut self, msg: Message) {
        let mut st = self.exec.st.borrow_mut();
        for to in 0..self.exec.n_shards {
            self.exec.route(&mut st, to, msg.clone());
        }
    }

    fn send_done1(&mut self) {
        assert_eq!(self.m.stage, Stage::Exec1);
        self.m.stage = Stage::Wait1;
        let aborted: Vec<Tid> = self
            .m
            .coords
            .iter()
            .filter_map(|c| match &c.status {
                Status::Ran { abort: Some(_), .. } => Some(c.tid),
                _ => None,
            })
            .collect();
        self.broadcast(Message::Done1 {
            epoch: self.m.epoch,
            lc: self.m.lc,
            aborted,
        });
    }

    fn on_done1(&mut self, lc: u64, aborted: Vec<Tid>) {
        self.m.done1 += 1;
        self.m.lc_max = self.m.lc_max.max(lc);
        self.m.aborted.extend(aborted);
        self.check_done1();
    }

    fn check_done1(&mut self) {
        if self.m.stage != Stage::Wait1 || self.m.done1 < self.exec.n_shards as usize {
            return;
        }
        let flags = {
            let mut guard = self.exec.st.borrow_mut();
            let st = &mut *guard;
            for tid in &self.m.aborted {
                if let Some(t) = st.tables.txn(*tid) {
                    st.tables.txns[t as usize].aborted = true;
                }
            }
            st.tables.conflict_flags(&st.store)
        };
        self.m.stage = Stage::Check;
        self.broadcast(Message::Flags {
            epoch: self.m.epoch,
            flags,
        });
    }

    fn on_flags(&mut self, flags: Vec<(Tid, u8)>) {
        for (tid, f) in flags {
            *self.m.merged.entry(tid).or_insert(0) |= f;
        }
        self.m.flags_in += 1;
        if self.m.flags_in == self.exec.n_shards as usize {
            assert_eq!(self.m.stage, Stage::Check);
            self.decide();
        }
    }

    /// All flags are in: commit phase-1 winners, queue the rest.
    fn decide(&mut self) {
        let mut merged = std::mem::take(&mut self.m.merged);
        let verdict = |tid: Tid| flags::commits(merged.get(&tid).copied().unwrap_or(0));
        {
            let mut guard = self.exec.st.borrow_mut();
            let st = &mut *guard;
            for t in 0..st.tables.txns.len() {
                let txn = &mut st.tables.txns[t];
                if txn.aborted {
                    continue;
                }
                if verdict(txn.tid) {
                    txn.committed = true;
                }
            }
            if let Some(record) = &mut self.m.record {
                record.edges = crate::history::phase1_edges(&st.tables, &st.store);
            }
            for t in 0..st.tables.txns.len() {
                if st.tables.txns[t].committed {
                    st.tables.apply(&mut st.store, 0, t as u32);
                }
            }
            st.tables.build_queues(&st.store, |t| !t.aborted && !t.committed);
            st.phase = Phase::Fallback;
        }
        self.m.stage = Stage::Exec2;
        self.m.running = 0;
        let epoch = self.m.epoch;
        for index in 0..self.m.coords.len() {
            let c = &mut self.m.coords[index];
            let Status::Ran { result, abort } = std::mem::replace(&mut c.status, Status::Fallback) else {
                panic!("transaction {} not finished after phase 1", c.tid);
            };
            if let Some(abort) = abort {
                c.status = Status::Finished(Outcome::Aborted(abort));
                self.m.stats.aborted += 1;
                if let Some(r) = &mut self.m.record {
                    r.aborted1.push(c.tid);
                }
            } else if verdict(c.tid) {
                let value = result.expect("a transaction without abort has a result");
                c.status = Status::Finished(Outcome::Committed(value));
                self.m.stats.committed += 1;
                if let Some(r) = &mut self.m.record {
                    r.committed1.push(c.tid);
                }
            } else {
                self.m.stats.reexecuted += 1;
                self.m.running += 1;
                let c = &self.m.coords[index];
                self.dispatch_root(c, index as u32, epoch, Phase::Fallback, 0);
            }
        }
        // Keep the map's capacity for the next epoch.
        merged.clear();
        self.m.merged = merged;
        if self.m.running == 0 {
            self.send_done2();
        }
        self.redeliver();
    }

    fn send_done2(&mut self) {
        assert_eq!(self.m.stage, Stage::Exec2);
        self.m.stage = Stage::Wait2;
        let pending = match &self.m.replay {
            Some(q) => !q.is_empty(),
            None => !self.m.pending.is_empty(),
        };
        let drifted: Vec<(Tid, ShardId)> = self
            .m
            .coords
            .iter()
            .filter(|c| matches!(c.status, Status::Serial))
            .map(|c| (c.tid, self.exec.id))
            .collect();
        let snapshot = self.config.snapshot_interval_us > 0
            && self.m.replay.is_none()
            && self.m.now_us >= self.m.last_snapshot_us.saturating_add(self.config.snapshot_interval_us);
        self.broadcast(Message::Done2 {
            epoch: self.m.epoch,
            pending,
            snapshot,
            drifted,
        });
    }

    fn on_done2(&mut self, pending: bool, snapshot: bool, drifted: Vec<(Tid, ShardId)>) {
        self.m.done2 += 1;
        self.m.any_pending |= pending;
        self.m.any_snapshot |= snapshot;
        self.m.serial_queue.extend(drifted);
        if self.m.done2 == self.exec.n_shards as usize {
            assert_eq!(self.m.stage, Stage::Wait2);
            if self.m.serial_queue.is_empty() {
                self.end_epoch();
            } else {
                self.begin_serial();
            }
        }
    }

    /// Phase 3: every shard sorts the same drifted transactions by tid; the
    /// coordinator of the first runs it. There are no locks: one
    /// transaction runs at a time, so nothing can drift.
    fn begin_serial(&mut self) {
        self.m.serial_queue.sort_unstable();
        self.m.stage = Stage::Exec3;
        self.m.serial_index = 0;
        {
            let mut st = self.exec.st.borrow_mut();
            st.phase = Phase::Serial;
            st.step = 0;
        }
        self.run_serial();
        self.redeliver();
    }

    /// Starts the queue's current transaction if this shard coordinates it.
    fn run_serial(&mut self) {
        let i = self.m.serial_index as usize;
        let Some(&(tid, coordinator)) = self.m.serial_queue.get(i) else {
            return;
        };
        if coordinator != self.exec.id {
            return;
        }
        let index = self
            .m
            .coords
            .iter()
            .position(|c| c.tid == tid)
            .expect("coordinated here");
        let c = &mut self.m.coords[index];
        assert!(matches!(c.status, Status::Serial), "{tid} is not waiting for phase 3");
        c.status = Status::SerialRunning;
        let c = &self.m.coords[index];
        self.dispatch_root(c, index as u32, self.m.epoch, Phase::Serial, i as u32);
    }

    fn on_next(&mut self, index: u32) {
        assert_eq!(index, self.m.serial_index + 1, "phase-3 steps arrive in order");
        self.m.serial_index = index;
        self.exec.st.borrow_mut().step = index;
        if index as usize == self.m.serial_queue.len() {
            self.end_epoch();
        } else {
            self.run_serial();
            self.redeliver();
        }
    }

    /// Sizes the next epoch by this one: `sealed` transactions of which
    /// `fallen_back` fell back to phase 2. Only the cut depends on it, and
    /// cuts are logged, so replay never needs it.
    fn adapt_epoch_size(&mut self, sealed: usize, fallen_back: u64) {
        use crate::config::{EPOCH_FALLBACK_HIGH_PCT, EPOCH_FALLBACK_LOW_PCT, EPOCH_TXNS_MIN};
        if !self.config.epoch_txns_adaptive || sealed == 0 {
            return;
        }
        let max = self.config.epoch_txns_max;
        let pct = fallen_back * 100 / sealed as u64;
        if pct > EPOCH_FALLBACK_HIGH_PCT {
            self.m.epoch_cap = (sealed * 3 / 4).clamp(EPOCH_TXNS_MIN.min(max), max);
        } else if pct < EPOCH_FALLBACK_LOW_PCT && sealed >= self.m.epoch_cap {
            self.m.epoch_cap = (self.m.epoch_cap + self.m.epoch_cap / 4 + 1).min(max);
        }
    }

    /// How many pending requests the next epoch seals.
    pub fn epoch_size(&self) -> usize {
        self.m.epoch_cap
    }

    fn end_epoch(&mut self) {
        assert!(
            self.tasks.iter().all(Option::is_none),
            "tasks alive at the end of an epoch"
        );
        let epoch = self.m.epoch;
        if self.m.replay.is_none() {
            self.adapt_epoch_size(
                self.m.coords.len(),
                self.m.stats.reexecuted - self.m.reexecuted_at_start,
            );
        }
        let mut replies = Vec::with_capacity(self.m.coords.len());
        let mut recorded: Vec<(Tid, crate::ClientSeq, Outcome)> = Vec::new();
        for c in self.m.coords.drain(..) {
            match c.status {
                Status::Finished(outcome) => {
                    if let Some(client) = c.request.client {
                        recorded.push((c.tid, client, outcome.clone()));
                    }
                    replies.push(Release {
                        to: c.reply_to,
                        tid: c.tid,
                        outcome,
                    });
                }
                _ => panic!("transaction {} unfinished at the end of epoch {epoch}", c.tid),
            }
        }
        // Exactly-once: record outcomes in tid order (replay does the same,
        // so the table is part of the deterministic state), answer the
        // duplicates that waited, forget what clients acknowledged.
        recorded.sort_unstable_by_key(|(tid, _, _)| *tid);
        for (tid, c, outcome) in recorded {
            let state = self.m.clients.entry(c.client).or_default();
            if let Some(waiting) = state.waiting.remove(&c.seq) {
                for to in waiting {
                    replies.push(Release {
                        to,
                        tid,
                        outcome: outcome.clone(),
                    });
                }
            }
            state.outcomes.insert(c.seq, (tid, epoch, outcome));
            state.last_epoch = epoch;
            if c.ack > state.forgotten_below {
                state.forgotten_below = c.ack;
                state.outcomes = state.outcomes.split_off(&c.ack);
            }
            while state.outcomes.len() > OUTCOMES_PER_CLIENT_MAX {
                let (oldest, _) = state.outcomes.pop_first().expect("non-empty");
                state.forgotten_below = state.forgotten_below.max(oldest + 1);
            }
        }
        if self.m.clients.len() > CLIENTS_MAX {
            self.evict_clients();
        }
        if let Some(record) = self.m.record.take() {
            self.outputs.history.push(record);
        }
        self.m.serial_queue.clear();
        self.m.serial_index = 0;
        if self.m.replay.as_ref().is_some_and(VecDeque::is_empty) {
            self.end_replay();
        }
        {
            let mut guard = self.exec.st.borrow_mut();
            let st = &mut *guard;
            for t in &st.tables.touched {
                if let Some(key) = &t.key
                    && st.store.entries[t.slot as usize].value.is_none()
                {
                    st.store.reclaim(t.op, t.partition, key);
                }
            }
            for slot in self.m.reclaim_later.drain(..) {
                st.store.reclaim_slot(slot);
            }
        }
        self.m.parked.clear();
        if !replies.is_empty() {
            self.m.held.push_back((epoch, replies));
        }
        self.m.lc = self.m.lc.max(self.m.lc_max);
        if std::mem::take(&mut self.m.any_snapshot) {
            self.begin_snapshot(epoch);
        }
        self.m.done1 = 0;
        self.m.flags_in = 0;
        self.m.done2 = 0;
        self.m.aborted.clear();
        self.m.stage = Stage::Idle;
        self.m.stats.epochs += 1;
        self.release_replies();
        let any_pending = std::mem::take(&mut self.m.any_pending);
        if any_pending {
            // Every shard saw the same `Done2`s, so all start together.
            self.start_epoch();
        } else {
            self.maybe_start();
            if self.m.stage == Stage::Idle {
                // A peer that finished first may already have sent messages
                // of the next epoch: they start it here.
                self.redeliver();
            }
        }
    }

    // -----------------------------------------------------------------------
    // Snapshots.

    /// Starts a snapshot of the state after `epoch` (all shards start one at
    /// the same epoch: the vote rides on `Done2`). The entities changed since
    /// the last snapshot are copied a share per step; one written before it
    /// is copied gets its old value saved first (copy-on-write), so the
    /// snapshot is exactly the state after `epoch` while later epochs run.
    fn begin_snapshot(&mut self, epoch: Epoch) {
        if self.m.snapshot.is_some() {
            // The previous one is still being copied: finish it now.
            while self.m.snapshot.is_some() {
                self.snapshot_step(usize::MAX);
            }
        }
        let pending = self.exec.st.borrow_mut().store.begin_snapshot();
        self.m.last_snapshot_us = self.m.now_us;
        self.m.snapshot = Some(Snapshotting {
            epoch,
            pending,
            cursor: 0,
            entries: Vec::new(),
            meta: self.encode_meta(epoch),
        });
        self.m.stats.snapshots += 1;
    }

    /// Copies up to `budget` pending entities of the running snapshot and
    /// emits full chunks; emits the last chunk when all are copied.
    fn snapshot_step(&mut self, budget: usize) {
        let Some(snap) = &mut self.m.snapshot else {
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
            let entries = std::mem::take(&mut snap.entries);
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
            });
        }
        if done {
            // Deleted entities kept for the snapshot can go, but not while an
            // epoch's tables may point at their slots: at the next epoch end.
            for &slot in &snap.pending {
                if st.store.entries[slot as usize].value.is_none() {
                    self.m.reclaim_later.push(slot);
                }
            }
            self.m.snapshot = None;
        }
    }

    /// The machine state a snapshot must carry: its epoch and the
    /// sequencer counter. (No transaction outlives its epoch.)
    fn encode_meta(&self, epoch: Epoch) -> Vec<u8> {
        let mut clients: Vec<ClientMeta> = self
            .m
            .clients
            .iter()
            .filter(|(_, s)| !s.outcomes.is_empty() || s.forgotten_below > 0)
            .map(|(c, s)| {
                let outcomes = s
                    .outcomes
                    .iter()
                    .map(|(seq, (t, e, o))| (*seq, *t, *e, o.clone()))
                    .collect();
                (*c, s.forgotten_below, s.last_epoch, outcomes)
            })
            .collect();
        clients.sort_unstable_by_key(|c| c.0);
        Payload::encode(&(META_VERSION, epoch, self.m.lc, clients))
            .as_bytes()
            .to_vec()
    }

    /// Restores the machine state of a snapshot (before any epoch ran here),
    /// after its entities were loaded with [`Shard::load_snapshot_entity`].
    /// Replay the logged epochs after it with [`Shard::replay`].
    pub fn restore(&mut self, meta: &[u8]) -> Result<Epoch, crate::DecodeError> {
        assert_eq!(self.m.epoch, 0, "restore into a shard that already ran");
        let (version, epoch, lc, clients) = Payload::from_bytes(meta).decode::<(u8, Epoch, u64, Vec<ClientMeta>)>()?;
        if version != META_VERSION {
            return Err(crate::DecodeError::Tag(version));
        }
        for (client, forgotten_below, last_epoch, outcomes) in clients {
            self.m.clients.insert(
                client,
                ClientState {
                    outcomes: outcomes.into_iter().map(|(seq, t, e, o)| (seq, (t, e, o))).collect(),
                    forgotten_below,
                    last_epoch,
                    waiting: Default::default(),
                },
            );
        }
        self.m.epoch = epoch;
        self.m.lc = lc;
        // A snapshot is only complete once every shard's input through its
        // epoch is durable.
        self.m.durable_local = epoch;
        for d in &mut self.m.durable_peers {
            *d = epoch;
        }
        Ok(epoch)
    }

    /// Loads an entity from a snapshot: like [`Shard::load`], but the next
    /// snapshot need not include it.
    pub fn load_snapshot_entity(&mut self, op: crate::OpId, key: &Key, value: Value) {
        assert_eq!(self.m.stage, Stage::Idle, "load while an epoch runs");
        let partition = key.partition(self.exec.app.operator_info(op).partitions());
        assert_eq!(
            partition_owner(partition, self.exec.n_shards),
            self.exec.id,
            "key {key} loaded on the wrong shard"
        );
        self.exec
            .st
            .borrow_mut()
            .store
            .load(op, partition, key, Some(value), false);
    }

    /// The epoch through which every shard's input is durable.
    fn durable_everywhere(&self) -> Epoch {
        if self.config.durability == Durability::None || self.m.replay.is_some() {
            return Epoch::MAX;
        }
        let peers = self
            .m
            .durable_peers
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != self.exec.id as usize)
            .map(|(_, e)| *e)
            .min()
            .unwrap_or(Epoch::MAX);
        peers.min(self.m.durable_local)
    }

    fn release_replies(&mut self) {
        let durable = self.durable_everywhere();
        while let Some((epoch, _)) = self.m.held.front() {
            if *epoch > durable {
                break;
            }
            let (_, replies) = self.m.held.pop_front().expect("front");
            for r in replies {
                self.emit(r);
            }
        }
    }

    /// Forgets the least recently used clients (idle ones only: a client
    /// with a request in flight stays) down to `CLIENTS_MAX`.
    fn evict_clients(&mut self) {
        let mut idle: Vec<(Epoch, u64)> = self
            .m
            .clients
            .iter()
            .filter(|(_, s)| s.waiting.is_empty())
            .map(|(c, s)| (s.last_epoch, *c))
            .collect();
        idle.sort_unstable();
        let excess = self.m.clients.len().saturating_sub(CLIENTS_MAX);
        for (_, c) in idle.into_iter().take(excess) {
            self.m.clients.remove(&c);
        }
    }

    // -----------------------------------------------------------------------
    // Message handling.

    /// Handles local messages, at most `step_messages_max` of them.
    fn run_local(&mut self) {
        for _ in 0..self.config.step_messages_max {
            let next = self.exec.st.borrow_mut().local.pop_front();
            match next {
                Some(msg) => self.handle(self.exec.id, msg),
                None => break,
            }
        }
    }

    /// Whether local work is waiting for [`Shard::step`].
    pub fn has_work(&self) -> bool {
        !self.exec.st.borrow().local.is_empty() || self.m.snapshot.is_some() || self.can_start()
    }

    /// Handles the next share of local work (see `Config::step_messages_max`)
    /// and of the running snapshot's copying.
    pub fn step(&mut self) {
        self.maybe_start();
        self.run_local();
        self.snapshot_step(SNAPSHOT_SLOTS_PER_STEP);
    }

    /// Messages of a later stage than ours wait in `deferred`; an idle
    /// shard that hears of the next epoch starts it.
    fn handle(&mut self, from: ShardId, msg: Message) {
        loop {
            let Some((epoch, phase)) = msg.stage() else {
                break;
            };
            if self.m.stage == Stage::Idle {
                assert!(
                    epoch > self.m.epoch,
                    "message of finished epoch {epoch} at {}",
                    self.m.epoch
                );
                if epoch == self.m.epoch + 1 {
                    self.start_epoch();
                    continue;
                }
                self.m.deferred.push_back((from, msg));
                return;
            }
            assert!(
                epoch >= self.m.epoch,
                "message of finished epoch {epoch} at {}",
                self.m.epoch
            );
            let early = epoch > self.m.epoch
                || (phase == Phase::Fallback && self.m.stage < Stage::Exec2)
                || (phase == Phase::Serial
                    && (self.m.stage < Stage::Exec3
                        || match &msg {
                            // A phase-3 invocation waits for its step; a
                            // `Next` from a later coordinator for the one
                            // before it.
                            Message::Invoke(inv) => inv.step > self.m.serial_index,
                            Message::Next { index, .. } => *index > self.m.serial_index + 1,
                            _ => false,
                        }));
            if early {
                self.m.deferred.push_back((from, msg));
                return;
            }
            break;
        }
        match msg {
            Message::Invoke(inv) => self.on_invoke(inv),
            Message::Reply(reply) => self.on_reply(reply),
            Message::Done1 { lc, aborted, .. } => self.on_done1(lc, aborted),
            Message::Flags { flags, .. } => self.on_flags(flags),
            Message::Finish {
                tid, commit, serial, ..
            } => self.on_finish(tid, commit, serial),
            Message::Done2 {
                pending,
                snapshot,
                drifted,
                ..
            } => self.on_done2(pending, snapshot, drifted),
            Message::Next { index, .. } => self.on_next(index),
            Message::Submit { origin, token, request } => {
                let to = ReplyTo::Remote { shard: origin, token };
                if self.m.replay.is_some() {
                    self.m.submitted_in_replay.push((to, request));
                } else if let Err(abort) = self.accept(to, request) {
                    self.emit(Release {
                        to,
                        tid: 0,
                        outcome: Outcome::Aborted(abort),
                    });
                }
            }
            Message::Replied { token, tid, outcome } => {
                self.outputs.replies.push(ClientReply { token, tid, outcome });
            }
            Message::Durable { epoch } => {
                let d = &mut self.m.durable_peers[from as usize];
                *d = (*d).max(epoch);
                self.release_replies();
            }
        }
    }

    fn redeliver(&mut self) {
        let deferred = std::mem::take(&mut self.m.deferred);
        for (from, msg) in deferred {
            self.handle(from, msg);
        }
    }

    fn on_invoke(&mut self, inv: Invoke) {
        self.m.stats.invocations += 1;
        match inv.phase {
            Phase::Optimistic => {
                let (slot, access) = {
                    let mut guard = self.exec.st.borrow_mut();
                    let st = &mut *guard;
                    let partition = inv.partition;
                    let op = inv.function.op;
                    let pseudo = st.store.partition(op, partition).pseudo;
                    let (slot, key) = match &inv.address {
                        Address::Entity(key) => (st.store.slot(op, partition, key, inv.hash), Some(key)),
                        Address::Partition(_) => (pseudo, None),
                    };
                    let touched = st.tables.touch(&mut st.store, slot, op, partition, key);
                    let txn = st.tables.txn_or_insert(inv.tid);
                    let access = st.tables.access(0, txn, touched, pseudo);
                    (slot, access)
                };
                self.start_task(inv, slot, access);
            }
            Phase::Fallback => self.admit_fallback(inv),
            Phase::Serial => {
                // Alone in the system: no locks, no recorded set.
                let (slot, access) = {
                    let mut guard = self.exec.st.borrow_mut();
                    let st = &mut *guard;
                    let partition = inv.partition;
                    let op = inv.function.op;
                    let pseudo = st.store.partition(op, partition).pseudo;
                    let (slot, key) = match &inv.address {
                        Address::Entity(key) => (st.store.slot(op, partition, key, inv.hash), Some(key)),
                        Address::Partition(_) => (pseudo, None),
                    };
                    let touched = st.tables.touch(&mut st.store, slot, op, partition, key);
                    let txn = st.tables.txn_or_insert(inv.tid);
                    let access = st.tables.access(2, txn, touched, pseudo);
                    (slot, access)
                };
                self.start_task(inv, slot, access);
            }
        }
    }

    /// Runs a phase-2 invocation if its transaction holds the entity (and
    /// the partition, when it is queued there), parks it otherwise, and
    /// fails it as drift when the entity is outside its recorded set.
    fn admit_fallback(&mut self, inv: Invoke) {
        enum Admit {
            Run { slot: u32, access: u32 },
            Park(u32),
            Drift,
        }
        let admit = {
            let mut guard = self.exec.st.borrow_mut();
            let st = &mut *guard;
            let partition = inv.partition;
            let op = inv.function.op;
            let pseudo = st.store.partition(op, partition).pseudo;
            let slot = match &inv.address {
                Address::Entity(key) => st.store.find(op, partition, key, inv.hash),
                Address::Partition(_) => Some(pseudo),
            };
            let txn = st.tables.txn(inv.tid);
            let ordinal = slot.and_then(|s| st.tables.touched_ordinal(&st.store, s));
            match (slot, txn, ordinal) {
                (Some(slot), Some(txn), Some(ordinal)) => {
                    let q = st.tables.touched[ordinal as usize].queue;
                    if q == NO_INDEX || !st.tables.in_queue(q, inv.tid) {
                        Admit::Drift
                    } else {
                        let pq = match (&inv.address, st.tables.touched_ordinal(&st.store, pseudo)) {
                            (Address::Entity(_), Some(p)) => {
                                let pq = st.tables.touched[p as usize].queue;
                                (pq != NO_INDEX && st.tables.in_queue(pq, inv.tid)).then_some(pq)
                            }
                            _ => None,
                        };
                        if !st.tables.holds(q, inv.tid) {
                            Admit::Park(q)
                        } else if let Some(pq) = pq.filter(|pq| !st.tables.holds(*pq, inv.tid)) {
                            Admit::Park(pq)
                        } else {
                            let access = st.tables.access(1, txn, ordinal, pseudo);
                            Admit::Run { slot, access }
                        }
                    }
                }
                _ => Admit::Drift,
            }
        };
        match admit {
            Admit::Run { slot, access } => self.start_task(inv, slot, access),
            Admit::Park(q) => {
                let index = self.m.parked.len() as u32;
                self.m.parked.push(Some(inv));
                self.exec.st.borrow_mut().tables.queues[q as usize].waiting.push(index);
            }
            Admit::Drift => {
                let reply = Reply {
                    parent: inv.parent,
                    result: Err(Abort::drift()),
                    tree_abort: Some(Abort::drift()),
                    participants: ShardSet::one(self.exec.id),
                };
                self.send_reply(reply);
            }
        }
    }

    fn start_task(&mut self, inv: Invoke, slot: u32, access: u32) {
        let partition = inv.partition;
        let frame = match self.frames.pop() {
            Some(mut frame) => {
                let f = Rc::get_mut(&mut frame).expect("pooled frames are unshared");
                f.reset(
                    inv.tid,
                    inv.now_us,
                    inv.function,
                    inv.address,
                    partition,
                    inv.depth,
                    inv.seed,
                );
                frame
            }
            None => {
                let host: Rc<dyn Host> = self.exec.clone();
                Rc::new(Frame::new(
                    host,
                    inv.tid,
                    inv.now_us,
                    inv.function,
                    inv.address,
                    partition,
                    inv.depth,
                    inv.seed,
                ))
            }
        };
        frame.slot.set(slot);
        frame.access.set(access);
        let index = match self.free_tasks.pop() {
            Some(i) => i,
            None => {
                self.tasks.push(None);
                (self.tasks.len() - 1) as u32
            }
        };
        frame.task.set(index);
        let mut runner = self.runners.take(&self.exec.app, inv.function);
        let ctx = Ctx { frame: frame.clone() };
        let args = inv.args;
        let started = catch_unwind(AssertUnwindSafe(|| runner.start(ctx, &args)));
        let (runner, body) = match started {
            Ok(Ok(())) => (Some(runner), None),
            Ok(Err(abort)) => {
                self.runners.give(&self.exec.app, inv.function, runner);
                (None, Some(Err(abort)))
            }
            Err(panic) => (None, Some(Err(Abort::from_panic(&*panic)))),
        };
        self.tasks[index as usize] = Some(Task {
            frame,
            runner,
            parent: inv.parent,
            body,
            replies: 0,
            child_abort: None,
            participants: ShardSet::one(self.exec.id),
        });
        self.poll_task(index);
    }

    fn poll_task(&mut self, index: u32) {
        let task = self.tasks[index as usize].as_mut().expect("live task");
        if let Some(runner) = &mut task.runner {
            let mut cx = Context::from_waker(Waker::noop());
            match catch_unwind(AssertUnwindSafe(|| runner.poll(&mut cx))) {
                Ok(Poll::Pending) => {
                    // Only replies wake a function; with none outstanding it
                    // waits for something that will never come.
                    if task.replies == task.frame.calls.borrow().len() as u32 {
                        let mut runner = task.runner.take().expect("running");
                        let _ = catch_unwind(AssertUnwindSafe(move || runner.clear()));
                        let name = self.exec.app.describe(task.frame.function);
                        task.body = Some(Err(Abort::stalled(&name)));
                    }
                }
                Ok(Poll::Ready(result)) => {
                    let runner = task.runner.take().expect("running");
                    self.runners.give(&self.exec.app, task.frame.function, runner);
                    task.body = Some(result);
                }
                Err(panic) => {
                    let mut runner = task.runner.take().expect("running");
                    // A future that panicked may panic again when dropped.
                    let _ = catch_unwind(AssertUnwindSafe(move || runner.clear()));
                    task.body = Some(Err(Abort::from_panic(&*panic)));
                }
            }
        }
        self.maybe_complete(index);
    }

    fn maybe_complete(&mut self, index: u32) {
        let task = self.tasks[index as usize].as_ref().expect("live task");
        let issued = task.frame.calls.borrow().len() as u32;
        if task.body.is_none() || task.replies < issued {
            return;
        }
        let task = self.tasks[index as usize].take().expect("live task");
        self.free_tasks.push(index);
        let result = task.body.expect("body finished");
        let own = task
            .frame
            .forced
            .borrow_mut()
            .take()
            .or_else(|| result.as_ref().err().cloned());
        let tree_abort = own.or(task.child_abort.map(|(_, a)| a));
        self.send_reply(Reply {
            parent: task.parent,
            result,
            tree_abort,
            participants: task.participants,
        });
        // The body future is gone, so unless the function kept a `Ctx`
        // somewhere, this is the frame's last handle: reuse it.
        let frame = task.frame;
        if Rc::strong_count(&frame) == 1 && self.frames.len() < SPARE_FRAMES_MAX {
            self.frames.push(frame);
        }
    }

    fn send_reply(&mut self, reply: Reply) {
        let to = reply.parent.shard();
        let mut st = self.exec.st.borrow_mut();
        self.exec.route(&mut st, to, Message::Reply(reply));
    }

    fn on_reply(&mut self, reply: Reply) {
        match reply.parent {
            Parent::Call { task, child, .. } => {
                let t = self.tasks[task as usize].as_mut().expect("reply for a live task");
                t.replies += 1;
                t.participants = t.participants.union(reply.participants);
                if let Some(abort) = reply.tree_abort
                    && t.child_abort.as_ref().is_none_or(|(c, _)| child < *c)
                {
                    t.child_abort = Some((child, abort));
                }
                let waker = {
                    let mut calls = t.frame.calls.borrow_mut();
                    let slot = &mut calls[child as usize];
                    slot.result = Some(reply.result);
                    slot.waker.take()
                };
                if let Some(w) = waker {
                    w.wake();
                }
                if t.body.is_none() {
                    self.poll_task(task);
                } else {
                    self.maybe_complete(task);
                }
            }
            Parent::Root { index, .. } => self.on_root_done(index, reply),
        }
    }

    fn on_root_done(&mut self, index: u32, reply: Reply) {
        let epoch = self.m.epoch;
        let c = &mut self.m.coords[index as usize];
        match c.status {
            Status::Running => {
                c.participants = reply.participants;
                c.status = Status::Ran {
                    result: reply.result,
                    abort: reply.tree_abort,
                };
                assert!(
                    !matches!(&c.status, Status::Ran { abort: Some(a), .. } if a.is_drift()),
                    "drift in phase 1"
                );
                self.m.running -= 1;
                if self.m.running == 0 {
                    self.send_done1();
                }
            }
            Status::Fallback => {
                let participants = c.participants.union(reply.participants);
                let tid = c.tid;
                let commit = match reply.tree_abort {
                    Some(a) if a.is_drift() => {
                        c.status = Status::Serial;
                        self.m.stats.serialized += 1;
                        false
                    }
                    Some(a) => {
                        c.status = Status::Finished(Outcome::Aborted(a));
                        self.m.stats.aborted += 1;
                        if let Some(r) = &mut self.m.record {
                            r.fallback.push(tid);
                        }
                        false
                    }
                    None => {
                        let value = reply.result.expect("no abort, so a result");
                        c.status = Status::Finished(Outcome::Committed(value));
                        self.m.stats.committed += 1;
                        if let Some(r) = &mut self.m.record {
                            r.fallback.push(tid);
                        }
                        true
                    }
                };
                {
                    let mut st = self.exec.st.borrow_mut();
                    for to in participants.iter() {
                        self.exec.route(
                            &mut st,
                            to,
                            Message::Finish {
                                epoch,
                                tid,
                                commit,
                                serial: false,
                            },
                        );
                    }
                }
                self.m.running -= 1;
                if self.m.running == 0 {
                    self.send_done2();
                }
            }
            Status::SerialRunning => {
                assert!(
                    reply.tree_abort.as_ref().is_none_or(|a| !a.is_drift()),
                    "drift in phase 3"
                );
                let tid = c.tid;
                let commit = match reply.tree_abort {
                    Some(a) => {
                        c.status = Status::Finished(Outcome::Aborted(a));
                        self.m.stats.aborted += 1;
                        false
                    }
                    None => {
                        let value = reply.result.expect("no abort, so a result");
                        c.status = Status::Finished(Outcome::Committed(value));
                        self.m.stats.committed += 1;
                        true
                    }
                };
                if let Some(r) = &mut self.m.record {
                    r.serial.push(tid);
                }
                // Each participant applies the writes before it hears `Next`
                // (same links, FIFO), so the next transaction sees them.
                let next = self.m.serial_index + 1;
                let mut st = self.exec.st.borrow_mut();
                for to in reply.participants.iter() {
                    self.exec.route(
                        &mut st,
                        to,
                        Message::Finish {
                            epoch,
                            tid,
                            commit,
                            serial: true,
                        },
                    );
                }
                for to in 0..self.exec.n_shards {
                    self.exec.route(&mut st, to, Message::Next { epoch, index: next });
                }
            }
            _ => panic!("root of {} replied twice", c.tid),
        }
    }

    fn on_finish(&mut self, tid: Tid, commit: bool, serial: bool) {
        if serial {
            let mut guard = self.exec.st.borrow_mut();
            let st = &mut *guard;
            let txn = st.tables.txn(tid).expect("a phase-3 participant ran the transaction");
            if commit {
                st.tables.apply(&mut st.store, 2, txn);
            }
            return;
        }
        let wake: Vec<u32> = {
            let mut guard = self.exec.st.borrow_mut();
            let st = &mut *guard;
            let Some(txn) = st.tables.txn(tid) else {
                return;
            };
            if commit {
                st.tables.apply(&mut st.store, 1, txn);
            }
            st.tables.txns[txn as usize].finished = true;
            let mut wake = Vec::new();
            for q in st.tables.queues_of(&st.store, txn) {
                // Advance the head past finished holders.
                let _ = st.tables.holds(q, Tid::MAX);
                let queue = &mut st.tables.queues[q as usize];
                if let Some(&holder) = queue.tids.get(queue.head) {
                    let parked = &self.m.parked;
                    let mut keep = Vec::new();
                    for p in queue.waiting.drain(..) {
                        let inv = parked[p as usize].as_ref().expect("parked invocation");
                        if inv.tid == holder {
                            wake.push(p);
                        } else {
                            keep.push(p);
                        }
                    }
                    queue.waiting = keep;
                }
            }
            wake
        };
        for p in wake {
            let inv = self.m.parked[p as usize].take().expect("parked invocation");
            self.admit_fallback(inv);
        }
    }
}
