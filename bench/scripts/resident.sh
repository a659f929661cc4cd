#!/usr/bin/env bash
# Resident bytes of a daemon: `styxd --shards 2 --preload ycsbt --keys K`,
# RssAnon idle (IDLE_S after start), 8 s after a full scan (`styx verify
# ycsbt`, as `styx bench --connect` does at its end) and 8 s after a 4 s
# closed-loop run. Builds alternate per round; per account is the
# difference between 1M and 10 000 accounts over the 990 000 extra ones.
# One JSON line per daemon to OUT, a table at the end.
#
# Usage: BINARIES="before=dir after=dir" bench/scripts/resident.sh
#   (each dir holds a `styx` and a `styxd`; ROUNDS=2 IDLE_S=25 PORT=7611
#    OUT=/tmp/resident.jsonl)
set -euo pipefail
BINARIES=${BINARIES:?BINARIES=\"label=dir …\"}
ROUNDS=${ROUNDS:-2}
IDLE_S=${IDLE_S:-25}
PORT=${PORT:-7611}
OUT=${OUT:-/tmp/resident.jsonl}
WORK=$(mktemp -d)
daemon=
trap 'kill $daemon 2>/dev/null || true; rm -rf "$WORK"' EXIT

rss() { awk '/RssAnon/ {print $2}' "/proc/$daemon/status"; }

one() { # label dir keys round
    local label=$1 dir=$2 keys=$3 round=$4
    rm -rf "$WORK/d"
    echo "+ $dir/styxd --shards 2 --preload ycsbt --keys $keys --snapshot-interval-ms 0" >&2
    "$dir/styxd" --shards 2 --preload ycsbt --keys "$keys" --snapshot-interval-ms 0 --data-dir "$WORK/d" \
        --listen "127.0.0.1:$PORT" --metrics off --log warn >"$WORK/log" 2>&1 &
    daemon=$!
    sleep "$IDLE_S"
    local idle verify load
    idle=$(rss)
    "$dir/styx" verify ycsbt --keys "$keys" --connect "127.0.0.1:$PORT" >/dev/null
    sleep 8
    verify=$(rss)
    "$dir/styx" bench ycsbt --connect "127.0.0.1:$PORT" --keys "$keys" --no-serial --warmup 1 --duration 4 \
        --connections 2 --in-flight 512 --quiet --json >/dev/null
    sleep 8
    load=$(rss)
    kill "$daemon"
    wait "$daemon" 2>/dev/null || true
    daemon=
    echo "{\"build\":\"$label\",\"round\":$round,\"keys\":$keys,\"idle_kb\":$idle,\"verify_kb\":$verify,\"load_kb\":$load}" | tee -a "$OUT"
}

for round in $(seq 1 "$ROUNDS"); do
    for pair in $BINARIES; do
        for keys in 10000 1000000; do
            one "${pair%%=*}" "${pair#*=}" "$keys" "$round"
        done
    done
done

jq -s -r 'group_by([.build, .round])[] | (map(select(.keys == 10000))[0]) as $s | (map(select(.keys == 1000000))[0]) as $l |
    def per(f): ((($l | f) - ($s | f)) * 1024 / 990000 * 10 | round / 10);
    "\(.[0].build)\tround \(.[0].round)\tidle \(per(.idle_kb)) B\tafter scan \(per(.verify_kb)) B\tafter load \(per(.load_kb)) B"' "$OUT" |
    column -t -s $'\t'
