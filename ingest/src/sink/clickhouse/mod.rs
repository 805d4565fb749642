//! ClickHouse sink: RowBinary inserts through the `clickhouse` crate into a
//! `ReplacingMergeTree` table of events and a `MergeTree` table of batch records
//! (`view_batches`), and the driver of the one migration runner (the `migrate` crate) for
//! `migrations/clickhouse/` ([`migrations`]), which also creates the tables the `analytics`
//! crate reads and writes, on its behalf. Every request goes through [`ChClient`]
//! ([`endpoints`]): one or more endpoints with failover. With a cluster
//! ([`ClickHouseConfig::cluster`], scale.md §2) the tables are replicated and distributed
//! (`migrations/clickhouse-cluster/`) and the inserts synchronous.
//!
//! Works against Debian's ClickHouse 18.16 (the CI server) and current releases
//! (see shared/notes/clickhouse.md): no compression, client-side `?` binds, and
//! row-type validation off on servers that predate `RowBinaryWithNamesAndTypes`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

mod endpoints;
mod migrations;

use async_trait::async_trait;
use clickhouse::{Client, Compression, Row};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::TokioExecutor;
use serde::{Deserialize, Serialize};

use super::{EventSink, SinkError};
use crate::row::SinkWrite;

pub use self::endpoints::{moves_on, ChClient, ChQuery, Pinned};
pub use self::migrations::MigrationError;

/// Table holding the events.
pub const EVENTS_TABLE: &str = "telemetry_events";

/// Table holding one row per ingest batch: its view dimensions (analytics.md §1).
pub const BATCHES_TABLE: &str = "view_batches";

/// The Buffer table in front of [`BATCHES_TABLE`]: the sink inserts records into it, the
/// refresher flushes it and reads the table (`migrations/clickhouse/0003_view_batches_buffer.sql`
/// says why).
pub const BATCHES_BUFFER: &str = "view_batches_buffer";

/// Table recording applied migrations.
pub const MIGRATIONS_TABLE: &str = "schema_migrations";

/// Time allowed for sending an insert's rows, and for the server to confirm it.
const INSERT_TIMEOUT: Duration = Duration::from_secs(30);

/// Connection settings (decisions.md §3: `CLICKHOUSE_URL`, `CLICKHOUSE_DATABASE`,
/// `CLICKHOUSE_USER`, `CLICKHOUSE_PASSWORD`).
#[derive(Clone)]
pub struct ClickHouseConfig {
    /// HTTP endpoint, e.g. `http://127.0.0.1:8123`, or several, comma-separated: every
    /// one serves the same data (replicas, or nodes of one cluster), tried in this order.
    pub url: String,
    /// Name of the cluster in the servers' `remote_servers` (scale.md §2): the tables are
    /// `<table>_local` replicated tables behind `Distributed` ones. `None`: one server.
    pub cluster: Option<String>,
    /// Database; created at start-up when missing.
    pub database: String,
    /// User; the server default when `None`.
    pub user: Option<String>,
    /// Password; none when `None`.
    pub password: Option<String>,
    /// Row-type validation of the crate. `None` = automatic: on for ClickHouse 22+,
    /// off for older servers such as 18.16, which cannot describe result types.
    pub validation: Option<bool>,
    /// This writer's id, stored with every batch record (`view_batches.writer`): random
    /// per config, so per server process (a restarted process is another writer). Never 0
    /// (0 marks records of unknown writer). Analytics' live views tell their own records
    /// from everyone else's by it.
    pub writer: u64,
}

impl std::fmt::Debug for ClickHouseConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClickHouseConfig")
            .field("url", &self.url)
            .field("cluster", &self.cluster)
            .field("database", &self.database)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("validation", &self.validation)
            .field("writer", &self.writer)
            .finish()
    }
}

impl ClickHouseConfig {
    /// Settings for `url` and `database` with the server's default user.
    pub fn new(url: impl Into<String>, database: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            cluster: None,
            database: database.into(),
            user: None,
            password: None,
            validation: None,
            writer: new_writer_id(),
        }
    }

    /// A client for this database without connecting (no request is made until it is
    /// used), with row-type validation off so it reads on every server version; e.g.
    /// for `analytics::Store::clickhouse`, built at start-up while the store may still be
    /// down. The tables exist once a [`ClickHouseSink::connect`] has migrated them.
    pub fn client(&self) -> ChClient {
        self.base_client()
            .map(|c| c.with_validation(false).with_database(&self.database))
    }

    /// The endpoints of [`ClickHouseConfig::url`], in order.
    pub fn urls(&self) -> impl Iterator<Item = &str> {
        self.url.split(',').map(str::trim).filter(|u| !u.is_empty())
    }

    /// A client without a database selected.
    fn base_client(&self) -> ChClient {
        // TCP_NODELAY: the crate's default connector leaves Nagle on, which stalls
        // small requests ~40 ms behind delayed ACKs (shared/notes/clickhouse.md).
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_keepalive(Some(Duration::from_secs(60)));
        // A node that is gone is left within the failover bound (scale.md §1: 2 s).
        connector.set_connect_timeout(Some(Duration::from_secs(1)));
        let http = HyperClient::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(2))
            .build(connector);
        let base = Client::with_http_client(http).with_compression(Compression::None);
        let endpoints = self
            .urls()
            .map(|url| {
                let mut c = base.clone().with_url(url);
                if let Some(u) = &self.user {
                    c = c.with_user(u);
                }
                if let Some(p) = &self.password {
                    c = c.with_password(p);
                }
                if self.cluster.is_some() {
                    // 204 means every row is on a replica of its shard (scale.md §2);
                    // writes and reads of every instance go to the same replica of each
                    // shard while it serves (the first in the cluster's definition, not
                    // the node asked), so a batch record is never read from a replica
                    // that has it before its events.
                    c = c
                        .with_setting("insert_distributed_sync", "1")
                        .with_setting("load_balancing", "in_order")
                        .with_setting("prefer_localhost_replica", "0")
                        // A replica catching up (restarted after a failure) is not read
                        // while its shard has a replica no more than 2 s behind.
                        .with_setting("max_replica_delay_for_distributed_queries", "2");
                }
                (url.to_owned(), c)
            })
            .collect();
        ChClient::new(endpoints).on_cluster(self.cluster.is_some())
    }
}

/// A random writer id, never 0: std's `RandomState` is seeded from the OS, mixed with the
/// time and the process id so two processes never share one.
fn new_writer_id() -> u64 {
    use std::hash::BuildHasher;
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    std::hash::RandomState::new()
        .hash_one((nanos, std::process::id()))
        .max(1)
}

/// Telemetry storage in ClickHouse.
///
/// Every batch record carries its whole `dims` here, unlike the SQLite sink
/// ([`crate::record_dims`]): records go through a Buffer table, whose rows a ClickHouse
/// crash can lose, and a record whose `dims` were elided against a lost one would leave
/// its view without the context the batch did carry.
#[derive(Clone)]
pub struct ClickHouseSink {
    client: ChClient,
    /// [`ClickHouseConfig::cluster`].
    cluster: Option<String>,
    /// The database `client` uses (migrations name it where ClickHouse needs it spelled out).
    database: String,
    /// [`ClickHouseConfig::writer`].
    writer: u64,
}

impl std::fmt::Debug for ClickHouseSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClickHouseSink").finish_non_exhaustive()
    }
}

/// Insert form of a row; borrows from [`EventRow`].
#[derive(Row, Serialize)]
struct InsertRow<'a> {
    owner: &'a str,
    session_id: &'a str,
    ts: i64,
    #[serde(rename = "type")]
    event_type: &'a str,
    payload: &'a str,
    content_id: &'a str,
    ver: u64,
}

/// Insert form of a `view_batches` row (`written_at` is the server's `now()`): the sink's
/// batch records, and the records analytics' refresher writes after a server restart.
#[derive(Row, Serialize)]
pub struct RecordRow<'a> {
    pub owner: &'a str,
    pub session_id: &'a str,
    pub first_ts: i64,
    pub seq: u64,
    pub dims: &'a str,
    /// [`ClickHouseConfig::writer`] of the process that wrote it (0: unknown).
    pub writer: u64,
}

#[derive(Row, Deserialize)]
struct TextRow {
    text: String,
}

impl ClickHouseSink {
    /// Connects, creates the database when missing and applies pending migrations.
    pub async fn connect(config: &ClickHouseConfig) -> Result<Self, SinkError> {
        let sink = Self::open(config).await?;
        sink.migrate().await?;
        Ok(sink)
    }

    /// Connects and creates the database when missing, without migrating it (the caller
    /// runs [`ClickHouseSink::migrate`], to tell a changed migration from a failure).
    pub async fn open(config: &ClickHouseConfig) -> Result<Self, SinkError> {
        let name_ok =
            |n: &str| !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !name_ok(&config.database) {
            return Err(SinkError::Permanent(format!(
                "invalid ClickHouse database name {:?} (use [A-Za-z0-9_])",
                config.database
            )));
        }
        if let Some(cluster) = config.cluster.as_deref().filter(|c| !name_ok(c)) {
            return Err(SinkError::Permanent(format!(
                "invalid ClickHouse cluster name {cluster:?} (use [A-Za-z0-9_])"
            )));
        }
        // The version probe runs unvalidated: validation needs a format that old
        // servers lack (RowBinaryWithNamesAndTypes).
        let base = config.base_client().map(|c| c.with_validation(false));
        let version = base
            .query("SELECT version() AS text")
            .fetch_one::<TextRow>()
            .await
            .map_err(map_err)?
            .text;
        let validation = config.validation.unwrap_or_else(|| {
            version
                .split('.')
                .next()
                .and_then(|m| m.parse::<u32>().ok())
                .is_some_and(|major| major >= 22)
        });
        let on_cluster = config
            .cluster
            .as_ref()
            .map_or(String::new(), |c| format!(" ON CLUSTER {c}"));
        base.query(&format!(
            "CREATE DATABASE IF NOT EXISTS {}{on_cluster}",
            config.database
        ))
        .execute()
        .await
        .map_err(map_err)?;
        let client = base.map(|c| {
            c.with_validation(validation)
                .with_database(&config.database)
        });
        let sink = Self {
            client,
            cluster: config.cluster.clone(),
            database: config.database.clone(),
            writer: config.writer,
        };
        tracing::info!(server_version = %version, validation, database = %config.database, cluster = ?config.cluster, "clickhouse sink connected");
        Ok(sink)
    }

    /// The client of its endpoints (database selected), e.g. for analytics queries.
    pub fn client(&self) -> &ChClient {
        &self.client
    }

    /// Where batch records are inserted: the Buffer in front of [`BATCHES_TABLE`] on one
    /// server; the table itself on a cluster (a Buffer is one node's memory, which the
    /// other nodes and a failover never see).
    fn batches_target(&self) -> &'static str {
        if self.cluster.is_some() {
            BATCHES_TABLE
        } else {
            BATCHES_BUFFER
        }
    }
}

/// ClickHouse server error codes that will fail again unchanged.
const PERMANENT_CODES: &[u32] = &[
    6, 16, 26, 27, 36, 43, 44, 46, 47, 48, 53, 60, 62, 69, 70, 72, 73, 81, 117, 164, 192, 193, 194,
    497, 516,
];

/// Classifies a `clickhouse` crate error as retryable or permanent (the same rule for
/// every ClickHouse caller, e.g. analytics' queries).
pub fn classify_error(e: clickhouse::error::Error) -> SinkError {
    map_err(e)
}

/// Classifies a crate error as retryable or permanent.
fn map_err(e: clickhouse::error::Error) -> SinkError {
    use clickhouse::error::Error as E;
    match &e {
        E::Network(_) | E::TimedOut => SinkError::Retryable(format!("clickhouse: {e}")),
        E::BadResponse(text) => match server_code(text) {
            Some(code) if PERMANENT_CODES.contains(&code) => {
                SinkError::Permanent(format!("clickhouse: {e}"))
            }
            _ => SinkError::Retryable(format!("clickhouse: {e}")),
        },
        _ => SinkError::Permanent(format!("clickhouse: {e}")),
    }
}

/// Extracts `N` from a ClickHouse error text `Code: N, e.displayText() = ...`.
fn server_code(text: &str) -> Option<u32> {
    let rest = &text[text.find("Code: ")? + 6..];
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

/// Version of the `index`-th row of a write whose rows got the sequences from `base`
/// ([`allocate_seqs`]): decreasing with every row this process writes, so the first
/// stored row of a key has the highest version and survives `FINAL` and merges (two
/// writes in the same millisecond included).
fn first_wins_version(base: u64, index: usize) -> u64 {
    u64::MAX - (base + index as u64)
}

/// The `ver` range of the rows written from `from_ms` to `until_ms` (writer clock, epoch
/// ms; the rows of later milliseconds are outside), as `(min, max)`: for finding the
/// sessions written to in a span of time without a time column (analytics' recovery
/// after a server restart). Sequences are at least the write time · 2^20 (they can run
/// ahead of it by the rows written in one millisecond beyond 2^20, so callers widen the
/// span).
pub fn versions_written_between(from_ms: u64, until_ms: u64) -> (u64, u64) {
    (
        first_wins_version(until_ms << 20, 0),
        first_wins_version(from_ms << 20, 0),
    )
}

/// The last write sequence this process handed out.
static LAST_SEQ: AtomicU64 = AtomicU64::new(0);

/// The first of `n` consecutive write sequences for a write at `now_ms`: strictly
/// increasing within the process (so records sort in write order, which analytics'
/// dimension rule uses to break ties of equal earliest `ts`) and, across instances,
/// ordered by time (`now_ms · 2^20` at least).
fn allocate_seqs(now_ms: u64, n: usize) -> u64 {
    let floor = now_ms << 20;
    let mut prev = LAST_SEQ.load(Ordering::Relaxed);
    loop {
        let start = (prev + 1).max(floor);
        let last = start + (n.max(1) as u64 - 1);
        match LAST_SEQ.compare_exchange_weak(prev, last, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return start,
            Err(p) => prev = p,
        }
    }
}

/// How long a cluster node may take to show it reaches ZooKeeper.
const ZOOKEEPER_PING: Duration = Duration::from_millis(700);

/// A cluster node's readiness for writes: it reaches ZooKeeper (a replicated table is
/// read-only without it; 18.16 flags `is_readonly` only once its session is found
/// expired) and none of `database`'s replicated tables is read-only. The failure reads
/// as the server's "table is read-only" answer (code 242), naming the cause.
async fn cluster_ping(client: &Client, database: &str) -> Result<(), clickhouse::error::Error> {
    use clickhouse::error::Error;
    #[derive(Row, Deserialize)]
    struct Count {
        n: u64,
    }
    let zk = client
        .query("SELECT toUInt64(count()) AS n FROM system.zookeeper WHERE path = '/'")
        .fetch_one::<Count>();
    match tokio::time::timeout(ZOOKEEPER_PING, zk).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) if matches!(e, Error::Network(_)) => return Err(e),
        Ok(Err(_)) | Err(_) => return Err(Error::BadResponse(
            "Code: 242, this node does not reach ZooKeeper: its replicated tables are read-only"
                .to_owned(),
        )),
    }
    let read_only = client
        .query(
            "SELECT toUInt64(count()) AS n FROM system.replicas \
             WHERE database = ? AND is_readonly",
        )
        .bind(database)
        .fetch_one::<Count>()
        .await?;
    if read_only.n > 0 {
        return Err(Error::BadResponse(format!(
            "Code: 242, {} replicated tables are read-only on this node",
            read_only.n
        )));
    }
    Ok(())
}

#[async_trait]
impl EventSink for ClickHouseSink {
    async fn write(&self, write: SinkWrite) -> Result<(), SinkError> {
        let SinkWrite { rows, batches } = write;
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        if !rows.is_empty() {
            let base = allocate_seqs(now_ms, rows.len());
            // Rows go out in key order, so the server need not sort the block (about
            // 40% of its insert CPU on 18.16, docs/benchmarks.md); `ver` still follows
            // the submission order `i`, so the first submitted row of a key wins.
            let order = super::key_order(&rows);
            let (rows, order) = (&rows, &order);
            // On another endpoint after a failure: the same rows and versions, so a
            // copy the failed node did store collapses with this one.
            self.client
                .run(|client| async move {
                    let mut insert = client
                        .insert::<InsertRow<'_>>(EVENTS_TABLE)
                        .await?
                        .with_timeouts(Some(INSERT_TIMEOUT), Some(INSERT_TIMEOUT));
                    for &i in order {
                        let r = &rows[i];
                        let row = InsertRow {
                            owner: &r.owner,
                            session_id: &r.session_id,
                            ts: r.ts_ms,
                            event_type: r.event_type.as_str(),
                            payload: &r.payload,
                            content_id: &r.content_id,
                            ver: first_wins_version(base, i),
                        };
                        insert.write(&row).await?;
                    }
                    // `end` returns once the server answered 200 for the whole INSERT.
                    insert.end().await
                })
                .await
                .map_err(map_err)?;
        }
        // The records go second: one visible means its events are (analytics relies on
        // it when it skips views whose record count did not change). Into the Buffer in
        // front of `view_batches`: one part per flush, not one per write.
        if !batches.is_empty() {
            let first_seq = allocate_seqs(now_ms, batches.len());
            let dims: Vec<String> = batches.iter().map(|b| b.dims_json()).collect();
            let (batches, dims, table, writer) =
                (&batches, &dims, self.batches_target(), self.writer);
            self.client
                .run(|client| async move {
                    let mut insert = client
                        .insert::<RecordRow<'_>>(table)
                        .await?
                        .with_timeouts(Some(INSERT_TIMEOUT), Some(INSERT_TIMEOUT));
                    // In submission order: the Buffer sorts whole flushes by key, not
                    // each insert.
                    for (i, b) in batches.iter().enumerate() {
                        insert
                            .write(&RecordRow {
                                owner: &b.owner,
                                session_id: &b.session_id,
                                first_ts: b.first_ts_ms,
                                seq: first_seq + i as u64,
                                dims: &dims[i],
                                writer,
                            })
                            .await?;
                    }
                    insert.end().await
                })
                .await
                .map_err(map_err)?;
        }
        Ok(())
    }

    /// Ready when any endpoint answers (all asked at once); on a cluster, one that reaches
    /// ZooKeeper and whose replicated tables take writes: without ZooKeeper they cannot,
    /// and the cause is what readiness reports.
    async fn ping(&self) -> Result<(), SinkError> {
        let database = self.database.as_str();
        let cluster = self.cluster.is_some();
        self.client
            .any(|client| async move {
                if !cluster {
                    return client.query("SELECT 1").execute().await;
                }
                cluster_ping(&client, database).await
            })
            .await
            .map_err(map_err)
    }

    fn name(&self) -> &'static str {
        "clickhouse"
    }

    /// Two: ClickHouse runs inserts in parallel, and starting the next insert
    /// while one is in flight halves the time a request waits before its rows go
    /// out (at half the peak rate, p99 50 ms instead of 109 ms; the peak rate is
    /// unchanged; docs/benchmarks.md).
    fn preferred_writes_in_flight(&self) -> usize {
        2
    }
}

#[cfg(test)]
mod tests {
    use super::migrations::added_column;
    use super::*;

    #[test]
    fn no_migration_has_a_question_mark_the_client_would_take_for_a_bind() {
        assert_eq!(migrate::CLICKHOUSE.migrations[0].statements().len(), 1);
        for m in migrate::CLICKHOUSE
            .migrations
            .iter()
            .chain(migrate::CLICKHOUSE_CLUSTER.migrations)
        {
            for statement in m.statements() {
                assert!(!statement.contains('?'), "{}: {statement}", m.name);
            }
        }
    }

    #[test]
    fn first_row_of_first_write_has_highest_version() {
        let a = allocate_seqs(1000, 2);
        let b = allocate_seqs(1000, 2);
        assert!(first_wins_version(a, 0) > first_wins_version(a, 1));
        assert!(
            first_wins_version(a, 1) > first_wins_version(b, 0),
            "same ms, later write"
        );
        let later = allocate_seqs(1001, 1);
        assert!(first_wins_version(b, 1) > first_wins_version(later, 0));
    }

    #[test]
    fn version_bounds_hold_the_rows_written_in_the_span() {
        let (min, max) = versions_written_between(1_000, 2_000);
        let inside = first_wins_version(allocate_seqs(1_500, 3), 2);
        assert!((min..=max).contains(&inside));
        assert!(first_wins_version(999 << 20, 0) > max, "written before");
        assert!(first_wins_version(2_001 << 20, 0) < min, "written after");
    }

    #[test]
    fn added_columns_are_read_off_alter_statements() {
        assert_eq!(
            added_column("ALTER TABLE view_batches ADD COLUMN writer UInt64 DEFAULT 0"),
            Some(("view_batches", "writer"))
        );
        assert_eq!(
            added_column("alter table t\nadd column c String"),
            Some(("t", "c"))
        );
        assert_eq!(added_column("ALTER TABLE t DROP COLUMN c"), None);
        assert_eq!(added_column("ALTER TABLE t ADD COLUMN"), None);
        assert_eq!(added_column("CREATE TABLE t (c String)"), None);
    }

    #[test]
    fn writer_ids_are_random_and_never_zero() {
        let (a, b) = (
            ClickHouseConfig::new("u", "d"),
            ClickHouseConfig::new("u", "d"),
        );
        assert_ne!(a.writer, 0);
        assert_ne!(a.writer, b.writer);
    }

    #[test]
    fn write_seqs_strictly_increase_and_follow_time() {
        let a = allocate_seqs(1000, 3);
        let b = allocate_seqs(1000, 1);
        assert!(b >= a + 3, "the second write's records follow the first's");
        let later = allocate_seqs(u64::from(u32::MAX), 1);
        assert!(later >= u64::from(u32::MAX) << 20);
    }

    #[test]
    fn classifies_server_errors() {
        let e = clickhouse::error::Error::BadResponse(
            "Code: 60, e.displayText() = DB::Exception: Table x doesn't exist".into(),
        );
        assert!(!map_err(e).is_retryable());
        let e = clickhouse::error::Error::BadResponse(
            "Code: 252, e.displayText() = DB::Exception: Too many parts".into(),
        );
        assert!(map_err(e).is_retryable());
        assert!(map_err(clickhouse::error::Error::TimedOut).is_retryable());
    }

    #[test]
    fn batch_insert_columns_match_table() {
        assert_eq!(
            <RecordRow<'_> as Row>::COLUMN_NAMES,
            &["owner", "session_id", "first_ts", "seq", "dims", "writer"]
        );
    }

    #[test]
    fn insert_columns_match_table() {
        assert_eq!(
            <InsertRow<'_> as Row>::COLUMN_NAMES,
            &[
                "owner",
                "session_id",
                "ts",
                "type",
                "payload",
                "content_id",
                "ver"
            ]
        );
    }
}
