//! The SQLite refresh step. The watermark is the last `view_batches.id` derived. The
//! store has a single writer and a record commits with its events, so ids grow in commit
//! order and the step is exact: every session with a record above the watermark is
//! derived again, nothing else; the views are upserted in short transactions on the sink's
//! single writer, a stored row derived from more data (a higher `version`) staying.
//!
//! **Records by session.** Ingest only appends to `view_batches`; the step copies the
//! records above the watermark into `view_batches_by_session` (in key order, before it moves
//! the watermark), so a session's records are found there up to the step's top id, and
//! above it in `view_batches`' short id range ([`records_of`]; the migration
//! `0003_records_by_session` says why).
//!
//! **With live views** (the server): a view the live views hold whole ([`crate::live`]) is
//! written from memory; the others are derived from all their events, read on the read
//! pool and streamed one session at a time. The store's one writer is this process, so
//! the check that memory is the whole view is a count: the first time memory writes a
//! view, the store must hold exactly as many records of it as memory took. Memory takes a
//! batch only after its record committed, so memory's records are among the store's, and
//! equal counts make them the same records. From then on every record of the view comes
//! through this process, which gives it to memory (or breaks the view on a failed write).
//! A count that differs (records of an earlier process, or of this one before memory
//! forgot the view) breaks the view: it is read back from then on.

use std::collections::{BTreeMap, HashMap};

use futures_util::TryStreamExt;
use ingest::EventType;
use sqlx::Row;

use super::{now_ms, RefreshConfig, RefreshState, RefreshStats};
use crate::dims::BatchDims;
use crate::event::{needs_payload, Event};
use crate::live::{self, Changed, Key, LiveView, LiveViews, Snapshot};
use crate::store::sql::Sql;
use crate::store::sqlite::{bind_all, map_err, SqliteStore};
use crate::store::{view_version, AnalyticsError};
use crate::view::View;

/// The refresh step of the embedded store.
pub(crate) struct SqliteRefresh {
    store: SqliteStore,
}

/// The watermark's row in `qoe_refresh_state`.
const WATERMARK: &str = "views";

/// The upsert of one view.
const UPSERT_VIEW: &str = "INSERT OR REPLACE INTO qoe_views (owner, session_id, started_at, \
    ended_at, started, first_frame_at, startup_ms, failed, failed_at, startup_failure, \
    exit_before_start, rebuffer_count, rebuffer_ms, paused_ms, watch_time_ms, \
    bitrate_weighted_sum, bitrate_covered_ms, rendition_switches, upshifts, downshifts, \
    error_count, fatal_error_code, content_id, src, sdk, player, browser, os, device_type, \
    batch_rows, event_rows, version, derived_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, \
    ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, \
    ?28, ?29, ?30, ?31, ?32, ?33)";

/// Views upserted per write transaction. Ingest shares the store's single writer, and an
/// acknowledgement that comes while a transaction runs waits for it: 128 views hold the
/// writer about 2–3 ms (docs/benchmarks.md, "SQLite's p99 at half rate: short refresher
/// transactions").
const UPSERT_BATCH: usize = 128;

/// Sessions in one read (each a bound parameter, twice: [`records_of`]).
const MAX_SESSIONS: usize = 10_000;

/// Record ids copied into `view_batches_by_session` per write transaction, kept short as
/// [`UPSERT_BATCH`] is: 512 ids hold the writer about 2–3 ms, 2,048 held it 6–8 ms.
const COPY_IDS: i64 = 512;

/// The copy of the records with ids in `(?1, ?2]` into `view_batches_by_session`, sorted by
/// its key so that each page it touches is written once. `OR IGNORE`: a step that copied and
/// then failed before moving the watermark copies the same ids again.
const COPY_BY_SESSION: &str = "INSERT OR IGNORE INTO view_batches_by_session \
    (owner, session_id, id) SELECT owner, session_id, id FROM view_batches \
    WHERE id > ?1 AND id <= ?2 ORDER BY owner, session_id, id";

/// Appends a subquery of the records (`session_id`, `id`) of `owner`'s `sessions`: those
/// copied by session (ids up to `copied`), and those above `copied` from `view_batches`' id
/// range, which holds what committed since the step read its top id.
fn records_of<'a>(
    sql: &mut Sql,
    owner: &str,
    sessions: impl IntoIterator<Item = &'a str> + Clone,
    copied: i64,
) {
    sql.push("(SELECT session_id, id FROM view_batches_by_session WHERE owner = ")
        .str(owner)
        .push(" AND session_id IN ")
        .list(sessions.clone())
        .push(" AND id <= ")
        .int(copied)
        .push(" UNION ALL SELECT session_id, id FROM view_batches WHERE id > ")
        .int(copied)
        .push(" AND owner = ")
        .str(owner)
        .push(" AND session_id IN ")
        .list(sessions)
        .push(")");
}

/// The update in place of a stored view: the same key (`started_at` unchanged, as it is
/// for every view whose batches came in order) and a version not above this one. The
/// parameters are [`UPSERT_VIEW`]'s. It writes the table's leaf page only, where the
/// replace deletes and inserts the row and its entry in `qoe_views_session`.
const UPDATE_VIEW: &str = "UPDATE qoe_views SET ended_at = ?4, started = ?5, \
    first_frame_at = ?6, startup_ms = ?7, failed = ?8, failed_at = ?9, startup_failure = ?10, \
    exit_before_start = ?11, rebuffer_count = ?12, rebuffer_ms = ?13, paused_ms = ?14, \
    watch_time_ms = ?15, bitrate_weighted_sum = ?16, bitrate_covered_ms = ?17, \
    rendition_switches = ?18, upshifts = ?19, downshifts = ?20, error_count = ?21, \
    fatal_error_code = ?22, content_id = ?23, src = ?24, sdk = ?25, player = ?26, \
    browser = ?27, os = ?28, device_type = ?29, batch_rows = ?30, event_rows = ?31, \
    version = ?32, derived_at = ?33 \
    WHERE owner = ?1 AND started_at = ?3 AND session_id = ?2 AND version <= ?32";

/// Upserts derived views and their tags; a stored row with a higher version (derived
/// from more data) stays. A view already stored under the same key is updated in place,
/// and its tags are rewritten only when they changed (a view's tags rarely do): at each
/// step the refresher rewrites every playing view, and this writes a page or two less
/// for each than a replace (docs/benchmarks.md, "The refresher's view writes").
fn upsert_views(
    tx: &rusqlite::Transaction<'_>,
    owner: &str,
    derived: &[(View, u64, u64)],
    now_ms: i64,
) -> rusqlite::Result<()> {
    let mut update = tx.prepare_cached(UPDATE_VIEW)?;
    let mut stored =
        tx.prepare_cached("SELECT version FROM qoe_views WHERE owner = ?1 AND session_id = ?2")?;
    let mut upsert = tx.prepare_cached(UPSERT_VIEW)?;
    let mut stored_tags = tx.prepare_cached(
        "SELECT name, value FROM qoe_view_tags WHERE owner = ?1 AND session_id = ?2 \
         ORDER BY name",
    )?;
    let mut clear_tags =
        tx.prepare_cached("DELETE FROM qoe_view_tags WHERE owner = ?1 AND session_id = ?2")?;
    let mut add_tag = tx.prepare_cached(
        "INSERT INTO qoe_view_tags (owner, session_id, name, value) VALUES (?1, ?2, ?3, ?4)",
    )?;
    for (v, batch_rows, event_rows) in derived {
        let version = view_version(*batch_rows, *event_rows) as i64;
        let d = &v.dims;
        let values = rusqlite::params![
            owner,
            v.session_id,
            v.started_at,
            v.ended_at,
            v.started,
            v.first_frame_at,
            v.startup_ms,
            v.failed,
            v.failed_at,
            v.startup_failure,
            v.exit_before_start,
            v.rebuffer_count,
            v.rebuffer_ms,
            v.paused_ms,
            v.watch_time_ms,
            v.bitrate_weighted_sum,
            v.bitrate_covered_ms,
            v.rendition_switches,
            v.upshifts,
            v.downshifts,
            v.error_count,
            v.fatal_error_code,
            d.content_id,
            d.src,
            d.sdk,
            d.player,
            d.user_agent.browser,
            d.user_agent.os,
            d.user_agent.device_type,
            *batch_rows as i64,
            *event_rows as i64,
            version,
            now_ms,
        ];
        let session = rusqlite::params![owner, v.session_id];
        if update.execute(values)? == 1 {
            if same_tags(stored_tags.query(session)?, &d.tags)? {
                continue;
            }
        } else {
            // No row under this key: a new view, one whose `started_at` moved (an earlier
            // batch came late), or a higher version stored.
            let current: Option<i64> =
                stored
                    .query_row(session, |r| r.get(0))
                    .map(Some)
                    .or_else(|e| match e {
                        rusqlite::Error::QueryReturnedNoRows => Ok(None),
                        e => Err(e),
                    })?;
            if current.is_some_and(|c| c > version) {
                continue;
            }
            upsert.execute(values)?;
        }
        clear_tags.execute(session)?;
        for (name, value) in &d.tags {
            add_tag.execute(rusqlite::params![owner, v.session_id, name, value])?;
        }
    }
    Ok(())
}

/// Whether the stored tags (`name, value` rows by name) are exactly `tags`.
fn same_tags(
    mut stored: rusqlite::Rows<'_>,
    tags: &BTreeMap<String, String>,
) -> rusqlite::Result<bool> {
    let mut want = tags.iter();
    loop {
        match (stored.next()?, want.next()) {
            (None, None) => return Ok(true),
            (Some(row), Some((name, value))) => {
                let same = row.get_ref(0)?.as_str().ok() == Some(name.as_str())
                    && row.get_ref(1)?.as_str().ok() == Some(value.as_str());
                if !same {
                    return Ok(false);
                }
            }
            _ => return Ok(false),
        }
    }
}

impl SqliteRefresh {
    pub fn new(store: SqliteStore) -> Self {
        SqliteRefresh { store }
    }

    /// One refresh step (see [`crate::refresh`]): every session with a record above the
    /// watermark id is derived again (from memory when `live` holds it whole); then the
    /// watermark moves to the highest id read.
    pub async fn step(
        &self,
        state: &mut RefreshState,
        cfg: &RefreshConfig,
        live: Option<&LiveViews>,
    ) -> Result<RefreshStats, AnalyticsError> {
        // What memory holds, taken before the highest id is read: the record of every
        // batch memory took is then at or below it.
        let snapshot = live.map(|l| l.snapshot(live::IDLE)).unwrap_or_default();
        let pool = self.store.sink.pool();
        let watermark = match state.watermark {
            Some(w) => w,
            None => sqlx::query("SELECT value FROM qoe_refresh_state WHERE name = ?")
                .bind(WATERMARK)
                .fetch_optional(pool)
                .await
                .map_err(map_err)?
                .map(|r| r.try_get::<i64, _>(0))
                .transpose()
                .map_err(map_err)?
                .unwrap_or(0),
        };
        let top: i64 = sqlx::query("SELECT COALESCE(MAX(id), 0) FROM view_batches")
            .fetch_one(pool)
            .await
            .and_then(|r| r.try_get(0))
            .map_err(map_err)?;
        let mut stats = RefreshStats::default();
        // Every record at or below `copied` is in view_batches_by_session from here on.
        self.copy_by_session(watermark, top).await?;
        let copied = top.max(watermark);
        // Owner → sessions derived from their stored events.
        let mut read_back: BTreeMap<String, Vec<String>> = BTreeMap::new();
        if top > watermark {
            // Streamed: a step's window can hold tens of thousands of views.
            let mut keys = sqlx::query(
                "SELECT DISTINCT owner, session_id FROM view_batches WHERE id > ? AND id <= ?",
            )
            .bind(watermark)
            .bind(top)
            .fetch(pool);
            while let Some(r) = keys.try_next().await.map_err(map_err)? {
                stats.candidates += 1;
                let owner: &str = r.try_get(0).map_err(map_err)?;
                let session: &str = r.try_get(1).map_err(map_err)?;
                // A view memory holds whole is written from it, now (the snapshot has it)
                // or at the next step (memory took its batch after the snapshot).
                let held = live.is_some_and(|l| {
                    l.holds(&Key {
                        owner: owner.into(),
                        session: session.into(),
                    })
                });
                if !held {
                    read_back
                        .entry(owner.to_owned())
                        .or_default()
                        .push(session.to_owned());
                }
            }
        }
        if let Some(l) = live {
            let missed = self.write_live(l, &snapshot, copied, &mut stats).await?;
            for k in snapshot.broken.iter().chain(&missed) {
                read_back
                    .entry(k.owner.to_string())
                    .or_default()
                    .push(k.session.to_string());
            }
        }
        for (owner, sessions) in &mut read_back {
            // Sorted, once each: the reads are ranges of the tables' keys.
            sessions.sort_unstable();
            sessions.dedup();
            for chunk in sessions.chunks(cfg.chunk.clamp(1, MAX_SESSIONS)) {
                self.refresh_chunk(owner, chunk, copied, &mut stats).await?;
            }
        }
        if top > watermark {
            self.store
                .sink
                .write_transaction(move |tx| {
                    tx.execute(
                        "INSERT INTO qoe_refresh_state (name, value) VALUES (?1, ?2) \
                         ON CONFLICT (name) DO UPDATE SET value = MAX(value, excluded.value)",
                        rusqlite::params![WATERMARK, top],
                    )
                    .map(|_| ())
                })
                .await?;
        }
        if let Some(l) = live {
            l.commit(&snapshot);
        }
        state.watermark = Some(top.max(watermark));
        Ok(stats)
    }

    /// Copies the records with ids in `(from, to]` into `view_batches_by_session`, in
    /// transactions of [`COPY_IDS`] ids.
    async fn copy_by_session(&self, from: i64, to: i64) -> Result<(), AnalyticsError> {
        let mut low = from;
        while low < to {
            let high = to.min(low.saturating_add(COPY_IDS));
            self.store
                .sink
                .write_transaction(move |tx| {
                    tx.prepare_cached(COPY_BY_SESSION)?
                        .execute(rusqlite::params![low, high])
                        .map(|_| ())
                })
                .await?;
            low = high;
        }
        Ok(())
    }

    /// Writes the snapshot's views from memory as it holds them now: those checked before,
    /// and those whose record count in the store equals memory's (module doc), which are
    /// checked from then on. Returns the views to read back: those memory stopped holding
    /// whole since the snapshot, and those whose count differs (broken from now on).
    async fn write_live(
        &self,
        live: &LiveViews,
        snapshot: &Snapshot,
        copied: i64,
        stats: &mut RefreshStats,
    ) -> Result<Vec<Key>, AnalyticsError> {
        let mut read_back = Vec::new();
        let mut by_owner: BTreeMap<&str, Vec<(&Changed, LiveView)>> = BTreeMap::new();
        for v in &snapshot.views {
            match live.view(&v.key) {
                Some(held) => by_owner.entry(&v.key.owner).or_default().push((v, held)),
                None => read_back.push(v.key.clone()),
            }
        }
        for (owner, views) in by_owner {
            // Counted after memory's views were taken: memory's records are among those
            // counted, so equal counts mean the same records.
            let unchecked: Vec<&str> = views
                .iter()
                .filter(|(v, _)| !v.checked)
                .map(|(v, _)| &*v.key.session)
                .collect();
            let mut counts = HashMap::with_capacity(unchecked.len());
            for chunk in unchecked.chunks(MAX_SESSIONS) {
                counts.extend(self.record_counts(owner, chunk, copied).await?);
            }
            let (mut checked, mut failed) = (Vec::new(), Vec::new());
            let mut derived = Vec::with_capacity(views.len());
            for (v, held) in views {
                if !v.checked {
                    if counts.get(&*v.key.session) == Some(&held.records) {
                        checked.push(v.key.clone());
                    } else {
                        failed.push(v.key.clone());
                        continue;
                    }
                }
                derived.push((held.view, held.records, held.events));
            }
            live.check_views(&checked);
            live.break_views(&failed);
            read_back.extend(failed);
            stats.live += derived.len();
            self.write_derived(owner, derived, stats).await?;
        }
        Ok(read_back)
    }

    /// Records of each of `owner`'s `sessions` in the store (sessions without one left out).
    async fn record_counts(
        &self,
        owner: &str,
        sessions: &[&str],
        copied: i64,
    ) -> Result<HashMap<String, u64>, AnalyticsError> {
        let mut sql = Sql::new("SELECT session_id, COUNT(*) FROM ");
        records_of(&mut sql, owner, sessions.iter().copied(), copied);
        sql.push(" GROUP BY session_id");
        self.store
            .fetch(&sql)
            .await?
            .iter()
            .map(|r| {
                let session: String = r.try_get(0)?;
                let n: i64 = r.try_get(1)?;
                Ok((session, n as u64))
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(map_err)
    }

    /// Upserts `derived` (view, records, distinct events) of `owner`, in short
    /// transactions: ingest shares the store's single writer, and one transaction for a
    /// whole chunk (10,000 views) held its writes for long enough to put a p99 of 344 ms on
    /// ingest at half rate (docs/benchmarks.md).
    async fn write_derived(
        &self,
        owner: &str,
        mut derived: Vec<(View, u64, u64)>,
        stats: &mut RefreshStats,
    ) -> Result<(), AnalyticsError> {
        stats.derived += derived.len();
        stats.events += derived.iter().map(|d| d.2 as usize).sum::<usize>();
        // In the table's order (owner, started_at DESC, session_id): each transaction then
        // writes a contiguous run of its leaf pages, several views to a page, where views
        // in any order cost about a page each (docs/benchmarks.md).
        derived.sort_unstable_by(|(a, ..), (b, ..)| {
            b.started_at
                .cmp(&a.started_at)
                .then_with(|| a.session_id.cmp(&b.session_id))
        });
        let now = now_ms();
        while !derived.is_empty() {
            let part = derived.split_off(derived.len().saturating_sub(UPSERT_BATCH));
            let owner = owner.to_owned();
            self.store
                .sink
                .write_transaction(move |tx| upsert_views(tx, &owner, &part, now))
                .await?;
        }
        Ok(())
    }

    async fn refresh_chunk(
        &self,
        owner: &str,
        sessions: &[String],
        copied: i64,
        stats: &mut RefreshStats,
    ) -> Result<(), AnalyticsError> {
        let mut sql = Sql::new("SELECT r.session_id, b.first_ts, b.id, b.dims FROM ");
        records_of(&mut sql, owner, sessions.iter().map(String::as_str), copied);
        sql.push(" r JOIN view_batches b ON b.id = r.id");
        let mut records: HashMap<String, Vec<BatchDims>> = HashMap::new();
        for r in self.store.fetch(&sql).await? {
            let session: String = r.try_get(0).map_err(map_err)?;
            let first_ts: i64 = r.try_get(1).map_err(map_err)?;
            let id: i64 = r.try_get(2).map_err(map_err)?;
            let dims: String = r.try_get(3).map_err(map_err)?;
            records
                .entry(session)
                .or_default()
                .push(BatchDims::from_stored(first_ts, id as u64, &dims));
        }
        // Read after the records: every event of a record read is in it (one commit).
        // Streamed in session order and derived one session at a time: a chunk's events
        // can be millions of rows (long sessions), which one `fetch_all` held at once
        // (2.3 GiB of server RSS under `bench/ingest.sh`, docs/benchmarks.md).
        let mut sql = Sql::new(
            "SELECT session_id, ts, type, CASE WHEN type IN ('playback_start', \
             'quality_change', 'error', 'session_end') THEN payload ELSE '' END \
             FROM telemetry_events WHERE owner = ",
        );
        sql.str(owner)
            .push(" AND session_id IN ")
            .list(sessions.iter().map(String::as_str))
            .push(" ORDER BY session_id");
        let mut derived = Vec::with_capacity(sessions.len());
        let mut derive = |session: &str, evs: &mut Vec<Event>| {
            let dims = records.remove(session).unwrap_or_default();
            if let Some(view) = View::derive(session, evs, &dims) {
                derived.push((view, dims.len() as u64, evs.len() as u64));
            }
        };
        let mut runs = SessionRuns::new();
        let mut rows = bind_all(sqlx::query(&sql.text), &sql.args).fetch(self.store.sink.pool());
        while let Some(r) = rows.try_next().await.map_err(map_err)? {
            let session: &str = r.try_get(0).map_err(map_err)?;
            let ts: i64 = r.try_get(1).map_err(map_err)?;
            let t: &str = r.try_get(2).map_err(map_err)?;
            let event = match EventType::from_wire(t) {
                Some(t) if needs_payload(t) => {
                    Some(Event::parse(ts, t, r.try_get(3).map_err(map_err)?))
                }
                Some(t) => Some(Event::new(ts, t)),
                None => None,
            };
            runs.push(session, event, &mut derive);
        }
        runs.finish(&mut derive);
        self.write_derived(owner, derived, stats).await
    }
}

/// The SQLite refresher's streamed event reads: rows arrive in session order, and
/// each session's run of items goes to `derive` as soon as the next session starts, so only
/// one session's events are held at a time.
struct SessionRuns<T> {
    session: String,
    items: Vec<T>,
}

impl<T> SessionRuns<T> {
    pub fn new() -> Self {
        SessionRuns {
            session: String::new(),
            items: Vec::new(),
        }
    }

    /// Adds a row of `session` (`None`: a row that yields no item, e.g. an unknown type).
    pub fn push(
        &mut self,
        session: &str,
        item: Option<T>,
        derive: &mut impl FnMut(&str, &mut Vec<T>),
    ) {
        if session != self.session {
            self.flush(derive);
            session.clone_into(&mut self.session);
        }
        self.items.extend(item);
    }

    /// Hands the last session's run to `derive`.
    pub fn finish(mut self, derive: &mut impl FnMut(&str, &mut Vec<T>)) {
        self.flush(derive);
    }

    fn flush(&mut self, derive: &mut impl FnMut(&str, &mut Vec<T>)) {
        if !self.items.is_empty() {
            derive(&self.session, &mut self.items);
            self.items.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::SessionRuns;

    #[test]
    fn session_runs_hand_over_each_session_once_with_its_items() {
        let mut seen: Vec<(String, Vec<u32>)> = Vec::new();
        let mut derive = |s: &str, items: &mut Vec<u32>| seen.push((s.to_owned(), items.clone()));
        let mut runs = SessionRuns::new();
        runs.push("a", Some(1), &mut derive);
        runs.push("a", Some(2), &mut derive);
        // A row without an item still ends the previous session's run.
        runs.push("b", None, &mut derive);
        runs.push("c", Some(3), &mut derive);
        runs.finish(&mut derive);
        assert_eq!(
            seen,
            vec![("a".to_owned(), vec![1, 2]), ("c".to_owned(), vec![3])]
        );
    }
}
