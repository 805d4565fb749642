//! Streams routes (interface.md "Streams", decisions.md §5): upsert, defaults, validation,
//! the SSRF guard at registration, list order and size, read, rename.

use crate::common;
use crate::on_both_engines;

use common::{is_iso_ms, parts, spawn_with, Body, Engine, TestApp};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sqlx::Row;

const SRC: &str = "http://127.0.0.1:9/live/master.m3u8";

fn errors(field: &str, msg: &str) -> Value {
    json!({ "errors": { field: msg } })
}

async fn count_streams(app: &TestApp) -> i64 {
    sqlx::query("SELECT COUNT(*) FROM streams")
        .fetch_one(&app.state.db.pool)
        .await
        .expect("count")
        .get(0)
}

async fn registers_a_stream_with_the_initial_snapshot(app: TestApp) {
    let cookie = app.user("op@example.com").await;
    let r = app
        .post(
            "/api/v1/streams",
            Some(&cookie),
            json!({ "sourceUrl": SRC, "name": "Main", "targetRegion": "eu-west" }),
        )
        .await;
    let (s, item) = parts(r).await;
    assert_eq!(s, StatusCode::CREATED);
    let id = item["id"].as_str().expect("id").to_owned();
    assert!(is_iso_ms(&item["createdAt"]));
    assert_eq!(
        item,
        json!({
            "id": id, "sourceUrl": SRC, "name": "Main", "targetRegion": "eu-west",
            "createdAt": item["createdAt"], "agentState": "healthy", "status": "watching",
            "lastAction": "registered", "lastCheckedAt": null, "uptimePct": 100.0
        })
    );
    // Upsert: the same URL returns the existing row, 201, whatever else the body says.
    let (s2, again) = parts(
        app.post(
            "/api/v1/streams",
            Some(&cookie),
            json!({ "sourceUrl": SRC, "name": "Other" }),
        )
        .await,
    )
    .await;
    assert_eq!((s2, &again), (StatusCode::CREATED, &item));
    assert_eq!(count_streams(&app).await, 1);

    let (s, status) = parts(
        app.get(&format!("/api/v1/streams/{id}"), Some(&cookie))
            .await,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        status,
        json!({ "id": id, "sourceUrl": SRC, "agentState": "healthy", "uptimePct": 100.0, "lastAction": "registered", "lastCheckedAt": null })
    );
}

async fn omitted_name_and_region_get_defaults(app: TestApp) {
    let cookie = app.user("op@example.com").await;
    let item = app
        .stream(&cookie, "http://127.0.0.1:9/live/master.m3u8?token=abc")
        .await;
    assert_eq!(item["name"], "127.0.0.1/live/master.m3u8");
    assert_eq!(item["targetRegion"], "auto");
    // Userinfo is allowed in the URL.
    let item = app.stream(&cookie, "http://user:pw@127.0.0.2:9/").await;
    assert_eq!(item["name"], "127.0.0.2");
}

async fn invalid_bodies_are_refused_and_nothing_is_stored(app: TestApp) {
    let cookie = app.user("op@example.com").await;
    let long = "n".repeat(121);
    let cases = [
        (json!({}), errors("sourceUrl", "Required")),
        (
            json!({ "sourceUrl": 42 }),
            errors("sourceUrl", "Expected string, received number"),
        ),
        (
            json!({ "sourceUrl": "not a url" }),
            errors("sourceUrl", "Must be a valid URL"),
        ),
        (
            json!({ "sourceUrl": "/relative/path.m3u8" }),
            errors("sourceUrl", "Must be a valid URL"),
        ),
        (
            json!({ "sourceUrl": SRC, "name": long }),
            errors("name", "String must contain at most 120 character(s)"),
        ),
        (
            json!({ "sourceUrl": SRC, "name": null }),
            errors("name", "Expected string, received null"),
        ),
        (
            json!({ "sourceUrl": SRC, "targetRegion": ["eu"] }),
            errors("targetRegion", "Expected string, received array"),
        ),
        (
            json!({ "sourceUrl": "nope", "name": "x".repeat(200) }),
            json!({ "errors": { "sourceUrl": "Must be a valid URL", "name": "String must contain at most 120 character(s)" } }),
        ),
    ];
    for (body, expected) in cases {
        let (s, b) = parts(
            app.post("/api/v1/streams", Some(&cookie), body.clone())
                .await,
        )
        .await;
        assert_eq!((s, b), (StatusCode::BAD_REQUEST, expected), "{body}");
    }
    for (raw, msg) in [
        ("", "Required"),
        ("{oops", "Invalid JSON"),
        ("[1,2]", "Expected object, received array"),
        ("\"x\"", "Expected object, received string"),
    ] {
        let r = app
            .send(
                Method::POST,
                "/api/v1/streams",
                Some(&cookie),
                Some(Body::Raw(raw.into())),
            )
            .await;
        assert_eq!(
            parts(r).await,
            (StatusCode::BAD_REQUEST, errors("body", msg))
        );
    }
    let huge = format!(
        "{{\"sourceUrl\":\"{SRC}\",\"name\":\"{}\"}}",
        "x".repeat(70_000)
    );
    let r = app
        .send(
            Method::POST,
            "/api/v1/streams",
            Some(&cookie),
            Some(Body::Raw(huge)),
        )
        .await;
    assert_eq!(
        parts(r).await,
        (
            StatusCode::BAD_REQUEST,
            errors("body", "Body must be at most 65536 bytes")
        )
    );
    // Exactly 120 characters (not bytes) is allowed.
    let ok = app
        .post(
            "/api/v1/streams",
            Some(&cookie),
            json!({ "sourceUrl": SRC, "name": "é".repeat(120) }),
        )
        .await;
    assert_eq!(ok.status(), StatusCode::CREATED);
    assert_eq!(count_streams(&app).await, 1);
}

/// The guard at registration, through the route, on an app without an allow-list.
#[tokio::test]
async fn ssrf_guard_refuses_private_targets_at_registration() {
    let app = spawn_with(Engine::Sqlite, |c| c.allow_private = Default::default()).await;
    let cookie = app.user("op@example.com").await;
    let private = |ip: &str| format!("Hostname resolves to a private address ({ip})");
    let cases: Vec<(&str, String)> = vec![
        ("http://127.0.0.1/a.m3u8", private("127.0.0.1")),
        ("http://localhost:8080/a.m3u8", private("127.0.0.1")),
        ("http://LOCALHOST./a.m3u8", private("127.0.0.1")),
        ("http://10.1.2.3/a.m3u8", private("10.1.2.3")),
        ("http://172.16.0.1/a.m3u8", private("172.16.0.1")),
        ("http://192.168.1.1/a.m3u8", private("192.168.1.1")),
        (
            "http://169.254.169.254/latest/meta-data",
            private("169.254.169.254"),
        ),
        ("http://100.64.0.1/", private("100.64.0.1")),
        ("http://2130706433/", private("127.0.0.1")),
        ("http://0177.0.0.1/", private("127.0.0.1")),
        ("http://0x7f.0.0.1/", private("127.0.0.1")),
        ("http://127.1/", private("127.0.0.1")),
        ("http://[::1]/", private("::1")),
        ("http://[::ffff:127.0.0.1]/", private("::ffff:127.0.0.1")),
        ("http://[fd00::1]/", private("fd00::1")),
        ("http://user:pass@10.0.0.1/", private("10.0.0.1")),
        (
            "ftp://example.com/a.m3u8",
            "Only http(s) URLs are allowed".into(),
        ),
        ("file:///etc/passwd", "Only http(s) URLs are allowed".into()),
        (
            "javascript:alert(1)",
            "Only http(s) URLs are allowed".into(),
        ),
        (
            "http://nonexistent.invalid/a.m3u8",
            "Hostname did not resolve".into(),
        ),
    ];
    for (url, msg) in cases {
        let (s, b) = parts(
            app.post(
                "/api/v1/streams",
                Some(&cookie),
                json!({ "sourceUrl": url }),
            )
            .await,
        )
        .await;
        assert_eq!(
            (s, b),
            (StatusCode::BAD_REQUEST, errors("sourceUrl", &msg)),
            "{url}"
        );
    }
    assert_eq!(count_streams(&app).await, 0);
}

async fn lists_the_fifty_newest_first(app: TestApp) {
    let cookie = app.user("op@example.com").await;
    let mut ids = Vec::new();
    for i in 0..55 {
        ids.push(
            app.stream(&cookie, &format!("http://127.0.0.1:9/s{i}.m3u8"))
                .await["id"]
                .as_str()
                .expect("id")
                .to_owned(),
        );
    }
    let (s, b) = parts(app.get("/api/v1/streams", Some(&cookie)).await).await;
    assert_eq!(s, StatusCode::OK);
    let items = b["items"].as_array().expect("items");
    assert_eq!(items.len(), 50);
    let listed: Vec<&str> = items
        .iter()
        .map(|i| i["id"].as_str().expect("id"))
        .collect();
    let expected: Vec<&str> = ids.iter().rev().take(50).map(String::as_str).collect();
    assert_eq!(listed, expected);
    // Streams are shared by every signed-in user.
    let other = app.user("other@example.com").await;
    let (_, b2) = parts(app.get("/api/v1/streams", Some(&other)).await).await;
    assert_eq!(b2, b);
}

async fn patch_changes_only_name_and_region(app: TestApp) {
    let cookie = app.user("op@example.com").await;
    let item = app.stream(&cookie, SRC).await;
    let id = item["id"].as_str().expect("id");
    let path = format!("/api/v1/streams/{id}");

    let (s, b) = parts(
        app.patch(&path, Some(&cookie), json!({ "name": "Renamed" }))
            .await,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let mut expected = item.clone();
    expected["name"] = json!("Renamed");
    assert_eq!(b, expected);

    let (_, b) = parts(
        app.patch(
            &path,
            Some(&cookie),
            json!({ "targetRegion": "us-east", "sourceUrl": "http://127.0.0.1:9/other.m3u8" }),
        )
        .await,
    )
    .await;
    expected["targetRegion"] = json!("us-east");
    assert_eq!(b, expected, "sourceUrl is not changeable");
    // Idempotent, and an empty body changes nothing.
    assert_eq!(
        parts(
            app.patch(&path, Some(&cookie), json!({ "targetRegion": "us-east" }))
                .await
        )
        .await
        .1,
        expected
    );
    assert_eq!(
        parts(app.patch(&path, Some(&cookie), json!({})).await)
            .await
            .1,
        expected
    );

    let (s, b) = parts(
        app.patch(&path, Some(&cookie), json!({ "name": "x".repeat(121) }))
            .await,
    )
    .await;
    assert_eq!(
        (s, b),
        (
            StatusCode::BAD_REQUEST,
            errors("name", "String must contain at most 120 character(s)")
        )
    );
    assert_eq!(
        parts(app.get(&path, Some(&cookie)).await).await.1["sourceUrl"],
        SRC
    );
}

async fn unknown_ids_are_not_found(app: TestApp) {
    let cookie = app.user("op@example.com").await;
    let nf = (StatusCode::NOT_FOUND, json!({ "error": "Not Found" }));
    assert_eq!(
        parts(app.get("/api/v1/streams/nope", Some(&cookie)).await).await,
        nf
    );
    assert_eq!(
        parts(
            app.patch(
                "/api/v1/streams/nope",
                Some(&cookie),
                json!({ "name": "x" })
            )
            .await
        )
        .await,
        nf
    );
}

async fn every_cookie_route_requires_a_session(app: TestApp) {
    let unauthorized = (StatusCode::UNAUTHORIZED, json!({ "error": "Unauthorized" }));
    let cookie = app.user("op@example.com").await;
    let minted: Value = app
        .post("/api/v1/keys", Some(&cookie), json!({ "label": "k" }))
        .await
        .json()
        .await
        .expect("json");
    let raw = minted["rawKey"].as_str().expect("raw");
    for (method, path) in [
        (Method::POST, "/api/v1/streams"),
        (Method::GET, "/api/v1/streams"),
        (Method::GET, "/api/v1/streams/x"),
        (Method::PATCH, "/api/v1/streams/x"),
        (Method::GET, "/api/v1/agents"),
        (Method::POST, "/api/v1/keys"),
        (Method::GET, "/api/v1/keys"),
        (Method::DELETE, "/api/v1/keys/x"),
    ] {
        let r = app
            .send(
                method.clone(),
                path,
                None,
                Some(Body::Json(json!({ "sourceUrl": SRC, "label": "x" }))),
            )
            .await;
        assert_eq!(parts(r).await, unauthorized, "{method} {path}");
        // A bearer key is not a cookie.
        let r = app
            .http
            .request(method.clone(), app.url(path))
            .bearer_auth(raw)
            .json(&json!({ "label": "x" }))
            .send()
            .await
            .expect("send");
        assert_eq!(parts(r).await, unauthorized, "{method} {path} with bearer");
    }
    assert_eq!(count_streams(&app).await, 0);
}

/// Text fields refuse U+0000, other control characters and Unicode format characters with a
/// field message, the same on both engines (PostgreSQL used to answer 500), and store nothing.
async fn control_and_format_characters_are_refused_on_every_engine(app: TestApp) {
    let cookie = app.user("op@example.com").await;
    let msg = "String must not contain control or invisible formatting characters";
    for bad in [
        "a\u{0}b",
        "tab\tname",
        "zero\u{200b}width",
        "\u{feff}bom",
        "rtl\u{202e}x",
    ] {
        for (field, body) in [
            ("name", json!({ "sourceUrl": SRC, "name": bad })),
            (
                "targetRegion",
                json!({ "sourceUrl": SRC, "targetRegion": bad }),
            ),
            (
                "sourceUrl",
                json!({ "sourceUrl": format!("http://127.0.0.1:9/{bad}.m3u8") }),
            ),
        ] {
            let (s, b) = parts(app.post("/api/v1/streams", Some(&cookie), body).await).await;
            assert_eq!(
                (s, b),
                (StatusCode::BAD_REQUEST, errors(field, msg)),
                "{field} {bad:?}"
            );
        }
    }
    assert_eq!(count_streams(&app).await, 0);
    let item = app.stream(&cookie, SRC).await;
    let id = item["id"].as_str().expect("id");
    let (s, b) = parts(
        app.patch(
            &format!("/api/v1/streams/{id}"),
            Some(&cookie),
            json!({ "name": "x\u{0}" }),
        )
        .await,
    )
    .await;
    assert_eq!((s, b), (StatusCode::BAD_REQUEST, errors("name", msg)));
}

/// A path id that cannot be a row id (NUL, bad UTF-8, spaces) is the contract's JSON 404 on
/// every route and engine, never a 500 or axum's plain-text 400.
async fn ids_that_cannot_be_row_ids_are_json_404s(app: TestApp) {
    let cookie = app.user("op@example.com").await;
    for id in ["%00", "abc%00def", "%FF", "%C3%28", "a%20b", "%E2%80%8B"] {
        for method in [Method::GET, Method::PATCH, Method::DELETE] {
            let body = (method == Method::PATCH).then(|| Body::Json(json!({ "name": "x" })));
            let r = app
                .send(
                    method.clone(),
                    &format!("/api/v1/streams/{id}"),
                    Some(&cookie),
                    body,
                )
                .await;
            assert_eq!(
                parts(r).await,
                (StatusCode::NOT_FOUND, json!({ "error": "Not Found" })),
                "{method} {id}"
            );
        }
        let r = app
            .delete(&format!("/api/v1/keys/{id}"), Some(&cookie))
            .await;
        assert_eq!(
            parts(r).await,
            (StatusCode::NOT_FOUND, json!({ "error": "Not Found" })),
            "key {id}"
        );
        let r = app
            .get(
                &format!("/api/v1/telemetry/sessions/{id}/events"),
                Some(&cookie),
            )
            .await;
        assert_eq!(
            parts(r).await,
            (StatusCode::NOT_FOUND, json!({ "error": "Not Found" })),
            "session {id}"
        );
    }
}

/// `DELETE /api/v1/streams/{id}` (decisions.md v1.1 §6): 204, the stream, its probes and its
/// rollups are gone, it is never listed or probed again; unknown ids are 404.
async fn deleting_a_stream_removes_it_with_its_probes(app: TestApp) {
    let cookie = app.user("op@example.com").await;
    let item = app.stream(&cookie, SRC).await;
    let keep = app.stream(&cookie, "http://127.0.0.1:9/other.m3u8").await;
    let id = item["id"].as_str().expect("id").to_owned();
    let probes = streamwatch::probes::Probes::new(app.state.db.clone());
    let now = streamwatch::time::now_ms();
    for (sid, at) in [
        (&id, now - 1000),
        (&id, now),
        (&keep["id"].as_str().expect("id").to_owned(), now),
    ] {
        probes
            .record(&streamwatch::probes::NewProbe {
                stream_id: sid.clone(),
                status: streamwatch::probes::ProbeStatus::Failing,
                anomaly_class: streamwatch::states::AnomalyClass::ServerError,
                latency_ms: 5,
                http_status: Some(503),
                detail: "HTTP 503".into(),
                created_at: at,
                playable: false,
                last_action: "opened incident: 5xx server error".into(),
                next_probe_at: at + 7500,
            })
            .await
            .expect("record")
            .expect("exists");
    }
    let r = app
        .delete(&format!("/api/v1/streams/{id}"), Some(&cookie))
        .await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert_eq!(r.text().await.expect("body"), "");
    let count = |sql: &'static str| {
        let (db, id) = (app.state.db.clone(), id.clone());
        async move {
            sqlx::query(sql)
                .bind(id)
                .fetch_one(&db.pool)
                .await
                .expect("count")
                .get::<i64, _>(0)
        }
    };
    assert_eq!(count("SELECT COUNT(*) FROM streams WHERE id = $1").await, 0);
    assert_eq!(
        count("SELECT COUNT(*) FROM probes WHERE stream_id = $1").await,
        0
    );
    assert_eq!(
        count("SELECT COUNT(*) FROM probe_rollups WHERE stream_id = $1").await,
        0
    );
    assert_eq!(count_streams(&app).await, 1, "the other stream stays");
    for (method, path) in [
        (Method::GET, format!("/api/v1/streams/{id}")),
        (Method::DELETE, format!("/api/v1/streams/{id}")),
    ] {
        let r = app.send(method, &path, Some(&cookie), None).await;
        assert_eq!(
            parts(r).await,
            (StatusCode::NOT_FOUND, json!({ "error": "Not Found" }))
        );
    }
    let (_, list) = parts(app.get("/api/v1/streams", Some(&cookie)).await).await;
    assert_eq!(list["items"].as_array().expect("items").len(), 1);
    let (_, feed) = parts(app.get("/api/v1/agents", Some(&cookie)).await).await;
    assert!(feed["items"]
        .as_array()
        .expect("items")
        .iter()
        .all(|i| i["streamId"] != id));
    // The prober can no longer claim it.
    let claimed = probes
        .claim_due(now + 1_000_000, now + 1_060_000, 10)
        .await
        .expect("claim");
    assert!(claimed.iter().all(|d| d.id != id));
    // Deleting needs a session like every stream route.
    let r = app
        .delete(
            &format!("/api/v1/streams/{}", keep["id"].as_str().expect("id")),
            None,
        )
        .await;
    assert_eq!(
        parts(r).await,
        (StatusCode::UNAUTHORIZED, json!({ "error": "Unauthorized" }))
    );
}

/// One user may register at most STREAMWATCH_MAX_STREAMS_PER_USER streams (decisions.md §10);
/// an already registered URL is still returned, other users have their own allowance, and a
/// deleted stream frees a place. Racing registrations cannot overshoot the cap.
async fn streams_per_user_are_capped(engine: Engine) {
    let app = spawn_with(engine, |c| c.max_streams_per_user = 3).await;
    let cookie = app.user("op@example.com").await;
    let url = |i: usize| format!("http://127.0.0.1:9/s{i}.m3u8");
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(
            app.stream(&cookie, &url(i)).await["id"]
                .as_str()
                .expect("id")
                .to_owned(),
        );
    }
    let (s, b) = parts(
        app.post(
            "/api/v1/streams",
            Some(&cookie),
            json!({ "sourceUrl": url(3) }),
        )
        .await,
    )
    .await;
    assert_eq!(
        (s, b),
        (
            StatusCode::BAD_REQUEST,
            errors("sourceUrl", "Stream limit reached (3)")
        )
    );
    assert_eq!(count_streams(&app).await, 3);
    // Upsert of a known URL is not a new stream.
    let (s, again) = parts(
        app.post(
            "/api/v1/streams",
            Some(&cookie),
            json!({ "sourceUrl": url(0) }),
        )
        .await,
    )
    .await;
    assert_eq!(
        (s, again["id"].as_str()),
        (StatusCode::CREATED, Some(ids[0].as_str()))
    );
    // Another user has an allowance of their own.
    let other = app.user("other@example.com").await;
    app.stream(&other, &url(10)).await;
    // Deleting frees a place.
    let r = app
        .delete(&format!("/api/v1/streams/{}", ids[2]), Some(&cookie))
        .await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    app.stream(&cookie, &url(3)).await;
    // Twenty racing registrations of new URLs by a fresh user: exactly three land.
    let racer = app.user("racer@example.com").await;
    let results = futures_util::future::join_all((100..120).map(|i| {
        let (app, racer) = (&app, &racer);
        async move {
            app.post(
                "/api/v1/streams",
                Some(racer),
                json!({ "sourceUrl": url(i) }),
            )
            .await
            .status()
        }
    }))
    .await;
    let created = results
        .iter()
        .filter(|s| **s == StatusCode::CREATED)
        .count();
    let refused = results
        .iter()
        .filter(|s| **s == StatusCode::BAD_REQUEST)
        .count();
    assert_eq!((created, refused), (3, 17), "{results:?}");
}

mod streams_per_user_are_capped {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        super::streams_per_user_are_capped(super::Engine::Sqlite).await
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        super::streams_per_user_are_capped(super::Engine::Postgres).await
    }
}

on_both_engines!(
    control_and_format_characters_are_refused_on_every_engine,
    ids_that_cannot_be_row_ids_are_json_404s,
    deleting_a_stream_removes_it_with_its_probes,
    registers_a_stream_with_the_initial_snapshot,
    omitted_name_and_region_get_defaults,
    invalid_bodies_are_refused_and_nothing_is_stored,
    lists_the_fifty_newest_first,
    patch_changes_only_name_and_region,
    unknown_ids_are_not_found,
    every_cookie_route_requires_a_session,
);
