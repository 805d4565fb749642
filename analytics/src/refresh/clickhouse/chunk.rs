//! One chunk of a ClickHouse refresh step: the chunk's batch records and stored views,
//! its events streamed one session at a time into [`View::derive`], and the derived views
//! (with the tombstones of the days a view moved away from) written in batches.

use std::collections::HashMap;

use clickhouse::insert::Insert;
use clickhouse::Row;
use ingest::EventType;
use serde::Deserialize;

use super::ChRefresh;
use super::SESSION_SET;
use crate::dims::BatchDims;
use crate::event::{needs_payload, Event};
use crate::refresh::{now_ms, RefreshStats};
use crate::store::clickhouse::{map_err, SessionSet, ViewRow};
use crate::store::sql::day_of;
use crate::store::AnalyticsError;
use crate::view::View;

/// Tombstones cover at most this many days after a view's start day (plus any day a
/// stored row of it was read under): a view spanning longer is pathological.
pub(super) const MAX_TOMBSTONE_DAYS: i64 = 366;

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
             FROM telemetry_events WHERE owner = ? AND session_id GLOBAL IN {SESSION_SET} \
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

impl ChRefresh {
    /// The stored views of the sessions in `set` started between `first_day` and
    /// `last_day`: the highest record count each was derived from, and the days it is
    /// stored under.
    pub(super) async fn stored_views(
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
                 WHERE owner = ? AND session_id GLOBAL IN {SESSION_SET} \
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
    pub(super) async fn refresh_chunk(
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
                 WHERE owner = ? AND session_id GLOBAL IN {SESSION_SET} GROUP BY session_id, dims"
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
    pub(super) async fn write_views(
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
pub(super) const WRITE_BATCH: usize = 4096;

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

#[cfg(test)]
mod tests {
    use super::*;

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
