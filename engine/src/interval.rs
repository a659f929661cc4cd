//! The snapshot interval as logged state.
//!
//! When snapshots are due decides more than when files are written: a due
//! snapshot holds queued partition moves until the copies under way switch
//! (`shard::moves`), and a handover waits behind moves, so the epochs at
//! which moves start and shards change nodes follow the snapshot votes.
//! Replay must therefore vote as the live run did, with the interval the
//! live run had — not the recovering process's, which a restart may have
//! changed (`styxd --snapshot-interval-ms`). So the interval is logged: a
//! shard that logs its input seals, in the first batch it logs after it
//! starts (fresh, restored, or rebuilt from a hand-off), a request carrying
//! its configured interval, and every shard applies such a request where
//! it is sealed, live and in replay: it votes by the interval of its own
//! log (a snapshot's machine state carries the interval in force). A log
//! written before intervals were logged leaves the shard's configured one.

use crate::codec::Payload;
use crate::config::Request;
use crate::ids::{Address, FnId, OpId};

/// The function index of the interval's request: below the handover's and
/// the move's, above any operator's functions.
pub const SNAPSHOT_INTERVAL_FUNCTION_INDEX: u16 = u16::MAX - 2;

const _: () = assert!(crate::app::FUNCTIONS_PER_OPERATOR_MAX < SNAPSHOT_INTERVAL_FUNCTION_INDEX as usize);

/// A shard's snapshot interval from the epoch its request is sealed in
/// (microseconds; 0: no snapshots).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotInterval(pub u64);

impl SnapshotInterval {
    /// The request a shard seals for it: no client sends one (a shard
    /// refuses it at submit), so it is never answered; it names operator
    /// 0's partition 0 as its address, as every application has one.
    pub fn request(self) -> Request {
        Request {
            function: FnId {
                op: OpId(0),
                index: SNAPSHOT_INTERVAL_FUNCTION_INDEX,
            },
            address: Address::Partition(0),
            args: Payload::encode(&self.0),
            client: None,
        }
    }

    /// The interval a request sets, if it is such a request.
    pub fn of(request: &Request) -> Option<Result<SnapshotInterval, String>> {
        if request.function.index != SNAPSHOT_INTERVAL_FUNCTION_INDEX {
            return None;
        }
        Some(match (&request.address, request.args.decode::<u64>()) {
            (Address::Partition(_), Ok(us)) => Ok(SnapshotInterval(us)),
            (Address::Entity(_), _) => Err("a snapshot interval names a partition, not an entity".to_string()),
            (_, Err(e)) => Err(format!("a snapshot interval's argument is its microseconds (u64): {e}")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interval_round_trips_through_its_request() {
        let r = SnapshotInterval(250_000).request();
        assert_eq!(SnapshotInterval::of(&r), Some(Ok(SnapshotInterval(250_000))));
        assert_eq!(crate::Move::of(&r), None);
        assert_eq!(crate::Handover::of(&r), None);
        let mut bad = r.clone();
        bad.args = Payload::encode(&1u8);
        assert!(SnapshotInterval::of(&bad).unwrap().unwrap_err().contains("u64"));
        bad.args = r.args.clone();
        bad.address = Address::Entity(crate::Key::from(1u64));
        assert!(SnapshotInterval::of(&bad).unwrap().is_err());
        let mut other = r;
        other.function.index = 0;
        assert_eq!(SnapshotInterval::of(&other), None);
    }
}
