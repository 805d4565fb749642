//! Waitlist (decisions.md §9), health, the contract's error rules for unknown routes, and the
//! relational store's migrations (the one runner's checksums, the upgrade of a database from
//! before them).

use crate::common;
use crate::on_both_engines;

use common::{parts, set_cookie_header, Body, TestApp};
use reqwest::{Method, StatusCode};
use serde_json::json;
use sqlx::{Connection, Row};
use streamwatch::config::DatabaseUrl;
use streamwatch::db::Db;

async fn waitlist_stores_each_address_once(app: TestApp) {
    for email in ["fan@example.com", "FAN@example.com ", "fan@example.com"] {
        let r = app
            .post("/api/waitlist", None, json!({ "email": email }))
            .await;
        assert!(
            set_cookie_header(r.headers()).is_none(),
            "no credential issued"
        );
        assert_eq!(r.status(), StatusCode::NO_CONTENT);
        assert_eq!(r.text().await.expect("body"), "");
    }
    let bad = (
        StatusCode::BAD_REQUEST,
        json!({ "errors": { "email": "Invalid email" } }),
    );
    for body in [
        json!({}),
        json!({ "email": "nope" }),
        json!({ "email": 5 }),
        json!({ "email": "" }),
    ] {
        assert_eq!(
            parts(app.post("/api/waitlist", None, body.clone()).await).await,
            bad,
            "{body}"
        );
    }
    let r = app
        .send(
            Method::POST,
            "/api/waitlist",
            None,
            Some(Body::Raw("{oops".into())),
        )
        .await;
    assert_eq!(parts(r).await, bad);
    let n: i64 = sqlx::query("SELECT COUNT(*) FROM waitlist")
        .fetch_one(&app.state.db.pool)
        .await
        .expect("count")
        .get(0);
    assert_eq!(n, 1);
}

async fn unknown_routes_and_methods_are_json_404s(app: TestApp) {
    let nf = (StatusCode::NOT_FOUND, json!({ "error": "Not Found" }));
    for (m, p) in [
        (Method::GET, "/api/v1/nope"),
        (Method::GET, "/api/nope"),
        (Method::POST, "/api/v2/streams"),
        (Method::DELETE, "/api/v1/streams"),
        (Method::PUT, "/api/v1/keys"),
        (Method::GET, "/api/auth/sign-up/email"),
    ] {
        assert_eq!(
            parts(app.send(m.clone(), p, None, None).await).await,
            nf,
            "{m} {p}"
        );
    }
}

async fn healthz_answers(app: TestApp) {
    assert_eq!(
        parts(app.get("/healthz", None).await).await,
        (StatusCode::OK, json!({ "status": "ok" }))
    );
}

on_both_engines!(
    waitlist_stores_each_address_once,
    unknown_routes_and_methods_are_json_404s,
    healthz_answers
);

#[tokio::test]
async fn serves_the_sdk_bundles_at_their_cdn_paths() {
    let app = common::spawn_app(common::Engine::Sqlite).await;
    let file = |rel: &str| {
        std::fs::read_to_string(format!("{}/{rel}", env!("CARGO_MANIFEST_DIR"))).expect("bundle")
    };
    let current = file("sdk/dist/index.js");
    // 0.1.0 is served byte-identical to its release forever; 0.2.0 and latest are dist/.
    for (path, cache, body) in [
        (
            "/sdk/@service/player-sdk@0.1.0/dist/index.js",
            "public, max-age=31536000, immutable",
            file("sdk/releases/0.1.0/index.js"),
        ),
        (
            "/sdk/@service/player-sdk@0.2.0/dist/index.js",
            "public, max-age=31536000, immutable",
            current.clone(),
        ),
        (
            "/sdk/@service/player-sdk@latest/dist/index.js",
            "public, max-age=300",
            current.clone(),
        ),
    ] {
        let r = app.get(path, None).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(
            r.headers()["content-type"],
            "text/javascript; charset=utf-8"
        );
        assert_eq!(r.headers()["cache-control"], cache);
        assert_eq!(r.headers()["access-control-allow-origin"], "*");
        assert_eq!(r.text().await.expect("body"), body, "{path}");
    }
    assert_ne!(file("sdk/releases/0.1.0/index.js"), current);
    assert_eq!(
        app.get("/sdk/@service/player-sdk@9.9.9/dist/index.js", None)
            .await
            .status(),
        StatusCode::NOT_FOUND
    );
}

/// Every HTML page carries a Content-Security-Policy that allows scripts from this origin
/// only (no `unsafe-inline`), and the pages hold no inline script, handler or style for it to
/// allow. The demo player loads hls.js from the binary and no script named by its query.
#[tokio::test]
async fn html_pages_send_a_strict_csp_and_hold_no_inline_script() {
    let app = common::spawn_app(common::Engine::Sqlite).await;
    for path in [
        "/",
        "/demo/player.html",
        "/demo/player.html?src=https://x.example/a.m3u8&key=svc_x&hls=data:text/javascript,alert(1)",
    ] {
        let r = app.get(path, None).await;
        assert_eq!(r.status(), StatusCode::OK, "{path}");
        assert!(r.headers()["content-type"]
            .to_str()
            .expect("ascii")
            .starts_with("text/html"));
        let csp = r.headers()["content-security-policy"]
            .to_str()
            .expect("ascii")
            .to_owned();
        assert!(csp.contains("script-src 'self';"), "{path}: {csp}");
        assert!(!csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"), "{csp}");
        assert!(csp.contains("object-src 'none'") && csp.contains("base-uri 'none'"));
        assert_eq!(r.headers()["x-content-type-options"], "nosniff");
        let html = r.text().await.expect("body");
        // Every <script> names a same-origin file; no inline handlers or styles.
        for tag in html.split("<script").skip(1) {
            let open = &tag[..tag.find('>').expect("tag end")];
            assert!(open.contains("src=\"/"), "{path}: inline or foreign script <script{open}>");
        }
        let lower = html.to_ascii_lowercase();
        for needle in [" onload=", " onclick=", " onerror=", " onsubmit=", " style=", "<style", "javascript:"] {
            assert!(!lower.contains(needle), "{path}: {needle}");
        }
        assert!(!lower.contains("cdn.jsdelivr") && !lower.contains("unpkg"), "{path}");
    }
    // The demo's script imports two fixed same-origin modules and nothing from the query.
    let js = app.get("/assets/demo-player.js", None).await;
    assert_eq!(
        js.headers()["content-type"],
        "text/javascript; charset=utf-8"
    );
    let js = js.text().await.expect("body");
    assert!(js.contains(&format!(
        "from '{}'",
        streamwatch::http::assets::HLS_JS_PATH
    )));
    assert!(!js.contains("import(") && !js.contains("createElement('script')"));
    assert!(!js.contains("q.get('hls')"));
    // hls.js comes from the binary, byte for byte the pinned npm build (web/dist).
    let hls = app.get(streamwatch::http::assets::HLS_JS_PATH, None).await;
    assert_eq!(hls.status(), StatusCode::OK);
    assert_eq!(
        hls.headers()["cache-control"],
        "public, max-age=31536000, immutable"
    );
    let served = hls.bytes().await.expect("body");
    let built = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/web/dist/vendor/hls.js@1.7.4/hls.light.min.mjs"
    ))
    .expect("web/dist");
    assert_eq!(&served[..], &built[..]);
    // JSON answers are not pages: no CSP needed, but nosniff everywhere.
    let r = app.get("/api/v1/nope", None).await;
    assert_eq!(r.headers()["x-content-type-options"], "nosniff");
}

#[test]
fn served_sdk_version_is_the_package_version() {
    let pkg: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/sdk/package.json"))
            .expect("package.json"),
    )
    .expect("json");
    assert_eq!(pkg["version"], streamwatch::http::assets::SDK_VERSION);
}

/// A background task that dies (here: panics) stops the server, and `run` returns the cause,
/// so `streamwatch serve` exits non-zero and a supervisor restarts it (decisions.md §11).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dying_background_task_stops_the_server_with_its_cause() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = common::test_config(common::Engine::Sqlite, dir.path()).await;
    let mut server = streamwatch::startup::Server::build(config)
        .await
        .expect("builds");
    let base = format!("http://{}", server.local_addr());
    let (go, trigger) = tokio::sync::oneshot::channel::<()>();
    server.spawn_service("test task", async move {
        let _ = trigger.await;
        panic!("injected failure");
    });
    let running = tokio::spawn(server.run(std::future::pending()));
    // Serving normally while the task lives.
    let r = reqwest::get(format!("{base}/healthz")).await.expect("get");
    assert_eq!(r.status(), StatusCode::OK);
    go.send(()).expect("trigger");
    let outcome = tokio::time::timeout(std::time::Duration::from_secs(30), running)
        .await
        .expect("the server stops")
        .expect("joins");
    let err = outcome.expect_err("a death is an error");
    assert_eq!(
        err.to_string(),
        "background task test task died: panicked: injected failure"
    );
    // And it no longer accepts connections.
    assert!(reqwest::get(format!("{base}/healthz")).await.is_err());
}

/// A second `streamwatch serve` on a data dir already in use refuses to start, with one line
/// naming STREAMWATCH_DATA_DIR (decisions.md §15); once the first stops, the dir is free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_server_on_one_data_dir_refuses_to_start() {
    let dir = tempfile::tempdir().expect("dir");
    let mut first = common::Process::start(dir.path(), &[]).await;
    let second = std::process::Command::new(env!("CARGO_BIN_EXE_streamwatch"))
        .args(["serve", "--listen", "127.0.0.1:0", "--metrics-listen", ""])
        .env_clear()
        .env("STREAMWATCH_DATA_DIR", dir.path())
        .output()
        .expect("run a second server");
    assert_eq!(second.status.code(), Some(1));
    let stderr = String::from_utf8(second.stderr).expect("utf-8");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {stderr}");
    assert!(
        lines[0].starts_with(&format!(
            "error: another streamwatch process is using STREAMWATCH_DATA_DIR {} (",
            dir.path().display()
        )) && lines[0].contains(&format!("by pid {}", first.child.id())),
        "{stderr}"
    );
    // The first one never noticed.
    let r = reqwest::get(first.url("/readyz")).await.expect("readyz");
    assert_eq!(r.status(), StatusCode::OK);
    assert!(first.terminate().success());
    let mut again = common::Process::start(dir.path(), &[]).await;
    assert!(again.terminate().success());
}

/// A relational database as the runner before checksums left it: its table without a
/// `checksum` column, every file of `migrations/<engine>/` applied and recorded under the
/// names it gave them, and a user row that must survive the upgrade.
async fn database_from_before_checksums(url: &DatabaseUrl) {
    sqlx::any::install_default_drivers();
    let mut conn = sqlx::AnyConnection::connect(match url {
        DatabaseUrl::Postgres(u) | DatabaseUrl::Sqlite(u) => u,
    })
    .await
    .expect("connect");
    let set = match url {
        DatabaseUrl::Postgres(_) => &migrate::POSTGRES,
        DatabaseUrl::Sqlite(_) => &migrate::SQLITE,
    };
    sqlx::query(
        "CREATE TABLE schema_migrations (version BIGINT PRIMARY KEY, name TEXT NOT NULL, \
         applied_at BIGINT NOT NULL)",
    )
    .execute(&mut conn)
    .await
    .expect("old table");
    for m in set.migrations {
        for statement in m.statements() {
            sqlx::query(&statement)
                .execute(&mut conn)
                .await
                .expect(m.name);
        }
        // The old runner's names were words ("core", "probe timeline").
        sqlx::query("INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, 1)")
            .bind(m.version)
            .bind(&m.name[5..])
            .execute(&mut conn)
            .await
            .expect("old row");
    }
    sqlx::query(
        "INSERT INTO users (id, email, name, password_hash, created_at) \
         VALUES ('u1', 'kept@example.com', 'Kept', 'x', 1)",
    )
    .execute(&mut conn)
    .await
    .expect("a user");
}

async fn recorded_checksums(db: &Db) -> Vec<(i64, Option<String>)> {
    sqlx::query_as("SELECT version, checksum FROM schema_migrations ORDER BY version")
        .fetch_all(&db.pool)
        .await
        .expect("applied")
}

/// A database migrated by the runner before checksums upgrades without applying anything
/// again (its data kept) and gets every file's SHA-256; a file changed after it was applied
/// then refuses the start with one line naming it, also where an unreachable PostgreSQL
/// would be retried.
async fn migrations_upgrade_a_database_from_before_checksums_then_refuse_a_changed_file(
    engine: common::Engine,
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = match engine {
        common::Engine::Postgres => DatabaseUrl::Postgres(common::fresh_pg_database().await),
        common::Engine::Sqlite => DatabaseUrl::Sqlite(format!(
            "sqlite://{}?mode=rwc",
            dir.path().join("old.db").display()
        )),
    };
    database_from_before_checksums(&url).await;
    let set = match engine {
        common::Engine::Postgres => &migrate::POSTGRES,
        common::Engine::Sqlite => &migrate::SQLITE,
    };
    let expected: Vec<(i64, Option<String>)> = set
        .migrations
        .iter()
        .map(|m| (m.version, Some(m.checksum())))
        .collect();
    for _ in 0..2 {
        let db = Db::connect(Some(&url), dir.path()).await.expect("upgrades");
        assert_eq!(recorded_checksums(&db).await, expected);
        let (email,): (String,) = sqlx::query_as("SELECT email FROM users WHERE id = 'u1'")
            .fetch_one(&db.pool)
            .await
            .expect("the user is kept");
        assert_eq!(email, "kept@example.com");
        db.pool.close().await;
    }

    // The second file as if it had been edited since it was applied.
    let db = Db::connect(Some(&url), dir.path()).await.expect("opens");
    sqlx::query("UPDATE schema_migrations SET checksum = $1 WHERE version = 2")
        .bind("0".repeat(64))
        .execute(&db.pool)
        .await
        .expect("tamper");
    db.pool.close().await;
    let line = format!(
        "migration {} of migrations/{}/ was changed after it was applied (SHA-256 {}…, \
         recorded 000000000000…): restore the file and make the change a new migration",
        set.migrations[1].name,
        set.engine,
        &set.migrations[1].checksum()[..12]
    );
    let e = Db::connect(Some(&url), dir.path())
        .await
        .expect_err("refused");
    assert_eq!(
        e.changed_migration().map(ToString::to_string),
        Some(line.clone())
    );
    let e = Db::open_for_service(Some(&url), dir.path())
        .await
        .expect_err("refused at start, not retried");
    assert_eq!(e.changed_migration().map(ToString::to_string), Some(line));
}

#[tokio::test]
async fn relational_migrations_upgrade_from_before_checksums_sqlite() {
    migrations_upgrade_a_database_from_before_checksums_then_refuse_a_changed_file(
        common::Engine::Sqlite,
    )
    .await;
}

#[tokio::test]
async fn relational_migrations_upgrade_from_before_checksums_postgres() {
    migrations_upgrade_a_database_from_before_checksums_then_refuse_a_changed_file(
        common::Engine::Postgres,
    )
    .await;
}

/// Instances starting at once on one fresh PostgreSQL database: one applies, the others
/// wait for its lock and find everything applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_starting_at_once_migrate_postgres_once() {
    let url = DatabaseUrl::Postgres(common::fresh_pg_database().await);
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b, c) = tokio::join!(
        Db::connect(Some(&url), dir.path()),
        Db::connect(Some(&url), dir.path()),
        Db::connect(Some(&url), dir.path())
    );
    let db = a.expect("a");
    b.expect("b");
    c.expect("c");
    let expected: Vec<(i64, Option<String>)> = migrate::POSTGRES
        .migrations
        .iter()
        .map(|m| (m.version, Some(m.checksum())))
        .collect();
    assert_eq!(recorded_checksums(&db).await, expected);
}

/// A ClickHouse telemetry store whose applied migration changed: its supervisor would retry
/// a connection for ever, but the changed file stops the server with the runner's line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_clickhouse_migration_stops_the_server_with_its_line() {
    let url = std::env::var("CLICKHOUSE_URL").unwrap_or_else(|_| "http://127.0.0.1:8123".into());
    let database = common::test_db_name();
    let ch = ingest::ClickHouseConfig::new(url.clone(), database.clone());
    let sink = ingest::ClickHouseSink::connect(&ch)
        .await
        .expect("migrated");
    sink.client()
        .query(
            "INSERT INTO schema_migrations (version, name, applied_at, checksum) \
             VALUES (1, '0001_telemetry_events', now(), ?)",
        )
        .bind("f".repeat(64))
        .execute()
        .await
        .expect("tamper");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = common::test_config(common::Engine::Sqlite, dir.path()).await;
    config.clickhouse_url = Some(url);
    config.clickhouse_database = database.clone();
    let server = streamwatch::startup::Server::build(config)
        .await
        .expect("builds: the telemetry store connects in the background");
    let outcome = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        server.run(std::future::pending()),
    )
    .await
    .expect("the server stops");
    let err = outcome.expect_err("a refusal is an error");
    assert_eq!(
        err.to_string(),
        format!(
            "background task telemetry store migrations died: migration 0001_telemetry_events \
             of migrations/clickhouse/ was changed after it was applied (SHA-256 {}…, recorded \
             ffffffffffff…): restore the file and make the change a new migration",
            &migrate::CLICKHOUSE.migrations[0].checksum()[..12]
        )
    );
    let _ = sink
        .client()
        .query(&format!("DROP DATABASE IF EXISTS {database}"))
        .execute()
        .await;
}
