//! The binaries' shared code: the applications `styxd` ships with, the
//! workloads by name (for `styxd --preload`, `styx bench --connect` and
//! `styx verify`), and what `styxd` adds to the embeddable daemon.

pub mod apps;
pub mod pool;
pub mod preload;
pub mod remote;
pub mod remote_workload;
pub mod workloads;
