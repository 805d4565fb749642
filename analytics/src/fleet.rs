//! A deterministic, seeded generator of player fleets as the ingest route sees them:
//! batches of stored events with their `context` and `User-Agent`, in write order. For
//! property tests (adversarial mode) and benchmarks (realistic mode).
//!
//! - [`Mode::Realistic`]: content popularity Zipf-skewed over N contents, a desktop /
//!   mobile / tablet / TV user-agent mix, log-normal startup times, stalls, pauses,
//!   rendition switches, failures and exits before start in plausible shares, the SDK's
//!   10 s / 50 event batching, a minority of old (0.1.0) SDKs without `context`.
//! - [`Mode::Adversarial`]: short views packed with edge cases: re-sent and overlapping
//!   batches, out-of-order arrival, events sharing a `ts`, stalls never closed,
//!   `rebuffer_end` without a start, a first `quality_change` with a non-empty `from`,
//!   views that never start, fatal errors before and after the first frame, batches
//!   without context or with empty values, missing `User-Agent`.
//!
//! Within one session every copy of an event `(ts, type)` is identical and every batch
//! carries the same context, so any write order derives the same views.

use std::collections::{BTreeMap, BTreeSet};

use ingest::EventType;

use crate::session::StoredEvent;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::json;

use crate::dims::{BatchDims, UserAgent};
use crate::event::Event;
use crate::view::View;

/// What kind of fleet to generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Plausible production traffic.
    Realistic,
    /// Short views full of edge cases, retried and reordered batches.
    Adversarial,
}

/// Generator settings.
#[derive(Debug, Clone)]
pub struct FleetConfig {
    /// RNG seed: the same config always gives the same fleet.
    pub seed: u64,
    /// Number of views (sessions).
    pub views: usize,
    /// Number of distinct contents.
    pub contents: usize,
    /// Views start (play intent) uniformly in `[start_ms, start_ms + span_ms)`.
    pub start_ms: i64,
    /// See `start_ms`.
    pub span_ms: i64,
    /// Realistic or adversarial.
    pub mode: Mode,
}

impl FleetConfig {
    /// `views` realistic views over 24 h from 2024-05-01T00:00:00Z, 200 contents.
    pub fn realistic(seed: u64, views: usize) -> Self {
        FleetConfig {
            seed,
            views,
            contents: 200,
            start_ms: 1_714_521_600_000,
            span_ms: 86_400_000,
            mode: Mode::Realistic,
        }
    }

    /// `views` adversarial views over 2 h from 2024-05-01T00:00:00Z, 12 contents.
    pub fn adversarial(seed: u64, views: usize) -> Self {
        FleetConfig {
            seed,
            views,
            contents: 12,
            start_ms: 1_714_521_600_000,
            span_ms: 7_200_000,
            mode: Mode::Adversarial,
        }
    }
}

/// A batch's `context` (analytics.md §1).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Context {
    /// `sdk`.
    pub sdk: Option<String>,
    /// `player`.
    pub player: Option<String>,
    /// `contentId`.
    pub content_id: Option<String>,
    /// `src`.
    pub src: Option<String>,
    /// `tags`.
    pub tags: BTreeMap<String, String>,
}

/// One ingest request as written.
#[derive(Debug, Clone, PartialEq)]
pub struct GenBatch {
    /// `sessionId`.
    pub session_id: String,
    /// The batch's events, as the sink stores them.
    pub events: Vec<StoredEvent>,
    /// `context`, absent for SDK 0.1.0.
    pub context: Option<Context>,
    /// The request's `User-Agent` header.
    pub user_agent: Option<String>,
    /// The triple a user-agent parser should derive from `user_agent` (the generator's
    /// label for it; `unknown` when there is none).
    pub ua: UserAgent,
}

impl GenBatch {
    /// The batch's dimensions, given its write sequence.
    pub fn dims(&self, seq: u64) -> BatchDims {
        let ctx = self.context.clone().unwrap_or_default();
        BatchDims {
            first_ts_ms: self.events.iter().map(|e| e.ts_ms).min().unwrap_or(0),
            seq,
            sdk: ctx.sdk,
            player: ctx.player,
            content_id: ctx.content_id,
            src: ctx.src,
            tags: ctx.tags,
            user_agent: self.ua.clone(),
        }
    }
}

impl GenBatch {
    /// What the ingest route hands the writer for this batch (see
    /// `ingest::Batch::into_write`): its rows owned by `owner` and its record, with the
    /// given classification of its `User-Agent`.
    pub fn to_write(
        &self,
        owner: &str,
        user_agent: ingest::UaClass,
    ) -> (Vec<ingest::EventRow>, ingest::BatchRecord) {
        let owner: std::sync::Arc<str> = owner.into();
        let session: std::sync::Arc<str> = self.session_id.as_str().into();
        let rows = self
            .events
            .iter()
            .map(|e| ingest::EventRow {
                owner: owner.clone(),
                session_id: session.clone(),
                ts_ms: e.ts_ms,
                event_type: e.event_type,
                payload: e.payload.clone(),
                content_id: match e.event_type {
                    EventType::PlaybackStart => {
                        Event::from_stored(e).content_id.unwrap_or_default()
                    }
                    _ => String::new(),
                },
            })
            .collect();
        let ctx = self.context.clone().unwrap_or_default();
        let record = ingest::BatchRecord {
            owner,
            session_id: session,
            first_ts_ms: self.events.iter().map(|e| e.ts_ms).min().unwrap_or(0),
            context: std::sync::Arc::new(ingest::Context {
                sdk: ctx.sdk,
                player: ctx.player,
                content_id: ctx.content_id,
                src: ctx.src,
                tags: ctx.tags,
            }),
            user_agent,
        };
        (rows, record)
    }

    /// The body an SDK posts to `POST /api/v1/telemetry` for this batch (interface.md,
    /// analytics.md §1): what the bench sends through the real ingest route. Context
    /// fields it lacks are left out, as SDK 0.2.0 leaves them out; SDK 0.1.0 batches
    /// have no `context`.
    pub fn wire_json(&self, api_key: &str) -> String {
        let events: Vec<serde_json::Value> = self
            .events
            .iter()
            .map(|e| {
                json!({
                    "type": e.event_type.as_str(),
                    "ts": ingest::time::format_ms(e.ts_ms),
                    // Generated payloads are JSON objects (`payloads_are_valid_contract_json`).
                    "payload": serde_json::from_str::<serde_json::Value>(&e.payload)
                        .unwrap_or_else(|_| json!({})),
                })
            })
            .collect();
        let mut body = json!({ "apiKey": api_key, "sessionId": self.session_id, "events": events });
        if let Some(c) = &self.context {
            let mut context = serde_json::Map::new();
            for (key, value) in [
                ("sdk", &c.sdk),
                ("player", &c.player),
                ("contentId", &c.content_id),
                ("src", &c.src),
            ] {
                if let Some(v) = value {
                    context.insert(key.to_owned(), json!(v));
                }
            }
            if !c.tags.is_empty() {
                context.insert("tags".to_owned(), json!(c.tags));
            }
            body["context"] = serde_json::Value::Object(context);
        }
        body.to_string()
    }
}

/// A generated fleet: every batch in write order.
#[derive(Debug, Clone, PartialEq)]
pub struct Fleet {
    /// Batches in the order the server writes them (retries included).
    pub batches: Vec<GenBatch>,
}

impl Fleet {
    /// Generates a fleet.
    pub fn generate(cfg: &FleetConfig) -> Fleet {
        let mut rng = StdRng::seed_from_u64(cfg.seed);
        let zipf = Zipf::new(cfg.contents.max(1), 1.0);
        // (arrival time, tiebreak, batch)
        let mut arrivals: Vec<(i64, u64, GenBatch)> = Vec::new();
        for i in 0..cfg.views {
            let session = Session::new(&mut rng, cfg, &zipf, i);
            let events = match cfg.mode {
                Mode::Realistic => realistic_events(&mut rng, &session),
                Mode::Adversarial => adversarial_events(&mut rng, &session),
            };
            let batches = match cfg.mode {
                Mode::Realistic => sdk_batches(&events, session.t0),
                Mode::Adversarial => random_batches(&mut rng, &events),
            };
            for evs in batches {
                let last = evs.iter().map(|e| e.ts_ms).max().unwrap_or(session.t0);
                let batch = session.batch(&mut rng, cfg.mode, evs);
                let arrival = match cfg.mode {
                    Mode::Realistic => last + rng.gen_range(20..500),
                    // Heavy jitter: later batches of a view often arrive first.
                    Mode::Adversarial => last + rng.gen_range(0..30_000),
                };
                arrivals.push((arrival, rng.gen(), batch.clone()));
                if cfg.mode == Mode::Adversarial {
                    // Re-sent batches (a retry after a lost response).
                    if rng.gen_bool(0.3) {
                        arrivals.push((arrival + rng.gen_range(0..60_000), rng.gen(), batch));
                    }
                }
            }
            if cfg.mode == Mode::Adversarial && rng.gen_bool(0.3) {
                // An overlapping retry: two neighbouring batches re-sent as one.
                let own: Vec<&GenBatch> = arrivals
                    .iter()
                    .map(|(_, _, b)| b)
                    .filter(|b| b.session_id == session.id)
                    .collect();
                if own.len() >= 2 {
                    let j = rng.gen_range(0..own.len() - 1);
                    let mut merged = own[j].clone();
                    merged.events.extend(own[j + 1].events.iter().cloned());
                    merged.events.shuffle(&mut rng);
                    let at = session.t0 + rng.gen_range(0..200_000);
                    arrivals.push((at, rng.gen(), merged));
                }
            }
        }
        arrivals.sort_by_key(|(t, tie, _)| (*t, *tie));
        Fleet {
            batches: arrivals.into_iter().map(|(_, _, b)| b).collect(),
        }
    }

    /// The views of the fleet: each session's events deduplicated in write order, its
    /// batches' dimensions with their write sequence. Sorted by `sessionId`.
    pub fn views(&self) -> Vec<View> {
        derive_views(&self.batches)
    }

    /// The same batches in another write order with some of them written again: what a
    /// flaky network and retrying clients could turn this fleet into.
    pub fn reshuffled(&self, seed: u64) -> Fleet {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut batches = self.batches.clone();
        for b in &self.batches {
            if rng.gen_bool(0.25) {
                batches.push(b.clone());
            }
        }
        batches.shuffle(&mut rng);
        Fleet { batches }
    }

    /// Distinct `src` values in the fleet's contexts, sorted.
    pub fn sources(&self) -> Vec<String> {
        let set: BTreeSet<&str> = self
            .batches
            .iter()
            .filter_map(|b| b.context.as_ref()?.src.as_deref())
            .filter(|s| !s.is_empty())
            .collect();
        set.into_iter().map(str::to_owned).collect()
    }
}

/// Derives the views of batches given in write order (see [`Fleet::views`]).
pub fn derive_views(batches: &[GenBatch]) -> Vec<View> {
    let mut sessions: BTreeMap<&str, (Vec<Event>, Vec<BatchDims>)> = BTreeMap::new();
    for (seq, b) in batches.iter().enumerate() {
        let (events, dims) = sessions.entry(&b.session_id).or_default();
        events.extend(b.events.iter().map(Event::from_stored));
        dims.push(b.dims(seq as u64));
    }
    sessions
        .into_iter()
        .filter_map(|(id, (events, dims))| View::derive(id, &events, &dims))
        .collect()
}

/// Zipf(s) over ranks 1..=n by inverse CDF.
struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    fn new(n: usize, s: f64) -> Self {
        let mut acc = 0.0;
        let mut cdf: Vec<f64> = (1..=n)
            .map(|k| {
                acc += 1.0 / (k as f64).powf(s);
                acc
            })
            .collect();
        for c in &mut cdf {
            *c /= acc;
        }
        Zipf { cdf }
    }

    /// A rank in 0..n (0 = most popular).
    fn sample(&self, rng: &mut StdRng) -> usize {
        let u: f64 = rng.gen();
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }
}

/// A standard normal sample (Box–Muller).
fn normal(rng: &mut StdRng) -> f64 {
    let u1: f64 = rng.gen_range(f64::EPSILON..1.0);
    let u2: f64 = rng.gen();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// A log-normal sample with the given median and shape.
fn log_normal(rng: &mut StdRng, median: f64, sigma: f64) -> f64 {
    median * (sigma * normal(rng)).exp()
}

/// An exponential sample with the given mean.
fn exponential(rng: &mut StdRng, mean: f64) -> f64 {
    -mean * rng.gen_range(f64::EPSILON..1.0).ln()
}

/// Device classes of the user-agent mix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Device {
    Desktop,
    Mobile,
    Tablet,
    Tv,
}

/// (weight, User-Agent, browser, os, deviceType, device class, native player)
type UaEntry = (
    u32,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    Device,
    bool,
);

/// A desktop / mobile / tablet / TV mix of real user agents, by rough traffic share.
const UA_MIX: [UaEntry; 12] = [
    (28, "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36", "Chrome", "Windows", "desktop", Device::Desktop, false),
    (7, "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36 Edg/124.0.2478.67", "Edge", "Windows", "desktop", Device::Desktop, false),
    (4, "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:125.0) Gecko/20100101 Firefox/125.0", "Firefox", "Windows", "desktop", Device::Desktop, false),
    (9, "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4.1 Safari/605.1.15", "Safari", "macOS", "desktop", Device::Desktop, true),
    (21, "Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.6367.82 Mobile Safari/537.36", "Chrome", "Android", "mobile", Device::Mobile, false),
    (3, "Mozilla/5.0 (Linux; Android 14; SM-S918B) AppleWebKit/537.36 (KHTML, like Gecko) SamsungBrowser/24.0 Chrome/117.0.0.0 Mobile Safari/537.36", "Samsung Internet", "Android", "mobile", Device::Mobile, false),
    (15, "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4.1 Mobile/15E148 Safari/604.1", "Safari", "iOS", "mobile", Device::Mobile, true),
    (4, "Mozilla/5.0 (iPad; CPU OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1", "Safari", "iOS", "tablet", Device::Tablet, true),
    (2, "Mozilla/5.0 (SMART-TV; LINUX; Tizen 7.0) AppleWebKit/537.36 (KHTML, like Gecko) 94.0.4606.31/7.0 TV Safari/537.36", "Safari", "Tizen", "tv", Device::Tv, false),
    (1, "Mozilla/5.0 (Web0S; Linux/SmartTV) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/87.0.4280.88 Safari/537.36 WebAppManager", "Chrome", "webOS", "tv", Device::Tv, false),
    (1, "Mozilla/5.0 (X11; Linux armv7l) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/114.0.0.0 Safari/537.36 CrKey/1.56.500000", "Chrome", "Chromecast", "tv", Device::Tv, false),
    (2, "", "unknown", "unknown", "unknown", Device::Desktop, false),
];

/// Rendition ladder: (label, bits per second).
const LADDER: [(&str, i64); 6] = [
    ("240p", 400_000),
    ("360p", 800_000),
    ("480p", 1_600_000),
    ("720p", 3_000_000),
    ("1080p", 5_000_000),
    ("2160p", 8_000_000),
];

const FATAL_CODES: [&str; 4] = [
    "MEDIA_ERR_NETWORK",
    "MEDIA_ERR_DECODE",
    "MEDIA_ERR_SRC_NOT_SUPPORTED",
    "manifestLoadError",
];
const NON_FATAL_CODES: [&str; 3] = ["fragLoadError", "bufferStalledError", "levelLoadTimeOut"];

/// What is fixed for one session.
struct Session {
    id: String,
    /// Play intent time.
    t0: i64,
    content: String,
    src: String,
    new_sdk: bool,
    player: &'static str,
    tags: BTreeMap<String, String>,
    user_agent: Option<String>,
    ua: UserAgent,
    device: Device,
}

impl Session {
    fn new(rng: &mut StdRng, cfg: &FleetConfig, zipf: &Zipf, index: usize) -> Self {
        let rank = zipf.sample(rng);
        let content = format!("content-{rank:04}");
        // A few contents are live channels, the rest VOD.
        let src = if rank % 10 == 3 {
            format!("https://live.example.com/channel-{rank}/index.m3u8")
        } else {
            format!("https://vod.example.com/{content}/master.m3u8")
        };
        let total: u32 = UA_MIX.iter().map(|e| e.0).sum();
        let mut pick = rng.gen_range(0..total);
        let entry = UA_MIX
            .iter()
            .find(|e| {
                if pick < e.0 {
                    true
                } else {
                    pick -= e.0;
                    false
                }
            })
            .unwrap_or(&UA_MIX[0]);
        let (_, ua_string, browser, os, device_type, device, native) = *entry;
        let user_agent = (!ua_string.is_empty()).then(|| ua_string.to_owned());
        let mut tags = BTreeMap::new();
        let plan = if rng.gen_bool(0.3) { "premium" } else { "free" };
        tags.insert("plan".to_owned(), plan.to_owned());
        let region = ["eu", "us", "apac"][rng.gen_range(0..3)];
        tags.insert("region".to_owned(), region.to_owned());
        if cfg.mode == Mode::Adversarial && rng.gen_bool(0.2) {
            tags.insert(
                "experiment".to_owned(),
                format!("arm-{}", rng.gen_range(0..3)),
            );
        }
        Session {
            id: format!("sess-{:06}-{:08x}", index, rng.gen::<u32>()),
            t0: cfg.start_ms + rng.gen_range(0..cfg.span_ms.max(1)),
            content,
            src,
            new_sdk: rng.gen_bool(0.85),
            player: if native { "native" } else { "hls.js 1.6.2" },
            tags,
            user_agent,
            ua: UserAgent {
                browser: browser.into(),
                os: os.into(),
                device_type: device_type.into(),
            },
            device,
        }
    }

    fn context(&self) -> Context {
        Context {
            sdk: Some("@service/player-sdk@0.2.0".into()),
            player: Some(self.player.into()),
            content_id: Some(self.content.clone()),
            src: Some(self.src.clone()),
            tags: self.tags.clone(),
        }
    }

    /// Wraps events into a batch of this session.
    fn batch(&self, rng: &mut StdRng, mode: Mode, events: Vec<StoredEvent>) -> GenBatch {
        let context = match mode {
            Mode::Realistic => self.new_sdk.then(|| self.context()),
            Mode::Adversarial => match rng.gen_range(0..10) {
                // An old-SDK batch in the middle of a new-SDK session, or a proxy that
                // dropped the context.
                0 | 1 => None,
                // Context with empty values: no value at all for those fields.
                2 => Some(Context {
                    sdk: Some(String::new()),
                    player: Some(String::new()),
                    content_id: Some(String::new()),
                    src: Some(String::new()),
                    tags: self
                        .tags
                        .keys()
                        .map(|k| (k.clone(), String::new()))
                        .collect(),
                }),
                // Some fields only.
                3 => Some(Context {
                    tags: BTreeMap::new(),
                    player: None,
                    ..self.context()
                }),
                _ => Some(self.context()),
            },
        };
        GenBatch {
            session_id: self.id.clone(),
            events,
            context,
            user_agent: self.user_agent.clone(),
            ua: self.ua.clone(),
        }
    }

    fn max_level(&self) -> usize {
        match self.device {
            Device::Desktop | Device::Tv => LADDER.len() - 1,
            Device::Tablet => 4,
            Device::Mobile => 3,
        }
    }
}

/// Builds events of one session and keeps the first of each `(ts, type)`, so every copy
/// of an event is the same event.
struct Timeline {
    events: Vec<(i64, EventType, serde_json::Value)>,
}

impl Timeline {
    fn new() -> Self {
        Timeline { events: Vec::new() }
    }

    fn push(&mut self, ts: i64, t: EventType, payload: serde_json::Value) {
        self.events.push((ts, t, payload));
    }

    fn position(t: i64, from: i64) -> serde_json::Value {
        json!({ "positionMs": (t - from).max(0), "bufferedMs": 4000 })
    }

    fn finish(self) -> Vec<StoredEvent> {
        let mut seen = BTreeSet::new();
        let mut out: Vec<StoredEvent> = self
            .events
            .into_iter()
            .filter(|(ts, t, _)| seen.insert((*ts, t.index())))
            .map(|(ts_ms, event_type, payload)| StoredEvent {
                event_type,
                ts_ms,
                payload: payload.to_string(),
            })
            .collect();
        out.sort_by_key(|e| (e.ts_ms, e.event_type.index()));
        out
    }
}

fn quality(from: &str, level: usize) -> serde_json::Value {
    let (label, bitrate) = LADDER[level];
    let (w, h) = match label {
        "240p" => (426, 240),
        "360p" => (640, 360),
        "480p" => (854, 480),
        "720p" => (1280, 720),
        "1080p" => (1920, 1080),
        _ => (3840, 2160),
    };
    json!({ "from": from, "to": label, "bitrate": bitrate, "width": w, "height": h })
}

fn error(code: &str, fatal: bool) -> serde_json::Value {
    json!({ "code": code, "message": format!("{code} (generated)"), "fatal": fatal })
}

fn end(reason: &str, duration: i64) -> serde_json::Value {
    json!({ "reason": reason, "durationMs": duration.max(0) })
}

/// A plausible session.
fn realistic_events(rng: &mut StdRng, s: &Session) -> Vec<StoredEvent> {
    let mut tl = Timeline::new();
    let t0 = s.t0;
    let content_ms = rng.gen_range(20..120) * 60_000;
    let mut level = rng.gen_range(1..=s.max_level().min(3));
    if s.new_sdk {
        tl.push(
            t0 + rng.gen_range(30..300),
            EventType::QualityChange,
            quality("", level),
        );
    }
    let roll: f64 = rng.gen();
    if roll < 0.06 {
        // Exit before start: the viewer gave up waiting.
        let at = t0 + log_normal(rng, 4_000.0, 0.8).clamp(300.0, 60_000.0) as i64;
        tl.push(at, EventType::SessionEnd, end("unloaded", at - t0));
        return tl.finish();
    }
    if roll < 0.08 {
        // Startup failure: fatal error before any frame.
        let at = t0 + rng.gen_range(500..8_000);
        let code = FATAL_CODES[rng.gen_range(0..FATAL_CODES.len())];
        tl.push(at, EventType::Error, error(code, true));
        tl.push(
            at + rng.gen_range(0..50),
            EventType::SessionEnd,
            end("error", at - t0),
        );
        return tl.finish();
    }
    let startup = log_normal(rng, 900.0, 0.6).clamp(80.0, 30_000.0).round() as i64;
    let ff = t0 + startup;
    let mut start = json!({ "positionMs": 0, "durationMs": content_ms, "contentId": s.content });
    if s.new_sdk {
        start["startupMs"] = json!(startup);
    }
    tl.push(ff, EventType::PlaybackStart, start);
    if !s.new_sdk {
        // SDK 0.1.0 has no initial rendition event: its first one is a switch.
        tl.push(
            ff + rng.gen_range(500..3_000),
            EventType::QualityChange,
            quality("auto", level),
        );
    }
    let watch_budget = log_normal(rng, 240_000.0, 1.0).clamp(2_000.0, 7_200_000.0) as i64;
    let fails_at = rng.gen_bool(0.015).then(|| rng.gen_range(0..watch_budget));
    let (mut t, mut watched) = (ff, 0i64);
    loop {
        // Stalls 0.25/min, pauses 0.1/min, switches 0.5/min, non-fatal errors 0.05/min.
        let step = exponential(rng, 60_000.0 / 0.9) as i64 + 1;
        if watched + step >= watch_budget {
            t += watch_budget - watched;
            break;
        }
        if let Some(f) = fails_at.filter(|f| *f < watched + step) {
            t += f - watched;
            let code = FATAL_CODES[rng.gen_range(0..FATAL_CODES.len())];
            tl.push(t, EventType::Error, error(code, true));
            tl.push(
                t + rng.gen_range(0..50),
                EventType::SessionEnd,
                end("error", t - t0),
            );
            return tl.finish();
        }
        t += step;
        watched += step;
        let kind: f64 = rng.gen_range(0.0..0.9);
        if kind < 0.25 {
            let d = log_normal(rng, 1_500.0, 0.9).clamp(50.0, 60_000.0) as i64;
            tl.push(t, EventType::RebufferStart, Timeline::position(t, ff));
            t += d;
            tl.push(t, EventType::RebufferEnd, Timeline::position(t, ff));
            // After a stall the player tends to step down.
            if level > 0 && rng.gen_bool(0.5) {
                let from = LADDER[level].0;
                level -= 1;
                tl.push(t + 1, EventType::QualityChange, quality(from, level));
            }
        } else if kind < 0.35 {
            let d = log_normal(rng, 20_000.0, 1.0).clamp(500.0, 1_800_000.0) as i64;
            tl.push(t, EventType::PlaybackPause, Timeline::position(t, ff));
            t += d;
            tl.push(t, EventType::PlaybackResume, Timeline::position(t, ff));
        } else if kind < 0.85 {
            let up = level < s.max_level() && (level == 0 || rng.gen_bool(0.6));
            let from = LADDER[level].0;
            level = if up {
                level + 1
            } else {
                level.saturating_sub(1)
            };
            tl.push(t, EventType::QualityChange, quality(from, level));
        } else {
            let code = NON_FATAL_CODES[rng.gen_range(0..NON_FATAL_CODES.len())];
            tl.push(t, EventType::Error, error(code, false));
        }
    }
    // Most sessions end cleanly; some tabs die without a word.
    if rng.gen_bool(0.85) {
        let reason = if rng.gen_bool(0.4) {
            "ended"
        } else {
            "unloaded"
        };
        tl.push(t, EventType::SessionEnd, end(reason, t - t0));
    }
    tl.finish()
}

/// A short session full of edge cases.
fn adversarial_events(rng: &mut StdRng, s: &Session) -> Vec<StoredEvent> {
    use EventType::*;
    let mut tl = Timeline::new();
    let t0 = s.t0;
    let span = rng.gen_range(0..180_000i64);
    // Times cluster on a coarse grid so events often share a ts.
    let at = |rng: &mut StdRng| t0 + rng.gen_range(0..=span / 500) * 500 + rng.gen_range(0..3);
    let mut level = rng.gen_range(0..LADDER.len());
    let ff = if rng.gen_bool(0.8) {
        Some(at(rng))
    } else {
        None
    };
    if let Some(ff) = ff {
        let mut start = json!({ "positionMs": 0, "durationMs": 60_000, "contentId": s.content });
        if rng.gen_bool(0.7) {
            start["startupMs"] = json!(rng.gen_range(0..5_000));
        }
        tl.push(ff, PlaybackStart, start);
        if rng.gen_bool(0.1) {
            // A second playback_start (a replay): only the first counts.
            let later = ff + rng.gen_range(0..60_000);
            tl.push(
                later,
                PlaybackStart,
                json!({ "positionMs": 0, "durationMs": 60_000, "contentId": "other" }),
            );
        }
    }
    // The first quality_change may be initial (`from: ""`) or already a switch.
    let first_from = if rng.gen_bool(0.5) { "" } else { "auto" };
    tl.push(at(rng), QualityChange, quality(first_from, level));
    for _ in 0..rng.gen_range(0..8) {
        let e = rng.gen_range(0..12);
        let t = at(rng);
        match e {
            0..=2 => {
                tl.push(t, RebufferStart, Timeline::position(t, t0));
                // Stalls never closed, closed at the same ts, or later.
                match rng.gen_range(0..4) {
                    0 => {}
                    1 => tl.push(t, RebufferEnd, Timeline::position(t, t0)),
                    _ => {
                        let e = t + rng.gen_range(1..20_000);
                        tl.push(e, RebufferEnd, Timeline::position(e, t0));
                    }
                }
            }
            3 => tl.push(t, RebufferEnd, Timeline::position(t, t0)),
            4 | 5 => {
                tl.push(t, PlaybackPause, Timeline::position(t, t0));
                if rng.gen_bool(0.7) {
                    let e = t + rng.gen_range(0..30_000);
                    tl.push(e, PlaybackResume, Timeline::position(e, t0));
                }
            }
            6 => tl.push(t, PlaybackResume, Timeline::position(t, t0)),
            7 | 8 => {
                let from = LADDER[level].0;
                level = rng.gen_range(0..LADDER.len());
                tl.push(t, QualityChange, quality(from, level));
            }
            9 => {
                let code = NON_FATAL_CODES[rng.gen_range(0..NON_FATAL_CODES.len())];
                tl.push(t, Error, error(code, false));
            }
            10 => {
                // A fatal error anywhere: before or after the first frame.
                let code = FATAL_CODES[rng.gen_range(0..FATAL_CODES.len())];
                tl.push(t, Error, error(code, true));
            }
            _ => {
                // Pause during a stall.
                tl.push(t, RebufferStart, Timeline::position(t, t0));
                tl.push(t + 1, PlaybackPause, Timeline::position(t, t0));
                tl.push(t + 2, PlaybackResume, Timeline::position(t, t0));
                tl.push(t + 3, RebufferEnd, Timeline::position(t, t0));
            }
        }
    }
    match rng.gen_range(0..5) {
        0 => {} // no session_end
        1 => {
            let t = at(rng);
            tl.push(t, SessionEnd, end("error", t - t0));
        }
        _ => {
            // Sometimes at the same ts as the last event, sometimes later.
            let last = tl.events.iter().map(|e| e.0).max().unwrap_or(t0);
            let t = last + rng.gen_range(0..2) * rng.gen_range(0..5_000);
            let reason = ["ended", "unloaded"][rng.gen_range(0..2)];
            tl.push(t, SessionEnd, end(reason, t - t0));
        }
    }
    tl.finish()
}

/// The SDK's batching: a flush every 10 s of session time or at 50 events.
fn sdk_batches(events: &[StoredEvent], t0: i64) -> Vec<Vec<StoredEvent>> {
    let mut out: Vec<Vec<StoredEvent>> = Vec::new();
    let mut window = None;
    for e in events {
        let w = (e.ts_ms - t0).div_euclid(10_000);
        match out.last_mut() {
            Some(b) if window == Some(w) && b.len() < 50 => b.push(e.clone()),
            _ => out.push(vec![e.clone()]),
        }
        window = Some(w);
    }
    out
}

/// Random consecutive chunks of 1–7 events.
fn random_batches(rng: &mut StdRng, events: &[StoredEvent]) -> Vec<Vec<StoredEvent>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < events.len() {
        let n = rng.gen_range(1..=7).min(events.len() - i);
        out.push(events[i..i + n].to_vec());
        i += n;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Aggregate;
    use crate::query::{
        BreakdownQuery, Dimension, Filters, Format, Granularity, Measurement, Metric, OrderBy,
        OverviewQuery, StreamIds, TimeRange, TimelineQuery, TimeseriesQuery, ViewsQuery,
    };
    use crate::reference;
    use ingest::EndReason;
    use std::collections::HashMap;

    const SEEDS: std::ops::Range<u64> = 1..13;

    fn stream_map(fleet: &Fleet) -> StreamIds {
        // Every other source is a registered stream.
        fleet
            .sources()
            .into_iter()
            .enumerate()
            .filter(|(i, _)| i % 2 == 0)
            .map(|(i, src)| (src, format!("st_{i}")))
            .collect()
    }

    #[test]
    fn same_seed_same_fleet() {
        for cfg in [
            FleetConfig::realistic(7, 200),
            FleetConfig::adversarial(7, 200),
        ] {
            assert_eq!(Fleet::generate(&cfg), Fleet::generate(&cfg));
            let other = FleetConfig {
                seed: 8,
                ..cfg.clone()
            };
            assert_ne!(Fleet::generate(&cfg), Fleet::generate(&other));
        }
    }

    #[test]
    fn user_agent_labels_are_what_ingest_derives() {
        for (_, ua, browser, os, device, ..) in UA_MIX {
            let got = ingest::ua::classify((!ua.is_empty()).then_some(ua));
            assert_eq!(
                (&*got.browser, &*got.os, got.device_type),
                (browser, os, device),
                "{ua}"
            );
        }
    }

    #[test]
    fn every_view_is_generated() {
        for cfg in [
            FleetConfig::realistic(3, 500),
            FleetConfig::adversarial(3, 500),
        ] {
            assert_eq!(Fleet::generate(&cfg).views().len(), 500);
        }
    }

    #[test]
    fn wire_bodies_pass_the_ingest_route_and_store_what_to_write_stores() {
        // What the bench posts over HTTP is what it writes straight to a sink: the route's
        // validation accepts every body, and the rows and record it makes are the same.
        let fleet = Fleet::generate(&FleetConfig::realistic(6, 300));
        assert!(fleet.batches.iter().any(|b| b.context.is_none()));
        for b in &fleet.batches {
            let mut body = b.wire_json("sk_test").into_bytes();
            let batch = ingest::parse_batch(&mut body).expect("valid body");
            assert_eq!(batch.api_key, "sk_test");
            let ua = ingest::UaClass::unknown();
            let (mut rows, record) = batch.into_write("o", ua.clone());
            let (mut expected, expected_record) = b.to_write("o", ua);
            assert_eq!(record, expected_record);
            // The route stores payloads in the contract's key order, the generator in
            // its own: the same JSON all the same.
            for r in rows.iter_mut().chain(expected.iter_mut()) {
                let v: serde_json::Value = serde_json::from_str(&r.payload).expect("json");
                r.payload = v.to_string();
            }
            assert_eq!(rows, expected);
        }
    }

    #[test]
    fn payloads_are_valid_contract_json() {
        // Every generated payload carries the contract's required fields with their types.
        let fleet = Fleet::generate(&FleetConfig::adversarial(5, 300));
        let realistic = Fleet::generate(&FleetConfig::realistic(5, 300));
        for b in fleet.batches.iter().chain(&realistic.batches) {
            assert!(!b.events.is_empty());
            for e in &b.events {
                let v: serde_json::Value = serde_json::from_str(&e.payload).expect("json");
                let has = |k: &str| v.get(k).is_some();
                let ok = match e.event_type {
                    EventType::PlaybackStart => {
                        has("positionMs") && has("durationMs") && v["contentId"].is_string()
                    }
                    EventType::QualityChange => {
                        v["from"].is_string() && v["to"].is_string() && v["bitrate"].is_number()
                    }
                    EventType::Error => {
                        v["code"].is_string() && v["message"].is_string() && v["fatal"].is_boolean()
                    }
                    EventType::SessionEnd => {
                        EndReason::from_wire(v["reason"].as_str().unwrap_or("")).is_some()
                            && v["durationMs"].is_number()
                    }
                    _ => v["positionMs"].is_number() && v["bufferedMs"].is_number(),
                };
                assert!(ok, "{} {}", e.event_type, e.payload);
            }
        }
    }

    #[test]
    fn realistic_fleet_has_realistic_shares() {
        let fleet = Fleet::generate(&FleetConfig::realistic(42, 5_000));
        let views = fleet.views();
        let a = Aggregate::of(&views);
        let pct = |m| a.value(m, Measurement::P50).expect("value");
        // Shares by construction: 6% exits, 2% startup failures, 1.5% of started views fail
        // later (the remaining ~3.4% of playback failures are those), ± sampling noise.
        assert!(
            (4.5..7.5).contains(&pct(Metric::ExitBeforeStartPct)),
            "{a:?}"
        );
        assert!(
            (1.2..3.0).contains(&pct(Metric::StartupFailurePct)),
            "{a:?}"
        );
        assert!(
            (2.5..5.0).contains(&pct(Metric::PlaybackFailurePct)),
            "{a:?}"
        );
        // Log-normal startup with a 900 ms median.
        assert!((800.0..1_000.0).contains(&pct(Metric::StartupTimeMs)));
        assert!(
            a.value(Metric::StartupTimeMs, Measurement::P95)
                .expect("p95")
                > 1_800.0
        );
        // Stalls are rare but present: a fraction of a percent to a few percent of watch time.
        assert!((0.1..5.0).contains(&pct(Metric::RebufferPct)), "{a:?}");
        assert!(
            (0.1..0.5).contains(&pct(Metric::RebufferFrequency)),
            "{a:?}"
        );
        assert!(
            (400.0..8_000.0).contains(&pct(Metric::AvgBitrateKbps)),
            "{a:?}"
        );
        // Every device class shows up, and old SDKs (no startupMs) are a minority.
        let devices: BTreeSet<&str> = views
            .iter()
            .map(|v| v.dims.user_agent.device_type.as_str())
            .collect();
        assert_eq!(
            devices,
            BTreeSet::from(["desktop", "mobile", "tablet", "tv", "unknown"])
        );
        let without_startup = views
            .iter()
            .filter(|v| v.started && v.startup_ms.is_none())
            .count();
        assert!(
            without_startup > 300 && without_startup < 1_200,
            "{without_startup}"
        );
        // Zipf: the most popular content is far ahead of the 50th.
        let mut per_content: HashMap<&str, usize> = HashMap::new();
        for v in &views {
            if let Some(c) = v.dims.content_id.as_deref() {
                *per_content.entry(c).or_default() += 1;
            }
        }
        let top = per_content.get("content-0000").copied().unwrap_or(0);
        let fiftieth = per_content.get("content-0049").copied().unwrap_or(0);
        assert!(top > 10 * fiftieth.max(1), "{top} vs {fiftieth}");
    }

    #[test]
    fn adversarial_fleet_covers_the_edge_cases() {
        let fleet = Fleet::generate(&FleetConfig::adversarial(11, 1_000));
        let views = fleet.views();
        let count = |f: &dyn Fn(&View) -> bool| views.iter().filter(|v| f(v)).count();
        assert!(count(&|v| !v.started && !v.failed && !v.exit_before_start) > 10);
        assert!(count(&|v| v.exit_before_start) > 10);
        assert!(count(&|v| v.startup_failure && v.started) > 5);
        assert!(count(&|v| v.startup_failure && !v.started) > 5);
        assert!(count(&|v| v.failed && !v.startup_failure) > 10);
        assert!(count(&|v| v.rebuffer_count > 0) > 50);
        assert!(count(&|v| v.started && v.avg_bitrate_kbps().is_none()) > 5);
        assert!(count(&|v| v.dims.user_agent.browser == "unknown") > 3);
        // Retries: more batches written than distinct ones.
        let distinct: BTreeSet<String> = fleet.batches.iter().map(|b| format!("{b:?}")).collect();
        assert!(fleet.batches.len() > distinct.len());
    }

    #[test]
    fn derivation_is_independent_of_write_order_and_retries() {
        for seed in SEEDS {
            for cfg in [
                FleetConfig::adversarial(seed, 300),
                FleetConfig::realistic(seed, 150),
            ] {
                let fleet = Fleet::generate(&cfg);
                let views = fleet.views();
                for reseed in 0..3 {
                    let again = fleet.reshuffled(seed * 100 + reseed);
                    assert!(again.batches.len() >= fleet.batches.len());
                    assert_eq!(again.views(), views, "seed {seed} reshuffle {reseed}");
                }
            }
        }
    }

    #[test]
    fn reference_answers_are_invariant_under_duplicates_and_order() {
        let range = TimeRange {
            from_ms: 1_714_521_600_000 + 1_800_000,
            to_ms: 1_714_521_600_000 + 5_400_000,
        };
        for seed in SEEDS {
            let fleet = Fleet::generate(&FleetConfig::adversarial(seed, 300));
            let again = fleet.reshuffled(seed + 1_000);
            let streams = stream_map(&fleet);
            let (a, b) = (fleet.views(), again.views());
            let filters = [Filters::default(), {
                let pairs = vec![
                    ("filter".to_owned(), "deviceType:mobile".to_owned()),
                    ("filter".to_owned(), "deviceType:desktop".to_owned()),
                    ("filter".to_owned(), "!tag.plan:free".to_owned()),
                ];
                OverviewQuery::parse(&pairs, 0).expect("valid").filters
            }];
            for f in &filters {
                let o = OverviewQuery {
                    range,
                    filters: f.clone(),
                };
                assert_eq!(
                    reference::overview(&a, &streams, &o),
                    reference::overview(&b, &streams, &o)
                );
                for metric in Metric::ALL {
                    for measurement in [Measurement::P50, Measurement::Avg] {
                        let t = TimeseriesQuery {
                            range,
                            filters: f.clone(),
                            metric,
                            measurement,
                            granularity: Granularity::Minute,
                            format: Format::Json,
                        };
                        assert_eq!(
                            reference::timeseries(&a, &streams, &t),
                            reference::timeseries(&b, &streams, &t)
                        );
                    }
                    for by in [
                        Dimension::ContentId,
                        Dimension::DeviceType,
                        Dimension::StreamId,
                        Dimension::Tag("experiment".into()),
                    ] {
                        let q = BreakdownQuery {
                            range,
                            filters: f.clone(),
                            metric,
                            measurement: Measurement::P95,
                            by,
                            order_by: OrderBy::NegativeImpact,
                            limit: 25,
                            format: Format::Json,
                        };
                        assert_eq!(
                            reference::breakdown(&a, &streams, &q),
                            reference::breakdown(&b, &streams, &q)
                        );
                    }
                }
                let v = ViewsQuery {
                    range,
                    filters: f.clone(),
                    limit: 1_000,
                    cursor: None,
                    format: Format::Json,
                };
                assert_eq!(
                    reference::views_list(&a, &streams, &v),
                    reference::views_list(&b, &streams, &v)
                );
                if let Some(stream) = streams.values().next() {
                    let tq = TimelineQuery {
                        range,
                        filters: f.clone(),
                        granularity: Granularity::Minute,
                    };
                    assert_eq!(
                        reference::timeline(&a, &streams, stream, &tq),
                        reference::timeline(&b, &streams, stream, &tq)
                    );
                }
            }
        }
    }

    #[test]
    fn paging_through_the_views_list_visits_every_view_once() {
        let fleet = Fleet::generate(&FleetConfig::adversarial(21, 400));
        let views = fleet.views();
        let streams = stream_map(&fleet);
        let range = TimeRange {
            from_ms: 0,
            to_ms: i64::MAX / 2,
        };
        let mut seen = Vec::new();
        let mut cursor = None;
        loop {
            let q = ViewsQuery {
                range,
                filters: Filters::default(),
                limit: 7,
                cursor: cursor.take(),
                format: Format::Json,
            };
            let page = reference::views_list(&views, &streams, &q);
            seen.extend(
                page.items
                    .iter()
                    .map(|i| (i.started_at, i.session_id.clone())),
            );
            match page.next_cursor {
                Some(c) => cursor = crate::query::Cursor::decode(&c),
                None => break,
            }
        }
        assert_eq!(seen.len(), views.len());
        let mut sorted = seen.clone();
        sorted.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        assert_eq!(seen, sorted);
    }

    #[test]
    fn breakdown_groups_partition_the_selection() {
        let fleet = Fleet::generate(&FleetConfig::realistic(5, 1_000));
        let views = fleet.views();
        let streams = stream_map(&fleet);
        for by in [
            Dimension::ContentId,
            Dimension::Browser,
            Dimension::Os,
            Dimension::DeviceType,
            Dimension::Sdk,
            Dimension::Player,
            Dimension::StreamId,
            Dimension::Tag("plan".into()),
            Dimension::Tag("missing".into()),
        ] {
            let q = BreakdownQuery {
                range: TimeRange {
                    from_ms: 0,
                    to_ms: i64::MAX / 2,
                },
                filters: Filters::default(),
                metric: Metric::Views,
                measurement: Measurement::P50,
                by: by.clone(),
                order_by: OrderBy::Views,
                limit: 1_000,
                format: Format::Json,
            };
            let body = reference::breakdown(&views, &streams, &q);
            let total: i64 = body.items.iter().map(|i| i.views).sum();
            assert_eq!(total, 1_000, "{by}");
            assert!(body.items.windows(2).all(|w| w[0].views >= w[1].views));
        }
    }

    /// Millisecond-by-millisecond oracle of §2's time rules: an interval walk's state
    /// after the events at `ts ≤ t` is "open" iff the last open/close event so far was an
    /// open, so its length is the number of ms in `[firstFrameAt, endedAt)` spent open.
    fn oracle(events: &[Event]) -> (i64, i64, i64, f64, i64) {
        let mut evs: Vec<&Event> = events.iter().collect();
        evs.sort_by_key(|e| e.order_key());
        evs.dedup_by_key(|e| e.order_key());
        let ended = evs.last().map_or(0, |e| e.ts_ms);
        let Some(ff) = evs
            .iter()
            .find(|e| e.event_type == EventType::PlaybackStart)
            .map(|e| e.ts_ms)
        else {
            return (0, 0, 0, 0.0, 0);
        };
        let walked: Vec<&&Event> = evs.iter().filter(|e| e.ts_ms >= ff).collect();
        let state_at = |t: i64, open: EventType, close: EventType| {
            walked
                .iter()
                .rev()
                .find(|e| e.ts_ms <= t && (e.event_type == open || e.event_type == close))
                .is_some_and(|e| e.event_type == open)
        };
        // A stall is opened by a start whose previous start/end in the walk is not a start.
        let mut count = 0;
        let mut prev_open = false;
        for e in &walked {
            match e.event_type {
                EventType::RebufferStart => {
                    count += i64::from(!prev_open);
                    prev_open = true;
                }
                EventType::RebufferEnd => prev_open = false,
                _ => {}
            }
        }
        let (mut stalled, mut paused, mut sum, mut covered) = (0, 0, 0.0, 0);
        for t in ff..ended {
            stalled += i64::from(state_at(
                t,
                EventType::RebufferStart,
                EventType::RebufferEnd,
            ));
            paused += i64::from(state_at(
                t,
                EventType::PlaybackPause,
                EventType::PlaybackResume,
            ));
            let bitrate = evs
                .iter()
                .rev()
                .find(|e| e.event_type == EventType::QualityChange && e.ts_ms <= t)
                .and_then(|e| e.bitrate);
            if let Some(b) = bitrate {
                sum += b;
                covered += 1;
            }
        }
        (count, stalled, paused, sum, covered)
    }

    #[test]
    fn interval_rules_match_a_millisecond_oracle() {
        // Adversarial views are short (≤ ~4 min), so a per-ms walk stays cheap.
        let fleet = Fleet::generate(&FleetConfig::adversarial(99, 300));
        let mut per_session: BTreeMap<&str, Vec<Event>> = BTreeMap::new();
        for b in &fleet.batches {
            per_session
                .entry(&b.session_id)
                .or_default()
                .extend(b.events.iter().map(Event::from_stored));
        }
        let views: HashMap<String, View> = fleet
            .views()
            .into_iter()
            .map(|v| (v.session_id.clone(), v))
            .collect();
        let mut checked = 0;
        for (id, events) in per_session {
            let v = &views[id];
            let (count, stalled, paused, sum, covered) = oracle(&events);
            assert_eq!(v.rebuffer_count, count, "{id}");
            assert_eq!(v.rebuffer_ms, stalled, "{id}");
            assert_eq!(v.paused_ms, paused, "{id}");
            assert_eq!(v.bitrate_covered_ms, covered, "{id}");
            // Integral bitrates: both sums are exact integers in f64.
            assert_eq!(v.bitrate_weighted_sum, sum, "{id}");
            if let Some(ff) = v.first_frame_at {
                assert_eq!(v.watch_time_ms, (v.ended_at - ff - paused).max(0));
            }
            checked += 1;
        }
        assert_eq!(checked, 300);
    }

    #[test]
    fn derived_views_keep_their_invariants() {
        for seed in SEEDS {
            for cfg in [
                FleetConfig::adversarial(seed, 200),
                FleetConfig::realistic(seed, 200),
            ] {
                for v in Fleet::generate(&cfg).views() {
                    assert!(v.started_at <= v.ended_at);
                    assert_eq!(v.started, v.first_frame_at.is_some());
                    assert_eq!(v.failed, v.failed_at.is_some());
                    assert!(!v.startup_failure || v.failed);
                    assert!(!v.exit_before_start || (!v.started && !v.failed));
                    assert!(v.rebuffer_ms >= 0 && v.paused_ms >= 0 && v.watch_time_ms >= 0);
                    assert!(v.upshifts + v.downshifts <= v.rendition_switches);
                    if let Some(ff) = v.first_frame_at {
                        let span = v.ended_at - ff;
                        assert!(v.rebuffer_ms <= span && v.paused_ms <= span);
                        assert!(v.bitrate_covered_ms <= span);
                        assert!(v.watch_time_ms <= span);
                    } else {
                        assert_eq!(
                            (v.rebuffer_count, v.watch_time_ms, v.bitrate_covered_ms),
                            (0, 0, 0)
                        );
                    }
                    assert!(v.fatal_error_code.is_none() || v.failed);
                }
            }
        }
    }
}
