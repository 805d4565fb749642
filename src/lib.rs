//! streamwatch: stream monitoring and player telemetry.
//!
//! * [`config`] — flags and environment, parsed once.
//! * [`startup`] — opens the stores, spawns background tasks, serves.
//! * [`http`] — the only axum code: router, handlers, error mapping, pages, `/metrics`.
//! * [`accounts`], [`streams`], [`keys`], [`probes`], [`waitlist`] — domain types and storage.
//! * [`telemetry`] — accepting a telemetry batch: its write (or its spooling), its live views,
//!   its outcome; the spool's drainer into ClickHouse.
//! * [`alerts`] — alert rules, their evaluation, incidents, channels, the outbox and its sender.
//! * [`prober`] — scheduled HLS/DASH probes: fetch through the guard, check, classify.
//! * [`ssrf`] — the guard shared by registration, every probe and every alert delivery.
//! * [`ratelimit`] — the per-client limit of the auth routes.
//! * [`states`] — the closed sets of the wire (statuses, agent state, severity, anomaly class).
//! * [`time`], [`validation`] — epoch-ms timestamps and ids; zod-style field checks.
//! * [`data_dir`] — the data dir: its lock (one server per `STREAMWATCH_DATA_DIR`) and its
//!   permissions (0700, files 0600).
//! * [`db`] — the relational pool (PostgreSQL or embedded SQLite) and its migrations (the
//!   one runner of the `migrate` crate); [`create_database`] makes a missing PostgreSQL
//!   database.
//! * [`metrics`] — Prometheus metrics: recorder, descriptions, sampled gauges.
//! * [`supervisor`] — background tasks; one that dies stops the process (non-zero exit).

pub mod accounts;
pub mod alerts;
pub mod config;
pub mod create_database;
pub mod data_dir;
pub mod db;
pub mod http;
pub mod keys;
pub mod metrics;
pub mod prober;
pub mod probes;
pub mod ratelimit;
pub mod ssrf;
pub mod startup;
pub mod states;
pub mod streams;
pub mod supervisor;
pub mod telemetry;
pub mod time;
pub mod validation;
pub mod waitlist;
