//! The telemetry spool in front of ClickHouse (scale.md §3, issue 31): batches are answered
//! 204 once fsync'd to the local spool and drained into ClickHouse in order, so ClickHouse
//! outages (stopped, hung) cost no telemetry; a full spool is a 500 and `/readyz` 503; a
//! SIGKILL at any moment loses nothing acknowledged and counts nothing twice; a second process
//! on one spool directory refuses to start; a damaged spool file is cut, logged and drained.
//!
//! Every test that stops or hangs ClickHouse runs its own private server
//! (`scripts/clickhouse-cluster up --single --base-port auto`), removed at the end by a guard
//! (and by the script's `--exit-with` watchdog if the test binary dies). The shared server on
//! 8123 is never touched. The cluster fault of scale.md §2 with the spool on (ZooKeeper
//! stopped for 30 s) runs on a private 2 × 2 cluster.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{parts, Process, TestApp};
use reqwest::StatusCode;
use serde_json::{json, Value};
use streamwatch::config::SpoolSetting;

/// A private one-server ClickHouse for one test; purged when dropped.
struct PrivateClickHouse {
    dir: tempfile::TempDir,
    /// `CLICKHOUSE_URL`: one endpoint, or every node's (comma-separated) for a cluster.
    url: String,
    /// `CLICKHOUSE_CLUSTER` (empty for one server).
    cluster: String,
    http: reqwest::Client,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/clickhouse-cluster")
}

impl PrivateClickHouse {
    fn up() -> Self {
        Self::up_shaped(&["--single"])
    }

    /// `up` with `shape` (`--single`, or nothing for the 2 × 2 cluster with ZooKeeper).
    fn up_shaped(shape: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = Command::new(script())
            .arg("up")
            .args(shape)
            .args(["--base-port", "auto", "--exit-with"])
            .arg(std::process::id().to_string())
            .arg("--dir")
            .arg(dir.path())
            .stderr(Stdio::inherit())
            .output()
            .expect("run clickhouse-cluster");
        assert!(out.status.success(), "clickhouse-cluster up failed");
        let stdout = String::from_utf8(out.stdout).expect("utf-8");
        let url = stdout
            .lines()
            .find_map(|l| l.strip_prefix("CLICKHOUSE_URL="))
            .expect("CLICKHOUSE_URL line")
            .to_owned();
        let cluster = stdout
            .lines()
            .find_map(|l| l.strip_prefix("CLICKHOUSE_CLUSTER="))
            .unwrap_or_default()
            .to_owned();
        PrivateClickHouse {
            dir,
            url,
            cluster,
            http: reqwest::Client::new(),
        }
    }

    fn run(&self, args: &[&str]) -> String {
        let out = Command::new(script())
            .args(args)
            .arg("--dir")
            .arg(self.dir.path())
            .stderr(Stdio::inherit())
            .output()
            .expect("run clickhouse-cluster");
        assert!(out.status.success(), "clickhouse-cluster {args:?} failed");
        String::from_utf8(out.stdout).expect("utf-8")
    }

    /// Stops the server (SIGTERM, a clean shutdown).
    fn stop(&self) {
        self.run(&["stop-node", "s1r1"]);
    }

    /// Starts it again and waits until it answers.
    fn start(&self) {
        self.run(&["start-node", "s1r1"]);
    }

    fn signal(&self, signal: &str) {
        let pid = self.run(&["pid", "s1r1"]).trim().to_owned();
        let ok = Command::new("kill")
            .args([signal, &pid])
            .status()
            .expect("kill");
        assert!(ok.success(), "kill {signal} {pid}");
    }

    /// True while the server process is stopped by SIGSTOP (`ps` state `T`).
    fn is_stopped(&self) -> bool {
        let pid = self.run(&["pid", "s1r1"]).trim().to_owned();
        let out = Command::new("ps")
            .args(["-o", "state=", "-p", &pid])
            .output()
            .expect("ps");
        String::from_utf8_lossy(&out.stdout).trim().starts_with('T')
    }

    async fn query(&self, sql: &str) -> String {
        let first = self.url.split(',').next().unwrap_or_default();
        let r = self
            .http
            .post(first)
            .body(sql.to_owned())
            .send()
            .await
            .expect("query clickhouse");
        let status = r.status();
        let text = r.text().await.expect("body");
        assert!(status.is_success(), "{sql}: {text}");
        text.trim().to_owned()
    }

    /// Distinct stored events and sessions of `database` (FINAL: what every read sees).
    async fn stored(&self, database: &str) -> (u64, u64) {
        let row = self
            .query(&format!(
                "SELECT count(), uniqExact(session_id) FROM \
                 (SELECT DISTINCT session_id, ts, type FROM {database}.telemetry_events)"
            ))
            .await;
        let mut it = row.split('\t').map(|v| v.parse::<u64>().expect("number"));
        (it.next().expect("count"), it.next().expect("sessions"))
    }
}

impl Drop for PrivateClickHouse {
    fn drop(&mut self) {
        // Also on panic: a SIGSTOPped server is killed too (--purge is SIGKILL).
        let _ = Command::new(script())
            .args(["down", "--purge", "--dir"])
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// A local address nothing listens on: a ClickHouse that is down from the start.
fn closed_address() -> String {
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("reserve")
        .local_addr()
        .expect("addr");
    format!("http://{addr}")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("free port")
        .local_addr()
        .expect("addr")
        .port()
}

/// An in-process server with the spool on over `clickhouse` (database `database`).
async fn spool_app(
    clickhouse: &str,
    database: &str,
    tweak: impl FnOnce(&mut streamwatch::config::Config),
) -> TestApp {
    common::spawn_quiet(common::Engine::Sqlite, |c| {
        c.clickhouse_url = Some(clickhouse.to_owned());
        c.clickhouse_database = database.to_owned();
        c.spool = Some(SpoolSetting::On);
        tweak(c);
    })
    .await
}

/// 2026-01-01T10:00:00Z.
const T0: i64 = 1_767_261_600_000;

/// A 5-event batch: the `n`th of its session (events 10 s apart per batch). The first of a
/// session starts playback; each holds one 1 s stall, so a view of `b` batches has
/// `rebufferCount` = b and `rebufferMs` = b × 1000.
fn batch(key: &str, session: &str, n: i64) -> Value {
    let base = T0 + n * 10_000;
    let at = |ms: i64| streamwatch::time::iso_ms(base + ms);
    let first = if n == 0 {
        json!({ "type": "playback_start", "ts": at(0), "payload": { "positionMs": 0, "durationMs": 0, "contentId": "movie", "startupMs": 500 } })
    } else {
        json!({ "type": "playback_pause", "ts": at(0), "payload": { "positionMs": n, "bufferedMs": 0 } })
    };
    let resume = if n == 0 {
        "playback_pause"
    } else {
        "playback_resume"
    };
    json!({ "apiKey": key, "sessionId": session, "events": [
        first,
        { "type": resume, "ts": at(100), "payload": { "positionMs": n, "bufferedMs": 0 } },
        { "type": "rebuffer_start", "ts": at(1_000), "payload": { "positionMs": n, "bufferedMs": 0 } },
        { "type": "rebuffer_end", "ts": at(2_000), "payload": { "positionMs": n, "bufferedMs": 4000 } },
        { "type": "playback_resume", "ts": at(3_000), "payload": { "positionMs": n, "bufferedMs": 4000 } },
    ]})
}
const EVENTS_PER_BATCH: u64 = 5;

/// A request's status (`None`: no answer at all) and how long it took.
type Answer = (Option<StatusCode>, Duration);

/// Posts one batch; its status and how long the answer took (`None`: no answer at all).
async fn post(http: &reqwest::Client, base: &str, key: &str, body: &Value) -> Answer {
    let started = Instant::now();
    let r = http
        .post(format!("{base}/api/v1/telemetry"))
        .bearer_auth(key)
        .json(body)
        .send()
        .await;
    (r.ok().map(|r| r.status()), started.elapsed())
}

/// Every answer was 204 (the first few others are shown when not).
fn assert_all_204(answers: &[Answer]) {
    let refused: Vec<_> = answers
        .iter()
        .filter(|(s, _)| *s != Some(StatusCode::NO_CONTENT))
        .collect();
    assert!(
        refused.is_empty(),
        "{} of {} not 204: {:?}",
        refused.len(),
        answers.len(),
        &refused[..refused.len().min(5)]
    );
}

async fn readyz(base: &str) -> (StatusCode, Value) {
    parts(
        reqwest::get(format!("{base}/readyz"))
            .await
            .expect("readyz"),
    )
    .await
}

/// Waits until `/readyz`'s telemetry check satisfies `want` (generous deadline).
async fn wait_readyz(base: &str, what: &str, want: impl Fn(StatusCode, &str) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let (s, b) = readyz(base).await;
        if want(s, b["checks"]["telemetry"].as_str().unwrap_or_default()) {
            return b;
        }
        assert!(Instant::now() < deadline, "readyz never {what}: {s} {b}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until the app's spool is empty (everything drained).
async fn wait_drained(app: &TestApp) {
    let spool = app
        .state
        .intake
        .spooling()
        .expect("spool on")
        .spool()
        .clone();
    let deadline = Instant::now() + Duration::from_secs(180);
    while spool.stats().records > 0 || spool.stats().queued_records > 0 {
        assert!(
            Instant::now() < deadline,
            "never drained: {:?}",
            spool.stats()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A user and an API key on `app`: (cookie, key).
async fn user_and_key(app: &TestApp) -> (String, String) {
    let cookie = app.user("dev@example.com").await;
    let key = app.api_key(&cookie).await;
    (cookie, key)
}

/// Steady load: `workers` clients, each posting one new session's batch after another with
/// `pause` between, until `stop` turns true. Every answer: (status, took).
fn steady_load(
    base: String,
    key: String,
    workers: usize,
    pause: Duration,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> Vec<tokio::task::JoinHandle<Vec<Answer>>> {
    (0..workers)
        .map(|w| {
            let (base, key, stop) = (base.clone(), key.clone(), Arc::clone(&stop));
            tokio::spawn(async move {
                let http = reqwest::Client::new();
                let mut answers = Vec::new();
                for n in 0.. {
                    if stop.load(std::sync::atomic::Ordering::SeqCst) {
                        break;
                    }
                    let body = batch(&key, &format!("load-{w}-{n}"), 0);
                    answers.push(post(&http, &base, &key, &body).await);
                    tokio::time::sleep(pause).await;
                }
                answers
            })
        })
        .collect()
}

/// ClickHouse stopped for 60 s under a steady load: every batch is answered 204, `/readyz`
/// stays 200 and says it is spooling, and once ClickHouse is back every acknowledged event
/// is stored, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clickhouse_stopped_for_60_s_under_steady_load_loses_nothing() {
    let ch = PrivateClickHouse::up();
    let database = common::test_db_name();
    let app = spool_app(&ch.url, &database, |_| {}).await;
    let (_, key) = user_and_key(&app).await;
    wait_readyz(&app.base, "ok", |s, t| s == StatusCode::OK && t == "ok").await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = steady_load(
        app.base.clone(),
        key,
        4,
        Duration::from_millis(50),
        Arc::clone(&stop),
    );
    tokio::time::sleep(Duration::from_secs(3)).await;

    ch.stop();
    let outage = Instant::now();
    let body = wait_readyz(&app.base, "spooling", |s, t| {
        s == StatusCode::OK && t.starts_with("spooling (")
    })
    .await;
    assert_eq!(body["status"], "ready");
    assert_eq!(body["checks"]["database"], "ok");
    tokio::time::sleep(Duration::from_secs(60).saturating_sub(outage.elapsed())).await;
    let spooled = app
        .state
        .intake
        .spooling()
        .expect("on")
        .spool()
        .stats()
        .records;
    assert!(spooled > 0, "batches wait in the spool during the outage");
    ch.start();
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let answers: Vec<_> = futures_util::future::join_all(load)
        .await
        .into_iter()
        .flat_map(|r| r.expect("load task"))
        .collect();
    assert_all_204(&answers);
    let slowest = answers.iter().map(|(_, t)| *t).max().unwrap_or_default();
    eprintln!(
        "{} batches, {spooled} spooled at the end of the outage, slowest answer {slowest:?}",
        answers.len()
    );

    wait_drained(&app).await;
    wait_readyz(&app.base, "ok again", |s, t| {
        s == StatusCode::OK && t == "ok"
    })
    .await;
    let acked = answers.len() as u64;
    assert_eq!(
        ch.stored(&database).await,
        (acked * EVENTS_PER_BATCH, acked)
    );
    // The drain is in the metrics.
    let metrics = reqwest::get(format!(
        "{}/metrics",
        app.metrics.as_ref().expect("metrics")
    ))
    .await
    .expect("scrape")
    .text()
    .await
    .expect("text");
    for needle in [
        "streamwatch_spool_bytes 0",
        "streamwatch_spool_batches 0",
        "streamwatch_spool_oldest_age_seconds 0",
        "streamwatch_spool_drained_total{unit=\"batches\"}",
        "streamwatch_spool_drained_total{unit=\"events\"}",
        "streamwatch_spool_drain_insert_duration_seconds_count",
    ] {
        assert!(metrics.contains(needle), "{needle} not in /metrics");
    }
    app.shutdown().await;
}

/// ZooKeeper stopped for 30 s under a steady load on the local cluster (2 shards × 2
/// replicas, scale.md §2 with the spool on): the replicated tables turn read-only, every
/// batch is still answered 204, and once ZooKeeper is back everything acknowledged is
/// stored (the time it took is printed; scale.md asks for 60 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_stopped_for_30_s_on_the_cluster_is_spooled_through() {
    let ch = PrivateClickHouse::up_shaped(&[]);
    assert!(!ch.cluster.is_empty(), "a cluster");
    let database = common::test_db_name();
    let cluster = ch.cluster.clone();
    let app = spool_app(&ch.url, &database, move |c| c.clickhouse_cluster = cluster).await;
    let (_, key) = user_and_key(&app).await;
    wait_readyz(&app.base, "ok", |s, t| s == StatusCode::OK && t == "ok").await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = steady_load(
        app.base.clone(),
        key,
        4,
        Duration::from_millis(50),
        Arc::clone(&stop),
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    ch.run(&["stop-node", "zookeeper"]);
    tokio::time::sleep(Duration::from_secs(30)).await;
    ch.run(&["start-node", "zookeeper"]);
    let back = Instant::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let answers: Vec<_> = futures_util::future::join_all(load)
        .await
        .into_iter()
        .flat_map(|r| r.expect("load task"))
        .collect();
    assert_all_204(&answers);
    wait_drained(&app).await;
    eprintln!(
        "{} batches; everything stored {:?} after ZooKeeper returned",
        answers.len(),
        back.elapsed()
    );
    let acked = answers.len() as u64;
    // Drained means on one replica of each shard; a read through the Distributed table may
    // reach the other replica, which fetches the parts after ZooKeeper's return: wait for
    // the replicas to agree.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut stored = ch.stored(&database).await;
    while stored != (acked * EVENTS_PER_BATCH, acked) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        stored = ch.stored(&database).await;
    }
    assert_eq!(stored, (acked * EVENTS_PER_BATCH, acked));
    app.shutdown().await;
}

/// ClickHouse hung (SIGSTOP): every batch is still answered 204, while it is stopped, and
/// `/readyz` says it is spooling; after SIGCONT everything is drained.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_clickhouse_is_spooled_through() {
    let ch = PrivateClickHouse::up();
    let database = common::test_db_name();
    let app = spool_app(&ch.url, &database, |_| {}).await;
    let (_, key) = user_and_key(&app).await;
    wait_readyz(&app.base, "ok", |s, t| s == StatusCode::OK && t == "ok").await;
    ch.signal("-STOP");
    let http = reqwest::Client::new();
    let mut answers = Vec::new();
    for round in 0..20 {
        let posts = (0..8).map(|i| {
            let body = batch(&key, &format!("hung-{round}-{i}"), 0);
            let (http, base, key) = (http.clone(), app.base.clone(), key.clone());
            async move { post(&http, &base, &key, &body).await }
        });
        answers.extend(futures_util::future::join_all(posts).await);
    }
    // Answered while ClickHouse was still hung: the spool, not ClickHouse, acknowledged them.
    assert!(ch.is_stopped(), "ClickHouse was continued early");
    assert!(
        answers
            .iter()
            .all(|(s, _)| *s == Some(StatusCode::NO_CONTENT)),
        "{answers:?}"
    );
    eprintln!(
        "slowest answer while hung: {:?}",
        answers.iter().map(|(_, t)| *t).max()
    );
    // The breaker opens once a ping or the drain insert times out: still ready, spooling.
    let body = wait_readyz(&app.base, "spooling", |s, t| {
        s == StatusCode::OK && t.starts_with("spooling (")
    })
    .await;
    assert_eq!(body["status"], "ready");
    ch.signal("-CONT");
    wait_drained(&app).await;
    let acked = answers.len() as u64;
    assert_eq!(
        ch.stored(&database).await,
        (acked * EVENTS_PER_BATCH, acked)
    );
    app.shutdown().await;
}

/// A small `STREAMWATCH_SPOOL_MAX` during an outage: 204 until the spool is full, then the
/// contract's 500 and `/readyz` 503 `spool full`; after ClickHouse returns and the drain made
/// room, ready and 204 again, and every acknowledged batch stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_spool_is_a_500_and_unready_until_drained() {
    let ch = PrivateClickHouse::up();
    ch.stop();
    let database = common::test_db_name();
    let app = spool_app(&ch.url, &database, |c| c.spool_max = 64 << 10).await;
    let (_, key) = user_and_key(&app).await;
    let http = reqwest::Client::new();
    let mut acked = 0u64;
    let mut refusal = None;
    for n in 0..5_000 {
        let body = batch(&key, &format!("full-{n}"), 0);
        let r = http
            .post(app.url("/api/v1/telemetry"))
            .bearer_auth(&key)
            .json(&body)
            .send()
            .await
            .expect("send");
        if r.status() == StatusCode::NO_CONTENT {
            acked += 1;
        } else {
            refusal = Some(parts(r).await);
            break;
        }
    }
    assert!(
        acked > 20,
        "the spool took batches before it was full ({acked})"
    );
    assert_eq!(
        refusal,
        Some((
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({ "error": "Internal Server Error" })
        )),
        "a full spool refuses"
    );
    // Refused at once while full (no fsync, no wait): the same answer again.
    let (s, _) = post(&http, &app.base, &key, &batch(&key, "full-again", 0)).await;
    assert_eq!(s, Some(StatusCode::INTERNAL_SERVER_ERROR));
    let (s, body) = readyz(&app.base).await;
    assert_eq!(
        (s, body),
        (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "status": "unready", "checks": { "database": "ok", "telemetry": "spool full" } })
        )
    );

    ch.start();
    wait_readyz(&app.base, "ready", |s, _| s == StatusCode::OK).await;
    let (s, _) = post(&http, &app.base, &key, &batch(&key, "after-drain", 0)).await;
    assert_eq!(s, Some(StatusCode::NO_CONTENT));
    acked += 1;
    wait_drained(&app).await;
    assert_eq!(
        ch.stored(&database).await,
        (acked * EVENTS_PER_BATCH, acked)
    );
    app.shutdown().await;
}

/// A second process on the same spool directory refuses to start, with one line naming
/// STREAMWATCH_SPOOL_DIR; the first is undisturbed (and, ClickHouse being down, ready and
/// spooling).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_on_one_spool_dir_refuses_to_start() {
    let spool_dir = tempfile::tempdir().expect("spool dir");
    let (first_data, second_data) = (
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    );
    let clickhouse = closed_address();
    let spool = spool_dir.path().to_str().expect("utf-8").to_owned();
    let env = [
        ("CLICKHOUSE_URL", clickhouse.as_str()),
        ("STREAMWATCH_SPOOL_DIR", spool.as_str()),
    ];
    let mut first = Process::start(first_data.path(), &env).await;
    let (s, body) = readyz(&first.base).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert!(
        body["checks"]["telemetry"]
            .as_str()
            .is_some_and(|t| t.starts_with("spooling (")),
        "{body}"
    );
    let second = Command::new(env!("CARGO_BIN_EXE_streamwatch"))
        .args(["serve", "--listen", "127.0.0.1:0", "--metrics-listen", ""])
        .env_clear()
        .env("STREAMWATCH_DATA_DIR", second_data.path())
        .env("CLICKHOUSE_URL", &clickhouse)
        .env("STREAMWATCH_SPOOL_DIR", &spool)
        .output()
        .expect("run a second server");
    assert_eq!(second.status.code(), Some(1));
    let stderr = String::from_utf8(second.stderr).expect("utf-8");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {stderr}");
    assert!(
        lines[0].starts_with(&format!(
            "error: another streamwatch process is using STREAMWATCH_SPOOL_DIR {spool} ("
        )) && lines[0].contains(&format!("by pid {}", first.child.id())),
        "{stderr}"
    );
    assert_eq!(readyz(&first.base).await.0, StatusCode::OK);
    assert!(first.terminate().success());
}

/// The real binary, its stderr in a file (the spool's repair lines) and its metrics on a
/// known port. SIGKILLed when dropped.
struct Binary {
    child: std::process::Child,
    base: String,
    metrics: String,
    log: PathBuf,
}

impl Binary {
    /// Starts `streamwatch serve` on `data_dir` with `env` and waits until `/readyz` is 200.
    async fn start(data_dir: &Path, env: &[(&str, &str)]) -> Binary {
        let (port, metrics_port) = (free_port(), free_port());
        let log = data_dir.with_extension(format!("{port}.log"));
        let file = std::fs::File::create(&log).expect("log file");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_streamwatch"));
        cmd.arg("serve")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("RUST_LOG", "warn")
            .env("STREAMWATCH_LISTEN", format!("127.0.0.1:{port}"))
            .env(
                "STREAMWATCH_METRICS_LISTEN",
                format!("127.0.0.1:{metrics_port}"),
            )
            .env("STREAMWATCH_DATA_DIR", data_dir)
            .env("STREAMWATCH_AUTH_RATE_LIMIT", "off")
            .env("STREAMWATCH_SIGNUP", "open")
            .env("STREAMWATCH_QOE_REFRESH", "1s")
            .stdout(Stdio::null())
            .stderr(Stdio::from(file));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let b = Binary {
            child: cmd.spawn().expect("spawn streamwatch"),
            base: format!("http://127.0.0.1:{port}"),
            metrics: format!("http://127.0.0.1:{metrics_port}/metrics"),
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Ok(r) = reqwest::get(format!("{}/readyz", b.base)).await {
                if r.status().is_success() {
                    return b;
                }
            }
            assert!(
                Instant::now() < deadline,
                "streamwatch never ready: {}",
                b.log_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The value of an unlabelled metric (a gauge) on the scrape page.
    async fn gauge(&self, name: &str) -> f64 {
        let page = reqwest::get(&self.metrics)
            .await
            .expect("scrape")
            .text()
            .await
            .expect("text");
        page.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    }

    /// Batches the spool holds, once the drainer has published them (a gauge it refreshes
    /// at least every second; 0 until its first round).
    async fn spooled(&self) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let n = self.gauge("streamwatch_spool_batches").await as u64;
            if n > 0 || Instant::now() > deadline {
                return n;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A labelled counter's value (0 before it is first recorded).
    async fn counter(&self, series: &str) -> f64 {
        self.gauge(series).await
    }

    /// Waits until the spool holds no batch.
    async fn wait_drained(&self) {
        let deadline = Instant::now() + Duration::from_secs(180);
        // The gauge is published by the drainer at least every second.
        loop {
            tokio::time::sleep(Duration::from_millis(1_200)).await;
            if self.gauge("streamwatch_spool_batches").await == 0.0 {
                return;
            }
            assert!(Instant::now() < deadline, "never drained");
        }
    }

    async fn sign_up_and_key(&self) -> (String, String) {
        let http = reqwest::Client::new();
        let r = http
            .post(format!("{}/api/auth/sign-up/email", self.base))
            .json(&json!({ "name": "Test User", "email": "dev@example.com", "password": "correct-horse-battery" }))
            .send()
            .await
            .expect("sign up");
        assert_eq!(r.status(), StatusCode::OK);
        let cookie = common::session_cookie_of(&r).expect("cookie");
        let minted: Value = http
            .post(format!("{}/api/v1/keys", self.base))
            .header("cookie", format!("auth.session_token={cookie}"))
            .json(&json!({ "label": "k" }))
            .send()
            .await
            .expect("mint")
            .json()
            .await
            .expect("json");
        (cookie, minted["rawKey"].as_str().expect("key").to_owned())
    }

    async fn get(&self, cookie: &str, path: &str) -> (StatusCode, Value) {
        let r = reqwest::Client::new()
            .get(format!("{}{path}", self.base))
            .header("cookie", format!("auth.session_token={cookie}"))
            .send()
            .await
            .expect("get");
        parts(r).await
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// Posts `batches` (session, body) with `clients` at once until all are answered or the
/// server stops answering; the sessions answered 204.
async fn post_all(
    base: &str,
    key: &str,
    batches: Vec<(String, Value)>,
    clients: usize,
    progress: Arc<std::sync::atomic::AtomicUsize>,
) -> Vec<String> {
    let queue = Arc::new(Mutex::new(batches.into_iter()));
    let workers = (0..clients).map(|_| {
        let (queue, base, key, progress) = (
            Arc::clone(&queue),
            base.to_owned(),
            key.to_owned(),
            Arc::clone(&progress),
        );
        tokio::spawn(async move {
            let http = reqwest::Client::new();
            let mut acked = Vec::new();
            loop {
                let next = queue.lock().expect("queue").next();
                let Some((session, body)) = next else { break };
                match post(&http, &base, &key, &body).await {
                    (Some(StatusCode::NO_CONTENT), _) => {
                        acked.push(session);
                        progress.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                    _ => break,
                }
            }
            acked
        })
    });
    futures_util::future::join_all(workers)
        .await
        .into_iter()
        .flat_map(|r| r.expect("worker"))
        .collect()
}

/// streamwatch SIGKILLed with thousands of batches spooled (ClickHouse down), restarted and
/// SIGKILLed again while draining, then restarted: every acknowledged event is stored, and
/// each is counted once in the session events and in the QoE routes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_while_spooled_and_while_draining_loses_and_doubles_nothing() {
    const SESSIONS: usize = 100;
    const BATCHES: i64 = 60; // 6,000 batches
    let ch = PrivateClickHouse::up();
    let data = tempfile::tempdir().expect("data dir");
    let database = common::test_db_name();
    let env = [
        ("CLICKHOUSE_URL", ch.url.as_str()),
        ("CLICKHOUSE_DATABASE", database.as_str()),
    ];
    let mut first = Binary::start(data.path(), &env).await;
    let (cookie, key) = first.sign_up_and_key().await;
    wait_readyz(&first.base, "ok", |s, t| s == StatusCode::OK && t == "ok").await;
    // Every batch, keyed `s|n`, round-robin over the sessions: with 8 clients a session's
    // batches arrive in order (one out of order would only make its view read back).
    let all: Vec<(String, Value)> = (0..BATCHES)
        .flat_map(|n| (0..SESSIONS).map(move |s| (s, n)))
        .map(|(s, n)| (format!("{s}|{n}"), batch(&key, &format!("view-{s}"), n)))
        .collect();
    let unacked = |acked: &[String]| -> Vec<(String, Value)> {
        let acked: std::collections::HashSet<&String> = acked.iter().collect();
        all.iter()
            .filter(|(id, _)| !acked.contains(id))
            .cloned()
            .collect()
    };

    // 1. ClickHouse hung (SIGSTOP): thousands of batches spooled, the drainer's first insert
    //    stuck in flight; SIGKILL.
    ch.signal("-STOP");
    let mut acked = post_all(&first.base, &key, all[..3_000].to_vec(), 8, Arc::default()).await;
    assert_eq!(acked.len(), 3_000, "all spooled while ClickHouse is hung");
    first.kill();
    ch.signal("-CONT");

    // 2. Restarted: it drains what the first left while the rest of the load comes in;
    //    SIGKILL once the drain has stored some and more has been acknowledged.
    let mut second = Binary::start(data.path(), &env).await;
    let progress = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let load = tokio::spawn({
        let (base, key, batches, progress) = (
            second.base.clone(),
            key.clone(),
            unacked(&acked),
            Arc::clone(&progress),
        );
        async move { post_all(&base, &key, batches, 8, progress).await }
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let drained = second
            .counter("streamwatch_spool_drained_total{unit=\"batches\"}")
            .await;
        let more = progress.load(std::sync::atomic::Ordering::SeqCst);
        if drained > 0.0 && more >= 1_000 {
            let left = second.gauge("streamwatch_spool_batches").await;
            eprintln!("killed while draining: {drained} drained, {left} spooled, {more} more acknowledged");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the drain never started ({drained}, {more})"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    second.kill();
    acked.extend(load.await.expect("load"));

    // 3. Restarted again: the clients send what was never acknowledged (the SDK retries).
    let third = Binary::start(data.path(), &env).await;
    let rest = post_all(&third.base, &key, unacked(&acked), 8, Arc::default()).await;
    assert_eq!(acked.len() + rest.len(), all.len());
    third.wait_drained().await;
    let total_events = SESSIONS as u64 * BATCHES as u64 * EVENTS_PER_BATCH;
    assert_eq!(ch.stored(&database).await, (total_events, SESSIONS as u64));
    for s in 0..SESSIONS {
        let (status, body) = third
            .get(
                &cookie,
                &format!("/api/v1/telemetry/sessions/view-{s}/events"),
            )
            .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            body["items"].as_array().map(Vec::len),
            Some(BATCHES as usize * EVENTS_PER_BATCH as usize),
            "view-{s}"
        );
    }
    // QoE: every view once, each stall once (the refresher runs every second).
    let range = "from=2026-01-01T09:00:00.000Z&to=2026-01-01T12:00:00.000Z";
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let mut views = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let path = match &cursor {
                Some(c) => format!("/api/v1/qoe/views?limit=100&cursor={c}&{range}"),
                None => format!("/api/v1/qoe/views?limit=100&{range}"),
            };
            let (status, page) = third.get(&cookie, &path).await;
            assert_eq!(status, StatusCode::OK, "{page}");
            views.extend(page["items"].as_array().cloned().unwrap_or_default());
            match page["nextCursor"].as_str() {
                Some(c) => cursor = Some(c.to_owned()),
                None => break,
            }
        }
        let exact = views.len() == SESSIONS
            && views.iter().all(|v| {
                v["rebufferCount"] == json!(BATCHES) && v["rebufferMs"] == json!(BATCHES * 1000)
            });
        if exact {
            let (_, overview) = third
                .get(&cookie, &format!("/api/v1/qoe/overview?{range}"))
                .await;
            assert_eq!(overview["views"], json!(SESSIONS), "{overview}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "QoE never exact: {} views, first {:?}",
            views.len(),
            views.first()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A spool file with a garbage tail, then one cut short, at start-up: each is cut and
/// logged, the server starts, and what is left is drained.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_spool_tail_is_cut_logged_and_the_rest_drained() {
    let ch = PrivateClickHouse::up();
    ch.stop();
    let data = tempfile::tempdir().expect("data dir");
    let database = common::test_db_name();
    let env = [
        ("CLICKHOUSE_URL", ch.url.as_str()),
        ("CLICKHOUSE_DATABASE", database.as_str()),
    ];
    let wal = data.path().join("spool").join(ingest::spool::WAL_FILE);
    let bodies = |key: &str, from: usize, n: usize| -> Vec<(String, Value)> {
        (from..from + n)
            .map(|i| {
                let s = format!("tail-{i}");
                (s.clone(), batch(key, &s, 0))
            })
            .collect()
    };

    // Garbage after the last commit of the write-ahead log: cut, nothing acknowledged lost.
    let mut first = Binary::start(data.path(), &env).await;
    let (_, key) = first.sign_up_and_key().await;
    let first_acked = post_all(&first.base, &key, bodies(&key, 0, 100), 4, Arc::default()).await;
    assert_eq!(first_acked.len(), 100);
    first.kill();
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&wal)
            .expect("wal");
        f.write_all(&[0xA5; 3000]).expect("garbage");
    }
    let mut second = Binary::start(data.path(), &env).await;
    assert!(
        second
            .log_text()
            .contains("spool: cut the bytes after the last commit"),
        "{}",
        second.log_text()
    );
    assert_eq!(second.spooled().await, 100);

    // A write-ahead log cut short (its last frame torn): cut to the last whole commit.
    let second_acked = post_all(
        &second.base,
        &key,
        bodies(&key, 100, 100),
        4,
        Arc::default(),
    )
    .await;
    assert_eq!(second_acked.len(), 100);
    second.kill();
    let len = std::fs::metadata(&wal).expect("wal").len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&wal)
        .expect("wal")
        .set_len(len - 1000)
        .expect("truncate");
    let mut third = Binary::start(data.path(), &env).await;
    assert!(
        third
            .log_text()
            .contains("spool: cut the bytes after the last commit"),
        "{}",
        third.log_text()
    );
    let kept = third.spooled().await;
    assert!((100..200).contains(&kept), "{kept} batches kept");
    third.kill();

    // ClickHouse back: the rest is drained, the first hundred in full.
    ch.start();
    let fourth = Binary::start(data.path(), &env).await;
    fourth.wait_drained().await;
    assert_eq!(ch.stored(&database).await, (kept * EVENTS_PER_BATCH, kept));
    let first_stored = ch
        .query(&format!(
            "SELECT uniqExact(session_id) FROM {database}.telemetry_events FINAL \
             WHERE toUInt32(substring(session_id, 6)) < 100"
        ))
        .await;
    assert_eq!(first_stored, "100");
}
