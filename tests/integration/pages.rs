//! The dashboard's pages over real HTTP (decisions.md §13): the session gate and its `next`,
//! HTML with the page CSP, escaping of stored text, 404 pages, and every page rendering the
//! data of both relational engines. The browser side (module, charts, forms, axe) is
//! `web/test/dashboard-e2e.mjs`.

// Test helpers unwrap: a panic is a failed test with its message.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::{spawn_quiet, Engine, TestApp};
use reqwest::{Method, StatusCode};
use serde_json::json;
use streamwatch::probes::{NewProbe, ProbeStatus, Probes};
use streamwatch::states::AnomalyClass;
use streamwatch::time::now_ms;

async fn spawn(engine: Engine) -> TestApp {
    spawn_quiet(engine, |_| {}).await
}

/// A client that does not follow redirects.
fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

async fn page(
    app: &TestApp,
    path: &str,
    cookie: Option<&str>,
) -> (StatusCode, String, reqwest::header::HeaderMap) {
    let mut req = no_redirects().get(app.url(path));
    if let Some(c) = cookie {
        req = req.header("cookie", format!("auth.session_token={c}"));
    }
    let r = req.send().await.expect("send");
    let status = r.status();
    let headers = r.headers().clone();
    (status, r.text().await.expect("body"), headers)
}

const PAGES: [&str; 10] = [
    "/app",
    "/app/streams",
    "/app/agents",
    "/app/qoe",
    "/app/views",
    "/app/keys",
    "/app/alerts",
    "/app/alerts?before=2026-01-01T00:00:00Z",
    "/app/qoe?range=7d&filter=browser:Chrome&metric=rebufferPct&by=os",
    "/app/streams?q=main&status=failing&page=2",
];

async fn without_a_session_every_page_redirects_to_login_with_next(app: TestApp) {
    for (path, location) in [
        ("/app", "/login"),
        ("/app/streams", "/login?next=%2Fapp%2Fstreams"),
        (
            "/app/streams?q=a%20b&status=failing",
            "/login?next=%2Fapp%2Fstreams%3Fq%3Da%2520b%26status%3Dfailing",
        ),
        (
            "/app/views/some-session",
            "/login?next=%2Fapp%2Fviews%2Fsome-session",
        ),
        ("/app/no/such/page", "/login?next=%2Fapp%2Fno%2Fsuch%2Fpage"),
    ] {
        let (s, _, h) = page(&app, path, None).await;
        assert_eq!(s, StatusCode::FOUND, "{path}");
        assert_eq!(h["location"], location, "{path}");
    }
    // A cookie that names no session is no session.
    let (s, _, h) = page(&app, "/app/keys", Some("forged.value")).await;
    assert_eq!(
        (s, h["location"].to_str().unwrap()),
        (StatusCode::FOUND, "/login?next=%2Fapp%2Fkeys")
    );
    app.shutdown().await;
}

async fn login_and_signup_pages_carry_only_same_origin_next(app: TestApp) {
    let (s, html, h) = page(&app, "/login?next=%2Fapp%2Fkeys", None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(h["content-type"], "text/html; charset=utf-8");
    assert!(h["content-security-policy"]
        .to_str()
        .unwrap()
        .contains("script-src 'self'"));
    assert!(
        html.contains(r#"action="/api/auth/sign-in/email" data-redirect="/app/keys""#),
        "{html}"
    );
    assert!(html.contains(r#"href="/signup?next=%2Fapp%2Fkeys""#));
    for evil in [
        "https://evil.example/",
        "//evil.example",
        "/\\evil.example",
        "javascript:alert(1)",
    ] {
        let (_, html, _) = page(&app, &format!("/login?next={}", urlencode(evil)), None).await;
        assert!(html.contains(r#"data-redirect="/app""#), "{evil}");
        assert!(!html.contains("evil.example"), "{evil}");
    }
    let (s, html, _) = page(&app, "/signup", None).await;
    assert_eq!(s, StatusCode::OK);
    assert!(html.contains(r#"action="/api/auth/sign-up/email" data-redirect="/app""#));

    // Signed in already: straight on to next.
    let cookie = app.user("pages-login@example.com").await;
    let (s, _, h) = page(&app, "/login?next=%2Fapp%2Fviews", Some(&cookie)).await;
    assert_eq!(
        (s, h["location"].to_str().unwrap()),
        (StatusCode::FOUND, "/app/views")
    );
    let (s, _, h) = page(
        &app,
        "/signup?next=https%3A%2F%2Fevil.example",
        Some(&cookie),
    )
    .await;
    assert_eq!(
        (s, h["location"].to_str().unwrap()),
        (StatusCode::FOUND, "/app")
    );
    app.shutdown().await;
}

fn urlencode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

async fn every_page_renders_html_with_the_csp(app: TestApp) {
    let cookie = app.user("pages@example.com").await;
    // Empty: every page says what to do next.
    for path in PAGES {
        let (s, html, h) = page(&app, path, Some(&cookie)).await;
        assert_eq!(s, StatusCode::OK, "{path}: {html}");
        assert_eq!(h["content-type"], "text/html; charset=utf-8", "{path}");
        assert_eq!(h["cache-control"], "no-store", "{path}");
        let csp = h["content-security-policy"].to_str().unwrap();
        assert!(
            csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
            "{path}"
        );
        assert!(
            html.contains(r#"<script type="module" src="/assets/app.js"></script>"#),
            "{path}"
        );
        // No inline script or style anywhere.
        assert_eq!(html.matches("<script").count(), 1, "{path}");
        assert!(!html.contains("style="), "{path}");
        assert!(html.contains("pages@example.com"), "{path}");
    }
    let (_, html, _) = page(&app, "/app/streams", Some(&cookie)).await;
    assert!(html.contains("No stream yet"), "{html}");
    let (_, html, _) = page(&app, "/app/keys", Some(&cookie)).await;
    assert!(html.contains("No key yet"));
    let (_, html, _) = page(&app, "/app/views", Some(&cookie)).await;
    assert!(html.contains("No views in this range"));

    // With data: a stream (named to try escaping), probes, a key, a view.
    let r = app
        .post(
            "/api/v1/streams",
            Some(&cookie),
            json!({ "sourceUrl": "http://127.0.0.1:9/live.m3u8", "name": "<script>alert(1)</script> & co" }),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let stream: serde_json::Value = r.json().await.unwrap();
    let id = stream["id"].as_str().unwrap().to_owned();
    let probes = Probes::new(app.state.db.clone());
    let now = now_ms();
    // All three in the current hour, so its strip cell is "partly down" whenever the test runs.
    let hour = streamwatch::streams::uptime::hour_of(now);
    for (i, status) in [
        ProbeStatus::Healthy,
        ProbeStatus::Failing,
        ProbeStatus::Failing,
    ]
    .into_iter()
    .enumerate()
    {
        probes
            .record(&NewProbe {
                stream_id: id.clone(),
                status,
                anomaly_class: if status == ProbeStatus::Healthy {
                    AnomalyClass::NoAnomaly
                } else {
                    AnomalyClass::ServerError
                },
                latency_ms: 120 + i as i64,
                http_status: Some(if status == ProbeStatus::Healthy {
                    200
                } else {
                    503
                }),
                detail: "HTTP 503 <b>".into(),
                created_at: hour + i as i64 * 1_000,
                playable: status == ProbeStatus::Healthy,
                last_action: "alerted on-call".into(),
                next_probe_at: now + 30_000,
            })
            .await
            .unwrap()
            .unwrap();
    }
    let r = app
        .post(
            "/api/v1/keys",
            Some(&cookie),
            json!({ "label": "web <player>" }),
        )
        .await;
    let key: serde_json::Value = r.json().await.unwrap();
    let raw = key["rawKey"].as_str().unwrap();
    let ts = streamwatch::time::iso_ms(now - 30_000);
    let r = app
        .http
        .post(app.url("/api/v1/telemetry"))
        .bearer_auth(raw)
        .json(&json!({ "apiKey": raw, "sessionId": "page-view-1", "context": { "src": "http://127.0.0.1:9/live.m3u8" }, "events": [
            { "type": "playback_start", "ts": ts, "payload": { "positionMs": 0, "durationMs": 0, "contentId": "movie <1>", "startupMs": 900 } }
        ] }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    analytics::Refresher::new(app.state.analytics.clone())
        .step()
        .await
        .unwrap();

    for path in PAGES.iter().copied().chain([
        format!("/app/streams/{id}").as_str(),
        "/app/views/page-view-1",
    ]) {
        let (s, html, _) = page(&app, path, Some(&cookie)).await;
        assert_eq!(s, StatusCode::OK, "{path}");
        assert!(
            !html.contains("<script>alert"),
            "{path}: stored text must be escaped"
        );
        assert!(
            !html.contains("<b>") && !html.contains("<player>") && !html.contains("movie <1>"),
            "{path}"
        );
    }
    let (_, html, _) = page(&app, "/app/streams", Some(&cookie)).await;
    assert!(
        html.contains("&#60;script&#62;alert(1)&#60;/script&#62; &#38; co"),
        "{html}"
    );
    assert!(html.contains(r#"<span class="badge badge-failing">failing</span>"#));
    assert!(html.contains("122 ms"), "latest probe latency");
    assert!(
        html.contains(r#"class="cell-degraded""#),
        "the current hour is partly down: {html}"
    );
    let (_, html, _) = page(&app, "/app", Some(&cookie)).await;
    assert!(
        html.contains("alerted on-call"),
        "needs attention lists the failing stream"
    );
    assert!(
        html.contains(r#"<span class="tile-value">1</span>"#),
        "one view in the tiles"
    );
    let (_, html, _) = page(&app, &format!("/app/streams/{id}"), Some(&cookie)).await;
    assert!(html.contains(&format!(
        r#"data-src="/api/v1/streams/{id}/timeline?granularity=hour""#
    )));
    assert!(html.contains("alerted on-call"));
    let (_, html, _) = page(&app, "/app/views", Some(&cookie)).await;
    assert!(
        html.contains("movie &#60;1&#62;")
            && html.contains(&format!(r#"href="/app/streams/{id}""#)),
        "{html}"
    );
    let (_, html, _) = page(&app, "/app/views/page-view-1", Some(&cookie)).await;
    assert!(
        html.contains("900 ms") && html.contains("playback_start"),
        "{html}"
    );
    let (_, html, _) = page(&app, "/app/keys", Some(&cookie)).await;
    assert!(
        html.contains("web &#60;player&#62;")
            && html.contains(&format!("{}/api/v1/telemetry", app.base)),
        "{html}"
    );
    let (_, html, _) = page(&app, "/app/agents?severity=critical", Some(&cookie)).await;
    assert_eq!(
        html.matches(r#"<span class="badge badge-failing">critical</span>"#)
            .count(),
        2,
        "{html}"
    );

    // Another user sees the shared streams but not this user's views or keys.
    let other = app.user("pages-other@example.com").await;
    let (_, html, _) = page(&app, "/app/views", Some(&other)).await;
    assert!(html.contains("No views in this range"));
    let (_, html, _) = page(&app, "/app/keys", Some(&other)).await;
    assert!(html.contains("No key yet"));
    let (_, html, _) = page(&app, "/app/views/page-view-1", Some(&other)).await;
    assert!(html.contains("Not found"));
    app.shutdown().await;
}

/// Records one probe of `stream` as the prober would.
#[allow(clippy::too_many_arguments)]
async fn probe(
    probes: &Probes,
    stream: &str,
    at: i64,
    status: ProbeStatus,
    class: AnomalyClass,
    http: Option<u16>,
    latency_ms: i64,
    detail: &str,
    playable: bool,
    last_action: &str,
) {
    probes
        .record(&NewProbe {
            stream_id: stream.to_owned(),
            status,
            anomaly_class: class,
            latency_ms,
            http_status: http,
            detail: detail.into(),
            created_at: at,
            playable,
            last_action: last_action.into(),
            next_probe_at: at + 30_000,
        })
        .await
        .unwrap()
        .unwrap();
}

async fn new_stream(app: &TestApp, cookie: &str, url: &str, name: &str) -> String {
    let r = app
        .post(
            "/api/v1/streams",
            Some(cookie),
            json!({ "sourceUrl": url, "name": name }),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let b: serde_json::Value = r.json().await.unwrap();
    b["id"].as_str().unwrap().to_owned()
}

/// decisions.md §15: the overview counts a stream whose latest probe was not playable as down
/// whatever its status string (a 404 manifest is `degraded` by the contract's mapping), lists
/// it first under "needs attention", and its Down tile leads to exactly those streams; a
/// stream not probed yet is neither healthy nor green.
async fn the_overview_counts_not_playable_streams_as_down(app: TestApp) {
    let cookie = app.user("overview@example.com").await;
    let gone = new_stream(
        &app,
        &cookie,
        "http://127.0.0.1:9/gone.m3u8",
        "Gone manifest",
    )
    .await;
    let fine = new_stream(&app, &cookie, "http://127.0.0.1:9/fine.m3u8", "Fine").await;
    let slow = new_stream(&app, &cookie, "http://127.0.0.1:9/slow.m3u8", "Slow").await;
    let fresh = new_stream(&app, &cookie, "http://127.0.0.1:9/new.m3u8", "Brand new").await;
    let probes = Probes::new(app.state.db.clone());
    let now = now_ms();
    for i in 0..3 {
        probe(
            &probes,
            &gone,
            now - 3000 + i,
            ProbeStatus::Degraded,
            AnomalyClass::ClientError,
            Some(404),
            12,
            "HTTP 404",
            false,
            "opened incident: client error",
        )
        .await;
    }
    probe(
        &probes,
        &fine,
        now - 2000,
        ProbeStatus::Healthy,
        AnomalyClass::NoAnomaly,
        Some(200),
        40,
        "probe ok",
        true,
        "probe ok in 40 ms",
    )
    .await;
    probe(
        &probes,
        &slow,
        now - 1000,
        ProbeStatus::Degraded,
        AnomalyClass::SlowResponse,
        Some(200),
        1600,
        "slow response: 1600 ms > 1000 ms",
        true,
        "raised probe frequency — confirming degradation",
    )
    .await;
    let (status,): (String,) = sqlx::query_as("SELECT status FROM streams WHERE id = $1")
        .bind(&gone)
        .fetch_one(&app.state.db.pool)
        .await
        .unwrap();
    assert_eq!(status, "degraded", "the contract's mapping of a 404");

    let (s, html, _) = page(&app, "/app", Some(&cookie)).await;
    assert_eq!(s, StatusCode::OK);
    let tile = |label: &str, value: &str| {
        format!(
            r#"<span class="tile-label">{label}</span></a><span class="tile-value">{value}</span>"#
        )
    };
    for (label, value) in [("Healthy", "1"), ("Degraded", "1"), ("Down", "1")] {
        assert!(
            html.contains(&tile(label, value)),
            "{label} {value}: {html}"
        );
    }
    assert!(html.contains("1 not probed yet"), "{html}");
    assert!(!html.contains("Failing"), "{html}");
    let attention = &html[html.find("attention-h").unwrap()..];
    let (g, sl) = (
        attention.find("Gone manifest").unwrap(),
        attention.find(">Slow<").unwrap(),
    );
    assert!(g < sl, "the down stream first: {attention}");
    assert!(!attention.contains(">Fine<") && !attention.contains("Brand new"));

    let (_, html, _) = page(&app, "/app/streams?status=down", Some(&cookie)).await;
    assert!(html.contains("Gone manifest"), "{html}");
    for other in [">Fine<", ">Slow<", "Brand new"] {
        assert!(!html.contains(other), "{other} is not down: {html}");
    }
    assert!(html.contains(r#"<option value="down" selected>"#), "{html}");
    let (_, html, _) = page(&app, "/app/streams", Some(&cookie)).await;
    let row = &html[html.find("Brand new").unwrap()..];
    let row = &row[..row.find("</tr>").unwrap()];
    assert!(
        row.contains(r#"<span class="badge badge-neutral">not probed yet</span>"#),
        "{row}"
    );
    let (_, html, _) = page(&app, &format!("/app/streams/{fresh}"), Some(&cookie)).await;
    assert!(!html.contains("badge-healthy"), "{html}");
    app.shutdown().await;
}

/// decisions.md §15: each feed row's "Found" is that probe's own detail and latency, never the
/// stream's current `lastAction` (which the JSON feed's `fix` keeps, as the contract says).
async fn each_feed_row_shows_its_own_finding(app: TestApp) {
    let cookie = app.user("feed@example.com").await;
    let id = new_stream(&app, &cookie, "http://127.0.0.1:9/feed.m3u8", "Feed").await;
    let probes = Probes::new(app.state.db.clone());
    let now = now_ms();
    probe(
        &probes,
        &id,
        now - 3000,
        ProbeStatus::Healthy,
        AnomalyClass::NoAnomaly,
        Some(200),
        66,
        "probe ok",
        true,
        "probe ok in 66 ms",
    )
    .await;
    probe(
        &probes,
        &id,
        now - 2000,
        ProbeStatus::Degraded,
        AnomalyClass::ClientError,
        Some(404),
        12,
        "HTTP 404",
        false,
        "confirming: client error",
    )
    .await;
    probe(
        &probes,
        &id,
        now - 1000,
        ProbeStatus::Healthy,
        AnomalyClass::NoAnomaly,
        Some(200),
        2,
        "probe ok",
        true,
        "probe ok in 2 ms",
    )
    .await;
    let (_, feed) = parts_of(&app, &format!("/api/v1/agents?streamId={id}"), &cookie).await;
    let fixes: Vec<&str> = feed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["fix"].as_str().unwrap())
        .collect();
    assert_eq!(
        fixes, ["probe ok in 2 ms"; 3],
        "the JSON feed keeps the contract's fix"
    );
    for path in ["/app/agents".to_owned(), format!("/app/streams/{id}")] {
        let (_, html, _) = page(&app, &path, Some(&cookie)).await;
        let table = &html[html.find("<th>Found</th>").unwrap()..];
        let table = &table[..table.find("</table>").unwrap()];
        let found: Vec<&str> = table
            .split("<tr>")
            .skip(1)
            .map(|row| {
                // Time, stream, severity, anomaly, then `<td class="num">` latency: Found is the
                // sixth `<td>`.
                let cells: Vec<&str> = row.split("<td>").collect();
                cells[5].split("</td>").next().unwrap()
            })
            .collect();
        assert_eq!(
            found,
            ["probe ok (2 ms)", "HTTP 404 (12 ms)", "probe ok (66 ms)"],
            "{path}: {table}"
        );
    }
    app.shutdown().await;
}

async fn parts_of(app: &TestApp, path: &str, cookie: &str) -> (StatusCode, serde_json::Value) {
    common::parts(app.get(path, Some(cookie)).await).await
}

async fn unknown_things_are_404_pages(app: TestApp) {
    let cookie = app.user("pages-404@example.com").await;
    for path in [
        "/app/streams/nosuchstream",
        "/app/streams/%00",
        "/app/views/nosuchview",
        "/app/views/%00",
        "/app/nope",
        "/app/streams/a/b",
    ] {
        let (s, html, h) = page(&app, path, Some(&cookie)).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(h["content-type"], "text/html; charset=utf-8", "{path}");
        assert!(html.contains("<h1>Not found</h1>"), "{path}: {html}");
    }
    // Pages are GET only; other methods get the JSON 404 of every unknown route.
    let r = no_redirects()
        .request(Method::POST, app.url("/app/streams"))
        .header("cookie", format!("auth.session_token={cookie}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    app.shutdown().await;
}

async fn the_alerts_page_lists_incidents_rules_channels_and_deliveries(app: TestApp) {
    let cookie = app.user("pages-alerts@example.com").await;
    let (_, html, _) = page(&app, "/app/alerts", Some(&cookie)).await;
    for empty in [
        "Nothing is firing.",
        "No rule yet",
        "No channel yet",
        "Nothing sent yet",
        "A rule needs a channel",
    ] {
        assert!(html.contains(empty), "{empty}: {html}");
    }
    // Nothing listens on port 9: the delivery fails, which the log shows too.
    let r = app
        .post(
            "/api/v1/alerts/channels",
            Some(&cookie),
            json!({ "name": "<b>ops</b>", "type": "webhook", "url": "http://127.0.0.1:9/hook/token-in-path", "groupWindow": "0s" }),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let channel: serde_json::Value = r.json().await.unwrap();
    let r = app
        .post(
            "/api/v1/alerts/rules",
            Some(&cookie),
            json!({ "name": "down & <out>", "kind": "stream", "streamId": null, "failAfter": 1, "remindEvery": "1h", "channelIds": [channel["id"]] }),
        )
        .await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let r = app
        .post(
            "/api/v1/streams",
            Some(&cookie),
            json!({ "sourceUrl": "http://127.0.0.1:9/a.m3u8", "name": "Main <feed>" }),
        )
        .await;
    let stream: serde_json::Value = r.json().await.unwrap();
    let id = stream["id"].as_str().unwrap().to_owned();
    Probes::new(app.state.db.clone())
        .record(&NewProbe {
            stream_id: id.clone(),
            status: ProbeStatus::Failing,
            anomaly_class: AnomalyClass::ServerError,
            latency_ms: 10,
            http_status: Some(503),
            detail: "HTTP 503".into(),
            created_at: now_ms(),
            playable: false,
            last_action: "alerted".into(),
            next_probe_at: now_ms() + 30_000,
        })
        .await
        .unwrap()
        .unwrap();

    let (s, html, _) = page(&app, "/app/alerts", Some(&cookie)).await;
    assert_eq!(s, StatusCode::OK);
    for want in [
        "Firing now <span class=\"muted\">(1)</span>",
        "down &#38; &#60;out&#62;",
        &format!(r#"<a href="/app/streams/{id}">Main &#60;feed&#62;</a>"#),
        "1 probe not playable: HTTP 503",
        "Any stream: fires after 1 unplayable probe in a row, resolves after 2 playable; reminds every 1h",
        "&#60;b&#62;ops&#60;/b&#62;",
        &format!(r#"action="/api/v1/alerts/channels/{}/rotate-secret""#, channel["id"].as_str().unwrap()),
        "<td>firing</td>",
        "Resend",
    ] {
        assert!(html.contains(want), "{want}: {html}");
    }
    // The chat-style URL's path (a token) is never printed, only its host.
    assert!(!html.contains("token-in-path"), "{html}");

    // Another user sees none of it.
    let other = app.user("pages-alerts-other@example.com").await;
    let (_, html, _) = page(&app, "/app/alerts", Some(&other)).await;
    assert!(
        html.contains("Nothing is firing.")
            && html.contains("No rule yet")
            && html.contains("Nothing sent yet")
    );
    app.shutdown().await;
}

async fn the_qoe_pages_list_a_bad_filter_or_cursor_as_the_routes_word_it(app: TestApp) {
    let cookie = app.user("pages-bad-query@example.com").await;
    let unknown = "filter: Invalid filter &#39;nope:x&#39;: unknown dimension &#39;nope&#39;.";
    for path in ["/app/qoe", "/app/views"] {
        let (s, html, _) = page(
            &app,
            &format!("{path}?filter=nope:x&filter=os:iOS"),
            Some(&cookie),
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{path}");
        assert!(html.contains(unknown), "{path}: {html}");
        assert!(!html.contains("cursor: "), "{path}: {html}");
    }
    let (_, html, _) = page(&app, "/app/views?cursor=forged", Some(&cookie)).await;
    assert!(html.contains("cursor: Invalid cursor"), "{html}");
    assert!(!html.contains("filter: "), "{html}");
    // Both at once, keyed as the route keys them: `cursor` first.
    let (_, html, _) = page(&app, "/app/views?cursor=forged&filter=os:", Some(&cookie)).await;
    let (c, f) = (
        html.find("cursor: Invalid cursor").unwrap(),
        html.find("filter: Invalid filter &#39;os:&#39;: value must not be empty")
            .unwrap(),
    );
    assert!(c < f, "{html}");
    // A valid selection lists no error.
    let (_, html, _) = page(&app, "/app/views?filter=os:iOS&cursor=", Some(&cookie)).await;
    assert!(!html.contains("Invalid"), "{html}");
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
    without_a_session_every_page_redirects_to_login_with_next,
    login_and_signup_pages_carry_only_same_origin_next,
    every_page_renders_html_with_the_csp,
    unknown_things_are_404_pages,
    the_alerts_page_lists_incidents_rules_channels_and_deliveries,
    the_qoe_pages_list_a_bad_filter_or_cursor_as_the_routes_word_it,
    the_overview_counts_not_playable_streams_as_down,
    each_feed_row_shows_its_own_finding,
);
