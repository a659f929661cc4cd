//! `styxd`: the engine as a local daemon, serving the built-in applications.
//!
//! `styxd` alone serves YCSB-T on 127.0.0.1:7400 with its data in ./data;
//! `styxd --help` lists every setting. Pick another built-in application
//! with `STYX_APP=tpcc|movie|travel` (or `--app` as the first argument).
//! `--preload WORKLOAD` implies `--app WORKLOAD` when no application is named.

use std::process::ExitCode;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The value of `--flag VALUE` or `--flag=VALUE`, if given.
fn flag(args: &[String], flag: &str) -> Option<String> {
    let prefix = format!("{flag}=");
    args.iter().enumerate().find_map(|(i, a)| {
        if a == flag {
            args.get(i + 1).cloned()
        } else {
            a.strip_prefix(&prefix).map(str::to_string)
        }
    })
}

fn main() -> ExitCode {
    // `--app NAME` is taken here; the rest are the daemon's settings.
    let mut args: Vec<String> = std::env::args().collect();
    let preload = flag(&args, "--preload").or_else(|| std::env::var("STYX_PRELOAD").ok());
    let mut name = std::env::var("STYX_APP")
        .ok()
        .or(preload)
        .unwrap_or_else(|| "ycsbt".into());
    if let Some(i) = args.iter().position(|a| a == "--app") {
        if i + 1 >= args.len() {
            eprintln!("styxd: --app needs one of {:?}", styx_tools::apps::NAMES);
            return ExitCode::from(2);
        }
        name = args.remove(i + 1);
        args.remove(i);
    }
    let Some(app) = styx_tools::apps::by_name(&name) else {
        eprintln!(
            "styxd: unknown application {name:?}; one of {:?}",
            styx_tools::apps::NAMES
        );
        return ExitCode::from(2);
    };
    styx_tools::daemon::main_with_args(app, args)
}
