//! `styxd`: the engine as a local daemon, serving a built-in application.
//!
//! The embeddable daemon (`styx_daemon`) with `styxd`'s own flags: `--app
//! ycsbt|tpcc|movie|travel` (or `STYX_APP`) picks the application, and
//! `--preload WORKLOAD` writes a benchmark's initial state before serving
//! (see `styx_tools::preload`); `--preload` alone implies its application.
//! `styxd` alone serves YCSB-T on 127.0.0.1:7400 with its data in ./data;
//! `styxd --help` lists every setting.

use std::process::ExitCode;
use styx_daemon::Program;
use styx_tools::preload::Styxd;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let program = Program {
        name: "styxd".into(),
        about: "styxd: the Styx engine as a local daemon, serving a built-in application (--app) and \
                preloading a benchmark's state (--preload)"
            .into(),
        on_quiet: Some(styx_tools::memory::collect),
        on_background: Some(styx_tools::memory::background),
    };
    let (settings, styxd) = match styx_daemon::parse::<Styxd>(&program, std::env::args().collect()) {
        Ok(parsed) => parsed,
        Err(code) => return code,
    };
    styx_daemon::serve(&program, styxd.app(), settings, &styxd)
}
