//! Settings of the core and the requests it takes.

use crate::abort::Abort;
use crate::codec::Payload;
use crate::ctx::CallLimits;
use crate::ids::{Address, Epoch, FnId, ShardId, Tid};

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

/// The core's settings. Every bound has a name and a default.
#[derive(Clone, Debug)]
pub struct Config {
    /// Transactions one shard seals into one epoch.
    pub epoch_txns_max: usize,
    /// Least time between the starts of two epochs, in microseconds: lets a
    /// batch gather when latency matters less than throughput. 0 starts an
    /// epoch as soon as the previous one ends and work is waiting.
    pub epoch_gather_us: u64,
    /// Requests waiting to be sequenced on one shard; more are refused.
    pub pending_txns_max: usize,
    /// Local messages (invocations, replies) one step handles before the
    /// driver gets control back to ship the batches produced so far: peers
    /// start on their share of the epoch while this shard goes on.
    pub step_messages_max: usize,
    /// Bounds on a transaction's call graph.
    pub limits: CallLimits,
    pub durability: Durability,
    /// Record per-epoch outcomes and serialization edges (for tests).
    pub record_history: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            epoch_txns_max: 10_000,
            epoch_gather_us: 0,
            pending_txns_max: 1_000_000,
            step_messages_max: 64,
            limits: CallLimits::default(),
            durability: Durability::None,
            record_history: false,
        }
    }
}

/// A client request: the root invocation of one transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub function: FnId,
    pub address: Address,
    pub args: Payload,
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
