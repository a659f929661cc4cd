//! `styx call | get | status | rebalance | handover | node | repl | verify | inspect`:
//! talking to a running daemon, and reading a data directory without one.
//!
//! `styx call` encodes arguments by the application's schema, which it
//! reads from the daemon (`GET /schema` on its metrics address) or a file
//! (`styxd --schema json > schema.json`): each argument is a JSON value
//! (a bare word is a string), and the result is printed as JSON. Without
//! a schema, arguments are written in the engine's encoding as
//! `TYPE:VALUE` and the result is shown as hex or decoded with `--as`:
//!
//! ```text
//! styx call account 7 transfer 9 25             # by the schema: (creditor: u64, amount: i64)
//! styx call account 7 transfer u64:9 i64:25     # the same, typed by hand
//! styx call hotel partition:3 search str:paris  # a partition function
//! styx get account 7 --as i64
//! ```
//!
//! Exit status: 0 when the call committed (or the check passed), 1 on an
//! error (connection, protocol, a violated invariant, a damaged file),
//! 2 on bad usage, 3 when the transaction aborted by its own logic (an
//! abort for bad arguments, a panic or a limit is an error: 1).

use clap::{Args, Subcommand};
use std::future::Future;
use std::io::{BufRead, IsTerminal, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use styx_bench::remote::pool::reachable;
use styx_engine::{Address, Key, Payload};
use styx_net::client::{Client, ConnectOptions, Error as ClientError, Options, Outcome};
use styx_tools::schema_json::{self, ClientSchema, FunctionInfo, parse_hex};
use styx_tools::workloads::{Knobs, Name};

/// Exit status of a call that aborted by its own logic.
const EXIT_ABORTED: u8 = 3;

/// Where the daemon is and how long to wait for it.
#[derive(Args, Clone)]
pub struct Connect {
    /// The daemon's client address.
    #[arg(long, default_value = "127.0.0.1:7400", env = "STYX_CONNECT")]
    connect: String,
    /// Seconds a command may take, retries included.
    #[arg(long, default_value_t = 10.0)]
    timeout: f64,
}

#[derive(Args)]
pub struct CallArgs {
    #[command(flatten)]
    connect: Connect,
    /// The operator (entity type), e.g. `account`.
    operator: String,
    /// The entity's key (`u64:N` or a bare number, `str:TEXT` or bare
    /// text, `hex:BYTES`), or `partition:N` for a partition function.
    key: String,
    /// The function's name.
    function: String,
    /// Arguments as `TYPE:VALUE`, concatenated in order (see `styx call
    /// --help`): i8 … i64, u8 … u64, f32, f64, bool, str, bytes (hex, with a
    /// length), raw (hex, no length). A bare integer is an i64.
    #[arg(allow_hyphen_values = true)]
    args: Vec<String>,
    /// Decode the result as these types (comma-separated, e.g. `i64` or
    /// `u64,str`) instead of by the schema.
    #[arg(long = "as")]
    returns: Option<String>,
    /// The schema as JSON (`styxd --schema json`), instead of asking the
    /// daemon for it.
    #[arg(long)]
    schema: Option<PathBuf>,
    /// The daemon's metrics address, where it serves `/schema`
    /// [default: the --connect address with the port after it, as styxd's
    /// defaults are].
    #[arg(long)]
    metrics: Option<String>,
}

#[derive(Args)]
pub struct GetArgs {
    #[command(flatten)]
    connect: Connect,
    /// The operator.
    operator: String,
    /// The entity's key (as for `styx call`).
    key: String,
    /// Decode the state as these types (comma-separated).
    #[arg(long = "as")]
    returns: Option<String>,
}

#[derive(Args)]
pub struct RebalanceArgs {
    #[command(flatten)]
    connect: Connect,
    /// The operator whose partition moves, e.g. `account`.
    operator: String,
    /// The partition's number.
    #[arg(required_unless_present_any = ["auto", "drain_node"])]
    partition: Option<u32>,
    /// The shard it moves to.
    #[arg(required_unless_present_any = ["auto", "drain_node"])]
    shard: Option<u16>,
    /// Instead of one named move: move the operator's partitions so that
    /// the invocations each shard ran even out (`styx_engine::balance::plan`
    /// on the per-partition counts, read from the metrics address of every
    /// node of the engine).
    #[arg(long, conflicts_with_all = ["partition", "shard"])]
    auto: bool,
    /// Instead of one named move: move every partition of the operator
    /// off this node's shards, each to the other nodes' shard with the
    /// least invocations so far (a node emptied before maintenance; its
    /// shards keep taking part in every epoch, and `--auto` fills it
    /// again).
    #[arg(long, conflicts_with_all = ["partition", "shard", "auto"])]
    drain_node: Option<u16>,
    /// With --auto: count the invocations of this many seconds (two reads
    /// of the metrics); 0 counts those since the daemon started.
    #[arg(long, default_value_t = 2.0)]
    window_s: f64,
    /// With --auto: stop once the busiest shard is within this share of
    /// the mean.
    #[arg(long, default_value_t = 0.05)]
    tolerance: f64,
    /// The metrics addresses (comma-separated, one per node of a cluster),
    /// where the switch is watched and --auto reads the counts [default:
    /// each node's client port + 1, the nodes listed by MAP].
    #[arg(long)]
    metrics: Option<String>,
    /// With --auto or --drain-node: print the plan, move nothing.
    #[arg(long)]
    dry_run: bool,
    /// Return once the move is decided and durable, without waiting for
    /// the partition's copy and switch.
    #[arg(long)]
    no_wait: bool,
    /// Seconds to wait for each switch before giving up (the move stays
    /// decided and switches later).
    #[arg(long, default_value_t = 60.0)]
    wait_s: f64,
    /// The move's pace, logged with it: the most entities its copy sends
    /// at one epoch end [default: the daemon's `--move-share-entities`;
    /// given any of the three, the others not given are the engine's
    /// defaults, 1 024, 16 and 100, a bound moved out of the way of the
    /// other one given].
    #[arg(long)]
    share_entities: Option<u32>,
    /// The least entities of the move's copy at one epoch end.
    #[arg(long)]
    share_min_entities: Option<u32>,
    /// Entities of the move's copy per millisecond of logged time.
    #[arg(long)]
    share_per_ms: Option<u32>,
}

impl RebalanceArgs {
    /// The pace the moves name, if any of its flags is given.
    fn pace(&self) -> Result<Option<styx_engine::MoveShare>, String> {
        if self.share_entities.is_none() && self.share_min_entities.is_none() && self.share_per_ms.is_none() {
            return Ok(None);
        }
        let default = styx_engine::Config::default().move_share();
        // One bound given alone moves the other's default out of its way
        // (as `styxd --move-share-*` does).
        let (most, least) = match (self.share_entities, self.share_min_entities) {
            (Some(most), Some(least)) => (most, least),
            (Some(most), None) => (most, default.least.min(most)),
            (None, Some(least)) => (default.most.max(least), least),
            (None, None) => (default.most, default.least),
        };
        styx_engine::MoveShare {
            most,
            least,
            per_ms: self.share_per_ms.unwrap_or(default.per_ms),
        }
        .check()
        .map(Some)
    }

    /// The metrics addresses: given, else beside each node's client
    /// address as MAP lists them (beside the one connected to, for a
    /// daemon older than MAP).
    async fn metrics(&self, client: &Client) -> Result<Vec<String>, String> {
        if let Some(m) = &self.metrics {
            return Ok(m
                .split(',')
                .map(str::trim)
                .filter(|a| !a.is_empty())
                .map(String::from)
                .collect());
        }
        let beside = |connect: &str| {
            metrics_beside(connect).ok_or_else(|| format!("no metrics address: give --metrics for {connect}"))
        };
        match client.map().await {
            Ok(map) if map.nodes.len() > 1 => map.nodes.iter().map(|n| beside(&n.client)).collect(),
            Ok(_) => Ok(vec![beside(&self.connect.connect)?]),
            Err(e) if e.code() == Some(styx_net::ErrorCode::UNKNOWN_FRAME_TYPE) => {
                Ok(vec![beside(&self.connect.connect)?])
            }
            Err(e) => Err(format!("MAP: {e}")),
        }
    }

    /// Where and how long to watch for a switch, unless --no-wait.
    async fn watch(&self, client: &Client) -> Result<Option<Watch>, String> {
        if self.no_wait {
            return Ok(None);
        }
        Ok(Some((
            self.metrics(client).await?,
            Duration::from_secs_f64(self.wait_s),
        )))
    }
}

/// The metrics addresses of every node, and how long to wait for a switch.
type Watch = (Vec<String>, Duration);

/// Every node's `/metrics`, one after the other (shards are numbered
/// across the cluster, so the samples do not collide).
fn metrics_of(addrs: &[String]) -> Result<String, String> {
    let mut text = String::new();
    for a in addrs {
        text.push_str(&http_get(a, "/metrics")?);
        text.push('\n');
    }
    Ok(text)
}

/// Partitions a rebalance moves at most.
const REBALANCE_MOVES_MAX: usize = 64;

#[derive(Args)]
pub struct StatusArgs {
    #[command(flatten)]
    connect: Connect,
    /// The daemon's metrics address, for log and snapshot positions
    /// (skipped when unreachable).
    #[arg(long, default_value = "127.0.0.1:7401")]
    metrics: String,
}

#[derive(Args)]
pub struct ReplArgs {
    #[command(flatten)]
    connect: Connect,
}

#[derive(Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    connect: Connect,
    /// ycsbt: the total is conserved and no balance is negative; tpcc: the
    /// four consistency conditions; movie: every review in both lists
    /// exactly once; travel: no overbooking.
    workload: Name,
    /// The knobs the daemon's state was loaded with (`styxd --preload`).
    #[command(flatten)]
    knobs: Knobs,
    /// ycsbt: the expected total when the accounts did not start at the
    /// start balance; then accounts 0..KEYS are read one by one.
    #[arg(long)]
    total: Option<i64>,
}

#[derive(Subcommand)]
pub enum InspectCommand {
    /// The input log: segments, epochs, transactions; every checksum verified.
    Log {
        /// A data directory, its `wal/` directory or one segment file.
        path: PathBuf,
    },
    /// The snapshots: manifests, files, entities; every checksum verified.
    Snapshot {
        /// A data directory, its `snapshot/` directory or one snapshot file.
        path: PathBuf,
    },
}

/// Runs `body` on a client executor of its own.
fn on_client<T: Send + 'static, F, Fut>(body: F) -> Result<T, String>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, String>> + 'static,
{
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .name("styx-cli")
        .spawn(move || async move { body().await })
        .map_err(|e| format!("cannot start the client executor: {e}"))?
        .join()
        .map_err(|e| format!("client executor: {e}"))?
}

fn client(c: &Connect) -> Result<Client, String> {
    if !(c.timeout > 0.0 && c.timeout.is_finite()) {
        return Err(format!("--timeout must be positive, got {}", c.timeout));
    }
    Client::new(c.connect.as_str(), client_options(c.timeout)).map_err(|e| format!("{}: {e}", c.connect))
}

/// The CLI's client settings: `timeout` seconds per command.
fn client_options(timeout: f64) -> Options {
    Options {
        connect: ConnectOptions {
            name: "styx cli".into(),
            ..ConnectOptions::default()
        },
        timeout: Duration::from_secs_f64(timeout),
        ..Options::default()
    }
}

fn finish(result: Result<ExitCode, String>) -> ExitCode {
    result.unwrap_or_else(|message| {
        eprintln!("error: {message}");
        ExitCode::FAILURE
    })
}

/// How `styx call` shows a result.
enum Shown {
    Hex,
    /// `--as TYPES`.
    Types(Vec<Type>),
    /// By the schema, as JSON.
    Schema(Box<(FunctionInfo, styx_engine::Types)>),
}

/// `styx call`.
pub fn call(a: CallArgs) -> ExitCode {
    let parsed = (|| {
        let target = parse_target(&a.key)?;
        let typed_by_hand = a.args.iter().all(|x| has_type_prefix(x));
        let returns = a.returns.as_deref().map(parse_types).transpose()?;
        // Arguments and result both given by hand: the schema is not needed.
        let schema = match (typed_by_hand, &returns) {
            (true, Some(_)) => None,
            _ => Some(load_schema(&a)),
        };
        let (args, shown) = match schema {
            // Arguments typed by hand: the schema only shows the result,
            // when it has the function (the guessed metrics address may
            // belong to another daemon).
            Some(Ok(schema)) if typed_by_hand => {
                let shown = match (returns, schema.function(&a.operator, &a.function)) {
                    (Some(types), _) => Shown::Types(types),
                    (None, Ok(f)) if f.partition == matches!(target, Address::Partition(_)) => {
                        Shown::Schema(Box::new((f.clone(), schema.types.clone())))
                    }
                    (None, _) => Shown::Hex,
                };
                (parse_args(&a.args)?, shown)
            }
            Some(Ok(schema)) => {
                let f = schema.function(&a.operator, &a.function)?;
                match (&target, f.partition) {
                    (Address::Entity(_), true) => {
                        return Err(format!("{} is a partition function: call it on partition:N", f.name));
                    }
                    (Address::Partition(_), false) => {
                        return Err(format!("{} runs on an entity: give its key", f.name));
                    }
                    _ => {}
                }
                let bytes = schema_json::encode_args(f, &a.args, &schema.types)?;
                check_payload_len(bytes.len())?;
                let args = Payload::from_bytes(&bytes);
                let shown = match returns {
                    Some(types) => Shown::Types(types),
                    None => Shown::Schema(Box::new((f.clone(), schema.types.clone()))),
                };
                (args, shown)
            }
            // No schema: arguments as written by hand (bare integers are i64).
            Some(Err(e)) => match parse_args(&a.args) {
                Ok(args) => {
                    eprintln!("note: {e}; arguments as written, the result as hex (or --as)");
                    (args, returns.map_or(Shown::Hex, Shown::Types))
                }
                Err(bad) => return Err(format!("{bad} (no schema to read it by: {e})")),
            },
            None => (parse_args(&a.args)?, returns.map_or(Shown::Hex, Shown::Types)),
        };
        Ok::<_, String>((target, args, shown))
    })();
    let (target, args, shown) = match parsed {
        Ok(p) => p,
        Err(e) => return usage(&e),
    };
    finish(on_client(move || async move {
        let client = client(&a.connect)?;
        let outcome = client.call_address(&a.operator, target, &a.function, args).await;
        Ok(print_outcome(outcome, &shown))
    }))
}

/// Whether a command-line argument is written as `TYPE:VALUE`.
fn has_type_prefix(arg: &str) -> bool {
    arg.split_once(':').is_some_and(|(t, _)| Type::parse(t).is_ok())
}

/// The schema from `--schema FILE`, else from the daemon's `/schema`.
fn load_schema(a: &CallArgs) -> Result<ClientSchema, String> {
    if let Some(path) = &a.schema {
        let text = std::fs::read_to_string(path).map_err(|e| format!("schema {}: {e}", path.display()))?;
        return ClientSchema::parse(&text).map_err(|e| format!("{}: {e}", path.display()));
    }
    let metrics = match &a.metrics {
        Some(m) => m.clone(),
        None => metrics_beside(&a.connect.connect)
            .ok_or_else(|| format!("no schema: give --metrics or --schema for {}", a.connect.connect))?,
    };
    let text = http_get(&metrics, "/schema").map_err(|e| {
        format!("cannot read the schema from {metrics}/schema ({e}): give --metrics ADDR or --schema FILE")
    })?;
    ClientSchema::parse(&text)
}

/// `host:port+1`: where styxd serves metrics by default, beside its clients.
fn metrics_beside(connect: &str) -> Option<String> {
    let first = connect.split(',').next()?;
    let (host, port) = first.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    Some(format!("{host}:{}", port.checked_add(1)?))
}

fn check_payload_len(n: usize) -> Result<(), String> {
    if n > styx_engine::PAYLOAD_LEN_MAX {
        return Err(format!(
            "arguments take {n} bytes, over the limit of {}",
            styx_engine::PAYLOAD_LEN_MAX
        ));
    }
    Ok(())
}

fn print_outcome(outcome: Result<Outcome, ClientError>, shown: &Shown) -> ExitCode {
    match outcome {
        Ok(Outcome::Committed { tid, result: value }) => {
            let text = match shown {
                Shown::Hex => show(value.as_bytes(), None),
                Shown::Types(types) => show(value.as_bytes(), Some(types)),
                Shown::Schema(s) => match schema_json::decode_result(&s.0, value.as_bytes(), &s.1) {
                    Ok(json) => json.to_string(),
                    Err(e) => format!("{} (not a {}: {e})", show_hex(value.as_bytes()), s.0.result),
                },
            };
            println!("committed (tid {tid}): {text}");
            ExitCode::SUCCESS
        }
        Ok(Outcome::Aborted { tid, abort }) => {
            println!("aborted (tid {tid}): {:?}: {}", abort.kind(), abort.message());
            // Only the function's own verdict is an outcome; bad arguments,
            // a panic or a limit are the caller's or the code's error.
            if abort.kind() == styx_engine::AbortKind::User {
                ExitCode::from(EXIT_ABORTED)
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            if e.ran() == styx_net::client::Ran::Unknown {
                eprintln!("the call may or may not have committed");
            }
            ExitCode::FAILURE
        }
    }
}

/// `styx get`.
pub fn get(a: GetArgs) -> ExitCode {
    let parsed = (|| {
        let key = match parse_target(&a.key)? {
            Address::Entity(k) => k,
            Address::Partition(_) => return Err("get reads one entity; give its key".to_string()),
        };
        let returns = a.returns.as_deref().map(parse_types).transpose()?;
        Ok((key, returns))
    })();
    let (key, returns) = match parsed {
        Ok(p) => p,
        Err(e) => return usage(&e),
    };
    finish(on_client(move || async move {
        let client = client(&a.connect)?;
        match client.get(&a.operator, key).await.map_err(|e| e.to_string())? {
            None => println!("(absent)"),
            Some(bytes) => println!("{}", show(&bytes, returns.as_deref())),
        }
        Ok(ExitCode::SUCCESS)
    }))
}

#[derive(Args)]
pub struct HandoverArgs {
    #[command(flatten)]
    connect: Connect,
    /// The shard that changes nodes.
    shard: u16,
    /// The node it goes to (an index into the cluster file's nodes, as MAP
    /// and LAYOUT number them).
    node: u16,
    /// Return once the handover is decided and durable, without waiting
    /// for the shard to run on its new node.
    #[arg(long)]
    no_wait: bool,
    /// Seconds to wait for the shard to run on its new node.
    #[arg(long, default_value_t = 60.0)]
    wait_s: f64,
}

/// `styx handover SHARD NODE`: shard SHARD goes to node NODE at the end of
/// the epoch the request is sequenced in (every node checkpoints the shards
/// it runs next, then the cluster goes on with the new layout); waits until
/// LAYOUT says it runs there.
pub fn handover(a: HandoverArgs) -> ExitCode {
    if !(a.wait_s > 0.0 && a.wait_s.is_finite()) {
        eprintln!("error: --wait-s must be positive");
        return ExitCode::from(2);
    }
    finish(on_client(move || async move {
        let (client, operator, _) = cluster_client(&a.connect).await?;
        let wait = (!a.no_wait).then(|| Duration::from_secs_f64(a.wait_s));
        println!(
            "{}",
            hand_over(&client, &a.connect, &operator, a.shard, a.node, wait).await?
        );
        Ok(ExitCode::SUCCESS)
    }))
}

/// A client of the nodes that run shards (the one `--connect` names may be
/// a spare, which refuses requests), the operator that names a cluster's
/// built-ins (the first: a handover is a built-in of every operator), and
/// the cluster's map placed by its layout (LAYOUT).
async fn cluster_client(connect: &Connect) -> Result<(Client, String, styx_net::Map), String> {
    let first = client(connect)?;
    let conn = first
        .connection()
        .await
        .map_err(|e| format!("{}: {e}", connect.connect))?;
    let map = conn.map().await.map_err(|e| e.to_string())?;
    let operator = map
        .operators
        .first()
        .ok_or("the application has no operator")?
        .name
        .clone();
    let layout = map.layout();
    let runs_shards = |i: usize| layout.node_of.iter().any(|n| usize::from(*n) == i);
    if runs_shards(usize::from(map.node)) || map.nodes.len() < 2 {
        return Ok((first, operator, map));
    }
    // Every node that runs shards, each reached as the answering node's
    // host if it listens on all of them.
    let peer = conn.peer();
    let mut addrs: Vec<std::net::SocketAddr> = Vec::new();
    for (_, n) in map.nodes.iter().enumerate().filter(|(i, _)| runs_shards(*i)) {
        let a = reachable(n, peer);
        addrs.push(
            std::net::ToSocketAddrs::to_socket_addrs(a.as_str())
                .ok()
                .and_then(|mut a| a.next())
                .ok_or_else(|| format!("node address {a} resolves to nothing"))?,
        );
    }
    let via = Client::new(&addrs[..], client_options(connect.timeout)).map_err(|e| format!("{addrs:?}: {e}"))?;
    Ok((via, operator, map))
}

/// Hands `shard` to `node` (`__handover` on `operator`) and, with `wait`,
/// waits that long at most until LAYOUT places it there (every connection
/// of the round that ended closes: it asks on a new one each time). What
/// to print of it, or why it failed.
async fn hand_over(
    client: &Client,
    connect: &Connect,
    operator: &str,
    shard: u16,
    node: u16,
    wait: Option<Duration>,
) -> Result<String, String> {
    let start = Instant::now();
    let tid = call_builtin(
        client,
        operator,
        0,
        styx_engine::HANDOVER_FUNCTION,
        Payload::encode(&(shard, node)),
        "handover",
    )
    .await?;
    let decided = start.elapsed();
    let Some(wait) = wait else {
        return Ok(format!(
            "shard {shard} goes to node {node} (tid {tid}): decided in {:.1} ms",
            ms(decided)
        ));
    };
    let deadline = start + wait;
    let options = ConnectOptions {
        name: "styx cli".into(),
        ..ConnectOptions::default()
    };
    loop {
        let placed = match styx_net::client::Connection::connect(connect.connect.as_str(), &options).await {
            Ok(c) => c.layout().await.ok().flatten(),
            Err(_) => None,
        };
        if let Some(l) = placed
            && l.node_of.get(usize::from(shard)) == Some(&node)
        {
            return Ok(format!(
                "shard {shard} runs on node {node} (tid {tid}, layout version {}): decided in {:.1} ms, \
                 serving there after {:.1} ms",
                l.version,
                ms(decided),
                ms(start.elapsed())
            ));
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "the handover is decided (tid {tid}) but shard {shard} did not run on node {node} within {} s",
                wait.as_secs_f64()
            ));
        }
        glommio::timer::sleep(Duration::from_millis(20)).await;
    }
}

#[derive(Subcommand)]
pub enum NodeCommand {
    /// Hand every shard of NODE to the other nodes, each to the one that
    /// runs the fewest (a spare first): NODE goes on as a spare.
    Drain(NodeArgs),
    /// Hand NODE shards from the nodes that run the most, until no node
    /// runs more than one shard more than it (a spare, added to the
    /// cluster file with `shards = 0`, takes its share).
    Fill(NodeArgs),
    /// NODE leaves the cluster for good: it must run no shard (drain it
    /// first). Decided like a handover; the other nodes record it and no
    /// longer wait for NODE (at rounds or restarts), and its daemon stops.
    Remove(MemberArgs),
    /// NODE, listed in the cluster file with `joins_later = true`, joins
    /// the cluster: start its daemon first. Decided like a handover; at the
    /// round change it makes, the nodes record it, and from then on every
    /// join waits for it. It joins as a spare: `styx node fill NODE`.
    Add(MemberArgs),
}

/// `styx node add|remove NODE`.
#[derive(Args)]
pub struct MemberArgs {
    #[command(flatten)]
    connect: Connect,
    /// The node (an index into the cluster file's nodes).
    node: u16,
    /// Seconds to wait for the node's client port: to answer once it
    /// joined (add), to close once its daemon stopped (remove).
    #[arg(long, default_value_t = 60.0)]
    wait_s: f64,
    /// Return once the join or leave is decided.
    #[arg(long)]
    no_wait: bool,
}

#[derive(Args)]
pub struct NodeArgs {
    #[command(flatten)]
    connect: Connect,
    /// The node (an index into the cluster file's nodes, as MAP and LAYOUT
    /// number them).
    node: u16,
    /// Seconds to wait for each shard to run on its new node.
    #[arg(long, default_value_t = 60.0)]
    wait_s: f64,
    /// Print the handovers it would make, and make none.
    #[arg(long)]
    dry_run: bool,
}

/// `styx node drain|fill NODE`: the handovers of whole shards that empty
/// or fill a node, made one after the other (each waits until the shard
/// runs on its new node). The cluster file fixes the nodes: a node is
/// added as a spare there, and a drained one stays a spare (stopping it
/// stops the cluster until it is back).
pub fn node(what: NodeCommand) -> ExitCode {
    let (a, drain) = match what {
        NodeCommand::Drain(a) => (a, true),
        NodeCommand::Fill(a) => (a, false),
        NodeCommand::Remove(a) => return remove_node(a),
        NodeCommand::Add(a) => return add_node(a),
    };
    if !(a.wait_s > 0.0 && a.wait_s.is_finite()) {
        eprintln!("error: --wait-s must be positive");
        return ExitCode::from(2);
    }
    finish(on_client(move || async move {
        let (client, operator, map) = cluster_client(&a.connect).await?;
        let layout = map.layout();
        let nodes = map.nodes.len() as u16;
        let plan = if drain {
            // A spare that left the cluster (MEMBERS), or does not answer
            // (down, or it left and the server is older than MEMBERS), is
            // handed nothing.
            let conn = client.connection().await.map_err(|e| e.to_string())?;
            // (Unknown if MEMBERS fails: those that answer are handed shards.)
            let left = members(&conn).await.unwrap_or_default().left;
            let gone: Vec<u16> = (0..nodes)
                .filter(|n| *n != a.node && !layout.node_of.contains(n))
                .filter(|n| left.contains(n) || !answers(&map.nodes[usize::from(*n)], conn.peer()))
                .collect();
            crate::nodes::drain(&layout.node_of, nodes, a.node, &gone)?
        } else {
            crate::nodes::fill(&layout.node_of, nodes, a.node)?
        };
        if plan.is_empty() {
            println!(
                "node {} {}: nothing to hand over (layout {:?})",
                a.node,
                if drain { "runs no shard" } else { "runs its share" },
                layout.node_of
            );
            return Ok(ExitCode::SUCCESS);
        }
        for (shard, to) in plan {
            if a.dry_run {
                println!("would hand shard {shard} to node {to}");
                continue;
            }
            let wait = Some(Duration::from_secs_f64(a.wait_s));
            println!("{}", hand_over(&client, &a.connect, &operator, shard, to, wait).await?);
        }
        Ok(ExitCode::SUCCESS)
    }))
}

/// What MEMBERS says (the layout's version and the nodes that left the
/// cluster; none from a server older than MEMBERS).
async fn members(conn: &styx_net::client::Connection) -> Result<styx_net::Members, String> {
    Ok(conn.members().await.map_err(|e| e.to_string())?.unwrap_or_default())
}

/// Whether the client port at `addr` (a MAP address; unspecified: the
/// host of `peer`, a node that answered) takes a connection.
fn answers(node: &styx_net::MapNode, peer: std::net::SocketAddr) -> bool {
    std::net::ToSocketAddrs::to_socket_addrs(reachable(node, peer).as_str())
        .ok()
        .and_then(|mut a| a.next())
        .is_some_and(|a| std::net::TcpStream::connect_timeout(&a, Duration::from_millis(500)).is_ok())
}

/// `styx node add NODE`: the join of a node the cluster file lists as
/// joining later (`__handover` of shard `JOIN`), then, unless `--no-wait`,
/// waits until the node's client port answers (it joined the run as a
/// spare). A node that is a member already is said to be one.
fn add_node(a: MemberArgs) -> ExitCode {
    if !(a.wait_s > 0.0 && a.wait_s.is_finite()) {
        eprintln!("error: --wait-s must be positive");
        return ExitCode::from(2);
    }
    finish(on_client(move || async move {
        let (client, operator, map) = cluster_client(&a.connect).await?;
        let joining = map
            .nodes
            .get(usize::from(a.node))
            .ok_or_else(|| format!("no node {} (the cluster has {})", a.node, map.nodes.len()))?;
        let start = Instant::now();
        let tid = match call_builtin(
            &client,
            &operator,
            0,
            styx_engine::HANDOVER_FUNCTION,
            Payload::encode(&(styx_engine::layout::JOIN, a.node)),
            "join",
        )
        .await
        {
            Ok(tid) => tid,
            Err(e) if e.contains("is a member already") => {
                println!("node {} is a member of the cluster already", a.node);
                return Ok(ExitCode::SUCCESS);
            }
            Err(e) => return Err(e),
        };
        let decided = start.elapsed();
        if a.no_wait {
            println!(
                "node {} joins the cluster (tid {tid}): decided in {:.1} ms",
                a.node,
                ms(decided)
            );
            return Ok(ExitCode::SUCCESS);
        }
        let peer = client.connection().await.map_err(|e| e.to_string())?.peer();
        let deadline = start + Duration::from_secs_f64(a.wait_s);
        while !answers(joining, peer) {
            if Instant::now() >= deadline {
                return Err(format!(
                    "the join is decided (tid {tid}) but node {} does not answer at {} after {} s: is its daemon running? (the others wait for it at their next round)",
                    a.node, joining.client, a.wait_s
                ));
            }
            glommio::timer::sleep(Duration::from_millis(20)).await;
        }
        println!(
            "node {} joined the cluster (tid {tid}): decided in {:.1} ms, serving as a spare after {:.1} ms (styx node fill {} hands it shards)",
            a.node,
            ms(decided),
            ms(start.elapsed()),
            a.node
        );
        Ok(ExitCode::SUCCESS)
    }))
}

/// `styx node remove NODE`: the leave of a node that runs no shard
/// (`__handover` of shard `LEAVE`), then, unless `--no-wait`, waits until
/// the node's client port stops answering (its daemon stopped).
fn remove_node(a: MemberArgs) -> ExitCode {
    if !(a.wait_s > 0.0 && a.wait_s.is_finite()) {
        eprintln!("error: --wait-s must be positive");
        return ExitCode::from(2);
    }
    finish(on_client(move || async move {
        let (client, operator, map) = cluster_client(&a.connect).await?;
        let gone = map
            .nodes
            .get(usize::from(a.node))
            .ok_or_else(|| format!("no node {} (the cluster has {})", a.node, map.nodes.len()))?;
        let layout = map.layout();
        let conn = client.connection().await.map_err(|e| e.to_string())?;
        let now = members(&conn).await?;
        if now.left.contains(&a.node) {
            println!(
                "node {} left the cluster already (layout version {})",
                a.node, now.version
            );
            return Ok(ExitCode::SUCCESS);
        }
        let runs: Vec<usize> = (0..layout.node_of.len())
            .filter(|s| layout.node_of[*s] == a.node)
            .collect();
        if !runs.is_empty() {
            return Err(format!(
                "node {} runs shards {runs:?}: hand them away first (styx node drain {})",
                a.node, a.node
            ));
        }
        let start = Instant::now();
        let tid = call_builtin(
            &client,
            &operator,
            0,
            styx_engine::HANDOVER_FUNCTION,
            Payload::encode(&(styx_engine::layout::LEAVE, a.node)),
            "leave",
        )
        .await?;
        let decided = start.elapsed();
        if a.no_wait {
            println!(
                "node {} leaves the cluster (tid {tid}): decided in {:.1} ms",
                a.node,
                ms(decided)
            );
            return Ok(ExitCode::SUCCESS);
        }
        let peer = client.connection().await.map_err(|e| e.to_string())?.peer();
        let deadline = start + Duration::from_secs_f64(a.wait_s);
        while answers(gone, peer) {
            if Instant::now() >= deadline {
                return Err(format!(
                    "the leave is decided (tid {tid}) but node {} still answers at {} after {} s",
                    a.node, gone.client, a.wait_s
                ));
            }
            glommio::timer::sleep(Duration::from_millis(20)).await;
        }
        // Its port closed as it left, or as it died: the others say
        // which (MEMBERS names it; from a server older than MEMBERS, a
        // layout one version on, with no shard moved).
        loop {
            let conn = client.connection().await.map_err(|e| e.to_string())?;
            match conn.members().await {
                Ok(Some(m)) if m.left.contains(&a.node) => break,
                Ok(None)
                    if conn
                        .layout()
                        .await
                        .is_ok_and(|l| l.is_some_and(|l| l.version > layout.version)) =>
                {
                    break;
                }
                _ => {}
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "node {} stopped answering, but the others do not show its leave (tid {tid}) within {} s",
                    a.node, a.wait_s
                ));
            }
            glommio::timer::sleep(Duration::from_millis(20)).await;
        }
        println!(
            "node {} left the cluster (tid {tid}): decided in {:.1} ms, its daemon stopped after {:.1} ms",
            a.node,
            ms(decided),
            ms(start.elapsed())
        );
        Ok(ExitCode::SUCCESS)
    }))
}

/// `styx rebalance`: moves one partition to another shard. The move is
/// sequenced like a transaction; it commits with `()` once decided and
/// durable (a move to the shard that owns it already changes nothing), or
/// aborts when the shard, operator or partition does not exist. The
/// partition is then copied in the background and switches once copied;
/// unless `--no-wait`, the command watches every shard's map on the
/// metrics address (`styx_partition_owner`) until it has.
pub fn rebalance(a: RebalanceArgs) -> ExitCode {
    let wait_ok = a.wait_s > 0.0 && a.wait_s.is_finite();
    if !a.no_wait && !wait_ok {
        eprintln!("error: --wait-s must be positive");
        return ExitCode::from(2);
    }
    if let Err(e) = a.pace() {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    if a.auto {
        return rebalance_auto(a);
    }
    if let Some(node) = a.drain_node {
        return drain_node(a, node);
    }
    let (partition, shard) = (
        a.partition.expect("clap requires it"),
        a.shard.expect("clap requires it"),
    );
    finish(on_client(move || async move {
        let client = client(&a.connect)?;
        let watch = a.watch(&client).await?;
        let pace = a.pace()?;
        move_partition(&client, &a.operator, partition, shard, pace, watch.as_ref()).await?;
        Ok(ExitCode::SUCCESS)
    }))
}

/// Calls the built-in `function` (`__move`, `__handover`) on `partition` of
/// `operator`: the committed request's tid, or why the `what` was refused.
async fn call_builtin(
    client: &Client,
    operator: &str,
    partition: u32,
    function: &str,
    args: Payload,
    what: &str,
) -> Result<styx_engine::Tid, String> {
    match client
        .call_address(operator, Address::Partition(partition), function, args)
        .await
    {
        Ok(Outcome::Committed { tid, .. }) => Ok(tid),
        Ok(Outcome::Aborted { abort, .. }) => Err(format!("{what} refused: {}", abort.message())),
        Err(e) => Err(e.to_string()),
    }
}

/// Moves `partition` of `operator` to `shard`; with `watch`, waits (on
/// that metrics address, at most that long) until it has switched.
async fn move_partition(
    client: &Client,
    operator: &str,
    partition: u32,
    shard: u16,
    pace: Option<styx_engine::MoveShare>,
    watch: Option<&Watch>,
) -> Result<(), String> {
    let start = Instant::now();
    let args = styx_engine::Move::args(shard, pace);
    let tid = call_builtin(client, operator, partition, styx_engine::MOVE_FUNCTION, args, "move").await?;
    let decided = start.elapsed();
    let Some((metrics, timeout)) = watch else {
        println!(
            "moved partition {partition} of {operator} to shard {shard} (tid {tid}): decided in {:.1} ms, \
             switches once copied",
            ms(decided)
        );
        return Ok(());
    };
    let deadline = start + *timeout;
    loop {
        let owners = partition_owners(&metrics_of(metrics)?, operator, partition);
        if !owners.is_empty() && owners.iter().all(|o| *o == shard) {
            println!(
                "moved partition {partition} of {operator} to shard {shard} (tid {tid}): decided in {:.1} ms, \
                 switched within {:.1} ms",
                ms(decided),
                ms(start.elapsed())
            );
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "the move of partition {partition} of {operator} to shard {shard} (tid {tid}) is decided and \
                 durable, but the shards' maps {owners:?} did not switch within {:.1} s (see `styx status`)",
                timeout.as_secs_f64()
            ));
        }
        std::thread::sleep(SWITCH_POLL);
    }
}

/// How often `styx rebalance` reads the metrics while it waits for a
/// switch (the daemon publishes them every 100 ms).
const SWITCH_POLL: Duration = Duration::from_millis(25);

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1_000.0
}

/// Every shard's owner of `partition` of `operator` in a `/metrics` text.
fn partition_owners(text: &str, operator: &str, partition: u32) -> Vec<u16> {
    metric_samples(text, "styx_partition_owner", operator)
        .filter(|(_, p, _)| *p == partition)
        .map(|(_, _, owner)| owner as u16)
        .collect()
}

/// The samples `name{shard="S",operator="O",partition="P"} V` of
/// `operator` in a `/metrics` text, as `(S, P, V)`.
fn metric_samples<'a>(text: &'a str, name: &'a str, operator: &'a str) -> impl Iterator<Item = (u16, u32, u64)> + 'a {
    text.lines().filter_map(move |line| {
        let rest = line.strip_prefix(name)?.strip_prefix("{shard=\"")?;
        let (shard, rest) = rest.split_once("\",operator=\"")?;
        let (op, rest) = rest.split_once("\",partition=\"")?;
        let (partition, value) = rest.split_once("\"} ")?;
        if op != operator {
            return None;
        }
        Some((shard.parse().ok()?, partition.parse().ok()?, value.trim().parse().ok()?))
    })
}

/// `styx rebalance --auto`: reads the per-partition counts twice,
/// `--window-s` apart, plans, and moves one partition at a time.
fn rebalance_auto(a: RebalanceArgs) -> ExitCode {
    if !(a.window_s >= 0.0 && a.window_s.is_finite() && a.tolerance >= 0.0) {
        eprintln!("error: --window-s and --tolerance must not be negative");
        return ExitCode::from(2);
    }
    finish(on_client(move || async move {
        let client = client(&a.connect)?;
        let metrics = a.metrics(&client).await?;
        let watch = (!a.no_wait).then(|| (metrics.clone(), Duration::from_secs_f64(a.wait_s)));
        // Every node's shards: a node's STATUS counts its own.
        let shards = match client.map().await {
            Ok(map) => map.shards,
            Err(_) => client.status().await.map_err(|e| e.to_string())?.shards,
        };
        let loads = if a.window_s > 0.0 {
            let before = metrics_of(&metrics)?;
            std::thread::sleep(Duration::from_secs_f64(a.window_s));
            let after = metrics_of(&metrics)?;
            partition_loads(&after, Some(&before), &a.operator)?
        } else {
            partition_loads(&metrics_of(&metrics)?, None, &a.operator)?
        };
        if let Some(l) = loads.iter().find(|l| l.owner >= shards) {
            return Err(format!(
                "partition {} is on shard {} of {shards}: the metrics are not this daemon's",
                l.partition, l.owner
            ));
        }
        // The planner names an operator id; the moves go out by name.
        let moves = styx_engine::balance::plan(styx_engine::OpId(0), &loads, shards, a.tolerance, REBALANCE_MOVES_MAX);
        let mut on = vec![0u64; usize::from(shards)];
        let mut planned = vec![0u64; usize::from(shards)];
        for l in &loads {
            on[usize::from(l.owner)] += l.load;
            let to = moves
                .iter()
                .find(|m| m.partition == l.partition)
                .map_or(l.owner, |m| m.to);
            planned[usize::from(to)] += l.load;
        }
        println!(
            "invocations per shard {on:?}, planned {planned:?}: {} moves",
            moves.len()
        );
        for m in &moves {
            let load = loads.iter().find(|l| l.partition == m.partition).map_or(0, |l| l.load);
            if a.dry_run {
                println!(
                    "would move partition {} of {} to shard {} ({load} invocations)",
                    m.partition, a.operator, m.to
                );
            } else {
                // One at a time: each waits for its switch (unless
                // --no-wait), so the next is planned against a settled map.
                move_partition(&client, &a.operator, m.partition, m.to, a.pace()?, watch.as_ref()).await?;
            }
        }
        Ok(ExitCode::SUCCESS)
    }))
}

/// `styx rebalance --drain-node N`: moves every partition of the operator
/// off node N's shards, the heaviest first, each to the shard of another
/// node that carries the least (invocations since start, by the
/// per-partition counts), one at a time.
fn drain_node(a: RebalanceArgs, node: u16) -> ExitCode {
    finish(on_client(move || async move {
        let client = client(&a.connect)?;
        let map = client.map().await.map_err(|e| format!("MAP: {e}"))?;
        if usize::from(node) >= map.nodes.len() {
            return Err(format!("no node {node} (the engine has {})", map.nodes.len()));
        }
        let draining = map.shards_of_node(usize::from(node));
        if draining.len() == usize::from(map.shards) {
            return Err(format!(
                "node {node} runs every shard: there is nowhere to move its partitions"
            ));
        }
        let metrics = a.metrics(&client).await?;
        let watch = (!a.no_wait).then(|| (metrics.clone(), Duration::from_secs_f64(a.wait_s)));
        let loads = partition_loads(&metrics_of(&metrics)?, None, &a.operator)?;
        let mut carried = vec![0u64; usize::from(map.shards)];
        for l in &loads {
            carried[usize::from(l.owner)] += l.load;
        }
        let mut leaving: Vec<&styx_engine::balance::Load> =
            loads.iter().filter(|l| draining.contains(&l.owner)).collect();
        leaving.sort_by_key(|l| (std::cmp::Reverse(l.load), l.partition));
        let mut moves = Vec::with_capacity(leaving.len());
        for l in leaving {
            let to = (0..map.shards)
                .filter(|s| !draining.contains(s))
                .min_by_key(|s| (carried[usize::from(*s)], *s))
                .expect("a shard on another node");
            carried[usize::from(l.owner)] -= l.load;
            carried[usize::from(to)] += l.load;
            moves.push((l.partition, to, l.load));
        }
        println!(
            "node {node} (shards {}) holds {} partitions of {}: moving them off, invocations per shard after {carried:?}",
            shard_list(&draining),
            moves.len(),
            a.operator
        );
        for (partition, to, load) in moves {
            if a.dry_run {
                println!(
                    "would move partition {partition} of {} to shard {to} ({load} invocations)",
                    a.operator
                );
            } else {
                move_partition(&client, &a.operator, partition, to, a.pace()?, watch.as_ref()).await?;
            }
        }
        Ok(ExitCode::SUCCESS)
    }))
}

/// `operator`'s partitions from a `/metrics` text: each one's invocations
/// (summed over shards, less those of `before` when given) and its owner
/// by the map of the lowest shard that published one.
fn partition_loads(
    text: &str,
    before: Option<&str>,
    operator: &str,
) -> Result<Vec<styx_engine::balance::Load>, String> {
    let mut owners: std::collections::BTreeMap<u32, (u16, u16)> = std::collections::BTreeMap::new();
    for (shard, partition, owner) in metric_samples(text, "styx_partition_owner", operator) {
        let e = owners.entry(partition).or_insert((shard, owner as u16));
        if shard < e.0 {
            *e = (shard, owner as u16);
        }
    }
    if owners.is_empty() {
        return Err(format!(
            "the metrics list no partitions of {operator:?} (no such operator, or a daemon without per-partition counts)"
        ));
    }
    let count = |text: &str| {
        let mut c: std::collections::BTreeMap<u32, u64> = std::collections::BTreeMap::new();
        for (_, partition, v) in metric_samples(text, "styx_partition_invocations_total", operator) {
            *c.entry(partition).or_default() += v;
        }
        c
    };
    let now = count(text);
    let then = before.map(count).unwrap_or_default();
    Ok(owners
        .into_iter()
        .map(|(partition, (_, owner))| styx_engine::balance::Load {
            partition,
            owner,
            load: now
                .get(&partition)
                .copied()
                .unwrap_or(0)
                .saturating_sub(then.get(&partition).copied().unwrap_or(0)),
        })
        .collect())
}

/// `styx status`.
pub fn status(a: StatusArgs) -> ExitCode {
    let connect = a.connect.clone();
    let code = finish(on_client(move || async move {
        let client = client(&connect)?;
        let s = client.status().await.map_err(|e| e.to_string())?;
        let ping = client.ping().await.map_err(|e| e.to_string())?;
        println!("server      {}", connect.connect);
        println!("shards      {}", s.shards);
        println!("epoch       {}", s.epoch);
        println!("uptime      {:.1} s", s.uptime_ms as f64 / 1000.0);
        println!("committed   {} ({}/s)", s.committed, s.committed_per_s);
        println!("aborted     {} ({}/s)", s.aborted, s.aborted_per_s);
        println!("epochs/s    {}", s.epochs_per_s);
        println!("connections {} ({} requests in flight)", s.connections, s.in_flight);
        println!("round trip  {} µs", ping.as_micros());
        let map = match client.map().await {
            Ok(map) => map,
            // A daemon older than MAP is one node.
            Err(e) if e.code() == Some(styx_net::ErrorCode::UNKNOWN_FRAME_TYPE) => return Ok(ExitCode::SUCCESS),
            Err(e) => return Err(format!("MAP: {e}")),
        };
        if map.nodes.len() > 1 {
            // (Unknown from a server older than MEMBERS: none left.)
            let left = client
                .connection()
                .await
                .map_err(|e| e.to_string())?
                .members()
                .await
                .ok()
                .flatten()
                .unwrap_or_default()
                .left;
            Ok(print_nodes(&map, &left, &connect).await)
        } else {
            Ok(ExitCode::SUCCESS)
        }
    }));
    // Positions live on the metrics endpoint; a daemon started without one
    // only loses these lines.
    if code == ExitCode::SUCCESS {
        match scrape(&a.metrics) {
            Ok(text) => print_positions(&text),
            Err(e) => eprintln!("(no log and snapshot positions: {e})"),
        }
    }
    code
}

/// `0..2` for shards in a row (the range, end excluded), else `0,2,5`.
fn shard_list(shards: &[u16]) -> String {
    match (shards.first(), shards.last()) {
        (Some(a), Some(b)) if b.checked_sub(*a).map(usize::from) == Some(shards.len() - 1) => {
            format!("{a}..{}", u32::from(*b) + 1)
        }
        _ => shards.iter().map(u16::to_string).collect::<Vec<_>>().join(","),
    }
}

/// One line per node of a cluster: its shards, epoch, rates, health.
/// Fails (exit 1) if a node does not answer, but a node that left the
/// cluster (`left`, MEMBERS), which is said so.
async fn print_nodes(map: &styx_net::Map, left: &[u16], connect: &Connect) -> ExitCode {
    println!("nodes       {} ({} shards)", map.nodes.len(), map.shards);
    println!(
        "  {:<4} {:<22} {:<8} {:>10} {:>12} {:>6} {:>9}  health",
        "node", "address", "shards", "epoch", "committed/s", "conns", "rtt µs"
    );
    let mut down = 0;
    for (i, n) in map.nodes.iter().enumerate() {
        let shards = shard_list(&map.shards_of_node(i));
        let one = Connect {
            connect: n.client.clone(),
            timeout: connect.timeout.min(2.0),
        };
        let answer = async {
            let c = client(&one)?;
            let s = c.status().await.map_err(|e| e.to_string())?;
            let rtt = c.ping().await.map_err(|e| e.to_string())?;
            Ok::<_, String>((s, rtt))
        };
        let mark = if i == usize::from(map.node) { "*" } else { " " };
        if left.contains(&(i as u16)) {
            println!(
                "{mark} {i:<4} {:<22} {shards:<8} {:>10} {:>12} {:>6} {:>9}  left the cluster",
                n.client, "-", "-", "-", "-"
            );
            continue;
        }
        match answer.await {
            Ok((s, rtt)) => println!(
                "{mark} {i:<4} {:<22} {shards:<8} {:>10} {:>12} {:>6} {:>9}  serving",
                n.client,
                s.epoch,
                s.committed_per_s,
                s.connections,
                rtt.as_micros()
            ),
            Err(e) => {
                down += 1;
                println!(
                    "{mark} {i:<4} {:<22} {shards:<8} {:>10} {:>12} {:>6} {:>9}  down: {e}",
                    n.client, "-", "-", "-", "-"
                );
            }
        }
    }
    if down > 0 {
        eprintln!("error: {down} of {} nodes do not answer", map.nodes.len());
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// GET /metrics over plain HTTP/1.0.
fn scrape(addr: &str) -> Result<String, String> {
    http_get(addr, "/metrics")
}

/// GET `path` over plain HTTP/1.0: the body of a 200 answer.
fn http_get(addr: &str, path: &str) -> Result<String, String> {
    let sock = addr
        .parse::<std::net::SocketAddr>()
        .map_err(|e| format!("metrics address {addr}: {e}"))?;
    let mut s = TcpStream::connect_timeout(&sock, Duration::from_secs(2)).map_err(|e| format!("{addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok();
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: styx\r\n\r\n").as_bytes())
        .map_err(|e| format!("{addr}: {e}"))?;
    let mut text = String::new();
    s.read_to_string(&mut text).map_err(|e| format!("{addr}: {e}"))?;
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((text.as_str(), ""));
    let status = head.lines().next().unwrap_or_default();
    if !status.contains(" 200 ") {
        return Err(format!("{addr}{path}: {status}"));
    }
    Ok(body.to_string())
}

/// Per-shard values of one metric, from the Prometheus text.
fn per_shard(text: &str, name: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?;
            let rest = rest.strip_prefix("{shard=\"")?;
            let (shard, rest) = rest.split_once("\"}")?;
            Some((shard.to_string(), rest.trim().to_string()))
        })
        .collect()
}

fn print_positions(text: &str) {
    for (label, name) in [
        ("durable epoch", "styx_log_durable_epoch"),
        ("log bytes", "styx_log_bytes_total"),
        ("snapshot epoch", "styx_snapshot_epoch"),
        ("re-executed", "styx_transactions_reexecuted_total"),
    ] {
        let values = per_shard(text, name);
        if !values.is_empty() {
            let shown: Vec<String> = values.iter().map(|(s, v)| format!("{s}:{v}")).collect();
            println!("{label:<15} {}", shown.join("  "));
        }
    }
}

/// `styx verify`.
pub fn verify(a: VerifyArgs) -> ExitCode {
    let errors = match (a.workload, a.total) {
        (Name::Ycsbt, Some(expected)) => {
            let keys = a.knobs.keys.unwrap_or(styx_tools::workloads::KEYS_DEFAULT);
            let connect = a.connect.clone();
            on_client(move || async move {
                let client = client(&connect)?;
                let conn = client.connection().await.map_err(|e| e.to_string())?;
                let (mut errors, total) = styx_bench::remote::ycsbt::verify(&conn, keys).await?;
                if total != expected {
                    errors.push(format!("the total is {total}, expected {expected}"));
                }
                Ok(errors)
            })
        }
        (_, Some(_)) => return usage("--total is for ycsbt"),
        (name, None) => styx_tools::verify::verify(name.as_str(), &a.connect.connect, &a.knobs),
    };
    match errors {
        Ok(errors) if errors.is_empty() => {
            println!("{}: consistent", a.workload.as_str());
            ExitCode::SUCCESS
        }
        Ok(errors) => {
            for e in &errors {
                println!("violation: {e}");
            }
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `styx inspect`.
pub fn inspect(command: InspectCommand) -> ExitCode {
    let clean = match command {
        InspectCommand::Log { path } => styx_storage::inspect::log(&path).map(|r| {
            print!("{r}");
            r.is_clean()
        }),
        InspectCommand::Snapshot { path } => styx_storage::inspect::snapshot(&path).map(|r| {
            print!("{r}");
            r.is_clean()
        }),
    };
    match clean {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("damage found (see above)");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `styx repl`: one exactly-once client for the whole session.
pub fn repl(a: ReplArgs) -> ExitCode {
    let connect = a.connect.clone();
    finish(on_client(move || async move {
        let client = client(&connect)?;
        let stdin = std::io::stdin();
        let interactive = stdin.is_terminal();
        if interactive {
            println!(
                "styx repl on {} (client {:#x}); `help` lists commands",
                connect.connect,
                client.id()
            );
        }
        let mut lines = stdin.lock().lines();
        let mut failed = false;
        loop {
            if interactive {
                print!("styx> ");
                std::io::stdout().flush().ok();
            }
            let Some(line) = lines.next() else { break };
            let line = line.map_err(|e| format!("stdin: {e}"))?;
            let words = match split_words(&line) {
                Ok(w) => w,
                Err(e) => {
                    println!("error: {e}");
                    failed = true;
                    continue;
                }
            };
            match repl_line(&client, &words).await {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    println!("error: {e}");
                    failed = true;
                }
            }
        }
        // Piped input: a failed line fails the run, so scripts notice.
        Ok(if failed && !interactive {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        })
    }))
}

const REPL_HELP: &str = "\
call OP KEY FN [TYPE:VALUE…] [--as TYPES]   run one transaction
get OP KEY [--as TYPES]                     read one entity
status                                      the engine's counters
ping                                        a round trip
help | quit";

/// Runs one repl line; `Ok(false)` ends the session.
async fn repl_line(client: &Client, words: &[String]) -> Result<bool, String> {
    let (words, returns) = match words.iter().position(|w| w == "--as") {
        Some(i) => {
            let types = words.get(i + 1).ok_or("--as needs types")?;
            let mut rest = words[..i].to_vec();
            rest.extend_from_slice(&words[i + 2..]);
            (rest, Some(parse_types(types)?))
        }
        None => (words.to_vec(), None),
    };
    match words.first().map(String::as_str) {
        None => {}
        Some("quit" | "exit") => return Ok(false),
        Some("help") => println!("{REPL_HELP}"),
        Some("call") => {
            let [_, op, key, function, args @ ..] = words.as_slice() else {
                return Err("usage: call OP KEY FN [TYPE:VALUE…]".into());
            };
            let outcome = client
                .call_address(op, parse_target(key)?, function, parse_args(args)?)
                .await;
            match outcome {
                Ok(Outcome::Committed { tid, result: value }) => {
                    println!("committed (tid {tid}): {}", show(value.as_bytes(), returns.as_deref()));
                }
                Ok(Outcome::Aborted { tid, abort }) => {
                    println!("aborted (tid {tid}): {:?}: {}", abort.kind(), abort.message());
                }
                Err(e) => return Err(e.to_string()),
            }
        }
        Some("get") => {
            let [_, op, key] = words.as_slice() else {
                return Err("usage: get OP KEY".into());
            };
            let Address::Entity(key) = parse_target(key)? else {
                return Err("get reads one entity; give its key".into());
            };
            match client.get(op, key).await.map_err(|e| e.to_string())? {
                None => println!("(absent)"),
                Some(bytes) => println!("{}", show(&bytes, returns.as_deref())),
            }
        }
        Some("status") => {
            let s = client.status().await.map_err(|e| e.to_string())?;
            println!(
                "shards {} epoch {} committed {} ({}/s) aborted {} connections {}",
                s.shards, s.epoch, s.committed, s.committed_per_s, s.aborted, s.connections
            );
        }
        Some("ping") => {
            let rtt = client.ping().await.map_err(|e| e.to_string())?;
            println!("{} µs", rtt.as_micros());
        }
        Some(other) => return Err(format!("unknown command `{other}`; `help` lists them")),
    }
    Ok(true)
}

/// Splits a line on whitespace; double quotes group words.
fn split_words(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    words.push(std::mem::take(&mut word));
                    any = false;
                }
            }
            c => {
                word.push(c);
                any = true;
            }
        }
    }
    if quoted {
        return Err("unclosed quote".into());
    }
    if any {
        words.push(word);
    }
    Ok(words)
}

fn usage(message: &str) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(2)
}

/// A type on the command line.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Type {
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    F32,
    F64,
    Bool,
    Str,
    Bytes,
    Raw,
}

impl Type {
    fn parse(name: &str) -> Result<Type, String> {
        Ok(match name {
            "i8" => Type::I8,
            "i16" => Type::I16,
            "i32" => Type::I32,
            "i64" => Type::I64,
            "u8" => Type::U8,
            "u16" => Type::U16,
            "u32" => Type::U32,
            "u64" => Type::U64,
            "f32" => Type::F32,
            "f64" => Type::F64,
            "bool" => Type::Bool,
            "str" => Type::Str,
            "bytes" => Type::Bytes,
            "raw" => Type::Raw,
            _ => {
                return Err(format!(
                    "unknown type `{name}`: use i8…i64, u8…u64, f32, f64, bool, str, bytes or raw"
                ));
            }
        })
    }
}

fn parse_types(list: &str) -> Result<Vec<Type>, String> {
    list.split(',').map(|t| Type::parse(t.trim())).collect()
}

/// Encodes one `TYPE:VALUE` argument onto `out`.
fn encode_arg(arg: &str, out: &mut Vec<u8>) -> Result<(), String> {
    let (ty, value) = match arg.split_once(':') {
        Some((t, v)) => (Type::parse(t)?, v),
        None if arg.parse::<i64>().is_ok() => (Type::I64, arg),
        None if arg == "true" || arg == "false" => (Type::Bool, arg),
        None => return Err(format!("argument `{arg}`: write it as TYPE:VALUE, e.g. str:{arg}")),
    };
    let bad = |e: &dyn std::fmt::Display| format!("argument `{arg}`: {e}");
    macro_rules! num {
        ($t:ty) => {
            out.extend_from_slice(&value.parse::<$t>().map_err(|e| bad(&e))?.to_le_bytes())
        };
    }
    match ty {
        Type::I8 => num!(i8),
        Type::I16 => num!(i16),
        Type::I32 => num!(i32),
        Type::I64 => num!(i64),
        Type::U8 => num!(u8),
        Type::U16 => num!(u16),
        Type::U32 => num!(u32),
        Type::U64 => num!(u64),
        Type::F32 => num!(f32),
        Type::F64 => num!(f64),
        Type::Bool => out.push(u8::from(value.parse::<bool>().map_err(|e| bad(&e))?)),
        Type::Str => {
            out.extend_from_slice(&(value.len() as u32).to_le_bytes());
            out.extend_from_slice(value.as_bytes());
        }
        Type::Bytes => {
            let b = parse_hex(value)?;
            out.extend_from_slice(&(b.len() as u32).to_le_bytes());
            out.extend_from_slice(&b);
        }
        Type::Raw => out.extend_from_slice(&parse_hex(value)?),
    }
    Ok(())
}

fn parse_args(args: &[String]) -> Result<Payload, String> {
    let mut out = Vec::new();
    for a in args {
        encode_arg(a, &mut out)?;
    }
    if out.len() > styx_engine::PAYLOAD_LEN_MAX {
        return Err(format!(
            "arguments take {} bytes, over the limit of {}",
            out.len(),
            styx_engine::PAYLOAD_LEN_MAX
        ));
    }
    Ok(Payload::from_bytes(&out))
}

/// A key, or `partition:N`.
fn parse_target(text: &str) -> Result<Address, String> {
    if let Some(p) = text.strip_prefix("partition:") {
        return p
            .parse::<u32>()
            .map(Address::Partition)
            .map_err(|e| format!("partition `{p}`: {e}"));
    }
    let too_long = |n: usize| {
        (n > styx_engine::KEY_LEN_MAX).then(|| format!("key `{text}` is over {} bytes", styx_engine::KEY_LEN_MAX))
    };
    let key = match text.split_once(':') {
        Some(("u64", n)) => Key::from(n.parse::<u64>().map_err(|e| format!("key `{text}`: {e}"))?),
        Some(("u32", n)) => Key::from(n.parse::<u32>().map_err(|e| format!("key `{text}`: {e}"))?),
        Some(("str", s)) => match too_long(s.len()) {
            Some(e) => return Err(e),
            None => Key::from(s),
        },
        Some(("hex", h)) => {
            let bytes = parse_hex(h)?;
            if let Some(e) = too_long(bytes.len()) {
                return Err(e);
            }
            Key::from_bytes(&bytes)
        }
        _ => match text.parse::<u64>() {
            Ok(n) => Key::from(n),
            Err(_) => match too_long(text.len()) {
                Some(e) => return Err(e),
                None => Key::from(text),
            },
        },
    };
    Ok(Address::Entity(key))
}

/// Decodes `bytes` as `types`, or shows them as hex.
fn show(bytes: &[u8], types: Option<&[Type]>) -> String {
    match types {
        None => show_hex(bytes),
        Some(types) => match decode_as(bytes, types) {
            Ok(shown) => shown,
            Err(e) => format!("{} ({e})", show_hex(bytes)),
        },
    }
}

fn show_hex(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "(empty)".into();
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{} bytes: {hex}", bytes.len())
}

fn decode_as(bytes: &[u8], types: &[Type]) -> Result<String, String> {
    let mut parts = Vec::new();
    let mut at = 0;
    let mut take = |n: Option<usize>| -> Result<&[u8], String> {
        let n = n.unwrap_or(bytes.len() - at);
        if bytes.len() - at < n {
            return Err("too short for the types given".into());
        }
        at += n;
        Ok(&bytes[at - n..at])
    };
    macro_rules! num {
        ($t:ty) => {{
            let b = take(Some(std::mem::size_of::<$t>()))?;
            <$t>::from_le_bytes(b.try_into().expect("sized")).to_string()
        }};
    }
    for ty in types {
        let shown = match ty {
            Type::I8 => num!(i8),
            Type::I16 => num!(i16),
            Type::I32 => num!(i32),
            Type::I64 => num!(i64),
            Type::U8 => num!(u8),
            Type::U16 => num!(u16),
            Type::U32 => num!(u32),
            Type::U64 => num!(u64),
            Type::F32 => num!(f32),
            Type::F64 => num!(f64),
            Type::Bool => match take(Some(1))?[0] {
                0 => "false".into(),
                1 => "true".into(),
                b => return Err(format!("{b} is not a bool")),
            },
            Type::Str | Type::Bytes => {
                let n = u32::from_le_bytes(take(Some(4))?.try_into().expect("sized")) as usize;
                let b = take(Some(n))?;
                if *ty == Type::Str {
                    format!("{:?}", std::str::from_utf8(b).map_err(|_| "not UTF-8")?)
                } else {
                    b.iter().map(|b| format!("{b:02x}")).collect()
                }
            }
            Type::Raw => take(None)?.iter().map(|b| format!("{b:02x}")).collect(),
        };
        parts.push(shown);
    }
    let left = take(None)?.len();
    if left > 0 {
        return Err(format!("{left} bytes left over"));
    }
    Ok(parts.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_loads_sum_shards_less_the_window_start_and_take_the_lowest_shards_map() {
        let line = |name: &str, shard: u16, op: &str, p: u32, v: u64| {
            format!("{name}{{shard=\"{shard}\",operator=\"{op}\",partition=\"{p}\"}} {v}\n")
        };
        let (inv, own) = ("styx_partition_invocations_total", "styx_partition_owner");
        let mut after = String::from("# TYPE styx_partition_owner gauge\n");
        for shard in [1u16, 0] {
            after += &line(own, shard, "account", 0, 0);
            // Shard 1 has seen partition 1 move to it, shard 0 not yet.
            after += &line(own, shard, "account", 1, u64::from(shard));
            after += &line(own, shard, "other", 0, 1);
        }
        after += &line(inv, 0, "account", 0, 10);
        after += &line(inv, 1, "account", 0, 5);
        after += &line(inv, 0, "account", 1, 7);
        after += &line(inv, 0, "other", 0, 99);
        let before = line(inv, 0, "account", 0, 4);
        let loads = partition_loads(&after, Some(&before), "account").unwrap();
        let got: Vec<(u32, u16, u64)> = loads.iter().map(|l| (l.partition, l.owner, l.load)).collect();
        assert_eq!(got, vec![(0, 0, 11), (1, 0, 7)]);
        let since_start = partition_loads(&after, None, "account").unwrap();
        assert_eq!(since_start[0].load, 15);
        assert!(
            partition_loads(&after, None, "nothing")
                .unwrap_err()
                .contains("no partitions of \"nothing\"")
        );
    }

    #[test]
    fn arguments_encode_like_the_engine() {
        let p = parse_args(&["u64:9".into(), "i64:-25".into(), "str:hi".into(), "bool:true".into()]).unwrap();
        assert_eq!(
            p.as_bytes(),
            Payload::encode(&(9u64, -25i64, "hi".to_string(), true)).as_bytes()
        );
        let bare = parse_args(&["7".into(), "false".into()]).unwrap();
        assert_eq!(bare.as_bytes(), Payload::encode(&(7i64, false)).as_bytes());
        let bytes = parse_args(&["bytes:0a0b".into(), "raw:ff".into()]).unwrap();
        assert_eq!(bytes.as_bytes(), &[2, 0, 0, 0, 0x0a, 0x0b, 0xff]);
    }

    #[test]
    fn bad_arguments_say_what_is_wrong() {
        assert!(parse_args(&["u8:300".into()]).unwrap_err().contains("u8:300"));
        assert!(parse_args(&["paris".into()]).unwrap_err().contains("str:paris"));
        assert!(parse_args(&["int:3".into()]).unwrap_err().contains("unknown type"));
        assert!(parse_args(&["bytes:abc".into()]).unwrap_err().contains("odd"));
    }

    #[test]
    fn keys_and_partitions() {
        assert_eq!(parse_target("7").unwrap(), Address::Entity(Key::from(7u64)));
        assert_eq!(parse_target("u64:7").unwrap(), Address::Entity(Key::from(7u64)));
        assert_eq!(parse_target("str:7").unwrap(), Address::Entity(Key::from("7")));
        assert_eq!(parse_target("alice").unwrap(), Address::Entity(Key::from("alice")));
        assert_eq!(parse_target("partition:3").unwrap(), Address::Partition(3));
        assert!(parse_target("partition:x").is_err());
        assert!(parse_target(&"k".repeat(styx_engine::KEY_LEN_MAX + 1)).is_err());
    }

    #[test]
    fn results_decode_as_asked() {
        let w = Payload::encode(&(5u64, "ok".to_string())).as_bytes().to_vec();
        assert_eq!(decode_as(&w, &parse_types("u64,str").unwrap()).unwrap(), "5 \"ok\"");
        assert!(
            decode_as(&w, &parse_types("u64").unwrap())
                .unwrap_err()
                .contains("left over")
        );
        assert!(show(&[1, 2], Some(&[Type::I64])).contains("too short"));
        assert_eq!(show(&[], None), "(empty)");
    }

    #[test]
    fn words_split_on_spaces_and_group_in_quotes() {
        assert_eq!(
            split_words(r#"call hotel 3 book str:"two words" u64:1"#).unwrap(),
            ["call", "hotel", "3", "book", "str:two words", "u64:1"]
        );
        assert!(split_words("get \"x").is_err());
        assert!(split_words("   ").unwrap().is_empty());
    }

    #[test]
    fn metrics_lines_split_by_shard() {
        let text = "# HELP x\nstyx_log_durable_epoch{shard=\"0\"} 12\nstyx_log_durable_epoch{shard=\"1\"} 11\n";
        assert_eq!(
            per_shard(text, "styx_log_durable_epoch"),
            [("0".to_string(), "12".to_string()), ("1".to_string(), "11".to_string())]
        );
    }
}
