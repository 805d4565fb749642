//! The refresher: keeps each engine's `qoe_views` table up to date with the stored
//! telemetry, so an acknowledged batch is reflected in every QoE route within
//! `STREAMWATCH_QOE_REFRESH` (analytics.md §4, default 10 s).
//!
//! Every `every`, a step finds the views touched since its watermark, loads their
//! deduplicated events and batch records, derives them with [`crate::view::View::derive`]
//! (one code path for both engines) and upserts them; then it moves the watermark.
//!
//! - **SQLite** (`refresh/sqlite.rs`): the watermark is the last `view_batches.id` derived; the
//!   step is exact (every record above the watermark, nothing else), and writes the views
//!   the process is ingesting from memory ([`crate::live`]) once a count showed memory
//!   holds all of their records.
//! - **ClickHouse** (`refresh/clickhouse/`): the watermark is the server time of the last step's
//!   start; a step looks again at a margin before it for records still in flight, reads
//!   only what changed since its own last step, writes the views the process is ingesting
//!   from memory ([`crate::live`]), and recovers the records a server restart may have
//!   lost. Its module says how, step by step.
//!
//! Crash-safe: the watermark is persisted (`qoe_refresh_state`) only after a step's
//! upserts, so a restart re-derives whatever the interrupted step had not finished. (A step
//! writes its derived views in batches, on ClickHouse while their events still stream in, so
//! an interrupted step may have upserted some: each is a whole derivation, and the next step
//! derives it again.)
//! Several instances may refresh the same ClickHouse: each upsert carries
//! `version` = records × 2³² + distinct events of its derivation, and `ReplacingMergeTree`
//! keeps the highest, so the row derived from the most data wins in any order; the
//! shared watermark only ever moves forward (the highest value wins). A retried batch
//! adds a record with the same content, which derives the same view.

mod clickhouse;
mod sqlite;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::live::LiveViews;
use crate::store::{AnalyticsError, Engine, Store};

/// Default interval between refresh steps (`STREAMWATCH_QOE_REFRESH`).
pub const DEFAULT_EVERY: Duration = Duration::from_secs(10);

/// Tuning of the refresher.
#[derive(Debug, Clone, Copy)]
pub struct RefreshConfig {
    /// ClickHouse: how far before the watermark a step looks again for records that
    /// were still in flight (default 60 s; above the 30 s insert timeout).
    pub margin: Duration,
    /// Views loaded and derived per round trip (default 100,000; SQLite takes at most
    /// 10,000). On ClickHouse the sessions of a step are scattered over the sort key of
    /// `telemetry_events` and `view_batches` when their ids are random (SDK 0.1.0), so each round trip
    /// reads most of the owner's granules whatever its size: few large round trips are
    /// far cheaper than many small ones (docs/benchmarks.md, "QoE store").
    pub chunk: usize,
}

impl Default for RefreshConfig {
    fn default() -> Self {
        RefreshConfig {
            margin: Duration::from_secs(60),
            chunk: 100_000,
        }
    }
}

/// What a refresher remembers between steps.
#[derive(Debug, Clone, Default)]
pub struct RefreshState {
    /// SQLite: last derived `view_batches.id`; ClickHouse: server time (epoch s) of the
    /// last completed step. `None` before the first step (read from the store then).
    pub watermark: Option<i64>,
    /// ClickHouse: what the last completed step of this refresher saw (`None` before it,
    /// and after a restart: the next step then checks every session of its window).
    pub recent: Option<RecentRecords>,
}

/// ClickHouse: what the last completed step of this refresher saw, so the next one reads
/// only what is new instead of every record of its margin (about seven steps' worth,
/// most of them seen and derived already):
///
/// - the records written since that step started (`written_at >= watermark`), compared
///   per session with `ahead` (those the step itself saw): a session whose count did not
///   grow is skipped without a read;
/// - of the margin before it, only the seconds whose record count changed since (`seconds`):
///   records whose insert was still in flight when the step ran. Every session with a
///   record in such a second is derived again.
///
/// Both comparisons can only err towards deriving a view once too often.
#[derive(Debug, Clone, Default)]
pub struct RecentRecords {
    /// Server time (epoch s) at which that step started: the watermark it set.
    pub watermark: i64,
    /// Second of `written_at` → records of that second the step counted (its window).
    pub seconds: std::collections::BTreeMap<i64, u64>,
    /// (owner, session id) → records with `written_at >= watermark` the step saw.
    pub ahead: HashMap<(String, String), u64>,
}

/// What one step did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RefreshStats {
    /// Views touched since the watermark.
    pub candidates: usize,
    /// Views skipped because nothing new was stored for them (ClickHouse).
    pub unchanged: usize,
    /// Views derived and upserted.
    pub derived: usize,
    /// Distinct events those derivations read (or memory held).
    pub events: usize,
    /// Of the views derived, those written from the live views' memory.
    pub live: usize,
}

/// A refresher over one store: call [`Refresher::step`] (tests drive it explicitly),
/// or let [`run`] call it every interval.
#[derive(Debug, Clone)]
pub struct Refresher {
    store: Store,
    config: RefreshConfig,
    state: RefreshState,
    live: Option<Arc<LiveViews>>,
}

impl Refresher {
    /// A refresher with the default [`RefreshConfig`].
    pub fn new(store: Store) -> Self {
        Refresher::with_config(store, RefreshConfig::default())
    }

    /// A refresher with explicit tuning.
    pub fn with_config(store: Store, config: RefreshConfig) -> Self {
        Refresher {
            store,
            config,
            state: RefreshState::default(),
            live: None,
        }
    }

    /// Writes the views `live` holds whole from memory, and reads back only the others
    /// (each engine's step says how it checks that memory is the whole view).
    pub fn with_live(mut self, live: Option<Arc<LiveViews>>) -> Self {
        self.live = live;
        self
    }

    /// Derives and upserts every view touched since the last step (see the module doc).
    /// On an error nothing is lost: the watermark stays, the next step redoes the work.
    pub async fn step(&mut self) -> Result<RefreshStats, AnalyticsError> {
        if !self.store.is_ready() {
            return Err(AnalyticsError::Retryable(
                "telemetry store not ready".to_owned(),
            ));
        }
        match &self.store.engine {
            Engine::ClickHouse(ch) => {
                let pinned = ch.client.pinned();
                let step =
                    clickhouse::ChRefresh::new(pinned.client.clone(), ch.client.is_cluster())
                        .step(&mut self.state, &self.config, self.live.as_deref())
                        .await;
                match &step {
                    Ok(_) => ch.client.served(&pinned),
                    Err(e) if e.is_retryable() => ch.client.failed(&pinned, e),
                    Err(_) => {}
                }
                step
            }
            Engine::Sqlite(sq) => {
                sqlite::SqliteRefresh::new(sq.clone())
                    .step(&mut self.state, &self.config, self.live.as_deref())
                    .await
            }
        }
    }

    /// What the refresher remembers (for tests and logs).
    pub fn state(&self) -> &RefreshState {
        &self.state
    }
}

/// The step's figures for the server's `/metrics` (names in docs/operations.md): steps by
/// result and their time, views written by source, when `qoe_views` was last brought up to
/// date (what an operator alerts on: the QoE routes are that stale), the live views held
/// and those the cap turned away (read back instead).
fn record_step(
    refresher: &Refresher,
    result: &Result<RefreshStats, AnalyticsError>,
    started_at: std::time::SystemTime,
    took: Duration,
) {
    let outcome = if result.is_ok() { "ok" } else { "error" };
    metrics::counter!("streamwatch_qoe_refresh_steps_total", "result" => outcome).increment(1);
    metrics::histogram!("streamwatch_qoe_refresh_duration_seconds").record(took.as_secs_f64());
    if let Ok(stats) = result {
        let live = stats.live as u64;
        let read_back = (stats.derived as u64).saturating_sub(live);
        metrics::counter!("streamwatch_qoe_refresh_views_total", "source" => "live")
            .increment(live);
        metrics::counter!("streamwatch_qoe_refresh_views_total", "source" => "read_back")
            .increment(read_back);
        // The step covered what was acknowledged before it started.
        let covered = started_at
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        metrics::gauge!("streamwatch_qoe_refresh_last_success_timestamp_seconds")
            .set(covered.as_secs_f64());
    }
    if let Some(live) = &refresher.live {
        metrics::gauge!("streamwatch_qoe_live_views").set(live.held() as f64);
        metrics::counter!("streamwatch_qoe_live_views_over_cap_total").absolute(live.over_cap());
    }
}

/// Runs `refresher` every `every` until `stop` turns true (or its sender is dropped);
/// the server spawns it next to the ingest writer. A failed step is logged and retried at
/// the next interval; a step that outlasts the interval is followed at once by the next.
pub async fn run(mut refresher: Refresher, every: Duration, mut stop: watch::Receiver<bool>) {
    let mut failures = 0u32;
    let mut connected = false;
    loop {
        if *stop.borrow() {
            return;
        }
        let started = tokio::time::Instant::now();
        let started_at = std::time::SystemTime::now();
        // Until the store's first connection there is nothing to refresh, and the store's
        // supervisor reports the connection: no warning for every start-up.
        connected |= refresher.store.is_ready();
        if connected {
            let result = refresher.step().await;
            record_step(&refresher, &result, started_at, started.elapsed());
            match result {
                Ok(stats) => {
                    failures = 0;
                    tracing::debug!(
                        candidates = stats.candidates,
                        derived = stats.derived,
                        unchanged = stats.unchanged,
                        live = stats.live,
                        events = stats.events,
                        elapsed_ms = started.elapsed().as_millis() as u64,
                        "qoe views refreshed"
                    );
                }
                Err(e) => {
                    failures += 1;
                    // The first failure and then every tenth: an outage does not flood the log.
                    if failures == 1 || failures.is_multiple_of(10) {
                        tracing::warn!(error = %e, failures, "qoe refresh failed; retrying");
                    }
                }
            }
        }
        let pause = every.saturating_sub(started.elapsed());
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            changed = stop.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
    }
}

/// Wall-clock time in epoch ms (a view's `derived_at`, a session table's name).
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
