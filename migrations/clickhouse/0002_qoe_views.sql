-- QoE analytics (analytics.md, docs/analytics.md): batch records, derived views and the
-- refresher's watermark. Runs unchanged on ClickHouse 18.16 and current releases: times
-- are Int64 epoch milliseconds (no DateTime64), tags are two parallel Array(String)
-- columns (no Map/JSON), no TTL/CODEC/LowCardinality.
--
-- view_batches: one row per ingest batch (never per event), written by the sink right
-- after the batch's events, in the same acknowledged write. A retried batch adds a row
-- with the same content; that is harmless (analytics' dimension rule is
-- order-independent for identical records) and lets the refresher count records.
-- `dims` is the compact JSON of BatchRecord::dims_json (context fields, tags, browser,
-- os, deviceType): one String column keeps the extra insert per write small (every
-- column is two files per part). `written_at` is the server's clock, so the refresher's
-- watermark is immune to the skew of the instances that write. Partitioned by day of
-- written_at: the refresher's scan for recent batches reads one or two partitions.
CREATE TABLE IF NOT EXISTS view_batches (
    owner String,
    session_id String,
    first_ts Int64,
    seq UInt64,
    written_at DateTime DEFAULT now(),
    dims String
) ENGINE = MergeTree
PARTITION BY toYYYYMMDD(written_at)
ORDER BY (owner, session_id, seq);

-- qoe_views: one row per view (analytics.md §2), derived in Rust by analytics::view from
-- the deduplicated events and the view's batch records, upserted by the refresher.
-- `version` = batch_rows * 2^32 + event_rows grows with the data a derivation saw, so
-- the row derived from the most data wins, whichever instance wrote it and in whatever
-- order. Read with FINAL (docs/benchmarks.md: faster than an argMax dedup on 18.16).
-- Sorted by the day of started_at (`started_day`, epoch ms / 86,400,000 truncated, the
-- same as Rust's `/`), so a range reads only its days. A view's started_at can move to
-- an earlier day when a late batch arrives: each upsert also writes a tombstone
-- (`deleted` = 1, same version) under every later day up to the day of its ended_at,
-- where a derivation from less data may have put it; queries filter `deleted = 0` after
-- FINAL. Not partitioned (a 7-day FINAL over day partitions measured slower).
CREATE TABLE IF NOT EXISTS qoe_views (
    owner String,
    session_id String,
    started_at Int64,
    started_day Int32 MATERIALIZED toInt32(intDiv(started_at, toInt64(86400000))),
    deleted UInt8 DEFAULT 0,
    ended_at Int64,
    started UInt8,
    first_frame_at Nullable(Int64),
    startup_ms Nullable(Float64),
    failed UInt8,
    failed_at Nullable(Int64),
    startup_failure UInt8,
    exit_before_start UInt8,
    rebuffer_count Int64,
    rebuffer_ms Int64,
    paused_ms Int64,
    watch_time_ms Int64,
    bitrate_weighted_sum Float64,
    bitrate_covered_ms Int64,
    rendition_switches Int64,
    upshifts Int64,
    downshifts Int64,
    error_count Int64,
    fatal_error_code Nullable(String),
    content_id Nullable(String),
    src Nullable(String),
    sdk Nullable(String),
    player Nullable(String),
    browser String,
    os String,
    device_type String,
    tag_keys Array(String),
    tag_values Array(String),
    batch_rows UInt64,
    event_rows UInt64,
    version UInt64,
    derived_at Int64
) ENGINE = ReplacingMergeTree(version)
ORDER BY (owner, started_day, session_id);

-- The refresher's watermark: the server time (epoch seconds) before which every
-- visible batch record has been derived. The highest value wins.
CREATE TABLE IF NOT EXISTS qoe_refresh_state (
    name String,
    value Int64,
    updated_at DateTime DEFAULT now()
) ENGINE = ReplacingMergeTree(value)
ORDER BY name;

-- Sessions stored before this migration get one bare record each (no context, unknown
-- user agent), so the refresher derives their views too.
INSERT INTO view_batches (owner, session_id, first_ts, seq, dims)
SELECT owner, session_id, min(ts), 0, '{"tags":{},"browser":"unknown","os":"unknown","deviceType":"unknown"}'
FROM telemetry_events
GROUP BY owner, session_id;
