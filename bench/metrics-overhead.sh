#!/usr/bin/env bash
# Cost of the metrics on telemetry ingest (issue 10: within 5 % of the rate without them).
#
# For each sink, ROUNDS times, alternating: the release server with metrics (a Prometheus
# recorder, /metrics scraped every 5 s as Prometheus would) and without (STREAMWATCH_METRICS_LISTEN
# empty: no recorder, every metric call a no-op), each on a fresh data dir / ClickHouse
# database, then `loadgen http` flat out (CONNECTIONS connections, BATCH events per request,
# DURATION seconds). Alternating in one run keeps both sides under the same machine noise.
# Prints every run and the ratio of the medians.
#
# Usage: bench/metrics-overhead.sh [duration-seconds]     (default 15)
# Env:   ROUNDS (3), SINKS ("sqlite clickhouse"), CONNECTIONS (256), BATCH (50),
#        CLICKHOUSE_URL, PORT (18080), CARGO_TARGET_DIR, SKIP_BUILD=1.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION="${1:-15}"
ROUNDS="${ROUNDS:-3}"
SINKS="${SINKS:-sqlite clickhouse}"
CONNECTIONS="${CONNECTIONS:-256}"
BATCH="${BATCH:-50}"
CH_URL="${CLICKHOUSE_URL:-http://127.0.0.1:8123}"
PORT="${PORT:-18080}"
MPORT=$((PORT + 1))
BASE="http://127.0.0.1:${PORT}"
TARGET="${CARGO_TARGET_DIR:-target}"
OUT="$(mktemp -d /tmp/bench-metrics.XXXXXX)"
[ "${SKIP_BUILD:-0}" = 1 ] || cargo build --release -p streamwatch --bin streamwatch -p bench --bin loadgen
SERVER="$TARGET/release/streamwatch"
LOADGEN="$TARGET/release/loadgen"

SERVER_PID="" SCRAPER_PID="" DBS=""
cleanup() {
    [ -n "$SCRAPER_PID" ] && kill "$SCRAPER_PID" 2>/dev/null || true
    [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null || true
    for db in $DBS; do curl -sf "$CH_URL/" --data-binary "DROP DATABASE IF EXISTS $db" >/dev/null || true; done
}
trap cleanup EXIT

run() { # $1 sink, $2 on|off, $3 round → prints events/s
    local dir="$OUT/$1-$2-$3" metrics=""
    mkdir -p "$dir/data"
    [ "$2" = on ] && metrics="127.0.0.1:$MPORT"
    local env=(env -u DATABASE_URL -u CLICKHOUSE_URL STREAMWATCH_LISTEN="127.0.0.1:$PORT"
        STREAMWATCH_METRICS_LISTEN="$metrics" STREAMWATCH_DATA_DIR="$dir/data"
        STREAMWATCH_AUTH_RATE_LIMIT=off RUST_LOG=warn)
    if [ "$1" = clickhouse ]; then
        local db="bench_metrics_$$_$2_$3"
        DBS="$DBS $db"
        env+=(CLICKHOUSE_URL="$CH_URL" CLICKHOUSE_DATABASE="$db")
    fi
    "${env[@]}" "$SERVER" serve >"$dir/server.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 1 300); do curl -sf -o /dev/null "$BASE/readyz" && break; sleep 0.1; done
    local jar="$dir/jar" key
    curl -sf -c "$jar" -H 'content-type: application/json' \
        -d "{\"name\":\"bench\",\"email\":\"b-$RANDOM@example.com\",\"password\":\"bench-password-1\"}" \
        "$BASE/api/auth/sign-up/email" >/dev/null
    key="$(curl -sf -b "$jar" -H 'content-type: application/json' -d '{"label":"bench"}' \
        "$BASE/api/v1/keys" | python3 -c "import json,sys; print(json.load(sys.stdin)['rawKey'])")"
    if [ "$2" = on ]; then
        ( while :; do curl -sf -o /dev/null "http://$metrics/metrics" || true; sleep 5; done ) &
        SCRAPER_PID=$!
    fi
    "$LOADGEN" http --url "$BASE" --key "$key" --connections "$CONNECTIONS" --batch "$BATCH" \
        --duration "$DURATION" --json >"$dir/max.txt"
    [ -n "$SCRAPER_PID" ] && { kill "$SCRAPER_PID"; wait "$SCRAPER_PID" 2>/dev/null || true; SCRAPER_PID=""; }
    kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=""
    rm -rf "$dir/data"
    python3 -c "import json; print(round(json.loads(open('$dir/max.txt').read().splitlines()[-1])['events_per_s']))"
}

echo "$(date -u +%FT%TZ), $(nproc) cores, ${CONNECTIONS} connections, batches of ${BATCH}, ${DURATION} s per run"
for sink in $SINKS; do
    on=() off=()
    for r in $(seq 1 "$ROUNDS"); do
        on+=("$(run "$sink" on "$r")"); off+=("$(run "$sink" off "$r")")
        echo "$sink round $r: metrics on ${on[-1]} ev/s, off ${off[-1]} ev/s"
    done
    python3 - "$sink" "${on[*]}" "${off[*]}" <<'PY'
import statistics, sys
sink, on, off = sys.argv[1], [float(x) for x in sys.argv[2].split()], [float(x) for x in sys.argv[3].split()]
mon, moff = statistics.median(on), statistics.median(off)
print(f"{sink}: median with metrics {mon:,.0f} ev/s, without {moff:,.0f} ev/s: {100 * (mon / moff - 1):+.1f} %")
PY
done
