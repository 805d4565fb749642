//! Test harness: `spawn_app` starts the real server on 127.0.0.1:0 against the embedded SQLite
//! store in a temp dir, or against a fresh PostgreSQL database (TEST_DATABASE_URL's server).
#![allow(dead_code)]

pub mod receiver;

use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue, COOKIE};
use reqwest::{Method, Response, StatusCode};
use serde_json::{json, Value};
use sqlx::Connection;
use streamwatch::config::{CidrList, Config, DatabaseUrl, RateLimit};
use streamwatch::http::AppState;
use streamwatch::startup::{Background, Server};
use tokio::sync::oneshot;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    Sqlite,
    Postgres,
}

/// Admin URL of the PostgreSQL server tests create databases on.
pub fn pg_admin_url() -> String {
    std::env::var("TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// A fresh database name for one test: the run's prefix (`SW_TEST_PREFIX`, set by
/// `scripts/test` so a run drops only its own databases) and a unique id.
pub fn test_db_name() -> String {
    let prefix = std::env::var("SW_TEST_PREFIX").unwrap_or_else(|_| "sw_test_".to_owned());
    format!("{prefix}{}", streamwatch::time::new_id())
}

/// Creates an empty PostgreSQL database and returns its URL.
pub async fn fresh_pg_database() -> String {
    let admin = pg_admin_url();
    let name = test_db_name();
    let mut conn = sqlx::PgConnection::connect(&admin)
        .await
        .expect("connect to TEST_DATABASE_URL");
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await
        .expect("create database");
    let mut url = url::Url::parse(&admin).expect("admin url");
    url.set_path(&name);
    url.to_string()
}

pub struct TestApp {
    pub base: String,
    /// `http://<metrics listener>` (the tests enable it on a free port).
    pub metrics: Option<String>,
    pub http: reqwest::Client,
    pub state: Arc<AppState>,
    pub engine: Engine,
    pub _dir: tempfile::TempDir,
    stop: Option<oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<()>>,
}

/// A config for tests: port 0, rate limit off, loopback origins admitted by the guard, open
/// sign-up (most tests make several accounts; tests of invitations set `Signup::Invite`).
pub async fn test_config(engine: Engine, dir: &std::path::Path) -> Config {
    let mut c = Config::defaults(dir);
    c.signup = streamwatch::config::Signup::Open;
    c.listen = "127.0.0.1:0".parse().expect("addr");
    c.metrics_listen =
        streamwatch::config::OptionalAddr(Some("127.0.0.1:0".parse().expect("addr")));
    c.auth_rate_limit = RateLimit::Off;
    c.allow_private = CidrList(vec!["127.0.0.0/8".parse().expect("cidr")]);
    c.alerts_allow_private = CidrList(vec!["127.0.0.0/8".parse().expect("cidr")]);
    // A test that sets CLICKHOUSE_URL reads its batches back right after their 204: the
    // direct path. The spool (on by default with ClickHouse) has its own tests (the `spool` module).
    c.spool = Some(streamwatch::config::SpoolSetting::Off);
    if engine == Engine::Postgres {
        c.database_url = Some(DatabaseUrl::Postgres(fresh_pg_database().await));
    }
    c
}

/// The API without background probing: tests that write probe rows themselves (or assert the
/// snapshot of a stream no probe has touched) see exactly what they wrote.
pub async fn spawn_app(engine: Engine) -> TestApp {
    let app = start(engine, |_| {}, Background { prober: false }).await;
    app.wait_ready().await;
    app
}

/// The whole service, prober included, with a config `tweak` may change; returns once it is
/// ready (both stores answer).
pub async fn spawn_with(engine: Engine, tweak: impl FnOnce(&mut Config)) -> TestApp {
    let app = start(engine, tweak, Background::default()).await;
    app.wait_ready().await;
    app
}

/// [`spawn_with`] without the prober: for tests that write probe rows themselves.
pub async fn spawn_quiet(engine: Engine, tweak: impl FnOnce(&mut Config)) -> TestApp {
    let app = start(engine, tweak, Background { prober: false }).await;
    app.wait_ready().await;
    app
}

/// [`spawn_with`] without waiting for readiness: for tests of a store that is down.
pub async fn spawn_unready(engine: Engine, tweak: impl FnOnce(&mut Config)) -> TestApp {
    start(engine, tweak, Background::default()).await
}

async fn start(engine: Engine, tweak: impl FnOnce(&mut Config), background: Background) -> TestApp {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = test_config(engine, dir.path()).await;
    tweak(&mut config);
    let server = Server::build_with(config, background)
        .await
        .expect("server builds");
    let addr = server.local_addr();
    let metrics = server.metrics_addr().map(|a| format!("http://{a}"));
    let state = server.state.clone();
    let (stop, stopped) = oneshot::channel::<()>();
    let handle = tokio::spawn(async move {
        server
            .run(async move {
                let _ = stopped.await;
            })
            .await
            .expect("server runs");
    });
    TestApp {
        base: format!("http://{addr}"),
        metrics,
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .expect("client"),
        state,
        engine,
        _dir: dir,
        stop: Some(stop),
        server: Some(handle),
    }
}

impl TestApp {
    /// Waits until `/readyz` answers 200 (the telemetry store connects in the background).
    pub async fn wait_ready(&self) {
        for _ in 0..1200 {
            if let Ok(r) = self.http.get(self.url("/readyz")).send().await {
                if r.status().is_success() {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the test server did not become ready");
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// Sends a request with an optional cookie and a raw or JSON body.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        cookie: Option<&str>,
        body: Option<Body>,
    ) -> Response {
        let mut req = self.http.request(method, self.url(path));
        if let Some(c) = cookie {
            req = req.header(COOKIE, format!("auth.session_token={c}"));
        }
        req = match body {
            Some(Body::Json(v)) => req.json(&v),
            Some(Body::Raw(s)) => req.body(s),
            None => req,
        };
        req.send().await.expect("request")
    }

    pub async fn get(&self, path: &str, cookie: Option<&str>) -> Response {
        self.send(Method::GET, path, cookie, None).await
    }

    pub async fn post(&self, path: &str, cookie: Option<&str>, body: Value) -> Response {
        self.send(Method::POST, path, cookie, Some(Body::Json(body)))
            .await
    }

    pub async fn patch(&self, path: &str, cookie: Option<&str>, body: Value) -> Response {
        self.send(Method::PATCH, path, cookie, Some(Body::Json(body)))
            .await
    }

    pub async fn delete(&self, path: &str, cookie: Option<&str>) -> Response {
        self.send(Method::DELETE, path, cookie, None).await
    }

    /// Signs up a fresh user and returns its session cookie value.
    pub async fn user(&self, email: &str) -> String {
        let r = self
            .post(
                "/api/auth/sign-up/email",
                None,
                json!({ "name": "Test User", "email": email, "password": "correct-horse-battery" }),
            )
            .await;
        assert_eq!(r.status(), StatusCode::OK);
        session_cookie_of(&r).expect("sign-up sets the cookie")
    }

    /// Mints an API key for the user of `cookie` and returns the raw key.
    pub async fn api_key(&self, cookie: &str) -> String {
        let r = self
            .post("/api/v1/keys", Some(cookie), json!({ "label": "k" }))
            .await;
        assert_eq!(r.status(), StatusCode::CREATED);
        let minted: Value = r.json().await.expect("json");
        minted["rawKey"].as_str().expect("rawKey").to_owned()
    }

    /// Registers a stream and returns its StreamItem.
    pub async fn stream(&self, cookie: &str, source_url: &str) -> Value {
        let r = self
            .post(
                "/api/v1/streams",
                Some(cookie),
                json!({ "sourceUrl": source_url }),
            )
            .await;
        assert_eq!(r.status(), StatusCode::CREATED);
        r.json().await.expect("json")
    }

    pub async fn shutdown(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(h) = self.server.take() {
            let _ = h.await;
        }
    }
}

pub enum Body {
    Json(Value),
    Raw(String),
}

/// The `auth.session_token` value a response sets.
pub fn session_cookie_of(r: &Response) -> Option<String> {
    set_cookie_header(r.headers())
        .and_then(|h| h.strip_prefix("auth.session_token=").map(str::to_owned))
        .and_then(|rest| rest.split(';').next().map(str::to_owned))
        .filter(|v| !v.is_empty())
}

pub fn set_cookie_header(h: &HeaderMap) -> Option<String> {
    h.get_all("set-cookie")
        .iter()
        .filter_map(|v: &HeaderValue| v.to_str().ok())
        .find(|v| v.starts_with("auth.session_token="))
        .map(str::to_owned)
}

/// Status and parsed JSON body (Null for an empty body).
pub async fn parts(r: Response) -> (StatusCode, Value) {
    let status = r.status();
    let text = r.text().await.expect("body");
    let body = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).expect("json body")
    };
    (status, body)
}

/// True when `s` is a contract timestamp `YYYY-MM-DDTHH:MM:SS.sssZ`.
pub fn is_iso_ms(s: &Value) -> bool {
    let Some(s) = s.as_str() else { return false };
    s.len() == 24
        && s.ends_with('Z')
        && chrono::DateTime::parse_from_rfc3339(s).is_ok()
        && s.as_bytes()[19] == b'.'
}

/// Declares one test per engine for each listed `async fn(TestApp)`.
#[macro_export]
macro_rules! on_both_engines {
    ($($case:ident),* $(,)?) => {
        $(
            mod $case {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::$case($crate::common::spawn_app($crate::common::Engine::Sqlite).await).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    super::$case($crate::common::spawn_app($crate::common::Engine::Postgres).await).await
                }
            }
        )*
    };
}

/// The real `streamwatch` binary as a child process, for tests that need several processes
/// or a SIGKILL. Killed when dropped.
pub struct Process {
    pub child: std::process::Child,
    pub base: String,
    pub data_dir: std::path::PathBuf,
}

impl Process {
    /// Starts `streamwatch serve` on a free loopback port with `data_dir` and extra env (open
    /// sign-up unless `env` says otherwise), and waits until it is ready (`/readyz`: both
    /// stores answer).
    pub async fn start(data_dir: &std::path::Path, env: &[(&str, &str)]) -> Process {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("free port")
            .local_addr()
            .expect("addr")
            .port();
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_streamwatch"));
        cmd.arg("serve")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("RUST_LOG", "warn")
            .env("STREAMWATCH_LISTEN", format!("127.0.0.1:{port}"))
            .env("STREAMWATCH_DATA_DIR", data_dir)
            .env("STREAMWATCH_AUTH_RATE_LIMIT", "off")
            .env("STREAMWATCH_SIGNUP", "open")
            .env("STREAMWATCH_ALLOW_PRIVATE", "127.0.0.0/8")
            .env("STREAMWATCH_ALERTS_ALLOW_PRIVATE", "127.0.0.0/8")
            .env("STREAMWATCH_METRICS_LISTEN", "127.0.0.1:0")
            .stdout(std::process::Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawn streamwatch");
        let p = Process {
            child,
            base: format!("http://127.0.0.1:{port}"),
            data_dir: data_dir.to_owned(),
        };
        let client = reqwest::Client::new();
        for _ in 0..1200 {
            if let Ok(r) = client.get(p.url("/readyz")).send().await {
                if r.status().is_success() {
                    return p;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("streamwatch did not become ready on {}", p.base);
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// Signs up and returns the session cookie value.
    pub async fn sign_up(&self, email: &str) -> String {
        let r = reqwest::Client::new()
            .post(self.url("/api/auth/sign-up/email"))
            .json(&json!({ "name": "Test User", "email": email, "password": "correct-horse-battery" }))
            .send()
            .await
            .expect("sign up");
        assert_eq!(r.status(), StatusCode::OK);
        session_cookie_of(&r).expect("cookie")
    }

    /// Mints an API key for the signed-in cookie; returns `(raw key, key id)`.
    pub async fn mint_key(&self, cookie: &str) -> (String, String) {
        let minted: Value = reqwest::Client::new()
            .post(self.url("/api/v1/keys"))
            .header("cookie", format!("auth.session_token={cookie}"))
            .json(&json!({ "label": "test" }))
            .send()
            .await
            .expect("mint")
            .json()
            .await
            .expect("json");
        let field = |k: &str| minted[k].as_str().expect("key field").to_owned();
        (field("rawKey"), field("id"))
    }

    /// SIGKILL: no chance to flush anything.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then wait for a graceful exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let _ = std::process::Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        self.child.wait().expect("wait")
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
