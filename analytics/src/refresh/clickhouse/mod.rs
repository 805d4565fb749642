//! The ClickHouse refresh step: finds the views touched since the watermark, writes those
//! the live views hold whole from memory, and derives the rest again from their stored
//! events ([`chunk`]); after a server restart it first recovers the batch records the
//! Buffer may have lost ([`recover`]). The step's reads go through a session's temporary
//! table of session ids ([`SessionSet`]).
//!
//! # The algorithm
//!
//! Records carry the server's `written_at` (seconds). A step reads the server's `now()`
//! first, takes the records written since `watermark − margin`, and sets the watermark to
//! that `now()`. A record becomes visible within its insert's timeout (30 s) of
//! `written_at`, so the margin ([`RefreshConfig::margin`], 60 s) covers records that were
//! in flight when the previous step ran. A step reads only the records written since the
//! previous one started and the seconds of the margin whose record count changed
//! ([`RecentRecords`]), and skips sessions whose count did not grow. On a first step (or
//! after a restart), when every session of the window is a candidate, views whose record
//! count equals the stored one are skipped (a record is inserted after its events, so an
//! unchanged count means no unseen event). Both keep the margin cheap.
//!
//! Records reach `view_batches` through a Buffer table; a step flushes it first and reads
//! `view_batches` alone (a record, once seen, stays visible). A step that finds the server
//! started later than the start it recorded (a restart, which may have emptied the Buffer)
//! first writes a bare record for every session whose events were written since the
//! window start, so those views are derived again from their events ([`recover`]).
//!
//! **With live views** (the server): the views the process is ingesting are held in
//! memory as folds ([`crate::live`]); a step takes a snapshot of those that changed before
//! the Buffer's flush and writes them from memory, reading back only the views memory does
//! not hold whole (another writer's record in the window, a first check that finds older
//! records, a broken batch order, a failed write) and the views of other writers. The
//! window's reads then leave out this process's records.
//!
//! **Several instances** may refresh the same ClickHouse: each upsert carries `version` =
//! records × 2³² + distinct events of its derivation, and `ReplacingMergeTree` keeps the
//! highest, so the row derived from the most data wins in any order; the shared watermark
//! only ever moves forward (the highest value wins). A step writes its derived views in
//! batches while their events still stream in, so an interrupted step may have upserted
//! some: each is a whole derivation, and the next step derives it again.

mod chunk;
mod recover;

use std::collections::{BTreeMap, HashMap, HashSet};

use clickhouse::{Client, Row};
use serde::{Deserialize, Serialize};

use self::chunk::{MAX_TOMBSTONE_DAYS, WRITE_BATCH};
use super::{now_ms, RecentRecords, RefreshConfig, RefreshState, RefreshStats};
use crate::live::{self, Changed, Key, LiveViews};
use crate::store::clickhouse::{map_err, SessionSet, ViewRow};
use crate::store::sql::day_of;
use crate::store::AnalyticsError;

/// The temporary table holding the sessions of the chunk a step reads ([`SessionSet`]).
const SESSION_SET: &str = "refresh_sessions";

/// The refresh step of one ClickHouse store: reads and upserts through one endpoint's
/// client (a step's session and its streamed reads and writes stay on one node; the next
/// step, after a failure, goes to another: `ingest::ChClient::pinned`).
pub(crate) struct ChRefresh {
    client: Client,
    /// The tables are a cluster's: no Buffer to flush, no restart to recover from (no
    /// node's memory holds records).
    cluster: bool,
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

#[derive(Row, Serialize)]
struct StateRow<'a> {
    name: &'a str,
    value: i64,
}

/// The watermark's row in `qoe_refresh_state`.
const WATERMARK: &str = "views";

/// The row in `qoe_refresh_state` holding when the ClickHouse server last started (epoch
/// s, `now() - uptime()`), as of the last step: a later start means the server restarted,
/// and the batch records its Buffer held may be gone ([`ChRefresh::recover_records`]).
const SERVER_STARTED: &str = "clickhouse_started";

/// Slack on the server's start time (`now()` and `uptime()` are whole seconds, read at
/// different instants): a start more than this later than the stored one is a restart.
const RESTART_SLACK_S: i64 = 5;

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

impl ChRefresh {
    pub fn new(client: Client, cluster: bool) -> Self {
        ChRefresh { client, cluster }
    }

    /// One refresh step (see [`crate::refresh`]): the views touched by batch records
    /// written since the watermark (minus the margin) whose record count changed are
    /// derived again and upserted; then the watermark moves to the step's start.
    pub async fn step(
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
        if !self.cluster {
            self.client
                .query("OPTIMIZE TABLE view_batches_buffer")
                .execute()
                .await
                .map_err(map_err)?;
        }
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
        // (A cluster's nodes each have their own start, and no Buffer whose records a
        // restart could lose.)
        let restarted =
            !self.cluster && known_start > 0 && server_started > known_start + RESTART_SLACK_S;
        if restarted {
            let n = self.recover_records(since, started).await?;
            tracing::warn!(
                recovered_sessions = n,
                "ClickHouse restarted since the last refresh step: views with events written since then are derived again"
            );
        }
        if !self.cluster && (restarted || known_start == 0) {
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
            // Also the views with another writer's record that did not change here since the
            // last step (so not in the snapshot): memory is not their whole view either, and
            // the window sees that record only once; a later batch taken here must not make
            // memory write them.
            let others: Vec<Key> = foreign
                .iter()
                .map(|(owner, session)| Key {
                    owner: owner.as_str().into(),
                    session: session.as_str().into(),
                })
                .collect();
            l.break_views(&others);
        }
        // After this refresher's own last step every candidate grew, so comparing with the
        // stored views' record counts would skip nothing: that read is left out then.
        let skip_unchanged = previous.is_none();
        if !by_owner.is_empty() || !read_back.is_empty() || !from_memory.is_empty() {
            let set = SessionSet::open(&self.client, SESSION_SET).await?;
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
                         FROM view_batches WHERE owner = ? AND session_id GLOBAL IN {SESSION_SET} \
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
}
