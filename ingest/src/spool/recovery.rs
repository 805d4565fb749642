//! Opening a spool left by a previous process, whatever state its files are in.
//!
//! The rules (each one log line, none an error that would stop start-up):
//! 1. **The WAL's tail.** SQLite replays the write-ahead log up to its last commit
//!    whose frames' checksums hold, and ignores the rest: a commit cut short by a
//!    crash or a power loss (never acknowledged: the acknowledgement waits for the
//!    fsync after the commit frame), or garbage appended. The WAL is then copied into
//!    the database and truncated; the bytes it had past its last commit are
//!    reported as cut, apart from whole frames of the WAL's earlier generations
//!    (the file is written over after each checkpoint), reported as stale.
//! 2. **The database file's tail.** Bytes past the database's last page (garbage
//!    appended) are cut.
//! 3. **Damage inside.** `PRAGMA quick_check` (or any read) finding the file
//!    damaged (a truncated file, overwritten pages) moves `spool.db` and its WAL
//!    aside into `damaged-<unix ms>/` and rebuilds the spool from every record still
//!    readable, in order; the ids that could not be read become rows of the
//!    quarantine table (no payload), counted like records failing their checksum.
//! 4. **A record failing its checksum** is moved to the quarantine table when a
//!    peek reaches it (not here: that would read the whole spool at every start).

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};

use rusqlite::types::Value;
use rusqlite::{params, Connection, OptionalExtension};

use super::store::{connect, is_damage, unix_ms, Store, DB_FILE, WAL_FILE};
use super::{RecordId, SpoolError};

/// SQLite's WAL header and frame header sizes (sqlite.org/fileformat2.html §4.1).
const WAL_HEADER: u64 = 32;
const WAL_FRAME_HEADER: u64 = 24;

/// Records salvaged per transaction when rebuilding (bounds the WAL's growth).
const SALVAGE_CHUNK: usize = 4096;

/// Ids probed one by one past the last readable one, when the highest id of a
/// damaged file cannot be read either.
const PROBE_LIMIT: i64 = 1 << 16;

/// What opening the spool found and repaired.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Bytes of the WAL past its last intact commit, cut: a commit cut short, or
    /// garbage. Frames of earlier generations are not counted here.
    pub wal_bytes_cut: u64,
    /// Bytes of the WAL past its last intact commit that are whole frames of one of
    /// its earlier generations: the file is reused from its start after each
    /// checkpoint (`journal_size_limit`, store.rs), so a crash leaves such frames
    /// behind the last commit. SQLite never replays them (their salts differ).
    pub wal_stale_bytes: u64,
    /// Bytes of the database file past its last page, cut.
    pub db_bytes_cut: u64,
    /// Set when the database was damaged and rebuilt from what could be read.
    pub rebuilt: Option<Rebuild>,
}

/// A rebuild of a damaged database ([`Recovery::rebuilt`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rebuild {
    /// What SQLite reported.
    pub cause: String,
    /// Where the damaged files were moved (kept for an operator; never read again).
    pub moved_to: PathBuf,
    /// Records copied into the new database.
    pub salvaged: u64,
    /// Records known to have been held that could not be read (now quarantine rows).
    pub unreadable: u64,
    /// Set when the highest id could not be read and reads failed after this id:
    /// records past it may have been held; how many is unknown.
    pub tail_lost_after: Option<RecordId>,
}

/// Opens the spool's database in `dir`, repairing it as the module doc says.
pub(crate) fn open_store(dir: &Path) -> Result<(Store, Recovery), SpoolError> {
    let db = dir.join(DB_FILE);
    let wal = dir.join(WAL_FILE);
    let wal_before = file_len(&wal)?;
    let db_before = file_len(&db)?;
    // Read before the replay, which truncates the WAL.
    let salts = WalSalts::read(&wal)?;
    let mut recovery = Recovery::default();
    let cause = match replay_wal(&db) {
        Ok(replayed) => {
            let ps = replayed.page_size;
            // SQLite writes the WAL's header with its first frame: a WAL without an
            // intact commit has nothing worth keeping.
            let valid_wal = if replayed.frames > 0 {
                WAL_HEADER + replayed.frames * (WAL_FRAME_HEADER + ps)
            } else {
                0
            };
            recovery.wal_stale_bytes = salts.map_or(0, |s| s.stale_bytes(replayed.frames));
            recovery.wal_bytes_cut = wal_before
                .saturating_sub(valid_wal)
                .saturating_sub(recovery.wal_stale_bytes);
            if recovery.wal_stale_bytes > 0 {
                tracing::info!(
                    bytes = recovery.wal_stale_bytes,
                    file = %wal.display(),
                    "spool: dropped the frames of earlier generations after the last commit \
                     of the write-ahead log (the file is reused; SQLite ignores them)"
                );
            }
            if recovery.wal_bytes_cut > 0 {
                tracing::warn!(
                    bytes = recovery.wal_bytes_cut,
                    file = %wal.display(),
                    "spool: cut the bytes after the last commit of the write-ahead log \
                     (a write cut short by a crash or power loss, or garbage)"
                );
            }
            // An empty database (no page yet) has nothing to cut against.
            let pages_len = replayed.page_count * ps;
            if pages_len > 0 {
                if file_len(&db)? > pages_len {
                    cut_file(&db, pages_len)?;
                }
                // Measured against the length before the replay: SQLite's checkpoint
                // cuts such garbage itself when it copies WAL frames.
                recovery.db_bytes_cut = db_before.saturating_sub(pages_len);
            }
            if recovery.db_bytes_cut > 0 {
                tracing::warn!(
                    bytes = recovery.db_bytes_cut,
                    file = %db.display(),
                    "spool: cut the bytes after the last page of the database file (garbage)"
                );
            }
            match Store::open(&db).and_then(|s| s.quick_check().map(|c| (s, c))) {
                Ok((store, None)) => return Ok((store, recovery)),
                Ok((store, Some(problem))) => {
                    drop(store);
                    problem
                }
                Err(e) if is_damage(&e) => e.to_string(),
                Err(e) => return Err(open_error(&db, e)),
            }
        }
        Err(e) if is_damage(&e) => e.to_string(),
        Err(e) => return Err(open_error(&db, e)),
    };
    let (store, rebuild) = rebuild(dir, cause)?;
    recovery.rebuilt = Some(rebuild);
    Ok((store, recovery))
}

/// Moves the damaged database aside and rebuilds it from what can still be read.
/// Also called by the spool's thread when an operation meets damage; the caller
/// has closed its connection.
pub(crate) fn rebuild(dir: &Path, cause: String) -> Result<(Store, Rebuild), SpoolError> {
    let aside = dir.join(format!("damaged-{}", unix_ms()));
    fs::create_dir(&aside).map_err(|e| SpoolError::io(&aside, e))?;
    for name in [DB_FILE, WAL_FILE] {
        let from = dir.join(name);
        if from.exists() {
            fs::rename(&from, aside.join(name)).map_err(|e| SpoolError::io(&from, e))?;
        }
    }
    sync_dir(dir)?;
    let db = dir.join(DB_FILE);
    let mut store = Store::open(&db).map_err(|e| open_error(&db, e))?;
    let salvage = match open_damaged(&aside.join(DB_FILE)) {
        Ok(old) => salvage(&old, &mut store).map_err(|e| open_error(&db, e))?,
        Err(_) => Salvage::default(),
    };
    let rebuild = Rebuild {
        cause,
        moved_to: aside,
        salvaged: salvage.copied,
        unreadable: salvage.unreadable,
        tail_lost_after: salvage.tail_lost_after,
    };
    tracing::error!(
        cause = %rebuild.cause,
        salvaged = rebuild.salvaged,
        unreadable = rebuild.unreadable,
        tail_lost_after = ?rebuild.tail_lost_after.map(|id| id.0),
        moved_to = %rebuild.moved_to.display(),
        "spool: the database file was damaged; rebuilt from the records still readable, \
         the damaged files kept aside"
    );
    Ok((store, rebuild))
}

/// How many generations back a frame's salt may be to count as stale
/// ([`Recovery::wal_stale_bytes`]). The WAL is cut back to `journal_size_limit` at
/// each restart, and generations are about the same length (one auto-checkpoint),
/// so the frames behind the last commit are of the last few; the window keeps the
/// chance that garbage passes for them at 2^10 in 2^32 per frame.
const STALE_GENERATIONS: u32 = 1 << 10;

/// The salt-1 of a WAL's header and of each whole frame in the file: SQLite adds
/// one to it at each restart of the WAL, and every frame carries its generation's
/// (sqlite.org/fileformat2.html §4.1).
struct WalSalts {
    header: u32,
    frames: Vec<u32>,
    frame_len: u64,
}

impl WalSalts {
    /// `None` when the file is missing or does not start with a WAL header.
    fn read(wal: &Path) -> Result<Option<Self>, SpoolError> {
        use std::os::unix::fs::FileExt;
        let io = |e| SpoolError::io(wal, e);
        let file = match File::open(wal) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(e)),
        };
        let len = file.metadata().map_err(io)?.len();
        let mut header = [0u8; WAL_HEADER as usize];
        if len < WAL_HEADER {
            return Ok(None);
        }
        file.read_exact_at(&mut header, 0).map_err(io)?;
        let word =
            |b: &[u8], at: usize| u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let page_size = u64::from(word(&header, 8));
        let magic_ok = matches!(word(&header, 0), 0x377f_0682 | 0x377f_0683);
        if !magic_ok || !(512..=65_536).contains(&page_size) || !page_size.is_power_of_two() {
            return Ok(None);
        }
        let frame_len = WAL_FRAME_HEADER + page_size;
        let mut frames = Vec::new();
        let mut frame_header = [0u8; WAL_FRAME_HEADER as usize];
        let mut at = WAL_HEADER;
        while at + frame_len <= len {
            file.read_exact_at(&mut frame_header, at).map_err(io)?;
            frames.push(word(&frame_header, 8));
            at += frame_len;
        }
        Ok(Some(Self {
            header: word(&header, 16),
            frames,
            frame_len,
        }))
    }

    /// Bytes of the frames after the first `valid` that belong to an earlier
    /// generation.
    fn stale_bytes(&self, valid: u64) -> u64 {
        let valid = usize::try_from(valid).unwrap_or(usize::MAX);
        let stale = self
            .frames
            .iter()
            .skip(valid)
            .filter(|&&salt| (1..=STALE_GENERATIONS).contains(&self.header.wrapping_sub(salt)))
            .count();
        stale as u64 * self.frame_len
    }
}

struct Replayed {
    frames: u64,
    page_size: u64,
    page_count: u64,
}

/// Opens the database once to replay its WAL, notes how many frames were intact,
/// copies them into the database file and truncates the WAL.
fn replay_wal(db: &Path) -> rusqlite::Result<Replayed> {
    let conn = connect(db)?;
    let page_size: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
    // A passive checkpoint reports the frames SQLite accepted (the TRUNCATE one
    // after it reports zeros once it has truncated).
    let frames: i64 = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get(1))?;
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")?;
    let page_count: i64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
    conn.close().map_err(|(_, e)| e)?;
    Ok(Replayed {
        frames: frames.max(0) as u64,
        page_size: page_size.max(0) as u64,
        page_count: page_count.max(0) as u64,
    })
}

/// Opens a damaged database to read what it can. `writable_schema` is SQLite's
/// switch for reading a file shorter than its header says (otherwise refused as
/// corrupt at the first statement); nothing is written through this connection.
fn open_damaged(db: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(db)?;
    conn.execute_batch(
        "PRAGMA locking_mode = EXCLUSIVE;
         PRAGMA writable_schema = ON;
         PRAGMA cell_size_check = ON;",
    )?;
    Ok(conn)
}

#[derive(Default)]
struct Salvage {
    copied: u64,
    unreadable: u64,
    tail_lost_after: Option<RecordId>,
}

/// A record as read from a damaged file, copied as it is (its checksum is checked
/// by the next peek, as any record's).
struct Raw {
    id: i64,
    values: [Value; 4],
}

const SELECT_RAW: &str = "SELECT id, spooled_at, events, crc, payload FROM records";

fn read_raw(row: &rusqlite::Row<'_>) -> rusqlite::Result<Raw> {
    Ok(Raw {
        id: row.get(0)?,
        values: [row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?],
    })
}

/// Copies every readable record of `old` into `new`, in id order. A forward scan
/// does the work; where it breaks (a damaged page), ids are probed one by one (a
/// point lookup only touches the pages on its path) until one reads again, and the
/// scan resumes after it. Ids in a failing probe's place are unreadable.
fn salvage(old: &Connection, new: &mut Store) -> rusqlite::Result<Salvage> {
    let removed: i64 = old
        .query_row(
            "SELECT value FROM meta WHERE key = 'removed_through'",
            [],
            |r| r.get(0),
        )
        .optional()
        .ok()
        .flatten()
        .unwrap_or(0);
    let last: Option<i64> = old
        .query_row("SELECT max(id) FROM records", [], |r| r.get(0))
        .ok()
        .flatten();
    let mut out = Salvage::default();
    let mut buffer: Vec<Raw> = Vec::new();
    let mut unreadable: Vec<i64> = Vec::new();
    let mut next = removed + 1;
    let mut highest = removed;
    loop {
        // Forward scan from `next` until its end or the first unreadable row.
        let scan_end = scan(old, next, |raw| {
            next = raw.id + 1;
            buffer.push(raw);
            if buffer.len() >= SALVAGE_CHUNK {
                out.copied += write_salvaged(new, &mut buffer, &mut unreadable)?;
            }
            Ok(())
        })?;
        if scan_end {
            break;
        }
        // Probe past the damage. Without the highest id, stop after PROBE_LIMIT ids
        // that gave nothing: the records after that, if any, are past knowing.
        let mut failed: Vec<i64> = Vec::new();
        let mut misses = 0;
        let mut resumed = false;
        while match last {
            Some(last) => next <= last,
            None => misses < PROBE_LIMIT,
        } {
            let probe = old
                .prepare_cached(&format!("{SELECT_RAW} WHERE id = ?1"))
                .and_then(|mut stmt| stmt.query_row([next], read_raw).optional());
            match probe {
                Ok(Some(raw)) => {
                    next = raw.id + 1;
                    buffer.push(raw);
                    resumed = true;
                    break;
                }
                Ok(None) => misses += 1,
                Err(_) => {
                    failed.push(next);
                    misses += 1;
                }
            }
            next += 1;
        }
        // Failures before a readable record, or up to the known highest id, were
        // records; failures at the end with no highest id may be past the last one.
        if resumed || last.is_some() {
            unreadable.extend(failed);
        } else if let Some(&first) = failed.first() {
            out.tail_lost_after = Some(RecordId(first - 1));
        }
        if !resumed {
            break;
        }
    }
    highest = highest.max(next - 1).max(last.unwrap_or(0));
    out.unreadable = unreadable.len() as u64;
    out.copied += write_salvaged(new, &mut buffer, &mut unreadable)?;
    copy_quarantine(old, new)?;
    new.conn().execute(
        "INSERT OR REPLACE INTO meta (key, value) VALUES ('removed_through', ?1)",
        [removed],
    )?;
    new.skip_ids_through(highest);
    Ok(out)
}

/// Scans `old`'s records from id `from` on, calling `copy` for each: `Ok(true)` at
/// the end of the table, `Ok(false)` where a read failed. Errors are `copy`'s.
fn scan(
    old: &Connection,
    from: i64,
    mut copy: impl FnMut(Raw) -> rusqlite::Result<()>,
) -> rusqlite::Result<bool> {
    let Ok(mut stmt) = old.prepare(&format!("{SELECT_RAW} WHERE id >= ?1 ORDER BY id")) else {
        return Ok(false);
    };
    let Ok(mut rows) = stmt.query([from]) else {
        return Ok(false);
    };
    loop {
        match rows.next() {
            Ok(Some(row)) => match read_raw(row) {
                Ok(raw) => copy(raw)?,
                Err(_) => return Ok(false),
            },
            Ok(None) => return Ok(true),
            Err(_) => return Ok(false),
        }
    }
}

/// Writes salvaged records, and the ids found unreadable, in one transaction.
fn write_salvaged(
    new: &mut Store,
    buffer: &mut Vec<Raw>,
    unreadable: &mut [i64],
) -> rusqlite::Result<u64> {
    let now = unix_ms();
    let tx = new.conn_mut().transaction()?;
    for raw in buffer.iter() {
        let [at, events, crc, payload] = &raw.values;
        tx.prepare_cached(
            "INSERT OR REPLACE INTO records (id, spooled_at, events, crc, payload)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?
        .execute(params![raw.id, at, events, crc, payload])?;
    }
    for id in unreadable.iter() {
        tx.prepare_cached(
            "INSERT OR REPLACE INTO quarantine (id, reason, quarantined_at)
             VALUES (?1, 'unreadable: the database file was damaged', ?2)",
        )?
        .execute(params![id, now])?;
    }
    tx.commit()?;
    let n = buffer.len() as u64;
    buffer.clear();
    Ok(n)
}

/// Copies the old quarantine table (best effort: it is a record of past damage).
fn copy_quarantine(old: &Connection, new: &mut Store) -> rusqlite::Result<()> {
    let Ok(mut stmt) = old.prepare(
        "SELECT id, spooled_at, events, crc, payload, reason, quarantined_at FROM quarantine",
    ) else {
        return Ok(());
    };
    let Ok(rows) = stmt.query_map([], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            [
                r.get::<_, Value>(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
            ],
        ))
    }) else {
        return Ok(());
    };
    let tx = new.conn_mut().transaction()?;
    for (id, [at, events, crc, payload, reason, when]) in rows.flatten() {
        tx.execute(
            "INSERT OR IGNORE INTO quarantine
                 (id, spooled_at, events, crc, payload, reason, quarantined_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![id, at, events, crc, payload, reason, when],
        )?;
    }
    tx.commit()
}

fn open_error(db: &Path, e: rusqlite::Error) -> SpoolError {
    match e {
        rusqlite::Error::SqliteFailure(f, msg) => {
            SpoolError::Store(std::sync::Arc::new(rusqlite::Error::SqliteFailure(
                f,
                Some(format!("{}: {}", db.display(), msg.unwrap_or_default())),
            )))
        }
        other => other.into(),
    }
}

/// The file's length, 0 if it does not exist.
fn file_len(path: &Path) -> Result<u64, SpoolError> {
    match fs::metadata(path) {
        Ok(m) => Ok(m.len()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(SpoolError::io(path, e)),
    }
}

fn cut_file(path: &Path, len: u64) -> Result<(), SpoolError> {
    let io = |e| SpoolError::io(path, e);
    let file = OpenOptions::new().write(true).open(path).map_err(io)?;
    file.set_len(len).map_err(io)?;
    file.sync_all().map_err(io)
}

/// fsyncs a directory, so that renames and new files in it survive a power loss.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), SpoolError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| SpoolError::io(dir, e))
}
