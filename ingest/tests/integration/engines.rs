//! Engine-specific behaviour that the shared conformance suite cannot express:
//! migrations, physical dedup in ClickHouse, SQLite durability settings, error
//! classification.

use crate::common;

use analytics::Store;
use common::{clickhouse_config, clickhouse_url, row, session_rows};
use ingest::{ClickHouseConfig, ClickHouseSink, EventSink, SqliteSink};

fn raw_client(database: &str) -> clickhouse::Client {
    clickhouse::Client::default()
        .with_url(clickhouse_url())
        .with_database(database)
        .with_validation(false)
        .with_compression(clickhouse::Compression::None)
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct Count {
    n: u64,
}

async fn count(database: &str, sql: &str) -> u64 {
    raw_client(database)
        .query(sql)
        .fetch_one::<Count>()
        .await
        .expect("count")
        .n
}

#[tokio::test]
async fn clickhouse_creates_database_and_migrates_idempotently() {
    let config = clickhouse_config();
    let _first = ClickHouseSink::connect(&config)
        .await
        .expect("first connect");
    let second = ClickHouseSink::connect(&config)
        .await
        .expect("second connect");
    second.migrate().await.expect("third run");
    assert_eq!(
        count(
            &config.database,
            "SELECT count() AS n FROM schema_migrations"
        )
        .await,
        4,
        "each migration recorded once"
    );
    // The records' Buffer names its destination with this database spelled out (the
    // `{database}` of migration 0003), so it flushes there after a server restart too.
    let engine: Vec<String> = raw_client(&config.database)
        .query("SELECT engine_full FROM system.tables WHERE database = currentDatabase() AND name = 'view_batches_buffer'")
        .fetch_all()
        .await
        .expect("buffer");
    assert_eq!(engine.len(), 1);
    assert!(
        engine[0].starts_with(&format!("Buffer({}, view_batches, ", config.database)),
        "{engine:?}"
    );
    assert_eq!(
        count(
            &config.database,
            "SELECT count() AS n FROM system.tables WHERE database = currentDatabase() AND name = 'telemetry_events'"
        )
        .await,
        1
    );
    drop_db(&config.database).await;
}

#[tokio::test]
async fn clickhouse_reads_are_exact_before_and_after_merges() {
    let config = clickhouse_config();
    let sink = ClickHouseSink::connect(&config).await.expect("connect");
    let first = session_rows("u1", "s1", 0, 10);
    let mut second = first.clone();
    for r in &mut second {
        r.payload = row("u1", "s1", 0, r.event_type, 1234.0).payload;
    }
    sink.write(first.clone().into()).await.expect("first");
    sink.write(second.clone().into()).await.expect("second");
    // Unmerged parts hold both copies; FINAL reads one, the first.
    assert_eq!(
        count(
            &config.database,
            "SELECT count() AS n FROM telemetry_events"
        )
        .await,
        20
    );
    let events = Store::clickhouse(sink.client().clone())
        .session_events("u1", "s1")
        .await
        .expect("read");
    assert_eq!(events.len(), 10);
    assert_eq!(events[0].payload, first[0].payload);
    // After a forced merge the first version is the one physically kept.
    raw_client(&config.database)
        .query("OPTIMIZE TABLE telemetry_events FINAL")
        .execute()
        .await
        .expect("optimize");
    assert_eq!(
        count(
            &config.database,
            "SELECT count() AS n FROM telemetry_events"
        )
        .await,
        10
    );
    let events = Store::clickhouse(sink.client().clone())
        .session_events("u1", "s1")
        .await
        .expect("read");
    assert_eq!(events[3].payload, first[3].payload);
    drop_db(&config.database).await;
}

#[tokio::test]
async fn clickhouse_unreachable_is_retryable() {
    let config = ClickHouseConfig::new("http://127.0.0.1:1", "x");
    let err = ClickHouseSink::connect(&config)
        .await
        .expect_err("no server");
    assert!(err.is_retryable(), "{err}");
}

#[tokio::test]
async fn clickhouse_rejects_bad_database_name() {
    let config = ClickHouseConfig::new(clickhouse_url(), "bad-name; DROP");
    let err = ClickHouseSink::connect(&config)
        .await
        .expect_err("bad name");
    assert!(!err.is_retryable());
}

#[tokio::test]
async fn clickhouse_missing_table_is_permanent() {
    let config = clickhouse_config();
    let sink = ClickHouseSink::connect(&config).await.expect("connect");
    raw_client(&config.database)
        .query("DROP TABLE telemetry_events")
        .execute()
        .await
        .expect("drop");
    let err = sink
        .write(session_rows("u1", "s1", 0, 3).into())
        .await
        .expect_err("no table");
    assert!(!err.is_retryable(), "{err}");
    drop_db(&config.database).await;
}

#[tokio::test]
async fn clickhouse_records_carry_their_writer_and_the_writer_migration_runs_again_cleanly() {
    let config = clickhouse_config();
    let sink = ClickHouseSink::connect(&config).await.expect("connect");
    sink.write(ingest::SinkWrite::from_rows(session_rows("o", "s1", 0, 3)))
        .await
        .expect("write");
    // An instance that applied migration 0004 while another was recording it: its version
    // row is not there yet, the column is. Applying it again skips the column and recreates
    // the Buffer, writing out the record it holds.
    raw_client(&config.database)
        .query("ALTER TABLE schema_migrations DELETE WHERE version = 4")
        .execute()
        .await
        .expect("delete");
    for _ in 0..100 {
        let left = count(
            &config.database,
            "SELECT count() AS n FROM schema_migrations WHERE version = 4",
        )
        .await;
        if left == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    sink.migrate().await.expect("migration 4 again");
    let other = ClickHouseConfig {
        writer: config.writer + 1,
        ..config.clone()
    };
    let second = ClickHouseSink::connect(&other)
        .await
        .expect("second writer");
    second
        .write(ingest::SinkWrite::from_rows(session_rows("o", "s2", 0, 2)))
        .await
        .expect("write");
    raw_client(&config.database)
        .query("OPTIMIZE TABLE view_batches_buffer")
        .execute()
        .await
        .expect("flush");
    #[derive(clickhouse::Row, serde::Deserialize)]
    struct Writer {
        session_id: String,
        writer: u64,
    }
    let writers: Vec<Writer> = raw_client(&config.database)
        .query("SELECT session_id, writer FROM view_batches ORDER BY session_id")
        .fetch_all()
        .await
        .expect("records");
    let got: Vec<(&str, u64)> = writers
        .iter()
        .map(|w| (w.session_id.as_str(), w.writer))
        .collect();
    assert_eq!(got, vec![("s1", config.writer), ("s2", config.writer + 1)]);
    drop_db(&config.database).await;
}

/// Sessions of `owner` stored in the embedded `sink`, as the analytics reads list them.
async fn stored_sessions(sink: &SqliteSink, owner: &str) -> usize {
    Store::sqlite(sink.clone())
        .sessions(owner, 100_000)
        .await
        .expect("sessions")
        .len()
}

async fn drop_db(database: &str) {
    let _ = raw_client("default")
        .query(&format!("DROP DATABASE IF EXISTS {database}"))
        .execute()
        .await;
}

#[tokio::test]
async fn sqlite_uses_wal_and_full_sync_and_persists_across_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let sink = SqliteSink::open_in_dir(dir.path()).await.expect("open");
        let (mode, sync) = sink.write_settings().await.expect("pragmas");
        assert_eq!(mode, "wal");
        assert_eq!(sync, 2, "FULL");
        sink.write(session_rows("u1", "s1", 0, 12).into())
            .await
            .expect("write");
        sink.close().await;
    }
    assert!(dir.path().join("telemetry.db").exists());
    let sink = SqliteSink::open_in_dir(dir.path()).await.expect("reopen");
    assert_eq!(
        Store::sqlite(sink.clone())
            .session_events("u1", "s1")
            .await
            .expect("read")
            .len(),
        12
    );
    let migrations: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM telemetry_migrations")
        .fetch_one(sink.pool())
        .await
        .expect("count");
    assert_eq!(migrations, 3);
}

/// Committed rows reach the database file without any write paying for it: the
/// checkpoint thread copies WAL frames back after commits. (SQLite's own
/// auto-checkpoint is set to 1 GiB, far beyond this test, so only that thread can
/// make the file grow.)
#[tokio::test]
async fn sqlite_checkpoints_committed_rows_off_the_write_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sink = SqliteSink::open_in_dir(dir.path()).await.expect("open");
    let db = dir.path().join("telemetry.db");
    let before = std::fs::metadata(&db).expect("db file").len();
    for i in 0..20 {
        sink.write(session_rows("u1", &format!("s{i}"), 0, 200).into())
            .await
            .expect("write");
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let now = std::fs::metadata(&db).expect("db file").len();
        if now > before + 256 * 1024 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "database file still {now} bytes (was {before}): nothing checkpointed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(stored_sessions(&sink, "u1").await, 20);
}

#[tokio::test]
async fn sqlite_unopenable_path_is_an_error() {
    let path = std::path::Path::new("/proc/definitely/not/here.db");
    let err = SqliteSink::open(path).await.expect_err("cannot open");
    // A path that cannot be opened will not open on a retry either, and the error names it.
    assert!(!err.is_retryable(), "{err}");
    assert!(
        err.to_string().contains("/proc/definitely/not/here.db"),
        "{err}"
    );
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct AppliedRow {
    version: u32,
    checksum: String,
}

/// What `schema_migrations` holds: each version once with its checksum (`max`, as the
/// runner reads it).
async fn clickhouse_checksums(database: &str) -> Vec<(i64, String)> {
    raw_client(database)
        .query("SELECT version, max(checksum) AS checksum FROM schema_migrations GROUP BY version ORDER BY version")
        .fetch_all::<AppliedRow>()
        .await
        .expect("applied")
        .into_iter()
        .map(|r| (i64::from(r.version), r.checksum))
        .collect()
}

fn expected_checksums(set: &migrate::Set) -> Vec<(i64, String)> {
    set.migrations
        .iter()
        .map(|m| (m.version, m.checksum()))
        .collect()
}

/// A ClickHouse database migrated by the runner before checksums (its table without the
/// column, a version recorded twice by two instances) upgrades without applying anything
/// again and records every file's SHA-256; a file changed after it was applied is then
/// refused, as a changed migration (never retried), with one line naming it.
#[tokio::test]
async fn clickhouse_upgrades_a_database_from_before_checksums_then_refuses_a_changed_file() {
    let config = clickhouse_config();
    let db = &config.database;
    raw_client("default")
        .query(&format!("CREATE DATABASE {db}"))
        .execute()
        .await
        .expect("database");
    let client = raw_client(db);
    client
        .query(
            "CREATE TABLE schema_migrations (version UInt32, name String, applied_at DateTime) \
             ENGINE = MergeTree ORDER BY version",
        )
        .execute()
        .await
        .expect("old table");
    for m in migrate::CLICKHOUSE.migrations {
        for statement in migrate::statements(&m.sql.replace("{database}", db)) {
            client.query(&statement).execute().await.expect(m.name);
        }
        for _ in 0..if m.version == 1 { 2 } else { 1 } {
            client
                .query("INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, now())")
                .bind(m.version as u32)
                .bind(m.name)
                .execute()
                .await
                .expect("old row");
        }
    }
    client
        .query("INSERT INTO qoe_refresh_state (name, value) VALUES ('views', 42)")
        .execute()
        .await
        .expect("state");

    for _ in 0..2 {
        ClickHouseSink::connect(&config).await.expect("upgrades");
        assert_eq!(
            clickhouse_checksums(db).await,
            expected_checksums(&migrate::CLICKHOUSE)
        );
    }
    assert_eq!(
        count(
            db,
            "SELECT toUInt64(max(value)) AS n FROM qoe_refresh_state"
        )
        .await,
        42,
        "nothing applied again"
    );

    // The second file as if it had been edited since it was applied.
    client
        .query("INSERT INTO schema_migrations (version, name, applied_at, checksum) VALUES (2, '0002_qoe_views', now(), ?)")
        .bind("f".repeat(64))
        .execute()
        .await
        .expect("tamper");
    let line = format!(
        "migration 0002_qoe_views of migrations/clickhouse/ was changed after it was applied \
         (SHA-256 {}…, recorded ffffffffffff…): restore the file and make the change a new migration",
        &migrate::CLICKHOUSE.migrations[1].checksum()[..12]
    );
    let opened = ClickHouseSink::open(&config).await.expect("opens");
    match opened.migrate().await {
        Err(ingest::sink::clickhouse::MigrationError::Changed(c)) => {
            assert_eq!(c.to_string(), line)
        }
        other => panic!("expected a changed migration, got {other:?}"),
    }
    match ClickHouseSink::connect(&config).await {
        Err(ingest::SinkError::Permanent(m)) => assert_eq!(m, line),
        Err(e) => panic!("expected a permanent error, got {e:?}"),
        Ok(_) => panic!("expected a refusal"),
    }
    drop_db(db).await;
}

/// Instances starting at once on one fresh ClickHouse database: each applies what it finds
/// missing, harmlessly twice, and every version ends up with its checksum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clickhouse_instances_starting_at_once_all_migrate() {
    let config = clickhouse_config();
    let (a, b, c) = tokio::join!(
        ClickHouseSink::connect(&config),
        ClickHouseSink::connect(&config),
        ClickHouseSink::connect(&config)
    );
    a.expect("a");
    b.expect("b");
    c.expect("c");
    assert_eq!(
        clickhouse_checksums(&config.database).await,
        expected_checksums(&migrate::CLICKHOUSE)
    );
    ClickHouseSink::connect(&config)
        .await
        .expect("and once more");
    drop_db(&config.database).await;
}

/// The embedded telemetry file as the runner before checksums left it upgrades without
/// applying anything again, records every file's SHA-256, and then refuses a changed file
/// with the runner's one line.
#[tokio::test]
async fn sqlite_upgrades_a_file_from_before_checksums_then_refuses_a_changed_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("telemetry.db");
    {
        let conn = rusqlite::Connection::open(&path).expect("open");
        conn.execute_batch(
            "CREATE TABLE telemetry_migrations (version INTEGER PRIMARY KEY, \
             name TEXT NOT NULL, applied_at TEXT NOT NULL)",
        )
        .expect("old table");
        for m in migrate::TELEMETRY_SQLITE.migrations {
            conn.execute_batch(m.sql).expect(m.name);
            conn.execute(
                "INSERT INTO telemetry_migrations (version, name, applied_at) VALUES (?1, ?2, 'then')",
                rusqlite::params![m.version, m.name],
            )
            .expect("old row");
        }
        conn.execute(
            "INSERT INTO telemetry_events (owner, session_id, ts, type, payload) \
             VALUES ('u1', 's1', 1, 'playback_pause', '{}')",
            [],
        )
        .expect("an event");
    }
    let checksums = |sink: &SqliteSink| {
        let pool = sink.pool().clone();
        async move {
            sqlx::query_as::<_, (i64, String)>(
                "SELECT version, checksum FROM telemetry_migrations ORDER BY version",
            )
            .fetch_all(&pool)
            .await
            .expect("applied")
        }
    };
    for _ in 0..2 {
        let sink = SqliteSink::open_in_dir(dir.path()).await.expect("upgrades");
        assert_eq!(
            checksums(&sink).await,
            expected_checksums(&migrate::TELEMETRY_SQLITE)
        );
        assert_eq!(
            Store::sqlite(sink.clone())
                .session_events("u1", "s1")
                .await
                .expect("read")
                .len(),
            1,
            "nothing applied again"
        );
        sink.close().await;
    }
    rusqlite::Connection::open(&path)
        .expect("open")
        .execute(
            "UPDATE telemetry_migrations SET checksum = ?1 WHERE version = 2",
            [&"0".repeat(64)],
        )
        .expect("tamper");
    let line = format!(
        "migration 0002_qoe_views of migrations/telemetry-sqlite/ was changed after it was \
         applied (SHA-256 {}…, recorded 000000000000…): restore the file and make the change a new migration",
        &migrate::TELEMETRY_SQLITE.migrations[1].checksum()[..12]
    );
    match SqliteSink::open_in_dir(dir.path()).await {
        Err(ingest::SinkError::Permanent(m)) => assert!(m.ends_with(&line), "{m}"),
        Err(e) => panic!("expected a permanent error, got {e:?}"),
        Ok(_) => panic!("expected a refusal"),
    }
}

/// The refresher's transactions let ingest writes go first, but only for a while: with ingest
/// writing without a pause, a transaction still runs, and both its rows and every
/// acknowledged ingest write are stored.
#[tokio::test]
async fn sqlite_a_write_transaction_is_not_starved_by_ingest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sink = SqliteSink::open_in_dir(dir.path()).await.expect("open");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (sink, stop) = (sink.clone(), stop.clone());
            tokio::spawn(async move {
                let mut written = 0;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    sink.write(session_rows("u1", &format!("w{w}-{written}"), 0, 20).into())
                        .await
                        .expect("write");
                    written += 1;
                }
                written
            })
        })
        .collect();
    for n in 0..20 {
        let stored = tokio::time::timeout(
            std::time::Duration::from_secs(30),
            sink.write_transaction(move |tx| {
                tx.execute(
                    "INSERT INTO qoe_refresh_state (name, value) VALUES ('probe', ?1) \
                     ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                    [n],
                )
            }),
        )
        .await
        .expect("a write transaction ran while ingest wrote without a pause")
        .expect("write transaction");
        assert_eq!(stored, 1);
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut sessions = 0;
    for w in writers {
        sessions += w.await.expect("writer");
    }
    assert!(sessions > 0);
    assert_eq!(stored_sessions(&sink, "u1").await, sessions);
}

/// The refresher's transactions commit without an fsync while they hold the writer (they
/// fsync the WAL after letting it go), and only they: after one, whether it committed,
/// failed or panicked, the write connection is back at the sink's durability for the next
/// ingest write.
#[tokio::test]
async fn sqlite_a_write_transaction_lowers_synchronous_for_itself_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sink = SqliteSink::open_in_dir(dir.path()).await.expect("open");
    let full = ("wal".to_owned(), 2);
    assert_eq!(sink.write_settings().await.expect("settings"), full);

    let inside: i64 = sink
        .write_transaction(|tx| tx.query_row("PRAGMA synchronous", [], |r| r.get(0)))
        .await
        .expect("write transaction");
    assert_eq!(inside, 1, "NORMAL inside the refresher's transaction");
    assert_eq!(sink.write_settings().await.expect("settings"), full);

    let failed = sink
        .write_transaction(|tx| tx.execute("INSERT INTO no_such_table VALUES (1)", []))
        .await;
    assert!(failed.is_err(), "{failed:?}");
    assert_eq!(sink.write_settings().await.expect("settings"), full);

    let panicked = sink
        .write_transaction(|_| -> rusqlite::Result<()> { panic!("a bug in a refresher step") })
        .await;
    assert!(
        matches!(panicked, Err(ingest::SinkError::Permanent(_))),
        "{panicked:?}"
    );
    assert_eq!(sink.write_settings().await.expect("settings"), full);

    // The writer is usable after the panic, and what it acknowledges is stored.
    sink.write(session_rows("u1", "after-panic", 0, 5).into())
        .await
        .expect("write");
    assert_eq!(stored_sessions(&sink, "u1").await, 1);
}
