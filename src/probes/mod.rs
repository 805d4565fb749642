//! Probe rows: recording one probe (row, hourly rollup and stream snapshot in one
//! transaction), the agent feed derived from the newest rows (interface.md "Agent feed",
//! decisions.md §6), and retention.

pub mod agent;
pub mod timeline;

use std::collections::HashSet;

use crate::db::{Db, DbError, Engine};
use crate::streams::uptime::{self, hour_of};
use crate::time::new_id;

/// Probe rows older than this are deleted.
pub const RETENTION_MS: i64 = 30 * 24 * 3600 * 1000;

pub use crate::states::ProbeStatus;
use crate::states::{AnomalyClass, StreamStatus};

/// One finished probe, ready to store.
#[derive(Clone, Debug)]
pub struct NewProbe {
    pub stream_id: String,
    pub status: ProbeStatus,
    pub anomaly_class: AnomalyClass,
    pub latency_ms: i64,
    pub http_status: Option<u16>,
    pub detail: String,
    pub created_at: i64,
    /// Whether a viewer could have played the stream (decisions.md v1.1 §6).
    pub playable: bool,
    /// The stream's `lastAction` after this probe.
    pub last_action: String,
    /// When this stream is due again.
    pub next_probe_at: i64,
}

/// A stream the prober has claimed (leased) for one probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DueStream {
    /// Stream id.
    pub id: String,
    /// The URL to probe.
    pub source_url: String,
    /// When the probe was due (`next_probe_at` at claim time, epoch ms): the base of the
    /// next due time, so lateness does not accumulate.
    pub due_at: i64,
    /// Status of the stream's previous probe (from its snapshot); `None` before the first.
    pub previous: Option<ProbeStatus>,
    /// Consecutive not-playable probes up to now (0 after a playable one).
    pub down_streak: i64,
}

/// A stream leased by [`Probes::claim_due`], as the `RETURNING` clause gives it.
#[derive(sqlx::FromRow)]
struct ClaimedRow {
    id: String,
    source_url: String,
    #[sqlx(try_from = "String")]
    status: StreamStatus,
    next_probe_at: i64,
    last_checked_at: Option<i64>,
    down_streak: i64,
}

/// Probe storage over the relational store.
#[derive(Clone)]
pub struct Probes {
    db: Db,
}

impl Probes {
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// Stores the probe row, bumps its hour's rollup and moves the stream snapshot, atomically.
    /// Returns the probe id; `None` when the stream no longer exists.
    pub async fn record(&self, p: &NewProbe) -> Result<Option<String>, DbError> {
        let mut tx = self.db.pool.begin().await?;
        let id = new_id();
        // Inserted only while the stream exists (it may have gone since it was claimed).
        let inserted = sqlx::query(
            "INSERT INTO probes (id, stream_id, status, anomaly_class, latency_ms, http_status, detail, created_at, playable) \
             SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9 WHERE EXISTS (SELECT 1 FROM streams WHERE id = $2)",
        )
        .bind(&id)
        .bind(&p.stream_id)
        .bind(p.status.as_str())
        .bind(p.anomaly_class.as_str())
        .bind(p.latency_ms)
        .bind(p.http_status.map(i64::from))
        .bind(&p.detail)
        .bind(p.created_at)
        .bind(i64::from(p.playable))
        .execute(&mut *tx)
        .await?;
        if inserted.rows_affected() == 0 {
            return Ok(None);
        }
        sqlx::query(
            "INSERT INTO probe_rollups (stream_id, hour, total, down) VALUES ($1, $2, 1, $3) \
             ON CONFLICT (stream_id, hour) DO UPDATE SET total = probe_rollups.total + 1, \
                 down = probe_rollups.down + excluded.down",
        )
        .bind(&p.stream_id)
        .bind(hour_of(p.created_at))
        .bind(i64::from(!p.playable))
        .execute(&mut *tx)
        .await?;
        // The snapshot and the uptime that now includes this probe, in one write of the row.
        let now = crate::time::now_ms();
        let uptime_pct = uptime::compute(&mut *tx, &[p.stream_id.as_str()], now)
            .await?
            .get(&p.stream_id)
            .copied()
            .unwrap_or(100.0);
        let healthy_at = (p.status == ProbeStatus::Healthy).then_some(p.created_at);
        sqlx::query(
            "UPDATE streams SET status = $1, agent_state = $2, last_action = $3, last_checked_at = $4, \
                 last_healthy_at = COALESCE($5, last_healthy_at), next_probe_at = $6, lease_until = NULL, \
                 uptime_pct = $7, uptime_at = $8, \
                 down_streak = CASE WHEN $10 = 1 THEN 0 ELSE down_streak + 1 END, \
                 up_streak = CASE WHEN $10 = 1 THEN up_streak + 1 ELSE 0 END \
             WHERE id = $9",
        )
        .bind(p.status.stream_status().as_str())
        .bind(p.status.agent_state().as_str())
        .bind(&p.last_action)
        .bind(p.created_at)
        .bind(healthy_at)
        .bind(p.next_probe_at)
        .bind(uptime_pct)
        .bind(now)
        .bind(&p.stream_id)
        .bind(i64::from(p.playable))
        .execute(&mut *tx)
        .await?;
        let facts = crate::alerts::evaluate::stream_facts(&mut tx, &p.stream_id).await?;
        tx.commit().await?;
        // Then the stream alert rules, each in a transaction of its own (a transition commits
        // with its notifications, alerts.md §3). A failure here leaves the probe recorded: the
        // rules see the same streaks again at the next probe.
        let probe = crate::alerts::evaluate::ProbeFacts {
            stream_id: &p.stream_id,
            playable: p.playable,
            detail: &p.detail,
            at: p.created_at,
        };
        if let Err(e) = crate::alerts::evaluate::on_probe(&self.db, &probe, &facts).await {
            tracing::warn!(stream = %p.stream_id, error = %e, "stream alert rules not evaluated for this probe");
        }
        Ok(Some(id))
    }

    /// Deletes probe rows and rollups older than the retention window; returns rows deleted.
    pub async fn prune(&self, now: i64) -> Result<u64, DbError> {
        let cutoff = now - RETENTION_MS;
        let rows = sqlx::query("DELETE FROM probes WHERE created_at < $1")
            .bind(cutoff)
            .execute(&self.db.pool)
            .await?
            .rows_affected();
        sqlx::query("DELETE FROM probe_rollups WHERE hour < $1")
            .bind(hour_of(cutoff))
            .execute(&self.db.pool)
            .await?;
        Ok(rows)
    }

    /// Leases up to `limit` due streams (`next_probe_at <= now`, no live lease) until
    /// `lease_until`, oldest due first, in one statement. On PostgreSQL the candidate rows
    /// are locked with `FOR UPDATE SKIP LOCKED`, so concurrent instances claim disjoint sets;
    /// SQLite serialises writers, so the same statement without the lock clause is atomic.
    /// [`Probes::record`] clears the lease.
    pub async fn claim_due(
        &self,
        now: i64,
        lease_until: i64,
        limit: usize,
    ) -> Result<Vec<DueStream>, DbError> {
        let lock = match self.db.engine {
            Engine::Postgres => " FOR UPDATE SKIP LOCKED",
            Engine::Sqlite => "",
        };
        let sql = format!(
            "UPDATE streams SET lease_until = $1 WHERE id IN (\
                 SELECT id FROM streams \
                 WHERE next_probe_at <= $2 AND (lease_until IS NULL OR lease_until < $2) \
                 ORDER BY next_probe_at LIMIT $3{lock}) \
             RETURNING id, source_url, status, next_probe_at, last_checked_at, down_streak"
        );
        let rows: Vec<ClaimedRow> = sqlx::query_as(&sql)
            .bind(lease_until)
            .bind(now)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.db.pool)
            .await?;
        Ok(rows
            .into_iter()
            .map(|r| DueStream {
                id: r.id,
                source_url: r.source_url,
                due_at: r.next_probe_at,
                previous: r.last_checked_at.map(|_| r.status.probe_status()),
                down_streak: r.down_streak,
            })
            .collect())
    }

    /// Releases claimed streams without a probe and makes each due again at its time: the
    /// prober chose not to probe them now (their host is booked up, or the prober is short of
    /// body budget). No probe row, no snapshot change. One statement per 500 streams.
    pub async fn defer_many(&self, due_again: &[(String, i64)]) -> Result<(), DbError> {
        for chunk in due_again.chunks(500) {
            // VALUES columns are `column1`, `column2` on both engines.
            let values = (0..chunk.len())
                .map(|i| format!("(${}, ${})", 2 * i + 1, 2 * i + 2))
                .collect::<Vec<_>>()
                .join(", ");
            let sql = format!(
                "UPDATE streams SET next_probe_at = v.column2, lease_until = NULL \
                 FROM (VALUES {values}) AS v WHERE streams.id = v.column1"
            );
            let mut q = sqlx::query(&sql);
            for (id, at) in chunk {
                q = q.bind(id).bind(*at);
            }
            q.execute(&self.db.pool).await?;
        }
        Ok(())
    }

    /// The earliest `next_probe_at` among streams without a live lease, if any stream exists.
    pub async fn next_due_at(&self, now: i64) -> Result<Option<i64>, DbError> {
        let next: Option<(i64,)> = sqlx::query_as(
            "SELECT next_probe_at FROM streams WHERE lease_until IS NULL OR lease_until < $1 \
             ORDER BY next_probe_at LIMIT 1",
        )
        .bind(now)
        .fetch_optional(&self.db.pool)
        .await?;
        Ok(next.map(|(at,)| at))
    }

    /// Moves every unleased stream due before `overdue_before` to a random due time in
    /// `[now, now + spread_ms)`: after downtime the backlog is spread over one interval
    /// instead of probed at once. Returns the number of streams moved.
    pub async fn spread_overdue(
        &self,
        now: i64,
        overdue_before: i64,
        spread_ms: i64,
    ) -> Result<u64, DbError> {
        let offset = match self.db.engine {
            Engine::Postgres => "CAST(floor(random() * $2) AS BIGINT)",
            // random() is a signed 64-bit integer: fold it into [0, $2).
            Engine::Sqlite => "(((random() % $2) + $2) % $2)",
        };
        let sql = format!(
            "UPDATE streams SET next_probe_at = $1 + {offset} \
             WHERE next_probe_at < $3 AND (lease_until IS NULL OR lease_until < $1)"
        );
        let moved = sqlx::query(&sql)
            .bind(now)
            .bind(spread_ms.max(1))
            .bind(overdue_before)
            .execute(&self.db.pool)
            .await?
            .rows_affected();
        Ok(moved)
    }

    /// Ids of every registered stream (the prober drops memory of streams no longer here).
    pub async fn stream_ids(&self) -> Result<HashSet<String>, DbError> {
        let ids: Vec<(String,)> = sqlx::query_as("SELECT id FROM streams")
            .fetch_all(&self.db.pool)
            .await?;
        Ok(ids.into_iter().map(|(id,)| id).collect())
    }
}
