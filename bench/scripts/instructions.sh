#!/usr/bin/env bash
# Instructions per YCSB-T transfer, counted by callgrind: the engine's CPU
# cost without the noise of a shared machine (the count repeats to within a
# fraction of a percent whatever else runs). Each figure is the difference
# between a run of N and of N/2 transactions, divided by N/2, so loading the
# accounts and building the requests cancel out.
#
#   serial    styx_engine::Serial (the serial ceiling's executor)
#   1 shard   the epoch protocol on one shard, every call local
#   2 shards  two shards driven in one thread, half the calls remote
#
# Usage: bench/scripts/instructions.sh   (N=200000 KEYS=10000 EPOCH=1000 BIN=…
#        STYX_API=typed|closures: the application written either way)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${BIN:-$REPO/target/release/examples/engine_cpu}
N=${N:-200000}
KEYS=${KEYS:-10000}
EPOCH=${EPOCH:-1000}
command -v valgrind >/dev/null || { echo "error: valgrind is needed (apt-get install valgrind)" >&2; exit 1; }
[[ -x $BIN ]] || { echo "error: $BIN is not built (cargo build --release -p styx-bench --example engine_cpu)" >&2; exit 1; }
count() { # engine_cpu args → instructions
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$BIN" "$@" 2>&1 | awk '/Collected/ {gsub(",", "", $4); print $4}'
}
printf '%-9s %12s\n' "executor" "instr/txn"
for setup in "serial 0 0" "1-shard 1 $EPOCH" "2-shards 2 $EPOCH"; do
    read -r name shards epoch <<<"$setup"
    full=$(count "$shards" "$epoch" "$KEYS" "$N")
    half=$(count "$shards" "$epoch" "$KEYS" $((N / 2)))
    per=$(((full - half) / (N / 2)))
    printf '%-9s %12d\n' "$name" "$per"
    echo "{\"executor\":\"$name\",\"api\":\"${STYX_API:-typed}\",\"keys\":$KEYS,\"epoch_txns\":$epoch,\"instructions_per_txn\":$per}" >&2
done
