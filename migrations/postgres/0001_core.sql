-- Accounts, streams, probes, API keys and the waitlist (PostgreSQL).
-- Timestamps are epoch milliseconds (UTC). `seq` orders rows created in the same millisecond.

CREATE TABLE users (
    id            TEXT PRIMARY KEY,
    email         TEXT NOT NULL UNIQUE,
    name          TEXT NOT NULL,
    password_hash TEXT NOT NULL,
    created_at    BIGINT NOT NULL
);

CREATE TABLE sessions (
    id         TEXT PRIMARY KEY,
    token_hash TEXT NOT NULL UNIQUE,
    user_id    TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX sessions_user ON sessions (user_id);

CREATE TABLE streams (
    seq             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id              TEXT NOT NULL UNIQUE,
    source_url      TEXT NOT NULL UNIQUE,
    name            TEXT NOT NULL,
    target_region   TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    agent_state     TEXT NOT NULL,
    status          TEXT NOT NULL,
    last_action     TEXT NOT NULL,
    last_checked_at BIGINT,
    last_healthy_at BIGINT,
    next_probe_at   BIGINT NOT NULL,
    lease_until     BIGINT,
    -- 24-hour uptime as of uptime_at, refreshed by every probe (see src/streams/uptime.rs).
    uptime_pct      DOUBLE PRECISION,
    uptime_at       BIGINT
);
CREATE INDEX streams_created ON streams (created_at DESC, seq DESC);
CREATE INDEX streams_due ON streams (next_probe_at);

CREATE TABLE probes (
    seq           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id            TEXT NOT NULL UNIQUE,
    stream_id     TEXT NOT NULL REFERENCES streams (id) ON DELETE CASCADE,
    status        TEXT NOT NULL,
    anomaly_class TEXT NOT NULL,
    latency_ms    BIGINT NOT NULL,
    http_status   BIGINT,
    detail        TEXT NOT NULL,
    created_at    BIGINT NOT NULL
);
CREATE INDEX probes_recent ON probes (created_at DESC, seq DESC);
-- Covering (status included): the uptime edge-hour count reads only this index.
CREATE INDEX probes_stream ON probes (stream_id, created_at, status);

-- Hourly counters per stream so uptimePct never scans every probe row.
CREATE TABLE probe_rollups (
    stream_id TEXT NOT NULL REFERENCES streams (id) ON DELETE CASCADE,
    hour      BIGINT NOT NULL,
    total     BIGINT NOT NULL,
    failing   BIGINT NOT NULL,
    PRIMARY KEY (stream_id, hour)
);

CREATE TABLE api_keys (
    seq          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id           TEXT NOT NULL UNIQUE,
    user_id      TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    label        TEXT NOT NULL,
    key_hash     TEXT NOT NULL UNIQUE,
    created_at   BIGINT NOT NULL,
    last_used_at BIGINT,
    revoked_at   BIGINT
);
CREATE INDEX api_keys_user ON api_keys (user_id, created_at DESC, seq DESC);

CREATE TABLE waitlist (
    email      TEXT PRIMARY KEY,
    created_at BIGINT NOT NULL
);
