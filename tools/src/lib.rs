//! The binaries' shared code: the applications `styxd` ships with, the
//! workloads by name (for `styxd --preload`, `styx bench --connect` and
//! `styx verify`), what `styxd` adds to the embeddable daemon, and `styx
//! verify`'s checks. The load generators are `styx_bench`'s.

pub mod apps;
pub mod memory;
pub mod preload;
pub mod schema_json;
pub mod verify;
pub mod workloads;
