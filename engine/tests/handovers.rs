//! Shard handovers in the simulator (docs/nodes.md, step 2): shards of a
//! bank (YCSB-T transfers) are handed between nodes — including to a node
//! that runs none and from a node until it runs none — while transfers and
//! partition moves run. Checked: the serial oracle and money conservation;
//! every shard, and the simulator's links and disks, follow the layout the
//! log's handovers make; each node's manifest waits for exactly the shards
//! it runs after the snapshot's epoch; a snapshot carries the layout, and
//! its restore plus the log's replay reaches the live run's state and
//! layout; bad handovers are refused without disturbing anything. (Node crashes during handovers, recovered from logs in pieces on several
//! disks: `cluster_sim.rs`.)

mod common;

use common::*;
use std::collections::BTreeMap;
use styx_engine::layout::Switched;
use styx_engine::rng::Rng;
use styx_engine::sim::{DiskEvent, Sim, test_config};
use styx_engine::{Epoch, Handoff, Layout, OpId, Request, Shard, ShardId};

const ACCOUNTS: u64 = 40;
const PARTITIONS: u32 = 8;
const REQUESTS: u64 = 300;
/// Two nodes of two shards and a spare.
const NODES: [u16; 3] = [2, 2, 0];

/// The layouts the simulator went through, from its handovers: `(e,
/// layout)` holds from epoch `e` on. (The log's handovers make the same
/// once none waits for a partition copy.)
fn layouts_of_switches(initial: &Layout, switched: &[Switched]) -> Vec<(Epoch, Layout)> {
    let mut layout = initial.clone();
    let mut out = vec![(0, layout.clone())];
    for s in switched {
        layout.follow(s);
        if out.last().is_some_and(|(e, _)| *e == s.epoch + 1) {
            out.pop();
        }
        out.push((s.epoch + 1, layout.clone()));
    }
    out
}

fn layout_at(layouts: &[(Epoch, Layout)], epoch: Epoch) -> &Layout {
    &layouts[layouts.partition_point(|(e, _)| *e <= epoch) - 1].1
}

/// Each node's manifest of a snapshot at `P` comes after the last chunk of
/// every shard it runs after `P` and after their logs are durable through
/// `P`; and every node, spares included, commits it.
fn assert_manifests_follow_the_layout(sim: &Sim, layouts: &[(Epoch, Layout)], at: &str) {
    let mut files: BTreeMap<(ShardId, Epoch), usize> = BTreeMap::new();
    let mut synced: Vec<Vec<(Epoch, usize)>> = vec![Vec::new(); sim.n_shards() as usize];
    let mut committed: BTreeMap<Epoch, Vec<u16>> = BTreeMap::new();
    for (i, e) in sim.disk_events().iter().enumerate() {
        match *e {
            DiskEvent::Chunk {
                shard,
                epoch,
                last: true,
                ..
            } => {
                files.insert((shard, epoch), i);
            }
            DiskEvent::LogSync { shard, epoch, .. } => synced[shard as usize].push((epoch, i)),
            DiskEvent::NodeManifest { node, epoch } => {
                for s in layout_at(layouts, epoch + 1).shards_of(node) {
                    let file = files.get(&(s, epoch)).unwrap_or_else(|| {
                        panic!("{at}: node {node} committed snapshot {epoch} before shard {s}'s file")
                    });
                    assert!(*file < i);
                    assert!(
                        synced[s as usize].iter().any(|(e, j)| *e >= epoch && *j < i),
                        "{at}: node {node} committed snapshot {epoch} before shard {s}'s log reached it"
                    );
                }
                committed.entry(epoch).or_default().push(node);
            }
            _ => {}
        }
    }
    let mut complete = 0;
    for (epoch, nodes) in &committed {
        if nodes.len() == NODES.len() {
            complete += 1;
        } else {
            // Only the last snapshots may still be committing.
            assert!(
                committed.range(epoch + 1..).count() <= 2,
                "{at}: snapshot {epoch} committed by nodes {nodes:?} only"
            );
        }
    }
    assert!(complete > 0, "{at}: no snapshot committed by every node");
}

/// Transfers by exactly-once clients and without, with handovers of
/// random shards to random nodes and a few partition moves in between.
fn bank_under_handovers(seed: u64) {
    let at = format!("seed {seed}");
    let app = bank(PARTITIONS);
    let mut config = test_config(8);
    config.epoch_gather_us = 30;
    config.step_messages_max = [2, 8, 64][(seed % 3) as usize];
    config.snapshot_interval_us = [250, 1_500][(seed / 3 % 2) as usize];
    // Half the seeds stop every shard at each change of the layout, as
    // the runtime does to re-point its links, and rebuild each.
    config.pause_at_handover = seed / 6 % 2 == 1;
    let initial_layout = Layout::contiguous(&NODES);
    let shards = initial_layout.n_shards();
    let mut rng = Rng::new(seed);
    let mut sim = Sim::new(app.clone(), config.clone(), shards, seed);
    sim.set_layout(initial_layout.clone());
    let initial = accounts(ACCOUNTS, START_BALANCE);
    for (op, k, v) in &initial {
        sim.load(*op, k, Some(v.clone()));
    }
    let mut handovers = 0;
    for token in 0..REQUESTS {
        let request = if rng.chance(0.08) {
            handovers += 1;
            hand(
                rng.below(u64::from(shards)) as ShardId,
                rng.below(NODES.len() as u64) as u16,
            )
        } else if rng.chance(0.02) {
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
            // Quiet: no handover waits, and the log's make the layout.
            let layouts = layouts_of_log(&initial_layout, &sim.logs());
            let layout = &layouts.last().unwrap().1;
            assert_eq!(sim.layout(), layout, "{at}: the simulator's layout");
            for s in 0..shards {
                assert_eq!(sim.shard(s).layout(), layout, "{at}: shard {s}'s layout");
            }
        }
    }
    let snapshots = sim.take_snapshots();
    let logs = sim.logs();
    let checked = run_and_check(&mut sim, &app, config.limits, &initial);
    assert!(checked.committed > REQUESTS as usize / 2, "{at}: {checked:?}");
    assert_conserved(&sim.state(), ACCOUNTS, ACCOUNTS as i64 * START_BALANCE, &at);
    assert!(handovers > 0, "{at}: no handover submitted");
    let layout = layouts_of_log(&initial_layout, &sim.logs()).last().unwrap().1.clone();
    let layout = &layout;
    assert_eq!(sim.layout(), layout, "{at}: the simulator's layout");
    assert_eq!(sim.handovers().len() as u64, layout.version(), "{at}");
    assert!(layout.version() > 0, "{at}: no shard changed nodes");
    assert!(sim.handoffs() > 0, "{at}: no shard rebuilt from its hand-off");
    let layouts = layouts_of_switches(&initial_layout, sim.handovers());
    assert_eq!(&layouts.last().unwrap().1, layout);
    assert_manifests_follow_the_layout(&sim, &layouts, &at);

    // Recovery equivalence from the last snapshot every shard completed:
    // its layout is the one of its epoch, and replaying the log after it
    // re-decides the later handovers.
    let all = complete_snapshots(&snapshots, shards);
    let (&epoch, files) = all
        .last_key_value()
        .unwrap_or_else(|| panic!("{at}: no complete snapshot"));
    let mut fresh = Sim::new(app.clone(), config.clone(), shards, seed ^ 0x5eed);
    fresh.set_layout(initial_layout.clone());
    for (s, (entities, meta)) in files.iter().enumerate() {
        let shard = fresh.shard_mut(s as ShardId);
        for ((op, key), value) in entities {
            shard.load_snapshot_entity(*op, key, value.clone());
        }
        assert_eq!(shard.restore(meta).unwrap(), epoch);
        assert_eq!(
            &shard.layout().placed(),
            layout_at(&layouts, epoch + 1),
            "{at}: the layout of snapshot {epoch}"
        );
    }
    fresh.adopt_restored_layout();
    fresh.replay(logs.iter().filter(|b| b.epoch > epoch).cloned().collect());
    fresh.run();
    assert_eq!(fresh.state(), sim.state(), "{at}: replay from snapshot {epoch}");
    assert_eq!(
        fresh.layout(),
        layout,
        "{at}: the layout after replay from snapshot {epoch}"
    );
}

#[test]
fn bank_with_handovers_matches_serial() {
    swarm(seeds(0..12), bank_under_handovers);
}

/// With `pause_at_handover` every shard stops at the end of the epoch
/// where the layout changed — the ones staying where they are too — and
/// none starts the next epoch until its driver rebuilt it from its
/// hand-off. The run then goes on exactly as one where only the shard that
/// changed nodes was rebuilt: the same replies, the same state.
#[test]
fn every_shard_stops_at_a_change_of_the_layout_when_asked() {
    let app = bank(PARTITIONS);
    // `stay`: the shards that keep their node go on in place
    // (`Shard::stay`) instead of being rebuilt from their hand-offs.
    let run = |pause: bool, stay: bool| {
        let mut config = test_config(8);
        config.pause_at_handover = pause;
        let mut sim = Sim::new(app.clone(), config.clone(), 4, 11);
        sim.set_layout(Layout::contiguous(&NODES));
        sim.set_auto_hand_over(false);
        let initial = accounts(ACCOUNTS, START_BALANCE);
        for (op, k, v) in &initial {
            sim.load(*op, k, Some(v.clone()));
        }
        let mut rng = Rng::new(5);
        let mut pauses = 0;
        let mut stayed = 0;
        let mut extra = 0u64;
        for token in 0..200u64 {
            let request = if token % 40 == 20 {
                hand(rng.below(4) as ShardId, rng.below(3) as u16)
            } else {
                let d = rng.below(ACCOUNTS);
                transfer(&app, d, (d + 1 + rng.below(ACCOUNTS - 1)) % ACCOUNTS, 1)
            };
            sim.submit((token % 4) as ShardId, token, request).unwrap();
            for _ in 0..10 {
                sim.step();
                let departing: Vec<ShardId> = (0..4).filter(|s| sim.shard(*s).is_departing()).collect();
                if departing.is_empty() {
                    continue;
                }
                let epoch = sim.shard(departing[0]).epoch();
                // Requests of named clients now: forwarded to their home
                // shards, stopped ones among them, which keep them in
                // their hand-offs and accept them where they go on.
                for k in 0..8u64 {
                    // Drawn apart from the main stream, which must not
                    // depend on when the handovers fall.
                    let d = Rng::new(1_000 + extra).below(ACCOUNTS);
                    let t = transfer(&app, d, (d + 1) % ACCOUNTS, 1);
                    let token = 1_000 + extra;
                    sim.submit((k % 4) as ShardId, token, with_client(t, k, extra)).unwrap();
                    extra += 1;
                }
                if pause {
                    // Every shard ends the same epoch and stops there: none
                    // starts the next one however long the sim runs.
                    for _ in 0..2_000 {
                        sim.step();
                        for s in 0..4 {
                            assert!(
                                sim.shard(s).epoch() <= epoch,
                                "shard {s} went on past a change of the layout"
                            );
                        }
                    }
                    for s in 0..4 {
                        assert!(sim.shard(s).is_departing(), "shard {s} did not stop");
                        assert_eq!(sim.shard(s).epoch(), epoch, "shard {s}");
                    }
                    pauses += 1;
                }
                let departing: Vec<ShardId> = (0..4).filter(|s| sim.shard(*s).is_departing()).collect();
                for s in departing {
                    if stay && sim.node_of(s) == sim.layout().node_of(s) {
                        sim.stay_in_place(s);
                        stayed += 1;
                        continue;
                    }
                    let handoff = sim.shard_mut(s).hand_off();
                    let handoff = Handoff::decode(&handoff.encode(), &app).unwrap();
                    sim.replace_shard(Shard::take_over(app.clone(), config.clone(), handoff).unwrap());
                }
            }
        }
        sim.run();
        let mut replies: Vec<_> = sim.take_replies().into_iter().map(|r| (r.token, r.outcome)).collect();
        replies.sort_by_key(|r| r.0);
        assert!(extra >= 16, "named requests at the handovers");
        assert_eq!(replies.len() as u64, 200 + extra, "every request answered");
        assert_conserved(&sim.state(), ACCOUNTS, ACCOUNTS as i64 * START_BALANCE, "pause {pause}");
        (replies, sim.state(), sim.layout().clone(), pauses, stayed)
    };
    let (replies, state, layout, _, _) = run(false, false);
    assert!(layout.version() >= 2, "the layout changed: {layout:?}");
    for stay in [false, true] {
        let (paused_replies, paused_state, paused_layout, pauses, stayed) = run(true, stay);
        assert!(pauses >= 2, "every shard stopped at each change ({pauses})");
        assert_eq!(stayed > 0, stay, "shards went on in place: {stayed}");
        assert_eq!(paused_layout, layout);
        assert_eq!(paused_state, state, "the same state (stay {stay})");
        assert_eq!(paused_replies, replies, "the same replies (stay {stay})");
    }
}

/// A request forwarded to its client's home shard while every shard is
/// stopped at a handover waits in the home's hand-off and runs once the
/// home is rebuilt — here a home with nothing else to do, which goes on
/// idle and accepts it when it redelivers what waited.
#[test]
fn a_request_forwarded_to_a_stopped_home_runs_after_the_round() {
    let app = bank(PARTITIONS);
    let mut config = test_config(8);
    config.pause_at_handover = true;
    let mut sim = Sim::new(app.clone(), config.clone(), 4, 21);
    sim.set_layout(Layout::contiguous(&[2, 2]));
    sim.set_auto_hand_over(false);
    let initial = accounts(ACCOUNTS, START_BALANCE);
    for (op, k, v) in &initial {
        sim.load(*op, k, Some(v.clone()));
    }
    sim.submit(0, 1, hand(1, 1)).unwrap();
    // Stopped shards never finish (their driver must rebuild them): a
    // bounded number of steps rather than `run`.
    for _ in 0..2_000 {
        sim.step();
    }
    assert!((0..4).all(|s| sim.shard(s).is_departing()), "every shard stopped");
    assert_eq!(sim.take_replies().len(), 1, "the handover answered");
    // A client whose home is shard 2 sends through shard 0.
    let client = (0..).find(|c| styx_engine::client_home(*c, 4) == 2).unwrap();
    sim.submit(0, 2, with_client(transfer(&app, 3, 4, 7), client, 0))
        .unwrap();
    for _ in 0..2_000 {
        sim.step();
    }
    assert!(
        sim.take_replies().is_empty(),
        "nothing runs while the shards are stopped"
    );
    for s in 0..4 {
        let handoff = sim.shard_mut(s).hand_off();
        let handoff = Handoff::decode(&handoff.encode(), &app).unwrap();
        sim.replace_shard(Shard::take_over(app.clone(), config.clone(), handoff).unwrap());
    }
    sim.run();
    let replies = sim.take_replies();
    assert_eq!(replies.len(), 1, "the forwarded transfer answered once");
    assert!(
        matches!(replies[0].outcome, styx_engine::Outcome::Committed(_)),
        "{replies:?}"
    );
    let state = sim.state();
    let balance = |k: u64| state[&(OpId(0), styx_engine::Key::from(k))].decode::<i64>().unwrap();
    assert_eq!((balance(3), balance(4)), (START_BALANCE - 7, START_BALANCE + 7));
}

/// Without spare nodes (the runtime's setting), no handover leaves a node
/// without shards: one that would is refused at submit, and two sequenced
/// in one epoch that would together leave the second as a no-op.
#[test]
fn without_spares_no_node_is_left_empty() {
    let app = bank(PARTITIONS);
    let mut config = test_config(8);
    config.spare_nodes = false;
    let mut sim = Sim::new(app.clone(), config, 4, 3);
    sim.set_layout(Layout::contiguous(&[2, 2]));
    let initial = accounts(ACCOUNTS, START_BALANCE);
    for (op, k, v) in &initial {
        sim.load(*op, k, Some(v.clone()));
    }
    // Shards 2 and 3 run on node 1; each handover alone leaves it one.
    sim.submit(0, 1, hand(2, 0)).unwrap();
    sim.submit(1, 2, hand(3, 0)).unwrap();
    sim.run();
    assert_eq!(sim.take_replies().len(), 2);
    assert_eq!(
        sim.layout().shards_of(1).count(),
        1,
        "node 1 keeps a shard: {:?}",
        sim.layout()
    );
    assert_eq!(sim.layout().version(), 1, "one handover applied, the other a no-op");
    // Now node 1's last shard cannot leave: refused with a reason.
    let last = sim.layout().shards_of(1).next().unwrap();
    let refused = sim.submit(0, 3, hand(last, 0)).unwrap_err();
    assert!(refused.message().contains("without shards"), "{refused:?}");
    // A shard may still go to a node that has others.
    sim.submit(0, 4, hand(0, 1)).unwrap();
    sim.run();
    assert_eq!(sim.layout().node_of(0), 1);
    sim.submit(1, 5, transfer(&app, 1, 2, 5)).unwrap();
    sim.run();
    assert_conserved(&sim.state(), ACCOUNTS, ACCOUNTS as i64 * START_BALANCE, "after");
}

/// Handovers with nothing else: a node is emptied and a spare filled, two
/// handovers of one shard in an epoch end where the last one says, one to
/// the node it is on changes nothing, and the state never changes.
#[test]
fn handovers_change_only_where_shards_run() {
    let app = bank(PARTITIONS);
    let mut sim = Sim::new(app.clone(), test_config(8), 4, 3);
    sim.set_layout(Layout::contiguous(&NODES));
    let initial = accounts(ACCOUNTS, START_BALANCE);
    for (op, k, v) in &initial {
        sim.load(*op, k, Some(v.clone()));
    }
    let before = sim.state();
    // Empty node 1 onto the spare; shard 0 goes to node 1, then to node 2.
    for (t, (shard, node)) in [(2, 2), (3, 2), (0, 1), (0, 2), (1, 0)].into_iter().enumerate() {
        sim.submit(0, t as u64, hand(shard, node)).unwrap();
    }
    sim.run();
    let replies = sim.take_replies();
    assert_eq!(replies.len(), 5);
    assert!(
        replies
            .iter()
            .all(|r| matches!(r.outcome, styx_engine::Outcome::Committed(_)))
    );
    assert_eq!(sim.state(), before);
    assert_eq!(sim.layout().shards_of(0).collect::<Vec<_>>(), vec![1]);
    assert_eq!(sim.layout().shards_of(1).count(), 0, "node 1 emptied");
    assert_eq!(sim.layout().shards_of(2).collect::<Vec<_>>(), vec![0, 2, 3]);
    assert_eq!(
        sim.layout().version(),
        4,
        "the handover of shard 1 to its own node is none"
    );
    assert_eq!(
        sim.handovers()
            .iter()
            .map(|s| (s.shard, s.from, s.to))
            .collect::<Vec<_>>(),
        vec![(2, 1, 2), (3, 1, 2), (0, 0, 1), (0, 1, 2)]
    );
    // Transfers still run on the new layout.
    sim.submit(1, 9, transfer(&app, 1, 2, 5)).unwrap();
    sim.run();
    assert_eq!(sim.take_replies().len(), 1);
    assert_conserved(&sim.state(), ACCOUNTS, ACCOUNTS as i64 * START_BALANCE, "after");
}

#[test]
fn bad_handovers_are_refused() {
    let app = bank(PARTITIONS);
    let mut sim = Sim::new(app.clone(), test_config(8), 4, 5);
    sim.set_layout(Layout::contiguous(&NODES));
    for (op, k, v) in &accounts(ACCOUNTS, START_BALANCE) {
        sim.load(*op, k, Some(v.clone()));
    }
    let before = sim.state();
    let no_shard = sim.submit(0, 1, hand(4, 0)).unwrap_err();
    assert!(no_shard.to_string().contains("no shard 4"), "{no_shard}");
    let no_node = sim.submit(0, 2, hand(0, 3)).unwrap_err();
    assert!(no_node.to_string().contains("no node 3"), "{no_node}");
    let mut entity = hand(0, 1);
    entity.address = styx_engine::Address::Entity(styx_engine::Key::from_bytes(b"k"));
    assert!(sim.submit(0, 3, entity).is_err());
    let mut garbled = hand(0, 1);
    garbled.args = styx_engine::Payload::encode(&7u8);
    assert!(sim.submit(0, 4, garbled).is_err());
    sim.run();
    assert!(sim.take_replies().is_empty());
    assert_eq!(sim.state(), before);
    assert_eq!(sim.layout(), &Layout::contiguous(&NODES));
    // One node: every shard is on node 0 and there is nowhere to go.
    let mut single = Sim::new(app, test_config(8), 2, 5);
    assert!(
        single
            .submit(0, 1, hand(1, 1))
            .unwrap_err()
            .to_string()
            .contains("no node 1")
    );
}

/// A hand-off crosses between nodes as bytes: every prefix of them is
/// refused with an error, flipped bits never make decoding panic, and the
/// intact bytes rebuild the shard (the simulator rebuilds every handed
/// shard from its bytes).
#[test]
fn a_damaged_hand_off_is_an_error() {
    let app = bank(PARTITIONS);
    let mut config = test_config(8);
    config.snapshot_interval_us = 250;
    let mut sim = Sim::new(app.clone(), config.clone(), 4, 11);
    sim.set_layout(Layout::contiguous(&NODES));
    for (op, k, v) in &accounts(ACCOUNTS, START_BALANCE) {
        sim.load(*op, k, Some(v.clone()));
    }
    let mut rng = Rng::new(11);
    for token in 0..120u64 {
        let request = if token == 60 {
            hand(1, 2)
        } else {
            let d = rng.below(ACCOUNTS);
            with_client(transfer(&app, d, (d + 1) % ACCOUNTS, 1), rng.below(4), token)
        };
        sim.submit(rng.below(4) as ShardId, token, request).unwrap();
        for _ in 0..rng.below(20) {
            sim.step();
        }
    }
    sim.run();
    assert_eq!(sim.handoffs(), 1);
    let bytes = sim.last_handoff().to_vec();
    let h = Handoff::decode(&bytes, &app).unwrap();
    assert_eq!((h.shard(), h.entities()), (1, sim.shard(1).entity_count()));
    Shard::take_over(app.clone(), config.clone(), h).unwrap();
    for cut in 0..bytes.len() {
        assert!(
            Handoff::decode(&bytes[..cut], &app).is_err(),
            "a prefix of {cut} bytes decoded"
        );
    }
    // A hostile epoch or counter (fixed-width, after the version byte and
    // the two shard ids): refused, not left to overflow later.
    for (at, what) in [(5, "epoch"), (21, "counter")] {
        let mut b = bytes.clone();
        b[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        let e = Handoff::decode(&b, &app).map(|_| ()).unwrap_err();
        assert!(e.to_string().contains("past any real run"), "{what}: {e}");
    }
    let mut refused = 0;
    for _ in 0..5_000 {
        let mut b = bytes.clone();
        let i = rng.below(b.len() as u64) as usize;
        b[i] ^= 1 << rng.below(8);
        if let Ok(h) = Handoff::decode(&b, &app) {
            refused += usize::from(Shard::take_over(app.clone(), config.clone(), h).is_err());
        } else {
            refused += 1;
        }
    }
    assert!(refused > 0);
    // Another application's hand-off is refused.
    assert!(Handoff::decode(&bytes, &bank(PARTITIONS + 1)).is_err());
}

/// A single shard handed to a spare starts and ends its epoch in one step:
/// its log keeps every epoch, the handover's included, and replay of that
/// log reaches the same layout.
#[test]
fn a_lone_shard_handed_to_a_spare_keeps_its_log() {
    let app = bank(4);
    let mut sim = Sim::new(app.clone(), test_config(8), 1, 1);
    sim.set_layout(Layout::contiguous(&[1, 0]));
    let initial = accounts(10, START_BALANCE);
    for (op, k, v) in &initial {
        sim.load(*op, k, Some(v.clone()));
    }
    sim.submit(0, 0, transfer(&app, 1, 2, 5)).unwrap();
    sim.run();
    sim.submit(0, 1, hand(0, 1)).unwrap();
    sim.run();
    sim.submit(0, 2, transfer(&app, 1, 2, 5)).unwrap();
    sim.run();
    assert_eq!(sim.take_replies().len(), 3);
    assert_eq!((sim.handoffs(), sim.node_of(0)), (1, 1));
    let epochs: Vec<u64> = sim.log(0).iter().map(|b| b.epoch).collect();
    assert_eq!(
        epochs,
        (1..=epochs.len() as u64).collect::<Vec<_>>(),
        "a hole in the log"
    );
    let mut fresh = Sim::new(app.clone(), test_config(8), 1, 2);
    fresh.set_layout(Layout::contiguous(&[1, 0]));
    for (op, k, v) in &initial {
        fresh.load(*op, k, Some(v.clone()));
    }
    fresh.replay(sim.logs());
    fresh.run();
    assert_eq!(fresh.state(), sim.state());
    assert_eq!(fresh.layout(), sim.layout());
}

/// A node that runs no shard leaves: every shard decides it at its
/// epoch's end (a version of the layout), a handover to it or a second
/// leave is refused at submit, a leave of a node that runs shards too; a
/// node drained of its shards leaves after; transfers run on, and a replay
/// of the logs reaches the same state and layout, the leaves included.
#[test]
fn a_node_without_shards_leaves_and_replay_agrees() {
    let app = bank(PARTITIONS);
    let mut sim = Sim::new(app.clone(), test_config(8), 4, 5);
    sim.set_layout(Layout::contiguous(&NODES));
    let initial = accounts(ACCOUNTS, START_BALANCE);
    for (op, k, v) in &initial {
        sim.load(*op, k, Some(v.clone()));
    }
    let leave = |node| styx_engine::Handover::leave(node).request();
    sim.submit(0, 1, leave(2)).unwrap();
    sim.submit(1, 2, transfer(&app, 1, 2, 5)).unwrap();
    sim.run();
    assert_eq!(sim.take_replies().len(), 2);
    assert_eq!(sim.layout().left(), &[2]);
    assert_eq!(sim.layout().version(), 1);
    let refused = sim.submit(0, 3, hand(0, 2)).unwrap_err();
    assert!(refused.message().contains("node 2 left the cluster"), "{refused:?}");
    let refused = sim.submit(0, 4, leave(2)).unwrap_err();
    assert!(refused.message().contains("node 2 left the cluster"), "{refused:?}");
    let refused = sim.submit(0, 5, leave(1)).unwrap_err();
    assert!(refused.message().contains("node 1 runs shards [2, 3]"), "{refused:?}");
    // Node 1 drained, then it leaves.
    sim.submit(0, 6, hand(2, 0)).unwrap();
    sim.submit(1, 7, hand(3, 0)).unwrap();
    sim.run();
    sim.submit(3, 8, leave(1)).unwrap();
    sim.submit(2, 9, transfer(&app, 3, 4, 7)).unwrap();
    sim.run();
    assert_eq!(sim.take_replies().len(), 4);
    assert_eq!(sim.layout().left(), &[1, 2]);
    assert_eq!(sim.layout().shards_of(0).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
    assert_eq!(
        sim.handovers()
            .iter()
            .map(|s| (s.shard, s.from, s.to))
            .collect::<Vec<_>>(),
        vec![
            (styx_engine::layout::LEAVE, 2, 2),
            (2, 1, 0),
            (3, 1, 0),
            (styx_engine::layout::LEAVE, 1, 1)
        ]
    );
    assert_conserved(
        &sim.state(),
        ACCOUNTS,
        ACCOUNTS as i64 * START_BALANCE,
        "after the leaves",
    );
    let mut fresh = Sim::new(app.clone(), test_config(8), 4, 6);
    fresh.set_layout(Layout::contiguous(&NODES));
    for (op, k, v) in &initial {
        fresh.load(*op, k, Some(v.clone()));
    }
    fresh.replay(sim.logs());
    fresh.run();
    assert_eq!(fresh.state(), sim.state());
    assert_eq!(fresh.layout(), sim.layout());
}

/// A node listed but absent joins: a handover to it, or a leave of it, is
/// refused at submit until its join is decided at an epoch's end (a
/// version of the layout); then it is handed shards like any spare, a
/// second join is refused, transfers run on, and a replay of the logs
/// (from the same absent set) reaches the same state and layout.
#[test]
fn an_absent_node_joins_is_handed_shards_and_replay_agrees() {
    let app = bank(PARTITIONS);
    let start = || Layout::contiguous(&[2, 2, 0, 0]).with_absent(vec![2, 3]).unwrap();
    let mut sim = Sim::new(app.clone(), test_config(8), 4, 11);
    sim.set_layout(start());
    let initial = accounts(ACCOUNTS, START_BALANCE);
    for (op, k, v) in &initial {
        sim.load(*op, k, Some(v.clone()));
    }
    let join = |node| styx_engine::Handover::join(node).request();
    let leave = |node| styx_engine::Handover::leave(node).request();
    let refused = sim.submit(0, 1, hand(0, 2)).unwrap_err();
    assert!(
        refused.message().contains("node 2 has not joined the cluster"),
        "{refused:?}"
    );
    let refused = sim.submit(1, 2, leave(3)).unwrap_err();
    assert!(refused.message().contains("it cannot leave"), "{refused:?}");
    let refused = sim.submit(1, 3, join(1)).unwrap_err();
    assert!(refused.message().contains("node 1 is a member already"), "{refused:?}");
    sim.submit(0, 4, join(2)).unwrap();
    sim.submit(1, 5, transfer(&app, 1, 2, 5)).unwrap();
    sim.run();
    assert_eq!(sim.take_replies().len(), 2);
    assert_eq!(sim.layout().absent(), &[3]);
    assert!(sim.layout().is_member(2));
    assert_eq!(sim.layout().version(), 1);
    let refused = sim.submit(2, 6, join(2)).unwrap_err();
    assert!(refused.message().contains("node 2 is a member already"), "{refused:?}");
    // The new node is handed two shards, one from each node.
    sim.submit(0, 7, hand(0, 2)).unwrap();
    sim.submit(3, 8, hand(3, 2)).unwrap();
    sim.submit(2, 9, transfer(&app, 3, 4, 7)).unwrap();
    sim.run();
    assert_eq!(sim.take_replies().len(), 3);
    assert_eq!(sim.layout().shards_of(2).collect::<Vec<_>>(), vec![0, 3]);
    assert_eq!(
        sim.handovers()
            .iter()
            .map(|s| (s.shard, s.from, s.to))
            .collect::<Vec<_>>(),
        vec![(styx_engine::layout::JOIN, 2, 2), (0, 0, 2), (3, 1, 2)]
    );
    assert_conserved(
        &sim.state(),
        ACCOUNTS,
        ACCOUNTS as i64 * START_BALANCE,
        "after the join",
    );
    let mut fresh = Sim::new(app.clone(), test_config(8), 4, 12);
    fresh.set_layout(start());
    for (op, k, v) in &initial {
        fresh.load(*op, k, Some(v.clone()));
    }
    fresh.replay(sim.logs());
    fresh.run();
    assert_eq!(fresh.state(), sim.state());
    assert_eq!(fresh.layout(), sim.layout());
}

/// A retry of a handover already made gets its first answer, though its
/// node drained and left since (a new handover to it is refused): the
/// check against the layout applies to new requests, after the client
/// table's, as exactly-once promises.
#[test]
fn a_retry_of_a_handover_made_gets_its_answer_after_its_node_left() {
    let app = bank(PARTITIONS);
    let mut sim = Sim::new(app.clone(), test_config(8), 4, 7);
    sim.set_layout(Layout::contiguous(&NODES));
    for (op, k, v) in &accounts(ACCOUNTS, START_BALANCE) {
        sim.load(*op, k, Some(v.clone()));
    }
    let fill = with_client(hand(1, 2), 3, 1);
    sim.submit(0, 1, fill.clone()).unwrap();
    sim.run();
    let first = sim.take_replies();
    assert_eq!(first.len(), 1);
    assert!(
        first[0].tid > 0 && matches!(first[0].outcome, styx_engine::Outcome::Committed(_)),
        "{:?}",
        first[0]
    );
    assert_eq!(sim.layout().shards_of(2).collect::<Vec<_>>(), vec![1]);
    // Node 2 drained and left.
    sim.submit(1, 2, with_client(hand(1, 0), 3, 2)).unwrap();
    sim.run();
    sim.submit(2, 3, with_client(styx_engine::Handover::leave(2).request(), 3, 3))
        .unwrap();
    sim.run();
    assert_eq!(sim.take_replies().len(), 2);
    assert_eq!(sim.layout().left(), &[2]);
    // The retry, through every shard (the client's home answers).
    for (token, shard) in (10..).zip(0..4) {
        sim.submit(shard, token, fill.clone()).unwrap();
        sim.run();
        let again = sim.take_replies();
        assert_eq!(again.len(), 1, "from shard {shard}");
        assert_eq!(
            (again[0].tid, &again[0].outcome),
            (first[0].tid, &first[0].outcome),
            "from shard {shard}"
        );
    }
    // A new one is refused, by the home shard or the one it reached.
    let mut refusals = Vec::new();
    for (token, shard) in (20..).zip(0..4) {
        match sim.submit(shard, token, with_client(hand(1, 2), 3, 4)) {
            Err(a) => refusals.push(a.message().to_string()),
            Ok(()) => {
                sim.run();
                let r = sim.take_replies();
                assert_eq!(r.len(), 1);
                assert_eq!(r[0].tid, 0, "a handover to a node that left ran");
                refusals.push(format!("{:?}", r[0].outcome));
            }
        }
    }
    assert!(
        refusals.iter().all(|m| m.contains("node 2 left the cluster")),
        "{refusals:?}"
    );
    assert_eq!(sim.layout().shards_of(2).count(), 0);
}

/// A shard handed over early in a long replay (hundreds of batches, most
/// nearly empty, still queued) crosses as bytes.
#[test]
fn a_hand_off_during_a_long_replay_decodes() {
    let app = bank(4);
    let config = test_config(1);
    let mut sim = Sim::new(app.clone(), config.clone(), 2, 3);
    sim.set_layout(Layout::contiguous(&[1, 1]));
    let initial = accounts(4, START_BALANCE);
    for (op, k, v) in &initial {
        sim.load(*op, k, Some(v.clone()));
    }
    sim.submit(0, 0, hand(1, 0)).unwrap();
    sim.run();
    for t in 1..300u64 {
        sim.submit(0, t, transfer(&app, 0, 2, 1)).unwrap();
        sim.run();
    }
    let mut fresh = Sim::new(app.clone(), config, 2, 4);
    fresh.set_layout(Layout::contiguous(&[1, 1]));
    for (op, k, v) in &initial {
        fresh.load(*op, k, Some(v.clone()));
    }
    fresh.replay(sim.logs());
    fresh.run();
    assert_eq!(fresh.handoffs(), 1);
    assert_eq!(fresh.state(), sim.state());
}

/// A hand-off whose waiting handover names a node this cluster lacks
/// decodes (the bytes are well formed) but is refused by `take_over`: it
/// would fail every shard once sequenced.
#[test]
fn a_hand_off_naming_another_clusters_node_is_refused() {
    use styx_engine::{Encode, Writer};
    let app = bank(4);
    let config = test_config(1);
    let mut sim = Sim::new(app.clone(), config.clone(), 2, 3);
    sim.set_layout(Layout::contiguous(&[1, 1, 0]));
    sim.set_auto_hand_over(false);
    for (op, k, v) in &accounts(4, START_BALANCE) {
        sim.load(*op, k, Some(v.clone()));
    }
    for t in 0..3 {
        let h = if t == 0 { hand(0, 2) } else { hand(1, 1) };
        sim.submit(0, t, h).unwrap();
    }
    while !sim.shard(0).is_departing() {
        assert!(sim.step());
    }
    assert!(sim.shard(0).pending() > 0);
    let mut bytes = sim.shard_mut(0).hand_off().encode();
    let enc = |r: Request| {
        let mut w = Writer::new();
        r.encode(&mut w);
        w.into_vec()
    };
    let (good, bad) = (enc(hand(1, 1)), enc(hand(1, 7)));
    let at = bytes
        .windows(good.len())
        .position(|w| w == good)
        .expect("the waiting handover");
    bytes[at..at + bad.len()].copy_from_slice(&bad);
    let h = Handoff::decode(&bytes, &app).expect("well-formed bytes decode");
    let e = Shard::take_over(app, config, h).err().expect("refused");
    assert!(e.to_string().contains("no node 7"), "{e}");
}

/// Messages of the next epoch that wait at a departing shard can exceed
/// a payload's limit together: the hand-off still encodes and decodes.
#[test]
fn large_early_messages_cross_with_the_hand_off() {
    use std::sync::Arc;
    use styx_engine::{Address, App, Key, Payload};
    let mut app = App::new("blobs");
    let blob = app.operator("blob", 6);
    app.function(blob, "put", |ctx, s: String| async move {
        ctx.put(&(s.len() as u64))?;
        Ok(())
    });
    let app = Arc::new(app);
    let f = app.resolve("blob", "put").unwrap();
    let keys: Vec<Key> = (0..1000u64)
        .map(Key::from)
        .filter(|k| Shard::owner(&app, 3, OpId(0), k) == 1)
        .take(8)
        .collect();
    for seed in 0..60u64 {
        let mut config = test_config(64);
        config.epoch_gather_us = 0;
        let mut sim = Sim::new(app.clone(), config, 3, seed);
        sim.set_layout(Layout::contiguous(&[1, 1, 1, 0]));
        sim.submit(0, 0, hand(1, 3)).unwrap();
        while sim.shard(0).epoch() < 1 {
            assert!(sim.step());
        }
        for (i, k) in keys.iter().enumerate() {
            let r = Request {
                function: f,
                address: Address::Entity(k.clone()),
                args: Payload::encode(&"x".repeat(300_000)),
                client: None,
            };
            sim.submit(0, 1 + i as u64, r).unwrap();
        }
        sim.run();
        assert_eq!(sim.take_replies().len(), 1 + keys.len(), "seed {seed}");
        assert_eq!(sim.handoffs(), 1, "seed {seed}");
    }
}

/// Entities loaded before a run.
type Initial = Vec<(OpId, styx_engine::Key, styx_engine::Value)>;
/// Handovers `(epoch, shard, node)`.
type Handed = Vec<(Epoch, ShardId, u16)>;

/// Loads 64 accounts into `sim`, moves partition 0 to shard 1, submits
/// `then` (moves and a handover that waits behind them) three epochs into
/// its copy, and runs transfers; returns the accounts loaded and the
/// handovers `(epoch, shard, node)`.
fn run_with_a_waiting_handover(sim: &mut Sim, app: &styx_engine::App, then: &[Request]) -> (Initial, Handed) {
    let initial = accounts(64, START_BALANCE);
    for (op, k, v) in &initial {
        sim.load(*op, k, Some(v.clone()));
    }
    sim.submit(0, 0, move_to(0, 1)).unwrap();
    while sim.shard(0).epoch() < 3 {
        assert!(sim.step());
    }
    for (token, r) in (1..).zip(then) {
        sim.submit(0, token, r.clone()).unwrap();
    }
    for t in 100..180u64 {
        sim.submit(0, t, transfer(app, t % 64, (t + 1) % 64, 1)).unwrap();
        sim.run();
    }
    let live = sim.handovers().iter().map(|s| (s.epoch, s.shard, s.to)).collect();
    (initial, live)
}

/// A handover waiting behind partition moves, with snapshots due at
/// almost every epoch (which hold queued moves live): replaying the log
/// decides it at the same epoch as the live run, because snapshot votes
/// read the epochs' logged times and replay counts the snapshots it does
/// not take, and a copy's shares (so its switch) follow the logged times
/// too (odd seeds: from 1 to 16 entities by the time since the last) at
/// the pace logged with the move — replayed here by a process configured
/// with the other pace and another snapshot interval (each shard logs the
/// interval it votes by: `styx_engine::interval`).
#[test]
fn replay_decides_a_waiting_handover_where_the_live_run_did() {
    for seed in 0..20 {
        let app = bank(8);
        let mut config = test_config(8);
        config.snapshot_interval_us = [1, 30, 200][seed as usize % 3];
        (
            config.move_share_entities,
            config.move_share_min_entities,
            config.move_share_per_ms,
        ) = if seed % 2 == 0 { (1, 1, 100) } else { (16, 1, 100) };
        config.epoch_gather_us = 0;
        let mut sim = Sim::new(app.clone(), config.clone(), 2, seed);
        sim.set_layout(Layout::contiguous(&[1, 1, 0]));
        let (initial, live) = run_with_a_waiting_handover(&mut sim, &app, &[move_to(2, 1), hand(0, 2)]);
        assert_eq!(live.len(), 1, "seed {seed}");
        // Replayed by a process configured with the other pace and another
        // snapshot interval: the moves' logged pace and the shards' logged
        // interval hold.
        let mut replaying = config;
        (
            replaying.move_share_entities,
            replaying.move_share_min_entities,
            replaying.move_share_per_ms,
        ) = if seed % 2 == 0 { (16, 1, 100) } else { (1, 1, 100) };
        // (Never due, or hardly ever: a due snapshot holds the second move
        // in the queue until the first one's copy switches.)
        replaying.snapshot_interval_us = [0, 1_000_000_000][seed as usize % 2];
        let mut fresh = Sim::new(app.clone(), replaying, 2, seed + 100);
        fresh.set_layout(Layout::contiguous(&[1, 1, 0]));
        for (op, k, v) in &initial {
            fresh.load(*op, k, Some(v.clone()));
        }
        fresh.replay(sim.logs());
        fresh.run();
        let replayed: Vec<_> = fresh.handovers().iter().map(|s| (s.epoch, s.shard, s.to)).collect();
        assert_eq!(fresh.state(), sim.state(), "seed {seed}");
        assert_eq!(live, replayed, "seed {seed}: the handover's epoch in replay");
    }
}

/// A snapshot holding queued moves carries their pace (and the interval
/// its shards voted by): a cluster recovered from it by processes
/// configured with another pace and another snapshot interval replays the
/// moves, and the handover waiting behind them, at the epochs the live run
/// did.
/// Each complete snapshot before the handover is tried as the one
/// recovered from (later manifests dropped, as if the crash came first).
#[test]
fn recovery_paces_a_snapshots_queued_moves_as_logged() {
    let nodes = [1u16, 1, 1];
    let (mut recoveries, mut with_queued) = (0, 0);
    for seed in 0..12u64 {
        let app = bank(8);
        let mut config = test_config(8);
        config.snapshot_interval_us = [1, 30][seed as usize % 2];
        config.epoch_gather_us = 0;
        (
            config.move_share_entities,
            config.move_share_min_entities,
            config.move_share_per_ms,
        ) = (1, 1, 100);
        let mut sim = Sim::new(app.clone(), config.clone(), 3, seed);
        sim.set_nodes(&nodes);
        let then = [move_to(3, 1), move_to(0, 2), hand(0, 1)];
        let (initial, live) = run_with_a_waiting_handover(&mut sim, &app, &then);
        assert_eq!(live.len(), 1, "seed {seed}");
        let events = sim.disk_events().to_vec();
        let chunks = sim.take_snapshots();
        let logs = sim.logs();
        let sealed = |shard: ShardId, epoch: Epoch| {
            logs.iter()
                .find(|b| (b.shard, b.epoch) == (shard, epoch))
                .expect("a sealed batch")
                .clone()
        };
        // Snapshots every node committed, before the handover.
        let mut manifested: BTreeMap<Epoch, usize> = BTreeMap::new();
        for e in &events {
            if let DiskEvent::NodeManifest { epoch, .. } = e {
                *manifested.entry(*epoch).or_default() += 1;
            }
        }
        let candidates = manifested
            .iter()
            .filter(|(e, n)| **n == nodes.len() && **e < live[0].0)
            .map(|(e, _)| *e);
        for snapshot in candidates {
            let kept: Vec<DiskEvent> = events
                .iter()
                .filter(|e| !matches!(e, DiskEvent::NodeManifest { epoch, .. } if *epoch > snapshot))
                .cloned()
                .collect();
            let mut disks = styx_engine::sim::Disks::new(&nodes, &initial);
            disks.absorb(&kept, &chunks, &sealed);
            let mut other = config.clone();
            (
                other.move_share_entities,
                other.move_share_min_entities,
                other.move_share_per_ms,
            ) = (64, 8, 1_000);
            other.snapshot_interval_us = [0, 1_000_000_000][seed as usize % 2];
            let mut rec = Sim::new(app.clone(), other, 3, seed + 1_000 * snapshot);
            rec.set_nodes(&nodes);
            let restart = disks.restart(&mut rec).expect("recovers");
            let at = format!("seed {seed}, from snapshot {snapshot}");
            assert_eq!(restart.snapshot(), snapshot, "{at}");
            for s in 0..3 {
                assert_eq!(
                    rec.shard(s).snapshot_interval_us(),
                    config.snapshot_interval_us,
                    "{at}: shard {s} restored another interval than it logged"
                );
            }
            recoveries += 1;
            with_queued += usize::from(!rec.shard(0).partition_map().queued().is_empty());
            rec.run();
            let replayed: Vec<_> = rec.handovers().iter().map(|s| (s.epoch, s.shard, s.to)).collect();
            assert_eq!(replayed, live, "{at}: the handover's epoch after recovery");
            assert_eq!(rec.state(), sim.state(), "{at}");
        }
    }
    assert!(
        with_queued > 0,
        "none of {recoveries} recoveries restored a snapshot with queued moves"
    );
}

/// A checkpoint at a handover (`Shard::checkpoint` of every shard stopped
/// there, `Handoff::checkpoint` of those that leave: the same) restores
/// each shard as it stopped: the same entities, epoch, layout and map,
/// and shards restored from them all go on exactly as the live ones do —
/// the runtime writes these files so that recovery never replays across a
/// handover.
#[test]
fn a_checkpoint_at_a_handover_restores_every_shard_as_it_stopped() {
    use styx_engine::recovery::{self, ShardStart};
    let app = bank(PARTITIONS);
    let sorted = |mut e: Vec<(OpId, styx_engine::Key, styx_engine::Value)>| {
        e.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        e
    };
    let run = |restore: bool| {
        let mut config = test_config(8);
        config.pause_at_handover = true;
        config.snapshot_interval_us = 400;
        let mut sim = Sim::new(app.clone(), config.clone(), 4, 21);
        sim.set_layout(Layout::contiguous(&NODES));
        sim.set_auto_hand_over(false);
        for (op, k, v) in &accounts(ACCOUNTS, START_BALANCE) {
            sim.load(*op, k, Some(v.clone()));
        }
        let mut rng = Rng::new(8);
        let mut submit = |sim: &mut Sim, from: u64, n: u64| {
            for token in from..from + n {
                let d = rng.below(ACCOUNTS);
                let t = transfer(&app, d, (d + 1 + rng.below(ACCOUNTS - 1)) % ACCOUNTS, 1);
                let t = if token % 3 == 0 {
                    with_client(t, token % 5, token)
                } else {
                    t
                };
                sim.submit((token % 4) as ShardId, token, t).unwrap();
            }
        };
        submit(&mut sim, 0, 80);
        sim.run();
        // Shard 1 goes to the spare, shard 2 to node 0.
        sim.submit(0, 500, hand(1, 2)).unwrap();
        sim.submit(3, 501, hand(2, 0)).unwrap();
        for _ in 0..20_000 {
            if (0..4).all(|s| sim.shard(s).is_departing()) {
                break;
            }
            sim.step();
        }
        assert!((0..4).all(|s| sim.shard(s).is_departing()), "every shard stopped");
        let epoch = sim.shard(0).epoch();
        let layout = sim.shard(0).layout().clone();
        assert_eq!((layout.node_of(1), layout.node_of(2)), (2, 0), "both handovers decided");
        for s in 0..4 {
            let live = sim.shard(s);
            let cp = live.checkpoint();
            assert_eq!((cp.shard, cp.epoch), (s, epoch));
            let mut entities = Vec::new();
            live.for_each_entity(|op, k, v| entities.push((op, k.clone(), v.clone())));
            assert_eq!(sorted(cp.entities.clone()), sorted(entities.clone()), "shard {s}");
            let mut restored = Shard::new(app.clone(), config.clone(), s, 4);
            let start = ShardStart {
                shard: s,
                snapshot: Some(epoch),
                relog: Vec::new(),
                replay: Vec::new(),
            };
            recovery::apply(start, &mut restored, |sink| {
                for (op, k, v) in cp.entities.clone() {
                    sink(op, k, v);
                }
                Ok::<_, String>(cp.meta.clone())
            })
            .unwrap();
            let mut back = Vec::new();
            restored.for_each_entity(|op, k, v| back.push((op, k.clone(), v.clone())));
            assert_eq!(sorted(back), sorted(entities), "shard {s} restored");
            assert_eq!(restored.epoch(), epoch);
            assert_eq!(restored.layout(), &layout, "shard {s}: the layout after the handover");
            assert_eq!(restored.partition_map(), live.partition_map());
            let moves = sim.node_of(s) != layout.node_of(s);
            if restore {
                let h = sim.shard_mut(s).hand_off();
                if moves {
                    let h = Handoff::decode(&h.encode(), &app).unwrap();
                    let from_handoff = h.checkpoint();
                    assert_eq!(from_handoff.meta, cp.meta, "shard {s}: the same machine state");
                    assert_eq!(sorted(from_handoff.entities), sorted(cp.entities.clone()));
                }
                sim.replace_shard(restored);
            } else if moves {
                let h = sim.shard_mut(s).hand_off();
                let h = Handoff::decode(&h.encode(), &app).unwrap();
                sim.replace_shard(Shard::take_over(app.clone(), config.clone(), h).unwrap());
            } else {
                sim.stay_in_place(s);
            }
        }
        sim.take_replies();
        submit(&mut sim, 1_000, 120);
        sim.run();
        let mut replies: Vec<_> = sim
            .take_replies()
            .into_iter()
            .filter(|r| r.token >= 1_000)
            .map(|r| (r.token, r.outcome))
            .collect();
        replies.sort_by_key(|r| r.0);
        assert_eq!(replies.len(), 120, "every request after the handover answered");
        assert_conserved(
            &sim.state(),
            ACCOUNTS,
            ACCOUNTS as i64 * START_BALANCE,
            "restore {restore}",
        );
        (sim.state(), replies, sim.layout().clone())
    };
    let (state, replies, layout) = run(false);
    let (restored_state, restored_replies, restored_layout) = run(true);
    assert_eq!(restored_layout, layout);
    assert_eq!(
        restored_state, state,
        "the same state after shards restored from checkpoints"
    );
    assert_eq!(restored_replies, replies, "the same replies");
}
