//! Snapshot votes read the epoch's logged time (meta version 6 carries
//! the time of the last vote) and the logged interval (each run logs the
//! one it votes by; meta version 8 carries it): a restore from any
//! snapshot, then replay, by a process configured with another interval,
//! decides handovers (which wait while a snapshot is due) at the epochs the
//! live run did; and a restart on a clock behind the logged times still
//! takes snapshots. Written from a review's scratch tests.

mod common;

use common::*;
use styx_engine::interval::SnapshotInterval;
use styx_engine::sim::{Sim, test_config};
use styx_engine::{Batch, Epoch, Layout, ShardId, SnapshotChunk};

struct Live {
    sim: Sim,
    chunks: Vec<SnapshotChunk>,
    logs: Vec<Batch>,
}

const INITIAL: [u16; 3] = [1, 1, 0];

fn live_run(seed: u64, interval: u64, ahead_us: u64) -> Live {
    let app = bank(8);
    let mut config = test_config(8);
    config.snapshot_interval_us = interval;
    config.move_share_entities = 1;
    config.epoch_gather_us = 0;
    let mut sim = Sim::new(app.clone(), config, 2, seed);
    sim.set_layout(Layout::contiguous(&INITIAL));
    if ahead_us > 0 {
        let now = sim.now_us();
        sim.advance_clock_us(now + ahead_us);
    }
    for (op, k, v) in &accounts(64, START_BALANCE) {
        sim.load(*op, k, Some(v.clone()));
    }
    let mut token = 0;
    for round in 0..5u64 {
        // A move; a few epochs into its copy a second move and a handover
        // (waiting behind them), as in replay_decides_a_waiting_handover_...
        sim.submit(0, token, move_to((round * 3 % 8) as u32, ((round + 1) % 2) as ShardId))
            .unwrap();
        token += 1;
        let e0 = sim.shard(0).epoch();
        while sim.shard(0).epoch() < e0 + 3 {
            if !sim.step() {
                break;
            }
        }
        sim.submit(
            1,
            token,
            move_to(((round * 3 + 2) % 8) as u32, ((round + 1) % 2) as ShardId),
        )
        .unwrap();
        token += 1;
        sim.submit(0, token, hand((round % 2) as ShardId, [2, 0, 1][(round % 3) as usize]))
            .unwrap();
        token += 1;
        for _ in 0..25 {
            sim.submit(0, token, transfer(&app, token % 64, (token + 1) % 64, 1))
                .unwrap();
            token += 1;
            sim.run();
        }
    }
    let chunks = sim.take_snapshots();
    let logs = sim.logs();
    Live { sim, chunks, logs }
}

fn restore(live: &Live, interval: u64, epoch: Epoch, files: &[SnapshotFile], meta: impl Fn(&[u8]) -> Vec<u8>) -> Sim {
    let app = bank(8);
    let mut config = test_config(8);
    config.snapshot_interval_us = interval;
    config.move_share_entities = 1;
    config.epoch_gather_us = 0;
    let mut fresh = Sim::new(app, config, 2, 777);
    fresh.set_layout(Layout::contiguous(&INITIAL));
    for (s, (entities, m)) in files.iter().enumerate() {
        let shard = fresh.shard_mut(s as ShardId);
        for ((op, key), value) in entities {
            shard.load_snapshot_entity(*op, key, value.clone());
        }
        assert_eq!(shard.restore(&meta(m)).unwrap(), epoch);
    }
    fresh.adopt_restored_layout();
    fresh.replay(live.logs.iter().filter(|b| b.epoch > epoch).cloned().collect());
    fresh.run();
    fresh
}

/// Restores from every complete snapshot and replays the rest, with
/// snapshots off or hardly ever due in the restoring process: the state,
/// and the handovers after the snapshot, are the live run's.
#[test]
fn a_restore_from_any_snapshot_decides_handovers_like_the_live_run() {
    let mut checked = 0;
    for seed in 0..12u64 {
        let interval = [1, 30, 200, 2_000][seed as usize % 4];
        let live = live_run(seed, interval, 0);
        let all = complete_snapshots(&live.chunks, 2);
        assert!(!all.is_empty(), "seed {seed}: no complete snapshot");
        for (&epoch, files) in &all {
            let want: Vec<_> = live
                .sim
                .handovers()
                .iter()
                .filter(|s| s.epoch > epoch)
                .map(|s| (s.epoch, s.shard, s.to))
                .collect();
            let other = [0, 1_000_000_000][seed as usize % 2];
            let fresh = restore(&live, other, epoch, files, |m| m.to_vec());
            assert_eq!(fresh.state(), live.sim.state(), "seed {seed} snapshot {epoch}");
            let got: Vec<_> = fresh.handovers().iter().map(|s| (s.epoch, s.shard, s.to)).collect();
            assert_eq!(
                got, want,
                "seed {seed} interval {interval}: restore from snapshot {epoch}"
            );
            checked += 1;
        }
    }
    assert!(checked > 100, "{checked} restores");
}

/// The live run's clock was an hour ahead (a clock later stepped back, a
/// data directory moved to another host): after a restore the shards still
/// take snapshots, rather than none until the clock catches up.
#[test]
fn a_restart_on_a_clock_behind_the_log_still_takes_snapshots() {
    let interval = 1_000;
    let live = live_run(3, interval, 3_600_000_000);
    let all = complete_snapshots(&live.chunks, 2);
    let (&epoch, files) = all.last_key_value().expect("a complete snapshot");
    let app = bank(8);
    let mut fresh = restore(&live, interval, epoch, files, |m| m.to_vec());
    let _ = fresh.take_snapshots();
    for t in 0..300u64 {
        fresh
            .submit(0, 10_000 + t, transfer(&app, t % 64, (t + 1) % 64, 1))
            .unwrap();
        fresh.run();
    }
    let taken = fresh.take_snapshots().iter().filter(|c| c.last).count();
    assert!(taken >= 2, "{taken} snapshot files after the restore");
}

/// The intervals a shard's log holds, with their epochs.
fn logged_intervals<'a>(log: impl IntoIterator<Item = &'a Batch>) -> Vec<(Epoch, u64)> {
    log.into_iter()
        .flat_map(|b| {
            b.txns
                .iter()
                .filter_map(move |(_, r)| SnapshotInterval::of(r).map(|i| (b.epoch, i.expect("an interval").0)))
        })
        .collect()
}

/// Each run logs the interval it votes by, first in its first batch (and
/// again in the first after the shard is rebuilt from a hand-off) and
/// never as a transaction; a process restored with another interval votes
/// by the logged one through its replay, then logs and votes by its own.
#[test]
fn each_run_logs_the_interval_it_votes_by_first() {
    let live = live_run(5, 30, 0);
    for s in 0..2 {
        let log: Vec<&Batch> = live.logs.iter().filter(|b| b.shard == s).collect();
        let intervals = logged_intervals(log.iter().copied());
        assert_eq!(intervals.first(), Some(&(log[0].epoch, 30)), "shard {s}");
        assert!(intervals.iter().all(|(_, us)| *us == 30), "shard {s}: {intervals:?}");
        for (epoch, _) in &intervals {
            let b = log.iter().find(|b| b.epoch == *epoch).expect("its batch");
            assert!(
                SnapshotInterval::of(&b.txns[0].1).is_some(),
                "shard {s}: first in its batch"
            );
        }
        assert!(
            log.iter()
                .all(|b| b.transactions().all(|(_, r)| SnapshotInterval::of(r).is_none()))
        );
        assert_eq!(live.sim.shard(s).snapshot_interval_us(), 30);
    }
    let all = complete_snapshots(&live.chunks, 2);
    let (&epoch, files) = all.first_key_value().expect("a complete snapshot");
    let mut fresh = restore(&live, 500, epoch, files, |m| m.to_vec());
    for s in 0..2 {
        assert_eq!(fresh.shard(s).snapshot_interval_us(), 30, "shard {s} after its replay");
    }
    let app = bank(8);
    fresh.submit(0, 10_000, transfer(&app, 1, 2, 1)).unwrap();
    fresh.run();
    for s in 0..2 {
        let log = fresh.log(s);
        assert!(!log.is_empty(), "shard {s} ran no epoch after the replay");
        assert_eq!(logged_intervals(log), vec![(log[0].epoch, 500)], "shard {s}");
        assert_eq!(fresh.shard(s).snapshot_interval_us(), 500, "shard {s}");
    }
}

/// A shard configured without snapshots among shards that take them (a
/// node started with `--snapshot-interval-ms 0` in a cluster, or a shard
/// handed to one): a snapshot its peers' votes start holds all of its
/// entities — whole, as it tracked no change before — not only those
/// changed since.
#[test]
fn a_shard_configured_without_snapshots_snapshots_whole_when_its_peers_vote() {
    let app = bank(8);
    let mut config = test_config(8);
    config.snapshot_interval_us = 200;
    let mut sim = Sim::new(app.clone(), config.clone(), 2, 3);
    let off = styx_engine::Config {
        snapshot_interval_us: 0,
        ..config
    };
    sim.replace_shard(styx_engine::Shard::new(app.clone(), off, 1, 2));
    let accounts_n = 64;
    for (op, k, v) in &accounts(accounts_n, START_BALANCE) {
        sim.load(*op, k, Some(v.clone()));
    }
    for t in 0..200u64 {
        sim.submit(0, t, transfer(&app, t % accounts_n, (t + 1) % accounts_n, 1))
            .unwrap();
        sim.run();
    }
    let all = complete_snapshots(&sim.take_snapshots(), 2);
    assert!(all.len() >= 2, "{} complete snapshots", all.len());
    for (epoch, files) in &all {
        let entities: usize = files.iter().map(|(e, _)| e.len()).sum();
        assert_eq!(
            entities, accounts_n as usize,
            "snapshot {epoch}: entities of both shards"
        );
        let total: i64 = files.iter().flat_map(|(e, _)| e.values()).map(balance_of).sum();
        assert_eq!(total, accounts_n as i64 * START_BALANCE, "snapshot {epoch}: money");
    }
}
