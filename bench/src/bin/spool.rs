//! Spool benchmark (`ingest::spool`): append throughput with N concurrent
//! appenders at batch-sized records, the group commit's records per fsync, the
//! drain rate (peek + remove_through), and the time to open a full spool.
//!
//! `--compare` also runs the same group commit on two other stores, for the
//! decision record: sqlx's SQLite driver (same database settings, async) and a
//! plain append-only file with `fdatasync` per group (the floor any store pays
//! for an fsync'd acknowledgement on this disk).
//!
//! Run: `cargo run --release -p bench --bin spool -- [--compare]`

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::{Parser, ValueEnum};
use ingest::spool::{Record, Spool, SpoolError};
use tokio::sync::oneshot;

#[derive(Parser, Debug)]
#[command(about = "streamwatch spool benchmark")]
struct Cli {
    /// Concurrent appenders, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,16,256")]
    appenders: Vec<usize>,
    /// Record sizes in bytes, comma-separated (defaults: a 5-event and a 50-event
    /// batch of the SDK's, compact JSON).
    #[arg(long, value_delimiter = ',', default_value = "1000,5600")]
    sizes: Vec<usize>,
    /// Seconds of each append run.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Megabytes spooled before the drain and open measurements, per size.
    #[arg(long, default_value_t = 200)]
    drain_mb: usize,
    /// Directory for the stores (on the disk under test; not a tmpfs).
    #[arg(long, default_value = "/var/tmp")]
    dir: PathBuf,
    /// Also run the append runs on sqlx's SQLite and on a plain file.
    #[arg(long)]
    compare: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Store {
    Spool,
    Sqlx,
    File,
}

impl Store {
    fn name(self) -> &'static str {
        match self {
            Store::Spool => "spool (rusqlite thread)",
            Store::Sqlx => "sqlx sqlite",
            Store::File => "file + fdatasync",
        }
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    println!(
        "machine: {} cores, {}; disk: the filesystem of {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        bench::mem_total(),
        cli.dir.display()
    );
    let stores: &[Store] = if cli.compare {
        &[Store::Spool, Store::Sqlx, Store::File]
    } else {
        &[Store::Spool]
    };
    println!("\nappend: {}s per run", cli.seconds);
    println!(
        "{:<24} {:>9} {:>7} {:>12} {:>9} {:>14} {:>16}",
        "store", "appenders", "bytes", "records/s", "MB/s", "records/fsync", "CPU µs/record"
    );
    // Stores side by side for each shape, the first one rotating: the disk is
    // shared and its state drifts (writeback of an earlier run), so each
    // comparison is made within a few seconds and no store always goes first.
    let shapes = cli.sizes.iter().flat_map(|&size| {
        cli.appenders
            .iter()
            .map(move |&appenders| (size, appenders))
    });
    for (turn, (size, appenders)) in shapes.enumerate() {
        for k in 0..stores.len() {
            let store = stores[(turn + k) % stores.len()];
            {
                let dir = tempfile::tempdir_in(&cli.dir).context("tempdir")?;
                let run = append_run(store, dir.path(), appenders, size, cli.seconds).await?;
                println!(
                    "{:<24} {:>9} {:>7} {:>12.0} {:>9.1} {:>14.1} {:>16.1}",
                    store.name(),
                    appenders,
                    size,
                    run.records as f64 / run.seconds,
                    (run.records * size as u64) as f64 / run.seconds / 1e6,
                    run.records as f64 / run.syncs.max(1) as f64,
                    run.cpu_seconds * 1e6 / run.records.max(1) as f64,
                );
            }
        }
    }
    println!("\ndrain: peek(10000 records, 16 MiB) + remove_through until empty");
    for &size in &cli.sizes {
        let dir = tempfile::tempdir_in(&cli.dir).context("tempdir")?;
        drain_run(dir.path(), size, cli.drain_mb << 20).await?;
    }
    Ok(())
}

struct AppendRun {
    records: u64,
    syncs: u64,
    seconds: f64,
    /// CPU time of this whole process (appenders included) during the run.
    cpu_seconds: f64,
}

/// User + system CPU time of this process so far, from /proc/self/stat (clock
/// ticks of 1/100 s, Linux's `USER_HZ`).
fn process_cpu_seconds() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| {
            // Fields after the command name (which may hold spaces) in parentheses.
            let rest = stat.rsplit_once(')')?.1;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let utime: f64 = fields.get(11)?.parse().ok()?;
            let stime: f64 = fields.get(12)?.parse().ok()?;
            Some((utime + stime) / 100.0)
        })
        .unwrap_or(0.0)
}

/// `appenders` tasks append `size`-byte records flat out for `seconds`.
async fn append_run(
    store: Store,
    dir: &Path,
    appenders: usize,
    size: usize,
    seconds: f64,
) -> Result<AppendRun> {
    let target: Arc<dyn Appender> = match store {
        Store::Spool => Arc::new(Spool::open(dir, u64::MAX).await?),
        Store::Sqlx => Arc::new(SqlxLog::open(&dir.join("sqlx.db")).await?),
        Store::File => Arc::new(FileLog::open(&dir.join("log"))?),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let cpu_before = process_cpu_seconds();
    let tasks: Vec<_> = (0..appenders)
        .map(|w| {
            let (target, stop, done) = (target.clone(), stop.clone(), done.clone());
            tokio::spawn(async move {
                let mut payload = format!("w{w}-").into_bytes();
                payload.resize(size, b'.');
                while !stop.load(Ordering::Relaxed) {
                    target.append(payload.clone()).await?;
                    done.fetch_add(1, Ordering::Relaxed);
                }
                anyhow::Ok(())
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await??;
    }
    let seconds = started.elapsed().as_secs_f64();
    let cpu_seconds = process_cpu_seconds() - cpu_before;
    let syncs = target.syncs();
    target.close().await?;
    Ok(AppendRun {
        records: done.load(Ordering::Relaxed),
        syncs,
        seconds,
        cpu_seconds,
    })
}

/// Fills a spool with `bytes` of `size`-byte records (256 appenders), then times
/// an open of it (the recovery checks) and a drain to empty.
async fn drain_run(dir: &Path, size: usize, bytes: usize) -> Result<()> {
    let spool = Spool::open(dir, u64::MAX).await?;
    let n = bytes / size;
    let next = Arc::new(AtomicU64::new(0));
    let fill: Vec<_> = (0..256)
        .map(|_| {
            let (spool, next) = (spool.clone(), next.clone());
            tokio::spawn(async move {
                while next.fetch_add(1, Ordering::Relaxed) < n as u64 {
                    spool
                        .append(Record {
                            events: 5,
                            payload: vec![b'.'; size],
                        })
                        .await?;
                }
                Ok::<_, SpoolError>(())
            })
        })
        .collect();
    for t in fill {
        t.await??;
    }
    spool.close().await?;
    let db_len = std::fs::metadata(dir.join(ingest::spool::DB_FILE))?.len();

    let started = Instant::now();
    let spool = Spool::open(dir, u64::MAX).await?;
    let open = started.elapsed();
    let held = spool.stats().records;

    let started = Instant::now();
    let (mut records, mut peeks) = (0u64, 0u64);
    loop {
        let batch = spool.peek(10_000, 16 << 20).await?;
        let Some(last) = batch.last() else { break };
        peeks += 1;
        records += batch.len() as u64;
        spool.remove_through(last.id).await?;
    }
    let seconds = started.elapsed().as_secs_f64();
    assert_eq!(records, held, "drained what was held");
    let file_after = std::fs::metadata(dir.join(ingest::spool::DB_FILE))?.len();
    println!(
        "{size:>6} B records: {held} held ({:.0} MB file): open {:.0} ms; drain {:.0} records/s, \
         {:.1} MB/s, {peeks} peeks; file after drain {:.1} MB",
        db_len as f64 / 1e6,
        open.as_secs_f64() * 1e3,
        records as f64 / seconds,
        (records * size as u64) as f64 / seconds / 1e6,
        file_after as f64 / 1e6,
    );
    spool.close().await?;
    Ok(())
}

/// What an append run drives: one record in, resolved once durable.
#[async_trait::async_trait]
trait Appender: Send + Sync {
    async fn append(&self, payload: Vec<u8>) -> Result<()>;
    fn syncs(&self) -> u64;
    async fn close(&self) -> Result<()>;
}

#[async_trait::async_trait]
impl Appender for Spool {
    async fn append(&self, payload: Vec<u8>) -> Result<()> {
        Spool::append(self, Record { events: 5, payload }).await?;
        Ok(())
    }
    fn syncs(&self) -> u64 {
        self.stats().commits
    }
    async fn close(&self) -> Result<()> {
        Ok(Spool::close(self).await?)
    }
}

type Job = (Vec<u8>, oneshot::Sender<()>);

/// The same group commit through sqlx's SQLite driver: one connection (WAL,
/// synchronous=FULL, exclusive locking), a task taking every queued append into
/// one transaction.
struct SqlxLog {
    jobs: tokio::sync::mpsc::UnboundedSender<Job>,
    syncs: Arc<AtomicU64>,
}

impl SqlxLog {
    async fn open(path: &Path) -> Result<Self> {
        use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
        use sqlx::{ConnectOptions, Connection};
        let mut conn = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .locking_mode(sqlx::sqlite::SqliteLockingMode::Exclusive)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .connect()
            .await?;
        sqlx::query(
            "CREATE TABLE records (id INTEGER PRIMARY KEY, spooled_at INTEGER NOT NULL,
             events INTEGER NOT NULL, crc INTEGER NOT NULL, payload BLOB NOT NULL)",
        )
        .execute(&mut conn)
        .await?;
        let (jobs, mut rx) = tokio::sync::mpsc::unbounded_channel::<Job>();
        let syncs = Arc::new(AtomicU64::new(0));
        let counter = syncs.clone();
        tokio::spawn(async move {
            let mut next_id = 1i64;
            while let Some(first) = rx.recv().await {
                let mut group = vec![first];
                while let Ok(job) = rx.try_recv() {
                    group.push(job);
                }
                let mut tx = conn.begin().await.expect("begin");
                for (payload, _) in &group {
                    let crc = crc32c(payload);
                    sqlx::query("INSERT INTO records VALUES (?1, ?2, ?3, ?4, ?5)")
                        .bind(next_id)
                        .bind(0i64)
                        .bind(5i64)
                        .bind(i64::from(crc))
                        .bind(payload.as_slice())
                        .execute(&mut *tx)
                        .await
                        .expect("insert");
                    next_id += 1;
                }
                tx.commit().await.expect("commit");
                counter.fetch_add(1, Ordering::Relaxed);
                for (_, reply) in group {
                    let _ = reply.send(());
                }
            }
        });
        Ok(Self { jobs, syncs })
    }
}

#[async_trait::async_trait]
impl Appender for SqlxLog {
    async fn append(&self, payload: Vec<u8>) -> Result<()> {
        let (reply, done) = oneshot::channel();
        self.jobs
            .send((payload, reply))
            .map_err(|_| anyhow::anyhow!("closed"))?;
        Ok(done.await?)
    }
    fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }
    async fn close(&self) -> Result<()> {
        Ok(())
    }
}

/// The floor: length, CRC and payload appended to one file, one `fdatasync` per
/// group, on a thread of its own.
struct FileLog {
    jobs: std::sync::mpsc::Sender<Job>,
    syncs: Arc<AtomicU64>,
}

impl FileLog {
    fn open(path: &Path) -> Result<Self> {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        let (jobs, rx) = std::sync::mpsc::channel::<Job>();
        let syncs = Arc::new(AtomicU64::new(0));
        let counter = syncs.clone();
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            while let Ok(first) = rx.recv() {
                let mut group = vec![first];
                while let Ok(job) = rx.try_recv() {
                    group.push(job);
                }
                buf.clear();
                for (payload, _) in &group {
                    buf.extend_from_slice(&(payload.len() as u32).to_le_bytes());
                    buf.extend_from_slice(&crc32c(payload).to_le_bytes());
                    buf.extend_from_slice(payload);
                }
                file.write_all(&buf).expect("write");
                file.sync_data().expect("fdatasync");
                counter.fetch_add(1, Ordering::Relaxed);
                for (_, reply) in group {
                    let _ = reply.send(());
                }
            }
        });
        Ok(Self { jobs, syncs })
    }
}

#[async_trait::async_trait]
impl Appender for FileLog {
    async fn append(&self, payload: Vec<u8>) -> Result<()> {
        let (reply, done) = oneshot::channel();
        self.jobs
            .send((payload, reply))
            .map_err(|_| anyhow::anyhow!("closed"))?;
        Ok(done.await?)
    }
    fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }
    async fn close(&self) -> Result<()> {
        Ok(())
    }
}

fn crc32c(bytes: &[u8]) -> u32 {
    const CRC: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);
    CRC.checksum(bytes)
}
