#!/usr/bin/env bash
# The outage run of scale.md §4 (issue 31; docs/benchmarks.md "Spool on the service path"):
# the release server with the spool on, over a PRIVATE one-server ClickHouse
# (scripts/clickhouse-cluster --single; the shared server is never stopped), `loadgen http`
# open loop at RATE events/s (half the maximum) for DURATION (300) s, 50-event batches over
# 256 connections; ClickHouse is stopped (SIGTERM) OUTAGE_AT (60) s in, for OUTAGE (120) s.
# Prints: batches not answered 204, events acknowledged vs stored (FINAL), the spool's peak,
# and how long the drain took after ClickHouse came back (load still running) against how
# long the spool filled, and the cores the server, ClickHouse and the load generator used
# while it drained.
#
# Usage: bench/spool-outage.sh SERVER RATE
# Env: LOADGEN (target/release/loadgen), PORT (18090), METRICS_PORT (18091).
set -euo pipefail
SERVER="$1"; RATE="$2"
DURATION="${DURATION:-300}"; OUTAGE_AT="${OUTAGE_AT:-60}"; OUTAGE="${OUTAGE:-120}"
LOADGEN="${LOADGEN:-target/release/loadgen}"
METRICS_PORT="${METRICS_PORT:-18091}"
CLUSTER="$(dirname "$0")/../scripts/clickhouse-cluster"
CH_DIR="$(mktemp -d /tmp/spool-outage-ch.XXXXXX)"
SERVER_PID=""
trap '[ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null; "$CLUSTER" down --purge --dir "$CH_DIR" >/dev/null 2>&1 || true' EXIT
eval "$("$CLUSTER" up --single --base-port auto --dir "$CH_DIR" --exit-with $$ 2>/dev/null | grep '^CLICKHOUSE_URL=')"
export CLICKHOUSE_URL
source "$(dirname "$0")/lib.sh"

metric() {
    curl -sf "http://127.0.0.1:$METRICS_PORT/metrics" | awk -v n="$1" '
        { name = $1; sub(/\{.*/, "", name) } name == n { s += $2 } END { print s + 0 }'
}

db="spool_outage_$(date +%s)"
STREAMWATCH_SPOOL=on STREAMWATCH_METRICS_LISTEN="127.0.0.1:$METRICS_PORT" start_server "$SERVER" "$db" 10s
out="$(mktemp)"
"$LOADGEN" http --url "$BASE" --key "$API_KEY" --connections 256 --batch 50 \
    --batches-per-session 20 --rate "$RATE" --duration "$DURATION" --json >"$out" &
LOAD=$!
sleep "$OUTAGE_AT"
"$CLUSTER" stop-node s1r1 --dir "$CH_DIR" >/dev/null 2>&1
stopped="$(date +%s.%N)"
peak=0
while python3 -c "import sys; sys.exit(0 if $(date +%s.%N) - $stopped < $OUTAGE else 1)"; do
    b="$(metric streamwatch_spool_batches)"; [ "${b%.*}" -gt "$peak" ] && peak="${b%.*}"
    sleep 1
done
"$CLUSTER" start-node s1r1 --dir "$CH_DIR" >/dev/null 2>&1
back="$(date +%s.%N)"
# CPU of the server, ClickHouse and the load generator over the catch-up: where the cores go.
CH_NODE="$("$CLUSTER" pid s1r1 --dir "$CH_DIR")"
cpus() { local p; for p in "$SERVER_PID" "$CH_NODE" "$LOAD"; do
    if [ -r "/proc/$p/stat" ]; then printf '%s ' "$(cpu_of "$p")"; else printf 'nan '; fi; done; }
cpu0="$(cpus)"
filled="$(python3 -c "print('%.0f' % ($back - $stopped))")"
# Drained: the spool's oldest batch is younger than 2 s again (the load goes on).
while :; do
    b="$(metric streamwatch_spool_batches)"; [ "${b%.*}" -gt "$peak" ] && peak="${b%.*}"
    age="$(metric streamwatch_spool_oldest_age_seconds)"
    python3 -c "import sys; sys.exit(0 if $age < 2 else 1)" && break
    sleep 0.5
done
drained="$(python3 -c "print('%.1f' % ($(date +%s.%N) - $back))")"
cpu1="$(cpus)"  # nan: the load ended before the drain
wait "$LOAD"
# Everything acknowledged reaches ClickHouse: wait for an empty spool, then count.
while [ "$(metric streamwatch_spool_batches)" != 0 ]; do sleep 0.5; done
sleep 1.5
while [ "$(metric streamwatch_spool_batches)" != 0 ]; do sleep 0.5; done
stored="$(curl -sf "$CLICKHOUSE_URL/" --data-binary "SELECT count() FROM $db.telemetry_events FINAL")"
stop_server
python3 -c "
import json; d = json.loads(open('$out').read().strip().splitlines()[-1])
acked = d['events']; stored = $stored
print('outage run: %d s at %s events/s, ClickHouse stopped %s s from %s s' % ($DURATION, '$RATE', '$filled', '$OUTAGE_AT'))
print('  batches not 204: %d; events acknowledged %d, stored %d, lost %d' % (d['errors'], acked, stored, max(0, acked - stored)))
print('  latency p50 %.1f ms, p99 %.1f ms, max %.1f ms' % (d['p50_ms'], d['p99_ms'], d['max_ms']))
print('  spool peak %d batches; filled for %s s, drained in %s s after ClickHouse returned (%.1fx faster)' % ($peak, '$filled', '$drained', float('$filled') / max(float('$drained'), 0.1)))
a = [float(x) for x in '$cpu0'.split()]; b = [float(x) for x in '$cpu1'.split()]; t = max(float('$drained'), 0.1)
print('  cores used while draining: server %.2f, ClickHouse %.2f, load generator %.2f' % tuple((y - x) / t for x, y in zip(a, b)))"
rm -f "$out"
