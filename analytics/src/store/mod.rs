//! Every read of stored telemetry, one typed function per question, per engine: the QoE
//! routes of analytics.md §4 over the derived `qoe_views` table, and the session
//! read-back (moved here from the ingest sink, bodies unchanged).
//!
//! [`Store`] holds one engine, built from the ingest sinks' connections:
//! - ClickHouse: [`Store::clickhouse`] with `ClickHouseConfig::client()` or
//!   `ClickHouseSink::client()`; views read with `FINAL`, percentiles `quantilesExact`;
//! - SQLite: [`Store::sqlite`] with the opened `SqliteSink` (reads on its read pool,
//!   the refresher's upserts on its single writer); percentiles by row number.
//!
//! Selection (range, filters, `streamId` through the caller's `src → streamId` map) and
//! grouping happen in SQL and fill one [`Aggregate`] per group. The map comes from the
//! caller's [`StreamDirectory`], asked only when a question names `streamId` (a filter, a
//! breakdown by it) or its answer shows it (the views list); it never goes into SQL whole
//! (a filter sends the sources of the ids it names; ClickHouse's breakdown by `streamId`
//! loads the registered sources into a temporary table of its own session). the bodies are built by
//! the shared builders of [`crate::response`], as the reference implementation's are.
//! [`Store::guarded_by`] puts every read behind the telemetry store's circuit breaker.

pub(crate) mod clickhouse;
mod events_page;
pub(crate) mod sql;
pub(crate) mod sqlite;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use futures_util::future::BoxFuture;

use ingest::{SinkError, SqliteSink, SupervisedSink};

use crate::metrics::Aggregate;
use crate::query::{
    Dimension, Filters, Measurement, Metric, OverviewQuery, StreamIds, TimeRange, TimelineQuery,
    TimeseriesQuery, ViewsQuery,
};
use crate::response::{
    timeline_viewers, BreakdownBody, OverviewBody, TimelineViewers, TimeseriesBody, ViewsBody,
};
use crate::session::{SessionSummary, StoredEvent};
use crate::BreakdownQuery;

pub(crate) use self::clickhouse::ChStore;
pub use self::events_page::{EventCursor, EventsPage, PageLimits};
pub(crate) use self::sqlite::SqliteStore;

/// A failure of an analytics read or of the refresher. Whether retrying can help is a
/// variant, not a string.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AnalyticsError {
    /// Transient (store down, timeout, overload): the same call may succeed later.
    #[error("retryable analytics error: {0}")]
    Retryable(String),
    /// Will fail again as is (schema, bad data, a bug).
    #[error("permanent analytics error: {0}")]
    Permanent(String),
}

impl AnalyticsError {
    /// True for [`AnalyticsError::Retryable`].
    pub fn is_retryable(&self) -> bool {
        matches!(self, AnalyticsError::Retryable(_))
    }
}

impl From<SinkError> for AnalyticsError {
    fn from(e: SinkError) -> Self {
        match e {
            SinkError::Retryable(m) => AnalyticsError::Retryable(m),
            SinkError::Permanent(m) => AnalyticsError::Permanent(m),
        }
    }
}

impl From<AnalyticsError> for SinkError {
    fn from(e: AnalyticsError) -> Self {
        match e {
            AnalyticsError::Retryable(m) => SinkError::Retryable(m),
            AnalyticsError::Permanent(m) => SinkError::Permanent(m),
        }
    }
}

/// Where a question finds the caller's registered streams: every stream's `streamId` by
/// its `sourceUrl`, which is how a view's `src` names its stream (analytics.md §4). The
/// [`Store`] asks only when a question names `streamId` or its answer shows it, so the
/// others never read the streams. The server's implementation caches the map; a
/// [`StreamIds`] is one as it is (tests, benchmarks).
pub trait StreamDirectory: Send + Sync {
    /// `src` → `streamId` of every registered stream.
    fn ids_by_source(&self) -> BoxFuture<'_, Result<Arc<StreamIds>, AnalyticsError>>;
}

impl StreamDirectory for StreamIds {
    fn ids_by_source(&self) -> BoxFuture<'_, Result<Arc<StreamIds>, AnalyticsError>> {
        Box::pin(async move { Ok(Arc::new(self.clone())) })
    }
}

impl StreamDirectory for Arc<StreamIds> {
    fn ids_by_source(&self) -> BoxFuture<'_, Result<Arc<StreamIds>, AnalyticsError>> {
        Box::pin(async move { Ok(self.clone()) })
    }
}

/// The map of `streams` when `needed`, else an empty one (which resolves nothing, and
/// nothing asks it to).
async fn stream_ids(
    streams: &dyn StreamDirectory,
    needed: bool,
) -> Result<Arc<StreamIds>, AnalyticsError> {
    if needed {
        streams.ids_by_source().await
    } else {
        Ok(Arc::default())
    }
}

/// One engine's connection.
#[derive(Clone)]
pub(crate) enum Engine {
    ClickHouse(Box<ChStore>),
    Sqlite(SqliteStore),
}

/// The QoE store: one telemetry engine, optionally behind the store's circuit breaker.
/// Cheap to clone (connections are shared).
#[derive(Clone)]
pub struct Store {
    pub(crate) engine: Engine,
    guard: Option<SupervisedSink>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("engine", &self.engine_name())
            .field("guarded", &self.guard.is_some())
            .finish()
    }
}

/// How one aggregation groups the selected views.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Group {
    /// One group of everything selected.
    All,
    /// UTC-aligned buckets of `startedAt` this wide (ms).
    Bucket(i64),
    /// By a dimension's value (`None` = views without one).
    Dim(Dimension),
}

/// The key of one aggregated group.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum GroupKey {
    All,
    Bucket(i64),
    Value(Option<String>),
}

/// Which inputs of an [`Aggregate`] one aggregation needs; the engines compute only those
/// (the others stay 0 / `None`), so a route reads only the columns its metric uses and
/// sorts for exact percentiles only when it reports one. `views` is always counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Needs(u16);

impl Needs {
    pub const FAILED: Needs = Needs(1);
    pub const STARTUP_FAILURES: Needs = Needs(1 << 1);
    pub const EXITS: Needs = Needs(1 << 2);
    pub const REBUFFER_MS: Needs = Needs(1 << 3);
    pub const REBUFFER_COUNT: Needs = Needs(1 << 4);
    pub const WATCH_TIME: Needs = Needs(1 << 5);
    /// `bitrate_weighted_sum` and `bitrate_covered_ms`.
    pub const BITRATE: Needs = Needs(1 << 6);
    /// `startup_count` and `startup_sum_ms`.
    pub const STARTUP: Needs = Needs(1 << 7);
    /// The exact startup percentiles (implies [`Needs::STARTUP`]).
    pub const PERCENTILES: Needs = Needs(1 << 8 | 1 << 7);
    /// Only the number of views.
    pub const VIEWS: Needs = Needs(0);
    /// Everything (the overview).
    pub const ALL: Needs = Needs((1 << 9) - 1);
    /// What the timeline's viewers read: views, failures, rebuffering, p50 startup.
    pub const TIMELINE: Needs =
        Needs(Needs::FAILED.0 | Needs::REBUFFER_MS.0 | Needs::WATCH_TIME.0 | Needs::PERCENTILES.0);

    /// What `metric` (with `measurement`) is computed from.
    pub fn metric(metric: Metric, measurement: Measurement) -> Needs {
        match metric {
            Metric::Views => Needs::VIEWS,
            Metric::PlaybackFailurePct => Needs::FAILED,
            Metric::StartupFailurePct => Needs::STARTUP_FAILURES,
            Metric::ExitBeforeStartPct => Needs::EXITS,
            Metric::StartupTimeMs => match measurement {
                Measurement::Avg => Needs::STARTUP,
                _ => Needs::PERCENTILES,
            },
            Metric::RebufferPct => Needs(Needs::REBUFFER_MS.0 | Needs::WATCH_TIME.0),
            Metric::RebufferFrequency => Needs(Needs::REBUFFER_COUNT.0 | Needs::WATCH_TIME.0),
            Metric::WatchTimeMs => Needs::WATCH_TIME,
            Metric::AvgBitrateKbps => Needs::BITRATE,
        }
    }

    /// True when every input of `other` is needed.
    pub fn has(self, other: Needs) -> bool {
        self.0 & other.0 == other.0
    }
}

/// Which views one aggregation reads: the owner's, `startedAt` in the range, passing the
/// filters, and (timeline) with this exact `src`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Selection<'a> {
    pub owner: &'a str,
    pub range: TimeRange,
    pub filters: &'a Filters,
    pub streams: &'a StreamIds,
    pub src: Option<&'a str>,
}

impl Store {
    /// A ClickHouse store on `client` (database selected), e.g.
    /// `ClickHouseConfig::client()` (no connection is made until a call) or
    /// `ClickHouseSink::client().clone()`. The tables are created by the sink's migrations.
    pub fn clickhouse(client: impl Into<ingest::ChClient>) -> Self {
        Store {
            engine: Engine::ClickHouse(Box::new(ChStore::new(client.into()))),
            guard: None,
        }
    }

    /// The embedded store of an opened SQLite sink: reads on its read pool, the
    /// refresher's upserts on its writer.
    pub fn sqlite(sink: SqliteSink) -> Self {
        Store {
            engine: Engine::Sqlite(SqliteStore::new(sink)),
            guard: None,
        }
    }

    /// Every read through `breaker` (the ingest `SupervisedSink` of the same store): fails
    /// at once while the store is down, bounded by its read timeout, and a timeout opens
    /// the breaker. The refresher checks readiness before each step.
    pub fn guarded_by(mut self, breaker: SupervisedSink) -> Self {
        self.guard = Some(breaker);
        self
    }

    /// `clickhouse` or `sqlite`.
    pub fn engine_name(&self) -> &'static str {
        match self.engine {
            Engine::ClickHouse(_) => "clickhouse",
            Engine::Sqlite(_) => "sqlite",
        }
    }

    /// False while the breaker (if any) says the store is not usable.
    pub(crate) fn is_ready(&self) -> bool {
        self.guard.as_ref().is_none_or(SupervisedSink::is_ready)
    }

    async fn guarded<T, Fut>(&self, read: Fut) -> Result<T, AnalyticsError>
    where
        Fut: Future<Output = Result<T, AnalyticsError>>,
    {
        match &self.guard {
            None => read.await,
            Some(g) => Ok(g
                .guard_read(async { read.await.map_err(SinkError::from) })
                .await?),
        }
    }

    async fn aggregate(
        &self,
        sel: Selection<'_>,
        group: &Group,
        needs: Needs,
    ) -> Result<Vec<(GroupKey, Aggregate)>, AnalyticsError> {
        self.guarded(async {
            match &self.engine {
                Engine::ClickHouse(ch) => ch.aggregate(sel, group, needs).await,
                Engine::Sqlite(sq) => sq.aggregate(sel, group, needs).await,
            }
        })
        .await
    }

    /// `GET /api/v1/qoe/overview` for `owner`.
    pub async fn overview(
        &self,
        owner: &str,
        q: &OverviewQuery,
        streams: &dyn StreamDirectory,
    ) -> Result<OverviewBody, AnalyticsError> {
        let streams = &*stream_ids(streams, q.filters.names_stream_id()).await?;
        let sel = Selection {
            owner,
            range: q.range,
            filters: &q.filters,
            streams,
            src: None,
        };
        let all = self.aggregate(sel, &Group::All, Needs::ALL).await?;
        let a = all.into_iter().next().map(|(_, a)| a).unwrap_or_default();
        Ok(OverviewBody::build(q.range, &a))
    }

    /// `GET /api/v1/qoe/timeseries` for `owner`.
    pub async fn timeseries(
        &self,
        owner: &str,
        q: &TimeseriesQuery,
        streams: &dyn StreamDirectory,
    ) -> Result<TimeseriesBody, AnalyticsError> {
        let streams = &*stream_ids(streams, q.filters.names_stream_id()).await?;
        let sel = Selection {
            owner,
            range: q.range,
            filters: &q.filters,
            streams,
            src: None,
        };
        let buckets = self
            .aggregate(
                sel,
                &Group::Bucket(q.granularity.ms()),
                Needs::metric(q.metric, q.measurement),
            )
            .await?;
        Ok(TimeseriesBody::build(q, &by_bucket(buckets)))
    }

    /// `GET /api/v1/qoe/breakdown` for `owner`.
    pub async fn breakdown(
        &self,
        owner: &str,
        q: &BreakdownQuery,
        streams: &dyn StreamDirectory,
    ) -> Result<BreakdownBody, AnalyticsError> {
        let needed = q.filters.names_stream_id() || q.by == Dimension::StreamId;
        let streams = &*stream_ids(streams, needed).await?;
        let sel = Selection {
            owner,
            range: q.range,
            filters: &q.filters,
            streams,
            src: None,
        };
        let by = Group::Dim(q.by.clone());
        let needs = Needs::metric(q.metric, q.measurement);
        let (overall, groups) = if needs.has(Needs::PERCENTILES) {
            // A percentile of everything is not one of the groups': a second aggregation.
            let (overall, groups) = tokio::try_join!(
                self.aggregate(sel, &Group::All, needs),
                self.aggregate(sel, &by, needs)
            )?;
            let overall = overall
                .into_iter()
                .next()
                .map(|(_, a)| a)
                .unwrap_or_default();
            (overall, groups)
        } else {
            // Every other input is a count or a sum: the overall is the groups' total
            // (each view is in exactly one group), from the same single scan.
            let groups = self.aggregate(sel, &by, needs).await?;
            let mut overall = Aggregate::default();
            for (_, a) in &groups {
                overall.add(a);
            }
            (overall, groups)
        };
        let groups = groups.into_iter().map(|(k, a)| match k {
            GroupKey::Value(v) => (v, a),
            GroupKey::All | GroupKey::Bucket(_) => (None, a),
        });
        Ok(BreakdownBody::build(q, &overall, groups))
    }

    /// `GET /api/v1/qoe/views` for `owner`: newest `startedAt` first, ties by
    /// `sessionId`, continuing after the cursor.
    pub async fn views(
        &self,
        owner: &str,
        q: &ViewsQuery,
        streams: &dyn StreamDirectory,
    ) -> Result<ViewsBody, AnalyticsError> {
        let filtered = q.filters.names_stream_id();
        let ids = stream_ids(streams, filtered).await?;
        let sel = Selection {
            owner,
            range: q.range,
            filters: &q.filters,
            streams: &ids,
            src: None,
        };
        let rows = self
            .guarded(async {
                match &self.engine {
                    Engine::ClickHouse(ch) => ch.views_page(sel, q.cursor.as_ref(), q.limit).await,
                    Engine::Sqlite(sq) => sq.views_page(sel, q.cursor.as_ref(), q.limit).await,
                }
            })
            .await?;
        // Each item shows its `streamId`: the map is read for a page with a `src` in it.
        let ids = if !filtered && rows.iter().any(|v| v.dims.src.is_some()) {
            streams.ids_by_source().await?
        } else {
            ids
        };
        Ok(ViewsBody::build(&rows, q.limit, &ids))
    }

    /// The viewers half of `GET /api/v1/streams/{id}/timeline`: `owner`'s views whose
    /// `src` is the stream's `sourceUrl` (`stream_src`), per bucket, every bucket of the
    /// range. The route merges the probes half in. `streams` resolves `streamId` filters
    /// (if any), as on the other routes.
    pub async fn timeline_viewers(
        &self,
        owner: &str,
        stream_src: &str,
        q: &TimelineQuery,
        streams: &dyn StreamDirectory,
    ) -> Result<Vec<TimelineViewers>, AnalyticsError> {
        let streams = &*stream_ids(streams, q.filters.names_stream_id()).await?;
        let sel = Selection {
            owner,
            range: q.range,
            filters: &q.filters,
            streams,
            src: Some(stream_src),
        };
        let buckets = self
            .aggregate(sel, &Group::Bucket(q.granularity.ms()), Needs::TIMELINE)
            .await?;
        Ok(timeline_viewers(
            q.range,
            q.granularity,
            &by_bucket(buckets),
        ))
    }

    /// One metric over `owner`'s views that started in `range` and pass `filters`, with the
    /// number of those views: what an alert rule on a QoE metric compares.
    pub async fn metric(
        &self,
        owner: &str,
        range: TimeRange,
        filters: &Filters,
        metric: Metric,
        measurement: Measurement,
        streams: &dyn StreamDirectory,
    ) -> Result<(i64, Option<f64>), AnalyticsError> {
        let streams = &*stream_ids(streams, filters.names_stream_id()).await?;
        let sel = Selection {
            owner,
            range,
            filters,
            streams,
            src: None,
        };
        let all = self
            .aggregate(sel, &Group::All, Needs::metric(metric, measurement))
            .await?;
        let a = all.into_iter().next().map(|(_, a)| a).unwrap_or_default();
        Ok((a.views, a.value(metric, measurement)))
    }

    /// The owner's most recent sessions (by last event time, newest first), at most
    /// `limit` (the read-back of `GET /api/v1/telemetry/sessions`).
    pub async fn sessions(
        &self,
        owner: &str,
        limit: u32,
    ) -> Result<Vec<SessionSummary>, AnalyticsError> {
        self.guarded(async {
            match &self.engine {
                Engine::ClickHouse(ch) => ch.sessions(owner, limit).await,
                Engine::Sqlite(sq) => sq.sessions(owner, limit).await,
            }
        })
        .await
    }

    /// The deduplicated events of one of the owner's sessions, `ts` ascending (ties by
    /// type name); empty when the session does not exist for this owner.
    pub async fn session_events(
        &self,
        owner: &str,
        session_id: &str,
    ) -> Result<Vec<StoredEvent>, AnalyticsError> {
        self.guarded(async {
            match &self.engine {
                Engine::ClickHouse(ch) => ch.session_events(owner, session_id).await,
                Engine::Sqlite(sq) => sq.session_events(owner, session_id).await,
            }
        })
        .await
    }
}

fn by_bucket(groups: Vec<(GroupKey, Aggregate)>) -> BTreeMap<i64, Aggregate> {
    groups
        .into_iter()
        .filter_map(|(k, a)| match k {
            GroupKey::Bucket(t) => Some((t, a)),
            GroupKey::All | GroupKey::Value(_) => None,
        })
        .collect()
}

/// `version` of a derived view: grows with the batch records and the distinct events
/// its derivation saw, so the row derived from the most data wins on every engine,
/// whoever wrote it last.
pub(crate) fn view_version(batch_rows: u64, event_rows: u64) -> u64 {
    (batch_rows.min(u64::from(u32::MAX)) << 32) | event_rows.min(u64::from(u32::MAX))
}
