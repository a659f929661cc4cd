//! Replies wait for durability: an answer leaves once every shard's log
//! holds its epoch.
//!
//! A transaction's outcome depends on the input of every shard in its
//! epoch (conflicts, calls), so answering before every shard's log holds
//! the epoch could tell a client about a commit that a crash then undoes.
//! Each shard tells every peer how far its log is durable (`Durable`); a
//! reply is held, with the others of its epoch, until the smallest of those
//! reaches its epoch. Without a log (`Durability::None`) and while
//! replaying (the log already holds the input) nothing is held.
//!
//! Invariants: `held` is in increasing epoch order, one entry per epoch,
//! and is released from the front; durability marks only grow; replies of
//! one epoch leave in the order they were held.

use super::Shard;
use crate::config::{Durability, Outcome, Reply as ClientReply, Token};
use crate::ids::{Epoch, ShardId, Tid};
use crate::message::Message;
use std::collections::VecDeque;

/// Where a transaction's reply goes: a request submitted here, one a peer
/// forwarded because this shard is its client's home, or none (a
/// transaction replayed from the log, whose outcome only checks see).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ReplyTo {
    Local(Token),
    Remote { shard: ShardId, token: Token },
    Replayed,
}

/// A reply waiting for its epoch's input to be durable everywhere.
pub(super) struct Release {
    pub(super) to: ReplyTo,
    pub(super) tid: Tid,
    pub(super) outcome: Outcome,
}

/// Held replies and how far every shard's log is durable.
pub(super) struct Gate {
    /// Replies by epoch, in increasing epoch order.
    pub(super) held: VecDeque<(Epoch, Vec<Release>)>,
    /// This shard's log is durable through this epoch.
    pub(super) durable_local: Epoch,
    /// What each peer said of its log (this shard's own entry is unused).
    pub(super) durable_peers: Vec<Epoch>,
}

impl Gate {
    pub(super) fn new(n_shards: u16) -> Gate {
        Gate {
            held: VecDeque::new(),
            durable_local: 0,
            durable_peers: vec![0; n_shards as usize],
        }
    }
}

impl Shard {
    /// The driver made this shard's log durable through `epoch`.
    pub fn log_durable(&mut self, epoch: Epoch) {
        assert_eq!(self.config.durability, Durability::Log);
        if epoch <= self.gate.durable_local {
            return;
        }
        self.gate.durable_local = epoch;
        self.announce_durable(epoch);
        self.release_replies();
    }

    /// Whether replies wait here for their epoch to be durable on every
    /// shard: releasing them may send messages (a reply to the shard its
    /// request came through), so a shard stopped at a handover with a
    /// log must wait until it holds none.
    pub fn holds_replies(&self) -> bool {
        !self.gate.held.is_empty()
    }

    /// Tells every peer that this shard's log is durable through `epoch`.
    pub(super) fn announce_durable(&self, epoch: Epoch) {
        let mut st = self.exec.st.borrow_mut();
        for peer in 0..self.exec.n_shards {
            if peer != self.exec.id {
                self.exec.route(&mut st, peer, Message::Durable { epoch });
            }
        }
    }

    /// Peer `from`'s log is durable through `epoch`.
    pub(super) fn on_durable(&mut self, from: ShardId, epoch: Epoch) {
        let d = &mut self.gate.durable_peers[from as usize];
        *d = (*d).max(epoch);
        self.release_replies();
    }

    /// Sends `release` once `epoch`'s input is durable everywhere.
    pub(super) fn release_after(&mut self, epoch: Epoch, release: Release) {
        if epoch <= self.durable_everywhere() {
            self.emit(release);
            return;
        }
        match self.gate.held.iter_mut().find(|(e, _)| *e == epoch) {
            Some((_, list)) => list.push(release),
            None => {
                let at = self
                    .gate
                    .held
                    .iter()
                    .position(|(e, _)| *e > epoch)
                    .unwrap_or(self.gate.held.len());
                self.gate.held.insert(at, (epoch, vec![release]));
            }
        }
    }

    /// Sends a reply now: to the driver, or to the shard that took the
    /// request; a replayed transaction's outcome goes to `replayed`.
    pub(super) fn emit(&mut self, r: Release) {
        match r.to {
            ReplyTo::Replayed => self.outputs.replayed.push(ClientReply {
                token: r.tid,
                tid: r.tid,
                outcome: r.outcome,
            }),
            ReplyTo::Local(token) => self.outputs.replies.push(ClientReply {
                token,
                tid: r.tid,
                outcome: r.outcome,
            }),
            ReplyTo::Remote { shard, token } => {
                let mut st = self.exec.st.borrow_mut();
                self.exec.route(
                    &mut st,
                    shard,
                    Message::Replied {
                        token,
                        tid: r.tid,
                        outcome: r.outcome,
                    },
                );
            }
        }
    }

    /// The epoch through which every shard's input is durable.
    fn durable_everywhere(&self) -> Epoch {
        if self.config.durability == Durability::None || self.seq.replay.is_some() {
            return Epoch::MAX;
        }
        let peers = self
            .gate
            .durable_peers
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != self.exec.id as usize)
            .map(|(_, e)| *e)
            .min()
            .unwrap_or(Epoch::MAX);
        peers.min(self.gate.durable_local)
    }

    /// Sends the held replies of every epoch now durable everywhere.
    pub(super) fn release_replies(&mut self) {
        let durable = self.durable_everywhere();
        while let Some((epoch, _)) = self.gate.held.front() {
            if *epoch > durable {
                break;
            }
            let (_, replies) = self.gate.held.pop_front().expect("front");
            for r in replies {
                self.emit(r);
            }
        }
    }
}
