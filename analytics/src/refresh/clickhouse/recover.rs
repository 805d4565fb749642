//! Recovery after a ClickHouse restart: the batch records the Buffer in front of
//! `view_batches` held may be lost while their events are stored, so the sessions whose
//! events were written in the step's window get a bare record and are derived again.

use clickhouse::Row;
use ingest::sink::clickhouse::RecordRow;
use serde::Deserialize;

use super::ChRefresh;
use crate::store::clickhouse::map_err;
use crate::store::AnalyticsError;

/// How far the clocks of the instances that wrote events may be from the server's, for
/// [`ChRefresh::recover_records`]' window (one step's margin is added on the early side).
pub(super) const RECOVERY_SKEW_S: i64 = 60;

#[derive(Row, Deserialize)]
struct RecoveredRecord {
    owner: String,
    session_id: String,
    first_ts: i64,
}

impl ChRefresh {
    /// After a ClickHouse restart: batch records the Buffer in front of `view_batches` held
    /// are lost if the server did not stop cleanly, while their events are stored (the
    /// sink writes them first). Every session with events written from `since` (the step
    /// window's start; the step before flushed the Buffer) to `until` gets a record with
    /// bare `dims` written straight to `view_batches`, so this step derives it again from
    /// its events. Each event's write time is in its `ver` (the ClickHouse sink's
    /// `first_wins_version`: `u64::MAX` minus write ms · 2^20 plus a counter); the window
    /// is widened by [`RECOVERY_SKEW_S`] against the writers' clock skew. One scan of the
    /// `ver` column per restart. Such a record orders after every real record of the same
    /// `first_ts` (`seq` is the largest), so it decides a dimension only where the
    /// session's earlier events lost their own record: their context is unknown then, and
    /// says so. Returns the number of sessions.
    pub(super) async fn recover_records(
        &self,
        since: i64,
        until: i64,
    ) -> Result<usize, AnalyticsError> {
        let ms = |s: i64| (s.max(0) as u64) * 1000;
        let (ver_min, ver_max) = ingest::sink::clickhouse::versions_written_between(
            ms(since - RECOVERY_SKEW_S),
            ms(until + 1 + RECOVERY_SKEW_S),
        );
        let sessions = self
            .client
            .query(
                "SELECT owner, session_id, toInt64(min(ts)) AS first_ts FROM telemetry_events \
                 WHERE ver >= ? AND ver <= ? GROUP BY owner, session_id",
            )
            .bind(ver_min)
            .bind(ver_max)
            .fetch_all::<RecoveredRecord>()
            .await
            .map_err(map_err)?;
        if sessions.is_empty() {
            return Ok(0);
        }
        // No context and an unknown user agent: a bare record's `dims`, which depend on
        // nothing else of the record.
        let bare_dims = ingest::BatchRecord::bare("".into(), "".into(), 0).dims_json();
        let mut insert = self
            .client
            .insert::<RecordRow<'_>>("view_batches")
            .await
            .map_err(map_err)?;
        for r in &sessions {
            insert
                .write(&RecordRow {
                    owner: &r.owner,
                    session_id: &r.session_id,
                    first_ts: r.first_ts,
                    seq: u64::MAX,
                    dims: &bare_dims,
                    // No writer's: a live view seeing it is read back.
                    writer: 0,
                })
                .await
                .map_err(map_err)?;
        }
        insert.end().await.map_err(map_err)?;
        Ok(sessions.len())
    }
}
