//! The spool's drainer (scale.md §3): moves spooled batches into ClickHouse in order, many
//! per insert, and removes them from the spool only once ClickHouse acknowledged them.
//!
//! One loop, oldest batches first, at most [`IN_FLIGHT`] inserts in flight (one: see there):
//! 1. while the store's breaker is closed (a write would fail at once otherwise), peek up
//!    to [`PEEK_BATCHES`] batches / [`PEEK_BYTES`] bytes after those already in flight (the
//!    memory it holds: one such peek per insert in flight);
//! 2. insert their rows and records as one write through the batch writer (the same rows
//!    and dedup key as a request's write: a batch inserted twice — the process died
//!    between the insert and the removal — is collapsed like a retried request);
//! 3. take the outcomes in spool order: on success, remove the batches from the spool, then
//!    give each to the live views, so a view counts a spooled batch once it is stored; on
//!    failure, mark the views of that insert and of every later one broken (an insert that
//!    failed may be partly stored: the refresher reads them back), back off and peek again
//!    from the oldest batch still held.
//!
//! The spool left by a previous process is there at start-up, so it is drained first. The
//! loop ends only with the stop signal; it reports the spool's gauges as it goes.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use analytics::live::{Key, LiveViews};
use analytics::Event;
use ingest::spool::{RecordId, SpoolError, SpoolStats, SpooledRecord};
use ingest::{SinkWrite, SupervisedSink, WriterHandle};
use tokio::sync::watch;

use super::Spooling;

/// Inserts in flight at once. Two were measured against one in the outage run at half the
/// maximum rate (docs/benchmarks.md, "The spool's tail"): no faster catch-up (the drain is
/// bound by the CPU that ClickHouse's inserts and the live load share), and with the
/// catch-up's peeks and removals twice as dense on the spool's thread, acknowledgements
/// stalled for up to 18 s (0.6 % of batches refused). Acknowledging comes first.
const IN_FLIGHT: usize = 1;
/// Most batches in one insert.
pub const PEEK_BATCHES: usize = 20_000;
/// Most spooled bytes in one insert (their rows take about as much again in memory).
pub const PEEK_BYTES: usize = 4 << 20;
/// First pause after a failed insert; it doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// How often the gauges are refreshed while there is nothing to do.
const GAUGE_EVERY: Duration = Duration::from_secs(1);

/// Everything the drainer needs.
pub struct Drainer {
    /// The spool it empties.
    pub spooling: Spooling,
    /// Where its inserts go (the writer of the telemetry store).
    pub writer: WriterHandle,
    /// The store's breaker: while it is open, the drainer waits instead of failing.
    pub store: SupervisedSink,
    /// The live views, fed with each batch once stored.
    pub live: Option<Arc<LiveViews>>,
}

/// Spooled batches decoded for one insert.
struct Peeked {
    write: SinkWrite,
    /// Per batch, in spool order: its view, events and record (its dimensions, shared) for
    /// the live views.
    views: Vec<(Key, Vec<Event>, ingest::BatchRecord)>,
    last: RecordId,
    batches: u64,
    events: u64,
}

/// An insert on its way: what it carries, and its outcome once ClickHouse answered.
struct Flight {
    peeked: Peeked,
    started: Instant,
    insert: tokio::task::JoinHandle<Result<(), ingest::SinkError>>,
}

impl Drainer {
    /// Drains until `stop` turns true. An `Err` only when the spool closed under it.
    pub async fn run(self, mut stop: watch::Receiver<bool>) -> Result<(), String> {
        let spool = self.spooling.spool().clone();
        let mut backoff = MIN_BACKOFF;
        let mut failures = 0u32;
        let mut in_flight: VecDeque<Flight> = VecDeque::new();
        // The last record taken into an insert: the next peek reads after it.
        let mut taken = RecordId(0);
        loop {
            if *stop.borrow() {
                return Ok(());
            }
            publish(&spool.stats());
            // Keep up to IN_FLIGHT inserts going while the store takes writes (while the
            // breaker is open a write would fail at once: wait for the store instead).
            if in_flight.len() < IN_FLIGHT && self.store.is_ready() {
                let records = match spool.peek_after(taken, PEEK_BATCHES, PEEK_BYTES).await {
                    Ok(records) => records,
                    Err(SpoolError::Closed) if *stop.borrow() => return Ok(()),
                    Err(SpoolError::Closed) => return Err("the spool closed".to_owned()),
                    // Damage met while reading: the spool rebuilds itself; try again.
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot read the spool, retrying");
                        if pause(&mut stop, MAX_BACKOFF).await {
                            return Ok(());
                        }
                        continue;
                    }
                };
                if let Some(last) = records.last() {
                    taken = last.id;
                    // Decoding thousands of batches is CPU work of tens of milliseconds:
                    // on a blocking thread, not on the workers that answer requests.
                    let live = self.live.is_some();
                    let mut peeked = tokio::task::spawn_blocking(move || decode(records, live))
                        .await
                        .map_err(|e| format!("spool decode task: {e}"))?;
                    let write = std::mem::take(&mut peeked.write);
                    let writer = self.writer.clone();
                    in_flight.push_back(Flight {
                        peeked,
                        started: Instant::now(),
                        insert: tokio::spawn(async move { writer.submit_write(write).await }),
                    });
                    continue;
                }
            }
            let Some(flight) = in_flight.pop_front() else {
                // Nothing in flight: wait for records, or for the store.
                let wait = if self.store.is_ready() {
                    GAUGE_EVERY
                } else {
                    MIN_BACKOFF
                };
                tokio::select! {
                    () = spool.wait_for_records(), if self.store.is_ready() => {}
                    () = tokio::time::sleep(wait) => {}
                    _ = stop.changed() => return Ok(()),
                }
                continue;
            };
            // The oldest insert first: removals and the live views go in spool order.
            let result = match flight.insert.await {
                Ok(result) => result,
                Err(e) => Err(ingest::SinkError::Retryable(format!(
                    "drain insert task: {e}"
                ))),
            };
            let peeked = flight.peeked;
            match result {
                Ok(()) => {
                    metrics::histogram!("streamwatch_spool_drain_insert_duration_seconds")
                        .record(flight.started.elapsed().as_secs_f64());
                    if failures > 0 {
                        tracing::info!(failures, "spool drains again");
                    }
                    failures = 0;
                    backoff = MIN_BACKOFF;
                    self.spooling.set_failing(None);
                    // Stored: a failed removal only means these batches are inserted again
                    // later, which the dedup key absorbs.
                    match spool.remove_through(peeked.last).await {
                        Ok(_) => self.spooling.made_room(),
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot remove drained batches from the spool; they will be inserted again")
                        }
                    }
                    if let Some(live) = &self.live {
                        for (key, events, record) in peeked.views {
                            live.take(key, events, &record);
                        }
                    }
                    metrics::counter!("streamwatch_spool_drained_total", "unit" => "batches")
                        .increment(peeked.batches);
                    metrics::counter!("streamwatch_spool_drained_total", "unit" => "events")
                        .increment(peeked.events);
                }
                Err(e) => {
                    failures += 1;
                    // First failure and every tenth: a long outage does not flood the log.
                    if failures == 1 || failures.is_multiple_of(10) {
                        tracing::warn!(error = %e, failures, batches = peeked.batches, "spool drain insert failed, retrying");
                    }
                    self.spooling.set_failing(Some(e.to_string()));
                    // This insert and those after it (whatever their outcome) are sent again,
                    // from the oldest record still held; each may be partly stored, so their
                    // views are read back.
                    let mut failed = vec![peeked];
                    for later in in_flight.drain(..) {
                        let _ = later.insert.await;
                        failed.push(later.peeked);
                    }
                    if let Some(live) = &self.live {
                        for (key, _, _) in failed.into_iter().flat_map(|p| p.views) {
                            live.taint(key);
                        }
                    }
                    taken = RecordId(0);
                    if pause(&mut stop, backoff).await {
                        return Ok(());
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }
}

/// The rows and records of `records`, and (with live views) each batch's view input. A
/// record that does not decode (written by an incompatible version) is logged, counted
/// and dropped with the rest.
fn decode(records: Vec<SpooledRecord>, live: bool) -> Peeked {
    // Sized once (the records say how many events they hold), as the writer's writes are.
    let events: usize = records.iter().map(|r| r.events as usize).sum();
    let mut peeked = Peeked {
        write: SinkWrite {
            rows: Vec::with_capacity(events),
            batches: Vec::with_capacity(records.len()),
        },
        views: if live {
            Vec::with_capacity(records.len())
        } else {
            Vec::new()
        },
        last: records.last().map_or(RecordId(0), |r| r.id),
        batches: 0,
        events: 0,
    };
    for record in records {
        let (rows, batch) = match ingest::spooled::decode(&record.payload) {
            Ok(decoded) => decoded,
            Err(e) => {
                tracing::error!(id = %record.id, error = %e, "dropping a spooled batch that cannot be read");
                metrics::counter!("streamwatch_spool_undecodable_total").increment(1);
                continue;
            }
        };
        if live {
            let key = Key::from(&batch);
            let events = rows
                .iter()
                .map(|r| Event::parse(r.ts_ms, r.event_type, &r.payload))
                .collect();
            peeked.views.push((key, events, batch.clone()));
        }
        peeked.batches += 1;
        peeked.events += rows.len() as u64;
        peeked.write.rows.extend(rows);
        peeked.write.batches.push(batch);
    }
    peeked
}

/// Sleeps `d`; true when the stop signal came first.
async fn pause(stop: &mut watch::Receiver<bool>, d: Duration) -> bool {
    let stopped = tokio::select! {
        () = tokio::time::sleep(d) => false,
        _ = stop.wait_for(|s| *s) => true,
    };
    stopped || *stop.borrow()
}

/// The spool's gauges.
fn publish(stats: &SpoolStats) {
    metrics::gauge!("streamwatch_spool_bytes").set(stats.bytes as f64);
    metrics::gauge!("streamwatch_spool_batches").set(stats.records as f64);
    let age = stats
        .oldest_age(SystemTime::now())
        .map_or(0.0, |a| a.as_secs_f64());
    metrics::gauge!("streamwatch_spool_oldest_age_seconds").set(age);
    metrics::gauge!("streamwatch_spool_quarantined_batches").set(stats.quarantined as f64);
}
