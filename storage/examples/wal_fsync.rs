//! Measures the input log's group commit: appends batches of about 4 KiB
//! (one record each) and makes each durable with its own `fdatasync`, as
//! the runtime does once per epoch. Prints latency percentiles of
//! append + sync and the throughput.
//!
//! ```text
//! cargo run --release -p styx-storage --example wal_fsync -- [DIR] [--batches N] [--bytes B] [--fsync epoch|none] [--no-zero-fill]
//! ```
//!
//! DIR must be on a disk, not tmpfs (O_DIRECT is silently off there); it is
//! emptied first. Default: `target/wal-fsync-bench`.

use hdrhistogram::Histogram;
use std::path::PathBuf;
use std::time::Instant;
use styx_engine::{Address, Batch, FnId, Key, OpId, Payload, Request};
use styx_storage::DataDir;
use styx_storage::wal::{self, FsyncMode, Options, Writer};

struct Args {
    dir: PathBuf,
    batches: u64,
    bytes: usize,
    fsync: FsyncMode,
    zero_fill: bool,
}

fn parse() -> Args {
    let mut args = Args {
        dir: PathBuf::from("target/wal-fsync-bench"),
        batches: 5_000,
        bytes: 4096,
        fsync: FsyncMode::Epoch,
        zero_fill: true,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--batches" => args.batches = value().parse().expect("a number of batches"),
            "--bytes" => args.bytes = value().parse().expect("a record size in bytes"),
            "--fsync" => {
                args.fsync = match value().as_str() {
                    "epoch" => FsyncMode::Epoch,
                    "none" => FsyncMode::None,
                    other => panic!("--fsync epoch|none, not {other}"),
                }
            }
            "--no-zero-fill" => args.zero_fill = false,
            "-h" | "--help" => {
                println!("wal_fsync [DIR] [--batches N] [--bytes B] [--fsync epoch|none] [--no-zero-fill]");
                std::process::exit(0);
            }
            dir => args.dir = PathBuf::from(dir),
        }
    }
    args
}

/// A batch whose record is `bytes` long: transactions of 100-byte
/// arguments on 8-byte keys.
fn batch(epoch: u64, bytes: usize) -> Batch {
    const TXN_BYTES: usize = 8 + 2 + 2 + 1 + 2 + 8 + 4 + 100;
    let n = bytes.saturating_sub(wal::RECORD_HEADER_BYTES + 20) / TXN_BYTES;
    let txns = (0..n as u64)
        .map(|i| {
            (
                epoch * 1_000 + i,
                Request {
                    function: FnId { op: OpId(0), index: 1 },
                    address: Address::Entity(Key::from(i * 7919)),
                    args: Payload::from_vec(vec![i as u8; 100]),
                    client: None,
                },
            )
        })
        .collect();
    Batch {
        epoch,
        shard: 0,
        lc: epoch,
        now_us: epoch,
        txns,
    }
}

fn main() {
    let args = parse();
    let _ = std::fs::remove_dir_all(&args.dir);
    let dir = DataDir::open(&args.dir).expect("a data directory");
    println!(
        "wal_fsync: {} batches of ~{} bytes, fsync {:?}, zero fill {}, in {}",
        args.batches,
        args.bytes,
        args.fsync,
        args.zero_fill,
        args.dir.display()
    );
    let (batches, bytes, fsync, zero_fill) = (args.batches, args.bytes, args.fsync, args.zero_fill);
    let report = glommio::LocalExecutorBuilder::default()
        .spawn(move || async move {
            let rec = wal::recover(&dir, 0, 0).expect("recovery");
            let options = Options {
                fsync,
                zero_fill,
                ..Options::default()
            };
            let mut w = Writer::open(&dir, &rec.tail, options).await.expect("a writer");
            let warmup = 200;
            let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram");
            let mut record_bytes = 0;
            let mut start = Instant::now();
            for e in 1..=warmup + batches {
                if e == warmup + 1 {
                    start = Instant::now();
                    record_bytes = w.stats().record_bytes;
                }
                let b = batch(e, bytes);
                let t = Instant::now();
                w.append(&b).await.expect("append");
                w.sync().await.expect("sync");
                if e > warmup {
                    hist.record(t.elapsed().as_micros().max(1) as u64).expect("in range");
                }
            }
            let elapsed = start.elapsed();
            let stats = w.stats();
            let alignment = w.alignment();
            w.close().await.expect("close");
            (hist, elapsed, stats, stats.record_bytes - record_bytes, alignment)
        })
        .expect("an executor")
        .join()
        .expect("the run");
    let (hist, elapsed, stats, written, alignment) = report;
    let secs = elapsed.as_secs_f64();
    println!(
        "append + fdatasync latency (µs): p50 {}  p90 {}  p99 {}  p99.9 {}  max {}",
        hist.value_at_quantile(0.50),
        hist.value_at_quantile(0.90),
        hist.value_at_quantile(0.99),
        hist.value_at_quantile(0.999),
        hist.max()
    );
    println!(
        "throughput: {:.0} batches/s, {:.1} MB/s of records (alignment {alignment}, {} segments, {} fdatasyncs)",
        batches as f64 / secs,
        written as f64 / secs / 1e6,
        stats.segments,
        stats.fdatasyncs
    );
}
