//! A benchmark's figures: one JSON object and a short table (benchmarks.md).
//!
//! The JSON is the record: `styx bench plot` reads it back (JSON lines), so
//! every field has a default and a reader tolerates lines written before a
//! field existed.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Latency percentiles in µs.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Latency {
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub p9999: u64,
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
            p9999: h.value_at_quantile(0.9999),
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
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Report {
    /// `ycsbt`, `tpcc`, `movie` or `travel`.
    pub workload: String,
    /// "closed" (max throughput) or "open" (fixed offered rate).
    pub mode: String,
    /// The workload's own knobs (YCSB-T: keys, zipf; TPC-C: warehouses, …).
    pub parameters: BTreeMap<String, serde_json::Value>,
    pub shards: u16,
    /// Executor threads the shards ran on, when fewer than one per shard
    /// was asked for (`--threads`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threads: Option<usize>,
    /// CPUs of the machine the run saw (the conditions of the figures).
    pub cpus: usize,
    /// Offered rate in transactions per second (open loop).
    pub offered_tps: Option<f64>,
    /// Outstanding requests per lane in closed loop (a lane is a shard for
    /// YCSB-T and the Deathstar applications, a district for TPC-C).
    pub in_flight: Option<usize>,
    pub epoch_txns_max: usize,
    /// Seconds the initial state took to load (not measured otherwise).
    pub load_s: f64,
    pub warmup_s: f64,
    pub duration_s: f64,
    pub committed: u64,
    /// Aborted by the program's own logic (`AbortKind::User`).
    pub aborted: u64,
    /// Ended by any other abort (a panic, a limit, overload): never expected.
    pub failed: u64,
    /// Needed the phase-2 fallback.
    pub reexecuted: u64,
    /// Re-run serially at the end of the epoch (phase 3: read/write-set drift).
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
    /// Server CPU time per committed transaction (all shard threads,
    /// load generators included: they run on the shards' threads).
    pub cpu_us_per_txn: f64,
    pub peak_rss_mb: f64,
    pub invariants_ok: bool,
    /// What the invariant check found, when it failed.
    pub invariant_errors: Vec<String>,
    /// Width of a timeline bucket in ms.
    pub timeline_bucket_ms: u64,
    /// Throughput over time: `[t_ms, committed_per_s]` per bucket, `t_ms`
    /// from the start of the warm-up to the end of the measured window.
    pub timeline: Vec<(u64, f64)>,
    /// Latency over time (runs over TCP): `[t_ms, p99_us]` of the requests
    /// answered in each timeline bucket (committed or aborted, from their
    /// scheduled time), for buckets that answered any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub timeline_p99_us: Vec<(u64, u64)>,
    /// Partitions moved during the run and what they cost (`crate::moves`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moves: Option<crate::moves::Figures>,
}

impl Report {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("report serializes")
    }

    /// The workload's parameters as `name=value` words.
    pub fn parameters_line(&self) -> String {
        let words: Vec<String> = self
            .parameters
            .iter()
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => format!("{k}={s}"),
                v => format!("{k}={v}"),
            })
            .collect();
        words.join(" ")
    }

    /// A few lines for people.
    pub fn table(&self) -> String {
        let l = &self.latency_us;
        let mut s = String::new();
        s.push_str(&format!(
            "{} {} · {} shards{} · {}{}{}\n",
            self.workload,
            self.mode,
            self.shards,
            self.threads.map_or(String::new(), |t| format!(" on {t} threads")),
            self.parameters_line(),
            self.offered_tps
                .map_or(String::new(), |r| format!(" · offered {:.0}/s", r)),
            self.in_flight.map_or(String::new(), |n| format!(" · in flight {n}")),
        ));
        s.push_str(&format!(
            "  committed {:>12.0}/s  per core {:>12.0}/s  serial {:>12.0}/s  efficiency {:.2}\n",
            self.tps, self.tps_per_core, self.serial_tps, self.efficiency
        ));
        s.push_str(&format!(
            "  latency µs  p50 {}  p90 {}  p99 {}  p99.9 {}  p99.99 {}  max {}\n",
            l.p50, l.p90, l.p99, l.p999, l.p9999, l.max
        ));
        s.push_str(&format!(
            "  {} committed · {} aborted · {} failed · {} re-executed · {} serialized · {} epochs\n",
            self.committed, self.aborted, self.failed, self.reexecuted, self.serialized, self.epochs,
        ));
        s.push_str(&format!(
            "  {:.2} CPU-µs/txn · peak RSS {:.0} MB · load {:.1}s · invariants {}\n",
            self.cpu_us_per_txn,
            self.peak_rss_mb,
            self.load_s,
            if self.invariants_ok { "ok" } else { "VIOLATED" }
        ));
        if let Some(m) = &self.moves {
            s.push_str(&m.table());
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_reads_back_what_it_wrote_and_tolerates_missing_fields() {
        let mut r = Report {
            workload: "tpcc".into(),
            committed: 42,
            timeline: vec![(0, 10.0), (100, 20.0)],
            ..Report::default()
        };
        r.parameters.insert("warehouses".into(), 4.into());
        let back: Report = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(back.committed, 42);
        assert_eq!(back.timeline, r.timeline);
        assert_eq!(back.parameters["warehouses"], 4);
        let old: Report = serde_json::from_str(r#"{"workload":"ycsbt","tps":5.0}"#).unwrap();
        assert_eq!((old.workload.as_str(), old.tps, old.committed), ("ycsbt", 5.0, 0));
    }
}
