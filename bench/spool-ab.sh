#!/usr/bin/env bash
# The spool on vs off (scale.md §4, issue 31; docs/benchmarks.md "Spool on the service path"),
# each comparison in one run, alternating the sides: the release server on a fresh ClickHouse
# database (refresher off), then
#   - `loadgen http`: 50-event batches over 256 connections (issue 3's shape), and
#   - `qoe http`: the realistic fleet (about 5 events per batch, SDK context, real
#     User-Agents) over QOE_CONNECTIONS (2048) connections (a fleet's shape),
# each DURATION (20) s. With the spool on, the run waits for the spool to drain after the
# load and reports how long that took. Prints per run: events/s acknowledged, ClickHouse and
# server CPU per event (the drain included), the writer's ClickHouse writes per second of
# load and rows per write (each write is one insert of events and one of batch records).
#
# After each shape's rounds, the same load against `null_server` (bench/src/bin: HTTP and
# JSON, nothing stored): the harness's no-storage ceiling on the same cores.
#
# Usage: bench/spool-ab.sh SERVER [rounds (1)]
# Env: LOADGEN (target/release/loadgen), QOE (target/release/qoe), NULL_SERVER
# (target/release/null_server), CLICKHOUSE_URL, PORT (18090), METRICS_PORT (18091),
# NULL_PORT (18099), SHAPES ("loadgen qoe").
set -euo pipefail
SERVER="$1"; ROUNDS="${2:-1}"
LOADGEN="${LOADGEN:-target/release/loadgen}"
QOE="${QOE:-target/release/qoe}"
NULL_SERVER="${NULL_SERVER:-target/release/null_server}"
NULL_PORT="${NULL_PORT:-18099}"
METRICS_PORT="${METRICS_PORT:-18091}"
DURATION="${DURATION:-20}"
source "$(dirname "$0")/lib.sh"

# Sum of the samples of metric $1 whose labels contain $2 (empty: all).
metric() {
    curl -sf "http://127.0.0.1:$METRICS_PORT/metrics" | awk -v n="$1" -v l="${2:-}" '
        { name = $1; sub(/\{.*/, "", name) }
        name == n && index($1, l) { s += $2 } END { print s + 0 }'
}

# The load of shape $1 against the server at $2 with key $3; prints the client's JSON.
client() {
    if [ "$1" = qoe ]; then
        "$QOE" http --url "$2" --key "$3" --connections "${QOE_CONNECTIONS:-2048}" \
            --duration "$DURATION" --json | tail -1
    else
        "$LOADGEN" http --url "$2" --key "$3" --connections 256 \
            --batch 50 --batches-per-session 20 --duration "$DURATION" --json | tail -1
    fi
}

# The same load against bench's null_server (HTTP and JSON, nothing stored): the harness's
# ceiling on these cores.
ceiling() {
    local shape="$1" log out pid
    log="$(mktemp)"
    "$NULL_SERVER" --listen "127.0.0.1:$NULL_PORT" >"$log" 2>&1 &
    pid=$!
    until grep -q listening "$log"; do sleep 0.1; done
    out="$(client "$shape" "http://127.0.0.1:$NULL_PORT" null-key)"
    kill "$pid"; wait "$pid" 2>/dev/null || true; rm -f "$log"
    python3 -c "
import json; d = json.loads('''$out''')
print('$shape ceiling (null_server, nothing stored): %d events/s, %d errors' % (d['events_per_s'], d['errors']))"
}

run() {
    local label="$1" shape="$2" spool="$3" db="spool_ab_$(date +%s)_$RANDOM"
    STREAMWATCH_SPOOL="$spool" STREAMWATCH_METRICS_LISTEN="127.0.0.1:$METRICS_PORT" \
        start_server "$SERVER" "$db" 3600s
    local s0 c0 s1 c1 out t0 drain
    s0="$(cpu_of "$SERVER_PID")"; c0="$(cpu_of "$CH_PID")"
    out="$(client "$shape" "$BASE" "$API_KEY")"
    t0="$(date +%s.%N)"
    [ "$spool" = on ] && wait_spool_drained "$METRICS_PORT"
    drain="$(python3 -c "print('%.1f' % (max(0.0, $(date +%s.%N) - $t0 - 1.0)))")"
    s1="$(cpu_of "$SERVER_PID")"; c1="$(cpu_of "$CH_PID")"
    local writes rows
    writes="$(metric streamwatch_writer_inserts_total 'result="ok"')"
    rows="$(metric streamwatch_writer_insert_rows_sum)"
    stop_server
    python3 -c "
import json; d = json.loads('''$out'''); n = d['events_per_s'] * $DURATION
w = $writes; r = $rows
print('$label spool $spool: %d events/s, ClickHouse %.2f us/event, server %.2f us/event, %.1f ClickHouse writes/s, %.0f rows/write, drained %s s after the load' % (d['events_per_s'], ($c1 - $c0) / n * 1e6, ($s1 - $s0) / n * 1e6, w / $DURATION, r / max(w, 1), '$drain' if '$spool' == 'on' else '-'))"
    detach_database "$db"
}

for shape in ${SHAPES:-loadgen qoe}; do
    for r in $(seq 1 "$ROUNDS"); do
        if [ $((r % 2)) = 1 ]; then sides=(off on); else sides=(on off); fi
        for side in "${sides[@]}"; do
            sleep 10
            run "$shape round $r:" "$shape" "$side"
        done
    done
    sleep 10
    ceiling "$shape"
done
