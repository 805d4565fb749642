-- decisions.md v1.1 §6 and §10 (PostgreSQL).
--
-- * streams.created_by: who registered a stream, for the per-user stream cap. Streams
--   registered before this migration have no owner and count against nobody.
-- * streams.down_streak / up_streak: consecutive not-playable / playable probes, for the
--   agent's incident text and for alert rules (failAfter / recoverAfter).
-- * probes.playable: the v1.1 uptime rule. Playable = healthy, or degraded only because it
--   was slow. Rows written before this migration are classified from their detail text.
-- * probe_rollups.down replaces `failing`: uptime now counts every not-playable probe as down.

ALTER TABLE streams ADD COLUMN created_by TEXT REFERENCES users (id) ON DELETE SET NULL;
CREATE INDEX streams_created_by ON streams (created_by);
ALTER TABLE streams ADD COLUMN down_streak BIGINT NOT NULL DEFAULT 0;
ALTER TABLE streams ADD COLUMN up_streak BIGINT NOT NULL DEFAULT 0;

ALTER TABLE probes ADD COLUMN playable BIGINT NOT NULL DEFAULT 1;
UPDATE probes SET playable = CASE
    WHEN status = 'healthy' THEN 1
    WHEN status = 'degraded' AND detail LIKE 'slow response:%' THEN 1
    ELSE 0 END;
DROP INDEX probes_stream;
-- Covering (playable included): the uptime edge-hour count reads only this index.
CREATE INDEX probes_stream ON probes (stream_id, created_at, playable);

ALTER TABLE probe_rollups ADD COLUMN down BIGINT NOT NULL DEFAULT 0;
UPDATE probe_rollups SET down = (
    SELECT COUNT(*) FROM probes p
    WHERE p.stream_id = probe_rollups.stream_id AND p.playable = 0
      AND p.created_at >= probe_rollups.hour AND p.created_at < probe_rollups.hour + 3600000);
ALTER TABLE probe_rollups DROP COLUMN failing;

-- Stored uptimes were computed with the old rule: recompute them on the next read.
UPDATE streams SET uptime_at = NULL;
