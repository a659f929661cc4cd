//! Exactly-once: the table of what each client was answered.
//!
//! A request may carry `(client, seq, ack)`. Its client's home shard (a hash
//! of the id) sequences every attempt of it, so one table sees them all. A
//! retry of a finished request gets the recorded outcome, once its epoch is
//! durable; a retry of one in flight waits for it; a seq below the
//! client's ack (or pushed out by `OUTCOMES_PER_CLIENT_MAX`) is forgotten,
//! and a retry of it is refused, never run again.
//!
//! Invariants: outcomes are recorded at the end of their epoch in tid
//! order, the order replay records them in, so the table is part of the
//! deterministic state (rebuilt by replay, carried in snapshots); the
//! `waiting` lists are not state (only requests in flight, which a crash
//! loses with their replies). A request forwarded while this shard still
//! replays waits for the end of replay: admitted earlier, a retry of a
//! request being replayed would miss its logged outcome and run twice.

use super::Shard;
use super::release::{Release, ReplyTo};
use crate::abort::Abort;
use crate::config::{Outcome, Request};
use crate::ids::{Epoch, ShardId, Tid};
use crate::store::{Map, new_map};
use std::collections::BTreeMap;

/// Clients whose outcomes a shard keeps; past it, the least recently used
/// client is forgotten (its retries would run again: size this above the
/// number of live clients).
pub const CLIENTS_MAX: usize = 1 << 20;
/// Past [`CLIENTS_MAX`], the table is cut down to this many: a flood of new
/// client ids pays for one eviction per `CLIENTS_MAX - CLIENTS_EVICT_TO`
/// new clients, not one per epoch.
pub const CLIENTS_EVICT_TO: usize = CLIENTS_MAX - CLIENTS_MAX / 16;
/// Outcomes kept per client; older ones are forgotten even unacknowledged.
pub const OUTCOMES_PER_CLIENT_MAX: usize = 4096;
/// Bytes of results (and abort messages) kept per client; past them the
/// oldest outcomes are forgotten even unacknowledged (the newest is always
/// kept): 4 096 scan pages of 512 KiB would otherwise be 2 GiB a client.
pub const OUTCOME_BYTES_PER_CLIENT_MAX: usize = 64 << 20;

/// The bytes an outcome keeps, for [`OUTCOME_BYTES_PER_CLIENT_MAX`].
fn outcome_bytes(outcome: &Outcome) -> usize {
    match outcome {
        Outcome::Committed(result) => result.len(),
        Outcome::Aborted(abort) => abort.message().len(),
    }
}

/// The shard that sequences and deduplicates `client`'s requests.
pub fn client_home(client: u64, n_shards: u16) -> ShardId {
    (crate::bytes::mix64(client) % u64::from(n_shards)) as ShardId
}

/// What the engine remembers of one client (exactly-once). Part of the
/// state: rebuilt by replaying the log, carried in snapshots.
#[derive(Default)]
pub(super) struct ClientState {
    /// Outcomes by seq: `(tid, epoch, outcome)`.
    outcomes: BTreeMap<u64, (Tid, Epoch, Outcome)>,
    /// Seqs below this are forgotten: a retry is refused, never re-run.
    forgotten_below: u64,
    /// The last epoch that recorded an outcome (for eviction).
    last_epoch: Epoch,
    /// [`outcome_bytes`] of `outcomes`, summed.
    bytes: usize,
    /// Seqs submitted and not finished: duplicates wait here. Not state:
    /// only requests still in flight, which a crash loses with their reply.
    waiting: BTreeMap<u64, Vec<ReplyTo>>,
}

/// A client in a snapshot: id, forgotten-below, last epoch, outcomes.
pub(super) type ClientMeta = (u64, u64, Epoch, Vec<(u64, Tid, Epoch, Outcome)>);

/// The client table, and the requests that wait for the end of replay.
pub(super) struct Clients {
    table: Map<u64, ClientState>,
    /// Requests peers forwarded while this shard still replayed: admitted
    /// once replay ends, when the client table holds every logged outcome
    /// (admitted earlier, a retry of a request being replayed would miss
    /// its outcome and run a second time).
    pub(super) submitted_in_replay: Vec<(ReplyTo, Request)>,
}

impl Clients {
    pub(super) fn new() -> Clients {
        Clients {
            table: new_map(),
            submitted_in_replay: Vec::new(),
        }
    }

    /// The table as a snapshot carries it: clients with something to
    /// remember, by id.
    pub(super) fn to_meta(&self) -> Vec<ClientMeta> {
        let mut clients: Vec<ClientMeta> = self
            .table
            .iter()
            .filter(|(_, s)| !s.outcomes.is_empty() || s.forgotten_below > 0)
            .map(|(c, s)| {
                let outcomes = s
                    .outcomes
                    .iter()
                    .map(|(seq, (t, e, o))| (*seq, *t, *e, o.clone()))
                    .collect();
                (*c, s.forgotten_below, s.last_epoch, outcomes)
            })
            .collect();
        clients.sort_unstable_by_key(|c| c.0);
        clients
    }

    /// Restores the table from a snapshot's `to_meta`.
    pub(super) fn restore(&mut self, clients: Vec<ClientMeta>) {
        for (client, forgotten_below, last_epoch, outcomes) in clients {
            let outcomes: BTreeMap<u64, (Tid, Epoch, Outcome)> =
                outcomes.into_iter().map(|(seq, t, e, o)| (seq, (t, e, o))).collect();
            self.table.insert(
                client,
                ClientState {
                    bytes: outcomes.values().map(|(_, _, o)| outcome_bytes(o)).sum(),
                    outcomes,
                    forgotten_below,
                    last_epoch,
                    waiting: Default::default(),
                },
            );
        }
    }

    /// Records the outcomes of `epoch`'s client requests (`recorded`, any
    /// order) and adds a reply for each duplicate that waited to `replies`.
    pub(super) fn record(
        &mut self,
        epoch: Epoch,
        mut recorded: Vec<(Tid, crate::ClientSeq, Outcome)>,
        replies: &mut Vec<Release>,
    ) {
        // Record outcomes in tid order (replay does the same, so the table
        // is part of the deterministic state), answer the duplicates that
        // waited, forget what clients acknowledged.
        recorded.sort_unstable_by_key(|(tid, _, _)| *tid);
        for (tid, c, outcome) in recorded {
            let state = self.table.entry(c.client).or_default();
            if let Some(waiting) = state.waiting.remove(&c.seq) {
                for to in waiting {
                    replies.push(Release {
                        to,
                        tid,
                        outcome: outcome.clone(),
                    });
                }
            }
            state.bytes += outcome_bytes(&outcome);
            if let Some((_, _, replaced)) = state.outcomes.insert(c.seq, (tid, epoch, outcome)) {
                state.bytes -= outcome_bytes(&replaced);
            }
            state.last_epoch = epoch;
            if c.ack > state.forgotten_below {
                state.forgotten_below = c.ack;
                let kept = state.outcomes.split_off(&c.ack);
                state.bytes -= state.outcomes.values().map(|(_, _, o)| outcome_bytes(o)).sum::<usize>();
                state.outcomes = kept;
            }
            while state.outcomes.len() > OUTCOMES_PER_CLIENT_MAX
                || (state.bytes > OUTCOME_BYTES_PER_CLIENT_MAX && state.outcomes.len() > 1)
            {
                let (oldest, (_, _, o)) = state.outcomes.pop_first().expect("non-empty");
                state.bytes -= outcome_bytes(&o);
                state.forgotten_below = state.forgotten_below.max(oldest + 1);
            }
        }
        if self.table.len() > CLIENTS_MAX {
            self.evict();
        }
    }

    /// Forgets the least recently used clients (idle ones only: a client
    /// with a request in flight stays) down to `CLIENTS_EVICT_TO`. Which
    /// ones is a function of the table (by last epoch, then id), so replay
    /// forgets the same.
    fn evict(&mut self) {
        let mut idle: Vec<(Epoch, u64)> = self
            .table
            .iter()
            .filter(|(_, s)| s.waiting.is_empty())
            .map(|(c, s)| (s.last_epoch, *c))
            .collect();
        let excess = self.table.len().saturating_sub(CLIENTS_EVICT_TO).min(idle.len());
        if excess == 0 {
            return;
        }
        // The `excess` least recently used (the pairs are distinct: the
        // set is the same whatever the table's order).
        if excess < idle.len() {
            idle.select_nth_unstable(excess);
        }
        for (_, c) in &idle[..excess] {
            self.table.remove(c);
        }
    }
}

impl Shard {
    /// Takes a request into the pending queue, or answers it from the
    /// client table (a retry), or parks it behind its first attempt.
    pub(super) fn accept(&mut self, to: ReplyTo, request: Request) -> Result<(), Abort> {
        if crate::interval::SnapshotInterval::of(&request).is_some() {
            // A peer's `Submit` was checked there; a shard's own entry is
            // never a request (a buggy or hostile peer's would be sealed).
            return Err(Abort::unknown("a snapshot interval is not a request"));
        }
        if self.seq.pending.len() >= self.config.pending_txns_max {
            return Err(Abort::with_kind(
                crate::AbortKind::Rejected,
                format!("shard {} has {} requests waiting", self.id(), self.seq.pending.len()),
            ));
        }
        // A handover the layout would skip now is refused, unless it is a
        // retry: one already sequenced gets its first outcome, though its
        // node may have drained and left since.
        let refused = match crate::Handover::of(&request) {
            Some(Ok(h)) => self.check_handover_now(h).err(),
            _ => None,
        };
        if let Some(c) = request.client {
            if let Some(abort) = refused {
                let known = self.clients.table.get(&c.client).is_some_and(|s| {
                    s.outcomes.contains_key(&c.seq) || c.seq < s.forgotten_below || s.waiting.contains_key(&c.seq)
                });
                if !known {
                    return Err(abort);
                }
            }
            let state = self.clients.table.entry(c.client).or_default();
            if let Some((tid, epoch, outcome)) = state.outcomes.get(&c.seq) {
                let release = Release {
                    to,
                    tid: *tid,
                    outcome: outcome.clone(),
                };
                let epoch = *epoch;
                self.release_after(epoch, release);
                return Ok(());
            }
            if c.seq < state.forgotten_below {
                let abort = Abort::with_kind(
                    crate::AbortKind::Forgotten,
                    format!(
                        "request {} of client {} is forgotten (acknowledged or too old)",
                        c.seq, c.client
                    ),
                );
                self.release_after(
                    0,
                    Release {
                        to,
                        tid: 0,
                        outcome: Outcome::Aborted(abort),
                    },
                );
                return Ok(());
            }
            if let Some(waiting) = state.waiting.get_mut(&c.seq) {
                waiting.push(to);
                return Ok(());
            }
            state.waiting.insert(c.seq, Vec::new());
        } else if let Some(abort) = refused {
            return Err(abort);
        }
        // The epoch starts at the next `step` or `tick`, not here: a driver
        // submits everything that arrived, then the epoch seals it all (one
        // epoch per request would pay the barriers for each).
        self.seq.pending.push_back((to, request));
        Ok(())
    }
}

impl Clients {
    /// The whole table (with the duplicates waiting) and the requests
    /// waiting for the end of replay, for a hand-off (`handoff`).
    pub(super) fn encode_to(&self, w: &mut crate::codec::Writer) {
        use crate::codec::Encode;
        (self.table.len() as u64).encode(w);
        for (client, s) in &self.table {
            (*client, s.forgotten_below, s.last_epoch).encode(w);
            (s.outcomes.len() as u64).encode(w);
            for (seq, (tid, epoch, outcome)) in &s.outcomes {
                (*seq, *tid, *epoch).encode(w);
                outcome.encode(w);
            }
            (s.waiting.len() as u64).encode(w);
            for (seq, tos) in &s.waiting {
                seq.encode(w);
                (tos.len() as u64).encode(w);
                for to in tos {
                    to.encode_to(w);
                }
            }
        }
        (self.submitted_in_replay.len() as u64).encode(w);
        for (to, r) in &self.submitted_in_replay {
            to.encode_to(w);
            r.encode(w);
        }
    }

    /// What [`Clients::encode_to`] wrote, checked.
    pub(super) fn decode_from(
        input: &mut &[u8],
        app: &crate::App,
        n_shards: u16,
    ) -> Result<Clients, crate::DecodeError> {
        use crate::codec::Decode;
        let count = |input: &mut &[u8], item: usize| -> Result<usize, crate::DecodeError> {
            let n = u64::decode(input)?;
            if n > (input.len() / item) as u64 {
                return Err(crate::DecodeError::Invalid(format!(
                    "{n} items in {} bytes",
                    input.len()
                )));
            }
            Ok(n as usize)
        };
        let mut clients = Clients::new();
        for _ in 0..count(input, 40)? {
            let (client, forgotten_below, last_epoch) = <(u64, u64, Epoch)>::decode(input)?;
            let mut state = ClientState {
                forgotten_below,
                last_epoch,
                ..ClientState::default()
            };
            for _ in 0..count(input, 25)? {
                let (seq, tid, epoch) = <(u64, Tid, Epoch)>::decode(input)?;
                let outcome = Outcome::decode(input)?;
                state.bytes += outcome_bytes(&outcome);
                state.outcomes.insert(seq, (tid, epoch, outcome));
            }
            for _ in 0..count(input, 16)? {
                let seq = u64::decode(input)?;
                let mut tos = Vec::new();
                for _ in 0..count(input, 1)? {
                    tos.push(ReplyTo::decode_from(input, n_shards)?);
                }
                state.waiting.insert(seq, tos);
            }
            if clients.table.insert(client, state).is_some() {
                return Err(crate::DecodeError::Invalid(format!("client {client} twice")));
            }
        }
        for _ in 0..count(input, 10)? {
            clients
                .submitted_in_replay
                .push(super::handoff::decode_waiting(input, app, n_shards)?);
        }
        Ok(clients)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_its_cap_the_table_forgets_the_least_recently_used_idle_clients_at_once() {
        let mut c = Clients::new();
        // Client i last recorded an outcome at epoch i; one past the cap.
        let n = CLIENTS_MAX as u64 + 1;
        c.restore((0..n).map(|i| (i, 1, i, Vec::new())).collect());
        // The oldest client has a request in flight: it stays.
        c.table.get_mut(&0).unwrap().waiting.insert(5, Vec::new());
        c.evict();
        assert_eq!(c.table.len(), CLIENTS_EVICT_TO);
        assert!(c.table.contains_key(&0), "a client with a request in flight is kept");
        let forgotten = n as usize - CLIENTS_EVICT_TO;
        assert!((1..=forgotten as u64).all(|i| !c.table.contains_key(&i)));
        assert!((forgotten as u64 + 1..n).all(|i| c.table.contains_key(&i)));
        // Below the cap nothing more goes until it is passed again.
        c.evict();
        assert_eq!(c.table.len(), CLIENTS_EVICT_TO);
    }

    #[test]
    fn a_client_keeps_at_most_its_bytes_of_unacknowledged_results() {
        let mut c = Clients::new();
        let page = |seq| {
            let result = Outcome::Committed(crate::Payload::from_vec(vec![7; 1 << 20]));
            (seq, crate::ClientSeq { client: 9, seq, ack: 0 }, result)
        };
        let mut replies = Vec::new();
        for seq in 1..=100 {
            c.record(seq, vec![page(seq)], &mut replies);
        }
        let state = &c.table[&9];
        let kept = OUTCOME_BYTES_PER_CLIENT_MAX >> 20;
        assert_eq!(state.outcomes.len(), kept);
        assert_eq!(state.bytes, OUTCOME_BYTES_PER_CLIENT_MAX);
        assert_eq!(
            state.forgotten_below,
            101 - kept as u64,
            "the oldest are forgotten, not re-run"
        );
        // An acknowledgement gives their bytes back; a snapshot's table
        // counts them again.
        c.record(
            101,
            vec![(
                101,
                crate::ClientSeq {
                    client: 9,
                    seq: 101,
                    ack: 100,
                },
                page(101).2,
            )],
            &mut replies,
        );
        assert_eq!((c.table[&9].outcomes.len(), c.table[&9].bytes), (2, 2 << 20));
        let mut restored = Clients::new();
        restored.restore(c.to_meta());
        assert_eq!(restored.table[&9].bytes, 2 << 20);
        // One result larger than the cap is kept: the newest always is.
        let huge = Outcome::Committed(crate::Payload::from_vec(vec![0; OUTCOME_BYTES_PER_CLIENT_MAX + 1]));
        c.record(
            102,
            vec![(
                102,
                crate::ClientSeq {
                    client: 9,
                    seq: 102,
                    ack: 101,
                },
                huge,
            )],
            &mut replies,
        );
        assert_eq!(c.table[&9].outcomes.keys().copied().collect::<Vec<_>>(), [102]);
    }
}
