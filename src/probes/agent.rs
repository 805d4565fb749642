//! The agent feed: the newest probe rows, each joined with its stream and explained
//! (severity, anomaly class, fix and action — interface.md rules 1–4, decisions.md §6).

use super::ProbeStatus;
use crate::db::{Db, DbError};
use crate::states::{AnomalyClass, Severity};

/// `GET /api/v1/agents` returns this many of the newest probe rows by default.
pub const FEED_LIMIT: i64 = 100;
/// The largest `limit` a feed request may ask for.
pub const FEED_LIMIT_MAX: i64 = 500;

/// Which probe rows the feed shows (decisions.md v1.1 §6). The default is the contract's feed:
/// the newest [`FEED_LIMIT`] rows of every stream.
#[derive(Clone, Debug, PartialEq)]
pub struct FeedQuery {
    /// Only this stream's probes.
    pub stream_id: Option<String>,
    /// Only probes of these severities; empty means all.
    pub severities: Vec<Severity>,
    /// Only probes created strictly before this time (epoch ms), for paging.
    pub before: Option<i64>,
    /// At most this many rows, 1–[`FEED_LIMIT_MAX`].
    pub limit: i64,
}

impl Default for FeedQuery {
    fn default() -> Self {
        Self {
            stream_id: None,
            severities: Vec::new(),
            before: None,
            limit: FEED_LIMIT,
        }
    }
}

/// Why a feed request was refused.
#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    /// `streamId` names no stream.
    #[error("unknown stream")]
    UnknownStream,
    #[error(transparent)]
    Db(#[from] DbError),
}

impl From<sqlx::Error> for FeedError {
    fn from(e: sqlx::Error) -> Self {
        FeedError::Db(DbError(e))
    }
}

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
    pub severity: Severity,
    pub anomaly_class: AnomalyClass,
    pub fix: String,
    pub action: &'static str,
    pub created_at: i64,
    pub latency_ms: i64,
    pub detail: String,
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

/// The newest probe rows that match `q`, newest first, derived into feed items.
pub async fn feed(db: &Db, slow_ms: u64, q: &FeedQuery) -> Result<Vec<AgentItem>, FeedError> {
    if let Some(id) = &q.stream_id {
        let exists = sqlx::query("SELECT 1 FROM streams WHERE id = $1")
            .bind(id)
            .fetch_optional(&db.pool)
            .await?;
        if exists.is_none() {
            return Err(FeedError::UnknownStream);
        }
    }
    // Filters are bound in this order; $1 is the limit.
    let mut filters = Vec::new();
    let mut n = 1;
    let mut next = || {
        n += 1;
        format!("${n}")
    };
    if q.stream_id.is_some() {
        filters.push(format!("stream_id = {}", next()));
    }
    if !q.severities.is_empty() {
        let list: Vec<String> = q.severities.iter().map(|_| next()).collect();
        filters.push(format!("status IN ({})", list.join(", ")));
    }
    if q.before.is_some() {
        filters.push(format!("created_at < {}", next()));
    }
    let filter = if filters.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", filters.join(" AND "))
    };
    let sql = format!(
        "SELECT p.id, p.stream_id, p.status, p.anomaly_class, p.latency_ms, p.detail, p.created_at, \
                s.source_url, s.name, s.last_action, s.last_healthy_at \
         FROM (SELECT * FROM probes {filter} ORDER BY created_at DESC, seq DESC LIMIT $1) p \
         JOIN streams s ON s.id = p.stream_id \
         ORDER BY p.created_at DESC, p.seq DESC"
    );
    let mut query = sqlx::query_as::<_, FeedRow>(&sql).bind(q.limit);
    if let Some(id) = &q.stream_id {
        query = query.bind(id);
    }
    for sev in &q.severities {
        query = query.bind(sev.probe_status().as_str());
    }
    if let Some(before) = q.before {
        query = query.bind(before);
    }
    let rows = query.fetch_all(&db.pool).await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let recovered_later = r.last_healthy_at.is_some_and(|h| h > r.created_at);
            let (fix, action) = fix_and_action(
                r.status,
                r.latency_ms,
                slow_ms,
                recovered_later,
                &r.last_action,
            );
            AgentItem {
                id: r.id,
                stream_id: r.stream_id,
                source_url: r.source_url,
                stream_name: r.name,
                severity: r.status.severity(),
                anomaly_class: r.anomaly_class,
                fix,
                action,
                created_at: r.created_at,
                latency_ms: r.latency_ms,
                detail: r.detail,
            }
        })
        .collect())
}

/// One probe row joined with its stream, as the feed query reads it.
#[derive(sqlx::FromRow)]
struct FeedRow {
    id: String,
    stream_id: String,
    #[sqlx(try_from = "String")]
    status: ProbeStatus,
    #[sqlx(try_from = "String")]
    anomaly_class: AnomalyClass,
    latency_ms: i64,
    detail: String,
    created_at: i64,
    source_url: String,
    name: String,
    last_action: String,
    last_healthy_at: Option<i64>,
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
        assert_eq!(Healthy.severity(), Severity::Info);
        assert_eq!(Degraded.severity(), Severity::Warn);
        assert_eq!(Failing.severity(), Severity::Critical);
    }
}
