//! Probe rows: recording one probe (row, hourly rollup and stream snapshot in one
//! transaction), the agent feed derived from the newest rows (interface.md "Agent feed",
//! decisions.md §6), and retention.

pub mod agent;

use std::collections::HashSet;

use sqlx::Row;

use crate::db::{Db, DbError, Engine};
use crate::streams::uptime::{self, hour_of};
use crate::time::new_id;

/// Probe rows older than this are deleted.
pub const RETENTION_MS: i64 = 30 * 24 * 3600 * 1000;

/// Status of one probe row (interface.md "Probe"; decisions.md §6). The one probe-status
/// type of the crate: the prober classifies into it, the store and the agent feed read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProbeStatus {
    /// 2xx, valid manifest, fast enough.
    Healthy,
    /// Answering, but slow, invalid, stale or 4xx.
    Degraded,
    /// Not answering usefully: network, timeout, guard refusal, 5xx.
    Failing,
}

impl ProbeStatus {
    /// Wire value: `healthy`, `degraded`, `failing`.
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeStatus::Healthy => "healthy",
            ProbeStatus::Degraded => "degraded",
            ProbeStatus::Failing => "failing",
        }
    }

    /// Parses a stored wire value.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "healthy" => Some(ProbeStatus::Healthy),
            "degraded" => Some(ProbeStatus::Degraded),
            "failing" => Some(ProbeStatus::Failing),
            _ => None,
        }
    }

    /// The stream's `status` after a probe with this outcome: `watching`, `degraded`,
    /// `failing`.
    pub fn stream_status(self) -> &'static str {
        match self {
            ProbeStatus::Healthy => "watching",
            ProbeStatus::Degraded => "degraded",
            ProbeStatus::Failing => "failing",
        }
    }

    /// The inverse of [`ProbeStatus::stream_status`]: the status of the probe that left a
    /// stream in snapshot `status` (`None` for an unknown value).
    pub fn from_stream_status(s: &str) -> Option<Self> {
        match s {
            "watching" => Some(ProbeStatus::Healthy),
            "degraded" => Some(ProbeStatus::Degraded),
            "failing" => Some(ProbeStatus::Failing),
            _ => None,
        }
    }

    /// The stream's `agentState` after a probe with this outcome: `healthy` after a healthy
    /// probe, else `degraded`.
    pub fn agent_state(self) -> &'static str {
        match self {
            ProbeStatus::Healthy => "healthy",
            _ => "degraded",
        }
    }
}

impl std::fmt::Display for ProbeStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One finished probe, ready to store.
#[derive(Clone, Debug)]
pub struct NewProbe {
    pub stream_id: String,
    pub status: ProbeStatus,
    pub anomaly_class: String,
    pub latency_ms: i64,
    pub http_status: Option<u16>,
    pub detail: String,
    pub created_at: i64,
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
            "INSERT INTO probes (id, stream_id, status, anomaly_class, latency_ms, http_status, detail, created_at) \
             SELECT $1, $2, $3, $4, $5, $6, $7, $8 WHERE EXISTS (SELECT 1 FROM streams WHERE id = $2)",
        )
        .bind(&id)
        .bind(&p.stream_id)
        .bind(p.status.as_str())
        .bind(&p.anomaly_class)
        .bind(p.latency_ms)
        .bind(p.http_status.map(i64::from))
        .bind(&p.detail)
        .bind(p.created_at)
        .execute(&mut *tx)
        .await?;
        if inserted.rows_affected() == 0 {
            return Ok(None);
        }
        sqlx::query(
            "INSERT INTO probe_rollups (stream_id, hour, total, failing) VALUES ($1, $2, 1, $3) \
             ON CONFLICT (stream_id, hour) DO UPDATE SET total = probe_rollups.total + 1, \
                 failing = probe_rollups.failing + excluded.failing",
        )
        .bind(&p.stream_id)
        .bind(hour_of(p.created_at))
        .bind(i64::from(p.status == ProbeStatus::Failing))
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
                 uptime_pct = $7, uptime_at = $8 \
             WHERE id = $9",
        )
        .bind(p.status.stream_status())
        .bind(p.status.agent_state())
        .bind(&p.last_action)
        .bind(p.created_at)
        .bind(healthy_at)
        .bind(p.next_probe_at)
        .bind(uptime_pct)
        .bind(now)
        .bind(&p.stream_id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
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
             RETURNING id, source_url, status, next_probe_at, last_checked_at"
        );
        let rows = sqlx::query(&sql)
            .bind(lease_until)
            .bind(now)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.db.pool)
            .await?;
        Ok(rows
            .iter()
            .map(|r| {
                let checked: Option<i64> = r.get("last_checked_at");
                let status: String = r.get("status");
                DueStream {
                    id: r.get("id"),
                    source_url: r.get("source_url"),
                    due_at: r.get("next_probe_at"),
                    previous: checked.and_then(|_| ProbeStatus::from_stream_status(&status)),
                }
            })
            .collect())
    }

    /// The earliest `next_probe_at` among streams without a live lease, if any stream exists.
    pub async fn next_due_at(&self, now: i64) -> Result<Option<i64>, DbError> {
        let row = sqlx::query(
            "SELECT next_probe_at FROM streams WHERE lease_until IS NULL OR lease_until < $1 \
             ORDER BY next_probe_at LIMIT 1",
        )
        .bind(now)
        .fetch_optional(&self.db.pool)
        .await?;
        Ok(row.map(|r| r.get::<i64, _>("next_probe_at")))
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
        let rows = sqlx::query("SELECT id FROM streams")
            .fetch_all(&self.db.pool)
            .await?;
        Ok(rows.iter().map(|r| r.get::<String, _>("id")).collect())
    }
}
