#!/usr/bin/env bash
# Shards smaller than a core: in-process YCSB-T closed loop for each
# "SHARDSxTHREADS" layout (THREADS empty: the build's default), builds and
# layouts alternating within each round so that they share the machine's
# moods. One JSON report per run to OUT (with the build, layout and round
# added), a table of medians at the end.
#
# Usage: BINARIES="before=dir after=dir" bench/scripts/threads.sh
#   (each dir holds a `styx`; LAYOUTS="2x 4x2 4x4 8x2" KEYS=10000
#    ROUNDS=3 DURATION=3 OUT=/tmp/threads.jsonl; a layout with threads is
#    skipped for a build whose `styx bench` has no --threads)
set -euo pipefail
BINARIES=${BINARIES:?BINARIES=\"label=dir …\"}
LAYOUTS=${LAYOUTS:-2x 4x2 4x4 8x2}
KEYS=${KEYS:-10000}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-3}
OUT=${OUT:-/tmp/threads.jsonl}

for round in $(seq 1 "$ROUNDS"); do
    for layout in $LAYOUTS; do
        for pair in $BINARIES; do
            label=${pair%%=*} dir=${pair#*=}
            shards=${layout%x*} threads=${layout#*x}
            args=(bench ycsbt --shards "$shards" --keys "$KEYS" --duration "$DURATION" --warmup 1 --no-serial --quiet --json)
            if [ -n "$threads" ]; then
                "$dir/styx" bench ycsbt --help | grep -q -- --threads || continue
                args+=(--threads "$threads")
            fi
            echo "+ $label: styx ${args[*]}" >&2
            "$dir/styx" "${args[@]}" |
                jq -c --arg b "$label" --arg l "$layout" --argjson r "$round" \
                    '{build: $b, layout: $l, round: $r} + .' | tee -a "$OUT" |
                jq -r '"\(.build)\t\(.layout)\t\(.tps | round)"' >&2
        done
    done
done

jq -s -r 'group_by([.layout, .build])[] |
    (map(.tps) | sort) as $t | (map(.latency_us.p99) | sort) as $p |
    "\(.[0].layout)\t\(.[0].build)\t\(.[0].keys // .[0].parameters.keys)\tmedian \($t[($t | length) / 2 | floor] | round) tps\tp99 \($p[($p | length) / 2 | floor]) µs\truns \(length)"' "$OUT" |
    column -t -s $'\t'
