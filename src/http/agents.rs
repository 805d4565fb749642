//! `/api/v1/agents`: the agent feed.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use super::error::{ApiError, ErrorBody, FieldErrorsBody, InternalError};
use super::extract::is_row_id;
use super::query::{int_in_range, invalid_enum, timestamp, QueryPairs};
use super::AppState;
use crate::probes::agent::{self, FeedError, FeedQuery};
use crate::states::{AnomalyClass, Severity};
use crate::time::Timestamp;
use crate::validation::FieldErrors;

/// Parses the feed's query parameters (decisions.md v1.1 §6); unknown parameters are ignored.
pub(crate) fn feed_query(q: &QueryPairs) -> Result<FeedQuery, ApiError> {
    let mut errors = FieldErrors::new();
    let mut query = FeedQuery::default();
    if let Some(id) = q.last("streamId") {
        // A malformed id cannot name a stream: the same answer as an unknown one.
        if is_row_id(id) {
            query.stream_id = Some(id.to_owned());
        } else {
            errors.insert("streamId".into(), MSG_UNKNOWN_STREAM.into());
        }
    }
    for s in q.all("severity") {
        match Severity::parse(s) {
            Some(sev) if !query.severities.contains(&sev) => query.severities.push(sev),
            Some(_) => {}
            None => {
                let options: Vec<&str> = Severity::ALL.iter().map(|v| v.as_str()).collect();
                errors
                    .entry("severity".into())
                    .or_insert_with(|| invalid_enum(&options, s));
            }
        }
    }
    if let Some(before) = q.last("before") {
        match timestamp(before) {
            Ok(ms) => query.before = Some(ms),
            Err(m) => {
                errors.insert("before".into(), m);
            }
        }
    }
    if let Some(limit) = q.last("limit") {
        match int_in_range(limit, 1, agent::FEED_LIMIT_MAX) {
            Ok(n) => query.limit = n,
            Err(m) => {
                errors.insert("limit".into(), m);
            }
        }
    }
    if errors.is_empty() {
        Ok(query)
    } else {
        Err(ApiError::Validation(errors))
    }
}

/// Message for a `streamId` that names no stream.
const MSG_UNKNOWN_STREAM: &str = "Stream not found";

/// AgentItem (interface.md), plus the probe's human `detail`.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentItemBody {
    pub action: String,
    pub anomaly_class: AnomalyClass,
    pub created_at: Timestamp,
    /// What the probe found, e.g. `HTTP 404`, `timeout after 10 s`.
    pub detail: String,
    pub fix: String,
    /// Probe id.
    pub id: String,
    pub latency_ms: i64,
    pub severity: Severity,
    pub source_url: String,
    pub stream_id: String,
    pub stream_name: String,
}

/// The agent feed: the newest probes, newest first.
#[derive(Serialize, ToSchema)]
pub struct AgentFeed {
    pub items: Vec<AgentItemBody>,
}

/// The agent feed (decisions.md v1.1 §6). Without parameters: the newest 100 probes.
#[utoipa::path(get, path = "/api/v1/agents", operation_id = "agentFeed", tag = "agents",
    params(
        ("streamId" = Option<String>, Query, description = "Only this stream's probes"),
        ("severity" = Option<Vec<Severity>>, Query, explode = true, description = "Only these severities (repeatable)"),
        ("before" = Option<String>, Query, format = DateTime, description = "Only probes created before this time (paging)"),
        ("limit" = Option<i64>, Query, minimum = 1, maximum = 500, description = "At most this many items (default 100)"),
    ),
    responses(
        (status = 200, body = AgentFeed),
        (status = 400, description = "A bad parameter", body = FieldErrorsBody),
        (status = 401, description = "No valid session", body = ErrorBody),
        (status = 500, response = InternalError),
    ),
    security(("session" = [])))]
pub async fn feed(
    State(state): State<Arc<AppState>>,
    q: QueryPairs,
) -> Result<Json<AgentFeed>, ApiError> {
    let query = feed_query(&q)?;
    let items = match agent::feed(&state.db, state.slow_ms, &query).await {
        Ok(items) => items,
        Err(FeedError::UnknownStream) => {
            return Err(ApiError::field("streamId", MSG_UNKNOWN_STREAM))
        }
        Err(FeedError::Db(e)) => return Err(e.into()),
    };
    Ok(Json(AgentFeed {
        items: items
            .into_iter()
            .map(|a| AgentItemBody {
                id: a.id,
                stream_id: a.stream_id,
                source_url: a.source_url,
                stream_name: a.stream_name,
                severity: a.severity,
                anomaly_class: a.anomaly_class,
                fix: a.fix,
                action: a.action.to_owned(),
                created_at: Timestamp(a.created_at),
                latency_ms: a.latency_ms,
                detail: a.detail,
            })
            .collect(),
    }))
}
