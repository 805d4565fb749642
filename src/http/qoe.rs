//! The QoE routes of analytics.md §4: overview, timeseries, breakdown and views of the
//! caller's own telemetry, and a stream's probes and viewers on one timeline. Each parses
//! its query with the `analytics` crate (every 400 has the contract's body), resolves
//! `streamId`s from the registered streams, and asks `analytics::Store` one question.

use std::sync::Arc;

use analytics::query::Format;
use analytics::response::{BreakdownBody, OverviewBody, TimeseriesBody, Viewers, ViewsBody};
use analytics::{
    BreakdownQuery, OverviewQuery, QueryErrors, TimelineQuery, TimeseriesQuery, ViewsQuery,
};
use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Serialize;
use utoipa::ToSchema;

use super::error::{ApiError, ErrorBody, FieldErrorsBody, StoreUnavailable};
use super::extract::{RowId, SessionUser};
use super::query::QueryPairs;
use super::AppState;
use crate::probes::timeline::{self, ProbeBucket};
use crate::time::{now_ms, Timestamp};

/// A query's parser: the query string's pairs and the time now.
type Parser<T> = fn(&[(String, String)], i64) -> Result<T, QueryErrors>;

/// Parses with `parse`, mapping its errors to the 400 `{ errors }` body.
fn parse<T>(pairs: &QueryPairs, parse: Parser<T>) -> Result<T, ApiError> {
    parse(&pairs.0, now_ms()).map_err(|e| ApiError::Validation(e.errors))
}

fn store_failed(e: analytics::AnalyticsError) -> ApiError {
    ApiError::internal(e)
}

/// A `text/csv` answer, offered as a download named `file`.
fn csv(file: &'static str, body: String) -> Response {
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/csv; charset=utf-8"),
            ),
            (header::CONTENT_DISPOSITION, HeaderValue::from_static(file)),
        ],
        body,
    )
        .into_response()
}

/// QoE of the caller's views that started in `[from, to)`.
#[utoipa::path(get, path = "/api/v1/qoe/overview", operation_id = "qoeOverview", tag = "qoe",
    params(
        ("from" = Option<String>, Query, description = "Range start (default: `to` − 24 h)", format = DateTime),
        ("to" = Option<String>, Query, description = "Range end, exclusive (default: now)", format = DateTime),
        ("filter" = Option<Vec<String>>, Query, explode = true, description = "`dim:value` or `!dim:value`; repeatable"),
    ),
    responses(
        (status = 200, body = OverviewBody),
        (status = 400, description = "Bad parameter", body = FieldErrorsBody),
        (status = 401, description = "No valid session", body = ErrorBody),
        (status = 500, response = StoreUnavailable),
    ),
    security(("session" = [])))]
pub async fn overview(
    State(state): State<Arc<AppState>>,
    Extension(SessionUser(auth)): Extension<SessionUser>,
    pairs: QueryPairs,
) -> Result<Json<OverviewBody>, ApiError> {
    let q = parse(&pairs, OverviewQuery::parse)?;
    let body = state
        .analytics
        .overview(&auth.user.id, &q, &state.streams)
        .await
        .map_err(store_failed)?;
    Ok(Json(body))
}

/// One metric per UTC-aligned bucket, every bucket of the range, oldest first.
#[utoipa::path(get, path = "/api/v1/qoe/timeseries", operation_id = "qoeTimeseries", tag = "qoe",
    params(
        ("metric" = String, Query, description = "A metric of analytics.md §3"),
        ("granularity" = Option<String>, Query, description = "`minute`, `hour` or `day` (default by range; at most 1,500 buckets)"),
        ("measurement" = Option<String>, Query, description = "For `startupTimeMs`: `p50` (default), `p95` or `avg`"),
        ("from" = Option<String>, Query, format = DateTime),
        ("to" = Option<String>, Query, format = DateTime),
        ("filter" = Option<Vec<String>>, Query, explode = true),
        ("format" = Option<String>, Query, description = "`json` (default) or `csv`"),
    ),
    responses(
        (status = 200, description = "The answer; with `format=csv`, the same as CSV (a header row, one row per item)", content((TimeseriesBody = "application/json"), (String = "text/csv"))),
        (status = 400, description = "Bad parameter", body = FieldErrorsBody),
        (status = 401, description = "No valid session", body = ErrorBody),
        (status = 500, response = StoreUnavailable),
    ),
    security(("session" = [])))]
pub async fn timeseries(
    State(state): State<Arc<AppState>>,
    Extension(SessionUser(auth)): Extension<SessionUser>,
    pairs: QueryPairs,
) -> Result<Response, ApiError> {
    let q = parse(&pairs, TimeseriesQuery::parse)?;
    let body = state
        .analytics
        .timeseries(&auth.user.id, &q, &state.streams)
        .await
        .map_err(store_failed)?;
    Ok(match q.format {
        Format::Json => Json(body).into_response(),
        Format::Csv => csv("attachment; filename=\"qoe-timeseries.csv\"", body.to_csv()),
    })
}

/// One metric per value of a dimension, with each value's share of the problem.
#[utoipa::path(get, path = "/api/v1/qoe/breakdown", operation_id = "qoeBreakdown", tag = "qoe",
    params(
        ("metric" = String, Query, description = "A metric of analytics.md §3"),
        ("by" = String, Query, description = "A dimension: `contentId`, `browser`, `os`, `deviceType`, `sdk`, `player`, `streamId` or `tag.<name>`"),
        ("orderBy" = Option<String>, Query, description = "`negativeImpact` (default), `views` or `value`"),
        ("limit" = Option<i64>, Query, minimum = 1, maximum = 1000, description = "Default 25"),
        ("measurement" = Option<String>, Query),
        ("from" = Option<String>, Query, format = DateTime),
        ("to" = Option<String>, Query, format = DateTime),
        ("filter" = Option<Vec<String>>, Query, explode = true),
        ("format" = Option<String>, Query, description = "`json` (default) or `csv`"),
    ),
    responses(
        (status = 200, description = "The answer; with `format=csv`, the same as CSV (a header row, one row per item)", content((BreakdownBody = "application/json"), (String = "text/csv"))),
        (status = 400, description = "Bad parameter", body = FieldErrorsBody),
        (status = 401, description = "No valid session", body = ErrorBody),
        (status = 500, response = StoreUnavailable),
    ),
    security(("session" = [])))]
pub async fn breakdown(
    State(state): State<Arc<AppState>>,
    Extension(SessionUser(auth)): Extension<SessionUser>,
    pairs: QueryPairs,
) -> Result<Response, ApiError> {
    let q = parse(&pairs, BreakdownQuery::parse)?;
    let body = state
        .analytics
        .breakdown(&auth.user.id, &q, &state.streams)
        .await
        .map_err(store_failed)?;
    Ok(match q.format {
        Format::Json => Json(body).into_response(),
        Format::Csv => csv("attachment; filename=\"qoe-breakdown.csv\"", body.to_csv()),
    })
}

/// The caller's views, newest `startedAt` first, a page at a time.
#[utoipa::path(get, path = "/api/v1/qoe/views", operation_id = "qoeViews", tag = "qoe",
    params(
        ("limit" = Option<i64>, Query, minimum = 1, maximum = 1000, description = "Default 50"),
        ("cursor" = Option<String>, Query, description = "`nextCursor` of the previous page"),
        ("from" = Option<String>, Query, format = DateTime),
        ("to" = Option<String>, Query, format = DateTime),
        ("filter" = Option<Vec<String>>, Query, explode = true),
        ("format" = Option<String>, Query, description = "`json` (default) or `csv` (the next page's cursor in `X-Next-Cursor`)"),
    ),
    responses(
        (status = 200, description = "The answer; with `format=csv`, the same as CSV (a header row, one row per item)", content((ViewsBody = "application/json"), (String = "text/csv"))),
        (status = 400, description = "Bad parameter", body = FieldErrorsBody),
        (status = 401, description = "No valid session", body = ErrorBody),
        (status = 500, response = StoreUnavailable),
    ),
    security(("session" = [])))]
pub async fn views(
    State(state): State<Arc<AppState>>,
    Extension(SessionUser(auth)): Extension<SessionUser>,
    pairs: QueryPairs,
) -> Result<Response, ApiError> {
    let q = parse(&pairs, ViewsQuery::parse)?;
    let body = state
        .analytics
        .views(&auth.user.id, &q, &state.streams)
        .await
        .map_err(store_failed)?;
    Ok(match q.format {
        Format::Json => Json(body).into_response(),
        Format::Csv => {
            // CSV has no place for the cursor: a client paging through CSV reads it here.
            let next = body
                .next_cursor
                .as_deref()
                .and_then(|c| HeaderValue::from_str(c).ok());
            let mut r = csv("attachment; filename=\"qoe-views.csv\"", body.to_csv());
            if let Some(next) = next {
                r.headers_mut().insert("x-next-cursor", next);
            }
            r
        }
    })
}

/// A bucket's probes of the stream.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TimelineProbes {
    pub healthy: i64,
    pub degraded: i64,
    pub failing: i64,
    /// Median latency of the bucket's probes; null without probes.
    pub p50_latency_ms: Option<i64>,
}

impl From<ProbeBucket> for TimelineProbes {
    fn from(b: ProbeBucket) -> Self {
        Self {
            healthy: b.healthy,
            degraded: b.degraded,
            failing: b.failing,
            // Latencies are whole milliseconds, so their median is one of them.
            p50_latency_ms: b.p50_latency_ms.map(|v| v as i64),
        }
    }
}

/// One bucket of a stream's timeline.
#[derive(Serialize, ToSchema)]
pub struct TimelineItem {
    /// Bucket start (UTC-aligned).
    pub t: Timestamp,
    pub probes: TimelineProbes,
    pub viewers: Viewers,
}

/// `GET /api/v1/streams/{id}/timeline`.
#[derive(Serialize, ToSchema)]
pub struct TimelineBody {
    pub items: Vec<TimelineItem>,
}

/// A stream's probe outcomes and the caller's viewers of it, bucket by bucket.
#[utoipa::path(get, path = "/api/v1/streams/{id}/timeline", operation_id = "streamTimeline", tag = "streams",
    params(
        ("id" = String, Path, description = "Stream id"),
        ("granularity" = Option<String>, Query, description = "`minute`, `hour` or `day` (default by range; at most 1,500 buckets)"),
        ("from" = Option<String>, Query, format = DateTime),
        ("to" = Option<String>, Query, format = DateTime),
        ("filter" = Option<Vec<String>>, Query, explode = true, description = "Narrows the viewers"),
    ),
    responses(
        (status = 200, body = TimelineBody),
        (status = 400, description = "Bad parameter", body = FieldErrorsBody),
        (status = 401, description = "No valid session", body = ErrorBody),
        (status = 404, description = "Unknown stream", body = ErrorBody),
        (status = 500, response = StoreUnavailable),
    ),
    security(("session" = [])))]
pub async fn timeline(
    State(state): State<Arc<AppState>>,
    Extension(SessionUser(auth)): Extension<SessionUser>,
    RowId(id): RowId,
    pairs: QueryPairs,
) -> Result<Json<TimelineBody>, ApiError> {
    let q = parse(&pairs, TimelineQuery::parse)?;
    let stream = state.streams.get(&id).await?;
    let (probes, viewers) = tokio::try_join!(
        async {
            timeline::buckets(&state.db, &stream.id, q.range, q.granularity)
                .await
                .map_err(ApiError::from)
        },
        async {
            state
                .analytics
                .timeline_viewers(&auth.user.id, &stream.source_url, &q, &state.streams)
                .await
                .map_err(store_failed)
        },
    )?;
    // Both halves list every bucket of the same range, in the same order.
    let items = probes
        .into_iter()
        .zip(viewers)
        .map(|((t, p), v)| TimelineItem {
            t: Timestamp(t),
            probes: p.into(),
            viewers: v.viewers,
        })
        .collect();
    Ok(Json(TimelineBody { items }))
}
