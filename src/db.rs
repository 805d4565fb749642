//! The relational store shared by accounts, streams, probes, keys and the waitlist: one
//! `sqlx::Any` pool on PostgreSQL or the embedded SQLite file, and the numbered migrations of
//! `migrations/<engine>/`, embedded in the binary and applied at start-up.
//!
//! Queries are written once for both engines: `$1`-style placeholders (SQLite accepts them),
//! timestamps as BIGINT epoch milliseconds, and `CAST(… AS BIGINT)` around aggregates.

use std::path::Path;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use sqlx::any::AnyPoolOptions;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{AnyPool, ConnectOptions, Executor};

use crate::config::DatabaseUrl;

/// Which engine a pool talks to; a few statements (leases, locks) differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    Postgres,
    Sqlite,
}

/// A pool plus the engine behind it.
#[derive(Clone, Debug)]
pub struct Db {
    pub pool: AnyPool,
    pub engine: Engine,
    /// True once the store answered and is migrated. PostgreSQL may be unreachable at
    /// start-up: the service then runs, unready, until [`Db::run_migrator`] gets through.
    ready: Arc<AtomicBool>,
    /// Why the store is not ready, for readiness and logs (empty once ready).
    cause: Arc<std::sync::Mutex<String>>,
    /// The connection URL, for a direct diagnostic connect (may hold a password: never shown).
    url: Arc<str>,
}

/// How long a request waits for a pooled connection: a store that cannot hand one out in
/// this time is treated as down (a 500 now is better than a request hanging).
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(2);

/// Failure of the relational store; always an internal error to clients.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct DbError(#[from] pub sqlx::Error);

impl DbError {
    /// The migration file changed since it was applied, if that is the failure: never
    /// retried, the start-up is refused.
    pub fn changed_migration(&self) -> Option<&migrate::Changed> {
        match &self.0 {
            sqlx::Error::Configuration(e) => e.downcast_ref::<migrate::Changed>(),
            _ => None,
        }
    }

    /// True when the failure is a unique-constraint violation (a lost insert race).
    pub fn is_unique_violation(&self) -> bool {
        matches!(&self.0, sqlx::Error::Database(e) if e.is_unique_violation())
    }
}

/// Any number held by the advisory lock that serialises migrations across instances.
const MIGRATION_LOCK_KEY: i64 = 0x5354_5257_4154_4348; // "STRWATCH"

impl Db {
    /// Opens the configured database (or `<data_dir>/streamwatch.db`) and migrates it; fails
    /// when the store cannot be reached or migrated now.
    pub async fn connect(url: Option<&DatabaseUrl>, data_dir: &Path) -> Result<Self, DbError> {
        let db = Self::open(url, data_dir).await?;
        db.migrate().await?;
        db.ready.store(true, Ordering::Release);
        Ok(db)
    }

    /// Opens the configured database for a server that must start even while PostgreSQL is
    /// unreachable (decisions.md §11): the pool connects lazily, one migration attempt is
    /// made now, and when it fails the store stays unready until [`Db::run_migrator`] gets
    /// through. SQLite (a local file) must open now: a failure there is a configuration error.
    pub async fn open_for_service(
        url: Option<&DatabaseUrl>,
        data_dir: &Path,
    ) -> Result<Self, DbError> {
        let db = Self::open(url, data_dir).await?;
        let host = url.map(host_of).unwrap_or_default();
        if db.engine == Engine::Postgres {
            if let Err((cause, how)) = db.create_if_missing().await {
                tracing::error!(%host, error = %cause, "database missing at start-up; serving unready and retrying; {how}");
                db.set_cause(cause);
                return Ok(db);
            }
            if let Err(cause) = db.diagnose().await {
                tracing::error!(%host, error = %cause, "database unreachable at start-up; serving unready and retrying");
                db.set_cause(cause);
                return Ok(db);
            }
        }
        match db.migrate().await {
            Ok(()) => db.ready.store(true, Ordering::Release),
            Err(e) if db.engine == Engine::Postgres && e.changed_migration().is_none() => {
                let cause = describe(&e);
                tracing::error!(%host, error = %cause, "database not migrated at start-up; serving unready and retrying");
                db.set_cause(cause);
            }
            Err(e) => return Err(e),
        }
        Ok(db)
    }

    /// A direct connection attempt (not through the pool, whose errors all read "timed out"),
    /// so the cause is known: refused, timed out, authentication.
    async fn diagnose(&self) -> Result<(), String> {
        use sqlx::Connection;
        match tokio::time::timeout(
            Duration::from_secs(3),
            sqlx::AnyConnection::connect(&self.url),
        )
        .await
        {
            Ok(Ok(conn)) => {
                let _ = conn.close().await;
                Ok(())
            }
            Ok(Err(e)) => Err(describe(&DbError(e))),
            Err(_) => Err("connection timed out (no answer within 3 s)".to_owned()),
        }
    }

    /// Creates the PostgreSQL database when it is missing and the role may; else the cause
    /// (for readiness) and how to create it (for the log).
    async fn create_if_missing(&self) -> Result<(), (String, String)> {
        use crate::create_database::{create_if_missing, Found};
        match create_if_missing(&self.url).await {
            Found::Nothing => Ok(()),
            Found::Created { database } => {
                tracing::info!(%database, "created the database");
                Ok(())
            }
            Found::Missing { cause, how } => Err((cause, how)),
        }
    }

    fn set_cause(&self, cause: String) {
        *self
            .cause
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = cause;
    }

    /// True once the store is reachable and migrated.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Retries the migrations with backoff until they are applied (the store came up), then
    /// returns. Ends early when `stop` turns true. One log line per backoff step while the
    /// backoff grows, then one per 10 steps while the cause stays the same (decisions.md §15).
    /// A migration file changed since it was applied is not retried: its one line is the error.
    pub async fn run_migrator(self, mut stop: watch::Receiver<bool>) -> Result<(), String> {
        let mut backoff = Duration::from_millis(500);
        let mut attempts = 1u32;
        let mut last_cause = String::new();
        let mut log = |attempts: u32, backoff: Duration, cause: &str, how: &str| {
            let grows = backoff < Duration::from_secs(5);
            if grows || attempts.is_multiple_of(10) || cause != last_cause {
                tracing::warn!(attempts, retry_in_ms = backoff.as_millis() as u64, error = %cause, "database not ready yet{how}");
            }
            last_cause = cause.to_owned();
        };
        while !self.is_ready() {
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                _ = stop.changed() => return Ok(()),
            }
            attempts += 1;
            backoff = (backoff * 2).min(Duration::from_secs(5));
            if self.engine == Engine::Postgres {
                if let Err((cause, how)) = self.create_if_missing().await {
                    log(attempts, backoff, &cause, &format!("; {how}"));
                    self.set_cause(cause);
                    continue;
                }
            }
            if let Err(cause) = self.diagnose().await {
                log(attempts, backoff, &cause, "");
                self.set_cause(cause);
                continue;
            }
            match self.migrate().await {
                Ok(()) => {
                    self.ready.store(true, Ordering::Release);
                    tracing::info!(attempts, "database reachable and migrated");
                }
                Err(e) => {
                    if let Some(changed) = e.changed_migration() {
                        return Err(changed.to_string());
                    }
                    let cause = describe(&e);
                    log(attempts, backoff, &cause, "");
                    self.set_cause(cause);
                }
            }
        }
        Ok(())
    }

    /// The same database through a pool of one connection, migrated and ready: for tests of
    /// statements that must work whatever that connection prepared before (PostgreSQL keeps
    /// the parameter types a connection first prepared a statement with).
    #[doc(hidden)]
    pub async fn with_one_connection(&self) -> Result<Db, DbError> {
        let pool = AnyPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(10))
            .after_connect(|conn, _| {
                Box::pin(async move {
                    if conn.backend_name() == "SQLite" {
                        conn.execute("PRAGMA foreign_keys = ON; PRAGMA busy_timeout = 10000;")
                            .await?;
                    }
                    Ok(())
                })
            })
            .connect(&self.url)
            .await?;
        Ok(Db {
            pool,
            engine: self.engine,
            ready: Arc::new(AtomicBool::new(true)),
            cause: Arc::default(),
            url: Arc::clone(&self.url),
        })
    }

    /// A round trip for readiness, bounded by [`ACQUIRE_TIMEOUT`].
    pub async fn ping(&self) -> Result<(), String> {
        if !self.is_ready() {
            let cause = self
                .cause
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
            return Err(if cause.is_empty() {
                "not reachable yet".to_owned()
            } else {
                cause
            });
        }
        match tokio::time::timeout(ACQUIRE_TIMEOUT, sqlx::query("SELECT 1").execute(&self.pool))
            .await
        {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(describe(&DbError(e))),
            Err(_) => Err("no answer within 2 s".to_owned()),
        }
    }

    /// Creates the pool (PostgreSQL: lazily, no connection yet).
    async fn open(url: Option<&DatabaseUrl>, data_dir: &Path) -> Result<Self, DbError> {
        sqlx::any::install_default_drivers();
        let (url, engine) = match url {
            Some(DatabaseUrl::Postgres(u)) => (u.clone(), Engine::Postgres),
            Some(DatabaseUrl::Sqlite(u)) => (u.clone(), Engine::Sqlite),
            None => {
                let file = data_dir.join("streamwatch.db");
                (format!("sqlite://{}", file.display()), Engine::Sqlite)
            }
        };
        let pool = match engine {
            Engine::Postgres => AnyPoolOptions::new()
                .max_connections(16)
                .acquire_timeout(ACQUIRE_TIMEOUT)
                .connect_lazy(&url)?,
            Engine::Sqlite => {
                // Create the file and switch it to WAL once; every pooled connection then gets
                // its per-connection pragmas in `after_connect`.
                SqliteConnectOptions::from_str(&url)?
                    .create_if_missing(true)
                    .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
                    .connect()
                    .await?;
                AnyPoolOptions::new()
                    .max_connections(8)
                    .acquire_timeout(Duration::from_secs(10))
                    .after_connect(|conn, _| {
                        Box::pin(async move {
                            // mmap and a larger page cache keep hot index pages (the
                            // probe history is hundreds of MB) out of per-read copies.
                            conn.execute(
                                "PRAGMA foreign_keys = ON; PRAGMA busy_timeout = 10000; \
                                 PRAGMA synchronous = NORMAL; PRAGMA mmap_size = 268435456; \
                                 PRAGMA cache_size = -16384;",
                            )
                            .await?;
                            Ok(())
                        })
                    })
                    .connect(&url)
                    .await?
            }
        };
        Ok(Db {
            pool,
            engine,
            ready: Arc::new(AtomicBool::new(false)),
            cause: Arc::default(),
            url: url.into(),
        })
    }

    /// Applies every embedded migration not yet recorded, each in its own transaction.
    fn migrate(&self) -> futures_util::future::BoxFuture<'_, Result<(), DbError>> {
        // Boxed: the migrator awaits it inside a spawned task.
        Box::pin(async move {
            self.apply_migrations().await?;
            if self.engine == Engine::Sqlite {
                // Gives the query planner fresh statistics; cheap when nothing changed.
                sqlx::query("PRAGMA optimize = 0x10002")
                    .execute(&self.pool)
                    .await?;
            }
            Ok(())
        })
    }

    async fn apply_migrations(&self) -> Result<(), DbError> {
        let mut conn = self.pool.acquire().await?;
        if self.engine == Engine::Postgres {
            // Instances starting together must not race on the same DDL.
            sqlx::query("SELECT pg_advisory_lock($1)")
                .bind(MIGRATION_LOCK_KEY)
                .execute(&mut *conn)
                .await?;
        }
        let result = self.apply_pending(&mut conn).await;
        if self.engine == Engine::Postgres {
            sqlx::query("SELECT pg_advisory_unlock($1)")
                .bind(MIGRATION_LOCK_KEY)
                .execute(&mut *conn)
                .await?;
        }
        result
    }

    /// The one runner's rule (the `migrate` crate) on this engine: the table of applied
    /// migrations (a `checksum` column added to one from before checksums), the plan, each
    /// pending file in its own transaction with its row, then the missing checksums.
    async fn apply_pending(&self, conn: &mut sqlx::AnyConnection) -> Result<(), DbError> {
        run_script(
            conn,
            "CREATE TABLE IF NOT EXISTS schema_migrations (
                 version BIGINT PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL,
                 checksum TEXT)",
        )
        .await?;
        let set = match self.engine {
            Engine::Postgres => &migrate::POSTGRES,
            Engine::Sqlite => &migrate::SQLITE,
        };
        // A table from before checksums (the runner before it) has no such column.
        match self.engine {
            Engine::Postgres => {
                sqlx::query("ALTER TABLE schema_migrations ADD COLUMN IF NOT EXISTS checksum TEXT")
                    .execute(&mut *conn)
                    .await?;
            }
            Engine::Sqlite => {
                let (has,): (i64,) = sqlx::query_as(
                    "SELECT CAST(COUNT(*) AS BIGINT) FROM pragma_table_info('schema_migrations') \
                     WHERE name = 'checksum'",
                )
                .fetch_one(&mut *conn)
                .await?;
                if has == 0 {
                    sqlx::query("ALTER TABLE schema_migrations ADD COLUMN checksum TEXT")
                        .execute(&mut *conn)
                        .await?;
                }
            }
        }
        let applied: Vec<migrate::Applied> = sqlx::query_as::<_, (i64, Option<String>)>(
            "SELECT version, checksum FROM schema_migrations",
        )
        .fetch_all(&mut *conn)
        .await?
        .into_iter()
        .map(|(version, checksum)| migrate::Applied { version, checksum })
        .collect();
        let plan = set
            .plan(&applied)
            .map_err(|e| DbError(sqlx::Error::Configuration(Box::new(e))))?;
        for m in plan.pending {
            let mut tx = sqlx::Acquire::begin(&mut *conn).await?;
            run_script(&mut tx, m.sql).await?;
            sqlx::query(
                "INSERT INTO schema_migrations (version, name, applied_at, checksum) \
                 VALUES ($1, $2, $3, $4)",
            )
            .bind(m.version)
            .bind(m.name)
            .bind(crate::time::now_ms())
            .bind(m.checksum())
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            tracing::info!(engine = set.engine, migration = m.name, "applied migration");
        }
        for m in plan.unrecorded {
            sqlx::query(
                "UPDATE schema_migrations SET checksum = $1 WHERE version = $2 AND checksum IS NULL",
            )
            .bind(m.checksum())
            .bind(m.version)
            .execute(&mut *conn)
            .await?;
        }
        Ok(())
    }
}

/// `host:port` of a database URL, for logs: never the user or the password.
pub fn host_of(url: &DatabaseUrl) -> String {
    match url {
        DatabaseUrl::Postgres(u) => url::Url::parse(u)
            .ok()
            .map(|u| {
                format!(
                    "{}:{}",
                    u.host_str().unwrap_or("localhost"),
                    u.port().unwrap_or(5432)
                )
            })
            .unwrap_or_default(),
        DatabaseUrl::Sqlite(u) => u.clone(),
    }
}

/// Runs a migration file's statements one at a time. (Not `sqlx::raw_sql`: its future is
/// not provably `Send` inside the migrator's spawned task.)
async fn run_script(conn: &mut sqlx::AnyConnection, sql: &str) -> Result<(), sqlx::Error> {
    for statement in migrate::statements(sql) {
        sqlx::query(&statement).execute(&mut *conn).await?;
    }
    Ok(())
}

/// A short cause for logs and readiness: refused, timed out, authentication, or the driver's
/// own words. Never the URL (it may carry a password).
pub fn describe(e: &DbError) -> String {
    let text = e.0.to_string();
    let lower = text.to_ascii_lowercase();
    if let sqlx::Error::Io(io) = &e.0 {
        return match io.kind() {
            std::io::ErrorKind::ConnectionRefused => "connection refused".to_owned(),
            std::io::ErrorKind::TimedOut => "connection timed out".to_owned(),
            _ => format!("network error: {io}"),
        };
    }
    if matches!(e.0, sqlx::Error::PoolTimedOut) {
        return "no connection within 2 s (timed out)".to_owned();
    }
    if lower.contains("password authentication failed") || lower.contains("authentication") {
        return format!("authentication failed: {text}");
    }
    text
}
