//! Which messages a shard handles now, and which wait.
//!
//! Links are FIFO, but a peer may be a stage ahead: its `Done1` can arrive
//! while this shard still runs phase 1, its phase-2 invocations before this
//! shard has all flags, a phase-3 invocation before this shard has heard
//! the `Next` that allows it, its next epoch's messages before this one
//! ended here. Such a message waits in `deferred`, in arrival order, and is
//! handed back (`redeliver`) whenever the shard moves to a later stage.
//!
//! Invariants: no message is dropped; none of a finished epoch arrives (a
//! shard cannot end an epoch before every peer sent all of that epoch's
//! messages); an idle shard that hears of the next epoch starts it, since
//! every shard starts every epoch (an empty one runs empty).

use super::release::{Release, ReplyTo};
use super::{Shard, Stage};
use crate::config::{Outcome, Reply as ClientReply};
use crate::ids::Address;
use crate::ids::ShardId;
use crate::message::{Message, Phase};
use crate::store::Store;

/// A step among several shards handles at least this many messages …
const STEP_MESSAGES_MIN: usize = 8;
/// … and at most the epoch's transactions sequenced here over this.
const STEP_EPOCH_SHARE: usize = 16;

/// Local messages whose state `run_local` warms ahead of handling them.
const WARM_AHEAD: usize = 64;

/// Touches the state of every invocation in `msgs` before they run, in two
/// passes per [`WARM_AHEAD`] of them: the table probes ([`Store::probe`]),
/// then the entries they found ([`Store::touch`]). The lookups do not
/// depend on each other, so the processor overlaps their misses; split in
/// two, each invocation's chain of dependent misses is two long, not three.
pub(super) fn warm<'a>(store: &Store, msgs: impl Iterator<Item = &'a Message>) {
    let mut any = 0u8;
    let mut slots = [0u32; WARM_AHEAD];
    let mut n = 0;
    for msg in msgs {
        if let Message::Invoke(inv) = msg
            && matches!(inv.address, Address::Entity(_))
            && let Some(slot) = store.probe(inv.function.op, inv.partition, inv.hash)
        {
            slots[n] = slot;
            n += 1;
            if n == WARM_AHEAD {
                any ^= slots.iter().fold(0, |a, s| a ^ store.touch(*s));
                n = 0;
            }
        }
    }
    any ^= slots[..n].iter().fold(0, |a, s| a ^ store.touch(*s));
    std::hint::black_box(any);
}

impl Shard {
    /// Handles local messages, at most `step_messages_max` of them, after
    /// warming the state of the next `WARM_AHEAD` (a step can be short, so
    /// peers get this shard's messages soon, while the lookups it warms
    /// together stay many).
    pub(super) fn run_local(&mut self) {
        {
            let mut guard = self.exec.st.borrow_mut();
            let st = &mut *guard;
            let end = st.local.len().min(WARM_AHEAD.max(self.config.step_messages_max));
            if st.local_warmed < end {
                warm(&st.store, st.local.range(st.local_warmed..end));
                st.local_warmed = end;
            }
        }
        for _ in 0..self.step_budget() {
            let next = {
                let mut st = self.exec.st.borrow_mut();
                let next = st.local.pop_front();
                st.local_warmed = st.local_warmed.saturating_sub(1);
                next
            };
            match next {
                Some(msg) => self.handle(self.exec.id, msg),
                None => break,
            }
        }
    }

    /// Local messages one step handles: `step_messages_max`, less in a
    /// small epoch among several shards (its phases are short, and the
    /// peers wait for what this shard sends them: a short step ships it
    /// sooner; a large epoch keeps long steps, fewer and fuller batches).
    fn step_budget(&self) -> usize {
        let max = self.config.step_messages_max;
        if self.exec.n_shards == 1 {
            return max;
        }
        (self.m.coords.len() / STEP_EPOCH_SHARE).clamp(STEP_MESSAGES_MIN.min(max), max)
    }

    /// Messages of a later stage than ours wait in `deferred`; an idle
    /// shard that hears of the next epoch starts it.
    pub(super) fn handle(&mut self, from: ShardId, msg: Message) {
        while let Some((epoch, phase)) = msg.stage() {
            if self.m.stage == Stage::Idle {
                assert!(
                    epoch > self.m.epoch,
                    "message of finished epoch {epoch} at {}",
                    self.m.epoch
                );
                if epoch == self.m.epoch + 1 && !self.moves.is_waiting() && self.departing.is_none() {
                    self.start_epoch();
                    continue;
                }
                self.m.deferred.push_back((from, msg));
                return;
            }
            assert!(
                epoch >= self.m.epoch,
                "message of finished epoch {epoch} at {}",
                self.m.epoch
            );
            let early = epoch > self.m.epoch
                || self.m.stage < Stage::running(phase)
                || (phase == Phase::Serial
                    && match &msg {
                        // A phase-3 invocation waits for its step; a
                        // `Next` from a later coordinator for the one
                        // before it.
                        Message::Invoke(inv) => inv.step > self.serial.index,
                        Message::Next { index, .. } => *index > self.serial.index + 1,
                        _ => false,
                    });
            if early {
                self.m.deferred.push_back((from, msg));
                return;
            }
            break;
        }
        match msg {
            Message::Invoke(inv) => self.on_invoke(inv),
            Message::Reply(reply) => self.on_reply(reply),
            Message::Done1 {
                lc,
                aborted,
                moves,
                switches,
                handovers,
                ..
            } => self.on_done1(lc, aborted, moves, switches, handovers),
            Message::Flags { flags, snapshot, .. } => self.on_flags(flags, snapshot),
            Message::Finish {
                tid, commit, serial, ..
            } => self.on_finish(tid, commit, serial),
            Message::Done2 { drifted, .. } => self.on_done2(drifted),
            Message::Next { index, .. } => self.on_next(index),
            Message::Submit { origin, token, request } if self.departing.is_some() => {
                // A departing shard emits nothing more: the request waits
                // in its hand-off, accepted on the node it goes to (a
                // runtime ending its round at a handover counts on that).
                self.m
                    .deferred
                    .push_back((from, Message::Submit { origin, token, request }));
            }
            Message::Submit { origin, token, request } => {
                let to = ReplyTo::Remote { shard: origin, token };
                if self.seq.replay.is_some() {
                    self.clients.submitted_in_replay.push((to, request));
                } else if let Err(abort) = self.accept(to, request) {
                    self.emit(Release {
                        to,
                        tid: 0,
                        outcome: Outcome::Aborted(abort),
                    });
                }
            }
            Message::Replied { token, tid, outcome } => {
                self.outputs.replies.push(ClientReply { token, tid, outcome });
            }
            Message::Durable { epoch } => self.on_durable(from, epoch),
            Message::Install {
                epoch,
                op,
                partition,
                entities,
                deleted,
                last,
            } => self.on_install(epoch, op, partition, entities, deleted, last),
        }
    }

    /// Hands every deferred message back to `handle`, in arrival order.
    pub(super) fn redeliver(&mut self) {
        let deferred = std::mem::take(&mut self.m.deferred);
        for (from, msg) in deferred {
            self.handle(from, msg);
        }
    }
}
