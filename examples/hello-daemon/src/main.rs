//! A daemon serving your own functions: write each entity as a Rust struct
//! and its functions as the `async fn`s of its impl (here in `src/lib.rs`),
//! register them on an `App`, hand it to `styx_daemon::main`, and you get
//! everything `styxd` has — the TCP protocol, the input log, snapshots,
//! recovery, exactly-once clients, `/metrics` — with the same settings
//! (`--help` lists them).
//!
//! ```text
//! cargo run --release -p hello-daemon -- --data-dir ./hello-data
//! cargo run --release -p hello-daemon -- --schema      # what it serves
//! ```

use std::process::ExitCode;
use std::sync::Arc;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    styx_daemon::main(Arc::new(hello_daemon::app()))
}
