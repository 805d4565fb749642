//! Observability (decisions.md §11): Prometheus metrics on their own listener, a request id on
//! every request, and configuration errors that name the setting.

use crate::common;

use common::{parts, spawn_with, Engine, Process};
use reqwest::StatusCode;
use serde_json::json;

/// A server of its own, as a child process, with its metrics listener: the metrics recorder
/// is process-wide and the other tests of this binary run servers alongside, so a test that
/// counts needs a process of its own. Returns the process and its metrics base URL.
async fn own_process(dir: &std::path::Path, env: &[(&str, &str)]) -> (Process, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("reserve")
        .local_addr()
        .expect("addr")
        .port();
    let listen = format!("127.0.0.1:{port}");
    let mut env = env.to_vec();
    env.push(("STREAMWATCH_METRICS_LISTEN", &listen));
    let process = Process::start(dir, &env).await;
    (process, format!("http://{listen}"))
}

async fn scrape(metrics: &str) -> String {
    let r = reqwest::get(format!("{metrics}/metrics"))
        .await
        .expect("scrape");
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.headers()["content-type"]
        .to_str()
        .expect("ascii")
        .starts_with("text/plain"));
    r.text().await.expect("body")
}

/// The value of one sample line (`name{labels} value`), 0 when absent.
fn sample(page: &str, series: &str) -> f64 {
    page.lines()
        .find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
        })
        .map_or(0.0, |v| v.trim().parse().expect("a number"))
}

/// After a user, a stream, a key and telemetry batches, every metric family has data, and a
/// batch moves the ingest counters by exactly its events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_cover_every_subsystem_and_count_ingest() {
    let dir = tempfile::tempdir().expect("dir");
    let (p, metrics) = own_process(dir.path(), &[]).await;
    let http = reqwest::Client::new();
    let cookie = p.sign_up("dev@example.com").await;
    let session = format!("auth.session_token={cookie}");
    let stream = http
        .post(p.url("/api/v1/streams"))
        .header("cookie", &session)
        .json(&json!({ "sourceUrl": "http://127.0.0.1:9/live.m3u8" }))
        .send()
        .await
        .expect("register");
    assert_eq!(stream.status(), StatusCode::CREATED);
    let (key, _) = p.mint_key(&cookie).await;
    let batch = |session: &str, n: usize| {
        let events: Vec<_> = (0..n)
            .map(|i| {
                json!({ "type": "playback_pause", "ts": format!("2026-11-21T10:00:{i:02}.000Z"),
                             "payload": { "positionMs": i, "bufferedMs": 1 } })
            })
            .collect();
        json!({ "apiKey": key, "sessionId": session, "events": events })
    };
    let post = |body: serde_json::Value, bearer: &str| {
        let request = http
            .post(p.url("/api/v1/telemetry"))
            .bearer_auth(bearer)
            .json(&body);
        async move { request.send().await.expect("send").status() }
    };
    let before = scrape(&metrics).await;
    let accepted = r#"streamwatch_telemetry_events_total{outcome="accepted"}"#;
    let batches = r#"streamwatch_telemetry_batches_total{outcome="accepted"}"#;
    assert_eq!(post(batch("m-1", 7), &key).await, StatusCode::NO_CONTENT);
    assert_eq!(post(batch("m-2", 3), &key).await, StatusCode::NO_CONTENT);
    assert_eq!(
        post(batch("m-3", 2), "svc_nope").await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        post(
            json!({ "apiKey": key, "sessionId": "x", "events": [] }),
            &key
        )
        .await,
        StatusCode::BAD_REQUEST
    );
    // Sign-in outcomes.
    let wrong = http
        .post(p.url("/api/auth/sign-in/email"))
        .json(&json!({ "email": "dev@example.com", "password": "not-the-password" }))
        .send()
        .await
        .expect("sign in");
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    // An alert delivery to a port nothing listens on: one attempt, rescheduled.
    let channel: serde_json::Value = http
        .post(p.url("/api/v1/alerts/channels"))
        .header("cookie", &session)
        .json(&json!({ "name": "m", "type": "webhook", "url": "http://127.0.0.1:9/hook" }))
        .send()
        .await
        .expect("channel")
        .json()
        .await
        .expect("json");
    let test = http
        .post(p.url(&format!(
            "/api/v1/alerts/channels/{}/test",
            channel["id"].as_str().expect("id")
        )))
        .header("cookie", &session)
        .json(&json!({}))
        .send()
        .await
        .expect("test");
    assert_eq!(test.status(), StatusCode::ACCEPTED);
    // The probe, sampled and alert families appear on their own schedule; give them a moment.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let page = loop {
        let page = scrape(&metrics).await;
        if page.contains("streamwatch_probes_total{")
            && page.contains("streamwatch_streams{")
            && page.contains("streamwatch_alert_deliveries_total{")
            && page.contains("streamwatch_qoe_refresh_steps_total{")
        {
            break page;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no probe metrics: {page}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    // The process is this test's alone: exactly its two accepted batches of 7 and 3 events.
    assert_eq!(sample(&page, accepted) - sample(&before, accepted), 10.0);
    assert_eq!(sample(&page, batches) - sample(&before, batches), 2.0);
    for family in [
        "streamwatch_http_requests_total{",
        "streamwatch_http_request_duration_seconds_bucket{",
        "streamwatch_http_connections_open",
        r#"streamwatch_telemetry_batches_total{outcome="auth"}"#,
        r#"streamwatch_telemetry_batches_total{outcome="validation"}"#,
        r#"streamwatch_telemetry_events_total{outcome="accepted"}"#,
        "streamwatch_writer_inserts_total{",
        "streamwatch_writer_insert_rows_bucket{",
        "streamwatch_writer_insert_duration_seconds_bucket{",
        "streamwatch_writer_queue_depth",
        "streamwatch_writer_writes_in_flight",
        "streamwatch_telemetry_store_up",
        r#"streamwatch_keycache_lookups_total{result="hit"}"#,
        r#"streamwatch_keycache_lookups_total{result="miss"}"#,
        "streamwatch_keycache_invalidations_total",
        "streamwatch_probes_total{",
        "streamwatch_probe_duration_seconds_bucket",
        "streamwatch_prober_lateness_seconds_bucket",
        r#"streamwatch_streams{status="watching"}"#,
        r#"streamwatch_auth_sign_ups_total{outcome="success"}"#,
        r#"streamwatch_auth_sign_ins_total{outcome="invalid_credentials"}"#,
        "streamwatch_auth_sessions_created_total",
        "streamwatch_auth_sessions_active",
        r#"streamwatch_alert_deliveries_total{outcome="retry"}"#,
        "streamwatch_alert_delivery_duration_seconds_bucket",
        r#"streamwatch_qoe_refresh_steps_total{result="ok"}"#,
        "streamwatch_qoe_refresh_duration_seconds_bucket",
        r#"streamwatch_qoe_refresh_views_total{source="read_back"}"#,
        "streamwatch_qoe_refresh_last_success_timestamp_seconds",
    ] {
        let line = page
            .lines()
            .find(|l| l.starts_with(family))
            .unwrap_or_else(|| panic!("{family} missing from /metrics"));
        assert!(!line.starts_with('#'), "{line}");
    }
    // Route templates, never ids or URLs, as labels.
    assert!(page.contains(r#"route="/api/v1/telemetry""#));
    assert!(!page.contains("m-1") && !page.contains("127.0.0.1:9"));
    // Every family is described.
    assert!(page.contains("# HELP streamwatch_telemetry_events_total "));
}

/// On ClickHouse the refresher writes an ingested view from the live views: the views it
/// wrote by source, the views held in memory and the time of its last good step move.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qoe_refresher_metrics_count_views_written_from_memory_on_clickhouse() {
    let dir = tempfile::tempdir().expect("dir");
    let clickhouse =
        std::env::var("CLICKHOUSE_URL").unwrap_or_else(|_| "http://127.0.0.1:8123".into());
    let database = common::test_db_name();
    let (p, metrics) = own_process(
        dir.path(),
        &[
            ("CLICKHOUSE_URL", &clickhouse),
            ("CLICKHOUSE_DATABASE", &database),
            ("STREAMWATCH_QOE_REFRESH", "200ms"),
            // The direct path, as every in-process test server (the spool has its own tests).
            ("STREAMWATCH_SPOOL", "off"),
        ],
    )
    .await;
    let cookie = p.sign_up("qoe-metrics@example.com").await;
    let (key, _) = p.mint_key(&cookie).await;
    let live = r#"streamwatch_qoe_refresh_views_total{source="live"}"#;
    let before = scrape(&metrics).await;
    let posted_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();
    let status = reqwest::Client::new()
        .post(p.url("/api/v1/telemetry"))
        .bearer_auth(&key)
        .json(&json!({ "apiKey": key, "sessionId": "live-1", "events": [
            { "type": "playback_pause", "ts": "2026-11-21T10:00:00.000Z",
              "payload": { "positionMs": 0, "bufferedMs": 1 } },
            { "type": "playback_pause", "ts": "2026-11-21T10:00:05.000Z",
              "payload": { "positionMs": 5000, "bufferedMs": 1 } }
        ] }))
        .send()
        .await
        .expect("send")
        .status();
    assert_eq!(status, StatusCode::NO_CONTENT);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let page = loop {
        let page = scrape(&metrics).await;
        if sample(&page, live) > sample(&before, live)
            && sample(
                &page,
                "streamwatch_qoe_refresh_last_success_timestamp_seconds",
            ) >= posted_at
        {
            break page;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the view was not written from memory: {page}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(sample(&page, live) - sample(&before, live), 1.0);
    assert!(sample(&page, "streamwatch_qoe_live_views") >= 1.0);
    assert!(page.contains("# HELP streamwatch_qoe_refresh_views_total "));
}

/// Polls the metrics page until `done` holds for it (30 s at most, then fails with `what`).
async fn scrape_until(metrics: &str, what: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let page = scrape(metrics).await;
        if done(&page) {
            return page;
        }
        assert!(std::time::Instant::now() < deadline, "{what}: {page}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// A batch whose client goes away while its write is in flight may be stored all the same:
/// its view must then be read back, never written from memory without it. Here the batch's
/// write waits behind a write lock held from outside the process; the client closes its
/// connection, which drops the request; the lock goes and the batch is stored. The view's
/// `endedAt` must be that batch's event, and the refresher must have read the view back.
/// Every wait is on an event the server reports (its gauges, its counters, the view).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_whose_client_left_mid_write_is_read_back_not_written_from_memory() {
    use sqlx::{Connection, Executor};
    use tokio::io::AsyncWriteExt;

    let dir = tempfile::tempdir().expect("dir");
    let (p, metrics) = own_process(dir.path(), &[("STREAMWATCH_QOE_REFRESH", "200ms")]).await;
    let cookie = p.sign_up("left-mid-write@example.com").await;
    let (key, _) = p.mint_key(&cookie).await;
    let batch = |ts: &str| {
        json!({ "apiKey": key, "sessionId": "left-1", "events": [
            { "type": "playback_pause", "ts": ts, "payload": { "positionMs": 0, "bufferedMs": 1 } }
        ] })
    };
    let live = r#"streamwatch_qoe_refresh_views_total{source="live"}"#;
    let read_back = r#"streamwatch_qoe_refresh_views_total{source="read_back"}"#;
    let open = "streamwatch_http_connections_open";
    let in_flight = "streamwatch_writer_writes_in_flight";

    // The first batch is stored and answered: memory holds the view and writes it.
    let before = scrape(&metrics).await;
    let status = reqwest::Client::new()
        .post(p.url("/api/v1/telemetry"))
        .bearer_auth(&key)
        .json(&batch("2026-11-21T10:00:00.000Z"))
        .send()
        .await
        .expect("send")
        .status();
    assert_eq!(status, StatusCode::NO_CONTENT);
    let page = scrape_until(&metrics, "the view was not written from memory", |page| {
        sample(page, live) > sample(&before, live) && sample(page, open) == 0.0
    })
    .await;
    let read_back_before = sample(&page, read_back);

    // Hold the store's write lock from outside: the next write waits in SQLite's busy handler
    // (10 s at most), in flight.
    let mut outside = sqlx::SqliteConnection::connect(&format!(
        "sqlite://{}",
        dir.path()
            .join(ingest::sink::sqlite::DB_FILE_NAME)
            .display()
    ))
    .await
    .expect("open the telemetry file");
    outside
        .execute("BEGIN IMMEDIATE")
        .await
        .expect("write lock");

    let body = batch("2026-11-21T10:00:30.000Z").to_string();
    let mut client = tokio::net::TcpStream::connect(p.base.trim_start_matches("http://"))
        .await
        .expect("connect");
    client
        .write_all(
            format!(
                "POST /api/v1/telemetry HTTP/1.1\r\nhost: streamwatch\r\nauthorization: Bearer {key}\r\n\
                 content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .await
        .expect("send the batch");
    scrape_until(&metrics, "the batch's write did not start", |page| {
        sample(page, in_flight) == 1.0 && sample(page, open) == 1.0
    })
    .await;
    // The client goes away: the server ends the connection and drops the request.
    drop(client);
    scrape_until(&metrics, "the connection was not closed", |page| {
        sample(page, open) == 0.0
    })
    .await;
    outside.execute("COMMIT").await.expect("release");
    drop(outside);

    // The batch is stored; memory knows it may be, so the refresher reads the view back.
    let views = format!(
        "{}/api/v1/qoe/views?from=2026-11-21T09:00:00.000Z&to=2026-11-21T11:00:00.000Z",
        p.base
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let body: serde_json::Value = reqwest::Client::new()
            .get(&views)
            .header("cookie", format!("auth.session_token={cookie}"))
            .send()
            .await
            .expect("views")
            .json()
            .await
            .expect("json");
        if body["items"][0]["endedAt"] == "2026-11-21T10:00:30.000Z" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the view never showed the batch whose client left: {body}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let page = scrape(&metrics).await;
    assert!(
        sample(&page, read_back) > read_back_before,
        "the view was not read back: {page}"
    );
}

/// Every response carries a request id: the client's `x-request-id` echoed, or a new one.
#[tokio::test]
async fn every_response_carries_a_request_id() {
    let app = spawn_with(Engine::Sqlite, |_| {}).await;
    let r = app
        .http
        .get(app.url("/healthz"))
        .header("x-request-id", "trace-me-42")
        .send()
        .await
        .expect("send");
    assert_eq!(r.headers()["x-request-id"], "trace-me-42");
    let mut seen = std::collections::HashSet::new();
    for path in ["/healthz", "/api/v1/streams", "/nope"] {
        let r = app.get(path, None).await;
        let id = r.headers()["x-request-id"]
            .to_str()
            .expect("ascii")
            .to_owned();
        assert_eq!(id.len(), 36, "a UUID: {id}");
        assert!(seen.insert(id));
    }
    assert_eq!(
        parts(app.get("/api/v1/streams", None).await).await.0,
        StatusCode::UNAUTHORIZED
    );
}

/// A bad value stops start-up with one line naming the setting as the operator gave it (the
/// variable or the flag), never echoing a secret.
#[test]
fn a_bad_setting_is_one_line_naming_it() {
    let run = |env: &[(&str, &str)], args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_streamwatch"))
            .arg("serve")
            .args(args)
            .env_clear()
            .envs(env.iter().copied())
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(2));
        String::from_utf8(out.stderr).expect("utf-8")
    };
    assert_eq!(
        run(&[("STREAMWATCH_PROBE_INTERVAL", "soon")], &[]),
        "error: invalid STREAMWATCH_PROBE_INTERVAL: `soon` is not a duration (e.g. 30s, 500ms, 2m)\n"
    );
    assert_eq!(
        run(&[], &["--probe-interval", "soon"]),
        "error: invalid --probe-interval: `soon` is not a duration (e.g. 30s, 500ms, 2m)\n"
    );
    let secret = "hunter2-is-not-long-enough";
    let line = run(&[("STREAMWATCH_SECRET", secret)], &[]);
    assert_eq!(
        line,
        "error: invalid STREAMWATCH_SECRET: must be at least 32 characters\n"
    );
    let line = run(&[("DATABASE_URL", "mysql://root:pw@db/x")], &[]);
    assert_eq!(
        line,
        "error: invalid DATABASE_URL: expected a postgres://… or sqlite://… URL\n"
    );
    assert!(!line.contains("pw@"));
}

/// PostgreSQL unreachable at start: the service starts, and within 5 s logs one line naming
/// the database host and the cause, without the credentials.
#[tokio::test]
async fn an_unreachable_database_is_named_with_its_cause() {
    use std::io::{BufRead, BufReader};
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("reserve")
        .local_addr()
        .expect("addr")
        .port();
    let dir = tempfile::tempdir().expect("dir");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_streamwatch"))
        .args(["serve", "--listen", "127.0.0.1:0", "--metrics-listen", ""])
        .env_clear()
        .env("STREAMWATCH_DATA_DIR", dir.path())
        .env(
            "DATABASE_URL",
            format!("postgres://app:s3cret@127.0.0.1:{port}/streamwatch"),
        )
        .env("RUST_LOG", "info")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let line = loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let line = rx.recv_timeout(left).expect("a line within 5 s");
        if line.contains("database unreachable") {
            break line;
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(line.contains(&format!("127.0.0.1:{port}")), "{line}");
    assert!(line.contains("connection refused"), "{line}");
    assert!(!line.contains("s3cret") && !line.contains("app:"), "{line}");
}

/// The logs of a real process in JSON (`STREAMWATCH_LOG_FORMAT=json`): one access line per
/// request with its request id, route template, status and latency; one line when a probe
/// changes a stream's status (and none for probes that do not); no ANSI colour codes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_carry_request_lines_and_status_changes() {
    use std::io::{BufRead, BufReader};
    use std::sync::{Arc, Mutex};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    // An origin whose answer the test switches: 503, then a valid playlist.
    let healthy = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let origin = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let origin_addr = origin.local_addr().expect("addr");
    let h = Arc::clone(&healthy);
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = origin.accept().await {
            let ok = h.load(std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = [0u8; 2048];
                let _ = sock.read(&mut buf).await;
                let body = "#EXTM3U\n#EXT-X-TARGETDURATION:6\n#EXTINF:6.0,\na.ts\n#EXT-X-ENDLIST\n";
                let reply = if ok {
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    )
                } else {
                    "HTTP/1.1 503 Busy\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_owned()
                };
                let _ = sock.write_all(reply.as_bytes()).await;
            });
        }
    });

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("reserve")
        .local_addr()
        .expect("addr")
        .port();
    let dir = tempfile::tempdir().expect("dir");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_streamwatch"))
        .args(["serve", "--metrics-listen", ""])
        .env_clear()
        .env("STREAMWATCH_LISTEN", format!("127.0.0.1:{port}"))
        .env("STREAMWATCH_DATA_DIR", dir.path())
        .env("STREAMWATCH_LOG_FORMAT", "json")
        .env("STREAMWATCH_ALLOW_PRIVATE", "127.0.0.0/8")
        .env("STREAMWATCH_PROBE_INTERVAL", "1s")
        .env("STREAMWATCH_AUTH_RATE_LIMIT", "off")
        .env("RUST_LOG", "info")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let lines: Arc<Mutex<Vec<String>>> = Arc::default();
    let sink = Arc::clone(&lines);
    let stderr = child.stderr.take().expect("stderr");
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            sink.lock().expect("lines").push(line);
        }
    });
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    for _ in 0..200 {
        if http.get(format!("{base}/readyz")).send().await.is_ok() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let r = http
        .get(format!("{base}/api/v1/streams/abc123"))
        .header("x-request-id", "req-42")
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    // A stream that fails, then recovers: two status changes.
    let signup = http
        .post(format!("{base}/api/auth/sign-up/email"))
        .json(&json!({ "name": "Op", "email": "op@example.com", "password": "correct-horse-battery" }))
        .send()
        .await
        .expect("sign up");
    let cookie = common::session_cookie_of(&signup).expect("cookie");
    let r = http
        .post(format!("{base}/api/v1/streams"))
        .header("cookie", format!("auth.session_token={cookie}"))
        .json(&json!({ "sourceUrl": format!("http://{origin_addr}/live.m3u8") }))
        .send()
        .await
        .expect("register");
    assert_eq!(r.status(), StatusCode::CREATED);
    let count = |needle: &str| {
        lines
            .lock()
            .expect("lines")
            .iter()
            .filter(|l| l.contains(needle))
            .count()
    };
    let wait_for = |needle: &'static str, n: usize| {
        let count = &count;
        async move {
            for _ in 0..600 {
                if count(needle) >= n {
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            panic!("no {n} log lines with {needle}");
        }
    };
    // Failing from the first probe (no previous status: no change line), probed again…
    wait_for("opened incident", 0).await;
    for _ in 0..600 {
        let probes: Vec<serde_json::Value> = http
            .get(format!("{base}/api/v1/agents"))
            .header("cookie", format!("auth.session_token={cookie}"))
            .send()
            .await
            .expect("feed")
            .json::<serde_json::Value>()
            .await
            .expect("json")["items"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if probes.len() >= 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    healthy.store(true, std::sync::atomic::Ordering::SeqCst);
    wait_for("stream status changed", 1).await;
    // A few more healthy probes: no further change line.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let _ = child.kill();
    let _ = child.wait();

    let lines = lines.lock().expect("lines").clone();
    let parsed: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| {
            assert!(!l.contains('\u{1b}'), "ANSI code in {l}");
            serde_json::from_str(l).unwrap_or_else(|_| panic!("not JSON: {l}"))
        })
        .collect();
    let access: Vec<&serde_json::Value> = parsed
        .iter()
        .filter(|v| v["fields"]["message"] == "request" && v["span"]["request_id"] == "req-42")
        .collect();
    assert_eq!(access.len(), 1, "one access line per request: {access:?}");
    let line = access[0];
    assert_eq!(line["span"]["route"], "/api/v1/streams/{id}");
    assert_eq!(line["span"]["method"], "GET");
    assert_eq!(line["fields"]["status"], 401);
    assert!(line["fields"]["latency_ms"].as_f64().is_some());
    // Milliseconds to the microsecond, without float noise (`0.549`, not `0.5486329999999999`).
    for raw in lines.iter().filter(|l| l.contains("\"latency_ms\":")) {
        let number = raw
            .split("\"latency_ms\":")
            .nth(1)
            .and_then(|rest| rest.split([',', '}']).next())
            .expect("a number");
        let decimals = number.split_once('.').map_or(0, |(_, d)| d.len());
        assert!(decimals <= 3, "latency_ms {number} in {raw}");
    }
    let changes: Vec<&serde_json::Value> = parsed
        .iter()
        .filter(|v| v["fields"]["message"] == "stream status changed")
        .collect();
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!(changes[0]["fields"]["from"], "failing");
    assert_eq!(changes[0]["fields"]["to"], "healthy");
    let start = parsed
        .iter()
        .find(|v| v["fields"]["message"] == "starting streamwatch")
        .expect("a start-up line");
    assert_eq!(start["fields"]["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(start["fields"]["telemetry"], "sqlite");
    // Where to point a browser.
    let open = format!("open http://127.0.0.1:{port}/app in a browser for the dashboard");
    assert_eq!(
        parsed
            .iter()
            .filter(|v| v["fields"]["message"] == open.as_str())
            .count(),
        1,
        "no line `{open}`"
    );
}
