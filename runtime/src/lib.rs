//! The production driver: the runtime glue that the engine core stays free of.
//!
//! Glommio executors, each pinned to its own CPU, run the shards' loops
//! (`shard_loop`; one shard per executor by default, or a block of them as
//! tasks of one, see [`Options::threads`]): a loop moves the shard's message batches over queues
//! between shards (`link`; glommio's channel mesh only rings a parked
//! shard's doorbell) and, in a cluster, TCP links to other nodes
//! (`remote`), feeds it requests from a [`Frontend`] (an in-process load
//! generator, TCP connections) and hands replies back. [`run`] starts the
//! executors and waits for them.

#![forbid(unsafe_code)]

mod clock;
pub mod cluster;
pub mod durable;
mod link;
pub mod metrics;
pub mod preload;
mod remote;
pub mod server;
mod shard_loop;

pub use clock::Clock;
use link::Links;
pub use metrics::{Metrics, ShardMetrics};
use shard_loop::{Mesh, ShardLoop};

use glommio::channels::channel_mesh::{MeshBuilder, Senders};
use glommio::channels::shared_channel::ConnectedReceiver;
use glommio::{LocalExecutorBuilder, Placement};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicUsize;
use std::task::{Poll, Waker};
use std::time::Duration;
use styx_engine::{App, Config, Epoch, Handoff, Layout, Message, Reply, Shard, ShardId};

/// Batches queued between two shards before senders hold back.
pub const MESH_CAPACITY: usize = 4096;

/// Doorbells queued for a parked shard (one is enough to wake it).
const DOORBELLS_MAX: usize = 1024;

/// Errors of the runtime.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot start executor {executor}: {source}")]
    Executor {
        executor: usize,
        #[source]
        source: glommio::GlommioError<()>,
    },
    #[error("shard {shard} stopped abnormally: {message}")]
    Shard { shard: usize, message: String },
    #[error("{0} shards requested; between 1 and {max} are supported", max = styx_engine::SHARDS_MAX)]
    Shards(usize),
    #[error("this node runs no shard in this run's layout: a spare is not supported by the runtime yet")]
    NoLocalShards,
    #[error("cannot listen on {addr}: {reason}")]
    Listen { addr: std::net::SocketAddr, reason: String },
    #[error("shards stopped for a handover: {0}")]
    Handover(String),
}

/// How long a shard polls without progress before it parks, by default.
/// While an epoch runs a peer's message is due any microsecond, and
/// polling (a few loads per check) answers it in ~1 µs where a parked
/// shard takes ~80 µs to wake. But a peer that is not running (more busy
/// threads than cores, or a slow fsync) never answers a poller: past this
/// budget the shard parks and gives the core away until a doorbell, its
/// log or a client wakes it. A run of one shard never polls: it has no
/// peer, and what it waits for (a client, the log) wakes it when parked;
/// polling there only took the core from the log's sync and the clients
/// (p99 at 20 000 requests/s over TCP ~4.6 ms polling, ~1.2 ms parking).
pub const IDLE_POLL_US: u64 = 200;

/// Executor threads for `local_shards` shards unless told otherwise: one
/// per shard up to one per core. More threads than cores only make the
/// kernel time-slice shards that wait on each other at every barrier: 4
/// YCSB-T shards on 4 threads on this 2-core VM committed 153 K/s, on 2
/// threads 2.21 M/s (2 shards on 2 threads: 2.15 M/s).
pub fn threads_default(local_shards: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    local_shards.min(cores).max(1)
}

/// The poll budget for `threads` executor threads with I/O (a daemon's: sockets
/// and a log) unless told otherwise: [`IDLE_POLL_US`] when the machine has
/// a core beyond them, else 0. A polling shard holds its core; with a shard
/// on every core, polling delays what the shards wait on — the log's
/// fdatasync runs on a kernel worker thread, and clients may share the
/// machine. Two shards on two cores over TCP at 150 000 requests/s: the
/// sync worker waited ~1.2–1.8 ms on average for a core while both shards
/// polled (`perf sched latency`), and p99 went from ~5 ms to ~3 ms without
/// polling (median of the runs the VM did not stall), at ~5% less
/// closed-loop throughput.
pub fn idle_poll_default(threads: usize) -> u64 {
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    if cores > threads { IDLE_POLL_US } else { 0 }
}

/// How to run the shards.
#[derive(Clone, Debug)]
pub struct Options {
    pub shards: u16,
    pub engine: Config,
    /// Pin shard `i` to CPU `i` (when there are enough CPUs).
    pub pin: bool,
    /// How long an idle executor spins before it parks: parking saves CPU
    /// but a parked peer takes ~80 µs to wake instead of ~10 µs.
    pub spin_before_park: Duration,
    /// How long a shard with an epoch open polls (spins) for its peers
    /// without progress before it parks, in µs; see [`IDLE_POLL_US`].
    pub idle_poll_us: u64,
    /// Memory glommio registers for I/O per executor.
    pub io_memory: usize,
    /// Where shards publish their counters (about every millisecond).
    pub metrics: Option<Arc<Metrics>>,
    /// The input log and snapshots (recovered already); `None` runs in
    /// memory only (then `engine.durability` must be `None`).
    pub durable: Option<Arc<durable::Durable>>,
    /// This node's part of a cluster run: its shards are `cluster`'s local
    /// ones (`shards` is ignored) and the others are reached over TCP.
    /// `None`: every shard is here.
    pub cluster: Option<Arc<cluster::Run>>,
    /// Executor threads for this node's shards, each running a contiguous
    /// block of them as tasks; `None`: [`threads_default`]. Fewer threads
    /// than shards make a shard a unit of placement smaller than a core (a
    /// node can hand one over without the others); shards sharing a thread
    /// take turns at each iteration that made progress.
    pub threads: Option<usize>,
    /// Called on a shard's thread when the shard has made no progress for
    /// a second after making some (once per quiet spell, and once after
    /// loading): the place for a binary to have its allocator give the
    /// thread's freed memory back to the system (`styxd` calls mimalloc's
    /// `mi_collect`). A thread-caching allocator otherwise keeps what a
    /// burst of load freed resident for as long as the shard idles, since
    /// it returns memory only when the thread allocates again.
    pub on_quiet: Option<fn()>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            shards: std::thread::available_parallelism().map_or(1, |n| n.get()) as u16,
            engine: Config::default(),
            pin: true,
            spin_before_park: Duration::from_micros(50),
            idle_poll_us: IDLE_POLL_US,
            io_memory: 1 << 20,
            metrics: None,
            durable: None,
            cluster: None,
            threads: None,
            on_quiet: None,
        }
    }
}

/// What feeds a shard requests and takes its replies, on the shard's thread.
pub trait Frontend: 'static {
    type Output: Send + 'static;

    /// Submits whatever work is ready; returns whether it did anything.
    fn pump(&mut self, shard: &mut Shard, now_us: u64) -> bool;

    /// Takes the replies the shard released.
    fn deliver(&mut self, replies: &mut Vec<Reply>, now_us: u64);

    /// When the frontend next has work without being woken by a reply (an
    /// open-loop generator's next send time), in µs.
    fn next_wakeup_us(&self) -> Option<u64> {
        None
    }

    /// Whether the frontend's work arrives or leaves through the executor's
    /// I/O (sockets): then a shard polling for its peers still lets the
    /// executor poll its ring every few microseconds. An in-process load
    /// generator has none, and skips that cost.
    fn does_io(&self) -> bool {
        true
    }

    /// Whether the shard should finish its local work of a running epoch
    /// before this frontend pumps. Worth it when pumping costs real time
    /// on the shard's thread — an in-process generator drawing requests
    /// took ~13% of a shard's time at 1M accounts — since what is pumped
    /// during an epoch waits for the next one anyway, while a peer may be
    /// waiting for this shard's messages: run mid-epoch, that pump left
    /// each peer batch ~38 µs in its link instead of ~8 µs. A socket
    /// frontend only hands over requests already decoded, and holding
    /// them back only adds latency (open loop over TCP: p99.99 rose).
    fn pump_after_local_work(&self) -> bool {
        false
    }

    /// Registers the shard loop's waker for when the frontend gets work
    /// while the loop is parked (a client request arrived); `Ready` if it
    /// already has some.
    fn poll_wake(&mut self, _cx: &mut std::task::Context<'_>) -> Poll<()> {
        Poll::Pending
    }

    /// Whether this frontend will submit nothing more and awaits nothing.
    fn is_done(&self) -> bool;

    /// Called once all shards are done, with this shard's final state.
    fn finish(self, shard: &Shard) -> Self::Output;
}

/// Runs this node's shards until every frontend is done; returns their
/// outputs in shard order. `make` builds each shard's frontend on its
/// executor's thread and may load initial state into the shard; it must
/// not block waiting for another shard (two shards may share a thread).
///
/// The shards run on [`Options::threads`] executors, one thread each, a
/// contiguous block of shards per executor ([`executor_of`]).
pub fn run<F, M>(app: Arc<App>, opts: Options, make: M) -> Result<Vec<F::Output>, Error>
where
    F: Frontend,
    M: Fn(&mut Shard) -> F + Send + Sync + 'static,
{
    let round = run_round(app, opts, Vec::new(), make)?;
    match round.paused {
        None => Ok(round.outputs),
        Some((epoch, _)) => Err(Error::Handover(format!(
            "at the end of epoch {epoch}; drive handovers with run_round"
        ))),
    }
}

/// How a round of [`run_round`] ended.
pub struct Round<O> {
    /// Each local shard's frontend output, in shard order.
    pub outputs: Vec<O>,
    /// `Some((epoch, layout))` if every shard of the cluster stopped at the
    /// end of `epoch` for a handover (`Config::pause_at_handover`);
    /// `layout` places them from the next epoch on.
    pub paused: Option<(Epoch, Layout)>,
    /// Then, every local shard's hand-off, in shard order: the driver
    /// sends each to the node `layout` puts it on
    /// ([`cluster::Run::hand_over`]) and starts the next round there with
    /// it ([`run_round`]'s `resume`).
    pub handoffs: Vec<Handoff>,
}

/// A round change of [`run_rounds`]: a handover at the end of `epoch`.
#[derive(Clone, Debug)]
pub struct RoundChange {
    pub epoch: Epoch,
    /// Where the shards run from the next epoch on.
    pub layout: Layout,
    /// When this node's round ended, and when it joined the next one.
    pub ended: std::time::Instant,
    pub joined: std::time::Instant,
    /// The shards this node handed to other nodes, with their entities.
    pub sent: Vec<(ShardId, usize)>,
}

/// How a node's [`run_rounds`] ended: the last round's outputs, and every
/// round change on the way.
pub struct Rounds<O> {
    pub outputs: Vec<O>,
    pub changes: Vec<RoundChange>,
    /// Why the last round's run failed, if it did: the frontends may have
    /// finished first (a node that leaves closes its links), or not — the
    /// caller's frontends know.
    pub failed: Option<String>,
}

/// This node's part of an in-memory cluster, across handovers: joins with
/// `layout`, runs rounds ([`run_round`]; `options` gives each round's
/// [`Options`] for its [`cluster::Run`] — `cluster` and
/// `engine.pause_at_handover` are set here, and `metrics`, if any, must
/// be of that run's local shards), and at each handover sends the shards
/// leaving this node to theirs (as bytes over the control connections:
/// [`cluster::Run::hand_over`]), keeps those staying as they are, joins
/// the next round with the new layout and resumes them. Returns once a
/// round ends without a handover; a run that failed in that last round is
/// reported in [`Rounds::failed`] (a node that finishes first closes its
/// links, so whether that lost anything is for the caller's frontends to
/// say). A failure during a handover is an error: the shards live only in
/// memory.
pub fn run_rounds<F, M>(
    app: Arc<App>,
    control: &mut cluster::Control,
    layout: Layout,
    options: impl Fn(Arc<cluster::Run>) -> Options,
    make: M,
    stop: &std::sync::atomic::AtomicBool,
    timeout: Duration,
) -> Result<Rounds<F::Output>, Error>
where
    F: Frontend,
    M: Fn(&mut Shard) -> F + Clone + Send + Sync + 'static,
{
    let mut layout = layout;
    let mut resume: Vec<Handoff> = Vec::new();
    let mut changes: Vec<RoundChange> = Vec::new();
    loop {
        let run = match control.join(cluster::Survey::default(), &layout, stop) {
            Ok(Some(run)) => Arc::new(run),
            Ok(None) => return Err(Error::Handover("stopped while joining".into())),
            Err(e) => return Err(Error::Handover(format!("joining: {e}"))),
        };
        if let Some(c) = changes.last_mut() {
            c.joined = std::time::Instant::now();
        }
        let mut opts = options(run.clone());
        opts.cluster = Some(run.clone());
        opts.engine.pause_at_handover = true;
        let round = run_round(app.clone(), opts, std::mem::take(&mut resume), make.clone())?;
        let Some((epoch, next)) = round.paused else {
            return Ok(Rounds {
                outputs: round.outputs,
                changes,
                failed: run.failure.reason(),
            });
        };
        let ended = std::time::Instant::now();
        let node = run.node;
        // The shards that stay go on from their hand-offs as they are;
        // only those changing nodes cross as bytes.
        let (stay, go): (Vec<Handoff>, Vec<Handoff>) = round
            .handoffs
            .into_iter()
            .partition(|h| next.node_of(h.shard()) == node);
        let sent = go.iter().map(|h| (h.shard(), h.entities())).collect();
        let outgoing = go
            .iter()
            .map(|h| (next.node_of(h.shard()), h.shard(), h.encode()))
            .collect();
        let incoming = run.hand_over(epoch, outgoing, timeout).map_err(Error::Handover)?;
        resume = stay;
        for bytes in incoming {
            let h = Handoff::decode(&bytes, &app).map_err(|e| Error::Handover(format!("a hand-off: {e}")))?;
            resume.push(h);
        }
        changes.push(RoundChange {
            epoch,
            layout: next.clone(),
            ended,
            joined: ended,
            sent,
        });
        layout = next;
    }
}

/// [`run`], one round of handovers at a time: with
/// `opts.engine.pause_at_handover` (an in-memory cluster run), the shards
/// hold the run's layout, so a `__handover` to another node is decided
/// like any other, and at the end of the epoch where the layout changed
/// every shard of the cluster stops; once every node's shards have
/// stopped (nothing of that epoch in flight, nothing of the next begun)
/// the round ends with every local shard's hand-off. `resume` holds the
/// shards this node runs from a hand-off (every one it runs, after the
/// first round): they are rebuilt from it instead of started empty, and
/// `make` sees them with their state (a shard with `epoch() > 0`: load
/// nothing into it).
pub fn run_round<F, M>(
    app: Arc<App>,
    mut opts: Options,
    resume: Vec<Handoff>,
    make: M,
) -> Result<Round<F::Output>, Error>
where
    F: Frontend,
    M: Fn(&mut Shard) -> F + Send + Sync + 'static,
{
    let (n, local): (usize, Vec<ShardId>) = match &opts.cluster {
        Some(run) => (usize::from(run.spec.n_shards()), run.local_shards().to_vec()),
        None => (opts.shards as usize, (0..opts.shards).collect()),
    };
    if n == 0 || n > styx_engine::SHARDS_MAX {
        return Err(Error::Shards(n));
    }
    let n_local = local.len();
    if n_local == 0 {
        // A spare would have to take part in the control plane's rounds
        // and snapshot commits without shards: not built (docs/nodes.md).
        return Err(Error::NoLocalShards);
    }
    if let Some(m) = &opts.metrics {
        assert_eq!(m.ids, local, "metrics of other shards than this node's");
    }
    if opts.engine.pause_at_handover && (opts.durable.is_some() || opts.cluster.is_none()) {
        return Err(Error::Handover(
            "handovers between nodes run in memory, in a cluster run, so far (docs/nodes.md)".into(),
        ));
    }
    if opts.engine.pause_at_handover {
        // No node may be left without shards: this runtime runs no spare.
        opts.engine.spare_nodes = false;
    }
    let mut resumed: Vec<Option<Handoff>> = local.iter().map(|_| None).collect();
    if !resume.is_empty() {
        // After a handover every shard goes on from its hand-off: all of
        // this node's, from one epoch, placed by this run's layout.
        let layout = opts.cluster.as_ref().map(|r| r.layout().clone());
        let mut ids: Vec<ShardId> = resume.iter().map(|h| h.shard()).collect();
        ids.sort_unstable();
        let epochs: Vec<Epoch> = resume.iter().map(|h| h.epoch()).collect();
        if ids != local
            || epochs.iter().any(|e| *e != epochs[0])
            || resume.iter().any(|h| Some(h.layout().placed()) != layout)
        {
            return Err(Error::Handover(format!(
                "hand-offs of shards {ids:?} at epochs {epochs:?} for a node running {local:?} by layout {layout:?}"
            )));
        }
    }
    for h in resume {
        match local.iter().position(|s| *s == h.shard()) {
            Some(l) if resumed[l].is_none() => resumed[l] = Some(h),
            _ => {
                return Err(Error::Handover(format!(
                    "a hand-off of shard {}, which this node does not run (or twice)",
                    h.shard()
                )));
            }
        }
    }
    // CPUs and executor names as if the node's shards were numbered in
    // order, as the cluster file numbers them: nodes sharing a machine
    // spread over its CPUs whatever the layout.
    let pin_base = match &opts.cluster {
        Some(run) => usize::from(run.spec.shards_of(run.node).start),
        None => 0,
    };
    let mut index = vec![u16::MAX; n];
    for (l, s) in local.iter().enumerate() {
        index[usize::from(*s)] = l as u16;
    }
    let n_exec = opts
        .threads
        .unwrap_or_else(|| threads_default(n_local))
        .clamp(1, n_local);
    let cpus = std::thread::available_parallelism().map_or(1, |c| c.get());
    let mesh: MeshBuilder<u16, _> = MeshBuilder::full(n_exec, DOORBELLS_MAX);
    let node = Arc::new(Node {
        app,
        links: Arc::new(Links::new(n, MESH_CAPACITY)),
        make,
        done: Arc::new(AtomicUsize::new(0)),
        paused: Arc::new(AtomicUsize::new(0)),
        resumed: Mutex::new(resumed),
        paused_layout: Mutex::new(None),
        clock: Clock::new(),
        n,
        local,
        index,
        opts,
    });
    let mut handles = Vec::with_capacity(n_exec);
    for e in 0..n_exec {
        let placement = if node.opts.pin && n_exec <= cpus {
            // Numbered across the cluster as if every node ran as many
            // shards per thread as this one: nodes sharing a machine (a
            // test, a benchmark) spread over its CPUs instead of all
            // pinning their first executor to CPU 0.
            Placement::Fixed((pin_base * n_exec / n_local + e) % cpus)
        } else {
            Placement::Unbound
        };
        let (mesh, node) = (mesh.clone(), node.clone());
        let handle = LocalExecutorBuilder::new(placement)
            .name(&format!("shards-{}", node.local[first_of_executor(e, n_exec, n_local)]))
            .spin_before_park(node.opts.spin_before_park)
            .io_memory(node.opts.io_memory)
            .spawn(move || async move {
                let (senders, mut receivers) = mesh.join().await.expect("channel mesh");
                // Which shards an executor runs follows its id in the mesh
                // (the order executors joined it).
                let first = first_of_executor(senders.peer_id(), n_exec, n_local);
                let shards = first..first_of_executor(senders.peer_id() + 1, n_exec, n_local);
                let waiters: Rc<[Waiter]> = shards.clone().map(|_| Waiter::default()).collect();
                let doorbells = Rc::new(Doorbells {
                    senders,
                    n_exec,
                    n_local,
                    first,
                    waiters: waiters.clone(),
                });
                for (_, rx) in receivers.streams() {
                    glommio::spawn_local(doorbell(rx, first, waiters.clone())).detach();
                }
                let tasks: Vec<_> = shards
                    .map(|l| {
                        glommio::spawn_local(run_shard(
                            node.clone(),
                            l,
                            waiters[l - first].clone(),
                            doorbells.clone(),
                        ))
                    })
                    .collect();
                let mut outputs = Vec::with_capacity(tasks.len());
                for t in tasks {
                    outputs.push(t.await);
                }
                outputs
            })
            .map_err(|source| Error::Executor { executor: e, source })?;
        handles.push(handle);
    }
    let mut outputs: Vec<Option<F::Output>> = (0..n_local).map(|_| None).collect();
    let mut handoffs: Vec<Option<Handoff>> = (0..n_local).map(|_| None).collect();
    for (e, h) in handles.into_iter().enumerate() {
        let done = h.join().map_err(|err| Error::Shard {
            shard: usize::from(node.local[first_of_executor(e, n_exec, n_local)]),
            message: err.to_string(),
        })?;
        for (id, output, handoff) in done {
            let l = usize::from(node.index[usize::from(id)]);
            match output {
                Ok(o) => outputs[l] = Some(o),
                Err(e) => return Err(e),
            }
            handoffs[l] = handoff;
        }
    }
    let outputs = outputs.into_iter().map(|o| o.expect("every shard reported")).collect();
    let failed = node.opts.cluster.as_ref().is_some_and(|r| r.failure.is_failed());
    let paused = match handoffs.iter().filter(|h| h.is_some()).count() {
        0 => None,
        k if k == n_local => {
            let layout = node.paused_layout.lock().expect("layout lock").clone();
            let epoch = handoffs[0].as_ref().expect("counted").epoch();
            Some((epoch, layout.expect("a stopped shard left its layout")))
        }
        // Some stopped and others saw the run fail first: the stopped
        // ones' state would be lost with the round.
        k if failed => {
            return Err(Error::Handover(format!(
                "the cluster failed while {k} of {n_local} shards stopped for a handover: {}",
                node.opts
                    .cluster
                    .as_ref()
                    .and_then(|r| r.failure.reason())
                    .unwrap_or_default()
            )));
        }
        k => {
            return Err(Error::Handover(format!(
                "{k} of {n_local} shards stopped, the others ended otherwise"
            )));
        }
    };
    let handoffs = if paused.is_some() {
        handoffs.into_iter().flatten().collect()
    } else {
        Vec::new()
    };
    Ok(Round {
        outputs,
        paused,
        handoffs,
    })
}

/// What every shard of this node shares, whichever executor runs it.
struct Node<M> {
    app: Arc<App>,
    opts: Options,
    links: Arc<Links<Envelope>>,
    make: M,
    /// Local shards that have nothing left to do.
    done: Arc<AtomicUsize>,
    /// Local shards stopped for a handover, their batches written.
    paused: Arc<AtomicUsize>,
    /// Per local shard, the hand-off it resumes from.
    resumed: Mutex<Vec<Option<Handoff>>>,
    /// The layout the shards stopped at a handover with.
    paused_layout: Mutex<Option<Layout>>,
    clock: Clock,
    /// Shards of the whole run (every node).
    n: usize,
    /// This node's shards, in order: local shard `l` is `local[l]`.
    local: Vec<ShardId>,
    /// Per shard of the run, its local index (`u16::MAX`: on another node).
    index: Vec<u16>,
}

/// Starts local shard `l` (its frontend, links to other nodes, log) and
/// runs its loop as a task of the current executor.
#[allow(clippy::type_complexity)]
async fn run_shard<F, M>(
    node: Arc<Node<M>>,
    l: usize,
    waiter: Waiter,
    doorbells: Rc<Doorbells>,
) -> (ShardId, Result<F::Output, Error>, Option<Handoff>)
where
    F: Frontend,
    M: Fn(&mut Shard) -> F + Send + Sync + 'static,
{
    let opts = &node.opts;
    let id = node.local[l];
    let resumed = node.resumed.lock().expect("resumed lock")[l].take();
    let mut shard = match resumed {
        Some(h) => match Shard::take_over(node.app.clone(), opts.engine.clone(), h) {
            Ok(s) => s,
            Err(e) => {
                let e = Error::Shard {
                    shard: usize::from(id),
                    message: format!("cannot rebuild it from its hand-off: {e}"),
                };
                return (id, Err(e), None);
            }
        },
        None => {
            let mut shard = Shard::new(node.app.clone(), opts.engine.clone(), id, node.n as u16);
            if opts.engine.pause_at_handover
                && let Some(run) = &opts.cluster
            {
                // The run's layout, so that a handover to another node is
                // decided (a one-node layout refuses it).
                shard.set_layout(run.layout().clone());
            }
            shard
        }
    };
    let frontend = (node.make)(&mut shard);
    let metrics = opts.metrics.as_ref().map(|m| m.of(id).clone());
    let remote = match &opts.cluster {
        Some(run) if run.is_cluster() => {
            match remote::Remote::connect(run.clone(), id, node.links.clone(), waiter.clone(), metrics.clone()).await {
                Ok(r) => Some(r),
                Err(e) => {
                    run.failure.fail(e);
                    let output = frontend.finish(&shard);
                    settle().await;
                    return (id, Ok(output), None);
                }
            }
        }
        _ => None,
    };
    let durable = match &opts.durable {
        Some(d) => Some(durable::ShardDurable::start(d.clone(), &mut shard, waiter.clone(), metrics.clone()).await),
        None => None,
    };
    let mesh = Mesh {
        links: node.links.clone(),
        n: node.n,
        index: node.index.clone(),
        n_local: node.local.len(),
        shares_executor: doorbells.shares_executor(),
        doorbells,
        done: node.done.clone(),
        paused: node.paused.clone(),
        remote,
        run: opts.cluster.clone(),
    };
    let output = ShardLoop::new(
        shard,
        frontend,
        mesh,
        durable,
        metrics,
        waiter,
        node.clock,
        opts.idle_poll_us,
        opts.on_quiet,
    )
    .run()
    .await;
    let (output, handoff) = output;
    if let Some(h) = &handoff {
        let mut layout = node.paused_layout.lock().expect("layout lock");
        layout.get_or_insert_with(|| h.layout().placed());
    }
    (id, Ok(output), handoff)
}

/// Where a parked shard loop leaves its waker: whoever has work for it
/// (a peer's doorbell, its log, a client, a link to another node) wakes it.
pub(crate) type Waiter = Rc<RefCell<Option<Waker>>>;

/// Wakes a parked shard loop, if it is parked.
pub(crate) fn wake(waiter: &RefCell<Option<Waker>>) {
    if let Some(w) = waiter.borrow_mut().take() {
        w.wake();
    }
}

/// The first of the `n_local` local shards that executor `e` of `n_exec`
/// runs (`e == n_exec`: `n_local`). Blocks are contiguous and differ in
/// size by at most one.
pub fn first_of_executor(e: usize, n_exec: usize, n_local: usize) -> usize {
    e * n_local / n_exec
}

/// The executor that runs local shard `l` (the inverse of
/// [`first_of_executor`]: the last executor whose first shard is at most
/// `l`).
pub fn executor_of(l: usize, n_exec: usize, n_local: usize) -> usize {
    ((l + 1) * n_exec - 1) / n_local
}

/// How a shard wakes a parked peer of this node: directly when both run on
/// this executor, else by a doorbell to the peer's executor (glommio's
/// channel mesh, which wakes a sleeping thread).
pub(crate) struct Doorbells {
    senders: Senders<u16>,
    n_exec: usize,
    n_local: usize,
    /// The first local shard of this executor.
    first: usize,
    /// This executor's shards' waiters, from `first` on.
    waiters: Rc<[Waiter]>,
}

impl Doorbells {
    /// Whether this executor runs more than one shard.
    pub(crate) fn shares_executor(&self) -> bool {
        self.waiters.len() > 1
    }

    /// Wakes local shard `l` (known to be parked).
    pub(crate) fn ring(&self, l: usize) {
        let e = executor_of(l, self.n_exec, self.n_local);
        if e == self.senders.peer_id() {
            wake(&self.waiters[l - self.first]);
            return;
        }
        match self.senders.try_send_to(e, l as u16) {
            // A full queue: the executor has a thousand rings unread (a ring
            // is sent once per park); this shard re-checks its links at its
            // park's timer at the latest.
            Ok(()) | Err(glommio::GlommioError::WouldBlock(_)) => {}
            // The peer's executor is gone: the engine cannot go on without it.
            Err(err) => panic!("cannot wake local shard {l}: {err}"),
        }
    }
}

/// Wakes this executor's shard loops as their doorbells ring.
async fn doorbell(rx: ConnectedReceiver<u16>, first: usize, waiters: Rc<[Waiter]>) {
    while let Some(l) = rx.recv().await {
        wake(&waiters[usize::from(l) - first]);
    }
}

/// A batch between two shards, stamped with its send time.
pub(crate) struct Envelope {
    pub(crate) sent_us: u64,
    pub(crate) batch: Vec<Message>,
}

/// Lets the tasks cancelled at the end of a run (listeners, links) drop
/// their sockets before the executor stops: a task is only dropped when
/// its executor runs it once more, and a listener left open would keep
/// taking a share of new connections (SO_REUSEPORT) and never answer.
pub(crate) async fn settle() {
    glommio::timer::sleep(Duration::from_millis(2)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executors_run_contiguous_blocks_that_differ_by_at_most_one() {
        for n_local in 1..=SHARDS_TESTED {
            for n_exec in 1..=n_local {
                let sizes: Vec<usize> = (0..n_exec)
                    .map(|e| first_of_executor(e + 1, n_exec, n_local) - first_of_executor(e, n_exec, n_local))
                    .collect();
                assert_eq!(sizes.iter().sum::<usize>(), n_local);
                let (min, max) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
                assert!(*min >= 1 && max - min <= 1, "{n_local} on {n_exec}: {sizes:?}");
                for l in 0..n_local {
                    let e = executor_of(l, n_exec, n_local);
                    let block = first_of_executor(e, n_exec, n_local)..first_of_executor(e + 1, n_exec, n_local);
                    assert!(
                        block.contains(&l),
                        "{n_local} on {n_exec}: shard {l} is not in {e}'s {block:?}"
                    );
                }
            }
        }
    }

    const SHARDS_TESTED: usize = 70;
}
