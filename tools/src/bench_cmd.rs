//! `styx bench`: runs a workload in-process, or against a running daemon
//! (`--connect ADDR`), and prints its figures; or plots figures from
//! earlier runs.
//!
//! ```text
//! styx bench ycsbt  [--keys N] [--zipf θ] …        bank transfers
//!                   [--moves N --move-every-ms M]   … while partitions move
//!                   [--hot-shard S --rebalance-after S] … a skew, rebalanced
//! styx bench tpcc   [--warehouses W] [--scale spec|small] …
//!                   [--move-table T --moves N …]    … while T's partitions move
//! styx bench movie  [--users N] [--movies N] …      Deathstar movie review
//! styx bench travel [--hotels N] [--geo-partitions P] …
//! styx bench handoff [--accounts N] [--rounds R]  a shard changing nodes
//! styx bench handover [--accounts N] [--handovers H]  … between running nodes
//! styx bench plot --input results.jsonl --out docs/
//! ```
//!
//! Every run takes the same load flags (`--shards`, `--duration`,
//! `--warmup`, `--rate` for open loop or `--in-flight` for closed loop,
//! `--json`, `--out FILE` to append the JSON line to a file) and prints one
//! JSON object or a short table (benchmarks.md); it exits non-zero when the
//! workload's invariants do not hold at the end.
//!
//! With `--connect ADDR` the same workload runs against the daemon there
//! (`styx_bench::remote`): start it with `styxd --preload
//! WORKLOAD` and the same knobs (or, for YCSB-T, pass `--load` to deposit
//! the balances over the wire). `--shards` and the epoch flags are then the
//! daemon's business and ignored. YCSB-T reads the balances before the run
//! and checks against them, so runs can follow each other on one daemon.

use clap::{Args, Subcommand, ValueEnum};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use styx_bench::deathstar::{movie, travel};
use styx_bench::inproc::{Movie, Tpcc, Travel, Ycsbt};
use styx_bench::moves::Plan;
use styx_bench::remote::{self, Remote};
use styx_bench::report::Report;
use styx_bench::runner::{self, Load, Workload};
use styx_bench::{plot, tpcc};
use styx_tools::apps::{GEO_PARTITIONS, PARTITIONS};

#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: BenchCommand,
}

#[derive(Subcommand)]
enum BenchCommand {
    /// YCSB-T bank transfers (closed loop by default; --rate for open loop).
    Ycsbt {
        #[command(flatten)]
        run: RunArgs,
        #[command(flatten)]
        workload: YcsbtArgs,
    },
    /// TPC-C NewOrder and Payment; closed loop keeps --in-flight requests
    /// outstanding per district (TPC-C's terminals).
    Tpcc {
        #[command(flatten)]
        run: RunArgs,
        #[command(flatten)]
        workload: TpccArgs,
    },
    /// Deathstar movie review: compose_review over eight services.
    Movie {
        #[command(flatten)]
        run: RunArgs,
        #[command(flatten)]
        workload: MovieArgs,
    },
    /// Deathstar travel reservation: search, recommend, login, reserve.
    Travel {
        #[command(flatten)]
        run: RunArgs,
        #[command(flatten)]
        workload: TravelArgs,
    },
    /// What handing a YCSB-T shard to another node costs it: the pause at
    /// the switch, step by step, and the bytes that cross.
    Handoff(HandoffArgs),
    /// A YCSB-T shard handed between two running nodes (in one process,
    /// over loopback TCP) under closed-loop load: the commit rate, the
    /// longest gap between commits at each handover, latency away from
    /// handovers and overall.
    Handover(HandoverArgs),
    /// Draw SVG plots from JSON-lines reports (--out of earlier runs).
    Plot(PlotArgs),
}

#[derive(Args)]
struct HandoverArgs {
    /// Accounts in the bank (4 shards: about a quarter on the shard that moves).
    #[arg(long, default_value_t = 100_000)]
    accounts: u64,
    /// Handovers (shard 1 to the other node and back).
    #[arg(long, default_value_t = 4)]
    handovers: usize,
    /// Milliseconds between handovers (and before the first, after the last).
    #[arg(long, default_value_t = 1_000)]
    every_ms: u64,
    /// Transfers outstanding per shard (closed loop), or at most (open loop).
    #[arg(long, default_value_t = 200)]
    in_flight: u64,
    /// Open loop at this many transfers per second over the four shards,
    /// latency from each one's scheduled time; without it, closed loop.
    #[arg(long)]
    rate: Option<u64>,
    /// Node 1 starts as a spare (node 0 runs the four shards): each
    /// handover of shard 1 to it adds a node, each one back drains it.
    #[arg(long)]
    spare: bool,
    /// Durable: each node logs (fsync per epoch) and snapshots into its
    /// own directory under this one (`node-0`, `node-1`, emptied first),
    /// and each handover is a checkpoint of every shard where it runs
    /// next. Not with --spare (a durable node keeps a shard).
    #[arg(long)]
    data_dir: Option<std::path::PathBuf>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct HandoffArgs {
    /// Accounts in the engine (2 shards: about half on the shard that moves).
    #[arg(long, default_value_t = 200_000)]
    accounts: u64,
    /// Hand-offs (the shard goes back and forth).
    #[arg(long, default_value_t = 6)]
    rounds: usize,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

/// Flags every workload run takes.
#[derive(Args)]
struct RunArgs {
    /// Shards (one per core); default: the number of CPUs.
    #[arg(long)]
    shards: Option<u16>,
    /// Executor threads running the shards, each a contiguous block of
    /// them [default: one per shard]. In-process runs only.
    #[arg(long)]
    threads: Option<usize>,
    /// Measured seconds (after the warm-up).
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Warm-up seconds, not measured.
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Offered load in transactions per second (open loop, latency measured
    /// from each request's scheduled time); without it the run is closed
    /// loop at maximum throughput.
    #[arg(long)]
    rate: Option<f64>,
    /// Requests outstanding per lane in closed loop (a lane is a shard, or
    /// a district for TPC-C). Default: 1 000 for YCSB-T, 1 for TPC-C,
    /// 1 000 for movie and travel.
    #[arg(long)]
    in_flight: Option<usize>,
    /// Transactions one shard seals into one epoch.
    #[arg(long, default_value_t = styx_engine::EPOCH_TXNS_MAX_DEFAULT)]
    epoch_txns: usize,
    /// Least µs between epoch starts (lets batches gather).
    #[arg(long, default_value_t = 0)]
    epoch_gather_us: u64,
    /// Local messages a shard handles per step before shipping batches.
    #[arg(long, default_value_t = styx_engine::Config::default().step_messages_max)]
    step_messages: usize,
    /// Entities a moving partition's old owner copies at an epoch's end,
    /// at most (the background copy's share: smaller spreads a move
    /// thinner over more epochs).
    #[arg(long, default_value_t = styx_engine::Config::default().move_share_entities)]
    move_share: usize,
    /// The share at an epoch's end, at least (the first after no copy was
    /// under way, and those of epochs that follow each other within
    /// microseconds).
    #[arg(long, default_value_t = styx_engine::Config::default().move_share_min_entities)]
    move_share_min: usize,
    /// Entities per millisecond of logged time since the last share (0:
    /// always the least).
    #[arg(long, default_value_t = styx_engine::Config::default().move_share_per_ms)]
    move_share_per_ms: usize,
    /// Seed of the load generators.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// How the benchmark application is written: typed entities, or the
    /// closures they expand to (to compare the two).
    #[arg(long, default_value_t = styx_bench::Api::Typed)]
    api: styx_bench::Api,
    /// Skip measuring the serial ceiling.
    #[arg(long)]
    no_serial: bool,
    /// Seconds the serial ceiling is measured for.
    #[arg(long, default_value_t = 2.0)]
    serial_s: f64,
    /// Print one JSON object on stdout (the table goes to stderr).
    #[arg(long)]
    json: bool,
    /// Also append the JSON object as one line to this file.
    #[arg(long)]
    out: Option<PathBuf>,
    /// No progress line on stderr.
    #[arg(long)]
    quiet: bool,
    /// Run against the daemon at this address instead of in-process; for a
    /// cluster, any of its nodes' client addresses (comma-separated: tried
    /// in order). The rest of the cluster is learned from the node.
    #[arg(long)]
    connect: Option<String>,
    /// With --connect: pipelined connections per node, the lanes spread
    /// over them.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// With --connect: name every request for exactly-once (client id,
    /// seq, ack), to measure the daemon's bookkeeping; requests whose
    /// connection broke are then sent again, so a run survives a node's
    /// failure and the cluster's recovery.
    #[arg(long)]
    exactly_once: bool,
}

#[derive(Args)]
struct YcsbtArgs {
    /// Accounts.
    #[arg(long, default_value_t = 10_000)]
    keys: u64,
    /// Creditor skew (Zipf theta in (0, 1)); uniform when absent.
    #[arg(long)]
    zipf: Option<f64>,
    /// Partitions of the account operator.
    #[arg(long, default_value_t = PARTITIONS)]
    partitions: u32,
    /// With --connect: deposit the start balance into every account first
    /// (for a daemon not started with --preload ycsbt).
    #[arg(long)]
    load: bool,
    /// With --zipf: the hottest accounts are all on this shard (the Zipf
    /// ranks go to its accounts first), a skew for --rebalance-after.
    #[arg(long)]
    hot_shard: Option<u16>,
    /// With --hot-shard, in-process: every shard's generator roots its
    /// transfers on the hot shard's accounts (they hop there), so the
    /// roots' work lands on one shard; --zipf is then optional.
    #[arg(long)]
    hot_roots: bool,
    #[command(flatten)]
    moves: MoveArgs,
}

/// Partitions moved while a workload runs in-process.
#[derive(Args)]
struct MoveArgs {
    /// In-process: move this many partitions while the workload runs
    /// (partition p to the shard after its owner, cycling over
    /// --move-partitions: on two shards, back and forth), and report the
    /// throughput and p99 per 100 ms window before, during and after.
    #[arg(long, default_value_t = 0)]
    moves: usize,
    /// Milliseconds between two moves.
    #[arg(long, default_value_t = 500)]
    move_every_ms: u64,
    /// Seconds into the measured window of the first move (default: a
    /// third of --duration).
    #[arg(long)]
    moves_after: Option<f64>,
    /// The moves cycle over partitions 0..this.
    #[arg(long, default_value_t = 1)]
    move_partitions: u32,
    /// In-process: at this many seconds into the measured window, move
    /// partitions by the shards' per-partition invocation counts
    /// (`styx_engine::balance::plan`) and report before against after.
    #[arg(long)]
    rebalance_after: Option<f64>,
}

#[derive(Clone, Copy, ValueEnum)]
enum TpccScale {
    /// TPC-C's cardinalities: 100 000 items, 3 000 customers per district.
    Spec,
    /// 1 000 items, 30 customers per district: loads in a blink.
    Small,
}

#[derive(Args)]
struct TpccArgs {
    /// Warehouses.
    #[arg(long, default_value_t = 1)]
    warehouses: u32,
    /// How much to load per warehouse.
    #[arg(long, value_enum, default_value_t = TpccScale::Spec)]
    scale: TpccScale,
    /// Percent of NewOrders in the mix (the rest are Payments).
    #[arg(long, default_value_t = 50)]
    new_order_percent: u32,
    /// Partitions of every table.
    #[arg(long, default_value_t = PARTITIONS)]
    partitions: u32,
    /// The table whose partitions --moves and --rebalance-after move.
    #[arg(long, default_value = tpcc::schema::STOCK)]
    move_table: String,
    #[command(flatten)]
    moves: MoveArgs,
}

#[derive(Args)]
struct MovieArgs {
    #[arg(long, default_value_t = movie::Scale::default().users)]
    users: u64,
    #[arg(long, default_value_t = movie::Scale::default().movies)]
    movies: u64,
    /// Partitions of every service.
    #[arg(long, default_value_t = PARTITIONS)]
    partitions: u32,
}

#[derive(Args)]
struct TravelArgs {
    #[arg(long, default_value_t = travel::Scale::default().hotels)]
    hotels: u64,
    #[arg(long, default_value_t = travel::Scale::default().flights)]
    flights: u64,
    #[arg(long, default_value_t = travel::Scale::default().users)]
    users: u64,
    /// Rooms per hotel.
    #[arg(long, default_value_t = travel::Scale::default().rooms_per_hotel)]
    rooms: i64,
    /// Seats per flight.
    #[arg(long, default_value_t = travel::Scale::default().seats_per_flight)]
    seats: i64,
    /// Partitions of every service but geo and recommend.
    #[arg(long, default_value_t = PARTITIONS)]
    partitions: u32,
    /// Partitions of the geo and recommendation data (a search's fan-out);
    /// default: one per shard, or the daemon's with --connect.
    #[arg(long)]
    geo_partitions: Option<u32>,
}

#[derive(Args)]
struct PlotArgs {
    /// JSON lines written by `--out` (other lines are skipped).
    #[arg(long)]
    input: PathBuf,
    /// Directory for the SVG files.
    #[arg(long, default_value = "docs")]
    out: PathBuf,
}

/// Runs `styx bench …`.
pub fn run(args: BenchArgs) -> ExitCode {
    let result = match args.command {
        BenchCommand::Ycsbt { run, workload: w } => {
            if let Some(z) = w.zipf
                && !(z > 0.0 && z < 1.0)
            {
                return usage(&format!("--zipf must be in (0, 1), got {z}"));
            }
            if w.keys < 2 || w.keys > u64::from(u32::MAX) {
                return usage("--keys must be in 2..=4294967295");
            }
            if w.load && run.connect.is_none() {
                return usage("--load deposits over the wire: it needs --connect");
            }
            let deposit_keys = w.load.then_some(w.keys);
            if w.hot_shard
                .is_some_and(|s| s >= run.shards.unwrap_or_else(default_shards))
            {
                return usage("--hot-shard must name one of the shards");
            }
            if w.hot_shard.is_some() && w.zipf.is_none() && !w.hot_roots {
                return usage("--hot-shard places the Zipf ranks: it needs --zipf (or --hot-roots)");
            }
            if w.hot_roots && w.hot_shard.is_none() {
                return usage("--hot-roots puts the roots on the --hot-shard: it needs one");
            }
            if w.hot_roots && run.connect.is_some() {
                return usage("--hot-roots skews the in-process generators; not with --connect");
            }
            let plan = match move_plan(styx_bench::ycsbt::OPERATOR, w.partitions, &w.moves, &run) {
                Ok(plan) => plan,
                Err(e) => return usage(&e),
            };
            let workload = Ycsbt {
                keys: w.keys,
                zipf: w.zipf,
                partitions: w.partitions,
                api: run.api,
                hot_shard: w.hot_shard,
                hot_roots: w.hot_roots,
            };
            execute(workload, run, 1_000, deposit_keys, plan)
        }
        BenchCommand::Tpcc { run, workload: w } => {
            if w.warehouses == 0 {
                return usage("--warehouses must be at least 1");
            }
            if w.new_order_percent > 100 {
                return usage("--new-order-percent must be at most 100");
            }
            let scale = match w.scale {
                TpccScale::Spec => tpcc::Scale::spec(w.warehouses),
                TpccScale::Small => tpcc::Scale::small(w.warehouses),
            };
            let workload = Tpcc {
                scale,
                mix: tpcc::Mix {
                    new_order: w.new_order_percent,
                    ..tpcc::Mix::default()
                },
                partitions: w.partitions,
                load_seed: 1,
                api: run.api,
            };
            if !tpcc::schema::TABLES.contains(&w.move_table.as_str()) {
                return usage(&format!(
                    "--move-table must be one of {}",
                    tpcc::schema::TABLES.join(", ")
                ));
            }
            let plan = match move_plan(&w.move_table, w.partitions, &w.moves, &run) {
                Ok(plan) => plan,
                Err(e) => return usage(&e),
            };
            execute(workload, run, 1, None, plan)
        }
        BenchCommand::Movie { run, workload: w } => {
            if w.users == 0 || w.movies == 0 {
                return usage("--users and --movies must be at least 1");
            }
            let workload = Movie {
                scale: movie::Scale {
                    users: w.users,
                    movies: w.movies,
                },
                partitions: w.partitions,
                api: run.api,
            };
            execute(workload, run, 1_000, None, None)
        }
        BenchCommand::Travel { run, workload: w } => {
            if w.hotels == 0 || w.flights == 0 || w.users == 0 {
                return usage("--hotels, --flights and --users must be at least 1");
            }
            let shards = run.shards.unwrap_or_else(default_shards);
            let workload = Travel {
                scale: travel::Scale {
                    hotels: w.hotels,
                    flights: w.flights,
                    users: w.users,
                    rooms_per_hotel: w.rooms,
                    seats_per_flight: w.seats,
                },
                partitions: w.partitions,
                geo_partitions: w
                    .geo_partitions
                    .unwrap_or(if run.connect.is_some() {
                        GEO_PARTITIONS
                    } else {
                        u32::from(shards)
                    })
                    .max(1),
                api: run.api,
            };
            execute(workload, run, 1_000, None, None)
        }
        BenchCommand::Handoff(h) => return handoff_cmd(h),
        BenchCommand::Handover(h) => return handover_cmd(h),
        BenchCommand::Plot(p) => return plot_cmd(p),
    };
    result.unwrap_or_else(|message| {
        eprintln!("error: {message}");
        ExitCode::FAILURE
    })
}

/// `styx bench handoff`: each hand-off's steps, and their medians.
fn handoff_cmd(args: HandoffArgs) -> ExitCode {
    if args.accounts < 2 || args.rounds == 0 {
        return usage("--accounts must be at least 2 and --rounds at least 1");
    }
    let timings = styx_bench::handoff::run(args.accounts, args.rounds);
    let median = |f: &dyn Fn(&styx_bench::handoff::Timing) -> f64| {
        let mut v: Vec<f64> = timings.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let pause = median(&|t| t.pause_us());
    let entities = median(&|t| t.entities as f64);
    let bytes = median(&|t| t.bytes as f64);
    if args.json {
        let runs: Vec<serde_json::Value> = timings
            .iter()
            .map(|t| {
                serde_json::json!({
                    "entities": t.entities,
                    "bytes": t.bytes,
                    "hand_off_us": t.hand_off_us,
                    "encode_us": t.encode_us,
                    "decode_us": t.decode_us,
                    "take_over_us": t.take_over_us,
                    "pause_us": t.pause_us(),
                })
            })
            .collect();
        let out = serde_json::json!({
            "workload": "handoff",
            "accounts": args.accounts,
            "rounds": args.rounds,
            "median_entities": entities,
            "median_bytes": bytes,
            "median_pause_us": pause,
            "runs": runs,
        });
        println!("{out}");
    } else {
        println!(
            "handoff · {} accounts on 2 shards · {} hand-offs, the shard going back and forth",
            args.accounts, args.rounds
        );
        println!(
            "{:>9} {:>11} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "entities", "bytes", "take ms", "encode ms", "decode ms", "rebuild ms", "pause ms"
        );
        for t in &timings {
            println!(
                "{:>9} {:>11} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2}",
                t.entities,
                t.bytes,
                t.hand_off_us / 1e3,
                t.encode_us / 1e3,
                t.decode_us / 1e3,
                t.take_over_us / 1e3,
                t.pause_us() / 1e3
            );
        }
        println!(
            "median pause {:.2} ms for {entities:.0} entities ({:.0} ns each), {:.1} MB to send",
            pause / 1e3,
            pause * 1e3 / entities.max(1.0),
            bytes / 1e6
        );
    }
    ExitCode::SUCCESS
}

/// `styx bench handover`: shards changing nodes under load.
fn handover_cmd(args: HandoverArgs) -> ExitCode {
    if args.accounts < 8 || args.handovers == 0 || args.every_ms == 0 || args.in_flight == 0 {
        return usage("--accounts must be at least 8, and --handovers, --every-ms and --in-flight at least 1");
    }
    if args.spare && args.data_dir.is_some() {
        return usage("--spare runs in memory only: a durable node keeps a shard");
    }
    let r = styx_bench::handover::run(styx_bench::handover::Params {
        accounts: args.accounts,
        handovers: args.handovers,
        every: std::time::Duration::from_millis(args.every_ms),
        in_flight: args.in_flight,
        rate: args.rate,
        spare: args.spare,
        data_dir: args.data_dir.clone(),
    });
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    // The commit rate away from handovers: buckets more than 200 ms before
    // or 1 s after one, past the first and before the last second.
    let bucket_s = |i: usize| i as f64 * 0.01;
    let near = |t: f64| {
        r.handovers
            .iter()
            .any(|(a, _, _)| t + 0.2 >= *a as f64 / 1e6 && t <= *a as f64 / 1e6 + 1.0)
    };
    let steady_rate = median(
        r.buckets
            .iter()
            .enumerate()
            .filter(|(i, _)| bucket_s(*i) > 0.2 && bucket_s(*i) + 0.2 < r.seconds && !near(bucket_s(*i)))
            .map(|(_, b)| *b)
            .collect(),
    );
    let gap_ms = median(r.handovers.iter().map(|h| h.1 as f64 / 1e3).collect());
    let change_ms = median(r.handovers.iter().map(|h| h.2 as f64 / 1e3).collect());
    if args.json {
        let out = serde_json::json!({
            "workload": "handover",
            "accounts": args.accounts,
            "handovers": args.handovers,
            "in_flight": args.in_flight,
            "rate": args.rate,
            "spare": args.spare,
            "durable": args.data_dir.is_some(),
            "unsent": r.unsent,
            "committed": r.committed,
            "seconds": r.seconds,
            "throughput": r.committed as f64 / r.seconds,
            "steady_rate": steady_rate,
            "entities_moved": r.entities,
            "median_gap_ms": gap_ms,
            "median_round_change_ms": change_ms,
            "steady_p50_us": r.steady.0,
            "steady_p99_us": r.steady.1,
            "all_p50_us": r.all.0,
            "all_p99_us": r.all.1,
            "per_handover": r.handovers.iter().map(|(a, g, c)| serde_json::json!({
                "asked_us": a, "gap_us": g, "round_change_us": c,
            })).collect::<Vec<_>>(),
            "rate_per_10ms": r.buckets,
        });
        println!("{out}");
    } else {
        println!(
            "handover · {} accounts on 4 shards, 2 nodes{}{} · {} handovers of shard 1 ({} entities) · {}",
            args.accounts,
            if args.spare { " (node 1 a spare at first)" } else { "" },
            if args.data_dir.is_some() { ", durable" } else { "" },
            args.handovers,
            r.entities,
            match args.rate {
                Some(rate) => format!("open loop at {rate}/s (at most {} in flight per shard)", args.in_flight),
                None => format!("{} in flight per shard", args.in_flight),
            }
        );
        println!("{:>10} {:>10} {:>16}", "asked s", "gap ms", "round change ms");
        for (a, g, c) in &r.handovers {
            println!(
                "{:>10.2} {:>10.1} {:>16.1}",
                *a as f64 / 1e6,
                *g as f64 / 1e3,
                *c as f64 / 1e3
            );
        }
        println!(
            "committed {} in {:.2} s ({:.0}/s; {:.0}/s away from handovers); latency p50/p99 {}/{} µs away from handovers, {}/{} µs overall",
            r.committed,
            r.seconds,
            r.committed as f64 / r.seconds,
            steady_rate,
            r.steady.0,
            r.steady.1,
            r.all.0,
            r.all.1
        );
        if r.unsent > 0 {
            println!(
                "{} transfers due were never sent (held by the in-flight cap, or due in the last pump's gap before the end)",
                r.unsent
            );
        }
    }
    ExitCode::SUCCESS
}

fn usage(message: &str) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(2)
}

fn default_shards() -> u16 {
    runner::Params::default().shards
}

/// The moves of `operator`'s `partitions` partitions: back and forth
/// (`--moves`) or one rebalance.
fn move_plan(operator: &str, partitions: u32, w: &MoveArgs, run: &RunArgs) -> Result<Option<Plan>, String> {
    let shards = run.shards.unwrap_or_else(default_shards);
    let wanted = w.moves > 0 || w.rebalance_after.is_some();
    if !wanted {
        return Ok(None);
    }
    if run.connect.is_some() {
        return Err("--moves and --rebalance-after run in-process only".into());
    }
    if shards < 2 {
        return Err("moving partitions needs at least 2 shards".into());
    }
    let into_window = |s: f64| -> Result<Duration, String> {
        if !(s >= 0.0 && s < run.duration) {
            return Err(format!("{s} s is not inside the measured {} s", run.duration));
        }
        Ok(Duration::from_secs_f64(run.warmup + s))
    };
    match (w.moves, w.rebalance_after) {
        (0, Some(after)) => Ok(Some(Plan::rebalance(operator, into_window(after)?))),
        (moves, None) => {
            if w.move_partitions == 0 || w.move_partitions > partitions {
                return Err(format!("--move-partitions must be in 1..={partitions}"));
            }
            if moves > styx_bench::moves::STEPS_MAX || w.move_every_ms == 0 {
                return Err(format!(
                    "--moves must be at most {} and --move-every-ms positive",
                    styx_bench::moves::STEPS_MAX
                ));
            }
            let first = into_window(w.moves_after.unwrap_or(run.duration / 3.0))?;
            Ok(Some(Plan::back_and_forth(
                operator,
                shards,
                w.move_partitions,
                moves,
                first,
                Duration::from_millis(w.move_every_ms),
            )))
        }
        (_, Some(_)) => Err("--moves and --rebalance-after: one at a time".into()),
    }
}

/// Runs `workload` in-process, or against `--connect`; `deposit_keys`:
/// YCSB-T's `--load`.
fn execute<W: Workload>(
    workload: W,
    args: RunArgs,
    in_flight_default: usize,
    deposit_keys: Option<u64>,
    moves: Option<Plan>,
) -> Result<ExitCode, String> {
    let in_flight = args.in_flight.unwrap_or(in_flight_default);
    if in_flight == 0 {
        return Err("--in-flight must be at least 1".into());
    }
    if !(args.duration > 0.0 && args.warmup >= 0.0 && args.serial_s >= 0.0) {
        return Err("--duration must be positive, --warmup and --serial-s not negative".into());
    }
    let load = match args.rate {
        Some(rate) if rate > 0.0 && rate.is_finite() => Load::Open { rate },
        Some(rate) => return Err(format!("--rate must be positive, got {rate}")),
        None => Load::Closed { in_flight },
    };
    let params = runner::Params {
        shards: args.shards.unwrap_or_else(default_shards),
        threads: args.threads,
        warmup: Duration::from_secs_f64(args.warmup),
        duration: Duration::from_secs_f64(args.duration),
        load,
        epoch_txns_max: args.epoch_txns,
        epoch_gather_us: args.epoch_gather_us,
        step_messages_max: args.step_messages,
        move_share_entities: args.move_share,
        move_share_min_entities: args.move_share_min,
        move_share_per_ms: args.move_share_per_ms,
        seed: args.seed,
        serial: if args.no_serial {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(args.serial_s)
        },
        progress: !args.quiet,
        moves,
    };
    let workload = Arc::new(workload);
    if args.threads.is_some() && args.connect.is_some() {
        return Err("--threads sets how this process runs its shards: a daemon takes its own --threads".into());
    }
    if args.threads == Some(0) {
        return Err("--threads must be at least 1".into());
    }
    if args.exactly_once && args.connect.is_none() {
        return Err("--exactly-once names requests on the wire: it needs --connect".into());
    }
    let report = match &args.connect {
        Some(addr) => {
            let remote = Remote {
                addr: addr.clone(),
                connections: args.connections,
                load,
                warmup: params.warmup,
                duration: params.duration,
                seed: args.seed,
                exactly_once: args.exactly_once,
                deposit_keys,
                serial: params.serial,
                progress: params.progress,
            };
            eprintln!(
                "{} against {addr}: {} connections, {}, {:.0}s warm-up + {:.0}s measured…",
                workload.name(),
                args.connections,
                describe(load),
                args.warmup,
                args.duration
            );
            remote::run(workload, &remote)?
        }
        None => in_process(workload, &params, &args)?,
    };
    print(&report, args.json, args.out.as_deref())?;
    for e in &report.invariant_errors {
        eprintln!("invariant violated: {e}");
    }
    Ok(if report.invariants_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn describe(load: Load) -> String {
    match load {
        Load::Open { rate } => format!("open loop at {rate:.0}/s"),
        Load::Closed { in_flight } => format!("closed loop, {in_flight} in flight per lane"),
    }
}

fn in_process<W: Workload>(workload: Arc<W>, params: &runner::Params, args: &RunArgs) -> Result<Report, String> {
    eprintln!(
        "{}: {} shards, {}, {:.0}s warm-up + {:.0}s measured…",
        workload.name(),
        params.shards,
        describe(params.load),
        args.warmup,
        args.duration
    );
    runner::run(workload, params).map_err(|e| e.to_string())
}

fn print(report: &Report, json: bool, out: Option<&std::path::Path>) -> Result<(), String> {
    if json {
        eprint!("{}", report.table());
        println!("{}", report.to_json());
    } else {
        print!("{}", report.table());
    }
    if let Some(path) = out {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        writeln!(f, "{}", report.to_json()).map_err(|e| format!("cannot append to {}: {e}", path.display()))?;
    }
    Ok(())
}

fn plot_cmd(p: PlotArgs) -> ExitCode {
    let drawn = plot::read_reports(&p.input).and_then(|reports| {
        let files = plot::plot_all(&reports, &p.out)?;
        if files.is_empty() {
            return Err(plot::Error::Nothing(p.input.clone()));
        }
        Ok(files)
    });
    match drawn {
        Ok(files) => {
            for f in files {
                println!("{}", f.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
