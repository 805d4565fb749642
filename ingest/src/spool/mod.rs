//! The durable local spool in front of ClickHouse (scale.md §3): telemetry batches
//! are acknowledged once they are fsync'd here, and a drainer moves them on in
//! order, removing them only after the next hop acknowledged them.
//!
//! # What it promises, and what it does not
//!
//! - [`Spool::append`] resolves `Ok` only once the record is committed to the
//!   spool's SQLite database **and that commit is fsync'd** (`synchronous = FULL`).
//!   A record acknowledged this way survives SIGKILL of the process, a kernel crash
//!   and a power loss of this machine. Appends are group-committed: one fsync
//!   covers every append that arrived while the previous one ran.
//! - Ids ([`RecordId`]) grow in the order records are committed, never go back
//!   (across removals and restarts) and never repeat. [`Spool::peek`] returns
//!   records oldest first, in id order.
//! - A record stays until [`Spool::remove_through`] removes it. A drainer that
//!   dies between the next hop's acknowledgement and the removal sends those
//!   records again after a restart: the next hop must absorb a repeat (ClickHouse
//!   does, through the batch's dedup key).
//! - It bounds itself: at most [`SpoolOptions::memory_bytes`] of records wait in
//!   memory for a commit (appends past that wait for room), and an append that
//!   would take what is held past [`SpoolOptions::max_bytes`] fails at once with
//!   [`SpoolError::Full`].
//! - **The disk is one machine's disk.** Nothing is replicated: a lost or
//!   destroyed disk loses what was spooled and not yet drained. The spool turns
//!   a ClickHouse outage into a delay, not a disk failure into nothing.
//!
//! # Files and record format
//!
//! The spool directory holds `spool.lock` (an exclusive `flock`, one process per
//! directory; it holds the holder's pid), `spool.db` and, while the spool is
//! open, its write-ahead log `spool.db-wal` (no `-shm`: the database is opened in
//! exclusive locking mode). "The spool file" is the pair: SQLite's WAL carries the
//! recent commits, each frame checksummed by SQLite, and is copied into
//! `spool.db` by checkpoints.
//!
//! Each record is one row of `records`: `id` (the rowid), `spooled_at` (Unix
//! milliseconds of its commit), `events` (the caller's count, summed in drain
//! statistics), `payload` (opaque bytes: the integration decides what a batch's
//! bytes are) and `crc`, CRC-32C of `payload ‖ id ‖ spooled_at ‖ events` (the
//! integers little-endian: i64, i64, u32), verified every time a record is read.
//! Each record counts `payload.len() + 64` bytes against `max_bytes`
//! ([`RECORD_OVERHEAD`]). `meta.removed_through` keeps ids growing across an
//! empty spool; `quarantine` keeps the records moved aside.
//!
//! # Recovery at open
//!
//! Never an error that stops start-up for damaged data (only for a directory
//! that cannot be used, or a lock held elsewhere); each repair is one log line
//! and is reported in [`Spool::recovery`]:
//! - bytes after the WAL's last intact commit (a commit cut short by a crash or a
//!   power loss, which was never acknowledged, or garbage) are cut; whole frames
//!   there of the WAL's earlier generations (the file is written over after each
//!   checkpoint) are dropped with them, and counted apart;
//! - bytes after the database file's last page (garbage) are cut;
//! - a database SQLite finds damaged (`PRAGMA quick_check`, or any read meeting a
//!   damaged page, also while running) is moved aside into `damaged-<ms>/` and
//!   rebuilt from every record still readable, in order; ids that could not be
//!   read are kept as quarantine rows without payload;
//! - a record failing its checksum is moved to the quarantine table when a peek
//!   reaches it, logged and counted ([`SpoolStats::quarantined`]), and the
//!   records after it are returned as usual.
//!
//! A damaged database loses the records SQLite can no longer reach: those on
//! damaged pages, and, when a page on the way from the table's root is damaged
//! (a file truncated by thousands of pages can cut those), every record below it.
//! The damaged file is kept for an operator (SQLite's `.recover`).
//!
//! Opening reads the whole file once (`quick_check`): milliseconds for a drained
//! spool, about a second per 200–300 MB held (docs/benchmarks.md). While running,
//! an operation that meets damage fails (nothing it did is acknowledged), the
//! thread rebuilds the database as above, and the next operation goes on.
//!
//! # Using it
//!
//! ```no_run
//! # async fn demo(dir: &std::path::Path) -> Result<(), ingest::spool::SpoolError> {
//! use ingest::spool::{Record, Spool};
//! let spool = Spool::open(dir, 4 << 30).await?;
//! // Request path: 204 once this returns Ok; Full -> 500.
//! spool.append(Record { events: 5, payload: b"...".to_vec() }).await?;
//! // Drainer: oldest first, one insert per peek, removal after the ack.
//! loop {
//!     let batch = spool.peek(10_000, 16 << 20).await?;
//!     let Some(last) = batch.last() else {
//!         spool.wait_for_records().await;
//!         continue;
//!     };
//!     // insert every record of `batch` downstream, in order (on failure: back
//!     // off and peek again, the same records come back), then:
//!     spool.remove_through(last.id).await?;
//! #   break;
//! }
//! spool.close().await?;
//! # Ok(()) }
//! ```
//!
//! The store is SQLite through `rusqlite` on the spool's own thread (the same
//! `libsqlite3-sys` as the rest of the workspace); docs/decisions.md says why and
//! what it costs.

mod error;
mod lock;
mod recovery;
mod store;
mod tail;
mod worker;

use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{oneshot, Semaphore};

pub use error::SpoolError;
pub use lock::LOCK_FILE;
pub use recovery::{Rebuild, Recovery};
pub use store::{DB_FILE, RECORD_OVERHEAD, WAL_FILE};

use store::CRC32C;
use worker::{AppendJob, Job, Shared};

/// Default [`SpoolOptions::memory_bytes`]: a few MiB of records waiting for a commit.
pub const DEFAULT_MEMORY_BYTES: u64 = 4 << 20;

/// A record's id: its place in the spool's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecordId(pub i64);

impl std::fmt::Display for RecordId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// What [`Spool::append`] stores.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Record {
    /// Events in the batch (kept for drain statistics; the spool does not read the
    /// payload).
    pub events: u32,
    /// The batch, opaque to the spool.
    pub payload: Vec<u8>,
}

/// A record read back by [`Spool::peek`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpooledRecord {
    /// Its id; pass the last one drained to [`Spool::remove_through`].
    pub id: RecordId,
    /// When it was committed, Unix milliseconds.
    pub spooled_at_ms: i64,
    /// [`Record::events`].
    pub events: u32,
    /// [`Record::payload`], checksum verified.
    pub payload: Vec<u8>,
}

/// What [`Spool::remove_through`] removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Removed {
    /// Records removed.
    pub records: u64,
    /// Their events.
    pub events: u64,
    /// Bytes given back (as counted against `max_bytes`).
    pub bytes: u64,
}

/// Settings of [`Spool::open_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpoolOptions {
    /// Bytes the spool may hold (records' payloads plus [`RECORD_OVERHEAD`] each);
    /// past it, appends fail with [`SpoolError::Full`]. The files take a little
    /// more (SQLite's pages are not all full; the WAL holds recent commits twice
    /// until a checkpoint).
    pub max_bytes: u64,
    /// Bytes of records that may wait in memory for a commit; appends past it wait.
    /// A record larger than this is refused ([`SpoolError::TooLarge`]).
    pub memory_bytes: u64,
}

impl SpoolOptions {
    /// `max_bytes` with the default memory budget ([`DEFAULT_MEMORY_BYTES`]).
    pub fn new(max_bytes: u64) -> Self {
        Self {
            max_bytes,
            memory_bytes: DEFAULT_MEMORY_BYTES,
        }
    }
}

/// Figures for metrics ([`Spool::stats`]). A record is one telemetry batch in the
/// server's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpoolStats {
    /// Bytes held on disk (as counted against `max_bytes`).
    pub bytes: u64,
    /// Records held on disk.
    pub records: u64,
    /// When the oldest record held was committed, Unix milliseconds.
    pub oldest_spooled_at_ms: Option<i64>,
    /// Bytes of appends accepted but not yet committed (counted against
    /// `max_bytes`), including appends still waiting for room in `memory_bytes`.
    pub queued_bytes: u64,
    /// Records handed to the spool's thread and waiting for their commit (their
    /// bytes stay within `memory_bytes`).
    pub queued_records: u64,
    /// The spool's `max_bytes`.
    pub max_bytes: u64,
    /// Records appended since open.
    pub appended: u64,
    /// Commits since open: each one fsync of the WAL. `appended / commits` is the
    /// group commit's records per fsync.
    pub commits: u64,
    /// Records removed since open.
    pub drained_records: u64,
    /// Their events.
    pub drained_events: u64,
    /// Rows of the quarantine table (kept across restarts).
    pub quarantined: u64,
    /// Times the database was found damaged while running and rebuilt.
    pub rebuilds: u64,
}

impl SpoolStats {
    /// Age of the oldest record held at `now` (zero if its time is ahead of `now`).
    pub fn oldest_age(&self, now: SystemTime) -> Option<Duration> {
        let at =
            UNIX_EPOCH + Duration::from_millis(u64::try_from(self.oldest_spooled_at_ms?).ok()?);
        Some(now.duration_since(at).unwrap_or_default())
    }
}

/// A handle on an open spool; clones share it. The spool's thread runs until
/// [`Spool::close`] or until every handle is dropped.
#[derive(Debug, Clone)]
pub struct Spool {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    dir: PathBuf,
    jobs: Sender<Job>,
    shared: Arc<Shared>,
    memory: Arc<Semaphore>,
    memory_bytes: u64,
    recovery: Recovery,
}

impl Spool {
    /// Opens (creating if missing) the spool in `dir`, holding at most `max_bytes`,
    /// with the default memory budget. See [`Spool::open_with`].
    pub async fn open(dir: impl AsRef<Path>, max_bytes: u64) -> Result<Self, SpoolError> {
        Self::open_with(dir, SpoolOptions::new(max_bytes)).await
    }

    /// Opens (creating if missing) the spool in `dir`: takes the directory's lock
    /// ([`SpoolError::Locked`] if another open spool holds it), repairs what a
    /// previous process left (module doc, "Recovery at open") and starts the
    /// spool's thread. Records left by a previous process are there to peek.
    pub async fn open_with(
        dir: impl AsRef<Path>,
        options: SpoolOptions,
    ) -> Result<Self, SpoolError> {
        let dir = dir.as_ref().to_owned();
        // The tail keeps as much as may wait for a commit: a few MiB in all (scale.md §3).
        let tail_bytes = usize::try_from(options.memory_bytes).unwrap_or(usize::MAX);
        let shared = Arc::new(Shared::new(options.max_bytes, tail_bytes));
        let (jobs, rx) = std::sync::mpsc::channel();
        let (ready, opened) = oneshot::channel();
        let (thread_dir, thread_shared) = (dir.clone(), shared.clone());
        std::thread::Builder::new()
            .name("spool".to_owned())
            .spawn(move || {
                let open = || -> Result<_, SpoolError> {
                    std::fs::create_dir_all(&thread_dir)
                        .map_err(|e| SpoolError::io(&thread_dir, e))?;
                    let lock = lock::DirLock::acquire(&thread_dir)?;
                    let (store, recovery) = recovery::open_store(&thread_dir)?;
                    recovery::sync_dir(&thread_dir)?;
                    thread_shared.load(&store.totals()?);
                    Ok((lock, store, recovery))
                };
                match open() {
                    Ok((lock, store, recovery)) => {
                        // Nobody waits any more (open was cancelled): close again.
                        if ready.send(Ok(recovery)).is_ok() {
                            worker::run(store, thread_dir, rx, thread_shared, lock);
                        }
                    }
                    Err(e) => drop(ready.send(Err(e))),
                }
            })
            .map_err(|e| SpoolError::io(&dir, e))?;
        let recovery = opened.await.map_err(|_| SpoolError::Closed)??;
        // Permits are bytes; a u32 bounds a semaphore acquire.
        let memory_bytes = options.memory_bytes.clamp(1, u64::from(u32::MAX));
        Ok(Self {
            inner: Arc::new(Inner {
                dir,
                jobs,
                shared,
                memory: Arc::new(Semaphore::new(memory_bytes as usize)),
                memory_bytes,
                recovery,
            }),
        })
    }

    /// Appends `record`; resolves with its id once it is durable (committed and
    /// fsync'd, with whatever else arrived meanwhile). [`SpoolError::Full`] at once
    /// when it does not fit in `max_bytes`; waits while `memory_bytes` of records
    /// already wait for a commit. If the future is dropped after the record was
    /// queued, the record is still written (it was not acknowledged: the caller's
    /// retry makes a second copy, which the next hop's dedup absorbs).
    pub async fn append(&self, record: Record) -> Result<RecordId, SpoolError> {
        let inner = &self.inner;
        let cost = worker::append_cost(&record.payload);
        if cost > inner.memory_bytes {
            return Err(SpoolError::TooLarge {
                bytes: cost,
                max: inner.memory_bytes,
            });
        }
        inner.shared.reserve(cost)?;
        let reservation = Reservation {
            shared: &inner.shared,
            cost,
        };
        let permit = inner
            .memory
            .clone()
            .acquire_many_owned(cost as u32)
            .await
            .map_err(|_| SpoolError::Closed)?;
        // The checksum's payload part, on the caller's task rather than the thread.
        let mut digest = CRC32C.digest();
        digest.update(&record.payload);
        let (reply, answer) = oneshot::channel();
        inner.shared.enqueued();
        let sent = inner.jobs.send(Job::Append(AppendJob {
            events: record.events,
            payload: record.payload,
            digest: Some(digest),
            cost,
            _permit: permit,
            reply,
        }));
        if sent.is_err() {
            inner.shared.not_enqueued();
            return Err(SpoolError::Closed);
        }
        // The thread accounts for the record from here on.
        std::mem::forget(reservation);
        answer.await.map_err(|_| SpoolError::Closed)?
    }

    /// Up to `max_records` records, oldest first, whose payloads add up to at most
    /// `max_bytes` (the first record is returned even if larger). Empty when the
    /// spool is. Records failing their checksum are quarantined on the way (module
    /// doc). Peeking does not remove: the same records come back until
    /// [`Spool::remove_through`].
    pub async fn peek(
        &self,
        max_records: usize,
        max_bytes: usize,
    ) -> Result<Vec<SpooledRecord>, SpoolError> {
        self.peek_after(RecordId(0), max_records, max_bytes).await
    }

    /// [`Spool::peek`] of the records after `after` only: a drainer with an insert in
    /// flight reads the next records meanwhile (ids grow, so they come after it). When
    /// the records after `after` are the last ones committed, they come from memory
    /// (the tail: module `tail`), without a turn on the spool's thread.
    pub async fn peek_after(
        &self,
        after: RecordId,
        max_records: usize,
        max_bytes: usize,
    ) -> Result<Vec<SpooledRecord>, SpoolError> {
        if let Some(records) = self.inner.shared.take_tail(after.0, max_records, max_bytes) {
            return Ok(records);
        }
        let (reply, answer) = oneshot::channel();
        self.send(Job::Peek {
            after: after.0,
            max_records,
            max_bytes,
            reply,
        })?;
        answer.await.map_err(|_| SpoolError::Closed)?
    }

    /// Removes every record with an id up to and including `through`, durably (it
    /// shares a group commit with the appends of the moment). Call it once the next
    /// hop acknowledged them; ids already removed are fine.
    pub async fn remove_through(&self, through: RecordId) -> Result<Removed, SpoolError> {
        let (reply, answer) = oneshot::channel();
        self.send(Job::Remove { through, reply })?;
        answer.await.map_err(|_| SpoolError::Closed)?
    }

    /// Returns once the spool holds a record (at once if it does): the drainer's
    /// wait when a peek came back empty.
    pub async fn wait_for_records(&self) {
        loop {
            // Created before the check, so a commit in between still wakes it.
            let appended = self.inner.shared.appended.notified();
            if self.stats().records > 0 {
                return;
            }
            appended.await;
        }
    }

    /// Current figures (no I/O).
    pub fn stats(&self) -> SpoolStats {
        self.inner.shared.stats()
    }

    /// What opening found and repaired.
    pub fn recovery(&self) -> &Recovery {
        &self.inner.recovery
    }

    /// The spool's directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Finishes the requests queued before it, checkpoints the WAL into `spool.db`,
    /// closes the database and releases the directory's lock; returns when done (a
    /// new [`Spool::open`] of the directory then succeeds). Later requests on any
    /// clone fail with [`SpoolError::Closed`].
    pub async fn close(&self) -> Result<(), SpoolError> {
        let (reply, answer) = oneshot::channel();
        if self.send(Job::Close { reply }).is_err() {
            return Ok(()); // already closed
        }
        let _ = answer.await;
        Ok(())
    }

    fn send(&self, job: Job) -> Result<(), SpoolError> {
        self.inner.jobs.send(job).map_err(|_| SpoolError::Closed)
    }

    /// Tests: holds the spool's thread until the returned sender is used or dropped.
    #[cfg(test)]
    fn gate(&self) -> std::sync::mpsc::Sender<()> {
        let (tx, rx) = std::sync::mpsc::channel();
        let _ = self.send(Job::Gate(rx));
        tx
    }
}

/// An append's room in `max_bytes` until its record reaches the thread; given back
/// if the append fails or is dropped before.
struct Reservation<'a> {
    shared: &'a Shared,
    cost: u64,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.shared.unreserve(self.cost);
    }
}

#[cfg(test)]
mod tests;
