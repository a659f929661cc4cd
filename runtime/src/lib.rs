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
mod rounds;
pub mod server;
mod shard_loop;

pub use clock::Clock;
pub use metrics::{Metrics, ShardMetrics};
pub use rounds::{Disk, Round, RoundChange, Rounds, run_round, run_rounds};

pub(crate) use rounds::Doorbells;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::Duration;
use styx_engine::{App, Config, Message, Reply, Shard};

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
    #[error("this node runs no shard in this run's layout: only `run_rounds` runs a spare")]
    NoLocalShards,
    #[error("cannot listen on {addr}: {reason}")]
    Listen { addr: std::net::SocketAddr, reason: String },
    #[error("shards stopped for a handover: {0}")]
    Handover(String),
    #[error("joining the cluster: {0}")]
    Join(String),
    #[error("the data directory: {0}")]
    Disk(String),
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
///
/// `threads` counts every busy executor thread of the machine: a node of a
/// cluster counts its neighbours' too ([`cluster::Spec::neighbours`]).
/// Three local nodes of one shard each on two cores, YCSB-T open loop over
/// TCP at 20 000 requests/s with exactly-once names: p50 ~300 ms while
/// the three shards polled (each node saw a spare core), 3.0 ms without.
pub fn idle_poll_default(threads: usize) -> u64 {
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    if cores > threads { IDLE_POLL_US } else { 0 }
}

/// How long an idle executor spins before it parks its thread, for
/// `threads` busy executor threads on the machine: [`SPIN_BEFORE_PARK`]
/// unless they outnumber the cores, else not at all. A thread spinning
/// there holds a core another shard's thread needs (glommio's spin polls
/// its rings, ~4 clock reads a turn: 13% of a shard's samples). Three
/// local nodes of one shard each on two cores, YCSB-T over TCP closed
/// loop: 1.27× without the spin, p99 at 40 000/s 8.6 → 5.7 ms (medians);
/// one node of two shards on two cores without it: 0.67× (a parked
/// peer takes ~80 µs to wake).
pub fn spin_before_park_default(threads: usize) -> Duration {
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    if threads > cores {
        Duration::ZERO
    } else {
        SPIN_BEFORE_PARK
    }
}

/// How long an idle executor spins before it parks, by default.
pub const SPIN_BEFORE_PARK: Duration = Duration::from_micros(50);

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
    /// block of them as tasks (after a handover of [`run_rounds`], a shard
    /// arriving runs on the one with the fewest); `None`: [`threads_default`]. Fewer threads
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
    /// Called once on each shard's snapshot writer (`snapshot-SHARD`, a
    /// thread for the whole run that writes nothing else, so a priority
    /// lowered for good stays with that work; started from the shard's
    /// thread, it shares its pinning), before its first file: the place for
    /// a binary to lower that thread's CPU priority (`styxd` puts it in the
    /// `SCHED_IDLE` class on the process's CPUs), so the files' sorting and
    /// encoding run on what the shards leave idle. Every node of a cluster
    /// snapshots after the same epoch: three local nodes of 33 000 changed
    /// accounts each took both cores for ~15 ms a second, and the open
    /// loop's p99 in that 100 ms was 15–30 ms against ~3 ms in the others.
    /// Called too on the thread that merges a long chain of a shard's
    /// snapshot files into one base (`compact-SHARD`, one per merge).
    pub on_background: Option<fn()>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            shards: std::thread::available_parallelism().map_or(1, |n| n.get()) as u16,
            engine: Config::default(),
            pin: true,
            spin_before_park: SPIN_BEFORE_PARK,
            idle_poll_us: IDLE_POLL_US,
            io_memory: 1 << 20,
            metrics: None,
            durable: None,
            cluster: None,
            threads: None,
            on_quiet: None,
            on_background: None,
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
