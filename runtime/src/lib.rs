//! The production driver: the runtime glue that the engine core stays free of.
//!
//! One glommio executor per shard, pinned to its own CPU, runs a loop that
//! moves the shard's messages over a channel mesh (lock-free SPSC queues),
//! feeds it requests from a [`Frontend`] (an in-process load generator, TCP
//! connections) and hands replies back. Everything the shard emits in one
//! loop iteration for a peer leaves as one batch: cross-core hops cost tens
//! of microseconds when the peer is parked, so messages travel in bulk.
//!
//! The loop never blocks on a full channel (two shards blocked sending to
//! each other would deadlock): a batch that does not fit waits in an
//! overflow queue, and the frontend is not pumped until it drains.

#![forbid(unsafe_code)]

mod clock;
pub mod cluster;
pub mod durable;
mod link;
pub mod metrics;
pub mod preload;
mod remote;
pub mod server;

pub use clock::Clock;
use link::Links;
pub use metrics::{Metrics, ShardMetrics};

use glommio::channels::channel_mesh::{MeshBuilder, Receivers, Senders};
use glommio::channels::shared_channel::ConnectedReceiver;
use glommio::{GlommioError, LocalExecutorBuilder, Placement};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Poll, Waker};
use std::time::Duration;
use styx_engine::{App, Config, Message, Outputs, Reply, Shard, ShardId, Stage};

/// Batches queued between two shards before senders hold back.
pub const MESH_CAPACITY: usize = 4096;

/// Doorbells queued for a parked shard (one is enough to wake it).
const DOORBELLS_MAX: usize = 1024;

/// How often a shard publishes its counters, in µs.
const METRICS_PUBLISH_US: u64 = 1_000;

/// How long a shard spins without progress before it parks. While an epoch
/// runs a peer's message is due any microsecond, and spinning (a few loads
/// per check) answers it in ~1 µs where a parked shard takes ~80 µs to
/// wake. But a peer that is not running (more threads than cores, or a slow
/// fsync) never answers a spinner: past this budget the shard parks and
/// gives the core away until a doorbell, its log or a client wakes it.
const SPIN_US: u64 = 200;

/// How long a quiet shard (no epoch open, nothing pending or held) parks
/// at most. Whatever it waits for wakes it at once (a client's request, a
/// peer's doorbell, the log); the timer only bounds how stale its published
/// counters and its view of a cluster failure or a shutdown get. Parking
/// this long instead of 1 ms, and not spinning first, takes an idle daemon
/// from a fifth of a core to well under 1%.
const QUIET_PARK_US: u64 = 50_000;

/// A shard with open work that made no progress for this long logs its
/// state (a stuck run is diagnosed from that line).
const STALL_REPORT_US: u64 = 5_000_000;

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
}

impl Default for Options {
    fn default() -> Options {
        Options {
            shards: std::thread::available_parallelism().map_or(1, |n| n.get()) as u16,
            engine: Config::default(),
            pin: true,
            spin_before_park: Duration::from_micros(50),
            io_memory: 1 << 20,
            metrics: None,
            durable: None,
            cluster: None,
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
                    base: usize::from(base),
                    n_local,
                    remote,
                    run: opts.cluster.clone(),
                };
                let output = drive(
                    shard, frontend, mesh, receivers, done, n, clock, metrics, durable, waiter,
                )
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

/// How a shard reaches its peers: in-process links (with doorbells for the
/// shards of this node) and, in a cluster, connections to the others.
struct Mesh {
    links: Arc<Links<Envelope>>,
    doorbells: Senders<()>,
    /// The first local shard's id (doorbells are numbered from it).
    base: usize,
    n_local: usize,
    remote: Option<remote::Remote>,
    run: Option<Arc<cluster::Run>>,
}

impl Mesh {
    /// Sends a batch from `me` to `to`; gives it back when the way is full.
    fn send(&mut self, me: usize, to: usize, envelope: Envelope) -> Result<(), Envelope> {
        if let Some(r) = &mut self.remote
            && r.is_remote(to)
        {
            return r
                .send(to, envelope.batch)
                .map_err(|batch| Envelope { sent_us: 0, batch });
        }
        let parked = self.links.send(me, to, envelope)?;
        if parked {
            ring(&self.doorbells, to - self.base);
        }
        Ok(())
    }

    fn failed(&self) -> bool {
        self.run.as_ref().is_some_and(|r| r.failure.is_failed())
    }
}

/// A batch between two shards, stamped with its send time.
pub(crate) struct Envelope {
    pub(crate) sent_us: u64,
    pub(crate) batch: Vec<Message>,
}

/// Time batches spent between shards (reported with `STYX_PROFILE`).
#[derive(Default)]
struct Transit {
    batches: u64,
    messages: u64,
    total_us: u64,
}

impl Transit {
    fn note(&mut self, e: &Envelope, now_us: u64) {
        self.batches += 1;
        self.messages += e.batch.len() as u64;
        if e.sent_us != 0 {
            self.total_us += now_us.saturating_sub(e.sent_us);
        }
    }
}

/// Wakes the shard loop when a doorbell rings (a peer sent to a parked shard).
async fn doorbell(rx: ConnectedReceiver<()>, waiter: Rc<RefCell<Option<Waker>>>) {
    while rx.recv().await.is_some() {
        if let Some(w) = waiter.borrow_mut().take() {
            w.wake();
        }
    }
}

/// Rings `to`'s doorbell. A full doorbell queue already holds a ring.
fn ring(doorbells: &Senders<()>, to: usize) {
    match doorbells.try_send_to(to, ()) {
        Ok(()) | Err(GlommioError::WouldBlock(_)) => {}
        // The peer's executor is gone: the engine cannot go on without it.
        Err(e) => panic!("cannot wake shard {to}: {e}"),
    }
}

#[allow(clippy::too_many_arguments)]
async fn drive<F: Frontend>(
    mut shard: Shard,
    mut frontend: F,
    mut mesh: Mesh,
    mut receivers: Receivers<()>,
    done: Arc<AtomicUsize>,
    n: usize,
    clock: Clock,
    metrics: Option<Arc<ShardMetrics>>,
    mut durable: Option<durable::ShardDurable>,
    waiter: Rc<RefCell<Option<Waker>>>,
) -> F::Output {
    let me = shard.id() as usize;
    for (_, rx) in receivers.streams() {
        glommio::spawn_local(doorbell(rx, waiter.clone())).detach();
    }
    let profile = std::env::var_os("STYX_PROFILE").is_some();
    let mut transit = Transit::default();
    let mut iterations = 0u64;
    let started = clock.now_us();
    let mut out = Outputs::default();
    let mut overflow: VecDeque<(usize, Vec<Message>)> = VecDeque::new();
    let mut counted = false;
    let mut progress_us = 0;
    let mut reported_us = 0;
    let (mut watched_epoch, mut watched_us) = (0, 0);
    let mut whys = 0u8;
    let mut busy_us = 0u64;
    let mut published_us = 0;
    // Per stage: [busy µs, idle µs], by the stage an iteration began in.
    let mut stage_us = [[0u64; 2]; Stage::ALL.len()];
    let mut last = (shard.stage(), clock.now_us(), false);
    loop {
        iterations += 1;
        let mut now = clock.now_us();
        let iteration_start = now;
        if profile {
            stage_us[last.0 as usize][usize::from(!last.2)] += now - last.1;
            last = (shard.stage(), now, false);
        }
        let mut progress = false;
        let mut why = 0u8;
        if mesh.failed() {
            // A node of the cluster is gone: stop here, recover from the logs.
            break;
        }
        for peer in 0..n {
            while let Some(envelope) = mesh.links.recv(peer, me) {
                if profile {
                    transit.note(&envelope, now);
                }
                shard.receive(peer as ShardId, envelope.batch);
                progress = true;
                why |= 1;
            }
        }
        if progress {
            now = clock.now_us();
        }
        shard.tick(now);
        if overflow.is_empty() {
            if frontend.pump(&mut shard, now) {
                progress = true;
                why |= 2;
            }
        }
        if shard.has_work() {
            shard.step();
            progress = true;
            why |= 4;
        }
        shard.drain(&mut out);
        for (to, msgs) in out.messages.iter_mut().enumerate() {
            if !msgs.is_empty() {
                overflow.push_back((to, std::mem::take(msgs)));
            }
        }
        while let Some((to, batch)) = overflow.pop_front() {
            let sent_us = if profile { now } else { 0 };
            match mesh.send(me, to, Envelope { sent_us, batch }) {
                Ok(()) => {
                    progress = true;
                    why |= 8;
                }
                Err(e) => {
                    overflow.push_front((to, e.batch));
                    break;
                }
            }
        }
        if !out.replies.is_empty() {
            frontend.deliver(&mut out.replies, now);
            out.replies.clear();
            progress = true;
        }
        // Durability is wired in with the storage crate; until then the
        // runtime runs without a log (`Durability::None`) or snapshots.
        match &mut durable {
            Some(d) => {
                d.log(&mut out.log);
                d.snapshot(&mut out.snapshots);
                if let Some(epoch) = d.durable() {
                    shard.log_durable(epoch);
                    progress = true;
                }
            }
            None => {
                out.log.clear();
                out.snapshots.clear();
            }
        }
        out.history.clear();
        if let Some(m) = &metrics
            && now >= published_us + METRICS_PUBLISH_US
        {
            m.publish(&shard.stats(), shard.epoch(), shard.pending());
            published_us = now;
        }
        if !counted
            && frontend.is_done()
            && shard.is_quiet()
            && overflow.is_empty()
            && durable.as_ref().is_none_or(|d| !d.busy())
        {
            counted = true;
            done.fetch_add(1, Ordering::AcqRel);
        }
        if counted
            && done.load(Ordering::Acquire) == mesh.n_local
            && shard.stage() == Stage::Idle
            && overflow.is_empty()
        {
            break;
        }
        whys |= why;
        if shard.epoch() != watched_epoch || shard.is_quiet() {
            watched_epoch = shard.epoch();
            watched_us = now;
        } else if now > watched_us + STALL_REPORT_US && now > reported_us + STALL_REPORT_US {
            // An epoch open for seconds: say where it is stuck.
            reported_us = now;
            tracing::warn!(
                overflow = overflow.len(),
                iterations,
                whys,
                quiet = shard.is_quiet(),
                "epoch {} open for {} s: {}",
                watched_epoch,
                (now - watched_us) / 1_000_000,
                shard.describe()
            );
        }
        if progress {
            progress_us = now;
            if profile {
                busy_us += clock.now_us() - iteration_start;
                last.2 = true;
            }
            glommio::yield_if_needed().await;
            continue;
        }
        // No progress: spin a while (see `SPIN_US`) if an epoch is open and
        // a peer's message is due, then park.
        let quiet = shard.is_quiet() && overflow.is_empty();
        if !overflow.is_empty() || (!quiet && now < progress_us + SPIN_US) {
            futures_lite::future::yield_now().await;
            continue;
        }
        // Park until a peer sends, the log or a client wakes the loop, or
        // the frontend's next deadline: at most 1 ms with work open (to
        // re-check the clock, the epoch's timers and the done count), at
        // most `QUIET_PARK_US` when quiet.
        let cap = if quiet { QUIET_PARK_US } else { 1_000 };
        let wait_us = frontend
            .next_wakeup_us()
            .map_or(cap, |t| t.saturating_sub(now).min(cap));
        if wait_us > 0 && mesh.links.park(me) {
            // Polled again only when woken: by a doorbell, the log task (an
            // epoch became durable) or the frontend.
            let mut woken = false;
            let arrival = futures_lite::future::poll_fn(|cx| {
                if std::mem::replace(&mut woken, true) || mesh.links.any_for(me) || frontend.poll_wake(cx).is_ready() {
                    return Poll::Ready(());
                }
                *waiter.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            });
            let timeout = glommio::timer::sleep(Duration::from_micros(wait_us));
            futures_lite::future::or(arrival, timeout).await;
            mesh.links.unpark(me);
            *waiter.borrow_mut() = None;
        }
    }
    if profile {
        let secs = (clock.now_us() - started) as f64 / 1e6;
        let parts: Vec<String> = Stage::ALL
            .iter()
            .zip(stage_us)
            .map(|(s, [b, i])| format!("{} {:.0}/{:.0}", s.name(), b as f64 / 1e4 / secs, i as f64 / 1e4 / secs))
            .collect();
        eprintln!("shard {} stage busy/idle %: {}", shard.id(), parts.join(", "));
        eprintln!(
            "shard {}: busy {:.0}%, {} epochs, {:.0} loop iterations/s, {} batches in of {:.1} messages, {:.1} µs in transit",
            shard.id(),
            busy_us as f64 * 100.0 / (secs * 1e6),
            shard.stats().epochs,
            iterations as f64 / secs,
            transit.batches,
            transit.messages as f64 / transit.batches.max(1) as f64,
            transit.total_us as f64 / transit.batches.max(1) as f64,
        );
    }
    // Cancels the tasks of the links to other nodes (closing them).
    drop(mesh.remote.take());
    if let Some(d) = durable {
        d.close().await;
    }
    let output = frontend.finish(&shard);
    settle().await;
    output
}

/// Lets the tasks cancelled at the end of a run (listeners, links) drop
/// their sockets before the executor stops: a task is only dropped when
/// its executor runs it once more, and a listener left open would keep
/// taking a share of new connections (SO_REUSEPORT) and never answer.
async fn settle() {
    glommio::timer::sleep(Duration::from_millis(2)).await;
}
