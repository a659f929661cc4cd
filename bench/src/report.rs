//! A benchmark's figures: one JSON object and a short table (benchmarks.md).

use hdrhistogram::Histogram;
use serde::Serialize;

/// Latency percentiles in µs.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Latency {
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
    pub mean: f64,
}

impl Latency {
    pub fn of(h: &Histogram<u64>) -> Latency {
        if h.is_empty() {
            return Latency::default();
        }
        Latency {
            p50: h.value_at_quantile(0.50),
            p90: h.value_at_quantile(0.90),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
            mean: h.mean(),
        }
    }
}

/// A latency histogram in µs from 1 µs to 60 s, 3 significant digits.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds")
}

/// One benchmark run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    pub workload: String,
    /// "closed" (max throughput) or "open" (fixed offered rate).
    pub mode: String,
    pub shards: u16,
    pub keys: u64,
    /// Creditor skew; absent for uniform.
    pub zipf: Option<f64>,
    /// Offered rate in transactions per second (open loop).
    pub offered_tps: Option<f64>,
    /// Outstanding requests per shard (closed loop).
    pub in_flight: Option<usize>,
    pub epoch_txns_max: usize,
    pub warmup_s: f64,
    pub duration_s: f64,
    pub committed: u64,
    /// Aborted by the program's own logic.
    pub aborted: u64,
    /// Needed the phase-2 fallback.
    pub reexecuted: u64,
    /// Re-run serially at the end of the epoch (read/write-set drift).
    pub serialized: u64,
    pub epochs: u64,
    pub tps: f64,
    pub tps_per_core: f64,
    pub latency_us: Latency,
    /// The same functions run one after another on one core, no
    /// concurrency control, no I/O, measured in the same run.
    pub serial_tps: f64,
    /// `tps_per_core / serial_tps`.
    pub efficiency: f64,
    /// Server CPU time per committed transaction (all shard threads).
    pub cpu_us_per_txn: f64,
    pub peak_rss_mb: f64,
    pub invariants_ok: bool,
    /// What the invariant check found, when it failed.
    pub invariant_errors: Vec<String>,
}

impl Report {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("report serializes")
    }

    /// A few lines for people.
    pub fn table(&self) -> String {
        let l = &self.latency_us;
        let mut s = String::new();
        let skew = self.zipf.map_or("uniform".to_string(), |z| format!("zipf {z}"));
        s.push_str(&format!(
            "{} {} · {} shards · {} keys · {}{}\n",
            self.workload,
            self.mode,
            self.shards,
            self.keys,
            skew,
            self.offered_tps
                .map_or(String::new(), |r| format!(" · offered {:.0}/s", r)),
        ));
        s.push_str(&format!(
            "  committed {:>12.0}/s  per core {:>12.0}/s  serial {:>12.0}/s  efficiency {:.2}\n",
            self.tps, self.tps_per_core, self.serial_tps, self.efficiency
        ));
        s.push_str(&format!(
            "  latency µs  p50 {}  p90 {}  p99 {}  p99.9 {}  max {}\n",
            l.p50, l.p90, l.p99, l.p999, l.max
        ));
        s.push_str(&format!(
            "  {} committed · {} aborted · {} re-executed · {} serialized · {} epochs · {:.2} CPU-µs/txn · peak RSS {:.0} MB · invariants {}\n",
            self.committed,
            self.aborted,
            self.reexecuted,
            self.serialized,
            self.epochs,
            self.cpu_us_per_txn,
            self.peak_rss_mb,
            if self.invariants_ok { "ok" } else { "VIOLATED" }
        ));
        s
    }
}
