//! `Frontend::pump_after_local_work`: a frontend that asks is never pumped
//! while its shard has local work in a running epoch, and still gets every
//! request through (it is pumped while the shard waits, and between
//! epochs). A frontend that does not ask is pumped mid-work: the case the
//! flag exists for happens in this run.

mod common;

use common::bank;

use styx_engine::{Address, FnId, Key, Outcome, Payload, Reply, Request, Shard, Stage};
use styx_runtime::{Frontend, Options, run};

/// Transfers each shard sends in all.
const REQUESTS: u64 = 20_000;
/// Outstanding at a time, per shard.
const IN_FLIGHT: u64 = 400;
const ACCOUNTS: u64 = 1_000;

#[derive(Debug, Default)]
struct Seen {
    committed: u64,
    /// Pumps while the shard had local work in a running epoch.
    pumped_mid_work: u64,
    /// Pumps while an epoch ran and the shard had no local work.
    pumped_mid_epoch_waiting: u64,
}

struct Closed {
    transfer: FnId,
    after_local_work: bool,
    shard: u64,
    sent: u64,
    outstanding: u64,
    seen: Seen,
}

impl Frontend for Closed {
    type Output = Seen;

    fn pump(&mut self, shard: &mut Shard, _now: u64) -> bool {
        if shard.stage() != Stage::Idle {
            if shard.has_work() {
                self.seen.pumped_mid_work += 1;
            } else {
                self.seen.pumped_mid_epoch_waiting += 1;
            }
        }
        let mut any = false;
        while self.outstanding < IN_FLIGHT && self.sent < REQUESTS {
            // Debtors of this shard's own stream, creditors anywhere: about
            // half of the transfers cross shards.
            let n = self.sent * 2 + self.shard;
            let (debtor, creditor) = (n * 7919 % ACCOUNTS, n * 104_729 % ACCOUNTS);
            let request = Request {
                function: self.transfer,
                address: Address::Entity(Key::from(debtor)),
                args: Payload::encode(&(creditor, 1i64)),
                client: None,
            };
            if shard.submit(self.sent, request).is_err() {
                break;
            }
            self.sent += 1;
            self.outstanding += 1;
            any = true;
        }
        any
    }

    fn deliver(&mut self, replies: &mut Vec<Reply>, _now: u64) {
        for r in replies.drain(..) {
            self.outstanding -= 1;
            self.seen.committed += u64::from(matches!(r.outcome, Outcome::Committed(_)));
        }
    }

    fn does_io(&self) -> bool {
        false
    }

    fn pump_after_local_work(&self) -> bool {
        self.after_local_work
    }

    fn is_done(&self) -> bool {
        self.sent == REQUESTS && self.outstanding == 0
    }

    fn finish(self, _shard: &Shard) -> Seen {
        self.seen
    }
}

fn closed_loop(after_local_work: bool) -> Vec<Seen> {
    let (app, transfer) = bank("pump");
    let opts = Options {
        shards: 2,
        pin: false,
        ..Options::default()
    };
    run(app, opts, move |shard: &mut Shard| Closed {
        transfer,
        after_local_work,
        shard: u64::from(shard.id()),
        sent: 0,
        outstanding: 0,
        seen: Seen::default(),
    })
    .expect("run")
}

#[test]
fn a_frontend_that_asks_is_pumped_only_when_its_shard_has_no_local_work() {
    for (shard, seen) in closed_loop(true).iter().enumerate() {
        assert_eq!(
            seen.committed, REQUESTS,
            "shard {shard}: every transfer commits: {seen:?}"
        );
        assert_eq!(seen.pumped_mid_work, 0, "shard {shard}: {seen:?}");
    }
}

#[test]
fn a_frontend_that_does_not_ask_is_pumped_mid_work() {
    let seen = closed_loop(false);
    assert!(seen.iter().all(|s| s.committed == REQUESTS), "{seen:?}");
    assert!(seen.iter().any(|s| s.pumped_mid_work > 0), "{seen:?}");
}
