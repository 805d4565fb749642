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

    /// ClickHouse HTTP endpoint for telemetry; empty means the embedded SQLite telemetry store.
    #[arg(long, env = "CLICKHOUSE_URL", value_parser = parse_http_url)]
    pub clickhouse_url: Option<String>,

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

    /// Secret that signs session cookies; generated once into the data dir when unset.
    #[arg(long, env = "STREAMWATCH_SECRET", hide_env_values = true, value_parser = parse_secret)]
    pub secret: Option<String>,

    /// Comma-separated CIDRs the SSRF guard lets through (on-prem origins, tests).
    #[arg(long, env = "STREAMWATCH_ALLOW_PRIVATE", default_value = "", value_parser = parse_cidrs)]
    pub allow_private: CidrList,

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
}

impl fmt::Debug for Config {
    // Secrets and credentials never reach logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("listen", &self.listen)
            .field("data_dir", &self.data_dir)
            .field("database_url", &self.database_url)
            .field("clickhouse_url", &self.clickhouse_url)
            .field("clickhouse_database", &self.clickhouse_database)
            .field("clickhouse_user", &self.clickhouse_user)
            .field("clickhouse_password", &"<redacted>")
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .field("allow_private", &self.allow_private)
            .field("probe_interval", &self.probe_interval)
            .field("probe_timeout", &self.probe_timeout)
            .field("slow_ms", &self.slow_ms)
            .field("auth_rate_limit", &self.auth_rate_limit)
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
}

/// `streamwatch <args>` parsed from flags alone, every env binding removed.
fn parse_args<'a>(args: impl IntoIterator<Item = &'a str>) -> Result<Config, clap::Error> {
    let cmd = Cli::command().mut_subcommand("serve", |s| s.mut_args(|a| a.env(None)));
    let matches = cmd.try_get_matches_from(std::iter::once("streamwatch").chain(args))?;
    let Command::Serve(c) = Cli::from_arg_matches(&matches)?.command;
    Ok(*c)
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
        assert_eq!(c.probe_interval, Duration::from_secs(30));
        assert_eq!(c.probe_timeout, Duration::from_secs(10));
        assert_eq!(c.slow_ms, 2000);
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
