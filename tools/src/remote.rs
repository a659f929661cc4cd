//! `styx bench ycsbt --connect ADDR`: YCSB-T against a running daemon.
//!
//! One client executor (a glommio thread) drives `connections` pipelined
//! connections. Closed loop keeps `in_flight` requests outstanding per
//! connection; open loop sends at a fixed total rate and measures each
//! request from its scheduled send time, so a stall is charged to every
//! request it delayed (no coordinated omission). Requests carry client id 0
//! (no exactly-once bookkeeping) unless `--exactly-once` is given: that
//! measures the server, not retries. The client shares the machine with the
//! daemon; the report says so (`cpus`).

use hdrhistogram::Histogram;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::{Duration, Instant};
use styx_bench::report::{Latency, Report, histogram};
use styx_bench::ycsbt::{self, START_BALANCE};
use styx_engine::rng::{Rng, Zipf};
use styx_engine::{AbortKind, Address, Key, Payload};
use styx_net::client::{ConnectOptions, Connection, Outcome};
use styx_net::frame::Request;

/// What to run.
#[derive(Clone, Debug)]
pub struct Remote {
    pub addr: String,
    pub connections: usize,
    pub in_flight: usize,
    /// Total offered transactions per second; `None` is closed loop.
    pub rate: Option<f64>,
    pub keys: u64,
    pub zipf: Option<f64>,
    pub warmup: Duration,
    pub duration: Duration,
    /// Deposit the start balance into every account first.
    pub load: bool,
    pub exactly_once: bool,
    pub seed: u64,
}

struct Shared {
    hist: Histogram<u64>,
    committed: u64,
    aborted: u64,
    failed: u64,
    timeline: BTreeMap<u64, u64>,
}

fn transfer(client: u64, seq: u64, debtor: u64, creditor: u64) -> Request {
    Request {
        client,
        seq,
        ack: if client == 0 { 0 } else { seq },
        operator: ycsbt::OPERATOR.into(),
        function: "transfer".into(),
        target: Address::Entity(Key::from(debtor)),
        args: Payload::encode(&(creditor, 1i64)),
    }
}

/// Runs the benchmark and reports.
pub fn run(r: &Remote) -> Result<Report, String> {
    let r2 = r.clone();
    let handle = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .name("styx-bench-client")
        .spawn(move || async move { drive(r2).await })
        .map_err(|e| format!("cannot start the client executor: {e}"))?;
    handle.join().map_err(|e| format!("client executor: {e}"))?
}

async fn drive(r: Remote) -> Result<Report, String> {
    let options = ConnectOptions {
        name: "styx bench".into(),
        in_flight_max: r.in_flight.max(1),
        ..ConnectOptions::default()
    };
    let mut conns = Vec::with_capacity(r.connections);
    for _ in 0..r.connections {
        conns.push(
            Connection::connect(r.addr.as_str(), &options)
                .await
                .map_err(|e| format!("cannot connect to {}: {e}", r.addr))?,
        );
    }
    let started = Instant::now();
    if r.load {
        deposit(&conns, r.keys).await?;
    }
    let load_s = started.elapsed().as_secs_f64();
    let shared = Rc::new(RefCell::new(Shared {
        hist: histogram(),
        committed: 0,
        aborted: 0,
        failed: 0,
        timeline: BTreeMap::new(),
    }));
    let begin = Instant::now();
    let warm_at = begin + r.warmup;
    let stop_at = warm_at + r.duration;
    let zipf = r.zipf.map(|t| Zipf::new(r.keys, t));
    let mut tasks = Vec::new();
    for (i, conn) in conns.iter().enumerate() {
        let lanes = if r.rate.is_some() { 1 } else { r.in_flight.max(1) };
        for lane in 0..lanes {
            let (conn, shared, zipf) = (conn.clone(), shared.clone(), zipf.clone());
            let r = r.clone();
            let seed = r.seed.wrapping_mul(1_000_003) + (i * 10_000 + lane) as u64;
            tasks.push(glommio::spawn_local(async move {
                let mut rng = Rng::new(seed);
                let client = if r.exactly_once { rng.next_u64() | 1 } else { 0 };
                let interval = r.rate.map(|rate| Duration::from_secs_f64(r.connections as f64 / rate));
                let mut next = Instant::now();
                let mut seq = 0;
                loop {
                    let now = Instant::now();
                    if now >= stop_at {
                        return;
                    }
                    let intended = match interval {
                        Some(iv) => {
                            if next > now {
                                glommio::timer::sleep(next - now).await;
                            }
                            let t = next;
                            next += iv;
                            t
                        }
                        None => now,
                    };
                    seq += 1;
                    let debtor = rng.below(r.keys);
                    let creditor = loop {
                        let c = match &zipf {
                            Some(z) => z.sample(&mut rng),
                            None => rng.below(r.keys),
                        };
                        if c != debtor {
                            break c;
                        }
                    };
                    let req = transfer(client, seq, debtor, creditor);
                    if interval.is_some() {
                        // Open loop: do not wait for the answer to send the next.
                        let (conn, shared) = (conn.clone(), shared.clone());
                        glommio::spawn_local(async move {
                            let res = conn.request(req).await;
                            record(&shared, res, intended, warm_at, stop_at, begin);
                        })
                        .detach();
                    } else {
                        let res = conn.request(req).await;
                        record(&shared, res, intended, warm_at, stop_at, begin);
                    }
                }
            }));
        }
    }
    for t in tasks {
        t.await;
    }
    // Open loop: let the answers of the last sends arrive.
    let drained = Instant::now();
    while conns.iter().any(|c| c.in_flight() > 0) && drained.elapsed() < Duration::from_secs(10) {
        glommio::timer::sleep(Duration::from_millis(5)).await;
    }
    // The borrow ends before the next await (the tasks are done, but the
    // borrow checker of RefCells cannot know).
    let mut report = {
        let s = shared.borrow();
        Report {
            workload: "ycsbt".into(),
            mode: if r.rate.is_some() {
                "open".into()
            } else {
                "closed".into()
            },
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            offered_tps: r.rate,
            in_flight: r.rate.is_none().then_some(r.in_flight * r.connections),
            load_s,
            warmup_s: r.warmup.as_secs_f64(),
            duration_s: r.duration.as_secs_f64(),
            committed: s.committed,
            aborted: s.aborted,
            failed: s.failed,
            latency_us: Latency::of(&s.hist),
            timeline_bucket_ms: 100,
            timeline: s.timeline.iter().map(|(b, n)| (*b * 100, *n as f64 * 10.0)).collect(),
            tps: s.committed as f64 / r.duration.as_secs_f64(),
            ..Report::default()
        }
    };
    report.parameters.insert("keys".into(), r.keys.into());
    report.parameters.insert("connect".into(), r.addr.clone().into());
    report.parameters.insert("connections".into(), r.connections.into());
    report.parameters.insert("exactly_once".into(), r.exactly_once.into());
    if let Some(z) = r.zipf {
        report.parameters.insert("zipf".into(), z.into());
    }
    if let Ok(status) = conns[0].status().await {
        report.shards = status.shards;
        report.tps_per_core = report.tps / f64::from(status.shards.max(1));
    }
    // Conservation: read every balance.
    let (errors, total) = verify(&conns[0], r.keys).await?;
    if r.load && total != START_BALANCE * r.keys as i64 {
        report
            .invariant_errors
            .push(format!("total {total}, expected {}", START_BALANCE * r.keys as i64));
    }
    report.invariant_errors.extend(errors);
    report.invariants_ok = report.invariant_errors.is_empty();
    Ok(report)
}

fn record(
    shared: &Rc<RefCell<Shared>>,
    res: Result<Outcome, styx_net::client::Error>,
    intended: Instant,
    warm_at: Instant,
    stop_at: Instant,
    begin: Instant,
) {
    let now = Instant::now();
    let mut s = shared.borrow_mut();
    let in_window = intended >= warm_at && intended < stop_at;
    match res {
        Ok(Outcome::Committed { .. }) => {
            if in_window {
                s.committed += 1;
                *s.timeline.entry((now - begin).as_millis() as u64 / 100).or_default() += 1;
            }
        }
        Ok(Outcome::Aborted { abort, .. }) => {
            debug_assert!(abort.kind() == AbortKind::User);
            if in_window {
                s.aborted += 1;
            }
        }
        Err(_) => {
            if in_window {
                s.failed += 1;
            }
        }
    }
    if in_window {
        s.hist
            .saturating_record(now.duration_since(intended).as_micros().max(1) as u64);
    }
}

/// Deposits the start balance into every account, pipelined over all
/// connections (exactly-once client, so a retry cannot double a deposit).
pub async fn deposit(conns: &[Connection], keys: u64) -> Result<(), String> {
    let client = 0x10ad_0000_0000_0001;
    let mut tasks = Vec::new();
    for (i, conn) in conns.iter().enumerate() {
        let conn = conn.clone();
        let n = conns.len() as u64;
        tasks.push(glommio::spawn_local(async move {
            let mut pending = Vec::new();
            for k in (i as u64..keys).step_by(n as usize) {
                let req = Request {
                    client,
                    seq: k + 1,
                    ack: 0,
                    operator: ycsbt::OPERATOR.into(),
                    function: "deposit".into(),
                    target: Address::Entity(Key::from(k)),
                    args: Payload::encode(&START_BALANCE),
                };
                let c = conn.clone();
                pending.push(glommio::spawn_local(async move { c.request(req).await }));
                if pending.len() >= 256 {
                    for p in pending.drain(..) {
                        p.await.map_err(|e| format!("load: {e}"))?;
                    }
                }
            }
            for p in pending {
                p.await.map_err(|e| format!("load: {e}"))?;
            }
            Ok::<(), String>(())
        }));
    }
    for t in tasks {
        t.await?;
    }
    Ok(())
}

/// Reads every balance: returns problems found and the total.
pub async fn verify(conn: &Connection, keys: u64) -> Result<(Vec<String>, i64), String> {
    let mut errors = Vec::new();
    let mut total = 0i64;
    let mut pending = Vec::new();
    for k in 0..keys {
        let c = conn.clone();
        pending.push((k, glommio::spawn_local(async move { c.get(ycsbt::OPERATOR, k).await })));
        if pending.len() >= 512 || k + 1 == keys {
            for (k, p) in pending.drain(..) {
                let v = p.await.map_err(|e| format!("reading account {k}: {e}"))?;
                let b = match v {
                    None => 0,
                    Some(bytes) => match <[u8; 8]>::try_from(bytes.as_slice()) {
                        Ok(b) => i64::from_le_bytes(b),
                        Err(_) => {
                            errors.push(format!("account {k}: state is not an i64 ({} bytes)", bytes.len()));
                            0
                        }
                    },
                };
                if b < 0 && errors.len() < 10 {
                    errors.push(format!("account {k} is overdrawn: {b}"));
                }
                total += b;
            }
        }
    }
    Ok((errors, total))
}
