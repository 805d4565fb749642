//! The agent feed: the newest probe rows, each joined with its stream and explained
//! (severity, anomaly class, fix and action — interface.md rules 1–4, decisions.md §6).

use sqlx::Row;

use super::ProbeStatus;
use crate::db::{Db, DbError};

/// `GET /api/v1/agents` returns this many of the newest probe rows.
pub const FEED_LIMIT: i64 = 100;

pub const ACTION_HEALTHY: &str = "no action needed — stream healthy";
pub const ACTION_LATENCY: &str = "watching latency — response time rising";
pub const ACTION_DEGRADED: &str = "raised probe frequency — confirming degradation";
pub const ACTION_RESOLVED: &str = "resolved — stream recovered";
pub const INVESTIGATING: &str = "investigating";

/// One element of the feed, as the contract's AgentItem (plus `detail`).
#[derive(Clone, Debug, PartialEq)]
pub struct AgentItem {
    pub id: String,
    pub stream_id: String,
    pub source_url: String,
    pub stream_name: String,
    pub severity: &'static str,
    pub anomaly_class: String,
    pub fix: String,
    pub action: &'static str,
    pub created_at: i64,
    pub latency_ms: i64,
    pub detail: String,
}

/// Rule 1: severity from the probe status.
pub fn severity(status: ProbeStatus) -> &'static str {
    match status {
        ProbeStatus::Healthy => "info",
        ProbeStatus::Degraded => "warn",
        ProbeStatus::Failing => "critical",
    }
}

/// Rules 3 and 4: `(fix, action)` for a probe, given whether its stream had a healthy probe
/// after it and the stream's current `lastAction`.
pub fn fix_and_action(
    status: ProbeStatus,
    latency_ms: i64,
    slow_ms: u64,
    recovered_later: bool,
    last_action: &str,
) -> (String, &'static str) {
    let action = match status {
        ProbeStatus::Failing if !recovered_later => return (INVESTIGATING.into(), INVESTIGATING),
        ProbeStatus::Failing => ACTION_RESOLVED,
        ProbeStatus::Degraded => ACTION_DEGRADED,
        // Compare in integers: latency * 2 < slow_ms is latency < slow_ms / 2 without rounding.
        ProbeStatus::Healthy if (latency_ms.max(0) as u64).saturating_mul(2) < slow_ms => {
            ACTION_HEALTHY
        }
        ProbeStatus::Healthy => ACTION_LATENCY,
    };
    (last_action.to_owned(), action)
}

/// The newest probe rows, newest first, derived into feed items.
pub async fn feed(db: &Db, slow_ms: u64) -> Result<Vec<AgentItem>, DbError> {
    let rows = sqlx::query(
        "SELECT p.id, p.stream_id, p.status, p.anomaly_class, p.latency_ms, p.detail, p.created_at, \
                s.source_url, s.name, s.last_action, s.last_healthy_at \
         FROM (SELECT * FROM probes ORDER BY created_at DESC, seq DESC LIMIT $1) p \
         JOIN streams s ON s.id = p.stream_id \
         ORDER BY p.created_at DESC, p.seq DESC",
    )
    .bind(FEED_LIMIT)
    .fetch_all(&db.pool)
    .await?;
    let mut items = Vec::with_capacity(rows.len());
    for r in rows {
        let Some(status) = ProbeStatus::parse(&r.get::<String, _>("status")) else {
            continue;
        };
        let created_at: i64 = r.get("created_at");
        let latency_ms: i64 = r.get("latency_ms");
        let last_healthy_at: Option<i64> = r.get("last_healthy_at");
        let recovered_later = last_healthy_at.is_some_and(|h| h > created_at);
        let last_action: String = r.get("last_action");
        let (fix, action) =
            fix_and_action(status, latency_ms, slow_ms, recovered_later, &last_action);
        items.push(AgentItem {
            id: r.get("id"),
            stream_id: r.get("stream_id"),
            source_url: r.get("source_url"),
            stream_name: r.get("name"),
            severity: severity(status),
            anomaly_class: r.get("anomaly_class"),
            fix,
            action,
            created_at,
            latency_ms,
            detail: r.get("detail"),
        });
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ProbeStatus::*;

    #[test]
    fn action_table() {
        let f = |s, l, r| fix_and_action(s, l, 2000, r, "probe ok in 84 ms");
        assert_eq!(
            f(Healthy, 999, false),
            ("probe ok in 84 ms".into(), ACTION_HEALTHY)
        );
        assert_eq!(f(Healthy, 1000, false).1, ACTION_LATENCY);
        assert_eq!(f(Healthy, 2500, false).1, ACTION_LATENCY);
        assert_eq!(f(Degraded, 10, false).1, ACTION_DEGRADED);
        assert_eq!(f(Failing, 10, false), (INVESTIGATING.into(), INVESTIGATING));
        assert_eq!(
            f(Failing, 10, true),
            ("probe ok in 84 ms".into(), ACTION_RESOLVED)
        );
    }

    #[test]
    fn severities() {
        assert_eq!(severity(Healthy), "info");
        assert_eq!(severity(Degraded), "warn");
        assert_eq!(severity(Failing), "critical");
    }
}
