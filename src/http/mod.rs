//! The HTTP layer, the only module that knows axum: the router, shared state and the
//! handlers, one file per resource. Handlers extract, call one domain function, and map.

pub mod agents;
pub mod assets;
pub mod auth;
pub mod error;
pub mod extract;
pub mod keys;
pub mod streams;
pub mod telemetry;
pub mod waitlist;

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::middleware;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use tower_http::catch_panic::CatchPanicLayer;

use crate::accounts::Accounts;
use crate::db::Db;
use crate::keys::cache::KeyCache;
use crate::keys::Keys;
use crate::ratelimit::RateLimiter;
use crate::streams::Streams;
use error::ApiError;

/// Everything handlers share.
pub struct AppState {
    pub db: Db,
    pub accounts: Accounts,
    pub streams: Streams,
    pub keys: Keys,
    pub key_cache: KeyCache,
    pub rate: RateLimiter,
    pub slow_ms: u64,
    pub writer: ingest::WriterHandle,
    pub sink: Arc<dyn ingest::EventSink>,
}

/// The whole service's routes.
pub fn router(state: Arc<AppState>) -> Router {
    let cookie_gated = Router::new()
        .route("/api/v1/streams", post(streams::create).get(streams::list))
        .route(
            "/api/v1/streams/{id}",
            get(streams::get).patch(streams::update),
        )
        .route("/api/v1/agents", get(agents::feed))
        .route("/api/v1/keys", post(keys::create).get(keys::list))
        .route("/api/v1/keys/{id}", axum::routing::delete(keys::revoke))
        .route("/api/v1/telemetry/sessions", get(telemetry::sessions))
        .route(
            "/api/v1/telemetry/sessions/{id}/events",
            get(telemetry::session_events),
        )
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            extract::require_session,
        ));

    Router::new()
        .merge(cookie_gated)
        .route("/api/auth/sign-up/email", post(auth::sign_up))
        .route("/api/auth/sign-in/email", post(auth::sign_in))
        .route("/api/auth/sign-out", post(auth::sign_out))
        .route("/api/auth/get-session", get(auth::get_session))
        // OPTIONS is routed explicitly so the CORS layer sees preflights; it answers them itself.
        .route(
            "/api/v1/telemetry",
            post(telemetry::ingest)
                .options(|| async { StatusCode::NO_CONTENT })
                .layer(telemetry::cors()),
        )
        .route("/api/waitlist", post(waitlist::join))
        .route("/healthz", get(healthz))
        .route("/", get(assets::landing))
        .route("/demo/player.html", get(assets::demo_player))
        .route(
            &assets::sdk_path(assets::SDK_VERSION),
            get(assets::sdk_pinned),
        )
        .route(&assets::sdk_path("latest"), get(assets::sdk_latest))
        .fallback(not_found)
        .method_not_allowed_fallback(not_found)
        .layer(CatchPanicLayer::custom(|_| {
            ApiError::internal("handler panicked").into_response()
        }))
        .with_state(state)
}

/// Unknown paths and methods: the contract's JSON 404 (it has no 405).
async fn not_found() -> ApiError {
    ApiError::NotFound
}

/// Liveness plus a round trip to the relational store.
async fn healthz(
    State(state): State<Arc<AppState>>,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    sqlx::query("SELECT 1")
        .execute(&state.db.pool)
        .await
        .map_err(ApiError::internal)?;
    Ok((StatusCode::OK, Json(json!({ "status": "ok" }))))
}
