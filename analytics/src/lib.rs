//! Quality-of-experience analytics over stored telemetry (analytics.md), and every read
//! of telemetry. A pure core every engine shares (views are derived here in Rust for both
//! telemetry engines, and the routes' answers are defined by a reference implementation
//! that engine SQL is checked against), and the engines themselves ([`Store`],
//! [`refresh`]). No HTTP.
//!
//! Module map:
//! - [`event`]: the compact [`Event`] parsed from a stored payload, and [`dedup`];
//! - [`dims`]: per-batch dimensions and the rule that resolves a view's [`Dims`];
//! - [`view`]: [`View`] and its derivation (analytics.md §2, §5);
//! - [`model`]: the QoE vocabulary: [`Metric`], [`Measurement`], [`Dimension`],
//!   [`Filters`], [`TimeRange`] and its buckets, the views list's cursor;
//! - [`query`]: the typed request of each QoE route, its parsing from a query string
//!   with the contract's messages (§4, §5) and its typed constructors;
//! - [`metrics`]: [`Aggregate`] of a group of views and the one finalisation path (§3);
//! - [`response`]: the `Serialize` bodies of §4 and their CSV form;
//! - [`session`]: the read models of the session read-back ([`SessionSummary`],
//!   [`StoredEvent`], [`TypeCounts`]);
//! - [`store`]: [`Store`], every read of stored telemetry per engine (`store/clickhouse/`:
//!   client, rows, reads; `store/sqlite.rs`): the QoE routes and the session read-back,
//!   `streamId` resolved through the caller's [`StreamDirectory`];
//! - [`refresh`]: the refresher that derives views into each engine's `qoe_views` (its
//!   loop, and each engine's step with the algorithm's documentation beside its code);
//! - [`live`]: the views this process is ingesting, folded batch by batch, which the
//!   refresher writes from memory (on either engine);
//! - `fleet` and `reference` (feature `test-support`, on by default, off in the server): a
//!   seeded generator of realistic and adversarial fleets, and every route of §4 computed
//!   in Rust over a slice of views, which the engines are checked against.

pub mod dims;
pub mod event;
#[cfg(any(test, feature = "test-support"))]
pub mod fleet;
pub mod live;
pub mod metrics;
pub mod model;
pub mod query;
#[cfg(any(test, feature = "test-support"))]
pub mod reference;
pub mod refresh;
pub mod response;
pub mod session;
pub mod store;
pub mod view;

pub use dims::{BatchDims, Dims, DimsFold, DimsOf, UserAgent};
pub use event::{dedup, Event};
pub use live::LiveViews;
pub use metrics::Aggregate;
pub use query::{
    BreakdownQuery, Dimension, Filters, Granularity, Measurement, Metric, OverviewQuery,
    QueryErrors, StreamIds, TimeRange, TimelineQuery, TimeseriesQuery, ViewsQuery,
};
pub use refresh::{RefreshConfig, RefreshStats, Refresher};
pub use session::{SessionSummary, StoredEvent, TypeCounts};
pub use store::{AnalyticsError, EventCursor, EventsPage, PageLimits, Store, StreamDirectory};
pub use view::{Fold, View};
