//! Three `styxd` nodes on loopback, one shard each, as one engine: every
//! transfer crosses nodes. Under load a node is killed with SIGKILL and
//! restarted, several times; the cluster recovers each time (every node
//! rolls back to the common snapshot and replays its log), nothing
//! acknowledged is lost, nothing applies twice, money is conserved.

mod common;
mod support;

use common::*;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use styx_engine::rng::Rng;
use styx_engine::{Key, Outcome, Tid};
use styx_net::Body;
use support::*;

const NODES: usize = 3;
const KEYS: u64 = 60;
const START: i64 = 1_000_000;
const CLIENT: u64 = 777;
const CYCLES: usize = 4;
const BURST: u64 = 200;

/// One node's process and how to start it again.
struct Node {
    child: Option<Child>,
    args: Vec<String>,
    client: String,
}

impl Node {
    fn spawn(&mut self, bin: &Path) {
        let mut child = Command::new(bin)
            .args(&self.args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("styxd starts");
        let stdout = child.stdout.take().unwrap();
        // The first line comes once the node joined the cluster: read it
        // on a thread so that every node can start before any joined.
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
        });
        self.child = Some(child);
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A base whose `len` ports are free now, disjoint from every other block
/// this process handed out (the tests run in parallel, and a node must
/// find its port free when it restarts), below the kernel's ephemeral range
/// (32768 and up), so that no outgoing connection takes one meanwhile.
fn free_port_block(len: u16) -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let start = std::process::id().wrapping_mul(2_654_435_761) % SPAN;
    loop {
        let offset = NEXT.fetch_add(u32::from(len), Ordering::Relaxed);
        assert!(offset < SPAN, "no free block of {len} ports left");
        let base = (FIRST + (start + offset) % (SPAN - u32::from(len))) as u16;
        if (0..len).all(|i| std::net::TcpListener::bind(("127.0.0.1", base + i)).is_ok()) {
            return base;
        }
    }
}

/// A cluster of `NODES` nodes under `root`, each preloaded with `preload`
/// (`styxd` flags), not started.
fn cluster(root: &Path, preload: &[&str]) -> (PathBuf, Vec<Node>) {
    cluster_of(root, preload, 1)
}

/// The same with `shards` shards on each node.
fn cluster_of(root: &Path, preload: &[&str], shards: u16) -> (PathBuf, Vec<Node>) {
    let each = shards.to_string();
    cluster_placed(root, preload, &[each.as_str(); NODES], NODES as u16 * shards)
}

/// The same with node `i`'s `shards = {shards[i]}` in the cluster file (a
/// count or a list), `total` shards in all.
fn cluster_placed(root: &Path, preload: &[&str], shards: &[&str; NODES], total: u16) -> (PathBuf, Vec<Node>) {
    // Per node: peer, a data-link port per shard of the cluster, client,
    // metrics (the client port + 1, where `styx` looks by default; off
    // unless a test turns it on).
    let stride = 3 + total;
    let base = free_port_block(NODES as u16 * stride);
    let mut file = String::from("heartbeat_ms = 50\nfailure_timeout_ms = 1000\n");
    let mut nodes = Vec::new();
    for i in 0..NODES as u16 {
        let peer = base + i * stride;
        let client = format!("127.0.0.1:{}", peer + 1 + total);
        let shards = shards[usize::from(i)];
        file.push_str(&format!(
            "[[nodes]]\nid = {i}\npeer = \"127.0.0.1:{peer}\"\nclient = \"{client}\"\nshards = {shards}\n"
        ));
        let dir = root.join(format!("node-{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        nodes.push(Node {
            child: None,
            args: vec![
                "--data-dir".into(),
                dir.display().to_string(),
                "--metrics".into(),
                "off".into(),
                "--log".into(),
                std::env::var("STYX_TEST_LOG").unwrap_or_else(|_| "warn".into()),
                "--node-id".into(),
                i.to_string(),
                "--snapshot-interval-ms".into(),
                "200".into(),
            ]
            .into_iter()
            .chain(preload.iter().map(|a| a.to_string()))
            .collect(),
            client,
        });
    }
    let path = root.join("cluster.toml");
    std::fs::write(&path, file).unwrap();
    for n in &mut nodes {
        n.args.extend(["--cluster".into(), path.display().to_string()]);
    }
    (path, nodes)
}

/// Connects to `addr`, retrying while the cluster is (re)joining.
fn connect(addr: &str, within: Duration) -> Option<Conn> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Some(c) = Conn::try_connect(addr) {
            return Some(c);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

/// A request of the exactly-once client `CLIENT`, numbered `seq`.
fn send(c: &mut Conn, seq: u64, r: Req) -> u32 {
    send_as(c, CLIENT, seq, r)
}

/// Every answer to `corrs` that arrives in `within` (an answer may be a
/// refusal while the cluster recovers: those stay unanswered).
fn collect(c: &mut Conn, corrs: &BTreeMap<u32, u64>, answered: &mut BTreeMap<u64, (Tid, Outcome)>, want: usize) {
    c.stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    for _ in 0..want {
        let Some(f) = c.try_recv() else { break };
        let Some(seq) = corrs.get(&f.corr) else { continue };
        if f.body.outcome().is_none() {
            continue; // SHUTTING_DOWN, OVERLOADED: not run, resent later
        }
        let got = outcome(&f);
        match answered.get(seq) {
            Some(first) => assert_eq!(*first, got, "seq {seq} answered differently the second time"),
            None => {
                answered.insert(*seq, got);
            }
        }
    }
}

#[test]
fn three_nodes_survive_kill_9_of_one_under_load() {
    kill_9_loop_of_nodes("cluster", &[], 0);
}

/// The same while partitions move between the nodes: a copy sends one
/// entity per epoch and epochs start at most every millisecond, so a move
/// of a partition (~50 entities) spans ~50 ms and each kill falls in the
/// middle of copies across nodes. After the loop every node's map says
/// what the committed moves say, and no entity of a moved partition is
/// lost or doubled.
#[test]
fn three_nodes_survive_kill_9_in_the_middle_of_moves() {
    kill_9_loop_of_nodes(
        "cluster-moving",
        &["--move-share-entities", "1", "--epoch-gather-us", "1000"],
        2,
    );
}

/// Accounts preloaded past the first `KEYS` when partitions move: they
/// only sit in their partitions, so that a copy takes tens of epochs.
const BALLAST: u64 = 3_200;

/// `moves`: partitions asked to move (to any node's shard) each cycle.
fn kill_9_loop_of_nodes(name: &str, knobs: &[&str], moves: usize) {
    let root = data_dir(name);
    let bin = Path::new(env!("CARGO_BIN_EXE_styxd"));
    let keys = (if moves > 0 { KEYS + BALLAST } else { KEYS }).to_string();
    let mut preload = vec!["--preload", "ycsbt", "--keys", &keys];
    preload.extend_from_slice(knobs);
    let (_, mut nodes) = cluster(&root, &preload);
    for n in &mut nodes {
        n.spawn(bin);
    }
    let shards = NODES as u16;
    let mut rng = Rng::new(11);
    let mut sent: BTreeMap<u64, Req> = BTreeMap::new();
    // Per kill with moves: the victim's map version, the newest committed
    // move.
    let mut kills: Vec<(u64, Option<Tid>)> = Vec::new();
    let mut answered: BTreeMap<u64, (Tid, Outcome)> = BTreeMap::new();
    let mut next_seq = 1;
    let mut recoveries = Vec::new();
    for cycle in 0..CYCLES {
        let at = nodes[cycle % NODES].client.clone();
        let mut c = connect(&at, Duration::from_secs(60)).expect("the cluster serves");
        let mut corrs = BTreeMap::new();
        let unanswered: Vec<u64> = sent.keys().filter(|s| !answered.contains_key(s)).copied().collect();
        for seq in unanswered {
            corrs.insert(send(&mut c, seq, sent[&seq]), seq);
        }
        for _ in 0..moves {
            let m = move_off_first_owner(&mut rng, shards);
            sent.insert(next_seq, m);
            corrs.insert(send(&mut c, next_seq, m), next_seq);
            next_seq += 1;
        }
        for _ in 0..BURST {
            let debtor = rng.below(KEYS);
            let t = Req::Transfer {
                debtor,
                creditor: (debtor + 1 + rng.below(KEYS - 1)) % KEYS,
                amount: 1 + rng.below(30) as i64,
            };
            sent.insert(next_seq, t);
            corrs.insert(send(&mut c, next_seq, t), next_seq);
            next_seq += 1;
        }
        let read = corrs.len() / 2 + rng.below(corrs.len() as u64 / 2) as usize;
        collect(&mut c, &corrs, &mut answered, read);
        // Kill a node with requests in flight, restart it at once (its
        // supervisor would); the others notice and recover with it.
        let victim = (cycle + 1) % NODES;
        if moves > 0 {
            // The map's version (a switch each) and the newest move known
            // committed, to count the kills that left a decided move
            // unswitched (at the end).
            kills.push((
                placement(&nodes[victim].client).0,
                newest_committed_move(&sent, &answered),
            ));
        }
        let killed = Instant::now();
        nodes[victim].kill9();
        nodes[victim].spawn(bin);
        drop(c);
        // Serving again: a new request through another node commits.
        let probe_at = nodes[(victim + 1) % NODES].client.clone();
        let mut p = connect(&probe_at, Duration::from_secs(60)).expect("serving after the kill");
        p.stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        loop {
            p.send(Body::Get {
                operator: "account".into(),
                key: Key::from(0u64),
            });
            match p.try_recv() {
                Some(f) if matches!(f.body, Body::State { .. }) => break,
                Some(_) => std::thread::sleep(Duration::from_millis(5)),
                None => {
                    p = connect(&probe_at, Duration::from_secs(60)).expect("serving after the kill");
                    p.stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                }
            }
            assert!(
                killed.elapsed() < Duration::from_secs(60),
                "not serving 60 s after the kill"
            );
        }
        recoveries.push(killed.elapsed());
    }
    // Resolve everything still unanswered: each ran once or runs now.
    let mut rounds = 0;
    while answered.len() < sent.len() {
        rounds += 1;
        assert!(rounds < 50, "{} requests never answered", sent.len() - answered.len());
        let mut c = connect(&nodes[rounds % NODES].client, Duration::from_secs(60)).expect("serving");
        let mut corrs = BTreeMap::new();
        for seq in sent.keys().filter(|s| !answered.contains_key(s)) {
            corrs.insert(send(&mut c, *seq, sent[seq]), *seq);
        }
        let want = corrs.len();
        collect(&mut c, &corrs, &mut answered, want);
    }
    // Balances: start plus every committed transfer, once; partitions
    // where their last committed move (in serial order) put them.
    let history = History::of(&sent, &answered, KEYS, START, shards);
    let (expected, switching) = (&history.balances, &history.switching);
    if moves > 0 {
        let moved = history.moved();
        assert!(
            !moved.is_empty(),
            "the committed moves left partitions off the default rule"
        );
        // Copies go on after the recoveries; once they all switched, every
        // node's shard names the committed moves' map.
        let deadline = Instant::now() + Duration::from_secs(60);
        for n in &nodes {
            let mut c = connect(&n.client, Duration::from_secs(60)).expect("serving");
            loop {
                c.send(Body::Placement);
                match c.recv().expect("an answer").body {
                    // The version too: a partition moved a → b → a looks
                    // settled before its last switches.
                    Body::PlacementReply(p)
                        if p.moved.first().cloned().unwrap_or_default() == moved
                            && p.version == switching.len() as u64 =>
                    {
                        break;
                    }
                    Body::PlacementReply(p) => {
                        assert!(
                            Instant::now() < deadline,
                            "{}: {p:?}, not {moved:?} at version {}",
                            n.client,
                            switching.len()
                        )
                    }
                    other => panic!("PLACEMENT answered {other:?}"),
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let mid_move = history.kills_mid_move(&kills);
        eprintln!("{mid_move} of {} kills with a decided move unswitched", kills.len());
        assert!(
            mid_move > 0,
            "no kill fell while a move was copied or queued: {kills:?}"
        );
    }
    let mut c = connect(&nodes[0].client, Duration::from_secs(60)).expect("serving");
    c.stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    if moves > 0 {
        // Nothing of the moved partitions was lost or doubled.
        assert_untouched(&mut c, KEYS..KEYS + BALLAST, START);
    }
    let got: BTreeMap<u64, i64> = (0..KEYS)
        .map(|k| {
            c.send(Body::Get {
                operator: "account".into(),
                key: Key::from(k),
            });
            let f = c.recv().unwrap();
            let Body::State { value } = f.body else { panic!("{f:?}") };
            (k, value.map_or(0, |v| i64::from_le_bytes(v.try_into().unwrap())))
        })
        .collect();
    assert_eq!(
        got, *expected,
        "balances equal the acknowledged history, each transfer once"
    );
    assert_eq!(got.values().sum::<i64>(), START * KEYS as i64, "money is conserved");
    eprintln!("kill -9 to serving: {recoveries:?}");
}

/// `styx bench WORKLOAD --connect` (every node's address) while nodes are
/// killed and restarted: the run rides out each recovery (requests named
/// for exactly-once, resent on new connections), its own exact check holds
/// (each committed request applied once, nothing acknowledged lost), and
/// `styx verify` holds on the state left behind.
fn bench_through_kills(workload: &str, knobs: &[&str], in_flight: &str) {
    bench_through_kills_of(workload, knobs, in_flight, 1);
}

/// The same on nodes of `shards` shards each.
fn bench_through_kills_of(workload: &str, knobs: &[&str], in_flight: &str, shards: u16) {
    let root = data_dir(&format!("cluster-bench-{workload}-{shards}"));
    let mut preload = vec!["--preload", workload];
    preload.extend_from_slice(knobs);
    let (_, nodes) = cluster_of(&root, &preload, shards);
    bench_through_kills_on(workload, knobs, in_flight, nodes, NODES as u64 * u64::from(shards));
}

/// The same on `nodes` (preloaded for `workload`, not started) of `shards`
/// shards in all; the bench's report.
fn bench_through_kills_on(
    workload: &str,
    knobs: &[&str],
    in_flight: &str,
    mut nodes: Vec<Node>,
    shards: u64,
) -> serde_json::Value {
    let bin = Path::new(env!("CARGO_BIN_EXE_styxd"));
    for n in &mut nodes {
        n.spawn(bin);
    }
    let addrs = nodes.iter().map(|n| n.client.clone()).collect::<Vec<_>>().join(",");
    for n in &nodes {
        connect(&n.client, Duration::from_secs(60)).expect("the cluster serves");
    }
    let bench = Command::new(env!("CARGO_BIN_EXE_styx"))
        .args([
            "bench",
            workload,
            "--connect",
            &addrs,
            "--connections",
            "1",
            "--exactly-once",
        ])
        .args(["--duration", "6", "--warmup", "0", "--json", "--no-serial", "--quiet"])
        .args(["--in-flight", in_flight])
        .args(knobs)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("styx runs");
    for (at, victim) in [(1.5, 1), (2.0, 2)] {
        std::thread::sleep(Duration::from_secs_f64(at));
        nodes[victim].kill9();
        nodes[victim].spawn(bin);
    }
    let out = bench.wait_with_output().expect("styx bench finishes");
    let report = report_of(workload, &out);
    assert_eq!(report["invariants_ok"], true, "{}", report["invariant_errors"]);
    assert_eq!(report["shards"], shards);
    assert_eq!(report["parameters"]["nodes"], NODES as u64);
    assert!(report["committed"].as_u64().unwrap() > 0, "{report}");
    // The kills happened inside the run: connections broke and came back.
    assert!(
        report["parameters"]["reconnects"].as_u64().unwrap() > 0,
        "no connection broke: {report}"
    );
    eprintln!(
        "{workload}: {} committed, {} resent, {} reconnects",
        report["committed"], report["parameters"]["retried"], report["parameters"]["reconnects"]
    );
    let out = Command::new(env!("CARGO_BIN_EXE_styx"))
        .args(["verify", workload, "--connect", &addrs])
        .args(knobs)
        .output()
        .expect("styx runs");
    let text = output_text(&out);
    assert!(out.status.success(), "styx verify {workload}: {text}");
    assert!(text.contains("consistent"), "{text}");
    report
}

fn report_of(workload: &str, out: &Output) -> serde_json::Value {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "styx bench {workload} failed:\n{stderr}");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{stderr}", String::from_utf8_lossy(&out.stdout)))
}

#[test]
fn ycsbt_bench_rides_out_kill_9_of_nodes() {
    bench_through_kills("ycsbt", &["--keys", "300"], "8");
}

/// Nodes of two shards each: their shards meet through in-process links,
/// other nodes' through TCP (the first cluster test with more than one
/// shard per node; such a cluster once hung, see `ShardLoop::park`).
#[test]
fn ycsbt_bench_on_nodes_of_two_shards_rides_out_kill_9_of_nodes() {
    bench_through_kills_of("ycsbt", &["--keys", "300"], "8", 2);
}

/// A cluster file that places the shards by list (node 0 runs shards 0
/// and 3, node 1 runs 1 and 4, node 2 runs 2 and 5): every node answers
/// LAYOUT with the placement, `styx status` shows it, the bench routes by
/// it, and the cluster rides out kill -9 of nodes as a cluster numbered in
/// order does (each node recovers the shards it lists).
#[test]
fn a_cluster_placed_by_its_file_rides_out_kill_9_of_nodes() {
    let root = data_dir("cluster-placed");
    let knobs = ["--keys", "300"];
    let (_, mut nodes) = cluster_placed(
        &root,
        &["--preload", "ycsbt", "--keys", "300"],
        &["[0, 3]", "[4, 1]", "[2, 5]"],
        6,
    );
    let bin = Path::new(env!("CARGO_BIN_EXE_styxd"));
    for n in &mut nodes {
        n.spawn(bin);
    }
    for n in &nodes {
        let mut c = connect(&n.client, Duration::from_secs(60)).expect("the cluster serves");
        c.send(Body::Layout);
        match c.recv().expect("an answer").body {
            Body::LayoutReply(l) => assert_eq!(l.node_of, [0, 1, 2, 0, 1, 2], "{}", n.client),
            other => panic!("LAYOUT answered {other:?}"),
        }
    }
    let (code, text) = styx(&["status", "--connect", &nodes[0].client, "--metrics", "127.0.0.1:1"]);
    assert_eq!(code, 0, "{text}");
    for (i, shards) in ["0,3", "1,4", "2,5"].iter().enumerate() {
        let line = text
            .lines()
            .find(|l| l.contains(&nodes[i].client) && !l.starts_with("server"))
            .unwrap_or_else(|| panic!("node {i} missing:\n{text}"));
        assert!(line.contains(shards), "node {i} runs shards {shards}: {line}");
    }
    for n in &mut nodes {
        n.kill9();
    }
    let report = bench_through_kills_on("ycsbt", &knobs, "8", nodes, 6);
    assert_eq!(
        report["parameters"]["layout"],
        serde_json::json!([0, 1, 2, 0, 1, 2]),
        "the bench routed by LAYOUT"
    );
}

/// The node at `addr`'s answer to `body`, on a connection of its own.
fn ask(addr: &str, body: Body) -> Option<Body> {
    let mut c = connect(addr, Duration::from_secs(5))?;
    c.stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.send(body);
    Some(c.try_recv()?.body)
}

/// Which node runs each shard, as the node at `addr` answers LAYOUT.
fn layout_at(addr: &str) -> Option<Vec<u16>> {
    match ask(addr, Body::Layout)? {
        Body::LayoutReply(l) => Some(l.node_of),
        _ => None,
    }
}

/// The nodes that left the cluster, as the node at `addr` answers MEMBERS.
fn members_at(addr: &str) -> Option<Vec<u16>> {
    match ask(addr, Body::Members)? {
        Body::MembersReply(m) => Some(m.left),
        _ => None,
    }
}

/// Waits until every node answers LAYOUT with `want`.
fn await_layout(nodes: &[Node], want: &[u16], why: &str) {
    let deadline = Instant::now() + Duration::from_secs(90);
    for n in nodes {
        loop {
            let got = layout_at(&n.client);
            if got.as_deref() == Some(want) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{why}: {} answers LAYOUT {got:?}, not {want:?}",
                n.client
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// An 8 s exactly-once YCSB-T load on `addrs` (`knobs` its accounts),
/// its JSON report on stdout.
fn exactly_once_ycsbt(addrs: &str, knobs: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_styx"))
        .args([
            "bench",
            "ycsbt",
            "--connect",
            addrs,
            "--connections",
            "1",
            "--exactly-once",
        ])
        .args(["--duration", "8", "--warmup", "0", "--json", "--no-serial", "--quiet"])
        .args(["--in-flight", "8"])
        .args(knobs)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("styx runs")
}

/// `styx verify ycsbt` on `addrs` says the state is consistent.
fn verify_ycsbt(addrs: &str, knobs: &[&str], when: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_styx"))
        .args(["verify", "ycsbt", "--connect", addrs])
        .args(knobs)
        .output()
        .expect("styx runs");
    let text = output_text(&out);
    assert!(out.status.success() && text.contains("consistent"), "{when}: {text}");
}

/// `styx handover SHARD NODE` through the node at `addr`.
fn hand_over(addr: &str, shard: u16, node: u16, wait: bool) {
    let (shard, node) = (shard.to_string(), node.to_string());
    let mut args = vec!["handover", "--connect", addr, "--timeout", "60", &shard, &node];
    if !wait {
        args.push("--no-wait");
    }
    let (code, text) = styx(&args);
    assert_eq!(code, 0, "styx handover {shard} {node}: {text}");
}

/// Daemons hand shards to each other under an exactly-once load: a node
/// killed -9 as a handover it sends is made (its hand-off, the checkpoint)
/// and restarted; the handover decided is made once the cluster recovers,
/// every node answers the same layout, clients keep their answers (the
/// bench's invariants, `styx verify`), and a restart of every node finds
/// every shard where it ran last.
#[test]
fn daemons_hand_shards_over_under_load_through_kill_9() {
    let root = data_dir("cluster-handover");
    let knobs = ["--keys", "300"];
    let (_, mut nodes) = cluster_of(&root, &["--preload", "ycsbt", "--keys", "300"], 2);
    let bin = Path::new(env!("CARGO_BIN_EXE_styxd"));
    for n in &mut nodes {
        n.spawn(bin);
    }
    let addrs = nodes.iter().map(|n| n.client.clone()).collect::<Vec<_>>().join(",");
    await_layout(&nodes, &[0, 0, 1, 1, 2, 2], "the cluster file's layout");
    let bench = exactly_once_ycsbt(&addrs, &knobs);
    std::thread::sleep(Duration::from_millis(1000));
    // A client of node 1, whose shards stay there: its connection outlives
    // the handover that brings node 1 another shard.
    let mut stays = connect(&nodes[1].client, Duration::from_secs(10)).expect("node 1 serves");
    stays.stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let transfer = Req::Transfer {
        debtor: 1,
        creditor: 2,
        amount: 0,
    };
    for seq in 1..=2 {
        if seq == 2 {
            // Node 0's shard 1 to node 1, waiting until it serves there.
            hand_over(&nodes[0].client, 1, 1, true);
            await_layout(&nodes, &[0, 1, 1, 1, 2, 2], "after the first handover");
        }
        send_as(&mut stays, 4242, seq, transfer);
        let answer = stays.recv().expect("the connection of a staying shard stays open");
        assert!(matches!(outcome(&answer).1, Outcome::Committed { .. }), "{answer:?}");
    }
    std::thread::sleep(Duration::from_millis(500));
    // Node 2's shard 4 to node 0: decided and durable, then node 2 dies in
    // the round change it starts (its hand-off, the checkpoint).
    hand_over(&nodes[2].client, 4, 0, false);
    nodes[2].kill9();
    nodes[2].spawn(bin);
    await_layout(&nodes, &[0, 1, 1, 1, 0, 2], "the handover decided before the kill");
    // And back, once the cluster recovered.
    hand_over(&nodes[1].client, 1, 0, true);
    let out = bench.wait_with_output().expect("styx bench finishes");
    let report = report_of("ycsbt", &out);
    assert_eq!(report["invariants_ok"], true, "{}", report["invariant_errors"]);
    assert!(report["committed"].as_u64().unwrap() > 0, "{report}");
    let verify = |when: &str| verify_ycsbt(&addrs, &knobs, when);
    verify("after the handovers");
    let last = [0, 0, 1, 1, 0, 2];
    await_layout(&nodes, &last, "after the last handover");
    // Every node killed and restarted: each recovers the shards it ran last
    // from its own directory (the cluster file still says otherwise).
    for n in &mut nodes {
        n.kill9();
    }
    for n in &mut nodes {
        n.spawn(bin);
    }
    await_layout(&nodes, &last, "after a restart of every node");
    verify("after a restart of every node");
    // Handovers that cannot be made are refused, and nothing moves.
    for (shard, node, why) in [("9", "0", "no shard 9"), ("5", "3", "no node 3")] {
        let (code, text) = styx(&["handover", "--connect", &nodes[0].client, shard, node]);
        assert_ne!(code, 0, "styx handover {shard} {node}: {text}");
        assert!(text.contains(why), "styx handover {shard} {node}: {text}");
    }
    await_layout(&nodes, &last, "after the refused handovers");
}

/// `GET path` on the HTTP server at `addr`: the whole answer.
fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// What node `addr` answers STATUS: its shard count.
fn shards_at(addr: &str) -> Option<u16> {
    let mut c = connect(addr, Duration::from_secs(5))?;
    c.stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.send(Body::Status);
    match c.try_recv()?.body {
        Body::StatusReply(st) => Some(st.shards),
        _ => None,
    }
}

/// A node added and a node drained, with daemons: node 2 is a spare in
/// the cluster file (`shards = 0`). It listens on its client port without
/// an engine — MAP, LAYOUT and STATUS answered, a request refused as not
/// run — while it commits the cluster's snapshots. Under an exactly-once
/// load it is filled with its share of shards (`styx node fill`: a node
/// added), then node 1 is drained (`styx node drain`) and serves as a
/// spare; the spare is killed -9
/// and restarted, every node too; clients keep their answers (the bench's
/// invariants, `styx verify`), and every node finds its shards, or none,
/// where the last handover left them.
#[test]
fn a_spare_daemon_is_handed_shards_and_a_drained_one_becomes_a_spare() {
    let root = data_dir("cluster-spare");
    let knobs = ["--keys", "300"];
    let (_, mut nodes) = cluster_placed(&root, &["--preload", "ycsbt", "--keys", "300"], &["2", "2", "0"], 4);
    let bin = Path::new(env!("CARGO_BIN_EXE_styxd"));
    let mut metrics = Vec::new();
    for n in &mut nodes {
        // Metrics beside the client port (where `styx` looks for them).
        let (host, port) = n.client.rsplit_once(':').unwrap();
        let at = n.args.iter().position(|a| a == "--metrics").unwrap();
        n.args[at + 1] = format!("{host}:{}", port.parse::<u16>().unwrap() + 1);
        metrics.push(n.args[at + 1].clone());
        n.spawn(bin);
    }
    let addrs = nodes.iter().map(|n| n.client.clone()).collect::<Vec<_>>().join(",");
    await_layout(&nodes, &[0, 0, 1, 1], "the cluster file's layout");
    assert_eq!(shards_at(&nodes[2].client), Some(0), "the spare runs no shard");
    let health = http_get(&metrics[2], "/health");
    assert!(health.contains("200 OK") && health.contains("spare"), "{health}");
    // A partition move waits on every node's metrics, the spare's too.
    let (code, text) = styx(&["rebalance", "--connect", &nodes[0].client, "account", "5", "3"]);
    assert!(code == 0 && text.contains("switched within"), "{text}");
    // A request sent to the spare did not run, and says where to go.
    let mut spare = connect(&nodes[2].client, Duration::from_secs(10)).expect("the spare listens");
    spare.stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let transfer = Req::Transfer {
        debtor: 1,
        creditor: 2,
        amount: 5,
    };
    send_as(&mut spare, 4343, 1, transfer);
    let refused = spare.recv().expect("an answer");
    match &refused.body {
        Body::Error { code, message } => {
            assert_eq!(*code, styx_net::ErrorCode::SHUTTING_DOWN);
            assert!(message.contains("runs no shard"), "{message}");
        }
        other => panic!("a spare answered a request with {other:?}"),
    }
    drop(spare);
    let bench = exactly_once_ycsbt(&addrs, &knobs);
    std::thread::sleep(Duration::from_millis(1000));
    // Node 2 added: filled with its share, shard 1 from node 0 (asked
    // through the spare itself, which sends it to a node that runs shards).
    let (code, text) = styx(&["node", "fill", "--connect", &nodes[2].client, "2"]);
    assert_eq!(code, 0, "styx node fill 2: {text}");
    assert!(text.contains("shard 1 runs on node 2"), "{text}");
    await_layout(&nodes, &[0, 2, 1, 1], "node 2 added");
    assert_eq!(shards_at(&nodes[2].client), Some(1));
    let (code, text) = styx(&["node", "fill", "--connect", &nodes[1].client, "2"]);
    assert!(
        code == 0 && text.contains("nothing to hand over"),
        "filled again: {text}"
    );
    // Node 1 drained: shard 2 to node 0, shard 3 to node 2; it goes on as
    // a spare.
    let (code, text) = styx(&["node", "drain", "--connect", &nodes[0].client, "1"]);
    assert_eq!(code, 0, "styx node drain 1: {text}");
    let last = [0, 2, 0, 2];
    await_layout(&nodes, &last, "node 1 drained");
    assert_eq!(shards_at(&nodes[1].client), Some(0), "node 1 is a spare");
    std::thread::sleep(Duration::from_millis(1000));
    // The spare killed and back: the cluster recovers, node 1 a spare.
    nodes[1].kill9();
    nodes[1].spawn(bin);
    await_layout(&nodes, &last, "after the spare's kill -9");
    let out = bench.wait_with_output().expect("styx bench finishes");
    let report = report_of("ycsbt", &out);
    assert_eq!(report["invariants_ok"], true, "{}", report["invariant_errors"]);
    assert!(report["committed"].as_u64().unwrap() > 0, "{report}");
    let verify = |when: &str| verify_ycsbt(&addrs, &knobs, when);
    verify("after the handovers");
    for n in &mut nodes {
        n.kill9();
    }
    for n in &mut nodes {
        n.spawn(bin);
    }
    await_layout(&nodes, &last, "after a restart of every node");
    assert_eq!(shards_at(&nodes[1].client), Some(0), "node 1 is a spare still");
    verify("after a restart of every node");
}

/// Three daemons preloaded with 300 YCSB-T accounts, running: nodes 0
/// and 1 with two shards each, node 2 a spare; and the daemon's binary.
fn two_nodes_and_a_spare(name: &str) -> (Vec<Node>, &'static Path) {
    let (_, mut nodes) = cluster_placed(
        &data_dir(name),
        &["--preload", "ycsbt", "--keys", "300"],
        &["2", "2", "0"],
        4,
    );
    let bin = Path::new(env!("CARGO_BIN_EXE_styxd"));
    for n in &mut nodes {
        n.spawn(bin);
    }
    await_layout(&nodes, &[0, 0, 1, 1], "the cluster file's layout");
    (nodes, bin)
}

/// Nodes leave a running cluster for good (`styx node remove`): under an
/// exactly-once load the spare, node 2, leaves, then node 1 is drained
/// and leaves; each daemon stops on its own, exit code 0. Node 0 serves
/// on with every shard; killed -9 and started again alone (the cluster
/// file still lists three nodes) it recovers and serves; node 1 started
/// again says goodbye and stops. Clients keep their answers (the
/// bench's invariants, `styx verify`).
#[test]
fn drained_daemons_leave_and_the_cluster_runs_without_them() {
    let knobs = ["--keys", "300"];
    let (mut nodes, bin) = two_nodes_and_a_spare("cluster-leave");
    let (code, text) = styx(&["node", "remove", "--connect", &nodes[0].client, "1"]);
    assert!(
        code != 0 && text.contains("node 1 runs shards [2, 3]") && text.contains("styx node drain 1"),
        "a node that runs shards is not removed: {text}"
    );
    let addrs = format!("{},{}", nodes[0].client, nodes[1].client);
    let bench = exactly_once_ycsbt(&addrs, &knobs);
    std::thread::sleep(Duration::from_millis(1000));
    let left = |n: &mut Node, which: &str| {
        let status = n.child.as_mut().expect("running").wait().expect("the daemon stops");
        assert!(status.success(), "{which} stopped with {status}");
        n.child = None;
    };
    let (code, text) = styx(&["node", "remove", "--connect", &nodes[0].client, "2"]);
    assert!(
        code == 0 && text.contains("node 2 left the cluster"),
        "styx node remove 2: {text}"
    );
    left(&mut nodes[2], "node 2");
    for n in &nodes[..2] {
        assert_eq!(members_at(&n.client), Some(vec![2]), "{} answers MEMBERS", n.client);
    }
    // `styx status` says node 2 left; the cluster is healthy without it.
    let (code, text) = styx(&["status", "--connect", &nodes[0].client, "--metrics", "127.0.0.1:1"]);
    let line = text
        .lines()
        .find(|l| l.contains(&nodes[2].client) && !l.starts_with("server"))
        .unwrap_or_else(|| panic!("node 2 missing:\n{text}"));
    assert!(code == 0 && line.ends_with("left the cluster"), "{text}");
    let (code, text) = styx(&["node", "drain", "--connect", &nodes[0].client, "1"]);
    assert_eq!(code, 0, "styx node drain 1: {text}");
    await_layout(&nodes[..2], &[0, 0, 0, 0], "node 1 drained");
    assert_eq!(members_at(&nodes[1].client), Some(vec![2]), "the spare answers MEMBERS");
    let (code, text) = styx(&["node", "remove", "--connect", &nodes[1].client, "1"]);
    assert!(
        code == 0 && text.contains("node 1 left the cluster"),
        "styx node remove 1: {text}"
    );
    left(&mut nodes[1], "node 1");
    let out = bench.wait_with_output().expect("styx bench finishes");
    let report = report_of("ycsbt", &out);
    assert_eq!(report["invariants_ok"], true, "{}", report["invariant_errors"]);
    assert!(report["committed"].as_u64().unwrap() > 0, "{report}");
    verify_ycsbt(&nodes[0].client, &knobs, "after the leaves");
    // Node 0 alone, after a kill -9: it waits for no node gone.
    nodes[0].kill9();
    nodes[0].spawn(bin);
    await_layout(&nodes[..1], &[0, 0, 0, 0], "node 0 restarted alone");
    verify_ycsbt(&nodes[0].client, &knobs, "after node 0's restart alone");
    // Node 1 started again: its directory says it left; it stops.
    nodes[1].spawn(bin);
    left(&mut nodes[1], "node 1 started again");
    verify_ycsbt(&nodes[0].client, &knobs, "after node 1's goodbye");
}

/// A node the cluster file lists as joining later (`joins_later = true`)
/// is added to a running cluster under an exactly-once load: nodes 0 and
/// 1 start and serve without it; its daemon, started, waits to be added
/// (its client port stays closed); `styx node add 2` makes it a member
/// (the command returns once it answers, a spare) and `styx node fill 2`
/// hands it shards while the load runs on. The bench keeps every answer,
/// `styx verify` finds the state consistent; a second add says it is a
/// member. Then every node is killed -9 and started again: they recover
/// with node 2 a member running its shards (the records make the others
/// wait for it), and the state is still consistent.
#[test]
fn a_daemon_listed_as_joining_later_is_added_and_filled_under_load() {
    let knobs = ["--keys", "300"];
    let (_, mut nodes) = cluster_placed(
        &data_dir("cluster-join"),
        &["--preload", "ycsbt", "--keys", "300"],
        &["2", "2", "0\njoins_later = true"],
        4,
    );
    let bin = Path::new(env!("CARGO_BIN_EXE_styxd"));
    for n in &mut nodes[..2] {
        n.spawn(bin);
    }
    await_layout(&nodes[..2], &[0, 0, 1, 1], "nodes 0 and 1 run without node 2");
    let (code, text) = styx(&["node", "fill", "--connect", &nodes[0].client, "2", "--wait-s", "5"]);
    assert!(
        code != 0 && text.contains("node 2 has not joined the cluster"),
        "a node not added is handed nothing: {text}"
    );
    nodes[2].spawn(bin);
    let addrs = format!("{},{}", nodes[0].client, nodes[1].client);
    let bench = exactly_once_ycsbt(&addrs, &knobs);
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(layout_at(&nodes[2].client), None, "node 2 serves before it is added");
    let (code, text) = styx(&["node", "add", "--connect", &nodes[0].client, "2"]);
    assert!(
        code == 0 && text.contains("node 2 joined the cluster"),
        "styx node add 2: {text}"
    );
    assert_eq!(
        layout_at(&nodes[2].client),
        Some(vec![0, 0, 1, 1]),
        "node 2 answers as a spare"
    );
    let (code, text) = styx(&["node", "fill", "--connect", &nodes[0].client, "2"]);
    assert_eq!(code, 0, "styx node fill 2: {text}");
    let filled = layout_at(&nodes[0].client).expect("node 0 answers LAYOUT");
    assert!(filled.contains(&2), "node 2 runs a shard: {filled:?}");
    await_layout(&nodes, &filled, "node 2 filled");
    let out = bench.wait_with_output().expect("styx bench finishes");
    let report = report_of("ycsbt", &out);
    assert_eq!(report["invariants_ok"], true, "{}", report["invariant_errors"]);
    assert!(report["committed"].as_u64().unwrap() > 0, "{report}");
    verify_ycsbt(&nodes[0].client, &knobs, "after the join");
    let (code, text) = styx(&["node", "add", "--connect", &nodes[0].client, "2"]);
    assert!(
        code == 0 && text.contains("node 2 is a member of the cluster already"),
        "styx node add 2, again: {text}"
    );
    for n in &mut nodes {
        n.kill9();
    }
    for n in &mut nodes {
        n.spawn(bin);
    }
    await_layout(&nodes, &filled, "every node killed -9 and started again");
    verify_ycsbt(&nodes[2].client, &knobs, "after the restart");
}

/// A kill -9 in the middle of a leave, of the node leaving and then of the
/// member that runs every shard, each restarted at once, under an
/// exactly-once load: the leave is made once (a request cut off with its
/// node is asked again, or found made), the node that left stops by itself
/// (exit 0) and never runs a shard again, clients keep their answers and
/// money is conserved.
#[test]
fn a_kill_9_in_the_middle_of_a_leave_recovers_and_the_node_stays_out() {
    let knobs = ["--keys", "300"];
    let (mut nodes, bin) = two_nodes_and_a_spare("cluster-leave-kill");
    let addrs = format!("{},{}", nodes[0].client, nodes[1].client);
    let bench = exactly_once_ycsbt(&addrs, &knobs);
    std::thread::sleep(Duration::from_millis(500));
    // Asks node `gone` to leave through node 0, killing node `killed` -9
    // `after` the request went out and starting it again `back` later
    // (node `gone` too: it learns it left from the others' hellos, those
    // of nodes still joining or of nodes running on without it, or leaves
    // when the leave is made after it is back); asks again if the first
    // request was cut off. Node `gone` then stops by itself.
    let leave = |nodes: &mut [Node], gone: usize, killed: usize, after: Duration, back: Duration, layout: &[u16]| {
        let remove = Command::new(env!("CARGO_BIN_EXE_styx"))
            .args(["node", "remove", "--connect", &nodes[0].client, &gone.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("styx runs");
        std::thread::sleep(after);
        nodes[killed].kill9();
        std::thread::sleep(back);
        nodes[killed].spawn(bin);
        let out = remove.wait_with_output().expect("styx node remove finishes");
        let text = output_text(&out);
        let made = format!("node {gone} left the cluster");
        if !out.status.success() {
            // Cut off with the node it went through: made or not, ask again.
            await_layout(&nodes[..1], layout, "the cluster back");
            let (code, again) = styx(&["node", "remove", "--connect", &nodes[0].client, &gone.to_string()]);
            assert!(
                again.contains(&made),
                "styx node remove {gone}, asked again ({code}) after {text}: {again}"
            );
        } else {
            assert!(text.contains(&made), "styx node remove {gone}: {text}");
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            // (Left in `nodes`, a daemon that fails this is killed.)
            let child = nodes[gone].child.as_mut().expect("running");
            if let Some(status) = child.try_wait().expect("a status") {
                break status;
            }
            assert!(Instant::now() < deadline, "node {gone} still runs after its leave");
            std::thread::sleep(Duration::from_millis(50));
        };
        nodes[gone].child = None;
        assert!(status.success(), "node {gone} stopped with {status}");
    };
    // The spare, killed as its leave is asked for, and back once the
    // others run on without it (or at once).
    leave(
        &mut nodes,
        2,
        2,
        Duration::from_millis(40),
        Duration::from_millis(1500),
        &[0, 0, 1, 1],
    );
    let (code, text) = styx(&["node", "drain", "--connect", &nodes[0].client, "1"]);
    assert_eq!(code, 0, "styx node drain 1: {text}");
    await_layout(&nodes[..1], &[0, 0, 0, 0], "node 1 drained");
    // Node 0, which runs every shard and takes the request, killed as
    // node 1's leave is asked for.
    leave(
        &mut nodes,
        1,
        0,
        Duration::from_millis(40),
        Duration::from_millis(300),
        &[0, 0, 0, 0],
    );
    let out = bench.wait_with_output().expect("styx bench finishes");
    let report = report_of("ycsbt", &out);
    assert_eq!(report["invariants_ok"], true, "{}", report["invariant_errors"]);
    assert!(report["committed"].as_u64().unwrap() > 0, "{report}");
    verify_ycsbt(&nodes[0].client, &knobs, "after the leaves");
    // Both started again: each says goodbye and stops; node 0 runs on.
    for gone in [1, 2] {
        nodes[gone].spawn(bin);
        let status = nodes[gone].child.as_mut().unwrap().wait().expect("the daemon stops");
        assert!(status.success(), "node {gone} started again stopped with {status}");
        nodes[gone].child = None;
    }
    await_layout(&nodes[..1], &[0, 0, 0, 0], "node 0 after the goodbyes");
    verify_ycsbt(&nodes[0].client, &knobs, "after the goodbyes");
    assert_eq!(members_at(&nodes[0].client), Some(vec![1, 2]), "MEMBERS");
    let (code, text) = styx(&["node", "remove", "--connect", &nodes[0].client, "1"]);
    assert!(
        code == 0 && text.contains("node 1 left the cluster already"),
        "styx node remove 1 again: {text}"
    );
}

#[test]
fn tpcc_bench_rides_out_kill_9_of_nodes() {
    bench_through_kills("tpcc", &["--warehouses", "3", "--scale", "small"], "1");
}

/// A serving cluster preloaded with 300 YCSB-T accounts, with each node's
/// metrics beside its client port if `metrics`; and its client addresses.
fn ycsbt_cluster(name: &str, metrics: bool) -> (Vec<Node>, String) {
    let bin = Path::new(env!("CARGO_BIN_EXE_styxd"));
    let (_, mut nodes) = cluster(&data_dir(name), &["--preload", "ycsbt", "--keys", "300"]);
    for n in &mut nodes {
        if metrics {
            let (host, port) = n.client.rsplit_once(':').unwrap();
            let at = n.args.iter().position(|a| a == "--metrics").unwrap();
            n.args[at + 1] = format!("{host}:{}", port.parse::<u16>().unwrap() + 1);
        }
        n.spawn(bin);
    }
    let addrs = nodes.iter().map(|n| n.client.clone()).collect::<Vec<_>>().join(",");
    for n in &nodes {
        connect(&n.client, Duration::from_secs(60)).expect("the cluster serves");
    }
    (nodes, addrs)
}

/// The report of a short YCSB-T run of `seconds` against `addrs`.
fn short_ycsbt(addrs: &str, seconds: &str) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_styx"))
        .args([
            "bench",
            "ycsbt",
            "--connect",
            addrs,
            "--connections",
            "1",
            "--keys",
            "300",
        ])
        .args([
            "--duration",
            seconds,
            "--warmup",
            "0",
            "--json",
            "--no-serial",
            "--quiet",
        ])
        .args(["--in-flight", "8"])
        .output()
        .expect("styx runs");
    report_of("ycsbt", &out)
}

#[test]
fn the_bench_pool_routes_moved_partitions_to_their_new_node() {
    let (nodes, addrs) = ycsbt_cluster("cluster-placement", false);
    // Four partitions of node 0's shard move to node 2's, across nodes.
    let moved: Vec<(u32, u16)> = [0u32, 3, 6, 9].iter().map(|p| (*p, 2)).collect();
    for (p, to) in &moved {
        let out = Command::new(env!("CARGO_BIN_EXE_styx"))
            .args(["rebalance", "--connect", &nodes[0].client, "--no-wait", "account"])
            .args([p.to_string(), to.to_string()])
            .output()
            .expect("styx runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    // Every node's PLACEMENT names them once they switched.
    let deadline = Instant::now() + Duration::from_secs(30);
    for n in &nodes {
        let mut c = connect(&n.client, Duration::from_secs(10)).expect("a connection");
        loop {
            c.send(Body::Placement);
            match c.recv().expect("an answer").body {
                Body::PlacementReply(p) if p.version == 4 && p.moved[0] == moved => break,
                Body::PlacementReply(p) => assert!(Instant::now() < deadline, "{}: {p:?}", n.client),
                other => panic!("PLACEMENT answered {other:?}"),
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let report = short_ycsbt(&addrs, "2");
    assert_eq!(report["invariants_ok"], true, "{}", report["invariant_errors"]);
    let p = &report["parameters"];
    assert_eq!(p["placement_version"], 4, "{report}");
    // Transfers rooted in the moved partitions went to node 2 (4 of 64
    // partitions: about 1 in 16 requests).
    let (rerouted, committed) = (p["rerouted"].as_u64().unwrap(), report["committed"].as_u64().unwrap());
    assert!(
        rerouted * 40 > committed && rerouted * 8 < committed,
        "{rerouted} of {committed}"
    );
}

#[test]
fn rebalance_auto_reads_every_nodes_counts() {
    let (nodes, addrs) = ycsbt_cluster("cluster-auto", true);
    short_ycsbt(&addrs, "1");
    // Counts published every 100 ms.
    std::thread::sleep(Duration::from_millis(300));
    // Connected to node 1 only, with no --metrics: MAP names the nodes,
    // and every node's metrics are read.
    let out = Command::new(env!("CARGO_BIN_EXE_styx"))
        .args([
            "rebalance",
            "--connect",
            &nodes[1].client,
            "account",
            "--auto",
            "--dry-run",
        ])
        .args(["--window-s", "0"])
        .output()
        .expect("styx runs");
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    let counts = text
        .lines()
        .find_map(|l| l.strip_prefix("invocations per shard ["))
        .and_then(|l| l.split_once(']'))
        .unwrap_or_else(|| panic!("no counts: {text}"))
        .0;
    let counts: Vec<u64> = counts.split(", ").map(|c| c.parse().unwrap()).collect();
    assert_eq!(counts.len(), NODES, "{text}");
    assert!(counts.iter().all(|c| *c > 0), "a node's shard was not counted: {text}");
}

/// `styx rebalance --drain-node 2` under load: every partition leaves node
/// 2's shard, the load goes on (every transfer exactly once, money
/// conserved, by the bench's own check), and every node's PLACEMENT says
/// so; then `--auto` under load gives node 2 partitions again.
#[test]
fn drain_node_moves_every_partition_off_it_under_load() {
    let (nodes, addrs) = ycsbt_cluster("cluster-drain", true);
    let load = std::thread::spawn(move || short_ycsbt(&addrs, "4"));
    std::thread::sleep(Duration::from_millis(500));
    let (code, text) = styx(&[
        "rebalance",
        "--connect",
        &nodes[0].client,
        "account",
        "--drain-node",
        "2",
    ]);
    assert_eq!(code, 0, "{text}");
    let partitions = styx_tools::apps::PARTITIONS;
    let on_node_2 = (0..partitions)
        .filter(|p| styx_engine::partition_owner(*p, 3) == 2)
        .count();
    assert!(
        text.contains(&format!("holds {on_node_2} partitions of account")),
        "{text}"
    );
    assert_eq!(text.matches("switched within").count(), on_node_2, "{text}");
    for n in &nodes {
        let (version, moved) = placement(&n.client);
        assert_eq!(version, on_node_2 as u64, "{}: a switch per partition", n.client);
        let owner = |p: u32| {
            moved
                .iter()
                .find(|(q, _)| *q == p)
                .map_or(styx_engine::partition_owner(p, 3), |(_, o)| *o)
        };
        assert!(
            (0..partitions).all(|p| owner(p) != 2),
            "{}: node 2 still holds partitions: {moved:?}",
            n.client
        );
    }
    let report = load.join().unwrap();
    assert_eq!(report["invariants_ok"], true, "{}", report["invariant_errors"]);
    // Under load again, `--auto` by the last second's counts fills the
    // emptied node: it carries none of them, the others all.
    let addrs = nodes.iter().map(|n| n.client.clone()).collect::<Vec<_>>().join(",");
    let load = std::thread::spawn(move || short_ycsbt(&addrs, "4"));
    std::thread::sleep(Duration::from_millis(500));
    let (code, text) = styx(&[
        "rebalance",
        "--connect",
        &nodes[1].client,
        "account",
        "--auto",
        "--window-s",
        "1",
    ]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("switched within"), "{text}");
    let (_, moved) = placement(&nodes[0].client);
    assert!(
        moved.iter().any(|(_, o)| *o == 2),
        "node 2 was given partitions again: {moved:?}\n{text}"
    );
    let report = load.join().unwrap();
    assert_eq!(report["invariants_ok"], true, "{}", report["invariant_errors"]);
    // A node the engine does not have is refused by name.
    let (code, text) = styx(&[
        "rebalance",
        "--connect",
        &nodes[0].client,
        "account",
        "--drain-node",
        "7",
    ]);
    assert_ne!(code, 0, "{text}");
    assert!(text.contains("no node 7"), "{text}");
}

/// A node configured without snapshots tracks no change until its peers
/// vote for one; that first snapshot then holds every entity (a base) and
/// must start a new chain: chained onto the preloaded base as a delta, the
/// entities it deleted meanwhile (here: every partition drained off it)
/// came back at the next restart.
#[test]
fn a_node_without_snapshots_starts_a_new_chain_when_its_peers_vote() {
    let root = data_dir("cluster-untracked");
    let bin = Path::new(env!("CARGO_BIN_EXE_styxd"));
    let (_, mut nodes) = cluster(&root, &["--preload", "ycsbt", "--keys", "300"]);
    for (i, n) in nodes.iter_mut().enumerate() {
        let at = n.args.iter().position(|a| a == "--snapshot-interval-ms").unwrap();
        // Node 0 takes no snapshot of its own; the others' first vote comes
        // after the drain below.
        n.args[at + 1] = if i == 0 { "0" } else { "4000" }.into();
        n.spawn(bin);
    }
    for n in &nodes {
        connect(&n.client, Duration::from_secs(60)).expect("the cluster serves");
    }
    // Every partition of node 0's shard moves to node 1's: node 0 deletes
    // them all, tracking nothing.
    let on_0: Vec<u32> = (0..styx_tools::apps::PARTITIONS)
        .filter(|p| styx_engine::partition_owner(*p, 3) == 0)
        .collect();
    for p in &on_0 {
        let p = p.to_string();
        let (code, text) = styx(&[
            "rebalance",
            "--connect",
            &nodes[1].client,
            "--no-wait",
            "account",
            &p,
            "1",
        ]);
        assert_eq!(code, 0, "{text}");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let (version, moved) = loop {
        let (version, moved) = placement(&nodes[0].client);
        if moved.len() == on_0.len() {
            break (version, moved);
        }
        assert!(Instant::now() < deadline, "not every move switched: {moved:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    // A snapshot every node takes (voted by nodes 1 and 2), then every
    // node killed and started again: node 0 restores from it.
    std::thread::sleep(Duration::from_secs(6));
    for n in &mut nodes {
        n.kill9();
    }
    for n in &mut nodes {
        n.spawn(bin);
    }
    for n in &nodes {
        connect(&n.client, Duration::from_secs(60)).expect("the cluster serves again");
    }
    // Each node answers PLACEMENT from its shards' published maps: they
    // reach the moves' version once replay does.
    let deadline = Instant::now() + Duration::from_secs(30);
    for n in &nodes {
        while placement(&n.client) != (version, moved.clone()) {
            assert!(Instant::now() < deadline, "{}: the moves did not survive", n.client);
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let addrs = nodes.iter().map(|n| n.client.clone()).collect::<Vec<_>>().join(",");
    let out = Command::new(env!("CARGO_BIN_EXE_styx"))
        .args(["verify", "ycsbt", "--connect", &addrs, "--keys", "300"])
        .output()
        .expect("styx runs");
    let text = output_text(&out);
    assert!(out.status.success(), "styx verify ycsbt: {text}");
    assert!(text.contains("consistent"), "{text}");
}

#[test]
fn status_shows_every_node() {
    let root = data_dir("cluster-status");
    let bin = Path::new(env!("CARGO_BIN_EXE_styxd"));
    let (_, mut nodes) = cluster(&root, &["--preload", "ycsbt", "--keys", "10"]);
    for n in &mut nodes {
        n.spawn(bin);
    }
    for n in &nodes {
        connect(&n.client, Duration::from_secs(60)).expect("the cluster serves");
    }
    let status = |at: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_styx"))
            .args(["status", "--connect", at, "--metrics", "127.0.0.1:1"])
            .output()
            .expect("styx runs");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        (out.status.success(), text + &String::from_utf8_lossy(&out.stderr))
    };
    let (ok, text) = status(&nodes[1].client);
    assert!(ok, "{text}");
    assert!(text.contains("nodes       3 (3 shards)"), "{text}");
    for (i, n) in nodes.iter().enumerate() {
        let line = text
            .lines()
            .find(|l| l.contains(&n.client) && !l.starts_with("server"))
            .unwrap_or_else(|| panic!("node {i} missing:\n{text}"));
        assert!(line.contains(&format!("{i}..{}", i + 1)), "{line}");
        assert!(line.ends_with("serving"), "{line}");
        assert_eq!(line.starts_with('*'), i == 1, "the answering node is marked: {line}");
    }
}

#[test]
fn a_node_back_without_its_data_directory_is_refused() {
    let root = data_dir("cluster-lost-dir");
    let bin = Path::new(env!("CARGO_BIN_EXE_styxd"));
    let keys = KEYS.to_string();
    let (_, mut nodes) = cluster(&root, &["--preload", "ycsbt", "--keys", &keys]);
    for n in &mut nodes {
        n.spawn(bin);
    }
    // Traffic for a while, so that snapshots complete on every node (every
    // 200 ms) and each node records the newest one.
    let mut c = connect(&nodes[0].client, Duration::from_secs(60)).expect("the cluster serves");
    c.stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let began = Instant::now();
    let mut seq = 0;
    while began.elapsed() < Duration::from_millis(1500) || !root.join("node-1/cluster-complete").exists() {
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "no snapshot completed everywhere"
        );
        seq += 1;
        let t = Req::Transfer {
            debtor: seq % KEYS,
            creditor: (seq + 1) % KEYS,
            amount: 1,
        };
        send(&mut c, seq, t);
        assert!(c.recv().and_then(|f| f.body.outcome().map(|_| ())).is_some());
    }
    drop(c);
    // Node 1's disk is replaced by an empty one (it preloads afresh).
    nodes[1].kill9();
    std::fs::remove_dir_all(root.join("node-1")).unwrap();
    std::fs::create_dir_all(root.join("node-1")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let (status, stderr) = exit_of(
        refusing(bin, &nodes[1]),
        deadline,
        "the node without its data kept running",
    );
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("node 1 lacks the snapshot of epoch") && stderr.contains("refuses to start"),
        "{stderr}"
    );
    // The others refuse too, rather than roll back to nothing: their data
    // is still there.
    for i in [0, 2] {
        let kept = std::fs::read_dir(root.join(format!("node-{i}/snapshot")))
            .unwrap()
            .count();
        assert!(kept > 0, "node {i} lost its snapshots");
    }
}

/// A node started without the cluster's `--preload` (its directory
/// empty) would have the plan restore no snapshot and every node start
/// empty, dropping the preload from the others' disks: every node refuses
/// the start instead, naming the nodes; started again with it, the
/// cluster serves the preloaded state.
#[test]
fn a_node_started_without_the_clusters_preload_is_refused_and_nothing_is_dropped() {
    let root = data_dir("cluster-preload-missing");
    let bin = Path::new(env!("CARGO_BIN_EXE_styxd"));
    let keys = KEYS.to_string();
    let preload = ["--preload", "ycsbt", "--keys", keys.as_str()];
    let (_, mut nodes) = cluster(&root, &preload);
    let with_preload = nodes[1].args.clone();
    nodes[1].args.retain(|a| !preload.contains(&a.as_str()));
    let children: Vec<Child> = nodes.iter().map(|n| refusing(bin, n)).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    for (i, child) in children.into_iter().enumerate() {
        let (status, stderr) = exit_of(
            child,
            deadline,
            &format!("node {i} started without the preload on node 1"),
        );
        assert!(!status.success(), "node {i}: {stderr}");
        assert!(
            stderr.contains("nodes [0, 2] hold the preload") && stderr.contains("nodes [1] hold no snapshot"),
            "node {i}: {stderr}"
        );
    }
    // Node 1 given the preload: the cluster serves the preloaded accounts.
    nodes[1].args = with_preload;
    for n in &mut nodes {
        n.spawn(bin);
    }
    let addrs: Vec<&str> = nodes.iter().map(|n| n.client.as_str()).collect();
    assert!(
        connect(addrs[0], Duration::from_secs(60)).is_some(),
        "the cluster serves"
    );
    verify_ycsbt(
        &addrs.join(","),
        &["--keys", &keys],
        "after the preload was given to every node",
    );
}

/// `n` started with its stderr kept, for a start that should be refused.
fn refusing(bin: &Path, n: &Node) -> Child {
    Command::new(bin)
        .args(&n.args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("styxd starts")
}

/// How `child` exited, and what it wrote to stderr; `kept_running` if it
/// still runs at `deadline`.
fn exit_of(mut child: Child, deadline: Instant, kept_running: &str) -> (std::process::ExitStatus, String) {
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "{kept_running}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    (status, stderr)
}

/// PLACEMENT at `addr`: the map's version and the partitions of `account`
/// off the default rule.
fn placement(addr: &str) -> (u64, Vec<(u32, u16)>) {
    let mut c = connect(addr, Duration::from_secs(60)).expect("serving");
    c.send(Body::Placement);
    match c.recv().expect("an answer").body {
        Body::PlacementReply(p) => (p.version, p.moved.first().cloned().unwrap_or_default()),
        other => panic!("PLACEMENT answered {other:?}"),
    }
}
