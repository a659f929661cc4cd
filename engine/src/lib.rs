//! The deterministic core of Styx: transactional stateful functions run as
//! epochs of deterministic transactions (Aria-style optimistic execution with
//! a Calvin-style fallback), one shard per core.
//!
//! The core does no I/O, reads no clock and starts no thread: a [`Shard`] is
//! a state machine driven by the production runtime or by the [`sim`]ulator,
//! so any run can be replayed from its inputs.
//!
//! - [`guide`]: how to write an application, start to finish.
//! - [`App`], [`Ctx`]: the programming model (operators, functions, calls).
//! - [`typed`]: the same as Rust types and methods — `#[entity]`,
//!   `#[functions]`, typed proxies, `#[derive(Encode, Decode)]` — and
//!   [`App::schema`], the printable list of what an application serves.
//! - [`Shard`]: the epoch protocol on one shard.
//! - [`PartitionMap`], [`Move`]: which shard owns each partition, and
//!   moving one at an epoch boundary; [`balance`]: which moves even out
//!   the load, from per-partition counts.
//! - [`Serial`]: the same functions run serially, as oracle and ceiling.
//! - [`recovery`]: from what disks hold to what each shard restores and
//!   replays (pure; the runtime and the simulator share it).
//! - [`sim::Sim`]: every shard in one thread, messages in a seeded order;
//!   [`sim::Disks`] models what its shards put on disk.
//! - [`oracle`]: a run checked against serial execution (tests).

#![forbid(unsafe_code)]

// The macros' expansions name the engine `::styx_engine`, here too.
extern crate self as styx_engine;

mod abort;
mod app;
pub mod balance;
mod bytes;
mod codec;
mod config;
mod ctx;
mod epoch;
pub mod guide;
mod history;
mod ids;
pub mod interval;
mod key;
pub mod layout;
mod message;
pub mod oracle;
mod partition_map;
pub mod recovery;
pub mod rng;
mod schema;
mod serial;
mod shard;
pub mod sim;
mod store;
pub mod typed;
mod value;
pub mod wire;

pub use abort::{ABORT_MESSAGE_LEN_MAX, Abort, AbortKind};
pub use app::{
    App, FnKind, Function, GET_FUNCTION, NAME_LEN_MAX, Operator, PARTITIONS_MAX, SCAN_FUNCTION, SCAN_LIMIT_MAX,
    SCAN_PAGE_BYTES_MAX,
};
pub use bytes::{mix64, stable_hash};
pub use codec::{Decode, DecodeError, Encode, PAYLOAD_LEN_MAX, Payload, Writer};
pub use config::{
    Batch, ClientSeq, Config, Durability, EPOCH_FALLBACK_HIGH_PCT, EPOCH_FALLBACK_LOW_PCT, EPOCH_TXNS_MAX_DEFAULT,
    EPOCH_TXNS_MIN, EPOCH_TXNS_START, Outcome, Reply, Request, SnapshotChunk, Token,
};
pub use ctx::{Call, CallLimits, Ctx};
pub use history::{EpochRecord, serial_order};
pub use ids::{Address, Epoch, FnId, OpId, SHARDS_MAX, ShardId, ShardSet, Tid, partition_owner};
pub use key::{KEY_LEN_MAX, Key, KeyPart};
pub use layout::{HANDOVER_FUNCTION, HANDOVER_FUNCTION_INDEX, Handover, Layout};
pub use message::{Invoke, Message, Parent, Phase, Reply as CallReply, flags};
pub use partition_map::{MOVE_FUNCTION, MOVE_FUNCTION_INDEX, Move, MoveShare, PartitionMap};
pub use schema::{Field, FunctionSchema, OperatorSchema, Schema, Signature, TypeDef, Types, Variant, WireType};
pub use serial::Serial;
pub use shard::{CLIENTS_MAX, Checkpoint, Handoff, OUTCOMES_PER_CLIENT_MAX, Outputs, Shard, Stage, Stats, client_home};
pub use styx_macros::{Decode, Encode, entity, functions};
pub use typed::{Entity, EntityRef, Functions, Invoker, TypedRequest, missing_entity};
pub use value::{Load, Scratch, Store, VALUE_INLINE_MAX, Value};
