//! `styx`: the command-line tool.
//!
//! `styx bench WORKLOAD` runs a benchmark in-process and prints its
//! figures; `styx bench plot` draws them (see `bench_cmd`).

mod bench_cmd;

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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Bench(args) => bench_cmd::run(args),
    }
}
