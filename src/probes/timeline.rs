//! The probes half of `GET /api/v1/streams/{id}/timeline` (analytics.md §4, §5): a stream's
//! probe outcomes per UTC-aligned bucket, on the same axis as its viewers' QoE.

use std::collections::BTreeMap;

use analytics::query::bucket_start;
use analytics::{Granularity, TimeRange};

use crate::db::{Db, DbError};
use crate::states::ProbeStatus;

/// One bucket's probes: how many ended in each status, and their median latency.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProbeBucket {
    pub healthy: i64,
    pub degraded: i64,
    pub failing: i64,
    /// p50 of every probe's latency in the bucket (the rule of analytics.md §3's
    /// percentiles: `v[floor(n/2)]` of the sorted values); `None` without probes.
    pub p50_latency_ms: Option<f64>,
}

#[derive(sqlx::FromRow)]
struct ProbeRow {
    created_at: i64,
    #[sqlx(try_from = "String")]
    status: ProbeStatus,
    latency_ms: i64,
}

/// Every bucket of `range` with the stream's probes recorded inside `[from, to)`, oldest
/// first; a bucket without probes has zero counts and no latency.
///
/// One indexed range scan (`probes_stream`); the rows are bucketed here so both engines
/// share one rule. Probe rows live 30 days, so a bucket holds at most a few thousand.
pub async fn buckets(
    db: &Db,
    stream_id: &str,
    range: TimeRange,
    granularity: Granularity,
) -> Result<Vec<(i64, ProbeBucket)>, DbError> {
    let rows: Vec<ProbeRow> = sqlx::query_as(
        "SELECT created_at, status, latency_ms FROM probes \
         WHERE stream_id = $1 AND created_at >= $2 AND created_at < $3",
    )
    .bind(stream_id)
    .bind(range.from_ms)
    .bind(range.to_ms)
    .fetch_all(&db.pool)
    .await?;

    let mut counts: BTreeMap<i64, (ProbeBucket, Vec<f64>)> = BTreeMap::new();
    for r in rows {
        let (b, latencies) = counts
            .entry(bucket_start(r.created_at, granularity))
            .or_default();
        match r.status {
            ProbeStatus::Healthy => b.healthy += 1,
            ProbeStatus::Degraded => b.degraded += 1,
            ProbeStatus::Failing => b.failing += 1,
        }
        latencies.push(r.latency_ms as f64);
    }
    Ok(range
        .buckets(granularity)
        .into_iter()
        .map(|t| {
            let bucket = counts
                .remove(&t)
                .map(|(mut b, mut latencies)| {
                    latencies.sort_by(f64::total_cmp);
                    b.p50_latency_ms = analytics::metrics::percentile(&latencies, 50);
                    b
                })
                .unwrap_or_default();
            (t, bucket)
        })
        .collect())
}
