//! Probe rows: recording one probe (row, hourly rollup and stream snapshot in one
//! transaction), the agent feed derived from the newest rows (interface.md "Agent feed",
//! decisions.md §6), and retention.

pub mod agent;

use sqlx::Row;

use crate::db::{Db, DbError};
use crate::streams::uptime::hour_of;
use crate::time::new_id;

/// Probe rows older than this are deleted.
pub const RETENTION_MS: i64 = 30 * 24 * 3600 * 1000;

/// Outcome class of one probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProbeStatus {
    Healthy,
    Degraded,
    Failing,
}

impl ProbeStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeStatus::Healthy => "healthy",
            ProbeStatus::Degraded => "degraded",
            ProbeStatus::Failing => "failing",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "healthy" => Some(ProbeStatus::Healthy),
            "degraded" => Some(ProbeStatus::Degraded),
            "failing" => Some(ProbeStatus::Failing),
            _ => None,
        }
    }

    /// The stream's `status` after a probe with this outcome.
    pub fn stream_status(self) -> &'static str {
        match self {
            ProbeStatus::Healthy => "watching",
            ProbeStatus::Degraded => "degraded",
            ProbeStatus::Failing => "failing",
        }
    }

    /// The stream's `agentState` after a probe with this outcome.
    pub fn agent_state(self) -> &'static str {
        match self {
            ProbeStatus::Healthy => "healthy",
            _ => "degraded",
        }
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
        let healthy_at = (p.status == ProbeStatus::Healthy).then_some(p.created_at);
        let moved = sqlx::query(
            "UPDATE streams SET status = $1, agent_state = $2, last_action = $3, last_checked_at = $4, \
                 last_healthy_at = COALESCE($5, last_healthy_at), next_probe_at = $6, lease_until = NULL \
             WHERE id = $7",
        )
        .bind(p.status.stream_status())
        .bind(p.status.agent_state())
        .bind(&p.last_action)
        .bind(p.created_at)
        .bind(healthy_at)
        .bind(p.next_probe_at)
        .bind(&p.stream_id)
        .execute(&mut *tx)
        .await?;
        if moved.rows_affected() == 0 {
            return Ok(None);
        }
        sqlx::query(
            "INSERT INTO probes (id, stream_id, status, anomaly_class, latency_ms, http_status, detail, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
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

    /// Status of the stream's newest probe, if any (the prober's previous state).
    pub async fn last_status(&self, stream_id: &str) -> Result<Option<ProbeStatus>, DbError> {
        let row = sqlx::query(
            "SELECT status FROM probes WHERE stream_id = $1 ORDER BY created_at DESC, seq DESC LIMIT 1",
        )
        .bind(stream_id)
        .fetch_optional(&self.db.pool)
        .await?;
        Ok(row.and_then(|r| ProbeStatus::parse(&r.get::<String, _>("status"))))
    }
}
