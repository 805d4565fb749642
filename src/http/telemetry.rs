//! `POST /api/v1/telemetry` (bearer-gated ingest) and the cookie-gated read-back of the
//! caller's sessions. Check order (decisions.md §7): bearer key → body size, parse and
//! validation → body `apiKey` equals the bearer → durable write ([`Intake::accept`]) → 204.
//!
//! [`Intake::accept`]: crate::telemetry::Intake::accept

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;
use axum::{Extension, Json};
use serde::Serialize;
use subtle::ConstantTimeEq;
use utoipa::ToSchema;

use super::error::{ApiError, ErrorBody, FieldErrorsBody, StoreUnavailable};
use super::extract::{read_body, BodyError, PathText, SessionUser, MSG_BODY_UNREADABLE};
use super::query::{int_in_range, QueryPairs};
use super::AppState;
use crate::telemetry::Outcome;
use crate::time::Timestamp;

/// Sessions listed by the read-back route.
const SESSIONS_LIMIT: u32 = 50;

/// CORS of the ingest route (decisions.md "CORS"): any origin, no cookies, `POST` with
/// `Authorization` and `Content-Type`; players run on third-party pages. The policy is a
/// constant, so its headers are static values. (tower-http's `CorsLayer` computes them per
/// request for policies that depend on the request, and axum clones a route's layers for
/// every request: its clone, header map and `Vary` value were about 2 % of the server's CPU
/// on the fleet's small batches; docs/benchmarks.md.) The values are the ones `CorsLayer`
/// sent for this policy.
mod cors {
    use axum::http::header::{
        ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS, ACCESS_CONTROL_ALLOW_ORIGIN,
        ACCESS_CONTROL_MAX_AGE, VARY,
    };
    use axum::http::{HeaderName, HeaderValue};

    /// On every answer of the route, preflight or not.
    pub const EVERY: [(HeaderName, HeaderValue); 2] = [
        (
            VARY,
            HeaderValue::from_static(
                "origin, access-control-request-method, access-control-request-headers",
            ),
        ),
        (ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*")),
    ];

    /// On a preflight's answer too (cached by browsers for a day).
    pub const PREFLIGHT: [(HeaderName, HeaderValue); 3] = [
        (
            ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("POST,OPTIONS"),
        ),
        (
            ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static("authorization,content-type"),
        ),
        (ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("86400")),
    ];
}

/// Adds the CORS headers every answer of the ingest route carries (a `map_response` of the
/// route: a function, so cloning the route per request copies a pointer).
pub fn cors_headers(mut resp: Response) -> Response {
    let headers = resp.headers_mut();
    for (name, value) in cors::EVERY {
        headers.append(name, value);
    }
    resp
}

/// A preflight (`OPTIONS`) of the ingest route, from any origin: 200 with the policy.
pub async fn preflight() -> Response {
    let mut resp = Response::new(axum::body::Body::empty());
    resp.headers_mut().extend(cors::PREFLIGHT);
    resp
}

/// The raw key of a well-formed `Authorization: Bearer <key>` header.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, key) = value.split_once(' ')?;
    let key = key.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !key.is_empty()).then_some(key)
}

fn invalid(errors: ingest::ValidationErrors) -> ApiError {
    ApiError::Validation(
        errors
            .iter()
            .map(|(k, m)| (k.to_owned(), m.to_owned()))
            .collect(),
    )
}

/// A telemetry batch (interface.md "Telemetry batch"; analytics.md §1 for `context`).
#[derive(ToSchema)]
#[schema(rename_all = "camelCase")]
#[allow(dead_code)] // documents the body; parsed by `ingest::parse_batch` with zod's messages
pub struct TelemetryBatch {
    /// Must equal the bearer key.
    #[schema(min_length = 1, example = "svc_…")]
    api_key: String,
    #[schema(min_length = 1)]
    session_id: String,
    #[schema(min_items = 1, max_items = 1000)]
    events: Vec<TelemetryEvent>,
    context: Option<TelemetryContext>,
}

/// One event: `{ type, ts, payload }`; the payload's fields depend on the type.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct TelemetryEvent {
    #[schema(rename = "type")]
    kind: EventKind,
    /// ISO 8601 with a zone; stored with millisecond precision.
    #[schema(format = DateTime)]
    ts: String,
    payload: EventPayload,
}

/// The eight event types.
#[derive(ToSchema, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum EventKind {
    PlaybackStart,
    PlaybackPause,
    PlaybackResume,
    RebufferStart,
    RebufferEnd,
    QualityChange,
    Error,
    SessionEnd,
}

/// The payload of each event type (unknown fields are ignored).
#[derive(ToSchema, serde::Deserialize)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum EventPayload {
    /// `playback_start`.
    Start {
        #[serde(rename = "positionMs")]
        position_ms: f64,
        #[serde(rename = "durationMs")]
        duration_ms: f64,
        #[serde(rename = "contentId")]
        content_id: String,
        #[serde(rename = "startupMs")]
        #[schema(minimum = 0)]
        startup_ms: Option<f64>,
    },
    /// `playback_pause`, `playback_resume`, `rebuffer_start`, `rebuffer_end`.
    Position {
        #[serde(rename = "positionMs")]
        position_ms: f64,
        #[serde(rename = "bufferedMs")]
        buffered_ms: f64,
    },
    /// `quality_change` (`from` is `""` for the initial rendition).
    Quality {
        from: String,
        to: String,
        bitrate: f64,
        #[schema(minimum = 0)]
        width: Option<f64>,
        #[schema(minimum = 0)]
        height: Option<f64>,
    },
    /// `error`.
    Error {
        code: String,
        message: String,
        fatal: bool,
    },
    /// `session_end`.
    End {
        #[schema(pattern = "^(ended|unloaded|error)$")]
        reason: String,
        #[serde(rename = "durationMs")]
        duration_ms: f64,
    },
}

/// The batch's optional context (analytics.md §1).
#[derive(ToSchema)]
#[schema(rename_all = "camelCase")]
#[allow(dead_code)]
pub struct TelemetryContext {
    #[schema(max_length = 64)]
    sdk: Option<String>,
    #[schema(max_length = 64)]
    player: Option<String>,
    #[schema(max_length = 256)]
    content_id: Option<String>,
    #[schema(max_length = 2048)]
    src: Option<String>,
    /// At most 20 entries; keys 1–64 characters, values at most 256.
    tags: Option<std::collections::BTreeMap<String, String>>,
}

/// Per-type event counts of a session.
#[derive(Serialize, ToSchema)]
pub struct TypeCountsBody {
    pub playback_start: u64,
    pub playback_pause: u64,
    pub playback_resume: u64,
    pub rebuffer_start: u64,
    pub rebuffer_end: u64,
    pub quality_change: u64,
    pub error: u64,
    pub session_end: u64,
}

/// One of the caller's sessions.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionSummaryBody {
    pub session_id: String,
    /// `contentId` of the session's earliest `playback_start`.
    pub content_id: Option<String>,
    pub first_event_at: Timestamp,
    pub last_event_at: Timestamp,
    /// Distinct (deduplicated) events.
    pub event_count: u64,
    pub counts: TypeCountsBody,
}

impl From<analytics::SessionSummary> for SessionSummaryBody {
    fn from(s: analytics::SessionSummary) -> Self {
        use ingest::EventType as T;
        let c = s.counts;
        Self {
            session_id: s.session_id,
            content_id: s.content_id,
            first_event_at: Timestamp(s.first_event_at),
            last_event_at: Timestamp(s.last_event_at),
            event_count: s.event_count,
            counts: TypeCountsBody {
                playback_start: c.get(T::PlaybackStart),
                playback_pause: c.get(T::PlaybackPause),
                playback_resume: c.get(T::PlaybackResume),
                rebuffer_start: c.get(T::RebufferStart),
                rebuffer_end: c.get(T::RebufferEnd),
                quality_change: c.get(T::QualityChange),
                error: c.get(T::Error),
                session_end: c.get(T::SessionEnd),
            },
        }
    }
}

/// The caller's 50 sessions with the newest events.
#[derive(Serialize, ToSchema)]
pub struct SessionList {
    pub items: Vec<SessionSummaryBody>,
}

/// One stored (deduplicated) event.
#[derive(Serialize, ToSchema)]
pub struct StoredEventBody {
    #[serde(rename = "type")]
    #[schema(value_type = EventKind)]
    pub kind: &'static str,
    pub ts: Timestamp,
    /// The payload as it was sent (the contract's fields and the optional ones).
    #[schema(value_type = Object)]
    pub payload: Box<serde_json::value::RawValue>,
}

/// A page of a session's events, `ts` ascending (ties by type).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionEvents {
    pub items: Vec<StoredEventBody>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
}

/// Events per page of a session's read-back: default and most (decisions.md §14).
pub const EVENTS_LIMIT_DEFAULT: i64 = 1000;
pub const EVENTS_LIMIT_MAX: i64 = 10_000;
/// Payload bytes per page at most (a page then stays far under the 8 MiB response limit
/// whatever the events hold); a page may hold fewer than `limit` events.
pub const EVENTS_PAGE_BYTES: usize = 4 * 1024 * 1024;

/// `limit` and `cursor` of a session's events.
pub(crate) fn events_paging(
    q: &QueryPairs,
) -> Result<(usize, Option<analytics::EventCursor>), ApiError> {
    let mut errors = crate::validation::FieldErrors::new();
    let limit = match q.last("limit") {
        None => EVENTS_LIMIT_DEFAULT,
        Some(raw) => int_in_range(raw, 1, EVENTS_LIMIT_MAX).unwrap_or_else(|m| {
            errors.insert("limit".into(), m);
            EVENTS_LIMIT_DEFAULT
        }),
    };
    let cursor = match q.last("cursor") {
        None | Some("") => None,
        Some(raw) => analytics::EventCursor::decode(raw).or_else(|| {
            errors.insert("cursor".into(), "Invalid cursor".into());
            None
        }),
    };
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    Ok((usize::try_from(limit).unwrap_or(1), cursor))
}

/// Ingest a batch of playback events (the player SDK's route). Idempotent: a batch sent
/// twice is stored once. `204` only once the events are durably stored.
#[utoipa::path(post, path = "/api/v1/telemetry", operation_id = "ingestTelemetry", tag = "telemetry",
    request_body = TelemetryBatch,
    responses(
        (status = 204, description = "Stored"),
        (status = 400, description = "Invalid batch (nothing stored)", body = FieldErrorsBody),
        (status = 401, description = "Missing, unknown or revoked key, or a body `apiKey` that differs", body = ErrorBody),
        (status = 500, description = "Not stored (store down or slow); safe to retry", body = ErrorBody),
    ),
    security(("apiKey" = [])))]
pub async fn ingest(
    State(state): State<Arc<AppState>>,
    req: Request,
) -> Result<StatusCode, ApiError> {
    // The request's own parts: a `HeaderMap` extractor would copy the headers.
    let (parts, body) = req.into_parts();
    let headers = &parts.headers;
    let raw_key =
        bearer(headers).ok_or_else(|| refused(Outcome::Auth, 0, ApiError::InvalidApiKey))?;
    let owner = state
        .key_cache
        .authenticate(raw_key)
        .await
        .map_err(|e| refused(Outcome::Auth, 0, e.into()))?
        .ok_or_else(|| refused(Outcome::Auth, 0, ApiError::InvalidApiKey))?;

    let bytes = match read_body(body, ingest::MAX_BODY_BYTES).await {
        Ok(bytes) => bytes,
        Err(BodyError::TooLarge) => {
            return Err(refused(
                Outcome::Validation,
                0,
                invalid(ingest::body_too_large()),
            ))
        }
        Err(BodyError::Unreadable) => {
            return Err(refused(
                Outcome::Validation,
                0,
                ApiError::field("events", MSG_BODY_UNREADABLE),
            ))
        }
    };
    // simd-json parses in place; this takes over the buffer without a copy when
    // the body arrived as one uniquely owned chunk.
    let mut buf = Vec::from(bytes);
    let batch =
        ingest::parse_batch(&mut buf).map_err(|e| refused(Outcome::Validation, 0, invalid(e)))?;
    let events = batch.events.len();
    if !bool::from(batch.api_key.as_bytes().ct_eq(raw_key.as_bytes())) {
        return Err(refused(Outcome::Auth, events, ApiError::InvalidApiKey));
    }

    let user_agent = headers.get(header::USER_AGENT).map(|v| v.as_bytes());
    match state.intake.accept(&owner.user_id, batch, user_agent).await {
        Ok(()) => Ok(StatusCode::NO_CONTENT),
        // Counted by `accept`; the cause is logged, never returned.
        Err(e) => Err(ApiError::internal(e)),
    }
}

/// Counts a batch refused before it reached the store (`auth` or `validation`) and its
/// events (0 when it was refused before parsing), and passes the error on.
fn refused(reason: Outcome, events: usize, e: ApiError) -> ApiError {
    crate::telemetry::count(reason, events);
    e
}

/// The caller's sessions with the newest events.
#[utoipa::path(get, path = "/api/v1/telemetry/sessions", operation_id = "listTelemetrySessions", tag = "telemetry",
    responses(
        (status = 200, body = SessionList),
        (status = 401, description = "No valid session", body = ErrorBody),
        (status = 500, response = StoreUnavailable),
    ),
    security(("session" = [])))]
pub async fn sessions(
    State(state): State<Arc<AppState>>,
    Extension(SessionUser(auth)): Extension<SessionUser>,
) -> Result<Json<SessionList>, ApiError> {
    let items = state
        .analytics
        .sessions(&auth.user.id, SESSIONS_LIMIT)
        .await
        .map_err(ApiError::internal)?;
    Ok(Json(SessionList {
        items: items.into_iter().map(SessionSummaryBody::from).collect(),
    }))
}

/// One of the caller's sessions, event by event, a page at a time.
#[utoipa::path(get, path = "/api/v1/telemetry/sessions/{id}/events", operation_id = "telemetrySessionEvents", tag = "telemetry",
    params(
        ("id" = String, Path, description = "The session id the SDK sent"),
        ("limit" = Option<i64>, Query, minimum = 1, maximum = 10000, description = "Events per page, default 1000 (a page holds at most 4 MiB of payloads, so it may hold fewer)"),
        ("cursor" = Option<String>, Query, description = "The previous page's `nextCursor`"),
    ),
    responses(
        (status = 200, body = SessionEvents),
        (status = 400, description = "A bad `limit` or `cursor`", body = FieldErrorsBody),
        (status = 401, description = "No valid session", body = ErrorBody),
        (status = 404, description = "The caller has no such session", body = ErrorBody),
        (status = 500, response = StoreUnavailable),
    ),
    security(("session" = [])))]
pub async fn session_events(
    State(state): State<Arc<AppState>>,
    Extension(SessionUser(auth)): Extension<SessionUser>,
    PathText(session_id): PathText,
    q: QueryPairs,
) -> Result<Json<SessionEvents>, ApiError> {
    let (limit, cursor) = events_paging(&q)?;
    let page = state
        .analytics
        .session_events_page(
            &auth.user.id,
            &session_id,
            cursor,
            analytics::PageLimits {
                events: limit,
                payload_bytes: EVENTS_PAGE_BYTES,
            },
        )
        .await
        .map_err(ApiError::internal)?;
    if page.events.is_empty() && cursor.is_none() {
        return Err(ApiError::NotFound);
    }
    let next_cursor = page.next.map(|c| c.encode());
    let items = page
        .events
        .into_iter()
        .map(|e| {
            Ok(StoredEventBody {
                kind: e.event_type.as_str(),
                ts: Timestamp(e.ts_ms),
                payload: serde_json::value::RawValue::from_string(e.payload)
                    .map_err(ApiError::internal)?,
            })
        })
        .collect::<Result<_, ApiError>>()?;
    Ok(Json(SessionEvents { items, next_cursor }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn bearer_header_forms() {
        let h = |v: &'static str| {
            let mut m = HeaderMap::new();
            m.insert(header::AUTHORIZATION, HeaderValue::from_static(v));
            m
        };
        assert_eq!(bearer(&h("Bearer svc_abc")), Some("svc_abc"));
        assert_eq!(bearer(&h("bearer svc_abc")), Some("svc_abc"));
        assert_eq!(bearer(&h("Bearer ")), None);
        assert_eq!(bearer(&h("Basic dXNlcg==")), None);
        assert_eq!(bearer(&h("svc_abc")), None);
        assert_eq!(bearer(&HeaderMap::new()), None);
    }
}
