//! The transactions this shard coordinates: those it sequenced.
//!
//! A coordinated transaction is its request and where its reply goes, plus
//! a status that only moves forward within its epoch:
//!
//! - `Running` → `Ran` when its root replies in phase 1;
//! - `Ran` → `Finished` (aborted by its logic, or the commit rule holds)
//!   or `Fallback`, at the decision;
//! - `Fallback` → `Finished` when its root replies in phase 2, or `Serial`
//!   when the re-execution left its recorded set;
//! - `Serial` → `SerialRunning` at its turn in phase 3 → `Finished` when its
//!   root replies.
//!
//! Every transaction is `Finished` when its epoch ends; nothing outlives an
//! epoch, which is why snapshots carry no pending transactions.
//!
//! The root's reply (`Parent::Root { index }`) finds its transaction by its
//! position in `Machine::coords`; what a reply means depends on the status,
//! so this module only dispatches to the phase that is running.

use super::Shard;
use super::release::ReplyTo;
use crate::abort::Abort;
use crate::codec::Payload;
use crate::config::{Outcome, Request};
use crate::ctx::root_seed;
use crate::ids::{Epoch, ShardSet, Tid};
use crate::message::{Invoke, Message, Parent, Phase, Reply};

/// A transaction coordinated (sequenced) by this shard.
pub(super) struct Coordinated {
    pub(super) tid: Tid,
    pub(super) reply_to: ReplyTo,
    pub(super) request: Request,
    pub(super) now_us: u64,
    /// Shards its phase-1 execution touched.
    pub(super) participants: ShardSet,
    pub(super) status: Status,
}

pub(super) enum Status {
    Running,
    /// Phase 1 finished: its root's result and the transaction's abort.
    Ran {
        result: Result<Payload, Abort>,
        abort: Option<Abort>,
    },
    Fallback,
    /// Left its recorded set in phase 2: waits for phase 3.
    Serial,
    /// Running in phase 3.
    SerialRunning,
    Finished(Outcome),
}

impl Shard {
    /// Sends the root invocation of coordinated transaction `index` to the
    /// owner of its address.
    pub(super) fn dispatch_root(&self, c: &Coordinated, index: u32, epoch: Epoch, phase: Phase, step: u32) {
        let (partition, owner, hash) = self.exec.locate(c.request.function, &c.request.address);
        // Built in the call, after the borrow: the message goes straight into
        // the queue instead of through a copy on the stack.
        let mut st = self.exec.st.borrow_mut();
        let msg = Message::Invoke(Invoke {
            epoch,
            phase,
            tid: c.tid,
            now_us: c.now_us,
            function: c.request.function,
            address: c.request.address.clone(),
            partition,
            hash,
            args: c.request.args.clone(),
            seed: root_seed(c.tid),
            depth: 0,
            parent: Parent::Root {
                coordinator: self.exec.id,
                index,
            },
            step,
        });
        self.exec.route(&mut st, owner, msg);
    }

    /// The whole call graph of transaction `index` finished.
    pub(super) fn on_root_done(&mut self, index: u32, reply: Reply) {
        let c = &self.m.coords[index as usize];
        match c.status {
            Status::Running => self.root_done1(index, reply),
            Status::Fallback => self.root_done2(index, reply),
            Status::SerialRunning => self.root_done3(index, reply),
            _ => panic!("root of {} replied twice", c.tid),
        }
    }
}
