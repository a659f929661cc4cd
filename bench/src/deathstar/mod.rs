//! DeathStarBench's movie review and travel reservation applications, as
//! the Beldi authors adapted them to stateful functions (benchmarks.md).
//!
//! - [`movie`]: `compose_review` gathers a review's parts from several
//!   services into the request's compose-review entity, then stores the
//!   review and appends it to the user's and the movie's lists;
//! - [`travel`]: hotel search and recommendation (scans of geo partitions),
//!   user login, and reservations of a hotel room and a flight seat.
//!
//! Each module has the same shape as [`crate::tpcc`]: `app`, `load`, a
//! `Generator` whose `next()` yields a [`styx_engine::Request`] (its root
//! entity is the request's `address`), and `check` on a final state.
//!
//! The original services are stateless processes in front of databases and
//! caches; here a service is an operator, its rows are entities, and a call
//! between services is a call between functions, inside one transaction.
//! Services that keep no state (unique ids, text, rating, the frontend) are
//! operators whose functions never touch their entity; they are keyed by
//! the request id, which spreads them over partitions like the processes
//! they stand for.
//!
//! Each service is a typed entity (`#[entity]` on its state, a unit struct
//! for the stateless ones) and calls the others through typed proxies and
//! senders. Functions that never touch their entity, read a row in place
//! or answer for a missing row take no self, so they access exactly what
//! the closure versions (`install_closures`, kept to measure one API
//! against the other: `styx bench movie --api closures`) access.

pub mod movie;
pub mod travel;

use crate::check::Violations;
pub use crate::check::{State, VIOLATIONS_MAX};

/// A password's salted hash, as stored by the user services.
pub fn password_hash(salt: u64, password: &str) -> u64 {
    styx_engine::mix64(salt ^ styx_engine::stable_hash(password.as_bytes()))
}
