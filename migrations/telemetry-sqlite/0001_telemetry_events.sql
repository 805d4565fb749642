-- Telemetry events in the embedded store (decisions.md §2). The primary key is the
-- dedup key; rows are written with INSERT OR IGNORE, so the first stored row of a
-- key wins and a repeated batch is a no-op. WITHOUT ROWID clusters rows by key, so
-- one session's events are contiguous.
CREATE TABLE IF NOT EXISTS telemetry_events (
    owner TEXT NOT NULL,
    session_id TEXT NOT NULL,
    ts INTEGER NOT NULL,
    type TEXT NOT NULL,
    payload TEXT NOT NULL,
    content_id TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (owner, session_id, ts, type)
) WITHOUT ROWID;
