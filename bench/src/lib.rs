//! Workloads and the programs that measure the engine with them.
//!
//! - [`ycsbt`], [`tpcc`], [`deathstar`]: the applications and their loads;
//! - [`runner`]: runs any workload in-process on the production runtime;
//! - [`inproc`]: the four workloads as the runner drives them;
//! - [`moves`]: partitions moved while a workload runs, and their cost;
//! - [`remote`]: runs any workload against a running daemon or cluster
//!   over TCP (`styx bench … --connect`);
//! - [`report`]: the JSON object and table every benchmark prints;
//! - [`check`]: what the workloads' checkers share (the state, violations);
//! - [`plot`]: SVG plots from reports (latency against load, throughput
//!   over time).

#![deny(unsafe_op_in_unsafe_fn)]

pub mod check;
pub mod deathstar;
pub mod handoff;
pub mod handover;
pub mod inproc;
pub mod moves;
pub mod plot;
pub mod remote;
pub mod report;
pub mod runner;
pub mod sys;
pub mod tpcc;
pub mod ycsbt;

use std::fmt;
use std::str::FromStr;

/// How a benchmark application is written: typed entities (the default,
/// what users write) or closures registered by name (the API typed
/// entities expand to), kept so that one run can measure both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Api {
    #[default]
    Typed,
    Closures,
}

impl Api {
    pub const NAMES: [&str; 2] = ["typed", "closures"];

    pub fn name(self) -> &'static str {
        match self {
            Api::Typed => "typed",
            Api::Closures => "closures",
        }
    }
}

impl fmt::Display for Api {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Api {
    type Err = String;

    fn from_str(s: &str) -> Result<Api, String> {
        match s {
            "typed" => Ok(Api::Typed),
            "closures" => Ok(Api::Closures),
            _ => Err(format!("unknown API {s:?}: expected typed or closures")),
        }
    }
}
