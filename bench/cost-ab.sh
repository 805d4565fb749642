#!/usr/bin/env bash
# What an acknowledged event costs the server on the embedded store, two builds side by side at
# the same fixed rate: CPU (user + system) and bytes written to disk (`write_bytes` of
# /proc/<pid>/io: the WAL, the checkpoints' copies, the spool) per 1,000 events, and the peak
# RSS. At a fixed rate both builds do the same work, so the bytes written are steady from run to
# run (±3 % here) where a flat-out rate on this shared machine is not (±15 %); CPU per event sits
# in between. A write-path change shows in the bytes before any rate can resolve it.
#
# Usage: bench/cost-ab.sh OLD_BIN NEW_BIN [rounds (3)]
# Env: SHAPE (`qoe`: `qoe http`'s fleet over 2,048 connections, RATE 15000 events/s; `loadgen`:
# 50-event batches over 256 connections, RATE 100000), RATE, DURATION (20 s), PORT (18091).
# Each server runs with its own defaults (the QoE refresher at its default), SQLite in a fresh
# data dir; the order of the two builds is swapped every round.
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

# Starts server $1 on a fresh SQLite data dir, then an account and an API key (API_KEY).
start() {
    SERVER_DIR="$(mktemp -d /tmp/cost-ab.XXXXXX)"
    env -u DATABASE_URL -u CLICKHOUSE_URL -u STREAMWATCH_QOE_REFRESH \
        STREAMWATCH_LISTEN="127.0.0.1:$PORT" STREAMWATCH_METRICS_LISTEN= \
        STREAMWATCH_DATA_DIR="$SERVER_DIR/data" STREAMWATCH_AUTH_RATE_LIMIT=off RUST_LOG=warn \
        "$1" serve >"$SERVER_DIR/server.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 1 300); do curl -s -o /dev/null "$BASE/" && break; sleep 0.1; done
    API_KEY="$(new_api_key "$SERVER_DIR/jar")"
}

written() { awk '/^write_bytes/ { print $2 }' "/proc/$SERVER_PID/io"; }

# One run of build $2, labelled $1.
run() {
    local side="$1" bin="$2" cpu0 wb0 cpu1 wb1 out hwm
    sync; sleep 3
    start "$bin"
    cpu0="$(cpu_of "$SERVER_PID")"; wb0="$(written)"
    if [ "$SHAPE" = qoe ]; then
        out="$("$QOE" http --url "$BASE" --key "$API_KEY" --connections 2048 \
            --duration "$DURATION" --rate "$RATE" --json | tail -1)"
    else
        out="$("$LOADGEN" http --url "$BASE" --key "$API_KEY" --connections 256 --batch 50 \
            --batches-per-session 20 --duration "$DURATION" --rate "$RATE" --json | tail -1)"
    fi
    cpu1="$(cpu_of "$SERVER_PID")"; wb1="$(written)"
    hwm="$(awk '/^VmHWM/ { print int($2 / 1024) }' "/proc/$SERVER_PID/status")"
    kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""; rm -rf "$SERVER_DIR"
    python3 -c "
import json, sys
d = json.loads(sys.argv[1]); n = d['events']
p99 = ', p99 %.1f ms' % d['p99_ms'] if 'p99_ms' in d else ''
print('%-3s %s %6d events/s: CPU %.1f ms and %.2f MB written per 1,000 events, RSS peak %d MiB%s, errors %d' % (
    '$side', '$SHAPE', d['events_per_s'], ($cpu1 - $cpu0) * 1e6 / n, ($wb1 - $wb0) / 1e3 / n, $hwm, p99, d.get('errors', 0)))" "$out"
}

for r in $(seq 1 "$ROUNDS"); do
    echo "== $(date -u +%H:%M:%S) round $r"
    if [ $((r % 2)) = 1 ]; then run old "$OLD_BIN"; run new "$NEW_BIN"; else run new "$NEW_BIN"; run old "$OLD_BIN"; fi
done
