//! Microbenchmarks of the engine's hot paths, through its public API only:
//! shards driven in this thread (no runtime), messages handed over
//! directly, one epoch per iteration.
//!
//! - `epoch/transfers_1_shard`: sequencing and one epoch of N transfers on
//!   one shard (every call local);
//! - `conflicts/hot_keys_2_shards`: an epoch of N transfers among 16
//!   accounts on 2 shards: most conflict, so the check and the phase-2
//!   fallback dominate;
//! - `state/*`: a one-function app reading and writing its entity 16 times
//!   per transaction (a number inline, a 32-number list archived), against
//!   the same function without state access;
//! - `messages/remote_calls_2_shards`: an epoch of N transfers on 2 shards
//!   whose every deposit runs on the other shard: invocations and replies
//!   travel in batches.
//!
//! `cargo bench -p styx-bench --bench engine` (a few seconds per bench).

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use std::sync::Arc;
use std::time::Duration;
use styx_bench::ycsbt::{self, Functions};
use styx_engine::{Address, App, Config, FnId, Key, OpId, Outputs, Payload, Request, Shard, Value};

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Transactions per measured epoch.
const EPOCH_TXNS: usize = 1_000;

/// Shards that start an epoch only when `per_shard` requests wait (so one
/// iteration is exactly one epoch), with `entities` loaded.
fn shards(app: &Arc<App>, n: u16, per_shard: usize, entities: &[(OpId, Key, Value)]) -> Vec<Shard> {
    let config = Config {
        epoch_txns_max: per_shard,
        epoch_gather_us: u64::MAX / 4,
        ..Config::default()
    };
    let mut shards: Vec<Shard> = (0..n).map(|i| Shard::new(app.clone(), config.clone(), i, n)).collect();
    for (op, key, value) in entities {
        let owner = Shard::owner(app, n, *op, key);
        shards[usize::from(owner)].load(*op, key, Some(value.clone()));
    }
    shards
}

/// Submits each shard's requests, then moves messages until every reply is
/// out.
fn epoch(shards: &mut [Shard], requests: Vec<Vec<Request>>, out: &mut Outputs) {
    let mut expected = 0;
    for (shard, requests) in shards.iter_mut().zip(requests) {
        for (token, r) in requests.into_iter().enumerate() {
            shard.submit(token as u64, r).expect("accepted");
            expected += 1;
        }
    }
    let mut replies = 0;
    let mut batches = Vec::new();
    while replies < expected {
        for i in 0..shards.len() {
            while shards[i].has_work() {
                shards[i].step();
            }
            shards[i].drain(out);
            replies += out.replies.len();
            out.replies.clear();
            for (to, msgs) in out.messages.iter_mut().enumerate() {
                if !msgs.is_empty() {
                    batches.push((to, std::mem::take(msgs)));
                }
            }
            for (to, batch) in batches.drain(..) {
                shards[to].receive(i as u16, batch);
            }
        }
    }
}

fn accounts(app: &App, keys: u64) -> Vec<(OpId, Key, Value)> {
    let account = app.op_id(ycsbt::OPERATOR).expect("account operator");
    (0..keys)
        .map(|k| (account, Key::from(k), ycsbt::start_value()))
        .collect()
}

/// Keys of the account operator that shard `shard` of `n` owns.
fn owned(app: &App, n: u16, shard: u16, keys: u64) -> Vec<u64> {
    let account = app.op_id(ycsbt::OPERATOR).expect("account operator");
    (0..keys)
        .filter(|k| Shard::owner(app, n, account, &Key::from(*k)) == shard)
        .collect()
}

/// Per shard, `per_shard` transfers from an owned debtor to a creditor from
/// `creditors(shard)`, drawn round robin.
fn transfers(f: &Functions, debtors: &[Vec<u64>], creditors: &[Vec<u64>], per_shard: usize) -> Vec<Vec<Request>> {
    debtors
        .iter()
        .zip(creditors)
        .map(|(d, c)| {
            (0..per_shard)
                .map(|i| {
                    let debtor = d[(i * 7) % d.len()];
                    let mut creditor = c[(i * 13 + 1) % c.len()];
                    if creditor == debtor {
                        creditor = c[(i * 13 + 2) % c.len()];
                    }
                    ycsbt::transfer(f, debtor, creditor, 1)
                })
                .collect()
        })
        .collect()
}

fn bench_transfers(c: &mut Criterion, group: &str, name: &str, n: u16, keys: u64, remote: bool) {
    let app = ycsbt::app(64);
    let f = Functions::of(&app);
    let per_shard = EPOCH_TXNS / usize::from(n);
    let mut s = shards(&app, n, per_shard, &accounts(&app, keys));
    let debtors: Vec<Vec<u64>> = (0..n).map(|i| owned(&app, n, i, keys)).collect();
    // Creditors on the next shard (remote), or anywhere.
    let creditors: Vec<Vec<u64>> = (0..n)
        .map(|i| {
            if remote {
                debtors[usize::from((i + 1) % n)].clone()
            } else {
                (0..keys).collect()
            }
        })
        .collect();
    let requests = transfers(&f, &debtors, &creditors, per_shard);
    let mut out = Outputs::default();
    // The first epoch starts on the first request: run it once outside.
    epoch(&mut s, vec![vec![requests[0][0].clone()]], &mut out);
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(EPOCH_TXNS as u64));
    g.bench_function(name, |b| {
        b.iter_batched(
            || requests.clone(),
            |r| epoch(&mut s, r, &mut out),
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

fn epoch_one_shard(c: &mut Criterion) {
    bench_transfers(c, "epoch", "transfers_1_shard", 1, 10_000, false);
}

fn conflicts(c: &mut Criterion) {
    bench_transfers(c, "conflicts", "hot_keys_2_shards", 2, 16, false);
}

fn messages(c: &mut Criterion) {
    bench_transfers(c, "messages", "remote_calls_2_shards", 2, 10_000, true);
}

/// Reads and writes of a function's own entity.
fn state(c: &mut Criterion) {
    const ACCESSES: u32 = 16;
    let mut app = App::new("state");
    let op = app.operator("cell", 64);
    let noop = app.function(op, "noop", |_ctx, (): ()| async move { Ok(()) });
    let number = app.function(op, "number", |ctx, (): ()| async move {
        for _ in 0..ACCESSES {
            let v = ctx.get::<i64>()?.unwrap_or(0);
            ctx.put(&(v + 1))?;
        }
        Ok(())
    });
    let list = app.function(op, "list", |ctx, (): ()| async move {
        for _ in 0..ACCESSES {
            let mut v = ctx.get::<Vec<u64>>()?.unwrap_or_default();
            v[0] += 1;
            ctx.put(&v)?;
        }
        Ok(())
    });
    let app = Arc::new(app);
    let keys = EPOCH_TXNS as u64;
    let lists: Vec<(OpId, Key, Value)> = (0..keys)
        .map(|k| {
            let v = Value::encode(&vec![0u64; 32], &mut Default::default()).expect("archive");
            (op, Key::from(k), v)
        })
        .collect();
    let mut s = shards(&app, 1, EPOCH_TXNS, &lists);
    let mut out = Outputs::default();
    let request = |function: FnId, k: u64| Request {
        function,
        address: Address::Entity(Key::from(k)),
        args: Payload::encode(&()),
        client: None,
    };
    epoch(&mut s, vec![vec![request(noop, 0)]], &mut out);
    let mut g = c.benchmark_group("state");
    g.throughput(Throughput::Elements(EPOCH_TXNS as u64));
    for (name, function, k0) in [
        ("noop", noop, 0),
        ("get_put_number_x16", number, keys),
        ("get_put_list32_x16", list, 0),
    ] {
        // Numbers live on keys of their own: a list archive is not an i64.
        let requests: Vec<Request> = (0..keys).map(|k| request(function, k0 + k)).collect();
        g.bench_function(name, |b| {
            b.iter_batched(
                || vec![requests.clone()],
                |r| epoch(&mut s, r, &mut out),
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

fn quick() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}

criterion_group! {
    name = benches;
    config = quick();
    targets = epoch_one_shard, conflicts, state, messages
}
criterion_main!(benches);
