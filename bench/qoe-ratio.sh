#!/usr/bin/env bash
# Ingest with and without the refresher, and two builds' refreshers side by side
# (docs/benchmarks.md, "QoE store").
#
# Usage: bench/qoe-ratio.sh OLD_QOE NEW_QOE [rounds (3)]
# Each round runs `qoe ingest --engine clickhouse --duration 60` three times on fresh
# databases: NEW without the refresher, OLD with it (`--rollups`), NEW with it. The ratio
# is with / without; OLD against NEW under the same load shows what a change did, since a
# round's own spread on this shared machine is larger than most changes. Prints one line
# per run (UTC time, load average before it, the run's events/s). Each database is
# detached, not dropped, after its run (bench/ingest-ab.sh says why and how to drop them).
# Env: CLICKHOUSE_URL (http://127.0.0.1:8123).
set -euo pipefail
OLD="$1"; NEW="$2"; ROUNDS="${3:-3}"
CH_URL="${CLICKHOUSE_URL:-http://127.0.0.1:8123}"
ch_sql() { curl -sf "$CH_URL/" --data-binary "$1"; }

detach() {
    # The Buffer first: detaching it writes its rows to view_batches.
    for t in view_batches_buffer telemetry_events view_batches qoe_views qoe_refresh_state schema_migrations; do
        ch_sql "DETACH TABLE IF EXISTS $1.$t" >/dev/null || true
    done
}

for r in $(seq 1 "$ROUNDS"); do
    for run in without old new; do
        bin="$NEW"; flags=(--rollups)
        [ "$run" = old ] && bin="$OLD"
        [ "$run" = without ] && flags=()
        db="ratio_${r}_${run}_$(date +%s)"
        sleep 10 # let the previous run's merges settle
        load="$(cut -d' ' -f1 /proc/loadavg)"
        out="$("$bin" ingest --engine clickhouse --clickhouse-url "$CH_URL" --database "$db" \
            --duration 60 "${flags[@]}" 2>&1 | grep 'events/s' | tail -1)"
        echo "$(date -u +%H:%M) round $r $run (load $load): $out"
        detach "$db"
    done
done
