//! Crash at every disk event: a seeded workload of cross-shard transfers by
//! exactly-once clients (with retries of the same `(client, seq)`) runs in
//! the simulator, whose disk journal ([`DiskEvent`]) records every log batch
//! write, its fsync, every snapshot chunk and every manifest. For every
//! boundary `k` of that journal the test crashes there and recovers fresh
//! shards from what survives — through [`Disks::restart`], that is through
//! `styx_engine::recovery`, the functions the runtime recovers with — then
//! requires:
//!
//! - (a) every reply released before the crash is in the recovered state,
//!   with the outcome the client saw;
//! - (b) the recovered state is the serial execution of exactly the
//!   transactions in the surviving log (the snapshot's epochs, then each
//!   replayed epoch in the engine's serial order): whole epochs, whole
//!   transactions — logged but unanswered ones may be in, never part of one;
//! - (c) money is conserved;
//! - (d) retrying a request whose outcome survived returns that outcome with
//!   the same tid, applies nothing and sequences nothing;
//!
//! and that recovery decided what the journal says: the newest committed
//! snapshot (whose state is the serial state at its epoch), every log
//! replayed to the newest epoch any log reached, each epoch a log lacks
//! written to it empty (and not logged again by the recovered run).
//!
//! The disk model: only what was fsynced before `k` survives. The write in
//! progress at `k` (a `LogWrite` not yet followed by its `LogSync`) is torn
//! or lost; the WAL detects a torn record by its checksum and truncates it
//! (proved byte by byte in `storage/tests/wal.rs`), so either way it is
//! absent. A snapshot counts only once its manifest is written, and the
//! manifest comes after every shard's file and every log through its epoch.
//! The test computes what survives from the journal on its own (the
//! oracle's view) and checks recovery against it.
//!
//! With `moves`, every few requests is a partition move to a random shard
//! instead (`Move::request`): a crash at any event of a move (its batch
//! written, synced, a snapshot of the old or new owner after it) recovers
//! to the map and state of the surviving log, through the same checks.
//!
//! A failure prints the seed, the shard count, the crash event index and the
//! command that replays the seed (see `common::swarm`).

mod common;

use common::*;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use styx_engine::rng::Rng;
use styx_engine::sim::{DiskEvent, Disks, Sim, test_config};
use styx_engine::{
    App, Batch, Config, Epoch, EpochRecord, Key, Move, OpId, Outcome, Reply, Request, ShardId, SnapshotChunk, Tid,
    Token, Value,
};

const ACCOUNTS: u64 = 24;
const START: i64 = 6;
const CLIENTS: u64 = 6;
/// Requests submitted per run (new ones, retries and client-less ones).
const REQUESTS: u64 = 160;
const SEEDS: u64 = 8;
/// With moves, one request in this many is a move.
const MOVE_EVERY: u64 = 6;
/// Per seed, how slow the disk is (see [`Sim::set_fsync_busy`]).
const FSYNC_BUSY: [f64; SEEDS as usize] = [0.0, 0.5, 0.8, 0.95, 0.0, 0.3, 0.7, 0.9];

/// What the live run left: the disk journal and everything the journal's
/// events point at, plus the serial oracle's view of the whole run.
struct Live {
    app: Arc<App>,
    config: Config,
    shards: u16,
    seed: u64,
    initial: Vec<(OpId, Key, Value)>,
    events: Vec<DiskEvent>,
    batches: BTreeMap<(ShardId, Epoch), Batch>,
    chunks: Vec<SnapshotChunk>,
    /// Every released reply with the number of disk events before it.
    released: Vec<(usize, Reply)>,
    /// Token -> the request's client seq, if it had one.
    tokens: HashMap<Token, Option<(u64, u64)>>,
    /// Tid -> (epoch, batch time, request), for every logged transaction.
    logged: HashMap<Tid, (Epoch, u64, Request)>,
    /// The serial oracle on the live run: the state after each epoch
    /// (0: the initial load) and every transaction's outcome.
    state_after: BTreeMap<Epoch, State>,
    outcome: HashMap<Tid, Outcome>,
}

/// Runs the workload to the end on `shards` shards and checks it against
/// the serial oracle.
/// `fsync_busy`: see [`Sim::set_fsync_busy`].
/// `snapshot_interval_us`: see [`Config::snapshot_interval_us`].
/// `moves`: every [`MOVE_EVERY`]th request moves a partition.
fn live_run(shards: u16, seed: u64, fsync_busy: f64, snapshot_interval_us: u64, moves: bool) -> Live {
    let app = bank(8);
    let mut config = test_config(8);
    config.snapshot_interval_us = snapshot_interval_us;
    config.epoch_gather_us = 30;
    config.step_messages_max = [2, 8, 64][(seed % 3) as usize];
    // Copies of one entity, a few, one per logged microsecond since the
    // last share (the share follows the log: replay must send the same),
    // or a whole partition per epoch: a crash lands inside a background
    // copy that spans epochs.
    (
        config.move_share_entities,
        config.move_share_min_entities,
        config.move_share_per_ms,
    ) = [(1, 1, 100), (3, 3, 100), (64, 1, 1_000), (4_096, 4_096, 100)][(seed / 3 % 4) as usize];
    let mut rng = Rng::new(seed);
    let mut sim = Sim::new(app.clone(), config.clone(), shards, seed);
    sim.set_fsync_busy(fsync_busy);
    let initial = accounts(ACCOUNTS, START);
    for (op, k, v) in &initial {
        sim.load(*op, k, Some(v.clone()));
    }
    let mut sent: BTreeMap<(u64, u64), Request> = BTreeMap::new();
    let mut next_seq = [1u64; CLIENTS as usize];
    let mut tokens = HashMap::new();
    let mut released = Vec::new();
    for token in 0..REQUESTS {
        if moves && token % MOVE_EVERY == MOVE_EVERY - 1 {
            let m = Move {
                op: OpId(0),
                partition: rng.below(8) as u32,
                to: rng.below(u64::from(shards)) as ShardId,
                share: None,
            };
            tokens.insert(token, None);
            sim.submit(rng.below(u64::from(shards)) as ShardId, token, m.request())
                .unwrap();
            for _ in 0..rng.below(40) {
                sim.step();
            }
            released.append(&mut sim.take_replies_at());
            continue;
        }
        let client = rng.below(CLIENTS);
        let (request, key) = if rng.chance(0.1) {
            let d = rng.below(ACCOUNTS);
            let c = (d + 1 + rng.below(ACCOUNTS - 1)) % ACCOUNTS;
            (transfer(&app, d, c, 1 + rng.below(4) as i64), None)
        } else if rng.chance(0.7) || next_seq[client as usize] == 1 {
            let seq = next_seq[client as usize];
            next_seq[client as usize] += 1;
            let d = rng.below(ACCOUNTS);
            let c = (d + 1 + rng.below(ACCOUNTS - 1)) % ACCOUNTS;
            let r = with_client(transfer(&app, d, c, 1 + rng.below(4) as i64), client, seq);
            sent.insert((client, seq), r.clone());
            (r, Some((client, seq)))
        } else {
            // A retry, of a request maybe still in flight.
            let seq = 1 + rng.below(next_seq[client as usize] - 1);
            (sent[&(client, seq)].clone(), Some((client, seq)))
        };
        tokens.insert(token, key);
        let shard = rng.below(u64::from(shards)) as ShardId;
        sim.submit(shard, token, request).unwrap();
        for _ in 0..rng.below(40) {
            sim.step();
        }
        released.append(&mut sim.take_replies_at());
    }
    sim.run();
    released.append(&mut sim.take_replies_at());
    if moves && shards > 1 {
        assert!(
            sim.shard(0).partition_map().version() > 0,
            "seed {seed}, {shards} shards: no partition moved"
        );
    }
    assert_eq!(
        released.len() as u64,
        REQUESTS,
        "seed {seed}, {shards} shards: every attempt answered"
    );

    let batches: BTreeMap<(ShardId, Epoch), Batch> = sim.logs().into_iter().map(|b| ((b.shard, b.epoch), b)).collect();
    let mut logged = HashMap::new();
    let mut by_client = BTreeMap::new();
    for b in batches.values() {
        for (tid, r) in b.transactions() {
            assert!(
                logged.insert(*tid, (b.epoch, b.now_us, r.clone())).is_none(),
                "tid {tid} logged twice"
            );
            if let Some(c) = r.client {
                assert!(
                    by_client.insert((c.client, c.seq), *tid).is_none(),
                    "seed {seed}, {shards} shards: ({}, {}) sequenced twice",
                    c.client,
                    c.seq
                );
            }
        }
    }
    let events = sim.disk_events().to_vec();
    check_journal(&events, shards, seed);
    assert!(
        events
            .iter()
            .filter(|e| matches!(e, DiskEvent::Manifest { .. }))
            .count()
            >= 2,
        "seed {seed}, {shards} shards: too few snapshots committed to test recovery from one"
    );

    // The serial oracle on the whole run.
    let mut history: BTreeMap<Epoch, Vec<EpochRecord>> = BTreeMap::new();
    for r in sim.take_history() {
        history.entry(r.epoch).or_default().push(r);
    }
    let mut serial = Oracle::new(app.clone(), config.limits, initial.iter().cloned());
    serial.log(batches.values());
    let mut state_after = BTreeMap::from([(0, serial.state())]);
    let mut outcome = HashMap::new();
    for (epoch, records) in &history {
        assert_eq!(
            *epoch,
            state_after.len() as Epoch,
            "seed {seed}: epochs are consecutive"
        );
        outcome.extend(serial.run_epoch(*epoch, records));
        state_after.insert(*epoch, serial.state());
    }
    assert_eq!(
        outcome.len(),
        logged.len(),
        "seed {seed}: every logged transaction ran once"
    );
    for (_, r) in &released {
        assert_eq!(
            Some(&r.outcome),
            outcome.get(&r.tid),
            "seed {seed}, {shards} shards: live reply of tid {} differs from serial execution",
            r.tid
        );
    }
    assert!(
        *state_after.last_key_value().unwrap().1 == sim.state(),
        "seed {seed}, {shards} shards: live state differs from serial execution"
    );
    Live {
        app,
        config,
        shards,
        seed,
        initial,
        events,
        batches,
        chunks: sim.take_snapshots(),
        released,
        tokens,
        logged,
        state_after,
        outcome,
    }
}

/// The journal is what a log task and a committer would write: per shard,
/// each batch write is followed by its fsync, epochs in order; a manifest
/// names a snapshot complete on every shard and logged everywhere.
fn check_journal(events: &[DiskEvent], shards: u16, seed: u64) {
    let mut synced = vec![0; shards as usize];
    let mut files: BTreeMap<Epoch, u16> = BTreeMap::new();
    let mut manifest = 0;
    for (i, e) in events.iter().enumerate() {
        match *e {
            DiskEvent::LogWrite { node, shard, epoch } => {
                assert_eq!(epoch, synced[shard as usize] + 1, "seed {seed}: event {i}");
                assert_eq!(
                    events.get(i + 1),
                    Some(&DiskEvent::LogSync { node, shard, epoch }),
                    "seed {seed}: event {i}"
                );
            }
            DiskEvent::LogSync { shard, epoch, .. } => synced[shard as usize] = epoch,
            DiskEvent::Chunk { epoch, last, .. } => {
                if last {
                    *files.entry(epoch).or_default() += 1;
                }
            }
            DiskEvent::Manifest { epoch } => {
                assert!(epoch > manifest, "seed {seed}: event {i}");
                assert_eq!(files.get(&epoch), Some(&shards), "seed {seed}: event {i}");
                assert!(synced.iter().all(|s| *s >= epoch), "seed {seed}: event {i}");
                manifest = epoch;
            }
            DiskEvent::NodeManifest { .. } => panic!("seed {seed}: event {i}: a node manifest in a sim of one node"),
        }
    }
}

/// What one crash point exercised.
#[derive(Default)]
struct Counts {
    crash_points: usize,
    /// Recovered from a snapshot rather than from the initial load.
    from_snapshot: usize,
    /// Some shard's log lost an epoch another shard's log kept.
    partial_epochs: usize,
    /// Logged transactions recovered though their reply had not left.
    unanswered_recovered: usize,
    released_checked: usize,
    retries_checked: usize,
    /// The most epochs one recovery replayed after its snapshot.
    replayed_epochs_max: u64,
    /// Restored a snapshot whose map had moved partitions.
    from_moved_snapshot: usize,
    /// Replayed a logged move.
    replayed_moves: usize,
    /// Recovered with a move's copy under way and finished it.
    finished_copies: usize,
    /// Restored a snapshot that kept moves queued (held while it was due).
    from_queued_snapshot: usize,
}

/// Crashes after the first `k` disk events (`disks` holds what they left),
/// recovers and checks (a)–(d).
fn crash_at(live: &Live, k: usize, mut disks: Disks, counts: &mut Counts) {
    let (seed, shards) = (live.seed, live.shards);
    let at = format!("seed {seed}, {shards} shards, crash at event {k}");
    let before = &live.events[..k];

    // What the disk holds, as the oracle sees it.
    let snapshot = before
        .iter()
        .filter_map(|e| match e {
            DiskEvent::Manifest { epoch } => Some(*epoch),
            _ => None,
        })
        .next_back()
        .unwrap_or(0);
    let mut synced: Vec<Epoch> = vec![0; shards as usize];
    for e in before {
        if let DiskEvent::LogSync { shard, epoch, .. } = e {
            synced[*shard as usize] = *epoch;
        }
    }
    assert!(synced.iter().all(|s| *s >= snapshot), "{at}: a manifest ahead of a log");
    let survived: Vec<Batch> = (0..shards)
        .flat_map(|s| (snapshot + 1..=synced[s as usize]).map(move |e| (s, e)))
        .map(|key| {
            live.batches
                .get(&key)
                .unwrap_or_else(|| panic!("{at}: no batch {key:?}"))
                .clone()
        })
        .collect();
    let last = synced.iter().copied().max().unwrap();
    let complete = synced.iter().copied().min().unwrap();

    // Recover as the runtime does: the newest complete snapshot, every log
    // after it, the epochs a log lost written to it empty.
    let mut rec = Sim::new(
        live.app.clone(),
        live.config.clone(),
        shards,
        seed * 1_000_003 + k as u64,
    );
    let restart = disks
        .restart(&mut rec)
        .unwrap_or_else(|e| panic!("{at}: recovery refused the disk: {e}"));
    assert_eq!(restart.snapshot(), snapshot, "{at}: recovery restored another snapshot");
    // The map is a function of the log: the snapshot's is the one its
    // epochs' moves made, and every entity is where it says.
    let snapshot_batches = live.batches.values().filter(|b| b.epoch <= snapshot);
    assert_placed(&rec, &map_of_log(&live.app, shards, snapshot_batches), &at);
    if rec.shard(0).partition_map().version() > 0 {
        counts.from_moved_snapshot += 1;
    }
    if !rec.shard(0).partition_map().queued().is_empty() {
        counts.from_queued_snapshot += 1;
    }
    assert_eq!(restart.plan.replay_to, last, "{at}: recovery replays to another epoch");
    if snapshot > 0 {
        counts.from_snapshot += 1;
        if restart.restored != live.state_after[&snapshot] {
            panic!(
                "{at}: the snapshot of epoch {snapshot} differs from serial execution (expected: serial):\n{}",
                state_diff(&live.state_after[&snapshot], &restart.restored)
            );
        }
    }
    // The logs agree again: a shard that lost epochs others kept got them
    // written empty, so every log holds every epoch once.
    for s in 0..shards {
        let lost: Vec<Epoch> = (synced[s as usize] + 1..=last).collect();
        assert_eq!(restart.relogged(s), lost, "{at}: shard {s}'s log got as empty");
        assert_eq!(disks.logged(s), last, "{at}: shard {s}'s log after recovery");
        assert!(
            disks.log(s)[synced[s as usize] as usize..]
                .iter()
                .all(|b| b.transactions().next().is_none()),
            "{at}: shard {s} got a lost epoch back with transactions"
        );
    }
    rec.run();
    // Recovery logs nothing again; it runs (and logs) empty epochs only to
    // finish a move whose copy the log left under way.
    let moved = live
        .batches
        .values()
        .filter(|b| b.epoch <= snapshot)
        .chain(&survived)
        .flat_map(|b| &b.txns)
        .any(|(_, r)| Move::of(r).is_some());
    for s in 0..shards {
        let again: Vec<Epoch> = rec.log(s).iter().map(|b| b.epoch).collect();
        assert!(
            again.is_empty()
                || (moved && again[0] == last + 1 && rec.log(s).iter().all(|b| b.transactions().next().is_none())),
            "{at}: shard {s} logged epochs {again:?} again after recovery",
        );
    }
    assert!(
        !rec.shard(0).partition_map().is_moving(),
        "{at}: a move left unfinished"
    );
    if !rec.log(0).is_empty() {
        counts.finished_copies += 1;
    }
    let replayed_batches = live.batches.values().filter(|b| b.epoch <= snapshot).chain(&survived);
    assert_placed(&rec, &map_of_log(&live.app, shards, replayed_batches), &at);
    assert!(
        rec.take_replies().is_empty(),
        "{at}: recovery answered a request nobody submitted"
    );
    let recovered_replies: HashMap<Tid, Outcome> = rec
        .take_replayed()
        .into_iter()
        .map(|r| {
            assert_eq!(r.token, r.tid, "{at}: a replayed transaction answers its own tid");
            (r.tid, r.outcome)
        })
        .collect();

    // (b) The serial oracle: the snapshot's epochs, then each replayed epoch
    // in the recovered run's serial order, over exactly the surviving log.
    let mut history: BTreeMap<Epoch, Vec<EpochRecord>> = BTreeMap::new();
    for r in rec.take_history() {
        // Past the log: the empty epochs that finished a move.
        if r.epoch > last {
            assert!(
                r.committed1.is_empty() && r.aborted1.is_empty() && r.fallback.is_empty() && r.serial.is_empty(),
                "{at}: epoch {} after recovery ran transactions",
                r.epoch
            );
            continue;
        }
        history.entry(r.epoch).or_default().push(r);
    }
    assert_eq!(
        history.keys().copied().collect::<Vec<_>>(),
        (snapshot + 1..=last).collect::<Vec<_>>(),
        "{at}: recovery ran exactly the logged epochs after the snapshot"
    );
    let survived_tids: BTreeSet<Tid> = survived
        .iter()
        .flat_map(|b| b.transactions().map(|(t, _)| *t))
        .collect();
    if survived
        .iter()
        .flat_map(|b| &b.txns)
        .any(|(_, r)| Move::of(r).is_some())
    {
        counts.replayed_moves += 1;
    }
    let mut serial = Oracle::from_state(live.app.clone(), live.config.limits, &live.state_after[&snapshot]);
    serial.log(&survived);
    let mut outcome: HashMap<Tid, Outcome> = HashMap::new();
    for (epoch, records) in &history {
        for (tid, expected) in serial.run_epoch(*epoch, records) {
            assert!(survived_tids.contains(&tid), "{at}: tid {tid} ran but was not logged");
            assert_eq!(
                recovered_replies.get(&tid),
                Some(&expected),
                "{at}: recovered reply of tid {tid} (epoch {epoch}) differs from serial execution"
            );
            if *epoch <= complete {
                // Every shard kept this epoch: it replays as it ran.
                assert_eq!(
                    live.outcome.get(&tid),
                    Some(&expected),
                    "{at}: tid {tid} of complete epoch {epoch} changed outcome on replay"
                );
            }
            outcome.insert(tid, expected);
        }
    }
    assert_eq!(
        outcome.len(),
        survived_tids.len(),
        "{at}: every logged transaction ran once, nothing else"
    );
    assert_eq!(
        recovered_replies.len(),
        survived_tids.len(),
        "{at}: one reply per replayed transaction"
    );
    let state = rec.state();
    if state != serial.state() {
        panic!(
            "{at}: recovered state differs from serial execution (expected: serial):\n{}",
            state_diff(&serial.state(), &state)
        );
    }
    if last > complete {
        counts.partial_epochs += 1;
    }
    counts.replayed_epochs_max = counts.replayed_epochs_max.max(last - snapshot);

    // (a) Every reply released before the crash survived, as the client saw it.
    let mut answered = BTreeSet::new();
    for (released_at, r) in &live.released {
        if *released_at > k {
            continue;
        }
        counts.released_checked += 1;
        answered.insert(r.tid);
        let (epoch, _, _) = live.logged[&r.tid];
        assert!(
            epoch <= complete,
            "{at}: tid {} of epoch {epoch} was answered but its log is durable only through {synced:?}",
            r.tid
        );
        let survived_as = if epoch <= snapshot {
            live.outcome.get(&r.tid)
        } else {
            outcome.get(&r.tid)
        };
        assert_eq!(
            survived_as,
            Some(&r.outcome),
            "{at}: answered tid {} (epoch {epoch}) lost or changed",
            r.tid
        );
    }
    counts.unanswered_recovered += survived_tids.difference(&answered).count();

    // (c) Money is conserved.
    assert_conserved(&state, ACCOUNTS, ACCOUNTS as i64 * START, &at);

    // (d) Retries after recovery: every request whose outcome survived
    // (answered or not) gets it back, with its tid, and nothing runs.
    let mut expect: HashMap<Token, (Tid, Outcome)> = HashMap::new();
    let mut token = 0;
    let mut rng = Rng::new(seed ^ ((k as u64) << 20));
    let survived_requests = live
        .logged
        .iter()
        .filter(|(tid, (epoch, _, _))| *epoch <= snapshot || survived_tids.contains(tid));
    for (tid, (epoch, _, request)) in survived_requests {
        if request.client.is_none() {
            continue;
        }
        let o = if *epoch <= snapshot {
            &live.outcome[tid]
        } else {
            &outcome[tid]
        };
        expect.insert(token, (*tid, o.clone()));
        rec.submit(rng.below(u64::from(shards)) as ShardId, token, request.clone())
            .unwrap();
        token += 1;
        for _ in 0..rng.below(4) {
            rec.step();
        }
    }
    let logged_before: Vec<usize> = (0..shards).map(|s| rec.log(s).len()).collect();
    rec.run();
    let replies = rec.take_replies();
    assert_eq!(replies.len(), expect.len(), "{at}: every retry answered");
    for r in replies {
        assert_eq!(
            (r.tid, r.outcome),
            expect[&r.token].clone(),
            "{at}: retry {token} after recovery",
            token = r.token
        );
    }
    counts.retries_checked += expect.len();
    assert!(
        (0..shards).all(|s| rec.log(s)[logged_before[s as usize]..]
            .iter()
            .all(|b| b.transactions().next().is_none())),
        "{at}: a retry after recovery was sequenced again"
    );
    assert!(rec.state() == state, "{at}: a retry after recovery changed the state");
    counts.crash_points += 1;
}

/// Seed index `i` runs seed `10 i + shards`; its disk speed and snapshot
/// interval follow from `i`.
fn crash_everywhere(shards: u16, moves: bool) {
    let seed_of = |i: u64| i * 10 + u64::from(shards);
    let seeds = seeds_of(0..SEEDS, seed_of);
    let all_defaults = seeds.len() as u64 >= SEEDS;
    let mut from_queued_snapshot = 0;
    swarm(seeds, |seed| {
        let i = seed / 10;
        let live = live_run(
            shards,
            seed,
            FSYNC_BUSY[(i % SEEDS) as usize],
            [250, 1_500][(i / 4 % 2) as usize],
            moves,
        );
        let mut counts = Counts::default();
        let mut disks = Disks::new(&[shards], &live.initial);
        let sealed = |shard: ShardId, epoch: Epoch| live.batches[&(shard, epoch)].clone();
        for k in 0..=live.events.len() {
            if k > 0 {
                disks.absorb(&live.events[k - 1..k], &live.chunks, &sealed);
            }
            crash_at(&live, k, disks.clone(), &mut counts);
        }
        let retried_live =
            live.tokens.values().flatten().count() - live.logged.values().filter(|l| l.2.client.is_some()).count();
        println!(
            "seed {seed}, {shards} shards: {} crash points ({} from a snapshot, {} with a partial epoch), \
             up to {} epochs replayed, {} released replies and {} retries checked, \
             {} logged-unanswered recoveries, {} live retries, {} from a snapshot after moves, \
             {} replaying moves, {} finishing a copy, {} from a snapshot with moves queued",
            counts.crash_points,
            counts.from_snapshot,
            counts.partial_epochs,
            counts.replayed_epochs_max,
            counts.released_checked,
            counts.retries_checked,
            counts.unanswered_recovered,
            retried_live,
            counts.from_moved_snapshot,
            counts.replayed_moves,
            counts.finished_copies,
            counts.from_queued_snapshot,
        );
        from_queued_snapshot += counts.from_queued_snapshot;
        if seed == seed_of(i) && i < SEEDS {
            // A default seed reaches the cases it exists for.
            assert!(
                counts.from_snapshot > 0,
                "seed {seed}: no crash recovered from a snapshot"
            );
            if shards > 1 {
                assert!(
                    counts.partial_epochs > 0,
                    "seed {seed}: no crash split an epoch across logs"
                );
            }
            assert!(
                counts.unanswered_recovered > 0,
                "seed {seed}: no logged-unanswered transaction recovered"
            );
            if moves {
                assert!(
                    counts.from_moved_snapshot > 0 && counts.replayed_moves > 0 && counts.finished_copies > 0,
                    "seed {seed}: no crash recovered a moved map from a snapshot, replayed a move, \
                     or finished a copy the log left under way"
                );
            }
        }
    });
    if moves && all_defaults {
        // Snapshots fall due while copies run: some keep the moves queued
        // behind them, and recover from that queue.
        assert!(
            from_queued_snapshot > 0,
            "no crash restored a snapshot with moves queued"
        );
    }
}

#[test]
fn crash_at_every_disk_event_one_shard() {
    crash_everywhere(1, false);
}

#[test]
fn crash_at_every_disk_event_two_shards() {
    crash_everywhere(2, false);
}

#[test]
fn crash_at_every_disk_event_three_shards() {
    crash_everywhere(3, false);
}

#[test]
fn crash_at_every_disk_event_during_moves_two_shards() {
    crash_everywhere(2, true);
}

#[test]
fn crash_at_every_disk_event_during_moves_three_shards() {
    crash_everywhere(3, true);
}
