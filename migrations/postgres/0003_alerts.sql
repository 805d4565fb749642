-- Alerts (decisions.md §12, alerts.md): channels, rules, incidents and the delivery outbox.
--
-- * Secrets (a webhook channel's signing secret, a PagerDuty routing key) are sealed with a key
--   derived from STREAMWATCH_SECRET (src/alerts/seal.rs): a copy of the database alone cannot
--   sign webhooks or page anyone.
-- * One open incident per rule and target (the stream, or '' for a QoE rule) is a unique index:
--   with several instances each transition is recorded, and so notified, once.
-- * A delivery row is the outbox: written in the transaction of the transition it notifies,
--   claimed by one worker at a time (lease_until), its body frozen at the first attempt so every
--   retry sends the same bytes under the same webhook-id.
-- * Incidents and deliveries outlive their rule and channel (no foreign key): they are history.

CREATE TABLE alert_channels (
    seq                    BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id                     TEXT NOT NULL UNIQUE,
    user_id                TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name                   TEXT NOT NULL,
    type                   TEXT NOT NULL,
    url                    TEXT NOT NULL,
    routing_key_sealed     TEXT,
    routing_key_last4      TEXT,
    secret_sealed          TEXT,
    previous_secret_sealed TEXT,
    previous_secret_until  BIGINT,
    group_window_ms        BIGINT NOT NULL,
    enabled                BIGINT NOT NULL DEFAULT 1,
    disabled_reason        TEXT,
    created_at             BIGINT NOT NULL
);
CREATE INDEX alert_channels_user ON alert_channels (user_id, created_at DESC, seq DESC);

CREATE TABLE alert_rules (
    seq             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id              TEXT NOT NULL UNIQUE,
    user_id         TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name            TEXT NOT NULL,
    kind            TEXT NOT NULL,
    stream_id       TEXT REFERENCES streams (id) ON DELETE CASCADE,
    fail_after      BIGINT NOT NULL DEFAULT 3,
    recover_after   BIGINT NOT NULL DEFAULT 2,
    metric          TEXT,
    measurement     TEXT,
    op              TEXT,
    threshold       DOUBLE PRECISION,
    window_ms       BIGINT,
    min_views       BIGINT,
    filters         TEXT NOT NULL DEFAULT '[]',
    remind_every_ms BIGINT,
    enabled         BIGINT NOT NULL DEFAULT 1,
    created_at      BIGINT NOT NULL
);
CREATE INDEX alert_rules_user ON alert_rules (user_id, created_at DESC, seq DESC);
CREATE INDEX alert_rules_kind ON alert_rules (kind, stream_id);

CREATE TABLE alert_rule_channels (
    rule_id    TEXT NOT NULL REFERENCES alert_rules (id) ON DELETE CASCADE,
    channel_id TEXT NOT NULL REFERENCES alert_channels (id) ON DELETE CASCADE,
    PRIMARY KEY (rule_id, channel_id)
);
CREATE INDEX alert_rule_channels_channel ON alert_rule_channels (channel_id);

CREATE TABLE alert_incidents (
    seq          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id           TEXT NOT NULL UNIQUE,
    user_id      TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    rule_id      TEXT NOT NULL,
    rule_name    TEXT NOT NULL,
    kind         TEXT NOT NULL,
    target       TEXT NOT NULL,
    stream_id    TEXT,
    source_url   TEXT,
    stream_name  TEXT,
    state        TEXT NOT NULL,
    fired_at     BIGINT NOT NULL,
    resolved_at  BIGINT,
    detail       TEXT NOT NULL,
    reminded_at  BIGINT NOT NULL
);
CREATE UNIQUE INDEX alert_incidents_open ON alert_incidents (rule_id, target) WHERE state = 'firing';
CREATE INDEX alert_incidents_user ON alert_incidents (user_id, fired_at DESC, seq DESC);

CREATE TABLE alert_deliveries (
    seq              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id               TEXT NOT NULL UNIQUE,
    user_id          TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    channel_id       TEXT NOT NULL,
    event            TEXT NOT NULL,
    webhook_id       TEXT NOT NULL,
    status           TEXT NOT NULL,
    attempts         BIGINT NOT NULL DEFAULT 0,
    last_status_code BIGINT,
    last_latency_ms  BIGINT,
    last_error       TEXT,
    next_attempt_at  BIGINT,
    lease_until      BIGINT NOT NULL DEFAULT 0,
    group_until      BIGINT NOT NULL,
    incident_count   BIGINT NOT NULL DEFAULT 0,
    body             TEXT,
    created_at       BIGINT NOT NULL,
    sent_at          BIGINT
);
CREATE INDEX alert_deliveries_due ON alert_deliveries (status, next_attempt_at);
CREATE INDEX alert_deliveries_user ON alert_deliveries (user_id, created_at DESC, seq DESC);
CREATE INDEX alert_deliveries_group ON alert_deliveries (channel_id, event, status);

CREATE TABLE alert_delivery_incidents (
    delivery_id TEXT NOT NULL REFERENCES alert_deliveries (id) ON DELETE CASCADE,
    incident_id TEXT NOT NULL,
    position    BIGINT NOT NULL,
    PRIMARY KEY (delivery_id, incident_id)
);
-- The sender's ordering rule looks deliveries up by incident.
CREATE INDEX alert_delivery_incidents_incident ON alert_delivery_incidents (incident_id, delivery_id);

CREATE TABLE alert_attempts (
    seq         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    delivery_id TEXT NOT NULL REFERENCES alert_deliveries (id) ON DELETE CASCADE,
    attempt     BIGINT NOT NULL,
    at          BIGINT NOT NULL,
    status_code BIGINT,
    latency_ms  BIGINT NOT NULL,
    error       TEXT
);
CREATE INDEX alert_attempts_delivery ON alert_attempts (delivery_id, attempt);
