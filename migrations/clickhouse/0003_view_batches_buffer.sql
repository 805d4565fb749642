-- view_batches_buffer: the batch records' write path and the refresher's read path. A
-- Buffer table holds inserted records in the server's memory and writes them to
-- view_batches as one part every 2 seconds (or at 1,000,000 rows / 64 MiB), instead of one
-- small part per ingest write: on 18.16 each part costs about as much server CPU as the
-- write's whole events insert, in the insert and again in merges (docs/benchmarks.md).
-- Reads of the Buffer see view_batches and the buffered rows together. `written_at` is
-- filled at the insert into the Buffer, so the refresher's watermark keeps its meaning.
--
-- What this trades (docs/decisions.md): records held in the Buffer are lost if the
-- ClickHouse server process dies without a clean shutdown (a clean one writes them out);
-- the events of the same writes are not (they are in telemetry_events, written first).
-- The refresher then re-derives every view whose events were written in the seconds the
-- Buffer held (analytics' recovery after a ClickHouse restart).
--
-- `{database}` is replaced with the sink's database: Buffer names its destination, and a
-- `currentDatabase()` there would be evaluated again when the server attaches the table
-- at start-up, in another database's context.
CREATE TABLE IF NOT EXISTS view_batches_buffer AS view_batches
ENGINE = Buffer({database}, view_batches, 1, 1, 2, 1000000, 1000000, 67108864, 67108864);
