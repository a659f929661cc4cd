//! Connections to every node of an engine, for clients that must ride out
//! a node's failure: `styx bench --connect` and `styx verify`.
//!
//! A [`Pool`] starts from any reachable address of the list it is given,
//! asks that node for the engine's map (MAP: every node, its shards, where
//! clients reach it) and opens `per_node` connections to each node. A
//! request goes to a connection of the node holding the shard that owns its
//! root entity, so it runs without a hop between nodes: by the default rule
//! (partition `p` on shard `p % shards`), except for the partitions PLACEMENT
//! names as moved (`styx rebalance`), which the pool asks for again every
//! [`PLACEMENT_EVERY`] while a run lasts. A request routed by an old
//! placement still runs: the node that takes it sends it on.
//!
//! Shards are placed on nodes by LAYOUT, asked at the start and again
//! whenever a node refuses a request as not its own (`SHUTTING_DOWN`: a
//! spare, which runs no shard, after a handover took its last one away).
//!
//! When a connection breaks (its node was killed, or the cluster is
//! recovering from a failure and every node restarted its shards) the slot
//! is dialled again — its own node first, then the others, which forward —
//! until [`RECONNECT_TIMEOUT`]. A single node is a pool of one.

use std::cell::{Cell, RefCell};
use std::net::{SocketAddr, ToSocketAddrs};
use std::rc::Rc;
use std::time::{Duration, Instant};
use styx_engine::{Address, Request};
use styx_net::client::{ConnectOptions, Connection, Error as ClientError};
use styx_net::{ErrorCode, Map, MapNode, Placement};

/// How long a slot keeps dialling before its request is given up.
pub const RECONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a run asks for the placement again.
pub const PLACEMENT_EVERY: Duration = Duration::from_millis(200);
/// How long an answer to PLACEMENT is waited for.
const PLACEMENT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a pool keeps trying to start (a cluster between rounds closes
/// its connections).
const CONNECT_PATIENCE: Duration = Duration::from_secs(10);
/// The pause between two rounds of dialling.
const REDIAL_PAUSE: Duration = Duration::from_millis(20);

/// One connection of the pool, replaced when it breaks.
struct Slot {
    node: usize,
    conn: RefCell<Option<Connection>>,
    /// A task is dialling for this slot: others wait for it.
    dialling: Cell<bool>,
}

/// Connections to every node of an engine; see the module comment.
pub struct Pool {
    map: Map,
    /// Where each node is reached, in the map's order.
    addrs: Vec<String>,
    /// `per_node` slots of node 0, then node 1, ...
    slots: Vec<Slot>,
    per_node: usize,
    options: ConnectOptions,
    reconnects: Cell<u64>,
    /// The partitions off the default rule, as last heard.
    placement: RefCell<Placement>,
    /// Requests sent to another node than the default rule's, by placement.
    rerouted: Cell<u64>,
    /// Which node runs each shard, as last heard (LAYOUT).
    layout: RefCell<styx_net::Layout>,
    /// A task is asking LAYOUT again: others do not.
    relayouting: Cell<bool>,
}

impl Pool {
    /// Connects to the engine at any of `addrs` (comma-separated
    /// `host:port`s, tried in order), learns its map and opens `per_node`
    /// connections to each of its nodes.
    /// A cluster between two rounds (a node recovering, a handover) closes
    /// connections: the whole start is tried again for a while.
    pub async fn connect(addrs: &str, per_node: usize, options: ConnectOptions) -> Result<Rc<Pool>, String> {
        let deadline = Instant::now() + CONNECT_PATIENCE;
        loop {
            match Pool::try_connect(addrs, per_node, options.clone()).await {
                Ok(pool) => return Ok(pool),
                // An engine reached: it may be between rounds.
                Err((_, true)) if Instant::now() < deadline => {
                    glommio::timer::sleep(Duration::from_millis(50)).await;
                }
                Err((e, _)) => return Err(e),
            }
        }
    }

    /// [`Pool::connect`], once; an error says whether an engine answered
    /// (then it is worth trying again).
    async fn try_connect(addrs: &str, per_node: usize, options: ConnectOptions) -> Result<Rc<Pool>, (String, bool)> {
        let given: Vec<&str> = addrs.split(',').map(str::trim).filter(|a| !a.is_empty()).collect();
        if given.is_empty() {
            return Err(("no address to connect to".into(), false));
        }
        let mut errors = Vec::new();
        let mut answered = false;
        let mut first = None;
        for addr in &given {
            match Connection::connect(*addr, &options).await {
                Ok(c) => {
                    first = Some(c);
                    break;
                }
                Err(e) => {
                    answered |= !matches!(e, ClientError::Connect { .. } | ClientError::Resolve { .. });
                    errors.push(format!("{addr}: {e}"));
                }
            }
        }
        // A server that took the connection and closed it (one between
        // rounds) is worth trying again; nothing listening is not.
        let first = first.ok_or_else(|| (format!("cannot connect: {}", errors.join("; ")), answered))?;
        let again = |e: String| (e, true);
        let map = match first.map().await {
            Ok(map) => map,
            // A server older than MAP: one node holding every shard.
            Err(ClientError::Server { code, .. }) if code == ErrorCode::UNKNOWN_FRAME_TYPE => {
                let shards = first.status().await.map_err(|e| again(format!("STATUS: {e}")))?.shards;
                Map::single(shards, first.peer().to_string(), Vec::new())
            }
            Err(e) => return Err(again(format!("MAP: {e}"))),
        };
        let addrs: Vec<String> = map.nodes.iter().map(|n| reachable(n, first.peer())).collect();
        let layout = map.layout();
        // Nodes that left the cluster (MEMBERS; none said by an older
        // server) are not dialled: their daemons stopped.
        let left = match first.members().await {
            Ok(Some(m)) => m.left,
            _ => Vec::new(),
        };
        let mut slots = Vec::with_capacity(addrs.len() * per_node);
        for (node, addr) in addrs.iter().enumerate() {
            for _ in 0..per_node {
                let shardless = !layout.node_of.contains(&(node as u16));
                let conn = if shardless && left.contains(&(node as u16)) {
                    None
                } else {
                    match Connection::connect(addr.as_str(), &options).await {
                        Ok(c) => Some(c),
                        // A node that runs no shard (a spare, or one that
                        // left the cluster and stopped) need not answer.
                        Err(_) if shardless => None,
                        Err(e) => return Err(again(format!("cannot connect to node {node} at {addr}: {e}"))),
                    }
                };
                slots.push(Slot {
                    node,
                    conn: RefCell::new(conn),
                    dialling: Cell::new(false),
                });
            }
        }
        let placement = first.placement().await.map_err(|e| again(format!("PLACEMENT: {e}")))?;
        first.close();
        Ok(Rc::new(Pool {
            layout: RefCell::new(layout),
            relayouting: Cell::new(false),
            map,
            addrs,
            slots,
            per_node,
            options,
            reconnects: Cell::new(0),
            placement: RefCell::new(placement),
            rerouted: Cell::new(0),
        }))
    }

    /// Asks a live connection of a node that runs shards for the
    /// placement (a spare knows only what ran on it) and keeps it if it is
    /// not older than the one held (a node may not have published a switch
    /// yet).
    pub async fn refresh_placement(&self) {
        let Some(conn) = self
            .slots
            .iter()
            .filter(|s| self.runs_shards(s.node))
            .find_map(|s| s.conn.borrow().clone().filter(|c| !c.is_closed()))
        else {
            return;
        };
        // A node that stopped answering must not hold up the end of a run.
        let asked = futures_lite::future::or(async { Some(conn.placement().await) }, async {
            glommio::timer::sleep(PLACEMENT_TIMEOUT).await;
            None
        });
        if let Some(Ok(p)) = asked.await
            && p.version >= self.placement.borrow().version
        {
            *self.placement.borrow_mut() = p;
        }
    }

    /// Asks a live connection for the layout and keeps it if it is newer
    /// than the one held: a node refused a request as not its own (a
    /// spare). One task asks at a time; the others go on meanwhile.
    pub async fn refresh_layout(&self) {
        if self.relayouting.replace(true) {
            return;
        }
        // Set again however this ends (a task dropped while it asks).
        struct Done<'a>(&'a Cell<bool>);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.set(false);
            }
        }
        let _done = Done(&self.relayouting);
        let conn = self
            .slots
            .iter()
            .find_map(|s| s.conn.borrow().clone().filter(|c| !c.is_closed()));
        if let Some(conn) = conn {
            let asked = futures_lite::future::or(async { Some(conn.layout().await) }, async {
                glommio::timer::sleep(PLACEMENT_TIMEOUT).await;
                None
            });
            if let Some(Ok(Some(l))) = asked.await {
                let held = self.layout.borrow().version;
                let fits = l.node_of.len() == usize::from(self.map.shards)
                    && l.node_of.iter().all(|n| usize::from(*n) < self.addrs.len());
                if l.version > held && fits {
                    self.layout.replace(l);
                }
            }
        }
    }

    /// The node that runs `shard`, as last heard.
    fn node_of_shard(&self, shard: u16) -> Option<usize> {
        self.layout
            .borrow()
            .node_of
            .get(usize::from(shard))
            .map(|n| usize::from(*n))
    }

    /// The placement's version as last heard.
    pub fn placement_version(&self) -> u64 {
        self.placement.borrow().version
    }

    /// Requests routed to another node than the default rule's.
    pub fn rerouted(&self) -> u64 {
        self.rerouted.get()
    }

    /// The `i`-th slot among those of the node that holds `request`'s root
    /// entity by the placement; `shard`'s node for a request to a
    /// partition or of an operator the map does not list.
    pub fn slot_for(&self, request: &Request, shard: u16, i: usize) -> usize {
        if self.addrs.len() == 1 {
            // One node holds every shard: no placement to look up (two key
            // hashes a request, ~2% of a closed-loop client's CPU).
            return self.slot_for_shard(shard, i);
        }
        let placed = match &request.address {
            Address::Entity(key) => {
                let op = request.function.op.0 as usize;
                let by_default = self.map.shard_of_operator(op, key);
                let placed = self.placement.borrow().shard_of_operator(&self.map, op, key);
                if let (Some(d), Some(p)) = (by_default, placed)
                    && self.node_of_shard(d) != self.node_of_shard(p)
                {
                    self.rerouted.set(self.rerouted.get() + 1);
                }
                placed
            }
            Address::Partition(_) => None,
        };
        self.slot_for_shard(placed.unwrap_or(shard), i)
    }

    pub fn map(&self) -> &Map {
        &self.map
    }

    /// Which node runs each shard, as last heard.
    pub fn layout(&self) -> styx_net::Layout {
        self.layout.borrow().clone()
    }

    pub fn nodes(&self) -> usize {
        self.addrs.len()
    }

    /// Where node `i` is reached.
    pub fn addr(&self, node: usize) -> &str {
        &self.addrs[node]
    }

    /// Connections opened again after one broke.
    pub fn reconnects(&self) -> u64 {
        self.reconnects.get()
    }

    /// Slots in all.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The `i`-th slot among those of the node holding `shard`.
    pub fn slot_for_shard(&self, shard: u16, i: usize) -> usize {
        let node = self.node_of_shard(shard).unwrap_or(0);
        node * self.per_node + i % self.per_node
    }

    /// The in-flight limit of every slot together (as connected now).
    pub fn in_flight_max(&self) -> usize {
        self.slots
            .iter()
            .map(|s| s.conn.borrow().as_ref().map_or(0, Connection::in_flight_max))
            .sum()
    }

    /// Slot `i`'s connection as it is now, broken or not.
    pub fn current(&self, i: usize) -> Option<Connection> {
        self.slots[i].conn.borrow().clone()
    }

    /// Slot `i`'s connection, dialled again if it broke: its node first,
    /// then the others. Err once [`RECONNECT_TIMEOUT`] passed without one.
    pub async fn get(&self, i: usize) -> Result<Connection, String> {
        let slot = &self.slots[i];
        let deadline = Instant::now() + RECONNECT_TIMEOUT;
        loop {
            if let Some(c) = slot.conn.borrow().as_ref().filter(|c| !c.is_closed()) {
                return Ok(c.clone());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "no node answered for {}s (slot {i}, node {} at {})",
                    RECONNECT_TIMEOUT.as_secs(),
                    slot.node,
                    self.addrs[slot.node]
                ));
            }
            if slot.dialling.get() {
                glommio::timer::sleep(REDIAL_PAUSE / 4).await;
                continue;
            }
            slot.dialling.set(true);
            let dialled = self.dial(slot.node).await;
            slot.dialling.set(false);
            match dialled {
                Some(c) => {
                    self.reconnects.set(self.reconnects.get() + 1);
                    *slot.conn.borrow_mut() = Some(c);
                }
                None => glommio::timer::sleep(REDIAL_PAUSE).await,
            }
        }
    }

    /// Lets go of slot `i`'s connection if it is still `conn`: its node
    /// refused a request as one that takes none (`SHUTTING_DOWN`: draining,
    /// or a spare since a handover), so the next [`Pool::get`] dials again
    /// (the slot's node, then the others that run shards: a slot whose
    /// node was down may hold a connection to a spare). The connection is
    /// not closed: requests other lanes have on it are answered, and it
    /// closes once the last of them lets go.
    pub fn forget(&self, i: usize, conn: &Connection) {
        let mut held = self.slots[i].conn.borrow_mut();
        if held.as_ref().is_some_and(|c| c.same(conn)) {
            *held = None;
        }
    }

    /// Whether node `node` runs a shard, by the layout held.
    fn runs_shards(&self, node: usize) -> bool {
        self.layout.borrow().node_of.iter().any(|n| usize::from(*n) == node)
    }

    /// One round of dialling: `node`, then every other node in order that
    /// runs shards (a spare takes no request).
    async fn dial(&self, node: usize) -> Option<Connection> {
        let n = self.addrs.len();
        for k in 0..n {
            if k > 0 && !self.runs_shards((node + k) % n) {
                continue;
            }
            let addr = &self.addrs[(node + k) % n];
            if let Ok(c) = Connection::connect(addr.as_str(), &self.options).await {
                return Some(c);
            }
        }
        None
    }

    /// A live connection of every slot of a node that runs shards (by the
    /// layout held: a spare refuses requests), after dialling every broken
    /// slot again (for the reads at the end of a run).
    pub async fn all(&self) -> Result<Vec<Connection>, String> {
        let mut out = Vec::with_capacity(self.slots.len());
        for (i, slot) in self.slots.iter().enumerate() {
            // A spare (a node that runs no shard) refuses requests.
            if self.runs_shards(slot.node) {
                out.push(self.get(i).await?);
            }
        }
        Ok(out)
    }

    pub fn close(&self) {
        for s in &self.slots {
            if let Some(c) = s.conn.borrow().as_ref() {
                c.close();
            }
        }
    }
}

/// The address a client reaches `node` at: its own, with an unspecified
/// host replaced by the host that answered the map.
pub fn reachable(node: &MapNode, answered: SocketAddr) -> String {
    match node.client.to_socket_addrs().ok().and_then(|mut a| a.next()) {
        Some(a) if a.ip().is_unspecified() => SocketAddr::new(answered.ip(), a.port()).to_string(),
        _ => node.client.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unspecified_host_is_the_one_that_answered() {
        let node = |client: &str| MapNode {
            first_shard: 0,
            shards: 1,
            client: client.into(),
        };
        let answered: SocketAddr = "10.1.2.3:7000".parse().unwrap();
        assert_eq!(reachable(&node("0.0.0.0:7100"), answered), "10.1.2.3:7100");
        assert_eq!(reachable(&node("127.0.0.1:7100"), answered), "127.0.0.1:7100");
        assert_eq!(reachable(&node("[::]:7100"), answered), "10.1.2.3:7100");
    }
}
