# Helpers shared by the bench scripts (sourced, not run): CH_URL, CH_PID, cpu_of,
# detach_database. Env: CLICKHOUSE_URL (http://127.0.0.1:8123).
CH_URL="${CLICKHOUSE_URL:-http://127.0.0.1:8123}"

# The pid of the ClickHouse server on this host (CPU readings need it local).
CH_PID="$(pgrep -o -x clickhouse-serv || pgrep -o clickhouse-server || true)"

# CPU seconds (user + system) process $1 has used so far. The fields are counted after the
# `(comm)` field, which may hold spaces.
cpu_of() { awk -v t="$(getconf CLK_TCK)" '{ sub(/.*\) /, ""); print ($12 + $13) / t }' "/proc/$1/stat"; }

# Detaches every table of bench database $1 instead of dropping it: a drop slows
# ClickHouse's next inserts for minutes here (bench/ingest.sh explains why). The Buffer
# goes first, since detaching it writes its rows to view_batches. To drop them once done,
# `ATTACH TABLE` each table of a database, then `DROP DATABASE` (18.16 refuses to drop one
# holding detached tables, and re-attaches them all on its next start).
detach_database() {
    local t
    for t in view_batches_buffer telemetry_events view_batches qoe_views qoe_refresh_state schema_migrations; do
        curl -sf "$CH_URL/" --data-binary "DETACH TABLE IF EXISTS $1.$t" >/dev/null || true
    done
}
