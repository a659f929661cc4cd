//! A cluster in the simulator: 2–3 nodes of 1–2 shards each, remote links
//! that delay batches, and failures at random points while exactly-once
//! clients send cross-shard transfers and balance reads on a few hot
//! accounts (and retry them, acknowledging answers in half the seeds).
//!
//! It recovers as `runtime::cluster` does, through the same code. A node
//! crashes (or a link breaks, which fails the run just the same); the others
//! run on for a while — they have not noticed yet, and clients still send to
//! them — then every node stops, every batch in flight is lost (links
//! reconnect under a new run id, so frames of the old run never arrive), and
//! all shards are rebuilt from the disks by [`Disks::restart`], that is by
//! `styx_engine::recovery`: the newest snapshot that *every* node committed
//! (each node commits its own manifest), then every log replayed up to the
//! newest epoch *any* log reached, the epochs a log lacks written to it
//! empty and replayed empty. The test works out that plan from the disks on
//! its own and requires recovery to agree. Clients retry everything
//! unanswered with the same `(client, seq)`. A seed fails one to
//! [`CRASHES_MAX`] times, sometimes during the replay of the previous
//! recovery.
//!
//! The disks ([`Disks`]): a crashed node keeps what it had made durable (its
//! fsynced log batches, its snapshot files, its manifests), not its queued
//! log writes; the other nodes keep everything they wrote until they
//! stopped. Crashes fall between the simulator's steps: a step writes and
//! fsyncs a log batch together, so a cut inside one leaves the same disk as
//! a cut before it (`crash_points.rs` cuts one node's journal at every
//! event). Rolling back to a snapshot drops every newer one on every node
//! (the catalog's rollback); logs are never truncated here.
//!
//! The checks, at each crash:
//!
//! - every reply the run released is for an epoch every shard's log holds
//!   (a reply waits for all of them);
//!
//! and at the end, over the lineage of epochs that survived every crash:
//!
//! - (a) every reply any run released is in it with the outcome the client
//!   saw: no acknowledged transaction is lost or changed;
//! - (b) the final state is the serial execution of the logged transactions,
//!   epoch by epoch in the engine's serial order, and so is every restored
//!   snapshot;
//! - (c) money is conserved;
//! - (d) every `(client, seq)` ran at most once and every answer to it (the
//!   first, retries in flight, retries after recovery) has the same tid and
//!   outcome, unless it was refused as forgotten after its client
//!   acknowledged it; a last round of retries of everything sequences
//!   nothing and changes nothing.
//!
//! With moves (`nodes_crash_at_random_points_during_moves`), some requests
//! move a partition to a random shard, often one on another node (exactly
//! once, retried like the others), and at the end every shard holds the map
//! the lineage's logged moves make, every entity where it says.
//! With handovers, shards go to random nodes too; with leaves besides
//! (`nodes_crash_at_random_points_during_leaves`), nodes are drained and
//! asked to leave, handovers to a node that left are refused unrun (a
//! retry of one already answered still gets its answer), and no node that
//! left runs a shard again.
//!
//! `STYX_SIM_SEEDS=n` runs `n` seeds (default [`SEEDS_DEFAULT`]) from
//! `STYX_SIM_SEED_FIRST` (default 0); `STYX_SIM_SEED=s` runs only seed `s`
//! (`common::swarm`). A failure prints the seed, its settings and its
//! crashes, and the command that replays it.

mod common;

use common::*;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use styx_engine::rng::Rng;
use styx_engine::sim::{DiskEvent, Disks, Restart, STUCK_STEPS_MAX, Sim, test_config};
use styx_engine::{
    AbortKind, Address, App, Config, Epoch, EpochRecord, Handover, Key, Layout, Move, OpId, Outcome, Payload, Reply,
    Request, ShardId, SnapshotChunk, Tid, Token, Value, mix64,
};

const ACCOUNTS: u64 = 24;
const START: i64 = 6;
/// Accounts most requests touch, and how many do.
const HOT_ACCOUNTS: u64 = 4;
const HOT_CHANCE: f64 = 0.5;
/// The share of requests that read a balance.
const READ_CHANCE: f64 = 0.2;
const CLIENTS: u64 = 6;
/// Requests sent per seed (new ones, retries, client-less ones).
const REQUESTS: u64 = 200;
/// Per step, the chance that a client sends a request.
const SEND_CHANCE: f64 = 0.05;
/// Node crashes per seed at most (at least one).
const CRASHES_MAX: u64 = 3;
/// The chance that a failure is a broken link rather than a node crash.
const LINK_FAILURE_CHANCE: f64 = 0.15;
/// Steps the survivors of a crash run before they notice it, at most.
const DETECT_STEPS_MAX: u64 = 400;
/// Seeds a plain `cargo test` runs: 10 s in release on two quiet cores, 30 s
/// on two cores loaded six deep.
const SEEDS_DEFAULT: u64 = 8_000;
/// Seeds the variant with moves runs by default.
const SEEDS_WITH_MOVES: u64 = 2_000;
/// With moves, the share of requests that move a partition.
const MOVE_CHANCE: f64 = 0.08;
/// Seeds the variant with handovers runs by default.
const SEEDS_WITH_HANDOVERS: u64 = 2_000;
/// With handovers, the share of requests that hand a shard to a node.
const HANDOVER_CHANCE: f64 = 0.06;
/// Seeds the variant with leaves runs by default.
const SEEDS_WITH_LEAVES: u64 = 1_000;
/// With leaves, the share of handover requests that drain a node: hand
/// away a shard of the node running fewest, or ask it to leave once it
/// runs none.
const DRAIN_CHANCE: f64 = 0.6;
/// With leaves, the share of seeds whose cluster lists one more node,
/// absent (not joined), and the share of handover requests that ask it
/// to join while it is absent.
const ABSENT_CHANCE: f64 = 0.5;
const JOIN_CHANCE: f64 = 0.15;
/// Paces of moves `(most, least, per ms)`: a fixed share of one or three
/// entities, one per logged microsecond from 1 to 64, all in one share.
const MOVE_SHARES: [(usize, usize, usize); 4] = [(1, 1, 100), (3, 3, 100), (64, 1, 1_000), (4_096, 4_096, 100)];
/// Tokens of client submissions start here: in the range of tids, so a
/// replayed transaction's outcome taken for a live reply would show.
const TOKEN_BASE: Token = 1;
/// How nodes split the shards, per seed.
const LAYOUTS: [&[u16]; 8] = [
    &[1, 1],
    &[1, 2],
    &[2, 1],
    &[2, 2],
    &[1, 1, 1],
    &[2, 1, 1],
    &[1, 2, 2],
    &[2, 2, 2],
];

/// One run of the cluster: from a recovery (or the start) to a crash (or
/// the end).
struct Run {
    sim: Sim,
    /// The snapshot it started from.
    snapshot: Epoch,
    /// Disk events of `sim` already moved to the disks.
    absorbed: usize,
    /// Every snapshot chunk `sim` emitted, in order (`DiskEvent::Chunk`
    /// indexes them).
    chunks: Vec<SnapshotChunk>,
    /// Hand-offs of `sim` already counted.
    handoffs: u64,
}

/// One request a client sent (a token per attempt).
struct Sent {
    key: Option<(u64, u64)>,
    request: Request,
}

/// What one crash did, to replay it.
struct Crash {
    /// `None`: a link broke, no node crashed.
    node: Option<u16>,
    /// The harness step it happened after, and the crashed run's disk events
    /// before it.
    step: u64,
    events: usize,
    /// Steps the survivors ran on.
    detect_steps: u64,
    /// Whether a shard was still replaying the previous recovery.
    during_replay: bool,
    /// Where the cluster restarted from: the snapshot, the replay's end.
    restart: Option<(Epoch, Epoch)>,
}

impl std::fmt::Debug for Crash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.node {
            Some(node) => write!(f, "node {node} crashed")?,
            None => write!(f, "a link broke")?,
        }
        write!(
            f,
            " after step {} (disk event {} of its run{}), noticed {} steps later",
            self.step,
            self.events,
            if self.during_replay { ", during replay" } else { "" },
            self.detect_steps,
        )?;
        match self.restart {
            Some((snapshot, replay_to)) => {
                write!(f, ", restarted from snapshot {snapshot} replaying to epoch {replay_to}")
            }
            None => write!(f, ", not restarted yet"),
        }
    }
}

/// What the seeds exercised, summed.
#[derive(Default)]
struct Counts {
    seeds: u64,
    crashes: u64,
    during_replay: u64,
    from_snapshot: u64,
    /// A node had committed a newer snapshot than the one every node had.
    rolled_back: u64,
    /// Some log lacked an epoch another log held.
    partial_epochs: u64,
    /// Replies the survivors released after the crash.
    released_after_crash: u64,
    /// Batches in flight lost at a restart.
    frames_lost: u64,
    replies_checked: u64,
    /// Answers to a `(client, seq)` already answered.
    repeat_answers: u64,
    /// Client-less requests in flight at a crash (never retried).
    abandoned: u64,
    /// Retries refused because their client acknowledged the answer.
    forgotten: u64,
    /// Failures where a link broke and no node crashed.
    link_failures: u64,
    epochs: u64,
    /// Move requests sent (new ones).
    moves: u64,
    /// Handover requests sent (new ones).
    handovers: u64,
    /// Leave requests sent (new ones).
    leaves_sent: u64,
    /// Nodes that left, in the lineage's final layouts.
    leaves_made: u64,
    /// Recoveries that replayed the epoch a leave was decided at (so
    /// decided it again).
    redecided_leaves: u64,
    /// Recoveries that restored a snapshot taken after a leave (its layout
    /// holds the nodes that left).
    restored_leaves: u64,
    /// Join requests sent (new ones).
    joins_sent: u64,
    /// Nodes that joined, in the lineage's final layouts.
    joins_made: u64,
    /// Recoveries that replayed the epoch a join was decided at.
    redecided_joins: u64,
    /// Recoveries that restored a snapshot taken after a join.
    restored_joins: u64,
    /// Handovers and leaves refused against the layout (never sequenced).
    refused: u64,
    /// Recoveries whose disks held a shard's log in pieces on two nodes.
    recovered_handed: u64,
    /// Shards rebuilt on their new node from their hand-off.
    handoffs: u64,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.seeds += o.seeds;
        self.crashes += o.crashes;
        self.during_replay += o.during_replay;
        self.from_snapshot += o.from_snapshot;
        self.rolled_back += o.rolled_back;
        self.partial_epochs += o.partial_epochs;
        self.released_after_crash += o.released_after_crash;
        self.frames_lost += o.frames_lost;
        self.replies_checked += o.replies_checked;
        self.repeat_answers += o.repeat_answers;
        self.abandoned += o.abandoned;
        self.forgotten += o.forgotten;
        self.link_failures += o.link_failures;
        self.epochs += o.epochs;
        self.moves += o.moves;
        self.handovers += o.handovers;
        self.leaves_sent += o.leaves_sent;
        self.leaves_made += o.leaves_made;
        self.redecided_leaves += o.redecided_leaves;
        self.restored_leaves += o.restored_leaves;
        self.joins_sent += o.joins_sent;
        self.joins_made += o.joins_made;
        self.redecided_joins += o.redecided_joins;
        self.restored_joins += o.restored_joins;
        self.refused += o.refused;
        self.recovered_handed += o.recovered_handed;
        self.handoffs += o.handoffs;
    }
}

struct Cluster {
    seed: u64,
    app: Arc<App>,
    config: Config,
    /// Per node, the shards it runs at the start (node 0 the first ones).
    layout: Vec<u16>,
    /// The nodes listed and not joined at the start (they run none).
    absent: Vec<u16>,
    shards: u16,
    fsync_busy: f64,
    remote_delay_us_max: u64,
    rng: Rng,
    initial: Vec<(OpId, Key, Value)>,
    /// What the nodes' disks hold, across runs.
    disks: Disks,
    run: Run,
    /// Runs so far (the current one included).
    runs: u64,
    steps: u64,
    crashes: Vec<Crash>,
    /// The epochs of the lineage: each epoch's records from the run that
    /// ran it last (replay included).
    history: BTreeMap<Epoch, Vec<EpochRecord>>,
    /// Every snapshot a recovery restored, with the state it held.
    restored: Vec<(Epoch, State)>,
    sent: HashMap<Token, Sent>,
    /// Exactly-once requests by `(client, seq)`.
    requests: BTreeMap<(u64, u64), Request>,
    next_seq: Vec<u64>,
    /// Whether clients acknowledge answers (the engine then forgets them).
    acks: bool,
    /// Per client, the highest ack it sent.
    ack_sent: Vec<u64>,
    /// Requests sent so far (attempts the harness makes after a crash
    /// excluded).
    sends: u64,
    next_token: Token,
    /// Attempts waiting for a shard that takes requests (not replaying).
    outbox: VecDeque<Token>,
    /// Attempts submitted to the current run and not answered.
    in_flight: BTreeSet<Token>,
    /// The first answer to each `(client, seq)`.
    answered: BTreeMap<(u64, u64), (Tid, Outcome)>,
    /// Every answer to a client, in order, with the run that released it.
    replies: Vec<(u64, Reply)>,
    counts: Counts,
    /// Whether some requests move partitions.
    moves: bool,
    /// Whether some requests hand shards to other nodes.
    handovers: bool,
    /// Whether some handovers drain nodes and ask drained nodes to leave.
    leaves: bool,
    /// Exactly-once requests refused against the layout at least once.
    refused: BTreeSet<(u64, u64)>,
}

impl Cluster {
    fn new(seed: u64, moves: bool, handovers: bool, leaves: bool) -> Cluster {
        let mut rng = Rng::new(seed);
        let mut layout = LAYOUTS[rng.below(LAYOUTS.len() as u64) as usize].to_vec();
        let shards: u16 = layout.iter().sum();
        // (No draw without leaves: those seeds run as before.)
        let mut absent = Vec::new();
        if leaves && rng.chance(ABSENT_CHANCE) {
            absent.push(layout.len() as u16);
            layout.push(0);
        }
        let app = bank(8);
        let mut config = test_config(8);
        config.snapshot_interval_us = [250, 1_500][rng.below(2) as usize];
        config.epoch_gather_us = 30;
        config.step_messages_max = [2, 8, 64][rng.below(3) as usize];
        // Moves copy over several epochs (a fixed share, or one entity
        // per logged microsecond since the last share), or in one; each
        // run after a crash paces the moves it sequences another way
        // (`Cluster::run_config`), and replays the logged ones at theirs.
        (
            config.move_share_entities,
            config.move_share_min_entities,
            config.move_share_per_ms,
        ) = MOVE_SHARES[(seed % 4) as usize];
        // Every shard stops at a change of the layout (as the runtime's
        // do), or only those leaving their node.
        config.pause_at_handover = seed / 3 % 2 == 1;
        let fsync_busy = [0.0, 0.3, 0.7, 0.9][rng.below(4) as usize];
        let remote_delay_us_max = [20, 200, 1_000][rng.below(3) as usize];
        let acks = rng.chance(0.5);
        let initial = accounts(ACCOUNTS, START);
        let disks = Disks::with_absent(&layout, &absent, &initial);
        let mut cluster = Cluster {
            seed,
            app,
            config,
            layout,
            absent,
            shards,
            fsync_busy,
            remote_delay_us_max,
            rng,
            disks,
            run: Run {
                // Replaced below.
                sim: Sim::new(bank(1), test_config(1), 1, 0),
                snapshot: 0,
                absorbed: 0,
                chunks: Vec::new(),
                handoffs: 0,
            },
            initial,
            runs: 0,
            steps: 0,
            crashes: Vec::new(),
            history: BTreeMap::new(),
            restored: Vec::new(),
            sent: HashMap::new(),
            requests: BTreeMap::new(),
            next_seq: vec![1; CLIENTS as usize],
            acks,
            ack_sent: vec![0; CLIENTS as usize],
            sends: 0,
            next_token: TOKEN_BASE,
            outbox: VecDeque::new(),
            in_flight: BTreeSet::new(),
            answered: BTreeMap::new(),
            replies: Vec::new(),
            counts: Counts {
                seeds: 1,
                ..Counts::default()
            },
            moves,
            handovers,
            leaves,
            refused: BTreeSet::new(),
        };
        cluster.run = cluster.start_run().0;
        cluster
    }

    /// The layout the cluster starts with: its nodes in order, those
    /// absent not joined.
    fn first_layout(&self) -> Layout {
        Layout::contiguous(&self.layout)
            .with_absent(self.absent.clone())
            .expect("absent nodes run none")
    }

    fn describe(&self) -> String {
        format!(
            "seed {} (nodes {:?}, absent {:?}, snapshot every {} µs, fsync busy {}, remote delay ≤ {} µs, step_messages_max {}, \
             acks {}, pause at handovers {}), run {}, step {}, crashes {:?}",
            self.seed,
            self.layout,
            self.absent,
            self.config.snapshot_interval_us,
            self.fsync_busy,
            self.remote_delay_us_max,
            self.config.step_messages_max,
            self.acks,
            self.config.pause_at_handover,
            self.runs,
            self.steps,
            self.crashes
        )
    }

    /// The configuration of the current run: the seed's, with the pace of
    /// the moves it sequences turned by the run.
    fn run_config(&self) -> Config {
        let mut config = self.config.clone();
        (
            config.move_share_entities,
            config.move_share_min_entities,
            config.move_share_per_ms,
        ) = MOVE_SHARES[((self.seed + self.runs.saturating_sub(1)) % 4) as usize];
        config
    }

    /// A fresh run of every shard, recovered from the disks (the first
    /// one: from the initial load).
    fn start_run(&mut self) -> (Run, Restart) {
        let n = self.shards;
        let now_us = if self.runs == 0 {
            None
        } else {
            // The restart takes a while.
            Some(self.run.sim.now_us() + 1_000_000)
        };
        self.runs += 1;
        let mut sim = Sim::new(
            self.app.clone(),
            self.run_config(),
            n,
            mix64(self.seed ^ (self.runs << 48)),
        );
        sim.set_layout(self.first_layout());
        sim.set_fsync_busy(self.fsync_busy);
        sim.set_remote_delay_us_max(self.remote_delay_us_max);
        if let Some(now_us) = now_us {
            sim.advance_clock_us(now_us);
        }
        let restart = self
            .disks
            .restart(&mut sim)
            .unwrap_or_else(|e| panic!("recovery refused the disks: {e}"));
        if self.runs > 1 && self.disks.holds_pieces() {
            self.counts.recovered_handed += 1;
        }
        if restart.snapshot() > 0 {
            self.restored.push((restart.snapshot(), restart.restored.clone()));
        }
        let run = Run {
            sim,
            snapshot: restart.snapshot(),
            absorbed: 0,
            chunks: Vec::new(),
            handoffs: 0,
        };
        (run, restart)
    }

    /// Moves what the current run wrote since the last call to the disks.
    fn absorb(&mut self) {
        let run = &mut self.run;
        self.counts.handoffs += run.sim.handoffs() - run.handoffs;
        run.handoffs = run.sim.handoffs();
        run.chunks.append(&mut run.sim.take_snapshots());
        let events = run.sim.disk_events();
        for (i, event) in events.iter().enumerate().skip(run.absorbed) {
            if let DiskEvent::LogWrite { node, shard, epoch } = *event {
                // Its fsync follows in the same step: a crash never splits them.
                assert_eq!(events.get(i + 1), Some(&DiskEvent::LogSync { node, shard, epoch }));
            }
        }
        let sim = &run.sim;
        let sealed = |shard: ShardId, epoch: Epoch| {
            sim.log(shard)
                .iter()
                .rev()
                .find(|b| b.epoch == epoch)
                .expect("a synced batch was sealed")
                .clone()
        };
        self.disks.absorb(&events[run.absorbed..], &run.chunks, &sealed);
        run.absorbed = events.len();
        for r in run.sim.take_history() {
            assert!(r.epoch > run.snapshot, "epoch {} ran again after its snapshot", r.epoch);
            self.history.entry(r.epoch).or_default().push(r);
        }
    }

    /// Now and then, until [`REQUESTS`] went out, a client sends a request.
    fn maybe_send(&mut self) {
        if self.sends < REQUESTS && self.rng.chance(SEND_CHANCE) {
            self.send();
            self.sends += 1;
        }
    }

    /// A client sends a request: a new one, a retry of one of its earlier
    /// ones (answered or not), or one without a client id.
    fn send(&mut self) {
        let rng = &mut self.rng;
        let client = rng.below(CLIENTS);
        // (No draw without moves: those seeds replay as before.)
        let request = if self.moves && rng.chance(MOVE_CHANCE) {
            self.counts.moves += 1;
            Move {
                op: OpId(0),
                partition: rng.below(8) as u32,
                to: rng.below(u64::from(self.shards)) as ShardId,
                share: None,
            }
            .request()
        } else if self.handovers && rng.chance(HANDOVER_CHANCE) {
            let layout = self.run.sim.layout();
            let drain = if self.leaves && !layout.absent().is_empty() && rng.chance(JOIN_CHANCE) {
                Some(Handover::join(layout.absent()[0]))
            } else if self.leaves && rng.chance(DRAIN_CHANCE) {
                drain_step(layout, rng)
            } else {
                None
            };
            let h = drain.unwrap_or_else(|| Handover {
                shard: rng.below(u64::from(self.shards)) as ShardId,
                node: rng.below(self.layout.len() as u64) as u16,
            });
            match (h.is_leave(), h.is_join()) {
                (true, _) => self.counts.leaves_sent += 1,
                (_, true) => self.counts.joins_sent += 1,
                _ => self.counts.handovers += 1,
            }
            h.request()
        } else {
            new_request(&self.app, rng)
        };
        let sent = if rng.chance(0.1) {
            Sent { key: None, request }
        } else if rng.chance(0.7) || self.next_seq[client as usize] == 1 {
            let seq = self.next_seq[client as usize];
            self.next_seq[client as usize] += 1;
            let mut request = with_client(request, client, seq);
            if self.acks {
                // Every seq below the first unanswered one is answered.
                let mut ack = self.ack_sent[client as usize].max(1);
                while self.answered.contains_key(&(client, ack)) {
                    ack += 1;
                }
                request.client.as_mut().expect("a client").ack = ack;
                self.ack_sent[client as usize] = ack;
            }
            self.requests.insert((client, seq), request.clone());
            Sent {
                key: Some((client, seq)),
                request,
            }
        } else {
            let seq = 1 + rng.below(self.next_seq[client as usize] - 1);
            Sent {
                key: Some((client, seq)),
                request: self.requests[&(client, seq)].clone(),
            }
        };
        self.queue(sent);
    }

    fn queue(&mut self, sent: Sent) {
        let token = self.next_token;
        self.next_token += 1;
        self.sent.insert(token, sent);
        self.outbox.push_back(token);
    }

    /// Submits waiting attempts, each on a random shard that takes requests.
    fn submit_ready(&mut self) {
        while let Some(&token) = self.outbox.front() {
            let sim = &self.run.sim;
            let ready: Vec<ShardId> = (0..self.shards)
                .filter(|s| sim.is_alive(*s) && !sim.shard(*s).is_replaying())
                .collect();
            if ready.is_empty() {
                return;
            }
            let shard = ready[self.rng.below(ready.len() as u64) as usize];
            let pace = self.run_config().move_share();
            let sent = self.sent.get_mut(&token).expect("queued");
            // A move naming no pace is logged with the run's.
            if sent.key.is_none() {
                sent.request = Move::with_default_share(sent.request.clone(), pace);
            }
            let request = sent.request.clone();
            match self.run.sim.submit(shard, token, request) {
                Ok(()) => {
                    self.in_flight.insert(token);
                }
                Err(abort) => self.refuse(token, &Outcome::Aborted(abort)),
            }
            self.outbox.pop_front();
        }
    }

    /// Takes the replies released so far; returns how many reached clients.
    fn take_replies(&mut self) -> u64 {
        let mut count = 0;
        for r in self.run.sim.take_replayed() {
            assert_eq!(r.token, r.tid, "a replayed transaction's outcome carries its tid");
        }
        for r in self.run.sim.take_replies() {
            assert!(
                self.in_flight.remove(&r.token),
                "reply to attempt {} which is not in flight",
                r.token
            );
            let sent = &self.sent[&r.token];
            if r.tid == 0 && Handover::of(&sent.request).is_some() && !is_forgotten(&r.outcome) {
                self.refuse(r.token, &r.outcome);
                continue;
            }
            if r.tid == 0 {
                // Refused unrun: only a seq its client acknowledged may be
                // (or a handover the layout refuses, above).
                let key = sent.key.expect("a client-less request is never refused");
                assert!(
                    matches!(&r.outcome, Outcome::Aborted(a) if a.kind() == AbortKind::Forgotten),
                    "attempt {} of {key:?} refused: {:?}",
                    r.token,
                    r.outcome
                );
                assert!(
                    key.1 < self.ack_sent[key.0 as usize] && self.answered.contains_key(&key),
                    "{key:?} forgotten though its client did not acknowledge it"
                );
                self.counts.forgotten += 1;
                continue;
            }
            if let Some(key) = sent.key {
                match self.answered.get(&key) {
                    Some(first) => {
                        self.counts.repeat_answers += 1;
                        assert_eq!(
                            (&r.tid, &r.outcome),
                            (&first.0, &first.1),
                            "(client, seq) {key:?} answered twice, differently"
                        );
                    }
                    None => {
                        self.answered.insert(key, (r.tid, r.outcome.clone()));
                    }
                }
            }
            self.replies.push((self.runs, r));
            count += 1;
        }
        count
    }

    /// A handover (or leave) refused against the layout, unrun: its
    /// client may try again.
    fn refuse(&mut self, token: Token, outcome: &Outcome) {
        let sent = &self.sent[&token];
        assert!(
            Handover::of(&sent.request).is_some()
                && matches!(outcome, Outcome::Aborted(a) if a.kind() == AbortKind::UnknownFunction),
            "attempt {token} refused: {outcome:?}"
        );
        self.counts.refused += 1;
        if let Some(key) = sent.key {
            // A retry of one answered gets its answer, and one sequenced
            // (its answer lost in a crash) its first attempt's: exactly once.
            assert!(
                !self.answered.contains_key(&key),
                "{key:?} was answered, then a retry of it refused: {outcome:?}"
            );
            let logged = (0..self.shards).any(|s| {
                let sequenced = |b: &styx_engine::Batch| {
                    b.transactions()
                        .any(|(_, r)| r.client.is_some_and(|c| (c.client, c.seq) == key))
                };
                self.run.sim.log(s).iter().any(sequenced) || self.disks.log(s).iter().any(sequenced)
            });
            assert!(
                !logged,
                "{key:?} was sequenced, then a retry of it refused: {outcome:?}"
            );
            self.refused.insert(key);
        }
    }

    /// Steps to wait before the next crash.
    fn crash_delay(&mut self, crashes: u64) -> u64 {
        if self.rng.chance(0.25) {
            // Soon: often while the last recovery still replays.
            self.rng.below(80)
        } else {
            self.rng.below((REQUESTS as f64 / SEND_CHANCE) as u64 / crashes)
        }
    }

    /// Drives the workload through its crashes to the end, then checks.
    fn drive(&mut self) {
        let crashes = 1 + self.rng.below(CRASHES_MAX);
        let mut next_crash = self.crash_delay(crashes);
        let mut since_progress = 0u64;
        loop {
            self.maybe_send();
            self.submit_ready();
            let busy = self.run.sim.step();
            self.steps += 1;
            since_progress = if self.take_replies() > 0 { 0 } else { since_progress + 1 };
            assert!(since_progress < STUCK_STEPS_MAX, "no reply for {STUCK_STEPS_MAX} steps");
            let idle = !busy && self.sends == REQUESTS && self.outbox.is_empty();
            if (self.crashes.len() as u64) < crashes && (self.steps >= next_crash || idle) {
                self.crash();
                next_crash = self.steps + self.crash_delay(crashes);
                continue;
            }
            if idle {
                break;
            }
        }
        assert!(
            self.in_flight.is_empty(),
            "attempts {:?} never answered",
            self.in_flight
        );
        self.absorb();
        self.check();
    }

    /// One node crashes (or a link breaks: no node crashes); the others run
    /// on until they notice; then every node restarts from the disks.
    fn crash(&mut self) {
        let node = if self.rng.chance(LINK_FAILURE_CHANCE) {
            self.counts.link_failures += 1;
            None
        } else {
            Some(self.rng.below(self.layout.len() as u64) as u16)
        };
        let sim = &mut self.run.sim;
        let during_replay = (0..self.shards).any(|s| sim.shard(s).is_replaying());
        let events = sim.disk_events().len();
        if let Some(node) = node {
            let in_flight = sim.in_flight();
            sim.crash_node(node);
            self.counts.frames_lost += (in_flight - sim.in_flight()) as u64;
        }
        let detect_steps = if self.rng.chance(0.5) {
            // Noticed at once: what the survivors had in flight is lost too.
            self.rng.below(4)
        } else {
            self.rng.below(DETECT_STEPS_MAX + 1)
        };
        self.crashes.push(Crash {
            node,
            step: self.steps,
            events,
            detect_steps,
            during_replay,
            restart: None,
        });
        for _ in 0..detect_steps {
            // Clients keep sending to the nodes that still run.
            self.maybe_send();
            self.submit_ready();
            if !self.run.sim.step() {
                break;
            }
        }
        self.counts.released_after_crash += self.take_replies();
        self.counts.frames_lost += self.run.sim.in_flight() as u64;
        self.absorb();

        // The plan every node must compute: the newest snapshot all
        // committed, every log through the newest epoch any reached.
        let nodes = self.layout.len() as u16;
        let snapshot = self
            .disks
            .manifests(0)
            .iter()
            .rev()
            .find(|e| (0..nodes).all(|n| self.disks.manifests(n).contains(e)))
            .copied()
            .unwrap_or(0);
        if (0..nodes).any(|n| self.disks.manifests(n).last().is_some_and(|e| *e > snapshot)) {
            self.counts.rolled_back += 1;
        }
        let logged: Vec<Epoch> = (0..self.shards).map(|s| self.disks.logged(s)).collect();
        assert!(
            logged.iter().all(|l| *l >= snapshot),
            "a snapshot ahead of a log: {snapshot}, {logged:?}"
        );
        // A reply leaves once every shard's log holds its epoch, and what a
        // log holds durably stays there.
        let epoch_of: HashMap<Tid, Epoch> = (0..self.shards)
            .flat_map(|s| self.disks.log(s))
            .flat_map(|b| b.transactions().map(|(tid, _)| (*tid, b.epoch)).collect::<Vec<_>>())
            .collect();
        let complete = logged.iter().copied().min().unwrap_or(0);
        for (_, r) in self.replies.iter().filter(|(run, _)| *run == self.runs) {
            let epoch = epoch_of
                .get(&r.tid)
                .unwrap_or_else(|| panic!("tid {} was answered and is in no log after the crash", r.tid));
            assert!(
                *epoch <= complete,
                "tid {} of epoch {epoch} was answered but the logs hold only {logged:?}",
                r.tid
            );
        }
        let replay_to = logged.iter().copied().max().unwrap_or(0);
        if logged.iter().any(|l| *l < replay_to) {
            self.counts.partial_epochs += 1;
        }
        if self.leaves {
            // A leave the recovery restores with a snapshot or decides again.
            let lineage: Vec<_> = (0..self.shards).flat_map(|s| self.disks.log(s).to_vec()).collect();
            let layouts = layouts_of_log(&self.first_layout(), &lineage);
            // Each decided at the end of the epoch before the first it
            // applies to.
            let decided = |changed: fn(&Layout, &Layout) -> bool| -> Vec<Epoch> {
                layouts
                    .windows(2)
                    .filter(|w| changed(&w[0].1, &w[1].1))
                    .map(|w| w[1].0 - 1)
                    .collect()
            };
            let leaves = decided(|a, b| b.left().len() > a.left().len());
            if leaves.iter().any(|e| *e > snapshot) {
                self.counts.redecided_leaves += 1;
            }
            if leaves.iter().any(|e| *e <= snapshot) {
                self.counts.restored_leaves += 1;
            }
            let joins = decided(|a, b| b.absent().len() < a.absent().len());
            if joins.iter().any(|e| *e > snapshot) {
                self.counts.redecided_joins += 1;
            }
            if joins.iter().any(|e| *e <= snapshot) {
                self.counts.restored_joins += 1;
            }
        }
        self.history.split_off(&(snapshot + 1));
        self.counts.crashes += 1;
        self.counts.during_replay += u64::from(during_replay);
        self.counts.from_snapshot += u64::from(snapshot > 0);
        self.crashes.last_mut().expect("this crash").restart = Some((snapshot, replay_to));
        let (run, restart) = self.start_run();
        self.run = run;
        // Recovery decided the same.
        assert_eq!(restart.snapshot(), snapshot, "recovery restored another snapshot");
        assert_eq!(restart.plan.replay_to, replay_to, "recovery replays to another epoch");
        for s in 0..self.shards {
            let lost: Vec<Epoch> = (logged[s as usize] + 1..=replay_to).collect();
            assert_eq!(restart.relogged(s), lost, "shard {s}'s log got as empty");
            assert_eq!(self.disks.logged(s), replay_to, "shard {s}'s log after recovery");
        }
        for m in 0..nodes {
            assert!(
                self.disks.manifests(m).last().is_none_or(|e| *e <= snapshot),
                "node {m} kept a snapshot newer than the one restored"
            );
        }

        // Clients: attempts of the old run are lost; retry whatever is
        // unanswered (client-less requests cannot be retried safely).
        for token in std::mem::take(&mut self.in_flight) {
            if self.sent[&token].key.is_none() {
                self.counts.abandoned += 1;
            }
        }
        let queued: BTreeSet<(u64, u64)> = self.outbox.iter().filter_map(|t| self.sent[t].key).collect();
        let retry: Vec<(u64, u64)> = self
            .requests
            .keys()
            .filter(|k| !self.answered.contains_key(k) && !queued.contains(k))
            .copied()
            .collect();
        for key in retry {
            let request = self.requests[&key].clone();
            self.queue(Sent {
                key: Some(key),
                request,
            });
        }
    }

    /// The checks (a)–(d) over the lineage of epochs that survived.
    fn check(&mut self) {
        let n = self.shards;
        let last = self.disks.logged(0);
        for s in 1..n {
            assert_eq!(self.disks.logged(s), last, "the logs end at different epochs");
        }
        assert_eq!(
            self.history.keys().copied().collect::<Vec<_>>(),
            (1..=last).collect::<Vec<_>>(),
            "the lineage runs every logged epoch"
        );

        // (b) The serial oracle over the logged transactions.
        let mut logged: HashMap<Tid, (Epoch, u64, &Request)> = HashMap::new();
        let mut by_key: HashMap<(u64, u64), Tid> = HashMap::new();
        let logs: Vec<Vec<styx_engine::Batch>> = (0..n).map(|s| self.disks.log(s)).collect();
        for log in &logs {
            for b in log {
                for (tid, r) in b.transactions() {
                    assert!(
                        logged.insert(*tid, (b.epoch, b.now_us, r)).is_none(),
                        "tid {tid} logged twice"
                    );
                    if let Some(c) = r.client {
                        let dup = by_key.insert((c.client, c.seq), *tid);
                        assert!(
                            dup.is_none(),
                            "(client, seq) ({}, {}) sequenced twice: tids {} and {tid}",
                            c.client,
                            c.seq,
                            dup.unwrap()
                        );
                    }
                }
            }
        }
        let mut serial = Oracle::new(self.app.clone(), self.config.limits, self.initial.iter().cloned());
        for log in &logs {
            serial.log(log);
        }
        let restored: BTreeMap<Epoch, Vec<&State>> = self.restored.iter().fold(BTreeMap::new(), |mut m, (e, s)| {
            m.entry(*e).or_insert_with(Vec::new).push(s);
            m
        });
        let mut outcome: HashMap<Tid, Outcome> = HashMap::new();
        for (epoch, records) in &self.history {
            for (tid, o) in serial.run_epoch(*epoch, records) {
                assert!(outcome.insert(tid, o).is_none(), "tid {tid} ran twice");
            }
            for state in restored.get(epoch).into_iter().flatten() {
                let expected = serial.state();
                assert!(
                    **state == expected,
                    "the snapshot of epoch {epoch} differs from serial execution (expected: serial):\n{}",
                    state_diff(&expected, state)
                );
            }
        }
        assert_eq!(outcome.len(), logged.len(), "every logged transaction ran");
        let state = self.run.sim.state();
        let expected = serial.state();
        assert!(
            state == expected,
            "the final state differs from serial execution (expected: serial):\n{}",
            state_diff(&expected, &state)
        );

        // (c) Money is conserved.
        assert_conserved(&state, ACCOUNTS, ACCOUNTS as i64 * START, "the final state");

        // The map is the one the lineage's logged moves make, on every
        // shard, with every entity where it says.
        let lineage: Vec<_> = (0..n).flat_map(|s| self.disks.log(s).to_vec()).collect();
        assert_placed(&self.run.sim, &map_of_log(&self.app, n, &lineage), "the final state");
        // So is the layout, on every shard and in the simulator.
        let layouts = layouts_of_log(&self.first_layout(), &lineage);
        let layout = &layouts.last().expect("the first layout").1;
        // A node that joined stays a member (or leaves); a node runs no
        // shard while absent.
        for w in layouts.windows(2) {
            assert!(
                w[1].1.absent().iter().all(|n| w[0].1.is_absent(*n)),
                "a node that joined is absent again at epoch {}",
                w[1].0
            );
        }
        for (epoch, l) in &layouts {
            for n in l.absent() {
                assert_eq!(
                    l.shards_of(*n).count(),
                    0,
                    "node {n} runs a shard from epoch {epoch} before it joined"
                );
            }
        }
        self.counts.joins_made += (self.absent.len() - layout.absent().len()) as u64;
        // A node that left stays out and runs no shard.
        for w in layouts.windows(2) {
            assert!(
                w[0].1.left().iter().all(|n| w[1].1.has_left(*n)),
                "a node that left is back at epoch {}",
                w[1].0
            );
        }
        for (epoch, l) in &layouts {
            for n in l.left() {
                assert_eq!(
                    l.shards_of(*n).count(),
                    0,
                    "node {n} left and runs a shard from epoch {epoch}"
                );
            }
        }
        self.counts.leaves_made += layout.left().len() as u64;
        assert_eq!(self.run.sim.layout(), layout, "the simulator's final layout");
        for s in 0..n {
            assert_eq!(self.run.sim.shard(s).layout(), layout, "shard {s}'s final layout");
        }

        // (a) Every answer is in the lineage, as the client saw it.
        for (_, r) in &self.replies {
            let sent = &self.sent[&r.token];
            match sent.key {
                Some(key) => assert_eq!(
                    by_key.get(&key),
                    Some(&r.tid),
                    "(client, seq) {key:?} was answered with tid {} but that is not what the log holds",
                    r.tid
                ),
                None => assert_eq!(
                    logged.get(&r.tid).map(|l| l.2),
                    Some(&sent.request),
                    "client-less attempt {} was answered with tid {} but the log holds another request",
                    r.token,
                    r.tid
                ),
            }
            assert_eq!(
                outcome.get(&r.tid),
                Some(&r.outcome),
                "tid {} was answered with an outcome serial execution did not give it",
                r.tid
            );
        }
        self.counts.replies_checked += self.replies.len() as u64;
        let unanswered: Vec<_> = self
            .requests
            .keys()
            .filter(|k| !self.answered.contains_key(k))
            .collect();
        for key in &unanswered {
            // Only one the layout refused each time, and it never ran.
            assert!(self.refused.contains(key), "never answered: {key:?}");
            assert!(
                !by_key.contains_key(key),
                "{key:?} was refused, never answered, yet logged"
            );
        }

        // (d) Retrying everything answered once more runs nothing.
        let before: Vec<usize> = (0..n).map(|s| self.run.sim.log(s).len()).collect();
        let keys: Vec<(u64, u64)> = self.answered.keys().copied().collect();
        for key in &keys {
            let request = self.requests[key].clone();
            self.queue(Sent {
                key: Some(*key),
                request,
            });
        }
        let answers_before = self.replies.len() as u64 + self.counts.forgotten;
        self.submit_ready();
        self.run.sim.run();
        self.take_replies();
        assert_eq!(
            self.replies.len() as u64 + self.counts.forgotten - answers_before,
            keys.len() as u64,
            "every last retry answered"
        );
        assert!(self.in_flight.is_empty());
        assert!(
            (0..n).all(|s| self.run.sim.log(s)[before[s as usize]..]
                .iter()
                .all(|b| b.transactions().next().is_none())),
            "a retry of an answered request was sequenced again"
        );
        assert!(
            self.run.sim.state() == state,
            "a retry of an answered request changed the state"
        );
        self.counts.epochs += last;
    }
}

/// Whether an outcome is the refusal of a seq its client acknowledged.
fn is_forgotten(outcome: &Outcome) -> bool {
    matches!(outcome, Outcome::Aborted(a) if a.kind() == AbortKind::Forgotten)
}

/// A step of draining a node: of the nodes that did not leave and do not
/// run every shard, the one running fewest is asked to leave if it runs
/// none, else one of its shards goes to another such node. `None` when one
/// node runs every shard and every other left.
fn drain_step(layout: &Layout, rng: &mut Rng) -> Option<Handover> {
    let present: Vec<u16> = (0..layout.nodes()).filter(|n| !layout.has_left(*n)).collect();
    let runs = |n: u16| layout.shards_of(n).count();
    let node = present
        .iter()
        .copied()
        .filter(|n| runs(*n) < usize::from(layout.n_shards()))
        .min_by_key(|n| (runs(*n), *n))?;
    if runs(node) == 0 {
        return Some(Handover::leave(node));
    }
    let others: Vec<u16> = present.iter().copied().filter(|n| *n != node).collect();
    let shards: Vec<ShardId> = layout.shards_of(node).collect();
    Some(Handover {
        shard: shards[rng.below(shards.len() as u64) as usize],
        node: others[rng.below(others.len() as u64) as usize],
    })
}

/// An account, a hot one with chance [`HOT_CHANCE`]: transactions of one
/// epoch then touch the same accounts, so an outcome depends on the others
/// of its epoch (a lost one changes it).
fn pick_account(rng: &mut Rng) -> u64 {
    if rng.chance(HOT_CHANCE) {
        rng.below(HOT_ACCOUNTS)
    } else {
        rng.below(ACCOUNTS)
    }
}

/// A transfer between two accounts, or a read of one balance (whose
/// outcome shows every transfer before it).
fn new_request(app: &App, rng: &mut Rng) -> Request {
    let d = pick_account(rng);
    if rng.chance(READ_CHANCE) {
        return Request {
            function: app.resolve("account", "balance").unwrap(),
            address: Address::Entity(Key::from(d)),
            args: Payload::encode(&()),
            client: None,
        };
    }
    let mut c = pick_account(rng);
    if c == d {
        c = (d + 1 + rng.below(ACCOUNTS - 1)) % ACCOUNTS;
    }
    transfer(app, d, c, 1 + rng.below(4) as i64)
}

#[test]
fn nodes_crash_at_random_points() {
    crash_swarm(SEEDS_DEFAULT, false, false, false);
}

#[test]
fn nodes_crash_at_random_points_during_moves() {
    crash_swarm(SEEDS_WITH_MOVES, true, false, false);
}

/// Shards handed between nodes (and partitions moved) while nodes crash:
/// a shard's log ends up in pieces on several disks, its snapshot files on
/// the nodes that ran it after each, and every recovery must merge them.
#[test]
fn nodes_crash_at_random_points_during_handovers() {
    crash_swarm(SEEDS_WITH_HANDOVERS, true, true, false);
}

/// Nodes drained and asked to leave (and handovers to nodes that left,
/// refused) while nodes crash: a leave is decided again by a replay or
/// restored with a snapshot's layout, and no node that left runs a shard
/// again.
#[test]
fn nodes_crash_at_random_points_during_leaves() {
    crash_swarm(SEEDS_WITH_LEAVES, false, true, true);
}

/// Runs `default_seeds` clusters (see `common::seeds`), on every core.
fn crash_swarm(default_seeds: u64, moves: bool, handovers: bool, leaves: bool) {
    let seeds = seeds(0..default_seeds);
    let test = test_name();
    let next = AtomicU64::new(0);
    let failed = AtomicBool::new(false);
    let total = std::sync::Mutex::new(Counts::default());
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(seeds.len());
    let started = std::time::Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                    if i >= seeds.len() || failed.load(Ordering::Relaxed) {
                        return;
                    }
                    let mut cluster = Cluster::new(seeds[i], moves, handovers, leaves);
                    match catch_unwind(AssertUnwindSafe(|| cluster.drive())) {
                        Ok(()) => total.lock().unwrap().add(&cluster.counts),
                        Err(_) => {
                            failed.store(true, Ordering::Relaxed);
                            eprintln!(
                                "FAILED: {}\nreplay: {}",
                                cluster.describe(),
                                replay_command(test.as_deref(), seeds[i])
                            );
                        }
                    }
                }
            });
        }
    });
    assert!(!failed.load(Ordering::Relaxed), "a seed failed (see above)");
    let c = total.into_inner().unwrap();
    println!(
        "{} seeds in {:.1?}: {} failures ({} broken links; {} during a replay, {} from a snapshot, {} rolled back \
         past a node's newer snapshot, {} with a partial epoch), {} epochs, {} replies checked ({} repeat answers, \
         {} forgotten), {} released by survivors after a crash, {} batches in flight lost, {} client-less requests \
         abandoned, {} moves sent, {} handovers sent ({} shards rebuilt from their hand-off), {} recoveries from logs in \
         pieces; {} leaves sent, {} made, {} recoveries deciding one again, {} restoring one; {} joins sent, {} made, {} \
         recoveries deciding one again, {} restoring one; {} handovers and leaves refused",
        c.seeds,
        started.elapsed(),
        c.crashes,
        c.link_failures,
        c.during_replay,
        c.from_snapshot,
        c.rolled_back,
        c.partial_epochs,
        c.epochs,
        c.replies_checked,
        c.repeat_answers,
        c.forgotten,
        c.released_after_crash,
        c.frames_lost,
        c.abandoned,
        c.moves,
        c.handovers,
        c.handoffs,
        c.recovered_handed,
        c.leaves_sent,
        c.leaves_made,
        c.redecided_leaves,
        c.restored_leaves,
        c.joins_sent,
        c.joins_made,
        c.redecided_joins,
        c.restored_joins,
        c.refused,
    );
    if moves {
        assert!(c.moves > 0, "no move sent");
    }
    if handovers && seeds.len() as u64 >= default_seeds {
        assert!(c.handovers > 0, "no handover sent");
        assert!(c.recovered_handed > 0, "no recovery from logs in pieces");
        assert!(c.handoffs > 0, "no shard rebuilt from its hand-off");
    }
    if leaves && seeds.len() as u64 >= default_seeds {
        assert!(c.leaves_made > 0, "no node left");
        assert!(c.redecided_leaves > 0, "no leave decided again by a replay");
        assert!(c.restored_leaves > 0, "no leave restored with a snapshot");
        assert!(c.joins_made > 0, "no node joined");
        assert!(c.redecided_joins > 0, "no join decided again by a replay");
        assert!(c.restored_joins > 0, "no join restored with a snapshot");
        assert!(c.refused > 0, "no handover refused against the layout");
    }
    if seeds.len() as u64 >= default_seeds && !moves {
        // The seeds reach the cases they exist for.
        assert!(c.during_replay > 0, "no crash during a replay");
        assert!(c.from_snapshot > 0, "no recovery from a snapshot");
        assert!(c.rolled_back > 0, "no rollback past a node's newer snapshot");
        assert!(c.partial_epochs > 0, "no recovery with a partial epoch");
        assert!(c.released_after_crash > 0, "no reply released by survivors");
        assert!(c.repeat_answers > 0, "no repeat answer");
        assert!(c.forgotten > 0, "no acknowledged answer forgotten");
        assert!(c.link_failures > 0, "no broken link");
    }
}

/// A sim of shards on several nodes, without failures, runs like one on a
/// single node: serializable, conserving, every request answered.
#[test]
fn remote_links_keep_the_protocol_serializable() {
    swarm(seeds(0..40), |seed| {
        let app = bank(8);
        let config = test_config(8);
        let layout = LAYOUTS[seed as usize % LAYOUTS.len()];
        let shards = layout.iter().sum();
        let mut sim = Sim::new(app.clone(), config.clone(), shards, seed);
        sim.set_nodes(layout);
        sim.set_remote_delay_us_max([20, 200, 1_000, 10_000][seed as usize % 4]);
        let initial = accounts(ACCOUNTS, START);
        for (op, k, v) in &initial {
            sim.load(*op, k, Some(v.clone()));
        }
        let mut rng = Rng::new(seed);
        for token in 0..200 {
            let shard = rng.below(u64::from(shards)) as ShardId;
            sim.submit(shard, token, new_request(&app, &mut rng)).unwrap();
            for _ in 0..rng.below(20) {
                sim.step();
            }
        }
        let checked = run_and_check(&mut sim, &app, config.limits, &initial);
        assert_eq!(
            checked.committed + checked.aborted,
            200,
            "seed {seed}: every request answered"
        );
        assert_conserved(&sim.state(), ACCOUNTS, ACCOUNTS as i64 * START, &format!("seed {seed}"));
    });
}

/// One node, named or not, is the same simulation: the same seed draws the
/// same numbers (single-node seeds replay as they did before nodes).
#[test]
fn one_node_is_the_default() {
    let run = |seed: u64, named: bool| {
        let app = bank(8);
        let mut config = test_config(8);
        config.snapshot_interval_us = 250;
        let mut sim = Sim::new(app.clone(), config, 3, seed);
        if named {
            sim.set_nodes(&[3]);
        }
        for (op, k, v) in accounts(ACCOUNTS, START) {
            sim.load(op, &k, Some(v));
        }
        let mut rng = Rng::new(seed);
        for token in 0..100 {
            let shard = rng.below(3) as ShardId;
            sim.submit(shard, token, new_request(&app, &mut rng)).unwrap();
            for _ in 0..rng.below(20) {
                sim.step();
            }
        }
        sim.run();
        (sim.disk_events().to_vec(), sim.take_replies_at(), sim.state())
    };
    swarm(seeds(0..10), |seed| {
        assert!(run(seed, false) == run(seed, true), "seed {seed}")
    });
}
