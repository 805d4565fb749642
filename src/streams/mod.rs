//! Streams: registration (upsert by `sourceUrl`, behind the SSRF guard), listing, reading and
//! renaming, and the snapshot fields the prober keeps up to date (decisions.md §5).

pub mod uptime;

use serde_json::{Map, Value};
use sqlx::any::AnyRow;
use sqlx::Row;

use crate::db::{Db, DbError};
use crate::ssrf::{Guard, GuardError};
use crate::time::{new_id, now_ms};
use crate::validation::{Checker, FieldErrors};

/// Longest `name` (and default name) in characters.
pub const NAME_MAX: usize = 120;
/// Longest `targetRegion` in characters (the contract leaves it open).
pub const REGION_MAX: usize = 64;
/// Longest `sourceUrl` in characters (browsers and CDNs cap URLs near this).
pub const URL_MAX: usize = 2048;
/// `GET /api/v1/streams` returns this many of the newest streams.
pub const LIST_LIMIT: i64 = 50;

/// A stream with its snapshot, as the contract's StreamItem.
#[derive(Clone, Debug, PartialEq)]
pub struct Stream {
    pub id: String,
    pub source_url: String,
    pub name: String,
    pub target_region: String,
    pub created_at: i64,
    pub agent_state: String,
    pub status: String,
    pub last_action: String,
    pub last_checked_at: Option<i64>,
    pub uptime_pct: f64,
}

/// Why a stream request was refused.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error("invalid body")]
    Invalid(FieldErrors),
    #[error("stream not found")]
    NotFound,
    #[error(transparent)]
    Db(#[from] DbError),
}

impl From<sqlx::Error> for StreamError {
    fn from(e: sqlx::Error) -> Self {
        StreamError::Db(DbError(e))
    }
}

fn invalid(field: &str, msg: impl Into<String>) -> StreamError {
    StreamError::Invalid(FieldErrors::from([(field.to_owned(), msg.into())]))
}

const COLUMNS: &str = "id, source_url, name, target_region, created_at, agent_state, status, \
                       last_action, last_checked_at, uptime_pct, uptime_at";

fn from_row(r: &AnyRow) -> Stream {
    Stream {
        id: r.get("id"),
        source_url: r.get("source_url"),
        name: r.get("name"),
        target_region: r.get("target_region"),
        created_at: r.get("created_at"),
        agent_state: r.get("agent_state"),
        status: r.get("status"),
        last_action: r.get("last_action"),
        last_checked_at: r.get("last_checked_at"),
        uptime_pct: r.get::<Option<f64>, _>("uptime_pct").unwrap_or(100.0),
    }
}

/// True when the row's stored uptime may be served as is.
fn uptime_is_fresh(r: &AnyRow, now: i64) -> bool {
    r.get::<Option<i64>, _>("uptime_at")
        .is_some_and(|at| now - at <= uptime::FRESH_MS)
}

/// Stream operations over the relational store.
#[derive(Clone)]
pub struct Streams {
    db: Db,
    guard: Guard,
}

impl Streams {
    pub fn new(db: Db, guard: Guard) -> Self {
        Self { db, guard }
    }

    /// Validates a StreamCreate body, runs the SSRF guard, then creates the stream or returns
    /// the one already registered with that `sourceUrl` (idempotent, no conflict error).
    pub async fn register(&self, body: &Map<String, Value>) -> Result<Stream, StreamError> {
        let mut c = Checker::new(body);
        let source_url = c.required_str("sourceUrl", 0, URL_MAX);
        let name = c.optional_str("name", 0, NAME_MAX);
        let region = c.optional_str("targetRegion", 0, REGION_MAX);
        let parsed = source_url.and_then(|u| url::Url::parse(u).ok());
        if source_url.is_some() && parsed.is_none() {
            c.reject("sourceUrl", "Must be a valid URL");
        }
        c.into_result().map_err(StreamError::Invalid)?;
        let (Some(source_url), Some(parsed)) = (source_url, parsed) else {
            return Err(invalid("sourceUrl", "Required"));
        };
        match self.guard.check_url(source_url).await {
            Ok(_) => {}
            Err(GuardError::InvalidUrl) => return Err(invalid("sourceUrl", "Must be a valid URL")),
            Err(e) => return Err(invalid("sourceUrl", e.to_string())),
        }

        let name = name
            .map(str::to_owned)
            .unwrap_or_else(|| default_name(&parsed));
        let region = region.unwrap_or("auto");
        let now = now_ms();
        // ON CONFLICT keeps the first registration when two requests race for one URL.
        sqlx::query(
            "INSERT INTO streams (id, source_url, name, target_region, created_at, agent_state, \
                                  status, last_action, next_probe_at) \
             VALUES ($1, $2, $3, $4, $5, 'healthy', 'watching', 'registered', $6) \
             ON CONFLICT (source_url) DO NOTHING",
        )
        .bind(new_id())
        .bind(source_url)
        .bind(&name)
        .bind(region)
        .bind(now)
        .bind(now)
        .execute(&self.db.pool)
        .await?;
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM streams WHERE source_url = $1"
        ))
        .bind(source_url)
        .fetch_one(&self.db.pool)
        .await?;
        Ok(self
            .with_uptime(std::slice::from_ref(&row))
            .await?
            .remove(0))
    }

    /// The newest streams, `createdAt` descending.
    pub async fn list(&self) -> Result<Vec<Stream>, StreamError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM streams ORDER BY created_at DESC, seq DESC LIMIT $1"
        ))
        .bind(LIST_LIMIT)
        .fetch_all(&self.db.pool)
        .await?;
        self.with_uptime(&rows).await
    }

    /// One stream by id.
    pub async fn get(&self, id: &str) -> Result<Stream, StreamError> {
        let row = sqlx::query(&format!("SELECT {COLUMNS} FROM streams WHERE id = $1"))
            .bind(id)
            .fetch_optional(&self.db.pool)
            .await?
            .ok_or(StreamError::NotFound)?;
        Ok(self
            .with_uptime(std::slice::from_ref(&row))
            .await?
            .remove(0))
    }

    /// Applies a PATCH body: `name` and `targetRegion` change when present; `sourceUrl` is the
    /// row's identity and is never changed (a value sent with the body is ignored).
    pub async fn update(&self, id: &str, body: &Map<String, Value>) -> Result<Stream, StreamError> {
        let mut c = Checker::new(body);
        let name = c.optional_str("name", 0, NAME_MAX);
        let region = c.optional_str("targetRegion", 0, REGION_MAX);
        c.into_result().map_err(StreamError::Invalid)?;
        let done = sqlx::query(
            "UPDATE streams SET name = COALESCE($1, name), target_region = COALESCE($2, target_region) \
             WHERE id = $3",
        )
        .bind(name)
        .bind(region)
        .bind(id)
        .execute(&self.db.pool)
        .await?;
        if done.rows_affected() == 0 {
            return Err(StreamError::NotFound);
        }
        self.get(id).await
    }

    /// Streams from rows, recomputing the uptime of those whose stored value is stale.
    async fn with_uptime(&self, rows: &[AnyRow]) -> Result<Vec<Stream>, StreamError> {
        let now = now_ms();
        let stale: Vec<&str> = rows
            .iter()
            .filter(|r| !uptime_is_fresh(r, now))
            .map(|r| r.get::<&str, _>("id"))
            .collect();
        let fresh = uptime::compute(&self.db.pool, &stale, now).await?;
        Ok(rows
            .iter()
            .map(|r| {
                let mut s = from_row(r);
                if !uptime_is_fresh(r, now) {
                    s.uptime_pct = fresh.get(&s.id).copied().unwrap_or(100.0);
                }
                s
            })
            .collect())
    }
}

/// `name` when omitted: the URL's host and path, cut to [`NAME_MAX`] characters.
fn default_name(url: &url::Url) -> String {
    let host = url.host_str().unwrap_or_default();
    let path = if url.path() == "/" { "" } else { url.path() };
    format!("{host}{path}").chars().take(NAME_MAX).collect()
}

#[cfg(test)]
mod tests {
    use super::default_name;

    #[test]
    fn default_name_is_host_and_path() {
        let u = |s: &str| url::Url::parse(s).expect("url");
        assert_eq!(
            default_name(&u("https://cdn.example.com/live/master.m3u8?t=1")),
            "cdn.example.com/live/master.m3u8"
        );
        assert_eq!(
            default_name(&u("https://cdn.example.com/")),
            "cdn.example.com"
        );
        let long = format!("https://example.com/{}", "a".repeat(300));
        assert_eq!(default_name(&u(&long)).chars().count(), 120);
    }
}
