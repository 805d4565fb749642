//! Read-path benchmark of issue 2: `GET /api/v1/streams` and `GET /api/v1/agents` with 1,000
//! streams and 24 hours of probe rows at a 30 s interval (2.88 million rows), on the embedded
//! SQLite store and on PostgreSQL, at a fixed open-loop rate (default 200 requests/s).
//!
//! Latency is measured from each request's scheduled send time, so a stalled server cannot
//! hide queueing (no coordinated omission). Target: p99 ≤ 20 ms on both routes.
//!
//! `cargo run --release -p bench --bin api_reads -- --engine sqlite --engine postgres`
//!
//! The dashboard's pages on the same data (issue 12: p95 ≤ 50 ms server-side):
//! `… --bin api_reads -- --rate 20 --route /app --route /app/streams --route /app/streams/stream00000
//!  --route /app/agents --route /app/qoe --route /app/views --route /app/keys`

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Parser;
use serde_json::json;
use streamwatch::config::{CidrList, Config, DatabaseUrl, RateLimit};
use streamwatch::db::Db;
use streamwatch::startup::Server;
use streamwatch::streams::uptime::hour_of;
use streamwatch::time::now_ms;

#[derive(Parser)]
struct Args {
    /// Engines to measure: sqlite, postgres.
    #[arg(long = "engine", default_values = ["sqlite", "postgres"])]
    engines: Vec<String>,
    #[arg(long, default_value_t = 1000)]
    streams: usize,
    /// Hours of probe history per stream.
    #[arg(long, default_value_t = 24)]
    hours: i64,
    #[arg(long, default_value_t = 30)]
    interval_s: i64,
    /// Routes to drive, in turn (repeatable). Default: the two read routes of issue 2; the
    /// dashboard's pages (issue 12) are measured with `--route /app --route /app/streams …`.
    #[arg(long = "route", default_values = ["/api/v1/streams", "/api/v1/agents"])]
    routes: Vec<String>,
    /// Requests per second per route.
    #[arg(long, default_value_t = 200)]
    rate: u32,
    /// Seconds of load per route.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// Keep the seeded SQLite data in this directory and reuse it on the next run.
    #[arg(long)]
    reuse_dir: Option<std::path::PathBuf>,
    /// An already seeded PostgreSQL database to reuse instead of creating and seeding one.
    #[arg(long)]
    reuse_pg: Option<String>,
    /// PostgreSQL server on which a fresh database is created.
    #[arg(
        long,
        env = "TEST_DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/postgres"
    )]
    pg_admin_url: String,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    println!(
        "machine: {} cores, {} | {} streams x {} h at {} s = {} probe rows | {} req/s for {} s per route",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        bench::mem_total(),
        args.streams,
        args.hours,
        args.interval_s,
        args.streams as i64 * args.hours * 3600 / args.interval_s,
        args.rate,
        args.seconds
    );
    for engine in &args.engines {
        let dir = tempfile::tempdir()?;
        let data_dir = args
            .reuse_dir
            .clone()
            .unwrap_or_else(|| dir.path().to_owned());
        let reuse = match engine.as_str() {
            "sqlite" => data_dir.join("streamwatch.db").exists(),
            _ => args.reuse_pg.is_some(),
        };
        let mut config = Config::defaults(&data_dir);
        config.listen = "127.0.0.1:0".parse()?;
        config.auth_rate_limit = RateLimit::Off;
        config.allow_private = CidrList::default();
        if engine == "postgres" {
            let url = match &args.reuse_pg {
                Some(u) => u.clone(),
                None => bench::fresh_pg(&args.pg_admin_url, "sw_bench_reads").await?,
            };
            println!("[postgres] database {url}");
            config.database_url = Some(DatabaseUrl::Postgres(url));
        }
        let db = Db::connect(config.database_url.as_ref(), &config.data_dir).await?;
        if !reuse {
            let t = Instant::now();
            seed(&db, &args).await?;
            println!("[{engine}] seeded in {:.1} s", t.elapsed().as_secs_f64());
        }
        // As in a running deployment, every stream carries the uptime its last probe stored.
        let mut conn = db.pool.acquire().await?;
        for s in 0..args.streams {
            streamwatch::streams::uptime::refresh(&mut conn, &format!("stream{s:05}"), now_ms())
                .await?;
        }
        drop(conn);
        db.pool.close().await;

        let server = Server::build(config).await?;
        let base = format!("http://{}", server.local_addr());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let handle = tokio::spawn(server.run(async move {
            let _ = stopped.await;
        }));
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(256)
            .build()?;
        let cookie = sign_up(&client, &base).await?;
        for route in args.routes.iter().map(String::as_str) {
            // Warm caches and connections (and report the unloaded service time), then measure.
            let t = Instant::now();
            for _ in 0..50 {
                get(&client, &base, route, &cookie).await?;
            }
            println!(
                "[{engine}] GET {route}: one at a time {:.2} ms",
                t.elapsed().as_secs_f64() * 1000.0 / 50.0
            );
            let stats = open_loop(&client, &base, route, &cookie, args.rate, args.seconds).await;
            println!("[{engine}] GET {route}: {stats}");
        }
        let _ = stop.send(());
        let _ = handle.await;
    }
    Ok(())
}

/// Streams, probe rows and their hourly rollups, written in large multi-row inserts.
async fn seed(db: &Db, args: &Args) -> Result<()> {
    let now = now_ms();
    let start = now - args.hours * 3600 * 1000;
    let step = args.interval_s * 1000;
    let mut tx = db.pool.begin().await?;
    for s in 0..args.streams {
        sqlx::query(
            "INSERT INTO streams (id, source_url, name, target_region, created_at, agent_state, status, \
             last_action, last_checked_at, last_healthy_at, next_probe_at) \
             VALUES ($1, $2, $3, 'auto', $4, 'healthy', 'watching', 'probe ok in 80 ms', $5, $5, $6)",
        )
        .bind(format!("stream{s:05}"))
        .bind(format!("https://cdn{}.example.com/live/{s}/master.m3u8", s % 7))
        .bind(format!("Channel {s}"))
        .bind(start - 1000 + s as i64)
        .bind(now)
        .bind(now + step)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;

    const ROWS: usize = 1000;
    let mut rollups: HashMap<(usize, i64), (i64, i64)> = HashMap::new();
    let mut batch: Vec<(usize, i64, &str, &str, i64)> = Vec::with_capacity(ROWS);
    let mut n = 0u64;
    let mut tx = db.pool.begin().await?;
    let mut ts = start + step;
    while ts <= now {
        for s in 0..args.streams {
            // 1 % failing, 2 % degraded, the rest healthy; deterministic.
            let k = (s as i64 * 7919 + ts / step) % 100;
            let (status, class) = match k {
                0 => ("failing", "5xx server error"),
                1 | 2 => ("degraded", "slow response"),
                _ => ("healthy", "no anomaly"),
            };
            let e = rollups.entry((s, hour_of(ts))).or_default();
            e.0 += 1;
            e.1 += i64::from(status == "failing");
            batch.push((s, ts, status, class, 40 + k));
            if batch.len() == ROWS {
                insert_probes(&mut tx, &batch, &mut n).await?;
                batch.clear();
                if n.is_multiple_of(100_000) {
                    tx.commit().await?;
                    tx = db.pool.begin().await?;
                }
            }
        }
        ts += step;
    }
    insert_probes(&mut tx, &batch, &mut n).await?;
    let rollups: Vec<_> = rollups.into_iter().collect();
    for chunk in rollups.chunks(ROWS) {
        let mut sql =
            String::from("INSERT INTO probe_rollups (stream_id, hour, total, down) VALUES ");
        for i in 0..chunk.len() {
            let b = i * 4;
            sql.push_str(&format!(
                "{}(${}, ${}, ${}, ${})",
                if i > 0 { "," } else { "" },
                b + 1,
                b + 2,
                b + 3,
                b + 4
            ));
        }
        let mut q = sqlx::query(&sql);
        for ((s, hour), (total, down)) in chunk {
            q = q
                .bind(format!("stream{s:05}"))
                .bind(*hour)
                .bind(*total)
                .bind(*down);
        }
        q.execute(&mut *tx).await?;
    }
    tx.commit().await?;
    if db.engine == streamwatch::db::Engine::Postgres {
        sqlx::query("ANALYZE").execute(&db.pool).await?;
    }
    println!("seeded {n} probe rows");
    Ok(())
}

async fn insert_probes(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    rows: &[(usize, i64, &str, &str, i64)],
    n: &mut u64,
) -> Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut sql = String::from(
        "INSERT INTO probes (id, stream_id, status, anomaly_class, latency_ms, http_status, detail, created_at, playable) VALUES ",
    );
    for i in 0..rows.len() {
        let b = i * 6;
        // Failing rows are the only not-playable ones (the degraded rows are slow).
        sql.push_str(&format!(
            "{}(${}, ${}, ${}, ${}, ${}, 200, 'probe ok', ${}, CASE WHEN ${} = 'failing' THEN 0 ELSE 1 END)",
            if i > 0 { "," } else { "" },
            b + 1,
            b + 2,
            b + 3,
            b + 4,
            b + 5,
            b + 6,
            b + 3
        ));
    }
    let mut q = sqlx::query(&sql);
    for (s, ts, status, class, latency) in rows {
        *n += 1;
        q = q
            .bind(format!("p{s:05}x{ts}"))
            .bind(format!("stream{s:05}"))
            .bind(*status)
            .bind(*class)
            .bind(*latency)
            .bind(*ts);
    }
    q.execute(&mut **tx).await?;
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

async fn get(client: &reqwest::Client, base: &str, route: &str, cookie: &str) -> Result<usize> {
    let r = client
        .get(format!("{base}{route}"))
        .header("cookie", cookie)
        .send()
        .await?;
    anyhow::ensure!(r.status().is_success(), "status {}", r.status());
    Ok(r.bytes().await?.len())
}

struct Stats {
    lat: Vec<Duration>,
    errors: usize,
    seconds: f64,
}

impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut l = self.lat.clone();
        l.sort();
        let p = |q: f64| {
            l.get(((l.len() as f64 * q) as usize).min(l.len().saturating_sub(1)))
                .copied()
                .unwrap_or_default()
        };
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        write!(
            f,
            "{} ok ({:.0}/s), {} errors, p50 {:.2} ms, p95 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            l.len(),
            l.len() as f64 / self.seconds,
            self.errors,
            ms(p(0.50)),
            ms(p(0.95)),
            ms(p(0.99)),
            ms(l.last().copied().unwrap_or_default())
        )
    }
}

async fn open_loop(
    client: &reqwest::Client,
    base: &str,
    route: &str,
    cookie: &str,
    rate: u32,
    seconds: u64,
) -> Stats {
    let total = rate as u64 * seconds;
    let gap = Duration::from_secs_f64(1.0 / rate as f64);
    let t0 = tokio::time::Instant::now();
    let mut tasks = Vec::with_capacity(total as usize);
    for i in 0..total {
        let scheduled = t0 + gap * i as u32;
        tokio::time::sleep_until(scheduled).await;
        let (client, url, cookie) = (client.clone(), format!("{base}{route}"), cookie.to_owned());
        tasks.push(tokio::spawn(async move {
            let ok = match client.get(url).header("cookie", cookie).send().await {
                Ok(r) if r.status().is_success() => r.bytes().await.is_ok(),
                _ => false,
            };
            (ok, scheduled.elapsed())
        }));
    }
    let mut stats = Stats {
        lat: Vec::new(),
        errors: 0,
        seconds: seconds as f64,
    };
    for t in tasks {
        match t.await {
            Ok((true, d)) => stats.lat.push(d),
            _ => stats.errors += 1,
        }
    }
    stats
}
