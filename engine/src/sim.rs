//! The simulator: every shard in one thread, messages delivered in an order
//! drawn from a seed.
//!
//! Links between shards stay FIFO (the protocol relies on it), but which
//! link delivers next, how much of a batch it delivers, when the clock moves
//! and when a log write becomes durable are all drawn from the seed. A
//! failing seed therefore replays the same run exactly: print it, rerun it.

use crate::abort::Abort;
use crate::app::App;
use crate::config::{Batch, Config, Durability, Reply, Request, SnapshotChunk, Token};
use crate::history::EpochRecord;
use crate::ids::{Epoch, OpId, ShardId};
use crate::key::Key;
use crate::message::Message;
use crate::rng::Rng;
use crate::shard::{Outputs, Shard};
use crate::value::Value;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

/// Steps without progress after which a run is declared stuck.
pub const STUCK_STEPS_MAX: u64 = 1_000_000;

/// A simulated engine.
pub struct Sim {
    shards: Vec<Shard>,
    /// `links[from * n + to]`: batches in flight, oldest first.
    links: Vec<VecDeque<Vec<Message>>>,
    rng: Rng,
    seed: u64,
    now_us: u64,
    replies: Vec<Reply>,
    history: Vec<EpochRecord>,
    logs: Vec<Vec<Batch>>,
    snapshots: Vec<SnapshotChunk>,
    /// Log batches written but not yet durable: `(shard, epoch)`.
    unsynced: Vec<(ShardId, Epoch)>,
    out: Outputs,
    steps: u64,
}

impl Sim {
    pub fn new(app: Arc<App>, config: Config, n_shards: u16, seed: u64) -> Sim {
        let shards = (0..n_shards)
            .map(|i| Shard::new(app.clone(), config.clone(), i, n_shards))
            .collect();
        let n = n_shards as usize;
        Sim {
            shards,
            links: (0..n * n).map(|_| VecDeque::new()).collect(),
            rng: Rng::new(seed),
            seed,
            now_us: 1_700_000_000_000_000,
            replies: Vec::new(),
            history: Vec::new(),
            logs: vec![Vec::new(); n],
            snapshots: Vec::new(),
            unsynced: Vec::new(),
            out: Outputs::default(),
            steps: 0,
        }
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    pub fn n_shards(&self) -> u16 {
        self.shards.len() as u16
    }

    pub fn shard(&self, i: ShardId) -> &Shard {
        &self.shards[i as usize]
    }

    pub fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }

    /// Loads an entity on the shard that owns it.
    pub fn load(&mut self, op: OpId, key: &Key, value: Option<Value>) {
        let owner = Shard::owner(self.shards[0].app(), self.n_shards(), op, key);
        self.shards[owner as usize].load(op, key, value);
    }

    /// Submits a request on `shard`.
    pub fn submit(&mut self, shard: ShardId, token: Token, request: Request) -> Result<(), Abort> {
        self.shards[shard as usize].tick(self.now_us);
        let r = self.shards[shard as usize].submit(token, request);
        self.collect(shard);
        r
    }

    /// Queues logged batches for replay on their shards.
    pub fn replay(&mut self, batches: Vec<Batch>) {
        let mut per_shard: Vec<Vec<Batch>> = vec![Vec::new(); self.shards.len()];
        for b in batches {
            per_shard[b.shard as usize].push(b);
        }
        for (i, mut bs) in per_shard.into_iter().enumerate() {
            bs.sort_by_key(|b| b.epoch);
            self.shards[i].replay(bs);
            self.collect(i as ShardId);
        }
    }

    fn collect(&mut self, shard: ShardId) {
        let n = self.shards.len();
        self.shards[shard as usize].drain(&mut self.out);
        for (to, msgs) in self.out.messages.iter_mut().enumerate() {
            if !msgs.is_empty() {
                assert_ne!(to, shard as usize, "a shard sent itself a message over a link");
                self.links[shard as usize * n + to].push_back(std::mem::take(msgs));
            }
        }
        self.replies.append(&mut self.out.replies);
        self.history.append(&mut self.out.history);
        self.snapshots.append(&mut self.out.snapshots);
        for b in self.out.log.drain(..) {
            self.unsynced.push((b.shard, b.epoch));
            self.logs[shard as usize].push(b);
        }
    }

    /// Does one thing chosen by the seed; false when nothing is left to do.
    pub fn step(&mut self) -> bool {
        self.steps += 1;
        self.now_us += self.rng.below(20);
        let n = self.shards.len();
        let busy: Vec<usize> = (0..self.links.len()).filter(|i| !self.links[*i].is_empty()).collect();
        let working: Vec<usize> = (0..n).filter(|i| self.shards[*i].has_work()).collect();
        let choices = busy.len() + self.unsynced.len() + working.len();
        if choices == 0 {
            // Nothing in flight: let time pass so gathering shards start.
            if self.shards.iter().all(Shard::is_quiet) {
                return false;
            }
            self.now_us += 1_000;
            for i in 0..n {
                self.shards[i].tick(self.now_us);
                self.collect(i as ShardId);
            }
            return true;
        }
        let pick = self.rng.below(choices as u64) as usize;
        if pick < busy.len() {
            let link = busy[pick];
            let (from, to) = (link / n, link % n);
            let head = self.links[link].front_mut().expect("busy link");
            let batch = if head.len() > 1 && self.rng.chance(0.25) {
                // Deliver a prefix: the rest stays first in line.
                let cut = 1 + self.rng.below(head.len() as u64 - 1) as usize;
                let rest = head.split_off(cut);
                std::mem::replace(head, rest)
            } else {
                self.links[link].pop_front().expect("busy link")
            };
            self.shards[to].receive(from as ShardId, batch);
            self.collect(to as ShardId);
        } else if pick >= busy.len() + self.unsynced.len() {
            let shard = working[pick - busy.len() - self.unsynced.len()];
            self.shards[shard].step();
            self.collect(shard as ShardId);
        } else {
            // Log writes become durable in order per shard.
            let i = pick - busy.len();
            let (shard, _) = self.unsynced[i];
            let first = self.unsynced.iter().position(|(s, _)| *s == shard).expect("entry");
            let (shard, epoch) = self.unsynced.remove(first);
            self.shards[shard as usize].log_durable(epoch);
            self.collect(shard);
        }
        if self.rng.chance(0.01) {
            let i = self.rng.below(n as u64) as usize;
            self.shards[i].tick(self.now_us);
            self.collect(i as ShardId);
        }
        true
    }

    /// Runs until nothing is in flight, pending or held.
    ///
    /// # Panics
    /// If the run makes no progress for [`STUCK_STEPS_MAX`] steps.
    pub fn run(&mut self) {
        let start = self.steps;
        while self.step() {
            assert!(
                self.steps - start < STUCK_STEPS_MAX,
                "simulation stuck (seed {}):\n{}",
                self.seed,
                self.shards.iter().map(Shard::describe).collect::<Vec<_>>().join("\n")
            );
        }
    }

    /// Replies released so far, taken.
    pub fn take_replies(&mut self) -> Vec<Reply> {
        std::mem::take(&mut self.replies)
    }

    /// Epoch records released so far, taken (with `Config::record_history`).
    pub fn take_history(&mut self) -> Vec<EpochRecord> {
        std::mem::take(&mut self.history)
    }

    /// Snapshot chunks emitted so far, taken.
    pub fn take_snapshots(&mut self) -> Vec<SnapshotChunk> {
        std::mem::take(&mut self.snapshots)
    }

    /// Mutable access to a shard (to restore it before a run).
    pub fn shard_mut(&mut self, i: ShardId) -> &mut Shard {
        &mut self.shards[i as usize]
    }

    /// Every batch each shard emitted for the log, in order.
    pub fn logs(&self) -> Vec<Batch> {
        self.logs.iter().flatten().cloned().collect()
    }

    /// The whole state, sorted.
    pub fn state(&self) -> BTreeMap<(OpId, Key), Value> {
        let mut out = BTreeMap::new();
        for s in &self.shards {
            s.for_each_entity(|op, k, v| {
                out.insert((op, k.clone()), v.clone());
            });
        }
        out
    }

    pub fn stats(&self) -> crate::shard::Stats {
        let mut total = crate::shard::Stats::default();
        for s in &self.shards {
            let st = s.stats();
            total.epochs = total.epochs.max(st.epochs);
            total.committed += st.committed;
            total.aborted += st.aborted;
            total.reexecuted += st.reexecuted;
            total.serialized += st.serialized;
            total.invocations += st.invocations;
        }
        total
    }
}

/// A convenience: a config suited to the simulator (durable log, history).
pub fn test_config(epoch_txns_max: usize) -> Config {
    Config {
        epoch_txns_max,
        durability: Durability::Log,
        record_history: true,
        ..Config::default()
    }
}
