//! One probe's HTTP work: fetch the manifest (and, for an HLS master playlist,
//! one variant) through the SSRF guard, following redirects by hand, within one
//! whole-probe timeout. A failure is data ([`ProbeOutcome`]), not an error.
//!
//! Safety properties:
//! * the reqwest client ignores proxies from the environment, follows no
//!   redirects itself and resolves names only through
//!   [`GuardedResolver`](crate::ssrf::GuardedResolver), so it connects only to
//!   addresses the guard has checked;
//! * before every request (first URL, each redirect hop, the variant) the URL's
//!   scheme and, for IP-literal hosts (which bypass the resolver), the address
//!   are checked with [`Guard::check_target`];
//! * at most [`FetchConfig::max_redirects`] redirects per document; bodies are
//!   capped at [`FetchConfig::max_body_bytes`];
//! * every request waits for its host's turn ([`HostPacer`]): at most
//!   [`FetchConfig::host_rate`] requests per second to one host. That wait is the prober's
//!   own doing, so it extends the probe's deadline and is left out of its latency;
//! * bodies being read are counted against one budget shared by all probes
//!   ([`FetchConfig::body_budget_bytes`]); a probe that cannot get budget within
//!   [`BODY_BUDGET_WAIT`] gives up without a verdict ([`ProbeOutcome::Deferred`]).

use std::error::Error as StdError;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use reqwest::header::{HeaderValue, ACCEPT, CONTENT_LENGTH, LOCATION};
use url::Url;

use crate::prober::manifest::{
    check_variant, parse_manifest, ManifestCheck, ManifestError, ManifestKind, ManifestSummary,
    Parsed, StalenessTracker,
};
use crate::prober::pacer::{host_key, HostPacer};
use crate::ssrf::{guarded_client, resolve_location, Guard, GuardError};

/// `User-Agent` of every probe request.
pub const USER_AGENT: &str = "streamwatch-prober/0.1";

/// Default body cap: 4 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// Default and contract maximum of redirects followed per document.
pub const MAX_REDIRECTS: usize = 5;

/// Default requests per second to one host (`STREAMWATCH_PROBE_HOST_RATE`).
pub const DEFAULT_HOST_RATE: u32 = 50;

/// Default bytes of bodies held across all probes at once: 64 MiB.
pub const DEFAULT_BODY_BUDGET_BYTES: usize = 64 * 1024 * 1024;

/// How long a probe waits for body budget before it gives up without a verdict.
pub const BODY_BUDGET_WAIT: Duration = Duration::from_secs(2);

/// Settings of the probe fetcher.
#[derive(Debug, Clone)]
pub struct FetchConfig {
    /// Bound on the whole probe: every hop, every body, the variant.
    pub probe_timeout: Duration,
    /// Bound on one TCP (+TLS) connect.
    pub connect_timeout: Duration,
    /// Largest manifest body read; larger is an invalid manifest.
    pub max_body_bytes: usize,
    /// Redirects followed per document (manifest, variant).
    pub max_redirects: usize,
    /// Requests per second to one host at most.
    pub host_rate: u32,
    /// Bytes of bodies all probes may hold at once.
    pub body_budget_bytes: usize,
}

impl FetchConfig {
    /// Defaults around a whole-probe timeout: connect timeout = min(timeout,
    /// 5 s), 4 MiB bodies, 5 redirects, 50 requests per second per host, 64 MiB of
    /// bodies in all.
    pub fn new(probe_timeout: Duration) -> Self {
        Self {
            probe_timeout,
            connect_timeout: probe_timeout.min(Duration::from_secs(5)),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_redirects: MAX_REDIRECTS,
            host_rate: DEFAULT_HOST_RATE,
            body_budget_bytes: DEFAULT_BODY_BUDGET_BYTES,
        }
    }
}

/// What one probe found. Everything but `Ok` is a failure kind (pingora
/// `ErrorType` style); [`classify`](crate::prober::classify::classify) maps it
/// to the probe row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// 2xx; `http_status` of the top-level manifest; the manifest verdict
    /// (for a master playlist, the variant's verdict).
    Ok {
        /// HTTP status of the top-level manifest.
        http_status: u16,
        /// Manifest verdict.
        manifest: ManifestCheck,
    },
    /// A non-2xx answer that is not a followable redirect (manifest or variant).
    HttpStatus(u16),
    /// The host did not resolve.
    Dns(String),
    /// TCP connect failed (refused, unreachable, connect timeout).
    Connect(String),
    /// TLS handshake or certificate failure.
    Tls(String),
    /// The whole probe exceeded the probe timeout (the timeout given).
    Timeout(Duration),
    /// The guard refused a URL or an address (first URL, a hop, the variant,
    /// or a resolved address at connect time).
    Refused(GuardError),
    /// More redirects than allowed (the maximum given).
    TooManyRedirects(usize),
    /// The server answered something that is not HTTP, or the body broke off.
    Protocol(String),
}

/// A probe that ended without a verdict on the stream because the prober itself was short
/// of a resource (body budget, when many large manifests are read at once). Nothing is
/// recorded; the scheduler probes the stream again shortly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not probed: {0}")]
pub struct NotProbed(pub &'static str);

/// Why a request sequence stopped early: a verdict on the stream, or none.
enum Stop {
    Verdict(ProbeOutcome),
    NotProbed(NotProbed),
}

impl From<ProbeOutcome> for Stop {
    fn from(o: ProbeOutcome) -> Self {
        Stop::Verdict(o)
    }
}

impl ProbeOutcome {
    /// Applies the staleness rule (see [`ManifestCheck::with_staleness`]) to a
    /// 2xx outcome; other outcomes are returned unchanged.
    pub fn with_staleness<K: std::hash::Hash + Eq>(
        self,
        tracker: &mut StalenessTracker<K>,
        key: K,
        now: std::time::Instant,
    ) -> ProbeOutcome {
        match self {
            ProbeOutcome::Ok {
                http_status,
                manifest,
            } => ProbeOutcome::Ok {
                http_status,
                manifest: manifest.with_staleness(tracker, key, now),
            },
            other => other,
        }
    }
}

/// One probe's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchResult {
    /// What happened.
    pub outcome: ProbeOutcome,
    /// Wall time of the whole probe in milliseconds.
    pub latency_ms: u64,
    /// The last URL requested (after redirects; the variant for a master
    /// playlist), when a request was made.
    pub final_url: Option<Url>,
}

/// Building the HTTP client failed (TLS backend initialisation).
#[derive(Debug, thiserror::Error)]
#[error("cannot build the probe http client: {0}")]
pub struct BuildError(#[from] reqwest::Error);

/// The prober's HTTP side: one reqwest client, built once, shared by all probes.
#[derive(Debug, Clone)]
pub struct Fetcher {
    client: reqwest::Client,
    guard: Arc<Guard>,
    cfg: FetchConfig,
    pacer: Arc<HostPacer>,
    bodies: Arc<Semaphore>,
}

/// One probe's time budget: the probe timeout counted from the start, pushed back by the
/// time spent waiting on the prober's own limits (host pacing), which is not the origin's.
struct Budget {
    deadline: Instant,
    waited: Duration,
    /// A slot already booked for the first request.
    first_slot: Option<Instant>,
}

impl Budget {
    fn extend(&mut self, waited: Duration) {
        self.deadline += waited;
        self.waited += waited;
    }
}

/// Body bytes a probe holds against the shared budget; released when dropped.
struct Held(Vec<OwnedSemaphorePermit>);

/// A fetched document (after redirects).
struct Document {
    status: u16,
    url: Url,
    body: Result<Vec<u8>, ManifestError>,
    /// The body's share of the body budget, held for as long as the body is.
    _held: Held,
}

impl Fetcher {
    /// Builds the client: no proxies, no automatic redirects, the guarded
    /// resolver, [`USER_AGENT`], the connect timeout and a small idle pool.
    pub fn new(guard: Arc<Guard>, cfg: FetchConfig) -> Result<Self, BuildError> {
        let client = guarded_client(Arc::clone(&guard))
            .user_agent(USER_AGENT)
            .connect_timeout(cfg.connect_timeout)
            .pool_idle_timeout(Duration::from_secs(60))
            .pool_max_idle_per_host(2)
            .tcp_keepalive(Duration::from_secs(60))
            .tcp_nodelay(true)
            .build()?;
        let pacer = Arc::new(HostPacer::new(cfg.host_rate));
        let bodies = Arc::new(Semaphore::new(
            cfg.body_budget_bytes.min(Semaphore::MAX_PERMITS),
        ));
        Ok(Self {
            client,
            guard,
            cfg,
            pacer,
            bodies,
        })
    }

    /// The per-host pacer every request of this fetcher waits on.
    pub fn pacer(&self) -> &Arc<HostPacer> {
        &self.pacer
    }

    /// Body bytes available in the shared budget now.
    pub fn body_budget_available(&self) -> usize {
        self.bodies.available_permits()
    }

    /// The guard this fetcher applies.
    pub fn guard(&self) -> &Arc<Guard> {
        &self.guard
    }

    /// The settings this fetcher was built with.
    pub fn config(&self) -> &FetchConfig {
        &self.cfg
    }

    /// Probes `url`: manifest (and one variant for an HLS master playlist),
    /// bounded by the probe timeout. Staleness is applied by the caller with
    /// [`ManifestCheck::with_staleness`].
    pub async fn fetch_manifest(&self, url: &str) -> Result<FetchResult, NotProbed> {
        self.fetch_manifest_booked(url, None).await
    }

    /// [`Fetcher::fetch_manifest`] whose first request uses a slot of the URL's host already
    /// booked on [`Fetcher::pacer`] (the scheduler books it when it claims the stream).
    pub async fn fetch_manifest_booked(
        &self,
        url: &str,
        first_slot: Option<Instant>,
    ) -> Result<FetchResult, NotProbed> {
        let started = Instant::now();
        let mut last_url = None;
        let mut budget = Budget {
            deadline: started + self.cfg.probe_timeout,
            waited: Duration::ZERO,
            first_slot,
        };
        let outcome = match self.probe(url, &mut last_url, &mut budget).await {
            Ok(outcome) | Err(Stop::Verdict(outcome)) => outcome,
            Err(Stop::NotProbed(why)) => return Err(why),
        };
        let spent = started.elapsed().saturating_sub(budget.waited);
        let latency_ms = u64::try_from(spent.as_millis()).unwrap_or(u64::MAX);
        Ok(FetchResult {
            outcome,
            latency_ms,
            final_url: last_url,
        })
    }

    async fn probe(
        &self,
        raw: &str,
        last_url: &mut Option<Url>,
        budget: &mut Budget,
    ) -> Result<ProbeOutcome, Stop> {
        let url = match Url::parse(raw) {
            Ok(url) => url,
            Err(_) => return Ok(ProbeOutcome::Refused(GuardError::Unparseable)),
        };
        let doc = self.get_following(url, last_url, budget).await?;
        if !(200..300).contains(&doc.status) {
            return Ok(ProbeOutcome::HttpStatus(doc.status));
        }
        let http_status = doc.status;
        let invalid = |e| ProbeOutcome::Ok {
            http_status,
            manifest: ManifestCheck::Invalid(e),
        };
        let valid = |kind, media, dash| ProbeOutcome::Ok {
            http_status,
            manifest: ManifestCheck::Valid(ManifestSummary { kind, media, dash }),
        };
        let Document {
            body, url, _held, ..
        } = doc;
        let body = match body {
            Ok(body) => body,
            Err(e) => return Ok(invalid(e)),
        };
        let parsed = parse_manifest(&body);
        // The body and its share of the budget go before a variant is fetched.
        drop(body);
        drop(_held);
        Ok(match parsed {
            Err(e) => invalid(e),
            Ok(Parsed::HlsMedia(info)) => valid(ManifestKind::HlsMedia, Some(info), None),
            Ok(Parsed::Dash(info)) => valid(ManifestKind::Dash, None, Some(info)),
            Ok(Parsed::HlsMaster { variant_uri, .. }) => {
                let Ok(variant_url) = url.join(&variant_uri) else {
                    return Ok(invalid(ManifestError::BadVariantUri));
                };
                let variant = self.get_following(variant_url, last_url, budget).await?;
                if !(200..300).contains(&variant.status) {
                    return Ok(ProbeOutcome::HttpStatus(variant.status));
                }
                match variant.body.and_then(|b| check_variant(&b)) {
                    Ok(info) => valid(ManifestKind::HlsMaster, Some(info), None),
                    Err(e) => invalid(e),
                }
            }
        })
    }

    /// GET `url`, following at most `max_redirects` redirects, each hop
    /// re-checked by the guard and paced per host. Returns the final answer with its
    /// body read (capped) when it is 2xx.
    async fn get_following(
        &self,
        mut url: Url,
        last_url: &mut Option<Url>,
        budget: &mut Budget,
    ) -> Result<Document, Stop> {
        let mut redirects = 0;
        loop {
            self.guard
                .check_target(&url)
                .map_err(ProbeOutcome::Refused)?;
            *last_url = Some(url.clone());
            let waited = match budget.first_slot.take() {
                Some(slot) => {
                    let now = Instant::now();
                    tokio::time::sleep_until(slot).await;
                    slot.saturating_duration_since(now)
                }
                None => self.pacer.wait_turn(&host_key(&url)).await,
            };
            budget.extend(waited);
            let timeout = ProbeOutcome::Timeout(self.cfg.probe_timeout);
            let sent = self
                .client
                .get(url.clone())
                .header(
                    ACCEPT,
                    HeaderValue::from_static(
                        "application/vnd.apple.mpegurl, application/dash+xml;q=0.9, */*;q=0.8",
                    ),
                )
                .send();
            let resp = tokio::time::timeout_at(budget.deadline, sent)
                .await
                .map_err(|_| timeout.clone())?
                .map_err(|e| outcome_of(&e))?;
            let status = resp.status().as_u16();
            if matches!(status, 301 | 302 | 303 | 307 | 308) {
                if let Some(location) = resp.headers().get(LOCATION) {
                    if redirects == self.cfg.max_redirects {
                        return Err(ProbeOutcome::TooManyRedirects(self.cfg.max_redirects).into());
                    }
                    let location = location
                        .to_str()
                        .map_err(|_| ProbeOutcome::Refused(GuardError::Unparseable))?;
                    url = resolve_location(&url, location).map_err(ProbeOutcome::Refused)?;
                    redirects += 1;
                    continue;
                }
            }
            if !(200..300).contains(&status) {
                return Ok(Document {
                    status,
                    url,
                    body: Ok(Vec::new()),
                    _held: Held(Vec::new()),
                });
            }
            let (body, held) = self.read_capped(resp, budget).await?;
            return Ok(Document {
                status,
                url,
                body,
                _held: held,
            });
        }
    }

    /// Reads a body up to the cap; over the cap is an invalid manifest, a
    /// broken body is a protocol failure. The buffer's capacity is held against the
    /// shared body budget while the probe runs.
    async fn read_capped(
        &self,
        mut resp: reqwest::Response,
        budget: &mut Budget,
    ) -> Result<(Result<Vec<u8>, ManifestError>, Held), Stop> {
        let cap = self.cfg.max_body_bytes;
        let timeout = ProbeOutcome::Timeout(self.cfg.probe_timeout);
        let declared = resp
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > cap as u64) {
            return Ok((Err(ManifestError::TooLarge(cap)), Held(Vec::new())));
        }
        let mut held = Held(Vec::new());
        let first = declared.map_or(8 * 1024, |n| n as usize).max(1);
        self.hold(&mut held, first, budget).await?;
        let mut body = Vec::with_capacity(first);
        loop {
            let chunk = tokio::time::timeout_at(budget.deadline, resp.chunk())
                .await
                .map_err(|_| timeout.clone())?
                .map_err(|e| outcome_of(&e))?;
            let Some(chunk) = chunk else { break };
            let needed = body.len() + chunk.len();
            if needed > cap {
                return Ok((Err(ManifestError::TooLarge(cap)), Held(Vec::new())));
            }
            if needed > body.capacity() {
                // Grow by doubling (bounded by the cap), holding the new capacity first.
                let grown = needed.max(body.capacity() * 2).min(cap);
                self.hold(&mut held, grown - body.capacity(), budget)
                    .await?;
                body.reserve_exact(grown - body.len());
            }
            body.extend_from_slice(&chunk);
        }
        Ok((Ok(body), held))
    }

    /// Takes `bytes` more of the shared body budget, waiting at most [`BODY_BUDGET_WAIT`]
    /// (not counted against the probe: the shortage is the prober's own).
    async fn hold(&self, held: &mut Held, bytes: usize, budget: &mut Budget) -> Result<(), Stop> {
        let n = u32::try_from(bytes).unwrap_or(u32::MAX);
        let started = Instant::now();
        let permit = tokio::time::timeout(
            BODY_BUDGET_WAIT,
            Arc::clone(&self.bodies).acquire_many_owned(n),
        )
        .await;
        budget.extend(started.elapsed());
        match permit {
            Ok(Ok(p)) => {
                held.0.push(p);
                Ok(())
            }
            _ => Err(Stop::NotProbed(NotProbed("body budget exhausted"))),
        }
    }
}

/// Maps a reqwest failure to a failure kind. A [`GuardError`] raised by the
/// guarded resolver is found in the source chain. TLS failures are recognised
/// by the rustls/handshake wording of the chain, since the TLS stack's error
/// types are not a dependency of this crate.
fn outcome_of(err: &reqwest::Error) -> ProbeOutcome {
    let mut source: Option<&(dyn StdError + 'static)> = Some(err);
    let mut chain = Vec::new();
    while let Some(e) = source {
        if let Some(guard) = e.downcast_ref::<GuardError>() {
            return match guard {
                GuardError::DidNotResolve => ProbeOutcome::Dns(guard.to_string()),
                other => ProbeOutcome::Refused(other.clone()),
            };
        }
        chain.push(e.to_string());
        source = e.source();
    }
    let root = chain.last().cloned().unwrap_or_default();
    let text = chain.join(": ").to_ascii_lowercase();
    let tls_words = [
        "tls",
        "certificate",
        "handshake",
        "rustls",
        "ssl",
        "corrupt message",
        "peer sent",
    ];
    if err.is_connect() && tls_words.iter().any(|w| text.contains(w)) {
        ProbeOutcome::Tls(root)
    } else if err.is_connect() && err.is_timeout() {
        ProbeOutcome::Connect("connect timed out".to_owned())
    } else if err.is_connect() {
        ProbeOutcome::Connect(root)
    } else if err.is_timeout() {
        ProbeOutcome::Connect("timed out".to_owned())
    } else {
        ProbeOutcome::Protocol(root)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::HashMap;
    use std::net::{IpAddr, SocketAddr};
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;
    use crate::prober::classify::{classify, AnomalyClass, Classified, ProbeStatus};
    use crate::ssrf::StaticLookup;

    /// One canned answer of a test origin.
    #[derive(Clone, Default)]
    struct Reply {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: Vec<u8>,
        delay: Duration,
    }

    fn reply(status: u16, body: &str) -> Reply {
        Reply {
            status,
            body: body.as_bytes().to_vec(),
            ..Reply::default()
        }
    }

    fn redirect(status: u16, location: &str) -> Reply {
        Reply {
            status,
            headers: vec![("Location", location.to_owned())],
            ..Reply::default()
        }
    }

    /// A minimal HTTP/1.1 origin on a loopback address: path → reply, one
    /// request per connection, counting requests.
    struct Origin {
        addr: SocketAddr,
        hits: Arc<AtomicUsize>,
        paths: Arc<std::sync::Mutex<Vec<String>>>,
    }

    impl Origin {
        async fn start(ip: &str, routes: Vec<(&str, Reply)>) -> Origin {
            let listener = TcpListener::bind((ip.parse::<IpAddr>().unwrap(), 0))
                .await
                .unwrap();
            let addr = listener.local_addr().unwrap();
            let routes: Arc<HashMap<String, Reply>> =
                Arc::new(routes.into_iter().map(|(p, r)| (p.to_owned(), r)).collect());
            let hits = Arc::new(AtomicUsize::new(0));
            let paths = Arc::new(std::sync::Mutex::new(Vec::new()));
            let (h, p) = (Arc::clone(&hits), Arc::clone(&paths));
            tokio::spawn(async move {
                loop {
                    let Ok((mut sock, _)) = listener.accept().await else {
                        return;
                    };
                    let (routes, hits, paths) =
                        (Arc::clone(&routes), Arc::clone(&h), Arc::clone(&p));
                    tokio::spawn(async move {
                        let mut buf = Vec::new();
                        let mut chunk = [0u8; 4096];
                        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                            match sock.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        }
                        hits.fetch_add(1, Ordering::SeqCst);
                        let head = String::from_utf8_lossy(&buf).to_string();
                        let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
                        paths.lock().unwrap().push(head);
                        let r = routes
                            .get(&path)
                            .cloned()
                            .unwrap_or_else(|| reply(404, "not found"));
                        tokio::time::sleep(r.delay).await;
                        let mut out = format!(
                            "HTTP/1.1 {} X\r\nContent-Length: {}\r\nConnection: close\r\n",
                            r.status,
                            r.body.len()
                        );
                        for (k, v) in &r.headers {
                            out.push_str(&format!("{k}: {v}\r\n"));
                        }
                        out.push_str("\r\n");
                        let mut bytes = out.into_bytes();
                        bytes.extend_from_slice(&r.body);
                        let _ = sock.write_all(&bytes).await;
                        let _ = sock.shutdown().await;
                    });
                }
            });
            Origin { addr, hits, paths }
        }

        fn url(&self, path: &str) -> String {
            format!("http://{}{}", self.addr, path)
        }

        fn hits(&self) -> usize {
            self.hits.load(Ordering::SeqCst)
        }
    }

    const SLOW_MS: u64 = 400;

    fn fetcher_with(allow: &[&str], lookup: StaticLookup, timeout: Duration) -> Fetcher {
        let guard = Guard::new(allow.iter().map(|n| n.parse().unwrap()).collect(), lookup);
        Fetcher::new(Arc::new(guard), FetchConfig::new(timeout)).unwrap()
    }

    fn fetcher() -> Fetcher {
        fetcher_with(
            &["127.0.0.0/8"],
            StaticLookup::new(),
            Duration::from_secs(2),
        )
    }

    async fn probe(f: &Fetcher, url: &str) -> (FetchResult, Classified) {
        let r = f.fetch_manifest(url).await.expect("probed");
        let c = classify(&r.outcome, r.latency_ms, SLOW_MS);
        (r, c)
    }

    fn assert_class(
        c: &Classified,
        status: ProbeStatus,
        class: AnomalyClass,
        code: Option<u16>,
        detail: &str,
    ) {
        assert_eq!(
            (c.status, c.anomaly_class, c.http_status, c.detail.as_str()),
            (status, class, code, detail),
            "{c:?}"
        );
    }

    const MASTER: &str = "#EXTM3U\n#EXT-X-STREAM-INF:BANDWIDTH=2000000\nhi/index.m3u8\n\
                          #EXT-X-STREAM-INF:BANDWIDTH=500000\nlo/index.m3u8\n";
    const MEDIA: &str = "#EXTM3U\n#EXT-X-TARGETDURATION:6\n#EXT-X-MEDIA-SEQUENCE:118\n\
                         #EXTINF:6.0,\nseg118.ts\n#EXTINF:6.0,\nseg119.ts\n";
    const EMPTY_MEDIA: &str = "#EXTM3U\n#EXT-X-TARGETDURATION:6\n#EXT-X-MEDIA-SEQUENCE:3\n";
    const MPD: &str = r#"<?xml version="1.0"?><MPD xmlns="urn:mpeg:dash:schema:mpd:2011" type="dynamic" minBufferTime="PT2S"><Period id="p0"><AdaptationSet mimeType="video/mp4"><Representation id="v" bandwidth="500000"/></AdaptationSet></Period></MPD>"#;

    #[tokio::test]
    async fn healthy_hls_master_fetches_one_variant() {
        let o = Origin::start(
            "127.0.0.1",
            vec![
                ("/live/master.m3u8", reply(200, MASTER)),
                ("/live/lo/index.m3u8", reply(200, MEDIA)),
            ],
        )
        .await;
        let (r, c) = probe(&fetcher(), &o.url("/live/master.m3u8")).await;
        assert_class(
            &c,
            ProbeStatus::Healthy,
            AnomalyClass::NoAnomaly,
            Some(200),
            "probe ok",
        );
        match &r.outcome {
            ProbeOutcome::Ok {
                manifest: ManifestCheck::Valid(s),
                ..
            } => {
                assert_eq!(s.kind, ManifestKind::HlsMaster);
                assert_eq!(s.media.unwrap().media_sequence, 118);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(r.final_url.unwrap().path(), "/live/lo/index.m3u8");
        assert_eq!(o.hits(), 2, "master + exactly one variant");
        let heads = o.paths.lock().unwrap().join("\n").to_ascii_lowercase();
        assert!(
            heads.contains("user-agent: streamwatch-prober/0.1"),
            "{heads}"
        );
    }

    #[tokio::test]
    async fn media_playlist_without_segments_is_degraded() {
        let o = Origin::start("127.0.0.1", vec![("/m.m3u8", reply(200, EMPTY_MEDIA))]).await;
        let (_, c) = probe(&fetcher(), &o.url("/m.m3u8")).await;
        assert_class(
            &c,
            ProbeStatus::Degraded,
            AnomalyClass::SlowResponse,
            Some(200),
            "manifest invalid: no segments",
        );
    }

    #[tokio::test]
    async fn variant_without_segments_is_degraded() {
        let o = Origin::start(
            "127.0.0.1",
            vec![
                ("/master.m3u8", reply(200, MASTER)),
                ("/lo/index.m3u8", reply(200, EMPTY_MEDIA)),
            ],
        )
        .await;
        let (_, c) = probe(&fetcher(), &o.url("/master.m3u8")).await;
        assert_class(
            &c,
            ProbeStatus::Degraded,
            AnomalyClass::SlowResponse,
            Some(200),
            "manifest invalid: no segments",
        );
    }

    #[tokio::test]
    async fn missing_variant_is_a_client_error() {
        let o = Origin::start("127.0.0.1", vec![("/master.m3u8", reply(200, MASTER))]).await;
        let (_, c) = probe(&fetcher(), &o.url("/master.m3u8")).await;
        assert_class(
            &c,
            ProbeStatus::Degraded,
            AnomalyClass::ClientError,
            Some(404),
            "HTTP 404",
        );
    }

    #[tokio::test]
    async fn dash_mpd_is_healthy() {
        let o = Origin::start("127.0.0.1", vec![("/live.mpd", reply(200, MPD))]).await;
        let (r, c) = probe(&fetcher(), &o.url("/live.mpd")).await;
        assert_class(
            &c,
            ProbeStatus::Healthy,
            AnomalyClass::NoAnomaly,
            Some(200),
            "probe ok",
        );
        assert!(matches!(
            r.outcome,
            ProbeOutcome::Ok {
                manifest: ManifestCheck::Valid(ManifestSummary {
                    kind: ManifestKind::Dash,
                    ..
                }),
                ..
            }
        ));
    }

    #[tokio::test]
    async fn invalid_manifest_is_degraded() {
        let o = Origin::start(
            "127.0.0.1",
            vec![("/x.m3u8", reply(200, "<html>oops</html>"))],
        )
        .await;
        let (_, c) = probe(&fetcher(), &o.url("/x.m3u8")).await;
        assert_class(
            &c,
            ProbeStatus::Degraded,
            AnomalyClass::SlowResponse,
            Some(200),
            "manifest invalid: not an HLS or DASH manifest",
        );
    }

    #[tokio::test]
    async fn oversized_body_is_an_invalid_manifest() {
        let big = format!("{MEDIA}{}", "#".repeat(DEFAULT_MAX_BODY_BYTES));
        let o = Origin::start("127.0.0.1", vec![("/big.m3u8", reply(200, &big))]).await;
        let (_, c) = probe(&fetcher(), &o.url("/big.m3u8")).await;
        assert_class(
            &c,
            ProbeStatus::Degraded,
            AnomalyClass::SlowResponse,
            Some(200),
            "manifest invalid: body larger than 4194304 bytes",
        );
    }

    #[tokio::test]
    async fn not_found_is_degraded_client_error() {
        let o = Origin::start("127.0.0.1", vec![]).await;
        let (_, c) = probe(&fetcher(), &o.url("/gone.m3u8")).await;
        assert_class(
            &c,
            ProbeStatus::Degraded,
            AnomalyClass::ClientError,
            Some(404),
            "HTTP 404",
        );
    }

    #[tokio::test]
    async fn service_unavailable_is_failing_5xx() {
        let o = Origin::start("127.0.0.1", vec![("/m.m3u8", reply(503, "busy"))]).await;
        let (_, c) = probe(&fetcher(), &o.url("/m.m3u8")).await;
        assert_class(
            &c,
            ProbeStatus::Failing,
            AnomalyClass::ServerError,
            Some(503),
            "HTTP 503",
        );
    }

    #[tokio::test]
    async fn slow_origin_is_degraded_slow_response() {
        let slow = Reply {
            delay: Duration::from_millis(SLOW_MS + 200),
            ..reply(200, MEDIA)
        };
        let o = Origin::start("127.0.0.1", vec![("/m.m3u8", slow)]).await;
        let (r, c) = probe(&fetcher(), &o.url("/m.m3u8")).await;
        assert!(r.latency_ms > SLOW_MS, "{}", r.latency_ms);
        assert_eq!(
            (c.status, c.anomaly_class, c.http_status),
            (ProbeStatus::Degraded, AnomalyClass::SlowResponse, Some(200))
        );
        assert_eq!(
            c.detail,
            format!("slow response: {} ms > {SLOW_MS} ms", r.latency_ms)
        );
    }

    #[tokio::test]
    async fn origin_slower_than_probe_timeout_is_failing_timeout() {
        let stuck = Reply {
            delay: Duration::from_secs(5),
            ..reply(200, MEDIA)
        };
        let o = Origin::start("127.0.0.1", vec![("/m.m3u8", stuck)]).await;
        let f = fetcher_with(
            &["127.0.0.0/8"],
            StaticLookup::new(),
            Duration::from_millis(700),
        );
        let (r, c) = probe(&f, &o.url("/m.m3u8")).await;
        assert_class(
            &c,
            ProbeStatus::Failing,
            AnomalyClass::NetworkTimeout,
            None,
            "timeout after 700 ms",
        );
        assert!((700..1500).contains(&r.latency_ms), "{}", r.latency_ms);
    }

    #[tokio::test]
    async fn timeout_bounds_the_whole_probe_including_the_variant() {
        let slowish = |body| Reply {
            delay: Duration::from_millis(450),
            ..reply(200, body)
        };
        let o = Origin::start(
            "127.0.0.1",
            vec![
                ("/master.m3u8", slowish(MASTER)),
                ("/lo/index.m3u8", slowish(MEDIA)),
            ],
        )
        .await;
        let f = fetcher_with(
            &["127.0.0.0/8"],
            StaticLookup::new(),
            Duration::from_millis(700),
        );
        let (_, c) = probe(&f, &o.url("/master.m3u8")).await;
        assert_eq!(c.detail, "timeout after 700 ms");
    }

    #[tokio::test]
    async fn redirect_chain_of_three_is_followed() {
        let o = Origin::start(
            "127.0.0.1",
            vec![
                ("/a", redirect(301, "/b")),
                ("/b", redirect(302, "c")),
                ("/c", redirect(307, "/live/m.m3u8")),
                ("/live/m.m3u8", reply(200, MEDIA)),
            ],
        )
        .await;
        let (r, c) = probe(&fetcher(), &o.url("/a")).await;
        assert_class(
            &c,
            ProbeStatus::Healthy,
            AnomalyClass::NoAnomaly,
            Some(200),
            "probe ok",
        );
        assert_eq!(o.hits(), 4);
        assert_eq!(r.final_url.unwrap().path(), "/live/m.m3u8");
    }

    #[tokio::test]
    async fn five_redirects_are_followed_six_are_refused() {
        let mut routes = vec![];
        let paths: Vec<String> = (0..=6).map(|i| format!("/r{i}")).collect();
        for i in 0..6 {
            routes.push((paths[i].as_str(), redirect(302, &paths[i + 1])));
        }
        routes.push(("/r6", reply(200, MEDIA)));
        let o = Origin::start("127.0.0.1", routes).await;
        let (_, c) = probe(&fetcher(), &o.url("/r1")).await; // 5 redirects
        assert_class(
            &c,
            ProbeStatus::Healthy,
            AnomalyClass::NoAnomaly,
            Some(200),
            "probe ok",
        );
        let before = o.hits();
        let (_, c) = probe(&fetcher(), &o.url("/r0")).await; // 6 redirects
        assert_class(
            &c,
            ProbeStatus::Failing,
            AnomalyClass::NetworkTimeout,
            None,
            "refused: more than 5 redirects",
        );
        assert_eq!(o.hits() - before, 6, "the 7th URL is never requested");
    }

    #[tokio::test]
    async fn redirect_to_refused_address_never_reaches_it() {
        let target = Origin::start("127.0.0.3", vec![("/m.m3u8", reply(200, MEDIA))]).await;
        let o = Origin::start(
            "127.0.0.2",
            vec![("/start", redirect(302, &target.url("/m.m3u8")))],
        )
        .await;
        let f = fetcher_with(
            &["127.0.0.2/32"],
            StaticLookup::new(),
            Duration::from_secs(2),
        );
        let (_, c) = probe(&f, &o.url("/start")).await;
        assert_class(
            &c,
            ProbeStatus::Failing,
            AnomalyClass::NetworkTimeout,
            None,
            "refused: Hostname resolves to a private address (127.0.0.3)",
        );
        assert_eq!(o.hits(), 1);
        assert_eq!(target.hits(), 0, "refused address received a request");
    }

    #[tokio::test]
    async fn redirect_to_private_address_spelled_in_decimal_is_refused() {
        let o = Origin::start(
            "127.0.0.2",
            vec![("/start", redirect(301, "http://2130706433:1/x"))],
        )
        .await;
        let f = fetcher_with(
            &["127.0.0.2/32"],
            StaticLookup::new(),
            Duration::from_secs(2),
        );
        let (_, c) = probe(&f, &o.url("/start")).await;
        assert_eq!(
            c.detail,
            "refused: Hostname resolves to a private address (127.0.0.1)"
        );
    }

    #[tokio::test]
    async fn redirect_to_name_resolving_privately_never_connects() {
        let target = Origin::start("127.0.0.3", vec![("/m.m3u8", reply(200, MEDIA))]).await;
        let port = target.addr.port();
        let lookup = StaticLookup::new()
            .with("origin.example", &["127.0.0.2".parse().unwrap()])
            .with("rebind.example", &["127.0.0.3".parse().unwrap()]);
        let o = Origin::start(
            "127.0.0.2",
            vec![(
                "/start",
                redirect(302, &format!("http://rebind.example:{port}/m.m3u8")),
            )],
        )
        .await;
        let f = fetcher_with(&["127.0.0.2/32"], lookup, Duration::from_secs(2));
        let start = format!("http://origin.example:{}/start", o.addr.port());
        let (_, c) = probe(&f, &start).await;
        assert_class(
            &c,
            ProbeStatus::Failing,
            AnomalyClass::NetworkTimeout,
            None,
            "refused: Hostname resolves to a private address (127.0.0.3)",
        );
        assert_eq!(
            o.hits(),
            1,
            "origin.example resolved through the guard and was fetched"
        );
        assert_eq!(target.hits(), 0);
    }

    #[tokio::test]
    async fn name_resolving_privately_at_probe_time_is_refused() {
        let target = Origin::start("127.0.0.3", vec![("/m.m3u8", reply(200, MEDIA))]).await;
        let lookup = StaticLookup::new().with("stream.example", &["127.0.0.3".parse().unwrap()]);
        let f = fetcher_with(&[], lookup, Duration::from_secs(2));
        let (_, c) = probe(
            &f,
            &format!("http://stream.example:{}/m.m3u8", target.addr.port()),
        )
        .await;
        assert_eq!(
            c.detail,
            "refused: Hostname resolves to a private address (127.0.0.3)"
        );
        let (_, c) = probe(
            &f,
            &format!("http://localhost:{}/m.m3u8", target.addr.port()),
        )
        .await;
        assert_eq!(
            c.detail,
            "refused: Hostname resolves to a private address (127.0.0.1)"
        );
        assert_eq!(target.hits(), 0);
    }

    #[tokio::test]
    async fn name_that_does_not_resolve_is_failing_dns() {
        let f = fetcher_with(&[], StaticLookup::new(), Duration::from_secs(2));
        let (_, c) = probe(&f, "http://nowhere.example/m.m3u8").await;
        assert_class(
            &c,
            ProbeStatus::Failing,
            AnomalyClass::NetworkTimeout,
            None,
            "dns: Hostname did not resolve",
        );
    }

    #[tokio::test]
    async fn relative_location_resolves_against_current_url() {
        let o = Origin::start(
            "127.0.0.1",
            vec![
                ("/a/b/start", redirect(302, "../live/./m.m3u8?x=1")),
                ("/a/live/m.m3u8?x=1", reply(200, MEDIA)),
            ],
        )
        .await;
        let (r, c) = probe(&fetcher(), &o.url("/a/b/start")).await;
        assert_class(
            &c,
            ProbeStatus::Healthy,
            AnomalyClass::NoAnomaly,
            Some(200),
            "probe ok",
        );
        assert_eq!(r.final_url.unwrap().as_str(), o.url("/a/live/m.m3u8?x=1"));
    }

    #[tokio::test]
    async fn unparseable_location_is_refused() {
        let o = Origin::start(
            "127.0.0.1",
            vec![("/start", redirect(302, "http://[::1/oops"))],
        )
        .await;
        let (_, c) = probe(&fetcher(), &o.url("/start")).await;
        assert_class(
            &c,
            ProbeStatus::Failing,
            AnomalyClass::NetworkTimeout,
            None,
            "refused: URL could not be parsed",
        );
    }

    #[tokio::test]
    async fn redirect_to_other_scheme_is_refused() {
        let o = Origin::start(
            "127.0.0.1",
            vec![("/start", redirect(302, "file:///etc/passwd"))],
        )
        .await;
        let (_, c) = probe(&fetcher(), &o.url("/start")).await;
        assert_eq!(c.detail, "refused: Only http(s) URLs are allowed");
    }

    #[tokio::test]
    async fn redirect_without_location_is_a_client_error() {
        let o = Origin::start("127.0.0.1", vec![("/m", reply(302, ""))]).await;
        let (_, c) = probe(&fetcher(), &o.url("/m")).await;
        assert_class(
            &c,
            ProbeStatus::Degraded,
            AnomalyClass::ClientError,
            Some(302),
            "HTTP 302",
        );
    }

    #[tokio::test]
    async fn refused_literal_is_never_connected() {
        let target = Origin::start("127.0.0.3", vec![("/m.m3u8", reply(200, MEDIA))]).await;
        let f = fetcher_with(
            &["127.0.0.2/32"],
            StaticLookup::new(),
            Duration::from_secs(2),
        );
        let (r, c) = probe(&f, &target.url("/m.m3u8")).await;
        assert_eq!(
            c.detail,
            "refused: Hostname resolves to a private address (127.0.0.3)"
        );
        assert_eq!(
            r.outcome,
            ProbeOutcome::Refused(GuardError::PrivateAddress("127.0.0.3".parse().unwrap()))
        );
        assert_eq!(target.hits(), 0);
    }

    #[tokio::test]
    async fn closed_port_is_failing_connect() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let (r, c) = probe(&fetcher(), &format!("http://127.0.0.1:{port}/m.m3u8")).await;
        assert!(
            matches!(r.outcome, ProbeOutcome::Connect(_)),
            "{:?}",
            r.outcome
        );
        assert_eq!(
            (c.status, c.anomaly_class, c.http_status),
            (ProbeStatus::Failing, AnomalyClass::NetworkTimeout, None)
        );
        assert!(c.detail.starts_with("connect error: "), "{}", c.detail);
    }

    #[tokio::test]
    async fn https_to_a_plain_http_server_is_failing_tls() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                let mut buf = [0u8; 1024];
                let _ = sock.read(&mut buf).await;
                let _ = sock
                    .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                    .await;
            }
        });
        let (r, c) = probe(&fetcher(), &format!("https://{addr}/m.m3u8")).await;
        assert!(matches!(r.outcome, ProbeOutcome::Tls(_)), "{:?}", r.outcome);
        assert_eq!(
            (c.status, c.anomaly_class),
            (ProbeStatus::Failing, AnomalyClass::NetworkTimeout)
        );
        assert!(c.detail.starts_with("tls error: "), "{}", c.detail);
    }

    #[tokio::test]
    async fn garbage_response_is_failing() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                let mut buf = [0u8; 1024];
                let _ = sock.read(&mut buf).await;
                let _ = sock.write_all(b"SSH-2.0-OpenSSH_9.6\r\n\r\n").await;
            }
        });
        let (r, c) = probe(&fetcher(), &format!("http://{addr}/m.m3u8")).await;
        assert!(
            matches!(r.outcome, ProbeOutcome::Protocol(_)),
            "{:?}",
            r.outcome
        );
        assert_eq!(
            (c.status, c.anomaly_class),
            (ProbeStatus::Failing, AnomalyClass::NetworkTimeout)
        );
    }

    #[tokio::test]
    async fn stale_live_playlist_across_probes() {
        let o = Origin::start("127.0.0.1", vec![("/m.m3u8", reply(200, MEDIA))]).await;
        let f = fetcher();
        let mut tracker = StalenessTracker::<String>::new();
        let t0 = std::time::Instant::now();
        let mut last = None;
        for secs in [0, 6, 12, 18] {
            let r = f.fetch_manifest(&o.url("/m.m3u8")).await.expect("probed");
            let outcome = r.outcome.with_staleness(
                &mut tracker,
                "s1".to_owned(),
                t0 + Duration::from_secs(secs),
            );
            last = Some(classify(&outcome, r.latency_ms, SLOW_MS));
        }
        assert_class(
            &last.unwrap(),
            ProbeStatus::Degraded,
            AnomalyClass::SlowResponse,
            Some(200),
            "media sequence stuck at 118 for 18 s",
        );
    }

    /// An origin that sends headers with a Content-Length at once, then the body slowly, so a
    /// probe holds its body buffer for as long as the test needs.
    async fn trickling_origin(len: usize, per_chunk: Duration) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = sock.read(&mut buf).await;
                    let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\n\r\n");
                    if sock.write_all(head.as_bytes()).await.is_err() {
                        return;
                    }
                    let chunk = vec![b'#'; 64 * 1024];
                    let mut sent = 0;
                    while sent < len {
                        let n = chunk.len().min(len - sent);
                        if sock.write_all(&chunk[..n]).await.is_err() {
                            return;
                        }
                        sent += n;
                        tokio::time::sleep(per_chunk).await;
                    }
                });
            }
        });
        addr
    }

    #[tokio::test]
    async fn bodies_of_all_probes_share_one_budget() {
        let addr = trickling_origin(800 * 1024, Duration::from_millis(400)).await;
        let guard = Guard::new(vec!["127.0.0.0/8".parse().unwrap()], StaticLookup::new());
        let mut cfg = FetchConfig::new(Duration::from_secs(30));
        cfg.body_budget_bytes = 1024 * 1024;
        let f = Fetcher::new(Arc::new(guard), cfg).unwrap();
        let url = format!("http://{addr}/big.m3u8");
        // The first probe takes 800 KiB of the 1 MiB budget for its declared body and holds it
        // while the body trickles in (about 5 s).
        let first = {
            let (f, url) = (f.clone(), url.clone());
            tokio::spawn(async move { f.fetch_manifest(&url).await })
        };
        while f.body_budget_available() > 256 * 1024 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(f.body_budget_available(), 224 * 1024);
        // A second large body cannot get budget: after a bounded wait it gives up without a
        // verdict, instead of growing memory or timing out the stream.
        let second = f.fetch_manifest(&url).await;
        assert_eq!(second, Err(NotProbed("body budget exhausted")));
        // The first completes (an invalid manifest: it is all '#'), and gives its budget back.
        let first = first.await.unwrap().expect("probed");
        assert!(matches!(
            first.outcome,
            ProbeOutcome::Ok {
                manifest: ManifestCheck::Invalid(_),
                ..
            }
        ));
        assert_eq!(f.body_budget_available(), 1024 * 1024);
    }

    #[tokio::test]
    async fn waiting_for_the_host_is_not_latency_and_not_timeout() {
        // Two requests a second to this host, a 1.5 s probe timeout: ten probes of one host
        // wait up to 4.5 s for their turn, yet none times out, and the wait is not latency.
        let o = Origin::start("127.0.0.1", vec![("/m.m3u8", reply(200, MEDIA))]).await;
        let guard = Guard::new(vec!["127.0.0.0/8".parse().unwrap()], StaticLookup::new());
        let mut cfg = FetchConfig::new(Duration::from_millis(1500));
        cfg.host_rate = 2;
        let f = Fetcher::new(Arc::new(guard), cfg).unwrap();
        let url = o.url("/m.m3u8");
        let probes: Vec<_> = (0..10)
            .map(|_| {
                let (f, url) = (f.clone(), url.clone());
                tokio::spawn(async move { f.fetch_manifest(&url).await })
            })
            .collect();
        for p in probes {
            let r = p.await.unwrap().expect("probed");
            assert!(matches!(r.outcome, ProbeOutcome::Ok { .. }), "{r:?}");
            assert!(r.latency_ms < 1500, "{r:?}");
        }
        assert_eq!(o.hits(), 10);
    }
}
