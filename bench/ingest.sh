#!/usr/bin/env bash
# Telemetry ingest benchmark (issue 3, "Done when"; results in docs/benchmarks.md).
#
# For each sink (embedded SQLite, then ClickHouse) it starts the release server on a
# fresh data dir (and a fresh ClickHouse database), signs up a user, mints an API key,
# then runs `loadgen http` on this same machine:
#   1. flat out: CONNECTIONS connections, BATCH events per request, DURATION seconds;
#   2. open loop at half of the rate reached in 1, for the latency percentiles.
# Around run 1 it samples CPU time of the server, ClickHouse, loadgen and the whole
# machine (/proc/<pid>/stat, /proc/stat), and the server's RSS (peak VmHWM and the
# largest VmRSS seen). In the same run it times a direct bulk insert of the same
# generated rows into ClickHouse through the sink (`loadgen direct`, 10,000-row
# inserts) and prints HTTP events/s ÷ direct rows/s. One summary table at the end.
#
# Deleted files slow ClickHouse down here: this machine's root file system is ext4
# without a journal, and there ext4 skips every inode freed in the last 1-6 minutes
# when it creates a file, looking each one up (kernel `recently_deleted`). A
# ClickHouse insert or merge creates ~15 files per part, so after a DROP DATABASE of
# a few million rows its CPU per event doubles for minutes (perf: 46 % of its
# samples in `recently_deleted` and the lookups it makes). So this script deletes nothing
# until every measurement is done, and waits until 6 minutes after the previous
# run's drop (stamp file below) before measuring; WAIT_FOR_FS=0 skips the wait.
# Anything else that drops ClickHouse data (the test suite) has the same effect.
#
# Usage: bench/ingest.sh [duration-seconds]          (default 20)
# Env:   CONNECTIONS (256), BATCH (50), SINKS ("sqlite clickhouse"),
#        CLICKHOUSE_URL (http://127.0.0.1:8123), PORT (18080),
#        CARGO_TARGET_DIR (target), SKIP_BUILD=1 to reuse existing binaries,
#        WAIT_FOR_FS=0 to start at once.
set -euo pipefail

cd "$(dirname "$0")/.."
source bench/lib.sh
DURATION="${1:-20}"
CONNECTIONS="${CONNECTIONS:-256}"
BATCH="${BATCH:-50}"
SINKS="${SINKS:-sqlite clickhouse}"
CH_URL="${CLICKHOUSE_URL:-http://127.0.0.1:8123}"
PORT="${PORT:-18080}"
BASE="http://127.0.0.1:${PORT}"
TARGET="${CARGO_TARGET_DIR:-target}"
OUT="$(mktemp -d /tmp/bench-ingest.XXXXXX)"

if [ "${SKIP_BUILD:-0}" != 1 ]; then
    cargo build --release -p streamwatch --bin streamwatch -p bench --bin loadgen
fi
SERVER="$TARGET/release/streamwatch"
LOADGEN="$TARGET/release/loadgen"

curl -sf -o /dev/null "$CH_URL/ping" || bash ingest/scripts/start-clickhouse.sh
CH_PID="$(pgrep -o -x clickhouse-serv || pgrep -o clickhouse-server || true)"

json() { python3 -c "import json,sys; d=json.loads(sys.stdin.readlines()[-1]); print(d$1)"; }
# CPU seconds (user+system) of a pid; 0 when it is gone.
cpu_of() { [ -n "$1" ] && [ -r "/proc/$1/stat" ] && awk '{ sub(/.*\) /, ""); print ($12+$13)/100 }' "/proc/$1/stat" || echo 0; }
# Busy CPU seconds of the whole machine (all cores).
cpu_all() { awk '/^cpu / { print ($2+$3+$4+$7+$8)/100 }' /proc/stat; }
ch_sql() { curl -sf "$CH_URL/" --data-binary "$1"; }

SERVER_PID=""
RSS_PID=""
DROP_DBS=""
DROP_STAMP=/tmp/streamwatch-bench-ch-drop
# Drops this run's ClickHouse databases once everything is measured.
drop_databases() {
    [ -z "$DROP_DBS" ] && return 0
    for db in $DROP_DBS; do ch_sql "DROP DATABASE IF EXISTS $db" >/dev/null || true; done
    date +%s >"$DROP_STAMP"
    DROP_DBS=""
}
cleanup() {
    [ -n "$RSS_PID" ] && kill "$RSS_PID" 2>/dev/null || true
    [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null || true
    drop_databases
}
trap cleanup EXIT

if [ "${WAIT_FOR_FS:-1}" = 1 ] && [ -r "$DROP_STAMP" ]; then
    wait_s=$(( $(cat "$DROP_STAMP") + 360 - $(date +%s) ))
    if [ "$wait_s" -gt 0 ]; then
        echo "waiting ${wait_s} s: the previous run dropped ClickHouse data (see the header)"
        sleep "$wait_s"
    fi
fi

start_server() { # $1 = sink
    local dir="$OUT/$1"
    mkdir -p "$dir/data"
    if [ "$1" = clickhouse ]; then
        CH_DB="bench_ingest_$$"
        DROP_DBS="$DROP_DBS $CH_DB"
        env -u DATABASE_URL CLICKHOUSE_URL="$CH_URL" CLICKHOUSE_DATABASE="$CH_DB" \
            STREAMWATCH_LISTEN="127.0.0.1:$PORT" STREAMWATCH_DATA_DIR="$dir/data" \
            STREAMWATCH_AUTH_RATE_LIMIT=off RUST_LOG=warn "$SERVER" serve >"$dir/server.log" 2>&1 &
    else
        env -u DATABASE_URL -u CLICKHOUSE_URL \
            STREAMWATCH_LISTEN="127.0.0.1:$PORT" STREAMWATCH_DATA_DIR="$dir/data" \
            STREAMWATCH_AUTH_RATE_LIMIT=off RUST_LOG=warn "$SERVER" serve >"$dir/server.log" 2>&1 &
    fi
    SERVER_PID=$!
    for _ in $(seq 1 150); do
        curl -s -o /dev/null "$BASE/" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "server did not start; log: $dir/server.log" >&2
    exit 1
}


# Largest VmRSS seen, sampled every 0.2 s into $1 (kB).
watch_rss() {
    local max=0 cur
    while [ -r "/proc/$SERVER_PID/status" ]; do
        cur="$(awk '/VmRSS/ {print $2}' "/proc/$SERVER_PID/status" 2>/dev/null || echo 0)"
        [ "${cur:-0}" -gt "$max" ] && max="$cur" && echo "$max" >"$1"
        sleep 0.2
    done
}

declare -A R
echo "load: $(cut -d' ' -f1-3 /proc/loadavg) before the run; results in $OUT"
for sink in $SINKS; do
    echo "=== sink: $sink ==="
    start_server "$sink"
    KEY="$(new_api_key "$OUT/cookies")"
    echo 0 >"$OUT/$sink/rss"
    watch_rss "$OUT/$sink/rss" & RSS_PID=$!
    s0="$(cpu_of "$SERVER_PID")"; c0="$(cpu_of "$CH_PID")"; a0="$(cpu_all)"
    "$LOADGEN" http --url "$BASE" --key "$KEY" --connections "$CONNECTIONS" --batch "$BATCH" \
        --duration "$DURATION" --json | tee "$OUT/$sink/max.txt"
    s1="$(cpu_of "$SERVER_PID")"; c1="$(cpu_of "$CH_PID")"; a1="$(cpu_all)"
    R[$sink.eps]="$(json "['events_per_s']" <"$OUT/$sink/max.txt")"
    R[$sink.maxp99]="$(json "['p99_ms']" <"$OUT/$sink/max.txt")"
    R[$sink.err]="$(json "['errors']" <"$OUT/$sink/max.txt")"
    secs="$(json "['seconds']" <"$OUT/$sink/max.txt")"
    lg="$(json "['loadgen_cpu_s']" <"$OUT/$sink/max.txt")"
    R[$sink.chus]="$(python3 -c "print('%.2f' % (($c1-$c0)*1e6/max(1,$(json "['events']" <"$OUT/$sink/max.txt"))))")"
    R[$sink.cpu]="$(python3 -c "
s=$secs; srv=($s1-$s0)/s; ch=($c1-$c0)/s; lg=$lg/s; tot=($a1-$a0)/s
print('server %.2f, clickhouse %.2f, loadgen %.2f, other %.2f (cores)' % (srv, ch if '$sink'=='clickhouse' else 0.0, lg, max(0.0, tot-srv-lg-(ch if '$sink'=='clickhouse' else 0.0))))")"
    HALF="$(python3 -c "print(int(${R[$sink.eps]} / 2))")"
    echo "--- half rate: $HALF events/s ---"
    "$LOADGEN" http --url "$BASE" --key "$KEY" --connections "$CONNECTIONS" --batch "$BATCH" \
        --duration "$DURATION" --rate "$HALF" --json | tee "$OUT/$sink/half.txt"
    R[$sink.half]="$HALF"
    R[$sink.halfeps]="$(json "['events_per_s']" <"$OUT/$sink/half.txt")"
    R[$sink.p50]="$(json "['p50_ms']" <"$OUT/$sink/half.txt")"
    R[$sink.p95]="$(json "['p95_ms']" <"$OUT/$sink/half.txt")"
    R[$sink.p99]="$(json "['p99_ms']" <"$OUT/$sink/half.txt")"
    R[$sink.hwm]="$(awk '/VmHWM/ {printf "%.0f", $2/1024}' "/proc/$SERVER_PID/status")"
    kill "$RSS_PID" 2>/dev/null || true; wait "$RSS_PID" 2>/dev/null || true; RSS_PID=""
    R[$sink.rss]="$(awk '{printf "%.0f", $1/1024}' "$OUT/$sink/rss")"
    kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=""
    rm -rf "$OUT/$sink/data" # the SQLite file is ~1 GB; the figures stay in $OUT
done

echo "=== direct bulk insert into ClickHouse through the sink (same generator) ==="
ROWS=1000000
c0="$(cpu_of "$CH_PID")"
DROP_DBS="$DROP_DBS bench_direct_$$"
"$LOADGEN" direct --sink clickhouse --clickhouse-url "$CH_URL" --rows "$ROWS" \
    --batch-rows 10000 --database "bench_direct_$$" --keep --json | tee "$OUT/direct.txt"
DIRECT="$(json "['rows_per_s']" <"$OUT/direct.txt")"
sleep 3 # let the merges the inserts triggered run, they are part of the cost
c1="$(cpu_of "$CH_PID")"
CH_US_PER_ROW="$(python3 -c "print('%.2f' % (($c1 - $c0) * 1e6 / $ROWS))")"
drop_databases

echo
echo "summary: $(date -u +%FT%TZ), $(nproc) cores, loadgen on the same machine, ${CONNECTIONS} connections, batches of ${BATCH}, ${DURATION} s per run; load after: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-11s | %12s | %6s | %14s | %-23s | %8s | %8s | %8s | %13s | %s\n' \
    sink "max events/s" errors "half-rate ev/s" "p50/p95/p99 ms at half" "peak RSS" "max RSS" "p99 @max" "direct CH r/s" "CPU split at max"
for sink in $SINKS; do
    ratio=""
    [ "$sink" = clickhouse ] && ratio="$(python3 -c "print('%.0f (http/direct %.2f)' % ($DIRECT, ${R[$sink.eps]} / $DIRECT))")"
    printf '%-11s | %12.0f | %6s | %14.0f | %-23s | %5s MiB | %4s MiB | %5.1f ms | %13s | %s\n' \
        "$sink" "${R[$sink.eps]}" "${R[$sink.err]}" "${R[$sink.halfeps]}" \
        "$(printf '%.1f / %.1f / %.1f' "${R[$sink.p50]}" "${R[$sink.p95]}" "${R[$sink.p99]}")" \
        "${R[$sink.hwm]}" "${R[$sink.rss]}" "${R[$sink.maxp99]}" "${ratio:--}" "${R[$sink.cpu]}"
done
printf 'direct ClickHouse insert: %.0f rows/s (1M rows, 10,000-row inserts), ClickHouse CPU %s µs/row (merges included)\n' "$DIRECT" "$CH_US_PER_ROW"
case " $SINKS " in *" clickhouse "*)
    printf 'ClickHouse CPU during the flat-out HTTP run: %s µs per acknowledged event\n' "${R[clickhouse.chus]}" ;;
esac
