#!/usr/bin/env bash
# A/B of the ClickHouse ingest path between two server builds (docs/benchmarks.md).
#
# Usage: bench/ingest-ab.sh OLD_SERVER NEW_SERVER [rounds (3)]
# Alternates OLD and NEW (swapping their order every round), each run: the release server on a fresh ClickHouse database with
# the refresher off (STREAMWATCH_QOE_REFRESH=3600s; OLD_REFRESH / NEW_REFRESH set another
# interval per side, e.g. the same binary twice with NEW_REFRESH=10s for the refresher's
# cost), a user and an API key, then
# `loadgen http` (CONNECTIONS=256 connections, BATCH=50-event batches, BATCHES_PER_SESSION=20,
# DURATION=20 s), or with QOE=target/release/qoe `qoe http`: the realistic fleet (SDK 0.2.0
# batches with context, the real User-Agent mix, about 5 events per batch and 11 per view)
# over CONNECTIONS (default 1024 then) connections.
# Prints events/s and the ClickHouse and server CPU per event. Each database is detached,
# not dropped, after its round (`detach_database` in bench/lib.sh says why, and how to drop
# them once done).
# Env: LOADGEN (target/release/loadgen), QOE (unset), CLICKHOUSE_URL (http://127.0.0.1:8123), PORT (18090).
set -euo pipefail
OLD="$1"; NEW="$2"; ROUNDS="${3:-3}"
LOADGEN="${LOADGEN:-target/release/loadgen}"
source "$(dirname "$0")/lib.sh"

run() {
    local label="$1" db="ab_$(date +%s)_$RANDOM"
    start_server "$2" "$db" "$3"
    local s0 c0 s1 c1 out
    s0="$(cpu_of "$SERVER_PID")"; c0="$(cpu_of "$CH_PID")"
    if [ -n "${QOE:-}" ]; then
        out="$("$QOE" http --url "$BASE" --key "$API_KEY" --connections "${CONNECTIONS:-1024}" \
            --duration "${DURATION:-20}" --json | tail -1)"
    else
        out="$("$LOADGEN" http --url "$BASE" --key "$API_KEY" --connections "${CONNECTIONS:-256}" \
            --batch "${BATCH:-50}" --batches-per-session "${BATCHES_PER_SESSION:-20}" --duration "${DURATION:-20}" --json | tail -1)"
    fi
    s1="$(cpu_of "$SERVER_PID")"; c1="$(cpu_of "$CH_PID")"
    stop_server
    python3 -c "
import json; d = json.loads('''$out'''); n = d['events_per_s'] * ${DURATION:-20}
print('$label %d events/s, ClickHouse %.2f us/event, server %.2f us/event' % (d['events_per_s'], ($c1 - $c0) / n * 1e6, ($s1 - $s0) / n * 1e6))"
    detach_database "$db"
}

# The sides swap places every round, and each run starts after the previous run's merges
# had 10 s to settle: a run's ClickHouse CPU includes merges its predecessor left, and
# the host drifts over minutes, so a fixed order would favour one side.
for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) = 1 ]; then sides=(old new); else sides=(new old); fi
    for side in "${sides[@]}"; do
        sleep 10
        if [ "$side" = old ]; then
            run "old round $r:" "$OLD" "${OLD_REFRESH:-3600s}"
        else
            run "new round $r:" "$NEW" "${NEW_REFRESH:-3600s}"
        fi
    done
done
