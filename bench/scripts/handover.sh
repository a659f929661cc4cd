#!/usr/bin/env bash
# Shards handed between daemons under load (issue 12): two `styxd` nodes
# of two shards each on this machine, YCSB-T over TCP (`styx bench ycsbt
# --connect`, exactly-once names, fsync=epoch), and `styx handover 1 1`,
# then `styx handover 1 0`, … every EVERY seconds from HANDOVER_AT on
# (shard 1 goes back and forth between the nodes), against the same run
# without handovers, in turn (A B A B …).
#
# Reports per run: committed/s over the whole window, p50/p99; the commit
# rate away from handovers (median of the bench's 100 ms timeline buckets
# outside [h - 0.2 s, h + 1 s] of every handover h) and around them (the
# window's commits over its length, median over the handovers; the lowest
# 100 ms bucket in any window), the buckets' p99 away from handovers
# (median) and around them (the highest); each handover's time from the
# request to LAYOUT placing the shard on its new node (median); whether
# the run's own invariants held (every transfer once, money conserved);
# the client's reconnects and requests resent (with their seq).
# A steady run takes the same windows at the same times.
#
# SPARE=1: a third node, a spare (`shards = 0`), takes shard 1 and hands
# it back to node 0, in turn: a node added, then drained, at every other
# handover (it serves its client port without an engine in between).
#
# Usage: bench/scripts/handover.sh   (settings by environment)
#   ACCOUNTS=100000 DURATION=12 HANDOVER_AT=2 EVERY=2 HANDOVERS=4 ROUNDS=2 SPARE=
#   RATE= (closed loop) IN_FLIGHT=64 OUT=/tmp/handover.jsonl
#   STYX=target/release/styx STYXD=target/release/styxd BASE_PORT=7800

set -euo pipefail

ACCOUNTS=${ACCOUNTS:-100000}
DURATION=${DURATION:-12}
HANDOVER_AT=${HANDOVER_AT:-2}
EVERY=${EVERY:-2}
HANDOVERS=${HANDOVERS:-4}
ROUNDS=${ROUNDS:-2}
SPARE=${SPARE:-}
RATE=${RATE:-}
IN_FLIGHT=${IN_FLIGHT:-64}
OUT=${OUT:-/tmp/handover.jsonl}
STYX=${STYX:-target/release/styx}
STYXD=${STYXD:-target/release/styxd}
BASE=${BASE_PORT:-7800}
WARMUP=2
WORK=$(mktemp -d /tmp/styx-handover-bench.XXXXXX)
. "$(dirname "$0")/daemons.sh"

# One run: $1 the run's name, $2 "handover" or "steady".
run() {
    local file="$WORK/cluster-$1.toml" addrs=() nodes=(0 1) to=(1 0)
    if [ -n "$SPARE" ]; then
        cluster_file "$file" 2 2 6 0
        nodes=(0 1 2)
        to=(2 0)
    else
        cluster_file "$file" 2 2 6
    fi
    for i in "${nodes[@]}"; do
        local peer=$((BASE + 10 + i * 10))
        "$STYXD" --cluster "$file" --node-id "$i" --data-dir "$WORK/node-$1-$i" \
            --metrics off --preload ycsbt --keys "$ACCOUNTS" --log warn >/dev/null &
        PIDS+=($!)
        addrs+=("127.0.0.1:$((peer + 6))")
    done
    for a in "${addrs[@]}"; do wait_serving "$a"; done
    local rate_args=()
    [ -n "$RATE" ] && rate_args=(--rate "$RATE")
    local t0
    t0=$(date +%s%N)
    "$STYX" bench ycsbt --connect "$(IFS=,; echo "${addrs[*]}")" --connections 2 --exactly-once \
        --keys "$ACCOUNTS" --duration "$DURATION" --warmup "$WARMUP" --json --no-serial --quiet \
        --in-flight "$IN_FLIGHT" "${rate_args[@]}" >"$WORK/report-$1.json" &
    local bench=$!
    local at=() took=()
    for k in $(seq 0 $((HANDOVERS - 1))); do
        local due_ms=$(( (WARMUP + HANDOVER_AT + k * EVERY) * 1000 ))
        local now_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
        [ "$due_ms" -gt "$now_ms" ] && sleep "$(echo "scale=3; ($due_ms - $now_ms) / 1000" | bc)"
        local h0 h1
        h0=$(( ($(date +%s%N) - t0) / 1000000 ))
        at+=("$h0")
        if [ "$2" = handover ]; then
            "$STYX" handover --connect "${addrs[0]}" 1 "${to[$((k % 2))]}" >"$WORK/handover-$1-$k.txt" 2>&1 ||
                { cat "$WORK/handover-$1-$k.txt" >&2; exit 1; }
            h1=$(( ($(date +%s%N) - t0) / 1000000 ))
            took+=("$((h1 - h0))")
        fi
    done
    wait "$bench"
    stop_all
    jq -c --arg run "$2" --argjson at "[$(IFS=,; echo "${at[*]}")]" \
        --argjson took "[$(IFS=,; echo "${took[*]:-}")]" --argjson warmup_ms $((WARMUP * 1000)) "$JQ_MEDIAN"'
        def near($t): any($at[]; $t >= . - 200 and $t < . + 1000);
        .timeline_bucket_ms as $b
        | {run: $run, tps, p50_us: .latency_us.p50, p99_us: .latency_us.p99, invariants_ok,
           reconnects: .parameters.reconnects, resent: .parameters.retried,
           handover_ms: ($took | median),
           rate_away: ([.timeline[] | select(.[0] >= $warmup_ms and (near(.[0]) | not)) | .[1]] | median),
           rate_around: ([$at[] as $h | [.timeline[] | select(.[0] >= $h - 200 and .[0] < $h + 1000) | .[1]] | add / length] | median),
           rate_lowest: ([.timeline[] | select(.[0] >= $warmup_ms and near(.[0])) | .[1]] | min // 0),
           p99_away_us: ([.timeline_p99_us[]? | select(.[0] >= $warmup_ms and (near(.[0]) | not)) | .[1]] | median),
           p99_around_max_us: ([.timeline_p99_us[]? | select(near(.[0])) | .[1]] | max // 0)}' "$WORK/report-$1.json"
}

runs_in_turn handover

jq -s -r "$JQ_MEDIAN"'
  group_by(.run) | map({run: .[0].run, tps: (map(.tps) | median), p99: (map(.p99_us) | median),
    away: (map(.rate_away) | median), around: (map(.rate_around) | median), lowest: (map(.rate_lowest) | median),
    p99_away: (map(.p99_away_us) | median), p99_around: (map(.p99_around_max_us) | median),
    handover_ms: (map(.handover_ms) | median), ok: (map(.invariants_ok) | all)})[]
  | "\(.run)\t\(.tps | floor) tps\tp99 \(.p99) µs\trate away/around/lowest bucket \(.away | floor)/\(.around | floor)/\(.lowest | floor)\tp99 away/around (100 ms buckets: median/max) \(.p99_away)/\(.p99_around) µs\thandover \(.handover_ms) ms\tinvariants \(.ok)"
' "$WORK/runs.jsonl"
