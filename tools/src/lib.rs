//! The binaries' shared code: the daemon (`styxd`, and daemons users build
//! around their own functions) and the applications it ships with.

pub mod apps;
pub mod claim;
pub mod daemon;
pub mod pool;
pub mod remote;
pub mod remote_workload;
pub mod workloads;
