//! The simulator: every shard in one thread, messages delivered in an order
//! drawn from a seed.
//!
//! Links between shards stay FIFO (the protocol relies on it), but which
//! link delivers next, how much of a batch it delivers, when the clock moves
//! and when a log write becomes durable are all drawn from the seed. A
//! failing seed therefore replays the same run exactly: print it, rerun it.
//!
//! **The disk.** The sim keeps a journal of what a production driver would
//! have put on disk, in order ([`DiskEvent`]): each shard's log is a
//! sequence of per-epoch batch writes, each followed by its fsync; a
//! snapshot is one delta file per shard (its chunks, in order), then a
//! manifest, written as soon as every shard's file is complete and every
//! shard's log is durable through the snapshot's epoch (the runtime's
//! committer rule). A shard hears that its log is durable
//! ([`Shard::log_durable`]) only right after the `LogSync` event, so every
//! reply is released after the fsyncs it waits for: a crash test cuts the
//! journal at any event and knows exactly what survived and which replies
//! had left ([`Sim::take_replies_at`]).

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

/// One event of the simulated disk (see the module comment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskEvent {
    /// `shard`'s batch of `epoch` appended to its log, not yet durable: a
    /// crash before the next event loses it (or tears it, which the WAL
    /// detects and truncates: the same).
    LogWrite { shard: ShardId, epoch: Epoch },
    /// `shard`'s log fsynced: durable through `epoch`.
    LogSync { shard: ShardId, epoch: Epoch },
    /// A chunk of `shard`'s snapshot at `epoch` written to its delta file;
    /// `index` counts every chunk the sim emitted, in the order
    /// [`Sim::take_snapshots`] returns them. The file is complete at `last`.
    Chunk {
        shard: ShardId,
        epoch: Epoch,
        index: usize,
        last: bool,
    },
    /// The manifest of the snapshot at `epoch` committed: recovery starts
    /// from it and replays only the logged epochs after it.
    Manifest { epoch: Epoch },
}

/// A simulated engine.
pub struct Sim {
    shards: Vec<Shard>,
    /// `links[from * n + to]`: batches in flight, oldest first.
    links: Vec<VecDeque<Vec<Message>>>,
    rng: Rng,
    seed: u64,
    now_us: u64,
    /// Replies released, each with the number of disk events before it.
    replies: Vec<(usize, Reply)>,
    history: Vec<EpochRecord>,
    logs: Vec<Vec<Batch>>,
    snapshots: Vec<SnapshotChunk>,
    /// Log batches sealed but not yet written and synced: `(shard, epoch)`.
    unsynced: Vec<(ShardId, Epoch)>,
    disk: Vec<DiskEvent>,
    /// Snapshot chunks emitted so far (the next chunk's index).
    chunks_emitted: usize,
    /// Per shard, the epoch through which its log is synced.
    synced: Vec<Epoch>,
    /// Snapshots not yet committed: epoch -> shards whose file is complete.
    snapshot_files: BTreeMap<Epoch, u16>,
    /// See [`Sim::set_fsync_busy`].
    fsync_busy: f64,
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
            disk: Vec::new(),
            chunks_emitted: 0,
            synced: vec![0; n],
            snapshot_files: BTreeMap::new(),
            fsync_busy: 0.0,
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
        let at = self.disk.len();
        self.replies.extend(self.out.replies.drain(..).map(|r| (at, r)));
        self.history.append(&mut self.out.history);
        for c in &self.out.snapshots {
            self.disk.push(DiskEvent::Chunk {
                shard: c.shard,
                epoch: c.epoch,
                index: self.chunks_emitted,
                last: c.last,
            });
            self.chunks_emitted += 1;
            if c.last {
                *self.snapshot_files.entry(c.epoch).or_default() += 1;
            }
        }
        self.snapshots.append(&mut self.out.snapshots);
        for b in self.out.log.drain(..) {
            self.unsynced.push((b.shard, b.epoch));
            self.logs[shard as usize].push(b);
        }
        self.commit_manifests();
    }

    /// Writes the manifest of every snapshot whose files are all complete
    /// and whose epoch every shard's log holds durably, oldest first.
    fn commit_manifests(&mut self) {
        let n = self.shards.len() as u16;
        let logged = self.synced.iter().copied().min().unwrap_or(0);
        while let Some((&epoch, &files)) = self.snapshot_files.first_key_value() {
            assert!(files <= n, "snapshot {epoch} completed {files} times");
            if files < n || epoch > logged {
                break;
            }
            self.snapshot_files.pop_first();
            self.disk.push(DiskEvent::Manifest { epoch });
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
        } else if self.fsync_busy > 0.0 && self.rng.chance(self.fsync_busy) {
            // The disk is still busy: the log write waits.
        } else {
            // Log writes become durable in order per shard.
            let i = pick - busy.len();
            let (shard, _) = self.unsynced[i];
            let first = self.unsynced.iter().position(|(s, _)| *s == shard).expect("entry");
            let (shard, epoch) = self.unsynced.remove(first);
            assert!(
                epoch > self.synced[shard as usize],
                "log batches of shard {shard} out of order"
            );
            self.disk.push(DiskEvent::LogWrite { shard, epoch });
            self.disk.push(DiskEvent::LogSync { shard, epoch });
            self.synced[shard as usize] = epoch;
            self.commit_manifests();
            // Only now, after the fsync, may the shard count the epoch durable.
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
        self.replies.drain(..).map(|(_, r)| r).collect()
    }

    /// Replies released so far, taken, each with the number of disk events
    /// that happened before its release: a crash after `k` events happens
    /// after every reply whose count is at most `k` left.
    pub fn take_replies_at(&mut self) -> Vec<(usize, Reply)> {
        std::mem::take(&mut self.replies)
    }

    /// Makes the simulated disk slow: a step that would write and fsync a
    /// log batch does nothing with chance `p`, so epochs end and peers run
    /// ahead while logs lag (replies then wait longer for durability, and
    /// crashes find the shards' logs at different epochs). The default, 0,
    /// draws nothing extra from the seed.
    pub fn set_fsync_busy(&mut self, p: f64) {
        assert!((0.0..1.0).contains(&p), "fsync busy chance {p}");
        self.fsync_busy = p;
    }

    /// The disk's journal so far (see [`DiskEvent`]).
    pub fn disk_events(&self) -> &[DiskEvent] {
        &self.disk
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
        // Tests choose their epochs' shape.
        epoch_txns_adaptive: false,
        durability: Durability::Log,
        record_history: true,
        ..Config::default()
    }
}
