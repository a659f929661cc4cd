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
//! **Handovers.** A shard handed to another node (`crate::layout`) logs
//! each epoch on the node that ran it and writes each snapshot file on the
//! node that runs it after the snapshot's epoch, so its log is in pieces on
//! several disks and a node's manifests list different shards over time.
//! Once a journal shows one, a restart recovers through
//! [`recovery::recover_handed`]: each node restores the shards its copy of
//! the snapshot lists, each shard's log merged from every disk, and the
//! simulator takes the snapshot's layout; replay re-decides the rest.
//! (A snapshot file extends the shard's previous file whichever node wrote
//! that one: the runtime must write a whole file for a shard's first
//! snapshot on a node — docs/nodes.md, step 4.)
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
    /// The nodes listed that had not joined at the start (they run none).
    absent: Vec<u16>,
    /// What the first run was loaded with.
    initial: Vec<(OpId, Key, Value)>,
    /// Per node, per shard, the durable pieces of its log the node wrote:
    /// epochs in order (all of them without handovers).
    logs: Vec<Vec<Vec<Batch>>>,
    /// Per shard, the epoch through which its log is durable (on any disk).
    logged: Vec<Epoch>,
    /// Per node, per snapshot epoch, the shards whose file it holds.
    node_files: Vec<BTreeMap<Epoch, Vec<ShardId>>>,
    /// Whether the journal showed a shard on another node than its first
    /// (a piece of its log or a file there, or a manifest of other shards).
    handed: bool,
    /// Per shard, its complete snapshot files by epoch.
    files: Vec<BTreeMap<Epoch, File>>,
    /// Per shard, the state its last file of this run holds (what the
    /// next one extends), the node it is on (a file on another node starts
    /// a new chain: a shard's first snapshot on a node is whole), and the
    /// file being written.
    chain: Vec<State>,
    chain_node: Vec<Option<u16>>,
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
        Disks::with_absent(nodes, &[], initial)
    }

    /// [`Disks::new`] of a cluster that lists nodes `absent` besides, not
    /// yet joined (`Layout::with_absent`): each runs no shard.
    pub fn with_absent(nodes: &[u16], absent: &[u16], initial: &[(OpId, Key, Value)]) -> Disks {
        let n: usize = nodes.iter().map(|n| usize::from(*n)).sum();
        assert!(n > 0, "nodes {nodes:?}");
        assert!(
            nodes
                .iter()
                .enumerate()
                .all(|(i, c)| (*c == 0) == absent.contains(&(i as u16))),
            "nodes {nodes:?}, absent {absent:?}: the absent ones, and only they, run none"
        );
        Disks {
            nodes: nodes.to_vec(),
            absent: absent.to_vec(),
            initial: initial.to_vec(),
            logs: vec![vec![Vec::new(); n]; nodes.len()],
            logged: vec![0; n],
            node_files: vec![BTreeMap::new(); nodes.len()],
            handed: false,
            files: vec![BTreeMap::new(); n],
            chain: vec![State::new(); n],
            chain_node: vec![None; n],
            writing: vec![None; n],
            manifests: vec![BTreeSet::new(); nodes.len()],
            complete: vec![0; nodes.len()],
        }
    }

    fn n_shards(&self) -> u16 {
        self.nodes.iter().sum()
    }

    /// The shards `node` was first given.
    fn shards_of(&self, node: u16) -> Range<ShardId> {
        let start: u16 = self.nodes[..usize::from(node)].iter().sum();
        start..start + self.nodes[usize::from(node)]
    }

    /// Notes that `node` wrote for `shard`: a handover if not its own.
    fn wrote(&mut self, node: u16, shard: ShardId) {
        assert!(
            usize::from(node) < self.nodes.len(),
            "node {node} of {}",
            self.nodes.len()
        );
        if !self.shards_of(node).contains(&shard) {
            self.handed = true;
        }
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
                DiskEvent::LogSync { node, shard, epoch } => {
                    assert_eq!(
                        epoch,
                        self.logged(shard) + 1,
                        "shard {shard} synced epoch {epoch} out of order"
                    );
                    let batch = sealed(shard, epoch);
                    assert_eq!((batch.shard, batch.epoch), (shard, epoch));
                    self.wrote(node, shard);
                    self.logs[usize::from(node)][shard as usize].push(batch);
                    self.logged[shard as usize] = epoch;
                }
                DiskEvent::Chunk {
                    node,
                    shard,
                    epoch,
                    index,
                    last,
                } => {
                    let chunk = &chunks[index];
                    assert_eq!((chunk.shard, chunk.epoch, chunk.last), (shard, epoch, last));
                    let s = shard as usize;
                    if self.writing[s].is_none() {
                        let chunk = &chunks[index];
                        if chunk.base {
                            // A whole file: a new chain.
                            self.chain[s].clear();
                        } else {
                            assert!(
                                self.chain_node[s].is_none_or(|n| n == node),
                                "shard {shard}'s snapshot {epoch} on node {node} extends a file on another node"
                            );
                        }
                        self.chain_node[s] = Some(node);
                    }
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
                        self.wrote(node, shard);
                        self.node_files[usize::from(node)].entry(epoch).or_default().push(shard);
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
        // The shards it ran after the epoch, whose files it holds (a node
        // that ran none commits an empty manifest); that every shard is in
        // one node's manifest is checked where a snapshot is restored.
        let shards = self.files_of(node, epoch);
        if !shards.iter().copied().eq(self.shards_of(node)) {
            // Its shards changed: a handover.
            self.handed = true;
        }
        for s in shards {
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

    /// The shards whose file of snapshot `epoch` `node` holds, in order.
    fn files_of(&self, node: u16, epoch: Epoch) -> Vec<ShardId> {
        let mut shards = self.node_files[usize::from(node)]
            .get(&epoch)
            .cloned()
            .unwrap_or_default();
        shards.sort_unstable();
        shards
    }

    /// Whether the journal showed a shard writing on another node than its
    /// first (a handover): its log is then in pieces.
    pub fn holds_pieces(&self) -> bool {
        self.handed
    }

    /// The epoch through which `shard`'s log is durable.
    pub fn logged(&self, shard: ShardId) -> Epoch {
        self.logged[shard as usize]
    }

    /// `shard`'s durable log, oldest first, from every disk that holds a
    /// piece of it.
    pub fn log(&self, shard: ShardId) -> Vec<Batch> {
        let mut log: Vec<Batch> = self
            .logs
            .iter()
            .flat_map(|l| l[shard as usize].iter().cloned())
            .collect();
        log.sort_by_key(|b| b.epoch);
        let last = log.last().map_or(0, |b| b.epoch);
        assert_eq!(log.len() as Epoch, last, "shard {shard}'s log has holes");
        assert_eq!(last, self.logged(shard));
        log
    }

    /// The snapshots whose manifest `node` committed.
    pub fn manifests(&self, node: u16) -> &BTreeSet<Epoch> {
        &self.manifests[usize::from(node)]
    }

    /// What `node`'s disk holds, as the runtime reads a data directory: a
    /// log for each shard it was given and each it holds a piece of.
    pub fn disk(&self, node: u16) -> recovery::Disk {
        let n = usize::from(node);
        let shards = self.shards_of(node);
        let logs: Vec<recovery::Log> = (0..self.n_shards())
            .filter(|s| shards.contains(s) || !self.logs[n][*s as usize].is_empty())
            .map(|s| {
                let batches = self.logs[n][s as usize].clone();
                recovery::Log {
                    shard: s,
                    last_epoch: batches.last().map_or(0, |b| b.epoch),
                    batches,
                }
            })
            .collect();
        recovery::Disk {
            snapshots: self.manifests[n]
                .iter()
                .map(|e| Snapshot {
                    epoch: *e,
                    log_after: self.files_of(node, *e).into_iter().map(|s| (s, *e)).collect(),
                })
                .collect(),
            log_shards: logs.iter().filter(|l| !l.batches.is_empty()).map(|l| l.shard).collect(),
            logs,
            complete: self.complete[n],
            shards: shards.collect(),
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
            &crate::layout::Layout::contiguous(&self.nodes)
                .with_absent(self.absent.clone())
                .expect("absent nodes run none"),
            "a restart into another layout"
        );
        let nodes = self.nodes.len() as u16;
        let disks = (0..nodes).map(|n| self.disk(n)).collect();
        let (plan, starts) = if self.handed {
            recovery::recover_handed(disks)?
        } else {
            recovery::recover(disks)?
        };
        let mut restores = vec![0; usize::from(self.n_shards())];
        for s in starts.iter().flat_map(|s| &s.shards) {
            restores[s.shard as usize] += 1;
        }
        assert!(restores.iter().all(|r| *r == 1), "shards restored {restores:?} times");
        let snapshot = plan.snapshot.unwrap_or(0);
        // The catalog's rollback: no newer snapshot may be chosen later. Its
        // files go too (the runtime collects them as garbage).
        for m in &mut self.manifests {
            m.split_off(&(snapshot + 1));
        }
        for files in &mut self.files {
            files.split_off(&(snapshot + 1));
        }
        for files in &mut self.node_files {
            files.split_off(&(snapshot + 1));
        }
        if plan.snapshot.is_none() {
            for (op, key, value) in &self.initial {
                sim.load(*op, key, Some(value.clone()));
            }
        }
        let mut restored = State::new();
        for (node, start) in starts.iter().enumerate() {
            for s in &start.shards {
                let i = s.shard as usize;
                // The node that restores the shard writes the empty batches.
                if let Some(last) = s.relog.last() {
                    self.logged[i] = last.epoch;
                    if !self.shards_of(node as u16).contains(&s.shard) {
                        self.handed = true;
                    }
                }
                self.logs[node][i].extend(s.relog.iter().cloned());
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
                self.chain_node[i] = Some(node as u16);
                self.writing[i] = None;
                restored.extend(entities);
            }
        }
        if plan.snapshot.is_some() {
            // The snapshot's layout: replay re-decides later handovers.
            sim.adopt_restored_layout();
        }
        Ok(Restart { plan, starts, restored })
    }
}
