-- The batch records by session, kept by the refresher instead of by every ingest commit
-- (issue 32, docs/benchmarks.md). The index view_batches_session made each ingest commit write
-- one more B-tree page per session in it, to the WAL and then again at the checkpoint: in the
-- fleet's shape (about 5 events per batch) about a third of the commit's pages. view_batches
-- itself is only appended to (its rowid grows in commit order), which costs a commit one or two
-- pages whatever the sessions in it.
--
-- The refresher copies each step's records (ids above its watermark) here in key order, in short
-- transactions on the store's single writer, so a page of this table is written once per step
-- and not once per commit, and before it moves the watermark: every record at or below the
-- watermark is here. Readers of a session's records add those above what was copied from
-- view_batches' id range, which is short (what committed since the step read its top id).
CREATE TABLE IF NOT EXISTS view_batches_by_session (
    owner TEXT NOT NULL,
    session_id TEXT NOT NULL,
    id INTEGER NOT NULL,
    PRIMARY KEY (owner, session_id, id)
) WITHOUT ROWID;

INSERT OR IGNORE INTO view_batches_by_session (owner, session_id, id)
SELECT owner, session_id, id FROM view_batches ORDER BY owner, session_id, id;

DROP INDEX IF EXISTS view_batches_session;
