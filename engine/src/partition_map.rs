//! Where partitions live: each operator's partition → shard, versioned.
//!
//! The map starts as the default rule (partition `p` on shard `p % shards`,
//! [`partition_owner`]) and changes only by moves, which enter like
//! requests: a move is sequenced into an epoch's batch (so it is in the
//! log), its coordinator announces it in `Done1`, and every shard applies
//! the epoch's moves in tid order at that epoch's end. So every shard holds
//! the same map at every epoch, live, in replay and after recovery; the
//! version counts the epochs that changed it.
//!
//! A snapshot carries the map as the partitions that differ from the
//! default rule (empty for a map never changed), so a restored shard knows
//! the map of the snapshot's epoch and replays later moves from the log.

use crate::app::App;
use crate::codec::Payload;
use crate::config::Request;
use crate::ids::{Address, FnId, OpId, SHARDS_MAX, ShardId, Tid, partition_owner};

/// The function index of a move request: no operator registers a function
/// with this index (functions per operator are far fewer), so a move
/// travels and is logged as a request without a new record kind.
pub const MOVE_FUNCTION_INDEX: u16 = u16::MAX;

const _: () = assert!(crate::app::FUNCTIONS_PER_OPERATOR_MAX < MOVE_FUNCTION_INDEX as usize);

/// The name a client calls a move by, on any operator, with a partition
/// target and the target shard (`u16`) as its argument (`styx rebalance`).
/// Names starting with `__` are reserved, so no function has it.
pub const MOVE_FUNCTION: &str = "__move";

/// A move: partition `partition` of operator `op` goes to shard `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Move {
    pub op: OpId,
    pub partition: u32,
    pub to: ShardId,
}

impl Move {
    /// The request that asks for this move. It is sequenced, logged and
    /// answered like a transaction (with `()` once its epoch is durable,
    /// exactly once when it carries a client seq); the switch happens at the
    /// end of the epoch it is sequenced in.
    pub fn request(self) -> Request {
        Request {
            function: FnId {
                op: self.op,
                index: MOVE_FUNCTION_INDEX,
            },
            address: Address::Partition(self.partition),
            args: Payload::encode(&self.to),
            client: None,
        }
    }

    /// The move a request asks for, if it is a move request (not checked
    /// against any application or shard count: see [`Move::check`]).
    pub fn of(request: &Request) -> Option<Result<Move, String>> {
        if request.function.index != MOVE_FUNCTION_INDEX {
            return None;
        }
        let op = request.function.op;
        Some(match (&request.address, request.args.decode::<ShardId>()) {
            (Address::Partition(partition), Ok(to)) => Ok(Move {
                op,
                partition: *partition,
                to,
            }),
            (Address::Entity(_), _) => Err("a move names a partition, not an entity".to_string()),
            (_, Err(e)) => Err(format!("a move's argument is the target shard (u16): {e}")),
        })
    }

    /// Checks the move against the application and the shard count.
    pub fn check(self, app: &App, n_shards: u16) -> Result<Move, String> {
        if self.op.0 as usize >= app.operator_count() {
            return Err(format!("no operator {}", self.op.0));
        }
        let op = app.operator_info(self.op);
        if self.partition >= op.partitions() {
            return Err(format!(
                "{} has {} partitions, not {}",
                op.name(),
                op.partitions(),
                self.partition + 1
            ));
        }
        if self.to >= n_shards {
            return Err(format!("no shard {} (there are {n_shards})", self.to));
        }
        Ok(self)
    }
}

/// Each operator's partition → shard, and how many epochs changed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionMap {
    n_shards: u16,
    version: u64,
    owners: Vec<Vec<ShardId>>,
}

impl PartitionMap {
    /// The default rule: partition `p` on shard `p % n_shards`, version 0.
    pub fn new(app: &App, n_shards: u16) -> PartitionMap {
        assert!(n_shards >= 1 && n_shards as usize <= SHARDS_MAX, "{n_shards} shards");
        let owners = app
            .operators()
            .map(|(_, op)| (0..op.partitions()).map(|p| partition_owner(p, n_shards)).collect())
            .collect();
        PartitionMap {
            n_shards,
            version: 0,
            owners,
        }
    }

    /// The shard that owns partition `partition` of `op`.
    #[inline]
    pub fn owner(&self, op: OpId, partition: u32) -> ShardId {
        self.owners[op.0 as usize][partition as usize]
    }

    /// How many epochs changed the map.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The partitions of `op` that `shard` owns.
    pub fn owned(&self, op: OpId, shard: ShardId) -> impl Iterator<Item = u32> + '_ {
        self.owners[op.0 as usize]
            .iter()
            .enumerate()
            .filter(move |(_, s)| **s == shard)
            .map(|(p, _)| p as u32)
    }

    /// Applies one epoch's moves, in tid order (a partition moved twice in
    /// an epoch ends where the last move sends it), and returns the
    /// transfers: `(op, partition, from, to)` for every partition whose
    /// owner changed, sorted. Moves must have passed [`Move::check`].
    pub fn apply(&mut self, moves: &mut [(Tid, Move)]) -> Vec<(OpId, u32, ShardId, ShardId)> {
        moves.sort_unstable();
        // Where each moved partition's entities are: its owner before the
        // epoch's moves.
        let mut transfers: Vec<(OpId, u32, ShardId)> = moves
            .iter()
            .map(|(_, m)| (m.op, m.partition, self.owner(m.op, m.partition)))
            .collect();
        for (_, m) in moves.iter() {
            assert!(m.to < self.n_shards, "move to shard {} of {}", m.to, self.n_shards);
            self.owners[m.op.0 as usize][m.partition as usize] = m.to;
        }
        if !moves.is_empty() {
            self.version += 1;
        }
        // A partition moved away and back within the epoch did not move.
        transfers.sort_unstable();
        transfers.dedup();
        transfers
            .into_iter()
            .map(|(op, p, from)| (op, p, from, self.owner(op, p)))
            .filter(|(_, _, from, to)| from != to)
            .collect()
    }

    /// What a snapshot keeps: the version and the partitions off the
    /// default rule, `(op, partition, shard)`.
    pub(crate) fn to_meta(&self) -> (u64, Vec<(u16, u32, u16)>) {
        let mut moved = Vec::new();
        for (op, owners) in self.owners.iter().enumerate() {
            for (p, s) in owners.iter().enumerate() {
                if *s != partition_owner(p as u32, self.n_shards) {
                    moved.push((op as u16, p as u32, *s));
                }
            }
        }
        (self.version, moved)
    }

    /// The map a snapshot kept (see [`PartitionMap::to_meta`]); an error
    /// names an entry outside the application or the shards.
    pub(crate) fn from_meta(
        app: &App,
        n_shards: u16,
        version: u64,
        moved: &[(u16, u32, u16)],
    ) -> Result<PartitionMap, String> {
        let mut map = PartitionMap::new(app, n_shards);
        map.version = version;
        for &(op, partition, to) in moved {
            let m = Move {
                op: OpId(op),
                partition,
                to,
            }
            .check(app, n_shards)?;
            map.owners[op as usize][partition as usize] = m.to;
        }
        Ok(map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app() -> App {
        let mut app = App::new("t");
        app.operator("a", 8);
        app.operator("b", 3);
        app
    }

    #[test]
    fn default_is_the_modulo_rule() {
        let map = PartitionMap::new(&app(), 3);
        assert_eq!(map.owner(OpId(0), 7), 1);
        assert_eq!(map.owner(OpId(1), 2), 2);
        assert_eq!(map.to_meta(), (0, vec![]));
    }

    #[test]
    fn apply_reports_net_transfers_in_order() {
        let app = app();
        let mut map = PartitionMap::new(&app, 3);
        let mv = |op, partition, to| Move {
            op: OpId(op),
            partition,
            to,
        };
        // Partition 0 of `a` goes 0 → 2 → 1; partition 1 goes away and back.
        let mut moves = vec![(9, mv(0, 0, 1)), (5, mv(0, 0, 2)), (6, mv(0, 1, 0)), (7, mv(0, 1, 1))];
        let transfers = map.apply(&mut moves);
        assert_eq!(transfers, vec![(OpId(0), 0, 0, 1)]);
        assert_eq!(map.version(), 1);
        let (version, moved) = map.to_meta();
        assert_eq!(PartitionMap::from_meta(&app, 3, version, &moved).unwrap(), map);
        assert!(PartitionMap::from_meta(&app, 3, 1, &[(0, 0, 3)]).is_err());
    }

    #[test]
    fn bad_moves_are_refused() {
        let app = app();
        let mv = |op, partition, to| Move {
            op: OpId(op),
            partition,
            to,
        };
        assert!(mv(0, 7, 2).check(&app, 3).is_ok());
        assert!(mv(2, 0, 0).check(&app, 3).unwrap_err().contains("no operator 2"));
        assert!(mv(1, 3, 0).check(&app, 3).unwrap_err().contains("3 partitions"));
        assert!(mv(0, 0, 3).check(&app, 3).unwrap_err().contains("no shard 3"));
        let r = mv(0, 1, 2).request();
        assert_eq!(Move::of(&r), Some(Ok(mv(0, 1, 2))));
    }
}
