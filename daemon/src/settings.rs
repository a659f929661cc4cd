//! A daemon's settings: a TOML file (`--config`), `STYX_*` environment
//! variables and flags, each overriding the one before, over embedded
//! defaults.
//!
//! Every setting has a default, so a daemon started without any serves on
//! 127.0.0.1:7400 with its data in `./data`. [`Settings::resolve`] checks
//! them all before anything starts (a bad value is a usage error), so that
//! a daemon never half-starts on a setting it cannot honour.

use crate::cluster_file::ClusterFile;
use serde::Deserialize;
use std::net::{SocketAddr, TcpListener as StdListener, ToSocketAddrs};
use std::path::PathBuf;
use styx_runtime::cluster::Spec;

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

/// How `--schema` prints the application's schema.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SchemaFormat {
    /// One line per operator and per function, as in the source.
    Text,
    /// The wire types of every argument and result, and the structs and
    /// enums they name (what `styx call` and clients in other languages
    /// read; the same as `GET /schema` on the metrics address).
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
    pub threads: Option<u16>,
    pub fsync: Option<Fsync>,
    pub snapshot_interval_ms: Option<u64>,
    pub epoch_txns_max: Option<usize>,
    pub epoch_gather_us: Option<u64>,
    pub idle_poll_us: Option<u64>,
    pub move_share_entities: Option<usize>,
    pub move_share_min_entities: Option<usize>,
    pub move_share_per_ms: Option<usize>,
    pub frame_len_max: Option<usize>,
    pub in_flight_max: Option<usize>,
    pub connections_max: Option<usize>,
    pub output_bytes_max: Option<usize>,
    pub input_bytes_max: Option<usize>,
    pub log: Option<String>,
    pub log_format: Option<LogFormat>,
    pub cluster: Option<PathBuf>,
    pub node_id: Option<u16>,
}

/// The flags every daemon takes, each with its environment variable; a
/// daemon's own flags follow them (see [`crate::Extension`]).
#[derive(Debug, clap::Args)]
pub struct Flags {
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
    /// loaded its snapshot and replayed its log (the daemon listens, and queues
    /// requests, from the start), then "ok", and 503 "stopping" on SIGTERM.
    #[arg(long, env = "STYX_METRICS")]
    pub metrics: Option<String>,
    /// Shards, one per core [default: the number of CPUs]. A data directory
    /// keeps the shard count it was written with.
    #[arg(long, env = "STYX_SHARDS")]
    pub shards: Option<u16>,
    /// Threads running the shards, each a contiguous block of them [default:
    /// one per shard up to one per core]. More shards than threads makes a
    /// shard a unit of placement smaller than a core; more threads than
    /// cores only has the kernel time-slice shards that wait on each other.
    #[arg(long, env = "STYX_THREADS")]
    pub threads: Option<u16>,
    /// When the input log is made durable [default: epoch]. `none` is UNSAFE.
    #[arg(long, env = "STYX_FSYNC", value_enum)]
    pub fsync: Option<Fsync>,
    /// Milliseconds between incremental snapshots [default: 1000]; 0 disables.
    #[arg(long, env = "STYX_SNAPSHOT_INTERVAL_MS")]
    pub snapshot_interval_ms: Option<u64>,
    /// Transactions a shard seals into one epoch, at most [default: 256;
    /// fewer when its transactions conflict].
    #[arg(long, env = "STYX_EPOCH_TXNS_MAX")]
    pub epoch_txns_max: Option<usize>,
    /// Least microseconds between epoch starts [default: 0].
    #[arg(long, env = "STYX_EPOCH_GATHER_US")]
    pub epoch_gather_us: Option<u64>,
    /// Microseconds a shard with an epoch open polls for its peers before
    /// it parks [default: 200 when the machine has a core beyond the
    /// daemon's shards, else 0]. Polling answers a peer in ~1 µs where a
    /// parked shard takes ~80 µs to wake, but it holds the core: with a
    /// shard on every core it delays what the shards wait on (the log's
    /// sync, run by a kernel worker, and clients on the same machine). A
    /// daemon of one shard never polls (it has no peer to wait for).
    #[arg(long, env = "STYX_IDLE_POLL_US")]
    pub idle_poll_us: Option<u64>,
    /// Entities a moving partition's old owner copies to the new one at
    /// an epoch's end, at most [default: 1024]: the share is
    /// --move-share-per-ms for each millisecond of logged time since its
    /// last one, at least --move-share-min-entities (the same shares
    /// delete the partition from the old owner after the switch), so a
    /// move takes about the same fraction of every epoch. Larger shares
    /// move a partition in fewer epochs and lengthen those epochs' ends (a
    /// deeper dip while it moves). These three are the pace of the moves
    /// submitted to this daemon that name none (`styx rebalance
    /// --share-*`), logged with each move: a restart with other values
    /// replays logged moves at their own pace (only moves logged by a
    /// build before paces were logged take the current values).
    #[arg(long, env = "STYX_MOVE_SHARE_ENTITIES")]
    pub move_share_entities: Option<usize>,
    /// The share at an epoch's end, at least [default: 16; at most
    /// --move-share-entities].
    #[arg(long, env = "STYX_MOVE_SHARE_MIN_ENTITIES")]
    pub move_share_min_entities: Option<usize>,
    /// Entities a move copies per millisecond of logged time [default:
    /// 100; 0: always --move-share-min-entities].
    #[arg(long, env = "STYX_MOVE_SHARE_PER_MS")]
    pub move_share_per_ms: Option<usize>,
    /// Largest frame a client may send, bytes [default: 1 MiB + 4 KiB].
    #[arg(long, env = "STYX_FRAME_LEN_MAX")]
    pub frame_len_max: Option<usize>,
    /// Requests in flight per connection [default: 1024].
    #[arg(long, env = "STYX_IN_FLIGHT_MAX")]
    pub in_flight_max: Option<usize>,
    /// Client connections, all shards together [default: 1024].
    #[arg(long, env = "STYX_CONNECTIONS_MAX")]
    pub connections_max: Option<usize>,
    /// Bytes of answers a connection may leave unread: from half of it the
    /// daemon reads no more of it; past it for 10 s with the client reading
    /// less than it meanwhile, the daemon closes it [default: 64 MiB].
    #[arg(long, env = "STYX_OUTPUT_BYTES_MAX")]
    pub output_bytes_max: Option<usize>,
    /// Bytes of requests a connection may have running (their frames):
    /// at it the daemon reads no more of it until answers come back
    /// [default: 64 MiB].
    #[arg(long, env = "STYX_INPUT_BYTES_MAX")]
    pub input_bytes_max: Option<usize>,
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
    /// Print the application's schema (operators, functions, argument and
    /// result types) and exit: `--schema` as text, `--schema json` as JSON.
    #[arg(long, num_args = 0..=1, default_missing_value = "text", value_name = "FORMAT")]
    pub schema: Option<SchemaFormat>,
}

/// The settings in force, after file < environment < flags < defaults.
#[derive(Debug, Clone)]
pub struct Settings {
    pub data_dir: PathBuf,
    pub listen: String,
    pub metrics: Option<String>,
    pub shards: u16,
    /// `None`: `styx_runtime::threads_default`.
    pub threads: Option<u16>,
    pub fsync: Fsync,
    pub snapshot_interval_ms: u64,
    pub epoch_txns_max: usize,
    pub epoch_gather_us: u64,
    /// `None`: chosen by the shards on this node
    /// (`styx_runtime::idle_poll_default`).
    pub idle_poll_us: Option<u64>,
    pub move_share_entities: usize,
    pub move_share_min_entities: usize,
    pub move_share_per_ms: usize,
    pub limits: styx_net::Limits,
    pub log: String,
    pub log_format: LogFormat,
    /// The cluster this daemon is a node of, and its id there.
    pub cluster: Option<(Spec, u16)>,
    /// Print the schema instead of serving (`--schema`).
    pub schema: Option<SchemaFormat>,
}

impl Settings {
    /// The flags over the environment (clap read both) over the settings
    /// file over the defaults, every value checked.
    pub fn resolve(args: Flags) -> Result<Settings, String> {
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
            output_bytes_max: args
                .output_bytes_max
                .or(file.output_bytes_max)
                .unwrap_or(defaults.output_bytes_max),
            input_bytes_max: args
                .input_bytes_max
                .or(file.input_bytes_max)
                .unwrap_or(defaults.input_bytes_max),
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
        let default = styx_engine::Config::default();
        let full = args.move_share_entities.or(file.move_share_entities);
        let min = args.move_share_min_entities.or(file.move_share_min_entities);
        if full == Some(0) {
            return Err("--move-share-entities 0: a copy that sends nothing per epoch never finishes".into());
        }
        if min == Some(0) {
            return Err("--move-share-min-entities 0: a copy whose share may be 0 may never finish".into());
        }
        // One given alone moves the other's default out of its way.
        let (move_share_entities, move_share_min_entities) = match (full, min) {
            (Some(full), Some(min)) if min > full => {
                return Err(format!(
                    "--move-share-min-entities {min} is above --move-share-entities {full}: \
                     the least share is at most the most"
                ));
            }
            (Some(full), Some(min)) => (full, min),
            (Some(full), None) => (full, default.move_share_min_entities.min(full)),
            (None, Some(min)) => (default.move_share_entities.max(min), min),
            (None, None) => (default.move_share_entities, default.move_share_min_entities),
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
        // A node of a cluster may start with none (a spare), and run any
        // of the cluster's shards later (`styx handover`).
        let (least, most) = match &cluster {
            Some((spec, _)) => (0, spec.n_shards()),
            None => (1, shards),
        };
        if shards < least || shards as usize > styx_engine::SHARDS_MAX {
            return Err(format!(
                "--shards {shards}: between {least} and {}",
                styx_engine::SHARDS_MAX
            ));
        }
        let threads = args.threads.or(file.threads);
        if let Some(t) = threads
            && (t == 0 || t > most)
        {
            return Err(format!("--threads {t}: between 1 and the shards ({most})"));
        }
        Ok(Settings {
            data_dir: args.data_dir.or(file.data_dir).unwrap_or_else(|| PathBuf::from("data")),
            listen: listen.unwrap_or_else(|| "127.0.0.1:7400".into()),
            metrics: (metrics != "off").then_some(metrics),
            shards,
            threads,
            fsync: args.fsync.or(file.fsync).unwrap_or(Fsync::Epoch),
            snapshot_interval_ms: args.snapshot_interval_ms.or(file.snapshot_interval_ms).unwrap_or(1_000),
            epoch_txns_max: args
                .epoch_txns_max
                .or(file.epoch_txns_max)
                .unwrap_or(styx_engine::EPOCH_TXNS_MAX_DEFAULT),
            epoch_gather_us: args.epoch_gather_us.or(file.epoch_gather_us).unwrap_or(0),
            idle_poll_us: args.idle_poll_us.or(file.idle_poll_us),
            move_share_entities,
            move_share_min_entities,
            move_share_per_ms: args
                .move_share_per_ms
                .or(file.move_share_per_ms)
                .unwrap_or(default.move_share_per_ms),
            limits,
            log: args.log.or(file.log).unwrap_or_else(|| "info".into()),
            log_format: args.log_format.or(file.log_format).unwrap_or(LogFormat::Text),
            cluster,
            schema: args.schema,
        })
    }
}

/// Resolves an address; port 0 becomes a free port (every shard then binds
/// that same port with SO_REUSEPORT).
pub(crate) fn resolve(addr: &str) -> Result<SocketAddr, String> {
    resolve_all(&[addr]).map(|a| a[0])
}

/// Resolves addresses; each port 0 becomes a free port, distinct from the
/// others picked here: each probe listener stays open until all are
/// picked (closed at once, two could get the same port, and the daemon
/// would then claim one address twice).
pub(crate) fn resolve_all(addrs: &[&str]) -> Result<Vec<SocketAddr>, String> {
    let mut probes = Vec::new();
    let mut resolved = Vec::with_capacity(addrs.len());
    for addr in addrs {
        let a = addr
            .to_socket_addrs()
            .map_err(|e| format!("address {addr}: {e}"))?
            .next()
            .ok_or_else(|| format!("address {addr} resolves to nothing"))?;
        if a.port() != 0 {
            resolved.push(a);
            continue;
        }
        let l = StdListener::bind(a).map_err(|e| format!("cannot find a free port on {a}: {e}"))?;
        resolved.push(l.local_addr().map_err(|e| e.to_string())?);
        probes.push(l);
    }
    Ok(resolved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_move_share_given_alone_moves_the_others_default_out_of_its_way() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            flags: Flags,
        }
        let shares = |args: &[&str]| {
            let cli = <Cli as clap::Parser>::try_parse_from(
                ["styxd", "--listen", "127.0.0.1:0", "--metrics", "off"]
                    .iter()
                    .chain(args),
            )
            .unwrap();
            Settings::resolve(cli.flags).map(|s| (s.move_share_entities, s.move_share_min_entities))
        };
        let default = styx_engine::Config::default();
        assert_eq!(
            shares(&[]).unwrap(),
            (default.move_share_entities, default.move_share_min_entities)
        );
        assert_eq!(shares(&["--move-share-entities", "4"]).unwrap(), (4, 4));
        assert_eq!(shares(&["--move-share-min-entities", "2000"]).unwrap(), (2000, 2000));
        assert_eq!(
            shares(&["--move-share-entities", "500", "--move-share-min-entities", "20"]).unwrap(),
            (500, 20)
        );
        let e = shares(&["--move-share-entities", "5", "--move-share-min-entities", "20"]).unwrap_err();
        assert!(e.contains("--move-share-min-entities 20"), "{e}");
    }

    #[test]
    fn ports_picked_together_are_distinct() {
        // Closed one by one, probes hand the same port out again often
        // enough that a daemon restarted many times met it (its --listen
        // and --metrics then claimed one address twice).
        for _ in 0..200 {
            let a = resolve_all(&["127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"]).unwrap();
            assert!(a.iter().all(|x| x.port() != 0), "{a:?}");
            assert!(a[0] != a[1] && a[1] != a[2] && a[0] != a[2], "{a:?}");
        }
        assert_eq!(
            resolve("127.0.0.1:7").unwrap(),
            "127.0.0.1:7".parse::<SocketAddr>().unwrap()
        );
        assert!(resolve_all(&["not an address"]).unwrap_err().contains("not an address"));
    }
}
