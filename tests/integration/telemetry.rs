//! Telemetry ingest through the real route (interface.md "Telemetry ingest", decisions.md §7),
//! on both sinks: the embedded SQLite store and ClickHouse (a fresh database per test).

use crate::common;

use std::path::PathBuf;

use common::{parts, spawn_with, Engine, TestApp};
use reqwest::{Method, StatusCode};

use serde_json::{json, Value};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sink {
    Sqlite,
    ClickHouse,
}

pub fn clickhouse_url() -> String {
    std::env::var("CLICKHOUSE_URL").unwrap_or_else(|_| "http://127.0.0.1:8123".into())
}

async fn spawn(sink: Sink) -> TestApp {
    spawn_engine(sink, Engine::Sqlite).await
}

async fn spawn_engine(sink: Sink, engine: Engine) -> TestApp {
    match sink {
        Sink::Sqlite => spawn_with(engine, |_| {}).await,
        Sink::ClickHouse => spawn_clickhouse(&common::test_db_name()).await,
    }
}

/// An app whose telemetry goes to the ClickHouse database `db` (created on start).
async fn spawn_clickhouse(db: &str) -> TestApp {
    spawn_with(Engine::Sqlite, |c| {
        c.clickhouse_url = Some(clickhouse_url());
        c.clickhouse_database = db.to_owned();
    })
    .await
}

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("ingest/fixtures")
}

fn fixture(name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixtures().join(name)).expect("fixture"))
        .expect("json")
}

fn invalid_key() -> (StatusCode, Value) {
    (
        StatusCode::UNAUTHORIZED,
        json!({ "error": "Invalid API key" }),
    )
}

/// A signed-in user with one API key: (cookie, raw key, key id).
async fn account(app: &TestApp, email: &str) -> (String, String, String) {
    let cookie = app.user(email).await;
    let (s, b) = parts(
        app.post("/api/v1/keys", Some(&cookie), json!({ "label": "player" }))
            .await,
    )
    .await;
    assert_eq!(s, StatusCode::CREATED);
    (
        cookie,
        b["rawKey"].as_str().expect("raw").to_owned(),
        b["id"].as_str().expect("id").to_owned(),
    )
}

async fn post_batch(app: &TestApp, bearer: Option<&str>, body: &Value) -> (StatusCode, Value) {
    let mut req = app.http.post(app.url("/api/v1/telemetry")).json(body);
    if let Some(k) = bearer {
        req = req.bearer_auth(k);
    }
    parts(req.send().await.expect("send")).await
}

fn batch(key: &str, session: &str, events: Vec<Value>) -> Value {
    json!({ "apiKey": key, "sessionId": session, "events": events })
}

fn ev(kind: &str, ts: &str, payload: Value) -> Value {
    json!({ "type": kind, "ts": ts, "payload": payload })
}

async fn events_of(app: &TestApp, cookie: &str, session: &str) -> (StatusCode, Value) {
    parts(
        app.get(
            &format!("/api/v1/telemetry/sessions/{session}/events"),
            Some(cookie),
        )
        .await,
    )
    .await
}

async fn accepts_every_event_type_and_reads_it_back(app: TestApp) {
    let (cookie, key, _) = account(&app, "dev@example.com").await;
    let mut body = fixture("valid/all-event-types.json");
    body["apiKey"] = json!(key);
    // Unknown fields anywhere are ignored.
    body["events"][0]["payload"]["extra"] = json!("ignored");
    body["client"] = json!({ "v": 1 });
    let session = body["sessionId"].as_str().expect("sid").to_owned();
    assert_eq!(
        post_batch(&app, Some(&key), &body).await,
        (StatusCode::NO_CONTENT, Value::Null)
    );

    let (s, got) = events_of(&app, &cookie, &session).await;
    assert_eq!(s, StatusCode::OK);
    let mut expected = fixture("valid/all-event-types.json")["events"]
        .as_array()
        .expect("events")
        .clone();
    // Same ts for all eight: ties come back ordered by type.
    expected.sort_by(|a, b| a["type"].as_str().cmp(&b["type"].as_str()));
    let mut items = got["items"].as_array().expect("items").clone();
    items.sort_by(|a, b| a["type"].as_str().cmp(&b["type"].as_str()));
    assert_eq!(items, expected);

    let (s, list) = parts(app.get("/api/v1/telemetry/sessions", Some(&cookie)).await).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        list,
        json!({ "items": [{
            "sessionId": session, "contentId": "movie-4821",
            "firstEventAt": "2026-11-21T10:15:30.123Z", "lastEventAt": "2026-11-21T10:15:30.123Z",
            "eventCount": 8,
            "counts": { "playback_start": 1, "playback_pause": 1, "playback_resume": 1, "rebuffer_start": 1,
                        "rebuffer_end": 1, "quality_change": 1, "error": 1, "session_end": 1 }
        }] })
    );
}

async fn every_invalid_fixture_gets_its_400_and_nothing_is_stored(app: TestApp) {
    let (cookie, key, _) = account(&app, "dev@example.com").await;
    let mut checked = 0;
    for entry in std::fs::read_dir(fixtures().join("invalid")).expect("dir") {
        let path = entry.expect("entry").path();
        let f: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
        let body = if f["raw"] == json!(true) {
            f["body"].as_str().expect("raw body").to_owned()
        } else {
            let mut b = f["body"].clone();
            // The bearer is valid; a well-formed body key is made to match it, so only the
            // fixture's own defect can be reported.
            if b.get("apiKey")
                .and_then(Value::as_str)
                .is_some_and(|k| !k.is_empty())
            {
                b["apiKey"] = json!(key);
            }
            b.to_string()
        };
        let r = app
            .http
            .post(app.url("/api/v1/telemetry"))
            .bearer_auth(&key)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("send");
        let (s, b) = parts(r).await;
        assert_eq!(
            s.as_u16() as u64,
            f["expected"]["status"].as_u64().expect("status"),
            "{}",
            path.display()
        );
        assert_eq!(b, f["expected"]["body"], "{}", path.display());
        checked += 1;
    }
    assert!(checked >= 40, "only {checked} invalid fixtures");
    let (_, list) = parts(app.get("/api/v1/telemetry/sessions", Some(&cookie)).await).await;
    assert_eq!(list, json!({ "items": [] }), "nothing stored");
}

async fn bearer_failures_share_one_body(app: TestApp) {
    let (cookie, key, key_id) = account(&app, "dev@example.com").await;
    let (_, other_key, _) = account(&app, "other@example.com").await;
    let body = |k: &str| {
        batch(
            k,
            "s-auth",
            vec![ev(
                "playback_pause",
                "2026-11-21T10:00:00.000Z",
                json!({ "positionMs": 1, "bufferedMs": 2 }),
            )],
        )
    };

    assert_eq!(
        post_batch(&app, None, &body(&key)).await,
        invalid_key(),
        "missing header"
    );
    let r = app
        .http
        .post(app.url("/api/v1/telemetry"))
        .header("authorization", format!("Basic {key}"))
        .json(&body(&key))
        .send()
        .await
        .expect("send");
    assert_eq!(parts(r).await, invalid_key(), "malformed header");
    assert_eq!(
        post_batch(&app, Some("svc_unknown"), &body("svc_unknown")).await,
        invalid_key(),
        "unknown key"
    );
    assert_eq!(
        post_batch(&app, Some(&key), &body(&other_key)).await,
        invalid_key(),
        "body key differs"
    );
    // The cookie is neither required nor trusted.
    let r = app
        .http
        .post(app.url("/api/v1/telemetry"))
        .header("cookie", format!("auth.session_token={cookie}"))
        .json(&body(&key))
        .send()
        .await
        .expect("send");
    assert_eq!(parts(r).await, invalid_key(), "cookie instead of bearer");

    // Works, and is cached; a revoke takes effect on the very next request.
    assert_eq!(
        post_batch(&app, Some(&key), &body(&key)).await.0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        app.delete(&format!("/api/v1/keys/{key_id}"), Some(&cookie))
            .await
            .status(),
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        post_batch(&app, Some(&key), &body(&key)).await,
        invalid_key(),
        "revoked key"
    );
    // Validation comes after the bearer check: a bad body with a bad key is a 401.
    assert_eq!(
        post_batch(&app, Some("svc_unknown"), &json!({})).await,
        invalid_key()
    );
}

async fn repeated_and_overlapping_batches_are_stored_once(app: TestApp) {
    let (cookie, key, _) = account(&app, "dev@example.com").await;
    let e = |i: u32| {
        ev(
            "rebuffer_start",
            &format!("2026-11-21T10:00:{i:02}.000Z"),
            json!({ "positionMs": i, "bufferedMs": 0 }),
        )
    };
    let first = batch(&key, "s-dup", (0..10).map(e).collect());
    let overlap = batch(&key, "s-dup", (5..15).map(e).collect());
    for b in [&first, &first, &overlap, &first] {
        assert_eq!(
            post_batch(&app, Some(&key), b).await.0,
            StatusCode::NO_CONTENT
        );
    }
    let (_, got) = events_of(&app, &cookie, "s-dup").await;
    let ts: Vec<Value> = got["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["ts"].clone())
        .collect();
    let expected: Vec<Value> = (0..15)
        .map(|i| json!(format!("2026-11-21T10:00:{i:02}.000Z")))
        .collect();
    assert_eq!(
        ts, expected,
        "each (sessionId, ts, type) once, ts ascending"
    );
    let (_, list) = parts(app.get("/api/v1/telemetry/sessions", Some(&cookie)).await).await;
    assert_eq!(list["items"][0]["eventCount"], 15);
    assert_eq!(list["items"][0]["counts"]["rebuffer_start"], 15);
}

async fn accounts_never_see_each_other(app: TestApp) {
    let (alice, akey, _) = account(&app, "alice@example.com").await;
    let (bob, bkey, _) = account(&app, "bob@example.com").await;
    let e = ev(
        "session_end",
        "2026-11-21T10:00:00.000Z",
        json!({ "reason": "ended", "durationMs": 10 }),
    );
    assert_eq!(
        post_batch(
            &app,
            Some(&akey),
            &batch(&akey, "shared-id", vec![e.clone()])
        )
        .await
        .0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        post_batch(&app, Some(&bkey), &batch(&bkey, "shared-id", vec![e]))
            .await
            .0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        post_batch(
            &app,
            Some(&akey),
            &batch(
                &akey,
                "alice-only",
                vec![ev(
                    "error",
                    "2026-11-21T10:00:01.000Z",
                    json!({ "code": "x", "message": "y", "fatal": true })
                )]
            )
        )
        .await
        .0,
        StatusCode::NO_CONTENT
    );
    // Same key within an account, one row per account.
    assert_eq!(
        events_of(&app, &alice, "shared-id").await.1["items"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    assert_eq!(
        events_of(&app, &bob, "shared-id").await.1["items"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    assert_eq!(
        events_of(&app, &bob, "alice-only").await,
        (StatusCode::NOT_FOUND, json!({ "error": "Not Found" }))
    );
    assert_eq!(
        parts(app.get("/api/v1/telemetry/sessions", Some(&bob)).await)
            .await
            .1["items"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    assert_eq!(
        parts(app.get("/api/v1/telemetry/sessions", None).await)
            .await
            .0,
        StatusCode::UNAUTHORIZED
    );
}

async fn size_limits_are_400s(app: TestApp) {
    let (cookie, key, _) = account(&app, "dev@example.com").await;
    let e = ev(
        "playback_pause",
        "2026-11-21T10:00:00.000Z",
        json!({ "positionMs": 1, "bufferedMs": 2 }),
    );
    let over = batch(&key, "s-big", vec![e.clone(); 1001]);
    assert_eq!(
        post_batch(&app, Some(&key), &over).await,
        (
            StatusCode::BAD_REQUEST,
            json!({ "errors": { "events": "Array must contain at most 1000 element(s)" } })
        )
    );
    let mut huge = batch(&key, "s-big", vec![e]);
    huge["padding"] = json!("x".repeat(1_100_000));
    let (s, b) = post_batch(&app, Some(&key), &huge).await;
    assert_eq!(
        (s, b),
        (
            StatusCode::BAD_REQUEST,
            json!({ "errors": { "events": "Request body must be at most 1048576 byte(s)" } })
        )
    );
    let (_, list) = parts(app.get("/api/v1/telemetry/sessions", Some(&cookie)).await).await;
    assert_eq!(list, json!({ "items": [] }));
    // Exactly 1000 events is fine.
    let ok: Vec<Value> = (0..1000)
        .map(|i| {
            ev(
                "rebuffer_end",
                &format!("2026-11-21T10:{:02}:{:02}.000Z", i / 60, i % 60),
                json!({ "positionMs": i, "bufferedMs": 1 }),
            )
        })
        .collect();
    assert_eq!(
        post_batch(&app, Some(&key), &batch(&key, "s-1000", ok))
            .await
            .0,
        StatusCode::NO_CONTENT
    );
}

async fn preflight_is_answered_for_any_origin(app: TestApp) {
    let r = app
        .http
        .request(Method::OPTIONS, app.url("/api/v1/telemetry"))
        .header("origin", "https://player.example.net")
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization, content-type",
        )
        .send()
        .await
        .expect("send");
    assert!(r.status().is_success(), "{}", r.status());
    let h = r.headers();
    assert_eq!(h["access-control-allow-origin"], "*");
    let allowed = h["access-control-allow-headers"]
        .to_str()
        .expect("ascii")
        .to_lowercase();
    assert!(
        allowed.contains("authorization") && allowed.contains("content-type"),
        "{allowed}"
    );
    assert!(h["access-control-allow-methods"]
        .to_str()
        .expect("ascii")
        .contains("POST"));
    assert!(h.get("access-control-allow-credentials").is_none());
    // Browsers cache the preflight for a day; caches keep answers apart by what CORS reads.
    assert_eq!(h["access-control-max-age"], "86400");
    assert_eq!(h["vary"], CORS_VARY);
    // The answer itself (even a 401) is readable cross-origin, with each header once.
    let r = app
        .http
        .post(app.url("/api/v1/telemetry"))
        .header("origin", "https://player.example.net")
        .json(&json!({}))
        .send()
        .await
        .expect("send");
    let h = r.headers();
    assert_eq!(h.get_all("access-control-allow-origin").iter().count(), 1);
    assert_eq!(h["access-control-allow-origin"], "*");
    assert_eq!(h.get_all("vary").iter().count(), 1);
    assert_eq!(h["vary"], CORS_VARY);
    assert!(h.get("access-control-allow-methods").is_none());
    assert_eq!(parts(r).await, invalid_key());
    // Other methods are not the route's: no CORS headers on their 404.
    let r = app
        .http
        .get(app.url("/api/v1/telemetry"))
        .header("origin", "https://player.example.net")
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert!(r.headers().get("access-control-allow-origin").is_none());
}

/// The ingest route's `Vary`: its answers depend on what a CORS request carries.
const CORS_VARY: &str = "origin, access-control-request-method, access-control-request-headers";

async fn key_use_is_recorded(app: TestApp) {
    let (cookie, key, _) = account(&app, "dev@example.com").await;
    let e = ev(
        "playback_pause",
        "2026-11-21T10:00:00.000Z",
        json!({ "positionMs": 1, "bufferedMs": 2 }),
    );
    assert_eq!(
        post_batch(&app, Some(&key), &batch(&key, "s", vec![e]))
            .await
            .0,
        StatusCode::NO_CONTENT
    );
    // Written off the request path: polled (the deadline only bounds a broken run).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        let (_, keys) = parts(app.get("/api/v1/keys", Some(&cookie)).await).await;
        if common::is_iso_ms(&keys["items"][0]["lastUsedAt"]) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("lastUsedAt was never written");
}

/// Timestamps must fall in years 0000–9999 once converted to UTC (decisions.md §10): one that
/// an offset pushes into year 10000 is refused, not stored and read back as `10000-…`.
async fn timestamps_outside_four_digit_years_are_refused(app: TestApp) {
    let (cookie, key, _) = account(&app, "dev@example.com").await;
    let pause = json!({ "positionMs": 1, "bufferedMs": 2 });
    for ts in [
        "9999-12-31T23:59:59.999-23:59",
        "0000-01-01T00:00:00.000+00:01",
    ] {
        let body = batch(
            &key,
            "s-year",
            vec![ev("playback_pause", ts, pause.clone())],
        );
        assert_eq!(
            post_batch(&app, Some(&key), &body).await,
            (
                StatusCode::BAD_REQUEST,
                json!({ "errors": { "events": "events.0.ts: Invalid datetime" } })
            ),
            "{ts}"
        );
    }
    assert_eq!(
        events_of(&app, &cookie, "s-year").await.0,
        StatusCode::NOT_FOUND
    );
    let edge = batch(
        &key,
        "s-edge",
        vec![ev("playback_pause", "9999-12-31T22:59:59.999-01:00", pause)],
    );
    assert_eq!(
        post_batch(&app, Some(&key), &edge).await.0,
        StatusCode::NO_CONTENT
    );
    let (_, back) = events_of(&app, &cookie, "s-edge").await;
    assert_eq!(back["items"][0]["ts"], "9999-12-31T23:59:59.999Z");
}

/// A body broken on the wire (malformed chunked encoding) is reported as unreadable, not as
/// "too large", and nothing is stored.
async fn a_malformed_chunked_body_is_not_too_large(app: TestApp) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (cookie, key, _) = account(&app, "dev@example.com").await;
    let addr = app.base.trim_start_matches("http://").to_owned();
    let mut sock = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    let head = format!(
        "POST /api/v1/telemetry HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n\
         5\r\n{{\"api\r\nzz-not-hex\r\n"
    );
    sock.write_all(head.as_bytes()).await.expect("write");
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        sock.read_to_end(&mut answer),
    )
    .await;
    let answer = String::from_utf8_lossy(&answer).to_string();
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    assert!(
        answer.ends_with(r#"{"errors":{"events":"Request body could not be read"}}"#),
        "{answer}"
    );
    let (_, list) = parts(app.get("/api/v1/telemetry/sessions", Some(&cookie)).await).await;
    assert_eq!(list, json!({ "items": [] }));
}

/// decisions.md §14: a view's events come a page at a time. A session of 2,500 events (planted
/// by anyone holding the public key) is read 1,000 at a time by default, in time order, each
/// page's `nextCursor` leading to the next and null on the last; `limit` is 1–10,000; the
/// view's page lists the first 1,000 and links to the rest.
async fn a_views_events_come_a_page_at_a_time(app: TestApp) {
    let (cookie, key, _) = account(&app, "dev@example.com").await;
    let at = |i: usize| {
        format!(
            "2026-11-21T{:02}:{:02}:{:02}.{:03}Z",
            10 + i / 3_600_000 % 10,
            i / 60_000 % 60,
            i / 1000 % 60,
            i % 1000
        )
    };
    // 2,500 events, two at each of 1,250 instants (same ts, types ordered by name).
    let events: Vec<Value> = (0..1250)
        .flat_map(|i| {
            [
                ev(
                    "playback_pause",
                    &at(i * 7),
                    json!({ "positionMs": i, "bufferedMs": 1 }),
                ),
                ev(
                    "rebuffer_start",
                    &at(i * 7),
                    json!({ "positionMs": i, "bufferedMs": 0 }),
                ),
            ]
        })
        .collect();
    let mut start = vec![ev(
        "playback_start",
        "2026-11-21T09:59:59.000Z",
        json!({ "positionMs": 0, "durationMs": 60_000, "contentId": "movie-1" }),
    )];
    start.extend(events);
    for chunk in start.chunks(1000) {
        assert_eq!(
            post_batch(&app, Some(&key), &batch(&key, "s-long", chunk.to_vec()))
                .await
                .0,
            StatusCode::NO_CONTENT
        );
    }
    let page = |q: String| {
        let (app, cookie) = (&app, &cookie);
        async move {
            parts(
                app.get(
                    &format!("/api/v1/telemetry/sessions/s-long/events{q}"),
                    Some(cookie),
                )
                .await,
            )
            .await
        }
    };
    let (s, first) = page(String::new()).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(first["items"].as_array().expect("items").len(), 1000);
    assert_eq!(first["items"][0]["type"], "playback_start");
    let mut all: Vec<Value> = first["items"].as_array().expect("items").clone();
    let mut cursor = first["nextCursor"]
        .as_str()
        .expect("a next page")
        .to_owned();
    let mut pages = 1;
    loop {
        let (s, next) = page(format!("?cursor={cursor}&limit=700")).await;
        assert_eq!(s, StatusCode::OK, "{next}");
        let items = next["items"].as_array().expect("items");
        assert!(items.len() <= 700);
        all.extend(items.iter().cloned());
        pages += 1;
        match next["nextCursor"].as_str() {
            Some(c) => cursor = c.to_owned(),
            None => break,
        }
    }
    assert_eq!(pages, 4, "1,000 then 700, 700 and 101");
    assert_eq!(all.len(), 2501, "every event once");
    let keys: Vec<(String, String)> = all
        .iter()
        .map(|e| {
            (
                e["ts"].as_str().unwrap_or_default().to_owned(),
                e["type"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(keys, sorted, "in (ts, type) order, no repeats");

    // The whole session in one page at the maximum.
    let (_, whole) = page("?limit=10000".into()).await;
    assert_eq!(whole["items"].as_array().expect("items").len(), 2501);
    assert_eq!(whole["nextCursor"], Value::Null);

    for (q, field, message) in [
        (
            "?limit=0",
            "limit",
            "Number must be greater than or equal to 1",
        ),
        (
            "?limit=10001",
            "limit",
            "Number must be less than or equal to 10000",
        ),
        ("?limit=ten", "limit", "Expected number, received nan"),
        ("?cursor=bm90IGEgY3Vyc29y", "cursor", "Invalid cursor"),
    ] {
        assert_eq!(
            page(q.into()).await,
            (
                StatusCode::BAD_REQUEST,
                json!({ "errors": { field: message } })
            ),
            "{q}"
        );
    }
    // A page also holds at most 4 MiB of payloads, whatever `limit` says: six events of
    // 900 kB each come five, then one.
    for i in 0..6 {
        let heavy = ev(
            "error",
            &format!("2026-11-21T11:00:0{i}.000Z"),
            json!({ "code": "E", "message": "m".repeat(900_000), "fatal": false }),
        );
        assert_eq!(
            post_batch(&app, Some(&key), &batch(&key, "s-heavy", vec![heavy]))
                .await
                .0,
            StatusCode::NO_CONTENT
        );
    }
    let r = app
        .get(
            "/api/v1/telemetry/sessions/s-heavy/events?limit=10000",
            Some(&cookie),
        )
        .await;
    let text = r.text().await.expect("body");
    assert!(text.len() < 8 * 1024 * 1024, "{} bytes", text.len());
    let heavy: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(heavy["items"].as_array().expect("items").len(), 5);
    let rest = heavy["nextCursor"].as_str().expect("more").to_owned();
    let (_, last) = parts(
        app.get(
            &format!("/api/v1/telemetry/sessions/s-heavy/events?limit=10000&cursor={rest}"),
            Some(&cookie),
        )
        .await,
    )
    .await;
    assert_eq!(last["items"].as_array().expect("items").len(), 1);
    assert_eq!(last["nextCursor"], Value::Null);

    // Another account's cursor opens nothing of this session; an unknown session is a 404.
    let (other, _, _) = account(&app, "other@example.com").await;
    let (s, b) = parts(
        app.get(
            &format!("/api/v1/telemetry/sessions/s-long/events?cursor={cursor}"),
            Some(&other),
        )
        .await,
    )
    .await;
    assert_eq!((s, b["items"].clone()), (StatusCode::OK, json!([])));
    assert_eq!(
        events_of(&app, &other, "s-long").await.0,
        StatusCode::NOT_FOUND
    );

    // The view's page: the first 1,000 events and a link to the next ones.
    let html = app
        .get("/app/views/s-long", Some(&cookie))
        .await
        .text()
        .await
        .expect("page");
    assert_eq!(
        html.matches("<td><code>").count(),
        1000,
        "one row per event"
    );
    let next = html
        .split("href=\"")
        .filter_map(|h| h.split('"').next())
        .find(|h| h.starts_with("/app/views/s-long?cursor="))
        .expect("a link to the next events")
        .replace("&amp;", "&");
    let r = app.get(&next, Some(&cookie)).await;
    assert_eq!(r.status(), StatusCode::OK);
    let second = r.text().await.expect("page");
    assert_eq!(second.matches("<td><code>").count(), 1000);
    assert!(second.contains("First events"));
}

macro_rules! on_both_sinks {
    ($($case:ident),* $(,)?) => {
        $(
            mod $case {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::$case(super::spawn(super::Sink::Sqlite).await).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn clickhouse() {
                    super::$case(super::spawn(super::Sink::ClickHouse).await).await
                }
            }
        )*
    };
}

on_both_sinks!(
    a_views_events_come_a_page_at_a_time,
    timestamps_outside_four_digit_years_are_refused,
    a_malformed_chunked_body_is_not_too_large,
    accepts_every_event_type_and_reads_it_back,
    every_invalid_fixture_gets_its_400_and_nothing_is_stored,
    bearer_failures_share_one_body,
    repeated_and_overlapping_batches_are_stored_once,
    accounts_never_see_each_other,
    size_limits_are_400s,
    preflight_is_answered_for_any_origin,
    key_use_is_recorded,
);

/// ClickHouse holds each (owner, sessionId, ts, type) once when read with FINAL, however
/// often a batch was retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clickhouse_final_holds_each_key_once() {
    let db = common::test_db_name();
    let app = spawn_clickhouse(&db).await;
    let (_, key, _) = account(&app, "dev@example.com").await;
    let e = |i: u32| {
        ev(
            "quality_change",
            &format!("2026-11-21T10:00:{i:02}.500Z"),
            json!({ "from": "360p", "to": "720p", "bitrate": 1_500_000 }),
        )
    };
    for range in [0..20, 0..20, 10..30] {
        assert_eq!(
            post_batch(
                &app,
                Some(&key),
                &batch(&key, "s-final", range.map(e).collect())
            )
            .await
            .0,
            StatusCode::NO_CONTENT
        );
    }
    let q = format!("SELECT count() FROM {db}.telemetry_events FINAL WHERE session_id = 's-final'");
    let count = app
        .http
        .post(clickhouse_url())
        .body(q)
        .send()
        .await
        .expect("clickhouse")
        .text()
        .await
        .expect("text");
    assert_eq!(count.trim(), "30");
}

/// When the store fails, the request gets 500 and nothing is acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_write_is_a_500() {
    let db = common::test_db_name();
    let app = spawn_clickhouse(&db).await;
    let (_, key, _) = account(&app, "dev@example.com").await;
    let drop = app
        .http
        .post(clickhouse_url())
        .body(format!("DROP TABLE {db}.telemetry_events"))
        .send()
        .await
        .expect("clickhouse");
    assert!(drop.status().is_success());
    let e = ev(
        "playback_pause",
        "2026-11-21T10:00:00.000Z",
        json!({ "positionMs": 1, "bufferedMs": 2 }),
    );
    let (s, b) = post_batch(&app, Some(&key), &batch(&key, "s", vec![e])).await;
    assert_eq!(
        (s, b),
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({ "error": "Internal Server Error" })
        )
    );
}

/// A key revoked through one server process fails on the very next request to another
/// process sharing the same PostgreSQL, even when that process had the key cached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_on_one_instance_takes_effect_on_another() {
    let pg = common::fresh_pg_database().await;
    let dir = tempfile::tempdir().expect("tmp");
    let secret = "s".repeat(40);
    let env = [
        ("DATABASE_URL", pg.as_str()),
        ("STREAMWATCH_SECRET", secret.as_str()),
    ];
    let (da, db) = (dir.path().join("a"), dir.path().join("b"));
    let (a, b) = (
        common::Process::start(&da, &env).await,
        common::Process::start(&db, &env).await,
    );
    let cookie = a.sign_up("dev@example.com").await;
    let client = reqwest::Client::new();
    for round in 0..10 {
        // A key minted on a works on b at once, and b now has it cached.
        let (key, id) = a.mint_key(&cookie).await;
        let body = batch(
            &key,
            "s",
            vec![ev(
                "playback_pause",
                "2026-11-21T10:00:00.000Z",
                json!({ "positionMs": 1, "bufferedMs": 2 }),
            )],
        );
        for _ in 0..3 {
            let r = client
                .post(b.url("/api/v1/telemetry"))
                .bearer_auth(&key)
                .json(&body)
                .send()
                .await
                .expect("send");
            assert_eq!(r.status(), StatusCode::NO_CONTENT, "round {round}");
        }
        let r = client
            .delete(a.url(&format!("/api/v1/keys/{id}")))
            .header("cookie", format!("auth.session_token={cookie}"))
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), StatusCode::NO_CONTENT);
        let r = client
            .post(b.url("/api/v1/telemetry"))
            .bearer_auth(&key)
            .json(&body)
            .send()
            .await
            .expect("send");
        assert_eq!(
            parts(r).await,
            invalid_key(),
            "round {round}: the revoke reached b before a answered"
        );
    }
}
