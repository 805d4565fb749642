//! The relational store shared by accounts, streams, probes, keys and the waitlist: one
//! `sqlx::Any` pool on PostgreSQL or the embedded SQLite file, and the numbered migrations of
//! `migrations/<engine>/`, embedded in the binary and applied at start-up.
//!
//! Queries are written once for both engines: `$1`-style placeholders (SQLite accepts them),
//! timestamps as BIGINT epoch milliseconds, and `CAST(… AS BIGINT)` around aggregates.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{AnyPool, ConnectOptions, Executor, Row};

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
}

/// Failure of the relational store; always an internal error to clients.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct DbError(#[from] pub sqlx::Error);

impl DbError {
    /// True when the failure is a unique-constraint violation (a lost insert race).
    pub fn is_unique_violation(&self) -> bool {
        matches!(&self.0, sqlx::Error::Database(e) if e.is_unique_violation())
    }
}

struct Migration {
    version: i64,
    name: &'static str,
    sql: &'static str,
}

const SQLITE_MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    name: "core",
    sql: include_str!("../migrations/sqlite/0001_core.sql"),
}];

const POSTGRES_MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    name: "core",
    sql: include_str!("../migrations/postgres/0001_core.sql"),
}];

/// Any number held by the advisory lock that serialises migrations across instances.
const MIGRATION_LOCK_KEY: i64 = 0x5354_5257_4154_4348; // "STRWATCH"

impl Db {
    /// Opens the configured database (or `<data_dir>/streamwatch.db`) and migrates it.
    pub async fn connect(url: Option<&DatabaseUrl>, data_dir: &Path) -> Result<Self, DbError> {
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
            Engine::Postgres => {
                AnyPoolOptions::new()
                    .max_connections(16)
                    .acquire_timeout(Duration::from_secs(10))
                    .connect(&url)
                    .await?
            }
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
        let db = Db { pool, engine };
        db.migrate().await?;
        if engine == Engine::Sqlite {
            // Gives the query planner fresh statistics; cheap when nothing changed.
            sqlx::raw_sql("PRAGMA optimize = 0x10002")
                .execute(&db.pool)
                .await?;
        }
        Ok(db)
    }

    /// Applies every embedded migration not yet recorded, each in its own transaction.
    async fn migrate(&self) -> Result<(), DbError> {
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

    async fn apply_pending(&self, conn: &mut sqlx::AnyConnection) -> Result<(), DbError> {
        sqlx::raw_sql(
            "CREATE TABLE IF NOT EXISTS schema_migrations (
                 version BIGINT PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)",
        )
        .execute(&mut *conn)
        .await?;
        let applied: Vec<i64> = sqlx::query("SELECT version FROM schema_migrations")
            .fetch_all(&mut *conn)
            .await?
            .iter()
            .map(|r: &AnyRow| r.get::<i64, _>(0))
            .collect();
        let all = match self.engine {
            Engine::Postgres => POSTGRES_MIGRATIONS,
            Engine::Sqlite => SQLITE_MIGRATIONS,
        };
        for m in all.iter().filter(|m| !applied.contains(&m.version)) {
            let mut tx = sqlx::Acquire::begin(&mut *conn).await?;
            sqlx::raw_sql(m.sql).execute(&mut *tx).await?;
            sqlx::query(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)",
            )
            .bind(m.version)
            .bind(m.name)
            .bind(crate::time::now_ms())
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            tracing::info!(version = m.version, name = m.name, "applied migration");
        }
        Ok(())
    }
}
