//! The embedded SQLite engine: aggregations over `qoe_views` (exact percentiles by row
//! number), the views list and the session read-back over `telemetry_events`, on the
//! sink's read pool. The refresher's upserts are [`crate::refresh`]'s.

use std::collections::{BTreeMap, HashMap};

use ingest::{EventType, SqliteSink};
use sqlx::sqlite::SqliteRow;
use sqlx::Row;

use super::sql::{bucket_expr, push_selection, Arg, Dialect, Sql};
use super::{AnalyticsError, Group, GroupKey, Needs, Selection};
use crate::dims::{Dims, UserAgent};
use crate::metrics::Aggregate;
use crate::query::{Cursor, Dimension};
use crate::session::{SessionSummary, StoredEvent, TypeCounts};
use crate::view::View;

const D: Dialect = Dialect::Sqlite;

/// The embedded engine.
#[derive(Clone)]
pub(crate) struct SqliteStore {
    pub(crate) sink: SqliteSink,
}

pub(crate) fn map_err(e: sqlx::Error) -> AnalyticsError {
    ingest::sink::sqlite::classify_error(e).into()
}

/// Columns of a view as read back, in [`view_from_row`] order.
const VIEW_COLUMNS: &str = "v.session_id, v.started_at, v.ended_at, v.started, v.first_frame_at, \
    v.startup_ms, v.failed, v.failed_at, v.startup_failure, v.exit_before_start, \
    v.rebuffer_count, v.rebuffer_ms, v.paused_ms, v.watch_time_ms, v.bitrate_weighted_sum, \
    v.bitrate_covered_ms, v.rendition_switches, v.upshifts, v.downshifts, v.error_count, \
    v.fatal_error_code, v.content_id, v.src, v.sdk, v.player, v.browser, v.os, v.device_type";

fn view_from_row(r: &SqliteRow) -> Result<View, sqlx::Error> {
    let b = |i: usize| -> Result<bool, sqlx::Error> { Ok(r.try_get::<i64, _>(i)? != 0) };
    Ok(View {
        session_id: r.try_get(0)?,
        started_at: r.try_get(1)?,
        ended_at: r.try_get(2)?,
        started: b(3)?,
        first_frame_at: r.try_get(4)?,
        startup_ms: r.try_get(5)?,
        failed: b(6)?,
        failed_at: r.try_get(7)?,
        startup_failure: b(8)?,
        exit_before_start: b(9)?,
        rebuffer_count: r.try_get(10)?,
        rebuffer_ms: r.try_get(11)?,
        paused_ms: r.try_get(12)?,
        watch_time_ms: r.try_get(13)?,
        bitrate_weighted_sum: r.try_get(14)?,
        bitrate_covered_ms: r.try_get(15)?,
        rendition_switches: r.try_get(16)?,
        upshifts: r.try_get(17)?,
        downshifts: r.try_get(18)?,
        error_count: r.try_get(19)?,
        fatal_error_code: r.try_get(20)?,
        dims: Dims {
            content_id: r.try_get(21)?,
            src: r.try_get(22)?,
            sdk: r.try_get(23)?,
            player: r.try_get(24)?,
            tags: BTreeMap::new(),
            user_agent: UserAgent {
                browser: r.try_get(25)?,
                os: r.try_get(26)?,
                device_type: r.try_get(27)?,
            },
        },
    })
}

/// The aggregate columns a route needs, in [`aggregate_from_row`] order after the key;
/// an input not needed is the constant 0, so its column is not read.
fn aggregates(needs: Needs) -> String {
    let pick = |n: Needs, expr: &'static str| if needs.has(n) { expr } else { "0" };
    let pick_f = |n: Needs, expr: &'static str| if needs.has(n) { expr } else { "0.0" };
    [
        "COUNT(*)",
        pick(Needs::FAILED, "COALESCE(SUM(v.failed), 0)"),
        pick(
            Needs::STARTUP_FAILURES,
            "COALESCE(SUM(v.startup_failure), 0)",
        ),
        pick(Needs::EXITS, "COALESCE(SUM(v.exit_before_start), 0)"),
        pick(Needs::REBUFFER_MS, "COALESCE(SUM(v.rebuffer_ms), 0)"),
        pick(Needs::REBUFFER_COUNT, "COALESCE(SUM(v.rebuffer_count), 0)"),
        pick(Needs::WATCH_TIME, "COALESCE(SUM(v.watch_time_ms), 0)"),
        pick_f(Needs::BITRATE, "TOTAL(v.bitrate_weighted_sum)"),
        pick(Needs::BITRATE, "COALESCE(SUM(v.bitrate_covered_ms), 0)"),
        pick(Needs::STARTUP, "COUNT(v.startup_ms)"),
        pick_f(Needs::STARTUP, "TOTAL(v.startup_ms)"),
    ]
    .join(", ")
}

fn aggregate_from_row(r: &SqliteRow) -> Result<Aggregate, sqlx::Error> {
    Ok(Aggregate {
        views: r.try_get(1)?,
        failed: r.try_get(2)?,
        startup_failures: r.try_get(3)?,
        exits_before_start: r.try_get(4)?,
        rebuffer_ms: r.try_get(5)?,
        rebuffer_count: r.try_get(6)?,
        watch_time_ms: r.try_get(7)?,
        bitrate_weighted_sum: r.try_get(8)?,
        bitrate_covered_ms: r.try_get(9)?,
        startup_count: r.try_get(10)?,
        startup_sum_ms: r.try_get(11)?,
        startup_p50_ms: None,
        startup_p75_ms: None,
        startup_p95_ms: None,
        startup_p99_ms: None,
    })
}

/// The percentiles analytics.md §3 reports, in whole percent.
const PERCENTILES: [i64; 4] = [50, 75, 95, 99];

pub(crate) fn bind_all<'q>(
    q: sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>>,
    args: &'q [Arg],
) -> sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>> {
    // Not kept in the connection's statement cache: these texts are built per call (a
    // list of one `?` per session, filters), so nearly every one is new, and each cached
    // statement holds its program and bound values (up to 100 per reader connection).
    let mut q = q.persistent(false);
    for a in args {
        q = match a {
            Arg::Str(s) => q.bind(s.as_str()),
            Arg::Int(i) => q.bind(*i),
        };
    }
    q
}

impl SqliteStore {
    pub fn new(sink: SqliteSink) -> Self {
        SqliteStore { sink }
    }

    pub(crate) async fn fetch(&self, sql: &Sql) -> Result<Vec<SqliteRow>, AnalyticsError> {
        bind_all(sqlx::query(&sql.text), &sql.args)
            .fetch_all(self.sink.pool())
            .await
            .map_err(map_err)
    }

    /// The `FROM … WHERE …` of an aggregation with its group key `k` (in `head`, after
    /// `SELECT `): the `streams` table for a `streamId` breakdown, the selection.
    fn grouped(
        &self,
        sel: &Selection<'_>,
        group: &Group,
        columns: &str,
        extra_where: &str,
    ) -> Result<Sql, AnalyticsError> {
        let by_stream = *group == Group::Dim(Dimension::StreamId);
        let mut sql = Sql::default();
        if by_stream {
            let pairs: Vec<(&String, &String)> = sel.streams.iter().collect();
            let json = serde_json::to_string(&pairs)
                .map_err(|e| AnalyticsError::Permanent(format!("stream map: {e}")))?;
            sql.push(
                "WITH streams(src, stream_id) AS (SELECT json_extract(value, '$[0]'), \
                 json_extract(value, '$[1]') FROM json_each(",
            )
            .str(&json)
            .push(")) ");
        }
        sql.push("SELECT ");
        match group {
            Group::All => {
                sql.push("0");
            }
            Group::Bucket(w) => {
                sql.push(&bucket_expr(D, *w));
            }
            Group::Dim(Dimension::StreamId) => {
                sql.push("st.stream_id");
            }
            Group::Dim(dim) => D.push_value(&mut sql, dim),
        }
        sql.push(" AS k, ").push(columns).push(" FROM qoe_views v ");
        if by_stream {
            sql.push("LEFT JOIN streams st ON st.src = v.src ");
        }
        sql.push("WHERE ");
        push_selection(&mut sql, D, sel);
        sql.push(extra_where);
        Ok(sql)
    }

    fn key(r: &SqliteRow, group: &Group) -> Result<GroupKey, sqlx::Error> {
        Ok(match group {
            Group::All => GroupKey::All,
            Group::Bucket(_) => GroupKey::Bucket(r.try_get(0)?),
            Group::Dim(_) => GroupKey::Value(r.try_get(0)?),
        })
    }

    /// One scan for the counts and sums (only the columns `needs` reads, no sort but
    /// the grouping's); when a percentile is needed, a second, narrower query over the
    /// non-null `startup_ms` only numbers them per group and returns just the rows at
    /// the percentile offsets `min(n − 1, floor(n·p/100))`.
    pub async fn aggregate(
        &self,
        sel: Selection<'_>,
        group: &Group,
        needs: Needs,
    ) -> Result<Vec<(GroupKey, Aggregate)>, AnalyticsError> {
        let mut sql = self.grouped(&sel, group, &aggregates(needs), "")?;
        sql.push(" GROUP BY k");
        let percentiles = if needs.has(Needs::PERCENTILES) {
            let inner = self.grouped(
                &sel,
                group,
                "v.startup_ms AS x",
                " AND v.startup_ms IS NOT NULL",
            )?;
            let mut sql = Sql::new(
                "SELECT k, rn, sn, x FROM (SELECT k, x, ROW_NUMBER() OVER (PARTITION BY k \
                 ORDER BY x) - 1 AS rn, COUNT(*) OVER (PARTITION BY k) AS sn FROM (",
            );
            sql.text.push_str(&inner.text);
            sql.args.extend(inner.args);
            sql.push(")) WHERE ");
            for (i, p) in PERCENTILES.iter().enumerate() {
                if i > 0 {
                    sql.push(" OR ");
                }
                sql.push(&format!("rn = MIN(sn - 1, sn * {p} / 100)"));
            }
            Some(sql)
        } else {
            None
        };
        let (rows, prows) = match &percentiles {
            Some(p) => {
                let (rows, prows) = tokio::try_join!(self.fetch(&sql), self.fetch(p))?;
                (rows, prows)
            }
            None => (self.fetch(&sql).await?, Vec::new()),
        };
        let mut out = rows
            .iter()
            .map(|r| Ok((Self::key(r, group)?, aggregate_from_row(r)?)))
            .collect::<Result<Vec<_>, sqlx::Error>>()
            .map_err(map_err)?;
        if prows.is_empty() {
            return Ok(out);
        }
        // (key, offset) → value; n is the group's count of startup values.
        let mut at: Vec<(GroupKey, i64, i64, f64)> = Vec::with_capacity(prows.len());
        for r in &prows {
            at.push((
                Self::key(r, group).map_err(map_err)?,
                r.try_get(1).map_err(map_err)?,
                r.try_get(2).map_err(map_err)?,
                r.try_get(3).map_err(map_err)?,
            ));
        }
        let mut by_key: HashMap<String, Vec<(i64, i64, f64)>> = HashMap::new();
        for (k, rn, sn, x) in at {
            by_key.entry(key_id(&k)).or_default().push((rn, sn, x));
        }
        for (k, a) in &mut out {
            let Some(found) = by_key.get(&key_id(k)) else {
                continue;
            };
            let pick = |p: i64| {
                found
                    .iter()
                    .find(|(rn, sn, _)| *rn == (sn * p / 100).min(sn - 1))
                    .map(|(_, _, x)| *x)
            };
            a.startup_p50_ms = pick(PERCENTILES[0]);
            a.startup_p75_ms = pick(PERCENTILES[1]);
            a.startup_p95_ms = pick(PERCENTILES[2]);
            a.startup_p99_ms = pick(PERCENTILES[3]);
        }
        Ok(out)
    }

    pub async fn views_page(
        &self,
        sel: Selection<'_>,
        cursor: Option<&Cursor>,
        limit: usize,
    ) -> Result<Vec<View>, AnalyticsError> {
        let mut sql = Sql::new(&format!("SELECT {VIEW_COLUMNS} FROM qoe_views v WHERE "));
        push_selection(&mut sql, D, &sel);
        if let Some(c) = cursor {
            sql.push(" AND (v.started_at < ")
                .int(c.started_at)
                .push(" OR (v.started_at = ")
                .int(c.started_at)
                .push(" AND v.session_id > ")
                .str(&c.session_id)
                .push("))");
        }
        sql.push(" ORDER BY v.started_at DESC, v.session_id ASC LIMIT ")
            .int(limit as i64 + 1);
        let rows = self.fetch(&sql).await?;
        let mut views: Vec<View> = rows
            .iter()
            .map(view_from_row)
            .collect::<Result<_, _>>()
            .map_err(map_err)?;
        if views.is_empty() {
            return Ok(views);
        }
        let mut sql = Sql::new("SELECT session_id, name, value FROM qoe_view_tags WHERE owner = ");
        sql.str(sel.owner)
            .push(" AND session_id IN ")
            .list(views.iter().map(|v| v.session_id.as_str()));
        let mut tags: HashMap<String, BTreeMap<String, String>> = HashMap::new();
        for r in self.fetch(&sql).await? {
            let (s, k, v): (String, String, String) = (
                r.try_get(0).map_err(map_err)?,
                r.try_get(1).map_err(map_err)?,
                r.try_get(2).map_err(map_err)?,
            );
            tags.entry(s).or_default().insert(k, v);
        }
        for v in &mut views {
            if let Some(t) = tags.remove(&v.session_id) {
                v.dims.tags = t;
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
            counts.push_str(&format!("SUM(type = '{}'), ", t.as_str()));
        }
        let sql = format!(
            "SELECT session_id, MIN(ts), MAX(ts), COUNT(*), {counts}\
             (SELECT s.content_id FROM telemetry_events s \
               WHERE s.owner = e.owner AND s.session_id = e.session_id \
                 AND s.type = 'playback_start' ORDER BY s.ts ASC LIMIT 1) \
             FROM telemetry_events e WHERE owner = ? \
             GROUP BY session_id ORDER BY MAX(ts) DESC, session_id ASC LIMIT ?"
        );
        let rows = sqlx::query(&sql)
            .bind(owner)
            .bind(i64::from(limit))
            .fetch_all(self.sink.pool())
            .await
            .map_err(map_err)?;
        rows.iter()
            .map(|r| {
                let mut counts = [0u64; 8];
                for (i, c) in counts.iter_mut().enumerate() {
                    *c = r.try_get::<i64, _>(4 + i)? as u64;
                }
                Ok(SessionSummary {
                    session_id: r.try_get(0)?,
                    first_event_at: r.try_get(1)?,
                    last_event_at: r.try_get(2)?,
                    event_count: r.try_get::<i64, _>(3)? as u64,
                    counts: TypeCounts(counts),
                    content_id: r.try_get(12)?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(map_err)
    }

    pub async fn session_events(
        &self,
        owner: &str,
        session_id: &str,
    ) -> Result<Vec<StoredEvent>, AnalyticsError> {
        let rows = sqlx::query(
            "SELECT ts, type, payload FROM telemetry_events \
             WHERE owner = ? AND session_id = ? ORDER BY ts ASC, type ASC",
        )
        .bind(owner)
        .bind(session_id)
        .fetch_all(self.sink.pool())
        .await
        .map_err(map_err)?;
        rows.iter()
            .map(|r| {
                let t: String = r.try_get(1).map_err(map_err)?;
                let event_type = EventType::from_wire(&t).ok_or_else(|| {
                    AnalyticsError::Permanent(format!("unknown stored event type {t:?}"))
                })?;
                Ok(StoredEvent {
                    event_type,
                    ts_ms: r.try_get(0).map_err(map_err)?,
                    payload: r.try_get(2).map_err(map_err)?,
                })
            })
            .collect()
    }
}

/// A map key for a group key (`None` and `Some("")` differ).
fn key_id(k: &GroupKey) -> String {
    match k {
        GroupKey::All => String::new(),
        GroupKey::Bucket(t) => t.to_string(),
        GroupKey::Value(None) => "n".to_owned(),
        GroupKey::Value(Some(v)) => format!("v{v}"),
    }
}
