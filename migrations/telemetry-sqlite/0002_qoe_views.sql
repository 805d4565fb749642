-- QoE analytics in the embedded store (analytics.md, docs/analytics.md): batch records,
-- derived views and the refresher's watermark.
--
-- view_batches: one row per ingest batch (never per event), inserted in the same
-- transaction as the batch's events. `id` (the rowid) grows in commit order, since the
-- store has one writer: the refresher's watermark is the last id it derived, exact,
-- with no margin. `dims` is the compact JSON of BatchRecord::dims_json.
CREATE TABLE IF NOT EXISTS view_batches (
    id INTEGER PRIMARY KEY,
    owner TEXT NOT NULL,
    session_id TEXT NOT NULL,
    first_ts INTEGER NOT NULL,
    written_at INTEGER NOT NULL,
    dims TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS view_batches_session ON view_batches (owner, session_id);

-- qoe_views: one row per view (analytics.md §2), derived in Rust by analytics::view and
-- upserted by the refresher; `version` = batch_rows * 2^32 + event_rows, as on
-- ClickHouse. Tags live in qoe_view_tags (one row per tag), so a filter or breakdown
-- by tag.<name> is an indexed lookup, not a JSON path.
-- Clustered by (owner, started_at DESC, session_id): every route selects a range of
-- started_at, which is then one contiguous read of the table (no lookup per view), and
-- the views list's order (newest first, ties by session) is the table's own. A view is
-- unique per (owner, session_id) by the second index; the refresher's INSERT OR REPLACE
-- deletes the stored row through it, also when started_at moved.
CREATE TABLE IF NOT EXISTS qoe_views (
    owner TEXT NOT NULL,
    session_id TEXT NOT NULL,
    started_at INTEGER NOT NULL,
    ended_at INTEGER NOT NULL,
    started INTEGER NOT NULL,
    first_frame_at INTEGER,
    startup_ms REAL,
    failed INTEGER NOT NULL,
    failed_at INTEGER,
    startup_failure INTEGER NOT NULL,
    exit_before_start INTEGER NOT NULL,
    rebuffer_count INTEGER NOT NULL,
    rebuffer_ms INTEGER NOT NULL,
    paused_ms INTEGER NOT NULL,
    watch_time_ms INTEGER NOT NULL,
    bitrate_weighted_sum REAL NOT NULL,
    bitrate_covered_ms INTEGER NOT NULL,
    rendition_switches INTEGER NOT NULL,
    upshifts INTEGER NOT NULL,
    downshifts INTEGER NOT NULL,
    error_count INTEGER NOT NULL,
    fatal_error_code TEXT,
    content_id TEXT,
    src TEXT,
    sdk TEXT,
    player TEXT,
    browser TEXT NOT NULL,
    os TEXT NOT NULL,
    device_type TEXT NOT NULL,
    batch_rows INTEGER NOT NULL,
    event_rows INTEGER NOT NULL,
    version INTEGER NOT NULL,
    derived_at INTEGER NOT NULL,
    PRIMARY KEY (owner, started_at DESC, session_id)
) WITHOUT ROWID;
CREATE UNIQUE INDEX IF NOT EXISTS qoe_views_session ON qoe_views (owner, session_id);

CREATE TABLE IF NOT EXISTS qoe_view_tags (
    owner TEXT NOT NULL,
    session_id TEXT NOT NULL,
    name TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (owner, session_id, name)
) WITHOUT ROWID;

-- The refresher's watermark: the last view_batches.id derived.
CREATE TABLE IF NOT EXISTS qoe_refresh_state (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);

-- Sessions stored before this migration get one bare record each (no context, unknown
-- user agent), so the refresher derives their views too.
INSERT INTO view_batches (owner, session_id, first_ts, written_at, dims)
SELECT owner, session_id, MIN(ts), CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER),
       '{"tags":{},"browser":"unknown","os":"unknown","deviceType":"unknown"}'
FROM telemetry_events
GROUP BY owner, session_id;
