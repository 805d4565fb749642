-- decisions.md §14: alerts hardening.
--
-- * alert_rules.stream_id no longer references streams: deleting a stream keeps every rule
--   bound to it (any user's), disabled with disabled_reason 'stream deleted', instead of
--   deleting it.
-- * alert_channels.url_sealed: Slack and Discord webhook URLs are secrets; url keeps a masked
--   form for reads, the sender opens the sealed one (rows written before this migration are
--   sealed by the service at start-up: the key is not in the database).
-- * alert_deliveries.resent_from: a resend's original, so resends are counted per channel.
-- * Indexes for the 30-day purge and the per-channel test and resend limits.

ALTER TABLE alert_rules DROP CONSTRAINT IF EXISTS alert_rules_stream_id_fkey;
ALTER TABLE alert_rules ADD COLUMN disabled_reason TEXT;

ALTER TABLE alert_channels ADD COLUMN url_sealed TEXT;

ALTER TABLE alert_deliveries ADD COLUMN resent_from TEXT;
CREATE INDEX alert_deliveries_created ON alert_deliveries (created_at);
CREATE INDEX alert_deliveries_channel_recent ON alert_deliveries (channel_id, created_at);
