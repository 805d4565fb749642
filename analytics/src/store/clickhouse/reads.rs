//! The reads of the ClickHouse engine: one aggregation per route question over
//! `qoe_views FINAL` (only the columns the metric needs), the views list in two reads,
//! and the session read-back over `telemetry_events FINAL`.

use std::collections::HashMap;

use ingest::EventType;

use super::rows::{
    AggAll, AggBucket, AggValue, EventReadRow, PageKey, SessionRow, ViewRow, VIEW_COLUMNS,
};
use super::{map_err, ChStore, SessionSet, D};
use crate::metrics::Aggregate;
use crate::query::{Cursor, Dimension};
use crate::session::{SessionSummary, StoredEvent, TypeCounts};
use crate::store::sql::{bucket_expr, day_of, push_selection, Sql};
use crate::store::{AnalyticsError, Group, GroupKey, Needs, Selection};
use crate::view::View;

/// The temporary table of a breakdown by `streamId`: every registered stream's source.
const STREAM_SOURCES: &str = "stream_sources";

/// The aggregate columns a route needs, in the order of the `Agg*` rows' fields after the
/// key; an input not needed is a constant (0, no quantiles), so its column is not read and
/// no exact quantile state is built when no percentile is reported.
fn aggregates(needs: Needs) -> String {
    let pick = |n: Needs, expr: &'static str, zero: &'static str| {
        if needs.has(n) {
            expr
        } else {
            zero
        }
    };
    [
        "toInt64(count())",
        pick(Needs::FAILED, "toInt64(sum(failed))", "toInt64(0)"),
        pick(
            Needs::STARTUP_FAILURES,
            "toInt64(sum(startup_failure))",
            "toInt64(0)",
        ),
        pick(
            Needs::EXITS,
            "toInt64(sum(exit_before_start))",
            "toInt64(0)",
        ),
        pick(
            Needs::REBUFFER_MS,
            "toInt64(sum(rebuffer_ms))",
            "toInt64(0)",
        ),
        pick(
            Needs::REBUFFER_COUNT,
            "toInt64(sum(rebuffer_count))",
            "toInt64(0)",
        ),
        pick(
            Needs::WATCH_TIME,
            "toInt64(sum(watch_time_ms))",
            "toInt64(0)",
        ),
        pick(
            Needs::BITRATE,
            "toFloat64(sum(bitrate_weighted_sum))",
            "toFloat64(0)",
        ),
        pick(
            Needs::BITRATE,
            "toInt64(sum(bitrate_covered_ms))",
            "toInt64(0)",
        ),
        pick(Needs::STARTUP, "toInt64(count(startup_ms))", "toInt64(0)"),
        pick(
            Needs::STARTUP,
            "toFloat64(sum(ifNull(startup_ms, 0)))",
            "toFloat64(0)",
        ),
        pick(
            Needs::PERCENTILES,
            "quantilesExact(0.5, 0.75, 0.95, 0.99)(startup_ms)",
            "emptyArrayFloat64()",
        ),
    ]
    .join(", ")
}

impl ChStore {
    pub async fn aggregate(
        &self,
        sel: Selection<'_>,
        group: &Group,
        needs: Needs,
    ) -> Result<Vec<(GroupKey, Aggregate)>, AnalyticsError> {
        let mut sql = Sql::new("SELECT ");
        match group {
            Group::All => {}
            Group::Bucket(w) => {
                sql.push(&bucket_expr(D, *w)).push(" AS k, ");
            }
            Group::Dim(Dimension::StreamId) => return self.by_stream(sel, needs).await,
            Group::Dim(dim) => {
                sql.push("CAST(");
                D.push_value(&mut sql, dim);
                sql.push(" AS Nullable(String)) AS k, ");
            }
        }
        sql.push(&aggregates(needs))
            .push(" FROM qoe_views FINAL WHERE ");
        push_selection(&mut sql, D, &sel);
        if *group != Group::All {
            sql.push(" GROUP BY k");
        }
        let q = self.query(&sql);
        Ok(match group {
            Group::All => q
                .fetch_all::<AggAll>()
                .await
                .map_err(map_err)?
                .iter()
                .map(|r| (GroupKey::All, r.aggregate()))
                .collect(),
            Group::Bucket(_) => q
                .fetch_all::<AggBucket>()
                .await
                .map_err(map_err)?
                .iter()
                .map(|r| (GroupKey::Bucket(r.k), r.aggregate()))
                .collect(),
            Group::Dim(_) => q
                .fetch_all::<AggValue>()
                .await
                .map_err(map_err)?
                .into_iter()
                .map(|r| {
                    let a = r.aggregate();
                    (GroupKey::Value(r.k), a)
                })
                .collect(),
        })
    }

    /// The groups of a breakdown by `streamId`, the map kept out of the query's text: the
    /// registered sources go into a temporary table of a session of its own
    /// ([`SessionSet`]). The views of each registered source are one group (a source names
    /// one stream); every other view (no `src`, or one no stream registers) is the `None`
    /// group, aggregated by a second query of the same session.
    async fn by_stream(
        &self,
        sel: Selection<'_>,
        needs: Needs,
    ) -> Result<Vec<(GroupKey, Aggregate)>, AnalyticsError> {
        let select = |head: &str, tail: &str| {
            let mut sql = Sql::new(head);
            sql.push(&aggregates(needs))
                .push(" FROM qoe_views FINAL WHERE ");
            push_selection(&mut sql, D, &sel);
            sql.push(tail);
            sql
        };
        let none = |rows: Vec<AggAll>| {
            rows.iter()
                .map(AggAll::aggregate)
                .filter(|a| a.views > 0)
                .map(|a| (GroupKey::Value(None), a))
                .collect::<Vec<_>>()
        };
        if sel.streams.is_empty() {
            // Nothing registered: every view is in the `None` group.
            let rows = self
                .query(&select("SELECT ", ""))
                .fetch_all::<AggAll>()
                .await
                .map_err(map_err)?;
            return Ok(none(rows));
        }
        let pinned = self.client.pinned();
        let set = SessionSet::open(&pinned.client, STREAM_SOURCES).await?;
        let read = async {
            let sources: Vec<&str> = sel.streams.keys().map(String::as_str).collect();
            set.load(&sources).await?;
            let registered = set
                .query_sql(&select(
                    "SELECT src AS k, ",
                    &format!(" AND src GLOBAL IN {STREAM_SOURCES} GROUP BY k"),
                ))
                .fetch_all::<AggValue>()
                .await
                .map_err(map_err)?;
            let others = set
                .query_sql(&select(
                    "SELECT ",
                    &format!(" AND (src IS NULL OR src GLOBAL NOT IN {STREAM_SOURCES})"),
                ))
                .fetch_all::<AggAll>()
                .await
                .map_err(map_err)?;
            let mut groups: Vec<(GroupKey, Aggregate)> = registered
                .into_iter()
                .map(|r| {
                    let id = r.k.as_ref().and_then(|src| sel.streams.get(src)).cloned();
                    (GroupKey::Value(id), r.aggregate())
                })
                .collect();
            groups.extend(none(others));
            Ok::<_, AnalyticsError>(groups)
        }
        .await;
        set.close().await;
        match &read {
            Ok(_) => self.client.served(&pinned),
            Err(e) if e.is_retryable() => self.client.failed(&pinned, e),
            Err(_) => {}
        }
        read
    }

    /// The page in two reads: the page's keys first (three narrow columns sorted, not
    /// every column of the range), then those rows in full by key. If a row moved
    /// between the two reads, the page is read again in one query.
    pub async fn views_page(
        &self,
        sel: Selection<'_>,
        cursor: Option<&Cursor>,
        limit: usize,
    ) -> Result<Vec<View>, AnalyticsError> {
        let page = |columns: &str| {
            let mut sql = Sql::new(&format!("SELECT {columns} FROM qoe_views FINAL WHERE "));
            push_selection(&mut sql, D, &sel);
            if let Some(c) = cursor {
                sql.push(" AND (started_at < ")
                    .int(c.started_at)
                    .push(" OR (started_at = ")
                    .int(c.started_at)
                    .push(" AND session_id > ")
                    .str(&c.session_id)
                    .push("))");
            }
            sql.push(" ORDER BY started_at DESC, session_id ASC LIMIT ")
                .int(limit as i64 + 1);
            sql
        };
        let keys = self
            .query(&page("session_id, started_at"))
            .fetch_all::<PageKey>()
            .await
            .map_err(map_err)?;
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut days: Vec<i64> = keys.iter().map(|k| day_of(k.started_at)).collect();
        days.sort_unstable();
        days.dedup();
        let mut sql = Sql::new(&format!(
            "SELECT {VIEW_COLUMNS} FROM qoe_views FINAL WHERE owner = "
        ));
        sql.str(sel.owner).push(" AND started_day IN (");
        for (i, d) in days.iter().enumerate() {
            if i > 0 {
                sql.push(", ");
            }
            sql.int(*d);
        }
        sql.push(") AND session_id IN ")
            .list(keys.iter().map(|k| k.session_id.as_str()))
            .push(" AND deleted = 0");
        let rows = self
            .query(&sql)
            .fetch_all::<ViewRow>()
            .await
            .map_err(map_err)?;
        let mut by_key: HashMap<(String, i64), ViewRow> = rows
            .into_iter()
            .map(|r| ((r.session_id.clone(), r.started_at), r))
            .collect();
        let mut views = Vec::with_capacity(keys.len());
        for k in keys {
            match by_key.remove(&(k.session_id, k.started_at)) {
                Some(r) => views.push(r.into_view()),
                None => {
                    let rows = self
                        .query(&page(VIEW_COLUMNS))
                        .fetch_all::<ViewRow>()
                        .await
                        .map_err(map_err)?;
                    return Ok(rows.into_iter().map(ViewRow::into_view).collect());
                }
            }
        }
        Ok(views)
    }

    pub async fn sessions(
        &self,
        owner: &str,
        limit: u32,
    ) -> Result<Vec<SessionSummary>, AnalyticsError> {
        let mut counts = String::new();
        for t in EventType::ALL {
            counts.push_str(&format!("countIf(type = '{0}') AS c_{0}, ", t.as_str()));
        }
        let sql = format!(
            "SELECT session_id, min(ts) AS first_ts, max(ts) AS last_ts, count() AS event_count, \
             {counts}argMinIf(content_id, ts, type = 'playback_start') AS content_id \
             FROM telemetry_events FINAL WHERE owner = ? \
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

    pub async fn session_events(
        &self,
        owner: &str,
        session_id: &str,
    ) -> Result<Vec<StoredEvent>, AnalyticsError> {
        let rows = self
            .client
            .query(
                "SELECT ts, type, payload FROM telemetry_events FINAL \
                 WHERE owner = ? AND session_id = ? ORDER BY ts ASC, type ASC",
            )
            .bind(owner)
            .bind(session_id)
            .fetch_all::<EventReadRow>()
            .await
            .map_err(map_err)?;
        rows.into_iter()
            .map(|r| {
                let event_type = EventType::from_wire(&r.event_type).ok_or_else(|| {
                    AnalyticsError::Permanent(format!(
                        "unknown stored event type {:?}",
                        r.event_type
                    ))
                })?;
                Ok(StoredEvent {
                    event_type,
                    ts_ms: r.ts,
                    payload: r.payload,
                })
            })
            .collect()
    }
}
