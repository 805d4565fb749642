//! The typed request of each QoE route (analytics.md §4, §5): built from a query string by
//! `parse.rs` (the contract's 400 messages), or directly with the typed constructors below,
//! as pages and the alert evaluator do. The vocabulary they are made of is
//! [`crate::model`]'s (re-exported here, as before).

mod parse;

pub use self::parse::{messages, QueryErrors};
pub use crate::model::*;

/// `GET /api/v1/qoe/overview`.
#[derive(Debug, Clone, PartialEq)]
pub struct OverviewQuery {
    /// `[from, to)`.
    pub range: TimeRange,
    /// `filter`s.
    pub filters: Filters,
}

/// `GET /api/v1/qoe/timeseries`.
#[derive(Debug, Clone, PartialEq)]
pub struct TimeseriesQuery {
    /// `[from, to)`.
    pub range: TimeRange,
    /// `filter`s.
    pub filters: Filters,
    /// `metric` (required).
    pub metric: Metric,
    /// `measurement` (applies to `startupTimeMs`).
    pub measurement: Measurement,
    /// `granularity`, explicit or defaulted by the range.
    pub granularity: Granularity,
    /// `format`.
    pub format: Format,
}

/// `GET /api/v1/qoe/breakdown`.
#[derive(Debug, Clone, PartialEq)]
pub struct BreakdownQuery {
    /// `[from, to)`.
    pub range: TimeRange,
    /// `filter`s.
    pub filters: Filters,
    /// `metric` (required).
    pub metric: Metric,
    /// `measurement` (applies to `startupTimeMs`).
    pub measurement: Measurement,
    /// `by` (required).
    pub by: Dimension,
    /// `orderBy`.
    pub order_by: OrderBy,
    /// `limit` (1–1,000, default 25).
    pub limit: usize,
    /// `format`.
    pub format: Format,
}

/// `GET /api/v1/qoe/views`.
#[derive(Debug, Clone, PartialEq)]
pub struct ViewsQuery {
    /// `[from, to)`.
    pub range: TimeRange,
    /// `filter`s.
    pub filters: Filters,
    /// `limit` (1–1,000, default 50).
    pub limit: usize,
    /// `cursor`: continue after this item.
    pub cursor: Option<Cursor>,
    /// `format`.
    pub format: Format,
}

/// The viewers half of `GET /api/v1/streams/{id}/timeline`.
#[derive(Debug, Clone, PartialEq)]
pub struct TimelineQuery {
    /// `[from, to)`.
    pub range: TimeRange,
    /// `filter`s (applied on top of the stream's own views).
    pub filters: Filters,
    /// `granularity`, explicit or defaulted by the range.
    pub granularity: Granularity,
}

impl OverviewQuery {
    /// The overview of `range` (taken as is: the caller checked it) with `filters`.
    pub fn new(range: TimeRange, filters: Filters) -> Self {
        OverviewQuery { range, filters }
    }
}

impl TimeseriesQuery {
    /// `metric` over `range` with `filters`, at the range's default granularity, the
    /// default measurement, as JSON; set a field to change it.
    pub fn new(range: TimeRange, filters: Filters, metric: Metric) -> Self {
        TimeseriesQuery {
            range,
            filters,
            metric,
            measurement: Measurement::default(),
            granularity: Granularity::default_for(range),
            format: Format::default(),
        }
    }
}

impl BreakdownQuery {
    /// `metric` over `range` with `filters`, by `by`: the default measurement, order and
    /// limit, as JSON; set a field to change it.
    pub fn new(range: TimeRange, filters: Filters, metric: Metric, by: Dimension) -> Self {
        BreakdownQuery {
            range,
            filters,
            metric,
            measurement: Measurement::default(),
            by,
            order_by: OrderBy::default(),
            limit: DEFAULT_BREAKDOWN_LIMIT,
            format: Format::default(),
        }
    }
}

impl ViewsQuery {
    /// The first page of the views of `range` with `filters`, the default limit, as JSON.
    pub fn new(range: TimeRange, filters: Filters) -> Self {
        ViewsQuery {
            range,
            filters,
            limit: DEFAULT_VIEWS_LIMIT,
            cursor: None,
            format: Format::default(),
        }
    }
}

impl TimelineQuery {
    /// The viewers of `range` with `filters`, per bucket of `granularity`.
    pub fn new(range: TimeRange, filters: Filters, granularity: Granularity) -> Self {
        TimelineQuery {
            range,
            filters,
            granularity,
        }
    }
}
