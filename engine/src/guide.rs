//! # Writing an application
//!
//! A Styx application is a set of **entities**: Rust structs whose state
//! the engine keeps in memory beside the code, partitioned over shards,
//! and whose `async fn`s are the **functions** clients call. Every client
//! request runs as one serializable, exactly-once transaction, however
//! many functions on however many shards it calls. This guide walks
//! through one application, a small shop, from its state to its tests.
//! Every example compiles and runs as a test (`cargo test --doc`).
//!
//! ## Entities
//!
//! `#[entity]` marks a struct as an entity's state; rkyv stores it, so it
//! derives `Archive`, `Serialize` and `Deserialize`. `#[functions]` on its
//! impl block registers each `async fn` as a function:
//!
//! - `&self` methods read the state; `&mut self` methods may change it, and
//!   the change is written back when the method returns `Ok`;
//! - every method returns `Result<T, Abort>`: an `Err` aborts the whole
//!   transaction, every call it made included;
//! - arguments and results are owned types that implement `Encode` and
//!   `Decode`: integers, `bool`, `String`, `Vec`, `Option`, tuples, and
//!   your structs and enums with `#[derive(Encode, Decode)]`.
//!
//! An entity never written is its type's `Default`, unless it is marked
//! `required`: then a method on it aborts with "no item with key 7".
//!
//! ```
//! use rkyv::{Archive, Deserialize, Serialize};
//! use styx_engine::{self as styx, Abort, App, Ctx};
//!
//! /// Stock of one item: a struct of one number is stored as the number.
//! #[styx::entity(name = "stock", partitions = 8)]
//! #[derive(Archive, Serialize, Deserialize, Default)]
//! pub struct Stock {
//!     units: u32,
//! }
//!
//! #[styx::functions]
//! impl Stock {
//!     pub async fn restock(&mut self, units: u32) -> Result<u32, Abort> {
//!         self.units += units;
//!         Ok(self.units)
//!     }
//!
//!     /// Takes `units` out, or aborts the transaction if there are fewer.
//!     pub async fn take(&mut self, units: u32) -> Result<(), Abort> {
//!         if self.units < units {
//!             return Err(Abort::new("out of stock"));
//!         }
//!         self.units -= units;
//!         Ok(())
//!     }
//! }
//!
//! let mut app = App::new("shop");
//! app.entity::<Stock>();
//! print!("{}", app.schema()); // operator stock: 8 partitions … take(units: u32) -> ()
//! ```
//!
//! ## Calling other entities
//!
//! A function reaches another entity through a typed proxy,
//! `ctx.entity::<Stock>(key)`, whose methods are `Stock`'s functions with
//! their argument and result types: a misspelt function or a wrong
//! argument is a compile error. Take the `&Ctx` right after `self` to get
//! one. A call is issued when it is made, and runs on whatever shard owns
//! the key; awaiting it gives its result, and its abort aborts the caller
//! too (`?`). A call consumes the proxy (its key moves into the call): make
//! another, or clone it, to call the same entity again.
//!
//! ```
//! # use rkyv::{Archive, Deserialize, Serialize};
//! # use styx_engine::{self as styx, Abort, App, Ctx};
//! # #[styx::entity(name = "stock", partitions = 8)]
//! # #[derive(Archive, Serialize, Deserialize, Default)]
//! # pub struct Stock { units: u32 }
//! # #[styx::functions]
//! # impl Stock {
//! #     pub async fn take(&mut self, units: u32) -> Result<(), Abort> {
//! #         if self.units < units { return Err(Abort::new("out of stock")); }
//! #         self.units -= units;
//! #         Ok(())
//! #     }
//! # }
//! /// One line of an order: an argument type of its own.
//! #[derive(styx::Encode, styx::Decode, Clone, Debug, PartialEq)]
//! pub struct Line {
//!     pub item: u64,
//!     pub units: u32,
//! }
//!
//! #[styx::entity(name = "customer")]
//! #[derive(Archive, Serialize, Deserialize, Default)]
//! pub struct Customer {
//!     orders: u32,
//!     last_order: Option<u64>,
//! }
//!
//! #[styx::functions]
//! impl Customer {
//!     /// Takes every line's units from stock, all or nothing.
//!     pub async fn order(&mut self, ctx: &Ctx, lines: Vec<Line>) -> Result<u64, Abort> {
//!         // Calls to different entities may run at once: issue them all,
//!         // then await them. One out-of-stock line aborts the order, and
//!         // the stock taken by the others is put back with it.
//!         let mut taken = Vec::new();
//!         for (n, line) in lines.iter().enumerate() {
//!             if lines[..n].iter().any(|l| l.item == line.item) {
//!                 return Err(Abort::new(format!("item {} ordered twice", line.item)));
//!             }
//!             taken.push(ctx.entity::<Stock>(line.item).take(line.units));
//!         }
//!         for call in taken {
//!             call.await?;
//!         }
//!         self.orders += 1;
//!         // An order number from the transaction: the same on every
//!         // re-execution and on replay.
//!         let number = ctx.tid();
//!         self.last_order = Some(number);
//!         Ok(number)
//!     }
//! }
//! ```
//!
//! **One rule for concurrent calls.** Calls issued before an earlier one is
//! awaited run concurrently, and so does a `send` (a call whose result is
//! never awaited); the engine does not order concurrent branches of one
//! transaction, so they must touch different entities. A call to an entity
//! while your own earlier call or send to it is still open aborts with
//! [`AbortKind::Concurrent`](crate::AbortKind::Concurrent) — that is why
//! `order` refuses an item listed twice before calling. A chain of awaited
//! calls may come back to an entity (A → B → A), but a `&mut self` method
//! writes its state when it returns, over what the inner call wrote: rather
//! than lose that write, the transaction aborts with
//! [`AbortKind::Reentrant`](crate::AbortKind::Reentrant). Keep such chains
//! out of `&mut self` methods (a method without self reads the state again
//! after the call).
//!
//! ## State you manage yourself
//!
//! A method without `self`, taking `ctx: &Ctx` first, gets no state loaded:
//! it reads and writes through the context. Use it to look at a large row
//! in place without deserializing it (`ctx.read`), to tell a missing row
//! apart (`None`), or to create a row only if it does not exist:
//!
//! ```
//! # use rkyv::{Archive, Deserialize, Serialize};
//! # use styx_engine::{self as styx, Abort, Ctx};
//! #[styx::entity(name = "product", required)]
//! #[derive(Archive, Serialize, Deserialize)]
//! pub struct Product {
//!     price: i64,
//!     description: String,
//! }
//!
//! #[styx::functions]
//! impl Product {
//!     /// The price, read in place; `None` for an unknown product.
//!     pub async fn price(ctx: &Ctx) -> Result<Option<i64>, Abort> {
//!         ctx.read::<Product, _>(|p| p.price.to_native())
//!     }
//!
//!     pub async fn create(ctx: &Ctx, price: i64, description: String) -> Result<(), Abort> {
//!         if ctx.get::<Product>()?.is_some() {
//!             return Err(Abort::new("product exists"));
//!         }
//!         ctx.put(&Product { price, description })
//!     }
//! }
//! ```
//!
//! ## Counters many transactions bump
//!
//! Two transactions of one epoch that read and write the same entity
//! conflict, and one of them runs again. A counter that many transactions
//! only add to (a page's views, a warehouse's year-to-date total) would
//! make most of them run again. `ctx.add(delta)` adds to an `i64` state
//! without reading it: adds commute, so they never conflict with each
//! other, only with reads, puts and deletes of the counter.
//!
//! ```
//! # use rkyv::{Archive, Deserialize, Serialize};
//! # use styx_engine::{self as styx, Abort, Ctx};
//! /// Stored as the bare `i64`, which `add` needs (a struct of one number is).
//! #[styx::entity(name = "views")]
//! #[derive(Archive, Serialize, Deserialize, Default)]
//! pub struct Views {
//!     count: i64,
//! }
//!
//! #[styx::functions]
//! impl Views {
//!     pub async fn seen(ctx: &Ctx) -> Result<(), Abort> {
//!         ctx.add(1)
//!     }
//!
//!     /// A read: it conflicts with the adds of the same epoch.
//!     pub async fn count(&self) -> Result<i64, Abort> {
//!         Ok(self.count)
//!     }
//! }
//! ```
//!
//! ## Determinism
//!
//! The engine may run a function more than once (an optimistic execution
//! that conflicted runs again in the fallback phase), and recovery replays
//! the log of requests through the same functions. Each run must compute
//! the same thing from the same state, so a function takes time and
//! randomness only from its context:
//!
//! - `ctx.now()` / `ctx.now_us()`: the time the request's batch was sealed,
//!   logged with it, not the clock;
//! - `ctx.random()`: a number drawn from the transaction id and the call
//!   path, the same on every run;
//! - `ctx.tid()`: the transaction's id, unique and fixed.
//!
//! No clocks, no `rand`, no I/O, no global mutable state, no iteration over
//! a `HashMap` whose order depends on a random seed.
//!
//! ## Clients
//!
//! Each entity gets two more handles. `{Name}Request` builds a request from
//! outside a transaction (for tests and any `Invoker`), and `{Name}Client`
//! runs one function as one transaction on a client, with the result
//! decoded: `CustomerClient::new(&client, 42u64).order(lines).await` with
//! the Rust client (`styx_net::client::Client`). Clients in other languages
//! read the application's schema: a daemon prints it with `--schema` (text)
//! or `--schema json` and serves the JSON at `GET /schema` on its metrics
//! address; `docs/protocol.md` (section 10) gives the encoding, and
//! `styx call customer 42 order '[{"item": 7, "units": 2}]'` uses it.
//!
//! ## Testing
//!
//! The simulator runs every shard of the engine in one thread, in an order
//! drawn from a seed, so a test is deterministic and a failing seed
//! replays. [`Serial`](crate::Serial) runs the same functions one after
//! another: the oracle to compare with.
//!
//! ```
//! # use rkyv::{Archive, Deserialize, Serialize};
//! # use styx_engine::{self as styx, Abort, App, Ctx};
//! # #[styx::entity(name = "stock", partitions = 8)]
//! # #[derive(Archive, Serialize, Deserialize, Default)]
//! # pub struct Stock { units: u32 }
//! # #[styx::functions]
//! # impl Stock {
//! #     pub async fn restock(&mut self, units: u32) -> Result<u32, Abort> { self.units += units; Ok(self.units) }
//! #     pub async fn take(&mut self, units: u32) -> Result<(), Abort> {
//! #         if self.units < units { return Err(Abort::new("out of stock")); }
//! #         self.units -= units;
//! #         Ok(())
//! #     }
//! # }
//! use std::sync::Arc;
//! use styx_engine::sim::{Sim, test_config};
//! use styx_engine::{Decode, Outcome, TypedRequest};
//!
//! /// Runs one request to its outcome.
//! fn run<R: Decode>(sim: &mut Sim, app: &App, request: TypedRequest<R>) -> Result<R, String> {
//!     sim.submit(0, 0, request.request(app).unwrap()).unwrap();
//!     sim.run();
//!     match sim.take_replies().pop().unwrap().outcome {
//!         Outcome::Committed(result) => Ok(request.decode(&result).unwrap()),
//!         Outcome::Aborted(abort) => Err(abort.message().to_string()),
//!     }
//! }
//!
//! let mut app = App::new("shop");
//! app.entity::<Stock>();
//! let app = Arc::new(app);
//! // Two shards, messages in the order seed 7 draws.
//! let mut sim = Sim::new(app.clone(), test_config(100), 2, 7);
//! let stock = StockRequest::new(7u64);
//! assert_eq!(run(&mut sim, &app, stock.restock(3)), Ok(3));
//! assert_eq!(run(&mut sim, &app, stock.take(5)), Err("out of stock".to_string()));
//! assert_eq!(run(&mut sim, &app, stock.take(2)), Ok(()));
//! assert_eq!(run(&mut sim, &app, stock.restock(0)), Ok(1));
//! ```
//!
//! ## Serving it
//!
//! `styx_daemon::main(app)` is a whole daemon around your application:
//! settings, recovery from its log and snapshots, the TCP protocol,
//! metrics. `examples/hello-daemon` is a complete one, with its tests.
