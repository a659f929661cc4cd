//! The loop that drives one shard on its executor.
//!
//! An iteration takes the batches peers sent ([`ShardLoop::receive`]), lets
//! the frontend submit requests ([`ShardLoop::pump`]), runs one budgeted
//! step of the engine, ships the batches it produced to its peers
//! ([`ShardLoop::ship`]), hands replies to the frontend and sealed batches
//! and snapshot chunks to the log ([`ShardLoop::durability`]). Everything
//! the shard emits in one iteration for a peer leaves as one batch:
//! cross-core hops cost tens of microseconds when the peer is parked, so
//! messages travel in bulk.
//!
//! An iteration that made progress yields to the executor's other tasks
//! (connections, the log) and goes on; one that did not spins a while if a
//! peer's message is due, then parks until something wakes it
//! ([`ShardLoop::park`]).
//!
//! The loop never blocks on a full link (two shards blocked sending to
//! each other would deadlock): a batch that does not fit waits in an
//! overflow queue, and the frontend is not pumped until it drains.

use crate::link::Links;
use crate::{Clock, Envelope, Frontend, ShardMetrics, cluster, durable, remote};
use crate::{Doorbells, Waiter};
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::Poll;
use std::time::Duration;
use styx_engine::{Handoff, Message, Outputs, Shard, ShardId, Stage};

/// How often a shard publishes its counters, in µs.
const METRICS_PUBLISH_US: u64 = 1_000;
/// How often it publishes its per-partition counts (a copy under a lock).
const PARTITIONS_PUBLISH_US: u64 = 100_000;

/// How long a shard with open work parks at most: it re-checks the clock,
/// the epoch's timers and the done count.
const BUSY_PARK_US: u64 = 1_000;

/// How long a quiet shard (no epoch open, nothing pending or held) parks
/// at most. Whatever it waits for wakes it at once (a client's request, a
/// peer's doorbell, the log); the timer only bounds how late it sees a
/// cluster failure or a shutdown (it publishes its counters first). Parking
/// this long instead of 1 ms, and not spinning first, takes an idle daemon
/// from a fifth of a core to 0.5–0.85%: each timed wake-up costs the
/// reactor ~0.2 ms of CPU here (a timer armed and cancelled through
/// io_uring), so at 50 ms an idle 2-shard daemon still used ~1% of a core.
const QUIET_PARK_US: u64 = 200_000;

/// How long a shard makes no progress before it calls its `on_quiet` hook
/// (once per quiet spell): long enough that a steady trickle of requests
/// never pays for it, short enough that an idle daemon gives its memory
/// back soon after the load stops.
const QUIET_COLLECT_US: u64 = 1_000_000;

/// How often a shard polling for its peers lets the executor poll its I/O
/// ring, at most (see `ShardLoop::yield_to_io`): a socket read, a reply
/// write or a log completion waits at most this long behind a spin.
const SPIN_IO_US: u64 = 20;
/// How often a shard busy copying a snapshot lets the executor poll its
/// I/O ring, at most: the copy keeps the loop busy for ~50 iterations, and
/// `yield_if_needed` alone would leave the log's sync and the sockets
/// waiting until glommio's preemption timer (the epochs right after a
/// snapshot began took 3–9 ms against ~0.2).
const COPY_IO_US: u64 = 200;

/// A parked shard that wakes this much later than its timer asked was not
/// run by the machine, and every request it held waited as long: it logs
/// a warning. On the 2-vCPU VM of docs/BENCHMARKS.md both shards, the
/// client and an unrelated sleeping process all woke ~100 ms late at the
/// same moments, a few times a minute under load.
const LATE_WAKE_US: u64 = 10_000;

/// At most one late-wake warning per this many µs (the count of those not
/// reported goes with the next).
const LATE_WAKE_REPORT_US: u64 = 10_000_000;

/// A shard with open work that made no progress for this long logs its
/// state (a stuck run is diagnosed from that line).
const STALL_REPORT_US: u64 = 5_000_000;

/// Why an iteration made progress, as bits (the stall report shows which
/// kinds of progress a stuck shard still made).
const RECEIVED: u8 = 1;
const PUMPED: u8 = 2;
const STEPPED: u8 = 4;
const SHIPPED: u8 = 8;

/// How a shard reaches its peers: in-process links (with doorbells for the
/// shards of this node) and, in a cluster, connections to the others.
pub(crate) struct Mesh {
    pub(crate) links: Arc<Links<Envelope>>,
    pub(crate) doorbells: Rc<Doorbells>,
    /// Shards of the whole run (every node).
    pub(crate) n: usize,
    pub(crate) n_local: usize,
    /// Whether other shards run on this shard's executor.
    pub(crate) shares_executor: bool,
    /// Local shards that have nothing left to do; the run ends when all have.
    pub(crate) done: Arc<AtomicUsize>,
    /// Local shards stopped for a handover with their batches written.
    pub(crate) paused: Arc<AtomicUsize>,
    pub(crate) remote: Option<remote::Remote>,
    pub(crate) run: Option<Arc<cluster::Run>>,
    /// Another shard of this node panicked: stop.
    pub(crate) aborted: Arc<AtomicBool>,
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
            self.doorbells.ring(to);
        }
        Ok(())
    }

    fn failed(&self) -> bool {
        self.aborted.load(Ordering::Relaxed) || self.run.as_ref().is_some_and(|r| r.failure.is_failed())
    }
}

/// A shard that stopped for a handover, at the end of its loop.
pub(crate) enum Departed {
    /// It leaves this node (or the runtime keeps no shard across rounds):
    /// its hand-off.
    Leaves(Box<Handoff>),
    /// It stays on this node: the shard itself, for the next round
    /// ([`Shard::stay`]), with its log writer (durable), still open.
    Stays(Box<Shard>, Option<Box<styx_storage::wal::Writer>>),
}

/// One shard, what it talks to, and the loop's own state.
pub(crate) struct ShardLoop<F: Frontend> {
    shard: Shard,
    frontend: F,
    mesh: Mesh,
    durable: Option<durable::ShardDurable>,
    metrics: Option<Arc<ShardMetrics>>,
    /// The loop's waker while it is parked: doorbells, the log task and the
    /// frontend wake it through this.
    waiter: Waiter,
    clock: Clock,
    /// µs without progress spent polling before parking.
    spin_us: u64,
    /// This shard counted itself in the mesh's `done`.
    counted: bool,
    /// It stopped for a handover (`Shard::is_departing`) and counted
    /// itself in the mesh's `paused`.
    pause_counted: bool,
    /// Batches sent to and received from each shard in this run: a round
    /// that ends at a handover ends once each shard received every batch
    /// sent to it (see `cluster::Run::received_all`).
    sent_to: Vec<u64>,
    received_from: Vec<u64>,
    me: usize,
    /// What the shard emitted, drained once per iteration.
    out: Outputs,
    /// Batches the mesh could not take yet, oldest first.
    overflow: VecDeque<(usize, Vec<Message>)>,
    iterations: u64,
    /// When the loop last made progress, µs.
    progress_us: u64,
    /// Whether the run has no other shard (nothing to spin for).
    alone: bool,
    /// `Some(this node)`: if the shard stops for a handover and stays on
    /// this node, it is kept as it is (see [`Departed`]).
    keep_on: Option<u16>,
    /// Called on this thread once the shard has been quiet for
    /// `QUIET_COLLECT_US` after progress (see [`crate::Options::on_quiet`]).
    on_quiet: Option<fn()>,
    /// Progress was made since `on_quiet` last ran (or since the start:
    /// loading the shard's state leaves garbage too).
    busy_since_quiet: bool,
    /// The frontend's `pump_after_local_work`, asked once.
    pump_after_local_work: bool,
    /// Whether anything of this shard waits on the executor's ring:
    /// sockets (its frontend's, links to other nodes) or the log.
    has_io: bool,
    /// When it last let the executor poll its I/O, µs.
    io_yielded_us: u64,
    /// Parks that ended `LATE_WAKE_US` or more after their deadline since
    /// the last warning, and when that warning was logged, µs.
    late_wakes: u64,
    late_reported_us: Option<u64>,
    /// When the counters were last published, µs.
    published_us: u64,
    partitions_published_us: u64,
    /// The partition map version last published (`None`: none yet).
    map_published: Option<u64>,
    stall: Stall,
    /// With `STYX_PROFILE`: where the time goes.
    profile: Option<Profile>,
}

/// An epoch open for long without moving on (see `STALL_REPORT_US`).
#[derive(Default)]
struct Stall {
    epoch: u64,
    /// Since when the shard sits in `epoch` with work open, µs.
    since_us: u64,
    reported_us: u64,
    /// Every kind of progress made since the start (`RECEIVED` …).
    whys: u8,
}

impl<F: Frontend> ShardLoop<F> {
    /// `waiter` is where the loop leaves its waker when it parks (the
    /// doorbells, `durable`'s log task and the links to other nodes wake
    /// it); `clock` is the run's, so that send times compare across shards.
    // Each argument is one part of the loop, built once by `run` and moved
    // in; a struct for them would exist only to carry them here.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        shard: Shard,
        frontend: F,
        mesh: Mesh,
        durable: Option<durable::ShardDurable>,
        metrics: Option<Arc<ShardMetrics>>,
        waiter: Waiter,
        clock: Clock,
        spin_us: u64,
        on_quiet: Option<fn()>,
        keep_on: Option<u16>,
    ) -> ShardLoop<F> {
        let me = usize::from(shard.id());
        let has_io = frontend.does_io() || durable.is_some() || mesh.remote.is_some();
        let pump_after_local_work = frontend.pump_after_local_work();
        let alone = mesh.n == 1;
        let n = mesh.n;
        let profile = std::env::var_os("STYX_PROFILE").map(|_| Profile::new(&shard, clock.now_us()));
        ShardLoop {
            shard,
            frontend,
            mesh,
            durable,
            metrics,
            waiter,
            clock,
            spin_us,
            has_io,
            pump_after_local_work,
            alone,
            keep_on,
            on_quiet,
            busy_since_quiet: true,
            counted: false,
            pause_counted: false,
            sent_to: vec![0; n],
            received_from: vec![0; n],
            me,
            out: Outputs::default(),
            overflow: VecDeque::new(),
            iterations: 0,
            progress_us: 0,
            io_yielded_us: 0,
            late_wakes: 0,
            late_reported_us: None,
            published_us: 0,
            partitions_published_us: 0,
            map_published: None,
            stall: Stall::default(),
            profile,
        }
    }

    /// Runs the shard until the run ends (every local shard done, the
    /// cluster lost a node, or every shard stopped for a handover), then
    /// closes its log and links and returns the frontend's output — and,
    /// after a handover, the shard kept or its hand-off ([`Departed`]).
    pub(crate) async fn run(mut self) -> (F::Output, Option<Departed>) {
        loop {
            self.iterations += 1;
            let started = self.clock.now_us();
            if let Some(p) = &mut self.profile {
                p.begin(self.shard.stage(), started);
            }
            if self.pause_counted
                && self.mesh.run.as_ref().is_some_and(|r| {
                    r.all_ended(self.shard.epoch()) && r.received_all(self.shard.id(), &self.received_from)
                })
            {
                // Every node stopped and every batch sent here was handled:
                // the round ends, and this shard goes on in the next one
                // (kept, or from its hand-off).
                break;
            }
            if self.mesh.failed() {
                // A node of the cluster is gone (or a shard of this one
                // panicked): stop here, recover from the logs.
                break;
            }
            let mut why = self.receive(started);
            let now = if why == 0 { started } else { self.clock.now_us() };
            self.shard.tick(now);
            why |= self.pump(now);
            why |= self.step();
            self.shard.drain(&mut self.out);
            why |= self.ship(now);
            let delivered = self.deliver(now);
            let durable = self.durability();
            // Recorded for tests (`record_history`), never used here; the
            // layout's switches are followed through the shard's own
            // layout (`is_departing`, `Shard::layout`): neither may pile up.
            self.out.history.clear();
            self.out.handovers.clear();
            self.publish(now);
            // Before `is_over`: a shard counted done still stops with the
            // others at a handover.
            if self.shard.is_departing() {
                // Not in an iteration that told the shard of its log:
                // the announcement to its peers is drained and shipped
                // first (at the next one).
                if !durable {
                    self.pause();
                }
                glommio::timer::sleep(Duration::from_micros(100)).await;
                continue;
            }
            if self.is_over() {
                break;
            }
            self.watch(now, why);
            if why != 0 || delivered || durable {
                self.progress_us = now;
                self.busy_since_quiet = true;
                if let Some(p) = &mut self.profile {
                    p.busy(self.clock.now_us() - started);
                }
                if self.mesh.shares_executor {
                    // Its peers on this thread take their turn (the loop
                    // would otherwise keep the thread until preempted).
                    futures_lite::future::yield_now().await;
                } else if self.has_io && self.shard.is_snapshotting() && now >= self.io_yielded_us + COPY_IO_US {
                    self.yield_to_io(now).await;
                } else {
                    glommio::yield_if_needed().await;
                }
                continue;
            }
            // No progress: spin a while (`spin_us`, see `IDLE_POLL_US`) if an epoch is open
            // and a peer's message is due, then park. A shard alone has no peer to
            // wait for: what it waits for (a client, the log) wakes it when parked,
            // and spinning only took the CPU from the log's sync and the clients.
            let quiet = self.shard.is_quiet() && self.overflow.is_empty();
            if !self.overflow.is_empty() || (!quiet && !self.alone && now < self.progress_us + self.spin_us) {
                if self.has_io && now >= self.io_yielded_us + SPIN_IO_US {
                    self.yield_to_io(now).await;
                } else {
                    futures_lite::future::yield_now().await;
                }
                continue;
            }
            // Counters published every `METRICS_PUBLISH_US` may miss the
            // last replies; a reader (STATUS, /metrics) served while this
            // shard parks must see them.
            self.publish_now(now);
            if quiet && self.busy_since_quiet && now >= self.progress_us + QUIET_COLLECT_US {
                self.busy_since_quiet = false;
                if let Some(f) = self.on_quiet {
                    f();
                }
            }
            self.park(now, quiet).await;
        }
        self.finish().await
    }

    /// The shard stopped at the end of an epoch where the layout changed
    /// (`Config::pause_at_handover`): once its batches are all written it
    /// counts itself paused, and the last of this node's shards to do so
    /// tells the other nodes.
    fn pause(&mut self) {
        if self.pause_counted || !self.overflow.is_empty() || !self.mesh.remote.as_ref().is_none_or(|r| r.flushed()) {
            return;
        }
        let epoch = self.shard.epoch();
        // A durable shard stops once its log holds its last epoch and the
        // shard was told (it announces that to every peer), and once every
        // reply it held was released (every peer announced the same: a
        // release may send a reply to the shard its request came
        // through) — nothing is sent after the stop.
        if self
            .durable
            .as_ref()
            .is_some_and(|d| d.logged_through() < epoch || self.shard.holds_replies())
        {
            return;
        }
        let run = self
            .mesh
            .run
            .as_ref()
            .expect("a shard stops for a handover only in a cluster run");
        self.pause_counted = true;
        run.stopped(self.shard.id(), &self.sent_to);
        if self.mesh.paused.fetch_add(1, Ordering::AcqRel) + 1 == self.mesh.n_local {
            tracing::info!(epoch, layout = ?self.shard.layout().placed(), "every shard of this node stopped for a handover");
            run.ended_locally(epoch, self.shard.layout());
        }
    }

    /// Lets the executor reap and submit I/O, then resumes at once. A
    /// task that only yields (`yield_now`) is queued again before
    /// glommio's reactor runs, and the reactor runs only between task
    /// queue rounds: a loop yielding that way keeps sockets and the log
    /// unread and unwritten until it parks or glommio preempts it (every
    /// 100 ms). Waiting on a 1 µs timer instead leaves the queue empty, so
    /// the executor polls the ring (socket reads, reply writes, log
    /// completions) before the timer wakes the loop.
    async fn yield_to_io(&mut self, now: u64) {
        self.io_yielded_us = now;
        glommio::timer::sleep(Duration::from_micros(1)).await;
    }

    /// Hands the shard every batch its peers sent.
    fn receive(&mut self, now: u64) -> u8 {
        let mut why = 0;
        for peer in 0..self.mesh.n {
            while let Some(envelope) = self.mesh.links.recv(peer, self.me) {
                if let Some(p) = &mut self.profile {
                    p.transit.note(&envelope, now);
                }
                self.shard.receive(peer as ShardId, envelope.batch);
                self.received_from[peer] += 1;
                why = RECEIVED;
            }
        }
        why
    }

    /// Lets the frontend submit requests, unless batches wait to leave (new
    /// work would only add to them), or, for a frontend that asks, while
    /// the shard has local work in a running epoch.
    fn pump(&mut self, now: u64) -> u8 {
        // See `Frontend::pump_after_local_work`.
        let later = self.pump_after_local_work && self.shard.stage() != Stage::Idle && self.shard.has_work();
        if self.overflow.is_empty() && !later && !self.shard.is_departing() && self.frontend.pump(&mut self.shard, now)
        {
            PUMPED
        } else {
            0
        }
    }

    /// Runs one budgeted step of the engine, if it has work.
    fn step(&mut self) -> u8 {
        if !self.shard.has_work() {
            return 0;
        }
        self.shard.step();
        STEPPED
    }

    /// Sends the batches the shard produced, in order after those still
    /// waiting; a full link holds back its batch and every later one.
    fn ship(&mut self, now: u64) -> u8 {
        for (to, msgs) in self.out.messages.iter_mut().enumerate() {
            if !msgs.is_empty() {
                // A departing shard emits nothing once it published its
                // counts (a request forwarded to it waits in its hand-off):
                // a batch now would be lost with the round.
                assert!(
                    !self.pause_counted,
                    "shard {} sent a batch to shard {to} after it stopped for a handover",
                    self.me
                );
                self.overflow.push_back((to, std::mem::take(msgs)));
            }
        }
        let sent_us = if self.profile.is_some() { now } else { 0 };
        let mut why = 0;
        while let Some((to, batch)) = self.overflow.pop_front() {
            match self.mesh.send(self.me, to, Envelope { sent_us, batch }) {
                Ok(()) => {
                    self.sent_to[to] += 1;
                    why = SHIPPED;
                }
                Err(e) => {
                    self.overflow.push_front((to, e.batch));
                    break;
                }
            }
        }
        why
    }

    /// Hands the released replies to the frontend; whether there were any.
    /// Outcomes of replayed transactions answer nobody (a retry is answered
    /// from the client table): dropped.
    fn deliver(&mut self, now: u64) -> bool {
        self.out.replayed.clear();
        if self.out.replies.is_empty() {
            return false;
        }
        self.frontend.deliver(&mut self.out.replies, now);
        self.out.replies.clear();
        true
    }

    /// Hands sealed batches and snapshot chunks to the log and snapshot
    /// writers, and tells the shard which epoch became durable; whether
    /// one did. Without durability they are dropped.
    fn durability(&mut self) -> bool {
        match &mut self.durable {
            Some(d) => {
                d.log(&mut self.out.log);
                d.snapshot(&mut self.out.snapshots);
                d.recycle(|buffer| self.shard.recycle_snapshot_buffer(buffer));
                match d.durable() {
                    Some(epoch) => {
                        self.shard.log_durable(epoch);
                        true
                    }
                    None => false,
                }
            }
            None => {
                self.out.log.clear();
                self.out.snapshots.clear();
                false
            }
        }
    }

    /// Publishes the shard's counters about every `METRICS_PUBLISH_US`;
    /// its per-partition counts and owners about every
    /// `PARTITIONS_PUBLISH_US`, and at once when the partition map changed
    /// (PLACEMENT answers from them).
    fn publish(&mut self, now: u64) {
        let Some(m) = &self.metrics else {
            return;
        };
        let due = now >= self.published_us + METRICS_PUBLISH_US;
        let version = self.shard.partition_map_version();
        if Some(version) != self.map_published || (due && now >= self.partitions_published_us + PARTITIONS_PUBLISH_US) {
            m.publish_partitions(&self.shard);
            self.partitions_published_us = now;
            self.map_published = Some(version);
        }
        if due {
            self.publish_now(now);
        }
    }

    /// Publishes the counters now, unless they were this microsecond.
    fn publish_now(&mut self, now: u64) {
        if let Some(m) = &self.metrics
            && self.published_us != now
        {
            m.publish(&self.shard.stats(), self.shard.epoch(), self.shard.pending());
            self.published_us = now;
        }
    }

    /// Counts this shard done once it has nothing left to do; true once
    /// every local shard is done and this one is idle: the run is over.
    fn is_over(&mut self) -> bool {
        if !self.counted
            && self.frontend.is_done()
            && self.shard.is_quiet()
            && self.overflow.is_empty()
            && self.durable.as_ref().is_none_or(|d| !d.busy())
        {
            self.counted = true;
            self.mesh.done.fetch_add(1, Ordering::AcqRel);
        }
        self.counted
            && self.mesh.done.load(Ordering::Acquire) == self.mesh.n_local
            && self.shard.stage() == Stage::Idle
            && self.overflow.is_empty()
    }

    /// Logs where an epoch open for `STALL_REPORT_US` is stuck.
    fn watch(&mut self, now: u64, why: u8) {
        let s = &mut self.stall;
        s.whys |= why;
        if self.shard.epoch() != s.epoch || self.shard.is_quiet() {
            s.epoch = self.shard.epoch();
            s.since_us = now;
        } else if now > s.since_us + STALL_REPORT_US && now > s.reported_us + STALL_REPORT_US {
            s.reported_us = now;
            tracing::warn!(
                overflow = self.overflow.len(),
                iterations = self.iterations,
                whys = s.whys,
                quiet = self.shard.is_quiet(),
                "epoch {} open for {} s: {}",
                s.epoch,
                (now - s.since_us) / 1_000_000,
                self.shard.describe()
            );
        }
    }

    /// Parks until a peer sends, the log or a client wakes the loop, or
    /// the frontend's next deadline: at most `BUSY_PARK_US` with work
    /// open, at most `QUIET_PARK_US` when `quiet`.
    async fn park(&mut self, now: u64, quiet: bool) {
        let cap = if quiet { QUIET_PARK_US } else { BUSY_PARK_US };
        let wait_us = self
            .frontend
            .next_wakeup_us()
            .map_or(cap, |t| t.saturating_sub(now).min(cap));
        if wait_us == 0 {
            // The frontend's deadline is due: no sleep, but the executor's
            // other tasks (this shard's links to other nodes, its log, its
            // sockets) still take their turn. A loop that found nothing
            // to do and came straight back would hold the thread: a batch
            // waiting to be written to another node never left, and the
            // whole cluster waited for it (found with a frontend whose
            // deadline stayed due while it waited for the others).
            if self.has_io {
                self.yield_to_io(now).await;
            } else {
                futures_lite::future::yield_now().await;
            }
            return;
        }
        if !self.mesh.links.park(self.me) {
            return;
        }
        // Polled again only when woken: by a doorbell, the log task (an
        // epoch became durable) or the frontend.
        let (links, frontend, waiter, me) = (&self.mesh.links, &mut self.frontend, &self.waiter, self.me);
        let mut woken = false;
        let arrival = futures_lite::future::poll_fn(|cx| {
            if std::mem::replace(&mut woken, true) || links.any_for(me) || frontend.poll_wake(cx).is_ready() {
                return Poll::Ready(());
            }
            *waiter.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        });
        let timeout = glommio::timer::sleep(Duration::from_micros(wait_us));
        futures_lite::future::or(arrival, timeout).await;
        self.mesh.links.unpark(self.me);
        *self.waiter.borrow_mut() = None;
        let woke = self.clock.now_us();
        let late = woke.saturating_sub(now + wait_us);
        if late >= LATE_WAKE_US {
            self.late_wakes += 1;
            if self.late_reported_us.is_none_or(|t| woke >= t + LATE_WAKE_REPORT_US) {
                tracing::warn!(
                    shard = self.me,
                    late_ms = late / 1_000,
                    late_wakes = self.late_wakes,
                    "a parked shard woke {} ms after its timer: the machine did not run it (requests waited as long)",
                    late / 1_000
                );
                self.late_wakes = 0;
                self.late_reported_us = Some(woke);
            }
        }
    }

    /// Reports the profile, closes the links to other nodes and the log,
    /// and hands back the frontend's output.
    async fn finish(mut self) -> (F::Output, Option<Departed>) {
        if let Some(p) = &self.profile {
            p.report(&self.shard, self.iterations, self.clock.now_us());
        }
        // Cancels the tasks of the links to other nodes (closing them).
        drop(self.mesh.remote.take());
        let stays = self.shard.is_departing()
            && self
                .keep_on
                .is_some_and(|node| self.shard.layout().node_of(self.shard.id()) == node);
        let writer = match self.durable.take() {
            Some(d) => d.close(stays).await,
            None => None,
        };
        let output = self.frontend.finish(&self.shard);
        if !self.shard.is_departing() {
            return (output, None);
        }
        if stays {
            return (
                output,
                Some(Departed::Stays(Box::new(self.shard), writer.map(Box::new))),
            );
        }
        let handoff = self.shard.hand_off();
        // A snapshot it was copying finishes in `hand_off`: its chunks
        // have no log to go to: its log is closed, and the new node writes
        // the shard whole at the handover's checkpoint.
        self.shard.drain(&mut self.out);
        (output, Some(Departed::Leaves(Box::new(handoff))))
    }
}

/// Where a shard's time goes (`STYX_PROFILE`), reported when it stops.
struct Profile {
    started_us: u64,
    transit: Transit,
    busy_us: u64,
    /// Per stage: [busy µs, idle µs], by the stage an iteration began in.
    stage_us: [[u64; 2]; Stage::ALL.len()],
    /// The stage the last iteration began in, when, and whether it made
    /// progress.
    last: (Stage, u64, bool),
}

impl Profile {
    fn new(shard: &Shard, now_us: u64) -> Profile {
        Profile {
            started_us: now_us,
            transit: Transit::default(),
            busy_us: 0,
            stage_us: [[0; 2]; Stage::ALL.len()],
            last: (shard.stage(), now_us, false),
        }
    }

    /// An iteration begins in `stage`: charge the last one's time.
    fn begin(&mut self, stage: Stage, now_us: u64) {
        let (last_stage, since_us, busy) = self.last;
        self.stage_us[last_stage as usize][usize::from(!busy)] += now_us - since_us;
        self.last = (stage, now_us, false);
    }

    /// The iteration made progress and took `us`.
    fn busy(&mut self, us: u64) {
        self.busy_us += us;
        self.last.2 = true;
    }

    fn report(&self, shard: &Shard, iterations: u64, now_us: u64) {
        let secs = (now_us - self.started_us) as f64 / 1e6;
        let parts: Vec<String> = Stage::ALL
            .iter()
            .zip(self.stage_us)
            .map(|(s, [b, i])| format!("{} {:.0}/{:.0}", s.name(), b as f64 / 1e4 / secs, i as f64 / 1e4 / secs))
            .collect();
        eprintln!("shard {} stage busy/idle %: {}", shard.id(), parts.join(", "));
        let t = &self.transit;
        eprintln!(
            "shard {}: busy {:.0}%, {} epochs, {:.0} loop iterations/s, {} batches in of {:.1} messages, {:.1} µs in transit",
            shard.id(),
            self.busy_us as f64 * 100.0 / (secs * 1e6),
            shard.stats().epochs,
            iterations as f64 / secs,
            t.batches,
            t.messages as f64 / t.batches.max(1) as f64,
            t.total_us as f64 / t.batches.max(1) as f64,
        );
    }
}

/// Time batches spent between shards.
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
