//! The ClickHouse engine: aggregations over `qoe_views FINAL`, the views list, the
//! session read-back over `telemetry_events FINAL`, and the refresher's reads and
//! upserts. Runs on ClickHouse 18.16 and current releases: client-side `?` binds,
//! RowBinary without type validation, no function newer than 18.16 (shared/notes).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};

use clickhouse::insert::Insert;
use clickhouse::{Client, Row};
use ingest::sink::clickhouse::RecordRow;
use ingest::{EventType, SessionSummary, StoredEvent, TypeCounts};
use serde::{Deserialize, Serialize};

use super::sql::{bucket_expr, day_of, push_selection, Arg, Dialect, Sql};
use super::{view_version, AnalyticsError, Group, GroupKey, Needs, Selection};
use crate::dims::{BatchDims, Dims, UserAgent};
use crate::event::{needs_payload, Event};
use crate::live::{self, Changed, Key, LiveViews};
use crate::metrics::Aggregate;
use crate::query::{Cursor, Dimension};
use crate::refresh::{RecentRecords, RefreshConfig, RefreshState, RefreshStats};
use crate::view::View;

const D: Dialect = Dialect::ClickHouse;

/// Queries can carry a `src → streamId` map of every registered stream; ClickHouse's
/// default 256 KiB query size would cap it near 3,000 streams.
const MAX_QUERY_SIZE: &str = "67108864";

/// The ClickHouse engine.
#[derive(Clone)]
pub(crate) struct ChStore {
    pub(super) client: Client,
}

pub(super) fn map_err(e: clickhouse::error::Error) -> AnalyticsError {
    ingest::sink::clickhouse::classify_error(e).into()
}

/// Every column of `qoe_views`, in [`ViewRow`] order.
const VIEW_COLUMNS: &str = "owner, session_id, started_at, ended_at, started, first_frame_at, \
    startup_ms, failed, failed_at, startup_failure, exit_before_start, rebuffer_count, \
    rebuffer_ms, paused_ms, watch_time_ms, bitrate_weighted_sum, bitrate_covered_ms, \
    rendition_switches, upshifts, downshifts, error_count, fatal_error_code, content_id, src, \
    sdk, player, browser, os, device_type, tag_keys, tag_values, batch_rows, event_rows, \
    version, derived_at, deleted";

/// One row of `qoe_views`.
#[derive(Debug, Clone, Row, Serialize, Deserialize)]
struct ViewRow {
    owner: String,
    session_id: String,
    started_at: i64,
    ended_at: i64,
    started: u8,
    first_frame_at: Option<i64>,
    startup_ms: Option<f64>,
    failed: u8,
    failed_at: Option<i64>,
    startup_failure: u8,
    exit_before_start: u8,
    rebuffer_count: i64,
    rebuffer_ms: i64,
    paused_ms: i64,
    watch_time_ms: i64,
    bitrate_weighted_sum: f64,
    bitrate_covered_ms: i64,
    rendition_switches: i64,
    upshifts: i64,
    downshifts: i64,
    error_count: i64,
    fatal_error_code: Option<String>,
    content_id: Option<String>,
    src: Option<String>,
    sdk: Option<String>,
    player: Option<String>,
    browser: String,
    os: String,
    device_type: String,
    tag_keys: Vec<String>,
    tag_values: Vec<String>,
    batch_rows: u64,
    event_rows: u64,
    version: u64,
    derived_at: i64,
    /// 1 for a tombstone: the view is no longer under this row's `started_day`.
    deleted: u8,
}

/// Tombstones cover at most this many days after a view's start day (plus any day a
/// stored row of it was read under): a view spanning longer is pathological.
const MAX_TOMBSTONE_DAYS: i64 = 366;

impl ViewRow {
    /// The row of `v` (moved: a step builds one per derived view).
    fn new(owner: &str, v: View, batch_rows: u64, event_rows: u64, now_ms: i64) -> Self {
        let d = v.dims;
        let (tag_keys, tag_values) = d.tags.into_iter().unzip();
        ViewRow {
            owner: owner.to_owned(),
            session_id: v.session_id,
            started_at: v.started_at,
            ended_at: v.ended_at,
            started: u8::from(v.started),
            first_frame_at: v.first_frame_at,
            startup_ms: v.startup_ms,
            failed: u8::from(v.failed),
            failed_at: v.failed_at,
            startup_failure: u8::from(v.startup_failure),
            exit_before_start: u8::from(v.exit_before_start),
            rebuffer_count: v.rebuffer_count,
            rebuffer_ms: v.rebuffer_ms,
            paused_ms: v.paused_ms,
            watch_time_ms: v.watch_time_ms,
            bitrate_weighted_sum: v.bitrate_weighted_sum,
            bitrate_covered_ms: v.bitrate_covered_ms,
            rendition_switches: v.rendition_switches,
            upshifts: v.upshifts,
            downshifts: v.downshifts,
            error_count: v.error_count,
            fatal_error_code: v.fatal_error_code,
            content_id: d.content_id,
            src: d.src,
            sdk: d.sdk,
            player: d.player,
            browser: d.user_agent.browser,
            os: d.user_agent.os,
            device_type: d.user_agent.device_type,
            tag_keys,
            tag_values,
            batch_rows,
            event_rows,
            version: view_version(batch_rows, event_rows),
            derived_at: now_ms,
            deleted: 0,
        }
    }

    /// A tombstone of this view under `day` (another day than its start's): same owner,
    /// session and version, `deleted` = 1, every value empty.
    fn tombstone(&self, day: i64) -> Self {
        ViewRow {
            owner: self.owner.clone(),
            session_id: self.session_id.clone(),
            started_at: day * crate::query::DAY_MS,
            ended_at: day * crate::query::DAY_MS,
            started: 0,
            first_frame_at: None,
            startup_ms: None,
            failed: 0,
            failed_at: None,
            startup_failure: 0,
            exit_before_start: 0,
            rebuffer_count: 0,
            rebuffer_ms: 0,
            paused_ms: 0,
            watch_time_ms: 0,
            bitrate_weighted_sum: 0.0,
            bitrate_covered_ms: 0,
            rendition_switches: 0,
            upshifts: 0,
            downshifts: 0,
            error_count: 0,
            fatal_error_code: None,
            content_id: None,
            src: None,
            sdk: None,
            player: None,
            browser: String::new(),
            os: String::new(),
            device_type: String::new(),
            tag_keys: Vec::new(),
            tag_values: Vec::new(),
            batch_rows: 0,
            event_rows: 0,
            version: self.version,
            derived_at: self.derived_at,
            deleted: 1,
        }
    }

    fn into_view(self) -> View {
        View {
            session_id: self.session_id,
            started_at: self.started_at,
            ended_at: self.ended_at,
            started: self.started != 0,
            first_frame_at: self.first_frame_at,
            startup_ms: self.startup_ms,
            failed: self.failed != 0,
            failed_at: self.failed_at,
            startup_failure: self.startup_failure != 0,
            exit_before_start: self.exit_before_start != 0,
            rebuffer_count: self.rebuffer_count,
            rebuffer_ms: self.rebuffer_ms,
            paused_ms: self.paused_ms,
            watch_time_ms: self.watch_time_ms,
            bitrate_weighted_sum: self.bitrate_weighted_sum,
            bitrate_covered_ms: self.bitrate_covered_ms,
            rendition_switches: self.rendition_switches,
            upshifts: self.upshifts,
            downshifts: self.downshifts,
            error_count: self.error_count,
            fatal_error_code: self.fatal_error_code,
            dims: Dims {
                content_id: self.content_id,
                src: self.src,
                sdk: self.sdk,
                player: self.player,
                tags: self.tag_keys.into_iter().zip(self.tag_values).collect(),
                user_agent: UserAgent {
                    browser: self.browser,
                    os: self.os,
                    device_type: self.device_type,
                },
            },
        }
    }
}

/// The aggregate columns a route needs, in the order of the `Agg*` rows' fields after the
/// key; an input not needed is a constant (0, no quantiles), so its column is not read and
/// no exact quantile state is built when no percentile is reported.
fn aggregates(needs: Needs) -> String {
    let pick = |n: Needs, expr: &'static str, zero: &'static str| {
        if needs.has(n) {
            expr
        } else {
            zero
        }
    };
    [
        "toInt64(count())",
        pick(Needs::FAILED, "toInt64(sum(failed))", "toInt64(0)"),
        pick(
            Needs::STARTUP_FAILURES,
            "toInt64(sum(startup_failure))",
            "toInt64(0)",
        ),
        pick(
            Needs::EXITS,
            "toInt64(sum(exit_before_start))",
            "toInt64(0)",
        ),
        pick(
            Needs::REBUFFER_MS,
            "toInt64(sum(rebuffer_ms))",
            "toInt64(0)",
        ),
        pick(
            Needs::REBUFFER_COUNT,
            "toInt64(sum(rebuffer_count))",
            "toInt64(0)",
        ),
        pick(
            Needs::WATCH_TIME,
            "toInt64(sum(watch_time_ms))",
            "toInt64(0)",
        ),
        pick(
            Needs::BITRATE,
            "toFloat64(sum(bitrate_weighted_sum))",
            "toFloat64(0)",
        ),
        pick(
            Needs::BITRATE,
            "toInt64(sum(bitrate_covered_ms))",
            "toInt64(0)",
        ),
        pick(Needs::STARTUP, "toInt64(count(startup_ms))", "toInt64(0)"),
        pick(
            Needs::STARTUP,
            "toFloat64(sum(ifNull(startup_ms, 0)))",
            "toFloat64(0)",
        ),
        pick(
            Needs::PERCENTILES,
            "quantilesExact(0.5, 0.75, 0.95, 0.99)(startup_ms)",
            "emptyArrayFloat64()",
        ),
    ]
    .join(", ")
}

macro_rules! agg_row {
    ($name:ident $(, $key:ident : $kty:ty)?) => {
        #[derive(Debug, Row, Deserialize)]
        struct $name {
            $($key: $kty,)?
            views: i64,
            failed: i64,
            startup_failures: i64,
            exits_before_start: i64,
            rebuffer_ms: i64,
            rebuffer_count: i64,
            watch_time_ms: i64,
            bitrate_weighted_sum: f64,
            bitrate_covered_ms: i64,
            startup_count: i64,
            startup_sum_ms: f64,
            startup_quantiles: Vec<f64>,
        }

        impl $name {
            fn aggregate(&self) -> Aggregate {
                let q = |i: usize| {
                    (self.startup_count > 0)
                        .then(|| self.startup_quantiles.get(i).copied())
                        .flatten()
                };
                Aggregate {
                    views: self.views,
                    failed: self.failed,
                    startup_failures: self.startup_failures,
                    exits_before_start: self.exits_before_start,
                    rebuffer_ms: self.rebuffer_ms,
                    rebuffer_count: self.rebuffer_count,
                    watch_time_ms: self.watch_time_ms,
                    bitrate_weighted_sum: self.bitrate_weighted_sum,
                    bitrate_covered_ms: self.bitrate_covered_ms,
                    startup_count: self.startup_count,
                    startup_sum_ms: self.startup_sum_ms,
                    startup_p50_ms: q(0),
                    startup_p75_ms: q(1),
                    startup_p95_ms: q(2),
                    startup_p99_ms: q(3),
                }
            }
        }
    };
}

agg_row!(AggAll);
agg_row!(AggBucket, k: i64);
agg_row!(AggValue, k: Option<String>);

#[derive(Row, Deserialize)]
struct PageKey {
    session_id: String,
    started_at: i64,
}

#[derive(Row, Deserialize)]
struct SessionRow {
    session_id: String,
    first_ts: i64,
    last_ts: i64,
    event_count: u64,
    c_playback_start: u64,
    c_playback_pause: u64,
    c_playback_resume: u64,
    c_rebuffer_start: u64,
    c_rebuffer_end: u64,
    c_quality_change: u64,
    c_error: u64,
    c_session_end: u64,
    content_id: String,
}

#[derive(Row, Deserialize)]
struct EventReadRow {
    ts: i64,
    event_type: String,
    payload: String,
}

/// A session's records as the live views' first check reads them.
#[derive(Row, Deserialize)]
struct OwnRecords {
    session_id: String,
    /// Records by another writer.
    foreign: u64,
    /// `written_at` of the oldest record (epoch s).
    oldest: i64,
}

/// How long before its acknowledgement a batch record can have been stored (the sink's
/// insert timeout, 30 s), plus a second for `written_at`'s whole seconds.
const LIVE_INSERT_SLACK_S: i64 = 31;

#[derive(Row, Deserialize)]
struct WindowCount {
    owner: String,
    session_id: String,
    /// Records written at or after the watermark (the last step's start).
    ahead: u64,
    /// Records written at or after this step's start.
    next_ahead: u64,
    /// Records read (those in late seconds included).
    n: u64,
    /// Of those, records another writer stored (not this process's live views').
    foreign: u64,
}

/// Records of one second of `written_at`.
#[derive(Row, Deserialize)]
struct SecondCount {
    second: i64,
    n: u64,
}

/// The records of one session with the same dims (refresher).
#[derive(Row, Deserialize)]
struct BatchGroupRow {
    session_id: String,
    dims: String,
    /// The earliest `first_ts` of these records, and the latest.
    first_at: i64,
    last_at: i64,
    /// The `seq` of the earliest of them by (first_ts, seq).
    first_seq: u64,
    records: u64,
}

/// A session's batch records as the refresher reads them: how many, and one
/// [`BatchDims`] per distinct dims.
#[derive(Default)]
struct Records {
    count: u64,
    dims: Vec<BatchDims>,
}

#[derive(Row, Deserialize)]
struct StoredCount {
    session_id: String,
    batch_rows: u64,
    started_at: i64,
}

/// One session's events as the refresher reads them, in any order, duplicates included
/// (see [`session_events_sql`]): every event as one packed key ([`unpack_key`]), and the
/// events of the types a rule reads the payload of once more, with that payload and their
/// `ver`. Borrowed from the cursor's buffer: a step reads millions of events.
#[derive(Row, Deserialize)]
struct SessionEventsRow<'a> {
    session_id: &'a str,
    keys: Vec<i64>,
    #[serde(borrow)]
    payloads: Vec<(i64, &'a str, u64)>,
}

/// How many values a packed event key keeps below the time (`ts * KEY_TYPES + code`).
const KEY_TYPES: i64 = 16;

/// The refresher's read of a chunk's events (owner bound as `?`): one row per session.
///
/// An event is sent as one number, `ts * 16 + code`, where `code` is its type's position
/// in [`EventType::ALL`] plus one (0: a type outside the closed set), instead of a tuple
/// of its time, type name, payload and `ver`: the tuples' strings were about a third of
/// the process's CPU in a step, in their RowBinary decoding and UTF-8 checks, and twice
/// the bytes on the wire (docs/benchmarks.md). Only the types a rule reads the payload
/// of ([`needs_payload`]) come again with their payload and `ver`, which picks among
/// duplicates of one `(ts, type)` the row `FINAL` would keep; the duplicates of any other
/// type are identical to derivation. Timestamps are years 0000–9999 (ingest validates
/// them), so the product stays far inside `Int64`.
fn session_events_sql() -> &'static str {
    static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        let quoted = |types: &mut dyn Iterator<Item = &EventType>| {
            types
                .map(|t| format!("'{}'", t.as_str()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let names = quoted(&mut EventType::ALL.iter());
        let codes = (1..=EventType::ALL.len())
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let with_payload = quoted(&mut EventType::ALL.iter().filter(|t| needs_payload(**t)));
        // The key's expression is written twice rather than aliased inside an aggregate:
        // the same expression is computed once all the same.
        let key = format!("ts * {KEY_TYPES} + transform(type, [{names}], [{codes}], 0)");
        format!(
            "SELECT session_id, groupArray({key}) AS keys, \
             groupArrayIf(({key}, payload, ver), type IN ({with_payload})) AS payloads \
             FROM telemetry_events WHERE owner = ? AND session_id IN {SESSION_SET} \
             GROUP BY session_id"
        )
    });
    &SQL
}

/// The time and type of a packed event key of [`session_events_sql`]; `None` for a type
/// outside the closed set (such rows are left out, as everywhere).
fn unpack_key(key: i64) -> Option<(i64, EventType)> {
    let code = key.rem_euclid(KEY_TYPES) as usize;
    let t = *EventType::ALL.get(code.checked_sub(1)?)?;
    Some((key.div_euclid(KEY_TYPES), t))
}

/// A row of [`SessionSet`]'s table.
#[derive(Row, Serialize)]
struct SessionIdRow<'a> {
    session_id: &'a str,
}

#[derive(Row, Serialize)]
struct StateRow<'a> {
    name: &'a str,
    value: i64,
}

/// The watermark's row in `qoe_refresh_state`.
const WATERMARK: &str = "views";

/// The row in `qoe_refresh_state` holding when the ClickHouse server last started (epoch
/// s, `now() - uptime()`), as of the last step: a later start means the server restarted,
/// and the batch records its Buffer held may be gone ([`ChStore::recover_records`]).
const SERVER_STARTED: &str = "clickhouse_started";

/// Slack on the server's start time (`now()` and `uptime()` are whole seconds, read at
/// different instants): a start more than this later than the stored one is a restart.
const RESTART_SLACK_S: i64 = 5;

/// How far the clocks of the instances that wrote events may be from the server's, for
/// [`ChStore::recover_records`]' window (one step's margin is added on the early side).
const RECOVERY_SKEW_S: i64 = 60;

#[derive(Row, Deserialize)]
struct ClockRow {
    now: i64,
    uptime: i64,
}

#[derive(Row, Deserialize)]
struct StateValue {
    name: String,
    value: i64,
}

#[derive(Row, Deserialize)]
struct RecoveredRecord {
    owner: String,
    session_id: String,
    first_ts: i64,
}

impl ChStore {
    pub fn new(client: Client) -> Self {
        ChStore {
            client: client.with_setting("max_query_size", MAX_QUERY_SIZE),
        }
    }

    fn query(&self, sql: &Sql) -> clickhouse::query::Query {
        let mut q = self.client.query(&sql.text);
        for a in &sql.args {
            q = match a {
                Arg::Str(s) => q.bind(s.as_str()),
                Arg::Int(i) => q.bind(*i),
            };
        }
        q
    }

    pub async fn aggregate(
        &self,
        sel: Selection<'_>,
        group: &Group,
        needs: Needs,
    ) -> Result<Vec<(GroupKey, Aggregate)>, AnalyticsError> {
        let mut sql = Sql::new("SELECT ");
        match group {
            Group::All => {}
            Group::Bucket(w) => {
                sql.push(&bucket_expr(D, *w)).push(" AS k, ");
            }
            Group::Dim(Dimension::StreamId) => {
                if sel.streams.is_empty() {
                    sql.push("CAST(NULL AS Nullable(String)) AS k, ");
                } else {
                    let mut pairs: Vec<(&String, &String)> = sel.streams.iter().collect();
                    pairs.sort();
                    sql.push("nullIf(transform(ifNull(src, ''), [");
                    for (i, (src, _)) in pairs.iter().enumerate() {
                        if i > 0 {
                            sql.push(", ");
                        }
                        sql.str(src);
                    }
                    sql.push("], [");
                    for (i, (_, id)) in pairs.iter().enumerate() {
                        if i > 0 {
                            sql.push(", ");
                        }
                        sql.str(id);
                    }
                    sql.push("], ''), '') AS k, ");
                }
            }
            Group::Dim(dim) => {
                sql.push("CAST(");
                D.push_value(&mut sql, dim);
                sql.push(" AS Nullable(String)) AS k, ");
            }
        }
        sql.push(&aggregates(needs))
            .push(" FROM qoe_views FINAL WHERE ");
        push_selection(&mut sql, D, &sel);
        if *group != Group::All {
            sql.push(" GROUP BY k");
        }
        let q = self.query(&sql);
        Ok(match group {
            Group::All => q
                .fetch_all::<AggAll>()
                .await
                .map_err(map_err)?
                .iter()
                .map(|r| (GroupKey::All, r.aggregate()))
                .collect(),
            Group::Bucket(_) => q
                .fetch_all::<AggBucket>()
                .await
                .map_err(map_err)?
                .iter()
                .map(|r| (GroupKey::Bucket(r.k), r.aggregate()))
                .collect(),
            Group::Dim(_) => q
                .fetch_all::<AggValue>()
                .await
                .map_err(map_err)?
                .into_iter()
                .map(|r| {
                    let a = r.aggregate();
                    (GroupKey::Value(r.k), a)
                })
                .collect(),
        })
    }

    /// The page in two reads: the page's keys first (three narrow columns sorted, not
    /// every column of the range), then those rows in full by key. If a row moved
    /// between the two reads, the page is read again in one query.
    pub async fn views_page(
        &self,
        sel: Selection<'_>,
        cursor: Option<&Cursor>,
        limit: usize,
    ) -> Result<Vec<View>, AnalyticsError> {
        let page = |columns: &str| {
            let mut sql = Sql::new(&format!("SELECT {columns} FROM qoe_views FINAL WHERE "));
            push_selection(&mut sql, D, &sel);
            if let Some(c) = cursor {
                sql.push(" AND (started_at < ")
                    .int(c.started_at)
                    .push(" OR (started_at = ")
                    .int(c.started_at)
                    .push(" AND session_id > ")
                    .str(&c.session_id)
                    .push("))");
            }
            sql.push(" ORDER BY started_at DESC, session_id ASC LIMIT ")
                .int(limit as i64 + 1);
            sql
        };
        let keys = self
            .query(&page("session_id, started_at"))
            .fetch_all::<PageKey>()
            .await
            .map_err(map_err)?;
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut days: Vec<i64> = keys.iter().map(|k| day_of(k.started_at)).collect();
        days.sort_unstable();
        days.dedup();
        let mut sql = Sql::new(&format!(
            "SELECT {VIEW_COLUMNS} FROM qoe_views FINAL WHERE owner = "
        ));
        sql.str(sel.owner).push(" AND started_day IN (");
        for (i, d) in days.iter().enumerate() {
            if i > 0 {
                sql.push(", ");
            }
            sql.int(*d);
        }
        sql.push(") AND session_id IN ")
            .list(keys.iter().map(|k| k.session_id.as_str()))
            .push(" AND deleted = 0");
        let rows = self
            .query(&sql)
            .fetch_all::<ViewRow>()
            .await
            .map_err(map_err)?;
        let mut by_key: HashMap<(String, i64), ViewRow> = rows
            .into_iter()
            .map(|r| ((r.session_id.clone(), r.started_at), r))
            .collect();
        let mut views = Vec::with_capacity(keys.len());
        for k in keys {
            match by_key.remove(&(k.session_id, k.started_at)) {
                Some(r) => views.push(r.into_view()),
                None => {
                    let rows = self
                        .query(&page(VIEW_COLUMNS))
                        .fetch_all::<ViewRow>()
                        .await
                        .map_err(map_err)?;
                    return Ok(rows.into_iter().map(ViewRow::into_view).collect());
                }
            }
        }
        Ok(views)
    }

    pub async fn sessions(
        &self,
        owner: &str,
        limit: u32,
    ) -> Result<Vec<SessionSummary>, AnalyticsError> {
        let mut counts = String::new();
        for t in EventType::ALL {
            counts.push_str(&format!("countIf(type = '{0}') AS c_{0}, ", t.as_str()));
        }
        let sql = format!(
            "SELECT session_id, min(ts) AS first_ts, max(ts) AS last_ts, count() AS event_count, \
             {counts}argMinIf(content_id, ts, type = 'playback_start') AS content_id \
             FROM telemetry_events FINAL WHERE owner = ? \
             GROUP BY session_id ORDER BY last_ts DESC, session_id ASC LIMIT ?"
        );
        let rows = self
            .client
            .query(&sql)
            .bind(owner)
            .bind(limit)
            .fetch_all::<SessionRow>()
            .await
            .map_err(map_err)?;
        Ok(rows
            .into_iter()
            .map(|r| {
                let counts = TypeCounts([
                    r.c_playback_start,
                    r.c_playback_pause,
                    r.c_playback_resume,
                    r.c_rebuffer_start,
                    r.c_rebuffer_end,
                    r.c_quality_change,
                    r.c_error,
                    r.c_session_end,
                ]);
                SessionSummary {
                    session_id: r.session_id,
                    content_id: (r.c_playback_start > 0).then_some(r.content_id),
                    first_event_at: r.first_ts,
                    last_event_at: r.last_ts,
                    event_count: r.event_count,
                    counts,
                }
            })
            .collect())
    }

    pub async fn session_events(
        &self,
        owner: &str,
        session_id: &str,
    ) -> Result<Vec<StoredEvent>, AnalyticsError> {
        let rows = self
            .client
            .query(
                "SELECT ts, type, payload FROM telemetry_events FINAL \
                 WHERE owner = ? AND session_id = ? ORDER BY ts ASC, type ASC",
            )
            .bind(owner)
            .bind(session_id)
            .fetch_all::<EventReadRow>()
            .await
            .map_err(map_err)?;
        rows.into_iter()
            .map(|r| {
                let event_type = EventType::from_wire(&r.event_type).ok_or_else(|| {
                    AnalyticsError::Permanent(format!(
                        "unknown stored event type {:?}",
                        r.event_type
                    ))
                })?;
                Ok(StoredEvent {
                    event_type,
                    ts_ms: r.ts,
                    payload: r.payload,
                })
            })
            .collect()
    }

    // ---------------------------------------------------------------- refresher

    /// One refresh step (see [`crate::refresh`]): the views touched by batch records
    /// written since the watermark (minus the margin) whose record count changed are
    /// derived again and upserted; then the watermark moves to the step's start.
    pub async fn refresh_step(
        &self,
        state: &mut RefreshState,
        cfg: &RefreshConfig,
        live: Option<&LiveViews>,
    ) -> Result<RefreshStats, AnalyticsError> {
        // What the live views hold, taken before the Buffer's flush: every record of a
        // batch taken is then visible to the reads below.
        let snapshot = live.map(|l| l.snapshot(live::IDLE)).unwrap_or_default();
        // Records reach `view_batches` through a Buffer table (migration 0003), which
        // writes them out every second or two; flushing it first makes every record
        // inserted so far visible now, so freshness does not wait for the Buffer. The
        // reads below then go to `view_batches` alone: reading through the Buffer can miss
        // rows that move to the table while a query runs, and the step's bookkeeping
        // needs a record, once seen, to stay visible.
        self.client
            .query("OPTIMIZE TABLE view_batches_buffer")
            .execute()
            .await
            .map_err(map_err)?;
        // Server time, the clock `written_at` was stamped with, and its uptime.
        let clock = self
            .client
            .query("SELECT toInt64(toUnixTimestamp(now())) AS now, toInt64(uptime()) AS uptime")
            .fetch_one::<ClockRow>()
            .await
            .map_err(map_err)?;
        let started = clock.now;
        let server_started = clock.now - clock.uptime;
        let values: HashMap<String, i64> = self
            .client
            .query("SELECT name, toInt64(max(value)) AS value FROM qoe_refresh_state GROUP BY name")
            .fetch_all::<StateValue>()
            .await
            .map_err(map_err)?
            .into_iter()
            .map(|r| (r.name, r.value))
            .collect();
        let stored = values.get(WATERMARK).copied().unwrap_or(0);
        let known_start = values.get(SERVER_STARTED).copied().unwrap_or(0);
        let watermark = state.watermark.unwrap_or(0).max(stored);
        let since = if watermark > 0 {
            watermark - cfg.margin.as_secs() as i64
        } else {
            0
        };
        let since = since.max(0);
        let restarted = known_start > 0 && server_started > known_start + RESTART_SLACK_S;
        if restarted {
            let n = self.recover_records(since, started).await?;
            tracing::warn!(
                recovered_sessions = n,
                "ClickHouse restarted since the last refresh step: views with events written since then are derived again"
            );
        }
        if restarted || known_start == 0 {
            self.write_state(SERVER_STARTED, server_started).await?;
        }
        // With live views, the records of this process's own batches are left out of the
        // window's reads: each of its views is either held by the live views (written from
        // the snapshot, now or at the next step) or known to them as broken (in the
        // snapshot's read-back list whenever it changes). Only other writers' records
        // (other instances, earlier processes, recovery records) find views to read back.
        let others = live.map_or(String::new(), |l| format!(" AND writer != {}", l.writer()));
        // Records per second of `written_at` over the window: one 4-byte column, so cheap
        // next to the window's sessions. Read before the sessions: a record that shows up
        // in between is then seen by the sessions' read but not counted here, and the next
        // step derives its session once more (never the reverse, which would miss it).
        let seconds: BTreeMap<i64, u64> = self
            .client
            .query(&format!(
                "SELECT toInt64(toUnixTimestamp(written_at)) AS second, toUInt64(count()) AS n \
                 FROM view_batches WHERE written_at >= toDateTime(?){others} GROUP BY second",
            ))
            .bind(since)
            .fetch_all::<SecondCount>()
            .await
            .map_err(map_err)?
            .into_iter()
            .map(|r| (r.second, r.n))
            .collect();
        // What to read (RecentRecords): after this refresher's own last step, the records
        // written since that step started, plus every second of the margin whose count
        // changed since (records whose insert was still in flight then). Otherwise (first
        // step, restart, another instance moved the watermark) the whole window, every
        // session a candidate.
        let previous = state
            .recent
            .as_ref()
            .filter(|r| state.watermark == Some(watermark) && r.watermark == watermark);
        let (filter, late) = match previous {
            Some(p) => {
                let late: Vec<String> = seconds
                    .range(since..watermark)
                    .filter(|(s, n)| p.seconds.get(s) != Some(n))
                    .map(|(s, _)| s.to_string())
                    .collect();
                let filter = if late.is_empty() {
                    "written_at >= toDateTime(?)".to_owned()
                } else {
                    // The late seconds are inlined integers (a handful at most).
                    format!(
                        "(written_at >= toDateTime(?) OR toInt64(toUnixTimestamp(written_at)) IN ({}))",
                        late.join(", ")
                    )
                };
                (filter, !late.is_empty())
            }
            None => ("written_at >= toDateTime(?)".to_owned(), false),
        };
        let from = if previous.is_some() { watermark } else { since };
        // In session order: each chunk's events and records are then a narrow range of
        // `telemetry_events` and `view_batches` (both sorted by session).
        let keys = self
            .client
            .query(&format!(
                "SELECT owner, session_id, toUInt64(countIf(written_at >= toDateTime(?))) AS ahead, \
                 toUInt64(countIf(written_at >= toDateTime(?))) AS next_ahead, \
                 toUInt64(count()) AS n, toUInt64(countIf(writer != ?)) AS foreign FROM view_batches \
                 WHERE written_at >= toDateTime(?) AND {filter}{others} \
                 GROUP BY owner, session_id ORDER BY owner, session_id"
            ))
            .bind(watermark)
            .bind(started)
            .bind(live.map_or(0, LiveViews::writer))
            .bind(since)
            .bind(from)
            .fetch_all::<WindowCount>()
            .await
            .map_err(map_err)?;
        let mut stats = RefreshStats::default();
        let mut ahead = HashMap::new();
        let mut by_owner: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut foreign: HashSet<(String, String)> = HashSet::new();
        for k in keys {
            let key = (k.owner, k.session_id);
            // A record in a late second, or more records since the last step started than
            // it saw: something was written for the view since it was last derived.
            let grew = previous.is_none_or(|p| {
                (late && k.n > k.ahead) || k.ahead > p.ahead.get(&key).copied().unwrap_or(0)
            });
            stats.candidates += 1;
            stats.unchanged += usize::from(!grew);
            if k.foreign > 0 {
                foreign.insert(key.clone());
            }
            // A view the live views hold whole is written from memory, now or at the next
            // step (a batch acknowledged after the snapshot); anything else is read back.
            let held = k.foreign == 0
                && live.is_some_and(|l| {
                    l.holds(&Key {
                        owner: key.0.as_str().into(),
                        session: key.1.as_str().into(),
                    })
                });
            if grew && !held {
                by_owner
                    .entry(key.0.clone())
                    .or_default()
                    .push(key.1.clone());
            }
            if k.next_ahead > 0 {
                ahead.insert(key, k.next_ahead);
            }
        }
        // The snapshot's views: those memory may hold whole are written from it once
        // checked; the rest are read back.
        let mut read_back: Vec<Key> = snapshot.broken.clone();
        let mut from_memory = Vec::new();
        for v in &snapshot.views {
            let key = (v.key.owner.to_string(), v.key.session.to_string());
            if restarted || foreign.contains(&key) {
                read_back.push(v.key.clone());
            } else {
                from_memory.push(v);
            }
        }
        if let Some(l) = live {
            l.break_views(read_back.iter().filter(|k| !snapshot.broken.contains(k)));
        }
        // After this refresher's own last step every candidate grew, so comparing with the
        // stored views' record counts would skip nothing: that read is left out then.
        let skip_unchanged = previous.is_none();
        if !by_owner.is_empty() || !read_back.is_empty() || !from_memory.is_empty() {
            let set = SessionSet::open(&self.client).await?;
            // A view memory writes for the first time must have had no other record.
            let (checked, failed) = self
                .check_new_views(&set, &from_memory, started, live)
                .await?;
            if let Some(l) = live {
                l.check_views(checked.iter());
                l.break_views(failed.iter());
            }
            let failed: HashSet<&Key> = failed.iter().collect();
            let (memory, unchecked): (Vec<&Changed>, Vec<&Changed>) = from_memory
                .into_iter()
                .partition(|v| !failed.contains(&v.key));
            read_back.extend(unchecked.into_iter().map(|v| v.key.clone()));
            if let Some(l) = live {
                read_back.extend(self.write_live(l, memory, &mut stats).await?);
            }
            for k in read_back {
                by_owner
                    .entry(k.owner.to_string())
                    .or_default()
                    .push(k.session.to_string());
            }
            for (owner, sessions) in &mut by_owner {
                // Sorted, once each: the chunks' reads are narrow ranges of the sort key.
                sessions.sort_unstable();
                sessions.dedup();
                for chunk in sessions.chunks(cfg.chunk.max(1)) {
                    self.refresh_chunk(&set, owner, chunk, skip_unchanged, &mut stats)
                        .await?;
                }
            }
            set.close().await;
        }
        self.write_state(WATERMARK, started).await?;
        if let Some(l) = live {
            l.commit(&snapshot);
        }
        state.watermark = Some(started);
        // Only a completed step's counts: after a failed one, the next step compares
        // with the last completed step again (from its window start).
        state.recent = Some(RecentRecords {
            watermark: started,
            seconds,
            ahead,
        });
        Ok(stats)
    }

    /// The live views of `views` not checked yet: those with no record by another writer
    /// and none of this process's stored before memory took their first batch (a view
    /// memory forgot and that came back has those) are checked; the others are not whole
    /// in memory. `now` is the server's time at the step's start. Returns (checked,
    /// failed). With time-ordered session ids (SDK 0.2.0) views new to memory are the
    /// newest ids: a narrow range of the sort key.
    async fn check_new_views(
        &self,
        set: &SessionSet,
        views: &[&Changed],
        now: i64,
        live: Option<&LiveViews>,
    ) -> Result<(Vec<Key>, Vec<Key>), AnalyticsError> {
        let Some(live) = live else {
            return Ok(Default::default());
        };
        let mut by_owner: BTreeMap<&str, Vec<&Changed>> = BTreeMap::new();
        for v in views.iter().filter(|v| !v.checked) {
            by_owner.entry(&v.key.owner).or_default().push(v);
        }
        let (mut checked, mut failed) = (Vec::new(), Vec::new());
        for (owner, mut views) in by_owner {
            views.sort_unstable_by(|a, b| a.key.cmp(&b.key));
            for chunk in views.chunks(100_000) {
                let sessions: Vec<&str> = chunk.iter().map(|v| &*v.key.session).collect();
                set.load(&sessions).await?;
                let records: HashMap<String, OwnRecords> = set
                    .query(&format!(
                        "SELECT session_id, toUInt64(countIf(writer != ?)) AS foreign, \
                         toInt64(toUnixTimestamp(min(written_at))) AS oldest \
                         FROM view_batches WHERE owner = ? AND session_id IN {SESSION_SET} \
                         GROUP BY session_id"
                    ))
                    .bind(live.writer())
                    .bind(owner)
                    .fetch_all::<OwnRecords>()
                    .await
                    .map_err(map_err)?
                    .into_iter()
                    .map(|r| (r.session_id.clone(), r))
                    .collect();
                for v in chunk {
                    // A record memory holds was stored before its batch was acknowledged,
                    // at most one insert's timeout earlier (a slower write fails, and
                    // breaks the view); `written_at` is whole seconds.
                    let taken_from = now - v.age.as_secs() as i64 - LIVE_INSERT_SLACK_S;
                    let whole = records
                        .get(&*v.key.session)
                        .is_none_or(|r| r.foreign == 0 && r.oldest >= taken_from);
                    if whole {
                        checked.push(v.key.clone());
                    } else {
                        failed.push(v.key.clone());
                    }
                }
            }
        }
        Ok((checked, failed))
    }

    /// Writes `views` from the live views' memory as it holds them now, with the version
    /// their batches and events give. Returns those to read back instead: the views memory
    /// stopped holding whole since the snapshot, and those spanning more days than get a
    /// tombstone (the read-back path reads the days their stored rows are under).
    async fn write_live(
        &self,
        live: &LiveViews,
        views: Vec<&Changed>,
        stats: &mut RefreshStats,
    ) -> Result<Vec<Key>, AnalyticsError> {
        let now = now_ms();
        let (mut insert, mut rows) = (None, Vec::with_capacity(WRITE_BATCH));
        let (mut long, mut read_back) = (Vec::new(), Vec::new());
        let no_days = HashMap::new();
        for v in views {
            let Some(held) = live.view(&v.key) else {
                read_back.push(v.key.clone());
                continue;
            };
            if day_of(held.view.ended_at) - day_of(held.view.started_at) > MAX_TOMBSTONE_DAYS {
                read_back.push(v.key.clone());
                continue;
            }
            stats.live += 1;
            rows.push(ViewRow::new(
                &v.key.owner,
                held.view,
                held.records,
                held.events,
                now,
            ));
            if rows.len() >= WRITE_BATCH {
                self.write_views(&mut insert, &mut rows, &mut long, &no_days, stats)
                    .await?;
            }
        }
        self.write_views(&mut insert, &mut rows, &mut long, &no_days, stats)
            .await?;
        debug_assert!(long.is_empty(), "long views are read back");
        if let Some(insert) = insert {
            insert.end().await.map_err(map_err)?;
        }
        Ok(read_back)
    }

    async fn write_state(&self, name: &str, value: i64) -> Result<(), AnalyticsError> {
        let mut insert = self
            .client
            .insert::<StateRow<'_>>("qoe_refresh_state")
            .await
            .map_err(map_err)?;
        insert
            .write(&StateRow { name, value })
            .await
            .map_err(map_err)?;
        insert.end().await.map_err(map_err)
    }

    /// After a ClickHouse restart: batch records the Buffer in front of `view_batches` held
    /// are lost if the server did not stop cleanly, while their events are stored (the
    /// sink writes them first). Every session with events written from `since` (the step
    /// window's start; the step before flushed the Buffer) to `until` gets a record with
    /// bare `dims` written straight to `view_batches`, so this step derives it again from
    /// its events. Each event's write time is in its `ver` (the ClickHouse sink's
    /// `first_wins_version`: `u64::MAX` minus write ms · 2^20 plus a counter); the window
    /// is widened by [`RECOVERY_SKEW_S`] against the writers' clock skew. One scan of the
    /// `ver` column per restart. Such a record orders after every real record of the same
    /// `first_ts` (`seq` is the largest), so it decides a dimension only where the
    /// session's earlier events lost their own record: their context is unknown then, and
    /// says so. Returns the number of sessions.
    async fn recover_records(&self, since: i64, until: i64) -> Result<usize, AnalyticsError> {
        let ms = |s: i64| (s.max(0) as u64) * 1000;
        let (ver_min, ver_max) = ingest::sink::clickhouse::versions_written_between(
            ms(since - RECOVERY_SKEW_S),
            ms(until + 1 + RECOVERY_SKEW_S),
        );
        let sessions = self
            .client
            .query(
                "SELECT owner, session_id, toInt64(min(ts)) AS first_ts FROM telemetry_events \
                 WHERE ver >= ? AND ver <= ? GROUP BY owner, session_id",
            )
            .bind(ver_min)
            .bind(ver_max)
            .fetch_all::<RecoveredRecord>()
            .await
            .map_err(map_err)?;
        if sessions.is_empty() {
            return Ok(0);
        }
        // No context and an unknown user agent: a bare record's `dims`, which depend on
        // nothing else of the record.
        let bare_dims = ingest::BatchRecord::bare("".into(), "".into(), 0).dims_json();
        let mut insert = self
            .client
            .insert::<RecordRow<'_>>("view_batches")
            .await
            .map_err(map_err)?;
        for r in &sessions {
            insert
                .write(&RecordRow {
                    owner: &r.owner,
                    session_id: &r.session_id,
                    first_ts: r.first_ts,
                    seq: u64::MAX,
                    dims: &bare_dims,
                    // No writer's: a live view seeing it is read back.
                    writer: 0,
                })
                .await
                .map_err(map_err)?;
        }
        insert.end().await.map_err(map_err)?;
        Ok(sessions.len())
    }

    /// The stored views of the sessions in `set` started between `first_day` and
    /// `last_day`: the highest record count each was derived from, and the days it is
    /// stored under.
    async fn stored_views(
        &self,
        set: &SessionSet,
        owner: &str,
        (first_day, last_day): (i64, i64),
    ) -> Result<(HashMap<String, u64>, HashMap<String, Vec<i64>>), AnalyticsError> {
        let mut counts: HashMap<String, u64> = HashMap::new();
        let mut days: HashMap<String, Vec<i64>> = HashMap::new();
        for r in set
            .query(&format!(
                "SELECT session_id, batch_rows, started_at FROM qoe_views FINAL \
                 WHERE owner = ? AND session_id IN {SESSION_SET} \
                 AND started_day >= ? AND started_day <= ? AND deleted = 0"
            ))
            .bind(owner)
            .bind(first_day)
            .bind(last_day)
            .fetch_all::<StoredCount>()
            .await
            .map_err(map_err)?
        {
            let n = counts.entry(r.session_id.clone()).or_insert(0);
            *n = (*n).max(r.batch_rows);
            days.entry(r.session_id)
                .or_default()
                .push(day_of(r.started_at));
        }
        Ok((counts, days))
    }

    /// Derives and upserts the views of `sessions`. With `skip_unchanged`, views whose
    /// stored record count equals their records' are left alone (after a restart, when
    /// every session of the window is a candidate).
    async fn refresh_chunk(
        &self,
        set: &SessionSet,
        owner: &str,
        sessions: &[String],
        skip_unchanged: bool,
        stats: &mut RefreshStats,
    ) -> Result<(), AnalyticsError> {
        // A session's records nearly always carry the same dims: one row per distinct
        // dims, at its earliest (first_ts, seq), resolves the same dimensions as every
        // record would (each field is the first non-empty one in that order, analytics.md
        // §2) and saves sending and parsing the copies.
        set.load(sessions).await?;
        let batches = set
            .query(&format!(
                "SELECT session_id, dims, toInt64(min(first_ts)) AS first_at, \
                 toInt64(max(first_ts)) AS last_at, argMin(seq, tuple(first_ts, seq)) AS first_seq, \
                 toUInt64(count()) AS records FROM view_batches \
                 WHERE owner = ? AND session_id IN {SESSION_SET} GROUP BY session_id, dims"
            ))
            .bind(owner)
            .fetch_all::<BatchGroupRow>()
            .await
            .map_err(map_err)?;
        let mut records: HashMap<String, Records> = HashMap::new();
        let (mut first_ts, mut last_ts) = (i64::MAX, i64::MIN);
        for b in batches {
            first_ts = first_ts.min(b.first_at);
            last_ts = last_ts.max(b.last_at);
            let r = records.entry(b.session_id).or_default();
            r.count += b.records;
            r.dims
                .push(BatchDims::from_stored(b.first_at, b.first_seq, &b.dims));
        }
        // A stored view was derived from some of these records (and their events), so
        // it starts at or before one of their `first_ts`, and at or after the earliest
        // (unless it saw events whose record is not visible: it is then not found and
        // derived again). Within each day of the sort key, `session_id IN` skips granules.
        let day_range = if records.is_empty() {
            (0, 0)
        } else {
            (day_of(first_ts), day_of(last_ts))
        };
        let (stored, stored_days) = if skip_unchanged {
            self.stored_views(set, owner, day_range).await?
        } else {
            Default::default()
        };
        // A view whose record count is unchanged saw every event of those records when
        // it was derived (records are inserted after their events): skip it.
        let changed: Vec<&str> = sessions
            .iter()
            .filter(|s| {
                let n = records.get(*s).map_or(0, |r| r.count);
                n > 0 && stored.get(*s) != Some(&n)
            })
            .map(String::as_str)
            .collect();
        stats.unchanged += sessions.len() - changed.len();
        if changed.is_empty() {
            return Ok(());
        }
        if changed.len() < sessions.len() {
            set.load(&changed).await?;
        }
        // One row per session, its events in any order, derived one session at a time as
        // they stream in: this side holds one session's events (a step can read millions).
        // ClickHouse holds the chunk's while grouping them, as it did to sort them by
        // session, with less memory and about half the CPU (docs/benchmarks.md).
        let mut cursor = set
            .query(session_events_sql())
            .bind(owner)
            .fetch::<SessionEventsRow<'_>>()
            .map_err(map_err)?;
        // Derived views go out in batches as they are derived, into one insert: holding a
        // chunk's rows (100,000 views) cost more in fresh pages than deriving them.
        let mut d = Deriver {
            owner,
            records: &records,
            now_ms: now_ms(),
            parsed: Vec::new(),
            rows: Vec::with_capacity(WRITE_BATCH),
        };
        let mut long = Vec::new();
        let mut insert = None;
        let mut events = Vec::new();
        while let Some(r) = cursor.next().await.map_err(map_err)? {
            // The types a rule reads the payload of come from `payloads`, parsed as read;
            // rows of an unknown type are left out.
            events.extend(r.keys.iter().filter_map(|&key| {
                let (ts, t) = unpack_key(key).filter(|(_, t)| !needs_payload(*t))?;
                Some((Event::new(ts, t), 0))
            }));
            events.extend(r.payloads.iter().filter_map(|&(key, payload, ver)| {
                let (ts, t) = unpack_key(key)?;
                Some((Event::parse(ts, t, payload), ver))
            }));
            if !events.is_empty() {
                d.derive(r.session_id, &mut events);
            }
            if d.rows.len() >= WRITE_BATCH {
                self.write_views(&mut insert, &mut d.rows, &mut long, &stored_days, stats)
                    .await?;
            }
        }
        // The session's read is over before its next request (the long views' set below):
        // ClickHouse refuses overlapping requests of one session.
        drop(cursor);
        self.write_views(&mut insert, &mut d.rows, &mut long, &stored_days, stats)
            .await?;
        // Views spanning more days than get a tombstone also need the days their stored
        // rows are under (read already on a first step).
        if !long.is_empty() {
            let sessions: Vec<&str> = long
                .iter()
                .map(|r: &ViewRow| r.session_id.as_str())
                .collect();
            let read = if skip_unchanged {
                None
            } else {
                set.load(&sessions).await?;
                Some(self.stored_views(set, owner, day_range).await?.1)
            };
            let days = read.as_ref().unwrap_or(&stored_days);
            let mut rows = Vec::new();
            for r in long {
                rows.extend(tombstones(&r, days));
                rows.push(r);
            }
            let insert = self.views_insert(&mut insert).await?;
            for r in &rows {
                insert.write(r).await.map_err(map_err)?;
            }
        }
        match insert {
            Some(insert) => insert.end().await.map_err(map_err),
            None => Ok(()),
        }
    }

    /// Writes `derived` (emptied) with their tombstones to `insert`; views spanning more
    /// days than get a tombstone go to `long` instead (see [`tombstones`]).
    async fn write_views(
        &self,
        insert: &mut Option<Insert<ViewRow>>,
        derived: &mut Vec<ViewRow>,
        long: &mut Vec<ViewRow>,
        stored_days: &HashMap<String, Vec<i64>>,
        stats: &mut RefreshStats,
    ) -> Result<(), AnalyticsError> {
        stats.derived += derived.len();
        stats.events += derived.iter().map(|r| r.event_rows as usize).sum::<usize>();
        for r in derived.drain(..) {
            if day_of(r.ended_at) - day_of(r.started_at) > MAX_TOMBSTONE_DAYS {
                long.push(r);
                continue;
            }
            let insert = self.views_insert(insert).await?;
            for t in tombstones(&r, stored_days) {
                insert.write(&t).await.map_err(map_err)?;
            }
            insert.write(&r).await.map_err(map_err)?;
        }
        Ok(())
    }

    /// The `qoe_views` insert of a chunk, opened at its first row.
    async fn views_insert<'a>(
        &self,
        insert: &'a mut Option<Insert<ViewRow>>,
    ) -> Result<&'a mut Insert<ViewRow>, AnalyticsError> {
        if insert.is_none() {
            *insert = Some(self.client.insert("qoe_views").await.map_err(map_err)?);
        }
        Ok(insert.as_mut().expect("opened above"))
    }
}

/// Derived views written per batch while a chunk's events stream in.
const WRITE_BATCH: usize = 4096;

/// The temporary table holding the sessions a refresh step reads (see [`SessionSet`]).
const SESSION_SET: &str = "refresh_sessions";

/// The sessions of the chunk a refresh step reads, as a temporary table of the step's own
/// ClickHouse session (HTTP `session_id`), which its reads filter on with
/// `session_id IN refresh_sessions` (still narrowing the primary-key range). Sent in each
/// query as an array literal instead, a set of 100,000 sessions cost ClickHouse 0.08–0.15 s
/// of CPU per query to parse and build, twice per chunk (docs/benchmarks.md); loading the
/// table costs 0.004 s. ClickHouse refuses overlapping requests of one session, so only
/// the step's reads go through it (its `qoe_views` insert, open while the events stream
/// in, goes through the shared client); and every request of a step must reach the same
/// server, which a `CLICKHOUSE_URL` balancing over replicas must ensure by pinning
/// sessions.
struct SessionSet {
    client: Client,
}

impl SessionSet {
    /// A new session with an empty table.
    async fn open(client: &Client) -> Result<Self, AnalyticsError> {
        static OPENED: AtomicU64 = AtomicU64::new(0);
        let id = format!(
            "streamwatch-refresh-{}-{}-{}",
            std::process::id(),
            now_ms(),
            OPENED.fetch_add(1, Ordering::Relaxed)
        );
        // The session outlives the gaps between a step's reads (a chunk's insert is
        // answered in between); a failed step's session ends on its own.
        let client = client
            .clone()
            .with_setting("session_id", id)
            .with_setting("session_timeout", "300");
        client
            .query(&format!(
                "CREATE TEMPORARY TABLE {SESSION_SET} (session_id String) ENGINE = Memory"
            ))
            .execute()
            .await
            .map_err(map_err)?;
        Ok(SessionSet { client })
    }

    /// Makes `sessions` the set.
    async fn load<S: AsRef<str>>(&self, sessions: &[S]) -> Result<(), AnalyticsError> {
        self.client
            .query(&format!("TRUNCATE TEMPORARY TABLE {SESSION_SET}"))
            .execute()
            .await
            .map_err(map_err)?;
        let mut insert = self
            .client
            .insert::<SessionIdRow<'_>>(SESSION_SET)
            .await
            .map_err(map_err)?;
        for s in sessions {
            insert
                .write(&SessionIdRow {
                    session_id: s.as_ref(),
                })
                .await
                .map_err(map_err)?;
        }
        insert.end().await.map_err(map_err)
    }

    fn query(&self, sql: &str) -> clickhouse::query::Query {
        self.client.query(sql)
    }

    /// Ends the session's table now rather than at its timeout (best effort: it goes
    /// with the session anyway).
    async fn close(self) {
        let dropped = self
            .client
            .query(&format!("DROP TEMPORARY TABLE IF EXISTS {SESSION_SET}"))
            .execute()
            .await;
        if let Err(e) = dropped {
            tracing::debug!(error = %e, "dropping the refresh step's session table");
        }
    }
}

/// Derives a chunk's views one session at a time into `rows`, which the caller writes
/// out in batches.
struct Deriver<'a> {
    owner: &'a str,
    records: &'a HashMap<String, Records>,
    now_ms: i64,
    /// A buffer reused across sessions.
    parsed: Vec<Event>,
    rows: Vec<ViewRow>,
}

impl Deriver<'_> {
    /// Derives `session`'s view from its events with their `ver` (any order, duplicates
    /// included) and its records.
    fn derive(&mut self, session: &str, evs: &mut Vec<(Event, u64)>) {
        // The row with the highest `ver` of a key is the first stored (what FINAL keeps):
        // order by key, then `ver` descending, and keep the first.
        evs.sort_by(|(a, av), (b, bv)| (a.order_key(), bv).cmp(&(b.order_key(), av)));
        evs.dedup_by(|(b, _), (a, _)| a.order_key() == b.order_key());
        self.parsed.clear();
        self.parsed.extend(evs.drain(..).map(|(e, _)| e));
        let (count, dims) = self
            .records
            .get(session)
            .map_or((0, &[][..]), |r| (r.count, r.dims.as_slice()));
        if let Some(view) = View::derive(session, &self.parsed, dims) {
            let events = self.parsed.len() as u64;
            self.rows
                .push(ViewRow::new(self.owner, view, count, events, self.now_ms));
        }
    }
}

/// Tombstones of `r` under every other day a derivation from less data may have put the
/// view: such a derivation saw a subset of the events, so it started in
/// [started_at, ended_at] (up to [`MAX_TOMBSTONE_DAYS`] after its start); plus any day a
/// stored row of it was read under (`stored_days`, which a view spanning more days must
/// have read).
fn tombstones(r: &ViewRow, stored_days: &HashMap<String, Vec<i64>>) -> Vec<ViewRow> {
    let day = day_of(r.started_at);
    let last = day_of(r.ended_at).min(day + MAX_TOMBSTONE_DAYS);
    let mut days: Vec<i64> = (day + 1..=last).collect();
    for d in stored_days.get(&r.session_id).into_iter().flatten() {
        if *d != day && !days.contains(d) {
            days.push(*d);
        }
    }
    days.into_iter().map(|d| r.tombstone(d)).collect()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn view_columns_match_the_row() {
        let names: Vec<&str> = VIEW_COLUMNS.split(',').map(str::trim).collect();
        assert_eq!(names, <ViewRow as Row>::COLUMN_NAMES);
    }

    #[test]
    fn packed_event_keys_unpack_to_time_and_type() {
        // What the query computes: ts * 16 + the type's position in ALL plus one.
        let pack = |ts: i64, code: i64| ts * KEY_TYPES + code;
        for (i, t) in EventType::ALL.iter().enumerate() {
            for ts in [
                0,
                1,
                1_764_000_000_123,
                -62_167_219_200_000,
                253_402_300_799_999,
            ] {
                assert_eq!(unpack_key(pack(ts, i as i64 + 1)), Some((ts, *t)));
            }
        }
        // 0 is a type outside the closed set; codes past the last type are never sent.
        assert_eq!(unpack_key(pack(1_000, 0)), None);
        assert_eq!(unpack_key(pack(-1_000, 0)), None);
        assert_eq!(
            unpack_key(pack(1_000, EventType::ALL.len() as i64 + 1)),
            None
        );
    }

    #[test]
    fn the_events_read_names_every_type_in_contract_order() {
        let sql = session_events_sql();
        let names: Vec<String> = EventType::ALL
            .iter()
            .map(|t| format!("'{}'", t.as_str()))
            .collect();
        assert!(sql.contains(&format!("[{}], [1, 2, 3, 4, 5, 6, 7, 8]", names.join(", "))));
        assert!(
            sql.contains("type IN ('playback_start', 'quality_change', 'error', 'session_end')")
        );
    }
}
