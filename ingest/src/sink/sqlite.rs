//! Embedded SQLite sink (the default when no ClickHouse is configured): its own
//! database file, WAL journal, primary-key dedup with `INSERT OR IGNORE`, and one
//! transaction per write holding the events and the batch records (`view_batches`).
//!
//! Writes go through `rusqlite` on one dedicated connection: the hot path binds
//! each row into one prepared statement, with no per-statement hop to a worker
//! thread and no SQL text built per write (through sqlx's async driver the sink
//! spent about 4 µs of CPU per row; docs/benchmarks.md). The read pool (sqlx) is for
//! the `analytics` crate, which owns every read; it also writes its derived views
//! through [`SqliteSink::write_transaction`], on the same single writer.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rusqlite::{ErrorCode, TransactionBehavior};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};

use super::{EventSink, SinkError};
use crate::record_dims::{DimsMemory, RecordDims};
use crate::row::{BatchRecord, EventRow, SinkWrite};

/// File name of the telemetry database inside the data directory.
pub const DB_FILE_NAME: &str = "telemetry.db";

/// The one statement of the write path, prepared once per connection.
const INSERT_SQL: &str = "INSERT OR IGNORE INTO telemetry_events \
     (owner, session_id, ts, type, payload, content_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6)";

/// The batch record statement of the write path.
const INSERT_BATCH_SQL: &str = "INSERT INTO view_batches \
     (owner, session_id, first_ts, written_at, dims) VALUES (?1, ?2, ?3, ?4, ?5)";

/// Page size of new files: SQLite's default, set explicitly. A commit writes every
/// page it touched to the WAL, and with rows clustered by session a commit touches
/// about one leaf page per session in it, so WAL volume is proportional to the
/// page size. With 16 KiB pages the WAL grew by ~190 MB/s at 117k events/s, and
/// the checkpoints that volume needs put p99 latency over 50 ms
/// (docs/benchmarks.md). An existing file keeps the page size it was created with.
const PAGE_SIZE: u32 = 4096;

/// How long a write waits for a lock held by another connection (in 1 ms polls,
/// see [`wait_for_write_lock`]).
const WRITE_BUSY_POLLS: i32 = 10_000;

/// How long a RESTART checkpoint waits for the write in progress and for readers
/// of older snapshots (1 ms polls). It holds new writes while it waits, so it
/// gives up early (SQLite then reports it busy) and is tried again later.
const RESTART_BUSY_POLLS: i32 = 50;

/// Pause after a RESTART checkpoint that gave up, during which only passive
/// checkpoints run (a long read would otherwise make every commit wait 50 ms).
const RESTART_BACKOFF: Duration = Duration::from_secs(1);

/// How long a reader waits for a lock.
const READ_BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// WAL size past which the checkpoint thread runs a RESTART checkpoint. Passive
/// checkpoints never block a write, and when one finishes before the next write
/// begins, that write starts the WAL file from the beginning again. A writer busy
/// without a pause never leaves such a gap, so the WAL file would grow without
/// bound; RESTART waits for the write in progress and holds the next one while it
/// copies the few frames the passive checkpoints left (measured: about 25 ms, once
/// every 20 s or more at full load, with no reads running; at most ~50 ms).
const WAL_RESTART_BYTES: i64 = 256 << 20;

/// WAL size at which SQLite's own auto-checkpoint (in the committing write) would
/// run: a backstop that only acts if the checkpoint thread cannot keep up.
const WAL_AUTOCHECKPOINT_BYTES: i64 = 1 << 30;

/// How hard a commit is pushed to disk before a write returns `Ok`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Durability {
    /// `synchronous=FULL`: the WAL is fsynced at every commit. An acknowledged
    /// batch survives SIGKILL, a kernel crash and power loss. The default.
    #[default]
    Full,
    /// `synchronous=NORMAL`: no fsync at commit (only at checkpoints). An
    /// acknowledged batch survives SIGKILL of the process (the WAL frames are in
    /// the OS page cache once COMMIT returns), but the last commits can be lost on
    /// power loss or a kernel crash. The database stays consistent either way.
    Normal,
}

impl Durability {
    fn pragma_value(self) -> &'static str {
        match self {
            Durability::Full => "FULL",
            Durability::Normal => "NORMAL",
        }
    }
}

/// Options of [`SqliteSink::open_with`].
#[derive(Debug, Clone, Copy, Default)]
pub struct SqliteOptions {
    /// Commit durability (default [`Durability::Full`]).
    pub durability: Durability,
}

/// Telemetry storage in an embedded SQLite file.
///
/// Writes go through one dedicated connection (SQLite has a single writer anyway,
/// and one connection keeps its page cache and prepared statement warm across
/// writes); reads use a separate small read-only pool and never wait for a write
/// (WAL).
#[derive(Debug, Clone)]
pub struct SqliteSink {
    writer: Arc<Mutex<rusqlite::Connection>>,
    /// Wakes the checkpoint thread after a commit (see [`checkpoint_loop`]).
    checkpoints: SyncSender<()>,
    /// Set once a commit found the checkpoint thread gone (logged once).
    checkpointer_gone: Arc<AtomicBool>,
    readers: SqlitePool,
    /// Which records' `dims` an earlier stored record already says ([`DimsMemory`]).
    dims: Arc<DimsMemory>,
    /// Ingest writes waiting for the write connection or running on it: the refresher's
    /// transactions let them go first ([`SqliteSink::write_transaction`]).
    ingesting: Arc<AtomicUsize>,
    /// The write connection's `synchronous` level for ingest commits.
    durability: Durability,
    /// Set when a refresher transaction lowered the write connection's `synchronous` level
    /// ([`SqliteSink::write_transaction`]); read and written only under the writer's lock.
    /// The next use of the connection ([`SqliteSink::with_writer`]) sets the level back
    /// before anything else, whether that transaction committed, failed or panicked: an
    /// ingest commit never runs below `durability`.
    synchronous_lowered: Arc<AtomicBool>,
    /// How long the last refresher transaction held the write connection, in µs.
    refresher_hold_us: Arc<AtomicU64>,
    /// The WAL file, which a refresher transaction fsyncs after it let go of the writer.
    wal: Arc<PathBuf>,
}

/// How long one of the refresher's transactions waits for ingest writes to leave the write
/// connection before it takes it anyway (it waits in 1 ms polls): [`YIELD_PER_HOLD`] times
/// the hold of the refresher's transaction before it, within 1 ms and this bound.
const YIELD_TO_INGEST: Duration = Duration::from_millis(50);

/// While ingest keeps the writer busy, the refresher's share of it is one part in
/// `YIELD_PER_HOLD + 1`. A share rather than a fixed wait: a step is many short
/// transactions, and a fixed 50 ms before each made a step at full ingest last seconds.
const YIELD_PER_HOLD: u32 = 4;

/// Counts an ingest write in [`SqliteSink::ingesting`] while it lives.
struct Ingesting(Arc<AtomicUsize>);

impl Ingesting {
    fn new(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Ingesting(count.clone())
    }
}

impl Drop for Ingesting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl SqliteSink {
    /// Opens (creating if missing) `<data_dir>/telemetry.db` with default options
    /// and applies migrations.
    pub async fn open_in_dir(data_dir: &Path) -> Result<Self, SinkError> {
        Self::open_in_dir_with(data_dir, SqliteOptions::default()).await
    }

    /// Like [`SqliteSink::open_in_dir`] with explicit options.
    pub async fn open_in_dir_with(
        data_dir: &Path,
        options: SqliteOptions,
    ) -> Result<Self, SinkError> {
        std::fs::create_dir_all(data_dir).map_err(|e| {
            SinkError::Permanent(format!(
                "cannot create data dir {}: {e}",
                data_dir.display()
            ))
        })?;
        Self::open_with(&data_dir.join(DB_FILE_NAME), options).await
    }

    /// Opens (creating if missing) the database file at `path` with default
    /// options and applies migrations.
    pub async fn open(path: &Path) -> Result<Self, SinkError> {
        Self::open_with(path, SqliteOptions::default()).await
    }

    /// Opens (creating if missing) the database file at `path` and applies migrations.
    pub async fn open_with(path: &Path, opts: SqliteOptions) -> Result<Self, SinkError> {
        let owned = path.to_owned();
        let (writer, page_size, checkpointer) = run_blocking(move || {
            let (writer, page_size) = open_writer(&owned, opts.durability)?;
            let checkpointer = rusqlite::Connection::open(&owned)?;
            checkpointer.busy_handler(Some(wait_for_checkpoint))?;
            // The checkpoint fsyncs the database file before the WAL may be
            // started over (FULL or NORMAL; never OFF, which could lose rows).
            checkpointer.execute_batch(&format!(
                "PRAGMA synchronous = {}",
                opts.durability.pragma_value()
            ))?;
            Ok((writer, page_size, checkpointer))
        })
        .await
        .map_err(|e| SinkError::Permanent(format!("cannot open {}: {e}", path.display())))?;
        let (checkpoints, wake) = sync_channel(1);
        std::thread::Builder::new()
            .name("sqlite-checkpoint".to_owned())
            .spawn(move || checkpoint_loop(&checkpointer, WAL_RESTART_BYTES / page_size, &wake))
            .map_err(|e| SinkError::Permanent(format!("cannot start checkpoint thread: {e}")))?;
        let options = SqliteConnectOptions::from_str("sqlite:")
            .map_err(map_err)?
            .filename(path)
            .read_only(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(READ_BUSY_TIMEOUT)
            .pragma("temp_store", "memory");
        let readers = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await
            .map_err(map_err)?;
        Ok(Self {
            writer: Arc::new(Mutex::new(writer)),
            checkpoints,
            checkpointer_gone: Arc::new(AtomicBool::new(false)),
            readers,
            dims: Arc::default(),
            ingesting: Arc::default(),
            durability: opts.durability,
            synchronous_lowered: Arc::default(),
            refresher_hold_us: Arc::default(),
            wal: Arc::new(wal_path(path)),
        })
    }

    /// The read pool (read-only connections), e.g. for analytics queries.
    pub fn pool(&self) -> &SqlitePool {
        &self.readers
    }

    /// Runs `f` in one `BEGIN IMMEDIATE … COMMIT` transaction on the write connection
    /// (the store's single writer, shared with ingest), on tokio's blocking pool:
    /// committed when `f` returns `Ok`, rolled back otherwise. For the analytics
    /// refresher's writes, which are derived from what ingest stored; keep `f` short,
    /// ingest writes wait for it.
    ///
    /// It first lets the ingest writes waiting or running go (for up to [`YIELD_PER_HOLD`]
    /// times the previous one's hold, at most [`YIELD_TO_INGEST`]): a refresher step's
    /// transactions, taken one after the other while ingest also needs most of the writer,
    /// queued acknowledgements behind each other for the whole step, and put p99 at half
    /// the peak rate at 32–40 ms where it is 5–7 ms with the refresher off
    /// (docs/benchmarks.md, "SQLite's p99 at half rate: the refresher's step, and the
    /// writer it yields").
    ///
    /// Its commit is fsync'd after the writer is let go: the transaction commits with
    /// `synchronous = NORMAL` (no fsync), and then fsyncs the WAL itself before it returns.
    /// The fsync, about 4 ms on this machine kind, was half of the time a refresher
    /// transaction held the writer while acknowledgements waited; and without the fsync of
    /// its own, the next ingest commit paid for the refresher's pages (a 49 ms commit after
    /// a step's run of transactions). Should power fail between its commit and its fsync,
    /// WAL recovery keeps a prefix of the commits: what rolls back is derived data and the
    /// refresher's watermark with it (a later commit), which the refresher derives again.
    pub async fn write_transaction<T, F>(&self, f: F) -> Result<T, SinkError>
    where
        T: Send + 'static,
        F: FnOnce(&rusqlite::Transaction<'_>) -> rusqlite::Result<T> + Send + 'static,
    {
        let last_hold = Duration::from_micros(self.refresher_hold_us.load(Ordering::Relaxed));
        let deadline = tokio::time::Instant::now()
            + (last_hold * YIELD_PER_HOLD).clamp(Duration::from_millis(1), YIELD_TO_INGEST);
        while self.ingesting.load(Ordering::SeqCst) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let lower = self.durability == Durability::Full;
        let lowered = self.synchronous_lowered.clone();
        let hold_us = self.refresher_hold_us.clone();
        let out = self
            .with_writer(move |conn| {
                let held = Instant::now();
                if lower {
                    // Set back by the next `with_writer`, before its work.
                    lowered.store(true, Ordering::Relaxed);
                    conn.pragma_update(None, "synchronous", Durability::Normal.pragma_value())?;
                }
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let out = f(&tx)?;
                tx.commit()?;
                hold_us.store(held.elapsed().as_micros() as u64, Ordering::Relaxed);
                Ok(out)
            })
            .await?;
        if lower {
            let wal = self.wal.clone();
            tokio::task::spawn_blocking(move || std::fs::File::open(&*wal)?.sync_data())
                .await
                .map_err(|e| SinkError::Permanent(format!("sqlite wal fsync task: {e}")))?
                .map_err(|e| SinkError::Retryable(format!("sqlite: fsync of the WAL: {e}")))?;
        }
        Ok(out)
    }

    /// `journal_mode` and `synchronous` (0 off, 1 normal, 2 full, 3 extra) of the
    /// write connection: what decides whether an acknowledged write is durable.
    pub async fn write_settings(&self) -> Result<(String, i64), SinkError> {
        self.with_writer(|conn| {
            let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
            let sync: i64 = conn.query_row("PRAGMA synchronous", [], |r| r.get(0))?;
            Ok((mode, sync))
        })
        .await
    }

    /// Closes the read pool and copies the whole WAL back into the database file
    /// (truncating it). The write connection and the checkpoint thread end when the
    /// last clone of the sink is dropped.
    pub async fn close(&self) {
        self.readers.close().await;
        let _ = self
            .with_writer(|conn| conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)"))
            .await;
    }

    /// Runs `f` on the write connection on tokio's blocking pool.
    async fn with_writer<T, F>(&self, f: F) -> Result<T, SinkError>
    where
        T: Send + 'static,
        F: FnOnce(&mut rusqlite::Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let writer = self.writer.clone();
        let lowered = self.synchronous_lowered.clone();
        let durability = self.durability;
        run_blocking(move || {
            // A panic while holding the lock leaves the connection usable: an
            // unfinished transaction was rolled back when it was dropped.
            let mut conn = writer
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            // The level a refresher transaction lowered for itself.
            if lowered.load(Ordering::Relaxed) {
                conn.pragma_update(None, "synchronous", durability.pragma_value())?;
                lowered.store(false, Ordering::Relaxed);
            }
            f(&mut conn)
        })
        .await
    }
}

/// The WAL file of the database at `path` (SQLite names it so).
fn wal_path(path: &Path) -> PathBuf {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    wal.into()
}

/// Runs blocking SQLite work off the async threads.
async fn run_blocking<T, F>(f: F) -> Result<T, SinkError>
where
    T: Send + 'static,
    F: FnOnce() -> rusqlite::Result<T> + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result.map_err(map_write_err),
        // A panic is a bug: retrying the same rows would hit it again.
        Err(e) if e.is_panic() => Err(SinkError::Permanent(format!("sqlite task panicked: {e}"))),
        Err(e) => Err(SinkError::Retryable(format!("sqlite task cancelled: {e}"))),
    }
}

/// Opens the write connection, sets the journal up and applies migrations.
/// Returns the connection and the file's page size.
fn open_writer(
    path: &Path,
    durability: Durability,
) -> rusqlite::Result<(rusqlite::Connection, i64)> {
    let mut conn = rusqlite::Connection::open(path)?;
    conn.busy_handler(Some(wait_for_write_lock))?;
    // Only takes effect on a new file, so before the journal mode and any table.
    conn.execute_batch(&format!("PRAGMA page_size = {PAGE_SIZE}"))?;
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CANTOPEN),
            Some(format!("journal_mode is {mode}, WAL required")),
        ));
    }
    // Durability: a batch is acknowledged (204) only after COMMIT returns. In WAL
    // mode, synchronous=NORMAL already survives a SIGKILL of this process (the
    // committed WAL frames are in the OS page cache), but can lose the last
    // commits on power loss or a kernel crash. FULL (the default) fsyncs the WAL at
    // every commit, so an acknowledged batch survives those too. The group-commit
    // writer makes that one fsync per gathered write, not one per request.
    // Checkpoints run on their own thread (`checkpoint_loop`), not in the commit
    // of whichever write crosses SQLite's auto-checkpoint threshold; that threshold
    // is moved out of the way to a backstop.
    // The page cache is 16 MiB: the tables outgrow any cache within seconds at full
    // ingest, and 64 MiB (the value until issue 32) measured no faster, at 50-event
    // batches or in the fleet's shape, for 50 MiB more RSS (docs/benchmarks.md, "Memory
    // at full ingest").
    let page_size: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
    conn.execute_batch(&format!(
        "PRAGMA synchronous = {};
         PRAGMA temp_store = memory;
         PRAGMA cache_size = -16384;
         PRAGMA wal_autocheckpoint = {};",
        durability.pragma_value(),
        WAL_AUTOCHECKPOINT_BYTES / page_size
    ))?;
    migrate(&mut conn)?;
    Ok((conn, page_size))
}

/// The one runner's rule (the `migrate` crate) for `migrations/telemetry-sqlite/`: this
/// file's tables, the `analytics` crate's included (`qoe_views`, its tags and
/// `qoe_refresh_state`, migrated here on its behalf). All in one IMMEDIATE transaction:
/// another process opening the file at once waits for the writer's lock, then finds
/// everything applied. A file changed since it was applied fails the open with the
/// runner's one line.
fn migrate(conn: &mut rusqlite::Connection) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS telemetry_migrations \
         (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL, checksum TEXT)",
    )?;
    // A table from before checksums (the runner before it) has no such column.
    let has_checksum: bool = tx.query_row(
        "SELECT EXISTS (SELECT 1 FROM pragma_table_info('telemetry_migrations') \
         WHERE name = 'checksum')",
        [],
        |r| r.get(0),
    )?;
    if !has_checksum {
        tx.execute_batch("ALTER TABLE telemetry_migrations ADD COLUMN checksum TEXT")?;
    }
    let applied = {
        let mut rows = tx.prepare("SELECT version, checksum FROM telemetry_migrations")?;
        let applied = rows
            .query_map([], |r| {
                Ok(migrate::Applied {
                    version: r.get(0)?,
                    checksum: r.get(1)?,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        applied
    };
    // The runner's refusal, carried through rusqlite's error as its own message.
    let plan = migrate::TELEMETRY_SQLITE.plan(&applied).map_err(|e| {
        rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ERROR),
            Some(e.to_string()),
        )
    })?;
    for m in &plan.pending {
        tx.execute_batch(m.sql)?;
        tx.execute(
            "INSERT INTO telemetry_migrations (version, name, applied_at, checksum) \
             VALUES (?1, ?2, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), ?3)",
            rusqlite::params![m.version, m.name, m.checksum()],
        )?;
    }
    for m in &plan.unrecorded {
        tx.execute(
            "UPDATE telemetry_migrations SET checksum = ?1 WHERE version = ?2 AND checksum IS NULL",
            rusqlite::params![m.checksum(), m.version],
        )?;
    }
    tx.commit()?;
    for m in plan.pending {
        tracing::info!(
            engine = "telemetry-sqlite",
            migration = m.name,
            "applied migration"
        );
    }
    Ok(())
}

/// Copies committed WAL frames back into the database file, off the write path:
/// woken after each commit (commits made during a checkpoint share the next one),
/// it runs a passive checkpoint, which never blocks a write, and, when the WAL has
/// grown past `restart_frames` ([`WAL_RESTART_BYTES`]) anyway, a RESTART one. Checkpointing at once
/// rather than every 100 ms or 1 s keeps the WAL short, so most writes restart it
/// and its fsyncs stay small: p99 at half the peak rate 8-11 ms instead of 36-59
/// ms (docs/benchmarks.md). Ends when the sink is dropped.
fn checkpoint_loop(conn: &rusqlite::Connection, restart_frames: i64, wake: &Receiver<()>) {
    // Columns: busy, frames in the WAL, frames checkpointed.
    let checkpoint = |mode: &str| -> rusqlite::Result<(bool, i64)> {
        conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |r| {
            Ok((r.get::<_, i64>(0)? != 0, r.get(1)?))
        })
    };
    let mut restart_not_before = Instant::now();
    while wake.recv().is_ok() {
        let frames = match checkpoint("PASSIVE") {
            Ok((_, frames)) => frames,
            Err(e) => {
                tracing::warn!(error = %e, "sqlite checkpoint failed");
                continue;
            }
        };
        if frames < restart_frames || Instant::now() < restart_not_before {
            continue;
        }
        match checkpoint("RESTART") {
            Ok((false, _)) => {}
            // A write or a read of an older snapshot outlasted the wait: the WAL
            // stays as it is until a later attempt.
            Ok((true, _)) => {
                tracing::debug!(frames, "sqlite RESTART checkpoint busy; retrying later");
                restart_not_before = Instant::now() + RESTART_BACKOFF;
            }
            Err(e) => {
                tracing::warn!(error = %e, "sqlite checkpoint failed");
                restart_not_before = Instant::now() + RESTART_BACKOFF;
            }
        }
    }
}

/// Busy handler of the write connection: retry every millisecond, up to
/// [`WRITE_BUSY_POLLS`] times. SQLite's own handler backs off to 100 ms sleeps,
/// so a write held by a RESTART checkpoint waited up to tens of ms after the
/// checkpoint had ended.
fn wait_for_write_lock(attempt: i32) -> bool {
    std::thread::sleep(Duration::from_millis(1));
    attempt < WRITE_BUSY_POLLS
}

/// Busy handler of the checkpoint connection: 1 ms polls, up to
/// [`RESTART_BUSY_POLLS`] times (only RESTART waits; PASSIVE never does).
fn wait_for_checkpoint(attempt: i32) -> bool {
    std::thread::sleep(Duration::from_millis(1));
    attempt < RESTART_BUSY_POLLS
}

/// Inserts `rows` and `batches` in one transaction; durable once it returns `Ok`.
fn write_rows(
    conn: &mut rusqlite::Connection,
    rows: &[EventRow],
    batches: &[BatchRecord],
    dims: &[RecordDims],
) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    {
        let mut insert = tx.prepare_cached(INSERT_SQL)?;
        // Insert in key order: consecutive rows land in the same B-tree leaf, so
        // a write touches (and journals) each page once. The order is stable, so
        // among rows with the same key the first submitted is inserted first and
        // wins (INSERT OR IGNORE), exactly as in submission order.
        for i in super::key_order(rows) {
            let r = &rows[i];
            insert.execute(rusqlite::params![
                &*r.owner,
                &*r.session_id,
                r.ts_ms,
                r.event_type.as_str(),
                r.payload,
                r.content_id,
            ])?;
        }
    }
    if !batches.is_empty() {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let mut insert = tx.prepare_cached(INSERT_BATCH_SQL)?;
        // In submission order: the rowid is the record's write sequence.
        for (b, d) in batches.iter().zip(dims) {
            insert.execute(rusqlite::params![
                &*b.owner,
                &*b.session_id,
                b.first_ts_ms,
                now_ms,
                d.stored(),
            ])?;
        }
    }
    // Durable once COMMIT returns (WAL + synchronous=FULL, see `open_writer`).
    // On any error above, dropping `tx` rolls the whole write back.
    tx.commit()
}

/// Classifies a rusqlite error as retryable or permanent.
fn map_write_err(e: rusqlite::Error) -> SinkError {
    let retryable = matches!(
        e.sqlite_error_code(),
        Some(
            ErrorCode::DatabaseBusy
                | ErrorCode::DatabaseLocked
                | ErrorCode::SystemIoFailure
                | ErrorCode::DiskFull
        )
    );
    let msg = format!("sqlite: {e}");
    if retryable {
        SinkError::Retryable(msg)
    } else {
        SinkError::Permanent(msg)
    }
}

/// Classifies a sqlx error on the telemetry file as retryable or permanent (the same
/// rule for every reader of it, e.g. analytics' queries).
pub fn classify_error(e: sqlx::Error) -> SinkError {
    map_err(e)
}

/// Classifies a rusqlite error on the telemetry file as retryable or permanent.
pub fn classify_write_error(e: rusqlite::Error) -> SinkError {
    map_write_err(e)
}

/// Classifies a sqlx error as retryable or permanent.
fn map_err(e: sqlx::Error) -> SinkError {
    let retryable = match &e {
        sqlx::Error::PoolTimedOut | sqlx::Error::Io(_) | sqlx::Error::PoolClosed => true,
        sqlx::Error::Database(db) => {
            // SQLITE_BUSY (5), SQLITE_LOCKED (6), SQLITE_IOERR (10), SQLITE_FULL (13)
            // and their extended codes (low byte is the primary code).
            let code = db.code().and_then(|c| c.parse::<i64>().ok()).unwrap_or(0) & 0xff;
            matches!(code, 5 | 6 | 10 | 13)
        }
        _ => false,
    };
    let msg = format!("sqlite: {e}");
    if retryable {
        SinkError::Retryable(msg)
    } else {
        SinkError::Permanent(msg)
    }
}

#[async_trait]
impl EventSink for SqliteSink {
    async fn write(&self, write: SinkWrite) -> Result<(), SinkError> {
        if write.is_empty() {
            return Ok(());
        }
        let dims = self.dims.for_write(&write.batches);
        let ingesting = Ingesting::new(&self.ingesting);
        let (batches, dims) = self
            .with_writer(move |conn| {
                write_rows(conn, &write.rows, &write.batches, &dims)?;
                Ok((write.batches, dims))
            })
            .await?;
        drop(ingesting);
        self.dims.stored(&batches, &dims);
        // A full channel means a checkpoint is already due. Should the thread be
        // gone, SQLite's auto-checkpoint backstop still bounds the WAL; say so once.
        if let Err(TrySendError::Disconnected(())) = self.checkpoints.try_send(()) {
            if !self.checkpointer_gone.swap(true, Ordering::Relaxed) {
                tracing::error!(
                    "sqlite checkpoint thread is gone; checkpoints now run in commits past 1 GiB of WAL"
                );
            }
        }
        Ok(())
    }

    async fn ping(&self) -> Result<(), SinkError> {
        sqlx::query("SELECT 1")
            .execute(&self.readers)
            .await
            .map(|_| ())
            .map_err(|e| SinkError::Retryable(format!("sqlite: {e}")))
    }

    fn name(&self) -> &'static str {
        "sqlite"
    }
}
