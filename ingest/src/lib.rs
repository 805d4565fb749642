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
//!
//! Tests: `cargo test -p ingest` needs a ClickHouse at `CLICKHOUSE_URL` (default
//! `http://127.0.0.1:8123`; `ingest/scripts/start-clickhouse.sh` installs and starts
//! Debian's 18.16). Every ClickHouse test uses a fresh random database; SQLite
//! tests use temp files. Golden wire fixtures live in `ingest/fixtures/`.

pub mod row;
pub mod sink;
pub mod time;
pub mod validate;
pub mod wire;
pub mod writer;

pub use row::EventRow;
pub use sink::{
    ClickHouseConfig, ClickHouseSink, Durability, EventSink, SessionSummary, SinkError,
    SqliteOptions, SqliteSink, StoredEvent, TypeCounts,
};
pub use validate::{
    body_too_large, parse_batch, Field, ValidationErrors, MAX_BODY_BYTES, MAX_EVENTS,
};
pub use wire::{Batch, EndReason, Event, EventType, Payload};
pub use writer::{BatchWriter, WriterConfig, WriterHandle};
