//! What handing a shard to another node costs the shard (`styx bench
//! handoff`): a YCSB-T shard of N accounts departs at an epoch end and is
//! rebuilt on its new node, each step timed — take its state
//! (`Shard::hand_off`), encode it for the wire, decode it, rebuild it
//! (`Shard::take_over`). Their sum is the pause the shard's epochs see at
//! the switch, before the network's transfer time (bytes / bandwidth,
//! reported). The engine runs in the simulator (two shards on two nodes,
//! one thread), and the run is checked: after the hand-off transfers run
//! on, and money is conserved.

use crate::ycsbt;
use std::time::Instant;
use styx_engine::sim::{Sim, test_config};
use styx_engine::{Handoff, Handover, Key, Layout, OpId, Outcome, Shard};

/// One hand-off timed.
#[derive(Clone, Debug)]
pub struct Timing {
    pub entities: usize,
    pub bytes: usize,
    pub hand_off_us: f64,
    pub encode_us: f64,
    pub decode_us: f64,
    pub take_over_us: f64,
}

impl Timing {
    /// The pause: every step but the network.
    pub fn pause_us(&self) -> f64 {
        self.hand_off_us + self.encode_us + self.decode_us + self.take_over_us
    }
}

/// Hands shard 0 of a 2-shard YCSB-T engine holding `accounts` accounts
/// (about half on shard 0) to the other node and back, `rounds` times;
/// returns each hand-off's timing. Panics if the run breaks an invariant.
pub fn run(accounts: u64, rounds: usize) -> Vec<Timing> {
    let app = ycsbt::app(64);
    let functions = ycsbt::Functions::of(&app);
    let mut config = test_config(1_000);
    config.snapshot_interval_us = 0;
    let mut sim = Sim::new(app.clone(), config.clone(), 2, 1);
    sim.set_layout(Layout::contiguous(&[1, 1]));
    sim.set_auto_hand_over(false);
    let start = ycsbt::start_value();
    for a in 0..accounts {
        sim.load(OpId(0), &Key::from(a), Some(start.clone()));
    }
    let mut token = 0;
    let mut timings = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let node = if round % 2 == 0 { 1 } else { 0 };
        sim.submit(1, token, Handover { shard: 0, node }.request())
            .expect("a handover is accepted");
        token += 1;
        // Transfers in flight around the switch.
        for i in 0..200u64 {
            let d = (round as u64 * 7_919 + i * 104_729) % accounts;
            let c = (d + 1) % accounts;
            sim.submit((i % 2) as u16, token, ycsbt::transfer(&functions, d, c, 1))
                .expect("a transfer is accepted");
            token += 1;
        }
        while !sim.shard(0).is_departing() {
            assert!(sim.step(), "the engine stopped before shard 0 departed");
        }
        let t0 = Instant::now();
        let handoff = sim.shard_mut(0).hand_off();
        let t1 = Instant::now();
        let bytes = handoff.encode();
        let t2 = Instant::now();
        let decoded = Handoff::decode(&bytes, &app).expect("a hand-off decodes");
        let t3 = Instant::now();
        let entities = decoded.entities();
        let taken = Shard::take_over(app.clone(), config.clone(), decoded).expect("a hand-off takes over");
        let t4 = Instant::now();
        sim.replace_shard(taken);
        timings.push(Timing {
            entities,
            bytes: bytes.len(),
            hand_off_us: (t1 - t0).as_secs_f64() * 1e6,
            encode_us: (t2 - t1).as_secs_f64() * 1e6,
            decode_us: (t3 - t2).as_secs_f64() * 1e6,
            take_over_us: (t4 - t3).as_secs_f64() * 1e6,
        });
        sim.run();
    }
    let replies = sim.take_replies();
    assert_eq!(replies.len() as u64, token, "every request answered");
    assert!(
        replies.iter().all(|r| matches!(r.outcome, Outcome::Committed(_))),
        "every transfer and handover committed"
    );
    assert_eq!(sim.handoffs(), rounds as u64);
    let total: i64 = sim
        .state()
        .values()
        .map(|v| v.decode::<i64>().expect("a balance"))
        .sum();
    assert_eq!(total, accounts as i64 * ycsbt::START_BALANCE, "money is conserved");
    timings
}

#[cfg(test)]
mod tests {
    /// A small run keeps its invariants (every request answered and
    /// committed, money conserved) across hand-offs both ways, and every
    /// hand-off carries the moving shard's accounts.
    #[test]
    fn hand_offs_keep_the_bank_whole() {
        let timings = super::run(2_000, 3);
        assert_eq!(timings.len(), 3);
        for t in &timings {
            assert!(t.entities > 800 && t.entities < 1_200, "{t:?}");
            assert!(t.bytes > t.entities * 10, "{t:?}");
        }
    }
}
