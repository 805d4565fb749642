//! `/api/v1/streams`: register (upsert), list, read, rename and delete streams.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::Serialize;
use utoipa::ToSchema;

use super::error::{ApiError, ErrorBody, FieldErrorsBody, InternalError};
use super::extract::{object, RowId, SessionUser, SmallBody};
use super::AppState;
use crate::states::{AgentState, StreamStatus};
use crate::streams::{
    NewStream, Stream, StreamChange, MSG_INVALID_URL, NAME_MAX, REGION_MAX, URL_MAX,
};
use crate::time::Timestamp;
use crate::validation::Checker;

/// StreamCreate: the body of `POST` (and, minus `sourceUrl`, of `PATCH`).
#[derive(ToSchema)]
#[schema(rename_all = "camelCase")]
#[allow(dead_code)] // documents the body; parsed by `parse_create` for zod's messages
pub struct StreamCreate {
    /// An absolute http(s) URL that passes the SSRF guard; at most 2,048 characters.
    #[schema(
        example = "https://cdn.example.com/live/master.m3u8",
        max_length = 2048
    )]
    source_url: String,
    /// At most 120 characters; the URL's host and path when omitted.
    #[schema(max_length = 120)]
    name: Option<String>,
    /// Region label, at most 64 characters; `auto` when omitted.
    #[schema(max_length = 64)]
    target_region: Option<String>,
}

/// The PATCH body: `name` and `targetRegion` change when present; a `sourceUrl` is ignored.
#[derive(ToSchema)]
#[schema(rename_all = "camelCase")]
#[allow(dead_code)] // documents the body; parsed by `parse_change`
pub struct StreamPatch {
    #[schema(max_length = 120)]
    name: Option<String>,
    #[schema(max_length = 64)]
    target_region: Option<String>,
}

// Fields of the response types are declared in alphabetical order of their wire names: the
// order the answers had before the typed edge, so they stay byte-identical.

/// StreamItem (interface.md).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StreamItem {
    pub agent_state: AgentState,
    pub created_at: Timestamp,
    pub id: String,
    pub last_action: String,
    pub last_checked_at: Option<Timestamp>,
    pub name: String,
    pub source_url: String,
    pub status: StreamStatus,
    pub target_region: String,
    pub uptime_pct: f64,
}

impl From<Stream> for StreamItem {
    fn from(s: Stream) -> Self {
        Self {
            id: s.id,
            source_url: s.source_url,
            name: s.name,
            target_region: s.target_region,
            created_at: Timestamp(s.created_at),
            agent_state: s.agent_state,
            status: s.status,
            last_action: s.last_action,
            last_checked_at: s.last_checked_at.map(Timestamp),
            uptime_pct: s.uptime_pct,
        }
    }
}

/// StreamStatus (interface.md): one stream's snapshot.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StreamStatusBody {
    pub agent_state: AgentState,
    pub id: String,
    pub last_action: String,
    pub last_checked_at: Option<Timestamp>,
    pub source_url: String,
    pub uptime_pct: f64,
}

/// The 50 most recently created streams.
#[derive(Serialize, ToSchema)]
pub struct StreamList {
    pub items: Vec<StreamItem>,
}

/// Parses a StreamCreate body with the contract's (zod) messages, every field at once.
fn parse_create(body: &[u8]) -> Result<NewStream, ApiError> {
    let obj = object(body)?;
    let mut c = Checker::new(&obj);
    let source_url = c.required_str("sourceUrl", 0, URL_MAX);
    let name = c.optional_str("name", 0, NAME_MAX);
    let region = c.optional_str("targetRegion", 0, REGION_MAX);
    if source_url.is_some_and(|u| url::Url::parse(u).is_err()) {
        c.reject("sourceUrl", MSG_INVALID_URL);
    }
    c.into_result().map_err(ApiError::Validation)?;
    Ok(NewStream {
        source_url: source_url.unwrap_or_default().to_owned(),
        name: name.map(str::to_owned),
        target_region: region.map(str::to_owned),
    })
}

/// Parses a PATCH body: `name` and `targetRegion`, validated like at creation.
fn parse_change(body: &[u8]) -> Result<StreamChange, ApiError> {
    let obj = object(body)?;
    let mut c = Checker::new(&obj);
    let name = c.optional_str("name", 0, NAME_MAX);
    let region = c.optional_str("targetRegion", 0, REGION_MAX);
    c.into_result().map_err(ApiError::Validation)?;
    Ok(StreamChange {
        name: name.map(str::to_owned),
        target_region: region.map(str::to_owned),
    })
}

/// Register a stream (upsert by `sourceUrl`).
#[utoipa::path(post, path = "/api/v1/streams", operation_id = "createStream", tag = "streams",
    request_body = StreamCreate,
    responses(
        (status = 201, description = "The stream, new or already registered", body = StreamItem),
        (status = 400, description = "Invalid body, refused by the SSRF guard, or the stream limit reached", body = FieldErrorsBody),
        (status = 401, description = "No valid session", body = ErrorBody),
        (status = 500, response = InternalError),
    ),
    security(("session" = [])))]
pub async fn create(
    State(state): State<Arc<AppState>>,
    Extension(SessionUser(auth)): Extension<SessionUser>,
    SmallBody(body): SmallBody,
) -> Result<(StatusCode, Json<StreamItem>), ApiError> {
    let new = parse_create(&body)?;
    let stream = state.streams.register(Some(&auth.user.id), &new).await?;
    Ok((StatusCode::CREATED, Json(stream.into())))
}

/// The 50 most recently created streams, newest first.
#[utoipa::path(get, path = "/api/v1/streams", operation_id = "listStreams", tag = "streams",
    responses(
        (status = 200, body = StreamList),
        (status = 401, description = "No valid session", body = ErrorBody),
        (status = 500, response = InternalError),
    ),
    security(("session" = [])))]
pub async fn list(State(state): State<Arc<AppState>>) -> Result<Json<StreamList>, ApiError> {
    let streams = state.streams.list().await?;
    Ok(Json(StreamList {
        items: streams.into_iter().map(StreamItem::from).collect(),
    }))
}

/// One stream's snapshot.
#[utoipa::path(get, path = "/api/v1/streams/{id}", operation_id = "getStream", tag = "streams",
    params(("id" = String, Path, description = "Stream id")),
    responses(
        (status = 200, body = StreamStatusBody),
        (status = 401, description = "No valid session", body = ErrorBody),
        (status = 404, description = "Unknown stream", body = ErrorBody),
        (status = 500, response = InternalError),
    ),
    security(("session" = [])))]
pub async fn get(
    State(state): State<Arc<AppState>>,
    RowId(id): RowId,
) -> Result<Json<StreamStatusBody>, ApiError> {
    let s = state.streams.get(&id).await?;
    Ok(Json(StreamStatusBody {
        id: s.id,
        source_url: s.source_url,
        agent_state: s.agent_state,
        uptime_pct: s.uptime_pct,
        last_action: s.last_action,
        last_checked_at: s.last_checked_at.map(Timestamp),
    }))
}

/// Rename a stream or change its region.
#[utoipa::path(patch, path = "/api/v1/streams/{id}", operation_id = "updateStream", tag = "streams",
    params(("id" = String, Path, description = "Stream id")),
    request_body = StreamPatch,
    responses(
        (status = 200, body = StreamItem),
        (status = 400, description = "Invalid body", body = FieldErrorsBody),
        (status = 401, description = "No valid session", body = ErrorBody),
        (status = 404, description = "Unknown stream", body = ErrorBody),
        (status = 500, response = InternalError),
    ),
    security(("session" = [])))]
pub async fn update(
    State(state): State<Arc<AppState>>,
    RowId(id): RowId,
    SmallBody(body): SmallBody,
) -> Result<Json<StreamItem>, ApiError> {
    let change = parse_change(&body)?;
    let s = state.streams.update(&id, &change).await?;
    Ok(Json(s.into()))
}

/// Delete a stream with its probes; it is never probed again.
#[utoipa::path(delete, path = "/api/v1/streams/{id}", operation_id = "deleteStream", tag = "streams",
    params(("id" = String, Path, description = "Stream id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 401, description = "No valid session", body = ErrorBody),
        (status = 404, description = "Unknown stream", body = ErrorBody),
        (status = 500, response = InternalError),
    ),
    security(("session" = [])))]
pub async fn delete(
    State(state): State<Arc<AppState>>,
    RowId(id): RowId,
) -> Result<StatusCode, ApiError> {
    state.streams.delete(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}
