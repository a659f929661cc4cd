//! The daemon: settings, start-up (lock, recovery), serving, graceful stop.
//!
//! A user builds a daemon around their own functions by calling
//! [`main`] with their application:
//!
//! ```no_run
//! use std::sync::Arc;
//! use styx_engine::App;
//!
//! fn main() -> std::process::ExitCode {
//!     let mut app = App::new("hello");
//!     let greeter = app.operator("greeter", 16);
//!     app.function(greeter, "greet", |ctx, name: String| async move {
//!         let n = ctx.get::<u64>()?.unwrap_or(0) + 1;
//!         ctx.put(&n)?;
//!         Ok(format!("hello {name}, #{n}"))
//!     });
//!     styx_tools::daemon::main(Arc::new(app))
//! }
//! ```
//!
//! Settings come from a TOML file (`--config`), then `STYX_*` environment
//! variables, then flags, each overriding the one before; every setting has
//! an embedded default, so `styxd` alone serves on 127.0.0.1:7400 with its
//! data in `./data`.
//!
//! `--preload WORKLOAD` (with the workload's knobs, e.g. `--keys`) writes a
//! built-in workload's initial state into a fresh data directory as its
//! first snapshot before serving (`styx_runtime::preload`), so benchmarks
//! against the daemon start from the same state as in-process ones, and a
//! crash right after start keeps it. On a directory that already holds
//! state, the preload is skipped if the directory came from the very same
//! preload (the same workload and knobs: a restart), and refused otherwise:
//! a benchmark's final check would compare against a state that is not the
//! one it assumes.

use crate::workloads::{self, Knobs, Visit};
use clap::Parser;
use serde::Deserialize;
use std::net::{SocketAddr, TcpListener as StdListener, ToSocketAddrs};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use styx_bench::runner::Workload;
use styx_engine::{App, Config, Durability};
use styx_runtime::cluster::{Control, Node, Plan, Run, Spec};
use styx_runtime::durable::Durable;
use styx_runtime::server::{ServerShared, TcpFrontend};
use styx_runtime::{Metrics, Options};
use styx_storage::DataDir;
use styx_storage::wal::{self, FsyncMode};

/// How the input log reaches the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Fsync {
    /// One fdatasync per epoch; replies wait for it (durable).
    Epoch,
    /// No fdatasync: UNSAFE, a machine crash loses acknowledged work. For
    /// experiments only.
    None,
}

/// How log lines are written to stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One line per event, coloured only when stderr is a terminal.
    Text,
    /// One JSON object per line (for log collectors).
    Json,
}

/// The settings file (every field optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSettings {
    pub data_dir: Option<PathBuf>,
    pub listen: Option<String>,
    pub metrics: Option<String>,
    pub shards: Option<u16>,
    pub fsync: Option<Fsync>,
    pub snapshot_interval_ms: Option<u64>,
    pub epoch_txns_max: Option<usize>,
    pub epoch_gather_us: Option<u64>,
    pub frame_len_max: Option<usize>,
    pub in_flight_max: Option<usize>,
    pub connections_max: Option<usize>,
    pub log: Option<String>,
    pub log_format: Option<LogFormat>,
    pub cluster: Option<PathBuf>,
    pub node_id: Option<u16>,
}

/// A cluster file: the nodes and the failure detector.
///
/// ```toml
/// heartbeat_ms = 100          # optional
/// failure_timeout_ms = 500    # optional
/// [[nodes]]
/// id = 0
/// peer = "127.0.0.1:7500"     # control plane; shard i's data links on port + 1 + i
/// client = "127.0.0.1:7400"
/// shards = 1
/// ```
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterFile {
    pub heartbeat_ms: Option<u64>,
    pub failure_timeout_ms: Option<u64>,
    pub nodes: Vec<ClusterNode>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterNode {
    pub id: u16,
    pub peer: String,
    pub client: String,
    pub shards: u16,
}

impl ClusterFile {
    /// Reads and checks a cluster file.
    pub fn load(path: &std::path::Path) -> Result<Spec, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let file: ClusterFile = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let addr = |what: &str, a: &str| -> Result<SocketAddr, String> {
            let r = a
                .to_socket_addrs()
                .map_err(|e| format!("{}: {what} address {a}: {e}", path.display()))?
                .next()
                .ok_or_else(|| format!("{}: {what} address {a} resolves to nothing", path.display()))?;
            if r.port() == 0 {
                return Err(format!("{}: {what} address {a} needs a port", path.display()));
            }
            Ok(r)
        };
        let mut nodes = Vec::with_capacity(file.nodes.len());
        for n in &file.nodes {
            nodes.push(Node {
                id: n.id,
                peer: addr("peer", &n.peer)?,
                client: addr("client", &n.client)?,
                shards: n.shards,
            });
        }
        let spec = Spec {
            nodes,
            heartbeat: Duration::from_millis(file.heartbeat_ms.unwrap_or(100)),
            failure_timeout: Duration::from_millis(file.failure_timeout_ms.unwrap_or(500)),
        };
        spec.validate().map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(spec)
    }
}

/// `styxd`: the Styx engine as a local daemon.
#[derive(Debug, Parser)]
#[command(name = "styxd", version, about, long_about = None)]
pub struct Args {
    /// A TOML file with any of the settings below (flags and environment
    /// variables override it).
    #[arg(long, env = "STYX_CONFIG")]
    pub config: Option<PathBuf>,
    /// Where the input log and snapshots live [default: ./data]. Locked
    /// while the daemon runs.
    #[arg(long, env = "STYX_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Address for clients [default: 127.0.0.1:7400]; port 0 picks a free one.
    #[arg(long, env = "STYX_LISTEN")]
    pub listen: Option<String>,
    /// Address for /metrics and /health [default: 127.0.0.1:7401]; "off"
    /// disables. /health answers 503 "recovering" until every shard has
    /// loaded its snapshot and replayed its log (styxd listens, and queues
    /// requests, from the start), then "ok", and 503 "stopping" on SIGTERM.
    #[arg(long, env = "STYX_METRICS")]
    pub metrics: Option<String>,
    /// Shards, one per core [default: the number of CPUs]. A data directory
    /// keeps the shard count it was written with.
    #[arg(long, env = "STYX_SHARDS")]
    pub shards: Option<u16>,
    /// When the input log is made durable [default: epoch]. `none` is UNSAFE.
    #[arg(long, env = "STYX_FSYNC", value_enum)]
    pub fsync: Option<Fsync>,
    /// Milliseconds between incremental snapshots [default: 1000]; 0 disables.
    #[arg(long, env = "STYX_SNAPSHOT_INTERVAL_MS")]
    pub snapshot_interval_ms: Option<u64>,
    /// Transactions a shard seals into one epoch [default: 2000].
    #[arg(long, env = "STYX_EPOCH_TXNS_MAX")]
    pub epoch_txns_max: Option<usize>,
    /// Least microseconds between epoch starts [default: 0].
    #[arg(long, env = "STYX_EPOCH_GATHER_US")]
    pub epoch_gather_us: Option<u64>,
    /// Largest frame a client may send, bytes [default: 1 MiB + 4 KiB].
    #[arg(long, env = "STYX_FRAME_LEN_MAX")]
    pub frame_len_max: Option<usize>,
    /// Requests in flight per connection [default: 1024].
    #[arg(long, env = "STYX_IN_FLIGHT_MAX")]
    pub in_flight_max: Option<usize>,
    /// Client connections, all shards together [default: 1024].
    #[arg(long, env = "STYX_CONNECTIONS_MAX")]
    pub connections_max: Option<usize>,
    /// Log filter (tracing's env-filter syntax) [default: info].
    #[arg(long, env = "STYX_LOG")]
    pub log: Option<String>,
    /// Log line format [default: text].
    #[arg(long, env = "STYX_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// Run as one node of a cluster described by this TOML file (its nodes'
    /// addresses and shards, the failure detector); needs --node-id. The
    /// node's client address and shard count come from the file.
    #[arg(long, env = "STYX_CLUSTER")]
    pub cluster: Option<PathBuf>,
    /// This node's id in the cluster file.
    #[arg(long, env = "STYX_NODE_ID")]
    pub node_id: Option<u16>,
    /// Before serving, write this built-in workload's initial state into a
    /// fresh data directory (skipped on a restart of the same preload,
    /// refused on other state). The application served must be the
    /// workload's.
    #[arg(long, env = "STYX_PRELOAD", value_enum)]
    pub preload: Option<workloads::Name>,
    #[command(flatten)]
    pub knobs: Knobs,
}

/// The settings in force, after file < environment < flags < defaults.
#[derive(Debug, Clone)]
pub struct Settings {
    pub data_dir: PathBuf,
    pub listen: String,
    pub metrics: Option<String>,
    pub shards: u16,
    pub fsync: Fsync,
    pub snapshot_interval_ms: u64,
    pub epoch_txns_max: usize,
    pub epoch_gather_us: u64,
    pub limits: styx_net::Limits,
    pub log: String,
    pub log_format: LogFormat,
    /// The workload to preload, and its knobs.
    pub preload: Option<(workloads::Name, Knobs)>,
    /// The cluster this daemon is a node of, and its id there.
    pub cluster: Option<(Spec, u16)>,
}

impl Settings {
    pub fn resolve(args: Args) -> Result<Settings, String> {
        let file: FileSettings = match &args.config {
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
                toml::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))?
            }
            None => FileSettings::default(),
        };
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u16;
        let defaults = styx_net::Limits::default();
        let metrics = args.metrics.or(file.metrics).unwrap_or_else(|| "127.0.0.1:7401".into());
        let limits = styx_net::Limits {
            frame_len_max: args
                .frame_len_max
                .or(file.frame_len_max)
                .unwrap_or(defaults.frame_len_max),
            in_flight_max: args
                .in_flight_max
                .or(file.in_flight_max)
                .unwrap_or(defaults.in_flight_max),
            connections_max: args
                .connections_max
                .or(file.connections_max)
                .unwrap_or(defaults.connections_max),
        };
        limits.validate().map_err(|e| e.to_string())?;
        let cluster = match (args.cluster.or(file.cluster), args.node_id.or(file.node_id)) {
            (Some(path), Some(id)) => {
                let spec = ClusterFile::load(&path)?;
                if usize::from(id) >= spec.nodes.len() {
                    return Err(format!(
                        "--node-id {id}: {} has nodes 0..{}",
                        path.display(),
                        spec.nodes.len()
                    ));
                }
                Some((spec, id))
            }
            (Some(_), None) => return Err("--cluster needs --node-id".into()),
            (None, Some(_)) => return Err("--node-id needs --cluster".into()),
            (None, None) => None,
        };
        let mut shards = args.shards.or(file.shards).unwrap_or(cpus);
        let mut listen = args.listen.or(file.listen);
        if let Some((spec, id)) = &cluster {
            let node = &spec.nodes[usize::from(*id)];
            if args.shards.or(file.shards).is_some_and(|s| s != node.shards) {
                return Err(format!(
                    "--shards {shards}: the cluster file gives node {id} {} shards",
                    node.shards
                ));
            }
            shards = node.shards;
            if listen.as_ref().is_some_and(|l| resolve(l).ok() != Some(node.client)) {
                return Err(format!(
                    "--listen: the cluster file gives node {id} the client address {}",
                    node.client
                ));
            }
            listen = Some(node.client.to_string());
        }
        if shards == 0 || shards as usize > styx_engine::SHARDS_MAX {
            return Err(format!("--shards {shards}: between 1 and {}", styx_engine::SHARDS_MAX));
        }
        Ok(Settings {
            data_dir: args.data_dir.or(file.data_dir).unwrap_or_else(|| PathBuf::from("data")),
            listen: listen.unwrap_or_else(|| "127.0.0.1:7400".into()),
            metrics: (metrics != "off").then_some(metrics),
            shards,
            fsync: args.fsync.or(file.fsync).unwrap_or(Fsync::Epoch),
            snapshot_interval_ms: args.snapshot_interval_ms.or(file.snapshot_interval_ms).unwrap_or(1_000),
            epoch_txns_max: args.epoch_txns_max.or(file.epoch_txns_max).unwrap_or(2_000),
            epoch_gather_us: args.epoch_gather_us.or(file.epoch_gather_us).unwrap_or(0),
            limits,
            log: args.log.or(file.log).unwrap_or_else(|| "info".into()),
            log_format: args.log_format.or(file.log_format).unwrap_or(LogFormat::Text),
            preload: args.preload.map(|name| (name, args.knobs)),
            cluster,
        })
    }
}

/// Resolves an address; port 0 becomes a free port (every shard then binds
/// that same port with SO_REUSEPORT).
fn resolve(addr: &str) -> Result<SocketAddr, String> {
    let a = addr
        .to_socket_addrs()
        .map_err(|e| format!("address {addr}: {e}"))?
        .next()
        .ok_or_else(|| format!("address {addr} resolves to nothing"))?;
    if a.port() != 0 {
        return Ok(a);
    }
    let l = StdListener::bind(a).map_err(|e| format!("cannot find a free port on {a}: {e}"))?;
    l.local_addr().map_err(|e| e.to_string())
}

/// Runs a daemon serving `app` with settings from the command line,
/// environment and settings file; returns when stopped (SIGTERM/SIGINT).
pub fn main(app: Arc<App>) -> ExitCode {
    main_with_args(app, std::env::args().collect())
}

/// [`main`] with explicit command-line arguments (the first is the program).
pub fn main_with_args(app: Arc<App>, args: Vec<String>) -> ExitCode {
    let args = match Args::try_parse_from(args) {
        Ok(a) => a,
        Err(e) => e.exit(),
    };
    let settings = match Settings::resolve(args) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("styxd: {e}");
            return ExitCode::from(2);
        }
    };
    let filter = tracing_subscriber::EnvFilter::new(&settings.log);
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match settings.log_format {
        // Colour codes only for a person at a terminal, never into a file.
        LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => logs.json().with_ansi(false).init(),
    }
    match run(app, settings) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("styxd: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Starts, recovers, serves until a signal, then stops gracefully: new
/// requests are refused, those in flight finish, the log is flushed.
///
/// A node of a cluster runs in rounds: survey its disk, join the others
/// (agreeing on the snapshot to restore and the epoch to replay to), serve,
/// and when a node fails, stop its shards and start the next round from
/// its disk. Clients of the round that ended are disconnected; they
/// reconnect and retry (exactly-once).
pub fn run(app: Arc<App>, settings: Settings) -> Result<(), String> {
    let started = Instant::now();
    let listen = resolve(&settings.listen)?;
    let metrics_addr = settings.metrics.as_deref().map(resolve).transpose()?;
    let mut addrs = vec![("--listen", listen)];
    addrs.extend(metrics_addr.map(|a| ("--metrics", a)));
    let _claim = crate::claim::claim(&addrs, &settings.data_dir)?;
    let (spec, node) = match &settings.cluster {
        Some((spec, node)) => (spec.clone(), *node),
        None => (Spec::single(settings.shards, listen), 0),
    };
    let local = spec.shards_of(node);
    let n_local = local.len();
    let dir = Arc::new(DataDir::open(&settings.data_dir).map_err(|e| e.to_string())?);
    if let Some((name, knobs)) = &settings.preload {
        knobs.visit(
            *name,
            Preload {
                app: &app,
                dir: &dir,
                shards: spec.n_shards(),
                local: local.clone(),
            },
        )??;
    }
    let fsync = match settings.fsync {
        Fsync::Epoch => FsyncMode::Epoch,
        Fsync::None => FsyncMode::None,
    };
    let options = wal::Options {
        fsync,
        ..wal::Options::default()
    };
    if settings.fsync == Fsync::None {
        tracing::warn!("fsync = none: acknowledged transactions can be lost in a crash of the machine");
    }
    let metrics = Metrics::of_shards(local.start, n_local);
    let shutdown = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(signal, shutdown.clone()).map_err(|e| format!("signal handler: {e}"))?;
    }
    let mut control = match &settings.cluster {
        Some(_) => Some(Control::start(spec.clone(), node, app_fingerprint(&app))?),
        None => None,
    };
    let announced = Arc::new(AtomicBool::new(false));
    let mut round = 0u64;
    loop {
        round += 1;
        let surveyed = Durable::survey(dir.clone(), local.clone(), options).map_err(|e| format!("recovery: {e}"))?;
        let run = match &mut control {
            None => Arc::new(Run::single(spec.clone(), Plan::of(&[surveyed.survey()])?)),
            Some(c) => {
                tracing::info!(node, round, survey = ?surveyed.survey(), "joining the cluster");
                match c.join(surveyed.survey(), &shutdown)? {
                    Some(run) => Arc::new(run),
                    None => break,
                }
            }
        };
        let joined = Instant::now();
        let (durable, recovered) = surveyed
            .start(run.plan, run.clone())
            .map_err(|e| format!("recovery: {e}"))?;
        for t in &recovered.truncated {
            tracing::warn!("torn log tail cut at start: {t}");
        }
        tracing::info!(
            data_dir = %settings.data_dir.display(),
            snapshot_epoch = ?recovered.snapshot_epoch,
            replay_batches = recovered.replay_batches,
            recovered_epoch = recovered.recovered_epoch,
            "recovered"
        );
        let shared = Arc::new(ServerShared {
            app: app.clone(),
            limits: settings.limits.clone(),
            metrics: metrics.clone(),
            shutdown: shutdown.clone(),
            connections: AtomicUsize::new(0),
            recovering: AtomicUsize::new(n_local),
            started,
            server_name: format!("styxd {} ({})", env!("CARGO_PKG_VERSION"), app.name()),
            first_shard: local.start,
            map: partition_map(&spec, node, &app),
            failure: Default::default(),
            rates: styx_runtime::server::Rates::new(&metrics),
        });
        let engine = Config {
            epoch_txns_max: settings.epoch_txns_max,
            epoch_gather_us: settings.epoch_gather_us,
            durability: Durability::Log,
            snapshot_interval_us: settings.snapshot_interval_ms * 1_000,
            ..Config::default()
        };
        let opts = Options {
            shards: n_local as u16,
            engine,
            metrics: Some(metrics.clone()),
            durable: Some(durable),
            cluster: Some(run.clone()),
            ..Options::default()
        };
        // Announce once every shard listens; tests and scripts read this line.
        let ready = Arc::new(AtomicUsize::new(0));
        if !announced.load(Ordering::Acquire) {
            let ready = ready.clone();
            let announced = announced.clone();
            let data_dir = settings.data_dir.clone();
            std::thread::spawn(move || {
                while ready.load(Ordering::Acquire) < n_local {
                    std::thread::sleep(Duration::from_millis(2));
                }
                let m = metrics_addr.map_or("off".to_string(), |a| a.to_string());
                println!(
                    "styxd listening on {listen} (metrics {m}), data in {}",
                    data_dir.display()
                );
                use std::io::Write;
                let _ = std::io::stdout().flush();
                announced.store(true, Ordering::Release);
            });
        }
        tracing::info!(%listen, shards = n_local, round, "serving");
        let first = local.start;
        let server = shared.clone();
        styx_runtime::run(app.clone(), opts, move |shard| {
            let http = if shard.id() == first { metrics_addr } else { None };
            match TcpFrontend::start(shard, shared.clone(), listen, http) {
                Ok(frontend) => {
                    ready.fetch_add(1, Ordering::AcqRel);
                    frontend
                }
                Err(e) => {
                    // Every shard stops; the daemon reports why.
                    shared.fail(e.to_string());
                    TcpFrontend::idle(shard, shared.clone())
                }
            }
        })
        .map_err(|e| e.to_string())?;
        run.close();
        if let Some(reason) = server.failure() {
            return Err(reason);
        }
        if shutdown.load(Ordering::Relaxed) {
            break;
        }
        match run.failure.reason() {
            Some(reason) => tracing::warn!(
                round,
                served_s = joined.elapsed().as_secs_f64(),
                "the cluster lost a node ({reason}); recovering from the log"
            ),
            None => break,
        }
    }
    tracing::info!("stopped");
    Ok(())
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

/// `--preload`: the workload's initial state as the data directory's first
/// snapshot (see the module comment).
struct Preload<'a> {
    app: &'a Arc<App>,
    dir: &'a DataDir,
    shards: u16,
    local: std::ops::Range<styx_engine::ShardId>,
}

impl Visit for Preload<'_> {
    type Out = Result<(), String>;

    fn visit<W: Workload>(self, workload: W) -> Result<(), String> {
        let wapp = workload.app();
        if workloads::layout(&wapp) != workloads::layout(self.app) || wapp.name() != self.app.name() {
            return Err(format!(
                "--preload {} needs the application {:?}, this daemon serves {:?} (start styxd with --app {})",
                workload.name(),
                wapp.name(),
                self.app.name(),
                workload.name()
            ));
        }
        let label = workloads::label(&workload);
        let fresh = styx_runtime::preload::is_fresh(self.dir).map_err(|e| format!("preload: {e}"))?;
        if !fresh {
            let found = styx_runtime::preload::marker(self.dir).map_err(|e| format!("preload: {e}"))?;
            if found.as_deref() == Some(label.as_str()) {
                tracing::info!(preload = %label, "the data directory already holds this preload: recovering it");
                return Ok(());
            }
            return Err(format!(
                "--preload {label}: the data directory {} already holds {}; use an empty directory",
                self.dir.root().display(),
                found.map_or("other state".to_string(), |f| format!("the preload {f}"))
            ));
        }
        let started = Instant::now();
        tracing::info!(preload = %label, shards = self.shards, "preloading");
        let load =
            |emit: &mut dyn FnMut(styx_engine::OpId, styx_engine::Key, styx_engine::Value)| workload.load(&wapp, emit);
        let done = styx_runtime::preload::write(self.dir, &wapp, self.shards, self.local.clone(), &label, &load)
            .map_err(|e| format!("preload: {e}"))?;
        tracing::info!(
            preload = %label,
            entities = done.entities,
            snapshot_mb = done.bytes as f64 / (1024.0 * 1024.0),
            streamed = done.streamed,
            seconds = started.elapsed().as_secs_f64(),
            "preloaded"
        );
        Ok(())
    }
}

/// What MAP answers on `node` of `spec`.
fn partition_map(spec: &Spec, node: u16, app: &App) -> styx_net::Map {
    styx_net::Map {
        node,
        shards: spec.n_shards(),
        nodes: spec
            .nodes
            .iter()
            .map(|n| styx_net::MapNode {
                first_shard: spec.shards_of(n.id).start,
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
    }
}
