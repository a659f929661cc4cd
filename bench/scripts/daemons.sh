# Sourced by the scripts that start `styxd` daemons (cluster.sh, drain.sh):
# PIDS holds the daemons started; stop_all stops them; on exit they are
# stopped and $WORK (set before sourcing) removed. Needs $STYX.

PIDS=()

cleanup() {
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

# Waits until the daemon at $1 answers STATUS.
wait_serving() {
    for _ in $(seq 1 600); do
        if "$STYX" status --connect "$1" --metrics off >/dev/null 2>&1; then return 0; fi
        sleep 0.1
    done
    echo "no answer from $1" >&2
    return 1
}

# Stops every daemon started, and waits for each.
stop_all() {
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    PIDS=()
}

# Writes to $1 the cluster file of $2 nodes of $3 shards each on loopback
# (and, with $5, one more node of $5 shards: 0 makes it a spare; with $6
# "later" too, it joins later: `styx node add`): node i's
# peer port is BASE + 10 + 10 i, the data-link ports of the cluster's
# shards follow it, and its client port is $4 above the peer port
# (heartbeat 100 ms, failure after 500 ms).
cluster_file() {
    {
        echo "heartbeat_ms = 100"
        echo "failure_timeout_ms = 500"
        for i in $(seq 0 $(($2 - 1))); do
            local peer=$((BASE + 10 + i * 10))
            echo "[[nodes]]"
            echo "id = $i"
            echo "peer = \"127.0.0.1:$peer\""
            echo "client = \"127.0.0.1:$((peer + $4))\""
            echo "shards = $3"
        done
        if [ -n "${5:-}" ]; then
            local peer=$((BASE + 10 + $2 * 10))
            echo "[[nodes]]"
            echo "id = $2"
            echo "peer = \"127.0.0.1:$peer\""
            echo "client = \"127.0.0.1:$((peer + $4))\""
            echo "shards = $5"
            [ "${6:-}" = later ] && echo "joins_later = true"
        fi
    } >"$1"
}

# A jq definition for the scripts' figures: a list's median (0 of none).
# Prefix a jq program with it: jq "$JQ_MEDIAN"'…'.
JQ_MEDIAN='def median: sort | if length == 0 then 0 elif length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;'

# Runs ROUNDS rounds, each `run steady-R steady` then `run $1-R $1`, in
# turn, each run's line into $WORK/runs.jsonl and $OUT (jq and bc, which
# the runs use, installed first).
runs_in_turn() {
    command -v jq >/dev/null || apt-get install -y jq >/dev/null
    command -v bc >/dev/null || apt-get install -y bc >/dev/null
    : >"$WORK/runs.jsonl"
    for r in $(seq 1 "$ROUNDS"); do
        run "steady-$r" steady | tee -a "$WORK/runs.jsonl" "$OUT"
        run "$1-$r" "$1" | tee -a "$WORK/runs.jsonl" "$OUT"
    done
}
