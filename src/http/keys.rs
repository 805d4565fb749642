//! `/api/v1/keys`: mint, list and soft-revoke the caller's API keys.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde_json::{json, Value};

use super::error::ApiError;
use super::extract::{object, SessionUser, SmallBody};
use super::AppState;
use crate::accounts::token::sha256_hex;
use crate::keys::ApiKey;
use crate::time::iso_ms;

fn item(k: &ApiKey) -> Value {
    json!({
        "id": k.id,
        "label": k.label,
        "createdAt": iso_ms(k.created_at),
        "lastUsedAt": k.last_used_at.map(iso_ms),
        "revokedAt": k.revoked_at.map(iso_ms),
    })
}

pub async fn create(
    State(state): State<Arc<AppState>>,
    Extension(SessionUser(auth)): Extension<SessionUser>,
    SmallBody(body): SmallBody,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let minted = state.keys.mint(&auth.user.id, &object(&body)?).await?;
    // A hash tried before it existed may sit in a negative cache entry somewhere.
    state
        .key_cache
        .publish_change(&sha256_hex(&minted.raw_key))
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "id": minted.key.id,
            "label": minted.key.label,
            "rawKey": minted.raw_key,
            "createdAt": iso_ms(minted.key.created_at),
        })),
    ))
}

pub async fn list(
    State(state): State<Arc<AppState>>,
    Extension(SessionUser(auth)): Extension<SessionUser>,
) -> Result<Json<Value>, ApiError> {
    let keys = state.keys.list(&auth.user.id).await?;
    Ok(Json(
        json!({ "items": keys.iter().map(item).collect::<Vec<_>>() }),
    ))
}

pub async fn revoke(
    State(state): State<Arc<AppState>>,
    Extension(SessionUser(auth)): Extension<SessionUser>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let hash = state.keys.revoke(&auth.user.id, &id).await?;
    state.key_cache.publish_change(&hash).await?;
    Ok(StatusCode::NO_CONTENT)
}
