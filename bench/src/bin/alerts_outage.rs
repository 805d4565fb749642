//! Alerts benchmark (issue 13): 10,000 streams on one origin that goes down and recovers.
//!
//! The bench runs the real server in-process (`Server::build`, prober and alert sender on),
//! seeds the streams straight into a fresh store (all on one loopback origin host, as if
//! registered earlier: the per-user stream cap is 1,000), and through the HTTP API signs up one
//! user, creates four channels (webhook, slack, discord, pagerduty) that point at receivers in
//! this process, and one stream rule over every stream (`streamId: null`). Then:
//!
//! 1. baseline: every stream gets at least one healthy probe;
//! 2. outage: the origin answers 503 until every stream has an open incident and every
//!    channel has received its firing notifications;
//! 3. recovery: the origin serves again until every incident is resolved and notified.
//!
//! Per channel and event it prints the messages received, the incidents they cover (each must
//! be covered exactly once; webhook repeats are dropped by `webhook-id` as a receiver would), the
//! largest message, and the latency from each stream's `failAfter`-th not-playable probe (its
//! `created_at` in the probes table) — or its `recoverAfter`-th playable one — to the arrival of
//! the message listing its incident: p50, p99, max, against `groupWindow + 30 s`.
//!
//! Chat messages (slack, discord) name at most 10 streams; the bench maps each message to the
//! delivery that lists its named incidents (`alert_delivery_incidents`) and checks the count in
//! its text against that delivery.
//!
//! ```text
//! CARGO_TARGET_DIR=../target-bench cargo run --release -p bench --bin alerts_outage -- \
//!     --engine sqlite --engine postgres
//! ```
//!
//! The per-host probe rate (`STREAMWATCH_PROBE_HOST_RATE`, default 50/s) is raised to
//! `--host-rate` (default 2,000/s): at the default, 10,000 streams on one host take 200 s per
//! round, so the outage would take ten minutes to be seen, not because of the alerts code.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;
use clap::Parser;
use serde_json::{json, Value};
use sqlx::{Connection, Row};
use streamwatch::config::{CidrList, Config, DatabaseUrl, OptionalAddr, RateLimit};
use streamwatch::db::Db;
use streamwatch::startup::Server;
use streamwatch::time::now_ms;

#[derive(Parser)]
struct Args {
    /// Engines to measure: sqlite, postgres.
    #[arg(long = "engine", default_values = ["sqlite"])]
    engines: Vec<String>,
    /// Number of streams, all on one origin host.
    #[arg(long, default_value_t = 10_000)]
    streams: usize,
    /// Probe interval in seconds (`STREAMWATCH_PROBE_INTERVAL`).
    #[arg(long, default_value_t = 30)]
    interval_s: u64,
    /// Requests per second the prober may send the origin host (`STREAMWATCH_PROBE_HOST_RATE`).
    #[arg(long, default_value_t = 2000)]
    host_rate: u32,
    /// `groupWindow` of every channel.
    #[arg(long, default_value = "30s")]
    group_window: String,
    #[arg(long, default_value_t = 3)]
    fail_after: i64,
    #[arg(long, default_value_t = 2)]
    recover_after: i64,
    /// Milliseconds the pagerduty receiver takes to answer each event (0: at once), to see
    /// how a PagerDuty group of up to 1,000 sequential requests fares against a real endpoint.
    #[arg(long, default_value_t = 0)]
    pd_latency_ms: u64,
    /// Seconds to keep listening after the last expected message (late repeats).
    #[arg(long, default_value_t = 35)]
    settle_s: u64,
    /// PostgreSQL server on which a fresh database is created (and dropped after the run).
    #[arg(
        long,
        env = "TEST_DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/postgres"
    )]
    pg_admin_url: String,
}

/// The four channel types, in the order of every per-channel array.
const KINDS: [&str; 4] = ["webhook", "slack", "discord", "pagerduty"];
const FIRING: usize = 0;
const RESOLVED: usize = 1;
const EVENTS: [&str; 2] = ["firing", "resolved"];

/// One HTTP request a receiver got.
struct Msg {
    kind: usize,
    at: i64,
    webhook_id: Option<String>,
    webhook_ts: Option<String>,
    webhook_sig: Option<String>,
    body: String,
}

#[derive(Default)]
struct Received {
    msgs: Vec<Msg>,
    /// Incidents announced so far (raw, repeats included), per kind and event.
    counts: [[usize; 2]; 4],
}

type Receivers = Arc<Mutex<Received>>;

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    println!(
        "machine: {} cores, {} | {} streams on one origin host, probe interval {} s, host rate {}/s, \
         groupWindow {}, failAfter {}, recoverAfter {}, pagerduty answers after {} ms",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        bench::mem_total(),
        args.streams,
        args.interval_s,
        args.host_rate,
        args.group_window,
        args.fail_after,
        args.recover_after,
        args.pd_latency_ms
    );
    for engine in &args.engines {
        run(engine, &args).await?;
    }
    Ok(())
}

async fn run(engine: &str, args: &Args) -> Result<()> {
    let group_window_ms = parse_window(&args.group_window)?;
    let bound_ms = group_window_ms + 30_000;
    let dir = tempfile::tempdir()?;
    let mut config = Config::defaults(dir.path());
    config.listen = "127.0.0.1:0".parse()?;
    config.auth_rate_limit = RateLimit::Off;
    config.allow_private = CidrList(vec!["127.0.0.0/8".parse()?]);
    config.alerts_allow_private = CidrList(vec!["127.0.0.0/8".parse()?]);
    config.metrics_listen = OptionalAddr(None);
    config.probe_interval = Duration::from_secs(args.interval_s);
    config.probe_host_rate = args.host_rate;
    let mut pg_db = None;
    if engine == "postgres" {
        let url = bench::fresh_pg(&args.pg_admin_url, "sw_bench_alerts").await?;
        println!("[postgres] database {url}");
        pg_db = url.rsplit_once('/').map(|(_, name)| name.to_owned());
        config.database_url = Some(DatabaseUrl::Postgres(url));
    } else if engine != "sqlite" {
        bail!("unknown engine {engine}");
    }

    let down = Arc::new(AtomicBool::new(false));
    let origin = start_origin(Arc::clone(&down)).await?;
    let received: Receivers = Arc::default();
    let receiver = start_receivers(
        Arc::clone(&received),
        Duration::from_millis(args.pd_latency_ms),
    )
    .await?;

    let db = Db::connect(config.database_url.as_ref(), &config.data_dir).await?;
    seed(&db, args.streams, origin, args.interval_s).await?;
    db.pool.close().await;

    let server = Server::build(config).await?;
    let db = server.state.db.clone();
    let base = format!("http://{}", server.local_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let handle = tokio::spawn(server.run(async move {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::new();
    let cookie = sign_up(&client, &base).await?;
    let mut channel_ids = Vec::new();
    let mut webhook_secret = String::new();
    for kind in KINDS {
        let mut body = json!({
            "name": format!("bench {kind}"),
            "type": kind,
            "url": format!("http://127.0.0.1:{receiver}/r/{kind}"),
            "groupWindow": args.group_window,
        });
        if kind == "pagerduty" {
            body["routingKey"] = json!("R0UTINGKEYBENCH0000000000000000");
        }
        let created = post_json(&client, &base, "/api/v1/alerts/channels", &cookie, &body).await?;
        if kind == "webhook" {
            webhook_secret = created["secret"].as_str().context("secret")?.to_owned();
        }
        channel_ids.push(created["id"].as_str().context("channel id")?.to_owned());
    }
    let rule = post_json(
        &client,
        &base,
        "/api/v1/alerts/rules",
        &cookie,
        &json!({
            "name": "origin down",
            "kind": "stream",
            "streamId": null,
            "failAfter": args.fail_after,
            "recoverAfter": args.recover_after,
            "channelIds": channel_ids,
        }),
    )
    .await?;
    let rule_id = rule["id"].as_str().context("rule id")?.to_owned();
    let n = args.streams as i64;
    let interval_ms = args.interval_s as i64 * 1000;

    // 1. Baseline: every stream probed healthy at least once.
    let t0 = now_ms();
    wait_for(
        "baseline: streams probed healthy",
        Duration::from_millis(2 * interval_ms as u64 + 30_000),
        || async {
            let healthy = count(
                &db,
                "SELECT COUNT(*) FROM streams WHERE last_healthy_at IS NOT NULL",
            )
            .await?;
            Ok((healthy >= n, format!("{healthy}/{n} healthy")))
        },
    )
    .await?;
    println!(
        "[{engine}] baseline after {:.1} s",
        (now_ms() - t0) as f64 / 1000.0
    );

    // 2. Outage.
    let down_at = now_ms();
    down.store(true, Ordering::SeqCst);
    wait_for(
        "outage: incidents open",
        Duration::from_millis(6 * interval_ms as u64 + 60_000),
        || async {
            let firing = count(
                &db,
                "SELECT COUNT(*) FROM alert_incidents WHERE state = 'firing'",
            )
            .await?;
            Ok((firing >= n, format!("{firing}/{n} firing")))
        },
    )
    .await?;
    let all_fired_at = now_ms();
    println!(
        "[{engine}] every incident open {:.1} s after the origin went down",
        (all_fired_at - down_at) as f64 / 1000.0
    );
    wait_notified(&received, FIRING, args.streams, bound_ms + 60_000).await;
    println!(
        "[{engine}] firing notifications received {:.1} s after the last incident opened",
        (now_ms() - all_fired_at) as f64 / 1000.0
    );

    // 3. Recovery.
    let up_at = now_ms();
    down.store(false, Ordering::SeqCst);
    wait_for(
        "recovery: incidents resolved",
        Duration::from_millis(4 * interval_ms as u64 + 60_000),
        || async {
            let resolved = count(
                &db,
                "SELECT COUNT(*) FROM alert_incidents WHERE state = 'resolved'",
            )
            .await?;
            Ok((resolved >= n, format!("{resolved}/{n} resolved")))
        },
    )
    .await?;
    let all_resolved_at = now_ms();
    println!(
        "[{engine}] every incident resolved {:.1} s after the origin recovered",
        (all_resolved_at - up_at) as f64 / 1000.0
    );
    wait_notified(&received, RESOLVED, args.streams, bound_ms + 60_000).await;
    println!(
        "[{engine}] resolved notifications received {:.1} s after the last incident resolved; \
         listening {} s more for repeats",
        (now_ms() - all_resolved_at) as f64 / 1000.0,
        args.settle_s
    );
    tokio::time::sleep(Duration::from_secs(args.settle_s)).await;

    let report = analyse(
        &db,
        &received,
        &Setup {
            rule_id: &rule_id,
            channel_ids: &channel_ids,
            webhook_secret: &webhook_secret,
            fail_after: args.fail_after,
            recover_after: args.recover_after,
            since: t0 - interval_ms,
            bound_ms,
        },
    )
    .await?;
    println!("{report}");
    let probes = count(&db, "SELECT COUNT(*) FROM probes").await?;
    println!(
        "[{engine}] probes recorded: {probes} (outage {:.1} s, recovery to last resolve {:.1} s)",
        (up_at - down_at) as f64 / 1000.0,
        (all_resolved_at - up_at) as f64 / 1000.0
    );

    let _ = stop.send(());
    let _ = handle.await;
    if let Some(name) = pg_db {
        let mut admin = sqlx::PgConnection::connect(&args.pg_admin_url).await?;
        sqlx::query(&format!("DROP DATABASE {name} WITH (FORCE)"))
            .execute(&mut admin)
            .await?;
        println!("[postgres] dropped {name}");
    }
    Ok(())
}

fn parse_window(s: &str) -> Result<i64> {
    let (num, unit) = s.split_at(s.len().saturating_sub(1));
    let n: i64 = num.parse().context("groupWindow like 30s")?;
    Ok(n * match unit {
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => bail!("groupWindow like 30s, 1m"),
    })
}

/// The origin: `/s/{i}` answers a live media playlist (media sequence advancing every 6 s),
/// or 503 while `down`.
async fn start_origin(down: Arc<AtomicBool>) -> Result<u16> {
    async fn playlist(
        Path(_i): Path<u32>,
        State(down): State<Arc<AtomicBool>>,
    ) -> axum::response::Response {
        if down.load(Ordering::SeqCst) {
            return StatusCode::SERVICE_UNAVAILABLE.into_response();
        }
        let seq = now_ms() / 6000;
        let body = format!(
            "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:6\n#EXT-X-MEDIA-SEQUENCE:{seq}\n\
             #EXTINF:6.0,\nseg{seq}.ts\n#EXTINF:6.0,\nseg{}.ts\n#EXTINF:6.0,\nseg{}.ts\n",
            seq + 1,
            seq + 2
        );
        (
            [(header::CONTENT_TYPE, "application/vnd.apple.mpegurl")],
            body,
        )
            .into_response()
    }
    let app = Router::new()
        .route("/s/{i}", get(playlist))
        .with_state(down);
    serve(app).await
}

/// The receivers: `/r/{kind}` records every request with its arrival time.
async fn start_receivers(received: Receivers, pd_latency: Duration) -> Result<u16> {
    async fn receive(
        Path(kind): Path<String>,
        State((received, pd_latency)): State<(Receivers, Duration)>,
        headers: HeaderMap,
        body: String,
    ) -> axum::response::Response {
        let at = now_ms();
        let Some(k) = KINDS.iter().position(|x| *x == kind) else {
            return StatusCode::NOT_FOUND.into_response();
        };
        let h = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let announced = serde_json::from_str::<Value>(&body)
            .ok()
            .and_then(|v| announced(k, &v));
        {
            let mut r = lock(&received);
            if let Some((event, count)) = announced {
                r.counts[k][event] += count;
            }
            r.msgs.push(Msg {
                kind: k,
                at,
                webhook_id: h("webhook-id"),
                webhook_ts: h("webhook-timestamp"),
                webhook_sig: h("webhook-signature"),
                body,
            });
        }
        if k == 3 && !pd_latency.is_zero() {
            tokio::time::sleep(pd_latency).await;
        }
        match k {
            1 => "ok".into_response(),
            2 => StatusCode::NO_CONTENT.into_response(),
            3 => (
                StatusCode::ACCEPTED,
                axum::Json(json!({ "status": "success", "message": "Event processed" })),
            )
                .into_response(),
            _ => StatusCode::OK.into_response(),
        }
    }
    let app = Router::new()
        .route("/r/{kind}", post(receive))
        .layer(DefaultBodyLimit::max(64 << 20))
        .with_state((received, pd_latency));
    serve(app).await
}

async fn serve(app: Router) -> Result<u16> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            eprintln!("local server stopped: {e}");
        }
    });
    Ok(port)
}

/// The event (firing / resolved) and number of incidents a message announces.
fn announced(kind: usize, v: &Value) -> Option<(usize, usize)> {
    match KINDS[kind] {
        "webhook" => {
            let event = match v["type"].as_str()? {
                "incident.firing" => FIRING,
                "incident.resolved" => RESOLVED,
                _ => return None,
            };
            Some((event, v["data"]["incidents"].as_array()?.len()))
        }
        "slack" | "discord" => chat_head(chat_text(kind, v)?),
        _ => match v["event_action"].as_str()? {
            "trigger" => Some((FIRING, 1)),
            "resolve" => Some((RESOLVED, 1)),
            _ => None,
        },
    }
}

fn chat_text(kind: usize, v: &Value) -> Option<&str> {
    v[if KINDS[kind] == "slack" {
        "text"
    } else {
        "content"
    }]
    .as_str()
}

/// `streamwatch: 1000 incidents firing` → (firing, 1000).
fn chat_head(text: &str) -> Option<(usize, usize)> {
    let head: Vec<&str> = text.lines().next()?.split_whitespace().collect();
    let n = head.get(1)?.parse().ok()?;
    let event = match *head.get(3)? {
        "firing" => FIRING,
        "resolved" => RESOLVED,
        _ => return None,
    };
    Some((event, n))
}

/// Streams `s<i>` on the origin, due spread over the first interval.
async fn seed(db: &Db, n: usize, port: u16, interval_s: u64) -> Result<()> {
    let now = now_ms();
    let spread = interval_s as i64 * 1000;
    let mut tx = db.pool.begin().await?;
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        let mut sql = String::from(
            "INSERT INTO streams (id, source_url, name, target_region, created_at, agent_state, \
             status, last_action, next_probe_at) VALUES ",
        );
        for (j, i) in chunk.iter().enumerate() {
            if j > 0 {
                sql.push(',');
            }
            let due = now + 2000 + spread * *i as i64 / n as i64;
            sql.push_str(&format!(
                "('s{i}', 'http://127.0.0.1:{port}/s/{i}', 's{i}', 'auto', {now}, 'healthy', \
                 'watching', 'registered', {due})"
            ));
        }
        sqlx::query(&sql).execute(&mut *tx).await?;
    }
    tx.commit().await?;
    Ok(())
}

async fn sign_up(client: &reqwest::Client, base: &str) -> Result<String> {
    let r = client
        .post(format!("{base}/api/auth/sign-up/email"))
        .json(&json!({ "name": "bench", "email": format!("bench{}@example.com", now_ms()), "password": "bench-password" }))
        .send()
        .await?;
    let cookie = r
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .context("no cookie")?
        .to_owned();
    Ok(cookie)
}

async fn post_json(
    client: &reqwest::Client,
    base: &str,
    path: &str,
    cookie: &str,
    body: &Value,
) -> Result<Value> {
    let r = client
        .post(format!("{base}{path}"))
        .header("cookie", cookie)
        .json(body)
        .send()
        .await?;
    let status = r.status();
    let v: Value = r.json().await?;
    anyhow::ensure!(status.is_success(), "POST {path}: {status} {v}");
    Ok(v)
}

async fn count(db: &Db, sql: &str) -> Result<i64> {
    Ok(sqlx::query(sql).fetch_one(&db.pool).await?.get(0))
}

/// Polls `check` every 500 ms until it is done, printing its progress every 10 s.
async fn wait_for<F, Fut>(what: &str, limit: Duration, mut check: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(bool, String)>>,
{
    let start = Instant::now();
    let mut last_print = Instant::now();
    loop {
        let (done, progress) = check().await?;
        if done {
            return Ok(());
        }
        if start.elapsed() > limit {
            bail!("{what}: not done after {} s ({progress})", limit.as_secs());
        }
        if last_print.elapsed() >= Duration::from_secs(10) {
            println!("  {what}: {progress}");
            last_print = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits until every channel announced `n` incidents of `event`, or `limit_ms`.
async fn wait_notified(received: &Receivers, event: usize, n: usize, limit_ms: i64) {
    let deadline = now_ms() + limit_ms;
    let mut last_print = Instant::now();
    loop {
        let counts: Vec<usize> = lock(received).counts.iter().map(|c| c[event]).collect();
        if counts.iter().all(|c| *c >= n) {
            return;
        }
        if now_ms() > deadline {
            println!(
                "  {} notifications: gave up waiting, announced {counts:?} of {n}",
                EVENTS[event]
            );
            return;
        }
        if last_print.elapsed() >= Duration::from_secs(10) {
            println!("  {} notifications: {counts:?} of {n}", EVENTS[event]);
            last_print = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Sizes of a channel's deliveries of one event, their count by status, their attempts.
type DeliveryStats = (Vec<i64>, HashMap<String, usize>, i64);

struct Setup<'a> {
    rule_id: &'a str,
    channel_ids: &'a [String],
    webhook_secret: &'a str,
    fail_after: i64,
    recover_after: i64,
    since: i64,
    bound_ms: i64,
}

/// What one channel got of one event.
#[derive(Default)]
struct Figures {
    /// HTTP requests received.
    requests: usize,
    /// Requests a receiver drops as repeats (same `webhook-id`, or same PagerDuty
    /// `dedup_key` and action).
    repeats: usize,
    /// Incidents listed by more than one distinct message.
    duplicates: usize,
    /// Incident → arrival of the first message listing it.
    first: HashMap<String, i64>,
    /// Largest number of incidents in one message (PagerDuty: in one delivery).
    max_incidents: usize,
    max_body: usize,
    /// Messages whose text count or signature did not check out.
    bad: Vec<String>,
}

async fn analyse(db: &Db, received: &Receivers, s: &Setup<'_>) -> Result<String> {
    // Incidents of the rule and the probes that opened and resolved them.
    let rows = sqlx::query(
        "SELECT id, stream_id, fired_at, resolved_at FROM alert_incidents WHERE rule_id = $1",
    )
    .bind(s.rule_id)
    .fetch_all(&db.pool)
    .await?;
    let mut incidents: HashMap<String, (String, i64, Option<i64>)> = HashMap::new();
    let mut by_stream: HashMap<String, String> = HashMap::new();
    for r in rows {
        let id: String = r.get("id");
        let stream: String = r.get("stream_id");
        if by_stream.insert(stream.clone(), id.clone()).is_some() {
            println!("  note: stream {stream} has more than one incident");
        }
        incidents.insert(id, (stream, r.get("fired_at"), r.get("resolved_at")));
    }
    let probe_rows = sqlx::query(
        "SELECT stream_id, created_at, playable FROM probes WHERE created_at >= $1 \
         ORDER BY stream_id, created_at",
    )
    .bind(s.since)
    .fetch_all(&db.pool)
    .await?;
    // Stream → (created_at of the failAfter-th not-playable probe in a row, of the
    // recoverAfter-th playable one after it).
    let mut refs: HashMap<String, (Option<i64>, Option<i64>)> = HashMap::new();
    let mut streaks: HashMap<String, (i64, i64)> = HashMap::new();
    for r in &probe_rows {
        let stream: String = r.get("stream_id");
        let at: i64 = r.get("created_at");
        let playable: i64 = r.get("playable");
        let (down, up) = streaks.entry(stream.clone()).or_default();
        let e = refs.entry(stream).or_default();
        if playable == 1 {
            *up += 1;
            *down = 0;
            if e.0.is_some() && e.1.is_none() && *up == s.recover_after {
                e.1 = Some(at);
            }
        } else {
            *down += 1;
            *up = 0;
            if e.0.is_none() && *down == s.fail_after {
                e.0 = Some(at);
            }
        }
    }
    let mut mismatched = 0;
    for (stream, fired, resolved) in incidents.values() {
        let r = refs.get(stream).copied().unwrap_or_default();
        if r.0 != Some(*fired) || r.1 != *resolved {
            mismatched += 1;
        }
    }

    // Deliveries, to map chat messages to the incidents they stand for.
    let drows = sqlx::query(
        "SELECT d.id, d.channel_id, d.event, di.incident_id FROM alert_deliveries d \
         JOIN alert_delivery_incidents di ON di.delivery_id = d.id",
    )
    .fetch_all(&db.pool)
    .await?;
    let mut delivery_of: HashMap<(String, String, String), String> = HashMap::new();
    let mut members: HashMap<String, Vec<String>> = HashMap::new();
    for r in drows {
        let id: String = r.get("id");
        let incident: String = r.get("incident_id");
        delivery_of.insert(
            (r.get("channel_id"), r.get("event"), incident.clone()),
            id.clone(),
        );
        members.entry(id).or_default().push(incident);
    }
    // Per channel and event: each delivery's size in order of creation, its status, attempts.
    let srows = sqlx::query(
        "SELECT channel_id, event, status, incident_count, attempts FROM alert_deliveries \
         ORDER BY created_at, seq",
    )
    .fetch_all(&db.pool)
    .await?;
    let mut deliveries: HashMap<(usize, usize), DeliveryStats> = HashMap::new();
    for r in srows {
        let channel: String = r.get("channel_id");
        let event: String = r.get("event");
        let (Some(k), Some(e)) = (
            s.channel_ids.iter().position(|c| *c == channel),
            EVENTS.iter().position(|x| *x == event),
        ) else {
            continue;
        };
        let d = deliveries.entry((k, e)).or_default();
        d.0.push(r.get("incident_count"));
        *d.1.entry(r.get("status")).or_default() += 1;
        d.2 += r.get::<i64, _>("attempts");
    }
    let deliveries: HashMap<(usize, usize), String> = deliveries
        .into_iter()
        .map(|(key, (sizes, statuses, attempts))| {
            let mut statuses: Vec<String> =
                statuses.iter().map(|(s, n)| format!("{n} {s}")).collect();
            statuses.sort();
            let sizes: Vec<String> = sizes.iter().map(i64::to_string).collect();
            (
                key,
                format!(
                    "{}, {attempts} attempts; sizes {}",
                    statuses.join(", "),
                    sizes.join(" ")
                ),
            )
        })
        .collect();

    let msgs = std::mem::take(&mut lock(received).msgs);
    let mut figs: Vec<[Figures; 2]> = (0..4).map(|_| Default::default()).collect();
    let mut seen_ids: HashSet<String> = HashSet::new();
    // Incident → the message key that listed it, per (kind, event).
    let mut listed_by: HashMap<(usize, usize, String), String> = HashMap::new();
    let mut pd_delivery_size: HashMap<(usize, String), usize> = HashMap::new();
    for m in &msgs {
        let Ok(v) = serde_json::from_str::<Value>(&m.body) else {
            figs[m.kind][FIRING].bad.push("body is not JSON".into());
            continue;
        };
        let Some((event, announced)) = announced(m.kind, &v) else {
            continue; // not a firing / resolved notification
        };
        let f = &mut figs[m.kind][event];
        f.requests += 1;
        f.max_body = f.max_body.max(m.body.len());
        let (key, ids): (String, Vec<String>) = match KINDS[m.kind] {
            "webhook" => {
                let wid = m.webhook_id.clone().unwrap_or_default();
                let ts: i64 = m
                    .webhook_ts
                    .as_deref()
                    .and_then(|t| t.parse().ok())
                    .unwrap_or_default();
                let expected =
                    streamwatch::alerts::payload::signature(s.webhook_secret, &wid, ts, &m.body);
                let got = m.webhook_sig.as_deref().unwrap_or_default();
                if expected.is_none() || !got.split(' ').any(|g| Some(g) == expected.as_deref()) {
                    f.bad.push(format!("{wid}: bad signature"));
                }
                if !seen_ids.insert(wid.clone()) {
                    f.repeats += 1;
                    continue;
                }
                let ids = v["data"]["incidents"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|i| i["id"].as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default();
                (wid, ids)
            }
            "slack" | "discord" => {
                let text = chat_text(m.kind, &v).unwrap_or_default();
                let named: Vec<&str> = text
                    .lines()
                    .filter_map(|l| l.strip_prefix("• "))
                    .filter_map(|l| l.split(": ").nth(1))
                    .collect();
                let delivery = named
                    .iter()
                    .filter_map(|stream| by_stream.get(*stream))
                    .map(|inc| {
                        delivery_of.get(&(
                            s.channel_ids[m.kind].clone(),
                            EVENTS[event].to_owned(),
                            inc.clone(),
                        ))
                    })
                    .collect::<Option<HashSet<_>>>();
                match delivery {
                    Some(d) if d.len() == 1 => {
                        let Some(id) = d.into_iter().next() else {
                            continue;
                        };
                        let ids = members.get(id).cloned().unwrap_or_default();
                        if ids.len() != announced {
                            f.bad.push(format!(
                                "text says {announced}, delivery lists {}",
                                ids.len()
                            ));
                        }
                        if !seen_ids.insert(format!("{}:{id}", m.kind)) {
                            f.repeats += 1;
                            continue;
                        }
                        (id.clone(), ids)
                    }
                    _ => {
                        f.bad.push("message not matched to one delivery".into());
                        continue;
                    }
                }
            }
            _ => {
                let dedup = v["dedup_key"].as_str().unwrap_or_default().to_owned();
                let id = dedup
                    .strip_prefix("streamwatch-")
                    .unwrap_or_default()
                    .to_owned();
                if !seen_ids.insert(format!("{event}:{dedup}")) {
                    f.repeats += 1;
                    continue;
                }
                if let Some(d) = delivery_of.get(&(
                    s.channel_ids[m.kind].clone(),
                    EVENTS[event].to_owned(),
                    id.clone(),
                )) {
                    *pd_delivery_size.entry((event, d.clone())).or_default() += 1;
                }
                (dedup, vec![id])
            }
        };
        f.max_incidents = f.max_incidents.max(ids.len());
        for id in ids {
            match listed_by.get(&(m.kind, event, id.clone())) {
                Some(prev) if *prev != key => f.duplicates += 1,
                Some(_) => {}
                None => {
                    listed_by.insert((m.kind, event, id.clone()), key.clone());
                    f.first.insert(id, m.at);
                }
            }
        }
    }
    for ((event, _), size) in pd_delivery_size {
        let f = &mut figs[3][event];
        f.max_incidents = f.max_incidents.max(size);
    }

    let mut out = format!(
        "  incidents of the rule: {} (probe references not matching firedAt/resolvedAt: {mismatched})\n\
         \x20 bound: groupWindow + 30 s = {:.0} s\n\
         \x20 channel    event     requests  repeats  incidents  twice  missing  max/msg  max body  latency p50 / p99 / max (s)  within bound  deliveries",
        incidents.len(),
        s.bound_ms as f64 / 1000.0
    );
    for (k, kind) in KINDS.iter().enumerate() {
        for (e, event) in EVENTS.iter().enumerate() {
            let f = &figs[k][e];
            let mut lat: Vec<i64> = Vec::new();
            let mut missing = 0;
            for (id, (stream, _, _)) in &incidents {
                let r = refs.get(stream).copied().unwrap_or_default();
                let reference = if e == FIRING { r.0 } else { r.1 };
                match (f.first.get(id), reference) {
                    (Some(at), Some(reference)) => lat.push(at - reference),
                    _ => missing += 1,
                }
            }
            lat.sort_unstable();
            let over = lat.iter().filter(|l| **l > s.bound_ms).count();
            out.push_str(&format!(
                "\n  {kind:<10} {event:<9} {:>8}  {:>7}  {:>9}  {:>5}  {:>7}  {:>7}  {:>6.0} KiB  {:>6.1} / {:>5.1} / {:>5.1}      {}  {}",
                f.requests,
                f.repeats,
                f.first.len(),
                f.duplicates,
                missing,
                f.max_incidents,
                f.max_body as f64 / 1024.0,
                pct(&lat, 50.0) as f64 / 1000.0,
                pct(&lat, 99.0) as f64 / 1000.0,
                lat.last().copied().unwrap_or(0) as f64 / 1000.0,
                if over == 0 && missing == 0 {
                    "yes".to_owned()
                } else {
                    format!("NO ({over} over)")
                },
                deliveries.get(&(k, e)).cloned().unwrap_or_default()
            ));
            for b in f.bad.iter().take(5) {
                out.push_str(&format!("\n    problem: {b}"));
            }
            if f.bad.len() > 5 {
                out.push_str(&format!("\n    … {} problems in all", f.bad.len()));
            }
        }
    }
    Ok(out)
}

fn pct(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let idx = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
