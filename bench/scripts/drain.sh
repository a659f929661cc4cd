#!/usr/bin/env bash
# Draining a node under load (issue 12): three `styxd` nodes of one shard
# each on this machine, YCSB-T over TCP (`styx bench ycsbt --connect`,
# exactly-once names, fsync=epoch), and `styx rebalance account
# --drain-node 2` started DRAIN_AT seconds into the measured window,
# against the same run without the drain, in turn (A B A B …).
#
# Reports per run: committed/s over the whole window, p50/p99, the commit
# rate (median of the bench's 100 ms timeline buckets) before the drain,
# during it and after it, p99 before it (median of the buckets' p99s) and
# during it (the highest bucket p99; a steady run: the same window), how long the drain took and how many partitions
# it moved, and whether the run's own invariants held (every transfer
# once, money conserved).
#
# Usage: bench/scripts/drain.sh   (settings by environment)
#   ACCOUNTS=100000 DURATION=12 DRAIN_AT=4 ROUNDS=2 RATE= (closed loop)
#   OUT=/tmp/drain.jsonl STYX=target/release/styx STYXD=target/release/styxd
#   BASE_PORT=7700

set -euo pipefail

ACCOUNTS=${ACCOUNTS:-100000}
DURATION=${DURATION:-12}
DRAIN_AT=${DRAIN_AT:-4}
ROUNDS=${ROUNDS:-2}
RATE=${RATE:-}
OUT=${OUT:-/tmp/drain.jsonl}
STYX=${STYX:-target/release/styx}
STYXD=${STYXD:-target/release/styxd}
BASE=${BASE_PORT:-7700}
WARMUP=2
WORK=$(mktemp -d /tmp/styx-drain-bench.XXXXXX)
. "$(dirname "$0")/daemons.sh"

# One run: $1 the run's name, $2 "drain" or "steady".
run() {
    local file="$WORK/cluster-$1.toml" addrs=()
    cluster_file "$file" 3 1 5
    for i in 0 1 2; do
        local peer=$((BASE + 10 + i * 10))
        # Metrics on the client port + 1, where `styx rebalance` looks.
        "$STYXD" --cluster "$file" --node-id "$i" --data-dir "$WORK/node-$1-$i" \
            --metrics "127.0.0.1:$((peer + 6))" --preload ycsbt --keys "$ACCOUNTS" --log warn >/dev/null &
        PIDS+=($!)
        addrs+=("127.0.0.1:$((peer + 5))")
    done
    for a in "${addrs[@]}"; do wait_serving "$a"; done
    local rate_args=()
    [ -n "$RATE" ] && rate_args=(--rate "$RATE")
    "$STYX" bench ycsbt --connect "$(IFS=,; echo "${addrs[*]}")" --connections 2 --exactly-once \
        --keys "$ACCOUNTS" --duration "$DURATION" --warmup "$WARMUP" --json --no-serial --quiet \
        "${rate_args[@]}" >"$WORK/report-$1.json" &
    local bench=$!
    local drain_s=0 moved=0 start_ms=0
    if [ "$2" = drain ]; then
        sleep $((WARMUP + DRAIN_AT))
        start_ms=$(( (WARMUP + DRAIN_AT) * 1000 ))
        local t0 t1
        t0=$(date +%s%N)
        "$STYX" rebalance --connect "${addrs[0]}" account --drain-node 2 >"$WORK/drain-$1.txt" 2>&1 ||
            { cat "$WORK/drain-$1.txt" >&2; exit 1; }
        t1=$(date +%s%N)
        drain_s=$(echo "scale=3; ($t1 - $t0) / 1000000000" | bc)
        moved=$(grep -c "switched within" "$WORK/drain-$1.txt")
    fi
    wait "$bench"
    stop_all
    jq -c --arg run "$2" --argjson drain_s "$drain_s" --argjson moved "$moved" \
        --argjson start_ms "$start_ms" --argjson warmup_ms $((WARMUP * 1000)) "$JQ_MEDIAN"'
        (if $run == "drain" then $start_ms else ($warmup_ms + '"$DRAIN_AT"' * 1000) end) as $from
        | ($from + ($drain_s * 1000 | if . < 100 then 100 else . end)) as $to
        | {run: $run, tps, p50_us: .latency_us.p50, p99_us: .latency_us.p99, invariants_ok,
           drain_s: $drain_s, partitions_moved: $moved,
           rate_before: ([.timeline[] | select(.[0] >= $warmup_ms and .[0] < $from) | .[1]] | median),
           rate_during: ([.timeline[] | select(.[0] >= $from and .[0] < $to) | .[1]] | median),
           rate_after: ([.timeline[] | select(.[0] >= $to + 500) | .[1]] | median),
           p99_before_us: ([.timeline_p99_us[]? | select(.[0] >= $warmup_ms and .[0] < $from) | .[1]] | median),
           p99_during_max_us: ([.timeline_p99_us[]? | select(.[0] >= $from and .[0] < $to) | .[1]] | max // 0)}' "$WORK/report-$1.json"
}

runs_in_turn drain

jq -s -r "$JQ_MEDIAN"'
  group_by(.run) | map({run: .[0].run, tps: (map(.tps) | median), p99: (map(.p99_us) | median),
    before: (map(.rate_before) | median), during: (map(.rate_during) | median), after: (map(.rate_after) | median),
    p99_before: (map(.p99_before_us) | median), p99_during: (map(.p99_during_max_us) | median),
    drain_s: (map(.drain_s) | median), moved: (map(.partitions_moved) | median), ok: (map(.invariants_ok) | all)})[]
  | "\(.run)\t\(.tps | floor) tps\tp99 \(.p99) µs\trate before/during/after \(.before | floor)/\(.during | floor)/\(.after | floor)\tp99 before/during (100 ms buckets: median/max) \(.p99_before)/\(.p99_during) µs\tdrain \(.drain_s) s (\(.moved) partitions)\tinvariants \(.ok)"
' "$WORK/runs.jsonl"
