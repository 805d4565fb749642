//! SSRF guard: decides which URLs and addresses the service may fetch, at
//! registration, on every probe, on every redirect hop and at connect time.
//!
//! Two entry points share one notion of "allowed address":
//!
//! * [`Guard::check_url`] validates a `sourceUrl` at registration in the order of
//!   decisions.md §5 (absolute URL → scheme → hostname → DNS → every answer public).
//! * [`GuardedResolver`] is the DNS resolver of the prober's reqwest client: it
//!   resolves with the same lookup and refuses when any answer is not allowed, so
//!   the client can only ever connect to addresses the guard has seen (no
//!   DNS-rebinding window between check and connect). reqwest does not call the
//!   resolver for IP-literal URLs; the prober checks those with
//!   [`Guard::check_target`] before each request.
//!
//! Refused ("non-public") ranges, beyond the contract's list, are a deliberate
//! superset:
//!
//! * IPv4: 0.0.0.0/8, 10/8, 100.64/10, 127/8, 169.254/16, 172.16/12, 192.0.0.0/24,
//!   192.0.2.0/24, 192.88.99.0/24 (6to4 relay), 192.168/16, 198.18/15,
//!   198.51.100.0/24, 203.0.113.0/24 (documentation ranges are never real origins),
//!   224/4 (multicast), 240/4 (reserved, includes 255.255.255.255).
//! * IPv6: ::, ::1, 100::/64 (discard), 2001::/32 (Teredo: the embedded client
//!   address is obfuscated, so the whole prefix is refused), 2001:db8::/32
//!   (documentation), 64:ff9b:1::/48 (local NAT64), fc00::/7, fe80::/10,
//!   fec0::/10 (old site-local), ff00::/8 (multicast).
//! * IPv6 that embeds an IPv4 address is refused when the embedded address is:
//!   IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible `::a.b.c.d`, IPv4-translated
//!   `::ffff:0:a.b.c.d`, NAT64 `64:ff9b::a.b.c.d` and 6to4 `2002:aabb:ccdd::/48`.
//!
//! The allow-list (`STREAMWATCH_ALLOW_PRIVATE`) overrides all of the above: an
//! address inside an allowed network is accepted; for an IPv4-mapped IPv6 address
//! the embedded IPv4 address is matched as well.
//!
//! Special names (RFC 6761) never reach DNS: `localhost`, `*.localhost` resolve to
//! `127.0.0.1` and `::1` (so they are refused unless allow-listed), `invalid` and
//! `*.invalid` never resolve. A single trailing dot is ignored for these checks.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use hickory_resolver::config::{LookupIpStrategy, ResolverConfig, CLOUDFLARE};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::net::NetError;
use hickory_resolver::TokioResolver;
use ipnet::IpNet;
use url::{Host, Url};

/// Why the guard refused a URL or an address. `Display` is the exact message of
/// the contract (interface.md "Errors"); [`GuardError::InvalidUrl`] displays the
/// validation message of `sourceUrl`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GuardError {
    /// Not an absolute URL (registration only; the HTTP layer reports it as the
    /// field validation message).
    #[error("Must be a valid URL")]
    InvalidUrl,
    /// A redirect `Location` the prober could not parse or resolve.
    #[error("URL could not be parsed")]
    Unparseable,
    /// Scheme other than `http` / `https`.
    #[error("Only http(s) URLs are allowed")]
    BadScheme,
    /// The URL has an empty host.
    #[error("URL has no hostname")]
    NoHostname,
    /// DNS gave no answer (NXDOMAIN, no records, resolver failure).
    #[error("Hostname did not resolve")]
    DidNotResolve,
    /// The first refused address among the answers (or the literal itself).
    #[error("Hostname resolves to a private address ({0})")]
    PrivateAddress(IpAddr),
}

/// A URL that passed [`Guard::check_url`], with the addresses it resolved to at
/// check time (informational: the prober resolves again at connect time).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedUrl {
    /// The parsed, WHATWG-normalized URL (e.g. `http://2130706433/` becomes
    /// `http://127.0.0.1/`).
    pub url: Url,
    /// The addresses the host resolved to (the literal itself for IP hosts).
    pub addrs: Vec<IpAddr>,
}

/// A lookup that failed or gave no usable answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("lookup failed: {0}")]
pub struct LookupFailed(pub String);

/// Name → addresses. Implemented for hickory's [`TokioResolver`] and for the
/// fixed table [`StaticLookup`] (tests, and servers that must not use DNS).
pub trait HostLookup: Send + Sync + 'static {
    /// Every A and AAAA answer for `host` (a DNS name, never an IP literal).
    fn lookup<'a>(&'a self, host: &'a str) -> BoxFuture<'a, Result<Vec<IpAddr>, LookupFailed>>;
}

impl HostLookup for TokioResolver {
    fn lookup<'a>(&'a self, host: &'a str) -> BoxFuture<'a, Result<Vec<IpAddr>, LookupFailed>> {
        Box::pin(async move {
            match self.lookup_ip(host).await {
                Ok(answer) => Ok(answer.iter().collect()),
                Err(e) => Err(LookupFailed(e.to_string())),
            }
        })
    }
}

/// A fixed name → addresses table; names not in it do not resolve.
/// Names are matched lowercase, without a trailing dot.
#[derive(Debug, Clone, Default)]
pub struct StaticLookup {
    table: HashMap<String, Vec<IpAddr>>,
}

impl StaticLookup {
    /// An empty table: nothing resolves.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) the answers of `name`.
    pub fn with(mut self, name: &str, addrs: &[IpAddr]) -> Self {
        self.table
            .insert(normalize_name(name).to_owned(), addrs.to_vec());
        self
    }
}

impl HostLookup for StaticLookup {
    fn lookup<'a>(&'a self, host: &'a str) -> BoxFuture<'a, Result<Vec<IpAddr>, LookupFailed>> {
        let answer = self
            .table
            .get(&normalize_name(host).to_ascii_lowercase())
            .cloned()
            .ok_or_else(|| LookupFailed(format!("{host}: no such name")));
        Box::pin(async move { answer })
    }
}

/// Builds hickory's tokio resolver from the system configuration
/// (`/etc/resolv.conf`), or from a public default (Cloudflare) when the system
/// configuration cannot be read. Both A and AAAA are queried so that every
/// answer can be checked.
pub fn system_resolver() -> Result<TokioResolver, NetError> {
    let mut builder = match TokioResolver::builder_tokio() {
        Ok(builder) => builder,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read system resolver configuration, using cloudflare dns");
            TokioResolver::builder_with_config(
                ResolverConfig::udp_and_tcp(&CLOUDFLARE),
                TokioRuntimeProvider::default(),
            )
        }
    };
    let opts = builder.options_mut();
    opts.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
    opts.timeout = Duration::from_secs(3);
    opts.attempts = 2;
    builder.build()
}

/// The SSRF guard. Cheap to share behind an `Arc`; one instance serves
/// registration and the prober.
#[derive(Clone)]
pub struct Guard {
    allow: Vec<IpNet>,
    lookup: Arc<dyn HostLookup>,
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("allow", &self.allow)
            .finish_non_exhaustive()
    }
}

impl Guard {
    /// A guard admitting public addresses plus the `allow` networks, resolving
    /// names with `lookup`.
    pub fn new(allow: Vec<IpNet>, lookup: impl HostLookup) -> Self {
        Self {
            allow,
            lookup: Arc::new(lookup),
        }
    }

    /// A guard resolving with the system DNS configuration (see [`system_resolver`]).
    /// Must be called inside a tokio runtime.
    pub fn with_system_resolver(allow: Vec<IpNet>) -> Result<Self, NetError> {
        Ok(Self::new(allow, system_resolver()?))
    }

    /// The allow-list this guard was built with.
    pub fn allow_list(&self) -> &[IpNet] {
        &self.allow
    }

    /// Whether the service may connect to `ip`: public, or inside an allowed
    /// network (for IPv4-mapped IPv6, the embedded IPv4 address counts too).
    pub fn is_allowed_ip(&self, ip: IpAddr) -> bool {
        if self.allow.iter().any(|net| net.contains(&ip)) {
            return true;
        }
        let canonical = ip.to_canonical();
        if canonical != ip && self.allow.iter().any(|net| net.contains(&canonical)) {
            return true;
        }
        is_public(ip)
    }

    /// Registration check of a `sourceUrl`, in the order of decisions.md §5.
    pub async fn check_url(&self, raw: &str) -> Result<CheckedUrl, GuardError> {
        let url = parse_absolute(raw)?;
        let addrs = self.check_url_resolving(&url).await?;
        Ok(CheckedUrl { url, addrs })
    }

    /// Scheme and host checks of an already parsed URL plus the DNS check of
    /// its name: every answer must be allowed. Returns the answers.
    pub async fn check_url_resolving(&self, url: &Url) -> Result<Vec<IpAddr>, GuardError> {
        match target_host(url)? {
            TargetHost::Ip(ip) => self.check_ip(ip).map(|()| vec![ip]),
            TargetHost::Name(name) => self.resolve_checked(&name).await,
        }
    }

    /// Cheap per-request check used by the prober before each hop: scheme, host
    /// present, and, for IP-literal hosts (which reqwest connects to without
    /// calling the resolver), the address itself. Names are checked by
    /// [`GuardedResolver`] at connect time.
    pub fn check_target(&self, url: &Url) -> Result<(), GuardError> {
        match target_host(url)? {
            TargetHost::Ip(ip) => self.check_ip(ip),
            TargetHost::Name(_) => Ok(()),
        }
    }

    /// Resolves `name` (a DNS name, not an IP literal) and checks every answer.
    /// Special-use names are answered without DNS (see module docs).
    pub async fn resolve_checked(&self, name: &str) -> Result<Vec<IpAddr>, GuardError> {
        let addrs = self.resolve(name).await?;
        for ip in &addrs {
            self.check_ip(*ip)?;
        }
        Ok(addrs)
    }

    fn check_ip(&self, ip: IpAddr) -> Result<(), GuardError> {
        if self.is_allowed_ip(ip) {
            Ok(())
        } else {
            Err(GuardError::PrivateAddress(ip))
        }
    }

    async fn resolve(&self, name: &str) -> Result<Vec<IpAddr>, GuardError> {
        let bare = normalize_name(name).to_ascii_lowercase();
        if bare == "localhost" || bare.ends_with(".localhost") {
            return Ok(vec![
                IpAddr::V4(Ipv4Addr::LOCALHOST),
                IpAddr::V6(Ipv6Addr::LOCALHOST),
            ]);
        }
        if bare.is_empty() || bare == "invalid" || bare.ends_with(".invalid") {
            return Err(GuardError::DidNotResolve);
        }
        // Reached through reqwest for names only, but be safe with literals.
        if let Ok(ip) = bare
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
        {
            return Ok(vec![ip]);
        }
        match self.lookup.lookup(name).await {
            Ok(addrs) if !addrs.is_empty() => Ok(addrs),
            Ok(_) => Err(GuardError::DidNotResolve),
            Err(e) => {
                tracing::debug!(host = name, error = %e, "host did not resolve");
                Err(GuardError::DidNotResolve)
            }
        }
    }
}

/// Parses a registration URL; anything that is not an absolute URL is
/// [`GuardError::InvalidUrl`], except an absolute URL with an empty authority
/// (`http://`, `http://:80/`), which the WHATWG parser rejects but the contract
/// reports by scheme first, then as [`GuardError::NoHostname`].
fn parse_absolute(raw: &str) -> Result<Url, GuardError> {
    match Url::parse(raw) {
        Ok(url) => Ok(url),
        Err(url::ParseError::EmptyHost) => match raw_scheme(raw) {
            Some(s) if s == "http" || s == "https" => Err(GuardError::NoHostname),
            Some(_) => Err(GuardError::BadScheme),
            None => Err(GuardError::InvalidUrl),
        },
        Err(_) => Err(GuardError::InvalidUrl),
    }
}

/// Parses a redirect `Location` against the URL that answered it.
pub fn resolve_location(base: &Url, location: &str) -> Result<Url, GuardError> {
    base.join(location).map_err(|_| GuardError::Unparseable)
}

/// The scheme of `raw` per RFC 3986 (`ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ) ":"`),
/// lowercased, ignoring leading C0/space like the WHATWG parser.
fn raw_scheme(raw: &str) -> Option<String> {
    let s = raw.trim_start_matches(|c: char| c <= ' ');
    let (scheme, _) = s.split_once(':')?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic() && chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)))
        .then(|| scheme.to_ascii_lowercase())
}

enum TargetHost {
    Ip(IpAddr),
    Name(String),
}

fn target_host(url: &Url) -> Result<TargetHost, GuardError> {
    if url.scheme() != "http" && url.scheme() != "https" {
        return Err(GuardError::BadScheme);
    }
    match url.host() {
        None => Err(GuardError::NoHostname),
        Some(Host::Ipv4(v4)) => Ok(TargetHost::Ip(IpAddr::V4(v4))),
        Some(Host::Ipv6(v6)) => Ok(TargetHost::Ip(IpAddr::V6(v6))),
        Some(Host::Domain(d)) if normalize_name(d).is_empty() => Err(GuardError::NoHostname),
        Some(Host::Domain(d)) => Ok(TargetHost::Name(d.to_owned())),
    }
}

fn normalize_name(name: &str) -> &str {
    name.strip_suffix('.').unwrap_or(name)
}

/// Whether `ip` is a globally routable unicast address (see module docs for
/// the refused ranges). Ignores any allow-list.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    let refused = a == 0                                  // 0.0.0.0/8 "this network"
        || a == 10                                        // RFC 1918
        || (a == 100 && (64..=127).contains(&b))          // 100.64.0.0/10 CGNAT
        || a == 127                                       // loopback
        || (a == 169 && b == 254)                         // link-local
        || (a == 172 && (16..=31).contains(&b))           // RFC 1918
        || (a == 192 && b == 0 && c == 0)                 // 192.0.0.0/24 IETF protocol assignments
        || (a == 192 && b == 0 && c == 2)                 // TEST-NET-1
        || (a == 192 && b == 88 && c == 99)               // 6to4 relay anycast
        || (a == 192 && b == 168)                         // RFC 1918
        || (a == 198 && (b == 18 || b == 19))             // benchmarking
        || (a == 198 && b == 51 && c == 100)              // TEST-NET-2
        || (a == 203 && b == 0 && c == 113)               // TEST-NET-3
        || a >= 224; // multicast 224/4, reserved 240/4, broadcast
    !refused
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let seg = ip.segments();
    // Embedded IPv4: the IPv6 address is only as public as the IPv4 it carries.
    if let Some(v4) = embedded_v4(&ip) {
        return is_public_v4(v4);
    }
    let refused = ip.is_unspecified()
        || ip.is_loopback()
        || (seg[0] == 0x0100 && seg[1] == 0 && seg[2] == 0 && seg[3] == 0) // 100::/64 discard
        || (seg[0] == 0x2001 && seg[1] == 0)              // Teredo 2001::/32
        || (seg[0] == 0x2001 && seg[1] == 0x0db8)         // documentation
        || (seg[0] == 0x0064 && seg[1] == 0xff9b && seg[2] == 0x0001) // 64:ff9b:1::/48 local NAT64
        || (seg[0] & 0xfe00) == 0xfc00                    // fc00::/7 ULA
        || (seg[0] & 0xffc0) == 0xfe80                    // fe80::/10 link-local
        || (seg[0] & 0xffc0) == 0xfec0                    // fec0::/10 site-local
        || (seg[0] & 0xff00) == 0xff00                    // ff00::/8 multicast
        || seg[0] == 0; // anything else in ::/16 (reserved) that is not an IPv4 embedding
    !refused
}

/// The IPv4 address embedded in an IPv6 address by a translation or transition
/// mechanism, if any (:: and ::1 are not embeddings).
fn embedded_v4(ip: &Ipv6Addr) -> Option<Ipv4Addr> {
    let seg = ip.segments();
    let o = ip.octets();
    let low32 = Ipv4Addr::new(o[12], o[13], o[14], o[15]);
    if seg[..5] == [0, 0, 0, 0, 0] && seg[5] == 0xffff {
        return Some(low32); // ::ffff:a.b.c.d mapped
    }
    if seg[..4] == [0, 0, 0, 0] && seg[4] == 0xffff && seg[5] == 0 {
        return Some(low32); // ::ffff:0:a.b.c.d translated
    }
    if seg[..6] == [0, 0, 0, 0, 0, 0] && !ip.is_unspecified() && !ip.is_loopback() {
        return Some(low32); // ::a.b.c.d compatible
    }
    if seg[..6] == [0x0064, 0xff9b, 0, 0, 0, 0] {
        return Some(low32); // 64:ff9b::a.b.c.d NAT64
    }
    if seg[0] == 0x2002 {
        return Some(Ipv4Addr::new(o[2], o[3], o[4], o[5])); // 6to4
    }
    None
}

/// The prober's reqwest DNS resolver: resolves through the [`Guard`] and fails
/// the connection when any answer is refused. The error is the boxed
/// [`GuardError`], found again in the reqwest error's source chain.
#[derive(Debug, Clone)]
pub struct GuardedResolver {
    guard: Arc<Guard>,
}

impl GuardedResolver {
    /// A resolver applying `guard`.
    pub fn new(guard: Arc<Guard>) -> Self {
        Self { guard }
    }
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let guard = Arc::clone(&self.guard);
        let host = name.as_str().to_owned();
        Box::pin(async move {
            match guard.resolve_checked(&host).await {
                Ok(addrs) => {
                    // Port 0: hyper-util fills in the URL's port.
                    let addrs: reqwest::dns::Addrs =
                        Box::new(addrs.into_iter().map(|ip| SocketAddr::new(ip, 0)));
                    Ok(addrs)
                }
                Err(e) => {
                    tracing::debug!(host, error = %e, "guarded resolver refused host");
                    Err(Box::new(e) as Box<dyn std::error::Error + Send + Sync>)
                }
            }
        })
    }
}

/// A reqwest client builder that can only reach what `guard` allows: no proxies from the
/// environment, no redirects followed by itself, and every name resolved (and checked) by
/// [`GuardedResolver`]. IP-literal hosts bypass resolvers: callers check each URL with
/// [`Guard::check_target`] before sending. The prober and the alert sender both start here.
pub fn guarded_client(guard: Arc<Guard>) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .dns_resolver(Arc::new(GuardedResolver::new(guard)))
}

/// The [`GuardError`] behind a failed request, if the guard is why it failed.
pub fn guard_refusal<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a GuardError> {
    let mut source = Some(e);
    while let Some(err) = source {
        if let Some(g) = err.downcast_ref::<GuardError>() {
            return Some(g);
        }
        source = err.source();
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const PUBLIC_V4: &str = "93.184.216.34";

    fn guard() -> Guard {
        Guard::new(
            vec![],
            StaticLookup::new()
                .with("example.com", &["93.184.216.34".parse().unwrap()])
                .with(
                    "dual.example",
                    &[
                        "93.184.216.34".parse().unwrap(),
                        "2606:2800:220:1::1".parse().unwrap(),
                    ],
                )
                .with("internal.example", &["10.1.2.3".parse().unwrap()])
                .with(
                    "mixed.example",
                    &[
                        "93.184.216.34".parse().unwrap(),
                        "192.168.1.7".parse().unwrap(),
                    ],
                )
                .with("v6private.example", &["fd00::5".parse().unwrap()])
                .with("empty.example", &[]),
        )
    }

    fn guard_allowing(nets: &[&str]) -> Guard {
        Guard::new(
            nets.iter().map(|n| n.parse().unwrap()).collect(),
            StaticLookup::new(),
        )
    }

    #[allow(non_snake_case)]
    fn PRIV(ip: &str) -> String {
        format!("Hostname resolves to a private address ({ip})")
    }

    /// (input, expected outcome: Ok(normalized url) or Err(exact message))
    fn cases() -> Vec<(&'static str, Result<&'static str, String>)> {
        let p = PRIV;
        vec![
            // not absolute URLs
            ("", Err("Must be a valid URL".into())),
            ("example.com/live.m3u8", Err("Must be a valid URL".into())),
            ("/live.m3u8", Err("Must be a valid URL".into())),
            ("http://exa mple.com/", Err("Must be a valid URL".into())),
            ("http://[::1/", Err("Must be a valid URL".into())),
            ("http://256.0.0.1/", Err("Must be a valid URL".into())),
            // schemes
            (
                "ftp://example.com/x",
                Err("Only http(s) URLs are allowed".into()),
            ),
            (
                "file:///etc/passwd",
                Err("Only http(s) URLs are allowed".into()),
            ),
            (
                "javascript:alert(1)",
                Err("Only http(s) URLs are allowed".into()),
            ),
            (
                "gopher://127.0.0.1:6379/_",
                Err("Only http(s) URLs are allowed".into()),
            ),
            ("ftp://", Err("Only http(s) URLs are allowed".into())),
            (
                "data:text/plain,hi",
                Err("Only http(s) URLs are allowed".into()),
            ),
            // empty host
            ("http://", Err("URL has no hostname".into())),
            ("https://", Err("URL has no hostname".into())),
            ("http://:8080/x", Err("URL has no hostname".into())),
            ("http://user@/x", Err("URL has no hostname".into())),
            // WHATWG treats http:///x as http://x/: a name that does not resolve
            ("http:///x", Err("Hostname did not resolve".into())),
            // DNS
            (
                "http://nonexistent.invalid/",
                Err("Hostname did not resolve".into()),
            ),
            ("http://INVALID./", Err("Hostname did not resolve".into())),
            (
                "http://unknown.example/",
                Err("Hostname did not resolve".into()),
            ),
            (
                "http://empty.example/",
                Err("Hostname did not resolve".into()),
            ),
            ("http://internal.example/live.m3u8", Err(p("10.1.2.3"))),
            ("http://mixed.example/", Err(p("192.168.1.7"))),
            ("http://v6private.example/", Err(p("fd00::5"))),
            // loopback, every spelling
            ("http://127.0.0.1/", Err(p("127.0.0.1"))),
            ("http://127.0.0.1:8080/live.m3u8", Err(p("127.0.0.1"))),
            ("http://127.1/", Err(p("127.0.0.1"))),
            ("http://127.0.1/", Err(p("127.0.0.1"))),
            ("http://2130706433/", Err(p("127.0.0.1"))),
            ("http://0177.0.0.1/", Err(p("127.0.0.1"))),
            ("http://0x7f.1/", Err(p("127.0.0.1"))),
            ("http://0x7f000001/", Err(p("127.0.0.1"))),
            ("http://017700000001/", Err(p("127.0.0.1"))),
            ("http://127.0.0.%31/", Err(p("127.0.0.1"))),
            ("http://127.0.0.1./", Err(p("127.0.0.1"))),
            ("http://127.255.255.254/", Err(p("127.255.255.254"))),
            ("http://localhost/", Err(p("127.0.0.1"))),
            ("http://LOCALHOST./", Err(p("127.0.0.1"))),
            ("http://localhost:9000/x", Err(p("127.0.0.1"))),
            ("http://foo.localhost/", Err(p("127.0.0.1"))),
            ("http://a.b.LocalHost./", Err(p("127.0.0.1"))),
            ("http://ⓛocalhost/", Err(p("127.0.0.1"))),
            // userinfo is allowed but does not hide the host
            ("http://user:pass@127.0.0.1/", Err(p("127.0.0.1"))),
            ("http://example.com@127.0.0.1/", Err(p("127.0.0.1"))),
            (
                "http://user:pass@example.com/live.m3u8",
                Ok("http://user:pass@example.com/live.m3u8"),
            ),
            // RFC 1918
            ("http://10.0.0.1/", Err(p("10.0.0.1"))),
            ("http://10.255.255.255/", Err(p("10.255.255.255"))),
            ("http://172.16.0.1/", Err(p("172.16.0.1"))),
            ("http://172.31.255.255/", Err(p("172.31.255.255"))),
            ("http://192.168.0.1/", Err(p("192.168.0.1"))),
            ("http://0xc0a80001/", Err(p("192.168.0.1"))),
            ("http://3232235521/", Err(p("192.168.0.1"))),
            ("http://012.1/", Err(p("10.0.0.1"))),
            // link-local (cloud metadata)
            (
                "http://169.254.169.254/latest/meta-data/",
                Err(p("169.254.169.254")),
            ),
            ("http://0xa9fea9fe/", Err(p("169.254.169.254"))),
            // other non-public IPv4
            ("http://100.64.0.1/", Err(p("100.64.0.1"))),
            ("http://100.127.255.254/", Err(p("100.127.255.254"))),
            ("http://192.0.0.8/", Err(p("192.0.0.8"))),
            ("http://198.18.0.1/", Err(p("198.18.0.1"))),
            ("http://198.19.255.1/", Err(p("198.19.255.1"))),
            ("http://224.0.0.1/", Err(p("224.0.0.1"))),
            ("http://239.255.255.250/", Err(p("239.255.255.250"))),
            ("http://240.0.0.1/", Err(p("240.0.0.1"))),
            ("http://255.255.255.255/", Err(p("255.255.255.255"))),
            ("http://0.0.0.0/", Err(p("0.0.0.0"))),
            ("http://0/", Err(p("0.0.0.0"))),
            ("http://192.0.2.10/", Err(p("192.0.2.10"))),
            // IPv6
            ("http://[::1]/", Err(p("::1"))),
            ("http://[0:0:0:0:0:0:0:1]:8080/", Err(p("::1"))),
            ("http://[::]/", Err(p("::"))),
            ("http://[fc00::1]/", Err(p("fc00::1"))),
            ("http://[fd12:3456::1]/", Err(p("fd12:3456::1"))),
            ("http://[fe80::1]/", Err(p("fe80::1"))),
            ("http://[ff02::1]/", Err(p("ff02::1"))),
            ("http://[2001:db8::1]/", Err(p("2001:db8::1"))),
            ("http://[::ffff:127.0.0.1]/", Err(p("::ffff:127.0.0.1"))),
            ("http://[::ffff:7f00:1]/", Err(p("::ffff:127.0.0.1"))),
            ("http://[::ffff:10.0.0.1]/", Err(p("::ffff:10.0.0.1"))),
            (
                "http://[::ffff:169.254.169.254]/",
                Err(p("::ffff:169.254.169.254")),
            ),
            ("http://[::127.0.0.1]/", Err(p("::7f00:1"))),
            ("http://[::192.168.1.1]/", Err(p("::c0a8:101"))),
            ("http://[64:ff9b::10.0.0.1]/", Err(p("64:ff9b::a00:1"))),
            ("http://[2002:c0a8:101::1]/", Err(p("2002:c0a8:101::1"))),
            // public literals and names pass
            (
                "http://93.184.216.34/live.m3u8",
                Ok("http://93.184.216.34/live.m3u8"),
            ),
            (
                "https://[2606:2800:220:1::1]/x.mpd",
                Ok("https://[2606:2800:220:1::1]/x.mpd"),
            ),
            (
                "http://[::ffff:93.184.216.34]/",
                Ok("http://[::ffff:5db8:d822]/"),
            ),
            (
                "http://[64:ff9b::93.184.216.34]/",
                Ok("http://[64:ff9b::5db8:d822]/"),
            ),
            (
                "https://example.com/live/master.m3u8",
                Ok("https://example.com/live/master.m3u8"),
            ),
            ("HTTPS://EXAMPLE.COM./x", Ok("https://example.com./x")),
            ("http://dual.example/", Ok("http://dual.example/")),
            ("http://1572395042/", Ok("http://93.184.216.34/")),
        ]
    }

    #[tokio::test]
    async fn registration_table_gives_exact_messages() {
        let g = guard();
        let cases = cases();
        assert!(cases.len() >= 45, "{} cases", cases.len());
        let mut failures = vec![];
        for (input, want) in cases {
            let got = g
                .check_url(input)
                .await
                .map(|c| c.url.to_string())
                .map_err(|e| e.to_string());
            let want = want.map(str::to_owned);
            if got != want {
                failures.push(format!("{input:?}: got {got:?}, want {want:?}"));
            }
        }
        assert!(failures.is_empty(), "\n{}", failures.join("\n"));
    }

    #[tokio::test]
    async fn allow_list_admits_loopback_networks() {
        let g = guard_allowing(&["127.0.0.0/8"]);
        for input in [
            "http://127.0.0.1:8080/x",
            "http://127.1/",
            "http://0x7f.0.0.2/",
            "http://[::ffff:127.0.0.3]/",
        ] {
            assert!(g.check_url(input).await.is_ok(), "{input}");
        }
        // The allow-list is per network: ::1 and 10/8 stay refused.
        assert_eq!(
            g.check_url("http://[::1]/").await.unwrap_err().to_string(),
            PRIV("::1")
        );
        assert_eq!(
            g.check_url("http://10.0.0.1/")
                .await
                .unwrap_err()
                .to_string(),
            PRIV("10.0.0.1")
        );
        // localhost answers 127.0.0.1 and ::1: refused on ::1 unless both are allowed.
        assert_eq!(
            g.check_url("http://localhost/")
                .await
                .unwrap_err()
                .to_string(),
            PRIV("::1")
        );
        let both = guard_allowing(&["127.0.0.0/8", "::1/128"]);
        let checked = both.check_url("http://localhost:1234/").await.unwrap();
        assert_eq!(
            checked.addrs,
            vec![
                "127.0.0.1".parse::<IpAddr>().unwrap(),
                "::1".parse().unwrap()
            ]
        );
        // Order still holds with an allow-list: scheme before address.
        assert_eq!(
            g.check_url("ftp://127.0.0.1/").await.unwrap_err(),
            GuardError::BadScheme
        );
    }

    #[tokio::test]
    async fn checked_url_carries_resolved_addresses() {
        let checked = guard()
            .check_url("http://dual.example/live.m3u8")
            .await
            .unwrap();
        assert_eq!(checked.addrs.len(), 2);
        assert_eq!(checked.addrs[0], PUBLIC_V4.parse::<IpAddr>().unwrap());
    }

    #[test]
    fn is_allowed_ip_covers_connect_time_addresses() {
        let g = guard_allowing(&["10.20.0.0/16"]);
        let cases = [
            ("8.8.8.8", true),
            ("1.1.1.1", true),
            ("2606:4700:4700::1111", true),
            ("10.20.3.4", true),
            ("::ffff:10.20.3.4", true),
            ("10.21.0.1", false),
            ("127.0.0.1", false),
            ("172.15.255.255", true),
            ("172.32.0.0", true),
            ("100.63.255.255", true),
            ("100.128.0.0", true),
            ("192.0.1.1", true),
            ("198.17.255.255", true),
            ("198.20.0.0", true),
            ("223.255.255.255", true),
            ("fe80::1", false),
            ("febf::1", false),
            ("fec0::1", false),
            ("ff00::", false),
            ("2001::1", false),
            ("::2", false),
            ("::8.8.8.8", true),
            ("::ffff:0:7f00:1", false),
            ("64:ff9b:1::1", false),
            ("100::1", false),
        ];
        for (ip, want) in cases {
            assert_eq!(g.is_allowed_ip(ip.parse().unwrap()), want, "{ip}");
        }
    }

    #[test]
    fn check_target_checks_literals_and_scheme_only() {
        let g = guard();
        let u = |s: &str| Url::parse(s).unwrap();
        assert_eq!(
            g.check_target(&u("http://10.0.0.1/")),
            Err(GuardError::PrivateAddress("10.0.0.1".parse().unwrap()))
        );
        assert_eq!(
            g.check_target(&u("file:///etc/passwd")),
            Err(GuardError::BadScheme)
        );
        assert_eq!(g.check_target(&u("http://internal.example/")), Ok(()));
        assert_eq!(g.check_target(&u("http://93.184.216.34/")), Ok(()));
    }

    #[test]
    fn location_parsing() {
        let base = Url::parse("http://example.com/a/b/master.m3u8").unwrap();
        assert_eq!(
            resolve_location(&base, "v1.m3u8").unwrap().as_str(),
            "http://example.com/a/b/v1.m3u8"
        );
        assert_eq!(
            resolve_location(&base, "/root.m3u8").unwrap().as_str(),
            "http://example.com/root.m3u8"
        );
        assert_eq!(
            resolve_location(&base, "//other.example/x")
                .unwrap()
                .as_str(),
            "http://other.example/x"
        );
        for bad in [
            "http://[::1/",
            "http://exa mple.com/",
            "http://300.1.1.1/",
            "http://",
        ] {
            assert_eq!(
                resolve_location(&base, bad).unwrap_err().to_string(),
                "URL could not be parsed",
                "{bad}"
            );
        }
    }

    #[tokio::test]
    async fn guarded_resolver_refuses_private_answers() {
        use reqwest::dns::Resolve;
        let r = GuardedResolver::new(Arc::new(guard()));
        let ok: Vec<SocketAddr> = r
            .resolve("dual.example".parse().unwrap())
            .await
            .unwrap()
            .collect();
        assert_eq!(ok.len(), 2);
        for (name, want) in [
            (
                "mixed.example",
                GuardError::PrivateAddress("192.168.1.7".parse().unwrap()),
            ),
            (
                "localhost",
                GuardError::PrivateAddress("127.0.0.1".parse().unwrap()),
            ),
            ("nope.example", GuardError::DidNotResolve),
        ] {
            let err = match r.resolve(name.parse().unwrap()).await {
                Ok(_) => panic!("{name} resolved"),
                Err(e) => e,
            };
            assert_eq!(err.downcast_ref::<GuardError>(), Some(&want), "{name}");
        }
    }

    /// The hickory path without network: a name server on a closed local port
    /// gives a resolver error, reported as "did not resolve".
    #[tokio::test]
    async fn hickory_failure_is_did_not_resolve() {
        use hickory_resolver::config::{ConnectionConfig, NameServerConfig, ResolverConfig};
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = sock.local_addr().unwrap().port();
        drop(sock);
        let mut server = NameServerConfig::udp("127.0.0.1".parse().unwrap());
        let mut udp = ConnectionConfig::udp();
        udp.port = port;
        server.connections = vec![udp];
        let cfg = ResolverConfig::from_name_servers(vec![server]);
        let mut b = TokioResolver::builder_with_config(cfg, TokioRuntimeProvider::default());
        b.options_mut().timeout = Duration::from_millis(200);
        b.options_mut().attempts = 1;
        b.options_mut().use_hosts_file = hickory_resolver::config::ResolveHosts::Never;
        let g = Guard::new(vec![], b.build().unwrap());
        assert_eq!(
            g.check_url("http://streams.example.org/x.m3u8")
                .await
                .unwrap_err(),
            GuardError::DidNotResolve
        );
    }

    #[tokio::test]
    async fn system_resolver_builds_and_refuses_localhost_without_dns() {
        let g = Guard::with_system_resolver(vec![]).unwrap();
        assert_eq!(
            g.check_url("http://localhost./")
                .await
                .unwrap_err()
                .to_string(),
            PRIV("127.0.0.1")
        );
        assert_eq!(
            g.check_url("http://x.invalid/").await.unwrap_err(),
            GuardError::DidNotResolve
        );
    }
}
