#!/usr/bin/env bash
# What an acknowledged event costs, two builds side by side at the same fixed rate: CPU (user +
# system) and bytes written to disk (`write_bytes` of /proc/<pid>/io: the WAL, the checkpoints'
# copies, the spool) per 1,000 events, and the peak RSS. At a fixed rate both builds do the same
# work, so the bytes written are steady from run to run (±3 % here) where a flat-out rate on this
# shared machine is not (±15 %); CPU per event sits in between. A write-path change shows in the
# bytes before any rate can resolve it.
#
# ENGINE=clickhouse runs each server on a fresh database at CLICKHOUSE_URL with its spool (the
# default there), waits after the load until the spool drained, and adds the ClickHouse server's
# own CPU and bytes written over the same span (the drain's inserts, the refresher's reads, the
# merges): on two shared cores, what ClickHouse spends per event is taken from ingest.
#
# Usage: bench/cost-ab.sh OLD_BIN NEW_BIN [rounds (3)]
# Env: SHAPE (`qoe`: `qoe http`'s fleet over 2,048 connections, RATE 15000 events/s; `loadgen`:
# 50-event batches over 256 connections, RATE 100000), RATE, DURATION (20 s), PORT (18091),
# ENGINE (`sqlite`, the embedded store in a fresh data dir; or `clickhouse`), REFRESH (unset: the
# QoE refresher at each build's default; e.g. `3600s`: off for the run), METRICS_PORT (9464, the
# servers' metrics listener, read for the spool's gauge), CLICKHOUSE_URL.
# The order of the two builds is swapped every round.
set -euo pipefail
OLD_BIN="$1"; NEW_BIN="$2"; ROUNDS="${3:-3}"
SHAPE="${SHAPE:-qoe}"; DURATION="${DURATION:-20}"
if [ "$SHAPE" = qoe ]; then RATE="${RATE:-15000}"; else RATE="${RATE:-100000}"; fi
ROOT="$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
cd "$ROOT"
source bench/lib.sh
cargo build --release --quiet -p bench --bin loadgen --bin qoe
LOADGEN="$ROOT/target/release/loadgen"; QOE="$ROOT/target/release/qoe"
PORT="${PORT:-18091}"; BASE="http://127.0.0.1:$PORT"
SERVER_PID=""
trap '[ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null; true' EXIT

ENGINE="${ENGINE:-sqlite}"; METRICS_PORT="${METRICS_PORT:-9464}"
DB=""

# Starts server $1 on a fresh store (a SQLite data dir, or a ClickHouse database DB), then an
# account and an API key (API_KEY).
start() {
    SERVER_DIR="$(mktemp -d /tmp/cost-ab.XXXXXX)"
    local store=(-u CLICKHOUSE_URL STREAMWATCH_METRICS_LISTEN=)
    if [ "$ENGINE" = clickhouse ]; then
        DB="cost_ab_$(date +%s)_$RANDOM"
        store=(CLICKHOUSE_URL="$CH_URL" CLICKHOUSE_DATABASE="$DB")
    fi
    env -u DATABASE_URL -u STREAMWATCH_QOE_REFRESH "${store[@]}" \
        ${REFRESH:+STREAMWATCH_QOE_REFRESH="$REFRESH"} \
        STREAMWATCH_LISTEN="127.0.0.1:$PORT" \
        STREAMWATCH_DATA_DIR="$SERVER_DIR/data" STREAMWATCH_AUTH_RATE_LIMIT=off RUST_LOG=warn \
        "$1" serve >"$SERVER_DIR/server.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 1 300); do curl -s -o /dev/null "$BASE/" && break; sleep 0.1; done
    API_KEY="$(new_api_key "$SERVER_DIR/jar")"
}

written() { awk '/^write_bytes/ { print $2 }' "/proc/$1/io"; }

# ClickHouse's CPU seconds and bytes written so far (0 0 on the embedded store).
ch_usage() {
    if [ "$ENGINE" = clickhouse ]; then echo "$(cpu_of "$CH_PID") $(written "$CH_PID")"; else echo "0 0"; fi
}

# One run of build $2, labelled $1.
run() {
    local side="$1" bin="$2" cpu0 wb0 cpu1 wb1 ch0 ch1 out hwm
    sync; sleep 3
    start "$bin"
    cpu0="$(cpu_of "$SERVER_PID")"; wb0="$(written "$SERVER_PID")"; ch0="$(ch_usage)"
    if [ "$SHAPE" = qoe ]; then
        out="$("$QOE" http --url "$BASE" --key "$API_KEY" --connections 2048 \
            --duration "$DURATION" --rate "$RATE" --json | tail -1)"
    else
        out="$("$LOADGEN" http --url "$BASE" --key "$API_KEY" --connections 256 --batch 50 \
            --batches-per-session 20 --duration "$DURATION" --rate "$RATE" --json | tail -1)"
    fi
    # On ClickHouse, what the spool still holds is part of this load's cost.
    if [ "$ENGINE" = clickhouse ]; then wait_spool_drained "$METRICS_PORT"; fi
    cpu1="$(cpu_of "$SERVER_PID")"; wb1="$(written "$SERVER_PID")"; ch1="$(ch_usage)"
    hwm="$(awk '/^VmHWM/ { print int($2 / 1024) }' "/proc/$SERVER_PID/status")"
    kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""; rm -rf "$SERVER_DIR"
    if [ -n "$DB" ]; then detach_database "$DB"; fi
    python3 -c "
import json, sys
d = json.loads(sys.argv[1]); n = d['events']
(c0, w0), (c1, w1) = (map(float, a.split()) for a in sys.argv[2:4])
p99 = ', p99 %.1f ms' % d['p99_ms'] if 'p99_ms' in d else ''
ch = ', ClickHouse CPU %.1f ms and %.2f MB written' % ((c1 - c0) * 1e6 / n, (w1 - w0) / 1e3 / n) if '$ENGINE' == 'clickhouse' else ''
print('%-3s %s %6d events/s: CPU %.1f ms and %.2f MB written per 1,000 events%s, RSS peak %d MiB%s, errors %d' % (
    '$side', '$SHAPE', d['events_per_s'], ($cpu1 - $cpu0) * 1e6 / n, ($wb1 - $wb0) / 1e3 / n, ch, $hwm, p99, d.get('errors', 0)))" "$out" "$ch0" "$ch1"
}

for r in $(seq 1 "$ROUNDS"); do
    echo "== $(date -u +%H:%M:%S) round $r"
    if [ $((r % 2)) = 1 ]; then run old "$OLD_BIN"; run new "$NEW_BIN"; else run new "$NEW_BIN"; run old "$OLD_BIN"; fi
done
