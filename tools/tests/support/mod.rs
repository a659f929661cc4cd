//! Test support for the `styx-tools` tests only (the common module is
//! shared with other packages' tests): the `styx` CLI, and the requests and
//! checks of the kill -9 loops (`crash.rs`, `cluster.rs`).

#![allow(dead_code)]

use crate::common::*;
use std::collections::BTreeMap;
use std::process::Command;
use styx_engine::{Address, Key, Outcome, Payload, Tid};
use styx_net::{Body, Request};

/// Runs the `styx` CLI; returns its exit code and stdout then stderr.
pub fn styx(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_styx"))
        .args(args)
        .output()
        .expect("styx runs");
    (out.status.code().unwrap_or(-1), output_text(&out))
}

/// A request of the kill -9 loops: a transfer of `account`, or a move of
/// one of its partitions.
#[derive(Clone, Copy, Debug)]
pub enum Req {
    Transfer {
        debtor: u64,
        creditor: u64,
        amount: i64,
    },
    /// `__move` of a partition of `account` to a shard.
    Move {
        partition: u32,
        to: u16,
    },
}

/// Sends `r` as request `seq` of exactly-once client `client`.
pub fn send_as(c: &mut Conn, client: u64, seq: u64, r: Req) -> u32 {
    match r {
        Req::Transfer {
            debtor,
            creditor,
            amount,
        } => c.send(request(
            client,
            seq,
            "account",
            "transfer",
            Key::from(debtor),
            Payload::encode(&(creditor, amount)),
        )),
        Req::Move { partition, to } => c.send(Body::Request(Request {
            client,
            seq,
            ack: 0,
            operator: "account".into(),
            function: styx_engine::MOVE_FUNCTION.into(),
            target: Address::Partition(partition),
            args: Payload::encode(&to),
        })),
    }
}

/// A move of a random partition of `account` to a shard other than its
/// first owner (of `shards`): its first move changes the map (a move to
/// the owner is dropped).
pub fn move_off_first_owner(rng: &mut styx_engine::rng::Rng, shards: u16) -> Req {
    let partition = rng.below(u64::from(styx_tools::apps::PARTITIONS)) as u32;
    let first = styx_engine::partition_owner(partition, shards);
    Req::Move {
        partition,
        to: (first + 1 + rng.below(u64::from(shards) - 1) as u16) % shards,
    }
}

/// The newest move known committed (by tid) among `answered`.
pub fn newest_committed_move(sent: &BTreeMap<u64, Req>, answered: &BTreeMap<u64, (Tid, Outcome)>) -> Option<Tid> {
    answered
        .iter()
        .filter(|(seq, (_, o))| matches!(sent[*seq], Req::Move { .. }) && matches!(o, Outcome::Committed(_)))
        .map(|(_, (tid, _))| *tid)
        .max()
}

/// What a kill -9 loop's answered requests say the state must be.
pub struct History {
    /// Accounts `0..keys`: the start plus every committed transfer, once.
    pub balances: BTreeMap<u64, i64>,
    /// Each partition of `account` where its last committed move (in
    /// serial order, by tid) put it, else by the default rule.
    pub owner: Vec<u16>,
    /// The committed moves that change the map (a move to the owner is
    /// dropped), each a switch, in serial order.
    pub switching: Vec<Tid>,
    pub committed_moves: usize,
    shards: u16,
}

impl History {
    /// Every request of `sent` must be answered.
    pub fn of(
        sent: &BTreeMap<u64, Req>,
        answered: &BTreeMap<u64, (Tid, Outcome)>,
        keys: u64,
        start: i64,
        shards: u16,
    ) -> History {
        let mut balances: BTreeMap<u64, i64> = (0..keys).map(|k| (k, start)).collect();
        let mut moves: Vec<(Tid, u32, u16)> = Vec::new();
        for (seq, (tid, o)) in answered {
            if !matches!(o, Outcome::Committed(_)) {
                continue;
            }
            match sent[seq] {
                Req::Transfer {
                    debtor,
                    creditor,
                    amount,
                } => {
                    *balances.get_mut(&debtor).unwrap() -= amount;
                    *balances.get_mut(&creditor).unwrap() += amount;
                }
                Req::Move { partition, to } => moves.push((*tid, partition, to)),
            }
        }
        moves.sort_unstable();
        let mut owner: Vec<u16> = (0..styx_tools::apps::PARTITIONS)
            .map(|p| styx_engine::partition_owner(p, shards))
            .collect();
        let mut switching = Vec::new();
        for (tid, partition, to) in &moves {
            if owner[*partition as usize] != *to {
                switching.push(*tid);
            }
            owner[*partition as usize] = *to;
        }
        History {
            balances,
            owner,
            switching,
            committed_moves: moves.len(),
            shards,
        }
    }

    /// The partitions off the default rule, as PLACEMENT names them.
    pub fn moved(&self) -> Vec<(u32, u16)> {
        (0..styx_tools::apps::PARTITIONS)
            .filter(|p| self.owner[*p as usize] != styx_engine::partition_owner(*p, self.shards))
            .map(|p| (p, self.owner[p as usize]))
            .collect()
    }

    /// Of `kills` (the map's version at each, the newest move then known
    /// committed), those that left a decided move unswitched: every move
    /// decided up to the newest known committed one had switched unless
    /// the version was behind them.
    pub fn kills_mid_move(&self, kills: &[(u64, Option<Tid>)]) -> usize {
        kills
            .iter()
            .filter(|(version, newest)| {
                newest.is_some_and(|t| self.switching.iter().filter(|s| **s <= t).count() as u64 > *version)
            })
            .count()
    }
}
