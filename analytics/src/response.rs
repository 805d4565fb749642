//! The 200 bodies of the QoE routes (analytics.md §4) as `Serialize` types with the
//! contract's JSON names, the builders that turn per-group [`Aggregate`]s into them (shared
//! by the reference and the engines, so ordering, empty buckets and paging cannot drift),
//! and their CSV form.
//!
//! Numbers are written as JavaScript's `JSON.stringify` would: an integral value has no
//! fraction (`12`, not `12.0`). Timestamps are `YYYY-MM-DDTHH:MM:SS.sssZ`.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use ingest::time::{format_ms, serialize_ms};
use serde::{Serialize, Serializer};

use crate::metrics::{negative_impact, Aggregate};
use crate::query::{
    stream_id, Better, BreakdownQuery, Cursor, Dimension, Granularity, Measurement, Metric,
    OrderBy, TimeRange, TimeseriesQuery,
};
use crate::view::View;

impl Serialize for Metric {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl Serialize for Granularity {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl Serialize for Dimension {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.name())
    }
}

/// Largest integer an f64 holds exactly (2^53).
const MAX_EXACT_INT: f64 = 9_007_199_254_740_992.0;

/// A number as JavaScript prints it (integral values without a fraction).
fn js_number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < MAX_EXACT_INT {
        (v as i64).to_string()
    } else {
        v.to_string()
    }
}

fn ser_num<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.fract() == 0.0 && v.abs() < MAX_EXACT_INT {
        s.serialize_i64(*v as i64)
    } else {
        s.serialize_f64(*v)
    }
}

fn ser_opt_num<S: Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => ser_num(v, s),
        None => s.serialize_none(),
    }
}

fn ser_opt_ms<S: Serializer>(v: &Option<i64>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(ms) => serialize_ms(ms, s),
        None => s.serialize_none(),
    }
}

/// `startupTimeMs` of the overview: `{ p50, p95 }`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StartupPair {
    /// Median startup time (ms), rounded to 2 decimals.
    #[serde(serialize_with = "ser_opt_num")]
    pub p50: Option<f64>,
    /// 95th percentile startup time (ms), rounded to 2 decimals.
    #[serde(serialize_with = "ser_opt_num")]
    pub p95: Option<f64>,
}

/// `metrics` of the overview.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct OverviewMetrics {
    /// `playbackFailurePct`.
    #[serde(serialize_with = "ser_opt_num")]
    pub playback_failure_pct: Option<f64>,
    /// `startupFailurePct`.
    #[serde(serialize_with = "ser_opt_num")]
    pub startup_failure_pct: Option<f64>,
    /// `exitBeforeStartPct`.
    #[serde(serialize_with = "ser_opt_num")]
    pub exit_before_start_pct: Option<f64>,
    /// `startupTimeMs: { p50, p95 }`.
    pub startup_time_ms: StartupPair,
    /// `rebufferPct`.
    #[serde(serialize_with = "ser_opt_num")]
    pub rebuffer_pct: Option<f64>,
    /// `rebufferFrequency` (stalls per minute).
    #[serde(serialize_with = "ser_opt_num")]
    pub rebuffer_frequency: Option<f64>,
    /// `watchTimeMs` (Σ, 0 for no views).
    pub watch_time_ms: i64,
    /// `avgBitrateKbps`.
    #[serde(serialize_with = "ser_opt_num")]
    pub avg_bitrate_kbps: Option<f64>,
}

/// `GET /api/v1/qoe/overview` → `{ from, to, views, metrics }`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OverviewBody {
    /// Range start.
    #[serde(serialize_with = "serialize_ms")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub from: i64,
    /// Range end (exclusive).
    #[serde(serialize_with = "serialize_ms")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub to: i64,
    /// Number of views.
    pub views: i64,
    /// The metrics.
    pub metrics: OverviewMetrics,
}

impl OverviewBody {
    /// The overview of the selected views' aggregate.
    pub fn build(range: TimeRange, a: &Aggregate) -> Self {
        let v = |m| a.value(m, Measurement::P50);
        OverviewBody {
            from: range.from_ms,
            to: range.to_ms,
            views: a.views,
            metrics: OverviewMetrics {
                playback_failure_pct: v(Metric::PlaybackFailurePct),
                startup_failure_pct: v(Metric::StartupFailurePct),
                exit_before_start_pct: v(Metric::ExitBeforeStartPct),
                startup_time_ms: StartupPair {
                    p50: a.value(Metric::StartupTimeMs, Measurement::P50),
                    p95: a.value(Metric::StartupTimeMs, Measurement::P95),
                },
                rebuffer_pct: v(Metric::RebufferPct),
                rebuffer_frequency: v(Metric::RebufferFrequency),
                watch_time_ms: a.watch_time_ms,
                avg_bitrate_kbps: v(Metric::AvgBitrateKbps),
            },
        }
    }
}

/// One bucket of a time series.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TimeseriesItem {
    /// Bucket start (UTC-aligned; may precede `from`).
    #[serde(serialize_with = "serialize_ms")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub t: i64,
    /// The metric over the bucket's views; null for an empty bucket (0 for `views`).
    #[serde(serialize_with = "ser_opt_num")]
    pub value: Option<f64>,
    /// Views in the bucket (started inside both the bucket and `[from, to)`).
    pub views: i64,
}

/// `GET /api/v1/qoe/timeseries` → `{ metric, granularity, items }`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TimeseriesBody {
    /// The metric.
    pub metric: Metric,
    /// The bucket width used (explicit or defaulted).
    pub granularity: Granularity,
    /// Every bucket overlapping `[from, to)`, oldest first.
    pub items: Vec<TimeseriesItem>,
}

impl TimeseriesBody {
    /// Builds the series from per-bucket aggregates keyed by bucket start; buckets with
    /// no entry (or no views) are empty: `views: 0, value: null`, except for the `views`
    /// metric, a count, whose empty bucket is `value: 0` (analytics.md v1.2).
    pub fn build(q: &TimeseriesQuery, buckets: &BTreeMap<i64, Aggregate>) -> Self {
        let items = q
            .range
            .buckets(q.granularity)
            .into_iter()
            .map(|t| match buckets.get(&t).filter(|a| a.views > 0) {
                Some(a) => TimeseriesItem {
                    t,
                    value: a.value(q.metric, q.measurement),
                    views: a.views,
                },
                None => TimeseriesItem {
                    t,
                    value: (q.metric == Metric::Views).then_some(0.0),
                    views: 0,
                },
            })
            .collect();
        TimeseriesBody {
            metric: q.metric,
            granularity: q.granularity,
            items,
        }
    }
}

/// One group of a breakdown.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct BreakdownItem {
    /// The dimension's value; null groups the views without one.
    pub key: Option<String>,
    /// The metric over the group.
    #[serde(serialize_with = "ser_opt_num")]
    pub value: Option<f64>,
    /// Views in the group.
    pub views: i64,
    /// See [`negative_impact`].
    #[serde(serialize_with = "ser_num")]
    pub negative_impact: f64,
}

/// `GET /api/v1/qoe/breakdown` → `{ metric, by, items }`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BreakdownBody {
    /// The metric.
    pub metric: Metric,
    /// The dimension.
    #[cfg_attr(feature = "openapi", schema(value_type = String, example = "contentId"))]
    pub by: Dimension,
    /// At most `limit` groups in `orderBy` order.
    pub items: Vec<BreakdownItem>,
}

impl BreakdownBody {
    /// Builds the breakdown from the aggregate of all selected views and one aggregate per
    /// key (`None` = views without a value), in any order.
    ///
    /// Order (analytics.md §5): `negativeImpact` and `views` largest first; `value` worst
    /// first (highest for lower-is-better and direction-less metrics, lowest for
    /// higher-is-better), nulls last. Ties, which the contract leaves open, go by key
    /// ascending with the null key last, so the answer is deterministic.
    pub fn build(
        q: &BreakdownQuery,
        overall: &Aggregate,
        groups: impl IntoIterator<Item = (Option<String>, Aggregate)>,
    ) -> Self {
        let overall_value = overall.value(q.metric, q.measurement);
        let mut items: Vec<BreakdownItem> = groups
            .into_iter()
            .filter(|(_, a)| a.views > 0)
            .map(|(key, a)| {
                let value = a.value(q.metric, q.measurement);
                BreakdownItem {
                    key,
                    value,
                    views: a.views,
                    negative_impact: negative_impact(
                        q.metric,
                        value,
                        overall_value,
                        a.views,
                        overall.views,
                    ),
                }
            })
            .collect();
        let by_key = |a: &BreakdownItem, b: &BreakdownItem| match (&a.key, &b.key) {
            (Some(x), Some(y)) => x.cmp(y),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        };
        let higher_is_better = q.metric.better() == Better::Higher;
        items.sort_by(|a, b| {
            let primary = match q.order_by {
                OrderBy::NegativeImpact => b.negative_impact.total_cmp(&a.negative_impact),
                OrderBy::Views => b.views.cmp(&a.views),
                OrderBy::Value => match (a.value, b.value) {
                    (Some(x), Some(y)) if higher_is_better => x.total_cmp(&y),
                    (Some(x), Some(y)) => y.total_cmp(&x),
                    (Some(_), None) => Ordering::Less,
                    (None, Some(_)) => Ordering::Greater,
                    (None, None) => Ordering::Equal,
                },
            };
            primary.then_with(|| by_key(a, b))
        });
        items.truncate(q.limit);
        BreakdownBody {
            metric: q.metric,
            by: q.by.clone(),
            items,
        }
    }
}

/// One view of the views list: `sessionId`, the fields of analytics.md §2 (not the raw
/// bitrate sums) and the dimensions, `streamId` resolved from `src`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ViewItem {
    /// `sessionId`.
    pub session_id: String,
    /// `startedAt`.
    #[serde(serialize_with = "serialize_ms")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub started_at: i64,
    /// `endedAt`.
    #[serde(serialize_with = "serialize_ms")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub ended_at: i64,
    /// `started`.
    pub started: bool,
    /// `firstFrameAt`.
    #[serde(serialize_with = "ser_opt_ms")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub first_frame_at: Option<i64>,
    /// `startupMs`.
    #[serde(serialize_with = "ser_opt_num")]
    pub startup_ms: Option<f64>,
    /// `failed`.
    pub failed: bool,
    /// `failedAt`.
    #[serde(serialize_with = "ser_opt_ms")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub failed_at: Option<i64>,
    /// `startupFailure`.
    pub startup_failure: bool,
    /// `exitBeforeStart`.
    pub exit_before_start: bool,
    /// `rebufferCount`.
    pub rebuffer_count: i64,
    /// `rebufferMs`.
    pub rebuffer_ms: i64,
    /// `pausedMs`.
    pub paused_ms: i64,
    /// `watchTimeMs`.
    pub watch_time_ms: i64,
    /// `avgBitrateKbps`, rounded to 2 decimals.
    #[serde(serialize_with = "ser_opt_num")]
    pub avg_bitrate_kbps: Option<f64>,
    /// `renditionSwitches`.
    pub rendition_switches: i64,
    /// `upshifts`.
    pub upshifts: i64,
    /// `downshifts`.
    pub downshifts: i64,
    /// `errorCount`.
    pub error_count: i64,
    /// `fatalErrorCode`.
    pub fatal_error_code: Option<String>,
    /// `contentId`.
    pub content_id: Option<String>,
    /// `src`.
    pub src: Option<String>,
    /// `streamId`.
    pub stream_id: Option<String>,
    /// `browser`.
    pub browser: String,
    /// `os`.
    pub os: String,
    /// `deviceType`.
    pub device_type: String,
    /// `sdk`.
    pub sdk: Option<String>,
    /// `player`.
    pub player: Option<String>,
    /// `tags`.
    pub tags: BTreeMap<String, String>,
}

impl ViewItem {
    /// The list item of a view, its `streamId` looked up in `streams`.
    pub fn new(v: &View, streams: &crate::query::StreamIds) -> Self {
        let d = &v.dims;
        ViewItem {
            session_id: v.session_id.clone(),
            started_at: v.started_at,
            ended_at: v.ended_at,
            started: v.started,
            first_frame_at: v.first_frame_at,
            startup_ms: v.startup_ms,
            failed: v.failed,
            failed_at: v.failed_at,
            startup_failure: v.startup_failure,
            exit_before_start: v.exit_before_start,
            rebuffer_count: v.rebuffer_count,
            rebuffer_ms: v.rebuffer_ms,
            paused_ms: v.paused_ms,
            watch_time_ms: v.watch_time_ms,
            avg_bitrate_kbps: v.avg_bitrate_kbps().map(|x| crate::metrics::round_dp(x, 2)),
            rendition_switches: v.rendition_switches,
            upshifts: v.upshifts,
            downshifts: v.downshifts,
            error_count: v.error_count,
            fatal_error_code: v.fatal_error_code.clone(),
            content_id: d.content_id.clone(),
            src: d.src.clone(),
            stream_id: stream_id(v, streams).map(str::to_owned),
            browser: d.user_agent.browser.clone(),
            os: d.user_agent.os.clone(),
            device_type: d.user_agent.device_type.clone(),
            sdk: d.sdk.clone(),
            player: d.player.clone(),
            tags: d.tags.clone(),
        }
    }
}

/// `GET /api/v1/qoe/views` → `{ items, nextCursor }`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ViewsBody {
    /// Newest `startedAt` first (ties by `sessionId` ascending).
    pub items: Vec<ViewItem>,
    /// Present when more views follow; pass it back as `cursor`.
    pub next_cursor: Option<String>,
}

impl ViewsBody {
    /// Builds a page from up to `limit + 1` views already in list order after the
    /// cursor; the extra one only tells that a next page exists.
    pub fn build<'a>(
        rows: impl IntoIterator<Item = &'a View>,
        limit: usize,
        streams: &crate::query::StreamIds,
    ) -> Self {
        let mut rows = rows.into_iter();
        let page: Vec<&View> = rows.by_ref().take(limit).collect();
        let more = rows.next().is_some();
        let next_cursor = page.last().filter(|_| more).map(|v| {
            Cursor {
                started_at: v.started_at,
                session_id: v.session_id.clone(),
            }
            .encode()
        });
        ViewsBody {
            items: page
                .into_iter()
                .map(|v| ViewItem::new(v, streams))
                .collect(),
            next_cursor,
        }
    }
}

/// The viewers of a stream in one timeline bucket.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Viewers {
    /// Views that started in the bucket (and in `[from, to)`).
    pub views: i64,
    /// `playbackFailurePct`.
    #[serde(serialize_with = "ser_opt_num")]
    pub playback_failure_pct: Option<f64>,
    /// `rebufferPct`.
    #[serde(serialize_with = "ser_opt_num")]
    pub rebuffer_pct: Option<f64>,
    /// p50 of `startupMs`, a plain number (analytics.md §5).
    #[serde(serialize_with = "ser_opt_num")]
    pub startup_time_ms: Option<f64>,
}

impl Viewers {
    /// From a bucket's aggregate; an empty bucket has 0 views and null values.
    pub fn of(a: &Aggregate) -> Self {
        if a.views == 0 {
            return Viewers {
                views: 0,
                playback_failure_pct: None,
                rebuffer_pct: None,
                startup_time_ms: None,
            };
        }
        Viewers {
            views: a.views,
            playback_failure_pct: a.value(Metric::PlaybackFailurePct, Measurement::P50),
            rebuffer_pct: a.value(Metric::RebufferPct, Measurement::P50),
            startup_time_ms: a.value(Metric::StartupTimeMs, Measurement::P50),
        }
    }
}

/// The viewers half of one timeline item: `{ t, viewers }` (the probes half is merged in
/// by the stream timeline route).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TimelineViewers {
    /// Bucket start.
    #[serde(serialize_with = "serialize_ms")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub t: i64,
    /// The stream's viewers in the bucket.
    pub viewers: Viewers,
}

/// Every bucket of the range with its viewers, oldest first, from per-bucket aggregates
/// keyed by bucket start (missing = empty).
pub fn timeline_viewers(
    range: TimeRange,
    granularity: Granularity,
    buckets: &BTreeMap<i64, Aggregate>,
) -> Vec<TimelineViewers> {
    range
        .buckets(granularity)
        .into_iter()
        .map(|t| TimelineViewers {
            t,
            viewers: Viewers::of(&buckets.get(&t).copied().unwrap_or_default()),
        })
        .collect()
}

/// CSV cell of an optional number: empty for null.
fn num_cell(v: Option<f64>) -> String {
    v.map(js_number).unwrap_or_default()
}

fn text_cell(v: &Option<String>) -> String {
    v.as_deref().map(safe_text).unwrap_or_default()
}

/// A text cell a spreadsheet will not run (OWASP "CSV injection"): one that starts with `=`,
/// `+`, `-`, `@`, a tab or a carriage return gets a leading `'` (decisions.md §14). Player-supplied
/// fields (content ids, tags, error codes, session ids) go through here; numeric columns are
/// written as numbers and never do.
pub fn safe_text(s: &str) -> String {
    if s.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{s}")
    } else {
        s.to_owned()
    }
}

fn bool_cell(v: bool) -> String {
    if v { "true" } else { "false" }.to_owned()
}

fn ts_cell(v: Option<i64>) -> String {
    v.map(format_ms).unwrap_or_default()
}

/// Writes a header and rows as RFC 4180 CSV (fields quoted only when needed, `\n` line
/// ends).
fn write_csv(header: &[String], rows: impl IntoIterator<Item = Vec<String>>) -> String {
    let mut w = csv::WriterBuilder::new()
        .terminator(csv::Terminator::Any(b'\n'))
        .from_writer(Vec::new());
    // Writing to a Vec cannot fail; a failed row would only drop that row.
    let _ = w.write_record(header);
    for row in rows {
        let _ = w.write_record(&row);
    }
    let bytes = w.into_inner().unwrap_or_default();
    String::from_utf8(bytes).unwrap_or_default()
}

fn header(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| (*s).to_owned()).collect()
}

impl TimeseriesBody {
    /// `text/csv`: `t,value,views`.
    pub fn to_csv(&self) -> String {
        write_csv(
            &header(&["t", "value", "views"]),
            self.items
                .iter()
                .map(|i| vec![format_ms(i.t), num_cell(i.value), i.views.to_string()]),
        )
    }
}

impl BreakdownBody {
    /// `text/csv`: `key,value,views,negativeImpact`.
    pub fn to_csv(&self) -> String {
        write_csv(
            &header(&["key", "value", "views", "negativeImpact"]),
            self.items.iter().map(|i| {
                vec![
                    text_cell(&i.key),
                    num_cell(i.value),
                    i.views.to_string(),
                    js_number(i.negative_impact),
                ]
            }),
        )
    }
}

/// The scalar columns of a view row, in JSON field order.
const VIEW_COLUMNS: [&str; 28] = [
    "sessionId",
    "startedAt",
    "endedAt",
    "started",
    "firstFrameAt",
    "startupMs",
    "failed",
    "failedAt",
    "startupFailure",
    "exitBeforeStart",
    "rebufferCount",
    "rebufferMs",
    "pausedMs",
    "watchTimeMs",
    "avgBitrateKbps",
    "renditionSwitches",
    "upshifts",
    "downshifts",
    "errorCount",
    "fatalErrorCode",
    "contentId",
    "src",
    "streamId",
    "browser",
    "os",
    "deviceType",
    "sdk",
    "player",
];

impl ViewsBody {
    /// `text/csv`: the view fields in JSON order, then one `tags.<name>` column per tag
    /// name of any row (sorted); a row without that tag has an empty cell. `nextCursor`
    /// is not part of the CSV.
    pub fn to_csv(&self) -> String {
        let tag_names: BTreeSet<&str> = self
            .items
            .iter()
            .flat_map(|i| i.tags.keys().map(String::as_str))
            .collect();
        let mut head = header(&VIEW_COLUMNS);
        head.extend(tag_names.iter().map(|t| format!("tags.{t}")));
        write_csv(
            &head,
            self.items.iter().map(|i| {
                let mut row = vec![
                    safe_text(&i.session_id),
                    format_ms(i.started_at),
                    format_ms(i.ended_at),
                    bool_cell(i.started),
                    ts_cell(i.first_frame_at),
                    num_cell(i.startup_ms),
                    bool_cell(i.failed),
                    ts_cell(i.failed_at),
                    bool_cell(i.startup_failure),
                    bool_cell(i.exit_before_start),
                    i.rebuffer_count.to_string(),
                    i.rebuffer_ms.to_string(),
                    i.paused_ms.to_string(),
                    i.watch_time_ms.to_string(),
                    num_cell(i.avg_bitrate_kbps),
                    i.rendition_switches.to_string(),
                    i.upshifts.to_string(),
                    i.downshifts.to_string(),
                    i.error_count.to_string(),
                    text_cell(&i.fatal_error_code),
                    text_cell(&i.content_id),
                    text_cell(&i.src),
                    text_cell(&i.stream_id),
                    safe_text(&i.browser),
                    safe_text(&i.os),
                    safe_text(&i.device_type),
                    text_cell(&i.sdk),
                    text_cell(&i.player),
                ];
                row.extend(
                    tag_names
                        .iter()
                        .map(|t| i.tags.get(*t).map(|v| safe_text(v)).unwrap_or_default()),
                );
                row
            }),
        )
    }
}

#[cfg(test)]
mod csv_tests {
    use super::*;

    #[test]
    fn formula_cells_are_neutralised_and_numbers_stay_numbers() {
        for (raw, cell) in [
            (
                "=HYPERLINK(\"https://evil.example\",\"x\")",
                "'=HYPERLINK(\"https://evil.example\",\"x\")",
            ),
            ("+1", "'+1"),
            ("-2+3", "'-2+3"),
            ("@SUM(A1)", "'@SUM(A1)"),
            ("\tcmd", "'\tcmd"),
            ("\rcmd", "'\rcmd"),
            ("movie-1", "movie-1"),
            ("", ""),
        ] {
            assert_eq!(safe_text(raw), cell, "{raw:?}");
        }
        let body = BreakdownBody {
            metric: crate::Metric::Views,
            by: crate::Dimension::ContentId,
            items: vec![BreakdownItem {
                key: Some("=cmd|' /C calc'!A0".into()),
                value: Some(-1.5),
                views: 3,
                negative_impact: -0.25,
            }],
        };
        let csv = body.to_csv();
        let row = csv.lines().nth(1).unwrap_or_default();
        assert_eq!(row, "'=cmd|' /C calc'!A0,-1.5,3,-0.25");
    }
}
