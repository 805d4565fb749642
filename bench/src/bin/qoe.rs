//! QoE store benchmark (issue 11; results in docs/benchmarks.md).
//!
//! `qoe routes`: generates a realistic fleet (`analytics::fleet`, 10,000 contents, Zipf),
//! writes it straight into a store through the sink (10,000-row writes, records included),
//! runs the refresher once over everything (timed), then times each QoE route many times
//! and prints p50 / p95 / p99 per route.
//!
//! `qoe ingest`: the writer + sink flat out with realistic SDK batches, each through the
//! server's own `streamwatch::telemetry::Intake::accept` (rows, record, live views), with or without the refresher running every
//! `--every`, for the "ingest with rollups ≥ 85 % of without" figure; with `--rate` it runs
//! open loop at that rate and measures freshness: the time from a batch's acknowledgement
//! until its view has a row in `qoe_views` (what the views list reads), polled every
//! 100 ms during the run (p50 / p95 / p99).
//!
//! `qoe http`: the same realistic batches posted to a running server's
//! `POST /api/v1/telemetry`, each with its player's `User-Agent`, over many keep-alive
//! connections (one player with a request in flight each, a session's batches all on one
//! connection, in order): the service's real ingest path,
//! for the same figures measured where players send (`bench/qoe-http.sh` runs the server
//! with and without its refresher). With `--rate` and `--freshness-database` it measures
//! freshness as `qoe ingest` does, from the HTTP acknowledgement.

use std::sync::Arc;
use std::time::{Duration, Instant};

use analytics::fleet::{Fleet, FleetConfig};
use analytics::query::{
    BreakdownQuery, Dimension, Filters, Format, Granularity, Measurement, Metric, OrderBy,
    OverviewQuery, StreamIds, TimeRange, TimelineQuery, TimeseriesQuery, ViewsQuery, DAY_MS,
};
use analytics::{LiveViews, Refresher, Store};
use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use ingest::{EventSink, SinkWrite, UaCache};

// The server's allocator (src/main.rs), so the writer and the refresher allocate as they
// do in the service: under glibc malloc the same run ingests about a fifth less.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(about = "streamwatch QoE store benchmark")]
struct Cli {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand, Debug)]
enum Mode {
    /// Load a fleet, refresh, time every route.
    Routes(RoutesArgs),
    /// Ingest through the writer with or without the refresher; freshness at a rate.
    Ingest(IngestArgs),
    /// Post the fleet to a running server's ingest route; freshness at a rate.
    Http(HttpArgs),
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
enum EngineArg {
    Clickhouse,
    Sqlite,
}

#[derive(Parser, Debug)]
struct StoreArgs {
    #[arg(long, value_enum, default_value = "clickhouse")]
    engine: EngineArg,
    #[arg(long, env = "CLICKHOUSE_URL", default_value = "http://127.0.0.1:8123")]
    clickhouse_url: String,
    /// ClickHouse database (created when missing).
    #[arg(long, default_value = "qoe_bench")]
    database: String,
    /// Directory of the SQLite file.
    #[arg(long, default_value = "/tmp/qoe-bench-sqlite")]
    data_dir: std::path::PathBuf,
}

#[derive(Parser, Debug)]
struct RoutesArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Views to generate (0: reuse what the store holds).
    #[arg(long, default_value_t = 200_000)]
    views: usize,
    /// Days the views start over (ending at the range the routes read).
    #[arg(long, default_value_t = 7)]
    days: i64,
    /// Distinct contents.
    #[arg(long, default_value_t = 10_000)]
    contents: usize,
    /// Views generated per chunk (memory bound).
    #[arg(long, default_value_t = 20_000)]
    chunk: usize,
    /// With `--views 0`: still run one refresher step over what is stored (e.g. after an
    /// interrupted run, or a changed `qoe_views` layout).
    #[arg(long)]
    refresh: bool,
    /// Timed runs per route.
    #[arg(long, default_value_t = 30)]
    runs: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(Parser, Debug)]
struct IngestArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Run the refresher during the run.
    #[arg(long)]
    rollups: bool,
    /// Refresh interval.
    #[arg(long, default_value_t = 10.0)]
    every: f64,
    /// Duration (s).
    #[arg(long, default_value_t = 20.0)]
    duration: f64,
    /// Concurrent submitters (players with a batch in flight). A fleet has thousands: with
    /// 256, each ClickHouse insert holds only a few hundred rows and the server spends its
    /// CPU merging parts (110 rows merged per row inserted, docs/benchmarks.md).
    #[arg(long, default_value_t = 8192)]
    submitters: usize,
    /// Open loop at this many events/s (freshness); flat out when absent.
    #[arg(long)]
    rate: Option<f64>,
    /// Session ids as SDK 0.2.0 sends them (time-ordered) or as SDK 0.1.0 did (random).
    #[arg(long, value_enum, default_value_t = SessionIds::TimeOrdered)]
    session_ids: SessionIds,
}

#[derive(Parser, Debug)]
struct HttpArgs {
    /// Service base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    /// API key the fleet posts with.
    #[arg(long, env = "QOE_API_KEY")]
    key: String,
    /// Concurrent keep-alive connections, each a player with one request in flight.
    #[arg(long, default_value_t = 1024)]
    connections: usize,
    /// Duration (s).
    #[arg(long, default_value_t = 20.0)]
    duration: f64,
    /// Open loop at this many events/s (freshness); flat out when absent.
    #[arg(long)]
    rate: Option<f64>,
    /// With `--rate`: the server's ClickHouse database (`CLICKHOUSE_DATABASE`), whose
    /// `qoe_views` is polled for the acknowledged samples (freshness).
    #[arg(long)]
    freshness_database: Option<String>,
    #[arg(long, env = "CLICKHOUSE_URL", default_value = "http://127.0.0.1:8123")]
    clickhouse_url: String,
    /// Print a JSON summary line at the end (`events_per_s`, as `loadgen http --json`).
    #[arg(long)]
    json: bool,
    /// Send each batch at its own session time (needs `--rate`): views last as long as
    /// they would, instead of a pass sending a view's batches within moments.
    #[arg(long)]
    real_time: bool,
    /// Seconds before the measured window (events/s, CPU, freshness samples): views
    /// already playing when it opens, as in a fleet that has been running.
    #[arg(long, default_value_t = 0.0)]
    warmup: f64,
    /// A process whose CPU per acknowledged event is printed (the server, ClickHouse);
    /// repeatable.
    #[arg(long)]
    watch_pid: Vec<String>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum SessionIds {
    TimeOrdered,
    Random,
}

const OWNER: &str = "bench-owner";
/// 2024-05-01T00:00:00.000Z
const START: i64 = 1_714_521_600_000;

/// The sink, the store and the live views the server would have.
async fn open(a: &StoreArgs) -> Result<(Arc<dyn EventSink>, Store, Option<Arc<LiveViews>>)> {
    match a.engine {
        EngineArg::Clickhouse => {
            let config = ingest::ClickHouseConfig::new(&a.clickhouse_url, &a.database);
            let sink = ingest::ClickHouseSink::connect(&config)
                .await
                .context("clickhouse")?;
            let live = Arc::new(LiveViews::new(config.writer));
            Ok((
                Arc::new(sink),
                Store::clickhouse(config.client()),
                Some(live),
            ))
        }
        EngineArg::Sqlite => {
            let sink = ingest::SqliteSink::open_in_dir(&a.data_dir)
                .await
                .context("sqlite")?;
            let live = Arc::new(LiveViews::new(0));
            Ok((Arc::new(sink.clone()), Store::sqlite(sink), Some(live)))
        }
    }
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn summary(name: &str, mut ms: Vec<f64>) -> String {
    ms.sort_by(f64::total_cmp);
    format!(
        "{name:<34} p50 {:>8.1} ms  p95 {:>8.1} ms  p99 {:>8.1} ms  (n={})",
        pct(&ms, 0.5),
        pct(&ms, 0.95),
        pct(&ms, 0.99),
        ms.len()
    )
}

async fn load(sink: &Arc<dyn EventSink>, a: &RoutesArgs) -> Result<(usize, usize)> {
    let ua = UaCache::default();
    let (mut events, mut batches) = (0usize, 0usize);
    let chunks = a.views.div_ceil(a.chunk.max(1));
    let t = Instant::now();
    let mut inflight: Vec<tokio::task::JoinHandle<Result<(), ingest::SinkError>>> = Vec::new();
    for c in 0..chunks {
        let n = a.chunk.min(a.views - c * a.chunk);
        let cfg = FleetConfig {
            contents: a.contents,
            start_ms: START,
            span_ms: a.days * DAY_MS,
            ..FleetConfig::realistic(a.seed * 1_000_003 + c as u64, n)
        };
        let fleet = Fleet::generate(&cfg);
        let mut write = SinkWrite::default();
        for b in &fleet.batches {
            let (rows, record) = b.to_write(OWNER, ua.classify(b.user_agent.as_deref()));
            events += rows.len();
            batches += 1;
            write.rows.extend(rows);
            write.batches.push(record);
            if write.rows.len() >= 10_000 {
                let w = std::mem::take(&mut write);
                let s = sink.clone();
                inflight.push(tokio::spawn(async move { s.write(w).await }));
                if inflight.len() >= 2 {
                    inflight.remove(0).await??;
                }
            }
        }
        if !write.is_empty() {
            let s = sink.clone();
            inflight.push(tokio::spawn(async move { s.write(write).await }));
        }
        eprintln!(
            "chunk {}/{chunks}: {events} events, {batches} batches, {:.0} s",
            c + 1,
            t.elapsed().as_secs_f64()
        );
    }
    for h in inflight {
        h.await??;
    }
    Ok((events, batches))
}

async fn routes(a: RoutesArgs) -> Result<()> {
    // Loaded straight into the sink: the refresher reads every view back.
    let (sink, store, _) = open(&a.store).await?;
    if a.views > 0 {
        let t = Instant::now();
        let (events, batches) = load(&sink, &a).await?;
        println!(
            "loaded {} views, {events} events, {batches} batches in {:.1} s",
            a.views,
            t.elapsed().as_secs_f64()
        );
    }
    if a.views > 0 || a.refresh {
        let t = Instant::now();
        let mut r = Refresher::new(store.clone());
        let stats = r.step().await?;
        println!(
            "refresh: {} views derived from {} events in {:.1} s",
            stats.derived,
            stats.events,
            t.elapsed().as_secs_f64()
        );
    }
    if a.store.engine == EngineArg::Clickhouse {
        // What background merges reach on a table at rest; FINAL is cheapest on merged parts.
        let client =
            ingest::ClickHouseConfig::new(&a.store.clickhouse_url, &a.store.database).client();
        let t = Instant::now();
        client
            .query("OPTIMIZE TABLE qoe_views FINAL")
            .execute()
            .await?;
        println!("optimize qoe_views: {:.1} s", t.elapsed().as_secs_f64());
    }
    let end = START + a.days * DAY_MS;
    let day = TimeRange {
        from_ms: end - DAY_MS,
        to_ms: end,
    };
    let week = TimeRange {
        from_ms: end - 7 * DAY_MS,
        to_ms: end,
    };
    // Held as the server's cache holds it: no copy per question.
    let streams: Arc<StreamIds> = Arc::new(
        (0..a.contents)
            .filter(|r| r % 10 == 3)
            .map(|r| {
                (
                    format!("https://live.example.com/channel-{r}/index.m3u8"),
                    format!("st_{r}"),
                )
            })
            .collect(),
    );
    let src = "https://live.example.com/channel-3/index.m3u8";
    let mut lines = Vec::new();
    macro_rules! time {
        ($name:expr, $call:expr) => {{
            let mut ms = Vec::with_capacity(a.runs);
            let _ = $call.await?; // warm-up
            for _ in 0..a.runs {
                let t = Instant::now();
                let _ = $call.await?;
                ms.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            let line = summary($name, ms);
            println!("{line}");
            lines.push(line);
        }};
    }
    let ov = OverviewQuery {
        range: day,
        filters: Filters::default(),
    };
    time!("overview 24h", store.overview(OWNER, &ov, &streams));
    let ov7 = OverviewQuery {
        range: week,
        filters: Filters::default(),
    };
    time!("overview 7d", store.overview(OWNER, &ov7, &streams));
    let ts = TimeseriesQuery {
        range: week,
        filters: Filters::default(),
        metric: Metric::RebufferPct,
        measurement: Measurement::P50,
        granularity: Granularity::Hour,
        format: Format::Json,
    };
    time!(
        "timeseries 7d by hour",
        store.timeseries(OWNER, &ts, &streams)
    );
    let ts_startup = TimeseriesQuery {
        metric: Metric::StartupTimeMs,
        measurement: Measurement::P95,
        ..ts.clone()
    };
    time!(
        "timeseries 7d by hour startup p95",
        store.timeseries(OWNER, &ts_startup, &streams)
    );
    for (label, range) in [("24h", day), ("7d", week)] {
        let bd = BreakdownQuery {
            range,
            filters: Filters::default(),
            metric: Metric::PlaybackFailurePct,
            measurement: Measurement::P50,
            by: Dimension::ContentId,
            order_by: OrderBy::NegativeImpact,
            limit: 25,
            format: Format::Json,
        };
        time!(
            &format!("breakdown contentId {label}"),
            store.breakdown(OWNER, &bd, &streams)
        );
    }
    let vq = ViewsQuery {
        range: day,
        filters: Filters::default(),
        limit: 50,
        cursor: None,
        format: Format::Json,
    };
    time!("views 24h first page", store.views(OWNER, &vq, &streams));
    let tl = TimelineQuery {
        range: day,
        filters: Filters::default(),
        granularity: Granularity::Hour,
    };
    time!(
        "timeline viewers 24h",
        store.timeline_viewers(OWNER, src, &tl, &streams)
    );
    println!(
        "summary ({}, {} cores, load {}):",
        match a.store.engine {
            EngineArg::Clickhouse => "clickhouse",
            EngineArg::Sqlite => "sqlite",
        },
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    for l in lines {
        println!("  {l}");
    }
    Ok(())
}

/// Realistic batches for the ingest run (one fleet, reused with fresh session ids).
fn ingest_batches() -> Vec<analytics::fleet::GenBatch> {
    let cfg = FleetConfig {
        contents: 10_000,
        ..FleetConfig::realistic(99, 4_000)
    };
    Fleet::generate(&cfg).batches
}

/// The ingest run's batches as the ingest route has them after parsing (its body through
/// `ingest::parse_batch`), each with its player's `User-Agent`.
fn wire_batches() -> Result<Vec<(ingest::Batch, Option<String>)>> {
    ingest_batches()
        .into_iter()
        .map(|b| {
            let mut body = b.wire_json("svc_bench").into_bytes();
            let batch = ingest::parse_batch(&mut body)
                .map_err(|e| anyhow::anyhow!("fleet batch refused: {e:?}"))?;
            Ok((batch, b.user_agent))
        })
        .collect()
}

async fn ingest(a: IngestArgs) -> Result<()> {
    let (sink, store, live) = open(&a.store).await?;
    // As the server: the live views take every acknowledged batch when the refresher runs.
    let live = live.filter(|_| a.rollups);
    let writer = ingest::BatchWriter::spawn(sink.clone(), ingest::WriterConfig::default());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let refresher = a.rollups.then(|| {
        tokio::spawn(analytics::refresh::run(
            Refresher::new(store.clone()).with_live(live.clone()),
            Duration::from_secs_f64(a.every),
            stop_rx,
        ))
    });
    // Every batch goes through the server's own rule for accepting one (its writer, its
    // live views); in-process, the writer's ceiling is measured, so no request deadline.
    let intake = streamwatch::telemetry::Intake::new(
        writer.handle(),
        live.clone(),
        None,
        Duration::from_secs(3600),
    );
    let batches = Arc::new(wire_batches()?);
    let deadline = Instant::now() + Duration::from_secs_f64(a.duration);
    let start = Instant::now();
    let run_id: u32 = std::process::id();
    let ids = a.session_ids;
    let run_start_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let per_submitter_rate = a.rate.map(|r| r / a.submitters as f64);
    let stride = a.submitters.max(1);
    // Freshness: acknowledged samples go to a poller that runs during the run (a check
    // after the run would add the rest of the run to every early sample's latency).
    let (ack_tx, ack_rx) = tokio::sync::mpsc::unbounded_channel::<Sample>();
    let poller = (a.rate.is_some() && a.rollups).then(|| {
        let store_args = (
            a.store.engine,
            a.store.clickhouse_url.clone(),
            a.store.database.clone(),
            a.store.data_dir.clone(),
        );
        tokio::spawn(poll_visible(store_args, Some(OWNER), ack_rx, deadline))
    });
    let mut tasks = Vec::new();
    for w in 0..a.submitters {
        let intake = intake.clone();
        let ack_tx = ack_tx.clone();
        let batches = batches.clone();
        tasks.push(tokio::spawn(async move {
            let mut events = 0u64;
            let mut i = w;
            let mut next = Instant::now();
            while Instant::now() < deadline {
                let (b, user_agent) = &batches[i % batches.len()];
                // A fresh session per pass over the fleet, so nothing dedups away.
                let pass = i / batches.len();
                let mut b = b.clone();
                b.session_id = match ids {
                    // SDK 0.2.0's ids (UUIDv7) begin with the session's start time: a
                    // pass's sessions sort after the previous pass's, as later starts do.
                    SessionIds::TimeOrdered => {
                        format!("{:012x}-{}", run_start_ms + pass as u64, b.session_id)
                    }
                    // SDK 0.1.0's ids (UUIDv4): spread over the whole key range.
                    SessionIds::Random => format!("{}-r{run_id}-p{pass}", b.session_id),
                };
                let n = b.events.len() as u64;
                if let Some(r) = per_submitter_rate {
                    next += Duration::from_secs_f64(n as f64 / r);
                    tokio::time::sleep_until(next.into()).await;
                }
                let sample = (per_submitter_rate.is_some() && i % 50 == 0).then(|| {
                    let last_ts = b.events.iter().map(|e| e.ts_ms).max().unwrap_or(0);
                    (b.session_id.clone(), last_ts)
                });
                let stored = intake
                    .accept(OWNER, b, user_agent.as_deref().map(str::as_bytes))
                    .await;
                if stored.is_ok() {
                    events += n;
                    if let Some((session, last_ts)) = sample {
                        let _ = ack_tx.send((session, last_ts, Instant::now()));
                    }
                }
                i += stride;
            }
            events
        }));
    }
    drop(ack_tx);
    let mut events = 0;
    for t in tasks {
        events += t.await?;
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "ingest: {events} events in {secs:.1} s = {:.0} events/s (rollups {})",
        events as f64 / secs,
        a.rollups
    );
    if let Some(p) = poller {
        let (lat, missing) = p.await??;
        println!("{}", summary("freshness ack → visible", lat));
        if missing > 0 {
            println!("  {missing} samples not visible 60 s after the run");
        }
    }
    let _ = stop_tx.send(true);
    if let Some(r) = refresher {
        r.await?;
    }
    writer.shutdown().await;
    Ok(())
}

/// A fleet batch's request: its body, where its session id's pass prefix goes, its
/// player's `User-Agent`, and (real time) when it is due after the run's start.
struct Request {
    body: Vec<u8>,
    prefix_at: usize,
    user_agent: Option<hyper::header::HeaderValue>,
    events: u64,
    /// Its latest event's `ts` (freshness: the view reflects it once its `endedAt` does).
    last_ts: i64,
    due: Duration,
}

/// The requests each connection sends, in fleet order, a session's all on one connection
/// (sessions dealt to the connections in the order they first appear): a player sends its
/// batches one after the other. (Dealing requests rather than sessions put a view's
/// consecutive batches on different connections at the same moment, acknowledged in any
/// order, which no player does.)
fn lanes(requests: &[Request], connections: usize) -> Vec<Vec<usize>> {
    let mut lanes = vec![Vec::new(); connections.max(1)];
    let mut dealt: std::collections::HashMap<&[u8], usize> = std::collections::HashMap::new();
    for (i, r) in requests.iter().enumerate() {
        let id = &r.body[r.prefix_at..];
        let id = &id[..id.iter().position(|&c| c == b'"').unwrap_or(id.len())];
        let next = dealt.len() % lanes.len();
        let lane = *dealt.entry(id).or_insert(next);
        lanes[lane].push(i);
    }
    lanes
}

/// Hex digits of the pass prefix of a session id (as `qoe ingest`'s time-ordered ids).
const PREFIX_LEN: usize = 12;

/// Wall-clock epoch milliseconds.
fn now_epoch_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The request of one fleet batch: the body with its session id prefixed by `prefix`
/// (fixed width, so passes can overwrite it).
fn request(
    b: &mut analytics::fleet::GenBatch,
    key: &str,
    prefix: u64,
    due: Duration,
) -> Result<Request> {
    b.session_id = format!("{prefix:012x}-{}", b.session_id);
    let body = b.wire_json(key).into_bytes();
    let marker = br#""sessionId":""#;
    let prefix_at = body
        .windows(marker.len())
        .position(|w| w == marker)
        .map(|i| i + marker.len())
        .context("body without sessionId")?;
    let user_agent = b
        .user_agent
        .as_deref()
        .map(hyper::header::HeaderValue::from_str)
        .transpose()
        .context("user agent")?;
    Ok(Request {
        body,
        prefix_at,
        user_agent,
        events: b.events.len() as u64,
        last_ts: b.events.iter().map(|e| e.ts_ms).max().unwrap_or(0),
        due,
    })
}

/// How long before a real-time run views start: most are still playing when it opens
/// (a view's watch time is log-normal around 4 minutes, 95 % under 20).
const REAL_TIME_LEAD: Duration = Duration::from_secs(1_200);

/// The requests of a real-time run of `total`: realistic views starting uniformly from
/// [`REAL_TIME_LEAD`] before the run to its end, about `rate` events/s once the views of
/// every age are playing, each batch due at its own session time (its last event plus
/// 250 ms, the SDK's send after a flush). Views last as long as they would and send a
/// batch every 10 s of their playback or so. Only the batches due within the run are
/// sent: views that began before it are in the store from the run's start on (their
/// earlier events missing, so their derivations read fewer events than a fleet that had
/// been running). A session id begins with its view's start (ms, hex), as SDK 0.2.0's
/// UUIDv7 ids do. Generated 100,000 views at a time (memory).
fn real_time_requests(key: &str, rate: f64, total: Duration) -> Result<Vec<Request>> {
    const CHUNK: usize = 100_000;
    let sample = ingest_batches();
    let per_view = sample.iter().map(|b| b.events.len()).sum::<usize>() as f64 / 4_000.0;
    let views = (rate / per_view * (REAL_TIME_LEAD + total).as_secs_f64()).ceil() as usize;
    let now_ms = now_epoch_ms() as i64;
    let mut out = Vec::new();
    for chunk in 0..views.div_ceil(CHUNK) {
        let cfg = FleetConfig {
            contents: 10_000,
            start_ms: now_ms - REAL_TIME_LEAD.as_millis() as i64,
            span_ms: (REAL_TIME_LEAD + total).as_millis() as i64,
            ..FleetConfig::realistic(7 + chunk as u64, CHUNK.min(views - chunk * CHUNK))
        };
        let batches = Fleet::generate(&cfg).batches;
        let mut started: std::collections::HashMap<String, i64> = Default::default();
        for b in &batches {
            let first = b.events.iter().map(|e| e.ts_ms).min().unwrap_or(now_ms);
            let t = started.entry(b.session_id.clone()).or_insert(first);
            *t = (*t).min(first);
        }
        for mut b in batches {
            let last = b.events.iter().map(|e| e.ts_ms).max().unwrap_or(now_ms);
            let Ok(due) = u64::try_from(last + 250 - now_ms).map(Duration::from_millis) else {
                continue;
            };
            if due < total {
                let view_start = started.get(&b.session_id).copied().unwrap_or(now_ms);
                b.session_id = format!("{chunk:04x}-{}", b.session_id);
                out.push(request(&mut b, key, view_start.max(0) as u64, due)?);
            }
        }
        eprintln!(
            "generated {} of {views} views",
            (chunk * CHUNK + CHUNK).min(views)
        );
    }
    out.sort_by_key(|r| r.due);
    Ok(out)
}

/// CPU seconds (user + system) of process `pid` so far (`/proc/<pid>/stat`).
fn cpu_s(pid: &str) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return f64::NAN;
    };
    // The fields after the parenthesised command name; utime and stime are 14 and 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// Posts one request on `conn` (reopened when closed); `Err` names what went wrong.
async fn post(
    conn: &mut Option<bench::HttpConn>,
    addr: &str,
    head: (&str, &str, &str),
    r: &Request,
    body: Vec<u8>,
) -> Result<(), String> {
    use http_body_util::BodyExt as _;

    let (path, host, auth) = head;
    if conn.as_ref().is_none_or(|c| c.sender.is_closed()) {
        match bench::HttpConn::open(addr).await {
            Ok(c) => *conn = Some(c),
            Err(e) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                return Err(format!("transport: {e:#}"));
            }
        }
    }
    let Some(c) = conn.as_mut() else {
        return Err("no connection".to_owned());
    };
    let mut req = hyper::Request::post(path)
        .header("host", host)
        .header("authorization", auth)
        .header("content-type", "application/json");
    if let Some(ua) = &r.user_agent {
        req = req.header("user-agent", ua);
    }
    let req = req
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .map_err(|e| format!("request: {e}"))?;
    let res = async {
        c.sender.ready().await?;
        c.sender.send_request(req).await
    }
    .await;
    let outcome = match res {
        Ok(res) => {
            let status = res.status().as_u16();
            match res.into_body().collect().await {
                Ok(_) if status == 204 => Ok(()),
                Ok(_) => Err(format!("status {status}")),
                Err(e) => Err(format!("transport: {e}")),
            }
        }
        Err(e) => Err(format!("transport: {e}")),
    };
    if outcome.as_ref().is_err_and(|e| e.starts_with("transport")) {
        *conn = None;
    }
    outcome
}

/// Posts the realistic fleet to the service (see the module doc).
async fn http(a: HttpArgs) -> Result<()> {
    anyhow::ensure!(a.connections > 0, "--connections must be positive");
    let base = reqwest::Url::parse(&a.url).context("--url")?;
    let host = base.host_str().context("--url has no host")?.to_owned();
    let addr = format!("{host}:{}", base.port_or_known_default().unwrap_or(80));
    let path = format!("{}/api/v1/telemetry", base.path().trim_end_matches('/'));
    let auth = format!("Bearer {}", a.key);
    let warmup = Duration::from_secs_f64(a.warmup);
    let total = warmup + Duration::from_secs_f64(a.duration);
    let real_time = match (a.real_time, a.rate) {
        (false, _) => false,
        (true, Some(_)) => true,
        (true, None) => anyhow::bail!("--real-time needs --rate"),
    };
    // Passes: each batch's body is built once with a placeholder prefix; a request is a
    // copy with the pass written there, so every pass over the fleet is fresh sessions
    // whose ids sort after the previous pass's, as SDK 0.2.0's time-ordered ids do.
    // Real time: one fleet as long as the run, every session once.
    let requests: Arc<Vec<Request>> = Arc::new(if real_time {
        real_time_requests(&a.key, a.rate.unwrap_or(0.0), total)?
    } else {
        ingest_batches()
            .iter_mut()
            .map(|b| request(b, &a.key, 0, Duration::ZERO))
            .collect::<Result<_>>()?
    });
    let total_events: u64 = requests.iter().map(|r| r.events).sum();
    let total_bytes: usize = requests.iter().map(|r| r.body.len()).sum();
    println!(
        "fleet: {} requests{}, {:.2} events and {:.0} bytes per request on average",
        requests.len(),
        if real_time {
            " in real time"
        } else {
            " per pass"
        },
        total_events as f64 / requests.len().max(1) as f64,
        total_bytes as f64 / requests.len().max(1) as f64
    );
    let start = Instant::now();
    let measured_from = start + warmup;
    let deadline = start + total;
    let per_connection_rate = a.rate.map(|r| r / a.connections as f64);
    let (ack_tx, ack_rx) = tokio::sync::mpsc::unbounded_channel::<Sample>();
    let poller = match (&a.freshness_database, a.rate) {
        (Some(db), Some(_)) => Some(tokio::spawn(poll_visible(
            (
                EngineArg::Clickhouse,
                a.clickhouse_url.clone(),
                db.clone(),
                std::path::PathBuf::new(),
            ),
            None,
            ack_rx,
            deadline,
        ))),
        _ => None,
    };
    // CPU of the watched processes (the server, ClickHouse) and of this one over the
    // measured window, read when it opens.
    let mut pids = a.watch_pid.clone();
    pids.push(std::process::id().to_string());
    let cpu_window = {
        let pids = pids.clone();
        tokio::spawn(async move {
            let read = || pids.iter().map(|p| cpu_s(p)).collect::<Vec<f64>>();
            tokio::time::sleep_until(measured_from.into()).await;
            let opened = read();
            tokio::time::sleep_until(deadline.into()).await;
            (opened, read())
        })
    };
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let lanes = Arc::new(lanes(&requests, a.connections));
    let mut tasks = Vec::new();
    for w in 0..a.connections {
        let (requests, ack_tx, next) = (requests.clone(), ack_tx.clone(), next.clone());
        let lanes = lanes.clone();
        let (addr, path, host, auth) = (addr.clone(), path.clone(), host.clone(), auth.clone());
        tasks.push(tokio::spawn(async move {
            let mut events = 0u64;
            let mut errors: std::collections::BTreeMap<String, u64> = Default::default();
            let mut conn: Option<bench::HttpConn> = None;
            let lane = &lanes[w];
            let mut i = 0;
            let mut pass_started = 0u64;
            let mut paced = Instant::now();
            let mut sent = 0usize;
            loop {
                let (r, body) = if real_time {
                    // The next request due, whichever connection is free.
                    let index = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(r) = requests.get(index) else { break };
                    tokio::time::sleep_until((start + r.due).into()).await;
                    // Past capacity the requests fall behind their times: the run still
                    // ends on time.
                    if Instant::now() >= deadline {
                        break;
                    }
                    (r, r.body.clone())
                } else {
                    if Instant::now() >= deadline || lane.is_empty() {
                        break;
                    }
                    if i % lane.len() == 0 {
                        // A new pass over the lane: its sessions start now, and their ids
                        // begin with that time, as SDK 0.2.0's do (whichever connection).
                        pass_started = now_epoch_ms().max(pass_started + 1);
                    }
                    let r = &requests[lane[i % lane.len()]];
                    i += 1;
                    if let Some(rate) = per_connection_rate {
                        paced += Duration::from_secs_f64(r.events as f64 / rate);
                        tokio::time::sleep_until(paced.into()).await;
                    }
                    let mut body = r.body.clone();
                    let prefix = format!("{pass_started:012x}");
                    body[r.prefix_at..r.prefix_at + PREFIX_LEN].copy_from_slice(prefix.as_bytes());
                    (r, body)
                };
                // Every 50th request of a connection in the window is a freshness sample.
                let session = (a.rate.is_some() && sent.is_multiple_of(50)).then(|| {
                    let id = &body[r.prefix_at..];
                    let end = id.iter().position(|&c| c == b'"').unwrap_or(0);
                    String::from_utf8_lossy(&id[..end]).into_owned()
                });
                sent += 1;
                match post(&mut conn, &addr, (&path, &host, &auth), r, body).await {
                    Ok(()) => {
                        let now = Instant::now();
                        if now >= measured_from && now <= deadline {
                            events += r.events;
                            if let Some(s) = session {
                                let _ = ack_tx.send((s, r.last_ts, now));
                            }
                        }
                    }
                    Err(e) => *errors.entry(e).or_default() += 1,
                }
            }
            (events, errors)
        }));
    }
    drop(ack_tx);
    let (mut events, mut errors) = (0u64, std::collections::BTreeMap::<String, u64>::new());
    for t in tasks {
        let (n, e) = t.await?;
        events += n;
        for (k, v) in e {
            *errors.entry(k).or_default() += v;
        }
    }
    let (cpu_start, cpu_end) = cpu_window.await?;
    let secs = (deadline - measured_from).as_secs_f64();
    let eps = events as f64 / secs.max(1e-9);
    println!(
        "http: {events} events acknowledged in {secs:.1} s = {eps:.0} events/s ({} connections{})",
        a.connections,
        if a.warmup > 0.0 {
            format!(", after {:.0} s of warm-up", a.warmup)
        } else {
            String::new()
        }
    );
    for (i, pid) in pids.iter().enumerate() {
        let us = (cpu_end[i] - cpu_start[i]) / events.max(1) as f64 * 1e6;
        let who = if i + 1 == pids.len() {
            "qoe (this client)".to_owned()
        } else {
            format!("pid {pid}")
        };
        println!("  cpu {who}: {us:.2} µs per event");
    }
    for (e, n) in &errors {
        println!("  {n} × {e}");
    }
    if let Some(p) = poller {
        let (lat, missing) = p.await??;
        println!("{}", summary("freshness ack → visible", lat));
        if missing > 0 {
            println!("  {missing} samples not visible 60 s after the run");
        }
    }
    if a.json {
        let errors: u64 = errors.values().sum();
        println!(
            "{}",
            serde_json::json!({ "mode": "qoe-http", "events": events, "events_per_s": eps, "errors": errors })
        );
    }
    Ok(())
}

/// A freshness sample: an acknowledged batch's session, its latest event's `ts`, and when
/// it was acknowledged.
type Sample = (String, i64, Instant);

/// Polls `qoe_views` (what the views list reads) every 100 ms for the acknowledged
/// samples not yet visible, one query per round: a sample is visible once its view's row
/// ends at or after the batch's latest event (a row from the view's earlier batches does
/// not count). Returns the latencies (ack → first round that sees it, so up to 100 ms +
/// one query late) and how many never showed within 60 s after `deadline`.
async fn poll_visible(
    store: (EngineArg, String, String, std::path::PathBuf),
    owner: Option<&'static str>,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Sample>,
    deadline: Instant,
) -> Result<(Vec<f64>, usize)> {
    let (engine, url, database, dir) = store;
    let ch = ingest::ClickHouseConfig::new(&url, &database).client();
    let pool = match engine {
        EngineArg::Sqlite => Some(
            sqlx::sqlite::SqlitePoolOptions::new()
                .max_connections(1)
                .connect_with(
                    sqlx::sqlite::SqliteConnectOptions::new()
                        .filename(dir.join("telemetry.db"))
                        .read_only(true),
                )
                .await?,
        ),
        EngineArg::Clickhouse => None,
    };
    // Session → the samples of it not yet visible (latest ts, acknowledged at).
    let mut pending: std::collections::HashMap<String, Vec<(i64, Instant)>> = Default::default();
    let mut lat = Vec::new();
    let mut open = true;
    let horizon = deadline + Duration::from_secs(60);
    while (open || !pending.is_empty()) && Instant::now() < horizon {
        loop {
            match rx.try_recv() {
                Ok((s, ts, at)) => pending.entry(s).or_default().push((ts, at)),
                Err(tokio::sync::mpsc::error::TryRecvError::Empty) => break,
                Err(tokio::sync::mpsc::error::TryRecvError::Disconnected) => {
                    open = false;
                    break;
                }
            }
        }
        if !pending.is_empty() {
            let list = pending
                .keys()
                .map(|s| format!("'{}'", s.replace('\'', "''")))
                .collect::<Vec<_>>()
                .join(", ");
            // Session ids are unique to the run, so without an owner (the server's user
            // id, over HTTP) the session alone finds the view.
            let owner = owner.map_or(String::new(), |o| format!("owner = '{o}' AND "));
            let sql = format!(
                "SELECT session_id, max(ended_at) AS ended FROM qoe_views \
                 WHERE {owner}session_id IN ({list}) GROUP BY session_id"
            );
            let seen: Vec<(String, i64)> = match &pool {
                None => {
                    #[derive(clickhouse::Row, serde::Deserialize)]
                    struct S {
                        session_id: String,
                        ended: i64,
                    }
                    // Thousands of pending sessions outgrow the default 256 KiB query.
                    ch.query(&sql)
                        .with_setting(
                            "max_query_size",
                            (sql.len() + 4096).max(262_144).to_string(),
                        )
                        .fetch_all::<S>()
                        .await?
                        .into_iter()
                        .map(|r| (r.session_id, r.ended))
                        .collect()
                }
                Some(p) => sqlx::query_as(&sql).fetch_all(p).await?,
            };
            let now = Instant::now();
            for (s, ended) in seen {
                if let Some(samples) = pending.get_mut(&s) {
                    samples.retain(|&(ts, at)| {
                        let visible = ended >= ts;
                        if visible {
                            lat.push((now - at).as_secs_f64() * 1000.0);
                        }
                        !visible
                    });
                    if samples.is_empty() {
                        pending.remove(&s);
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if let Some(p) = pool {
        p.close().await;
    }
    Ok((lat, pending.values().map(Vec::len).sum()))
}

#[tokio::main]
async fn main() -> Result<()> {
    // RUST_LOG=analytics=debug prints each refresher step (candidates, derived, elapsed).
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().mode {
        Mode::Routes(a) => routes(a).await,
        Mode::Ingest(a) => ingest(a).await,
        Mode::Http(a) => http(a).await,
    }
}
