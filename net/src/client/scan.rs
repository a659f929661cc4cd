//! Reading whole partitions over the wire with the built-in `__scan`
//! (`docs/protocol.md`, GET): a page at a time, each page its own
//! read-only transaction.
//!
//! A dump is therefore consistent per page, not across pages: it is meant
//! for a quiet server (a benchmark's final check, `styx verify`). Requests
//! carry client id 0: a scan writes nothing, so running one twice is
//! harmless and nothing needs remembering.

use super::{Client, Connection, Error, Outcome, Retry};
use crate::frame::Request;
use styx_engine::{Address, Key, Payload, SCAN_FUNCTION, SCAN_LIMIT_MAX};

/// One page: each entity's key and state bytes, and whether more follow.
pub type Page = (Vec<(Key, Vec<u8>)>, bool);

/// Partitions a dump reads at once (one page each in flight).
pub const DUMP_PARTITIONS_IN_FLIGHT_MAX: usize = 16;

fn scan_request(operator: &str, partition: u32, after: Option<&Key>, limit: u32) -> Request {
    Request {
        client: 0,
        seq: 0,
        ack: 0,
        operator: operator.to_string(),
        function: SCAN_FUNCTION.to_string(),
        target: Address::Partition(partition),
        args: Payload::encode(&(after.map(|k| k.as_bytes().to_vec()), limit)),
    }
}

/// The page a scan starting after `after` answered. A page that says more
/// follow but holds nothing, or whose keys are not in order after
/// `after`, is the server's error: a dump following it would stop short
/// or never end.
fn page_of(outcome: Outcome, after: Option<&Key>) -> Result<Page, Error> {
    let (rows, more) = outcome.decode::<(Vec<(Vec<u8>, Vec<u8>)>, bool)>()?;
    if more && rows.is_empty() {
        return Err(Error::Protocol {
            reason: "a scan page says more entities follow but holds none".into(),
        });
    }
    let mut last = after.map(Key::as_bytes);
    for (key, _) in &rows {
        if last.is_some_and(|l| key.as_slice() <= l) {
            return Err(Error::Protocol {
                reason: "a scan page's keys are not in order after the key it started from".into(),
            });
        }
        last = Some(key);
    }
    let rows = rows.into_iter().map(|(k, v)| (Key::from_bytes(&k), v)).collect();
    Ok((rows, more))
}

impl Connection {
    /// One page of `operator`'s partition `partition`: the entities whose
    /// keys sort after `after` (all when `None`), at most `limit` (capped
    /// at [`SCAN_LIMIT_MAX`]) in key order.
    pub async fn scan_partition(
        &self,
        operator: &str,
        partition: u32,
        after: Option<&Key>,
        limit: u32,
    ) -> Result<Page, Error> {
        page_of(
            self.request(scan_request(operator, partition, after, limit)).await?,
            after,
        )
    }

    /// Every entity of one partition, page by page, in key order.
    pub async fn dump_partition(&self, operator: &str, partition: u32) -> Result<Vec<(Key, Vec<u8>)>, Error> {
        let mut all: Vec<(Key, Vec<u8>)> = Vec::new();
        loop {
            let after = all.last().map(|(k, _)| k);
            let (rows, more) = self.scan_partition(operator, partition, after, SCAN_LIMIT_MAX).await?;
            all.extend(rows);
            // A page that says "more" holds an entity (`page_of`).
            if !more {
                return Ok(all);
            }
        }
    }

    /// Every entity of `operator` over its `partitions` partitions (the
    /// count the application declares), partitions in order, keys in order
    /// within each. Up to [`DUMP_PARTITIONS_IN_FLIGHT_MAX`] partitions are
    /// read at once.
    pub async fn dump(&self, operator: &str, partitions: u32) -> Result<Vec<(Key, Vec<u8>)>, Error> {
        let mut all = Vec::new();
        let mut next = 0;
        while next < partitions {
            let end = (next + DUMP_PARTITIONS_IN_FLIGHT_MAX as u32).min(partitions);
            let tasks: Vec<_> = (next..end)
                .map(|p| {
                    let (conn, operator) = (self.clone(), operator.to_string());
                    glommio::spawn_local(async move { conn.dump_partition(&operator, p).await })
                })
                .collect();
            for t in tasks {
                all.extend(t.await?);
            }
            next = end;
        }
        Ok(all)
    }
}

impl Client {
    /// [`Connection::scan_partition`] on the client's connection, retried
    /// after a lost connection or `OVERLOADED` within the deadline (a scan
    /// may safely run twice).
    pub async fn scan_partition(
        &self,
        operator: &str,
        partition: u32,
        after: Option<&Key>,
        limit: u32,
    ) -> Result<Page, Error> {
        let request = scan_request(operator, partition, after, limit);
        let outcome = self
            .retrying(Retry::Read, |conn| {
                let request = request.clone();
                async move { conn.request(request).await }
            })
            .await?;
        page_of(outcome, after)
    }

    /// [`Connection::dump`] with the client's retries, one page at a time.
    pub async fn dump(&self, operator: &str, partitions: u32) -> Result<Vec<(Key, Vec<u8>)>, Error> {
        let mut all: Vec<(Key, Vec<u8>)> = Vec::new();
        for p in 0..partitions {
            let start = all.len();
            loop {
                let after = (all.len() > start).then(|| &all[all.len() - 1].0);
                let (rows, more) = self.scan_partition(operator, p, after, SCAN_LIMIT_MAX).await?;
                all.extend(rows);
                if !more {
                    break;
                }
            }
        }
        Ok(all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(keys: &[u64], more: bool) -> Outcome {
        let rows: Vec<(Vec<u8>, Vec<u8>)> = keys
            .iter()
            .map(|k| (Key::from(*k).as_bytes().to_vec(), vec![1]))
            .collect();
        Outcome::Committed {
            tid: 1,
            result: Payload::encode(&(rows, more)),
        }
    }

    #[test]
    fn a_page_that_cannot_be_followed_is_a_protocol_error() {
        let (rows, more) = page_of(page(&[3, 4], true), Some(&Key::from(2u64))).unwrap();
        assert_eq!((rows.len(), more), (2, true));
        assert_eq!(page_of(page(&[], false), None).unwrap().0.len(), 0);
        for (keys, more, after) in [
            (&[][..], true, None),           // "more", and nothing
            (&[3, 3][..], false, None),      // a key twice
            (&[5, 4][..], false, None),      // out of order
            (&[2, 3][..], true, Some(2u64)), // not after its start
        ] {
            let after = after.map(Key::from);
            let e = page_of(page(keys, more), after.as_ref()).unwrap_err();
            assert!(matches!(e, Error::Protocol { .. }), "{keys:?} {more}: {e}");
        }
    }
}
