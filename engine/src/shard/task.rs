//! Invocations: admission, start, poll, completion, and the replies that
//! tie a call graph together.
//!
//! An `Invoke` becomes a task: its access is recorded (phase 1 and 3 here;
//! phase 2 goes through the lock queues of `phase2`), its function started
//! and polled. Futures are polled with a no-op waker: only a reply to one
//! of its calls can make a function progress, so a task is polled when it
//! starts and when a reply arrives, never otherwise.
//!
//! Invariants: a task replies to its parent exactly once, when its body
//! returned and every call it issued replied (exact completion, one message
//! per call); its tree abort is its own, else the one of its
//! lowest-numbered child, so the transaction's abort does not depend on the
//! order replies arrive in. A panicking function is an abort of its
//! transaction, never of the shard.
//!
//! Tasks and frames are pooled: a slot of a finished task is reused by the
//! next, and a frame whose last handle came back is reset instead of freed
//! (a transfer allocates nothing); so are function bodies (`app::Runners`).

use super::Shard;
use crate::abort::Abort;
use crate::codec::Payload;
use crate::ctx::{Ctx, Frame, Host};
use crate::ids::{Address, ShardSet};
use crate::message::{Invoke, Message, Parent, Phase, Reply};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// Finished frames a shard keeps for reuse.
const SPARE_FRAMES_MAX: usize = 4096;

/// One invocation running here.
struct Task {
    frame: Rc<Frame>,
    /// The body, while it runs (taken from and given back to `runners`).
    runner: Option<Box<dyn crate::app::Runner>>,
    parent: Parent,
    body: Option<Result<Payload, Abort>>,
    replies: u32,
    /// The lowest-numbered child's tree abort.
    child_abort: Option<(u32, Abort)>,
    participants: ShardSet,
}

/// The invocations running here, by index (`Parent::Call::task`).
pub(super) struct Tasks {
    slots: Vec<Option<Task>>,
    free: Vec<u32>,
    /// Frames of finished invocations, to run new ones.
    frames: Vec<Rc<Frame>>,
    /// Function bodies of finished invocations, to run new ones.
    runners: crate::app::Runners,
}

impl Tasks {
    pub(super) fn new(app: &crate::App) -> Tasks {
        Tasks {
            slots: Vec::new(),
            free: Vec::new(),
            frames: Vec::new(),
            runners: crate::app::Runners::new(app),
        }
    }

    /// Whether no invocation runs here (none outlives its epoch).
    pub(super) fn all_finished(&self) -> bool {
        self.slots.iter().all(Option::is_none)
    }

    /// How many invocations run here.
    pub(super) fn live(&self) -> usize {
        self.slots.iter().filter(|t| t.is_some()).count()
    }
}

impl Shard {
    pub(super) fn on_invoke(&mut self, inv: Invoke) {
        self.m.stats.invocations += 1;
        self.m.partition_invocations[inv.function.op.0 as usize][inv.partition as usize] += 1;
        match inv.phase {
            Phase::Fallback => self.admit_fallback(inv),
            // Phase 1 records what it touches; phase 3 runs alone in the
            // system: neither takes locks or checks a recorded set.
            phase @ (Phase::Optimistic | Phase::Serial) => {
                let (slot, access) = {
                    let mut guard = self.exec.st.borrow_mut();
                    let st = &mut *guard;
                    let partition = inv.partition;
                    let op = inv.function.op;
                    let pseudo = st.store.partition(op, partition).pseudo;
                    let (slot, key) = match &inv.address {
                        Address::Entity(key) => (st.store.slot(op, partition, key, inv.hash), Some(key)),
                        Address::Partition(_) => (pseudo, None),
                    };
                    let touched = st.tables.touch(&mut st.store, slot, op, partition, key);
                    let txn = st.tables.txn_or_insert(inv.tid);
                    let access = st.tables.access(phase, txn, touched, pseudo);
                    (slot, access)
                };
                self.start_task(inv, slot, access);
            }
        }
    }

    pub(super) fn start_task(&mut self, inv: Invoke, slot: u32, access: u32) {
        let partition = inv.partition;
        let frame = match self.tasks.frames.pop() {
            Some(mut frame) => {
                let f = Rc::get_mut(&mut frame).expect("pooled frames are unshared");
                f.reset(
                    inv.tid,
                    inv.now_us,
                    inv.function,
                    inv.address,
                    partition,
                    inv.depth,
                    inv.seed,
                );
                frame
            }
            None => {
                let host: Rc<dyn Host> = self.exec.clone();
                Rc::new(Frame::new(
                    host,
                    inv.tid,
                    inv.now_us,
                    inv.function,
                    inv.address,
                    partition,
                    inv.depth,
                    inv.seed,
                ))
            }
        };
        frame.slot.set(slot);
        frame.access.set(access);
        let index = match self.tasks.free.pop() {
            Some(i) => i,
            None => {
                self.tasks.slots.push(None);
                (self.tasks.slots.len() - 1) as u32
            }
        };
        frame.task.set(index);
        let mut runner = self.tasks.runners.take(&self.exec.app, inv.function);
        let ctx = Ctx { frame: frame.clone() };
        let args = inv.args;
        let started = catch_unwind(AssertUnwindSafe(|| runner.start(ctx, &args)));
        let (runner, body) = match started {
            Ok(Ok(())) => (Some(runner), None),
            Ok(Err(abort)) => {
                self.tasks.runners.give(&self.exec.app, inv.function, runner);
                (None, Some(Err(abort)))
            }
            Err(panic) => (None, Some(Err(Abort::from_panic(&*panic)))),
        };
        self.tasks.slots[index as usize] = Some(Task {
            frame,
            runner,
            parent: inv.parent,
            body,
            replies: 0,
            child_abort: None,
            participants: ShardSet::one(self.exec.id),
        });
        self.poll_task(index);
    }

    fn poll_task(&mut self, index: u32) {
        let tasks = &mut self.tasks;
        let task = tasks.slots[index as usize].as_mut().expect("live task");
        if let Some(runner) = &mut task.runner {
            let mut cx = Context::from_waker(Waker::noop());
            match catch_unwind(AssertUnwindSafe(|| runner.poll(&mut cx))) {
                Ok(Poll::Pending) => {
                    // Only replies wake a function; with none outstanding it
                    // waits for something that will never come.
                    if task.replies == task.frame.calls.borrow().len() as u32 {
                        let mut runner = task.runner.take().expect("running");
                        let _ = catch_unwind(AssertUnwindSafe(move || runner.clear()));
                        let name = self.exec.app.describe(task.frame.function);
                        task.body = Some(Err(Abort::stalled(&name)));
                    }
                }
                Ok(Poll::Ready(result)) => {
                    let runner = task.runner.take().expect("running");
                    tasks.runners.give(&self.exec.app, task.frame.function, runner);
                    task.body = Some(result);
                }
                Err(panic) => {
                    let mut runner = task.runner.take().expect("running");
                    // A future that panicked may panic again when dropped.
                    let _ = catch_unwind(AssertUnwindSafe(move || runner.clear()));
                    task.body = Some(Err(Abort::from_panic(&*panic)));
                }
            }
        }
        self.maybe_complete(index);
    }

    fn maybe_complete(&mut self, index: u32) {
        let task = self.tasks.slots[index as usize].as_ref().expect("live task");
        let issued = task.frame.calls.borrow().len() as u32;
        if task.body.is_none() || task.replies < issued {
            return;
        }
        let task = self.tasks.slots[index as usize].take().expect("live task");
        self.tasks.free.push(index);
        let result = task.body.expect("body finished");
        let own = task
            .frame
            .forced
            .borrow_mut()
            .take()
            .or_else(|| result.as_ref().err().cloned());
        let tree_abort = own.or(task.child_abort.map(|(_, a)| a));
        self.send_reply(Reply {
            parent: task.parent,
            result,
            tree_abort,
            participants: task.participants,
        });
        // The body future is gone, so unless the function kept a `Ctx`
        // somewhere, this is the frame's last handle: reuse it.
        let frame = task.frame;
        if Rc::strong_count(&frame) == 1 && self.tasks.frames.len() < SPARE_FRAMES_MAX {
            self.tasks.frames.push(frame);
        }
    }

    pub(super) fn send_reply(&mut self, reply: Reply) {
        let to = reply.parent.shard();
        let mut st = self.exec.st.borrow_mut();
        self.exec.route(&mut st, to, Message::Reply(reply));
    }

    pub(super) fn on_reply(&mut self, reply: Reply) {
        match reply.parent {
            Parent::Call { task, child, .. } => {
                let t = self.tasks.slots[task as usize].as_mut().expect("reply for a live task");
                t.replies += 1;
                t.participants = t.participants.union(reply.participants);
                if let Some(abort) = reply.tree_abort
                    && t.child_abort.as_ref().is_none_or(|(c, _)| child < *c)
                {
                    t.child_abort = Some((child, abort));
                }
                let waker = {
                    let mut calls = t.frame.calls.borrow_mut();
                    let slot = &mut calls[child as usize];
                    slot.result = Some(reply.result);
                    slot.waker.take()
                };
                if let Some(w) = waker {
                    w.wake();
                }
                if t.body.is_none() {
                    self.poll_task(task);
                } else {
                    self.maybe_complete(task);
                }
            }
            Parent::Root { index, .. } => self.on_root_done(index, reply),
        }
    }
}
