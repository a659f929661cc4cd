//! What shards say to each other.
//!
//! Messages travel in batches (a `Vec<Message>` per destination per step) over
//! FIFO links: the protocol relies on per-link order (a `Finish` follows the
//! invocations of its transaction; `Done2` follows every `Finish` its sender
//! sent). Messages of a later stage than the receiver's are deferred by the
//! receiver, never dropped.

use crate::abort::Abort;
use crate::codec::Payload;
use crate::ids::{Address, Epoch, FnId, ShardId, ShardSet, Tid};

/// The execution phases of an epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    /// Optimistic execution against the epoch's start state.
    Optimistic = 1,
    /// Calvin-style re-execution of the transactions that must not commit.
    Fallback = 2,
    /// Serial re-execution, in tid order, of the phase-2 transactions that
    /// left their recorded read/write set.
    Serial = 3,
}

impl Phase {
    /// How many phases there are: per-phase tables are arrays this long.
    pub(crate) const COUNT: usize = 3;

    /// The phase's position in a per-phase table (optimistic, fallback,
    /// serial). The discriminants (1, 2, 3) are the wire encoding instead.
    #[inline]
    pub(crate) const fn index(self) -> usize {
        match self {
            Phase::Optimistic => 0,
            Phase::Fallback => 1,
            Phase::Serial => 2,
        }
    }
}

// Every phase has its own slot in a per-phase table.
const _: () = {
    assert!(Phase::Optimistic.index() < Phase::COUNT);
    assert!(Phase::Fallback.index() < Phase::COUNT);
    assert!(Phase::Serial.index() < Phase::COUNT);
    assert!(Phase::Optimistic.index() != Phase::Fallback.index());
    assert!(Phase::Fallback.index() != Phase::Serial.index());
    assert!(Phase::Serial.index() != Phase::Optimistic.index());
};

/// Who waits for an invocation's reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parent {
    /// The transaction's root: the reply goes to its coordinator.
    Root { coordinator: ShardId, index: u32 },
    /// A call: the reply goes to child slot `child` of invocation `task`.
    Call { shard: ShardId, task: u32, child: u32 },
}

impl Parent {
    pub fn shard(self) -> ShardId {
        match self {
            Parent::Root { coordinator, .. } => coordinator,
            Parent::Call { shard, .. } => shard,
        }
    }
}

/// Run `function` at `address` as part of transaction `tid`.
#[derive(Clone, Debug)]
pub struct Invoke {
    pub epoch: Epoch,
    pub phase: Phase,
    pub tid: Tid,
    pub now_us: u64,
    pub function: FnId,
    pub address: Address,
    /// The address's partition, and its key's stable hash (0 for a
    /// partition address): computed once by the sender.
    pub partition: u32,
    pub hash: u64,
    pub args: Payload,
    pub seed: u64,
    pub depth: u16,
    pub parent: Parent,
    /// In phase 3, the position of the transaction in the serial queue.
    pub step: u32,
}

/// An invocation and all it called have finished.
#[derive(Clone, Debug)]
pub struct Reply {
    pub parent: Parent,
    /// What the invocation's body returned.
    pub result: Result<Payload, Abort>,
    /// The transaction-level abort of the subtree, if any: the invocation's
    /// own, else its lowest-numbered child's (a deterministic choice).
    pub tree_abort: Option<Abort>,
    /// The shards the subtree ran on.
    pub participants: ShardSet,
}

/// A message between shards.
#[derive(Clone, Debug)]
pub enum Message {
    Invoke(Invoke),
    Reply(Reply),
    /// The sender's roots of `epoch` all finished phase 1.
    Done1 {
        epoch: Epoch,
        /// The sender's sequencer counter after sealing the epoch.
        lc: u64,
        /// Transactions coordinated by the sender that aborted by their own
        /// logic: their accesses do not count as reservations.
        aborted: Vec<Tid>,
        /// Partition moves the sender sequenced this epoch: every shard
        /// decides every shard's at the epoch's end, in tid order.
        moves: Vec<(Tid, crate::partition_map::Move)>,
        /// Partitions moving away from the sender whose copy it has sent:
        /// every shard switches them at the epoch's end.
        switches: Vec<(crate::OpId, u32)>,
        /// Shard handovers the sender sequenced this epoch: every shard
        /// decides every shard's at the epoch's end, in tid order.
        handovers: Vec<(Tid, crate::layout::Handover)>,
    },
    /// Conflict flags the sender found for the keys it owns. `snapshot`:
    /// the sender wants a snapshot of the state after this epoch (every
    /// shard takes one if any shard wants it).
    Flags {
        epoch: Epoch,
        flags: Vec<(Tid, u8)>,
        snapshot: bool,
    },
    /// A phase-2 (or, with `serial`, phase-3) transaction finished: apply
    /// (`commit`) or discard its buffered writes and release its locks.
    Finish {
        epoch: Epoch,
        tid: Tid,
        commit: bool,
        serial: bool,
    },
    /// The sender's phase-2 roots of `epoch` all finished. Not sent in an
    /// epoch where no transaction falls back (every shard knows that from
    /// the flags, see `shard::phase1`).
    Done2 {
        epoch: Epoch,
        /// Transactions coordinated by the sender whose re-execution left
        /// its recorded set, with their coordinator: phase 3 runs them.
        drifted: Vec<(Tid, ShardId)>,
    },
    /// Phase 3: the serial queue's transaction number `index` may run (all
    /// before it are finished); `index == len` ends the epoch.
    Next {
        epoch: Epoch,
        index: u32,
    },
    /// A request whose client's home is the receiver: sequence it there
    /// (exactly-once needs one shard to see every attempt of a client).
    Submit {
        origin: ShardId,
        token: crate::Token,
        request: crate::Request,
    },
    /// The reply to a forwarded request, for the shard that took it.
    Replied {
        token: crate::Token,
        tid: Tid,
        outcome: crate::Outcome,
    },
    /// The sender's input log is durable through `epoch`.
    Durable {
        epoch: Epoch,
    },
    /// Entities of `partition` of `op`, which moves from the sender to the
    /// receiver, taken at the end of `epoch`. Before the switch (`last`
    /// false) a share of the background copy, which the receiver stages;
    /// `last` marks the switch's delta (the entities written during the
    /// copy, and `deleted`, those deleted): the receiver installs the copy
    /// with the delta over it before it starts the next epoch.
    Install {
        epoch: Epoch,
        op: crate::OpId,
        partition: u32,
        entities: Vec<(crate::Key, crate::Value)>,
        deleted: Vec<crate::Key>,
        last: bool,
    },
}

impl Message {
    /// The epoch and phase this message belongs to, for deferral; `None`
    /// for messages that can be handled at any time.
    pub(crate) fn stage(&self) -> Option<(Epoch, Phase)> {
        match self {
            Message::Invoke(inv) => Some((inv.epoch, inv.phase)),
            Message::Next { epoch, .. }
            | Message::Finish {
                epoch, serial: true, ..
            } => Some((*epoch, Phase::Serial)),
            Message::Done1 { epoch, .. } | Message::Flags { epoch, .. } | Message::Done2 { epoch, .. } => {
                Some((*epoch, Phase::Optimistic))
            }
            Message::Finish { epoch, .. } => Some((*epoch, Phase::Fallback)),
            // An `Install` is buffered by its receiver until the epoch ended
            // there (see `shard::moves`).
            Message::Reply(_)
            | Message::Durable { .. }
            | Message::Submit { .. }
            | Message::Replied { .. }
            | Message::Install { .. } => None,
        }
    }
}

/// Conflict flags (protocol §4).
pub mod flags {
    /// Wrote a key a smaller tid also wrote.
    pub const WAW: u8 = 1;
    /// Read a key a smaller tid wrote.
    pub const RAW: u8 = 2;
    /// Wrote a key a smaller tid read.
    pub const WAR: u8 = 4;

    /// Aria with deterministic reordering.
    #[inline]
    pub fn commits(f: u8) -> bool {
        f & WAW == 0 && (f & RAW == 0 || f & WAR == 0)
    }
}
