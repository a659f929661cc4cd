#!/usr/bin/env bash
# YCSB-T transfers on what a user would pick instead, side by side with
# Styx on the same machine (benchmarks.md, "What a user would pick
# instead"):
#
#   - Redis 7, a Lua transfer script called with EVALSHA by redis-benchmark
#     (50 clients, pipeline 16; `__rand_int__` draws each account), once
#     without persistence and once with `appendonly yes` +
#     `appendfsync always`;
#   - PostgreSQL 15 at SERIALIZABLE with synchronous_commit=on, pgbench with
#     a custom debit/credit script (8 clients), serialization failures
#     retried (`--max-tries`);
#   - Styx in-process (`styx bench ycsbt`: no network, no log), and Styx as
#     a server (`styx bench ycsbt --connect`, fsync=epoch; the script starts
#     `styxd` with the accounts preloaded; STYXD_EXTERNAL=1 uses one already
#     running on STYXD_ADDR).
#
# Every system gets N accounts (default 10 000) of balance 1 000 000, and
# after its run the total is checked. Redis and PostgreSQL run as private
# instances on loopback (ports 6390 and 5440, data under $WORK) and are
# stopped at the end; missing packages are installed with apt-get.
#
# Usage: bench/scripts/side_by_side.sh   (as root; settings by environment)
#   ACCOUNTS=10000 DURATION=10 ROUNDS=1 OUT=side_by_side.jsonl
#   REDIS_REQUESTS=2000000 REDIS_CLIENTS=50 REDIS_PIPELINE=16 PG_CLIENTS=8
#   STYX=target/release/styx STYXD=target/release/styxd STYXD_ADDR=127.0.0.1:7400
#   STYX_ARGS="--in-flight 1000"  (extra flags for the in-process run)
#   STYX_CONNECTIONS=2 STYX_SERVER_IN_FLIGHT=512 STYXD_EXTERNAL=
#
# Prints a table of committed transfers per second and the ratios to Styx;
# appends one JSON line per measurement to $OUT. With ROUNDS > 1 the systems
# run in turn (A B A B …) and the table shows medians.

set -euo pipefail

ACCOUNTS=${ACCOUNTS:-10000}
BALANCE=1000000
DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-1}
REDIS_REQUESTS=${REDIS_REQUESTS:-2000000}
REDIS_CLIENTS=${REDIS_CLIENTS:-50}
REDIS_PIPELINE=${REDIS_PIPELINE:-16}
REDIS_PORT=${REDIS_PORT:-6390}
PG_CLIENTS=${PG_CLIENTS:-8}
PG_VERSION=15
PG_CLUSTER=styxbench
PG_PORT=${PG_PORT:-5440}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
STYX=${STYX:-$REPO/target/release/styx}
STYXD=${STYXD:-$REPO/target/release/styxd}
STYXD_ADDR=${STYXD_ADDR:-127.0.0.1:7400}
STYX_ARGS=${STYX_ARGS:-}
OUT=${OUT:-side_by_side.jsonl}
WORK=${WORK:-/tmp/styx-side-by-side}

log() { printf '%s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

[[ $(id -u) -eq 0 ]] || die "run as root (it installs packages and starts servers)"
mkdir -p "$WORK"
: > "$WORK/results.tsv"

# --------------------------------------------------------------------------
# Install and start.

apt_install() {
    log "installing $*…"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null || apt_install redis-server redis-tools
command -v pg_ctlcluster >/dev/null && [[ -x /usr/lib/postgresql/$PG_VERSION/bin/postgres ]] ||
    apt_install "postgresql-$PG_VERSION" postgresql-client-common
command -v pgbench >/dev/null || apt_install "postgresql-client-$PG_VERSION"
command -v python3 >/dev/null || apt_install python3

redis() { redis-cli -h 127.0.0.1 -p "$REDIS_PORT" "$@"; }

start_redis() {
    if ! redis PING >/dev/null 2>&1; then
        log "starting redis-server on 127.0.0.1:$REDIS_PORT"
        redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --dir "$WORK" --save "" --appendonly no \
            --daemonize yes --pidfile "$WORK/redis.pid" --logfile "$WORK/redis.log"
        for _ in $(seq 50); do redis PING >/dev/null 2>&1 && break; sleep 0.1; done
    fi
    redis PING >/dev/null || die "redis-server did not start (see $WORK/redis.log)"
}

stop_redis() {
    if [[ -f $WORK/redis.pid ]]; then
        redis SHUTDOWN NOSAVE >/dev/null 2>&1 || true
        rm -f "$WORK/redis.pid"
    fi
}

psql_bench() { psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PG_PORT" -U postgres "$@"; }

start_postgres() {
    if ! pg_lsclusters -h | awk '{print $1" "$2}' | grep -qx "$PG_VERSION $PG_CLUSTER"; then
        log "creating PostgreSQL $PG_VERSION cluster $PG_CLUSTER on port $PG_PORT"
        pg_createcluster "$PG_VERSION" "$PG_CLUSTER" -p "$PG_PORT" -- --auth-local=trust --auth-host=trust >/dev/null
    fi
    local conf=/etc/postgresql/$PG_VERSION/$PG_CLUSTER/conf.d/styx-bench.conf
    cat > "$conf" <<EOF
listen_addresses = '127.0.0.1'
port = $PG_PORT
max_connections = 100
shared_buffers = 256MB
fsync = on
synchronous_commit = on
default_transaction_isolation = 'serializable'
EOF
    if ! pg_ctlcluster "$PG_VERSION" "$PG_CLUSTER" status >/dev/null 2>&1; then
        log "starting PostgreSQL $PG_VERSION cluster $PG_CLUSTER on 127.0.0.1:$PG_PORT"
        pg_ctlcluster "$PG_VERSION" "$PG_CLUSTER" start
    else
        pg_ctlcluster "$PG_VERSION" "$PG_CLUSTER" reload
    fi
    for _ in $(seq 50); do psql_bench -c 'SELECT 1' >/dev/null 2>&1 && return; sleep 0.2; done
    die "PostgreSQL did not start (see /var/log/postgresql/postgresql-$PG_VERSION-$PG_CLUSTER.log)"
}

stop_postgres() {
    pg_ctlcluster "$PG_VERSION" "$PG_CLUSTER" stop >/dev/null 2>&1 || true
}

cleanup() {
    stop_redis
    stop_postgres
}
trap cleanup EXIT

# record SYSTEM CONFIG TPS JSON: one result line for the table and $OUT.
record() {
    printf '%s\t%s\t%s\n' "$1" "$2" "$3" >> "$WORK/results.tsv"
    printf '%s\n' "$4" >> "$OUT"
    log "  $1 ($2): $3 transfers/s"
}

now_iso() { date -u +%Y-%m-%dT%H:%M:%SZ; }

# --------------------------------------------------------------------------
# Redis: a Lua transfer, the same logic as YCSB-T's functions.

TRANSFER_LUA='
local balance = tonumber(redis.call("GET", KEYS[1]))
if balance == nil then return redis.error_reply("no account " .. KEYS[1]) end
local amount = tonumber(ARGV[1])
balance = balance - amount
if balance < 0 then return redis.error_reply("insufficient credit") end
-- Debit before the deposit: a transfer to oneself then leaves the balance as it was.
redis.call("SET", KEYS[1], balance)
redis.call("INCRBY", KEYS[2], amount)
return balance'

# The total of all balances, computed inside Redis.
TOTAL_LUA='
local total = 0
for i = 0, tonumber(ARGV[1]) - 1 do
  total = total + tonumber(redis.call("GET", string.format("acct:%012d", i)))
end
return total'

redis_load() {
    redis FLUSHALL >/dev/null
    python3 - "$ACCOUNTS" "$BALANCE" <<'EOF' | redis --pipe >/dev/null
import sys
n, balance = int(sys.argv[1]), sys.argv[2]
out = sys.stdout
for i in range(n):
    key = "acct:%012d" % i
    out.write("*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(key), key, len(balance), balance))
EOF
    [[ $(redis DBSIZE) -eq $ACCOUNTS ]] || die "redis: loaded $(redis DBSIZE) accounts of $ACCOUNTS"
}

redis_total() {
    redis EVAL "$TOTAL_LUA" 0 "$ACCOUNTS"
}

# redis_run PERSISTENCE: "none" or "fsync-always".
redis_run() {
    local persistence=$1
    start_redis
    redis CONFIG SET appendonly no >/dev/null
    redis_load
    if [[ $persistence == fsync-always ]]; then
        redis CONFIG SET appendfsync always >/dev/null
        redis CONFIG SET appendonly yes >/dev/null
        # Enabling the AOF rewrites it in the background first: wait for it.
        for _ in $(seq 300); do
            redis INFO persistence | grep -q 'aof_rewrite_in_progress:0' &&
                redis INFO persistence | grep -q 'aof_rewrite_scheduled:0' && break
            sleep 0.1
        done
    fi
    local sha
    sha=$(redis SCRIPT LOAD "$TRANSFER_LUA")
    log "redis ($persistence): $REDIS_REQUESTS transfers, $REDIS_CLIENTS clients, pipeline $REDIS_PIPELINE…"
    local begin end csv rps
    begin=$(date +%s.%N)
    # -r draws each __rand_int__ (12 digits) independently in 0..ACCOUNTS-1.
    csv=$(redis-benchmark -h 127.0.0.1 -p "$REDIS_PORT" -c "$REDIS_CLIENTS" -P "$REDIS_PIPELINE" \
        -n "$REDIS_REQUESTS" -r "$ACCOUNTS" --csv \
        EVALSHA "$sha" 2 "acct:__rand_int__" "acct:__rand_int__" 1)
    end=$(date +%s.%N)
    rps=$(printf '%s\n' "$csv" | awk -F'","' 'NR==2 {print $2}')
    [[ -n $rps ]] || die "redis-benchmark printed no rate: $csv"
    local total
    total=$(redis_total)
    local ok=true
    [[ $total -eq $((ACCOUNTS * BALANCE)) ]] || { ok=false; log "redis: total $total, expected $((ACCOUNTS * BALANCE))"; }
    record "redis" "$persistence" "$rps" \
        "{\"system\":\"redis\",\"version\":\"$(redis-server --version | awk '{print $3}' | cut -d= -f2)\",\"persistence\":\"$persistence\",\"clients\":$REDIS_CLIENTS,\"pipeline\":$REDIS_PIPELINE,\"accounts\":$ACCOUNTS,\"requests\":$REDIS_REQUESTS,\"seconds\":$(awk "BEGIN {printf \"%.3f\", $end - $begin}"),\"tps\":$rps,\"invariants_ok\":$ok,\"at\":\"$(now_iso)\"}"
    redis CONFIG SET appendonly no >/dev/null
}

# --------------------------------------------------------------------------
# PostgreSQL: pgbench with a debit/credit script at SERIALIZABLE.

pg_load() {
    psql_bench <<EOF
DROP TABLE IF EXISTS accounts;
CREATE TABLE accounts (id integer PRIMARY KEY, balance bigint NOT NULL) WITH (fillfactor = 80);
INSERT INTO accounts SELECT i, $BALANCE FROM generate_series(0, $ACCOUNTS - 1) AS i;
VACUUM ANALYZE accounts;
EOF
}

pg_run() {
    start_postgres
    pg_load
    cat > "$WORK/transfer.sql" <<'EOF'
\set debtor random(0, :accounts - 1)
\set creditor random(0, :accounts - 1)
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT balance - 1 AS left FROM accounts WHERE id = :debtor \gset
UPDATE accounts SET balance = balance + 1 WHERE id = :creditor;
\if :left >= 0
UPDATE accounts SET balance = balance - 1 WHERE id = :debtor;
END;
\else
ROLLBACK;
\endif
EOF
    log "postgresql: ${DURATION}s of transfers, $PG_CLIENTS clients, SERIALIZABLE, synchronous_commit=on…"
    local output tps failed
    output=$(pgbench -h 127.0.0.1 -p "$PG_PORT" -U postgres -n -M prepared -c "$PG_CLIENTS" -j 2 \
        -T "$DURATION" --max-tries=100 -D accounts="$ACCOUNTS" -f "$WORK/transfer.sql" postgres 2>&1) ||
        die "pgbench failed: $output"
    tps=$(printf '%s\n' "$output" | awk '/^tps = / {print $3; exit}')
    failed=$(printf '%s\n' "$output" | awk '/number of failed transactions/ {print $5; exit}')
    local retried
    retried=$(printf '%s\n' "$output" | awk '/number of transactions retried/ {print $5; exit}')
    [[ -n $tps ]] || die "pgbench printed no tps: $output"
    local total ok=true
    total=$(psql_bench -t -A -c 'SELECT sum(balance) FROM accounts')
    [[ $total -eq $((ACCOUNTS * BALANCE)) ]] || { ok=false; log "postgresql: total $total, expected $((ACCOUNTS * BALANCE))"; }
    record "postgresql" "serializable, sync commit" "$tps" \
        "{\"system\":\"postgresql\",\"version\":\"$(psql_bench -t -A -c 'SHOW server_version')\",\"isolation\":\"serializable\",\"synchronous_commit\":\"on\",\"clients\":$PG_CLIENTS,\"accounts\":$ACCOUNTS,\"seconds\":$DURATION,\"tps\":$tps,\"failed\":${failed:-0},\"retried\":${retried:-0},\"invariants_ok\":$ok,\"at\":\"$(now_iso)\"}"
}

# --------------------------------------------------------------------------
# Styx.

styx_inproc_run() {
    [[ -x $STYX ]] || { log "styx: $STYX is not built (cargo build --release -p styx-tools): skipped"; return; }
    log "styx in-process: ${DURATION}s of transfers…"
    local json tps
    # shellcheck disable=SC2086 # STYX_ARGS is a list of flags
    json=$("$STYX" bench ycsbt --keys "$ACCOUNTS" --duration "$DURATION" --warmup 2 --json --quiet $STYX_ARGS)
    tps=$(printf '%s\n' "$json" | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["tps"]))')
    record "styx" "in-process" "$tps" "$(printf '%s\n' "$json" | python3 -c 'import json,sys; r=json.load(sys.stdin); r["system"]="styx"; r["setup"]="in-process"; print(json.dumps(r))')"
}

# ==========================================================================
# STYX AS A SERVER: starts styxd on a fresh data directory with the
# accounts preloaded and fsync = epoch (the default: durable before the
# reply), runs `styx bench ycsbt --connect` against it, stops it. With
# STYXD_EXTERNAL=1 it uses a daemon already listening on $STYXD_ADDR.
# ==========================================================================
styx_server_run() {
    if [[ ! -x $STYXD ]]; then
        log "styx server: $STYXD is not built (cargo build --release -p styx-tools): skipped"
        return
    fi
    local pid=""
    if [[ -z ${STYXD_EXTERNAL:-} ]]; then
        rm -rf "$WORK/styxd-data"
        "$STYXD" --data-dir "$WORK/styxd-data" --listen "$STYXD_ADDR" --metrics off --log warn \
            --fsync epoch --preload ycsbt --keys "$ACCOUNTS" >"$WORK/styxd.out" 2>&1 &
        pid=$!
        local host=${STYXD_ADDR%:*} port=${STYXD_ADDR##*:}
        for _ in $(seq 1 500); do
            (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null && break
            sleep 0.02
        done
    fi
    log "styx server at $STYXD_ADDR (fsync=epoch): ${DURATION}s of transfers…"
    local json tps
    # shellcheck disable=SC2086 # STYX_ARGS is a list of flags
    json=$("$STYX" bench ycsbt --connect "$STYXD_ADDR" --keys "$ACCOUNTS" --duration "$DURATION" --warmup 2 \
        --connections "${STYX_CONNECTIONS:-2}" --in-flight "${STYX_SERVER_IN_FLIGHT:-512}" --json --quiet) || true
    if [[ -n $pid ]]; then
        kill "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null || true
    fi
    [[ -n $json ]] || { log "styx server: the run failed (see $WORK/styxd.out)"; return; }
    tps=$(printf '%s\n' "$json" | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["tps"]))')
    record "styx" "server, fsync=epoch" "$tps" "$(printf '%s\n' "$json" | python3 -c 'import json,sys; r=json.load(sys.stdin); r["system"]="styx"; r["setup"]="server"; print(json.dumps(r))')"
}

# --------------------------------------------------------------------------

log "side by side: $ACCOUNTS accounts, $ROUNDS round(s), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$ROUNDS"); do
    log "--- round $round of $ROUNDS"
    styx_inproc_run
    redis_run none
    redis_run fsync-always
    pg_run
    styx_server_run
done

# Medians per system and setup, and ratios to Styx in-process.
python3 - "$WORK/results.tsv" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    system, setup, tps = line.rstrip("\n").split("\t")
    rows.setdefault((system, setup), []).append(float(tps))
med = {k: statistics.median(v) for k, v in rows.items()}
base = med.get(("styx", "in-process"))
print(f"{'system':<12} {'setup':<28} {'runs':>4} {'transfers/s':>12} {'styx in-process / this':>24}")
for (system, setup), m in med.items():
    ratio = f"{base / m:.2f}x" if base else "-"
    print(f"{system:<12} {setup:<28} {len(rows[(system, setup)]):>4} {m:>12.0f} {ratio:>24}")
EOF
log "JSON lines appended to $OUT"
