//! The storage interface for telemetry writes and its error type (every read of
//! telemetry, and its read models, are the `analytics` crate's). Implementations: [`clickhouse::ClickHouseSink`] and
//! [`sqlite::SqliteSink`]; both pass the same conformance suite
//! (`ingest/tests/integration/conformance.rs`).

pub mod clickhouse;
pub mod sqlite;
pub mod supervised;

use async_trait::async_trait;

use crate::row::{EventRow, SinkWrite};

pub use self::clickhouse::{ChClient, ClickHouseConfig, ClickHouseSink};
pub use self::sqlite::{Durability, SqliteOptions, SqliteSink};
pub use self::supervised::{Connector, Health, SupervisedSink, SupervisorTiming};

/// A storage failure. Whether retrying can help is a variant, not a string.
///
/// Cloneable so one failed write can be reported to every request it carried.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SinkError {
    /// Transient (network, timeout, overload, lock contention, shut-down writer):
    /// the same rows may succeed later. Telemetry writes are idempotent.
    #[error("retryable storage error: {0}")]
    Retryable(String),
    /// Will fail again as is (schema, bad configuration, corrupt data).
    #[error("permanent storage error: {0}")]
    Permanent(String),
}

impl SinkError {
    /// True for [`SinkError::Retryable`].
    pub fn is_retryable(&self) -> bool {
        matches!(self, SinkError::Retryable(_))
    }
}

/// Indices of `rows` in dedup-key order `(owner, session_id, ts_ms, type)`.
///
/// Both sinks store rows ordered by that key; writing them pre-sorted is much
/// cheaper for the store (ClickHouse 18.16 skips sorting a block that is already in
/// key order, SQLite appends to the same B-tree leaf). The sort is stable: among
/// rows with the same key, the one submitted first stays first.
pub(crate) fn key_order(rows: &[EventRow]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (&rows[a], &rows[b]);
        (&*a.owner, &*a.session_id, a.ts_ms, a.event_type.as_str()).cmp(&(
            &*b.owner,
            &*b.session_id,
            b.ts_ms,
            b.event_type.as_str(),
        ))
    });
    order
}

/// Telemetry storage, write side. Used as `Arc<dyn EventSink>`.
///
/// Semantics every implementation guarantees (checked by the conformance suite):
/// - rows are deduplicated on `(owner, session_id, ts_ms, event_type)`; the
///   **first** stored row of a key wins, so a repeated batch is a no-op;
/// - each [`crate::BatchRecord`] of a write is stored as one row of `view_batches`, in
///   the same durable write as the events (SQLite: the same transaction; ClickHouse:
///   the events insert, then the records insert into the Buffer table in front of
///   `view_batches`, both answered before `Ok`), so a record is never visible before
///   its batch's events. A ClickHouse crash can lose buffered records, never events
///   (analytics' refresher derives the affected views again after a server restart).
///
/// Reads (the QoE routes and the session read-back) are the `analytics` crate's.
#[async_trait]
pub trait EventSink: Send + Sync + 'static {
    /// Stores a write. When this returns `Ok`, its rows and batch records are durable
    /// (committed / acknowledged by the server). An `Err` means nothing may be assumed
    /// stored. Takes the write by value so a sink can hand it to a blocking thread.
    async fn write(&self, write: SinkWrite) -> Result<(), SinkError>;

    /// A cheap round trip to the store: `Ok` when it answers.
    async fn ping(&self) -> Result<(), SinkError>;

    /// Short engine name for logs and metrics (`clickhouse`, `sqlite`).
    fn name(&self) -> &'static str;

    /// How many writes the batch writer should keep in flight at once when its
    /// configuration leaves it to the sink (default 1: one writer at a time, as
    /// SQLite has).
    fn preferred_writes_in_flight(&self) -> usize {
        1
    }
}
