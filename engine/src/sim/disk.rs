//! The simulator's disks: what the journal's events ([`DiskEvent`]) leave
//! on each node's disk, and a restart from them through [`crate::recovery`],
//! the functions the runtime recovers with.
//!
//! A disk holds, per shard, its durable log (a batch counts once its
//! `LogSync` happened; a `LogWrite` alone is torn or lost, which the WAL
//! detects and truncates: the same) and its complete snapshot files (a file
//! is complete at its last chunk; each extends the shard's previous file of
//! the same run, as the runtime's deltas do); per node, the manifests it
//! committed. [`Disks::restart`] describes each node's disk as a
//! [`recovery::Disk`], lets [`recovery::recover`] decide, then does what the
//! runtime does with the decision: drops manifests newer than the snapshot
//! every node has (the catalog's rollback), writes the empty batches to the
//! logs, and restores each shard with [`recovery::apply`].
//!
//! Logs are never trimmed here (the runtime trims those a complete snapshot
//! covers; recovery filters them the same way). The state a run was loaded
//! with before its first epoch is not on the disks: a restart without a
//! snapshot loads it again (a daemon gets it from its preload snapshot).

use super::{DiskEvent, Sim};
use crate::config::{Batch, SnapshotChunk};
use crate::ids::{Epoch, OpId, ShardId};
use crate::key::Key;
use crate::oracle::State;
use crate::recovery::{self, Plan, Snapshot, Start};
use crate::value::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

/// A complete snapshot file of one shard: the state its chain holds.
#[derive(Clone, Debug)]
struct File {
    entities: State,
    meta: Vec<u8>,
}

/// The disks of a simulated cluster (one node by default), across runs.
#[derive(Clone, Debug)]
pub struct Disks {
    /// Per node, how many shards it runs (node 0 the first ones).
    nodes: Vec<u16>,
    /// What the first run was loaded with.
    initial: Vec<(OpId, Key, Value)>,
    /// Per shard, its durable log: epochs 1, 2, … in order.
    logs: Vec<Vec<Batch>>,
    /// Per shard, its complete snapshot files by epoch.
    files: Vec<BTreeMap<Epoch, File>>,
    /// Per shard, the state its last file of this run holds (what the
    /// next one extends), and the file being written.
    chain: Vec<State>,
    writing: Vec<Option<(Epoch, State)>>,
    /// Per node, the snapshots whose manifest it committed.
    manifests: Vec<BTreeSet<Epoch>>,
    /// Per node, the newest snapshot it recorded as committed by every
    /// node (a cluster's `cluster-complete` file).
    complete: Vec<Epoch>,
}

/// What a restart decided and did.
#[derive(Clone, Debug)]
pub struct Restart {
    /// The plan every node agreed on.
    pub plan: Plan,
    /// Per node, where it started.
    pub starts: Vec<Start>,
    /// The entities every shard loaded from the snapshot, together.
    pub restored: State,
}

impl Restart {
    /// The snapshot restored (0: none).
    pub fn snapshot(&self) -> Epoch {
        self.plan.snapshot.unwrap_or(0)
    }

    /// Per shard, the epochs its log lacked and got as empty batches.
    pub fn relogged(&self, shard: ShardId) -> Vec<Epoch> {
        self.starts
            .iter()
            .flat_map(|s| &s.shards)
            .find(|s| s.shard == shard)
            .map(|s| s.relog.iter().map(|b| b.epoch).collect())
            .unwrap_or_default()
    }
}

impl Disks {
    /// Empty disks of a cluster whose node `i` runs `nodes[i]` shards, for
    /// runs that start from `initial` ([`Sim::load`]ed before anything ran).
    pub fn new(nodes: &[u16], initial: &[(OpId, Key, Value)]) -> Disks {
        assert!(!nodes.is_empty() && nodes.iter().all(|n| *n > 0), "nodes {nodes:?}");
        let n: usize = nodes.iter().map(|n| usize::from(*n)).sum();
        Disks {
            nodes: nodes.to_vec(),
            initial: initial.to_vec(),
            logs: vec![Vec::new(); n],
            files: vec![BTreeMap::new(); n],
            chain: vec![State::new(); n],
            writing: vec![None; n],
            manifests: vec![BTreeSet::new(); nodes.len()],
            complete: vec![0; nodes.len()],
        }
    }

    fn n_shards(&self) -> u16 {
        self.nodes.iter().sum()
    }

    fn shards_of(&self, node: u16) -> Range<ShardId> {
        let start: u16 = self.nodes[..usize::from(node)].iter().sum();
        start..start + self.nodes[usize::from(node)]
    }

    /// Applies journal `events` of a run: `chunks` are every chunk the run
    /// emitted ([`DiskEvent::Chunk`]'s `index` points into them), `sealed`
    /// returns the batch a shard sealed for an epoch ([`Sim::log`]).
    ///
    /// # Panics
    /// If the events break the rules a log task and a committer keep: a log
    /// synced out of order, a manifest before its files or logs.
    pub fn absorb(&mut self, events: &[DiskEvent], chunks: &[SnapshotChunk], sealed: &dyn Fn(ShardId, Epoch) -> Batch) {
        for event in events {
            match *event {
                // Not durable until its sync.
                DiskEvent::LogWrite { .. } => {}
                DiskEvent::LogSync { shard, epoch } => {
                    assert_eq!(
                        epoch,
                        self.logged(shard) + 1,
                        "shard {shard} synced epoch {epoch} out of order"
                    );
                    let batch = sealed(shard, epoch);
                    assert_eq!((batch.shard, batch.epoch), (shard, epoch));
                    // Its log's later batches are on another node's disk,
                    // which these disks do not model yet.
                    assert!(
                        batch.txns.iter().all(|(_, r)| crate::layout::Handover::of(r).is_none()),
                        "recovery across a shard handover is not built yet (docs/nodes.md, step 3)"
                    );
                    self.logs[shard as usize].push(batch);
                }
                DiskEvent::Chunk {
                    shard,
                    epoch,
                    index,
                    last,
                } => {
                    let chunk = &chunks[index];
                    assert_eq!((chunk.shard, chunk.epoch, chunk.last), (shard, epoch, last));
                    let s = shard as usize;
                    let chain = &self.chain[s];
                    let (file_epoch, state) = self.writing[s].get_or_insert_with(|| (epoch, chain.clone()));
                    assert_eq!(*file_epoch, epoch, "shard {shard} interleaved two snapshot files");
                    for (op, key, value) in &chunk.entries {
                        match value {
                            Some(v) => state.insert((*op, key.clone()), v.clone()),
                            None => state.remove(&(*op, key.clone())),
                        };
                    }
                    if last {
                        let (_, entities) = self.writing[s].take().expect("a file being written");
                        self.chain[s] = entities.clone();
                        let file = File {
                            entities,
                            meta: chunk.meta.clone(),
                        };
                        let old = self.files[s].insert(epoch, file);
                        assert!(old.is_none(), "shard {shard} wrote snapshot {epoch} twice");
                    }
                }
                DiskEvent::Manifest { epoch } => {
                    assert_eq!(self.nodes.len(), 1, "a one-node manifest ({epoch}) in a cluster");
                    self.commit(0, epoch);
                }
                DiskEvent::NodeManifest { node, epoch } => {
                    assert!(self.nodes.len() > 1, "a node manifest ({epoch}) in a sim of one node");
                    self.commit(node, epoch);
                }
            }
        }
    }

    fn commit(&mut self, node: u16, epoch: Epoch) {
        for s in self.shards_of(node) {
            assert!(
                self.files[s as usize].contains_key(&epoch),
                "node {node} committed snapshot {epoch} without shard {s}'s file"
            );
            assert!(
                self.logged(s) >= epoch,
                "node {node} committed snapshot {epoch} with shard {s}'s log durable through {}",
                self.logged(s)
            );
        }
        let manifests = &mut self.manifests[usize::from(node)];
        assert!(
            manifests.last().is_none_or(|m| *m < epoch),
            "node {node} committed snapshot {epoch} after {manifests:?}"
        );
        manifests.insert(epoch);
        if self.nodes.len() > 1 {
            // Every node committed it: each records it as complete (the
            // runtime does so a little later; earlier is the stricter test).
            let everywhere = self.manifests[0]
                .iter()
                .rev()
                .find(|e| self.manifests.iter().all(|m| m.contains(e)))
                .copied()
                .unwrap_or(0);
            for c in &mut self.complete {
                *c = (*c).max(everywhere);
            }
        }
    }

    /// The epoch through which `shard`'s log is durable.
    pub fn logged(&self, shard: ShardId) -> Epoch {
        let log = &self.logs[shard as usize];
        let last = log.last().map_or(0, |b| b.epoch);
        assert_eq!(log.len() as Epoch, last, "shard {shard}'s log has holes");
        last
    }

    /// `shard`'s durable log, oldest first.
    pub fn log(&self, shard: ShardId) -> &[Batch] {
        &self.logs[shard as usize]
    }

    /// The snapshots whose manifest `node` committed.
    pub fn manifests(&self, node: u16) -> &BTreeSet<Epoch> {
        &self.manifests[usize::from(node)]
    }

    /// What `node`'s disk holds, as the runtime reads a data directory.
    pub fn disk(&self, node: u16) -> recovery::Disk {
        let shards = self.shards_of(node);
        recovery::Disk {
            snapshots: self.manifests[usize::from(node)]
                .iter()
                .map(|e| Snapshot::at(*e, shards.clone()))
                .collect(),
            log_shards: shards.clone().filter(|s| !self.logs[*s as usize].is_empty()).collect(),
            logs: shards
                .clone()
                .map(|s| recovery::Log {
                    shard: s,
                    batches: self.logs[s as usize].clone(),
                    last_epoch: self.logged(s),
                })
                .collect(),
            complete: self.complete[usize::from(node)],
            shards,
        }
    }

    /// Restarts every node from these disks into `sim`, a fresh simulator
    /// of the same layout on which nothing ran: recovery decides from each
    /// node's disk, then (as the runtime does) manifests newer than the
    /// plan's snapshot are removed, the empty batches written to the logs,
    /// and every shard restored, its replay queued.
    pub fn restart(&mut self, sim: &mut Sim) -> Result<Restart, recovery::Error> {
        assert_eq!(sim.n_shards(), self.n_shards(), "a restart into another layout");
        assert_eq!(
            sim.layout(),
            &crate::layout::Layout::contiguous(&self.nodes),
            "a restart into another layout"
        );
        let nodes = self.nodes.len() as u16;
        let (plan, starts) = recovery::recover((0..nodes).map(|n| self.disk(n)).collect())?;
        let snapshot = plan.snapshot.unwrap_or(0);
        // The catalog's rollback: no newer snapshot may be chosen later. Its
        // files go too (the runtime collects them as garbage).
        for m in &mut self.manifests {
            m.split_off(&(snapshot + 1));
        }
        for files in &mut self.files {
            files.split_off(&(snapshot + 1));
        }
        if plan.snapshot.is_none() {
            for (op, key, value) in &self.initial {
                sim.load(*op, key, Some(value.clone()));
            }
        }
        let mut restored = State::new();
        for start in &starts {
            for s in &start.shards {
                let i = s.shard as usize;
                self.logs[i].extend(s.relog.iter().cloned());
                let file = s.snapshot.map(|e| &self.files[i][&e]);
                let mut entities = State::new();
                recovery::apply(s.clone(), sim.shard_mut(s.shard), |sink| {
                    let file = file.expect("a snapshot to restore has a file");
                    for ((op, key), value) in &file.entities {
                        sink(*op, key.clone(), value.clone());
                    }
                    Ok::<_, String>(file.meta.clone())
                })?;
                if let Some(file) = file {
                    entities.clone_from(&file.entities);
                }
                sim.collect(s.shard);
                self.chain[i].clone_from(&entities);
                self.writing[i] = None;
                restored.extend(entities);
            }
        }
        Ok(Restart { plan, starts, restored })
    }
}
