//! Picks partition moves that even out load across shards: a pure
//! function of each partition's owner and load (say, the invocations
//! `Shard::partition_invocations` counted), so it is tested without any
//! engine and any client can run it on counts it gathered.
//!
//! Greedy: while the busiest shard carries more than the mean by the
//! tolerance, move one of its partitions to the least busy shard — the one
//! whose load is closest to half their difference, among those lighter
//! than the difference (so the busiest shard gets lighter and the other
//! does not become heavier than it was). Each such move lowers the sum of
//! the squared shard loads, so the loop ends; a partition moves at most
//! once per plan, and `moves_max` bounds the plan. Ties go to the lowest
//! shard and partition ids, so equal input gives an equal plan.

use crate::ids::{OpId, ShardId};
use crate::partition_map::Move;

/// One partition's owner and load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Load {
    pub partition: u32,
    pub owner: ShardId,
    pub load: u64,
}

/// The moves of `op`'s partitions that bring the busiest of `shards`
/// within `tolerance` (a share, e.g. 0.05) of the mean load, at most
/// `moves_max` of them, in the order picked. `loads` holds every partition
/// once.
pub fn plan(op: OpId, loads: &[Load], shards: u16, tolerance: f64, moves_max: usize) -> Vec<Move> {
    assert!(shards >= 1, "no shard");
    assert!(tolerance >= 0.0, "tolerance {tolerance}");
    let mut owners: Vec<Load> = loads.to_vec();
    owners.sort_by_key(|l| l.partition);
    assert!(
        owners.windows(2).all(|w| w[0].partition < w[1].partition),
        "a partition listed twice"
    );
    let mut on = vec![0u64; usize::from(shards)];
    for l in &owners {
        assert!(
            l.owner < shards,
            "partition {} on shard {} of {shards}",
            l.partition,
            l.owner
        );
        on[usize::from(l.owner)] += l.load;
    }
    let total: u64 = on.iter().sum();
    let mean = total as f64 / f64::from(shards);
    let mut moved = vec![false; owners.len()];
    let mut moves = Vec::new();
    while moves.len() < moves_max {
        // Lowest id first among equals: `max_by_key` keeps the last.
        let busiest = (0..on.len()).rev().max_by_key(|&s| on[s]).expect("a shard");
        let idlest = (0..on.len()).min_by_key(|&s| on[s]).expect("a shard");
        if on[busiest] as f64 <= mean * (1.0 + tolerance) {
            break;
        }
        let gap = on[busiest] - on[idlest];
        let pick = owners
            .iter()
            .enumerate()
            .filter(|(i, l)| !moved[*i] && usize::from(l.owner) == busiest && l.load > 0 && l.load < gap)
            .min_by_key(|(_, l)| ((2 * l.load).abs_diff(gap), std::cmp::Reverse(l.load), l.partition));
        let Some((i, l)) = pick else { break };
        let to = idlest as ShardId;
        on[busiest] -= l.load;
        on[idlest] += l.load;
        moves.push(Move {
            op,
            partition: l.partition,
            to,
            share: None,
        });
        moved[i] = true;
        owners[i].owner = to;
    }
    moves
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loads(of: &[(ShardId, u64)]) -> Vec<Load> {
        of.iter()
            .enumerate()
            .map(|(p, &(owner, load))| Load {
                partition: p as u32,
                owner,
                load,
            })
            .collect()
    }

    fn after(loads: &[Load], moves: &[Move], shards: u16) -> Vec<u64> {
        let mut on = vec![0; usize::from(shards)];
        for l in loads {
            let owner = moves
                .iter()
                .rev()
                .find(|m| m.partition == l.partition)
                .map_or(l.owner, |m| m.to);
            on[usize::from(owner)] += l.load;
        }
        on
    }

    #[test]
    fn a_balanced_load_moves_nothing() {
        let l = loads(&[(0, 10), (1, 10), (0, 5), (1, 5)]);
        assert!(plan(OpId(0), &l, 2, 0.05, 10).is_empty());
        // One shard's worth of nothing: no load at all.
        assert!(plan(OpId(0), &loads(&[(0, 0), (1, 0)]), 2, 0.0, 10).is_empty());
    }

    #[test]
    fn hot_partitions_leave_the_busy_shard_until_balanced() {
        // Shard 0 carries 100 + 50 + 30 + 20 = 200, shard 1 carries 40.
        let l = loads(&[(0, 100), (1, 10), (0, 50), (1, 10), (0, 30), (1, 20), (0, 20)]);
        let moves = plan(OpId(3), &l, 2, 0.2, 10);
        // The gap is 160: the partition closest to 80 is the one of 100.
        assert_eq!(
            moves,
            vec![Move {
                op: OpId(3),
                partition: 0,
                to: 1,
                share: None,
            }]
        );
        assert_eq!(after(&l, &moves, 2), vec![100, 140]);
        // 140 is within 20% of the mean (120), not within 5%: then it goes
        // on, 140 against 100, gap 40, and the partition of 20 on shard 1
        // comes over.
        let moves = plan(OpId(3), &l, 2, 0.05, 10);
        assert_eq!(moves.len(), 2);
        assert_eq!(after(&l, &moves, 2), vec![120, 120]);
    }

    #[test]
    fn a_partition_too_hot_to_help_stays() {
        // One partition holds all the load: moving it only moves the problem.
        let l = loads(&[(0, 1_000), (1, 1), (0, 0)]);
        assert!(plan(OpId(0), &l, 2, 0.05, 10).is_empty());
    }

    #[test]
    fn three_shards_even_out_and_the_plan_is_bounded() {
        let l: Vec<Load> = (0..30)
            .map(|p| Load {
                partition: p,
                owner: 0,
                load: 10 + u64::from(p),
            })
            .collect();
        let moves = plan(OpId(0), &l, 3, 0.05, 64);
        let on = after(&l, &moves, 3);
        let mean = on.iter().sum::<u64>() as f64 / 3.0;
        assert!(on.iter().all(|&x| (x as f64) <= mean * 1.05), "{on:?}");
        assert!(moves.iter().all(|m| m.to != 0), "{moves:?}");
        let mut partitions: Vec<u32> = moves.iter().map(|m| m.partition).collect();
        partitions.sort_unstable();
        partitions.dedup();
        assert_eq!(partitions.len(), moves.len(), "a partition moved twice");
        assert_eq!(plan(OpId(0), &l, 3, 0.05, 2).len(), 2);
        // Same input, same plan, whatever the order of the list.
        let mut reversed = l.clone();
        reversed.reverse();
        assert_eq!(plan(OpId(0), &reversed, 3, 0.05, 64), moves);
    }
}
