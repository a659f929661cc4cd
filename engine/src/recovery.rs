//! Recovery as pure functions: from what disks hold to what each shard
//! restores and replays.
//!
//! The runtime reads a data directory (`styx-storage`: the complete
//! snapshot manifests, each shard's log with its torn tail cut) and the
//! simulator keeps a model of the same disks; both describe what they found
//! as a [`Disk`] and recover through the same three steps, so the crash
//! tests exercise the code that ships:
//!
//! 1. [`Disk::survey`]: what a node tells the others (its snapshots, the
//!    newest epoch its logs reached).
//! 2. [`Plan::of`] the surveys of every node (one for a single node): the
//!    newest snapshot *every* node completed, and the newest epoch *any*
//!    log reached — every log is replayed to it.
//! 3. [`start`]`(disk, plan)`: per shard of the node, the batches to replay
//!    after the snapshot and the empty batches to write to its log first;
//!    then [`apply`] restores an engine [`Shard`] from it.
//!
//! [`recover`] runs steps 1–3 for disks that are all at hand (a single
//! node, the simulator); [`recover_handed`] does the same for a cluster
//! whose shards changed nodes, each shard's log merged from its pieces on
//! every disk.
//!
//! **Why missing epochs replay empty.** Logs can end at different epochs
//! after a crash: a shard's last batches were not yet durable when it died
//! while its peers' were. A reply of epoch `e` leaves only once *every*
//! shard's log holds `e`, so no reply of an epoch some log lacks was
//! released: replaying it without the lost batches is a valid outcome. The
//! epoch must still run everywhere (peers' batches in it call this shard),
//! so the lacking shard replays it empty and writes the empty batch to its
//! log before anything new, and the logs agree again.
//!
//! **Why the plan needs every node.** A node commits its own manifest; the
//! cluster may only roll back to a snapshot every node committed. A node
//! that lacks a snapshot another node recorded as complete everywhere lost
//! its data directory: starting would replay epochs whose replies left as
//! if they were empty, a silent divergence, so the plan is refused.
//!
//! No I/O here: loading a snapshot's entities is a closure the caller
//! passes to [`apply`].

use crate::ids::{Epoch, OpId, ShardId, Tid};
use crate::key::Key;
use crate::shard::Shard;
use crate::value::Value;
use crate::{Batch, DecodeError};
use std::fmt;

/// A complete snapshot (its manifest is committed), as recovery needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The epoch at whose end it was taken.
    pub epoch: Epoch,
    /// Per shard, in shard order: replay its log from the first batch after
    /// this epoch (the manifest's `log_after`).
    pub log_after: Vec<(ShardId, Epoch)>,
}

impl Snapshot {
    /// A snapshot of `shards` at `epoch` whose logs resume right after it.
    pub fn at(epoch: Epoch, shards: impl IntoIterator<Item = ShardId>) -> Snapshot {
        Snapshot {
            epoch,
            log_after: shards.into_iter().map(|s| (s, epoch)).collect(),
        }
    }

    fn shards(&self) -> Vec<ShardId> {
        self.log_after.iter().map(|(s, _)| *s).collect()
    }

    fn log_after(&self, shard: ShardId) -> Option<Epoch> {
        self.log_after.iter().find(|(s, _)| *s == shard).map(|(_, e)| *e)
    }
}

/// One shard's log as read from disk (a torn tail already cut).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Log {
    pub shard: ShardId,
    /// The batches read, oldest first, epochs consecutive.
    pub batches: Vec<Batch>,
    /// The epoch writing resumes after: the last batch's, or without one,
    /// the epoch reading started after (a snapshot covers the rest).
    pub last_epoch: Epoch,
}

/// What one node's disk holds, for the shards `shards` it runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Disk {
    /// The shards this node runs, in increasing order.
    pub shards: Vec<ShardId>,
    /// The complete snapshots it keeps, oldest first.
    pub snapshots: Vec<Snapshot>,
    /// The shards that have a log on this disk (whatever node wrote it).
    pub log_shards: Vec<ShardId>,
    /// One per shard of `shards`, in order, read from the oldest kept
    /// snapshot's position on (or from the start). For [`recover_handed`]
    /// also the pieces of other shards' logs this disk holds (a shard
    /// handed here or away logged each epoch where it ran).
    pub logs: Vec<Log>,
    /// The newest snapshot this node recorded as complete on every node of
    /// its cluster (0: none, or a single node).
    pub complete: Epoch,
}

/// What a node's disk holds, in brief: what it tells the others at the
/// join.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Survey {
    /// Epochs of the complete snapshots it keeps, ascending.
    pub snapshots: Vec<Epoch>,
    /// The newest epoch any of its logs (or snapshots) reached.
    pub log_epoch: Epoch,
    /// The newest snapshot it knew every node had completed (kept on disk):
    /// every node that kept its data directory still holds that snapshot.
    pub complete: Epoch,
}

/// Where every node restarts from: the same for all of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The snapshot to restore (`None`: start empty and replay whole logs).
    pub snapshot: Option<Epoch>,
    /// Replay every log through this epoch (missing ones run empty).
    pub replay_to: Epoch,
}

/// Where one node starts: what [`start`] decided for its disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Start {
    /// The snapshot to restore, as its manifest lists it.
    pub snapshot: Option<Snapshot>,
    /// Every shard replays through this epoch.
    pub replay_to: Epoch,
    /// One per shard of the node, in order.
    pub shards: Vec<ShardStart>,
}

/// Where one shard starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardStart {
    pub shard: ShardId,
    /// Restore the snapshot of this epoch first (`None`: start empty).
    pub snapshot: Option<Epoch>,
    /// Empty batches of the epochs this log lacks: write them to the log,
    /// durably, before anything new is logged.
    pub relog: Vec<Batch>,
    /// Replay these, oldest first: the logged batches after the snapshot,
    /// then `relog`, every epoch through the plan's `replay_to` once.
    pub replay: Vec<Batch>,
}

impl ShardStart {
    /// Batches replayed from the log (the empty ones written anew aside).
    pub fn logged_batches(&self) -> usize {
        self.replay.len() - self.relog.len()
    }
}

/// Why a node cannot start from its disk. Each says what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// The disk's snapshots list other shards than the node runs.
    SnapshotShards { holds: Vec<ShardId>, runs: Vec<ShardId> },
    /// The disk holds a log of a shard the node does not run.
    LogShard { shard: ShardId, runs: Vec<ShardId> },
    /// Nodes lack the snapshot `epoch` that node `recorder` recorded as
    /// complete on every node.
    LostSnapshot {
        nodes: Vec<usize>,
        epoch: Epoch,
        recorder: usize,
    },
    /// The plan restores a snapshot this disk does not hold.
    MissingSnapshot { epoch: Epoch, holds: Vec<Epoch> },
    /// A log's first batch after the snapshot is not the one right after it.
    LogTrimmed { shard: ShardId, first: Epoch, after: Epoch },
    /// A log's batches skip an epoch.
    LogGap { shard: ShardId, epoch: Epoch, next: Epoch },
    /// A log ends before the snapshot it must continue.
    LogBehind {
        shard: ShardId,
        last: Epoch,
        snapshot: Epoch,
    },
    /// The nodes' copies of the snapshot do not list every shard once.
    Restores {
        epoch: Epoch,
        missing: Vec<ShardId>,
        twice: Vec<ShardId>,
    },
    /// Loading a shard's snapshot failed.
    Load { shard: ShardId, reason: String },
    /// A shard's snapshot holds machine state the engine cannot restore.
    Meta { shard: ShardId, reason: String },
    /// A shard's log holds an entry this build cannot replay.
    LogEntry {
        shard: ShardId,
        epoch: Epoch,
        tid: Tid,
        reason: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::SnapshotShards { holds, runs } => write!(
                f,
                "the data directory holds shards {}; this node runs shards {} (start with the shard count, cluster file and node id it was written with, or an empty directory)",
                describe(holds),
                describe(runs)
            ),
            Error::LogShard { shard, runs } => write!(
                f,
                "the data directory has a log for shard {shard}; this node runs shards {} (start with the shard count, cluster file and node id it was written with)",
                describe(runs)
            ),
            Error::LostSnapshot { nodes, epoch, recorder } => write!(
                f,
                "node {} lacks the snapshot of epoch {epoch}, which node {recorder} recorded as complete on every node: its data directory was lost, replaced or restored from an older copy, and the cluster refuses to start rather than diverge (restore that node's directory, or start every node with an empty one)",
                nodes.iter().map(usize::to_string).collect::<Vec<_>>().join(", node ")
            ),
            Error::MissingSnapshot { epoch, holds } => write!(
                f,
                "the plan restores the snapshot of epoch {epoch}, but this data directory holds complete snapshots {holds:?} only: restore the directory from a backup"
            ),
            Error::LogTrimmed { shard, first, after } => write!(
                f,
                "shard {shard}'s log starts at epoch {first} but the snapshot of epoch {after} needs it from epoch {}: the log was trimmed past a snapshot the cluster may roll back to",
                after + 1
            ),
            Error::LogGap { shard, epoch, next } => write!(
                f,
                "shard {shard}'s log holds epoch {next} right after epoch {epoch}: batches are missing in between; restore the directory from a backup"
            ),
            Error::LogBehind { shard, last, snapshot } => write!(
                f,
                "shard {shard}'s log ends at epoch {last}, before the snapshot of epoch {snapshot} it must continue: durable records were lost; restore the directory from a backup"
            ),
            Error::Restores { epoch, missing, twice } => write!(
                f,
                "the nodes' manifests of snapshot {epoch} do not list every shard once (missing {missing:?}, twice {twice:?}): a data directory is from another cluster or was damaged"
            ),
            Error::Load { shard, reason } => write!(f, "shard {shard}: cannot load the snapshot: {reason}"),
            Error::Meta { shard, reason } => {
                write!(f, "shard {shard}: the snapshot's engine state is unreadable: {reason}")
            }
            Error::LogEntry {
                shard,
                epoch,
                tid,
                reason,
            } => write!(
                f,
                "shard {shard}'s log holds at epoch {epoch} an entry (tid {tid}) this build cannot replay: {reason} (written by another build or application, or damaged; nothing was replayed)"
            ),
        }
    }
}

impl std::error::Error for Error {}

/// So that callers reporting errors as text can use `?`.
impl From<Error> for String {
    fn from(e: Error) -> String {
        e.to_string()
    }
}

/// `0..=3` for shards in a row, else `0, 2, 5`.
fn describe(shards: &[ShardId]) -> String {
    match (shards.first(), shards.last()) {
        (Some(a), Some(b)) if shards.len() > 1 && b.checked_sub(*a).map(usize::from) == Some(shards.len() - 1) => {
            format!("{a}..={b}")
        }
        (Some(_), _) => shards.iter().map(ShardId::to_string).collect::<Vec<_>>().join(", "),
        _ => "none".into(),
    }
}

/// Refuses a disk written with other shards than `shards`: every
/// snapshot must list exactly them, and no log may be of another shard.
/// Cheap: a caller may check before it reads (and cuts) any log.
pub fn check_shards(shards: &[ShardId], snapshots: &[Snapshot], log_shards: &[ShardId]) -> Result<(), Error> {
    for s in snapshots {
        let holds = s.shards();
        if holds != shards {
            return Err(Error::SnapshotShards {
                holds,
                runs: shards.to_vec(),
            });
        }
    }
    if let Some(shard) = log_shards.iter().find(|s| !shards.contains(s)) {
        return Err(Error::LogShard {
            shard: *shard,
            runs: shards.to_vec(),
        });
    }
    Ok(())
}

impl Disk {
    /// What this disk holds, in brief (for the join).
    pub fn survey(&self) -> Survey {
        let mut snapshots: Vec<Epoch> = self.snapshots.iter().map(|s| s.epoch).collect();
        snapshots.sort_unstable();
        snapshots.dedup();
        // A snapshot's positions in its shards' logs count as reached (a
        // log trimmed to it reads nothing after); one of no shard (a node
        // that ran none after its epoch) reached nothing.
        let log_epoch = self
            .logs
            .iter()
            .map(|l| l.last_epoch)
            .chain(self.snapshots.iter().flat_map(|s| s.log_after.iter().map(|(_, e)| *e)))
            .max()
            .unwrap_or(0);
        Survey {
            snapshots,
            log_epoch,
            complete: self.complete,
        }
    }
}

impl Plan {
    /// The plan of a cluster whose nodes (in id order) surveyed `surveys`
    /// (one survey: a single node).
    ///
    /// Refused when a node lacks a snapshot another node recorded as
    /// complete on every node (see the module comment). Before the first
    /// snapshot completes everywhere this cannot be told from a node that
    /// had not run yet.
    pub fn of(surveys: &[Survey]) -> Result<Plan, Error> {
        assert!(!surveys.is_empty(), "a plan of no node");
        let snapshot = surveys[0]
            .snapshots
            .iter()
            .rev()
            .find(|e| surveys.iter().all(|s| s.snapshots.contains(e)))
            .copied();
        let (recorder, need) = surveys
            .iter()
            .enumerate()
            .map(|(i, s)| (i, s.complete))
            .max_by_key(|(_, c)| *c)
            .unwrap_or((0, 0));
        if need > 0 && snapshot.is_none_or(|s| s < need) {
            return Err(Error::LostSnapshot {
                nodes: surveys
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| !s.snapshots.contains(&need))
                    .map(|(i, _)| i)
                    .collect(),
                epoch: need,
                recorder,
            });
        }
        let replay_to = surveys.iter().map(|s| s.log_epoch).chain(snapshot).max().unwrap_or(0);
        Ok(Plan { snapshot, replay_to })
    }
}

/// Where the node whose disk is `disk` starts, under `plan` (which every
/// node agreed on): the snapshot to restore, and per shard the logged
/// batches after it and the empty batches of the epochs its log lacks,
/// through `plan.replay_to`.
///
/// # Panics
/// If a log reached past `plan.replay_to` (the plan was made without this
/// disk's survey), or if `disk` breaks its own description (a log per
/// shard, in order; `last_epoch` as documented).
pub fn start(disk: Disk, plan: &Plan) -> Result<Start, Error> {
    check_shards(&disk.shards, &disk.snapshots, &disk.log_shards)?;
    assert_eq!(
        disk.logs.iter().map(|l| l.shard).collect::<Vec<_>>(),
        disk.shards,
        "one log per shard, in order"
    );
    let snapshot = plan_snapshot(&disk, plan)?;
    let mut shards = Vec::with_capacity(disk.logs.len());
    for log in disk.logs {
        let after = snapshot
            .as_ref()
            .map_or(0, |s| s.log_after(log.shard).expect("the snapshot lists every shard"));
        shards.push(start_shard(log, after, snapshot.as_ref().map(|s| s.epoch), plan)?);
    }
    Ok(Start {
        snapshot,
        replay_to: plan.replay_to,
        shards,
    })
}

/// The plan's snapshot as `disk` lists it (`None`: the plan restores none).
fn plan_snapshot(disk: &Disk, plan: &Plan) -> Result<Option<Snapshot>, Error> {
    let Some(epoch) = plan.snapshot else {
        return Ok(None);
    };
    disk.snapshots
        .iter()
        .rev()
        .find(|s| s.epoch == epoch)
        .cloned()
        .map(Some)
        .ok_or_else(|| Error::MissingSnapshot {
            epoch,
            holds: disk.survey().snapshots,
        })
}

/// Where one shard starts: its log's batches after `after` (the
/// snapshot's position in it, 0 without one), checked to follow on without
/// a gap, then the empty batches of the epochs it lacks through the plan's
/// `replay_to`.
fn start_shard(log: Log, after: Epoch, snapshot: Option<Epoch>, plan: &Plan) -> Result<ShardStart, Error> {
    let shard = log.shard;
    if log.last_epoch < after {
        return Err(Error::LogBehind {
            shard,
            last: log.last_epoch,
            snapshot: after,
        });
    }
    assert!(
        log.last_epoch <= plan.replay_to,
        "shard {shard} logged epoch {} past the plan's {}",
        log.last_epoch,
        plan.replay_to
    );
    let mut replay: Vec<Batch> = log.batches.into_iter().filter(|b| b.epoch > after).collect();
    let mut expected = after + 1;
    for b in &replay {
        assert_eq!(b.shard, shard, "a batch of shard {} in shard {shard}'s log", b.shard);
        if b.epoch != expected {
            return Err(if expected == after + 1 {
                Error::LogTrimmed {
                    shard,
                    first: b.epoch,
                    after,
                }
            } else {
                Error::LogGap {
                    shard,
                    epoch: expected - 1,
                    next: b.epoch,
                }
            });
        }
        expected += 1;
    }
    let held = expected - 1;
    assert_eq!(
        held, log.last_epoch,
        "shard {shard}'s log says it ends at epoch {}, its batches at {held}",
        log.last_epoch
    );
    let lc = replay.last().map_or(0, |b| b.lc);
    let relog: Vec<Batch> = (held + 1..=plan.replay_to)
        .map(|epoch| Batch {
            epoch,
            shard,
            lc,
            now_us: 0,
            txns: Vec::new(),
        })
        .collect();
    replay.extend(relog.iter().cloned());
    Ok(ShardStart {
        shard,
        snapshot,
        relog,
        replay,
    })
}

/// One shard's log from the pieces of it on several disks (a shard handed
/// from node to node logged each epoch where it ran): their batches in
/// epoch order, and the epoch the newest piece resumes after. Pieces
/// never overlap (an epoch is logged once, by the node that ran it);
/// a gap between them is the merged log's, for [`start`] to refuse.
///
/// # Panics
/// If two pieces hold the same epoch, or a piece is of another shard.
pub fn merge_pieces(shard: ShardId, pieces: Vec<Log>) -> Log {
    let mut last_epoch = 0;
    let mut batches = Vec::new();
    for piece in pieces {
        assert_eq!(
            piece.shard, shard,
            "a piece of shard {}'s log for shard {shard}",
            piece.shard
        );
        last_epoch = last_epoch.max(piece.last_epoch);
        batches.extend(piece.batches);
    }
    batches.sort_by_key(|b| b.epoch);
    if let Some(w) = batches.windows(2).find(|w| w[0].epoch == w[1].epoch) {
        panic!("shard {shard}'s epoch {} is logged on two disks", w[0].epoch);
    }
    Log {
        shard,
        batches,
        last_epoch,
    }
}

/// Recovers nodes whose disks are all at hand (a single node; the
/// simulator): surveys them, plans, and starts each.
pub fn recover(disks: Vec<Disk>) -> Result<(Plan, Vec<Start>), Error> {
    let surveys: Vec<Survey> = disks.iter().map(Disk::survey).collect();
    let plan = Plan::of(&surveys)?;
    let starts = disks
        .into_iter()
        .map(|d| start(d, &plan))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((plan, starts))
}

/// Recovers nodes whose disks are all at hand and whose shards may have
/// changed nodes (handovers: `crate::layout`): the plan as [`recover`]
/// makes it; a node restores the shards its copy of the plan's snapshot
/// lists (the snapshot file of a shard is on the node that ran it after
/// the snapshot's epoch), or without a snapshot the shards its disk was
/// first given; each shard's log is [merged](merge_pieces) from its pieces
/// on every disk. Replay then re-decides the handovers after the snapshot.
/// (Every disk's shards are not checked against its snapshots, which list
/// the shards the node ran at each.)
pub fn recover_handed(disks: Vec<Disk>) -> Result<(Plan, Vec<Start>), Error> {
    let surveys: Vec<Survey> = disks.iter().map(Disk::survey).collect();
    let plan = Plan::of(&surveys)?;
    let mut pieces: std::collections::BTreeMap<ShardId, Vec<Log>> = Default::default();
    for d in &disks {
        for log in &d.logs {
            pieces.entry(log.shard).or_default().push(log.clone());
        }
    }
    let mut starts = Vec::with_capacity(disks.len());
    for disk in &disks {
        let snapshot = plan_snapshot(disk, &plan)?;
        let restores: Vec<ShardId> = match &snapshot {
            Some(s) => s.shards(),
            None => disk.shards.clone(),
        };
        let mut shards = Vec::with_capacity(restores.len());
        for shard in restores {
            let log = merge_pieces(shard, pieces.get(&shard).cloned().unwrap_or_default());
            let after = snapshot
                .as_ref()
                .map_or(0, |s| s.log_after(shard).expect("the snapshot lists the shard"));
            shards.push(start_shard(log, after, snapshot.as_ref().map(|s| s.epoch), &plan)?);
        }
        starts.push(Start {
            snapshot,
            replay_to: plan.replay_to,
            shards,
        });
    }
    // Every shard the disks were first given, restored by one node.
    let n_shards = disks.iter().flat_map(|d| d.shards.last()).max().map_or(0, |s| s + 1);
    let mut times = vec![0u32; usize::from(n_shards)];
    let mut foreign = Vec::new();
    for s in starts.iter().flat_map(|s| &s.shards) {
        match times.get_mut(usize::from(s.shard)) {
            Some(t) => *t += 1,
            None => foreign.push(s.shard),
        }
    }
    let missing: Vec<ShardId> = (0..n_shards).filter(|s| times[usize::from(*s)] == 0).collect();
    let mut twice: Vec<ShardId> = (0..n_shards).filter(|s| times[usize::from(*s)] > 1).collect();
    twice.extend(foreign);
    if !missing.is_empty() || !twice.is_empty() {
        return Err(Error::Restores {
            epoch: plan.snapshot.unwrap_or(0),
            missing,
            twice,
        });
    }
    Ok((plan, starts))
}

/// Restores `shard` (fresh: nothing ran on it) as `start` says: the
/// snapshot's entities — `load` hands each to the sink it gets and returns
/// the shard's machine state, the metadata blob — then that machine state,
/// then queues the replay. The caller writes `start.relog` to the log.
pub fn apply<E: fmt::Display>(
    start: ShardStart,
    shard: &mut Shard,
    load: impl FnOnce(&mut dyn FnMut(OpId, Key, Value)) -> Result<Vec<u8>, E>,
) -> Result<(), Error> {
    let id = shard.id();
    assert_eq!(start.shard, id, "shard {}'s start applied to shard {id}", start.shard);
    assert_eq!(shard.epoch(), 0, "shard {id} restored after it ran");
    if let Some(epoch) = start.snapshot {
        let meta = shard.load_snapshot_entities(load).map_err(|e| Error::Load {
            shard: id,
            reason: e.to_string(),
        })?;
        let restored = shard.restore(&meta).map_err(|e: DecodeError| Error::Meta {
            shard: id,
            reason: e.to_string(),
        })?;
        if restored != epoch {
            return Err(Error::Meta {
                shard: id,
                reason: format!("it is of epoch {restored}, the manifest says {epoch}"),
            });
        }
    }
    // Checked before any runs: a request of another build (or a damaged
    // one the checksums missed) is an error naming it, not a panic
    // halfway through the replay.
    for b in &start.replay {
        for (tid, request) in &b.txns {
            shard.check_logged(request).map_err(|a| Error::LogEntry {
                shard: id,
                epoch: b.epoch,
                tid: *tid,
                reason: a.message().to_string(),
            })?;
        }
    }
    shard.replay(start.replay);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ops::Range;

    fn survey(snapshots: &[Epoch], log_epoch: Epoch) -> Survey {
        Survey {
            snapshots: snapshots.to_vec(),
            log_epoch,
            complete: 0,
        }
    }

    fn batch(shard: ShardId, epoch: Epoch, lc: u64) -> Batch {
        Batch {
            epoch,
            shard,
            lc,
            now_us: epoch,
            txns: Vec::new(),
        }
    }

    fn log(shard: ShardId, epochs: Range<Epoch>) -> Log {
        Log {
            shard,
            last_epoch: epochs.end.saturating_sub(1),
            batches: epochs.map(|e| batch(shard, e, e * 10)).collect(),
        }
    }

    fn disk(shards: Range<ShardId>, snapshots: &[Epoch], logs: Vec<Log>) -> Disk {
        let shards: Vec<ShardId> = shards.collect();
        Disk {
            snapshots: snapshots.iter().map(|e| Snapshot::at(*e, shards.clone())).collect(),
            log_shards: logs.iter().map(|l| l.shard).collect(),
            shards,
            logs,
            complete: 0,
        }
    }

    #[test]
    fn the_plan_takes_the_newest_common_snapshot_and_the_longest_log() {
        let plan = Plan::of(&[survey(&[1, 5, 9], 12), survey(&[1, 5], 15), survey(&[5, 9], 10)]).unwrap();
        assert_eq!(
            plan,
            Plan {
                snapshot: Some(5),
                replay_to: 15
            }
        );
        let none = Plan::of(&[survey(&[], 3), survey(&[1], 7)]).unwrap();
        assert_eq!(
            none,
            Plan {
                snapshot: None,
                replay_to: 7
            }
        );
        assert_eq!(Plan::of(&[survey(&[4], 0)]).unwrap().replay_to, 4);
    }

    #[test]
    fn a_node_that_lost_its_data_directory_is_refused() {
        let kept = |snapshots: &[Epoch], log_epoch, complete| Survey {
            complete,
            ..survey(snapshots, log_epoch)
        };
        // Nodes 0 and 2 recorded 9 complete everywhere; node 1 came back
        // empty (or with only its preload snapshot).
        for lost in [survey(&[], 0), survey(&[1], 0)] {
            let e = Plan::of(&[kept(&[9, 12], 14, 9), lost, kept(&[9], 13, 9)]).unwrap_err();
            assert!(e.to_string().contains("node 1 lacks the snapshot of epoch 9"), "{e}");
        }
        // A node that crashed before committing what others committed, but
        // kept its directory, still holds the complete one: accepted.
        let plan = Plan::of(&[kept(&[9, 12], 14, 9), kept(&[9], 10, 9), kept(&[5, 9], 13, 5)]).unwrap();
        assert_eq!(plan.snapshot, Some(9));
    }

    #[test]
    fn every_log_replays_to_the_newest_epoch_missing_ones_empty() {
        // Snapshot 4; shard 0 logged through 9, shard 1 through 6.
        let d = disk(0..2, &[2, 4], vec![log(0, 1..10), log(1, 3..7)]);
        assert_eq!(d.survey(), survey(&[2, 4], 9));
        let (plan, starts) = recover(vec![d]).unwrap();
        assert_eq!(
            plan,
            Plan {
                snapshot: Some(4),
                replay_to: 9
            }
        );
        let s = &starts[0];
        assert_eq!(s.snapshot.as_ref().map(|s| s.epoch), Some(4));
        let epochs = |b: &[Batch]| b.iter().map(|b| b.epoch).collect::<Vec<_>>();
        assert_eq!(epochs(&s.shards[0].replay), [5, 6, 7, 8, 9]);
        assert!(s.shards[0].relog.is_empty());
        assert_eq!(epochs(&s.shards[1].replay), [5, 6, 7, 8, 9]);
        assert_eq!(epochs(&s.shards[1].relog), [7, 8, 9]);
        assert_eq!(s.shards[1].logged_batches(), 2);
        // The empty batches carry the last logged counter.
        assert!(s.shards[1].relog.iter().all(|b| b.txns.is_empty() && b.lc == 60));
        assert_eq!(&s.shards[1].replay[2..], &s.shards[1].relog[..]);
    }

    #[test]
    fn without_a_snapshot_whole_logs_replay() {
        let (plan, starts) = recover(vec![disk(0..1, &[], vec![log(0, 1..4)])]).unwrap();
        assert_eq!(plan.snapshot, None);
        assert_eq!(starts[0].shards[0].replay.len(), 3);
        assert_eq!(starts[0].shards[0].snapshot, None);
        // An empty directory.
        let (plan, starts) = recover(vec![disk(0..2, &[], vec![log(0, 1..1), log(1, 1..1)])]).unwrap();
        assert_eq!(plan.replay_to, 0);
        assert!(starts[0].shards.iter().all(|s| s.replay.is_empty()));
        // A snapshot with no log after it (a preload): nothing to replay.
        let mut d = disk(0..1, &[1], vec![log(0, 1..1)]);
        d.logs[0].last_epoch = 1;
        let (plan, starts) = recover(vec![d]).unwrap();
        assert_eq!((plan.snapshot, plan.replay_to), (Some(1), 1));
        assert!(starts[0].shards[0].replay.is_empty());
    }

    #[test]
    fn damaged_disks_are_clear_errors() {
        // A log trimmed past the snapshot the plan restores.
        let e = start(
            disk(0..1, &[3], vec![log(0, 6..9)]),
            &Plan {
                snapshot: Some(3),
                replay_to: 8,
            },
        )
        .unwrap_err();
        assert_eq!(
            e,
            Error::LogTrimmed {
                shard: 0,
                first: 6,
                after: 3
            }
        );
        assert!(e.to_string().contains("trimmed past a snapshot"), "{e}");
        // A gap inside a log.
        let mut l = log(0, 1..6);
        l.batches.remove(2);
        let e = recover(vec![disk(0..1, &[], vec![l])]).unwrap_err();
        assert_eq!(
            e,
            Error::LogGap {
                shard: 0,
                epoch: 2,
                next: 4
            }
        );
        // A log that ends before its snapshot.
        let e = recover(vec![disk(0..1, &[5], vec![log(0, 1..4)])]).unwrap_err();
        assert!(matches!(e, Error::LogBehind { last: 3, .. }), "{e}");
        // A plan restoring a snapshot this disk lacks.
        let e = start(
            disk(0..1, &[2], vec![log(0, 1..4)]),
            &Plan {
                snapshot: Some(3),
                replay_to: 3,
            },
        )
        .unwrap_err();
        assert!(matches!(e, Error::MissingSnapshot { epoch: 3, .. }), "{e}");
    }

    #[test]
    fn a_directory_of_other_shards_is_refused() {
        // Written by a node of shards 0..=3, opened as one of shards 0..=1.
        let mut d = disk(0..2, &[], vec![log(0, 1..3), log(1, 1..3)]);
        d.snapshots = vec![Snapshot::at(2, 0..4)];
        let e = recover(vec![d]).unwrap_err();
        assert!(
            e.to_string()
                .contains("holds shards 0..=3; this node runs shards 0..=1"),
            "{e}"
        );
        let mut d = disk(0..2, &[], vec![log(0, 1..3), log(1, 1..3)]);
        d.log_shards.push(3);
        let e = recover(vec![d]).unwrap_err();
        assert!(e.to_string().contains("has a log for shard 3"), "{e}");
        assert_eq!(check_shards(&[2, 3], &[Snapshot::at(1, 2..4)], &[2, 3]), Ok(()));
    }

    /// Without handovers, recovering from merged pieces decides what
    /// recovering each disk alone does.
    #[test]
    fn recover_handed_of_static_disks_is_recover() {
        let disks = vec![
            disk(0..2, &[2], vec![log(0, 1..6), log(1, 1..4)]),
            disk(2..3, &[2, 4], vec![log(2, 1..5)]),
        ];
        assert_eq!(recover_handed(disks.clone()).unwrap(), recover(disks).unwrap());
    }

    /// Shard 1 ran on node 0 through epoch 3, then on node 1 (epochs 4–5),
    /// whose snapshot at 4 lists it; node 0's lists shard 0 only. Each node
    /// restores the shards its snapshot lists, shard 1 from both pieces.
    #[test]
    fn a_log_in_pieces_is_merged_across_disks() {
        let mut a = disk(0..2, &[], vec![log(0, 1..6), log(1, 1..4)]);
        a.snapshots = vec![Snapshot::at(4, 0..1)];
        let mut b = disk(2..3, &[], vec![log(1, 4..6), log(2, 1..5)]);
        b.snapshots = vec![Snapshot::at(4, 1..3)];
        let (plan, starts) = recover_handed(vec![a.clone(), b.clone()]).unwrap();
        assert_eq!(
            plan,
            Plan {
                snapshot: Some(4),
                replay_to: 5
            }
        );
        let restored = |i: usize| starts[i].shards.iter().map(|s| s.shard).collect::<Vec<_>>();
        assert_eq!((restored(0), restored(1)), (vec![0], vec![1, 2]));
        let one = &starts[1].shards[0];
        assert_eq!(one.replay.iter().map(|b| b.epoch).collect::<Vec<_>>(), vec![5]);
        assert!(one.relog.is_empty());
        assert_eq!(
            starts[1].shards[1].relog.iter().map(|b| b.epoch).collect::<Vec<_>>(),
            vec![5]
        );
        // Without the snapshot, the nodes restore the shards they were
        // given and shard 1 replays both pieces in order.
        a.snapshots.clear();
        b.snapshots.clear();
        let (_, starts) = recover_handed(vec![a.clone(), b.clone()]).unwrap();
        assert_eq!(
            starts[0].shards[1].replay.iter().map(|b| b.epoch).collect::<Vec<_>>(),
            vec![1, 2, 3, 4, 5]
        );
        // A piece missing in the middle is a gap.
        b.logs[0] = log(1, 5..6);
        let e = recover_handed(vec![a, b]).unwrap_err();
        assert_eq!(
            e,
            Error::LogGap {
                shard: 1,
                epoch: 3,
                next: 5
            }
        );
    }

    /// Copies of the snapshot that list a shard twice, or none, are refused.
    #[test]
    fn a_snapshot_listing_a_shard_twice_or_never_is_refused() {
        let mut a = disk(0..2, &[], vec![log(0, 1..6), log(1, 1..4)]);
        a.snapshots = vec![Snapshot::at(4, 0..2)];
        let mut b = disk(2..3, &[], vec![log(1, 4..6), log(2, 1..5)]);
        b.snapshots = vec![Snapshot::at(4, 1..3)];
        let e = recover_handed(vec![a.clone(), b.clone()]).unwrap_err();
        assert_eq!(
            e,
            Error::Restores {
                epoch: 4,
                missing: vec![],
                twice: vec![1]
            }
        );
        b.snapshots = vec![Snapshot::at(4, 2..3)];
        a.snapshots = vec![Snapshot::at(4, 0..1)];
        let e = recover_handed(vec![a, b]).unwrap_err();
        assert!(e.to_string().contains("missing [1]"), "{e}");
    }

    #[test]
    #[should_panic(expected = "logged on two disks")]
    fn an_epoch_logged_on_two_disks_is_a_bug() {
        merge_pieces(0, vec![log(0, 1..4), log(0, 3..5)]);
    }

    /// A node that ran no shard after a snapshot committed it with no
    /// positions: its survey reached nothing (else every node would replay
    /// epochs no log holds).
    #[test]
    fn an_empty_snapshot_reaches_no_epoch() {
        let mut d = disk(0..1, &[], vec![log(0, 1..3)]);
        d.snapshots = vec![Snapshot::at(7, 0..0)];
        assert_eq!(d.survey().log_epoch, 2);
        assert_eq!(d.survey().snapshots, vec![7]);
    }

    /// A logged entry this build cannot run (another build's request, a
    /// function the application no longer has, a move to a shard past the
    /// count) stops the restore with an error naming it, before anything
    /// is replayed — not a panic halfway through.
    #[test]
    fn a_log_entry_this_build_cannot_replay_is_an_error_naming_it() {
        let mut app = crate::App::new("t");
        app.operator("a", 4);
        let app = std::sync::Arc::new(app);
        let mut unknown = crate::Move {
            op: OpId(0),
            partition: 1,
            to: 1,
            share: None,
        }
        .request();
        unknown.function.index = u16::MAX - 7;
        let past = crate::Move {
            op: OpId(0),
            partition: 1,
            to: 5,
            share: None,
        }
        .request();
        for (request, says) in [(unknown, "no function"), (past, "no shard 5")] {
            let mut shard = Shard::new(app.clone(), crate::Config::default(), 0, 2);
            let mut b = batch(0, 1, 4);
            b.txns.push((2, request));
            let start = ShardStart {
                shard: 0,
                snapshot: None,
                relog: Vec::new(),
                replay: vec![b],
            };
            let err = apply(start, &mut shard, |_| Ok::<_, String>(Vec::new())).unwrap_err();
            let text = err.to_string();
            assert!(
                text.contains("epoch 1") && text.contains("tid 2") && text.contains(says),
                "{text}"
            );
            assert_eq!(shard.epoch(), 0, "nothing replayed");
        }
    }
}
