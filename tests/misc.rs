//! Waitlist (decisions.md §9), health, and the contract's error rules for unknown routes.

mod common;

use common::{parts, set_cookie_header, Body, TestApp};
use reqwest::{Method, StatusCode};
use serde_json::json;
use sqlx::Row;

async fn waitlist_stores_each_address_once(app: TestApp) {
    for email in ["fan@example.com", "FAN@example.com ", "fan@example.com"] {
        let r = app
            .post("/api/waitlist", None, json!({ "email": email }))
            .await;
        assert!(
            set_cookie_header(r.headers()).is_none(),
            "no credential issued"
        );
        assert_eq!(r.status(), StatusCode::NO_CONTENT);
        assert_eq!(r.text().await.expect("body"), "");
    }
    let bad = (
        StatusCode::BAD_REQUEST,
        json!({ "errors": { "email": "Invalid email" } }),
    );
    for body in [
        json!({}),
        json!({ "email": "nope" }),
        json!({ "email": 5 }),
        json!({ "email": "" }),
    ] {
        assert_eq!(
            parts(app.post("/api/waitlist", None, body.clone()).await).await,
            bad,
            "{body}"
        );
    }
    let r = app
        .send(
            Method::POST,
            "/api/waitlist",
            None,
            Some(Body::Raw("{oops".into())),
        )
        .await;
    assert_eq!(parts(r).await, bad);
    let n: i64 = sqlx::query("SELECT COUNT(*) FROM waitlist")
        .fetch_one(&app.state.db.pool)
        .await
        .expect("count")
        .get(0);
    assert_eq!(n, 1);
}

async fn unknown_routes_and_methods_are_json_404s(app: TestApp) {
    let nf = (StatusCode::NOT_FOUND, json!({ "error": "Not Found" }));
    for (m, p) in [
        (Method::GET, "/api/v1/nope"),
        (Method::GET, "/api/nope"),
        (Method::POST, "/api/v2/streams"),
        (Method::DELETE, "/api/v1/streams"),
        (Method::PUT, "/api/v1/keys"),
        (Method::GET, "/api/auth/sign-up/email"),
    ] {
        assert_eq!(
            parts(app.send(m.clone(), p, None, None).await).await,
            nf,
            "{m} {p}"
        );
    }
}

async fn healthz_answers(app: TestApp) {
    assert_eq!(
        parts(app.get("/healthz", None).await).await,
        (StatusCode::OK, json!({ "status": "ok" }))
    );
}

on_both_engines!(
    waitlist_stores_each_address_once,
    unknown_routes_and_methods_are_json_404s,
    healthz_answers
);

#[tokio::test]
async fn serves_the_sdk_bundle_at_its_cdn_paths() {
    let app = common::spawn_app(common::Engine::Sqlite).await;
    let bundle = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/sdk/dist/index.js"))
        .expect("bundle");
    for (path, cache) in [
        (
            "/sdk/@service/player-sdk@0.1.0/dist/index.js",
            "public, max-age=31536000, immutable",
        ),
        (
            "/sdk/@service/player-sdk@latest/dist/index.js",
            "public, max-age=300",
        ),
    ] {
        let r = app.get(path, None).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(
            r.headers()["content-type"],
            "text/javascript; charset=utf-8"
        );
        assert_eq!(r.headers()["cache-control"], cache);
        assert_eq!(r.headers()["access-control-allow-origin"], "*");
        assert_eq!(r.text().await.expect("body"), bundle);
    }
    let r = app.get("/", None).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.text().await.expect("body").contains("/api/waitlist"));
    assert_eq!(
        app.get("/sdk/@service/player-sdk@9.9.9/dist/index.js", None)
            .await
            .status(),
        StatusCode::NOT_FOUND
    );
}

#[test]
fn served_sdk_version_is_the_package_version() {
    let pkg: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/sdk/package.json"))
            .expect("package.json"),
    )
    .expect("json");
    assert_eq!(pkg["version"], streamwatch::http::assets::SDK_VERSION);
}
