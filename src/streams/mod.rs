//! Streams: registration (upsert by `sourceUrl`, behind the SSRF guard), listing, reading and
//! renaming, and the snapshot fields the prober keeps up to date (decisions.md §5).

mod ids;
pub mod summary;
pub mod uptime;

use crate::db::{Db, DbError, Engine};
use crate::ssrf::{Guard, GuardError};
use crate::states::{AgentState, StreamStatus};
use crate::time::{new_id, now_ms};
use crate::validation::FieldErrors;

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
    pub agent_state: AgentState,
    pub status: StreamStatus,
    pub last_action: String,
    pub last_checked_at: Option<i64>,
    pub uptime_pct: f64,
}

/// Message when `sourceUrl` is not an absolute URL.
pub const MSG_INVALID_URL: &str = "Must be a valid URL";

/// A stream to register (StreamCreate, already parsed: lengths and characters checked).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewStream {
    pub source_url: String,
    pub name: Option<String>,
    pub target_region: Option<String>,
}

/// A PATCH of a stream: the fields to change (`sourceUrl` never changes).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamChange {
    pub name: Option<String>,
    pub target_region: Option<String>,
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

/// A `streams` row with the columns of [`COLUMNS`].
#[derive(sqlx::FromRow)]
struct StreamRow {
    id: String,
    source_url: String,
    name: String,
    target_region: String,
    created_at: i64,
    #[sqlx(try_from = "String")]
    agent_state: AgentState,
    #[sqlx(try_from = "String")]
    status: StreamStatus,
    last_action: String,
    last_checked_at: Option<i64>,
    uptime_pct: Option<f64>,
    uptime_at: Option<i64>,
}

impl StreamRow {
    /// True when the row's stored uptime may be served as is.
    fn uptime_is_fresh(&self, now: i64) -> bool {
        self.uptime_at
            .is_some_and(|at| now - at <= uptime::FRESH_MS)
    }

    fn into_stream(self, uptime_pct: f64) -> Stream {
        Stream {
            id: self.id,
            source_url: self.source_url,
            name: self.name,
            target_region: self.target_region,
            created_at: self.created_at,
            agent_state: self.agent_state,
            status: self.status,
            last_action: self.last_action,
            last_checked_at: self.last_checked_at,
            uptime_pct,
        }
    }
}

/// Stream operations over the relational store.
#[derive(Clone)]
pub struct Streams {
    db: Db,
    guard: Guard,
    /// Streams one user may register (`STREAMWATCH_MAX_STREAMS_PER_USER`).
    max_per_user: u32,
    /// The `src` → `streamId` map, validated at each use ([`Streams::ids_by_source`]).
    ids: ids::IdCache,
}

impl Streams {
    pub fn new(db: Db, guard: Guard, max_per_user: u32) -> Self {
        Self {
            db,
            guard,
            max_per_user,
            ids: ids::IdCache::default(),
        }
    }

    /// Runs the SSRF guard, then creates the stream for `user_id` or returns the one already
    /// registered with that `sourceUrl` (idempotent, no conflict error). A user who has
    /// registered `max_per_user` streams gets a `sourceUrl` error for a new URL (an already
    /// registered URL is still returned). `None` registers on behalf of the operator (tools and
    /// tests), outside any user's cap.
    pub async fn register(
        &self,
        user_id: Option<&str>,
        new: &NewStream,
    ) -> Result<Stream, StreamError> {
        let source_url = new.source_url.as_str();
        let parsed =
            url::Url::parse(source_url).map_err(|_| invalid("sourceUrl", MSG_INVALID_URL))?;
        match self.guard.check_url(source_url).await {
            Ok(_) => {}
            Err(GuardError::InvalidUrl) => return Err(invalid("sourceUrl", MSG_INVALID_URL)),
            Err(e) => return Err(invalid("sourceUrl", e.to_string())),
        }

        let name = new.name.clone().unwrap_or_else(|| default_name(&parsed));
        let region = new.target_region.as_deref().unwrap_or("auto");
        let now = now_ms();
        let mut tx = self.db.pool.begin().await?;
        if let (Engine::Postgres, Some(user_id)) = (self.db.engine, user_id) {
            // Serialises one user's registrations, so two racing requests cannot both pass the
            // count below. (SQLite runs the single INSERT … SELECT under its write lock.)
            sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
                .bind(user_id)
                .execute(&mut *tx)
                .await?;
        }
        // Inserted only while the user is under the cap; ON CONFLICT keeps the first
        // registration when two requests race for one URL.
        sqlx::query(
            "INSERT INTO streams (id, source_url, name, target_region, created_at, agent_state, \
                                  status, last_action, next_probe_at, created_by) \
             SELECT $1, $2, $3, $4, $5, 'healthy', 'watching', 'registered', $5, $6 \
             WHERE (SELECT COUNT(*) FROM streams WHERE created_by = $6) < $7 \
             ON CONFLICT (source_url) DO NOTHING",
        )
        .bind(new_id())
        .bind(source_url)
        .bind(&name)
        .bind(region)
        .bind(now)
        .bind(user_id)
        .bind(i64::from(self.max_per_user))
        .execute(&mut *tx)
        .await?;
        let row: Option<StreamRow> = sqlx::query_as(&format!(
            "SELECT {COLUMNS} FROM streams WHERE source_url = $1"
        ))
        .bind(source_url)
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        let Some(row) = row else {
            return Err(invalid(
                "sourceUrl",
                format!("Stream limit reached ({})", self.max_per_user),
            ));
        };
        self.with_uptime_one(row).await
    }

    /// Deletes a stream with its probes and rollups (foreign keys cascade); it is never
    /// probed again (a probe in flight finds it gone and records nothing).
    ///
    /// Its open alert incidents resolve (and are notified) in the same transaction; rules that
    /// watched only this stream go with it.
    pub async fn delete(&self, id: &str) -> Result<(), StreamError> {
        let mut tx = self.db.pool.begin().await?;
        crate::alerts::incidents::on_stream_deleted(&mut tx, self.db.engine, id, now_ms()).await?;
        let done = sqlx::query("DELETE FROM streams WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StreamError::NotFound);
        }
        tx.commit().await?;
        Ok(())
    }

    /// The newest streams, `createdAt` descending.
    pub async fn list(&self) -> Result<Vec<Stream>, StreamError> {
        let rows: Vec<StreamRow> = sqlx::query_as(&format!(
            "SELECT {COLUMNS} FROM streams ORDER BY created_at DESC, seq DESC LIMIT $1"
        ))
        .bind(LIST_LIMIT)
        .fetch_all(&self.db.pool)
        .await?;
        self.with_uptime(rows).await
    }

    /// One stream by id.
    pub async fn get(&self, id: &str) -> Result<Stream, StreamError> {
        let row: StreamRow =
            sqlx::query_as(&format!("SELECT {COLUMNS} FROM streams WHERE id = $1"))
                .bind(id)
                .fetch_optional(&self.db.pool)
                .await?
                .ok_or(StreamError::NotFound)?;
        self.with_uptime_one(row).await
    }

    /// Applies a PATCH body: `name` and `targetRegion` change when present; `sourceUrl` is the
    /// row's identity and is never changed (a value sent with the body is ignored).
    pub async fn update(&self, id: &str, change: &StreamChange) -> Result<Stream, StreamError> {
        let done = sqlx::query(
            "UPDATE streams SET name = COALESCE($1, name), target_region = COALESCE($2, target_region) \
             WHERE id = $3",
        )
        .bind(change.name.as_deref())
        .bind(change.target_region.as_deref())
        .bind(id)
        .execute(&self.db.pool)
        .await?;
        if done.rows_affected() == 0 {
            return Err(StreamError::NotFound);
        }
        self.get(id).await
    }

    /// Streams from rows, recomputing the uptime of those whose stored value is stale.
    async fn with_uptime(&self, rows: Vec<StreamRow>) -> Result<Vec<Stream>, StreamError> {
        let now = now_ms();
        let stale: Vec<&str> = rows
            .iter()
            .filter(|r| !r.uptime_is_fresh(now))
            .map(|r| r.id.as_str())
            .collect();
        let recomputed = uptime::compute(&self.db.pool, &stale, now).await?;
        Ok(rows
            .into_iter()
            .map(|r| {
                let pct = if r.uptime_is_fresh(now) {
                    r.uptime_pct.unwrap_or(100.0)
                } else {
                    recomputed.get(&r.id).copied().unwrap_or(100.0)
                };
                r.into_stream(pct)
            })
            .collect())
    }

    async fn with_uptime_one(&self, row: StreamRow) -> Result<Stream, StreamError> {
        let mut streams = self.with_uptime(vec![row]).await?;
        streams.pop().ok_or(StreamError::NotFound)
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
