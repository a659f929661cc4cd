//! Workloads and the programs that measure the engine with them.
//!
//! - [`ycsbt`]: bank transfers (the application and its load);
//! - [`inproc`]: runs a workload in-process on the production runtime;
//! - [`report`]: the JSON object and table every benchmark prints.

#![deny(unsafe_op_in_unsafe_fn)]

pub mod deathstar;
pub mod inproc;
pub mod report;
pub mod sys;
pub mod tpcc;
pub mod ycsbt;
