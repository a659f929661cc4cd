//! Wall-clock time for the shards, read once per loop iteration.
//!
//! The core never reads a clock: the driver passes it the time. Shards of one
//! process share one origin so their timestamps compare.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Microseconds since the Unix epoch, advancing monotonically.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    origin: Instant,
    origin_us: u64,
}

impl Clock {
    pub fn new() -> Clock {
        let origin_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        Clock {
            origin: Instant::now(),
            origin_us,
        }
    }

    #[inline]
    pub fn now_us(&self) -> u64 {
        self.origin_us + self.origin.elapsed().as_micros() as u64
    }
}

impl Default for Clock {
    fn default() -> Clock {
        Clock::new()
    }
}
