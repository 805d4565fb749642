# Helpers shared by the bench scripts (sourced, not run): CH_URL, CH_PID, cpu_of,
# detach_database, start_server, stop_server and wait_spool_drained.
# Env: CLICKHOUSE_URL (http://127.0.0.1:8123).
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

# Starts server binary $1 on a fresh ClickHouse database $2 with the QoE refresher every $3
# (e.g. 3600s: off for a run), on 127.0.0.1:$PORT (18090), then signs up an account and
# creates an API key. Sets SERVER_PID, SERVER_DIR, BASE and API_KEY; stop_server undoes it.
start_server() {
    PORT="${PORT:-18090}"; BASE="http://127.0.0.1:$PORT"
    SERVER_DIR="$(mktemp -d /tmp/bench-server.XXXXXX)"
    env -u DATABASE_URL CLICKHOUSE_URL="$CH_URL" CLICKHOUSE_DATABASE="$2" \
        STREAMWATCH_QOE_REFRESH="$3" STREAMWATCH_LISTEN="127.0.0.1:$PORT" \
        STREAMWATCH_DATA_DIR="$SERVER_DIR/data" STREAMWATCH_AUTH_RATE_LIMIT=off RUST_LOG=warn \
        "$1" serve >"$SERVER_DIR/server.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 1 150); do curl -s -o /dev/null "$BASE/" && break; sleep 0.1; done
    API_KEY="$(new_api_key "$SERVER_DIR/jar")"
}

# Signs up a new account on the server at $BASE (its session cookie in the jar file $1) and
# prints an API key of it.
new_api_key() {
    curl -sf -c "$1" -H 'content-type: application/json' \
        -d "{\"name\":\"bench\",\"email\":\"bench-$$-$RANDOM@example.com\",\"password\":\"bench-password-1\"}" \
        "$BASE/api/auth/sign-up/email" >/dev/null
    curl -sf -b "$1" -H 'content-type: application/json' -H "origin: $BASE" \
        -d '{"label":"bench"}' "$BASE/api/v1/keys" | python3 -c "import json,sys; print(json.load(sys.stdin)['rawKey'])"
}

stop_server() {
    kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true
    rm -rf "$SERVER_DIR"
}

# Waits until the spool of the server whose metrics listen on 127.0.0.1:$1 is empty. Its
# gauge is refreshed every second: an empty reading twice in a row, half a second apart.
wait_spool_drained() {
    local empty=0 b
    while [ "$empty" -lt 2 ]; do
        # A server without the gauge (no spool, or a build before it) reads as empty.
        b="$(curl -sf "http://127.0.0.1:$1/metrics" | awk '$1 == "streamwatch_spool_batches" { print $2 }' || true)"
        if [ "${b:-0}" = 0 ]; then empty=$((empty + 1)); else empty=0; fi
        sleep 0.5
    done
}
