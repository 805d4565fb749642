//! Service configuration: one struct read from flags and the same-named environment
//! variables (decisions.md §3). Parsed once in `main`; nothing else reads the environment.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use ipnet::IpNet;

/// Command line of the `streamwatch` binary.
#[derive(Debug, Parser)]
#[command(
    name = "streamwatch",
    version,
    about = "Stream monitoring and player telemetry"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP service, the prober and the telemetry writer.
    Serve(Box<Config>),
    /// Manage accounts (e.g. with `STREAMWATCH_SIGNUP=closed`).
    #[command(subcommand)]
    Users(UsersCommand),
}

/// `streamwatch users …`.
#[derive(Debug, Subcommand)]
pub enum UsersCommand {
    /// Create a user and print a one-time password for them.
    Add(Box<AddUser>),
}

/// `streamwatch users add --email … --name …`: only the settings that find the accounts'
/// store (the data dir or `DATABASE_URL`), not every flag of `serve`.
#[derive(Debug, Args)]
pub struct AddUser {
    /// E-mail address the user signs in with.
    #[arg(long)]
    pub email: String,
    /// Display name (1–120 characters).
    #[arg(long)]
    pub name: String,
    /// The server's data dir (holds the embedded accounts store).
    #[arg(long, env = "STREAMWATCH_DATA_DIR", default_value = "./data")]
    pub data_dir: PathBuf,
    /// The server's `postgres://…` or `sqlite://…` store; empty means the data dir's SQLite file.
    #[arg(long, env = "DATABASE_URL", value_parser = parse_database_url)]
    pub database_url: Option<DatabaseUrl>,
    /// Log format: `text` or `json`.
    #[arg(long, env = "STREAMWATCH_LOG_FORMAT", default_value = "text", value_parser = parse_log_format)]
    pub log_format: LogFormat,
}

/// Everything the service needs to start. Every field has a default so `streamwatch serve`
/// alone runs on the embedded stores.
#[derive(Clone, Args)]
pub struct Config {
    /// HTTP listen address.
    #[arg(long, env = "STREAMWATCH_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// Directory for the embedded databases and the generated cookie secret.
    #[arg(long, env = "STREAMWATCH_DATA_DIR", default_value = "./data")]
    pub data_dir: PathBuf,

    /// `postgres://…` or `sqlite://…`; empty means the embedded SQLite file in the data dir.
    #[arg(long, env = "DATABASE_URL", value_parser = parse_database_url)]
    pub database_url: Option<DatabaseUrl>,

    /// ClickHouse HTTP endpoint for telemetry, or several comma-separated ones serving the
    /// same data (replicas, nodes of one cluster), with failover between them; empty means
    /// the embedded SQLite telemetry store.
    #[arg(long, env = "CLICKHOUSE_URL", value_parser = parse_http_urls)]
    pub clickhouse_url: Option<String>,

    /// Name of a cluster in the ClickHouse servers' `remote_servers`: the telemetry tables
    /// are then replicated and distributed over it (scale.md §2). Empty: one server.
    #[arg(long, env = "CLICKHOUSE_CLUSTER", default_value = "", value_parser = parse_cluster)]
    pub clickhouse_cluster: String,

    /// ClickHouse database for telemetry tables (created if missing).
    #[arg(long, env = "CLICKHOUSE_DATABASE", default_value = "streamwatch")]
    pub clickhouse_database: String,

    /// ClickHouse user.
    #[arg(long, env = "CLICKHOUSE_USER", default_value = "default")]
    pub clickhouse_user: String,

    /// ClickHouse password.
    #[arg(
        long,
        env = "CLICKHOUSE_PASSWORD",
        default_value = "",
        hide_env_values = true
    )]
    pub clickhouse_password: String,

    /// `on`: a telemetry batch is acknowledged once it is fsync'd to a local spool, which a
    /// background drainer empties into ClickHouse (scale.md §3); `off`: once ClickHouse
    /// stored it. Default `on` with `CLICKHOUSE_URL`; the embedded store ignores it.
    #[arg(long, env = "STREAMWATCH_SPOOL", value_parser = parse_spool)]
    pub spool: Option<SpoolSetting>,

    /// The spool's directory (one process per directory); default `<data-dir>/spool`.
    #[arg(long, env = "STREAMWATCH_SPOOL_DIR")]
    pub spool_dir: Option<PathBuf>,

    /// Bytes the spool may hold on disk (`KiB`, `MiB`, `GiB` suffixes); past it telemetry is
    /// answered 500 until the drainer makes room.
    #[arg(long, env = "STREAMWATCH_SPOOL_MAX", default_value = "4GiB", value_parser = parse_size)]
    pub spool_max: u64,

    /// Secret that signs session cookies; generated once into the data dir when unset.
    #[arg(long, env = "STREAMWATCH_SECRET", hide_env_values = true, value_parser = parse_secret)]
    pub secret: Option<String>,

    /// Comma-separated CIDRs the SSRF guard lets probes through to (on-prem origins, tests).
    #[arg(long, env = "STREAMWATCH_ALLOW_PRIVATE", default_value = "", value_parser = parse_cidrs)]
    pub allow_private: CidrList,

    /// Comma-separated CIDRs the SSRF guard lets alert channels through to (an on-prem
    /// receiver); separate from probes' list so opening a network to probes does not open
    /// it to every user's webhooks (decisions.md §14).
    #[arg(long, env = "STREAMWATCH_ALERTS_ALLOW_PRIVATE", default_value = "", value_parser = parse_cidrs)]
    pub alerts_allow_private: CidrList,

    /// The address people reach the service at (e.g. `https://watch.example.com`). With
    /// `https://`, the session cookie carries `Secure`; alert messages link to a stream's page
    /// under it. Optional.
    #[arg(long, env = "STREAMWATCH_PUBLIC_URL", value_parser = parse_public_url)]
    pub public_url: Option<PublicUrl>,

    /// Time between two probes of one stream (e.g. `30s`, `1m`).
    #[arg(long, env = "STREAMWATCH_PROBE_INTERVAL", default_value = "30s", value_parser = parse_duration)]
    pub probe_interval: Duration,

    /// Upper bound of one whole probe (all redirects, the manifest and one variant).
    #[arg(long, env = "STREAMWATCH_PROBE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub probe_timeout: Duration,

    /// A successful probe slower than this many milliseconds is `degraded / slow response`.
    #[arg(long, env = "STREAMWATCH_SLOW_MS", default_value = "2000", value_parser = parse_slow_ms)]
    pub slow_ms: u64,

    /// Sign-in/sign-up attempts per client IP, as `<count>/<window>` (e.g. `10/60s`), or `off`.
    #[arg(long, env = "STREAMWATCH_AUTH_RATE_LIMIT", default_value = "10/60s", value_parser = parse_rate_limit)]
    pub auth_rate_limit: RateLimit,

    /// `invite`: the first account (the owner) signs up freely, then only with an invitation
    /// the owner minted on /app/team; `open`: anyone may sign up; `closed`: sign-up is refused
    /// and operators add users with `streamwatch users add`.
    #[arg(long, env = "STREAMWATCH_SIGNUP", default_value = "invite", value_parser = parse_signup)]
    pub signup: Signup,

    /// Streams one user may register.
    #[arg(long, env = "STREAMWATCH_MAX_STREAMS_PER_USER", default_value = "1000", value_parser = parse_positive)]
    pub max_streams_per_user: u32,

    /// Requests per second the prober sends to one origin host at most, whatever the number
    /// and health of the streams on it.
    #[arg(long, env = "STREAMWATCH_PROBE_HOST_RATE", default_value = "50", value_parser = parse_positive)]
    pub probe_host_rate: u32,

    /// HTTP connections open at once; past that, new ones wait in the listen backlog.
    #[arg(long, env = "STREAMWATCH_MAX_CONNECTIONS", default_value = "10000", value_parser = parse_positive)]
    pub max_connections: u32,

    /// How often the QoE rollups take in new telemetry (an acknowledged batch shows in the QoE
    /// routes within this much).
    #[arg(long, env = "STREAMWATCH_QOE_REFRESH", default_value = "10s", value_parser = parse_duration)]
    pub qoe_refresh: Duration,

    /// Address of the Prometheus metrics listener (`GET /metrics`); empty disables it.
    #[arg(long, env = "STREAMWATCH_METRICS_LISTEN", default_value = "127.0.0.1:9464", value_parser = parse_optional_addr)]
    pub metrics_listen: OptionalAddr,

    /// Log format: `text` (human lines) or `json` (one JSON object per line).
    #[arg(long, env = "STREAMWATCH_LOG_FORMAT", default_value = "text", value_parser = parse_log_format)]
    pub log_format: LogFormat,

    /// Header, idle and body timeouts of HTTP connections (not configurable: decisions.md §10).
    #[arg(skip)]
    pub http_limits: HttpLimits,

    /// How often QoE alert rules and reminders are evaluated (alerts.md: at least every 30 s).
    /// Not a flag; tests shorten it.
    #[arg(skip)]
    pub alert_timing: AlertTiming,
}

impl fmt::Debug for Config {
    // Secrets and credentials never reach logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("listen", &self.listen)
            .field("data_dir", &self.data_dir)
            .field("database_url", &self.database_url)
            .field("clickhouse_url", &self.clickhouse_url)
            .field("clickhouse_cluster", &self.clickhouse_cluster)
            .field("clickhouse_database", &self.clickhouse_database)
            .field("clickhouse_user", &self.clickhouse_user)
            .field("clickhouse_password", &"<redacted>")
            .field("spool", &self.spool)
            .field("spool_dir", &self.spool_dir)
            .field("spool_max", &self.spool_max)
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .field("allow_private", &self.allow_private)
            .field("alerts_allow_private", &self.alerts_allow_private)
            .field("public_url", &self.public_url)
            .field("probe_interval", &self.probe_interval)
            .field("probe_timeout", &self.probe_timeout)
            .field("slow_ms", &self.slow_ms)
            .field("auth_rate_limit", &self.auth_rate_limit)
            .field("signup", &self.signup)
            .field("max_streams_per_user", &self.max_streams_per_user)
            .field("probe_host_rate", &self.probe_host_rate)
            .field("max_connections", &self.max_connections)
            .field("qoe_refresh", &self.qoe_refresh)
            .field("metrics_listen", &self.metrics_listen)
            .field("log_format", &self.log_format)
            .field("http_limits", &self.http_limits)
            .field("alert_timing", &self.alert_timing)
            .finish()
    }
}

impl Config {
    /// The defaults of every setting, with the data dir given, ignoring the environment:
    /// tests and benchmarks start from this and change what they need, whatever variables
    /// the shell that runs them has set.
    pub fn defaults(data_dir: impl Into<PathBuf>) -> Self {
        let mut c = parse_args(["serve"]).expect("the defaults parse");
        c.data_dir = data_dir.into();
        c
    }

    /// Whether telemetry goes through the spool: ClickHouse is configured and
    /// `STREAMWATCH_SPOOL` is not `off`.
    pub fn spool_on(&self) -> bool {
        self.clickhouse_url.is_some() && self.spool != Some(SpoolSetting::Off)
    }

    /// `STREAMWATCH_SPOOL_DIR`, or `<data-dir>/spool`.
    pub fn spool_dir(&self) -> PathBuf {
        self.spool_dir
            .clone()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or_else(|| self.data_dir.join("spool"))
    }
}

/// `streamwatch <args>` parsed from flags alone, every env binding removed.
fn parse_args<'a>(args: impl IntoIterator<Item = &'a str>) -> Result<Config, clap::Error> {
    let cmd = Cli::command().mut_subcommand("serve", |s| s.mut_args(|a| a.env(None)));
    let matches = cmd.try_get_matches_from(std::iter::once("streamwatch").chain(args))?;
    match Cli::from_arg_matches(&matches)?.command {
        Command::Serve(c) => Ok(*c),
        Command::Users(_) => Err(clap::Error::new(clap::error::ErrorKind::InvalidSubcommand)),
    }
}

/// A listen address that may be switched off (an empty value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptionalAddr(pub Option<SocketAddr>);

fn parse_optional_addr(s: &str) -> Result<OptionalAddr, String> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(OptionalAddr(None));
    }
    s.parse()
        .map(|a| OptionalAddr(Some(a)))
        .map_err(|_| format!("`{s}` is not an address (e.g. 127.0.0.1:9464), or empty to disable"))
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

fn parse_log_format(s: &str) -> Result<LogFormat, String> {
    match s.trim() {
        "text" => Ok(LogFormat::Text),
        "json" => Ok(LogFormat::Json),
        _ => Err(format!("`{s}` is not `text` or `json`")),
    }
}

/// `STREAMWATCH_SPOOL`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpoolSetting {
    On,
    Off,
}

fn parse_spool(s: &str) -> Result<SpoolSetting, String> {
    match s.trim() {
        "on" => Ok(SpoolSetting::On),
        "off" => Ok(SpoolSetting::Off),
        _ => Err(format!("`{s}` is not `on` or `off`")),
    }
}

/// A size in bytes: a whole number, optionally with `KiB`, `MiB` or `GiB`.
fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let err = || format!("`{s}` is not a size (e.g. 4GiB, 512MiB, 65536)");
    let (digits, unit) = match t.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => t.split_at(i),
        None => (t, ""),
    };
    let shift = match unit.trim() {
        "" => 0,
        "KiB" => 10,
        "MiB" => 20,
        "GiB" => 30,
        _ => return Err(err()),
    };
    let n: u64 = digits.parse().map_err(|_| err())?;
    match n.checked_mul(1 << shift) {
        Some(0) => Err("must be greater than zero".into()),
        Some(bytes) => Ok(bytes),
        None => Err(err()),
    }
}

/// Who may create an account (decisions.md §15).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signup {
    /// The first account freely, then only with an invitation.
    Invite,
    /// Anyone.
    Open,
    /// Nobody: operators run `streamwatch users add`.
    Closed,
}

fn parse_signup(s: &str) -> Result<Signup, String> {
    match s.trim() {
        "invite" => Ok(Signup::Invite),
        "open" => Ok(Signup::Open),
        "closed" => Ok(Signup::Closed),
        _ => Err(format!("`{s}` is not `invite`, `open` or `closed`")),
    }
}

fn parse_positive(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(0) | Err(_) => Err(format!("`{s}` is not a positive whole number")),
        Ok(n) => Ok(n),
    }
}

/// HTTP connection limits (decisions.md §10, §14). Fixed by the decision, so not flags; tests
/// shorten them to observe them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HttpLimits {
    /// Request headers must be complete this long after their first byte.
    pub header: Duration,
    /// An idle keep-alive connection is closed after this long.
    pub idle: Duration,
    /// A request body that sends no byte for this long is cut off.
    pub body: Duration,
    /// A response the client takes no byte of for this long ends its connection.
    pub write: Duration,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            header: Duration::from_secs(10),
            idle: Duration::from_secs(60),
            body: Duration::from_secs(30),
            write: Duration::from_secs(30),
        }
    }
}

/// `STREAMWATCH_PUBLIC_URL`: an absolute http(s) URL, kept without a trailing `/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublicUrl(String);

impl PublicUrl {
    /// Reads `STREAMWATCH_PUBLIC_URL`'s value.
    pub fn parse(s: &str) -> Result<Self, String> {
        parse_public_url(s)
    }

    /// The URL without a trailing `/` (`https://watch.example.com`, or with a path prefix).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True for `https://…`: the session cookie is then `Secure`.
    pub fn is_https(&self) -> bool {
        self.0.starts_with("https://")
    }
}

fn parse_public_url(s: &str) -> Result<PublicUrl, String> {
    let s = s.trim();
    match url::Url::parse(s) {
        Ok(u)
            if matches!(u.scheme(), "http" | "https")
                && u.host_str().is_some()
                && u.query().is_none()
                && u.fragment().is_none() =>
        {
            Ok(PublicUrl(u.as_str().trim_end_matches('/').to_owned()))
        }
        _ => Err(format!(
            "`{s}` is not an http(s) URL without query (e.g. https://watch.example.com)"
        )),
    }
}

/// Timing of the alerts' background work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AlertTiming {
    /// Between two evaluations of the QoE rules and the reminders.
    pub evaluate_every: Duration,
    /// Between two looks at the outbox for deliveries queued elsewhere or come due.
    pub sender_poll: Duration,
    /// Timeout of one notification request (alerts.md §3: 10 s).
    pub send_timeout: Duration,
}

impl Default for AlertTiming {
    fn default() -> Self {
        Self {
            evaluate_every: Duration::from_secs(30),
            sender_poll: Duration::from_secs(1),
            send_timeout: Duration::from_secs(10),
        }
    }
}

/// One line for a configuration error, naming the setting the way the operator gave it: the
/// flag when it is on the command line, else the environment variable; with the parser's reason
/// but never the value (it may be a secret). `None` for what is not a bad value (help, version,
/// an unknown flag): clap's own output explains those.
pub fn explain(e: &clap::Error, argv: &[String]) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if !matches!(
        e.kind(),
        ErrorKind::ValueValidation | ErrorKind::InvalidValue
    ) {
        return None;
    }
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    // `--probe-interval <PROBE_INTERVAL>` → `--probe-interval`.
    let flag = arg.split_whitespace().next()?.to_owned();
    let long = flag.trim_start_matches("--");
    let on_command_line = argv
        .iter()
        .any(|a| a == &flag || a.starts_with(&format!("{flag}=")));
    let env = Cli::command()
        .get_subcommands()
        .flat_map(|c| c.get_arguments().cloned().collect::<Vec<_>>())
        .find(|a| a.get_long() == Some(long))
        .and_then(|a| a.get_env().map(|v| v.to_string_lossy().into_owned()));
    let name = match env {
        Some(env) if !on_command_line => env,
        _ => flag,
    };
    let reason = std::error::Error::source(e)
        .map(ToString::to_string)
        .unwrap_or_else(|| "not a valid value".to_owned());
    Some(format!("invalid {name}: {reason}"))
}

/// Which relational engine holds accounts, streams, probes and keys.
#[derive(Clone)]
pub enum DatabaseUrl {
    Postgres(String),
    Sqlite(String),
}

impl fmt::Debug for DatabaseUrl {
    // The URL may carry a password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DatabaseUrl::Postgres(_) => f.write_str("Postgres(<redacted>)"),
            DatabaseUrl::Sqlite(u) => write!(f, "Sqlite({u})"),
        }
    }
}

fn parse_database_url(s: &str) -> Result<DatabaseUrl, String> {
    if s.starts_with("postgres://") || s.starts_with("postgresql://") {
        Ok(DatabaseUrl::Postgres(s.to_string()))
    } else if s.starts_with("sqlite:") {
        Ok(DatabaseUrl::Sqlite(s.to_string()))
    } else {
        Err("expected a postgres://… or sqlite://… URL".into())
    }
}

/// One or more http(s) URLs, comma-separated, each without a trailing `/`.
fn parse_http_urls(s: &str) -> Result<String, String> {
    let urls = s
        .split(',')
        .map(|u| parse_http_url(u.trim()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| "expected one or more comma-separated http(s):// URLs".to_owned())?;
    Ok(urls.join(","))
}

/// A cluster name as the servers' `remote_servers` spell it (an SQL identifier).
fn parse_cluster(s: &str) -> Result<String, String> {
    if s.is_empty() || s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        Ok(s.to_owned())
    } else {
        Err("expected a cluster name of [A-Za-z0-9_]".into())
    }
}

fn parse_http_url(s: &str) -> Result<String, String> {
    match url::Url::parse(s) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => {
            Ok(s.trim_end_matches('/').to_string())
        }
        _ => Err("expected an http(s):// URL".into()),
    }
}

fn parse_secret(s: &str) -> Result<String, String> {
    if s.len() < 32 {
        return Err("must be at least 32 characters".into());
    }
    Ok(s.to_string())
}

/// Parsed `STREAMWATCH_ALLOW_PRIVATE`.
#[derive(Clone, Debug, Default)]
pub struct CidrList(pub Vec<IpNet>);

fn parse_cidrs(s: &str) -> Result<CidrList, String> {
    let mut nets = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        // A bare address means that one host.
        let net = IpNet::from_str(part)
            .or_else(|_| part.parse::<std::net::IpAddr>().map(IpNet::from))
            .map_err(|_| format!("`{part}` is not a CIDR (e.g. 10.0.0.0/8)"))?;
        nets.push(net);
    }
    Ok(CidrList(nets))
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s.trim())
        .map_err(|_| format!("`{s}` is not a duration (e.g. 30s, 500ms, 2m)"))?;
    if d.is_zero() {
        return Err("must be greater than zero".into());
    }
    Ok(d)
}

fn parse_slow_ms(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(0) | Err(_) => Err(format!("`{s}` is not a positive number of milliseconds")),
        Ok(n) => Ok(n),
    }
}

/// Attempts allowed per client IP in a window, or no limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RateLimit {
    Off,
    PerWindow { max: u32, window: Duration },
}

fn parse_rate_limit(s: &str) -> Result<RateLimit, String> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("off") {
        return Ok(RateLimit::Off);
    }
    let err = || format!("`{s}` is not `<count>/<window>` (e.g. 10/60s) or `off`");
    let (max, window) = s.split_once('/').ok_or_else(err)?;
    let max: u32 = max.trim().parse().map_err(|_| err())?;
    let window = humantime::parse_duration(window.trim()).map_err(|_| err())?;
    if max == 0 || window.is_zero() {
        return Err(err());
    }
    Ok(RateLimit::PerWindow { max, window })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Config, String> {
        parse_args(std::iter::once("serve").chain(args.iter().copied())).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_match_the_documented_table() {
        let c = parse(&[]).expect("defaults parse");
        assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.data_dir, PathBuf::from("./data"));
        assert!(c.database_url.is_none());
        assert!(c.clickhouse_url.is_none());
        assert!(c.allow_private.0.is_empty());
        assert!(c.alerts_allow_private.0.is_empty());
        assert_eq!(c.public_url, None);
        assert_eq!(c.probe_interval, Duration::from_secs(30));
        assert_eq!(c.probe_timeout, Duration::from_secs(10));
        assert_eq!(c.slow_ms, 2000);
        assert_eq!(c.signup, Signup::Invite);
        assert_eq!(c.max_streams_per_user, 1000);
        assert_eq!(c.probe_host_rate, 50);
        assert_eq!(c.max_connections, 10_000);
        assert_eq!(
            c.metrics_listen.0,
            Some("127.0.0.1:9464".parse().expect("addr"))
        );
        assert_eq!(c.log_format, LogFormat::Text);
        assert_eq!(c.qoe_refresh, Duration::from_secs(10));
        assert_eq!(c.spool, None);
        assert_eq!(c.spool_max, 4 << 30);
        assert_eq!(c.spool_dir(), PathBuf::from("./data/spool"));
        assert!(!c.spool_on(), "the embedded store needs no spool");
        let ch = parse(&["--clickhouse-url", "http://127.0.0.1:8123"]).expect("parses");
        assert!(ch.spool_on(), "on by default with ClickHouse");
        let off = parse(&["--clickhouse-url", "http://ch:8123", "--spool", "off"]).expect("parses");
        assert!(!off.spool_on());
        let sized =
            parse(&["--spool-max", "64KiB", "--spool-dir", "/var/spool/sw"]).expect("parses");
        assert_eq!(sized.spool_max, 65536);
        assert_eq!(sized.spool_dir(), PathBuf::from("/var/spool/sw"));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert_eq!(
            parse(&["--metrics-listen", ""])
                .expect("parses")
                .metrics_listen
                .0,
            None,
            "empty disables"
        );
        assert_eq!(
            c.auth_rate_limit,
            RateLimit::PerWindow {
                max: 10,
                window: Duration::from_secs(60)
            }
        );
    }

    #[test]
    fn bad_settings_name_the_setting() {
        for (args, needle) in [
            (&["--probe-interval", "soon"][..], "--probe-interval"),
            (&["--slow-ms", "0"][..], "--slow-ms"),
            (&["--auth-rate-limit", "ten"][..], "--auth-rate-limit"),
            (&["--allow-private", "10.0.0.0/33"][..], "--allow-private"),
            (&["--database-url", "mysql://x"][..], "--database-url"),
            (&["--listen", "nowhere"][..], "--listen"),
            (&["--clickhouse-url", "ftp://x"][..], "--clickhouse-url"),
            (&["--signup", "maybe"][..], "--signup"),
            (
                &["--max-streams-per-user", "0"][..],
                "--max-streams-per-user",
            ),
            (&["--probe-host-rate=-1"][..], "--probe-host-rate"),
            (&["--max-connections", "many"][..], "--max-connections"),
            (&["--metrics-listen", "port 9"][..], "--metrics-listen"),
            (&["--log-format", "xml"][..], "--log-format"),
            (&["--spool", "yes"][..], "--spool"),
            (&["--spool-max", "4GB"][..], "--spool-max"),
            (&["--spool-max", "0"][..], "--spool-max"),
            (&["--spool-max", "99999999999GiB"][..], "--spool-max"),
            (
                &["--alerts-allow-private", "10.0.0.0/33"][..],
                "--alerts-allow-private",
            ),
            (&["--public-url", "watch.example.com"][..], "--public-url"),
            (
                &["--public-url", "ftp://watch.example.com"][..],
                "--public-url",
            ),
        ] {
            let err = parse(args).expect_err("must be refused");
            assert!(err.contains(needle), "{err}");
        }
    }

    #[test]
    fn parses_lists_and_limits() {
        let c = parse(&[
            "--allow-private",
            "127.0.0.0/8, ::1,10.1.2.3",
            "--auth-rate-limit",
            "off",
        ])
        .expect("parses");
        assert_eq!(c.allow_private.0.len(), 3);
        assert_eq!(c.auth_rate_limit, RateLimit::Off);
        let c = parse(&[
            "--alerts-allow-private",
            "10.0.0.0/8",
            "--public-url",
            "https://watch.example.com/",
        ])
        .expect("parses");
        assert_eq!(c.alerts_allow_private.0.len(), 1);
        assert!(c.allow_private.0.is_empty(), "probes' list is separate");
        let public = c.public_url.expect("public url");
        assert_eq!(public.as_str(), "https://watch.example.com");
        assert!(public.is_https());
        let plain = parse(&["--public-url", "http://10.1.2.3:8080/watch"]).expect("parses");
        assert!(!plain.public_url.expect("public url").is_https());
    }

    #[test]
    fn a_bad_value_names_the_flag_or_the_variable_it_came_from() {
        let err = parse_args(["serve", "--probe-interval", "soon"]).expect_err("refused");
        let argv = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            explain(
                &err,
                &argv(&["streamwatch", "serve", "--probe-interval", "soon"])
            )
            .as_deref(),
            Some("invalid --probe-interval: `soon` is not a duration (e.g. 30s, 500ms, 2m)")
        );
        // Not on the command line: it came from STREAMWATCH_PROBE_INTERVAL.
        assert_eq!(
            explain(&err, &argv(&["streamwatch", "serve"])).as_deref(),
            Some("invalid STREAMWATCH_PROBE_INTERVAL: `soon` is not a duration (e.g. 30s, 500ms, 2m)")
        );
        // A secret is never echoed.
        let secret = "s3cret-but-short";
        let err = parse_args(["serve", &format!("--secret={secret}")]).expect_err("refused");
        let line = explain(&err, &argv(&["streamwatch", "serve"])).expect("a line");
        assert_eq!(
            line,
            "invalid STREAMWATCH_SECRET: must be at least 32 characters"
        );
        assert!(!line.contains(secret));
        // --help is clap's to print.
        let help = parse_args(["serve", "--help"]).expect_err("help");
        assert_eq!(
            explain(&help, &argv(&["streamwatch", "serve", "--help"])),
            None
        );
    }

    #[test]
    fn defaults_ignore_the_environment() {
        // Set for this process only; the no-env parser must not see it.
        std::env::set_var("STREAMWATCH_SLOW_MS", "7");
        assert_eq!(Config::defaults("/tmp/x").slow_ms, 2000);
        std::env::remove_var("STREAMWATCH_SLOW_MS");
    }

    #[test]
    fn debug_redacts_secrets() {
        let c = parse(&[
            "--clickhouse-password",
            "hunter2",
            "--secret",
            &"s".repeat(40),
        ])
        .expect("parses");
        let shown = format!("{c:?}");
        assert!(!shown.contains("hunter2") && !shown.contains(&"s".repeat(40)));
    }
}
