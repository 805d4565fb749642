//! `/healthz` (liveness) and `/readyz` (readiness) — decisions.md §11. Not API routes: load
//! balancers and process supervisors read them.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use super::AppState;
use crate::telemetry::SpoolCheck;

/// `{ "status": "ok" }`.
#[derive(Serialize, ToSchema)]
pub struct HealthBody {
    #[schema(example = "ok")]
    pub status: &'static str,
}

/// Whether both stores answer, and why not.
#[derive(Serialize, ToSchema)]
pub struct ReadyBody {
    /// `ready` or `unready`.
    #[schema(example = "ready")]
    pub status: &'static str,
    pub checks: ReadyChecks,
}

/// `ok`, or the reason a store does not answer (never a URL or a credential). With the spool
/// on, `telemetry` is `ok`, `spooling (<cause>)` (ready: batches wait in the spool) or
/// `spool full` (unready).
#[derive(Serialize, ToSchema)]
pub struct ReadyChecks {
    #[schema(example = "ok")]
    pub database: String,
    #[schema(example = "connection refused")]
    pub telemetry: String,
}

/// Liveness: 200 while the process runs. It touches no store, so a supervisor does not
/// restart a healthy process because a database is down.
#[utoipa::path(get, path = "/healthz", operation_id = "healthz", tag = "operations",
    responses((status = 200, body = HealthBody)))]
pub async fn healthz() -> Json<HealthBody> {
    Json(HealthBody { status: "ok" })
}

/// Readiness: 200 when the relational store and the telemetry store both answer, else 503
/// with the reason per store (the service's only 503). With the spool on, telemetry is ready
/// while the spool has room, whether ClickHouse answers or not.
#[utoipa::path(get, path = "/readyz", operation_id = "readyz", tag = "operations",
    responses(
        (status = 200, description = "Both stores answer", body = ReadyBody),
        (status = 503, description = "A store does not answer", body = ReadyBody),
    ))]
pub async fn readyz(State(state): State<Arc<AppState>>) -> (StatusCode, Json<ReadyBody>) {
    let database = state.db.ping().await;
    // With the spool on, telemetry is acknowledged while ClickHouse cannot take writes
    // (scale.md §3): unready only once the spool is full.
    let (telemetry_ok, telemetry) = match state.intake.spooling() {
        Some(spooling) => match spooling.check(&state.sink) {
            SpoolCheck::Ok => (true, "ok".to_owned()),
            SpoolCheck::Spooling(cause) => (true, format!("spooling ({cause})")),
            SpoolCheck::Full => (false, "spool full".to_owned()),
        },
        None => match state.sink.health() {
            ingest::Health::Ready => (true, "ok".to_owned()),
            ingest::Health::Unready(reason) => (false, reason),
        },
    };
    let ready = database.is_ok() && telemetry_ok;
    let body = ReadyBody {
        status: if ready { "ready" } else { "unready" },
        checks: ReadyChecks {
            database: database.err().unwrap_or_else(|| "ok".to_owned()),
            telemetry,
        },
    };
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body))
}
