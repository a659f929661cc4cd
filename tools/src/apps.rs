//! The applications `styxd` ships with, by name.

use std::sync::Arc;
use styx_bench::{deathstar, tpcc, ycsbt};
use styx_engine::App;

/// Names `--app` accepts.
pub const NAMES: [&str; 4] = ["ycsbt", "tpcc", "movie", "travel"];
/// Partitions of every operator of the built-in applications (travel's geo
/// and recommendation data aside). A client that reads a whole state
/// (`styx verify`, `styx bench --connect`) pages through this many.
pub const PARTITIONS: u32 = 64;
/// Partitions of travel's geo and recommendation data: a search's fan-out.
pub const GEO_PARTITIONS: u32 = 16;

/// The built-in application called `name`.
pub fn by_name(name: &str) -> Option<Arc<App>> {
    Some(match name {
        "ycsbt" => ycsbt::app(PARTITIONS),
        "tpcc" => tpcc::app(PARTITIONS),
        "movie" => deathstar::movie::app(PARTITIONS),
        "travel" => deathstar::travel::app(PARTITIONS, GEO_PARTITIONS),
        _ => return None,
    })
}
