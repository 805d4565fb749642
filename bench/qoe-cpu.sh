#!/usr/bin/env bash
# CPU per million events ingested, split by process, without and with the refresher
# (docs/benchmarks.md, "Where the refresher's CPU goes, by process, …").
#
# Usage: bench/qoe-cpu.sh QOE_BINARY [rounds (1)]
# Each round runs `qoe ingest --engine clickhouse --duration 60` on a fresh database,
# without and then with `--rollups`, and prints per run: events/s, the peak RSS of `qoe`,
# and the CPU seconds per million events of `qoe` (user + system, /usr/bin/time) and of
# clickhouse-server (utime + stime from /proc/<pid>/stat, read before the run and 5 s
# after it, so the run's merges count; the server must run on this host and nothing else
# should use it). Databases are detached after their run (`detach_database` in
# bench/lib.sh says why). Env: CLICKHOUSE_URL (http://127.0.0.1:8123).
set -euo pipefail
BIN="$1"; ROUNDS="${2:-1}"
source "$(dirname "$0")/lib.sh"
per_mev() { awk -v s="$1" -v n="$2" 'BEGIN {printf "%.2f", s * 1e6 / n}'; }

for r in $(seq 1 "$ROUNDS"); do
    for run in without with; do
        flags=(); [ "$run" = with ] && flags=(--rollups)
        db="cpu_${r}_${run}_$(date +%s)"
        sleep 10 # let the previous run's merges settle
        before="$(cpu_of "$CH_PID")"
        out="$(/usr/bin/time -f 'TIME %U %S %M' "$BIN" ingest --engine clickhouse \
            --clickhouse-url "$CH_URL" --database "$db" --duration 60 "${flags[@]}" 2>&1)"
        sleep 5
        after="$(cpu_of "$CH_PID")"
        events="$(echo "$out" | grep -o 'ingest: [0-9]* events' | awk '{print $2}')"
        rate="$(echo "$out" | grep -o '= [0-9]* events/s' | awk '{print $2}')"
        read -r user sys rss_kib <<<"$(echo "$out" | grep '^TIME' | awk '{print $2, $3, $4}')"
        qoe_s="$(awk -v u="$user" -v s="$sys" 'BEGIN {print u + s}')"
        ch_s="$(awk -v a="$after" -v b="$before" 'BEGIN {print a - b}')"
        echo "$(date -u +%H:%M) round $r $run: $rate events/s, qoe peak RSS $((rss_kib / 1024)) MiB," \
            "qoe $(per_mev "$qoe_s" "$events") s/M events, clickhouse $(per_mev "$ch_s" "$events") s/M events"
        detach_database "$db"
    done
done
