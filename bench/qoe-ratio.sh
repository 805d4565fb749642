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
# detached, not dropped, after its run (`detach_database` in bench/lib.sh says why).
# Env: CLICKHOUSE_URL (http://127.0.0.1:8123).
set -euo pipefail
OLD="$1"; NEW="$2"; ROUNDS="${3:-3}"
source "$(dirname "$0")/lib.sh"

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
        detach_database "$db"
    done
done
