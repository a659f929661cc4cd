#!/usr/bin/env bash
# The daemon's TCP path, two builds side by side: YCSB-T over TCP against
# `styxd --preload ycsbt` (10 000 accounts, fsync=epoch unless FSYNC says
# otherwise), runs alternating A B A B … so both see the same machine.
#
#   closed      closed loop, 2 connections × 512 in flight, SHARDS shards
#   open RATE   open loop at RATE/s (HALF, default 90 000), SHARDS shards
#   open 20k    open loop at 20 000/s on 1 shard (a light load)
#   snapshot    open loop at HALF with a snapshot every 1 s
#
# KINDS picks among them (default "closed open light snapshot"); SHARDS
# defaults to 2.
#
# Every command is printed with `+`; one JSON line per run goes to OUT.
#
# Usage: A=old-dir B=new-dir bench/scripts/tcp_ab.sh
#   (each dir holds a `styx` and a `styxd`; ROUNDS=3 DURATION=6 HALF=90000
#    OUT=/tmp/tcp_ab.jsonl PORT=7831)
set -euo pipefail
A=${A:?A=dir with the old styx and styxd}
B=${B:?B=dir with the new styx and styxd}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-6}
HALF=${HALF:-90000}
OUT=${OUT:-/tmp/tcp_ab.jsonl}
PORT=${PORT:-7831}
FSYNC=${FSYNC:-epoch}
SHARDS=${SHARDS:-2}
KINDS=" ${KINDS:-closed open light snapshot} "
WORK=$(mktemp -d)
trap 'kill $daemon 2>/dev/null || true; rm -rf "$WORK"' EXIT
daemon=

run() { # label, build dir, shards, snapshot ms, bench args…
    local label=$1 dir=$2 shards=$3 snap=$4
    shift 4
    rm -rf "$WORK/d" "$WORK/log"
    echo "+ $dir/styxd --shards $shards --preload ycsbt --keys 10000 --fsync $FSYNC --snapshot-interval-ms $snap" >&2
    "$dir/styxd" --data-dir "$WORK/d" --listen "127.0.0.1:$PORT" --metrics off --log warn \
        --shards "$shards" --preload ycsbt --keys 10000 --fsync "$FSYNC" --snapshot-interval-ms "$snap" >"$WORK/log" 2>&1 &
    daemon=$!
    for _ in $(seq 1 3000); do grep -q listening "$WORK/log" && break; sleep 0.01; done
    echo "+ $dir/styx bench ycsbt --connect 127.0.0.1:$PORT --keys 10000 --no-serial --warmup 2 --duration $DURATION $*" >&2
    "$dir/styx" bench ycsbt --connect "127.0.0.1:$PORT" --keys 10000 --no-serial --quiet --json \
        --warmup 2 --duration "$DURATION" "$@" 2>/dev/null |
        jq -c --arg l "$label" --arg b "$dir" \
            '{label: $l, build: $b, tps: (.tps | floor), p50_us: .latency_us.p50, p99_us: .latency_us.p99, p999_us: .latency_us.p999, p9999_us: .latency_us.p9999, ok: .invariants_ok}' |
        tee -a "$OUT"
    kill "$daemon"
    wait "$daemon" 2>/dev/null || true
    daemon=
}

for round in $(seq 1 "$ROUNDS"); do
    for dir in "$A" "$B"; do
        case $KINDS in *" closed "*) run closed "$dir" "$SHARDS" 0 --connections 2 --in-flight 512 ;; esac
        case $KINDS in *" open "*) run "open $HALF" "$dir" "$SHARDS" 0 --connections 2 --rate "$HALF" ;; esac
        case $KINDS in *" light "*) run "open 20k 1 shard" "$dir" 1 0 --connections 2 --rate 20000 ;; esac
        case $KINDS in *" snapshot "*) run "open $HALF snapshot 1s" "$dir" "$SHARDS" 1000 --connections 2 --rate "$HALF" ;; esac
    done
done

# Medians per label and build.
jq -s -r 'group_by([.label, .build])[] |
    (map(.tps) | sort | .[length / 2 | floor]) as $tps |
    (map(.p50_us) | sort | .[length / 2 | floor]) as $p50 |
    (map(.p99_us) | sort | .[length / 2 | floor]) as $p99 |
    (map(.p999_us) | sort | .[length / 2 | floor]) as $p999 |
    "\(.[0].label)\t\(.[0].build)\ttps \($tps)\tp50 \($p50)\tp99 \($p99)\tp99.9 \($p999)\truns \(length)\tok \(all(.ok))"' "$OUT" | column -t -s $'\t'
