//! What the workloads' checkers share: the whole state they read and a
//! bounded list of the violations they find.

use std::collections::BTreeMap;
use styx_engine::{Key, OpId, Value};

/// A whole state, as [`styx_engine::sim::Sim::state`] returns it (and the
/// remote runner reads it from a daemon).
pub type State = BTreeMap<(OpId, Key), Value>;

/// Violations a checker lists in full; beyond this many only their number
/// is given.
pub const VIOLATIONS_MAX: usize = 100;

/// A bounded list of violations.
#[derive(Default)]
pub(crate) struct Violations {
    list: Vec<String>,
    more: usize,
}

impl Violations {
    pub(crate) fn add(&mut self, v: String) {
        if self.list.len() < VIOLATIONS_MAX {
            self.list.push(v);
        } else {
            self.more += 1;
        }
    }

    pub(crate) fn finish(mut self) -> Vec<String> {
        if self.more > 0 {
            self.list.push(format!("... and {} more", self.more));
        }
        self.list
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn violations_beyond_the_bound_are_counted_not_listed() {
        let mut v = Violations::default();
        for i in 0..VIOLATIONS_MAX + 3 {
            v.add(format!("v{i}"));
        }
        let list = v.finish();
        assert_eq!(list.len(), VIOLATIONS_MAX + 1);
        assert_eq!(list.last().unwrap(), "... and 3 more");
        assert!(Violations::default().finish().is_empty());
    }
}
