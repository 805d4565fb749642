//! API keys (interface.md "API keys", decisions.md §8): mint once, list per user newest first,
//! soft revoke, 404 for ids that are not the caller's, SHA-256 at rest.

use crate::common;
use crate::on_both_engines;

use common::{is_iso_ms, parts, TestApp};
use reqwest::StatusCode;
use serde_json::{json, Value};
use sqlx::Row;

async fn mint(app: &TestApp, cookie: &str, label: &str) -> Value {
    let (s, b) = parts(
        app.post("/api/v1/keys", Some(cookie), json!({ "label": label }))
            .await,
    )
    .await;
    assert_eq!(s, StatusCode::CREATED);
    b
}

async fn minted_key_is_shown_once_and_stored_hashed(app: TestApp) {
    let cookie = app.user("dev@example.com").await;
    let b = mint(&app, &cookie, "web player").await;
    let raw = b["rawKey"].as_str().expect("rawKey").to_owned();
    assert!(raw.starts_with("svc_") && raw.len() >= 4 + 43, "{raw}");
    assert!(is_iso_ms(&b["createdAt"]));
    assert_eq!(
        b,
        json!({ "id": b["id"], "label": "web player", "rawKey": raw, "createdAt": b["createdAt"] })
    );

    let stored: String = sqlx::query("SELECT key_hash FROM api_keys")
        .fetch_one(&app.state.db.pool)
        .await
        .expect("row")
        .get(0);
    assert_eq!(stored, streamwatch::accounts::token::sha256_hex(&raw));
    let (_, list) = parts(app.get("/api/v1/keys", Some(&cookie)).await).await;
    assert_eq!(
        list,
        json!({ "items": [{ "id": b["id"], "label": "web player", "createdAt": b["createdAt"], "lastUsedAt": null, "revokedAt": null }] })
    );
    assert!(!list.to_string().contains(&raw), "raw key never listed");
}

async fn list_is_per_user_newest_first_with_revoked_rows(app: TestApp) {
    let alice = app.user("alice@example.com").await;
    let bob = app.user("bob@example.com").await;
    let a1 = mint(&app, &alice, "one").await;
    let a2 = mint(&app, &alice, "two").await;
    let b1 = mint(&app, &bob, "bob's").await;

    let r = app
        .delete(
            &format!("/api/v1/keys/{}", a1["id"].as_str().expect("id")),
            Some(&alice),
        )
        .await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert_eq!(r.text().await.expect("body"), "");

    let (_, list) = parts(app.get("/api/v1/keys", Some(&alice)).await).await;
    let items = list["items"].as_array().expect("items");
    assert_eq!(
        items.iter().map(|k| k["label"].clone()).collect::<Vec<_>>(),
        vec![json!("two"), json!("one")]
    );
    assert_eq!(items[0]["id"], a2["id"]);
    assert!(items[0]["revokedAt"].is_null());
    assert!(is_iso_ms(&items[1]["revokedAt"]));

    let (_, bobs) = parts(app.get("/api/v1/keys", Some(&bob)).await).await;
    assert_eq!(bobs["items"].as_array().expect("items").len(), 1);
    assert_eq!(bobs["items"][0]["id"], b1["id"]);
}

async fn revoke_is_soft_idempotent_and_scoped(app: TestApp) {
    let alice = app.user("alice@example.com").await;
    let bob = app.user("bob@example.com").await;
    let key = mint(&app, &alice, "k").await;
    let path = format!("/api/v1/keys/{}", key["id"].as_str().expect("id"));
    let nf = (StatusCode::NOT_FOUND, json!({ "error": "Not Found" }));

    // Another user's key and an unknown id look the same.
    assert_eq!(parts(app.delete(&path, Some(&bob)).await).await, nf);
    assert_eq!(
        parts(app.delete("/api/v1/keys/unknown", Some(&alice)).await).await,
        nf
    );
    let (_, list) = parts(app.get("/api/v1/keys", Some(&alice)).await).await;
    assert!(
        list["items"][0]["revokedAt"].is_null(),
        "bob could not revoke it"
    );

    assert_eq!(
        app.delete(&path, Some(&alice)).await.status(),
        StatusCode::NO_CONTENT
    );
    let first =
        parts(app.get("/api/v1/keys", Some(&alice)).await).await.1["items"][0]["revokedAt"].clone();
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    assert_eq!(
        app.delete(&path, Some(&alice)).await.status(),
        StatusCode::NO_CONTENT
    );
    let second =
        parts(app.get("/api/v1/keys", Some(&alice)).await).await.1["items"][0]["revokedAt"].clone();
    assert_eq!(first, second, "revokedAt keeps its first value");
}

async fn label_is_validated(app: TestApp) {
    let cookie = app.user("dev@example.com").await;
    for (body, msg) in [
        (json!({}), "Required"),
        (json!({ "label": 3 }), "Expected string, received number"),
        (
            json!({ "label": "x".repeat(121) }),
            "String must contain at most 120 character(s)",
        ),
        // U+0000 used to be a 500 on PostgreSQL (decisions.md §10).
        (
            json!({ "label": "web\u{0}player" }),
            "String must not contain control or invisible formatting characters",
        ),
        (
            json!({ "label": "web\u{200b}player" }),
            "String must not contain control or invisible formatting characters",
        ),
    ] {
        let (s, b) = parts(app.post("/api/v1/keys", Some(&cookie), body.clone()).await).await;
        assert_eq!(
            (s, b),
            (
                StatusCode::BAD_REQUEST,
                json!({ "errors": { "label": msg } })
            ),
            "{body}"
        );
    }
    assert_eq!(
        parts(app.get("/api/v1/keys", Some(&cookie)).await).await.1,
        json!({ "items": [] })
    );
    assert_eq!(
        mint(&app, &cookie, &"x".repeat(120)).await["label"]
            .as_str()
            .map(str::len),
        Some(120)
    );
}

on_both_engines!(
    minted_key_is_shown_once_and_stored_hashed,
    list_is_per_user_newest_first_with_revoked_rows,
    revoke_is_soft_idempotent_and_scoped,
    label_is_validated,
);

/// Key changes wait for the listeners of this deployment only: a listener of another database
/// on the same PostgreSQL cluster (another deployment) is not counted, so it cannot make every
/// mint and revoke wait for acknowledgements that will never come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_changes_count_only_this_databases_listeners() {
    use sqlx::{ConnectOptions, Connection};
    let app = common::spawn_app(common::Engine::Postgres).await;
    // The app's own listener connects in the background.
    let mut own = 0;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        own = app.state.key_cache.live_listeners().await.expect("count");
        if own == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(own, 1, "the app's own listener");
    // Another deployment: a listener with the same name on another database.
    let other_db = common::fresh_pg_database().await;
    let options: sqlx::postgres::PgConnectOptions = other_db.parse().expect("url");
    let mut other = options
        .application_name("streamwatch-keys-another-deployment")
        .connect()
        .await
        .expect("connect");
    sqlx::query("LISTEN streamwatch_keys")
        .execute(&mut other)
        .await
        .expect("listen");
    assert_eq!(
        app.state.key_cache.live_listeners().await.expect("count"),
        1
    );
    // A mint still completes (every listener of this database acknowledged).
    let cookie = app.user("dev@example.com").await;
    assert_eq!(mint(&app, &cookie, "k").await["label"], "k");
    other.close().await.expect("close");
}
