//! `POST /api/v1/telemetry` (bearer-gated ingest) and the cookie-gated read-back of the
//! caller's sessions. Check order (decisions.md §7): bearer key → body size, parse and
//! validation → body `apiKey` equals the bearer → durable write → 204.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::{Extension, Json};
use serde_json::{json, Value};
use subtle::ConstantTimeEq;
use tower_http::cors::{Any, CorsLayer};

use super::error::ApiError;
use super::extract::{read_body, SessionUser};
use super::AppState;

/// Sessions listed by the read-back route.
const SESSIONS_LIMIT: u32 = 50;

/// Preflight for any origin: players run on third-party pages. No cookies are involved.
pub fn cors() -> CorsLayer {
    CorsLayer::new()
        .allow_origin(Any)
        .allow_methods([Method::POST, Method::OPTIONS])
        .allow_headers([header::AUTHORIZATION, header::CONTENT_TYPE])
        .max_age(std::time::Duration::from_secs(86_400))
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

pub async fn ingest(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Result<StatusCode, ApiError> {
    let raw_key = bearer(&headers).ok_or(ApiError::InvalidApiKey)?;
    let owner = state
        .key_cache
        .authenticate(raw_key)
        .await?
        .ok_or(ApiError::InvalidApiKey)?;

    let bytes = read_body(body, ingest::MAX_BODY_BYTES)
        .await
        .ok_or_else(|| invalid(ingest::body_too_large()))?;
    // simd-json parses in place; this takes over the buffer without a copy when
    // the body arrived as one uniquely owned chunk.
    let mut buf = Vec::from(bytes);
    let batch = ingest::parse_batch(&mut buf).map_err(invalid)?;
    if !bool::from(batch.api_key.as_bytes().ct_eq(raw_key.as_bytes())) {
        return Err(ApiError::InvalidApiKey);
    }

    state
        .writer
        .submit(batch.into_rows(&owner.user_id))
        .await
        .map_err(ApiError::internal)?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn sessions(
    State(state): State<Arc<AppState>>,
    Extension(SessionUser(auth)): Extension<SessionUser>,
) -> Result<Json<Value>, ApiError> {
    let items = state
        .sink
        .sessions(&auth.user.id, SESSIONS_LIMIT)
        .await
        .map_err(ApiError::internal)?;
    Ok(Json(json!({ "items": items })))
}

pub async fn session_events(
    State(state): State<Arc<AppState>>,
    Extension(SessionUser(auth)): Extension<SessionUser>,
    Path(session_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let items = state
        .sink
        .session_events(&auth.user.id, &session_id)
        .await
        .map_err(ApiError::internal)?;
    if items.is_empty() {
        return Err(ApiError::NotFound);
    }
    Ok(Json(json!({ "items": items })))
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
