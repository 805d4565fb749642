//! Telemetry load generator.
//!
//! `loadgen http`: simulated players post realistic batches (50 events, one
//! session per player, every event type) to `POST {url}/api/v1/telemetry` over N
//! connections, flat out or at a fixed total rate, for a duration; prints events/s
//! acknowledged (204), p50/p95/p99 latency and errors.
//!
//! `loadgen direct`: generates the same rows and times bulk inserts straight into
//! a sink (ClickHouse or SQLite) through `ingest`, to compare with `http`.
//!
//! Both print one human line block and, with `--json`, one JSON object on the
//! last line for scripts.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bench::HttpConn;
use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(about = "streamwatch telemetry load generator")]
struct Cli {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand, Debug)]
enum Mode {
    /// Post batches to the service's ingest route.
    Http(HttpArgs),
    /// Insert the same rows directly through a sink (no HTTP, no writer).
    Direct(DirectArgs),
    /// Many concurrent submitters of 50-row batches through the group-commit
    /// writer into a sink (no HTTP): the writer's ceiling.
    Writer(WriterArgs),
    /// Time `parse_batch` + `into_rows` on generated batches (CPU only).
    Parse(ParseArgs),
}

#[derive(Parser, Debug)]
struct SinkArgs {
    /// Which sink to insert into.
    #[arg(long, value_enum, default_value = "clickhouse")]
    sink: SinkKind,
    /// ClickHouse HTTP endpoint.
    #[arg(long, env = "CLICKHOUSE_URL", default_value = "http://127.0.0.1:8123")]
    clickhouse_url: String,
    /// ClickHouse database (created when missing; dropped at the end unless --keep).
    #[arg(long, default_value = "loadgen_direct")]
    database: String,
    /// Directory for the SQLite file (a temp dir when absent).
    #[arg(long)]
    data_dir: Option<std::path::PathBuf>,
    /// SQLite commit durability.
    #[arg(long, value_enum, default_value = "full")]
    durability: DurabilityArg,
    /// Keep the database afterwards.
    #[arg(long)]
    keep: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum DurabilityArg {
    Full,
    Normal,
}

#[derive(Parser, Debug)]
struct WriterArgs {
    #[command(flatten)]
    sink: SinkArgs,
    /// Concurrent submitters (simulated requests in flight).
    #[arg(long, default_value_t = 256)]
    submitters: usize,
    /// Rows per submission.
    #[arg(long, default_value_t = 50)]
    batch: usize,
    /// Duration in seconds.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Writes in flight at once in the writer (0: the sink's preference).
    #[arg(long, default_value_t = 0)]
    in_flight: usize,
    /// Print a JSON summary line at the end.
    #[arg(long)]
    json: bool,
}

#[derive(Parser, Debug)]
struct ParseArgs {
    /// Batches to parse.
    #[arg(long, default_value_t = 50_000)]
    batches: usize,
    /// Events per batch.
    #[arg(long, default_value_t = 50)]
    batch: usize,
}

#[derive(Parser, Debug)]
struct HttpArgs {
    /// Service base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    /// API key (sent as bearer and as body apiKey).
    #[arg(long, env = "LOADGEN_API_KEY")]
    key: String,
    /// Concurrent connections (one simulated player each at a time).
    #[arg(long, default_value_t = 256)]
    connections: usize,
    /// Test duration in seconds.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Fixed total rate in events/s (open loop; latency measured from the
    /// scheduled send time). Flat out when absent.
    #[arg(long)]
    rate: Option<f64>,
    /// Events per batch.
    #[arg(long, default_value_t = 50)]
    batch: usize,
    /// Batches per player session before it ends and a new session starts.
    #[arg(long, default_value_t = 20)]
    batches_per_session: usize,
    /// Print a JSON summary line at the end.
    #[arg(long)]
    json: bool,
    /// Also print, for each second of the run with a batch slower than this many ms, how
    /// many were and the slowest (when in the run a tail happened, to line up with the
    /// server's own metrics). The first line gives the run's start (Unix ms).
    #[arg(long)]
    slow_ms: Option<u32>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum SinkKind {
    Clickhouse,
    Sqlite,
}

#[derive(Parser, Debug)]
struct DirectArgs {
    #[command(flatten)]
    sink: SinkArgs,
    /// Total rows to insert.
    #[arg(long, default_value_t = 1_000_000)]
    rows: usize,
    /// Rows per insert.
    #[arg(long, default_value_t = 10_000)]
    batch_rows: usize,
    /// Inserts in flight at once.
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// Print a JSON summary line at the end.
    #[arg(long)]
    json: bool,
}

#[tokio::main]
async fn main() -> Result<()> {
    match Cli::parse().mode {
        Mode::Http(a) => http(a).await,
        Mode::Direct(a) => direct(a).await,
        Mode::Writer(a) => writer(a).await,
        Mode::Parse(a) => parse(a),
    }
}

// ---------------------------------------------------------------- batches

/// Event mix per 50-event batch of a playing session, roughly what an ABR player
/// emits: frequent quality switches and stalls, some pauses, rare errors.
/// `playback_start` opens a session and `session_end` closes it.
const MIX: &[(&str, u32)] = &[
    ("quality_change", 30),
    ("rebuffer_start", 14),
    ("rebuffer_end", 14),
    ("playback_pause", 18),
    ("playback_resume", 18),
    ("error", 6),
];

/// A small, fast PRNG (xorshift64*); the load generator must not be the bottleneck.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// One simulated player: a session id and a clock that only moves forward, so
/// every event has a distinct (sessionId, ts, type).
struct Player {
    rng: Rng,
    session: String,
    batch_no: usize,
    batches_per_session: usize,
    ts_ms: i64,
    position_ms: u64,
    worker: usize,
    sessions_started: u64,
}

impl Player {
    fn new(worker: usize, seed: u64, batches_per_session: usize) -> Self {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let mut p = Self {
            rng: Rng(seed | 1),
            session: String::new(),
            batch_no: 0,
            batches_per_session: batches_per_session.max(1),
            ts_ms: now,
            position_ms: 0,
            worker,
            sessions_started: 0,
        };
        p.new_session();
        p
    }

    fn new_session(&mut self) {
        self.sessions_started += 1;
        let r = self.rng.next();
        self.session = format!("lg-{}-{:x}-{:x}", self.worker, self.sessions_started, r);
        self.batch_no = 0;
        self.position_ms = 0;
    }

    /// Writes the next batch's JSON body into `out`.
    fn next_body(&mut self, api_key: &str, events: usize, out: &mut String) {
        self.next_body_with(api_key, events, out, |_, _| {});
    }

    /// Like [`Player::next_body`], reporting each event's `ts` as (byte offset of
    /// its ISO string in `out`, epoch ms).
    fn next_body_with(
        &mut self,
        api_key: &str,
        events: usize,
        out: &mut String,
        mut on_ts: impl FnMut(usize, i64),
    ) {
        out.clear();
        let _ = write!(
            out,
            r#"{{"apiKey":"{api_key}","sessionId":"{}","events":["#,
            self.session
        );
        let last_batch = self.batch_no + 1 == self.batches_per_session;
        let total: u32 = MIX.iter().map(|m| m.1).sum();
        for i in 0..events {
            let t = if self.batch_no == 0 && i == 0 {
                "playback_start"
            } else if last_batch && i + 1 == events {
                "session_end"
            } else {
                let mut pick = self.rng.below(u64::from(total)) as u32;
                let mut chosen = MIX[0].0;
                for (name, w) in MIX {
                    if pick < *w {
                        chosen = name;
                        break;
                    }
                    pick -= w;
                }
                chosen
            };
            self.ts_ms += 1 + self.rng.below(400) as i64;
            self.position_ms += 200 + self.rng.below(400);
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, r#"{{"type":"{t}","ts":""#);
            on_ts(out.len(), self.ts_ms);
            let _ = write!(
                out,
                r#"{}","payload":"#,
                ingest::time::format_ms(self.ts_ms)
            );
            let pos = self.position_ms;
            let buf = self.rng.below(30_000);
            match t {
                "playback_start" => {
                    let _ = write!(
                        out,
                        r#"{{"positionMs":0,"durationMs":5400000,"contentId":"content-{}"}}"#,
                        self.rng.below(500)
                    );
                }
                "quality_change" => {
                    const R: [(&str, u32); 4] = [
                        ("360p", 800_000),
                        ("480p", 1_400_000),
                        ("720p", 2_800_000),
                        ("1080p", 5_000_000),
                    ];
                    let a = self.rng.below(4) as usize;
                    let b = (a + 1 + self.rng.below(3) as usize) % 4;
                    let _ = write!(
                        out,
                        r#"{{"from":"{}","to":"{}","bitrate":{}}}"#,
                        R[a].0, R[b].0, R[b].1
                    );
                }
                "error" => {
                    let _ = write!(
                        out,
                        r#"{{"code":"MEDIA_ERR_NETWORK","message":"segment {} failed to load","fatal":false}}"#,
                        pos / 6000
                    );
                }
                "session_end" => {
                    let _ = write!(out, r#"{{"reason":"ended","durationMs":{pos}}}"#);
                }
                _ => {
                    let _ = write!(out, r#"{{"positionMs":{pos},"bufferedMs":{buf}}}"#);
                }
            }
            out.push('}');
        }
        out.push_str("]}");
        self.batch_no += 1;
        if last_batch {
            self.new_session();
        }
    }
}

// ---------------------------------------------------------------- http mode

/// CPU seconds (user + system) this process has used so far, from
/// `/proc/self/stat` (0 where that file does not exist).
fn self_cpu_s() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the parenthesised command name; utime and stime are 14 and 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// Width of the session ids written into templates (`lg-` + 21 hex digits).
const SESSION_ID_LEN: usize = 24;

/// A pre-built request body with the byte offsets of its session id and of each
/// event's `ts`, so a request is a copy plus a few patches, not a JSON build.
struct Template {
    body: Vec<u8>,
    session_at: usize,
    /// (offset of the 24-byte ISO timestamp, ms after the session's base time).
    ts_at: Vec<(usize, i64)>,
}

/// Builds the templates of one simulated session: `batches_per_session` bodies
/// with the generator's event mix, `playback_start` first and `session_end` last.
fn build_templates(
    key: &str,
    batch: usize,
    batches_per_session: usize,
    seed: u64,
) -> Vec<Template> {
    let mut player = Player::new(0, seed, batches_per_session);
    player.session = "X".repeat(SESSION_ID_LEN);
    let base = player.ts_ms;
    let mut body = String::new();
    (0..batches_per_session.max(1))
        .map(|_| {
            let mut ts = Vec::with_capacity(batch);
            player.next_body_with(key, batch, &mut body, |at, ms| ts.push((at, ms - base)));
            player.session = "X".repeat(SESSION_ID_LEN);
            let session_at = body.find(r#""sessionId":""#).map_or(0, |i| i + 13);
            Template {
                body: body.as_bytes().to_vec(),
                session_at,
                ts_at: ts,
            }
        })
        .collect()
}

/// Writes `ms` as `YYYY-MM-DDTHH:MM:SS.sssZ` (24 bytes) into `out`.
fn put_iso_ms(out: &mut [u8], ms: i64) {
    let s = ingest::time::format_ms(ms);
    out[..24].copy_from_slice(&s.as_bytes()[..24]);
}

/// Fills `out` with the `n`-th session's id: distinct per (worker, n), fixed width.
fn put_session_id(out: &mut [u8], worker: usize, n: u64, salt: u64) {
    let id = format!("lg-{:05x}{:016x}", worker & 0xf_ffff, n ^ salt);
    out[..SESSION_ID_LEN].copy_from_slice(&id.as_bytes()[..SESSION_ID_LEN]);
}

#[derive(Default)]
struct Stats {
    ok_batches: u64,
    latencies_us: Vec<u32>,
    /// Second of the run → (batches slower than `--slow-ms`, slowest µs).
    slow: std::collections::BTreeMap<u32, (u32, u32)>,
    errors: std::collections::BTreeMap<String, u64>,
}

impl Stats {
    fn error(&mut self, e: String) {
        *self.errors.entry(e).or_default() += 1;
    }

    /// Counts `n` batches slower than `--slow-ms` in `second` of the run, the slowest `us`.
    fn slow(&mut self, second: u32, n: u32, us: u32) {
        let s = self.slow.entry(second).or_default();
        s.0 += n;
        s.1 = s.1.max(us);
    }
}

async fn http(a: HttpArgs) -> Result<()> {
    use http_body_util::BodyExt as _;

    if a.connections == 0 || a.batch == 0 {
        bail!("--connections and --batch must be positive");
    }
    let base = reqwest::Url::parse(&a.url).context("--url")?;
    let host = base.host_str().context("--url has no host")?.to_owned();
    let port = base.port_or_known_default().unwrap_or(80);
    let addr = format!("{host}:{port}");
    let path = format!("{}/api/v1/telemetry", base.path().trim_end_matches('/'));
    let auth = format!("Bearer {}", a.key);
    let duration = Duration::from_secs_f64(a.duration);
    // Per-connection interval between sends in fixed-rate mode.
    let period = a.rate.map(|r| {
        let batches_per_s = r / a.batch as f64;
        Duration::from_secs_f64(a.connections as f64 / batches_per_s.max(1e-9))
    });
    // A few template sessions; connections start at different ones. Every request
    // gets its connection's current session id (new every `batches_per_session`
    // batches) and timestamps moved to that session's own clock, so no two
    // requests carry the same (sessionId, ts, type).
    let variants = 8;
    let templates: Arc<Vec<Vec<Template>>> = Arc::new(
        (0..variants)
            .map(|v| build_templates(&a.key, a.batch, a.batches_per_session, 0x5eed + v as u64))
            .collect(),
    );
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let salt = (now_ms as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let cpu0 = self_cpu_s();
    let start = Instant::now();
    let deadline = start + duration;
    let conns = a.connections;
    let slow_us = a.slow_ms.map(|ms| ms.saturating_mul(1000));
    let mut tasks = Vec::with_capacity(conns);
    for w in 0..conns {
        let (addr, path, auth, host) = (addr.clone(), path.clone(), auth.clone(), host.clone());
        let templates = templates.clone();
        tasks.push(tokio::spawn(async move {
            let mut stats = Stats::default();
            let mut conn: Option<HttpConn> = None;
            let session_set = &templates[w % templates.len()];
            let mut sessions = 0u64;
            let mut batch_no = 0usize;
            let mut session_base = now_ms;
            let mut session_id = [0u8; SESSION_ID_LEN];
            put_session_id(&mut session_id, w, sessions, salt);
            // Spread the fixed-rate schedule of the connections over one period.
            let mut next = period.map(|p| start + p.mul_f64(w as f64 / conns as f64));
            loop {
                let scheduled = match (period, next) {
                    (Some(p), Some(t)) => {
                        if t >= deadline {
                            break;
                        }
                        tokio::time::sleep_until(t.into()).await;
                        next = Some(t + p);
                        t
                    }
                    _ => {
                        let now = Instant::now();
                        if now >= deadline {
                            break;
                        }
                        now
                    }
                };
                let tpl = &session_set[batch_no];
                let mut body = tpl.body.clone();
                body[tpl.session_at..tpl.session_at + SESSION_ID_LEN].copy_from_slice(&session_id);
                for &(at, offset) in &tpl.ts_at {
                    put_iso_ms(&mut body[at..at + 24], session_base + offset);
                }
                batch_no += 1;
                if batch_no == session_set.len() {
                    batch_no = 0;
                    sessions += 1;
                    put_session_id(&mut session_id, w, sessions, salt);
                    session_base += 1_000;
                }
                if conn.as_ref().is_none_or(|c| c.sender.is_closed()) {
                    match HttpConn::open(&addr).await {
                        Ok(c) => conn = Some(c),
                        Err(e) => {
                            stats.error(format!("transport: {e:#}"));
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    }
                }
                let Some(c) = conn.as_mut() else { continue };
                let req = hyper::Request::post(path.as_str())
                    .header("host", host.as_str())
                    .header("authorization", auth.as_str())
                    .header("content-type", "application/json")
                    .body(http_body_util::Full::new(bytes::Bytes::from(body)));
                let req = match req {
                    Ok(r) => r,
                    Err(e) => {
                        stats.error(format!("request: {e}"));
                        continue;
                    }
                };
                let res = async {
                    c.sender.ready().await?;
                    c.sender.send_request(req).await
                }
                .await;
                match res {
                    Ok(r) => {
                        let status = r.status().as_u16();
                        let body = r.into_body().collect().await.map(|b| b.to_bytes());
                        let us = scheduled.elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
                        match body {
                            Ok(_) if status == 204 => {
                                stats.ok_batches += 1;
                                stats.latencies_us.push(us);
                                if slow_us.is_some_and(|t| us > t) {
                                    stats.slow((scheduled - start).as_secs() as u32, 1, us);
                                }
                            }
                            Ok(text) => stats.error(format!(
                                "{status} {}",
                                String::from_utf8_lossy(&text)
                                    .chars()
                                    .take(120)
                                    .collect::<String>()
                            )),
                            Err(e) => {
                                conn = None;
                                stats.error(format!("transport: {e}"));
                            }
                        }
                    }
                    Err(e) => {
                        conn = None;
                        stats.error(format!("transport: {e}"));
                    }
                }
            }
            stats
        }));
    }
    let mut all = Stats::default();
    for t in tasks {
        let s = t.await.context("worker panicked")?;
        all.ok_batches += s.ok_batches;
        all.latencies_us.extend(s.latencies_us);
        for (second, (n, max)) in s.slow {
            all.slow(second, n, max);
        }
        for (k, v) in s.errors {
            *all.errors.entry(k).or_default() += v;
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let cpu_s = self_cpu_s() - cpu0;
    all.latencies_us.sort_unstable();
    let pct = |p: f64| -> f64 {
        if all.latencies_us.is_empty() {
            return 0.0;
        }
        let i = ((all.latencies_us.len() as f64 - 1.0) * p).round() as usize;
        f64::from(all.latencies_us[i]) / 1000.0
    };
    let events = all.ok_batches * a.batch as u64;
    let eps = events as f64 / elapsed;
    let errors: u64 = all.errors.values().sum();
    println!(
        "mode=http connections={} batch={} rate={} duration={:.1}s",
        a.connections,
        a.batch,
        a.rate.map_or("max".to_owned(), |r| format!("{r:.0}")),
        elapsed
    );
    println!(
        "acknowledged: {} batches, {} events, {:.0} events/s",
        all.ok_batches, events, eps
    );
    println!(
        "latency ms: p50 {:.2}  p95 {:.2}  p99 {:.2}  max {:.2}",
        pct(0.50),
        pct(0.95),
        pct(0.99),
        pct(1.0)
    );
    println!(
        "errors: {errors}   loadgen cpu: {cpu_s:.1}s ({:.0}% of one core)",
        100.0 * cpu_s / elapsed
    );
    for (k, v) in &all.errors {
        println!("  {v} × {k}");
    }
    if let Some(ms) = a.slow_ms {
        println!("slower than {ms} ms, by second of the run (started at Unix ms {now_ms}):");
        for (second, (n, max)) in &all.slow {
            println!(
                "  t={second:>3}s  {n:>5} batches, slowest {:.1} ms",
                f64::from(*max) / 1000.0
            );
        }
    }
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "mode": "http", "connections": a.connections, "batch": a.batch,
                "rate": a.rate, "seconds": elapsed, "batches": all.ok_batches,
                "events": events, "events_per_s": eps, "errors": errors,
                "p50_ms": pct(0.5), "p95_ms": pct(0.95), "p99_ms": pct(0.99), "max_ms": pct(1.0),
                "loadgen_cpu_s": cpu_s
            })
        );
    }
    Ok(())
}

// ---------------------------------------------------------------- direct mode

/// Generates `n` rows with the same generator and validator as the HTTP mode.
fn generate_rows(n: usize, batch: usize) -> Result<Vec<ingest::EventRow>> {
    let mut rows = Vec::with_capacity(n);
    let players = 256;
    let mut ps: Vec<Player> = (0..players)
        .map(|w| Player::new(w, 0xabcdef ^ ((w as u64 + 7) * 31), 20))
        .collect();
    let mut body = String::new();
    let mut i = 0;
    while rows.len() < n {
        let p = &mut ps[i % players];
        i += 1;
        p.next_body("svc_loadgen", batch, &mut body);
        let mut bytes = body.clone().into_bytes();
        let parsed = ingest::parse_batch(&mut bytes)
            .map_err(|e| anyhow::anyhow!("generator produced an invalid batch: {e}"))?;
        rows.extend(parsed.into_rows("loadgen-owner"));
    }
    rows.truncate(n);
    Ok(rows)
}

/// What to remove after a run.
enum Cleanup {
    Nothing,
    DropDatabase { url: String, database: String },
    RemoveDir(std::path::PathBuf),
}

impl Cleanup {
    async fn run(self) {
        match self {
            Cleanup::Nothing => {}
            Cleanup::DropDatabase { url, database } => {
                let _ = reqwest::Client::new()
                    .post(format!("{}/", url.trim_end_matches('/')))
                    .body(format!("DROP DATABASE IF EXISTS {database}"))
                    .send()
                    .await;
            }
            Cleanup::RemoveDir(dir) => {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }
}

/// An opened sink and how to clean up after it.
struct OpenSink {
    sink: Arc<dyn ingest::EventSink>,
    name: &'static str,
    cleanup: Cleanup,
}

async fn open_sink(a: &SinkArgs) -> Result<OpenSink> {
    match a.sink {
        SinkKind::Clickhouse => {
            let config = ingest::ClickHouseConfig::new(&a.clickhouse_url, &a.database);
            let sink = ingest::ClickHouseSink::connect(&config)
                .await
                .context("clickhouse")?;
            let cleanup = if a.keep {
                Cleanup::Nothing
            } else {
                Cleanup::DropDatabase {
                    url: a.clickhouse_url.clone(),
                    database: a.database.clone(),
                }
            };
            Ok(OpenSink {
                sink: Arc::new(sink),
                name: "clickhouse",
                cleanup,
            })
        }
        SinkKind::Sqlite => {
            let (dir, temp) = match &a.data_dir {
                Some(d) => (d.clone(), false),
                None => (
                    std::env::temp_dir().join(format!("loadgen-sqlite-{}", std::process::id())),
                    true,
                ),
            };
            let durability = match a.durability {
                DurabilityArg::Full => ingest::Durability::Full,
                DurabilityArg::Normal => ingest::Durability::Normal,
            };
            let sink =
                ingest::SqliteSink::open_in_dir_with(&dir, ingest::SqliteOptions { durability })
                    .await
                    .context("sqlite")?;
            let cleanup = if a.keep || !temp {
                Cleanup::Nothing
            } else {
                Cleanup::RemoveDir(dir)
            };
            Ok(OpenSink {
                sink: Arc::new(sink),
                name: "sqlite",
                cleanup,
            })
        }
    }
}

async fn direct(a: DirectArgs) -> Result<()> {
    if a.batch_rows == 0 || a.concurrency == 0 {
        bail!("--batch-rows and --concurrency must be positive");
    }
    let t_gen = Instant::now();
    let rows = generate_rows(a.rows, 50)?;
    let total = rows.len();
    // Cut into the inserts before the clock starts: each write takes its rows by
    // value, and copying them must not count as insert time.
    let mut chunks = Vec::with_capacity(total.div_ceil(a.batch_rows));
    let mut rows = rows.into_iter();
    loop {
        let chunk: Vec<_> = rows.by_ref().take(a.batch_rows).collect();
        if chunk.is_empty() {
            break;
        }
        chunks.push(chunk);
    }
    let gen_s = t_gen.elapsed().as_secs_f64();
    let chunks = Arc::new(std::sync::Mutex::new(chunks.into_iter()));
    let open = open_sink(&a.sink).await?;
    let (sink, name) = (open.sink.clone(), open.name);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..a.concurrency {
        let (sink, chunks) = (sink.clone(), chunks.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let next = chunks.lock().expect("chunk queue").next();
                let Some(chunk) = next else {
                    return Ok::<(), ingest::SinkError>(());
                };
                sink.write(ingest::SinkWrite {
                    rows: chunk,
                    batches: Vec::new(),
                })
                .await?;
            }
        }));
    }
    for t in tasks {
        t.await.context("writer task")?.context("insert failed")?;
    }
    let secs = start.elapsed().as_secs_f64();
    let rps = total as f64 / secs;
    println!(
        "mode=direct sink={name} rows={} batch_rows={} concurrency={} generate={gen_s:.2}s",
        total, a.batch_rows, a.concurrency
    );
    println!("inserted {} rows in {secs:.3}s: {rps:.0} rows/s", total);
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "mode": "direct", "sink": name, "rows": total, "batch_rows": a.batch_rows,
                "concurrency": a.concurrency, "seconds": secs, "rows_per_s": rps
            })
        );
    }
    open.cleanup.run().await;
    Ok(())
}

// ---------------------------------------------------------------- writer mode

async fn writer(a: WriterArgs) -> Result<()> {
    if a.submitters == 0 || a.batch == 0 {
        bail!("--submitters and --batch must be positive");
    }
    // Pre-generate enough submissions for the run so generation is not measured.
    let per_submitter = 4000;
    let open = open_sink(&a.sink).await?;
    let writer = ingest::BatchWriter::spawn(
        open.sink.clone(),
        ingest::WriterConfig {
            max_in_flight: a.in_flight,
            ..ingest::WriterConfig::default()
        },
    );
    let duration = Duration::from_secs_f64(a.duration);
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = Vec::new();
    for w in 0..a.submitters {
        let h = writer.handle();
        let batch = a.batch;
        tasks.push(tokio::spawn(async move {
            let mut player = Player::new(w, 0x51ed ^ ((w as u64 + 3) * 7919), 20);
            let mut body = String::new();
            let mut lat = Vec::new();
            let mut errors = 0u64;
            for _ in 0..per_submitter {
                if Instant::now() >= deadline {
                    break;
                }
                player.next_body("svc_writer", batch, &mut body);
                let mut bytes = body.as_bytes().to_vec();
                let Ok(parsed) = ingest::parse_batch(&mut bytes) else {
                    errors += 1;
                    continue;
                };
                let rows = parsed.into_rows("writer-owner");
                let t = Instant::now();
                match h.submit(rows).await {
                    Ok(()) => lat.push(t.elapsed().as_micros().min(u128::from(u32::MAX)) as u32),
                    Err(_) => errors += 1,
                }
            }
            (lat, errors)
        }));
    }
    let mut lat = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (l, e) = t.await.context("submitter")?;
        lat.extend(l);
        errors += e;
    }
    let secs = start.elapsed().as_secs_f64();
    writer.shutdown().await;
    lat.sort_unstable();
    let pct = |p: f64| -> f64 {
        if lat.is_empty() {
            return 0.0;
        }
        f64::from(lat[((lat.len() as f64 - 1.0) * p).round() as usize]) / 1000.0
    };
    let events = lat.len() as u64 * a.batch as u64;
    let eps = events as f64 / secs;
    println!(
        "mode=writer sink={} submitters={} batch={} in_flight={} duration={secs:.1}s",
        open.name, a.submitters, a.batch, a.in_flight
    );
    println!("acknowledged {events} events: {eps:.0} events/s, errors {errors}");
    println!(
        "submit latency ms: p50 {:.2}  p95 {:.2}  p99 {:.2}",
        pct(0.5),
        pct(0.95),
        pct(0.99)
    );
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "mode": "writer", "sink": open.name, "submitters": a.submitters,
                "in_flight": a.in_flight, "events_per_s": eps, "errors": errors,
                "p50_ms": pct(0.5), "p95_ms": pct(0.95), "p99_ms": pct(0.99)
            })
        );
    }
    open.cleanup.run().await;
    Ok(())
}

// ---------------------------------------------------------------- parse mode

fn parse(a: ParseArgs) -> Result<()> {
    let mut player = Player::new(0, 42, 20);
    let mut body = String::new();
    let bodies: Vec<Vec<u8>> = (0..a.batches.max(1))
        .map(|_| {
            player.next_body("svc_parse", a.batch, &mut body);
            body.as_bytes().to_vec()
        })
        .collect();
    let bytes: usize = bodies.iter().map(Vec::len).sum();
    let start = Instant::now();
    let mut rows = 0usize;
    for b in bodies {
        let mut b = b;
        let batch = ingest::parse_batch(&mut b).map_err(|e| anyhow::anyhow!("invalid: {e}"))?;
        rows += batch.into_rows("owner").len();
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "mode=parse batches={} events={rows} avg_body={}B: {:.0} events/s on one core ({:.0} MB/s)",
        a.batches,
        bytes / a.batches.max(1),
        rows as f64 / secs,
        bytes as f64 / secs / 1e6
    );
    Ok(())
}
