//! The OpenAPI document (`GET /api/openapi.json`): OpenAPI 3.1, every route, and identical to
//! the reviewed snapshot in `docs/openapi.json`. An intended API change regenerates it with
//! `UPDATE_OPENAPI=1 cargo test --test integration openapi::` and shows in the diff.

use crate::common;

use reqwest::StatusCode;
use serde_json::Value;

const SNAPSHOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/openapi.json");

#[tokio::test]
async fn the_document_is_served_and_matches_its_snapshot() {
    let app = common::spawn_app(common::Engine::Sqlite).await;
    let r = app.get("/api/openapi.json", None).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["content-type"], "application/json");
    let text = r.text().await.expect("body");
    let doc: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(doc["info"]["version"], env!("CARGO_PKG_VERSION"));
    // Every route of the service (the dashboard's pages and static files aside).
    let paths: Vec<&str> = doc["paths"]
        .as_object()
        .expect("paths")
        .keys()
        .map(String::as_str)
        .collect();
    for route in [
        "/api/auth/sign-up/email",
        "/api/auth/sign-in/email",
        "/api/auth/sign-out",
        "/api/auth/get-session",
        "/api/auth/change-password",
        "/api/v1/invitations",
        "/api/v1/invitations/{id}",
        "/api/v1/streams",
        "/api/v1/streams/{id}",
        "/api/v1/agents",
        "/api/v1/keys",
        "/api/v1/keys/{id}",
        "/api/v1/telemetry",
        "/api/v1/telemetry/sessions",
        "/api/v1/telemetry/sessions/{id}/events",
        "/api/waitlist",
        "/healthz",
        "/readyz",
    ] {
        assert!(paths.contains(&route), "{route} is not documented");
    }
    // The exact error bodies are part of the document.
    for schema in ["ErrorBody", "FieldErrorsBody", "AuthErrorBody"] {
        assert!(doc["components"]["schemas"][schema].is_object(), "{schema}");
    }
    if std::env::var_os("UPDATE_OPENAPI").is_some() {
        std::fs::write(SNAPSHOT, format!("{text}\n")).expect("write the snapshot");
    }
    let snapshot = std::fs::read_to_string(SNAPSHOT).expect("docs/openapi.json");
    assert!(
        snapshot.trim_end() == text.trim_end(),
        "GET /api/openapi.json differs from docs/openapi.json; if the API change is intended, \
         run `UPDATE_OPENAPI=1 cargo test --test integration openapi::` and review the diff"
    );
}
