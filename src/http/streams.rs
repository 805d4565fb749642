//! `/api/v1/streams`: register (upsert), list, read and rename streams.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

use super::error::ApiError;
use super::extract::{object, SmallBody};
use super::AppState;
use crate::streams::Stream;
use crate::time::iso_ms;

fn item(s: &Stream) -> Value {
    json!({
        "id": s.id,
        "sourceUrl": s.source_url,
        "name": s.name,
        "targetRegion": s.target_region,
        "createdAt": iso_ms(s.created_at),
        "agentState": s.agent_state,
        "status": s.status,
        "lastAction": s.last_action,
        "lastCheckedAt": s.last_checked_at.map(iso_ms),
        "uptimePct": s.uptime_pct,
    })
}

pub async fn create(
    State(state): State<Arc<AppState>>,
    SmallBody(body): SmallBody,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let stream = state.streams.register(&object(&body)?).await?;
    Ok((StatusCode::CREATED, Json(item(&stream))))
}

pub async fn list(State(state): State<Arc<AppState>>) -> Result<Json<Value>, ApiError> {
    let streams = state.streams.list().await?;
    Ok(Json(
        json!({ "items": streams.iter().map(item).collect::<Vec<_>>() }),
    ))
}

pub async fn get(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let s = state.streams.get(&id).await?;
    Ok(Json(json!({
        "id": s.id,
        "sourceUrl": s.source_url,
        "agentState": s.agent_state,
        "uptimePct": s.uptime_pct,
        "lastAction": s.last_action,
        "lastCheckedAt": s.last_checked_at.map(iso_ms),
    })))
}

pub async fn update(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    SmallBody(body): SmallBody,
) -> Result<Json<Value>, ApiError> {
    let s = state.streams.update(&id, &object(&body)?).await?;
    Ok(Json(item(&s)))
}
