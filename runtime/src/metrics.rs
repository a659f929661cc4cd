//! What the runtime counts, for `/metrics` (Prometheus text format) and
//! `styx status`.
//!
//! Each shard owns one [`ShardMetrics`] and is its only writer (relaxed
//! stores of values it already has, so the hot loop pays a few plain
//! stores per iteration); any thread may read them. Latencies are kept as
//! cumulative sums and counts (Prometheus summaries without quantiles): a
//! scraper derives rates and means, and quantiles come from the benchmarks.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use styx_engine::{Shard, Stats};

/// One operator's partitions as one shard sees them: the invocations it
/// ran per partition and each partition's owner by its map (what `styx
/// rebalance --auto` plans from).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Partitions {
    pub operator: String,
    pub invocations: Vec<u64>,
    pub owners: Vec<u16>,
}

/// Counters of one shard.
#[derive(Default, Debug)]
pub struct ShardMetrics {
    pub epochs: AtomicU64,
    pub committed: AtomicU64,
    pub aborted: AtomicU64,
    pub reexecuted: AtomicU64,
    pub serialized: AtomicU64,
    pub invocations: AtomicU64,
    pub snapshots: AtomicU64,
    /// The epoch the shard is in (or last finished).
    pub epoch: AtomicU64,
    /// Requests waiting to be sequenced.
    pub pending: AtomicU64,
    pub connections: AtomicU64,
    pub connections_total: AtomicU64,
    /// Connections closed because their client left more than
    /// `output_bytes_max` of answers unread.
    pub connections_dropped: AtomicU64,
    /// Client frames read whose answers are not written yet, over this
    /// shard's connections (each at most `in_flight_max`).
    pub frames_owed: AtomicU64,
    /// Requests refused because a limit was reached.
    pub rejected: AtomicU64,
    /// Input log: epochs made durable, bytes written, fdatasync time.
    pub log_syncs: AtomicU64,
    pub log_bytes: AtomicU64,
    pub log_sync_us_sum: AtomicU64,
    /// The newest epoch whose input is durable here.
    pub log_durable_epoch: AtomicU64,
    /// Snapshot chunks written and time spent writing them.
    pub snapshot_bytes: AtomicU64,
    pub snapshot_write_us_sum: AtomicU64,
    /// The newest complete snapshot's epoch.
    pub snapshot_epoch: AtomicU64,
    /// Wall time between epoch starts, summed (÷ epochs = mean epoch time).
    pub epoch_us_sum: AtomicU64,
    /// Sent to shards on other nodes: frames (one batch each), messages,
    /// bytes (frame headers included).
    pub remote_batches: AtomicU64,
    pub remote_messages: AtomicU64,
    pub remote_bytes: AtomicU64,
    /// Per operator, published less often than the counters above (the
    /// shard's thread copies them under the lock), and at once when the
    /// partition map changes.
    pub partitions: Mutex<Vec<Partitions>>,
    /// The version of the map `partitions` holds the owners of (set under
    /// the same lock).
    pub map_version: AtomicU64,
}

impl ShardMetrics {
    /// Publishes the engine's counters.
    pub fn publish(&self, stats: &Stats, epoch: u64, pending: usize) {
        self.epochs.store(stats.epochs, Relaxed);
        self.committed.store(stats.committed, Relaxed);
        self.aborted.store(stats.aborted, Relaxed);
        self.reexecuted.store(stats.reexecuted, Relaxed);
        self.serialized.store(stats.serialized, Relaxed);
        self.invocations.store(stats.invocations, Relaxed);
        self.snapshots.store(stats.snapshots, Relaxed);
        self.epoch.store(epoch, Relaxed);
        self.pending.store(pending as u64, Relaxed);
    }

    /// Publishes each operator's per-partition invocations and owners.
    pub fn publish_partitions(&self, shard: &Shard) {
        let map = shard.partition_map();
        let app = shard.app();
        let now: Vec<Partitions> = app
            .operators()
            .map(|(op, info)| Partitions {
                operator: info.name().to_string(),
                invocations: shard.partition_invocations(op).to_vec(),
                owners: (0..info.partitions()).map(|p| map.owner(op, p)).collect(),
            })
            .collect();
        let mut published = self.partitions.lock().unwrap();
        *published = now;
        self.map_version.store(map.version(), Relaxed);
    }

    /// The partitions off the default rule by this shard's last published
    /// map, of `shards` in all: what PLACEMENT answers. Before the first
    /// publication (the shard still loading), the default rule.
    pub fn placement(&self, shards: u16, operators: usize) -> styx_net::Placement {
        let published = self.partitions.lock().unwrap();
        if published.is_empty() {
            return styx_net::Placement {
                version: 0,
                moved: vec![Vec::new(); operators],
            };
        }
        let moved = published
            .iter()
            .map(|op| {
                op.owners
                    .iter()
                    .enumerate()
                    .filter(|(p, owner)| styx_engine::partition_owner(*p as u32, shards) != **owner)
                    .map(|(p, owner)| (p as u32, *owner))
                    .collect()
            })
            .collect();
        styx_net::Placement {
            version: self.map_version.load(Relaxed),
            moved,
        }
    }
}

/// Every shard's counters.
#[derive(Debug)]
pub struct Metrics {
    pub shards: Vec<Arc<ShardMetrics>>,
    /// The shards' ids, in labels: on a cluster's node, shards are
    /// labelled with their ids across the cluster.
    pub ids: Vec<u16>,
}

impl Metrics {
    pub fn new(shards: usize) -> Arc<Metrics> {
        Metrics::of_shards(0, shards)
    }

    /// The metrics of shards `first..first + shards` (a cluster's node).
    pub fn of_shards(first: u16, shards: usize) -> Arc<Metrics> {
        Metrics::of_ids(&(first..first + shards as u16).collect::<Vec<_>>())
    }

    /// The metrics of the shards `ids`, in that order (a node's shards).
    pub fn of_ids(ids: &[u16]) -> Arc<Metrics> {
        Arc::new(Metrics {
            shards: ids.iter().map(|_| Arc::new(ShardMetrics::default())).collect(),
            ids: ids.to_vec(),
        })
    }

    /// The counters of shard `id`, one of this node's.
    pub fn of(&self, id: u16) -> &Arc<ShardMetrics> {
        let i = self.ids.iter().position(|s| *s == id).expect("a shard of this node");
        &self.shards[i]
    }

    /// The sum of one counter over all shards.
    pub fn total(&self, f: impl Fn(&ShardMetrics) -> &AtomicU64) -> u64 {
        self.shards.iter().map(|s| f(s).load(Relaxed)).sum()
    }

    /// The Prometheus text exposition (version 0.0.4).
    pub fn render(&self) -> String {
        type Field = fn(&ShardMetrics) -> &AtomicU64;
        let series: [(&str, &str, &str, Field); 25] = [
            ("styx_epochs_total", "counter", "Epochs finished.", |s| &s.epochs),
            (
                "styx_transactions_committed_total",
                "counter",
                "Transactions committed (by sequencing shard).",
                |s| &s.committed,
            ),
            (
                "styx_transactions_aborted_total",
                "counter",
                "Transactions aborted by their own logic.",
                |s| &s.aborted,
            ),
            (
                "styx_transactions_reexecuted_total",
                "counter",
                "Transactions that needed the phase-2 fallback.",
                |s| &s.reexecuted,
            ),
            (
                "styx_transactions_serialized_total",
                "counter",
                "Transactions re-run serially after drifting in phase 2.",
                |s| &s.serialized,
            ),
            ("styx_invocations_total", "counter", "Function invocations run.", |s| {
                &s.invocations
            }),
            ("styx_snapshots_total", "counter", "Snapshots begun.", |s| &s.snapshots),
            ("styx_epoch", "gauge", "The current epoch.", |s| &s.epoch),
            (
                "styx_requests_pending",
                "gauge",
                "Requests waiting to be sequenced.",
                |s| &s.pending,
            ),
            (
                "styx_connections",
                "gauge",
                "Client connections open, or closed with requests still running (each holds a slot of connections_max).",
                |s| &s.connections,
            ),
            (
                "styx_frames_owed",
                "gauge",
                "Client frames read whose answers are not written yet.",
                |s| &s.frames_owed,
            ),
            (
                "styx_connections_total",
                "counter",
                "Client connections accepted.",
                |s| &s.connections_total,
            ),
            (
                "styx_connections_dropped_total",
                "counter",
                "Client connections closed for leaving more than output_bytes_max of answers unread.",
                |s| &s.connections_dropped,
            ),
            (
                "styx_requests_rejected_total",
                "counter",
                "Requests refused by a limit.",
                |s| &s.rejected,
            ),
            (
                "styx_log_syncs_total",
                "counter",
                "Input-log fdatasyncs (one per epoch).",
                |s| &s.log_syncs,
            ),
            ("styx_log_bytes_total", "counter", "Input-log bytes written.", |s| {
                &s.log_bytes
            }),
            (
                "styx_log_sync_seconds_sum",
                "counter",
                "Time spent in input-log fdatasync.",
                |s| &s.log_sync_us_sum,
            ),
            (
                "styx_log_durable_epoch",
                "gauge",
                "Newest epoch whose input is durable.",
                |s| &s.log_durable_epoch,
            ),
            ("styx_snapshot_bytes_total", "counter", "Snapshot bytes written.", |s| {
                &s.snapshot_bytes
            }),
            (
                "styx_snapshot_write_seconds_sum",
                "counter",
                "Time spent writing snapshot files (off the shard's thread).",
                |s| &s.snapshot_write_us_sum,
            ),
            (
                "styx_snapshot_epoch",
                "gauge",
                "Newest complete snapshot's epoch.",
                |s| &s.snapshot_epoch,
            ),
            ("styx_epoch_seconds_sum", "counter", "Wall time of epochs.", |s| {
                &s.epoch_us_sum
            }),
            (
                "styx_remote_frames_total",
                "counter",
                "Frames (message batches) sent to shards on other nodes.",
                |s| &s.remote_batches,
            ),
            (
                "styx_remote_messages_total",
                "counter",
                "Messages sent to shards on other nodes.",
                |s| &s.remote_messages,
            ),
            (
                "styx_remote_bytes_total",
                "counter",
                "Bytes sent to shards on other nodes, frame headers included.",
                |s| &s.remote_bytes,
            ),
        ];
        let mut out = String::new();
        for (name, kind, help, field) in series {
            // Durations are kept in µs and exposed in seconds, as Prometheus expects.
            let seconds = name.ends_with("_seconds_sum");
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for (i, s) in self.shards.iter().enumerate() {
                let i = self.ids[i];
                let v = field(s).load(Relaxed);
                if seconds {
                    let _ = writeln!(out, "{name}{{shard=\"{i}\"}} {}", v as f64 / 1e6);
                } else {
                    let _ = writeln!(out, "{name}{{shard=\"{i}\"}} {v}");
                }
            }
        }
        self.render_partitions(&mut out);
        out
    }

    /// Per partition: the invocations each shard ran (partitions with
    /// some only) and its owner by each shard's map.
    fn render_partitions(&self, out: &mut String) {
        let published: Vec<Vec<Partitions>> = self
            .shards
            .iter()
            .map(|s| s.partitions.lock().unwrap().clone())
            .collect();
        for (name, kind, help) in [
            (
                "styx_partition_invocations_total",
                "counter",
                "Invocations run per partition on this shard.",
            ),
            (
                "styx_partition_owner",
                "gauge",
                "The shard a partition is on, by this shard's map.",
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for (i, ops) in published.iter().enumerate() {
                let i = self.ids[i];
                for op in ops {
                    let values = if name == "styx_partition_owner" {
                        op.owners.iter().map(|o| u64::from(*o)).collect()
                    } else {
                        op.invocations.clone()
                    };
                    for (p, v) in values.iter().enumerate() {
                        if name == "styx_partition_owner" || *v > 0 {
                            let _ = writeln!(
                                out,
                                "{name}{{shard=\"{i}\",operator=\"{}\",partition=\"{p}\"}} {v}",
                                op.operator
                            );
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_shard_in_prometheus_text() {
        let m = Metrics::new(2);
        m.shards[1].committed.store(7, Relaxed);
        m.shards[0].log_sync_us_sum.store(1_500_000, Relaxed);
        let text = m.render();
        assert!(text.contains("# TYPE styx_transactions_committed_total counter"));
        assert!(text.contains("styx_transactions_committed_total{shard=\"1\"} 7"));
        assert!(text.contains("styx_log_sync_seconds_sum{shard=\"0\"} 1.5"));
        assert_eq!(m.total(|s| &s.committed), 7);
        // Every sample line is `name{labels} value`.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (series, value) = line.rsplit_once(' ').unwrap();
            assert!(series.contains("{shard=\""), "{line}");
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }

    #[test]
    fn renders_partitions_with_invocations_and_every_owner() {
        let m = Metrics::new(2);
        *m.shards[1].partitions.lock().unwrap() = vec![Partitions {
            operator: "account".into(),
            invocations: vec![0, 5],
            owners: vec![0, 1],
        }];
        let text = m.render();
        assert!(
            text.contains("styx_partition_invocations_total{shard=\"1\",operator=\"account\",partition=\"1\"} 5"),
            "{text}"
        );
        assert!(!text.contains("styx_partition_invocations_total{shard=\"1\",operator=\"account\",partition=\"0\"}"));
        assert!(text.contains("styx_partition_owner{shard=\"1\",operator=\"account\",partition=\"0\"} 0"));
        assert!(text.contains("styx_partition_owner{shard=\"1\",operator=\"account\",partition=\"1\"} 1"));
    }

    #[test]
    fn a_cluster_node_labels_shards_by_their_cluster_ids() {
        let m = Metrics::of_shards(4, 2);
        m.shards[1].remote_messages.store(3, Relaxed);
        let text = m.render();
        assert!(text.contains("styx_remote_messages_total{shard=\"5\"} 3"), "{text}");
        assert!(!text.contains("{shard=\"0\"}"), "{text}");
    }
}
