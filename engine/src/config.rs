//! Settings of the core and the requests it takes.

use crate::abort::Abort;
use crate::codec::Payload;
use crate::ctx::CallLimits;
use crate::ids::{Address, Epoch, FnId, ShardId, Tid};
use crate::partition_map::MoveShare;

/// A driver's handle for a request, returned with its reply.
pub type Token = u64;

/// When replies may be released.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// No input log: replies leave when their epoch is committed.
    None,
    /// Each sealed batch is emitted for the log; replies of an epoch leave
    /// once every shard reported its batch of that epoch durable.
    Log,
}

/// The smallest epoch adaptive sizing goes down to: below it, the barriers
/// cost more than the conflicts they avoid.
pub const EPOCH_TXNS_MIN: usize = 64;
/// Transactions one shard seals into one epoch at most, by default. Larger
/// epochs amortize the barriers over more transactions, but each costs
/// more: an epoch's entries, reservations and lock queues are revisited in
/// every phase, and past a few hundred transactions per shard they no
/// longer stay in cache between phases when the state is large. On the
/// 2-core VM of docs/BENCHMARKS.md, against the 10 000 this replaced:
/// YCSB-T at 1M accounts on 2 shards ~1.1×, travel and movie ~1.04×, the
/// rest within noise, closed and open loop over TCP unchanged.
pub const EPOCH_TXNS_MAX_DEFAULT: usize = 256;
/// The size adaptive sizing starts from (or `epoch_txns_max`, if smaller).
pub const EPOCH_TXNS_START: usize = 1_024;
/// Adaptive sizing shrinks an epoch whose share of transactions that fell
/// back to phase 2 exceeded this, in percent …
pub const EPOCH_FALLBACK_HIGH_PCT: u64 = 10;
/// … and grows a full one whose share stayed below this.
pub const EPOCH_FALLBACK_LOW_PCT: u64 = 3;

/// The core's settings. Every bound has a name and a default.
#[derive(Clone, Debug)]
pub struct Config {
    /// Transactions one shard seals into one epoch, at most.
    pub epoch_txns_max: usize,
    /// Size epochs by their conflicts, within `EPOCH_TXNS_MIN ..=
    /// epoch_txns_max`: an epoch whose fallback share was high makes the
    /// next one smaller, a full one without conflicts the next one larger.
    /// (Larger epochs amortize barriers; smaller ones conflict less.) Off,
    /// every epoch seals up to `epoch_txns_max`.
    pub epoch_txns_adaptive: bool,
    /// Least time between the starts of two epochs, in microseconds: lets a
    /// batch gather when latency matters less than throughput. 0 starts an
    /// epoch as soon as the previous one ends and work is waiting.
    pub epoch_gather_us: u64,
    /// Requests waiting to be sequenced on one shard; more are refused.
    pub pending_txns_max: usize,
    /// Local messages (invocations, replies) one step handles before the
    /// driver gets control back to ship the batches produced so far: peers
    /// start on their share of the epoch while this shard goes on. Among
    /// several shards a small epoch's steps are shorter (down to 8, or
    /// this if less): see `Shard::step_budget`.
    pub step_messages_max: usize,
    /// Bounds on a transaction's call graph.
    pub limits: CallLimits,
    pub durability: Durability,
    /// Take an incremental snapshot at the first epoch end after this many
    /// microseconds since the last one began; 0 never snapshots.
    pub snapshot_interval_us: u64,
    /// Record per-epoch outcomes and serialization edges (for tests).
    pub record_history: bool,
    /// Entities of a moving partition its old owner copies to the new one
    /// at an epoch's end, at most (the background copy's share; a retiring
    /// partition is deleted by the same shares). The share is
    /// [`Config::move_share_per_ms`] for each millisecond of logged time
    /// since the last share, at least [`Config::move_share_min_entities`]:
    /// a move takes about the same fraction of every epoch, short or long.
    /// On two cores, 6.4M accounts, a 100 000-entity partition moving,
    /// saturated throughput is ~0.92× of steady (a fixed 1 024 per epoch
    /// end: ~0.6×; docs/BENCHMARKS.md, "A move's share follows the logged
    /// time"). These three are the pace a shard writes into a move request
    /// that names none ([`Config::move_share`]): the pace is logged with
    /// the move, so replay switches it at the same epoch with any values.
    pub move_share_entities: usize,
    /// The share of the first epoch end after no copy (or no retirement)
    /// was under way on the shard, and of epochs that follow each other
    /// within microseconds; at most `move_share_entities`.
    pub move_share_min_entities: usize,
    /// Entities per millisecond of logged time since the last share (0:
    /// always the least share).
    pub move_share_per_ms: usize,
    /// At the end of an epoch where the layout changed, every shard stops
    /// and waits for its driver to hand it off and rebuild it
    /// ([`Shard::hand_off`](crate::Shard::hand_off),
    /// [`Shard::take_over`](crate::Shard::take_over)) — not only the shards
    /// handed to another node. A runtime whose links between nodes follow
    /// the layout re-points them then, when nothing of the next epoch
    /// exists anywhere (docs/nodes.md, step 4). Off, shards that stay
    /// where they are go straight on (the simulator's default).
    pub pause_at_handover: bool,
    /// Whether a node may be left running no shard (a spare). Off, a
    /// handover that would leave its node without shards is refused at
    /// submit (the runtime runs no spare yet: docs/nodes.md).
    pub spare_nodes: bool,
}

impl Config {
    /// The pace of a move that names none: [`Config::move_share_entities`],
    /// [`Config::move_share_min_entities`] and
    /// [`Config::move_share_per_ms`], brought in range (at least one
    /// entity, the least no more than the most).
    pub fn move_share(&self) -> MoveShare {
        let most = u32::try_from(self.move_share_entities).unwrap_or(u32::MAX).max(1);
        MoveShare {
            most,
            least: u32::try_from(self.move_share_min_entities)
                .unwrap_or(u32::MAX)
                .clamp(1, most),
            per_ms: u32::try_from(self.move_share_per_ms).unwrap_or(u32::MAX),
        }
    }
}

impl Default for Config {
    fn default() -> Config {
        Config {
            epoch_txns_max: EPOCH_TXNS_MAX_DEFAULT,
            epoch_txns_adaptive: true,
            epoch_gather_us: 0,
            pending_txns_max: 1_000_000,
            step_messages_max: 64,
            limits: CallLimits::default(),
            durability: Durability::None,
            snapshot_interval_us: 0,
            record_history: false,
            move_share_entities: 1_024,
            move_share_min_entities: 16,
            move_share_per_ms: 100,
            pause_at_handover: false,
            spare_nodes: true,
        }
    }
}

/// A client request: the root invocation of one transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub function: FnId,
    pub address: Address,
    pub args: Payload,
    /// For exactly-once: who sent it. `None` runs it every time it arrives.
    pub client: Option<ClientSeq>,
}

/// A client's request number: a retry with the same `client` and `seq`
/// returns the first attempt's outcome and never runs twice, across
/// connections, shards and crashes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ClientSeq {
    pub client: u64,
    pub seq: u64,
    /// Every seq below this one has its outcome at the client: the engine
    /// may forget them (a retry of one is refused as forgotten).
    pub ack: u64,
}

/// The final outcome of a transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Committed(Payload),
    Aborted(Abort),
}

/// A released reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub token: Token,
    pub tid: Tid,
    pub outcome: Outcome,
}

/// One shard's input for one epoch, as logged: replaying the batches of an
/// epoch on every shard reproduces its state and replies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    pub epoch: Epoch,
    pub shard: ShardId,
    /// The sequencer counter after sealing.
    pub lc: u64,
    /// The batch's timestamp (µs since the Unix epoch): `ctx.now()`.
    pub now_us: u64,
    pub txns: Vec<(Tid, Request)>,
}

impl Batch {
    /// The batch's transactions: its entries but the shard's logged
    /// snapshot interval (`crate::interval`), which nothing runs or
    /// answers.
    pub fn transactions(&self) -> impl Iterator<Item = &(Tid, Request)> {
        self.txns
            .iter()
            .filter(|(_, r)| crate::interval::SnapshotInterval::of(r).is_none())
    }
}

/// Part of one shard's incremental snapshot at the end of `epoch`: the
/// entities changed since the shard's previous snapshot (`None`: deleted).
/// Chunks of one snapshot come in order; the last carries the shard's
/// machine state (`meta`, for [`crate::Shard::restore`]) and `last: true`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotChunk {
    pub epoch: Epoch,
    pub shard: ShardId,
    pub entries: Vec<(crate::OpId, crate::Key, Option<crate::Value>)>,
    pub last: bool,
    pub meta: Vec<u8>,
    /// The snapshot holds every entity of the shard, not the changes since
    /// its previous one: it starts a new chain (a shard's first snapshot
    /// after it was handed to another node, which holds no earlier file).
    pub base: bool,
}

impl crate::codec::Encode for Request {
    fn encode(&self, w: &mut crate::codec::Writer) {
        self.function.op.0.encode(w);
        self.function.index.encode(w);
        match &self.address {
            Address::Entity(k) => {
                0u8.encode(w);
                k.as_bytes().to_vec().encode(w);
            }
            Address::Partition(p) => {
                1u8.encode(w);
                p.encode(w);
            }
        }
        self.args.encode(w);
        self.client.map(|c| (c.client, c.seq, c.ack)).encode(w);
    }
}

impl crate::codec::Decode for Request {
    fn decode(input: &mut &[u8]) -> Result<Request, crate::DecodeError> {
        let op = u16::decode(input)?;
        let index = u16::decode(input)?;
        let address = match u8::decode(input)? {
            0 => {
                let bytes = Vec::<u8>::decode(input)?;
                if bytes.len() > crate::KEY_LEN_MAX {
                    return Err(crate::DecodeError::Length(bytes.len() as u64));
                }
                Address::Entity(crate::Key::from_bytes(&bytes))
            }
            1 => Address::Partition(u32::decode(input)?),
            t => return Err(crate::DecodeError::Tag(t)),
        };
        let args = <Payload as crate::codec::Decode>::decode(input)?;
        let client = Option::<(u64, u64, u64)>::decode(input)?.map(|(client, seq, ack)| ClientSeq { client, seq, ack });
        Ok(Request {
            function: FnId {
                op: crate::OpId(op),
                index,
            },
            address,
            args,
            client,
        })
    }
}

impl crate::codec::Encode for Outcome {
    fn encode(&self, w: &mut crate::codec::Writer) {
        match self {
            Outcome::Committed(p) => {
                0u8.encode(w);
                p.encode(w);
            }
            Outcome::Aborted(a) => {
                1u8.encode(w);
                (a.kind() as u8).encode(w);
                a.message().encode(w);
            }
        }
    }
}

impl crate::codec::Decode for Outcome {
    fn decode(input: &mut &[u8]) -> Result<Outcome, crate::DecodeError> {
        match u8::decode(input)? {
            0 => Ok(Outcome::Committed(<Payload as crate::codec::Decode>::decode(input)?)),
            1 => {
                let kind = u8::decode(input)?;
                let kind = crate::AbortKind::from_u8(kind).ok_or(crate::DecodeError::Tag(kind))?;
                Ok(Outcome::Aborted(Abort::with_kind(kind, String::decode(input)?)))
            }
            t => Err(crate::DecodeError::Tag(t)),
        }
    }
}
