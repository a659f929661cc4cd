//! The engine's CPU cost per YCSB-T transaction, without a runtime: every
//! shard in this thread, messages moved directly, closed loop.
//!
//! `cargo run --release -p styx-bench --example engine_cpu -- SHARDS EPOCH_TXNS KEYS TXNS`
//! (`STYX_API=closures` for the closure version of the application)
//!
//! `SHARDS` 0 runs the same transfers through `styx_engine::Serial` (the
//! serial ceiling). Under `valgrind --tool=callgrind` the instruction count
//! per transaction is repeatable whatever else the machine is doing.

use std::time::Instant;

struct Counting;
static ALLOCS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: std::alloc::Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: forwarded unchanged.
        unsafe { mimalloc::MiMalloc.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: std::alloc::Layout) {
        // SAFETY: forwarded unchanged.
        unsafe { mimalloc::MiMalloc.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: std::alloc::Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: forwarded unchanged.
        unsafe { mimalloc::MiMalloc.realloc(p, l, n) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;
use styx_bench::ycsbt::{self, Functions, Workload};
use styx_engine::{CallLimits, Config, Key, Outcome, Outputs, Serial, Shard};

fn main() {
    let args: Vec<u64> = std::env::args().skip(1).map(|a| a.parse().unwrap()).collect();
    let shards = *args.first().unwrap_or(&2) as u16;
    let epoch = *args.get(1).unwrap_or(&250) as usize;
    let keys = *args.get(2).unwrap_or(&10_000);
    if shards == 0 {
        return serial(keys, *args.get(3).unwrap_or(&2_000_000));
    }
    let app = ycsbt::app_with(64, api());
    let f = Functions::of(&app);
    let account = app.op_id("account").unwrap();
    let config = Config {
        epoch_txns_max: epoch,
        ..Config::default()
    };
    let mut s: Vec<Shard> = (0..shards)
        .map(|i| Shard::new(app.clone(), config.clone(), i, shards))
        .collect();
    let mut owned: Vec<Vec<u64>> = vec![Vec::new(); shards as usize];
    for k in 0..keys {
        let o = Shard::owner(&app, shards, account, &Key::from(k));
        s[o as usize].load(account, &Key::from(k), Some(ycsbt::start_value()));
        owned[o as usize].push(k);
    }
    let mut w: Vec<Workload> = owned
        .into_iter()
        .enumerate()
        .map(|(i, d)| Workload::new(keys, d, None, i as u64))
        .collect();
    let mut out = Outputs::default();
    let mut inflight = vec![0usize; shards as usize];
    let mut committed = 0u64;
    let total = *args.get(3).unwrap_or(&2_000_000);
    let mut submitted = 0u64;
    let allocs0 = ALLOCS.load(std::sync::atomic::Ordering::Relaxed);
    let begin = Instant::now();
    while committed < total {
        for i in 0..shards as usize {
            while inflight[i] < epoch && submitted < total {
                let (d, c) = w[i].transfer();
                s[i].submit(submitted, ycsbt::transfer(&f, d, c, 1)).unwrap();
                inflight[i] += 1;
                submitted += 1;
            }
        }
        for i in 0..shards as usize {
            while s[i].has_work() {
                s[i].step();
            }
            s[i].drain(&mut out);
            committed += out.replies.len() as u64;
            inflight[i] -= out.replies.len();
            out.replies.clear();
            let msgs: Vec<(usize, Vec<_>)> = out
                .messages
                .iter_mut()
                .enumerate()
                .filter(|(_, m)| !m.is_empty())
                .map(|(t, m)| (t, std::mem::take(m)))
                .collect();
            for (to, batch) in msgs {
                s[to].receive(i as u16, batch);
            }
        }
    }
    let secs = begin.elapsed().as_secs_f64();
    let allocs = ALLOCS.load(std::sync::atomic::Ordering::Relaxed) - allocs0;
    let st: Vec<_> = s.iter().map(|x| x.stats()).collect();
    let re: u64 = st.iter().map(|x| x.reexecuted).sum();
    println!(
        "{shards} shards, epoch {epoch}/shard, {keys} keys: {:.0} txn/s on one thread = {:.3} µs/txn; re-executed {:.1}%; epochs {}; {:.2} allocations/txn",
        committed as f64 / secs,
        secs * 1e6 / committed as f64,
        re as f64 * 100.0 / committed as f64,
        st[0].epochs,
        allocs as f64 / committed as f64
    );
}

/// The same transfers, one after another, on `Serial`.
fn serial(keys: u64, total: u64) {
    let app = ycsbt::app_with(64, api());
    let f = Functions::of(&app);
    let account = app.op_id("account").unwrap();
    let mut serial = Serial::new(app.clone(), CallLimits::default());
    for k in 0..keys {
        serial.load(account, Key::from(k), Some(ycsbt::start_value()));
    }
    let mut w = Workload::new(keys, (0..keys).collect(), None, 1);
    let requests: Vec<_> = (0..total.min(1 << 20))
        .map(|_| {
            let (d, c) = w.transfer();
            ycsbt::transfer(&f, d, c, 1)
        })
        .collect();
    let allocs0 = ALLOCS.load(std::sync::atomic::Ordering::Relaxed);
    let begin = Instant::now();
    let mut committed = 0u64;
    for tid in 0..total {
        let r = &requests[tid as usize % requests.len()];
        committed += u64::from(matches!(serial.execute(tid + 1, 0, r), Outcome::Committed(_)));
    }
    let secs = begin.elapsed().as_secs_f64();
    let allocs = ALLOCS.load(std::sync::atomic::Ordering::Relaxed) - allocs0;
    println!(
        "serial, {keys} keys: {:.0} txn/s = {:.3} µs/txn; {:.2} allocations/txn",
        committed as f64 / secs,
        secs * 1e6 / committed as f64,
        allocs as f64 / committed as f64
    );
}

/// The application's API from `STYX_API` (`typed`, the default, or
/// `closures`): the same transfers written both ways.
fn api() -> styx_bench::Api {
    std::env::var("STYX_API").map_or(styx_bench::Api::Typed, |a| a.parse().expect("STYX_API"))
}
