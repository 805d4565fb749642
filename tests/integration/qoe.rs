//! The QoE routes of analytics.md §4 through real HTTP: two hand-built views whose every
//! value is known by construction, sent through the real ingest route (retried once) on
//! both telemetry engines, then read back through overview, timeseries, breakdown, views
//! (JSON and CSV) and a stream's timeline with probe rows of both relational engines.
//! The per-rule and per-metric tests, the engine conformance suite and the property test
//! against the reference live in the `analytics` crate; this file checks the wiring: the
//! session gate, owner isolation, `streamId` resolution, 400 bodies and content types.

use crate::common;

use common::{parts, spawn_quiet, Engine, TestApp};
use reqwest::StatusCode;
use serde_json::{json, Value};
use streamwatch::probes::{NewProbe, ProbeStatus, Probes};
use streamwatch::states::AnomalyClass;

#[derive(Clone, Copy, Debug)]
enum Sink {
    Sqlite,
    ClickHouse,
}

fn clickhouse_url() -> String {
    std::env::var("CLICKHOUSE_URL").unwrap_or_else(|_| "http://127.0.0.1:8123".into())
}

/// An app without the prober (the test writes the probe rows) whose refresher waits an hour
/// between steps: the test takes its own steps, so what it reads is exactly what it sent.
async fn spawn(sink: Sink, engine: Engine) -> TestApp {
    spawn_quiet(engine, |c| {
        c.qoe_refresh = std::time::Duration::from_secs(3600);
        if let Sink::ClickHouse = sink {
            c.clickhouse_url = Some(clickhouse_url());
            c.clickhouse_database = common::test_db_name();
        }
    })
    .await
}

/// Derives every view the store holds (what the refresher does every interval).
async fn refresh(app: &TestApp) {
    analytics::Refresher::new(app.state.analytics.clone())
        .step()
        .await
        .expect("refresh step");
}

const CHROME: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36";
const SAFARI_IOS: &str = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4.1 Mobile/15E148 Safari/604.1";
const SRC: &str = "http://127.0.0.1:9/live/master.m3u8";

/// 2026-01-01T10:00:00Z.
const T0: i64 = 1_767_261_600_000;
const RANGE: &str = "from=2026-01-01T10:00:00.000Z&to=2026-01-01T12:00:00.000Z";

fn at(offset_ms: i64) -> String {
    streamwatch::time::iso_ms(T0 + offset_ms)
}

fn ev(kind: &str, offset_ms: i64, payload: Value) -> Value {
    json!({ "type": kind, "ts": at(offset_ms), "payload": payload })
}

/// View A (Chrome on Windows, plays the registered stream): starts in 1 s, one 2 s stall,
/// 20 s at 2 Mb/s then 20 s at 4 Mb/s, ends normally. Watch 40 s, 3,000 kb/s.
fn view_a(key: &str) -> Value {
    json!({
        "apiKey": key,
        "sessionId": "view-a",
        "context": {
            "sdk": "@service/player-sdk@0.2.0", "player": "hls.js 1.6.2",
            "src": SRC, "tags": { "plan": "premium" }
        },
        "events": [
            ev("quality_change", 0, json!({ "from": "", "to": "720p", "bitrate": 2_000_000, "width": 1280, "height": 720 })),
            ev("playback_start", 1_000, json!({ "positionMs": 0, "durationMs": 0, "contentId": "movie-1", "startupMs": 1000 })),
            ev("rebuffer_start", 11_000, json!({ "positionMs": 10_000, "bufferedMs": 0 })),
            ev("rebuffer_end", 13_000, json!({ "positionMs": 10_000, "bufferedMs": 4_000 })),
            ev("quality_change", 21_000, json!({ "from": "720p", "to": "1080p", "bitrate": 4_000_000 })),
            ev("session_end", 41_000, json!({ "reason": "ended", "durationMs": 40_000 })),
        ]
    })
}

/// View B (Safari on an iPhone, no `src`): a fatal error before the first frame, 30 min
/// after view A.
fn view_b(key: &str) -> Value {
    json!({
        "apiKey": key,
        "sessionId": "view-b",
        "context": { "contentId": "movie-2" },
        "events": [
            ev("error", 1_800_000, json!({ "code": "MANIFEST_LOAD", "message": "404", "fatal": true })),
            ev("session_end", 1_801_000, json!({ "reason": "error", "durationMs": 0 })),
        ]
    })
}

async fn send(app: &TestApp, key: &str, ua: &str, batch: &Value) {
    let r = app
        .http
        .post(app.url("/api/v1/telemetry"))
        .bearer_auth(key)
        .header("user-agent", ua)
        .json(batch)
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
}

struct Fixture {
    cookie: String,
    stream_id: String,
}

/// A user with a registered stream and views A and B stored, A sent twice (a retry).
async fn fixture(app: &TestApp) -> Fixture {
    let cookie = app.user("analyst@example.com").await;
    let stream = app.stream(&cookie, SRC).await;
    let (s, key) = parts(
        app.post("/api/v1/keys", Some(&cookie), json!({ "label": "player" }))
            .await,
    )
    .await;
    assert_eq!(s, StatusCode::CREATED);
    let key = key["rawKey"].as_str().expect("raw key").to_owned();
    send(app, &key, CHROME, &view_a(&key)).await;
    send(app, &key, SAFARI_IOS, &view_b(&key)).await;
    // The SDK retries a batch whose answer it did not see: it must not count twice.
    send(app, &key, CHROME, &view_a(&key)).await;
    refresh(app).await;
    Fixture {
        cookie,
        stream_id: stream["id"].as_str().expect("id").to_owned(),
    }
}

async fn get(app: &TestApp, cookie: &str, path: &str) -> (StatusCode, Value) {
    parts(app.get(path, Some(cookie)).await).await
}

async fn every_route_answers_by_construction(app: TestApp) {
    let f = fixture(&app).await;
    let c = &f.cookie;

    let (s, body) = get(&app, c, &format!("/api/v1/qoe/overview?{RANGE}")).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        body,
        json!({
            "from": "2026-01-01T10:00:00.000Z",
            "to": "2026-01-01T12:00:00.000Z",
            "views": 2,
            "metrics": {
                "playbackFailurePct": 50,
                "startupFailurePct": 50,
                "exitBeforeStartPct": 0,
                "startupTimeMs": { "p50": 1000, "p95": 1000 },
                "rebufferPct": 5,
                "rebufferFrequency": 1.5,
                "watchTimeMs": 40000,
                "avgBitrateKbps": 3000
            }
        })
    );

    let (s, body) = get(
        &app,
        c,
        &format!("/api/v1/qoe/timeseries?metric=rebufferPct&granularity=hour&{RANGE}"),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        body,
        json!({
            "metric": "rebufferPct",
            "granularity": "hour",
            "items": [
                { "t": "2026-01-01T10:00:00.000Z", "value": 5, "views": 2 },
                { "t": "2026-01-01T11:00:00.000Z", "value": null, "views": 0 }
            ]
        })
    );
    // The views metric is a count: 0 in an empty bucket, not null (analytics.md v1.2).
    let (s, body) = get(
        &app,
        c,
        &format!("/api/v1/qoe/timeseries?metric=views&granularity=hour&{RANGE}"),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        body["items"],
        json!([
            { "t": "2026-01-01T10:00:00.000Z", "value": 2, "views": 2 },
            { "t": "2026-01-01T11:00:00.000Z", "value": 0, "views": 0 }
        ])
    );

    let (s, body) = get(
        &app,
        c,
        &format!("/api/v1/qoe/breakdown?metric=playbackFailurePct&by=browser&{RANGE}"),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        body,
        json!({
            "metric": "playbackFailurePct",
            "by": "browser",
            "items": [
                { "key": "Safari", "value": 100, "views": 1, "negativeImpact": 25 },
                { "key": "Chrome", "value": 0, "views": 1, "negativeImpact": -25 }
            ]
        })
    );

    // streamId resolves from src; a filter on it keeps view A only.
    let (s, body) = get(
        &app,
        c,
        &format!("/api/v1/qoe/breakdown?metric=views&by=streamId&orderBy=views&{RANGE}"),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let keys: Vec<&Value> = body["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| &i["key"])
        .collect();
    assert_eq!(keys.len(), 2, "{body}");
    assert!(
        keys.contains(&&json!(f.stream_id)) && keys.contains(&&Value::Null),
        "{body}"
    );
    let (_, body) = get(
        &app,
        c,
        &format!(
            "/api/v1/qoe/overview?{RANGE}&filter=streamId:{}",
            f.stream_id
        ),
    )
    .await;
    assert_eq!(body["views"], 1);
    assert_eq!(body["metrics"]["playbackFailurePct"], 0);

    let (s, body) = get(&app, c, &format!("/api/v1/qoe/views?{RANGE}")).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        body,
        json!({
            "items": [
                {
                    "sessionId": "view-b",
                    "startedAt": at(1_800_000), "endedAt": at(1_801_000),
                    "started": false, "firstFrameAt": null, "startupMs": null,
                    "failed": true, "failedAt": at(1_800_000),
                    "startupFailure": true, "exitBeforeStart": false,
                    "rebufferCount": 0, "rebufferMs": 0, "pausedMs": 0, "watchTimeMs": 0,
                    "avgBitrateKbps": null, "renditionSwitches": 0, "upshifts": 0, "downshifts": 0,
                    "errorCount": 1, "fatalErrorCode": "MANIFEST_LOAD",
                    "contentId": "movie-2", "src": null, "streamId": null,
                    "browser": "Safari", "os": "iOS", "deviceType": "mobile",
                    "sdk": null, "player": null, "tags": {}
                },
                {
                    "sessionId": "view-a",
                    "startedAt": at(0), "endedAt": at(41_000),
                    "started": true, "firstFrameAt": at(1_000), "startupMs": 1000,
                    "failed": false, "failedAt": null,
                    "startupFailure": false, "exitBeforeStart": false,
                    "rebufferCount": 1, "rebufferMs": 2000, "pausedMs": 0, "watchTimeMs": 40000,
                    "avgBitrateKbps": 3000, "renditionSwitches": 1, "upshifts": 1, "downshifts": 0,
                    "errorCount": 0, "fatalErrorCode": null,
                    "contentId": "movie-1", "src": SRC, "streamId": f.stream_id,
                    "browser": "Chrome", "os": "Windows", "deviceType": "desktop",
                    "sdk": "@service/player-sdk@0.2.0", "player": "hls.js 1.6.2",
                    "tags": { "plan": "premium" }
                }
            ],
            "nextCursor": null
        })
    );

    // Paging: one view per page, the cursor leads to the other, then the end.
    let (_, page1) = get(&app, c, &format!("/api/v1/qoe/views?limit=1&{RANGE}")).await;
    assert_eq!(page1["items"][0]["sessionId"], "view-b");
    let cursor = page1["nextCursor"]
        .as_str()
        .expect("a next page")
        .to_owned();
    let (_, page2) = get(
        &app,
        c,
        &format!("/api/v1/qoe/views?limit=1&cursor={cursor}&{RANGE}"),
    )
    .await;
    assert_eq!(page2["items"][0]["sessionId"], "view-a");
    assert_eq!(page2["nextCursor"], Value::Null);

    app.shutdown().await;
}

async fn csv_answers_are_text_csv(app: TestApp) {
    let f = fixture(&app).await;
    let csv = |path: String| {
        let app = &app;
        let cookie = f.cookie.clone();
        async move {
            let r = app.get(&path, Some(&cookie)).await;
            assert_eq!(r.status(), StatusCode::OK);
            assert_eq!(r.headers()["content-type"], "text/csv; charset=utf-8");
            let next = r
                .headers()
                .get("x-next-cursor")
                .map(|v| v.to_str().expect("ascii").to_owned());
            (r.text().await.expect("body"), next)
        }
    };

    let (text, _) = csv(format!(
        "/api/v1/qoe/timeseries?metric=rebufferPct&granularity=hour&format=csv&{RANGE}"
    ))
    .await;
    assert_eq!(
        text,
        "t,value,views\n2026-01-01T10:00:00.000Z,5,2\n2026-01-01T11:00:00.000Z,,0\n"
    );

    let (text, _) = csv(format!(
        "/api/v1/qoe/breakdown?metric=playbackFailurePct&by=browser&format=csv&{RANGE}"
    ))
    .await;
    assert_eq!(
        text,
        "key,value,views,negativeImpact\nSafari,100,1,25\nChrome,0,1,-25\n"
    );

    let (text, next) = csv(format!("/api/v1/qoe/views?format=csv&limit=1&{RANGE}")).await;
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    assert_eq!(header.first(), Some(&"sessionId"));
    assert!(header.contains(&"streamId") && header.contains(&"deviceType"));
    let row: Vec<&str> = lines.next().expect("a row").split(',').collect();
    assert_eq!(row.len(), header.len());
    assert_eq!(row[0], "view-b");
    assert_eq!(lines.next(), None);
    // The next page's cursor travels in a header, since CSV has no place for it.
    let next = next.expect("x-next-cursor");
    let (text, next) = csv(format!(
        "/api/v1/qoe/views?format=csv&limit=1&cursor={next}&{RANGE}"
    ))
    .await;
    let header: Vec<&str> = text.lines().next().expect("header").split(',').collect();
    assert_eq!(header.last(), Some(&"tags.plan"));
    assert!(text.lines().nth(1).expect("row").starts_with("view-a,"));
    assert!(text.lines().nth(1).expect("row").ends_with(",premium"));
    assert_eq!(next, None);

    app.shutdown().await;
}

async fn the_timeline_puts_probes_and_viewers_on_one_axis(app: TestApp) {
    let f = fixture(&app).await;
    let probes = Probes::new(app.state.db.clone());
    // 10:00 bucket: two healthy (100, 300 ms) and a failing one (5,000 ms); 11:00: none.
    for (offset, status, latency) in [
        (0, ProbeStatus::Healthy, 100),
        (600_000, ProbeStatus::Failing, 5_000),
        (1_200_000, ProbeStatus::Healthy, 300),
    ] {
        probes
            .record(&NewProbe {
                stream_id: f.stream_id.clone(),
                status,
                anomaly_class: if status == ProbeStatus::Healthy {
                    AnomalyClass::NoAnomaly
                } else {
                    AnomalyClass::NetworkTimeout
                },
                latency_ms: latency,
                http_status: (status == ProbeStatus::Healthy).then_some(200),
                detail: "seeded".into(),
                created_at: T0 + offset,
                playable: status == ProbeStatus::Healthy,
                last_action: "seeded".into(),
                next_probe_at: T0 + offset + 30_000,
            })
            .await
            .expect("record")
            .expect("stream exists");
    }
    let path = format!(
        "/api/v1/streams/{}/timeline?granularity=hour&{RANGE}",
        f.stream_id
    );
    let (s, body) = get(&app, &f.cookie, &path).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        body,
        json!({ "items": [
            {
                "t": "2026-01-01T10:00:00.000Z",
                "probes": { "healthy": 2, "degraded": 0, "failing": 1, "p50LatencyMs": 300 },
                "viewers": { "views": 1, "playbackFailurePct": 0, "rebufferPct": 5, "startupTimeMs": 1000 }
            },
            {
                "t": "2026-01-01T11:00:00.000Z",
                "probes": { "healthy": 0, "degraded": 0, "failing": 0, "p50LatencyMs": null },
                "viewers": { "views": 0, "playbackFailurePct": null, "rebufferPct": null, "startupTimeMs": null }
            }
        ] })
    );

    // Another user sees the same probes (streams are shared) but none of these viewers.
    let other = app.user("other@example.com").await;
    let (s, body) = get(&app, &other, &path).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(body["items"][0]["probes"]["healthy"], 2);
    assert_eq!(body["items"][0]["viewers"]["views"], 0);

    // Unknown and impossible ids are the JSON 404; bad parameters the 400 body.
    for id in ["nosuchstream", "%00", "a%2Fb"] {
        let (s, body) = get(&app, &f.cookie, &format!("/api/v1/streams/{id}/timeline")).await;
        assert_eq!(
            (s, body),
            (StatusCode::NOT_FOUND, json!({ "error": "Not Found" })),
            "{id}"
        );
    }
    let (s, body) = get(
        &app,
        &f.cookie,
        &format!("/api/v1/streams/{}/timeline?granularity=week", f.stream_id),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(
        body,
        json!({ "errors": { "granularity": "Invalid enum value. Expected 'minute' | 'hour' | 'day', received 'week'" } })
    );

    app.shutdown().await;
}

async fn callers_see_only_their_own_views(app: TestApp) {
    let _f = fixture(&app).await;
    let other = app.user("someone-else@example.com").await;
    let (s, body) = get(&app, &other, &format!("/api/v1/qoe/overview?{RANGE}")).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(body["views"], 0);
    assert_eq!(body["metrics"]["playbackFailurePct"], Value::Null);
    assert_eq!(body["metrics"]["watchTimeMs"], 0);
    let (_, body) = get(&app, &other, &format!("/api/v1/qoe/views?{RANGE}")).await;
    assert_eq!(body, json!({ "items": [], "nextCursor": null }));
    let (_, body) = get(
        &app,
        &other,
        &format!("/api/v1/qoe/breakdown?metric=views&by=contentId&{RANGE}"),
    )
    .await;
    assert_eq!(body["items"], json!([]));
    app.shutdown().await;
}

/// Without a session every route is the 401; bad parameters are the 400 `{ errors }` of
/// analytics.md §4 and §5, every bad parameter of a request at once.
async fn gate_and_bad_parameters(app: TestApp) {
    for path in [
        "/api/v1/qoe/overview",
        "/api/v1/qoe/timeseries?metric=views",
        "/api/v1/qoe/breakdown?metric=views&by=os",
        "/api/v1/qoe/views",
        "/api/v1/streams/nosuchstream/timeline",
    ] {
        let (s, body) = parts(app.get(path, None).await).await;
        assert_eq!(
            (s, body),
            (StatusCode::UNAUTHORIZED, json!({ "error": "Unauthorized" })),
            "{path}"
        );
    }

    let cookie = app.user("bad-params@example.com").await;
    let metric_enum = "Invalid enum value. Expected 'views' | 'playbackFailurePct' | 'startupFailurePct' | 'exitBeforeStartPct' | 'startupTimeMs' | 'rebufferPct' | 'rebufferFrequency' | 'watchTimeMs' | 'avgBitrateKbps', received 'fps'";
    let cases: Vec<(&str, Value)> = vec![
        ("/api/v1/qoe/overview?from=yesterday", json!({ "from": "Invalid datetime" })),
        (
            "/api/v1/qoe/overview?from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z",
            json!({ "from": "from must be earlier than to" }),
        ),
        (
            "/api/v1/qoe/overview?from=2024-01-01T00:00:00Z&to=2026-01-01T00:00:00Z",
            json!({ "from": "Range must be at most 400 days" }),
        ),
        (
            "/api/v1/qoe/overview?filter=country:FR",
            json!({ "filter": "Invalid filter 'country:FR': unknown dimension 'country'. Expected 'contentId' | 'browser' | 'os' | 'deviceType' | 'sdk' | 'player' | 'streamId' | 'tag.<name>'" }),
        ),
        ("/api/v1/qoe/timeseries", json!({ "metric": "Required" })),
        (
            "/api/v1/qoe/timeseries?metric=fps&measurement=p90&granularity=week",
            json!({
                "metric": metric_enum,
                "measurement": "Invalid enum value. Expected 'p50' | 'p75' | 'p95' | 'p99' | 'avg', received 'p90'",
                "granularity": "Invalid enum value. Expected 'minute' | 'hour' | 'day', received 'week'",
            }),
        ),
        (
            "/api/v1/qoe/timeseries?metric=views&granularity=minute&from=2026-01-01T00:00:00Z&to=2026-01-02T01:01:00Z",
            json!({ "granularity": "Too many buckets: 1501 minute buckets in the range, at most 1500" }),
        ),
        (
            "/api/v1/qoe/breakdown?metric=views&by=country&orderBy=impact&limit=0",
            json!({
                "by": "Invalid enum value. Expected 'contentId' | 'browser' | 'os' | 'deviceType' | 'sdk' | 'player' | 'streamId' | 'tag.<name>', received 'country'",
                "orderBy": "Invalid enum value. Expected 'negativeImpact' | 'views' | 'value', received 'impact'",
                "limit": "Number must be greater than or equal to 1",
            }),
        ),
        ("/api/v1/qoe/breakdown?metric=views", json!({ "by": "Required" })),
        (
            "/api/v1/qoe/views?limit=1001&cursor=nope&format=xml",
            json!({
                "limit": "Number must be less than or equal to 1000",
                "cursor": "Invalid cursor",
                "format": "Invalid enum value. Expected 'json' | 'csv', received 'xml'",
            }),
        ),
        ("/api/v1/qoe/views?limit=2.5", json!({ "limit": "Expected integer, received float" })),
        (
            "/api/v1/qoe/views?limit=1&limit=2",
            json!({ "limit": "Expected string, received array" }),
        ),
    ];
    for (path, errors) in cases {
        let (s, body) = get(&app, &cookie, path).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{path}: {body}");
        assert_eq!(body, json!({ "errors": errors }), "{path}");
    }
    app.shutdown().await;
}

/// The `streamId` of each group of a breakdown by it, with its views (`null` for the views
/// no registered stream names).
fn stream_groups(body: &Value) -> Vec<(Value, Value)> {
    let mut groups: Vec<(Value, Value)> = body["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| (i["key"].clone(), i["views"].clone()))
        .collect();
    groups.sort_by_key(|(k, _)| k.to_string());
    groups
}

/// The `src` → `streamId` map is read only when a question names `streamId`, cached, and
/// follows every change of the registered streams, also one another instance makes (here a
/// row deleted straight from the shared database, behind this instance's back).
async fn stream_ids_follow_every_change_of_the_registered_streams(app: TestApp) {
    let f = fixture(&app).await;
    let c = &f.cookie;
    let by_stream = format!("/api/v1/qoe/breakdown?metric=views&by=streamId&orderBy=views&{RANGE}");
    let (_, body) = get(&app, c, &by_stream).await;
    assert_eq!(
        stream_groups(&body),
        vec![(json!(f.stream_id), json!(1)), (Value::Null, json!(1))],
        "{body}"
    );

    sqlx::query("DELETE FROM streams WHERE id = $1")
        .bind(&f.stream_id)
        .execute(&app.state.db.pool)
        .await
        .expect("delete");
    let (_, body) = get(&app, c, &by_stream).await;
    assert_eq!(
        stream_groups(&body),
        vec![(Value::Null, json!(2))],
        "{body}"
    );
    let (_, body) = get(&app, c, &format!("/api/v1/qoe/views?{RANGE}")).await;
    assert_eq!(body["items"][1]["sessionId"], "view-a");
    assert_eq!(body["items"][1]["streamId"], Value::Null, "{body}");

    // Registered again: another id names the same source.
    let again = app.stream(c, SRC).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    assert_ne!(again, f.stream_id);
    let (_, body) = get(&app, c, &by_stream).await;
    assert_eq!(
        stream_groups(&body),
        vec![(json!(again), json!(1)), (Value::Null, json!(1))],
        "{body}"
    );
    let (_, body) = get(&app, c, &format!("/api/v1/qoe/views?{RANGE}")).await;
    assert_eq!(body["items"][1]["streamId"], json!(again), "{body}");
    for (id, views) in [(&again, 1), (&f.stream_id, 0)] {
        let (_, body) = get(
            &app,
            c,
            &format!("/api/v1/qoe/overview?{RANGE}&filter=streamId:{id}"),
        )
        .await;
        assert_eq!(body["views"], views, "{id}: {body}");
    }
    // A percentile per stream: the registered source's views, and everything else.
    let (s, body) = get(
        &app,
        c,
        &format!(
            "/api/v1/qoe/breakdown?metric=startupTimeMs&measurement=p95&by=streamId&orderBy=views&{RANGE}"
        ),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let mut items = body["items"].as_array().expect("items").clone();
    items.sort_by_key(|i| i["key"].to_string());
    assert_eq!(
        items
            .iter()
            .map(|i| (i["key"].clone(), i["value"].clone(), i["views"].clone()))
            .collect::<Vec<_>>(),
        vec![
            (json!(again), json!(1000), json!(1)),
            (Value::Null, Value::Null, json!(1)),
        ],
        "{body}"
    );
    app.shutdown().await;
}

/// decisions.md §14: CSV exports neutralise cells a spreadsheet would run. A player sends
/// formulas as its content id, tag and error code; the views and breakdown CSVs give each a
/// leading `'`, and numbers (a negative impact among them) stay numbers.
async fn csv_cells_never_run_as_formulas(app: TestApp) {
    let cookie = app.user("csv@example.com").await;
    let (_, key) = parts(
        app.post("/api/v1/keys", Some(&cookie), json!({ "label": "k" }))
            .await,
    )
    .await;
    let key = key["rawKey"].as_str().expect("raw key").to_owned();
    let hostile = json!({
        "apiKey": key,
        "sessionId": "@session",
        "context": { "contentId": "=1+2", "tags": { "plan": "@cmd" } },
        "events": [
            ev("playback_start", 1_000, json!({ "positionMs": 0, "durationMs": 0, "contentId": "=1+2" })),
            ev("error", 2_000, json!({ "code": "-3", "message": "x", "fatal": true })),
            ev("session_end", 3_000, json!({ "reason": "error", "durationMs": 2_000 })),
        ]
    });
    send(&app, &key, CHROME, &hostile).await;
    send(&app, &key, CHROME, &view_a(&key)).await;
    refresh(&app).await;
    let text = app
        .get(
            &format!("/api/v1/qoe/views?format=csv&{RANGE}"),
            Some(&cookie),
        )
        .await
        .text()
        .await
        .expect("csv");
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).expect(name);
    let row: Vec<&str> = lines
        .find(|l| l.starts_with("'@session,"))
        .expect("the hostile view's row, its id neutralised")
        .split(',')
        .collect();
    assert_eq!(row[col("contentId")], "'=1+2");
    assert_eq!(row[col("fatalErrorCode")], "'-3");
    assert_eq!(row[col("tags.plan")], "'@cmd");
    assert_eq!(row[col("errorCount")], "1", "numbers stay numbers");
    let text = app
        .get(
            &format!(
                "/api/v1/qoe/breakdown?metric=playbackFailurePct&by=contentId&format=csv&{RANGE}"
            ),
            Some(&cookie),
        )
        .await
        .text()
        .await
        .expect("csv");
    assert!(text.lines().any(|l| l == "'=1+2,100,1,25"), "{text}");
    assert!(text.lines().any(|l| l == "movie-1,0,1,-25"), "{text}");
    app.shutdown().await;
}

/// The SQLite queries of docs/analytics.md ("One query per metric (SQLite)"), run as an
/// analyst would on the embedded store's file, give the API's numbers, value for value
/// (issue 28: the documented SQL divided integers as integers and gave whole percentages).
/// Three views, so the percentages are not whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_sqlite_sql_gives_the_apis_numbers() {
    let app = spawn(Sink::Sqlite, Engine::Sqlite).await;
    let f = fixture(&app).await;
    let key = app.api_key(&f.cookie).await;
    // View C: starts in 700 ms, plays 30 s at 1 Mb/s without a stall, an hour after view A.
    let c = json!({
        "apiKey": key,
        "sessionId": "view-c",
        "context": { "src": SRC },
        "events": [
            ev("quality_change", 3_600_000, json!({ "from": "", "to": "360p", "bitrate": 1_000_000, "width": 640, "height": 360 })),
            ev("playback_start", 3_600_700, json!({ "positionMs": 0, "durationMs": 0, "contentId": "movie-3", "startupMs": 700 })),
            ev("session_end", 3_630_700, json!({ "reason": "ended", "durationMs": 30_000 })),
        ]
    });
    send(&app, &key, CHROME, &c).await;
    refresh(&app).await;

    let (_, session) = get(&app, &f.cookie, "/api/auth/get-session").await;
    let owner = session["user"]["id"].as_str().expect("user id").to_owned();
    let (s, overview) = get(&app, &f.cookie, &format!("/api/v1/qoe/overview?{RANGE}")).await;
    assert_eq!(s, StatusCode::OK);
    let m = &overview["metrics"];
    // The mean startup time: the one bucket of a day-wide series over the range.
    let (_, avg) = get(
        &app,
        &f.cookie,
        &format!(
            "/api/v1/qoe/timeseries?metric=startupTimeMs&measurement=avg&granularity=day&{RANGE}"
        ),
    )
    .await;
    let api: Vec<(&str, Value)> = vec![
        ("views", overview["views"].clone()),
        ("playbackFailurePct", m["playbackFailurePct"].clone()),
        ("startupFailurePct", m["startupFailurePct"].clone()),
        ("exitBeforeStartPct", m["exitBeforeStartPct"].clone()),
        ("startupTimeMs.p50", m["startupTimeMs"]["p50"].clone()),
        ("startupTimeMs.p95", m["startupTimeMs"]["p95"].clone()),
        ("startupTimeMs.avg", avg["items"][0]["value"].clone()),
        ("rebufferPct", m["rebufferPct"].clone()),
        ("rebufferFrequency", m["rebufferFrequency"].clone()),
        ("watchTimeMs", m["watchTimeMs"].clone()),
        ("avgBitrateKbps", m["avgBitrateKbps"].clone()),
    ];
    assert_eq!(overview["views"], 3);
    assert_eq!(
        m["playbackFailurePct"], 33.33,
        "not whole: the test can tell"
    );

    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/analytics.md"))
        .expect("docs/analytics.md");
    let section = doc
        .split("## One query per metric (SQLite)")
        .nth(1)
        .expect("the SQLite section");
    let block = section
        .split("```sql\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("its sql block");
    // `-- a, b, c (note)` names the columns of the statement that follows, up to its `;`.
    let mut queries: Vec<(Vec<String>, String)> = Vec::new();
    for line in block.lines() {
        if let Some(names) = line.strip_prefix("-- ") {
            let names = names.split(" (").next().unwrap_or_default();
            queries.push((
                names.split(", ").map(str::to_owned).collect(),
                String::new(),
            ));
        } else if let Some((_, sql)) = queries.last_mut() {
            sql.push_str(line);
            sql.push('\n');
        }
    }
    let (from, to) = (T0, T0 + 2 * 3_600_000);
    let file = app._dir.path().join("telemetry.db");
    let pool = sqlx::SqlitePool::connect_with(
        sqlx::sqlite::SqliteConnectOptions::new()
            .filename(&file)
            .read_only(true),
    )
    .await
    .expect("open telemetry.db read-only");
    let mut seen = Vec::new();
    for (names, sql) in &queries {
        let sql = sql
            .trim()
            .trim_end_matches(';')
            .replace(":owner", "?1")
            .replace(":from", "?2")
            .replace(":to", "?3");
        let row = sqlx::query(&sql)
            .bind(&owner)
            .bind(from)
            .bind(to)
            .fetch_one(&pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        assert_eq!(sqlx::Row::len(&row), names.len(), "{sql}");
        for (i, name) in names.iter().enumerate() {
            // A count is an INTEGER, a ratio a REAL.
            let got: Option<f64> = sqlx::Row::try_get::<Option<f64>, _>(&row, i)
                .or_else(|_| {
                    sqlx::Row::try_get::<Option<i64>, _>(&row, i).map(|v| v.map(|n| n as f64))
                })
                .expect("a number or NULL");
            let want = &api
                .iter()
                .find(|(n, _)| n == name)
                .unwrap_or_else(|| panic!("the doc names {name}, which the API has not"))
                .1;
            assert_eq!(
                got.map(|v| json!(v)).unwrap_or(Value::Null).as_f64(),
                want.as_f64(),
                "{name}: the documented SQL says {got:?}, the API {want}"
            );
            seen.push(name.clone());
        }
    }
    for (name, _) in &api {
        assert!(
            seen.iter().any(|s| s == name),
            "the doc has no query for {name}"
        );
    }
    app.shutdown().await;
}

macro_rules! cases {
    ($($case:ident),* $(,)?) => {
        $(
            mod $case {
                use super::*;
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::$case(spawn(Sink::Sqlite, Engine::Sqlite).await).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn clickhouse() {
                    super::$case(spawn(Sink::ClickHouse, Engine::Sqlite).await).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    super::$case(spawn(Sink::Sqlite, Engine::Postgres).await).await
                }
            }
        )*
    };
}

cases!(
    csv_cells_never_run_as_formulas,
    every_route_answers_by_construction,
    csv_answers_are_text_csv,
    the_timeline_puts_probes_and_viewers_on_one_axis,
    callers_see_only_their_own_views,
    gate_and_bad_parameters,
    stream_ids_follow_every_change_of_the_registered_streams,
);
