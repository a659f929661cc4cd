//! Where shards run: each shard → node, versioned, changed by handovers.
//!
//! A cluster keeps its shard count fixed and moves whole shards between
//! nodes (docs/nodes.md): the shard count fixes tids, clients' homes,
//! partitions' default owners and every barrier, so changing which node runs
//! a shard changes nothing the engine computes. The layout is cluster state
//! like the partition map: a handover is a request (`Handover::request`),
//! sequenced into an epoch's batch (so logged and replayed, answered once
//! durable, exactly once), listed in its coordinator's `Done1`, and decided
//! by every shard at that epoch's end in tid order. Every shard therefore
//! holds the same layout at every epoch, live, in replay and after
//! recovery; the version counts the handovers that changed it. (A handover
//! waits while a partition move is under way or queued, and queued moves
//! wait while a snapshot is due: snapshot votes therefore read the epochs'
//! logged times, and replay counts the snapshots it does not take, so they
//! fall at the same epochs as live — `replay_decides_a_waiting_handover_
//! where_the_live_run_did` — and the interval each shard votes by, and
//! each move's pace, are logged: `crate::interval`, `MoveShare`.)
//!
//! The layout starts as the driver gives it (`Layout::contiguous`: node 0
//! runs the first shards, node 1 the next, as a cluster file numbers them)
//! and a snapshot carries it, so a restored shard knows the layout of the
//! snapshot's epoch and replays later handovers from the log. A node may run
//! no shard (a spare, or one whose shards were all handed away); the node
//! count is fixed, but a node that runs none may **leave** for good: a
//! handover of [`LEAVE`] to it (`Handover::leave`), decided like any
//! handover, puts it in the layout's left set (a version of its own, so
//! every shard stops at it as at a handover), and no shard is handed to it
//! after. A leave of a node that runs a shard when it is decided is skipped
//! (so is one of a node that left), and a handover to a node that left.
//! A node may also be listed before it **joins**: such a node is *absent*
//! (the driver gives the set, `Layout::with_absent`), runs no shard and is
//! handed none, until a handover of [`JOIN`] to it (`Handover::join`),
//! decided the same way, makes it a member (a version of its own); a join
//! of a node that is no longer absent is skipped, as are a handover to and
//! a leave of an absent node.
//!
//! A shard decided to go from node A to node B at the end of epoch E runs
//! on B from E + 1 on: its log's batches of epochs up to E are on A's disk,
//! later ones on B's, and its snapshot file at epoch P on the node that runs
//! it in P + 1. The driver follows the layout (`Outputs::handovers`): the
//! departed shard crosses whole as a `Handoff` (`shard::handoff`) and
//! recovery merges each shard's log from its pieces
//! (`recovery::recover_handed`). The simulator does both, every shard in
//! one process; the runtime does neither yet (docs/nodes.md, step 4).

use crate::codec::Payload;
use crate::config::Request;
use crate::ids::{Address, Epoch, FnId, OpId, SHARDS_MAX, ShardId, Tid};

/// The function index of a handover request: no operator registers a
/// function with it, nor with the move's index just above it.
pub const HANDOVER_FUNCTION_INDEX: u16 = u16::MAX - 1;

const _: () = assert!(crate::app::FUNCTIONS_PER_OPERATOR_MAX < HANDOVER_FUNCTION_INDEX as usize);

/// The name a client calls a handover by, on any operator, with the shard
/// and the node it goes to (`(u16, u16)`) as its argument. Names starting
/// with `__` are reserved, so no function has it.
pub const HANDOVER_FUNCTION: &str = "__handover";

/// Nodes in a layout at most: every node could run one shard.
pub const NODES_MAX: usize = SHARDS_MAX;

/// The shard a handover names to ask its node to leave the cluster
/// ([`Handover::leave`]): no shard has this id.
pub const LEAVE: ShardId = ShardId::MAX;

const _: () = assert!((LEAVE as usize) >= SHARDS_MAX);

/// The shard a handover names to make an absent node a member
/// ([`Handover::join`]): no shard has this id.
pub const JOIN: ShardId = ShardId::MAX - 1;

const _: () = assert!((JOIN as usize) >= SHARDS_MAX);

/// A handover: shard `shard` goes to node `node` (or, `shard` being
/// [`LEAVE`], node `node` leaves the cluster; [`JOIN`], it joins).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Handover {
    pub shard: ShardId,
    pub node: u16,
}

impl Handover {
    /// Node `node` leaves the cluster: decided like a handover, applied if
    /// it runs no shard then.
    pub fn leave(node: u16) -> Handover {
        Handover { shard: LEAVE, node }
    }

    /// Whether this asks its node to leave rather than moves a shard.
    pub fn is_leave(self) -> bool {
        self.shard == LEAVE
    }

    /// Node `node`, absent (listed, not yet a member), joins the cluster:
    /// decided like a handover, applied if it is still absent then.
    pub fn join(node: u16) -> Handover {
        Handover { shard: JOIN, node }
    }

    /// Whether this asks its node to join rather than moves a shard.
    pub fn is_join(self) -> bool {
        self.shard == JOIN
    }

    /// Whether this changes who the members are (a leave or a join)
    /// rather than moves a shard.
    pub fn is_membership(self) -> bool {
        self.is_leave() || self.is_join()
    }

    /// The request that asks for this handover, sequenced, logged and
    /// answered like a transaction (with `()` once its epoch is durable).
    /// It names operator 0's partition 0 as its address: any shard may
    /// sequence it, and every application has an operator.
    pub fn request(self) -> Request {
        Request {
            function: FnId {
                op: OpId(0),
                index: HANDOVER_FUNCTION_INDEX,
            },
            address: Address::Partition(0),
            args: Payload::encode(&(self.shard, self.node)),
            client: None,
        }
    }

    /// The handover a request asks for, if it is a handover request (not
    /// checked against the layout: see [`Handover::check`]).
    pub fn of(request: &Request) -> Option<Result<Handover, String>> {
        if request.function.index != HANDOVER_FUNCTION_INDEX {
            return None;
        }
        Some(match (&request.address, request.args.decode::<(ShardId, u16)>()) {
            (Address::Partition(_), Ok((shard, node))) => Ok(Handover { shard, node }),
            (Address::Entity(_), _) => Err("a handover names a partition, not an entity".to_string()),
            (_, Err(e)) => Err(format!("a handover's argument is (shard, node) as (u16, u16): {e}")),
        })
    }

    /// Checks the handover against the shard and node counts.
    pub fn check(self, n_shards: u16, n_nodes: u16) -> Result<Handover, String> {
        if self.shard >= n_shards && !self.is_membership() {
            return Err(format!("no shard {} (there are {n_shards})", self.shard));
        }
        if self.node >= n_nodes {
            return Err(format!("no node {} (there are {n_nodes})", self.node));
        }
        Ok(self)
    }
}

/// A shard handed over at an epoch's end (`shard` [`LEAVE`]: node `from`,
/// `to` the same, left the cluster; [`JOIN`]: joined it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Switched {
    /// The layout's version after it.
    pub version: u64,
    /// The epoch at whose end it switched: the shard runs on `to` from the
    /// next one on.
    pub epoch: Epoch,
    pub shard: ShardId,
    pub from: u16,
    pub to: u16,
}

/// A layout as a snapshot keeps it: version, node count, each shard's
/// node, the handovers queued `(tid, shard, node)`, the nodes that left,
/// the nodes absent (not yet joined).
pub(crate) type LayoutMeta = (u64, u16, Vec<u16>, Vec<(Tid, u16, u16)>, Vec<u16>, Vec<u16>);
/// The same before nodes could join.
pub(crate) type LayoutMetaNoAbsent = (u64, u16, Vec<u16>, Vec<(Tid, u16, u16)>, Vec<u16>);
/// The same before nodes could leave.
pub(crate) type LayoutMetaNoLeft = (u64, u16, Vec<u16>, Vec<(Tid, u16, u16)>);

/// A layout kept before nodes could join: none was absent.
pub(crate) fn meta_of_no_absent((version, nodes, node_of, queued, left): LayoutMetaNoAbsent) -> LayoutMeta {
    (version, nodes, node_of, queued, left, Vec::new())
}

/// A layout kept before nodes could leave: none had, none was absent.
pub(crate) fn meta_of_no_left((version, nodes, node_of, queued): LayoutMetaNoLeft) -> LayoutMeta {
    (version, nodes, node_of, queued, Vec::new(), Vec::new())
}

/// Each shard's node, the node count and how many handovers changed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    version: u64,
    nodes: u16,
    node_of: Vec<u16>,
    /// Handovers decided while they had to wait, in decided order.
    queued: Vec<(Tid, Handover)>,
    /// The nodes that left the cluster, ascending.
    left: Vec<u16>,
    /// The nodes listed that have not joined yet, ascending.
    absent: Vec<u16>,
}

impl Layout {
    /// One node runs every shard: a single daemon, the default.
    pub fn single(n_shards: u16) -> Layout {
        Layout::contiguous(&[n_shards])
    }

    /// Node `i` runs `shards[i]` shards, in order (node 0 the first ones),
    /// version 0: a cluster file's numbering.
    pub fn contiguous(shards: &[u16]) -> Layout {
        assert!(
            !shards.is_empty() && shards.len() <= NODES_MAX,
            "{} nodes",
            shards.len()
        );
        let node_of: Vec<u16> = shards
            .iter()
            .enumerate()
            .flat_map(|(node, count)| std::iter::repeat_n(node as u16, usize::from(*count)))
            .collect();
        assert!(
            !node_of.is_empty() && node_of.len() <= SHARDS_MAX,
            "{} shards",
            node_of.len()
        );
        Layout {
            version: 0,
            nodes: shards.len() as u16,
            node_of,
            queued: Vec::new(),
            left: Vec::new(),
            absent: Vec::new(),
        }
    }

    /// Shard `s` on node `node_of[s]` of `nodes`, version 0: a placement
    /// given whole rather than numbered in order (a node may run none).
    pub fn placed_on(nodes: u16, node_of: Vec<u16>) -> Result<Layout, String> {
        if nodes == 0 || usize::from(nodes) > NODES_MAX {
            return Err(format!("{nodes} nodes; between 1 and {NODES_MAX}"));
        }
        if node_of.is_empty() || node_of.len() > SHARDS_MAX {
            return Err(format!("{} shards; between 1 and {SHARDS_MAX}", node_of.len()));
        }
        if let Some((s, n)) = node_of.iter().enumerate().find(|(_, n)| **n >= nodes) {
            return Err(format!("shard {s} on node {n}, of {nodes}"));
        }
        Ok(Layout {
            version: 0,
            nodes,
            node_of,
            queued: Vec::new(),
            left: Vec::new(),
            absent: Vec::new(),
        })
    }

    /// This placement at `version` (as a peer described a layout it runs).
    pub fn with_version(mut self, version: u64) -> Layout {
        self.version = version;
        self
    }

    /// This placement with `left` the nodes that left (as a peer or a
    /// file described them); refused if one runs a shard or is no node.
    pub fn with_left(mut self, mut left: Vec<u16>) -> Result<Layout, String> {
        left.sort_unstable();
        left.dedup();
        if let Some(n) = left.iter().find(|n| **n >= self.nodes) {
            return Err(format!("node {n} left, of {}", self.nodes));
        }
        if let Some(n) = left.iter().find(|n| self.node_of.contains(n)) {
            return Err(format!("node {n} left and runs shard {:?}", self.shards_of(*n).next()));
        }
        if let Some(n) = left.iter().find(|n| self.absent.contains(n)) {
            return Err(format!("node {n} left and never joined"));
        }
        self.left = left;
        Ok(self)
    }

    /// This placement with `absent` the nodes that have not joined yet (as
    /// a cluster file lists them, or a peer described them); refused if
    /// one runs a shard, left or is no node. Every node must be given the
    /// same set.
    pub fn with_absent(mut self, mut absent: Vec<u16>) -> Result<Layout, String> {
        absent.sort_unstable();
        absent.dedup();
        if let Some(n) = absent.iter().find(|n| **n >= self.nodes) {
            return Err(format!("node {n} absent, of {}", self.nodes));
        }
        if let Some(n) = absent.iter().find(|n| self.node_of.contains(n)) {
            return Err(format!(
                "node {n} absent and runs shard {:?}",
                self.shards_of(*n).next()
            ));
        }
        if let Some(n) = absent.iter().find(|n| self.left.contains(n)) {
            return Err(format!("node {n} absent and left"));
        }
        self.absent = absent;
        Ok(self)
    }

    /// How many handovers (and leaves and joins) changed it.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The nodes that left the cluster, ascending.
    pub fn left(&self) -> &[u16] {
        &self.left
    }

    /// Whether `node` left the cluster.
    pub fn has_left(&self, node: u16) -> bool {
        self.left.binary_search(&node).is_ok()
    }

    /// The nodes listed that have not joined the cluster yet, ascending.
    pub fn absent(&self) -> &[u16] {
        &self.absent
    }

    /// Whether `node` has not joined the cluster yet.
    pub fn is_absent(&self, node: u16) -> bool {
        self.absent.binary_search(&node).is_ok()
    }

    /// Whether `node` is a member: listed, joined and not left.
    pub fn is_member(&self, node: u16) -> bool {
        node < self.nodes && !self.has_left(node) && !self.is_absent(node)
    }

    /// How many nodes there are (some may run no shard).
    pub fn nodes(&self) -> u16 {
        self.nodes
    }

    pub fn n_shards(&self) -> u16 {
        self.node_of.len() as u16
    }

    /// The node that runs `shard`.
    #[inline]
    pub fn node_of(&self, shard: ShardId) -> u16 {
        self.node_of[usize::from(shard)]
    }

    /// The shards `node` runs, in order.
    pub fn shards_of(&self, node: u16) -> impl Iterator<Item = ShardId> + '_ {
        self.node_of
            .iter()
            .enumerate()
            .filter(move |(_, n)| **n == node)
            .map(|(s, _)| s as ShardId)
    }

    /// Where the shards run, without the handovers waiting (what a driver
    /// that follows [`Switched`]s holds).
    pub fn placed(&self) -> Layout {
        Layout {
            queued: Vec::new(),
            ..self.clone()
        }
    }

    /// The handovers decided and waiting, in decided order.
    pub fn queued(&self) -> &[(Tid, Handover)] {
        &self.queued
    }

    /// At the end of `epoch`: queues the epoch's handovers in tid order
    /// behind those waiting and, unless `hold` (a partition is being
    /// copied: a shard leaves only between copies), applies them all in
    /// order (a shard handed over twice ends where the last one sends it;
    /// one to the node that runs it changes nothing). Returns the
    /// switches, each with the version it made. Handovers must have
    /// passed [`Handover::check`]. Unless `spares`, a handover that would
    /// leave its node without shards is skipped (a no-op, like one to the
    /// node that runs it: a runtime that runs no spare node), and so is
    /// every leave and join. A leave of a node that runs a shard or left
    /// already, a join of a node not absent, and a handover to (or leave
    /// of) a node that left or is absent, are skipped too. A join made
    /// ends the decision: the handovers after it stay queued for the next
    /// epoch's end (a change of its own).
    pub fn decide(
        &mut self,
        epoch: Epoch,
        handovers: &mut [(Tid, Handover)],
        hold: bool,
        spares: bool,
    ) -> Vec<Switched> {
        handovers.sort_unstable();
        self.queued.extend_from_slice(handovers);
        let mut out = Vec::new();
        if hold {
            return out;
        }
        let queued = std::mem::take(&mut self.queued);
        for (i, (_, h)) in queued.iter().copied().enumerate() {
            assert!(h.node < self.nodes, "handover to node {} of {}", h.node, self.nodes);
            if self.has_left(h.node) {
                continue;
            }
            if h.is_join() {
                if spares && self.is_absent(h.node) {
                    self.absent.retain(|n| *n != h.node);
                    self.version += 1;
                    out.push(Switched {
                        version: self.version,
                        epoch,
                        shard: JOIN,
                        from: h.node,
                        to: h.node,
                    });
                    // A join made ends the decision: the handovers after
                    // it wait for the next epoch's end, so that the node
                    // joins at a round change of its own (the members
                    // greet it before any shard goes to it, and two nodes
                    // never join at once).
                    self.queued = queued[i + 1..].to_vec();
                    return out;
                }
                continue;
            }
            if self.is_absent(h.node) {
                continue;
            }
            if h.is_leave() {
                if spares && !self.node_of.contains(&h.node) {
                    self.left.push(h.node);
                    self.left.sort_unstable();
                    self.version += 1;
                    out.push(Switched {
                        version: self.version,
                        epoch,
                        shard: LEAVE,
                        from: h.node,
                        to: h.node,
                    });
                }
                continue;
            }
            let from = self.node_of[usize::from(h.shard)];
            if from == h.node {
                continue;
            }
            if !spares && self.node_of.iter().filter(|n| **n == from).count() == 1 {
                continue;
            }
            self.node_of[usize::from(h.shard)] = h.node;
            self.version += 1;
            out.push(Switched {
                version: self.version,
                epoch,
                shard: h.shard,
                from,
                to: h.node,
            });
        }
        out
    }

    /// Applies a switch another shard decided (a driver following the
    /// engine): it must be the next version.
    pub fn follow(&mut self, s: &Switched) {
        assert_eq!(
            s.version,
            self.version + 1,
            "layout switch {s:?} after version {}",
            self.version
        );
        if s.shard == JOIN {
            assert!(self.is_absent(s.from), "layout switch {s:?}");
            self.absent.retain(|n| *n != s.from);
        } else if s.shard == LEAVE {
            assert!(
                !self.node_of.contains(&s.from) && !self.has_left(s.from),
                "layout switch {s:?}"
            );
            self.left.push(s.from);
            self.left.sort_unstable();
        } else {
            assert_eq!(self.node_of(s.shard), s.from, "layout switch {s:?}");
            self.node_of[usize::from(s.shard)] = s.to;
        }
        self.version = s.version;
    }

    pub(crate) fn to_meta(&self) -> LayoutMeta {
        let queued = self.queued.iter().map(|(t, h)| (*t, h.shard, h.node)).collect();
        (
            self.version,
            self.nodes,
            self.node_of.clone(),
            queued,
            self.left.clone(),
            self.absent.clone(),
        )
    }

    /// The layout a snapshot kept; an error names what does not fit `n_shards`.
    pub(crate) fn from_meta(n_shards: u16, meta: &LayoutMeta) -> Result<Layout, String> {
        let (version, nodes, node_of, queued, left, absent) = meta;
        if node_of.len() != usize::from(n_shards) {
            return Err(format!("a layout of {} shards for {n_shards}", node_of.len()));
        }
        if *nodes == 0 || usize::from(*nodes) > NODES_MAX {
            return Err(format!("a layout of {nodes} nodes"));
        }
        if let Some((s, n)) = node_of.iter().enumerate().find(|(_, n)| **n >= *nodes) {
            return Err(format!("shard {s} on node {n} of {nodes}"));
        }
        let queued = queued
            .iter()
            .map(|&(t, shard, node)| Handover { shard, node }.check(n_shards, *nodes).map(|h| (t, h)))
            .collect::<Result<_, _>>()?;
        Layout {
            version: *version,
            nodes: *nodes,
            node_of: node_of.clone(),
            queued,
            left: Vec::new(),
            absent: Vec::new(),
        }
        .with_left(left.clone())?
        .with_absent(absent.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(shard: ShardId, node: u16) -> Handover {
        Handover { shard, node }
    }

    #[test]
    fn contiguous_numbers_shards_across_nodes() {
        let l = Layout::contiguous(&[2, 1, 3]);
        assert_eq!((l.nodes(), l.n_shards(), l.version()), (3, 6, 0));
        assert_eq!((0..6).map(|s| l.node_of(s)).collect::<Vec<_>>(), vec![0, 0, 1, 2, 2, 2]);
        assert_eq!(l.shards_of(2).collect::<Vec<_>>(), vec![3, 4, 5]);
    }

    #[test]
    fn placed_on_takes_any_placement_and_refuses_a_node_out_of_range() {
        let l = Layout::placed_on(3, vec![0, 1, 0, 1]).unwrap();
        assert_eq!(l.shards_of(0).collect::<Vec<_>>(), vec![0, 2]);
        assert_eq!(l.shards_of(2).count(), 0, "a spare");
        assert_eq!(
            Layout::placed_on(2, vec![0, 0, 1]).unwrap(),
            Layout::contiguous(&[2, 1])
        );
        assert!(Layout::placed_on(2, vec![0, 2]).unwrap_err().contains("node 2"));
        assert!(Layout::placed_on(0, vec![0]).is_err());
        assert!(Layout::placed_on(1, vec![]).is_err());
    }

    #[test]
    fn decide_applies_in_tid_order_and_counts_changes() {
        let mut l = Layout::contiguous(&[2, 2, 0]);
        let mut follower = l.clone();
        // Shard 1 goes to node 2 then (higher tid) to node 1; shard 3 is
        // handed to the node it is on (nothing).
        let mut hs = vec![(9, h(1, 1)), (4, h(1, 2)), (5, h(3, 1))];
        // Held (a copy under way): queued, in tid order, kept in a snapshot.
        assert!(l.decide(6, &mut hs, true, true).is_empty());
        assert_eq!(l.queued(), &[(4, h(1, 2)), (5, h(3, 1)), (9, h(1, 1))]);
        assert_eq!(Layout::from_meta(4, &l.to_meta()).unwrap(), l);
        let switched = l.decide(7, &mut [], false, true);
        assert!(l.queued().is_empty());
        assert_eq!(
            switched
                .iter()
                .map(|s| (s.version, s.shard, s.from, s.to))
                .collect::<Vec<_>>(),
            vec![(1, 1, 0, 2), (2, 1, 2, 1)]
        );
        assert!(switched.iter().all(|s| s.epoch == 7));
        assert_eq!(l.shards_of(0).collect::<Vec<_>>(), vec![0]);
        assert_eq!(l.shards_of(1).collect::<Vec<_>>(), vec![1, 2, 3]);
        assert_eq!(l.shards_of(2).count(), 0, "a node may run nothing");
        for s in &switched {
            follower.follow(s);
        }
        assert_eq!(follower, l);
        let meta = l.to_meta();
        assert_eq!(Layout::from_meta(4, &meta).unwrap(), l);
        assert!(Layout::from_meta(5, &meta).unwrap_err().contains("4 shards"));
        assert!(
            Layout::from_meta(4, &(1, 2, vec![0, 0, 2, 1], vec![], vec![], vec![]))
                .unwrap_err()
                .contains("node 2 of 2")
        );
        assert!(
            Layout::from_meta(4, &(1, 2, vec![0; 4], vec![(3, 0, 2)], vec![], vec![]))
                .unwrap_err()
                .contains("no node 2")
        );
    }

    #[test]
    fn a_node_that_runs_no_shard_leaves_and_is_handed_none_after() {
        let mut l = Layout::contiguous(&[2, 1, 0]);
        let mut follower = l.clone();
        // Node 1 runs a shard: its leave is skipped; node 2's is made, and
        // a handover to it after (a higher tid) is skipped, as is a second
        // leave of it; node 1 hands its shard away and then leaves.
        let mut hs = vec![
            (1, Handover::leave(1)),
            (2, Handover::leave(2)),
            (3, h(0, 2)),
            (4, Handover::leave(2)),
            (5, h(2, 0)),
            (6, Handover::leave(1)),
        ];
        let switched = l.decide(8, &mut hs, false, true);
        assert_eq!(
            switched
                .iter()
                .map(|s| (s.version, s.shard, s.from, s.to))
                .collect::<Vec<_>>(),
            vec![(1, LEAVE, 2, 2), (2, 2, 1, 0), (3, LEAVE, 1, 1)]
        );
        assert_eq!(l.left(), &[1, 2]);
        assert!(l.has_left(2) && !l.has_left(0));
        assert_eq!(l.shards_of(0).collect::<Vec<_>>(), vec![0, 1, 2]);
        for s in &switched {
            follower.follow(s);
        }
        assert_eq!(follower, l);
        assert_eq!(Layout::from_meta(3, &l.to_meta()).unwrap(), l);
        assert!(
            Layout::from_meta(3, &(1, 2, vec![0, 1, 1], vec![], vec![1], vec![]))
                .unwrap_err()
                .contains("node 1 left and runs shard")
        );
        // A runtime without spares makes no leave.
        let mut l = Layout::contiguous(&[1, 0]);
        assert!(l.decide(3, &mut [(1, Handover::leave(1))], false, false).is_empty());
        assert!(l.left().is_empty());
        assert!(Handover::leave(1).check(1, 2).is_ok());
        assert!(Handover::leave(2).check(1, 2).unwrap_err().contains("no node 2"));
    }

    #[test]
    fn an_absent_node_joins_and_is_handed_shards_only_after() {
        let mut l = Layout::contiguous(&[2, 0, 0]).with_absent(vec![2, 1]).unwrap();
        assert_eq!(l.absent(), &[1, 2]);
        assert!(!l.is_member(1) && l.is_member(0) && !l.is_member(3));
        let mut follower = l.clone();
        // A handover to node 1 before its join (a lower tid) is skipped,
        // as is a leave of absent node 2; node 1 joins, then is handed
        // shard 1; a second join of it is skipped.
        let mut hs = vec![
            (1, h(0, 1)),
            (2, Handover::leave(2)),
            (3, Handover::join(1)),
            (4, h(1, 1)),
            (5, Handover::join(1)),
        ];
        let mut switched = l.decide(8, &mut hs, false, true);
        // The join ends the decision: the rest waits for the next epoch's
        // end, where the handover to the new node is made.
        assert_eq!(switched.len(), 1);
        assert_eq!(l.queued(), &[(4, h(1, 1)), (5, Handover::join(1))]);
        switched.extend(l.decide(9, &mut [], false, true));
        assert!(l.queued().is_empty());
        assert_eq!(
            switched
                .iter()
                .map(|s| (s.version, s.epoch, s.shard, s.from, s.to))
                .collect::<Vec<_>>(),
            vec![(1, 8, JOIN, 1, 1), (2, 9, 1, 0, 1)]
        );
        assert_eq!(l.absent(), &[2]);
        assert!(l.left().is_empty() && l.is_member(1));
        for s in &switched {
            follower.follow(s);
        }
        assert_eq!(follower, l);
        assert_eq!(Layout::from_meta(2, &l.to_meta()).unwrap(), l);
        // Node 2 joins, hands nothing, and leaves; then a join of it is
        // skipped (a node that left stays out).
        let mut switched = l.decide(
            10,
            &mut [(1, Handover::join(2)), (2, Handover::leave(2)), (3, Handover::join(2))],
            false,
            true,
        );
        switched.extend(l.decide(11, &mut [], false, true));
        assert_eq!(switched.len(), 2);
        assert!(l.absent().is_empty() && l.has_left(2));
        // Refused placements: absent and running a shard, absent and left.
        assert!(
            Layout::contiguous(&[1, 1])
                .with_absent(vec![1])
                .unwrap_err()
                .contains("node 1 absent and runs shard")
        );
        assert!(
            Layout::from_meta(2, &(1, 3, vec![0, 0], vec![], vec![2], vec![2]))
                .unwrap_err()
                .contains("node 2")
        );
        assert!(Layout::contiguous(&[1]).with_absent(vec![1]).is_err());
        // A runtime without spares makes no join.
        let mut l = Layout::contiguous(&[1, 0]).with_absent(vec![1]).unwrap();
        assert!(l.decide(3, &mut [(1, Handover::join(1))], false, false).is_empty());
        assert!(Handover::join(1).check(1, 2).is_ok());
        assert!(Handover::join(2).check(1, 2).unwrap_err().contains("no node 2"));
    }

    #[test]
    fn bad_handovers_are_refused() {
        assert!(h(3, 1).check(4, 2).is_ok());
        assert!(h(4, 1).check(4, 2).unwrap_err().contains("no shard 4"));
        assert!(h(0, 2).check(4, 2).unwrap_err().contains("no node 2"));
        let r = h(2, 1).request();
        assert_eq!(Handover::of(&r), Some(Ok(h(2, 1))));
        assert_eq!(crate::partition_map::Move::of(&r), None);
        assert_eq!(
            Handover::of(
                &crate::partition_map::Move {
                    op: OpId(0),
                    partition: 0,
                    to: 1,
                    share: None,
                }
                .request()
            ),
            None
        );
    }
}
