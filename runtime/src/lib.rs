//! The production driver: the runtime glue that the engine core stays free of.
//!
//! One glommio executor per shard, pinned to its own CPU, runs the shard's
//! loop (`shard_loop`): it moves the shard's message batches over queues
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

use glommio::channels::channel_mesh::MeshBuilder;
use glommio::{LocalExecutorBuilder, Placement};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::task::Poll;
use std::time::Duration;
use styx_engine::{App, Config, Message, Reply, Shard, ShardId};

/// Batches queued between two shards before senders hold back.
pub const MESH_CAPACITY: usize = 4096;

/// Doorbells queued for a parked shard (one is enough to wake it).
const DOORBELLS_MAX: usize = 1024;

/// Errors of the runtime.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot start the executor of shard {shard}: {source}")]
    Executor {
        shard: usize,
        #[source]
        source: glommio::GlommioError<()>,
    },
    #[error("shard {shard} stopped abnormally: {message}")]
    Shard { shard: usize, message: String },
    #[error("{0} shards requested; between 1 and {max} are supported", max = styx_engine::SHARDS_MAX)]
    Shards(usize),
    #[error("cannot listen on {addr}: {reason}")]
    Listen { addr: std::net::SocketAddr, reason: String },
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

/// The poll budget for `local_shards` shards with I/O (a daemon's: sockets
/// and a log) unless told otherwise: [`IDLE_POLL_US`] when the machine has
/// a core beyond them, else 0. A polling shard holds its core; with a shard
/// on every core, polling delays what the shards wait on — the log's
/// fdatasync runs on a kernel worker thread, and clients may share the
/// machine. Two shards on two cores over TCP at 150 000 requests/s: the
/// sync worker waited ~1.2–1.8 ms on average for a core while both shards
/// polled (`perf sched latency`), and p99 went from ~5 ms to ~3 ms without
/// polling (median of the runs the VM did not stall), at ~5% less
/// closed-loop throughput.
pub fn idle_poll_default(local_shards: usize) -> u64 {
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    if cores > local_shards { IDLE_POLL_US } else { 0 }
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

/// Runs `shards` executors until every frontend is done; returns their
/// outputs in shard order. `make` builds each shard's frontend on its own
/// thread and may load initial state into the shard.
pub fn run<F, M>(app: Arc<App>, opts: Options, make: M) -> Result<Vec<F::Output>, Error>
where
    F: Frontend,
    M: Fn(&mut Shard) -> F + Send + Sync + 'static,
{
    let (n, local) = match &opts.cluster {
        Some(run) => (usize::from(run.spec.n_shards()), run.local_shards()),
        None => (opts.shards as usize, 0..opts.shards),
    };
    if n == 0 || n > styx_engine::SHARDS_MAX {
        return Err(Error::Shards(n));
    }
    let n_local = local.len();
    let base = local.start;
    let cpus = std::thread::available_parallelism().map_or(1, |c| c.get());
    let mesh: MeshBuilder<(), _> = MeshBuilder::full(n_local, DOORBELLS_MAX);
    let links = Arc::new(Links::new(n, MESH_CAPACITY));
    let make = Arc::new(make);
    let done = Arc::new(AtomicUsize::new(0));
    let clock = Clock::new();
    let mut handles = Vec::with_capacity(n_local);
    for i in 0..n_local {
        let placement = if opts.pin && n_local <= cpus {
            // By the shard's id across the cluster: nodes sharing a machine
            // (a test, a benchmark) spread over its CPUs instead of all
            // pinning their first shard to CPU 0.
            Placement::Fixed((base as usize + i) % cpus)
        } else {
            Placement::Unbound
        };
        let (mesh, make, done, app, opts) = (mesh.clone(), make.clone(), done.clone(), app.clone(), opts.clone());
        let links = links.clone();
        let handle = LocalExecutorBuilder::new(placement)
            .name(&format!("shard-{}", base as usize + i))
            .spin_before_park(opts.spin_before_park)
            .io_memory(opts.io_memory)
            .spawn(move || async move {
                let (senders, receivers) = mesh.join().await.expect("channel mesh");
                // Shard ids follow the mesh's peer ids (its join order).
                let id = base + senders.peer_id() as ShardId;
                let mut shard = Shard::new(app, opts.engine.clone(), id, n as u16);
                let frontend = make(&mut shard);
                let metrics = opts.metrics.as_ref().map(|m| m.shards[senders.peer_id()].clone());
                let waiter = Rc::new(RefCell::new(None));
                let remote = match &opts.cluster {
                    Some(run) if run.is_cluster() => {
                        match remote::Remote::connect(run.clone(), id, links.clone(), waiter.clone(), metrics.clone())
                            .await
                        {
                            Ok(r) => Some(r),
                            Err(e) => {
                                run.failure.fail(e);
                                let output = frontend.finish(&shard);
                                settle().await;
                                return (id, output);
                            }
                        }
                    }
                    _ => None,
                };
                let durable = match &opts.durable {
                    Some(d) => {
                        Some(durable::ShardDurable::start(d.clone(), &mut shard, waiter.clone(), metrics.clone()).await)
                    }
                    None => None,
                };
                let mesh = Mesh {
                    links,
                    doorbells: senders,
                    n,
                    base: usize::from(base),
                    n_local,
                    done,
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
                    clock,
                    opts.idle_poll_us,
                    opts.on_quiet,
                )
                .run(receivers)
                .await;
                (id, output)
            })
            .map_err(|source| Error::Executor { shard: i, source })?;
        handles.push(handle);
    }
    let mut outputs: Vec<Option<F::Output>> = (0..n_local).map(|_| None).collect();
    for (i, h) in handles.into_iter().enumerate() {
        let (id, output) = h.join().map_err(|e| Error::Shard {
            shard: i,
            message: e.to_string(),
        })?;
        outputs[usize::from(id - base)] = Some(output);
    }
    Ok(outputs.into_iter().map(|o| o.expect("every shard reported")).collect())
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
