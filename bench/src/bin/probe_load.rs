//! Prober load benchmark (issue 4): 10,000 streams at a 30 s interval against a local origin.
//!
//! The bench seeds the streams straight into a fresh store as if they had been registered while
//! the service was down (due an hour ago), starts the real `streamwatch serve` binary as a
//! child process, and serves a live HLS media playlist (media sequence advancing every 6 s)
//! from an axum origin on 127.0.0.1. After a warm-up (the start-up spread) it measures over a
//! window:
//!
//! * lateness: each request's arrival at the origin minus the stream's scheduled due time
//!   (`next_probe_at`, sampled from the store every second) — p50/p99/max;
//! * server CPU: utime + stime of the child from `/proc/<pid>/stat` over the window, as a
//!   percentage of one core (the database server's CPU is not included);
//! * server RSS: `VmRSS` sampled every second (max) and `VmHWM` (peak) from
//!   `/proc/<pid>/status`.
//!
//! Targets: p99 lateness ≤ 2 s, CPU ≤ 50 % of one core, RSS ≤ 300 MiB.
//!
//! ```text
//! cargo build --release -p streamwatch --bin streamwatch
//! cargo run --release -p bench --bin probe_load -- --engine sqlite --engine postgres
//! ```
//!
//! `--distinct-hosts` gives every stream its own origin host (`s<i>.localhost`, which the
//! guard resolves to loopback without DNS), so the prober keeps one connection per stream as
//! it would against 10,000 real origins.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use clap::Parser;
use sqlx::Row;
use streamwatch::config::DatabaseUrl;
use streamwatch::db::Db;
use streamwatch::time::now_ms;

#[derive(Parser)]
struct Args {
    /// Engines to measure: sqlite, postgres.
    #[arg(long = "engine", default_values = ["sqlite"])]
    engines: Vec<String>,
    /// Number of streams.
    #[arg(long, default_value_t = 10_000)]
    streams: usize,
    /// Probe interval in seconds.
    #[arg(long, default_value_t = 30)]
    interval_s: u64,
    /// Seconds before the measured window (start-up spread and first interval).
    #[arg(long, default_value_t = 40)]
    warmup_s: u64,
    /// Length of the measured window in seconds.
    #[arg(long, default_value_t = 120)]
    measure_s: u64,
    /// Give each stream its own host name (one connection per stream).
    #[arg(long)]
    distinct_hosts: bool,
    /// The server binary (default: `streamwatch` next to this binary).
    #[arg(long)]
    server_bin: Option<PathBuf>,
    /// PostgreSQL server on which a fresh database is created.
    #[arg(
        long,
        env = "TEST_DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/postgres"
    )]
    pg_admin_url: String,
}

/// Origin requests as (stream index, arrival epoch ms).
type Arrivals = Arc<Mutex<Vec<(u32, i64)>>>;

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    println!(
        "machine: {} cores, {} | {} streams at {} s, warm-up {} s, window {} s{}",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        bench::mem_total(),
        args.streams,
        args.interval_s,
        args.warmup_s,
        args.measure_s,
        if args.distinct_hosts {
            ", one host per stream"
        } else {
            ""
        }
    );
    for engine in &args.engines {
        run(engine, &args).await?;
    }
    Ok(())
}

async fn run(engine: &str, args: &Args) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let url = match engine {
        "sqlite" => DatabaseUrl::Sqlite(format!(
            "sqlite://{}",
            dir.path().join("streamwatch.db").display()
        )),
        "postgres" => {
            DatabaseUrl::Postgres(bench::fresh_pg(&args.pg_admin_url, "sw_bench_probe").await?)
        }
        other => bail!("unknown engine {other}"),
    };
    let arrivals: Arrivals = Arc::default();
    let origin = start_origin(Arc::clone(&arrivals)).await?;
    let db = Db::connect(Some(&url), dir.path()).await?;
    let t = Instant::now();
    seed(&db, args, origin).await?;
    println!(
        "[{engine}] seeded {} streams in {:.1} s",
        args.streams,
        t.elapsed().as_secs_f64()
    );

    let mut server = start_server(args, dir.path(), &url)?;
    let pid = server.id();
    let started = Instant::now();
    let mut dues: HashMap<u32, Vec<i64>> = HashMap::new();
    let warmup_end = started + Duration::from_secs(args.warmup_s);
    let window_end = warmup_end + Duration::from_secs(args.measure_s);
    let mut cpu_start = None;
    let mut window_start_ms = 0;
    let mut rss_max = 0;
    while Instant::now() < window_end {
        if let Some(status) = server.try_wait()? {
            bail!("server exited early: {status}");
        }
        sample_dues(&db, &mut dues).await?;
        if Instant::now() >= warmup_end {
            if cpu_start.is_none() {
                cpu_start = Some((cpu_ticks(pid)?, Instant::now()));
                window_start_ms = now_ms();
            }
            rss_max = rss_max.max(status_kib(pid, "VmRSS:")?);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let window_end_ms = now_ms();
    let (ticks0, t0) = cpu_start.context("no measured window")?;
    let cpu_pct = 100.0 * (cpu_ticks(pid)? - ticks0) as f64
        / ticks_per_second() as f64
        / t0.elapsed().as_secs_f64();
    let hwm = status_kib(pid, "VmHWM:")?;
    let failing: i64 = sqlx::query("SELECT COUNT(*) FROM probes WHERE status <> 'healthy'")
        .fetch_one(&db.pool)
        .await?
        .get(0);
    terminate(&mut server)?;

    let window: Vec<(u32, i64)> = lock(&arrivals)
        .iter()
        .copied()
        .filter(|(_, t)| (window_start_ms..window_end_ms).contains(t))
        .collect();
    let mut lateness = lateness_of(&window, &dues);
    lateness.sort_unstable();
    let expected = args.streams as f64 * (window_end_ms - window_start_ms) as f64
        / 1000.0
        / args.interval_s as f64;
    println!(
        "[{engine}] probes in window: {} (expected {:.0}), not healthy overall: {failing}",
        window.len(),
        expected
    );
    println!(
        "[{engine}] lateness ms: p50 {} p99 {} max {} (target p99 <= 2000) over {} probes matched",
        pct(&lateness, 50.0),
        pct(&lateness, 99.0),
        lateness.last().copied().unwrap_or(0),
        lateness.len()
    );
    println!(
        "[{engine}] server cpu: {cpu_pct:.1} % of one core (target <= 50) | rss max {:.1} MiB, peak {:.1} MiB (target <= 300)",
        rss_max as f64 / 1024.0,
        hwm as f64 / 1024.0
    );
    Ok(())
}

/// The local origin: `/s/{i}` answers a live media playlist whose media sequence advances
/// every target duration (6 s), so probes never find it stale; each request is recorded.
async fn start_origin(arrivals: Arrivals) -> Result<u16> {
    async fn playlist(Path(i): Path<u32>, State(arrivals): State<Arrivals>) -> impl IntoResponse {
        lock(&arrivals).push((i, now_ms()));
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
    }
    let app = Router::new()
        .route("/s/{i}", get(playlist))
        .with_state(arrivals);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            eprintln!("origin stopped: {e}");
        }
    });
    Ok(port)
}

/// Streams `s<i>` due an hour ago (registered while the service was down).
async fn seed(db: &Db, args: &Args, port: u16) -> Result<()> {
    let due = now_ms() - 3_600_000;
    let mut tx = db.pool.begin().await?;
    for chunk in (0..args.streams).collect::<Vec<_>>().chunks(500) {
        let mut sql = String::from(
            "INSERT INTO streams (id, source_url, name, target_region, created_at, agent_state, \
             status, last_action, next_probe_at) VALUES ",
        );
        for (n, i) in chunk.iter().enumerate() {
            let host = if args.distinct_hosts {
                format!("s{i}.localhost")
            } else {
                "127.0.0.1".to_owned()
            };
            if n > 0 {
                sql.push(',');
            }
            sql.push_str(&format!(
                "('s{i}', 'http://{host}:{port}/s/{i}', 's{i}', 'auto', {due}, 'healthy', \
                 'watching', 'registered', {due})"
            ));
        }
        sqlx::query(&sql).execute(&mut *tx).await?;
    }
    tx.commit().await?;
    Ok(())
}

fn start_server(args: &Args, data_dir: &std::path::Path, url: &DatabaseUrl) -> Result<Child> {
    let bin = match &args.server_bin {
        Some(b) => b.clone(),
        None => std::env::current_exe()?
            .parent()
            .context("bench binary has a directory")?
            .join("streamwatch"),
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let url = match url {
        DatabaseUrl::Postgres(u) | DatabaseUrl::Sqlite(u) => u.clone(),
    };
    let child = Command::new(&bin)
        .arg("serve")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("RUST_LOG", "warn")
        .env("STREAMWATCH_LISTEN", format!("127.0.0.1:{port}"))
        .env("STREAMWATCH_DATA_DIR", data_dir)
        .env("DATABASE_URL", url)
        .env("STREAMWATCH_ALLOW_PRIVATE", "127.0.0.0/8,::1/128")
        .env(
            "STREAMWATCH_PROBE_INTERVAL",
            format!("{}s", args.interval_s),
        )
        .stdout(Stdio::null())
        .spawn()
        .with_context(|| format!("cannot start {}", bin.display()))?;
    Ok(child)
}

/// Records every stream's current `next_probe_at` (its next scheduled due time).
async fn sample_dues(db: &Db, dues: &mut HashMap<u32, Vec<i64>>) -> Result<()> {
    let rows = sqlx::query("SELECT id, next_probe_at FROM streams")
        .fetch_all(&db.pool)
        .await?;
    for r in rows {
        let id: String = r.get("id");
        let Some(i) = id.strip_prefix('s').and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let due: i64 = r.get("next_probe_at");
        let seen = dues.entry(i).or_default();
        if seen.last() != Some(&due) {
            seen.push(due);
        }
    }
    Ok(())
}

/// For each arrival, the lateness against the latest due time at or before it (a small
/// negative value is clock granularity; the stored due times are in whole milliseconds).
fn lateness_of(window: &[(u32, i64)], dues: &HashMap<u32, Vec<i64>>) -> Vec<i64> {
    window
        .iter()
        .filter_map(|(i, t)| {
            let due = dues.get(i)?.iter().filter(|d| **d <= *t).max()?;
            Some(t - due)
        })
        .collect()
}

fn pct(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let idx = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// utime + stime of a process, in clock ticks.
fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may contain spaces) start at field 3.
    let rest = stat.rsplit_once(')').context("stat format")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11).context("utime")?.parse()?;
    let stime: u64 = fields.get(12).context("stime")?.parse()?;
    Ok(utime + stime)
}

fn ticks_per_second() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100)
}

/// A `kB` line of `/proc/<pid>/status`.
fn status_kib(pid: u32, key: &str) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with(key))
        .with_context(|| format!("{key} in /proc/{pid}/status"))?;
    Ok(line.split_whitespace().nth(1).context("value")?.parse()?)
}

fn terminate(child: &mut Child) -> Result<()> {
    Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()?;
    child.wait()?;
    Ok(())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
