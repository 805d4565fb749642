//! Telemetry ingest for streamwatch: the wire contract shared with the player SDK,
//! validation of request bodies, the group-commit batch writer and the storage
//! sinks. No HTTP here; the server calls these functions.
//!
//! Module map:
//! - [`wire`]: batch envelope, the eight event types, payloads;
//! - [`validate`]: body bytes → [`Batch`] or the contract's 400 errors;
//! - [`time`]: ISO 8601 ↔ epoch milliseconds;
//! - [`row`]: [`EventRow`], the stored form;
//! - [`sink`]: the [`EventSink`] trait, ClickHouse and SQLite implementations;
//! - [`writer`]: [`BatchWriter`], group commit in front of a sink.
//!
//! Request path: `parse_batch(&mut body)` → check `batch.api_key` against the
//! bearer → `batch.into_rows(owner)` → `writer_handle.submit(rows).await` → 204.

pub mod row;
pub mod sink;
pub mod time;
pub mod validate;
pub mod wire;
pub mod writer;

pub use row::EventRow;
pub use sink::{
    ClickHouseConfig, ClickHouseSink, EventSink, SessionSummary, SinkError, SqliteSink,
    StoredEvent, TypeCounts,
};
pub use validate::{
    body_too_large, parse_batch, Field, ValidationErrors, MAX_BODY_BYTES, MAX_EVENTS,
};
pub use wire::{Batch, EndReason, Event, EventType, Payload};
pub use writer::{BatchWriter, WriterConfig, WriterHandle};
