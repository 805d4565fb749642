//! The ingest crate's integration tests, one binary: conformance of the sinks, the engines,
//! the validator's fixtures, the writer, the spool and SIGKILL durability (whose children
//! re-execute this binary with `--exact <module>::<test>`). Run one module with
//! `cargo test -p ingest --test integration <module>::`.

mod common;

mod conformance;
mod crash;
mod engines;
mod fixtures;
mod spool;
mod writer;
