//! ClickHouse sink: RowBinary inserts through the `clickhouse` crate into a
//! `ReplacingMergeTree` table, exact reads with `FINAL`, and the start-up migration
//! runner for `migrations/clickhouse/`.
//!
//! Works against Debian's ClickHouse 18.16 (the CI server) and current releases
//! (see shared/notes/clickhouse.md): no compression, client-side `?` binds, and
//! row-type validation off on servers that predate `RowBinaryWithNamesAndTypes`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use clickhouse::{Client, Compression, Row};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::TokioExecutor;
use serde::{Deserialize, Serialize};

use super::{EventSink, SessionSummary, SinkError, StoredEvent, TypeCounts};
use crate::row::EventRow;
use crate::wire::EventType;

/// Table holding the events.
pub const EVENTS_TABLE: &str = "telemetry_events";

/// Table recording applied migrations.
pub const MIGRATIONS_TABLE: &str = "schema_migrations";

/// Numbered migrations of `migrations/clickhouse/`, embedded at build time.
pub const MIGRATIONS: &[(u32, &str, &str)] = &[(
    1,
    "0001_telemetry_events",
    include_str!("../../../migrations/clickhouse/0001_telemetry_events.sql"),
)];

/// Time allowed for sending an insert's rows, and for the server to confirm it.
const INSERT_TIMEOUT: Duration = Duration::from_secs(30);

/// Connection settings (decisions.md §3: `CLICKHOUSE_URL`, `CLICKHOUSE_DATABASE`,
/// `CLICKHOUSE_USER`, `CLICKHOUSE_PASSWORD`).
#[derive(Clone)]
pub struct ClickHouseConfig {
    /// HTTP endpoint, e.g. `http://127.0.0.1:8123`.
    pub url: String,
    /// Database; created at start-up when missing.
    pub database: String,
    /// User; the server default when `None`.
    pub user: Option<String>,
    /// Password; none when `None`.
    pub password: Option<String>,
    /// Row-type validation of the crate. `None` = automatic: on for ClickHouse 22+,
    /// off for older servers such as 18.16, which cannot describe result types.
    pub validation: Option<bool>,
}

impl std::fmt::Debug for ClickHouseConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClickHouseConfig")
            .field("url", &self.url)
            .field("database", &self.database)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("validation", &self.validation)
            .finish()
    }
}

impl ClickHouseConfig {
    /// Settings for `url` and `database` with the server's default user.
    pub fn new(url: impl Into<String>, database: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            database: database.into(),
            user: None,
            password: None,
            validation: None,
        }
    }

    /// A client without a database selected.
    fn base_client(&self) -> Client {
        // TCP_NODELAY: the crate's default connector leaves Nagle on, which stalls
        // small requests ~40 ms behind delayed ACKs (shared/notes/clickhouse.md).
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_keepalive(Some(Duration::from_secs(60)));
        let http = HyperClient::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(2))
            .build(connector);
        let mut c = Client::with_http_client(http)
            .with_url(&self.url)
            .with_compression(Compression::None);
        if let Some(u) = &self.user {
            c = c.with_user(u);
        }
        if let Some(p) = &self.password {
            c = c.with_password(p);
        }
        c
    }
}

/// Telemetry storage in ClickHouse.
#[derive(Clone)]
pub struct ClickHouseSink {
    client: Client,
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

#[derive(Row, Deserialize)]
struct SessionRow {
    session_id: String,
    first_ts: i64,
    last_ts: i64,
    event_count: u64,
    c_playback_start: u64,
    c_playback_pause: u64,
    c_playback_resume: u64,
    c_rebuffer_start: u64,
    c_rebuffer_end: u64,
    c_quality_change: u64,
    c_error: u64,
    c_session_end: u64,
    content_id: String,
}

#[derive(Row, Deserialize)]
struct EventReadRow {
    ts: i64,
    #[serde(rename = "type")]
    event_type: String,
    payload: String,
}

#[derive(Row, Deserialize)]
struct VersionRow {
    version: u32,
}

#[derive(Row, Deserialize)]
struct TextRow {
    text: String,
}

impl ClickHouseSink {
    /// Connects, creates the database when missing and applies pending migrations.
    pub async fn connect(config: &ClickHouseConfig) -> Result<Self, SinkError> {
        if config.database.is_empty()
            || !config
                .database
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(SinkError::Permanent(format!(
                "invalid ClickHouse database name {:?} (use [A-Za-z0-9_])",
                config.database
            )));
        }
        // The version probe runs unvalidated: validation needs a format that old
        // servers lack (RowBinaryWithNamesAndTypes).
        let base = config.base_client().with_validation(false);
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
        let base = base.with_validation(validation);
        base.query(&format!(
            "CREATE DATABASE IF NOT EXISTS {}",
            config.database
        ))
        .execute()
        .await
        .map_err(map_err)?;
        let client = base.with_database(&config.database);
        let sink = Self { client };
        sink.migrate().await?;
        tracing::info!(server_version = %version, validation, database = %config.database, "clickhouse sink ready");
        Ok(sink)
    }

    /// The underlying client (database selected), e.g. for analytics queries.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Applies every embedded migration not yet recorded, in order. Idempotent:
    /// the statements themselves are `IF NOT EXISTS`, so two instances starting at
    /// once are harmless.
    pub async fn migrate(&self) -> Result<(), SinkError> {
        self.client
            .query(&format!(
                "CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} \
                 (version UInt32, name String, applied_at DateTime) \
                 ENGINE = MergeTree ORDER BY version"
            ))
            .execute()
            .await
            .map_err(map_err)?;
        let applied: Vec<u32> = self
            .client
            .query(&format!("SELECT DISTINCT version FROM {MIGRATIONS_TABLE}"))
            .fetch_all::<VersionRow>()
            .await
            .map_err(map_err)?
            .into_iter()
            .map(|r| r.version)
            .collect();
        for (version, name, sql) in MIGRATIONS {
            if applied.contains(version) {
                continue;
            }
            for statement in split_statements(sql) {
                self.client.query(&statement).execute().await.map_err(|e| {
                    SinkError::Permanent(format!("clickhouse migration {name} failed: {e}"))
                })?;
            }
            self.client
                .query(&format!(
                    "INSERT INTO {MIGRATIONS_TABLE} (version, name, applied_at) VALUES (?, ?, now())"
                ))
                .bind(*version)
                .bind(*name)
                .execute()
                .await
                .map_err(map_err)?;
            tracing::info!(migration = name, "applied clickhouse migration");
        }
        Ok(())
    }
}

/// Splits a migration file into statements on `;` at the end of a line; comment
/// lines are dropped (the crate would otherwise see `?` in comments as binds).
fn split_statements(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in sql.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("--") || trimmed.is_empty() {
            continue;
        }
        current.push_str(line);
        current.push('\n');
        if trimmed.ends_with(';') {
            let stmt = current.trim().trim_end_matches(';').trim().to_owned();
            if !stmt.is_empty() {
                out.push(stmt);
            }
            current.clear();
        }
    }
    let stmt = current.trim().trim_end_matches(';').trim().to_owned();
    if !stmt.is_empty() {
        out.push(stmt);
    }
    out
}

/// ClickHouse server error codes that will fail again unchanged.
const PERMANENT_CODES: &[u32] = &[
    6, 16, 26, 27, 36, 43, 44, 46, 47, 48, 53, 60, 62, 69, 70, 72, 73, 81, 117, 164, 192, 193, 194,
    497, 516,
];

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

/// Version for rows of a write: decreasing with time and with the row's position,
/// so that the first stored row of a key has the highest version and survives
/// `FINAL` and merges.
fn first_wins_version(now_ms: u64, index: usize) -> u64 {
    // 2^20 rows per write is far above the writer's cap; clamp defensively.
    let idx = (index as u64).min((1 << 20) - 1);
    u64::MAX - ((now_ms << 20) | idx)
}

#[async_trait]
impl EventSink for ClickHouseSink {
    async fn write(&self, rows: Vec<EventRow>) -> Result<(), SinkError> {
        if rows.is_empty() {
            return Ok(());
        }
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let mut insert = self
            .client
            .insert::<InsertRow<'_>>(EVENTS_TABLE)
            .await
            .map_err(map_err)?
            .with_timeouts(Some(INSERT_TIMEOUT), Some(INSERT_TIMEOUT));
        // Rows go out in key order, so the server need not sort the block (about
        // 40% of its insert CPU on 18.16, docs/benchmarks.md); `ver` still follows
        // the submission order `i`, so the first submitted row of a key wins.
        for i in super::key_order(&rows) {
            let r = &rows[i];
            let row = InsertRow {
                owner: &r.owner,
                session_id: &r.session_id,
                ts: r.ts_ms,
                event_type: r.event_type.as_str(),
                payload: &r.payload,
                content_id: &r.content_id,
                ver: first_wins_version(now_ms, i),
            };
            insert.write(&row).await.map_err(map_err)?;
        }
        // `end` returns once the server answered 200 for the whole INSERT.
        insert.end().await.map_err(map_err)
    }

    async fn sessions(&self, owner: &str, limit: u32) -> Result<Vec<SessionSummary>, SinkError> {
        let mut counts = String::new();
        for t in EventType::ALL {
            counts.push_str(&format!("countIf(type = '{0}') AS c_{0}, ", t.as_str()));
        }
        let sql = format!(
            "SELECT session_id, min(ts) AS first_ts, max(ts) AS last_ts, count() AS event_count, \
             {counts}argMinIf(content_id, ts, type = 'playback_start') AS content_id \
             FROM {EVENTS_TABLE} FINAL WHERE owner = ? \
             GROUP BY session_id ORDER BY last_ts DESC, session_id ASC LIMIT ?"
        );
        let rows = self
            .client
            .query(&sql)
            .bind(owner)
            .bind(limit)
            .fetch_all::<SessionRow>()
            .await
            .map_err(map_err)?;
        Ok(rows
            .into_iter()
            .map(|r| {
                let counts = TypeCounts([
                    r.c_playback_start,
                    r.c_playback_pause,
                    r.c_playback_resume,
                    r.c_rebuffer_start,
                    r.c_rebuffer_end,
                    r.c_quality_change,
                    r.c_error,
                    r.c_session_end,
                ]);
                SessionSummary {
                    session_id: r.session_id,
                    content_id: (r.c_playback_start > 0).then_some(r.content_id),
                    first_event_at: r.first_ts,
                    last_event_at: r.last_ts,
                    event_count: r.event_count,
                    counts,
                }
            })
            .collect())
    }

    async fn session_events(
        &self,
        owner: &str,
        session_id: &str,
    ) -> Result<Vec<StoredEvent>, SinkError> {
        let sql = format!(
            "SELECT ts, type, payload FROM {EVENTS_TABLE} FINAL \
             WHERE owner = ? AND session_id = ? ORDER BY ts ASC, type ASC"
        );
        let rows = self
            .client
            .query(&sql)
            .bind(owner)
            .bind(session_id)
            .fetch_all::<EventReadRow>()
            .await
            .map_err(map_err)?;
        rows.into_iter()
            .map(|r| {
                let event_type = EventType::from_wire(&r.event_type).ok_or_else(|| {
                    SinkError::Permanent(format!("unknown stored event type {:?}", r.event_type))
                })?;
                Ok(StoredEvent {
                    event_type,
                    ts_ms: r.ts,
                    payload: r.payload,
                })
            })
            .collect()
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
    use super::*;

    #[test]
    fn splits_statements_and_drops_comments() {
        let sql = "-- a ? comment\nCREATE TABLE a (x UInt8) ENGINE = Memory;\n\n-- b\nCREATE TABLE b (y UInt8)\nENGINE = Memory\n";
        assert_eq!(
            split_statements(sql),
            vec![
                "CREATE TABLE a (x UInt8) ENGINE = Memory".to_owned(),
                "CREATE TABLE b (y UInt8)\nENGINE = Memory".to_owned()
            ]
        );
        assert_eq!(split_statements(MIGRATIONS[0].2).len(), 1);
    }

    #[test]
    fn first_row_of_first_write_has_highest_version() {
        assert!(first_wins_version(1000, 0) > first_wins_version(1000, 1));
        assert!(first_wins_version(1000, 99_999) > first_wins_version(1001, 0));
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
