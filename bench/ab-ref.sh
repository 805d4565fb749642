#!/usr/bin/env bash
# Today's build against a baseline git ref, side by side: the check to run before merging a
# change to the ingest path (docs/benchmarks.md, "Before merging a change to the ingest path").
#
# Usage: bench/ab-ref.sh [REF (b4da657)] [rounds (3)]
# Builds REF's server (release) in a temporary `git worktree` with its own CARGO_TARGET_DIR,
# and today's server, loadgen and qoe (release, this checkout's target/). Then, each round,
# for each engine (ENGINES: `sqlite`, the embedded store, no CLICKHOUSE_URL; `clickhouse`, a
# fresh database at CLICKHOUSE_URL) and each shape (SHAPES: `loadgen`, `loadgen http` with
# 50-event batches over 256 connections; `qoe`, `qoe http`'s realistic fleet, about 5 events
# per batch, over QOE_CONNECTIONS (2048) connections), runs both servers one after the other,
# the order swapped every round, with their defaults (the refresher at its default where the
# build has one: the baseline may predate QoE). The load generator is today's for both sides.
# Prints per run: events/s, the server's peak RSS (VmHWM), p99 (loadgen only; `qoe http`
# prints none), errors; and per round, engine and shape: today / baseline events/s.
# The baseline's worktree and target dir (2-3 GB) are removed on exit, whatever happens.
# ClickHouse databases are detached, not dropped, after each run (bench/lib.sh says why).
# Env: BASE_BIN (a baseline server binary built before: REF is then only its label, nothing is
# built for it), HALF_RATE (set: after each `loadgen` run, the same server again at half the rate
# it reached, and that run's p99; on ClickHouse once the spool drained the full-rate run's
# backlog; RSS peak stays the full-rate run's), DURATION (20 s per run), ENGINES ("sqlite clickhouse"), SHAPES ("loadgen qoe"),
# QOE_CONNECTIONS (2048), METRICS_PORT (9464, the servers' metrics listener), CLICKHOUSE_URL (http://127.0.0.1:8123), PORT (18090),
# BASE_TMP (a temp dir under /tmp; must have ~3 GB free).
set -euo pipefail
REF="${1:-b4da657}"; ROUNDS="${2:-3}"
DURATION="${DURATION:-20}"
ENGINES="${ENGINES:-sqlite clickhouse}"; SHAPES="${SHAPES:-loadgen qoe}"
ROOT="$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
cd "$ROOT"
source bench/lib.sh

WORK="${BASE_TMP:-$(mktemp -d /tmp/ab-ref.XXXXXX)}"
SERVER_PID=""
cleanup() {
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then stop_server; fi
    git worktree remove --force "$WORK/src" 2>/dev/null || true
    rm -rf "$WORK"
    git worktree prune
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -n "${BASE_BIN:-}" ]; then
    # A baseline built before (e.g. the previous commit's release binary, copied aside).
    OLD="$BASE_BIN"
    echo "== baseline: $OLD (given as $REF)"
else
    echo "== $(date -u +%H:%M:%S) building $REF ($(git rev-parse --short "$REF")) in $WORK"
    git worktree add --detach "$WORK/src" "$REF" >/dev/null
    (cd "$WORK/src" && CARGO_TARGET_DIR="$WORK/target" cargo build --release --quiet -p streamwatch --bin streamwatch)
    OLD="$WORK/target/release/streamwatch"
fi
echo "== $(date -u +%H:%M:%S) building today's $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo '+changes')"
cargo build --release --quiet -p streamwatch --bin streamwatch -p bench --bin loadgen --bin qoe
NEW="$ROOT/target/release/streamwatch"
LOADGEN="$ROOT/target/release/loadgen"; QOE="$ROOT/target/release/qoe"
df -h "$WORK" | tail -1

# Starts server $1 on engine $2 (sqlite or clickhouse), its own defaults otherwise, then an
# account and an API key (as lib.sh's start_server, which always uses ClickHouse).
start() {
    local bin="$1" engine="$2"
    PORT="${PORT:-18090}"; BASE="http://127.0.0.1:$PORT"
    SERVER_DIR="$(mktemp -d "$WORK/server.XXXXXX")"
    DB=""
    local ch=()
    if [ "$engine" = clickhouse ]; then
        DB="abref_$(date +%s)_$RANDOM"
        ch=(CLICKHOUSE_URL="$CH_URL" CLICKHOUSE_DATABASE="$DB")
    fi
    env -u DATABASE_URL -u CLICKHOUSE_URL -u STREAMWATCH_QOE_REFRESH "${ch[@]}" \
        STREAMWATCH_LISTEN="127.0.0.1:$PORT" STREAMWATCH_DATA_DIR="$SERVER_DIR/data" \
        STREAMWATCH_AUTH_RATE_LIMIT=off RUST_LOG=warn \
        "$bin" serve >"$SERVER_DIR/server.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 1 300); do curl -s -o /dev/null "$BASE/" && break; sleep 0.1; done
    API_KEY="$(new_api_key "$SERVER_DIR/jar")"
}

# One run: side $1 (old/new), binary $2, engine $3, shape $4. Prints a line; sets EPS.
run() {
    local side="$1" bin="$2" engine="$3" shape="$4" out hwm
    start "$bin" "$engine"
    if [ "$shape" = qoe ]; then
        out="$("$QOE" http --url "$BASE" --key "$API_KEY" --connections "${QOE_CONNECTIONS:-2048}" \
            --duration "$DURATION" --json | tail -1)"
    else
        out="$("$LOADGEN" http --url "$BASE" --key "$API_KEY" --connections 256 --batch 50 \
            --batches-per-session 20 --duration "$DURATION" --json | tail -1)"
    fi
    hwm="$(awk '/^VmHWM/ { print int($2 / 1024) }' "/proc/$SERVER_PID/status")"
    local half=""
    if [ "$shape" = loadgen ] && [ -n "${HALF_RATE:-}" ]; then
        # The same server, at half the rate it just reached (open loop, latency from each
        # batch's scheduled send): the p99 a fleet sees when the box is not saturated.
        local rate drain=""
        if [ "$engine" = clickhouse ]; then
            # The spool (on by default) acknowledges a full-rate run faster than ClickHouse
            # takes it in (a backlog of ~50,000 batches after 20 s), and drains it afterwards
            # while the half-rate run goes on: that run's p99 was the catch-up's, not the
            # steady state's (docs/benchmarks.md, "ClickHouse's p99 at half rate: the
            # spool's catch-up"). A build without a spool has nothing to wait for.
            local waited=$SECONDS
            wait_spool_drained "${METRICS_PORT:-9464}"
            drain=" after the spool drained ($((SECONDS - waited)) s)"
        fi
        rate="$(python3 -c "import json, sys; print(int(json.loads(sys.argv[1])['events_per_s'] / 2))" "$out")"
        half="$("$LOADGEN" http --url "$BASE" --key "$API_KEY" --connections 256 --batch 50 \
            --batches-per-session 20 --duration "$DURATION" --rate "$rate" --json | tail -1 |
            python3 -c "import json, sys; d = json.load(sys.stdin); print(', at half (%d events/s) p99 %.1f ms, errors %d%s' % (d['events_per_s'], d['p99_ms'], d.get('errors', 0), sys.argv[1]))" "$drain")"
    fi
    stop_server
    SERVER_PID=""
    [ -n "$DB" ] && detach_database "$DB"
    EPS="$(python3 -c "import json, sys; print(int(json.loads(sys.argv[1])['events_per_s']))" "$out")"
    python3 -c "
import json, sys; d = json.loads(sys.argv[1])
p99 = ', p99 %.1f ms' % d['p99_ms'] if 'p99_ms' in d else ''
print('%-3s %-10s %-7s %8d events/s, RSS peak %4d MiB%s, errors %d%s (load %s)' % (
    '$side', '$engine', '$shape', d['events_per_s'], $hwm, p99, d.get('errors', 0), sys.argv[3], sys.argv[2]))" \
        "$out" "$(cut -d' ' -f1 /proc/loadavg)" "$half"
}

for r in $(seq 1 "$ROUNDS"); do
    echo "== $(date -u +%H:%M:%S) round $r"
    if [ $((r % 2)) = 1 ]; then sides=(old new); else sides=(new old); fi
    for engine in $ENGINES; do
        for shape in $SHAPES; do
            declare -A eps=()
            for side in "${sides[@]}"; do
                # The previous run's writes reach the disk now, not during this run (a run leaves
                # a few hundred MB of dirty pages, which the kernel writes back 30 s later).
                sync
                sleep 5 # the previous run's merges and exits settle
                if [ "$side" = old ]; then run old "$OLD" "$engine" "$shape"; else run new "$NEW" "$engine" "$shape"; fi
                eps[$side]="$EPS"
            done
            python3 -c "print('round $r $engine $shape: today / $REF = %.1f %%' % (100 * ${eps[new]} / max(${eps[old]}, 1)))"
            unset eps
        done
    done
done
