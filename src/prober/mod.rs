//! The prober: fetches each stream's manifest through the SSRF guard on a schedule, checks
//! it (HLS/DASH, staleness), classifies the outcome and records the probe.
//!
//! * [`scheduler`] — claims due streams with row leases, runs probes with bounded
//!   concurrency, records them; shuts down after the probes in flight are recorded.
//! * [`fetch`] — one probe's guarded HTTP work (redirects by hand, whole-probe timeout).
//! * [`manifest`] — HLS/DASH checks and the staleness memory.
//! * [`classify`] — outcome → probe status, anomaly class, detail, `lastAction`.
//! * [`pacer`] — at most `STREAMWATCH_PROBE_HOST_RATE` requests per second to one host.
//! * [`retention`] — deletes probe rows older than 30 days.

pub mod classify;
pub mod fetch;
pub mod manifest;
pub mod pacer;
pub mod retention;
pub mod scheduler;

use std::sync::Arc;

use crate::config::Config;
use crate::db::Db;
use crate::ssrf::Guard;
use fetch::{BuildError, FetchConfig, Fetcher};
use scheduler::{Scheduler, SchedulerConfig};

/// The service's scheduler: the configured interval, timeout and slow threshold, probing
/// through `guard` (the same guard that checks registrations).
pub fn scheduler(config: &Config, db: Db, guard: Guard) -> Result<Scheduler, BuildError> {
    let mut fetch = FetchConfig::new(config.probe_timeout);
    fetch.host_rate = config.probe_host_rate;
    let fetcher = Fetcher::new(Arc::new(guard), fetch)?;
    Ok(Scheduler::new(
        db,
        fetcher,
        SchedulerConfig::from_config(config),
    ))
}
