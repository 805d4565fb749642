//! The OpenAPI 3.1 document of every route, generated from the typed requests and responses
//! of the handlers (`#[utoipa::path]` on each), served at `GET /api/openapi.json`.
//! `tests/integration/openapi.rs` keeps a snapshot of it, so a change of the API shows in review.

use axum::http::header;
use axum::response::IntoResponse;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::error::{InternalError, StoreUnavailable};
use super::{agents, alerts, auth, health, invitations, keys, qoe, streams, telemetry, waitlist};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "streamwatch",
        description = "Stream monitoring and player telemetry. The contract is interface.md; \
                       decisions.md decides what it leaves open.",
        license(name = "MIT"),
    ),
    paths(
        auth::sign_up, auth::sign_in, auth::sign_out, auth::get_session, auth::change_password,
        invitations::create, invitations::list, invitations::revoke,
        streams::create, streams::list, streams::get, streams::update, streams::delete,
        agents::feed,
        keys::create, keys::list, keys::revoke,
        telemetry::ingest, telemetry::sessions, telemetry::session_events,
        qoe::overview, qoe::timeseries, qoe::breakdown, qoe::views, qoe::timeline,
        alerts::create_channel, alerts::list_channels, alerts::update_channel, alerts::delete_channel,
        alerts::test_channel, alerts::rotate_secret,
        alerts::create_rule, alerts::list_rules, alerts::update_rule, alerts::delete_rule,
        alerts::list_incidents, alerts::list_deliveries, alerts::resend,
        waitlist::join,
        health::healthz, health::readyz,
    ),
    components(responses(InternalError, StoreUnavailable)),
    modifiers(&Security),
    tags(
        (name = "accounts", description = "Sign-up, sign-in and the session cookie (better-auth's routes); the owner's invitations"),
        (name = "streams", description = "Monitored streams and their health snapshot"),
        (name = "agents", description = "The agent feed: probes explained"),
        (name = "keys", description = "API keys for the player SDK"),
        (name = "telemetry", description = "Player telemetry: ingest and read-back"),
        (name = "qoe", description = "Quality of experience of the caller's views (analytics.md)"),
        (name = "alerts", description = "Alert rules, channels, incidents and the delivery log (alerts.md)"),
        (name = "waitlist", description = "The landing page's waitlist"),
        (name = "operations", description = "Liveness and readiness"),
    ),
)]
pub struct ApiDoc;

/// The two credentials: the session cookie (cookie routes) and the API key (telemetry).
struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "session",
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
                "auth.session_token",
                "The session cookie set by sign-up and sign-in",
            ))),
        );
        components.add_security_scheme(
            "apiKey",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "An API key `svc_…`; the body's `apiKey` must equal it",
                    ))
                    .build(),
            ),
        );
    }
}

/// The document, with the service's version.
pub fn spec() -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    doc.info.version = env!("CARGO_PKG_VERSION").to_owned();
    doc
}

/// `GET /api/openapi.json`.
pub async fn document() -> impl IntoResponse {
    let body = spec().to_pretty_json().unwrap_or_default();
    ([(header::CONTENT_TYPE, "application/json")], body)
}
