#!/usr/bin/env bash
# Cluster vs one server in one run (scale.md §4; docs/benchmarks.md, "Cluster vs one
# server"). Starts two private ClickHouse setups with scripts/clickhouse-cluster: one server
# (--single) and the default 2 shards x 2 replicas with ZooKeeper. Each round runs the
# release server on each side in turn (sides alternating first), the realistic fleet through
# `POST /api/v1/telemetry` (`qoe http`, CONNECTIONS connections, DURATION seconds), the QoE
# refresher every 10 s, and prints events/s and the CPU per event of streamwatch, of the
# side's ClickHouse processes together, and (cluster) of ZooKeeper. Everything it started
# goes away at its exit.
#
# Usage: bench/cluster.sh [duration-seconds (30)] [rounds (2)]
# Env:   CONNECTIONS (1024), QOE (target/release/qoe), SERVER (target/release/streamwatch),
#        SPOOL (on, the service's default: acknowledged from the spool, and the readings are
#        taken once the spool has drained, so both sides' CPU is counted for what they
#        stored; off: 204 = in ClickHouse, every request's rows in the writer's next insert),
#        SKIP_BUILD=1 to reuse existing binaries.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
DURATION="${1:-30}"; ROUNDS="${2:-2}"
QOE="${QOE:-target/release/qoe}"; SERVER="${SERVER:-target/release/streamwatch}"
PORT="${PORT:-18091}"; BASE="http://127.0.0.1:$PORT"; METRICS_PORT="${METRICS_PORT:-18092}"
SPOOL="${SPOOL:-on}"

if [ "${SKIP_BUILD:-0}" != 1 ]; then
    cargo build --release -p streamwatch --bin streamwatch -p bench --bin qoe
fi
WORK="$(mktemp -d /tmp/bench-cluster.XXXXXX)"
cleanup() {
    [ -n "${SERVER_PID:-}" ] && kill "$SERVER_PID" 2>/dev/null || true
    for side in one cluster; do
        scripts/clickhouse-cluster down --purge --dir "$WORK/$side" >/dev/null 2>&1 || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT
scripts/clickhouse-cluster up --single --base-port auto --dir "$WORK/one" --exit-with $$ >"$WORK/one.env"
scripts/clickhouse-cluster up --base-port auto --dir "$WORK/cluster" --exit-with $$ >"$WORK/cluster.env"

# CPU seconds of every ClickHouse node of side $1, and of its ZooKeeper (0 without).
ch_cpu() { local t=0 f; for f in "$WORK/$1"/s*r*/pid; do t="$(awk -v a="$t" -v b="$(cpu_of "$(cat "$f")")" 'BEGIN { print a + b }')"; done; echo "$t"; }
zk_cpu() { if [ -s "$WORK/$1/zookeeper/pid" ]; then cpu_of "$(cat "$WORK/$1/zookeeper/pid")"; else echo 0; fi; }

run() {
    local side="$1" round="$2" url cluster db="bench_$(date +%s)"
    url="$(sed -n 's/^CLICKHOUSE_URL=//p' "$WORK/$side.env")"
    cluster="$(sed -n 's/^CLICKHOUSE_CLUSTER=//p' "$WORK/$side.env")"
    SERVER_DIR="$(mktemp -d /tmp/bench-server.XXXXXX)"
    env -u DATABASE_URL CLICKHOUSE_URL="$url" CLICKHOUSE_CLUSTER="$cluster" CLICKHOUSE_DATABASE="$db" \
        STREAMWATCH_SPOOL="$SPOOL" STREAMWATCH_QOE_REFRESH=10s STREAMWATCH_LISTEN="127.0.0.1:$PORT" \
        STREAMWATCH_METRICS_LISTEN="127.0.0.1:$METRICS_PORT" \
        STREAMWATCH_DATA_DIR="$SERVER_DIR/data" STREAMWATCH_AUTH_RATE_LIMIT=off RUST_LOG=warn \
        "$SERVER" serve >"$SERVER_DIR/server.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 1 600); do curl -sf -o /dev/null "$BASE/readyz" && break; sleep 0.2; done
    API_KEY="$(new_api_key "$SERVER_DIR/jar")"
    local s0 c0 z0 s1 c1 z1 out
    s0="$(cpu_of "$SERVER_PID")"; c0="$(ch_cpu "$side")"; z0="$(zk_cpu "$side")"
    out="$("$QOE" http --url "$BASE" --key "$API_KEY" --connections "${CONNECTIONS:-1024}" \
        --duration "$DURATION" --json | tail -1)"
    [ "$SPOOL" = on ] && wait_spool_drained "$METRICS_PORT"
    s1="$(cpu_of "$SERVER_PID")"; c1="$(ch_cpu "$side")"; z1="$(zk_cpu "$side")"
    kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=""
    rm -rf "$SERVER_DIR"
    python3 -c "
import json; d = json.loads('''$out'''); n = d['events_per_s'] * $DURATION
print('spool $SPOOL, round $round %-7s %7d events/s  streamwatch %6.2f us/event  ClickHouse %6.2f us/event  ZooKeeper %5.2f us/event' % (
    '$side', d['events_per_s'], ($s1 - $s0) / n * 1e6, ($c1 - $c0) / n * 1e6, ($z1 - $z0) / n * 1e6))"
}

for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) = 1 ]; then sides=(one cluster); else sides=(cluster one); fi
    for side in "${sides[@]}"; do
        sleep 10 # the previous run's merges settle
        run "$side" "$r"
    done
done
