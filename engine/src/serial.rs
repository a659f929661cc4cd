//! Serial execution: the same functions, one transaction after another, no
//! concurrency control. It is the oracle the engine is checked against and
//! the "serial ceiling" its throughput is compared with, so it is built to
//! be cheap: nothing is allocated per transaction but the function bodies'
//! futures (frames, the write overlay and the call tree are reused), and a
//! key is hashed once per invocation.
//!
//! A transaction runs depth-first on one thread: a sync call runs the callee
//! to completion inline; an async send runs after its sender's body, before
//! the sender counts as finished (as in the engine, where an invocation
//! replies only once everything it sent has finished). Writes go to a
//! per-transaction overlay that is applied only if nothing aborted.

use crate::abort::Abort;
use crate::app::App;
use crate::codec::Payload;
use crate::config::{Outcome, Request};
use crate::ctx::{CallLimits, Ctx, Frame, Host, NO_INDEX, root_seed};
use crate::ids::{Address, FnId, OpId, Tid};
use crate::key::{Key, partition_of};
use crate::value::Value;
use hashbrown::HashTable;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

/// Overlay entries searched linearly; past this many an index is built.
const OVERLAY_LINEAR_MAX: usize = 16;
/// Finished frames kept for reuse.
const SPARE_FRAMES_MAX: usize = 256;

/// The hash the state table uses for entity `key` (stable hash `hash`) of `op`.
#[inline]
fn entity_hash(op: OpId, hash: u64) -> u64 {
    crate::bytes::mix64(hash ^ (u64::from(op.0) << 48))
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
        let txn = Rc::new_cyclic(|me| Txn {
            me: me.clone(),
            app,
            limits,
            state: RefCell::new(HashTable::new()),
            overlay: RefCell::new(Overlay::default()),
            nodes: RefCell::new(Vec::new()),
            frames: RefCell::new(Vec::new()),
        });
        Serial { txn }
    }

    /// Sets an entity's state outside any transaction.
    pub fn load(&mut self, op: OpId, key: Key, value: Option<Value>) {
        let hash = entity_hash(op, key.hash64());
        let mut state = self.txn.state.borrow_mut();
        put(&mut state, op, hash, &key, value);
    }

    /// Runs one transaction to completion and applies it if it commits.
    pub fn execute(&self, tid: Tid, now_us: u64, request: &Request) -> Outcome {
        if let Err(abort) = crate::Shard::validate(&self.txn.app, request) {
            return Outcome::Aborted(abort);
        }
        let txn = &self.txn;
        debug_assert!(txn.overlay.borrow().entries.is_empty());
        txn.nodes.borrow_mut().clear();
        let (result, abort) = txn.run(
            tid,
            now_us,
            request.function,
            request.address.clone(),
            request.args.clone(),
            0,
            root_seed(tid),
        );
        let mut overlay = txn.overlay.borrow_mut();
        let outcome = match abort {
            Some(abort) => Outcome::Aborted(abort),
            None => {
                let mut state = txn.state.borrow_mut();
                for (op, hash, key, value) in overlay.entries.drain(..) {
                    put(&mut state, op, hash, &key, value);
                }
                Outcome::Committed(result.expect("no abort, so a result"))
            }
        };
        overlay.clear();
        outcome
    }

    /// The state, sorted.
    pub fn snapshot(&self) -> BTreeMap<(OpId, Key), Value> {
        self.txn
            .state
            .borrow()
            .iter()
            .map(|(op, key, v)| ((*op, key.clone()), v.clone()))
            .collect()
    }

    pub fn app(&self) -> &Arc<App> {
        &self.txn.app
    }
}

type StateTable = HashTable<(OpId, Key, Value)>;

fn put(state: &mut StateTable, op: OpId, hash: u64, key: &Key, value: Option<Value>) {
    let rehash = |e: &(OpId, Key, Value)| entity_hash(e.0, e.1.hash64());
    let found = state.find_entry(hash, |e| e.0 == op && e.1 == *key);
    match (found, value) {
        (Ok(mut e), Some(v)) => e.get_mut().2 = v,
        (Ok(e), None) => {
            e.remove();
        }
        (Err(_), Some(v)) => {
            state.insert_unique(hash, (op, key.clone(), v), rehash);
        }
        (Err(_), None) => {}
    }
}

/// The transaction's buffered writes: `(op, entity hash, key, value)`.
#[derive(Default)]
struct Overlay {
    entries: Vec<(OpId, u64, Key, Option<Value>)>,
    /// Positions in `entries` by entity hash, once it outgrows a linear search.
    index: HashTable<u32>,
}

impl Overlay {
    fn find(&self, op: OpId, hash: u64, key: &Key) -> Option<usize> {
        let same = |e: &(OpId, u64, Key, Option<Value>)| e.1 == hash && e.0 == op && e.2 == *key;
        if self.entries.len() <= OVERLAY_LINEAR_MAX {
            return self.entries.iter().position(same);
        }
        self.index
            .find(hash, |&i| same(&self.entries[i as usize]))
            .map(|&i| i as usize)
    }

    fn write(&mut self, op: OpId, hash: u64, key: &Key, value: Option<Value>) {
        if let Some(i) = self.find(op, hash, key) {
            self.entries[i].3 = value;
            return;
        }
        self.entries.push((op, hash, key.clone(), value));
        let Overlay { entries, index } = self;
        let n = entries.len();
        let rehash = |&i: &u32| entries[i as usize].1;
        if n == OVERLAY_LINEAR_MAX + 1 {
            for (i, e) in entries.iter().enumerate() {
                index.insert_unique(e.1, i as u32, rehash);
            }
        } else if n > OVERLAY_LINEAR_MAX + 1 {
            index.insert_unique(hash, (n - 1) as u32, rehash);
        }
    }

    fn clear(&mut self) {
        self.entries.clear();
        if !self.index.is_empty() {
            self.index.clear();
        }
    }
}

struct Node {
    /// Async sends waiting to run after the body: (child, function, address, args).
    sends: Vec<(u32, FnId, Address, Payload)>,
    /// The lowest-numbered child's transaction-level abort.
    child_abort: Option<(u32, Abort)>,
}

struct Txn {
    me: Weak<Txn>,
    app: Arc<App>,
    limits: CallLimits,
    state: RefCell<StateTable>,
    overlay: RefCell<Overlay>,
    nodes: RefCell<Vec<Node>>,
    frames: RefCell<Vec<Rc<Frame>>>,
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
        args: Payload,
        depth: u16,
        seed: u64,
    ) -> (Result<Payload, Abort>, Option<Abort>) {
        let (partition, hash) = match &address {
            Address::Entity(k) => {
                let hash = k.hash64();
                let partitions = self.app.operator_info(function.op).partitions();
                (partition_of(hash, partitions), entity_hash(function.op, hash))
            }
            Address::Partition(p) => (*p, 0),
        };
        let frame = self.frame(tid, now_us, function, address, partition, depth, seed);
        frame.hash.set(hash);
        let node = {
            let mut nodes = self.nodes.borrow_mut();
            nodes.push(Node {
                sends: Vec::new(),
                child_abort: None,
            });
            nodes.len() - 1
        };
        frame.task.set(node as u32);
        let f = self.app.function_info(function);
        let ctx = Ctx { frame: frame.clone() };
        let result = match catch_unwind(AssertUnwindSafe(|| f.start(ctx, args))) {
            Err(panic) => Err(Abort::from_panic(&*panic)),
            Ok(mut future) => {
                let mut cx = Context::from_waker(Waker::noop());
                match catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(&mut cx))) {
                    Ok(Poll::Ready(r)) => r,
                    // Every call already finished inline, so a pending
                    // function waits for something else.
                    Ok(Poll::Pending) => {
                        let _ = catch_unwind(AssertUnwindSafe(move || drop(future)));
                        Err(Abort::stalled(&self.app.describe(function)))
                    }
                    Err(panic) => {
                        let _ = catch_unwind(AssertUnwindSafe(move || drop(future)));
                        Err(Abort::from_panic(&*panic))
                    }
                }
            }
        };
        // Async sends run after the body, in the order they were sent.
        let sends = std::mem::take(&mut self.nodes.borrow_mut()[node].sends);
        for (child, f, address, args) in sends {
            let (_, abort) = self.run(tid, now_us, f, address, args, depth + 1, frame.child_seed(child));
            self.note_child(node, child, abort);
        }
        let own = frame
            .forced
            .borrow_mut()
            .take()
            .or_else(|| result.as_ref().err().cloned());
        let child_abort = self.nodes.borrow_mut()[node].child_abort.take();
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
            let mut nodes = self.nodes.borrow_mut();
            let n = &mut nodes[node];
            if n.child_abort.as_ref().is_none_or(|(c, _)| child < *c) {
                n.child_abort = Some((child, abort));
            }
        }
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

    fn read(&self, frame: &Frame, f: &mut dyn FnMut(Option<&Value>)) -> Result<(), Abort> {
        let (op, hash, key) = (frame.function.op, frame.hash.get(), Txn::key(frame));
        let overlay = self.overlay.borrow();
        if let Some(i) = overlay.find(op, hash, key) {
            f(overlay.entries[i].3.as_ref());
            return Ok(());
        }
        let state = self.state.borrow();
        f(state.find(hash, |e| e.0 == op && e.1 == *key).map(|e| &e.2));
        Ok(())
    }

    fn write(&self, frame: &Frame, value: Option<Value>) -> Result<(), Abort> {
        let (op, hash, key) = (frame.function.op, frame.hash.get(), Txn::key(frame));
        self.overlay.borrow_mut().write(op, hash, key, value);
        Ok(())
    }

    fn call(&self, frame: &Frame, child: u32, function: FnId, address: Address, args: Payload, sync: bool) {
        let node = frame.task.get();
        assert_ne!(node, NO_INDEX);
        if !sync {
            self.nodes.borrow_mut()[node as usize]
                .sends
                .push((child, function, address, args));
            // An async send's slot is never read.
            return;
        }
        let me = self.me.upgrade().expect("transaction alive");
        let (result, abort) = me.run(
            frame.tid,
            frame.now_us,
            function,
            address,
            args,
            frame.depth + 1,
            frame.child_seed(child),
        );
        self.note_child(node as usize, child, abort);
        frame.calls.borrow_mut()[child as usize].result = Some(result);
    }

    fn scan(&self, frame: &Frame, f: &mut dyn FnMut(&Key, &Value)) -> Result<(), Abort> {
        let op = frame.function.op;
        let partitions = self.app.operator_info(op).partitions();
        let mut rows: BTreeMap<Key, Option<Value>> = self
            .state
            .borrow()
            .iter()
            .filter(|(o, k, _)| *o == op && k.partition(partitions) == frame.partition)
            .map(|(_, k, v)| (k.clone(), Some(v.clone())))
            .collect();
        for (o, _, k, v) in &self.overlay.borrow().entries {
            if *o == op && k.partition(partitions) == frame.partition {
                rows.insert(k.clone(), v.clone());
            }
        }
        for (k, v) in &rows {
            if let Some(v) = v {
                f(k, v);
            }
        }
        Ok(())
    }
}
