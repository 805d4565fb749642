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
//! - [`query`]: the typed request model of the QoE routes and its parsing (§4, §5);
//! - [`metrics`]: [`Aggregate`] of a group of views and the one finalisation path (§3);
//! - [`reference`](mod@reference): every route of §4 computed in Rust over a slice of views;
//! - [`response`]: the `Serialize` bodies of §4 and their CSV form;
//! - [`store`]: [`Store`], every read of stored telemetry per engine (ClickHouse,
//!   SQLite): the QoE routes and the session read-back;
//! - [`refresh`]: the refresher that derives views into each engine's `qoe_views`;
//! - [`live`]: the views this process is ingesting, folded batch by batch, which the
//!   ClickHouse refresher writes from memory;
//! - `fleet` (feature `fleet`): a seeded generator of realistic and adversarial fleets.

pub mod dims;
pub mod event;
#[cfg(any(test, feature = "fleet"))]
pub mod fleet;
pub mod live;
pub mod metrics;
pub mod query;
pub mod reference;
pub mod refresh;
pub mod response;
pub mod store;
pub mod view;

pub use dims::{BatchDims, Dims, DimsFold, UserAgent};
pub use event::{dedup, Event};
pub use ingest::{SessionSummary, StoredEvent, TypeCounts};
pub use live::LiveViews;
pub use metrics::Aggregate;
pub use query::{
    BreakdownQuery, Dimension, Filters, Granularity, Measurement, Metric, OverviewQuery,
    QueryErrors, StreamIds, TimeRange, TimelineQuery, TimeseriesQuery, ViewsQuery,
};
pub use refresh::{RefreshConfig, RefreshStats, Refresher};
pub use store::{AnalyticsError, EventCursor, EventsPage, PageLimits, Store};
pub use view::{Fold, View};
