//! `/app/streams` (search, status, 24-hour strip, uptime, latency; add, delete) and
//! `/app/streams/{id}` (latency chart, probes and viewers on one time axis, hour by hour,
//! the stream's agent feed; rename, delete).

use std::sync::Arc;

use analytics::{Filters, Granularity, TimeRange, TimelineQuery};
use askama::Template;
use axum::extract::State;
use axum::response::Response;
use axum::Extension;

use super::fmt::{self, When};
use super::{render, Choice, FeedRow, Frame, PageError, Section};
use crate::http::extract::{RowId, SessionUser};
use crate::http::query::QueryPairs;
use crate::http::AppState;
use crate::probes::agent::{self, FeedError, FeedQuery};
use crate::probes::timeline;
use crate::states::StreamStatus;
use crate::streams::summary::{strip_start, HourCell, StreamFilter, STRIP_HOURS};
use crate::streams::uptime::HOUR_MS;
use crate::streams::Stream;
use crate::time::now_ms;

/// Streams per page of the list.
const PAGE_SIZE: i64 = 50;
/// Feed items on a stream's page.
const STREAM_FEED: i64 = 20;

/// A status word and its badge class.
pub struct Badge {
    pub word: &'static str,
    pub class: &'static str,
}

impl Badge {
    pub fn of_status(s: StreamStatus) -> Self {
        match s {
            StreamStatus::Watching => Badge {
                word: "healthy",
                class: "badge-healthy",
            },
            StreamStatus::Degraded => Badge {
                word: "degraded",
                class: "badge-degraded",
            },
            StreamStatus::Failing => Badge {
                word: "failing",
                class: "badge-failing",
            },
        }
    }
}

/// One hour of a strip.
pub struct Cell {
    pub class: &'static str,
    pub label: String,
}

/// A stream as a row of the list (and of the overview's "needs attention").
pub struct StreamRow {
    pub id: String,
    pub name: String,
    pub source_url: String,
    pub badge: Badge,
    pub uptime: String,
    pub latency: String,
    pub last_action: String,
    pub last_checked: Option<When>,
    pub strip: Vec<Cell>,
}

impl StreamRow {
    /// Rows for `streams` with their strips and latest latencies (two indexed reads).
    pub async fn build(
        state: &AppState,
        streams: Vec<Stream>,
        now: i64,
    ) -> Result<Vec<StreamRow>, PageError> {
        let ids: Vec<&str> = streams.iter().map(|s| s.id.as_str()).collect();
        let (strips, latencies) = tokio::try_join!(
            state.streams.strips(&ids, now),
            state.streams.last_latencies(&ids)
        )?;
        let start = strip_start(now);
        Ok(streams
            .into_iter()
            .map(|s| {
                let strip = strips
                    .get(&s.id)
                    .map(|cells| strip_cells(cells, start))
                    .unwrap_or_default();
                StreamRow {
                    // Before its first probe a stream is nothing yet, not "healthy".
                    badge: if s.last_checked_at.is_none() {
                        Badge {
                            word: "not probed yet",
                            class: "badge-neutral",
                        }
                    } else {
                        Badge::of_status(s.status)
                    },
                    uptime: fmt::pct(Some(s.uptime_pct)),
                    latency: fmt::ms(latencies.get(&s.id).map(|&ms| ms as f64)),
                    last_checked: s.last_checked_at.map(When::at),
                    strip,
                    id: s.id,
                    name: s.name,
                    source_url: s.source_url,
                    last_action: s.last_action,
                }
            })
            .collect())
    }
}

fn strip_cells(cells: &[HourCell], start: i64) -> Vec<Cell> {
    cells
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let hour = When::at(start + i as i64 * HOUR_MS);
            let word = match c {
                HourCell::None => "no probes",
                HourCell::Healthy => "healthy",
                HourCell::Degraded => "partly down",
                HourCell::Failing => "down",
            };
            Cell {
                class: match c {
                    HourCell::None => "cell-none",
                    HourCell::Healthy => "cell-healthy",
                    HourCell::Degraded => "cell-degraded",
                    HourCell::Failing => "cell-failing",
                },
                label: format!("{}: {word}", hour.utc),
            }
        })
        .collect()
}

#[derive(Template)]
#[template(path = "streams.html")]
struct StreamsPage {
    frame: Frame,
    text: String,
    statuses: Vec<Choice>,
    rows: Vec<StreamRow>,
    total: String,
    filtered: bool,
    showing: String,
    prev: Option<String>,
    next: Option<String>,
    strip_hours: i64,
}

/// `GET /app/streams?q=…&status=…&page=…`.
pub async fn list(
    State(state): State<Arc<AppState>>,
    Extension(user): Extension<SessionUser>,
    q: QueryPairs,
) -> Result<Response, PageError> {
    let text = q.last("q").map(str::trim).unwrap_or_default().to_owned();
    let word = q.last("status").unwrap_or_default();
    let status = status_of_word(word);
    // `down`: not playable, whatever the status string (the overview's Down tile links here).
    let down = word == "down";
    let page = q
        .last("page")
        .and_then(|p| p.parse::<i64>().ok())
        .filter(|p| (1..=100_000).contains(p))
        .unwrap_or(1);
    let filter = StreamFilter {
        text: (!text.is_empty()).then(|| text.clone()),
        status,
        down,
        limit: PAGE_SIZE,
        offset: (page - 1) * PAGE_SIZE,
    };
    let now = now_ms();
    let (streams, total) = state.streams.search(&filter).await?;
    let shown = streams.len() as i64;
    let rows = StreamRow::build(&state, streams, now).await?;
    let link = |p: i64| {
        let mut href = format!("/app/streams?page={p}");
        if !text.is_empty() {
            href.push_str(&format!("&q={}", fmt::q(&text)));
        }
        if let Some(s) = status {
            href.push_str(&format!("&status={}", Badge::of_status(s).word));
        }
        if down {
            href.push_str("&status=down");
        }
        href
    };
    let first = filter.offset + 1;
    Ok(render(&StreamsPage {
        frame: Frame::new(&user, Section::Streams),
        statuses: [
            ("healthy", "healthy"),
            ("degraded", "degraded"),
            ("failing", "failing"),
            ("down", "down (not playable)"),
        ]
        .into_iter()
        .map(|(w, label)| Choice {
            value: w.to_owned(),
            label: label.to_owned(),
            selected: word == w && (down || status.is_some()),
        })
        .collect(),
        filtered: filter.text.is_some() || status.is_some() || down,
        showing: if shown == 0 {
            String::new()
        } else {
            format!(
                "{}–{} of {}",
                fmt::int(first),
                fmt::int(first + shown - 1),
                fmt::int(total)
            )
        },
        total: fmt::int(total),
        prev: (page > 1).then(|| link(page - 1)),
        next: (filter.offset + shown < total).then(|| link(page + 1)),
        rows,
        text,
        strip_hours: STRIP_HOURS,
    }))
}

fn status_of_word(w: &str) -> Option<StreamStatus> {
    match w {
        "healthy" => Some(StreamStatus::Watching),
        "degraded" => Some(StreamStatus::Degraded),
        "failing" => Some(StreamStatus::Failing),
        _ => None,
    }
}

/// One hour of the stream page's table: its probes and its viewers.
pub struct HourRow {
    pub hour: When,
    pub healthy: String,
    pub degraded: String,
    pub failing: String,
    pub latency: String,
    pub views: String,
    pub failures: String,
    pub rebuffering: String,
    pub startup: String,
}

#[derive(Template)]
#[template(path = "stream.html")]
struct StreamPage {
    frame: Frame,
    row: StreamRow,
    target_region: String,
    created: When,
    hours: Vec<HourRow>,
    viewers_note: Option<&'static str>,
    feed: Vec<FeedRow>,
    timeline_src: String,
    latency_src: String,
}

/// `GET /app/streams/{id}`.
pub async fn detail(
    State(state): State<Arc<AppState>>,
    Extension(user): Extension<SessionUser>,
    id: Result<RowId, crate::http::error::ApiError>,
) -> Result<Response, PageError> {
    let RowId(id) = id.map_err(|_| PageError::NotFound)?;
    let stream = state.streams.get(&id).await?;
    let now = now_ms();
    let range = TimeRange {
        from_ms: now - STRIP_HOURS * HOUR_MS,
        to_ms: now,
    };
    let query = TimelineQuery::new(range, Filters::default(), Granularity::Hour);
    let (probes, viewers) = tokio::join!(
        timeline::buckets(&state.db, &stream.id, range, Granularity::Hour),
        state.analytics.timeline_viewers(
            &user.0.user.id,
            &stream.source_url,
            &query,
            &state.streams
        )
    );
    let probes = probes?;
    // Viewers come from the telemetry store: when it is down the probes still show.
    let (viewers, viewers_note) = match viewers {
        Ok(v) => (Some(v), None),
        Err(e) => {
            tracing::warn!(error = %e, "stream page: viewers unavailable");
            (
                None,
                Some("Viewer numbers are unavailable: the telemetry store did not answer."),
            )
        }
    };
    // Hours with probes or views, newest first: empty hours are in the chart, not the table.
    let mut hours: Vec<HourRow> = probes
        .into_iter()
        .enumerate()
        .filter_map(|(i, (t, p))| {
            let v = viewers.as_ref().and_then(|v| v.get(i)).map(|v| v.viewers);
            let empty = p.healthy + p.degraded + p.failing == 0 && v.is_none_or(|v| v.views == 0);
            (!empty).then_some((t, p, v))
        })
        .map(|(t, p, v)| HourRow {
            hour: When::at(t),
            healthy: fmt::int(p.healthy),
            degraded: fmt::int(p.degraded),
            failing: fmt::int(p.failing),
            latency: fmt::ms(p.p50_latency_ms),
            views: v.map_or_else(|| "—".into(), |v| fmt::int(v.views)),
            failures: fmt::pct(v.and_then(|v| v.playback_failure_pct)),
            rebuffering: fmt::pct(v.and_then(|v| v.rebuffer_pct)),
            startup: fmt::ms(v.and_then(|v| v.startup_time_ms)),
        })
        .collect();
    hours.reverse();

    let feed = match agent::feed(
        &state.db,
        state.slow_ms,
        &FeedQuery {
            stream_id: Some(stream.id.clone()),
            limit: STREAM_FEED,
            ..FeedQuery::default()
        },
    )
    .await
    {
        Ok(items) => items.into_iter().map(FeedRow::from).collect(),
        Err(FeedError::UnknownStream) => return Err(PageError::NotFound),
        Err(FeedError::Db(e)) => return Err(e.into()),
    };
    let target_region = stream.target_region.clone();
    let created = When::at(stream.created_at);
    let id = stream.id.clone();
    let row = StreamRow::build(&state, vec![stream], now)
        .await?
        .pop()
        .ok_or(PageError::NotFound)?;
    Ok(render(&StreamPage {
        frame: Frame::new(&user, Section::Streams),
        timeline_src: format!("/api/v1/streams/{id}/timeline?granularity=hour"),
        latency_src: format!("/api/v1/agents?streamId={id}&limit=500"),
        row,
        target_region,
        created,
        hours,
        viewers_note,
        feed,
    }))
}
