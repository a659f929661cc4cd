//! A node's executors and the rounds they run: [`run_round`] runs one and
//! stops them, [`run_rounds`] keeps them across the handovers of a run.
//!
//! An executor is a thread (glommio's `LocalExecutor`) that runs a block of
//! the node's shards as tasks. A [`Shard`] lives on the thread that built it
//! (it is not `Send`), so a shard that keeps its node at a handover can go
//! on in memory only if its executor outlives the round: the executors take
//! their rounds from the driver over a channel, keep the shards staying on
//! this node ([`Shard::stay`] at the next round's start) and report the
//! others' hand-offs. A round's links, counters and wakers are its own
//! (nothing is in flight between rounds: every shard stopped and received
//! all that was sent to it); the shards, the threads and the channel mesh
//! that carries doorbells between them are not (a ring left from the last
//! round wakes a loop for nothing).

use crate::link::Links;
use crate::shard_loop::{Departed, Mesh, ShardLoop};
use crate::{
    Clock, DOORBELLS_MAX, Error, Frontend, MESH_CAPACITY, Options, Waiter, cluster, durable, executor_of, remote,
    settle, threads_default, wake,
};
use futures_lite::FutureExt;
use glommio::channels::channel_mesh::{MeshBuilder, Senders};
use glommio::channels::shared_channel::ConnectedReceiver;
use glommio::{ExecutorJoinHandle, LocalExecutorBuilder, Placement};
use std::cell::RefCell;
use std::panic::AssertUnwindSafe;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;
use styx_engine::{App, Checkpoint, Durability, Epoch, Handoff, Layout, Shard, ShardId};
use styx_storage::DataDir;

/// How a round of [`run_round`] ended.
pub struct Round<O> {
    /// Each local shard's frontend output, in shard order.
    pub outputs: Vec<O>,
    /// `Some((epoch, layout))` if every shard of the cluster stopped at the
    /// end of `epoch` for a handover (`Config::pause_at_handover`);
    /// `layout` places them from the next epoch on.
    pub paused: Option<(Epoch, Layout)>,
    /// Then, every local shard's hand-off, in shard order: the driver
    /// sends each to the node `layout` puts it on
    /// ([`cluster::Run::hand_over`]) and starts the next round there with
    /// it ([`run_round`]'s `resume`).
    pub handoffs: Vec<Handoff>,
    /// With a data directory ([`run_rounds`]), a checkpoint of every shard
    /// kept on this node, for the handover's snapshot.
    pub checkpoints: Vec<Checkpoint>,
}

/// Where a node of [`run_rounds`] keeps its input log and snapshots.
#[derive(Clone, Debug)]
pub struct Disk {
    pub dir: Arc<DataDir>,
    pub wal: styx_storage::wal::Options,
    /// For crash tests: at the handover with this number (1 for the
    /// first), the node writes its checkpoint's files and layout and then
    /// fails before committing its manifest, as a crash there leaves it.
    #[doc(hidden)]
    pub fail_checkpoint: Option<usize>,
}

/// A round change of [`run_rounds`]: a handover at the end of `epoch`.
#[derive(Clone, Debug)]
pub struct RoundChange {
    pub epoch: Epoch,
    /// Where the shards run from the next epoch on.
    pub layout: Layout,
    /// When this node's round ended, and when it joined the next one.
    pub ended: std::time::Instant,
    pub joined: std::time::Instant,
    /// Durable: how long the checkpoint took (writing the files, then
    /// committing), and the next round's start on the data directory.
    pub checkpoint: Duration,
    pub reopen: Duration,
    /// The shards this node handed to other nodes, with their entities.
    pub sent: Vec<(ShardId, usize)>,
    /// The shards that stayed on this node: kept in memory as they were,
    /// on their executors (nothing copied, nothing rebuilt).
    pub kept: Vec<ShardId>,
}

/// How a node's [`run_rounds`] ended: the last round's outputs, and every
/// round change on the way.
pub struct Rounds<O> {
    pub outputs: Vec<O>,
    pub changes: Vec<RoundChange>,
    /// Why the last round's run failed, if it did: the frontends may have
    /// finished first (a node that leaves closes its links), or not — the
    /// caller's frontends know.
    pub failed: Option<String>,
    /// This node left the cluster (a leave of it was made, or its
    /// directory records one): it runs nothing more.
    pub left: bool,
}

/// This node's part of an in-memory cluster, across handovers: joins with
/// `layout`, runs rounds (`options` gives each round's [`Options`] for its
/// [`cluster::Run`] — `cluster` and `engine.pause_at_handover` are set
/// here, and `metrics`, if any, must be of that run's local shards; the
/// executors' `pin`, `threads`, `spin_before_park` and `io_memory` are the
/// first round's, and a shard kept keeps the `engine` config it started
/// with), and at each handover sends the shards leaving this node
/// to theirs (as bytes over the control connections:
/// [`cluster::Run::hand_over`]), keeps those staying in memory on their
/// executors (they go on where they stopped: nothing is copied), joins the
/// next round with the new layout and resumes them. Returns once a round
/// ends without a handover; a run that failed in that last round is
/// reported in [`Rounds::failed`] (a node that finishes first closes its
/// links, so whether that lost anything is for the caller's frontends to
/// say). In memory, a failure during a handover is an error: the shards
/// live only in memory (durable, see below).
///
/// A node may run no shard (a **spare**: one the layout gives none, or one
/// that handed all of its shards away): it joins every round, ends each
/// handover with the others and takes the shards handed to it — a node
/// added to the cluster, or drained of its shards before it is removed.
/// A spare's run ends when the others' does (their connections close:
/// [`Rounds::failed`] says so, and its `outputs` are empty). `options` is
/// asked at a spare's round too, with its run (no local shard), so that
/// the caller learns of it (a daemon serves its client port without an
/// engine meanwhile); nothing of the answer is used.
///
/// With `disk`, the run is durable (`engine.durability` is set to the
/// log): the node recovers from its data directory at the first join —
/// with the layout and shards of the snapshot the cluster's plan restores
/// — and each handover is a checkpoint of every shard where it runs next,
/// committed by every node before any starts the next epoch
/// (`durable::SurveyedHanded`). A durable spare commits each snapshot the
/// nodes running shards committed, with a manifest of no shard, as it
/// waits (`Durable::commit_as_spare`). A durable run that fails during
/// a handover, or at the join after it, ends like one that fails in a
/// round ([`Rounds::failed`]): its logs hold the handover's epoch, so the
/// caller calls `run_rounds` again and the cluster recovers.
#[allow(clippy::too_many_arguments)]
pub fn run_rounds<F, M>(
    app: Arc<App>,
    control: &mut cluster::Control,
    layout: Layout,
    options: impl Fn(Arc<cluster::Run>) -> Options,
    make: M,
    stop: &std::sync::atomic::AtomicBool,
    timeout: Duration,
    disk: Option<Disk>,
) -> Result<Rounds<F::Output>, Error>
where
    F: Frontend,
    M: Fn(&mut Shard) -> F + Clone + Send + Sync + 'static,
{
    let first_layout = layout.clone();
    let mut layout = layout;
    let mut resume: Vec<Handoff> = Vec::new();
    let mut changes: Vec<RoundChange> = Vec::new();
    let mut executors: Option<Executors<F, M>> = None;
    let disk_error = |e: styx_storage::Error| Error::Disk(e.to_string());
    let mut surveyed = match &disk {
        Some(d) => {
            Some(durable::Durable::survey_handed(d.dir.clone(), &layout, control.node(), d.wal).map_err(disk_error)?)
        }
        None => None,
    };
    // Whatever way the rounds end, a handover's garbage collection ends
    // first: it must not go on changing the directory after them.
    let mut settle = Settle(None);
    let durable = &mut settle.0;
    loop {
        let joined = match &surveyed {
            Some(sv) => control.join_placed(sv.joining(), &layout, stop, |plan| sv.layout_at(plan, &first_layout)),
            None if changes.is_empty() => control.join(cluster::Survey::default(), &layout, stop),
            None => control.join_next(&layout, stop),
        };
        let run = match joined {
            Ok(Some(run)) => Arc::new(run),
            Ok(None) => return Err(Error::Join("stopped while joining".into())),
            // Durable, the round after a handover recovers from the disks
            // like any failed run (a peer restarted meanwhile: it greets
            // with the layout its directory holds).
            Err(e) if disk.is_some() && !changes.is_empty() => {
                return Ok(failed_between(executors.take(), changes, format!("joining: {e}")));
            }
            Err(e) => return Err(Error::Join(e)),
        };
        if let Some(c) = changes.last_mut() {
            c.joined = std::time::Instant::now();
        }
        // What the join learned of nodes gone from the cluster is kept
        // before anything runs: a node that left may be gone for good.
        if let Some(d) = &disk {
            durable::record_left(&d.dir, &run.left_nodes()).map_err(disk_error)?;
            durable::record_joined(&d.dir, run.joined_nodes()).map_err(disk_error)?;
        }
        if !run.has_left() {
            control.greet_as_gone(&run.left_nodes());
        }
        if run.has_left() {
            tracing::info!(node = control.node(), "this node left the cluster");
            if let Some(ex) = executors.take() {
                ex.stop()?;
            }
            return Ok(Rounds {
                outputs: Vec::new(),
                changes,
                failed: None,
                left: true,
            });
        }
        if disk.is_some() {
            let next = match (surveyed.take(), &*durable, changes.last_mut()) {
                (Some(sv), ..) => {
                    let (d, recovered) = sv.start(run.plan, run.clone()).map_err(disk_error)?;
                    tracing::info!(
                        snapshot = ?recovered.snapshot_epoch,
                        replay_batches = recovered.replay_batches,
                        recovered_epoch = recovered.recovered_epoch,
                        layout = ?run.layout().placed(),
                        "recovered"
                    );
                    for t in &recovered.truncated {
                        tracing::warn!("a log's torn tail was cut: {t}");
                    }
                    d
                }
                (None, Some(d), Some(change)) => {
                    let reopening = std::time::Instant::now();
                    let next = d
                        .next_round(change.epoch, run.clone(), &change.kept)
                        .map_err(disk_error)?;
                    change.reopen = reopening.elapsed();
                    next
                }
                _ => unreachable!("a durable round after the first follows a handover"),
            };
            *durable = Some(next);
        }
        // The handover that ended the round: its epoch, the next layout,
        // when this node's round ended, and the shards it sends (as bytes)
        // and keeps.
        let (epoch, next, ended, outgoing, sent, kept, checkpoints) = if run.local_shards().is_empty() {
            // A spare this round (it starts as one, or handed all its
            // shards away): it takes part in the handovers only.
            let _ = options(run.clone());
            // Durable, it commits the snapshots the others did.
            let mut broken = None;
            let spare = run.spare_round(stop, || match &*durable {
                Some(d) => d.commit_as_spare().map(|_| ()).map_err(|e| {
                    let why = format!("a spare's snapshot: {e}");
                    broken = Some(e);
                    why
                }),
                None => Ok(()),
            });
            if let Some(e) = broken {
                return Err(disk_error(e));
            }
            match spare {
                cluster::Spare::Handover(epoch, next) => (
                    epoch,
                    next,
                    std::time::Instant::now(),
                    Vec::new(),
                    Vec::new(),
                    Vec::new(),
                    Vec::new(),
                ),
                cluster::Spare::Stopped => return Err(Error::Handover("stopped while a spare".into())),
                ended => {
                    if let Some(ex) = executors.take() {
                        ex.stop()?;
                    }
                    return Ok(Rounds {
                        outputs: Vec::new(),
                        changes,
                        failed: match ended {
                            cluster::Spare::Failed(why) => Some(why),
                            _ => None,
                        },
                        left: false,
                    });
                }
            }
        } else {
            let mut opts = options(run.clone());
            opts.cluster = Some(run.clone());
            opts.engine.pause_at_handover = true;
            if durable.is_some() {
                opts.durable = durable.clone();
                opts.engine.durability = Durability::Log;
            }
            let ex = match &mut executors {
                Some(ex) => ex,
                // A spare's first shards: it may be handed more, each on the
                // executor with the fewest, so as many as the node may use.
                None => executors.insert(Executors::start(&opts, !changes.is_empty())?),
            };
            let later = !changes.is_empty();
            let round = ex.round(
                app.clone(),
                opts,
                std::mem::take(&mut resume),
                make.clone(),
                true,
                later,
            )?;
            let Some((epoch, next)) = round.paused else {
                executors.take().expect("started").stop()?;
                if let Some(d) = &*durable {
                    d.collected();
                }
                // Before saying FINISHED: once a spare hears it, it closes.
                let failed = run.failure.reason();
                // A spare learns that the run is over, not failed.
                run.finish();
                return Ok(Rounds {
                    outputs: round.outputs,
                    changes,
                    failed,
                    left: false,
                });
            };
            let ended = std::time::Instant::now();
            // Those staying stayed on their executors: only the shards
            // changing nodes are handed off, and cross as bytes.
            let sent = round.handoffs.iter().map(|h| (h.shard(), h.entities())).collect();
            let outgoing = round
                .handoffs
                .iter()
                .map(|h| (next.node_of(h.shard()), h.shard(), h.encode()))
                .collect();
            let mut kept: Vec<ShardId> = ex.kept.iter().flatten().map(|k| k.0).collect();
            kept.sort_unstable();
            (epoch, next, ended, outgoing, sent, kept, round.checkpoints)
        };
        let arrived = match run.hand_over(epoch, outgoing, timeout, stop) {
            Ok(arrived) => arrived,
            // Durable, every shard's log holds the handover's epoch: the
            // cluster recovers from the disks and makes it again.
            Err(e) if disk.is_some() => return Ok(failed_between(executors.take(), changes, e)),
            Err(e) => return Err(Error::Handover(e)),
        };
        for bytes in arrived {
            let h = Handoff::decode(&bytes, &app).map_err(|e| Error::Handover(format!("a hand-off: {e}")))?;
            resume.push(h);
        }
        let checkpointing = std::time::Instant::now();
        if let Some(d) = &disk {
            // Before the checkpoint: once the next round runs, a node that
            // left at this handover may be gone, and no restart may wait
            // for it (the record is never rolled back). A node records its
            // own leave only once every other node greeted it, having
            // recorded it (the join after this change).
            let me = control.node();
            let others: Vec<u16> = next.left().iter().copied().filter(|n| *n != me).collect();
            durable::record_left(&d.dir, &others).map_err(disk_error)?;
            // Likewise a node that joined at it: from the next round on
            // every join waits for it, a restart's included.
            durable::record_joined(&d.dir, &control.joined_in(&next)).map_err(disk_error)?;
        }
        if let Some(d) = &*durable {
            // The last handover's garbage collection removes files of the
            // shards that left then: one may be back, and its file is
            // written now.
            d.collected();
            // The checkpoint, before the next join: once any node runs the
            // next epoch, every node has committed it.
            let mut all = checkpoints;
            all.extend(resume.iter().map(Handoff::checkpoint));
            let files = d.write_checkpoint(epoch, &next, all).map_err(disk_error)?;
            if disk.as_ref().and_then(|d| d.fail_checkpoint) == Some(changes.len() + 1) {
                return Err(Error::Handover(format!(
                    "failing before the checkpoint at epoch {epoch} is committed, as asked"
                )));
            }
            d.commit_checkpoint(epoch, files).map_err(disk_error)?;
        }
        let checkpoint = checkpointing.elapsed();
        changes.push(RoundChange {
            epoch,
            layout: next.clone(),
            ended,
            joined: ended,
            checkpoint,
            reopen: Duration::ZERO,
            sent,
            kept,
        });
        layout = next;
    }
}

/// How a durable [`run_rounds`] ends when its run fails between two
/// rounds (a hand-over cut short, a join refused): the kept shards stop
/// with their executors, and the caller recovers from the disks as after
/// any failed run.
fn failed_between<F: Frontend, M>(
    executors: Option<Executors<F, M>>,
    changes: Vec<RoundChange>,
    why: String,
) -> Rounds<F::Output>
where
    M: Fn(&mut Shard) -> F + Send + Sync + 'static,
{
    if let Some(ex) = executors
        && let Err(e) = ex.stop()
    {
        tracing::warn!("stopping the executors after a failed handover: {e}");
    }
    Rounds {
        outputs: Vec::new(),
        changes,
        failed: Some(why),
        left: false,
    }
}

/// Waits, when dropped, for the garbage collection of the last handover's
/// checkpoint (`durable::Durable::collected`).
struct Settle(Option<Arc<durable::Durable>>);

impl Drop for Settle {
    fn drop(&mut self) {
        if let Some(d) = &self.0 {
            d.collected();
        }
    }
}

/// [`run`](crate::run), one round of handovers at a time: with
/// `opts.engine.pause_at_handover` (an in-memory cluster run), the shards
/// hold the run's layout, so a `__handover` to another node is decided
/// like any other, and at the end of the epoch where the layout changed
/// every shard of the cluster stops; once every node's shards have
/// stopped (nothing of that epoch in flight, nothing of the next begun)
/// the round ends with every local shard's hand-off. `resume` holds the
/// shards this node runs from a hand-off (every one it runs, after the
/// first round): they are rebuilt from it instead of started empty, and
/// `make` sees them with their state (a shard with `epoch() > 0`: load
/// nothing into it). The executors stop with the round ([`run_rounds`]
/// keeps them, and the shards staying on this node with them).
pub fn run_round<F, M>(app: Arc<App>, opts: Options, resume: Vec<Handoff>, make: M) -> Result<Round<F::Output>, Error>
where
    F: Frontend,
    M: Fn(&mut Shard) -> F + Send + Sync + 'static,
{
    let mut executors = Executors::<F, M>::start(&opts, false)?;
    let later = !resume.is_empty();
    // After an error the executors are dropped, not joined: one whose
    // shards wait on a peer that died would never end.
    let round = executors.round(app, opts, resume, make, false, later)?;
    executors.stop()?;
    Ok(round)
}

/// A shard the driver gives an executor for a round.
enum Start {
    /// Started empty (the run's first round).
    New(ShardId),
    /// Rebuilt from its hand-off.
    Resume(Box<Handoff>),
}

/// Where a shard of a round comes from.
enum Begin {
    Start(Start),
    /// Kept by its executor from the last round: it goes on in place,
    /// its log writer (durable) still open.
    Kept(Box<Shard>, Option<Box<styx_storage::wal::Writer>>),
}

impl Begin {
    fn id(&self) -> ShardId {
        match self {
            Begin::Start(Start::New(id)) => *id,
            Begin::Start(Start::Resume(h)) => h.shard(),
            Begin::Kept(s, _) => s.id(),
        }
    }
}

/// What an executor tells the driver.
enum Report<O> {
    /// It joined the channel mesh as executor `peer` (doorbells are
    /// addressed by it).
    Joined { spawned: usize, peer: usize },
    /// Its shards' round ended: each one's output and, if it stopped for a
    /// handover, either its hand-off (it leaves this node, or the round's
    /// shards are not kept) or its epoch (kept: it stays).
    Ended {
        peer: usize,
        outputs: Vec<(ShardId, Result<O, Error>)>,
        handoffs: Vec<Handoff>,
        kept: Vec<(ShardId, Epoch, Layout)>,
        /// With a data directory, a checkpoint of each shard kept.
        checkpoints: Vec<Checkpoint>,
    },
    /// A shard of it panicked (its task caught it and the executor
    /// ends), or the executor itself did while unwinding its main task.
    Died { shard: Option<ShardId>, message: String },
}

/// Sends [`Report::Died`] if its executor's main task unwinds (a panic in
/// a shard's task is caught there instead: see [`executor`]).
struct Reporter<O: Send> {
    tx: mpsc::Sender<Report<O>>,
}

impl<O: Send> Drop for Reporter<O> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = self.tx.send(Report::Died {
                shard: None,
                message: "its executor panicked".into(),
            });
        }
    }
}

/// What a caught panic said.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    match panic.downcast_ref::<&str>() {
        Some(s) => (*s).to_string(),
        None => panic
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_else(|| "a panic".into()),
    }
}

/// A round for one executor: the round's shared part, and the shards it
/// starts besides those it kept.
type Plan<M> = (Arc<Node<M>>, Vec<Start>);

/// A node's executor threads, across the rounds of a run.
struct Executors<F: Frontend, M> {
    /// Per executor (by its id in the channel mesh), where its rounds go.
    plans: Vec<mpsc::Sender<Plan<M>>>,
    reports: mpsc::Receiver<Report<F::Output>>,
    /// By spawn order: each one, its id in the mesh, and the first shard
    /// it ran in the first round (errors name it).
    handles: Vec<(ExecutorJoinHandle<()>, usize, ShardId)>,
    /// Per executor, the shards it keeps from the last round.
    kept: Vec<Vec<(ShardId, Epoch, Layout)>>,
    /// The first round's local shards (executor `e` runs a contiguous
    /// block of them).
    n_first: usize,
    clock: Clock,
}

impl<F: Frontend, M: Fn(&mut Shard) -> F + Send + Sync + 'static> Executors<F, M> {
    /// Starts the executors for the first round's options: one per shard up
    /// to `threads`, pinned as the cluster file numbers this node's shards.
    /// `later`: the node starts running shards after a handover (a spare
    /// handed its first): as many executors as `threads`, or a core each,
    /// however few shards it has now.
    fn start(opts: &Options, later: bool) -> Result<Executors<F, M>, Error> {
        let local = local_of(opts)?.1;
        let n_local = local.len();
        // CPUs and executor names as if the node's shards were numbered in
        // order, as the cluster file numbers them: nodes sharing a machine
        // spread over its CPUs whatever the layout.
        let pin_base = match &opts.cluster {
            Some(run) => run.spec.first_of(run.node),
            None => 0,
        };
        let n_exec = if later {
            let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
            opts.threads.unwrap_or(cores).max(1)
        } else {
            opts.threads
                .unwrap_or_else(|| threads_default(n_local))
                .clamp(1, n_local)
        };
        let cpus = std::thread::available_parallelism().map_or(1, |c| c.get());
        let mesh: MeshBuilder<u16, _> = MeshBuilder::full(n_exec, DOORBELLS_MAX);
        let (report_tx, reports) = mpsc::channel();
        let mut plan_rx = Vec::with_capacity(n_exec);
        let mut plan_tx = Vec::with_capacity(n_exec);
        for _ in 0..n_exec {
            let (tx, rx) = mpsc::channel::<Plan<M>>();
            plan_tx.push(tx);
            plan_rx.push(Some(rx));
        }
        // Until the executors joined the mesh, the channels are by spawn
        // order; once they did, by mesh id.
        let mut spawned = Vec::with_capacity(n_exec);
        for (e, rx) in plan_rx.iter_mut().enumerate() {
            let placement = if opts.pin && n_exec <= cpus {
                // Numbered across the cluster as if every node ran as many
                // shards per thread as this one: nodes sharing a machine (a
                // test, a benchmark) spread over its CPUs instead of all
                // pinning their first executor to CPU 0.
                Placement::Fixed((pin_base * n_exec / n_local + e) % cpus)
            } else {
                Placement::Unbound
            };
            let (mesh, rx, tx) = (mesh.clone(), rx.take().expect("once"), report_tx.clone());
            let handle = LocalExecutorBuilder::new(placement)
                .name(&format!(
                    "shards-{}",
                    local[crate::first_of_executor(e, n_exec, n_local)]
                ))
                .spin_before_park(opts.spin_before_park)
                .io_memory(opts.io_memory)
                .spawn(move || executor::<F, M>(e, mesh, rx, tx))
                .map_err(|source| Error::Executor { executor: e, source })?;
            spawned.push(handle);
        }
        drop(report_tx);
        let mut peers = vec![usize::MAX; n_exec];
        for _ in 0..n_exec {
            match reports.recv() {
                Ok(Report::Joined { spawned, peer }) => peers[spawned] = peer,
                _ => {
                    return Err(Error::Shard {
                        shard: usize::from(local[0]),
                        message: "an executor stopped before joining the others".into(),
                    });
                }
            }
        }
        let mut plans: Vec<Option<mpsc::Sender<Plan<M>>>> = (0..n_exec).map(|_| None).collect();
        for (e, tx) in plan_tx.into_iter().enumerate() {
            plans[peers[e]] = Some(tx);
        }
        Ok(Executors {
            plans: plans.into_iter().map(|p| p.expect("every mesh id")).collect(),
            reports,
            handles: spawned
                .into_iter()
                .zip(peers)
                .map(|(h, p)| (h, p, local[crate::first_of_executor(p, n_exec, n_local)]))
                .collect(),
            kept: vec![Vec::new(); n_exec],
            n_first: n_local,
            clock: Clock::new(),
        })
    }

    /// Runs one round: this run's local shards, those kept from the last
    /// round on their executors, those of `resume` rebuilt from their
    /// hand-offs, and (first round) new ones. With `keep`, a shard that
    /// stops for a handover and stays on this node is kept for the next
    /// round instead of handed off.
    /// `later`: a round after a handover, whose every shard must be kept
    /// or resumed (none starts empty).
    fn round(
        &mut self,
        app: Arc<App>,
        mut opts: Options,
        resume: Vec<Handoff>,
        make: M,
        keep: bool,
        later: bool,
    ) -> Result<Round<F::Output>, Error> {
        let (n, local) = local_of(&opts)?;
        let n_local = local.len();
        if let Some(m) = &opts.metrics {
            assert_eq!(m.ids, local, "metrics of other shards than this node's");
        }
        if opts.engine.pause_at_handover && ((opts.durable.is_some() && !keep) || opts.cluster.is_none()) {
            return Err(Error::Handover(
                "handovers between nodes run in a cluster run, durable ones in `run_rounds` (docs/nodes.md)".into(),
            ));
        }
        if opts.engine.pause_at_handover {
            // A node may be left without shards only where it goes on as
            // a spare: in `run_rounds` (a single round has no next one).
            opts.engine.spare_nodes = keep;
        }
        let kept: Vec<(ShardId, Epoch, Layout)> = self.kept.iter().flatten().cloned().collect();
        if later || !resume.is_empty() || !kept.is_empty() {
            // After a handover every shard goes on from where it stopped
            // (kept, or its hand-off): all of this node's, from one epoch,
            // placed by this run's layout.
            let layout = opts.cluster.as_ref().map(|r| r.layout().clone());
            let mut ids: Vec<ShardId> = resume
                .iter()
                .map(|h| h.shard())
                .chain(kept.iter().map(|k| k.0))
                .collect();
            ids.sort_unstable();
            let epochs: Vec<Epoch> = resume
                .iter()
                .map(|h| h.epoch())
                .chain(kept.iter().map(|k| k.1))
                .collect();
            let layouts = resume.iter().map(|h| h.layout()).chain(kept.iter().map(|k| &k.2));
            if ids != local
                || epochs.iter().any(|e| *e != epochs[0])
                || layouts.map(|l| l.placed()).any(|l| Some(l) != layout)
            {
                return Err(Error::Handover(format!(
                    "hand-offs of shards {ids:?} at epochs {epochs:?} for a node running {local:?} by layout {layout:?}"
                )));
            }
        }
        // Where each shard runs: kept ones where they are; in the first
        // round contiguous blocks by mesh id; arriving ones on the executor
        // with the fewest shards.
        let n_exec = self.plans.len();
        let mut exec_of = vec![u16::MAX; n];
        let mut load = vec![0usize; n_exec];
        for (peer, shards) in self.kept.iter().enumerate() {
            for k in shards {
                exec_of[usize::from(k.0)] = peer as u16;
                load[peer] += 1;
            }
        }
        // A local shard's index in `local` (and in the round's outputs).
        let at = |id: ShardId| local.iter().position(|s| *s == id);
        let mut begins: Vec<Vec<Start>> = (0..n_exec).map(|_| Vec::new()).collect();
        let first = kept.is_empty() && self.n_first == n_local;
        let mut place = |id: ShardId, exec_of: &mut Vec<u16>| {
            let peer = if first {
                let l = at(id).expect("a local shard");
                executor_of(l, n_exec, n_local)
            } else {
                (0..n_exec).min_by_key(|p| (load[*p], *p)).expect("an executor")
            };
            exec_of[usize::from(id)] = peer as u16;
            load[peer] += 1;
            peer
        };
        let mut resumed: Vec<Option<Handoff>> = local.iter().map(|_| None).collect();
        for h in resume {
            match at(h.shard()) {
                Some(l) if resumed[l].is_none() => resumed[l] = Some(h),
                _ => {
                    return Err(Error::Handover(format!(
                        "a hand-off of shard {}, which this node does not run (or twice)",
                        h.shard()
                    )));
                }
            }
        }
        for (l, h) in resumed.into_iter().enumerate() {
            let id = local[l];
            if exec_of[usize::from(id)] != u16::MAX {
                continue;
            }
            let peer = place(id, &mut exec_of);
            begins[peer].push(match h {
                Some(h) => Start::Resume(Box::new(h)),
                None => Start::New(id),
            });
        }
        let node = Arc::new(Node {
            app,
            links: Arc::new(Links::new(n, MESH_CAPACITY)),
            make,
            done: Arc::new(AtomicUsize::new(0)),
            paused: Arc::new(AtomicUsize::new(0)),
            paused_layout: Mutex::new(None),
            clock: self.clock,
            n,
            local: local.clone(),
            exec_of: exec_of.into(),
            keep_on: keep.then(|| opts.cluster.as_ref().map(|r| r.node)).flatten(),
            aborted: Arc::new(AtomicBool::new(false)),
            opts,
        });
        for (peer, b) in begins.into_iter().enumerate() {
            if self.plans[peer].send((node.clone(), b)).is_err() {
                return Err(self.gone(peer));
            }
        }
        for k in &mut self.kept {
            k.clear();
        }
        let mut outputs: Vec<Option<F::Output>> = (0..n_local).map(|_| None).collect();
        let mut handoffs: Vec<Option<Handoff>> = (0..n_local).map(|_| None).collect();
        let mut stopped: Vec<Option<Epoch>> = vec![None; n_local];
        let mut checkpoints = Vec::new();
        let mut error = None;
        for _ in 0..n_exec {
            match self.reports.recv() {
                Ok(Report::Ended {
                    peer,
                    outputs: o,
                    handoffs: h,
                    kept,
                    checkpoints: c,
                }) => {
                    checkpoints.extend(c);
                    for (id, output) in o {
                        let l = at(id).expect("a local shard");
                        match output {
                            Ok(o) => outputs[l] = Some(o),
                            Err(e) => {
                                error.get_or_insert(e);
                            }
                        }
                    }
                    for h in h {
                        let l = at(h.shard()).expect("a local shard");
                        stopped[l] = Some(h.epoch());
                        handoffs[l] = Some(h);
                    }
                    for k in &kept {
                        let l = at(k.0).expect("a local shard");
                        stopped[l] = Some(k.1);
                    }
                    self.kept[peer] = kept;
                }
                Ok(Report::Died { shard, message }) => {
                    return Err(Error::Shard {
                        shard: usize::from(shard.unwrap_or(local[0])),
                        message,
                    });
                }
                Ok(Report::Joined { .. }) | Err(_) => {
                    return Err(Error::Shard {
                        shard: usize::from(local[0]),
                        message: "an executor stopped".into(),
                    });
                }
            }
        }
        if let Some(e) = error {
            return Err(e);
        }
        let outputs = outputs.into_iter().map(|o| o.expect("every shard reported")).collect();
        let failed = node.opts.cluster.as_ref().is_some_and(|r| r.failure.is_failed());
        let paused = match stopped.iter().filter(|s| s.is_some()).count() {
            0 => None,
            k if k == n_local => {
                let layout = node.paused_layout.lock().expect("layout lock").clone();
                let epoch = stopped[0].expect("counted");
                Some((epoch, layout.expect("a stopped shard left its layout")))
            }
            // Some stopped and others saw the run fail first. Durable, the
            // logs hold what the stopped ones did: a failed round, which
            // the cluster recovers from.
            _ if failed && node.opts.durable.is_some() => None,
            // In memory, the stopped ones' state would be lost with the
            // round.
            k if failed => {
                return Err(Error::Handover(format!(
                    "the cluster failed while {k} of {n_local} shards stopped for a handover: {}",
                    node.opts
                        .cluster
                        .as_ref()
                        .and_then(|r| r.failure.reason())
                        .unwrap_or_default()
                )));
            }
            k => {
                return Err(Error::Handover(format!(
                    "{k} of {n_local} shards stopped, the others ended otherwise"
                )));
            }
        };
        Ok(Round {
            outputs,
            paused,
            handoffs: handoffs.into_iter().flatten().collect(),
            checkpoints,
        })
    }

    /// Executor `peer` is gone: why, from its thread.
    fn gone(&mut self, peer: usize) -> Error {
        // It may have said why.
        while let Ok(report) = self.reports.try_recv() {
            if let Report::Died { shard, message } = report {
                return Error::Shard {
                    shard: usize::from(shard.unwrap_or(self.handles[0].2)),
                    message,
                };
            }
        }
        let i = self
            .handles
            .iter()
            .position(|(_, p, _)| *p == peer)
            .expect("every executor has a handle");
        Error::Shard {
            shard: usize::from(self.handles[i].2),
            message: "its executor stopped".into(),
        }
    }

    /// Stops the executors (dropping what they kept) and waits for them.
    fn stop(mut self) -> Result<(), Error> {
        self.plans.clear();
        let mut result = Ok(());
        for (handle, _, shard) in self.handles.drain(..) {
            if let Err(err) = handle.join() {
                result = Err(Error::Shard {
                    shard: usize::from(shard),
                    message: err.to_string(),
                });
            }
        }
        result
    }
}

impl<F: Frontend, M> Drop for Executors<F, M> {
    /// After an error: closed channels end the loops of the executors
    /// waiting for a round; one whose shards wait on a peer that died is
    /// left behind, as the process is about to report the error.
    fn drop(&mut self) {
        self.plans.clear();
    }
}

/// The shards of the whole run and this node's, in order.
fn local_of(opts: &Options) -> Result<(usize, Vec<ShardId>), Error> {
    let (n, local): (usize, Vec<ShardId>) = match &opts.cluster {
        Some(run) => (usize::from(run.spec.n_shards()), run.local_shards().to_vec()),
        None => (opts.shards as usize, (0..opts.shards).collect()),
    };
    if n == 0 || n > styx_engine::SHARDS_MAX {
        return Err(Error::Shards(n));
    }
    if local.is_empty() {
        // A spare takes part in the control plane's rounds without
        // executors (`run_rounds`); a durable one would also have to take
        // part in snapshot commits: not built (docs/nodes.md).
        return Err(Error::NoLocalShards);
    }
    Ok((n, local))
}

/// An executor's life: joins the channel mesh, then runs the rounds the
/// driver sends until it closes the channel, keeping the shards that stay.
async fn executor<F, M>(
    spawned: usize,
    mesh: MeshBuilder<u16, glommio::channels::channel_mesh::Full>,
    plans: mpsc::Receiver<Plan<M>>,
    reports: mpsc::Sender<Report<F::Output>>,
) where
    F: Frontend,
    M: Fn(&mut Shard) -> F + Send + Sync + 'static,
{
    let (senders, mut receivers) = mesh.join().await.expect("channel mesh");
    let peer = senders.peer_id();
    let reporter = Reporter { tx: reports };
    // Per shard of the run, the waker of this executor's loops (rounds
    // set them): doorbells ring by shard.
    let waiters: Rc<RefCell<Vec<Option<Waiter>>>> = Rc::default();
    for (_, rx) in receivers.streams() {
        glommio::spawn_local(doorbell(rx, waiters.clone())).detach();
    }
    let senders = Rc::new(senders);
    if reporter.tx.send(Report::Joined { spawned, peer }).is_err() {
        return;
    }
    let mut kept: Vec<(Box<Shard>, Option<Box<styx_storage::wal::Writer>>)> = Vec::new();
    let mut ran = false;
    // Between rounds the executor keeps running what the last round left:
    // a frontend's listener closing, its connections writing their last
    // answers and closing (a thread blocked here would leave a listener
    // open that nobody accepts on, and its clients hanging).
    'rounds: while let Some((node, begins)) = next_plan(&plans).await {
        let mut shards: Vec<Begin> = kept
            .drain(..)
            .map(|(shard, writer)| Begin::Kept(shard, writer))
            .chain(begins.into_iter().map(Begin::Start))
            .collect();
        shards.sort_by_key(Begin::id);
        let ids: Vec<ShardId> = shards.iter().map(Begin::id).collect();
        let mine: Vec<Waiter> = ids.iter().map(|_| Waiter::default()).collect();
        {
            let mut w = waiters.borrow_mut();
            w.clear();
            w.resize(node.n, None);
            for (id, waiter) in ids.iter().zip(&mine) {
                w[usize::from(*id)] = Some(waiter.clone());
            }
        }
        let doorbells = Rc::new(Doorbells {
            senders: senders.clone(),
            exec_of: node.exec_of.clone(),
            waiters: waiters.clone(),
            shares: ids.len() > 1,
        });
        let tasks: Vec<_> = shards
            .into_iter()
            .zip(mine)
            .map(|(begin, waiter)| {
                let id = begin.id();
                let shard = run_shard::<F, M>(node.clone(), begin, waiter, doorbells.clone());
                let died = reporter.tx.clone();
                let (node, doorbells) = (node.clone(), doorbells.clone());
                glommio::spawn_local(async move {
                    // Caught here, where it happened: the executor's main
                    // task may be waiting on another shard, which may wait
                    // on this one forever.
                    match AssertUnwindSafe(shard).catch_unwind().await {
                        Ok(ended) => Some(ended),
                        Err(panic) => {
                            let message = format!("panicked: {}", panic_message(&*panic));
                            let _ = died.send(Report::Died {
                                shard: Some(id),
                                message,
                            });
                            // Every other shard of the node stops too (one
                            // may wait on this one forever), so that their
                            // executors end.
                            node.aborted.store(true, Ordering::SeqCst);
                            for s in &node.local {
                                doorbells.wake_quietly(usize::from(*s));
                            }
                            None
                        }
                    }
                })
            })
            .collect();
        ran |= !tasks.is_empty();
        let mut outputs = Vec::with_capacity(tasks.len());
        let mut handoffs = Vec::new();
        let mut keeps = Vec::new();
        let mut checkpoints = Vec::new();
        for t in tasks {
            // A shard panicked: the driver knows, and every shard of the
            // node stops (`Node::aborted`); this executor ends.
            let Some((id, output, departed)) = t.await else {
                break 'rounds;
            };
            outputs.push((id, output));
            match departed {
                Some(Departed::Leaves(h)) => handoffs.push(*h),
                Some(Departed::Stays(shard, writer)) => {
                    keeps.push((id, shard.epoch(), shard.layout().placed()));
                    if node.opts.durable.is_some() {
                        checkpoints.push(shard.checkpoint());
                    }
                    kept.push((shard, writer));
                }
                None => {}
            }
        }
        // The listeners of the shards that left (those staying keep theirs
        // for the next round): left open, each would take a share of the
        // port's new connections and turn them away.
        crate::server::close_idle_listeners();
        // The tasks the shards cancelled (their links) are dropped as the
        // executor runs them once more: their sockets close then (a read
        // or write parked in the ring is cancelled at the next round's
        // first pass of the reactor; nothing of this round reads them).
        for _ in 0..CANCELLED_PASSES {
            futures_lite::future::yield_now().await;
        }
        drop(node);
        let ended = Report::Ended {
            peer,
            outputs,
            handoffs,
            kept: keeps,
            checkpoints,
        };
        if reporter.tx.send(ended).is_err() {
            break;
        }
    }
    // The shards kept from the last round (after a failure between rounds)
    // close their logs while the executor still runs: a file's close is
    // an io_uring operation too, never sent once the executor ended.
    kept.clear();
    if ran {
        crate::server::close_listeners();
        // Before the thread ends, once: what a cancelled task held (a
        // socket, a listener) is closed by the time the driver joined it.
        settle().await;
    }
}

/// The executor's next round, or `None` once the driver is gone: polled,
/// so that the executor's other tasks run meanwhile, at first often (a
/// round change takes milliseconds) and then at most every
/// [`BETWEEN_ROUNDS_POLL_MAX`] (a node whose shards all left may wait for
/// the rest of the run).
async fn next_plan<M>(plans: &mpsc::Receiver<Plan<M>>) -> Option<Plan<M>> {
    let waiting = std::time::Instant::now();
    let mut pause = Duration::from_micros(100);
    loop {
        match plans.try_recv() {
            Ok(plan) => return Some(plan),
            Err(mpsc::TryRecvError::Disconnected) => return None,
            Err(mpsc::TryRecvError::Empty) => {
                glommio::timer::sleep(pause).await;
                // A round change (a checkpoint, the join) makes the next
                // round a millisecond late at most while it takes less
                // than `BETWEEN_ROUNDS_SOON`, 20 ms at most after.
                pause = if waiting.elapsed() < BETWEEN_ROUNDS_SOON {
                    (pause * 2).min(Duration::from_millis(1))
                } else {
                    BETWEEN_ROUNDS_POLL_MAX
                };
            }
        }
    }
}

/// An executor waiting this long for its next round looks less often.
const BETWEEN_ROUNDS_SOON: Duration = Duration::from_secs(2);
/// How long an executor waiting for its next round sleeps at most between
/// looks.
const BETWEEN_ROUNDS_POLL_MAX: Duration = Duration::from_millis(20);

/// Passes an executor makes after its round's shards ended, so that the
/// tasks they cancelled run once more and drop what they held.
const CANCELLED_PASSES: usize = 4;

/// What every shard of a round on this node shares, whichever executor
/// runs it.
pub(crate) struct Node<M> {
    app: Arc<App>,
    opts: Options,
    links: Arc<Links<crate::Envelope>>,
    make: M,
    /// Local shards that have nothing left to do.
    done: Arc<AtomicUsize>,
    /// Local shards stopped for a handover, their batches written.
    paused: Arc<AtomicUsize>,
    /// The layout the shards stopped at a handover with.
    paused_layout: Mutex<Option<Layout>>,
    clock: Clock,
    /// Shards of the whole run (every node).
    n: usize,
    /// This node's shards, in order.
    local: Vec<ShardId>,
    /// Per shard of the run, the executor (its id in the channel mesh)
    /// that runs it here; `u16::MAX` for a shard on another node.
    exec_of: Arc<[u16]>,
    /// `Some(this node)`: a shard that stops for a handover and stays here
    /// is kept in memory for the next round, not handed off.
    keep_on: Option<u16>,
    /// A shard of the round panicked: every other one stops.
    aborted: Arc<AtomicBool>,
}

/// Starts a shard of the round (its frontend, links to other nodes, log)
/// and runs its loop as a task of the current executor; returns its
/// frontend's output and, if it stopped for a handover, the shard kept or
/// its hand-off.
async fn run_shard<F, M>(
    node: Arc<Node<M>>,
    begin: Begin,
    waiter: Waiter,
    doorbells: Rc<Doorbells>,
) -> (ShardId, Result<F::Output, Error>, Option<Departed>)
where
    F: Frontend,
    M: Fn(&mut Shard) -> F + Send + Sync + 'static,
{
    let opts = &node.opts;
    let mut log_writer = None;
    let mut shard = match begin {
        Begin::Kept(mut shard, writer) => {
            log_writer = writer.map(|w| *w);
            // It stopped at the last round's end and stays on this node.
            shard.stay();
            *shard
        }
        Begin::Start(Start::Resume(h)) => {
            let id = h.shard();
            match Shard::take_over(node.app.clone(), opts.engine.clone(), *h) {
                Ok(s) => s,
                Err(e) => {
                    let e = Error::Shard {
                        shard: usize::from(id),
                        message: format!("cannot rebuild it from its hand-off: {e}"),
                    };
                    return (id, Err(e), None);
                }
            }
        }
        Begin::Start(Start::New(id)) => {
            let mut shard = Shard::new(node.app.clone(), opts.engine.clone(), id, node.n as u16);
            if opts.engine.pause_at_handover
                && let Some(run) = &opts.cluster
            {
                // The run's layout, so that a handover to another node is
                // decided (a one-node layout refuses it).
                shard.set_layout(run.layout().clone());
            }
            shard
        }
    };
    let id = shard.id();
    let frontend = (node.make)(&mut shard);
    let metrics = opts.metrics.as_ref().map(|m| m.of(id).clone());
    let remote = match &opts.cluster {
        Some(run) if run.is_cluster() => {
            match remote::Remote::connect(run.clone(), id, node.links.clone(), waiter.clone(), metrics.clone()).await {
                Ok(r) => Some(r),
                Err(e) => {
                    run.failure.fail(e);
                    let output = frontend.finish(&shard);
                    return (id, Ok(output), None);
                }
            }
        }
        _ => None,
    };
    let durable = match &opts.durable {
        Some(d) => Some(
            durable::ShardDurable::start(
                d.clone(),
                &mut shard,
                log_writer,
                waiter.clone(),
                metrics.clone(),
                opts.on_background,
            )
            .await,
        ),
        None => None,
    };
    let mesh = Mesh {
        links: node.links.clone(),
        n: node.n,
        n_local: node.local.len(),
        shares_executor: doorbells.shares,
        doorbells,
        done: node.done.clone(),
        paused: node.paused.clone(),
        remote,
        run: opts.cluster.clone(),
        aborted: node.aborted.clone(),
    };
    let (output, departed) = ShardLoop::new(
        shard,
        frontend,
        mesh,
        durable,
        metrics,
        waiter,
        node.clock,
        opts.idle_poll_us,
        opts.on_quiet,
        node.keep_on,
    )
    .run()
    .await;
    if let Some(d) = &departed {
        let layout = match d {
            Departed::Leaves(h) => h.layout().placed(),
            Departed::Stays(s, _) => s.layout().placed(),
        };
        node.paused_layout.lock().expect("layout lock").get_or_insert(layout);
    }
    (id, Ok(output), departed)
}

/// How a shard wakes a parked peer of this node: directly when both run on
/// this executor, else by a doorbell to the peer's executor (glommio's
/// channel mesh, which wakes a sleeping thread).
pub(crate) struct Doorbells {
    senders: Rc<Senders<u16>>,
    /// Per shard of the run, its executor here (`u16::MAX`: another node).
    exec_of: Arc<[u16]>,
    /// Per shard of the run, the waker of this executor's loops.
    waiters: Rc<RefCell<Vec<Option<Waiter>>>>,
    /// Whether this executor runs more than one shard.
    pub(crate) shares: bool,
}

impl Doorbells {
    /// Wakes local shard `to` (known to be parked).
    pub(crate) fn ring(&self, to: usize) {
        // The peer's executor is gone: the engine cannot go on without it.
        if let Err(err) = self.try_ring(to) {
            panic!("cannot wake local shard {to}: {err}");
        }
    }

    /// Wakes local shard `to` whether parked or not, and whatever became
    /// of its executor (a shard's panic stops the others).
    fn wake_quietly(&self, to: usize) {
        let _ = self.try_ring(to);
    }

    /// Wakes local shard `to`: an error if its executor is gone.
    fn try_ring(&self, to: usize) -> Result<(), glommio::GlommioError<u16>> {
        let e = usize::from(self.exec_of[to]);
        if e == self.senders.peer_id() {
            if let Some(w) = &self.waiters.borrow()[to] {
                wake(w);
            }
            return Ok(());
        }
        match self.senders.try_send_to(e, to as u16) {
            // A full queue: the executor has a thousand rings unread (a ring
            // is sent once per park); this shard re-checks its links at its
            // park's timer at the latest.
            Ok(()) | Err(glommio::GlommioError::WouldBlock(_)) => Ok(()),
            Err(err) => Err(err),
        }
    }
}

/// Wakes this executor's shard loops as their doorbells ring (a ring left
/// from an earlier round may wake a loop for nothing).
async fn doorbell(rx: ConnectedReceiver<u16>, waiters: Rc<RefCell<Vec<Option<Waiter>>>>) {
    while let Some(s) = rx.recv().await {
        if let Some(Some(w)) = waiters.borrow().get(usize::from(s)) {
            wake(w);
        }
    }
}
