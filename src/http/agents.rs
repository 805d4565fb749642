//! `/api/v1/agents`: the agent feed.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use super::error::ApiError;
use super::AppState;
use crate::probes::agent;
use crate::time::iso_ms;

pub async fn feed(State(state): State<Arc<AppState>>) -> Result<Json<Value>, ApiError> {
    let items = agent::feed(&state.db, state.slow_ms).await?;
    let items: Vec<Value> = items
        .iter()
        .map(|a| {
            json!({
                "id": a.id,
                "streamId": a.stream_id,
                "sourceUrl": a.source_url,
                "streamName": a.stream_name,
                "severity": a.severity,
                "anomalyClass": a.anomaly_class,
                "fix": a.fix,
                "action": a.action,
                "createdAt": iso_ms(a.created_at),
                "latencyMs": a.latency_ms,
                "detail": a.detail,
            })
        })
        .collect();
    Ok(Json(json!({ "items": items })))
}
