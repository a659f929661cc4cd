//! TPC-C's NewOrder and Payment as entity functions (benchmarks.md).
//!
//! - [`schema`]: the tables as operators, the rows as entity state, keys;
//! - [`functions`]: the two transactions and the per-row functions they call;
//! - [`load`]: the initial database at full ([`Scale::spec`]) or reduced scale;
//! - [`generate`]: the request mix, with NURand customer and item ids;
//! - [`check`]: the consistency conditions of clause 3.3.2 on a final state.
//!
//! ```
//! use styx_bench::tpcc::{self, Functions, Generator, Scale};
//!
//! let app = tpcc::app(8);
//! let scale = Scale::small(2);
//! let initial = tpcc::load(&app, &scale, 7);
//! let state = initial.iter().map(|(op, k, v)| ((*op, k.clone()), v.clone())).collect();
//! assert!(tpcc::check(&app, &state).is_empty());
//! let mut requests = Generator::new(Functions::of(&app), scale, 1);
//! let _ = requests.next(); // its root entity is `request.address`
//! ```
//!
//! # Placement: hashed rows, cross-partition calls
//!
//! TPC-C is "partitioned by warehouse": a system places a warehouse's
//! districts, customers and stock together, so that most transactions stay
//! on one node. This engine places an entity by a stable hash of its whole
//! key, modulo its operator's partition count; an application cannot choose
//! the partition. Two ways around it were rejected:
//!
//! - *A few big entities per warehouse* (all stock in one, all customers in
//!   another): every write re-archives the whole value (megabytes of stock),
//!   and every NewOrder of a warehouse would write the same entity, so the
//!   epoch protocol could commit only one of them per epoch.
//! - *Salted keys* that hash to the warehouse's partition: finding the salt
//!   costs about as many hashes as there are partitions, on every key of
//!   every call, and makes keys unreadable.
//!
//! So rows are entities spread by hash, and a transaction calls across
//! partitions and shards; the engine ships those calls in batches. Every
//! per-warehouse key starts with the warehouse id, so placement by a key
//! prefix, were the engine to offer it, would co-locate a warehouse without
//! changing this module. "Partitioned by warehouse" survives in the load:
//! a [`Generator`] can be bound to one home warehouse, as a TPC-C terminal.
//!
//! # Conflicts
//!
//! Rows that one transaction writes and the other only reads are kept in
//! separate entities from rows both write (D_NEXT_O_ID is split from D_YTD,
//! see [`schema`]), so NewOrder never both reads what a Payment wrote and
//! writes what it read: the protocol's reordering commits the pair without
//! re-execution. What conflicts is what TPC-C means to conflict: Payments of
//! one warehouse on W_YTD, NewOrders of one district on D_NEXT_O_ID, and
//! NewOrders on shared stock.
//!
//! # Order ids and re-execution
//!
//! A NewOrder's write set depends on what it reads: the ORDER, ORDER-LINE
//! and NEW-ORDER keys carry the O_ID it took from D_NEXT_O_ID. When two
//! NewOrders of one district share an epoch, the later one's phase-2
//! re-execution reads a larger D_NEXT_O_ID and would write other keys than
//! it recorded, so the engine runs it again in phase 3, serially in tid
//! order at the end of the same epoch. Many NewOrders of one district in
//! one epoch therefore serialize (each a few cross-shard hops); TPC-C's own
//! load model — ten terminals per warehouse, one transaction outstanding
//! each ([`Generator::home`]) — keeps that short. The alternative, keying
//! order rows by something known before the read (the transaction id) with
//! an O_ID index beside them, trades this for an extra write per order and
//! lookups through the index; it was not taken, to keep the rows where
//! TPC-C's other transactions look for them.

pub mod check;
pub mod functions;
pub mod generate;
pub mod load;
pub mod random;
pub mod schema;

pub use check::{State, check};
pub use functions::{
    CustomerPayment, Functions, ITEM_NOT_VALID, Line, NewOrder, NewOrderReply, Payment, PaymentReply, StockOrder, app,
    app_with, install, install_closures,
};
pub use generate::{Generator, Mix, Txn};
pub use load::{LOAD_TIME_US, Scale, load, load_each};
pub use schema::Tables;
