-- The stream page's timeline reads a stream's probes of the last 24 h (status and latency per
-- hour): with both in the index it never visits the table (2,880 rows a day at 30 s).
DROP INDEX probes_stream;
CREATE INDEX probes_stream ON probes (stream_id, created_at, playable, status, latency_ms);
