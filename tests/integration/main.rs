//! The service's integration tests, one binary (linking the server once instead of once a
//! file): each module starts the real server on `127.0.0.1:0` (or the real binary as a child
//! process) against SQLite, PostgreSQL and ClickHouse. Run one module with
//! `cargo test --test integration <module>::`.
//!
//! The modules share this process: a test that needs process-wide state of its own (the
//! metrics recorder, signals) runs the server as a child process ([`common::Process`]).

mod common;

mod accounts;
mod agents;
mod alerts;
mod alerts_process;
mod cluster;
mod connections;
mod durability;
mod keys;
mod misc;
mod observability;
mod openapi;
mod outages;
mod pages;
mod prober;
mod qoe;
mod spool;
mod streams;
mod telemetry;
