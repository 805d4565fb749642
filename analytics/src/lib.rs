//! Quality-of-experience queries over stored telemetry (startup time, rebuffer ratio,
//! failures, bitrate per content and over time), one typed function per question, for each
//! telemetry engine (ClickHouse and the embedded SQLite store).
//!
//! The crate exists so the workspace layout is final (decisions.md §1); its queries arrive
//! with the QoE analytics API (decisions.md §10). It must not depend on axum or on the server.
