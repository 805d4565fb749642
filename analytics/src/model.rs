//! The QoE vocabulary (analytics.md §3, §4): metrics and their measurements, the dimensions
//! views are filtered and broken down by, [`Filters`], [`TimeRange`] and its UTC buckets,
//! the breakdown order, the answer format and the views list's [`Cursor`]. Every closed set
//! has one wire name each (`as_str`). The route queries built from these are
//! [`crate::query`]'s; how an [`crate::Aggregate`] turns into a metric's value is
//! [`crate::metrics`]'s.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;

use crate::view::View;

/// One minute in ms.
pub const MINUTE_MS: i64 = 60_000;
/// One hour in ms.
pub const HOUR_MS: i64 = 3_600_000;
/// One day in ms.
pub const DAY_MS: i64 = 86_400_000;
/// Default range when `from` is absent: `to` − 24 h.
pub const DEFAULT_RANGE_MS: i64 = DAY_MS;
/// Longest accepted range (400 days).
pub const MAX_RANGE_MS: i64 = 400 * DAY_MS;
/// Most buckets one time series may have.
pub const MAX_BUCKETS: i64 = 1_500;
/// Longest range whose default granularity is `minute` (6 h).
pub const MINUTE_DEFAULT_MAX_MS: i64 = 6 * HOUR_MS;
/// Longest range whose default granularity is `hour` (15 days).
pub const HOUR_DEFAULT_MAX_MS: i64 = 15 * DAY_MS;
/// Largest accepted `limit`.
pub const MAX_LIMIT: usize = 1_000;
/// Default `limit` of the breakdown.
pub const DEFAULT_BREAKDOWN_LIMIT: usize = 25;
/// Default `limit` of the views list.
pub const DEFAULT_VIEWS_LIMIT: usize = 50;
/// Longest accepted tag name in a dimension (`tag.<name>`), as in analytics.md §1.
pub const MAX_TAG_NAME_CHARS: usize = 64;

/// `src` → `streamId` of the caller's registered streams, passed in at query time.
pub type StreamIds = HashMap<String, String>;

/// Whether a metric is better when lower, when higher, or neither (analytics.md §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    /// Lower is better (failures, startup time, rebuffering).
    Lower,
    /// Higher is better (bitrate).
    Higher,
    /// No direction (`views`, `watchTimeMs`).
    Neither,
}

/// A metric id of analytics.md §3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Metric {
    /// `views`
    Views,
    /// `playbackFailurePct`
    PlaybackFailurePct,
    /// `startupFailurePct`
    StartupFailurePct,
    /// `exitBeforeStartPct`
    ExitBeforeStartPct,
    /// `startupTimeMs`
    StartupTimeMs,
    /// `rebufferPct`
    RebufferPct,
    /// `rebufferFrequency`
    RebufferFrequency,
    /// `watchTimeMs`
    WatchTimeMs,
    /// `avgBitrateKbps`
    AvgBitrateKbps,
}

impl Metric {
    /// Every metric, in contract order.
    pub const ALL: [Metric; 9] = [
        Metric::Views,
        Metric::PlaybackFailurePct,
        Metric::StartupFailurePct,
        Metric::ExitBeforeStartPct,
        Metric::StartupTimeMs,
        Metric::RebufferPct,
        Metric::RebufferFrequency,
        Metric::WatchTimeMs,
        Metric::AvgBitrateKbps,
    ];

    /// The contract id, e.g. `rebufferPct`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Metric::Views => "views",
            Metric::PlaybackFailurePct => "playbackFailurePct",
            Metric::StartupFailurePct => "startupFailurePct",
            Metric::ExitBeforeStartPct => "exitBeforeStartPct",
            Metric::StartupTimeMs => "startupTimeMs",
            Metric::RebufferPct => "rebufferPct",
            Metric::RebufferFrequency => "rebufferFrequency",
            Metric::WatchTimeMs => "watchTimeMs",
            Metric::AvgBitrateKbps => "avgBitrateKbps",
        }
    }

    /// Looks up a contract id.
    pub fn from_id(s: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|m| m.as_str() == s)
    }

    /// The better direction of the "better" column of analytics.md §3.
    pub const fn better(self) -> Better {
        match self {
            Metric::Views | Metric::WatchTimeMs => Better::Neither,
            Metric::AvgBitrateKbps => Better::Higher,
            Metric::PlaybackFailurePct
            | Metric::StartupFailurePct
            | Metric::ExitBeforeStartPct
            | Metric::StartupTimeMs
            | Metric::RebufferPct
            | Metric::RebufferFrequency => Better::Lower,
        }
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The statistic of `startupMs` that `startupTimeMs` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Measurement {
    /// Median (the default).
    #[default]
    P50,
    /// 75th percentile.
    P75,
    /// 95th percentile.
    P95,
    /// 99th percentile.
    P99,
    /// Arithmetic mean.
    Avg,
}

impl Measurement {
    /// Every measurement, in contract order.
    pub const ALL: [Measurement; 5] = [
        Measurement::P50,
        Measurement::P75,
        Measurement::P95,
        Measurement::P99,
        Measurement::Avg,
    ];

    /// The wire name, e.g. `p95`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Measurement::P50 => "p50",
            Measurement::P75 => "p75",
            Measurement::P95 => "p95",
            Measurement::P99 => "p99",
            Measurement::Avg => "avg",
        }
    }

    /// Looks up a wire name.
    pub fn from_wire(s: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|m| m.as_str() == s)
    }

    /// The percentile in whole percent (`p95` → 95); `None` for `avg`.
    pub const fn percent(self) -> Option<u32> {
        match self {
            Measurement::P50 => Some(50),
            Measurement::P75 => Some(75),
            Measurement::P95 => Some(95),
            Measurement::P99 => Some(99),
            Measurement::Avg => None,
        }
    }
}

/// Time-series bucket width.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Granularity {
    /// One UTC minute.
    Minute,
    /// One UTC hour.
    Hour,
    /// One UTC day.
    Day,
}

impl Granularity {
    /// Every granularity, finest first.
    pub const ALL: [Granularity; 3] = [Granularity::Minute, Granularity::Hour, Granularity::Day];

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Granularity::Minute => "minute",
            Granularity::Hour => "hour",
            Granularity::Day => "day",
        }
    }

    /// Looks up a wire name.
    pub fn from_wire(s: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|g| g.as_str() == s)
    }

    /// Bucket width in ms.
    pub const fn ms(self) -> i64 {
        match self {
            Granularity::Minute => MINUTE_MS,
            Granularity::Hour => HOUR_MS,
            Granularity::Day => DAY_MS,
        }
    }

    /// The default for a range: ≤ 6 h → minute, ≤ 15 days → hour, else day.
    pub const fn default_for(range: TimeRange) -> Self {
        let len = range.len_ms();
        if len <= MINUTE_DEFAULT_MAX_MS {
            Granularity::Minute
        } else if len <= HOUR_DEFAULT_MAX_MS {
            Granularity::Hour
        } else {
            Granularity::Day
        }
    }
}

/// A dimension views can be filtered and broken down by.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dimension {
    /// `contentId`
    ContentId,
    /// `browser`
    Browser,
    /// `os`
    Os,
    /// `deviceType`
    DeviceType,
    /// `sdk`
    Sdk,
    /// `player`
    Player,
    /// `streamId`, resolved from `src` at query time.
    StreamId,
    /// `tag.<name>`
    Tag(String),
}

impl Dimension {
    /// Parses a wire name (`os`, `tag.plan`); a tag name has 1–64 characters.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "contentId" => Dimension::ContentId,
            "browser" => Dimension::Browser,
            "os" => Dimension::Os,
            "deviceType" => Dimension::DeviceType,
            "sdk" => Dimension::Sdk,
            "player" => Dimension::Player,
            "streamId" => Dimension::StreamId,
            _ => {
                let name = s.strip_prefix("tag.")?;
                let n = name.chars().count();
                if n == 0 || n > MAX_TAG_NAME_CHARS {
                    return None;
                }
                Dimension::Tag(name.to_owned())
            }
        })
    }

    /// The wire name, e.g. `deviceType` or `tag.plan`.
    pub fn name(&self) -> String {
        match self {
            Dimension::ContentId => "contentId".into(),
            Dimension::Browser => "browser".into(),
            Dimension::Os => "os".into(),
            Dimension::DeviceType => "deviceType".into(),
            Dimension::Sdk => "sdk".into(),
            Dimension::Player => "player".into(),
            Dimension::StreamId => "streamId".into(),
            Dimension::Tag(name) => format!("tag.{name}"),
        }
    }

    /// This dimension's value for a view; `None` when the view has none.
    pub fn value_of<'a>(&self, view: &'a View, streams: &'a StreamIds) -> Option<&'a str> {
        let d = &view.dims;
        match self {
            Dimension::ContentId => d.content_id.as_deref(),
            Dimension::Browser => Some(&d.user_agent.browser),
            Dimension::Os => Some(&d.user_agent.os),
            Dimension::DeviceType => Some(&d.user_agent.device_type),
            Dimension::Sdk => d.sdk.as_deref(),
            Dimension::Player => d.player.as_deref(),
            Dimension::StreamId => stream_id(view, streams),
            Dimension::Tag(name) => d.tags.get(name).map(String::as_str),
        }
    }
}

impl fmt::Display for Dimension {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// The `streamId` of a view: the registered stream whose `sourceUrl` equals its `src`.
pub fn stream_id<'a>(view: &'a View, streams: &'a StreamIds) -> Option<&'a str> {
    view.dims
        .src
        .as_ref()
        .and_then(|src| streams.get(src))
        .map(String::as_str)
}

/// The values one dimension is filtered by.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Clause {
    /// `dim:value` filters: the view's value must be one of these (when any).
    pub include: Vec<String>,
    /// `!dim:value` filters: the view's value must be none of these.
    pub exclude: Vec<String>,
}

/// All `filter` parameters of a request.
///
/// Per dimension, the `dim:value` filters are alternatives (the same dimension twice
/// means either value) and every `!dim:value` excludes its value; different dimensions
/// must all hold. A view without a value for a dimension fails any `dim:value` filter on
/// it and passes every `!dim:value` one.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Filters {
    /// Clauses by dimension.
    pub clauses: BTreeMap<Dimension, Clause>,
}

impl Filters {
    /// True when the view passes every clause.
    pub fn matches(&self, view: &View, streams: &StreamIds) -> bool {
        self.clauses.iter().all(|(dim, clause)| {
            let value = dim.value_of(view, streams);
            let included = clause.include.is_empty()
                || value.is_some_and(|v| clause.include.iter().any(|i| i == v));
            let excluded = value.is_some_and(|v| clause.exclude.iter().any(|e| e == v));
            included && !excluded
        })
    }

    /// True when there is no filter.
    pub fn is_empty(&self) -> bool {
        self.clauses.is_empty()
    }

    /// True when a filter is on `streamId` (resolving it needs the registered streams).
    pub fn names_stream_id(&self) -> bool {
        self.clauses.contains_key(&Dimension::StreamId)
    }
}

/// The half-open time range `[from, to)` in epoch ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeRange {
    /// Inclusive start.
    pub from_ms: i64,
    /// Exclusive end.
    pub to_ms: i64,
}

impl TimeRange {
    /// Length in ms.
    pub const fn len_ms(self) -> i64 {
        self.to_ms - self.from_ms
    }

    /// True when `ts` lies in `[from, to)`.
    pub const fn contains(self, ts_ms: i64) -> bool {
        self.from_ms <= ts_ms && ts_ms < self.to_ms
    }

    /// Number of UTC-aligned buckets of `g` that overlap the range.
    pub fn bucket_count(self, g: Granularity) -> i64 {
        if self.to_ms <= self.from_ms {
            return 0;
        }
        let w = g.ms();
        (self.to_ms - 1).div_euclid(w) - self.from_ms.div_euclid(w) + 1
    }

    /// Start (epoch ms) of every UTC-aligned bucket of `g` that overlaps the range,
    /// oldest first. The first may start before `from`, the last may end after `to`.
    pub fn buckets(self, g: Granularity) -> Vec<i64> {
        let w = g.ms();
        let first = self.from_ms.div_euclid(w) * w;
        (0..self.bucket_count(g)).map(|i| first + i * w).collect()
    }
}

/// Start of the UTC-aligned bucket of `g` holding `ts`.
pub fn bucket_start(ts_ms: i64, g: Granularity) -> i64 {
    ts_ms.div_euclid(g.ms()) * g.ms()
}

/// Breakdown order (`orderBy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OrderBy {
    /// Largest negative impact first (default).
    #[default]
    NegativeImpact,
    /// Most views first.
    Views,
    /// Worst value first.
    Value,
}

impl OrderBy {
    /// Every order, in contract order.
    pub const ALL: [OrderBy; 3] = [OrderBy::NegativeImpact, OrderBy::Views, OrderBy::Value];

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            OrderBy::NegativeImpact => "negativeImpact",
            OrderBy::Views => "views",
            OrderBy::Value => "value",
        }
    }
}

/// Response format (`format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// `application/json` (default).
    #[default]
    Json,
    /// `text/csv`.
    Csv,
}

impl Format {
    /// Every format.
    pub const ALL: [Format; 2] = [Format::Json, Format::Csv];

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Csv => "csv",
        }
    }
}

/// A position in the views list: the last item of a page, `(startedAt, sessionId)`.
/// The list is ordered by `startedAt` descending, then `sessionId` ascending, so the next
/// page is stable while new views arrive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    /// `startedAt` of the last item of the previous page (epoch ms).
    pub started_at: i64,
    /// `sessionId` of that item.
    pub session_id: String,
}

impl Cursor {
    /// The opaque wire form: unpadded base64url of `<startedAt>:<sessionId>`.
    pub fn encode(&self) -> String {
        URL_SAFE_NO_PAD.encode(format!("{}:{}", self.started_at, self.session_id))
    }

    /// Reads the wire form; `None` for anything [`Cursor::encode`] cannot produce.
    pub fn decode(s: &str) -> Option<Self> {
        let bytes = URL_SAFE_NO_PAD.decode(s).ok()?;
        let text = String::from_utf8(bytes).ok()?;
        let (ts, session_id) = text.split_once(':')?;
        let cursor = Cursor {
            started_at: ts.parse().ok()?,
            session_id: session_id.to_owned(),
        };
        // Only the exact text this service issues (no `+5`, `007`, empty session).
        (!cursor.session_id.is_empty() && cursor.encode() == s).then_some(cursor)
    }

    /// True when a view at `(started_at, session_id)` comes after this cursor in list order.
    pub fn is_before(&self, started_at: i64, session_id: &str) -> bool {
        started_at < self.started_at
            || (started_at == self.started_at && session_id > self.session_id.as_str())
    }
}

/// String-enum OpenAPI schemas of the closed sets that answers carry.
#[cfg(feature = "openapi")]
mod schemas {
    use super::{Granularity, Metric};
    use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
    use utoipa::openapi::RefOr;

    fn string_enum<'a>(values: impl IntoIterator<Item = &'a str>) -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .enum_values(Some(values))
            .into()
    }

    impl utoipa::PartialSchema for Metric {
        fn schema() -> RefOr<Schema> {
            string_enum(Metric::ALL.iter().map(|m| m.as_str()))
        }
    }
    impl utoipa::ToSchema for Metric {}

    impl utoipa::PartialSchema for Granularity {
        fn schema() -> RefOr<Schema> {
            string_enum(Granularity::ALL.iter().map(|g| g.as_str()))
        }
    }
    impl utoipa::ToSchema for Granularity {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_better_directions() {
        use Better::*;
        let got: Vec<Better> = Metric::ALL.iter().map(|m| m.better()).collect();
        assert_eq!(
            got,
            [Neither, Lower, Lower, Lower, Lower, Lower, Lower, Neither, Higher]
        );
    }
}
