//! `User-Agent` → browser, OS and device type (analytics.md §1), for the view's
//! dimensions: names without versions (`Chrome`, `Safari`, `Android`, `iOS`, `macOS`…)
//! and a device type `desktop`, `mobile`, `tablet`, `tv` or `other`; `unknown` for all
//! three when the header is absent, empty or unparsable.
//!
//! Parsing is the `ua-parser` crate (the uap-rust implementation of the ua-parser
//! project) over uap-core's `regexes.yaml` 0.18.0, vendored as JSON in `ingest/data/`
//! (Apache-2.0, `uap-core-LICENSE` beside it). The crate reports families such as
//! `Chrome Mobile` or `Mac OS X`; [`classify`] maps them to the names above, and derives
//! the device type from the device family and brand uap reports plus a few markers of
//! the header itself (TV platforms, tablets, `Mobi`). The extractor costs ~135 ms to
//! build (once, lazily) and ~7 µs per uncached call (release, docs/benchmarks.md);
//! [`UaCache`] puts a bounded cache in front, since a few distinct agents serve a whole
//! fleet.

use std::sync::{Arc, Mutex, OnceLock};

use crate::generations::Generations;

/// The value of every part when the `User-Agent` is absent or unparsable.
pub const UNKNOWN: &str = "unknown";

/// Longest `User-Agent` classified; longer headers are cut (at a char boundary)
/// before parsing and caching, so one client cannot make the cache hold megabytes.
pub const MAX_UA_BYTES: usize = 512;

/// Browser, OS and device type of one `User-Agent`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UaClass {
    /// Browser name without version, e.g. `Chrome`; `unknown` when not recognised.
    pub browser: Arc<str>,
    /// OS name without version, e.g. `iOS`; `unknown` when not recognised.
    pub os: Arc<str>,
    /// `desktop`, `mobile`, `tablet`, `tv`, `other` or `unknown`.
    pub device_type: &'static str,
}

impl UaClass {
    /// `unknown` for all three.
    pub fn unknown() -> Self {
        UaClass {
            browser: Arc::from(UNKNOWN),
            os: Arc::from(UNKNOWN),
            device_type: UNKNOWN,
        }
    }
}

impl Default for UaClass {
    fn default() -> Self {
        UaClass::unknown()
    }
}

/// The uap-core regexes, as JSON.
const REGEXES_JSON: &str = include_str!("../data/uap-regexes.json");

/// The extractor, built on first use.
fn extractor() -> Option<&'static ua_parser::Extractor<'static>> {
    static EXTRACTOR: OnceLock<Option<ua_parser::Extractor<'static>>> = OnceLock::new();
    EXTRACTOR
        .get_or_init(|| {
            let regexes: ua_parser::Regexes<'static> = match serde_json::from_str(REGEXES_JSON) {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!(error = %e, "user-agent regexes do not parse; every agent is unknown");
                    return None;
                }
            };
            match ua_parser::Extractor::try_from(regexes) {
                Ok(x) => Some(x),
                Err(e) => {
                    tracing::error!(error = %e, "user-agent regexes do not compile; every agent is unknown");
                    None
                }
            }
        })
        .as_ref()
}

/// Builds the extractor now (it is otherwise built by the first classification).
pub fn warm_up() {
    let _ = extractor();
}

/// Classifies one `User-Agent` header value (uncached; see [`UaCache`]).
pub fn classify(user_agent: Option<&str>) -> UaClass {
    let ua = match user_agent.map(str::trim) {
        Some(ua) if !ua.is_empty() => truncate(ua),
        _ => return UaClass::unknown(),
    };
    let Some(x) = extractor() else {
        return UaClass::unknown();
    };
    let (agent, os, device) = x.extract(ua);
    let browser = agent.map(|a| browser_name(&a.family));
    let os = os.map(|o| os_name(&o.os));
    let device_family = device.as_ref().map(|d| d.device.to_string());
    let device_brand = device
        .as_ref()
        .and_then(|d| d.brand.as_ref().map(|b| b.to_string()));
    if browser.is_none() && os.is_none() && device_family.is_none() {
        // Nothing recognised at all: unparsable.
        return UaClass::unknown();
    }
    let device_type = device_type(
        ua,
        os.as_deref(),
        device_family.as_deref(),
        device_brand.as_deref(),
    );
    UaClass {
        browser: Arc::from(browser.as_deref().unwrap_or(UNKNOWN)),
        os: Arc::from(os.as_deref().unwrap_or(UNKNOWN)),
        device_type,
    }
}

fn truncate(ua: &str) -> &str {
    if ua.len() <= MAX_UA_BYTES {
        return ua;
    }
    let mut end = MAX_UA_BYTES;
    while !ua.is_char_boundary(end) {
        end -= 1;
    }
    &ua[..end]
}

/// uap browser family → the name we report.
fn browser_name(family: &str) -> String {
    let mapped = match family {
        "Chrome Mobile" | "Chrome Mobile iOS" | "HeadlessChrome" => "Chrome",
        "Chrome Mobile WebView" => "Chrome WebView",
        "Mobile Safari" => "Safari",
        "Mobile Safari UI/WKWebView" => "Safari WebView",
        "Firefox Mobile" | "Firefox iOS" => "Firefox",
        "Edge Mobile" => "Edge",
        "Opera Mobile" => "Opera",
        "Other" => UNKNOWN,
        other => other,
    };
    mapped.to_owned()
}

/// uap OS family → the name we report.
fn os_name(family: &str) -> String {
    let mapped = match family {
        "Mac OS X" | "Mac OS" => "macOS",
        "Chrome OS" => "ChromeOS",
        "Web0S" | "webOS" => "webOS",
        "Chromecast Linux" => "Chromecast",
        "Ubuntu" | "Debian" | "Fedora" | "Red Hat" | "Mint" | "Linux Mint" | "Arch Linux"
        | "CentOS" | "Gentoo" | "Slackware" | "openSUSE" | "SUSE" => "Linux",
        "Other" => UNKNOWN,
        f if f.starts_with("Windows") && f != "Windows Phone" && f != "Windows Mobile" => "Windows",
        other => other,
    };
    mapped.to_owned()
}

/// Markers of a TV or console (the living-room screen) in the header.
const TV_MARKERS: [&str; 20] = [
    "smart-tv",
    "smarttv",
    "smart tv",
    "smart_tv",
    "hbbtv",
    "android tv",
    "googletv",
    "google tv",
    "crkey",
    "appletv",
    "apple tv",
    "tvos",
    "roku",
    "web0s",
    "webos.tv",
    "netcast",
    "bravia",
    "playstation",
    "xbox",
    "nintendo",
];

fn device_type(
    ua: &str,
    os: Option<&str>,
    family: Option<&str>,
    brand: Option<&str>,
) -> &'static str {
    let lower = ua.to_ascii_lowercase();
    if family == Some("Spider") || brand == Some("Spider") {
        return "other";
    }
    let family_lower = family.map(str::to_ascii_lowercase).unwrap_or_default();
    // Fire TV models are `AFT…` (`AFTMM`, `AFTS`) in an Android build string.
    let fire_tv = lower.contains("; aft") && lower.contains("build/");
    if brand == Some("Generic_Inettv")
        || family_lower.contains("smarttv")
        || family_lower.contains("smart-tv")
        || family_lower.contains("chromecast")
        || matches!(os, Some("Tizen" | "webOS" | "Roku" | "tvOS" | "Chromecast"))
            && !lower.contains("mobile")
        || TV_MARKERS.iter().any(|m| lower.contains(m))
        || fire_tv
    {
        return "tv";
    }
    if family == Some("iPad")
        || brand == Some("Generic_Android_Tablet")
        || lower.contains("tablet")
        || lower.contains("kindle")
        || lower.contains("silk/")
        || os == Some("Android") && !lower.contains("mobile")
    {
        return "tablet";
    }
    if matches!(family, Some("iPhone" | "iPod" | "iPod Touch"))
        || matches!(
            brand,
            Some("Generic_Smartphone" | "Generic_Feature_Phone" | "Generic_Android")
        )
        || lower.contains("mobi")
        || matches!(
            os,
            Some("iOS" | "Android" | "Windows Phone" | "Windows Mobile")
        )
    {
        return "mobile";
    }
    if matches!(
        os,
        Some("Windows" | "macOS" | "Linux" | "ChromeOS" | "FreeBSD" | "OpenBSD" | "NetBSD")
    ) {
        return "desktop";
    }
    "other"
}

/// A bounded cache of classifications keyed by the `User-Agent` string: a fleet has
/// few distinct agents, so nearly every request is one hash lookup under a lock (~0.1 µs)
/// instead of a regex walk (~7 µs). Bounded by [`Generations`]: at most twice `capacity`
/// agents, those seen within the last generation kept. Cheap to clone (shared).
#[derive(Clone)]
pub struct UaCache {
    cache: Arc<Mutex<Generations<Box<str>, UaClass>>>,
}

impl std::fmt::Debug for UaCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UaCache").finish_non_exhaustive()
    }
}

impl Default for UaCache {
    fn default() -> Self {
        UaCache::new(10_000)
    }
}

impl UaCache {
    /// A cache holding at most `capacity` distinct agents per generation.
    pub fn new(capacity: usize) -> Self {
        UaCache {
            cache: Arc::new(Mutex::new(Generations::new(capacity))),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Generations<Box<str>, UaClass>> {
        // Every entry is complete after any panic (no multi-step update): keep using it.
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The classification of a `User-Agent` header value (`None` when absent).
    pub fn classify(&self, user_agent: Option<&str>) -> UaClass {
        let ua = match user_agent.map(str::trim) {
            Some(ua) if !ua.is_empty() => truncate(ua),
            _ => return UaClass::unknown(),
        };
        if let Some(hit) = self.lock().get(ua) {
            return hit.clone();
        }
        // Parsed outside the lock: a miss does not hold up the requests that hit.
        let class = classify(Some(ua));
        self.lock().insert(Box::from(ua), class.clone());
        class
    }

    /// Like [`UaCache::classify`] for a raw header value that may not be UTF-8 (such a
    /// header is unparsable: `unknown`).
    pub fn classify_bytes(&self, user_agent: Option<&[u8]>) -> UaClass {
        match user_agent.map(std::str::from_utf8) {
            Some(Ok(ua)) => self.classify(Some(ua)),
            _ => UaClass::unknown(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn triple(ua: Option<&str>) -> (String, String, &'static str) {
        let c = classify(ua);
        (c.browser.to_string(), c.os.to_string(), c.device_type)
    }

    /// Real agents by class (browser, OS, device type).
    const TABLE: &[(&str, &str, &str, &str)] = &[
        ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36", "Chrome", "Windows", "desktop"),
        ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36 Edg/124.0.2478.67", "Edge", "Windows", "desktop"),
        ("Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:125.0) Gecko/20100101 Firefox/125.0", "Firefox", "Windows", "desktop"),
        ("Mozilla/5.0 (Windows NT 6.1; WOW64; Trident/7.0; rv:11.0) like Gecko", "IE", "Windows", "desktop"),
        ("Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4.1 Safari/605.1.15", "Safari", "macOS", "desktop"),
        ("Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36", "Chrome", "macOS", "desktop"),
        ("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36", "Chrome", "Linux", "desktop"),
        ("Mozilla/5.0 (X11; Ubuntu; Linux x86_64; rv:125.0) Gecko/20100101 Firefox/125.0", "Firefox", "Linux", "desktop"),
        ("Mozilla/5.0 (X11; CrOS x86_64 14541.0.0) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36", "Chrome", "ChromeOS", "desktop"),
        ("Mozilla/5.0 (iPhone; CPU iPhone OS 17_4_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4.1 Mobile/15E148 Safari/604.1", "Safari", "iOS", "mobile"),
        ("Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) CriOS/124.0.6367.88 Mobile/15E148 Safari/604.1", "Chrome", "iOS", "mobile"),
        ("Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.6367.82 Mobile Safari/537.36", "Chrome", "Android", "mobile"),
        ("Mozilla/5.0 (Linux; Android 14; SM-S918B) AppleWebKit/537.36 (KHTML, like Gecko) SamsungBrowser/24.0 Chrome/117.0.0.0 Mobile Safari/537.36", "Samsung Internet", "Android", "mobile"),
        ("Mozilla/5.0 (Android 14; Mobile; rv:125.0) Gecko/125.0 Firefox/125.0", "Firefox", "Android", "mobile"),
        ("Mozilla/5.0 (iPad; CPU OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1", "Safari", "iOS", "tablet"),
        ("Mozilla/5.0 (Linux; Android 13; SM-X700) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36", "Chrome", "Android", "tablet"),
        ("Mozilla/5.0 (SMART-TV; LINUX; Tizen 7.0) AppleWebKit/537.36 (KHTML, like Gecko) 94.0.4606.31/7.0 TV Safari/537.36", "Safari", "Tizen", "tv"),
        ("Mozilla/5.0 (Web0S; Linux/SmartTV) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/87.0.4280.88 Safari/537.36 WebAppManager", "Chrome", "webOS", "tv"),
        ("Mozilla/5.0 (X11; Linux armv7l) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/114.0.0.0 Safari/537.36 CrKey/1.56.500000", "Chrome", "Chromecast", "tv"),
        ("Mozilla/5.0 (Linux; Android 11; SHIELD Android TV Build/RQ1A.210105.003; wv) AppleWebKit/537.36 (KHTML, like Gecko) Version/4.0 Chrome/120.0.6099.230 Mobile Safari/537.36", "Chrome WebView", "Android", "tv"),
        ("Mozilla/5.0 (Linux; Android 9; AFTMM Build/PS7242) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.6099.0 Mobile Safari/537.36", "Chrome", "Android", "tv"),
        ("Roku/DVP-12.5 (12.5.0.4178-51)", "Roku", "Roku", "tv"),
        ("Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)", "Googlebot", "unknown", "other"),
        ("Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)", "bingbot", "unknown", "other"),
        ("curl/8.5.0", "curl", "unknown", "other"),
    ];

    #[test]
    fn classifies_real_user_agents() {
        let mut wrong = Vec::new();
        for (ua, browser, os, device) in TABLE {
            let got = triple(Some(ua));
            if got != ((*browser).to_owned(), (*os).to_owned(), *device) {
                wrong.push(format!(
                    "{ua}\n  want {browser} / {os} / {device}\n  got  {got:?}"
                ));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn absent_empty_and_garbage_are_unknown() {
        let unknown = (UNKNOWN.to_owned(), UNKNOWN.to_owned(), UNKNOWN);
        assert_eq!(triple(None), unknown);
        assert_eq!(triple(Some("")), unknown);
        assert_eq!(triple(Some("   ")), unknown);
        assert_eq!(triple(Some("garbage %%% not a ua")), unknown);
        assert_eq!(triple(Some("\u{1}\u{2}")), unknown);
        let cache = UaCache::new(10);
        assert_eq!(
            cache.classify_bytes(Some(&[0xff, 0xfe])),
            UaClass::unknown()
        );
        assert_eq!(cache.classify_bytes(None), UaClass::unknown());
    }

    #[test]
    fn cache_gives_the_same_answer_and_stays_bounded() {
        let cache = UaCache::new(4);
        for (ua, ..) in TABLE {
            assert_eq!(cache.classify(Some(ua)), classify(Some(ua)));
            assert_eq!(cache.classify(Some(ua)), classify(Some(ua)));
        }
        // Two generations of at most 4 agents each.
        assert!(TABLE.len() > 8);
        assert!(cache.lock().len() <= 8);
    }

    #[test]
    fn very_long_agents_are_cut_before_parsing() {
        let long = format!("{}{}", TABLE[0].0, "é".repeat(2_000));
        let c = UaCache::new(10).classify(Some(&long));
        assert_eq!(&*c.browser, "Chrome");
        assert!(truncate(&long).len() <= MAX_UA_BYTES);
    }
}
