//! Start-up: opens the stores, spawns the background tasks, binds and serves until the
//! shutdown signal, then waits for the background tasks to finish their in-flight work.

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use ingest::{BatchWriter, ClickHouseConfig, ClickHouseSink, EventSink, SqliteSink, WriterConfig};

use crate::accounts::Accounts;
use crate::config::{Config, DatabaseUrl};
use crate::db::Db;
use crate::http::{self, AppState};
use crate::keys::cache::{self, KeyCache};
use crate::keys::Keys;
use crate::ratelimit::RateLimiter;
use crate::ssrf::Guard;
use crate::streams::Streams;

/// A bound, ready server: call [`Server::run`] to serve.
pub struct Server {
    listener: TcpListener,
    router: axum::Router,
    tasks: JoinSet<()>,
    writer: BatchWriter,
    stop_tasks: watch::Sender<bool>,
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
        std::fs::create_dir_all(&config.data_dir).with_context(|| {
            format!(
                "cannot create STREAMWATCH_DATA_DIR {}",
                config.data_dir.display()
            )
        })?;
        let secret = load_secret(&config)?;
        let db = Db::connect(config.database_url.as_ref(), &config.data_dir)
            .await
            .context("cannot open DATABASE_URL")?;
        let guard = Guard::with_system_resolver(config.allow_private.0.clone());
        let sink = open_sink(&config).await?;
        let writer = BatchWriter::spawn(sink.clone(), WriterConfig::default());
        let keys = Keys::new(db.clone());
        let (key_cache, touch_rx) = KeyCache::new(keys.clone(), db.engine);
        let state = Arc::new(AppState {
            accounts: Accounts::new(db.clone(), &secret)?,
            streams: Streams::new(db.clone(), guard.clone()),
            keys: keys.clone(),
            key_cache: key_cache.clone(),
            rate: RateLimiter::new(config.auth_rate_limit),
            slow_ms: config.slow_ms,
            writer: writer.handle(),
            sink,
            db: db.clone(),
        });

        let (stop_tasks, stop_rx) = watch::channel(false);
        let mut tasks = JoinSet::new();
        tasks.spawn(cache::run_touch_writer(keys, touch_rx, stop_rx.clone()));
        if let Some(DatabaseUrl::Postgres(url)) = &config.database_url {
            tasks.spawn(key_cache.run_listener(url.clone(), stop_rx.clone()));
        }
        if background.prober {
            let scheduler = crate::prober::scheduler(&config, db.clone(), guard.clone())
                .context("cannot start the prober")?;
            tasks.spawn(scheduler.run(stop_rx.clone()));
            tasks.spawn(crate::prober::retention::run(
                crate::probes::Probes::new(db.clone()),
                stop_rx.clone(),
            ));
        }

        let listener = TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("cannot listen on STREAMWATCH_LISTEN {}", config.listen))?;
        let router = http::router(state.clone());
        Ok(Self {
            listener,
            router,
            tasks,
            writer,
            stop_tasks,
            state,
        })
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("bound listener has an address")
    }

    /// Serves until `shutdown` resolves, then drains requests and background tasks.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let Server {
            listener,
            router,
            mut tasks,
            writer,
            stop_tasks,
            state,
        } = self;
        tracing::info!(addr = %listener.local_addr()?, "listening");
        axum::serve(
            listener,
            router.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(shutdown)
        .await?;
        // Requests are done (each telemetry request waited for its write): flush whatever
        // the writer still holds, then stop the background tasks and wait for them.
        drop(state);
        writer.shutdown().await;
        let _ = stop_tasks.send(true);
        while tasks.join_next().await.is_some() {}
        Ok(())
    }
}

/// The telemetry store: ClickHouse when configured, else `<data-dir>/telemetry.db`.
async fn open_sink(config: &Config) -> anyhow::Result<Arc<dyn EventSink>> {
    match &config.clickhouse_url {
        Some(url) => {
            let mut ch = ClickHouseConfig::new(url.clone(), config.clickhouse_database.clone());
            ch.user = Some(config.clickhouse_user.clone());
            ch.password = Some(config.clickhouse_password.clone()).filter(|p| !p.is_empty());
            // Connecting creates the database if needed and applies the migrations.
            let sink = ClickHouseSink::connect(&ch)
                .await
                .context("cannot open CLICKHOUSE_URL")?;
            Ok(Arc::new(sink))
        }
        None => {
            let sink = SqliteSink::open_in_dir(&config.data_dir)
                .await
                .context("cannot open the telemetry store in STREAMWATCH_DATA_DIR")?;
            Ok(Arc::new(sink))
        }
    }
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
