-- decisions.md §14 (embedded SQLite): alerts hardening.
--
-- * alert_rules.stream_id no longer references streams: deleting a stream keeps every rule
--   bound to it (any user's), disabled with disabled_reason 'stream deleted', instead of
--   deleting it. SQLite cannot drop a foreign key, so alert_rules is rebuilt; alert_rule_channels
--   is rebuilt first so that dropping the old alert_rules cascades into nothing.
-- * alert_channels.url_sealed: Slack and Discord webhook URLs are secrets; url keeps a masked
--   form for reads, the sender opens the sealed one (rows written before this migration are
--   sealed by the service at start-up: the key is not in the database).
-- * alert_deliveries.resent_from: a resend's original, so resends are counted per channel.
-- * Indexes for the 30-day purge and the per-channel test and resend limits.

CREATE TABLE alert_rules_v5 (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    id              TEXT NOT NULL UNIQUE,
    user_id         TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name            TEXT NOT NULL,
    kind            TEXT NOT NULL,
    stream_id       TEXT,
    fail_after      BIGINT NOT NULL DEFAULT 3,
    recover_after   BIGINT NOT NULL DEFAULT 2,
    metric          TEXT,
    measurement     TEXT,
    op              TEXT,
    threshold       REAL,
    window_ms       BIGINT,
    min_views       BIGINT,
    filters         TEXT NOT NULL DEFAULT '[]',
    remind_every_ms BIGINT,
    enabled         BIGINT NOT NULL DEFAULT 1,
    disabled_reason TEXT,
    created_at      BIGINT NOT NULL
);
INSERT INTO alert_rules_v5 (seq, id, user_id, name, kind, stream_id, fail_after, recover_after,
    metric, measurement, op, threshold, window_ms, min_views, filters, remind_every_ms, enabled,
    created_at)
SELECT seq, id, user_id, name, kind, stream_id, fail_after, recover_after, metric, measurement,
    op, threshold, window_ms, min_views, filters, remind_every_ms, enabled, created_at
FROM alert_rules;

CREATE TABLE alert_rule_channels_v5 (
    rule_id    TEXT NOT NULL REFERENCES alert_rules_v5 (id) ON DELETE CASCADE,
    channel_id TEXT NOT NULL REFERENCES alert_channels (id) ON DELETE CASCADE,
    PRIMARY KEY (rule_id, channel_id)
);
INSERT INTO alert_rule_channels_v5 (rule_id, channel_id)
SELECT rule_id, channel_id FROM alert_rule_channels;

DROP TABLE alert_rule_channels;
DROP TABLE alert_rules;
-- Renaming rewrites alert_rule_channels_v5's reference to the new name.
ALTER TABLE alert_rules_v5 RENAME TO alert_rules;
ALTER TABLE alert_rule_channels_v5 RENAME TO alert_rule_channels;
CREATE INDEX alert_rules_user ON alert_rules (user_id, created_at DESC, seq DESC);
CREATE INDEX alert_rules_kind ON alert_rules (kind, stream_id);
CREATE INDEX alert_rule_channels_channel ON alert_rule_channels (channel_id);

ALTER TABLE alert_channels ADD COLUMN url_sealed TEXT;

ALTER TABLE alert_deliveries ADD COLUMN resent_from TEXT;
CREATE INDEX alert_deliveries_created ON alert_deliveries (created_at);
CREATE INDEX alert_deliveries_channel_recent ON alert_deliveries (channel_id, created_at);
