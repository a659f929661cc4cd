//! YCSB-T run in-process: the engine on its production runtime, a load
//! generator on every shard's own thread.
//!
//! Each shard's generator submits transfers whose debtor that shard owns
//! (a client that knows the partition map does the same), so the root runs
//! where it is sequenced and only the creditor's deposit hops. Closed loop
//! keeps a fixed number of requests outstanding per shard (maximum
//! throughput); open loop sends at a fixed rate and measures latency from
//! each request's scheduled time, so a stall is charged to every request it
//! delayed (no coordinated omission).

use crate::report::{Latency, Report, histogram};
use crate::sys;
use crate::ycsbt::{self, Functions, START_BALANCE, Workload};
use hdrhistogram::Histogram;
use std::time::{Duration, Instant};
use styx_engine::{CallLimits, Config, Key, Outcome, Reply, Serial, Shard, Stats};
use styx_runtime::{Frontend, Options};

/// How load is offered.
#[derive(Clone, Copy, Debug)]
pub enum Load {
    /// This many requests outstanding per shard.
    Closed { in_flight: usize },
    /// This many transactions per second in total.
    Open { rate: f64 },
}

/// Parameters of an in-process YCSB-T run.
#[derive(Clone, Debug)]
pub struct Params {
    pub shards: u16,
    pub keys: u64,
    pub zipf: Option<f64>,
    pub warmup: Duration,
    pub duration: Duration,
    pub load: Load,
    pub epoch_txns_max: usize,
    pub epoch_gather_us: u64,
    /// Local messages a shard handles per step (see `Config::step_messages_max`).
    pub step_messages_max: usize,
    pub partitions: u32,
    pub seed: u64,
    /// Measure the serial ceiling in the same run.
    pub serial: bool,
}

impl Default for Params {
    fn default() -> Params {
        Params {
            shards: std::thread::available_parallelism().map_or(1, |n| n.get()) as u16,
            keys: 10_000,
            zipf: None,
            warmup: Duration::from_secs(2),
            duration: Duration::from_secs(10),
            load: Load::Closed { in_flight: 20_000 },
            epoch_txns_max: 10_000,
            epoch_gather_us: 0,
            step_messages_max: Config::default().step_messages_max,
            partitions: 64,
            seed: 1,
            serial: true,
        }
    }
}

struct Slot {
    debtor: u64,
    creditor: u64,
    intended_us: u64,
}

struct Generator {
    workload: Workload,
    functions: Functions,
    load: Load,
    interval_us: f64,
    next_send_us: f64,
    slots: Vec<Slot>,
    free: Vec<u32>,
    outstanding: usize,
    warmup_us: u64,
    duration_us: u64,
    warm_at: u64,
    stop_at: u64,
    now: u64,
    hist: Histogram<u64>,
    committed: u64,
    aborted: u64,
    rejected: u64,
    deltas: Vec<i32>,
    /// Peak RSS when the measurement window closed: the engine's footprint
    /// before the harness collects balances for the invariant check.
    rss_at_stop: u64,
    stats_warm: Option<(Stats, u64)>,
    stats_stop: Option<(Stats, u64)>,
}

/// What one shard's generator measured.
struct Measured {
    hist: Histogram<u64>,
    committed: u64,
    aborted: u64,
    rejected: u64,
    deltas: Vec<i32>,
    rss_at_stop: u64,
    balances: Vec<(u64, i64)>,
    stats: Stats,
    cpu_us: u64,
}

impl Generator {
    fn submit(&mut self, shard: &mut Shard, intended_us: u64) {
        let (debtor, creditor) = self.workload.next();
        let slot = Slot {
            debtor,
            creditor,
            intended_us,
        };
        let token = match self.free.pop() {
            Some(t) => {
                self.slots[t as usize] = slot;
                t
            }
            None => {
                self.slots.push(slot);
                (self.slots.len() - 1) as u32
            }
        };
        match shard.submit(u64::from(token), ycsbt::transfer(&self.functions, debtor, creditor, 1)) {
            Ok(()) => self.outstanding += 1,
            Err(_) => {
                self.rejected += 1;
                self.free.push(token);
            }
        }
    }
}

impl Frontend for Generator {
    type Output = Measured;

    fn pump(&mut self, shard: &mut Shard, now: u64) -> bool {
        self.now = now;
        if self.warm_at == 0 {
            self.warm_at = now + self.warmup_us;
            self.stop_at = self.warm_at + self.duration_us;
            self.next_send_us = now as f64;
        }
        if now >= self.warm_at && self.stats_warm.is_none() {
            self.stats_warm = Some((shard.stats(), sys::thread_cpu_us()));
        }
        if now >= self.stop_at {
            if self.stats_stop.is_none() {
                self.stats_stop = Some((shard.stats(), sys::thread_cpu_us()));
                self.rss_at_stop = sys::peak_rss_bytes();
            }
            return false;
        }
        let before = self.outstanding;
        match self.load {
            Load::Closed { in_flight } => {
                while self.outstanding < in_flight {
                    self.submit(shard, now);
                }
            }
            Load::Open { .. } => {
                while self.next_send_us <= now as f64 {
                    let intended = self.next_send_us as u64;
                    self.next_send_us += self.interval_us;
                    self.submit(shard, intended);
                }
            }
        }
        self.outstanding != before
    }

    fn deliver(&mut self, replies: &mut Vec<Reply>, now: u64) {
        self.now = now;
        for r in replies.drain(..) {
            let slot = &self.slots[r.token as usize];
            let in_window = slot.intended_us >= self.warm_at && slot.intended_us < self.stop_at;
            match r.outcome {
                Outcome::Committed(_) => {
                    self.deltas[slot.debtor as usize] -= 1;
                    self.deltas[slot.creditor as usize] += 1;
                    if in_window {
                        self.committed += 1;
                    }
                }
                Outcome::Aborted(_) => {
                    if in_window {
                        self.aborted += 1;
                    }
                }
            }
            if in_window {
                self.hist.saturating_record(now.saturating_sub(slot.intended_us).max(1));
            }
            self.free.push(r.token as u32);
            self.outstanding -= 1;
        }
    }

    fn next_wakeup_us(&self) -> Option<u64> {
        match self.load {
            Load::Open { .. } if self.now < self.stop_at => Some(self.next_send_us as u64),
            _ => None,
        }
    }

    fn is_done(&self) -> bool {
        self.warm_at != 0 && self.now >= self.stop_at && self.outstanding == 0
    }

    fn finish(self, shard: &Shard) -> Measured {
        let mut balances = Vec::new();
        shard.for_each_entity(|_, key, value| {
            let k = key.as_u64().expect("account keys are u64");
            balances.push((k, value.decode::<i64>().expect("balances are i64")));
        });
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
                },
                cs - cw,
            ),
            _ => (Stats::default(), 0),
        };
        Measured {
            hist: self.hist,
            committed: self.committed,
            aborted: self.aborted,
            rejected: self.rejected,
            deltas: self.deltas,
            rss_at_stop: self.rss_at_stop,
            balances,
            stats,
            cpu_us,
        }
    }
}

/// Runs YCSB-T in-process and reports what it measured.
pub fn run(params: &Params) -> Result<Report, styx_runtime::Error> {
    let app = ycsbt::app(params.partitions);
    let functions = Functions::of(&app);
    let account = app.op_id(ycsbt::OPERATOR).expect("account operator");
    let opts = Options {
        shards: params.shards,
        engine: Config {
            epoch_txns_max: params.epoch_txns_max,
            epoch_gather_us: params.epoch_gather_us,
            step_messages_max: params.step_messages_max,
            ..Config::default()
        },
        ..Options::default()
    };
    let p = params.clone();
    let n = params.shards;
    let app2 = app.clone();
    let outputs = styx_runtime::run(app.clone(), opts, move |shard: &mut Shard| {
        let id = shard.id();
        let start = ycsbt::start_value();
        let mut debtors = Vec::new();
        for k in 0..p.keys {
            let key = Key::from(k);
            if Shard::owner(&app2, n, account, &key) == id {
                shard.load(account, &key, Some(start.clone()));
                debtors.push(k);
            }
        }
        let interval_us = match p.load {
            Load::Open { rate } => 1e6 / (rate / f64::from(n)),
            Load::Closed { .. } => 0.0,
        };
        Generator {
            workload: Workload::new(p.keys, debtors, p.zipf, p.seed.wrapping_mul(1_000_003) + u64::from(id)),
            functions,
            load: p.load,
            interval_us,
            next_send_us: 0.0,
            slots: Vec::new(),
            free: Vec::new(),
            outstanding: 0,
            warmup_us: p.warmup.as_micros() as u64,
            duration_us: p.duration.as_micros() as u64,
            warm_at: 0,
            stop_at: 0,
            now: 0,
            hist: histogram(),
            committed: 0,
            aborted: 0,
            rejected: 0,
            deltas: vec![0; p.keys as usize],
            rss_at_stop: 0,
            stats_warm: None,
            stats_stop: None,
        }
    })?;

    let mut hist = histogram();
    let mut report = Report {
        workload: "ycsbt".into(),
        mode: match params.load {
            Load::Closed { .. } => "closed".into(),
            Load::Open { .. } => "open".into(),
        },
        shards: params.shards,
        keys: params.keys,
        zipf: params.zipf,
        offered_tps: match params.load {
            Load::Open { rate } => Some(rate),
            Load::Closed { .. } => None,
        },
        in_flight: match params.load {
            Load::Closed { in_flight } => Some(in_flight),
            Load::Open { .. } => None,
        },
        epoch_txns_max: params.epoch_txns_max,
        warmup_s: params.warmup.as_secs_f64(),
        duration_s: params.duration.as_secs_f64(),
        ..Report::default()
    };
    let mut deltas = vec![0i64; params.keys as usize];
    let mut rss = 0;
    let mut balances = vec![None; params.keys as usize];
    let mut cpu_us = 0;
    let mut rejected = 0;
    for m in outputs {
        hist.add(&m.hist).expect("same histogram bounds");
        report.committed += m.committed;
        report.aborted += m.aborted;
        report.reexecuted += m.stats.reexecuted;
        report.serialized += m.stats.serialized;
        report.epochs = report.epochs.max(m.stats.epochs);
        cpu_us += m.cpu_us;
        rss = rss.max(m.rss_at_stop);
        rejected += m.rejected;
        for (d, x) in deltas.iter_mut().zip(&m.deltas) {
            *d += i64::from(*x);
        }
        for (k, b) in m.balances {
            balances[k as usize] = Some(b);
        }
    }
    report.peak_rss_mb = rss as f64 / (1024.0 * 1024.0);
    report.latency_us = Latency::of(&hist);
    report.tps = report.committed as f64 / params.duration.as_secs_f64();
    report.tps_per_core = report.tps / f64::from(params.shards);
    report.cpu_us_per_txn = if report.committed > 0 {
        cpu_us as f64 / report.committed as f64
    } else {
        0.0
    };
    // Invariants: each balance is its start plus the committed transfers
    // that touched it; hence the total is conserved.
    let mut errors = Vec::new();
    let mut total: i64 = 0;
    for k in 0..params.keys as usize {
        let got = balances[k].unwrap_or(0);
        total += got;
        let want = START_BALANCE + deltas[k];
        if got != want && errors.len() < 10 {
            errors.push(format!("account {k}: balance {got}, expected {want}"));
        }
        if got < 0 && errors.len() < 10 {
            errors.push(format!("account {k} is overdrawn: {got}"));
        }
    }
    let want_total = START_BALANCE * params.keys as i64;
    if total != want_total {
        errors.push(format!("total {total}, expected {want_total}"));
    }
    if rejected > 0 {
        errors.push(format!("{rejected} requests were refused as overload"));
    }
    report.invariants_ok = errors.is_empty();
    report.invariant_errors = errors;
    if params.serial {
        report.serial_tps = serial_tps(
            params.keys,
            params.zipf,
            params.partitions,
            Duration::from_secs(2),
            params.seed,
        );
        report.efficiency = report.tps_per_core / report.serial_tps;
    }
    Ok(report)
}

/// The serial ceiling: the same transfer functions run one after another on
/// this thread with no concurrency control and no I/O, for about `time`.
pub fn serial_tps(keys: u64, zipf: Option<f64>, partitions: u32, time: Duration, seed: u64) -> f64 {
    let app = ycsbt::app(partitions);
    let functions = Functions::of(&app);
    let account = app.op_id(ycsbt::OPERATOR).expect("account operator");
    let mut serial = Serial::new(app, CallLimits::default());
    let start = ycsbt::start_value();
    for k in 0..keys {
        serial.load(account, Key::from(k), Some(start.clone()));
    }
    let mut workload = Workload::new(keys, (0..keys).collect(), zipf, seed);
    let mut run = |n: u64, tid0: u64| {
        for i in 0..n {
            let (d, c) = workload.next();
            let outcome = serial.execute(tid0 + i, 0, &ycsbt::transfer(&functions, d, c, 1));
            debug_assert!(matches!(outcome, Outcome::Committed(_)));
        }
    };
    run(100_000, 1); // warm caches and the allocator
    let begin = Instant::now();
    let mut done = 0u64;
    while begin.elapsed() < time {
        run(16_384, 1_000_000 + done);
        done += 16_384;
    }
    done as f64 / begin.elapsed().as_secs_f64()
}
