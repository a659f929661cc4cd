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
