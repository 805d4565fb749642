//! `/api/v1/keys`: mint, list and soft-revoke the caller's API keys.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::Serialize;
use utoipa::ToSchema;

use super::error::{ApiError, ErrorBody, FieldErrorsBody, InternalError};
use super::extract::{object, RowId, SessionUser, SmallBody};
use super::AppState;
use crate::accounts::token::sha256_hex;
use crate::keys::{ApiKey, LABEL_MAX};
use crate::time::Timestamp;
use crate::validation::Checker;

/// The body of `POST /api/v1/keys`.
#[derive(ToSchema)]
#[allow(dead_code)] // documents the body; parsed with zod's messages in `create`
pub struct KeyCreate {
    /// At most 120 characters.
    #[schema(max_length = 120, example = "web player")]
    label: String,
}

/// A key just minted: the raw key is in this answer and never again.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MintedKey {
    pub created_at: Timestamp,
    pub id: String,
    pub label: String,
    /// `svc_` + 43 base62 characters. Shown once.
    pub raw_key: String,
}

/// ApiKey as listed (never the raw key).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiKeyItem {
    pub created_at: Timestamp,
    pub id: String,
    pub label: String,
    pub last_used_at: Option<Timestamp>,
    pub revoked_at: Option<Timestamp>,
}

impl From<ApiKey> for ApiKeyItem {
    fn from(k: ApiKey) -> Self {
        Self {
            id: k.id,
            label: k.label,
            created_at: Timestamp(k.created_at),
            last_used_at: k.last_used_at.map(Timestamp),
            revoked_at: k.revoked_at.map(Timestamp),
        }
    }
}

/// The caller's keys, newest first, revoked ones included.
#[derive(Serialize, ToSchema)]
pub struct KeyList {
    pub items: Vec<ApiKeyItem>,
}

/// Mint an API key for the caller.
#[utoipa::path(post, path = "/api/v1/keys", operation_id = "createKey", tag = "keys",
    request_body = KeyCreate,
    responses(
        (status = 201, body = MintedKey),
        (status = 400, description = "Invalid body", body = FieldErrorsBody),
        (status = 401, description = "No valid session", body = ErrorBody),
        (status = 500, response = InternalError),
    ),
    security(("session" = [])))]
pub async fn create(
    State(state): State<Arc<AppState>>,
    Extension(SessionUser(auth)): Extension<SessionUser>,
    SmallBody(body): SmallBody,
) -> Result<(StatusCode, Json<MintedKey>), ApiError> {
    let obj = object(&body)?;
    let mut c = Checker::new(&obj);
    let label = c.required_str("label", 0, LABEL_MAX).unwrap_or_default();
    c.into_result().map_err(ApiError::Validation)?;
    let minted = state.keys.mint(&auth.user.id, label).await?;
    // A hash tried before it existed may sit in a negative cache entry somewhere.
    state
        .key_cache
        .publish_change(&sha256_hex(&minted.raw_key))
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(MintedKey {
            id: minted.key.id,
            label: minted.key.label,
            raw_key: minted.raw_key,
            created_at: Timestamp(minted.key.created_at),
        }),
    ))
}

/// The caller's keys.
#[utoipa::path(get, path = "/api/v1/keys", operation_id = "listKeys", tag = "keys",
    responses(
        (status = 200, body = KeyList),
        (status = 401, description = "No valid session", body = ErrorBody),
        (status = 500, response = InternalError),
    ),
    security(("session" = [])))]
pub async fn list(
    State(state): State<Arc<AppState>>,
    Extension(SessionUser(auth)): Extension<SessionUser>,
) -> Result<Json<KeyList>, ApiError> {
    let keys = state.keys.list(&auth.user.id).await?;
    Ok(Json(KeyList {
        items: keys.into_iter().map(ApiKeyItem::from).collect(),
    }))
}

/// Soft-revoke one of the caller's keys (idempotent); telemetry refuses it from the next request.
#[utoipa::path(delete, path = "/api/v1/keys/{id}", operation_id = "revokeKey", tag = "keys",
    params(("id" = String, Path, description = "Key id")),
    responses(
        (status = 204, description = "Revoked (or already revoked)"),
        (status = 401, description = "No valid session", body = ErrorBody),
        (status = 404, description = "Not one of the caller's keys", body = ErrorBody),
        (status = 500, response = InternalError),
    ),
    security(("session" = [])))]
pub async fn revoke(
    State(state): State<Arc<AppState>>,
    Extension(SessionUser(auth)): Extension<SessionUser>,
    RowId(id): RowId,
) -> Result<StatusCode, ApiError> {
    let hash = state.keys.revoke(&auth.user.id, &id).await?;
    state.key_cache.publish_change(&hash).await?;
    Ok(StatusCode::NO_CONTENT)
}
