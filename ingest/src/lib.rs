//! Telemetry ingest for streamwatch: the wire contract shared with the player SDK,
//! validation of request bodies, the group-commit batch writer and the storage
//! sinks. No HTTP here; the server calls these functions.
//!
//! Module map:
//! - [`wire`]: batch envelope and its optional [`Context`], the eight event types,
//!   payloads;
//! - [`validate`]: body bytes → [`Batch`] or the contract's 400 errors;
//! - [`time`]: ISO 8601 ↔ epoch milliseconds;
//! - [`ua`]: `User-Agent` → browser, OS, device type ([`UaCache`]);
//! - [`row`]: [`EventRow`] and [`BatchRecord`], the stored forms, and [`SinkWrite`];
//! - [`record_dims`]: a record's stored `dims`, `""` where an earlier record says the same;
//! - [`sink`]: the write-only [`EventSink`] trait, ClickHouse and SQLite
//!   implementations, the supervised breaker;
//! - [`writer`]: [`BatchWriter`], group commit in front of a sink;
//! - [`spool`]: the durable local spool in front of ClickHouse; [`spooled`]: a batch's
//!   bytes in it.
//!
//! Request path: `parse_batch(&mut body)` → check `batch.api_key` against the
//! bearer → `batch.into_write(owner, ua_cache.classify(user_agent))` →
//! `writer_handle.submit_batch(rows, record).await` → 204. Reads of telemetry (QoE
//! routes, session read-back) are the `analytics` crate's.
//!
//! Tests: `cargo test -p ingest` needs a ClickHouse at `CLICKHOUSE_URL` (default
//! `http://127.0.0.1:8123`; `ingest/scripts/start-clickhouse.sh` installs and starts
//! Debian's 18.16). Every ClickHouse test uses a fresh random database; SQLite
//! tests use temp files. Golden wire fixtures live in `ingest/fixtures/`.

mod generations;
pub mod record_dims;
pub mod row;
pub mod sink;
pub mod spool;
pub mod spooled;
pub mod time;
pub mod ua;
pub mod validate;
pub mod wire;
pub mod writer;

pub use row::{BatchRecord, EventRow, SinkWrite};
pub use sink::{
    ChClient, ClickHouseConfig, ClickHouseSink, Connector, Durability, EventSink, Health,
    SinkError, SqliteOptions, SqliteSink, SupervisedSink, SupervisorTiming,
};
pub use ua::{UaCache, UaClass};
pub use validate::{
    body_too_large, parse_batch, Field, ValidationErrors, MAX_BODY_BYTES, MAX_EVENTS,
};
pub use wire::{Batch, Context, EndReason, Event, EventType, Payload};
pub use writer::{BatchWriter, WriterConfig, WriterHandle};
