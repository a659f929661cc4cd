#!/usr/bin/env bash
# The figures of docs/BENCHMARKS.md: a closed-loop run of every workload
# (throughput over time) and an open-loop sweep of offered rates per
# workload (latency against load), appended as JSON lines to $OUT, then
# plotted into $DOCS.
#
# Usage: bench/scripts/figures.sh        (settings by environment)
#   STYX=target/release/styx OUT=docs/results.jsonl DOCS=docs
#   DURATION=8 WARMUP=2 SHARDS=2
#   YCSBT_RATES="…" TPCC_RATES="…" MOVIE_RATES="…" TRAVEL_RATES="…"

set -euo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
STYX=${STYX:-$REPO/target/release/styx}
OUT=${OUT:-$REPO/docs/results.jsonl}
DOCS=${DOCS:-$REPO/docs}
DURATION=${DURATION:-8}
WARMUP=${WARMUP:-2}
SHARDS=${SHARDS:-2}
YCSBT_RATES=${YCSBT_RATES:-"10000 25000 50000 100000 150000"}
TPCC_RATES=${TPCC_RATES:-"200 400 800 1600"}
MOVIE_RATES=${MOVIE_RATES:-"1000 2000 4000 8000"}
TRAVEL_RATES=${TRAVEL_RATES:-"2500 5000 10000 20000"}

[[ -x $STYX ]] || { echo "error: $STYX is not built (cargo build --release -p styx-tools)" >&2; exit 1; }
echo "figures: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)" >&2

run() {
    echo "+ styx bench $*" >&2
    "$STYX" bench "$@" --shards "$SHARDS" --duration "$DURATION" --warmup "$WARMUP" --out "$OUT" --quiet >&2 ||
        echo "  (exit $?: invariants violated or the run failed)" >&2
}

# Maximum throughput, and the timelines (of the last closed-loop run of
# each workload: YCSB-T's default, 20 000 in flight per shard).
run ycsbt --in-flight 250
run ycsbt
run tpcc
run movie
run travel

# Latency against offered load (no serial ceiling: it is measured above).
for r in $YCSBT_RATES; do run ycsbt --rate "$r" --no-serial; done
for r in $TPCC_RATES; do run tpcc --rate "$r" --no-serial; done
for r in $MOVIE_RATES; do run movie --rate "$r" --no-serial; done
for r in $TRAVEL_RATES; do run travel --rate "$r" --no-serial; done

"$STYX" bench plot --input "$OUT" --out "$DOCS"
