//! `/app/qoe`: tiles, one time series per metric, a breakdown by any dimension with drill-down,
//! and CSV downloads. The time range and every filter are in the URL (share the address to
//! share the view); the page parses them exactly as the JSON routes do.

use std::sync::Arc;

use analytics::query::Format;
use analytics::{BreakdownQuery, Dimension, Filters, Metric, TimeRange};
use askama::Template;
use axum::extract::State;
use axum::response::Response;
use axum::Extension;

use super::fmt;
use super::overview::{qoe_tiles, Tile};
use super::{render, Choice, Frame, PageError, Section};
use crate::http::extract::SessionUser;
use crate::http::query::QueryPairs;
use crate::http::AppState;
use crate::time::{iso_ms, now_ms};

/// The ranges offered, as `(param, label, ms)`; the first that matches `range` is used.
pub const RANGES: [(&str, &str, i64); 5] = [
    ("1h", "Last hour", 3_600_000),
    ("6h", "Last 6 hours", 6 * 3_600_000),
    ("24h", "Last 24 hours", 24 * 3_600_000),
    ("7d", "Last 7 days", 7 * 24 * 3_600_000),
    ("30d", "Last 30 days", 30 * 24 * 3_600_000),
];
const DEFAULT_RANGE: &str = "24h";

/// Dimensions offered in the breakdown menu (tags: type `tag.<name>` in the URL).
const DIMENSIONS: [(&str, &str); 7] = [
    ("contentId", "Content"),
    ("streamId", "Stream"),
    ("browser", "Browser"),
    ("os", "Operating system"),
    ("deviceType", "Device type"),
    ("player", "Player"),
    ("sdk", "SDK"),
];

/// The metrics charted, in order, with their labels.
const CHARTS: [(Metric, &str); 8] = [
    (Metric::Views, "Views"),
    (Metric::PlaybackFailurePct, "Playback failures (%)"),
    (Metric::StartupFailurePct, "Startup failures (%)"),
    (Metric::StartupTimeMs, "Startup time p50 (ms)"),
    (Metric::RebufferPct, "Rebuffering (%)"),
    (Metric::RebufferFrequency, "Stalls per minute"),
    (Metric::AvgBitrateKbps, "Average bitrate (kb/s)"),
    (Metric::ExitBeforeStartPct, "Exits before start (%)"),
];

/// A metric as an operator calls it, with its unit (the breakdown's select and column).
pub fn metric_name(m: Metric) -> &'static str {
    match m {
        Metric::Views => "Views",
        Metric::PlaybackFailurePct => "Playback failures (%)",
        Metric::StartupFailurePct => "Startup failures (%)",
        Metric::ExitBeforeStartPct => "Exits before start (%)",
        Metric::StartupTimeMs => "Startup time (ms)",
        Metric::RebufferPct => "Rebuffering (%)",
        Metric::RebufferFrequency => "Stalls per minute",
        Metric::WatchTimeMs => "Watch time",
        Metric::AvgBitrateKbps => "Average bitrate (kb/s)",
    }
}

/// The range of the page and the query-string tail (`&filter=…`) every link keeps.
pub struct Selection {
    pub range_param: String,
    pub range: TimeRange,
    pub filter_pairs: Vec<(String, String)>,
    /// `&filter=…&filter=…`, URL-encoded.
    pub filter_query: String,
}

impl Selection {
    /// Reads `range` (default 24 h, ending now, to the minute) and every `filter`.
    pub fn from_query(q: &QueryPairs, now: i64) -> Self {
        let param = q.last("range").unwrap_or(DEFAULT_RANGE);
        let (range_param, len) = RANGES
            .iter()
            .find(|(p, _, _)| *p == param)
            .map(|(p, _, ms)| ((*p).to_owned(), *ms))
            .unwrap_or((DEFAULT_RANGE.to_owned(), 24 * 3_600_000));
        // To the minute: the charts, tiles and tables of one page agree, and a reload
        // within the minute draws the same buckets.
        let to = now - now.rem_euclid(60_000) + 60_000;
        let filter_pairs: Vec<(String, String)> = q
            .all("filter")
            .filter(|f| !f.is_empty())
            .map(|f| ("filter".to_owned(), f.to_owned()))
            .collect();
        let filter_query = filter_pairs
            .iter()
            .map(|(k, v)| format!("&{k}={}", fmt::q(v)))
            .collect();
        Selection {
            range_param,
            range: TimeRange {
                from_ms: to - len,
                to_ms: to,
            },
            filter_pairs,
            filter_query,
        }
    }

    /// `from=…&to=…` of the range.
    pub fn range_query(&self) -> String {
        format!(
            "from={}&to={}",
            fmt::q(&iso_ms(self.range.from_ms)),
            fmt::q(&iso_ms(self.range.to_ms))
        )
    }

    /// The page's `filter`s, parsed as the QoE routes parse them; the message of the first
    /// bad one otherwise (`filter: …`, as the page lists it).
    pub fn filters(&self) -> Result<Filters, String> {
        Filters::parse(self.filter_pairs.iter().map(|(_, f)| f.as_str()))
            .map_err(|m| format!("filter: {m}"))
    }

    pub fn range_choices(&self) -> Vec<Choice> {
        RANGES
            .iter()
            .map(|(p, label, _)| Choice {
                value: (*p).to_owned(),
                label: (*label).to_owned(),
                selected: *p == self.range_param,
            })
            .collect()
    }

    /// The active filters, each with the link that removes it.
    pub fn active_filters(&self, page: &str) -> Vec<ActiveFilter> {
        self.filter_pairs
            .iter()
            .enumerate()
            .map(|(i, (_, f))| {
                let rest: String = self
                    .filter_pairs
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != i)
                    .map(|(_, (k, v))| format!("&{k}={}", fmt::q(v)))
                    .collect();
                ActiveFilter {
                    text: f.clone(),
                    remove: format!("{page}?range={}{rest}", self.range_param),
                }
            })
            .collect()
    }
}

/// A filter in force and how to drop it.
pub struct ActiveFilter {
    pub text: String,
    pub remove: String,
}

/// A chart of one metric.
pub struct Chart {
    pub label: &'static str,
    pub src: String,
    pub csv: String,
}

/// A breakdown row.
pub struct BreakdownRow {
    pub key: String,
    pub drill: Option<String>,
    pub value: String,
    pub views: String,
    pub impact: String,
}

#[derive(Template)]
#[template(path = "qoe.html")]
struct QoePage {
    frame: Frame,
    ranges: Vec<Choice>,
    range_param: String,
    filters: Vec<ActiveFilter>,
    filter_inputs: Vec<(String, String)>,
    errors: Vec<String>,
    tiles: Option<Vec<Tile>>,
    charts: Vec<Chart>,
    metrics: Vec<Choice>,
    dimensions: Vec<Choice>,
    by_label: String,
    /// The breakdown metric's wire name (`playbackFailurePct`), for the form.
    metric_label: String,
    /// The same, as an operator calls it ("Playback failures (%)").
    metric_name: &'static str,
    breakdown: Vec<BreakdownRow>,
    breakdown_csv: String,
    views_link: String,
}

impl QoePage {
    /// The `by` parameter (the dimension's wire name) of the current breakdown.
    fn by_label_value(&self) -> &str {
        self.dimensions
            .iter()
            .find(|c| c.selected)
            .map_or("contentId", |c| c.value.as_str())
    }
}

/// A metric value as the breakdown prints it.
fn value_text(metric: Metric, v: Option<f64>) -> String {
    match metric {
        Metric::Views => fmt::opt(v, 0),
        Metric::StartupTimeMs => fmt::ms(v),
        Metric::WatchTimeMs => v.map_or_else(|| "—".into(), |v| fmt::duration(v as i64)),
        Metric::RebufferFrequency => fmt::opt(v, 2),
        Metric::AvgBitrateKbps => {
            v.map_or_else(|| "—".into(), |v| format!("{} kb/s", fmt::num(v, 0)))
        }
        Metric::PlaybackFailurePct
        | Metric::StartupFailurePct
        | Metric::ExitBeforeStartPct
        | Metric::RebufferPct => fmt::pct(v),
    }
}

/// `GET /app/qoe?range=…&filter=…&metric=…&by=…`.
pub async fn page(
    State(state): State<Arc<AppState>>,
    Extension(user): Extension<SessionUser>,
    q: QueryPairs,
) -> Result<Response, PageError> {
    let sel = Selection::from_query(&q, now_ms());
    let metric = q
        .last("metric")
        .and_then(Metric::from_id)
        .unwrap_or(Metric::PlaybackFailurePct);
    let by = q
        .last("by")
        .and_then(Dimension::parse)
        .unwrap_or(Dimension::ContentId);
    let by_name = by.name();
    let mut errors = Vec::new();

    let (tiles, breakdown) = match sel.filters() {
        Err(e) => {
            errors.push(e);
            (None, Vec::new())
        }
        Ok(filters) => {
            let bq = BreakdownQuery::new(sel.range, filters, metric, by);
            let (tiles, body) = tokio::join!(
                qoe_tiles(
                    &state,
                    &user.0.user.id,
                    sel.range,
                    &sel.filter_query,
                    &bq.filters
                ),
                state
                    .analytics
                    .breakdown(&user.0.user.id, &bq, &state.streams)
            );
            let tiles = match tiles {
                Ok(t) => Some(t),
                Err(e) => {
                    tracing::warn!(?e, "qoe page: tiles unavailable");
                    errors.push("The telemetry store did not answer; try again shortly.".into());
                    None
                }
            };
            let rows = match body {
                Ok(b) => b
                    .items
                    .into_iter()
                    .map(|i| BreakdownRow {
                        drill: i.key.as_ref().map(|k| {
                            format!(
                                "/app/qoe?range={}{}&filter={}&metric={}&by={}",
                                sel.range_param,
                                sel.filter_query,
                                fmt::q(&format!("{by_name}:{k}")),
                                metric.as_str(),
                                fmt::q(&by_name),
                            )
                        }),
                        key: i.key.unwrap_or_else(|| "(none)".into()),
                        value: value_text(metric, i.value),
                        views: fmt::int(i.views),
                        impact: fmt::num(i.negative_impact, 4),
                    })
                    .collect(),
                Err(e) => {
                    tracing::warn!(error = %e, "qoe page: breakdown unavailable");
                    Vec::new()
                }
            };
            (tiles, rows)
        }
    };

    let range_query = sel.range_query();
    let charts = CHARTS
        .iter()
        .map(|(m, label)| {
            let src = format!(
                "/api/v1/qoe/timeseries?metric={}&{range_query}{}",
                m.as_str(),
                sel.filter_query
            );
            Chart {
                label,
                csv: format!("{src}&format={}", Format::Csv.as_str()),
                src,
            }
        })
        .collect();
    let mut dimensions: Vec<Choice> = DIMENSIONS
        .iter()
        .map(|(v, l)| Choice {
            value: (*v).to_owned(),
            label: (*l).to_owned(),
            selected: *v == by_name,
        })
        .collect();
    if !DIMENSIONS.iter().any(|(v, _)| *v == by_name) {
        dimensions.push(Choice {
            value: by_name.clone(),
            label: by_name.clone(),
            selected: true,
        });
    }
    Ok(render(&QoePage {
        frame: Frame::new(&user, Section::Qoe),
        ranges: sel.range_choices(),
        range_param: sel.range_param.clone(),
        filters: sel.active_filters("/app/qoe"),
        filter_inputs: sel.filter_pairs.clone(),
        errors,
        tiles,
        charts,
        metrics: Metric::ALL
            .iter()
            .map(|m| Choice {
                value: m.as_str().to_owned(),
                label: metric_name(*m).to_owned(),
                selected: *m == metric,
            })
            .collect(),
        by_label: DIMENSIONS
            .iter()
            .find(|(v, _)| *v == by_name)
            .map_or(by_name.clone(), |(_, l)| (*l).to_owned()),
        metric_label: metric.as_str().to_owned(),
        metric_name: metric_name(metric),
        breakdown,
        breakdown_csv: format!(
            "/api/v1/qoe/breakdown?metric={}&by={}&{range_query}{}&limit=1000&format=csv",
            metric.as_str(),
            fmt::q(&by_name),
            sel.filter_query
        ),
        views_link: format!("/app/views?range={}{}", sel.range_param, sel.filter_query),
        dimensions,
    }))
}
