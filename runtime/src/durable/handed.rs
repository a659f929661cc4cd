//! Durability for a node whose shards change at handovers (`run_rounds`
//! with a data directory; docs/nodes.md, step 4).
//!
//! **A handover is a checkpoint.** At a handover at the end of epoch S
//! every shard of the cluster is stopped and every log is durable through
//! S (a shard's log closes before its round ends, so the log of a shard
//! leaving is durable on its old node before its hand-off is sent). Each
//! node then writes a whole snapshot file of every shard it runs from
//! S + 1 on ([`Durable::write_checkpoint`]: those staying from their live state,
//! those arriving from their hand-offs: `styx_engine::Checkpoint`), the
//! layout of S + 1 on, and a manifest of them at S; only then does it join
//! the next round. The join needs every node, so once any node runs S + 1
//! every node has committed S ([`Durable::next_round`]: it records S as
//! complete and removes what only an older snapshot needed, the logs and
//! files of the shards that left included). Recovery therefore never
//! replays across a handover: the snapshot every node completed is at or
//! after the last handover whose next round started, and if a crash cut a
//! checkpoint short (some node had not committed it), no log holds an
//! epoch past it — replay runs to S with the layout before it, re-decides
//! the handover at S's end, and the recovered run hands over again.
//!
//! **The layout at a restart** is that of the snapshot the plan restores:
//! each checkpoint writes it to a file (`layout-<epoch>`), and a node
//! takes the newest one at or before the plan's snapshot (every node
//! wrote the same ones up to there), or the layout it was given if none.
//! Its shards are those its copy of that snapshot lists.
//!
//! **A node that runs no shard** (a spare: it starts as one, or handed
//! its last shard away) writes no snapshot file, yet the cluster completes
//! a snapshot only once every node committed it, and a restart's plan
//! restores only a snapshot every node holds. So a spare commits, with a
//! manifest of no shard, each snapshot every node running shards
//! committed ([`Durable::commit_as_spare`], as it waits for a handover);
//! its checkpoint at a handover lists no shard, or those handed to it.

use super::{Durable, Recovered, ShardStart, in_dir, read_complete, write_complete};
use crate::cluster::Run;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use styx_engine::recovery::{self, Plan, Survey};
use styx_engine::{Checkpoint, Epoch, Layout, ShardId};
use styx_storage::snapshot::{Catalog, FileRef, Manifest};
use styx_storage::wal::{self, Tail};
use styx_storage::{DataDir, Error, fsutil};

/// Prefix of a checkpoint's layout file in a data directory's root: then
/// the epoch, 20 digits.
const LAYOUT_FILE: &str = "layout-";
/// In a data directory's root: the nodes this node knows left the cluster
/// (ascending `u16`s as a payload, then their crc32c). It only grows, and
/// is never rolled back with a checkpoint: a leave was decided in a log
/// every replay reads, and a node that left may be gone.
const LEFT_FILE: &str = "cluster-left";
/// In a data directory's root: the nodes listed as joining later that this
/// node knows joined the cluster, as [`LEFT_FILE`] (and for the same
/// reason: a join was decided in a log every replay reads).
const JOINED_FILE: &str = "cluster-joined";

/// What a data directory holds for a node whose shards may have changed:
/// every complete snapshot, the log of every shard found, the layouts of
/// the checkpoints. The node's shards are known once the plan is: those
/// of the snapshot it restores.
pub struct SurveyedHanded {
    dir: Arc<DataDir>,
    options: wal::Options,
    /// The shards this node runs without a snapshot (the first layout's).
    first: Vec<ShardId>,
    catalog: Catalog,
    manifests: Vec<Manifest>,
    /// Per shard with a log here, read from the oldest kept snapshot that
    /// lists it (from the start if none does).
    logs: BTreeMap<ShardId, (recovery::Log, Tail)>,
    layouts: BTreeMap<Epoch, Layout>,
    complete: Epoch,
    /// The preload the directory was made from (its marker).
    preload: Option<String>,
    /// The nodes the directory records as gone (`LEFT_FILE`).
    left: Vec<u16>,
    /// The nodes the directory records as joined (`JOINED_FILE`).
    joined: Vec<u16>,
}

impl std::fmt::Debug for SurveyedHanded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SurveyedHanded")
            .field("dir", &self.dir.root())
            .field("survey", &self.survey())
            .finish()
    }
}

impl Durable {
    /// Reads what `dir` holds for node `node` of a run with handovers
    /// that starts with `layout`. A directory without a layout file gets
    /// `layout` as its first (`layout-0`): from then on the directory,
    /// not the layout a restart is given, says where its shards ran.
    pub fn survey_handed(
        dir: Arc<DataDir>,
        layout: &Layout,
        node: u16,
        options: wal::Options,
    ) -> Result<SurveyedHanded, Error> {
        let catalog = Catalog::open(&dir)?;
        let manifests = styx_storage::snapshot::complete_manifests(&dir.snapshot_dir())?;
        let mut layouts = read_layouts(&dir)?;
        if layouts.is_empty() {
            write_layout(&dir, 0, layout)?;
            layouts.insert(0, layout.clone());
        }
        let first: Vec<ShardId> = match layouts.get(&0) {
            Some(l) => l.shards_of(node).collect(),
            None => layout.shards_of(node).collect(),
        };
        // The logs a plan may need: of the shards a kept snapshot lists,
        // from the oldest that does; with none kept, every log from the
        // start. A log no kept snapshot lists is what a shard that left
        // this node before all of them left behind (a shard arrives with
        // a checkpoint that lists it), no longer needed (a crash cut its
        // removal short): read from the start it may not even begin where
        // a reader expects.
        let mut after: Vec<(ShardId, Epoch)> = Vec::new();
        for s in wal::shards(&dir.wal_dir())? {
            match manifests.iter().find_map(|m| m.shard(s)) {
                Some(ss) => after.push((s, ss.log_after)),
                None if manifests.is_empty() => after.push((s, 0)),
                None => tracing::info!(shard = s, "a log of a shard that left this node, to remove"),
            }
        }
        let mut logs = BTreeMap::new();
        for recovered in wal::recover_all(&dir, &after)? {
            let (log, tail) = recovered.into_log();
            logs.insert(log.shard, (log, tail));
        }
        let complete = read_complete(&dir)?;
        let preload = crate::preload::marker(&dir)?;
        let left = read_nodes(&dir, LEFT_FILE)?;
        let joined = read_nodes(&dir, JOINED_FILE)?;
        Ok(SurveyedHanded {
            dir,
            options,
            first,
            catalog,
            manifests,
            logs,
            layouts,
            complete,
            preload,
            left,
            joined,
        })
    }

    /// Writes the checkpoint of a handover at the end of `epoch`: a whole
    /// file of every shard this node runs from the next epoch on (`of`)
    /// and `layout` (theirs); [`Durable::commit_checkpoint`] then commits
    /// the manifest of the files. Blocking: run it between rounds, once
    /// every local log is closed.
    pub fn write_checkpoint(&self, epoch: Epoch, layout: &Layout, of: Vec<Checkpoint>) -> Result<Vec<FileRef>, Error> {
        let mut ids: Vec<ShardId> = of.iter().map(|c| c.shard).collect();
        ids.sort_unstable();
        // No shard: a node that runs none from the next epoch on.
        if of.iter().any(|c| c.epoch != epoch) || ids.windows(2).any(|w| w[0] == w[1]) {
            return Err(Error::Snapshot(format!(
                "a checkpoint at epoch {epoch} of shards {ids:?} at epochs {:?}",
                of.iter().map(|c| c.epoch).collect::<Vec<_>>()
            )));
        }
        write_layout(&self.dir, epoch, layout)?;
        let dir = &self.dir;
        let files = std::thread::scope(|scope| {
            let writers: Vec<_> = of
                .into_iter()
                .map(|c| {
                    scope.spawn(move || {
                        let mut entries: Vec<_> = c.entities.into_iter().map(|(op, k, v)| (op, k, Some(v))).collect();
                        styx_storage::snapshot::write_entities(dir, c.shard, epoch, 0, &c.meta, &mut entries)
                    })
                })
                .collect();
            writers
                .into_iter()
                .map(|w| w.join().expect("a checkpoint writer panicked"))
                .collect::<Result<Vec<_>, _>>()
        })?;
        Ok(files)
    }

    /// Commits the manifest of a checkpoint's `files` at `epoch`
    /// ([`Durable::write_checkpoint`]).
    pub fn commit_checkpoint(&self, epoch: Epoch, files: Vec<FileRef>) -> Result<(), Error> {
        let ids: Vec<ShardId> = files.iter().map(|f| f.shard).collect();
        let mut c = self.committer.lock().expect("committer lock");
        // A fresh chain for every shard: no delta crosses a handover.
        let manifest = Manifest::snapshot(None, epoch, files)?;
        c.catalog.commit(manifest)?;
        self.committed_epoch.store(epoch, std::sync::atomic::Ordering::Relaxed);
        tracing::info!(epoch, shards = ?ids, "handover checkpoint committed");
        Ok(())
    }

    /// A spare's part in the cluster's snapshots (this node runs no shard
    /// in its run): commits, with a manifest of no shard, the newest
    /// snapshot every node running shards committed, once that is past
    /// this node's latest, tells the others, and removes what only older
    /// snapshots needed. Returns the epoch committed, if any. Without it
    /// no node would collect its old snapshots and logs while a spare
    /// exists, and a restart's plan would find no snapshot the spare
    /// holds after its last handover but that one.
    ///
    /// The epoch is one every running node committed, so the plan, which
    /// takes the newest snapshot every node holds, never finds it on the
    /// spare alone.
    pub fn commit_as_spare(&self) -> Result<Option<Epoch>, Error> {
        assert!(self.shards.is_empty(), "a spare runs no shard");
        let epoch = self.run.running_committed();
        if epoch <= self.committed_epoch.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(None);
        }
        {
            let mut c = self.committer.lock().expect("committer lock");
            // The layout it runs, where its files do not say it already: a
            // node that joined at a round change (it took the others'
            // layout, past its own files') places its snapshots as they do.
            let layout = as_filed(self.run.layout());
            if read_layouts(&self.dir)?.range(..=epoch).next_back().map(|(_, l)| l) != Some(&layout) {
                write_layout(&self.dir, epoch, &layout)?;
            }
            let manifest = Manifest::snapshot(c.catalog.latest(), epoch, Vec::new())?;
            c.catalog.commit(manifest)?;
        }
        self.committed_epoch.store(epoch, std::sync::atomic::Ordering::Relaxed);
        tracing::debug!(epoch, "snapshot committed (a spare: no shard)");
        self.run.committed_locally(epoch);
        super::collect_garbage(self)?;
        Ok(Some(epoch))
    }

    /// Waits for the removal of what the last handover's checkpoint made
    /// garbage ([`Durable::next_round`]), if any.
    pub fn collected(&self) {
        if let Some(gc) = self.collecting.lock().expect("collecting lock").take() {
            let _ = gc.join();
        }
    }

    /// This node's durability for the round after the handover at the end
    /// of `epoch`, whose checkpoint it committed
    /// ([`Durable::commit_checkpoint`]) before it joined `run`: every node
    /// did, so the checkpoint is the cluster's from now on. Opens the log
    /// of each shard arriving here after it (those `kept` on their
    /// executors keep theirs open); on a thread of its own, records the
    /// checkpoint as complete and removes what only older snapshots
    /// needed (the logs and files of shards no longer here, layouts).
    pub fn next_round(&self, epoch: Epoch, run: Arc<Run>, kept: &[ShardId]) -> Result<Arc<Durable>, Error> {
        self.collected();
        let shards = run.local_shards().to_vec();
        let catalog = Catalog::open(&self.dir)?;
        let manifest = catalog.latest().cloned();
        let listed: Option<Vec<ShardId>> = manifest
            .as_ref()
            .filter(|m| m.epoch == epoch)
            .map(|m| m.shards.iter().map(|s| s.shard).collect());
        if listed.as_ref() != Some(&shards) {
            return Err(Error::Snapshot(format!(
                "the round after the handover at epoch {epoch} runs shards {shards:?} here, but the latest snapshot is {:?} of shards {listed:?} (data directory {})",
                manifest.as_ref().map(|m| m.epoch),
                self.dir.root().display()
            )));
        }
        // An arriving shard takes the node's pool spare (a rename); the
        // spares departed shards left are settled below, off the round's
        // path (a rename of one whose preparation was cut short waits for
        // its writes: tens of ms).
        let arriving: Vec<ShardId> = shards.iter().copied().filter(|s| !kept.contains(s)).collect();
        take_pool_spare(&self.dir, &arriving)?;
        let mut starts = Vec::with_capacity(shards.len());
        for &s in &shards {
            if kept.contains(&s) {
                // Its writer goes on open, on the shard's executor.
                starts.push(Some(ShardStart {
                    start: None,
                    tail: None,
                }));
                continue;
            }
            let recovered = wal::recover(&self.dir, s, epoch)?;
            if recovered.tail.last_epoch() != epoch {
                return Err(Error::Snapshot(format!(
                    "shard {s}'s log here reaches epoch {}, past the handover at {epoch} (data directory {})",
                    recovered.tail.last_epoch(),
                    self.dir.root().display()
                )));
            }
            starts.push(Some(ShardStart {
                start: None,
                tail: Some(recovered.tail),
            }));
        }
        let cluster = run.is_cluster();
        let next = Durable::assemble(
            self.dir.clone(),
            self.options,
            shards.clone(),
            starts,
            manifest,
            epoch,
            catalog,
            run,
            epoch,
        );
        // The record that every node has the checkpoint, then what only
        // older snapshots needed: on a thread, under the committer's lock
        // (its own collection takes it too), while the round runs — the
        // removal of a departed shard's log and spare (~64 MiB files)
        // took tens of ms. A crash before it leaves garbage that the next
        // start removes (`SurveyedHanded::start`); the record only guards
        // against a node restarting without its directory.
        let gc = next.clone();
        let collect = move || -> Result<(), Error> {
            let c = gc.committer.lock().expect("committer lock");
            // Unless the committer recorded a later snapshot already.
            if cluster && gc.collected_through.load(std::sync::atomic::Ordering::Relaxed) <= epoch {
                write_complete(&gc.dir, epoch)?;
            }
            collect_departed(&gc.dir, &c.catalog, epoch, &shards)?;
            drop(c);
            settle_spares(&gc.dir, &shards, gc.options, true)
        };
        let spawned = std::thread::Builder::new().name("handover-gc".into()).spawn(move || {
            if let Err(e) = collect() {
                tracing::warn!("cannot remove what the handover's checkpoint made garbage: {e}");
            }
        });
        match spawned {
            Ok(gc) => *next.collecting.lock().expect("collecting lock") = Some(gc),
            Err(e) => tracing::warn!("cannot start the handover's garbage collection: {e}"),
        }
        Ok(next)
    }
}

impl SurveyedHanded {
    /// What the disk holds, for the cluster's join, and what the nodes
    /// check against each other there (`cluster::Joining`).
    pub fn joining(&self) -> crate::cluster::Joining {
        crate::cluster::Joining {
            survey: self.survey(),
            preload: self.preload.clone(),
            left: self.left.clone(),
            joined: self.joined.clone(),
        }
    }

    /// What the disk holds, for the cluster's join.
    pub fn survey(&self) -> Survey {
        recovery::Disk {
            shards: Vec::new(),
            snapshots: self.manifests.iter().map(Manifest::for_recovery).collect(),
            log_shards: self.logs.keys().copied().collect(),
            logs: self.logs.values().map(|(l, _)| l.clone()).collect(),
            complete: self.complete,
        }
        .survey()
    }

    /// The layout of the snapshot `plan` restores: that of the newest
    /// checkpoint at or before it (or the directory's first), checked
    /// against `first`'s shape (the run's own).
    pub fn layout_at(&self, plan: &Plan, first: &Layout) -> Result<Layout, String> {
        let at = plan.snapshot.unwrap_or(0);
        let Some((epoch, layout)) = self.layouts.range(..=at).next_back() else {
            return Ok(first.clone());
        };
        if layout.n_shards() != first.n_shards() || layout.nodes() != first.nodes() {
            return Err(format!(
                "the layout of the handover at epoch {epoch} in {} places {} shards on {} nodes; this run has {} on {}",
                self.dir.root().display(),
                layout.n_shards(),
                layout.nodes(),
                first.n_shards(),
                first.nodes()
            ));
        }
        Ok(layout.clone())
    }

    /// Starts from `plan` with the shards `run` gives this node (those its
    /// copy of the plan's snapshot lists): recovery decides from their
    /// logs, the catalog rolls back to the snapshot, and what belongs to
    /// no shard of this node any more goes.
    pub fn start(mut self, plan: Plan, run: Arc<Run>) -> Result<(Arc<Durable>, Recovered), Error> {
        let shards = run.local_shards().to_vec();
        if let Some(e) = plan.snapshot
            && self.manifests.is_empty()
            && self.logs.is_empty()
            && shards.is_empty()
        {
            // A node joining later that never ran, left out of the plan
            // (`Control::join_placed`) and running no shard at its
            // snapshot: it holds that snapshot as a spare would have
            // committed it, of no shard.
            let manifest = Manifest::snapshot(None, e, Vec::new())?;
            write_layout(&self.dir, e, run.layout())?;
            self.catalog.commit(manifest.clone())?;
            self.layouts.insert(e, run.layout().clone());
            self.manifests.push(manifest);
            tracing::info!(
                epoch = e,
                "a node that never ran holds the cluster's snapshot as one of no shard"
            );
        }
        let snapshot = match plan.snapshot {
            Some(e) => Some(
                self.manifests
                    .iter()
                    .rev()
                    .find(|m| m.epoch == e)
                    .map(Manifest::for_recovery)
                    .ok_or_else(|| {
                        in_dir(
                            &self.dir,
                            recovery::Error::MissingSnapshot {
                                epoch: e,
                                holds: self.survey().snapshots,
                            },
                        )
                    })?,
            ),
            None => None,
        };
        let holds: Vec<ShardId> = match &snapshot {
            Some(s) => s.log_after.iter().map(|(s, _)| *s).collect(),
            None => self.first.clone(),
        };
        if holds != shards {
            return Err(Error::Snapshot(format!(
                "this node's snapshot {:?} holds shards {holds:?}, the run's layout gives it {shards:?} (data directory {})",
                plan.snapshot,
                self.dir.root().display()
            )));
        }
        // A log of a shard this node does not run now must have ended by
        // the snapshot (the shard left at a handover it covers): one that
        // goes on, or any with no snapshot to explain it, is data this
        // start would lose.
        for (s, (log, _)) in &self.logs {
            let explained = plan.snapshot.is_some_and(|p| log.last_epoch <= p);
            if !shards.contains(s) && !explained {
                return Err(Error::Snapshot(format!(
                    "{} holds shard {s}'s log through epoch {}, but this node runs shards {shards:?} from snapshot {:?}: start it with the layout it ran (or restore the directory)",
                    self.dir.root().display(),
                    log.last_epoch,
                    plan.snapshot
                )));
            }
        }
        let mut logs = Vec::with_capacity(shards.len());
        let mut tails = Vec::with_capacity(shards.len());
        for &s in &shards {
            let (log, tail) = match self.logs.remove(&s) {
                Some(lt) => lt,
                // Arrived at the snapshot's handover: nothing logged here yet.
                None => {
                    let after = snapshot.as_ref().map_or(0, |sn| sn.epoch);
                    wal::recover(&self.dir, s, after)?.into_log()
                }
            };
            logs.push(log);
            tails.push(tail);
        }
        let disk = recovery::Disk {
            shards: shards.clone(),
            snapshots: snapshot.into_iter().collect(),
            log_shards: shards.clone(),
            logs,
            complete: self.complete,
        };
        let decided = recovery::start(disk, &plan).map_err(|e| in_dir(&self.dir, e))?;
        self.catalog.roll_back_to(plan.snapshot)?;
        let manifest = self.catalog.latest().cloned();
        assert_eq!(
            manifest.as_ref().map(|m| m.epoch),
            plan.snapshot,
            "the catalog rolled back to another snapshot than recovery chose"
        );
        // Layouts of checkpoints rolled back: a later one is written anew.
        for (epoch, _) in self.layouts.range(plan.snapshot.unwrap_or(0) + 1..) {
            remove(&layout_path(&self.dir, *epoch))?;
        }
        // Every node holds the plan's snapshot: nothing older is needed
        // for a shard that left (nor, once the cluster records it, for any).
        collect_departed(&self.dir, &self.catalog, plan.snapshot.unwrap_or(0), &shards)?;
        // Left by a process that stopped while it prepared one.
        for name in fsutil::list(&self.dir.wal_dir())? {
            if name.starts_with(POOL_SPARE) && name.ends_with(".part") {
                remove(&self.dir.wal_dir().join(name))?;
            }
        }
        take_pool_spare(&self.dir, &shards)?;
        // A fresh pool spare is 64 MiB of zeros written at every start: only
        // where handovers happened (a layout after the first), or on a
        // spare (it runs nothing else, and waits for shards to arrive).
        // Otherwise the first handover's collection prepares it, and the
        // first shard to arrive at this node before then writes its own
        // segment.
        let handed = self.layouts.keys().any(|e| *e > 0) || shards.is_empty();
        settle_spares(&self.dir, &shards, self.options, handed)?;
        Ok(Durable::recovered(
            self.dir,
            self.options,
            shards,
            decided,
            tails,
            manifest,
            self.catalog,
            run,
        ))
    }
}

/// Removes the logs and snapshot files of shards other than `shards`
/// (they left this node at a handover the cluster's snapshot at `epoch`
/// is past), the layouts before the newest at or before `epoch`, and what
/// the catalog no longer needs.
fn collect_departed(dir: &DataDir, catalog: &Catalog, epoch: Epoch, shards: &[ShardId]) -> Result<(), Error> {
    let wal_dir = dir.wal_dir();
    // The logs of shards gone first, newest segment first (a crash in
    // between leaves a log that still begins where it did), and for good
    // before the manifests that list them go.
    let mut removed = false;
    for s in wal::shards(&wal_dir)? {
        if !shards.contains(&s) {
            for segment in wal::segments(&wal_dir, s)?.iter().rev() {
                remove(&segment.path)?;
                removed = true;
            }
        }
    }
    if removed {
        fsutil::sync_dir(&wal_dir)?;
    }
    catalog.gc_keeping(epoch)?;
    for &s in shards {
        wal::remove_through(dir, s, epoch)?;
    }
    let snapshot_dir = dir.snapshot_dir();
    for name in fsutil::list(&snapshot_dir)? {
        if let Some((s, ..)) = styx_storage::snapshot::parse_file_name(&name)
            && !shards.contains(&s)
        {
            remove(&snapshot_dir.join(name))?;
        }
    }
    let layouts = read_layouts(dir)?;
    if let Some((&keep, _)) = layouts.range(..=epoch).next_back() {
        for (e, _) in layouts.range(..keep) {
            remove(&layout_path(dir, *e))?;
        }
    }
    for name in fsutil::list(dir.root())? {
        if name.starts_with(LAYOUT_FILE) && name.ends_with(".tmp") {
            remove(&dir.root().join(name))?;
        }
    }
    Ok(())
}

/// The node's spare log segment for a shard that arrives here (in the
/// log directory): a segment is prepared whole before it takes records
/// (64 MiB of zeros by default), which an arriving shard would otherwise
/// wait for before it logs its first epoch here.
const POOL_SPARE: &str = "pool-spare.tmp";

/// Gives the node's pool spare, if any, to a shard of `arriving` (one
/// whose log starts here) that has no spare segment of its own: a link
/// then an unlink, so that a spare a writer is preparing meanwhile under
/// that name is never replaced.
fn take_pool_spare(dir: &DataDir, arriving: &[ShardId]) -> Result<(), Error> {
    let wal_dir = dir.wal_dir();
    let pool = wal_dir.join(POOL_SPARE);
    if !pool.exists() {
        return Ok(());
    }
    for &s in arriving {
        let to = spare_of(&wal_dir, s);
        match std::fs::hard_link(&pool, &to) {
            Ok(()) => {
                remove(&pool)?;
                break;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io("link", &pool)(e)),
        }
    }
    Ok(())
}

fn spare_of(wal_dir: &Path, shard: ShardId) -> PathBuf {
    wal_dir.join(format!("wal-{shard:04}-spare.tmp"))
}

/// Makes one spare segment a shard left here (one not of `shards`) the
/// node's pool spare, for the next shard to arrive, and removes the
/// others; without either and if `prepare`, has a pool spare prepared
/// (zeros, synced, renamed into place when whole). Blocking: off the
/// round's path.
fn settle_spares(dir: &DataDir, shards: &[ShardId], options: wal::Options, prepare: bool) -> Result<(), Error> {
    let wal_dir = dir.wal_dir();
    let pool = wal_dir.join(POOL_SPARE);
    let left: Vec<PathBuf> = fsutil::list(&wal_dir)?
        .iter()
        .filter_map(|n| {
            n.strip_prefix("wal-")?
                .strip_suffix("-spare.tmp")?
                .parse::<ShardId>()
                .ok()
        })
        .filter(|s| !shards.contains(s))
        .map(|s| spare_of(&wal_dir, s))
        .collect();
    for p in left {
        if pool.exists() {
            remove(&p)?;
        } else {
            std::fs::rename(&p, &pool).map_err(io("rename", &p))?;
        }
    }
    if pool.exists() && std::fs::metadata(&pool).map_err(io("stat", &pool))?.len() != pool_bytes(options) {
        // Of a run with other segment options.
        remove(&pool)?;
    }
    if prepare && !pool.exists() {
        prepare_pool_later(&wal_dir, options);
    }
    Ok(())
}

/// A pool spare's size: a segment's, as the writer aligns it (its
/// alignment is the device's, at most 4 KiB; a size it does not accept is
/// removed and prepared anew by the writer).
fn pool_bytes(options: wal::Options) -> u64 {
    options.segment_bytes.max(4096).div_ceil(4096) * 4096
}

/// Prepares the node's pool spare on a thread of its own, never waited
/// for (a process that stops first leaves a `.part` file the next one
/// removes), one at a time per directory.
fn prepare_pool_later(wal_dir: &Path, options: wal::Options) {
    static PREPARING: std::sync::Mutex<std::collections::BTreeSet<PathBuf>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let pool = wal_dir.join(POOL_SPARE);
    if !PREPARING.lock().expect("preparing lock").insert(pool.clone()) {
        return;
    }
    let part = wal_dir.join(format!("{POOL_SPARE}.{}.part", std::process::id()));
    let spawned = std::thread::Builder::new().name("pool-spare".into()).spawn({
        let pool = pool.clone();
        move || {
            if let Err(e) = prepare_pool(&part, &pool, options) {
                tracing::warn!("cannot prepare a spare log segment for arriving shards: {e}");
                let _ = std::fs::remove_file(&part);
            }
            PREPARING.lock().expect("preparing lock").remove(&pool);
        }
    });
    if spawned.is_err() {
        PREPARING.lock().expect("preparing lock").remove(&pool);
    }
}

/// Writes a spare segment of `options.segment_bytes` at `part` (zeros if
/// the options zero-fill), syncs it and renames it to `pool`.
fn prepare_pool(part: &Path, pool: &Path, options: wal::Options) -> std::io::Result<()> {
    use std::io::Write;
    let f = std::fs::File::create(part)?;
    if options.zero_fill {
        let zeros = vec![0u8; 1 << 20];
        let mut w = std::io::BufWriter::new(&f);
        let mut left = pool_bytes(options);
        while left > 0 {
            let n = left.min(zeros.len() as u64) as usize;
            w.write_all(&zeros[..n])?;
            left -= n as u64;
        }
        w.flush()?;
    } else {
        f.set_len(pool_bytes(options))?;
    }
    f.sync_all()?;
    std::fs::rename(part, pool)
}

fn layout_path(dir: &DataDir, epoch: Epoch) -> PathBuf {
    dir.root().join(format!("{LAYOUT_FILE}{epoch:020}"))
}

fn io(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.to_path_buf();
    move |source| Error::Io { op, path, source }
}

fn remove(path: &Path) -> Result<(), Error> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io("remove", path)(e)),
        _ => Ok(()),
    }
}

/// The body of a small file written whole with its crc32c last (a layout,
/// the record of nodes gone), checked.
fn sealed_body<'a>(path: &Path, bytes: &'a [u8]) -> Result<&'a [u8], Error> {
    if bytes.len() < 4 {
        return Err(damaged(path, format!("{} bytes", bytes.len())));
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    if crc32c::crc32c(body).to_le_bytes() != crc {
        return Err(damaged(path, "wrong checksum"));
    }
    Ok(body)
}

fn damaged(path: &Path, why: impl std::fmt::Display) -> Error {
    Error::Snapshot(format!(
        "{} is damaged ({why}): restore the data directory from a backup",
        path.display()
    ))
}

/// The nodes `dir` records in `file` ([`LEFT_FILE`], [`JOINED_FILE`]).
fn read_nodes(dir: &DataDir, file: &str) -> Result<Vec<u16>, Error> {
    let path = dir.root().join(file);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io("read", &path)(e)),
    };
    let left = styx_engine::Payload::from_bytes(sealed_body(&path, &bytes)?)
        .decode::<Vec<u16>>()
        .map_err(|e| damaged(&path, e))?;
    if left.windows(2).any(|w| w[0] >= w[1]) {
        return Err(damaged(&path, "nodes not ascending"));
    }
    Ok(left)
}

/// Records, atomically and durably, that `nodes` left the cluster, with
/// those `dir` records already; returns whether the record grew.
pub fn record_left(dir: &DataDir, nodes: &[u16]) -> Result<bool, Error> {
    record_nodes(dir, LEFT_FILE, nodes, "recorded the nodes gone from the cluster")
}

/// Records, atomically and durably, that `nodes` (listed as joining later)
/// joined the cluster, with those `dir` records already; returns whether
/// the record grew.
pub fn record_joined(dir: &DataDir, nodes: &[u16]) -> Result<bool, Error> {
    record_nodes(dir, JOINED_FILE, nodes, "recorded the nodes that joined the cluster")
}

fn record_nodes(dir: &DataDir, file: &str, nodes: &[u16], what: &str) -> Result<bool, Error> {
    let mut all = read_nodes(dir, file)?;
    let before = all.len();
    all.extend_from_slice(nodes);
    all.sort_unstable();
    all.dedup();
    if all.len() == before {
        return Ok(false);
    }
    let mut bytes = styx_engine::Payload::encode(&all).as_bytes().to_vec();
    bytes.extend_from_slice(&crc32c::crc32c(&bytes).to_le_bytes());
    fsutil::write_atomic(&dir.root().join(file), &bytes)?;
    tracing::info!(nodes = ?all, "{what}");
    Ok(true)
}

/// Writes the layout that holds after the handover at `epoch`, atomically
/// and durably: version, node count, each shard's node and the nodes not
/// joined yet, then their crc32c. (Not the nodes that left: the join
/// learns those from the records, [`LEFT_FILE`]. The nodes absent are the
/// engine's to decide a join by, at a start without a snapshot.)
fn write_layout(dir: &DataDir, epoch: Epoch, layout: &Layout) -> Result<(), Error> {
    let node_of: Vec<u16> = (0..layout.n_shards()).map(|s| layout.node_of(s)).collect();
    let mut bytes =
        styx_engine::Payload::encode(&(layout.version(), layout.nodes(), node_of, layout.absent().to_vec()))
            .as_bytes()
            .to_vec();
    bytes.extend_from_slice(&crc32c::crc32c(&bytes).to_le_bytes());
    fsutil::write_atomic(&layout_path(dir, epoch), &bytes)
}

/// `layout` as a layout file keeps it (and [`read_layouts`] reads it):
/// version, placement, the nodes absent.
fn as_filed(layout: &Layout) -> Layout {
    Layout::placed_on(
        layout.nodes(),
        (0..layout.n_shards()).map(|s| layout.node_of(s)).collect(),
    )
    .and_then(|l| l.with_absent(layout.absent().to_vec()))
    .expect("a layout's own placement")
    .with_version(layout.version())
}

/// Every checkpoint's layout in `dir`, by epoch (a half-written one, left
/// by a crash before its rename, is skipped: its manifest was never
/// committed).
fn read_layouts(dir: &DataDir) -> Result<BTreeMap<Epoch, Layout>, Error> {
    let mut out = BTreeMap::new();
    for name in fsutil::list(dir.root())? {
        let Some(epoch) = name.strip_prefix(LAYOUT_FILE).and_then(|e| e.parse::<Epoch>().ok()) else {
            continue;
        };
        let path = dir.root().join(&name);
        let bytes = std::fs::read(&path).map_err(io("read", &path))?;
        let body = styx_engine::Payload::from_bytes(sealed_body(&path, &bytes)?);
        // A file written before nodes could join has no absent set.
        let (version, nodes, node_of, absent) = match body.decode::<(u64, u16, Vec<u16>, Vec<u16>)>() {
            Ok(l) => l,
            Err(_) => body
                .decode::<(u64, u16, Vec<u16>)>()
                .map(|(v, n, o)| (v, n, o, Vec::new()))
                .map_err(|e| damaged(&path, e))?,
        };
        let layout = Layout::placed_on(nodes, node_of)
            .and_then(|l| l.with_absent(absent))
            .map_err(|e| damaged(&path, e))?
            .with_version(version);
        out.insert(epoch, layout);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_of_nodes_gone_only_grows_and_a_damaged_one_is_refused() {
        let root = std::env::temp_dir().join(format!("styx-left-record-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dir = DataDir::open(&root).unwrap();
        assert!(read_nodes(&dir, LEFT_FILE).unwrap().is_empty(), "no record: none gone");
        assert!(!record_left(&dir, &[]).unwrap(), "nothing to record");
        assert!(record_left(&dir, &[3, 1]).unwrap());
        assert!(!record_left(&dir, &[1]).unwrap(), "known already");
        assert!(record_left(&dir, &[2]).unwrap());
        assert_eq!(read_nodes(&dir, LEFT_FILE).unwrap(), vec![1, 2, 3]);
        // A flipped byte: refused by name, not read as another set.
        let path = root.join(LEFT_FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[0] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let refused = read_nodes(&dir, LEFT_FILE).unwrap_err().to_string();
        assert!(
            refused.contains("cluster-left is damaged (wrong checksum)"),
            "{refused}"
        );
        std::fs::write(&path, [1u8, 2]).unwrap();
        assert!(read_nodes(&dir, LEFT_FILE).unwrap_err().to_string().contains("2 bytes"));
        // A layout file keeps the nodes absent (the engine decides joins
        // by them at a start without a snapshot); one written before
        // nodes could join reads as none absent.
        let absent = Layout::contiguous(&[2, 0])
            .with_absent(vec![1])
            .unwrap()
            .with_version(3);
        write_layout(&dir, 7, &absent).unwrap();
        let node_of: Vec<u16> = vec![0, 0];
        let mut old = styx_engine::Payload::encode(&(2u64, 2u16, node_of)).as_bytes().to_vec();
        old.extend_from_slice(&crc32c::crc32c(&old).to_le_bytes());
        fsutil::write_atomic(&layout_path(&dir, 5), &old).unwrap();
        let layouts = read_layouts(&dir).unwrap();
        assert_eq!(layouts[&7], absent);
        assert_eq!(layouts[&5], Layout::contiguous(&[2, 0]).with_version(2));
        // The record of nodes joined is another file, kept the same way.
        assert!(read_nodes(&dir, JOINED_FILE).unwrap().is_empty());
        assert!(record_joined(&dir, &[4]).unwrap());
        assert!(!record_joined(&dir, &[4]).unwrap());
        assert_eq!(read_nodes(&dir, JOINED_FILE).unwrap(), vec![4]);
        let _ = std::fs::remove_dir_all(&root);
    }
}
