//! Durability in the runtime: the input log per shard, snapshot files, and
//! recovery, on top of `styx-storage`.
//!
//! **Log.** Each shard has a log task: the shard loop queues the batch the
//! engine seals for every epoch, the task appends whatever is queued and
//! makes it durable with one `fdatasync` (group commit), then reports the
//! epoch, and the engine releases that epoch's replies once every shard did
//! the same. A failed write or sync is fatal: the process stops and
//! recovers from the log on restart, it never retries.
//!
//! **Snapshots.** The engine emits a snapshot's entities in chunks; when a
//! shard has all of one snapshot, its writer's thread (one per shard, for
//! the whole run, below the shards' priority) writes its delta file. The
//! node's committer thread publishes the manifest once every shard's file
//! exists and every shard's log is durable through the snapshot's epoch,
//! then drops log segments older than it and old files, and compacts long
//! chains.
//!
//! **Recovery**, before the shards start: [`Durable::survey`] reads what
//! the data directory holds (the complete manifests, each shard's log with
//! its torn tail cut) into a [`recovery::Disk`]; the decision — which
//! snapshot, which batches, the epoch every log replays to, the empty
//! batches of the epochs a log lost — is the engine's pure
//! [`recovery::start`], the one the simulator's crash tests run, and
//! [`recovery::apply`] restores each shard from it. This module only does
//! the I/O around them: it rolls the catalog back to the chosen snapshot,
//! loads its files, and writes the empty batches to the logs before
//! serving, so every log agrees again.

mod handed;

pub use handed::{SurveyedHanded, record_joined, record_left};

use crate::Waiter;
use crate::cluster::{Run, Spec};
use crate::metrics::ShardMetrics;
use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Acquire, Ordering::Relaxed, Ordering::Release};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::task::Waker;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use styx_engine::recovery::{self, Plan, Survey};
use styx_engine::{Batch, Epoch, Key, OpId, Shard, ShardId, SnapshotChunk, Value};
use styx_storage::snapshot::{Catalog, FileRef, Manifest};
use styx_storage::wal::{self, Tail};
use styx_storage::{DataDir, Error};

/// A shard's chain of snapshot files longer than this is compacted.
const COMPACT_AFTER_FILES: usize = 8;
/// How often the committer looks again while a snapshot's files are all
/// written but a log is not yet durable through its epoch (a file landing
/// wakes it at once).
const COMMIT_POLL: Duration = Duration::from_millis(2);
/// Emptied chunk buffers waiting for their shard, at most: the largest
/// are kept (as many as the shard keeps); the rest are freed by the
/// writer.
const EMPTIED_KEPT_MAX: usize = 2;
/// A shard warns that its snapshot writer fell behind at most this often.
const BEHIND_WARN_EVERY: Duration = Duration::from_secs(10);
/// How often the committer looks when no snapshot file waits: for the
/// snapshot the whole cluster completed (told by the other nodes), whose
/// older logs and files can go.
const COMMIT_POLL_IDLE: Duration = Duration::from_millis(200);
/// In a cluster node's data directory: the newest snapshot it knew every
/// node had completed (8 bytes little-endian, then their crc32c).
const COMPLETE_FILE: &str = "cluster-complete";

/// The epoch in `dir`'s [`COMPLETE_FILE`] (0 without one).
fn read_complete(dir: &DataDir) -> Result<Epoch, Error> {
    let path = dir.root().join(COMPLETE_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => {
            return Err(Error::Io {
                op: "read",
                path,
                source: e,
            });
        }
    };
    if bytes.len() != 12 || crc32c::crc32c(&bytes[..8]).to_le_bytes() != bytes[8..] {
        return Err(Error::Snapshot(format!(
            "{} is damaged ({} bytes, checksum {}): restore the data directory from a backup",
            path.display(),
            bytes.len(),
            if bytes.len() == 12 { "wrong" } else { "missing" }
        )));
    }
    Ok(u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")))
}

/// Records `epoch` in `dir`'s [`COMPLETE_FILE`], atomically and durably.
fn write_complete(dir: &DataDir, epoch: Epoch) -> Result<(), Error> {
    let mut bytes = epoch.to_le_bytes().to_vec();
    bytes.extend_from_slice(&crc32c::crc32c(&bytes).to_le_bytes());
    styx_storage::fsutil::write_atomic(&dir.root().join(COMPLETE_FILE), &bytes)
}

/// What a shard starts from: recovery's decision (`None`: the shard is
/// live already, going on after a handover's checkpoint) and where its
/// log resumes.
pub struct ShardStart {
    start: Option<recovery::ShardStart>,
    /// `None`: a shard kept on its executor across a handover, whose log
    /// writer goes on open (`ShardDurable::start`'s `writer`).
    tail: Option<Tail>,
}

/// Durability for a whole engine: the data directory and what each shard
/// recovered.
pub struct Durable {
    dir: Arc<DataDir>,
    options: wal::Options,
    /// The shards whose logs and snapshot files live here, in increasing order.
    shards: Vec<ShardId>,
    starts: Mutex<Vec<Option<ShardStart>>>,
    /// The snapshot every shard restores.
    manifest: Option<Manifest>,
    /// The newest epoch any shard's log reached: every shard replays to it.
    pub recovered_epoch: Epoch,
    /// The snapshot recovery started from, if any.
    pub snapshot_epoch: Option<Epoch>,
    /// Snapshot files written, by epoch: the writers add theirs, the
    /// committer takes an epoch's once every shard's is there. Held only
    /// for that (never across I/O).
    files: Mutex<Files>,
    /// Rung when a file is added to `files` or the committer must stop.
    files_changed: Condvar,
    /// The catalog: only the committer's thread takes it, across manifest
    /// commits, compactions and removals.
    committer: Mutex<Committer>,
    /// Per local shard, the newest epoch its log made durable.
    log_durable: Vec<AtomicU64>,
    /// The newest snapshot committed here (recovered from, or since): the
    /// shards publish it (`styx_snapshot_epoch`).
    committed_epoch: AtomicU64,
    /// The cluster-complete snapshot epoch through which garbage is gone
    /// (written by the committer's thread only).
    collected_through: AtomicU64,
    /// The run this node takes part in: told of snapshot commits, it says
    /// which snapshot the whole cluster completed (garbage before it goes).
    run: Arc<Run>,
    /// After a handover, its epoch: the checkpoint there is every shard's
    /// newest file, so a snapshot the engine takes at or before it (one
    /// due at the handover, one still being copied) is not written.
    floor: Epoch,
    /// After a handover, the thread removing what its checkpoint made
    /// garbage: the next handover waits for it (it removes whole logs of
    /// shards that left, and one may come back).
    collecting: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Durable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Durable")
            .field("dir", &self.dir.root())
            .field("recovered_epoch", &self.recovered_epoch)
            .field("snapshot_epoch", &self.snapshot_epoch)
            .finish()
    }
}

/// What recovery found, for the start-up log line.
#[derive(Debug)]
pub struct Recovered {
    pub snapshot_epoch: Option<Epoch>,
    pub replay_batches: usize,
    pub recovered_epoch: Epoch,
    pub truncated: Vec<String>,
}

struct Committer {
    catalog: Catalog,
}

/// Snapshot files written and not committed yet.
struct Files {
    by_epoch: BTreeMap<Epoch, Vec<FileRef>>,
    /// Files a snapshot needs: one per local shard.
    shards: usize,
    /// The committer finishes the job under way and ends.
    stop: bool,
}

/// A recovery error, with the directory it is about.
fn in_dir(dir: &DataDir, e: recovery::Error) -> Error {
    Error::Snapshot(format!("{e} (data directory {})", dir.root().display()))
}

/// What a data directory holds, read before the shards start: every kept
/// snapshot and each shard's log after the oldest of them. A node of a
/// cluster tells the others its [`Surveyed::survey`] and starts from the
/// plan they agree on; a single node starts from its own.
pub struct Surveyed {
    dir: Arc<DataDir>,
    options: wal::Options,
    shards: Vec<ShardId>,
    catalog: Catalog,
    disk: recovery::Disk,
    /// Per shard, where its log resumes.
    tails: Vec<Tail>,
}

impl std::fmt::Debug for Surveyed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Surveyed")
            .field("dir", &self.dir.root())
            .field("survey", &self.disk.survey())
            .finish()
    }
}

impl Surveyed {
    /// What the disk holds, for the cluster's join.
    pub fn survey(&self) -> Survey {
        self.disk.survey()
    }

    /// Starts from `plan`: recovery decides from the disk, then the catalog
    /// rolls back to the plan's snapshot (dropping newer ones, which not
    /// every node completed). `run` learns of this node's snapshot commits.
    pub fn start(mut self, plan: Plan, run: Arc<Run>) -> Result<(Arc<Durable>, Recovered), Error> {
        let decided = recovery::start(self.disk, &plan).map_err(|e| in_dir(&self.dir, e))?;
        self.catalog.roll_back_to(plan.snapshot)?;
        let manifest = self.catalog.latest().cloned();
        assert_eq!(
            manifest.as_ref().map(|m| m.epoch),
            decided.snapshot.as_ref().map(|s| s.epoch),
            "the catalog rolled back to another snapshot than recovery chose"
        );
        Ok(Durable::recovered(
            self.dir,
            self.options,
            self.shards,
            decided,
            self.tails,
            manifest,
            self.catalog,
            run,
        ))
    }
}

impl Durable {
    /// Reads what the data directory holds for the shards `shards` (all of
    /// a single node's, or one node's part of a cluster): the kept
    /// snapshots and each shard's log after the oldest (cutting torn
    /// tails). Refuses a directory written with other shards.
    pub fn survey(dir: Arc<DataDir>, shards: Vec<ShardId>, options: wal::Options) -> Result<Surveyed, Error> {
        let catalog = Catalog::open(&dir)?;
        let manifests = styx_storage::snapshot::complete_manifests(&dir.snapshot_dir())?;
        let snapshots: Vec<recovery::Snapshot> = manifests.iter().map(Manifest::for_recovery).collect();
        let log_shards = wal::shards(&dir.wal_dir())?;
        // Before any log is read (and its torn tail cut).
        recovery::check_shards(&shards, &snapshots, &log_shards).map_err(|e| in_dir(&dir, e))?;
        let oldest = manifests.first();
        let after: Vec<(ShardId, Epoch)> = shards
            .iter()
            .map(|&s| (s, oldest.and_then(|m| m.shard(s)).map_or(0, |ss| ss.log_after)))
            .collect();
        let mut logs = Vec::with_capacity(shards.len());
        let mut tails = Vec::with_capacity(shards.len());
        // Every shard's log at once, a thread each.
        for recovered in wal::recover_all(&dir, &after)? {
            let (log, tail) = recovered.into_log();
            logs.push(log);
            tails.push(tail);
        }
        let complete = read_complete(&dir)?;
        Ok(Surveyed {
            dir,
            options,
            disk: recovery::Disk {
                shards: shards.clone(),
                snapshots,
                log_shards,
                logs,
                complete,
            },
            shards,
            catalog,
            tails,
        })
    }

    /// A single node's recovery: the latest complete snapshot and each
    /// shard's log after it.
    pub fn open(dir: DataDir, shards: usize, options: wal::Options) -> Result<(Arc<Durable>, Recovered), Error> {
        let surveyed = Durable::survey(Arc::new(dir), (0..shards as ShardId).collect(), options)?;
        let plan = Plan::of(&[surveyed.survey()]).map_err(|e| in_dir(&surveyed.dir, e))?;
        let client = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
        let run = Arc::new(Run::single(Spec::single(shards as u16, client), plan));
        surveyed.start(plan, run)
    }

    pub fn dir(&self) -> &DataDir {
        &self.dir
    }

    /// A node's durability for `shards` as recovery `decided` (each log
    /// resuming at its `tails`), from the snapshot `manifest` (the
    /// catalog's latest), and what the start-up log line tells of it.
    #[allow(clippy::too_many_arguments)]
    fn recovered(
        dir: Arc<DataDir>,
        options: wal::Options,
        shards: Vec<ShardId>,
        decided: recovery::Start,
        tails: Vec<Tail>,
        manifest: Option<Manifest>,
        catalog: Catalog,
        run: Arc<Run>,
    ) -> (Arc<Durable>, Recovered) {
        let truncated: Vec<String> = tails
            .iter()
            .filter_map(|t| t.truncation().map(|tr| format!("shard {}: {tr}", t.shard())))
            .collect();
        let replay_batches = decided.shards.iter().map(recovery::ShardStart::logged_batches).sum();
        let starts = decided
            .shards
            .into_iter()
            .zip(tails)
            .map(|(start, tail)| {
                assert_eq!(start.shard, tail.shard());
                Some(ShardStart {
                    start: Some(start),
                    tail: Some(tail),
                })
            })
            .collect();
        let snapshot_epoch = manifest.as_ref().map(|m| m.epoch);
        let durable = Durable::assemble(
            dir,
            options,
            shards,
            starts,
            manifest,
            decided.replay_to,
            catalog,
            run,
            0,
        );
        let recovered = Recovered {
            snapshot_epoch,
            replay_batches,
            recovered_epoch: decided.replay_to,
            truncated,
        };
        (durable, recovered)
    }

    /// A node's durability for a run (or a round of one) of `shards`, each
    /// starting as `starts` says, from the snapshot `manifest` (the
    /// catalog's latest), every log durable through `recovered_epoch`.
    #[allow(clippy::too_many_arguments)]
    fn assemble(
        dir: Arc<DataDir>,
        options: wal::Options,
        shards: Vec<ShardId>,
        starts: Vec<Option<ShardStart>>,
        manifest: Option<Manifest>,
        recovered_epoch: Epoch,
        catalog: Catalog,
        run: Arc<Run>,
        floor: Epoch,
    ) -> Arc<Durable> {
        let snapshot_epoch = manifest.as_ref().map(|m| m.epoch);
        Arc::new(Durable {
            dir,
            options,
            starts: Mutex::new(starts),
            manifest,
            recovered_epoch,
            snapshot_epoch,
            files: Mutex::new(Files {
                by_epoch: BTreeMap::new(),
                shards: shards.len(),
                stop: false,
            }),
            files_changed: Condvar::new(),
            committer: Mutex::new(Committer { catalog }),
            log_durable: shards.iter().map(|_| AtomicU64::new(0)).collect(),
            committed_epoch: AtomicU64::new(snapshot_epoch.unwrap_or(0)),
            collected_through: AtomicU64::new(floor),
            shards,
            run,
            floor,
            collecting: Mutex::new(None),
        })
    }

    /// `shard`'s index among the shards whose files live here.
    fn local_index(&self, shard: ShardId) -> usize {
        self.shards
            .binary_search(&shard)
            .expect("a shard whose files live here")
    }
}

/// A snapshot chunk's entities: operator, key, value (`None`: deleted).
type Chunk = Vec<(OpId, Key, Option<Value>)>;

/// One shard's durability, on its executor.
pub(crate) struct ShardDurable {
    durable: Arc<Durable>,
    shard: ShardId,
    log: Rc<RefCell<LogState>>,
    /// The epoch of this shard's last snapshot file (the next delta's parent).
    parent_epoch: Epoch,
    /// Chunks of the snapshot being received.
    chunks: Vec<Chunk>,
    /// Chunk buffers the writer emptied, for the shard to fill again
    /// ([`ShardDurable::recycle`]).
    emptied: Arc<Mutex<Vec<Chunk>>>,
    /// This shard's snapshot writer: its queue and its thread (taken by
    /// `close`).
    writer: Option<(Sender<WriteJob>, JoinHandle<()>)>,
    /// Snapshots queued to the writer and not yet in `Durable::files`.
    writing: Arc<AtomicUsize>,
    metrics: Option<Arc<ShardMetrics>>,
    /// When this shard last warned that its snapshot writer fell behind.
    behind_warned: Option<Instant>,
    /// On the node's first shard: the committer's thread. Stopping waits
    /// for a commit in progress (it writes into the data directory until
    /// it ends); dropped without `close` (a shard panicked), it is told to
    /// stop and left to end.
    committer: Option<JoinHandle<()>>,
}

impl Drop for ShardDurable {
    fn drop(&mut self) {
        if self.committer.is_some() {
            self.durable.stop_committer();
        }
    }
}

impl Durable {
    /// Tells the committer's thread to end after the job under way.
    fn stop_committer(&self) {
        // Poisoned only by a panic, which stopped the process.
        if let Ok(mut files) = self.files.lock() {
            files.stop = true;
        }
        self.files_changed.notify_all();
    }
}

/// A shard's snapshot, whole, for its writer.
struct WriteJob {
    epoch: Epoch,
    /// The epoch of the shard's previous file (this delta's parent).
    parent: Epoch,
    meta: Vec<u8>,
    chunks: Vec<Chunk>,
    queued: Instant,
}

struct LogState {
    queue: VecDeque<Batch>,
    /// Durable epoch not yet reported to the shard.
    durable: Option<Epoch>,
    writer_waker: Option<Waker>,
    closing: bool,
    /// Closing keeps the writer open (here, once `closed`): the shard
    /// stays on its executor for the next round.
    keep: bool,
    kept: Option<wal::Writer>,
    closed: bool,
}

impl ShardDurable {
    /// Restores `shard` as recovery decided (snapshot, then the replay
    /// queued), opens its log and writes the empty batches of the epochs it
    /// lacks. Runs on the shard's executor before the loop starts.
    /// `writer`: the shard's log writer, still open, when the shard was
    /// kept on its executor across a handover.
    pub(crate) async fn start(
        durable: Arc<Durable>,
        shard: &mut Shard,
        writer: Option<wal::Writer>,
        loop_waker: Waiter,
        metrics: Option<Arc<ShardMetrics>>,
        on_background: Option<fn()>,
    ) -> ShardDurable {
        let id = shard.id();
        let local = durable.local_index(id);
        let ShardStart { start, tail } = durable.starts.lock().expect("starts lock")[local]
            .take()
            .expect("one start per shard");
        let parent_epoch = durable.manifest.as_ref().map_or(0, |m| m.epoch);
        let relog = start.as_ref().map_or_else(Vec::new, |s| s.relog.clone());
        if let Some(start) = start {
            let replay_batches = start.logged_batches();
            let started = Instant::now();
            // The largest file of the chain (its base, usually) says about how
            // many entities to make room for: none is then moved or rehashed.
            let hint = durable
                .manifest
                .as_ref()
                .and_then(|m| m.shard(id))
                .and_then(|s| s.files.iter().map(|f| f.entries).max())
                .unwrap_or(0);
            shard.reserve_entities(usize::try_from(hint).unwrap_or(usize::MAX));
            recovery::apply(start, shard, |entity| {
                let m = durable.manifest.as_ref().expect("a snapshot to restore");
                styx_storage::snapshot::load_entities(&durable.dir.snapshot_dir(), m, id, entity)
                    .map(|loaded| loaded.meta)
            })
            .unwrap_or_else(|e| fatal(id, &e.to_string()));
            tracing::info!(
                shard = id,
                entities = shard.entity_count(),
                load_ms = started.elapsed().as_secs_f64() * 1e3,
                replay_batches,
                "snapshot loaded; replaying"
            );
        } else {
            // Stopped at the checkpoint's epoch; going on already (`stay`
            // and `take_over` start the next one, whose batch is logged
            // from here).
            let epoch = shard.epoch();
            assert!(
                epoch == durable.floor || epoch == durable.floor + 1,
                "shard {id} goes on at epoch {epoch}, its checkpoint is of {}",
                durable.floor
            );
        }
        let mut writer = match (writer, tail) {
            (Some(w), None) => {
                assert_eq!(
                    (w.shard(), w.last_epoch()),
                    (id, durable.floor),
                    "a log writer kept across a handover goes on where it stopped"
                );
                w
            }
            (None, Some(tail)) => {
                let opened = Instant::now();
                let w = wal::Writer::open(&durable.dir, &tail, durable.options)
                    .await
                    .unwrap_or_else(|e| fatal(id, &format!("cannot open the log: {e}")));
                tracing::info!(shard = id, open_ms = opened.elapsed().as_secs_f64() * 1e3, "log opened");
                w
            }
            _ => fatal(id, "a log writer kept, and a log to open"),
        };
        // Epochs other shards logged but this one lost: empty here, written
        // as such so the logs agree before anything new is logged (and
        // replayed too, in `start.replay`: run live, the shard would
        // sequence new requests into them and log them a second time).
        for empty in &relog {
            writer
                .append(empty)
                .await
                .unwrap_or_else(|e| fatal(id, &format!("log append: {e}")));
        }
        if !relog.is_empty() {
            writer
                .sync()
                .await
                .unwrap_or_else(|e| fatal(id, &format!("log sync: {e}")));
        }
        durable.log_durable[local].store(durable.recovered_epoch, Relaxed);
        let log = Rc::new(RefCell::new(LogState {
            queue: VecDeque::new(),
            // After a handover: its epoch is durable (every log was
            // flushed through it before the checkpoint), which the shard
            // may not have heard yet.
            durable: (durable.floor > 0).then_some(durable.floor),
            writer_waker: None,
            closing: false,
            keep: false,
            kept: None,
            closed: false,
        }));
        glommio::spawn_local(log_task(
            durable.clone(),
            id,
            writer,
            log.clone(),
            loop_waker,
            metrics.clone(),
        ))
        .detach();
        let emptied = Arc::<Mutex<Vec<Chunk>>>::default();
        let writing = Arc::new(AtomicUsize::new(0));
        let (jobs, queue) = std::sync::mpsc::channel();
        let writer = {
            let (durable, emptied, writing, metrics) =
                (durable.clone(), emptied.clone(), writing.clone(), metrics.clone());
            start_thread(id, format!("snapshot-{id}"), move || {
                // Below the shards for good (an unprivileged thread cannot
                // rise again): this thread only ever writes snapshots.
                if let Some(lower) = on_background {
                    lower();
                }
                writer_thread(&durable, id, &queue, &emptied, &writing, metrics.as_deref());
            })
        };
        let committer = (id == durable.shards[0]).then(|| {
            let durable = durable.clone();
            start_thread(id, "committer".into(), move || {
                committer_thread(&durable, on_background)
            })
        });
        ShardDurable {
            durable,
            shard: id,
            log,
            parent_epoch,
            chunks: Vec::new(),
            emptied,
            writer: Some((jobs, writer)),
            writing,
            metrics,
            committer,
            behind_warned: None,
        }
    }

    /// Hands the log task the batches the shard sealed.
    pub(crate) fn log(&mut self, batches: &mut Vec<Batch>) {
        if batches.is_empty() {
            return;
        }
        let mut l = self.log.borrow_mut();
        l.queue.extend(batches.drain(..));
        if let Some(w) = l.writer_waker.take() {
            w.wake();
        }
    }

    /// The newest epoch this shard's log made durable (told to the
    /// shard by [`ShardDurable::durable`] in the same loop iteration at
    /// the latest: the log task sets both at once).
    pub(crate) fn logged_through(&self) -> Epoch {
        self.durable.log_durable[self.durable.local_index(self.shard)].load(Relaxed)
    }

    /// The newest epoch made durable since the last call.
    pub(crate) fn durable(&mut self) -> Option<Epoch> {
        // Written only when it changed: this runs every loop iteration.
        if let Some(m) = &self.metrics {
            let committed = self.durable.committed_epoch.load(Relaxed);
            if m.snapshot_epoch.load(Relaxed) != committed {
                m.snapshot_epoch.store(committed, Relaxed);
            }
        }
        self.log.borrow_mut().durable.take()
    }

    /// Collects snapshot chunks; queues a shard's snapshot to its writer
    /// once it has them all.
    pub(crate) fn snapshot(&mut self, chunks: &mut Vec<SnapshotChunk>) {
        for c in chunks.drain(..) {
            if c.epoch <= self.durable.floor {
                // The handover's checkpoint holds this and more.
                continue;
            }
            // Joined on the writer's thread: the shard's would copy the
            // whole snapshot (~3 MB at 55 000 entities, with its page
            // faults) in one iteration, ~4 ms that every epoch waited for.
            self.chunks.push(c.entries);
            if !c.last {
                continue;
            }
            let (shard, epoch) = (self.shard, c.epoch);
            if self.writing.load(Acquire) > 0 && self.behind_warned.is_none_or(|t| t.elapsed() >= BEHIND_WARN_EVERY) {
                self.behind_warned = Some(Instant::now());
                tracing::warn!(
                    shard,
                    epoch,
                    "a snapshot is ready while this shard's previous file is still being written \
                     (its writer is behind: short of CPU, or a slow disk); snapshots queue in \
                     memory until it catches up"
                );
            }
            self.writing.fetch_add(1, Release);
            // A whole snapshot (a shard that tracked no change until now,
            // or one rebuilt from a hand-off) starts a new chain: as a
            // delta on the old one, what was deleted while nothing was
            // tracked would come back from the older files.
            let previous = std::mem::replace(&mut self.parent_epoch, epoch);
            let job = WriteJob {
                epoch,
                parent: if c.base { 0 } else { previous },
                meta: c.meta,
                chunks: std::mem::take(&mut self.chunks),
                queued: Instant::now(),
            };
            let writer = self.writer.as_ref().expect("the writer runs until close");
            if writer.0.send(job).is_err() {
                fatal(shard, "the snapshot writer's thread is gone");
            }
        }
    }

    /// Hands `recycle` the chunk buffers the writer emptied; never waits
    /// (the writer, below the shard's priority, may hold their lock).
    pub(crate) fn recycle(&self, mut recycle: impl FnMut(Chunk)) {
        if let Ok(mut back) = self.emptied.try_lock() {
            for buffer in back.drain(..) {
                recycle(buffer);
            }
        }
    }

    /// Whether snapshot files are still being written.
    pub(crate) fn busy(&self) -> bool {
        self.writing.load(Acquire) > 0 || !self.log.borrow().queue.is_empty()
    }

    /// Flushes and closes the log (graceful stop); with `keep`, flushes
    /// it and returns its writer, still open, for the next round.
    pub(crate) async fn close(mut self, keep: bool) -> Option<wal::Writer> {
        {
            let mut l = self.log.borrow_mut();
            l.closing = true;
            l.keep = keep;
            if let Some(w) = l.writer_waker.take() {
                w.wake();
            }
        }
        while !self.log.borrow().closed || self.writing.load(Acquire) > 0 {
            glommio::timer::sleep(Duration::from_millis(1)).await;
        }
        // The writer ends with its queue; the committer once told.
        if let Some((jobs, writer)) = self.writer.take() {
            drop(jobs);
            ended(writer).await;
        }
        if let Some(committer) = self.committer.take() {
            self.durable.stop_committer();
            ended(committer).await;
        }
        self.log.borrow_mut().kept.take()
    }
}

fn fatal(shard: ShardId, message: &str) -> ! {
    tracing::error!(shard, "{message}");
    eprintln!("styx: shard {shard}: {message}; stopping (restart to recover from the log)");
    std::process::exit(70);
}

async fn log_task(
    durable: Arc<Durable>,
    shard: ShardId,
    mut writer: wal::Writer,
    state: Rc<RefCell<LogState>>,
    loop_waker: Waiter,
    metrics: Option<Arc<ShardMetrics>>,
) {
    loop {
        let (batches, closing) = futures_lite::future::poll_fn(|cx| {
            let mut s = state.borrow_mut();
            if s.queue.is_empty() && !s.closing {
                s.writer_waker = Some(cx.waker().clone());
                return std::task::Poll::Pending;
            }
            std::task::Poll::Ready((s.queue.drain(..).collect::<Vec<_>>(), s.closing))
        })
        .await;
        if !batches.is_empty() {
            let before = writer.stats();
            // Everything queued since the last cycle: one write, one sync.
            writer
                .append_all(&batches)
                .await
                .unwrap_or_else(|e| fatal(shard, &format!("log append: {e}")));
            let started = Instant::now();
            let epoch = writer
                .sync()
                .await
                .unwrap_or_else(|e| fatal(shard, &format!("log sync: {e}")));
            if let Some(m) = &metrics {
                let after = writer.stats();
                m.log_syncs.fetch_add(1, Relaxed);
                m.log_bytes
                    .fetch_add(after.record_bytes.saturating_sub(before.record_bytes), Relaxed);
                m.log_sync_us_sum
                    .fetch_add(started.elapsed().as_micros() as u64, Relaxed);
                m.log_durable_epoch.store(epoch, Relaxed);
            }
            durable.log_durable[durable.local_index(shard)].store(epoch, Relaxed);
            state.borrow_mut().durable = Some(epoch);
            crate::wake(&loop_waker);
        }
        if closing && state.borrow().queue.is_empty() {
            let keep = state.borrow().keep;
            if keep {
                // Everything queued is durable (synced above).
                state.borrow_mut().kept = Some(writer);
            } else {
                let _ = writer.close().await;
            }
            state.borrow_mut().closed = true;
            return;
        }
    }
}

/// Waits, without blocking the executor, for `thread` to end (a thread of
/// [`start_thread`]: its panic already stopped the process).
async fn ended(thread: JoinHandle<()>) {
    while !thread.is_finished() {
        glommio::timer::sleep(Duration::from_millis(1)).await;
    }
    let _ = thread.join();
}

/// Starts a thread of the run named `name`; a shard cannot run without it.
/// Its panic is fatal at once: a writer gone would leave its snapshots
/// counted as being written for ever (a stop would never end), a committer
/// gone would leave logs growing unseen.
fn start_thread(shard: ShardId, name: String, work: impl FnOnce() + Send + 'static) -> JoinHandle<()> {
    let named = name.clone();
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).is_err() {
                fatal(shard, &format!("thread {named} panicked"));
            }
        })
        .unwrap_or_else(|e| fatal(shard, &format!("cannot start thread {name}: {e}")))
}

/// A shard's snapshot writer: writes each snapshot queued, in order (each
/// file is the delta over the one before), until the queue closes.
fn writer_thread(
    durable: &Durable,
    shard: ShardId,
    queue: &Receiver<WriteJob>,
    emptied: &Mutex<Vec<Chunk>>,
    writing: &AtomicUsize,
    metrics: Option<&ShardMetrics>,
) {
    while let Ok(job) = queue.recv() {
        let WriteJob {
            epoch,
            parent,
            meta,
            chunks,
            queued,
        } = job;
        // Moved, not cloned (`concat` would clone each); the buffers go
        // back to the shard, emptied.
        let mut all = Vec::with_capacity(chunks.iter().map(Vec::len).sum());
        let mut buffers = chunks;
        for chunk in &mut buffers {
            all.append(chunk);
        }
        buffers.sort_unstable_by_key(|b| std::cmp::Reverse(b.capacity()));
        let mut back = emptied.lock().expect("emptied lock");
        buffers.truncate(EMPTIED_KEPT_MAX.saturating_sub(back.len()));
        back.append(&mut buffers);
        drop(back);
        let file = styx_storage::snapshot::write_entities(&durable.dir, shard, epoch, parent, &meta, &mut all)
            .unwrap_or_else(|e| fatal(shard, &format!("cannot write snapshot {epoch}: {e}")));
        if let Some(m) = metrics {
            m.snapshot_bytes.fetch_add(file.bytes, Relaxed);
            m.snapshot_write_us_sum
                .fetch_add(queued.elapsed().as_micros() as u64, Relaxed);
        }
        durable
            .files
            .lock()
            .expect("files lock")
            .by_epoch
            .entry(epoch)
            .or_default()
            .push(file);
        durable.files_changed.notify_all();
        writing.fetch_sub(1, Release);
    }
}

/// Runs `work` on a thread of its own named `name`, after `on_background`
/// (which may lower that thread's priority for good: an unprivileged
/// thread cannot raise it again, so the thread ends with the work), and
/// waits for it (the committer's thread merges a chain this way).
fn below<T: Send + 'static>(
    on_background: Option<fn()>,
    name: String,
    work: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    if on_background.is_none() {
        return work();
    }
    match on_thread(name.clone(), on_background, work) {
        Ok(thread) => joined(thread, &name),
        Err((work, e)) => {
            tracing::warn!("cannot start thread {name} ({e}): its work runs at the shards' priority");
            work()
        }
    }
}

/// Starts `work` on a thread named `name`, after `first` on that thread;
/// gives `work` back, with the error, if no thread could be started (none
/// to spare), to run elsewhere. The work moves into the thread only once
/// it started.
fn on_thread<T, W>(
    name: String,
    first: Option<fn()>,
    work: W,
) -> Result<std::thread::JoinHandle<Option<T>>, (W, std::io::Error)>
where
    T: Send + 'static,
    W: FnOnce() -> T + Send + 'static,
{
    let slot = Arc::new(Mutex::new(Some(work)));
    let theirs = slot.clone();
    std::thread::Builder::new()
        .name(name)
        .spawn(move || {
            let work = theirs.lock().expect("work lock").take()?;
            if let Some(first) = first {
                first();
            }
            Some(work())
        })
        .map_err(|e| {
            (
                slot.lock().expect("work lock").take().expect("the work was not taken"),
                e,
            )
        })
}

/// What a thread of [`on_thread`] returned; its panic as an error.
fn joined<T>(thread: std::thread::JoinHandle<Option<Result<T, String>>>, name: &str) -> Result<T, String> {
    thread
        .join()
        .map_err(|_| format!("thread {name} panicked"))?
        .expect("the thread took the work")
}

/// On the node's first shard, a thread of its own: commits a snapshot's
/// manifest once every local shard wrote its file and every local log is
/// durable through its epoch, tells the cluster, and removes what no
/// snapshot the cluster may still roll back to needs (logs before it,
/// older files); merges long chains. At the shards' priority but for the
/// merges: no shard's thread waits on the catalog's lock, and on `files`
/// only while a file is added.
fn committer_thread(durable: &Durable, on_background: Option<fn()>) {
    let first = durable.shards[0];
    let mut files = durable.files.lock().expect("files lock");
    loop {
        if files.stop {
            return;
        }
        // A manifest may only name epochs every shard's log holds durably.
        let logged = durable.log_durable.iter().map(|e| e.load(Relaxed)).min().unwrap_or(0);
        let ready = files
            .by_epoch
            .iter()
            .find(|(e, f)| f.len() == files.shards && **e <= logged)
            .map(|(e, _)| *e);
        let collect = durable.run.complete_epoch() > durable.collected_through.load(Relaxed);
        if ready.is_none() && !collect {
            // Woken at once by a file written; by time for a log not yet
            // durable under a snapshot whose files are all there, or for
            // the cluster's completed snapshot.
            let wait = if files.by_epoch.values().any(|f| f.len() == files.shards) {
                COMMIT_POLL
            } else {
                COMMIT_POLL_IDLE
            };
            files = durable.files_changed.wait_timeout(files, wait).expect("files lock").0;
            continue;
        }
        drop(files);
        if let Some(epoch) = ready {
            commit(durable, epoch, on_background)
                .unwrap_or_else(|e| fatal(first, &format!("cannot commit snapshot {epoch}: {e}")));
        }
        collect_garbage(durable)
            .unwrap_or_else(|e| fatal(first, &format!("cannot remove old snapshots and logs: {e}")));
        files = durable.files.lock().expect("files lock");
    }
}

fn commit(durable: &Durable, epoch: Epoch, on_background: Option<fn()>) -> Result<(), Error> {
    let files = {
        let mut f = durable.files.lock().expect("files lock");
        let files = f.by_epoch.remove(&epoch).expect("ready files");
        // Older snapshots still pending can never commit after this one.
        f.by_epoch.retain(|e, _| *e > epoch);
        files
    };
    let mut c = durable.committer.lock().expect("committer lock");
    let manifest = Manifest::snapshot(c.catalog.latest(), epoch, files)?;
    let manifest = Arc::new(c.catalog.commit(manifest)?.clone());
    // Committed: a merge below only shortens the chain (and may take long
    // on a busy machine), so the others need not wait for it.
    durable.committed_epoch.store(epoch, Relaxed);
    tracing::info!(epoch, "snapshot committed");
    durable.run.committed_locally(epoch);
    for s in &manifest.shards {
        if s.files.len() <= COMPACT_AFTER_FILES {
            continue;
        }
        // Below the shards' priority, as the files are written: merging a
        // chain reads, merges and writes every entity of the shard (~140
        // ms of CPU at 50 000 accounts, each 8 commits), and at their
        // priority it took that from the shards (epochs 2-3× longer
        // meanwhile).
        let (dir, m, shard) = (durable.dir.clone(), manifest.clone(), s.shard);
        let base = below(on_background, format!("compact-{shard}"), move || {
            styx_storage::snapshot::compact(&dir, &m, shard).map_err(|e| e.to_string())
        })
        .map_err(Error::Snapshot)?;
        if let Some(base) = base {
            let latest = c.catalog.latest().expect("just committed").clone();
            c.catalog.commit(latest.compacted(base)?)?;
        }
    }
    Ok(())
}

/// Removes the logs and snapshots older than the newest snapshot the whole
/// cluster completed (for a single node: its latest).
fn collect_garbage(durable: &Durable) -> Result<(), Error> {
    let c = durable.committer.lock().expect("committer lock");
    let Some(latest) = c.catalog.latest().map(|m| m.epoch) else {
        return Ok(());
    };
    let complete = durable.run.complete_epoch().min(latest);
    if complete <= durable.collected_through.load(Relaxed) {
        return Ok(());
    }
    // The record first: a node restarting with a directory that lacks this
    // snapshot is then refused (`Plan::of`). Manifests second, logs third:
    // a crash in between leaves a log longer than needed, never a kept
    // snapshot whose log is gone.
    if durable.run.is_cluster() {
        write_complete(&durable.dir, complete)?;
    }
    c.catalog.gc_keeping(complete)?;
    for s in durable.shards.clone() {
        // A snapshot's log resumes after its epoch.
        wal::remove_through(&durable.dir, s, complete)?;
    }
    durable.collected_through.store(complete, Relaxed);
    Ok(())
}
