//! `styx`: the command-line tool.
//!
//! `styx bench WORKLOAD` runs a benchmark (in-process, or against a
//! daemon with `--connect`) and prints its figures; `styx bench plot` draws
//! them (see `bench_cmd`). `call`, `get`, `status`, `rebalance`, `repl` and
//! `verify` talk to a running daemon; `inspect` reads a data directory (see `cli`).

mod bench_cmd;
mod cli;
mod nodes;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

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
    Bench(bench_cmd::BenchArgs),
    /// Run one transaction: `styx call OP KEY FN [TYPE:VALUE…]`.
    Call(cli::CallArgs),
    /// Print one entity's state.
    Get(cli::GetArgs),
    /// Print the daemon's shards, epoch, rates, log and snapshot positions.
    Status(cli::StatusArgs),
    /// Move a partition to another shard: `styx rebalance OP PARTITION SHARD`,
    /// or those that even out the shards' load: `styx rebalance OP --auto`.
    Rebalance(cli::RebalanceArgs),
    /// Hand a shard to another node of a cluster: `styx handover SHARD NODE`.
    Handover(cli::HandoverArgs),
    /// Fill a node of a cluster with shards, or drain it of them:
    /// `styx node fill NODE`, `styx node drain NODE`.
    Node {
        #[command(subcommand)]
        what: cli::NodeCommand,
    },
    /// Read commands from stdin (call, get, status, ping) on one connection.
    Repl(cli::ReplArgs),
    /// Check a running daemon's invariants; exits non-zero on a violation.
    Verify(cli::VerifyArgs),
    /// Describe a log or snapshots and verify every checksum (offline).
    Inspect {
        #[command(subcommand)]
        what: cli::InspectCommand,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Bench(args) => bench_cmd::run(args),
        Command::Call(args) => cli::call(args),
        Command::Get(args) => cli::get(args),
        Command::Status(args) => cli::status(args),
        Command::Rebalance(args) => cli::rebalance(args),
        Command::Handover(args) => cli::handover(args),
        Command::Node { what } => cli::node(what),
        Command::Repl(args) => cli::repl(args),
        Command::Verify(args) => cli::verify(args),
        Command::Inspect { what } => cli::inspect(what),
    }
}
