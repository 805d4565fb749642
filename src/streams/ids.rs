//! The `src` → `streamId` map the QoE questions resolve `streamId` with (analytics.md §4),
//! cached in the process and validated at each use by a version probe, so several
//! instances sharing one database never serve a stale map.
//!
//! The probe is `(COUNT(*), MAX(seq))` of `streams`: `seq` is never reused (an identity
//! column on PostgreSQL, `AUTOINCREMENT` on SQLite), and `sourceUrl` and `id` never change
//! once registered, so any set of registrations and deletions since the map was read moves
//! the pair (a stream registered since and still there raises `MAX(seq)`; with none, the
//! set can only have shrunk, which lowers the count), and an unchanged pair means the same
//! map. One indexed aggregate instead of every row; and the map is only asked for by a
//! question that names `streamId` ([`analytics::StreamDirectory`]).

use std::sync::{Arc, Mutex, PoisonError};

use analytics::{AnalyticsError, StreamDirectory, StreamIds};
use futures_util::future::BoxFuture;

use super::{StreamError, Streams};

/// What the probe reads: the number of streams and the highest `seq`.
type Version = (i64, i64);

/// A map and the version it was read at.
type Held = Option<(Version, Arc<StreamIds>)>;

/// The last map read and the version it was read at; shared by every clone of [`Streams`].
#[derive(Clone, Default)]
pub(super) struct IdCache(Arc<Mutex<Held>>);

impl IdCache {
    fn get(&self, version: Version) -> Option<Arc<StreamIds>> {
        let held = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        held.as_ref()
            .filter(|(v, _)| *v == version)
            .map(|(_, ids)| ids.clone())
    }

    fn put(&self, version: Version, ids: Arc<StreamIds>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some((version, ids));
    }
}

impl Streams {
    /// Every registered stream's id by its `sourceUrl`: how a view's `src` names its stream
    /// (`streamId` of analytics.md §4). `sourceUrl` is unique, so the map is exact. Served
    /// from the cache while the version probe says nothing changed.
    pub async fn ids_by_source(&self) -> Result<Arc<StreamIds>, StreamError> {
        let version: Version = sqlx::query_as(
            "SELECT CAST(COUNT(*) AS BIGINT), CAST(COALESCE(MAX(seq), 0) AS BIGINT) FROM streams",
        )
        .fetch_one(&self.db.pool)
        .await?;
        if let Some(ids) = self.ids.get(version) {
            return Ok(ids);
        }
        // Read after the probe: a change in between is seen by the next probe, which then
        // reads the map again (never the reverse).
        let rows: Vec<(String, String)> = sqlx::query_as("SELECT source_url, id FROM streams")
            .fetch_all(&self.db.pool)
            .await?;
        let ids: Arc<StreamIds> = Arc::new(rows.into_iter().collect());
        self.ids.put(version, ids.clone());
        Ok(ids)
    }
}

impl StreamDirectory for Streams {
    fn ids_by_source(&self) -> BoxFuture<'_, Result<Arc<StreamIds>, AnalyticsError>> {
        Box::pin(async move {
            Streams::ids_by_source(self)
                .await
                .map_err(|e| AnalyticsError::Retryable(format!("registered streams: {e}")))
        })
    }
}
