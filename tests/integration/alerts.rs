//! Alerts end to end (decisions.md §12, alerts.md) with real receivers: HTTP servers started
//! by the test on loopback. Stream rules fire after exactly `failAfter` unplayable probes and
//! resolve after `recoverAfter` playable ones; retries keep their `webhook-id`; a 410 disables
//! the channel; a refused target is refused at save time and at send time with no connection;
//! grouping, PagerDuty, chat bodies, rotation, reminders, QoE rules and the 400s.

// Test helpers unwrap: a panic is a failed test with its message.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::Duration;

use base64::Engine as _;
use common::receiver::{Received, Receiver};
use common::{parts, spawn_quiet, Engine, TestApp};
use hmac::{Hmac, Mac};
use reqwest::StatusCode;
use serde_json::{json, Value};
use sha2::Sha256;
use streamwatch::probes::{NewProbe, ProbeStatus, Probes};
use streamwatch::states::AnomalyClass;
use streamwatch::time::now_ms;

/// Long enough for a broken run to fail rather than hang; never reached by a passing one.
const LIMIT: Duration = Duration::from_secs(30);

async fn spawn(engine: Engine) -> TestApp {
    spawn_with_allow(engine, "127.0.0.0/8").await
}

async fn spawn_with_allow(engine: Engine, allow: &str) -> TestApp {
    let allow = allow.to_owned();
    spawn_quiet(engine, move |c| {
        let list = streamwatch::config::CidrList(vec![allow.parse().expect("cidr")]);
        c.allow_private = list.clone();
        c.alerts_allow_private = list;
        c.alert_timing.sender_poll = Duration::from_millis(50);
        // The tests evaluate QoE rules and reminders themselves.
        c.alert_timing.evaluate_every = Duration::from_secs(3600);
    })
    .await
}

struct Ctx {
    cookie: String,
    stream_id: String,
    probes: Probes,
    clock: std::sync::atomic::AtomicI64,
}

async fn setup(app: &TestApp) -> Ctx {
    let cookie = app.user("alerts@example.com").await;
    let stream = app.stream(&cookie, "http://127.0.0.1:9/live.m3u8").await;
    Ctx {
        cookie,
        stream_id: stream["id"].as_str().unwrap().to_owned(),
        probes: Probes::new(app.state.db.clone()),
        // A minute back: probes are in the past, and a 10-minute group window still far ahead.
        clock: std::sync::atomic::AtomicI64::new(now_ms() - 60_000),
    }
}

impl Ctx {
    /// Records one probe of `stream` (as the prober would), a second after the previous one.
    async fn probe(&self, stream: &str, playable: bool) {
        let at = self
            .clock
            .fetch_add(1000, std::sync::atomic::Ordering::SeqCst);
        self.probes
            .record(&NewProbe {
                stream_id: stream.to_owned(),
                status: if playable {
                    ProbeStatus::Healthy
                } else {
                    ProbeStatus::Failing
                },
                anomaly_class: if playable {
                    AnomalyClass::NoAnomaly
                } else {
                    AnomalyClass::ClientError
                },
                latency_ms: 50,
                http_status: Some(if playable { 200 } else { 404 }),
                detail: if playable {
                    "probe ok".into()
                } else {
                    "HTTP 404".into()
                },
                created_at: at,
                playable,
                last_action: "test".into(),
                next_probe_at: at + 30_000,
            })
            .await
            .expect("record")
            .expect("stream exists");
    }
}

async fn post(app: &TestApp, cookie: &str, path: &str, body: Value) -> (StatusCode, Value) {
    parts(app.post(path, Some(cookie), body).await).await
}

async fn get(app: &TestApp, cookie: &str, path: &str) -> (StatusCode, Value) {
    parts(app.get(path, Some(cookie)).await).await
}

async fn channel(app: &TestApp, cookie: &str, body: Value) -> Value {
    let (s, b) = post(app, cookie, "/api/v1/alerts/channels", body).await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    b
}

async fn rule(app: &TestApp, cookie: &str, body: Value) -> Value {
    let (s, b) = post(app, cookie, "/api/v1/alerts/rules", body).await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    b
}

async fn deliveries(app: &TestApp, cookie: &str) -> Vec<Value> {
    let (s, b) = get(app, cookie, "/api/v1/alerts/deliveries").await;
    assert_eq!(s, StatusCode::OK);
    b["items"].as_array().unwrap().clone()
}

/// Polls the delivery log until `pred` holds for the delivery `id`.
async fn delivery_until(
    app: &TestApp,
    cookie: &str,
    id: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let all = deliveries(app, cookie).await;
        if let Some(d) = all.iter().find(|d| d["id"] == id) {
            if pred(d) {
                return d.clone();
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "delivery {id} never matched: {all:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The Standard Webhooks check a receiver runs: every signature in the header that the
/// secret makes.
fn signatures_valid_for(secret: &str, r: &Received) -> Vec<bool> {
    let key = base64::engine::general_purpose::STANDARD
        .decode(secret.strip_prefix("whsec_").unwrap())
        .unwrap();
    let id = r.header("webhook-id").unwrap();
    let ts = r.header("webhook-timestamp").unwrap();
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{ts}.{}", r.body).as_bytes());
    let expected = format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
    );
    r.header("webhook-signature")
        .unwrap()
        .split(' ')
        .map(|s| s == expected)
        .collect()
}

/// Moves a delivery's next attempt (or the end of its group window) to now.
async fn fast_forward(app: &TestApp, delivery_id: &str) {
    sqlx::query("UPDATE alert_deliveries SET next_attempt_at = 0, group_until = 0 WHERE id = $1")
        .bind(delivery_id)
        .execute(&app.state.db.pool)
        .await
        .unwrap();
    app.state.alerts.wake_sender();
}

async fn a_stream_rule_fires_once_after_fail_after_and_resolves_after_recover_after(app: TestApp) {
    let ctx = setup(&app).await;
    let hook = Receiver::start().await;
    let ch = channel(
        &app,
        &ctx.cookie,
        json!({ "name": "ops hook", "type": "webhook", "url": hook.url, "groupWindow": "0s" }),
    )
    .await;
    let secret = ch["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("whsec_"));
    let r = rule(&app, &ctx.cookie, json!({
        "name": "Main down", "kind": "stream", "streamId": ctx.stream_id, "channelIds": [ch["id"]]
    }))
    .await;
    assert_eq!(
        (
            r["failAfter"].clone(),
            r["recoverAfter"].clone(),
            r["state"].clone()
        ),
        (json!(3), json!(2), json!("ok"))
    );

    ctx.probe(&ctx.stream_id, false).await;
    ctx.probe(&ctx.stream_id, false).await;
    let (_, rules) = get(&app, &ctx.cookie, "/api/v1/alerts/rules").await;
    assert_eq!(rules["items"][0]["state"], "pending");
    assert!(
        deliveries(&app, &ctx.cookie).await.is_empty(),
        "nothing before failAfter probes"
    );

    ctx.probe(&ctx.stream_id, false).await;
    let got = hook.wait_for(1, LIMIT).await;
    let fired = &got[0];
    assert_eq!(fired.header("content-type"), Some("application/json"));
    assert!(fired
        .header("user-agent")
        .unwrap()
        .starts_with("streamwatch/"));
    assert!(fired.header("webhook-id").unwrap().starts_with("msg_"));
    let ts: i64 = fired.header("webhook-timestamp").unwrap().parse().unwrap();
    assert!((ts - now_ms() / 1000).abs() < 600);
    assert_eq!(signatures_valid_for(&secret, fired), vec![true]);
    let body = fired.json();
    assert_eq!(body["type"], "incident.firing");
    let inc = &body["data"]["incidents"][0];
    assert_eq!(body["data"]["incidents"].as_array().unwrap().len(), 1);
    assert_eq!(inc["ruleName"], "Main down");
    assert_eq!(inc["kind"], "stream");
    assert_eq!(inc["state"], "firing");
    assert_eq!(inc["streamId"], json!(ctx.stream_id));
    assert_eq!(inc["sourceUrl"], "http://127.0.0.1:9/live.m3u8");
    assert_eq!(inc["detail"], "3 probes not playable: HTTP 404");
    assert_eq!(inc["resolvedAt"], Value::Null);

    // Still down: no second notice. Back up once: not yet resolved.
    ctx.probe(&ctx.stream_id, false).await;
    ctx.probe(&ctx.stream_id, true).await;
    let (_, rules) = get(&app, &ctx.cookie, "/api/v1/alerts/rules").await;
    assert_eq!(rules["items"][0]["state"], "firing");
    assert_eq!(deliveries(&app, &ctx.cookie).await.len(), 1);

    ctx.probe(&ctx.stream_id, true).await;
    let got = hook.wait_for(2, LIMIT).await;
    let resolved = got[1].json();
    assert_eq!(resolved["type"], "incident.resolved");
    assert_eq!(resolved["data"]["incidents"][0]["id"], inc["id"]);
    assert_eq!(resolved["data"]["incidents"][0]["state"], "resolved");
    assert!(resolved["data"]["incidents"][0]["resolvedAt"].is_string());
    assert_eq!(signatures_valid_for(&secret, &got[1]), vec![true]);

    ctx.probe(&ctx.stream_id, true).await;
    let (_, incidents) = get(&app, &ctx.cookie, "/api/v1/alerts/incidents").await;
    assert_eq!(incidents["items"].as_array().unwrap().len(), 1);
    assert_eq!(incidents["items"][0]["state"], "resolved");
    let (_, firing) = get(&app, &ctx.cookie, "/api/v1/alerts/incidents?state=firing").await;
    assert_eq!(firing["items"], json!([]));
    let log = deliveries(&app, &ctx.cookie).await;
    assert_eq!(log.len(), 2);
    for d in &log {
        let d = delivery_until(&app, &ctx.cookie, d["id"].as_str().unwrap(), |d| {
            d["status"] == "sent"
        })
        .await;
        assert_eq!(
            (d["attempts"].clone(), d["lastStatusCode"].clone()),
            (json!(1), json!(200))
        );
        assert!(d["sentAt"].is_string() && d["lastLatencyMs"].is_i64());
        assert_eq!(d["incidentIds"], json!([inc["id"]]));
    }
    assert_eq!(hook.requests().len(), 2, "each transition exactly once");
    app.shutdown().await;
}

async fn a_receiver_that_fails_twice_gets_the_same_webhook_id_three_times(app: TestApp) {
    let ctx = setup(&app).await;
    let hook = Receiver::start().await;
    hook.script(&[503, 503]);
    let ch = channel(
        &app,
        &ctx.cookie,
        json!({ "name": "flaky", "type": "webhook", "url": hook.url, "groupWindow": "0s" }),
    )
    .await;
    rule(&app, &ctx.cookie, json!({ "name": "down", "kind": "stream", "streamId": ctx.stream_id, "failAfter": 1, "channelIds": [ch["id"]] })).await;
    ctx.probe(&ctx.stream_id, false).await;

    hook.wait_for(1, LIMIT).await;
    let id = deliveries(&app, &ctx.cookie).await[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // After each failure the next attempt follows the schedule: 5 s, then 5 min (±10 %).
    for (n, (lo, hi)) in [(1, (4_500, 5_500)), (2, (270_000, 330_000))] {
        let d = delivery_until(&app, &ctx.cookie, &id, |d| d["attempts"] == n).await;
        assert_eq!(
            (d["status"].clone(), d["lastStatusCode"].clone()),
            (json!("pending"), json!(503))
        );
        let (delay,): (i64,) = sqlx::query_as(
            "SELECT d.next_attempt_at - a.at FROM alert_deliveries d JOIN alert_attempts a \
             ON a.delivery_id = d.id AND a.attempt = d.attempts WHERE d.id = $1",
        )
        .bind(&id)
        .fetch_one(&app.state.db.pool)
        .await
        .unwrap();
        assert!(
            (lo..=hi).contains(&delay),
            "attempt {n}: next in {delay} ms"
        );
        fast_forward(&app, &id).await;
        hook.wait_for(n as usize + 1, LIMIT).await;
    }
    let d = delivery_until(&app, &ctx.cookie, &id, |d| d["status"] == "sent").await;
    assert_eq!(
        (d["attempts"].clone(), d["lastStatusCode"].clone()),
        (json!(3), json!(200))
    );
    let got = hook.requests();
    assert_eq!(got.len(), 3);
    let webhook_id = got[0].header("webhook-id").unwrap();
    assert_eq!(d["webhookId"], webhook_id);
    assert!(got
        .iter()
        .all(|r| r.header("webhook-id") == Some(webhook_id) && r.body == got[0].body));
    let (attempts,): (i64,) =
        sqlx::query_as("SELECT COUNT(*) FROM alert_attempts WHERE delivery_id = $1")
            .bind(&id)
            .fetch_one(&app.state.db.pool)
            .await
            .unwrap();
    assert_eq!(attempts, 3);
    app.shutdown().await;
}

async fn a_410_disables_the_channel(app: TestApp) {
    let ctx = setup(&app).await;
    let hook = Receiver::start().await;
    hook.default_status(410);
    let ch = channel(
        &app,
        &ctx.cookie,
        json!({ "name": "gone", "type": "slack", "url": hook.url, "groupWindow": "0s" }),
    )
    .await;
    rule(&app, &ctx.cookie, json!({ "name": "down", "kind": "stream", "failAfter": 1, "recoverAfter": 1, "channelIds": [ch["id"]] })).await;
    ctx.probe(&ctx.stream_id, false).await;
    hook.wait_for(1, LIMIT).await;
    let id = deliveries(&app, &ctx.cookie).await[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let d = delivery_until(&app, &ctx.cookie, &id, |d| d["status"] != "pending").await;
    assert_eq!(
        (d["status"].clone(), d["lastStatusCode"].clone()),
        (json!("dead"), json!(410))
    );
    let (_, chans) = get(&app, &ctx.cookie, "/api/v1/alerts/channels").await;
    assert_eq!(chans["items"][0]["enabled"], false);
    assert_eq!(
        chans["items"][0]["disabledReason"],
        "receiver answered 410 Gone"
    );
    // The resolve finds the channel off: no delivery, no request.
    ctx.probe(&ctx.stream_id, true).await;
    assert_eq!(deliveries(&app, &ctx.cookie).await.len(), 1);
    // A test or a resend while it is off is dead at once, saying why (never pending forever).
    let (s, t) = post(
        &app,
        &ctx.cookie,
        &format!(
            "/api/v1/alerts/channels/{}/test",
            ch["id"].as_str().unwrap()
        ),
        json!({}),
    )
    .await;
    assert_eq!(
        (s, t["status"].clone(), t["lastError"].clone()),
        (
            StatusCode::ACCEPTED,
            json!("dead"),
            json!("channel disabled: enable it, then resend")
        )
    );
    let (s, r) = post(
        &app,
        &ctx.cookie,
        &format!("/api/v1/alerts/deliveries/{id}/resend"),
        json!({}),
    )
    .await;
    assert_eq!(
        (s, r["status"].clone()),
        (StatusCode::ACCEPTED, json!("dead"))
    );
    // Switched back on, it clears the reason.
    let (s, b) = parts(
        app.patch(
            &format!("/api/v1/alerts/channels/{}", ch["id"].as_str().unwrap()),
            Some(&ctx.cookie),
            json!({ "enabled": true }),
        )
        .await,
    )
    .await;
    assert_eq!(
        (s, b["enabled"].clone(), b["disabledReason"].clone()),
        (StatusCode::OK, json!(true), Value::Null)
    );
    assert_eq!(hook.requests().len(), 1);
    app.shutdown().await;
}

async fn a_refused_target_is_refused_at_save_and_at_send_with_no_connection(app: TestApp) {
    let ctx = setup(&app).await;
    // The guard lets 127.0.0.1 through (this app's config), not 127.0.0.2.
    let refused = Receiver::start_on("127.0.0.2").await;
    let (s, b) = post(
        &app,
        &ctx.cookie,
        "/api/v1/alerts/channels",
        json!({ "name": "x", "type": "webhook", "url": refused.url }),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    // The same message as a stream's sourceUrl.
    let (_, stream_answer) = post(
        &app,
        &ctx.cookie,
        "/api/v1/streams",
        json!({ "sourceUrl": refused.url }),
    )
    .await;
    assert_eq!(
        b,
        json!({ "errors": { "url": stream_answer["errors"]["sourceUrl"] } }),
        "{b}"
    );
    for url in [
        "http://169.254.169.254/latest",
        "http://[::1]:9/x",
        "file:///etc/passwd",
        "not a url",
    ] {
        let (s, b) = post(
            &app,
            &ctx.cookie,
            "/api/v1/alerts/channels",
            json!({ "name": "x", "type": "webhook", "url": url }),
        )
        .await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{url}");
        assert!(b["errors"]["url"].is_string(), "{url}: {b}");
    }
    assert!(
        get(&app, &ctx.cookie, "/api/v1/alerts/channels").await.1["items"]
            .as_array()
            .unwrap()
            .is_empty()
    );

    // A target that passed at save time and points elsewhere at send time (a DNS change):
    // refused before any connection.
    let ok = Receiver::start().await;
    let ch = channel(
        &app,
        &ctx.cookie,
        json!({ "name": "moved", "type": "webhook", "url": ok.url }),
    )
    .await;
    sqlx::query("UPDATE alert_channels SET url = $1 WHERE id = $2")
        .bind(&refused.url)
        .bind(ch["id"].as_str().unwrap())
        .execute(&app.state.db.pool)
        .await
        .unwrap();
    let (s, d) = post(
        &app,
        &ctx.cookie,
        &format!(
            "/api/v1/alerts/channels/{}/test",
            ch["id"].as_str().unwrap()
        ),
        json!({}),
    )
    .await;
    assert_eq!(
        (s, d["event"].clone(), d["status"].clone()),
        (StatusCode::ACCEPTED, json!("test"), json!("pending"))
    );
    let d = delivery_until(&app, &ctx.cookie, d["id"].as_str().unwrap(), |d| {
        d["status"] != "pending"
    })
    .await;
    assert_eq!(d["status"], "failed");
    assert!(
        d["lastError"]
            .as_str()
            .unwrap()
            .starts_with("refused by the SSRF guard"),
        "{d}"
    );
    assert_eq!(refused.connections(), 0);
    assert_eq!(ok.connections(), 0);
    app.shutdown().await;
}

/// A test and a resend answer 202 with the delivery as queued (`pending`, no attempt yet),
/// however fast the woken sender is: the answer never races the attempt (issue 28: the status
/// used to read `pending`, `sent` or `failed` by timing). Repeated, against the quickest
/// outcomes there are: a refusal by the guard (no connection at all) and a receiver on
/// loopback that answers at once.
async fn a_test_and_a_resend_answer_the_delivery_as_queued(app: TestApp) {
    let ctx = setup(&app).await;
    let refused = Receiver::start_on("127.0.0.2").await;
    let ok = Receiver::start().await;
    // A channel takes 10 tests and 10 resends a minute: the 50 rounds go to 5 channels of
    // each kind, the 20 resends to two channels.
    let mut moved = Vec::new();
    let mut fine = Vec::new();
    for i in 0..5 {
        let m = channel(
            &app,
            &ctx.cookie,
            json!({ "name": format!("moved {i}"), "type": "webhook", "url": ok.url }),
        )
        .await;
        sqlx::query("UPDATE alert_channels SET url = $1 WHERE id = $2")
            .bind(&refused.url)
            .bind(m["id"].as_str().unwrap())
            .execute(&app.state.db.pool)
            .await
            .unwrap();
        moved.push(m);
        fine.push(
            channel(
                &app,
                &ctx.cookie,
                json!({ "name": format!("fine {i}"), "type": "webhook", "url": ok.url }),
            )
            .await,
        );
    }
    let queued = |d: &Value| {
        (
            d["event"].clone(),
            d["status"].clone(),
            d["attempts"].clone(),
            d["lastError"].clone(),
            d["sentAt"].clone(),
        )
    };
    let mut last = vec![Value::Null; 5];
    for round in 0..50 {
        for ch in [&moved[round / 10], &fine[round / 10]] {
            let (s, d) = post(
                &app,
                &ctx.cookie,
                &format!(
                    "/api/v1/alerts/channels/{}/test",
                    ch["id"].as_str().unwrap()
                ),
                json!({}),
            )
            .await;
            assert_eq!(s, StatusCode::ACCEPTED, "{d}");
            assert_eq!(
                queued(&d),
                (
                    json!("test"),
                    json!("pending"),
                    json!(0),
                    Value::Null,
                    Value::Null
                ),
                "round {round}: {d}"
            );
            last[round / 10] = d;
        }
    }
    // Each one was then attempted: the refused ones failed, the others were sent.
    let (_, log) = get(&app, &ctx.cookie, "/api/v1/alerts/deliveries?limit=100").await;
    for d in log["items"].as_array().unwrap() {
        let want = if moved.iter().any(|m| d["channelId"] == m["id"]) {
            "failed"
        } else {
            "sent"
        };
        let d = delivery_until(&app, &ctx.cookie, d["id"].as_str().unwrap(), |d| {
            d["status"] != "pending"
        })
        .await;
        assert_eq!(d["status"], want, "{d}");
    }
    for round in 0..20 {
        let (s, d) = post(
            &app,
            &ctx.cookie,
            &format!(
                "/api/v1/alerts/deliveries/{}/resend",
                last[3 + round / 10]["id"].as_str().unwrap()
            ),
            json!({}),
        )
        .await;
        assert_eq!(s, StatusCode::ACCEPTED, "{d}");
        assert_eq!(
            queued(&d),
            (
                json!("test"),
                json!("pending"),
                json!(0),
                Value::Null,
                Value::Null
            ),
            "resend {round}: {d}"
        );
    }
    assert_eq!(ok.wait_for(70, LIMIT).await.len(), 70);
    assert_eq!(refused.connections(), 0);
    app.shutdown().await;
}

async fn an_outage_of_many_streams_is_one_delivery(app: TestApp) {
    let ctx = setup(&app).await;
    let mut streams = vec![ctx.stream_id.clone()];
    for i in 0..4 {
        streams.push(
            app.stream(&ctx.cookie, &format!("http://127.0.0.1:9/s{i}.m3u8"))
                .await["id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    let hook = Receiver::start().await;
    let ch = channel(
        &app,
        &ctx.cookie,
        json!({ "name": "grouped", "type": "discord", "url": hook.url, "groupWindow": "10m" }),
    )
    .await;
    rule(&app, &ctx.cookie, json!({ "name": "Origin down", "kind": "stream", "streamId": null, "failAfter": 1, "channelIds": [ch["id"]] })).await;
    for s in &streams {
        ctx.probe(s, false).await;
    }
    let log = deliveries(&app, &ctx.cookie).await;
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0]["incidentIds"].as_array().unwrap().len(), 5);
    assert_eq!(log[0]["status"], "pending");
    assert_eq!(hook.requests().len(), 0, "held for the group window");
    fast_forward(&app, log[0]["id"].as_str().unwrap()).await;
    let got = hook.wait_for(1, LIMIT).await;
    let content = got[0].json()["content"].as_str().unwrap().to_owned();
    assert!(
        content.starts_with("streamwatch: 5 incidents firing\n"),
        "{content}"
    );
    assert_eq!(content.matches("• Origin down: ").count(), 5);
    let (_, rules) = get(&app, &ctx.cookie, "/api/v1/alerts/rules").await;
    assert_eq!(rules["items"][0]["state"], "firing");
    assert_eq!(hook.requests().len(), 1);
    app.shutdown().await;
}

async fn pagerduty_triggers_and_resolves_with_one_dedup_key(app: TestApp) {
    let ctx = setup(&app).await;
    let pd = Receiver::start().await;
    let ch = channel(&app, &ctx.cookie, json!({ "name": "on-call", "type": "pagerduty", "url": pd.url, "routingKey": "R0123456789abcd", "groupWindow": "0s" })).await;
    assert_eq!(ch["routingKey"], "…abcd");
    assert!(ch.get("secret").is_none());
    rule(&app, &ctx.cookie, json!({ "name": "down", "kind": "stream", "streamId": ctx.stream_id, "failAfter": 1, "recoverAfter": 1, "channelIds": [ch["id"]] })).await;
    ctx.probe(&ctx.stream_id, false).await;
    ctx.probe(&ctx.stream_id, true).await;
    let got = pd.wait_for(2, LIMIT).await;
    let (trigger, resolve) = (got[0].json(), got[1].json());
    let (_, incidents) = get(&app, &ctx.cookie, "/api/v1/alerts/incidents").await;
    let dedup = format!(
        "streamwatch-{}",
        incidents["items"][0]["id"].as_str().unwrap()
    );
    assert_eq!(trigger["event_action"], "trigger");
    assert_eq!(resolve["event_action"], "resolve");
    assert_eq!(trigger["dedup_key"], json!(dedup));
    assert_eq!(resolve["dedup_key"], json!(dedup));
    assert_eq!(trigger["routing_key"], "R0123456789abcd");
    assert_eq!(trigger["payload"]["severity"], "critical");
    assert!(trigger["payload"]["summary"]
        .as_str()
        .unwrap()
        .contains("1 probe not playable: HTTP 404"));
    assert!(got[0].header("webhook-signature").is_none());
    // Reads never show the key.
    let (_, chans) = get(&app, &ctx.cookie, "/api/v1/alerts/channels").await;
    assert!(!chans.to_string().contains("R0123456789"));
    app.shutdown().await;
}

async fn rotation_signs_with_both_secrets_for_a_day(app: TestApp) {
    let ctx = setup(&app).await;
    let hook = Receiver::start().await;
    let ch = channel(
        &app,
        &ctx.cookie,
        json!({ "name": "hook", "type": "webhook", "url": hook.url }),
    )
    .await;
    let id = ch["id"].as_str().unwrap();
    let old = ch["secret"].as_str().unwrap().to_owned();
    let (s, rotated) = post(
        &app,
        &ctx.cookie,
        &format!("/api/v1/alerts/channels/{id}/rotate-secret"),
        json!({}),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let new = rotated["secret"].as_str().unwrap().to_owned();
    assert!(new.starts_with("whsec_") && new != old);
    let (s, _) = post(
        &app,
        &ctx.cookie,
        &format!("/api/v1/alerts/channels/{id}/test"),
        json!({}),
    )
    .await;
    assert_eq!(s, StatusCode::ACCEPTED);
    let got = hook.wait_for(1, LIMIT).await;
    assert_eq!(got[0].json()["type"], "test");
    assert_eq!(
        signatures_valid_for(&new, &got[0]),
        vec![true, false],
        "new first"
    );
    assert_eq!(
        signatures_valid_for(&old, &got[0]),
        vec![false, true],
        "then the old one"
    );
    // Secrets are sealed at rest.
    let (stored,): (String,) =
        sqlx::query_as("SELECT secret_sealed FROM alert_channels WHERE id = $1")
            .bind(id)
            .fetch_one(&app.state.db.pool)
            .await
            .unwrap();
    assert!(!stored.contains(&new[6..]) && !stored.contains("whsec_"));
    // A test resent is a new delivery with the same body and a new webhook-id.
    let d = deliveries(&app, &ctx.cookie).await[0].clone();
    let d = delivery_until(&app, &ctx.cookie, d["id"].as_str().unwrap(), |d| {
        d["status"] == "sent"
    })
    .await;
    let (s, again) = post(
        &app,
        &ctx.cookie,
        &format!(
            "/api/v1/alerts/deliveries/{}/resend",
            d["id"].as_str().unwrap()
        ),
        json!({}),
    )
    .await;
    assert_eq!(s, StatusCode::ACCEPTED);
    assert_ne!(again["webhookId"], d["webhookId"]);
    let got = hook.wait_for(2, LIMIT).await;
    assert_eq!(got[1].body, got[0].body);
    assert_eq!(got[1].header("webhook-id"), again["webhookId"].as_str());
    // Only webhooks have a secret.
    let slack = channel(
        &app,
        &ctx.cookie,
        json!({ "name": "chat", "type": "slack", "url": hook.url }),
    )
    .await;
    let (s, b) = post(
        &app,
        &ctx.cookie,
        &format!(
            "/api/v1/alerts/channels/{}/rotate-secret",
            slack["id"].as_str().unwrap()
        ),
        json!({}),
    )
    .await;
    assert_eq!(
        (s, b),
        (
            StatusCode::BAD_REQUEST,
            json!({ "errors": { "type": "Only webhook channels have a signing secret" } })
        )
    );
    app.shutdown().await;
}

async fn qoe_rules_fire_resolve_and_remind(app: TestApp) {
    let ctx = setup(&app).await;
    let hook = Receiver::start().await;
    let ch = channel(
        &app,
        &ctx.cookie,
        json!({ "name": "qoe", "type": "webhook", "url": hook.url, "groupWindow": "0s" }),
    )
    .await;
    let r = rule(
        &app,
        &ctx.cookie,
        json!({
            "name": "Failures over 10 %", "kind": "qoe", "metric": "playbackFailurePct", "op": ">",
            "threshold": 10, "window": "5m", "minViews": 2, "filter": ["browser:curl"],
            "remindEvery": "5m", "channelIds": [ch["id"]]
        }),
    )
    .await;
    assert_eq!(
        (
            r["window"].clone(),
            r["minViews"].clone(),
            r["failAfter"].clone()
        ),
        (json!("5m"), json!(2), Value::Null)
    );
    let (_, key) = post(&app, &ctx.cookie, "/api/v1/keys", json!({ "label": "p" })).await;
    let key = key["rawKey"].as_str().unwrap().to_owned();
    let ts = streamwatch::time::iso_ms(now_ms() - 60_000);
    for (session, events) in [
        (
            "ok-1",
            json!([{ "type": "playback_start", "ts": ts, "payload": { "positionMs": 0, "durationMs": 0, "contentId": "c" } }]),
        ),
        (
            "bad-1",
            json!([{ "type": "error", "ts": ts, "payload": { "code": "E", "message": "m", "fatal": true } }]),
        ),
    ] {
        let r = app
            .http
            .post(app.url("/api/v1/telemetry"))
            .bearer_auth(&key)
            .header("user-agent", "curl/8")
            .json(&json!({ "apiKey": key, "sessionId": session, "events": events }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::NO_CONTENT);
    }
    analytics::Refresher::new(app.state.analytics.clone())
        .step()
        .await
        .unwrap();
    let evaluate = || async {
        app.state
            .alerts
            .evaluate_scheduled(&app.state.analytics, &app.state.streams, now_ms())
            .await
            .unwrap();
    };
    evaluate().await;
    let got = hook.wait_for(1, LIMIT).await;
    let body = got[0].json();
    assert_eq!(body["type"], "incident.firing");
    let inc = &body["data"]["incidents"][0];
    assert_eq!(inc["kind"], "qoe");
    assert_eq!(inc["streamId"], Value::Null);
    assert_eq!(
        inc["detail"],
        "playbackFailurePct 50 > 10 over 5m (2 views)"
    );
    evaluate().await;
    assert_eq!(
        deliveries(&app, &ctx.cookie).await.len(),
        1,
        "still firing: no second notice"
    );

    // A reminder once remindEvery has passed since the last notice.
    sqlx::query("UPDATE alert_incidents SET reminded_at = reminded_at - 300000")
        .execute(&app.state.db.pool)
        .await
        .unwrap();
    evaluate().await;
    let got = hook.wait_for(2, LIMIT).await;
    assert_eq!(got[1].json()["type"], "incident.reminder");

    // Needing more views than there are: no longer crosses, so it resolves.
    let (s, _) = parts(
        app.patch(
            &format!("/api/v1/alerts/rules/{}", r["id"].as_str().unwrap()),
            Some(&ctx.cookie),
            json!({ "minViews": 3 }),
        )
        .await,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    evaluate().await;
    let got = hook.wait_for(3, LIMIT).await;
    assert_eq!(got[2].json()["type"], "incident.resolved");
    app.shutdown().await;
}

async fn deleting_a_rule_resolves_its_incident(app: TestApp) {
    let ctx = setup(&app).await;
    let hook = Receiver::start().await;
    let ch = channel(
        &app,
        &ctx.cookie,
        json!({ "name": "h", "type": "webhook", "url": hook.url, "groupWindow": "0s" }),
    )
    .await;
    let r = rule(
        &app,
        &ctx.cookie,
        json!({ "name": "down", "kind": "stream", "failAfter": 1, "channelIds": [ch["id"]] }),
    )
    .await;
    ctx.probe(&ctx.stream_id, false).await;
    hook.wait_for(1, LIMIT).await;
    let s = app
        .delete(
            &format!("/api/v1/alerts/rules/{}", r["id"].as_str().unwrap()),
            Some(&ctx.cookie),
        )
        .await
        .status();
    assert_eq!(s, StatusCode::NO_CONTENT);
    let got = hook.wait_for(2, LIMIT).await;
    assert_eq!(got[1].json()["type"], "incident.resolved");
    let (_, incidents) = get(&app, &ctx.cookie, "/api/v1/alerts/incidents").await;
    assert_eq!(incidents["items"][0]["state"], "resolved");
    assert_eq!(incidents["items"][0]["ruleName"], "down");
    app.shutdown().await;
}

async fn bad_bodies_are_400s_and_others_things_are_404s(app: TestApp) {
    let ctx = setup(&app).await;
    let hook = Receiver::start().await;
    let cases: Vec<(&str, Value, Value)> = vec![
        (
            "/api/v1/alerts/channels",
            json!({}),
            json!({ "name": "Required", "type": "Required" }),
        ),
        (
            "/api/v1/alerts/channels",
            json!({ "name": "x", "type": "sms" }),
            json!({ "type": "Invalid enum value. Expected 'webhook' | 'slack' | 'discord' | 'pagerduty', received 'sms'" }),
        ),
        (
            "/api/v1/alerts/channels",
            json!({ "name": "x", "type": "webhook" }),
            json!({ "url": "Required" }),
        ),
        (
            "/api/v1/alerts/channels",
            json!({ "name": "x", "type": "pagerduty" }),
            json!({ "routingKey": "Required" }),
        ),
        (
            "/api/v1/alerts/channels",
            json!({ "name": "", "type": "slack", "url": hook.url, "groupWindow": "11m" }),
            json!({ "name": "String must contain at least 1 character(s)", "groupWindow": "Must be between 0s and 10m" }),
        ),
        (
            "/api/v1/alerts/channels",
            json!({ "name": "x", "type": "slack", "url": hook.url, "groupWindow": "soon" }),
            json!({ "groupWindow": "Invalid duration: use <n>s, <n>m, <n>h or <n>d (e.g. 30s, 5m)" }),
        ),
        (
            "/api/v1/alerts/channels",
            json!({ "name": 5, "type": "slack", "url": 7 }),
            json!({ "name": "Expected string, received number", "url": "Expected string, received number" }),
        ),
        (
            "/api/v1/alerts/rules",
            json!({}),
            json!({ "channelIds": "Array must contain at least 1 element(s)", "kind": "Required", "name": "Required" }),
        ),
        (
            "/api/v1/alerts/rules",
            json!({ "name": "r", "kind": "stream", "streamId": "nosuchstream", "failAfter": 0, "channelIds": ["nope"] }),
            // The shape is checked first; ids are looked up only in a well-formed body.
            json!({ "failAfter": "Number must be greater than or equal to 1" }),
        ),
        (
            "/api/v1/alerts/rules",
            json!({ "name": "r", "kind": "qoe", "metric": "views", "channelIds": [] }),
            json!({ "channelIds": "Array must contain at least 1 element(s)", "metric": "views is a count, not a quality metric: choose another", "op": "Required", "threshold": "Required" }),
        ),
        (
            "/api/v1/alerts/rules",
            json!({ "name": "r", "kind": "qoe", "metric": "rebufferPct", "op": ">=", "threshold": "5", "window": "30s", "remindEvery": "1m", "filter": ["country:FR"] }),
            json!({ "op": "Invalid enum value. Expected '>' | '<', received '>='", "threshold": "Expected number, received string", "window": "Must be between 1m and 24h", "remindEvery": "Must be at least 5m" }),
        ),
        (
            "/api/v1/alerts/rules",
            json!({ "name": "r", "kind": "qoe", "metric": "rebufferPct", "measurement": "p95", "op": ">", "threshold": 1, "channelIds": ["x"] }),
            json!({ "measurement": "Only startupTimeMs has a measurement", "channelIds": "Unknown channel: x" }),
        ),
        (
            "/api/v1/alerts/rules",
            json!({ "name": "r", "kind": "stream", "metric": "rebufferPct", "channelIds": ["nope"] }),
            json!({ "channelIds": "Unknown channel: nope", "metric": "Only qoe rules have metric" }),
        ),
    ];
    for (path, body, errors) in cases {
        let (s, b) = post(&app, &ctx.cookie, path, body.clone()).await;
        assert_eq!(
            (s, b),
            (StatusCode::BAD_REQUEST, json!({ "errors": errors })),
            "{body}"
        );
    }
    let ch = channel(
        &app,
        &ctx.cookie,
        json!({ "name": "mine", "type": "slack", "url": hook.url }),
    )
    .await;
    let (s, b) = post(&app, &ctx.cookie, "/api/v1/alerts/rules", json!({ "name": "r", "kind": "stream", "streamId": "nosuchstream", "channelIds": [ch["id"]] })).await;
    assert_eq!(
        (s, b),
        (
            StatusCode::BAD_REQUEST,
            json!({ "errors": { "streamId": "Stream not found" } })
        )
    );
    let (s, b) = post(&app, &ctx.cookie, "/api/v1/alerts/rules", json!({ "name": "r", "kind": "qoe", "metric": "rebufferPct", "op": ">", "threshold": 1, "filter": ["country:FR"], "channelIds": [ch["id"]] })).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(
        b["errors"]["filter"]
            .as_str()
            .unwrap()
            .starts_with("Invalid filter 'country:FR'"),
        "{b}"
    );
    let r = rule(
        &app,
        &ctx.cookie,
        json!({ "name": "r", "kind": "stream", "channelIds": [ch["id"]] }),
    )
    .await;
    let (s, b) = parts(
        app.patch(
            &format!("/api/v1/alerts/rules/{}", r["id"].as_str().unwrap()),
            Some(&ctx.cookie),
            json!({ "kind": "qoe" }),
        )
        .await,
    )
    .await;
    assert_eq!(
        (s, b),
        (
            StatusCode::BAD_REQUEST,
            json!({ "errors": { "kind": "The kind of a rule cannot change" } })
        )
    );

    // Another user's channel is not theirs to use, see or change.
    let other = app.user("other-alerts@example.com").await;
    let (s, b) = post(
        &app,
        &other,
        "/api/v1/alerts/rules",
        json!({ "name": "r", "kind": "stream", "channelIds": [ch["id"]] }),
    )
    .await;
    assert_eq!(
        (s, b["errors"]["channelIds"].clone()),
        (
            StatusCode::BAD_REQUEST,
            json!(format!("Unknown channel: {}", ch["id"].as_str().unwrap()))
        )
    );
    let id = ch["id"].as_str().unwrap();
    for (status, path) in [
        (
            app.patch(
                &format!("/api/v1/alerts/channels/{id}"),
                Some(&other),
                json!({ "name": "x" }),
            )
            .await
            .status(),
            "patch",
        ),
        (
            app.delete(&format!("/api/v1/alerts/channels/{id}"), Some(&other))
                .await
                .status(),
            "delete",
        ),
        (
            app.post(
                &format!("/api/v1/alerts/channels/{id}/test"),
                Some(&other),
                json!({}),
            )
            .await
            .status(),
            "test",
        ),
        (
            app.delete(
                &format!("/api/v1/alerts/rules/{}", r["id"].as_str().unwrap()),
                Some(&other),
            )
            .await
            .status(),
            "rule",
        ),
        (
            app.post(
                "/api/v1/alerts/deliveries/nosuch/resend",
                Some(&other),
                json!({}),
            )
            .await
            .status(),
            "resend",
        ),
    ] {
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
    }
    assert!(
        get(&app, &other, "/api/v1/alerts/channels").await.1["items"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    for path in [
        "/api/v1/alerts/incidents?limit=0",
        "/api/v1/alerts/incidents?state=open",
        "/api/v1/alerts/deliveries?status=lost&before=yesterday",
    ] {
        let (s, b) = get(&app, &ctx.cookie, path).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{path}: {b}");
    }
    let (_, b) = get(
        &app,
        &ctx.cookie,
        "/api/v1/alerts/deliveries?status=lost&before=yesterday",
    )
    .await;
    assert_eq!(
        b,
        json!({ "errors": { "before": "Invalid datetime", "status": "Invalid enum value. Expected 'pending' | 'sent' | 'failed' | 'dead', received 'lost'" } })
    );
    // Without a session: 401.
    assert_eq!(
        app.get("/api/v1/alerts/rules", None).await.status(),
        StatusCode::UNAUTHORIZED
    );
    app.shutdown().await;
}

/// The issue's rule, `playbackFailurePct > 5` over `5m` with `minViews` 25, on a synthetic
/// fleet: 24 views at 17 % failures stay quiet (too few views), 40 views at 10 % fire once
/// (two evaluators racing, as two instances would), 100 views at 4 % resolve.
async fn a_qoe_rule_fires_on_a_fleet_that_crosses_it_and_not_below_min_views(app: TestApp) {
    let ctx = setup(&app).await;
    let hook = Receiver::start().await;
    let ch = channel(
        &app,
        &ctx.cookie,
        json!({ "name": "fleet", "type": "webhook", "url": hook.url, "groupWindow": "0s" }),
    )
    .await;
    rule(
        &app,
        &ctx.cookie,
        json!({
            "name": "Failures over 5 %", "kind": "qoe", "metric": "playbackFailurePct", "op": ">",
            "threshold": 5, "window": "5m", "minViews": 25, "channelIds": [ch["id"]]
        }),
    )
    .await;
    let (_, key) = post(
        &app,
        &ctx.cookie,
        "/api/v1/keys",
        json!({ "label": "fleet" }),
    )
    .await;
    let key = key["rawKey"].as_str().unwrap().to_owned();
    let ts = streamwatch::time::iso_ms(now_ms() - 60_000);
    let mut views = 0;
    let mut add = |ok: usize, failed: usize| {
        let batches: Vec<(String, Value)> = (0..ok + failed)
            .map(|i| {
                views += 1;
                let event = if i < failed {
                    json!({ "type": "error", "ts": ts, "payload": { "code": "E", "message": "m", "fatal": true } })
                } else {
                    json!({ "type": "playback_start", "ts": ts, "payload": { "positionMs": 0, "durationMs": 0, "contentId": "c" } })
                };
                (format!("fleet-{views}"), event)
            })
            .collect();
        let (app, key) = (&app, &key);
        async move {
            for (session, event) in batches {
                let r = app
                    .http
                    .post(app.url("/api/v1/telemetry"))
                    .bearer_auth(key)
                    .json(&json!({ "apiKey": key, "sessionId": session, "events": [event] }))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), StatusCode::NO_CONTENT);
            }
            analytics::Refresher::new(app.state.analytics.clone())
                .step()
                .await
                .unwrap();
        }
    };
    let evaluate = || async {
        app.state
            .alerts
            .evaluate_scheduled(&app.state.analytics, &app.state.streams, now_ms())
            .await
            .unwrap();
    };
    let state = || async {
        get(&app, &ctx.cookie, "/api/v1/alerts/rules").await.1["items"][0]["state"].clone()
    };

    add(20, 4).await;
    evaluate().await;
    assert_eq!(state().await, "ok", "24 views: below minViews");
    assert!(deliveries(&app, &ctx.cookie).await.is_empty());

    add(16, 0).await;
    tokio::join!(evaluate(), evaluate());
    assert_eq!(state().await, "firing");
    let got = hook.wait_for(1, LIMIT).await;
    assert_eq!(
        got[0].json()["data"]["incidents"][0]["detail"],
        "playbackFailurePct 10 > 5 over 5m (40 views)"
    );
    let (_, incidents) = get(&app, &ctx.cookie, "/api/v1/alerts/incidents").await;
    assert_eq!(
        incidents["items"].as_array().unwrap().len(),
        1,
        "one incident however many evaluators"
    );

    add(60, 0).await;
    evaluate().await;
    let got = hook.wait_for(2, LIMIT).await;
    assert_eq!(got[1].json()["type"], "incident.resolved");
    assert_eq!(
        deliveries(&app, &ctx.cookie).await.len(),
        2,
        "one firing, one resolved"
    );
    app.shutdown().await;
}

// ---------------------------------------------------------------- hardening, round 2

/// The signed-in user's id.
async fn user_id(app: &TestApp, cookie: &str) -> String {
    let (_, s) = get(app, cookie, "/api/auth/get-session").await;
    s["user"]["id"].as_str().unwrap().to_owned()
}

/// Finding 3 (decisions.md §14): streams are shared and anyone may delete one; the rules other
/// users bound to it stay listed, disabled with `disabledReason: "stream deleted"`, and their
/// open incidents resolve, notified as `incident.resolved` with the detail `stream deleted`.
async fn deleting_a_stream_disables_every_users_rules_on_it_and_resolves_them(app: TestApp) {
    let ctx = setup(&app).await;
    let bob = app.user("bob@example.com").await;
    let hook = Receiver::start().await;
    let ch = channel(
        &app,
        &bob,
        json!({ "name": "h", "type": "webhook", "url": hook.url, "groupWindow": "0s" }),
    )
    .await;
    let bound = rule(&app, &bob, json!({ "name": "this stream", "kind": "stream", "streamId": ctx.stream_id, "failAfter": 1, "channelIds": [ch["id"]] })).await;
    let every = rule(&app, &bob, json!({ "name": "every stream", "kind": "stream", "failAfter": 1, "channelIds": [ch["id"]] })).await;
    assert_eq!(bound["disabledReason"], Value::Null);
    ctx.probe(&ctx.stream_id, false).await;
    hook.wait_for(2, LIMIT).await;

    // The user who registered the stream deletes it.
    let s = app
        .delete(
            &format!("/api/v1/streams/{}", ctx.stream_id),
            Some(&ctx.cookie),
        )
        .await
        .status();
    assert_eq!(s, StatusCode::NO_CONTENT);
    let got = hook.wait_for(4, LIMIT).await;
    let resolved: Vec<Value> = got
        .iter()
        .map(Received::json)
        .filter(|b| b["type"] == "incident.resolved")
        .collect();
    assert_eq!(resolved.len(), 2, "{got:?}");
    for b in &resolved {
        let i = &b["data"]["incidents"][0];
        assert_eq!(i["detail"], "stream deleted");
        assert_eq!(i["state"], "resolved");
        assert_eq!(i["streamId"], json!(ctx.stream_id));
    }

    let (_, rules) = get(&app, &bob, "/api/v1/alerts/rules").await;
    let find = |id: &Value| {
        rules["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == *id)
            .cloned()
            .unwrap()
    };
    let kept = find(&bound["id"]);
    assert_eq!(
        (
            kept["enabled"].clone(),
            kept["disabledReason"].clone(),
            kept["streamId"].clone()
        ),
        (json!(false), json!("stream deleted"), json!(ctx.stream_id))
    );
    let other = find(&every["id"]);
    assert_eq!(
        (other["enabled"].clone(), other["disabledReason"].clone()),
        (json!(true), Value::Null)
    );
    let (_, incidents) = get(&app, &bob, "/api/v1/alerts/incidents").await;
    assert!(incidents["items"]
        .as_array()
        .unwrap()
        .iter()
        .all(|i| i["state"] == "resolved"));

    // Back on only with a stream that exists; renaming is fine meanwhile.
    let path = format!("/api/v1/alerts/rules/{}", bound["id"].as_str().unwrap());
    let (s, b) = parts(
        app.patch(&path, Some(&bob), json!({ "enabled": true }))
            .await,
    )
    .await;
    assert_eq!(
        (s, b),
        (
            StatusCode::BAD_REQUEST,
            json!({ "errors": { "streamId": "Stream not found" } })
        )
    );
    let (s, b) = parts(
        app.patch(&path, Some(&bob), json!({ "name": "renamed" }))
            .await,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(
        (b["enabled"].clone(), b["disabledReason"].clone()),
        (json!(false), json!("stream deleted"))
    );
    let fresh = app.stream(&bob, "http://127.0.0.1:9/other.m3u8").await;
    let (s, b) = parts(
        app.patch(
            &path,
            Some(&bob),
            json!({ "streamId": fresh["id"], "enabled": true }),
        )
        .await,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(
        (b["enabled"].clone(), b["disabledReason"].clone()),
        (json!(true), Value::Null)
    );
    app.shutdown().await;
}

/// Finding 4: a rule over every stream reports streams other users name. A stream named to
/// ping and phish reaches Slack escaped, Discord escaped and with no mentions allowed, and
/// PagerDuty as plain text; the only link is the service's own page of the stream.
async fn markup_in_stream_names_reaches_chat_as_text(app: TestApp) {
    let ctx = setup(&app).await;
    let mallory = app.user("mallory@example.com").await;
    let hostile = "<!channel> @everyone <https://evil.example/login|Sign in again> [Sign in](https://evil.example)";
    let (s, evil) = post(
        &app,
        &mallory,
        "/api/v1/streams",
        json!({ "sourceUrl": "http://127.0.0.1:9/evil.m3u8", "name": hostile }),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{evil}");
    let evil_id = evil["id"].as_str().unwrap();
    let (slack, discord, pd) = (
        Receiver::start().await,
        Receiver::start().await,
        Receiver::start().await,
    );
    let mut ids = Vec::new();
    for body in [
        json!({ "name": "s", "type": "slack", "url": slack.url, "groupWindow": "0s" }),
        json!({ "name": "d", "type": "discord", "url": discord.url, "groupWindow": "0s" }),
        json!({ "name": "p", "type": "pagerduty", "url": pd.url, "routingKey": "R0123456789abcd", "groupWindow": "0s" }),
    ] {
        ids.push(channel(&app, &ctx.cookie, body).await["id"].clone());
    }
    rule(
        &app,
        &ctx.cookie,
        json!({ "name": "any stream", "kind": "stream", "failAfter": 1, "channelIds": ids }),
    )
    .await;
    ctx.probe(evil_id, false).await;
    let link = format!("https://watch.example.com/app/streams/{evil_id}");

    let text = slack.wait_for(1, LIMIT).await[0].json()["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        text.contains(
            "&lt;!channel&gt; @everyone &lt;https://evil.example/login|Sign in again&gt;"
        ),
        "{text}"
    );
    let (line, own_link) = text.rsplit_once(' ').unwrap();
    assert_eq!(own_link, format!("<{link}|open>"), "{text}");
    assert!(
        !line.contains('<') && !line.contains('>'),
        "no markup from the name: {text}"
    );

    let body = discord.wait_for(1, LIMIT).await[0].json();
    assert_eq!(body["allowed_mentions"], json!({ "parse": [] }));
    let content = body["content"].as_str().unwrap();
    assert!(
        content.contains(r"\[Sign in\]\(https://evil.example\)"),
        "no masked link: {content}"
    );
    assert!(content.ends_with(&format!(" <{link}>")), "{content}");

    let event = pd.wait_for(1, LIMIT).await[0].json();
    let summary = event["payload"]["summary"].as_str().unwrap();
    assert!(summary.contains(hostile), "plain text: {summary}");
    assert!(summary.chars().count() <= 1024);
    assert_eq!(event["links"][0]["href"], json!(link));
    app.shutdown().await;
}

async fn spawn_public(engine: Engine) -> TestApp {
    spawn_quiet(engine, |c| {
        c.public_url =
            Some(streamwatch::config::PublicUrl::parse("https://watch.example.com/").expect("url"));
        c.alert_timing.sender_poll = Duration::from_millis(50);
        c.alert_timing.evaluate_every = Duration::from_secs(3600);
    })
    .await
}

/// Finding 5: one tenant's silent receivers never delay another's deliveries. Five channels
/// to receivers that never answer get ten tests each (the eleventh is refused); they hold
/// at most 4 requests per channel and 16 for the user, and another user's test delivery
/// arrives while all 16 are still held (before any of them could time out). Resends are
/// limited the same way.
async fn a_silent_receiver_never_delays_another_channel(app: TestApp) {
    let attacker = app.user("tarpit@example.com").await;
    let mut tarpits = Vec::new();
    let mut channels = Vec::new();
    for i in 0..5 {
        let t = Receiver::start().await;
        t.hold();
        channels.push(
            channel(
                &app,
                &attacker,
                json!({ "name": format!("tarpit {i}"), "type": "webhook", "url": t.url }),
            )
            .await,
        );
        tarpits.push(t);
    }
    for ch in &channels {
        let path = format!(
            "/api/v1/alerts/channels/{}/test",
            ch["id"].as_str().unwrap()
        );
        for _ in 0..10 {
            assert_eq!(
                post(&app, &attacker, &path, json!({})).await.0,
                StatusCode::ACCEPTED
            );
        }
        let (s, b) = post(&app, &attacker, &path, json!({})).await;
        assert_eq!(s, StatusCode::BAD_REQUEST);
        let message = b["errors"]["channel"].as_str().unwrap();
        let wait: i64 = message
            .strip_prefix("Too many test deliveries; try again in ")
            .and_then(|m| m.strip_suffix(" s"))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{message}"));
        assert!((1..=60).contains(&wait), "{message}");
    }
    let held = || tarpits.iter().map(Receiver::arrivals).sum::<usize>();
    let deadline = tokio::time::Instant::now() + LIMIT;
    while held() < 16 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {} requests reached the tarpits",
            held()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for t in &tarpits {
        assert!(
            t.arrivals() <= 4,
            "a channel held {} requests",
            t.arrivals()
        );
    }

    let victim = app.user("victim@example.com").await;
    let good = Receiver::start().await;
    let ch = channel(
        &app,
        &victim,
        json!({ "name": "ok", "type": "webhook", "url": good.url }),
    )
    .await;
    let started = tokio::time::Instant::now();
    let test_path = format!(
        "/api/v1/alerts/channels/{}/test",
        ch["id"].as_str().unwrap()
    );
    let (s, d) = post(&app, &victim, &test_path, json!({})).await;
    assert_eq!(s, StatusCode::ACCEPTED);
    good.wait_for(1, LIMIT).await;
    let took = started.elapsed();
    assert_eq!(
        held(),
        16,
        "the user holds 16 requests and no slot of theirs freed meanwhile"
    );
    eprintln!("another channel's delivery took {took:?} while 16 requests were held by tarpits");

    // Resends: ten a minute per channel.
    let resend = format!(
        "/api/v1/alerts/deliveries/{}/resend",
        d["id"].as_str().unwrap()
    );
    for _ in 0..10 {
        assert_eq!(
            post(&app, &victim, &resend, json!({})).await.0,
            StatusCode::ACCEPTED
        );
    }
    let (s, b) = post(&app, &victim, &resend, json!({})).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let message = b["errors"]["delivery"].as_str().unwrap();
    assert!(
        message.starts_with("Too many resends; try again in ") && message.ends_with(" s"),
        "{message}"
    );
    // Resends do not count as tests.
    assert_eq!(
        post(&app, &victim, &test_path, json!({})).await.0,
        StatusCode::ACCEPTED
    );
    for t in &tarpits {
        t.release();
    }
    app.shutdown().await;
}

async fn spawn_patient(engine: Engine) -> TestApp {
    spawn_quiet(engine, |c| {
        c.alert_timing.sender_poll = Duration::from_millis(50);
        c.alert_timing.evaluate_every = Duration::from_secs(3600);
        // Held requests stay held for the whole test, however slow the machine.
        c.alert_timing.send_timeout = Duration::from_secs(120);
    })
    .await
}

/// Finding 6: at most 50 channels and 200 rules per user; a failing probe under 200 rules
/// over every stream opens 200 incidents, grouped into one delivery; deliveries and their
/// attempts older than 30 days are purged.
async fn rules_and_channels_are_capped_and_old_deliveries_purged(app: TestApp) {
    let ctx = setup(&app).await;
    let hook = Receiver::start().await;
    let first = channel(
        &app,
        &ctx.cookie,
        json!({ "name": "c0", "type": "webhook", "url": hook.url, "groupWindow": "10m" }),
    )
    .await;
    for i in 1..50 {
        channel(
            &app,
            &ctx.cookie,
            json!({ "name": format!("c{i}"), "type": "webhook", "url": hook.url }),
        )
        .await;
    }
    let (s, b) = post(
        &app,
        &ctx.cookie,
        "/api/v1/alerts/channels",
        json!({ "name": "c50", "type": "webhook", "url": hook.url }),
    )
    .await;
    assert_eq!(
        (s, b),
        (
            StatusCode::BAD_REQUEST,
            json!({ "errors": { "name": "Channel limit reached (50)" } })
        )
    );
    let mut last = Value::Null;
    for i in 0..200 {
        last = rule(&app, &ctx.cookie, json!({ "name": format!("r{i}"), "kind": "stream", "failAfter": 1, "channelIds": [first["id"]] })).await;
    }
    let over = json!({ "name": "r200", "kind": "stream", "channelIds": [first["id"]] });
    let (s, b) = post(&app, &ctx.cookie, "/api/v1/alerts/rules", over.clone()).await;
    assert_eq!(
        (s, b),
        (
            StatusCode::BAD_REQUEST,
            json!({ "errors": { "name": "Rule limit reached (200)" } })
        )
    );
    // Per user: someone else is not affected.
    let other = app.user("other@example.com").await;
    channel(
        &app,
        &other,
        json!({ "name": "mine", "type": "webhook", "url": hook.url }),
    )
    .await;

    ctx.probe(&ctx.stream_id, false).await;
    let (_, incidents) = get(&app, &ctx.cookie, "/api/v1/alerts/incidents?limit=500").await;
    assert_eq!(incidents["items"].as_array().unwrap().len(), 200);
    let ds = deliveries(&app, &ctx.cookie).await;
    assert_eq!(ds.len(), 1, "one group");
    assert_eq!(ds[0]["incidentIds"].as_array().unwrap().len(), 200);

    // A rule deleted frees a place.
    let s = app
        .delete(
            &format!("/api/v1/alerts/rules/{}", last["id"].as_str().unwrap()),
            Some(&ctx.cookie),
        )
        .await
        .status();
    assert_eq!(s, StatusCode::NO_CONTENT);
    assert_eq!(
        post(&app, &ctx.cookie, "/api/v1/alerts/rules", over)
            .await
            .0,
        StatusCode::CREATED
    );

    // Purge: a delivery created 31 days ago goes with its attempts; a recent one stays.
    let old = ds[0]["id"].as_str().unwrap().to_owned();
    fast_forward(&app, &old).await;
    delivery_until(&app, &ctx.cookie, &old, |d| d["status"] == "sent").await;
    let (_, recent) = post(
        &app,
        &ctx.cookie,
        &format!(
            "/api/v1/alerts/channels/{}/test",
            first["id"].as_str().unwrap()
        ),
        json!({}),
    )
    .await;
    sqlx::query("UPDATE alert_deliveries SET created_at = $1 WHERE id = $2")
        .bind(now_ms() - 31 * 24 * 3600 * 1000)
        .bind(&old)
        .execute(&app.state.db.pool)
        .await
        .unwrap();
    let purged = streamwatch::alerts::outbox::purge(&app.state.db, now_ms())
        .await
        .unwrap();
    assert_eq!(purged, 1);
    let left: Vec<String> = deliveries(&app, &ctx.cookie)
        .await
        .iter()
        .map(|d| d["id"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        !left.contains(&old) && left.contains(&recent["id"].as_str().unwrap().to_owned()),
        "{left:?}"
    );
    let (attempts,): (i64,) = sqlx::query_as(
        "SELECT CAST(COUNT(*) AS BIGINT) FROM alert_attempts WHERE delivery_id = $1",
    )
    .bind(&old)
    .fetch_one(&app.state.db.pool)
    .await
    .unwrap();
    assert_eq!(attempts, 0);
    app.shutdown().await;
}

/// Reads every file of the data dir (SQLite: the database, its WAL and shared memory) or
/// every alerts row (PostgreSQL) for `secrets`.
async fn assert_no_secret_at_rest(app: &TestApp, secrets: &[&str]) {
    let dir = app._dir.path().to_owned();
    match app.engine {
        Engine::Sqlite => {
            // The pages the writes went to are in the WAL (or the file, once checkpointed).
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if !path.is_file() {
                    continue;
                }
                let bytes = std::fs::read(&path).unwrap();
                for secret in secrets {
                    assert!(
                        !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                        "{secret} found in {}",
                        path.display()
                    );
                }
            }
            let wal = dir.join("streamwatch.db-wal");
            assert!(wal.exists(), "the WAL was read");
        }
        Engine::Postgres => {
            for table in [
                "alert_channels",
                "alert_deliveries",
                "alert_attempts",
                "alert_incidents",
            ] {
                let rows: Vec<(String,)> = sqlx::query_as(&format!(
                    "SELECT CAST(row_to_json(t) AS TEXT) FROM {table} t"
                ))
                .fetch_all(&app.state.db.pool)
                .await
                .unwrap();
                assert!(!rows.is_empty(), "{table}");
                for (row,) in rows {
                    for secret in secrets {
                        assert!(!row.contains(secret), "{secret} in {table}: {row}");
                    }
                }
            }
        }
    }
}

/// Finding 7: no channel secret or routing key rests in the clear. A PagerDuty key is added at
/// send time (never in a stored body); Slack and Discord URLs are sealed, shown in full only
/// in the creation's answer and masked in reads; a channel stored in the clear by an older
/// version is sealed at start-up. On SQLite the database files and their WAL are read byte by
/// byte; every file the service made in its data dir is 0600, the dir 0700.
async fn channel_secrets_never_rest_in_the_clear(app: TestApp) {
    let ctx = setup(&app).await;
    let (pd, slack, discord) = (
        Receiver::start().await,
        Receiver::start().await,
        Receiver::start().await,
    );
    let key = "R0123456789ROUTINGKEYwxyz";
    let slack_url = format!("{}/T000/B000/SLACKSECRETslackxyz", slack.url);
    let discord_url = format!("{}/1234/DISCORDSECRETdiscordxyz", discord.url);
    let p = channel(&app, &ctx.cookie, json!({ "name": "p", "type": "pagerduty", "url": pd.url, "routingKey": key, "groupWindow": "0s" })).await;
    let sl = channel(
        &app,
        &ctx.cookie,
        json!({ "name": "s", "type": "slack", "url": slack_url, "groupWindow": "0s" }),
    )
    .await;
    let di = channel(
        &app,
        &ctx.cookie,
        json!({ "name": "d", "type": "discord", "url": discord_url, "groupWindow": "0s" }),
    )
    .await;
    assert_eq!(sl["url"], json!(slack_url), "shown once, at creation");
    let origin = slack.url.trim_end_matches("/hook").to_owned();
    let (_, listed) = get(&app, &ctx.cookie, "/api/v1/alerts/channels").await;
    let shown = |id: &Value| {
        listed["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == *id)
            .unwrap()
            .clone()
    };
    assert_eq!(shown(&sl["id"])["url"], json!(format!("{origin}/…/****")));
    assert_eq!(shown(&p["id"])["routingKey"], "…wxyz");
    let text = listed.to_string();
    assert!(
        !text.contains("SLACKSECRET")
            && !text.contains("DISCORDSECRET")
            && !text.contains("ROUTINGKEY"),
        "{text}"
    );

    rule(&app, &ctx.cookie, json!({ "name": "down", "kind": "stream", "failAfter": 1, "recoverAfter": 1, "channelIds": [p["id"], sl["id"], di["id"]] })).await;
    ctx.probe(&ctx.stream_id, false).await;
    ctx.probe(&ctx.stream_id, true).await;
    let sent = pd.wait_for(2, LIMIT).await;
    assert!(
        sent.iter().all(|r| r.json()["routing_key"] == key),
        "added at send time"
    );
    assert!(slack
        .wait_for(2, LIMIT)
        .await
        .iter()
        .all(|r| r.path.ends_with("/SLACKSECRETslackxyz")));
    assert!(discord
        .wait_for(2, LIMIT)
        .await
        .iter()
        .all(|r| r.path.ends_with("/DISCORDSECRETdiscordxyz")));

    assert_no_secret_at_rest(&app, &[key, "SLACKSECRET", "DISCORDSECRET"]).await;
    let wal = app._dir.path().join("streamwatch.db-wal");
    if app.engine == Engine::Sqlite {
        assert!(
            std::fs::metadata(&wal).unwrap().len() > 0,
            "the deliveries' writes are in the WAL"
        );
    }

    // A PATCHed URL is sealed too, and masked in the answer.
    let moved = format!("{}/T000/B000/MOVEDSECRETslack", slack.url);
    let (s, b) = parts(
        app.patch(
            &format!("/api/v1/alerts/channels/{}", sl["id"].as_str().unwrap()),
            Some(&ctx.cookie),
            json!({ "url": moved }),
        )
        .await,
    )
    .await;
    assert_eq!(
        (s, b["url"].clone()),
        (StatusCode::OK, json!(format!("{origin}/…/****")))
    );

    // What an older version left in the clear is sealed at start-up.
    let legacy = Receiver::start().await;
    let legacy_url = format!("{}/LEGACYSECRETslack", legacy.url);
    let owner = user_id(&app, &ctx.cookie).await;
    sqlx::query("INSERT INTO alert_channels (id, user_id, name, type, url, group_window_ms, enabled, created_at) VALUES ('legacych', $1, 'old', 'slack', $2, 0, 1, 0)")
        .bind(&owner)
        .bind(&legacy_url)
        .execute(&app.state.db.pool)
        .await
        .unwrap();
    sqlx::query("UPDATE alert_deliveries SET body = $1 WHERE channel_id = $2")
        .bind(format!(
            r#"[{{"routing_key":"{key}","event_action":"trigger"}}]"#
        ))
        .bind(p["id"].as_str().unwrap())
        .execute(&app.state.db.pool)
        .await
        .unwrap();
    app.state.alerts.seal_at_rest().await.unwrap();
    let (s, _) = post(
        &app,
        &ctx.cookie,
        "/api/v1/alerts/channels/legacych/test",
        json!({}),
    )
    .await;
    assert_eq!(s, StatusCode::ACCEPTED);
    assert!(legacy.wait_for(1, LIMIT).await[0]
        .path
        .ends_with("/LEGACYSECRETslack"));

    // Nothing rests in the clear after an older version's rows were sealed either.
    assert_no_secret_at_rest(
        &app,
        &[
            key,
            "SLACKSECRET",
            "DISCORDSECRET",
            "MOVEDSECRET",
            "LEGACYSECRET",
        ],
    )
    .await;
    let dir = app._dir.path().to_owned();
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700);
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            assert_eq!(mode(&path), 0o600, "{}", path.display());
        }
    }
    app.shutdown().await;
}

/// Finding 8: `STREAMWATCH_ALLOW_PRIVATE` opens private networks to probes only; alert
/// channels have their own `STREAMWATCH_ALERTS_ALLOW_PRIVATE`. A channel URL that is a URL
/// but not http(s) gets the guard's message, as a stream's `sourceUrl` does.
async fn alert_targets_have_their_own_allow_list(engine: Engine) {
    let app = spawn_quiet(engine, |c| {
        c.alerts_allow_private = streamwatch::config::CidrList::default();
    })
    .await;
    let cookie = app.user("lists@example.com").await;
    let hook = Receiver::start().await;
    // Probes may reach the loopback origin...
    app.stream(&cookie, &hook.url).await;
    // ...alert channels may not.
    for (url, message) in [
        (
            hook.url.as_str(),
            "Hostname resolves to a private address (127.0.0.1)",
        ),
        ("ftp://example.com/hook", "Only http(s) URLs are allowed"),
        ("not a url", "Must be a valid URL"),
    ] {
        let (s, b) = post(
            &app,
            &cookie,
            "/api/v1/alerts/channels",
            json!({ "name": "x", "type": "webhook", "url": url }),
        )
        .await;
        assert_eq!(
            (s, b),
            (
                StatusCode::BAD_REQUEST,
                json!({ "errors": { "url": message } })
            ),
            "{url}"
        );
    }
    let (_, b) = post(
        &app,
        &cookie,
        "/api/v1/streams",
        json!({ "sourceUrl": "ftp://example.com/x.m3u8" }),
    )
    .await;
    assert_eq!(
        b,
        json!({ "errors": { "sourceUrl": "Only http(s) URLs are allowed" } })
    );
    assert_eq!(hook.connections(), 0);
    app.shutdown().await;
}

mod own_allow_list {
    use super::*;
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        alert_targets_have_their_own_allow_list(Engine::Sqlite).await
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        alert_targets_have_their_own_allow_list(Engine::Postgres).await
    }
}

mod fair_delivery {
    use super::*;
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        a_silent_receiver_never_delays_another_channel(spawn_patient(Engine::Sqlite).await).await
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        a_silent_receiver_never_delays_another_channel(spawn_patient(Engine::Postgres).await).await
    }
}

mod escaped_chat {
    use super::*;
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        markup_in_stream_names_reaches_chat_as_text(spawn_public(Engine::Sqlite).await).await
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        markup_in_stream_names_reaches_chat_as_text(spawn_public(Engine::Postgres).await).await
    }
}

/// Finding 6, second half (PostgreSQL, where another connection can watch): rules are
/// evaluated after the probe's transaction commits, each in a transaction of its own. With
/// one rule's channel lock held elsewhere, that rule's transaction waits; meanwhile the probe
/// and the other rule's incident are committed and visible.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_are_evaluated_after_the_probe_commits_one_transaction_each() {
    let app = spawn(Engine::Postgres).await;
    let ctx = setup(&app).await;
    let hook = Receiver::start().await;
    let free = channel(
        &app,
        &ctx.cookie,
        json!({ "name": "free", "type": "webhook", "url": hook.url }),
    )
    .await;
    let locked = channel(
        &app,
        &ctx.cookie,
        json!({ "name": "locked", "type": "webhook", "url": hook.url }),
    )
    .await;
    let first = rule(
        &app,
        &ctx.cookie,
        json!({ "name": "first", "kind": "stream", "failAfter": 1, "channelIds": [free["id"]] }),
    )
    .await;
    let second = rule(
        &app,
        &ctx.cookie,
        json!({ "name": "second", "kind": "stream", "failAfter": 1, "channelIds": [locked["id"]] }),
    )
    .await;
    // Transitions notifying a channel take its lock (outbox::notify): hold the second's.
    let mut holder = app.state.db.pool.acquire().await.unwrap();
    sqlx::query("SELECT pg_advisory_lock(hashtextextended($1, 0))")
        .bind(locked["id"].as_str().unwrap())
        .execute(&mut *holder)
        .await
        .unwrap();
    let probes = ctx.probes.clone();
    let stream_id = ctx.stream_id.clone();
    let at = now_ms() - 1000;
    let recording = tokio::spawn(async move {
        probes
            .record(&NewProbe {
                stream_id,
                status: ProbeStatus::Failing,
                anomaly_class: AnomalyClass::ServerError,
                latency_ms: 5,
                http_status: Some(503),
                detail: "HTTP 503".into(),
                created_at: at,
                playable: false,
                last_action: "test".into(),
                next_probe_at: at + 30_000,
            })
            .await
    });
    let count = |sql: &'static str, id: String| {
        let pool = app.state.db.pool.clone();
        async move {
            let (n,): (i64,) = sqlx::query_as(sql).bind(id).fetch_one(&pool).await.unwrap();
            n
        }
    };
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let probes = count(
            "SELECT CAST(COUNT(*) AS BIGINT) FROM probes WHERE stream_id = $1",
            ctx.stream_id.clone(),
        )
        .await;
        let opened = count(
            "SELECT CAST(COUNT(*) AS BIGINT) FROM alert_incidents WHERE rule_id = $1",
            first["id"].as_str().unwrap().to_owned(),
        )
        .await;
        if probes == 1 && opened == 1 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the probe ({probes}) and the first rule ({opened}) never committed while the second waited");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!recording.is_finished(), "the second rule is still waiting");
    assert_eq!(
        count(
            "SELECT CAST(COUNT(*) AS BIGINT) FROM alert_incidents WHERE rule_id = $1",
            second["id"].as_str().unwrap().to_owned()
        )
        .await,
        0
    );
    sqlx::query("SELECT pg_advisory_unlock(hashtextextended($1, 0))")
        .bind(locked["id"].as_str().unwrap())
        .execute(&mut *holder)
        .await
        .unwrap();
    drop(holder);
    recording.await.unwrap().unwrap().expect("recorded");
    assert_eq!(
        count(
            "SELECT CAST(COUNT(*) AS BIGINT) FROM alert_incidents WHERE rule_id = $1",
            second["id"].as_str().unwrap().to_owned()
        )
        .await,
        1
    );
    app.shutdown().await;
}

/// Finding 9: on PostgreSQL, every statement with a nullable bind works whatever a pooled
/// connection prepared it with before. One connection (a pool of one) creates and changes a
/// stream rule (threshold null) then a QoE rule (threshold set), and another connection the
/// other way round; the list filters (null or set) go both ways too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nullable_binds_work_in_either_order_on_one_postgres_connection() {
    use streamwatch::alerts::incidents::IncidentFilter;
    use streamwatch::alerts::outbox::DeliveryFilter;
    use streamwatch::alerts::rules::RuleInput;
    use streamwatch::states::{CompareOp, IncidentState, RuleKind};
    let app = spawn(Engine::Postgres).await;
    let cookie = app.user("binds@example.com").await;
    let owner = user_id(&app, &cookie).await;
    let hook = Receiver::start().await;
    let ch = channel(
        &app,
        &cookie,
        json!({ "name": "h", "type": "webhook", "url": hook.url }),
    )
    .await;
    let channel_ids = Some(vec![ch["id"].as_str().unwrap().to_owned()]);
    let stream_rule = RuleInput {
        name: Some("stream".into()),
        kind: Some(RuleKind::Stream),
        channel_ids: channel_ids.clone(),
        ..RuleInput::default()
    };
    let qoe_rule = RuleInput {
        name: Some("qoe".into()),
        kind: Some(RuleKind::Qoe),
        metric: Some(analytics::Metric::PlaybackFailurePct),
        op: Some(CompareOp::Above),
        threshold: Some(5.5),
        channel_ids,
        ..RuleInput::default()
    };
    let guard =
        std::sync::Arc::new(streamwatch::ssrf::Guard::with_system_resolver(vec![]).unwrap());
    for stream_first in [true, false] {
        let one = app.state.db.with_one_connection().await.unwrap();
        let alerts = streamwatch::alerts::Alerts::new(one, &[7u8; 32], guard.clone(), None);
        let order = if stream_first {
            [&stream_rule, &qoe_rule]
        } else {
            [&qoe_rule, &stream_rule]
        };
        let mut made = Vec::new();
        for input in order {
            made.push(alerts.create_rule(&owner, input).await.expect("created"));
        }
        for r in &made {
            let change = RuleInput {
                name: Some(format!("{} again", r.name)),
                ..RuleInput::default()
            };
            let changed = alerts
                .update_rule(&owner, &r.id, &change)
                .await
                .expect("updated");
            assert_eq!(
                changed.qoe.as_ref().map(|q| q.threshold),
                r.qoe.as_ref().map(|q| q.threshold)
            );
        }
        let filters = [
            IncidentFilter {
                limit: 10,
                ..IncidentFilter::default()
            },
            IncidentFilter {
                state: Some(IncidentState::Firing),
                rule_id: Some(made[0].id.clone()),
                before: Some(now_ms()),
                limit: 10,
            },
        ];
        let order: Vec<&IncidentFilter> = if stream_first {
            filters.iter().collect()
        } else {
            filters.iter().rev().collect()
        };
        for f in order {
            alerts.incidents(&owner, f).await.expect("incidents");
        }
        let filters = [
            DeliveryFilter {
                limit: 10,
                ..DeliveryFilter::default()
            },
            DeliveryFilter {
                channel_id: Some(ch["id"].as_str().unwrap().to_owned()),
                status: Some(streamwatch::states::DeliveryStatus::Sent),
                before: Some(now_ms()),
                limit: 10,
            },
        ];
        let order: Vec<&DeliveryFilter> = if stream_first {
            filters.iter().collect()
        } else {
            filters.iter().rev().collect()
        };
        for f in order {
            alerts.deliveries(&owner, f).await.expect("deliveries");
        }
        for r in made {
            alerts.delete_rule(&owner, &r.id).await.expect("deleted");
        }
    }
    // And through the API: a stream rule, then a QoE rule.
    rule(
        &app,
        &cookie,
        json!({ "name": "s", "kind": "stream", "channelIds": [ch["id"]] }),
    )
    .await;
    rule(&app, &cookie, json!({ "name": "q", "kind": "qoe", "metric": "playbackFailurePct", "op": ">", "threshold": 5, "channelIds": [ch["id"]] })).await;
    app.shutdown().await;
}

macro_rules! on_both_engines {
    ($($case:ident),* $(,)?) => {
        $(
            mod $case {
                use super::*;
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::$case(spawn(Engine::Sqlite).await).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    super::$case(spawn(Engine::Postgres).await).await
                }
            }
        )*
    };
}

on_both_engines!(
    a_stream_rule_fires_once_after_fail_after_and_resolves_after_recover_after,
    a_receiver_that_fails_twice_gets_the_same_webhook_id_three_times,
    a_410_disables_the_channel,
    an_outage_of_many_streams_is_one_delivery,
    pagerduty_triggers_and_resolves_with_one_dedup_key,
    rotation_signs_with_both_secrets_for_a_day,
    qoe_rules_fire_resolve_and_remind,
    a_qoe_rule_fires_on_a_fleet_that_crosses_it_and_not_below_min_views,
    deleting_a_rule_resolves_its_incident,
    bad_bodies_are_400s_and_others_things_are_404s,
    deleting_a_stream_disables_every_users_rules_on_it_and_resolves_them,
    rules_and_channels_are_capped_and_old_deliveries_purged,
    channel_secrets_never_rest_in_the_clear,
);

mod refused_targets {
    use super::*;
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn answered_as_queued_sqlite() {
        a_test_and_a_resend_answer_the_delivery_as_queued(
            spawn_with_allow(Engine::Sqlite, "127.0.0.1/32").await,
        )
        .await
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn answered_as_queued_postgres() {
        a_test_and_a_resend_answer_the_delivery_as_queued(
            spawn_with_allow(Engine::Postgres, "127.0.0.1/32").await,
        )
        .await
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        a_refused_target_is_refused_at_save_and_at_send_with_no_connection(
            spawn_with_allow(Engine::Sqlite, "127.0.0.1/32").await,
        )
        .await
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        a_refused_target_is_refused_at_save_and_at_send_with_no_connection(
            spawn_with_allow(Engine::Postgres, "127.0.0.1/32").await,
        )
        .await
    }
}

/// The README's webhook receiver answers 2xx (decisions.md §15): a test delivery to it is
/// `sent` at once (the walkthrough's `python3 -m http.server` answered 501, so the delivery was
/// retried for about 41 hours). And the walkthrough stops the first server before restarting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_webhook_receiver_answers_2xx() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    assert!(
        readme.contains("Then stop the first server (Ctrl+C in its terminal"),
        "the walkthrough restarts without stopping the first server"
    );
    assert!(readme.contains(r#""url":"http://127.0.0.1:8787/hook""#));
    let script = readme
        .split("python3 - <<'EOF'\n")
        .nth(1)
        .and_then(|rest| rest.split("\nEOF\n").next())
        .expect("the receiver's Python in the README");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut receiver = std::process::Command::new("python3")
        .arg("-c")
        .arg(script.replace("8787", &port.to_string()))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("python3");
    let mut listening = false;
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            listening = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(listening, "the README's receiver did not listen");
    let app = common::spawn_app(Engine::Sqlite).await;
    let cookie = app.user("ops@example.com").await;
    let ch = channel(
        &app,
        &cookie,
        json!({ "name": "readme", "type": "webhook", "url": format!("http://127.0.0.1:{port}/hook") }),
    )
    .await;
    let (s, _) = post(
        &app,
        &cookie,
        &format!(
            "/api/v1/alerts/channels/{}/test",
            ch["id"].as_str().unwrap()
        ),
        json!({}),
    )
    .await;
    assert_eq!(s, StatusCode::ACCEPTED);
    let id = deliveries(&app, &cookie).await[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let d = delivery_until(&app, &cookie, &id, |d| d["status"] != "pending").await;
    let _ = receiver.kill();
    let _ = receiver.wait();
    assert_eq!(d["status"], "sent", "{d}");
}
