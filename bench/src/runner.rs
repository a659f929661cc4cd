//! The in-process load generator, for any workload: the engine on its
//! production runtime, one generator on every shard's own thread.
//!
//! A [`Workload`] says how to build the application, load its initial
//! state, draw requests and check the final state. Each shard's generator
//! submits only requests whose root entity that shard owns (a client that
//! knows the partition map does the same), so the root runs where it is
//! sequenced and only the calls it makes hop.
//!
//! Load is offered per *lane*: an independent stream of requests (YCSB-T
//! and the Deathstar applications have one per shard; TPC-C one per
//! district, its terminals). Closed loop keeps `in_flight` requests
//! outstanding per lane (maximum throughput); open loop sends at a fixed
//! total rate, split over shards by their lanes, and measures latency from
//! each request's *scheduled* time, so a stall is charged to every request
//! it delayed (no coordinated omission).
//!
//! All shards load their share of the state, then meet at a barrier, then
//! share one time origin: the first generator to run sets it, and warm-up,
//! the measured window and the timeline buckets are counted from it.
//! Only requests scheduled inside the window count; those still
//! outstanding at its end are awaited, so the final state holds exactly the
//! committed transactions the generators saw, and the workload's check runs
//! on every shard's entities gathered after the run.

use crate::moves::{self, Mover, Plan};
use crate::report::{Latency, Report, histogram};
use crate::sys;
use hdrhistogram::Histogram;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use styx_engine::{
    AbortKind, App, CallLimits, Config, Key, OpId, Outcome, Reply, Request, Serial, Shard, Stats, Value,
};
use styx_runtime::{Frontend, Options};

/// A whole final state, gathered from every shard.
pub use crate::check::State;

/// Width of a timeline bucket.
pub const TIMELINE_BUCKET_MS: u64 = 100;
/// Timeline buckets kept (one hour); later replies are not bucketed.
pub const TIMELINE_BUCKETS_MAX: usize = 36_000;
/// Distinct unexpected-abort messages a tally keeps.
pub const FAILURES_KEPT_MAX: usize = 5;
/// How often a loaded shard looks whether the others have loaded, µs.
const LOAD_POLL_US: u64 = 100;

/// Commits per timeline bucket over a run of `span` as (ms since the start,
/// commits per second) points, one per bucket of the run (empty ones too).
pub fn timeline_rates(mut counts: Vec<u64>, span: Duration) -> Vec<(u64, f64)> {
    let buckets = (span.as_millis() as u64).div_ceil(TIMELINE_BUCKET_MS) as usize;
    counts.resize(buckets.min(TIMELINE_BUCKETS_MAX), 0);
    counts
        .iter()
        .enumerate()
        .map(|(i, c)| {
            (
                i as u64 * TIMELINE_BUCKET_MS,
                *c as f64 * 1_000.0 / TIMELINE_BUCKET_MS as f64,
            )
        })
        .collect()
}

/// How load is offered.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Load {
    /// This many requests outstanding per lane.
    Closed { in_flight: usize },
    /// This many transactions per second in total.
    Open { rate: f64 },
}

/// A shard's stream of requests.
pub trait Source: 'static {
    /// What a reply must be matched with to tally it.
    type Tag: Copy + 'static;
    /// What the stream learned from its replies, for the final check.
    type Tally: Send + 'static;

    /// Independent request streams on this shard (at least one).
    fn lanes(&self) -> usize;
    /// The next request of `lane`; its root entity must be on this shard.
    fn next(&mut self, lane: usize) -> (Request, Self::Tag);
    /// Notes a final outcome.
    fn record(&mut self, tag: Self::Tag, outcome: &Outcome);
    fn finish(self) -> Self::Tally;
}

/// A benchmark workload.
pub trait Workload: Send + Sync + 'static {
    type Source: Source;

    /// `ycsbt`, `tpcc`, …
    fn name(&self) -> &'static str;
    /// The workload's knobs, for the report.
    fn parameters(&self) -> BTreeMap<String, serde_json::Value>;
    fn app(&self) -> Arc<App>;
    /// Calls `emit` with every entity of the initial state. Each shard
    /// calls it and keeps what it owns, so nothing holds a whole state.
    fn load(&self, app: &App, emit: &mut dyn FnMut(OpId, Key, Value));
    /// The request stream of shard `shard` of `shards`.
    fn source(&self, app: &Arc<App>, shard: u16, shards: u16, seed: u64) -> Self::Source;
    /// How many lanes shard `shard` of `shards` has (open loop splits the
    /// rate by them).
    fn lanes_of(&self, app: &Arc<App>, shard: u16, shards: u16) -> usize {
        self.source(app, shard, shards, 0).lanes()
    }
    /// Violations of the workload's invariants in the final state.
    fn check(&self, app: &App, state: &State, tallies: Vec<<Self::Source as Source>::Tally>) -> Vec<String>;
    /// Whether the check depends on the state the run started from (a
    /// run against a daemon then reads it before it starts, so that it
    /// need not be the initial one: a second run checks as well as the first).
    fn checks_from_start(&self) -> bool {
        false
    }
    /// `check`, against `start` (the state read before the run) instead of
    /// the initial state where `checks_from_start`.
    fn check_from(
        &self,
        app: &App,
        _start: Option<&State>,
        state: &State,
        tallies: Vec<<Self::Source as Source>::Tally>,
    ) -> Vec<String> {
        self.check(app, state, tallies)
    }
}

/// How to run a workload.
#[derive(Clone, Debug)]
pub struct Params {
    pub shards: u16,
    /// Executor threads for the shards (`None`: one per shard; see
    /// `styx_runtime::Options::threads`).
    pub threads: Option<usize>,
    pub warmup: Duration,
    pub duration: Duration,
    pub load: Load,
    pub epoch_txns_max: usize,
    pub epoch_gather_us: u64,
    /// Local messages a shard handles per step (see `Config::step_messages_max`).
    pub step_messages_max: usize,
    /// Entities a moving partition's old owner copies at an epoch's end,
    /// at most, at least, and per millisecond since its last share (see
    /// `Config::move_share_entities`).
    pub move_share_entities: usize,
    pub move_share_min_entities: usize,
    pub move_share_per_ms: usize,
    pub seed: u64,
    /// Measure the serial ceiling in the same run, for this long (zero: skip).
    pub serial: Duration,
    /// A progress line on stderr once a second.
    pub progress: bool,
    /// Partitions to move while the workload runs (`crate::moves`).
    pub moves: Option<Plan>,
}

impl Default for Params {
    fn default() -> Params {
        Params {
            shards: std::thread::available_parallelism().map_or(1, |n| n.get()) as u16,
            threads: None,
            warmup: Duration::from_secs(2),
            duration: Duration::from_secs(10),
            load: Load::Closed { in_flight: 1 },
            epoch_txns_max: styx_engine::EPOCH_TXNS_MAX_DEFAULT,
            epoch_gather_us: 0,
            step_messages_max: Config::default().step_messages_max,
            move_share_entities: Config::default().move_share_entities,
            move_share_min_entities: Config::default().move_share_min_entities,
            move_share_per_ms: Config::default().move_share_per_ms,
            seed: 1,
            serial: Duration::from_secs(2),
            progress: false,
            moves: None,
        }
    }
}

/// What the shards share: the time origin and the progress counters.
struct Shared {
    start_us: AtomicU64,
    committed: Vec<AtomicU64>,
    /// Shards that have loaded their state. Generators send nothing until
    /// every shard has: a shard that loads fast would otherwise run ahead
    /// of one that loads slowly. Not a blocking barrier: shards sharing a
    /// thread load one after the other.
    loaded: AtomicUsize,
}

impl Shared {
    /// The common origin, set by whichever generator runs first.
    fn origin(&self, now: u64) -> u64 {
        match self
            .start_us
            .compare_exchange(0, now, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => now,
            Err(set) => set,
        }
    }
}

struct Slot<T> {
    tag: T,
    lane: u32,
    intended_us: u64,
}

struct Generator<S: Source> {
    source: S,
    shard: usize,
    shared: Arc<Shared>,
    load: Load,
    interval_us: f64,
    next_send_us: f64,
    next_lane: usize,
    /// Closed loop: lanes with a request to send, one entry per request.
    ready: Vec<u32>,
    slots: Vec<Option<Slot<S::Tag>>>,
    free: Vec<u32>,
    outstanding: usize,
    warmup_us: u64,
    duration_us: u64,
    origin: u64,
    warm_at: u64,
    stop_at: u64,
    now: u64,
    hist: Histogram<u64>,
    committed: u64,
    aborted: u64,
    failed: u64,
    failures: Vec<String>,
    rejected: u64,
    timeline: Vec<u64>,
    rss_at_stop: u64,
    stats_warm: Option<(Stats, u64)>,
    stats_stop: Option<(Stats, u64)>,
    /// With a move plan: this shard's part, and the latencies of each
    /// timeline bucket's replies.
    mover: Option<Mover>,
    windows: Vec<Histogram<u64>>,
}

/// What one shard's generator measured.
struct Measured<T> {
    hist: Histogram<u64>,
    committed: u64,
    aborted: u64,
    failed: u64,
    failures: Vec<String>,
    rejected: u64,
    timeline: Vec<u64>,
    rss_at_stop: u64,
    windows: Vec<Histogram<u64>>,
    entities: Vec<(OpId, Key, Value)>,
    stats: Stats,
    /// The CPU time of the shard's thread over the measured window, and
    /// that thread (shards sharing one count it once).
    cpu_us: u64,
    thread: std::thread::ThreadId,
    tally: T,
}

impl<S: Source> Generator<S> {
    fn submit(&mut self, shard: &mut Shard, lane: usize, intended_us: u64) {
        let (request, tag) = self.source.next(lane);
        let slot = Slot {
            tag,
            lane: lane as u32,
            intended_us,
        };
        let token = match self.free.pop() {
            Some(t) => {
                self.slots[t as usize] = Some(slot);
                t
            }
            None => {
                self.slots.push(Some(slot));
                (self.slots.len() - 1) as u32
            }
        };
        match shard.submit(u64::from(token), request) {
            Ok(()) => self.outstanding += 1,
            Err(_) => {
                // Overload: the request never ran. Closed loop retries the
                // lane on the next pump; open loop counts it lost.
                self.rejected += 1;
                self.slots[token as usize] = None;
                self.free.push(token);
                if let Load::Closed { .. } = self.load {
                    self.ready.push(lane as u32);
                }
            }
        }
    }

    fn bucket(&mut self, now: u64) {
        let b = (now.saturating_sub(self.origin) / (TIMELINE_BUCKET_MS * 1_000)) as usize;
        if b < TIMELINE_BUCKETS_MAX {
            if self.timeline.len() <= b {
                self.timeline.resize(b + 1, 0);
            }
            self.timeline[b] += 1;
        }
    }

    /// With a move plan: notes a reply's latency in its bucket.
    fn window(&mut self, now: u64, latency_us: u64) {
        if self.mover.is_none() {
            return;
        }
        let b = (now.saturating_sub(self.origin) / (TIMELINE_BUCKET_MS * 1_000)) as usize;
        if b < TIMELINE_BUCKETS_MAX {
            while self.windows.len() <= b {
                self.windows.push(histogram());
            }
            self.windows[b].saturating_record(latency_us);
        }
    }
}

impl<S: Source> Frontend for Generator<S> {
    type Output = Measured<S::Tally>;

    fn pump(&mut self, shard: &mut Shard, now: u64) -> bool {
        self.now = now;
        if self.warm_at == 0 {
            if self.shared.loaded.load(Ordering::Acquire) < self.shared.committed.len() {
                return false;
            }
            self.origin = self.shared.origin(now);
            self.warm_at = self.origin + self.warmup_us;
            self.stop_at = self.warm_at + self.duration_us;
            self.next_send_us = now as f64;
        }
        if now >= self.warm_at && self.stats_warm.is_none() {
            self.stats_warm = Some((shard.stats(), sys::thread_cpu_us()));
        }
        let moved = match &mut self.mover {
            Some(m) => m.pump(shard, now, self.origin, self.stop_at),
            None => false,
        };
        if now >= self.stop_at {
            if self.stats_stop.is_none() {
                self.stats_stop = Some((shard.stats(), sys::thread_cpu_us()));
                self.rss_at_stop = sys::peak_rss_bytes();
            }
            return moved;
        }
        let before = (self.outstanding, self.rejected);
        match self.load {
            Load::Closed { .. } => {
                // A refused request puts its lane back: send each once per pump.
                for _ in 0..self.ready.len() {
                    let Some(lane) = self.ready.pop() else { break };
                    self.submit(shard, lane as usize, now);
                }
            }
            Load::Open { .. } => {
                let lanes = self.source.lanes();
                while self.next_send_us <= now as f64 {
                    let intended = self.next_send_us as u64;
                    self.next_send_us += self.interval_us;
                    let lane = self.next_lane;
                    self.next_lane = (self.next_lane + 1) % lanes;
                    self.submit(shard, lane, intended);
                }
            }
        }
        moved || (self.outstanding, self.rejected) != before
    }

    fn deliver(&mut self, replies: &mut Vec<Reply>, now: u64) {
        self.now = now;
        let mut committed_now = 0;
        for r in replies.drain(..) {
            if let Some(m) = &mut self.mover
                && m.deliver(&r, now)
            {
                continue;
            }
            let slot = self.slots[r.token as usize]
                .take()
                .expect("a reply for an outstanding request");
            let in_window = slot.intended_us >= self.warm_at && slot.intended_us < self.stop_at;
            match &r.outcome {
                Outcome::Committed(_) => {
                    committed_now += 1;
                    self.bucket(now);
                    self.committed += u64::from(in_window);
                }
                Outcome::Aborted(a) if a.kind() == AbortKind::User => self.aborted += u64::from(in_window),
                Outcome::Aborted(a) => {
                    self.failed += 1;
                    if self.failures.len() < FAILURES_KEPT_MAX {
                        self.failures.push(format!("{a}"));
                    }
                }
            }
            self.source.record(slot.tag, &r.outcome);
            self.window(now, now.saturating_sub(slot.intended_us).max(1));
            if in_window {
                self.hist.saturating_record(now.saturating_sub(slot.intended_us).max(1));
            }
            self.free.push(r.token as u32);
            self.outstanding -= 1;
            if let Load::Closed { .. } = self.load {
                self.ready.push(slot.lane);
            }
        }
        self.shared.committed[self.shard].fetch_add(committed_now, Ordering::Relaxed);
    }

    /// Requests and replies stay in this thread: nothing to poll for.
    fn does_io(&self) -> bool {
        false
    }

    /// Drawing requests is this generator's real work on the shard's
    /// thread: done while the shard waits, not while a peer waits for it.
    fn pump_after_local_work(&self) -> bool {
        true
    }

    fn next_wakeup_us(&self) -> Option<u64> {
        match self.load {
            // Waiting for the other shards to load.
            _ if self.warm_at == 0 => Some(self.now + LOAD_POLL_US),
            Load::Open { .. } if self.now < self.stop_at => Some(self.next_send_us as u64),
            _ => None,
        }
    }

    fn is_done(&self) -> bool {
        self.warm_at != 0
            && self.now >= self.stop_at
            && self.outstanding == 0
            // The counters at the stop are taken in `pump`, which the
            // shard skips while its epoch runs: the last replies can come
            // before it is called past the stop.
            && self.stats_stop.is_some()
            && self.mover.as_ref().is_none_or(Mover::is_done)
    }

    fn finish(self, shard: &Shard) -> Self::Output {
        let mut entities = Vec::with_capacity(shard.entity_count());
        shard.for_each_entity(|op, key, value| entities.push((op, key.clone(), value.clone())));
        let (stats, cpu_us) = match (self.stats_warm, self.stats_stop) {
            (Some((w, cw)), Some((s, cs))) => (
                Stats {
                    epochs: s.epochs - w.epochs,
                    committed: s.committed - w.committed,
                    aborted: s.aborted - w.aborted,
                    reexecuted: s.reexecuted - w.reexecuted,
                    serialized: s.serialized - w.serialized,
                    invocations: s.invocations - w.invocations,
                    snapshots: s.snapshots - w.snapshots,
                    without_phase2: s.without_phase2 - w.without_phase2,
                },
                cs - cw,
            ),
            _ => (Stats::default(), 0),
        };
        Measured {
            hist: self.hist,
            committed: self.committed,
            aborted: self.aborted,
            failed: self.failed,
            failures: self.failures,
            rejected: self.rejected,
            timeline: self.timeline,
            rss_at_stop: self.rss_at_stop,
            windows: self.windows,
            entities,
            stats,
            cpu_us,
            thread: std::thread::current().id(),
            tally: self.source.finish(),
        }
    }
}

/// Prints elapsed time and committed/s once a second until stopped.
fn progress(shared: Arc<Shared>, params: Params, stop: Arc<AtomicBool>, name: &'static str) {
    let began = Instant::now();
    let (mut last_committed, mut last_at) = (0u64, Instant::now());
    let window_end_s = (params.warmup + params.duration).as_secs_f64();
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(100));
        if last_at.elapsed() < Duration::from_secs(1) {
            continue;
        }
        let committed: u64 = shared.committed.iter().map(|c| c.load(Ordering::Relaxed)).sum();
        let start = shared.start_us.load(Ordering::Acquire);
        let line = if start == 0 {
            format!("{name}: loading… {:.0}s", began.elapsed().as_secs_f64())
        } else {
            let t = (unix_us().saturating_sub(start)) as f64 / 1e6;
            let phase = if t < params.warmup.as_secs_f64() {
                "warm-up"
            } else if t < window_end_s {
                "measuring"
            } else {
                "draining"
            };
            let rate = (committed - last_committed) as f64 / last_at.elapsed().as_secs_f64();
            format!("{name}: {t:>6.1}s / {window_end_s:.0}s {phase:<9} {rate:>10.0} committed/s")
        };
        eprintln!("{line}");
        (last_committed, last_at) = (committed, Instant::now());
    }
}

fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Runs `workload` in-process and reports what it measured.
pub fn run<W: Workload>(workload: Arc<W>, params: &Params) -> Result<Report, styx_runtime::Error> {
    let app = workload.app();
    let n = params.shards;
    let opts = Options {
        shards: n,
        engine: Config {
            epoch_txns_max: params.epoch_txns_max,
            epoch_gather_us: params.epoch_gather_us,
            step_messages_max: params.step_messages_max,
            move_share_entities: params.move_share_entities,
            move_share_min_entities: params.move_share_min_entities,
            move_share_per_ms: params.move_share_per_ms,
            ..Config::default()
        },
        threads: params.threads,
        ..Options::default()
    };
    let shared = Arc::new(Shared {
        start_us: AtomicU64::new(0),
        committed: (0..n).map(|_| AtomicU64::new(0)).collect(),
        loaded: AtomicUsize::new(0),
    });
    let load_s = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let reporter = params.progress.then(|| {
        let (shared, params, stop, name) = (shared.clone(), params.clone(), stop.clone(), workload.name());
        std::thread::spawn(move || progress(shared, params, stop, name))
    });

    let (p, w, a, sh, ls) = (
        params.clone(),
        workload.clone(),
        app.clone(),
        shared.clone(),
        load_s.clone(),
    );
    let planned = params.moves.clone().map(|plan| moves::Shared::new(plan, &app, n));
    let pl = planned.clone();
    let began = Instant::now();
    let outputs = styx_runtime::run(app.clone(), opts, move |shard: &mut Shard| {
        let id = shard.id();
        // With a plan: each partition's entities and a key of it, of the
        // operator that moves.
        let moving = pl.as_ref().map(|p| {
            let op = p.op(&a);
            let partitions = a.operator_info(op).partitions();
            (
                op,
                partitions,
                vec![0u64; partitions as usize],
                vec![None; partitions as usize],
            )
        });
        let mut moving = moving;
        w.load(&a, &mut |op, key, value| {
            if Shard::owner(&a, n, op, &key) == id {
                if let Some((o, partitions, entities, keys)) = &mut moving
                    && *o == op
                {
                    let p = key.partition(*partitions) as usize;
                    entities[p] += 1;
                    if keys[p].is_none() {
                        keys[p] = Some(key.clone());
                    }
                }
                shard.load(op, &key, Some(value));
            }
        });
        let mover = pl.as_ref().map(|p| {
            let (_, _, entities, keys) = moving.take().expect("counted");
            p.loaded(&entities, keys);
            Mover::new(p.clone(), &a, id)
        });
        let source = w.source(&a, id, n, p.seed.wrapping_mul(1_000_003).wrapping_add(u64::from(id)));
        let lanes = source.lanes();
        assert!(lanes > 0, "shard {id} has no lane to send on");
        // Every shard starts sending at once, after the slowest has loaded
        // (see `Generator::pump`).
        sh.loaded.fetch_add(1, Ordering::AcqRel);
        ls.fetch_max(began.elapsed().as_micros() as u64, Ordering::Relaxed);
        let (interval_us, ready) = match p.load {
            // The total rate splits over shards by their lanes.
            Load::Open { rate } => {
                let all_lanes: usize = (0..n).map(|s| w.lanes_of(&a, s, n)).sum();
                (1e6 / (rate * lanes as f64 / all_lanes as f64), Vec::new())
            }
            Load::Closed { in_flight } => {
                let ready = (0..in_flight).flat_map(|_| (0..lanes as u32).rev()).collect();
                (0.0, ready)
            }
        };
        Generator {
            source,
            shard: usize::from(id),
            shared: sh.clone(),
            load: p.load,
            interval_us,
            next_send_us: 0.0,
            next_lane: 0,
            ready,
            slots: Vec::new(),
            free: Vec::new(),
            outstanding: 0,
            warmup_us: p.warmup.as_micros() as u64,
            duration_us: p.duration.as_micros() as u64,
            origin: 0,
            warm_at: 0,
            stop_at: 0,
            now: 0,
            hist: histogram(),
            committed: 0,
            aborted: 0,
            failed: 0,
            failures: Vec::new(),
            rejected: 0,
            timeline: Vec::new(),
            rss_at_stop: 0,
            stats_warm: None,
            stats_stop: None,
            mover,
            windows: Vec::new(),
        }
    });
    stop.store(true, Ordering::Release);
    if let Some(r) = reporter {
        let _ = r.join();
    }
    let outputs = outputs?;

    let mut report = Report {
        workload: workload.name().into(),
        mode: match params.load {
            Load::Closed { .. } => "closed".into(),
            Load::Open { .. } => "open".into(),
        },
        parameters: {
            let mut p = workload.parameters();
            if params.moves.is_some() {
                p.insert("move_share_entities".into(), params.move_share_entities.into());
                p.insert("move_share_min_entities".into(), params.move_share_min_entities.into());
                p.insert("move_share_per_ms".into(), params.move_share_per_ms.into());
            }
            p
        },
        shards: n,
        cpus: std::thread::available_parallelism().map_or(1, |c| c.get()),
        offered_tps: match params.load {
            Load::Open { rate } => Some(rate),
            Load::Closed { .. } => None,
        },
        in_flight: match params.load {
            Load::Closed { in_flight } => Some(in_flight),
            Load::Open { .. } => None,
        },
        epoch_txns_max: params.epoch_txns_max,
        load_s: load_s.load(Ordering::Relaxed) as f64 / 1e6,
        warmup_s: params.warmup.as_secs_f64(),
        duration_s: params.duration.as_secs_f64(),
        timeline_bucket_ms: TIMELINE_BUCKET_MS,
        ..Report::default()
    };
    let mut hist = histogram();
    let (mut rss, mut rejected) = (0, 0);
    let mut cpu_us_of_thread = std::collections::HashMap::new();
    let mut failures = Vec::new();
    let mut timeline: Vec<u64> = Vec::new();
    let mut windows: Vec<Histogram<u64>> = Vec::new();
    let mut state = State::new();
    let mut tallies = Vec::with_capacity(outputs.len());
    for m in outputs {
        hist.add(&m.hist).expect("same histogram bounds");
        report.committed += m.committed;
        report.aborted += m.aborted;
        report.failed += m.failed;
        report.reexecuted += m.stats.reexecuted;
        report.serialized += m.stats.serialized;
        report.epochs = report.epochs.max(m.stats.epochs);
        let cpu = cpu_us_of_thread.entry(m.thread).or_insert(0u64);
        *cpu = (*cpu).max(m.cpu_us);
        rss = rss.max(m.rss_at_stop);
        rejected += m.rejected;
        failures.extend(m.failures);
        if timeline.len() < m.timeline.len() {
            timeline.resize(m.timeline.len(), 0);
        }
        for (t, x) in timeline.iter_mut().zip(&m.timeline) {
            *t += x;
        }
        for (b, h) in m.windows.into_iter().enumerate() {
            match windows.get_mut(b) {
                Some(all) => all.add(&h).expect("same histogram bounds"),
                None => windows.push(h),
            }
        }
        for (op, key, value) in m.entities {
            let previous = state.insert((op, key), value);
            assert!(previous.is_none(), "two shards hold one entity");
        }
        tallies.push(m.tally);
    }
    if let Some(p) = &planned {
        let origin = shared.start_us.load(Ordering::Acquire);
        report.moves = Some(p.figures(origin, &timeline, &windows, params.warmup, params.duration));
    }
    report.timeline = timeline_rates(timeline, params.warmup + params.duration);
    report.peak_rss_mb = rss as f64 / (1024.0 * 1024.0);
    report.latency_us = Latency::of(&hist);
    report.tps = report.committed as f64 / params.duration.as_secs_f64();
    // Per thread the shards ran on (one per shard up to one per core,
    // unless `--threads`).
    let threads = params
        .threads
        .unwrap_or_else(|| styx_runtime::threads_default(usize::from(n)))
        .clamp(1, usize::from(n));
    report.threads = (threads < usize::from(n)).then_some(threads);
    report.tps_per_core = report.tps / threads as f64;
    let cpu_us: u64 = cpu_us_of_thread.values().sum();
    report.cpu_us_per_txn = if report.committed > 0 {
        cpu_us as f64 / report.committed as f64
    } else {
        0.0
    };

    let mut errors = workload.check(&app, &state, tallies);
    drop(state);
    if rejected > 0 {
        errors.push(format!("{rejected} requests were refused as overload"));
    }
    if report.failed > 0 {
        errors.push(format!(
            "{} transactions failed: {}",
            report.failed,
            failures.join("; ")
        ));
    }
    report.invariants_ok = errors.is_empty();
    report.invariant_errors = errors;
    if !params.serial.is_zero() {
        report.serial_tps = serial_tps(&*workload, params.serial, params.seed);
        report.efficiency = report.tps_per_core / report.serial_tps;
    }
    Ok(report)
}

/// The serial ceiling: the workload's requests run one after another on
/// this thread with no concurrency control and no I/O, for about `time`
/// (after a warm-up of a quarter of it). Committed transactions per second.
pub fn serial_tps<W: Workload + ?Sized>(workload: &W, time: Duration, seed: u64) -> f64 {
    let app = workload.app();
    let mut serial = Serial::new(app.clone(), CallLimits::default());
    workload.load(&app, &mut |op, key, value| serial.load(op, key, Some(value)));
    let mut source = workload.source(&app, 0, 1, seed);
    let lanes = source.lanes();
    let now_us = unix_us();
    let mut tid = 0u64;
    let mut run = |until: Instant| {
        let mut committed = 0u64;
        while Instant::now() < until {
            for _ in 0..256 {
                tid += 1;
                let (request, tag) = source.next(tid as usize % lanes);
                let outcome = serial.execute(tid, now_us, &request);
                committed += u64::from(matches!(outcome, Outcome::Committed(_)));
                source.record(tag, &outcome);
            }
        }
        committed
    };
    run(Instant::now() + time / 4); // warm caches and the allocator
    let begin = Instant::now();
    let committed = run(begin + time);
    committed as f64 / begin.elapsed().as_secs_f64()
}
