//! Serial execution: the same functions, one transaction after another, no
//! concurrency control. It is the oracle the engine is checked against and
//! the "serial ceiling" its throughput is compared with.
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
use crate::key::Key;
use crate::store::{Map, new_map};
use crate::value::Value;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

/// The whole state, keyed by operator and key.
pub type State = Map<(OpId, Key), Value>;

/// Runs transactions one after another against one in-memory state.
pub struct Serial {
    app: Arc<App>,
    limits: CallLimits,
    state: Rc<RefCell<State>>,
}

impl Serial {
    pub fn new(app: Arc<App>, limits: CallLimits) -> Serial {
        Serial {
            app,
            limits,
            state: Rc::new(RefCell::new(new_map())),
        }
    }

    /// Sets an entity's state outside any transaction.
    pub fn load(&mut self, op: OpId, key: Key, value: Option<Value>) {
        let mut state = self.state.borrow_mut();
        match value {
            Some(v) => state.insert((op, key), v),
            None => state.remove(&(op, key)),
        };
    }

    /// Runs one transaction to completion and applies it if it commits.
    pub fn execute(&self, tid: Tid, now_us: u64, request: &Request) -> Outcome {
        if let Err(abort) = crate::Shard::validate(&self.app, request) {
            return Outcome::Aborted(abort);
        }
        let txn = Rc::new_cyclic(|me| Txn {
            me: me.clone(),
            app: self.app.clone(),
            limits: self.limits,
            state: self.state.clone(),
            overlay: RefCell::new(new_map()),
            nodes: RefCell::new(Vec::new()),
        });
        let (result, abort) = txn.run(
            tid,
            now_us,
            request.function,
            request.address.clone(),
            request.args.clone(),
            0,
            root_seed(tid),
        );
        match abort {
            Some(abort) => Outcome::Aborted(abort),
            None => {
                let overlay = std::mem::replace(&mut *txn.overlay.borrow_mut(), new_map());
                let mut state = self.state.borrow_mut();
                for (k, v) in overlay {
                    match v {
                        Some(v) => state.insert(k, v),
                        None => state.remove(&k),
                    };
                }
                Outcome::Committed(result.expect("no abort, so a result"))
            }
        }
    }

    /// The state, sorted.
    pub fn snapshot(&self) -> BTreeMap<(OpId, Key), Value> {
        self.state
            .borrow()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    pub fn app(&self) -> &Arc<App> {
        &self.app
    }
}

struct Node {
    /// Async sends waiting to run after the body: (child, function, address, args).
    sends: Vec<(u32, FnId, Address, Payload)>,
    /// The lowest-numbered child's transaction-level abort.
    child_abort: Option<(u32, Abort)>,
}

struct Txn {
    me: std::rc::Weak<Txn>,
    app: Arc<App>,
    limits: CallLimits,
    state: Rc<RefCell<State>>,
    overlay: RefCell<Map<(OpId, Key), Option<Value>>>,
    nodes: RefCell<Vec<Node>>,
}

impl Txn {
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
        let partitions = self.app.operator_info(function.op).partitions();
        let partition = match &address {
            Address::Entity(k) => k.partition(partitions),
            Address::Partition(p) => *p,
        };
        let host: Rc<dyn Host> = self.clone();
        let frame = Rc::new(Frame::new(host, tid, now_us, function, address, partition, depth, seed));
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
        let own = frame.forced.borrow_mut().take().or_else(|| result.clone().err());
        let child_abort = self.nodes.borrow_mut()[node].child_abort.take();
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

    fn key(frame: &Frame) -> (OpId, Key) {
        match &frame.address {
            Address::Entity(k) => (frame.function.op, k.clone()),
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
        let key = Txn::key(frame);
        if let Some(v) = self.overlay.borrow().get(&key) {
            f(v.as_ref());
            return Ok(());
        }
        f(self.state.borrow().get(&key));
        Ok(())
    }

    fn write(&self, frame: &Frame, value: Option<Value>) -> Result<(), Abort> {
        self.overlay.borrow_mut().insert(Txn::key(frame), value);
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
            .filter(|((o, k), _)| *o == op && k.partition(partitions) == frame.partition)
            .map(|((_, k), v)| (k.clone(), Some(v.clone())))
            .collect();
        for ((o, k), v) in self.overlay.borrow().iter() {
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
