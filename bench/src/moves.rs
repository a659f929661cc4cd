//! Partition moves while a benchmark runs, and what they cost.
//!
//! A [`Plan`] is a list of steps at fixed times (from the start of the
//! warm-up): move a named partition to a shard, or rebalance (every shard
//! publishes its per-partition invocation counts and the driver submits
//! the moves [`styx_engine::balance::plan`] picks). Shard 0's generator is
//! the driver: it submits each move as a request (`Move::request`, the
//! same one `styx rebalance` sends) and notes when it is answered. The
//! new owner's generator watches its map; as soon as the map names it (at
//! the end of the epoch its background copy completed) it submits a probe, a `__get` of a key of
//! the moved partition, which is sequenced into a later epoch and so is
//! served by the new owner once the partition is installed. So a move
//! yields three times from its submission: answered (the move's epoch is
//! durable), switched (the new owner's map changed), served (the probe's
//! answer: the new owner serves the partition).
//!
//! A step is due at its time, and once every earlier move was answered
//! and served: moves never overlap, so each one's times are its own.
//!
//! The run's throughput and p99 are kept per window (the timeline's
//! buckets), and [`Figures`] compares the windows before the first move
//! (steady), from the first move's submission to the last one served
//! (during), and after.
//!
//! The generators keep sending as before: a request rooted in a moved
//! partition is sequenced where it was sent and hops to the new owner, as
//! for a client that has not learned the new map.

use crate::report::{Latency, histogram};
use crate::runner::TIMELINE_BUCKET_MS;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use styx_engine::balance::{self, Load};
use styx_engine::{
    Address, App, FnId, GET_FUNCTION, Key, Move, OpId, Outcome, Payload, Reply, Request, Shard, ShardId,
};

/// Tokens of move requests and probes: above any generator slot (`u32`).
pub const MOVE_TOKEN: u64 = 1 << 63;
pub const PROBE_TOKEN: u64 = 1 << 62;
/// Steps a plan holds at most.
pub const STEPS_MAX: usize = 10_000;
/// A rebalance moves at most this many partitions.
pub const REBALANCE_MOVES_MAX: usize = 64;
/// A rebalance stops once the busiest shard is within this share of the
/// mean load.
pub const REBALANCE_TOLERANCE: f64 = 0.05;

/// What a step does.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    Move {
        partition: u32,
        to: ShardId,
    },
    /// Moves partitions by the shards' per-partition invocation counts.
    Rebalance,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// When, from the start of the warm-up.
    pub at: Duration,
    pub action: Action,
}

/// Moves of one operator's partitions during a run.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub operator: String,
    pub steps: Vec<Step>,
}

impl Plan {
    /// `count` moves, `every` apart from `first_at`, cycling over
    /// partitions `0..partitions`, each to the shard after its owner: on
    /// two shards a partition goes back and forth.
    pub fn back_and_forth(
        operator: &str,
        shards: u16,
        partitions: u32,
        count: usize,
        first_at: Duration,
        every: Duration,
    ) -> Plan {
        assert!(shards >= 2 && partitions >= 1 && count <= STEPS_MAX);
        let mut owners: Vec<ShardId> = (0..partitions)
            .map(|p| styx_engine::partition_owner(p, shards))
            .collect();
        let steps = (0..count)
            .map(|i| {
                let partition = (i % partitions as usize) as u32;
                let to = (owners[partition as usize] + 1) % shards;
                owners[partition as usize] = to;
                Step {
                    at: first_at + every * i as u32,
                    action: Action::Move { partition, to },
                }
            })
            .collect();
        Plan {
            operator: operator.into(),
            steps,
        }
    }

    /// One rebalance at `at`.
    pub fn rebalance(operator: &str, at: Duration) -> Plan {
        Plan {
            operator: operator.into(),
            steps: vec![Step {
                at,
                action: Action::Rebalance,
            }],
        }
    }
}

/// One move as it happened. Times in ms: `at_ms` from the start of the
/// warm-up, the others from the move's submission.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct MoveRecord {
    pub partition: u32,
    pub from: ShardId,
    pub to: ShardId,
    /// Entities of the partition when the state was loaded.
    pub entities: u64,
    /// Its invocations counted before a rebalance picked it (0 otherwise).
    pub load: u64,
    pub at_ms: f64,
    /// The move's answer: its epoch is durable on every shard.
    pub answered_ms: Option<f64>,
    /// The new owner's map names it (the switch, after the copy).
    pub switched_ms: Option<f64>,
    /// A read of the partition submitted at the new owner once switched is
    /// answered: the new owner serves it.
    pub served_ms: Option<f64>,
    /// The move's or the probe's abort, if any (never expected).
    pub error: Option<String>,
}

/// One window of the run.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Window {
    /// Start, from the start of the warm-up.
    pub t_ms: u64,
    pub committed_per_s: f64,
    /// Of the replies in the window (by reply time, latency from the
    /// request's scheduled send).
    pub p99_us: u64,
}

/// Windows of one phase of the run taken together.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Phase {
    pub from_ms: u64,
    pub to_ms: u64,
    pub windows: usize,
    /// Mean committed per second over the phase's windows.
    pub tps: f64,
    pub min_window_tps: f64,
    pub max_window_tps: f64,
    pub latency_us: Latency,
    pub max_window_p99_us: u64,
}

/// A rebalance's input and plan: each shard's invocations counted so far,
/// and what they would have been with the planned moves.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Rebalance {
    pub shard_loads: Vec<u64>,
    pub planned_shard_loads: Vec<u64>,
}

/// What the moves cost.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Figures {
    pub window_ms: u64,
    pub moves: Vec<MoveRecord>,
    pub rebalances: Vec<Rebalance>,
    /// In the measured window, before the first move.
    pub steady: Phase,
    /// From the window of the first move's submission through the window
    /// in which the last move was served.
    pub during: Phase,
    /// The windows of `during` in which a move was under way (from its
    /// submission to its new owner serving it).
    pub in_move: Phase,
    /// The other windows of `during`: the same period without a move in
    /// flight (a reference that drifts with the machine as `in_move` does).
    pub between: Phase,
    /// After that, to the end of the measured window.
    pub after: Phase,
    /// `in_move.min_window_tps / steady.tps`: the worst dip (goal ≥ 0.9)…
    pub worst_window_ratio: f64,
    /// … against `steady.min_window_tps / steady.tps`, the worst window
    /// with no move (the noise).
    pub steady_worst_window_ratio: f64,
    /// `in_move.tps / steady.tps`.
    pub in_move_ratio: f64,
    /// `in_move.tps / between.tps`.
    pub in_move_between_ratio: f64,
    /// `in_move.latency_us.p99 / steady.latency_us.p99` (goal ≤ 2).
    pub p99_ratio: f64,
    /// `after.tps / steady.tps`: the gain of a rebalance.
    pub after_ratio: f64,
    pub windows: Vec<Window>,
}

impl Figures {
    /// A few lines for people.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let ms = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.1}"));
        s.push_str("  moves: partition from→to entities · answered / switched / served ms after submit\n");
        for m in &self.moves {
            s.push_str(&format!(
                "    p{:<4} {}→{} {:>9} · at {:>8.1} ms · {} / {} / {}{}{}\n",
                m.partition,
                m.from,
                m.to,
                m.entities,
                m.at_ms,
                ms(m.answered_ms),
                ms(m.switched_ms),
                ms(m.served_ms),
                if m.load > 0 {
                    format!(" · load {}", m.load)
                } else {
                    String::new()
                },
                m.error.as_ref().map_or(String::new(), |e| format!(" · ERROR {e}")),
            ));
        }
        for r in &self.rebalances {
            s.push_str(&format!(
                "  rebalance: invocations per shard {:?}, planned {:?}\n",
                r.shard_loads, r.planned_shard_loads
            ));
        }
        for (name, p) in [
            ("steady", &self.steady),
            ("during", &self.during),
            ("in move", &self.in_move),
            ("between", &self.between),
            ("after", &self.after),
        ] {
            s.push_str(&format!(
                "  {name:<7} {:>6}–{:<6} ms {:>3} windows  {:>10.0}/s (windows {:.0}–{:.0})  p99 {} µs (worst window {} µs)\n",
                p.from_ms,
                p.to_ms,
                p.windows,
                p.tps,
                p.min_window_tps,
                p.max_window_tps,
                p.latency_us.p99,
                p.max_window_p99_us
            ));
        }
        s.push_str(&format!(
            "  in move / steady {:.2} (/ between {:.2}) · worst window in move / steady {:.2} (without a move {:.2}) · p99 in move / steady {:.2} · after / steady {:.2}\n",
            self.in_move_ratio, self.in_move_between_ratio, self.worst_window_ratio, self.steady_worst_window_ratio, self.p99_ratio, self.after_ratio
        ));
        s
    }
}

/// A move's times, in µs since the Unix epoch, as the shards note them.
#[derive(Clone, Debug, Default)]
struct Noted {
    record: MoveRecord,
    submitted_us: u64,
    /// The driver's map version when it submitted the move: the new
    /// owner's map has switched once it names the new owner at a later
    /// version.
    version: u64,
    answered_us: Option<u64>,
    switched_us: Option<u64>,
    served_us: Option<u64>,
}

/// What every shard's mover shares.
pub(crate) struct Shared {
    plan: Plan,
    shards: u16,
    /// Per partition: its entities at load and one of its keys (the probe).
    entities: Mutex<Vec<u64>>,
    probes: Mutex<Vec<Option<Key>>>,
    noted: Mutex<Vec<Noted>>,
    /// Moves submitted (entries of `noted` the shards may look at).
    submitted: AtomicUsize,
    /// Moves answered and served.
    finished: AtomicUsize,
    /// Per shard, its per-partition invocation counts for a rebalance.
    loads: Mutex<Vec<Option<Vec<u64>>>>,
    /// Rebalances asked for so far: a shard publishes its counts once per.
    rebalances: AtomicUsize,
    planned: Mutex<Vec<Rebalance>>,
}

impl Shared {
    pub(crate) fn new(plan: Plan, app: &App, shards: u16) -> Arc<Shared> {
        let op = app
            .op_id(&plan.operator)
            .unwrap_or_else(|| panic!("no operator {:?} to move", plan.operator));
        let partitions = app.operator_info(op).partitions() as usize;
        for step in &plan.steps {
            if let Action::Move { partition, to } = step.action {
                assert!((partition as usize) < partitions && to < shards, "{step:?}");
            }
        }
        Arc::new(Shared {
            plan,
            shards,
            entities: Mutex::new(vec![0; partitions]),
            probes: Mutex::new(vec![None; partitions]),
            noted: Mutex::new(Vec::new()),
            submitted: AtomicUsize::new(0),
            finished: AtomicUsize::new(0),
            loads: Mutex::new(vec![None; usize::from(shards)]),
            rebalances: AtomicUsize::new(0),
            planned: Mutex::new(Vec::new()),
        })
    }

    /// The operator whose partitions move.
    pub(crate) fn op(&self, app: &App) -> OpId {
        app.op_id(&self.plan.operator).expect("checked in new")
    }

    /// Adds what one shard loaded: per partition, entities and a key.
    pub(crate) fn loaded(&self, entities: &[u64], keys: Vec<Option<Key>>) {
        for (all, n) in self.entities.lock().unwrap().iter_mut().zip(entities) {
            *all += n;
        }
        for (all, k) in self.probes.lock().unwrap().iter_mut().zip(keys) {
            if all.is_none() {
                *all = k;
            }
        }
    }

    /// The figures, from the windows' commits and latencies.
    pub(crate) fn figures(
        &self,
        origin: u64,
        committed: &[u64],
        latencies: &[Histogram<u64>],
        warmup: Duration,
        duration: Duration,
    ) -> Figures {
        let bucket_us = TIMELINE_BUCKET_MS * 1_000;
        let window_end = ((warmup + duration).as_micros() as u64 / bucket_us) as usize;
        let window_start = (warmup.as_micros() as u64).div_ceil(bucket_us) as usize;
        let windows: Vec<Window> = (0..window_end)
            .map(|b| Window {
                t_ms: b as u64 * TIMELINE_BUCKET_MS,
                committed_per_s: committed.get(b).copied().unwrap_or(0) as f64 * 1_000.0 / TIMELINE_BUCKET_MS as f64,
                p99_us: latencies
                    .get(b)
                    .map_or(0, |h| if h.is_empty() { 0 } else { h.value_at_quantile(0.99) }),
            })
            .collect();
        let noted = self.noted.lock().unwrap();
        let ms = |t: Option<u64>, from: u64| t.map(|t| t.saturating_sub(from) as f64 / 1_000.0);
        let moves: Vec<MoveRecord> = noted
            .iter()
            .map(|n| MoveRecord {
                at_ms: n.submitted_us.saturating_sub(origin) as f64 / 1_000.0,
                answered_ms: ms(n.answered_us, n.submitted_us),
                switched_ms: ms(n.switched_us, n.submitted_us),
                served_ms: ms(n.served_us, n.submitted_us),
                ..n.record.clone()
            })
            .collect();
        // The phases, in whole windows.
        let bucket_of = |t_us: u64| (t_us.saturating_sub(origin) / bucket_us) as usize;
        let first = noted.iter().map(|n| n.submitted_us).min();
        let last = noted
            .iter()
            .map(|n| n.served_us.max(n.answered_us).unwrap_or(n.submitted_us))
            .max();
        let (during_start, during_end) = match (first, last) {
            (Some(f), Some(l)) => (bucket_of(f).max(window_start), (bucket_of(l) + 1).max(window_start)),
            _ => (window_end, window_end),
        };
        let (during_start, during_end) = (during_start.min(window_end), during_end.min(window_end));
        // Windows in which some move was under way, from its submission
        // to its new owner serving it.
        let mut moving = vec![false; window_end];
        for n in noted.iter() {
            let end = n.served_us.max(n.answered_us).unwrap_or(n.submitted_us);
            for m in moving
                .iter_mut()
                .take(bucket_of(end) + 1)
                .skip(bucket_of(n.submitted_us))
            {
                *m = true;
            }
        }
        // `moving`: all windows, or only those with (without) a move.
        let some = |from: usize, to: usize, moving_only: Option<bool>| {
            let mut h = histogram();
            let mut p = Phase {
                from_ms: from as u64 * TIMELINE_BUCKET_MS,
                to_ms: to as u64 * TIMELINE_BUCKET_MS,
                min_window_tps: f64::INFINITY,
                ..Phase::default()
            };
            for (b, w) in windows.iter().enumerate().take(to).skip(from) {
                if moving_only.is_some_and(|m| m != moving[b]) {
                    continue;
                }
                p.windows += 1;
                p.tps += w.committed_per_s;
                p.min_window_tps = p.min_window_tps.min(w.committed_per_s);
                p.max_window_tps = p.max_window_tps.max(w.committed_per_s);
                p.max_window_p99_us = p.max_window_p99_us.max(w.p99_us);
                if let Some(l) = latencies.get(b) {
                    h.add(l).expect("same bounds");
                }
            }
            if p.windows > 0 {
                p.tps /= p.windows as f64;
            } else {
                p.min_window_tps = 0.0;
            }
            p.latency_us = Latency::of(&h);
            p
        };
        let steady = some(window_start, during_start, None);
        let during = some(during_start, during_end, None);
        let in_move = some(during_start, during_end, Some(true));
        let between = some(during_start, during_end, Some(false));
        let after = some(during_end, window_end, None);
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        Figures {
            window_ms: TIMELINE_BUCKET_MS,
            moves,
            rebalances: self.planned.lock().unwrap().clone(),
            worst_window_ratio: ratio(in_move.min_window_tps, steady.tps),
            steady_worst_window_ratio: ratio(steady.min_window_tps, steady.tps),
            in_move_ratio: ratio(in_move.tps, steady.tps),
            in_move_between_ratio: ratio(in_move.tps, between.tps),
            p99_ratio: ratio(in_move.latency_us.p99 as f64, steady.latency_us.p99 as f64),
            after_ratio: ratio(after.tps, steady.tps),
            steady,
            during,
            in_move,
            between,
            after,
            windows,
        }
    }
}

/// One shard's part: shard 0 drives the plan; every shard watches for
/// moves to it and probes them.
pub(crate) struct Mover {
    shared: Arc<Shared>,
    op: OpId,
    get: FnId,
    me: ShardId,
    /// The next step of the plan (the driver's).
    next: usize,
    /// Entries of `noted` this shard looked at.
    seen: usize,
    /// Moves to this shard not yet switched here.
    watching: Vec<usize>,
    /// The map version `watching` was last checked against (`None`: check
    /// at the next pump). Checking only when it changed keeps the watch
    /// off the measured path: a copy of the map and two locks shared with
    /// the other shards at every loop iteration while a move copied were
    /// ~0.8% of a run's CPU, all of it inside the windows it measures.
    checked_version: Option<u64>,
    /// Moves and probes awaiting their answer.
    outstanding: usize,
    /// Rebalances whose counts this shard published.
    published: usize,
    /// The driver waits for every shard's counts.
    rebalancing: bool,
}

impl Mover {
    pub(crate) fn new(shared: Arc<Shared>, app: &App, me: ShardId) -> Mover {
        let op = shared.op(app);
        let get = app
            .resolve(&shared.plan.operator, GET_FUNCTION)
            .expect("every operator has __get");
        Mover {
            shared,
            op,
            get,
            me,
            next: 0,
            seen: 0,
            watching: Vec::new(),
            checked_version: None,
            outstanding: 0,
            published: 0,
            rebalancing: false,
        }
    }

    fn is_driver(&self) -> bool {
        self.me == 0
    }

    /// Submits the plan's steps that are due (before `stop_at`), publishes
    /// counts for a rebalance, and probes moves that switched here.
    pub(crate) fn pump(&mut self, shard: &mut Shard, now: u64, origin: u64, stop_at: u64) -> bool {
        let mut did = false;
        if self.published < self.shared.rebalances.load(Ordering::Acquire) {
            self.published += 1;
            let counts = shard.partition_invocations(self.op).to_vec();
            self.shared.loads.lock().unwrap()[usize::from(self.me)] = Some(counts);
        }
        if self.is_driver() {
            did |= self.drive(shard, now, origin, stop_at);
        }
        let submitted = self.shared.submitted.load(Ordering::Acquire);
        if self.seen < submitted {
            let noted = self.shared.noted.lock().unwrap();
            for i in self.seen..submitted {
                if noted[i].record.to == self.me {
                    self.watching.push(i);
                    self.checked_version = None;
                }
            }
            self.seen = submitted;
        }
        let version = shard.partition_map_version();
        if !self.watching.is_empty() && self.checked_version != Some(version) {
            self.checked_version = Some(version);
            let map = shard.partition_map();
            let mut noted = self.shared.noted.lock().unwrap();
            let probes = self.shared.probes.lock().unwrap();
            let mut i = 0;
            while i < self.watching.len() {
                let n = &mut noted[self.watching[i]];
                if map.owner(self.op, n.record.partition) == self.me && map.version() > n.version {
                    n.switched_us = Some(now);
                    let key = probes[n.record.partition as usize]
                        .clone()
                        .expect("a moved partition holds a key");
                    let probe = Request {
                        function: self.get,
                        address: Address::Entity(key),
                        args: Payload::encode(&()),
                        client: None,
                    };
                    shard
                        .submit(PROBE_TOKEN | self.watching[i] as u64, probe)
                        .expect("a probe is accepted");
                    self.outstanding += 1;
                    self.watching.swap_remove(i);
                    did = true;
                } else {
                    i += 1;
                }
            }
        }
        did
    }

    fn drive(&mut self, shard: &mut Shard, now: u64, origin: u64, stop_at: u64) -> bool {
        let steps = &self.shared.plan.steps;
        let mut did = false;
        while self.next < steps.len() && now >= origin + steps[self.next].at.as_micros() as u64 && now < stop_at {
            // Moves never overlap: a step waits until every earlier move was
            // answered and served (so this shard's map is past them too).
            if self.shared.finished.load(Ordering::Acquire) < self.shared.submitted.load(Ordering::Acquire) {
                return did;
            }
            let moves = match steps[self.next].action {
                Action::Move { partition, to } if shard.partition_map().owner(self.op, partition) == to => {
                    // Already there (a rebalance moved it): nothing to time.
                    Vec::new()
                }
                Action::Move { partition, to } => vec![(
                    Move {
                        op: self.op,
                        partition,
                        to,
                        share: None,
                    },
                    0,
                )],
                Action::Rebalance => {
                    if !self.rebalancing {
                        self.rebalancing = true;
                        self.shared.loads.lock().unwrap().iter_mut().for_each(|l| *l = None);
                        self.shared.rebalances.fetch_add(1, Ordering::AcqRel);
                        return did;
                    }
                    let Some(moves) = self.rebalance_plan(shard) else {
                        return did;
                    };
                    self.rebalancing = false;
                    moves
                }
            };
            self.next += 1;
            let map = shard.partition_map();
            let entities = self.shared.entities.lock().unwrap().clone();
            for (m, load) in moves {
                let index = self.shared.noted.lock().unwrap().len();
                shard
                    .submit(MOVE_TOKEN | index as u64, m.request())
                    .expect("a move is accepted");
                self.shared.noted.lock().unwrap().push(Noted {
                    record: MoveRecord {
                        partition: m.partition,
                        from: map.owner(self.op, m.partition),
                        to: m.to,
                        entities: entities[m.partition as usize],
                        load,
                        ..MoveRecord::default()
                    },
                    submitted_us: now,
                    version: map.version(),
                    ..Noted::default()
                });
                self.outstanding += 1;
                self.shared.submitted.store(index + 1, Ordering::Release);
                did = true;
            }
        }
        did
    }

    /// Once every shard published its counts: the moves that even them
    /// out, with each one's load.
    fn rebalance_plan(&self, shard: &Shard) -> Option<Vec<(Move, u64)>> {
        let loads = self.shared.loads.lock().unwrap();
        if loads.iter().any(Option::is_none) {
            return None;
        }
        let map = shard.partition_map();
        let partitions = loads[0].as_ref().expect("published").len();
        let of: Vec<Load> = (0..partitions as u32)
            .map(|p| Load {
                partition: p,
                owner: map.owner(self.op, p),
                // A partition's invocations ran where it lived: counts of
                // every shard add up.
                load: loads.iter().map(|l| l.as_ref().expect("published")[p as usize]).sum(),
            })
            .collect();
        let moves = balance::plan(
            self.op,
            &of,
            self.shared.shards,
            REBALANCE_TOLERANCE,
            REBALANCE_MOVES_MAX,
        );
        let mut r = Rebalance {
            shard_loads: vec![0; usize::from(self.shared.shards)],
            planned_shard_loads: vec![0; usize::from(self.shared.shards)],
        };
        for l in &of {
            r.shard_loads[usize::from(l.owner)] += l.load;
            let to = moves
                .iter()
                .find(|m| m.partition == l.partition)
                .map_or(l.owner, |m| m.to);
            r.planned_shard_loads[usize::from(to)] += l.load;
        }
        self.shared.planned.lock().unwrap().push(r);
        Some(moves.into_iter().map(|m| (m, of[m.partition as usize].load)).collect())
    }

    /// Takes a reply if it is a move's or a probe's.
    pub(crate) fn deliver(&mut self, reply: &Reply, now: u64) -> bool {
        let (index, probe) = if reply.token & MOVE_TOKEN != 0 {
            ((reply.token & !MOVE_TOKEN) as usize, false)
        } else if reply.token & PROBE_TOKEN != 0 {
            ((reply.token & !PROBE_TOKEN) as usize, true)
        } else {
            return false;
        };
        self.outstanding -= 1;
        let mut noted = self.shared.noted.lock().unwrap();
        let n = &mut noted[index];
        if let Outcome::Aborted(a) = &reply.outcome {
            n.record.error = Some(format!("{}: {a}", if probe { "probe" } else { "move" }));
        }
        if probe {
            n.served_us = Some(now);
        } else {
            n.answered_us = Some(now);
        }
        if n.served_us.is_some() && n.answered_us.is_some() {
            self.shared.finished.fetch_add(1, Ordering::AcqRel);
        }
        true
    }

    /// Whether this shard awaits nothing: the driver also waits until every
    /// move was answered and served (the new owner's probe), so the run
    /// does not end before.
    pub(crate) fn is_done(&self) -> bool {
        self.outstanding == 0
            && self.watching.is_empty()
            && (!self.is_driver()
                || self.shared.finished.load(Ordering::Acquire) == self.shared.submitted.load(Ordering::Acquire))
    }
}
