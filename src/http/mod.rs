//! The HTTP layer, the only module that knows axum: the router, shared state and the
//! handlers, one file per resource. Handlers extract, call one domain function, and map.

pub mod access_log;
pub mod agents;
pub mod alerts;
pub mod assets;
pub mod auth;
pub mod bounds;
pub mod error;
pub mod extract;
pub mod health;
pub mod invitations;
pub mod keys;
pub mod layers;
pub mod metrics;
pub mod openapi;
pub mod pages;
pub mod qoe;
pub mod query;
pub mod security;
pub mod serve;
pub mod streams;
pub mod telemetry;
pub mod waitlist;

use std::sync::Arc;

use axum::middleware;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};

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
    /// Alert rules, channels, incidents and deliveries.
    pub alerts: crate::alerts::Alerts,
    pub accounts: Accounts,
    /// The owner's one-time sign-up links.
    pub invitations: crate::accounts::invitations::Invitations,
    pub streams: Streams,
    pub keys: Keys,
    pub key_cache: KeyCache,
    pub rate: RateLimiter,
    pub signup: crate::config::Signup,
    /// Session cookies carry `Secure` (`STREAMWATCH_PUBLIC_URL` is https).
    pub secure_cookies: bool,
    pub slow_ms: u64,
    /// Accepting a telemetry batch: the writer, the live views the refresher writes from
    /// memory, the breaker, the User-Agent cache.
    pub intake: crate::telemetry::Intake,
    /// The telemetry store behind its circuit breaker (decisions.md §11).
    pub sink: ingest::SupervisedSink,
    /// Every read of telemetry (QoE routes, session read-back), under the same breaker.
    pub analytics: analytics::Store,
}

/// The whole service's routes.
pub fn router(state: Arc<AppState>) -> Router {
    let cookie_gated = Router::new()
        .route("/api/v1/streams", post(streams::create).get(streams::list))
        .route(
            "/api/v1/streams/{id}",
            get(streams::get)
                .patch(streams::update)
                .delete(streams::delete),
        )
        .route("/api/v1/streams/{id}/timeline", get(qoe::timeline))
        .route("/api/v1/qoe/overview", get(qoe::overview))
        .route("/api/v1/qoe/timeseries", get(qoe::timeseries))
        .route("/api/v1/qoe/breakdown", get(qoe::breakdown))
        .route("/api/v1/qoe/views", get(qoe::views))
        .route("/api/v1/agents", get(agents::feed))
        .route(
            "/api/v1/alerts/channels",
            post(alerts::create_channel).get(alerts::list_channels),
        )
        .route(
            "/api/v1/alerts/channels/{id}",
            axum::routing::patch(alerts::update_channel).delete(alerts::delete_channel),
        )
        .route(
            "/api/v1/alerts/channels/{id}/test",
            post(alerts::test_channel),
        )
        .route(
            "/api/v1/alerts/channels/{id}/rotate-secret",
            post(alerts::rotate_secret),
        )
        .route(
            "/api/v1/alerts/rules",
            post(alerts::create_rule).get(alerts::list_rules),
        )
        .route(
            "/api/v1/alerts/rules/{id}",
            axum::routing::patch(alerts::update_rule).delete(alerts::delete_rule),
        )
        .route("/api/v1/alerts/incidents", get(alerts::list_incidents))
        .route("/api/v1/alerts/deliveries", get(alerts::list_deliveries))
        .route(
            "/api/v1/alerts/deliveries/{id}/resend",
            post(alerts::resend),
        )
        .route(
            "/api/v1/invitations",
            post(invitations::create).get(invitations::list),
        )
        .route(
            "/api/v1/invitations/{id}",
            axum::routing::delete(invitations::revoke),
        )
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
        .route("/api/auth/change-password", post(auth::change_password))
        .route(
            "/api/v1/telemetry",
            post(telemetry::ingest).options(telemetry::preflight).layer(
                tower::util::MapResponseLayer::new(telemetry::cors_headers as fn(_) -> _),
            ),
        )
        .route("/api/waitlist", post(waitlist::join))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/api/openapi.json", get(openapi::document))
        .merge(pages::routes(state.clone()))
        .merge(assets::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(not_found)
        // One `Router::layer` for the whole stack, outermost first: each `Router::layer`
        // boxes every route's service again, and a request clones, calls and boxes the
        // future of every level (about 60 allocations per request with five levels:
        // docs/benchmarks.md, "Memory at full ingest").
        .layer(
            ServiceBuilder::new()
                // Request ids: taken from `x-request-id` or generated, on every log line of
                // the request (the access log line included), and echoed in the response.
                .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
                .layer(access_log::layer())
                .layer(PropagateRequestIdLayer::x_request_id())
                .layer(middleware::from_fn(layers::around))
                .layer(CatchPanicLayer::custom(
                    |payload: Box<dyn std::any::Any + Send>| {
                        let message = crate::supervisor::panic_message(&*payload);
                        ApiError::internal(format!("request handler panicked: {message}"))
                            .into_response()
                    },
                )),
        )
        .with_state(state)
}

/// Unknown paths and methods: the contract's JSON 404 (it has no 405).
async fn not_found() -> ApiError {
    ApiError::NotFound
}
