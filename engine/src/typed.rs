//! Typed entities: an application written as Rust types and methods.
//!
//! `#[entity]` on a struct makes it an operator's state, `#[functions]` on
//! its impl block turns each `async fn` into a registered function, and
//! `ctx.entity::<Account>(key)` returns a proxy whose methods are those
//! functions, with their argument and result types: a typo in a function
//! name or a wrong argument is a compile error, not an abort.
//! `ctx.send_to::<Account>(key)` is the same for calls sent without
//! awaiting their results ([`Ctx::send`]). All of it is
//! generated onto the closure API ([`App::function`], [`Ctx::call`]), so a
//! typed entity runs exactly like a hand-registered one and both mix in one
//! application.
//!
//! The state of an entity is loaded before its method runs (its type's
//! `Default` when the entity has none, or an abort for
//! `#[entity(required)]`) and, for `&mut self` methods that return `Ok`,
//! written back when it returns; a method without `self` takes `ctx: &Ctx`
//! first and reads and writes the state itself. The [`guide`](crate::guide)
//! walks through an application. So a sync call chain that
//! comes back to the same entity (A → B → A) sees A as it was before A's
//! method, and A's write, made when A's method returns, wins over the inner
//! call's: keep such chains out of `&mut self` methods.
//!
//! ```
//! use rkyv::{Archive, Deserialize, Serialize};
//! use styx_engine::{self as styx, Abort, App, Ctx};
//!
//! #[styx::entity(name = "account", partitions = 4)]
//! #[derive(Archive, Serialize, Deserialize, Default)]
//! struct Account {
//!     balance: i64,
//! }
//!
//! #[styx::functions]
//! impl Account {
//!     async fn deposit(&mut self, amount: i64) -> Result<i64, Abort> {
//!         self.balance += amount;
//!         Ok(self.balance)
//!     }
//!
//!     async fn transfer(&mut self, ctx: &Ctx, to: u64, amount: i64) -> Result<(), Abort> {
//!         if self.balance < amount {
//!             return Err(Abort::new("insufficient credit"));
//!         }
//!         self.balance -= amount;
//!         ctx.entity::<Account>(to).deposit(amount).await?;
//!         Ok(())
//!     }
//! }
//!
//! let mut app = App::new("bank");
//! app.entity::<Account>();
//! assert!(app.schema().to_string().contains("transfer(to: u64, amount: i64) -> ()"));
//! ```
//!
//! A method that is not an `async fn` on `&self` or `&mut self` returning
//! `Result` does not compile:
//!
//! ```compile_fail
//! use rkyv::{Archive, Deserialize, Serialize};
//! use styx_engine::{self as styx, Abort};
//!
//! #[styx::entity]
//! #[derive(Archive, Serialize, Deserialize, Default)]
//! struct Counter(u64);
//!
//! #[styx::functions]
//! impl Counter {
//!     fn bump(&mut self) -> Result<u64, Abort> { // error: not async
//!         self.0 += 1;
//!         Ok(self.0)
//!     }
//! }
//! ```
//!
//! ```compile_fail
//! use rkyv::{Archive, Deserialize, Serialize};
//! use styx_engine::{self as styx, Abort};
//!
//! #[styx::entity]
//! #[derive(Archive, Serialize, Deserialize, Default)]
//! struct Counter(u64);
//!
//! #[styx::functions]
//! impl Counter {
//!     async fn add(&mut self, by: &u64) -> Result<u64, Abort> { // error: borrowed argument
//!         self.0 += by;
//!         Ok(self.0)
//!     }
//! }
//! ```
//!
//! A call through a proxy with the wrong argument type does not compile:
//!
//! ```compile_fail,E0308
//! use rkyv::{Archive, Deserialize, Serialize};
//! use styx_engine::{self as styx, Abort, Ctx};
//!
//! #[styx::entity]
//! #[derive(Archive, Serialize, Deserialize, Default)]
//! struct Counter(u64);
//!
//! #[styx::functions]
//! impl Counter {
//!     async fn add(&mut self, by: u64) -> Result<u64, Abort> {
//!         self.0 += by;
//!         Ok(self.0)
//!     }
//!
//!     async fn add_twice(&mut self, ctx: &Ctx, other: u64) -> Result<(), Abort> {
//!         ctx.entity::<Counter>(other).add("two").await?; // error: &str is not u64
//!         Ok(())
//!     }
//! }
//! ```

use crate::abort::Abort;
use crate::app::App;
use crate::codec::{Decode, DecodeError, Encode, Payload};
use crate::config::Request;
use crate::ctx::{Call, Ctx};
use crate::ids::{Address, FnId, OpId};
use crate::key::Key;
use crate::value::{Load, Store};
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;

/// An entity type: implemented by `#[entity]` on its state struct.
pub trait Entity: Store + Load {
    /// The operator's name.
    const NAME: &'static str;
    /// The operator's partition count (see [`App::operator`]).
    const PARTITIONS: u32;
    /// The typed handle on one entity, from [`Ctx::entity`].
    type Proxy<'a>;
    /// The typed handle that sends calls without awaiting them, from
    /// [`Ctx::send_to`].
    type Sender<'a>;

    fn proxy(target: EntityRef<'_>) -> Self::Proxy<'_>;

    fn sender(target: EntityRef<'_>) -> Self::Sender<'_>;

    /// The state a method sees on an entity never written: `Default`, or
    /// for `#[entity(required)]` an abort naming the missing entity.
    fn initial(ctx: &Ctx) -> Result<Self, Abort>;

    /// The entity's stored state, if any. A struct of one fixed-width
    /// number overrides this to read the number: the same bytes (rkyv
    /// archives such a struct as its field), without rkyv's validator.
    #[inline]
    fn load(ctx: &Ctx) -> Result<Option<Self>, Abort> {
        ctx.get::<Self>()
    }

    /// Stores `self` as the entity's state (overridden like [`Entity::load`]).
    #[inline]
    fn save(&self, ctx: &Ctx) -> Result<(), Abort> {
        ctx.put(self)
    }
}

/// The abort of a method on a `#[entity(required)]` entity that was never
/// written (what [`Entity::initial`] returns for it).
#[cold]
pub fn missing_entity(ctx: &Ctx, operator: &str) -> Abort {
    Abort::new(format!("no {operator} with key {}", ctx.key()))
}

/// An entity's functions: implemented by `#[functions]` on its impl block.
pub trait Functions: Entity {
    /// Registers every function on operator `op` (declared for this entity).
    fn register(app: &mut App, op: OpId);
}

/// One entity, as seen from a running function: what a typed proxy wraps.
/// A call consumes it (the key moves into the call); clone it to call the
/// same entity again, or make another with [`Ctx::entity`].
#[derive(Clone)]
pub struct EntityRef<'a> {
    ctx: &'a Ctx,
    operator: &'static str,
    key: Key,
    /// The entity's operator and first function in this application, when
    /// it was declared with [`App::entity`]: calls then skip the name lookup.
    functions: Option<(OpId, u16)>,
}

impl<'a> EntityRef<'a> {
    pub fn new(ctx: &'a Ctx, operator: &'static str, key: Key) -> EntityRef<'a> {
        EntityRef {
            ctx,
            operator,
            key,
            functions: None,
        }
    }

    /// A handle on entity `key` of typed entity `E` (what [`Ctx::entity`] makes).
    #[inline]
    pub fn of<E: Entity>(ctx: &'a Ctx, key: Key) -> EntityRef<'a> {
        EntityRef {
            ctx,
            operator: E::NAME,
            key,
            functions: ctx.app().typed_entity::<E>(),
        }
    }

    pub fn key(&self) -> &Key {
        &self.key
    }

    /// Calls `function` on this entity by name.
    #[inline]
    pub fn call<R: Decode>(&self, function: &str, args: &impl Encode) -> Call<R> {
        self.ctx.call(self.operator, self.key.clone(), function, args)
    }

    /// Calls the entity's `nth` method, `function` (what the proxy's
    /// methods do): by function id when the entity was declared with
    /// [`App::entity`], else by name.
    #[inline]
    pub fn call_method<R: Decode>(self, nth: u16, function: &str, args: &impl Encode) -> Call<R> {
        match self.functions {
            Some((op, first)) => {
                let id = FnId { op, index: first + nth };
                debug_assert_eq!(self.ctx.app().function_info(id).name(), function);
                self.ctx.call_entity_fn(id, self.key, args)
            }
            None => self.call(function, args),
        }
    }

    /// Sends `function` to this entity without waiting for its result
    /// ([`Ctx::send`]).
    pub fn send(&self, function: &str, args: &impl Encode) -> Result<(), Abort> {
        self.ctx.send(self.operator, self.key.clone(), function, args)
    }

    /// Sends the entity's `nth` method, `function` (what the senders'
    /// methods do), by function id when it can, as [`Self::call_method`].
    #[inline]
    pub fn send_method(self, nth: u16, function: &str, args: &impl Encode) -> Result<(), Abort> {
        match self.functions {
            Some((op, first)) => {
                let id = FnId { op, index: first + nth };
                debug_assert_eq!(self.ctx.app().function_info(id).name(), function);
                self.ctx.send_entity_fn(id, self.key, args)
            }
            None => self.send(function, args),
        }
    }
}

/// A request to one entity function from outside the engine, with its
/// result type: what `{Entity}Request` methods return. Turn it into an
/// engine [`Request`] with [`TypedRequest::request`], decode the committed
/// result with [`TypedRequest::decode`].
pub struct TypedRequest<R> {
    pub operator: &'static str,
    pub function: &'static str,
    pub key: Key,
    pub args: Payload,
    _result: PhantomData<fn() -> R>,
}

impl<R> Clone for TypedRequest<R> {
    fn clone(&self) -> TypedRequest<R> {
        TypedRequest {
            operator: self.operator,
            function: self.function,
            key: self.key.clone(),
            args: self.args.clone(),
            _result: PhantomData,
        }
    }
}

impl<R> fmt::Debug for TypedRequest<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{}({:?}) on {:?}",
            self.operator, self.function, self.args, self.key
        )
    }
}

impl<R: Decode> TypedRequest<R> {
    pub fn new(operator: &'static str, function: &'static str, key: Key, args: &impl Encode) -> TypedRequest<R> {
        TypedRequest {
            operator,
            function,
            key,
            args: Payload::encode(args),
            _result: PhantomData,
        }
    }

    /// The engine request (not exactly-once: no client), or `None` if `app`
    /// has no such function.
    pub fn request(&self, app: &App) -> Option<Request> {
        Some(Request {
            function: app.resolve(self.operator, self.function)?,
            address: Address::Entity(self.key.clone()),
            args: self.args.clone(),
            client: None,
        })
    }

    /// The committed result of this request.
    pub fn decode(&self, result: &Payload) -> Result<R, DecodeError> {
        result.decode()
    }
}

/// Sends typed requests and returns their committed results: what the
/// generated `{Entity}Client` stubs call. The Rust client
/// (`styx_net::client::Client`) implements it; so can a test harness.
pub trait Invoker {
    /// What a request that did not commit returns (an abort, a transport
    /// failure).
    type Error;

    /// Runs `request` as one transaction and decodes its result.
    fn invoke<R: Decode>(&self, request: &TypedRequest<R>) -> impl Future<Output = Result<R, Self::Error>>;
}
