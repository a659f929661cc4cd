//! The frames of the protocol, as values.
//!
//! A frame is a correlation id and a body. The layout of each body on the
//! wire is in `docs/protocol.md`; [`crate::encode`] and [`crate::Decoder`]
//! implement it. Frame types below `0x80` travel from client to server, the
//! others from server to client, so a peer can refuse a frame sent the wrong
//! way by its type alone.
//!
//! Invariants, checked by the encoder and guaranteed by the decoder: names
//! are at most [`NAME_LEN_MAX`](crate::NAME_LEN_MAX) bytes, arguments,
//! results and state values at most [`PAYLOAD_LEN_MAX`], messages within
//! their caps, and an ABORTED frame never carries the engine-internal kinds
//! `Rejected` or `Forgotten` (a refused request is an ERROR: it did not
//! run) or `Drift`.
//! The encoding is canonical: a frame that decodes re-encodes to the same
//! bytes.
//!
//! [`PAYLOAD_LEN_MAX`]: styx_engine::PAYLOAD_LEN_MAX

use crate::error::ErrorCode;
use styx_engine::{Abort, AbortKind, Address, Key, Payload, Tid};

/// The protocol version this code writes in every header.
pub const VERSION: u8 = 1;
/// The oldest version this code speaks.
pub const VERSION_MIN: u8 = 1;
/// The newest version this code speaks.
pub const VERSION_MAX: u8 = 1;

const _: () = assert!(VERSION_MIN <= VERSION && VERSION <= VERSION_MAX && VERSION_MIN >= 1);

/// The version a server picks for a client speaking `min..=max`: the newest
/// both speak, or `None` (the server answers `UNSUPPORTED_VERSION`).
pub fn negotiate(min: u8, max: u8) -> Option<u8> {
    let newest = max.min(VERSION_MAX);
    (newest >= min.max(VERSION_MIN)).then_some(newest)
}

/// The type byte of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FrameType {
    Hello = 0x01,
    Ping = 0x02,
    Status = 0x03,
    Map = 0x04,
    Placement = 0x05,
    Layout = 0x06,
    Members = 0x07,
    Request = 0x10,
    Get = 0x11,
    Welcome = 0x81,
    Pong = 0x82,
    StatusReply = 0x83,
    MapReply = 0x84,
    PlacementReply = 0x85,
    LayoutReply = 0x86,
    MembersReply = 0x87,
    Committed = 0x90,
    Aborted = 0x91,
    State = 0x92,
    Error = 0xff,
}

impl FrameType {
    pub const ALL: [FrameType; 20] = [
        FrameType::Hello,
        FrameType::Ping,
        FrameType::Status,
        FrameType::Map,
        FrameType::Placement,
        FrameType::Layout,
        FrameType::Members,
        FrameType::Request,
        FrameType::Get,
        FrameType::Welcome,
        FrameType::Pong,
        FrameType::StatusReply,
        FrameType::MapReply,
        FrameType::PlacementReply,
        FrameType::LayoutReply,
        FrameType::MembersReply,
        FrameType::Committed,
        FrameType::Aborted,
        FrameType::State,
        FrameType::Error,
    ];

    pub fn from_u8(b: u8) -> Option<FrameType> {
        FrameType::ALL.into_iter().find(|t| *t as u8 == b)
    }

    /// Whether clients send this type (servers send the others).
    pub fn is_from_client(self) -> bool {
        (self as u8) < 0x80
    }
}

/// The `target` tag of an entity key.
pub const TARGET_ENTITY: u8 = 0;
/// The `target` tag of a partition number.
pub const TARGET_PARTITION: u8 = 1;

/// One frame: the correlation id the answer echoes, and the body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// Chosen by the client, unique among its frames awaiting an answer on
    /// this connection; every answer carries the id of the frame it answers.
    pub corr: u32,
    pub body: Body,
}

/// The body of a frame, by type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    /// Client, first frame: the versions the client speaks and its name (for logs).
    Hello {
        version_min: u8,
        version_max: u8,
        client: String,
    },
    /// Server, answers HELLO: the version chosen and the server's limits.
    Welcome(Welcome),
    /// Client: asks for a PONG echoing `data`.
    Ping { data: u64 },
    /// Server, answers PING.
    Pong { data: u64 },
    /// Client: asks for the engine's status.
    Status,
    /// Server, answers STATUS.
    StatusReply(Status),
    /// Client: asks where the engine's shards and partitions are.
    Map,
    /// Server, answers MAP.
    MapReply(Map),
    /// Client: asks which partitions moved off the default rule.
    Placement,
    /// Server, answers PLACEMENT.
    PlacementReply(Placement),
    /// Client: asks which node runs which shard.
    Layout,
    /// Server, answers LAYOUT.
    LayoutReply(Layout),
    /// Client: asks which nodes left the cluster.
    Members,
    /// Server, answers MEMBERS.
    MembersReply(Members),
    /// Client: run one transaction.
    Request(Request),
    /// Client: read one entity's state.
    Get { operator: String, key: Key },
    /// Server, answers REQUEST: the transaction committed with this result.
    Committed { tid: Tid, result: Payload },
    /// Server, answers REQUEST: the transaction aborted, nothing it did remains.
    Aborted { tid: Tid, abort: Abort },
    /// Server, answers GET: the entity's state (engine-encoded bytes), or `None`.
    State { value: Option<Vec<u8>> },
    /// Server, answers any frame that could not be served.
    Error { code: ErrorCode, message: String },
}

impl Body {
    pub fn frame_type(&self) -> FrameType {
        match self {
            Body::Hello { .. } => FrameType::Hello,
            Body::Welcome(_) => FrameType::Welcome,
            Body::Ping { .. } => FrameType::Ping,
            Body::Pong { .. } => FrameType::Pong,
            Body::Status => FrameType::Status,
            Body::StatusReply(_) => FrameType::StatusReply,
            Body::Map => FrameType::Map,
            Body::MapReply(_) => FrameType::MapReply,
            Body::Placement => FrameType::Placement,
            Body::PlacementReply(_) => FrameType::PlacementReply,
            Body::Layout => FrameType::Layout,
            Body::LayoutReply(_) => FrameType::LayoutReply,
            Body::Members => FrameType::Members,
            Body::MembersReply(_) => FrameType::MembersReply,
            Body::Request(_) => FrameType::Request,
            Body::Get { .. } => FrameType::Get,
            Body::Committed { .. } => FrameType::Committed,
            Body::Aborted { .. } => FrameType::Aborted,
            Body::State { .. } => FrameType::State,
            Body::Error { .. } => FrameType::Error,
        }
    }
}

/// A client's request to run one transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The client's id: with `seq`, names the transaction for exactly-once.
    /// 0 opts out: the request is not deduplicated.
    pub client: u64,
    /// The request's number among the client's, from 1; a retry reuses it.
    pub seq: u64,
    /// Every seq of this client below `ack` has its outcome at the client:
    /// the engine may forget those outcomes.
    pub ack: u64,
    pub operator: String,
    pub function: String,
    /// An entity key for entity functions, a partition for partition functions.
    pub target: Address,
    /// The function's arguments, encoded as `docs/protocol.md` says.
    pub args: Payload,
}

/// The server's answer to HELLO.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Welcome {
    /// The version every later frame of the connection carries.
    pub version: u8,
    /// The largest frame the server reads, header included.
    pub frame_len_max: u32,
    /// Frames the client may have awaiting an answer.
    pub in_flight_max: u32,
    /// The largest arguments the server takes.
    pub payload_len_max: u32,
    /// The server's name and version, for logs.
    pub server: String,
}

/// The engine's status, answering STATUS.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Status {
    pub shards: u16,
    /// The last committed epoch.
    pub epoch: u64,
    pub uptime_ms: u64,
    /// Transactions committed and aborted since the server started.
    pub committed: u64,
    pub aborted: u64,
    /// Rates over the last second.
    pub committed_per_s: u64,
    pub aborted_per_s: u64,
    pub epochs_per_s: u64,
    pub connections: u32,
    /// Frames awaiting an answer, over all connections.
    pub in_flight: u32,
}

/// Nodes a MAP_REPLY lists at most (a cluster has at most one shard per node).
pub const MAP_NODES_MAX: usize = styx_engine::SHARDS_MAX;
/// Operators a MAP_REPLY lists at most (a server whose application has
/// more answers MAP with `INTERNAL`). It bounds what a decoder allocates
/// for a small frame: 128 entries of 32 bytes.
pub const MAP_OPERATORS_MAX: usize = 128;

/// Where the engine's state lives, answering MAP: which node holds which
/// shards, and each operator's partition count. With the engine's stable
/// key hash this places every entity: an entity of `operator` with key `k`
/// is in partition `hash64(k) % partitions`, partition `p` on shard
/// `p % shards`, and shard `s` on the node LAYOUT names ([`Map::placed`]),
/// else on the node whose range holds it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Map {
    /// The answering node: an index into `nodes`.
    pub node: u16,
    /// Shards of the engine, all nodes together.
    pub shards: u16,
    /// Every node in order; their shard ranges tile `0..shards`, numbering
    /// the shards in order (LAYOUT says which each runs).
    pub nodes: Vec<MapNode>,
    /// Every operator of the application, in registration order.
    pub operators: Vec<MapOperator>,
    /// Which node (index into `nodes`) runs each shard, as LAYOUT answered
    /// ([`Map::with_layout`], checked against this map); `None` places
    /// shards by the nodes' ranges. Not part of MAP_REPLY: a decoded map
    /// has none, an encoded one leaves it out.
    pub placed: Option<Layout>,
}

/// Shards a LAYOUT_REPLY lists at most: the engine's most. It bounds
/// what a decoder allocates.
pub const LAYOUT_SHARDS_MAX: usize = styx_engine::SHARDS_MAX;
// The largest LAYOUT_REPLY fits the smallest frame limit a server may set.
const _: () = assert!(crate::limits::HEADER_LEN + 8 + 2 + 2 * LAYOUT_SHARDS_MAX <= crate::limits::FRAME_LEN_MAX_FLOOR);

/// Which node runs which shard, answering LAYOUT: the cluster's layout.
/// MAP's ranges number the shards in order, as a cluster file that counts
/// each node's shards does; a cluster file may place them otherwise, and
/// (later) shards move between nodes. A client routes by this, else by
/// MAP's ranges (an older server answers LAYOUT `UNKNOWN_FRAME_TYPE`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// The layout's version: 0 for the cluster's first, one more at each
    /// change. A client that saw a version needs no answer of a lower one.
    pub version: u64,
    /// The node (an index into MAP's node list) of each shard, by shard.
    pub node_of: Vec<u16>,
}

/// Which nodes left the cluster, answering MEMBERS. A node that left
/// (`styx node remove`) ran no shard when it left, will never run one,
/// and its daemon stopped; MAP still lists it, as it numbers the nodes as
/// the cluster file does. A client dials no node listed here.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Members {
    /// The layout's version (LAYOUT's): a leave is a change of it.
    pub version: u64,
    /// The nodes that left (indexes into MAP's node list), ascending.
    pub left: Vec<u16>,
}

/// Nodes a MEMBERS_REPLY lists as left at most: MAP's most.
pub const MEMBERS_LEFT_MAX: usize = MAP_NODES_MAX;

/// Partitions a PLACEMENT_REPLY lists at most over all operators (a map
/// with more moved answers `INTERNAL`): it bounds the frame (6 bytes an
/// entry) well within the frame cap.
pub const PLACEMENT_MOVED_MAX: usize = 1 << 16;
// The largest PLACEMENT_REPLY fits a frame.
const _: () = assert!(8 + 2 + 4 * MAP_OPERATORS_MAX + 6 * PLACEMENT_MOVED_MAX <= crate::limits::FRAME_LEN_MAX);

/// Which partitions live off the default rule (partition `p` on shard
/// `p % shards`), answering PLACEMENT: moved by `styx rebalance`. With a
/// [`Map`] it places every entity where the server's map does now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// The map's version: 0 for the default rule, one more at every
    /// epoch where moves switched. A client that saw a version needs no
    /// answer of a lower one.
    pub version: u64,
    /// Per operator, in the order of [`Map::operators`]: its moved
    /// partitions and the shard each is on, by partition.
    pub moved: Vec<Vec<(u32, u16)>>,
}

impl Placement {
    /// The shard that owns `key` of `operator` by `map` and these moves, if
    /// the map knows the operator.
    pub fn shard_of(&self, map: &Map, operator: &str, key: &Key) -> Option<u16> {
        let i = map.operators.iter().position(|o| o.name == operator)?;
        self.shard_of_operator(map, i, key)
    }

    /// [`Placement::shard_of`] by the operator's index in [`Map::operators`]
    /// (its id in the application: operators are listed in registration
    /// order), if the map has it.
    pub fn shard_of_operator(&self, map: &Map, operator: usize, key: &Key) -> Option<u16> {
        let partition = key.partition(map.operators.get(operator)?.partitions);
        let moved = self
            .moved
            .get(operator)
            .and_then(|m| m.binary_search_by_key(&partition, |(p, _)| *p).ok().map(|at| m[at].1));
        Some(moved.unwrap_or_else(|| map.shard_of_partition(partition)))
    }
}

/// One node of a [`Map`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapNode {
    /// Its first shard, numbered in order: `first_shard..first_shard +
    /// shards` (where the layout places shards otherwise, [`Map::placed`]
    /// says which it runs).
    pub first_shard: u16,
    pub shards: u16,
    /// Where clients reach it (`host:port`).
    pub client: String,
}

/// One operator of a [`Map`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapOperator {
    pub name: String,
    pub partitions: u32,
}

impl Map {
    /// The map of one node holding every shard, reached at `client`.
    pub fn single(shards: u16, client: String, operators: Vec<MapOperator>) -> Map {
        Map {
            node: 0,
            shards,
            nodes: vec![MapNode {
                first_shard: 0,
                shards,
                client,
            }],
            operators,
            placed: None,
        }
    }

    /// This map placing shards by `layout` (LAYOUT's answer) instead of the
    /// nodes' ranges; refuses a layout of another shard count or naming a
    /// node the map does not list.
    pub fn with_layout(mut self, layout: &Layout) -> Result<Map, String> {
        if layout.node_of.len() != usize::from(self.shards) {
            return Err(format!(
                "a layout of {} shards for a map of {}",
                layout.node_of.len(),
                self.shards
            ));
        }
        if let Some((s, n)) = layout
            .node_of
            .iter()
            .enumerate()
            .find(|(_, n)| usize::from(**n) >= self.nodes.len())
        {
            return Err(format!("shard {s} on node {n}, of {} nodes", self.nodes.len()));
        }
        self.placed = Some(layout.clone());
        Ok(self)
    }

    /// The layout this map places shards by: LAYOUT's answer if it has
    /// one, else the nodes' ranges (what LAYOUT answers for a cluster
    /// numbered in order).
    pub fn layout(&self) -> Layout {
        if let Some(l) = &self.placed {
            return l.clone();
        }
        let mut node_of = vec![0u16; usize::from(self.shards)];
        for (i, n) in self.nodes.iter().enumerate() {
            for s in n.first_shard..n.first_shard.saturating_add(n.shards) {
                if let Some(slot) = node_of.get_mut(usize::from(s)) {
                    *slot = i as u16;
                }
            }
        }
        Layout { version: 0, node_of }
    }

    /// The shards of node `node` (an index into `nodes`), in order (by
    /// [`Map::layout`]).
    pub fn shards_of_node(&self, node: usize) -> Vec<u16> {
        let layout = self.layout();
        (0..self.shards)
            .filter(|s| {
                layout
                    .node_of
                    .get(usize::from(*s))
                    .is_some_and(|n| usize::from(*n) == node)
            })
            .collect()
    }

    /// The shard that owns partition `partition`.
    pub fn shard_of_partition(&self, partition: u32) -> u16 {
        (partition % u32::from(self.shards.max(1))) as u16
    }

    /// The node (index into `nodes`) that holds `shard`.
    pub fn node_of_shard(&self, shard: u16) -> Option<usize> {
        if let Some(l) = &self.placed {
            return l.node_of.get(usize::from(shard)).map(|n| usize::from(*n));
        }
        self.nodes.iter().position(|n| {
            (u32::from(n.first_shard)..u32::from(n.first_shard) + u32::from(n.shards)).contains(&u32::from(shard))
        })
    }

    /// The shard that owns `key` of `operator`, if the map knows the operator.
    pub fn shard_of(&self, operator: &str, key: &Key) -> Option<u16> {
        let op = self.operators.iter().find(|o| o.name == operator)?;
        Some(self.shard_of_partition(key.partition(op.partitions)))
    }

    /// [`Map::shard_of`] by the operator's index in [`Map::operators`].
    pub fn shard_of_operator(&self, operator: usize, key: &Key) -> Option<u16> {
        let op = self.operators.get(operator)?;
        Some(self.shard_of_partition(key.partition(op.partitions)))
    }

    /// Whether the nodes' ranges tile `0..shards` in order and every
    /// operator has partitions: what a decoded map must satisfy.
    pub fn is_consistent(&self) -> bool {
        let mut next = 0u16;
        for n in &self.nodes {
            // An empty range is a spare's (a node that runs no shard).
            if n.first_shard != next {
                return false;
            }
            let Some(end) = next.checked_add(n.shards) else {
                return false;
            };
            next = end;
        }
        next == self.shards
            && self.shards > 0
            && usize::from(self.node) < self.nodes.len()
            && self.operators.iter().all(|o| o.partitions > 0)
    }
}

/// Whether `kind` may travel in an ABORTED frame.
pub fn abort_kind_on_wire(kind: AbortKind) -> bool {
    !matches!(kind, AbortKind::Rejected | AbortKind::Drift | AbortKind::Forgotten)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_ranges_that_overflow_are_inconsistent() {
        let node = |first_shard, shards| MapNode {
            first_shard,
            shards,
            client: "a:1".into(),
        };
        let mut map = Map::single(2, "a:1".into(), vec![]);
        assert!(map.is_consistent());
        // 0..65535 then 65535..65536: past u16, not a tiling of 65535.
        map.shards = u16::MAX;
        map.nodes = vec![node(0, u16::MAX), node(u16::MAX, 1)];
        assert!(!map.is_consistent());
        assert_eq!(map.node_of_shard(u16::MAX), Some(1), "no overflow either way");
    }

    /// A spare's range is empty; a map of spares only places nothing.
    #[test]
    fn a_spare_has_an_empty_range() {
        let node = |first_shard, shards| MapNode {
            first_shard,
            shards,
            client: "a:1".into(),
        };
        let mut map = Map::single(3, "a:1".into(), vec![]);
        map.nodes = vec![node(0, 2), node(2, 0), node(2, 1)];
        assert!(map.is_consistent());
        assert_eq!(map.node_of_shard(1), Some(0));
        assert_eq!(map.node_of_shard(2), Some(2), "not the spare's");
        map.nodes = vec![node(0, 2), node(1, 0), node(2, 1)];
        assert!(!map.is_consistent(), "an empty range still starts where the last ended");
        map.shards = 0;
        map.nodes = vec![node(0, 0)];
        assert!(!map.is_consistent(), "no shard at all");
    }

    #[test]
    fn types_roundtrip_and_split_by_direction() {
        for t in FrameType::ALL {
            assert_eq!(FrameType::from_u8(t as u8), Some(t));
        }
        assert_eq!(FrameType::from_u8(0x00), None);
        assert!(FrameType::Request.is_from_client());
        assert!(!FrameType::Committed.is_from_client());
    }

    #[test]
    fn negotiation_picks_the_newest_common_version() {
        assert_eq!(negotiate(1, 1), Some(1));
        assert_eq!(negotiate(1, 9), Some(VERSION_MAX));
        assert_eq!(negotiate(2, 9), None);
        assert_eq!(negotiate(0, 0), None);
        assert_eq!(negotiate(3, 1), None);
    }
}
