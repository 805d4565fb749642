//! `uptimePct` over the last 24 hours without scanning every probe row.
//!
//! * The rule (decisions.md v1.1 §6): 100 × probes that found the stream *playable* ÷ all
//!   probes. Playable = healthy, or degraded only because it was slow; a 4xx manifest, an
//!   invalid or stale manifest and every failing probe are down.
//! * Computing it: whole hours come from the `probe_rollups` counters (kept in the same
//!   transaction as each probe insert), and only the one hour that straddles the window's
//!   start is counted from raw rows, through a covering index.
//! * Reading it: every probe stores its stream's freshly computed value on the stream row
//!   (`uptime_pct`, `uptime_at`), so a list read costs nothing per stream. A stored value older
//!   than [`FRESH_MS`] (no prober running, or a stream not probed lately) is recomputed at read
//!   time, so the figure never drifts more than that from the exact window.

use std::collections::HashMap;

use sqlx::{Any, Executor};

pub const WINDOW_MS: i64 = 24 * 3600 * 1000;
pub const HOUR_MS: i64 = 3600 * 1000;
/// A stored uptime older than this is recomputed when read.
pub const FRESH_MS: i64 = 5 * 60 * 1000;

/// Start of the hour holding `ms`.
pub fn hour_of(ms: i64) -> i64 {
    ms.div_euclid(HOUR_MS) * HOUR_MS
}

/// 100 × playable ÷ all, rounded to 2 decimals; 100 when there are no probes.
pub fn pct(total: i64, down: i64) -> f64 {
    if total <= 0 {
        return 100.0;
    }
    let raw = 100.0 * (total - down) as f64 / total as f64;
    (raw * 100.0).round() / 100.0
}

/// Uptime of each listed stream over `(now - 24 h, now]`; streams without probes are absent.
pub async fn compute<'e, E>(
    exec: E,
    ids: &[&str],
    now: i64,
) -> Result<HashMap<String, f64>, sqlx::Error>
where
    E: Executor<'e, Database = Any>,
{
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let since = now - WINDOW_MS;
    let edge_hour = hour_of(since);
    // Placeholders $3.. for the ids; $1 and $2 are the bounds.
    let list = (0..ids.len())
        .map(|i| format!("${}", i + 3))
        .collect::<Vec<_>>()
        .join(", ");
    let sql = format!(
        "SELECT stream_id, CAST(SUM(total) AS BIGINT) AS total, CAST(SUM(down) AS BIGINT) AS down FROM ( \
             SELECT stream_id, total, down FROM probe_rollups \
             WHERE hour > $1 AND stream_id IN ({list}) \
             UNION ALL \
             SELECT stream_id, 1 AS total, 1 - playable AS down \
             FROM probes WHERE created_at > $2 AND created_at < $1 + {HOUR_MS} AND stream_id IN ({list}) \
         ) w GROUP BY stream_id"
    );
    let mut q = sqlx::query_as(&sql).bind(edge_hour).bind(since);
    for id in ids {
        q = q.bind(*id);
    }
    let rows: Vec<(String, i64, i64)> = q.fetch_all(exec).await?;
    Ok(rows
        .into_iter()
        .map(|(stream_id, total, down)| (stream_id, pct(total, down)))
        .collect())
}

/// Recomputes one stream's uptime and stores it on the stream row, outside of a probe
/// (a probe's own transaction stores it with the snapshot, see `Probes::record`).
pub async fn refresh(
    tx: &mut sqlx::AnyConnection,
    stream_id: &str,
    now: i64,
) -> Result<(), sqlx::Error> {
    let pct = compute(&mut *tx, &[stream_id], now)
        .await?
        .get(stream_id)
        .copied()
        .unwrap_or(100.0);
    sqlx::query("UPDATE streams SET uptime_pct = $1, uptime_at = $2 WHERE id = $3")
        .bind(pct)
        .bind(now)
        .bind(stream_id)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pct_rounds_to_two_decimals() {
        assert_eq!(pct(0, 0), 100.0);
        assert_eq!(pct(3, 1), 66.67);
        assert_eq!(pct(3, 3), 0.0);
        assert_eq!(pct(2880, 1), 99.97);
    }

    #[test]
    fn hours_floor() {
        assert_eq!(hour_of(HOUR_MS + 5), HOUR_MS);
        assert_eq!(hour_of(HOUR_MS), HOUR_MS);
    }
}
