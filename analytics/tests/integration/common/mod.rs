//! Shared helpers for the analytics integration tests: fresh stores on both engines (a
//! temp SQLite file, a fresh ClickHouse database at `CLICKHOUSE_URL` named with
//! `SW_TEST_PREFIX`, dropped at the end), and writing generated fleets through the real
//! sinks.
#![allow(dead_code)]

use std::sync::Arc;

use analytics::fleet::Fleet;
use analytics::live::Key;
use analytics::{Event, LiveViews, Refresher, Store};
use ingest::{ClickHouseConfig, ClickHouseSink, EventSink, SinkWrite, SqliteSink, UaCache};
use rand::Rng;

/// ClickHouse HTTP endpoint for tests (`CLICKHOUSE_URL`, default local server).
pub fn clickhouse_url() -> String {
    std::env::var("CLICKHOUSE_URL").unwrap_or_else(|_| "http://127.0.0.1:8123".to_owned())
}

/// A random database name under the run's prefix (`SW_TEST_PREFIX`, default `sw_test_`).
pub fn random_database() -> String {
    let n: u64 = rand::thread_rng().gen();
    let prefix = std::env::var("SW_TEST_PREFIX").unwrap_or_else(|_| "sw_test_".to_owned());
    format!("{prefix}qoe_{n:016x}")
}

/// One engine under test: the sink (write side), the store (read side) and what must
/// live as long as them.
pub struct Engine {
    pub name: &'static str,
    pub sink: Arc<dyn EventSink>,
    pub store: Store,
    pub database: Option<String>,
    pub dir: Option<tempfile::TempDir>,
    /// As the server runs either engine: the live views take every batch written with
    /// [`write_fleet`], and the refresher writes what they hold from memory.
    pub live: Option<Arc<LiveViews>>,
}

impl Engine {
    /// A refresher over this engine's store (with its live views).
    pub fn refresher(&self) -> Refresher {
        Refresher::new(self.store.clone()).with_live(self.live.clone())
    }

    /// Runs refresh steps until one finds nothing new (tests drive the refresher
    /// explicitly; no sleeping).
    pub async fn refresh(&self) -> analytics::RefreshStats {
        let mut r = self.refresher();
        r.step().await.expect("refresh step")
    }

    /// A raw ClickHouse client on this engine's database (ClickHouse only).
    pub fn clickhouse(&self) -> clickhouse::Client {
        clickhouse::Client::default()
            .with_url(clickhouse_url())
            .with_database(self.database.as_deref().expect("a ClickHouse engine"))
            .with_validation(false)
            .with_compression(clickhouse::Compression::None)
    }

    /// The stored `dims` text of each batch record of `session`, in write order.
    pub async fn stored_dims(&self, owner: &str, session: &str) -> Vec<String> {
        match &self.dir {
            Some(dir) => {
                let db = rusqlite::Connection::open(dir.path().join("telemetry.db")).expect("open");
                let mut q = db
                    .prepare("SELECT dims FROM view_batches WHERE owner = ?1 AND session_id = ?2 ORDER BY id")
                    .expect("prepare");
                q.query_map([owner, session], |r| r.get(0))
                    .expect("query")
                    .collect::<Result<_, _>>()
                    .expect("rows")
            }
            None => {
                // Records wait in the Buffer in front of `view_batches` (a second or two).
                let ch = self.clickhouse();
                ch.query("OPTIMIZE TABLE view_batches_buffer")
                    .execute()
                    .await
                    .expect("flush the records' Buffer");
                ch.query(
                    "SELECT dims FROM view_batches WHERE owner = ? AND session_id = ? ORDER BY seq",
                )
                .bind(owner)
                .bind(session)
                .fetch_all::<String>()
                .await
                .expect("records")
            }
        }
    }

    /// Drops the ClickHouse database (the temp dir removes itself).
    pub async fn finish(self) {
        if let Some(db) = &self.database {
            let client = clickhouse::Client::default()
                .with_url(clickhouse_url())
                .with_compression(clickhouse::Compression::None);
            let _ = client
                .query(&format!("DROP DATABASE IF EXISTS {db}"))
                .execute()
                .await;
        }
    }
}

/// A fresh SQLite engine in a temp dir.
pub async fn sqlite() -> Engine {
    let dir = tempfile::tempdir().expect("tempdir");
    let sink = SqliteSink::open_in_dir(dir.path())
        .await
        .expect("open sqlite sink");
    Engine {
        name: "sqlite",
        store: Store::sqlite(sink.clone()),
        sink: Arc::new(sink),
        database: None,
        dir: Some(dir),
        live: None,
    }
}

/// A fresh SQLite engine with live views, as the server runs it.
pub async fn sqlite_live() -> Engine {
    Engine {
        name: "sqlite live",
        live: Some(Arc::new(LiveViews::new(0))),
        ..sqlite().await
    }
}

/// A fresh SQLite engine with live views that hold at most `cap` views whole.
pub async fn sqlite_live_capped(cap: usize) -> Engine {
    Engine {
        name: "sqlite live, capped",
        live: Some(Arc::new(LiveViews::with_cap(0, cap))),
        ..sqlite().await
    }
}

/// A fresh ClickHouse engine (new database).
pub async fn clickhouse() -> Engine {
    let config = ClickHouseConfig::new(clickhouse_url(), random_database());
    let sink = ClickHouseSink::connect(&config).await.expect(
        "connect to ClickHouse (start it with ingest/scripts/start-clickhouse.sh or set CLICKHOUSE_URL)",
    );
    Engine {
        name: "clickhouse",
        store: Store::clickhouse(config.client()),
        sink: Arc::new(sink),
        database: Some(config.database),
        dir: None,
        live: None,
    }
}

/// A fresh ClickHouse engine with live views, as the server runs it.
pub async fn clickhouse_live() -> Engine {
    let e = clickhouse().await;
    let config = ClickHouseConfig::new(clickhouse_url(), e.database.clone().unwrap_or_default());
    // Another sink on the same database, so the live views know its writer id.
    let sink = ClickHouseSink::connect(&config).await.expect("connect");
    Engine {
        name: "clickhouse live",
        sink: Arc::new(sink),
        live: Some(Arc::new(LiveViews::new(config.writer))),
        ..e
    }
}

/// A fresh ClickHouse engine with live views that hold at most `cap` views whole: the
/// views past it are read back (`analytics::live::MAX_VIEWS`).
pub async fn clickhouse_live_capped(cap: usize) -> Engine {
    let e = clickhouse_live().await;
    let writer = e.live.as_ref().map_or(0, |l| l.writer());
    Engine {
        name: "clickhouse live, capped",
        live: Some(Arc::new(LiveViews::with_cap(writer, cap))),
        ..e
    }
}

/// Both engines, each with and without live views.
pub async fn both() -> Vec<Engine> {
    vec![
        sqlite().await,
        sqlite_live().await,
        clickhouse().await,
        clickhouse_live().await,
    ]
}

/// What the ingest route gives `live` for a stored batch: its key, events and record.
pub fn taken(
    b: &analytics::fleet::GenBatch,
    record: &ingest::BatchRecord,
) -> (Key, Vec<Event>, ingest::BatchRecord) {
    let key = Key::from(record);
    let events = b.events.iter().map(Event::from_stored).collect();
    (key, events, record.clone())
}

/// Writes `fleet` for `owner` through `e`'s sink, in fleet order, `per_write` batches per
/// sink write (as the group-commit writer gathers them), each batch's `User-Agent`
/// classified as the ingest route does; the engine's live views take each written batch,
/// as the route does once its write is acknowledged.
pub async fn write_fleet(e: &Engine, owner: &str, fleet: &Fleet, per_write: usize) {
    let ua = UaCache::default();
    for chunk in fleet.batches.chunks(per_write.max(1)) {
        let mut write = SinkWrite::default();
        let mut taken_batches = Vec::new();
        for b in chunk {
            let (rows, record) = b.to_write(owner, ua.classify(b.user_agent.as_deref()));
            taken_batches.push(taken(b, &record));
            write.rows.extend(rows);
            write.batches.push(record);
        }
        e.sink.write(write).await.expect("write fleet");
        if let Some(live) = &e.live {
            for (key, events, record) in taken_batches {
                live.take(key, events, &record);
            }
        }
    }
}
