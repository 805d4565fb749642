//! The spool's SQLite database: connection settings, schema, the record checksum,
//! and the statements of the append, peek, quarantine and removal paths. Used only
//! from the spool's thread (worker.rs); nothing here is async.

use std::path::Path;

use crc::{Crc, Digest, CRC_32_ISCSI};
use rusqlite::types::ValueRef;
use rusqlite::{params, Connection, ErrorCode, OptionalExtension, TransactionBehavior};

use super::{RecordId, Removed, SpooledRecord};

/// The database file inside the spool directory.
pub const DB_FILE: &str = "spool.db";
/// Its write-ahead log (SQLite's name for it: the database's plus `-wal`).
pub const WAL_FILE: &str = "spool.db-wal";

/// Bytes counted for each record on top of its payload (its metadata, row header and
/// share of a page), so that a spool of empty records fills up too.
pub const RECORD_OVERHEAD: u64 = 64;

/// CRC-32C (Castagnoli), the checksum of storage formats (iSCSI, ext4, Kafka).
pub(crate) static CRC32C: Crc<u32> = Crc::<u32>::new(&CRC_32_ISCSI);

/// SQLite's default page size, set explicitly: a commit writes every page it touched
/// into the WAL, so smaller pages mean less write amplification for the few-KiB
/// records of a group commit.
const PAGE_SIZE: i64 = 4096;

/// Bytes of WAL file kept when the WAL starts over (one auto-checkpoint's worth,
/// 1,000 pages, and room for a large last commit).
const WAL_KEEP_BYTES: u64 = 8 << 20;

/// Free pages are handed back to the filesystem (`incremental_vacuum`) once they
/// exceed this many bytes and four times the bytes still held: after an outage's
/// spool drained, not while it is draining (moving the live pages then would write
/// them twice).
const VACUUM_MIN_FREE_BYTES: u64 = if cfg!(test) { 1 << 20 } else { 64 << 20 };

/// Free pages handed back per step ([`Store::vacuum_step`]): 1 MiB, a few
/// milliseconds of the spool's thread.
const VACUUM_STEP_PAGES: i64 = if cfg!(test) { 64 } else { 256 };

/// Tables of the spool. `records` is the queue (rowid = record id, the order of
/// acknowledgement); `quarantine` keeps what failed its checksum or could not be
/// read (columns untyped on purpose: a damaged value is copied as it is, `NULL`
/// when unreadable); `meta` keeps `removed_through`, so that ids never go back
/// even when the spool is empty.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS records (
    id INTEGER PRIMARY KEY,
    spooled_at INTEGER NOT NULL,
    events INTEGER NOT NULL,
    crc INTEGER NOT NULL,
    payload BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS quarantine (
    id INTEGER PRIMARY KEY,
    spooled_at,
    events,
    crc,
    payload,
    reason TEXT NOT NULL,
    quarantined_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
";

const INSERT_SQL: &str =
    "INSERT INTO records (id, spooled_at, events, crc, payload) VALUES (?1, ?2, ?3, ?4, ?5)";

/// Opens `path` with the spool's settings (creating it if missing).
pub(crate) fn connect(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    // EXCLUSIVE first: entering WAL in exclusive mode keeps the WAL index in this
    // process's memory (no -shm file to map, or to be left damaged). The spool's
    // thread is the file's only user; the directory lock guarantees it.
    conn.execute_batch("PRAGMA locking_mode = EXCLUSIVE")?;
    // Page size and auto-vacuum are chosen once, before the file's first page (on
    // an existing file, setting auto_vacuum would write its header at every open:
    // a WAL frame that recovery would count as the WAL's own).
    let pages: i64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
    if pages == 0 {
        conn.execute_batch(&format!(
            "PRAGMA page_size = {PAGE_SIZE}; PRAGMA auto_vacuum = INCREMENTAL;"
        ))?;
    }
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CANTOPEN),
            Some(format!("journal_mode WAL refused (got {mode})")),
        ));
    }
    // FULL: every commit fsyncs the WAL before it returns; that fsync is what an
    // acknowledgement stands on. journal_size_limit: when the WAL starts over after
    // a checkpoint, it keeps the file (cut back to this size) and writes over it.
    // An fsync of bytes written over needs no journal commit of the filesystem's
    // (the file's size and blocks are unchanged); one of an append waits for the
    // filesystem's journal, shared with every other writer on the disk
    // (docs/benchmarks.md, "The spool's fsync: writing over its WAL"). Recovery
    // tells the frames this leaves behind a crash's last commit from damage.
    // cell_size_check: SQLite checks each b-tree cell's bounds as it reads it.
    conn.execute_batch(&format!(
        "PRAGMA synchronous = FULL;
         PRAGMA journal_size_limit = {WAL_KEEP_BYTES};
         PRAGMA cell_size_check = ON;
         PRAGMA trusted_schema = OFF;"
    ))?;
    Ok(conn)
}

/// Whether `e` says the file is damaged (as opposed to unwritable, full, locked...).
pub(crate) fn is_damage(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase)
    )
}

/// The bytes a record counts for against `max_bytes`.
pub(crate) fn record_cost(payload_len: usize) -> u64 {
    payload_len as u64 + RECORD_OVERHEAD
}

/// Finishes a record's checksum: CRC-32C over the payload (already fed into
/// `digest`), then id, spooled_at and events, each little-endian. A flipped bit in
/// any field, or a record's bytes under another id, fails the check.
pub(crate) fn seal(mut digest: Digest<'static, u32>, id: i64, spooled_at: i64, events: u32) -> u32 {
    digest.update(&id.to_le_bytes());
    digest.update(&spooled_at.to_le_bytes());
    digest.update(&events.to_le_bytes());
    digest.finalize()
}

fn checksum(payload: &[u8], id: i64, spooled_at: i64, events: u32) -> u32 {
    let mut digest = CRC32C.digest();
    digest.update(payload);
    seal(digest, id, spooled_at, events)
}

/// What the database holds, read at open.
#[derive(Debug, Default)]
pub(crate) struct Totals {
    pub records: u64,
    /// Sum of the records' costs ([`record_cost`]).
    pub bytes: u64,
    pub oldest_ms: Option<i64>,
    pub quarantined: u64,
    /// [`Store::highest_id`].
    pub highest_id: i64,
}

/// The outcome of a peek: records in order, and those moved to quarantine on the
/// way (id and cost).
#[derive(Debug, Default)]
pub(crate) struct Peeked {
    pub records: Vec<SpooledRecord>,
    pub quarantined: Vec<(i64, u64)>,
}

/// The spool's open database.
pub(crate) struct Store {
    conn: Connection,
    /// Id of the next appended record: ids only grow, across removals and restarts.
    next_id: i64,
}

impl Store {
    /// Opens (creating if missing) the database at `path`.
    pub(crate) fn open(path: &Path) -> rusqlite::Result<Self> {
        let conn = connect(path)?;
        conn.execute_batch(SCHEMA)?;
        let mut store = Self { conn, next_id: 1 };
        store.next_id = store.highest_id()? + 1;
        Ok(store)
    }

    /// The highest id this database has used: held, quarantined or removed.
    pub(crate) fn highest_id(&self) -> rusqlite::Result<i64> {
        self.conn.query_row(
            "SELECT max(coalesce((SELECT max(id) FROM records), 0),
                        coalesce((SELECT max(id) FROM quarantine), 0),
                        coalesce((SELECT value FROM meta WHERE key = 'removed_through'), 0))",
            [],
            |r| r.get(0),
        )
    }

    /// Makes the next id at least `id + 1` (after a salvage).
    pub(crate) fn skip_ids_through(&mut self, id: i64) {
        self.next_id = self.next_id.max(id + 1);
    }

    pub(crate) fn conn(&self) -> &Connection {
        &self.conn
    }

    pub(crate) fn conn_mut(&mut self) -> &mut Connection {
        &mut self.conn
    }

    /// `PRAGMA quick_check`: `None` when the file's structure is sound, else the first
    /// problem found. O(size of the file); a drained spool is small.
    pub(crate) fn quick_check(&self) -> rusqlite::Result<Option<String>> {
        let first: String = self
            .conn
            .query_row("PRAGMA quick_check(1)", [], |r| r.get(0))?;
        Ok((first != "ok").then_some(first))
    }

    pub(crate) fn totals(&self) -> rusqlite::Result<Totals> {
        let highest_id = self.highest_id()?;
        self.conn.query_row(
            "SELECT count(*), coalesce(sum(length(payload)), 0),
                    (SELECT spooled_at FROM records ORDER BY id LIMIT 1),
                    (SELECT count(*) FROM quarantine)
             FROM records",
            [],
            |r| {
                let records: i64 = r.get(0)?;
                let payload: i64 = r.get(1)?;
                Ok(Totals {
                    records: records as u64,
                    bytes: payload as u64 + records as u64 * RECORD_OVERHEAD,
                    oldest_ms: r.get(2)?,
                    quarantined: r.get::<_, i64>(3)? as u64,
                    highest_id,
                })
            },
        )
    }

    /// `spooled_at` of the oldest record held.
    pub(crate) fn oldest(&self) -> rusqlite::Result<Option<i64>> {
        self.conn
            .query_row(
                "SELECT spooled_at FROM records ORDER BY id LIMIT 1",
                [],
                |r| r.get(0),
            )
            .optional()
    }

    /// Runs `f` in the transaction of one group commit and commits it (one fsync).
    /// If `f` or the commit fails, nothing happened: the transaction is rolled back
    /// and the ids it handed out are handed out again (none was acknowledged).
    pub(crate) fn write_group<T>(
        &mut self,
        f: impl FnOnce(&mut Group<'_>) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut group = Group {
            tx: &tx,
            next_id: self.next_id,
        };
        let out = f(&mut group)?;
        let next_id = group.next_id;
        tx.commit()?;
        self.next_id = next_id;
        Ok(out)
    }

    /// Up to `max_records` records with ids above `after`, oldest first, at most
    /// `max_bytes` of payload (but always the first one, so that a large record cannot
    /// stall the drain).
    /// Records failing their checksum are moved to quarantine on the way; if every
    /// record read was, reads on, so that an empty answer means an empty spool.
    pub(crate) fn peek(
        &mut self,
        after: i64,
        max_records: usize,
        max_bytes: usize,
    ) -> rusqlite::Result<Peeked> {
        let mut peeked = Peeked::default();
        loop {
            let mut bad = Vec::new();
            let mut records = Vec::new();
            let mut bytes = 0usize;
            {
                let mut stmt = self.conn.prepare_cached(
                    "SELECT id, spooled_at, events, crc, payload FROM records WHERE id > ?1 \
                     ORDER BY id",
                )?;
                let mut rows = stmt.query([after])?;
                while records.len() < max_records.max(1) {
                    let Some(row) = rows.next()? else { break };
                    let id: i64 = row.get(0)?;
                    let Some(record) = verified(row, id) else {
                        let len = match row.get_ref(4)? {
                            ValueRef::Blob(b) | ValueRef::Text(b) => b.len(),
                            _ => 0,
                        };
                        bad.push((id, record_cost(len)));
                        continue;
                    };
                    if !records.is_empty() && bytes + record.payload.len() > max_bytes {
                        break;
                    }
                    bytes += record.payload.len();
                    records.push(record);
                }
            }
            if !bad.is_empty() {
                self.quarantine(&bad, "checksum mismatch")?;
                peeked.quarantined.extend(bad.iter().copied());
            }
            if !records.is_empty() || bad.is_empty() {
                peeked.records = records;
                return Ok(peeked);
            }
        }
    }

    /// Moves records to the quarantine table, in one transaction.
    fn quarantine(&mut self, ids: &[(i64, u64)], reason: &str) -> rusqlite::Result<()> {
        let now = unix_ms();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        for &(id, _) in ids {
            tx.execute(
                "INSERT OR REPLACE INTO quarantine
                     (id, spooled_at, events, crc, payload, reason, quarantined_at)
                 SELECT id, spooled_at, events, crc, payload, ?2, ?3 FROM records WHERE id = ?1",
                params![id, reason, now],
            )?;
            tx.execute("DELETE FROM records WHERE id = ?1", [id])?;
            tracing::warn!(
                record = id,
                reason,
                "spool: record moved to the quarantine table"
            );
        }
        tx.commit()
    }

    /// Whether free pages should be handed back to the filesystem: many, and the
    /// spool holds little (see [`VACUUM_MIN_FREE_BYTES`]).
    pub(crate) fn vacuum_due(&self, held_bytes: u64) -> rusqlite::Result<bool> {
        let free_bytes = self.free_pages()? as u64 * PAGE_SIZE as u64;
        Ok(free_bytes >= VACUUM_MIN_FREE_BYTES && free_bytes >= 4 * held_bytes)
    }

    /// One bounded step of handing free pages back: at most [`VACUUM_STEP_PAGES`]
    /// (moving as many live pages from the end of the file into free slots), in its own
    /// small commit, so that the appends waiting on this thread wait for one step, not
    /// for the whole file (a drained outage's spool is gigabytes: in one go that took
    /// 18 s, and every acknowledgement waited). Returns the bytes released and whether
    /// more steps are due (free pages above a quarter of [`VACUUM_MIN_FREE_BYTES`]);
    /// after the last step the WAL is checkpointed, so the file shrinks now rather than
    /// at the next automatic checkpoint.
    pub(crate) fn vacuum_step(&mut self) -> rusqlite::Result<(u64, bool)> {
        let free = self.free_pages()?;
        let step = free.min(VACUUM_STEP_PAGES);
        if step > 0 {
            // The pragma frees one page per result row: step it to the end.
            // (A pragma's argument cannot be a bound parameter.)
            let mut vacuum = self
                .conn
                .prepare(&format!("PRAGMA incremental_vacuum({step})"))?;
            let mut rows = vacuum.query([])?;
            while rows.next()?.is_some() {}
        }
        // Down to a quarter of the threshold: the pages a steady drain frees and reuses
        // (a few MiB per removal) would otherwise keep the steps going for ever.
        let more = ((free - step) * PAGE_SIZE) as u64 >= VACUUM_MIN_FREE_BYTES / 4;
        if !more {
            self.checkpoint()?;
        }
        Ok((step as u64 * PAGE_SIZE as u64, more))
    }

    fn free_pages(&self) -> rusqlite::Result<i64> {
        self.conn
            .query_row("PRAGMA freelist_count", [], |r| r.get(0))
    }

    /// Copies the WAL into the database file and truncates it: a clean shutdown
    /// leaves one file.
    pub(crate) fn checkpoint(&self) -> rusqlite::Result<()> {
        self.conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
    }
}

/// The record in `row` if its fields have their types and its checksum matches.
fn verified(row: &rusqlite::Row<'_>, id: i64) -> Option<SpooledRecord> {
    let spooled_at: i64 = row.get(1).ok()?;
    let events = u32::try_from(row.get::<_, i64>(2).ok()?).ok()?;
    let crc = u32::try_from(row.get::<_, i64>(3).ok()?).ok()?;
    let payload: Vec<u8> = row.get(4).ok()?;
    (checksum(&payload, id, spooled_at, events) == crc).then_some(SpooledRecord {
        id: RecordId(id),
        spooled_at_ms: spooled_at,
        events,
        payload,
    })
}

/// One group commit's transaction ([`Store::write_group`]): appends and removals
/// in arrival order.
pub(crate) struct Group<'a> {
    tx: &'a rusqlite::Transaction<'a>,
    next_id: i64,
}

impl Group<'_> {
    /// Inserts one record; `digest` already holds its payload's CRC.
    pub(crate) fn append(
        &mut self,
        spooled_at: i64,
        events: u32,
        digest: Digest<'static, u32>,
        payload: &[u8],
    ) -> rusqlite::Result<RecordId> {
        let id = self.next_id;
        let crc = seal(digest, id, spooled_at, events);
        self.tx
            .prepare_cached(INSERT_SQL)?
            .execute(params![id, spooled_at, events, crc, payload])?;
        self.next_id += 1;
        Ok(RecordId(id))
    }

    /// Removes every record with an id up to `through` (clamped to the last id
    /// handed out, so that later records never get an id already removed).
    pub(crate) fn remove_through(&mut self, through: RecordId) -> rusqlite::Result<Removed> {
        let through = through.0.min(self.next_id - 1);
        let (records, events, payload): (i64, i64, i64) = self.tx.query_row(
            "SELECT count(*), coalesce(sum(events), 0), coalesce(sum(length(payload)), 0)
             FROM records WHERE id <= ?1",
            [through],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?;
        if records > 0 {
            self.tx
                .execute("DELETE FROM records WHERE id <= ?1", [through])?;
        }
        self.tx.execute(
            "INSERT INTO meta (key, value) VALUES ('removed_through', ?1)
             ON CONFLICT (key) DO UPDATE SET value = max(value, excluded.value)",
            [through],
        )?;
        Ok(Removed {
            records: records as u64,
            events: events as u64,
            bytes: payload as u64 + records as u64 * RECORD_OVERHEAD,
        })
    }
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
