//! `/app`: how the streams are doing, the streams that need attention, and the viewers'
//! quality of experience over the last 24 hours.

use std::sync::Arc;

use analytics::{Filters, OverviewQuery, TimeRange};
use askama::Template;
use axum::extract::State;
use axum::response::Response;
use axum::Extension;

use super::fmt::{self, When};
use super::streams::StreamRow;
use super::{render, Frame, PageError, Section};
use crate::http::extract::SessionUser;
use crate::http::AppState;
use crate::states::StreamStatus;
use crate::streams::summary::StreamFilter;
use crate::time::now_ms;

const DAY_MS: i64 = 24 * 3600 * 1000;
/// Streams listed under "needs attention", down first.
const ATTENTION_MAX: i64 = 10;

/// One number tile; `chart` is the timeseries its sparkline draws.
pub struct Tile {
    pub label: &'static str,
    pub value: String,
    pub note: String,
    pub chart: Option<String>,
}

#[derive(Template)]
#[template(path = "overview.html")]
struct OverviewPage {
    frame: Frame,
    now: When,
    healthy: String,
    degraded: String,
    down: String,
    /// "3 not probed yet", or empty.
    unprobed: String,
    total: i64,
    attention: Vec<StreamRow>,
    /// `None` when the telemetry store could not answer (shown, not a failed page).
    tiles: Option<Vec<Tile>>,
}

/// The QoE tiles of `[from, to)` for `owner`, with sparklines of the same range by hour.
pub async fn qoe_tiles(
    state: &AppState,
    owner: &str,
    range: TimeRange,
    filter_query: &str,
    filters: &Filters,
) -> Result<Vec<Tile>, PageError> {
    let q = OverviewQuery::new(range, filters.clone());
    let o = state
        .analytics
        .overview(owner, &q, &state.streams)
        .await
        .map_err(PageError::internal)?;
    let m = &o.metrics;
    let spark = |metric: &str| {
        Some(format!(
            "/api/v1/qoe/timeseries?metric={metric}&from={}&to={}{filter_query}",
            fmt::q(&crate::time::iso_ms(range.from_ms)),
            fmt::q(&crate::time::iso_ms(range.to_ms)),
        ))
    };
    Ok(vec![
        Tile {
            label: "Views",
            value: fmt::int(o.views),
            note: String::new(),
            chart: spark("views"),
        },
        Tile {
            label: "Playback failures",
            value: fmt::pct(m.playback_failure_pct),
            note: format!("startup failures {}", fmt::pct(m.startup_failure_pct)),
            chart: spark("playbackFailurePct"),
        },
        Tile {
            label: "Rebuffering",
            value: fmt::pct(m.rebuffer_pct),
            note: format!("{} stalls per minute", fmt::opt(m.rebuffer_frequency, 2)),
            chart: spark("rebufferPct"),
        },
        Tile {
            label: "Startup time p50",
            value: fmt::ms(m.startup_time_ms.p50),
            note: format!("p95 {}", fmt::ms(m.startup_time_ms.p95)),
            chart: spark("startupTimeMs"),
        },
        Tile {
            label: "Exits before start",
            value: fmt::pct(m.exit_before_start_pct),
            note: String::new(),
            chart: None,
        },
        Tile {
            label: "Watch time",
            value: fmt::duration(m.watch_time_ms),
            note: format!("average bitrate {} kb/s", fmt::opt(m.avg_bitrate_kbps, 0)),
            chart: None,
        },
    ])
}

/// `GET /app`.
pub async fn page(
    State(state): State<Arc<AppState>>,
    Extension(user): Extension<SessionUser>,
) -> Result<Response, PageError> {
    let now = now_ms();
    let counts = state.streams.status_counts().await?;
    // Down (not playable, whatever the status string) first, then the slow ones.
    let mut attention: Vec<crate::streams::Stream> = Vec::new();
    for filter in [
        StreamFilter {
            down: true,
            ..StreamFilter::default()
        },
        StreamFilter {
            status: Some(StreamStatus::Degraded),
            ..StreamFilter::default()
        },
    ] {
        let (streams, _) = state
            .streams
            .search(&StreamFilter {
                limit: ATTENTION_MAX,
                ..filter
            })
            .await?;
        for s in streams {
            if !attention.iter().any(|a| a.id == s.id) {
                attention.push(s);
            }
        }
    }
    attention.truncate(ATTENTION_MAX as usize);
    let attention = StreamRow::build(&state, attention, now).await?;

    // A telemetry store that is down costs the tiles, not the page.
    let range = TimeRange {
        from_ms: now - DAY_MS,
        to_ms: now,
    };
    let tiles = match qoe_tiles(&state, &user.0.user.id, range, "", &Filters::default()).await {
        Ok(t) => Some(t),
        Err(PageError::Internal(cause)) => {
            tracing::warn!(%cause, "overview: QoE tiles unavailable");
            None
        }
        Err(e) => return Err(e),
    };
    Ok(render(&OverviewPage {
        frame: Frame::new(&user, Section::Overview),
        now: When::at(now),
        healthy: fmt::int(counts.healthy),
        degraded: fmt::int(counts.degraded),
        down: fmt::int(counts.down),
        unprobed: match counts.unprobed {
            0 => String::new(),
            n => format!("{} not probed yet", fmt::int(n)),
        },
        total: counts.total(),
        attention,
        tiles,
    }))
}
