//! Every workload against the real daemon: `styxd --preload WORKLOAD`, then
//! `styx bench WORKLOAD --connect`, whose report must show commits and a
//! final state that passes the workload's own check; and a preload that
//! survives `kill -9` right after start.

mod common;

use common::*;
use std::path::Path;
use std::process::Command;
use std::time::Instant;
use styx_bench::ycsbt::START_BALANCE;
use styx_tools::workloads::Knobs;

fn styxd() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_styxd"))
}

/// Runs `styx bench WORKLOAD --connect ADDR` for one second and returns its
/// JSON report.
fn bench(workload: &str, addr: &str, extra: &[&str]) -> serde_json::Value {
    let began = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_styx"))
        .args(["bench", workload, "--connect", addr, "--connections", "2"])
        .args(["--duration", "1", "--warmup", "0", "--json", "--no-serial", "--quiet"])
        .args(extra)
        .output()
        .expect("styx runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "styx bench {workload} failed:\n{stderr}");
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    eprintln!(
        "{workload}: {:.1}s, {}",
        began.elapsed().as_secs_f64(),
        report["committed"]
    );
    report
}

fn smoke(workload: &str, knobs: &[&str], in_flight: &str) {
    let dir = data_dir(&format!("workloads-{workload}"));
    let mut preload = vec!["--shards", "2", "--preload", workload];
    preload.extend_from_slice(knobs);
    let daemon = Daemon::start(styxd(), &dir, &preload);
    let mut flags = knobs.to_vec();
    flags.extend_from_slice(&["--in-flight", in_flight]);
    let report = bench(workload, &daemon.addr, &flags);
    assert_eq!(report["workload"], workload);
    assert_eq!(report["shards"], 2);
    assert!(report["committed"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(report["invariants_ok"], true, "{}", report["invariant_errors"]);
    assert_eq!(report["parameters"]["connect"], daemon.addr.as_str());
    // `styx verify` agrees on the state the run left.
    let out = Command::new(env!("CARGO_BIN_EXE_styx"))
        .args(["verify", workload, "--connect", &daemon.addr])
        .args(knobs)
        .output()
        .expect("styx runs");
    let text = output_text(&out);
    assert!(out.status.success(), "styx verify {workload}: {text}");
    assert!(text.contains("consistent"), "{text}");
}

#[test]
fn ycsbt_runs_against_a_preloaded_daemon() {
    smoke("ycsbt", &["--keys", "2000"], "32");
}

#[test]
fn tpcc_runs_against_a_preloaded_daemon() {
    smoke("tpcc", &["--warehouses", "1", "--scale", "small"], "1");
}

#[test]
fn movie_runs_against_a_preloaded_daemon() {
    smoke("movie", &["--users", "100", "--movies", "100"], "16");
}

#[test]
fn travel_runs_against_a_preloaded_daemon() {
    smoke("travel", &["--hotels", "10", "--flights", "10", "--users", "50"], "16");
}

/// A run checks against the balances it started from, not the preload:
/// a second run against the same daemon (the first moved money) checks
/// exactly too, and the money is still all there.
#[test]
fn ycsbt_runs_back_to_back_against_one_daemon() {
    let dir = data_dir("workloads-ycsbt-twice");
    let daemon = Daemon::start(
        styxd(),
        &dir,
        &["--shards", "2", "--preload", "ycsbt", "--keys", "1000"],
    );
    for run in 1..=2 {
        let report = bench("ycsbt", &daemon.addr, &["--keys", "1000", "--in-flight", "16"]);
        assert!(report["committed"].as_u64().unwrap() > 0, "run {run}: {report}");
        assert_eq!(
            report["invariants_ok"], true,
            "run {run}: {}",
            report["invariant_errors"]
        );
    }
    let balances: Vec<i64> = dump_accounts(&daemon.addr)
        .iter()
        .map(|(_, bytes)| styx_engine::Value::from_bytes(bytes).decode::<i64>().unwrap())
        .collect();
    assert_eq!(balances.iter().sum::<i64>(), 1000 * styx_bench::ycsbt::START_BALANCE);
    assert!(
        balances.iter().any(|b| *b != styx_bench::ycsbt::START_BALANCE),
        "the runs moved money"
    );
}

#[test]
fn ycsbt_deposits_over_the_wire_into_an_empty_daemon() {
    let dir = data_dir("workloads-ycsbt-load");
    let daemon = Daemon::start(styxd(), &dir, &["--shards", "2"]);
    let report = bench(
        "ycsbt",
        &daemon.addr,
        &["--keys", "500", "--load", "--in-flight", "8", "--exactly-once"],
    );
    assert!(report["committed"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(report["invariants_ok"], true, "{}", report["invariant_errors"]);
}

/// Open loop over the wire: the clock's senders send every scheduled
/// request (rate × window, none lost to the schedule), each answered, named
/// for exactly-once, and the check is exact; then `styx verify` agrees.
#[test]
fn ycsbt_open_loop_sends_every_scheduled_request() {
    let dir = data_dir("workloads-ycsbt-open");
    let daemon = Daemon::start(
        styxd(),
        &dir,
        &["--shards", "2", "--preload", "ycsbt", "--keys", "2000"],
    );
    let report = bench(
        "ycsbt",
        &daemon.addr,
        &["--keys", "2000", "--rate", "2000", "--exactly-once"],
    );
    assert_eq!(report["mode"], "open", "{report}");
    assert_eq!(report["invariants_ok"], true, "{}", report["invariant_errors"]);
    let done = report["committed"].as_u64().unwrap() + report["aborted"].as_u64().unwrap();
    // 2 000/s for the 1 s window: every scheduled request ran.
    assert_eq!(done, 2_000, "{report}");
    // The client's own lag is reported and is part of each latency: no
    // quantile of it exceeds the same quantile of the latencies.
    let lag = &report["parameters"]["send_lag_us"];
    for q in ["p50", "p99", "max"] {
        let (l, t) = (lag[q].as_f64(), report["latency_us"][q].as_f64());
        assert!(
            l.is_some() && l <= t,
            "send lag {q} {l:?} against latency {t:?}: {report}"
        );
    }
    // Latency over time: a p99 per 100 ms bucket of the window that
    // answered anything, in time order, each between 1 µs and the run's
    // maximum (no warm-up here: every answer is of the window; a bucket's
    // histogram keeps 2 significant digits, so 1% above it at most).
    let buckets = report["timeline_p99_us"].as_array().expect("a latency timeline");
    assert!((5..=10).contains(&buckets.len()), "{report}");
    let ts: Vec<u64> = buckets.iter().map(|b| b[0].as_u64().unwrap()).collect();
    assert!(
        ts.windows(2).all(|w| w[0] < w[1]) && ts.iter().all(|t| t % 100 == 0 && *t < 1_000),
        "{ts:?}"
    );
    let max = report["latency_us"]["max"].as_u64().unwrap();
    for b in buckets {
        let p = b[1].as_u64().unwrap();
        assert!(
            p >= 1 && p <= max + max / 100 + 1,
            "bucket {b} against max {max}: {report}"
        );
    }
    let out = Command::new(env!("CARGO_BIN_EXE_styx"))
        .args(["verify", "ycsbt", "--connect", &daemon.addr, "--keys", "2000"])
        .output()
        .expect("styx runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Reads every account with `Connection::dump` (the client's `__scan` pages).
fn dump_accounts(addr: &str) -> Vec<(styx_engine::Key, Vec<u8>)> {
    let addr = addr.to_string();
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .spawn(move || async move {
            let conn = styx_net::client::Connection::connect(addr.as_str(), &Default::default())
                .await
                .unwrap();
            conn.dump("account", styx_tools::apps::PARTITIONS).await.unwrap()
        })
        .unwrap()
        .join()
        .unwrap()
}

#[test]
fn a_preload_survives_kill_9_right_after_start() {
    const KEYS: u64 = 5_000;
    let dir = data_dir("workloads-preload-kill9");
    let keys = KEYS.to_string();
    let mut daemon = Daemon::start(styxd(), &dir, &["--shards", "2", "--preload", "ycsbt", "--keys", &keys]);
    daemon.kill9();
    // The same command again: the directory holds this very preload.
    let daemon = daemon.restart();
    let accounts = dump_accounts(&daemon.addr);
    assert_eq!(accounts.len() as u64, KEYS, "every preloaded account is back");
    for (key, bytes) in &accounts {
        let balance = i64::from_le_bytes(bytes.as_slice().try_into().expect("an i64 balance"));
        assert_eq!(balance, START_BALANCE, "account {key}");
    }
    let knobs = Knobs {
        keys: Some(KEYS),
        ..Knobs::default()
    };
    let errors = styx_tools::verify::verify("ycsbt", &daemon.addr, &knobs).unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    drop(daemon);

    // Another preload into that directory is refused before serving.
    let out = Command::new(styxd())
        .args([
            "--data-dir",
            &dir.display().to_string(),
            "--listen",
            "127.0.0.1:0",
            "--metrics",
            "off",
        ])
        .args(["--shards", "2", "--preload", "ycsbt", "--keys", "100", "--log", "warn"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("already holds"), "{stderr}");
}

/// Shards sharing executor threads over TCP: TPC-C on 4 shards run by one
/// thread keeps every consistency condition; killed with -9 and started on
/// 3 threads (uneven blocks: threads are how a node runs its shards, not
/// part of its data), it recovers that state and serves on.
#[test]
fn shards_sharing_a_thread_serve_tpcc_and_recover_on_other_threads() {
    let dir = data_dir("workloads-shared-threads");
    let knobs = ["--warehouses", "2", "--scale", "small"];
    let args = |threads: &'static str| {
        let mut a = vec!["--shards", "4", "--threads", threads, "--preload", "tpcc"];
        a.extend_from_slice(&knobs);
        a
    };
    let verify = |addr: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_styx"))
            .args(["verify", "tpcc", "--connect", addr])
            .args(knobs)
            .output()
            .expect("styx runs");
        let text = output_text(&out);
        assert!(
            out.status.success() && text.contains("consistent"),
            "styx verify tpcc: {text}"
        );
    };
    let mut flags = knobs.to_vec();
    flags.extend_from_slice(&["--in-flight", "1"]);

    let mut daemon = Daemon::start(styxd(), &dir, &args("1"));
    assert_eq!(shard_threads(&daemon), 1);
    let first = bench("tpcc", &daemon.addr, &flags);
    assert_eq!(first["shards"], 4);
    assert!(first["committed"].as_u64().unwrap() > 0, "{first}");
    assert_eq!(first["invariants_ok"], true, "{}", first["invariant_errors"]);
    verify(&daemon.addr);
    daemon.kill9();

    let daemon = Daemon::start(styxd(), &dir, &args("3"));
    assert_eq!(shard_threads(&daemon), 3);
    verify(&daemon.addr);
    let second = bench("tpcc", &daemon.addr, &flags);
    assert!(second["committed"].as_u64().unwrap() > 0, "{second}");
    assert_eq!(second["invariants_ok"], true, "{}", second["invariant_errors"]);
    verify(&daemon.addr);
}

/// The daemon's executors (threads named `shards-FIRST-ID`; glommio gives
/// an executor's helper thread its name too).
fn shard_threads(daemon: &Daemon) -> usize {
    let tasks = std::fs::read_dir(format!("/proc/{}/task", daemon.child.id())).expect("the daemon's threads");
    let names: std::collections::BTreeSet<String> = tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("shards-"))
        .collect();
    names.len()
}
