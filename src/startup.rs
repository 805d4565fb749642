//! Start-up: opens the stores, spawns the background tasks, binds and serves until the
//! shutdown signal, then waits for the background tasks to finish their in-flight work.

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::watch;

use ingest::sink::clickhouse::MigrationError;
use ingest::{
    BatchWriter, ClickHouseConfig, ClickHouseSink, Connector, EventSink, SqliteSink,
    SupervisedSink, SupervisorTiming, WriterConfig,
};

use crate::accounts::{check_name, normalize_email, AccountError, Accounts, User};
use crate::config::{AddUser, Config, DatabaseUrl};
use crate::db::Db;
use crate::http::{self, AppState};
use crate::keys::cache::{self, KeyCache};
use crate::keys::Keys;
use crate::ratelimit::RateLimiter;
use crate::ssrf::Guard;
use crate::streams::Streams;
use crate::supervisor::Supervisor;

/// A bound, ready server: call [`Server::run`] to serve.
pub struct Server {
    listener: TcpListener,
    metrics_addr: Option<SocketAddr>,
    router: axum::Router,
    http_limits: crate::config::HttpLimits,
    max_connections: usize,
    background: Supervisor,
    writer: BatchWriter,
    /// The telemetry spool (ClickHouse, `STREAMWATCH_SPOOL=on`), closed once the drainer stopped.
    spool: Option<ingest::spool::Spool>,
    /// Held until the server has stopped: no second server on this data dir meanwhile.
    lock: crate::data_dir::DataDirLock,
    pub state: Arc<AppState>,
}

/// Which background work a server runs besides serving requests.
#[derive(Clone, Copy, Debug)]
pub struct Background {
    /// Probe the registered streams on their schedule and prune old probe rows. Off only for
    /// embedders and tests that write probe rows themselves and need none appearing on their own.
    pub prober: bool,
}

impl Default for Background {
    fn default() -> Self {
        Self { prober: true }
    }
}

impl Server {
    /// Opens the stores (migrating them), binds the listen address and spawns all background work.
    pub async fn build(config: Config) -> anyhow::Result<Self> {
        Self::build_with(config, Background::default()).await
    }

    /// [`Server::build`] with a choice of background work.
    pub async fn build_with(config: Config, background: Background) -> anyhow::Result<Self> {
        // First, so everything built below records into it. Without a metrics listener no
        // recorder is installed and every metric call is a no-op (nothing to pay for).
        let metrics = config.metrics_listen.0.map(|_| crate::metrics::install());
        crate::data_dir::create(&config.data_dir).with_context(|| {
            format!(
                "cannot create STREAMWATCH_DATA_DIR {}",
                config.data_dir.display()
            )
        })?;
        // Before anything writes into the dir (decisions.md §15).
        let lock = crate::data_dir::DataDirLock::acquire(&config.data_dir)?;
        // Next, so a spool directory in use stops start-up before anything else happens.
        let spooling = match config.spool_on() {
            true => Some(open_spool(&config).await?),
            false => None,
        };
        prepare_databases(&config)?;
        let secret = load_secret(&config)?;
        let db = Db::open_for_service(config.database_url.as_ref(), &config.data_dir)
            .await
            .context("cannot open DATABASE_URL")?;
        let guard = Guard::with_system_resolver(config.allow_private.0.clone())
            .context("cannot set up the DNS resolver")?;
        let (sink, connect, analytics, live, refused) = open_sink(&config).await?;
        // The databases are open: their WAL and shared-memory files exist now.
        crate::data_dir::tighten(&config.data_dir).with_context(|| {
            format!(
                "cannot set the permissions of STREAMWATCH_DATA_DIR {}",
                config.data_dir.display()
            )
        })?;
        tracing::info!(
            version = env!("CARGO_PKG_VERSION"),
            database = ?db.engine,
            telemetry = sink.name(),
            data_dir = %config.data_dir.display(),
            listen = %config.listen,
            "starting streamwatch"
        );
        let writer = BatchWriter::spawn(Arc::new(sink.clone()), WriterConfig::default());
        let supervised = sink.clone();
        let keys = Keys::new(db.clone());
        let (key_cache, touch_rx) = KeyCache::new(keys.clone(), db.engine);
        // Alert targets have their own allow-list (decisions.md §14).
        let alert_guard = Guard::with_system_resolver(config.alerts_allow_private.0.clone())
            .context("cannot set up the DNS resolver")?;
        let alerts = crate::alerts::Alerts::new(
            db.clone(),
            &secret,
            Arc::new(alert_guard),
            config.public_url.as_ref().map(|u| u.as_str().to_owned()),
        );
        let state = Arc::new(AppState {
            alerts: alerts.clone(),
            accounts: Accounts::new(db.clone(), &secret)?,
            invitations: crate::accounts::invitations::Invitations::new(db.clone()),
            streams: Streams::new(db.clone(), guard.clone(), config.max_streams_per_user),
            keys: keys.clone(),
            key_cache: key_cache.clone(),
            rate: RateLimiter::new(config.auth_rate_limit),
            signup: config.signup,
            secure_cookies: config.public_url.as_ref().is_some_and(|u| u.is_https()),
            slow_ms: config.slow_ms,
            intake: {
                let intake = crate::telemetry::Intake::new(
                    writer.handle(),
                    live.clone(),
                    Some(sink.clone()),
                    crate::telemetry::STORE_DEADLINE,
                );
                match &spooling {
                    Some(spooling) => intake.with_spool(spooling.clone()),
                    None => intake,
                }
            },
            sink,
            analytics: analytics.clone(),
            db: db.clone(),
        });

        // Every background task is spawned here, under supervision (decisions.md §11).
        let mut tasks = Supervisor::new();
        let stop = tasks.stop_signal();
        if !db.is_ready() {
            tasks.job("database migrator", db.clone().run_migrator(stop.clone()));
        }
        tasks.service(
            "telemetry store supervisor",
            ok(supervised.run(connect, stop.clone())),
        );
        if let Some(refused) = refused {
            tasks.service("telemetry store migrations", refusal_watch(refused));
        }
        tasks.service("telemetry writer", writer_watch(writer.failure()));
        if let Some(spooling) = &spooling {
            let drainer = crate::telemetry::drain::Drainer {
                spooling: spooling.clone(),
                writer: writer.handle(),
                store: state.sink.clone(),
                live: live.clone(),
            };
            tasks.service("spool drainer", drainer.run(stop.clone()));
        }
        tasks.service(
            "qoe refresher",
            ok(analytics::refresh::run(
                analytics::Refresher::new(analytics).with_live(live),
                config.qoe_refresh,
                stop.clone(),
            )),
        );
        // Tasks on the relational store start once it is migrated: until then each would log
        // the same failure every second (decisions.md §15); the migrator reports it alone.
        tasks.service(
            "alert sender",
            once_ready(
                &db,
                &stop,
                ok(crate::alerts::sender::run(
                    alerts.clone(),
                    crate::alerts::sender::SenderConfig {
                        poll: config.alert_timing.sender_poll,
                        timeout: config.alert_timing.send_timeout,
                        ..Default::default()
                    },
                    stop.clone(),
                )),
            ),
        );
        tasks.service(
            "alert delivery retention",
            once_ready(
                &db,
                &stop,
                ok(crate::alerts::retention::run(alerts.clone(), stop.clone())),
            ),
        );
        tasks.service(
            "alert evaluator",
            once_ready(
                &db,
                &stop,
                ok(crate::alerts::evaluate::run(
                    alerts,
                    state.analytics.clone(),
                    state.streams.clone(),
                    config.alert_timing.evaluate_every,
                    stop.clone(),
                )),
            ),
        );
        tasks.service(
            "api key lastUsedAt writer",
            once_ready(
                &db,
                &stop,
                ok(cache::run_touch_writer(keys, touch_rx, stop.clone())),
            ),
        );
        if let Some(DatabaseUrl::Postgres(url)) = &config.database_url {
            tasks.service(
                "api key cache listener",
                once_ready(
                    &db,
                    &stop,
                    ok(key_cache.run_listener(url.clone(), stop.clone())),
                ),
            );
        }
        if background.prober {
            let scheduler = crate::prober::scheduler(&config, db.clone(), guard.clone())
                .context("cannot start the prober")?;
            tasks.service(
                "prober",
                once_ready(&db, &stop, ok(scheduler.run(stop.clone()))),
            );
            tasks.service(
                "probe retention",
                once_ready(
                    &db,
                    &stop,
                    ok(crate::prober::retention::run(
                        crate::probes::Probes::new(db.clone()),
                        stop.clone(),
                    )),
                ),
            );
        }

        let listener = TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("cannot listen on STREAMWATCH_LISTEN {}", config.listen))?;
        let metrics_addr = match (config.metrics_listen.0, metrics) {
            (Some(addr), Some(metrics)) => {
                tasks.service(
                    "metrics sampler",
                    ok(crate::metrics::sample(
                        db.clone(),
                        metrics.clone(),
                        stop.clone(),
                    )),
                );
                let metrics_listener = TcpListener::bind(addr).await.with_context(|| {
                    format!("cannot listen on STREAMWATCH_METRICS_LISTEN {addr}")
                })?;
                let bound = metrics_listener.local_addr()?;
                // The API's header, idle and write limits, and a small connection cap: a
                // scraper needs one connection, an attacker on the network gets 64.
                tasks.service(
                    "metrics listener",
                    crate::http::metrics::serve(
                        metrics_listener,
                        metrics,
                        config.http_limits,
                        stop.clone(),
                    ),
                );
                tracing::info!(addr = %bound, "metrics listening");
                Some(bound)
            }
            _ => None,
        };
        let router = http::router(state.clone());
        let max_connections = http::serve::fit_connection_cap(
            usize::try_from(config.max_connections).unwrap_or(usize::MAX),
        );
        Ok(Self {
            listener,
            metrics_addr,
            router,
            http_limits: config.http_limits,
            max_connections,
            background: tasks,
            writer,
            spool: spooling.map(|s| s.spool().clone()),
            lock,
            state,
        })
    }

    /// The bound address of the metrics listener, when enabled.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// Runs `fut` as one more supervised background service: if it ends before shutdown or
    /// panics, the server stops and [`Server::run`] returns the error.
    pub fn spawn_service<F>(&mut self, name: &'static str, fut: F)
    where
        F: Future<Output = Result<(), String>> + Send + 'static,
    {
        self.background.service(name, fut);
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("bound listener has an address")
    }

    /// Serves until `shutdown` resolves or a background task dies, then drains requests and
    /// background work. A death is returned as the error (the process exits non-zero).
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let Server {
            listener,
            metrics_addr: _,
            router,
            http_limits,
            max_connections,
            mut background,
            writer,
            spool,
            lock,
            state,
        } = self;
        let addr = listener.local_addr()?;
        tracing::info!(%addr, max_connections, "listening");
        tracing::info!(
            "open {} in a browser for the dashboard",
            dashboard_url(addr)
        );
        let mut death = None;
        let stop_serving = async {
            tokio::select! {
                () = shutdown => {}
                d = background.died() => death = Some(d),
            }
        };
        http::serve::serve(listener, router, http_limits, max_connections, stop_serving).await?;
        // Requests are done (each telemetry request waited for its write): stop the tasks, flush
        // whatever the writer still holds, and wait for every task to finish its work. The stop
        // signal goes first: dropping the state closes channels some tasks read, and a task that
        // ends then must not count as a death.
        background.signal_stop();
        drop(state);
        writer.shutdown().await;
        let later = background.stop().await;
        // What was not drained stays spooled for the next start.
        if let Some(spool) = spool {
            if let Err(e) = spool.close().await {
                tracing::warn!(error = %e, "cannot close the spool cleanly");
            }
        }
        drop(lock);
        match death.or_else(|| later.into_iter().next()) {
            Some(d) => Err(anyhow::anyhow!(d)),
            None => Ok(()),
        }
    }
}

/// The dashboard's address for a person at this machine: a wildcard listen address is
/// reached through loopback.
pub fn dashboard_url(addr: SocketAddr) -> String {
    let host = match addr.ip() {
        ip if ip.is_unspecified() && ip.is_ipv4() => "127.0.0.1".to_owned(),
        ip if ip.is_unspecified() => "[::1]".to_owned(),
        std::net::IpAddr::V6(v6) => format!("[{v6}]"),
        ip => ip.to_string(),
    };
    format!("http://{host}:{}/app", addr.port())
}

/// Runs `fut` once the relational store is reachable and migrated (at once when it is), or
/// not at all when the server stops first.
fn once_ready(
    db: &Db,
    stop: &watch::Receiver<bool>,
    fut: impl Future<Output = Result<(), String>> + Send + 'static,
) -> impl Future<Output = Result<(), String>> + Send + 'static {
    let (db, mut stop) = (db.clone(), stop.clone());
    async move {
        // The migrator flips one flag; a short poll of it costs nothing and needs no channel.
        while !db.is_ready() {
            tokio::select! {
                () = tokio::time::sleep(std::time::Duration::from_millis(100)) => {}
                _ = stop.wait_for(|s| *s) => return Ok(()),
            }
        }
        fut.await
    }
}

/// Adapts a task that cannot fail to the supervisor's signature.
async fn ok(fut: impl Future<Output = ()>) -> Result<(), String> {
    fut.await;
    Ok(())
}

/// The batch writer's death, as a supervised service: reports the writer's panic, and ends
/// quietly when the writer is shut down.
async fn writer_watch(mut failure: watch::Receiver<Option<String>>) -> Result<(), String> {
    match failure.wait_for(Option::is_some).await {
        Ok(message) => Err(format!("panicked: {}", message.clone().unwrap_or_default())),
        Err(_) => Ok(()),
    }
}

/// The telemetry store's refusal to migrate (a migration file changed since it was
/// applied), as a supervised service: the store's supervisor retries a failed connection,
/// but a changed file fails every attempt the same, so the process stops with its line.
async fn refusal_watch(mut refused: watch::Receiver<Option<String>>) -> Result<(), String> {
    match refused.wait_for(Option::is_some).await {
        Ok(line) => Err(line.clone().unwrap_or_default()),
        Err(_) => Ok(()),
    }
}

/// `streamwatch users add`: creates a user with a generated password in the configured store.
pub async fn add_user(add: AddUser) -> anyhow::Result<(User, String)> {
    let email = normalize_email(&add.email).context("--email is not a valid e-mail address")?;
    check_name(&add.name).map_err(|p| anyhow::anyhow!("--name {p}"))?;
    let mut config = Config::defaults(&add.data_dir);
    config.database_url = add.database_url;
    crate::data_dir::create(&config.data_dir).with_context(|| {
        format!(
            "cannot create STREAMWATCH_DATA_DIR {}",
            config.data_dir.display()
        )
    })?;
    if config.database_url.is_none() {
        crate::data_dir::create_databases(&config.data_dir, &[crate::data_dir::RELATIONAL_DB])
            .with_context(|| {
                format!(
                    "cannot create the database in STREAMWATCH_DATA_DIR {}",
                    config.data_dir.display()
                )
            })?;
    }
    let secret = load_secret(&config)?;
    let db = Db::connect(config.database_url.as_ref(), &config.data_dir)
        .await
        .context("cannot open DATABASE_URL")?;
    let accounts = Accounts::new(db, &secret)?;
    match accounts.add_user(&add.name, &email).await {
        Ok(created) => Ok(created),
        Err(AccountError::EmailTaken) => anyhow::bail!("a user with e-mail {email} already exists"),
        Err(e) => Err(e.into()),
    }
}

/// The telemetry store behind its circuit breaker, and how its supervisor (re)connects:
/// ClickHouse when configured (connected in the background, so the service starts while it
/// is down), else `<data-dir>/telemetry.db`, which must open now.
/// The telemetry store: its breaker, how to (re)connect it, its reads, and the live views
/// its refresher writes from memory.
type TelemetryStore = (
    SupervisedSink,
    Connector,
    analytics::Store,
    Option<Arc<analytics::LiveViews>>,
    // ClickHouse: set when its migrations refuse to run (a changed file).
    Option<watch::Receiver<Option<String>>>,
);

async fn open_sink(config: &Config) -> anyhow::Result<TelemetryStore> {
    let mut timing = SupervisorTiming::default();
    match &config.clickhouse_url {
        Some(url) => {
            let mut ch = ClickHouseConfig::new(url.clone(), config.clickhouse_database.clone());
            ch.cluster = Some(config.clickhouse_cluster.clone()).filter(|c| !c.is_empty());
            if ch.cluster.is_some() {
                // ON CLUSTER DDL waits for every node (up to the servers'
                // distributed_ddl_task_timeout, 180 s): a migration in progress is not cut.
                timing.connect_timeout = timing
                    .connect_timeout
                    .max(std::time::Duration::from_secs(200));
            }
            ch.user = Some(config.clickhouse_user.clone());
            ch.password = Some(config.clickhouse_password.clone()).filter(|p| !p.is_empty());
            // Two writes in flight, as ClickHouseSink prefers.
            let sink = SupervisedSink::new("clickhouse", 2, timing);
            // Reads share the breaker: they fail at once while the store is down.
            let store = analytics::Store::clickhouse(ch.client()).guarded_by(sink.clone());
            // Its records carry the config's writer id: reconnects keep it.
            let live = Arc::new(analytics::LiveViews::new(ch.writer));
            // Connecting creates the database if needed and applies the migrations; a
            // migration file changed since it was applied stops the process (refusal_watch).
            let (refuse, refused) = watch::channel(None);
            let refuse = Arc::new(refuse);
            let connect: Connector = Box::new(move || {
                let ch = ch.clone();
                let refuse = Arc::clone(&refuse);
                Box::pin(async move {
                    let opened = ClickHouseSink::open(&ch).await?;
                    match opened.migrate().await {
                        Ok(()) => {}
                        Err(MigrationError::Changed(c)) => {
                            refuse.send_replace(Some(c.to_string()));
                            return Err(MigrationError::Changed(c).into());
                        }
                        Err(MigrationError::Store(e)) => return Err(e),
                    }
                    let sink: Arc<dyn EventSink> = Arc::new(opened);
                    Ok(sink)
                })
            });
            Ok((sink, connect, store, Some(live), Some(refused)))
        }
        None => {
            let sqlite = SqliteSink::open_in_dir(&config.data_dir)
                .await
                .context("cannot open the telemetry store in STREAMWATCH_DATA_DIR")?;
            let opened: Arc<dyn EventSink> = Arc::new(sqlite.clone());
            let sink = SupervisedSink::ready(Arc::clone(&opened), timing);
            let store = analytics::Store::sqlite(sqlite).guarded_by(sink.clone());
            // The file is open; a reconnect is never needed, only pings.
            let connect: Connector = Box::new(move || {
                let opened = Arc::clone(&opened);
                Box::pin(async move { Ok(opened) })
            });
            // The store's one writer is this process: the live views need no writer id.
            let live = Arc::new(analytics::LiveViews::new(0));
            Ok((sink, connect, store, Some(live), None))
        }
    }
}

/// Opens the telemetry spool (scale.md §3): `STREAMWATCH_SPOOL_DIR` (0700, created if
/// missing), holding at most `STREAMWATCH_SPOOL_MAX`. What a previous process left is drained
/// by the drainer; damage is repaired and logged by the spool itself. A directory another
/// process holds stops start-up with one line naming the setting.
async fn open_spool(config: &Config) -> anyhow::Result<crate::telemetry::Spooling> {
    use ingest::spool::{Spool, SpoolError};
    let dir = config.spool_dir();
    if !dir.exists() {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder
            .create(&dir)
            .with_context(|| format!("cannot create STREAMWATCH_SPOOL_DIR {}", dir.display()))?;
    }
    match Spool::open(&dir, config.spool_max).await {
        Ok(spool) => {
            let stats = spool.stats();
            tracing::info!(
                dir = %dir.display(),
                batches = stats.records,
                bytes = stats.bytes,
                max_bytes = stats.max_bytes,
                "telemetry spool open"
            );
            Ok(crate::telemetry::Spooling::new(spool))
        }
        Err(SpoolError::Locked { holder, .. }) => Err(anyhow::anyhow!(
            "another streamwatch process is using STREAMWATCH_SPOOL_DIR {} ({} is locked{}): \
             stop it first, or give this one its own STREAMWATCH_SPOOL_DIR",
            dir.display(),
            ingest::spool::LOCK_FILE,
            holder.map(|p| format!(", by pid {p}")).unwrap_or_default()
        )),
        Err(e) => Err(anyhow::anyhow!(
            "cannot open STREAMWATCH_SPOOL_DIR {}: {e}",
            dir.display()
        )),
    }
}

/// Creates the embedded databases the data dir will hold (0600) before SQLite opens them, so
/// their WAL and shared-memory files are private too (decisions.md §14).
fn prepare_databases(config: &Config) -> anyhow::Result<()> {
    let mut databases = Vec::new();
    if config.database_url.is_none() {
        databases.push(crate::data_dir::RELATIONAL_DB);
    }
    if config.clickhouse_url.is_none() {
        databases.push(crate::data_dir::TELEMETRY_DB);
    }
    crate::data_dir::create_databases(&config.data_dir, &databases).with_context(|| {
        format!(
            "cannot create the databases in STREAMWATCH_DATA_DIR {}",
            config.data_dir.display()
        )
    })
}

/// The cookie-signing secret: configured, or generated once into `<data-dir>/secret`.
fn load_secret(config: &Config) -> anyhow::Result<Vec<u8>> {
    if let Some(s) = &config.secret {
        return Ok(s.as_bytes().to_vec());
    }
    let path = config.data_dir.join("secret");
    if let Ok(existing) = std::fs::read_to_string(&path) {
        let existing = existing.trim();
        if existing.len() >= 32 {
            return Ok(existing.as_bytes().to_vec());
        }
    }
    let fresh = crate::accounts::token::new_token();
    write_private(&path, &fresh)
        .with_context(|| format!("cannot write STREAMWATCH_SECRET to {}", path.display()))?;
    Ok(fresh.into_bytes())
}

fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    opts.open(path)?.write_all(contents.as_bytes())
}
