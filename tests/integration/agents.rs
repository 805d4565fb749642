//! The agent feed (interface.md rules 1–4, decisions.md §6) and `uptimePct`, derived from
//! probe rows this test stores through the probe store.

use crate::common;
use crate::on_both_engines;

use common::{parts, TestApp};
use reqwest::StatusCode;
use serde_json::{json, Value};
use streamwatch::probes::{NewProbe, ProbeStatus, Probes};
use streamwatch::time::{iso_ms, now_ms};

const MIN: i64 = 60_000;

struct Seed<'a> {
    app: &'a TestApp,
    probes: Probes,
}

impl Seed<'_> {
    async fn probe(
        &self,
        stream_id: &str,
        status: ProbeStatus,
        class: &str,
        latency: i64,
        at: i64,
        last_action: &str,
    ) -> String {
        let p = NewProbe {
            stream_id: stream_id.to_owned(),
            status,
            anomaly_class: streamwatch::states::AnomalyClass::parse(class).expect("a known class"),
            latency_ms: latency,
            http_status: Some(200),
            detail: format!("detail {latency}"),
            created_at: at,
            // The seeds' degraded probes of class `slow response` are slow ones (playable); a
            // `client error` is a 4xx (down), as decisions.md v1.1 §6 counts them.
            playable: status == ProbeStatus::Healthy || class == "slow response",
            last_action: last_action.to_owned(),
            next_probe_at: at + 30_000,
        };
        self.probes
            .record(&p)
            .await
            .expect("record")
            .expect("stream exists")
    }
}

fn seed(app: &TestApp) -> Seed<'_> {
    Seed {
        app,
        probes: Probes::new(app.state.db.clone()),
    }
}

async fn feed(app: &TestApp, cookie: &str) -> Vec<Value> {
    let (s, b) = parts(app.get("/api/v1/agents", Some(cookie)).await).await;
    assert_eq!(s, StatusCode::OK);
    b["items"].as_array().expect("items").clone()
}

async fn feed_derives_severity_class_fix_and_action(app: TestApp) {
    let cookie = app.user("op@example.com").await;
    let a = app.stream(&cookie, "http://127.0.0.1:9/a.m3u8").await;
    let b = app.stream(&cookie, "http://127.0.0.1:9/b.m3u8").await;
    let (a, b) = (a["id"].as_str().expect("id"), b["id"].as_str().expect("id"));
    let s = seed(&app);
    let t = now_ms() - 60 * MIN;
    use ProbeStatus::*;
    // Stream a: fails, then recovers (its failing probes are resolved).
    let a1 = s
        .probe(a, Healthy, "no anomaly", 84, t, "probe ok in 84 ms")
        .await;
    let a2 = s
        .probe(
            a,
            Healthy,
            "no anomaly",
            1000,
            t + MIN,
            "probe ok in 1000 ms",
        )
        .await;
    let a3 = s
        .probe(
            a,
            Degraded,
            "client error",
            12,
            t + 2 * MIN,
            "raised probe frequency after degraded probe",
        )
        .await;
    let a4 = s
        .probe(
            a,
            Failing,
            "network / timeout",
            10_000,
            t + 3 * MIN,
            "opened incident: network / timeout",
        )
        .await;
    let a5 = s
        .probe(
            a,
            Healthy,
            "no anomaly",
            999,
            t + 4 * MIN,
            "closed incident after recovery",
        )
        .await;
    // Stream b: degraded, then failing with no later healthy probe.
    let b1 = s
        .probe(
            b,
            Degraded,
            "slow response",
            2500,
            t + 5 * MIN,
            "raised probe frequency after degraded probe",
        )
        .await;
    let b2 = s
        .probe(
            b,
            Failing,
            "5xx server error",
            40,
            t + 6 * MIN,
            "opened incident: 5xx server error",
        )
        .await;

    let items = feed(&app, &cookie).await;
    let ids: Vec<&str> = items
        .iter()
        .map(|i| i["id"].as_str().expect("id"))
        .collect();
    assert_eq!(ids, vec![&b2, &b1, &a5, &a4, &a3, &a2, &a1], "newest first");

    let row = |i: usize| {
        let v = &items[i];
        (
            v["severity"].clone(),
            v["anomalyClass"].clone(),
            v["fix"].clone(),
            v["action"].clone(),
        )
    };
    let a_last = json!("closed incident after recovery");
    let b_last = json!("opened incident: 5xx server error");
    assert_eq!(
        row(0),
        (
            json!("critical"),
            json!("5xx server error"),
            json!("investigating"),
            json!("investigating")
        )
    );
    assert_eq!(
        row(1),
        (
            json!("warn"),
            json!("slow response"),
            b_last.clone(),
            json!("raised probe frequency — confirming degradation")
        )
    );
    assert_eq!(
        row(2),
        (
            json!("info"),
            json!("no anomaly"),
            a_last.clone(),
            json!("no action needed — stream healthy")
        )
    );
    assert_eq!(
        row(3),
        (
            json!("critical"),
            json!("network / timeout"),
            a_last.clone(),
            json!("resolved — stream recovered")
        )
    );
    assert_eq!(
        row(4),
        (
            json!("warn"),
            json!("client error"),
            a_last.clone(),
            json!("raised probe frequency — confirming degradation")
        )
    );
    assert_eq!(
        row(5),
        (
            json!("info"),
            json!("no anomaly"),
            a_last.clone(),
            json!("watching latency — response time rising")
        )
    );
    assert_eq!(row(6).3, json!("no action needed — stream healthy"));

    assert_eq!(
        items[0],
        json!({
            "id": b2, "streamId": b, "sourceUrl": "http://127.0.0.1:9/b.m3u8", "streamName": "127.0.0.1/b.m3u8",
            "severity": "critical", "anomalyClass": "5xx server error", "fix": "investigating", "action": "investigating",
            "createdAt": iso_ms(t + 6 * MIN), "latencyMs": 40, "detail": "detail 40"
        })
    );
}

async fn feed_holds_the_newest_hundred(app: TestApp) {
    let cookie = app.user("op@example.com").await;
    let st = app.stream(&cookie, "http://127.0.0.1:9/a.m3u8").await;
    let id = st["id"].as_str().expect("id");
    let s = seed(&app);
    let t = now_ms() - 200 * MIN;
    let mut newest = String::new();
    for i in 0..120 {
        newest = s
            .probe(
                id,
                ProbeStatus::Healthy,
                "no anomaly",
                10,
                t + i * 1000,
                "probe ok in 10 ms",
            )
            .await;
    }
    let items = feed(&app, &cookie).await;
    assert_eq!(items.len(), 100);
    assert_eq!(items[0]["id"], json!(newest));
    assert_eq!(items[99]["createdAt"], json!(iso_ms(t + 20 * 1000)));
}

async fn snapshot_and_uptime_follow_probes(app: TestApp) {
    let cookie = app.user("op@example.com").await;
    let st = app.stream(&cookie, "http://127.0.0.1:9/a.m3u8").await;
    let id = st["id"].as_str().expect("id");
    let s = seed(&app);
    let now = now_ms();
    use ProbeStatus::*;
    // Outside the window: ignored.
    s.probe(
        id,
        Failing,
        "network / timeout",
        1,
        now - 25 * 60 * MIN,
        "opened incident: network / timeout",
    )
    .await;
    // In the hour that straddles the window start, on both sides of it.
    s.probe(
        id,
        Failing,
        "network / timeout",
        1,
        now - 24 * 60 * MIN - 5 * MIN,
        "x",
    )
    .await;
    s.probe(
        id,
        Failing,
        "network / timeout",
        1,
        now - 24 * 60 * MIN + 5 * MIN,
        "x",
    )
    .await;
    s.probe(id, Healthy, "no anomaly", 1, now - 10 * 60 * MIN, "x")
        .await;
    s.probe(id, Degraded, "slow response", 1, now - 5 * MIN, "x")
        .await;
    s.probe(
        id,
        Healthy,
        "no anomaly",
        84,
        now - MIN,
        "probe ok in 84 ms",
    )
    .await;
    // In the window: 4 probes, 1 failing (down), 1 slow (degraded but playable: up).
    let (_, one) = parts(
        app.get(&format!("/api/v1/streams/{id}"), Some(&cookie))
            .await,
    )
    .await;
    assert_eq!(one["uptimePct"], json!(75.0));
    assert_eq!(one["agentState"], "healthy");
    assert_eq!(one["lastAction"], "probe ok in 84 ms");
    assert_eq!(one["lastCheckedAt"], json!(iso_ms(now - MIN)));
    let (_, list) = parts(app.get("/api/v1/streams", Some(&cookie)).await).await;
    assert_eq!(list["items"][0]["uptimePct"], json!(75.0));
    assert_eq!(list["items"][0]["status"], "watching");

    s.probe(
        id,
        Failing,
        "5xx server error",
        30,
        now,
        "opened incident: 5xx server error",
    )
    .await;
    let (_, list) = parts(app.get("/api/v1/streams", Some(&cookie)).await).await;
    let item = &list["items"][0];
    assert_eq!(
        (item["status"].clone(), item["agentState"].clone()),
        (json!("failing"), json!("degraded"))
    );
    assert_eq!(item["uptimePct"], json!(60.0));
    s.probe(
        id,
        Degraded,
        "client error",
        30,
        now,
        "raised probe frequency after degraded probe",
    )
    .await;
    let (_, list) = parts(app.get("/api/v1/streams", Some(&cookie)).await).await;
    assert_eq!(list["items"][0]["status"], "degraded");
    // decisions.md v1.1: a 4xx manifest is down for every viewer. 6 probes, 3 down.
    assert_eq!(list["items"][0]["uptimePct"], json!(50.0));
}

async fn old_probe_rows_are_pruned(app: TestApp) {
    let cookie = app.user("op@example.com").await;
    let id = app.stream(&cookie, "http://127.0.0.1:9/a.m3u8").await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let s = seed(&app);
    let now = now_ms();
    s.probe(
        &id,
        ProbeStatus::Healthy,
        "no anomaly",
        1,
        now - 31 * 24 * 60 * MIN,
        "x",
    )
    .await;
    s.probe(
        &id,
        ProbeStatus::Healthy,
        "no anomaly",
        1,
        now - 29 * 24 * 60 * MIN,
        "x",
    )
    .await;
    assert_eq!(s.probes.prune(now).await.expect("prune"), 1);
    assert_eq!(feed(&app, &cookie).await.len(), 1);
    let _ = s.app;
}

/// The feed's parameters (decisions.md v1.1 §6): `streamId`, repeatable `severity`, `before`
/// (a probe `createdAt`, for paging) and `limit` (1–500); bad values are 400s keyed by
/// parameter; without parameters it is exactly the contract's feed.
async fn feed_filters_and_pages(app: TestApp) {
    let cookie = app.user("op@example.com").await;
    let a = app.stream(&cookie, "http://127.0.0.1:9/a.m3u8").await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let b = app.stream(&cookie, "http://127.0.0.1:9/b.m3u8").await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let s = seed(&app);
    let t = now_ms() - 300 * MIN;
    let statuses = [
        (ProbeStatus::Healthy, "no anomaly"),
        (ProbeStatus::Degraded, "client error"),
        (ProbeStatus::Failing, "5xx server error"),
    ];
    for i in 0..150 {
        let (status, class) = statuses[i % 3];
        let id = if i % 2 == 0 { &a } else { &b };
        s.probe(id, status, class, 10, t + i as i64 * 1000, "x")
            .await;
    }
    let get = |q: String| {
        let (app, cookie) = (&app, &cookie);
        async move { parts(app.get(&format!("/api/v1/agents{q}"), Some(cookie)).await).await }
    };
    // No parameters: the contract's 100 newest.
    let (st, all) = get(String::new()).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(all["items"].as_array().expect("items").len(), 100);
    // One stream, one or two severities, paging with before, a limit.
    let (_, only_a) = get(format!("?streamId={a}&limit=500")).await;
    let only_a = only_a["items"].as_array().expect("items").clone();
    assert_eq!(only_a.len(), 75);
    assert!(only_a.iter().all(|i| i["streamId"] == a.as_str()));
    let (_, critical) = get("?severity=critical&limit=500".into()).await;
    let critical = critical["items"].as_array().expect("items").clone();
    assert_eq!(critical.len(), 50);
    assert!(critical.iter().all(|i| i["severity"] == "critical"));
    let (_, two) = get("?severity=critical&severity=warn&limit=500".into()).await;
    assert_eq!(two["items"].as_array().expect("items").len(), 100);
    let (_, page1) = get(format!("?streamId={b}&severity=info&limit=10")).await;
    let page1 = page1["items"].as_array().expect("items").clone();
    assert_eq!(page1.len(), 10);
    let before = page1.last().expect("last")["createdAt"]
        .as_str()
        .expect("ts")
        .to_owned();
    let (_, page2) = get(format!(
        "?streamId={b}&severity=info&limit=10&before={before}"
    ))
    .await;
    let page2 = page2["items"].as_array().expect("items").clone();
    assert_eq!(page2.len(), 10);
    assert!(page2
        .iter()
        .all(|i| i["createdAt"].as_str() < Some(before.as_str())));
    assert!(page2
        .iter()
        .all(|i| i["severity"] == "info" && i["streamId"] == b.as_str()));
    // Unknown parameters are ignored.
    assert_eq!(get("?foo=bar".into()).await, (StatusCode::OK, all));
    // Bad values: 400, keyed by parameter, all reported at once.
    for (q, body) in [
        (
            "?severity=loud",
            json!({ "severity": "Invalid enum value. Expected 'info' | 'warn' | 'critical', received 'loud'" }),
        ),
        (
            "?limit=0",
            json!({ "limit": "Number must be greater than or equal to 1" }),
        ),
        (
            "?limit=501",
            json!({ "limit": "Number must be less than or equal to 500" }),
        ),
        (
            "?limit=ten",
            json!({ "limit": "Expected number, received nan" }),
        ),
        (
            "?limit=2.5",
            json!({ "limit": "Expected integer, received float" }),
        ),
        ("?before=yesterday", json!({ "before": "Invalid datetime" })),
        ("?streamId=nope", json!({ "streamId": "Stream not found" })),
        ("?streamId=%00", json!({ "streamId": "Stream not found" })),
        (
            "?limit=0&before=x&severity=no",
            json!({
                "limit": "Number must be greater than or equal to 1",
                "before": "Invalid datetime",
                "severity": "Invalid enum value. Expected 'info' | 'warn' | 'critical', received 'no'"
            }),
        ),
    ] {
        assert_eq!(
            get(q.into()).await,
            (StatusCode::BAD_REQUEST, json!({ "errors": body })),
            "{q}"
        );
    }
}

on_both_engines!(
    feed_filters_and_pages,
    feed_derives_severity_class_fix_and_action,
    feed_holds_the_newest_hundred,
    snapshot_and_uptime_follow_probes,
    old_probe_rows_are_pruned,
);
