#!/usr/bin/env bash
# The cost of a node boundary: YCSB-T over TCP against one node with two
# shards (their link an in-process queue) and against two nodes with one
# shard each (their link a TCP connection on loopback), side by side, in
# turn (A B A B …), on this machine.
#
# Both get the same accounts, the same client (`styx bench ycsbt --connect`,
# closed loop, exactly-once names), fsync=epoch. For the cluster it reads
# every node's /metrics before and after the run and reports what crossed
# between nodes per committed transaction: frames, messages and bytes.
#
# Usage: bench/scripts/cluster.sh   (settings by environment)
#   ACCOUNTS=10000 DURATION=10 ROUNDS=3 OUT=/tmp/cluster.jsonl
#   STYX=target/release/styx STYXD=target/release/styxd
#   CONNECTIONS=2 IN_FLIGHT=256 BASE_PORT=7600
#
# Prints a table of the medians and the ratio; appends one JSON line per
# run to $OUT.

set -euo pipefail

ACCOUNTS=${ACCOUNTS:-10000}
DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-3}
OUT=${OUT:-/tmp/cluster.jsonl}
STYX=${STYX:-target/release/styx}
STYXD=${STYXD:-target/release/styxd}
CONNECTIONS=${CONNECTIONS:-2}
IN_FLIGHT=${IN_FLIGHT:-256}
BASE=${BASE_PORT:-7600}
WORK=$(mktemp -d /tmp/styx-cluster-bench.XXXXXX)
. "$(dirname "$0")/daemons.sh"

# Sums a counter over every shard of the /metrics at $2.
metric() {
    curl -s "http://$2/metrics" | awk -v n="$1" '$1 ~ "^"n"[{]" { s += $2 } END { printf "%d", s }'
}

bench() {
    "$STYX" bench ycsbt --connect "$1" --connections "$CONNECTIONS" --exactly-once \
        --in-flight "$IN_FLIGHT" --keys "$ACCOUNTS" --duration "$DURATION" --warmup 2 \
        --json --no-serial --quiet
}

one_node() {
    local dir="$WORK/single-$1" addr="127.0.0.1:$BASE"
    "$STYXD" --data-dir "$dir" --listen "$addr" --metrics "127.0.0.1:$((BASE + 1))" --shards 2 \
        --preload ycsbt --keys "$ACCOUNTS" --log warn >/dev/null &
    PIDS+=($!)
    wait_serving "$addr"
    local report
    report=$(bench "$addr")
    stop_all
    echo "$report" | jq -c --arg setup "1 node x 2 shards" '{setup: $setup, tps, p50_us: .latency_us.p50, p99_us: .latency_us.p99, invariants_ok}'
}

two_nodes() {
    local file="$WORK/cluster-$1.toml"
    cluster_file "$file" 2 1 5
    for i in 0 1; do
        "$STYXD" --cluster "$file" --node-id "$i" --data-dir "$WORK/node-$1-$i" \
            --metrics "127.0.0.1:$((BASE + 16 + i * 10))" --preload ycsbt --keys "$ACCOUNTS" --log warn >/dev/null &
        PIDS+=($!)
    done
    local a0="127.0.0.1:$((BASE + 15))" a1="127.0.0.1:$((BASE + 25))"
    local m0="127.0.0.1:$((BASE + 16))" m1="127.0.0.1:$((BASE + 26))"
    wait_serving "$a0"
    wait_serving "$a1"
    local before after
    before=$(for m in "$m0" "$m1"; do for s in styx_remote_frames_total styx_remote_messages_total styx_remote_bytes_total styx_transactions_committed_total; do metric $s "$m"; echo; done; done | paste -sd' ')
    local report
    report=$(bench "$a0,$a1")
    after=$(for m in "$m0" "$m1"; do for s in styx_remote_frames_total styx_remote_messages_total styx_remote_bytes_total styx_transactions_committed_total; do metric $s "$m"; echo; done; done | paste -sd' ')
    stop_all
    # frames messages bytes committed, node 0 then node 1 (a transaction
    # counts as committed on its root's shard only).
    local -a b a
    read -r -a b <<<"$before"
    read -r -a a <<<"$after"
    local frames=$((a[0] - b[0] + a[4] - b[4])) messages=$((a[1] - b[1] + a[5] - b[5]))
    local bytes=$((a[2] - b[2] + a[6] - b[6])) committed_all=$((a[3] - b[3] + a[7] - b[7]))
    echo "$report" | jq -c --arg setup "2 nodes x 1 shard" --argjson frames "$frames" \
        --argjson messages "$messages" --argjson bytes "$bytes" --argjson all "$committed_all" \
        '{setup: $setup, tps, p50_us: .latency_us.p50, p99_us: .latency_us.p99, invariants_ok,
          remote_frames_per_txn: ($frames / $all), remote_messages_per_txn: ($messages / $all),
          remote_bytes_per_txn: ($bytes / $all)}'
}

command -v jq >/dev/null || apt-get install -y jq >/dev/null
: >"$WORK/runs.jsonl"
for r in $(seq 1 "$ROUNDS"); do
    one_node "$r" | tee -a "$WORK/runs.jsonl" "$OUT"
    two_nodes "$r" | tee -a "$WORK/runs.jsonl" "$OUT"
done

jq -s -r "$JQ_MEDIAN"'
  group_by(.setup) | map({setup: .[0].setup, tps: (map(.tps) | median), p99: (map(.p99_us) | median),
    frames: (map(.remote_frames_per_txn // 0) | median), messages: (map(.remote_messages_per_txn // 0) | median),
    bytes: (map(.remote_bytes_per_txn // 0) | median), ok: (map(.invariants_ok) | all)}) as $rows
  | ($rows[] | "\(.setup)\t\(.tps | floor) tps\tp99 \(.p99) µs\tcross-node per txn: \(.frames | . * 100 | round / 100) frames, \(.messages | . * 100 | round / 100) messages, \(.bytes | round) B\tinvariants \(.ok)"),
    "ratio (2 nodes / 1 node): \(([$rows[] | select(.setup | startswith("2"))][0].tps / [$rows[] | select(.setup | startswith("1"))][0].tps) * 1000 | round / 1000)"
' "$WORK/runs.jsonl"
