//! Parsing the QoE routes' query strings into their typed requests (analytics.md §4, §5),
//! with the contract's 400 bodies (`{ errors: { <param>: <message> } }`) in zod's words.
//!
//! Parsing rules where the contract is silent:
//! - each route reads only its own parameters; any other key (including another
//!   route's, e.g. `granularity` on the overview) is ignored;
//! - a parameter that is not repeatable given twice is an error
//!   (`Expected string, received array`); `filter` is the only repeatable one;
//! - all errors are reported at once, at most one message per parameter;
//! - `measurement` is validated on every route that takes it and applied only to
//!   `startupTimeMs` (the other metrics have a single definition);
//! - an empty `cursor=` is the first page; `format` is `json` (default) or `csv`.

use std::collections::BTreeMap;
use std::fmt;

use ingest::time::parse_iso8601_ms;

use super::{BreakdownQuery, OverviewQuery, TimelineQuery, TimeseriesQuery, ViewsQuery};
use crate::model::{
    Cursor, Dimension, Filters, Format, Granularity, Measurement, Metric, OrderBy, TimeRange,
    DEFAULT_BREAKDOWN_LIMIT, DEFAULT_RANGE_MS, DEFAULT_VIEWS_LIMIT, MAX_BUCKETS, MAX_LIMIT,
    MAX_RANGE_MS,
};

/// A 400 answer: one message per bad parameter, serialized as
/// `{ "errors": { <param>: <message> } }`.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct QueryErrors {
    /// Message by parameter name.
    pub errors: BTreeMap<String, String>,
}

impl QueryErrors {
    /// Records a message for `param`, keeping the first one per parameter.
    pub fn add(&mut self, param: &str, message: impl Into<String>) {
        self.errors
            .entry(param.to_owned())
            .or_insert_with(|| message.into());
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }
}

impl fmt::Display for QueryErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (k, v) in &self.errors {
            if !first {
                f.write_str("; ")?;
            }
            first = false;
            write!(f, "{k}: {v}")?;
        }
        Ok(())
    }
}

impl std::error::Error for QueryErrors {}

/// Messages, shared so tests and docs can name them.
pub mod messages {
    /// A required parameter is missing (zod's wording).
    pub const REQUIRED: &str = "Required";
    /// A non-repeatable parameter was given more than once.
    pub const REPEATED: &str = "Expected string, received array";
    /// `from` or `to` is not an ISO 8601 timestamp.
    pub const INVALID_DATETIME: &str = "Invalid datetime";
    /// `from` ≥ `to`.
    pub const FROM_NOT_BEFORE_TO: &str = "from must be earlier than to";
    /// `to − from` over 400 days.
    pub const RANGE_TOO_LONG: &str = "Range must be at most 400 days";
    /// `limit` is not a number.
    pub const NOT_A_NUMBER: &str = "Expected number, received nan";
    /// `limit` is not an integer.
    pub const NOT_AN_INTEGER: &str = "Expected integer, received float";
    /// `limit` below 1.
    pub const LIMIT_TOO_SMALL: &str = "Number must be greater than or equal to 1";
    /// `limit` above 1,000.
    pub const LIMIT_TOO_LARGE: &str = "Number must be less than or equal to 1000";
    /// `cursor` is not one this service issued.
    pub const INVALID_CURSOR: &str = "Invalid cursor";
}

/// The zod-style list of accepted dimensions, for messages.
const DIMENSIONS_EXPECTED: &str =
    "'contentId' | 'browser' | 'os' | 'deviceType' | 'sdk' | 'player' | 'streamId' | 'tag.<name>'";

impl Filters {
    /// Parses `filter` values (`dim:value` or `!dim:value`, as the routes take them, e.g.
    /// a page's URL or a stored alert rule); the message of the first bad one, as a route
    /// would answer it under `filter`.
    pub fn parse<'a>(values: impl IntoIterator<Item = &'a str>) -> Result<Filters, String> {
        let mut filters = Filters::default();
        for raw in values {
            filters.add(raw)?;
        }
        Ok(filters)
    }

    /// Parses one `filter` value (`dim:value` or `!dim:value`) into these filters.
    fn add(&mut self, raw: &str) -> Result<(), String> {
        let (negate, rest) = match raw.strip_prefix('!') {
            Some(rest) => (true, rest),
            None => (false, raw),
        };
        let Some((dim, value)) = rest.split_once(':') else {
            return Err(format!(
                "Invalid filter '{raw}': expected dimension:value or !dimension:value"
            ));
        };
        let Some(dim) = Dimension::parse(dim) else {
            return Err(format!(
                "Invalid filter '{raw}': unknown dimension '{dim}'. Expected {DIMENSIONS_EXPECTED}"
            ));
        };
        if value.is_empty() {
            return Err(format!("Invalid filter '{raw}': value must not be empty"));
        }
        let clause = self.clauses.entry(dim).or_default();
        let list = if negate {
            &mut clause.exclude
        } else {
            &mut clause.include
        };
        if !list.iter().any(|v| v == value) {
            list.push(value.to_owned());
        }
        Ok(())
    }
}

/// The query-string pairs of one request.
struct Params<'a> {
    pairs: &'a [(String, String)],
    errors: QueryErrors,
}

impl<'a> Params<'a> {
    fn new(pairs: &'a [(String, String)]) -> Self {
        Params {
            pairs,
            errors: QueryErrors::default(),
        }
    }

    fn all(&self, key: &str) -> Vec<&'a str> {
        self.pairs
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The value of a non-repeatable parameter; records an error when repeated.
    fn single(&mut self, key: &str) -> Option<&'a str> {
        match self.all(key).as_slice() {
            [] => None,
            [v] => Some(v),
            _ => {
                self.errors.add(key, messages::REPEATED);
                None
            }
        }
    }

    /// A parameter of a closed set: default when absent, error when unknown.
    fn choice<T: Copy>(
        &mut self,
        key: &str,
        all: &[T],
        name: fn(T) -> &'static str,
        default: Option<T>,
    ) -> Option<T> {
        let Some(raw) = self.single(key) else {
            if default.is_none() {
                // Kept only when the parameter was not given twice (first message wins).
                self.errors.add(key, messages::REQUIRED);
            }
            return default;
        };
        if let Some(v) = all.iter().copied().find(|v| name(*v) == raw) {
            return Some(v);
        }
        let expected: Vec<String> = all.iter().map(|v| format!("'{}'", name(*v))).collect();
        self.errors.add(
            key,
            format!(
                "Invalid enum value. Expected {}, received '{raw}'",
                expected.join(" | ")
            ),
        );
        None
    }

    fn timestamp(&mut self, key: &str) -> Result<Option<i64>, ()> {
        match self.single(key) {
            None if self.errors.errors.contains_key(key) => Err(()),
            None => Ok(None),
            Some(raw) => match parse_iso8601_ms(raw) {
                Some(ms) => Ok(Some(ms)),
                None => {
                    self.errors.add(key, messages::INVALID_DATETIME);
                    Err(())
                }
            },
        }
    }

    /// `from`, `to` and their rules; `None` when either is bad.
    fn range(&mut self, now_ms: i64) -> Option<TimeRange> {
        let from = self.timestamp("from");
        let to = self.timestamp("to");
        let (Ok(from), Ok(to)) = (from, to) else {
            return None;
        };
        let to_ms = to.unwrap_or(now_ms);
        let from_ms = from.unwrap_or(to_ms - DEFAULT_RANGE_MS);
        // Both range errors are keyed `from` (§5 allows either key); with a defaulted
        // `from` neither can happen, as it is always 24 h before `to`.
        if from_ms >= to_ms {
            self.errors.add("from", messages::FROM_NOT_BEFORE_TO);
            return None;
        }
        if to_ms - from_ms > MAX_RANGE_MS {
            self.errors.add("from", messages::RANGE_TOO_LONG);
            return None;
        }
        Some(TimeRange { from_ms, to_ms })
    }

    fn filters(&mut self) -> Filters {
        let mut filters = Filters::default();
        for raw in self.all("filter") {
            if let Err(message) = filters.add(raw) {
                self.errors.add("filter", message);
            }
        }
        filters
    }

    fn measurement(&mut self) -> Measurement {
        self.choice(
            "measurement",
            &Measurement::ALL,
            Measurement::as_str,
            Some(Measurement::P50),
        )
        .unwrap_or_default()
    }

    fn metric(&mut self) -> Option<Metric> {
        self.choice("metric", &Metric::ALL, Metric::as_str, None)
    }

    fn format(&mut self) -> Format {
        self.choice("format", &Format::ALL, Format::as_str, Some(Format::Json))
            .unwrap_or_default()
    }

    /// `granularity`, defaulted by the range and checked against [`MAX_BUCKETS`].
    fn granularity(&mut self, range: Option<TimeRange>) -> Option<Granularity> {
        let explicit = match self.single("granularity") {
            None => None,
            Some(raw) => match Granularity::from_wire(raw) {
                Some(g) => Some(g),
                None => {
                    self.errors.add(
                            "granularity",
                            format!(
                                "Invalid enum value. Expected 'minute' | 'hour' | 'day', received '{raw}'"
                            ),
                        );
                    return None;
                }
            },
        };
        if self.errors.errors.contains_key("granularity") {
            return None;
        }
        let range = range?;
        let g = explicit.unwrap_or(Granularity::default_for(range));
        let n = range.bucket_count(g);
        if n > MAX_BUCKETS {
            self.errors.add(
                "granularity",
                format!(
                    "Too many buckets: {n} {} buckets in the range, at most {MAX_BUCKETS}",
                    g.as_str()
                ),
            );
            return None;
        }
        Some(g)
    }

    fn limit(&mut self, default: usize) -> usize {
        let Some(raw) = self.single("limit") else {
            return default;
        };
        let numeric = !raw.is_empty()
            && raw
                .bytes()
                .all(|b| b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.' | b'e' | b'E'));
        let value = match raw.parse::<f64>() {
            Ok(v) if numeric && v.is_finite() => v,
            _ => {
                self.errors.add("limit", messages::NOT_A_NUMBER);
                return default;
            }
        };
        if value.fract() != 0.0 {
            self.errors.add("limit", messages::NOT_AN_INTEGER);
        } else if value < 1.0 {
            self.errors.add("limit", messages::LIMIT_TOO_SMALL);
        } else if value > MAX_LIMIT as f64 {
            self.errors.add("limit", messages::LIMIT_TOO_LARGE);
        } else {
            return value as usize;
        }
        default
    }

    fn cursor(&mut self) -> Option<Cursor> {
        match self.single("cursor")? {
            "" => None,
            raw => {
                let c = Cursor::decode(raw);
                if c.is_none() {
                    self.errors.add("cursor", messages::INVALID_CURSOR);
                }
                c
            }
        }
    }

    fn finish<T>(self, value: impl FnOnce() -> Option<T>) -> Result<T, QueryErrors> {
        if !self.errors.is_empty() {
            return Err(self.errors);
        }
        // Every field is present when no error was recorded.
        value().ok_or(self.errors)
    }
}

impl OverviewQuery {
    /// Parses the query string; `now_ms` is the default `to`.
    pub fn parse(pairs: &[(String, String)], now_ms: i64) -> Result<Self, QueryErrors> {
        let mut p = Params::new(pairs);
        let range = p.range(now_ms);
        let filters = p.filters();
        p.finish(|| {
            Some(OverviewQuery {
                range: range?,
                filters,
            })
        })
    }
}

impl TimeseriesQuery {
    /// Parses the query string; `now_ms` is the default `to`.
    pub fn parse(pairs: &[(String, String)], now_ms: i64) -> Result<Self, QueryErrors> {
        let mut p = Params::new(pairs);
        let range = p.range(now_ms);
        let filters = p.filters();
        let metric = p.metric();
        let measurement = p.measurement();
        let granularity = p.granularity(range);
        let format = p.format();
        p.finish(|| {
            Some(TimeseriesQuery {
                range: range?,
                filters,
                metric: metric?,
                measurement,
                granularity: granularity?,
                format,
            })
        })
    }
}

impl BreakdownQuery {
    /// Parses the query string; `now_ms` is the default `to`.
    pub fn parse(pairs: &[(String, String)], now_ms: i64) -> Result<Self, QueryErrors> {
        let mut p = Params::new(pairs);
        let range = p.range(now_ms);
        let filters = p.filters();
        let metric = p.metric();
        let measurement = p.measurement();
        let by = match p.single("by") {
            None => {
                p.errors.add("by", messages::REQUIRED);
                None
            }
            Some(raw) => {
                let d = Dimension::parse(raw);
                if d.is_none() {
                    p.errors.add(
                        "by",
                        format!(
                            "Invalid enum value. Expected {DIMENSIONS_EXPECTED}, received '{raw}'"
                        ),
                    );
                }
                d
            }
        };
        let order_by = p
            .choice(
                "orderBy",
                &OrderBy::ALL,
                OrderBy::as_str,
                Some(OrderBy::NegativeImpact),
            )
            .unwrap_or_default();
        let limit = p.limit(DEFAULT_BREAKDOWN_LIMIT);
        let format = p.format();
        p.finish(|| {
            Some(BreakdownQuery {
                range: range?,
                filters,
                metric: metric?,
                measurement,
                by: by?,
                order_by,
                limit,
                format,
            })
        })
    }
}

impl ViewsQuery {
    /// Parses the query string; `now_ms` is the default `to`.
    pub fn parse(pairs: &[(String, String)], now_ms: i64) -> Result<Self, QueryErrors> {
        let mut p = Params::new(pairs);
        let range = p.range(now_ms);
        let filters = p.filters();
        let limit = p.limit(DEFAULT_VIEWS_LIMIT);
        let cursor = p.cursor();
        let format = p.format();
        p.finish(|| {
            Some(ViewsQuery {
                range: range?,
                filters,
                limit,
                cursor,
                format,
            })
        })
    }
}

impl TimelineQuery {
    /// Parses the query string; `now_ms` is the default `to`.
    pub fn parse(pairs: &[(String, String)], now_ms: i64) -> Result<Self, QueryErrors> {
        let mut p = Params::new(pairs);
        let range = p.range(now_ms);
        let filters = p.filters();
        let granularity = p.granularity(range);
        p.finish(|| {
            Some(TimelineQuery {
                range: range?,
                filters,
                granularity: granularity?,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dims::{Dims, UserAgent};
    use crate::event::Event;
    use crate::model::*;
    use crate::view::View;
    use ingest::time::format_ms;
    use serde_json::json;

    /// 2024-05-01T12:00:00.000Z
    const NOW: i64 = 1_714_564_800_000;

    fn q(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn body(e: QueryErrors) -> serde_json::Value {
        serde_json::to_value(e).expect("serializes")
    }

    fn ts(ms: i64) -> String {
        format_ms(ms)
    }

    #[test]
    fn defaults_to_the_last_24_hours_before_now() {
        let o = OverviewQuery::parse(&[], NOW).expect("valid");
        assert_eq!(
            o.range,
            TimeRange {
                from_ms: NOW - DAY_MS,
                to_ms: NOW
            }
        );
        assert!(o.filters.is_empty());
        let t = TimeseriesQuery::parse(&q(&[("metric", "views")]), NOW).expect("valid");
        assert_eq!(t.measurement, Measurement::P50);
        assert_eq!(t.granularity, Granularity::Hour);
        assert_eq!(t.format, Format::Json);
        let b = BreakdownQuery::parse(&q(&[("metric", "views"), ("by", "os")]), NOW).expect("ok");
        assert_eq!((b.order_by, b.limit), (OrderBy::NegativeImpact, 25));
        let v = ViewsQuery::parse(&[], NOW).expect("valid");
        assert_eq!((v.limit, v.cursor), (50, None));
        let tl = TimelineQuery::parse(&[], NOW).expect("valid");
        assert_eq!(tl.granularity, Granularity::Hour);
    }

    #[test]
    fn default_from_follows_an_explicit_to() {
        let to = "2024-01-02T00:00:00.000Z";
        let o = OverviewQuery::parse(&q(&[("to", to)]), NOW).expect("valid");
        assert_eq!(ts(o.range.from_ms), "2024-01-01T00:00:00.000Z");
        assert_eq!(ts(o.range.to_ms), to);
    }

    #[test]
    fn timestamps_accept_offsets_and_reject_garbage() {
        let o = OverviewQuery::parse(
            &q(&[
                ("from", "2024-05-01T10:00:00+02:00"),
                ("to", "2024-05-01T09:00:00Z"),
            ]),
            NOW,
        )
        .expect("valid");
        assert_eq!(o.range.len_ms(), HOUR_MS);
        let e = OverviewQuery::parse(&q(&[("from", "yesterday"), ("to", "")]), NOW)
            .expect_err("invalid");
        assert_eq!(
            body(e),
            json!({ "errors": { "from": "Invalid datetime", "to": "Invalid datetime" } })
        );
    }

    #[test]
    fn from_must_be_before_to() {
        for (from, to) in [
            ("2024-05-01T00:00:00Z", "2024-05-01T00:00:00Z"),
            ("2024-05-02T00:00:00Z", "2024-05-01T00:00:00Z"),
        ] {
            let e = OverviewQuery::parse(&q(&[("from", from), ("to", to)]), NOW).expect_err("bad");
            assert_eq!(
                body(e),
                json!({ "errors": { "from": "from must be earlier than to" } })
            );
        }
        // `from` in the future with `to` defaulted to now.
        let e = OverviewQuery::parse(&q(&[("from", &ts(NOW + 1))]), NOW).expect_err("bad");
        assert_eq!(
            body(e),
            json!({ "errors": { "from": "from must be earlier than to" } })
        );
    }

    #[test]
    fn range_of_400_days_is_the_limit() {
        let to = ts(NOW);
        let ok = ts(NOW - MAX_RANGE_MS);
        OverviewQuery::parse(&q(&[("from", &ok), ("to", &to)]), NOW).expect("400 days is fine");
        let over = ts(NOW - MAX_RANGE_MS - 1);
        let e = OverviewQuery::parse(&q(&[("from", &over), ("to", &to)]), NOW).expect_err("bad");
        assert_eq!(
            body(e),
            json!({ "errors": { "from": "Range must be at most 400 days" } })
        );
    }

    #[test]
    fn repeated_single_parameters_are_rejected() {
        let e = TimeseriesQuery::parse(
            &q(&[
                ("metric", "views"),
                ("metric", "rebufferPct"),
                ("from", "2024-05-01T00:00:00Z"),
                ("from", "2024-05-01T01:00:00Z"),
                ("granularity", "hour"),
                ("granularity", "hour"),
            ]),
            NOW,
        )
        .expect_err("bad");
        assert_eq!(
            body(e),
            json!({ "errors": {
                "from": "Expected string, received array",
                "granularity": "Expected string, received array",
                "metric": "Expected string, received array",
            } })
        );
    }

    #[test]
    fn metric_is_required_and_checked() {
        let e = TimeseriesQuery::parse(&[], NOW).expect_err("bad");
        assert_eq!(body(e), json!({ "errors": { "metric": "Required" } }));
        let e = BreakdownQuery::parse(&q(&[("metric", "fps")]), NOW).expect_err("bad");
        assert_eq!(
            body(e),
            json!({ "errors": {
                "by": "Required",
                "metric": "Invalid enum value. Expected 'views' | 'playbackFailurePct' | 'startupFailurePct' | 'exitBeforeStartPct' | 'startupTimeMs' | 'rebufferPct' | 'rebufferFrequency' | 'watchTimeMs' | 'avgBitrateKbps', received 'fps'",
            } })
        );
        for m in Metric::ALL {
            let t = TimeseriesQuery::parse(&q(&[("metric", m.as_str())]), NOW).expect("valid");
            assert_eq!(t.metric, m);
        }
    }

    #[test]
    fn measurement_is_checked_for_every_metric_and_defaults_to_p50() {
        let e = TimeseriesQuery::parse(&q(&[("metric", "views"), ("measurement", "p90")]), NOW)
            .expect_err("bad");
        assert_eq!(
            body(e),
            json!({ "errors": { "measurement": "Invalid enum value. Expected 'p50' | 'p75' | 'p95' | 'p99' | 'avg', received 'p90'" } })
        );
        for m in Measurement::ALL {
            let t = TimeseriesQuery::parse(
                &q(&[("metric", "rebufferPct"), ("measurement", m.as_str())]),
                NOW,
            )
            .expect("accepted, ignored by rebufferPct");
            assert_eq!(t.measurement, m);
        }
    }

    #[test]
    fn granularity_defaults_at_the_6_hour_and_15_day_edges() {
        let cases = [
            (MINUTE_DEFAULT_MAX_MS, Granularity::Minute),
            (MINUTE_DEFAULT_MAX_MS + 1, Granularity::Hour),
            (HOUR_DEFAULT_MAX_MS, Granularity::Hour),
            (HOUR_DEFAULT_MAX_MS + 1, Granularity::Day),
            (MAX_RANGE_MS, Granularity::Day),
            (1, Granularity::Minute),
        ];
        for (len, want) in cases {
            let pairs = q(&[
                ("metric", "views"),
                ("from", &ts(NOW - len)),
                ("to", &ts(NOW)),
            ]);
            let t = TimeseriesQuery::parse(&pairs, NOW).expect("valid");
            assert_eq!(t.granularity, want, "range {len} ms");
            let tl = TimelineQuery::parse(&pairs, NOW).expect("valid");
            assert_eq!(tl.granularity, want, "range {len} ms");
        }
    }

    #[test]
    fn default_granularity_never_exceeds_the_bucket_limit() {
        // The worst cases: each default's longest range, unaligned by 1 ms (one more bucket).
        for len in [MINUTE_DEFAULT_MAX_MS, HOUR_DEFAULT_MAX_MS, MAX_RANGE_MS] {
            let range = TimeRange {
                from_ms: NOW + 1 - len,
                to_ms: NOW + 1,
            };
            let g = Granularity::default_for(range);
            assert!(range.bucket_count(g) <= MAX_BUCKETS);
        }
    }

    #[test]
    fn at_most_1500_buckets() {
        // NOW is minute-aligned: exactly 1500 minutes is 1500 buckets.
        let at = q(&[
            ("metric", "views"),
            ("granularity", "minute"),
            ("from", &ts(NOW - 1_500 * MINUTE_MS)),
            ("to", &ts(NOW)),
        ]);
        let t = TimeseriesQuery::parse(&at, NOW).expect("1500 buckets is fine");
        assert_eq!(t.range.bucket_count(Granularity::Minute), 1_500);
        // The same length shifted by 1 ms overlaps 1501 buckets.
        let shifted = q(&[
            ("metric", "views"),
            ("granularity", "minute"),
            ("from", &ts(NOW - 1_500 * MINUTE_MS + 1)),
            ("to", &ts(NOW + 1)),
        ]);
        let e = TimeseriesQuery::parse(&shifted, NOW + 1).expect_err("too many");
        assert_eq!(
            body(e),
            json!({ "errors": { "granularity": "Too many buckets: 1501 minute buckets in the range, at most 1500" } })
        );
        // One minute more, aligned: 1501.
        let over = q(&[
            ("granularity", "minute"),
            ("from", &ts(NOW - 1_501 * MINUTE_MS)),
            ("to", &ts(NOW)),
        ]);
        let e = TimelineQuery::parse(&over, NOW).expect_err("too many");
        assert_eq!(
            body(e),
            json!({ "errors": { "granularity": "Too many buckets: 1501 minute buckets in the range, at most 1500" } })
        );
        // Hourly over 63 days = 1512 buckets.
        let hourly = q(&[
            ("metric", "views"),
            ("granularity", "hour"),
            ("from", &ts(NOW - 63 * DAY_MS)),
            ("to", &ts(NOW)),
        ]);
        let e = TimeseriesQuery::parse(&hourly, NOW).expect_err("too many");
        assert_eq!(
            body(e),
            json!({ "errors": { "granularity": "Too many buckets: 1512 hour buckets in the range, at most 1500" } })
        );
    }

    #[test]
    fn unknown_granularity_is_rejected() {
        let e = TimelineQuery::parse(&q(&[("granularity", "week")]), NOW).expect_err("bad");
        assert_eq!(
            body(e),
            json!({ "errors": { "granularity": "Invalid enum value. Expected 'minute' | 'hour' | 'day', received 'week'" } })
        );
    }

    #[test]
    fn buckets_are_utc_aligned_and_overlap_the_range() {
        let from = parse_iso8601_ms("2024-05-01T10:30:00Z").expect("ts");
        let to = parse_iso8601_ms("2024-05-01T13:00:00Z").expect("ts");
        let r = TimeRange {
            from_ms: from,
            to_ms: to,
        };
        let b: Vec<String> = r.buckets(Granularity::Hour).into_iter().map(ts).collect();
        assert_eq!(
            b,
            [
                "2024-05-01T10:00:00.000Z",
                "2024-05-01T11:00:00.000Z",
                "2024-05-01T12:00:00.000Z"
            ]
        );
        let d: Vec<String> = r.buckets(Granularity::Day).into_iter().map(ts).collect();
        assert_eq!(d, ["2024-05-01T00:00:00.000Z"]);
        // A range of 1 ms overlaps one bucket; a range ending on a boundary does not
        // overlap the bucket that starts there.
        let one = TimeRange {
            from_ms: to - 1,
            to_ms: to,
        };
        assert_eq!(one.buckets(Granularity::Minute), vec![to - MINUTE_MS]);
        // Before the epoch, buckets still align on UTC boundaries.
        let pre = TimeRange {
            from_ms: -90_000,
            to_ms: 30_000,
        };
        assert_eq!(pre.buckets(Granularity::Minute), vec![-120_000, -60_000, 0]);
        assert_eq!(bucket_start(-1, Granularity::Day), -DAY_MS);
    }

    #[test]
    fn filters_parse_and_report_the_first_bad_one() {
        let t = ViewsQuery::parse(
            &q(&[
                ("filter", "os:iOS"),
                ("filter", "os:Android"),
                ("filter", "!browser:Safari"),
                ("filter", "tag.plan:premium"),
                ("filter", "contentId:urn:movie:1"),
            ]),
            NOW,
        )
        .expect("valid");
        let os = &t.filters.clauses[&Dimension::Os];
        assert_eq!(os.include, ["iOS", "Android"]);
        assert!(os.exclude.is_empty());
        assert_eq!(t.filters.clauses[&Dimension::Browser].exclude, ["Safari"]);
        assert_eq!(
            t.filters.clauses[&Dimension::Tag("plan".into())].include,
            ["premium"]
        );
        // Values may contain ':'; the dimension ends at the first one.
        assert_eq!(
            t.filters.clauses[&Dimension::ContentId].include,
            ["urn:movie:1"]
        );

        for (raw, message) in [
            ("os", "Invalid filter 'os': expected dimension:value or !dimension:value"),
            ("os:", "Invalid filter 'os:': value must not be empty"),
            ("country:FR", "Invalid filter 'country:FR': unknown dimension 'country'. Expected 'contentId' | 'browser' | 'os' | 'deviceType' | 'sdk' | 'player' | 'streamId' | 'tag.<name>'"),
            ("tag.:x", "Invalid filter 'tag.:x': unknown dimension 'tag.'. Expected 'contentId' | 'browser' | 'os' | 'deviceType' | 'sdk' | 'player' | 'streamId' | 'tag.<name>'"),
            ("!:x", "Invalid filter '!:x': unknown dimension ''. Expected 'contentId' | 'browser' | 'os' | 'deviceType' | 'sdk' | 'player' | 'streamId' | 'tag.<name>'"),
        ] {
            let e = OverviewQuery::parse(&q(&[("filter", "os:iOS"), ("filter", raw), ("filter", "x")]), NOW)
                .expect_err("bad");
            assert_eq!(body(e), json!({ "errors": { "filter": message } }), "{raw}");
        }
        let long = format!("tag.{}:v", "n".repeat(65));
        assert!(OverviewQuery::parse(&q(&[("filter", &long)]), NOW).is_err());
        let ok = format!("tag.{}:v", "n".repeat(64));
        assert!(OverviewQuery::parse(&q(&[("filter", &ok)]), NOW).is_ok());
    }

    fn view_with(os: &str, content: Option<&str>, src: Option<&str>) -> View {
        let mut v = View::derive("s", &[Event::playback_start(0, None)], &[]).expect("view");
        v.dims = Dims {
            content_id: content.map(str::to_owned),
            src: src.map(str::to_owned),
            user_agent: UserAgent {
                os: os.into(),
                ..UserAgent::unknown()
            },
            ..Dims::default()
        };
        v
    }

    fn filters(raw: &[&str]) -> Filters {
        let mut f = Filters::default();
        for r in raw {
            f.add(r).expect("valid filter");
        }
        f
    }

    #[test]
    fn filter_semantics_same_dimension_either_different_dimensions_all() {
        let streams = StreamIds::new();
        let ios_a = view_with("iOS", Some("a"), None);
        let android_b = view_with("Android", Some("b"), None);
        let windows_none = view_with("Windows", None, None);
        let either = filters(&["os:iOS", "os:Android"]);
        assert!(either.matches(&ios_a, &streams));
        assert!(either.matches(&android_b, &streams));
        assert!(!either.matches(&windows_none, &streams));
        let both = filters(&["os:iOS", "contentId:b"]);
        assert!(!both.matches(&ios_a, &streams));
        assert!(!both.matches(&android_b, &streams));
        let both = filters(&["os:Android", "contentId:b"]);
        assert!(both.matches(&android_b, &streams));
        // Exclusions: each excluded value is out; a view without a value passes them.
        let not = filters(&["!os:iOS", "!contentId:b"]);
        assert!(!not.matches(&ios_a, &streams));
        assert!(!not.matches(&android_b, &streams));
        assert!(not.matches(&windows_none, &streams));
        // An include never matches a missing value.
        assert!(!filters(&["contentId:a"]).matches(&windows_none, &streams));
        // Include and exclude on one dimension.
        let mixed = filters(&["os:iOS", "os:Android", "!os:Android"]);
        assert!(mixed.matches(&ios_a, &streams));
        assert!(!mixed.matches(&android_b, &streams));
        assert!(Filters::default().matches(&windows_none, &streams));
    }

    #[test]
    fn stream_id_is_resolved_from_src_at_query_time() {
        let v = view_with("iOS", None, Some("https://cdn/a.m3u8"));
        let f = filters(&["streamId:st_1"]);
        let mut streams = StreamIds::new();
        assert!(!f.matches(&v, &streams));
        assert!(filters(&["!streamId:st_1"]).matches(&v, &streams));
        // Registered later: matches now.
        streams.insert("https://cdn/a.m3u8".into(), "st_1".into());
        assert!(f.matches(&v, &streams));
        assert_eq!(Dimension::StreamId.value_of(&v, &streams), Some("st_1"));
        // Exact match only.
        let other = view_with("iOS", None, Some("https://cdn/a.m3u8?x=1"));
        assert!(!f.matches(&other, &streams));
    }

    #[test]
    fn dimension_names_round_trip() {
        for name in [
            "contentId",
            "browser",
            "os",
            "deviceType",
            "sdk",
            "player",
            "streamId",
            "tag.plan",
            "tag.a.b",
        ] {
            assert_eq!(Dimension::parse(name).expect(name).name(), name);
        }
        for bad in ["", "tag", "tag.", "Os", "src", "tags.plan"] {
            assert_eq!(Dimension::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn breakdown_by_order_by_and_limit() {
        let e = BreakdownQuery::parse(
            &q(&[
                ("metric", "views"),
                ("by", "country"),
                ("orderBy", "impact"),
            ]),
            NOW,
        )
        .expect_err("bad");
        assert_eq!(
            body(e),
            json!({ "errors": {
                "by": "Invalid enum value. Expected 'contentId' | 'browser' | 'os' | 'deviceType' | 'sdk' | 'player' | 'streamId' | 'tag.<name>', received 'country'",
                "orderBy": "Invalid enum value. Expected 'negativeImpact' | 'views' | 'value', received 'impact'",
            } })
        );
        let b = BreakdownQuery::parse(
            &q(&[
                ("metric", "startupTimeMs"),
                ("by", "tag.plan"),
                ("orderBy", "value"),
                ("limit", "1000"),
                ("measurement", "p95"),
                ("format", "csv"),
            ]),
            NOW,
        )
        .expect("valid");
        assert_eq!(b.by, Dimension::Tag("plan".into()));
        assert_eq!(
            (b.order_by, b.limit, b.measurement, b.format),
            (OrderBy::Value, 1000, Measurement::P95, Format::Csv)
        );
    }

    #[test]
    fn limit_messages() {
        for (raw, message) in [
            ("0", "Number must be greater than or equal to 1"),
            ("-3", "Number must be greater than or equal to 1"),
            ("1001", "Number must be less than or equal to 1000"),
            ("2.5", "Expected integer, received float"),
            ("ten", "Expected number, received nan"),
            ("", "Expected number, received nan"),
            ("inf", "Expected number, received nan"),
            ("0x10", "Expected number, received nan"),
        ] {
            let e = ViewsQuery::parse(&q(&[("limit", raw)]), NOW).expect_err(raw);
            assert_eq!(body(e), json!({ "errors": { "limit": message } }), "{raw}");
            let e = BreakdownQuery::parse(
                &q(&[("metric", "views"), ("by", "os"), ("limit", raw)]),
                NOW,
            )
            .expect_err(raw);
            assert_eq!(body(e), json!({ "errors": { "limit": message } }), "{raw}");
        }
        for (raw, n) in [("1", 1), ("1000", 1000), ("7.0", 7), ("1e2", 100)] {
            assert_eq!(
                ViewsQuery::parse(&q(&[("limit", raw)]), NOW)
                    .expect(raw)
                    .limit,
                n
            );
        }
    }

    #[test]
    fn cursor_round_trips_and_rejects_forgeries() {
        let c = Cursor {
            started_at: 1_714_564_800_123,
            session_id: "sess:with/odd chars é".into(),
        };
        let wire = c.encode();
        assert!(wire
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        assert_eq!(Cursor::decode(&wire), Some(c.clone()));
        let v = ViewsQuery::parse(&q(&[("cursor", &wire)]), NOW).expect("valid");
        assert_eq!(v.cursor, Some(c));
        assert_eq!(
            ViewsQuery::parse(&q(&[("cursor", "")]), NOW)
                .expect("first page")
                .cursor,
            None
        );
        let negative = Cursor {
            started_at: -5,
            session_id: "s".into(),
        };
        assert_eq!(Cursor::decode(&negative.encode()), Some(negative));
        for bad in [
            "!!!",
            "bm9jb2xvbg", // "nocolon"
            "MTIzOg",     // "123:" (no session)
            "eDpz",       // "x:s"
            "KzU6cw",     // "+5:s"
            "MDA3OnM",    // "007:s"
            "MTIzOnM=",   // padded
        ] {
            assert_eq!(Cursor::decode(bad), None, "{bad}");
            let e = ViewsQuery::parse(&q(&[("cursor", bad)]), NOW).expect_err(bad);
            assert_eq!(body(e), json!({ "errors": { "cursor": "Invalid cursor" } }));
        }
    }

    #[test]
    fn format_is_json_or_csv() {
        let e = ViewsQuery::parse(&q(&[("format", "xml")]), NOW).expect_err("bad");
        assert_eq!(
            body(e),
            json!({ "errors": { "format": "Invalid enum value. Expected 'json' | 'csv', received 'xml'" } })
        );
        assert_eq!(
            ViewsQuery::parse(&q(&[("format", "json")]), NOW)
                .expect("ok")
                .format,
            Format::Json
        );
    }

    #[test]
    fn unknown_and_other_routes_parameters_are_ignored() {
        let pairs = q(&[
            ("utm_source", "x"),
            ("granularity", "fortnight"),
            ("metric", "nope"),
            ("limit", "-1"),
            ("format", "pdf"),
            ("cursor", "???"),
        ]);
        // None of these are overview or timeline parameters (timeline has granularity).
        OverviewQuery::parse(&pairs, NOW).expect("overview ignores them");
        let e = TimelineQuery::parse(&pairs, NOW).expect_err("timeline reads granularity");
        assert_eq!(
            body(e)
                .as_object()
                .map(|o| o["errors"].as_object().map(|e| e.len())),
            Some(Some(1))
        );
    }

    #[test]
    fn all_errors_are_reported_at_once() {
        let e = BreakdownQuery::parse(
            &q(&[
                ("from", "x"),
                ("filter", "bad"),
                ("measurement", "max"),
                ("limit", "0"),
                ("format", "xls"),
            ]),
            NOW,
        )
        .expect_err("bad");
        let keys: Vec<String> = e.errors.keys().cloned().collect();
        assert_eq!(
            keys,
            [
                "by",
                "filter",
                "format",
                "from",
                "limit",
                "measurement",
                "metric"
            ]
        );
        assert_eq!(e.to_string().split("; ").count(), 7);
    }

    #[test]
    fn typed_constructors_equal_what_the_query_string_parses_to() {
        let range = TimeRange {
            from_ms: NOW - 6 * HOUR_MS,
            to_ms: NOW,
        };
        let (from, to) = (ts(range.from_ms), ts(range.to_ms));
        let raw = ["os:iOS", "!tag.plan:free"];
        let filters = Filters::parse(raw).expect("valid");
        let with = |extra: &[(&str, &str)]| {
            let mut pairs = q(&[("from", &from), ("to", &to)]);
            pairs.extend(raw.iter().map(|f| ("filter".to_owned(), (*f).to_owned())));
            pairs.extend(q(extra));
            pairs
        };
        assert_eq!(
            OverviewQuery::parse(&with(&[]), NOW),
            Ok(OverviewQuery::new(range, filters.clone()))
        );
        assert_eq!(
            TimeseriesQuery::parse(&with(&[("metric", "rebufferPct")]), NOW),
            Ok(TimeseriesQuery::new(
                range,
                filters.clone(),
                Metric::RebufferPct
            ))
        );
        assert_eq!(
            BreakdownQuery::parse(&with(&[("metric", "views"), ("by", "tag.plan")]), NOW),
            Ok(BreakdownQuery::new(
                range,
                filters.clone(),
                Metric::Views,
                Dimension::Tag("plan".into())
            ))
        );
        assert_eq!(
            ViewsQuery::parse(&with(&[]), NOW),
            Ok(ViewsQuery::new(range, filters.clone()))
        );
        assert_eq!(
            TimelineQuery::parse(&with(&[]), NOW),
            Ok(TimelineQuery::new(range, filters, Granularity::Minute))
        );
    }

    #[test]
    fn filters_parse_gives_the_message_a_route_gives() {
        let bad = ["os:iOS", "nope:x", "os:"];
        let route = OverviewQuery::parse(
            &bad.iter()
                .map(|f| ("filter".to_owned(), (*f).to_owned()))
                .collect::<Vec<_>>(),
            NOW,
        )
        .expect_err("invalid");
        assert_eq!(
            Filters::parse(bad).err().as_ref(),
            route.errors.get("filter")
        );
        assert_eq!(Filters::parse([]), Ok(Filters::default()));
    }
}
