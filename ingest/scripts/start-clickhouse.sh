#!/bin/sh
# Installs (if missing), configures (once) and starts Debian's ClickHouse server for the
# ingest tests, then waits until it answers /ping. Idempotent: safe to run twice.
# See shared/notes/clickhouse.md for why each step is here.
set -eu

SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi

if ! command -v clickhouse-server >/dev/null 2>&1; then
    $SUDO apt-get update
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y clickhouse-server clickhouse-client
fi

# Configuration is written only on a machine where it is not there yet: an operator's own
# files (or a previous run's) are never rewritten.
$SUDO mkdir -p /etc/clickhouse-server/config.d /etc/clickhouse-server/users.d
# Listen on loopback only (the stock config leaves every listen_host commented out).
if [ ! -e /etc/clickhouse-server/config.d/listen.xml ]; then
    $SUDO sh -c 'cat > /etc/clickhouse-server/config.d/listen.xml' <<'XML'
<yandex>
    <listen_host>127.0.0.1</listen_host>
</yandex>
XML
fi
# LowCardinality is experimental on 18.16; enable it server-side so no client has to
# send a setting that modern ClickHouse rejects. (The telemetry DDL does not need it.)
if [ ! -e /etc/clickhouse-server/users.d/lowcard.xml ]; then
    $SUDO sh -c 'cat > /etc/clickhouse-server/users.d/lowcard.xml' <<'XML'
<yandex>
    <profiles>
        <default>
            <allow_experimental_low_cardinality_type>1</allow_experimental_low_cardinality_type>
        </default>
    </profiles>
</yandex>
XML
fi

if curl -sf http://127.0.0.1:8123/ping >/dev/null 2>&1; then
    echo "clickhouse already running"
    exit 0
fi

$SUDO su clickhouse -s /bin/sh -c 'clickhouse-server --config-file=/etc/clickhouse-server/config.xml --pid-file=/var/lib/clickhouse/clickhouse-server.pid --daemon'

# A server holding many or large tables (a developer machine after benchmarks) loads them
# all before it answers, which can take minutes on 2 cores: wait up to 5 minutes, but stop
# at once, with the reason from its own log, if the server process has exited.
pidfile=/var/lib/clickhouse/clickhouse-server.pid
for i in $(seq 1 600); do
    if curl -sf http://127.0.0.1:8123/ping >/dev/null 2>&1; then
        echo "clickhouse ready"
        exit 0
    fi
    if [ "$i" -gt 10 ] && { [ ! -s "$pidfile" ] || ! kill -0 "$(cat "$pidfile")" 2>/dev/null; }; then
        echo "clickhouse-server exited while starting; the end of its error log:" >&2
        tail -n 30 /var/log/clickhouse-server/clickhouse-server.err.log >&2 || true
        exit 1
    fi
    sleep 0.5
done
echo "clickhouse did not answer /ping within 5 minutes; the end of its error log:" >&2
tail -n 30 /var/log/clickhouse-server/clickhouse-server.err.log >&2 || true
exit 1
