//! Retention of the delivery log: deliveries (with their attempts) older than 30 days are
//! deleted at start-up and then every hour, until the shutdown signal (decisions.md §14).

use std::time::Duration;

use tokio::sync::watch;

use super::{outbox, Alerts};
use crate::time::now_ms;

/// Time between two passes.
pub const PURGE_EVERY: Duration = Duration::from_secs(3600);

/// Purges now, then every [`PURGE_EVERY`], until `stop` turns true or its sender is dropped.
pub async fn run(alerts: Alerts, mut stop: watch::Receiver<bool>) {
    loop {
        match outbox::purge(&alerts.db, now_ms()).await {
            Ok(0) => {}
            Ok(rows) => tracing::info!(rows, "deleted alert deliveries older than 30 days"),
            Err(e) => tracing::warn!(error = %e, "cannot delete old alert deliveries"),
        }
        let stopped = tokio::select! {
            () = tokio::time::sleep(PURGE_EVERY) => false,
            changed = stop.changed() => changed.is_err() || *stop.borrow(),
        };
        if stopped {
            return;
        }
    }
}
