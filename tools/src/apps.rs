//! The applications `styxd` ships with, by name.

use std::sync::Arc;
use styx_bench::{deathstar, tpcc, ycsbt};
use styx_engine::App;

/// Names `--app` accepts.
pub const NAMES: [&str; 4] = ["ycsbt", "tpcc", "movie", "travel"];

/// The built-in application called `name`.
pub fn by_name(name: &str) -> Option<Arc<App>> {
    Some(match name {
        "ycsbt" => ycsbt::app(64),
        "tpcc" => tpcc::app(64),
        "movie" => deathstar::movie::app(64),
        "travel" => deathstar::travel::app(64, 16),
        _ => return None,
    })
}
