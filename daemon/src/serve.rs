//! Serving: claim the addresses, recover, serve until a signal or a
//! failure, stop gracefully; in a cluster, a round per membership.
//!
//! SIGTERM and SIGINT only set a flag: every shard's frontend sees it,
//! refuses new requests (`SHUTTING_DOWN`), finishes those in flight, and the
//! run ends once every shard is quiet and its log flushed.

use crate::settings::{Fsync, Settings, resolve_all};
use crate::spare::{SpareFront, SpareServer};
use crate::{Extension, Program, Start};
use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use styx_engine::{App, Config, Durability, Shard, ShardId};
use styx_runtime::cluster::{Control, Plan, Run, Spec};
use styx_runtime::durable::Durable;
use styx_runtime::server::{ServerShared, TcpFrontend};
use styx_runtime::{Disk, Metrics, Options, ShardMetrics};
use styx_storage::DataDir;
use styx_storage::wal::{self, FsyncMode};

/// How many times a daemon picks free ports again when another process
/// took one between the pick and the claim.
const PICKS: usize = 20;

/// Resolves `named` (`--listen`, then `--metrics` if given) and claims
/// them. A port 0 is picked free by a probe listener that must close
/// before the claim, and the kernel may hand the same port to another
/// process in between (daemons started side by side on port 0 met this):
/// then the ports are picked again. A port the user named is claimed once.
fn claim_addresses(
    named: &[&str],
    data_dir: &std::path::Path,
) -> Result<(SocketAddr, Option<SocketAddr>, Vec<crate::claim::Claim>), String> {
    let picked: Vec<bool> = named
        .iter()
        .map(|a| {
            a.to_socket_addrs()
                .ok()
                .and_then(|mut r| r.next())
                .is_some_and(|r| r.port() == 0)
        })
        .collect();
    let mut attempt = 0;
    'pick: loop {
        attempt += 1;
        let resolved = resolve_all(named)?;
        let listen = resolved[0];
        let metrics_addr = resolved.get(1).copied();
        if metrics_addr == Some(listen) {
            return Err(format!("--listen and --metrics name the same address, {listen}"));
        }
        let mut claims = Vec::with_capacity(resolved.len());
        for (i, (&addr, what)) in resolved.iter().zip(["--listen", "--metrics"]).enumerate() {
            match crate::claim::claim(&[(what, addr)], data_dir) {
                Ok(claim) => claims.push(claim),
                Err(e) if picked[i] && attempt < PICKS => {
                    tracing::debug!(
                        attempt,
                        "{e}: a port picked free was taken before it was claimed; picking again"
                    );
                    continue 'pick;
                }
                Err(e) => return Err(e),
            }
        }
        return Ok((listen, metrics_addr, claims));
    }
}

/// Starts, recovers, serves until a signal, then stops gracefully: new
/// requests are refused, those in flight finish, the log is flushed.
///
/// A node of a cluster runs in rounds: survey its disk, join the others
/// (agreeing on the snapshot to restore and the epoch to replay to), serve,
/// and when a node fails, stop its shards and start the next round from
/// its disk. A handover (`__handover`, `styx handover`) ends a round too:
/// every node checkpoints the shards it runs next and the next round
/// starts with the new layout (`styx_runtime::run_rounds`). Clients of the
/// round that ended are disconnected; they reconnect and retry
/// (exactly-once).
pub fn run<E: Extension>(program: &Program, app: Arc<App>, settings: Settings, extension: &E) -> Result<(), String> {
    let started = Instant::now();
    let mut named = vec![settings.listen.as_str()];
    named.extend(settings.metrics.as_deref());
    let (listen, metrics_addr, _claim) = claim_addresses(&named, &settings.data_dir)?;
    let (spec, node) = match &settings.cluster {
        Some((spec, node)) => (spec.clone(), *node),
        None => (Spec::single(settings.shards, listen), 0),
    };
    let local = spec.shards_of(node);
    raise_file_limit(
        settings.limits.connections_max,
        local.len(),
        usize::from(spec.n_shards()),
    );
    let dir = Arc::new(DataDir::open(&settings.data_dir).map_err(|e| e.to_string())?);
    if spec.joins_later(node) {
        // Its directory holds nothing until it joins (a preload there
        // would be a snapshot the others no longer keep): its shards come
        // from the others, handed over.
        tracing::info!(node, "this node joins the cluster later: nothing is preloaded here");
    } else {
        extension.prepare(&Start {
            app: &app,
            dir: &dir,
            shards: spec.n_shards(),
            local: local.clone(),
        })?;
    }
    let fsync = match settings.fsync {
        Fsync::Epoch => FsyncMode::Epoch,
        Fsync::None => FsyncMode::None,
    };
    let wal = wal::Options {
        fsync,
        ..wal::Options::default()
    };
    if settings.fsync == Fsync::None {
        tracing::warn!("fsync = none: acknowledged transactions can be lost in a crash of the machine");
    }
    let shutdown = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(signal, shutdown.clone()).map_err(|e| format!("signal handler: {e}"))?;
    }
    let daemon = Arc::new(Daemon {
        program_name: program.name.clone(),
        on_quiet: program.on_quiet,
        on_background: program.on_background,
        app: app.clone(),
        settings: settings.clone(),
        started,
        listen,
        metrics_addr,
        spec: spec.clone(),
        node,
        shutdown: shutdown.clone(),
        counters: Mutex::new(BTreeMap::new()),
        current: Mutex::new(None),
        spare: Mutex::new(None),
        spare_failed: Mutex::new(None),
        ready: AtomicUsize::new(0),
        first_round: AtomicUsize::new(0),
        spare_ready: AtomicBool::new(false),
    });
    announce(&daemon);
    match &settings.cluster {
        None => serve_alone(&daemon, dir, wal, &local)?,
        Some(_) => serve_in_rounds(&daemon, dir, wal)?,
    }
    tracing::info!("stopped");
    Ok(())
}

/// Files a node may open: its client connections (two each on a spare,
/// which keeps a handle to shut each down), and per local shard its log
/// segments, snapshot files and a data link to every shard of the
/// cluster; the HTTP endpoint's connections; listeners, the control
/// plane's connections, the directory's own.
fn files_needed(connections_max: usize, local: usize, shards: usize) -> usize {
    2 * connections_max + styx_runtime::server::HTTP_CONNECTIONS_MAX + local * (16 + 2 * shards) + 256
}

/// Raises the process's limit on open files to its hard limit (the usual
/// soft limit, 1 024, is the default `connections_max` alone: clients
/// that hold them all would leave none for the logs, snapshots and data
/// links, and a round's links would fail), and warns when even that is
/// below what `connections_max` and the node's shards may need.
fn raise_file_limit(connections_max: usize, local: usize, shards: usize) {
    use rlimit::Resource;
    let Ok((mut soft, hard)) = rlimit::getrlimit(Resource::NOFILE) else {
        return;
    };
    if soft < hard && rlimit::setrlimit(Resource::NOFILE, hard, hard).is_ok() {
        tracing::debug!(from = soft, to = hard, "raised the limit on open files");
        soft = hard;
    }
    let needed = files_needed(connections_max, local, shards);
    if soft < needed as u64 {
        tracing::warn!(
            open_files_max = soft,
            needed,
            connections_max,
            "the process may open fewer files than connections_max and this node's shards may need: clients holding every connection would fail the node's logs, snapshots and links; raise the hard limit (ulimit -Hn, LimitNOFILE=) or lower connections_max"
        );
    }
}

/// A daemon without a cluster: one node, its shards never change nodes;
/// it recovers and serves once.
fn serve_alone(daemon: &Arc<Daemon>, dir: Arc<DataDir>, wal: wal::Options, local: &[ShardId]) -> Result<(), String> {
    let surveyed = Durable::survey(dir, local.to_vec(), wal).map_err(|e| format!("recovery: {e}"))?;
    let run = Arc::new(Run::single(daemon.spec.clone(), Plan::of(&[surveyed.survey()])?));
    let (durable, recovered) = surveyed
        .start(run.plan, run.clone())
        .map_err(|e| format!("recovery: {e}"))?;
    for t in &recovered.truncated {
        tracing::warn!("torn log tail cut at start: {t}");
    }
    tracing::info!(
        data_dir = %daemon.settings.data_dir.display(),
        snapshot_epoch = ?recovered.snapshot_epoch,
        replay_batches = recovered.replay_batches,
        recovered_epoch = recovered.recovered_epoch,
        since_start_ms = daemon.started.elapsed().as_secs_f64() * 1e3,
        "logs read; the shards restore the snapshot and replay"
    );
    let mut opts = daemon.options(&run);
    opts.durable = Some(durable);
    opts.cluster = Some(run.clone());
    styx_runtime::run(daemon.app.clone(), opts, daemon.frontends()).map_err(|e| e.to_string())?;
    run.close();
    daemon.failure()
}

/// A node of a cluster: rounds until a signal. Each `run_rounds` recovers
/// from the data directory, joins, serves, and makes the handovers the
/// shards decide; a failed run (a node lost, a handover cut short) starts
/// the next from the disks.
fn serve_in_rounds(daemon: &Arc<Daemon>, dir: Arc<DataDir>, wal: wal::Options) -> Result<(), String> {
    let mut control = Control::start(daemon.spec.clone(), daemon.node, app_fingerprint(&daemon.app))?;
    let disk = Disk {
        dir,
        wal,
        fail_checkpoint: None,
    };
    let mut attempt = 0u64;
    let mut quick_failures = 0u32;
    loop {
        attempt += 1;
        let joined = Instant::now();
        tracing::info!(node = daemon.node, attempt, "joining the cluster");
        let options = {
            let daemon = daemon.clone();
            move |run: Arc<Run>| {
                if run.local_shards().is_empty() {
                    // A spare this round: its client port answers without
                    // an engine (nothing of these options is used).
                    daemon.serve_spare(&run);
                    return Options::default();
                }
                daemon.stop_spare();
                tracing::info!(
                    node = daemon.node,
                    layout = ?run.layout().placed(),
                    shards = ?run.local_shards(),
                    "serving"
                );
                daemon.options(&run)
            }
        };
        let rounds = styx_runtime::run_rounds(
            daemon.app.clone(),
            &mut control,
            daemon.spec.layout(),
            options,
            daemon.frontends(),
            &daemon.shutdown,
            HANDOVER_TIMEOUT,
            Some(disk.clone()),
        );
        if let Err(e) = daemon.failure() {
            daemon.stop_spare();
            return Err(e);
        }
        let rounds = match rounds {
            Ok(rounds) => rounds,
            Err(_) if daemon.shutdown.load(Ordering::Relaxed) => break,
            Err(e) => {
                daemon.stop_spare();
                return Err(e.to_string());
            }
        };
        if rounds.left {
            tracing::warn!(
                node = daemon.node,
                "this node left the cluster (styx node remove): it serves nothing more and stops; the other nodes keep it out for good (its id cannot join again: a node joining that the cluster file does not list is not built)"
            );
            break;
        }
        if daemon.shutdown.load(Ordering::Relaxed) {
            break;
        }
        match rounds.failed {
            Some(reason) => tracing::warn!(
                attempt,
                served_s = joined.elapsed().as_secs_f64(),
                "the cluster lost a node ({reason}); recovering from the log"
            ),
            None => break,
        }
        quick_failures = match joined.elapsed() < QUICK_FAILURE {
            true => quick_failures + 1,
            false => 0,
        };
        if let Some(pause) = retry_pause(quick_failures) {
            tracing::warn!(
                attempt,
                quick_failures,
                pause_ms = pause.as_millis() as u64,
                "the cluster failed again within {QUICK_FAILURE:?}: pausing before the next recovery"
            );
            let until = Instant::now() + pause;
            while Instant::now() < until && !daemon.shutdown.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    daemon.stop_spare();
    Ok(())
}

/// A run that fails within this of its join is a quick failure: from the
/// second in a row, the daemon pauses before it recovers again
/// ([`retry_pause`]), so a failure that repeats at once (a peer that keeps
/// dying, a handover that cannot be made and is decided again by every
/// replay) does not spin it through recoveries; the first recovers at once.
const QUICK_FAILURE: Duration = Duration::from_secs(10);
const RETRY_PAUSE_MIN: Duration = Duration::from_millis(100);
/// The longest pause. Nodes count their quick failures apart (one started
/// again counts none), so they pause for different times and join apart
/// by as much: a node whose join ended waits for its peers' (their first
/// heartbeat, 5 s; their data links, 10 s), and with pauses of up to 5 s
/// a loaded cluster failed every run for that, pausing again each time
/// (seen: 35 recoveries in a row, never serving). A second keeps the
/// nodes within reach of each other and still stops a spin.
const RETRY_PAUSE_MAX: Duration = Duration::from_secs(1);

/// The pause after `quick_failures` quick failures in a row: none for the
/// first, then 100 ms doubling up to 1 s.
fn retry_pause(quick_failures: u32) -> Option<Duration> {
    let doublings = quick_failures.checked_sub(2)?;
    Some(
        RETRY_PAUSE_MIN
            .saturating_mul(1 << doublings.min(16))
            .min(RETRY_PAUSE_MAX),
    )
}

/// How long a handover's transfer may take before the run fails (and the
/// cluster recovers from its logs).
const HANDOVER_TIMEOUT: Duration = Duration::from_secs(60);

/// What a daemon's rounds share.
struct Daemon {
    program_name: String,
    on_quiet: Option<fn()>,
    on_background: Option<fn()>,
    app: Arc<App>,
    settings: Settings,
    started: Instant,
    listen: SocketAddr,
    metrics_addr: Option<SocketAddr>,
    spec: Spec,
    node: u16,
    shutdown: Arc<AtomicBool>,
    /// The counters of every shard that ran here, kept across rounds (a
    /// shard handed away and back goes on counting).
    counters: Mutex<BTreeMap<ShardId, Arc<ShardMetrics>>>,
    /// The round being served: its frontends answer from it.
    current: Mutex<Option<Arc<ServerShared>>>,
    /// While the node runs no shard (a spare), its client port's server.
    spare: Mutex<Option<SpareFront>>,
    /// Why the spare's client port could not listen.
    spare_failed: Mutex<Option<String>>,
    /// Shards whose listener started, and the first round's local shards
    /// (0 until it starts): the daemon announces itself once every one
    /// listens.
    ready: AtomicUsize,
    first_round: AtomicUsize,
    /// The spare's client port listens: announced too.
    spare_ready: AtomicBool,
}

impl Daemon {
    /// The counters of `local`, in order: each shard's own since the daemon
    /// started.
    fn metrics_of(&self, local: &[ShardId]) -> Arc<Metrics> {
        let mut counters = self.counters.lock().expect("counters");
        Arc::new(Metrics {
            shards: local.iter().map(|s| counters.entry(*s).or_default().clone()).collect(),
            ids: local.to_vec(),
        })
    }

    /// A round in which this node runs no shard: its client port answers
    /// MAP, LAYOUT and STATUS from it and refuses requests
    /// (`crate::spare`). A port that cannot listen stops the daemon.
    fn serve_spare(&self, run: &Run) {
        let layout = run.layout();
        let ran_here: Vec<ShardId> = self.counters.lock().expect("counters").keys().copied().collect();
        let (wire, left) = wire_layout(run);
        let server = Arc::new(SpareServer {
            app: self.app.clone(),
            name: self.server_name(),
            map: partition_map(&self.spec, self.node, &self.app),
            layout: wire,
            left,
            metrics: self.metrics_of(&ran_here),
            started: self.started,
            shutdown: self.shutdown.clone(),
        });
        tracing::info!(node = self.node, layout = ?layout.placed(), "a spare: no shard runs here");
        let mut spare = self.spare.lock().expect("spare");
        if let Some(front) = &*spare {
            front.update(server);
            return;
        }
        match SpareFront::start(self.listen, self.metrics_addr, server, self.settings.limits.clone()) {
            Ok(front) => {
                *spare = Some(front);
                self.spare_ready.store(true, Ordering::Release);
            }
            Err(e) => {
                let why = format!("a spare cannot listen on {} (or its metrics port): {e}", self.listen);
                tracing::error!("{why}");
                *self.spare_failed.lock().expect("spare failure") = Some(why);
                self.shutdown.store(true, Ordering::SeqCst);
            }
        }
    }

    /// Closes the spare's client port, if it is open (the node runs shards
    /// again, or stops).
    fn stop_spare(&self) {
        let front = self.spare.lock().expect("spare").take();
        if let Some(front) = front {
            front.stop();
        }
    }

    fn server_name(&self) -> String {
        format!(
            "{} {} ({})",
            self.program_name,
            env!("CARGO_PKG_VERSION"),
            self.app.name()
        )
    }

    /// A round's options and its server (what its frontends share, made
    /// current): `run`'s local shards, answering LAYOUT with its layout.
    fn options(&self, run: &Run) -> Options {
        let (wire, left) = wire_layout(run);
        let settings = &self.settings;
        let local = run.local_shards().to_vec();
        let n_local = local.len();
        let metrics = self.metrics_of(&local);
        let shared = Arc::new(ServerShared {
            app: self.app.clone(),
            limits: settings.limits.clone(),
            metrics: metrics.clone(),
            shutdown: self.shutdown.clone(),
            connections: AtomicUsize::new(0),
            recovering: AtomicUsize::new(n_local),
            started: self.started,
            server_name: self.server_name(),
            node: self.node,
            first_shard: local[0],
            map: partition_map(&self.spec, self.node, &self.app),
            layout: wire,
            left,
            failure: Default::default(),
            rates: styx_runtime::server::Rates::new(&metrics),
        });
        *self.current.lock().expect("current") = Some(shared);
        // The first round's shards are the directory's (a handover may have
        // moved some since the cluster file was written).
        let _ = self
            .first_round
            .compare_exchange(0, n_local, Ordering::AcqRel, Ordering::Acquire);
        let engine = Config {
            epoch_txns_max: settings.epoch_txns_max,
            epoch_gather_us: settings.epoch_gather_us,
            durability: Durability::Log,
            snapshot_interval_us: settings.snapshot_interval_ms * 1_000,
            move_share_entities: settings.move_share_entities,
            move_share_min_entities: settings.move_share_min_entities,
            move_share_per_ms: settings.move_share_per_ms,
            ..Config::default()
        };
        // What the executors run on, for the tuning below: a node that was
        // a spare started its executors when handed its first shards, a
        // core each (`run_rounds`), for those it may be handed after.
        let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
        let threads = match settings.threads {
            Some(t) => usize::from(t),
            None if self.spare_ready.load(Ordering::Acquire) => cores,
            None => styx_runtime::threads_default(n_local).min(n_local),
        };
        // The other nodes on this machine run their shards on its cores too
        // (their threads by their defaults: their settings are not known here).
        let neighbour_threads: usize = self
            .spec
            .neighbours(self.node)
            .filter(|n| n.shards > 0)
            .map(|n| styx_runtime::threads_default(usize::from(n.shards)))
            .sum();
        tracing::info!(listen = %self.listen, shards = n_local, threads, "serving");
        Options {
            shards: n_local as u16,
            engine,
            metrics: Some(metrics),
            // As asked, else the runtime's default: the node's first
            // shards' count, or — a spare handed its first — a thread per
            // core, for the shards it may be handed after.
            threads: settings.threads.map(usize::from),
            idle_poll_us: settings
                .idle_poll_us
                .unwrap_or_else(|| styx_runtime::idle_poll_default(threads + neighbour_threads)),
            spin_before_park: styx_runtime::spin_before_park_default(threads + neighbour_threads),
            on_quiet: self.on_quiet,
            on_background: self.on_background,
            ..Options::default()
        }
    }

    /// Each shard's frontend: its listener on the client port (the first
    /// shard's also on the metrics port), answering from the current
    /// round's server.
    fn frontends(self: &Arc<Self>) -> impl Fn(&mut Shard) -> TcpFrontend + Clone + Send + Sync + 'static {
        let daemon = self.clone();
        move |shard: &mut Shard| {
            let shared = daemon
                .current
                .lock()
                .expect("current")
                .clone()
                .expect("a round's server");
            let http = if shard.id() == shared.first_shard {
                daemon.metrics_addr
            } else {
                None
            };
            match TcpFrontend::start(shard, shared.clone(), daemon.listen, http) {
                Ok(frontend) => {
                    daemon.ready.fetch_add(1, Ordering::AcqRel);
                    frontend
                }
                Err(e) => {
                    // Every shard stops; the daemon reports why.
                    shared.fail(e.to_string());
                    TcpFrontend::idle(shard, shared.clone())
                }
            }
        }
    }

    /// Why the last round's server stopped, if it could not serve.
    fn failure(&self) -> Result<(), String> {
        if let Some(why) = self.spare_failed.lock().expect("spare failure").clone() {
            return Err(why);
        }
        match self.current.lock().expect("current").as_ref().and_then(|s| s.failure()) {
            Some(reason) => Err(reason),
            None => Ok(()),
        }
    }
}

/// Announces the daemon once every shard of its first round listens; tests
/// and scripts read this line, the same for every daemon whatever its name.
fn announce(daemon: &Arc<Daemon>) {
    let daemon = daemon.clone();
    std::thread::spawn(move || {
        loop {
            let expected = daemon.first_round.load(Ordering::Acquire);
            if (expected > 0 && daemon.ready.load(Ordering::Acquire) >= expected)
                || daemon.spare_ready.load(Ordering::Acquire)
            {
                break;
            }
            if daemon.shutdown.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let m = daemon.metrics_addr.map_or("off".to_string(), |a| a.to_string());
        println!(
            "styxd listening on {} (metrics {m}), data in {}",
            daemon.listen,
            daemon.settings.data_dir.display()
        );
        use std::io::Write;
        let _ = std::io::stdout().flush();
    });
}

/// A hash of what every node of a cluster must run alike: operators, their
/// partitions, their functions in order.
fn app_fingerprint(app: &App) -> u64 {
    let mut h = styx_engine::stable_hash(app.name().as_bytes());
    for (_, op) in app.operators() {
        h = styx_engine::mix64(h ^ styx_engine::stable_hash(op.name().as_bytes()) ^ u64::from(op.partitions()));
        for f in op.functions() {
            h = styx_engine::mix64(h ^ styx_engine::stable_hash(f.name().as_bytes()));
        }
    }
    h
}

/// What LAYOUT and MEMBERS answer in `run`: which node runs each shard,
/// and the nodes gone from the cluster (the join's: the layout's, and
/// those the nodes' records name; ascending).
fn wire_layout(run: &Run) -> (styx_net::Layout, Vec<u16>) {
    let layout = run.layout();
    let wire = styx_net::Layout {
        version: layout.version(),
        node_of: (0..layout.n_shards()).map(|s| layout.node_of(s)).collect(),
    };
    (wire, run.left_nodes())
}

/// What MAP answers on `node` of `spec`: its nodes' ranges number the
/// shards in order (LAYOUT answers where a cluster file placed them).
fn partition_map(spec: &Spec, node: u16, app: &App) -> styx_net::Map {
    styx_net::Map {
        node,
        shards: spec.n_shards(),
        nodes: spec
            .nodes
            .iter()
            .map(|n| styx_net::MapNode {
                first_shard: spec.first_of(n.id) as u16,
                shards: n.shards,
                client: n.client.to_string(),
            })
            .collect(),
        operators: app
            .operators()
            .map(|(_, info)| styx_net::MapOperator {
                name: info.name().to_string(),
                partitions: info.partitions(),
            })
            .collect(),
        placed: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_failures_in_a_row_pause_doubling_to_a_cap() {
        let pauses: Vec<Option<Duration>> = (0..10).map(retry_pause).collect();
        let ms = |m| Some(Duration::from_millis(m));
        assert_eq!(
            pauses,
            [
                None,
                None,
                ms(100),
                ms(200),
                ms(400),
                ms(800),
                ms(1000),
                ms(1000),
                ms(1000),
                ms(1000)
            ]
        );
        assert_eq!(retry_pause(u32::MAX), ms(1000));
    }

    #[test]
    fn daemons_started_side_by_side_on_port_zero_all_claim_their_ports() {
        let _one = crate::claim::one_claiming_test_at_a_time();
        // Each thread is a daemon starting: it picks free ports, claims
        // them, holds them a moment and lets go, over and over. A port
        // picked by one and handed by the kernel to another before the
        // first claimed it must not fail either start.
        let dir = std::env::temp_dir();
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let dir = dir.clone();
                std::thread::spawn(move || {
                    for _ in 0..60 {
                        let (listen, metrics, claims) =
                            claim_addresses(&["127.0.0.1:0", "127.0.0.1:0"], &dir).expect("a start claims its ports");
                        assert_ne!(Some(listen), metrics);
                        assert_eq!(claims.len(), 2);
                        std::thread::sleep(Duration::from_micros(200));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // A port the user named is not picked again: its claim fails at once.
        let named = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = named.local_addr().unwrap().to_string();
        let e = claim_addresses(&[addr.as_str()], &dir).unwrap_err();
        assert!(e.contains("already listens"), "{e}");
    }
}
