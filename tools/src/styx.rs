//! `styx`: the command-line tool.
//!
//! `styx bench ycsbt` runs YCSB-T in-process and prints its figures.

use clap::{Parser, Subcommand, ValueEnum};
use std::process::ExitCode;
use std::time::Duration;
use styx_bench::inproc::{self, Load, Params};

/// mimalloc: the engine allocates a future and a frame per invocation, and
/// frees them on the same thread; glibc's malloc measured ~17% of the CPU.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "styx", version, about = "Transactional stateful functions: tools")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a benchmark and print its figures.
    Bench(BenchArgs),
}

#[derive(Clone, Copy, ValueEnum)]
enum Workload {
    /// YCSB-T bank transfers.
    Ycsbt,
}

#[derive(clap::Args)]
struct BenchArgs {
    workload: Workload,
    /// Shards (one per core); default: the number of CPUs.
    #[arg(long)]
    shards: Option<u16>,
    /// Accounts.
    #[arg(long, default_value_t = 10_000)]
    keys: u64,
    /// Creditor skew (Zipf theta in (0, 1)); uniform when absent.
    #[arg(long)]
    zipf: Option<f64>,
    /// Measured seconds (after the warm-up).
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Warm-up seconds, not measured.
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Offered load in transactions per second (open loop); without it the
    /// run is closed loop at maximum throughput.
    #[arg(long)]
    rate: Option<f64>,
    /// Requests outstanding per shard in closed loop.
    #[arg(long, default_value_t = 20_000)]
    in_flight: usize,
    /// Transactions one shard seals into one epoch.
    #[arg(long, default_value_t = 10_000)]
    epoch_txns: usize,
    /// Least µs between epoch starts (lets batches gather).
    #[arg(long, default_value_t = 0)]
    epoch_gather_us: u64,
    /// Local messages a shard handles per step before shipping batches.
    #[arg(long, default_value_t = styx_engine::Config::default().step_messages_max)]
    step_messages: usize,
    /// Partitions of the account operator.
    #[arg(long, default_value_t = 64)]
    partitions: u32,
    /// Seed of the load generator.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Skip measuring the serial ceiling.
    #[arg(long)]
    no_serial: bool,
    /// Print one JSON object on stdout (the table goes to stderr).
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Bench(args) => bench(args),
    }
}

fn bench(args: BenchArgs) -> ExitCode {
    let Workload::Ycsbt = args.workload;
    if let Some(z) = args.zipf
        && !(z > 0.0 && z < 1.0)
    {
        eprintln!("error: --zipf must be in (0, 1), got {z}");
        return ExitCode::from(2);
    }
    if args.keys < 2 {
        eprintln!("error: --keys must be at least 2");
        return ExitCode::from(2);
    }
    let params = Params {
        shards: args.shards.unwrap_or(Params::default().shards),
        keys: args.keys,
        zipf: args.zipf,
        warmup: Duration::from_secs_f64(args.warmup),
        duration: Duration::from_secs_f64(args.duration),
        load: match args.rate {
            Some(rate) => Load::Open { rate },
            None => Load::Closed {
                in_flight: args.in_flight,
            },
        },
        epoch_txns_max: args.epoch_txns,
        epoch_gather_us: args.epoch_gather_us,
        step_messages_max: args.step_messages,
        partitions: args.partitions,
        seed: args.seed,
        serial: !args.no_serial,
    };
    eprintln!(
        "ycsbt: {} shards, {} keys, {:.0}s warm-up + {:.0}s measured…",
        params.shards, params.keys, args.warmup, args.duration
    );
    let report = match inproc::run(&params) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    if args.json {
        eprint!("{}", report.table());
        println!("{}", report.to_json());
    } else {
        print!("{}", report.table());
    }
    for e in &report.invariant_errors {
        eprintln!("invariant violated: {e}");
    }
    if report.invariants_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
