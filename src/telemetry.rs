//! Accepting a telemetry batch: the one rule every acknowledged batch goes through, from
//! a validated [`ingest::Batch`] to its durable write (decisions.md §7, §11). The ingest
//! route keeps the bearer, the body, the key comparison and the status mapping; the QoE
//! benchmark (`bench qoe ingest`) calls the same [`Intake::accept`].
//!
//! In order: the batch's user agent is classified (browser, OS, device, once per batch);
//! the batch becomes its event rows and its record (`into_write`); the writer stores them,
//! answered within the deadline or refused; then the live views (ClickHouse) take the
//! batch's events and dimensions when it was stored, or mark the view broken when it may
//! be partly stored (a failed or timed-out write), so the refresher reads it back instead.
//! A write that outlasts the deadline tells the store's supervisor to check the store.

use std::sync::Arc;
use std::time::Duration;

use analytics::live::{Key, LiveViews};
use analytics::{BatchDims, Event};
use ingest::{Batch, SinkError, SupervisedSink, UaCache, WriterHandle};

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
}

impl Intake {
    /// Batches go to `writer` and are refused after `deadline`; `live` (ClickHouse) takes
    /// every stored batch; a write that outlasts the deadline makes `breaker` (the store's
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
        }
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
        // The live views take the batch once it is stored: its events, taken here from the
        // typed batch (no parse of what the sink stores), and its record's dimensions.
        let taken: Option<Vec<Event>> = self
            .live
            .as_ref()
            .map(|_| batch.events.iter().map(Event::from_wire).collect());
        let (rows, record) = batch.into_write(owner, agent);
        let taken = taken.map(|events| {
            let key = Key {
                owner: record.owner.clone(),
                session: record.session_id.clone(),
            };
            (key, events, BatchDims::from_record(&record, 0))
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
        if let (Some(live), Some((key, events, dims))) = (&self.live, taken) {
            match &stored {
                Ok(()) => live.take(key, events, &dims),
                // Failed or timed out: some of it may be stored all the same.
                Err(_) => live.taint(key),
            }
        }
        match &stored {
            Ok(()) => count("accepted", events),
            Err(refusal) => {
                if matches!(refusal, Refusal::Timeout) {
                    if let Some(breaker) = &self.breaker {
                        breaker.suspect();
                    }
                }
                count("store", events);
            }
        }
        stored
    }
}

/// Counts a batch and its events by outcome: `accepted`, or why it was refused (`auth`,
/// `validation`, `store`; 0 events when it was refused before parsing).
pub fn count(outcome: &'static str, events: usize) {
    metrics::counter!("streamwatch_telemetry_batches_total", "outcome" => outcome).increment(1);
    metrics::counter!("streamwatch_telemetry_events_total", "outcome" => outcome)
        .increment(events as u64);
}
