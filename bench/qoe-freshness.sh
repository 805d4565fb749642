#!/usr/bin/env bash
# Freshness through the service (docs/benchmarks.md, "QoE store"): the release server on a
# fresh ClickHouse database with the refresher at its default interval (10 s), and
# `qoe http` posting the realistic fleet at RATE events/s (open loop) for DURATION seconds;
# prints the time from each sampled batch's 204 until its view has a row in `qoe_views`
# (what GET /api/v1/qoe/views reads), p50 / p95 / p99. Run it at half the maximum that
# `QOE=… bench/ingest-ab.sh` measured with the refresher on.
#
# Usage: bench/qoe-freshness.sh SERVER QOE RATE [DURATION (60)]
# Env: CLICKHOUSE_URL (http://127.0.0.1:8123), PORT (18090).
set -euo pipefail
SERVER="$1"; QOE="$2"; RATE="$3"; DURATION="${4:-60}"
source "$(dirname "$0")/lib.sh"

db="fresh_$(date +%s)_$RANDOM"
start_server "$SERVER" "$db" 10s
"$QOE" http --url "$BASE" --key "$API_KEY" --rate "$RATE" --duration "$DURATION" \
    --freshness-database "$db" --clickhouse-url "$CH_URL"
stop_server
detach_database "$db"
