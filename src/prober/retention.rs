//! Retention: deletes probe rows (and hourly rollups) older than 30 days, at start-up and
//! then every hour, until the shutdown signal.

use std::time::Duration;

use tokio::sync::watch;

use crate::probes::Probes;
use crate::time::now_ms;

/// Time between two retention passes.
pub const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// Prunes now, then every [`PRUNE_EVERY`], until `stop` turns true or its sender is dropped.
pub async fn run(probes: Probes, mut stop: watch::Receiver<bool>) {
    loop {
        prune_once(&probes).await;
        let stopped = tokio::select! {
            () = tokio::time::sleep(PRUNE_EVERY) => false,
            changed = stop.changed() => changed.is_err() || *stop.borrow(),
        };
        if stopped {
            return;
        }
    }
}

/// One retention pass; a failure is logged and retried at the next pass.
async fn prune_once(probes: &Probes) {
    match probes.prune(now_ms()).await {
        Ok(0) => {}
        Ok(rows) => tracing::info!(rows, "deleted probe rows older than 30 days"),
        Err(e) => tracing::warn!(error = %e, "cannot delete old probe rows"),
    }
}
