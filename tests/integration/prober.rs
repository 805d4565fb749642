//! The prober end to end (decisions.md §6, interface.md "Agent feed"): the real server probes
//! a real local HTTP origin on 127.0.0.x, and the outcome is read back through
//! `GET /api/v1/streams`, `GET /api/v1/streams/{id}` and `GET /api/v1/agents`. Also: the SSRF
//! guard on redirects and at connect time, scheduling (immediate first probe, quarter interval
//! while not healthy, start-up spread, shutdown), and two instances sharing one PostgreSQL.

use crate::common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{parts, spawn_with, Engine, Process, TestApp};
use reqwest::StatusCode;
use serde_json::{json, Value};
use sqlx::Row;
use streamwatch::config::{CidrList, Config, DatabaseUrl};
use streamwatch::db::Db;
use streamwatch::prober::fetch::{FetchConfig, Fetcher};
use streamwatch::prober::scheduler::{Scheduler, SchedulerConfig};
use streamwatch::ssrf::{Guard, StaticLookup};
use streamwatch::streams::{NewStream, Streams};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

// ---------------------------------------------------------------------------------------------
// A local origin
// ---------------------------------------------------------------------------------------------

/// One canned answer.
#[derive(Clone, Debug)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
    delay: Duration,
    /// When set, the answer also waits (after `delay`) until the test opens this gate.
    gate: Option<Arc<tokio::sync::Semaphore>>,
}

fn reply(status: u16, body: &str) -> Reply {
    Reply {
        status,
        headers: vec![],
        body: body.to_owned(),
        delay: Duration::ZERO,
        gate: None,
    }
}

fn delayed(r: Reply, delay: Duration) -> Reply {
    Reply { delay, ..r }
}

/// `r`, held after its delay until `gate` gets a permit (see [`open`]).
fn gated(r: Reply, gate: &Arc<tokio::sync::Semaphore>) -> Reply {
    Reply {
        gate: Some(Arc::clone(gate)),
        ..r
    }
}

/// Lets every answer held by `gate` go.
fn open(gate: &tokio::sync::Semaphore) {
    gate.add_permits(tokio::sync::Semaphore::MAX_PERMITS / 2);
}

fn redirect(to: &str) -> Reply {
    Reply {
        headers: vec![("Location".into(), to.into())],
        ..reply(302, "")
    }
}

/// A live media playlist (no ENDLIST) at a given media sequence.
fn live(target_duration: u32, sequence: u64) -> String {
    format!(
        "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:{target_duration}\n#EXT-X-MEDIA-SEQUENCE:{sequence}\n\
         #EXTINF:{target_duration}.0,\nseg{sequence}.ts\n#EXTINF:{target_duration}.0,\nseg{}.ts\n",
        sequence + 1
    )
}

/// A finished (VOD) media playlist: valid, never stale.
const VOD: &str = "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:6\n#EXT-X-MEDIA-SEQUENCE:0\n\
                   #EXTINF:6.0,\nseg0.ts\n#EXTINF:6.0,\nseg1.ts\n#EXT-X-ENDLIST\n";

/// A minimal HTTP/1.1 origin (one request per connection) whose replies the test changes
/// while the server probes it. Unknown paths answer 404.
struct Origin {
    addr: SocketAddr,
    routes: Arc<Mutex<HashMap<String, Reply>>>,
    hits: Arc<Mutex<HashMap<String, usize>>>,
    arrivals: Arc<Mutex<Vec<Instant>>>,
}

impl Origin {
    async fn start(ip: &str) -> Origin {
        let listener = TcpListener::bind((ip, 0)).await.expect("bind origin");
        let addr = listener.local_addr().expect("addr");
        let routes: Arc<Mutex<HashMap<String, Reply>>> = Arc::default();
        let hits: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let arrivals: Arc<Mutex<Vec<Instant>>> = Arc::default();
        let (r, h, a) = (
            Arc::clone(&routes),
            Arc::clone(&hits),
            Arc::clone(&arrivals),
        );
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                tokio::spawn(serve_one(
                    sock,
                    Arc::clone(&r),
                    Arc::clone(&h),
                    Arc::clone(&a),
                ));
            }
        });
        Origin {
            addr,
            routes,
            hits,
            arrivals,
        }
    }

    /// When each request arrived, in order.
    fn arrivals(&self) -> Vec<Instant> {
        self.arrivals.lock().expect("arrivals").clone()
    }

    fn set(&self, path: &str, r: Reply) {
        self.routes
            .lock()
            .expect("routes")
            .insert(path.to_owned(), r);
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    fn hits(&self, path: &str) -> usize {
        self.hits
            .lock()
            .expect("hits")
            .get(path)
            .copied()
            .unwrap_or(0)
    }
}

async fn serve_one(
    mut sock: tokio::net::TcpStream,
    routes: Arc<Mutex<HashMap<String, Reply>>>,
    hits: Arc<Mutex<HashMap<String, usize>>>,
    arrivals: Arc<Mutex<Vec<Instant>>>,
) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match sock.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    arrivals.lock().expect("arrivals").push(Instant::now());
    let head = String::from_utf8_lossy(&buf).to_string();
    let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
    *hits.lock().expect("hits").entry(path.clone()).or_default() += 1;
    let r = routes
        .lock()
        .expect("routes")
        .get(&path)
        .cloned()
        .unwrap_or_else(|| reply(404, "not found"));
    tokio::time::sleep(r.delay).await;
    if let Some(gate) = &r.gate {
        let _ = gate.acquire().await;
    }
    let mut out = format!(
        "HTTP/1.1 {} X\r\nContent-Length: {}\r\nConnection: close\r\n",
        r.status,
        r.body.len()
    );
    for (k, v) in &r.headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    out.push_str(&r.body);
    let _ = sock.write_all(out.as_bytes()).await;
    let _ = sock.shutdown().await;
}

/// A listener on an address the guard must refuse: counts every connection it gets.
struct Tripwire {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
}

impl Tripwire {
    async fn start(ip: &str) -> Tripwire {
        let listener = TcpListener::bind((ip, 0)).await.expect("bind tripwire");
        let addr = listener.local_addr().expect("addr");
        let connections = Arc::new(AtomicUsize::new(0));
        let c = Arc::clone(&connections);
        tokio::spawn(async move {
            while let Ok((_sock, _)) = listener.accept().await {
                c.fetch_add(1, Ordering::SeqCst);
            }
        });
        Tripwire { addr, connections }
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

// ---------------------------------------------------------------------------------------------
// Reading the API
// ---------------------------------------------------------------------------------------------

/// Slow threshold of these tests. Origin delays sit far from its edges (0, 600 and 1,600 ms
/// against 500 and 1,000 ms), and where a verdict depends on a measured latency the expected
/// answer is derived from the latency the probe reports, so a loaded machine cannot fail a test.
const SLOW_MS: u64 = 1000;

fn prober_config(c: &mut Config, interval_ms: u64, timeout_ms: u64, allow: &str) {
    c.probe_interval = Duration::from_millis(interval_ms);
    c.probe_timeout = Duration::from_millis(timeout_ms);
    c.slow_ms = SLOW_MS;
    c.allow_private = CidrList(vec![allow.parse().expect("cidr")]);
}

/// One consistent view of a stream: its list item, its StreamStatus and its feed items
/// (newest first), read with no probe recorded in between.
struct View {
    item: Value,
    status: Value,
    feed: Vec<Value>,
}

impl View {
    fn newest(&self) -> &Value {
        self.feed
            .first()
            .expect("the stream has a probe in the feed")
    }

    /// The newest feed items that share the newest item's detail (a run of identical probes).
    fn run_of_newest(&self) -> usize {
        let detail = &self.newest()["detail"];
        self.feed
            .iter()
            .take_while(|i| &i["detail"] == detail)
            .count()
    }

    /// `uptimePct` as decisions.md v1.1 §6 defines it, from the stream's own probes.
    fn expected_uptime(&self) -> f64 {
        let playable = self
            .feed
            .iter()
            .filter(|i| {
                let d = i["detail"].as_str().expect("detail");
                d == "probe ok" || d.starts_with("slow response:")
            })
            .count();
        let pct = 100.0 * playable as f64 / self.feed.len() as f64;
        (pct * 100.0).round() / 100.0
    }
}

async fn list_item(app: &TestApp, cookie: &str, id: &str) -> Value {
    let (s, list) = parts(app.get("/api/v1/streams", Some(cookie)).await).await;
    assert_eq!(s, StatusCode::OK);
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .find(|i| i["id"] == id)
        .cloned()
        .expect("stream listed")
}

async fn view(app: &TestApp, cookie: &str, id: &str) -> View {
    for _ in 0..50 {
        let before = list_item(app, cookie, id).await;
        let (_, status) = parts(
            app.get(&format!("/api/v1/streams/{id}"), Some(cookie))
                .await,
        )
        .await;
        let (s, feed) = parts(
            app.get(
                &format!("/api/v1/agents?streamId={id}&limit=500"),
                Some(cookie),
            )
            .await,
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{feed}");
        let after = list_item(app, cookie, id).await;
        if before == after && status["lastCheckedAt"] == after["lastCheckedAt"] {
            let feed: Vec<Value> = feed["items"].as_array().expect("items").clone();
            assert!(
                feed.iter().all(|i| i["streamId"] == id),
                "filtered by stream"
            );
            return View {
                item: after,
                status,
                feed,
            };
        }
    }
    panic!("no stable view of stream {id}");
}

/// Polls the stream until `done` holds for its view, or panics after `within` (generous:
/// these waits only bound a hang, they measure nothing).
async fn wait_until(
    app: &TestApp,
    cookie: &str,
    id: &str,
    within: Duration,
    done: impl Fn(&View) -> bool,
) -> View {
    let deadline = Instant::now() + within;
    loop {
        let v = view(app, cookie, id).await;
        if done(&v) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "condition not reached for {id}: {} / {:?}",
            v.item,
            v.feed.first()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn probed(v: &View) -> bool {
    !v.item["lastCheckedAt"].is_null() && !v.feed.is_empty()
}

fn status_is(s: &'static str) -> impl Fn(&View) -> bool {
    move |v| probed(v) && v.item["status"] == s
}

/// What the newest probe of a stream must show.
struct Expect {
    status: &'static str,
    agent_state: &'static str,
    severity: &'static str,
    anomaly_class: &'static str,
    action: &'static str,
    uptime: f64,
}

const HEALTHY: Expect = Expect {
    status: "watching",
    agent_state: "healthy",
    severity: "info",
    anomaly_class: "no anomaly",
    action: "no action needed — stream healthy",
    uptime: 100.0,
};

/// What a 2xx probe with a valid manifest shows at latency `l` (decisions.md §6).
fn valid_at(l: u64) -> Expect {
    if l > SLOW_MS {
        Expect {
            status: "degraded",
            agent_state: "degraded",
            severity: "warn",
            anomaly_class: "slow response",
            action: "raised probe frequency — confirming degradation",
            uptime: 100.0,
        }
    } else if l * 2 >= SLOW_MS {
        Expect {
            action: "watching latency — response time rising",
            ..HEALTHY
        }
    } else {
        HEALTHY
    }
}

/// Asserts the snapshot, the StreamStatus and the newest feed item of a view, with the given
/// `lastAction`, `fix` and `detail`.
fn assert_view(v: &View, e: &Expect, last_action: &str, fix: &str, detail: &str) {
    let newest = v.newest();
    let i = &v.item;
    assert_eq!(
        (
            i["status"].as_str(),
            i["agentState"].as_str(),
            i["lastAction"].as_str(),
            i["uptimePct"].as_f64()
        ),
        (
            Some(e.status),
            Some(e.agent_state),
            Some(last_action),
            Some(e.uptime)
        ),
        "list item {i}"
    );
    assert_eq!(
        i["lastCheckedAt"], newest["createdAt"],
        "lastCheckedAt is the newest probe's time"
    );
    assert_eq!(
        v.status,
        json!({
            "id": i["id"], "sourceUrl": i["sourceUrl"], "agentState": e.agent_state, "uptimePct": e.uptime,
            "lastAction": last_action, "lastCheckedAt": i["lastCheckedAt"],
        })
    );
    assert_eq!(
        *newest,
        json!({
            "id": newest["id"], "streamId": i["id"], "sourceUrl": i["sourceUrl"], "streamName": i["name"],
            "severity": e.severity, "anomalyClass": e.anomaly_class, "fix": fix, "action": e.action,
            "createdAt": newest["createdAt"], "latencyMs": newest["latencyMs"], "detail": detail,
        })
    );
}

fn latency(v: &View) -> u64 {
    v.newest()["latencyMs"].as_u64().expect("latencyMs")
}

const RAISED: &str = "raised probe frequency after degraded probe";

/// `lastAction` after a run of `run` not-playable degraded probes: the first raises the
/// frequency, the second confirms and opens an incident named `why`.
fn confirming(run: usize, why: &str) -> String {
    if run == 1 {
        RAISED.to_owned()
    } else {
        format!("opened incident: {why}")
    }
}

// ---------------------------------------------------------------------------------------------
// Classification end to end
// ---------------------------------------------------------------------------------------------

/// Every row of the classification table (decisions.md §6), through the real prober, with the
/// v1.1 uptime rule: a slow stream is up, a 404 or an invalid manifest is down.
async fn each_outcome_is_classified_end_to_end(engine: Engine) {
    let origin = Origin::start("127.0.0.1").await;
    origin.set("/ok.m3u8", reply(200, VOD));
    origin.set(
        "/rising.m3u8",
        delayed(reply(200, VOD), Duration::from_millis(600)),
    );
    origin.set(
        "/slow.m3u8",
        delayed(reply(200, VOD), Duration::from_millis(1600)),
    );
    origin.set("/html.m3u8", reply(200, "<html>oops</html>"));
    origin.set("/gone.m3u8", reply(404, "gone"));
    origin.set("/busy.m3u8", reply(503, "busy"));
    origin.set(
        "/hang.m3u8",
        delayed(reply(200, VOD), Duration::from_secs(30)),
    );
    let app = spawn_with(engine, |c| prober_config(c, 2000, 3000, "127.0.0.1/32")).await;
    let cookie = app.user("op@example.com").await;
    let mut ids = HashMap::new();
    for path in [
        "/ok.m3u8",
        "/rising.m3u8",
        "/slow.m3u8",
        "/html.m3u8",
        "/gone.m3u8",
        "/busy.m3u8",
        "/hang.m3u8",
    ] {
        let item = app.stream(&cookie, &origin.url(path)).await;
        ids.insert(path, item["id"].as_str().expect("id").to_owned());
    }
    let refused = app.stream(&cookie, "http://127.0.0.1:9/closed.m3u8").await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let wait = Duration::from_secs(30);

    // A 2xx with a valid manifest: healthy (or, on a stalled machine, whatever its latency says).
    for path in ["/ok.m3u8", "/rising.m3u8"] {
        let v = wait_until(&app, &cookie, &ids[path], wait, probed).await;
        let l = latency(&v);
        let e = valid_at(l);
        let action = if l > SLOW_MS {
            RAISED.to_owned()
        } else {
            format!("probe ok in {l} ms")
        };
        let detail = if l > SLOW_MS {
            format!("slow response: {l} ms > {SLOW_MS} ms")
        } else {
            "probe ok".to_owned()
        };
        if v.feed.len() == 1 {
            assert_view(&v, &e, &action, &action, &detail);
        }
        if path == "/rising.m3u8" {
            assert!(l >= 600, "the origin waits 600 ms: {l}");
        }
    }

    let degraded = |class, uptime| Expect {
        status: "degraded",
        agent_state: "degraded",
        severity: "warn",
        anomaly_class: class,
        action: "raised probe frequency — confirming degradation",
        uptime,
    };

    // 2xx slower than slow-ms: degraded, but playable, so never an incident and never down.
    let v = wait_until(
        &app,
        &cookie,
        &ids["/slow.m3u8"],
        wait,
        status_is("degraded"),
    )
    .await;
    let l = latency(&v);
    assert!(l > SLOW_MS, "{l}");
    assert_view(
        &v,
        &degraded("slow response", 100.0),
        RAISED,
        RAISED,
        &format!("slow response: {l} ms > {SLOW_MS} ms"),
    );

    // 2xx with an invalid manifest: degraded and down; the second such probe opens an incident.
    let v = wait_until(&app, &cookie, &ids["/html.m3u8"], wait, |v| {
        status_is("degraded")(v) && v.feed.len() >= 2
    })
    .await;
    let last = confirming(v.run_of_newest(), "manifest invalid");
    assert_eq!(last, "opened incident: manifest invalid");
    assert_view(
        &v,
        &degraded("slow response", 0.0),
        &last,
        &last,
        "manifest invalid: not an HLS or DASH manifest",
    );

    // 4xx: a manifest that answers 404 is down for every viewer (v1.1), and the agent does not
    // confirm forever: the second 404 in a row opens an incident.
    let v = wait_until(
        &app,
        &cookie,
        &ids["/gone.m3u8"],
        wait,
        status_is("degraded"),
    )
    .await;
    let last = confirming(v.run_of_newest(), "client error");
    assert_view(&v, &degraded("client error", 0.0), &last, &last, "HTTP 404");
    let v = wait_until(&app, &cookie, &ids["/gone.m3u8"], wait, |v| {
        v.feed.len() >= 3
    })
    .await;
    assert_view(
        &v,
        &degraded("client error", 0.0),
        "opened incident: client error",
        "opened incident: client error",
        "HTTP 404",
    );

    let failing = |class| Expect {
        status: "failing",
        agent_state: "degraded",
        severity: "critical",
        anomaly_class: class,
        action: "investigating",
        uptime: 0.0,
    };

    // 5xx.
    let v = wait_until(
        &app,
        &cookie,
        &ids["/busy.m3u8"],
        wait,
        status_is("failing"),
    )
    .await;
    assert_view(
        &v,
        &failing("5xx server error"),
        "opened incident: 5xx server error",
        "investigating",
        "HTTP 503",
    );

    // Timeout of the whole probe.
    let v = wait_until(
        &app,
        &cookie,
        &ids["/hang.m3u8"],
        wait,
        status_is("failing"),
    )
    .await;
    assert_view(
        &v,
        &failing("network / timeout"),
        "opened incident: network / timeout",
        "investigating",
        "timeout after 3 s",
    );
    assert!(latency(&v) >= 3000, "{}", latency(&v));

    // Connect error (nothing listens on port 9).
    let v = wait_until(&app, &cookie, &refused, wait, status_is("failing")).await;
    let detail = v.newest()["detail"].as_str().expect("detail").to_owned();
    assert!(detail.starts_with("connect error: "), "{detail}");
    assert_view(
        &v,
        &failing("network / timeout"),
        "opened incident: network / timeout",
        "investigating",
        &detail,
    );

    drop(app);
}

/// The staleness rule and recovery from a stale and from a failing stream. (The spacing of
/// probes — a quarter interval while not healthy — is checked on the scheduler's pure
/// `probe_row` in `src/prober/scheduler.rs`, where no clock is involved.)
async fn staleness_and_recovery_end_to_end(engine: Engine) {
    let origin = Origin::start("127.0.0.1").await;
    origin.set("/live.m3u8", reply(200, &live(1, 42)));
    origin.set("/flaky.m3u8", reply(503, "busy"));
    let app = spawn_with(engine, |c| prober_config(c, 4000, 2000, "127.0.0.1/32")).await;
    let cookie = app.user("op@example.com").await;
    let id = |v: Value| v["id"].as_str().expect("id").to_owned();
    let live_id = id(app.stream(&cookie, &origin.url("/live.m3u8")).await);
    let flaky = id(app.stream(&cookie, &origin.url("/flaky.m3u8")).await);
    let wait = Duration::from_secs(30);

    // Failing, not yet recovered: investigating.
    let v = wait_until(&app, &cookie, &flaky, wait, |v| v.feed.len() >= 2).await;
    for item in &v.feed {
        assert_eq!(
            (&item["fix"], &item["action"]),
            (&json!("investigating"), &json!("investigating")),
            "{item}"
        );
    }

    // A live playlist whose media sequence has not moved for 3 target durations (3 s) is
    // stale: degraded, and down for viewers.
    let v = wait_until(&app, &cookie, &live_id, wait, status_is("degraded")).await;
    let detail = v.newest()["detail"].as_str().expect("detail").to_owned();
    let stuck: u64 = detail
        .strip_prefix("media sequence stuck at 42 for ")
        .and_then(|s| s.strip_suffix(" s"))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{detail}"));
    assert!(stuck >= 3, "{detail}");
    let last = confirming(v.run_of_newest(), "stale manifest");
    let stale = Expect {
        status: "degraded",
        agent_state: "degraded",
        severity: "warn",
        anomaly_class: "slow response",
        action: "raised probe frequency — confirming degradation",
        uptime: v.expected_uptime(),
    };
    assert!(stale.uptime < 100.0, "a stale playlist is down");
    assert_view(&v, &stale, &last, &last, &detail);
    assert_eq!(
        v.feed.last().expect("first")["detail"],
        "probe ok",
        "fresh at first sight"
    );

    // Recovery of the failing stream: the incident is closed, its failing rows resolved.
    origin.set("/flaky.m3u8", reply(200, VOD));
    let v = wait_until(&app, &cookie, &flaky, wait, status_is("watching")).await;
    let closed = "closed incident after recovery";
    let l = latency(&v);
    assert_view(
        &v,
        &Expect {
            uptime: v.expected_uptime(),
            ..valid_at(l)
        },
        closed,
        closed,
        "probe ok",
    );
    let earlier: Vec<&Value> = v.feed.iter().skip(1).collect();
    assert!(earlier.len() >= 2);
    for item in earlier {
        assert_eq!(
            (
                &item["severity"],
                &item["anomalyClass"],
                &item["fix"],
                &item["action"],
                &item["detail"]
            ),
            (
                &json!("critical"),
                &json!("5xx server error"),
                &json!(closed),
                &json!("resolved — stream recovered"),
                &json!("HTTP 503")
            ),
        );
    }

    // Recovery of the stale stream.
    origin.set("/live.m3u8", reply(200, &live(1, 43)));
    let v = wait_until(&app, &cookie, &live_id, wait, status_is("watching")).await;
    let l = latency(&v);
    assert_view(
        &v,
        &Expect {
            uptime: v.expected_uptime(),
            ..valid_at(l)
        },
        closed,
        closed,
        "probe ok",
    );
    let stale_rows: Vec<&Value> = v
        .feed
        .iter()
        .filter(|i| i["anomalyClass"] == "slow response")
        .collect();
    assert!(!stale_rows.is_empty());
    for item in stale_rows {
        assert_eq!(
            (&item["fix"], &item["action"]),
            (
                &json!(closed),
                &json!("raised probe frequency — confirming degradation")
            )
        );
    }
    drop(app);
}

// ---------------------------------------------------------------------------------------------
// The guard at probe time
// ---------------------------------------------------------------------------------------------

/// A redirect to an address outside the allow-list is refused before connecting.
async fn redirect_to_refused_address_fails_without_reaching_it(engine: Engine) {
    let origin = Origin::start("127.0.0.2").await;
    let tripwire = Tripwire::start("127.0.0.3").await;
    origin.set(
        "/start.m3u8",
        redirect(&format!("http://{}/live.m3u8", tripwire.addr)),
    );
    let app = spawn_with(engine, |c| prober_config(c, 1000, 1000, "127.0.0.2/32")).await;
    let cookie = app.user("op@example.com").await;
    let id = app.stream(&cookie, &origin.url("/start.m3u8")).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let v = wait_until(&app, &cookie, &id, Duration::from_secs(10), |v| {
        v.feed.len() >= 2
    })
    .await;
    let e = Expect {
        status: "failing",
        agent_state: "degraded",
        severity: "critical",
        anomaly_class: "network / timeout",
        action: "investigating",
        uptime: 0.0,
    };
    assert_view(
        &v,
        &e,
        "opened incident: network / timeout",
        "investigating",
        "refused: Hostname resolves to a private address (127.0.0.3)",
    );
    assert!(origin.hits("/start.m3u8") >= 2);
    assert_eq!(
        tripwire.connections(),
        0,
        "the refused address received a connection"
    );
    drop(app);
}

/// The guard applies to the address actually connected to: a name that resolved to a public
/// address at registration but resolves to a refused one at probe time is never connected to.
/// Runs the prober task itself with test resolvers, on a real store and a real listener.
async fn name_resolving_to_refused_address_at_probe_time_is_never_connected(engine: Engine) {
    let tripwire = Tripwire::start("127.0.0.3").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, _) = open_db(engine, dir.path()).await;
    let public = ["93.184.216.34".parse().expect("ip")];
    let at_registration = Guard::new(vec![], StaticLookup::new().with("origin.example", &public));
    let url = format!("http://origin.example:{}/live.m3u8", tripwire.addr.port());
    let body = NewStream {
        source_url: url.clone(),
        name: None,
        target_region: None,
    };
    let stream = Streams::new(db.clone(), at_registration, 1000)
        .register(None, &body)
        .await
        .expect("registered");

    let private = ["127.0.0.3".parse().expect("ip")];
    let at_probe = Guard::new(
        vec!["127.0.0.2/32".parse().expect("cidr")],
        StaticLookup::new().with("origin.example", &private),
    );
    let fetcher = Fetcher::new(Arc::new(at_probe), FetchConfig::new(Duration::from_secs(1)))
        .expect("fetcher");
    let cfg = SchedulerConfig {
        interval: Duration::from_millis(400),
        probe_timeout: Duration::from_secs(1),
        slow_ms: SLOW_MS,
        max_in_flight: 4,
    };
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(Scheduler::new(db.clone(), fetcher, cfg).run(stopped));
    let deadline = Instant::now() + Duration::from_secs(10);
    while probe_rows(&db, &stream.id).await.len() < 2 {
        assert!(Instant::now() < deadline, "no probes recorded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.send(true).expect("stop");
    task.await.expect("scheduler ends");

    let rows = probe_rows(&db, &stream.id).await;
    for (status, class, detail, http) in &rows {
        assert_eq!(
            (status.as_str(), class.as_str(), detail.as_str(), *http),
            (
                "failing",
                "network / timeout",
                "refused: Hostname resolves to a private address (127.0.0.3)",
                None
            )
        );
    }
    let snap = sqlx::query(
        "SELECT status, agent_state, last_action, lease_until FROM streams WHERE id = $1",
    )
    .bind(&stream.id)
    .fetch_one(&db.pool)
    .await
    .expect("stream");
    assert_eq!(snap.get::<String, _>("status"), "failing");
    assert_eq!(snap.get::<String, _>("agent_state"), "degraded");
    assert_eq!(
        snap.get::<String, _>("last_action"),
        "opened incident: network / timeout"
    );
    assert_eq!(
        snap.get::<Option<i64>, _>("lease_until"),
        None,
        "shutdown left no lease behind"
    );
    assert_eq!(
        tripwire.connections(),
        0,
        "the refused address received a connection"
    );
}

/// A migrated store of its own (not yet used by any server) and its URL.
async fn open_db(engine: Engine, dir: &std::path::Path) -> (Db, DatabaseUrl) {
    let url = match engine {
        Engine::Postgres => DatabaseUrl::Postgres(common::fresh_pg_database().await),
        Engine::Sqlite => DatabaseUrl::Sqlite(format!("sqlite://{}", dir.join("sw.db").display())),
    };
    let db = Db::connect(Some(&url), dir).await.expect("db");
    (db, url)
}

/// (status, anomaly_class, detail, http_status) of a stream's probe rows, oldest first.
async fn probe_rows(db: &Db, stream_id: &str) -> Vec<(String, String, String, Option<i64>)> {
    sqlx::query("SELECT status, anomaly_class, detail, http_status FROM probes WHERE stream_id = $1 ORDER BY created_at, seq")
        .bind(stream_id)
        .fetch_all(&db.pool)
        .await
        .expect("probes")
        .iter()
        .map(|r| (r.get("status"), r.get("anomaly_class"), r.get("detail"), r.get("http_status")))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Scheduling
// ---------------------------------------------------------------------------------------------

/// Shutdown waits for the probe in flight: its row is recorded and its lease released.
async fn shutdown_waits_for_probes_in_flight(engine: Engine) {
    let origin = Origin::start("127.0.0.1").await;
    // Slow (over slow-ms), and held until the test lets it go: the probe is in flight for as
    // long as the test needs, however slow the machine.
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    origin.set(
        "/slow.m3u8",
        gated(delayed(reply(200, VOD), Duration::from_millis(1500)), &gate),
    );
    // The server is run directly (not through TestApp, which keeps the app state alive): only
    // the stop signal ends it.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = common::test_config(engine, dir.path()).await;
    prober_config(&mut config, 30_000, 8000, "127.0.0.1/32");
    let server = streamwatch::startup::Server::build(config)
        .await
        .expect("server builds");
    let db = server.state.db.clone();
    let guard = Guard::new(
        vec!["127.0.0.1/32".parse().expect("cidr")],
        StaticLookup::new(),
    );
    let body = NewStream {
        source_url: origin.url("/slow.m3u8"),
        name: None,
        target_region: None,
    };
    let id = Streams::new(db.clone(), guard, 1000)
        .register(None, &body)
        .await
        .expect("registered")
        .id;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(server.run(async move {
        let _ = stopped.await;
    }));
    let deadline = Instant::now() + Duration::from_secs(30);
    while origin.hits("/slow.m3u8") == 0 {
        assert!(Instant::now() < deadline, "the stream was not probed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        probe_rows(&db, &id).await.is_empty(),
        "the probe is still in flight"
    );
    stop.send(()).expect("stop");
    // Stopping, the server waits on the held probe (well within its 8 s timeout).
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !running.is_finished(),
        "the server ended with a probe in flight"
    );
    open(&gate);
    tokio::time::timeout(Duration::from_secs(30), running)
        .await
        .expect("the server stops")
        .expect("joins")
        .expect("runs");
    let rows = probe_rows(&db, &id).await;
    assert_eq!(
        rows.len(),
        1,
        "the probe in flight was recorded before exit"
    );
    assert_eq!(
        (rows[0].0.as_str(), rows[0].1.as_str()),
        ("degraded", "slow response")
    );
    let lease: Option<i64> = sqlx::query("SELECT lease_until FROM streams WHERE id = $1")
        .bind(&id)
        .fetch_one(&db.pool)
        .await
        .expect("row")
        .get(0);
    assert_eq!(lease, None);
}

/// Soak: streams left overdue by downtime are spread over one interval at start-up, not probed
/// at once; each is probed once in that interval. (Timing-based: `./scripts/soak`. The main
/// suite checks the spread itself in `overdue_streams_are_spread_over_one_interval`.)
async fn startup_spreads_overdue_streams_over_one_interval(engine: Engine) {
    let origin = Origin::start("127.0.0.1").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, url) = open_db(engine, dir.path()).await;
    let long_ago = streamwatch::time::now_ms() - 3_600_000;
    for i in 0..40 {
        let path = format!("/s{i}.m3u8");
        origin.set(&path, reply(200, VOD));
        sqlx::query(
            "INSERT INTO streams (id, source_url, name, target_region, created_at, agent_state, status, last_action, next_probe_at) \
             VALUES ($1, $2, $3, 'auto', $4, 'healthy', 'watching', 'registered', $4)",
        )
        .bind(format!("s{i}"))
        .bind(origin.url(&path))
        .bind(format!("s{i}"))
        .bind(long_ago)
        .execute(&db.pool)
        .await
        .expect("insert");
    }
    let interval: u64 = 3000;
    let iv = interval as i64;
    let started = streamwatch::time::now_ms();
    let app = spawn_with(engine, |c| {
        prober_config(c, interval, 1000, "127.0.0.1/32");
        c.database_url = Some(url);
    })
    .await;
    tokio::time::sleep(Duration::from_millis(interval / 4)).await;
    let early: i64 = sqlx::query("SELECT COUNT(*) FROM probes")
        .fetch_one(&db.pool)
        .await
        .expect("count")
        .get(0);
    assert!(
        early < 28,
        "{early} of 40 overdue streams probed in the first quarter interval: a herd"
    );
    tokio::time::sleep(Duration::from_millis(interval + 1000)).await;
    let rows =
        sqlx::query("SELECT stream_id, created_at FROM probes ORDER BY stream_id, created_at")
            .fetch_all(&db.pool)
            .await
            .expect("probes");
    let mut per_stream: HashMap<String, Vec<i64>> = HashMap::new();
    for r in &rows {
        per_stream
            .entry(r.get("stream_id"))
            .or_default()
            .push(r.get("created_at"));
    }
    assert_eq!(
        per_stream.len(),
        40,
        "every overdue stream probed within one interval"
    );
    let firsts: Vec<i64> = per_stream.values().map(|t| t[0]).collect();
    let (min, max) = (
        firsts.iter().min().copied().unwrap_or(0),
        firsts.iter().max().copied().unwrap_or(0),
    );
    assert!(
        max - min > iv / 2,
        "first probes spread over only {} ms",
        max - min
    );
    assert!(
        max - started < iv + 1500,
        "last first probe {} ms after start",
        max - started
    );
    for times in per_stream.values() {
        for w in times.windows(2) {
            assert!(
                w[1] - w[0] >= iv * 3 / 4,
                "probed twice in one interval: {times:?}"
            );
        }
    }
    drop(app);
}

/// Soak: two server processes on one PostgreSQL share 100 streams: every stream is probed once
/// per interval overall — never twice, never skipped — also after one of them stops.
/// (Timing-based: `./scripts/soak`. The main suite checks that concurrent claims are disjoint in
/// `concurrent_claims_lease_disjoint_streams`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "soak: run with ./scripts/soak"]
async fn two_instances_probe_each_stream_once_per_interval() {
    let origin = Origin::start("127.0.0.1").await;
    let database_url = common::fresh_pg_database().await;
    let interval_ms: i64 = 2000;
    let env = [
        ("DATABASE_URL", database_url.as_str()),
        ("STREAMWATCH_PROBE_INTERVAL", "2s"),
        ("STREAMWATCH_PROBE_TIMEOUT", "1s"),
        (
            "STREAMWATCH_SECRET",
            "an-integration-test-secret-of-40-chars!!",
        ),
    ];
    let (dir_a, dir_b) = (
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    );
    let mut a = Process::start(dir_a.path(), &env).await;
    let mut b = Process::start(dir_b.path(), &env).await;
    let cookie = a.sign_up("op@example.com").await;
    let http = reqwest::Client::new();
    for i in 0..100 {
        let path = format!("/s{i}.m3u8");
        origin.set(&path, reply(200, VOD));
        let r = http
            .post(a.url("/api/v1/streams"))
            .header("cookie", format!("auth.session_token={cookie}"))
            .json(&json!({ "sourceUrl": origin.url(&path) }))
            .send()
            .await
            .expect("register");
        assert_eq!(r.status(), StatusCode::CREATED);
    }
    tokio::time::sleep(Duration::from_secs(8)).await;
    // One instance leaves; the other carries on alone.
    assert!(a.terminate().success());
    tokio::time::sleep(Duration::from_secs(5)).await;
    let stopped_at = streamwatch::time::now_ms();
    assert!(b.terminate().success());

    let db = Db::connect(Some(&DatabaseUrl::Postgres(database_url)), dir_a.path())
        .await
        .expect("db");
    let rows =
        sqlx::query("SELECT stream_id, created_at FROM probes ORDER BY stream_id, created_at")
            .fetch_all(&db.pool)
            .await
            .expect("probes");
    let mut per_stream: HashMap<String, Vec<i64>> = HashMap::new();
    for r in &rows {
        per_stream
            .entry(r.get("stream_id"))
            .or_default()
            .push(r.get("created_at"));
    }
    assert_eq!(per_stream.len(), 100, "every stream probed");
    // A probe may start up to one poll tick (a quarter interval) after its due time, and the
    // next is scheduled from the due time, so single gaps vary by about that much; a double
    // probe would be a gap near zero, a skipped one a gap near two intervals.
    for (id, times) in &per_stream {
        let span = times.last().expect("probe") - times[0];
        let mean = span / (times.len() as i64 - 1).max(1);
        assert!(
            (interval_ms * 9 / 10..=interval_ms * 11 / 10).contains(&mean),
            "stream {id}: mean gap {mean} ms: {times:?}"
        );
        for w in times.windows(2) {
            let gap = w[1] - w[0];
            assert!(
                gap >= interval_ms / 2,
                "stream {id} probed twice in one interval ({gap} ms apart): {times:?}"
            );
            assert!(
                gap <= interval_ms * 3 / 2,
                "stream {id} skipped an interval ({gap} ms): {times:?}"
            );
        }
        let last = *times.last().expect("probe");
        assert!(
            stopped_at - last <= interval_ms * 3 / 2,
            "stream {id} not probed in the last interval"
        );
        assert!(
            times.len() >= 6,
            "stream {id} probed {} times in ~13 s",
            times.len()
        );
    }
    let idle: i64 = sqlx::query("SELECT COUNT(*) FROM streams WHERE lease_until IS NOT NULL")
        .fetch_one(&db.pool)
        .await
        .expect("n")
        .get(0);
    assert_eq!(idle, 0, "both instances released their leases on exit");
    let _ = origin.hits("/s0.m3u8");
}

/// Declares one test per engine for each listed `async fn(Engine)`.
macro_rules! on_both_engines_with_engine {
    ($($case:ident),* $(,)?) => {
        $(
            mod $case {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::$case(super::Engine::Sqlite).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    super::$case(super::Engine::Postgres).await
                }
            }
        )*
    };
}

/// The same, for soak checks that only `./scripts/soak` runs.
macro_rules! soak_on_both_engines_with_engine {
    ($($case:ident),* $(,)?) => {
        $(
            mod $case {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                #[ignore = "soak: run with ./scripts/soak"]
                async fn sqlite() {
                    super::$case(super::Engine::Sqlite).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                #[ignore = "soak: run with ./scripts/soak"]
                async fn postgres() {
                    super::$case(super::Engine::Postgres).await
                }
            }
        )*
    };
}

/// 2,000 streams on one origin host, half of them failing (probed 4× as often): the host
/// receives at most `STREAMWATCH_PROBE_HOST_RATE` requests per second, measured where it
/// arrives, and a stream on another host is still probed on time (no starvation).
async fn one_host_gets_at_most_its_rate_however_many_streams(engine: Engine) {
    const RATE: usize = 20;
    let busy = Origin::start("127.0.0.1").await;
    let other = Origin::start("127.0.0.2").await;
    other.set("/other.m3u8", reply(200, VOD));
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, url) = open_db(engine, dir.path()).await;
    let now = streamwatch::time::now_ms();
    for chunk in 0..20 {
        let mut tx = db.pool.begin().await.expect("tx");
        for i in chunk * 100..(chunk + 1) * 100 {
            let path = format!("/s{i}.m3u8");
            busy.set(
                &path,
                if i % 2 == 0 {
                    reply(200, VOD)
                } else {
                    reply(503, "busy")
                },
            );
            sqlx::query(
                "INSERT INTO streams (id, source_url, name, target_region, created_at, agent_state, status, \
                 last_action, next_probe_at) VALUES ($1, $2, $1, 'auto', $3, 'healthy', 'watching', 'registered', $3)",
            )
            .bind(format!("s{i}"))
            .bind(busy.url(&path))
            .bind(now)
            .execute(&mut *tx)
            .await
            .expect("insert");
        }
        tx.commit().await.expect("commit");
    }
    let app = spawn_with(engine, |c| {
        prober_config(c, 2000, 2000, "127.0.0.0/8");
        c.probe_host_rate = RATE as u32;
        c.database_url = Some(url);
    })
    .await;
    let cookie = app.user("op@example.com").await;
    let other_id = app.stream(&cookie, &other.url("/other.m3u8")).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    tokio::time::sleep(Duration::from_secs(6)).await;
    drop(app);

    let arrivals = busy.arrivals();
    // Demand is ~1,000 requests a second; the host must see the rate, not the demand.
    assert!(arrivals.len() > RATE * 2, "{} requests", arrivals.len());
    let span = arrivals
        .last()
        .expect("a request")
        .duration_since(arrivals[0]);
    assert!(
        arrivals.len() as f64 <= RATE as f64 * (span.as_secs_f64() + 1.0),
        "{} requests in {span:?}",
        arrivals.len()
    );
    // Every one-second window, sliding over the arrivals. The pacer spaces requests exactly
    // (see src/prober/pacer.rs); the slack absorbs a stalled runtime releasing a few late
    // requests together on a loaded machine.
    for (i, t) in arrivals.iter().enumerate() {
        let in_window = arrivals[i..]
            .iter()
            .take_while(|u| u.duration_since(*t) < Duration::from_secs(1))
            .count();
        assert!(
            in_window <= RATE + RATE / 4,
            "{in_window} requests in one second to one host"
        );
    }
    // The saturated host does not hold the probe slots: the other host is probed. (Without the
    // deferral, all 256 slots would wait on the saturated host for longer than this test runs.)
    assert!(
        other.hits("/other.m3u8") >= 1,
        "the other host was probed {} times",
        other.hits("/other.m3u8")
    );
    let probed: i64 = sqlx::query("SELECT COUNT(*) FROM probes WHERE stream_id = $1")
        .bind(&other_id)
        .fetch_one(&db.pool)
        .await
        .expect("count")
        .get(0);
    assert!(probed >= 1, "{probed}");
}

/// Start-up spread, deterministically: overdue streams get due times inside one interval from
/// now, streams due soon are left alone, leased streams are not touched.
async fn overdue_streams_are_spread_over_one_interval(engine: Engine) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, _) = open_db(engine, dir.path()).await;
    let now = streamwatch::time::now_ms();
    let insert = |id: String, next: i64, lease: Option<i64>| {
        let db = db.clone();
        async move {
            sqlx::query(
                "INSERT INTO streams (id, source_url, name, target_region, created_at, agent_state, status, \
                 last_action, next_probe_at, lease_until) \
                 VALUES ($1, $2, $1, 'auto', 0, 'healthy', 'watching', 'registered', $3, $4)",
            )
            .bind(&id)
            .bind(format!("http://127.0.0.1/{id}.m3u8"))
            .bind(next)
            .bind(lease)
            .execute(&db.pool)
            .await
            .expect("insert");
        }
    };
    for i in 0..200 {
        insert(format!("over{i}"), now - 3_600_000, None).await;
    }
    insert("soon".into(), now + 1000, None).await;
    insert("leased".into(), now - 3_600_000, Some(now + 60_000)).await;
    let probes = streamwatch::probes::Probes::new(db.clone());
    let interval = 30_000;
    let moved = probes
        .spread_overdue(now, now - 2000, interval)
        .await
        .expect("spread");
    assert_eq!(moved, 200);
    let rows = sqlx::query("SELECT id, next_probe_at FROM streams")
        .fetch_all(&db.pool)
        .await
        .expect("rows");
    let mut spread = Vec::new();
    for r in &rows {
        let (id, next): (String, i64) = (r.get(0), r.get(1));
        match id.as_str() {
            "soon" => assert_eq!(next, now + 1000),
            "leased" => assert_eq!(next, now - 3_600_000),
            _ => {
                assert!((now..now + interval).contains(&next), "{id}: {next}");
                spread.push(next);
            }
        }
    }
    spread.sort_unstable();
    // 200 uniform draws over 30 s: the two halves of the interval both get some.
    let first_half = spread.iter().filter(|t| **t < now + interval / 2).count();
    assert!(
        (40..=160).contains(&first_half),
        "{first_half} of 200 in the first half"
    );
}

on_both_engines_with_engine!(
    each_outcome_is_classified_end_to_end,
    staleness_and_recovery_end_to_end,
    redirect_to_refused_address_fails_without_reaching_it,
    name_resolving_to_refused_address_at_probe_time_is_never_connected,
    shutdown_waits_for_probes_in_flight,
    overdue_streams_are_spread_over_one_interval,
    one_host_gets_at_most_its_rate_however_many_streams,
);

soak_on_both_engines_with_engine!(startup_spreads_overdue_streams_over_one_interval);

/// Two instances claiming at the same moment lease disjoint sets of due streams, and together
/// every due stream (`FOR UPDATE SKIP LOCKED`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_claims_lease_disjoint_streams() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, url) = open_db(Engine::Postgres, dir.path()).await;
    let now = streamwatch::time::now_ms();
    for i in 0..300 {
        sqlx::query(
            "INSERT INTO streams (id, source_url, name, target_region, created_at, agent_state, status, \
             last_action, next_probe_at) VALUES ($1, $2, $1, 'auto', 0, 'healthy', 'watching', 'registered', $3)",
        )
        .bind(format!("s{i}"))
        .bind(format!("http://127.0.0.1/s{i}.m3u8"))
        .bind(now - 1000)
        .execute(&db.pool)
        .await
        .expect("insert");
    }
    // Two pools, as two processes would have.
    let other = Db::connect(Some(&url), dir.path())
        .await
        .expect("second pool");
    for _ in 0..5 {
        sqlx::query("UPDATE streams SET lease_until = NULL")
            .execute(&db.pool)
            .await
            .expect("reset");
        let (a, b) = (
            streamwatch::probes::Probes::new(db.clone()),
            streamwatch::probes::Probes::new(other.clone()),
        );
        let claims: Vec<_> = (0..4)
            .map(|i| {
                let p = if i % 2 == 0 { a.clone() } else { b.clone() };
                tokio::spawn(async move { p.claim_due(now, now + 60_000, 100).await })
            })
            .collect();
        let mut seen = std::collections::HashSet::new();
        for c in claims {
            for due in c.await.expect("join").expect("claim") {
                assert!(seen.insert(due.id.clone()), "{} leased twice", due.id);
            }
        }
        assert_eq!(seen.len(), 300, "every due stream claimed once");
    }
}
