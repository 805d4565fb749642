-- view_batches.writer: which server process wrote each batch record (a random id per
-- process, ingest::ClickHouseConfig::writer; 0 for records written before this migration
-- and for the refresher's recovery records). Analytics' live views derive a playing view
-- from the process's own memory of its batches, and a record by any other writer in the
-- view's window means the memory is not the whole view (another instance took some of
-- its batches, or the process restarted): that view is read back from the store instead.
--
-- 18.16 has no `ADD COLUMN IF NOT EXISTS`: the migration runner skips an `ADD COLUMN`
-- whose column exists, so two instances applying this at once are harmless. The Buffer
-- in front of view_batches must have the table's structure: dropping it first writes the
-- rows it holds to view_batches, then it is created again with the new column. (An insert
-- that reaches the server in between fails and is not acknowledged; its client retries.)
DROP TABLE IF EXISTS view_batches_buffer;
ALTER TABLE view_batches ADD COLUMN writer UInt64 DEFAULT 0;
CREATE TABLE IF NOT EXISTS view_batches_buffer AS view_batches
ENGINE = Buffer({database}, view_batches, 1, 1, 2, 1000000, 1000000, 67108864, 67108864);
