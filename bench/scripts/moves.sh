#!/usr/bin/env bash
# Live rescaling figures (issue 12), in-process on 2 shards: YCSB-T while
# partitions move back and forth (throughput and p99 per 100 ms window,
# steady against in move), the time to move a partition of ~100K
# entities, and a load skewed onto one shard before and after a rebalance
# by the shards' per-partition counts. JSON lines go to $OUT; each run's
# table is printed; the command of each run is printed with `+`.
#
# Usage: bench/scripts/moves.sh   (settings by environment)
#   STYX=target/release/styx OUT=docs/results/moves.jsonl
#   SECTIONS="moves big skew" (default: all)
#
# The machine is shared: read ratios of windows of the same run.

set -euo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
STYX=${STYX:-$REPO/target/release/styx}
OUT=${OUT:-$REPO/docs/results/moves.jsonl}
SECTIONS=${SECTIONS:-moves big skew}
want() { [[ " $SECTIONS " == *" $1 "* ]]; }
mkdir -p "$(dirname "$OUT")"
[[ -x $STYX ]] || { echo "error: $STYX is not built (cargo build --release -p styx-tools)" >&2; exit 1; }

run() {
    echo "+ styx bench ycsbt $*"
    "$STYX" bench ycsbt --shards 2 --no-serial --quiet --out "$OUT" "$@" | grep -v '^  *\[' || true
}

echo "# $(date -u +%FT%TZ) $(uptime)"
if want moves; then
    # 10 000 accounts: ~156 per partition. Closed loop, then open loop at
    # a quarter of the closed-loop rate; 30 moves of partition 0, 200 ms apart.
    run --keys 10000 --duration 10 --warmup 2 --moves 30 --move-every-ms 200 --moves-after 3
    run --keys 10000 --duration 10 --warmup 2 --moves 30 --move-every-ms 200 --moves-after 3 --rate 50000
    # 1 000 000 accounts: ~15 600 per partition.
    run --keys 1000000 --duration 10 --warmup 2 --moves 10 --move-every-ms 600 --moves-after 3
fi
if want big; then
    # 6 400 000 accounts in 64 partitions: ~100 000 per partition.
    run --keys 6400000 --duration 8 --warmup 2 --moves 6 --move-every-ms 1000 --moves-after 2
fi
if want skew; then
    # Zipf 0.99 creditors, the hottest all on shard 0; a rebalance 4 s into
    # the window. Then the same skew without a rebalance, and Zipf 0.99
    # spread by the hash (no hot shard), for reference.
    run --keys 10000 --zipf 0.99 --hot-shard 0 --duration 8 --warmup 2 --rebalance-after 4
    run --keys 10000 --zipf 0.99 --hot-shard 0 --duration 8 --warmup 2
    run --keys 10000 --zipf 0.99 --duration 8 --warmup 2
fi
echo "# $(date -u +%FT%TZ) $(uptime)"
