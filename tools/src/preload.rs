//! What `styxd` adds to the embeddable daemon (`styx_daemon`): a built-in
//! application chosen by name, and `--preload`.
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

use crate::apps;
use crate::workloads::{self, Knobs, Name, Visit};
use std::sync::Arc;
use std::time::Instant;
use styx_bench::runner::Workload;
use styx_daemon::{Extension, Start};
use styx_engine::App;

/// `styxd`'s own flags, after those of every daemon.
#[derive(Debug, clap::Args)]
pub struct Styxd {
    /// The built-in application to serve [default: the preloaded
    /// workload's, else ycsbt].
    #[arg(long, env = "STYX_APP", value_enum)]
    pub app: Option<Name>,
    /// Before serving, write this built-in workload's initial state into a
    /// fresh data directory (skipped on a restart of the same preload,
    /// refused on other state). The application served must be the
    /// workload's.
    #[arg(long, env = "STYX_PRELOAD", value_enum)]
    pub preload: Option<Name>,
    #[command(flatten)]
    pub knobs: Knobs,
}

impl Styxd {
    /// The application to serve: `--app`, else the preloaded workload's,
    /// else YCSB-T.
    pub fn app(&self) -> Arc<App> {
        let name = self.app.or(self.preload).unwrap_or(Name::Ycsbt);
        apps::by_name(name.as_str()).expect("every workload name is an application")
    }
}

impl Extension for Styxd {
    fn prepare(&self, start: &Start<'_>) -> Result<(), String> {
        match self.preload {
            Some(name) => self.knobs.visit(name, Preload { start })?,
            None => Ok(()),
        }
    }
}

/// `--preload`: the workload's initial state as the data directory's first
/// snapshot (see the module comment).
struct Preload<'a, 'b> {
    start: &'a Start<'b>,
}

impl Visit for Preload<'_, '_> {
    type Out = Result<(), String>;

    fn visit<W: Workload>(self, workload: W) -> Result<(), String> {
        let wapp = workload.app();
        if workloads::layout(&wapp) != workloads::layout(self.start.app) || wapp.name() != self.start.app.name() {
            return Err(format!(
                "--preload {} needs the application {:?}, this daemon serves {:?} (start styxd with --app {})",
                workload.name(),
                wapp.name(),
                self.start.app.name(),
                workload.name()
            ));
        }
        let label = workloads::label(&workload);
        let fresh = styx_runtime::preload::is_fresh(self.start.dir).map_err(|e| format!("preload: {e}"))?;
        if !fresh {
            let found = styx_runtime::preload::marker(self.start.dir).map_err(|e| format!("preload: {e}"))?;
            if found.as_deref() == Some(label.as_str()) {
                tracing::info!(preload = %label, "the data directory already holds this preload: recovering it");
                return Ok(());
            }
            return Err(format!(
                "--preload {label}: the data directory {} already holds {}; use an empty directory",
                self.start.dir.root().display(),
                found.map_or("other state".to_string(), |f| format!("the preload {f}"))
            ));
        }
        let started = Instant::now();
        tracing::info!(preload = %label, shards = self.start.shards, "preloading");
        let load =
            |emit: &mut dyn FnMut(styx_engine::OpId, styx_engine::Key, styx_engine::Value)| workload.load(&wapp, emit);
        let done = styx_runtime::preload::write(
            self.start.dir,
            &wapp,
            self.start.shards,
            self.start.local.clone(),
            &label,
            &load,
        )
        .map_err(|e| format!("preload: {e}"))?;
        // The state was built and written from this thread, which now only
        // waits for the daemon to stop.
        crate::memory::collect();
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
