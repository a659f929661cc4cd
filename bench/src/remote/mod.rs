//! `styx bench WORKLOAD --connect ADDR[,ADDR…]`: any [`Workload`] against a
//! running daemon or cluster, with the same report and the same final
//! check as in-process.
//!
//! The client learns the engine's map from any node it reaches (MAP: the
//! shards, which node holds which, see [`Pool`]) and builds each shard's
//! [`Source`] exactly as the in-process runner does (same seeds), so it
//! draws the same kind of requests, rooted where that shard owns them.
//! Requests go out by operator and function *name* (the [`App`] knows
//! both) over `connections` pipelined connections per node, each lane on
//! a connection to the node of its shard; outcomes come back as the
//! engine's [`Outcome`]s for [`Source::record`].
//!
//! Load is offered like in-process: closed loop keeps `in_flight` requests
//! outstanding per lane, capped so that all lanes together stay within the
//! connections' in-flight limits (more would only queue in the client);
//! open loop sends at a fixed total rate, round-robin over lanes, through
//! as many senders as the connections take in flight (no task per
//! request), and measures each request from its *scheduled* time, so a
//! stall is charged to every request it delayed (no coordinated omission). Only requests
//! scheduled inside the measured window count; those outstanding at its
//! end are awaited, so the final state holds exactly the committed
//! transactions the sources saw.
//!
//! At the end the daemon's whole state is read with the built-in `__scan`
//! into a [`State`] and the workload's own check runs on it with the
//! sources' tallies. This assumes the daemon held the workload's initial
//! state when the run began (`styxd --preload`, or `--load` for YCSB-T)
//! and that nothing else wrote to it; a workload whose check counts from
//! the start (YCSB-T: each balance is its start plus the run's transfers)
//! reads the state before the run instead, so runs can follow each other.
//!
//! What differs from in-process, by necessity:
//! - `reexecuted`, `serialized`, `cpu_us_per_txn`, `peak_rss_mb` and
//!   `epoch_txns_max` are the daemon's and the wire protocol does not carry
//!   them: they stay 0 (read them from the daemon's /metrics). `epochs` is
//!   the difference of STATUS's epoch before and after.
//! - `ERROR OVERLOADED` and `SHUTTING_DOWN` answers (the request did not
//!   run) are counted in `parameters.rejected` and sent again after a
//!   pause; they do not fail the check, which stays exact. A request whose
//!   connection broke is sent again with the same seq on a connection
//!   dialled anew (`parameters.retried`) when requests are named for
//!   exactly-once: a run rides out a node's failure and the cluster's
//!   recovery and still checks exactly. Without names its outcome is
//!   unknown, which fails the check.
//! - Requests carry client id 0 unless `exactly_once`: one client id per
//!   request stream, seqs from 1 and `ack` the lowest unanswered seq, so
//!   the server's exactly-once bookkeeping is measured (nothing is resent).
//!
//! [`pool`] holds the connections to every node; [`ycsbt`] deposits
//! YCSB-T's balances over the wire and reads them back.

pub mod pool;
pub mod ycsbt;

pub use pool::Pool;

use crate::report::{Latency, Report, histogram};
use crate::runner::{self, FAILURES_KEPT_MAX, Load, Source, State, TIMELINE_BUCKET_MS, TIMELINE_BUCKETS_MAX, Workload};
use hdrhistogram::Histogram;
use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use styx_engine::{AbortKind, App, Key, OpId, Outcome, Value, mix64};
use styx_net::ErrorCode;
use styx_net::client::{ConnectOptions, Connection, Error as ClientError, Outcome as WireOutcome};
use styx_net::frame::Request;

/// Connections a run opens at most.
pub const CONNECTIONS_MAX: usize = 1_024;
/// How long the end of a run waits for outstanding answers.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
/// The pause before a lane sends again after `OVERLOADED`.
const OVERLOAD_PAUSE: Duration = Duration::from_millis(1);
/// The open loop's clock wakes at most this often. A timer wake and a
/// send per request cost the client ~36 us of CPU each at 20 000/s, most
/// of it in the kernel, and its own lag showed in the latencies it
/// measured; a tick batches what fell due, at a known cost of at most a
/// tick per request.
const OPEN_TICK: Duration = Duration::from_micros(100);

/// How to drive a workload against a daemon.
#[derive(Clone, Debug)]
pub struct Remote {
    pub addr: String,
    pub connections: usize,
    pub load: Load,
    pub warmup: Duration,
    pub duration: Duration,
    pub seed: u64,
    /// Name each request for exactly-once (client id, seq, ack).
    pub exactly_once: bool,
    /// YCSB-T only: deposit the start balance into this many accounts first
    /// (for a daemon that was not preloaded).
    pub deposit_keys: Option<u64>,
    /// Measure the serial ceiling on this machine for this long (zero: skip).
    pub serial: Duration,
    /// A progress line on stderr once a second.
    pub progress: bool,
}

/// Runs `workload` against the daemon at `r.addr` and reports.
pub fn run<W: Workload>(workload: Arc<W>, r: &Remote) -> Result<Report, String> {
    if r.connections == 0 || r.connections > CONNECTIONS_MAX {
        return Err(format!("--connections must be in 1..={CONNECTIONS_MAX}"));
    }
    let (w, r2) = (workload.clone(), r.clone());
    let mut report = on_client(move || drive(w, r2))?;
    if !r.serial.is_zero() {
        report.serial_tps = runner::serial_tps(&*workload, r.serial, r.seed);
        report.efficiency = report.tps_per_core / report.serial_tps;
    }
    Ok(report)
}

/// Runs `body` on a client executor (a glommio thread) of its own.
pub fn on_client<T, F, Fut>(body: F) -> Result<T, String>
where
    T: Send + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T, String>> + 'static,
{
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .name("styx-bench-client")
        .spawn(move || async move { body().await })
        .map_err(|e| format!("cannot start the client executor: {e}"))?
        .join()
        .map_err(|e| format!("client executor: {e}"))?
}

pub fn connect_options() -> ConnectOptions {
    ConnectOptions {
        name: "styx bench".into(),
        in_flight_max: styx_net::IN_FLIGHT_MAX,
        ..ConnectOptions::default()
    }
}

/// One request stream's exactly-once naming: client id, next seq, and the
/// seqs still awaiting their outcome (the lowest is the ack).
struct Stream {
    client: u64,
    next_seq: u64,
    waiting: BTreeSet<u64>,
}

impl Stream {
    fn new(exactly_once: bool, salt: u64) -> Stream {
        let client = if exactly_once {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            mix64(now ^ mix64(salt)) | 1
        } else {
            0
        };
        Stream {
            client,
            next_seq: 1,
            waiting: BTreeSet::new(),
        }
    }

    /// `(client, seq, ack)` of the next request.
    fn begin(&mut self) -> (u64, u64, u64) {
        if self.client == 0 {
            return (0, 0, 0);
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.waiting.insert(seq);
        let ack = *self.waiting.first().expect("just inserted");
        (self.client, seq, ack)
    }

    fn end(&mut self, seq: u64) {
        self.waiting.remove(&seq);
    }
}

/// The wire request for an engine request, by names.
fn to_wire(app: &App, request: styx_engine::Request, (client, seq, ack): (u64, u64, u64)) -> Request {
    Request {
        client,
        seq,
        ack,
        operator: app.operator_info(request.function.op).name().to_string(),
        function: app.function_info(request.function).name().to_string(),
        target: request.address,
        args: request.args,
    }
}

fn to_engine(outcome: WireOutcome) -> Outcome {
    match outcome {
        WireOutcome::Committed { result, .. } => Outcome::Committed(result),
        WireOutcome::Aborted { abort, .. } => Outcome::Aborted(abort),
    }
}

/// What the run measured, shared by its tasks.
struct Meter {
    origin: Instant,
    warm_at: Instant,
    stop_at: Instant,
    hist: Histogram<u64>,
    /// From each request's scheduled time to its handing to a connection:
    /// the client's own lag, part of `hist`.
    lag: Histogram<u64>,
    committed: u64,
    aborted: u64,
    failed: u64,
    failures: Vec<String>,
    rejected: u64,
    /// Requests sent again after their connection broke (same seq).
    retried: u64,
    lost: u64,
    lost_reasons: Vec<String>,
    timeline: Vec<u64>,
    /// Latencies of the answers of the current timeline bucket (answers
    /// come in time order, so one histogram at a time), and each finished
    /// bucket's p99 `(bucket, p99_us)`.
    bucket_latency: (usize, Histogram<u64>),
    bucket_p99: Vec<(usize, u64)>,
    /// Commits since the start, for the progress line.
    committed_all: u64,
}

/// A timeline bucket's latencies: two significant digits (1%) suffice
/// for its p99, at a tenth of the run histogram's size.
fn bucket_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 2).expect("histogram bounds")
}

/// The p99 of each of the first `buckets` buckets that answered anything
/// (`[t_ms, p99_us]`).
fn timeline_p99(p99s: &[(usize, u64)], buckets: usize) -> Vec<(u64, u64)> {
    p99s.iter()
        .filter(|(b, _)| *b < buckets)
        .map(|&(b, p99)| (b as u64 * TIMELINE_BUCKET_MS, p99))
        .collect()
}

impl Meter {
    fn new(origin: Instant, warmup: Duration, duration: Duration) -> Meter {
        Meter {
            origin,
            warm_at: origin + warmup,
            stop_at: origin + warmup + duration,
            hist: histogram(),
            lag: histogram(),
            committed: 0,
            aborted: 0,
            failed: 0,
            failures: Vec::new(),
            rejected: 0,
            retried: 0,
            lost: 0,
            lost_reasons: Vec::new(),
            timeline: Vec::new(),
            bucket_latency: (0, bucket_histogram()),
            bucket_p99: Vec::new(),
            committed_all: 0,
        }
    }

    /// Notes the current bucket's p99 (if it answered anything) and
    /// empties it.
    fn finish_bucket(&mut self) {
        let (b, h) = &mut self.bucket_latency;
        if !h.is_empty() {
            self.bucket_p99.push((*b, h.value_at_quantile(0.99)));
            h.reset();
        }
    }

    fn in_window(&self, intended: Instant) -> bool {
        intended >= self.warm_at && intended < self.stop_at
    }

    /// Notes an outcome of a request scheduled at `intended`.
    fn outcome(&mut self, intended: Instant, outcome: &Outcome) {
        let now = Instant::now();
        let in_window = self.in_window(intended);
        let latency_us = now.duration_since(intended).as_micros().max(1) as u64;
        let b = (now.duration_since(self.origin).as_millis() as u64 / TIMELINE_BUCKET_MS) as usize;
        if b < TIMELINE_BUCKETS_MAX {
            if self.timeline.len() <= b {
                self.timeline.resize(b + 1, 0);
            }
            if b > self.bucket_latency.0 {
                self.finish_bucket();
                self.bucket_latency.0 = b;
            }
            self.bucket_latency.1.saturating_record(latency_us);
        }
        match outcome {
            Outcome::Committed(_) => {
                self.committed_all += 1;
                if b < TIMELINE_BUCKETS_MAX {
                    self.timeline[b] += 1;
                }
                self.committed += u64::from(in_window);
            }
            Outcome::Aborted(a) if a.kind() == AbortKind::User => self.aborted += u64::from(in_window),
            Outcome::Aborted(a) => {
                self.failed += 1;
                if self.failures.len() < FAILURES_KEPT_MAX {
                    self.failures.push(a.to_string());
                }
            }
        }
        if in_window {
            self.hist.saturating_record(latency_us);
        }
    }

    /// Notes that a request scheduled for `intended` goes out now.
    fn sent(&mut self, intended: Instant) {
        if self.in_window(intended) {
            self.lag.saturating_record(intended.elapsed().as_micros() as u64);
        }
    }

    /// Notes an error answer; true if the request did not run (retry it).
    fn error(&mut self, e: &ClientError) -> bool {
        let refused = matches!(
            e,
            ClientError::Server { code, .. } if *code == ErrorCode::OVERLOADED || *code == ErrorCode::SHUTTING_DOWN
        );
        if refused {
            self.rejected += 1;
        } else {
            self.lose(e.to_string());
        }
        refused
    }

    /// Notes a request whose outcome the run cannot know.
    fn lose(&mut self, reason: String) {
        self.lost += 1;
        if self.lost_reasons.len() < FAILURES_KEPT_MAX {
            self.lost_reasons.push(reason);
        }
    }
}

/// Everything a lane's task needs.
struct Lanes<S: Source> {
    app: Arc<App>,
    /// Taken at the end for their tallies.
    sources: Vec<RefCell<Option<S>>>,
    /// (shard, lane) of every lane, in order.
    lanes: Vec<(usize, usize)>,
    pool: Rc<Pool>,
    meter: Rc<RefCell<Meter>>,
    exactly_once: bool,
}

fn source<S: Source>(l: &Lanes<S>, shard: usize) -> std::cell::RefMut<'_, S> {
    std::cell::RefMut::map(l.sources[shard].borrow_mut(), |s| {
        s.as_mut().expect("sources are taken only once every task finished")
    })
}

/// Sends one request of lane `index` and records its outcome; false if no
/// node answers any more. `spread` picks among the connections to the
/// lane's node.
///
/// A refused request (`OVERLOADED`, `SHUTTING_DOWN`: it did not run) is
/// sent again after a pause (after `SHUTTING_DOWN`, by the layout asked
/// again: the node may be a spare now). A request whose connection broke is sent
/// again, with the same seq, on a connection dialled anew — only when
/// requests are named for exactly-once: the engine then answers a request
/// that had committed with its first outcome, and runs one that had not.
/// Without names its outcome is unknown and the check fails.
async fn one<S: Source>(
    l: &Lanes<S>,
    index: usize,
    spread: usize,
    stream: &RefCell<Stream>,
    intended: Instant,
) -> bool {
    let (shard, lane) = l.lanes[index];
    let (request, tag) = source(l, shard).next(lane);
    let mut slot = l.pool.slot_for(&request, shard as u16, spread);
    let naming = stream.borrow_mut().begin();
    l.meter.borrow_mut().sent(intended);
    let answer = loop {
        let conn = match l.pool.get(slot).await {
            Ok(c) => c,
            Err(e) => break Err(e),
        };
        match conn.request(to_wire(&l.app, request.clone(), naming)).await {
            Ok(outcome) => break Ok(outcome),
            Err(e) if e.answer_lost() && l.exactly_once => {
                l.meter.borrow_mut().retried += 1;
            }
            Err(e) => {
                if !l.meter.borrow_mut().error(&e) {
                    break Err(String::new());
                }
                // A node that takes no requests may run no shard any more
                // (a spare): where does the shard run now?
                if matches!(&e, ClientError::Server { code, .. } if *code == ErrorCode::SHUTTING_DOWN) {
                    l.pool.forget(slot, &conn);
                    l.pool.refresh_layout().await;
                    slot = l.pool.slot_for(&request, shard as u16, spread);
                }
                glommio::timer::sleep(OVERLOAD_PAUSE).await;
            }
        }
    };
    stream.borrow_mut().end(naming.1);
    match answer {
        Ok(outcome) => {
            let outcome = to_engine(outcome);
            l.meter.borrow_mut().outcome(intended, &outcome);
            source(l, shard).record(tag, &outcome);
            true
        }
        // Counted by `error` already.
        Err(e) if e.is_empty() => true,
        Err(e) => {
            l.meter.borrow_mut().lose(e);
            false
        }
    }
}

async fn closed_loop<S: Source>(l: Rc<Lanes<S>>, index: usize, salt: u64) {
    let stream = RefCell::new(Stream::new(l.exactly_once, salt));
    let stop_at = l.meter.borrow().stop_at;
    loop {
        let now = Instant::now();
        if now >= stop_at || !one(&l, index, salt as usize, &stream, now).await {
            return;
        }
    }
}

/// Requests due to be sent in open loop, and the senders waiting for one.
#[derive(Default)]
struct Schedule {
    /// `(intended, lane)` of every request due and not yet taken.
    due: std::collections::VecDeque<(Instant, usize)>,
    idle: Vec<std::task::Waker>,
    /// The window is over: senders stop once `due` is empty.
    closed: bool,
}

impl Schedule {
    fn push(&mut self, intended: Instant, lane: usize) {
        self.due.push_back((intended, lane));
        if let Some(w) = self.idle.pop() {
            w.wake();
        }
    }

    fn close(&mut self) {
        self.closed = true;
        for w in self.idle.drain(..) {
            w.wake();
        }
    }
}

/// Open loop: a clock hands out requests at `rate` per second, round-robin
/// over lanes, to a fixed set of senders (as many as the connections take
/// in flight), each sending one request and awaiting its answer at a time.
/// No task per request, and back-pressure where it belongs: when every
/// sender is busy the due requests wait in the schedule, and their wait is
/// charged to them (latency counts from the *scheduled* time, so a stall
/// is charged to every request it delayed: no coordinated omission).
/// Returns the requests still unanswered after `DRAIN_TIMEOUT`.
async fn open_loop<S: Source>(l: Rc<Lanes<S>>, rate: f64, senders: usize) -> usize {
    let interval = Duration::from_secs_f64(1.0 / rate);
    let streams: Rc<Vec<RefCell<Stream>>> = Rc::new(
        (0..l.lanes.len())
            .map(|i| RefCell::new(Stream::new(l.exactly_once, i as u64)))
            .collect(),
    );
    let schedule = Rc::new(RefCell::new(Schedule::default()));
    let outstanding = Rc::new(Cell::new(0usize));
    let tasks: Vec<_> = (0..senders.max(1))
        .map(|spread| {
            let (l, streams, schedule, outstanding) =
                (l.clone(), streams.clone(), schedule.clone(), outstanding.clone());
            glommio::spawn_local(async move {
                loop {
                    let next = futures_lite::future::poll_fn(|cx| {
                        let mut s = schedule.borrow_mut();
                        match s.due.pop_front() {
                            Some(t) => std::task::Poll::Ready(Some(t)),
                            None if s.closed => std::task::Poll::Ready(None),
                            None => {
                                s.idle.push(cx.waker().clone());
                                std::task::Poll::Pending
                            }
                        }
                    })
                    .await;
                    let Some((intended, lane)) = next else { return };
                    outstanding.set(outstanding.get() + 1);
                    let alive = one(&l, lane, spread, &streams[lane], intended).await;
                    outstanding.set(outstanding.get() - 1);
                    if !alive {
                        return;
                    }
                }
            })
        })
        .collect();
    let (origin, stop_at) = {
        let m = l.meter.borrow();
        (m.origin, m.stop_at)
    };
    let mut next = origin;
    let mut lane = 0;
    let mut woke = Instant::now();
    while next < stop_at {
        // Wake at most once a tick: the requests due meanwhile go out
        // together (one socket write per connection, one timer), and each
        // is charged the tick it waited.
        let wake = next.max(woke + OPEN_TICK);
        let now = Instant::now();
        if wake > now {
            glommio::timer::sleep(wake - now).await;
        }
        woke = Instant::now();
        // Everything due; a late clock catches up, and the delay is
        // charged to the requests (measured from `intended`).
        let mut s = schedule.borrow_mut();
        while next <= woke && next < stop_at {
            s.push(next, lane);
            next += interval;
            lane = (lane + 1) % l.lanes.len();
        }
    }
    schedule.borrow_mut().close();
    let drain = async {
        for t in tasks {
            t.await;
        }
    };
    let timeout = async {
        glommio::timer::sleep(DRAIN_TIMEOUT).await;
    };
    futures_lite::future::or(drain, timeout).await;
    outstanding.get() + schedule.borrow().due.len()
}

/// Prints elapsed time and committed/s once a second until `done`.
async fn progress(
    name: &'static str,
    meter: Rc<RefCell<Meter>>,
    done: Rc<Cell<bool>>,
    window_end_s: f64,
    warmup_s: f64,
) {
    let (mut last, mut last_at) = (0u64, Instant::now());
    while !done.get() {
        glommio::timer::sleep(Duration::from_millis(100)).await;
        if last_at.elapsed() < Duration::from_secs(1) || done.get() {
            continue;
        }
        let (committed, t) = {
            let m = meter.borrow();
            (m.committed_all, m.origin.elapsed().as_secs_f64())
        };
        let phase = if t < warmup_s {
            "warm-up"
        } else if t < window_end_s {
            "measuring"
        } else {
            "draining"
        };
        let rate = (committed - last) as f64 / last_at.elapsed().as_secs_f64();
        eprintln!("{name}: {t:>6.1}s / {window_end_s:.0}s {phase:<9} {rate:>10.0} committed/s (remote)");
        (last, last_at) = (committed, Instant::now());
    }
}

async fn drive<W: Workload>(workload: Arc<W>, r: Remote) -> Result<Report, String> {
    let app = workload.app();
    let pool = Pool::connect(&r.addr, r.connections, connect_options()).await?;
    // A node that runs shards (a spare's epoch is 0): as at the end.
    let first = pool.all().await?.into_iter().next().ok_or("no node runs a shard")?;
    let before = first.status().await.map_err(|e| format!("STATUS: {e}"))?;
    let shards = pool.map().shards;
    if shards == 0 {
        return Err("the daemon reports 0 shards".into());
    }
    let loaded = Instant::now();
    if let Some(keys) = r.deposit_keys {
        ycsbt::deposit(&pool.all().await?, keys).await?;
    }
    let load_s = loaded.elapsed().as_secs_f64();
    // What the check counts from, when it depends on it: the daemon need
    // not hold the initial state (an earlier run changed it).
    let start = if workload.checks_from_start() {
        Some(read_state(&pool, &app).await?.1)
    } else {
        None
    };

    let mut sources = Vec::with_capacity(usize::from(shards));
    let mut lanes = Vec::new();
    for shard in 0..shards {
        let seed = r.seed.wrapping_mul(1_000_003).wrapping_add(u64::from(shard));
        let source = workload.source(&app, shard, shards, seed);
        lanes.extend((0..source.lanes()).map(|lane| (usize::from(shard), lane)));
        sources.push(RefCell::new(Some(source)));
    }
    if lanes.is_empty() {
        return Err(format!("{}: no lane to send on", workload.name()));
    }
    // All lanes together within the connections' in-flight limits.
    let capacity = pool.in_flight_max();
    let in_flight = match r.load {
        Load::Closed { in_flight } => Some(in_flight.min((capacity / lanes.len()).max(1))),
        Load::Open { .. } => None,
    };

    let origin = Instant::now();
    let meter = Rc::new(RefCell::new(Meter::new(origin, r.warmup, r.duration)));
    let lane_count = lanes.len();
    let l = Rc::new(Lanes {
        app: app.clone(),
        sources,
        lanes,
        pool: pool.clone(),
        meter: meter.clone(),
        exactly_once: r.exactly_once,
    });
    let done = Rc::new(Cell::new(false));
    let reporter = r.progress.then(|| {
        let window_end_s = (r.warmup + r.duration).as_secs_f64();
        glommio::spawn_local(progress(
            workload.name(),
            meter.clone(),
            done.clone(),
            window_end_s,
            r.warmup.as_secs_f64(),
        ))
    });
    // Moves switch while a run lasts: route by the placement as it is now.
    let refresher = glommio::spawn_local({
        let (pool, done) = (pool.clone(), done.clone());
        async move {
            while !done.get() {
                glommio::timer::sleep(pool::PLACEMENT_EVERY).await;
                pool.refresh_placement().await;
            }
        }
    });
    let mut unanswered = 0;
    match (r.load, in_flight) {
        (Load::Closed { .. }, Some(per_lane)) => {
            let mut tasks = Vec::with_capacity(lane_count * per_lane);
            for slot in 0..per_lane {
                for index in 0..lane_count {
                    let salt = (slot * lane_count + index) as u64;
                    tasks.push(glommio::spawn_local(closed_loop(l.clone(), index, salt)));
                }
            }
            for t in tasks {
                t.await;
            }
        }
        (Load::Open { rate }, _) => {
            unanswered = open_loop(l.clone(), rate, capacity).await;
        }
        (Load::Closed { .. }, None) => unreachable!("closed loop has an in-flight count"),
    }
    done.set(true);
    if let Some(t) = reporter {
        t.await;
    }
    refresher.await;
    if unanswered > 0 {
        return Err(format!(
            "{unanswered} requests still unanswered {}s after the run: the daemon is stuck or gone",
            DRAIN_TIMEOUT.as_secs()
        ));
    }
    let (after, state, final_reads_retried) = read_state(&pool, &app).await?;
    pool.close();

    let tallies: Vec<_> = l
        .sources
        .iter()
        .map(|s| s.borrow_mut().take().expect("taken once").finish())
        .collect();
    let mut m = std::mem::replace(
        &mut *meter.borrow_mut(),
        Meter::new(origin, Duration::ZERO, Duration::ZERO),
    );
    m.finish_bucket();

    let mut report = Report {
        workload: workload.name().into(),
        mode: match r.load {
            Load::Closed { .. } => "closed".into(),
            Load::Open { .. } => "open".into(),
        },
        parameters: workload.parameters(),
        shards,
        threads: None,
        cpus: std::thread::available_parallelism().map_or(1, |c| c.get()),
        offered_tps: match r.load {
            Load::Open { rate } => Some(rate),
            Load::Closed { .. } => None,
        },
        in_flight,
        load_s,
        warmup_s: r.warmup.as_secs_f64(),
        duration_s: r.duration.as_secs_f64(),
        committed: m.committed,
        aborted: m.aborted,
        failed: m.failed,
        epochs: after.epoch.saturating_sub(before.epoch),
        latency_us: Latency::of(&m.hist),
        timeline_bucket_ms: TIMELINE_BUCKET_MS,
        ..Report::default()
    };
    let p = &mut report.parameters;
    p.insert("connect".into(), r.addr.clone().into());
    // Requests sent to another node than the default rule's, and the
    // version of the partition map they were routed by at the end.
    p.insert("rerouted".into(), pool.rerouted().into());
    p.insert("placement_version".into(), pool.placement_version().into());
    p.insert("connections".into(), r.connections.into());
    p.insert("exactly_once".into(), r.exactly_once.into());
    p.insert("rejected".into(), m.rejected.into());
    p.insert("retried".into(), m.retried.into());
    p.insert("nodes".into(), pool.nodes().into());
    // The node each shard was routed to (LAYOUT's answer, else MAP's ranges).
    p.insert("layout".into(), pool.layout().node_of.into());
    // The client's share of the latency: how late requests went out.
    p.insert(
        "send_lag_us".into(),
        serde_json::to_value(Latency::of(&m.lag)).expect("a Latency serializes"),
    );
    p.insert("reconnects".into(), pool.reconnects().into());
    p.insert("final_reads_retried".into(), final_reads_retried.into());
    p.insert("entities".into(), state.len().into());
    if let Load::Closed { in_flight } = r.load {
        p.insert("in_flight_requested".into(), in_flight.into());
    }
    report.timeline = runner::timeline_rates(m.timeline, r.warmup + r.duration);
    report.timeline_p99_us = timeline_p99(&m.bucket_p99, report.timeline.len());
    report.tps = report.committed as f64 / r.duration.as_secs_f64();
    report.tps_per_core = report.tps / f64::from(shards);

    let mut errors = workload.check_from(&app, start.as_ref(), &state, tallies);
    drop((state, start));
    if m.lost > 0 {
        errors.push(format!(
            "{} requests have an unknown outcome (the check cannot account for them): {}",
            m.lost,
            m.lost_reasons.join("; ")
        ));
    }
    if report.failed > 0 {
        errors.push(format!(
            "{} transactions failed: {}",
            report.failed,
            m.failures.join("; ")
        ));
    }
    report.invariants_ok = errors.is_empty();
    report.invariant_errors = errors;
    Ok(report)
}

/// Reads of the whole state tried at most, when connections close under
/// them, and the pause between tries.
const FINAL_READ_TRIES: u32 = 20;
const FINAL_READ_PAUSE: Duration = Duration::from_millis(250);

/// STATUS and the whole state (before or after the run), through the
/// nodes that run shards. A node may have become a spare since the layout
/// was last asked (a handover near the end): the reads go to nodes that
/// run shards. A cluster recovering from a failure closes every client
/// connection, maybe in the middle of the reads: they are made again (the
/// pool dials again), as clients retry. Returns how many times they were
/// made again too.
async fn read_state(pool: &Pool, app: &App) -> Result<(styx_net::Status, State, u32), String> {
    let mut tries = 0;
    loop {
        pool.refresh_layout().await;
        let conns = pool.all().await?;
        let read = async {
            let after = conns[0].status().await.map_err(|e| format!("STATUS: {e}"))?;
            Ok::<_, String>((after, dump_state(&conns, app).await?))
        }
        .await;
        match read {
            Ok((after, state)) => return Ok((after, state, tries)),
            Err(_) if tries + 1 < FINAL_READ_TRIES && conns.iter().any(|c| c.is_closed()) => {
                tries += 1;
                glommio::timer::sleep(FINAL_READ_PAUSE).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Reads the daemon's whole state for `app`'s operators with `__scan`,
/// operators spread over the connections.
pub async fn dump_state(conns: &[Connection], app: &App) -> Result<State, String> {
    let tasks: Vec<_> = app
        .operators()
        .enumerate()
        .map(|(i, (op, info))| {
            let conn = conns[i % conns.len()].clone();
            let (name, partitions) = (info.name().to_string(), info.partitions());
            glommio::spawn_local(async move {
                let rows = conn
                    .dump(&name, partitions)
                    .await
                    .map_err(|e| format!("reading {name}: {e}"))?;
                Ok::<(OpId, Vec<(Key, Vec<u8>)>), String>((op, rows))
            })
        })
        .collect();
    let mut state = State::new();
    for t in tasks {
        let (op, rows) = t.await?;
        for (key, bytes) in rows {
            if state.insert((op, key), Value::from_bytes(&bytes)).is_some() {
                return Err(format!(
                    "operator {}: the daemon returned a key twice",
                    app.operator_info(op).name()
                ));
            }
        }
    }
    Ok(state)
}
