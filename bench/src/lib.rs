//! Workloads and the programs that measure the engine with them.
//!
//! - [`ycsbt`], [`tpcc`], [`deathstar`]: the applications and their loads;
//! - [`runner`]: runs any workload in-process on the production runtime;
//! - [`inproc`]: the four workloads as the runner drives them;
//! - [`remote`]: runs any workload against a running daemon or cluster
//!   over TCP (`styx bench … --connect`);
//! - [`report`]: the JSON object and table every benchmark prints;
//! - [`plot`]: SVG plots from reports (latency against load, throughput
//!   over time).

#![deny(unsafe_op_in_unsafe_fn)]

pub mod deathstar;
pub mod inproc;
pub mod plot;
pub mod remote;
pub mod report;
pub mod runner;
pub mod sys;
pub mod tpcc;
pub mod ycsbt;
