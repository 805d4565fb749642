//! Prometheus metrics (decisions.md §11): the `metrics` facade records where things happen
//! (HTTP layer, telemetry route, batch writer, key cache, prober, accounts, store supervisor);
//! this module installs the Prometheus recorder once per process, describes every metric,
//! and samples the gauges that come from the stores (streams by status, active sessions).
//! `GET /metrics` on `STREAMWATCH_METRICS_LISTEN` and the per-request middleware are the
//! HTTP layer's (`src/http/metrics.rs`).
//!
//! Names are `streamwatch_<subsystem>_<noun>_<unit|total>`; labels are bounded (route
//! templates, statuses, outcomes; never ids or URLs). `docs/operations.md` lists them all.

use std::sync::OnceLock;
use std::time::Duration;

use metrics::{describe_counter, describe_gauge, describe_histogram, gauge, Unit};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::sync::watch;

use crate::db::Db;

/// Buckets of latency histograms, in seconds: 1 ms to 30 s.
const SECONDS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Buckets of the rows-per-insert histogram.
const ROWS: &[f64] = &[
    1.0, 10.0, 50.0, 100.0, 500.0, 1_000.0, 5_000.0, 10_000.0, 50_000.0, 100_000.0,
];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the process's recorder (once; later servers in the same process share it) and
/// describes every metric. Returns the handle that renders the scrape page.
pub fn install() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS)
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full("streamwatch_writer_insert_rows".into()),
                        ROWS,
                    )
                })
                .unwrap_or_else(|_| PrometheusBuilder::new());
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            // Another recorder already installed (an embedding program): ours still renders
            // what it records, which is nothing; the server keeps working.
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("a metrics recorder was already installed; /metrics will be empty");
            }
            describe();
            handle
        })
        .clone()
}

/// Samples the gauges that live in the stores, and runs the recorder's upkeep, every 15 s
/// until `stop`.
pub async fn sample(db: Db, handle: PrometheusHandle, mut stop: watch::Receiver<bool>) {
    loop {
        handle.run_upkeep();
        if db.is_ready() {
            if let Err(e) = sample_stores(&db).await {
                tracing::debug!(error = %e, "cannot sample store gauges");
            }
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(15)) => {}
            _ = stop.changed() => return,
        }
    }
}

async fn sample_stores(db: &Db) -> Result<(), sqlx::Error> {
    let by_status: Vec<(String, i64)> =
        sqlx::query_as("SELECT status, CAST(COUNT(*) AS BIGINT) FROM streams GROUP BY status")
            .fetch_all(&db.pool)
            .await?;
    for status in crate::states::StreamStatus::ALL {
        let n = by_status
            .iter()
            .find(|(s, _)| s == status.as_str())
            .map_or(0, |(_, n)| *n);
        gauge!("streamwatch_streams", "status" => status.as_str()).set(n as f64);
    }
    let (sessions,): (i64,) =
        sqlx::query_as("SELECT CAST(COUNT(*) AS BIGINT) FROM sessions WHERE expires_at > $1")
            .bind(crate::time::now_ms())
            .fetch_one(&db.pool)
            .await?;
    gauge!("streamwatch_auth_sessions_active").set(sessions as f64);
    Ok(())
}

/// What kind of metric a name is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// Every metric of the service: name, kind, help text. `docs/operations.md` documents each one
/// and `docs/grafana-dashboard.json` charts them (a test keeps the three in step).
const METRICS: &[(&str, Kind, &str)] = &[
    (
        "streamwatch_http_requests_total",
        Kind::Counter,
        "HTTP requests answered, by route template, method and status class",
    ),
    (
        "streamwatch_http_request_duration_seconds",
        Kind::Histogram,
        "Time to answer an HTTP request, by route template and method",
    ),
    (
        "streamwatch_http_connections_open",
        Kind::Gauge,
        "HTTP connections open now",
    ),
    (
        "streamwatch_telemetry_batches_total",
        Kind::Counter,
        "Telemetry batches by outcome: accepted, or refused for auth, validation or store",
    ),
    (
        "streamwatch_telemetry_events_total",
        Kind::Counter,
        "Telemetry events in batches by outcome (refusals before parsing count no events)",
    ),
    (
        "streamwatch_writer_inserts_total",
        Kind::Counter,
        "Inserts of the batch writer into the telemetry store, by result",
    ),
    (
        "streamwatch_writer_insert_rows",
        Kind::Histogram,
        "Rows per insert of the batch writer",
    ),
    (
        "streamwatch_writer_insert_duration_seconds",
        Kind::Histogram,
        "Time of one insert into the telemetry store",
    ),
    (
        "streamwatch_writer_queue_depth",
        Kind::Gauge,
        "Submissions waiting for the batch writer",
    ),
    (
        "streamwatch_writer_writes_in_flight",
        Kind::Gauge,
        "Inserts under way",
    ),
    (
        "streamwatch_writer_store_errors_total",
        Kind::Counter,
        "Failed inserts by kind: retryable (network, timeout, store down) or permanent",
    ),
    (
        "streamwatch_telemetry_store_up",
        Kind::Gauge,
        "1 while the telemetry store answers (the circuit breaker is closed), else 0",
    ),
    (
        "streamwatch_telemetry_store_breaker_opens_total",
        Kind::Counter,
        "Times the telemetry store's circuit breaker opened",
    ),
    (
        "streamwatch_keycache_lookups_total",
        Kind::Counter,
        "API key lookups by result: hit or miss of the cache",
    ),
    (
        "streamwatch_keycache_invalidations_total",
        Kind::Counter,
        "Key cache invalidations (mint, revoke, a peer's notice, a lost listener)",
    ),
    (
        "streamwatch_probes_total",
        Kind::Counter,
        "Probes recorded, by status and anomaly class",
    ),
    (
        "streamwatch_probe_duration_seconds",
        Kind::Histogram,
        "Latency of a probe (the origin's time, not the prober's own waits)",
    ),
    (
        "streamwatch_prober_lateness_seconds",
        Kind::Histogram,
        "How late after its due time a probe started",
    ),
    (
        "streamwatch_prober_deferred_total",
        Kind::Counter,
        "Probes deferred without a verdict, by reason: host_rate, body_budget",
    ),
    (
        "streamwatch_streams",
        Kind::Gauge,
        "Registered streams by status",
    ),
    (
        "streamwatch_auth_sign_ins_total",
        Kind::Counter,
        "Sign-in attempts by outcome",
    ),
    (
        "streamwatch_auth_sign_ups_total",
        Kind::Counter,
        "Sign-up attempts by outcome",
    ),
    (
        "streamwatch_auth_sessions_created_total",
        Kind::Counter,
        "Sessions issued (sign-up and sign-in)",
    ),
    (
        "streamwatch_auth_sessions_active",
        Kind::Gauge,
        "Sessions not expired",
    ),
    (
        "streamwatch_auth_password_changes_total",
        Kind::Counter,
        "Password change attempts by outcome",
    ),
    (
        "streamwatch_auth_invitations_created_total",
        Kind::Counter,
        "Invitation links minted by the owner",
    ),
    (
        "streamwatch_alert_deliveries_total",
        Kind::Counter,
        "Alert delivery attempts by outcome: sent, retry, failed, dead",
    ),
    (
        "streamwatch_alert_delivery_duration_seconds",
        Kind::Histogram,
        "Time of one alert delivery attempt",
    ),
    (
        "streamwatch_qoe_refresh_steps_total",
        Kind::Counter,
        "QoE refresher steps by result: ok, error",
    ),
    (
        "streamwatch_qoe_refresh_duration_seconds",
        Kind::Histogram,
        "Time of one QoE refresher step",
    ),
    (
        "streamwatch_qoe_refresh_views_total",
        Kind::Counter,
        "Views the QoE refresher wrote, by source: live (memory), read_back (the stored events)",
    ),
    (
        "streamwatch_qoe_refresh_last_success_timestamp_seconds",
        Kind::Gauge,
        "Start (Unix time) of the last QoE refresher step that succeeded: qoe_views holds what was acknowledged before it",
    ),
    (
        "streamwatch_spool_bytes",
        Kind::Gauge,
        "Bytes held by the telemetry spool (as counted against STREAMWATCH_SPOOL_MAX)",
    ),
    (
        "streamwatch_spool_batches",
        Kind::Gauge,
        "Telemetry batches held by the spool, acknowledged and not yet drained into ClickHouse",
    ),
    (
        "streamwatch_spool_oldest_age_seconds",
        Kind::Gauge,
        "Age of the oldest batch in the spool (0 when empty): how far ClickHouse is behind",
    ),
    (
        "streamwatch_spool_drained_total",
        Kind::Counter,
        "Spooled telemetry drained into ClickHouse, by unit: batches, events",
    ),
    (
        "streamwatch_spool_drain_insert_duration_seconds",
        Kind::Histogram,
        "Time of one drain insert into ClickHouse (many spooled batches)",
    ),
    (
        "streamwatch_spool_quarantined_batches",
        Kind::Gauge,
        "Spooled batches moved aside because their checksum failed (kept across restarts)",
    ),
    (
        "streamwatch_spool_undecodable_total",
        Kind::Counter,
        "Spooled batches dropped because they could not be read back",
    ),
    (
        "streamwatch_qoe_live_views",
        Kind::Gauge,
        "Views held whole in memory by the live views (at most 65,536)",
    ),
    (
        "streamwatch_qoe_live_views_over_cap_total",
        Kind::Counter,
        "Views that came to the live views while they held their cap, read back from the store instead",
    ),
];

/// Help texts and units of every metric, as Prometheus shows them.
fn describe() {
    for (name, kind, help) in METRICS {
        match kind {
            Kind::Counter => describe_counter!(*name, *help),
            Kind::Gauge => describe_gauge!(*name, *help),
            Kind::Histogram if name.ends_with("_seconds") => {
                describe_histogram!(*name, Unit::Seconds, *help)
            }
            Kind::Histogram => describe_histogram!(*name, *help),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_is_documented_and_the_dashboard_charts_only_real_ones() {
        let docs = include_str!("../docs/operations.md");
        for (name, _, _) in METRICS {
            assert!(
                docs.contains(&format!("`{name}`")),
                "{name} is not in docs/operations.md"
            );
        }
        let dashboard = include_str!("../docs/grafana-dashboard.json");
        let mut charted = 0;
        for word in dashboard.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if let Some(name) = word.strip_prefix("streamwatch_") {
                let base = ["_bucket", "_count", "_sum"]
                    .iter()
                    .find_map(|s| name.strip_suffix(s))
                    .unwrap_or(name);
                let full = format!("streamwatch_{base}");
                assert!(
                    METRICS.iter().any(|(n, _, _)| *n == full),
                    "the dashboard charts {word}, which the service does not record"
                );
                charted += 1;
            }
        }
        assert!(charted >= METRICS.len());
    }
}
