//! The context a function runs with: its entity's state, calls to other
//! entities, and deterministic time and randomness.
//!
//! A `Ctx` is a handle on the invocation's frame. The frame talks to a
//! [`Host`]: the shard when running in the engine, the serial executor when
//! running as an oracle. User code cannot tell them apart, which is what lets
//! the serial executor check the engine.
//!
//! Calls are issued when `call` is called, not when the returned future is
//! first polled: `let a = ctx.call(..); let b = ctx.call(..);` runs both in
//! parallel. Every call is part of the transaction, awaited or not.
//!
//! Concurrent branches of one transaction (an async `send`, or calls awaited
//! together) must touch disjoint entities: the engine does not order them
//! against each other. Sync call chains may revisit entities (A → B → A).
//! An invocation that calls or sends to an entity while one of its own
//! earlier calls to that entity is still open (issued, result not yet
//! taken; a send is open for good) is aborted with
//! [`AbortKind::Concurrent`]: the check follows program order, not timing,
//! so it is the same in the engine and the serial executor. Overlaps
//! deeper in the call graph (two branches whose callees reach one entity)
//! are not detected.

use crate::abort::{Abort, AbortKind};
use crate::app::FnKind;
use crate::bytes::mix64;
use crate::codec::{Decode, Encode, Payload};
use crate::ids::{Address, FnId, OpId, Tid};
use crate::key::Key;
use crate::value::{Load, Scratch, Store, Value};
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, SystemTime};

/// Limits on the shape of a transaction's call graph.
#[derive(Clone, Copy, Debug)]
pub struct CallLimits {
    /// Nesting of calls below the root (the root is depth 0).
    pub depth_max: u16,
    /// Calls and sends one invocation may issue.
    pub fan_out_max: u32,
}

impl Default for CallLimits {
    fn default() -> CallLimits {
        CallLimits {
            depth_max: 64,
            fan_out_max: 1024,
        }
    }
}

/// What runs an invocation: the shard, or the serial executor.
pub(crate) trait Host {
    fn app(&self) -> &crate::App;
    fn limits(&self) -> CallLimits;
    /// Gives `f` the entity's current value as this transaction sees it.
    fn read(&self, frame: &Frame, f: &mut dyn FnMut(Option<&Value>)) -> Result<(), Abort>;
    /// Buffers a write (`None` deletes) of the frame's entity.
    fn write(&self, frame: &Frame, value: Option<Value>) -> Result<(), Abort>;
    /// Buffers an add of `delta` to the frame's entity's `i64` state
    /// ([`Ctx::add`]).
    fn add(&self, frame: &Frame, delta: i64) -> Result<(), Abort>;
    /// Whether the transaction wrote the frame's entity after the read
    /// that left `mark` in `frame.mark` (each [`Host::read`] records there
    /// the host's token for the writes made so far).
    fn written_since(&self, frame: &Frame, mark: u32) -> bool;
    /// Issues child call number `child` of `frame`.
    fn call(&self, frame: &Frame, child: u32, function: FnId, address: Address, args: Payload, sync: bool);
    /// Scans the frame's partition in key order: the first `at_most`
    /// entities whose key bytes sort after `after` (every entity with
    /// `None`, `usize::MAX`). Either way the scan reads the whole partition
    /// (a write anywhere in it conflicts), the bounds only save the work.
    fn scan(
        &self,
        frame: &Frame,
        after: Option<&[u8]>,
        at_most: usize,
        f: &mut dyn FnMut(&Key, &Value),
    ) -> Result<(), Abort>;
}

/// The result of one child call, filled in by the host.
#[derive(Default)]
pub(crate) struct CallSlot {
    pub result: Option<Result<Payload, Abort>>,
    pub waker: Option<Waker>,
    /// The entity called, while the call is open: from when it is issued
    /// until the caller takes its result (a send, never awaited, and a
    /// call dropped unawaited stay open). A new call to an entity an open
    /// call targets would run concurrently with it: refused.
    pub open: Option<(OpId, Key)>,
}

/// One invocation's frame, shared by its `Ctx` handles and its host.
pub(crate) struct Frame {
    pub tid: Tid,
    pub now_us: u64,
    pub function: FnId,
    pub address: Address,
    /// The partition it runs in, or [`NO_INDEX`] for an entity whose host
    /// did not need it ([`Ctx::partition`] then works it out).
    pub partition: u32,
    pub depth: u16,
    pub seed: u64,
    /// Whether the function runs on an entity (else on a partition).
    pub entity: bool,
    rng: Cell<u64>,
    pub host: Rc<dyn Host>,
    /// Host-specific numbers (the shard keeps its entry slot and access index here).
    pub slot: Cell<u32>,
    pub access: Cell<u32>,
    /// The serial executor keeps the entity's table hash here.
    pub hash: Cell<u64>,
    /// Set by every read of the entity: a host's token for "the writes
    /// seen so far" ([`Host::written_since`]).
    pub mark: Cell<u32>,
    pub task: Cell<u32>,
    pub calls: RefCell<Vec<CallSlot>>,
    /// Set when the engine must abort the transaction whatever the function
    /// returns (a limit was hit, an unknown function called, drift).
    pub forced: RefCell<Option<Abort>>,
}

pub(crate) const NO_INDEX: u32 = u32::MAX;

impl Frame {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        host: Rc<dyn Host>,
        tid: Tid,
        now_us: u64,
        function: FnId,
        address: Address,
        partition: u32,
        depth: u16,
        seed: u64,
    ) -> Frame {
        let entity = matches!(address, Address::Entity(_));
        Frame {
            tid,
            now_us,
            function,
            address,
            partition,
            depth,
            seed,
            entity,
            rng: Cell::new(seed),
            host,
            slot: Cell::new(NO_INDEX),
            access: Cell::new(NO_INDEX),
            hash: Cell::new(0),
            mark: Cell::new(0),
            task: Cell::new(NO_INDEX),
            calls: RefCell::new(Vec::new()),
            forced: RefCell::new(None),
        }
    }

    /// Re-initialises a pooled frame for another invocation (keeping the
    /// call vector's capacity).
    #[allow(clippy::too_many_arguments)]
    pub fn reset(
        &mut self,
        tid: Tid,
        now_us: u64,
        function: FnId,
        address: Address,
        partition: u32,
        depth: u16,
        seed: u64,
    ) {
        self.tid = tid;
        self.now_us = now_us;
        self.function = function;
        self.entity = matches!(address, Address::Entity(_));
        self.address = address;
        self.partition = partition;
        self.depth = depth;
        self.seed = seed;
        self.rng.set(seed);
        self.slot.set(NO_INDEX);
        self.access.set(NO_INDEX);
        self.mark.set(0);
        self.task.set(NO_INDEX);
        self.calls.get_mut().clear();
        *self.forced.get_mut() = None;
    }

    /// The seed of child call number `child`: a pure function of the root's
    /// tid and the call path, so re-executions see the same randomness.
    pub fn child_seed(&self, child: u32) -> u64 {
        mix64(self.seed ^ mix64(u64::from(child) + 1))
    }

    pub fn force(&self, abort: Abort) {
        let mut forced = self.forced.borrow_mut();
        if forced.is_none() {
            *forced = Some(abort);
        }
    }

    pub fn kind(&self) -> FnKind {
        if self.entity { FnKind::Entity } else { FnKind::Partition }
    }
}

/// The seed of a transaction's root invocation.
pub(crate) fn root_seed(tid: Tid) -> u64 {
    mix64(tid ^ 0x5354_5958_5345_4544)
}

thread_local! {
    static SCRATCH: RefCell<Option<Scratch>> = const { RefCell::new(None) };
}

/// The handle a function gets on its invocation.
#[derive(Clone)]
pub struct Ctx {
    pub(crate) frame: Rc<Frame>,
}

impl Ctx {
    /// The application this function belongs to.
    #[inline]
    pub fn app(&self) -> &crate::App {
        self.frame.host.app()
    }

    /// The entity's key (empty for partition functions).
    pub fn key(&self) -> &Key {
        static EMPTY: std::sync::OnceLock<Key> = std::sync::OnceLock::new();
        match &self.frame.address {
            Address::Entity(k) => k,
            Address::Partition(_) => EMPTY.get_or_init(|| Key::from_bytes(&[])),
        }
    }

    /// The partition this invocation runs in.
    pub fn partition(&self) -> u32 {
        match self.frame.partition {
            NO_INDEX => {
                let partitions = self.app().operator_info(self.frame.function.op).partitions();
                self.key().partition(partitions)
            }
            p => p,
        }
    }

    /// The transaction's id; its order is the transaction's priority.
    pub fn tid(&self) -> Tid {
        self.frame.tid
    }

    /// The function being run.
    pub fn function(&self) -> FnId {
        self.frame.function
    }

    /// The transaction's timestamp in microseconds since the Unix epoch: the
    /// time its batch was sequenced, logged with the input, so replays and
    /// re-executions see the same value.
    pub fn now_us(&self) -> u64 {
        self.frame.now_us
    }

    /// [`Ctx::now_us`] as a `SystemTime`.
    pub fn now(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_micros(self.frame.now_us)
    }

    /// A pseudo-random number, deterministic in the transaction id and the
    /// call path: a re-execution or a replay draws the same sequence.
    pub fn random(&self) -> u64 {
        let x = self.frame.rng.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
        self.frame.rng.set(x);
        mix64(x)
    }

    /// The number of partitions of operator `op` (to fan out over all of them).
    pub fn partitions(&self, op: &str) -> Result<u32, Abort> {
        let app = self.frame.host.app();
        let id = app
            .op_id(op)
            .ok_or_else(|| Abort::unknown(format!("no operator {op}")))?;
        Ok(app.operator_info(id).partitions())
    }

    #[inline]
    fn entity_only(&self, what: &'static str) -> Result<(), Abort> {
        if self.frame.entity {
            Ok(())
        } else {
            self.not_an_entity(what)
        }
    }

    #[cold]
    #[inline(never)]
    fn not_an_entity(&self, what: &'static str) -> Result<(), Abort> {
        {
            let abort = Abort::unknown(format!(
                "{what} needs an entity; {} runs on a partition",
                self.frame.host.app().describe(self.frame.function)
            ));
            self.frame.force(abort.clone());
            Err(abort)
        }
    }

    /// The entity's state as `T`, or `None` if it has none.
    #[inline(always)]
    pub fn get<T: Load>(&self) -> Result<Option<T>, Abort> {
        self.entity_only("get")?;
        let mut out = Ok(None);
        self.frame.host.read(&self.frame, &mut |v| {
            out = v.map(Value::decode::<T>).transpose();
        })?;
        out
    }

    /// The entity's state as archive bytes (for tools that do not know its
    /// type), or `None` if it has none.
    pub fn get_raw(&self) -> Result<Option<Vec<u8>>, Abort> {
        self.entity_only("get_raw")?;
        let mut out = None;
        self.frame.host.read(&self.frame, &mut |v| out = v.map(Value::to_vec))?;
        Ok(out)
    }

    /// Gives `f` the entity's archived state in place (no copy, no
    /// deserialization), or returns `None` if it has none.
    pub fn read<T: Load, R>(&self, f: impl FnOnce(&T::Archived) -> R) -> Result<Option<R>, Abort> {
        self.entity_only("read")?;
        let mut f = Some(f);
        let mut out = Ok(None);
        self.frame.host.read(&self.frame, &mut |v| {
            if let (Some(v), Some(f)) = (v, f.take()) {
                out = v.read::<T, R>(f).map(Some);
            }
        })?;
        out
    }

    /// The token of the entity's last read by this invocation, for
    /// [`Ctx::__write_back_check`] (what a typed `&mut self` method's
    /// wrapper takes right after loading the state).
    #[doc(hidden)]
    #[inline]
    pub fn __read_mark(&self) -> u32 {
        self.frame.mark.get()
    }

    /// Refuses to write back a `&mut self` method's state when one of its
    /// calls changed the entity meanwhile (A → B → A): the write-back would
    /// lose that change. Only an invocation that issued calls can be
    /// re-entered, so one that issued none is not asked.
    #[doc(hidden)]
    #[inline]
    pub fn __write_back_check(&self, mark: u32) -> Result<(), Abort> {
        if self.frame.calls.borrow().is_empty() || !self.frame.host.written_since(&self.frame, mark) {
            return Ok(());
        }
        self.write_back_refused()
    }

    #[cold]
    fn write_back_refused(&self) -> Result<(), Abort> {
        let abort = Abort::with_kind(
            AbortKind::Reentrant,
            format!(
                "{} on {}: a nested call of this transaction changed the entity while its &mut self method ran; writing the method's state back would lose that change (use a method without self, or do not call back into the entity)",
                self.frame.host.app().describe(self.frame.function),
                self.key(),
            ),
        );
        self.frame.force(abort.clone());
        Err(abort)
    }

    /// Sets the entity's state. Buffered: visible to this transaction at
    /// once, to others only if it commits.
    pub fn put<T: Store>(&self, v: &T) -> Result<(), Abort> {
        self.entity_only("put")?;
        let value = match Value::encode_primitive(v) {
            Some(value) => value,
            None => SCRATCH.with(|s| Value::encode(v, s.borrow_mut().get_or_insert_with(Scratch::default)))?,
        };
        self.frame.host.write(&self.frame, Some(value))
    }

    /// Adds `delta` to the entity's state, an `i64` (no state counts as 0),
    /// without reading it.
    ///
    /// Adds to one entity commute, so concurrent transactions that only add
    /// to it never conflict with each other: a counter many transactions
    /// bump in the same epoch (a warehouse's year-to-date total) does not
    /// make all but one of them run again, as a read and a put would. They
    /// still conflict with a transaction that reads, puts or deletes the
    /// entity. A read of the entity after an add in the same transaction
    /// sees the sum (and is a read). The sum wraps on overflow, in any
    /// order the same. A state that is not 8 bytes (an `i64` or `u64`) is
    /// an abort.
    pub fn add(&self, delta: i64) -> Result<(), Abort> {
        self.entity_only("add")?;
        self.frame.host.add(&self.frame, delta)
    }

    /// Removes the entity's state.
    pub fn delete(&self) -> Result<(), Abort> {
        self.entity_only("delete")?;
        self.frame.host.write(&self.frame, None)
    }

    /// Calls every entity of this partition in key order with its archived
    /// state. Only partition functions scan; a scan reads the whole
    /// partition, so any write to it by an earlier transaction of the epoch
    /// orders this one after it.
    pub fn scan<T: Load>(&self, mut f: impl FnMut(&Key, &T::Archived)) -> Result<(), Abort> {
        self.require_partition()?;
        let mut failure = None;
        self.frame.host.scan(&self.frame, None, usize::MAX, &mut |key, value| {
            if failure.is_none()
                && let Err(e) = value.read::<T, ()>(|a| f(key, a))
            {
                failure = Some(e);
            }
        })?;
        match failure {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Aborts (and forces the abort on the transaction) unless this runs as
    /// a partition function: only those may scan.
    fn require_partition(&self) -> Result<(), Abort> {
        if self.frame.kind() == FnKind::Partition {
            return Ok(());
        }
        let abort = Abort::unknown(format!(
            "scan needs a partition function; {} runs on an entity",
            self.frame.host.app().describe(self.frame.function)
        ));
        self.frame.force(abort.clone());
        Err(abort)
    }

    /// [`Ctx::scan`] with each entity's state as archive bytes (for tools
    /// that do not know the operator's state type).
    pub fn scan_raw(&self, f: impl FnMut(&Key, &[u8])) -> Result<(), Abort> {
        self.scan_raw_after(None, usize::MAX, f)
    }

    /// [`Ctx::scan_raw`] of the first `at_most` entities whose key bytes
    /// sort after `after` (a page of a scan). It reads, and conflicts, like
    /// a scan of the whole partition, but costs a page, not a sort of it.
    pub fn scan_raw_after(
        &self,
        after: Option<&[u8]>,
        at_most: usize,
        mut f: impl FnMut(&Key, &[u8]),
    ) -> Result<(), Abort> {
        self.require_partition()?;
        self.frame.host.scan(&self.frame, after, at_most, &mut |key, value| {
            value.with_aligned(|bytes| f(key, bytes))
        })
    }

    /// Calls `op.function` on entity `key` and returns its result.
    pub fn call<R: Decode>(&self, op: &str, key: impl Into<Key>, function: &str, args: impl Encode) -> Call<R> {
        match self.resolve(op, function, FnKind::Entity) {
            Ok(f) => self.issue(f, Address::Entity(key.into()), Payload::encode(&args), true),
            Err(e) => Call::failed(e),
        }
    }

    /// A typed proxy on entity `key` of typed entity `E`: its methods are
    /// `E`'s functions (see [`crate::typed`]), each returning a [`Call`].
    #[inline]
    pub fn entity<E: crate::typed::Entity>(&self, key: impl Into<Key>) -> E::Proxy<'_> {
        E::proxy(crate::typed::EntityRef::of::<E>(self, key.into()))
    }

    /// A typed sender on entity `key` of typed entity `E`: its methods are
    /// `E`'s functions, each sent like [`Ctx::send`] (part of this
    /// transaction, its result never awaited), returning only whether it
    /// could be sent: `ctx.send_to::<Order>(key).insert(order)?`.
    #[inline]
    pub fn send_to<E: crate::typed::Entity>(&self, key: impl Into<Key>) -> E::Sender<'_> {
        E::sender(crate::typed::EntityRef::of::<E>(self, key.into()))
    }

    /// Calls a function by id (resolved once with [`crate::App::resolve`]):
    /// skips the name lookup on hot paths.
    #[inline]
    pub fn call_fn<R: Decode>(&self, function: FnId, key: impl Into<Key>, args: impl Encode) -> Call<R> {
        match self.check_kind(function, FnKind::Entity) {
            Ok(()) => self.issue(function, Address::Entity(key.into()), Payload::encode(&args), true),
            Err(e) => Call::failed(e),
        }
    }

    /// [`Ctx::call_fn`] for a function id known to be an entity function of
    /// this application (a typed proxy's: resolved by `App::typed_entity`).
    #[inline]
    pub(crate) fn call_entity_fn<R: Decode>(&self, function: FnId, key: Key, args: &impl Encode) -> Call<R> {
        debug_assert_eq!(self.frame.host.app().function_info(function).kind(), FnKind::Entity);
        self.issue(function, Address::Entity(key), Payload::encode(args), true)
    }

    /// [`Ctx::send_fn`] for a function id known to be an entity function,
    /// as [`Ctx::call_entity_fn`].
    #[inline]
    pub(crate) fn send_entity_fn(&self, function: FnId, key: Key, args: &impl Encode) -> Result<(), Abort> {
        debug_assert_eq!(self.frame.host.app().function_info(function).kind(), FnKind::Entity);
        let call: Call<()> = self.issue(function, Address::Entity(key), Payload::encode(args), false);
        match call.state {
            CallState::Failed(Some(e)) => Err(e),
            _ => Ok(()),
        }
    }

    /// Calls partition function `op.function` on `partition`.
    pub fn call_partition<R: Decode>(&self, op: &str, partition: u32, function: &str, args: impl Encode) -> Call<R> {
        let f = match self.resolve(op, function, FnKind::Partition) {
            Ok(f) => f,
            Err(e) => return Call::failed(e),
        };
        let partitions = self.frame.host.app().operator_info(f.op).partitions();
        if partition >= partitions {
            let abort = Abort::unknown(format!("{op} has {partitions} partitions, not {}", partition + 1));
            self.frame.force(abort.clone());
            return Call::failed(abort);
        }
        self.issue(f, Address::Partition(partition), Payload::encode(&args), true)
    }

    /// Sends `op.function` to entity `key` without waiting for it. It is
    /// still part of this transaction: it commits or aborts with it.
    pub fn send(&self, op: &str, key: impl Into<Key>, function: &str, args: impl Encode) -> Result<(), Abort> {
        let f = self.resolve(op, function, FnKind::Entity)?;
        self.send_fn(f, key, args)
    }

    /// [`Ctx::send`] by function id.
    pub fn send_fn(&self, function: FnId, key: impl Into<Key>, args: impl Encode) -> Result<(), Abort> {
        self.check_kind(function, FnKind::Entity)?;
        let call: Call<()> = self.issue(function, Address::Entity(key.into()), Payload::encode(&args), false);
        match call.state {
            CallState::Failed(Some(e)) => Err(e),
            _ => Ok(()),
        }
    }

    fn resolve(&self, op: &str, function: &str, kind: FnKind) -> Result<FnId, Abort> {
        let app = self.frame.host.app();
        let f = app.resolve(op, function).ok_or_else(|| {
            let abort = Abort::unknown(format!("no function {op}.{function}"));
            self.frame.force(abort.clone());
            abort
        })?;
        self.check_kind(f, kind)?;
        Ok(f)
    }

    fn check_kind(&self, f: FnId, kind: FnKind) -> Result<(), Abort> {
        let app = self.frame.host.app();
        if app.function_info(f).kind() != kind {
            let abort = Abort::unknown(format!(
                "{} is a {:?} function",
                app.describe(f),
                app.function_info(f).kind()
            ));
            self.frame.force(abort.clone());
            return Err(abort);
        }
        Ok(())
    }

    fn issue<R: Decode>(&self, function: FnId, address: Address, args: Payload, sync: bool) -> Call<R> {
        let limits = self.frame.host.limits();
        if self.frame.depth >= limits.depth_max {
            let abort = Abort::limit(format!(
                "call depth would exceed {} (calling {})",
                limits.depth_max,
                self.frame.host.app().describe(function)
            ));
            self.frame.force(abort.clone());
            return Call::failed(abort);
        }
        let child = {
            let mut calls = self.frame.calls.borrow_mut();
            if calls.len() >= limits.fan_out_max as usize {
                drop(calls);
                let abort = Abort::limit(format!("an invocation issued more than {} calls", limits.fan_out_max));
                self.frame.force(abort.clone());
                return Call::failed(abort);
            }
            let open = match &address {
                Address::Entity(key) => {
                    if let Some(n) = calls
                        .iter()
                        .position(|c| c.open.as_ref().is_some_and(|(op, k)| *op == function.op && k == key))
                    {
                        drop(calls);
                        let abort = Abort::with_kind(
                            AbortKind::Concurrent,
                            format!(
                                "{} on {key} while call {n} to the same entity is still open: await it first (concurrent branches must touch different entities)",
                                self.frame.host.app().describe(function)
                            ),
                        );
                        self.frame.force(abort.clone());
                        return Call::failed(abort);
                    }
                    Some((function.op, key.clone()))
                }
                Address::Partition(_) => None,
            };
            calls.push(CallSlot {
                result: None,
                waker: None,
                open,
            });
            (calls.len() - 1) as u32
        };
        self.frame.host.call(&self.frame, child, function, address, args, sync);
        Call {
            state: CallState::Issued {
                frame: self.frame.clone(),
                child,
            },
            _result: PhantomData,
        }
    }
}

/// The pending result of [`Ctx::call`].
#[must_use = "a call runs whether or not it is awaited; await it to get its result"]
pub struct Call<R> {
    state: CallState,
    _result: PhantomData<fn() -> R>,
}

enum CallState {
    Issued { frame: Rc<Frame>, child: u32 },
    Failed(Option<Abort>),
}

impl<R> Call<R> {
    fn failed(abort: Abort) -> Call<R> {
        Call {
            state: CallState::Failed(Some(abort)),
            _result: PhantomData,
        }
    }
}

impl<R: Decode> Future for Call<R> {
    type Output = Result<R, Abort>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        match &mut this.state {
            CallState::Failed(e) => Poll::Ready(Err(e.take().expect("Call polled after completion"))),
            CallState::Issued { frame, child } => {
                let mut calls = frame.calls.borrow_mut();
                let slot = &mut calls[*child as usize];
                let result = slot.result.take();
                if result.is_some() {
                    // Taken: later calls to the entity follow this one.
                    slot.open = None;
                }
                match result {
                    Some(Ok(payload)) => Poll::Ready(
                        payload
                            .decode::<R>()
                            .map_err(|e| Abort::bad_arguments(format!("result of call {child}: {e}"))),
                    ),
                    Some(Err(abort)) => Poll::Ready(Err(abort)),
                    None => {
                        slot.waker = Some(cx.waker().clone());
                        Poll::Pending
                    }
                }
            }
        }
    }
}
