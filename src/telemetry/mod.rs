//! Accepting a telemetry batch: the one rule every acknowledged batch goes through, from
//! a validated [`ingest::Batch`] to its durable write (decisions.md §7, §11). The ingest
//! route keeps the bearer, the body, the key comparison and the status mapping; the QoE
//! benchmark (`bench qoe ingest`) calls the same [`Intake::accept`].
//!
//! In order: the batch's user agent is classified (browser, OS, device, once per batch);
//! the batch becomes its event rows and its record (`into_write`); the writer stores them,
//! answered within the deadline or refused; then the live views take the
//! batch's events and dimensions when it was stored, or mark the view broken when it may
//! be partly stored (a failed or timed-out write), so the refresher reads it back instead.
//! A write that outlasts the deadline tells the store's supervisor to check the store.
//!
//! With the spool on (ClickHouse, `STREAMWATCH_SPOOL=on`, scale.md §3) the durable write is
//! the batch's append to the local spool instead ([`Spooling`]): `Ok` once it is fsync'd,
//! a full spool refused at once. The live views then take the batch when the drainer
//! ([`drain`]) has stored it in ClickHouse, not here: a view counts a spooled batch once
//! it is drained.

pub mod drain;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use analytics::live::{Key, LiveViews};
use analytics::Event;
use ingest::spool::{Record, Spool, SpoolError};
use ingest::{Batch, SinkError, SupervisedSink, UaCache, UaClass, WriterHandle};

/// Longest a batch waits for its write to be acknowledged before it is refused.
pub const STORE_DEADLINE: Duration = Duration::from_millis(1500);

/// Why a batch was not accepted: nothing was acknowledged, and the client may retry it
/// (telemetry writes are idempotent).
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// The store refused the write (down, overloaded, or a permanent failure).
    #[error(transparent)]
    Store(SinkError),
    /// The write was not acknowledged within the deadline.
    #[error("telemetry store did not acknowledge in time")]
    Timeout,
    /// The spool refused the batch (full, or its disk failed).
    #[error(transparent)]
    Spool(SpoolError),
}

/// The spool in front of ClickHouse and what the drainer reports about it, shared by the
/// intake (appends), the drainer (peeks and removals) and readiness. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Spooling {
    spool: Spool,
    shared: Arc<SpoolHealth>,
}

#[derive(Debug, Default)]
struct SpoolHealth {
    /// An append was refused for want of room since the drainer last made some.
    full: AtomicBool,
    /// Why the drainer's last insert failed, until one succeeds.
    failing: Mutex<Option<String>>,
}

/// What readiness says about telemetry with the spool on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpoolCheck {
    /// ClickHouse takes writes and the spool has room.
    Ok,
    /// ClickHouse cannot take writes; batches wait in the spool (the cause).
    Spooling(String),
    /// The spool refuses batches until the drainer makes room.
    Full,
}

impl Spooling {
    /// The intake's and drainer's view of an open `spool`.
    pub fn new(spool: Spool) -> Self {
        Spooling {
            spool,
            shared: Arc::default(),
        }
    }

    /// The spool itself (for metrics and shutdown).
    pub fn spool(&self) -> &Spool {
        &self.spool
    }

    /// Readiness of telemetry: full, spooling while `store` (the breaker) is not ready or
    /// the drainer's inserts fail, else ok.
    pub fn check(&self, store: &SupervisedSink) -> SpoolCheck {
        if self.shared.full.load(Ordering::Relaxed) {
            return SpoolCheck::Full;
        }
        if let ingest::Health::Unready(reason) = store.health() {
            return SpoolCheck::Spooling(reason);
        }
        match self.failing() {
            Some(cause) => SpoolCheck::Spooling(cause),
            None => SpoolCheck::Ok,
        }
    }

    fn failing(&self) -> Option<String> {
        self.shared
            .failing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn set_failing(&self, cause: Option<String>) {
        *self
            .shared
            .failing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = cause;
    }

    /// The drainer removed records: there is room again.
    fn made_room(&self) {
        self.shared.full.store(false, Ordering::Relaxed);
    }
}

/// Everything accepting a batch needs: the writer, the live views, the store's breaker
/// and the user-agent cache. Cheap to clone.
#[derive(Clone)]
pub struct Intake {
    writer: WriterHandle,
    live: Option<Arc<LiveViews>>,
    breaker: Option<SupervisedSink>,
    user_agents: UaCache,
    deadline: Duration,
    spool: Option<Spooling>,
}

impl Intake {
    /// Batches go to `writer` and are refused after `deadline`; `live` (the server's, on
    /// either engine) takes every stored batch; a write that outlasts the deadline makes `breaker` (the store's
    /// supervisor, when there is one) check the store.
    pub fn new(
        writer: WriterHandle,
        live: Option<Arc<LiveViews>>,
        breaker: Option<SupervisedSink>,
        deadline: Duration,
    ) -> Self {
        Intake {
            writer,
            live,
            breaker,
            // A fleet has few distinct agents.
            user_agents: UaCache::new(10_000),
            deadline,
            spool: None,
        }
    }

    /// Batches are acknowledged once `spooling`'s spool has them (fsync'd), and the live
    /// views take them from the drainer instead.
    pub fn with_spool(mut self, spooling: Spooling) -> Self {
        self.spool = Some(spooling);
        self
    }

    /// The spool, when batches go through one.
    pub fn spooling(&self) -> Option<&Spooling> {
        self.spool.as_ref()
    }

    /// Stores `owner`'s `batch`, sent with the `User-Agent` header `user_agent`; `Ok` only
    /// once it is durably stored. Counts the outcome
    /// (`streamwatch_telemetry_{batches,events}_total`, `accepted` or `store`).
    #[tracing::instrument(level = "debug", name = "accept_batch", skip_all,
        fields(owner = %owner, session = %batch.session_id, events = batch.events.len()))]
    pub async fn accept(
        &self,
        owner: &str,
        batch: Batch,
        user_agent: Option<&[u8]>,
    ) -> Result<(), Refusal> {
        let events = batch.events.len();
        let agent = self.user_agents.classify_bytes(user_agent);
        let stored = match &self.spool {
            Some(spooling) => self.spool_batch(spooling, owner, batch, agent).await,
            None => self.write_batch(owner, batch, agent).await,
        };
        match &stored {
            Ok(()) => count(Outcome::Accepted, events),
            Err(refusal) => {
                if matches!(refusal, Refusal::Timeout) && self.spool.is_none() {
                    if let Some(breaker) = &self.breaker {
                        breaker.suspect();
                    }
                }
                count(Outcome::Store, events);
            }
        }
        stored
    }

    /// The spool on: the batch's rows and record, appended and fsync'd (group commit). A
    /// full spool refuses at once; a disk that does not sync within the deadline is a
    /// refusal too (the batch may be written all the same: a retry is a no-op).
    async fn spool_batch(
        &self,
        spooling: &Spooling,
        owner: &str,
        batch: Batch,
        agent: UaClass,
    ) -> Result<(), Refusal> {
        let events = batch.events.len() as u32;
        let (rows, record) = batch.into_write(owner, agent);
        let payload = ingest::spooled::encode(&rows, &record);
        drop(rows);
        let append = spooling.spool.append(Record { events, payload });
        match tokio::time::timeout(self.deadline, append).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => {
                if matches!(e, SpoolError::Full { .. }) {
                    spooling.shared.full.store(true, Ordering::Relaxed);
                }
                Err(Refusal::Spool(e))
            }
            Err(_) => Err(Refusal::Timeout),
        }
    }

    /// The spool off: the writer stores the batch in the telemetry store within the
    /// deadline, and the live views take it (or are told it may be partly stored).
    async fn write_batch(&self, owner: &str, batch: Batch, agent: UaClass) -> Result<(), Refusal> {
        // The live views take the batch once it is stored: its events, taken here from the
        // typed batch (no parse of what the sink stores), and its record's dimensions.
        let taken: Option<Vec<Event>> = self
            .live
            .as_ref()
            .map(|_| batch.events.iter().map(Event::from_wire).collect());
        let (rows, record) = batch.into_write(owner, agent);
        // Until the write answers, the view counts as possibly changed behind memory's
        // back: a failed or timed-out write may be partly stored, and so may a write whose
        // request was cancelled while it was in flight (the client went away).
        // The record's parts are shared, not copied: memory reads them after the write.
        let pending = taken.zip(self.live.as_deref()).map(|(events, live)| {
            let key = Key::from(&record);
            (live.pending(key), events, record.clone())
        });
        // A dead or hung store answers within the deadline (decisions.md §11): the breaker
        // fails at once while the store is known down. The batch is not acknowledged; the
        // SDK retries it.
        let stored =
            match tokio::time::timeout(self.deadline, self.writer.submit_batch(rows, record)).await
            {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(Refusal::Store(e)),
                Err(_) => Err(Refusal::Timeout),
            };
        if let (Some((pending, events, record)), Ok(())) = (pending, &stored) {
            pending.stored(events, &record);
        }
        stored
    }
}

/// What became of a batch: acknowledged, or why it was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Stored (or spooled): 204.
    Accepted,
    /// A missing, unknown or revoked key, or a body `apiKey` that differs.
    Auth,
    /// A body that is not a valid batch.
    Validation,
    /// The store refused it or did not answer in time.
    Store,
}

impl Outcome {
    const ALL: [Outcome; 4] = [
        Outcome::Accepted,
        Outcome::Auth,
        Outcome::Validation,
        Outcome::Store,
    ];

    /// The `outcome` label.
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Accepted => "accepted",
            Outcome::Auth => "auth",
            Outcome::Validation => "validation",
            Outcome::Store => "store",
        }
    }
}

/// Counts a batch and its events by outcome (0 events when it was refused before parsing).
pub fn count(outcome: Outcome, events: usize) {
    // The counters of every outcome, made once: building a labelled handle per batch (its
    // key, hash and the recorder's lookup) is a cost per request. The recorder is the
    // process's global one, so a handle stays valid for good (as `http::metrics`' handles).
    static COUNTERS: LazyLock<[(metrics::Counter, metrics::Counter); 4]> = LazyLock::new(|| {
        Outcome::ALL.map(|o| {
            (
                metrics::counter!("streamwatch_telemetry_batches_total", "outcome" => o.label()),
                metrics::counter!("streamwatch_telemetry_events_total", "outcome" => o.label()),
            )
        })
    });
    // `ALL` is in declaration order, so an outcome's discriminant is its index there.
    let (batches, events_counter) = &COUNTERS[outcome as usize];
    batches.increment(1);
    events_counter.increment(events as u64);
}

#[cfg(test)]
mod tests {
    use super::Outcome;

    #[test]
    fn every_outcome_indexes_its_own_counters() {
        for (i, outcome) in Outcome::ALL.into_iter().enumerate() {
            assert_eq!(outcome as usize, i, "{}", outcome.label());
        }
        let labels = Outcome::ALL.map(Outcome::label);
        assert_eq!(labels, ["accepted", "auth", "validation", "store"]);
    }
}
