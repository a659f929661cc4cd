//! Serial execution: the same functions, one transaction after another, no
//! concurrency control. It is the oracle the engine is checked against and
//! the "serial ceiling" its throughput is compared with, so it is built to
//! be cheap: nothing is allocated per transaction (frames, function bodies
//! and the undo log are reused), and an entity is looked up once per
//! invocation.
//!
//! A transaction runs depth-first on one thread: a sync call runs the callee
//! to completion inline; an async send runs after its sender's body, before
//! the sender counts as finished (as in the engine, where an invocation
//! replies only once everything it sent has finished). Writes go straight
//! to the state, their previous values to an undo log that an abort plays
//! back (newest first): a read finds the transaction's own writes where it
//! would find anyone's, so nothing is looked up twice and a commit costs
//! nothing. An entity keeps its slot once created (deleted, its value is
//! `None`), so a slot number stays valid for a whole invocation.

use crate::abort::Abort;
use crate::app::{App, Runners};
use crate::codec::Payload;
use crate::config::{Outcome, Request};
use crate::ctx::{CallLimits, Ctx, Frame, Host, NO_INDEX, root_seed};
use crate::ids::{Address, FnId, OpId, Tid};
use crate::key::Key;
use crate::value::Value;
use hashbrown::HashTable;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

/// Finished frames kept for reuse.
const SPARE_FRAMES_MAX: usize = 256;

/// The state table's hash of entity `key` of `op`. The table needs no
/// stable hash (it is never stored), and the partition an entity belongs to
/// is asked for rarely (a scan, `Ctx::partition`), so this skips the stable
/// hash and its modulus: one multiply per 8 key bytes and a finaliser.
#[inline]
fn table_hash(op: OpId, key: &Key) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let bytes = key.as_bytes();
    let mut h = (u64::from(op.0) << 48) ^ bytes.len() as u64;
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        h = (h ^ u64::from_le_bytes(w.try_into().expect("8 bytes"))).wrapping_mul(K);
        h ^= h >> 32;
    }
    let rest = words.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(K);
    }
    crate::bytes::mix64(h)
}

/// Runs transactions one after another against one in-memory state.
pub struct Serial {
    txn: Rc<Txn>,
}

impl Drop for Serial {
    fn drop(&mut self) {
        // Pooled frames hold the transaction as their host: break the cycle.
        self.txn.frames.borrow_mut().clear();
    }
}

impl Serial {
    pub fn new(app: Arc<App>, limits: CallLimits) -> Serial {
        let runners = RefCell::new(Runners::new(&app));
        let txn = Rc::new_cyclic(|me| Txn {
            me: me.clone(),
            app,
            limits,
            state: RefCell::new(State::default()),
            undo: RefCell::new(Vec::new()),
            child_aborts: RefCell::new(Vec::new()),
            sends: RefCell::new(Vec::new()),
            frames: RefCell::new(Vec::new()),
            runners,
        });
        Serial { txn }
    }

    /// Sets an entity's state outside any transaction.
    pub fn load(&mut self, op: OpId, key: Key, value: Option<Value>) {
        let hash = table_hash(op, &key);
        let mut state = self.txn.state.borrow_mut();
        let slot = state.slot(&self.txn.app, op, hash, &key);
        state.entities[slot as usize].value = value;
    }

    /// Runs one transaction to completion and applies it if it commits.
    pub fn execute(&self, tid: Tid, now_us: u64, request: &Request) -> Outcome {
        if let Err(abort) = crate::Shard::validate_logged(&self.txn.app, request) {
            return Outcome::Aborted(abort);
        }
        if crate::Move::of(request).is_some()
            || crate::Handover::of(request).is_some()
            || crate::interval::SnapshotInterval::of(request).is_some()
        {
            // Where partitions and shards live, and when snapshots are
            // taken, does not change what transactions see.
            return Outcome::Committed(crate::Payload::encode(&()));
        }
        let txn = &self.txn;
        assert!(txn.undo.borrow().is_empty(), "undo log left by the last transaction");
        txn.child_aborts.borrow_mut().clear();
        txn.sends.borrow_mut().clear();
        let (result, abort) = txn.run(
            tid,
            now_us,
            request.function,
            request.address.clone(),
            &request.args,
            0,
            root_seed(tid),
        );
        let mut undo = txn.undo.borrow_mut();
        match abort {
            Some(abort) => {
                let mut state = txn.state.borrow_mut();
                for (slot, value) in undo.drain(..).rev() {
                    state.entities[slot as usize].value = value;
                }
                Outcome::Aborted(abort)
            }
            None => {
                undo.clear();
                Outcome::Committed(result.expect("no abort, so a result"))
            }
        }
    }

    /// The state, sorted.
    pub fn snapshot(&self) -> BTreeMap<(OpId, Key), Value> {
        self.txn
            .state
            .borrow()
            .entities
            .iter()
            .filter_map(|e| Some(((e.op, e.key.clone()), e.value.clone()?)))
            .collect()
    }

    pub fn app(&self) -> &Arc<App> {
        &self.txn.app
    }
}

/// One entity; deleted ones keep their slot with no value.
struct Entity {
    op: OpId,
    /// Its table hash ([`table_hash`]), kept for rehashing.
    hash: u64,
    key: Key,
    value: Option<Value>,
}

/// Every entity, in one vector indexed by a hash table of slot numbers;
/// the partitions scanned also by key order.
#[derive(Default)]
struct State {
    entities: Vec<Entity>,
    index: HashTable<u32>,
    /// Each scanned partition's slots by key, built at its first scan and
    /// kept as entities are created (deleted ones keep their slot).
    scanned: hashbrown::HashMap<(OpId, u32), BTreeMap<Key, u32>>,
}

impl State {
    #[inline]
    fn find(&self, op: OpId, hash: u64, key: &Key) -> Option<u32> {
        let entities = &self.entities;
        self.index
            .find(hash, |&i| {
                let e = &entities[i as usize];
                e.op == op && e.key == *key
            })
            .copied()
    }

    /// The entity's slot, created (without a value) if it has none.
    fn slot(&mut self, app: &App, op: OpId, hash: u64, key: &Key) -> u32 {
        if let Some(slot) = self.find(op, hash, key) {
            return slot;
        }
        let slot = u32::try_from(self.entities.len()).expect("fewer than 2^32 entities");
        if !self.scanned.is_empty()
            && let Some(order) = self
                .scanned
                .get_mut(&(op, key.partition(app.operator_info(op).partitions())))
        {
            order.insert(key.clone(), slot);
        }
        self.entities.push(Entity {
            op,
            hash,
            key: key.clone(),
            value: None,
        });
        let entities = &self.entities;
        self.index.insert_unique(hash, slot, |&i| entities[i as usize].hash);
        slot
    }
}

/// An async send waiting to run after its sender's body: (child, function,
/// address, args).
type Send = (u32, FnId, Address, Payload);

/// How one invocation's body ended.
enum Ended {
    Done(Result<Payload, Abort>),
    /// It waits for something no call will bring.
    Stalled,
}

struct Txn {
    me: Weak<Txn>,
    app: Arc<App>,
    limits: CallLimits,
    state: RefCell<State>,
    /// The values the running transaction overwrote: `(slot, before)`.
    undo: RefCell<Vec<(u32, Option<Value>)>>,
    /// Per running invocation (by its `task` number): the lowest-numbered
    /// child's transaction-level abort.
    child_aborts: RefCell<Vec<Option<(u32, Abort)>>>,
    /// The async sends of the running invocations, each invocation's at
    /// the end while its body runs (a sync callee takes its own before it
    /// returns).
    sends: RefCell<Vec<Send>>,
    frames: RefCell<Vec<Rc<Frame>>>,
    runners: RefCell<Runners>,
}

impl Txn {
    /// A frame for one invocation: a finished one reused, or a new one.
    #[allow(clippy::too_many_arguments)]
    fn frame(
        self: &Rc<Self>,
        tid: Tid,
        now_us: u64,
        function: FnId,
        address: Address,
        partition: u32,
        depth: u16,
        seed: u64,
    ) -> Rc<Frame> {
        if let Some(mut frame) = self.frames.borrow_mut().pop() {
            let f = Rc::get_mut(&mut frame).expect("pooled frames are unshared");
            f.reset(tid, now_us, function, address, partition, depth, seed);
            return frame;
        }
        let host: Rc<dyn Host> = self.clone();
        Rc::new(Frame::new(host, tid, now_us, function, address, partition, depth, seed))
    }

    /// Runs one invocation and everything it calls; returns its body's
    /// result and its subtree's abort.
    #[allow(clippy::too_many_arguments)]
    fn run(
        self: &Rc<Self>,
        tid: Tid,
        now_us: u64,
        function: FnId,
        address: Address,
        args: &Payload,
        depth: u16,
        seed: u64,
    ) -> (Result<Payload, Abort>, Option<Abort>) {
        // An entity's partition is worked out only if asked (`Frame::partition`).
        let (partition, hash) = match &address {
            Address::Entity(k) => (NO_INDEX, table_hash(function.op, k)),
            Address::Partition(p) => (*p, 0),
        };
        let frame = self.frame(tid, now_us, function, address, partition, depth, seed);
        frame.hash.set(hash);
        let node = {
            let mut child_aborts = self.child_aborts.borrow_mut();
            child_aborts.push(None);
            child_aborts.len() - 1
        };
        frame.task.set(node as u32);
        let sends_from = self.sends.borrow().len();
        let mut runner = self.runners.borrow_mut().take(&self.app, function);
        let ctx = Ctx { frame: frame.clone() };
        // One unwind guard around start and poll: a panic in either ends
        // the body the same way.
        let ended = catch_unwind(AssertUnwindSafe(|| {
            runner.start(ctx, args)?;
            match runner.poll(&mut Context::from_waker(Waker::noop())) {
                Poll::Ready(r) => Ok(Ended::Done(r)),
                // Every call already finished inline, so a pending
                // function waits for something else.
                Poll::Pending => Ok(Ended::Stalled),
            }
        }));
        let result = match ended {
            Ok(Ok(Ended::Done(r))) => {
                self.runners.borrow_mut().give(&self.app, function, runner);
                r
            }
            // `start` refused the arguments: the body never began.
            Ok(Err(abort)) => {
                self.runners.borrow_mut().give(&self.app, function, runner);
                Err(abort)
            }
            Ok(Ok(Ended::Stalled)) => {
                let _ = catch_unwind(AssertUnwindSafe(move || runner.clear()));
                Err(Abort::stalled(&self.app.describe(function)))
            }
            Err(panic) => {
                let _ = catch_unwind(AssertUnwindSafe(move || runner.clear()));
                Err(Abort::from_panic(&*panic))
            }
        };
        // Async sends run after the body, in the order they were sent.
        if self.sends.borrow().len() > sends_from {
            let sends: Vec<Send> = self.sends.borrow_mut().drain(sends_from..).collect();
            for (child, f, address, args) in sends {
                let (_, abort) = self.run(tid, now_us, f, address, &args, depth + 1, frame.child_seed(child));
                self.note_child(node, child, abort);
            }
        }
        let own = frame
            .forced
            .borrow_mut()
            .take()
            .or_else(|| result.as_ref().err().cloned());
        let child_abort = self.child_aborts.borrow_mut()[node].take();
        // Unless the function kept a `Ctx` somewhere, this is the frame's
        // last handle: reuse it.
        if Rc::strong_count(&frame) == 1 {
            let mut frames = self.frames.borrow_mut();
            if frames.len() < SPARE_FRAMES_MAX {
                frames.push(frame);
            }
        }
        (result, own.or(child_abort.map(|(_, a)| a)))
    }

    fn note_child(&self, node: usize, child: u32, abort: Option<Abort>) {
        if let Some(abort) = abort {
            let mut child_aborts = self.child_aborts.borrow_mut();
            let first = &mut child_aborts[node];
            if first.as_ref().is_none_or(|(c, _)| child < *c) {
                *first = Some((child, abort));
            }
        }
    }

    /// The frame's entity slot, looked up (and created) at its first write
    /// if no read found it.
    fn slot(&self, state: &mut State, frame: &Frame) -> u32 {
        let mut slot = frame.slot.get();
        if slot == NO_INDEX {
            slot = state.slot(&self.app, frame.function.op, frame.hash.get(), Txn::key(frame));
            frame.slot.set(slot);
        }
        slot
    }

    fn key(frame: &Frame) -> &Key {
        match &frame.address {
            Address::Entity(k) => k,
            Address::Partition(_) => unreachable!("entity access from a partition function"),
        }
    }
}

impl Host for Txn {
    fn app(&self) -> &App {
        &self.app
    }

    fn limits(&self) -> CallLimits {
        self.limits
    }

    #[inline]
    fn read(&self, frame: &Frame, f: &mut dyn FnMut(Option<&Value>)) -> Result<(), Abort> {
        let state = self.state.borrow();
        frame.mark.set(self.undo.borrow().len() as u32);
        let mut slot = frame.slot.get();
        if slot == NO_INDEX {
            match state.find(frame.function.op, frame.hash.get(), Txn::key(frame)) {
                Some(s) => {
                    frame.slot.set(s);
                    slot = s;
                }
                None => {
                    f(None);
                    return Ok(());
                }
            }
        }
        f(state.entities[slot as usize].value.as_ref());
        Ok(())
    }

    #[inline]
    fn write(&self, frame: &Frame, value: Option<Value>) -> Result<(), Abort> {
        let mut state = self.state.borrow_mut();
        let slot = self.slot(&mut state, frame);
        let before = std::mem::replace(&mut state.entities[slot as usize].value, value);
        self.undo.borrow_mut().push((slot, before));
        Ok(())
    }

    fn add(&self, frame: &Frame, delta: i64) -> Result<(), Abort> {
        let mut state = self.state.borrow_mut();
        let slot = self.slot(&mut state, frame);
        let sum = Value::added(state.entities[slot as usize].value.as_ref(), delta)?;
        let before = state.entities[slot as usize].value.replace(sum);
        self.undo.borrow_mut().push((slot, before));
        Ok(())
    }

    fn written_since(&self, frame: &Frame, mark: u32) -> bool {
        let slot = match frame.slot.get() {
            NO_INDEX => match self
                .state
                .borrow()
                .find(frame.function.op, frame.hash.get(), Txn::key(frame))
            {
                Some(s) => s,
                None => return false,
            },
            s => s,
        };
        self.undo.borrow()[mark as usize..].iter().any(|(s, _)| *s == slot)
    }

    fn call(&self, frame: &Frame, child: u32, function: FnId, address: Address, args: Payload, sync: bool) {
        let node = frame.task.get();
        assert_ne!(node, NO_INDEX);
        if !sync {
            self.sends.borrow_mut().push((child, function, address, args));
            // An async send's slot is never read.
            return;
        }
        let me = self.me.upgrade().expect("transaction alive");
        let (result, abort) = me.run(
            frame.tid,
            frame.now_us,
            function,
            address,
            &args,
            frame.depth + 1,
            frame.child_seed(child),
        );
        self.note_child(node as usize, child, abort);
        frame.calls.borrow_mut()[child as usize].result = Some(result);
    }

    fn scan(
        &self,
        frame: &Frame,
        after: Option<&[u8]>,
        at_most: usize,
        f: &mut dyn FnMut(&Key, &Value),
    ) -> Result<(), Abort> {
        let op = frame.function.op;
        let partitions = self.app.operator_info(op).partitions();
        let rows: Vec<(Key, Value)> = {
            let mut guard = self.state.borrow_mut();
            let state = &mut *guard;
            let entities = &state.entities;
            let order = state.scanned.entry((op, frame.partition)).or_insert_with(|| {
                entities
                    .iter()
                    .enumerate()
                    .filter(|(_, e)| e.op == op && e.key.partition(partitions) == frame.partition)
                    .map(|(slot, e)| (e.key.clone(), slot as u32))
                    .collect()
            });
            let from = match after {
                Some(a) => Bound::Excluded(Key::from_bytes(a)),
                None => Bound::Unbounded,
            };
            order
                .range((from, Bound::Unbounded))
                .filter_map(|(k, &slot)| Some((k.clone(), entities[slot as usize].value.clone()?)))
                .take(at_most)
                .collect()
        };
        for (k, v) in &rows {
            f(k, v);
        }
        Ok(())
    }
}
