//! Partition moves in the simulator: a bank (YCSB-T transfers) whose
//! partitions move back and forth between shards every few epochs while
//! transfers run, checked against the serial oracle and money
//! conservation; every entity where the map says; retries exactly-once
//! across a move; bad moves refused without disturbing anything. (Crashes
//! at every disk event during moves: `crash_points.rs`.)

mod common;

use common::*;
use std::collections::BTreeSet;
use styx_engine::rng::Rng;
use styx_engine::sim::{Sim, test_config};
use styx_engine::{Address, Move, OpId, Outcome, Payload, Request, ShardId};

const ACCOUNTS: u64 = 40;
const PARTITIONS: u32 = 8;
const REQUESTS: u64 = 300;
const SEEDS: u64 = 10;

/// Between epochs: every shard holds the map the log's moves make, and
/// every entity lives on the shard it names.
fn assert_placed_by_log(sim: &Sim, at: &str) {
    let map = map_of_log(sim.shard(0).app(), sim.n_shards(), &sim.logs());
    assert_placed(sim, &map, at);
}

/// Transfers by exactly-once clients and without, with moves of random
/// partitions to random shards in between; returns the map's version.
fn bank_under_moves(shards: u16, seed: u64) -> u64 {
    let at = format!("seed {seed}, {shards} shards");
    let app = bank(PARTITIONS);
    let mut config = test_config(8);
    config.epoch_gather_us = 30;
    config.step_messages_max = [2, 8, 64][(seed % 3) as usize];
    // A background copy of one entity an epoch, a few, or all at once:
    // transfers write into partitions while they are copied.
    config.move_share_entities = [1, 2, 4_096][(seed / 3 % 3) as usize];
    let mut rng = Rng::new(seed);
    let mut sim = Sim::new(app.clone(), config.clone(), shards, seed);
    let initial = accounts(ACCOUNTS, START_BALANCE);
    for (op, k, v) in &initial {
        sim.load(*op, k, Some(v.clone()));
    }
    let mut moves = 0;
    for token in 0..REQUESTS {
        let request = if rng.chance(0.08) {
            moves += 1;
            move_to(
                rng.below(u64::from(PARTITIONS)) as u32,
                rng.below(u64::from(shards)) as ShardId,
            )
        } else {
            let d = rng.below(ACCOUNTS);
            let c = (d + 1 + rng.below(ACCOUNTS - 1)) % ACCOUNTS;
            let t = transfer(&app, d, c, 1 + rng.below(1_000) as i64);
            if rng.chance(0.5) {
                with_client(t, rng.below(4), token)
            } else {
                t
            }
        };
        sim.submit(rng.below(u64::from(shards)) as ShardId, token, request)
            .unwrap_or_else(|e| panic!("{at}: submit refused: {e}"));
        for _ in 0..rng.below(30) {
            sim.step();
        }
        if token % 50 == 49 {
            sim.run();
            assert_placed_by_log(&sim, &at);
        }
    }
    let checked = run_and_check(&mut sim, &app, config.limits, &initial);
    assert!(checked.committed > REQUESTS as usize / 2, "{at}: {checked:?}");
    assert_conserved(&sim.state(), ACCOUNTS, ACCOUNTS as i64 * START_BALANCE, &at);
    assert_placed_by_log(&sim, &at);
    assert!(moves > 0, "{at}: no move submitted");
    sim.shard(0).partition_map().version()
}

fn swarm_of(shards: u16) {
    swarm(seeds(0..SEEDS), |seed| {
        let version = bank_under_moves(shards, seed);
        // Moves in one epoch count once.
        assert!(version > 0, "seed {seed}: the map never changed");
    });
}

#[test]
fn bank_with_moves_matches_serial_two_shards() {
    swarm_of(2);
}

#[test]
fn bank_with_moves_matches_serial_three_shards() {
    swarm_of(3);
}

/// Moves with nothing else: the state is unchanged, it ends on the target
/// shard, moving to the owner changes nothing, and two moves of one
/// partition in an epoch end where the last one says.
#[test]
fn a_moved_partition_lands_on_its_target() {
    let app = bank(PARTITIONS);
    let config = test_config(8);
    let mut sim = Sim::new(app.clone(), config.clone(), 3, 7);
    let initial = accounts(ACCOUNTS, START_BALANCE);
    for (op, k, v) in &initial {
        sim.load(*op, k, Some(v.clone()));
    }
    let before = sim.state();
    let on = |sim: &Sim, s: ShardId| {
        let mut keys = BTreeSet::new();
        sim.shard(s).for_each_entity(|_, k, _| {
            keys.insert(k.clone());
        });
        keys
    };
    let partition_keys = |p: u32| -> BTreeSet<_> {
        (0..ACCOUNTS)
            .map(|a| account(a).1)
            .filter(|k| k.partition(PARTITIONS) == p)
            .collect()
    };
    // Partition 1 (default: shard 1) to shard 2.
    sim.submit(0, 0, move_to(1, 2)).unwrap();
    sim.run();
    assert_eq!(sim.shard(1).partition_map().owner(OpId(0), 1), 2);
    assert!(on(&sim, 2).is_superset(&partition_keys(1)));
    assert!(on(&sim, 1).is_disjoint(&partition_keys(1)));
    // Within one epoch: 4 → 0 then 4 → 2 (the last wins), 5 to its owner.
    sim.submit(1, 1, move_to(4, 0)).unwrap();
    sim.submit(1, 2, move_to(4, 2)).unwrap();
    sim.submit(1, 3, move_to(5, 2)).unwrap();
    sim.run();
    let map = sim.shard(0).partition_map();
    assert_eq!((map.owner(OpId(0), 4), map.owner(OpId(0), 5)), (2, 2));
    assert!(on(&sim, 2).is_superset(&partition_keys(4)));
    assert!(on(&sim, 1).is_disjoint(&partition_keys(4)));
    assert_eq!(sim.state(), before, "moves changed the state");
    let replies = sim.take_replies();
    assert_eq!(replies.len(), 4);
    assert!(
        replies
            .iter()
            .all(|r| r.outcome == Outcome::Committed(Payload::encode(&())))
    );
    assert_placed_by_log(&sim, "after moves");
    // Transactions on the moved partitions run at their new owner.
    for (i, (d, c)) in [(1u64, 4u64), (4, 9), (12, 1)].into_iter().enumerate() {
        sim.submit(i as ShardId, 100 + i as u64, transfer(&app, d, c, 5))
            .unwrap();
    }
    sim.run();
    let replies = sim.take_replies();
    assert_eq!(replies.len(), 3);
    assert!(replies.iter().all(|r| matches!(r.outcome, Outcome::Committed(_))));
    assert_conserved(
        &sim.state(),
        ACCOUNTS,
        ACCOUNTS as i64 * START_BALANCE,
        "after transfers",
    );
}

/// A retry of a request answered before a move of its partitions gets the
/// first outcome, with the same tid, runs nothing and is not sequenced
/// again; a move sent twice by an exactly-once client moves once.
#[test]
fn retries_across_a_move_are_exactly_once() {
    swarm(seeds(0..SEEDS), |seed| {
        let at = format!("seed {seed}");
        let shards = 3;
        let app = bank(PARTITIONS);
        let mut rng = Rng::new(seed);
        let mut sim = Sim::new(app.clone(), test_config(8), shards, seed);
        for (op, k, v) in accounts(ACCOUNTS, START_BALANCE) {
            sim.load(op, &k, Some(v));
        }
        let mut first = Vec::new();
        for client in 0..6u64 {
            let d = rng.below(ACCOUNTS);
            let c = (d + 1 + rng.below(ACCOUNTS - 1)) % ACCOUNTS;
            let r = with_client(transfer(&app, d, c, 1 + rng.below(100) as i64), client, 1);
            sim.submit(rng.below(3) as ShardId, client, r.clone()).unwrap();
            // The moves of both accounts' partitions, sometimes in the same
            // epoch as the transfer, sometimes later.
            for _ in 0..rng.below(6) {
                sim.step();
            }
            for key in [d, c] {
                let p = account(key).1.partition(PARTITIONS);
                let to = (sim.shard(0).partition_map().owner(OpId(0), p) + 1 + rng.below(2) as u16) % 3;
                let mv = with_client(move_to(p, to), 100 + client, key + 1);
                sim.submit(rng.below(3) as ShardId, 1000 + client * 100 + key, mv)
                    .unwrap();
            }
            first.push(r);
        }
        sim.run();
        let answered: std::collections::HashMap<u64, (u64, Outcome)> = sim
            .take_replies()
            .into_iter()
            .map(|r| (r.token, (r.tid, r.outcome)))
            .collect();
        let state = sim.state();
        let version = sim.shard(0).partition_map().version();
        let logged: Vec<usize> = (0..shards).map(|s| sim.log(s).len()).collect();
        // Retry every request, the moves too, on random shards.
        for (client, r) in first.iter().enumerate() {
            sim.submit(rng.below(3) as ShardId, 5000 + client as u64, r.clone())
                .unwrap();
        }
        let moves: Vec<(u64, Request)> = sim
            .logs()
            .into_iter()
            .flat_map(|b| b.txns)
            .filter(|(_, r)| Move::of(r).is_some())
            .collect();
        assert_eq!(moves.len(), 12, "{at}: every move sequenced once");
        for (i, (_, mv)) in moves.iter().enumerate() {
            sim.submit(rng.below(3) as ShardId, 9000 + i as u64, mv.clone())
                .unwrap();
        }
        sim.run();
        for reply in sim.take_replies() {
            if reply.token >= 9000 {
                let (tid, _) = &moves[(reply.token - 9000) as usize];
                assert_eq!(reply.tid, *tid, "{at}: a retried move got another tid");
                continue;
            }
            let client = reply.token - 5000;
            assert_eq!(
                (reply.tid, reply.outcome),
                answered[&client].clone(),
                "{at}: retry of client {client} across a move"
            );
        }
        assert!(
            (0..shards).all(|s| sim.log(s)[logged[s as usize]..]
                .iter()
                .all(|b| b.transactions().next().is_none())),
            "{at}: a retry was sequenced again"
        );
        assert_eq!(sim.state(), state, "{at}: a retry changed the state");
        assert_eq!(
            sim.shard(0).partition_map().version(),
            version,
            "{at}: a retried move moved again"
        );
        assert_placed_by_log(&sim, &at);
    });
}

/// A move to a shard that does not exist, of an unknown operator or
/// partition, or malformed, is refused at once with a clear error; nothing
/// is logged and the engine runs on.
#[test]
fn bad_moves_are_refused() {
    let app = bank(PARTITIONS);
    let config = test_config(8);
    let mut sim = Sim::new(app.clone(), config.clone(), 2, 3);
    let initial = accounts(ACCOUNTS, START_BALANCE);
    for (op, k, v) in &initial {
        sim.load(*op, k, Some(v.clone()));
    }
    let refused = |sim: &mut Sim, r: Request, why: &str| {
        let err = sim.submit(0, 0, r).unwrap_err();
        assert!(err.message().contains(why), "{err} lacks {why:?}");
    };
    refused(&mut sim, move_to(0, 2), "no shard 2 (there are 2)");
    let mut r = move_to(0, 1);
    r.function.op = OpId(3);
    refused(&mut sim, r, "no operator 3");
    refused(&mut sim, move_to(PARTITIONS, 1), "account has 8 partitions, not 9");
    let mut r = move_to(0, 1);
    r.address = Address::Entity(account(1).1);
    refused(&mut sim, r, "names a partition");
    let mut r = move_to(0, 1);
    r.args = Payload::encode(&"one");
    refused(&mut sim, r, "target shard");
    sim.submit(1, 1, transfer(&app, 1, 2, 10)).unwrap();
    let checked = run_and_check(&mut sim, &app, config.limits, &initial);
    assert_eq!(checked.committed, 1);
    assert!(
        sim.logs()
            .iter()
            .flat_map(|b| &b.txns)
            .all(|(_, r)| Move::of(r).is_none())
    );
    assert_eq!(sim.shard(0).partition_map().version(), 0);
}

/// The old owner deletes a partition that moved away a share per epoch
/// end, not all at once at the switch (which stalled every shard's next
/// epoch): meanwhile nothing shows it (state, counts), and money stays
/// where the log put it.
#[test]
fn a_moved_partition_is_deleted_from_its_old_owner_a_share_per_epoch() {
    let app = bank(2);
    let mut config = test_config(8);
    config.move_share_entities = 100;
    let mut sim = Sim::new(app.clone(), config.clone(), 2, 5);
    let accounts_n = 2_000u64;
    let initial = accounts(accounts_n, START_BALANCE);
    for (op, k, v) in &initial {
        sim.load(*op, k, Some(v.clone()));
    }
    let before = sim.state();
    let on_0 = sim.shard(0).entity_count();
    sim.submit(0, 0, move_to(0, 1)).unwrap();
    sim.run();
    assert_placed_by_log(&sim, "after the move");
    assert_eq!(sim.state(), before, "the move changed the state");
    let mut left = sim.shard(0).retiring_entities();
    assert!(
        left > 0 && left < on_0,
        "{left} of {on_0} entities left to delete after the switch"
    );
    assert_eq!(sim.shard(0).entity_count(), 0, "shard 0 owns nothing now");
    assert_eq!(sim.shard(1).entity_count(), accounts_n as usize);
    // Every epoch end deletes at most a share.
    let mut token = 1;
    while left > 0 {
        let epoch = sim.shard(0).epoch();
        sim.submit(
            1,
            token,
            transfer(&app, token % accounts_n, (token + 1) % accounts_n, 1),
        )
        .unwrap();
        token += 1;
        sim.run();
        let epochs = (sim.shard(0).epoch() - epoch) as usize;
        let now = sim.shard(0).retiring_entities();
        assert!(now < left, "epoch ends deleted nothing ({now} left)");
        assert!(
            left - now <= 100 * epochs,
            "{} deleted in {epochs} epoch ends",
            left - now
        );
        assert_eq!(
            sim.shard(0).entity_count() + sim.shard(1).entity_count(),
            accounts_n as usize
        );
        left = now;
    }
    assert_placed_by_log(&sim, "after the old owner deleted the partition");
    let checked = run_and_check(&mut sim, &app, config.limits, &initial);
    assert_eq!(checked.committed, token as usize);
}

/// A move's share follows the log's time: each epoch end deletes (and a
/// copy sends) `move_share_per_ms` entities per millisecond of logged
/// time since the last share, between `move_share_min_entities` and
/// `move_share_entities` — computed here from the old owner's logged
/// batches alone, as replay would.
#[test]
fn a_moves_share_follows_the_logged_time() {
    let app = bank(2);
    let mut config = test_config(8);
    config.move_share_entities = 500;
    config.move_share_min_entities = 10;
    config.move_share_per_ms = 100;
    let mut sim = Sim::new(app.clone(), config.clone(), 2, 9);
    let accounts_n = 8_000u64;
    let initial = accounts(accounts_n, START_BALANCE);
    for (op, k, v) in &initial {
        sim.load(*op, k, Some(v.clone()));
    }
    sim.submit(0, 0, move_to(0, 1)).unwrap();
    sim.run();
    let share = |elapsed_us: u64| ((elapsed_us * 100 / 1_000) as usize).clamp(10, 500);
    let mut left = sim.shard(0).retiring_entities();
    assert!(left > 2_000, "{left} entities left to delete after the switch");
    let (mut floors, mut larger) = (0, 0);
    // Transfers submitted at the old owner after a pause of the clock:
    // many fill epochs back to back (shares at the floor), one after a
    // pause starts an epoch that late (a share for the pause).
    let mut token = 0;
    for (pause_us, transfers) in [(0u64, 24u64), (3_000, 1), (0, 24), (20_000, 1), (1_500, 8)] {
        let from = sim.shard(0).epoch();
        if pause_us > 0 {
            let now = sim.now_us();
            sim.advance_clock_us(now + pause_us);
        }
        for _ in 0..transfers {
            token += 1;
            sim.submit(0, token, transfer(&app, token, token + 1, 1)).unwrap();
        }
        sim.run();
        let to = sim.shard(0).epoch();
        let times: std::collections::BTreeMap<u64, u64> = sim.log(0).iter().map(|b| (b.epoch, b.now_us)).collect();
        let expected: usize = (from + 1..=to)
            .map(|e| share(times[&e] - times[&(e - 1)]))
            .inspect(|s| if *s == 10 { floors += 1 } else { larger += 1 })
            .sum();
        let now = sim.shard(0).retiring_entities();
        assert!(now > 0, "the partition ran out: the shares were not all taken");
        assert_eq!(
            left - now,
            expected,
            "epochs {from}..={to}, paused {pause_us} µs, {transfers} transfers"
        );
        left = now;
    }
    assert!(floors > 0 && larger > 0, "{floors} shares at the floor, {larger} above");
    let checked = run_and_check(&mut sim, &app, config.limits, &initial);
    assert_eq!(checked.committed, 1 + token as usize);
}

/// A partition larger than one `Install` message (4096 entities) moves
/// whole, in several, and transactions on it run at the new owner.
#[test]
fn a_large_partition_moves_in_chunks() {
    let app = bank(2);
    let config = test_config(8);
    let mut sim = Sim::new(app.clone(), config.clone(), 2, 11);
    let accounts_n = 10_000;
    let initial = accounts(accounts_n, START_BALANCE);
    for (op, k, v) in &initial {
        sim.load(*op, k, Some(v.clone()));
    }
    let before = sim.state();
    sim.submit(0, 0, move_to(0, 1)).unwrap();
    sim.submit(1, 1, move_to(1, 0)).unwrap();
    sim.run();
    assert_placed_by_log(&sim, "after the swap");
    assert_eq!(sim.state(), before, "the swap changed the state");
    assert_eq!(
        sim.shard(0).entity_count() + sim.shard(1).entity_count(),
        accounts_n as usize
    );
    sim.submit(0, 2, transfer(&app, 1, 2, 5)).unwrap();
    let checked = run_and_check(&mut sim, &app, config.limits, &initial);
    assert_eq!(checked.committed, 3);
}

/// Entities created and deleted in partitions while their background copy
/// runs (one entity an epoch, so copies span many epochs): the delta
/// carries both, so the state after every move switched equals the serial
/// oracle's, nothing deleted comes back on the new owner and nothing
/// created is lost; every entity is where the map says.
#[test]
fn creates_and_deletes_during_a_copy_reach_the_new_owner() {
    swarm(seeds(0..SEEDS), |seed| {
        let at = format!("seed {seed}");
        let mut app = styx_engine::App::new("kv");
        let kv = app.operator("kv", 4);
        app.function(kv, "put", |ctx, v: u64| async move {
            ctx.put(&v)?;
            Ok(())
        });
        app.function(kv, "del", |ctx, (): ()| async move {
            ctx.delete()?;
            Ok(())
        });
        let app = std::sync::Arc::new(app);
        let put = app.resolve("kv", "put").unwrap();
        let del = app.resolve("kv", "del").unwrap();
        let mut config = test_config(8);
        config.epoch_gather_us = 30;
        config.move_share_entities = 1 + (seed % 2) as usize;
        let shards = 2 + (seed % 2) as u16;
        let mut sim = Sim::new(app.clone(), config.clone(), shards, seed);
        let initial: Vec<_> = (0..60u64)
            .map(|k| {
                (
                    kv,
                    styx_engine::Key::from(k),
                    styx_engine::Value::encode(&k, &mut Default::default()).unwrap(),
                )
            })
            .collect();
        for (op, k, v) in &initial {
            sim.load(*op, k, Some(v.clone()));
        }
        let mut rng = Rng::new(seed);
        for token in 0..400u64 {
            let request = if rng.chance(0.05) {
                move_to(rng.below(4) as u32, rng.below(u64::from(shards)) as ShardId)
            } else {
                let key = styx_engine::Key::from(rng.below(120));
                let (function, args) = if rng.chance(0.4) {
                    (del, Payload::encode(&()))
                } else {
                    (put, Payload::encode(&rng.below(1_000)))
                };
                Request {
                    function,
                    address: Address::Entity(key),
                    args,
                    client: None,
                }
            };
            sim.submit(rng.below(u64::from(shards)) as ShardId, token, request)
                .unwrap_or_else(|e| panic!("{at}: submit refused: {e}"));
            for _ in 0..rng.below(20) {
                sim.step();
            }
        }
        run_and_check(&mut sim, &app, config.limits, &initial);
        assert_placed_by_log(&sim, &at);
        let version = sim.shard(0).partition_map().version();
        assert!(version > 0, "{at}: the map never changed");
    });
}

/// Moves back to back (a queue of them, each copied one entity an epoch,
/// so some copy is under way for hundreds of epochs) while transfers run
/// and snapshots fall due: a due snapshot holds the queue until the copies
/// under way switch, so snapshots are taken between moves instead of
/// waiting for the last one; the run still matches the serial oracle.
#[test]
fn moves_back_to_back_do_not_starve_snapshots() {
    swarm(seeds(0..4), |seed| {
        let at = format!("seed {seed}");
        let app = bank(PARTITIONS);
        let mut config = test_config(8);
        config.epoch_gather_us = 30;
        config.move_share_entities = 1;
        config.snapshot_interval_us = 500;
        let mut sim = Sim::new(app.clone(), config.clone(), 2, seed);
        let initial = accounts(400, START_BALANCE);
        for (op, k, v) in &initial {
            sim.load(*op, k, Some(v.clone()));
        }
        // Every partition back and forth three times: ~50 entities each,
        // so ~50 epochs per copy.
        let mut token = 0;
        for round in 0..6u16 {
            for p in 0..PARTITIONS {
                let to = ((u16::try_from(p).unwrap() + round + 1) % 2) as ShardId;
                sim.submit(0, token, move_to(p, to)).unwrap();
                token += 1;
            }
        }
        let mut rng = Rng::new(seed);
        let (mut manifests, mut while_moving) = (0, 0);
        let mut steps = 0u64;
        loop {
            if token < 2_000 && steps.is_multiple_of(5) {
                let d = rng.below(400);
                let c = (d + 1 + rng.below(399)) % 400;
                sim.submit(rng.below(2) as ShardId, token, transfer(&app, d, c, 1))
                    .unwrap();
                token += 1;
            }
            let progressed = sim.step();
            steps += 1;
            let now = sim
                .disk_events()
                .iter()
                .filter(|e| matches!(e, styx_engine::sim::DiskEvent::Manifest { .. }))
                .count();
            if now > manifests {
                manifests = now;
                if sim.shard(0).partition_map().is_moving() {
                    while_moving += 1;
                }
            }
            if !progressed && token >= 2_000 {
                break;
            }
        }
        assert!(!sim.shard(0).partition_map().is_moving(), "{at}: moves left unfinished");
        assert!(
            while_moving >= 3,
            "{at}: {while_moving} of {manifests} snapshots taken while moves were queued"
        );
        run_and_check(&mut sim, &app, config.limits, &initial);
        assert_placed_by_log(&sim, &at);
    });
}
