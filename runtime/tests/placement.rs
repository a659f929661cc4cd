//! A cluster whose shards are placed by a layout, not numbered in order:
//! two nodes in one process (each its own control plane and executors),
//! node 0 running shards 0 and 2, node 1 shards 1 and 3. Transfers cross
//! every pair of shards, within a node and between nodes; money is
//! conserved and every transfer commits exactly once. This is the
//! placement the runtime must follow once shards change nodes
//! (docs/nodes.md, step 4), and the first test of a cluster whose nodes
//! run more than one shard each.

mod common;

use common::{bank, load_accounts, local_cluster};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use styx_engine::{Address, FnId, Key, Layout, Outcome, Payload, Reply, Request, Shard};
use styx_runtime::cluster::{Control, Survey};
use styx_runtime::{Frontend, Metrics, Options, run};

const ACCOUNTS: u64 = 400;
/// Transfers each shard submits.
const REQUESTS: u64 = 3_000;
const IN_FLIGHT: u64 = 100;
const START: i64 = 1_000;

/// What a shard's frontend saw, and its final state.
#[derive(Debug, Default)]
struct Seen {
    shard: u16,
    committed: u64,
    other: u64,
    balance_sum: i64,
    accounts: u64,
    balances: Vec<(u64, i64)>,
}

struct Closed {
    transfer: FnId,
    shard: u64,
    sent: u64,
    outstanding: u64,
    seen: Seen,
    /// Counts, across the cluster, each shard once all its requests are
    /// answered (to 4), then each shard again once it is quiet after that
    /// (to 8): a node leaves only when every shard has ended its last
    /// epoch, since a node that leaves closes its links, and a peer still
    /// ending an epoch would stop short of its writes.
    finished: Arc<AtomicUsize>,
    counted: bool,
    quiet: bool,
}

impl Frontend for Closed {
    type Output = Seen;

    fn pump(&mut self, shard: &mut Shard, _now: u64) -> bool {
        if self.counted && !self.quiet && self.finished.load(Ordering::SeqCst) >= 4 && shard.is_quiet() {
            self.quiet = true;
            self.finished.fetch_add(1, Ordering::SeqCst);
        }
        let mut any = false;
        while self.outstanding < IN_FLIGHT && self.sent < REQUESTS {
            let (debtor, creditor) = pair(self.shard, self.sent);
            let request = Request {
                function: self.transfer,
                address: Address::Entity(Key::from(debtor)),
                args: Payload::encode(&(creditor, 1i64)),
                client: None,
            };
            if shard.submit(self.sent, request).is_err() {
                break;
            }
            self.sent += 1;
            self.outstanding += 1;
            any = true;
        }
        any
    }

    fn deliver(&mut self, replies: &mut Vec<Reply>, _now: u64) {
        for r in replies.drain(..) {
            self.outstanding -= 1;
            if matches!(r.outcome, Outcome::Committed(_)) {
                self.seen.committed += 1;
            } else {
                self.seen.other += 1;
            }
        }
        if !self.counted && self.sent == REQUESTS && self.outstanding == 0 {
            self.counted = true;
            self.finished.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn does_io(&self) -> bool {
        false
    }

    fn next_wakeup_us(&self) -> Option<u64> {
        // Until every shard of the cluster is answered, look again at once:
        // the count is not a wake-up of its own. A deadline that stays due
        // must not keep the shard's links to the other node from writing
        // (it once did, and the cluster hung: see `ShardLoop::park`).
        (self.counted && self.finished.load(Ordering::SeqCst) < 8).then_some(0)
    }

    fn is_done(&self) -> bool {
        self.quiet && self.finished.load(Ordering::SeqCst) == 8
    }

    fn finish(self, shard: &Shard) -> Seen {
        let mut seen = self.seen;
        seen.shard = shard.id();
        shard.for_each_entity(|_, k, v| {
            let balance = v.decode::<i64>().expect("a balance");
            seen.balance_sum += balance;
            seen.balances.push((k.as_u64().expect("an account number"), balance));
            seen.accounts += 1;
        });
        seen
    }
}

#[test]
fn shards_placed_alternately_on_two_nodes_conserve_money() {
    // Each node's two shards on one executor thread, then on one each.
    placed_alternately(1);
    placed_alternately(2);
}

fn placed_alternately(threads: usize) {
    let (app, transfer) = bank("placement");
    let spec = local_cluster(2, 2);
    let layout = Layout::placed_on(2, vec![0, 1, 0, 1]).unwrap();
    let finished = Arc::new(AtomicUsize::new(0));
    // A cluster that stops making progress hangs rather than fails: a
    // watchdog turns that into a failure.
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(120));
        eprintln!("the cluster made no end within 120 s");
        std::process::abort();
    });
    let nodes: Vec<_> = (0..2u16)
        .map(|node| {
            let (app, spec, layout, finished) = (app.clone(), spec.clone(), layout.clone(), finished.clone());
            std::thread::spawn(move || {
                let mut control = Control::start(spec, node, 7).expect("control plane");
                let stop = AtomicBool::new(false);
                let joined = control
                    .join(Survey::default(), &layout, &stop)
                    .expect("join")
                    .expect("a run");
                let cluster = Arc::new(joined);
                assert_eq!(cluster.local_shards(), [node, node + 2]);
                let metrics = Metrics::of_ids(cluster.local_shards());
                let opts = Options {
                    shards: 2,
                    pin: false,
                    metrics: Some(metrics.clone()),
                    threads: Some(threads),
                    cluster: Some(cluster.clone()),
                    ..Options::default()
                };
                let all = finished.clone();
                let out = run(app.clone(), opts, move |shard: &mut Shard| {
                    let id = shard.id();
                    // Each shard loads the accounts it owns.
                    load_accounts(&app, shard, 4, ACCOUNTS, START);
                    Closed {
                        transfer,
                        shard: u64::from(id),
                        sent: 0,
                        outstanding: 0,
                        seen: Seen::default(),
                        finished: all.clone(),
                        counted: false,
                        quiet: false,
                    }
                })
                .expect("run");
                // Each shard's counters under its own id.
                for id in [node, node + 2] {
                    let m = metrics.of(id);
                    assert!(m.committed.load(Ordering::SeqCst) > 0, "shard {id}'s metrics");
                }
                assert!(
                    !cluster.failure.is_failed() || finished.load(Ordering::SeqCst) == 8,
                    "node {node}: the run failed before every shard finished: {:?}",
                    cluster.failure.reason()
                );
                out
            })
        })
        .collect();
    let seen: Vec<Seen> = nodes.into_iter().flat_map(|t| t.join().expect("a node")).collect();
    let mut shards: Vec<u16> = seen.iter().map(|s| s.shard).collect();
    assert_eq!(shards, [0, 2, 1, 3], "each node ran the shards its layout gives it");
    shards.sort_unstable();
    for s in &seen {
        assert_eq!(
            s.committed + s.other,
            REQUESTS,
            "shard {}: every transfer answered once",
            s.shard
        );
        assert_eq!(s.other, 0, "shard {}: transfers of 1 never abort here", s.shard);
    }
    assert_eq!(seen.iter().map(|s| s.accounts).sum::<u64>(), ACCOUNTS);
    assert_eq!(
        seen.iter().map(|s| s.balance_sum).sum::<i64>(),
        ACCOUNTS as i64 * START,
        "money is conserved across nodes"
    );
    // The requests are a function of (shard, number): every balance is
    // its start plus exactly the transfers that touched it, once.
    let mut expected = vec![START; ACCOUNTS as usize];
    for shard in 0..4u64 {
        for sent in 0..REQUESTS {
            let (debtor, creditor) = pair(shard, sent);
            expected[debtor as usize] -= 1;
            expected[creditor as usize] += 1;
        }
    }
    let mut got = vec![i64::MIN; ACCOUNTS as usize];
    for s in &seen {
        for (k, b) in &s.balances {
            got[*k as usize] = *b;
        }
    }
    assert_eq!(got, expected, "every transfer applied exactly once");
}

/// The `sent`-th transfer of `shard`: `(debtor, creditor)`. Debtors of the
/// shard's stream, creditors anywhere: most transfers cross shards, half
/// of them nodes.
fn pair(shard: u64, sent: u64) -> (u64, u64) {
    let n = sent * 4 + shard;
    let debtor = n * 7919 % ACCOUNTS;
    (debtor, (debtor + 1 + n * 104_729 % (ACCOUNTS - 1)) % ACCOUNTS)
}
