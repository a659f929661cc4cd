//! Shards handed between two nodes of a running cluster (docs/nodes.md,
//! step 4, in memory): two nodes in one process, each its own control
//! plane and executors, start with shards 0, 1 | 2, 3. Shard 0's client
//! asks, mid-run, for shard 1 to go to node 1 and later for shard 3 to go
//! to node 0. At each handover every shard of the cluster stops at the same
//! epoch's end, the nodes exchange the hand-offs over their control
//! connections, and the next round runs on the new layout, the shards
//! rebuilt from their hand-offs (by `run_round`; `run_rounds` keeps those
//! staying in memory) — with the requests they held. Checked:
//! every transfer is answered exactly once across the rounds, every
//! balance is its start plus exactly the transfers that touched it, and
//! each node ends running the shards the last layout gives it.

mod common;

use common::{bank, load_accounts, local_cluster, local_cluster_of};

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use styx_engine::{
    Address, ClientSeq, Config, FnId, Handoff, Key, Outcome, Payload, Reply, Request, Shard, ShardId, client_home,
};
use styx_runtime::cluster::{Control, Survey};
use styx_runtime::{Frontend, Options, run_round, run_rounds};

const ACCOUNTS: u64 = 400;
/// Transfers each shard's client submits.
const REQUESTS: u64 = 3_000;
const IN_FLIGHT: u64 = 100;
const START: i64 = 1_000;
/// After how many of its transfers shard 0's client asks for each
/// handover, and which: `(shard, node)`.
const HANDOVERS: [(u64, ShardId, u16); 2] = [(1_000, 1, 1), (2_000, 3, 0)];
/// Tokens of the handover requests (transfers use their number).
const HANDOVER_TOKEN: u64 = 1 << 40;

/// A shard's client, kept across rounds (its shard may change nodes).
#[derive(Clone, Debug)]
struct Client {
    sent: u64,
    outstanding: u64,
    /// Per transfer, how many answers it got.
    answers: Vec<u8>,
    /// Transfers below this one are all answered (the client's ack).
    acked: u64,
    committed: u64,
    /// The handovers asked for, in order, with their outcomes once answered.
    handovers: Vec<Option<Outcome>>,
    counted: bool,
    quiet: bool,
}

impl Client {
    fn new() -> Client {
        Client {
            sent: 0,
            outstanding: 0,
            answers: vec![0; REQUESTS as usize],
            acked: 0,
            committed: 0,
            handovers: Vec::new(),
            counted: false,
            quiet: false,
        }
    }
}

/// Every shard's client between rounds, by shard id.
type Clients = Arc<Mutex<Vec<Option<Client>>>>;

/// What a shard held when the last round ended.
#[derive(Debug, Default)]
struct Seen {
    shard: u16,
    balances: Vec<(u64, i64)>,
}

struct Closed {
    transfer: FnId,
    shard: ShardId,
    /// Whether requests carry a client id (exactly-once: the client's home
    /// shard, often another one, sequences them and keeps the outcomes).
    named: bool,
    client: Client,
    clients: Clients,
    /// Shards in the cluster.
    shards: u16,
    /// What shard 0's client asks for: `(after how many transfers, shard,
    /// node)`.
    handovers: &'static [(u64, ShardId, u16)],
    /// Counts, across the cluster, each shard once all its requests are
    /// answered (to `shards`), then each again once it is quiet after that
    /// (to twice that): a node leaves only when every shard ended its last
    /// epoch.
    finished: Arc<AtomicUsize>,
    /// The shard is quiet only once its layout has this version (a
    /// restart that replays a handover hands over again first).
    settle_at: u64,
}

impl Frontend for Closed {
    type Output = Seen;

    fn pump(&mut self, shard: &mut Shard, _now: u64) -> bool {
        let c = &mut self.client;
        let all = usize::from(self.shards);
        if c.counted
            && !c.quiet
            && self.finished.load(Ordering::SeqCst) >= all
            && shard.is_quiet()
            && shard.layout().version() >= self.settle_at
        {
            c.quiet = true;
            self.finished.fetch_add(1, Ordering::SeqCst);
        }
        let mut any = false;
        while c.outstanding < IN_FLIGHT && c.sent < REQUESTS {
            if self.shard == 0
                && let Some(k) = self.handovers.iter().position(|(at, _, _)| *at == c.sent)
                && c.handovers.len() == k
            {
                let (_, s, node) = self.handovers[k];
                let request = styx_engine::layout::Handover { shard: s, node }.request();
                if shard.submit(HANDOVER_TOKEN + k as u64, request).is_err() {
                    break;
                }
                c.handovers.push(None);
                c.outstanding += 1;
                any = true;
                continue;
            }
            let (debtor, creditor) = pair(u64::from(self.shard), c.sent, u64::from(self.shards));
            let request = Request {
                function: self.transfer,
                address: Address::Entity(Key::from(debtor)),
                args: Payload::encode(&(creditor, 1i64)),
                client: self.named.then_some(ClientSeq {
                    client: 1_000 + u64::from(self.shard),
                    seq: c.sent,
                    ack: c.acked,
                }),
            };
            if shard.submit(c.sent, request).is_err() {
                break;
            }
            c.sent += 1;
            c.outstanding += 1;
            any = true;
        }
        any
    }

    fn deliver(&mut self, replies: &mut Vec<Reply>, _now: u64) {
        let c = &mut self.client;
        for r in replies.drain(..) {
            c.outstanding -= 1;
            if r.token >= HANDOVER_TOKEN {
                let answer = &mut c.handovers[(r.token - HANDOVER_TOKEN) as usize];
                assert!(answer.is_none(), "a handover answered twice");
                *answer = Some(r.outcome);
                continue;
            }
            c.answers[r.token as usize] += 1;
            while c.acked < REQUESTS && c.answers[c.acked as usize] > 0 {
                c.acked += 1;
            }
            if matches!(r.outcome, Outcome::Committed(_)) {
                c.committed += 1;
            }
        }
        if !c.counted && c.sent == REQUESTS && c.outstanding == 0 {
            c.counted = true;
            self.finished.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn does_io(&self) -> bool {
        false
    }

    fn next_wakeup_us(&self) -> Option<u64> {
        (self.client.counted && self.finished.load(Ordering::SeqCst) < 2 * usize::from(self.shards)).then_some(0)
    }

    fn is_done(&self) -> bool {
        self.client.quiet && self.finished.load(Ordering::SeqCst) == 2 * usize::from(self.shards)
    }

    fn finish(self, shard: &Shard) -> Seen {
        self.clients.lock().unwrap()[usize::from(self.shard)] = Some(self.client);
        let mut seen = Seen {
            shard: shard.id(),
            balances: Vec::new(),
        };
        shard.for_each_entity(|_, k, v| {
            seen.balances.push((
                k.as_u64().expect("an account number"),
                v.decode::<i64>().expect("a balance"),
            ));
        });
        seen
    }
}

#[test]
fn shards_handed_between_two_running_nodes_keep_every_transfer_once() {
    let _one = one_cluster_at_a_time();
    // A cluster that stops making progress hangs rather than fails: a
    // watchdog turns that into a failure.
    let done = watchdog("the two-node clusters", 240);
    // Each node's shards on one executor thread, then on one each; then
    // with client ids: most requests are forwarded to their client's home
    // shard and answered back, across the handovers.
    handed_over(1, false);
    handed_over(2, false);
    handed_over(1, true);
    handed_over(2, true);
    done.store(true, Ordering::SeqCst);
}

/// A frontend with nothing to send.
struct Idle;

impl Frontend for Idle {
    type Output = ();
    fn pump(&mut self, _: &mut Shard, _: u64) -> bool {
        false
    }
    fn deliver(&mut self, _: &mut Vec<Reply>, _: u64) {}
    fn is_done(&self) -> bool {
        true
    }
    fn finish(self, _: &Shard) {}
}

/// A round given hand-offs that are not exactly this node's shards is
/// refused before any shard starts, and its executors stop with it (none
/// is left waiting for a round that never comes).
#[test]
fn a_round_refuses_hand_offs_that_are_not_its_shards() {
    let done = watchdog("refused hand-offs", 60);
    let (app, _) = bank("handover-refused");
    let config = Config {
        pause_at_handover: true,
        ..Config::default()
    };
    // Shard 1's hand-off, from the simulator: two nodes, shard 1 to node 0.
    let mut sim = styx_engine::sim::Sim::new(app.clone(), config, 2, 1);
    sim.set_layout(styx_engine::Layout::contiguous(&[1, 1]));
    sim.set_auto_hand_over(false);
    sim.submit(0, 1, styx_engine::Handover { shard: 1, node: 0 }.request())
        .unwrap();
    for _ in 0..1_000 {
        sim.step();
    }
    assert!(sim.shard(1).is_departing(), "shard 1 stopped");
    let handoff = sim.shard_mut(1).hand_off();
    let opts = || Options {
        shards: 2,
        pin: false,
        threads: Some(2),
        ..Options::default()
    };
    // A node running shards 0 and 1 given only shard 1's hand-off.
    let e = run_round(app.clone(), opts(), vec![handoff], |_: &mut Shard| Idle)
        .err()
        .expect("refused");
    assert!(
        matches!(&e, styx_runtime::Error::Handover(m) if m.contains("hand-offs of shards [1]")),
        "{e}"
    );
    // The executors stopped: a round after runs as usual.
    let outputs = run_round(app, opts(), Vec::new(), |_: &mut Shard| Idle).expect("a round");
    assert_eq!(outputs.outputs.len(), 2);
    done.store(true, Ordering::SeqCst);
}

/// A frontend that panics on shard `on`, and on the others never ends
/// (counting in `ended` those that were stopped).
struct Panics {
    on: bool,
    ended: Arc<AtomicUsize>,
}

impl Frontend for Panics {
    type Output = ();
    fn pump(&mut self, _: &mut Shard, _: u64) -> bool {
        assert!(!self.on, "probe panic");
        false
    }
    fn deliver(&mut self, _: &mut Vec<Reply>, _: u64) {}
    fn is_done(&self) -> bool {
        false
    }
    fn finish(self, _: &Shard) {
        self.ended.fetch_add(1, Ordering::SeqCst);
    }
}

/// A shard that panics ends its run with an error naming it — whether it
/// shares its executor with a shard that waits on it forever or not —
/// instead of hanging the driver, and the node's other shards stop (their
/// executors can end).
#[test]
fn a_panicking_shard_is_an_error_not_a_hang() {
    let done = watchdog("a panicking shard", 60);
    let (app, _) = bank("handover-panic");
    for threads in [1, 2] {
        let opts = Options {
            shards: 2,
            pin: false,
            threads: Some(threads),
            ..Options::default()
        };
        let ended = Arc::new(AtomicUsize::new(0));
        let counted = ended.clone();
        let e = run_round(app.clone(), opts, Vec::new(), move |s: &mut Shard| Panics {
            on: s.id() == 1,
            ended: counted.clone(),
        })
        .err()
        .expect("an error");
        assert!(
            matches!(&e, styx_runtime::Error::Shard { shard: 1, message } if message.contains("probe panic")),
            "threads {threads}: {e}"
        );
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while ended.load(Ordering::SeqCst) == 0 && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(ended.load(Ordering::SeqCst), 1, "threads {threads}: shard 0 stopped");
    }
    done.store(true, Ordering::SeqCst);
}

/// A cluster that stops making progress hangs rather than fails: aborts
/// the process unless the returned flag is set within `secs` (tests of
/// this file run side by side: each has its own).
fn watchdog(what: &'static str, secs: u64) -> Arc<AtomicBool> {
    let done = Arc::new(AtomicBool::new(false));
    let flag = done.clone();
    std::thread::spawn(move || {
        let until = std::time::Instant::now() + Duration::from_secs(secs);
        while std::time::Instant::now() < until {
            if flag.load(Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("{what} made no end within {secs} s");
        std::process::abort();
    });
    done
}

fn handed_over(threads: usize, named: bool) {
    if named {
        let homes: Vec<u16> = (0..4).map(|s| client_home(1_000 + s, 4)).collect();
        assert!(
            homes.iter().enumerate().filter(|(s, h)| usize::from(**h) != *s).count() >= 2,
            "most clients' homes are other shards: {homes:?}"
        );
    }
    let (app, transfer) = bank("handover");
    let spec = local_cluster(2, 2);
    let finished = Arc::new(AtomicUsize::new(0));
    let clients: Clients = Arc::new(Mutex::new(vec![None; 4]));
    let nodes: Vec<_> = (0..2u16)
        .map(|node| {
            let (app, spec, finished, clients) = (app.clone(), spec.clone(), finished.clone(), clients.clone());
            std::thread::spawn(move || {
                let mut control = Control::start(spec.clone(), node, 7).expect("control plane");
                let stop = AtomicBool::new(false);
                let mut layout = spec.layout();
                let mut resume: Vec<Handoff> = Vec::new();
                let mut layouts = vec![layout.clone()];
                loop {
                    let cluster = Arc::new(
                        control
                            .join(Survey::default(), &layout, &stop)
                            .expect("join")
                            .expect("a run"),
                    );
                    let opts = Options {
                        shards: 2,
                        pin: false,
                        threads: Some(threads),
                        cluster: Some(cluster.clone()),
                        engine: Config {
                            pause_at_handover: true,
                            ..Config::default()
                        },
                        ..Options::default()
                    };
                    let (all, clients, app2) = (finished.clone(), clients.clone(), app.clone());
                    let round = run_round(
                        app.clone(),
                        opts,
                        std::mem::take(&mut resume),
                        move |shard: &mut Shard| {
                            let id = shard.id();
                            if shard.epoch() == 0 {
                                // A fresh shard loads the accounts it owns; one
                                // rebuilt from its hand-off has them.
                                load_accounts(&app2, shard, 4, ACCOUNTS, START);
                            }
                            let client = clients.lock().unwrap()[usize::from(id)]
                                .take()
                                .unwrap_or_else(Client::new);
                            Closed {
                                transfer,
                                shard: id,
                                named,
                                shards: 4,
                                handovers: &HANDOVERS,
                                client,
                                clients: clients.clone(),
                                finished: all.clone(),
                                settle_at: 0,
                            }
                        },
                    )
                    .unwrap_or_else(|e| panic!("node {node}: {e}"));
                    assert!(
                        !cluster.failure.is_failed() || finished.load(Ordering::SeqCst) == 8,
                        "node {node}: the run failed: {:?}",
                        cluster.failure.reason()
                    );
                    let Some((epoch, next)) = round.paused else {
                        return (round.outputs, layouts);
                    };
                    assert_eq!(round.handoffs.len(), cluster.local_shards().len());
                    let outgoing = round
                        .handoffs
                        .iter()
                        .map(|h| (next.node_of(h.shard()), h.shard(), h.encode()))
                        .collect();
                    let incoming = cluster
                        .hand_over(epoch, outgoing, Duration::from_secs(30), &stop)
                        .unwrap_or_else(|e| panic!("node {node}: {e}"));
                    resume = incoming
                        .iter()
                        .map(|b| Handoff::decode(b, &app).expect("a hand-off that decodes"))
                        .collect();
                    let mut got: Vec<ShardId> = resume.iter().map(|h| h.shard()).collect();
                    got.sort_unstable();
                    assert_eq!(
                        got,
                        next.shards_of(node).collect::<Vec<_>>(),
                        "node {node}: its hand-offs"
                    );
                    layout = next;
                    layouts.push(layout.clone());
                }
            })
        })
        .collect();
    let mut seen = Vec::new();
    let mut all_layouts = Vec::new();
    for (node, t) in nodes.into_iter().enumerate() {
        let (outputs, layouts) = t.join().expect("a node");
        let last = layouts.last().unwrap();
        let shards: Vec<u16> = outputs.iter().map(|s: &Seen| s.shard).collect();
        assert_eq!(
            shards,
            last.shards_of(node as u16).collect::<Vec<_>>(),
            "node {node} ends with the last layout's shards"
        );
        seen.extend(outputs);
        all_layouts.push(layouts);
    }
    let placements: Vec<Vec<u16>> = all_layouts[0]
        .iter()
        .map(|l| (0..4).map(|s| l.node_of(s)).collect())
        .collect();
    assert_eq!(
        placements,
        [vec![0, 0, 1, 1], vec![0, 1, 1, 1], vec![0, 1, 1, 0]],
        "two handovers, two round changes"
    );
    assert_eq!(
        all_layouts[0], all_layouts[1],
        "both nodes went through the same layouts"
    );
    check(&seen, &clients, 4, HANDOVERS.len());
}

/// Three nodes of two shards (0, 1 | 2, 3 | 4, 5), driven by
/// `run_rounds`: shard 1 goes to node 1, then on to node 2, then shard 5
/// to node 0 — each node in turn sends, receives and only keeps shards,
/// and a round's end waits on batch counts from two peers. Two executors
/// per node: a shard arriving runs beside one kept from the last round,
/// and an executor whose shard left runs none until one arrives.
#[test]
fn three_nodes_pass_shards_around() {
    let _one = one_cluster_at_a_time();
    const PASSES: [(u64, ShardId, u16); 3] = [(600, 1, 1), (1_200, 1, 2), (1_800, 5, 0)];
    pass_around(
        "handover-three",
        &[2, 2, 2],
        &PASSES,
        &[vec![0, 1, 1, 1, 2, 2], vec![0, 2, 1, 1, 2, 2], vec![0, 2, 1, 1, 2, 0]],
    );
}

/// A node added and a node drained: node 2 starts as a spare (no shards)
/// and is handed two, then node 1 hands its last one away and goes on as
/// a spare until the run ends.
#[test]
fn a_spare_node_takes_shards_and_a_drained_node_becomes_one() {
    let _one = one_cluster_at_a_time();
    const PASSES: [(u64, ShardId, u16); 3] = [(600, 1, 2), (1_200, 3, 2), (1_800, 2, 0)];
    pass_around(
        "handover-spare",
        &[2, 2, 0],
        &PASSES,
        &[vec![0, 2, 1, 1], vec![0, 2, 1, 2], vec![0, 2, 0, 2]],
    );
}

/// Three nodes running `counts[i]` shards each at first, shard 0's client
/// asking for `passes`; every node must go through the `layouts`.
fn pass_around(name: &str, counts: &[u16], passes: &'static [(u64, ShardId, u16)], layouts: &[Vec<u16>]) {
    let done = watchdog("the three-node cluster", 240);
    let (app, transfer) = bank(name);
    let spec = local_cluster_of(counts);
    let n = spec.n_shards();
    let finished = Arc::new(AtomicUsize::new(0));
    let clients: Clients = Arc::new(Mutex::new(vec![None; usize::from(n)]));
    let nodes: Vec<_> = (0..counts.len() as u16)
        .map(|node| {
            let (app, spec, finished, clients) = (app.clone(), spec.clone(), finished.clone(), clients.clone());
            std::thread::spawn(move || {
                let mut control = Control::start(spec.clone(), node, 7).expect("control plane");
                let stop = AtomicBool::new(false);
                let app2 = app.clone();
                let all_finished = finished.clone();
                let make = move |shard: &mut Shard| {
                    let id = shard.id();
                    if shard.epoch() == 0 {
                        load_accounts(&app2, shard, n, ACCOUNTS, START);
                    }
                    let client = clients.lock().unwrap()[usize::from(id)]
                        .take()
                        .unwrap_or_else(Client::new);
                    Closed {
                        transfer,
                        shard: id,
                        named: true,
                        shards: n,
                        handovers: passes,
                        client,
                        clients: clients.clone(),
                        finished: finished.clone(),
                        settle_at: 0,
                    }
                };
                let options = |run: Arc<styx_runtime::cluster::Run>| Options {
                    pin: false,
                    threads: Some(2),
                    cluster: Some(run),
                    engine: Config {
                        pause_at_handover: true,
                        ..Config::default()
                    },
                    ..Options::default()
                };
                let rounds = run_rounds(
                    app,
                    &mut control,
                    spec.layout(),
                    options,
                    make,
                    &stop,
                    Duration::from_secs(30),
                    None,
                )
                .unwrap_or_else(|e| panic!("node {node}: {e}"));
                assert!(
                    rounds.failed.is_none() || all_finished.load(Ordering::SeqCst) == 2 * usize::from(n),
                    "node {node}: the run failed before every shard finished: {:?}",
                    rounds.failed
                );
                (node, rounds.outputs, rounds.changes)
            })
        })
        .collect();
    let mut seen = Vec::new();
    for t in nodes {
        let (node, outputs, changes) = t.join().expect("a node");
        // Each change sent exactly the shards leaving this node, with
        // their accounts.
        let mut before = spec.layout();
        for c in &changes {
            let leaving: Vec<ShardId> = (0..n)
                .filter(|s| before.node_of(*s) == node && c.layout.node_of(*s) != node)
                .collect();
            assert_eq!(
                c.sent.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
                leaving,
                "node {node}"
            );
            assert!(c.sent.iter().all(|(_, e)| *e > 0), "node {node}: {:?}", c.sent);
            // And kept those staying in memory.
            let staying: Vec<ShardId> = (0..n)
                .filter(|s| before.node_of(*s) == node && c.layout.node_of(*s) == node)
                .collect();
            assert_eq!(c.kept, staying, "node {node}");
            assert!(c.joined >= c.ended, "node {node}");
            before = c.layout.clone();
        }
        let went: Vec<Vec<u16>> = changes
            .iter()
            .map(|c| (0..n).map(|s| c.layout.node_of(s)).collect())
            .collect();
        assert_eq!(went, layouts, "node {node} went through every handover");
        let last = &changes.last().expect("round changes").layout;
        assert_eq!(
            outputs.iter().map(|o: &Seen| o.shard).collect::<Vec<_>>(),
            last.shards_of(node).collect::<Vec<_>>(),
            "node {node} ends with the last layout's shards"
        );
        seen.extend(outputs);
    }
    check(&seen, &clients, u64::from(n), passes.len());
    done.store(true, Ordering::SeqCst);
}

/// Every client's transfers answered once and committed, shard 0's
/// handovers committed, and every balance its start plus exactly the
/// transfers that touched it.
fn check(seen: &[Seen], clients: &Clients, shards: u64, handovers: usize) {
    let clients = clients.lock().unwrap();
    assert_eq!(clients.len() as u64, shards);
    for (s, c) in clients.iter().enumerate() {
        let c = c.as_ref().expect("every client kept");
        assert!(
            c.answers.iter().all(|a| *a == 1),
            "shard {s}: every transfer answered once"
        );
        assert_eq!(c.committed, REQUESTS, "shard {s}: transfers of 1 never abort here");
        if s == 0 {
            assert_eq!(c.handovers.len(), handovers);
            assert!(
                c.handovers.iter().all(|o| matches!(o, Some(Outcome::Committed(_)))),
                "{:?}",
                c.handovers
            );
        }
    }
    // The requests are a function of (shard, number): every balance is
    // its start plus exactly the transfers that touched it, once.
    let mut expected = vec![START; ACCOUNTS as usize];
    for shard in 0..shards {
        for sent in 0..REQUESTS {
            let (debtor, creditor) = pair(shard, sent, shards);
            expected[debtor as usize] -= 1;
            expected[creditor as usize] += 1;
        }
    }
    let mut got = vec![i64::MIN; ACCOUNTS as usize];
    for s in seen {
        for (k, b) in &s.balances {
            assert_eq!(got[*k as usize], i64::MIN, "account {k} on two shards");
            got[*k as usize] = *b;
        }
    }
    assert_eq!(got, expected, "every transfer applied exactly once");
}

/// The `sent`-th transfer of `shard`: `(debtor, creditor)`. Most cross
/// shards, about half of them nodes.
fn pair(shard: u64, sent: u64, shards: u64) -> (u64, u64) {
    let n = sent * shards + shard;
    let debtor = n * 7919 % ACCOUNTS;
    (debtor, (debtor + 1 + n * 104_729 % (ACCOUNTS - 1)) % ACCOUNTS)
}

/// The clusters of this file's tests one at a time: each takes blocks of
/// free ports (probed, then bound by its nodes), and several at once
/// took each other's, on a loaded machine.
fn one_cluster_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE: Mutex<()> = Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// A scratch directory of this test process, empty.
fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("styx-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

/// How a node's run of [`durable_run`] ended.
type NodeRun = (u16, Result<(Vec<Seen>, Vec<styx_runtime::RoundChange>), String>);

/// One run of a durable two-node cluster on `dirs`: each node's outputs
/// and round changes, or its error (a run that failed is one). `clients` holds each shard's client
/// (kept across runs); `finished` starts at what the clients counted
/// already; shards are quiet only at layout version `settle_at`; `fail`:
/// that node fails at its checkpoint with that number, before committing
/// it (the others are then stopped).
#[allow(clippy::too_many_arguments)]
fn durable_run(
    name: &str,
    spec: &styx_runtime::cluster::Spec,
    dirs: &[std::path::PathBuf],
    passes: &'static [(u64, ShardId, u16)],
    clients: &Clients,
    finished: usize,
    settle_at: u64,
    fail: Option<(u16, usize)>,
) -> Vec<NodeRun> {
    let (app, transfer) = bank(name);
    let n = spec.n_shards();
    let finished = Arc::new(AtomicUsize::new(finished));
    let stop = Arc::new(AtomicBool::new(false));
    let nodes: Vec<_> = (0..dirs.len() as u16)
        .map(|node| {
            let (app, spec, finished, clients) = (app.clone(), spec.clone(), finished.clone(), clients.clone());
            let dir = dirs[usize::from(node)].clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut control = Control::start(spec.clone(), node, 7).expect("control plane");
                let app2 = app.clone();
                let make = move |shard: &mut Shard| {
                    let id = shard.id();
                    if shard.epoch() == 0 {
                        // A restart's snapshot, loaded next, holds every
                        // account.
                        load_accounts(&app2, shard, n, ACCOUNTS, START);
                    }
                    let client = clients.lock().unwrap()[usize::from(id)]
                        .take()
                        .unwrap_or_else(Client::new);
                    Closed {
                        transfer,
                        shard: id,
                        named: true,
                        shards: n,
                        handovers: passes,
                        client,
                        clients: clients.clone(),
                        finished: finished.clone(),
                        settle_at,
                    }
                };
                let options = |run: Arc<styx_runtime::cluster::Run>| Options {
                    pin: false,
                    threads: Some(2),
                    cluster: Some(run),
                    engine: Config {
                        // Snapshots between the handovers too: deltas over
                        // a checkpoint's files.
                        snapshot_interval_us: 20_000,
                        ..Config::default()
                    },
                    ..Options::default()
                };
                let disk = styx_runtime::Disk {
                    dir: Arc::new(styx_storage::DataDir::open(&dir).expect("a data directory")),
                    wal: styx_storage::wal::Options {
                        segment_bytes: 1 << 20,
                        zero_fill: false,
                        ..Default::default()
                    },
                    fail_checkpoint: fail.filter(|(f, _)| *f == node).map(|(_, k)| k),
                };
                let rounds = run_rounds(
                    app,
                    &mut control,
                    spec.layout(),
                    options,
                    make,
                    &stop,
                    Duration::from_secs(30),
                    Some(disk),
                );
                if rounds.is_err() {
                    // The others would wait for this node at their next join.
                    stop.store(true, Ordering::SeqCst);
                }
                // A run that failed quietly (a peer lost: `Rounds::failed`)
                // is an error here: these runs end well or crash loudly.
                let ran = rounds.map_err(|e| e.to_string()).and_then(|r| match r.failed {
                    Some(f) => Err(format!("the run failed: {f}")),
                    None => Ok((r.outputs, r.changes)),
                });
                (node, ran)
            })
        })
        .collect();
    nodes.into_iter().map(|t| t.join().expect("a node")).collect()
}

/// After a crash: every client done sending (a closed loop without
/// resends), each keeping the handovers it asked — `asked` of them, by
/// shard 0's — so the shards finish once quiet on their layout.
fn clients_after_a_crash(clients: &Clients, asked: usize) {
    let mut restarted = clients.lock().unwrap().clone();
    for (s, c) in restarted.iter_mut().enumerate() {
        let mut fresh = Client::new();
        fresh.sent = REQUESTS;
        fresh.counted = true;
        fresh.handovers = c.as_ref().map_or_else(Vec::new, |c| c.handovers.clone());
        assert!(s != 0 || fresh.handovers.len() == asked, "the handovers asked");
        *c = Some(fresh);
    }
    *clients.lock().unwrap() = restarted;
}

/// Each node's run ended well, made the round changes to `went` and ran
/// the shards `last` gives it: their outputs, together.
fn ran_where_placed(runs: Vec<NodeRun>, went: &[Vec<u16>], last: &[u16], at: &str) -> Vec<Seen> {
    let n = last.len() as u16;
    let mut seen = Vec::new();
    for (node, ran) in runs {
        let (outputs, changes) = ran.unwrap_or_else(|e| panic!("{at}: node {node}: {e}"));
        let made: Vec<Vec<u16>> = changes
            .iter()
            .map(|c| (0..n).map(|s| c.layout.node_of(s)).collect())
            .collect();
        assert_eq!(made, went, "{at}: node {node}'s round changes");
        let ran: Vec<ShardId> = outputs.iter().map(|o| o.shard).collect();
        let mine: Vec<ShardId> = (0..n).filter(|s| last[usize::from(*s)] == node).collect();
        assert_eq!(ran, mine, "{at}: node {node} runs the shards the layout gives it");
        seen.extend(outputs);
    }
    seen
}

/// Every account there, money conserved, and some transfers applied.
fn conserved(seen: &[Seen], at: &str) -> Vec<(u64, i64)> {
    let recovered = balances(seen);
    assert_eq!(recovered.len() as u64, ACCOUNTS, "{at}: every account");
    assert_eq!(
        recovered.iter().map(|(_, b)| b).sum::<i64>(),
        START * ACCOUNTS as i64,
        "{at}: money conserved"
    );
    assert!(
        recovered.iter().any(|(_, b)| *b != START),
        "{at}: transfers ran before the crash"
    );
    recovered
}

/// Every account's balance in the outputs, in account order.
fn balances(seen: &[Seen]) -> Vec<(u64, i64)> {
    let mut all: Vec<(u64, i64)> = seen.iter().flat_map(|s| s.balances.iter().copied()).collect();
    all.sort_unstable();
    all
}

/// Durable handovers (docs/nodes.md, step 4): two nodes with a data
/// directory each, shards 0, 1 | 2, 3; shard 0's client has shard 1 handed
/// to node 1, then shard 2 to node 0, under load. Each handover is a
/// checkpoint of every shard where it runs next. Then both nodes restart
/// from their directories alone: they recover the last layout (the
/// cluster file still says 0, 1 | 2, 3), each the shards it ran last, and
/// every balance exactly as the run left it.
#[test]
fn durable_handovers_recover_every_shard_where_it_ran() {
    let _one = one_cluster_at_a_time();
    const PASSES: [(u64, ShardId, u16); 2] = [(1_000, 1, 1), (2_000, 2, 0)];
    let done = watchdog("the durable two-node cluster", 240);
    let spec = local_cluster_of(&[2, 2]);
    let n = spec.n_shards();
    let dirs: Vec<_> = (0..2).map(|i| scratch(&format!("durable-handover-{i}"))).collect();
    let clients: Clients = Arc::new(Mutex::new(vec![None; usize::from(n)]));
    let last: Vec<u16> = vec![0, 1, 0, 1];
    let first = durable_run("durable-handover", &spec, &dirs, &PASSES, &clients, 0, 0, None);
    let mut seen = Vec::new();
    for (node, ran) in first {
        let (outputs, changes) = ran.unwrap_or_else(|e| panic!("node {node}: {e}"));
        let went: Vec<Vec<u16>> = changes
            .iter()
            .map(|c| (0..n).map(|s| c.layout.node_of(s)).collect())
            .collect();
        assert_eq!(went, vec![vec![0, 1, 1, 1], last.clone()], "node {node}");
        seen.extend(outputs);
    }
    check(&seen, &clients, u64::from(n), PASSES.len());
    let before = balances(&seen);
    assert_eq!(before.len() as u64, ACCOUNTS);
    // Each node's directory: its last checkpoint's layout, its snapshots
    // of the shards it ran last only, no log of a shard that left it.
    for (node, dir) in dirs.iter().enumerate() {
        let layouts: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|f| f.starts_with("layout-"))
            .collect();
        assert_eq!(layouts.len(), 1, "node {node}: {layouts:?}");
        let mine: Vec<ShardId> = (0..n).filter(|s| last[usize::from(*s)] == node as u16).collect();
        let wal_shards = styx_storage::wal::shards(&dir.join("wal")).unwrap();
        assert_eq!(wal_shards, mine, "node {node}'s logs");
    }
    // Restart: every client is done; each shard finishes once quiet.
    for c in clients.lock().unwrap().iter_mut().flatten() {
        c.quiet = false;
    }
    // What a crash in the middle of removing a departed shard's log
    // leaves: a log no snapshot here lists (shard 1's, which left node 0
    // at the first handover; this one begins after it, where no reader
    // of the whole log expects a beginning). It is removed, not read.
    let wal = |node: usize| dirs[node].join("wal");
    for f in std::fs::read_dir(wal(1)).unwrap() {
        let name = f.unwrap().file_name().into_string().unwrap();
        if name.starts_with("wal-0001-") && name.ends_with(".log") {
            std::fs::copy(wal(1).join(&name), wal(0).join(&name)).unwrap();
        }
    }
    // The same cluster on fresh ports (the first run's control planes
    // still hold theirs), its file now placing the shards otherwise: the
    // directories say where they ran.
    let mut spec = local_cluster_of(&[2, 2]);
    spec.placement = Some(vec![1, 1, 0, 0]);
    let second = durable_run(
        "durable-handover",
        &spec,
        &dirs,
        &PASSES,
        &clients,
        usize::from(n),
        0,
        None,
    );
    // No handover on the restart; each node recovered the shards it ran last.
    let after = ran_where_placed(second, &[], &last, "the restart");
    assert_eq!(balances(&after), before, "every balance recovered as the run left it");
    assert_eq!(
        styx_storage::wal::shards(&wal(0)).unwrap(),
        vec![0, 2],
        "the left-over log removed"
    );
    for d in &dirs {
        let _ = std::fs::remove_dir_all(d);
    }
    done.store(true, Ordering::SeqCst);
}

/// A node that dies between writing a handover's checkpoint and
/// committing it (the other node committed its own): the restart's plan
/// is the snapshot before, the surviving node rolls its checkpoint back,
/// replay runs to the handover's epoch with the layout before it, decides
/// the handover again at that epoch's end, and the recovered cluster
/// hands over and checkpoints anew — every account kept, money conserved,
/// each node running the shards the handover gives it; a second restart
/// finds every balance as the first left it.
#[test]
fn a_handover_cut_short_by_a_crash_is_replayed_and_made_again() {
    let _one = one_cluster_at_a_time();
    const PASSES: [(u64, ShardId, u16); 2] = [(1_000, 1, 1), (2_000, 2, 0)];
    let done = watchdog("the durable two-node cluster, crashed", 240);
    let n: u16 = 4;
    let last: Vec<u16> = vec![0, 1, 0, 1];
    let dirs: Vec<_> = (0..2).map(|i| scratch(&format!("durable-crash-{i}"))).collect();
    let clients: Clients = Arc::new(Mutex::new(vec![None; usize::from(n)]));
    let name = "durable-crash";
    // Node 1 fails at the second handover, before committing it.
    let first = durable_run(
        name,
        &local_cluster_of(&[2, 2]),
        &dirs,
        &PASSES,
        &clients,
        0,
        0,
        Some((1, 2)),
    );
    for (node, ran) in &first {
        match (node, ran) {
            (1, Err(e)) => assert!(e.contains("before the checkpoint"), "{e}"),
            (0, Err(e)) => assert!(e.contains("stopped while joining"), "{e}"),
            (node, Ok(_)) => panic!("node {node} ran to the end"),
            (node, Err(e)) => panic!("node {node}: {e}"),
        }
    }
    // Node 0 committed the second handover's checkpoint; node 1 did not.
    let latest = |d: &std::path::PathBuf| {
        let dir = styx_storage::DataDir::open(d).unwrap();
        let manifests = styx_storage::snapshot::complete_manifests(&dir.snapshot_dir()).unwrap();
        manifests
            .last()
            .map(|m| (m.epoch, m.shards.iter().map(|s| s.shard).collect::<Vec<_>>()))
    };
    let (cut, shards0) = latest(&dirs[0]).expect("node 0's snapshots");
    let (before_cut, shards1) = latest(&dirs[1]).expect("node 1's snapshots");
    assert_eq!(shards0, vec![0, 2], "node 0's checkpoint of the cut handover");
    assert_eq!(shards1, vec![1, 2, 3], "node 1's latest is from before it");
    assert!(before_cut < cut);
    // Restart: the clients' remaining requests are not sent again (a
    // closed loop without resends): the shards finish once quiet on the
    // layout of both handovers.
    clients_after_a_crash(&clients, 2);
    let second = durable_run(
        name,
        &local_cluster_of(&[2, 2]),
        &dirs,
        &PASSES,
        &clients,
        usize::from(n),
        2,
        None,
    );
    // The cut handover, made again.
    let after = ran_where_placed(second, std::slice::from_ref(&last), &last, "the restart");
    let recovered = conserved(&after, "the restart");
    // Again, from the checkpoint the recovery wrote.
    for c in clients.lock().unwrap().iter_mut().flatten() {
        c.quiet = false;
    }
    let third = durable_run(
        name,
        &local_cluster_of(&[2, 2]),
        &dirs,
        &PASSES,
        &clients,
        usize::from(n),
        2,
        None,
    );
    let mut again = Vec::new();
    for (node, ran) in third {
        let (outputs, changes) = ran.unwrap_or_else(|e| panic!("node {node}: {e}"));
        assert!(changes.is_empty(), "node {node}");
        again.extend(outputs);
    }
    assert_eq!(
        balances(&again),
        recovered,
        "the second restart finds what the first left"
    );
    for d in &dirs {
        let _ = std::fs::remove_dir_all(d);
    }
    done.store(true, Ordering::SeqCst);
}

/// Each complete snapshot in `dir`, oldest first: its epoch and the
/// shards it lists.
fn manifests_in(dir: &std::path::Path) -> Vec<(u64, Vec<ShardId>)> {
    let dir = styx_storage::DataDir::open(dir).unwrap();
    styx_storage::snapshot::complete_manifests(&dir.snapshot_dir())
        .unwrap()
        .iter()
        .map(|m| (m.epoch, m.shards.iter().map(|s| s.shard).collect()))
        .collect()
}

/// The epoch in a cluster node's `cluster-complete` file.
fn complete_in(dir: &std::path::Path) -> u64 {
    let bytes = std::fs::read(dir.join("cluster-complete")).expect("a cluster-complete record");
    u64::from_le_bytes(bytes[..8].try_into().unwrap())
}

/// Durable spares (docs/nodes.md): three nodes with a data directory
/// each, node 2 starting with no shard. Shard 0's client has shard 2
/// handed to node 2 (a node added), then shard 3, node 1's last, to node 0
/// (a node drained): node 1 goes on as a spare for most of the run. A
/// spare writes no snapshot file, but commits each snapshot the running
/// nodes committed with a manifest of no shard, so the cluster keeps
/// completing snapshots — and removing old logs — while it waits. Then
/// every node restarts from its directory alone: node 1 as a spare, the
/// others with the shards they ran last, every balance as the run left it.
#[test]
fn durable_spares_commit_every_snapshot_and_recover_as_spares() {
    let _one = one_cluster_at_a_time();
    const PASSES: [(u64, ShardId, u16); 2] = [(300, 2, 2), (600, 3, 0)];
    let done = watchdog("the durable three-node cluster with spares", 240);
    let spec = local_cluster_of(&[2, 2, 0]);
    let n = spec.n_shards();
    let dirs: Vec<_> = (0..3).map(|i| scratch(&format!("durable-spare-{i}"))).collect();
    let clients: Clients = Arc::new(Mutex::new(vec![None; usize::from(n)]));
    let last: Vec<u16> = vec![0, 0, 2, 0];
    let first = durable_run("durable-spare", &spec, &dirs, &PASSES, &clients, 0, 0, None);
    let mut seen = Vec::new();
    let mut drained_at = 0;
    for (node, ran) in first {
        let (outputs, changes) = ran.unwrap_or_else(|e| panic!("node {node}: {e}"));
        let went: Vec<Vec<u16>> = changes
            .iter()
            .map(|c| (0..n).map(|s| c.layout.node_of(s)).collect())
            .collect();
        assert_eq!(went, vec![vec![0, 0, 2, 1], last.clone()], "node {node}");
        drained_at = changes[1].epoch;
        let ran: Vec<ShardId> = outputs.iter().map(|o| o.shard).collect();
        let mine: Vec<ShardId> = (0..n).filter(|s| last[usize::from(*s)] == node).collect();
        assert_eq!(ran, mine, "node {node}");
        seen.extend(outputs);
    }
    check(&seen, &clients, u64::from(n), PASSES.len());
    let before = balances(&seen);
    // Node 1, a spare since the second handover: no log left, its
    // checkpoint there lists no shard, and it committed snapshots after
    // it, each listing none.
    let spare = manifests_in(&dirs[1]);
    assert!(
        styx_storage::wal::shards(&dirs[1].join("wal")).unwrap().is_empty(),
        "node 1 keeps no log"
    );
    assert!(spare.iter().all(|(_, shards)| shards.is_empty()), "{spare:?}");
    let newest = spare.last().expect("node 1's snapshots").0;
    assert!(
        newest > drained_at,
        "node 1 committed no snapshot as a spare: {spare:?}"
    );
    // The running nodes completed snapshots past the handover (they need
    // every node's commit), and kept nothing older than what they record.
    for node in [0, 2] {
        let complete = complete_in(&dirs[node]);
        assert!(
            complete > drained_at,
            "node {node} completed nothing after the handover at {drained_at}"
        );
        let oldest = manifests_in(&dirs[node])[0].0;
        assert!(oldest >= drained_at.min(complete), "node {node}");
    }
    // Restart: every client is done; each shard finishes once quiet.
    for c in clients.lock().unwrap().iter_mut().flatten() {
        c.quiet = false;
    }
    let second = durable_run(
        "durable-spare",
        &local_cluster_of(&[2, 2, 0]),
        &dirs,
        &PASSES,
        &clients,
        usize::from(n),
        0,
        None,
    );
    // No handover on the restart; each node recovered the shards it ran last.
    let after = ran_where_placed(second, &[], &last, "the restart");
    assert_eq!(balances(&after), before, "every balance recovered as the run left it");
    for d in &dirs {
        let _ = std::fs::remove_dir_all(d);
    }
    done.store(true, Ordering::SeqCst);
}

/// Nodes leaving the cluster (docs/nodes.md, "Membership"): three
/// durable nodes, shards 0, 1 | 2, 3 | none. Under load shard 0's client
/// drains node 1 (its two shards to node 0), then has node 1 leave, then
/// node 2, the spare. Each leave is a round change every node makes; the
/// node that left returns (it runs nothing more), and the others go on
/// without it: node 0 completes snapshots past the leaves, which needs
/// every member's commit and no longer the nodes gone. Then node 0
/// restarts alone from its directory — the cluster file still lists
/// three nodes — and recovers every balance as the run left it.
#[test]
fn drained_nodes_leave_and_the_cluster_restarts_without_them() {
    use styx_engine::layout::LEAVE;
    let _one = one_cluster_at_a_time();
    const PASSES: [(u64, ShardId, u16); 4] = [(200, 2, 0), (400, 3, 0), (600, LEAVE, 1), (800, LEAVE, 2)];
    let done = watchdog("the durable three-node cluster whose nodes leave", 240);
    let spec = local_cluster_of(&[2, 2, 0]);
    let n = spec.n_shards();
    let dirs: Vec<_> = (0..3).map(|i| scratch(&format!("durable-leave-{i}"))).collect();
    let clients: Clients = Arc::new(Mutex::new(vec![None; usize::from(n)]));
    let first = durable_run("durable-leave", &spec, &dirs, &PASSES, &clients, 0, 0, None);
    let mut seen = Vec::new();
    let mut left_at = 0;
    for (node, ran) in first {
        let (outputs, changes) = ran.unwrap_or_else(|e| panic!("node {node}: {e}"));
        let last = changes
            .last()
            .unwrap_or_else(|| panic!("node {node} made no round change"));
        assert_eq!(
            (0..n).map(|s| last.layout.node_of(s)).collect::<Vec<_>>(),
            vec![0; usize::from(n)],
            "node {node}"
        );
        let expect_left: &[u16] = if node == 1 { &[1] } else { &[1, 2] };
        assert_eq!(last.layout.left(), expect_left, "node {node}'s last round change");
        if node == 0 {
            left_at = last.epoch;
            assert_eq!(outputs.len(), usize::from(n), "node 0 runs every shard");
        } else {
            assert!(outputs.is_empty(), "node {node} left running nothing");
        }
        seen.extend(outputs);
    }
    check(&seen, &clients, u64::from(n), PASSES.len());
    let before = balances(&seen);
    // Snapshots complete past the last leave: node 2's commits are no
    // longer needed (it left), nor node 1's.
    let complete = complete_in(&dirs[0]);
    assert!(
        complete > left_at,
        "node 0 completed nothing after the leave at {left_at} (complete: {complete})"
    );
    for d in &dirs[1..] {
        let record = std::fs::read(d.join("cluster-left")).expect("a record of the nodes gone");
        assert!(record.len() > 4, "{record:?}");
    }
    // Node 0 alone: it does not wait for the nodes gone.
    for c in clients.lock().unwrap().iter_mut().flatten() {
        c.quiet = false;
    }
    let second = durable_run(
        "durable-leave",
        &local_cluster_of(&[2, 2, 0]),
        &dirs[..1],
        &PASSES,
        &clients,
        usize::from(n),
        0,
        None,
    );
    let after = ran_where_placed(second, &[], &[0; 4], "node 0 restarted alone");
    assert_eq!(balances(&after), before, "every balance recovered as the run left it");
    for d in &dirs {
        let _ = std::fs::remove_dir_all(d);
    }
    done.store(true, Ordering::SeqCst);
}

/// A cluster of three durable nodes running `counts[i]` shards each at
/// first, node `later` listed as joining later.
fn joining_later(counts: &[u16], later: u16) -> styx_runtime::cluster::Spec {
    let mut spec = local_cluster_of(counts);
    spec.absent = vec![later];
    spec
}

/// Each node's outputs of a run that made round changes, checked: node
/// `node`'s changes went through the layouts `went(node)`, and it ran to
/// their end the shards `last` gives it.
fn changed_as(runs: Vec<NodeRun>, last: &[u16], went: impl Fn(u16) -> Vec<Vec<u16>>) -> Vec<Seen> {
    let n = last.len() as u16;
    let mut seen = Vec::new();
    for (node, ran) in runs {
        let (outputs, changes) = ran.unwrap_or_else(|e| panic!("node {node}: {e}"));
        let made: Vec<Vec<u16>> = changes
            .iter()
            .map(|c| (0..n).map(|s| c.layout.node_of(s)).collect())
            .collect();
        assert_eq!(made, went(node), "node {node}'s round changes");
        let ran: Vec<ShardId> = outputs.iter().map(|o| o.shard).collect();
        let mine: Vec<ShardId> = (0..n).filter(|s| last[usize::from(*s)] == node).collect();
        assert_eq!(ran, mine, "node {node} runs the shards the layout gives it");
        seen.extend(outputs);
    }
    seen
}

/// Every node of `spec` restarted from `dirs` with the clients done: no
/// round change, each runs the shards `last` gives it, and every balance
/// is `before`.
#[allow(clippy::too_many_arguments)]
fn restarted_as(
    name: &str,
    spec: &styx_runtime::cluster::Spec,
    dirs: &[std::path::PathBuf],
    passes: &'static [(u64, ShardId, u16)],
    clients: &Clients,
    last: &[u16],
    before: &[(u64, i64)],
    at: &str,
) {
    for c in clients.lock().unwrap().iter_mut().flatten() {
        c.quiet = false;
    }
    let n = spec.n_shards();
    let again = durable_run(name, spec, dirs, passes, clients, usize::from(n), 0, None);
    let after = ran_where_placed(again, &[], last, at);
    assert_eq!(
        balances(&after),
        before,
        "{at}: every balance recovered as the run left it"
    );
}

/// A node joining later (docs/nodes.md, "Membership"): three durable
/// nodes, shards 0, 1 | 2, 3 | none, the cluster file listing node 2 as
/// joining later. Nodes 0 and 1 run without it (no join waits for it)
/// while it waits at its first join, until shard 0's client asks for its
/// join: at that round change they record it, and it joins as a spare,
/// taking the layout they greet it with (it was told only the file's).
/// Then it is handed node 1's shards under load. Every node restarts from
/// its directory (the records make the others wait for node 2): node 2
/// with the shards it ran last, node 1 a spare, every balance as the run
/// left it.
#[test]
fn a_node_joining_later_is_added_under_load_and_handed_shards() {
    use styx_engine::layout::JOIN;
    let _one = one_cluster_at_a_time();
    const PASSES: [(u64, ShardId, u16); 3] = [(200, JOIN, 2), (400, 2, 2), (600, 3, 2)];
    let done = watchdog("the durable cluster whose node 2 joins later", 240);
    let spec = joining_later(&[2, 2, 0], 2);
    let n = spec.n_shards();
    let dirs: Vec<_> = (0..3).map(|i| scratch(&format!("durable-join-{i}"))).collect();
    let clients: Clients = Arc::new(Mutex::new(vec![None; usize::from(n)]));
    let last: Vec<u16> = vec![0, 0, 2, 2];
    let first = durable_run("durable-join", &spec, &dirs, &PASSES, &clients, 0, 0, None);
    // Node 2 takes part from the round after its join on.
    let seen = changed_as(first, &last, |node| match node {
        2 => vec![vec![0, 0, 2, 1], last.clone()],
        _ => vec![vec![0, 0, 1, 1], vec![0, 0, 2, 1], last.clone()],
    });
    check(&seen, &clients, u64::from(n), PASSES.len());
    let before = balances(&seen);
    for (i, d) in dirs.iter().enumerate() {
        let record = std::fs::read(d.join("cluster-joined"))
            .unwrap_or_else(|e| panic!("node {i}: a record of the nodes joined: {e}"));
        assert!(record.len() > 4, "{record:?}");
    }
    let spec = joining_later(&[2, 2, 0], 2);
    restarted_as(
        "durable-join",
        &spec,
        &dirs,
        &PASSES,
        &clients,
        &last,
        &before,
        "the restart",
    );
    for d in &dirs {
        let _ = std::fs::remove_dir_all(d);
    }
    done.store(true, Ordering::SeqCst);
}

/// A node joined and never handed a shard restarts with the others: it
/// committed their snapshots as a spare, placed by the layout it took at
/// its join (its own files knew only the cluster file's). Then the same
/// node holding nothing at a restart (it joined, then lost everything
/// before it committed a snapshot — here its directory is emptied): the
/// others' records name it, so they wait for it; its empty directory is
/// no part of the plan, it runs no shard at the snapshot they restore, and
/// it holds that snapshot as one of no shard from then on. Every balance
/// recovers as the run left it, each time.
#[test]
fn a_node_joined_as_a_spare_restarts_with_the_others_even_holding_nothing() {
    use styx_engine::layout::JOIN;
    let _one = one_cluster_at_a_time();
    const PASSES: [(u64, ShardId, u16); 1] = [(200, JOIN, 2)];
    let done = watchdog("the durable cluster whose joined node holds nothing", 240);
    let spec = joining_later(&[2, 2, 0], 2);
    let n = spec.n_shards();
    let dirs: Vec<_> = (0..3).map(|i| scratch(&format!("durable-join-fresh-{i}"))).collect();
    let clients: Clients = Arc::new(Mutex::new(vec![None; usize::from(n)]));
    let last: Vec<u16> = vec![0, 0, 1, 1];
    let first = durable_run("durable-join-fresh", &spec, &dirs, &PASSES, &clients, 0, 0, None);
    // The join is a round change of the nodes that ran before it.
    let seen = changed_as(first, &last, |node| if node == 2 { vec![] } else { vec![last.clone()] });
    check(&seen, &clients, u64::from(n), PASSES.len());
    let before = balances(&seen);
    let spare = manifests_in(&dirs[2]);
    assert!(
        !spare.is_empty() && spare.iter().all(|(_, s)| s.is_empty()),
        "node 2 committed snapshots as a spare: {spare:?}"
    );
    let spec = joining_later(&[2, 2, 0], 2);
    restarted_as(
        "durable-join-fresh",
        &spec,
        &dirs,
        &PASSES,
        &clients,
        &last,
        &before,
        "the restart",
    );
    // Node 2's directory is lost: it restarts holding nothing.
    std::fs::remove_dir_all(&dirs[2]).unwrap();
    std::fs::create_dir_all(&dirs[2]).unwrap();
    let spec = joining_later(&[2, 2, 0], 2);
    restarted_as(
        "durable-join-fresh",
        &spec,
        &dirs,
        &PASSES,
        &clients,
        &last,
        &before,
        "the restart without node 2's directory",
    );
    // It holds the snapshot the others restored, of no shard.
    let held = manifests_in(&dirs[2]);
    assert!(!held.is_empty() && held.iter().all(|(_, s)| s.is_empty()), "{held:?}");
    for d in &dirs {
        let _ = std::fs::remove_dir_all(d);
    }
    done.store(true, Ordering::SeqCst);
}

/// A node joining later whose id is below a member's (node 1 of shards
/// 0, 1 | none | 2, 3): it is added, then handed shard 0 at once (a round
/// change after its join's: a join ends its epoch's decision). Every node
/// restarts from its directory with the shards it ran last.
#[test]
fn a_node_joining_later_below_a_member_is_added() {
    use styx_engine::layout::JOIN;
    let _one = one_cluster_at_a_time();
    const PASSES: [(u64, ShardId, u16); 2] = [(200, JOIN, 1), (400, 0, 1)];
    let done = watchdog("the durable cluster whose node 1 joins later", 240);
    let spec = joining_later(&[2, 0, 2], 1);
    let n = spec.n_shards();
    let dirs: Vec<_> = (0..3).map(|i| scratch(&format!("durable-join-below-{i}"))).collect();
    let clients: Clients = Arc::new(Mutex::new(vec![None; usize::from(n)]));
    let last: Vec<u16> = vec![1, 0, 2, 2];
    let first = durable_run("durable-join-below", &spec, &dirs, &PASSES, &clients, 0, 0, None);
    let seen = changed_as(first, &last, |node| match node {
        1 => vec![last.clone()],
        _ => vec![vec![0, 0, 2, 2], last.clone()],
    });
    check(&seen, &clients, u64::from(n), PASSES.len());
    let before = balances(&seen);
    let spec = joining_later(&[2, 0, 2], 1);
    restarted_as(
        "durable-join-below",
        &spec,
        &dirs,
        &PASSES,
        &clients,
        &last,
        &before,
        "the restart",
    );
    for d in &dirs {
        let _ = std::fs::remove_dir_all(d);
    }
    done.store(true, Ordering::SeqCst);
}

/// A leave cut short by a crash between a node's checkpoint files and
/// their commit: of a member (node 0: the restart's plan is the snapshot
/// before the leave, replay decides it again and the members make it
/// without node 1, which their records already name), or of the leaving
/// node itself (the others committed: the restart goes on from the
/// leave). Either way node 1 started again says goodbye and stops, node
/// 0 runs every shard, money is conserved.
#[test]
fn a_leave_cut_short_by_a_crash_is_made_and_the_node_stays_out() {
    use styx_engine::layout::LEAVE;
    let _one = one_cluster_at_a_time();
    const PASSES: [(u64, ShardId, u16); 3] = [(200, 2, 0), (400, 3, 0), (600, LEAVE, 1)];
    let done = watchdog("the durable cluster whose leave crashed", 360);
    let n: u16 = 4;
    for (fail, replayed) in [((0u16, 3usize), true), ((1, 3), false)] {
        let name = format!("durable-leave-crash-{}", fail.0);
        let dirs: Vec<_> = (0..3).map(|i| scratch(&format!("{name}-{i}"))).collect();
        let clients: Clients = Arc::new(Mutex::new(vec![None; usize::from(n)]));
        let spec = local_cluster_of(&[2, 2, 0]);
        let first = durable_run(&name, &spec, &dirs, &PASSES, &clients, 0, 0, Some(fail));
        for (node, ran) in &first {
            match ran {
                Err(e) if *node == fail.0 => assert!(e.contains("before the checkpoint"), "{e}"),
                Err(e) => assert!(e.contains("stopped while joining"), "node {node}: {e}"),
                Ok(_) => panic!("node {node} ran to the end"),
            }
        }
        clients_after_a_crash(&clients, PASSES.len());
        let second = durable_run(
            &name,
            &local_cluster_of(&[2, 2, 0]),
            &dirs,
            &PASSES,
            &clients,
            usize::from(n),
            PASSES.len() as u64,
            None,
        );
        let mut after = Vec::new();
        for (node, ran) in second {
            let (outputs, changes) = ran.unwrap_or_else(|e| panic!("{name}: node {node}: {e}"));
            match node {
                0 => {
                    assert_eq!(outputs.len(), usize::from(n), "{name}: node 0 runs every shard");
                    let made: Vec<Vec<u16>> = changes.iter().map(|c| c.layout.left().to_vec()).collect();
                    let want: Vec<Vec<u16>> = if replayed { vec![vec![1]] } else { vec![] };
                    assert_eq!(made, want, "{name}: the leave made again only if rolled back");
                }
                _ => assert!(outputs.is_empty(), "{name}: node {node} runs nothing"),
            }
            after.extend(outputs);
        }
        conserved(&after, &name);
        for d in &dirs {
            let _ = std::fs::remove_dir_all(d);
        }
    }
    done.store(true, Ordering::SeqCst);
}

/// A handover that involves a spare, cut short by a crash of one node
/// between writing its checkpoint and committing it: node 2 (a spare
/// since the start) as it takes its first shard, or node 1 as it hands
/// its last one away. The restart's plan is the snapshot before — for
/// node 2 one it committed as a spare, listing no shard — replay runs to
/// the handover's epoch, decides it again and the recovered cluster makes
/// it: every account kept, money conserved, each node running what the
/// handover gives it.
#[test]
fn a_handover_to_or_from_a_spare_cut_short_by_a_crash_is_made_again() {
    let _one = one_cluster_at_a_time();
    const PASSES: [(u64, ShardId, u16); 2] = [(300, 2, 2), (600, 3, 0)];
    let done = watchdog("the durable three-node cluster with spares, crashed", 360);
    let n: u16 = 4;
    for (fail, asked, went) in [((2, 1), 1, vec![vec![0, 0, 2, 1]]), ((1, 2), 2, vec![vec![0, 0, 2, 0]])] {
        let name = format!("durable-spare-crash-{}", fail.0);
        let dirs: Vec<_> = (0..3).map(|i| scratch(&format!("{name}-{i}"))).collect();
        let clients: Clients = Arc::new(Mutex::new(vec![None; usize::from(n)]));
        let spec = local_cluster_of(&[2, 2, 0]);
        let first = durable_run(&name, &spec, &dirs, &PASSES, &clients, 0, 0, Some(fail));
        for (node, ran) in &first {
            match ran {
                Err(e) if *node == fail.0 => assert!(e.contains("before the checkpoint"), "{e}"),
                Err(e) => assert!(e.contains("stopped while joining"), "node {node}: {e}"),
                Ok(_) => panic!("node {node} ran to the end"),
            }
        }
        // The failed node's latest snapshot is from before the handover
        // the others committed.
        let latest = |node: usize| manifests_in(&dirs[node]).last().cloned().expect("snapshots");
        let cut = latest(0).0;
        assert!(latest(usize::from(fail.0)).0 < cut, "{:?}", latest(usize::from(fail.0)));
        if fail.0 == 2 {
            assert_eq!(
                latest(2).1,
                Vec::<ShardId>::new(),
                "node 2 committed snapshots as a spare"
            );
        }
        // Restart: no more transfers; the shards finish once quiet on the
        // layout of the handovers asked.
        clients_after_a_crash(&clients, asked);
        let second = durable_run(
            &name,
            &local_cluster_of(&[2, 2, 0]),
            &dirs,
            &PASSES,
            &clients,
            usize::from(n),
            asked as u64,
            None,
        );
        let last = went.last().unwrap();
        let after = ran_where_placed(second, &went, last, &name);
        conserved(&after, &name);
        for d in &dirs {
            let _ = std::fs::remove_dir_all(d);
        }
    }
    done.store(true, Ordering::SeqCst);
}
