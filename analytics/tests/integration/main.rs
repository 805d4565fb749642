//! The analytics crate's integration tests, one binary: the engines against the reference
//! implementation (conformance) and the refresher. Run one module with
//! `cargo test -p analytics --test integration <module>::`.

mod common;

mod conformance;
mod refresh;
