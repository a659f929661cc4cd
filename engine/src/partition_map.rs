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
//! A move does not switch at once: its partition is copied to the new
//! owner in the background over the following epochs while the old owner
//! keeps serving it (see `shard::moves`), and the map switches at the end
//! of the epoch in which the old owner announces, in its `Done1`, that the
//! copy is sent. The map therefore also holds the moves under way (one per
//! partition) and the moves queued behind them (a partition moved again
//! before its switch moves again after it, in the order decided). All of it
//! is a function of the log, so every shard holds the same.
//!
//! A snapshot carries the map as the partitions that differ from the
//! default rule (empty for a map never changed), so a restored shard knows
//! the map of the snapshot's epoch and replays later moves from the log.
//! No snapshot is taken while a move is under way, so it never needs them.

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

/// How fast a move goes: at each epoch end its old owner copies (and,
/// once it switched, deletes) `per_ms` of the partition's entities for
/// each millisecond of logged time since its last share, at least `least`
/// and at most `most` ([`MoveShare::entities`]). It is part of the logged
/// move — a request naming none gets its coordinator's settings
/// ([`Config::move_share`](crate::Config::move_share)) written into it
/// before it is sequenced — so replay and recovery pace a move, and so
/// switch it, at the epoch the live run did, whatever the recovering
/// process is configured with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MoveShare {
    pub most: u32,
    pub least: u32,
    pub per_ms: u32,
}

impl MoveShare {
    /// A share that moves at least one entity and no more than it may.
    pub fn check(self) -> Result<MoveShare, String> {
        if self.most == 0 || self.least == 0 {
            return Err(format!(
                "a move's share of 0 entities (least {}, most {}) never ends",
                self.least, self.most
            ));
        }
        if self.least > self.most {
            return Err(format!(
                "a move's least share ({}) is above its most ({})",
                self.least, self.most
            ));
        }
        Ok(self)
    }

    /// The entities of one epoch end's share, `elapsed_us` of logged time
    /// after the last (clamped as [`MoveShare::check`] would require, so
    /// even an unchecked share moves).
    pub fn entities(self, elapsed_us: u64) -> usize {
        let most = self.most.max(1) as u128;
        let least = (self.least as u128).clamp(1, most);
        (elapsed_us as u128 * self.per_ms as u128 / 1_000).clamp(least, most) as usize
    }

    pub(crate) fn to_tuple(self) -> (u32, u32, u32) {
        (self.most, self.least, self.per_ms)
    }

    pub(crate) fn of_tuple((most, least, per_ms): (u32, u32, u32)) -> MoveShare {
        MoveShare { most, least, per_ms }
    }
}

/// A move: partition `partition` of operator `op` goes to shard `to`, at
/// the pace `share` (`None` only in a log written before moves carried
/// one: the deciding shard's configuration then).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Move {
    pub op: OpId,
    pub partition: u32,
    pub to: ShardId,
    pub share: Option<MoveShare>,
}

impl Move {
    /// The request that asks for this move. It is sequenced, logged and
    /// answered like a transaction (with `()` once its epoch is durable,
    /// exactly once when it carries a client seq). The copy starts at the
    /// end of the epoch it is sequenced in, and the partition switches a
    /// few epochs later, once copied (see `shard::moves`): the answer says
    /// the move is decided and durable, not yet switched.
    ///
    /// Its argument is the target shard (`u16`), followed by the share
    /// (`u32` most, least, per millisecond) when the move names one.
    pub fn request(self) -> Request {
        Request {
            function: FnId {
                op: self.op,
                index: MOVE_FUNCTION_INDEX,
            },
            address: Address::Partition(self.partition),
            args: Move::args(self.to, self.share),
            client: None,
        }
    }

    /// The argument of a move request to shard `to` at the pace `share`
    /// (`None`: the pace of the shard it is submitted to).
    pub fn args(to: ShardId, share: Option<MoveShare>) -> Payload {
        match share {
            Some(share) => Payload::encode(&(to, share.to_tuple())),
            None => Payload::encode(&to),
        }
    }

    /// The request of a move that names no share, with `share` written in
    /// (what its coordinator does before sequencing it); any other request
    /// as it was.
    pub fn with_default_share(mut request: Request, share: MoveShare) -> Request {
        if let Some(Ok(m)) = Move::of(&request)
            && m.share.is_none()
        {
            request.args = Move::args(m.to, Some(share));
        }
        request
    }

    /// The move a request asks for, if it is a move request (not checked
    /// against any application or shard count: see [`Move::check`]).
    pub fn of(request: &Request) -> Option<Result<Move, String>> {
        if request.function.index != MOVE_FUNCTION_INDEX {
            return None;
        }
        let op = request.function.op;
        // The target alone (2 bytes), or with the share after it.
        let args = if request.args.as_bytes().len() == 2 {
            request.args.decode::<ShardId>().map(|to| (to, None))
        } else {
            request
                .args
                .decode::<(ShardId, (u32, u32, u32))>()
                .map(|(to, share)| (to, Some(MoveShare::of_tuple(share))))
        };
        Some(match (&request.address, args) {
            (Address::Partition(partition), Ok((to, share))) => Ok(Move {
                op,
                partition: *partition,
                to,
                share,
            }),
            (Address::Entity(_), _) => Err("a move names a partition, not an entity".to_string()),
            (_, Err(e)) => Err(format!(
                "a move's argument is the target shard (u16), optionally followed by its share \
                 (u32 most, least, per ms): {e}"
            )),
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
        if let Some(share) = self.share {
            share.check()?;
        }
        Ok(self)
    }
}

/// A map as a snapshot keeps it: version, partitions off the default rule
/// `(op, partition, shard)`, queued moves `(tid, op, partition, shard,
/// share)`.
pub(crate) type MapMeta = (
    u64,
    Vec<(u16, u32, u16)>,
    Vec<(Tid, u16, u32, u16, Option<(u32, u32, u32)>)>,
);

/// A map as snapshots kept it before moves carried their share.
pub(crate) type MapMetaNoShare = (u64, Vec<(u16, u32, u16)>, Vec<(Tid, u16, u32, u16)>);

/// The map of a snapshot written before moves carried their share: its
/// queued moves take the deciding shard's configuration.
pub(crate) fn meta_of_no_share((version, moved, queued): MapMetaNoShare) -> MapMeta {
    let queued = queued
        .into_iter()
        .map(|(tid, op, partition, to)| (tid, op, partition, to, None))
        .collect();
    (version, moved, queued)
}

/// A move under way: partition `partition` of `op` is being copied from
/// `from`, which still owns it, to `to`, since the end of epoch `since`,
/// at the pace `share` (see [`Move`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Moving {
    pub tid: Tid,
    pub op: OpId,
    pub partition: u32,
    pub from: ShardId,
    pub to: ShardId,
    pub since: crate::ids::Epoch,
    pub share: Option<MoveShare>,
}

/// Each operator's partition → shard, how many moves changed it, and the
/// moves under way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionMap {
    n_shards: u16,
    version: u64,
    owners: Vec<Vec<ShardId>>,
    /// Moves being copied, in the order they started.
    moving: Vec<Moving>,
    /// Moves decided while their partition was moving, in decided order.
    queued: Vec<(Tid, Move)>,
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
            moving: Vec::new(),
            queued: Vec::new(),
        }
    }

    /// The shard that owns partition `partition` of `op`.
    #[inline]
    pub fn owner(&self, op: OpId, partition: u32) -> ShardId {
        self.owners[op.0 as usize][partition as usize]
    }

    /// How many moves changed the map (a move to the partition's owner
    /// changes nothing).
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The moves under way, in the order they started.
    pub fn moving(&self) -> &[Moving] {
        &self.moving
    }

    /// Whether a move is under way or queued.
    pub fn is_moving(&self) -> bool {
        !self.moving.is_empty() || !self.queued.is_empty()
    }

    /// Whether a move is being copied (a snapshot must wait: the copy is
    /// only in memory). Queued moves do not count: a snapshot keeps them.
    pub fn is_copying(&self) -> bool {
        !self.moving.is_empty()
    }

    /// The moves decided but not started, in decided order.
    pub fn queued(&self) -> &[(Tid, Move)] {
        &self.queued
    }

    /// At the end of `epoch`, before its switches: queues the epoch's moves
    /// (in tid order, behind those already queued) and, unless `hold`,
    /// starts every queued move whose partition is not moving, in queue
    /// order; a move to the partition's owner is dropped. Returns the moves
    /// started. Moves must have passed [`Move::check`]. (`hold`: a snapshot
    /// is due, and waits for the copies under way; starting more would
    /// starve it.)
    pub fn decide(&mut self, epoch: crate::ids::Epoch, moves: &mut [(Tid, Move)], hold: bool) -> Vec<Moving> {
        moves.sort_unstable();
        self.queued.extend_from_slice(moves);
        let mut started = Vec::new();
        if hold {
            return started;
        }
        let mut i = 0;
        while i < self.queued.len() {
            let (tid, m) = self.queued[i];
            assert!(m.to < self.n_shards, "move to shard {} of {}", m.to, self.n_shards);
            if self.moving.iter().any(|g| (g.op, g.partition) == (m.op, m.partition)) {
                i += 1;
                continue;
            }
            self.queued.remove(i);
            let from = self.owner(m.op, m.partition);
            if from == m.to {
                continue;
            }
            let g = Moving {
                tid,
                op: m.op,
                partition: m.partition,
                from,
                to: m.to,
                since: epoch,
                share: m.share,
            };
            self.moving.push(g);
            started.push(g);
        }
        started
    }

    /// Switches the moves of `partitions` (their old owners announced the
    /// copy complete): each partition's owner becomes its move's target.
    /// Returns those moves, in `(op, partition)` order.
    pub fn switch(&mut self, partitions: &mut [(OpId, u32)]) -> Vec<Moving> {
        partitions.sort_unstable();
        let mut switched = Vec::new();
        for &(op, partition) in partitions.iter() {
            let at = self
                .moving
                .iter()
                .position(|g| (g.op, g.partition) == (op, partition))
                .unwrap_or_else(|| panic!("switch of partition {partition} of operator {}, not moving", op.0));
            let g = self.moving.remove(at);
            self.owners[op.0 as usize][partition as usize] = g.to;
            self.version += 1;
            switched.push(g);
        }
        switched
    }

    /// The partitions of `op` that `shard` owns.
    pub fn owned(&self, op: OpId, shard: ShardId) -> impl Iterator<Item = u32> + '_ {
        self.owners[op.0 as usize]
            .iter()
            .enumerate()
            .filter(move |(_, s)| **s == shard)
            .map(|(p, _)| p as u32)
    }

    /// Applies one epoch's moves at once, in tid order, as if each had
    /// been copied and switched before the next began: the map the engine
    /// holds once every move of the log has switched (a partition moved
    /// twice ends where the last move sends it). For checks against a log.
    pub fn apply(&mut self, moves: &mut [(Tid, Move)]) {
        moves.sort_unstable();
        for (_, m) in moves.iter() {
            assert!(m.to < self.n_shards, "move to shard {} of {}", m.to, self.n_shards);
            let owner = &mut self.owners[m.op.0 as usize][m.partition as usize];
            if *owner != m.to {
                *owner = m.to;
                self.version += 1;
            }
        }
    }

    /// The map once every queued move has been copied and switched, one
    /// after the other (none may be copying): what [`PartitionMap::apply`]
    /// of the log's moves makes. For checks against a log.
    pub fn settled(&self) -> PartitionMap {
        assert!(!self.is_copying(), "settled while partitions are copied");
        let mut map = self.clone();
        let mut queued = std::mem::take(&mut map.queued);
        map.apply(&mut queued);
        map
    }

    /// What a snapshot keeps: the version, the partitions off the default
    /// rule, `(op, partition, shard)`, and the queued moves, `(tid, op,
    /// partition, shard, share)`.
    pub(crate) fn to_meta(&self) -> MapMeta {
        assert!(!self.is_copying(), "a snapshot while partitions are copied");
        let mut moved = Vec::new();
        for (op, owners) in self.owners.iter().enumerate() {
            for (p, s) in owners.iter().enumerate() {
                if *s != partition_owner(p as u32, self.n_shards) {
                    moved.push((op as u16, p as u32, *s));
                }
            }
        }
        let queued = self
            .queued
            .iter()
            .map(|(tid, m)| (*tid, m.op.0, m.partition, m.to, m.share.map(MoveShare::to_tuple)))
            .collect();
        (self.version, moved, queued)
    }

    /// The map a snapshot kept (see [`PartitionMap::to_meta`]); an error
    /// names an entry outside the application or the shards.
    pub(crate) fn from_meta(app: &App, n_shards: u16, meta: &MapMeta) -> Result<PartitionMap, String> {
        let (version, moved, queued) = meta;
        let mut map = PartitionMap::new(app, n_shards);
        map.version = *version;
        for &(op, partition, to) in moved {
            let m = Move {
                op: OpId(op),
                partition,
                to,
                share: None,
            }
            .check(app, n_shards)?;
            map.owners[op as usize][partition as usize] = m.to;
        }
        for &(tid, op, partition, to, share) in queued {
            let m = Move {
                op: OpId(op),
                partition,
                to,
                share: share.map(MoveShare::of_tuple),
            }
            .check(app, n_shards)?;
            map.queued.push((tid, m));
        }
        Ok(map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mv(op: u16, partition: u32, to: ShardId) -> Move {
        Move {
            op: OpId(op),
            partition,
            to,
            share: None,
        }
    }

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
        assert_eq!(map.to_meta(), (0, vec![], vec![]));
    }

    #[test]
    fn apply_reports_net_transfers_in_order() {
        let app = app();
        let mut map = PartitionMap::new(&app, 3);
        // Partition 0 of `a` goes 0 → 2 → 1; partition 1 goes away and back
        // (two moves, each counted).
        let mut moves = vec![(9, mv(0, 0, 1)), (5, mv(0, 0, 2)), (6, mv(0, 1, 0)), (7, mv(0, 1, 1))];
        let mut engine = map.clone();
        map.apply(&mut moves);
        assert_eq!((map.owner(OpId(0), 0), map.owner(OpId(0), 1)), (1, 1));
        assert_eq!(map.version(), 4);
        // The engine copies the first move of each partition, queues the
        // second behind it, and reaches the same map once all switched.
        let started = engine.decide(4, &mut moves, false);
        assert_eq!(
            started
                .iter()
                .map(|g| (g.tid, g.partition, g.from, g.to))
                .collect::<Vec<_>>(),
            vec![(5, 0, 0, 2), (6, 1, 1, 0)]
        );
        assert_eq!(engine.owner(OpId(0), 0), 0, "no switch before the copy");
        let switched = engine.switch(&mut [(OpId(0), 1), (OpId(0), 0)]);
        assert_eq!(switched.iter().map(|g| g.partition).collect::<Vec<_>>(), vec![0, 1]);
        let started = engine.decide(7, &mut [], false);
        assert_eq!(
            started
                .iter()
                .map(|g| (g.tid, g.partition, g.from, g.to, g.since))
                .collect::<Vec<_>>(),
            vec![(7, 1, 0, 1, 7), (9, 0, 2, 1, 7)]
        );
        engine.switch(&mut [(OpId(0), 0), (OpId(0), 1)]);
        assert!(!engine.is_moving());
        assert_eq!(engine, map);
        let meta = map.to_meta();
        assert_eq!(PartitionMap::from_meta(&app, 3, &meta).unwrap(), map);
        assert!(PartitionMap::from_meta(&app, 3, &(1, vec![(0, 0, 3)], vec![])).is_err());
        assert!(PartitionMap::from_meta(&app, 3, &(1, vec![], vec![(4, 0, 9, 1, None)])).is_err());
    }

    /// A due snapshot holds new moves: they queue, the copies under way
    /// finish, the snapshot keeps the queue, and the moves start after it
    /// (from a restored map as from the live one).
    #[test]
    fn a_due_snapshot_holds_new_moves_in_the_queue() {
        let app = app();
        let mut map = PartitionMap::new(&app, 3);
        assert_eq!(map.decide(1, &mut [(1, mv(0, 0, 1))], false).len(), 1);
        // Due: the new move waits, the copy goes on and switches.
        assert!(map.decide(2, &mut [(2, mv(1, 2, 0))], true).is_empty());
        map.switch(&mut [(OpId(0), 0)]);
        assert!(map.is_moving() && !map.is_copying());
        assert_eq!(map.queued(), &[(2, mv(1, 2, 0))]);
        let meta = map.to_meta();
        assert_eq!(meta, (1, vec![(0, 0, 1)], vec![(2, 1, 2, 0, None)]));
        let mut restored = PartitionMap::from_meta(&app, 3, &meta).unwrap();
        assert_eq!(restored, map);
        // Settled, the queue is applied: what the log's moves make.
        let mut log = PartitionMap::new(&app, 3);
        log.apply(&mut [(1, mv(0, 0, 1)), (2, mv(1, 2, 0))]);
        assert_eq!(restored.settled(), log);
        for m in [&mut map, &mut restored] {
            let started = m.decide(3, &mut [], false);
            assert_eq!(
                started.iter().map(|g| (g.tid, g.op, g.from, g.to)).collect::<Vec<_>>(),
                vec![(2, OpId(1), 2, 0)]
            );
        }
        assert_eq!(map, restored);
    }

    #[test]
    fn bad_moves_are_refused() {
        let app = app();
        assert!(mv(0, 7, 2).check(&app, 3).is_ok());
        assert!(mv(2, 0, 0).check(&app, 3).unwrap_err().contains("no operator 2"));
        assert!(mv(1, 3, 0).check(&app, 3).unwrap_err().contains("3 partitions"));
        assert!(mv(0, 0, 3).check(&app, 3).unwrap_err().contains("no shard 3"));
        let r = mv(0, 1, 2).request();
        assert_eq!(Move::of(&r), Some(Ok(mv(0, 1, 2))));
        let paced = |most, least| Move {
            share: Some(MoveShare { most, least, per_ms: 5 }),
            ..mv(0, 7, 2)
        };
        assert!(paced(0, 0).check(&app, 3).unwrap_err().contains("never ends"));
        assert!(paced(4, 8).check(&app, 3).unwrap_err().contains("above its most"));
        assert!(paced(8, 4).check(&app, 3).is_ok());
    }

    #[test]
    fn a_move_carries_its_share_in_its_request() {
        let share = MoveShare {
            most: 1_024,
            least: 16,
            per_ms: 100,
        };
        let bare = mv(0, 1, 2).request();
        assert_eq!(
            bare.args.as_bytes().len(),
            2,
            "a move naming no share is the target alone"
        );
        let stamped = Move::with_default_share(bare.clone(), share);
        assert_eq!(
            Move::of(&stamped),
            Some(Ok(Move {
                share: Some(share),
                ..mv(0, 1, 2)
            }))
        );
        assert_eq!(
            stamped,
            Move {
                share: Some(share),
                ..mv(0, 1, 2)
            }
            .request()
        );
        // A share named by the client is kept.
        let own = MoveShare { per_ms: 7, ..share };
        let named = Move {
            share: Some(own),
            ..mv(0, 1, 2)
        }
        .request();
        assert_eq!(Move::with_default_share(named.clone(), share), named);
        // Not a move: untouched.
        let mut other = bare.clone();
        other.function.index = 0;
        assert_eq!(Move::with_default_share(other.clone(), share), other);
        // Neither two bytes nor two plus twelve.
        let mut odd = bare;
        odd.args = Payload::encode(&(2u16, 1u32));
        assert!(
            Move::of(&odd)
                .unwrap()
                .unwrap_err()
                .contains("optionally followed by its share")
        );
    }

    #[test]
    fn a_configured_pace_is_brought_in_range() {
        let config = |most, least, per_ms| crate::Config {
            move_share_entities: most,
            move_share_min_entities: least,
            move_share_per_ms: per_ms,
            ..crate::Config::default()
        };
        let pace = |most, least, per_ms| MoveShare { most, least, per_ms };
        assert_eq!(crate::Config::default().move_share(), pace(1_024, 16, 100));
        assert_eq!(config(0, 0, 0).move_share(), pace(1, 1, 0));
        assert_eq!(
            config(8, 64, 5).move_share(),
            pace(8, 8, 5),
            "the least no more than the most"
        );
        assert_eq!(
            config(usize::MAX, usize::MAX, usize::MAX).move_share(),
            pace(u32::MAX, u32::MAX, u32::MAX)
        );
        for c in [config(0, 0, 0), config(8, 64, 5), config(usize::MAX, 1, 1)] {
            assert!(c.move_share().check().is_ok(), "{:?}", c.move_share());
        }
    }

    #[test]
    fn a_share_follows_the_time_between_its_bounds() {
        let share = MoveShare {
            most: 1_024,
            least: 16,
            per_ms: 100,
        };
        assert_eq!(share.entities(0), 16);
        assert_eq!(share.entities(100), 16);
        assert_eq!(share.entities(660), 66);
        assert_eq!(share.entities(2_500), 250);
        assert_eq!(share.entities(10_240), 1_024);
        assert_eq!(share.entities(u64::MAX), 1_024, "a time 0 before: the most");
        let shares: Vec<usize> = (0..20_000).step_by(7).map(|us| share.entities(us)).collect();
        assert!(shares.windows(2).all(|w| w[0] <= w[1]), "more time, no smaller share");
        // Unchecked bounds still move something.
        let odd = MoveShare {
            most: 8,
            least: 1_000,
            per_ms: 100,
        };
        assert_eq!(odd.entities(0), 8);
        let zero = MoveShare {
            most: 0,
            least: 0,
            per_ms: u32::MAX,
        };
        assert_eq!(zero.entities(0), 1);
        assert_eq!(zero.entities(u64::MAX), 1);
    }
}
