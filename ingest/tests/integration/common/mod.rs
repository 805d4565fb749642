//! Shared helpers for the ingest integration tests: fresh sinks (a temp SQLite file,
//! a fresh ClickHouse database at `CLICKHOUSE_URL`) and row builders.
#![allow(dead_code)]

use std::sync::Arc;

use analytics::{AnalyticsError, SessionSummary, Store, StoredEvent};
use ingest::{
    ClickHouseConfig, ClickHouseSink, EventRow, EventSink, EventType, Payload, SinkError,
    SqliteSink,
};
use rand::Rng;

/// ClickHouse HTTP endpoint for tests (`CLICKHOUSE_URL`, default local server).
pub fn clickhouse_url() -> String {
    std::env::var("CLICKHOUSE_URL").unwrap_or_else(|_| "http://127.0.0.1:8123".to_owned())
}

/// A sink under test, the analytics store reading the same data, and whatever must
/// live as long as them.
pub struct TestSink {
    pub sink: Arc<dyn EventSink>,
    pub store: Store,
    pub cleanup: Cleanup,
}

/// The write side and the read side of one store, for the conformance cases.
#[derive(Clone)]
pub struct Handle {
    pub sink: Arc<dyn EventSink>,
    pub store: Store,
}

impl Handle {
    /// Writes `rows` (one bare batch record per session).
    pub async fn write(&self, rows: Vec<EventRow>) -> Result<(), SinkError> {
        self.sink.write(rows.into()).await
    }

    /// The session read-back.
    pub async fn sessions(
        &self,
        owner: &str,
        limit: u32,
    ) -> Result<Vec<SessionSummary>, AnalyticsError> {
        self.store.sessions(owner, limit).await
    }

    /// One session's events.
    pub async fn session_events(
        &self,
        owner: &str,
        session_id: &str,
    ) -> Result<Vec<StoredEvent>, AnalyticsError> {
        self.store.session_events(owner, session_id).await
    }
}

pub enum Cleanup {
    Sqlite(tempfile::TempDir),
    ClickHouse { database: String },
}

impl TestSink {
    /// The write and read sides.
    pub fn handle(&self) -> Handle {
        Handle {
            sink: self.sink.clone(),
            store: self.store.clone(),
        }
    }

    /// Drops the ClickHouse test database (best effort); the temp dir removes itself.
    pub async fn finish(self) {
        if let Cleanup::ClickHouse { database } = &self.cleanup {
            let client = clickhouse::Client::default()
                .with_url(clickhouse_url())
                .with_compression(clickhouse::Compression::None);
            let _ = client
                .query(&format!("DROP DATABASE IF EXISTS {database}"))
                .execute()
                .await;
        }
    }
}

/// A fresh SQLite sink in a temp dir.
pub async fn sqlite() -> TestSink {
    let dir = tempfile::tempdir().expect("tempdir");
    let sink = SqliteSink::open_in_dir(dir.path())
        .await
        .expect("open sqlite sink");
    TestSink {
        store: Store::sqlite(sink.clone()),
        sink: Arc::new(sink),
        cleanup: Cleanup::Sqlite(dir),
    }
}

/// A random database name for one test, under the run's prefix (`SW_TEST_PREFIX`, set by
/// `scripts/test` so a run drops only its own databases).
pub fn random_database() -> String {
    let n: u64 = rand::thread_rng().gen();
    let prefix = std::env::var("SW_TEST_PREFIX").unwrap_or_else(|_| "sw_test_".to_owned());
    format!("{prefix}ingest_{n:016x}")
}

/// Config for a fresh ClickHouse database.
pub fn clickhouse_config() -> ClickHouseConfig {
    ClickHouseConfig::new(clickhouse_url(), random_database())
}

/// A ClickHouse sink on a fresh database.
pub async fn clickhouse() -> TestSink {
    let config = clickhouse_config();
    let sink = ClickHouseSink::connect(&config).await.expect(
        "connect to ClickHouse (start it with ingest/scripts/start-clickhouse.sh or set CLICKHOUSE_URL)",
    );
    TestSink {
        store: Store::clickhouse(sink.client().clone()),
        sink: Arc::new(sink),
        cleanup: Cleanup::ClickHouse {
            database: config.database,
        },
    }
}

/// Base time of test events: 2024-05-01T12:00:00.000Z.
pub const T0: i64 = 1_714_564_800_000;

/// A row of `t` at `T0 + offset_ms`, with a payload derived from `marker`.
pub fn row(owner: &str, session: &str, offset_ms: i64, t: EventType, marker: f64) -> EventRow {
    let payload = payload(t, marker);
    EventRow {
        owner: owner.into(),
        session_id: session.into(),
        ts_ms: T0 + offset_ms,
        event_type: t,
        content_id: payload.content_id().unwrap_or_default().to_owned(),
        payload: payload.to_json(),
    }
}

/// A complete payload of `t`; `marker` lands in a numeric field so tests can tell
/// versions of the same key apart.
pub fn payload(t: EventType, marker: f64) -> Payload {
    match t {
        EventType::PlaybackStart => Payload::PlaybackStart {
            position_ms: marker,
            duration_ms: 3_600_000.0,
            content_id: format!("content-{marker}"),
            startup_ms: None,
        },
        EventType::PlaybackPause => Payload::PlaybackPause {
            position_ms: marker,
            buffered_ms: 1.0,
        },
        EventType::PlaybackResume => Payload::PlaybackResume {
            position_ms: marker,
            buffered_ms: 1.0,
        },
        EventType::RebufferStart => Payload::RebufferStart {
            position_ms: marker,
            buffered_ms: 0.0,
        },
        EventType::RebufferEnd => Payload::RebufferEnd {
            position_ms: marker,
            buffered_ms: 2.0,
        },
        EventType::QualityChange => Payload::QualityChange {
            from: "720p".into(),
            to: "1080p".into(),
            bitrate: marker,
            width: None,
            height: None,
        },
        EventType::Error => Payload::Error {
            code: "E".into(),
            message: format!("m{marker}"),
            fatal: false,
        },
        EventType::SessionEnd => Payload::SessionEnd {
            reason: ingest::EndReason::Ended,
            duration_ms: marker,
        },
    }
}

/// `n` rows of one session cycling through every type, 1 s apart from `start_s`.
pub fn session_rows(owner: &str, session: &str, start_s: i64, n: usize) -> Vec<EventRow> {
    (0..n)
        .map(|i| {
            let t = EventType::ALL[i % 8];
            row(owner, session, (start_s + i as i64) * 1000, t, i as f64)
        })
        .collect()
}
