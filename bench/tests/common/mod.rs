//! Shared by the workload simulation tests: a driver that loads a
//! workload into the simulator and submits requests in bursts between
//! simulation steps, the serial-oracle check (`styx_engine::oracle`,
//! shared with the engine's tests: a run must equal serial execution in the
//! engine's order), and the seed swarm of the randomized tests ([`swarm`],
//! as in the engine's tests).

#![allow(dead_code)]

use std::sync::Arc;
use styx_engine::rng::Rng;
use styx_engine::sim::{Sim, test_config};
use styx_engine::{App, CallLimits, Config, Key, OpId, Outcome, Reply, Request, Value};

#[allow(unused_imports)] // Each test binary uses its part.
pub use styx_engine::oracle::{Checked, State, check_run};

/// The state a list of loaded entities makes.
pub fn state_of(initial: &[(OpId, Key, Value)]) -> State {
    initial.iter().map(|(op, k, v)| ((*op, k.clone()), v.clone())).collect()
}

/// A finished simulated run.
pub struct Run {
    pub sim: Sim,
    pub limits: CallLimits,
    /// The outcome of request `i` (its token) at index `i`.
    pub outcomes: Vec<Outcome>,
    pub replies: Vec<Reply>,
    pub state: State,
}

/// Loads `initial` into a simulator of `shards` shards, submits `requests`
/// in bursts of up to `burst_max` to random shards with random numbers of
/// steps in between, runs to the end, and requires exactly one reply per
/// request.
pub fn simulate(
    app: &Arc<App>,
    initial: &[(OpId, Key, Value)],
    requests: &[Request],
    shards: u16,
    seed: u64,
    epoch_txns_max: usize,
    burst_max: u64,
) -> Run {
    simulate_with(
        app,
        initial,
        requests,
        shards,
        seed,
        sim_config(epoch_txns_max),
        burst_max,
    )
}

/// The simulator's configuration [`simulate`] uses: epochs of up to
/// `epoch_txns_max` transactions that gather a burst.
pub fn sim_config(epoch_txns_max: usize) -> Config {
    let mut config = test_config(epoch_txns_max);
    // Let bursts gather into one epoch, so that transactions contend.
    config.epoch_gather_us = 200;
    config
}

/// [`simulate`] with a configuration of the caller's.
pub fn simulate_with(
    app: &Arc<App>,
    initial: &[(OpId, Key, Value)],
    requests: &[Request],
    shards: u16,
    seed: u64,
    config: Config,
    burst_max: u64,
) -> Run {
    let limits = config.limits;
    let mut sim = Sim::new(app.clone(), config, shards, seed);
    for (op, k, v) in initial {
        sim.load(*op, k, Some(v.clone()));
    }
    let mut rng = Rng::new(seed ^ 0x5eed);
    let mut next = 0;
    while next < requests.len() {
        let burst = (1 + rng.below(burst_max)) as usize;
        for _ in 0..burst.min(requests.len() - next) {
            let shard = rng.below(u64::from(shards)) as u16;
            sim.submit(shard, next as u64, requests[next].clone())
                .unwrap_or_else(|e| panic!("request {next} refused: {e:?}"));
            next += 1;
        }
        for _ in 0..rng.below(300) {
            sim.step();
        }
    }
    sim.run();
    let replies = sim.take_replies();
    let mut outcomes: Vec<Option<Outcome>> = vec![None; requests.len()];
    for r in &replies {
        let slot = &mut outcomes[r.token as usize];
        assert!(slot.is_none(), "request {} answered twice (seed {seed})", r.token);
        *slot = Some(r.outcome.clone());
    }
    let outcomes: Vec<Outcome> = outcomes
        .into_iter()
        .enumerate()
        .map(|(i, o)| o.unwrap_or_else(|| panic!("request {i} never answered (seed {seed})")))
        .collect();
    let state = sim.state();
    Run {
        sim,
        limits,
        outcomes,
        replies,
        state,
    }
}

impl Run {
    /// Requires the run to equal serial execution in the engine's order.
    pub fn check_serial(&mut self, app: &Arc<App>, initial: &[(OpId, Key, Value)]) -> Checked {
        let history = self.sim.take_history();
        check_run(
            app,
            self.limits,
            initial,
            &self.sim.logs(),
            &history,
            &self.replies,
            &self.state,
        )
    }
}

// ---------------------------------------------------------------------------
// The seed swarm (`styx_engine::sim::swarm`), replaying in this test crate.

#[allow(unused_imports)] // each test crate uses some
pub use styx_engine::sim::swarm::{env_u64, seeds, seeds_of, test_name};

/// The command that replays `seed` of the test `test` in this test crate.
pub fn replay_command(test: Option<&str>, seed: u64) -> String {
    styx_engine::sim::swarm::replay_command(env!("CARGO_PKG_NAME"), env!("CARGO_CRATE_NAME"), test, seed)
}

/// Runs `run(seed)` for every seed of `seeds`, in order; the first that
/// fails prints itself and the command that replays it, and fails the test.
pub fn swarm(seeds: Vec<u64>, run: impl FnMut(u64)) {
    styx_engine::sim::swarm::swarm(seeds, env!("CARGO_PKG_NAME"), env!("CARGO_CRATE_NAME"), run)
}
