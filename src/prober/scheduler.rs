//! The probe scheduler: claims due streams from the store with row leases, probes each
//! through the [`Fetcher`], classifies the result and records it (decisions.md §6).
//!
//! Timing rules:
//!
//! * A stream is due every `probe-interval`, or every quarter of it while its last probe was
//!   not healthy. The next due time is computed from the previous *due* time
//!   (`next = due + period ± 5 %`), not from the completion time, so lateness does not
//!   accumulate; when that is already past (downtime, a probe slower than its period) the
//!   stream is re-spread to a random time within one period.
//! * A newly registered stream is due at its creation time and is picked up by the next
//!   poll (at most [`SchedulerConfig::max_tick`] later); its first probe sets its phase.
//! * The poll loop sleeps until the earliest due time, within
//!   [`SchedulerConfig::min_tick`]..=[`SchedulerConfig::max_tick`], so due streams are
//!   claimed in batches; a probe that schedules its stream before the loop's planned wake-up
//!   (short periods) wakes it early.
//! * At start-up, streams overdue by more than [`STARTUP_GRACE`] (the service was down) get
//!   a random due time within one interval: no thundering herd.
//!
//! Work sharing: each poll leases at most as many due streams as there are free probe slots
//! ([`SchedulerConfig::max_in_flight`]) with one `UPDATE … RETURNING` (on PostgreSQL with
//! `FOR UPDATE SKIP LOCKED`, so several instances claim disjoint streams). The lease lasts
//! the probe timeout plus [`LEASE_MARGIN`]; recording the probe clears it and stores the
//! next due time, so each stream is probed once per period overall. A crashed instance's
//! leases simply expire.
//!
//! Staleness memory ([`StalenessTracker`]) lives in the instance; with several instances a
//! stream's observations are split between them, which delays (never falsifies) the verdict.
//! Clocks: due times and leases are wall-clock epoch milliseconds of the instances, so
//! instances sharing a database need synchronised clocks (NTP).
//!
//! Shutdown: when the stop signal fires no more streams are claimed, and [`Scheduler::run`]
//! returns once every in-flight probe is recorded.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rand::Rng;
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use crate::config::Config;
use crate::db::Db;
use crate::prober::classify::{classify, last_action, Classified};
use crate::prober::fetch::{Fetcher, NotProbed};
use crate::prober::manifest::StalenessTracker;
use crate::prober::pacer::host_key;
use crate::probes::{DueStream, NewProbe, ProbeStatus, Probes};
use crate::time::now_ms;

/// Default bound on probes in flight per instance. A probe holds one small task and at most
/// one manifest body, so 256 stays well inside the memory budget while sustaining
/// 256 / probe-timeout probes per second even when every origin hangs.
pub const MAX_IN_FLIGHT: usize = 256;

/// Added to the probe timeout to get the lease: covers recording the probe.
pub const LEASE_MARGIN: Duration = Duration::from_secs(15);

/// Streams overdue by more than this at start-up are re-spread over one interval. Smaller
/// lateness is the normal backlog of a running peer instance and is left alone.
pub const STARTUP_GRACE: Duration = Duration::from_secs(2);

/// Pause after a failed store query before polling again.
const ERROR_BACKOFF: Duration = Duration::from_secs(1);

/// How often the staleness memory is pruned of streams that no longer exist.
const TRACKER_PRUNE_EVERY: Duration = Duration::from_secs(600);

/// A stream whose host is booked further ahead than this is not probed now: it is deferred
/// to when its host has a free slot, so it does not sit in a probe slot that another host's
/// stream could use (see [`crate::prober::pacer`]).
const MAX_HOST_BACKLOG: Duration = Duration::from_secs(1);

/// A probe that ended without a verdict ([`NotProbed`]) is tried again this much later.
const NOT_PROBED_RETRY: Duration = Duration::from_secs(5);

/// Settings of the scheduler.
#[derive(Clone, Debug)]
pub struct SchedulerConfig {
    /// Time between two probes of a healthy stream.
    pub interval: Duration,
    /// Whole-probe timeout (the fetcher enforces it; the lease is derived from it).
    pub probe_timeout: Duration,
    /// A successful probe slower than this is `degraded / slow response`.
    pub slow_ms: u64,
    /// Probes in flight at once in this instance.
    pub max_in_flight: usize,
}

impl SchedulerConfig {
    /// The scheduler settings of the service configuration.
    pub fn from_config(config: &Config) -> Self {
        Self {
            interval: config.probe_interval,
            probe_timeout: config.probe_timeout,
            slow_ms: config.slow_ms,
            max_in_flight: MAX_IN_FLIGHT,
        }
    }

    /// Period until the next probe after a probe with `status`: the interval when healthy,
    /// a quarter of it otherwise (at least 1 ms).
    pub fn period_ms(&self, status: ProbeStatus) -> i64 {
        let interval = duration_ms(self.interval).max(1);
        match status {
            ProbeStatus::Healthy => interval,
            ProbeStatus::Degraded | ProbeStatus::Failing => (interval / 4).max(1),
        }
    }

    /// Longest pause between two polls of the store: bounds how late a newly registered
    /// stream is picked up. One second, or the shortest period when that is shorter.
    pub fn max_tick(&self) -> Duration {
        (self.interval / 4).clamp(Duration::from_millis(10), Duration::from_secs(1))
    }

    /// Shortest pause between two polls that found nothing more to claim: lets due streams
    /// gather into one claim instead of one query per stream.
    pub fn min_tick(&self) -> Duration {
        Duration::from_millis(100).min(self.max_tick())
    }

    /// Lease length: the probe timeout plus [`LEASE_MARGIN`].
    pub fn lease_ms(&self) -> i64 {
        duration_ms(self.probe_timeout + LEASE_MARGIN)
    }
}

/// The next due time after a probe that was due at `due_at` and finished at `now`:
/// `due_at + period + jitter` with `jitter` in ±5 % of the period; if that is not in the
/// future, a random time in `[now, now + period)`.
pub fn next_due_at(due_at: i64, period_ms: i64, now: i64, rng: &mut impl Rng) -> i64 {
    let period_ms = period_ms.max(1);
    let spread = period_ms / 20;
    let jitter = if spread > 0 {
        rng.gen_range(-spread..=spread)
    } else {
        0
    };
    let next = due_at.saturating_add(period_ms).saturating_add(jitter);
    if next > now {
        next
    } else {
        now + rng.gen_range(0..period_ms)
    }
}

/// What the poll loop does next.
enum Next {
    /// More streams may be due right now: poll again at once.
    Poll,
    /// Every probe slot is busy: wait for one to free up.
    WaitForSlot,
    /// Nothing more is due: sleep this long.
    Sleep(Duration),
}

/// State shared by the poll loop and the probe tasks.
struct Shared {
    probes: Probes,
    fetcher: Fetcher,
    cfg: SchedulerConfig,
    /// Staleness memory of live playlists, keyed by stream id.
    tracker: Mutex<StalenessTracker<String>>,
    /// Streams being probed by this instance (a lease that expired under a very slow store
    /// write must not start a second probe of the same stream here).
    in_flight: Mutex<HashSet<String>>,
    /// When the sleeping poll loop plans to wake (epoch ms).
    wake_at: AtomicI64,
    /// Wakes the poll loop early: a probe scheduled its stream before `wake_at`.
    wake: Notify,
}

/// The prober's scheduling loop. Build with [`Scheduler::new`], run with [`Scheduler::run`].
pub struct Scheduler {
    shared: Arc<Shared>,
}

impl Scheduler {
    /// A scheduler probing the streams of `db` with `fetcher`.
    pub fn new(db: Db, fetcher: Fetcher, cfg: SchedulerConfig) -> Self {
        Self {
            shared: Arc::new(Shared {
                probes: Probes::new(db),
                fetcher,
                cfg,
                tracker: Mutex::new(StalenessTracker::new()),
                in_flight: Mutex::new(HashSet::new()),
                wake_at: AtomicI64::new(i64::MAX),
                wake: Notify::new(),
            }),
        }
    }

    /// Probes due streams until `stop` turns true (or its sender is dropped), then waits for
    /// the probes in flight to be recorded.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let cfg = &self.shared.cfg;
        tracing::info!(
            interval_ms = duration_ms(cfg.interval),
            timeout_ms = duration_ms(cfg.probe_timeout),
            max_in_flight = cfg.max_in_flight,
            "prober started"
        );
        self.spread_overdue().await;
        let slots = Arc::new(Semaphore::new(cfg.max_in_flight.max(1)));
        let mut probes = JoinSet::new();
        let mut last_prune = Instant::now();
        while !*stop.borrow() {
            while let Some(done) = probes.try_join_next() {
                propagate_panic(done);
            }
            let next = self.poll(&slots, &mut probes).await;
            let stopped = match next {
                Next::Poll => false,
                Next::WaitForSlot => tokio::select! {
                    // The permit is dropped at once: the next poll claims by free slots.
                    _ = slots.acquire() => false,
                    changed = stop.changed() => changed.is_err() || *stop.borrow(),
                },
                Next::Sleep(pause) => {
                    let wake_at = now_ms().saturating_add(duration_ms(pause));
                    self.shared.wake_at.store(wake_at, Ordering::Relaxed);
                    let stopped = tokio::select! {
                        () = tokio::time::sleep(pause) => false,
                        () = self.shared.wake.notified() => false,
                        changed = stop.changed() => changed.is_err() || *stop.borrow(),
                    };
                    self.shared.wake_at.store(i64::MAX, Ordering::Relaxed);
                    stopped
                }
            };
            if stopped {
                break;
            }
            if last_prune.elapsed() >= TRACKER_PRUNE_EVERY {
                last_prune = Instant::now();
                self.prune_tracker().await;
            }
        }
        let in_flight = probes.len();
        tracing::info!(in_flight, "prober stopping, waiting for probes in flight");
        while let Some(done) = probes.join_next().await {
            propagate_panic(done);
        }
        tracing::info!("prober stopped");
    }

    /// Start-up: re-spread streams left overdue by downtime over one interval.
    async fn spread_overdue(&self) {
        let cfg = &self.shared.cfg;
        let now = now_ms();
        let overdue_before = now - duration_ms(STARTUP_GRACE);
        match self
            .shared
            .probes
            .spread_overdue(now, overdue_before, duration_ms(cfg.interval))
            .await
        {
            Ok(0) => {}
            Ok(moved) => {
                tracing::info!(streams = moved, "spread overdue streams over one interval")
            }
            Err(e) => tracing::warn!(error = %e, "cannot spread overdue streams"),
        }
    }

    /// One poll: claims as many due streams as there are free slots and starts their probes.
    async fn poll(&self, slots: &Arc<Semaphore>, probes: &mut JoinSet<()>) -> Next {
        let cfg = &self.shared.cfg;
        let free = slots.available_permits();
        if free == 0 {
            return Next::WaitForSlot;
        }
        let now = now_ms();
        let claimed = match self
            .shared
            .probes
            .claim_due(now, now + cfg.lease_ms(), free)
            .await
        {
            Ok(claimed) => claimed,
            Err(e) => {
                tracing::warn!(error = %e, "cannot claim due streams");
                return Next::Sleep(ERROR_BACKOFF);
            }
        };
        let count = claimed.len();
        // Streams of one saturated host deferred in this poll queue up behind each other at
        // the host's rate, so each comes back when a slot is free for it (not all at once).
        let mut queued: HashMap<String, u32> = HashMap::new();
        let mut deferred = Vec::new();
        for due in claimed {
            let slot = match self.book_first_request(&due) {
                Ok(slot) => slot,
                Err((host, free_in)) => {
                    let ahead = queued.entry(host).or_default();
                    let eta = free_in + self.shared.fetcher.pacer().spacing() * *ahead;
                    *ahead += 1;
                    deferred.push((due.id, jittered(now + duration_ms(eta))));
                    continue;
                }
            };
            // Only this loop takes permits, so one is free for every claimed stream.
            let Ok(permit) = Arc::clone(slots).try_acquire_owned() else {
                tracing::warn!(stream_id = %due.id, "no free probe slot, lease will expire");
                continue;
            };
            if let Some(token) = InFlight::enter(&self.shared, &due.id) {
                probes.spawn(probe_one(
                    Arc::clone(&self.shared),
                    due,
                    slot,
                    permit,
                    token,
                ));
            }
        }
        if !deferred.is_empty() {
            // One statement for the whole poll: a saturated host can defer hundreds of streams
            // per poll, and the loop must get back to the other hosts' streams.
            tracing::debug!(
                streams = deferred.len(),
                "probes deferred by the host rate limit"
            );
            if let Err(e) = self.shared.probes.defer_many(&deferred).await {
                tracing::warn!(error = %e, "cannot defer probes, leases will expire");
            }
        }
        if count == free {
            return if slots.available_permits() == 0 {
                Next::WaitForSlot
            } else {
                Next::Poll
            };
        }
        Next::Sleep(self.pause_until_next_due(now).await)
    }

    /// How long to sleep when nothing more is due: until the earliest due time, within
    /// [`SchedulerConfig::min_tick`]..=[`SchedulerConfig::max_tick`].
    async fn pause_until_next_due(&self, now: i64) -> Duration {
        let cfg = &self.shared.cfg;
        let until = match self.shared.probes.next_due_at(now).await {
            Ok(Some(due)) => Duration::from_millis(u64::try_from(due - now_ms()).unwrap_or(0)),
            Ok(None) => cfg.max_tick(),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the next due time");
                cfg.max_tick()
            }
        };
        until.clamp(cfg.min_tick(), cfg.max_tick())
    }

    /// Books the probe's first request on its host, or tells how long until the host has a
    /// slot when that is further off than [`MAX_HOST_BACKLOG`]. (A URL that does not parse
    /// books nothing: the fetcher refuses it without a request.)
    fn book_first_request(
        &self,
        due: &DueStream,
    ) -> Result<Option<tokio::time::Instant>, (String, Duration)> {
        let Ok(url) = url::Url::parse(&due.source_url) else {
            return Ok(None);
        };
        let host = host_key(&url);
        let pacer = self.shared.fetcher.pacer();
        match pacer.try_book(&host, MAX_HOST_BACKLOG) {
            Some(slot) => Ok(Some(slot)),
            None => {
                let backlog = pacer.backlog(&host);
                Err((host, backlog))
            }
        }
    }

    /// Drops staleness memory of streams that no longer exist.
    async fn prune_tracker(&self) {
        match self.shared.probes.stream_ids().await {
            Ok(ids) => lock(&self.shared.tracker).retain(|id| ids.contains(id)),
            Err(e) => tracing::warn!(error = %e, "cannot list streams to prune staleness memory"),
        }
    }
}

/// Marks a stream as being probed by this instance for as long as the token lives.
struct InFlight {
    shared: Arc<Shared>,
    id: String,
}

impl InFlight {
    /// `None` when the stream is already being probed here.
    fn enter(shared: &Arc<Shared>, id: &str) -> Option<Self> {
        if !lock(&shared.in_flight).insert(id.to_owned()) {
            tracing::debug!(stream_id = id, "stream already being probed here, skipped");
            return None;
        }
        Some(Self {
            shared: Arc::clone(shared),
            id: id.to_owned(),
        })
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        lock(&self.shared.in_flight).remove(&self.id);
    }
}

/// Probes one claimed stream and records the result; the permit and token are released
/// when it is recorded.
async fn probe_one(
    shared: Arc<Shared>,
    due: DueStream,
    first_slot: Option<tokio::time::Instant>,
    _permit: OwnedSemaphorePermit,
    _token: InFlight,
) {
    let cfg = &shared.cfg;
    let started_at = now_ms();
    let fetched = match shared
        .fetcher
        .fetch_manifest_booked(&due.source_url, first_slot)
        .await
    {
        Ok(fetched) => fetched,
        Err(NotProbed(why)) => {
            defer(&shared, &due, now_ms() + duration_ms(NOT_PROBED_RETRY), why).await;
            return;
        }
    };
    let outcome = {
        let mut tracker = lock(&shared.tracker);
        fetched
            .outcome
            .with_staleness(&mut tracker, due.id.clone(), Instant::now())
    };
    let classified = classify(&outcome, fetched.latency_ms, cfg.slow_ms);
    let row = probe_row(&due, &classified, fetched.latency_ms, started_at, cfg);
    log_probe(&due, &row, started_at);
    match shared.probes.record(&row).await {
        Ok(Some(_)) => {
            // Short periods (tests, a quarter of a short interval) may fall due before the
            // loop's next planned poll: wake it so lateness stays within one short tick.
            if row.next_probe_at < shared.wake_at.load(Ordering::Relaxed) {
                shared.wake.notify_one();
            }
        }
        Ok(None) => {
            // Deleted while being probed: forget it.
            lock(&shared.tracker).forget(&due.id);
        }
        Err(e) => {
            tracing::warn!(stream_id = %due.id, error = %e, "cannot record probe, lease will expire");
        }
    }
}

/// Releases a claimed stream unprobed, due again at `next_at` (jittered).
async fn defer(shared: &Shared, due: &DueStream, next_at: i64, why: &'static str) {
    let next_at = jittered(next_at);
    tracing::debug!(stream_id = %due.id, why, next_at, "probe deferred");
    metrics::counter!("streamwatch_prober_deferred_total", "reason" => "body_budget").increment(1);
    if let Err(e) = shared.probes.defer_many(&[(due.id.clone(), next_at)]).await {
        tracing::warn!(stream_id = %due.id, error = %e, "cannot defer probe, lease will expire");
    }
}

/// `next_at` pushed back by 0–10 % of the wait (at least a second's worth), so deferred
/// streams do not come back as one burst.
fn jittered(next_at: i64) -> i64 {
    let spread = (next_at - now_ms()).max(1000) / 10;
    next_at + rand::thread_rng().gen_range(0..=spread)
}

/// The probe row and snapshot update of one classified probe (decisions.md §6).
fn probe_row(
    due: &DueStream,
    classified: &Classified,
    latency_ms: u64,
    started_at: i64,
    cfg: &SchedulerConfig,
) -> NewProbe {
    let period = cfg.period_ms(classified.status);
    // A stream's first probe sets its phase (it may have waited up to one poll tick since
    // registration); afterwards the schedule follows the due times.
    let base = if due.previous.is_none() {
        started_at.max(due.due_at)
    } else {
        due.due_at
    };
    NewProbe {
        stream_id: due.id.clone(),
        status: classified.status,
        anomaly_class: classified.anomaly_class,
        latency_ms: i64::try_from(latency_ms).unwrap_or(i64::MAX),
        http_status: classified.http_status,
        detail: classified.detail.clone(),
        created_at: started_at,
        playable: classified.playable(),
        last_action: last_action(due.previous, due.down_streak, classified, latency_ms),
        next_probe_at: next_due_at(base, period, now_ms(), &mut rand::thread_rng()),
    }
}

/// One debug line per probe; an info line when the stream changes status.
fn log_probe(due: &DueStream, row: &NewProbe, started_at: i64) {
    let lateness_ms = started_at - due.due_at;
    metrics::counter!(
        "streamwatch_probes_total",
        "status" => row.status.as_str(),
        "anomaly_class" => row.anomaly_class.as_str()
    )
    .increment(1);
    metrics::histogram!("streamwatch_probe_duration_seconds")
        .record(row.latency_ms.max(0) as f64 / 1000.0);
    metrics::histogram!("streamwatch_prober_lateness_seconds")
        .record(lateness_ms.max(0) as f64 / 1000.0);
    if due.previous.is_some_and(|p| p != row.status) {
        tracing::info!(
            stream_id = %due.id,
            from = due.previous.map(ProbeStatus::as_str),
            to = %row.status,
            detail = %row.detail,
            "stream status changed"
        );
    }
    tracing::debug!(
        stream_id = %due.id,
        status = %row.status,
        latency_ms = row.latency_ms,
        lateness_ms,
        detail = %row.detail,
        "probe recorded"
    );
}

/// A probe task that panicked takes the prober down with it, and with the prober the process
/// (see `crate::supervisor`): a prober that quietly lost a probe would report stale health.
fn propagate_panic(done: Result<(), tokio::task::JoinError>) {
    if let Err(e) = done {
        if e.is_panic() {
            std::panic::resume_unwind(e.into_panic());
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    use super::*;
    use crate::prober::classify::classify;

    fn cfg(interval_ms: u64) -> SchedulerConfig {
        SchedulerConfig {
            interval: Duration::from_millis(interval_ms),
            probe_timeout: Duration::from_secs(10),
            slow_ms: 2000,
            max_in_flight: 4,
        }
    }

    #[test]
    fn not_healthy_streams_get_a_quarter_period() {
        let c = cfg(30_000);
        assert_eq!(c.period_ms(ProbeStatus::Healthy), 30_000);
        assert_eq!(c.period_ms(ProbeStatus::Degraded), 7_500);
        assert_eq!(c.period_ms(ProbeStatus::Failing), 7_500);
        assert_eq!(c.lease_ms(), 25_000);
    }

    #[test]
    fn ticks_are_bounded_by_the_quarter_interval() {
        assert_eq!(cfg(30_000).max_tick(), Duration::from_secs(1));
        assert_eq!(cfg(30_000).min_tick(), Duration::from_millis(100));
        assert_eq!(cfg(200).max_tick(), Duration::from_millis(50));
        assert_eq!(cfg(200).min_tick(), Duration::from_millis(50));
    }

    #[test]
    fn next_due_follows_the_previous_due_time_not_completion() {
        let mut rng = StdRng::seed_from_u64(7);
        for _ in 0..1000 {
            // Finished 9 s late: the schedule keeps its phase.
            let next = next_due_at(100_000, 30_000, 109_000, &mut rng);
            assert!((128_500..=131_500).contains(&next), "{next}");
        }
    }

    fn due(previous: Option<ProbeStatus>, due_at: i64) -> DueStream {
        DueStream {
            id: "s".into(),
            source_url: "http://127.0.0.1/x.m3u8".into(),
            due_at,
            previous,
            down_streak: 0,
        }
    }

    fn classified(status: ProbeStatus) -> Classified {
        let outcome = match status {
            ProbeStatus::Healthy => crate::prober::fetch::ProbeOutcome::Ok {
                http_status: 200,
                manifest: crate::prober::manifest::ManifestCheck::Valid(
                    crate::prober::manifest::ManifestSummary {
                        kind: crate::prober::manifest::ManifestKind::HlsMedia,
                        media: None,
                        dash: None,
                    },
                ),
            },
            ProbeStatus::Degraded => crate::prober::fetch::ProbeOutcome::HttpStatus(404),
            ProbeStatus::Failing => crate::prober::fetch::ProbeOutcome::HttpStatus(503),
        };
        classify(&outcome, 10, 2000)
    }

    #[test]
    fn next_probe_is_an_interval_after_healthy_and_a_quarter_after_not_healthy() {
        let c = cfg(40_000);
        // Due times in the future relative to the probe, so no re-spread kicks in.
        let base = now_ms() + 60_000;
        for _ in 0..200 {
            for (status, period) in [
                (ProbeStatus::Healthy, 40_000),
                (ProbeStatus::Degraded, 10_000),
                (ProbeStatus::Failing, 10_000),
            ] {
                let row = probe_row(
                    &due(Some(ProbeStatus::Healthy), base),
                    &classified(status),
                    10,
                    base - 5,
                    &c,
                );
                let gap = row.next_probe_at - base;
                assert!(
                    (period * 95 / 100..=period * 105 / 100).contains(&gap),
                    "{status}: {gap}"
                );
                assert_eq!(row.playable, status == ProbeStatus::Healthy);
            }
        }
    }

    #[test]
    fn a_first_probe_sets_the_phase_from_its_start() {
        let c = cfg(40_000);
        let registered = now_ms() + 60_000;
        // Picked up 300 ms after registration: the schedule starts from the probe.
        let row = probe_row(
            &due(None, registered),
            &classified(ProbeStatus::Healthy),
            10,
            registered + 300,
            &c,
        );
        let gap = row.next_probe_at - (registered + 300);
        assert!((38_000..=42_000).contains(&gap), "{gap}");
    }

    #[test]
    fn jitter_averages_out() {
        let mut rng = StdRng::seed_from_u64(1);
        let mut due = 0;
        for _ in 0..1000 {
            due = next_due_at(due, 30_000, due, &mut rng);
        }
        let drift = (due - 30_000 * 1000).abs();
        assert!(drift < 30_000 * 3, "random walk stays small: {drift}");
    }

    #[test]
    fn a_missed_schedule_is_re_spread_within_one_period() {
        let mut rng = StdRng::seed_from_u64(3);
        let mut seen = (i64::MAX, i64::MIN);
        for _ in 0..1000 {
            let next = next_due_at(0, 30_000, 1_000_000, &mut rng);
            assert!((1_000_000..1_030_000).contains(&next), "{next}");
            seen = (seen.0.min(next), seen.1.max(next));
        }
        assert!(seen.1 - seen.0 > 25_000, "spread over the period: {seen:?}");
    }
}
