-- Cluster mode (scale.md §2, CLICKHOUSE_CLUSTER): the tables of migrations/clickhouse/ as
-- they stand after its last file, each twice: `<table>_local` on every node, the
-- Replicated form of the one-server engine (same ORDER BY, ZooKeeper path
-- /clickhouse/tables/{shard}/<database>/<table>, replica {replica}: the servers' macros),
-- and `<table>`, the name every reader uses, a Distributed table over it sharded by
-- cityHash64(owner, session_id): every row of one view (its events, its batch records, its
-- qoe_views row) lives on one shard, so FINAL and per-view derivation stay exact per shard.
--
-- `{database}` and `{cluster}` are the sink's; statements are ON CLUSTER and IF NOT EXISTS,
-- so instances starting together are harmless. Differences from one server, each because
-- of the cluster:
-- * no view_batches_buffer: a Buffer is one node's memory, which other nodes and a
--   failover never see; the sink inserts records into view_batches itself;
-- * qoe_views.started_day is DEFAULT, not MATERIALIZED: 18.16 refuses an insert through
--   Distributed into a table with a MATERIALIZED column;
-- * qoe_refresh_state is not sharded: one replica on every node (ZooKeeper path without
--   {shard}), read directly, so the watermark reads the same on every node.
CREATE TABLE IF NOT EXISTS {database}.telemetry_events_local ON CLUSTER {cluster} (
    owner String,
    session_id String,
    ts Int64,
    type String,
    payload String,
    content_id String,
    ver UInt64
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/telemetry_events', '{replica}', ver)
ORDER BY (owner, session_id, ts, type);

CREATE TABLE IF NOT EXISTS {database}.telemetry_events ON CLUSTER {cluster}
AS {database}.telemetry_events_local
ENGINE = Distributed({cluster}, {database}, telemetry_events_local, cityHash64(owner, session_id));

CREATE TABLE IF NOT EXISTS {database}.view_batches_local ON CLUSTER {cluster} (
    owner String,
    session_id String,
    first_ts Int64,
    seq UInt64,
    written_at DateTime DEFAULT now(),
    dims String,
    writer UInt64 DEFAULT 0
) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/{database}/view_batches', '{replica}')
PARTITION BY toYYYYMMDD(written_at)
ORDER BY (owner, session_id, seq);

CREATE TABLE IF NOT EXISTS {database}.view_batches ON CLUSTER {cluster}
AS {database}.view_batches_local
ENGINE = Distributed({cluster}, {database}, view_batches_local, cityHash64(owner, session_id));

CREATE TABLE IF NOT EXISTS {database}.qoe_views_local ON CLUSTER {cluster} (
    owner String,
    session_id String,
    started_at Int64,
    started_day Int32 DEFAULT toInt32(intDiv(started_at, toInt64(86400000))),
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
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/qoe_views', '{replica}', version)
ORDER BY (owner, started_day, session_id);

CREATE TABLE IF NOT EXISTS {database}.qoe_views ON CLUSTER {cluster}
AS {database}.qoe_views_local
ENGINE = Distributed({cluster}, {database}, qoe_views_local, cityHash64(owner, session_id));

CREATE TABLE IF NOT EXISTS {database}.qoe_refresh_state ON CLUSTER {cluster} (
    name String,
    value Int64,
    updated_at DateTime DEFAULT now()
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/all/{database}/qoe_refresh_state', '{replica}', value)
ORDER BY name;
