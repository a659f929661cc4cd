#!/usr/bin/env bash
# Every figure the issues ask for, in one run on one machine, appended as
# JSON lines to $OUT and summarized as a table on stdout:
#
#   engine:      YCSB-T uniform on 1 and 2 shards, Zipf 0.99, latency at
#                half the maximum rate, peak RSS with 1M accounts
#   durability:  fsync=epoch against fsync=none (over TCP), log bytes per
#                transaction, snapshot overhead at half load (1 s interval
#                against none), time to serve after kill -9 with 1M and
#                10M accounts, snapshot write time
#   daemon:      YCSB-T over TCP closed loop, and latency at half that rate
#   workloads:   TPC-C W=1,2,10, movie, travel in-process; TPC-C W=1 and
#                movie, travel over TCP
#
# Usage: bench/scripts/issue_figures.sh   (settings by environment)
#   STYX=target/release/styx STYXD=target/release/styxd OUT=docs/results/figures.jsonl
#   DURATION=10 WARMUP=2 SKIP_10M=1
#   SECTIONS="engine tcp recovery workloads tcp-workloads" (default: all)
#
# The machine is shared: read ratios of runs made side by side, not
# absolute figures from different days.

set -euo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
STYX=${STYX:-$REPO/target/release/styx}
STYXD=${STYXD:-$REPO/target/release/styxd}
OUT=${OUT:-$REPO/docs/results/figures.jsonl}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
WORK=${WORK:-$(mktemp -d /tmp/styx-figures.XXXXXX)}
PORT=${PORT:-7600}
SECTIONS=${SECTIONS:-engine tcp recovery workloads tcp-workloads}
IN_FLIGHT=${IN_FLIGHT:-1000}
want() { [[ " $SECTIONS " == *" $1 "* ]]; }
mkdir -p "$(dirname "$OUT")"
for b in "$STYX" "$STYXD"; do
    [[ -x $b ]] || { echo "error: $b is not built (cargo build --release -p styx-tools)" >&2; exit 1; }
done
command -v jq >/dev/null || { echo "error: jq is needed (apt-get install jq)" >&2; exit 1; }
echo "issue figures: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)" >&2

summary() { # label, then the JSON report on stdin
    jq -r --arg l "$1" '"\($l)\t\(.tps|floor) tps\t\(.tps_per_core|floor)/core\teff \(.efficiency // 0 | .*100|floor/100)\tp50 \(.latency_us.p50)µs p99 \(.latency_us.p99)µs p99.9 \(.latency_us.p999)µs\treexec \(.reexecuted)\trss \(.peak_rss_mb // 0)MB\tok \(.invariants_ok)"'
}

bench() { # label, styx bench args…
    local label=$1
    shift
    echo "+ styx bench $*" >&2
    local json
    json=$("$STYX" bench "$@" --duration "$DURATION" --warmup "$WARMUP" --json --quiet 2>/dev/null) || true
    [[ -n $json ]] || { echo "$label	(failed)"; return; }
    echo "$json" | jq -c --arg l "$label" '. + {label: $l}' >>"$OUT"
    echo "$json" | summary "$label"
    echo "$json" >"$WORK/last.json"
}

daemon_pid=
start_daemon() { # data dir, styxd args…
    local dir=$1
    shift
    local log="$WORK/styxd.out"
    rm -f "$log" # so the wait below cannot see the last daemon's lines
    "$STYXD" --data-dir "$dir" --listen "127.0.0.1:$PORT" --metrics "127.0.0.1:$((PORT + 1))" --log "${LOG:-warn}" "$@" >"$log" 2>&1 &
    daemon_pid=$!
    for _ in $(seq 1 6000); do
        grep -q "listening" "$log" 2>/dev/null && return 0
        kill -0 "$daemon_pid" 2>/dev/null || { cat "$log" >&2; return 1; }
        sleep 0.01
    done
    echo "styxd did not start" >&2
    return 1
}
stop_daemon() {
    [[ -n $daemon_pid ]] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null || true
    daemon_pid=
}
trap stop_daemon EXIT
metric_sum() { # metric name
    curl -s "http://127.0.0.1:$((PORT + 1))/metrics" | awk -v m="$1" '$1 ~ "^"m"[{ ]" || $1 == m {s += $2} END {printf "%.0f", s}'
}

if want engine; then
echo "== engine (in-process, $IN_FLIGHT in flight per shard) =="
bench "ycsbt uniform 1 shard" ycsbt --shards 1 --keys 10000 --in-flight "$IN_FLIGHT"
bench "ycsbt uniform 2 shards" ycsbt --shards 2 --keys 10000 --in-flight "$IN_FLIGHT"
max=$(jq .tps "$WORK/last.json")
bench "ycsbt zipf0.99 2 shards" ycsbt --shards 2 --keys 10000 --zipf 0.99 --in-flight "$IN_FLIGHT"
half=$(jq -n "$max / 2 | floor")
bench "ycsbt 2 shards open loop at half max ($half/s)" ycsbt --shards 2 --keys 10000 --rate "$half" --no-serial
bench "ycsbt 1M accounts (RSS)" ycsbt --shards 2 --keys 1000000 --no-serial --in-flight "$IN_FLIGHT"
fi

echo "== durability and daemon (TCP, client on the same machine) =="
tcp() { # label, fsync, snapshot ms, extra bench args…
    local label=$1 fsync=$2 snap=$3
    shift 3
    rm -rf "$WORK/d"
    start_daemon "$WORK/d" --shards 2 --preload ycsbt --keys 10000 --fsync "$fsync" --snapshot-interval-ms "$snap"
    local log0 c0
    log0=$(metric_sum styx_log_bytes_total)
    c0=$(metric_sum styx_transactions_committed_total)
    bench "$label" ycsbt --connect "127.0.0.1:$PORT" --keys 10000 --no-serial "$@"
    local log1 c1
    log1=$(metric_sum styx_log_bytes_total)
    c1=$(metric_sum styx_transactions_committed_total)
    if [[ $c1 -gt $c0 ]]; then
        echo "  log bytes per transaction: $(((log1 - log0) / (c1 - c0)))"
    fi
    stop_daemon
}
if want tcp; then
tcp "tcp ycsbt fsync=epoch" epoch 0 --connections 2 --in-flight 512
tcp_max=$(jq .tps "$WORK/last.json")
tcp "tcp ycsbt fsync=none" none 0 --connections 2 --in-flight 512
tcp_half=$(jq -n "$tcp_max / 2 | floor")
tcp "tcp ycsbt fsync=epoch half rate ($tcp_half/s), no snapshots" epoch 0 --connections 2 --rate "$tcp_half"
tcp "tcp ycsbt fsync=epoch half rate ($tcp_half/s), snapshot every 1 s" epoch 1000 --connections 2 --rate "$tcp_half"
fi

recovery() { # accounts
    local keys=$1
    rm -rf "$WORK/r"
    LOG=info start_daemon "$WORK/r" --shards 2 --preload ycsbt --keys "$keys" --snapshot-interval-ms 1000
    # The preload writes every account as one base snapshot.
    grep -i "preload" "$WORK/styxd.out" | tail -1 | sed 's/^/  /'
    "$STYX" bench ycsbt --connect "127.0.0.1:$PORT" --keys "$keys" --duration 3 --warmup 0 --no-serial --quiet --connections 2 --in-flight 64 >/dev/null 2>&1 || true
    sleep 1.5 # a snapshot of the changed accounts, and log after it
    kill -9 "$daemon_pid"
    wait "$daemon_pid" 2>/dev/null || true
    daemon_pid=
    local t0 t1
    t0=$(date +%s.%N)
    start_daemon "$WORK/r" --shards 2 --snapshot-interval-ms 1000
    # Serving = answering: the daemon listens before its shards have
    # loaded the snapshot and replayed the log (requests wait meanwhile).
    until "$STYX" get --connect "127.0.0.1:$PORT" --timeout 30 account 0 >/dev/null 2>&1; do sleep 0.005; done
    t1=$(date +%s.%N)
    echo "recovery with $keys accounts: $(jq -n "($t1 - $t0) * 1000 | floor") ms from start to serving (data dir $(du -sh "$WORK/r" | cut -f1))"
    echo "  snapshot files written since restart: $(metric_sum styx_snapshot_bytes_total) bytes in $(metric_sum styx_snapshot_write_seconds_sum) s"
    stop_daemon
}
if want recovery; then
recovery 1000000
[[ -n ${SKIP_10M:-} ]] || recovery 10000000
fi

if want workloads; then
echo "== workloads in-process =="
bench "tpcc W=1" tpcc --shards 2 --warehouses 1 --no-serial
bench "tpcc W=2" tpcc --shards 2 --warehouses 2 --no-serial
bench "tpcc W=10" tpcc --shards 2 --warehouses 10 --no-serial
bench "movie" movie --shards 2 --no-serial
bench "travel" travel --shards 2 --no-serial
fi

if want tcp-workloads; then
echo "== workloads over TCP =="
for w in "tpcc --warehouses 1" "tpcc --warehouses 2" "movie" "travel"; do
    rm -rf "$WORK/w"
    # shellcheck disable=SC2086
    start_daemon "$WORK/w" --shards 2 --preload $w
    # shellcheck disable=SC2086
    bench "tcp $w" $w --connect "127.0.0.1:$PORT" --connections 4 --no-serial
    stop_daemon
done
fi
rm -rf "$WORK"
