#!/usr/bin/env bash
# Time from exec of a restarted styxd, after kill -9, until a GET answers
# (issue 9: 1M accounts <= 0.5 s, 10M <= 3 s), as issue_figures.sh measures
# it, but with a median of several runs and binaries side by side.
#
# For each account count, one crashed data directory is prepared once:
#   styxd --shards 2 --preload ycsbt --keys N --snapshot-interval-ms 1000,
#   LOAD_S seconds of `styx bench ycsbt --connect`, 1.5 s more (a snapshot of
#   the changed accounts, and log after it), kill -9.
# Then every run restarts a binary on a fresh copy of that directory (so all
# runs and all binaries recover the same input, files in the page cache as
# right after a kill) with a `styx get` started beside it, which connects
# as soon as the daemon listens and is answered once the shards have loaded
# and replayed; the time is from before both start until the GET returns
# (`serving_ms`: the daemon's own "recovered: serving" time since its
# start). The runs of the binaries alternate. Each restart's log (--log
# info) is kept in $WORK for its phase timestamps.
# (Before 2026-12-03 the script polled with a new `styx get` every 5 ms
# once the daemon listened: each poll's own ~30 ms start-up was counted.)
#
# Usage: bench/scripts/recovery.sh   (settings by environment)
#   KEYS="1000000 10000000" RUNS=3 LOAD_S=3 PORT=7650 OUT=(no JSON file)
#   WORK=dir REUSE=1: keep $WORK/crashed-N from an earlier run (same input)
#   STYX=target/release/styx STYXD=target/release/styxd (prepares the directories)
#   BINARIES="before=/tmp/styxd.old after=target/release/styxd" (default: styxd=$STYXD)
#
# Prints every command it runs (+), a JSON line per (accounts, binary) on
# stdout (and appended to $OUT if set), then a table. The machine is shared:
# compare binaries run side by side, not figures from different sessions.

set -euo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
STYX=${STYX:-$REPO/target/release/styx}
STYXD=${STYXD:-$REPO/target/release/styxd}
BINARIES=${BINARIES:-styxd=$STYXD}
KEYS=${KEYS:-1000000 10000000}
RUNS=${RUNS:-3}
LOAD_S=${LOAD_S:-3}
PORT=${PORT:-7650}
OUT=${OUT:-}
WORK=${WORK:-$(mktemp -d /tmp/styx-recovery.XXXXXX)}
command -v jq >/dev/null || { echo "error: jq is needed (apt-get install jq)" >&2; exit 1; }
for b in "$STYX" "$STYXD" $(for x in $BINARIES; do echo "${x#*=}"; done); do
    [[ -x $b ]] || { echo "error: $b is not built (cargo build --release -p styx-tools)" >&2; exit 1; }
done
echo "recovery: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ), work in $WORK" >&2

run() { # prints, then runs, a command
    echo "+ $*" >&2
    "$@"
}

daemon_pid=
start_daemon() { # log file, styxd binary, its args… (returns once `listening`)
    local log=$1 bin=$2
    shift 2
    echo "+ $bin $* --listen 127.0.0.1:$PORT --metrics 127.0.0.1:$((PORT + 1)) --log info &" >&2
    "$bin" "$@" --listen "127.0.0.1:$PORT" --metrics "127.0.0.1:$((PORT + 1))" --log info >"$log" 2>&1 &
    daemon_pid=$!
    for _ in $(seq 1 12000); do
        grep -q "listening" "$log" 2>/dev/null && return 0
        kill -0 "$daemon_pid" 2>/dev/null || { cat "$log" >&2; return 1; }
        sleep 0.005
    done
    echo "styxd did not start" >&2
    return 1
}
stop_daemon() {
    [[ -n $daemon_pid ]] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null || true
    daemon_pid=
}
trap stop_daemon EXIT

prepare() { # accounts -> $WORK/crashed-N
    local keys=$1 dir=$WORK/crashed-$1
    rm -rf "$dir"
    start_daemon "$WORK/prepare-$keys.log" "$STYXD" --data-dir "$dir" --shards 2 --preload ycsbt --keys "$keys" --snapshot-interval-ms 1000
    grep -i "preload" "$WORK/prepare-$keys.log" | tail -1 | sed 's/^/  /' >&2 || true
    # The preload is loaded after `listening`: load only once it answers.
    until "$STYX" get --connect "127.0.0.1:$PORT" --timeout 30 account 0 >/dev/null 2>&1; do sleep 0.05; done
    echo "+ $STYX bench ycsbt --connect 127.0.0.1:$PORT --keys $keys --duration $LOAD_S --warmup 0 --no-serial --quiet --connections 2 --in-flight 64" >&2
    "$STYX" bench ycsbt --connect "127.0.0.1:$PORT" --keys "$keys" --duration "$LOAD_S" --warmup 0 --no-serial --quiet --connections 2 --in-flight 64 >/dev/null 2>&1 || true
    sleep 1.5
    run kill -9 "$daemon_pid"
    wait "$daemon_pid" 2>/dev/null || true
    daemon_pid=
    echo "  crashed directory: $(du -sh "$dir" | cut -f1), $(find "$dir" -type f | wc -l) files" >&2
}

restart() { # accounts, label, binary, run -> prints ms
    local keys=$1 label=$2 bin=$3 i=$4 dir=$WORK/r
    rm -rf "$dir"
    cp -a "$WORK/crashed-$keys" "$dir"
    sync
    local log="$WORK/restart-$keys-$label-$i.log" t0 t1 getter
    t0=$(date +%s.%N)
    # A client waiting for the daemon, started with it (its own start-up,
    # ~30 ms for a `styx` process, overlaps the daemon's rather than adding
    # to it): it retries the connection until `listening`, then its GET
    # waits while the shards load and replay. Answered = recovered.
    "$STYX" get --connect "127.0.0.1:$PORT" --timeout 60 account 0 >"$log.get" 2>&1 &
    getter=$!
    start_daemon "$log" "$bin" --data-dir "$dir" --shards 2 --snapshot-interval-ms 1000
    wait "$getter" || { echo "error: the GET failed:" >&2; cat "$log.get" >&2; exit 1; }
    t1=$(date +%s.%N)
    stop_daemon
    # The daemon's own figure: since its start until every shard serves.
    local served
    served=$(grep "recovered: serving" "$log" | sed -E 's/.*since_start_ms=([0-9.]+).*/\1/' | sort -n | tail -1)
    echo "$(jq -n "($t1 - $t0) * 1000 | floor") ${served%.*}"
}

results=()
for keys in $KEYS; do
    if [[ -n ${REUSE:-} && -d $WORK/crashed-$keys ]]; then
        echo "+ reusing $WORK/crashed-$keys" >&2
    else
        prepare "$keys"
    fi
    [[ $RUNS -gt 0 ]] || continue
    declare -A runs=() served_runs=()
    for i in $(seq 1 "$RUNS"); do
        for x in $BINARIES; do
            label=${x%%=*} bin=${x#*=}
            echo "+ restart $bin on a copy of $WORK/crashed-$keys (run $i)" >&2
            read -r ms served < <(restart "$keys" "$label" "$bin" "$i")
            echo "  $label: answered after $ms ms (shards serving after ${served:-?} ms)" >&2
            runs[$label]="${runs[$label]:-} $ms"
            served_runs[$label]="${served_runs[$label]:-} ${served:-null}"
        done
    done
    for x in $BINARIES; do
        label=${x%%=*}
        line=$(jq -cn --arg lbl "$label" --arg bin "${x#*=}" --argjson keys "$keys" \
            --argjson runs "[$(echo ${runs[$label]} | tr ' ' ',')]" \
            --argjson served "[$(echo ${served_runs[$label]} | tr ' ' ',')]" \
            '{figure: "kill -9 to answering", accounts: $keys, binary: $lbl, path: $bin, shards: 2,
              runs_ms: $runs, median_ms: ($runs | sort | .[(length - 1) / 2 | floor]),
              serving_ms: $served}')
        echo "$line"
        [[ -z $OUT ]] || echo "$line" >>"$OUT"
        results+=("$line")
    done
    unset runs served_runs
done

echo
printf '%-12s %-10s %-22s %s\n' accounts binary "runs (ms)" "median (ms)"
for line in "${results[@]}"; do
    jq -r '[(.accounts | tostring), .binary, (.runs_ms | map(tostring) | join(" ")), (.median_ms | tostring)] | @tsv' <<<"$line" |
        awk -F'\t' '{printf "%-12s %-10s %-22s %s\n", $1, $2, $3, $4}'
done
