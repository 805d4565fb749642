#!/usr/bin/env bash
# Telemetry ingest benchmark (DRAFT; the lead finishes it against the real route).
#
# For each sink (embedded SQLite, ClickHouse): starts the release server, signs up a
# user, mints an API key, runs `loadgen http` flat out (batches of 50, 256
# connections), then at half that rate for latency, samples the server's RSS; and, in
# the same run, times a direct bulk insert of the same rows into ClickHouse through
# the sink (`loadgen direct`) and prints the ratio HTTP events/s ÷ direct rows/s.
#
# Usage: bench/ingest.sh [duration-seconds]      (default 20)
# Env:   CONNECTIONS (256), BATCH (50), CLICKHOUSE_URL (http://127.0.0.1:8123)
set -euo pipefail

cd "$(dirname "$0")/.."
DURATION="${1:-20}"
CONNECTIONS="${CONNECTIONS:-256}"
BATCH="${BATCH:-50}"
CLICKHOUSE_URL="${CLICKHOUSE_URL:-http://127.0.0.1:8123}"
PORT="${PORT:-18080}"
BASE="http://127.0.0.1:${PORT}"
TARGET="${CARGO_TARGET_DIR:-target}"

cargo build --release --bin streamwatch -p streamwatch
cargo build --release -p bench --bin loadgen
SERVER="$TARGET/release/streamwatch"
LOADGEN="$TARGET/release/loadgen"

ingest/scripts/start-clickhouse.sh

json_field() { python3 -c "import json,sys; print(json.loads(sys.stdin.read())$1)"; }

SERVER_PID=""
cleanup() { [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null || true; }
trap cleanup EXIT

start_server() { # $1 = sink name
    local data_dir
    data_dir="$(mktemp -d)"
    if [ "$1" = clickhouse ]; then
        export CLICKHOUSE_URL CLICKHOUSE_DATABASE="bench_ingest_$$"
    else
        unset CLICKHOUSE_DATABASE
        local ch_saved="$CLICKHOUSE_URL"; unset CLICKHOUSE_URL
    fi
    STREAMWATCH_LISTEN="127.0.0.1:${PORT}" STREAMWATCH_DATA_DIR="$data_dir" \
        STREAMWATCH_AUTH_RATE_LIMIT=off "$SERVER" serve >"$data_dir/server.log" 2>&1 &
    SERVER_PID=$!
    [ "$1" = clickhouse ] || export CLICKHOUSE_URL="$ch_saved"
    for _ in $(seq 1 100); do
        curl -sf -o /dev/null "$BASE/healthz" 2>/dev/null && return 0
        curl -s -o /dev/null "$BASE/" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "server did not start; log: $data_dir/server.log" >&2
    exit 1
}

mint_key() {
    local jar email
    jar="$(mktemp)"
    email="bench-$$-$RANDOM@example.com"
    curl -sf -c "$jar" -H 'content-type: application/json' \
        -d "{\"name\":\"bench\",\"email\":\"$email\",\"password\":\"bench-password-1\"}" \
        "$BASE/api/auth/sign-up/email" >/dev/null
    curl -sf -b "$jar" -H 'content-type: application/json' -H "origin: $BASE" \
        -d '{"label":"bench"}' "$BASE/api/v1/keys" | json_field "['rawKey']"
}

rss_mib() { awk '/VmHWM/ {printf "%.0f", $2/1024}' "/proc/$SERVER_PID/status"; }

declare -A EPS
for sink in sqlite clickhouse; do
    echo "=== sink: $sink ==="
    start_server "$sink"
    KEY="$(mint_key)"
    "$LOADGEN" http --url "$BASE" --key "$KEY" --connections "$CONNECTIONS" --batch "$BATCH" \
        --duration "$DURATION" --json | tee "/tmp/bench-ingest-$sink-max.txt"
    EPS[$sink]="$(tail -1 "/tmp/bench-ingest-$sink-max.txt" | json_field "['events_per_s']")"
    HALF="$(python3 -c "print(int(${EPS[$sink]} / 2))")"
    echo "--- half rate: $HALF events/s ---"
    "$LOADGEN" http --url "$BASE" --key "$KEY" --connections "$CONNECTIONS" --batch "$BATCH" \
        --duration "$DURATION" --rate "$HALF" --json | tee "/tmp/bench-ingest-$sink-half.txt"
    echo "server peak RSS: $(rss_mib) MiB"
    kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=""
    if [ "$sink" = clickhouse ]; then
        curl -s -X POST "$CLICKHOUSE_URL/" --data "DROP DATABASE IF EXISTS bench_ingest_$$" >/dev/null || true
    fi
done

echo "=== direct bulk insert into ClickHouse through the sink (same generator) ==="
ROWS="$(python3 -c "print(max(100000, int(${EPS[clickhouse]} * $DURATION) // 10000 * 10000))")"
"$LOADGEN" direct --sink clickhouse --clickhouse-url "$CLICKHOUSE_URL" --rows "$ROWS" \
    --batch-rows 10000 --database "bench_direct_$$" --json | tee /tmp/bench-ingest-direct.txt
DIRECT="$(tail -1 /tmp/bench-ingest-direct.txt | json_field "['rows_per_s']")"

echo
echo "summary (2-core box, loadgen on the same machine):"
printf '  http sqlite      %10.0f events/s\n' "${EPS[sqlite]}"
printf '  http clickhouse  %10.0f events/s\n' "${EPS[clickhouse]}"
printf '  direct clickhouse%10.0f rows/s\n' "$DIRECT"
python3 -c "print('  ratio http/direct (clickhouse): %.2f' % (${EPS[clickhouse]} / $DIRECT))"
