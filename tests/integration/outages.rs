//! Store outages (decisions.md §11): the service starts while ClickHouse or PostgreSQL is
//! unreachable, is unready (`/readyz` 503) until they answer, answers telemetry within 2 s while
//! ClickHouse is down or hung (a circuit breaker, not a queue of doomed requests), and recovers
//! by itself when the store comes back, with no restart.
//!
//! The stores "appear", "hang" and "come back" through a TCP relay the test controls, on an
//! address that is at first closed; behind it are the real ClickHouse and PostgreSQL.

use crate::common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{parts, spawn_unready, Engine, TestApp};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const FORWARD: u8 = 0;
const HANG: u8 = 1;

/// A relay on a fixed local address to a real server: it forwards, or hangs (accepts and
/// keeps every connection, old and new, open without a byte in either direction).
struct Relay {
    mode: Arc<AtomicU8>,
}

impl Relay {
    /// Starts relaying `at` → `to` (the address must be free: it was reserved and released).
    async fn start(at: SocketAddr, to: &'static str, mode: u8) -> Relay {
        let listener = TcpListener::bind(at).await.expect("bind the relay");
        let mode = Arc::new(AtomicU8::new(mode));
        let m = Arc::clone(&mode);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let m = Arc::clone(&m);
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(to).await else {
                        return;
                    };
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::join!(pump(cr, sw, Arc::clone(&m)), pump(sr, cw, m));
                });
            }
        });
        Relay { mode }
    }

    fn set(&self, mode: u8) {
        self.mode.store(mode, Ordering::SeqCst);
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mode: Arc<AtomicU8>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if mode.load(Ordering::SeqCst) == HANG {
            // Hold the connection: nothing more passes, nothing is closed.
            std::future::pending::<()>().await;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if mode.load(Ordering::SeqCst) == HANG {
            std::future::pending::<()>().await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// A local address nothing listens on (reserved, then released).
fn closed_address() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("reserve")
        .local_addr()
        .expect("addr")
}

async fn readyz(app: &TestApp) -> (StatusCode, Value) {
    parts(app.get("/readyz", None).await).await
}

async fn wait_ready(app: &TestApp) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (s, b) = readyz(app).await;
        if s == StatusCode::OK {
            return b;
        }
        assert!(Instant::now() < deadline, "never became ready: {b}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Posts one batch; returns its status and how long the answer took.
async fn post(app: &TestApp, key: &str, session: &str) -> (StatusCode, Duration) {
    let body = json!({ "apiKey": key, "sessionId": session, "events": [
        { "type": "playback_pause", "ts": "2026-11-21T10:00:00.000Z", "payload": { "positionMs": 1, "bufferedMs": 2 } }
    ]});
    let started = Instant::now();
    let r = app
        .http
        .post(app.url("/api/v1/telemetry"))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .expect("send");
    (r.status(), started.elapsed())
}

async fn key_of(app: &TestApp) -> (String, String) {
    let cookie = app.user("dev@example.com").await;
    let minted: Value = app
        .post("/api/v1/keys", Some(&cookie), json!({ "label": "k" }))
        .await
        .json()
        .await
        .expect("json");
    (cookie, minted["rawKey"].as_str().expect("key").to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clickhouse_down_at_start_hung_later_and_back_without_a_restart() {
    let at = closed_address();
    let app = spawn_unready(Engine::Sqlite, |c| {
        c.clickhouse_url = Some(format!("http://{at}"));
        c.clickhouse_database = common::test_db_name();
        // decisions.md §11 without the spool (scale.md §3: `off` keeps it as it is).
        c.spool = Some(streamwatch::config::SpoolSetting::Off);
    })
    .await;
    // Started although ClickHouse is unreachable: alive, not ready.
    assert_eq!(
        parts(app.get("/healthz", None).await).await,
        (StatusCode::OK, json!({ "status": "ok" }))
    );
    let (s, b) = readyz(&app).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{b}");
    assert_eq!(b["status"], "unready");
    assert_eq!(b["checks"]["database"], "ok");
    assert!(b["checks"]["telemetry"].is_string() && b["checks"]["telemetry"] != "ok");
    // Telemetry is answered 500 at once, not after a store timeout.
    let (cookie, key) = key_of(&app).await;
    for i in 0..5 {
        let (status, took) = post(&app, &key, &format!("down-{i}")).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(took < Duration::from_secs(2), "answered after {took:?}");
    }
    let r = app.get("/api/v1/telemetry/sessions", Some(&cookie)).await;
    assert_eq!(
        parts(r).await,
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({ "error": "Internal Server Error" })
        )
    );

    // ClickHouse appears at that address: ready and storing, no restart.
    let relay = Relay::start(at, "127.0.0.1:8123", FORWARD).await;
    let body = wait_ready(&app).await;
    assert_eq!(
        body,
        json!({ "status": "ready", "checks": { "database": "ok", "telemetry": "ok" } })
    );
    let (status, _) = post(&app, &key, "after-start").await;
    assert_eq!(status, StatusCode::NO_CONTENT);

    // It hangs (accepts, never answers): no request waits longer than 2 s, and once the
    // breaker is open they fail at once; readiness says so.
    relay.set(HANG);
    for i in 0..6 {
        let (status, took) = post(&app, &key, &format!("hung-{i}")).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "batch {i}");
        assert!(
            took < Duration::from_secs(2),
            "batch {i} answered after {took:?}"
        );
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let started = Instant::now();
        let (s, b) = readyz(&app).await;
        assert!(started.elapsed() < Duration::from_secs(2));
        if s == StatusCode::SERVICE_UNAVAILABLE {
            assert_eq!(b["checks"]["database"], "ok");
            assert_ne!(b["checks"]["telemetry"], "ok");
            break;
        }
        assert!(Instant::now() < deadline, "a hung store stayed ready: {b}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let r = app.get("/api/v1/telemetry/sessions", Some(&cookie)).await;
    assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);

    // It answers again: ready, and batches are acknowledged and readable.
    relay.set(FORWARD);
    wait_ready(&app).await;
    let (status, _) = post(&app, &key, "recovered").await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (s, events) = parts(
        app.get("/api/v1/telemetry/sessions/recovered/events", Some(&cookie))
            .await,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{events}");
    assert_eq!(events["items"].as_array().expect("items").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_down_at_start_then_up_without_a_restart() {
    let at = closed_address();
    // A fresh database on the real server, reached through the relay once it is up.
    let real = common::fresh_pg_database().await;
    let mut url = url::Url::parse(&real).expect("url");
    url.set_port(Some(at.port())).expect("port");
    let app = spawn_unready(Engine::Sqlite, |c| {
        c.database_url = Some(streamwatch::config::DatabaseUrl::Postgres(url.to_string()));
    })
    .await;
    assert_eq!(app.get("/healthz", None).await.status(), StatusCode::OK);
    let (s, b) = readyz(&app).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{b}");
    assert_eq!(b["checks"]["telemetry"], "ok");
    assert_ne!(b["checks"]["database"], "ok");
    // Routes that need the database fail fast with the contract's 500.
    let started = Instant::now();
    let r = app
        .post(
            "/api/auth/sign-up/email",
            None,
            json!({ "name": "Ada", "email": "ada@example.com", "password": "correct-horse-battery" }),
        )
        .await;
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(
        parts(r).await,
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({ "error": "Internal Server Error" })
        )
    );

    let _relay = Relay::start(at, "127.0.0.1:5432", FORWARD).await;
    wait_ready(&app).await;
    let cookie = app.user("ada@example.com").await;
    let item = app.stream(&cookie, "http://127.0.0.1:9/live.m3u8").await;
    assert_eq!(item["status"], "watching");
}

/// A PostgreSQL database that does not exist yet is created by the service when its role may
/// (decisions.md §15), and the service is ready without any step by the operator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_postgres_database_is_created() {
    let name = common::test_db_name();
    let mut url = url::Url::parse(&common::pg_admin_url()).expect("url");
    url.set_path(&name);
    let app = common::spawn_quiet(Engine::Sqlite, |c| {
        c.database_url = Some(streamwatch::config::DatabaseUrl::Postgres(url.to_string()));
    })
    .await;
    assert_eq!(app.state.db.engine, streamwatch::db::Engine::Postgres);
    let owner = app.user("owner@example.com").await;
    assert_eq!(
        app.get("/api/v1/streams", Some(&owner)).await.status(),
        StatusCode::OK
    );
}

/// When the role may not create the database, `/readyz` names the cause and the log says how
/// to create it: one line per backoff step from the migrator, and none from the tasks that
/// wait for the store (they used to warn every second each); creating it makes the service
/// ready without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_database_the_role_cannot_create_is_explained() {
    use sqlx::Connection;
    use std::io::{BufRead, BufReader};
    use std::sync::Mutex;
    let db_name = common::test_db_name();
    let role = format!("{db_name}_role");
    let mut admin = sqlx::PgConnection::connect(&common::pg_admin_url())
        .await
        .expect("admin");
    sqlx::query(&format!("CREATE ROLE {role} LOGIN NOCREATEDB"))
        .execute(&mut admin)
        .await
        .expect("role");
    let mut url = url::Url::parse(&common::pg_admin_url()).expect("url");
    url.set_path(&db_name);
    url.set_username(&role).expect("user");
    let dir = tempfile::tempdir().expect("dir");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("port")
        .local_addr()
        .expect("addr")
        .port();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_streamwatch"))
        .args(["serve", "--metrics-listen", ""])
        .env_clear()
        .env("STREAMWATCH_LISTEN", format!("127.0.0.1:{port}"))
        .env("STREAMWATCH_DATA_DIR", dir.path())
        .env("DATABASE_URL", url.as_str())
        .env("RUST_LOG", "warn")
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
    // Three backoff steps after the start-up line (0.5 s, 1 s, 2 s).
    let mut steps = 0;
    for _ in 0..400 {
        steps = lines
            .lock()
            .expect("lines")
            .iter()
            .filter(|l| l.contains("database not ready yet"))
            .count();
        if steps >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(steps >= 3, "{:?}", lines.lock().expect("lines"));
    let r = http
        .get(format!("{base}/readyz"))
        .send()
        .await
        .expect("readyz");
    let (status, body) = parts(r).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let cause = body["checks"]["database"]
        .as_str()
        .expect("cause")
        .to_owned();
    assert!(
        cause.starts_with(&format!(
            "database \"{db_name}\" does not exist, and role \"{role}\" may not create it ("
        )),
        "{cause}"
    );
    {
        let lines = lines.lock().expect("lines");
        let how = format!("CREATE DATABASE \"{db_name}\" OWNER \"{role}\";");
        let first = lines
            .iter()
            .find(|l| l.contains("database missing at start-up"))
            .expect("a start-up line");
        assert!(first.contains(&how), "{first}");
        // Every line is the migrator's: one per step, none from the waiting tasks.
        for l in lines.iter() {
            assert!(
                l.contains("streamwatch::db:") && l.contains(&how),
                "a line not from the migrator: {l}\n{lines:?}"
            );
        }
    }
    // An administrator creates it: ready without a restart.
    sqlx::query(&format!("CREATE DATABASE {db_name} OWNER {role}"))
        .execute(&mut admin)
        .await
        .expect("create");
    let mut ready = false;
    for _ in 0..400 {
        let r = http
            .get(format!("{base}/readyz"))
            .send()
            .await
            .expect("readyz");
        if r.status() == StatusCode::OK {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(ready, "ready once the database exists");
    sqlx::query(&format!("DROP DATABASE {db_name} WITH (FORCE)"))
        .execute(&mut admin)
        .await
        .expect("drop");
    sqlx::query(&format!("DROP ROLE {role}"))
        .execute(&mut admin)
        .await
        .expect("drop role");
}
