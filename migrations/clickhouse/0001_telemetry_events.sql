-- Telemetry events (decisions.md §2). Runs unchanged on ClickHouse 18.16 and current
-- releases: ts is Int64 epoch milliseconds (no DateTime64 on 18.16), type is String,
-- no TTL/CODEC/Map/JSON/LowCardinality.
--
-- Dedup: ReplacingMergeTree on (owner, session_id, ts, type). `ver` is written as
-- u64::MAX - (write time ms << 20 | row index), so the FIRST stored row of a key has
-- the highest version and wins, matching the SQLite sink's INSERT OR IGNORE: a
-- repeated batch is a no-op. Exact reads use FINAL.
--
-- No PARTITION BY on purpose: `ts` comes from clients, and a batch spanning many
-- months would fail with "too many partitions for single INSERT block".
CREATE TABLE IF NOT EXISTS telemetry_events (
    owner String,
    session_id String,
    ts Int64,
    type String,
    payload String,
    content_id String,
    ver UInt64
) ENGINE = ReplacingMergeTree(ver)
ORDER BY (owner, session_id, ts, type)
