//! The prober: fetches each stream's manifest through the SSRF guard on a schedule, checks
//! it (HLS/DASH, staleness), classifies the outcome and records the probe.

pub mod classify;
pub mod fetch;
pub mod manifest;
