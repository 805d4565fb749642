//! The agent feed (interface.md rules 1–4, decisions.md §6) and `uptimePct`, derived from
//! probe rows this test stores through the probe store.

mod common;

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
            anomaly_class: class.to_owned(),
            latency_ms: latency,
            http_status: Some(200),
            detail: format!("detail {latency}"),
            created_at: at,
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
    // In the window: 4 probes, 1 failing.
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
    assert_eq!(list["items"][0]["uptimePct"], json!(66.67));
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

on_both_engines!(
    feed_derives_severity_class_fix_and_action,
    feed_holds_the_newest_hundred,
    snapshot_and_uptime_follow_probes,
    old_probe_rows_are_pruned,
);
