//! The typed request of each QoE route (analytics.md §4, §5): built from a query string by
//! [`parse`] (the contract's 400 messages), or directly with the typed constructors below,
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
