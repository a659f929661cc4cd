#!/usr/bin/env bash
# A node joining under load (issue 12): two `styxd` nodes of two shards
# each and a third listed with `joins_later = true` (started with them,
# waiting to be added), YCSB-T over TCP (`styx bench ycsbt --connect`,
# exactly-once names, fsync=epoch); JOIN_AT seconds into the measured
# window `styx node add 2` then `styx node fill 2` (one shard handed to
# it), against the same run without them, in turn (A B A B …).
#
# Reports per run: committed/s over the whole window, p50/p99, the commit
# rate (median of the bench's 100 ms timeline buckets) before the join,
# during the add and fill and after them, p99 before (median of the
# buckets' p99s) and during (the highest bucket p99; a steady run: the
# same window), how long the add took to be decided and to serve, how
# long the fill took, and whether the run's invariants held (every
# transfer once, money conserved).
#
# Usage: bench/scripts/join.sh   (settings by environment)
#   ACCOUNTS=100000 DURATION=12 JOIN_AT=4 ROUNDS=2 RATE= (closed loop)
#   OUT=/tmp/join.jsonl STYX=target/release/styx STYXD=target/release/styxd
#   BASE_PORT=7800

set -euo pipefail

ACCOUNTS=${ACCOUNTS:-100000}
DURATION=${DURATION:-12}
JOIN_AT=${JOIN_AT:-4}
ROUNDS=${ROUNDS:-2}
RATE=${RATE:-}
OUT=${OUT:-/tmp/join.jsonl}
STYX=${STYX:-target/release/styx}
STYXD=${STYXD:-target/release/styxd}
BASE=${BASE_PORT:-7800}
WARMUP=2
WORK=$(mktemp -d /tmp/styx-join-bench.XXXXXX)
. "$(dirname "$0")/daemons.sh"

# One run: $1 the run's name, $2 "join" or "steady".
run() {
    local file="$WORK/cluster-$1.toml" addrs=()
    cluster_file "$file" 2 2 7 0 later
    for i in 0 1 2; do
        local peer=$((BASE + 10 + i * 10))
        local preload=(--preload ycsbt --keys "$ACCOUNTS")
        "$STYXD" --cluster "$file" --node-id "$i" --data-dir "$WORK/node-$1-$i" \
            --metrics off "${preload[@]}" --log warn >/dev/null &
        PIDS+=($!)
        addrs+=("127.0.0.1:$((peer + 7))")
    done
    # (`styx status` counts node 2, not added yet, as down: each node's
    # own line says whether it serves.)
    for a in "${addrs[@]:0:2}"; do
        for _ in $(seq 1 600); do
            { "$STYX" status --connect "$a" --metrics off 2>/dev/null || true; } | grep -q '^\*.*serving' && break
            sleep 0.1
        done
    done
    local rate_args=()
    [ -n "$RATE" ] && rate_args=(--rate "$RATE")
    "$STYX" bench ycsbt --connect "${addrs[0]},${addrs[1]}" --connections 2 --exactly-once \
        --keys "$ACCOUNTS" --duration "$DURATION" --warmup "$WARMUP" --json --no-serial --quiet \
        "${rate_args[@]}" >"$WORK/report-$1.json" &
    local bench=$!
    local join_s=0 decided_ms=0 serving_ms=0 start_ms=0
    if [ "$2" = join ]; then
        sleep $((WARMUP + JOIN_AT))
        start_ms=$(( (WARMUP + JOIN_AT) * 1000 ))
        local t0 t1
        t0=$(date +%s%N)
        "$STYX" node add --connect "${addrs[0]}" 2 >"$WORK/add-$1.txt" 2>&1 ||
            { cat "$WORK/add-$1.txt" >&2; exit 1; }
        "$STYX" node fill --connect "${addrs[0]}" 2 >"$WORK/fill-$1.txt" 2>&1 ||
            { cat "$WORK/fill-$1.txt" >&2; exit 1; }
        t1=$(date +%s%N)
        join_s=$(echo "scale=3; ($t1 - $t0) / 1000000000" | bc)
        decided_ms=$(grep -o 'decided in [0-9.]* ms' "$WORK/add-$1.txt" | grep -o '[0-9.]*' | head -1)
        serving_ms=$(grep -o 'after [0-9.]* ms' "$WORK/add-$1.txt" | grep -o '[0-9.]*' | head -1)
    fi
    wait "$bench"
    stop_all
    jq -c --arg run "$2" --argjson join_s "$join_s" --argjson decided_ms "${decided_ms:-0}" \
        --argjson serving_ms "${serving_ms:-0}" \
        --argjson start_ms "$start_ms" --argjson warmup_ms $((WARMUP * 1000)) "$JQ_MEDIAN"'
        (if $run == "join" then $start_ms else ($warmup_ms + '"$JOIN_AT"' * 1000) end) as $from
        | ($from + ($join_s * 1000 | if . < 100 then 100 else . end)) as $to
        | {run: $run, tps, p50_us: .latency_us.p50, p99_us: .latency_us.p99, invariants_ok,
           join_s: $join_s, add_decided_ms: $decided_ms, add_serving_ms: $serving_ms,
           rate_before: ([.timeline[] | select(.[0] >= $warmup_ms and .[0] < $from) | .[1]] | median),
           rate_during: ([.timeline[] | select(.[0] >= $from and .[0] < $to) | .[1]] | median),
           rate_after: ([.timeline[] | select(.[0] >= $to + 500) | .[1]] | median),
           p99_before_us: ([.timeline_p99_us[]? | select(.[0] >= $warmup_ms and .[0] < $from) | .[1]] | median),
           p99_during_max_us: ([.timeline_p99_us[]? | select(.[0] >= $from and .[0] < $to) | .[1]] | max // 0)}' "$WORK/report-$1.json"
}

runs_in_turn join

jq -s -r "$JQ_MEDIAN"'
  group_by(.run) | map({run: .[0].run, tps: (map(.tps) | median), p99: (map(.p99_us) | median),
    before: (map(.rate_before) | median), during: (map(.rate_during) | median), after: (map(.rate_after) | median),
    p99_before: (map(.p99_before_us) | median), p99_during: (map(.p99_during_max_us) | median),
    join_s: (map(.join_s) | median), decided: (map(.add_decided_ms) | median), serving: (map(.add_serving_ms) | median),
    ok: (map(.invariants_ok) | all)})[]
  | "\(.run)\t\(.tps | floor) tps\tp99 \(.p99) µs\trate before/during/after \(.before | floor)/\(.during | floor)/\(.after | floor)\tp99 before/during (100 ms buckets: median/max) \(.p99_before)/\(.p99_during) µs\tadd decided \(.decided) ms, serving \(.serving) ms; add+fill \(.join_s) s\tinvariants \(.ok)"
' "$WORK/runs.jsonl"
